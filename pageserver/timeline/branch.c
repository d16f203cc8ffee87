/*
 * branch.c: what branches add to a timeline (docs/storage.md, "Branches"): merged
 * scans over a branch and its ancestors, the branch points a parent keeps
 * for GC, the ingest backend of a branch, and the commit-time index
 * (timestamps, lsn_by_time).  See timeline.h ("Branches").
 *
 * For: what a child and its ancestors share, and finding an LSN by time.
 * Not for: the page read path (read.c reads through to the ancestor in
 * read_page) or creating branch directories (timeline_build_branch,
 * tenants_create.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/byteorder.h"
#include "base/strata_assert.h"
#include "pageserver/timeline/timeline.h"
#include "pageserver/timeline/timeline_priv.h"

/* ---- merged scans ---- */

/* One key the branch itself holds in the scanned range, with its newest
 * value at or below the read LSN (payload copied). */
typedef struct own_entry {
    pg_key k;
    lsn_t lsn;
    value_ref v;
} own_entry;

typedef struct own_list {
    own_entry *e;
    size_t n, cap;
    bool oom;
} own_list;

static int collect_own(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    own_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        own_entry *e = realloc(l->e, cap * sizeof *e);
        if (e == NULL) {
            l->oom = true;
            return 1;
        }
        l->e = e;
        l->cap = cap;
    }
    uint8_t *copy = NULL;
    if (v->len > 0 && (copy = malloc(v->len)) == NULL) {
        l->oom = true;
        return 1;
    }
    if (v->len > 0)
        memcpy(copy, v->payload, v->len);
    l->e[l->n++] = (own_entry){.k = *k, .lsn = lsn, .v = {v->kind, v->flags, v->len, copy}};
    return 0;
}

static void own_list_free(own_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free((void *)l->e[i].v.payload);
    free(l->e);
}

/* Streams the ancestor's keys, emitting the branch's own keys before and
 * instead of them (same key: the branch's value wins). */
typedef struct merge_arg {
    own_list *own;
    size_t next;
    store_scan_fn fn;
    void *arg;
    int stopped; /* fn's non-zero return */
} merge_arg;

static int merge_one(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    merge_arg *m = arg;
    while (m->next < m->own->n) {
        const own_entry *o = &m->own->e[m->next];
        int c = pg_key_compare(&o->k, k);
        if (c > 0)
            break;
        m->next++;
        if ((m->stopped = m->fn(&o->k, o->lsn, &o->v, m->arg)) != 0)
            return m->stopped;
        if (c == 0)
            return 0; /* the branch's own value hides the ancestor's */
    }
    return m->stopped = m->fn(k, lsn, v, m->arg);
}

int timeline_scan(timeline *tl, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                  void *arg, char *err, size_t errlen)
{
    if (tl->ancestor == NULL)
        return store_scan(tl->st, from, to, lsn, fn, arg, err, errlen);
    own_list own = {0};
    if (store_scan(tl->st, from, to, lsn, collect_own, &own, err, errlen) != 0 || own.oom) {
        if (own.oom)
            snprintf(err, errlen, "out of memory merging a branch's scan");
        own_list_free(&own);
        return -1;
    }
    merge_arg m = {.own = &own, .fn = fn, .arg = arg};
    lsn_t at = lsn < tl->meta.ancestor_lsn ? lsn : tl->meta.ancestor_lsn;
    int rc = timeline_scan(tl->ancestor, from, to, at, merge_one, &m, err, errlen);
    /* The branch's keys above the ancestor's last one. */
    while (rc == 0 && m.stopped == 0 && m.next < own.n) {
        const own_entry *o = &own.e[m.next++];
        m.stopped = fn(&o->k, o->lsn, &o->v, arg);
    }
    own_list_free(&own);
    return rc;
}

/* ---- branch points ---- */

