/*
 * node.c: a safekeeper's registry of timelines and the doors into them,
 * part of the timeline module (timeline_priv.h; contract in timeline.h).
 *
 * For: the node (metrics, loading every timeline at start, the published
 * snapshot, shutdown), timelines on disk (creating one, loading one: control
 * file, end of WAL, acceptor restore), turning the WAL backup on, proposer
 * connections (the greeting that finds or creates the timeline, queueing
 * messages for the executor) and switching a timeline's membership.
 * Not for: executing the core's effects (timeline.c), lazy saves and WAL
 * removal (housekeeping.c), command parsing (conn.c).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "proto/membership.h"
#include "proto/walpush.h"
#include "proto/sk_control.h"
#include "safekeeper/timeline_priv.h"
#include "safekeeper/wal_horizon.h"

static const double fsync_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                      0.01,   0.025,   0.05,   0.1,   0.5,    1.0};

/* ---- WAL backup -------------------------------------------------------- */

/* Gives tl its uploader (node->backup set).  0 or -ENOMEM. */
static int attach_backup(sk_timeline *tl)
{
    sk_node *node = tl->node;
    STRATA_ASSERT(node->backup != NULL && tl->backup == NULL);
    tl->backup = wal_backup_add(node->backup, &tl->tenant_id, &tl->timeline_id, tl->dir,
                                acceptor_state(&tl->acc)->backup_lsn);
    if (tl->backup == NULL)
        return -ENOMEM;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *names[] = {"tenant_id", "timeline_id"};
    const char *values[] = {strata_id_format(&tl->tenant_id, t),
                            strata_id_format(&tl->timeline_id, l)};
    tl->g_backup = metrics_gauge_register(
        metrics_default_registry(), "safekeeper_wal_backup_lsn",
        "End of the WAL backed up to the object store without a gap", 2, names, values);
    return 0;
}

