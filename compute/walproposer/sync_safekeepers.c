/*
 * sync_safekeepers.c: `strata-sync-safekeepers`, the proposer with no
 * Postgres behind it (docs/design.md §4.7).
 *
 *   strata-sync-safekeepers --safekeepers h:p,h:p,h:p --tenant HEX
 *                           --timeline HEX [--password PW] [--timeout SECONDS]
 *                           [--allow-timeline-creation]
 *
 * It runs the proposer core in sync mode: gets elected (which bumps the term
 * and so fences any running compute), brings a majority of safekeepers to
 * the donor's end of WAL, waits until commit reaches the term start, prints
 * that LSN as X/Y on stdout and exits 0.  That LSN is where the next compute
 * starts.  On failure it exits 1 with a one-line reason on stderr; on bad
 * usage it exits 2.
 *
 * WAL the lagging safekeepers need comes from the donor safekeeper over
 * physical replication (`START_REPLICATION PHYSICAL X/Y (term 'N')`, which
 * streams up to the donor's flush_lsn instead of its commit_lsn).  All of
 * [lowest start point, term start) is kept in memory, at most --max-wal-mb
 * (default 256) of it: a safekeeper lagging further is left behind (a
 * warning) and the others, if a majority, complete the sync.
 *
 * A safekeeper that lacks the timeline refuses the connection unless
 * --allow-timeline-creation is given (only when a new timeline is being
 * bootstrapped).  When every safekeeper refuses so, it exits 1 with "no
 * safekeeper has the timeline"; when too many refuse for a majority, with
 * their reason.
 *
 * Not for: the Paxos rules (proposer.c) or the libpq mechanics (pqstream.c).
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/lsn.h"
#include "compute/walproposer/pqstream.h"
#include "compute/walproposer/proposer.h"
#include "compute/walproposer/walbuf.h"
#include "compute/walproposer/wp_edge.h"
#include "proto/membership.h"
#include "proto/replication.h"
#include "proto/walpush.h"

/* The PostgreSQL major version whose WAL we carry (greeting field). */
#define SYNC_PG_VERSION 150000
#define SYNC_DEFAULT_SEG_SIZE (16u * 1024 * 1024)
#define SYNC_TICK_MS 50
#define SYNC_RETRY_MIN_MS 50
#define SYNC_RETRY_MAX_MS 2000

typedef struct sync_peer {
    char host[256];
    char port[16];
    char addr[280];
    pqstream stream;
    bool up;
    uint64_t next_attempt_ms;
    uint64_t connected_ms; /* 0 while not streaming */
    uint32_t backoff_ms;
    bool refused; /* it refused our password or tenant: retrying cannot help */
    bool missing; /* refused: it does not have the timeline (and may not create it) */
} sync_peer;

typedef struct sync_state {
    int n;
    sync_peer peers[PROPOSER_MAX_ACCEPTORS];
    strata_id tenant, timeline;
    const char *password;
    bool allow_create;
    uint32_t seg_size;
    size_t max_wal;

    proposer core;
    proposer_output out;
    uint32_t failed;
    bool busy; /* a receive budget ran out: poll again at once */
    /* A safekeeper told us a newer configuration: start over with it. */
    bool reconfigure;
    membership mconf;

    /* Donor WAL (after ELECTED, if some acceptor is behind). */
    bool elected;
    uint64_t term;
    int donor;
    lsn_t term_start_lsn;
    pqstream donor_stream;
    uint64_t donor_next_attempt_ms;
    walbuf buf;
    uint8_t *bufmem;
    lsn_t wal_end;

    uint8_t scratch[WALPUSH_MAX_MESSAGE];
    uint8_t walbytes[WALPUSH_MAX_APPEND];
} sync_state;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;

    fputs("strata-sync-safekeepers: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

__attribute__((noreturn)) static void usage(const char *why)
{
    if (why != NULL)
        fprintf(stderr, "strata-sync-safekeepers: %s\n", why);
    fprintf(stderr,
            "usage: strata-sync-safekeepers --safekeepers H:P,H:P,H:P --tenant HEX --timeline HEX\n"
            "                               [--password PW] [--timeout SECONDS] [--max-wal-mb N]\n"
            "                               [--wal-seg-size BYTES] [--allow-timeline-creation]\n"
            "                               [--verbose]\n"
            "Elects a proposer on the safekeepers, syncs a majority to the end of WAL,\n"
            "prints that LSN (X/Y) and exits 0; exits 1 with a reason on failure.\n");
    exit(why != NULL ? 2 : 0);
}

static void parse_safekeepers(sync_state *st, const char *list)
{
    char *copy = strdup(list);
    char *save = NULL;

    if (copy == NULL)
        die("out of memory");
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        sync_peer *p;

        if (st->n == PROPOSER_MAX_ACCEPTORS)
            usage("too many safekeepers");
        if (colon == NULL || colon == tok || colon[1] == '\0' ||
            strspn(colon + 1, "0123456789") != strlen(colon + 1))
            usage("--safekeepers takes host:port pairs separated by commas");
        p = &st->peers[st->n++];
        *colon = '\0';
        snprintf(p->host, sizeof(p->host), "%s", tok);
        snprintf(p->port, sizeof(p->port), "%s", colon + 1);
        snprintf(p->addr, sizeof(p->addr), "%s:%s", tok, colon + 1);
        pqstream_init(&p->stream);
    }
    free(copy);
    if (st->n == 0)
        usage("--safekeepers is empty");
}

