/*
 * etcd_json.c: the pure half of etcd.h: base64 and the decoders of etcd 3.4's
 * v3 JSON gateway answers (over cJSON; no IO).
 *
 * For: reading etcd's answers exactly as it sends them (verified on
 * Debian's etcd-server 3.4.23): keys and values in base64, int64 fields as
 * JSON strings, fields at their zero value left out ("succeeded" when a
 * compare failed, "value" when empty, "kvs" when nothing matched,
 * "deleted" when nothing was deleted, "TTL" of a lease that is gone).
 * Every decoder validates before it trusts (tests/unit/test_etcd.c,
 * tests/fuzz/fuzz_etcd.c).
 * Not for: sending requests (etcd.c).
 *
 * A decoder copies the body into a NUL-terminated buffer before cJSON
 * reads it, so a body without a terminator is never read past its end.
 */
#include "net/etcd.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <openssl/evp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"
#include "net/etcd_int.h"

/* The largest integer a JSON number carries exactly (2^53). */
#define JSON_EXACT_INT 9007199254740992.0

int etcd_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* base64 */

size_t etcd_base64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Encoding is OpenSSL's (as remote_s3.c's Content-MD5); decoding below is
 * our own, since EVP_DecodeBlock accepts non-canonical text. */
void etcd_base64_encode(const void *data, size_t n, char *out)
{
    STRATA_ASSERT(n <= INT_MAX / 4 * 3);
    EVP_EncodeBlock((unsigned char *)out, data, (int)n);
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int etcd_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen,
                       const char **why)
{
    *outlen = 0;
    if (len % 4 != 0) {
        *why = "length not a multiple of 4";
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int pad = 0, d[4];
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)in[i + j];
            d[j] = b64_value(c);
            if (c == '=' && last && j >= 2 && (j == 3 || in[i + 3] == '=')) {
                d[j] = 0;
                pad++;
            } else if (d[j] < 0) {
                *why = c == '=' ? "padding in the middle" : "a character outside the alphabet";
                return -1;
            }
        }
        uint32_t v =
            (uint32_t)d[0] << 18 | (uint32_t)d[1] << 12 | (uint32_t)d[2] << 6 | (uint32_t)d[3];
        if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) {
            *why = "unused bits not zero (not canonical)";
            return -1;
        }
        out[o++] = (unsigned char)(v >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(v >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)v;
    }
    *outlen = o;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Reading JSON fields */

void etcd_kv_free(etcd_kv *kv)
{
    if (kv == NULL)
        return;
    free(kv->key);
    free(kv->value);
    *kv = (etcd_kv){0};
}

void etcd_range_free(etcd_range *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        etcd_kv_free(&r->kvs[i]);
    free(r->kvs);
    *r = (etcd_range){0};
}

void etcd_txn_result_free(etcd_txn_result *t)
{
    if (t == NULL)
        return;
    etcd_kv_free(&t->current);
    *t = (etcd_txn_result){0};
}

/* Parses the body's first JSON value, which must be an object; unless
 * first_only, nothing but whitespace may follow it.  NULL and err when the
 * body is empty, too large, not JSON or not an object. */
