/*
 * tenants_create.c: creating a timeline (tenants.h tenants_create_timeline):
 * an import of a data directory, a fresh initdb run (as the unprivileged
 * user, with the patched build) imported the same way, or a branch of a
 * loaded timeline at an LSN or a time.
 *
 * The timeline is built in <timeline>.creating and renamed into place
 * durably, then opened; a busy entry of the table holds its id meanwhile,
 * and a branch point is registered with the ancestor before anything is
 * built (so GC keeps it), released again when creation fails.
 *
 * For: checking the request, running initdb, building and opening.
 * Not for: the table, loading, deleting (tenants.c), what a timeline's
 * directory holds (timeline.h, files.h).
 */
#include "pageserver/timeline/tenants.h"
#include "pageserver/timeline/tenants_priv.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/log.h"

/*
 * Runs argv (argv[0] absolute) with stdout and stderr to logpath, as user
 * when we are root, waiting at most timeout_s.  0 or -1 with err.
 */
static int run_as(char *const argv[], const char *logpath, const char *user, uint32_t timeout_s,
                  char *err, size_t errlen)
{
    uid_t uid = 0;
    gid_t gid = 0;
    bool drop = geteuid() == 0;
    if (drop) {
        struct passwd *pw = getpwnam(user);
        if (pw == NULL)
            return tenants_fail(NULL, 500, err, errlen, "user \"%s\" does not exist", user);
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0)
        return tenants_fail(NULL, 500, err, errlen, "cannot create %s: %s", logpath,
                            strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(logfd);
        return tenants_fail(NULL, 500, err, errlen, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (drop && (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
            dprintf(STDERR_FILENO, "cannot become user %s: %s\n", user, strerror(errno));
            _exit(126);
        }
        execv(argv[0], argv);
        dprintf(STDERR_FILENO, "cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(logfd);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int wstatus = 0;
    for (;;) {
        pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return tenants_fail(NULL, 500, err, errlen, "waitpid: %s", strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > (time_t)timeout_s) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
                ;
            return tenants_fail(NULL, 500, err, errlen, "%s did not finish within %u s; see %s",
                                argv[0], timeout_s, logpath);
        }
        usleep(20000);
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        return 0;
    /* The log's last line is usually the reason. */
    char tail[256] = "";
    FILE *f = fopen(logpath, "r");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof line, f) != NULL) {
            if (line[0] != '\n')
                snprintf(tail, sizeof tail, "%s", line);
        }
        fclose(f);
        tail[strcspn(tail, "\n")] = '\0';
    }
    if (WIFEXITED(wstatus))
        return tenants_fail(NULL, 500, err, errlen, "%s exited with status %d: %s", argv[0],
                            WEXITSTATUS(wstatus), tail);
    return tenants_fail(NULL, 500, err, errlen, "%s was killed by signal %d", argv[0],
                        WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
}

/* Runs the patched initdb into a fresh temporary directory; *tmpdir is the
 * directory to remove afterwards, pgdata inside it the result. */
static int run_initdb(tenants *t, char *tmpdir, size_t tmplen, char *pgdata, size_t pglen,
                      char *err, size_t errlen)
{
    if (t->pg_bindir[0] == '\0')
        return tenants_fail(NULL, 500, err, errlen,
                            "initdb needs the patched Postgres build: start the pageserver with "
                            "--pg-bindir");
    char initdb[PATH_MAX];
    if (!tenants_path_fmt(initdb, sizeof initdb, "%s/initdb", t->pg_bindir))
        return tenants_fail(NULL, 500, err, errlen, "--pg-bindir is too long");
    if (access(initdb, X_OK) != 0)
        return tenants_fail(NULL, 500, err, errlen, "cannot execute %s: %s", initdb,
                            strerror(errno));
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, tmplen, "%s/strata-initdb-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return tenants_fail(NULL, 500, err, errlen, "mkdtemp %s: %s", tmpdir, strerror(errno));
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam(t->run_as_user);
        if (pw == NULL || chown(tmpdir, pw->pw_uid, pw->pw_gid) != 0) {
            tenants_fail(NULL, 500, err, errlen, "cannot give %s to user %s: %s", tmpdir,
                         t->run_as_user, pw == NULL ? "no such user" : strerror(errno));
            tenants_remove_tree(tmpdir);
            return -1;
        }
    }
    char logpath[PATH_MAX];
    if (!tenants_path_fmt(pgdata, pglen, "%s/pgdata", tmpdir) ||
        !tenants_path_fmt(logpath, sizeof logpath, "%s/initdb.log", tmpdir)) {
        tenants_fail(NULL, 500, err, errlen, "temporary directory path too long: %s", tmpdir);
        tenants_remove_tree(tmpdir);
        return -1;
    }
    char *argv[] = {initdb, "-D",         pgdata,      "--auth=trust",      "-E",
                    "UTF8", "--locale=C", "--no-sync", "--no-instructions", NULL};
    if (run_as(argv, logpath, t->run_as_user, t->initdb_timeout_s, err, errlen) != 0) {
        tenants_remove_tree(tmpdir);
        return -1;
    }
    return 0;
}

/* Imports the request's data directory (or a fresh initdb run, in tmpdir,
 * which the caller removes) into building.  0, or -1 with *code. */
static int build_import(tenants *t, const tenants_create_request *req, const char *building,
                        timeline_meta *meta, char *tmpdir, size_t tmplen, lsn_t *lsn, int *code,
                        char *err, size_t errlen)
{
    char pgdata[PATH_MAX];
    struct stat sb;
    const char *source = req->import_pgdata;
    if (req->initdb) {
        if (run_initdb(t, tmpdir, tmplen, pgdata, sizeof pgdata, err, errlen) != 0)
            return -1;
        source = pgdata;
    } else if (stat(source, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        return tenants_fail(code, 400, err, errlen, "import_pgdata %s is not a directory", source);
    }
    if (timeline_build_from_pgdata(building, meta, source, &t->svc, lsn, err, errlen) != 0) {
        /* A directory that is not a clean Postgres data directory is the
         * caller's mistake; everything else is ours. */
        *code = req->initdb ? 500 : 400;
        return -1;
    }
    return 0;
}

/* True while a deleted timeline of that id is being torn down (its
 * .deleting directory is removed last). */
static bool deleting_in_progress(const tenants *t, const strata_id *tenant, const strata_id *tl)
{
    char gone[PATH_MAX];
    struct stat sb;
    return tenants_timeline_path(t, tenant, tl, DELETING_SUFFIX, gone, sizeof gone) &&
           stat(gone, &sb) == 0;
}

/* A branch's LSN from the request (rounded down to 8 bytes), checked
 * against the ancestor's readable window.  0, or -1 with *code. */
static int branch_lsn(timeline *anc, const tenants_create_request *req, lsn_t *out, int *code,
                      char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN], lo_b[LSN_FMT_LEN], hi_b[LSN_FMT_LEN],
        hb[LSN_FMT_LEN], tb[48] = "";
    strata_id_format(&req->ancestor, a);
    lsn_t lo, hi, lsn = LSN_INVALID;
    timeline_readable_window(anc, &lo, &hi);
    if (req->ancestor_time != NULL) {
        pg_timestamp when, ct;
        bool latest;
        if (!timeline_parse_time(req->ancestor_time, &when))
            return tenants_fail(code, 400, err, errlen,
                                "invalid ancestor_time \"%s\": expected an ISO 8601 / RFC 3339 "
                                "timestamp such as 2026-12-02 05:00:00+00 or 2026-12-02T05:00:00Z",
                                req->ancestor_time);
        if (timeline_lsn_by_time(anc, when, &lsn, &ct, &latest, code, err, errlen) != 0)
            return -1;
        snprintf(tb, sizeof tb, "time %s resolves to ", req->ancestor_time);
    } else {
        lsn = req->ancestor_lsn != LSN_INVALID ? req->ancestor_lsn : hi;
    }
    lsn &= ~(lsn_t)7;
    if (lsn < lo || lsn > hi) {
        lsn_t h = timeline_gc_horizon(anc);
        return tenants_fail(
            code, 400, err, errlen,
            "%sLSN %s is outside the readable window %s..%s of timeline %s (GC horizon "
            "%s, last record %s)",
            tb, lsn_format(lsn, lb), lsn_format(lo, lo_b), lsn_format(hi, hi_b), a,
            lsn_format(h, hb), lsn_format(hi, hi_b));
    }
    *out = lsn;
    return 0;
}

/* Resolves a branch request: the ancestor (a new reference in *anc), the
 * branch point (registered with the ancestor, so GC keeps it from now on)
 * and the child's timeline.json fields.  0, or -1 with *code. */
static int prepare_branch(tenants *t, const strata_id *tenant, const strata_id *tlid,
                          const tenants_create_request *req, timeline_meta *meta, timeline **anc,
                          int *code, char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    if (strata_id_equal(&req->ancestor, tlid))
        return tenants_fail(code, 400, err, errlen, "a timeline cannot be its own ancestor");
    *anc = tenants_get(t, tenant, &req->ancestor);
    if (*anc == NULL)
        return tenants_fail(code, 404, err, errlen,
                            "ancestor timeline %s not found in tenant %s on this pageserver",
                            strata_id_format(&req->ancestor, a), strata_id_format(tenant, b));
    lsn_t lsn = LSN_INVALID;
    if (branch_lsn(*anc, req, &lsn, code, err, errlen) != 0)
        return -1;
    /* Registered before anything is built: a GC pass from now on keeps it. */
    if (timeline_add_branch(*anc, tlid, lsn, err, errlen) != 0) {
        *code = 400;
        return -1;
    }
    meta->has_ancestor = true;
    meta->ancestor_timeline = req->ancestor;
    meta->ancestor_lsn = lsn;
    meta->start_lsn = lsn;
    return 0;
}

/* The request's own checks, and timeline.json's fields it gives (ids,
 * safekeepers).  0, or -1 with *status 400. */
static int check_request(const tenants_create_request *req, timeline_meta *meta, int *status,
                         char *err, size_t errlen)
{
    if (req->has_ancestor && (req->import_pgdata != NULL || req->initdb))
        return tenants_fail(status, 400, err, errlen,
                            "a branch (\"ancestor_timeline_id\") takes neither \"import_pgdata\" "
                            "nor \"initdb\"");
    if (!req->has_ancestor && (req->import_pgdata != NULL) == req->initdb)
        return tenants_fail(status, 400, err, errlen,
                            "give exactly one of \"import_pgdata\" (a directory), \"initdb\": "
                            "true and \"ancestor_timeline_id\"");
    if (req->ancestor_lsn != LSN_INVALID && req->ancestor_time != NULL)
        return tenants_fail(status, 400, err, errlen,
                            "give at most one of \"ancestor_lsn\" and \"ancestor_time\"");
    if (!req->has_ancestor && (req->ancestor_lsn != LSN_INVALID || req->ancestor_time != NULL))
        return tenants_fail(status, 400, err, errlen,
                            "\"ancestor_lsn\" and \"ancestor_time\" need "
                            "\"ancestor_timeline_id\"");
    if (req->n_safekeepers < 0 || req->n_safekeepers > TIMELINE_MAX_SAFEKEEPERS)
        return tenants_fail(status, 400, err, errlen, "at most %d safekeepers",
                            TIMELINE_MAX_SAFEKEEPERS);
    for (int i = 0; i < req->n_safekeepers; i++) {
        const char *s = req->safekeepers[i];
        const char *colon = s ? strrchr(s, ':') : NULL;
        if (s == NULL || colon == NULL || colon == s || colon[1] == '\0' ||
            strlen(s) >= TIMELINE_SAFEKEEPER_LEN ||
            strspn(colon + 1, "0123456789") != strlen(colon + 1))
            return tenants_fail(status, 400, err, errlen,
                                "safekeeper address \"%s\" is not HOST:PORT", s ? s : "(null)");
        snprintf(meta->safekeepers[meta->n_safekeepers++], TIMELINE_SAFEKEEPER_LEN, "%s", s);
    }
    return 0;
}

/* Inserts the busy entry that holds (tenant, tlid) while it is created.
 * 0, or -1 with *status 409 when the id is taken (loaded, or known but not
 * loaded) or the table is full. */
static int claim_entry(tenants *t, const strata_id *tenant, const strata_id *tlid, int *status,
                       char *err, size_t errlen)
{
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, tenant, tlid);
    bool absent = tenants_find_absent(t, tenant, tlid) >= 0;
    bool full = t->n == TENANTS_MAX_TIMELINES ||
                (tenants_find_tenant(t, tenant) < 0 && t->ntenants == TENANTS_MAX_TENANTS);
    if (i < 0 && !full && !absent)
        t->entries[t->n++] = (tenants_entry){.tenant = *tenant, .timeline = *tlid, .busy = true};
    pthread_mutex_unlock(&t->mu);
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    strata_id_format(tenant, a);
    strata_id_format(tlid, b);
    if (i >= 0)
        return tenants_fail(status, 409, err, errlen, "tenant %s timeline %s already exists", a, b);
    if (absent)
        return tenants_fail(status, 409, err, errlen,
                            "tenant %s timeline %s exists but is not loaded (see /v1/status)", a,
                            b);
    if (full)
        return tenants_fail(status, 409, err, errlen, "this pageserver already has %d timelines",
                            TENANTS_MAX_TIMELINES);
    return 0;
}

