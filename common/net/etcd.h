/*
 * etcd.h: a thin, synchronous client of etcd's v3 API through its JSON
 * gateway (POST /v3/... over HTTP with libcurl), and the decoders of the
 * answers it reads.
 *
 * For: the coordination state of several pageservers (registrations under
 * leases, tenant attachments changed by compare-and-swap on revisions) and
 * the safekeepers' membership configurations; keys are text, values bytes.
 * Not for: watches (a long-lived stream; a later step), authentication and
 * TLS (http:// endpoints only for now), or anything that is not etcd.  Never
 * a substitute for etcd: consensus stays in etcd.
 *
 * Requests: every call is one HTTP request to one endpoint.  The client
 * tries its endpoints in order, starting with the last one that answered,
 * and moves to the next only when the request never reached a server
 * (connection refused, name not resolved, connect timeout), so nothing is
 * ever applied twice.  A request that timed out or failed after it was
 * sent is reported as an error: the caller cannot know whether a put or a
 * transaction took effect and must read the key again.  Calls on one
 * client are serialized by its mutex; each waits at most the request
 * timeout per endpoint tried.
 *
 * Errors: the `char *err, size_t errlen` convention (docs/source-tree.md):
 * -1 and one line naming the endpoint, the call and what etcd answered
 * (its error message and gRPC code) or what curl saw.
 *
 * The decoders (etcd_decode_*) are pure functions of a response body: no
 * IO, no global state.  Each validates before it trusts: the body's size,
 * JSON syntax, the type and range of every field it reads (64-bit numbers
 * come as decimal strings), base64 validity of keys and values, and the
 * number of entries; a bad body gives -1 and a reason, never a crash.
 * Fuzzed by tests/fuzz/fuzz_etcd.c; good answers as etcd 3.4 sends them are
 * in tests/unit/test_etcd.c.
 */
#ifndef STRATA_COMMON_ETCD_H
#define STRATA_COMMON_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/must_check.h"

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_MAX_ENDPOINT 256     /* bytes of one endpoint URL */
#define ETCD_MAX_KEY 1024         /* bytes of a key; keys never hold a NUL */
#define ETCD_MAX_VALUE (1u << 20) /* bytes of a value (etcd's own limit is 1.5 MiB per request) */
#define ETCD_MAX_BODY (16u << 20) /* bytes of an answer read or decoded */
#define ETCD_MAX_KVS 10000        /* entries of one prefix listing */
#define ETCD_MAX_ERR 512

/* One key as etcd holds it. */
typedef struct etcd_kv {
    char *key;   /* malloc'd, NUL-terminated, non-empty */
    char *value; /* malloc'd, value_len bytes and a NUL after them (may hold NULs) */
    size_t value_len;
    int64_t create_revision; /* revision that created the key, >= 1 */
    int64_t mod_revision;    /* revision of its last change, >= create_revision */
    int64_t version;         /* changes since creation, >= 1 */
    int64_t lease;           /* 0 when attached to no lease */
} etcd_kv;

/* The answer of a range request. */
typedef struct etcd_range {
    etcd_kv *kvs; /* malloc'd array of n, in key order */
    size_t n;
    bool more;        /* more keys matched than the limit let through */
    int64_t count;    /* keys that matched, >= n */
    int64_t revision; /* the store's revision when it answered */
} etcd_range;

/* The answer of our compare-and-swap transaction (etcd_put_if). */
typedef struct etcd_txn_result {
    bool succeeded;   /* the compare held and the put was applied */
    int64_t revision; /* the store's revision; when succeeded, the key's new mod_revision */
    etcd_kv current;  /* when !succeeded: the key as it is, or zeroed (key NULL) when absent */
} etcd_txn_result;

/* An etcd error document ({"error","message","code"}); empty when absent. */
typedef struct etcd_error {
    char message[256];
    int code; /* gRPC status code, -1 when absent */
} etcd_error;

void etcd_kv_free(etcd_kv *kv);
void etcd_range_free(etcd_range *r);
void etcd_txn_result_free(etcd_txn_result *t);

/* ---- base64 (standard alphabet, padded), as the gateway encodes bytes ---- */

/* The length of the encoding of n bytes, without the NUL. */
size_t etcd_base64_len(size_t n);
/* Writes the encoding of data[n] and a NUL into out (etcd_base64_len(n) + 1
 * bytes). */
void etcd_base64_encode(const void *data, size_t n, char *out);
/* Decodes in[len] into out (room for len / 4 * 3 bytes) and sets *outlen.
 * Accepts only canonical padded base64 (length a multiple of 4, '=' only
 * at the end, unused bits zero); -1 with *why pointing at a static reason. */
STRATA_MUST_CHECK int etcd_base64_decode(const char *in, size_t len, unsigned char *out,
                                         size_t *outlen, const char **why);

/* ---- decoders of answers (pure; on failure *out is empty) ---- */

