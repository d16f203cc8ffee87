/*
 * uploader.c: one timeline's upload to object storage (uploader.h).
 *
 * For: the upload thread: data files, then a manifest, then the persisted
 * remote_consistent_lsn, then remote GC; the start-up sweep; retries.
 * Not for: the manifest format (manifest.c), the store's records
 * (store_remote.c).
 *
 * Failpoints (common/base/failpoint.h), in the order a cycle reaches them:
 *   upload.after_data             a data file's PUT returned
 *   upload.after_manifest         the manifest's PUT returned
 *   upload.after_persist          remote_consistent_lsn and seq are in LMDB
 *   remote_gc.after_delete_manifest  old manifests deleted (only when some were)
 *   remote_gc.after_delete_data   unreferenced data objects deleted (only
 *                                 when some were; also in the start sweep)
 *
 * Crash reasoning (docs/storage.md): a manifest is PUT only after every file
 * it names was PUT, and manifests are deleted before the data objects only
 * they named, so no manifest ever names a missing object.  What a crash
 * leaves behind is at most unreferenced data objects (and manifests beyond
 * the newest two), which the start sweep and the next GC delete.  The local
 * store only ever drops files (its own GC) after they left the index, so a
 * file named by the snapshot a manifest comes from is either uploaded
 * already or re-read from an open snapshot.
 *
 * "Uploaded" is this process's knowledge: files it PUT, and files named by
 * the newest remote manifests whose recorded size matches the local file.
 * A data object found remotely but named by no manifest is not trusted (a
 * crash, or a store restored with a lower next_file_id, may have left it);
 * it is uploaded again, replacing it.
 */
#include "pageserver/remote/uploader.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/strata_assert.h"
#include "pageserver/remote/manifest.h"

#define ERR_LEN 512

/* A sorted set of file ids. */
typedef struct id_set {
    uint64_t *ids;
    size_t n, cap;
} id_set;

struct uploader {
    uploader_options o;
    char name[80]; /* "<tenant>/<timeline>" for logs */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* guards stop, wake and status */
    pthread_cond_t cv;
    bool stop, wake;
    uploader_status status;
    _Atomic lsn_t remote_consistent_lsn;

    /* Upload thread only. */
    bool started;      /* the start-up (seq discovery, sweep) is done */
    uint64_t last_seq; /* highest seq known to exist or attempted */
    manifest cur;      /* newest durable manifest (seq 0: none) */
    manifest prev;     /* the one before it (seq 0: none) */
    id_set uploaded;
};

/* ---- process-wide metrics ---- */

static struct {
    pthread_once_t once;
    metrics_counter *bytes, *files, *manifests, *errors, *deleted;
} um = {.once = PTHREAD_ONCE_INIT};

static void register_metrics(void)
{
    metrics_registry *r = metrics_default_registry();
    um.bytes =
        metrics_counter_register(r, "pageserver_remote_upload_bytes_total",
                                 "Data file bytes uploaded to the remote store", 0, NULL, NULL);
    um.files = metrics_counter_register(r, "pageserver_remote_upload_files_total",
                                        "Data files uploaded to the remote store", 0, NULL, NULL);
    um.manifests = metrics_counter_register(r, "pageserver_remote_manifests_total",
                                            "Manifests uploaded (each one moves "
                                            "remote_consistent_lsn)",
                                            0, NULL, NULL);
    um.errors = metrics_counter_register(r, "pageserver_remote_upload_errors_total",
                                         "Upload, listing or remote GC attempts that failed "
                                         "(each is retried)",
                                         0, NULL, NULL);
    um.deleted = metrics_counter_register(r, "pageserver_remote_gc_deleted_objects_total",
                                          "Remote objects deleted by remote GC", 0, NULL, NULL);
}

/* ---- small helpers ---- */

static int64_t now_unix(void)
{
    return (int64_t)time(NULL);
}

