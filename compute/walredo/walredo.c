/*
 * walredo.c: the redo helper, strata_walredo.so, loaded into the patched
 * PostgreSQL 15 running in single-user mode.
 *
 * For: applying WAL records to one page at a time for the pageserver
 * (docs/design.md §3.6, §6.5).  The pool starts `postgres --single` on a private copy
 * of a tiny data directory and sends one line, SELECT strata_walredo_main();
 * that function never returns.  It installs the in-memory smgr
 * (inmem_smgr.c), enters the seccomp sandbox (seccomp.c), writes the hello
 * frame, and then serves frames (proto/walredo.h) from stdin until EOF:
 * begin (target block), push page (base image), apply (one record: decode it
 * with DecodeXLogRecord and call its resource manager's redo), get page (the
 * result to stdout), ping.
 *
 * Running inside an ordinary SQL call gives redo what it expects of a
 * backend (a resource owner for buffer pins, memory contexts, the shared
 * buffer pool) without a new entry point in core.  The core patch is only
 * the smgr hook.
 *
 * Not for: deciding which records to apply (pageserver/redo/redo_plan.c) or the
 * pageserver's own deltas (pageserver/redo/redo_synthetic.c).
 *
 * Errors: anything that goes wrong while serving (a malformed frame, a record
 * that fails its CRC or does not touch the target, an ERROR raised by redo)
 * is sent as one 'E' frame, logged on stderr, and the process exits with
 * status 1 without running exit callbacks (they would write a checkpoint).
 * A PANIC inside redo aborts the process; the pool reads the reason from the
 * helper's log.  stdout carries frames only: single-user mode prints its
 * banner and prompt before the hello, which the pool skips.
 */
#include "postgres.h"

#include <unistd.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/socket.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/bufmgr.h"
#include "storage/pg_shmem.h"
#include "storage/smgr.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "proto/walredo.h"
#include "walredo_int.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(strata_walredo_main);

extern PGDLLEXPORT Datum strata_walredo_main(PG_FUNCTION_ARGS);
extern PGDLLEXPORT void _PG_init(void);

/* GUCs */
static bool walredo_seccomp = true;
static bool walredo_test_forbidden_syscall = false;

/* Request state. */
static bool have_target = false;
static walredo_tag target;
static RelFileNode target_rnode;

/*
 * I/O batching.  Frames are read from stdin (fd 0) into in_buf with plain
 * read(2), as many as the pipe holds, and decoded in place; responses are
 * appended to out_buf and written only when no complete frame is left in
 * in_buf (just before a read that may block), or when out_buf is full.  So a
 * pipelining pool gets one read and one write per batch of requests, not a
 * read per frame and a write per page; and a serial pool still gets each
 * answer before we block.  in_buf grows to the largest frame seen (bounded by
 * WALREDO_MAX_PAYLOAD); out_buf is fixed.
 */
#define IN_BUF_INITIAL (256 * 1024)
#define OUT_BUF_SIZE (128 * 1024)
static uint8 *in_buf;
static size_t in_cap, in_start, in_end;
static uint8 out_buf[OUT_BUF_SIZE];
static size_t out_len;

/* Aligned copy of an apply frame's record (in_buf offsets are arbitrary),
 * in TopMemoryContext, grown to the largest record seen. */
static uint8 *frame_buf;
static size_t frame_cap;
static DecodedXLogRecord *decoded_buf;
static size_t decoded_cap;
static XLogReaderState *reader;
static MemoryContext record_cxt;

void _PG_init(void)
{
    DefineCustomBoolVariable("strata_walredo.seccomp",
                             "Enter the seccomp sandbox before serving requests.", NULL,
                             &walredo_seccomp, true, PGC_SUSET, 0, NULL, NULL, NULL);
    DefineCustomBoolVariable("strata_walredo.test_forbidden_syscall",
                             "Tests only: make a forbidden system call once sandboxed.", NULL,
                             &walredo_test_forbidden_syscall, false, PGC_SUSET, 0, NULL, NULL,
                             NULL);
    MarkGUCPrefixReserved("strata_walredo");
}

/* Writes all of buf to stdout, or exits: the pool is gone. */
static void write_all(const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(1);
        p += n;
        len -= n;
    }
}

static void flush_out(void)
{
    if (out_len > 0)
        write_all(out_buf, out_len);
    out_len = 0;
}

/* Queues a frame on out_buf (written by flush_out). */
static void send_msg(const walredo_msg *m)
{
    size_t need = walredo_encoded_len(m);
    size_t n;

    /* Every response (page, pong, hello, error) fits with room to spare. */
    if (need == 0 || need > OUT_BUF_SIZE)
        _exit(1);
    if (out_len + need > OUT_BUF_SIZE)
        flush_out();
    n = walredo_encode(m, out_buf + out_len, OUT_BUF_SIZE - out_len);
    if (n == 0)
        _exit(1);
    out_len += n;
}