/* Replaces the peers by the members of st->mconf (membership_union order,
 * as the proposer core numbers its acceptors). */
static void peers_from_membership(sync_state *st)
{
    member slots[PROPOSER_MAX_ACCEPTORS];
    int n = membership_union(&st->mconf, slots);

    for (int i = 0; i < st->n; i++)
        pqstream_close(&st->peers[i].stream);
    memset(st->peers, 0, sizeof(st->peers));
    st->n = n;
    for (int i = 0; i < n; i++) {
        sync_peer *p = &st->peers[i];
        const char *colon = strrchr(slots[i].addr, ':');

        if (colon == NULL || colon == slots[i].addr)
            die("configuration generation %u names member %llu at \"%s\", not host:port",
                st->mconf.generation, (unsigned long long)slots[i].node_id, slots[i].addr);
        snprintf(p->host, sizeof(p->host), "%.*s", (int)(colon - slots[i].addr), slots[i].addr);
        snprintf(p->port, sizeof(p->port), "%s", colon + 1);
        snprintf(p->addr, sizeof(p->addr), "%s", slots[i].addr);
        pqstream_init(&p->stream);
    }
}

/* Connection parameters shared by the walpush and the donor streams. */
static void connect_params(const sync_state *st, const sync_peer *p, wp_edge_params *params)
{
    wp_edge_safekeeper_params(params, p->host, p->port, &st->tenant, &st->timeline,
                              "sync-safekeepers", 10, st->password);
    if (st->allow_create)
        snprintf(params->query, sizeof(params->query),
                 "START_WAL_PUSH (proto_version '%d', allow_timeline_creation 'true')",
                 WALPUSH_PROTO_VERSION);
}

static void peer_retry(sync_peer *p, uint64_t now)
{
    uint64_t up_ms = p->connected_ms != 0 ? now - p->connected_ms : 0;

    p->connected_ms = 0;
    p->backoff_ms = wp_edge_backoff(p->backoff_ms, up_ms, SYNC_RETRY_MIN_MS, SYNC_RETRY_MAX_MS);
    p->next_attempt_ms = now + p->backoff_ms;
}

static void peer_start(sync_state *st, sync_peer *p, uint64_t now)
{
    wp_edge_params params;

    connect_params(st, p, &params);
    if (pqstream_start(&p->stream, params.keys, params.vals, params.query) != PQSTREAM_OK) {
        log_info("cannot connect to safekeeper %s: %s", p->addr, pqstream_error(&p->stream));
        peer_retry(p, now);
    }
}

static void peer_drop(sync_peer *p, uint64_t now)
{
    pqstream_close(&p->stream);
    p->up = false;
    peer_retry(p, now);
}

/* ---- donor WAL ----------------------------------------------------------- */

