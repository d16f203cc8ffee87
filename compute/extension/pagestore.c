/*
 * pagestore.c: one process's pagestream connection to the pageserver
 * (docs/design.md §3.4, §7.2): requests, pipelined prefetch, reconnection.
 *
 * Each Postgres process that reads a permanent relation opens, on first use,
 * one libpq connection to strata.pageserver and switches it to CopyBoth with
 * `pagestream_v1 <tenant> <timeline>`.  Requests are queued in a ring of
 * slots in send order; the server answers in order, so the oldest unanswered
 * slot takes the next response.  smgrprefetch adds a GetPage slot without
 * waiting (at most strata.prefetch_depth in flight); a later read of that
 * block takes the answer if it was asked with a not_modified_since at least
 * the block's current last-written LSN (otherwise the block changed locally
 * since, and the answer may be stale).  A read-only compute asks at its read
 * LSN (strata_read_at()) and takes a prefetched answer only if it was asked
 * at that LSN or later.
 *
 * Failures: a broken connection is re-established with exponential backoff
 * (10 ms doubling to 1 s) and every unanswered request is sent again; after
 * strata.pageserver_timeout without a connection, or without an answer, the
 * unanswered requests are dropped and the query fails with an ERROR.  Waits
 * use WaitLatchOrSocket and CHECK_FOR_INTERRUPTS, so a query can be
 * cancelled; the ring stays consistent at every such point (a cancelled
 * read's slot stays queued and its answer is matched and later discarded).
 *
 * Not for: deciding LSNs (smgr.c) or the wire format (proto/pagestream.c).
 */
#include "postgres.h"

#ifdef STRATA_HAVE_SMGR_HOOK

#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compute/extension/smgr_int.h"
#include "compute/extension/strata.h"
#include "compute/walproposer/pqstream.h"
#include "proto/pagestream.h"

#define RING_SIZE (STRATA_PREFETCH_MAX + 1)
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000

typedef struct ps_slot {
    pagestream_request req;
    bool done;     /* answered */
    bool prefetch; /* queued by smgrprefetch: kept until read or discarded */
    bool failed;   /* answered with an error */
    bool stale;    /* a prefetch the block outdated: never matched again */
    char sqlstate[6];
    char message[256];
    union {
        bool exists;
        uint32 nblocks;
        int64 dbsize;
        struct {
            int64 bytes;
            uint32 relations;
        } spcsize;
    } v;
    char *page; /* BLCKSZ, owned by the ring (TopMemoryContext) */
} ps_slot;

static pqstream stream;
static bool stream_inited = false;
static ps_slot ring[RING_SIZE];
static int nslots = 0; /* slots in use, send order */
static int ndone = 0;  /* the first ndone slots are answered */
static uint64 next_reqid = 1;

static void ps_init(void)
{
    if (stream_inited)
        return;
    pqstream_init(&stream);
    for (int i = 0; i < RING_SIZE; i++)
        ring[i].page = MemoryContextAllocZero(TopMemoryContext, BLCKSZ);
    stream_inited = true;
}

void strata_ps_disconnect(void)
{
    if (stream_inited)
        pqstream_close(&stream);
    nslots = 0;
    ndone = 0;
}

/* Drops unanswered slots (they belong to a connection we gave up on). */
static void drop_unanswered(void)
{
    nslots = ndone;
}

static void remove_slot(int i)
{
    char *page = ring[i].page;

    Assert(i >= 0 && i < nslots);
    if (i < ndone)
        ndone--;
    memmove(&ring[i], &ring[i + 1], sizeof(ps_slot) * (nslots - i - 1));
    nslots--;
    ring[nslots].page = page; /* keep every buffer owned by exactly one slot */
}

static long ms_left(TimestampTz deadline)
{
    long ms = (long)((deadline - GetCurrentTimestamp()) / 1000);
    return ms < 0 ? 0 : ms;
}

/*
 * The process's wait set for a streaming connection: latch, postmaster death
 * and the socket, made once per connection instead of per wait (a
 * WaitLatchOrSocket builds and frees an epoll set each call: five system
 * calls per GetPage).  Rebuilt when the stream's generation says the socket
 * is a new one.
 */
