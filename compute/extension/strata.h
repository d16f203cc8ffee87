/*
 * strata.h: what the files of strata.so share with each other.
 *
 * The GUC variables (defined and registered in strata.c, read-only for
 * everyone else) and the walproposer background worker's entry point.
 * Not an API for other programs: nothing here is exported from the module
 * except through _PG_init and the worker entry point that the postmaster
 * looks up by name.
 */
#ifndef STRATA_EXTENSION_STRATA_H
#define STRATA_EXTENSION_STRATA_H

#include "postgres.h"

/* strata.safekeepers: "host:port,host:port,host:port"; NULL or "" = none. */
extern char *strata_safekeepers;
/* strata.tenant_id / strata.timeline_id: 32 hex digits, validated. */
extern char *strata_tenant_id;
extern char *strata_timeline_id;
/* strata.safekeeper_password: sent to safekeepers when set. */
extern char *strata_safekeeper_password;
extern bool strata_allow_timeline_creation;
extern char *strata_pageserver_password;
/* strata.safekeeper_connect_timeout (ms): a connect attempt that takes
 * longer is abandoned and retried. */
extern int strata_safekeeper_connect_timeout;
/* strata.safekeeper_reconnect_delay (ms): first backoff after a failure;
 * doubles per failure up to strata.safekeeper_reconnect_max_delay. */
extern int strata_safekeeper_reconnect_delay;
extern int strata_safekeeper_reconnect_max_delay;
/* strata.safekeeper_heartbeat_interval (ms): an idle safekeeper gets an
 * empty append this often.  strata.safekeeper_timeout (ms): a connected
 * safekeeper silent this long is dropped and reconnected. */
extern int strata_safekeeper_heartbeat_interval;
extern int strata_safekeeper_timeout;
/* strata.commit_notice_delay (ms): a new commit LSN (or pageserver feedback)
 * for a safekeeper with no WAL to send waits this long for a WAL append to
 * carry it before it goes alone; 0: at once. */
extern int strata_commit_notice_delay;
/* strata.wal_buffer_size (kB): WAL kept in memory for lagging acceptors. */
extern int strata_wal_buffer_size;
/* strata.local_user: role for the replication connection to the own
 * postmaster; "" = libpq's default (the OS user). */
extern char *strata_local_user;

/* The walproposer background worker (walproposer_pg.c). */
extern PGDLLEXPORT void strata_walproposer_main(Datum arg);

/* Registers the worker; called from _PG_init during preload. */
extern void strata_walproposer_register(void);

/* Installs the ALTER SYSTEM hook (alter_system.c); called from _PG_init. */
extern void strata_alter_system_setup(void);

#endif
