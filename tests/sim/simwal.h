/*
 * simwal.h: a generator of synthetic but format-valid PostgreSQL 15 WAL for
 * the simulator and the consensus unit tests.
 *
 * For: producing records that common/pg/walformat.h's tracker accepts -- page
 * headers (the long one at segment starts), continuation headers with
 * xlp_rem_len for records spanning pages, xl_tot_len / xl_prev / xl_rmid /
 * xl_info / xl_crc set, MAXALIGN padding.  Not for: meaningful records; the
 * payload is a main-data block of filler bytes.
 *
 * WAL is written into a caller-owned window of memory that represents the
 * LSN range [base, base + cap).
 */
#ifndef STRATA_TESTS_SIMWAL_H
#define STRATA_TESTS_SIMWAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

typedef struct simwal {
    uint8_t *mem; /* byte at LSN l is mem[l - base] */
    lsn_t base;
    size_t cap;
    uint32_t seg_size;
    lsn_t pos;        /* next record starts here (8-aligned, maybe a page boundary) */
    lsn_t prev_start; /* start of the previous record, 0 if unknown */
} simwal;

/* Starts writing at pos (a record end or a page boundary); prev_start is the
 * previous record's start (0 if there is none or it is unknown). */
void simwal_init(simwal *w, uint8_t *mem, lsn_t base, size_t cap, uint32_t seg_size, lsn_t pos,
                 lsn_t prev_start);

/* Largest payload simwal_append takes: above a 1 MB segment, so that records
 * span segment boundaries whole. */
#define SIMWAL_MAX_PAYLOAD (1536u << 10)

/*
 * Appends one record with payload_len bytes of main data (filler derived from
 * seed).  Returns the record's end LSN (walformat.h convention), or 0 if it
 * does not fit in the window or payload_len exceeds SIMWAL_MAX_PAYLOAD.
 */
lsn_t simwal_append(simwal *w, uint32_t payload_len, uint8_t rmid, uint8_t info, uint32_t seed);

#endif
