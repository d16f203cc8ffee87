/*
 * wal_store.c: WAL segment files of one timeline, written through io_uring
 * with group commit.  See wal_store.h for the contract.
 *
 * Positions: write_lsn (accepted by append) >= written_lsn (every write
 * below it has completed) >= flush_lsn (covered by a finished sync round).
 * Writes are kept in a FIFO in LSN order; completions may arrive out of
 * order, written_lsn advances over the completed prefix.  A segment whose
 * writes complete is marked dirty; a sync round fdatasyncs every dirty
 * segment and, when all of them finish, moves flush_lsn to the written_lsn
 * seen when the round started.
 *
 * For: the implementation of wal_store.h.  Not for: consensus or which WAL
 * to keep (acceptor.c, housekeeping.c).
 */
#include "safekeeper/wal_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/strata_assert.h"

/* Segments open for writing at once (from flush_lsn's to write_lsn's). */
#define WAL_STORE_MAX_OPEN 64
#define SEG_NAME_LEN 24

static const uint8_t zero_block[64 * 1024];

typedef enum sync_state { SYNC_NONE = 0, SYNC_TO_SUBMIT, SYNC_SUBMITTED } sync_state;

/* A segment being zero-filled on the thread pool (wal_store_prepare).  The
 * worker reads only its own copy of what it needs. */
typedef struct seg_job {
    uv_work_t req;
    wal_store *ws; /* NULL once the store closed: the result is dropped */
    char dir[PATH_MAX];
    uint32_t seg_size;
    uint64_t segno;
    int result; /* 0 or a negative errno */
} seg_job;

typedef struct seg_file {
    wal_store *owner;
    bool in_use;
    uint64_t segno;
    int fd;
    bool dirty; /* a write completed since the last sync round started */
    sync_state sync;
    unsigned writes_in_flight; /* submitted, not completed */
} seg_file;

typedef struct wal_write {
    struct wal_write *next;
    wal_store *ws;
    uint64_t segno;
    int fd;
    uint64_t offset;
    lsn_t start;
    lsn_t end;
    bool submitted;
    bool done;
    size_t cap;    /* bytes allocated at data */
    uint8_t *data; /* owned */
} wal_write;

struct wal_store {
    char dir[PATH_MAX];
    uint32_t seg_size;
    uring *ring;
    wal_store_flushed_fn on_flushed;
    wal_store_error_fn on_error;
    wal_store_written_fn on_written;
    uv_loop_t *loop;
    wal_store_segment_fn on_segment_ready;
    seg_job *job; /* the segment being created off the loop, or NULL */
    void *arg;
    bool caller_syncs;
    bool link_writes;
    bool submit_requested; /* link_writes: send waiting writes alone */

    lsn_t write_lsn;
    lsn_t written_lsn;
    lsn_t flush_lsn;
    int failed; /* 0 or the first negative errno */

    wal_write *head; /* oldest write not yet counted in written_lsn */
    wal_write *tail;

    bool round_active;
    unsigned rounds_in_flight;
    lsn_t round_target;
    unsigned round_outstanding;
    uint64_t round_start_ns;

    seg_file segs[WAL_STORE_MAX_OPEN];

    uring_waiter space_waiter; /* queued when the shared ring was full */

    uint64_t read_segno; /* cached read descriptor */
    int read_fd;

    wal_store_stats stats;
};

void wal_store_segment_name(uint32_t seg_size, uint64_t segno, char *buf)
{
    uint64_t per_id = 0x100000000ULL / seg_size;
    snprintf(buf, SEG_NAME_LEN + 1, "%08X%08X%08X", 1u, (unsigned)(segno / per_id),
             (unsigned)(segno % per_id));
}

/* Parses "<24 hex>" or "<24 hex>.partial" for timeline 1. */
static bool parse_segment_name(uint32_t seg_size, const char *name, uint64_t *segno, bool *partial)
{
    size_t len = strlen(name);
    if (len == SEG_NAME_LEN)
        *partial = false;
    else if (len == SEG_NAME_LEN + 8 && strcmp(name + SEG_NAME_LEN, ".partial") == 0)
        *partial = true;
    else
        return false;
    unsigned parts[3];
    for (int p = 0; p < 3; p++) {
        unsigned v = 0;
        for (int i = 0; i < 8; i++) {
            char ch = name[p * 8 + i];
            int d;
            if (ch >= '0' && ch <= '9')
                d = ch - '0';
            else if (ch >= 'A' && ch <= 'F')
                d = ch - 'A' + 10;
            else
                return false;
            v = v * 16 + (unsigned)d;
        }
        parts[p] = v;
    }
    uint64_t per_id = 0x100000000ULL / seg_size;
    if (parts[0] != 1 || parts[2] >= per_id)
        return false;
    *segno = (uint64_t)parts[1] * per_id + parts[2];
    return true;
}

