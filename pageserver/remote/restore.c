/*
 * restore.c: a timeline rebuilt from object storage (restore.h).
 *
 * For: listing the timelines a store holds and building one timeline's
 * directory from its newest manifest: download, check, rebuild, record the
 * upload state, write the timeline's own files.
 * Not for: where the directory goes or who may read it meanwhile (tenants.c).
 */
#include "pageserver/remote/restore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/remote/manifest.h"
#include "pageserver/store/store_datafile.h"
#include "pageserver/timeline/files.h"

#define TENANTS_PREFIX "tenants/"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "tenants/<32 hex>/timelines/<32 hex>/manifest/..." -> the two ids. */
static bool parse_manifest_key(const char *key, restore_timeline_id *out)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *p = key + strlen(TENANTS_PREFIX);
    if (strncmp(key, TENANTS_PREFIX, strlen(TENANTS_PREFIX)) != 0 || strlen(p) < 32 + 11 + 32 + 10)
        return false;
    memcpy(t, p, 32);
    t[32] = '\0';
    p += 32;
    if (strncmp(p, "/timelines/", 11) != 0)
        return false;
    p += 11;
    memcpy(l, p, 32);
    l[32] = '\0';
    p += 32;
    return strncmp(p, "/manifest/", 10) == 0 && strata_id_parse(t, &out->tenant) &&
           strata_id_parse(l, &out->timeline);
}

int restore_list_timelines(remote_storage *rs, restore_timeline_id **out, size_t *n, char *err,
                           size_t errlen)
{
    *out = NULL;
    *n = 0;
    remote_listing l;
    remote_err re;
    if (remote_list(rs, TENANTS_PREFIX, &l, &re) != 0) {
        snprintf(err, errlen, "%s", re.msg);
        return -1;
    }
    restore_timeline_id *ids = calloc(l.n ? l.n : 1, sizeof *ids);
    if (ids == NULL) {
        remote_listing_free(&l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < l.n; i++) {
        restore_timeline_id id;
        if (!parse_manifest_key(l.entries[i].key, &id))
            continue;
        /* Keys are sorted: a timeline's manifests are adjacent. */
        if (k > 0 && strata_id_equal(&ids[k - 1].tenant, &id.tenant) &&
            strata_id_equal(&ids[k - 1].timeline, &id.timeline))
            continue;
        ids[k++] = id;
    }
    remote_listing_free(&l);
    *out = ids;
    *n = k;
    return 0;
}

/* Downloads every data file of m into data_dir, checking sizes.  0 or -1. */
static int download_files(remote_storage *rs, const manifest *m, const char *data_dir,
                          const char *name, restore_progress *p, char *err, size_t errlen)
{
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        total += m->files[i].size;
    atomic_store(&p->files_total, m->n_files);
    atomic_store(&p->bytes_total, total);
    int64_t t0 = mono_ms(), last_log = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        if (atomic_load(&p->cancel)) {
            snprintf(err, errlen, "restore cancelled (pageserver stopping)");
            return -1;
        }
        char key[MANIFEST_KEY_LEN], path[4400];
        manifest_data_key(&m->tenant, &m->timeline, m->files[i].id, key, sizeof key);
        store_df_path(data_dir, m->files[i].id, path, sizeof path);
        remote_err re;
        if (remote_get_file(rs, key, path, &re) != 0) {
            snprintf(err, errlen, "download data file: %s", re.msg);
            return -1;
        }
        struct stat sb;
        if (stat(path, &sb) != 0 || (uint64_t)sb.st_size != m->files[i].size) {
            snprintf(err, errlen, "%s is %lld bytes, manifest %llu says %llu", key,
                     (long long)(stat(path, &sb) == 0 ? sb.st_size : -1),
                     (unsigned long long)m->seq, (unsigned long long)m->files[i].size);
            return -1;
        }
        uint64_t done = atomic_fetch_add(&p->bytes_done, m->files[i].size) + m->files[i].size;
        atomic_fetch_add(&p->files_done, 1);
        if (p->on_progress != NULL)
            p->on_progress(p->progress_arg);
        int64_t now = mono_ms();
        if (now - last_log >= 1000 || i + 1 == m->n_files) {
            double secs = (double)(now - t0) / 1000.0;
            log_info("restore %s: files %zu/%zu, %.1f of %.1f MB, %.1f MB/s", name, i + 1,
                     m->n_files, (double)done / 1e6, (double)total / 1e6,
                     secs > 0 ? (double)done / 1e6 / secs : 0.0);
            last_log = now;
        }
    }
    return 0;
}

/* The rebuilt store records the manifest as its newest durable upload, so
 * the uploader continues with seq + 1 and tells the safekeepers its LSN. */
