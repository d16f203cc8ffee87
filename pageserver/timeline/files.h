/*
 * files.h: what a timeline's directory holds, and the codecs of its own
 * files -- the ground floor of pageserver/timeline/.
 *
 *   timeline.json   {"tenant_id", "timeline_id", "start_lsn", "safekeepers",
 *                    optionally "ancestor_timeline_id", "ancestor_lsn"}
 *                   written durably once at creation (timeline_meta)
 *   gc_horizon      "X/Y\n", the GC horizon, written durably before each GC
 *                   (docs/design.md §6.7); absent before the first one
 *   store/          the page-version store (store.h)
 *
 * For: the timeline_meta type, timeline.json's text and parser, the
 * GC-horizon file, the directory names, and writing a directory's own
 * files at once (a timeline restored from object storage,
 * pageserver/remote/restore.h).  Includes nothing of the pageserver:
 * pageserver/remote/ builds on it without seeing the timeline.
 * Not for: opening a timeline (timeline.h), where directories live
 * (tenants.h), the store's own files (store.h).
 *
 * Errors: 0 or -1 with a message naming the path and the cause in err.
 * Threads: pure functions and plain file IO, any thread.
 */
#ifndef STRATA_PAGESERVER_TIMELINE_FILES_H
#define STRATA_PAGESERVER_TIMELINE_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/lsn.h"

#define TIMELINE_META_FILE "timeline.json"
#define TIMELINE_STORE_DIR "store"
#define TIMELINE_GC_FILE "gc_horizon" /* "X/Y\n", written durably before each GC */
#define TIMELINE_MAX_SAFEKEEPERS 16
#define TIMELINE_SAFEKEEPER_LEN 128

/* What timeline.json holds. */
typedef struct timeline_meta {
    strata_id tenant;
    strata_id timeline;
    lsn_t start_lsn; /* where the timeline begins (import LSN, or the branch point) */
    int n_safekeepers;
    char safekeepers[TIMELINE_MAX_SAFEKEEPERS][TIMELINE_SAFEKEEPER_LEN];
    bool has_ancestor;           /* a branch: the two fields below are set */
    strata_id ancestor_timeline; /* same tenant */
    lsn_t ancestor_lsn;          /* the branch point; == start_lsn */
} timeline_meta;

/* Writes a timeline directory's own files durably: timeline.json from m,
 * and TIMELINE_GC_FILE with gc_horizon unless it is LSN_INVALID (a
 * timeline restored from object storage, pageserver/remote/restore.h).
 * 0 or -1 with err. */
int timeline_write_files(const char *dir, const timeline_meta *m, lsn_t gc_horizon, char *err,
                         size_t errlen);

/* Writes dir/timeline.json from m durably.  0 or -1 with err. */
int timeline_meta_write(const char *dir, const timeline_meta *m, char *err, size_t errlen);

/* Reads and checks dir/timeline.json.  0 or -1 with err. */
int timeline_meta_read(const char *dir, timeline_meta *out, char *err, size_t errlen);

/* timeline.json's text for m (malloc'd, caller frees), and its parser
 * (path names the source in the error; 0 or -1 with err).  The parser
 * checks an ancestor's fields: both or neither, start_lsn == ancestor_lsn,
 * the ancestor is not the timeline itself. */
char *timeline_meta_to_json(const timeline_meta *m);
int timeline_meta_parse(const char *text, size_t len, const char *path, timeline_meta *out,
                        char *err, size_t errlen);

/* The persisted GC horizon of dir: 0 (LSN_INVALID in *out when there is
 * none), or -1 with err when the file exists but cannot be read or parsed. */
int timeline_gc_file_read(const char *dir, lsn_t *out, char *err, size_t errlen);
/* Writes it durably.  0 or -1 with err. */
int timeline_gc_file_write(const char *dir, lsn_t horizon, char *err, size_t errlen);

/* dir's store directory ("dir/store") into out. */
void timeline_store_dir(const char *dir, char *out, size_t len);

#endif