static int seg_path_in(const char *dir, uint32_t seg_size, uint64_t segno, bool partial, char *buf,
                       size_t cap)
{
    char name[SEG_NAME_LEN + 1];
    wal_store_segment_name(seg_size, segno, name);
    int n = snprintf(buf, cap, "%s/%s%s", dir, name, partial ? ".partial" : "");
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int seg_path(const wal_store *ws, uint64_t segno, bool partial, char *buf, size_t cap)
{
    return seg_path_in(ws->dir, ws->seg_size, segno, partial, buf, cap);
}

static void store_fail(wal_store *ws, int err)
{
    STRATA_ASSERT(err < 0);
    if (ws->failed != 0)
        return;
    ws->failed = err;
    if (ws->on_error != NULL)
        ws->on_error(ws->arg, err);
}

static void invalidate_read_cache(wal_store *ws)
{
    if (ws->read_fd >= 0)
        close(ws->read_fd);
    ws->read_fd = -1;
}

static int write_zeros(int fd, uint64_t from, uint64_t to)
{
    while (from < to) {
        size_t n = sizeof zero_block;
        if (to - from < n)
            n = (size_t)(to - from);
        int rc = durable_pwrite_all(fd, zero_block, n, from);
        if (rc != 0)
            return rc;
        from += n;
    }
    return 0;
}

/* Creates segment segno under dir as "<name>.partial", zero-filled,
 * durably; returns an open read-write descriptor or a negative errno.
 * Touches no store: it also runs on the thread pool (seg_job). */
static int create_segment_file(const char *dir, uint32_t seg_size, uint64_t segno)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    int rc = seg_path_in(dir, seg_size, segno, true, path, sizeof path);
    if (rc != 0)
        return rc;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    rc = write_zeros(fd, 0, seg_size);
    if (rc == 0)
        rc = durable_rename(tmp, path); /* fsyncs the file, then the directory */
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    return fd;
}

static int create_segment(wal_store *ws, uint64_t segno)
{
    int fd = create_segment_file(ws->dir, ws->seg_size, segno);
    if (fd >= 0)
        ws->stats.segments_created++;
    return fd;
}

/* Opens an existing segment (".partial" first, then the final name);
 * -ENOENT if neither exists. */
static int open_segment(wal_store *ws, uint64_t segno, int flags)
{
    char path[PATH_MAX];
    for (int attempt = 0; attempt < 3; attempt++) {
        bool partial = attempt != 1; /* partial, final, partial (renamed meanwhile) */
        int rc = seg_path(ws, segno, partial, path, sizeof path);
        if (rc != 0)
            return rc;
        int fd = open(path, flags | O_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno != ENOENT)
            return -errno;
    }
    return -ENOENT;
}

static seg_file *find_seg(wal_store *ws, uint64_t segno)
{
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        if (ws->segs[i].in_use && ws->segs[i].segno == segno)
            return &ws->segs[i];
    }
    return NULL;
}

/* Opens segment segno into a free slot (creating it when create and it is
 * missing; -ENOENT otherwise). */
static int ensure_segment_ex(wal_store *ws, uint64_t segno, bool create, seg_file **out)
{
    seg_file *s = find_seg(ws, segno);
    if (s != NULL) {
        *out = s;
        return 0;
    }
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        if (!ws->segs[i].in_use) {
            s = &ws->segs[i];
            break;
        }
    }
    if (s == NULL)
        return -EBUSY; /* caller let too much WAL pile up unflushed */
    int fd = open_segment(ws, segno, O_RDWR);
    if (fd == -ENOENT && create)
        fd = create_segment(ws, segno);
    if (fd < 0)
        return fd;
    *s = (seg_file){.owner = ws, .in_use = true, .segno = segno, .fd = fd};
    *out = s;
    return 0;
}

static int ensure_segment(wal_store *ws, uint64_t segno, seg_file **out)
{
    return ensure_segment_ex(ws, segno, true, out);
}

/* ---- segments made off the loop thread (wal_store_prepare) ---- */