static WaitEventSet *stream_wes = NULL;
static unsigned long stream_wes_generation = 0;
static int stream_wes_socket_pos = -1;

static WaitEventSet *streaming_wait_set(void)
{
    if (stream_wes != NULL && stream_wes_generation == stream.generation)
        return stream_wes;
    if (stream_wes != NULL)
        FreeWaitEventSet(stream_wes);
    stream_wes = CreateWaitEventSet(TopMemoryContext, 3);
    AddWaitEventToSet(stream_wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
    AddWaitEventToSet(stream_wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
    stream_wes_socket_pos =
        AddWaitEventToSet(stream_wes, WL_SOCKET_READABLE, pqstream_socket(&stream), NULL, NULL);
    stream_wes_generation = stream.generation;
    return stream_wes;
}

/* Waits for the stream's socket (or a timeout / latch); handles interrupts. */
static void wait_socket(long timeout_ms)
{
    int ev = pqstream_wait_events(&stream);
    int wl = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
    int rc;

    if (stream.state == PQSTREAM_STREAMING && pqstream_socket(&stream) >= 0) {
        WaitEventSet *set = streaming_wait_set();
        WaitEvent event;

        ModifyWaitEvent(set, stream_wes_socket_pos,
                        WL_SOCKET_READABLE | ((ev & PQSTREAM_WAIT_WRITE) ? WL_SOCKET_WRITEABLE : 0),
                        NULL);
        if (WaitEventSetWait(set, timeout_ms, &event, 1, PG_WAIT_EXTENSION) > 0 &&
            (event.events & WL_LATCH_SET))
            ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        return;
    }
    /* Connecting: libpq may change sockets between attempts. */
    if (ev & PQSTREAM_WAIT_READ)
        wl |= WL_SOCKET_READABLE;
    if (ev & PQSTREAM_WAIT_WRITE)
        wl |= WL_SOCKET_WRITEABLE;
    if (pqstream_socket(&stream) < 0)
        wl &= ~(WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE);
    rc = WaitLatchOrSocket(MyLatch, wl, pqstream_socket(&stream), timeout_ms, PG_WAIT_EXTENSION);
    if (rc & WL_LATCH_SET)
        ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

static void sleep_ms(long ms)
{
    int rc =
        WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
    if (rc & WL_LATCH_SET)
        ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

static bool send_request(const pagestream_request *req)
{
    uint8_t buf[64];
    size_t len = pagestream_encode_request(req, buf, sizeof buf);

    Assert(len > 0);
    return pqstream_send(&stream, buf, len) == 0;
}

/* One connection attempt; true when streaming with every unanswered request
 * sent again. */
static bool try_connect(TimestampTz deadline)
{
    char host[256], port[16], query[PQSTREAM_QUERY_LEN], timeout_s[16];
    const char *colon = strrchr(strata_pageserver, ':');
    const char *keys[] = {"host",     "port", "dbname", "application_name", "connect_timeout",
                          "password", NULL};
    const char *vals[7];

    if (colon == NULL || colon == strata_pageserver ||
        (size_t)(colon - strata_pageserver) >= sizeof host)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("strata.pageserver \"%s\" is not host:port", strata_pageserver)));
    memcpy(host, strata_pageserver, colon - strata_pageserver);
    host[colon - strata_pageserver] = '\0';
    strlcpy(port, colon + 1, sizeof port);
    snprintf(timeout_s, sizeof timeout_s, "%d", Max(1, strata_pageserver_timeout / 1000));
    snprintf(query, sizeof query, "pagestream_v%d %s %s", PAGESTREAM_PROTO_VERSION,
             strata_tenant_id, strata_timeline_id);
    vals[0] = host;
    vals[1] = port;
    vals[2] = "postgres";
    vals[3] = "strata-smgr";
    vals[4] = timeout_s;
    vals[5] = strata_pageserver_password;
    vals[6] = NULL;
    if (strata_pageserver_password == NULL || strata_pageserver_password[0] == '\0')
        keys[5] = NULL;

    if (pqstream_start(&stream, keys, vals, query) != PQSTREAM_OK)
        return false;
    while (stream.state == PQSTREAM_CONNECTING || stream.state == PQSTREAM_STARTING) {
        long left = ms_left(deadline);
        if (left == 0) {
            pqstream_close(&stream);
            return false;
        }
        wait_socket(Min(left, 1000));
        if (pqstream_advance(&stream) != PQSTREAM_OK)
            return false;
    }
    if (stream.state != PQSTREAM_STREAMING)
        return false;
    for (int i = ndone; i < nslots; i++) {
        if (!send_request(&ring[i].req))
            return false;
    }
    return true;
}

/* Closes the stream and ERRORs: the pageserver refused our credentials, or
 * strata.pageserver_timeout passed without a connection. */
static void pg_attribute_noreturn() give_up(bool refused)
{
    char why[PQSTREAM_ERROR_LEN];

    strlcpy(why, pqstream_error(&stream), sizeof why);
    pqstream_close(&stream);
    drop_unanswered();
    if (refused)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PASSWORD),
                        errmsg("the pageserver at %s refused this compute's credentials",
                               strata_pageserver),
                        errdetail("%s", why),
                        errhint("Set strata.pageserver_password to a token of the pageserver's "
                                "auth file for this tenant.")));
    ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                    errmsg("could not reach the pageserver at %s for %d ms", strata_pageserver,
                           strata_pageserver_timeout),
                    errdetail("Last error: %s", why),
                    errhint("Check that the pageserver is running; the time limit is "
                            "strata.pageserver_timeout.")));
    pg_unreachable();
}

