/*
 * remote_s3.c: the S3 backend of remote_storage.h, over libcurl.
 *
 * Requests are path-style (ENDPOINT/BUCKET/PREFIXKEY), signed by libcurl
 * (CURLOPT_AWS_SIGV4, "aws:amz:REGION:s3").  Two habits of curl 7.88 shape
 * them (both met against radosgw):
 *   - it does not send x-amz-content-sha256 itself, while the server needs
 *     it to check the signature: every request carries the SHA-256 of its
 *     body, so the server also verifies the payload;
 *   - it signs the query string as written, so each query is written here
 *     already canonical: keys sorted, every value URI-encoded, and a key
 *     without value as "key=" ("?uploads=", "?delete=").
 * Object keys are URI-encoded byte by byte (all but A-Z a-z 0-9 - _ . ~ and
 * '/'), so spaces, '+' and UTF-8 reach the server as they were given.
 *
 * Retries: connection failures, timeouts, 5xx (503 SlowDown included), 408
 * and 429 are tried again, up to max_attempts, after a randomized delay
 * that doubles each time from backoff_base_ms up to backoff_max_ms; every
 * other 4xx fails at once.  A retried download restarts the sink; a
 * retried upload re-reads its source.
 *
 * Large objects (multipart_threshold and up) go up in parts of part_size,
 * one after another; a failed multipart upload is aborted so the server
 * drops its parts.  A crash mid-upload leaves the parts to the bucket's
 * lifecycle rule (the object itself never appears).
 *
 * Threads: the handle keeps a small pool of curl easy handles (each with
 * its connection cache) under a mutex; a request takes one for its
 * duration, so calls from several threads run in parallel.
 *
 * Every server answer is untrusted: XML bodies go through common/net/s3_xml.h,
 * body sizes are bounded, and ETags and upload ids are checked for syntax.
 */
#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "net/curl_once.h"
#include "net/remote_backend.h"
#include "net/s3_xml.h"
#include "base/hex.h"
#include "base/strata_assert.h"

#define S3_POOL 8
#define S3_MAX_ERROR_BODY (64u << 10)
#define S3_DELETE_BATCH 1000
#define S3_MAX_PARTS 10000
#define S3_HASH_CHUNK (1u << 20)

typedef struct s3_state {
    pthread_mutex_t lock;
    CURL *idle[S3_POOL];
    int n_idle;
    char sigv4[128];
} s3_state;

/* A growing byte buffer with a hard cap. */
typedef struct s3_buf {
    char *data;
    size_t len, cap, max;
} s3_buf;

/* One request, retried as a whole. */
typedef struct s3_req {
    const char *op;          /* for messages: "PUT", "GET", "LIST", ... */
    const char *method;      /* HTTP method */
    const char *key;         /* relative key; NULL for a request on the bucket */
    const char *query;       /* canonical query without '?', or NULL */
    const remote_body *body; /* what a PUT or POST sends: [body_off, +body_len) */
    uint64_t body_off, body_len;
    const char *content_type;
    const char *content_md5;
    char range[64];
    const remote_sink *sink; /* a 2xx body goes here, else into resp */
    size_t resp_max;         /* bound of a 2xx body kept in resp */
    /* Filled by s3_perform. */
    long status;
    char etag[128];
    int64_t content_length;
    s3_buf resp;
    /* Transfer state of one attempt. */
    uint64_t read_pos;
    int local_rc; /* failure of our own callback (sink, source file) */
    bool range_status_ok;
} s3_req;

/* ------------------------------------------------------------------ */
/* Encoding, hashing */

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

/* Appends s URI-encoded (keep_slash: '/' stays as is) to out[cap];
 * false if it does not fit. */
static bool uri_encode(char *out, size_t cap, size_t *len, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*len + 4 > cap)
            return false;
        if (unreserved(*p) || (keep_slash && *p == '/')) {
            out[(*len)++] = (char)*p;
        } else {
            out[(*len)++] = '%';
            out[(*len)++] = hex[*p >> 4];
            out[(*len)++] = hex[*p & 15];
        }
    }
    out[*len] = '\0';
    return true;
}