static bool id_set_has(const id_set *s, uint64_t id)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ids[mid] == id)
            return true;
        if (s->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int id_set_add(id_set *s, uint64_t id)
{
    if (id_set_has(s, id))
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *n = realloc(s->ids, cap * sizeof *n);
        if (n == NULL)
            return -1;
        s->ids = n;
        s->cap = cap;
    }
    size_t i = s->n;
    while (i > 0 && s->ids[i - 1] > id) {
        s->ids[i] = s->ids[i - 1];
        i--;
    }
    s->ids[i] = id;
    s->n++;
    return 0;
}

static const manifest_file *manifest_find(const manifest *m, uint64_t id)
{
    size_t lo = 0, hi = m->n_files;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->files[mid].id == id)
            return &m->files[mid];
        if (m->files[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const store_file_info *list_find(const store_file_list *l, uint64_t id)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->files[mid].id == id)
            return &l->files[mid];
        if (l->files[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Keeps only the ids named by cur or prev (the rest is garbage remotely). */
static void id_set_prune(uploader *u)
{
    size_t k = 0;
    for (size_t i = 0; i < u->uploaded.n; i++) {
        uint64_t id = u->uploaded.ids[i];
        if (manifest_find(&u->cur, id) != NULL || manifest_find(&u->prev, id) != NULL)
            u->uploaded.ids[k++] = id;
    }
    u->uploaded.n = k;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sleeps ms unless stopped or woken; true when stopping. */
static bool wait_ms(uploader *u, uint32_t ms, bool wake_ok)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&u->mu);
    while (!u->stop && !(wake_ok && u->wake))
        if (pthread_cond_timedwait(&u->cv, &u->mu, &ts) == ETIMEDOUT)
            break;
    if (wake_ok)
        u->wake = false;
    bool stop = u->stop;
    pthread_mutex_unlock(&u->mu);
    return stop;
}

static bool stopping(uploader *u)
{
    pthread_mutex_lock(&u->mu);
    bool s = u->stop;
    pthread_mutex_unlock(&u->mu);
    return s;
}

/* ---- listing the remote store ---- */

/* The seqs of every manifest of the timeline, ascending (malloc'd). */
static int list_manifest_seqs(uploader *u, uint64_t **seqs, size_t *n, char *err, size_t errlen)
{
    char prefix[MANIFEST_KEY_LEN];
    manifest_prefix(&u->o.meta.tenant, &u->o.meta.timeline, prefix, sizeof prefix);
    remote_listing l;
    remote_err re;
    *seqs = NULL;
    *n = 0;
    if (remote_list(u->o.rs, prefix, &l, &re) != 0)
        return fail(err, errlen, "list %s: %s", prefix, re.msg);
    *seqs = calloc(l.n ? l.n : 1, sizeof **seqs);
    if (*seqs == NULL) {
        remote_listing_free(&l);
        return fail(err, errlen, "out of memory listing manifests");
    }
    /* Keys are sorted and the seq is fixed-width hex: ascending already. */
    for (size_t i = 0; i < l.n; i++)
        if (manifest_key_seq(prefix, l.entries[i].key, &(*seqs)[*n]))
            (*n)++;
    remote_listing_free(&l);
    return 0;
}

static int get_manifest(uploader *u, uint64_t seq, manifest *out, char *err, size_t errlen)
{
    char key[MANIFEST_KEY_LEN], why[ERR_LEN];
    manifest_key(&u->o.meta.tenant, &u->o.meta.timeline, seq, key, sizeof key);
    void *buf;
    size_t len;
    remote_err re;
    if (remote_get_buf(u->o.rs, key, MANIFEST_MAX_BYTES, &buf, &len, &re) != 0)
        return fail(err, errlen, "get %s: %s", key, re.msg);
    int rc = manifest_decode(buf, len, out, why, sizeof why);
    free(buf);
    if (rc != 0)
        return fail(err, errlen, "%s: %s", key, why);
    if (out->seq != seq || !strata_id_equal(&out->tenant, &u->o.meta.tenant) ||
        !strata_id_equal(&out->timeline, &u->o.meta.timeline)) {
        manifest_free(out);
        return fail(err, errlen, "%s names another timeline or seq", key);
    }
    return 0;
}

/* Deletes keys[0..n), counting them.  0 or -1 with err. */
static int delete_keys(uploader *u, char **keys, size_t n, char *err, size_t errlen)
{
    if (n == 0)
        return 0;
    remote_err re;
    if (remote_delete_many(u->o.rs, (const char *const *)keys, n, &re) != 0)
        return fail(err, errlen, "remote GC: %s", re.msg);
    metrics_counter_add(um.deleted, n);
    pthread_mutex_lock(&u->mu);
    u->status.objects_deleted += n;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

/* Deletes the data objects for which keep() is false.  0 or -1 with err. */
static int delete_data_objects(uploader *u,
                               bool (*keep)(uploader *, const store_file_list *, uint64_t, void *),
                               const store_file_list *live, void *arg, size_t *deleted, char *err,
                               size_t errlen)
{
    char prefix[MANIFEST_KEY_LEN];
    manifest_data_prefix(&u->o.meta.tenant, &u->o.meta.timeline, prefix, sizeof prefix);
    remote_listing l;
    remote_err re;
    *deleted = 0;
    if (remote_list(u->o.rs, prefix, &l, &re) != 0)
        return fail(err, errlen, "list %s: %s", prefix, re.msg);
    char **keys = calloc(l.n ? l.n : 1, sizeof *keys);
    if (keys == NULL) {
        remote_listing_free(&l);
        return fail(err, errlen, "out of memory in remote GC");
    }
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t id;
        /* Objects that are not data files of ours are left alone. */
        if (manifest_data_key_id(prefix, l.entries[i].key, &id) && !keep(u, live, id, arg))
            keys[n++] = l.entries[i].key;
    }
    int rc = delete_keys(u, keys, n, err, errlen);
    free(keys);
    remote_listing_free(&l);
    if (rc == 0)
        *deleted = n;
    return rc;
}

/* ---- start-up: seq discovery, what is uploaded, the sweep ---- */

typedef struct sweep_names {
    id_set named; /* ids any existing manifest names */
} sweep_names;

static bool sweep_keep(uploader *u, const store_file_list *live, uint64_t id, void *arg)
{
    (void)u;
    const sweep_names *s = arg;
    return id_set_has(&s->named, id) || list_find(live, id) != NULL;
}

/* Deletes data objects named by no manifest (all of seqs[0..n)) and not
 * live locally.  0 or -1 with err. */
static int start_sweep(uploader *u, const uint64_t *seqs, size_t n, const store_file_list *live,
                       char *err, size_t errlen)
{
    sweep_names s = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        manifest m;
        if ((rc = get_manifest(u, seqs[i], &m, err, errlen)) != 0)
            break; /* unreadable: we cannot know what it names, delete nothing */
        for (size_t k = 0; rc == 0 && k < m.n_files; k++)
            if (id_set_add(&s.named, m.files[k].id) != 0)
                rc = fail(err, errlen, "out of memory in the start sweep");
        manifest_free(&m);
    }
    size_t deleted = 0;
    if (rc == 0)
        rc = delete_data_objects(u, sweep_keep, live, &s, &deleted, err, errlen);
    free(s.named.ids);
    if (rc == 0 && deleted > 0) {
        log_info("uploader %s: start sweep deleted %zu unreferenced data objects", u->name,
                 deleted);
        failpoint_hit("remote_gc.after_delete_data");
    }
    return rc;
}

/* A manifest's file that is live locally with another size means the
 * remote store holds another store's timeline: refuse to mix them. */
static int check_lineage(const manifest *m, const store_file_list *live, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_files; i++) {
        const store_file_info *f = list_find(live, m->files[i].id);
        if (f != NULL && f->size != m->files[i].size)
            return fail(err, errlen,
                        "remote manifest %" PRIu64 " names data file %016" PRIx64 " of %" PRIu64
                        " bytes, the local one has %" PRIu64
                        ": the remote store holds another copy of this timeline",
                        m->seq, m->files[i].id, m->files[i].size, f->size);
    }
    return 0;
}