static void fail_and_exit(const char *message) pg_attribute_noreturn();

/* Sends the error frame and exits without exit callbacks. */
static void fail_and_exit(const char *message)
{
    size_t len = strlen(message);
    walredo_msg m = {.type = WALREDO_ERROR};

    if (len == 0)
        message = "unknown error", len = strlen(message);
    if (len > WALREDO_MAX_ERROR)
        len = WALREDO_MAX_ERROR;
    m.data = (const uint8 *)message;
    m.data_len = (uint32)len;
    /* The answers to earlier requests go first, in order. */
    send_msg(&m);
    flush_out();
    _exit(1);
}

static void ensure_frame_cap(size_t need)
{
    if (need <= frame_cap)
        return;
    if (frame_buf)
        pfree(frame_buf);
    frame_buf = MemoryContextAllocExtended(TopMemoryContext, need, MCXT_ALLOC_HUGE);
    frame_cap = need;
}

/*
 * The next frame from stdin, decoded in place in in_buf (m's pointers stay
 * valid until the next call).  Writes the queued responses before any read
 * that may block.  False at clean EOF; a malformed or truncated frame exits.
 */
static bool next_frame(walredo_msg *m)
{
    for (;;) {
        size_t avail = in_end - in_start;
        size_t used = 0;
        size_t need = WALREDO_FRAME_HEADER_LEN;
        const char *why = NULL;
        int rc = 0;
        ssize_t n;

        if (avail > 0) {
            /* Judges the header before the payload is read. */
            rc = walredo_decode(in_buf + in_start, avail, m, &used, &why);
            if (rc < 0)
                fail_and_exit(why ? why : "walredo: malformed frame");
        }
        if (rc == 1) {
            Assert(used <= avail);
            in_start += used;
            if (!walredo_is_request(m->type))
                fail_and_exit("walredo: a response frame on stdin");
            return true;
        }
        if (avail >= WALREDO_FRAME_HEADER_LEN) {
            const uint8 *h = in_buf + in_start;

            need += (size_t)((uint32)h[1] << 24 | (uint32)h[2] << 16 | (uint32)h[3] << 8 | h[4]);
        }
        /* Keep the partial frame at the front, with room for all of it. */
        if (in_start > 0) {
            memmove(in_buf, in_buf + in_start, avail);
            in_start = 0;
            in_end = avail;
        }
        if (need > in_cap) {
            in_buf = repalloc_huge(in_buf, need);
            in_cap = need;
        }
        /* About to read, perhaps to block: answer what is done first. */
        flush_out();
        n = read(STDIN_FILENO, in_buf + in_end, in_cap - in_end);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail_and_exit("walredo: cannot read stdin");
        if (n == 0) {
            if (avail == 0)
                return false;
            fail_and_exit("walredo: stdin ended inside a frame");
        }
        in_end += (size_t)n;
    }
}

static void drop_db_buffers(Oid db)
{
    DropDatabaseBuffers(db);
}

static void check_target(const walredo_tag *t, const char *what)
{
    if (!have_target)
        ereport(ERROR,
                (errcode(ERRCODE_PROTOCOL_VIOLATION), errmsg("walredo: %s before begin", what)));
    if (!walredo_tag_equal(t, &target))
        ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                        errmsg("walredo: %s for block %u/%u/%u.%u blk %u, begun %u/%u/%u.%u blk %u",
                               what, t->spc, t->db, t->rel, t->fork, t->blk, target.spc, target.db,
                               target.rel, target.fork, target.blk)));
}

static void handle_begin(const walredo_msg *m)
{
    /* Nothing of an earlier request (nor the helper's own catalog pages,
     * dropped at start) may be found in shared buffers. */
    if (have_target)
        drop_db_buffers(target_rnode.dbNode);
    drop_db_buffers(m->tag.db);
    /* Bound the SMgrRelation table: one request's relations at a time. */
    smgrcloseall();
    target = m->tag;
    target_rnode.spcNode = m->tag.spc;
    target_rnode.dbNode = m->tag.db;
    target_rnode.relNode = m->tag.rel;
    have_target = true;
    inmem_smgr_set_target(target_rnode, (ForkNumber)m->tag.fork, m->tag.blk);
}

static void ensure_decoded_cap(size_t need)
{
    if (need <= decoded_cap)
        return;
    if (decoded_buf)
        pfree(decoded_buf);
    decoded_buf = MemoryContextAllocExtended(TopMemoryContext, need, MCXT_ALLOC_HUGE);
    decoded_cap = need;
}