static cJSON *parse_object(const char *body, size_t len, bool first_only, char *err, size_t errlen)
{
    if (body == NULL || len == 0) {
        etcd_fail(err, errlen, "empty answer");
        return NULL;
    }
    if (len > ETCD_MAX_BODY) {
        etcd_fail(err, errlen, "answer of %zu bytes, more than %u", len, ETCD_MAX_BODY);
        return NULL;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        etcd_fail(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(copy, body, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
    size_t at = end != NULL && end >= copy && end <= copy + len ? (size_t)(end - copy) : len;
    if (root != NULL && !first_only)
        while (at < len && strchr(" \t\r\n", copy[at]) != NULL && copy[at] != '\0')
            at++;
    free(copy);
    if (root == NULL) {
        etcd_fail(err, errlen, "not JSON (syntax error near byte %zu)", at);
        return NULL;
    }
    if (!first_only && at != len) {
        cJSON_Delete(root);
        etcd_fail(err, errlen, "bytes after the JSON object (at byte %zu)", at);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        etcd_fail(err, errlen, "not a JSON object");
        return NULL;
    }
    return root;
}

/* Parses a 64-bit signed decimal integer: an optional '-', then 1 to 19
 * digits with no leading zero (but "0"), in range. */
static int parse_i64(const char *s, int64_t *out)
{
    bool neg = *s == '-';
    const char *p = s + neg;
    size_t n = strlen(p);
    if (n == 0 || n > 19 || (p[0] == '0' && n > 1) || (neg && p[0] == '0'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + neg)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Reads obj.name as a 64-bit integer (a decimal string, as the gateway
 * writes them, or an exact JSON number) in [min, max]; when absent, def if
 * !required.  where prefixes the name in messages ("kvs[2]."). */
static int field_i64(const cJSON *obj, const char *where, const char *name, bool required,
                     int64_t def, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    int64_t v = def;
    if (f == NULL) {
        if (required)
            return etcd_fail(err, errlen, "%s%s missing", where, name);
    } else if (cJSON_IsString(f)) {
        if (parse_i64(f->valuestring, &v) != 0)
            return etcd_fail(err, errlen, "%s%s: not a 64-bit decimal integer", where, name);
    } else if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (!(d >= -JSON_EXACT_INT && d <= JSON_EXACT_INT) || d != (double)(int64_t)d)
            return etcd_fail(err, errlen, "%s%s: not an exact integer", where, name);
        v = (int64_t)d;
    } else {
        return etcd_fail(err, errlen, "%s%s: neither a string nor a number", where, name);
    }
    if (v < min || v > max)
        return etcd_fail(err, errlen, "%s%s: %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]",
                         where, name, v, min, max);
    *out = v;
    return 0;
}

/* Reads obj.name, a boolean; false when absent (the gateway leaves false out). */
static int field_bool(const cJSON *obj, const char *where, const char *name, bool *out, char *err,
                      size_t errlen)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (f != NULL && !cJSON_IsBool(f))
        return etcd_fail(err, errlen, "%s%s: not a boolean", where, name);
    *out = f != NULL && cJSON_IsTrue(f);
    return 0;
}

/* Reads obj.name, base64 of at most max bytes, into *out (malloc'd,
 * NUL-terminated, *outlen bytes before the NUL); absent means empty unless
 * required. */
static int field_bytes(const cJSON *obj, const char *where, const char *name, bool required,
                       size_t max, char **out, size_t *outlen, char *err, size_t errlen)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = NULL;
    *outlen = 0;
    if (f == NULL && required)
        return etcd_fail(err, errlen, "%s%s missing", where, name);
    if (f != NULL && !cJSON_IsString(f))
        return etcd_fail(err, errlen, "%s%s: not a string", where, name);
    const char *s = f != NULL ? f->valuestring : "";
    size_t slen = strlen(s);
    if (slen > etcd_base64_len(max))
        return etcd_fail(err, errlen, "%s%s: longer than %zu bytes", where, name, max);
    unsigned char *buf = malloc(slen / 4 * 3 + 1);
    if (buf == NULL)
        return etcd_fail(err, errlen, "out of memory");
    const char *why = NULL;
    size_t n = 0;
    if (etcd_base64_decode(s, slen, buf, &n, &why) != 0) {
        free(buf);
        return etcd_fail(err, errlen, "%s%s: not base64: %s", where, name, why);
    }
    if (n > max) {
        free(buf);
        return etcd_fail(err, errlen, "%s%s: longer than %zu bytes", where, name, max);
    }
    buf[n] = '\0';
    *out = (char *)buf;
    *outlen = n;
    return 0;
}

/* Reads obj.header.revision (>= 1). */
static int header_revision(const cJSON *obj, const char *where, int64_t *revision, char *err,
                           size_t errlen)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "header");
    if (!cJSON_IsObject(h))
        return etcd_fail(err, errlen, "%sheader missing or not an object", where);
    char at[48];
    snprintf(at, sizeof at, "%sheader.", where);
    return field_i64(h, at, "revision", true, 0, 1, INT64_MAX, revision, err, errlen);
}

/* ------------------------------------------------------------------ */
/* Decoders */

