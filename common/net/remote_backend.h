/*
 * remote_backend.h: what remote_storage.c asks of a backend (remote_local.c,
 * remote_s3.c).  Private to those three files; everyone else uses
 * common/net/remote_storage.h.
 *
 * The front end checks keys and arguments before a backend sees them, and
 * turns gets into sinks, so a backend only moves bytes.  Each backend fills
 * err itself (it knows the object's full name and the transport's detail).
 */
#ifndef STRATA_COMMON_REMOTE_BACKEND_H
#define STRATA_COMMON_REMOTE_BACKEND_H

#include "net/remote_storage.h"

/* What a put stores: len bytes of fd from offset 0 (fd >= 0), else of buf. */
typedef struct remote_body {
    int fd;
    const void *buf;
    uint64_t len;
} remote_body;

/*
 * Where a get delivers bytes, in order.  A backend that retries a transfer
 * calls reset and starts again from the first byte.  write returns 0 or a
 * negative errno (-EFBIG: more than the caller accepts); that ends the get.
 */
typedef struct remote_sink {
    int (*write)(void *arg, const void *data, size_t len);
    int (*reset)(void *arg);
    void *arg;
} remote_sink;

/* Everything from off to the end of the object (len of a get). */
#define REMOTE_TO_END UINT64_MAX

typedef struct remote_ops {
    const char *name; /* "local", "s3": first word of every error */
    int (*init)(remote_storage *rs, remote_err *err);
    int (*put)(remote_storage *rs, const char *key, const remote_body *body, remote_err *err);
    /* Delivers bytes [off, off+len) clipped to the object; an offset at or
     * past the end delivers nothing and succeeds. */
    int (*get)(remote_storage *rs, const char *key, uint64_t off, uint64_t len,
               const remote_sink *sink, remote_err *err);
    int (*head)(remote_storage *rs, const char *key, bool *exists, uint64_t *size, remote_err *err);
    int (*del)(remote_storage *rs, const char *key, remote_err *err);
    int (*del_many)(remote_storage *rs, const char *const *keys, size_t n, remote_err *err);
    /* Appends to out (unsorted is fine: the front end sorts). */
    int (*list)(remote_storage *rs, const char *prefix, remote_listing *out, remote_err *err);
    void (*close)(remote_storage *rs);
} remote_ops;

struct remote_storage {
    const remote_ops *ops;
    remote_config cfg;
    char describe[4200];
    void *backend; /* the backend's own state */
};

extern const remote_ops remote_local_ops;
extern const remote_ops remote_s3_ops;

/* Backend set-up, called by remote_open after the common checks. */
int remote_local_open(remote_storage *rs, remote_err *err);
int remote_s3_open(remote_storage *rs, remote_err *err);

/* Sets err to "<fmt...>" and returns rc (a negative errno). */
int remote_fail(remote_err *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends one entry (key copied) to a listing; -ENOMEM on failure. */
int remote_listing_add(remote_listing *l, const char *key, size_t key_len, uint64_t size);

#endif