static void seg_job_work(uv_work_t *req)
{
    seg_job *job = req->data;
    int fd = create_segment_file(job->dir, job->seg_size, job->segno);
    job->result = fd < 0 ? fd : 0;
    if (fd >= 0)
        close(fd); /* wal_store_prepare opens it again on the loop thread */
}

static void seg_job_done(uv_work_t *req, int status)
{
    seg_job *job = req->data;
    wal_store *ws = job->ws;
    int rc = status != 0 ? status : job->result;
    free(job);
    if (ws == NULL)
        return; /* the store was closed meanwhile */
    ws->job = NULL;
    if (rc == 0)
        ws->stats.segments_created++;
    else
        store_fail(ws, rc);
    ws->on_segment_ready(ws->arg, rc);
}

int wal_store_prepare(wal_store *ws, lsn_t lsn, size_t len)
{
    if (ws->failed != 0)
        return -EIO;
    if (ws->loop == NULL || ws->on_segment_ready == NULL || len == 0)
        return 0;
    if (ws->job != NULL)
        return 1;
    for (uint64_t segno = lsn / ws->seg_size; segno <= (lsn + len - 1) / ws->seg_size; segno++) {
        seg_file *s;
        int rc = ensure_segment_ex(ws, segno, false, &s);
        if (rc == 0)
            continue;
        if (rc != -ENOENT)
            return rc;
        seg_job *job = calloc(1, sizeof *job);
        if (job == NULL)
            return -ENOMEM;
        job->req.data = job;
        job->ws = ws;
        snprintf(job->dir, sizeof job->dir, "%s", ws->dir);
        job->seg_size = ws->seg_size;
        job->segno = segno;
        rc = uv_queue_work(ws->loop, &job->req, seg_job_work, seg_job_done);
        if (rc != 0) {
            free(job);
            return rc;
        }
        ws->job = job;
        return 1;
    }
    return 0;
}

static void close_seg(seg_file *s)
{
    STRATA_ASSERT(s->sync == SYNC_NONE);
    close(s->fd);
    s->in_use = false;
}

static void pump(wal_store *ws);

static void on_write_done(void *arg, int res)
{
    wal_write *w = arg;
    wal_store *ws = w->ws;
    w->done = true;
    if (res < 0) {
        store_fail(ws, res);
        return;
    }
    STRATA_ASSERT((size_t)res == w->end - w->start);
    seg_file *s = find_seg(ws, w->segno);
    STRATA_ASSERT(s != NULL);
    STRATA_ASSERT(s->writes_in_flight > 0);
    s->writes_in_flight--;
    /* With linked writes, a write below the running round's target is
     * always followed by that round's fdatasync of its segment (chained
     * after it, or submitted once the segment has no write in flight). */
    if (!(ws->link_writes && ws->round_active && w->end <= ws->round_target &&
          s->sync != SYNC_NONE))
        s->dirty = true;
    lsn_t before = ws->written_lsn;
    while (ws->head != NULL && ws->head->done) {
        wal_write *done = ws->head;
        STRATA_ASSERT(done->start == ws->written_lsn);
        ws->written_lsn = done->end;
        ws->head = done->next;
        if (ws->head == NULL)
            ws->tail = NULL;
        free(done->data);
        free(done);
    }
    pump(ws);
    if (ws->written_lsn != before && ws->on_written != NULL && ws->failed == 0)
        ws->on_written(ws->arg, ws->written_lsn);
}

static void finish_round(wal_store *ws)
{
    STRATA_ASSERT(ws->round_active && ws->round_outstanding == 0);
    /* Never report as durable what has not been written (and synced). */
    STRATA_ASSERT(ws->written_lsn >= ws->round_target);
    ws->round_active = false;
    ws->rounds_in_flight--;
    /* wal_store_flush_now may have gone further meanwhile. */
    if (ws->round_target > ws->flush_lsn)
        ws->flush_lsn = ws->round_target;
    uint64_t usec = (uv_hrtime() - ws->round_start_ns) / 1000;

    /* Segments wholly below flush_lsn are complete and durable: give them
     * their final name. */
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        seg_file *s = &ws->segs[i];
        if (!s->in_use || (s->segno + 1) * (uint64_t)ws->seg_size > ws->flush_lsn)
            continue;
        STRATA_ASSERT(!s->dirty);
        uint64_t segno = s->segno;
        close_seg(s);
        char from[PATH_MAX], to[PATH_MAX];
        if (seg_path(ws, segno, true, from, sizeof from) == 0 &&
            seg_path(ws, segno, false, to, sizeof to) == 0 && access(from, F_OK) == 0) {
            int rc = durable_rename(from, to);
            if (rc != 0) {
                store_fail(ws, rc);
                return;
            }
        }
    }
    pump(ws); /* starts the next round at once if more was written */
    if (ws->on_flushed != NULL && ws->failed == 0)
        ws->on_flushed(ws->arg, ws->flush_lsn, usec);
}