static void donor_start(sync_state *st, uint64_t now)
{
    sync_peer *d = &st->peers[st->donor];
    wp_edge_params params;
    char lsnbuf[LSN_FMT_LEN];

    connect_params(st, d, &params);
    snprintf(params.query, sizeof(params.query), "START_REPLICATION PHYSICAL %s (term '%llu')",
             lsn_format(st->wal_end, lsnbuf), (unsigned long long)st->term);
    if (pqstream_start(&st->donor_stream, params.keys, params.vals, params.query) != PQSTREAM_OK) {
        log_info("cannot read WAL from donor %s: %s", d->addr, pqstream_error(&st->donor_stream));
        st->donor_next_attempt_ms = now + 500;
        return;
    }
    log_info("reading WAL from donor %s at %s", d->addr, lsnbuf);
}

/* ---- effects ------------------------------------------------------------- */

/* Sends msg to safekeeper i; a send failure marks it in st->failed. */
static void peer_send(sync_state *st, int i, const proposer_msg *msg)
{
    switch (wp_edge_send(&st->peers[i].stream, msg, st->scratch, sizeof(st->scratch))) {
    case WP_EDGE_SENT:
        break;
    case WP_EDGE_SEND_FAILED:
        st->failed |= 1u << i;
        break;
    case WP_EDGE_ENCODE_FAILED:
        die("internal error: cannot encode a message of kind %d", (int)msg->kind);
    }
}

static void send_append(sync_state *st, int i, const append_request *ar)
{
    size_t wal_len = (size_t)(ar->end_lsn - ar->begin_lsn);
    proposer_msg msg;

    if (wal_len > 0 && !walbuf_read(&st->buf, ar->begin_lsn, st->walbytes, wal_len)) {
        /* A safekeeper that voted late can start below the buffered range;
         * drop it (it retries) and let the others reach the quorum. */
        char lsnbuf[LSN_FMT_LEN];
        log_warn("safekeeper %s needs WAL at %s, before the donor WAL read for this sync",
                 st->peers[i].addr, lsn_format(ar->begin_lsn, lsnbuf));
        st->failed |= 1u << i;
        return;
    }
    if (!wp_edge_append_msg(ar, st->walbytes, &msg))
        die("internal error: invalid AppendRequest of %zu bytes", wal_len);
    peer_send(st, i, &msg);
}

static void on_elected(sync_state *st, const proposer_effect *e, uint64_t now)
{
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    lsn_t gap;

    st->elected = true;
    st->term = e->u.elected.term;
    st->donor = e->u.elected.donor;
    st->term_start_lsn = e->u.elected.term_start_lsn;
    log_info("elected in term %llu, donor %s, term starts at %s, streaming from %s",
             (unsigned long long)st->term, st->peers[st->donor].addr,
             lsn_format(st->term_start_lsn, a), lsn_format(e->u.elected.start_streaming_at, b));
    lsn_t from = e->u.elected.start_streaming_at;
    gap = st->term_start_lsn - from;
    if (gap > st->max_wal) {
        /* A voter lags by more than we buffer: read only the last
         * --max-wal-mb (from a page boundary).  The voters within it reach
         * the term start; the laggard's appends fail below (it is dropped)
         * and the sync completes with the others when they are a majority,
         * instead of failing every compute start from now on. */
        from = (st->term_start_lsn - st->max_wal + 8191) & ~(lsn_t)8191;
        log_warn("a safekeeper lags the donor by %llu bytes, more than --max-wal-mb: "
                 "syncing from %s, it stays behind",
                 (unsigned long long)gap, lsn_format(from, b));
        gap = st->term_start_lsn - from;
    }
    st->bufmem = malloc(gap > 0 ? (size_t)gap : 1);
    if (st->bufmem == NULL)
        die("out of memory for %llu bytes of donor WAL", (unsigned long long)gap);
    walbuf_init(&st->buf, st->bufmem, gap > 0 ? (size_t)gap : 1);
    walbuf_reset(&st->buf, from);
    st->wal_end = from;
    if (gap > 0)
        donor_start(st, now);
}

