/*
 * store_datafile.c: writing and parsing the store's data files (see
 * store_datafile.h for the format).
 *
 * For: the flush and GC writers (zstd-compressed, CRC-32C-checked blocks
 * written and fsynced through a private io_uring, two staging buffers so
 * compression overlaps the previous write) and the validating parsers used on
 * every read.
 * Not for: deciding what goes into a file or indexing it (store_flush.c,
 * store_commit.c, store_gc.c).
 */
#include "pageserver/store/store_datafile.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "base/durable.h"
#include "base/strata_assert.h"

static const uint8_t df_magic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'D', 'F'};
#define BLOCK_MAGIC 0x53424C4Bu /* "SBLK" */
/* Staging buffer size: writes are submitted in chunks of about this much. */
#define STAGE_BYTES (1u << 20)

void store_df_header_encode(uint64_t file_id, uint8_t out[STORE_DF_HEADER_LEN])
{
    memset(out, 0, STORE_DF_HEADER_LEN);
    memcpy(out, df_magic, 8);
    put_be32(out + 8, STORE_DF_VERSION);
    put_be64(out + 16, file_id);
    put_be32(out + 24, crc32c(out, 24));
}

int store_df_header_decode(const uint8_t *buf, size_t len, uint64_t *file_id, const char **why)
{
    if (len < STORE_DF_HEADER_LEN) {
        *why = "data file shorter than its header";
        return -1;
    }
    if (memcmp(buf, df_magic, 8) != 0) {
        *why = "not a data file (bad magic)";
        return -1;
    }
    if (get_be32(buf + 24) != crc32c(buf, 24)) {
        *why = "data file header checksum mismatch";
        return -1;
    }
    if (get_be32(buf + 8) != STORE_DF_VERSION) {
        *why = "unsupported data file version";
        return -1;
    }
    *file_id = get_be64(buf + 16);
    return 0;
}

int store_df_block_header_decode(const uint8_t *buf, size_t len, uint32_t *raw_len,
                                 uint32_t *comp_len, const char **why)
{
    if (len < STORE_DF_BLOCK_HEADER_LEN) {
        *why = "block shorter than its header";
        return -1;
    }
    if (get_be32(buf) != BLOCK_MAGIC) {
        *why = "bad block magic";
        return -1;
    }
    uint32_t raw = get_be32(buf + 4), comp = get_be32(buf + 8);
    if (raw == 0 || raw > STORE_DF_MAX_RAW_BLOCK) {
        *why = "block raw length out of range";
        return -1;
    }
    if (comp == 0 || comp > ZSTD_compressBound(STORE_DF_MAX_RAW_BLOCK)) {
        *why = "block compressed length out of range";
        return -1;
    }
    *raw_len = raw;
    *comp_len = comp;
    return 0;
}

int store_df_block_decode(const uint8_t *buf, size_t len, uint8_t **raw, uint32_t *raw_len,
                          const char **why)
{
    uint32_t rl, cl;
    if (store_df_block_header_decode(buf, len, &rl, &cl, why) != 0)
        return -1;
    if ((size_t)cl != len - STORE_DF_BLOCK_HEADER_LEN) {
        *why = "block length differs from its header";
        return -1;
    }
    uint32_t crc = crc32c_update(crc32c_init(), buf, 12);
    crc = crc32c_final(crc32c_update(crc, buf + STORE_DF_BLOCK_HEADER_LEN, cl));
    if (crc != get_be32(buf + 12)) {
        *why = "block checksum mismatch";
        return -1;
    }
    unsigned long long content = ZSTD_getFrameContentSize(buf + STORE_DF_BLOCK_HEADER_LEN, cl);
    if (content != rl) {
        *why = "block frame size differs from its header";
        return -1;
    }
    uint8_t *out = malloc(rl);
    if (out == NULL) {
        *why = "out of memory";
        return -1;
    }
    size_t got = ZSTD_decompress(out, rl, buf + STORE_DF_BLOCK_HEADER_LEN, cl);
    if (ZSTD_isError(got) || got != rl) {
        free(out);
        *why = "block does not decompress";
        return -1;
    }
    *raw = out;
    *raw_len = rl;
    return 0;
}