/* SHA-256 (hex) of the body window of req: the x-amz-content-sha256. */
static int payload_sha256(const s3_req *req, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return -ENOMEM;
    }
    int rc = 0;
    const remote_body *b = req->body;
    if (b != NULL && b->fd < 0) {
        if (EVP_DigestUpdate(ctx, (const char *)b->buf + req->body_off, req->body_len) != 1)
            rc = -EIO;
    } else if (b != NULL && req->body_len > 0) {
        char *chunk = malloc(S3_HASH_CHUNK);
        if (chunk == NULL)
            rc = -ENOMEM;
        for (uint64_t done = 0; rc == 0 && done < req->body_len;) {
            size_t want =
                req->body_len - done < S3_HASH_CHUNK ? req->body_len - done : S3_HASH_CHUNK;
            ssize_t n = pread(b->fd, chunk, want, (off_t)(req->body_off + done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                rc = -errno;
            else if (n == 0)
                rc = -ENODATA;
            else if (EVP_DigestUpdate(ctx, chunk, (size_t)n) != 1)
                rc = -EIO;
            else
                done += (uint64_t)n;
        }
        free(chunk);
    }
    if (rc == 0 && EVP_DigestFinal_ex(ctx, md, &mdlen) != 1)
        rc = -EIO;
    EVP_MD_CTX_free(ctx);
    if (rc == 0)
        hex_encode(md, mdlen, hex);
    return rc;
}

/* Base64 of the MD5 of data (Content-MD5, which DeleteObjects requires). */
static int content_md5(const char *data, size_t len, char out[32])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL) != 1)
        return -EIO;
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Buffers */

static int buf_append(s3_buf *b, const void *data, size_t len)
{
    if (len > b->max - b->len)
        return -EFBIG;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL)
            return -ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

static int buf_printf(s3_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int buf_printf(s3_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    STRATA_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    return buf_append(b, tmp, (size_t)n);
}

/* Appends s with the five XML special characters escaped. */
static int buf_xml_escape(s3_buf *b, const char *s)
{
    int rc = 0;
    for (; rc == 0 && *s; s++) {
        const char *e = *s == '&'    ? "&amp;"
                        : *s == '<'  ? "&lt;"
                        : *s == '>'  ? "&gt;"
                        : *s == '"'  ? "&quot;"
                        : *s == '\'' ? "&apos;"
                                     : NULL;
        rc = e ? buf_append(b, e, strlen(e)) : buf_append(b, s, 1);
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* curl callbacks */

static size_t on_read(char *dst, size_t size, size_t nmemb, void *arg)
{
    s3_req *req = arg;
    size_t want = size * nmemb;
    uint64_t left = req->body_len - req->read_pos;
    if (want > left)
        want = (size_t)left;
    if (want == 0)
        return 0;
    uint64_t at = req->body_off + req->read_pos;
    if (req->body->fd < 0) {
        memcpy(dst, (const char *)req->body->buf + at, want);
    } else {
        ssize_t n;
        do
            n = pread(req->body->fd, dst, want, (off_t)at);
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
            req->local_rc = n < 0 ? -errno : -ENODATA;
            return CURL_READFUNC_ABORT;
        }
        want = (size_t)n;
    }
    req->read_pos += want;
    return want;
}

static int on_seek(void *arg, curl_off_t offset, int origin)
{
    s3_req *req = arg;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    req->read_pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    s3_req *req = arg;
    size_t n = size * nmemb;
    bool success = req->status >= 200 && req->status < 300;
    int rc;
    if (success && req->sink != NULL) {
        if (!req->range_status_ok)
            rc = -EPROTO;
        else
            rc = req->sink->write(req->sink->arg, data, n);
    } else {
        rc = buf_append(&req->resp, data, n);
        if (rc == -EFBIG && !success)
            return n; /* an error body longer than we keep: the start says enough */
    }
    if (rc != 0) {
        req->local_rc = rc;
        return 0;
    }
    return n;
}

/* Copies a header's value (trimmed) if line is "name: value". */
static bool header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    if (len <= nlen || strncasecmp(line, name, nlen) != 0 || line[nlen] != ':')
        return false;
    const char *v = line + nlen + 1, *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    size_t vlen = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
    memcpy(out, v, vlen);
    out[vlen] = '\0';
    return true;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    s3_req *req = arg;
    size_t n = size * nmemb;
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue): forget the last one's. */
        req->etag[0] = '\0';
        const char *sp = memchr(line, ' ', n);
        req->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        req->range_status_ok = req->range[0] == '\0' || req->status == 206;
        return n;
    }
    char value[32];
    header_value(line, n, "ETag", req->etag, sizeof req->etag);
    if (header_value(line, n, "Content-Length", value, sizeof value))
        req->content_length = strtoll(value, NULL, 10);
    return n;
}

