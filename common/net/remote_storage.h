/*
 * remote_storage.h: the object store Strata keeps data files and WAL in, so
 * a database survives the loss of any one disk (docs/storage.md, "Remote storage").
 *
 * One interface, two backends chosen by the configuration's URL:
 *
 *   file:///PATH         a local directory (remote_local.c): the embedded
 *                        default, keys are paths under PATH
 *   s3://BUCKET/PREFIX   the S3 API over libcurl, SigV4, path-style
 *                        (remote_s3.c): Ceph RGW, MinIO, AWS
 *
 * Keys are '/'-separated names relative to the store (the S3 prefix or the
 * local root is added by the backend): 1 to REMOTE_MAX_KEY bytes of UTF-8
 * without control characters, no leading or trailing '/', no empty, "." or
 * ".." component, and no component starting with ".strata-tmp" (the local
 * backend's temporary files).  remote_key_check says why a key is refused.
 *
 * Guarantees of every backend: a put makes the object appear whole or not at
 * all, replacing an older one atomically (readers see the old or the new
 * bytes, never a mix); a get never hands out a partial object (get_file
 * makes the file appear durably, or leaves the target untouched); deleting a
 * missing key succeeds.  Listing is not a snapshot: objects put or deleted
 * while it runs may or may not appear.  The local backend cannot hold both
 * "a" and "a/b" (a file is not a directory): the second put fails -EEXIST.
 *
 * Threads: every call blocks until done (retries included) and is meant for
 * worker threads, never an event loop.  One remote_storage may be used by
 * any number of threads at once; remote_close must not race with any call.
 *
 * Errors: every call returns 0 or a negative errno-like code (-ENOENT no
 * such key, -EACCES refused by the store (403), -EINVAL bad key or
 * argument, -EFBIG larger than the caller's limit, -EPROTO malformed answer,
 * -ETIMEDOUT, -ECONNREFUSED, -EIO for other failures) and fills err with one
 * line naming the backend, the operation, the key and, for S3, the HTTP
 * status and the S3 error code and message.  Results must be checked
 * (STRATA_MUST_CHECK).
 */
#ifndef STRATA_COMMON_REMOTE_STORAGE_H
#define STRATA_COMMON_REMOTE_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/must_check.h"

#define REMOTE_MAX_KEY 1024

/* A call's reason for failing: one line, for logs and the CLI. */
typedef struct remote_err {
    char msg[1536];
} remote_err;

typedef enum remote_kind { REMOTE_LOCAL = 1, REMOTE_S3 = 2 } remote_kind;

/*
 * Where the store is and how to talk to it.  remote_config_from_url fills
 * it from a URL, the environment and defaults; callers may then override
 * fields from their own flags before remote_open.
 */
typedef struct remote_config {
    remote_kind kind;
    char root[4096];              /* local: absolute path of the root directory */
    char endpoint[512];           /* s3: http(s)://HOST[:PORT], no trailing '/' */
    char bucket[64];              /* s3: 3-63 characters */
    char prefix[512];             /* s3: "" or ending in '/', prepended to every key */
    char region[64];              /* s3: signing region */
    char access_key[128];         /* s3 */
    char secret_key[128];         /* s3 */
    uint64_t multipart_threshold; /* s3: objects this large or larger go multipart */
    uint64_t part_size;           /* s3: bytes per part (5 MiB .. 5 GiB) */
    int max_attempts;             /* s3: tries per request, >= 1 */
    uint32_t backoff_base_ms;     /* s3: first retry waits up to this, doubling */
    uint32_t backoff_max_ms;      /* s3: ... up to this */
    uint32_t connect_timeout_ms;  /* s3: per connection attempt */
    uint32_t request_timeout_ms;  /* s3: per request (one part, one GET), 0 = none */
    uint32_t list_page_keys;      /* s3: keys per ListObjectsV2 page, 1..1000 */
} remote_config;

/* Defaults of the tunables (kind and locations left empty). */
void remote_config_defaults(remote_config *cfg);

