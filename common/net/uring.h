/*
 * uring.h: asynchronous file writes and fdatasyncs through io_uring, driven
 * by a libuv loop.
 *
 * A uv_poll watches the ring's own descriptor (readable while completions
 * wait), so completion callbacks run on the loop thread like any other
 * libuv callback.
 * At most `depth` operations are in flight (a fixed pool, nothing grows);
 * past that, submission fails with -EBUSY and the caller queues.  Short
 * writes are resubmitted internally: a write callback sees either the full
 * length or a negative errno.
 *
 * Not for reads on the hot path of senders (pread is fine there) and not
 * thread-safe: one uring belongs to one loop thread.
 */
#ifndef STRATA_COMMON_URING_H
#define STRATA_COMMON_URING_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct uring uring;

/* res: bytes written (always the full length) or 0 for fdatasync; or a
 * negative errno.  Runs on the loop thread. */
typedef void (*uring_done_fn)(void *arg, int res);

/* Creates a ring of depth entries (1..4096) polled by loop.  Returns 0 or a
 * negative errno (e.g. -ENOSYS/-EPERM where io_uring is unavailable). */
int uring_open(uv_loop_t *loop, unsigned depth, uring **out);

/*
 * URING_OPEN_BLOCKING: the submission itself runs the queued writes and
 * fdatasyncs, on the calling (loop) thread, before it returns; their
 * callbacks still run later from the loop, with the same rules (order,
 * chains, exactly once).  The loop then waits for the disk while it syncs,
 * but no worker thread has to be woken and no completion has to wake the
 * loop: on a fast local disk that saved a safekeeper about a fifth of its
 * CPU per commit (docs/benchmarks.md, "What a commit's storage path
 * costs").
 */
#define URING_OPEN_BLOCKING 1u
int uring_open_ex(uv_loop_t *loop, unsigned depth, unsigned flags, uring **out);

/* Writes len bytes of buf at offset of fd.  buf must stay valid until done
 * runs.  Returns 0 (done will run exactly once, later, never inside this
 * call) or -EBUSY when depth operations are in flight, -EINVAL for len 0 or
 * over 1 GB. */
int uring_write(uring *u, int fd, const void *buf, size_t len, uint64_t offset, uring_done_fn done,
                void *arg);

/* fdatasync(fd) without blocking the loop (unless URING_OPEN_BLOCKING);
 * same return rules as uring_write. */
int uring_fdatasync(uring *u, int fd, uring_done_fn done, void *arg);

/*
 * Flags of the _ex variants (0 = the plain functions above).
 *
 * URING_LINK: the NEXT operation queued starts only after this one has
 * completed in full (IOSQE_IO_LINK).  A successful write followed by a link
 * posts no completion of its own (IOSQE_CQE_SKIP_SUCCESS where the kernel
 * has it): its callback runs when a later operation of the chain completes,
 * always before that operation's callback, so callers see callbacks in chain
 * order and exactly once, as without links.  If a linked operation fails,
 * the operations after it in the chain report -ECANCELED; a short write is
 * continued and the rest of the chain then runs (one at a time).  A link
 * with nothing queued after it before the submission is simply dropped.
 *
 * URING_DEFER: queue only; the kernel sees the operation at the next
 * uring_submit() or the next operation queued without URING_DEFER.  The
 * caller must submit before returning to the loop (nothing else will).
 */
#define URING_LINK 1u
#define URING_DEFER 2u

int uring_write_ex(uring *u, int fd, const void *buf, size_t len, uint64_t offset, unsigned flags,
                   uring_done_fn done, void *arg);
int uring_fdatasync_ex(uring *u, int fd, unsigned flags, uring_done_fn done, void *arg);

/* Submits every deferred operation in one io_uring_enter.  0 or a negative
 * errno (then the deferred operations' callbacks report it). */
int uring_submit(uring *u);

/* Free operation slots (depth minus in flight). */
unsigned uring_free_slots(const uring *u);

/*
 * A caller refused with -EBUSY can ask to be told when a slot frees: fn(arg)
 * then runs once on the loop thread (after the completion that freed it).
 * Waiters are served in FIFO order, one per freed slot.  w is caller-owned
 * and must stay valid until it has run or been cancelled; queueing a waiter
 * that is already queued does nothing.
 */
typedef struct uring_waiter {
    struct uring_waiter *next;
    void (*fn)(void *arg);
    void *arg;
    int queued;
} uring_waiter;

void uring_wait_for_space(uring *u, uring_waiter *w);
/* Removes w if it is queued (e.g. before freeing its owner). */
void uring_cancel_wait(uring *u, uring_waiter *w);

/* Operations submitted whose callback has not run yet. */
unsigned uring_in_flight(const uring *u);

/* Posts a completion for every linked write, as kernels without
 * IORING_FEAT_CQE_SKIP do (a write's completion then arrives before the
 * fdatasync linked after it).  For tests of callers that must not take a
 * completed write for a durable one. */
void uring_disable_cqe_skip(uring *u);

/*
 * Waits (blocking) for in-flight operations to finish, without running their
 * callbacks, then closes the ring.  The memory is freed once the loop has
 * run the poll handle's close callback (run the loop once more).
 */
void uring_close(uring *u);

#endif
