/*
 * walproposer_pg.c: the walproposer background worker, i.e. the Postgres
 * edges around the proposer core (compute/walproposer/proposer.h).
 *
 * The core decides everything about Paxos; this file only moves bytes and
 * time in and out of it:
 *  - one nonblocking libpq stream per safekeeper (START_WAL_PUSH), with
 *    connect timeouts and exponential reconnect backoff;
 *  - one physical replication stream from this server's own walsender
 *    (application_name 'walproposer', which synchronous_standby_names
 *    names), started at the lowest point any acceptor needs once elected;
 *    the WAL it delivers is kept in a bounded ring (walbuf.h) and older WAL
 *    is read back from pg_wal;
 *  - standby status updates on that stream with write = flush = apply =
 *    the quorum commit LSN, which is what releases backends waiting in
 *    SyncRepWaitForLSN: a commit returns only once a majority of
 *    safekeepers has fsynced it;
 *  - one WaitEventSet over the latch, postmaster death and every socket;
 *    nothing here blocks.
 *
 * Fencing: when the core reports that an acceptor is at a higher term,
 * another proposer owns the timeline.  This worker then logs why and sends
 * SIGQUIT to the postmaster (immediate shutdown).  That is the one shutdown
 * mode under which no backend waiting in SyncRepWaitForLSN can report its
 * commit as successful: a query cancel releases the waiter with a WARNING
 * and a success, and even SIGTERM makes the server write a shutdown
 * checkpoint that nobody may acknowledge.  SIGQUIT kills every backend at
 * once and clients see a lost connection, never a COMMIT.
 *
 * Clean stop: on the patched server the worker is registered with
 * BGWORKER_STOP_AFTER_CHECKPOINT, so a fast or smart shutdown leaves it
 * running, like a walsender, while the checkpointer writes the shutdown
 * checkpoint; the local walsender streams that record to it as any other.
 * The postmaster then sends SIGUSR2 (its "send the rest of the WAL and
 * exit" to walsenders); the worker exits once a majority of safekeepers has
 * flushed up to the end of the server's WAL, or after
 * strata.safekeeper_timeout without one (WARNING: the next compute then
 * starts at the safekeepers' end, before the checkpoint, and the WAL past it
 * is lost as in any crash of a compute).  The postmaster waits for it, so
 * the next compute starts at the shutdown checkpoint and replays nothing.
 *
 * Not for: the Paxos rules (proposer core), message encoding (proto/), or
 * anything that runs in regular backends.
 */
#include "postgres.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "postmaster/postmaster.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/lsn.h"
#include "compute/extension/strata.h"
#include "compute/walproposer/pqstream.h"
#include "compute/walproposer/walbuf.h"
#include "compute/walproposer/wp_edge.h"
#include "compute/walproposer/proposer.h"
#include "proto/replication.h"
#include "proto/walpush.h"

/* Most safekeepers one compute can name. */
#define WP_MAX_SAFEKEEPERS PROPOSER_MAX_ACCEPTORS
/* Tick period of the core (heartbeats, timeouts). */
#define WP_TICK_MS 100
/* Period of standby status updates even when nothing changed. */
#define WP_STATUS_INTERVAL_MS 1000
/* Application name the walsender sees; synchronous_standby_names names it. */
#define WP_APPLICATION_NAME "walproposer"

typedef struct sk_slot {
    char host[NAMEDATALEN * 2];
    char port[16];
    char addr[NAMEDATALEN * 2 + 17]; /* "host:port" for messages */
    pqstream stream;
    bool up; /* the core has been told it is connected */
    TimestampTz connect_started;
    TimestampTz connected_at; /* 0 while not streaming */
    TimestampTz next_attempt;
    int backoff_ms;
    bool greeted; /* answered our greeting once: it has the timeline */
} sk_slot;

/* Everything the worker owns; one instance per process. */
static struct {
    int n_sk;
    sk_slot sk[WP_MAX_SAFEKEEPERS];
    membership mconf; /* generation 0: strata.safekeepers is the list */
    strata_id tenant;
    strata_id timeline;

    /* Replication stream from our own walsender. */
    pqstream local;
    bool local_wanted; /* elected: the stream should run */
    lsn_t local_start; /* where it starts streaming */
    TimestampTz local_next_attempt;
    walbuf buf;
    lsn_t wal_end; /* end of WAL received so far */
    char waldir[MAXPGPATH];
    uint8 *scratch;  /* WALPUSH_MAX_MESSAGE bytes for encoding */
    uint8 *walbytes; /* WALPUSH_MAX_APPEND bytes of one append */

    /* The proposer core and the effects of the current call into it. */
    proposer core;
    proposer_output out;
    uint32 failed;          /* acceptors to drop once the effects ran */
    bool busy;              /* a receive budget ran out: poll again at once */
    TimestampTz news_since; /* when news first waited for a WAL append; 0: none */
    int fence_acceptor;     /* sender and term of the message being handled */
    uint64 fence_term;

    /* Commit acknowledgement. */
    lsn_t commit_lsn; /* quorum commit reported by the core */
    lsn_t acked_lsn;  /* last value sent in a status update */
    TimestampTz last_status;

    /* Waiting. */
    WaitEventSet *wes;
    int wes_fd[WP_MAX_SAFEKEEPERS + 1];
    unsigned long wes_gen[WP_MAX_SAFEKEEPERS + 1];
    uint32 wes_events[WP_MAX_SAFEKEEPERS + 1];
    int wes_pos[WP_MAX_SAFEKEEPERS + 1];
    /* The last wait saw stream i's socket readable (stream_recv reads it). */
    bool readable[WP_MAX_SAFEKEEPERS + 1];
} wp;

static void wp_stop(const char *reason) pg_attribute_noreturn();
static void shutdown_step(TimestampTz now);

/* SIGUSR2 from the postmaster: the shutdown checkpoint is written. */
static volatile sig_atomic_t shutdown_requested = false;
/* Once it came: the end of the server's WAL, and when to give up on it. */
static XLogRecPtr shutdown_wal_end = InvalidXLogRecPtr;
static TimestampTz shutdown_deadline = 0;
static void basebackup_signal_consumed(void);

