/*
 * manifest.c: encoding, decoding and fetching timeline manifests
 * (manifest.h).
 *
 * For: the exact JSON form of a manifest, a decoder that trusts nothing
 * (the bytes come from an object store anyone with the keys can write),
 * the object keys, and finding the newest manifest.
 * Not for: the upload order or GC (uploader.c).
 *
 * One set of checks (manifest_check) serves both directions: the decoder
 * first turns the JSON into a struct, refusing wrong types and unparsable
 * values, then runs the checks; the encoder runs them before writing.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/strata_assert.h"
#include "pageserver/remote/manifest.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "invalid manifest: %s", msg);
    return -1;
}

void manifest_free(manifest *m)
{
    if (m == NULL)
        return;
    free(m->files);
    memset(m, 0, sizeof *m);
}

/* ---- checks ---- */

static bool safekeeper_ok(const char *s)
{
    size_t n = strnlen(s, TIMELINE_SAFEKEEPER_LEN);
    if (n == 0 || n >= TIMELINE_SAFEKEEPER_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

static int check_files(const manifest *m, char *err, size_t errlen)
{
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    if (m->n_files > 0 && m->files == NULL)
        return fail(err, errlen, "%zu files but no file list", m->n_files);
    for (size_t i = 0; i < m->n_files; i++) {
        const manifest_file *f = &m->files[i];
        if (f->id == 0 || f->id > MANIFEST_MAX_INT)
            return fail(err, errlen, "files[%zu].id %" PRIu64 " is out of range", i, f->id);
        if (f->size > MANIFEST_MAX_INT)
            return fail(err, errlen, "files[%zu].size %" PRIu64 " is out of range", i, f->size);
        if (i > 0 && f->id <= m->files[i - 1].id)
            return fail(err, errlen,
                        "files[%zu].id %" PRIu64 " is not above files[%zu].id %" PRIu64
                        " (ids must be sorted and unique)",
                        i, f->id, i - 1, m->files[i - 1].id);
        if (f->id >= m->next_file_id)
            return fail(err, errlen, "files[%zu].id %" PRIu64 " is not below next_file_id %" PRIu64,
                        i, f->id, m->next_file_id);
        if (f->lsn_min > f->lsn_max)
            return fail(err, errlen, "files[%zu] (id %" PRIu64 "): lsn_min %s > lsn_max %s", i,
                        f->id, lsn_format(f->lsn_min, a), lsn_format(f->lsn_max, b));
    }
    return 0;
}

int manifest_check(const manifest *m, char *err, size_t errlen)
{
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    if (m->seq == 0 || m->seq > MANIFEST_MAX_INT)
        return fail(err, errlen, "seq %" PRIu64 " is out of range (1..2^53-1)", m->seq);
    if (m->next_file_id > MANIFEST_MAX_INT)
        return fail(err, errlen, "next_file_id %" PRIu64 " is out of range", m->next_file_id);
    if (m->gc_horizon > m->consistent_lsn)
        return fail(err, errlen, "gc_horizon %s is above consistent_lsn %s",
                    lsn_format(m->gc_horizon, a), lsn_format(m->consistent_lsn, b));
    if (m->n_safekeepers < 0 || m->n_safekeepers > TIMELINE_MAX_SAFEKEEPERS)
        return fail(err, errlen, "%d safekeepers (at most %d)", m->n_safekeepers,
                    TIMELINE_MAX_SAFEKEEPERS);
    for (int i = 0; i < m->n_safekeepers; i++)
        if (!safekeeper_ok(m->safekeepers[i]))
            return fail(err, errlen,
                        "safekeepers[%d] is empty, longer than %d bytes or has control "
                        "characters",
                        i, TIMELINE_SAFEKEEPER_LEN - 1);
    if (m->has_ancestor && m->ancestor_lsn != m->start_lsn)
        return fail(err, errlen, "ancestor_lsn %s is not start_lsn %s",
                    lsn_format(m->ancestor_lsn, a), lsn_format(m->start_lsn, b));
    if (m->has_ancestor && strata_id_equal(&m->ancestor_timeline, &m->timeline))
        return fail(err, errlen, "ancestor_timeline_id is the timeline itself");
    return check_files(m, err, errlen);
}

/* ---- encoding ---- */

static bool add_lsn(cJSON *o, const char *name, lsn_t lsn)
{
    char buf[LSN_FMT_LEN];
    return cJSON_AddStringToObject(o, name, lsn_format(lsn, buf)) != NULL;
}

/* Integers are written as raw digits: cJSON prints a double with 15
 * significant digits when that compares equal within its tolerance, which
 * loses the last digit of integers near 2^53. */
static bool add_u64(cJSON *o, const char *name, uint64_t v)
{
    STRATA_ASSERT(v <= MANIFEST_MAX_INT); /* manifest_check ran */
    char digits[24];
    snprintf(digits, sizeof digits, "%" PRIu64, v);
    return cJSON_AddRawToObject(o, name, digits) != NULL;
}

static bool add_files(cJSON *o, const manifest *m)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "files");
    if (arr == NULL)
        return false;
    for (size_t i = 0; i < m->n_files; i++) {
        const manifest_file *f = &m->files[i];
        cJSON *e = cJSON_CreateObject();
        if (e == NULL || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return false;
        }
        if (!add_u64(e, "id", f->id) || !add_u64(e, "size", f->size) ||
            !add_lsn(e, "lsn_min", f->lsn_min) || !add_lsn(e, "lsn_max", f->lsn_max))
            return false;
    }
    return true;
}