/* ------------------------------------------------------------------ */
/* The curl handle pool */

static CURL *take_handle(s3_state *st)
{
    CURL *h = NULL;
    pthread_mutex_lock(&st->lock);
    if (st->n_idle > 0)
        h = st->idle[--st->n_idle];
    pthread_mutex_unlock(&st->lock);
    if (h != NULL)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

static void give_handle(s3_state *st, CURL *h)
{
    pthread_mutex_lock(&st->lock);
    if (st->n_idle < S3_POOL) {
        st->idle[st->n_idle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&st->lock);
    if (h != NULL)
        curl_easy_cleanup(h);
}

/* ------------------------------------------------------------------ */
/* One request */

/* "s3://bucket/prefix/key" (or the bucket) for messages. */
static void object_name(const remote_storage *rs, const char *key, char *out, size_t cap)
{
    snprintf(out, cap, "s3://%s/%s%s", rs->cfg.bucket, key ? rs->cfg.prefix : "", key ? key : "");
}

static int build_url(const remote_storage *rs, const s3_req *req, char *url, size_t cap)
{
    size_t len = (size_t)snprintf(url, cap, "%s/%s", rs->cfg.endpoint, rs->cfg.bucket);
    if (len >= cap)
        return -ENAMETOOLONG;
    if (req->key != NULL) {
        char full[REMOTE_MAX_KEY * 2];
        if ((size_t)snprintf(full, sizeof full, "%s%s", rs->cfg.prefix, req->key) >= sizeof full ||
            strlen(full) > REMOTE_MAX_KEY)
            return -ENAMETOOLONG;
        url[len++] = '/';
        if (!uri_encode(url, cap, &len, full, true))
            return -ENAMETOOLONG;
    }
    if (req->query != NULL &&
        (size_t)snprintf(url + len, cap - len, "?%s", req->query) >= cap - len)
        return -ENAMETOOLONG;
    return 0;
}

static bool retryable_curl(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

static bool retryable_status(long status)
{
    return status >= 500 || status == 408 || status == 429;
}

static int errno_of_status(long status, const char *code)
{
    if (status == 404)
        return -ENOENT;
    if (status == 403)
        return -EACCES;
    if (status == 408)
        return -ETIMEDOUT;
    if (status == 409)
        return -EEXIST;
    if (status == 429 || status == 503)
        return -EAGAIN;
    if (status == 400 && strcmp(code, "EntityTooSmall") != 0)
        return -EINVAL;
    return -EIO;
}

/* Sleeps a random time in [d/2, d], d = base * 2^(attempt-1) capped. */
static void backoff(const remote_config *cfg, int attempt)
{
    uint64_t d = cfg->backoff_base_ms;
    for (int i = 1; i < attempt && d < cfg->backoff_max_ms; i++)
        d *= 2;
    if (d > cfg->backoff_max_ms)
        d = cfg->backoff_max_ms;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint32_t)getpid();
    uint64_t ms = d / 2 + (d - d / 2) * r / UINT32_MAX;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int setup_handle(CURL *h, const remote_storage *rs, s3_req *req, const char *url,
                        struct curl_slist *headers, char *errbuf)
{
    const s3_state *st = rs->backend;
    const remote_config *c = &rs->cfg;
    CURLcode e = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (e == CURLE_OK)                                                                         \
            e = curl_easy_setopt(h, opt, val);                                                     \
    } while (0)
    SET(CURLOPT_URL, url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_AWS_SIGV4, st->sigv4);
    SET(CURLOPT_USERNAME, c->access_key);
    SET(CURLOPT_PASSWORD, c->secret_key);
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, (long)c->request_timeout_ms);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, req);
    SET(CURLOPT_WRITEFUNCTION, on_write);
    SET(CURLOPT_WRITEDATA, req);
    if (strcmp(req->method, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "PUT") == 0) {
        SET(CURLOPT_UPLOAD, 1L);
        SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
    } else if (strcmp(req->method, "POST") == 0) {
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    } else if (strcmp(req->method, "DELETE") == 0) {
        SET(CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (req->body != NULL) {
        SET(CURLOPT_READFUNCTION, on_read);
        SET(CURLOPT_READDATA, req);
        SET(CURLOPT_SEEKFUNCTION, on_seek);
        SET(CURLOPT_SEEKDATA, req);
    }
#undef SET
    return e == CURLE_OK ? 0 : -EINVAL;
}

static struct curl_slist *build_headers(const s3_req *req, const char *sha256)
{
    char line[128];
    struct curl_slist *h = NULL, *next;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        snprintf(line, sizeof line, __VA_ARGS__);                                                  \
        if ((next = curl_slist_append(h, line)) == NULL) {                                         \
            curl_slist_free_all(h);                                                                \
            return NULL;                                                                           \
        }                                                                                          \
        h = next;                                                                                  \
    } while (0)
    /* No "Expect:" to suppress 100-continue: curl 7.88 would sign the
     * header it then does not send. */
    ADD("x-amz-content-sha256: %s", sha256);
    if (req->content_type != NULL)
        ADD("Content-Type: %s", req->content_type);
    if (req->content_md5 != NULL)
        ADD("Content-MD5: %s", req->content_md5);
    if (req->range[0] != '\0')
        ADD("Range: %s", req->range);
#undef ADD
    return h;
}

/* The error line of a failed request. */
static int request_failed(const remote_storage *rs, const s3_req *req, int rc, CURLcode cc,
                          const char *errbuf, int attempts, remote_err *err)
{
    char name[REMOTE_MAX_KEY + 128];
    char tries[32] = "";
    object_name(rs, req->key, name, sizeof name);
    if (attempts > 1)
        snprintf(tries, sizeof tries, " (after %d attempts)", attempts);
    if (req->local_rc != 0)
        return remote_fail(err, req->local_rc, "s3 %s %s: %s%s", req->op, name,
                           req->local_rc == -EFBIG     ? "object larger than asked"
                           : req->local_rc == -EPROTO  ? "the server sent more or other than "
                                                         "the range asked for"
                           : req->local_rc == -ENODATA ? "the source file shrank during the upload"
                                                       : strerror(-req->local_rc),
                           tries);
    if (cc != CURLE_OK)
        return remote_fail(err, rc, "s3 %s %s: %s: %s%s", req->op, name, curl_easy_strerror(cc),
                           errbuf[0] ? errbuf : "-", tries);
    s3xml_error e = {.code = ""};
    char why[S3XML_MAX_ERR];
    if (req->resp.len == 0 || s3xml_parse_error(req->resp.data, req->resp.len, &e, why) != 0)
        snprintf(e.code, sizeof e.code, "%s", req->resp.len ? "(no S3 error document)" : "");
    return remote_fail(err, errno_of_status(req->status, e.code), "s3 %s %s: HTTP %ld %s%s%s%s",
                       req->op, name, req->status, e.code, e.message[0] ? ": " : "", e.message,
                       tries);
}

/*
 * Sends req, retrying as the header comment says.  Returns 0 for a 2xx
 * answer (the body in the sink or req->resp), the errno of the last
 * failure otherwise, with err filled and req->status set, so a caller
 * that expects a failure (404 for HEAD, 416 for a range past the end) can
 * turn it into success.
 */
static int s3_perform(remote_storage *rs, s3_req *req, remote_err *err)
{
    s3_state *st = rs->backend;
    char url[REMOTE_MAX_KEY * 3 + 1536], sha256[65], errbuf[CURL_ERROR_SIZE];
    int rc = build_url(rs, req, url, sizeof url);
    if (rc != 0)
        return remote_fail(err, rc, "s3 %s %s: name too long", req->op,
                           req->key ? req->key : rs->cfg.bucket);
    req->local_rc = 0;
    if ((rc = payload_sha256(req, sha256)) != 0) {
        req->local_rc = rc;
        return request_failed(rs, req, rc, CURLE_OK, "", 1, err);
    }
    struct curl_slist *headers = build_headers(req, sha256);
    CURL *h = headers ? take_handle(st) : NULL;
    if (h == NULL) {
        curl_slist_free_all(headers);
        return remote_fail(err, -ENOMEM, "s3 %s: out of memory", req->op);
    }
    req->resp.max = req->resp_max ? req->resp_max : S3_MAX_ERROR_BODY;
    int attempt = 0;
    for (;;) {
        attempt++;
        req->status = 0;
        req->etag[0] = '\0';
        req->content_length = -1;
        req->resp.len = 0;
        req->read_pos = 0;
        req->local_rc = 0;
        errbuf[0] = '\0';
        if (attempt > 1 && req->sink != NULL && (rc = req->sink->reset(req->sink->arg)) != 0) {
            req->local_rc = rc;
            break;
        }
        rc = setup_handle(h, rs, req, url, headers, errbuf);
        CURLcode cc = rc == 0 ? curl_easy_perform(h) : CURLE_FAILED_INIT;
        if (cc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &req->status);
        if (req->local_rc != 0) {
            rc = req->local_rc;
            break;
        }
        bool again = cc != CURLE_OK ? retryable_curl(cc) : retryable_status(req->status);
        if (cc == CURLE_OK && req->status >= 200 && req->status < 300) {
            rc = 0;
            break;
        }
        if (!again || attempt >= rs->cfg.max_attempts) {
            rc = cc == CURLE_COULDNT_CONNECT      ? -ECONNREFUSED
                 : cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                                                  : -EIO;
            rc = request_failed(rs, req, rc, cc, errbuf, attempt, err);
            break;
        }
        curl_easy_reset(h);
        backoff(&rs->cfg, attempt);
    }
    if (rc != 0 && req->local_rc != 0)
        rc = request_failed(rs, req, rc, CURLE_OK, "", attempt, err);
    curl_easy_reset(h);
    give_handle(st, h);
    curl_slist_free_all(headers);
    return rc;
}

static void req_done(s3_req *req)
{
    free(req->resp.data);
    req->resp = (s3_buf){0};
}

/* ------------------------------------------------------------------ */
/* Operations */

static int s3_init(remote_storage *rs, remote_err *err)
{
    s3_req req = {.op = "CREATE-BUCKET", .method = "PUT"};
    remote_body empty = {.fd = -1, .buf = "", .len = 0};
    req.body = &empty;
    int rc = s3_perform(rs, &req, err);
    if (rc == -EEXIST && strstr(err->msg, "BucketAlreadyOwnedByYou") != NULL)
        rc = 0;
    req_done(&req);
    return rc;
}

static int put_single(remote_storage *rs, const char *key, const remote_body *body, remote_err *err)
{
    s3_req req = {.op = "PUT", .method = "PUT", .key = key, .body = body, .body_len = body->len};
    int rc = s3_perform(rs, &req, err);
    req_done(&req);
    return rc;
}

/* An ETag as servers send it: quoted printable ASCII, nothing XML-special. */
static bool etag_ok(const char *etag)
{
    size_t n = strlen(etag);
    if (n < 2 || n >= 100)
        return false;
    for (size_t i = 0; i < n; i++)
        if (etag[i] <= ' ' || etag[i] > '~' || etag[i] == '<' || etag[i] == '>' || etag[i] == '&')
            return false;
    return true;
}

static int multipart_abort(remote_storage *rs, const char *key, const char *query)
{
    remote_err ignored;
    s3_req req = {.op = "ABORT-MULTIPART", .method = "DELETE", .key = key, .query = query};
    int rc = s3_perform(rs, &req, &ignored);
    req_done(&req);
    return rc;
}

static int multipart_initiate(remote_storage *rs, const char *key, char *upload_id, size_t cap,
                              remote_err *err)
{
    s3_req req = {.op = "INITIATE-MULTIPART",
                  .method = "POST",
                  .key = key,
                  .query = "uploads=",
                  .resp_max = S3XML_MAX_BODY};
    remote_body empty = {.fd = -1, .buf = "", .len = 0};
    req.body = &empty;
    int rc = s3_perform(rs, &req, err);
    char why[S3XML_MAX_ERR];
    if (rc == 0 && s3xml_parse_initiate(req.resp.data, req.resp.len, upload_id, cap, why) != 0)
        rc = remote_fail(err, -EPROTO, "s3 INITIATE-MULTIPART %s: bad answer: %s", key, why);
    req_done(&req);
    return rc;
}

static int multipart_complete(remote_storage *rs, const char *key, const char *query,
                              char (*etags)[128], size_t parts, remote_err *err)
{
    s3_buf xml = {.max = SIZE_MAX};
    int rc = buf_printf(&xml, "<CompleteMultipartUpload>");
    for (size_t i = 0; rc == 0 && i < parts; i++)
        rc = buf_printf(&xml, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", i + 1,
                        etags[i]);
    if (rc == 0)
        rc = buf_printf(&xml, "</CompleteMultipartUpload>");
    if (rc != 0) {
        free(xml.data);
        return remote_fail(err, rc, "s3 COMPLETE-MULTIPART %s: out of memory", key);
    }
    remote_body body = {.fd = -1, .buf = xml.data, .len = xml.len};
    s3_req req = {.op = "COMPLETE-MULTIPART",
                  .method = "POST",
                  .key = key,
                  .query = query,
                  .body = &body,
                  .body_len = xml.len,
                  .content_type = "application/xml",
                  .resp_max = S3XML_MAX_BODY};
    rc = s3_perform(rs, &req, err);
    s3xml_error e;
    char why[S3XML_MAX_ERR];
    int parsed = rc == 0 ? s3xml_parse_complete(req.resp.data, req.resp.len, &e, why) : 0;
    if (parsed == 1)
        rc = remote_fail(err, e.code[0] && strcmp(e.code, "InternalError") ? -EIO : -EAGAIN,
                         "s3 COMPLETE-MULTIPART %s: HTTP 200 with error %s: %s", key, e.code,
                         e.message);
    else if (parsed < 0)
        rc = remote_fail(err, -EPROTO, "s3 COMPLETE-MULTIPART %s: bad answer: %s", key, why);
    req_done(&req);
    free(xml.data);
    return rc;
}

static int put_multipart(remote_storage *rs, const char *key, const remote_body *body,
                         remote_err *err)
{
    uint64_t part = rs->cfg.part_size;
    if ((body->len + part - 1) / part > S3_MAX_PARTS) {
        part = (body->len + S3_MAX_PARTS - 1) / S3_MAX_PARTS;
        part = (part + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
    }
    size_t parts = (size_t)((body->len + part - 1) / part);
    STRATA_ASSERT(parts >= 1 && parts <= S3_MAX_PARTS);
    char upload_id[512], enc_id[1536], query[1600];
    int rc = multipart_initiate(rs, key, upload_id, sizeof upload_id, err);
    if (rc != 0)
        return rc;
    size_t len = 0;
    uri_encode(enc_id, sizeof enc_id, &len, upload_id, false);
    char(*etags)[128] = calloc(parts, sizeof *etags);
    if (etags == NULL)
        rc = remote_fail(err, -ENOMEM, "s3 PUT %s: out of memory", key);
    for (size_t i = 0; rc == 0 && i < parts; i++) {
        snprintf(query, sizeof query, "partNumber=%zu&uploadId=%s", i + 1, enc_id);
        uint64_t off = (uint64_t)i * part;
        s3_req req = {.op = "UPLOAD-PART",
                      .method = "PUT",
                      .key = key,
                      .query = query,
                      .body = body,
                      .body_off = off,
                      .body_len = body->len - off < part ? body->len - off : part};
        rc = s3_perform(rs, &req, err);
        if (rc == 0 && !etag_ok(req.etag))
            rc = remote_fail(err, -EPROTO, "s3 UPLOAD-PART %s part %zu: bad ETag \"%.40s\"", key,
                             i + 1, req.etag);
        if (rc == 0)
            memcpy(etags[i], req.etag, sizeof etags[i]);
        req_done(&req);
    }
    snprintf(query, sizeof query, "uploadId=%s", enc_id);
    if (rc == 0)
        rc = multipart_complete(rs, key, query, etags, parts, err);
    free(etags);
    if (rc != 0 && multipart_abort(rs, key, query) != 0) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, "; the abort of upload %s failed too",
                 upload_id);
    }
    return rc;
}