int timeline_add_branch(timeline *parent, const strata_id *child, lsn_t lsn, char *err,
                        size_t errlen)
{
    pthread_mutex_lock(&parent->branch_mu);
    lsn_t h = atomic_load(&parent->gc_horizon);
    int rc = 0;
    int i = 0;
    while (i < parent->nbranches && !strata_id_equal(&parent->branches[i].child, child))
        i++;
    if (lsn < h) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN], id[STRATA_ID_HEX_LEN];
        snprintf(err, errlen, "LSN %s is below the GC horizon %s of timeline %s",
                 lsn_format(lsn, a), lsn_format(h, b),
                 strata_id_format(&parent->meta.timeline, id));
        rc = -1;
    } else if (i < parent->nbranches) {
        parent->branches[i].lsn = lsn;
    } else if (parent->nbranches == parent->branches_cap) {
        int cap = parent->branches_cap ? parent->branches_cap * 2 : 4;
        struct timeline_branch_point *b = realloc(parent->branches, sizeof *b * (size_t)cap);
        if (b == NULL) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        } else {
            parent->branches = b;
            parent->branches_cap = cap;
        }
    }
    if (rc == 0 && i == parent->nbranches)
        parent->branches[parent->nbranches++] = (struct timeline_branch_point){*child, lsn};
    pthread_mutex_unlock(&parent->branch_mu);
    return rc;
}

void timeline_remove_branch(timeline *parent, const strata_id *child)
{
    pthread_mutex_lock(&parent->branch_mu);
    for (int i = 0; i < parent->nbranches; i++) {
        if (strata_id_equal(&parent->branches[i].child, child)) {
            parent->branches[i] = parent->branches[--parent->nbranches];
            break;
        }
    }
    pthread_mutex_unlock(&parent->branch_mu);
}

lsn_t timeline_min_branch_lsn(timeline *tl)
{
    lsn_t min = LSN_MAX;
    pthread_mutex_lock(&tl->branch_mu);
    for (int i = 0; i < tl->nbranches; i++)
        if (tl->branches[i].lsn < min)
            min = tl->branches[i].lsn;
    pthread_mutex_unlock(&tl->branch_mu);
    return min;
}

void timeline_readable_window(timeline *tl, lsn_t *lo, lsn_t *hi)
{
    lsn_t h = atomic_load(&tl->gc_horizon);
    *lo = h > tl->meta.start_lsn ? h : tl->meta.start_lsn;
    *hi = store_last_record_lsn(tl->st);
}

/* ---- the ingest backend of a branch ---- */

static int br_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                  size_t errlen)
{
    return store_put(((timeline *)arg)->st, k, lsn, v, err, errlen);
}

static int br_get_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found,
                         char *err, size_t errlen)
{
    return timeline_get_latest(arg, k, lsn, out, found, err, errlen);
}

static int br_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                   void *fnarg, char *err, size_t errlen)
{
    return timeline_scan(arg, from, to, lsn, fn, fnarg, err, errlen);
}

static int br_get_page(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                       size_t errlen)
{
    int chain = 0;
    bool complete;
    int rc = timeline_read_page_internal(arg, k, lsn, out, &chain, &complete, err, errlen);
    if (rc == 0)
        memset(out, 0, PG_BLCKSZ);
    return rc < 0 ? -1 : 0;
}

ingest_state *timeline_branch_ingest(timeline *tl)
{
    STRATA_ASSERT(tl->ancestor != NULL);
    ingest_backend b = {
        .arg = tl,
        .put = br_put,
        .get_latest = br_get_latest,
        .scan = br_scan,
        .get_page = br_get_page,
    };
    return ingest_create_over(&b, tl->svc.redo != NULL, store_last_record_lsn(tl->st));
}

/* ---- timestamps ---- */

#define PG_EPOCH_UNIX 946684800LL /* 2000-01-01 00:00:00 UTC in Unix seconds */
#define USECS 1000000LL

/* Reads exactly n digits at *p. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if ((*p)[i] < '0' || (*p)[i] > '9')
            return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* The zone suffix at p: Z, +HH, +HHMM, +HH:MM (or -), or nothing. */