/* One entry of "kvs": every field checked, the key non-empty text. */
static int decode_kv(const cJSON *o, size_t index, etcd_kv *kv, char *err, size_t errlen)
{
    char at[40];
    snprintf(at, sizeof at, "kvs[%zu].", index);
    *kv = (etcd_kv){0};
    if (!cJSON_IsObject(o))
        return etcd_fail(err, errlen, "kvs[%zu]: not an object", index);
    size_t key_len = 0;
    int rc = field_bytes(o, at, "key", true, ETCD_MAX_KEY, &kv->key, &key_len, err, errlen);
    if (rc == 0 && (key_len == 0 || strlen(kv->key) != key_len))
        rc = etcd_fail(err, errlen, "%skey: %s", at, key_len == 0 ? "empty" : "holds a NUL byte");
    if (rc == 0)
        rc = field_bytes(o, at, "value", false, ETCD_MAX_VALUE, &kv->value, &kv->value_len, err,
                         errlen);
    if (rc == 0)
        rc = field_i64(o, at, "create_revision", true, 0, 1, INT64_MAX, &kv->create_revision, err,
                       errlen);
    if (rc == 0)
        rc = field_i64(o, at, "mod_revision", true, 0, kv->create_revision, INT64_MAX,
                       &kv->mod_revision, err, errlen);
    if (rc == 0)
        rc = field_i64(o, at, "version", true, 0, 1, INT64_MAX, &kv->version, err, errlen);
    if (rc == 0)
        rc = field_i64(o, at, "lease", false, 0, 0, INT64_MAX, &kv->lease, err, errlen);
    if (rc != 0)
        etcd_kv_free(kv);
    return rc;
}

/* The fields of a RangeResponse in obj; where names obj in messages. */
static int range_from(const cJSON *obj, const char *where, size_t max_kvs, etcd_range *out,
                      char *err, size_t errlen)
{
    *out = (etcd_range){0};
    if (header_revision(obj, where, &out->revision, err, errlen) != 0 ||
        field_bool(obj, where, "more", &out->more, err, errlen) != 0 ||
        field_i64(obj, where, "count", false, 0, 0, INT64_MAX, &out->count, err, errlen) != 0)
        return -1;
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(obj, "kvs");
    if (kvs != NULL && !cJSON_IsArray(kvs))
        return etcd_fail(err, errlen, "%skvs: not an array", where);
    size_t n = kvs != NULL ? (size_t)cJSON_GetArraySize(kvs) : 0;
    if (n > max_kvs)
        return etcd_fail(err, errlen, "%skvs: %zu entries, at most %zu asked for", where, n,
                         max_kvs);
    /* etcd sets more exactly when count exceeds the entries sent. */
    if ((int64_t)n > out->count || out->more != (out->count > (int64_t)n))
        return etcd_fail(err, errlen, "%skvs: %zu entries, count %" PRId64 " and more %s disagree",
                         where, n, out->count, out->more ? "true" : "false");
    if (n == 0)
        return 0;
    out->kvs = calloc(n, sizeof *out->kvs);
    if (out->kvs == NULL)
        return etcd_fail(err, errlen, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, kvs)
    {
        if (decode_kv(e, out->n, &out->kvs[out->n], err, errlen) != 0)
            goto bad;
        out->n++;
        if (out->n > 1 && strcmp(out->kvs[out->n - 2].key, out->kvs[out->n - 1].key) >= 0) {
            etcd_fail(err, errlen, "%skvs[%zu]: keys not in ascending order", where, out->n - 1);
            goto bad;
        }
    }
    return 0;
bad:
    etcd_range_free(out);
    return -1;
}