static void on_sync_done(void *arg, int res)
{
    seg_file *s = arg;
    wal_store *ws = s->owner;
    STRATA_ASSERT(s->sync == SYNC_SUBMITTED && ws->round_active && ws->round_outstanding > 0);
    s->sync = SYNC_NONE;
    ws->round_outstanding--;
    ws->stats.fdatasyncs++;
    if (res < 0) {
        store_fail(ws, res);
        return;
    }
    if (ws->round_outstanding == 0)
        finish_round(ws);
    else
        pump(ws);
}

/*
 * Judges one submission's result: true if it was queued.  Otherwise the
 * ring is full (wait for a freed slot, then submit_pending runs again) or
 * the store has failed; either way the caller stops submitting.
 */
static bool submitted(wal_store *ws, int rc)
{
    if (rc == -EBUSY)
        uring_wait_for_space(ws->ring, &ws->space_waiter);
    else if (rc != 0)
        store_fail(ws, rc);
    return rc == 0;
}

/* Submits queued writes and sync-round fdatasyncs while the ring has room. */
static void submit_pending_plain(wal_store *ws)
{
    for (wal_write *w = ws->head; w != NULL; w = w->next) {
        if (w->submitted)
            continue;
        int rc =
            uring_write(ws->ring, w->fd, w->data, w->end - w->start, w->offset, on_write_done, w);
        if (!submitted(ws, rc))
            return;
        w->submitted = true;
        find_seg(ws, w->segno)->writes_in_flight++;
    }
    if (!ws->round_active)
        return;
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        seg_file *s = &ws->segs[i];
        if (!s->in_use || s->sync != SYNC_TO_SUBMIT)
            continue;
        if (!submitted(ws, uring_fdatasync(ws->ring, s->fd, on_sync_done, s)))
            return;
        s->sync = SYNC_SUBMITTED;
    }
}

/*
 * link_writes: for each segment of the running round with no write in
 * flight, its waiting writes below the round's target linked ahead of its
 * fdatasync; then waiting writes asked for by wal_store_submit_writes; all
 * in one submission.
 */
static void submit_pending_linked(wal_store *ws)
{
    bool stop = false;
    if (ws->round_active) {
        for (int i = 0; i < WAL_STORE_MAX_OPEN && !stop; i++) {
            seg_file *s = &ws->segs[i];
            if (!s->in_use || s->sync != SYNC_TO_SUBMIT || s->writes_in_flight > 0)
                continue;
            for (wal_write *w = ws->head; w != NULL && w->start < ws->round_target; w = w->next) {
                if (w->submitted || w->segno != s->segno)
                    continue;
                int rc = uring_write_ex(ws->ring, w->fd, w->data, w->end - w->start, w->offset,
                                        URING_LINK | URING_DEFER, on_write_done, w);
                if (!submitted(ws, rc)) {
                    stop = true;
                    break;
                }
                w->submitted = true;
                s->writes_in_flight++;
            }
            if (stop)
                break;
            int rc = uring_fdatasync_ex(ws->ring, s->fd, URING_DEFER, on_sync_done, s);
            if (!submitted(ws, rc))
                break;
            s->sync = SYNC_SUBMITTED;
        }
    }
    if (!stop && ws->submit_requested) {
        wal_write *w;
        for (w = ws->head; w != NULL; w = w->next) {
            if (w->submitted)
                continue;
            int rc = uring_write_ex(ws->ring, w->fd, w->data, w->end - w->start, w->offset,
                                    URING_DEFER, on_write_done, w);
            if (!submitted(ws, rc))
                break;
            w->submitted = true;
            find_seg(ws, w->segno)->writes_in_flight++;
        }
        if (w == NULL)
            ws->submit_requested = false;
    }
    int rc = uring_submit(ws->ring);
    if (rc != 0)
        store_fail(ws, rc); /* the dropped operations never call back */
}