static void run_effects(sync_state *st, uint64_t now)
{
    for (;;) {
        for (int k = 0; k < st->out.n; k++) {
            const proposer_effect *e = &st->out.effects[k];
            int i = e->acceptor;

            switch (e->kind) {
            case PROP_SEND:
                if ((st->failed & (1u << i)) || st->peers[i].stream.state != PQSTREAM_STREAMING)
                    break;
                peer_send(st, i, e->u.msg);
                break;
            case PROP_APPEND:
                if ((st->failed & (1u << i)) || st->peers[i].stream.state != PQSTREAM_STREAMING)
                    break;
                send_append(st, i, &e->u.append);
                break;
            case PROP_DISCONNECT:
                log_info("dropping safekeeper %s (timeout or protocol violation)",
                         st->peers[i].addr);
                peer_drop(&st->peers[i], now);
                break;
            case PROP_ELECTED:
                on_elected(st, e, now);
                break;
            case PROP_COMMIT_ADVANCED:
                break;
            case PROP_FENCED:
                die("%s", e->u.reason);
            case PROP_RECONFIGURE:
                /* The core is finished; the main loop starts a new one. */
                st->mconf = *e->u.mconf;
                st->reconfigure = true;
                log_info("safekeeper %s holds configuration generation %u: starting over "
                         "with its %u members",
                         st->peers[i].addr, st->mconf.generation,
                         st->mconf.n_members + st->mconf.n_new_members);
                st->out.n = 0;
                st->failed = 0;
                return;
            case PROP_SYNC_DONE: {
                char lsnbuf[LSN_FMT_LEN];

                printf("%s\n", lsn_format(e->u.sync_lsn, lsnbuf));
                fflush(stdout);
                exit(0);
            }
            }
        }
        st->out.n = 0;
        int lost = wp_edge_take_failed(&st->failed);
        if (lost < 0)
            return;
        log_info("lost safekeeper %s: %s", st->peers[lost].addr,
                 pqstream_error(&st->peers[lost].stream));
        peer_drop(&st->peers[lost], now);
        proposer_disconnected(&st->core, lost, &st->out);
    }
}

/* ---- event handling ------------------------------------------------------ */

/*
 * A safekeeper that refuses the password (28P01) or the tenant (42501), or
 * our newer configuration (it missed a switch, and only the admin may
 * install one: docs/design.md §4.10), will refuse it again: once so many
 * have that no majority is left, stop with its reason instead of retrying
 * until --timeout.
 */
static void note_refusal(sync_state *st, sync_peer *p)
{
    const char *why = pqstream_error(&p->stream);
    bool missing = strstr(why, "does not exist on this safekeeper") != NULL;
    if (strstr(why, "password authentication failed") == NULL &&
        strstr(why, "permission denied") == NULL &&
        strstr(why, "only the admin may install") == NULL && !missing)
        return;
    p->refused = true;
    p->missing = missing;
    int refused = 0, n_missing = 0;
    for (int i = 0; i < st->n; i++) {
        refused += st->peers[i].refused;
        n_missing += st->peers[i].missing;
    }
    if (n_missing == st->n)
        die("no safekeeper has the timeline (all %d refused: it does not exist there; a new "
            "timeline is bootstrapped with --allow-timeline-creation)",
            st->n);
    /* While every refusal is a missing timeline, wait for the others: if all
     * lack it, that is the answer above. */
    if (refused > st->n - (st->n / 2 + 1) && (n_missing < refused || refused == st->n))
        die("%d of %d safekeepers refused the connection: %s: %s", refused, st->n, p->addr, why);
}

