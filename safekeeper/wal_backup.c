/*
 * wal_backup.c: closed WAL segments to the object store, one worker thread
 * for every timeline of the safekeeper.  See wal_backup.h for the contract.
 *
 * Per timeline the worker keeps: when it first saw a closed segment waiting
 * (the stagger counts from then, and is not paid again for each segment of
 * a backlog), and when the next attempt after a failure is due.  Shared
 * with the loop thread under b->mu: what the loop tells (segment size,
 * committed end, oldest local segment) and the status.
 *
 * For: the worker thread, the stagger, retries with backoff and the status.
 * Not for: the horizons (wal_horizon.c) or the local WAL (wal_store.c).
 */
#include "safekeeper/wal_backup.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/strata_assert.h"
#include "safekeeper/wal_store.h"

#define WAL_BACKUP_MAX_TIMELINES 1024
#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 30000u
#define IDLE_WAIT_MS 1000u
#define PRUNE_RETRY_MS 30000u

struct wal_backup_tl {
    wal_backup *b;
    strata_id tenant;
    strata_id timeline;
    char dir[PATH_MAX];
    char name[80]; /* tenant/timeline, for logs */

    /* Under b->mu. */
    uint32_t seg_size;
    lsn_t committed;
    lsn_t oldest_local;
    lsn_t unneeded;
    uint32_t rank;
    wal_backup_status st;

    /* Worker thread only. */
    bool waiting; /* a closed segment has been waiting since waiting_since_ms */
    uint64_t waiting_since_ms;
    uint64_t retry_at_ms; /* after a failure: no attempt before */
    uint32_t backoff_ms;
    bool gap_logged;
    lsn_t pruned_below; /* wal/ objects below it were deleted (0: none yet) */
    uint64_t prune_retry_at_ms;
};

struct wal_backup {
    remote_storage *rs;
    uint32_t delay_ms;
    wal_backup_metrics m;
    pthread_t thread;
    bool started;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool kicked;
    int n;
    wal_backup_tl *tls[WAL_BACKUP_MAX_TIMELINES];
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void wal_backup_key(const strata_id *tenant, const strata_id *timeline, uint32_t seg_size,
                    uint64_t segno, char *out, size_t cap)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN], seg[32];
    wal_store_segment_name(seg_size, segno, seg);
    snprintf(out, cap, "tenants/%s/timelines/%s/wal/%s", strata_id_format(tenant, t),
             strata_id_format(timeline, l), seg);
}

/* The local file of a closed segment: its final name, or ".partial" if a
 * crash came between its sync and its rename (the store renames it when it
 * next opens).  0, or -ENOENT. */
static int local_segment(const wal_backup_tl *t, uint32_t seg_size, uint64_t segno, char *path,
                         size_t cap)
{
    char name[32];
    wal_store_segment_name(seg_size, segno, name);
    struct stat sb;
    for (int partial = 0; partial < 2; partial++) {
        snprintf(path, cap, "%s/%s%s", t->dir, name, partial ? ".partial" : "");
        if (stat(path, &sb) == 0) {
            if ((uint64_t)sb.st_size != seg_size)
                return -EIO; /* zero-filled segments are always whole */
            return 0;
        }
    }
    return -ENOENT;
}

/* Backs up one segment: HEAD, then PUT unless a whole copy is there, or
 * unless it is missing and wholly below unneeded (the first member deleted
 * it: putting it back would only be deleted again).  0 uploaded, 1 already
 * there or not needed, or a negative errno with err set (a store that does
 * not answer keeps the segment waiting, and the local WAL with it). */
static int back_up_segment(wal_backup_tl *t, uint32_t seg_size, uint64_t segno, lsn_t unneeded,
                           remote_err *err)
{
    wal_backup *b = t->b;
    char key[REMOTE_MAX_KEY], path[PATH_MAX + 64];
    wal_backup_key(&t->tenant, &t->timeline, seg_size, segno, key, sizeof key);
    int rc = local_segment(t, seg_size, segno, path, sizeof path);
    if (rc != 0) {
        snprintf(err->msg, sizeof err->msg, "local segment %s of %s: %s", key, t->name,
                 rc == -EIO ? "not of the full segment size" : strerror(-rc));
        return rc;
    }
    bool exists = false;
    uint64_t size = 0;
    rc = remote_head(b->rs, key, &exists, &size, err);
    if (rc != 0)
        return rc;
    if (exists && size == seg_size)
        return 1;
    if (!exists && (segno + 1) * seg_size <= unneeded)
        return 1;
    if (exists)
        log_warn("WAL backup of %s: %s holds %llu bytes, not %u: uploading it again", t->name, key,
                 (unsigned long long)size, seg_size);
    rc = remote_put_file(b->rs, key, path, err);
    if (rc != 0)
        return rc;
    failpoint_hit("wal_backup.after_put");
    return 0;
}