static cJSON *build_json(const manifest *m)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && add_u64(o, "version", MANIFEST_VERSION) &&
              cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&m->tenant, t)) &&
              cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&m->timeline, l)) &&
              add_u64(o, "seq", m->seq) && add_lsn(o, "consistent_lsn", m->consistent_lsn) &&
              add_lsn(o, "gc_horizon", m->gc_horizon) && add_lsn(o, "start_lsn", m->start_lsn);
    cJSON *sks = ok ? cJSON_AddArrayToObject(o, "safekeepers") : NULL;
    ok = sks != NULL;
    for (int i = 0; ok && i < m->n_safekeepers; i++) {
        cJSON *s = cJSON_CreateString(m->safekeepers[i]);
        ok = s != NULL && cJSON_AddItemToArray(sks, s);
        if (!ok)
            cJSON_Delete(s);
    }
    ok = ok && add_u64(o, "next_file_id", m->next_file_id) && add_files(o, m);
    if (ok && m->has_ancestor)
        ok = cJSON_AddStringToObject(o, "ancestor_timeline_id",
                                     strata_id_format(&m->ancestor_timeline, t)) != NULL &&
             add_lsn(o, "ancestor_lsn", m->ancestor_lsn);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int manifest_encode(const manifest *m, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    if (manifest_check(m, err, errlen) != 0)
        return -1;
    cJSON *o = build_json(m);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (text == NULL) {
        snprintf(err, errlen, "manifest: out of memory encoding %zu files", m->n_files);
        return -1;
    }
    *out = text;
    *len = strlen(text);
    return 0;
}

/* ---- decoding ---- */

static const cJSON *member(const cJSON *o, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static int get_u64(const cJSON *o, const char *ctx, const char *name, uint64_t *out, char *err,
                   size_t errlen)
{
    const cJSON *v = member(o, name);
    if (v == NULL)
        return fail(err, errlen, "%s%s is missing", ctx, name);
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !isfinite(d) || d < 0 || d > (double)MANIFEST_MAX_INT ||
        floor(d) != d)
        return fail(err, errlen, "%s%s is not an integer in 0..2^53-1", ctx, name);
    *out = (uint64_t)d;
    return 0;
}

static int get_lsn(const cJSON *o, const char *ctx, const char *name, lsn_t *out, char *err,
                   size_t errlen)
{
    const cJSON *v = member(o, name);
    if (v == NULL)
        return fail(err, errlen, "%s%s is missing", ctx, name);
    if (!cJSON_IsString(v) || !lsn_parse(v->valuestring, out))
        return fail(err, errlen, "%s%s is not an LSN string \"X/Y\"", ctx, name);
    return 0;
}

static int get_id(const cJSON *o, const char *name, strata_id *out, char *err, size_t errlen)
{
    const cJSON *v = member(o, name);
    if (v == NULL)
        return fail(err, errlen, "%s is missing", name);
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 32 || !strata_id_parse(v->valuestring, out))
        return fail(err, errlen, "%s is not 32 hex digits", name);
    return 0;
}

static int decode_safekeepers(const cJSON *o, manifest *m, char *err, size_t errlen)
{
    const cJSON *arr = member(o, "safekeepers");
    if (arr == NULL)
        return fail(err, errlen, "safekeepers is missing");
    if (!cJSON_IsArray(arr))
        return fail(err, errlen, "safekeepers is not an array");
    int n = cJSON_GetArraySize(arr);
    if (n > TIMELINE_MAX_SAFEKEEPERS)
        return fail(err, errlen, "%d safekeepers (at most %d)", n, TIMELINE_MAX_SAFEKEEPERS);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        int i = m->n_safekeepers;
        if (!cJSON_IsString(e) || !safekeeper_ok(e->valuestring))
            return fail(err, errlen,
                        "safekeepers[%d] is not a non-empty string of at most %d bytes without "
                        "control characters",
                        i, TIMELINE_SAFEKEEPER_LEN - 1);
        strcpy(m->safekeepers[i], e->valuestring);
        m->n_safekeepers++;
    }
    return 0;
}

