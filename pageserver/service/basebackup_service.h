/*
 * basebackup_service.h: the "basebackup" command of the pageserver's
 * wire-protocol port (docs/design.md §3.5, §6.9).
 *
 * For: answering `basebackup <tenant_id> <timeline_id> <lsn> [full]` on a
 * connection of the page service: checks the arguments, waits (bounded) for
 * the LSN to be ingested, and streams basebackup.h's tar archive as CopyOut
 * data, off the event loop.
 * Not for: the archive's contents (basebackup.c), pagestream requests
 * (page_service.c), which only dispatches the command here.
 *
 * Threads: called on the page service's loop thread; any work that reads
 * pages runs elsewhere and hands chunks back to the loop.
 * Errors: every refusal is an ErrorResponse on c that says what was wrong
 * (unknown timeline, malformed or misaligned LSN, LSN not ingested in time,
 * LSN below the GC horizon); other connections are not affected.
 */
#ifndef STRATA_PAGESERVER_BASEBACKUP_SERVICE_H
#define STRATA_PAGESERVER_BASEBACKUP_SERVICE_H

#include <uv.h>

#include "net/pgwire.h"
#include "pageserver/timeline/tenants.h"

/* How long a basebackup waits for its LSN to be ingested. */
#define BASEBACKUP_SERVICE_WAIT_MS 60000

/* sql is the whole query text (starts with "basebackup").  At most 4
 * basebackups run at once; more get SQLSTATE 53300. */
void basebackup_service_query(uv_loop_t *loop, pgwire_conn *c, tenants *t, const char *sql);

/* Splits a simple query's text s (changed in place) into its words
 * (separated by blanks or ';'): their number, at most max, or max + 1 when
 * there are more.  The one command splitter of the page service and this
 * service. */
int basebackup_service_split_words(char *s, char *words[], int max);

/* The page service MUST call this from its on_close for every connection
 * (a no-op when c runs no basebackup): the running basebackup is cancelled
 * and c is never touched again. */
void basebackup_service_conn_closed(pgwire_conn *c);

/* Optional, from on_writable: resumes sending at once (otherwise a 5 ms
 * timer retries while the connection is congested). */
void basebackup_service_conn_writable(pgwire_conn *c);

#endif
