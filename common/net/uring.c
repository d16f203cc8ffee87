/*
 * uring.c: io_uring wired into libuv by polling the ring's descriptor.
 *
 * Each operation uses one slot of a fixed pool; the slot pointer is the
 * SQE's user_data.  Completions are reaped when the ring's descriptor
 * becomes readable (it is, while its completion queue is not empty).
 * Linked chains: see uring.h.  A short write is continued from where it stopped with a new
 * SQE on the same slot, so callers never see partial writes.
 *
 * URING_OPEN_BLOCKING: each queued operation gets a NOP SQE instead, and
 * the submission first runs the queued operations itself, in queue order,
 * with pwrite and fdatasync; the NOP's completion then carries the result
 * (op->blocking_res) through the same reaping, chain and callback code.
 * A chain member after one that failed does not run: -ECANCELED, as the
 * kernel would report.  CQE skipping is off so every NOP posts.
 */
#include "net/uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/strata_assert.h"

#define URING_MAX_DEPTH 4096
#define URING_MAX_WRITE (1u << 30)

typedef enum op_kind { OP_FREE = 0, OP_WRITE, OP_FSYNC } op_kind;

typedef struct uring_op {
    op_kind kind;
    int fd;
    const uint8_t *buf;
    size_t len;
    size_t done_bytes;
    uint64_t offset;
    uring_done_fn done;
    void *arg;
    struct uring_op *next_free;
    /* Chains (URING_LINK).  link_prev: the unresolved operation this one
     * runs after; link_next: the unresolved one that runs after this. */
    struct uring_op *link_prev;
    struct uring_op *link_next;
    struct io_uring_sqe *sqe; /* valid while sub_gen == the ring's (unsubmitted) */
    uint64_t sub_gen;
    bool was_linked;  /* queued behind a predecessor */
    bool skipped;     /* its current SQE posts no CQE on success */
    bool parked;      /* cancelled by the kernel; runs again after its predecessor */
    bool pred_failed; /* its predecessor failed: it ends with -ECANCELED */
    int blocking_res; /* URING_OPEN_BLOCKING: the result the submission got */
} uring_op;

struct uring {
    struct io_uring ring;
    uv_poll_t poll;
    unsigned depth;
    unsigned in_flight;
    unsigned parked;
    unsigned deferred; /* SQEs queued, not yet submitted */
    uint64_t sub_gen;  /* bumped by every submission that went through */
    bool can_skip;     /* IORING_FEAT_CQE_SKIP */
    bool blocking;     /* URING_OPEN_BLOCKING */
    unsigned nqueued;  /* blocking: ops queued since the last submission */
    uring_op **queued; /* blocking: those ops, in queue order */
    bool closing;
    bool reaping;
    uring_op *link_tail; /* the last op queued with URING_LINK, unsubmitted */
    uring_op *free_list;
    uring_waiter *waiters_head;
    uring_waiter *waiters_tail;
    uring_op ops[];
};

/* URING_OPEN_BLOCKING: op's whole operation, now, on this thread. */
static int run_blocking(const uring_op *op)
{
    if (op->link_prev != NULL && op->link_prev->blocking_res < 0)
        return -ECANCELED; /* its chain broke before it */
    if (op->kind == OP_FSYNC)
        return durable_fdatasync_fd(op->fd);
    size_t rest = op->len - op->done_bytes;
    int rc =
        durable_pwrite_all(op->fd, op->buf + op->done_bytes, rest, op->offset + op->done_bytes);
    return rc < 0 ? rc : (int)rest;
}

static int enter(uring *u)
{
    for (unsigned i = 0; i < u->nqueued; i++)
        u->queued[i]->blocking_res = run_blocking(u->queued[i]);
    u->nqueued = 0;
    int rc;
    do {
        rc = io_uring_submit(&u->ring);
    } while (rc == -EINTR);
    if (rc >= 0) {
        u->deferred = 0;
        u->link_tail = NULL;
        u->sub_gen++;
        return 0;
    }
    return rc;
}

static bool unsubmitted(const uring *u, const uring_op *op)
{
    return op->kind != OP_FREE && op->sqe != NULL && op->sub_gen == u->sub_gen;
}

/* Makes an unsubmitted SQE harmless: a NOP whose completion is ignored. */
static void neutralise(uring *u, uring_op *op)
{
    io_uring_prep_nop(op->sqe);
    io_uring_sqe_set_data(op->sqe, NULL);
    op->sqe = NULL;
    (void)u;
}

/* Puts op's SQE in the submission queue (op's kind and progress decide
 * what); flags as in uring.h.  Does not enter the kernel. */
