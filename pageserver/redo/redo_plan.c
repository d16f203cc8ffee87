/*
 * redo_plan.c: the pure page-rebuild planner.  See redo_plan.h.
 *
 * Not for: IO or applying values.
 */
#include "pageserver/redo/redo_plan.h"

#include "base/strata_assert.h"
#include "pageserver/redo/redo_synthetic.h"

bool redo_plan_is_synthetic(uint8_t kind)
{
    return kind == VAL_CLOG_SET || kind == VAL_VM_CLEAR || kind == VAL_MXACT_OFFSET ||
           kind == VAL_MXACT_MEMBERS;
}

/* A value redo_synthetic applies: a synthetic delta, or the smgr truncate
 * record ingest stores on a visibility-map page. */
static bool applied_in_c(const value_ref *v)
{
    return redo_plan_is_synthetic(v->kind) || redo_synthetic_is_vm_truncate(v);
}

static bool is_complete(const value_ref *v)
{
    /* value_is_complete() (key.c), restated for the kinds a page can hold so
     * the planner stays pure and self-contained. */
    return v->kind == VAL_IMAGE || v->kind == VAL_ZERO_PAGE ||
           ((v->kind == VAL_WAL_RECORD || redo_plan_is_synthetic(v->kind)) &&
            (v->flags & VALUE_WILL_INIT) != 0);
}

int redo_plan_make(const version_list *vl, redo_step *steps, int cap, redo_plan *out,
                   const char **why)
{
    out->base = REDO_BASE_ZERO;
    out->base_index = -1;
    out->nsteps = 0;
    out->steps = steps;
    out->records = 0;
    out->synthetic = 0;

    for (int i = 0; i < vl->n; i++) {
        uint8_t kind = vl->value[i].kind;
        if (kind != VAL_IMAGE && kind != VAL_ZERO_PAGE && kind != VAL_WAL_RECORD &&
            !redo_plan_is_synthetic(kind)) {
            *why = "a version of the page is not a page value (size, tombstone or blob)";
            return -1;
        }
    }

    /* The newest complete value is where the rebuild starts. */
    int start = vl->n - 1;
    for (int i = 0; i < vl->n; i++) {
        if (is_complete(&vl->value[i])) {
            start = i;
            break;
        }
    }
    int next = start; /* the oldest value still to apply */
    if (vl->n > 0 && is_complete(&vl->value[start])) {
        out->base_index = start;
        if (vl->value[start].kind == VAL_IMAGE) {
            out->base = REDO_BASE_IMAGE;
            next = start - 1;
        } else if (vl->value[start].kind == VAL_ZERO_PAGE) {
            out->base = REDO_BASE_ZERO;
            next = start - 1;
        } else {
            out->base = REDO_BASE_WILL_INIT;
        }
    }

    while (next >= 0) {
        bool synthetic = applied_in_c(&vl->value[next]);
        int count = 0;
        while (next - count >= 0 && applied_in_c(&vl->value[next - count]) == synthetic)
            count++;
        if (out->nsteps >= cap) {
            *why = "too many redo steps for the caller's plan";
            return -1;
        }
        steps[out->nsteps++] = (redo_step){
            .kind = synthetic ? REDO_STEP_SYNTHETIC : REDO_STEP_HELPER,
            .first = next,
            .count = count,
        };
        if (synthetic)
            out->synthetic += count;
        else
            out->records += count;
        next -= count;
    }
    STRATA_ASSERT(out->nsteps <= vl->n);
    return 0;
}