static int record_remote_state(const char *store_dir, const store_options *so, const manifest *m,
                               char *err, size_t errlen)
{
    store *st = NULL;
    if (store_open(store_dir, so, &st, err, errlen) != 0)
        return -1;
    int rc = store_set_remote_state(st, m->consistent_lsn, m->seq, err, errlen);
    STRATA_ASSERT(rc != 0 || store_disk_consistent_lsn(st) == m->consistent_lsn);
    store_close(st);
    return rc;
}

int restore_timeline(remote_storage *rs, const strata_id *tenant, const strata_id *timeline,
                     const char *dir, const store_options *so, restore_progress *p, lsn_t *out_lsn,
                     char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN], name[80], lb[LSN_FMT_LEN];
    snprintf(name, sizeof name, "%s/%s", strata_id_format(tenant, a),
             strata_id_format(timeline, b));
    atomic_store(&p->started_ms, mono_ms());
    manifest m;
    char merr[512];
    int rc = manifest_fetch_newest(rs, tenant, timeline, &m, merr, sizeof merr);
    if (rc != 0) {
        snprintf(err, errlen, "newest manifest: %s", merr);
        return -1;
    }
    atomic_store(&p->consistent_lsn, m.consistent_lsn);
    atomic_store(&p->seq, m.seq);
    log_info("restore %s: manifest %llu, %zu data files, consistent at %s", name,
             (unsigned long long)m.seq, m.n_files, lsn_format(m.consistent_lsn, lb));
    char store_dir[4200], data_dir[4300];
    snprintf(store_dir, sizeof store_dir, "%s/%s", dir, TIMELINE_STORE_DIR);
    snprintf(data_dir, sizeof data_dir, "%s/data", store_dir);
    int ret = -1;
    if (mkdir(store_dir, 0700) != 0 || mkdir(data_dir, 0700) != 0) {
        snprintf(err, errlen, "create %s: %s", data_dir, strerror(errno));
        goto out;
    }
    if (download_files(rs, &m, data_dir, name, p, err, errlen) != 0)
        goto out;
    store_rebuild_stats rs_stats;
    if (store_rebuild(store_dir, so, m.consistent_lsn, m.next_file_id, &rs_stats, err, errlen) !=
            0 ||
        record_remote_state(store_dir, so, &m, err, errlen) != 0)
        goto out;
    timeline_meta meta = {.tenant = *tenant, .timeline = *timeline, .start_lsn = m.start_lsn};
    meta.n_safekeepers = m.n_safekeepers;
    for (int i = 0; i < m.n_safekeepers; i++)
        snprintf(meta.safekeepers[i], TIMELINE_SAFEKEEPER_LEN, "%s", m.safekeepers[i]);
    meta.has_ancestor = m.has_ancestor;
    meta.ancestor_timeline = m.ancestor_timeline;
    meta.ancestor_lsn = m.ancestor_lsn;
    if (timeline_write_files(dir, &meta, m.gc_horizon, err, errlen) != 0)
        goto out;
    double secs = (double)(mono_ms() - atomic_load(&p->started_ms)) / 1000.0;
    log_info("restore %s: done in %.1f s: %zu files, %.1f MB, %llu entries; resuming WAL at %s",
             name, secs, m.n_files, (double)rs_stats.file_bytes / 1e6,
             (unsigned long long)rs_stats.entries, lsn_format(m.consistent_lsn, lb));
    *out_lsn = m.consistent_lsn;
    ret = 0;
out:
    manifest_free(&m);
    return ret;
}

/* Deletes every key under prefix.  0 or -1 with err. */
static int delete_prefix(remote_storage *rs, const char *prefix, char *err, size_t errlen)
{
    remote_listing l;
    remote_err re;
    if (remote_list(rs, prefix, &l, &re) != 0) {
        snprintf(err, errlen, "%s", re.msg);
        return -1;
    }
    const char **keys = calloc(l.n ? l.n : 1, sizeof *keys);
    int rc = 0;
    if (keys == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    } else {
        for (size_t i = 0; i < l.n; i++)
            keys[i] = l.entries[i].key;
        if (l.n > 0 && remote_delete_many(rs, keys, l.n, &re) != 0) {
            snprintf(err, errlen, "%s", re.msg);
            rc = -1;
        }
    }
    free(keys);
    remote_listing_free(&l);
    return rc;
}

int restore_forget_timeline(remote_storage *rs, const strata_id *tenant, const strata_id *timeline,
                            char *err, size_t errlen)
{
    char prefix[MANIFEST_KEY_LEN];
    manifest_prefix(tenant, timeline, prefix, sizeof prefix);
    if (delete_prefix(rs, prefix, err, errlen) != 0)
        return -1;
    manifest_data_prefix(tenant, timeline, prefix, sizeof prefix);
    if (delete_prefix(rs, prefix, err, errlen) != 0)
        return -1;
    manifest_wal_prefix(tenant, timeline, prefix, sizeof prefix);
    return delete_prefix(rs, prefix, err, errlen);
}