/* The name of the file the compute launcher writes (see read_basebackup_signal). */
#define STRATA_SIGNAL_FILE "strata.signal"

/* X when started from a basebackup at X and not yet elected; 0 otherwise. */
static XLogRecPtr basebackup_lsn = InvalidXLogRecPtr;

/*
 * The last term this server's walproposer was elected in, kept in shared
 * memory so that it outlives a restart of the background worker (and ends
 * with the postmaster).  A restarted walproposer may continue only WAL its
 * own earlier term wrote: see check_own_history.
 */
typedef struct wp_shared {
    pg_atomic_uint64 last_elected_term;
    /* Where this server's real WAL begins: for a compute started from the
     * pageserver, its first term's start (the basebackup LSN, or the start
     * of its segment on an empty timeline; its pg_wal holds nothing real
     * before it), 0 for a server with its own history. */
    pg_atomic_uint64 own_wal_start;
    /* The newest safekeeper configuration a safekeeper told us (generation
     * 0: none yet, strata.safekeepers is the list).  Written by the worker
     * before it restarts to use it; read by the next worker. */
    membership mconf;
} wp_shared;
static wp_shared *wp_sh = NULL;
static shmem_request_hook_type prev_wp_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_wp_shmem_startup_hook = NULL;

static void wp_shmem_request(void)
{
    if (prev_wp_shmem_request_hook)
        prev_wp_shmem_request_hook();
    RequestAddinShmemSpace(MAXALIGN(sizeof(wp_shared)));
}

static void wp_shmem_startup(void)
{
    bool found;

    if (prev_wp_shmem_startup_hook)
        prev_wp_shmem_startup_hook();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    wp_sh = ShmemInitStruct("strata walproposer", sizeof(wp_shared), &found);
    if (!found) {
        pg_atomic_init_u64(&wp_sh->last_elected_term, 0);
        pg_atomic_init_u64(&wp_sh->own_wal_start, 0);
        memset(&wp_sh->mconf, 0, sizeof(wp_sh->mconf));
    }
    LWLockRelease(AddinShmemInitLock);
}

/* ---- registration ------------------------------------------------------ */

void strata_walproposer_register(void)
{
    BackgroundWorker bgw;
    Dl_info info;

    memset(&bgw, 0, sizeof(bgw));
    bgw.bgw_flags = BGWORKER_SHMEM_ACCESS;
#ifdef BGWORKER_STOP_AFTER_CHECKPOINT
    /* The patched server: stay for the shutdown checkpoint (file header). */
    bgw.bgw_flags |= BGWORKER_STOP_AFTER_CHECKPOINT;
#endif
    bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
    bgw.bgw_restart_time = 1;
    /* The library may be preloaded by absolute path: load it the same way. */
    if (dladdr((void *)strata_walproposer_main, &info) != 0 && info.dli_fname != NULL)
        strlcpy(bgw.bgw_library_name, info.dli_fname, sizeof(bgw.bgw_library_name));
    else
        strlcpy(bgw.bgw_library_name, "strata", sizeof(bgw.bgw_library_name));
    strlcpy(bgw.bgw_function_name, "strata_walproposer_main", sizeof(bgw.bgw_function_name));
    strlcpy(bgw.bgw_name, "strata walproposer", sizeof(bgw.bgw_name));
    strlcpy(bgw.bgw_type, "strata walproposer", sizeof(bgw.bgw_type));
    RegisterBackgroundWorker(&bgw);
    prev_wp_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = wp_shmem_request;
    prev_wp_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = wp_shmem_startup;
}

/* ---- configuration ----------------------------------------------------- */

/* The safekeepers of a configuration learned earlier (see wp_shared). */
static void slots_from_membership(const membership *m)
{
    member slots[WP_MAX_SAFEKEEPERS];
    int n = membership_union(m, slots);

    wp.n_sk = 0;
    for (int i = 0; i < n; i++) {
        sk_slot *sk = &wp.sk[wp.n_sk++];
        const char *colon = strrchr(slots[i].addr, ':');

        if (colon == NULL || colon == slots[i].addr)
            ereport(FATAL, (errmsg("strata walproposer: configuration generation %u names "
                                   "member " UINT64_FORMAT " at \"%s\", not host:port",
                                   m->generation, slots[i].node_id, slots[i].addr)));
        snprintf(sk->host, sizeof(sk->host), "%.*s", (int)(colon - slots[i].addr), slots[i].addr);
        strlcpy(sk->port, colon + 1, sizeof(sk->port));
        snprintf(sk->addr, sizeof(sk->addr), "%s", slots[i].addr);
        pqstream_init(&sk->stream);
        sk->backoff_ms = 0;
        sk->next_attempt = 0;
    }
    wp.mconf = *m;
}

static void parse_safekeepers(void)
{
    char *list = pstrdup(strata_safekeepers);
    char *save = NULL;

    wp.n_sk = 0;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        sk_slot *sk;

        while (*tok == ' ')
            tok++;
        if (wp.n_sk == WP_MAX_SAFEKEEPERS)
            ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("strata.safekeepers names more than %d safekeepers",
                                   WP_MAX_SAFEKEEPERS)));
        /* strata.c's check hook guarantees host:port with a numeric port. */
        Assert(colon != NULL);
        sk = &wp.sk[wp.n_sk++];
        *colon = '\0';
        strlcpy(sk->host, tok, sizeof(sk->host));
        strlcpy(sk->port, colon + 1, sizeof(sk->port));
        snprintf(sk->addr, sizeof(sk->addr), "%s:%s", sk->host, sk->port);
        pqstream_init(&sk->stream);
        sk->backoff_ms = 0;
        sk->next_attempt = 0;
    }
    pfree(list);
    if (wp_sh != NULL && wp_sh->mconf.generation > 0) {
        ereport(LOG, (errmsg("strata walproposer: using safekeeper configuration generation %u "
                             "learned from the safekeepers",
                             wp_sh->mconf.generation)));
        slots_from_membership(&wp_sh->mconf);
    }
    if (!strata_id_parse(strata_tenant_id, &wp.tenant) ||
        !strata_id_parse(strata_timeline_id, &wp.timeline))
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("strata.tenant_id and strata.timeline_id must be set")));
}