static int decode_files(const cJSON *o, manifest *m, char *err, size_t errlen)
{
    const cJSON *arr = member(o, "files");
    if (arr == NULL)
        return fail(err, errlen, "files is missing");
    if (!cJSON_IsArray(arr))
        return fail(err, errlen, "files is not an array");
    int n = cJSON_GetArraySize(arr);
    m->files = calloc(n > 0 ? (size_t)n : 1, sizeof *m->files);
    if (m->files == NULL) {
        snprintf(err, errlen, "manifest: out of memory for %d files", n);
        return -1;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "files[%zu].", m->n_files);
        if (!cJSON_IsObject(e))
            return fail(err, errlen, "files[%zu] is not an object", m->n_files);
        manifest_file *f = &m->files[m->n_files];
        if (get_u64(e, ctx, "id", &f->id, err, errlen) != 0 ||
            get_u64(e, ctx, "size", &f->size, err, errlen) != 0 ||
            get_lsn(e, ctx, "lsn_min", &f->lsn_min, err, errlen) != 0 ||
            get_lsn(e, ctx, "lsn_max", &f->lsn_max, err, errlen) != 0)
            return -1;
        m->n_files++;
    }
    return 0;
}

/* The optional branch members of a branch: both or neither. */
static int decode_ancestor(const cJSON *o, manifest *m, char *err, size_t errlen)
{
    bool id = member(o, "ancestor_timeline_id") != NULL, lsn = member(o, "ancestor_lsn") != NULL;
    if (!id && !lsn)
        return 0;
    if (id != lsn)
        return fail(err, errlen, "ancestor_timeline_id and ancestor_lsn go together");
    m->has_ancestor = true;
    if (get_id(o, "ancestor_timeline_id", &m->ancestor_timeline, err, errlen) != 0 ||
        get_lsn(o, "", "ancestor_lsn", &m->ancestor_lsn, err, errlen) != 0)
        return -1;
    return 0;
}

static int decode_object(const cJSON *o, manifest *m, char *err, size_t errlen)
{
    uint64_t version;
    if (!cJSON_IsObject(o))
        return fail(err, errlen, "not a JSON object");
    if (get_u64(o, "", "version", &version, err, errlen) != 0)
        return -1;
    if (version != MANIFEST_VERSION)
        return fail(err, errlen, "version %" PRIu64 " (this pageserver reads version %d)", version,
                    MANIFEST_VERSION);
    if (get_id(o, "tenant_id", &m->tenant, err, errlen) != 0 ||
        get_id(o, "timeline_id", &m->timeline, err, errlen) != 0 ||
        get_u64(o, "", "seq", &m->seq, err, errlen) != 0 ||
        get_lsn(o, "", "consistent_lsn", &m->consistent_lsn, err, errlen) != 0 ||
        get_lsn(o, "", "gc_horizon", &m->gc_horizon, err, errlen) != 0 ||
        get_lsn(o, "", "start_lsn", &m->start_lsn, err, errlen) != 0 ||
        decode_safekeepers(o, m, err, errlen) != 0 ||
        get_u64(o, "", "next_file_id", &m->next_file_id, err, errlen) != 0 ||
        decode_files(o, m, err, errlen) != 0 || decode_ancestor(o, m, err, errlen) != 0)
        return -1;
    return manifest_check(m, err, errlen);
}

int manifest_decode(const void *buf, size_t len, manifest *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (len == 0)
        return fail(err, errlen, "empty");
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (o == NULL) {
        /* On failure cJSON points end at the error (not the global error
         * pointer, which other threads' parses may move). */
        size_t off = end != NULL && end >= (const char *)buf && end <= (const char *)buf + len
                         ? (size_t)(end - (const char *)buf)
                         : len;
        return fail(err, errlen, "not valid JSON (error at or near byte %zu of %zu)", off, len);
    }
    /* Exactly one value: only whitespace may follow it. */
    for (const char *p = end; p != NULL && p < (const char *)buf + len; p++)
        if (!isspace((unsigned char)*p)) {
            cJSON_Delete(o);
            return fail(err, errlen, "trailing bytes after the JSON object at byte %zu",
                        (size_t)(p - (const char *)buf));
        }
    int rc = decode_object(o, out, err, errlen);
    cJSON_Delete(o);
    if (rc != 0)
        manifest_free(out);
    return rc;
}