int etcd_decode_range(const char *body, size_t len, size_t max_kvs, etcd_range *out, char *err,
                      size_t errlen)
{
    *out = (etcd_range){0};
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    int rc = range_from(root, "", max_kvs, out, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int etcd_decode_header(const char *body, size_t len, int64_t *revision, char *err, size_t errlen)
{
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    int rc = header_revision(root, "", revision, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int etcd_decode_delete(const char *body, size_t len, int64_t *deleted, char *err, size_t errlen)
{
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    int64_t revision = 0;
    int rc = header_revision(root, "", &revision, err, errlen);
    if (rc == 0)
        rc = field_i64(root, "", "deleted", false, 0, 0, INT64_MAX, deleted, err, errlen);
    cJSON_Delete(root);
    return rc;
}

/* The one response of our transaction: a put when it succeeded, a range of
 * at most one key when it did not. */
static int txn_from(const cJSON *root, etcd_txn_result *out, char *err, size_t errlen)
{
    if (header_revision(root, "", &out->revision, err, errlen) != 0 ||
        field_bool(root, "", "succeeded", &out->succeeded, err, errlen) != 0)
        return -1;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "responses");
    if (!cJSON_IsArray(rs) || cJSON_GetArraySize(rs) != 1)
        return etcd_fail(err, errlen, "responses: not an array of one response");
    const cJSON *r = cJSON_GetArrayItem(rs, 0);
    const char *want = out->succeeded ? "response_put" : "response_range";
    const cJSON *inner = cJSON_IsObject(r) ? cJSON_GetObjectItemCaseSensitive(r, want) : NULL;
    if (!cJSON_IsObject(inner))
        return etcd_fail(err, errlen, "responses[0].%s missing (succeeded: %s)", want,
                         out->succeeded ? "true" : "absent");
    if (out->succeeded) {
        int64_t put_revision = 0;
        if (header_revision(inner, "responses[0].response_put.", &put_revision, err, errlen) != 0)
            return -1;
        if (put_revision != out->revision)
            return etcd_fail(err, errlen,
                             "put at revision %" PRId64 " in a transaction at %" PRId64,
                             put_revision, out->revision);
        return 0;
    }
    etcd_range range;
    if (range_from(inner, "responses[0].response_range.", 1, &range, err, errlen) != 0)
        return -1;
    if (range.n == 1) {
        out->current = range.kvs[0];
        range.kvs[0] = (etcd_kv){0};
    }
    etcd_range_free(&range);
    return 0;
}

int etcd_decode_txn(const char *body, size_t len, etcd_txn_result *out, char *err, size_t errlen)
{
    *out = (etcd_txn_result){0};
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    int rc = txn_from(root, out, err, errlen);
    cJSON_Delete(root);
    if (rc != 0)
        etcd_txn_result_free(out);
    return rc;
}

int etcd_decode_lease_grant(const char *body, size_t len, int64_t *id, int64_t *ttl, char *err,
                            size_t errlen)
{
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    int64_t revision = 0;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    int rc = header_revision(root, "", &revision, err, errlen);
    if (rc == 0 && cJSON_IsString(e) && e->valuestring[0] != '\0')
        rc = etcd_fail(err, errlen, "etcd refused the lease: %.200s", e->valuestring);
    if (rc == 0)
        rc = field_i64(root, "", "ID", true, 0, 1, INT64_MAX, id, err, errlen);
    if (rc == 0)
        rc = field_i64(root, "", "TTL", true, 0, 1, ETCD_MAX_TTL, ttl, err, errlen);
    cJSON_Delete(root);
    return rc;
}

void etcd_copy_printable(char *out, size_t cap, const char *s)
{
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < cap; i++)
        out[i] = s[i] >= ' ' && s[i] <= '~' ? s[i] : '?';
    out[i] = '\0';
}

int etcd_decode_keepalive(const char *body, size_t len, int64_t *id, int64_t *ttl, char *err,
                          size_t errlen)
{
    cJSON *root = parse_object(body, len, true, err, errlen);
    if (root == NULL)
        return -1;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "result");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : NULL;
    int rc = 0;
    if (msg != NULL && cJSON_IsString(msg)) {
        char m[200];
        etcd_copy_printable(m, sizeof m, msg->valuestring);
        rc = etcd_fail(err, errlen, "etcd ended the stream: %s", m);
    } else if (!cJSON_IsObject(res)) {
        rc = etcd_fail(err, errlen, "result missing or not an object");
    }
    int64_t revision = 0;
    if (rc == 0)
        rc = header_revision(res, "result.", &revision, err, errlen);
    if (rc == 0)
        rc = field_i64(res, "result.", "ID", true, 0, 1, INT64_MAX, id, err, errlen);
    if (rc == 0)
        rc = field_i64(res, "result.", "TTL", false, 0, 0, ETCD_MAX_TTL, ttl, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int etcd_decode_error(const char *body, size_t len, etcd_error *out, char *err, size_t errlen)
{
    *out = (etcd_error){.code = -1};
    cJSON *root = parse_object(body, len, false, err, errlen);
    if (root == NULL)
        return -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "message");
    if (!cJSON_IsString(m))
        m = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(root, "code");
    int rc = 0;
    if (!cJSON_IsString(m) || m->valuestring[0] == '\0')
        rc = etcd_fail(err, errlen, "no error message");
    else if (code != NULL &&
             (!cJSON_IsNumber(code) || !(code->valuedouble >= 0 && code->valuedouble <= 16) ||
              code->valuedouble != (double)(int)code->valuedouble))
        rc = etcd_fail(err, errlen, "code: not a gRPC status code (0..16)");
    if (rc == 0) {
        etcd_copy_printable(out->message, sizeof out->message, m->valuestring);
        out->code = code != NULL ? (int)code->valuedouble : -1;
    }
    cJSON_Delete(root);
    return rc;
}
