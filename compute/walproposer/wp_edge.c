/*
 * wp_edge.c: connection parameters, backoff and message sending shared by
 * the walproposer worker and sync-safekeepers.  See wp_edge.h.
 */
#include "compute/walproposer/wp_edge.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

void wp_edge_safekeeper_params(wp_edge_params *p, const char *host, const char *port,
                               const strata_id *tenant, const strata_id *timeline,
                               const char *application_name, int connect_timeout_s,
                               const char *password)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    int n = 0;

    snprintf(p->options, sizeof(p->options), "-c tenant_id=%s -c timeline_id=%s",
             strata_id_format(tenant, t), strata_id_format(timeline, l));
    snprintf(p->connect_timeout, sizeof(p->connect_timeout), "%d",
             connect_timeout_s < 1 ? 1 : connect_timeout_s);
    snprintf(p->query, sizeof(p->query), "START_WAL_PUSH (proto_version '%d')",
             WALPUSH_PROTO_VERSION);
    p->keys[n] = "host", p->vals[n++] = host;
    p->keys[n] = "port", p->vals[n++] = port;
    p->keys[n] = "dbname", p->vals[n++] = "replication";
    p->keys[n] = "options", p->vals[n++] = p->options;
    p->keys[n] = "application_name", p->vals[n++] = application_name;
    p->keys[n] = "connect_timeout", p->vals[n++] = p->connect_timeout;
    if (password != NULL && password[0] != '\0')
        p->keys[n] = "password", p->vals[n++] = password;
    assert(n < PQSTREAM_MAX_PARAMS);
    p->keys[n] = NULL, p->vals[n] = NULL;
}

uint32_t wp_edge_backoff(uint32_t prev_ms, uint64_t up_ms, uint32_t min_ms, uint32_t max_ms)
{
    assert(min_ms >= 1 && min_ms <= max_ms);
    if (prev_ms == 0 || up_ms > max_ms)
        return min_ms;
    if (prev_ms > max_ms / 2)
        return max_ms;
    return prev_ms * 2;
}

wp_edge_send_result wp_edge_send(pqstream *s, const proposer_msg *msg, uint8_t *scratch, size_t cap)
{
    size_t len = walpush_encode_proposer_msg(msg, scratch, cap);

    if (len == 0)
        return WP_EDGE_ENCODE_FAILED;
    return pqstream_send(s, scratch, len) == 0 ? WP_EDGE_SENT : WP_EDGE_SEND_FAILED;
}

bool wp_edge_append_msg(const append_request *ar, const uint8_t *wal, proposer_msg *out)
{
    if (ar->end_lsn < ar->begin_lsn || ar->end_lsn - ar->begin_lsn > WALPUSH_MAX_APPEND)
        return false;
    memset(out, 0, sizeof(*out));
    out->kind = PMSG_APPEND;
    out->u.append = *ar;
    out->u.append.wal = wal;
    out->u.append.wal_len = (uint32_t)(ar->end_lsn - ar->begin_lsn);
    return true;
}

int wp_edge_take_failed(uint32_t *failed)
{
    if (*failed == 0)
        return -1;
    int i = __builtin_ctz(*failed);
    *failed &= ~(1u << i);
    return i;
}