/* Where a timeline is built and where it goes. */
typedef struct create_paths {
    char final[PATH_MAX], building[PATH_MAX], tmpdir[PATH_MAX];
} create_paths;

/* Builds the claimed timeline in p->building, renames it to p->final and
 * opens it into *tl; a branch's ancestor (a reference) is left in *anc for
 * the caller.  Returns the HTTP status: 201, or another with err. */
static int build_and_open(tenants *t, const strata_id *tenant, const strata_id *tlid,
                          const tenants_create_request *req, timeline_meta *meta, create_paths *p,
                          timeline **anc, timeline **tl, lsn_t *lsn, char *err, size_t errlen)
{
    int code = 500;
    tenants_remove_tree(p->building);
    struct stat sb;
    if (stat(p->final, &sb) == 0) {
        tenants_fail(&code, 409, err, errlen,
                     "%s exists on disk but is not loaded; remove it first", p->final);
        return code;
    }
    /* The reaper has not finished a deletion of the same id: its last step
     * deletes the id's objects in the remote store, which would take the
     * new timeline's uploads with them. */
    if (deleting_in_progress(t, tenant, tlid)) {
        char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
        tenants_fail(&code, 409, err, errlen,
                     "tenant %s timeline %s is still being deleted; try again",
                     strata_id_format(tenant, a), strata_id_format(tlid, b));
        return code;
    }
    int mrc = durable_mkdir_p(p->building, 0755);
    if (mrc != 0) {
        tenants_fail(NULL, 0, err, errlen, "cannot create %s: %s", p->building, strerror(-mrc));
        return code;
    }
    if (req->has_ancestor) {
        if (prepare_branch(t, tenant, tlid, req, meta, anc, &code, err, errlen) != 0 ||
            timeline_build_branch(p->building, meta, &t->svc, err, errlen) != 0)
            return code;
        *lsn = meta->start_lsn;
    } else if (build_import(t, req, p->building, meta, p->tmpdir, sizeof p->tmpdir, lsn, &code, err,
                            errlen) != 0) {
        return code;
    }
    int rc = durable_rename(p->building, p->final);
    if (rc == 0)
        rc = durable_fsync_parent(p->final);
    if (rc != 0) {
        tenants_fail(NULL, 0, err, errlen, "cannot rename %s to %s: %s", p->building, p->final,
                     strerror(-rc));
        return code;
    }
    if (timeline_open(p->final, &t->svc, atomic_fetch_add(&t->next_owner, 1), *anc, tl, err,
                      errlen) != 0)
        return code;
    return 201;
}