/* The outcome of one attempt, into the status and the log: 0 uploaded,
 * 1 found in the store (or deleted as not needed), negative failed. */
static void record(wal_backup_tl *t, int rc, lsn_t end, uint32_t seg, const remote_err *err)
{
    wal_backup *b = t->b;
    pthread_mutex_lock(&b->mu);
    bool was_failing = t->st.failing;
    if (rc >= 0) {
        STRATA_ASSERT(end > t->st.backup_lsn);
        t->st.backup_lsn = end;
        t->st.failing = false;
        if (rc == 0)
            t->st.uploaded++;
        else
            t->st.skipped++;
    } else {
        t->st.errors++;
        t->st.failing = true;
        snprintf(t->st.last_error, sizeof t->st.last_error, "%.*s",
                 (int)sizeof t->st.last_error - 1, err->msg);
    }
    pthread_mutex_unlock(&b->mu);
    if (rc == 0) {
        metrics_counter_inc(b->m.uploaded);
        metrics_counter_add(b->m.bytes, seg);
    } else if (rc == 1) {
        metrics_counter_inc(b->m.skipped);
    } else if (rc < 0) {
        metrics_counter_inc(b->m.errors);
    }
    if (rc < 0 && !was_failing)
        log_warn("WAL backup of %s to %s failing (retrying with backoff): %s", t->name,
                 remote_describe(b->rs), err->msg);
    if (rc >= 0 && was_failing) {
        char e[LSN_FMT_LEN];
        log_info("WAL backup of %s to %s works again: backed up to %s", t->name,
                 remote_describe(b->rs), lsn_format(end, e));
    }
}

/*
 * One step for one timeline: backs up its next closed segment if it is
 * due.  Returns 0 to be called again at once, or how many milliseconds
 * until something may be due.
 */
static uint32_t step(wal_backup_tl *t)
{
    wal_backup *b = t->b;
    pthread_mutex_lock(&b->mu);
    uint32_t seg = t->seg_size;
    lsn_t committed = t->committed, oldest = t->oldest_local, backup = t->st.backup_lsn;
    lsn_t unneeded = t->unneeded;
    uint32_t rank = t->rank;
    pthread_mutex_unlock(&b->mu);
    if (seg == 0 || oldest == LSN_INVALID)
        return IDLE_WAIT_MS;
    STRATA_ASSERT(backup % seg == 0 && oldest % seg == 0);
    lsn_t start = backup;
    if (start < oldest) {
        /* Below the oldest local segment nothing can be uploaded: this
         * timeline starts there, or WAL was removed before the backup was
         * configured, or this safekeeper was seeded from a peer. */
        if (backup != LSN_INVALID && !t->gap_logged) {
            char a[LSN_FMT_LEN], o[LSN_FMT_LEN];
            log_warn("WAL backup of %s: backed up to %s, but local WAL starts at %s; "
                     "continuing from there",
                     t->name, lsn_format(backup, a), lsn_format(oldest, o));
            t->gap_logged = true;
        }
        start = oldest;
    }
    if (start + seg > committed) {
        t->waiting = false; /* caught up */
        return IDLE_WAIT_MS;
    }
    uint64_t now = now_ms();
    if (!t->waiting) {
        t->waiting = true;
        t->waiting_since_ms = now;
    }
    uint64_t due = t->waiting_since_ms + (uint64_t)rank * b->delay_ms;
    if (t->retry_at_ms > due)
        due = t->retry_at_ms;
    if (now < due)
        return (uint32_t)(due - now);
    remote_err err = {{0}};
    int rc = back_up_segment(t, seg, start / seg, unneeded, &err);
    record(t, rc, start + seg, seg, &err);
    if (rc >= 0) {
        t->backoff_ms = 0;
        t->retry_at_ms = 0;
        return 0;
    }
    t->backoff_ms = t->backoff_ms == 0                    ? BACKOFF_FIRST_MS
                    : t->backoff_ms >= BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS
                                                          : 2 * t->backoff_ms;
    t->retry_at_ms = now_ms() + t->backoff_ms;
    return t->backoff_ms;
}