/* ---- safekeeper connections ------------------------------------------- */

/*
 * Plans the next connection attempt.  The delay doubles per failure; only a
 * connection that stayed up for a while starts a fresh series, so a
 * safekeeper that accepts and then fails at once is not hammered.
 */
static void sk_schedule_retry(sk_slot *sk, TimestampTz now)
{
    uint64 up_ms = sk->connected_at != 0 && now > sk->connected_at
                       ? (uint64)(now - sk->connected_at) / 1000
                       : 0;
    int min_ms = Min(strata_safekeeper_reconnect_delay, strata_safekeeper_reconnect_max_delay);

    sk->connected_at = 0;
    sk->backoff_ms = (int)wp_edge_backoff((uint32)sk->backoff_ms, up_ms, (uint32)min_ms,
                                          (uint32)strata_safekeeper_reconnect_max_delay);
    sk->next_attempt = TimestampTzPlusMilliseconds(now, sk->backoff_ms);
}

static void sk_start(sk_slot *sk, TimestampTz now)
{
    wp_edge_params params;

    wp_edge_safekeeper_params(&params, sk->host, sk->port, &wp.tenant, &wp.timeline, "walproposer",
                              strata_safekeeper_connect_timeout / 1000, strata_safekeeper_password);
    /* Creation only while bootstrapping: once a safekeeper has answered a
     * greeting it holds the timeline, and losing it later must be an error. */
    if (strata_allow_timeline_creation && !sk->greeted)
        snprintf(params.query, sizeof(params.query),
                 "START_WAL_PUSH (proto_version '%d', allow_timeline_creation 'true')",
                 WALPUSH_PROTO_VERSION);
    sk->connect_started = now;
    if (pqstream_start(&sk->stream, params.keys, params.vals, params.query) != PQSTREAM_OK) {
        ereport(sk->backoff_ms == 0 ? LOG : DEBUG1,
                (errmsg("strata walproposer: cannot connect to safekeeper %s: %s", sk->addr,
                        pqstream_error(&sk->stream))));
        sk_schedule_retry(sk, now);
    }
}

/* ---- local WAL source ---------------------------------------------------- */

static void local_start(TimestampTz now)
{
    char port[16];
    char host[MAXPGPATH];
    char query[64];
    char lsnbuf[LSN_FMT_LEN];
    const char *keys[PQSTREAM_MAX_PARAMS];
    const char *vals[PQSTREAM_MAX_PARAMS];
    int n = 0;

    /* Our own postmaster: its first unix socket directory, else loopback. */
    if (Unix_socket_directories != NULL && Unix_socket_directories[0] != '\0') {
        const char *comma = strchr(Unix_socket_directories, ',');
        size_t len =
            comma ? (size_t)(comma - Unix_socket_directories) : strlen(Unix_socket_directories);
        strlcpy(host, Unix_socket_directories, Min(len + 1, sizeof(host)));
    } else
        strlcpy(host, "127.0.0.1", sizeof(host));
    snprintf(port, sizeof(port), "%d", PostPortNumber);
    keys[n] = "host", vals[n++] = host;
    keys[n] = "port", vals[n++] = port;
    keys[n] = "replication", vals[n++] = "true";
    keys[n] = "dbname", vals[n++] = "replication";
    keys[n] = "application_name", vals[n++] = WP_APPLICATION_NAME;
    if (strata_local_user[0] != '\0')
        keys[n] = "user", vals[n++] = strata_local_user;
    keys[n] = NULL, vals[n] = NULL;

    /* A restarted stream resumes where the ring ends, keeping the ring. */
    snprintf(query, sizeof(query), "START_REPLICATION PHYSICAL %s", lsn_format(wp.wal_end, lsnbuf));
    if (pqstream_start(&wp.local, keys, vals, query) != PQSTREAM_OK) {
        ereport(LOG, (errmsg("strata walproposer: cannot connect to the local walsender: %s",
                             pqstream_error(&wp.local))));
        wp.local_next_attempt = TimestampTzPlusMilliseconds(now, 1000);
    } else
        ereport(LOG, (errmsg("strata walproposer: streaming local WAL from %s", lsnbuf)));
}

/* Sends a standby status update acknowledging commit_lsn as flushed. */
static void local_send_status(TimestampTz now, bool force)
{
    replication_msg status = {.kind = REPLICATION_STATUS_UPDATE,
                              .u.status = {.write_lsn = wp.commit_lsn,
                                           .flush_lsn = wp.commit_lsn,
                                           .apply_lsn = wp.commit_lsn}};
    uint8 msg[REPLICATION_STATUS_UPDATE_LEN];
    size_t len;

    if (wp.local.state != PQSTREAM_STREAMING)
        return;
    if (!force && wp.commit_lsn == wp.acked_lsn &&
        !TimestampDifferenceExceeds(wp.last_status, now, WP_STATUS_INTERVAL_MS))
        return;
    status.u.status.send_time = replication_now();
    len = replication_encode(&status, msg, sizeof msg);
    Assert(len == sizeof msg);
    if (pqstream_send(&wp.local, msg, len) != 0) {
        ereport(LOG, (errmsg("strata walproposer: lost the local walsender: %s",
                             pqstream_error(&wp.local))));
        return;
    }
    wp.acked_lsn = wp.commit_lsn;
    wp.last_status = now;
}

/*
 * Copies WAL [begin, begin+len) from the ring or, when it is older, from the
 * segment files.  ERRORs out only if neither has it (the acceptor needs WAL
 * this compute no longer keeps).
 */
static bool wal_read(lsn_t begin, uint8 *out, size_t len, char *err, size_t errlen)
{
    lsn_t own_start = pg_atomic_read_u64(&wp_sh->own_wal_start);

    Assert(begin + len <= wp.wal_end);
    if (begin < own_start) {
        char a[LSN_FMT_LEN];

        /* Bytes below it in its segment file are not WAL anyone wrote. */
        snprintf(err, errlen,
                 "this compute's WAL begins at %s, its basebackup; older WAL must come from "
                 "another safekeeper",
                 lsn_format(own_start, a));
        return false;
    }
    if (walbuf_read(&wp.buf, begin, out, len))
        return true;
    return walbuf_read_segments(wp.waldir, GetWALInsertionTimeLine(), (uint32)wal_segment_size,
                                begin, out, len, err, errlen) == 0;
}