static bool parse_zone(const char *p, int64_t *offset_s)
{
    *offset_s = 0;
    if (*p == '\0')
        return true;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
        return true;
    if (*p != '+' && *p != '-')
        return false;
    int sign = *p == '-' ? -1 : 1, hh = 0, mm = 0;
    p++;
    if (!digits(&p, 2, &hh))
        return false;
    if (*p == ':')
        p++;
    if (*p != '\0' && !digits(&p, 2, &mm))
        return false;
    if (*p != '\0' || hh > 15 || mm > 59)
        return false;
    *offset_s = sign * (hh * 3600 + mm * 60);
    return true;
}

bool timeline_parse_time(const char *s, pg_timestamp *out)
{
    const char *p = s;
    int y, mo, d, h = 0, mi = 0, sec = 0;
    if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
        !digits(&p, 2, &d))
        return false;
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap(y)))
        return false;
    int64_t usec = 0;
    if (*p == ' ' || *p == 'T' || *p == 't') {
        p++;
        if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi))
            return false;
        if (*p == ':') {
            p++;
            if (!digits(&p, 2, &sec))
                return false;
            if (*p == '.') {
                p++;
                int n = 0;
                for (; *p >= '0' && *p <= '9'; p++, n++) {
                    if (n < 6)
                        usec = usec * 10 + (*p - '0');
                }
                if (n == 0)
                    return false;
                for (; n < 6; n++)
                    usec *= 10;
            }
        }
        if (h > 23 || mi > 59 || sec > 59)
            return false;
    }
    int64_t off = 0;
    char zone[8];
    if (*p == ' ' && p[1] >= '0' && p[1] <= '9' && strlen(p) < sizeof zone) {
        /* "+00" from a query string whose '+' was decoded as a space */
        snprintf(zone, sizeof zone, "+%s", p + 1);
        p = zone;
    }
    if (!parse_zone(p, &off))
        return false;
    int64_t unix_s = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
    *out = (unix_s - PG_EPOCH_UNIX) * USECS + usec;
    return true;
}

char *timeline_format_time(pg_timestamp t, char *buf, size_t len)
{
    int64_t us = t % USECS;
    int64_t s = t / USECS;
    if (us < 0) {
        us += USECS;
        s--;
    }
    time_t unix_s = (time_t)(s + PG_EPOCH_UNIX);
    struct tm tm;
    gmtime_r(&unix_s, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%d %H:%M:%S", &tm);
    if (us != 0)
        snprintf(buf, len, "%s.%06" PRId64 "+00", base, us);
    else
        snprintf(buf, len, "%s+00", base);
    return buf;
}

/* ---- the commit-time index ---- */

/* The newest commit at or below lsn on tl and its ancestors: 1 with its
 * end LSN and time, 0 none, -1 error. */
static int commit_at(timeline *tl, lsn_t lsn, lsn_t *end, pg_timestamp *t, char *err, size_t errlen)
{
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_COMMIT_TIME};
    value_ref v;
    int rc = timeline_get_latest(tl, &k, lsn, &v, end, err, errlen);
    if (rc <= 0)
        return rc;
    bool ok = v.kind == VAL_BLOB && v.len == 8;
    if (ok)
        *t = (pg_timestamp)get_le64(v.payload);
    free((void *)v.payload);
    if (!ok) {
        char lb[LSN_FMT_LEN];
        snprintf(err, errlen, "the commit-time entry at %s is not an 8-byte timestamp",
                 lsn_format(*end, lb));
        return -1;
    }
    return 1;
}

/* The first commit at or above lo (and at or below hi): binary search for
 * the lowest LSN whose newest commit lies at or above lo.  1, 0 none, -1. */
static int first_commit(timeline *tl, lsn_t lo, lsn_t hi, lsn_t *end, pg_timestamp *t, char *err,
                        size_t errlen)
{
    lsn_t a = lo, b = hi;
    int found = 0;
    while (a <= b) {
        lsn_t mid = a + (b - a) / 2;
        lsn_t e;
        pg_timestamp ct;
        int rc = commit_at(tl, mid, &e, &ct, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 1 && e >= lo) {
            *end = e;
            *t = ct;
            found = 1;
            if (e == lo || e == 0)
                break;
            b = e - 1;
        } else {
            a = mid + 1;
        }
    }
    return found;
}