/* Whether key is prefix followed by a 24-hex segment name: only those are
 * the backup's (fixed width: comparing names orders them by LSN). */
static bool is_segment_key(const char *key, const char *prefix, size_t plen)
{
    return strncmp(key, prefix, plen) == 0 && strlen(key + plen) == 24 &&
           strspn(key + plen, "0123456789ABCDEF") == 24;
}

/* Deletes the keys of l that name segments below limit.  0, or -1 with err. */
static int delete_below(wal_backup_tl *t, const remote_listing *l, const char *prefix,
                        const char *limit, size_t *n_deleted, remote_err *err)
{
    const char **keys = calloc(l->n > 0 ? l->n : 1, sizeof *keys);
    if (keys == NULL) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    size_t n = 0, plen = strlen(prefix);
    for (size_t i = 0; i < l->n; i++)
        if (is_segment_key(l->entries[i].key, prefix, plen) && strcmp(l->entries[i].key, limit) < 0)
            keys[n++] = l->entries[i].key;
    int rc = n > 0 ? remote_delete_many(t->b->rs, keys, n, err) : 0;
    free(keys);
    *n_deleted = rc == 0 ? n : 0;
    return rc == 0 ? 0 : -1;
}

/*
 * Rank 0 only: deletes the timeline's wal/ objects wholly below
 * min(what no one needs, the backup LSN), each time that passes a segment
 * boundary.  It lists and deletes every old name, not only the new ones:
 * a safekeeper whose view of the horizon lagged may have put a deleted
 * segment back, and it goes again with the next pass.
 */
static void prune(wal_backup_tl *t)
{
    wal_backup *b = t->b;
    pthread_mutex_lock(&b->mu);
    uint32_t seg = t->seg_size, rank = t->rank;
    lsn_t below = t->unneeded < t->st.backup_lsn ? t->unneeded : t->st.backup_lsn;
    pthread_mutex_unlock(&b->mu);
    if (rank != 0 || seg == 0 || below / seg * seg <= t->pruned_below ||
        now_ms() < t->prune_retry_at_ms)
        return;
    below = below / seg * seg;
    char first[REMOTE_MAX_KEY], limit[REMOTE_MAX_KEY];
    wal_backup_key(&t->tenant, &t->timeline, seg, 0, first, sizeof first);
    wal_backup_key(&t->tenant, &t->timeline, seg, below / seg, limit, sizeof limit);
    first[strlen(first) - 24] = '\0'; /* the wal/ prefix */
    remote_listing l;
    remote_err err = {{0}};
    size_t n = 0;
    int rc = remote_list(b->rs, first, &l, &err);
    if (rc == 0) {
        rc = delete_below(t, &l, first, limit, &n, &err);
        remote_listing_free(&l);
    }
    if (rc != 0) {
        log_warn("WAL backup of %s: cannot delete segments below %s (retrying in %u s): %s",
                 t->name, limit, PRUNE_RETRY_MS / 1000, err.msg);
        metrics_counter_inc(b->m.errors);
        t->prune_retry_at_ms = now_ms() + PRUNE_RETRY_MS;
        return;
    }
    t->pruned_below = below;
    if (n == 0)
        return;
    pthread_mutex_lock(&b->mu);
    t->st.deleted += n;
    pthread_mutex_unlock(&b->mu);
    metrics_counter_add(b->m.deleted, n);
    char e[LSN_FMT_LEN];
    log_info("WAL backup of %s: deleted %zu segments below %s, which no one needs any more",
             t->name, n, lsn_format(below, e));
}