/*
 * Makes sure the stream is up, reconnecting with backoff; ERROR after
 * strata.pageserver_timeout.  reason says why we are here (for the log).
 */
static void ensure_connected(void)
{
    TimestampTz deadline;
    long backoff = BACKOFF_FIRST_MS;
    bool was_connected_before;

    ps_init();
    if (stream.state == PQSTREAM_STREAMING)
        return;
    if (strata_tenant_id[0] == '\0' || strata_timeline_id[0] == '\0')
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("strata.pageserver requires strata.tenant_id and strata.timeline_id")));
    was_connected_before = stream.generation > 0;
    deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), strata_pageserver_timeout);
    for (;;) {
        if (try_connect(deadline)) {
            if (was_connected_before) {
                strata_stat_add(STAT_RECONNECT, 1);
                ereport(LOG, (errmsg("strata: reconnected to pageserver %s", strata_pageserver)));
            }
            return;
        }
        /* A refused token does not get better by retrying. */
        if (strstr(pqstream_error(&stream), "password authentication failed") != NULL ||
            strstr(pqstream_error(&stream), "permission denied") != NULL)
            give_up(true);
        if (ms_left(deadline) == 0)
            give_up(false);
        was_connected_before = true;
        sleep_ms(Min(backoff, ms_left(deadline)));
        backoff = Min(backoff * 2, BACKOFF_MAX_MS);
    }
}

static void connection_lost(void)
{
    ereport(LOG, (errmsg("strata: connection to pageserver %s lost: %s", strata_pageserver,
                         pqstream_error(&stream))));
    pqstream_close(&stream);
}

/* Stores one decoded response into the oldest unanswered slot; on a
 * protocol violation returns false with the reason in why_out. */
static bool take_response(const char *msg, int len, char *why_out, size_t why_len)
{
    pagestream_response resp;
    const char *why = NULL;
    ps_slot *s;

    if (ndone >= nslots ||
        pagestream_decode_response((const uint8_t *)msg, (size_t)len, &resp, &why) != 0 ||
        resp.reqid != ring[ndone].req.reqid) {
        snprintf(why_out, why_len, "%s",
                 why ? why : (ndone >= nslots ? "unexpected response" : "reqid out of order"));
        return false;
    }
    s = &ring[ndone];
    s->failed = false;
    if (resp.tag == PS_RESP_ERROR) {
        s->failed = true;
        memcpy(s->sqlstate, resp.u.error.sqlstate, 6);
        snprintf(s->message, sizeof s->message, "%.*s", (int)Min(resp.u.error.message_len, 255),
                 resp.u.error.message);
    } else if (resp.tag != (0x80 | s->req.tag)) {
        snprintf(why_out, why_len, "response tag %u does not answer request tag %u", resp.tag,
                 s->req.tag);
        return false;
    } else {
        switch (resp.tag) {
        case PS_RESP_EXISTS:
            s->v.exists = resp.u.exists;
            break;
        case PS_RESP_NBLOCKS:
            s->v.nblocks = resp.u.nblocks;
            break;
        case PS_RESP_DBSIZE:
            s->v.dbsize = resp.u.db_size_bytes;
            break;
        case PS_RESP_SPCSIZE:
            s->v.spcsize.bytes = resp.u.spc_size.bytes;
            s->v.spcsize.relations = resp.u.spc_size.relations;
            break;
        case PS_RESP_GETPAGE:
            memcpy(s->page, resp.u.page, BLCKSZ);
            break;
        default:
            Assert(false);
        }
    }
    s->done = true;
    ndone++;
    return true;
}