int sk_node_set_backup(sk_node *node, wal_backup *b, char *err, size_t errlen)
{
    STRATA_ASSERT(node->backup == NULL);
    node->backup = b;
    for (int i = 0; i < node->n_timelines; i++) {
        if (attach_backup(node->timelines[i]) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    sk_node_publish(node);
    return 0;
}

/* ---- timelines on disk ------------------------------------------------ */

static sk_timeline *tl_alloc(sk_node *node, const strata_id *tenant, const strata_id *timeline)
{
    if (node->n_timelines >= SK_MAX_TIMELINES)
        return NULL;
    sk_timeline *tl = calloc(1, sizeof *tl);
    if (tl == NULL)
        return NULL;
    tl->node = node;
    tl->tenant_id = *tenant;
    tl->timeline_id = *timeline;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    if (snprintf(tl->dir, sizeof tl->dir, "%s/%s/%s", node->datadir, strata_id_format(tenant, t),
                 strata_id_format(timeline, l)) >= (int)sizeof tl->dir) {
        free(tl);
        return NULL;
    }
    return tl;
}

static void tl_register(sk_node *node, sk_timeline *tl)
{
    metrics_registry *r = metrics_default_registry();
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *names[] = {"tenant_id", "timeline_id"};
    const char *values[] = {strata_id_format(&tl->tenant_id, t),
                            strata_id_format(&tl->timeline_id, l)};
    tl->g_flush = metrics_gauge_register(
        r, "safekeeper_flush_lsn", "End of the last complete WAL record fsynced", 2, names, values);
    tl->g_commit = metrics_gauge_register(
        r, "safekeeper_commit_lsn", "Committed end of WAL served to consumers", 2, names, values);
    tl->g_term =
        metrics_gauge_register(r, "safekeeper_term", "Highest term voted for", 2, names, values);
    tl->g_failed = metrics_gauge_register(
        r, "safekeeper_timeline_failed",
        "1 when a WAL write, fdatasync or control-file write failed: the timeline serves no "
        "proposer until the safekeeper restarts",
        2, names, values);
    if (node->backup != NULL && attach_backup(tl) != 0)
        log_warn("timeline %s/%s: no memory for its WAL backup; its WAL is kept", t, l);
    tl->index = node->n_timelines;
    node->timelines[node->n_timelines++] = tl;
    pthread_mutex_lock(&node->snap_lock);
    node->snap_n = node->n_timelines;
    pthread_mutex_unlock(&node->snap_lock);
    sk_node_publish_timeline(tl);
}

static int mkdir_durable(const char *path)
{
    if (mkdir(path, 0700) != 0) {
        if (errno == EEXIST)
            return 0;
        return -errno;
    }
    return durable_fsync_parent(path);
}

static sk_timeline *tl_create(sk_node *node, const strata_id *tenant, const strata_id *timeline,
                              const char **why)
{
    sk_timeline *tl = tl_alloc(node, tenant, timeline);
    if (tl == NULL) {
        *why = "too many timelines on this safekeeper";
        return NULL;
    }
    char tdir[PATH_MAX + 40], t[STRATA_ID_HEX_LEN];
    snprintf(tdir, sizeof tdir, "%s/%s", node->datadir, strata_id_format(tenant, t));
    acceptor_init(&tl->acc, node->node_id, tenant, timeline);
    if (mkdir_durable(tdir) != 0 || mkdir_durable(tl->dir) != 0 ||
        sk_control_write(tl->dir, acceptor_state(&tl->acc)) != 0) {
        *why = "could not create the timeline directory or control file";
        free(tl);
        return NULL;
    }
    tl->persisted = *acceptor_state(&tl->acc);
    tl_register(node, tl);
    char name[80];
    log_info("created timeline %s", sk_timeline_name(tl, name, sizeof name));
    return tl;
}

/*
 * Finds the end of the last complete, CRC-valid record from start on by
 * decoding what is on disk (a torn tail, zeros or garbage end it).
 * Returns 0 with *end set, or a negative errno.
 */
static int find_end_of_wal(wal_store *ws, uint32_t seg_size, lsn_t start, lsn_t *end)
{
    size_t rec_cap = 1 << 20; /* grows to the largest record, up to 1 GB */
    uint8_t *rec_buf = malloc(rec_cap);
    uint8_t *buf = malloc(128 * 1024);
    if (rec_buf == NULL || buf == NULL) {
        free(rec_buf);
        free(buf);
        return -ENOMEM;
    }
    wal_reader r;
    wal_reader_init_growable(&r, start, seg_size, &rec_buf, &rec_cap);
    lsn_t pos = start;
    bool broken = false;
    int rc = 0;
    while (!broken) {
        ssize_t n = wal_store_read(ws, pos, buf, 128 * 1024);
        if (n == -ENOENT && pos == start && wal_store_newest_segment_lsn(ws) > start)
            rc = -ENOENT; /* the start is gone but WAL after it is not */
        if (n <= 0)
            break;
        const uint8_t *p = buf;
        size_t left = (size_t)n;
        while (left > 0) {
            size_t used = 0;
            const char *why = NULL;
            int rc = wal_reader_feed(&r, pos, p, left, &used, &why);
            if (rc == WAL_READER_ERROR || (rc == WAL_READER_NEED_MORE && used == 0)) {
                broken = true;
                break;
            }
            pos += used;
            p += used;
            left -= used;
        }
    }
    *end = wal_reader_last_record_end(&r);
    free(rec_buf);
    free(buf);
    return rc;
}

static int tl_load(sk_node *node, const strata_id *tenant, const strata_id *timeline, char *err,
                   size_t errlen)
{
    sk_timeline *tl = tl_alloc(node, tenant, timeline);
    if (tl == NULL) {
        snprintf(err, errlen, "too many timelines (max %d)", SK_MAX_TIMELINES);
        return -1;
    }
    acceptor_persistent_state st;
    char why_buf[512];
    int rc = sk_control_read(tl->dir, &st, why_buf, sizeof why_buf);
    if (rc != 0) {
        snprintf(err, errlen, "%s", why_buf);
        free(tl);
        return -1;
    }
    if (!strata_id_equal(&st.tenant_id, tenant) || !strata_id_equal(&st.timeline_id, timeline)) {
        snprintf(err, errlen, "%s: control file names another tenant/timeline", tl->dir);
        free(tl);
        return -1;
    }
    /* A node's votes and WAL are its own: a directory written as another
     * node (a replaced one moved back from skN.replaced-node*) would answer
     * for a node it is not. */
    if (st.node_id != node->node_id) {
        snprintf(err, errlen,
                 "%s: the control file belongs to safekeeper node %llu but this safekeeper runs "
                 "as node %llu (--id); refusing to serve another node's timeline (a replaced "
                 "node's data directory moved back?)",
                 tl->dir, (unsigned long long)st.node_id, (unsigned long long)node->node_id);
        free(tl);
        return -1;
    }
    lsn_t end = LSN_INVALID;
    if (st.wal_seg_size != 0) {
        rc = sk_timeline_open_store(tl, st.wal_seg_size);
        if (rc != 0) {
            snprintf(err, errlen, "%s: cannot open WAL: %s", tl->dir, strerror(-rc));
            free(tl);
            return -1;
        }
        /* A truncation never cuts below the scan start (the core refuses
         * to cut committed WAL, and removal keeps the start's segment). */
        lsn_t start = wal_horizon_scan_start(&st);
        if (start != LSN_INVALID) {
            rc = find_end_of_wal(tl->ws, st.wal_seg_size, start, &end);
            if (rc == -ENOENT) {
                char s[LSN_FMT_LEN];
                snprintf(err, errlen,
                         "%s: the WAL at %s, where the control file says a complete record "
                         "ends, is missing while later segments exist; refusing to truncate "
                         "them (restore the segment or replace this safekeeper)",
                         tl->dir, lsn_format(start, s));
                wal_store_close(tl->ws);
                free(tl);
                return -1;
            }
            if (rc == 0)
                rc = wal_store_truncate(tl->ws, end);
            /* What a killed process wrote may still be only in the page
             * cache: make it durable before any of it is reported flushed. */
            if (rc == 0)
                rc = wal_store_sync_range(tl->ws, start, end);
            if (rc != 0) {
                snprintf(err, errlen, "%s: cannot truncate or sync WAL at the end found: %s",
                         tl->dir, strerror(-rc));
                wal_store_close(tl->ws);
                free(tl);
                return -1;
            }
        }
    }
    const char *why = NULL;
    if (acceptor_restore(&tl->acc, &st, end, &why) != 0) {
        snprintf(err, errlen, "%s: inconsistent state: %s", tl->dir, why);
        wal_store_close(tl->ws);
        free(tl);
        return -1;
    }
    tl->persisted = st;
    tl_register(node, tl);
    char name[80], e[LSN_FMT_LEN], c[LSN_FMT_LEN];
    log_info("loaded timeline %s term=%llu end_of_wal=%s commit_lsn=%s",
             sk_timeline_name(tl, name, sizeof name), (unsigned long long)st.term,
             lsn_format(end, e), lsn_format(st.commit_lsn, c));
    return 0;
}

/* ---- node ------------------------------------------------------------- */

/* The node's series in the default registry (timeline.h, sk_metrics). */
static void register_metrics(sk_metrics *m)
{
    metrics_registry *r = metrics_default_registry();
    m->appends = metrics_counter_register(r, "safekeeper_appends_total",
                                          "WAL writes executed for AppendRequests", 0, NULL, NULL);
    m->bytes_written = metrics_counter_register(r, "safekeeper_wal_bytes_written_total",
                                                "WAL bytes written", 0, NULL, NULL);
    m->fsyncs = metrics_counter_register(r, "safekeeper_fdatasync_total",
                                         "WAL fdatasync calls (group-commit rounds and votes)", 0,
                                         NULL, NULL);
    m->fsync_seconds = metrics_histogram_register(
        r, "safekeeper_fdatasync_seconds", "Duration of WAL fdatasync rounds", fsync_bounds,
        (int)(sizeof fsync_bounds / sizeof fsync_bounds[0]), 0, NULL, NULL);
    m->connections_total = metrics_counter_register(r, "safekeeper_connections_total",
                                                    "Connections accepted", 0, NULL, NULL);
    m->connections =
        metrics_gauge_register(r, "safekeeper_connections", "Open connections", 0, NULL, NULL);
    m->errors = metrics_counter_register(r, "safekeeper_errors_total",
                                         "Protocol and storage errors", 0, NULL, NULL);
    m->wal_segments_removed =
        metrics_counter_register(r, "safekeeper_wal_segments_removed_total",
                                 "WAL segments removed below the horizon", 0, NULL, NULL);
    m->ps_feedback_ignored = metrics_counter_register(
        r, "safekeeper_ps_feedback_ignored_total",
        "Pageserver feedback messages dropped: the sender was not the pageserver", 0, NULL, NULL);
    m->appends_refused = metrics_counter_register(
        r, "safekeeper_appends_refused_total",
        "AppendRequests refused because the timeline's WAL would pass --max-wal-bytes", 0, NULL,
        NULL);
    m->backup.uploaded = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_uploaded_total",
        "WAL segments this safekeeper PUT into the object store", 0, NULL, NULL);
    m->backup.skipped = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_skipped_total",
        "WAL segments found whole in the object store already (another safekeeper put them)", 0,
        NULL, NULL);
    m->backup.bytes =
        metrics_counter_register(r, "safekeeper_wal_backup_bytes_total",
                                 "WAL bytes PUT into the object store", 0, NULL, NULL);
    m->backup.deleted = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_deleted_total",
        "WAL segments this safekeeper deleted from the object store (no one needs them)", 0, NULL,
        NULL);
    m->backup.errors = metrics_counter_register(
        r, "safekeeper_wal_backup_errors_total",
        "Failed WAL backup attempts (HEAD or PUT), each retried with backoff", 0, NULL, NULL);
}

