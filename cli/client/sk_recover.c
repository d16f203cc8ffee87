/*
 * sk_recover.c: the object-store side of `strata safekeeper recover`: the
 * seed from the WAL backup, the newest manifest, the quarantine of the lost
 * history.  See sk_recover.h; the argument is in docs/design.md §4.10.
 */
#include "cli/client/sk_recover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/local/proc.h"
#include "base/durable.h"
#include "pg/walformat.h"
#include "proto/sk_control.h"

/* A manifest is small; anything larger is not one. */
#define MANIFEST_MAX_BYTES (64u << 20)

int sk_recover_open_store(const cluster *c, remote_storage **out, cli_err *err)
{
    *out = NULL;
    if (c->remote[0] == '\0')
        return 0;
    remote_config cfg;
    remote_err rerr = {{0}};
    if (remote_config_from_url(c->remote, &cfg, &rerr) != 0 || remote_open(&cfg, out, &rerr) != 0)
        return cli_err_set(err, "the cluster's remote store %s: %s", c->remote, rerr.msg);
    return 0;
}

/* Segment names of timeline 1, as the safekeepers' WAL store and backup
 * write them (wal_store_segment_name). */
static void seg_name(uint32_t seg_size, uint64_t segno, char *buf, size_t cap)
{
    uint64_t per_id = 0x100000000ull / seg_size;
    snprintf(buf, cap, "%08X%08X%08X", 1u, (unsigned)(segno / per_id), (unsigned)(segno % per_id));
}

/* "tenants/<t>/timelines/<tl>/<dir>/", dir "wal" or the quarantine. */
static void timeline_prefix(const cluster *c, const char *dir, char *buf, size_t cap)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(buf, cap, "tenants/%s/timelines/%s/%s/", strata_id_format(&c->tenant_id, t),
             strata_id_format(&c->timeline_id, l), dir);
}

/* Lists the timeline's objects under dir ("wal", "manifest") into *l;
 * prefix gets the listed prefix.  0, or -1 with err. */
static int list_timeline(remote_storage *rs, const cluster *c, const char *dir, char *prefix,
                         size_t cap, remote_listing *l, cli_err *err)
{
    timeline_prefix(c, dir, prefix, cap);
    remote_err rerr = {{0}};
    if (remote_list(rs, prefix, l, &rerr) != 0)
        return cli_err_set(err, "list the timeline's %s objects: %s", dir, rerr.msg);
    return 0;
}

static void wal_key(const cluster *c, const char *dir, uint32_t seg_size, uint64_t segno, char *buf,
                    size_t cap)
{
    char p[256], n[32];
    timeline_prefix(c, dir, p, sizeof p);
    seg_name(seg_size, segno, n, sizeof n);
    snprintf(buf, cap, "%s%s", p, n);
}

/* The segment number of "<prefix><24 hex>" of timeline 1, or false. */
static bool parse_wal_key(const char *prefix, const char *key, uint32_t seg_size, uint64_t *segno)
{
    size_t pl = strlen(prefix);
    if (strncmp(key, prefix, pl) != 0 || strlen(key + pl) != 24)
        return false;
    unsigned tli, hi, lo;
    char tail;
    if (strspn(key + pl, "0123456789ABCDEF") != 24 ||
        sscanf(key + pl, "%8X%8X%8X%c", &tli, &hi, &lo, &tail) != 3 || tli != 1)
        return false;
    uint64_t per_id = 0x100000000ull / seg_size;
    if (lo >= per_id)
        return false;
    *segno = (uint64_t)hi * per_id + lo;
    return true;
}

/* The end segno (exclusive) of the run of full-size wal/ objects starting at
 * first: first itself when the backup lacks it. */
static int backup_run_end(remote_storage *rs, const cluster *c, uint32_t seg_size, uint64_t first,
                          uint64_t *end, cli_err *err)
{
    char prefix[256];
    remote_listing l;
    if (list_timeline(rs, c, "wal", prefix, sizeof prefix, &l, err) != 0)
        return -1;
    /* Keys are sorted, and segment names sort as their numbers. */
    *end = first;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t segno;
        if (!parse_wal_key(prefix, l.entries[i].key, seg_size, &segno) || segno < *end ||
            l.entries[i].size != seg_size)
            continue;
        if (segno != *end)
            break;
        (*end)++;
    }
    remote_listing_free(&l);
    return 0;
}

/* Reads len bytes at 0 of the survivor's segment segno (final name or
 * ".partial") into buf. */