/*
 * Fills cfg from url ("file:///PATH" or "s3://BUCKET[/PREFIX]") on top of
 * the defaults.  For S3 the environment supplies STRATA_S3_ENDPOINT,
 * STRATA_S3_REGION (else AWS_REGION, else us-east-1), STRATA_S3_ACCESS_KEY
 * (else AWS_ACCESS_KEY_ID) and STRATA_S3_SECRET_KEY (else
 * AWS_SECRET_ACCESS_KEY); missing ones are reported by remote_open.
 */
STRATA_MUST_CHECK int remote_config_from_url(const char *url, remote_config *cfg, remote_err *err);

typedef struct remote_storage remote_storage;

/* Checks cfg and makes a handle (no IO for S3; the local root must exist
 * unless remote_init is called next).  *out is freed by remote_close. */
STRATA_MUST_CHECK int remote_open(const remote_config *cfg, remote_storage **out, remote_err *err);
void remote_close(remote_storage *rs);

/* "file:///PATH" or "s3://BUCKET/PREFIX" of an open store, for messages. */
const char *remote_describe(const remote_storage *rs);

/* Creates the store if missing: the local root directory (durably), or the
 * S3 bucket (one that exists and is ours is success). */
STRATA_MUST_CHECK int remote_init(remote_storage *rs, remote_err *err);

/* 0 if key is acceptable, else -EINVAL with the reason in err. */
STRATA_MUST_CHECK int remote_key_check(const char *key, remote_err *err);

/* Stores the whole content of the local file path (its size when opened)
 * under key. */
STRATA_MUST_CHECK int remote_put_file(remote_storage *rs, const char *key, const char *path,
                                      remote_err *err);

/* Stores len bytes of data under key. */
STRATA_MUST_CHECK int remote_put_buf(remote_storage *rs, const char *key, const void *data,
                                     size_t len, remote_err *err);

/* Writes the object to path: "<path>.tmp", fsync, rename, fsync of the
 * directory (common/base/durable.h).  On failure path is unchanged. */
STRATA_MUST_CHECK int remote_get_file(remote_storage *rs, const char *key, const char *path,
                                      remote_err *err);

/* Reads the whole object into a malloc'd buffer (caller frees *out; a
 * zero-length object gives a non-NULL buffer); -EFBIG if larger than
 * max_len. */
STRATA_MUST_CHECK int remote_get_buf(remote_storage *rs, const char *key, size_t max_len,
                                     void **out, size_t *out_len, remote_err *err);

/* Reads up to len bytes at offset off into buf; *got is fewer than len only
 * at the end of the object (0 at or past it). */
STRATA_MUST_CHECK int remote_get_range(remote_storage *rs, const char *key, uint64_t off,
                                       size_t len, void *buf, size_t *got, remote_err *err);

/* Whether key exists, and its size (0 when it does not). */
STRATA_MUST_CHECK int remote_head(remote_storage *rs, const char *key, bool *exists, uint64_t *size,
                                  remote_err *err);

/* Deletes key; a missing key is success. */
STRATA_MUST_CHECK int remote_delete(remote_storage *rs, const char *key, remote_err *err);

/* Deletes every key of keys[0..n) (S3: batches of 1000); stops at the first
 * batch with a failure and reports the first key that failed. */
STRATA_MUST_CHECK int remote_delete_many(remote_storage *rs, const char *const *keys, size_t n,
                                         remote_err *err);

typedef struct remote_listing_entry {
    char *key; /* relative to the store, like the keys given to put */
    uint64_t size;
} remote_listing_entry;

typedef struct remote_listing {
    remote_listing_entry *entries; /* sorted by key, bytewise */
    size_t n;
} remote_listing;

/* Every key that starts with prefix (a string prefix: "a/b" matches "a/bc";
 * "" lists everything), all pages.  Free with remote_listing_free. */
STRATA_MUST_CHECK int remote_list(remote_storage *rs, const char *prefix, remote_listing *out,
                                  remote_err *err);
void remote_listing_free(remote_listing *l);

#endif
