/*
 * pqstream.h: one nonblocking libpq connection that ends up in CopyBoth mode.
 *
 * The walproposer talks to every peer through such a stream: to each
 * safekeeper (START_WAL_PUSH), to its own postmaster's walsender and, in
 * sync-safekeepers, to the donor safekeeper (START_REPLICATION).  A stream
 * connects with PQconnectStartParams/PQconnectPoll, sends one start command
 * and expects CopyBothResponse; after that every message is one CopyData.
 * Nothing here blocks: the caller waits on pqstream_socket() for the events
 * pqstream_wait_events() asks for (with poll(2) or a Postgres WaitEventSet)
 * and then calls pqstream_advance() / pqstream_recv() / pqstream_flush().
 *
 * Not for: decoding messages (proto/walpush.h, proto/replication.h), retries and
 * backoff (the caller's policy), or anything that needs Postgres headers.
 * Uses libc and libpq only and allocates nothing of its own, so it is
 * compiled into both strata.so and strata-sync-safekeepers.
 */
#ifndef STRATA_WALPROPOSER_PQSTREAM_H
#define STRATA_WALPROPOSER_PQSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#define PQSTREAM_MAX_PARAMS 12
#define PQSTREAM_ERROR_LEN 256
#define PQSTREAM_QUERY_LEN 256

/* Bits of pqstream_wait_events(). */
#define PQSTREAM_WAIT_READ 0x1
#define PQSTREAM_WAIT_WRITE 0x2

typedef enum pqstream_state {
    PQSTREAM_IDLE = 0,   /* no connection (never started, closed or failed) */
    PQSTREAM_CONNECTING, /* PQconnectPoll in progress */
    PQSTREAM_STARTING,   /* start command sent, waiting for CopyBothResponse */
    PQSTREAM_STREAMING,  /* CopyBoth established */
} pqstream_state;

typedef enum pqstream_result {
    PQSTREAM_OK = 0, /* progressed or nothing to do; check the state */
    PQSTREAM_FAILED, /* connection closed; reason in pqstream_error() */
} pqstream_result;

/* Owned by the caller (embed it anywhere); pqstream_init() before use. */
typedef struct pqstream {
    pqstream_state state;
    PGconn *conn;
    bool want_write;          /* connect poll or output flush wants writability */
    bool want_read;           /* connect poll wants readability */
    unsigned long generation; /* bumped per connection: a reused fd number
                               * is then still seen as a new socket */
    char query[PQSTREAM_QUERY_LEN];
    char error[PQSTREAM_ERROR_LEN];
} pqstream;

void pqstream_init(pqstream *s);

/*
 * Starts connecting with the given libpq keywords/values (NULL-terminated
 * arrays, at most PQSTREAM_MAX_PARAMS) and remembers start_query to send once
 * connected.  Returns PQSTREAM_FAILED (reason in pqstream_error()) if libpq
 * refused at once.  The stream must be IDLE.
 */
pqstream_result pqstream_start(pqstream *s, const char *const *keywords, const char *const *values,
                               const char *start_query);

/*
 * Moves a CONNECTING or STARTING stream forward after its socket became
 * ready (or spuriously: it is safe to call any time).  On failure the stream
 * is closed and back to IDLE.
 */
pqstream_result pqstream_advance(pqstream *s);

/*
 * Receives one CopyData message of a STREAMING stream.  Returns 1 with
 * msg and len set (free *msg with PQfreemem), 0 if none is buffered yet, or -1
 * when the stream failed or ended (closed; reason in pqstream_error()).
 */
int pqstream_recv(pqstream *s, char **msg, int *len);

/*
 * The two halves of pqstream_recv, for a caller that knows from its poll
 * which sockets are readable: pqstream_recv_buffered returns as
 * pqstream_recv does but only from what libpq has already read (no system
 * call); pqstream_consume reads what the socket holds into libpq (one
 * recv, -1 when the stream failed; closed, reason in pqstream_error()).
 */
int pqstream_recv_buffered(pqstream *s, char **msg, int *len);
int pqstream_consume(pqstream *s);

/*
 * Queues one CopyData message and tries to flush it.  Returns 0 on success
 * (some bytes may still wait: the stream then asks for WRITE), -1 on failure
 * (closed; reason in pqstream_error()).
 */
int pqstream_send(pqstream *s, const void *buf, size_t len);

/* Flushes queued output; 0 when done or still pending, -1 on failure. */
int pqstream_flush(pqstream *s);

/* Socket to wait on, or -1 when IDLE. */
int pqstream_socket(const pqstream *s);

/* PQSTREAM_WAIT_* bits to wait for on pqstream_socket(). */
int pqstream_wait_events(const pqstream *s);

/* Closes the connection (if any) and returns to IDLE; keeps the error text. */
void pqstream_close(pqstream *s);

/* The last failure's reason ("" if none). */
const char *pqstream_error(const pqstream *s);

#endif
