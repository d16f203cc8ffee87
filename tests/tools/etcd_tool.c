/*
 * etcd_tool.c: strata-etcd-tool, one call of common/net/etcd.h per run, for
 * tests/integration/test_etcd.py against a real etcd.
 *
 * For: driving the client from a test: each command prints one line of
 * JSON on stdout and exits 0, or prints the client's error on stderr and
 * exits 1.  Values are text.
 * Not for: operators (etcdctl is the tool for looking at etcd by hand).
 *
 *   strata-etcd-tool ENDPOINTS TIMEOUT_MS get KEY
 *   ... prefix PREFIX MAX | put KEY VALUE [LEASE] | del KEY
 *   ... put-if KEY VALUE MOD_REVISION [LEASE] | grant TTL | keepalive ID | revoke ID
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/etcd.h"

static void print_kv(const etcd_kv *kv)
{
    printf("{\"key\":\"%s\",\"value\":\"%s\",\"create_revision\":%" PRId64
           ",\"mod_revision\":%" PRId64 ",\"version\":%" PRId64 ",\"lease\":%" PRId64 "}",
           kv->key, kv->value, kv->create_revision, kv->mod_revision, kv->version, kv->lease);
}

static int64_t number(const char *s)
{
    return s != NULL ? strtoll(s, NULL, 10) : 0;
}

static int run_kv(etcd_client *c, int argc, char **argv, char *err, size_t errlen)
{
    const char *cmd = argv[3], *key = argv[4];
    if (strcmp(cmd, "get") == 0) {
        etcd_kv kv;
        int rc = etcd_get(c, key, &kv, err, errlen);
        if (rc == 1) {
            printf("{\"found\":true,\"kv\":");
            print_kv(&kv);
            printf("}\n");
            etcd_kv_free(&kv);
        } else if (rc == 0) {
            printf("{\"found\":false}\n");
        }
        return rc < 0 ? -1 : 0;
    }
    if (strcmp(cmd, "prefix") == 0 && argc >= 6) {
        etcd_range r;
        if (etcd_get_prefix(c, key, (size_t)number(argv[5]), &r, err, errlen) != 0)
            return -1;
        printf("{\"more\":%s,\"count\":%" PRId64 ",\"kvs\":[", r.more ? "true" : "false", r.count);
        for (size_t i = 0; i < r.n; i++) {
            printf(i ? "," : "");
            print_kv(&r.kvs[i]);
        }
        printf("]}\n");
        etcd_range_free(&r);
        return 0;
    }
    if (strcmp(cmd, "put") == 0 && argc >= 6) {
        int64_t rev = 0;
        if (etcd_put(c, key, argv[5], strlen(argv[5]), number(argv[6]), &rev, err, errlen) != 0)
            return -1;
        printf("{\"revision\":%" PRId64 "}\n", rev);
        return 0;
    }
    if (strcmp(cmd, "del") == 0) {
        int rc = etcd_delete(c, key, err, errlen);
        if (rc >= 0)
            printf("{\"deleted\":%d}\n", rc);
        return rc < 0 ? -1 : 0;
    }
    if (strcmp(cmd, "put-if") == 0 && argc >= 7) {
        etcd_txn_result t;
        int rc = etcd_put_if(c, key, argv[5], strlen(argv[5]), number(argv[6]), number(argv[7]), &t,
                             err, errlen);
        if (rc < 0)
            return -1;
        printf("{\"succeeded\":%s,\"revision\":%" PRId64 ",\"current\":", rc ? "true" : "false",
               t.revision);
        if (t.current.key != NULL)
            print_kv(&t.current);
        else
            printf("null");
        printf("}\n");
        etcd_txn_result_free(&t);
        return 0;
    }
    fprintf(stderr, "strata-etcd-tool: unknown command or missing arguments: %s\n", cmd);
    return -2;
}

static int run_lease(etcd_client *c, const char *cmd, const char *arg, char *err, size_t errlen)
{
    int64_t id = 0, ttl = 0;
    int rc;
    if (strcmp(cmd, "grant") == 0) {
        if ((rc = etcd_lease_grant(c, number(arg), &id, &ttl, err, errlen)) == 0)
            printf("{\"id\":%" PRId64 ",\"ttl\":%" PRId64 "}\n", id, ttl);
    } else if (strcmp(cmd, "keepalive") == 0) {
        if ((rc = etcd_lease_keepalive(c, number(arg), &ttl, err, errlen)) >= 0)
            printf("{\"alive\":%s,\"ttl\":%" PRId64 "}\n", rc ? "true" : "false", ttl);
    } else {
        if ((rc = etcd_lease_revoke(c, number(arg), err, errlen)) >= 0)
            printf("{\"revoked\":%s}\n", rc ? "true" : "false");
    }
    return rc < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: strata-etcd-tool ENDPOINTS TIMEOUT_MS COMMAND ARGS...\n");
        return 2;
    }
    char err[ETCD_MAX_ERR] = "";
    etcd_client *c = etcd_open(argv[1], atoi(argv[2]), err, sizeof err);
    if (c == NULL) {
        fprintf(stderr, "strata-etcd-tool: %s\n", err);
        return 1;
    }
    const char *cmd = argv[3];
    int rc =
        strcmp(cmd, "grant") == 0 || strcmp(cmd, "keepalive") == 0 || strcmp(cmd, "revoke") == 0
            ? run_lease(c, cmd, argv[4], err, sizeof err)
            : run_kv(c, argc, argv, err, sizeof err);
    etcd_close(c);
    if (rc == -1)
        fprintf(stderr, "strata-etcd-tool: %s\n", err);
    return rc == 0 ? 0 : rc == -2 ? 2 : 1;
}
