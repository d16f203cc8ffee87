/*
 * etcd.c: the etcd v3 JSON gateway client of etcd.h: base64, the answer
 * decoders (pure, over cJSON) and the requests (libcurl, one easy handle
 * per client).
 *
 * For: talking to etcd 3.4's gateway exactly as it answers (verified on
 * Debian's etcd-server 3.4.23): keys and values in base64, int64 fields as
 * JSON strings, fields at their zero value left out ("succeeded" when a
 * compare failed, "value" when empty, "kvs" when nothing matched,
 * "deleted" when nothing was deleted, "TTL" of a lease that is gone).
 * Not for: a cache of etcd's state or a retry policy beyond "try the next
 * endpoint when nothing was sent": the callers decide what to do after a
 * failure, since only they know whether a request may be repeated.
 *
 * A decoder copies the body into a NUL-terminated buffer before cJSON
 * reads it, so a body without a terminator is never read past its end.
 */
#include "net/etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"

/* The largest integer a JSON number carries exactly (2^53). */
#define JSON_EXACT_INT 9007199254740992.0
/* etcd's largest lease TTL (its MaxLeaseTTL, 9e9 s). */
#define ETCD_MAX_TTL 9000000000LL

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
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

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t etcd_base64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void etcd_base64_encode(const void *data, size_t n, char *out)
{
    const unsigned char *p = data;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
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
        fail(err, errlen, "empty answer");
        return NULL;
    }
    if (len > ETCD_MAX_BODY) {
        fail(err, errlen, "answer of %zu bytes, more than %u", len, ETCD_MAX_BODY);
        return NULL;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        fail(err, errlen, "out of memory");
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
        fail(err, errlen, "not JSON (syntax error near byte %zu)", at);
        return NULL;
    }
    if (!first_only && at != len) {
        cJSON_Delete(root);
        fail(err, errlen, "bytes after the JSON object (at byte %zu)", at);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fail(err, errlen, "not a JSON object");
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
            return fail(err, errlen, "%s%s missing", where, name);
    } else if (cJSON_IsString(f)) {
        if (parse_i64(f->valuestring, &v) != 0)
            return fail(err, errlen, "%s%s: not a 64-bit decimal integer", where, name);
    } else if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (!(d >= -JSON_EXACT_INT && d <= JSON_EXACT_INT) || d != (double)(int64_t)d)
            return fail(err, errlen, "%s%s: not an exact integer", where, name);
        v = (int64_t)d;
    } else {
        return fail(err, errlen, "%s%s: neither a string nor a number", where, name);
    }
    if (v < min || v > max)
        return fail(err, errlen, "%s%s: %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]", where,
                    name, v, min, max);
    *out = v;
    return 0;
}