static int read_local_segment(const char *tl_dir, uint32_t seg_size, uint64_t segno, void *buf,
                              size_t len, cli_err *err)
{
    char name[32], path[PATH_MAX + 48];
    seg_name(seg_size, segno, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s.partial", tl_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        snprintf(path, sizeof path, "%s/%s", tl_dir, name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    ssize_t got = durable_pread_all(fd, buf, len, 0);
    close(fd);
    if (got != (ssize_t)len)
        return cli_err_set(err, "read %s: %s", path, got < 0 ? strerror((int)-got) : "short file");
    return 0;
}

/*
 * Committed WAL never changes, so the survivor's WAL below F must be the
 * backup's too.  The bytes of its last segment below F are compared; a
 * survivor that held a tail a later term replaced would differ there (its
 * page headers and record chain lead up to F).
 */
static int check_overlap(remote_storage *rs, const cluster *c, const char *tl_dir,
                         sk_recover_seed *s, cli_err *err)
{
    uint64_t segno = (s->flush - 1) / s->seg_size;
    size_t len = (size_t)(s->flush - segno * s->seg_size);
    uint8_t *mine = malloc(len), *theirs = malloc(len);
    int rc = -1;
    char key[512];
    wal_key(c, "wal", s->seg_size, segno, key, sizeof key);
    remote_err rerr = {{0}};
    size_t got = 0;
    if (mine == NULL || theirs == NULL)
        cli_err_set(err, "out of memory");
    else if (read_local_segment(tl_dir, s->seg_size, segno, mine, len, err) != 0)
        ;
    else if (remote_get_range(rs, key, 0, len, theirs, &got, &rerr) != 0)
        cli_err_set(err, "read %s: %s", key, rerr.msg);
    else if (got != len || memcmp(mine, theirs, len) != 0) {
        char f[LSN_FMT_LEN];
        cli_err_set(err,
                    "the survivor's WAL below its flush %s differs from the WAL backup's segment "
                    "%s: it holds a tail that a later term replaced, and recover cannot tell "
                    "which WAL is the timeline's; not recovering",
                    lsn_format(s->flush, f), key);
    } else
        rc = 0;
    free(mine);
    free(theirs);
    return rc;
}

/* Downloads segment segno into the staging directory and feeds the bytes at
 * and past F to the tracker; a feed error ends the seed at the last
 * complete record before it (*broken). */
static int stage_segment(remote_storage *rs, const cluster *c, sk_recover_seed *s, uint64_t segno,
                         wal_tracker *t, uint8_t *buf, bool *broken, cli_err *err)
{
    char key[512], name[32], path[PATH_MAX + 48];
    wal_key(c, "wal", s->seg_size, segno, key, sizeof key);
    seg_name(s->seg_size, segno, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", s->stage_dir, name);
    remote_err rerr = {{0}};
    if (remote_get_file(rs, key, path, &rerr) != 0)
        return cli_err_set(err, "download %s: %s", key, rerr.msg);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -errno : durable_pread_all(fd, buf, s->seg_size, 0);
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)s->seg_size)
        return cli_err_set(err, "read %s: %s", path, got < 0 ? strerror((int)-got) : "short file");
    lsn_t start = segno * s->seg_size;
    size_t off = s->flush > start ? (size_t)(s->flush - start) : 0;
    const char *why = NULL;
    if (wal_tracker_feed(t, start + off, buf + off, s->seg_size - off, &why) != 0) {
        snprintf(s->note, sizeof s->note, "the WAL backup's segment %s is not valid WAL (%s)", name,
                 why);
        *broken = true;
    }
    return 0;
}

/* Zeroes the staged last segment past the seed end: those bytes belong to
 * a record whose rest was in the lost partial segment. */