static void handle_peer(sync_state *st, int i, uint64_t now)
{
    sync_peer *p = &st->peers[i];

    if (p->stream.state == PQSTREAM_IDLE) {
        if (now >= p->next_attempt_ms)
            peer_start(st, p, now);
        return;
    }
    if (p->stream.state != PQSTREAM_STREAMING) {
        if (pqstream_advance(&p->stream) != PQSTREAM_OK) {
            log_info("cannot connect to safekeeper %s: %s", p->addr, pqstream_error(&p->stream));
            note_refusal(st, p);
            peer_retry(p, now);
            return;
        }
        if (p->stream.state != PQSTREAM_STREAMING)
            return;
        log_info("connected to safekeeper %s", p->addr);
        p->up = true;
        p->connected_ms = now;
        proposer_connected(&st->core, i, &st->out);
        run_effects(st, now);
    }
    for (int budget = 64; p->stream.state == PQSTREAM_STREAMING; budget--) {
        char *raw;
        int len;
        acceptor_msg msg;
        const char *why;
        int r;

        if (budget == 0) {
            st->busy = true;
            break;
        }
        r = pqstream_recv(&p->stream, &raw, &len);
        if (r <= 0)
            break;
        if (walpush_decode_acceptor_msg((const uint8_t *)raw, (size_t)len, &msg, &why) != 0) {
            PQfreemem(raw);
            log_warn("bad message from safekeeper %s: %s", p->addr, why);
            peer_drop(p, now);
            proposer_disconnected(&st->core, i, &st->out);
            run_effects(st, now);
            return;
        }
        PQfreemem(raw);
        if (proposer_handle_message(&st->core, i, &msg, &st->out) != 0)
            log_warn("unexpected message from safekeeper %s", p->addr);
        run_effects(st, now);
    }
    if (p->stream.state == PQSTREAM_STREAMING)
        (void)pqstream_flush(&p->stream);
    if (p->stream.state == PQSTREAM_IDLE && p->up) {
        log_info("lost safekeeper %s: %s", p->addr, pqstream_error(&p->stream));
        p->up = false;
        note_refusal(st, p); /* a missing timeline is refused after the greeting */
        peer_retry(p, now);
        proposer_disconnected(&st->core, i, &st->out);
        run_effects(st, now);
    }
}

static void handle_donor(sync_state *st, uint64_t now)
{
    pqstream *s = &st->donor_stream;

    if (!st->elected || st->wal_end >= st->term_start_lsn) {
        if (s->state != PQSTREAM_IDLE)
            pqstream_close(s); /* have all we need */
        return;
    }
    if (s->state == PQSTREAM_IDLE) {
        if (now >= st->donor_next_attempt_ms)
            donor_start(st, now);
        return;
    }
    if (s->state != PQSTREAM_STREAMING) {
        if (pqstream_advance(s) != PQSTREAM_OK) {
            log_info("cannot read WAL from donor: %s", pqstream_error(s));
            st->donor_next_attempt_ms = now + 500;
        }
        return;
    }
    for (int budget = 64; s->state == PQSTREAM_STREAMING; budget--) {
        char *raw;
        int len;
        replication_msg msg;
        const char *why;
        int r;

        if (budget == 0) {
            st->busy = true;
            break;
        }
        r = pqstream_recv(s, &raw, &len);
        if (r <= 0)
            break;
        if (replication_decode_server_msg((const uint8_t *)raw, (size_t)len, &msg, &why) != 0)
            die("bad replication message from donor %s: %s", st->peers[st->donor].addr, why);
        if (msg.kind == REPLICATION_XLOGDATA && msg.u.xlogdata.data_len > 0) {
            const replication_xlogdata *x = &msg.u.xlogdata;
            size_t n = x->data_len;
            char a[LSN_FMT_LEN], b[LSN_FMT_LEN];

            if (x->wal_start != st->wal_end)
                die("donor %s sent WAL at %s, expected %s", st->peers[st->donor].addr,
                    lsn_format(x->wal_start, a), lsn_format(st->wal_end, b));
            /* Only up to the term start: that is all the donor vouches for. */
            if (x->wal_start + n > st->term_start_lsn)
                n = (size_t)(st->term_start_lsn - x->wal_start);
            if (walbuf_append(&st->buf, x->wal_start, x->data, n) != 0)
                die("internal error: donor WAL does not follow the buffer");
            st->wal_end = x->wal_start + n;
            PQfreemem(raw);
            proposer_wal_available(&st->core, st->wal_end, &st->out);
            run_effects(st, now);
            continue;
        }
        if (msg.kind == REPLICATION_KEEPALIVE && msg.u.keepalive.reply_requested) {
            replication_msg reply = {.kind = REPLICATION_STATUS_UPDATE,
                                     .u.status = {.write_lsn = st->wal_end,
                                                  .flush_lsn = st->wal_end,
                                                  .apply_lsn = st->wal_end,
                                                  .send_time = replication_now()}};
            uint8_t status[REPLICATION_STATUS_UPDATE_LEN];
            size_t sl = replication_encode(&reply, status, sizeof status);

            assert(sl == sizeof status);
            (void)pqstream_send(s, status, sl);
        }
        PQfreemem(raw);
    }
    if (s->state == PQSTREAM_STREAMING)
        (void)pqstream_flush(s);
    if (s->state == PQSTREAM_IDLE && st->wal_end < st->term_start_lsn) {
        log_info("lost the donor stream: %s", pqstream_error(s));
        st->donor_next_attempt_ms = now + 500;
    }
}