/* ---- waiting ------------------------------------------------------------- */

static pqstream *stream_at(int i)
{
    return i < wp.n_sk ? &wp.sk[i].stream : &wp.local;
}

/*
 * Waits until the latch is set, a socket is ready or timeout_ms passes.
 * The set is rebuilt only when a socket changed (libpq may switch sockets
 * while connecting); changed event masks are applied in place.
 */
static void wait_for_work(long timeout_ms)
{
    int n = wp.n_sk + 1;
    bool rebuild = (wp.wes == NULL);
    WaitEvent events[WP_MAX_SAFEKEEPERS + 3];

    for (int i = 0; i < n && !rebuild; i++) {
        pqstream *s = stream_at(i);
        int fd = pqstream_wait_events(s) ? pqstream_socket(s) : -1;
        if (fd != wp.wes_fd[i] || (fd >= 0 && s->generation != wp.wes_gen[i]))
            rebuild = true;
    }
    if (rebuild) {
        if (wp.wes != NULL)
            FreeWaitEventSet(wp.wes);
        wp.wes = CreateWaitEventSet(TopMemoryContext, n + 2);
        AddWaitEventToSet(wp.wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
        AddWaitEventToSet(wp.wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
        for (int i = 0; i < n; i++) {
            wp.wes_fd[i] = -1;
            wp.wes_events[i] = 0;
            wp.wes_pos[i] = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        pqstream *s = stream_at(i);
        int ev = pqstream_wait_events(s);
        int fd = ev ? pqstream_socket(s) : -1;
        uint32 want = 0;

        if (ev & PQSTREAM_WAIT_READ)
            want |= WL_SOCKET_READABLE;
        if (ev & PQSTREAM_WAIT_WRITE)
            want |= WL_SOCKET_WRITEABLE;
        if (fd < 0)
            continue;
        if (wp.wes_pos[i] < 0) {
            wp.wes_pos[i] = AddWaitEventToSet(wp.wes, want, fd, NULL, NULL);
            wp.wes_fd[i] = fd;
            wp.wes_gen[i] = s->generation;
            wp.wes_events[i] = want;
        } else if (wp.wes_events[i] != want) {
            ModifyWaitEvent(wp.wes, wp.wes_pos[i], want, NULL);
            wp.wes_events[i] = want;
        }
    }
    int nev = WaitEventSetWait(wp.wes, timeout_ms, events, lengthof(events), PG_WAIT_EXTENSION);
    for (int e = 0; e < nev; e++) {
        if (!(events[e].events & WL_SOCKET_READABLE))
            continue;
        for (int i = 0; i < n; i++) {
            if (wp.wes_pos[i] == events[e].pos)
                wp.readable[i] = true;
        }
    }
    ResetLatch(MyLatch);
}

/*
 * The next message of streaming stream i (as pqstream_recv): what libpq has
 * buffered, and the socket's bytes only when the last wait saw it readable,
 * once per wait.  Every wake-up thus costs one recv per ready socket, not
 * one per stream plus one more per ready one.  Nothing is missed: the loop
 * drains libpq's buffer every iteration (or sets busy), and bytes still in
 * a socket keep it readable for the next wait.
 */
static int stream_recv(int i, char **msg, int *len)
{
    pqstream *s = stream_at(i);
    int r = pqstream_recv_buffered(s, msg, len);

    if (r != 0 || !wp.readable[i])
        return r;
    wp.readable[i] = false;
    if (pqstream_consume(s) != 0)
        return -1;
    return pqstream_recv_buffered(s, msg, len);
}

/* ---- driving the proposer core ----------------------------------------- */

static uint64 monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64)ts.tv_sec * 1000 + (uint64)ts.tv_nsec / 1000000;
}

/* The term an acceptor message carries (for the fencing message). */
static uint64 acceptor_msg_term(const acceptor_msg *msg)
{
    switch (msg->kind) {
    case AMSG_GREETING:
        return msg->u.greeting.term;
    case AMSG_VOTE_RESPONSE:
        return msg->u.vote.term;
    case AMSG_APPEND_RESPONSE:
        return msg->u.append.term;
    }
    return 0;
}

/* Closes acceptor i's stream (the core already knows or is told by caller). */
static void sk_drop(int i, TimestampTz now)
{
    sk_slot *sk = &wp.sk[i];

    pqstream_close(&sk->stream);
    sk->up = false;
    sk_schedule_retry(sk, now);
}

/* Sends msg to acceptor i; a send failure marks it in wp.failed. */
static void sk_send(int i, const proposer_msg *msg)
{
    switch (wp_edge_send(&wp.sk[i].stream, msg, wp.scratch, WALPUSH_MAX_MESSAGE)) {
    case WP_EDGE_SENT:
        break;
    case WP_EDGE_SEND_FAILED:
        wp.failed |= 1u << i;
        break;
    case WP_EDGE_ENCODE_FAILED:
        elog(ERROR, "strata walproposer: cannot encode a message of kind %d", (int)msg->kind);
    }
}

static void send_append(int i, const append_request *ar, TimestampTz now)
{
    sk_slot *sk = &wp.sk[i];
    proposer_msg msg;
    size_t wal_len = (size_t)(ar->end_lsn - ar->begin_lsn);
    char err[MAXPGPATH + 128];

    Assert(ar->end_lsn >= ar->begin_lsn && wal_len <= WALPUSH_MAX_APPEND);
    if (wal_len > 0 && !wal_read(ar->begin_lsn, wp.walbytes, wal_len, err, sizeof(err))) {
        char lsnbuf[LSN_FMT_LEN];

        ereport(
            WARNING,
            (errcode(ERRCODE_UNDEFINED_FILE),
             errmsg("strata walproposer: cannot send WAL at %s to safekeeper %s",
                    lsn_format(ar->begin_lsn, lsnbuf), sk->addr),
             errdetail("%s", err),
             errhint(
                 "Raise wal_keep_size so that pg_wal keeps the WAL lagging safekeepers need.")));
        wp.failed |= 1u << i;
        return;
    }
    if (!wp_edge_append_msg(ar, wp.walbytes, &msg))
        elog(ERROR, "strata walproposer: invalid AppendRequest of %zu bytes", wal_len);
    sk_send(i, &msg);
}

/*
 * A walproposer restarted while its server kept running (the background
 * worker exits on an error and comes back a second later) streams this
 * server's own pg_wal after the safekeepers' WAL.  That is right only if
 * the safekeepers' WAL is this server's: the donor's history must end with
 * the term this server was last elected in.  If another compute was elected
 * meanwhile and wrote WAL, that WAL and ours diverge although our local WAL
 * may be longer (the term-start check above passes); continuing would
 * append our bytes after theirs and fence a compute whose commits were
 * acknowledged.  Such a server can only stop: a new compute starts from
 * the pageserver at the safekeepers' end.  (A compute's first election is
 * checked against its basebackup LSN instead.)
 */
static void check_own_history(const proposer_effect *e)
{
    uint64 mine = pg_atomic_read_u64(&wp_sh->last_elected_term);

    if (basebackup_lsn != InvalidXLogRecPtr || mine == 0)
        return;
    if (e->u.elected.donor_last_term != mine)
        wp_stop(psprintf("this server's walproposer was last elected in term " UINT64_FORMAT
                         " but the safekeepers' WAL was last written in term " UINT64_FORMAT
                         ": another compute wrote WAL while this walproposer was down, and "
                         "this server's WAL after it may differ; start a new compute (strata "
                         "start compute)",
                         mine, e->u.elected.donor_last_term));
}

static void on_elected(const proposer_effect *e, TimestampTz now)
{
    char start[LSN_FMT_LEN], tstart[LSN_FMT_LEN], flush[LSN_FMT_LEN];
    XLogRecPtr local_flush = GetFlushRecPtr(NULL);

    ereport(LOG, (errmsg("strata walproposer: elected in term " UINT64_FORMAT
                         ", donor safekeeper %s, term starts at %s, streaming from %s",
                         e->u.elected.term, wp.sk[e->u.elected.donor].addr,
                         lsn_format(e->u.elected.term_start_lsn, tstart),
                         lsn_format(e->u.elected.start_streaming_at, start))));
    /*
     * The safekeepers' WAL up to term_start_lsn must be WAL this server
     * wrote: we stream our own pg_wal from start_streaming_at on.  A term
     * start beyond our WAL means the safekeepers hold WAL we never had.
     */
    if (e->u.elected.term_start_lsn > local_flush)
        wp_stop(psprintf("the safekeepers' WAL ends at %s, beyond this server's WAL at %s: this "
                         "compute did not write that WAL",
                         tstart, lsn_format(local_flush, flush)));
    /*
     * A compute started from a basebackup at X holds no real WAL before X
     * and must begin its term exactly at X (or, on an empty timeline, at
     * the start of X's segment, the bootstrap LSN): safekeepers that end
     * elsewhere hold WAL this compute never had (someone wrote after our
     * sync-safekeepers) or lack WAL it assumed.
     */
    if (basebackup_lsn != InvalidXLogRecPtr && e->u.elected.term_start_lsn != basebackup_lsn &&
        e->u.elected.term_start_lsn !=
            basebackup_lsn - XLogSegmentOffset(basebackup_lsn, wal_segment_size)) {
        char bb[LSN_FMT_LEN];
        wp_stop(psprintf("the elected term starts at %s but this compute was started from a "
                         "basebackup at %s: the safekeepers' WAL %s; start a new compute "
                         "(strata start compute) so that it syncs the safekeepers again",
                         tstart, lsn_format(basebackup_lsn, bb),
                         e->u.elected.term_start_lsn > basebackup_lsn
                             ? "continues past the basebackup (another compute wrote it)"
                             : "ends before the basebackup"));
    }
    check_own_history(e);
    pg_atomic_write_u64(&wp_sh->last_elected_term, e->u.elected.term);
    if (basebackup_lsn != InvalidXLogRecPtr) {
        /* The term starts at X, or on an empty timeline at the start of X's
         * segment, which the basebackup ships whole (checked above). */
        pg_atomic_write_u64(&wp_sh->own_wal_start, e->u.elected.term_start_lsn);
        basebackup_signal_consumed();
    }
    wp.local_wanted = true;
    wp.local_start = e->u.elected.start_streaming_at;
    /*
     * A safekeeper that lags behind this compute's basebackup (sync-safekeepers
     * brings a majority to the term start, and waits only briefly for the
     * others) needs WAL this compute never had.  Stream from the basebackup:
     * the others get every record and commits go on with them; that one's
     * appends fail (wal_read) and it stays behind until another source
     * supplies the older WAL.  Streaming from its position would stop the
     * local stream, and with it every commit.
     */
    if (wp.local_start < pg_atomic_read_u64(&wp_sh->own_wal_start)) {
        char own[LSN_FMT_LEN];

        wp.local_start = pg_atomic_read_u64(&wp_sh->own_wal_start);
        ereport(WARNING,
                (errmsg("strata walproposer: a safekeeper needs WAL from %s, before this "
                        "compute's basebackup at %s; streaming from %s, that safekeeper stays "
                        "behind",
                        start, lsn_format(wp.local_start, own), own)));
    }
    walbuf_reset(&wp.buf, wp.local_start);
    wp.wal_end = wp.local_start;
    if (wp.local.state != PQSTREAM_IDLE)
        pqstream_close(&wp.local);
    wp.local_next_attempt = 0;
    local_start(now);
}

/*
 * Executes the effects in wp.out in order.  Effects that fail on our side
 * (a send error, WAL we no longer have) mark the acceptor in wp.failed; the
 * core is told about those only after the whole list ran, because SEND
 * effects point into the core's state until the next call into it.
 */
static void run_effects(TimestampTz now)
{
    for (;;) {
        int lost;

        for (int k = 0; k < wp.out.n; k++) {
            const proposer_effect *e = &wp.out.effects[k];
            int i = e->acceptor;

            switch (e->kind) {
            case PROP_SEND:
                if ((wp.failed & (1u << i)) || wp.sk[i].stream.state != PQSTREAM_STREAMING)
                    break;
                sk_send(i, e->u.msg);
                break;
            case PROP_APPEND:
                if ((wp.failed & (1u << i)) || wp.sk[i].stream.state != PQSTREAM_STREAMING)
                    break;
                send_append(i, &e->u.append, now);
                break;
            case PROP_DISCONNECT:
                ereport(LOG, (errmsg("strata walproposer: dropping safekeeper %s (timeout or "
                                     "protocol violation)",
                                     wp.sk[i].addr)));
                sk_drop(i, now);
                break;
            case PROP_ELECTED:
                on_elected(e, now);
                break;
            case PROP_COMMIT_ADVANCED:
                Assert(e->u.commit_lsn >= wp.commit_lsn);
                wp.commit_lsn = e->u.commit_lsn;
                local_send_status(now, true);
                break;
            case PROP_FENCED: {
                const char *why = e->u.reason;

                if (wp.fence_term > proposer_term(&wp.core))
                    why = psprintf(
                        "safekeeper %s is at term " UINT64_FORMAT
                        ", higher than ours " UINT64_FORMAT ": another walproposer took over",
                        wp.sk[wp.fence_acceptor].addr, wp.fence_term, proposer_term(&wp.core));
                wp_stop(psprintf("%s (%s)", why, e->u.reason));
                break;
            }
            case PROP_SYNC_DONE:
                elog(ERROR,
                     "strata walproposer: the proposer core finished a sync in compute mode");
                break;
            case PROP_RECONFIGURE:
                /* Keep it for the next worker, which starts a new election
                 * with those members; the postmaster restarts us. */
                memcpy(&wp_sh->mconf, e->u.mconf, sizeof(wp_sh->mconf));
                ereport(LOG, (errmsg("strata walproposer: safekeeper %s holds configuration "
                                     "generation %u; restarting with its members",
                                     wp.sk[i].addr, e->u.mconf->generation)));
                proc_exit(1);
            }
        }
        wp.out.n = 0;
        /* Tell the core about an acceptor we had to drop; that may produce
         * more effects, so run those before touching the core again. */
        lost = wp_edge_take_failed(&wp.failed);
        if (lost < 0)
            return;
        if (wp.sk[lost].stream.state != PQSTREAM_IDLE || wp.sk[lost].up) {
            ereport(LOG, (errmsg("strata walproposer: lost safekeeper %s: %s", wp.sk[lost].addr,
                                 pqstream_error(&wp.sk[lost].stream))));
            sk_drop(lost, now);
        }
        proposer_disconnected(&wp.core, lost, &wp.out);
    }
}

static void core_connected(int i, TimestampTz now)
{
    ereport(LOG, (errmsg("strata walproposer: connected to safekeeper %s", wp.sk[i].addr)));
    proposer_connected(&wp.core, i, &wp.out);
    run_effects(now);
}

static void core_disconnected(int i, TimestampTz now)
{
    proposer_disconnected(&wp.core, i, &wp.out);
    run_effects(now);
}

static void core_message(int i, const uint8 *buf, size_t len, TimestampTz now)
{
    acceptor_msg msg;
    const char *why;

    if (walpush_decode_acceptor_msg(buf, len, &msg, &why) != 0) {
        ereport(LOG, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                      errmsg("strata walproposer: bad message from safekeeper %s, reconnecting",
                             wp.sk[i].addr),
                      errdetail("%s", why)));
        sk_drop(i, now);
        proposer_disconnected(&wp.core, i, &wp.out);
        run_effects(now);
        return;
    }
    if (msg.kind == AMSG_GREETING)
        wp.sk[i].greeted = true;
    wp.fence_acceptor = i;
    wp.fence_term = acceptor_msg_term(&msg);
    if (proposer_handle_message(&wp.core, i, &msg, &wp.out) != 0)
        ereport(LOG,
                (errcode(ERRCODE_PROTOCOL_VIOLATION),
                 errmsg("strata walproposer: unexpected message from safekeeper %s, reconnecting",
                        wp.sk[i].addr)));
    run_effects(now);
}