static int trim_last(const sk_recover_seed *s, cli_err *err)
{
    char name[32], path[PATH_MAX + 48];
    seg_name(s->seg_size, s->last_segno, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", s->stage_dir, name);
    size_t off = (size_t)(s->end - s->last_segno * s->seg_size);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    uint8_t *zeros = calloc(1, s->seg_size - off);
    int rc = zeros == NULL ? -ENOMEM : durable_pwrite_all(fd, zeros, s->seg_size - off, off);
    if (rc == 0)
        rc = durable_fsync_fd(fd);
    free(zeros);
    close(fd);
    return rc == 0 ? 0 : cli_err_set(err, "zero %s past the seed end: %s", path, strerror(-rc));
}

static int make_stage_dir(const cluster *c, sk_recover_seed *s, cli_err *err)
{
    if (cluster_path(c, "recover-wal", s->stage_dir, err) != 0)
        return -1;
    sk_recover_unstage(s);
    if (mkdir(s->stage_dir, 0700) != 0)
        return cli_err_set(err, "mkdir %s: %s", s->stage_dir, strerror(errno));
    return 0;
}

/* Downloads first..run_end-1 and sets s->end to the last record end. */
static int stage_run(remote_storage *rs, const cluster *c, sk_recover_seed *s, uint64_t run_end,
                     cli_err *err)
{
    uint8_t *buf = malloc(s->seg_size);
    if (buf == NULL)
        return cli_err_set(err, "out of memory");
    wal_tracker t;
    wal_tracker_init(&t, s->flush, s->seg_size);
    bool broken = false;
    int rc = 0;
    for (uint64_t segno = s->first_segno; segno < run_end && !broken && rc == 0; segno++)
        rc = stage_segment(rs, c, s, segno, &t, buf, &broken, err);
    free(buf);
    if (rc != 0)
        return -1;
    s->end = wal_tracker_last_record_end(&t);
    if (s->end < s->flush)
        s->end = s->flush;
    if (s->end > s->flush)
        s->last_segno = (s->end - 1) / s->seg_size;
    return 0;
}

int sk_recover_stage(remote_storage *rs, const cluster *c, const char *tl_dir, uint32_t seg_size,
                     lsn_t flush, sk_recover_seed *out, cli_err *err)
{
    memset(out, 0, sizeof *out);
    out->seg_size = seg_size;
    out->flush = out->end = flush;
    out->first_segno = flush / seg_size;
    if (rs == NULL) {
        snprintf(out->note, sizeof out->note, "the cluster has no remote store");
        return 0;
    }
    uint64_t run_end;
    if (backup_run_end(rs, c, seg_size, out->first_segno, &run_end, err) != 0)
        return -1;
    if (run_end == out->first_segno) {
        snprintf(out->note, sizeof out->note,
                 "the WAL backup holds no closed segment past the survivor's flush");
        return 0;
    }
    out->backup_end = run_end * seg_size;
    if (flush % seg_size == 0 && out->first_segno > 0) {
        /* The survivor's last segment below F must be in the backup to be
         * compared; the backup is contiguous, so it is unless it starts at F. */
        uint64_t prev_end;
        if (backup_run_end(rs, c, seg_size, out->first_segno - 1, &prev_end, err) != 0)
            return -1;
        if (prev_end == out->first_segno - 1) {
            snprintf(out->note, sizeof out->note,
                     "the survivor's WAL cannot be compared with the WAL backup");
            return 0;
        }
    }
    if (check_overlap(rs, c, tl_dir, out, err) != 0 || make_stage_dir(c, out, err) != 0)
        return -1;
    if (stage_run(rs, c, out, run_end, err) != 0)
        return -1;
    if (out->end == out->flush && out->note[0] == '\0')
        snprintf(out->note, sizeof out->note,
                 "no record past the survivor's flush ends in the WAL backup's segments");
    if (out->end > out->flush && out->end % seg_size != 0 && trim_last(out, err) != 0)
        return -1;
    return 0;
}

void sk_recover_unstage(const sk_recover_seed *s)
{
    struct stat st;
    if (s->stage_dir[0] == '\0' || stat(s->stage_dir, &st) != 0)
        return;
    cli_err e = {{0}};
    if (proc_remove_tree(s->stage_dir, &e) != 0)
        fprintf(stderr, "warning: %s\n", e.msg);
}

/* ---- manifests ------------------------------------------------------- */

/* The seq of "<prefix><16 hex>.json" (pageserver/remote/manifest.h). */
static bool parse_manifest_key(const char *prefix, const char *key, uint64_t *seq)
{
    size_t pl = strlen(prefix);
    const char *rest = key + pl;
    if (strncmp(key, prefix, pl) != 0 || strlen(rest) != 21 || strcmp(rest + 16, ".json") != 0 ||
        strspn(rest, "0123456789abcdefABCDEF") != 16)
        return false;
    *seq = strtoull(rest, NULL, 16);
    return true;
}

static int manifest_consistent_lsn(const void *body, size_t len, lsn_t *out)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "consistent_lsn");
    int rc = cJSON_IsString(v) && lsn_parse(v->valuestring, out) ? 0 : -1;
    cJSON_Delete(root);
    return rc;
}