static void submit_pending(wal_store *ws)
{
    if (ws->link_writes)
        submit_pending_linked(ws);
    else
        submit_pending_plain(ws);
}

static bool any_dirty(const wal_store *ws)
{
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        if (ws->segs[i].in_use && ws->segs[i].dirty)
            return true;
    }
    return false;
}

static void start_round(wal_store *ws)
{
    STRATA_ASSERT(!ws->round_active);
    STRATA_ASSERT(ws->link_writes ? ws->write_lsn > ws->flush_lsn
                                  : ws->written_lsn > ws->flush_lsn);
    ws->round_active = true;
    ws->round_target = ws->link_writes ? ws->write_lsn : ws->written_lsn;
    if (ws->link_writes) {
        for (wal_write *w = ws->head; w != NULL; w = w->next) {
            seg_file *s = find_seg(ws, w->segno);
            STRATA_ASSERT(s != NULL);
            s->dirty = true; /* not yet written: the round syncs it after */
        }
    }
    ws->round_outstanding = 0;
    ws->round_start_ns = uv_hrtime();
    ws->stats.sync_rounds++;
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        seg_file *s = &ws->segs[i];
        if (!s->in_use || !s->dirty)
            continue;
        s->dirty = false;
        s->sync = SYNC_TO_SUBMIT;
        ws->round_outstanding++;
    }
    STRATA_ASSERT(ws->round_outstanding > 0);
    ws->rounds_in_flight++;
    if (ws->rounds_in_flight > ws->stats.max_syncs_in_flight)
        ws->stats.max_syncs_in_flight = ws->rounds_in_flight;
}

static void on_ring_space(void *arg)
{
    wal_store *ws = arg;
    if (ws->failed == 0)
        submit_pending(ws);
}

/* Moves everything forward: submit what waits, start a round if due. */
static void pump(wal_store *ws)
{
    if (ws->failed != 0)
        return;
    if (!ws->caller_syncs && !ws->round_active && ws->written_lsn > ws->flush_lsn && any_dirty(ws))
        start_round(ws);
    submit_pending(ws);
}

int wal_store_open(const wal_store_config *cfg, wal_store **out)
{
    *out = NULL;
    if (cfg->seg_size < 64 * 1024 || cfg->seg_size > (1u << 30) ||
        (cfg->seg_size & (cfg->seg_size - 1)) != 0 || cfg->ring == NULL || cfg->dir == NULL)
        return -EINVAL;
    wal_store *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return -ENOMEM;
    if (snprintf(ws->dir, sizeof ws->dir, "%s", cfg->dir) >= (int)sizeof ws->dir) {
        free(ws);
        return -ENAMETOOLONG;
    }
    ws->seg_size = cfg->seg_size;
    ws->ring = cfg->ring;
    ws->on_flushed = cfg->on_flushed;
    ws->on_error = cfg->on_error;
    ws->on_written = cfg->on_written;
    ws->loop = cfg->loop;
    ws->on_segment_ready = cfg->on_segment_ready;
    ws->arg = cfg->arg;
    ws->caller_syncs = cfg->caller_syncs;
    ws->link_writes = cfg->caller_syncs && cfg->link_writes;
    ws->read_fd = -1;
    ws->space_waiter.fn = on_ring_space;
    ws->space_waiter.arg = ws;

    /* Tidy up after a crash: leftover temporaries go; a ".partial" that is
     * not the newest segment was complete and synced but not yet renamed. */
    DIR *d = opendir(ws->dir);
    if (d == NULL) {
        int rc = -errno;
        free(ws);
        return rc;
    }
    uint64_t newest = 0;
    bool any = false;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t segno;
        bool partial;
        size_t len = strlen(de->d_name);
        if (len > 4 && len < 64 && strcmp(de->d_name + len - 4, ".tmp") == 0) {
            char base[64], path[PATH_MAX];
            memcpy(base, de->d_name, len - 4);
            base[len - 4] = '\0';
            if (parse_segment_name(ws->seg_size, base, &segno, &partial) &&
                snprintf(path, sizeof path, "%s/%s", ws->dir, de->d_name) < (int)sizeof path)
                unlink(path);
            continue;
        }
        if (parse_segment_name(ws->seg_size, de->d_name, &segno, &partial)) {
            if (!any || segno > newest)
                newest = segno;
            any = true;
        }
    }
    rewinddir(d);
    while (any && (de = readdir(d)) != NULL) {
        uint64_t segno;
        bool partial;
        if (parse_segment_name(ws->seg_size, de->d_name, &segno, &partial) && partial &&
            segno < newest) {
            /* After a kill its last writes may be in the page cache only:
             * sync it before it gets the name of a complete segment. */
            char from[PATH_MAX], to[PATH_MAX];
            if (seg_path(ws, segno, true, from, sizeof from) == 0 &&
                seg_path(ws, segno, false, to, sizeof to) == 0) {
                int fd = open(from, O_RDONLY | O_CLOEXEC);
                int rc = fd < 0 ? -errno : durable_fsync_fd(fd);
                if (fd >= 0)
                    close(fd);
                if (rc == 0 && rename(from, to) != 0)
                    rc = -errno;
                if (rc != 0) {
                    closedir(d);
                    free(ws);
                    return rc;
                }
            }
        }
    }
    closedir(d);
    int rc = durable_fsync_dir(ws->dir);
    if (rc != 0) {
        free(ws);
        return rc;
    }
    *out = ws;
    return 0;
}