static void publish_remote_lsn(uploader *u, lsn_t lsn, uint64_t seq)
{
    if (lsn > atomic_load(&u->remote_consistent_lsn))
        atomic_store(&u->remote_consistent_lsn, lsn);
    pthread_mutex_lock(&u->mu);
    u->status.remote_consistent_lsn = atomic_load(&u->remote_consistent_lsn);
    if (seq > u->status.manifest_seq)
        u->status.manifest_seq = seq;
    pthread_mutex_unlock(&u->mu);
}

static int start_up(uploader *u, char *err, size_t errlen)
{
    store_file_list live;
    if (store_list_files(u->o.st, &live, err, errlen) != 0)
        return -1;
    uint64_t *seqs;
    size_t n;
    int rc = list_manifest_seqs(u, &seqs, &n, err, errlen);
    manifest_free(&u->cur);
    manifest_free(&u->prev);
    if (rc == 0 && n > 0)
        rc = get_manifest(u, seqs[n - 1], &u->cur, err, errlen);
    if (rc == 0 && n > 1)
        rc = get_manifest(u, seqs[n - 2], &u->prev, err, errlen);
    if (rc == 0)
        rc = check_lineage(&u->cur, &live, err, errlen);
    if (rc == 0 && u->cur.consistent_lsn > live.disk_consistent_lsn) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        rc = fail(err, errlen,
                  "remote manifest %" PRIu64 " is at %s, ahead of the local store at %s: the "
                  "remote store holds another copy of this timeline",
                  u->cur.seq, lsn_format(u->cur.consistent_lsn, a),
                  lsn_format(live.disk_consistent_lsn, b));
    }
    for (size_t i = 0; rc == 0 && i < live.n; i++) {
        const manifest_file *f = manifest_find(&u->cur, live.files[i].id);
        if (f == NULL)
            f = manifest_find(&u->prev, live.files[i].id);
        if (f != NULL && f->size == live.files[i].size && id_set_add(&u->uploaded, f->id) != 0)
            rc = fail(err, errlen, "out of memory");
    }
    if (rc == 0)
        rc = start_sweep(u, seqs, n, &live, err, errlen);
    if (rc == 0) {
        u->last_seq = n > 0 ? seqs[n - 1] : 0;
        if (live.remote_seq > u->last_seq)
            u->last_seq = live.remote_seq;
        publish_remote_lsn(u, u->cur.consistent_lsn, u->cur.seq);
        u->started = true;
        char a[LSN_FMT_LEN];
        log_info("uploader %s: %zu manifests in %s, newest seq %" PRIu64
                 ", remote_consistent_lsn %s",
                 u->name, n, remote_describe(u->o.rs), u->cur.seq,
                 lsn_format(atomic_load(&u->remote_consistent_lsn), a));
    }
    free(seqs);
    store_file_list_free(&live);
    return rc;
}