static void core_tick(TimestampTz now)
{
    proposer_tick(&wp.core, monotonic_ms(), &wp.out);
    run_effects(now);
}

static void core_wal_available(lsn_t end, TimestampTz now)
{
    proposer_wal_available(&wp.core, end, &wp.out);
    run_effects(now);
}

/*
 * A new commit LSN (or pageserver feedback) for safekeepers with no WAL to
 * send waits up to strata.commit_notice_delay for the next WAL append to
 * carry it.  Under load that append comes first: without the wait every
 * commit cost each safekeeper one more message and one more answer.
 */
static void core_news(TimestampTz now)
{
    if (!proposer_news_pending(&wp.core)) {
        wp.news_since = 0;
        return;
    }
    if (wp.news_since == 0)
        wp.news_since = now;
    if (!TimestampDifferenceExceeds(wp.news_since, now, strata_commit_notice_delay))
        return;
    wp.news_since = 0;
    proposer_send_news(&wp.core, &wp.out);
    run_effects(now);
}

/* ---- event handling ------------------------------------------------------ */

static void handle_sk(int i, TimestampTz now)
{
    sk_slot *sk = &wp.sk[i];
    pqstream_state before = sk->stream.state;

    if (before == PQSTREAM_IDLE) {
        if (now >= sk->next_attempt)
            sk_start(sk, now);
        return;
    }
    if (before != PQSTREAM_STREAMING) {
        if (pqstream_advance(&sk->stream) != PQSTREAM_OK) {
            /* Only the first failure of a series is worth a LOG line. */
            ereport(sk->backoff_ms == 0 ? LOG : DEBUG1,
                    (errmsg("strata walproposer: cannot connect to safekeeper %s: %s", sk->addr,
                            pqstream_error(&sk->stream))));
            sk_schedule_retry(sk, now);
            return;
        }
        if (sk->stream.state != PQSTREAM_STREAMING) {
            if (TimestampDifferenceExceeds(sk->connect_started, now,
                                           strata_safekeeper_connect_timeout)) {
                ereport(LOG, (errmsg("strata walproposer: connecting to safekeeper %s timed out",
                                     sk->addr)));
                pqstream_close(&sk->stream);
                sk_schedule_retry(sk, now);
            }
            return;
        }
        sk->up = true;
        sk->connected_at = now;
        core_connected(i, now);
    }
    for (int budget = 64; sk->stream.state == PQSTREAM_STREAMING; budget--) {
        char *msg;
        int len;
        int r;

        if (budget == 0) {
            wp.busy = true; /* libpq may hold more than the socket shows */
            break;
        }
        r = stream_recv(i, &msg, &len);
        if (r <= 0)
            break;
        core_message(i, (const uint8 *)msg, (size_t)len, now);
        PQfreemem(msg);
    }
    if (sk->stream.state == PQSTREAM_STREAMING && pqstream_flush(&sk->stream) != 0)
        Assert(sk->stream.state == PQSTREAM_IDLE);
    /* A read or flush failure (effects that dropped it cleared sk->up). */
    if (sk->stream.state == PQSTREAM_IDLE && sk->up) {
        ereport(LOG, (errmsg("strata walproposer: lost safekeeper %s: %s", sk->addr,
                             pqstream_error(&sk->stream))));
        sk->up = false;
        sk_schedule_retry(sk, now);
        core_disconnected(i, now);
    }
}