void wal_store_close(wal_store *ws)
{
    if (ws == NULL)
        return;
    if (ws->job != NULL)
        ws->job->ws = NULL; /* it finishes on its own; seg_job_done drops it */
    uring_cancel_wait(ws->ring, &ws->space_waiter);
    while (ws->head != NULL) {
        wal_write *w = ws->head;
        ws->head = w->next;
        free(w->data);
        free(w);
    }
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        if (ws->segs[i].in_use)
            close(ws->segs[i].fd);
    }
    invalidate_read_cache(ws);
    free(ws);
}

int wal_store_append(wal_store *ws, lsn_t lsn, const void *data, size_t len)
{
    if (ws->failed != 0)
        return -EIO;
    if (lsn != ws->write_lsn || ws->write_lsn == LSN_INVALID)
        return -EINVAL;
    if (len == 0)
        return 0;
    if (len > LSN_MAX - lsn)
        return -EINVAL;
    const uint8_t *p = data;
    while (len > 0) {
        uint64_t segno = ws->write_lsn / ws->seg_size;
        uint64_t off = ws->write_lsn % ws->seg_size;
        size_t piece = ws->seg_size - off < len ? (size_t)(ws->seg_size - off) : len;
        seg_file *s;
        int rc = ensure_segment(ws, segno, &s);
        if (rc != 0) {
            store_fail(ws, rc);
            return rc;
        }
        wal_write *t = ws->tail;
        if (ws->link_writes && t != NULL && !t->submitted && t->segno == segno &&
            t->end == ws->write_lsn) {
            /* Still waiting for its round: grow it (one write, not two). */
            size_t used = (size_t)(t->end - t->start);
            if (used + piece > t->cap) {
                size_t cap = t->cap * 2 > used + piece ? t->cap * 2 : used + piece;
                uint8_t *d = realloc(t->data, cap);
                if (d == NULL) {
                    store_fail(ws, -ENOMEM);
                    return -ENOMEM;
                }
                t->data = d;
                t->cap = cap;
            }
            memcpy(t->data + used, p, piece);
            t->end += piece;
        } else {
            wal_write *w = malloc(sizeof *w);
            uint8_t *d = malloc(piece);
            if (w == NULL || d == NULL) {
                free(w);
                free(d);
                store_fail(ws, -ENOMEM);
                return -ENOMEM;
            }
            *w = (wal_write){.ws = ws,
                             .segno = segno,
                             .fd = s->fd,
                             .offset = off,
                             .start = ws->write_lsn,
                             .end = ws->write_lsn + piece,
                             .cap = piece,
                             .data = d};
            memcpy(w->data, p, piece);
            if (ws->tail != NULL)
                ws->tail->next = w;
            else
                ws->head = w;
            ws->tail = w;
        }
        ws->write_lsn += piece;
        p += piece;
        len -= piece;
        ws->stats.bytes_written += piece;
    }
    ws->stats.appends++;
    if (!ws->link_writes)
        submit_pending(ws);
    return ws->failed;
}

int wal_store_submit_writes(wal_store *ws)
{
    if (ws->failed != 0)
        return -EIO;
    if (!ws->link_writes)
        return 0;
    ws->submit_requested = true;
    submit_pending(ws);
    return ws->failed;
}

bool wal_store_idle(const wal_store *ws)
{
    return ws->head == NULL && !ws->round_active;
}