/* ---- one upload cycle ---- */

static void set_pending(uploader *u, const store_file_list *l)
{
    uint64_t files = 0, bytes = 0;
    for (size_t i = 0; i < l->n; i++)
        if (!id_set_has(&u->uploaded, l->files[i].id)) {
            files++;
            bytes += l->files[i].size;
        }
    pthread_mutex_lock(&u->mu);
    u->status.files_pending = files;
    u->status.bytes_pending = bytes;
    pthread_mutex_unlock(&u->mu);
}

/* PUTs one data file.  1 when the local file is gone (local GC dropped it
 * since the snapshot: a newer snapshot will not list it), 0 uploaded, -1
 * with err. */
static int upload_file(uploader *u, const store_file_info *f, char *err, size_t errlen)
{
    char key[MANIFEST_KEY_LEN], path[4400];
    manifest_data_key(&u->o.meta.tenant, &u->o.meta.timeline, f->id, key, sizeof key);
    store_data_file_path(u->o.st, f->id, path, sizeof path);
    remote_err re;
    int rc = remote_put_file(u->o.rs, key, path, &re);
    if (rc == -ENOENT && access(path, F_OK) != 0)
        return 1;
    if (rc != 0)
        return fail(err, errlen, "upload %s: %s", key, re.msg);
    if (id_set_add(&u->uploaded, f->id) != 0)
        return fail(err, errlen, "out of memory");
    metrics_counter_add(um.bytes, f->size);
    metrics_counter_inc(um.files);
    pthread_mutex_lock(&u->mu);
    u->status.files_uploaded++;
    u->status.bytes_uploaded += f->size;
    pthread_mutex_unlock(&u->mu);
    failpoint_hit("upload.after_data");
    return 0;
}