static void handle_local(TimestampTz now)
{
    if (!wp.local_wanted)
        return;
    if (wp.local.state == PQSTREAM_IDLE) {
        /* In shutdown the walsender left after sending everything; the
         * postmaster takes no new connections. */
        if (now >= wp.local_next_attempt && !shutdown_requested)
            local_start(now);
        return;
    }
    if (wp.local.state != PQSTREAM_STREAMING) {
        if (pqstream_advance(&wp.local) != PQSTREAM_OK) {
            ereport(LOG, (errmsg("strata walproposer: cannot stream from the local walsender: %s",
                                 pqstream_error(&wp.local))));
            wp.local_next_attempt = TimestampTzPlusMilliseconds(now, 1000);
            return;
        }
        if (wp.local.state != PQSTREAM_STREAMING)
            return;
        /* A new walsender knows nothing yet: tell it the commit point now. */
        local_send_status(now, true);
    }
    for (int budget = 256; wp.local.state == PQSTREAM_STREAMING; budget--) {
        char *raw;
        int len;
        replication_msg msg;
        const char *why;
        int r;

        if (budget == 0) {
            wp.busy = true;
            break;
        }
        r = stream_recv(wp.n_sk, &raw, &len);
        if (r <= 0)
            break;
        if (replication_decode_server_msg((const uint8 *)raw, (size_t)len, &msg, &why) != 0) {
            PQfreemem(raw);
            ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                            errmsg("strata walproposer: bad message from the local walsender"),
                            errdetail("%s", why)));
        }
        if (msg.kind == REPLICATION_XLOGDATA && msg.u.xlogdata.data_len > 0) {
            const replication_xlogdata *x = &msg.u.xlogdata;

            if (walbuf_append(&wp.buf, x->wal_start, x->data, x->data_len) != 0) {
                char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
                PQfreemem(raw);
                ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                                errmsg("strata walproposer: the local walsender skipped WAL"),
                                errdetail("Expected WAL at %s, got %s.", lsn_format(wp.wal_end, a),
                                          lsn_format(x->wal_start, b))));
            }
            wp.wal_end = x->wal_start + x->data_len;
            core_wal_available(wp.wal_end, now);
        } else if (msg.kind == REPLICATION_KEEPALIVE && msg.u.keepalive.reply_requested)
            local_send_status(now, true);
        PQfreemem(raw);
    }
    if (wp.local.state == PQSTREAM_STREAMING)
        (void)pqstream_flush(&wp.local);
    if (wp.local.state == PQSTREAM_IDLE) {
        ereport(shutdown_requested ? DEBUG1 : LOG,
                (errmsg("strata walproposer: lost the local walsender: %s",
                        pqstream_error(&wp.local))));
        wp.local_next_attempt = TimestampTzPlusMilliseconds(now, 1000);
    }
}