static void add_poll(struct pollfd *fds, int *nfds, const pqstream *s)
{
    int ev = pqstream_wait_events(s);
    int fd = pqstream_socket(s);

    if (ev == 0 || fd < 0)
        return;
    fds[*nfds].fd = fd;
    fds[*nfds].events = (short)(((ev & PQSTREAM_WAIT_READ) ? POLLIN : 0) |
                                ((ev & PQSTREAM_WAIT_WRITE) ? POLLOUT : 0));
    fds[*nfds].revents = 0;
    (*nfds)++;
}

/* Describes how far the sync got, for the timeout message. */
static const char *progress(const sync_state *st)
{
    static char buf[160];
    int up = 0;

    for (int i = 0; i < st->n; i++)
        up += st->peers[i].up;
    switch (proposer_get_phase(&st->core)) {
    case PROPOSER_COLLECTING_TERMS:
        snprintf(buf, sizeof(buf), "collecting terms, %d of %d safekeepers connected", up, st->n);
        break;
    case PROPOSER_VOTING:
        snprintf(buf, sizeof(buf), "waiting for votes, %d of %d safekeepers connected", up, st->n);
        break;
    default: {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        snprintf(buf, sizeof(buf), "elected, commit at %s of term start %s, %d of %d connected",
                 lsn_format(proposer_commit_lsn(&st->core), a), lsn_format(st->term_start_lsn, b),
                 up, st->n);
    }
    }
    return buf;
}

/* The command line, as given. */
typedef struct sync_args {
    const char *sks, *tenant, *timeline;
    long timeout_s, max_wal_mb;
    unsigned long seg_size;
    bool verbose;
} sync_args;

/* Parses the command line into a (and st's password and allow_create);
 * exits through usage() on anything wrong. */
static void parse_args(int argc, char **argv, sync_state *st, sync_args *a)
{
    static const struct option opts[] = {{"safekeepers", required_argument, NULL, 's'},
                                         {"tenant", required_argument, NULL, 't'},
                                         {"timeline", required_argument, NULL, 'l'},
                                         {"password", required_argument, NULL, 'p'},
                                         {"timeout", required_argument, NULL, 'T'},
                                         {"max-wal-mb", required_argument, NULL, 'm'},
                                         {"wal-seg-size", required_argument, NULL, 'w'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"allow-timeline-creation", no_argument, NULL, 'C'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    *a = (sync_args){.timeout_s = 60, .max_wal_mb = 256, .seg_size = SYNC_DEFAULT_SEG_SIZE};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 's':
            a->sks = optarg;
            break;
        case 't':
            a->tenant = optarg;
            break;
        case 'l':
            a->timeline = optarg;
            break;
        case 'p':
            st->password = optarg;
            break;
        case 'T':
            a->timeout_s = strtol(optarg, &end, 10);
            if (*end != '\0' || a->timeout_s <= 0 || a->timeout_s > 86400)
                usage("--timeout takes 1..86400 seconds");
            break;
        case 'm':
            a->max_wal_mb = strtol(optarg, &end, 10);
            if (*end != '\0' || a->max_wal_mb <= 0 || a->max_wal_mb > 65536)
                usage("--max-wal-mb takes 1..65536");
            break;
        case 'w':
            a->seg_size = strtoul(optarg, &end, 10);
            if (*end != '\0' || a->seg_size < (1u << 20) || a->seg_size > (1u << 30) ||
                (a->seg_size & (a->seg_size - 1)) != 0)
                usage("--wal-seg-size takes a power of two from 1 MB to 1 GB");
            break;
        case 'v':
            a->verbose = true;
            break;
        case 'C':
            st->allow_create = true;
            break;
        case 'h':
            usage(NULL);
        default:
            usage("unknown option");
        }
    }
    if (optind != argc)
        usage("unexpected argument");
    if (a->sks == NULL || a->tenant == NULL || a->timeline == NULL)
        usage("--safekeepers, --tenant and --timeline are required");
}