static void *run(void *arg)
{
    wal_backup *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        int n = b->n;
        pthread_mutex_unlock(&b->mu);
        uint32_t wait = IDLE_WAIT_MS;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&b->mu);
            wal_backup_tl *t = b->tls[i];
            bool stop = b->stop;
            pthread_mutex_unlock(&b->mu);
            if (stop)
                break;
            uint32_t w = step(t);
            if (w < wait)
                wait = w;
            prune(t);
        }
        pthread_mutex_lock(&b->mu);
        if (wait > 0 && !b->kicked && !b->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += wait / 1000;
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        }
        b->kicked = false;
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int wal_backup_start(remote_storage *rs, uint32_t delay_ms, const wal_backup_metrics *m,
                     wal_backup **out, char *err, size_t errlen)
{
    wal_backup *b = calloc(1, sizeof *b);
    if (b == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    b->rs = rs;
    b->delay_ms = delay_ms;
    b->m = *m;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    int rc = pthread_create(&b->thread, NULL, run, b);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the WAL backup thread: %s", strerror(rc));
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return -1;
    }
    b->started = true;
    *out = b;
    return 0;
}

void wal_backup_stop(wal_backup *b)
{
    if (b == NULL)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (b->started)
        pthread_join(b->thread, NULL);
    for (int i = 0; i < b->n; i++)
        free(b->tls[i]);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    remote_close(b->rs);
    free(b);
}

const char *wal_backup_describe(const wal_backup *b)
{
    return remote_describe(b->rs);
}

wal_backup_tl *wal_backup_add(wal_backup *b, const strata_id *tenant, const strata_id *timeline,
                              const char *dir, lsn_t backup_lsn)
{
    wal_backup_tl *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->b = b;
    t->tenant = *tenant;
    t->timeline = *timeline;
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    char a[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(t->name, sizeof t->name, "%s/%s", strata_id_format(tenant, a),
             strata_id_format(timeline, l));
    t->st.backup_lsn = backup_lsn;
    pthread_mutex_lock(&b->mu);
    if (b->n >= WAL_BACKUP_MAX_TIMELINES) {
        pthread_mutex_unlock(&b->mu);
        free(t);
        return NULL;
    }
    b->tls[b->n++] = t;
    pthread_mutex_unlock(&b->mu);
    return t;
}

void wal_backup_update(wal_backup_tl *t, const wal_backup_position *pos)
{
    wal_backup *b = t->b;
    uint32_t seg_size = pos->seg_size;
    pthread_mutex_lock(&b->mu);
    bool closed_more = seg_size != 0 && (t->seg_size != seg_size ||
                                         pos->committed / seg_size > t->committed / seg_size);
    t->seg_size = seg_size;
    t->committed = pos->committed;
    t->oldest_local = pos->oldest_local;
    t->unneeded = pos->unneeded;
    t->rank = pos->rank;
    if (closed_more) {
        b->kicked = true;
        pthread_cond_signal(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
}

void wal_backup_get(wal_backup_tl *t, wal_backup_status *out)
{
    pthread_mutex_lock(&t->b->mu);
    *out = t->st;
    pthread_mutex_unlock(&t->b->mu);
}

/* Whether the store holds a whole copy of key: 1 yes, 0 no, -1 error. */
static int whole_in_store(wal_backup *b, const char *key, uint32_t seg_size, char *err,
                          size_t errlen)
{
    remote_err re = {{0}};
    bool exists = false;
    uint64_t size = 0;
    if (remote_head(b->rs, key, &exists, &size, &re) != 0) {
        snprintf(err, errlen, "%s", re.msg);
        return -1;
    }
    return exists && size == seg_size;
}

int wal_backup_fetch(wal_backup *b, const strata_id *tenant, const strata_id *timeline,
                     uint32_t seg_size, uint64_t segno, bool need_next, uint8_t **out, char *err,
                     size_t errlen)
{
    char key[REMOTE_MAX_KEY];
    remote_err re = {{0}};
    void *buf = NULL;
    size_t len = 0;
    int whole = 1;
    if (need_next) {
        wal_backup_key(tenant, timeline, seg_size, segno + 1, key, sizeof key);
        whole = whole_in_store(b, key, seg_size, err, errlen);
    }
    wal_backup_key(tenant, timeline, seg_size, segno, key, sizeof key);
    if (whole == 1)
        whole = whole_in_store(b, key, seg_size, err, errlen);
    if (whole != 1)
        return whole < 0 ? -1 : 1;
    if (remote_get_buf(b->rs, key, seg_size, &buf, &len, &re) != 0) {
        snprintf(err, errlen, "%s", re.msg);
        return -1;
    }
    if (len != seg_size) {
        free(buf);
        return 1; /* replaced meanwhile by a shorter one: not whole */
    }
    *out = buf;
    return 0;
}
