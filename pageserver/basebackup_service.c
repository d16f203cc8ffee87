/*
 * basebackup_service.c: the "basebackup" command (see basebackup_service.h).
 *
 * Until the streaming path lands this refuses the command with a clear
 * error, so a compute launcher fails fast instead of waiting.
 */
#include "pageserver/basebackup_service.h"

void basebackup_service_query(uv_loop_t *loop, pgwire_conn *c, tenants *t, const char *sql)
{
    (void)loop;
    (void)t;
    (void)sql;
    pgwire_send_error(c, "ERROR", "0A000", "basebackup is not available on this pageserver yet",
                      NULL);
}