/* Reads obj.name, a boolean; false when absent (the gateway leaves false out). */
static int field_bool(const cJSON *obj, const char *where, const char *name, bool *out, char *err,
                      size_t errlen)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (f != NULL && !cJSON_IsBool(f))
        return fail(err, errlen, "%s%s: not a boolean", where, name);
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
        return fail(err, errlen, "%s%s missing", where, name);
    if (f != NULL && !cJSON_IsString(f))
        return fail(err, errlen, "%s%s: not a string", where, name);
    const char *s = f != NULL ? f->valuestring : "";
    size_t slen = strlen(s);
    if (slen > etcd_base64_len(max))
        return fail(err, errlen, "%s%s: longer than %zu bytes", where, name, max);
    unsigned char *buf = malloc(slen / 4 * 3 + 1);
    if (buf == NULL)
        return fail(err, errlen, "out of memory");
    const char *why = NULL;
    size_t n = 0;
    if (etcd_base64_decode(s, slen, buf, &n, &why) != 0) {
        free(buf);
        return fail(err, errlen, "%s%s: not base64: %s", where, name, why);
    }
    if (n > max) {
        free(buf);
        return fail(err, errlen, "%s%s: longer than %zu bytes", where, name, max);
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
        return fail(err, errlen, "%sheader missing or not an object", where);
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
        return fail(err, errlen, "kvs[%zu]: not an object", index);
    size_t key_len = 0;
    int rc = field_bytes(o, at, "key", true, ETCD_MAX_KEY, &kv->key, &key_len, err, errlen);
    if (rc == 0 && (key_len == 0 || strlen(kv->key) != key_len))
        rc = fail(err, errlen, "%skey: %s", at, key_len == 0 ? "empty" : "holds a NUL byte");
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
        return fail(err, errlen, "%skvs: not an array", where);
    size_t n = kvs != NULL ? (size_t)cJSON_GetArraySize(kvs) : 0;
    if (n > max_kvs)
        return fail(err, errlen, "%skvs: %zu entries, at most %zu asked for", where, n, max_kvs);
    /* etcd sets more exactly when count exceeds the entries sent. */
    if ((int64_t)n > out->count || out->more != (out->count > (int64_t)n))
        return fail(err, errlen, "%skvs: %zu entries, count %" PRId64 " and more %s disagree",
                    where, n, out->count, out->more ? "true" : "false");
    if (n == 0)
        return 0;
    out->kvs = calloc(n, sizeof *out->kvs);
    if (out->kvs == NULL)
        return fail(err, errlen, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, kvs)
    {
        if (decode_kv(e, out->n, &out->kvs[out->n], err, errlen) != 0)
            goto bad;
        out->n++;
        if (out->n > 1 && strcmp(out->kvs[out->n - 2].key, out->kvs[out->n - 1].key) >= 0) {
            fail(err, errlen, "%skvs[%zu]: keys not in ascending order", where, out->n - 1);
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
        return fail(err, errlen, "responses: not an array of one response");
    const cJSON *r = cJSON_GetArrayItem(rs, 0);
    const char *want = out->succeeded ? "response_put" : "response_range";
    const cJSON *inner = cJSON_IsObject(r) ? cJSON_GetObjectItemCaseSensitive(r, want) : NULL;
    if (!cJSON_IsObject(inner))
        return fail(err, errlen, "responses[0].%s missing (succeeded: %s)", want,
                    out->succeeded ? "true" : "absent");
    if (out->succeeded) {
        int64_t put_revision = 0;
        if (header_revision(inner, "responses[0].response_put.", &put_revision, err, errlen) != 0)
            return -1;
        if (put_revision != out->revision)
            return fail(err, errlen, "put at revision %" PRId64 " in a transaction at %" PRId64,
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
        rc = fail(err, errlen, "etcd refused the lease: %.200s", e->valuestring);
    if (rc == 0)
        rc = field_i64(root, "", "ID", true, 0, 1, INT64_MAX, id, err, errlen);
    if (rc == 0)
        rc = field_i64(root, "", "TTL", true, 0, 1, ETCD_MAX_TTL, ttl, err, errlen);
    cJSON_Delete(root);
    return rc;
}

/* Copies a message into out[cap], printable ASCII only (others become '?'). */
static void copy_printable(char *out, size_t cap, const char *s)
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
        copy_printable(m, sizeof m, msg->valuestring);
        rc = fail(err, errlen, "etcd ended the stream: %s", m);
    } else if (!cJSON_IsObject(res)) {
        rc = fail(err, errlen, "result missing or not an object");
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
        rc = fail(err, errlen, "no error message");
    else if (code != NULL &&
             (!cJSON_IsNumber(code) || !(code->valuedouble >= 0 && code->valuedouble <= 16) ||
              code->valuedouble != (double)(int)code->valuedouble))
        rc = fail(err, errlen, "code: not a gRPC status code (0..16)");
    if (rc == 0) {
        copy_printable(out->message, sizeof out->message, m->valuestring);
        out->code = code != NULL ? (int)code->valuedouble : -1;
    }
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------------ */
/* The client */

struct etcd_client {
    pthread_mutex_t lock; /* one request at a time on curl */
    CURL *curl;
    char endpoints[ETCD_MAX_ENDPOINTS][ETCD_MAX_ENDPOINT];
    int n_endpoints;
    int current; /* the endpoint tried first: the last one that answered */
    long timeout_ms;
};

/* The answer of one request, and the state of its write callback. */
typedef struct etcd_answer {
    char *body;
    size_t len, cap;
    long status;
    int endpoint;
    bool too_big;
    /* A streamed answer: stop at the end of the first JSON object. */
    bool first_object_only, complete, in_string, escaped;
    int depth;
} etcd_answer;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Finds where the first complete top-level JSON object of a stream ends
 * among the n new bytes at p: their count up to and including its closing
 * brace, or n when it has not ended yet. */
static size_t scan_first_object(etcd_answer *a, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (a->in_string) {
            if (a->escaped)
                a->escaped = false;
            else if (c == '\\')
                a->escaped = true;
            else if (c == '"')
                a->in_string = false;
        } else if (c == '"') {
            a->in_string = true;
        } else if (c == '{' || c == '[') {
            a->depth++;
        } else if ((c == '}' || c == ']') && --a->depth <= 0) {
            a->complete = true;
            return i + 1;
        }
    }
    return n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
    etcd_answer *a = arg;
    size_t n = size * nmemb;
    size_t keep = a->first_object_only ? scan_first_object(a, p, n) : n;
    if (a->len + keep > ETCD_MAX_BODY) {
        a->too_big = true;
        return 0;
    }
    if (a->len + keep + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + keep + 1)
            cap *= 2;
        char *b = realloc(a->body, cap);
        if (b == NULL)
            return 0;
        a->body = b;
        a->cap = cap;
    }
    memcpy(a->body + a->len, p, keep);
    a->len += keep;
    a->body[a->len] = '\0';
    /* Returning less than n ends the transfer: the stream has given its
     * first object. */
    return a->complete ? 0 : n;
}

static void answer_free(etcd_answer *a)
{
    free(a->body);
    *a = (etcd_answer){0};
}

etcd_client *etcd_open(const char *endpoints, int timeout_ms, char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        fail(err, errlen, "etcd: curl_global_init: %s", curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    if (endpoints == NULL || endpoints[0] == '\0' || timeout_ms <= 0) {
        fail(err, errlen, "etcd: %s",
             timeout_ms <= 0 ? "timeout must be positive" : "no endpoints");
        return NULL;
    }
    etcd_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        fail(err, errlen, "etcd: out of memory");
        return NULL;
    }
    c->timeout_ms = timeout_ms;
    for (const char *p = endpoints;;) {
        size_t n = strcspn(p, ",");
        if (c->n_endpoints == ETCD_MAX_ENDPOINTS || n >= ETCD_MAX_ENDPOINT || n <= 7 ||
            strncmp(p, "http://", 7) != 0 || memchr(p + 7, '/', n - 7) != NULL) {
            fail(err, errlen,
                 "etcd: bad endpoint list '%.300s': want 1 to %d comma-separated "
                 "http://HOST:PORT",
                 endpoints, ETCD_MAX_ENDPOINTS);
            etcd_close(c);
            return NULL;
        }
        memcpy(c->endpoints[c->n_endpoints], p, n);
        c->endpoints[c->n_endpoints++][n] = '\0';
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    c->curl = curl_easy_init();
    if (c->curl == NULL || pthread_mutex_init(&c->lock, NULL) != 0) {
        if (c->curl != NULL)
            curl_easy_cleanup(c->curl);
        free(c);
        fail(err, errlen, "etcd: out of memory");
        return NULL;
    }
    return c;
}

void etcd_close(etcd_client *c)
{
    if (c == NULL)
        return;
    if (c->curl != NULL) {
        curl_easy_cleanup(c->curl);
        pthread_mutex_destroy(&c->lock);
    }
    free(c);
}

static int setup_request(etcd_client *c, const char *url, const char *body,
                         struct curl_slist *headers, etcd_answer *a, char *errbuf)
{
    CURL *h = c->curl;
    CURLcode e = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (e == CURLE_OK)                                                                         \
            e = curl_easy_setopt(h, opt, val);                                                     \
    } while (0)
    curl_easy_reset(h);
    SET(CURLOPT_URL, url);
    SET(CURLOPT_PROTOCOLS_STR, "http");
    /* etcd is reached directly: an http_proxy in the environment is not for it. */
    SET(CURLOPT_PROXY, "");
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_POST, 1L);
    SET(CURLOPT_POSTFIELDS, body);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, c->timeout_ms);
    SET(CURLOPT_WRITEFUNCTION, on_write);
    SET(CURLOPT_WRITEDATA, a);
#undef SET
    return e == CURLE_OK ? 0 : -1;
}