int sk_node_init(sk_node *node, uv_loop_t *loop, uring *ring, const char *datadir, uint64_t node_id,
                 unsigned housekeeping_ms, char *err, size_t errlen)
{
    memset(node, 0, sizeof *node);
    node->loop = loop;
    node->ring = ring;
    node->node_id = node_id;
    snprintf(node->datadir, sizeof node->datadir, "%s", datadir);
    pthread_mutex_init(&node->snap_lock, NULL);
    register_metrics(&node->metrics);
    node->snap = calloc(SK_MAX_TIMELINES, sizeof *node->snap);
    if (node->snap == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    DIR *d = opendir(datadir);
    if (d == NULL) {
        snprintf(err, errlen, "%s: %s", datadir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        strata_id tenant;
        if (!strata_id_parse(de->d_name, &tenant))
            continue;
        char tdir[PATH_MAX];
        snprintf(tdir, sizeof tdir, "%s/%s", datadir, de->d_name);
        DIR *td = opendir(tdir);
        if (td == NULL)
            continue;
        struct dirent *te;
        while (rc == 0 && (te = readdir(td)) != NULL) {
            strata_id timeline;
            if (strata_id_parse(te->d_name, &timeline))
                rc = tl_load(node, &tenant, &timeline, err, errlen);
        }
        closedir(td);
    }
    closedir(d);
    if (rc != 0)
        return -1;
    uv_timer_init(loop, &node->housekeeping);
    node->housekeeping.data = node;
    uv_timer_start(&node->housekeeping, sk_housekeeping_on_timer, housekeeping_ms, housekeeping_ms);
    uv_prepare_init(loop, &node->before_poll);
    node->before_poll.data = node;
    uv_prepare_start(&node->before_poll, sk_timeline_on_before_poll);
    sk_node_publish(node);
    return 0;
}

void sk_node_begin_stop(sk_node *node)
{
    node->stopping = true;
}

bool sk_node_fetching(const sk_node *node)
{
    return node->fetches_in_flight > 0;
}

void sk_node_shutdown(sk_node *node)
{
    STRATA_ASSERT(node->fetches_in_flight == 0);
    uv_timer_stop(&node->housekeeping);
    uv_close((uv_handle_t *)&node->housekeeping, NULL);
    uv_prepare_stop(&node->before_poll);
    uv_close((uv_handle_t *)&node->before_poll, NULL);
    node->n_due = 0;
    /* The backup LSN reached so far goes into the last save. */
    for (int i = 0; i < node->n_timelines; i++)
        sk_housekeeping_backup_tick(node->timelines[i]);
    wal_backup_stop(node->backup);
    node->backup = NULL;
    for (int i = 0; i < node->n_timelines; i++) {
        sk_timeline *tl = node->timelines[i];
        tl->backup = NULL; /* freed with the backup */
        sk_housekeeping_final_save(tl);
        wal_store_close(tl->ws);
        while (sk_timeline_dequeue(tl) != NULL) {
        }
        free(tl);
    }
    node->n_timelines = 0;
    free(node->snap);
    node->snap = NULL;
    pthread_mutex_destroy(&node->snap_lock);
}

sk_timeline *sk_node_find(sk_node *node, const strata_id *tenant, const strata_id *timeline)
{
    for (int i = 0; i < node->n_timelines; i++) {
        sk_timeline *tl = node->timelines[i];
        if (strata_id_equal(&tl->tenant_id, tenant) && strata_id_equal(&tl->timeline_id, timeline))
            return tl;
    }
    return NULL;
}

static void fill_status(const sk_timeline *tl, sk_timeline_status *s)
{
    const acceptor_persistent_state *st = acceptor_state(&tl->acc);
    s->tenant_id = tl->tenant_id;
    s->timeline_id = tl->timeline_id;
    s->term = acceptor_term(&tl->acc);
    s->flush_lsn = acceptor_flush_lsn(&tl->acc);
    s->commit_lsn = acceptor_commit_lsn(&tl->acc);
    s->truncate_lsn = acceptor_truncate_lsn(&tl->acc);
    s->timeline_start_lsn = st->timeline_start_lsn;
    s->ps_feedback = st->ps_feedback;
    s->mconf = st->mconf;
    s->connections = tl->connections;
    s->failed = tl->failed;
    s->wal_bytes = tl->wal_bytes;
    s->wal_limited = tl->wal_limited;
    s->wal_backup = tl->backup != NULL;
    if (tl->backup != NULL)
        wal_backup_get(tl->backup, &s->backup);
    else
        memset(&s->backup, 0, sizeof s->backup);
}

void sk_node_publish_timeline(sk_timeline *tl)
{
    sk_node *node = tl->node;
    sk_timeline_status s;
    fill_status(tl, &s);
    metrics_gauge_set(tl->g_flush, (double)s.flush_lsn);
    metrics_gauge_set(tl->g_commit, (double)s.commit_lsn);
    metrics_gauge_set(tl->g_term, (double)s.term);
    metrics_gauge_set(tl->g_failed, s.failed ? 1.0 : 0.0);
    if (tl->g_backup != NULL)
        metrics_gauge_set(tl->g_backup, (double)s.backup.backup_lsn);
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    pthread_mutex_lock(&node->snap_lock);
    node->snap[tl->index] = s;
    node->snap_connections = node->open_connections;
    pthread_mutex_unlock(&node->snap_lock);
}

void sk_node_publish(sk_node *node)
{
    for (int i = 0; i < node->n_timelines; i++)
        sk_node_publish_timeline(node->timelines[i]);
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    pthread_mutex_lock(&node->snap_lock);
    node->snap_connections = node->open_connections;
    pthread_mutex_unlock(&node->snap_lock);
}

int sk_node_snapshot(sk_node *node, sk_timeline_status *out, int cap, int *connections)
{
    pthread_mutex_lock(&node->snap_lock);
    int n = node->snap_n < cap ? node->snap_n : cap;
    if (out != NULL && n > 0)
        memcpy(out, node->snap, sizeof *out * (size_t)n);
    if (connections != NULL)
        *connections = node->snap_connections;
    pthread_mutex_unlock(&node->snap_lock);
    return n;
}

/* ---- proposer connections --------------------------------------------- */

void sk_pusher_message(sk_node *node, sk_pusher *p, const uint8_t *data, size_t n)
{
    if (p->msg != NULL) {
        /* Input is paused while a message executes; a second one means the
         * pause did not hold.  Refuse rather than queue without bound. */
        sk_fatal_to(p->conn, SQLSTATE_INTERNAL_ERROR,
                    "internal error: WAL-push message while another is pending", NULL);
        return;
    }
    if (p->tl == NULL) {
        proposer_msg m;
        const char *why = NULL;
        if (walpush_decode_proposer_msg(data, n, &m, &why) != 0) {
            metrics_counter_inc(node->metrics.errors);
            sk_fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "invalid WAL-push message", why);
            return;
        }
        if (m.kind != PMSG_GREETING) {
            metrics_counter_inc(node->metrics.errors);
            sk_fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION,
                        "the first WAL-push message must be a ProposerGreeting", NULL);
            return;
        }
        if (!strata_id_equal(&m.u.greeting.tenant_id, &p->tenant_id) ||
            !strata_id_equal(&m.u.greeting.timeline_id, &p->timeline_id)) {
            metrics_counter_inc(node->metrics.errors);
            sk_fatal_to(
                p->conn, SQLSTATE_PROTOCOL_VIOLATION,
                "ProposerGreeting names another tenant/timeline than the connection options", NULL);
            return;
        }
        sk_timeline *tl = sk_node_find(node, &p->tenant_id, &p->timeline_id);
        if (tl == NULL && !p->allow_create) {
            char msg[200], t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
            snprintf(msg, sizeof msg,
                     "timeline %s/%s does not exist on this safekeeper and this connection may "
                     "not create it",
                     strata_id_format(&p->tenant_id, t), strata_id_format(&p->timeline_id, l));
            metrics_counter_inc(node->metrics.errors);
            sk_fatal_to(p->conn, SQLSTATE_UNDEFINED_OBJECT, msg,
                        "only the proposer that bootstraps a timeline sends START_WAL_PUSH "
                        "(allow_timeline_creation 'true'); a safekeeper that lost the timeline "
                        "must be restored or replaced, not recreated empty");
            return;
        }
        if (tl == NULL) {
            tl = tl_create(node, &p->tenant_id, &p->timeline_id, &why);
            if (tl == NULL) {
                metrics_counter_inc(node->metrics.errors);
                sk_fatal_to(p->conn, SQLSTATE_IO_ERROR, "could not create timeline", why);
                return;
            }
        }
        p->tl = tl;
        tl->connections++;
    }
    sk_timeline *tl = p->tl;
    p->msg = malloc(n > 0 ? n : 1);
    if (p->msg == NULL) {
        sk_fatal_to(p->conn, SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return;
    }
    memcpy(p->msg, data, n);
    p->msg_len = n;
    pgwire_conn_pause_input(p->conn, true);
    p->queued = true;
    p->next_queued = NULL;
    if (tl->queue_tail != NULL)
        tl->queue_tail->next_queued = p;
    else
        tl->queue_head = p;
    tl->queue_tail = p;
    sk_timeline_kick(tl);
}

void sk_pusher_closed(sk_node *node, sk_pusher *p)
{
    (void)node;
    p->conn = NULL;
    sk_timeline *tl = p->tl;
    if (tl == NULL) {
        sk_pusher_free_message(p);
        free(p);
        return;
    }
    tl->connections--;
    if (tl->streaming == p)
        tl->streaming = NULL;
    if (tl->recover_for == p)
        tl->recover_for = NULL;
    if (tl->exec == p && tl->executing)
        return; /* finish_output frees it */
    if (p->queued) {
        sk_pusher **pp = &tl->queue_head;
        sk_pusher *prev = NULL;
        while (*pp != NULL && *pp != p) {
            prev = *pp;
            pp = &(*pp)->next_queued;
        }
        if (*pp == p) {
            *pp = p->next_queued;
            if (tl->queue_tail == p)
                tl->queue_tail = prev;
        }
    }
    sk_pusher_free_message(p);
    free(p);
    sk_node_publish_timeline(tl);
}

/* ---- configuration ---------------------------------------------------- */

int sk_timeline_switch_membership(sk_timeline *tl, const membership *m, acceptor_authority auth,
                                  char *err, size_t errlen)
{
    if (tl->failed) {
        snprintf(err, errlen, "the timeline's WAL storage failed");
        return -1;
    }
    if (tl->executing) {
        snprintf(err, errlen, "the timeline is busy executing a message: try again");
        return -1;
    }
    uint32_t before = acceptor_state(&tl->acc)->mconf.generation;
    if (acceptor_switch_membership(&tl->acc, m, auth, &tl->out) != 0) {
        snprintf(err, errlen, "%s", tl->out.error);
        return -1;
    }
    for (int i = 0; i < tl->out.n; i++) {
        STRATA_ASSERT(tl->out.effects[i].kind == ACC_PERSIST_CONTROL);
        int rc = sk_control_write(tl->dir, &tl->out.control);
        if (rc != 0) {
            sk_timeline_fail(tl, "could not write the control file", rc);
            snprintf(err, errlen, "could not write the control file: %s", strerror(-rc));
            return -1;
        }
        tl->persisted = tl->out.control;
    }
    tl->out.n = 0;
    if (m->generation != before) {
        char name[80], mem[MEMBERSHIP_TEXT_MAX], nmem[MEMBERSHIP_TEXT_MAX];
        membership_format_set(m->members, m->n_members, mem, sizeof mem);
        membership_format_set(m->new_members, m->n_new_members, nmem, sizeof nmem);
        log_info("%s: configuration generation %u -> %u: members %s%s%s",
                 sk_timeline_name(tl, name, sizeof name), before, m->generation, mem,
                 m->n_new_members > 0 ? ", joint with new members " : "", nmem);
        if (tl->streaming != NULL && tl->streaming->conn != NULL)
            sk_fatal_to(tl->streaming->conn, SQLSTATE_ADMIN_SHUTDOWN,
                        "the timeline's safekeeper configuration changed: reconnect to learn it",
                        NULL);
    }
    sk_node_publish_timeline(tl);
    return 0;
}
