/*
 * upload_status.h: what a timeline's uploader (uploader.h) reports, on its
 * own so that timeline.h can carry it without including the uploader.
 */
#ifndef STRATA_PAGESERVER_REMOTE_UPLOAD_STATUS_H
#define STRATA_PAGESERVER_REMOTE_UPLOAD_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"

typedef struct uploader_status {
    lsn_t remote_consistent_lsn;
    uint64_t manifest_seq;  /* newest durable manifest, 0 none */
    uint64_t files_pending; /* live local files not uploaded yet (last look) */
    uint64_t bytes_pending;
    uint64_t files_uploaded, bytes_uploaded, manifests_uploaded; /* this process */
    uint64_t errors;                                             /* failed attempts, this process */
    uint64_t objects_deleted; /* by remote GC and the start sweep */
    bool failing;             /* the last attempt failed */
    int64_t last_error_time;  /* Unix seconds, 0 none */
    char last_error[512];     /* kept after recovery, for the record */
    int64_t last_upload_time; /* Unix seconds of the last manifest, 0 none */
} uploader_status;

#endif