/* How long the loop may sleep before something is due. */
static long next_timeout(TimestampTz now)
{
    long timeout = WP_TICK_MS;

    if (wp.busy) {
        wp.busy = false;
        return 0;
    }
    if (wp.news_since != 0) {
        TimestampTz due = TimestampTzPlusMilliseconds(wp.news_since, strata_commit_notice_delay);
        timeout = due <= now ? 0 : Min(timeout, (long)((due - now + 999) / 1000));
    }
    for (int i = 0; i < wp.n_sk; i++) {
        sk_slot *sk = &wp.sk[i];
        if (sk->stream.state == PQSTREAM_IDLE) {
            long ms = sk->next_attempt <= now ? 0 : (long)((sk->next_attempt - now) / 1000);
            timeout = Min(timeout, ms);
        }
    }
    return timeout;
}

/*
 * The basebackup LSN X of a compute started from a basebackup: the launcher
 * (strata start compute) writes "X/Y\n" into $PGDATA/strata.signal.  0 when
 * there is no such file (a data directory made by initdb, or a restart
 * after the term started).  A malformed file stops the server.
 */
static XLogRecPtr read_basebackup_signal(void)
{
    char path[MAXPGPATH], buf[64];
    FILE *f;
    size_t n;
    lsn_t lsn;

    snprintf(path, sizeof(path), "%s/%s", DataDir, STRATA_SIGNAL_FILE);
    f = AllocateFile(path, "r");
    if (f == NULL)
        return InvalidXLogRecPtr;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    FreeFile(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (!lsn_parse(buf, &lsn) || lsn == 0)
        ereport(FATAL, (errcode(ERRCODE_CONFIG_FILE_ERROR),
                        errmsg("strata walproposer: %s does not hold an LSN: \"%s\"", path, buf)));
    return (XLogRecPtr)lsn;
}

/* After the first election the term started at X: a later restart of this
 * data directory is an ordinary restart, not a start from the basebackup. */
static void basebackup_signal_consumed(void)
{
    char from[MAXPGPATH], to[MAXPGPATH];

    snprintf(from, sizeof(from), "%s/%s", DataDir, STRATA_SIGNAL_FILE);
    snprintf(to, sizeof(to), "%s/%s.done", DataDir, STRATA_SIGNAL_FILE);
    if (rename(from, to) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(),
                          errmsg("strata walproposer: could not rename \"%s\": %m", from)));
    basebackup_lsn = InvalidXLogRecPtr;
}

