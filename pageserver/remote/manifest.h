/*
 * manifest.h: the manifest of a timeline in object storage
 * (docs/storage.md, "Remote storage").
 *
 * For: the JSON object that says which remote data files make up a
 * timeline's store and which LSN they make consistent, its exact encoding
 * and a decoder that checks everything; the keys of a timeline's remote
 * objects; finding the newest manifest of a timeline.
 * Not for: deciding what to upload or when (uploader.h), restoring a store
 * from the files (the restore).
 *
 * Layout of a timeline's objects (keys relative to the remote store):
 *   tenants/<tenant>/timelines/<timeline>/data/<16 hex file id>.dat
 *   tenants/<tenant>/timelines/<timeline>/manifest/<16 hex seq>.json
 * A manifest is a new object per upload, never overwritten; the newest is
 * the one with the highest seq.  Every data file a manifest names was
 * uploaded (its PUT returned) before the manifest was PUT.
 *
 * The JSON (version 1):
 *   {"version": 1, "tenant_id": "<32 hex>", "timeline_id": "<32 hex>",
 *    "seq": N, "consistent_lsn": "X/Y", "gc_horizon": "X/Y",
 *    "start_lsn": "X/Y", "safekeepers": ["host:port", ...],
 *    "next_file_id": N,
 *    "files": [{"id": N, "size": BYTES, "lsn_min": "X/Y", "lsn_max": "X/Y"}, ...],
 *    optionally "ancestor_timeline_id": "<32 hex>", "ancestor_lsn": "X/Y"}
 * The two optional members describe a branch (timeline/timeline.h): both
 * or neither, ancestor_lsn equal to start_lsn, the ancestor not the
 * timeline itself; a restore writes them back into timeline.json and
 * restores the ancestor before the branch.
 * Numbers are non-negative integers below 2^53 (exact in JSON);
 * consistent_lsn is the store's disk_consistent_lsn read in the same LMDB
 * transaction as the file list; gc_horizon is "0/0" before any GC.
 * Decoding refuses (with a message naming the field): a version other than
 * 1, a missing or mistyped field, a bad id or LSN, seq 0, gc_horizon above
 * consistent_lsn, more than TIMELINE_MAX_SAFEKEEPERS safekeepers or an
 * empty, over-long or control-character safekeeper address, file ids not
 * strictly ascending (unsorted or duplicate), a file id of 0 or not below
 * next_file_id, lsn_min > lsn_max, and anything that is not one complete
 * JSON object (truncated text, trailing bytes).  Unknown members are
 * ignored, so a later writer may add optional ones without a new version.
 *
 * Threads: pure functions, any thread; manifest_fetch_newest blocks on the
 * remote store (worker threads only).
 */
#ifndef STRATA_PAGESERVER_REMOTE_MANIFEST_H
#define STRATA_PAGESERVER_REMOTE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "base/must_check.h"
#include "net/remote_storage.h"
#include "pageserver/timeline/files.h"

#define MANIFEST_VERSION 1
/* Largest manifest object manifest_fetch_newest downloads. */
#define MANIFEST_MAX_BYTES (256u * 1024 * 1024)
/* Largest integer a manifest may hold (2^53 - 1: every integer up to it is
 * exact as a JSON number, and a larger one cannot round down into range). */
#define MANIFEST_MAX_INT ((UINT64_C(1) << 53) - 1)
/* Room for any key this module builds. */
#define MANIFEST_KEY_LEN 160

typedef struct manifest_file {
    uint64_t id, size;
    lsn_t lsn_min, lsn_max; /* LSN range of the file's entries (0/0, 0/0 when none) */
} manifest_file;

typedef struct manifest {
    uint64_t seq;
    strata_id tenant, timeline;
    lsn_t consistent_lsn, gc_horizon, start_lsn;
    int n_safekeepers;
    char safekeepers[TIMELINE_MAX_SAFEKEEPERS][TIMELINE_SAFEKEEPER_LEN];
    uint64_t next_file_id;
    size_t n_files;
    manifest_file *files; /* n_files, ids strictly ascending; malloc'd */
    bool has_ancestor;    /* a branch: the two below are set */
    strata_id ancestor_timeline;
    lsn_t ancestor_lsn; /* == start_lsn */
} manifest;

/* The JSON text of m in a malloc'd buffer (caller frees *out with free();
 * NUL-terminated, *len excludes the NUL).  Refuses (-1 with err) a manifest
 * manifest_decode would refuse, so whatever is written can be read back. */
STRATA_MUST_CHECK int manifest_encode(const manifest *m, char **out, size_t *len, char *err,
                                      size_t errlen);

/* Parses and checks len bytes of JSON into *out (free with manifest_free).
 * 0, or -1 with err and *out zeroed (nothing to free). */
STRATA_MUST_CHECK int manifest_decode(const void *buf, size_t len, manifest *out, char *err,
                                      size_t errlen);

/* Frees m->files and zeroes m.  NULL or a zeroed manifest is fine. */
void manifest_free(manifest *m);

/* The checks manifest_decode applies, on a manifest in memory: 0 or -1 with
 * err naming what is wrong. */
STRATA_MUST_CHECK int manifest_check(const manifest *m, char *err, size_t errlen);

/* Keys (out holds at least MANIFEST_KEY_LEN bytes). */
void manifest_key(const strata_id *tenant, const strata_id *timeline, uint64_t seq, char *out,
                  size_t len);
void manifest_data_key(const strata_id *tenant, const strata_id *timeline, uint64_t file_id,
                       char *out, size_t len);
/* "tenants/<t>/timelines/<l>/manifest/" and ".../data/": the listing prefixes. */
void manifest_prefix(const strata_id *tenant, const strata_id *timeline, char *out, size_t len);
void manifest_data_prefix(const strata_id *tenant, const strata_id *timeline, char *out,
                          size_t len);
/* "tenants/<t>/timelines/<tl>/wal/": the safekeepers' WAL backup
 * (safekeeper/wal_backup.h), which the pageserver reads and, when the
 * timeline is deleted, deletes. */
void manifest_wal_prefix(const strata_id *tenant, const strata_id *timeline, char *out, size_t len);

/* The seq of a key "<prefix><16 hex>.json" / the file id of a key
 * "<prefix><16 hex>.dat" (prefix from the functions above): true and *out,
 * or false when key is anything else. */
bool manifest_key_seq(const char *prefix, const char *key, uint64_t *out);
bool manifest_data_key_id(const char *prefix, const char *key, uint64_t *out);

/*
 * The newest manifest of a timeline: lists the manifest/ prefix, takes the
 * highest seq, downloads and decodes it, and checks that it names this
 * tenant, timeline and seq.  0 with *out (free with manifest_free); -ENOENT
 * when the timeline has no manifest; -EPROTO when the newest one is not a
 * valid manifest; another negative remote_storage code when the store
 * fails.  err says why in every failure.
 */
STRATA_MUST_CHECK int manifest_fetch_newest(remote_storage *rs, const strata_id *tenant,
                                            const strata_id *timeline, manifest *out, char *err,
                                            size_t errlen);

#endif