/* True when a failed request never reached the server, so another
 * endpoint may be tried without applying anything twice. */
static bool never_sent(CURL *h, CURLcode cc)
{
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST)
        return true;
    long sent = 0;
    return cc == CURLE_OPERATION_TIMEDOUT &&
           curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent == 0;
}

/* Sends body to one endpoint: 0 when an HTTP answer came (any status), 1
 * when nothing reached the server, -1 on any other failure; err says which. */
static int request_one(etcd_client *c, int ep, const char *call, const char *body,
                       struct curl_slist *headers, etcd_answer *a, char *err, size_t errlen)
{
    char url[ETCD_MAX_ENDPOINT + 64], errbuf[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/v3/%s", c->endpoints[ep], call);
    bool stream = a->first_object_only;
    free(a->body);
    *a = (etcd_answer){.first_object_only = stream, .endpoint = ep};
    if (setup_request(c, url, body, headers, a, errbuf) != 0)
        return fail(err, errlen, "etcd %s %s: cannot set up the request", c->endpoints[ep], call);
    CURLcode cc = curl_easy_perform(c->curl);
    if (cc == CURLE_WRITE_ERROR && a->complete)
        cc = CURLE_OK;
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &a->status);
        return 0;
    }
    if (a->too_big)
        return fail(err, errlen, "etcd %s %s: answer larger than %u bytes", c->endpoints[ep], call,
                    ETCD_MAX_BODY);
    fail(err, errlen, "etcd %s %s: %s (%s)", c->endpoints[ep], call, curl_easy_strerror(cc),
         errbuf[0] ? errbuf : "-");
    return never_sent(c->curl, cc) ? 1 : -1;
}