/*
 * Starts the proposer core.  A new timeline (every safekeeper empty) begins
 * at the start of the WAL segment that holds the basebackup LSN when this
 * compute was started from a basebackup (the bootstrap segment is valid WAL
 * from its first byte: pageserver/service/pgcontrol.h), else at the start of the
 * segment that holds our current insert position: that segment is
 * certainly still in pg_wal, so the walsender can stream it.
 */
static void start_core(void)
{
    proposer_config cfg;
    const char *why;
    XLogRecPtr insert = GetXLogInsertRecPtr();

    proposer_config_defaults(&cfg);
    cfg.defer_news = strata_commit_notice_delay > 0;
    cfg.n_acceptors = wp.n_sk;
    cfg.mconf = wp.mconf;
    cfg.tenant_id = wp.tenant;
    cfg.timeline_id = wp.timeline;
    cfg.pg_version = PG_VERSION_NUM;
    cfg.system_id = GetSystemIdentifier();
    cfg.wal_seg_size = (uint32)wal_segment_size;
    basebackup_lsn = read_basebackup_signal();
    if (basebackup_lsn != InvalidXLogRecPtr)
        cfg.bootstrap_lsn = basebackup_lsn - XLogSegmentOffset(basebackup_lsn, wal_segment_size);
    else
        cfg.bootstrap_lsn = insert - XLogSegmentOffset(insert, wal_segment_size);
    cfg.sync_safekeepers = false;
    cfg.heartbeat_ms = (uint32)strata_safekeeper_heartbeat_interval;
    cfg.timeout_ms = (uint32)strata_safekeeper_timeout;
    if (proposer_init(&wp.core, &cfg, monotonic_ms(), &why) != 0)
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("strata walproposer: bad configuration"), errdetail("%s", why)));
}

static void handle_sigusr2(SIGNAL_ARGS)
{
    int save_errno = errno;

    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

/*
 * After SIGUSR2: exits once the quorum commit LSN reached the end of the
 * server's WAL (the shutdown checkpoint's end; nothing writes WAL any more),
 * or when the deadline passed.
 */
static void shutdown_step(TimestampTz now)
{
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];

    if (shutdown_wal_end == InvalidXLogRecPtr) {
        shutdown_wal_end = GetFlushRecPtr(NULL);
        shutdown_deadline = TimestampTzPlusMilliseconds(now, strata_safekeeper_timeout);
        ereport(LOG, (errmsg("strata walproposer: shutting down once the safekeepers hold the "
                             "WAL up to %s (the shutdown checkpoint)",
                             lsn_format(shutdown_wal_end, a))));
    }
    if (wp.commit_lsn >= shutdown_wal_end) {
        ereport(LOG, (errmsg("strata walproposer: a majority of safekeepers holds the WAL up to "
                             "%s; exiting",
                             lsn_format(wp.commit_lsn, a))));
        proc_exit(0);
    }
    if (now >= shutdown_deadline) {
        ereport(WARNING,
                (errmsg("strata walproposer: the safekeepers confirmed the WAL only up to %s, "
                        "not to its end %s, within strata.safekeeper_timeout; exiting",
                        lsn_format(wp.commit_lsn, a), lsn_format(shutdown_wal_end, b)),
                 errdetail("The next compute starts where a majority of safekeepers ends.")));
        proc_exit(0);
    }
}

void strata_walproposer_main(Datum arg)
{
    TimestampTz last_tick = 0;

    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    pqsignal(SIGUSR2, handle_sigusr2);
    BackgroundWorkerUnblockSignals();

    memset(&wp, 0, sizeof(wp));
    parse_safekeepers();
    pqstream_init(&wp.local);
    snprintf(wp.waldir, sizeof(wp.waldir), "%s/%s", DataDir, XLOGDIR);
    wp.scratch = MemoryContextAlloc(TopMemoryContext, WALPUSH_MAX_MESSAGE);
    wp.walbytes = MemoryContextAlloc(TopMemoryContext, WALPUSH_MAX_APPEND);
    walbuf_init(&wp.buf, MemoryContextAlloc(TopMemoryContext, (Size)strata_wal_buffer_size * 1024),
                (size_t)strata_wal_buffer_size * 1024);
    ereport(LOG, (errmsg("strata walproposer started with %d safekeepers: %s", wp.n_sk,
                         strata_safekeepers)));

    start_core();

    for (;;) {
        TimestampTz now;

        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
        now = GetCurrentTimestamp();
        for (int i = 0; i < wp.n_sk; i++)
            handle_sk(i, now);
        handle_local(now);
        core_news(now);
        if (TimestampDifferenceExceeds(last_tick, now, WP_TICK_MS)) {
            core_tick(now);
            last_tick = now;
        }
        local_send_status(now, false);
        if (shutdown_requested)
            shutdown_step(now);
        wait_for_work(next_timeout(now));
    }
}

/*
 * Stops this server for good: see the file header for why SIGQUIT.  Never
 * returns; the postmaster kills every backend, so no waiting commit is
 * acknowledged after this point.
 */
static void wp_stop(const char *reason)
{
    ereport(LOG, (errmsg("strata walproposer: terminating: %s", reason),
                  errdetail("Stopping the server with an immediate shutdown so that no waiting "
                            "commit is acknowledged.")));
    kill(PostmasterPid, SIGQUIT);
    proc_exit(1);
}
