/*
 * sk_client.c: TIMELINE_STATUS, SWITCH_MEMBERSHIP and a timeline copy over
 * a safekeeper's WAL-push port.  See sk_client.h.
 */
#include "cli/client/sk_client.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli/local/proc.h"
#include "cli/client/sk_change.h"
#include "base/byteorder.h"
#include "base/durable.h"
#include "base/log.h"
#include "base/sqlstate.h"
#include "proto/sk_control.h"

#define SK_CONNECT_TIMEOUT "10"
/* The copy prints progress this often (bytes). */
#define PROGRESS_EVERY (64u << 20)
/* Copies of a timeline tried while its donor removes WAL under them. */
#define COPY_ATTEMPTS 3

static PGconn *sk_connect(const sk_target *t, cli_err *err)
{
    char port[16], opts[128], a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    snprintf(port, sizeof port, "%d", t->port);
    snprintf(opts, sizeof opts, "-c tenant_id=%s -c timeline_id=%s",
             strata_id_format(&t->tenant, a), strata_id_format(&t->timeline, b));
    const char *keys[] = {"host",     "port", "dbname", "options", "user", "connect_timeout",
                          "password", NULL};
    const char *vals[] = {t->host,     port, "replication", opts, "strata", SK_CONNECT_TIMEOUT,
                          t->password, NULL};
    if (t->password == NULL)
        keys[6] = NULL;
    PGconn *c = PQconnectdbParams(keys, vals, 0);
    if (PQstatus(c) != CONNECTION_OK) {
        cli_err_set(err, "cannot connect to safekeeper %s:%d: %s", t->host, t->port,
                    PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* "term@X/Y,term@X/Y" into h. */
static bool parse_history(const char *s, term_history *h)
{
    h->n = 0;
    while (*s != '\0') {
        if (h->n == TERM_HISTORY_MAX)
            return false;
        char *end;
        unsigned long long term = strtoull(s, &end, 10);
        if (end == s || *end != '@')
            return false;
        const char *l = end + 1;
        const char *comma = strchr(l, ',');
        char lsn[LSN_FMT_LEN];
        size_t len = comma != NULL ? (size_t)(comma - l) : strlen(l);
        if (len == 0 || len >= sizeof lsn)
            return false;
        memcpy(lsn, l, len);
        lsn[len] = '\0';
        h->entries[h->n].term = term;
        if (!lsn_parse(lsn, &h->entries[h->n].lsn))
            return false;
        h->n++;
        s = comma != NULL ? comma + 1 : l + len;
    }
    return term_history_valid(h);
}

static const char *col(const PGresult *r, const char *name)
{
    int i = PQfnumber(r, name);
    return i < 0 ? NULL : PQgetvalue(r, 0, i);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_lsn_col(const PGresult *r, const char *name, lsn_t *out)
{
    const char *v = col(r, name);
    return v != NULL && lsn_parse(v, out);
}

static int parse_state(const PGresult *r, sk_state *s, const char **why)
{
    memset(s, 0, sizeof *s);
    uint64_t gen = 0, pgv = 0, seg = 0;
    const char *mem = col(r, "members"), *nmem = col(r, "new_members");
    const char *hist = col(r, "history");
    if (!parse_u64(col(r, "term"), &s->term) || !parse_lsn_col(r, "flush_lsn", &s->flush_lsn) ||
        !parse_lsn_col(r, "commit_lsn", &s->commit_lsn) ||
        !parse_lsn_col(r, "timeline_start_lsn", &s->timeline_start_lsn) ||
        !parse_lsn_col(r, "truncate_lsn", &s->truncate_lsn) ||
        !parse_u64(col(r, "generation"), &gen) || gen > UINT32_MAX ||
        !parse_u64(col(r, "pg_version"), &pgv) || pgv > UINT32_MAX ||
        !parse_u64(col(r, "system_id"), &s->system_id) ||
        !parse_u64(col(r, "wal_seg_size"), &seg) || seg > UINT32_MAX ||
        !parse_lsn_col(r, "wal_start", &s->wal_start) ||
        !parse_lsn_col(r, "ps_disk_consistent_lsn", &s->ps_disk_consistent_lsn) ||
        !parse_lsn_col(r, "ps_remote_consistent_lsn", &s->ps_remote_consistent_lsn) ||
        mem == NULL || nmem == NULL || hist == NULL) {
        *why = "TIMELINE_STATUS: a column is missing or malformed (an older safekeeper?)";
        return -1;
    }
    s->mconf.generation = (uint32_t)gen;
    s->pg_version = (uint32_t)pgv;
    s->wal_seg_size = (uint32_t)seg;
    if (membership_parse_set(mem, s->mconf.members, &s->mconf.n_members, why) != 0 ||
        membership_parse_set(nmem, s->mconf.new_members, &s->mconf.n_new_members, why) != 0)
        return -1;
    if (!parse_history(hist, &s->history)) {
        *why = "TIMELINE_STATUS: malformed term history";
        return -1;
    }
    return 0;
}

int sk_client_status(const sk_target *t, sk_state *out, cli_err *err)
{
    PGconn *c = sk_connect(t, err);
    if (c == NULL)
        return -1;
    PGresult *r = PQexec(c, "TIMELINE_STATUS");
    int rc = -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        cli_err_set(err, "TIMELINE_STATUS on %s:%d: %s", t->host, t->port, PQerrorMessage(c));
    } else {
        const char *why = NULL;
        if (parse_state(r, out, &why) != 0)
            cli_err_set(err, "%s:%d: %s", t->host, t->port, why);
        else
            rc = 0;
    }
    PQclear(r);
    PQfinish(c);
    return rc;
}

int sk_client_switch(const sk_target *t, const membership *m, cli_err *err)
{
    char mem[MEMBERSHIP_TEXT_MAX], nmem[MEMBERSHIP_TEXT_MAX];
    membership_format_set(m->members, m->n_members, mem, sizeof mem);
    membership_format_set(m->new_members, m->n_new_members, nmem, sizeof nmem);
    char q[2 * MEMBERSHIP_TEXT_MAX + 64];
    if (m->n_new_members > 0)
        snprintf(q, sizeof q, "SWITCH_MEMBERSHIP %u '%s' '%s'", m->generation, mem, nmem);
    else
        snprintf(q, sizeof q, "SWITCH_MEMBERSHIP %u '%s'", m->generation, mem);
    for (int attempt = 0;; attempt++) {
        PGconn *c = sk_connect(t, err);
        if (c == NULL)
            return -1;
        PGresult *r = PQexec(c, q);
        ExecStatusType st = PQresultStatus(r);
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        bool busy =
            st != PGRES_TUPLES_OK && state != NULL && strcmp(state, SQLSTATE_OBJECT_IN_USE) == 0;
        if (st != PGRES_TUPLES_OK && !busy)
            cli_err_set(err, "SWITCH_MEMBERSHIP on %s:%d: %s", t->host, t->port, PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
        if (st == PGRES_TUPLES_OK)
            return 0;
        if (!busy || attempt >= 200)
            return busy ? cli_err_set(err, "%s:%d stayed busy", t->host, t->port) : -1;
        usleep(50 * 1000);
    }
}

/* ---- copying a timeline ---------------------------------------------- */

typedef struct seg_writer {
    char dir[PATH_MAX];
    uint32_t seg_size;
    uint64_t segno; /* of fd */
    int fd;         /* -1: none open */
} seg_writer;

/* Segment file names as Postgres (and the safekeeper's WAL store) writes
 * them for timeline 1. */
static void seg_name(uint32_t seg_size, uint64_t segno, char *buf, size_t cap)
{
    uint64_t per_id = 0x100000000ull / seg_size;
    snprintf(buf, cap, "%08X%08X%08X", 1u, (unsigned)(segno / per_id), (unsigned)(segno % per_id));
}

static int seg_close(seg_writer *w, cli_err *err)
{
    if (w->fd < 0)
        return 0;
    int rc = durable_fsync_fd(w->fd);
    close(w->fd);
    w->fd = -1;
    if (rc != 0)
        return cli_err_set(err, "fsync WAL segment in %s: %s", w->dir, strerror(-rc));
    return 0;
}

static int seg_write(seg_writer *w, lsn_t lsn, const uint8_t *data, size_t len, cli_err *err)
{
    while (len > 0) {
        uint64_t segno = lsn / w->seg_size;
        uint64_t off = lsn % w->seg_size;
        size_t n = len < w->seg_size - off ? len : (size_t)(w->seg_size - off);
        if (w->fd < 0 || w->segno != segno) {
            if (seg_close(w, err) != 0)
                return -1;
            char name[32], path[PATH_MAX + 40];
            seg_name(w->seg_size, segno, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", w->dir, name);
            w->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (w->fd < 0)
                return cli_err_set(err, "create %s: %s", path, strerror(errno));
            /* Full size from the start, as the store creates segments. */
            if (ftruncate(w->fd, w->seg_size) != 0)
                return cli_err_set(err, "size %s: %s", path, strerror(errno));
            w->segno = segno;
        }
        int rc = durable_pwrite_all(w->fd, data, n, off);
        if (rc != 0)
            return cli_err_set(err, "write WAL segment in %s: %s", w->dir, strerror(-rc));
        lsn += n;
        data += n;
        len -= n;
    }
    return 0;
}

/* Streams [from, to) from the donor into w. */
/* term != 0: the donor's WAL up to its flush, while its term is term
 * (docs/design.md §3.3); 0: committed WAL only. */
static int stream_wal(const sk_target *donor, seg_writer *w, lsn_t from, lsn_t to, uint64_t term,
                      cli_err *err)
{
    PGconn *c = sk_connect(donor, err);
    if (c == NULL)
        return -1;
    char q[96], f[LSN_FMT_LEN];
    if (term != 0)
        snprintf(q, sizeof q, "START_REPLICATION PHYSICAL %s TERM %" PRIu64, lsn_format(from, f),
                 term);
    else
        snprintf(q, sizeof q, "START_REPLICATION PHYSICAL %s", lsn_format(from, f));
    PGresult *r = PQexec(c, q);
    if (PQresultStatus(r) != PGRES_COPY_BOTH) {
        cli_err_set(err, "%s on %s:%d: %s", q, donor->host, donor->port, PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
        return -1;
    }
    PQclear(r);
    lsn_t pos = from;
    uint64_t next_report = PROGRESS_EVERY;
    int rc = 0;
    while (pos < to) {
        char *buf = NULL;
        int n = PQgetCopyData(c, &buf, 0);
        if (n < 0) {
            rc = cli_err_set(err,
                             "WAL stream from %s:%d ended at %" PRIX64 " before %" PRIX64 ": %s",
                             donor->host, donor->port, pos, to, PQerrorMessage(c));
            break;
        }
        if (n >= 25 && buf[0] == 'w') {
            lsn_t start = get_be64(buf + 1);
            size_t len = (size_t)n - 25;
            if (start != pos) {
                rc = cli_err_set(err, "WAL stream from %s:%d jumped from %" PRIX64 " to %" PRIX64,
                                 donor->host, donor->port, pos, start);
                PQfreemem(buf);
                break;
            }
            if (len > to - pos)
                len = (size_t)(to - pos);
            if (seg_write(w, pos, (const uint8_t *)buf + 25, len, err) != 0) {
                rc = -1;
                PQfreemem(buf);
                break;
            }
            pos += len;
            if (pos - from >= next_report) {
                char p[LSN_FMT_LEN], t[LSN_FMT_LEN];
                printf("  copied %" PRIu64 " MB (%s of %s)\n", (pos - from) >> 20,
                       lsn_format(pos, p), lsn_format(to, t));
                fflush(stdout);
                next_report += PROGRESS_EVERY;
            }
        }
        PQfreemem(buf);
    }
    PQfinish(c);
    return rc;
}

/* One copy (sk_client_copy_timeline); *from is where it started. */
static int copy_attempt(const sk_target *donor, const char *datadir, uint64_t node_id,
                        const sk_copy_state *cs, lsn_t *from_out, lsn_t *copied_to, cli_err *err)
{
    sk_state s;
    *from_out = LSN_INVALID;
    if (sk_client_status(donor, &s, err) != 0)
        return -1;
    if (s.wal_seg_size == 0 || s.wal_start == LSN_INVALID || s.flush_lsn == LSN_INVALID)
        return cli_err_set(err, "safekeeper %s:%d holds no WAL for this timeline", donor->host,
                           donor->port);
    /* Up to the donor's flush, not its commit: an acknowledged commit may
     * lie beyond the commit position it heard (sk_change.h).
     * TIMELINE_STATUS's commit_lsn is already min(commit, flush). */
    lsn_t to = sk_change_copy_end(s.flush_lsn, s.commit_lsn);
    lsn_t from = s.wal_start;
    if (from < s.timeline_start_lsn)
        from = s.timeline_start_lsn - s.timeline_start_lsn % s.wal_seg_size;
    if (to < from)
        to = from;
    *from_out = from;

    char tdir[PATH_MAX], a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    snprintf(tdir, sizeof tdir, "%s/%s", datadir, strata_id_format(&donor->tenant, a));
    if (mkdir(tdir, 0700) != 0 && errno != EEXIST)
        return cli_err_set(err, "mkdir %s: %s", tdir, strerror(errno));
    snprintf(tdir, sizeof tdir, "%s/%s/%s", datadir, a, strata_id_format(&donor->timeline, b));
    if (mkdir(tdir, 0700) != 0)
        return cli_err_set(err, "mkdir %s: %s", tdir, strerror(errno));

    char f[LSN_FMT_LEN], t[LSN_FMT_LEN];
    printf("copying WAL %s..%s (%" PRIu64 " MB) from %s:%d\n", lsn_format(from, f),
           lsn_format(to, t), (to - from) >> 20, donor->host, donor->port);
    fflush(stdout);
    seg_writer w = {.seg_size = s.wal_seg_size, .fd = -1};
    snprintf(w.dir, sizeof w.dir, "%s", tdir);
    int rc = to > from ? stream_wal(donor, &w, from, to, s.term, err) : 0;
    if (rc == 0)
        rc = seg_close(&w, err);
    if (w.fd >= 0)
        close(w.fd);

    /* The control file says what the copied WAL is: the donor's history up
     * to its end, the donor's term (a promise only more restrictive than
     * none), server info and configuration; flush at the end, commit where
     * the donor knew it (the tail past it may still be truncated by the next
     * election, and an acceptor refuses to truncate below its commit). */
    sk_control_state st;
    memset(&st, 0, sizeof st);
    st.tenant_id = donor->tenant;
    st.timeline_id = donor->timeline;
    st.pg_version = s.pg_version;
    st.system_id = s.system_id;
    st.wal_seg_size = s.wal_seg_size;
    st.node_id = node_id;
    st.term = cs != NULL && cs->term > s.term ? cs->term : s.term;
    for (uint32_t i = 0; i < s.history.n && s.history.entries[i].lsn <= to; i++)
        st.history.entries[st.history.n++] = s.history.entries[i];
    st.timeline_start_lsn = s.timeline_start_lsn;
    st.flush_lsn = to;
    st.commit_lsn = s.commit_lsn;
    st.truncate_lsn = s.truncate_lsn < to ? s.truncate_lsn : to;
    st.ps_feedback.disk_consistent_lsn = s.ps_disk_consistent_lsn;
    /* Without it the new node's housekeeping would take "not reported" and
     * could remove WAL above the pageserver's newest manifest. */
    st.ps_feedback.remote_consistent_lsn = s.ps_remote_consistent_lsn;
    st.mconf = cs != NULL && cs->mconf != NULL ? *cs->mconf : s.mconf;
    if (rc == 0) {
        int wrc = sk_control_write(tdir, &st);
        if (wrc == 0)
            wrc = durable_fsync_dir(tdir);
        /* The new entries up the tree: the timeline directory in the tenant
         * directory, that in the data directory, and the data directory
         * (just made by the caller) in its parent. */
        if (wrc == 0)
            wrc = durable_fsync_parent(tdir);
        if (wrc == 0)
            wrc = durable_fsync_dir(datadir);
        if (wrc == 0)
            wrc = durable_fsync_parent(datadir);
        if (wrc != 0)
            rc = cli_err_set(err, "write the control file in %s: %s", tdir, strerror(-wrc));
    }
    if (rc != 0) {
        /* A failed copy leaves nothing behind. */
        cli_err rm = {{0}};
        if (proc_remove_tree(tdir, &rm) != 0)
            log_warn("%s", rm.msg);
        return -1;
    }
    *copied_to = to;
    return 0;
}

/*
 * The donor keeps running while it is copied, and removes segments below
 * its horizon once the WAL backup and the pageserver hold them: a segment
 * may go between its status and the stream reaching it, which ends the
 * stream.  The donor then starts later, as the copy may: copy again from
 * its new start, a bounded number of times.
 */
int sk_client_copy_timeline(const sk_target *donor, const char *datadir, uint64_t node_id,
                            const sk_copy_state *cs, lsn_t *copied_to, cli_err *err)
{
    for (int attempt = 1;; attempt++) {
        lsn_t from;
        if (copy_attempt(donor, datadir, node_id, cs, &from, copied_to, err) == 0)
            return 0;
        sk_state s;
        cli_err ignored = {{0}};
        if (attempt == COPY_ATTEMPTS || from == LSN_INVALID ||
            sk_client_status(donor, &s, &ignored) != 0 || s.wal_start <= from)
            return -1;
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        printf("the donor removed WAL below %s (held by the WAL backup) while it was copied "
               "from %s: copying again\n",
               lsn_format(s.wal_start, a), lsn_format(from, b));
        fflush(stdout);
        memset(err, 0, sizeof *err);
    }
}