/* Nothing was elected under the old configuration that the new election
 * would not find: starts over with the members a safekeeper told us of. */
static void restart_election(sync_state *st, proposer_config *cfg, uint64_t now)
{
    const char *why;
    st->reconfigure = false;
    st->elected = false;
    free(st->bufmem);
    st->bufmem = NULL;
    pqstream_close(&st->donor_stream);
    peers_from_membership(st);
    cfg->n_acceptors = st->n;
    cfg->mconf = st->mconf;
    if (proposer_init(&st->core, cfg, now, &why) != 0)
        die("bad configuration from a safekeeper: %s", why);
}

/* Sleeps in poll() until a connection is ready, a reconnect is due or a
 * tick passed (not at all when work is pending). */
static void wait_for_events(sync_state *st, uint64_t now)
{
    struct pollfd fds[PROPOSER_MAX_ACCEPTORS + 1];
    int nfds = 0;
    int wait_ms = SYNC_TICK_MS;
    for (int i = 0; i < st->n; i++) {
        add_poll(fds, &nfds, &st->peers[i].stream);
        if (st->peers[i].stream.state == PQSTREAM_IDLE) {
            int64_t until = (int64_t)st->peers[i].next_attempt_ms - (int64_t)now;
            if (until < wait_ms)
                wait_ms = until < 0 ? 0 : (int)until;
        }
    }
    add_poll(fds, &nfds, &st->donor_stream);
    if (st->busy) {
        st->busy = false;
        wait_ms = 0;
    }
    if (poll(fds, (nfds_t)nfds, wait_ms) < 0 && errno != EINTR)
        die("poll: %s", strerror(errno));
}

int main(int argc, char **argv)
{
    static sync_state st; /* large: keep it off the stack */
    sync_args args;
    proposer_config cfg;
    const char *why;
    uint64_t deadline, last_tick = 0;

    parse_args(argc, argv, &st, &args);
    log_init("sync-safekeepers", args.verbose ? LOG_LEVEL_INFO : LOG_LEVEL_ERROR);
    parse_safekeepers(&st, args.sks);
    if (!strata_id_parse(args.tenant, &st.tenant))
        usage("--tenant takes 32 hex digits");
    if (!strata_id_parse(args.timeline, &st.timeline))
        usage("--timeline takes 32 hex digits");
    st.seg_size = (uint32_t)args.seg_size;
    st.max_wal = (size_t)args.max_wal_mb * 1024 * 1024;
    pqstream_init(&st.donor_stream);

    proposer_config_defaults(&cfg);
    cfg.n_acceptors = st.n;
    cfg.mconf = st.mconf;
    cfg.tenant_id = st.tenant;
    cfg.timeline_id = st.timeline;
    cfg.pg_version = SYNC_PG_VERSION;
    cfg.system_id = 0;
    cfg.wal_seg_size = st.seg_size;
    cfg.bootstrap_lsn = 0;
    cfg.sync_safekeepers = true;
    if (proposer_init(&st.core, &cfg, now_ms(), &why) != 0)
        die("bad configuration: %s", why);

    deadline = now_ms() + (uint64_t)args.timeout_s * 1000;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            die("timed out after %ld s: %s", args.timeout_s, progress(&st));
        for (int i = 0; i < st.n && !st.reconfigure; i++)
            handle_peer(&st, i, now);
        if (st.reconfigure) {
            restart_election(&st, &cfg, now);
            continue;
        }
        handle_donor(&st, now);
        if (now - last_tick >= SYNC_TICK_MS) {
            proposer_tick(&st.core, now, &st.out);
            run_effects(&st, now);
            last_tick = now;
        }
        wait_for_events(&st, now);
    }
}