static int queue_op(uring *u, uring_op *op, unsigned flags)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL)
        return -EBUSY; /* cannot happen while in_flight <= depth == SQ size */
    if (u->blocking) {
        io_uring_prep_nop(sqe);
        u->queued[u->nqueued++] = op;
    } else if (op->kind == OP_WRITE) {
        io_uring_prep_write(sqe, op->fd, op->buf + op->done_bytes,
                            (unsigned)(op->len - op->done_bytes), op->offset + op->done_bytes);
    } else {
        io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
    }
    io_uring_sqe_set_data(sqe, op);
    op->sqe = sqe;
    op->sub_gen = u->sub_gen;
    op->skipped = false;
    uring_op *prev = u->link_tail;
    u->link_tail = NULL;
    if (prev != NULL) {
        STRATA_ASSERT(prev->link_next == NULL && prev->kind != OP_FREE);
        prev->link_next = op;
        op->link_prev = prev;
        op->was_linked = true;
        /* A write followed by something posts nothing on success: the
         * follower's completion says it ran in full. */
        if (u->can_skip && prev->kind == OP_WRITE && unsubmitted(u, prev)) {
            prev->sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
            prev->skipped = true;
        }
    }
    if (flags & URING_LINK) {
        sqe->flags |= IOSQE_IO_LINK;
        u->link_tail = op;
    }
    u->deferred++;
    return 0;
}

static void release_op(uring *u, uring_op *op)
{
    op->kind = OP_FREE;
    op->link_prev = op->link_next = NULL;
    op->sqe = NULL;
    op->next_free = u->free_list;
    u->free_list = op;
    STRATA_ASSERT(u->in_flight > 0);
    u->in_flight--;
}

static void serve_waiter(uring *u)
{
    uring_waiter *w = u->waiters_head;
    if (w != NULL && u->free_list != NULL) {
        u->waiters_head = w->next;
        if (u->waiters_head == NULL)
            u->waiters_tail = NULL;
        w->next = NULL;
        w->queued = 0;
        w->fn(w->arg);
    }
}

static void unpark(uring *u, uring_op *op)
{
    if (op->parked) {
        op->parked = false;
        STRATA_ASSERT(u->parked > 0);
        u->parked--;
    }
}

static void finish_op(uring *u, uring_op *op, int res);

/* Submits op again on its own (the rest of a short write, or a cancelled
 * chain member whose predecessor has now completed).  Only from the reap
 * path, where no caller has deferred operations queued. */
static int requeue_alone(uring *u, uring_op *op)
{
    STRATA_ASSERT(u->deferred == 0 && u->link_tail == NULL);
    op->link_prev = NULL;
    int rc = queue_op(u, op, 0);
    if (rc != 0)
        return rc;
    rc = enter(u);
    if (rc != 0) {
        neutralise(u, op);
        u->deferred = 0;
    }
    return rc;
}

/* op's predecessor is resolved (ok: in full); what that means for op. */
static void predecessor_resolved(uring *u, uring_op *op, bool ok)
{
    op->link_prev = NULL;
    if (!ok) {
        if (op->parked) {
            unpark(u, op);
            finish_op(u, op, -ECANCELED);
        } else {
            op->pred_failed = true; /* its -ECANCELED is still to come */
        }
        return;
    }
    if (!op->parked)
        return; /* it runs (or ran) in the kernel as linked */
    unpark(u, op);
    int rc = requeue_alone(u, op);
    if (rc != 0)
        finish_op(u, op, rc);
}

/* The final result of op: runs its callback once, then tells its
 * follower (if any) how it ended. */
static void finish_op(uring *u, uring_op *op, int res)
{
    uring_op *next = op->link_next;
    if (op->link_prev != NULL)
        op->link_prev->link_next = NULL;
    uring_done_fn done = op->done;
    void *arg = op->arg;
    release_op(u, op);
    if (next != NULL) {
        STRATA_ASSERT(next->link_prev == op);
        next->link_prev = NULL;
    }
    if (!u->closing)
        done(arg, res);
    if (next != NULL)
        predecessor_resolved(u, next, res >= 0);
    if (!u->closing)
        serve_waiter(u);
}

/* op ran in full: every predecessor whose success posted nothing ran in
 * full too.  Resolves them oldest first. */
static void resolve_skipped_before(uring *u, uring_op *op)
{
    uring_op *oldest = NULL;
    for (uring_op *p = op->link_prev; p != NULL && p->skipped && !p->parked; p = p->link_prev)
        oldest = p;
    while (oldest != NULL && oldest != op) {
        uring_op *next = oldest->link_next;
        STRATA_ASSERT(oldest->kind == OP_WRITE);
        oldest->done_bytes = oldest->len;
        finish_op(u, oldest, (int)oldest->len);
        oldest = next;
    }
}