/*
 * Step 1: a snapshot whose every file is uploaded, with the GC horizon
 * read after it (any GC whose effects the snapshot shows had published its
 * horizon first) and not above its disk_consistent_lsn.  0 with *snap and
 * *horizon, or -1 with err.
 */
static int upload_snapshot(uploader *u, store_file_list *snap, lsn_t *horizon, char *err,
                           size_t errlen)
{
    int missing_rounds = 0; /* consecutive snapshots with a missing file */
    for (;;) {
        if (stopping(u))
            return fail(err, errlen, "stopping");
        if (store_list_files(u->o.st, snap, err, errlen) != 0)
            return -1;
        *horizon = u->o.gc_horizon ? u->o.gc_horizon(u->o.gc_horizon_arg) : LSN_INVALID;
        set_pending(u, snap);
        bool all = true, missing = false;
        for (size_t i = 0; i < snap->n; i++) {
            if (id_set_has(&u->uploaded, snap->files[i].id))
                continue;
            all = false;
            int rc = upload_file(u, &snap->files[i], err, errlen);
            /* Store GC unlinks a file just after the index drops it, so a
             * listed file is missing only for a moment; one that stays
             * missing is an error (a directory moved under us). */
            if (rc == 1 && missing_rounds >= 3)
                rc = fail(err, errlen,
                          "data file %016" PRIx64 " is listed by the index but "
                          "missing locally",
                          snap->files[i].id);
            if (rc < 0) {
                store_file_list_free(snap);
                return -1;
            }
            missing = missing || rc == 1;
        }
        missing_rounds = missing ? missing_rounds + 1 : 0;
        if (all && *horizon <= snap->disk_consistent_lsn)
            return 0;
        store_file_list_free(snap); /* look again: files may have come or gone */
    }
}

static bool same_state(const manifest *m, const store_file_list *snap, lsn_t horizon)
{
    if (m->seq == 0 || m->consistent_lsn != snap->disk_consistent_lsn || m->gc_horizon != horizon ||
        m->n_files != snap->n)
        return false;
    for (size_t i = 0; i < snap->n; i++)
        if (m->files[i].id != snap->files[i].id)
            return false;
    return true;
}

static int build_manifest(uploader *u, const store_file_list *snap, lsn_t horizon, manifest *m,
                          char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->seq = u->last_seq + 1;
    m->tenant = u->o.meta.tenant;
    m->timeline = u->o.meta.timeline;
    m->consistent_lsn = snap->disk_consistent_lsn;
    m->gc_horizon = horizon;
    m->start_lsn = u->o.meta.start_lsn;
    m->n_safekeepers = u->o.meta.n_safekeepers;
    memcpy(m->safekeepers, u->o.meta.safekeepers, sizeof m->safekeepers);
    m->has_ancestor = u->o.meta.has_ancestor;
    m->ancestor_timeline = u->o.meta.ancestor_timeline;
    m->ancestor_lsn = u->o.meta.ancestor_lsn;
    m->next_file_id = snap->next_file_id;
    m->n_files = snap->n;
    m->files = calloc(snap->n ? snap->n : 1, sizeof *m->files);
    if (m->files == NULL)
        return fail(err, errlen, "out of memory building the manifest");
    for (size_t i = 0; i < snap->n; i++)
        m->files[i] = (manifest_file){.id = snap->files[i].id,
                                      .size = snap->files[i].size,
                                      .lsn_min = snap->files[i].lsn_min,
                                      .lsn_max = snap->files[i].lsn_max};
    return 0;
}

/* Step 2: PUT the manifest under a new seq.  The seq is used up even when
 * the PUT fails (it may have landed anyway): never two bodies per key. */