static int s3_put(remote_storage *rs, const char *key, const remote_body *body, remote_err *err)
{
    if (body->len >= rs->cfg.multipart_threshold)
        return put_multipart(rs, key, body, err);
    return put_single(rs, key, body, err);
}

static int s3_get(remote_storage *rs, const char *key, uint64_t off, uint64_t len,
                  const remote_sink *sink, remote_err *err)
{
    s3_req req = {.op = "GET", .method = "GET", .key = key, .sink = sink};
    if (len != REMOTE_TO_END)
        snprintf(req.range, sizeof req.range, "bytes=%llu-%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1));
    else if (off > 0)
        snprintf(req.range, sizeof req.range, "bytes=%llu-", (unsigned long long)off);
    int rc = s3_perform(rs, &req, err);
    /* Past the end of the object: nothing to deliver, like a short read. */
    if (rc != 0 && req.status == 416 && req.range[0] != '\0')
        rc = sink->reset(sink->arg);
    req_done(&req);
    return rc;
}

static int s3_head(remote_storage *rs, const char *key, bool *exists, uint64_t *size,
                   remote_err *err)
{
    s3_req req = {.op = "HEAD", .method = "HEAD", .key = key};
    int rc = s3_perform(rs, &req, err);
    if (rc == 0) {
        if (req.content_length < 0)
            rc = remote_fail(err, -EPROTO, "s3 HEAD %s: no Content-Length", key);
        *exists = rc == 0;
        *size = rc == 0 ? (uint64_t)req.content_length : 0;
    } else if (req.status == 404) {
        rc = 0;
    }
    req_done(&req);
    return rc;
}

static int s3_del(remote_storage *rs, const char *key, remote_err *err)
{
    s3_req req = {.op = "DELETE", .method = "DELETE", .key = key};
    int rc = s3_perform(rs, &req, err);
    if (rc == -ENOENT && strstr(err->msg, "NoSuchBucket") == NULL)
        rc = 0;
    req_done(&req);
    return rc;
}

static int delete_batch(remote_storage *rs, const char *const *keys, size_t n, remote_err *err)
{
    s3_buf xml = {.max = SIZE_MAX};
    int rc = buf_printf(&xml, "<Delete><Quiet>true</Quiet>");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = buf_printf(&xml, "<Object><Key>");
        if (rc == 0)
            rc = buf_xml_escape(&xml, rs->cfg.prefix);
        if (rc == 0)
            rc = buf_xml_escape(&xml, keys[i]);
        if (rc == 0)
            rc = buf_printf(&xml, "</Key></Object>");
    }
    if (rc == 0)
        rc = buf_printf(&xml, "</Delete>");
    char md5[32];
    if (rc == 0)
        rc = content_md5(xml.data, xml.len, md5);
    if (rc != 0) {
        free(xml.data);
        return remote_fail(err, rc, "s3 DELETE-MANY: out of memory");
    }
    remote_body body = {.fd = -1, .buf = xml.data, .len = xml.len};
    s3_req req = {.op = "DELETE-MANY",
                  .method = "POST",
                  .query = "delete=",
                  .body = &body,
                  .body_len = xml.len,
                  .content_type = "application/xml",
                  .content_md5 = md5,
                  .resp_max = S3XML_MAX_BODY};
    rc = s3_perform(rs, &req, err);
    s3xml_delete_result res;
    char why[S3XML_MAX_ERR];
    if (rc == 0 && s3xml_parse_delete(req.resp.data, req.resp.len, &res, why) != 0)
        rc = remote_fail(err, -EPROTO, "s3 DELETE-MANY s3://%s: bad answer: %s", rs->cfg.bucket,
                         why);
    else if (rc == 0 && res.errors > 0)
        rc = remote_fail(err, strcmp(res.first_error.code, "AccessDenied") ? -EIO : -EACCES,
                         "s3 DELETE-MANY s3://%s/%s: %s: %s (%zu of %zu keys failed)",
                         rs->cfg.bucket, res.first_error_key, res.first_error.code,
                         res.first_error.message, res.errors, n);
    req_done(&req);
    free(xml.data);
    return rc;
}