/* After a record: keep the target page, forget every buffer it touched. */
static void collect_target_and_drop(void)
{
    Buffer buf;
    int id;

    buf = ReadBufferWithoutRelcache(target_rnode, (ForkNumber)target.fork, target.blk, RBM_NORMAL,
                                    NULL, true);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    inmem_smgr_set_page(BufferGetPage(buf));
    UnlockReleaseBuffer(buf);

    drop_db_buffers(target_rnode.dbNode);
    for (id = 0; id <= reader->record->max_block_id; id++) {
        RelFileNode rnode;

        if (!XLogRecGetBlockTagExtended(reader, id, &rnode, NULL, NULL, NULL))
            continue;
        if (rnode.dbNode != target_rnode.dbNode)
            drop_db_buffers(rnode.dbNode);
    }
}

static void handle_apply(const walredo_msg *m)
{
    XLogRecord *record = (XLogRecord *)m->data;
    pg_crc32c crc;
    char *errormsg = NULL;
    bool touches_target = false;
    bool initialises = false;
    RmgrData rmgr;
    MemoryContext old;
    int id;

    if (!have_target)
        ereport(ERROR,
                (errcode(ERRCODE_PROTOCOL_VIOLATION), errmsg("walredo: apply before begin")));
    Assert(record->xl_tot_len == m->data_len);

    INIT_CRC32C(crc);
    COMP_CRC32C(crc, ((char *)record) + SizeOfXLogRecord, record->xl_tot_len - SizeOfXLogRecord);
    COMP_CRC32C(crc, (char *)record, offsetof(XLogRecord, xl_crc));
    FIN_CRC32C(crc);
    if (!EQ_CRC32C(record->xl_crc, crc))
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("walredo: record ending at %X/%X fails its CRC",
                               LSN_FORMAT_ARGS(m->end_lsn))));
    if (!RmgrIdIsValid(record->xl_rmid) || !RmgrIdExists(record->xl_rmid) ||
        GetRmgr(record->xl_rmid).rm_redo == NULL)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("walredo: record ending at %X/%X has unknown resource manager %u",
                               LSN_FORMAT_ARGS(m->end_lsn), record->xl_rmid)));

    ensure_decoded_cap(DecodeXLogRecordRequiredSpace(record->xl_tot_len));
    /* The start LSN is not sent; block redo uses only EndRecPtr.  Without a
     * page boundary inside the record this is its exact start. */
    reader->ReadRecPtr = m->end_lsn - MAXALIGN(record->xl_tot_len);
    reader->EndRecPtr = m->end_lsn;
    if (!DecodeXLogRecord(reader, decoded_buf, record, reader->ReadRecPtr, &errormsg))
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("walredo: record ending at %X/%X does not decode: %s",
                               LSN_FORMAT_ARGS(m->end_lsn), errormsg ? errormsg : "?")));
    reader->record = decoded_buf;

    for (id = 0; id <= decoded_buf->max_block_id; id++) {
        DecodedBkpBlock *blk = &decoded_buf->blocks[id];

        if (!blk->in_use)
            continue;
        if (RelFileNodeEquals(blk->rnode, target_rnode) && blk->forknum == target.fork &&
            blk->blkno == target.blk) {
            touches_target = true;
            initialises |= blk->has_image || (blk->flags & BKPBLOCK_WILL_INIT) != 0;
        }
    }
    if (!touches_target)
        ereport(
            ERROR,
            (errcode(ERRCODE_DATA_CORRUPTED),
             errmsg("walredo: record ending at %X/%X does not reference block %u/%u/%u.%u blk %u",
                    LSN_FORMAT_ARGS(m->end_lsn), target.spc, target.db, target.rel, target.fork,
                    target.blk)));
    if (!inmem_smgr_has_page() && !initialises)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("walredo: no base page for block %u/%u/%u.%u blk %u and the record "
                               "ending at %X/%X does not initialise it",
                               target.spc, target.db, target.rel, target.fork, target.blk,
                               LSN_FORMAT_ARGS(m->end_lsn))));

    rmgr = GetRmgr(record->xl_rmid);
    old = MemoryContextSwitchTo(record_cxt);
    rmgr.rm_redo(reader);
    MemoryContextSwitchTo(old);
    MemoryContextReset(record_cxt);

    collect_target_and_drop();
    reader->record = NULL;
}

static void handle_get_page(const walredo_msg *m)
{
    walredo_msg out = {.type = WALREDO_PAGE};

    check_target(&m->tag, "get page");
    out.page = (const uint8 *)inmem_smgr_page();
    send_msg(&out);
}