int tenants_create_timeline(tenants *t, const strata_id *tenant, const strata_id *tlid,
                            const tenants_create_request *req, lsn_t *out_lsn, int *status,
                            char *err, size_t errlen)
{
    timeline_meta meta = {.tenant = *tenant, .timeline = *tlid};
    if (check_request(req, &meta, status, err, errlen) != 0)
        return -1;
    create_paths p = {.tmpdir = ""};
    if (!tenants_timeline_path(t, tenant, tlid, "", p.final, sizeof p.final) ||
        !tenants_timeline_path(t, tenant, tlid, CREATING_SUFFIX, p.building, sizeof p.building))
        return tenants_fail(status, 500, err, errlen, "timeline path too long under %s",
                            t->datadir);
    if (claim_entry(t, tenant, tlid, status, err, errlen) != 0)
        return -1;

    timeline *tl = NULL, *anc = NULL;
    lsn_t lsn = LSN_INVALID;
    int code = build_and_open(t, tenant, tlid, req, &meta, &p, &anc, &tl, &lsn, err, errlen);
    if (anc != NULL) {
        if (code != 201)
            timeline_remove_branch(anc, tlid);
        timeline_unref(anc);
    }
    if (p.tmpdir[0] != '\0')
        tenants_remove_tree(p.tmpdir);
    if (code != 201)
        tenants_remove_tree(p.building);
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, tenant, tlid);
    if (i >= 0 && tl != NULL) {
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        bool added = tenants_add_tenant(t, tenant);
        assert(added); /* room was checked when the entry was inserted */
        (void)added;
    } else if (i >= 0) {
        tenants_remove_at(t, i);
    }
    pthread_mutex_unlock(&t->mu);
    if (status != NULL)
        *status = code;
    if (code != 201)
        return -1;
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
    log_info("created tenant %s timeline %s at %s", strata_id_format(tenant, a),
             strata_id_format(tlid, b), lsn_format(lsn, lb));
    *out_lsn = lsn;
    return 0;
}