static int put_manifest(uploader *u, const manifest *m, char *err, size_t errlen)
{
    char *text, key[MANIFEST_KEY_LEN];
    size_t len;
    if (manifest_encode(m, &text, &len, err, errlen) != 0)
        return -1;
    manifest_key(&m->tenant, &m->timeline, m->seq, key, sizeof key);
    u->last_seq = m->seq;
    remote_err re;
    int rc = remote_put_buf(u->o.rs, key, text, len, &re);
    free(text);
    if (rc != 0)
        return fail(err, errlen, "upload %s: %s", key, re.msg);
    failpoint_hit("upload.after_manifest");
    return 0;
}

static bool gc_keep(uploader *u, const store_file_list *live, uint64_t id, void *arg)
{
    (void)arg;
    return manifest_find(&u->cur, id) != NULL || manifest_find(&u->prev, id) != NULL ||
           list_find(live, id) != NULL;
}

/* Step 4: manifests older than prev (and strays), then data objects that
 * neither cur nor prev names and that are not live locally. */
static int remote_gc(uploader *u, char *err, size_t errlen)
{
    uint64_t *seqs;
    size_t n;
    if (list_manifest_seqs(u, &seqs, &n, err, errlen) != 0)
        return -1;
    char **keys = calloc(n ? n : 1, sizeof *keys);
    size_t nk = 0;
    int rc = keys ? 0 : fail(err, errlen, "out of memory in remote GC");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (seqs[i] >= u->cur.seq || seqs[i] == u->prev.seq)
            continue;
        keys[nk] = malloc(MANIFEST_KEY_LEN);
        if (keys[nk] == NULL) {
            rc = fail(err, errlen, "out of memory in remote GC");
            break;
        }
        manifest_key(&u->o.meta.tenant, &u->o.meta.timeline, seqs[i], keys[nk++], MANIFEST_KEY_LEN);
    }
    if (rc == 0)
        rc = delete_keys(u, keys, nk, err, errlen);
    for (size_t i = 0; i < nk; i++)
        free(keys[i]);
    free(keys);
    free(seqs);
    if (rc != 0)
        return -1;
    if (nk > 0)
        failpoint_hit("remote_gc.after_delete_manifest");
    store_file_list live;
    if (store_list_files(u->o.st, &live, err, errlen) != 0)
        return -1;
    size_t deleted = 0;
    rc = delete_data_objects(u, gc_keep, &live, NULL, &deleted, err, errlen);
    store_file_list_free(&live);
    if (rc == 0 && deleted > 0)
        failpoint_hit("remote_gc.after_delete_data");
    if (rc == 0)
        id_set_prune(u);
    return rc;
}

/* One cycle: steps 1-4.  0 (also when there was nothing new), or -1 with err. */
static int upload_cycle(uploader *u, char *err, size_t errlen)
{
    store_file_list snap;
    lsn_t horizon = LSN_INVALID;
    if (upload_snapshot(u, &snap, &horizon, err, errlen) != 0)
        return -1;
    if (same_state(&u->cur, &snap, horizon)) {
        store_file_list_free(&snap);
        return 0;
    }
    STRATA_ASSERT(snap.disk_consistent_lsn >= u->cur.consistent_lsn);
    manifest m;
    int rc = build_manifest(u, &snap, horizon, &m, err, errlen);
    store_file_list_free(&snap);
    if (rc == 0)
        rc = put_manifest(u, &m, err, errlen);
    if (rc == 0 && store_set_remote_state(u->o.st, m.consistent_lsn, m.seq, err, errlen) != 0)
        rc = -1;
    if (rc != 0) {
        manifest_free(&m);
        return -1;
    }
    failpoint_hit("upload.after_persist");
    manifest_free(&u->prev);
    u->prev = u->cur;
    u->cur = m;
    publish_remote_lsn(u, m.consistent_lsn, m.seq);
    metrics_counter_inc(um.manifests);
    pthread_mutex_lock(&u->mu);
    u->status.manifests_uploaded++;
    u->status.last_upload_time = now_unix();
    pthread_mutex_unlock(&u->mu);
    return remote_gc(u, err, errlen);
}

/* ---- the thread ---- */