/* Waits until slot i is answered (reconnecting as needed). */
static void wait_for(int i)
{
    TimestampTz deadline =
        TimestampTzPlusMilliseconds(GetCurrentTimestamp(), strata_pageserver_timeout);

    Assert(i < nslots);
    while (ndone <= i) {
        char *msg = NULL;
        int len = 0, rc;

        ensure_connected();
        if (pqstream_flush(&stream) != 0) {
            connection_lost();
            continue;
        }
        rc = pqstream_recv(&stream, &msg, &len);
        if (rc < 0) {
            connection_lost();
            continue;
        }
        if (rc == 1) {
            char why[160];
            bool ok = take_response(msg, len, why, sizeof why);

            PQfreemem(msg);
            if (!ok) {
                pqstream_close(&stream);
                drop_unanswered();
                ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                                errmsg("invalid pagestream response from %s", strata_pageserver),
                                errdetail("%s", why)));
            }
            deadline =
                TimestampTzPlusMilliseconds(GetCurrentTimestamp(), strata_pageserver_timeout);
            continue;
        }
        if (ms_left(deadline) == 0) {
            pqstream_close(&stream);
            drop_unanswered();
            ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                            errmsg("the pageserver at %s did not answer within %d ms",
                                   strata_pageserver, strata_pageserver_timeout),
                            errhint("The limit is strata.pageserver_timeout.")));
        }
        wait_socket(Min(ms_left(deadline), 1000));
    }
}

/* Appends a slot for req (making room if needed) and sends it. */
static int enqueue(pagestream_request *req, bool prefetch)
{
    ps_slot *s;

    ps_init();
    while (nslots >= RING_SIZE) {
        /* Full: the oldest answered slot goes (a prefetch nobody read), or
         * the oldest is waited for first. */
        if (ndone == 0)
            wait_for(0);
        strata_stat_add(STAT_PREFETCH_DISCARD, 1);
        remove_slot(0);
    }
    ensure_connected();
    req->reqid = next_reqid++;
    s = &ring[nslots];
    s->req = *req;
    s->done = false;
    s->failed = false;
    s->stale = false;
    s->prefetch = prefetch;
    nslots++;
    if (!send_request(req))
        connection_lost(); /* resent on reconnect */
    return nslots - 1;
}

/* Removes slot i; then, if it was answered with an error, raises it. */
static void finish_slot(int i)
{
    bool failed = ring[i].failed;
    char state[6], message[256];

    memcpy(state, ring[i].sqlstate, 6);
    strlcpy(message, ring[i].message, sizeof message);
    remove_slot(i);
    if (failed) {
        ereport(ERROR, (errcode(MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4])),
                        errmsg("pageserver error: %s", message)));
    }
}

/* Sends req, waits for its answer and returns the slot index (still queued). */
static int call(pagestream_request *req)
{
    int i = enqueue(req, false);
    uint64 id = ring[i].req.reqid;

    wait_for(i);
    /* Earlier slots may have been removed while waiting; find ours again. */
    for (i = 0; i < nslots; i++)
        if (ring[i].req.reqid == id)
            return i;
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("strata: lost track of request %llu", (unsigned long long)id)));
    return -1; /* not reached */
}

/* A primary asks for the latest version not older than nms; a read-only
 * compute for the version at exactly its read LSN (smgr_int.h). */