static int s3_del_many(remote_storage *rs, const char *const *keys, size_t n, remote_err *err)
{
    for (size_t i = 0; i < n; i += S3_DELETE_BATCH) {
        int rc = delete_batch(rs, keys + i, n - i < S3_DELETE_BATCH ? n - i : S3_DELETE_BATCH, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int add_page(remote_storage *rs, const s3xml_list_page *page, remote_listing *out,
                    remote_err *err)
{
    size_t plen = strlen(rs->cfg.prefix);
    for (size_t i = 0; i < page->n; i++) {
        const char *key = page->entries[i].key;
        if (strncmp(key, rs->cfg.prefix, plen) != 0)
            return remote_fail(err, -EPROTO,
                               "s3 LIST s3://%s/%s: the server listed %.200s, "
                               "outside the prefix",
                               rs->cfg.bucket, rs->cfg.prefix, key);
        if (key[plen] == '\0')
            continue; /* a "folder" marker object named like the prefix */
        if (remote_listing_add(out, key + plen, strlen(key + plen), page->entries[i].size) != 0)
            return remote_fail(err, -ENOMEM, "s3 LIST: out of memory");
    }
    return 0;
}

static int s3_list(remote_storage *rs, const char *prefix, remote_listing *out, remote_err *err)
{
    char full[REMOTE_MAX_KEY * 2], enc_prefix[REMOTE_MAX_KEY * 6], enc_token[4096];
    char query[sizeof enc_prefix + sizeof enc_token + 64];
    snprintf(full, sizeof full, "%s%s", rs->cfg.prefix, prefix);
    size_t len = 0;
    uri_encode(enc_prefix, sizeof enc_prefix, &len, full, false);
    char *token = NULL;
    int rc = 0;
    do {
        len = 0;
        if (token != NULL && !uri_encode(enc_token, sizeof enc_token, &len, token, false)) {
            rc = remote_fail(err, -EPROTO, "s3 LIST s3://%s/%s: continuation token too long",
                             rs->cfg.bucket, full);
            break;
        }
        snprintf(query, sizeof query, "%s%s%slist-type=2&max-keys=%u&prefix=%s",
                 token ? "continuation-token=" : "", token ? enc_token : "", token ? "&" : "",
                 rs->cfg.list_page_keys, enc_prefix);
        s3_req req = {.op = "LIST", .method = "GET", .query = query, .resp_max = S3XML_MAX_BODY};
        rc = s3_perform(rs, &req, err);
        s3xml_list_page page = {0};
        char why[S3XML_MAX_ERR];
        if (rc == 0 && s3xml_parse_list(req.resp.data, req.resp.len, &page, why) != 0)
            rc = remote_fail(err, -EPROTO, "s3 LIST s3://%s/%s: bad answer: %s", rs->cfg.bucket,
                             full, why);
        if (rc == 0)
            rc = add_page(rs, &page, out, err);
        if (rc == 0 && page.truncated && token != NULL && strcmp(token, page.next_token) == 0)
            rc = remote_fail(err, -EPROTO,
                             "s3 LIST s3://%s/%s: the server repeated a "
                             "continuation token",
                             rs->cfg.bucket, full);
        free(token);
        token = NULL;
        if (rc == 0 && page.truncated) {
            token = page.next_token;
            page.next_token = NULL;
        }
        s3xml_list_page_free(&page);
        req_done(&req);
    } while (rc == 0 && token != NULL);
    free(token);
    return rc;
}

static void s3_close(remote_storage *rs)
{
    s3_state *st = rs->backend;
    for (int i = 0; i < st->n_idle; i++)
        curl_easy_cleanup(st->idle[i]);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

int remote_s3_open(remote_storage *rs, remote_err *err)
{
    CURLcode init_rc = curl_once_init();
    if (init_rc != CURLE_OK)
        return remote_fail(err, -EIO, "s3: curl_global_init: %s", curl_easy_strerror(init_rc));
    s3_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return remote_fail(err, -ENOMEM, "s3: out of memory");
    pthread_mutex_init(&st->lock, NULL);
    snprintf(st->sigv4, sizeof st->sigv4, "aws:amz:%s:s3", rs->cfg.region);
    rs->backend = st;
    return 0;
}

const remote_ops remote_s3_ops = {
    .name = "s3",
    .init = s3_init,
    .put = s3_put,
    .get = s3_get,
    .head = s3_head,
    .del = s3_del,
    .del_many = s3_del_many,
    .list = s3_list,
    .close = s3_close,
};
