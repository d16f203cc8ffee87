/*
 * walbuf.h: the walproposer's bounded window of recent WAL, plus reading
 * older WAL from pg_wal segment files.
 *
 * WAL arrives in order from the local walsender and is appended here; the
 * buffer keeps the newest `cap` bytes as one contiguous LSN range
 * [start, end) in a ring.  An acceptor whose next append lies inside that
 * range is served from memory; one further behind is served by
 * walbuf_read_segments() from the segment files in the compute's pg_wal
 * (the compute keeps them through wal_keep_size).  WAL the compute no longer
 * has cannot be served: the caller reports that acceptor as unrecoverable.
 *
 * Not for: WAL newer than what was appended (the caller never asks), or any
 * decoding of records.  libc only; the memory is the caller's.
 */
#ifndef STRATA_WALPROPOSER_WALBUF_H
#define STRATA_WALPROPOSER_WALBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

typedef struct walbuf {
    uint8_t *mem; /* cap bytes, owned by the caller */
    size_t cap;
    lsn_t start; /* oldest LSN held */
    lsn_t end;   /* one past the newest LSN held */
} walbuf;

/* Uses mem (cap > 0 bytes) as the ring; the buffer starts empty at LSN 0. */
void walbuf_init(walbuf *b, uint8_t *mem, size_t cap);

/* Forgets everything and starts an empty window at lsn. */
void walbuf_reset(walbuf *b, lsn_t lsn);

/*
 * Appends WAL that starts at lsn.  lsn must equal b->end (returns -1 and
 * changes nothing otherwise: the caller resets or restarts its stream).
 * The oldest bytes are dropped to make room.
 */
int walbuf_append(walbuf *b, lsn_t lsn, const uint8_t *data, size_t len);

/* Copies [begin, begin+len) into out if the window holds all of it. */
bool walbuf_read(const walbuf *b, lsn_t begin, uint8_t *out, size_t len);

/*
 * Reads [begin, begin+len) from the segment files of timeline tli in
 * waldir (segments of seg_size bytes).  Returns 0 on success, -1 with a
 * reason in err (errlen bytes) if a file is missing or short.
 */
int walbuf_read_segments(const char *waldir, uint32_t tli, uint32_t seg_size, lsn_t begin,
                         uint8_t *out, size_t len, char *err, size_t errlen);

/* Writes the 24-character segment file name of the segment holding lsn. */
void walbuf_segment_name(uint32_t tli, uint32_t seg_size, lsn_t lsn, char name[25]);

#endif