/* A CQE for a skipped op means it failed or was short: the kernel posts
 * nothing for the rest of its chain, which it cancelled. */
static void chain_cancelled_silently(uring *u, uring_op *op)
{
    for (uring_op *f = op->link_next; f != NULL; f = f->link_next) {
        if (f->parked)
            break;
        f->parked = true;
        u->parked++;
    }
}

/* Handles one completion: continues a short write or resolves the op. */
static void complete_one(uring *u, struct io_uring_cqe *cqe)
{
    uring_op *op = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    if (op == NULL)
        return; /* a NOP left by a failed submission */
    STRATA_ASSERT(op->kind != OP_FREE && !op->parked);
    if (u->blocking)
        res = res < 0 ? res : op->blocking_res;
    if (res == -ECANCELED && op->was_linked) {
        /* Its predecessor did not complete in full (yet). */
        if (op->link_prev != NULL) {
            op->parked = true;
            u->parked++;
        } else if (op->pred_failed) {
            finish_op(u, op, -ECANCELED);
        } else {
            op->parked = true; /* the predecessor has completed since */
            u->parked++;
            predecessor_resolved(u, op, true);
        }
        return;
    }
    /* op ran: everything before it in its chain ran in full. */
    resolve_skipped_before(u, op);
    if (op->skipped)
        chain_cancelled_silently(u, op);
    op->skipped = false;
    if (op->kind == OP_WRITE && res >= 0) {
        if (res == 0) {
            res = -EIO; /* no progress: would loop forever */
        } else {
            op->done_bytes += (size_t)res;
            if (op->done_bytes < op->len) {
                int rc = requeue_alone(u, op);
                if (rc == 0)
                    return;
                res = rc;
            } else {
                res = (int)op->len;
            }
        }
    }
    finish_op(u, op, res);
}

static void reap(uring *u)
{
    if (u->reaping)
        return;
    u->reaping = true;
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&u->ring, &cqe) == 0)
        complete_one(u, cqe);
    u->reaping = false;
}

/* The ring's own descriptor is readable while completions wait in its
 * queue (no eventfd to signal and read: one syscall less per wakeup). */
static void on_ring_readable(uv_poll_t *handle, int status, int events)
{
    uring *u = handle->data;
    (void)events;
    if (status < 0)
        return;
    reap(u);
}

static void on_poll_closed(uv_handle_t *handle)
{
    uring *u = handle->data;
    free(u->queued);
    free(u);
}

int uring_open_ex(uv_loop_t *loop, unsigned depth, unsigned flags, uring **out)
{
    *out = NULL;
    if (depth == 0 || depth > URING_MAX_DEPTH || (flags & ~URING_OPEN_BLOCKING) != 0)
        return -EINVAL;
    uring *u = calloc(1, sizeof *u + depth * sizeof(uring_op));
    if (u == NULL)
        return -ENOMEM;
    u->depth = depth;
    u->blocking = (flags & URING_OPEN_BLOCKING) != 0;
    if (u->blocking && (u->queued = calloc(depth, sizeof *u->queued)) == NULL) {
        free(u);
        return -ENOMEM;
    }
    struct io_uring_params params = {.flags = IORING_SETUP_SUBMIT_ALL};
    int rc = io_uring_queue_init_params(depth, &u->ring, &params);
    if (rc == -EINVAL) {
        memset(&params, 0, sizeof params); /* a kernel before 5.18 */
        rc = io_uring_queue_init_params(depth, &u->ring, &params);
    }
    u->can_skip = !u->blocking && (params.features & IORING_FEAT_CQE_SKIP) != 0;
    if (rc < 0) {
        free(u->queued);
        free(u);
        return rc;
    }
    rc = uv_poll_init(loop, &u->poll, u->ring.ring_fd);
    if (rc != 0) {
        io_uring_queue_exit(&u->ring);
        free(u->queued);
        free(u);
        return rc;
    }
    u->poll.data = u;
    rc = uv_poll_start(&u->poll, UV_READABLE, on_ring_readable);
    if (rc != 0) {
        /* The handle is initialised: it must be closed through the loop,
         * whose close callback frees u. */
        io_uring_queue_exit(&u->ring);
        uv_close((uv_handle_t *)&u->poll, on_poll_closed);
        return rc;
    }
    for (unsigned i = depth; i > 0; i--) {
        u->ops[i - 1].next_free = u->free_list;
        u->free_list = &u->ops[i - 1];
    }
    *out = u;
    return 0;
}

