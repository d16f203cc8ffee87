/*
 * basebackup_tar.c: the strict streaming ustar reader.  See basebackup_tar.h.
 *
 * States: collecting a 512-byte header (hdr_used < 512), inside a file's
 * data (data_left > 0), skipping its padding (pad_left > 0), or ended.
 * Nothing is trusted before the header's checksum and every field is
 * checked.
 */
#include "cli/client/basebackup_tar.h"

#include <stdio.h>
#include <string.h>

void bbtar_init(bbtar_reader *r, const bbtar_callbacks *cb)
{
    memset(r, 0, sizeof *r);
    r->cb = *cb;
}

void bbtar_fail(bbtar_reader *r, const char *msg)
{
    if (!r->failed)
        snprintf(r->err, sizeof r->err, "%s", msg);
    r->failed = true;
}

static int fail_at(bbtar_reader *r, const char *what)
{
    char msg[300];
    snprintf(msg, sizeof msg, "bad tar archive at byte %llu: %s", (unsigned long long)r->offset,
             what);
    bbtar_fail(r, msg);
    return -1;
}

/* An octal field: optional leading spaces, octal digits, then NUL or space
 * padding to the end.  Returns false on anything else or overflow. */
static bool parse_octal(const uint8_t *f, size_t width, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < width && f[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < width && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v > (UINT64_MAX >> 3))
            return false;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    if (digits == 0)
        return false;
    for (; i < width; i++)
        if (f[i] != '\0' && f[i] != ' ')
            return false;
    *out = v;
    return true;
}