/*
 * Binary search over LSNs in [lo, hi] for the end of the last commit with
 * time <= t, assuming commit times grow with LSN.  They nearly do: a
 * commit's timestamp is taken before its record is inserted, so two
 * concurrent commits can land in WAL in the other order (by microseconds),
 * and a clock stepped back makes older LSNs look newer.  Then the search
 * still ends on a commit whose own time is <= t and whose next commit (in
 * the order the search probed) is later than t: an LSN within the
 * disorder, never an error.
 */
static int search_commits(timeline *tl, pg_timestamp t, lsn_t lo, lsn_t hi, lsn_t *lsn,
                          pg_timestamp *ct_out, char *err, size_t errlen)
{
    lsn_t a = lo, b = hi;
    int found = 0;
    while (a <= b) {
        lsn_t mid = a + (b - a) / 2;
        lsn_t e;
        pg_timestamp ct;
        int rc = commit_at(tl, mid, &e, &ct, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 1 && e >= lo && ct <= t) {
            *lsn = e;
            *ct_out = ct;
            found = 1;
            a = mid + 1;
        } else if (rc == 1 && e >= lo) {
            if (e == 0)
                break;
            b = e - 1;
        } else {
            a = mid + 1;
        }
    }
    return found;
}

/* The lowest LSN whose history this timeline can still read: the root's
 * window start, or on a branch its ancestors' (the branch reads them below
 * its start). */
static lsn_t chain_floor(timeline *tl)
{
    lsn_t lo, hi;
    timeline *root = tl;
    while (root->ancestor != NULL)
        root = root->ancestor;
    timeline_readable_window(root, &lo, &hi);
    return lo;
}

int timeline_lsn_by_time(timeline *tl, pg_timestamp t, lsn_t *lsn, pg_timestamp *commit_time,
                         bool *latest, int *status, char *err, size_t errlen)
{
    lsn_t lo = chain_floor(tl), hi = store_last_record_lsn(tl->st);
    *latest = false;
    *commit_time = -1;
    lsn_t newest_end;
    pg_timestamp newest_t;
    int rc = commit_at(tl, hi, &newest_end, &newest_t, err, errlen);
    if (rc < 0) {
        *status = 500;
        return -1;
    }
    if (rc == 1 && newest_t <= t) {
        *lsn = hi;
        *commit_time = newest_t;
        *latest = true;
        return 0;
    }
    rc = search_commits(tl, t, lo, hi, lsn, commit_time, err, errlen);
    if (rc < 0) {
        *status = 500;
        return -1;
    }
    if (rc == 1)
        return 0;
    /* Before the first commit the window holds (or there is none). */
    char tb[48], lb[LSN_FMT_LEN], hb[LSN_FMT_LEN], fb[48], eb[LSN_FMT_LEN];
    lsn_t first_end;
    pg_timestamp first_t;
    int frc = first_commit(tl, lo, hi, &first_end, &first_t, err, errlen);
    *status = frc < 0 ? 500 : 400;
    if (frc < 0)
        return -1;
    char id[STRATA_ID_HEX_LEN];
    strata_id_format(&tl->meta.timeline, id);
    timeline_format_time(t, tb, sizeof tb);
    if (frc == 0) {
        snprintf(err, errlen,
                 "time %s: timeline %s has no commit in its readable window %s..%s (no commit "
                 "record since the GC horizon or start)",
                 tb, id, lsn_format(lo, lb), lsn_format(hi, hb));
    } else {
        char nb[48], nlb[LSN_FMT_LEN];
        snprintf(err, errlen,
                 "time %s is before the readable window of timeline %s: its first commit is at "
                 "%s (LSN %s), its newest at %s (LSN %s); window %s..%s",
                 tb, id, timeline_format_time(first_t, fb, sizeof fb), lsn_format(first_end, eb),
                 timeline_format_time(newest_t, nb, sizeof nb), lsn_format(newest_end, nlb),
                 lsn_format(lo, lb), lsn_format(hi, hb));
    }
    return -1;
}
