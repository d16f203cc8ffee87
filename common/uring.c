/*
 * uring.c: io_uring wired into libuv through an eventfd.
 *
 * Each operation uses one slot of a fixed pool; the slot pointer is the
 * SQE's user_data.  Completions are reaped when the eventfd becomes
 * readable.  A short write is continued from where it stopped with a new
 * SQE on the same slot, so callers never see partial writes.
 */
#include "common/uring.h"

#include <assert.h>
#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
} uring_op;

struct uring {
    struct io_uring ring;
    uv_poll_t poll;
    int event_fd;
    unsigned depth;
    unsigned in_flight;
    bool closing;
    uring_op *free_list;
    uring_waiter *waiters_head;
    uring_waiter *waiters_tail;
    uring_op ops[];
};

static int submit_op(uring *u, uring_op *op)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL) {
        /* Cannot happen while in_flight <= depth == SQ size, but flush and
         * retry once rather than trust that. */
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
        if (sqe == NULL)
            return -EBUSY;
    }
    if (op->kind == OP_WRITE)
        io_uring_prep_write(sqe, op->fd, op->buf + op->done_bytes,
                            (unsigned)(op->len - op->done_bytes), op->offset + op->done_bytes);
    else
        io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data(sqe, op);
    int rc;
    do {
        rc = io_uring_submit(&u->ring);
    } while (rc == -EINTR);
    return rc < 0 ? rc : 0;
}

static void release_op(uring *u, uring_op *op)
{
    op->kind = OP_FREE;
    op->next_free = u->free_list;
    u->free_list = op;
    assert(u->in_flight > 0);
    u->in_flight--;
}

/* Handles one completion: continues a short write or runs the callback. */
static void complete_one(uring *u, struct io_uring_cqe *cqe)
{
    uring_op *op = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    assert(op != NULL && op->kind != OP_FREE);
    if (op->kind == OP_WRITE && res >= 0) {
        if (res == 0) {
            res = -EIO; /* no progress: would loop forever */
        } else {
            op->done_bytes += (size_t)res;
            if (op->done_bytes < op->len) {
                int rc = submit_op(u, op);
                if (rc == 0)
                    return;
                res = rc;
            } else {
                res = (int)op->len;
            }
        }
    }
    uring_done_fn done = op->done;
    void *arg = op->arg;
    release_op(u, op);
    if (u->closing)
        return;
    done(arg, res);
    /* Hand the freed slot (if the callback did not take it) to a waiter. */
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

static void reap(uring *u)
{
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&u->ring, &cqe) == 0)
        complete_one(u, cqe);
}

static void on_eventfd(uv_poll_t *handle, int status, int events)
{
    uring *u = handle->data;
    (void)events;
    if (status < 0)
        return;
    uint64_t count;
    ssize_t n;
    do {
        n = read(u->event_fd, &count, sizeof count);
    } while (n < 0 && errno == EINTR);
    reap(u);
}

static void on_poll_closed(uv_handle_t *handle)
{
    uring *u = handle->data;
    close(u->event_fd);
    free(u);
}

int uring_open(uv_loop_t *loop, unsigned depth, uring **out)
{
    *out = NULL;
    if (depth == 0 || depth > URING_MAX_DEPTH)
        return -EINVAL;
    uring *u = calloc(1, sizeof *u + depth * sizeof(uring_op));
    if (u == NULL)
        return -ENOMEM;
    u->depth = depth;
    int rc = io_uring_queue_init(depth, &u->ring, 0);
    if (rc < 0) {
        free(u);
        return rc;
    }
    u->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->event_fd < 0) {
        rc = -errno;
        io_uring_queue_exit(&u->ring);
        free(u);
        return rc;
    }
    rc = io_uring_register_eventfd(&u->ring, u->event_fd);
    if (rc == 0)
        rc = uv_poll_init(loop, &u->poll, u->event_fd);
    if (rc == 0) {
        u->poll.data = u;
        rc = uv_poll_start(&u->poll, UV_READABLE, on_eventfd);
        if (rc != 0) {
            /* The handle is initialised: it must be closed through the loop,
             * whose close callback closes the eventfd and frees u. */
            io_uring_queue_exit(&u->ring);
            uv_close((uv_handle_t *)&u->poll, on_poll_closed);
            return rc;
        }
    }
    if (rc != 0) {
        close(u->event_fd);
        io_uring_queue_exit(&u->ring);
        free(u);
        return rc;
    }
    for (unsigned i = depth; i > 0; i--) {
        u->ops[i - 1].next_free = u->free_list;
        u->free_list = &u->ops[i - 1];
    }
    *out = u;
    return 0;
}

static int start_op(uring *u, uring_op proto)
{
    assert(!u->closing);
    uring_op *op = u->free_list;
    if (op == NULL)
        return -EBUSY;
    u->free_list = op->next_free;
    u->in_flight++;
    *op = proto;
    int rc = submit_op(u, op);
    if (rc != 0) {
        release_op(u, op);
        return rc;
    }
    return 0;
}

int uring_write(uring *u, int fd, const void *buf, size_t len, uint64_t offset, uring_done_fn done,
                void *arg)
{
    if (len == 0 || len > URING_MAX_WRITE || done == NULL)
        return -EINVAL;
    return start_op(u, (uring_op){.kind = OP_WRITE,
                                  .fd = fd,
                                  .buf = buf,
                                  .len = len,
                                  .offset = offset,
                                  .done = done,
                                  .arg = arg});
}

int uring_fdatasync(uring *u, int fd, uring_done_fn done, void *arg)
{
    if (done == NULL)
        return -EINVAL;
    return start_op(u, (uring_op){.kind = OP_FSYNC, .fd = fd, .done = done, .arg = arg});
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

unsigned uring_in_flight(const uring *u)
{
    return u->in_flight;
}

void uring_close(uring *u)
{
    if (u == NULL)
        return;
    u->closing = true;
    while (u->in_flight > 0) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break; /* ring broken: nothing more will complete */
        complete_one(u, cqe);
    }
    io_uring_queue_exit(&u->ring);
    uv_poll_stop(&u->poll);
    uv_close((uv_handle_t *)&u->poll, on_poll_closed);
}