static void note_result(uploader *u, int rc, const char *err)
{
    pthread_mutex_lock(&u->mu);
    bool was_failing = u->status.failing;
    if (rc != 0) {
        u->status.failing = true;
        u->status.errors++;
        u->status.last_error_time = now_unix();
        snprintf(u->status.last_error, sizeof u->status.last_error, "%s", err);
    } else {
        u->status.failing = false;
    }
    pthread_mutex_unlock(&u->mu);
    if (rc != 0)
        metrics_counter_inc(um.errors);
    if (rc != 0 && !was_failing)
        log_warn("uploader %s: %s (retrying with backoff; ingest and reads go on)", u->name, err);
    else if (rc == 0 && was_failing)
        log_info("uploader %s: the remote store works again", u->name);
}

static void *uploader_main(void *arg)
{
    uploader *u = arg;
    pthread_setname_np(pthread_self(), "ps-upload");
    uint32_t backoff = u->o.backoff_min_ms;
    while (!stopping(u)) {
        char err[ERR_LEN] = "";
        bool cycle = u->started; /* after the start-up, the first cycle follows at once */
        int rc = cycle ? upload_cycle(u, err, sizeof err) : start_up(u, err, sizeof err);
        if (stopping(u))
            break;
        note_result(u, rc, err);
        if (rc != 0) {
            if (wait_ms(u, backoff, false))
                break;
            backoff = backoff * 2 > u->o.backoff_max_ms ? u->o.backoff_max_ms : backoff * 2;
            continue;
        }
        backoff = u->o.backoff_min_ms;
        if (cycle && wait_ms(u, u->o.idle_check_ms, true))
            break;
    }
    return NULL;
}

static void commit_hook(void *arg, uint64_t file_id, uint64_t size)
{
    (void)file_id;
    (void)size;
    uploader_notify(arg);
}

int uploader_start(const uploader_options *o, uploader **out, char *err, size_t errlen)
{
    pthread_once(&um.once, register_metrics);
    *out = NULL;
    uploader *u = calloc(1, sizeof *u);
    if (u == NULL)
        return fail(err, errlen, "out of memory");
    u->o = *o;
    if (u->o.backoff_min_ms == 0)
        u->o.backoff_min_ms = 500;
    if (u->o.backoff_max_ms < u->o.backoff_min_ms)
        u->o.backoff_max_ms = u->o.backoff_min_ms > 5000 ? u->o.backoff_min_ms : 5000;
    if (u->o.idle_check_ms == 0)
        u->o.idle_check_ms = 5000;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(u->name, sizeof u->name, "%.8s/%.8s", strata_id_format(&o->meta.tenant, t),
             strata_id_format(&o->meta.timeline, l));
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    /* Until the start-up has looked, report what LMDB last persisted. */
    store_file_list live;
    if (store_list_files(o->st, &live, err, errlen) != 0) {
        uploader_stop(u);
        return -1;
    }
    atomic_init(&u->remote_consistent_lsn, live.remote_consistent_lsn);
    u->status.remote_consistent_lsn = live.remote_consistent_lsn;
    u->status.manifest_seq = live.remote_seq;
    store_file_list_free(&live);
    store_set_commit_hook(o->st, commit_hook, u);
    if (pthread_create(&u->thread, NULL, uploader_main, u) != 0) {
        store_set_commit_hook(o->st, NULL, NULL);
        uploader_stop(u);
        return fail(err, errlen, "cannot start the upload thread");
    }
    u->thread_started = true;
    *out = u;
    return 0;
}

void uploader_stop(uploader *u)
{
    if (u == NULL)
        return;
    if (u->thread_started) {
        store_set_commit_hook(u->o.st, NULL, NULL);
        pthread_mutex_lock(&u->mu);
        u->stop = true;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        pthread_join(u->thread, NULL);
    }
    manifest_free(&u->cur);
    manifest_free(&u->prev);
    free(u->uploaded.ids);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}

void uploader_notify(uploader *u)
{
    pthread_mutex_lock(&u->mu);
    u->wake = true;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

lsn_t uploader_remote_consistent_lsn(uploader *u)
{
    return atomic_load(&u->remote_consistent_lsn);
}

void uploader_get_status(uploader *u, uploader_status *out)
{
    pthread_mutex_lock(&u->mu);
    *out = u->status;
    pthread_mutex_unlock(&u->mu);
}