/* Sends the request to the endpoints in turn as etcd.h says: 0 with the
 * answer in *a (any HTTP status), or -1 and err. */
static int request(etcd_client *c, const char *call, const char *body, etcd_answer *a, char *err,
                   size_t errlen)
{
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (headers == NULL)
        return fail(err, errlen, "etcd %s: out of memory", call);
    char tried[ETCD_MAX_ERR] = "", one[ETCD_MAX_ERR];
    size_t used = 0;
    int rc = 1;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_endpoints && rc == 1; i++) {
        int ep = (c->current + i) % c->n_endpoints;
        rc = request_one(c, ep, call, body, headers, a, one, sizeof one);
        if (rc == 0)
            c->current = ep;
        else if (rc == 1 && used < sizeof tried)
            used +=
                (size_t)snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", one);
    }
    pthread_mutex_unlock(&c->lock);
    curl_slist_free_all(headers);
    if (rc == 1)
        return fail(err, errlen, "etcd %s: no endpoint answered: %s", call, tried);
    if (rc < 0)
        return fail(err, errlen, "%s", one);
    return 0;
}

/* The error line of a non-2xx answer. */
static int answer_failed(const etcd_client *c, const char *call, const etcd_answer *a, char *err,
                         size_t errlen)
{
    etcd_error e;
    char why[ETCD_MAX_ERR];
    if (etcd_decode_error(a->body, a->len, &e, why, sizeof why) == 0)
        return fail(err, errlen, "etcd %s %s: HTTP %ld: %s (code %d)", c->endpoints[a->endpoint],
                    call, a->status, e.message, e.code);
    char text[81] = "";
    copy_printable(text, sizeof text, a->body != NULL ? a->body : "");
    return fail(err, errlen, "etcd %s %s: HTTP %ld: %s", c->endpoints[a->endpoint], call, a->status,
                text[0] ? text : "(empty body)");
}