/* ---- keys ---- */

static void timeline_prefix(const strata_id *tenant, const strata_id *timeline, const char *what,
                            char *out, size_t len)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(out, len, "tenants/%s/timelines/%s/%s/", strata_id_format(tenant, t),
             strata_id_format(timeline, l), what);
}

void manifest_prefix(const strata_id *tenant, const strata_id *timeline, char *out, size_t len)
{
    timeline_prefix(tenant, timeline, "manifest", out, len);
}

void manifest_data_prefix(const strata_id *tenant, const strata_id *timeline, char *out, size_t len)
{
    timeline_prefix(tenant, timeline, "data", out, len);
}

void manifest_wal_prefix(const strata_id *tenant, const strata_id *timeline, char *out, size_t len)
{
    timeline_prefix(tenant, timeline, "wal", out, len);
}

void manifest_key(const strata_id *tenant, const strata_id *timeline, uint64_t seq, char *out,
                  size_t len)
{
    char p[MANIFEST_KEY_LEN];
    manifest_prefix(tenant, timeline, p, sizeof p);
    snprintf(out, len, "%s%016" PRIx64 ".json", p, seq);
}

void manifest_data_key(const strata_id *tenant, const strata_id *timeline, uint64_t file_id,
                       char *out, size_t len)
{
    char p[MANIFEST_KEY_LEN];
    manifest_data_prefix(tenant, timeline, p, sizeof p);
    snprintf(out, len, "%s%016" PRIx64 ".dat", p, file_id);
}

/* "<prefix><16 lower-case hex><suffix>" -> the number. */
static bool parse_hex_key(const char *prefix, const char *suffix, const char *key, uint64_t *out)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    if (strncmp(key, prefix, pl) != 0 || strlen(key) != pl + 16 + sl ||
        strcmp(key + pl + 16, suffix) != 0)
        return false;
    uint64_t v = 0;
    for (const char *p = key + pl; p < key + pl + 16; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

bool manifest_key_seq(const char *prefix, const char *key, uint64_t *out)
{
    return parse_hex_key(prefix, ".json", key, out);
}

bool manifest_data_key_id(const char *prefix, const char *key, uint64_t *out)
{
    return parse_hex_key(prefix, ".dat", key, out);
}

/* ---- fetching ---- */

static int newest_seq(remote_storage *rs, const char *prefix, uint64_t *seq, char *err,
                      size_t errlen)
{
    remote_listing l;
    remote_err re;
    int rc = remote_list(rs, prefix, &l, &re);
    if (rc != 0) {
        snprintf(err, errlen, "list %s: %s", prefix, re.msg);
        return rc;
    }
    *seq = 0;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t s;
        if (manifest_key_seq(prefix, l.entries[i].key, &s) && s > *seq)
            *seq = s;
    }
    remote_listing_free(&l);
    return 0;
}

int manifest_fetch_newest(remote_storage *rs, const strata_id *tenant, const strata_id *timeline,
                          manifest *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char prefix[MANIFEST_KEY_LEN], key[MANIFEST_KEY_LEN];
    manifest_prefix(tenant, timeline, prefix, sizeof prefix);
    uint64_t seq;
    int rc = newest_seq(rs, prefix, &seq, err, errlen);
    if (rc != 0)
        return rc;
    if (seq == 0) {
        snprintf(err, errlen, "no manifest under %s in %s", prefix, remote_describe(rs));
        return -ENOENT;
    }
    manifest_key(tenant, timeline, seq, key, sizeof key);
    void *buf = NULL;
    size_t len = 0;
    remote_err re;
    rc = remote_get_buf(rs, key, MANIFEST_MAX_BYTES, &buf, &len, &re);
    if (rc != 0) {
        snprintf(err, errlen, "get %s: %s", key, re.msg);
        return rc;
    }
    char why[512];
    rc = manifest_decode(buf, len, out, why, sizeof why);
    free(buf);
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", key, why);
        return -EPROTO;
    }
    if (!strata_id_equal(&out->tenant, tenant) || !strata_id_equal(&out->timeline, timeline) ||
        out->seq != seq) {
        snprintf(err, errlen, "%s: names tenant, timeline or seq %" PRIu64 " of another object",
                 key, out->seq);
        manifest_free(out);
        return -EPROTO;
    }
    return 0;
}
