/*
 * compute_readonly.c: read-only computes.  See compute_readonly.h.
 */
#include "cli/compute_readonly.h"

#include <string.h>

int compute_start_read_only(const cluster *view, bool has_lsn, lsn_t lsn, compute_start_report *rep,
                            cli_err *err)
{
    (void)has_lsn;
    (void)lsn;
    memset(rep, 0, sizeof *rep);
    return cli_err_set(err, "read-only computes are not supported yet (compute %s)",
                       compute_label(view));
}