static int bad_answer(const etcd_client *c, const char *call, const etcd_answer *a, const char *why,
                      char *err, size_t errlen)
{
    return fail(err, errlen, "etcd %s %s: bad answer: %s", c->endpoints[a->endpoint], call, why);
}

/* Sends the JSON req (freed here; NULL means out of memory) and checks the
 * answer is a 200: 0 with the body in *a, or -1 and err, a->status the
 * HTTP status of an answer that came and *error_doc (may be NULL) its
 * error document, for callers that accept some failures. */
static int call_json(etcd_client *c, const char *call, cJSON *req, bool stream, etcd_answer *a,
                     etcd_error *error_doc, char *err, size_t errlen)
{
    *a = (etcd_answer){.first_object_only = stream};
    char *body = req != NULL ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (body == NULL)
        return fail(err, errlen, "etcd %s: out of memory", call);
    int rc = request(c, call, body, a, err, errlen);
    cJSON_free(body);
    if (rc == 0 && a->status != 200) {
        char why[ETCD_MAX_ERR];
        if (error_doc != NULL &&
            etcd_decode_error(a->body, a->len, error_doc, why, sizeof why) != 0)
            error_doc->code = -1;
        rc = answer_failed(c, call, a, err, errlen);
    }
    if (rc != 0) {
        long status = a->status;
        answer_free(a);
        a->status = status;
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* Requests */

static bool add_b64(cJSON *o, const char *name, const void *data, size_t n)
{
    char *s = malloc(etcd_base64_len(n) + 1);
    if (s == NULL)
        return false;
    etcd_base64_encode(data, n, s);
    bool ok = cJSON_AddStringToObject(o, name, s) != NULL;
    free(s);
    return ok;
}

static bool add_i64(cJSON *o, const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return cJSON_AddStringToObject(o, name, s) != NULL;
}

static int check_key(const char *call, const char *key, char *err, size_t errlen)
{
    if (key == NULL || key[0] == '\0' || strlen(key) > ETCD_MAX_KEY)
        return fail(err, errlen, "etcd %s: key empty or longer than %d bytes", call, ETCD_MAX_KEY);
    return 0;
}

/* {"key": key} and, for a prefix, the range_end that covers it: the
 * prefix with its last byte below 0xff incremented (trailing 0xff bytes
 * dropped), or "\0" (to the end of the keys) when there is none. */
static cJSON *key_request(const char *key, bool prefix)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !add_b64(o, "key", key, strlen(key))) {
        cJSON_Delete(o);
        return NULL;
    }
    if (!prefix)
        return o;
    size_t n = strlen(key);
    unsigned char end[ETCD_MAX_KEY];
    memcpy(end, key, n);
    while (n > 0 && end[n - 1] == 0xff)
        n--;
    if (n > 0)
        end[n - 1]++;
    else
        end[n++] = 0;
    if (!add_b64(o, "range_end", end, n)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int range_call(etcd_client *c, const char *key, bool prefix, size_t max_kvs, etcd_range *out,
                      char *err, size_t errlen)
{
    const char *call = "kv/range";
    *out = (etcd_range){0};
    if (check_key(call, key, err, errlen) != 0)
        return -1;
    if (max_kvs == 0 || max_kvs > ETCD_MAX_KVS)
        return fail(err, errlen, "etcd %s: limit %zu not in 1..%d", call, max_kvs, ETCD_MAX_KVS);
    cJSON *req = key_request(key, prefix);
    if (req != NULL && !add_i64(req, "limit", (int64_t)max_kvs)) {
        cJSON_Delete(req);
        req = NULL;
    }
    etcd_answer a;
    if (call_json(c, call, req, false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int rc = etcd_decode_range(a.body, a.len, max_kvs, out, why, sizeof why);
    if (rc == 0 && !prefix && out->n == 1 && strcmp(out->kvs[0].key, key) != 0) {
        etcd_range_free(out);
        rc = fail(why, sizeof why, "another key than the one asked for");
    }
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    answer_free(&a);
    return rc;
}

int etcd_get(etcd_client *c, const char *key, etcd_kv *out, char *err, size_t errlen)
{
    etcd_range r;
    *out = (etcd_kv){0};
    if (range_call(c, key, false, 1, &r, err, errlen) != 0)
        return -1;
    int found = r.n == 1;
    if (found) {
        *out = r.kvs[0];
        r.kvs[0] = (etcd_kv){0};
    }
    etcd_range_free(&r);
    return found;
}

int etcd_get_prefix(etcd_client *c, const char *prefix, size_t max_kvs, etcd_range *out, char *err,
                    size_t errlen)
{
    return range_call(c, prefix, true, max_kvs, out, err, errlen);
}

/* The body of a put request (the requestPut of a transaction too). */
static cJSON *put_request(const char *key, const void *value, size_t len, int64_t lease)
{
    cJSON *o = key_request(key, false);
    if (o != NULL &&
        (!add_b64(o, "value", value, len) || (lease != 0 && !add_i64(o, "lease", lease)))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int check_put(const char *call, const char *key, const void *value, size_t len,
                     int64_t lease, char *err, size_t errlen)
{
    if (check_key(call, key, err, errlen) != 0)
        return -1;
    if ((value == NULL && len > 0) || len > ETCD_MAX_VALUE)
        return fail(err, errlen, "etcd %s %s: value missing or longer than %u bytes", call, key,
                    ETCD_MAX_VALUE);
    if (lease < 0)
        return fail(err, errlen, "etcd %s %s: negative lease", call, key);
    return 0;
}

int etcd_put(etcd_client *c, const char *key, const void *value, size_t len, int64_t lease,
             int64_t *revision, char *err, size_t errlen)
{
    const char *call = "kv/put";
    if (check_put(call, key, value, len, lease, err, errlen) != 0)
        return -1;
    etcd_answer a;
    if (call_json(c, call, put_request(key, value, len, lease), false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int64_t rev = 0;
    int rc = etcd_decode_header(a.body, a.len, &rev, why, sizeof why);
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    else if (revision != NULL)
        *revision = rev;
    answer_free(&a);
    return rc;
}

int etcd_delete(etcd_client *c, const char *key, char *err, size_t errlen)
{
    const char *call = "kv/deleterange";
    if (check_key(call, key, err, errlen) != 0)
        return -1;
    etcd_answer a;
    if (call_json(c, call, key_request(key, false), false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int64_t deleted = 0;
    int rc = etcd_decode_delete(a.body, a.len, &deleted, why, sizeof why);
    if (rc == 0 && deleted > 1)
        rc = fail(why, sizeof why, "%" PRId64 " keys deleted for one", deleted);
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    answer_free(&a);
    return rc == 0 ? (int)deleted : -1;
}

/* The transaction of etcd_put_if: compare the key's mod_revision (or, for
 * 0, its create_revision: 0 means it does not exist), then put it, or else
 * read it. */
static cJSON *cas_request(const char *key, const void *value, size_t len, int64_t expected,
                          int64_t lease)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *cmp = cJSON_AddArrayToObject(o, "compare");
    cJSON *succ = cJSON_AddArrayToObject(o, "success");
    cJSON *fail_ops = cJSON_AddArrayToObject(o, "failure");
    cJSON *c1 = key_request(key, false), *put = put_request(key, value, len, lease);
    cJSON *range = key_request(key, false);
    cJSON *op_put = cJSON_CreateObject(), *op_range = cJSON_CreateObject();
    bool ok = cmp != NULL && succ != NULL && fail_ops != NULL && c1 != NULL && put != NULL &&
              range != NULL && op_put != NULL && op_range != NULL;
    if (ok) {
        cJSON_AddItemToArray(cmp, c1);
        cJSON_AddItemToObject(op_put, "requestPut", put);
        cJSON_AddItemToArray(succ, op_put);
        cJSON_AddItemToObject(op_range, "requestRange", range);
        cJSON_AddItemToArray(fail_ops, op_range);
        ok = cJSON_AddStringToObject(c1, "target", expected == 0 ? "CREATE" : "MOD") != NULL &&
             cJSON_AddStringToObject(c1, "result", "EQUAL") != NULL &&
             add_i64(c1, expected == 0 ? "create_revision" : "mod_revision", expected);
        if (ok)
            return o;
    } else {
        cJSON_Delete(c1);
        cJSON_Delete(put);
        cJSON_Delete(range);
        cJSON_Delete(op_put);
        cJSON_Delete(op_range);
    }
    cJSON_Delete(o);
    return NULL;
}

int etcd_put_if(etcd_client *c, const char *key, const void *value, size_t len,
                int64_t expected_mod_revision, int64_t lease, etcd_txn_result *out, char *err,
                size_t errlen)
{
    const char *call = "kv/txn";
    *out = (etcd_txn_result){0};
    if (check_put(call, key, value, len, lease, err, errlen) != 0)
        return -1;
    if (expected_mod_revision < 0)
        return fail(err, errlen, "etcd %s %s: negative revision", call, key);
    etcd_answer a;
    cJSON *req = cas_request(key, value, len, expected_mod_revision, lease);
    if (call_json(c, call, req, false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int rc = etcd_decode_txn(a.body, a.len, out, why, sizeof why);
    if (rc == 0 && out->current.key != NULL && strcmp(out->current.key, key) != 0) {
        etcd_txn_result_free(out);
        rc = fail(why, sizeof why, "another key than the one compared");
    }
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    answer_free(&a);
    return rc == 0 ? out->succeeded : -1;
}

static cJSON *lease_request(const char *name, int64_t v)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL && !add_i64(o, name, v)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int etcd_lease_grant(etcd_client *c, int64_t ttl_seconds, int64_t *id, int64_t *granted_ttl,
                     char *err, size_t errlen)
{
    const char *call = "lease/grant";
    if (ttl_seconds <= 0 || ttl_seconds > ETCD_MAX_TTL)
        return fail(err, errlen, "etcd %s: TTL %" PRId64 " not in 1..%lld", call, ttl_seconds,
                    ETCD_MAX_TTL);
    etcd_answer a;
    if (call_json(c, call, lease_request("TTL", ttl_seconds), false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int64_t ttl = 0;
    int rc = etcd_decode_lease_grant(a.body, a.len, id, &ttl, why, sizeof why);
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    else if (granted_ttl != NULL)
        *granted_ttl = ttl;
    answer_free(&a);
    return rc;
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t *ttl, char *err, size_t errlen)
{
    const char *call = "lease/keepalive";
    if (id <= 0)
        return fail(err, errlen, "etcd %s: lease id %" PRId64 " not positive", call, id);
    etcd_answer a;
    if (call_json(c, call, lease_request("ID", id), true, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int64_t got_id = 0, got_ttl = 0;
    int rc = etcd_decode_keepalive(a.body, a.len, &got_id, &got_ttl, why, sizeof why);
    if (rc == 0 && got_id != id)
        rc = fail(why, sizeof why, "renewed lease %" PRId64 ", not %" PRId64, got_id, id);
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    else if (ttl != NULL)
        *ttl = got_ttl;
    answer_free(&a);
    return rc == 0 ? got_ttl > 0 : -1;
}

int etcd_lease_revoke(etcd_client *c, int64_t id, char *err, size_t errlen)
{
    const char *call = "lease/revoke";
    if (id <= 0)
        return fail(err, errlen, "etcd %s: lease id %" PRId64 " not positive", call, id);
    etcd_answer a;
    etcd_error e = {.code = -1};
    if (call_json(c, call, lease_request("ID", id), false, &a, &e, err, errlen) != 0) {
        /* gRPC NotFound (5): the lease expired or was revoked already. */
        bool gone = a.status == 404 && e.code == 5;
        answer_free(&a);
        return gone ? 0 : -1;
    }
    char why[ETCD_MAX_ERR];
    int64_t revision = 0;
    int rc = etcd_decode_header(a.body, a.len, &revision, why, sizeof why);
    if (rc != 0)
        bad_answer(c, call, &a, why, err, errlen);
    answer_free(&a);
    return rc == 0 ? 1 : -1;
}
