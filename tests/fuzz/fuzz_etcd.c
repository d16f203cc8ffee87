/*
 * fuzz_etcd.c: libFuzzer target for the decoders of etcd's v3 JSON gateway
 * answers (common/net/etcd.h) and its base64.
 *
 * For: every input goes through every decoder; each must accept it with
 * results that keep the header's promises or reject it with a reason,
 * never crash, leak or read out of bounds.
 * Not for: requests (tests/integration/test_etcd.py runs a real etcd).
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/etcd.h"

static void check_kv(const etcd_kv *kv)
{
    assert(kv->key != NULL && kv->key[0] != '\0' && strlen(kv->key) <= ETCD_MAX_KEY);
    assert(kv->value != NULL && kv->value[kv->value_len] == '\0');
    assert(kv->create_revision >= 1 && kv->mod_revision >= kv->create_revision);
    assert(kv->version >= 1 && kv->lease >= 0);
}

static void fuzz_range(const char *body, size_t size)
{
    char err[ETCD_MAX_ERR] = "";
    etcd_range r;
    if (etcd_decode_range(body, size, 4, &r, err, sizeof err) == 0) {
        assert(r.n <= 4 && (int64_t)r.n <= r.count && r.revision >= 1);
        for (size_t i = 0; i < r.n; i++) {
            check_kv(&r.kvs[i]);
            assert(i == 0 || strcmp(r.kvs[i - 1].key, r.kvs[i].key) < 0);
        }
        etcd_range_free(&r);
    } else {
        assert(err[0] != '\0' && r.n == 0 && r.kvs == NULL);
    }
}

static void fuzz_txn(const char *body, size_t size)
{
    char err[ETCD_MAX_ERR] = "";
    etcd_txn_result t;
    if (etcd_decode_txn(body, size, &t, err, sizeof err) == 0) {
        assert(t.revision >= 1);
        if (t.current.key != NULL)
            check_kv(&t.current);
        assert(!t.succeeded || t.current.key == NULL);
        etcd_txn_result_free(&t);
    } else {
        assert(err[0] != '\0' && t.current.key == NULL);
    }
}

static void fuzz_small(const char *body, size_t size)
{
    char err[ETCD_MAX_ERR] = "";
    int64_t a = 0, b = 0;
    if (etcd_decode_header(body, size, &a, err, sizeof err) == 0)
        assert(a >= 1);
    else
        assert(err[0] != '\0');
    err[0] = '\0';
    if (etcd_decode_delete(body, size, &a, err, sizeof err) == 0)
        assert(a >= 0);
    else
        assert(err[0] != '\0');
    err[0] = '\0';
    if (etcd_decode_lease_grant(body, size, &a, &b, err, sizeof err) == 0)
        assert(a >= 1 && b >= 1);
    else
        assert(err[0] != '\0');
    err[0] = '\0';
    if (etcd_decode_keepalive(body, size, &a, &b, err, sizeof err) == 0)
        assert(a >= 1 && b >= 0);
    else
        assert(err[0] != '\0');
    err[0] = '\0';
    etcd_error e;
    if (etcd_decode_error(body, size, &e, err, sizeof err) == 0)
        assert(e.message[0] != '\0' && e.code >= -1 && e.code <= 16);
    else
        assert(err[0] != '\0');
}

static void fuzz_base64(const char *body, size_t size)
{
    unsigned char *out = malloc(size / 4 * 3 + 1);
    const char *why = NULL;
    size_t n = 0;
    if (out == NULL)
        return;
    if (etcd_base64_decode(body, size, out, &n, &why) == 0) {
        /* Canonical: encoding the bytes again gives the input back. */
        char *again = malloc(etcd_base64_len(n) + 1);
        assert(n <= size / 4 * 3 && again != NULL);
        etcd_base64_encode(out, n, again);
        assert(strlen(again) == size && memcmp(again, body, size) == 0);
        free(again);
    } else {
        assert(why != NULL);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    fuzz_range(body, size);
    fuzz_txn(body, size);
    fuzz_small(body, size);
    fuzz_base64(body, size);
    return 0;
}
