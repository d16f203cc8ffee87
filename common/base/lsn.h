/*
 * lsn.h: WAL positions (LSNs) and 16-byte tenant/timeline identifiers.
 *
 * The one place that formats and parses LSNs ("X/Y" in upper-case hex, as
 * Postgres writes them) and ids (32 lower-case hex digits).  Pure functions,
 * libc only, so the extension and the daemons share them.
 */
#ifndef STRATA_COMMON_LSN_H
#define STRATA_COMMON_LSN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t lsn_t;

#define LSN_INVALID ((lsn_t)0)
#define LSN_MAX UINT64_MAX
/* "FFFFFFFF/FFFFFFFF" plus NUL. */
#define LSN_FMT_LEN 18

/* Writes lsn as "X/Y" into buf (at least LSN_FMT_LEN bytes); returns buf. */
char *lsn_format(lsn_t lsn, char *buf);

/* Parses "X/Y" (each part 1-8 hex digits, nothing else); false on bad input. */
bool lsn_parse(const char *s, lsn_t *out);

#define STRATA_ID_LEN 16
#define STRATA_ID_HEX_LEN 33 /* 32 hex digits plus NUL */

typedef struct strata_id {
    uint8_t b[STRATA_ID_LEN];
} strata_id;

/* Writes 32 lower-case hex digits and a NUL into buf; returns buf. */
char *strata_id_format(const strata_id *id, char *buf);

/* Parses exactly 32 hex digits (either case); false otherwise. */
bool strata_id_parse(const char *s, strata_id *out);

bool strata_id_equal(const strata_id *a, const strata_id *b);
bool strata_id_is_zero(const strata_id *id);

/* Fills id with random bytes from getrandom(2); false if that fails. */
bool strata_id_generate(strata_id *id);

#endif
