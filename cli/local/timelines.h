/*
 * timelines.h: the cluster's named timelines and named computes, kept in
 * D/timelines.json (written with durable_write_file).
 *
 * The default timeline is "main": cluster.json's timeline_id, never in the
 * file.  Every branch made by `strata timeline branch` (or `strata
 * restore`) is: its name, its id, its parent's name and the LSN it branched
 * at (= its start LSN on the pageserver, where its first compute begins
 * while no safekeeper has its WAL).  The named computes (`strata start
 * compute NAME --timeline T`) are there too: name, timeline name, port
 * (picked at their first start and kept), read-only and the pinned LSN of a
 * static read-only compute.  The default compute "compute" runs on main and
 * is not in the file either.
 *
 * A file without a key (or no file) is an empty registry.  Callers hold the
 * cluster lock (cluster_lock, cluster.h) around load, change, save.
 *
 * Not for: talking to the pageserver (cmd_timeline.c) or running computes
 * (compute.h).
 */
#ifndef STRATA_CLI_TIMELINES_H
#define STRATA_CLI_TIMELINES_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"

#define TIMELINES_FILE "timelines.json"
#define TIMELINES_MAX 256
#define TIMELINES_MAIN "main"
#define TIMELINES_DEFAULT_COMPUTE "compute"

typedef struct timeline_entry {
    char name[CLUSTER_COMPUTE_NAME_LEN];
    strata_id id;
    char parent[CLUSTER_COMPUTE_NAME_LEN]; /* "" for main */
    lsn_t branch_lsn;                      /* its start LSN; for main the import LSN */
} timeline_entry;

typedef struct compute_entry {
    char name[CLUSTER_COMPUTE_NAME_LEN];
    char timeline[CLUSTER_COMPUTE_NAME_LEN];
    int port;
    bool read_only;
    bool has_lsn; /* read-only and pinned at lsn */
    lsn_t lsn;
} compute_entry;

typedef struct timeline_registry {
    int ntimelines; /* timelines[0] is main, from cluster.json */
    timeline_entry timelines[TIMELINES_MAX];
    int ncomputes; /* computes[0] is the default compute */
    compute_entry computes[TIMELINES_MAX];
} timeline_registry;

/* Reads D/timelines.json (none: only main and the default compute).
 * 0, or -1 with a reason. */
int timelines_load(const cluster *c, timeline_registry *r, cli_err *err);

/* Parses the text of D/timelines.json (what names it in errors); the
 * decoder timelines_load uses.  0, or -1 with a reason. */
int timelines_parse(const cluster *c, const char *what, const char *text, size_t len,
                    timeline_registry *r, cli_err *err);

/* Only main and the default compute. */
void timelines_defaults(const cluster *c, timeline_registry *r);

/* Writes it durably (main and the default compute are left out).  0 or -1. */
int timelines_save(const cluster *c, const timeline_registry *r, cli_err *err);

/* A name for a timeline or compute: 1-31 of [A-Za-z0-9_.-], not starting
 * with '-' or '.'.  false with a reason. */
bool timelines_name_ok(const char *name, cli_err *err);

timeline_entry *timelines_find(timeline_registry *r, const char *name);
timeline_entry *timelines_find_id(timeline_registry *r, const strata_id *id);
compute_entry *timelines_find_compute(timeline_registry *r, const char *name);

/* Adds an entry (the name must be new; room is checked).  0 or -1. */
int timelines_add(timeline_registry *r, const timeline_entry *e, cli_err *err);
int timelines_add_compute(timeline_registry *r, const compute_entry *e, cli_err *err);
void timelines_remove(timeline_registry *r, const char *name);
void timelines_remove_compute(timeline_registry *r, const char *name);

/*
 * The cluster as the compute e sees it (cluster.h, compute_name): view is
 * a copy of c with the compute's name, port, timeline id and the
 * timeline's start LSN as pageserver_import_lsn.  The default compute's
 * view is c itself.  0, or -1 when its timeline is unknown.
 */
int timelines_compute_view(const cluster *c, timeline_registry *r, const compute_entry *e,
                           cluster *view, cli_err *err);

#endif