static void serve(void)
{
    walredo_msg m;

    for (;;) {
        if (!next_frame(&m))
            _exit(0); /* the pool closed our stdin: done */
        switch (m.type) {
        case WALREDO_BEGIN:
            handle_begin(&m);
            break;
        case WALREDO_PUSH_PAGE:
            check_target(&m.tag, "push page");
            inmem_smgr_set_page((const char *)m.page);
            break;
        case WALREDO_APPLY:
            /* DecodeXLogRecord reads the record in place: align it. */
            if ((uintptr_t)m.data % MAXIMUM_ALIGNOF != 0) {
                ensure_frame_cap(m.data_len);
                memcpy(frame_buf, m.data, m.data_len);
                m.data = frame_buf;
            }
            handle_apply(&m);
            break;
        case WALREDO_GET_PAGE:
            handle_get_page(&m);
            break;
        case WALREDO_PING: {
            walredo_msg pong = {.type = WALREDO_PONG};

            send_msg(&pong);
            break;
        }
        default:
            fail_and_exit("walredo: unexpected frame type");
        }
    }
}

/*
 * Single-user mode still creates the small System V segment that postgres
 * uses as a data directory interlock, and deletes it only in its exit
 * callbacks.  A helper never runs them: it _exit()s, is killed by the pool,
 * or dies of SIGSYS.  The pool then removes its data directory copy, so no
 * later postgres finds the segment to clean it up, and every helper would
 * leak one until the kernel's limit (SHMMNI, 4096) made every initdb and
 * postmaster on the machine fail.  Marking the segment for removal now, while
 * we are attached, makes the kernel delete it when this process ends,
 * however it ends.  Nothing else attaches to a helper's private copy.
 */
static void release_interlock_segment(void)
{
    int shmid = shmget((key_t)UsedShmemSegID, sizeof(PGShmemHeader), 0);

    if (shmid < 0 || shmctl(shmid, IPC_RMID, NULL) != 0)
        ereport(ERROR,
                (errcode_for_file_access(),
                 errmsg("walredo: cannot mark the interlock segment (key %lu) for removal: %m",
                        UsedShmemSegID)));
}

Datum strata_walredo_main(PG_FUNCTION_ARGS)
{
    walredo_msg hello = {.type = WALREDO_HELLO, .version = WALREDO_PROTO_VERSION};

    /* Whatever single-user mode printed must precede the hello. */
    fflush(stdout);

    /*
     * From here on frames are read from fd 0 directly.  The pool sends
     * nothing after the SELECT line until it has our hello, so stdio holds
     * no buffered input; take it over anyway should that ever change.
     */
    in_cap = IN_BUF_INITIAL;
    in_buf = MemoryContextAllocExtended(TopMemoryContext, in_cap, MCXT_ALLOC_HUGE);
#ifdef __GLIBC__
    if (stdin->_IO_read_ptr < stdin->_IO_read_end) {
        size_t buffered = (size_t)(stdin->_IO_read_end - stdin->_IO_read_ptr);

        if (buffered > in_cap)
            ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                            errmsg("walredo: %zu bytes of input before the hello", buffered)));
        in_end = fread(in_buf, 1, buffered, stdin);
    }
#endif

    reader = XLogReaderAllocate(wal_segment_size, NULL, XL_ROUTINE(), NULL);
    if (reader == NULL)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("walredo: out of memory allocating a WAL reader")));
    record_cxt =
        AllocSetContextCreate(TopMemoryContext, "strata walredo record", ALLOCSET_DEFAULT_SIZES);
    ensure_frame_cap(BLCKSZ);

    /*
     * From here on every relation is in-memory, and none of the catalog pages
     * this backend read while starting can be found again.  A zero page that a
     * record reads without initialising it is a PANIC, not a silent skip.
     */
    inmem_smgr_install();
    drop_db_buffers(MyDatabaseId);
    drop_db_buffers(InvalidOid);
    reachedConsistency = true;

    /* Resource managers set up their redo state (btree, gin, gist, spgist
     * create memory contexts here), as recovery does before replay. */
    for (int rmid = 0; rmid <= RM_MAX_ID; rmid++) {
        if (RmgrIdExists((RmgrId)rmid) && GetRmgr((RmgrId)rmid).rm_startup != NULL)
            GetRmgr((RmgrId)rmid).rm_startup();
    }

    release_interlock_segment();
    if (walredo_seccomp)
        walredo_enter_seccomp();
    if (walredo_test_forbidden_syscall) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        /* Only reached without the sandbox. */
        elog(WARNING, "walredo: socket() was allowed (fd %d)", fd);
    }
    send_msg(&hello);
    flush_out();

    PG_TRY();
    {
        serve();
    }
    PG_CATCH();
    {
        ErrorData *edata;

        MemoryContextSwitchTo(TopMemoryContext);
        EmitErrorReport();
        edata = CopyErrorData();
        fail_and_exit(edata->message);
    }
    PG_END_TRY();
    pg_unreachable();
}