int store_df_entry_decode(const uint8_t *raw, size_t raw_len, size_t off, const uint8_t **ikey,
                          value_ref *v, size_t *used, const char **why)
{
    if (off > raw_len || raw_len - off < PG_INDEX_KEY_LEN + VALUE_HEADER_LEN) {
        *why = "entry runs past its block";
        return -1;
    }
    pg_key k;
    lsn_t lsn;
    if (!pg_index_key_decode(raw + off, &k, &lsn)) {
        *why = "entry has an invalid key";
        return -1;
    }
    size_t vused;
    if (value_decode(raw + off + PG_INDEX_KEY_LEN, raw_len - off - PG_INDEX_KEY_LEN, v, &vused,
                     why) != 0)
        return -1;
    *ikey = raw + off;
    *used = PG_INDEX_KEY_LEN + vused;
    return 0;
}

void store_df_path(const char *dir, uint64_t file_id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%016llx.dat", dir, (unsigned long long)file_id);
}

bool store_df_parse_name(const char *name, uint64_t *file_id)
{
    if (strlen(name) != 20 || strcmp(name + 16, ".dat") != 0)
        return false;
    uint64_t id = 0;
    for (int i = 0; i < 16; i++) {
        char c = name[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        id = id << 4 | (uint64_t)d;
    }
    *file_id = id;
    return true;
}

/* ---- writer ---- */

typedef struct stage {
    uint8_t *buf;
    size_t len;
    uint64_t file_off; /* where buf[0] goes */
    bool inflight;
} stage;

struct store_df_writer {
    int fd;
    char tmp_path[4200];
    char final_path[4096];
    char dir[4096];
    int level;
    bool finished;
    bool have_ring;
    struct io_uring ring;
    ZSTD_CCtx *cctx;
    uint8_t *raw; /* the block being built */
    size_t raw_len, raw_cap;
    uint8_t *comp;
    size_t comp_cap;
    stage stages[2];
    int cur;           /* the stage being filled */
    uint64_t file_len; /* bytes handed to stages so far */
    store_df_block_info *blocks;
    uint32_t nblocks, blocks_cap;
};

static int ring_wait(store_df_writer *w, stage *s, char *err, size_t errlen);

/* Writes s->buf[done..len) synchronously (short-write continuation). */
static int write_rest(store_df_writer *w, stage *s, size_t done, char *err, size_t errlen)
{
    int rc = durable_pwrite_all(w->fd, s->buf + done, s->len - done, s->file_off + done);
    if (rc != 0) {
        snprintf(err, errlen, "write data file %s: %s", w->tmp_path, strerror(-rc));
        return -1;
    }
    return 0;
}

/* Starts writing stage s (asynchronously when the ring is there). */
static int stage_submit(store_df_writer *w, stage *s, char *err, size_t errlen)
{
    if (s->len == 0)
        return 0;
    if (!w->have_ring) {
        if (write_rest(w, s, 0, err, errlen) != 0)
            return -1;
        s->len = 0;
        return 0;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    if (sqe == NULL) {
        snprintf(err, errlen, "io_uring submission queue full");
        return -1;
    }
    io_uring_prep_write(sqe, w->fd, s->buf, (unsigned)s->len, s->file_off);
    io_uring_sqe_set_data(sqe, s);
    int rc = io_uring_submit(&w->ring);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring submit: %s", strerror(-rc));
        return -1;
    }
    s->inflight = true;
    return 0;
}

/* Waits for stage s's write to complete (at most one write is in flight). */
static int ring_wait(store_df_writer *w, stage *s, char *err, size_t errlen)
{
    if (!s->inflight)
        return 0;
    struct io_uring_cqe *cqe;
    int rc;
    do {
        rc = io_uring_wait_cqe(&w->ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring wait: %s", strerror(-rc));
        return -1;
    }
    int res = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
    s->inflight = false;
    if (res < 0) {
        snprintf(err, errlen, "write data file %s: %s", w->tmp_path, strerror(-res));
        return -1;
    }
    if ((size_t)res < s->len && write_rest(w, s, (size_t)res, err, errlen) != 0)
        return -1;
    s->len = 0;
    return 0;
}

/* Appends bytes to the current stage, rotating stages when it is full. */
static int stage_append(store_df_writer *w, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    while (n > 0) {
        stage *s = &w->stages[w->cur];
        if (s->len == 0)
            s->file_off = w->file_len;
        size_t room = STAGE_BYTES - s->len;
        size_t take = n < room ? n : room;
        memcpy(s->buf + s->len, p, take);
        s->len += take;
        w->file_len += take;
        p += take;
        n -= take;
        if (s->len == STAGE_BYTES) {
            if (stage_submit(w, s, err, errlen) != 0)
                return -1;
            w->cur ^= 1;
            if (ring_wait(w, &w->stages[w->cur], err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

/* Compresses the raw block under construction and stages it. */
static int block_finish(store_df_writer *w, char *err, size_t errlen)
{
    if (w->raw_len == 0)
        return 0;
    size_t bound = ZSTD_compressBound(w->raw_len);
    if (bound + STORE_DF_BLOCK_HEADER_LEN > w->comp_cap) {
        uint8_t *c = realloc(w->comp, bound + STORE_DF_BLOCK_HEADER_LEN);
        if (c == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        w->comp = c;
        w->comp_cap = bound + STORE_DF_BLOCK_HEADER_LEN;
    }
    size_t cl = ZSTD_compressCCtx(w->cctx, w->comp + STORE_DF_BLOCK_HEADER_LEN, bound, w->raw,
                                  w->raw_len, w->level);
    if (ZSTD_isError(cl)) {
        snprintf(err, errlen, "zstd: %s", ZSTD_getErrorName(cl));
        return -1;
    }
    put_be32(w->comp, BLOCK_MAGIC);
    put_be32(w->comp + 4, (uint32_t)w->raw_len);
    put_be32(w->comp + 8, (uint32_t)cl);
    uint32_t crc = crc32c_update(crc32c_init(), w->comp, 12);
    crc = crc32c_final(crc32c_update(crc, w->comp + STORE_DF_BLOCK_HEADER_LEN, cl));
    put_be32(w->comp + 12, crc);
    if (w->nblocks == w->blocks_cap) {
        uint32_t cap = w->blocks_cap ? w->blocks_cap * 2 : 64;
        store_df_block_info *b = realloc(w->blocks, cap * sizeof *b);
        if (b == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        w->blocks = b;
        w->blocks_cap = cap;
    }
    w->blocks[w->nblocks].off = w->file_len;
    w->blocks[w->nblocks].len = (uint32_t)(cl + STORE_DF_BLOCK_HEADER_LEN);
    w->nblocks++;
    w->raw_len = 0;
    return stage_append(w, w->comp, cl + STORE_DF_BLOCK_HEADER_LEN, err, errlen);
}

int store_df_writer_open(const char *dir, uint64_t file_id, int zstd_level, store_df_writer **out,
                         char *err, size_t errlen)
{
    store_df_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->fd = -1;
    w->level = zstd_level;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    store_df_path(dir, file_id, w->final_path, sizeof w->final_path);
    snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", w->final_path);
    w->cctx = ZSTD_createCCtx();
    w->raw_cap = STORE_DF_BLOCK_TARGET * 2;
    w->raw = malloc(w->raw_cap);
    w->stages[0].buf = malloc(STAGE_BYTES);
    w->stages[1].buf = malloc(STAGE_BYTES);
    if (w->cctx == NULL || w->raw == NULL || w->stages[0].buf == NULL || w->stages[1].buf == NULL) {
        snprintf(err, errlen, "out of memory");
        store_df_writer_free(w);
        return -1;
    }
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (w->fd < 0) {
        snprintf(err, errlen, "create data file %s: %s", w->tmp_path, strerror(errno));
        store_df_writer_free(w);
        return -1;
    }
    /* A private ring; without io_uring (e.g. forbidden by a sandbox) the
     * same writes go through pwrite/fsync. */
    w->have_ring = io_uring_queue_init(4, &w->ring, 0) == 0;
    uint8_t hdr[STORE_DF_HEADER_LEN];
    store_df_header_encode(file_id, hdr);
    if (stage_append(w, hdr, sizeof hdr, err, errlen) != 0) {
        store_df_writer_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

int store_df_writer_add(store_df_writer *w, const uint8_t ikey[PG_INDEX_KEY_LEN],
                        const uint8_t *value, size_t value_len, store_df_loc *loc, char *err,
                        size_t errlen)
{
    size_t need = PG_INDEX_KEY_LEN + value_len;
    if (value_len > VALUE_HEADER_LEN + VALUE_MAX_PAYLOAD) {
        snprintf(err, errlen, "value too large for a data file");
        return -1;
    }
    if (w->raw_len > 0 && w->raw_len + need > STORE_DF_BLOCK_TARGET) {
        if (block_finish(w, err, errlen) != 0)
            return -1;
    }
    if (w->raw_len + need > w->raw_cap) {
        uint8_t *r = realloc(w->raw, w->raw_len + need);
        if (r == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        w->raw = r;
        w->raw_cap = w->raw_len + need;
    }
    loc->block_no = w->nblocks;
    loc->off_in_block = (uint32_t)w->raw_len;
    loc->entry_len = (uint32_t)need;
    memcpy(w->raw + w->raw_len, ikey, PG_INDEX_KEY_LEN);
    memcpy(w->raw + w->raw_len + PG_INDEX_KEY_LEN, value, value_len);
    w->raw_len += need;
    return 0;
}

static int writer_sync(store_df_writer *w, char *err, size_t errlen)
{
    if (!w->have_ring) {
        int rc = durable_fsync_fd(w->fd);
        if (rc != 0) {
            snprintf(err, errlen, "fsync data file %s: %s", w->tmp_path, strerror(-rc));
            return -1;
        }
        return 0;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    if (sqe == NULL) {
        snprintf(err, errlen, "io_uring submission queue full");
        return -1;
    }
    io_uring_prep_fsync(sqe, w->fd, 0);
    int rc = io_uring_submit(&w->ring);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring submit: %s", strerror(-rc));
        return -1;
    }
    struct io_uring_cqe *cqe;
    do {
        rc = io_uring_wait_cqe(&w->ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring wait: %s", strerror(-rc));
        return -1;
    }
    int res = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
    if (res < 0) {
        snprintf(err, errlen, "fsync data file %s: %s", w->tmp_path, strerror(-res));
        return -1;
    }
    return 0;
}

int store_df_writer_finish(store_df_writer *w, uint64_t *size, char *err, size_t errlen)
{
    if (block_finish(w, err, errlen) != 0)
        goto fail;
    /* The other stage may still be in flight; then the current one. */
    if (ring_wait(w, &w->stages[w->cur ^ 1], err, errlen) != 0)
        goto fail;
    if (stage_submit(w, &w->stages[w->cur], err, errlen) != 0)
        goto fail;
    if (ring_wait(w, &w->stages[w->cur], err, errlen) != 0)
        goto fail;
    if (writer_sync(w, err, errlen) != 0)
        goto fail;
    if (close(w->fd) != 0) {
        w->fd = -1;
        snprintf(err, errlen, "close data file %s: %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    w->fd = -1;
    int rc = durable_rename(w->tmp_path, w->final_path);
    if (rc != 0) {
        snprintf(err, errlen, "rename data file %s: %s", w->tmp_path, strerror(-rc));
        goto fail;
    }
    w->finished = true;
    *size = w->file_len;
    return 0;
fail:
    /* Leave the writer for store_df_writer_free, which removes the file. */
    return -1;
}

const store_df_block_info *store_df_writer_block(const store_df_writer *w, uint32_t block_no)
{
    /* A larger number is a location from another writer. */
    STRATA_ASSERT_MSG(block_no < w->nblocks, "block %u of a writer with %u blocks", block_no,
                      w->nblocks);
    return &w->blocks[block_no];
}

uint32_t store_df_writer_nblocks(const store_df_writer *w)
{
    return w->nblocks;
}

void store_df_writer_free(store_df_writer *w)
{
    if (w == NULL)
        return;
    if (w->have_ring) {
        char ignore[64];
        for (int i = 0; i < 2; i++)
            if (w->stages[i].inflight)
                (void)ring_wait(w, &w->stages[i], ignore, sizeof ignore);
        io_uring_queue_exit(&w->ring);
    }
    if (w->fd >= 0)
        close(w->fd);
    if (!w->finished)
        unlink(w->tmp_path);
    ZSTD_freeCCtx(w->cctx);
    free(w->raw);
    free(w->comp);
    free(w->stages[0].buf);
    free(w->stages[1].buf);
    free(w->blocks);
    free(w);
}