int sk_recover_newest_manifest(remote_storage *rs, const cluster *c, bool *found, uint64_t *seq,
                               lsn_t *consistent, cli_err *err)
{
    *found = false;
    char prefix[256], key[512];
    remote_listing l;
    if (list_timeline(rs, c, "manifest", prefix, sizeof prefix, &l, err) != 0)
        return -1;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t s;
        if (parse_manifest_key(prefix, l.entries[i].key, &s) && (!*found || s > *seq)) {
            *found = true;
            *seq = s;
            snprintf(key, sizeof key, "%s", l.entries[i].key);
        }
    }
    remote_listing_free(&l);
    if (!*found)
        return 0;
    void *body = NULL;
    size_t len = 0;
    remote_err rerr = {{0}};
    if (remote_get_buf(rs, key, MANIFEST_MAX_BYTES, &body, &len, &rerr) != 0)
        return cli_err_set(err, "read %s: %s", key, rerr.msg);
    int rc = manifest_consistent_lsn(body, len, consistent);
    free(body);
    return rc == 0 ? 0 : cli_err_set(err, "%s: no consistent_lsn (not a manifest?)", key);
}

/* ---- installing into the survivor ----------------------------------- */

/* Renames the staged segment into tl_dir, then drops the survivor's
 * ".partial" of it: until then its restart would still find the old one
 * (which the store prefers) and its control file says F, which agree. */
static int install_segment(const sk_recover_seed *s, const char *tl_dir, uint64_t segno,
                           cli_err *err)
{
    char name[32], from[PATH_MAX + 48], to[PATH_MAX + 48], partial[PATH_MAX + 56];
    seg_name(s->seg_size, segno, name, sizeof name);
    snprintf(from, sizeof from, "%s/%s", s->stage_dir, name);
    snprintf(to, sizeof to, "%s/%s", tl_dir, name);
    snprintf(partial, sizeof partial, "%s/%s.partial", tl_dir, name);
    int rc = durable_rename(from, to);
    if (rc == 0)
        rc = durable_unlink(partial);
    return rc == 0 ? 0 : cli_err_set(err, "install %s: %s", to, strerror(-rc));
}

int sk_recover_install(const sk_recover_seed *s, const char *tl_dir, cli_err *err)
{
    if (s->end <= s->flush)
        return 0;
    sk_control_state st;
    char why[256];
    if (sk_control_read(tl_dir, &st, why, sizeof why) != 0)
        return cli_err_set(err, "the survivor's control file in %s: %s", tl_dir, why);
    if (st.flush_lsn != s->flush) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        return cli_err_set(err,
                           "the survivor's flush moved from %s to %s while recover ran (a "
                           "compute?): stop every compute and run recover again",
                           lsn_format(s->flush, a), lsn_format(st.flush_lsn, b));
    }
    for (uint64_t segno = s->first_segno; segno <= s->last_segno; segno++)
        if (install_segment(s, tl_dir, segno, err) != 0)
            return -1;
    /* The flush stays F: the restart scan starts there and reads the new
     * segments record by record, CRCs included, to the end of WAL.  The
     * commit is the seed end: the segments are committed WAL, and an
     * acceptor refuses any truncation below its commit. */
    st.commit_lsn = s->end;
    int rc = sk_control_write(tl_dir, &st);
    if (rc == 0)
        rc = durable_fsync_dir(tl_dir);
    return rc == 0 ? 0
                   : cli_err_set(err, "write the control file in %s: %s", tl_dir, strerror(-rc));
}

/* ---- quarantine ------------------------------------------------------ */

static int quarantine_one(remote_storage *rs, const cluster *c, uint32_t seg_size, uint64_t segno,
                          const char *key, cli_err *err)
{
    char to[512];
    wal_key(c, SK_RECOVER_QUARANTINE_DIR, seg_size, segno, to, sizeof to);
    void *body = NULL;
    size_t len = 0;
    remote_err rerr = {{0}};
    int rc = remote_get_buf(rs, key, (size_t)seg_size * 2, &body, &len, &rerr);
    if (rc == 0)
        rc = remote_put_buf(rs, to, body, len, &rerr);
    free(body);
    /* Deleted only once the copy is in place: a failure keeps both. */
    if (rc == 0)
        rc = remote_delete(rs, key, &rerr);
    return rc == 0 ? 0 : cli_err_set(err, "move %s to %s: %s", key, to, rerr.msg);
}

int sk_recover_quarantine(remote_storage *rs, const cluster *c, uint32_t seg_size, lsn_t end,
                          int *moved, cli_err *err)
{
    *moved = 0;
    char prefix[256];
    remote_listing l;
    if (list_timeline(rs, c, "wal", prefix, sizeof prefix, &l, err) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        uint64_t segno;
        if (!parse_wal_key(prefix, l.entries[i].key, seg_size, &segno) ||
            (segno + 1) * seg_size <= end)
            continue;
        rc = quarantine_one(rs, c, seg_size, segno, l.entries[i].key, err);
        if (rc == 0)
            (*moved)++;
    }
    remote_listing_free(&l);
    return rc;
}