int uring_open(uv_loop_t *loop, unsigned depth, uring **out)
{
    return uring_open_ex(loop, depth, 0, out);
}

/* Turns the unsubmitted SQEs into NOPs (a failed submission) and
 * releases their ops: their callbacks never run. */
static void drop_deferred(uring *u)
{
    for (unsigned i = 0; i < u->depth; i++) {
        uring_op *op = &u->ops[i];
        if (!unsubmitted(u, op))
            continue;
        neutralise(u, op);
        if (op->link_prev != NULL)
            op->link_prev->link_next = NULL;
        if (op->link_next != NULL)
            op->link_next->link_prev = NULL;
        release_op(u, op);
    }
    u->deferred = 0;
    u->nqueued = 0;
    u->link_tail = NULL;
}

int uring_submit(uring *u)
{
    if (u->deferred == 0)
        return 0;
    int rc = enter(u);
    if (rc != 0)
        drop_deferred(u);
    return rc;
}

static int start_op(uring *u, uring_op proto, unsigned flags)
{
    STRATA_ASSERT(!u->closing);
    uring_op *op = u->free_list;
    if (op == NULL)
        return -EBUSY;
    u->free_list = op->next_free;
    u->in_flight++;
    *op = proto;
    int rc = queue_op(u, op, flags);
    if (rc != 0) {
        release_op(u, op);
        return rc;
    }
    if (flags & URING_DEFER)
        return 0;
    return uring_submit(u);
}

int uring_write_ex(uring *u, int fd, const void *buf, size_t len, uint64_t offset, unsigned flags,
                   uring_done_fn done, void *arg)
{
    if (len == 0 || len > URING_MAX_WRITE || done == NULL)
        return -EINVAL;
    return start_op(u,
                    (uring_op){.kind = OP_WRITE,
                               .fd = fd,
                               .buf = buf,
                               .len = len,
                               .offset = offset,
                               .done = done,
                               .arg = arg},
                    flags);
}

int uring_write(uring *u, int fd, const void *buf, size_t len, uint64_t offset, uring_done_fn done,
                void *arg)
{
    return uring_write_ex(u, fd, buf, len, offset, 0, done, arg);
}

int uring_fdatasync_ex(uring *u, int fd, unsigned flags, uring_done_fn done, void *arg)
{
    if (done == NULL)
        return -EINVAL;
    return start_op(u, (uring_op){.kind = OP_FSYNC, .fd = fd, .done = done, .arg = arg}, flags);
}

int uring_fdatasync(uring *u, int fd, uring_done_fn done, void *arg)
{
    return uring_fdatasync_ex(u, fd, 0, done, arg);
}

unsigned uring_free_slots(const uring *u)
{
    return u->depth - u->in_flight;
}

void uring_wait_for_space(uring *u, uring_waiter *w)
{
    if (w->queued)
        return;
    w->queued = 1;
    w->next = NULL;
    if (u->waiters_tail != NULL)
        u->waiters_tail->next = w;
    else
        u->waiters_head = w;
    u->waiters_tail = w;
}

void uring_cancel_wait(uring *u, uring_waiter *w)
{
    if (!w->queued)
        return;
    uring_waiter *prev = NULL;
    for (uring_waiter *it = u->waiters_head; it != NULL; prev = it, it = it->next) {
        if (it != w)
            continue;
        if (prev != NULL)
            prev->next = w->next;
        else
            u->waiters_head = w->next;
        if (u->waiters_tail == w)
            u->waiters_tail = prev;
        break;
    }
    w->next = NULL;
    w->queued = 0;
}

void uring_disable_cqe_skip(uring *u)
{
    u->can_skip = false;
}

unsigned uring_in_flight(const uring *u)
{
    return u->in_flight;
}

void uring_close(uring *u)
{
    if (u == NULL)
        return;
    u->closing = true;
    if (uring_submit(u) != 0)
        drop_deferred(u);
    /* Parked ops are not in the kernel: nothing will complete them. */
    while (u->in_flight > u->parked) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break; /* ring broken: nothing more will complete */
        complete_one(u, cqe);
    }
    for (unsigned i = 0; i < u->depth && u->parked > 0; i++) {
        if (u->ops[i].kind != OP_FREE && u->ops[i].parked) {
            unpark(u, &u->ops[i]);
            release_op(u, &u->ops[i]);
        }
    }
    uv_poll_stop(&u->poll); /* before its descriptor goes */
    io_uring_queue_exit(&u->ring);
    uv_close((uv_handle_t *)&u->poll, on_poll_closed);
}
