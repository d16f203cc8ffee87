/*
 * redo_plan.h: deciding how a page is rebuilt from its versions (docs/design.md §6.5).
 *
 * For: turning a version_list (newest first, as store_get_versions returns
 * it) into a plan: where to start (an image, an all-zero page, or nothing
 * because the first delta initialises the page) and the runs that follow,
 * oldest first: consecutive Postgres WAL records become one helper request,
 * consecutive pageserver deltas (CLOG, VM clear, multixact) one synthetic
 * step applied in C.  Pure: no IO, no allocation, so it is unit-tested
 * without processes and reused by the benchmark.
 *
 * Not for: applying anything (redo.c, redo_synthetic.c).
 *
 * Threads: any; no state.
 */
#ifndef STRATA_PAGESERVER_REDO_PLAN_H
#define STRATA_PAGESERVER_REDO_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "pageserver/store/key.h"
#include "pageserver/store/store.h"

typedef enum redo_base_kind {
    REDO_BASE_ZERO = 1,  /* start from an all-zero page (VAL_ZERO_PAGE, or an incomplete list) */
    REDO_BASE_IMAGE,     /* start from the VAL_IMAGE at base_index */
    REDO_BASE_WILL_INIT, /* the delta at base_index initialises the page: no base */
} redo_base_kind;

typedef enum redo_step_kind {
    REDO_STEP_HELPER = 1, /* VAL_WAL_RECORDs, sent to a redo helper as one request */
    REDO_STEP_SYNTHETIC,  /* pageserver deltas, applied by redo_synthetic_apply */
} redo_step_kind;

/* Entries vl->value[first], vl->value[first - 1], ... vl->value[first - count + 1]
 * (oldest to newest: indices go down because the list is newest first). */
typedef struct redo_step {
    redo_step_kind kind;
    int first;
    int count;
} redo_step;

typedef struct redo_plan {
    redo_base_kind base;
    int base_index; /* the image or will-init delta; -1 for REDO_BASE_ZERO without a value */
    int nsteps;
    redo_step *steps; /* the caller's array */
    int records;      /* WAL records in helper steps */
    int synthetic;    /* deltas in synthetic steps */
} redo_plan;

/*
 * Plans the rebuild of the newest version in vl.  Starts at the newest
 * complete value (value_is_complete: an image, a zero page, or a delta
 * flagged VALUE_WILL_INIT), or from a zero page if none is in the list
 * (complete or not, as redo.h promises).  steps (cap entries; vl->n is
 * always enough) receives the runs.  An empty list plans a zero page with no
 * steps.  Returns 0, or -1 with *why (static string) when the list holds a
 * value that is not part of a page (VAL_SIZE, VAL_TOMBSTONE, VAL_BLOB, an
 * unknown kind) or cap is too small.
 */
int redo_plan_make(const version_list *vl, redo_step *steps, int cap, redo_plan *out,
                   const char **why);

/* True for the delta kinds redo_synthetic applies (by kind alone; redo_plan_make
 * also routes the smgr truncate record on a VM page there, see
 * redo_synthetic_is_vm_truncate). */
bool redo_plan_is_synthetic(uint8_t kind);

#endif
