/*
 * walbuf.c: bounded WAL window and pg_wal segment reads.  See walbuf.h.
 */
#include "compute/walproposer/walbuf.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void walbuf_init(walbuf *b, uint8_t *mem, size_t cap)
{
    assert(mem != NULL && cap > 0);
    b->mem = mem;
    b->cap = cap;
    b->start = 0;
    b->end = 0;
}

void walbuf_reset(walbuf *b, lsn_t lsn)
{
    b->start = lsn;
    b->end = lsn;
}

int walbuf_append(walbuf *b, lsn_t lsn, const uint8_t *data, size_t len)
{
    if (lsn != b->end)
        return -1;
    if (len >= b->cap) {
        /* Only the newest cap bytes can stay. */
        data += len - b->cap;
        lsn += len - b->cap;
        len = b->cap;
        b->start = lsn;
        b->end = lsn;
    }
    for (size_t done = 0; done < len;) {
        size_t off = (size_t)((lsn + done) % b->cap);
        size_t n = b->cap - off;
        if (n > len - done)
            n = len - done;
        memcpy(b->mem + off, data + done, n);
        done += n;
    }
    b->end = lsn + len;
    if (b->end - b->start > b->cap)
        b->start = b->end - b->cap;
    assert(b->end - b->start <= b->cap);
    return 0;
}

bool walbuf_read(const walbuf *b, lsn_t begin, uint8_t *out, size_t len)
{
    if (begin < b->start || begin > b->end || len > b->end - begin)
        return false;
    for (size_t done = 0; done < len;) {
        size_t off = (size_t)((begin + done) % b->cap);
        size_t n = b->cap - off;
        if (n > len - done)
            n = len - done;
        memcpy(out + done, b->mem + off, n);
        done += n;
    }
    return true;
}

void walbuf_segment_name(uint32_t tli, uint32_t seg_size, lsn_t lsn, char name[25])
{
    uint64_t segno = lsn / seg_size;
    uint64_t per_xlogid = UINT64_C(0x100000000) / seg_size;

    snprintf(name, 25, "%08X%08X%08X", tli, (uint32_t)(segno / per_xlogid),
             (uint32_t)(segno % per_xlogid));
}

int walbuf_read_segments(const char *waldir, uint32_t tli, uint32_t seg_size, lsn_t begin,
                         uint8_t *out, size_t len, char *err, size_t errlen)
{
    assert(seg_size > 0 && (seg_size & (seg_size - 1)) == 0);
    while (len > 0) {
        char name[25];
        char path[4096];
        size_t off = (size_t)(begin % seg_size);
        size_t n = seg_size - off;
        int fd;

        if (n > len)
            n = len;
        walbuf_segment_name(tli, seg_size, begin, name);
        snprintf(path, sizeof(path), "%s/%s", waldir, name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open WAL segment \"%s\": %s", path, strerror(errno));
            return -1;
        }
        for (size_t got = 0; got < n;) {
            ssize_t r = pread(fd, out + got, n - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                snprintf(err, errlen, "cannot read %zu bytes at offset %zu of \"%s\": %s", n - got,
                         off + got, path, r < 0 ? strerror(errno) : "file too short");
                close(fd);
                return -1;
            }
            got += (size_t)r;
        }
        close(fd);
        begin += n;
        out += n;
        len -= n;
    }
    return 0;
}