static void set_lsns(pagestream_request *req, XLogRecPtr nms)
{
    XLogRecPtr at = strata_read_at();

    if (at == InvalidXLogRecPtr) {
        req->request_lsn = LSN_MAX;
        req->not_modified_since = nms;
        return;
    }
    req->request_lsn = at;
    req->not_modified_since = at;
}

static void fill_rel(pagestream_rel *r, RelFileNode rnode, ForkNumber fork)
{
    r->spc = rnode.spcNode;
    r->db = rnode.dbNode;
    r->rel = rnode.relNode;
    r->fork = (uint8_t)fork;
}

static pagestream_request rel_request(uint8_t tag, RelFileNode rnode, ForkNumber fork,
                                      XLogRecPtr nms)
{
    pagestream_request req;

    memset(&req, 0, sizeof req);
    req.tag = tag;
    set_lsns(&req, nms);
    fill_rel(&req.u.rel, rnode, fork);
    return req;
}

bool strata_ps_exists(RelFileNode rnode, ForkNumber fork, XLogRecPtr nms)
{
    pagestream_request req = rel_request(PS_REQ_EXISTS, rnode, fork, nms);
    int i;
    bool result;

    strata_stat_add(STAT_EXISTS, 1);
    i = call(&req);
    result = ring[i].v.exists;
    finish_slot(i);
    return result;
}

BlockNumber strata_ps_nblocks(RelFileNode rnode, ForkNumber fork, XLogRecPtr nms)
{
    pagestream_request req = rel_request(PS_REQ_NBLOCKS, rnode, fork, nms);
    int i;
    BlockNumber result;

    strata_stat_add(STAT_NBLOCKS, 1);
    i = call(&req);
    result = ring[i].v.nblocks;
    finish_slot(i);
    return result;
}

int64 strata_ps_dbsize(Oid db, XLogRecPtr nms)
{
    pagestream_request req;
    int i;
    int64 result;

    memset(&req, 0, sizeof req);
    req.tag = PS_REQ_DBSIZE;
    set_lsns(&req, nms);
    req.u.dbsize.db = db;
    i = call(&req);
    result = ring[i].v.dbsize;
    finish_slot(i);
    return result;
}

int64 strata_ps_spcsize(Oid spc, XLogRecPtr nms, uint32 *relations)
{
    pagestream_request req;
    int i;
    int64 result;

    memset(&req, 0, sizeof req);
    req.tag = PS_REQ_SPCSIZE;
    set_lsns(&req, nms);
    req.u.spcsize.spc = spc;
    i = call(&req);
    result = ring[i].v.spcsize.bytes;
    *relations = ring[i].v.spcsize.relations;
    finish_slot(i);
    return result;
}

static bool page_matches(const ps_slot *s, RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    return !s->stale && s->req.tag == PS_REQ_GETPAGE && s->req.u.page.rel.spc == rnode.spcNode &&
           s->req.u.page.rel.db == rnode.dbNode && s->req.u.page.rel.rel == rnode.relNode &&
           s->req.u.page.rel.fork == (uint8_t)fork && s->req.u.page.blkno == blkno;
}

/* A prefetched answer still serves a read with last-written LSN nms: asked
 * with a not_modified_since at least nms (no local change since), or, when
 * reading at a fixed LSN (recovery), at that LSN -- a replica's replay moves
 * on, and its startup process may have replayed and evicted a newer version
 * of the page since the prefetch. */
static bool slot_fresh(const ps_slot *s, XLogRecPtr nms)
{
    XLogRecPtr at = strata_read_at();

    if (at != InvalidXLogRecPtr)
        return s->req.request_lsn >= at;
    return s->req.not_modified_since >= nms;
}

static pagestream_request page_request(RelFileNode rnode, ForkNumber fork, BlockNumber blkno,
                                       XLogRecPtr nms)
{
    pagestream_request req;

    memset(&req, 0, sizeof req);
    req.tag = PS_REQ_GETPAGE;
    set_lsns(&req, nms);
    fill_rel(&req.u.page.rel, rnode, fork);
    req.u.page.blkno = blkno;
    return req;
}