/* /v3/kv/range: at most max_kvs entries (more is an error). */
STRATA_MUST_CHECK int etcd_decode_range(const char *body, size_t len, size_t max_kvs,
                                        etcd_range *out, char *err, size_t errlen);
/* /v3/kv/put and /v3/lease/revoke: the header's revision. */
STRATA_MUST_CHECK int etcd_decode_header(const char *body, size_t len, int64_t *revision, char *err,
                                         size_t errlen);
/* /v3/kv/deleterange: the number of keys deleted (absent means 0). */
STRATA_MUST_CHECK int etcd_decode_delete(const char *body, size_t len, int64_t *deleted, char *err,
                                         size_t errlen);
/* /v3/kv/txn of etcd_put_if (success: one put; failure: one range of at
 * most one key).  "succeeded" is absent, not false, when the compare failed. */
STRATA_MUST_CHECK int etcd_decode_txn(const char *body, size_t len, etcd_txn_result *out, char *err,
                                      size_t errlen);
/* /v3/lease/grant: the lease id (non-zero) and its TTL in seconds (> 0). */
STRATA_MUST_CHECK int etcd_decode_lease_grant(const char *body, size_t len, int64_t *id,
                                              int64_t *ttl, char *err, size_t errlen);
/* The first object of a /v3/lease/keepalive stream ({"result":{...}}): the
 * lease id and its renewed TTL, 0 when the lease no longer exists. */
STRATA_MUST_CHECK int etcd_decode_keepalive(const char *body, size_t len, int64_t *id, int64_t *ttl,
                                            char *err, size_t errlen);
/* The error document of a non-2xx answer. */
STRATA_MUST_CHECK int etcd_decode_error(const char *body, size_t len, etcd_error *out, char *err,
                                        size_t errlen);

/* ---- the client ---- */

typedef struct etcd_client etcd_client;

/* Opens a client on endpoints, a comma-separated list of "http://HOST:PORT"
 * (1 to ETCD_MAX_ENDPOINTS), each request bounded by timeout_ms (> 0).
 * Connects to nothing yet.  NULL and err on a bad list or out of memory. */
etcd_client *etcd_open(const char *endpoints, int timeout_ms, char *err, size_t errlen);
/* Frees the client; NULL is fine. */
void etcd_close(etcd_client *c);

/* Reads one key: 1 and *out filled (free with etcd_kv_free), 0 when the key
 * does not exist (*out zeroed), -1 on error. */
STRATA_MUST_CHECK int etcd_get(etcd_client *c, const char *key, etcd_kv *out, char *err,
                               size_t errlen);
/* Reads the keys that start with prefix (non-empty), at most max_kvs
 * (1..ETCD_MAX_KVS) of them in key order; out->more says when there are
 * more.  0 (free *out with etcd_range_free) or -1. */
STRATA_MUST_CHECK int etcd_get_prefix(etcd_client *c, const char *prefix, size_t max_kvs,
                                      etcd_range *out, char *err, size_t errlen);
/* Writes key = value[len] (len <= ETCD_MAX_VALUE), attached to lease when
 * it is non-zero; *revision (may be NULL) gets the key's new mod_revision. */
STRATA_MUST_CHECK int etcd_put(etcd_client *c, const char *key, const void *value, size_t len,
                               int64_t lease, int64_t *revision, char *err, size_t errlen);
/* Deletes key: 1 if it existed, 0 if not, -1 on error. */
STRATA_MUST_CHECK int etcd_delete(etcd_client *c, const char *key, char *err, size_t errlen);
/*
 * Compare-and-swap: writes key = value[len] (with lease when non-zero) only
 * if the key's mod_revision equals expected_mod_revision, or, when that is
 * 0, only if the key does not exist.  1: written, out->revision is its new
 * mod_revision.  0: not written, out->current is the key as it is now (key
 * NULL when it does not exist).  -1: error.  Free *out with
 * etcd_txn_result_free after 0 or 1.
 */
STRATA_MUST_CHECK int etcd_put_if(etcd_client *c, const char *key, const void *value, size_t len,
                                  int64_t expected_mod_revision, int64_t lease,
                                  etcd_txn_result *out, char *err, size_t errlen);
/* Grants a lease of ttl_seconds (> 0; etcd may raise it to its minimum):
 * 0 with *id and *granted_ttl (may be NULL) set, or -1. */
STRATA_MUST_CHECK int etcd_lease_grant(etcd_client *c, int64_t ttl_seconds, int64_t *id,
                                       int64_t *granted_ttl, char *err, size_t errlen);
/* Renews the lease once: 1 with *ttl (may be NULL) its new TTL, 0 when the
 * lease no longer exists (expired or revoked: its keys are gone), -1 on
 * error.  Renew at a third of the TTL. */
STRATA_MUST_CHECK int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t *ttl, char *err,
                                           size_t errlen);
/* Revokes the lease and deletes its keys: 1, 0 when it did not exist, -1. */
STRATA_MUST_CHECK int etcd_lease_revoke(etcd_client *c, int64_t id, char *err, size_t errlen);

#endif
