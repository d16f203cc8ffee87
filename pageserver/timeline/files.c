/*
 * files.c: a timeline directory's own files -- timeline.json and the
 * GC-horizon file (files.h).
 *
 * For: their text, parsing and durable writes.
 * Not for: the store's files (store.h), creating or removing the directory
 * (tenants.c), deciding the GC horizon (gc.c).
 */
#include "pageserver/timeline/files.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/durable.h"

#define META_MAX_BYTES (64 * 1024)
#define GC_FILE_MAX 64

/* ---- timeline.json ---- */

char *timeline_meta_to_json(const timeline_meta *m)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN], lsn[LSN_FMT_LEN];
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&m->tenant, t));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&m->timeline, l));
    cJSON_AddStringToObject(o, "start_lsn", lsn_format(m->start_lsn, lsn));
    cJSON *arr = cJSON_AddArrayToObject(o, "safekeepers");
    for (int i = 0; arr != NULL && i < m->n_safekeepers; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(m->safekeepers[i]));
    if (m->has_ancestor) {
        cJSON_AddStringToObject(o, "ancestor_timeline_id",
                                strata_id_format(&m->ancestor_timeline, t));
        cJSON_AddStringToObject(o, "ancestor_lsn", lsn_format(m->ancestor_lsn, lsn));
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

int timeline_meta_write(const char *dir, const timeline_meta *m, char *err, size_t errlen)
{
    char *text = timeline_meta_to_json(m);
    if (text == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, TIMELINE_META_FILE);
    int rc = durable_write_file(path, text, strlen(text), 0600);
    free(text);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
        return -1;
    }
    return 0;
}

/* The optional ancestor fields: both or neither, consistent with start_lsn. */
static bool meta_parse_ancestor(const cJSON *o, timeline_meta *out)
{
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(o, "ancestor_timeline_id");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "ancestor_lsn");
    if (at == NULL && al == NULL)
        return true;
    out->has_ancestor = true;
    return cJSON_IsString(at) && strata_id_parse(at->valuestring, &out->ancestor_timeline) &&
           cJSON_IsString(al) && lsn_parse(al->valuestring, &out->ancestor_lsn) &&
           out->ancestor_lsn == out->start_lsn &&
           !strata_id_equal(&out->ancestor_timeline, &out->timeline);
}

int timeline_meta_parse(const char *text, size_t len, const char *path, timeline_meta *out,
                        char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_ParseWithLength(text, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tenant_id");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "timeline_id");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "start_lsn");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "safekeepers");
    bool ok = o != NULL && cJSON_IsString(t) && strata_id_parse(t->valuestring, &out->tenant) &&
              cJSON_IsString(l) && strata_id_parse(l->valuestring, &out->timeline) &&
              cJSON_IsString(s) && lsn_parse(s->valuestring, &out->start_lsn) &&
              cJSON_IsArray(arr) && cJSON_GetArraySize(arr) <= TIMELINE_MAX_SAFEKEEPERS;
    const cJSON *e;
    const cJSON *walk = ok ? arr : NULL;
    cJSON_ArrayForEach(e, walk)
    {
        if (!cJSON_IsString(e) || strlen(e->valuestring) >= TIMELINE_SAFEKEEPER_LEN) {
            ok = false;
            break;
        }
        strcpy(out->safekeepers[out->n_safekeepers++], e->valuestring);
    }
    if (ok && !meta_parse_ancestor(o, out)) {
        cJSON_Delete(o);
        snprintf(err, errlen,
                 "%s: \"ancestor_timeline_id\" (32 hex digits, not the timeline itself) and "
                 "\"ancestor_lsn\" (X/Y, equal to start_lsn) go together",
                 path);
        return -1;
    }
    cJSON_Delete(o);
    if (!ok) {
        snprintf(err, errlen, "%s is not a valid timeline description", path);
        return -1;
    }
    return 0;
}

int timeline_meta_read(const char *dir, timeline_meta *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, TIMELINE_META_FILE);
    void *buf = NULL;
    size_t len = 0;
    int rc = durable_read_file(path, META_MAX_BYTES, &buf, &len);
    if (rc != 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return -1;
    }
    rc = timeline_meta_parse(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}

/* ---- the GC-horizon file ---- */

int timeline_write_files(const char *dir, const timeline_meta *m, lsn_t gc_horizon, char *err,
                         size_t errlen)
{
    if (timeline_meta_write(dir, m, err, errlen) != 0)
        return -1;
    return gc_horizon == LSN_INVALID ? 0 : timeline_gc_file_write(dir, gc_horizon, err, errlen);
}

int timeline_gc_file_read(const char *dir, lsn_t *out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, TIMELINE_GC_FILE);
    *out = LSN_INVALID;
    void *buf = NULL;
    size_t len = 0;
    int rc = durable_read_file(path, GC_FILE_MAX, &buf, &len);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return -1;
    }
    char text[GC_FILE_MAX + 1];
    memcpy(text, buf, len);
    text[len] = '\0';
    free(buf);
    if (len > 0 && text[len - 1] == '\n')
        text[len - 1] = '\0';
    if (!lsn_parse(text, out)) {
        snprintf(err, errlen, "%s does not hold an LSN", path);
        return -1;
    }
    return 0;
}

int timeline_gc_file_write(const char *dir, lsn_t horizon, char *err, size_t errlen)
{
    char path[PATH_MAX], text[LSN_FMT_LEN + 2], lb[LSN_FMT_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, TIMELINE_GC_FILE);
    int n = snprintf(text, sizeof text, "%s\n", lsn_format(horizon, lb));
    int rc = durable_write_file(path, text, (size_t)n, 0600);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
        return -1;
    }
    return 0;
}

void timeline_store_dir(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", dir, TIMELINE_STORE_DIR);
}