int wal_store_sync_begin(wal_store *ws, lsn_t *covers)
{
    *covers = ws->flush_lsn;
    if (ws->failed != 0)
        return -EIO;
    if (ws->round_active)
        return -EBUSY;
    bool nothing_new = ws->written_lsn <= ws->flush_lsn || !any_dirty(ws);
    if (ws->link_writes ? ws->head == NULL && nothing_new : nothing_new) {
        /* flush_now already covered it (or nothing was written). */
        if (ws->written_lsn > ws->flush_lsn)
            ws->flush_lsn = ws->written_lsn;
        *covers = ws->flush_lsn;
        return 1;
    }
    start_round(ws);
    *covers = ws->round_target;
    submit_pending(ws);
    return ws->failed != 0 ? -EIO : 0;
}

int wal_store_flush_now(wal_store *ws)
{
    if (ws->failed != 0)
        return -EIO;
    lsn_t target = ws->written_lsn;
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        seg_file *s = &ws->segs[i];
        /* A segment in the running round holds completed writes that are
         * not dirty (the round's fdatasync is to sync them) but are not
         * durable until that fdatasync completes: sync it here too, or a
         * vote would report them flushed before they are. */
        if (!s->in_use || (!s->dirty && s->sync == SYNC_NONE))
            continue;
        int rc = durable_fdatasync_fd(s->fd);
        ws->stats.fdatasyncs++;
        if (rc != 0) {
            store_fail(ws, rc);
            return rc;
        }
        s->dirty = false;
    }
    if (target > ws->flush_lsn)
        ws->flush_lsn = target;
    return 0;
}

lsn_t wal_store_written_lsn(const wal_store *ws)
{
    return ws->written_lsn;
}

/* Segments present on disk: calls fn for each; stops on a negative return. */
typedef int (*seg_visit_fn)(wal_store *ws, uint64_t segno, bool partial, void *arg);

static int visit_segments(wal_store *ws, seg_visit_fn fn, void *arg)
{
    DIR *d = opendir(ws->dir);
    if (d == NULL)
        return -errno;
    int rc = 0;
    struct dirent *de;
    while (rc >= 0 && (de = readdir(d)) != NULL) {
        uint64_t segno;
        bool partial;
        if (parse_segment_name(ws->seg_size, de->d_name, &segno, &partial))
            rc = fn(ws, segno, partial, arg);
    }
    closedir(d);
    return rc < 0 ? rc : 0;
}

static int unlink_segment(wal_store *ws, uint64_t segno, bool partial)
{
    char path[PATH_MAX];
    int rc = seg_path(ws, segno, partial, path, sizeof path);
    if (rc == 0 && unlink(path) != 0 && errno != ENOENT)
        rc = -errno;
    if (rc == 0) {
        seg_file *s = find_seg(ws, segno);
        if (s != NULL)
            close_seg(s);
        if (ws->read_fd >= 0 && ws->read_segno == segno)
            invalidate_read_cache(ws);
    }
    return rc;
}

static int visit_truncate(wal_store *ws, uint64_t segno, bool partial, void *arg)
{
    uint64_t keep = *(uint64_t *)arg;
    if (segno > keep)
        return unlink_segment(ws, segno, partial);
    return 0;
}

int wal_store_truncate(wal_store *ws, lsn_t lsn)
{
    if (ws->failed != 0)
        return -EIO;
    if (!wal_store_idle(ws))
        return -EBUSY;
    if (lsn == LSN_INVALID)
        return -EINVAL;
    uint64_t segno = lsn / ws->seg_size;
    uint64_t off = lsn % ws->seg_size;
    for (int i = 0; i < WAL_STORE_MAX_OPEN; i++) {
        if (ws->segs[i].in_use)
            close_seg(&ws->segs[i]);
    }
    invalidate_read_cache(ws);

    int rc = visit_segments(ws, visit_truncate, &segno);
    if (rc != 0)
        return rc;
    int fd = open_segment(ws, segno, O_RDWR);
    if (fd >= 0) {
        rc = write_zeros(fd, off, ws->seg_size);
        if (rc == 0)
            rc = durable_fdatasync_fd(fd);
        close(fd);
        if (rc != 0)
            return rc;
        char partial[PATH_MAX], final[PATH_MAX];
        if (seg_path(ws, segno, true, partial, sizeof partial) == 0 &&
            seg_path(ws, segno, false, final, sizeof final) == 0 && access(final, F_OK) == 0 &&
            rename(final, partial) != 0)
            return -errno;
    } else if (fd != -ENOENT) {
        return fd;
    }
    rc = durable_fsync_dir(ws->dir);
    if (rc != 0)
        return rc;
    ws->write_lsn = ws->written_lsn = ws->flush_lsn = lsn;
    return 0;
}