bool bbtar_name_is_safe(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= BBTAR_NAME_MAX || name[0] == '/')
        return false;
    const char *p = name;
    while (*p != '\0') {
        const char *slash = strchr(p, '/');
        size_t comp = slash ? (size_t)(slash - p) : strlen(p);
        if (comp == 0)
            return false; /* "a//b" or a trailing '/' (stripped by the reader) */
        if ((comp == 1 && p[0] == '.') || (comp == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        for (size_t i = 0; i < comp; i++)
            if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
                return false;
        if (slash == NULL)
            break;
        p = slash + 1;
    }
    return true;
}

static bool all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

/* Copies a NUL-terminated field of at most width bytes; false if it has no
 * NUL and fills the field exactly is allowed (ustar names may use all 100). */
static size_t field_len(const uint8_t *f, size_t width)
{
    size_t n = 0;
    while (n < width && f[n] != '\0')
        n++;
    return n;
}

static int parse_header(bbtar_reader *r)
{
    const uint8_t *h = r->hdr;
    if (all_zero(h, BBTAR_BLOCK)) {
        r->zero_blocks++;
        if (r->zero_blocks == 2)
            r->ended = true;
        return 0;
    }
    if (r->zero_blocks != 0)
        return fail_at(r, "a lone zero block inside the archive");
    uint64_t sum_stored;
    if (!parse_octal(h + 148, 8, &sum_stored))
        return fail_at(r, "the header checksum is not an octal number");
    uint64_t sum = 0;
    for (size_t i = 0; i < BBTAR_BLOCK; i++)
        sum += (i >= 148 && i < 156) ? (uint64_t)' ' : h[i];
    if (sum != sum_stored)
        return fail_at(r, "header checksum mismatch");
    if (memcmp(h + 257, "ustar", 5) != 0 || (h[262] != '\0' && h[262] != ' '))
        return fail_at(r, "not a ustar header");
    char type = (char)h[156];
    if (type != '0' && type != '\0' && type != '5')
        return fail_at(r, "entry type other than a regular file or a directory (links, devices "
                          "and extension headers are refused)");
    uint64_t size, mode;
    if (!parse_octal(h + 124, 12, &size) || !parse_octal(h + 100, 8, &mode))
        return fail_at(r, "size or mode is not an octal number");
    if (type == '5' && size != 0)
        return fail_at(r, "a directory with data");
    if (size > BBTAR_MAX_FILE_SIZE)
        return fail_at(r, "file larger than 1 GB");
    if (r->entries >= BBTAR_MAX_ENTRIES)
        return fail_at(r, "too many entries");

    bbtar_entry *e = &r->cur;
    memset(e, 0, sizeof *e);
    size_t plen = field_len(h + 345, 155), nlen = field_len(h, 100);
    if (nlen == 0)
        return fail_at(r, "empty name");
    size_t at = 0;
    if (plen > 0) {
        memcpy(e->name, h + 345, plen);
        e->name[plen] = '/';
        at = plen + 1;
    }
    memcpy(e->name + at, h, nlen);
    at += nlen;
    e->name[at] = '\0';
    while (at > 0 && e->name[at - 1] == '/' && type == '5')
        e->name[--at] = '\0';
    if (!bbtar_name_is_safe(e->name))
        return fail_at(r, "unsafe name (absolute, '.', '..', empty component or control "
                          "character)");
    e->is_dir = type == '5';
    e->size = size;
    e->mode = (uint32_t)(mode & 07777);
    r->entries++;
    r->file_bytes += size;
    if (r->cb.begin != NULL && r->cb.begin(e, r->cb.arg) != 0) {
        if (!r->failed)
            fail_at(r, "the entry was refused");
        return -1;
    }
    if (!e->is_dir) {
        r->in_file = true;
        r->data_left = size;
        r->pad_left = (BBTAR_BLOCK - size % BBTAR_BLOCK) % BBTAR_BLOCK;
        if (size == 0) {
            r->in_file = false;
            if (r->cb.end != NULL && r->cb.end(e, r->cb.arg) != 0) {
                if (!r->failed)
                    fail_at(r, "the entry was refused");
                return -1;
            }
        }
    }
    return 0;
}

int bbtar_feed(bbtar_reader *r, const uint8_t *p, size_t n)
{
    if (r->failed)
        return -1;
    while (n > 0) {
        if (r->offset >= BBTAR_MAX_ARCHIVE)
            return fail_at(r, "archive too large");
        if (r->ended) {
            /* Writers may pad the archive to a record size with zeros. */
            if (!all_zero(p, n))
                return fail_at(r, "data after the end of the archive");
            r->offset += n;
            return 0;
        }
        if (r->in_file) {
            size_t take = r->data_left < n ? (size_t)r->data_left : n;
            if (r->cb.data != NULL && r->cb.data(p, take, r->cb.arg) != 0) {
                if (!r->failed)
                    fail_at(r, "writing the entry's data failed");
                return -1;
            }
            r->data_left -= take;
            r->offset += take;
            p += take;
            n -= take;
            if (r->data_left == 0) {
                r->in_file = false;
                if (r->cb.end != NULL && r->cb.end(&r->cur, r->cb.arg) != 0) {
                    if (!r->failed)
                        fail_at(r, "finishing the entry failed");
                    return -1;
                }
            }
            continue;
        }
        if (r->pad_left > 0) {
            size_t take = r->pad_left < n ? (size_t)r->pad_left : n;
            r->pad_left -= take;
            r->offset += take;
            p += take;
            n -= take;
            continue;
        }
        size_t take = BBTAR_BLOCK - r->hdr_used;
        if (take > n)
            take = n;
        memcpy(r->hdr + r->hdr_used, p, take);
        r->hdr_used += take;
        p += take;
        n -= take;
        if (r->hdr_used < BBTAR_BLOCK) {
            r->offset += take;
            continue;
        }
        r->hdr_used = 0;
        int rc = parse_header(r);
        r->offset += take;
        if (rc != 0)
            return -1;
    }
    return 0;
}

int bbtar_finish(bbtar_reader *r)
{
    if (r->failed)
        return -1;
    if (!r->ended)
        return fail_at(r, r->in_file || r->pad_left > 0
                              ? "the archive is truncated inside a file"
                              : "the archive is truncated (no end-of-archive blocks)");
    return 0;
}
