/*
 * etcd.c: the etcd v3 JSON gateway client of etcd.h: the requests (libcurl,
 * one easy handle per client) and the choice of endpoint.
 *
 * For: put, get, prefix listing, delete, compare-and-swap and leases against
 * etcd 3.4's gateway; the answers are decoded by etcd_json.c.
 * Not for: a cache of etcd's state or a retry policy beyond "try the next
 * endpoint when nothing was sent": the callers decide what to do after a
 * failure, since only they know whether a request may be repeated.
 */
#include "net/etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"
#include "net/curl_once.h"
#include "net/etcd_int.h"

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
    CURLcode init_rc = curl_once_init();
    if (init_rc != CURLE_OK) {
        etcd_fail(err, errlen, "etcd: curl_global_init: %s", curl_easy_strerror(init_rc));
        return NULL;
    }
    if (endpoints == NULL || endpoints[0] == '\0' || timeout_ms <= 0) {
        etcd_fail(err, errlen, "etcd: %s",
                  timeout_ms <= 0 ? "timeout must be positive" : "no endpoints");
        return NULL;
    }
    etcd_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        etcd_fail(err, errlen, "etcd: out of memory");
        return NULL;
    }
    c->timeout_ms = timeout_ms;
    for (const char *p = endpoints;;) {
        size_t n = strcspn(p, ",");
        if (c->n_endpoints == ETCD_MAX_ENDPOINTS || n >= ETCD_MAX_ENDPOINT || n <= 7 ||
            strncmp(p, "http://", 7) != 0 || memchr(p + 7, '/', n - 7) != NULL) {
            etcd_fail(err, errlen,
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
        etcd_fail(err, errlen, "etcd: out of memory");
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
        return etcd_fail(err, errlen, "etcd %s %s: cannot set up the request", c->endpoints[ep],
                         call);
    CURLcode cc = curl_easy_perform(c->curl);
    if (cc == CURLE_WRITE_ERROR && a->complete)
        cc = CURLE_OK;
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &a->status);
        return 0;
    }
    if (a->too_big)
        return etcd_fail(err, errlen, "etcd %s %s: answer larger than %u bytes", c->endpoints[ep],
                         call, ETCD_MAX_BODY);
    etcd_fail(err, errlen, "etcd %s %s: %s (%s)", c->endpoints[ep], call, curl_easy_strerror(cc),
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
        return etcd_fail(err, errlen, "etcd %s: out of memory", call);
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
        return etcd_fail(err, errlen, "etcd %s: no endpoint answered: %s", call, tried);
    if (rc < 0)
        return etcd_fail(err, errlen, "%s", one);
    return 0;
}

/* The error line of a non-2xx answer. */
static int answer_failed(const etcd_client *c, const char *call, const etcd_answer *a, char *err,
                         size_t errlen)
{
    etcd_error e;
    char why[ETCD_MAX_ERR];
    if (etcd_decode_error(a->body, a->len, &e, why, sizeof why) == 0)
        return etcd_fail(err, errlen, "etcd %s %s: HTTP %ld: %s (code %d)",
                         c->endpoints[a->endpoint], call, a->status, e.message, e.code);
    char text[81] = "";
    etcd_copy_printable(text, sizeof text, a->body != NULL ? a->body : "");
    return etcd_fail(err, errlen, "etcd %s %s: HTTP %ld: %s", c->endpoints[a->endpoint], call,
                     a->status, text[0] ? text : "(empty body)");
}

static int bad_answer(const etcd_client *c, const char *call, const etcd_answer *a, const char *why,
                      char *err, size_t errlen)
{
    return etcd_fail(err, errlen, "etcd %s %s: bad answer: %s", c->endpoints[a->endpoint], call,
                     why);
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
        return etcd_fail(err, errlen, "etcd %s: out of memory", call);
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
        return etcd_fail(err, errlen, "etcd %s: key empty or longer than %d bytes", call,
                         ETCD_MAX_KEY);
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
        return etcd_fail(err, errlen, "etcd %s: limit %zu not in 1..%d", call, max_kvs,
                         ETCD_MAX_KVS);
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
        rc = etcd_fail(why, sizeof why, "another key than the one asked for");
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
        return etcd_fail(err, errlen, "etcd %s %s: value missing or longer than %u bytes", call,
                         key, ETCD_MAX_VALUE);
    if (lease < 0)
        return etcd_fail(err, errlen, "etcd %s %s: negative lease", call, key);
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
        rc = etcd_fail(why, sizeof why, "%" PRId64 " keys deleted for one", deleted);
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
        return etcd_fail(err, errlen, "etcd %s %s: negative revision", call, key);
    etcd_answer a;
    cJSON *req = cas_request(key, value, len, expected_mod_revision, lease);
    if (call_json(c, call, req, false, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int rc = etcd_decode_txn(a.body, a.len, out, why, sizeof why);
    if (rc == 0 && out->current.key != NULL && strcmp(out->current.key, key) != 0) {
        etcd_txn_result_free(out);
        rc = etcd_fail(why, sizeof why, "another key than the one compared");
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
        return etcd_fail(err, errlen, "etcd %s: TTL %" PRId64 " not in 1..%lld", call, ttl_seconds,
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
        return etcd_fail(err, errlen, "etcd %s: lease id %" PRId64 " not positive", call, id);
    etcd_answer a;
    if (call_json(c, call, lease_request("ID", id), true, &a, NULL, err, errlen) != 0)
        return -1;
    char why[ETCD_MAX_ERR];
    int64_t got_id = 0, got_ttl = 0;
    int rc = etcd_decode_keepalive(a.body, a.len, &got_id, &got_ttl, why, sizeof why);
    if (rc == 0 && got_id != id)
        rc = etcd_fail(why, sizeof why, "renewed lease %" PRId64 ", not %" PRId64, got_id, id);
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
        return etcd_fail(err, errlen, "etcd %s: lease id %" PRId64 " not positive", call, id);
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