int wal_store_sync_range(wal_store *ws, lsn_t from, lsn_t to)
{
    if (ws->failed != 0)
        return -EIO;
    for (uint64_t segno = from / ws->seg_size; segno <= to / ws->seg_size; segno++) {
        int fd = open_segment(ws, segno, O_RDONLY);
        if (fd == -ENOENT)
            continue; /* the end lies exactly at a segment start */
        if (fd < 0)
            return fd;
        int rc = durable_fsync_fd(fd);
        close(fd);
        if (rc != 0)
            return rc;
    }
    return durable_fsync_dir(ws->dir);
}

static int visit_newest(wal_store *ws, uint64_t segno, bool partial, void *arg)
{
    (void)ws;
    (void)partial;
    uint64_t *newest = arg;
    if (segno + 1 > *newest)
        *newest = segno + 1;
    return 0;
}

lsn_t wal_store_newest_segment_lsn(wal_store *ws)
{
    uint64_t newest_plus_one = 0;
    if (visit_segments(ws, visit_newest, &newest_plus_one) != 0 || newest_plus_one == 0)
        return LSN_INVALID;
    return (newest_plus_one - 1) * ws->seg_size;
}

ssize_t wal_store_read(wal_store *ws, lsn_t lsn, void *buf, size_t len)
{
    uint64_t segno = lsn / ws->seg_size;
    uint64_t off = lsn % ws->seg_size;
    if (len > ws->seg_size - off)
        len = (size_t)(ws->seg_size - off);
    if (ws->read_fd < 0 || ws->read_segno != segno) {
        invalidate_read_cache(ws);
        int fd = open_segment(ws, segno, O_RDONLY);
        if (fd < 0)
            return fd;
        ws->read_fd = fd;
        ws->read_segno = segno;
    }
    return durable_pread_all(ws->read_fd, buf, len, off);
}

typedef struct remove_ctx {
    uint64_t below;
    int removed;
} remove_ctx;

static int visit_remove(wal_store *ws, uint64_t segno, bool partial, void *arg)
{
    remove_ctx *ctx = arg;
    if (segno >= ctx->below)
        return 0;
    int rc = unlink_segment(ws, segno, partial);
    if (rc == 0)
        ctx->removed++;
    return rc;
}

int wal_store_remove_below(wal_store *ws, lsn_t horizon)
{
    remove_ctx ctx = {.below = horizon / ws->seg_size, .removed = 0};
    /* Never touch what is being written or not yet durable. */
    uint64_t flush_seg = ws->flush_lsn / ws->seg_size;
    if (ctx.below > flush_seg)
        ctx.below = flush_seg;
    int rc = visit_segments(ws, visit_remove, &ctx);
    if (rc != 0)
        return rc;
    if (ctx.removed > 0) {
        rc = durable_fsync_dir(ws->dir);
        if (rc != 0)
            return rc;
        ws->stats.segments_removed += (uint64_t)ctx.removed;
    }
    return ctx.removed;
}

typedef struct oldest_ctx {
    bool any;
    uint64_t segno;
} oldest_ctx;

static int visit_oldest(wal_store *ws, uint64_t segno, bool partial, void *arg)
{
    (void)ws;
    (void)partial;
    oldest_ctx *ctx = arg;
    if (!ctx->any || segno < ctx->segno)
        ctx->segno = segno;
    ctx->any = true;
    return 0;
}

lsn_t wal_store_oldest_lsn(const wal_store *ws)
{
    oldest_ctx ctx = {0};
    if (visit_segments((wal_store *)ws, visit_oldest, &ctx) != 0 || !ctx.any)
        return LSN_INVALID;
    return ctx.segno * (uint64_t)ws->seg_size;
}

lsn_t wal_store_write_lsn(const wal_store *ws)
{
    return ws->write_lsn;
}

lsn_t wal_store_flush_lsn(const wal_store *ws)
{
    return ws->flush_lsn;
}

uint64_t wal_store_unflushed_bytes(const wal_store *ws)
{
    return ws->write_lsn - ws->flush_lsn;
}

const wal_store_stats *wal_store_get_stats(const wal_store *ws)
{
    return &ws->stats;
}