bool strata_ps_prefetch_room(void)
{
    return nslots - ndone < Min(strata_prefetch_depth, STRATA_PREFETCH_MAX);
}

bool strata_ps_prefetch(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr nms)
{
    pagestream_request req;
    int inflight;

    ps_init();
    for (int i = 0; i < nslots; i++)
        if (ring[i].prefetch && page_matches(&ring[i], rnode, fork, blkno) &&
            slot_fresh(&ring[i], nms))
            return false;
    inflight = nslots - ndone;
    if (inflight >= Min(strata_prefetch_depth, STRATA_PREFETCH_MAX))
        return false;
    req = page_request(rnode, fork, blkno, nms);
    enqueue(&req, true);
    strata_stat_add(STAT_GETPAGE, 1);
    strata_stat_add(STAT_PREFETCH_SENT, 1);
    return true;
}

/* The pageserver's SQLSTATE for a relation fork it does not know. */
static bool slot_missing_relation(const ps_slot *s)
{
    return s->failed && memcmp(s->sqlstate, "58P01", 5) == 0;
}

/* The histogram bucket of a wait of us microseconds (smgr_int.h). */
static int wait_bucket(uint64 us)
{
    int bucket;

    if (us < (UINT64CONST(1) << STRATA_WAIT_FIRST_LOG2))
        return 0;
    bucket = pg_leftmost_one_pos64(us) - STRATA_WAIT_FIRST_LOG2 + 1;
    return Min(bucket, STRATA_WAIT_BUCKETS - 1);
}

/* Counts one page read's wait for its GetPage answer, begun at start:
 * three atomic adds, no lock. */
static void count_wait(instr_time start)
{
    instr_time now;
    uint64 us;

    INSTR_TIME_SET_CURRENT(now);
    INSTR_TIME_SUBTRACT(now, start);
    us = (uint64)INSTR_TIME_GET_MICROSEC(now);
    strata_stat_add(STAT_GETPAGE_WAITS, 1);
    strata_stat_add(STAT_GETPAGE_WAIT_US, us);
    strata_stat_add((strata_stat)(STAT_GETPAGE_WAIT_HIST + wait_bucket(us)), 1);
}

/* The wait counted (count_wait) runs from the read's request -- sent now,
 * or sent earlier by a prefetch -- to its answer being here; a read that
 * ends in an ERROR is not counted. */
void strata_ps_getpage(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr nms,
                       bool zero_if_missing, char *buffer)
{
    pagestream_request req;
    int i;
    uint64 id = 0;
    instr_time start;

    ps_init();
    INSTR_TIME_SET_CURRENT(start);
    for (i = 0; i < nslots; i++) {
        if (ring[i].prefetch && page_matches(&ring[i], rnode, fork, blkno)) {
            if (slot_fresh(&ring[i], nms)) {
                id = ring[i].req.reqid;
                break;
            }
            /* Changed here since it was asked: the answer may be stale. */
            ring[i].prefetch = false; /* stays queued until answered */
            ring[i].stale = true;
            strata_stat_add(STAT_PREFETCH_DISCARD, 1);
        }
    }
    if (id != 0) {
        wait_for(i);
        for (i = 0; i < nslots && ring[i].req.reqid != id; i++)
            ;
        Assert(i < nslots);
        if (!ring[i].failed) {
            memcpy(buffer, ring[i].page, BLCKSZ);
            remove_slot(i);
            strata_stat_add(STAT_PREFETCH_HIT, 1);
            count_wait(start);
            return;
        }
        remove_slot(i); /* ask again below and report that answer */
    }
    req = page_request(rnode, fork, blkno, nms);
    strata_stat_add(STAT_GETPAGE, 1);
    i = call(&req);
    if (!ring[i].failed) {
        memcpy(buffer, ring[i].page, BLCKSZ);
        count_wait(start);
    } else if (zero_if_missing && slot_missing_relation(&ring[i])) {
        /* A fork this compute created and extended, which the WAL does not
         * show yet: its pages are new, i.e. zeros. */
        MemSet(buffer, 0, BLCKSZ);
        remove_slot(i);
        count_wait(start);
        return;
    }
    finish_slot(i);
}

#endif /* STRATA_HAVE_SMGR_HOOK */
