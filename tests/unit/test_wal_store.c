/*
 * Unit tests for safekeeper/wal_store.c on real files in a temporary
 * directory, driven by a real libuv loop and io_uring: segment naming and
 * ".partial", zero-filled creation, group-commit accounting, truncation,
 * reads, removal below a horizon, and recovery of names after a crash.
 *
 * wal_store.c belongs to the safekeeper executable, not to a library, so it
 * is compiled into this test directly.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "safekeeper/wal_store.c"

#define SEG (64 * 1024)

typedef struct fixture {
    char dir[256];
    uv_loop_t loop;
    uring *ring;
    wal_store *ws;
    lsn_t flushed[4096];
    int nflushed;
    int errors;
} fixture;

static void on_flushed(void *arg, lsn_t lsn, uint64_t usec)
{
    fixture *f = arg;
    (void)usec;
    if (f->nflushed < 4096)
        f->flushed[f->nflushed++] = lsn;
}

static void on_error(void *arg, int err)
{
    fixture *f = arg;
    (void)err;
    f->errors++;
}

static void open_store(fixture *f)
{
    wal_store_config cfg = {.dir = f->dir,
                            .seg_size = SEG,
                            .ring = f->ring,
                            .on_flushed = on_flushed,
                            .on_error = on_error,
                            .arg = f};
    assert_int_equal(wal_store_open(&cfg, &f->ws), 0);
}

/* uring_open_ex flags of the running test: every test runs with the kernel
 * doing the I/O and with URING_OPEN_BLOCKING (the safekeeper's default). */
static unsigned ring_flags;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/strata-walstore-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    if (uv_loop_init(&f->loop) != 0 || uring_open_ex(&f->loop, 8, ring_flags, &f->ring) != 0)
        return -1;
    open_store(f);
    *state = f;
    return 0;
}

static int setup_plain(void **state)
{
    ring_flags = 0;
    return setup(state);
}

static int setup_blocking(void **state)
{
    ring_flags = URING_OPEN_BLOCKING;
    return setup(state);
}

static int teardown(void **state)
{
    fixture *f = *state;
    uring_close(f->ring);
    wal_store_close(f->ws);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc;
}

static void wait_idle(fixture *f)
{
    for (int i = 0; i < 100000 && !wal_store_idle(f->ws); i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(wal_store_idle(f->ws));
}

static bool file_exists(fixture *f, const char *name)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    return access(path, F_OK) == 0;
}

static off_t file_size(fixture *f, const char *name)
{
    char path[400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static int count_files(fixture *f)
{
    DIR *d = opendir(f->dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void fill(uint8_t *buf, size_t len, lsn_t lsn)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)((lsn + i) * 131 + 7) | 1; /* never zero */
}

static void test_segment_names(void **state)
{
    (void)state;
    char name[32];
    wal_store_segment_name(16u << 20, 1, name);
    assert_string_equal(name, "000000010000000000000001");
    wal_store_segment_name(16u << 20, 0x1FF, name);
    assert_string_equal(name, "0000000100000001000000FF");
    wal_store_segment_name(1u << 30, 9, name);
    assert_string_equal(name, "000000010000000200000001");
    uint64_t segno;
    bool partial;
    assert_true(
        parse_segment_name(16u << 20, "0000000100000001000000FF.partial", &segno, &partial));
    assert_int_equal(segno, 0x1FF);
    assert_true(partial);
    assert_false(parse_segment_name(16u << 20, "000000020000000100000001", &segno, &partial));
    assert_false(parse_segment_name(16u << 20, "000000010000000100000100", &segno, &partial));
    assert_false(parse_segment_name(16u << 20, "00000001000000010000000f", &segno, &partial));
    assert_false(parse_segment_name(16u << 20, "000000010000000100000001.part", &segno, &partial));
}

static void test_append_creates_partial_zero_filled(void **state)
{
    fixture *f = *state;
    /* Positionless store refuses appends. */
    static uint8_t buf[3 * SEG];
    assert_int_equal(wal_store_append(f->ws, 100, buf, 10), -EINVAL);

    lsn_t start = 2 * SEG + 40;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    assert_int_equal(wal_store_write_lsn(f->ws), start);
    fill(buf, 1000, start);
    assert_int_equal(wal_store_append(f->ws, start + 1, buf, 1000), -EINVAL);
    assert_int_equal(wal_store_append(f->ws, start, buf, 1000), 0);
    assert_int_equal(wal_store_write_lsn(f->ws), start + 1000);
    wait_idle(f);
    assert_int_equal(wal_store_flush_lsn(f->ws), start + 1000);
    assert_int_equal(f->nflushed, 1);
    assert_int_equal(f->flushed[0], start + 1000);

    /* One file, full size already, named .partial. */
    assert_int_equal(count_files(f), 1);
    assert_true(file_exists(f, "000000010000000000000002.partial"));
    assert_int_equal(file_size(f, "000000010000000000000002.partial"), SEG);

    /* Zero before the data and after it. */
    uint8_t back[SEG];
    assert_int_equal(wal_store_read(f->ws, 2 * SEG, back, SEG), SEG);
    for (int i = 0; i < 40; i++)
        assert_int_equal(back[i], 0);
    assert_memory_equal(back + 40, buf, 1000);
    for (int i = 1040; i < SEG; i++)
        assert_int_equal(back[i], 0);

    /* Reads never cross a segment; a missing segment is ENOENT. */
    assert_int_equal(wal_store_read(f->ws, 3 * SEG - 10, back, 100), 10);
    assert_int_equal(wal_store_read(f->ws, 5 * SEG, back, 100), -ENOENT);
    assert_int_equal(f->errors, 0);
}

static void test_crossing_segments_renames_complete_ones(void **state)
{
    fixture *f = *state;
    static uint8_t buf[3 * SEG];
    lsn_t start = SEG - 100;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    fill(buf, sizeof buf, start);
    /* 100 bytes in segment 0, two whole segments, the rest in segment 3. */
    assert_int_equal(wal_store_append(f->ws, start, buf, 2 * SEG + 300), 0);
    wait_idle(f);
    lsn_t end = start + 2 * SEG + 300;
    assert_int_equal(wal_store_flush_lsn(f->ws), end);

    assert_true(file_exists(f, "000000010000000000000000"));
    assert_true(file_exists(f, "000000010000000000000001"));
    assert_true(file_exists(f, "000000010000000000000002"));
    assert_true(file_exists(f, "000000010000000000000003.partial"));
    assert_false(file_exists(f, "000000010000000000000003"));
    assert_int_equal(count_files(f), 4);
    for (int s = 0; s < 4; s++) {
        char name[40];
        wal_store_segment_name(SEG, (uint64_t)s, name);
        if (s == 3)
            strcat(name, ".partial");
        assert_int_equal(file_size(f, name), SEG);
    }

    /* Read back across the boundaries. */
    static uint8_t back[3 * SEG];
    size_t got = 0;
    while (got < 2 * SEG + 300) {
        ssize_t n = wal_store_read(f->ws, start + got, back + got, 2 * SEG + 300 - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    assert_memory_equal(back, buf, 2 * SEG + 300);
    assert_int_equal(wal_store_oldest_lsn(f->ws), 0);
    assert_int_equal(wal_store_get_stats(f->ws)->segments_created, 4);
}

static void test_group_commit(void **state)
{
    fixture *f = *state;
    lsn_t start = 16;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    uint8_t buf[100];
    lsn_t lsn = start;
    /* 200 small appends issued back to back, without running the loop. */
    for (int i = 0; i < 200; i++) {
        fill(buf, sizeof buf, lsn);
        assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
        lsn += sizeof buf;
    }
    assert_false(wal_store_idle(f->ws));
    assert_int_equal(wal_store_unflushed_bytes(f->ws), 200 * sizeof buf);
    wait_idle(f);
    const wal_store_stats *st = wal_store_get_stats(f->ws);
    assert_int_equal(st->appends, 200);
    assert_int_equal(st->bytes_written, 200 * sizeof buf);
    /* Group commit: far fewer syncs than appends, never two at once. */
    assert_true(st->sync_rounds >= 1);
    assert_true(st->sync_rounds < 50);
    assert_int_equal(st->max_syncs_in_flight, 1);
    assert_int_equal(f->nflushed, (int)st->sync_rounds);
    /* Reports only move forward, and end at everything written. */
    for (int i = 1; i < f->nflushed; i++)
        assert_true(f->flushed[i] > f->flushed[i - 1]);
    assert_int_equal(f->flushed[f->nflushed - 1], lsn);

    /* Appends arriving while a sync runs are covered by one more round,
     * started at once when the first one completes. */
    uint64_t rounds_before = st->sync_rounds;
    int reports_before = f->nflushed;
    fill(buf, sizeof buf, lsn);
    assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
    lsn += sizeof buf;
    while (st->sync_rounds == rounds_before)
        uv_run(&f->loop, UV_RUN_ONCE); /* write completes, round 1 starts */
    for (int i = 0; i < 5; i++) {
        fill(buf, sizeof buf, lsn);
        assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
        lsn += sizeof buf;
    }
    wait_idle(f);
    /* Round 1 covers exactly the append written before it started; the
     * five later ones need at least one more round (more if their writes
     * complete while round 2 runs), never overlapping. */
    assert_true(st->sync_rounds >= rounds_before + 2 && st->sync_rounds <= rounds_before + 6);
    assert_int_equal(st->max_syncs_in_flight, 1);
    assert_int_equal(f->flushed[reports_before], lsn - 5 * sizeof buf);
    assert_int_equal(f->flushed[f->nflushed - 1], lsn);
}

typedef struct manual {
    fixture *f;
    lsn_t written;
    int written_calls;
} manual;

static void on_written_manual(void *arg, lsn_t lsn)
{
    manual *m = arg;
    assert_true(lsn > m->written);
    m->written = lsn;
    m->written_calls++;
}

static void on_flushed_manual(void *arg, lsn_t lsn, uint64_t usec)
{
    manual *m = arg;
    on_flushed(m->f, lsn, usec);
}

static void test_caller_driven_sync(void **state)
{
    fixture *f = *state;
    manual m = {.f = f};
    wal_store_close(f->ws);
    wal_store_config cfg = {.dir = f->dir,
                            .seg_size = SEG,
                            .ring = f->ring,
                            .on_flushed = on_flushed_manual,
                            .on_error = on_error,
                            .on_written = on_written_manual,
                            .arg = &m,
                            .caller_syncs = true};
    assert_int_equal(wal_store_open(&cfg, &f->ws), 0);
    lsn_t start = 4096;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    m.written = start;
    lsn_t covers;
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 1); /* nothing to do */
    assert_int_equal(covers, start);

    uint8_t buf[5000];
    fill(buf, sizeof buf, start);
    assert_int_equal(wal_store_append(f->ws, start, buf, sizeof buf), 0);
    while (m.written < start + sizeof buf)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(wal_store_written_lsn(f->ws), start + sizeof buf);
    /* Written but nobody asked for a sync: nothing durable yet. */
    assert_int_equal(wal_store_flush_lsn(f->ws), start);
    assert_int_equal(wal_store_get_stats(f->ws)->sync_rounds, 0);
    assert_true(wal_store_idle(f->ws));

    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    assert_int_equal(covers, start + sizeof buf);
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), -EBUSY);
    /* More WAL while the round runs is not covered by it. */
    fill(buf, sizeof buf, start + sizeof buf);
    assert_int_equal(wal_store_append(f->ws, start + sizeof buf, buf, sizeof buf), 0);
    while (f->nflushed == 0)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->flushed[0], start + sizeof buf);
    while (m.written < start + 2 * sizeof buf)
        uv_run(&f->loop, UV_RUN_ONCE);

    /* A synchronous flush (a vote) covers everything written. */
    assert_int_equal(wal_store_flush_now(f->ws), 0);
    assert_int_equal(wal_store_flush_lsn(f->ws), start + 2 * sizeof buf);
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 1);
    assert_int_equal(covers, start + 2 * sizeof buf);
    assert_int_equal(f->nflushed, 1);
    assert_int_equal(f->errors, 0);
}

static void test_truncate(void **state)
{
    fixture *f = *state;
    static uint8_t buf[3 * SEG];
    lsn_t start = 100;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    fill(buf, sizeof buf, start);
    assert_int_equal(wal_store_append(f->ws, start, buf, 2 * SEG + 500), 0);
    /* Not idle: truncation must wait. */
    assert_int_equal(wal_store_truncate(f->ws, start + 10), -EBUSY);
    wait_idle(f);
    assert_true(file_exists(f, "000000010000000000000001"));
    assert_true(file_exists(f, "000000010000000000000002.partial"));

    /* Truncate in the middle of segment 1: segment 2 goes, segment 1 is
     * zeroed after the cut and becomes .partial again. */
    lsn_t cut = SEG + 1234;
    assert_int_equal(wal_store_truncate(f->ws, cut), 0);
    assert_int_equal(wal_store_write_lsn(f->ws), cut);
    assert_int_equal(wal_store_flush_lsn(f->ws), cut);
    assert_false(file_exists(f, "000000010000000000000002.partial"));
    assert_false(file_exists(f, "000000010000000000000001"));
    assert_true(file_exists(f, "000000010000000000000001.partial"));
    assert_true(file_exists(f, "000000010000000000000000"));
    uint8_t back[SEG];
    assert_int_equal(wal_store_read(f->ws, SEG, back, SEG), SEG);
    assert_memory_equal(back, buf + (SEG - start), 1234);
    for (int i = 1234; i < SEG; i++)
        assert_int_equal(back[i], 0);

    /* Writing continues at the cut with different bytes. */
    uint8_t other[300];
    memset(other, 0xAB, sizeof other);
    assert_int_equal(wal_store_append(f->ws, cut, other, sizeof other), 0);
    wait_idle(f);
    assert_int_equal(wal_store_read(f->ws, cut - 4, back, 304), 304);
    assert_memory_equal(back, buf + (cut - 4 - start), 4);
    assert_memory_equal(back + 4, other, sizeof other);
    assert_int_equal(f->errors, 0);
}

static void test_remove_below(void **state)
{
    fixture *f = *state;
    static uint8_t buf[5 * SEG];
    lsn_t start = 8;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    fill(buf, sizeof buf, start);
    lsn_t end = start + 4 * SEG + 10;
    for (lsn_t lsn = start; lsn < end;) {
        size_t n = end - lsn < 30000 ? (size_t)(end - lsn) : 30000;
        assert_int_equal(wal_store_append(f->ws, lsn, buf + (lsn - start), n), 0);
        lsn += n;
    }
    wait_idle(f);
    assert_int_equal(count_files(f), 5);
    assert_int_equal(wal_store_oldest_lsn(f->ws), 0);

    /* A horizon inside segment 2 keeps segment 2. */
    assert_int_equal(wal_store_remove_below(f->ws, 2 * SEG + 5), 2);
    assert_false(file_exists(f, "000000010000000000000000"));
    assert_false(file_exists(f, "000000010000000000000001"));
    assert_true(file_exists(f, "000000010000000000000002"));
    assert_int_equal(wal_store_oldest_lsn(f->ws), 2 * SEG);
    uint8_t back[16];
    assert_int_equal(wal_store_read(f->ws, SEG, back, 16), -ENOENT);
    assert_int_equal(wal_store_read(f->ws, 2 * SEG, back, 16), 16);
    assert_memory_equal(back, buf + (2 * SEG - start), 16);
    /* Idempotent; and never removes the segment being written. */
    assert_int_equal(wal_store_remove_below(f->ws, 2 * SEG), 0);
    assert_int_equal(wal_store_remove_below(f->ws, 100 * SEG), 2);
    assert_true(file_exists(f, "000000010000000000000004.partial"));
    assert_int_equal(count_files(f), 1);
    assert_int_equal(wal_store_get_stats(f->ws)->segments_removed, 4);
}

static void test_shared_ring_full(void **state)
{
    /* Two stores on one ring of depth 2: writes refused with -EBUSY wait
     * for a freed slot and go out then, for both stores; nothing stalls. */
    fixture *f = *state;
    uring *small;
    assert_int_equal(uring_open_ex(&f->loop, 2, ring_flags, &small), 0);
    char dir2[300];
    snprintf(dir2, sizeof dir2, "%s/second", f->dir);
    assert_int_equal(mkdir(dir2, 0700), 0);
    fixture other = {0};
    wal_store *a, *b;
    wal_store_config ca = {.dir = f->dir,
                           .seg_size = SEG,
                           .ring = small,
                           .on_flushed = on_flushed,
                           .on_error = on_error,
                           .arg = f};
    wal_store_config cb = {.dir = dir2,
                           .seg_size = SEG,
                           .ring = small,
                           .on_flushed = on_flushed,
                           .on_error = on_error,
                           .arg = &other};
    assert_int_equal(wal_store_open(&ca, &a), 0);
    assert_int_equal(wal_store_open(&cb, &b), 0);
    assert_int_equal(wal_store_truncate(a, 8), 0);
    assert_int_equal(wal_store_truncate(b, 8), 0);
    uint8_t buf[64];
    lsn_t lsn = 8;
    /* b first: it takes both slots, so a has nothing in flight at all and
     * only a freed slot of b's can get its writes going. */
    lsn_t start = lsn;
    for (int i = 0; i < 40; i++, lsn += sizeof buf) {
        fill(buf, sizeof buf, lsn);
        assert_int_equal(wal_store_append(b, lsn, buf, sizeof buf), 0);
    }
    for (lsn = start; lsn < start + 40 * sizeof buf; lsn += sizeof buf) {
        fill(buf, sizeof buf, lsn);
        assert_int_equal(wal_store_append(a, lsn, buf, sizeof buf), 0);
    }
    assert_int_equal(uring_in_flight(small), 2);
    /* Bounded wait that fails instead of hanging if a is starved. */
    for (int i = 0; i < 25000 && !(wal_store_idle(a) && wal_store_idle(b)); i++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(200);
    }
    assert_true(wal_store_idle(a) && wal_store_idle(b));
    assert_int_equal(wal_store_flush_lsn(a), lsn);
    assert_int_equal(wal_store_flush_lsn(b), lsn);
    uint8_t back[64];
    assert_int_equal(wal_store_read(a, lsn - 64, back, 64), 64);
    fill(buf, sizeof buf, lsn - 64);
    assert_memory_equal(back, buf, 64);
    assert_int_equal(f->errors + other.errors, 0);
    uring_close(small);
    wal_store_close(a);
    wal_store_close(b);
}

static void test_reopen_tidies_names(void **state)
{
    fixture *f = *state;
    /* A crash after a round but before the rename leaves two .partial
     * files, and a half-made segment under its temporary name. */
    char path[400];
    const char *names[] = {"000000010000000000000005.partial", "000000010000000000000006.partial",
                           "000000010000000000000007.partial.tmp", "unrelated.tmp"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", f->dir, names[i]);
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, SEG), 0);
        close(fd);
    }
    wal_store_close(f->ws);
    open_store(f);
    assert_true(file_exists(f, "000000010000000000000005"));
    assert_true(file_exists(f, "000000010000000000000006.partial"));
    assert_false(file_exists(f, "000000010000000000000007.partial.tmp"));
    assert_true(file_exists(f, "unrelated.tmp"));
    assert_int_equal(wal_store_oldest_lsn(f->ws), 5 * SEG);
    /* Truncating into segment 5 makes it the .partial one again. */
    assert_int_equal(wal_store_truncate(f->ws, 5 * SEG + 7), 0);
    assert_true(file_exists(f, "000000010000000000000005.partial"));
    assert_false(file_exists(f, "000000010000000000000006.partial"));
}

/* ---- link_writes mode ------------------------------------------------- */

typedef struct linked {
    fixture *f;
    lsn_t written;
    int bad_reports; /* a flush reported above what had been written */
} linked;

static void on_written_linked(void *arg, lsn_t lsn)
{
    linked *l = arg;
    assert_true(lsn > l->written);
    l->written = lsn;
}

static void on_flushed_linked(void *arg, lsn_t lsn, uint64_t usec)
{
    linked *l = arg;
    /* Durable means written and then synced: never report past what the
     * store has seen complete. */
    if (lsn > wal_store_written_lsn(l->f->ws) || lsn > l->written)
        l->bad_reports++;
    on_flushed(l->f, lsn, usec);
}

static void on_error_linked(void *arg, int err)
{
    linked *l = arg;
    on_error(l->f, err);
}

static void open_linked(fixture *f, linked *l)
{
    wal_store_close(f->ws);
    *l = (linked){.f = f};
    wal_store_config cfg = {.dir = f->dir,
                            .seg_size = SEG,
                            .ring = f->ring,
                            .on_flushed = on_flushed_linked,
                            .on_error = on_error_linked,
                            .on_written = on_written_linked,
                            .arg = l,
                            .caller_syncs = true,
                            .link_writes = true};
    assert_int_equal(wal_store_open(&cfg, &f->ws), 0);
}

static void run_a_bit(fixture *f)
{
    for (int i = 0; i < 20; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

static void test_linked_rounds(void **state)
{
    fixture *f = *state;
    linked l;
    open_linked(f, &l);
    lsn_t start = 1000;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    l.written = start;
    uint8_t buf[3000];
    lsn_t lsn = start;
    for (int i = 0; i < 5; i++, lsn += sizeof buf) {
        fill(buf, sizeof buf, lsn);
        assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
    }
    /* Appends wait for a round: nothing goes to the kernel by itself. */
    run_a_bit(f);
    assert_int_equal(wal_store_written_lsn(f->ws), start);
    assert_int_equal(uring_in_flight(f->ring), 0);
    assert_int_equal(wal_store_write_lsn(f->ws), lsn);
    assert_false(wal_store_idle(f->ws));

    /* One round covers every append: their writes (merged into one) linked
     * ahead of one fdatasync, in one submission. */
    lsn_t covers;
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    assert_int_equal(covers, lsn);
    assert_int_equal(uring_in_flight(f->ring), 2);
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), -EBUSY);
    /* More WAL while it runs waits for the next round. */
    lsn_t round1 = lsn;
    fill(buf, sizeof buf, lsn);
    assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
    lsn += sizeof buf;
    while (f->nflushed == 0)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->flushed[0], round1);
    assert_int_equal(wal_store_flush_lsn(f->ws), round1);
    assert_int_equal(wal_store_written_lsn(f->ws), round1);
    const wal_store_stats *st = wal_store_get_stats(f->ws);
    assert_int_equal(st->fdatasyncs, 1);

    /* A round across a segment boundary syncs both segments and gives the
     * complete one its final name. */
    static uint8_t big[SEG];
    fill(big, sizeof big, lsn);
    assert_int_equal(wal_store_append(f->ws, lsn, big, sizeof big), 0);
    lsn += sizeof big;
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    assert_int_equal(covers, lsn);
    while (f->nflushed < 2)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->flushed[1], lsn);
    assert_int_equal(st->fdatasyncs, 3);
    assert_true(file_exists(f, "000000010000000000000000"));
    assert_true(file_exists(f, "000000010000000000000001.partial"));
    assert_true(wal_store_idle(f->ws));
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 1);

    /* What was written reads back. */
    uint8_t back[sizeof buf];
    assert_int_equal(wal_store_read(f->ws, round1, back, sizeof back), (ssize_t)sizeof back);
    fill(buf, sizeof buf, round1);
    assert_memory_equal(back, buf, sizeof buf);

    /* submit_writes sends waiting writes alone (no sync, nothing durable). */
    fill(buf, sizeof buf, lsn);
    assert_int_equal(wal_store_append(f->ws, lsn, buf, sizeof buf), 0);
    lsn += sizeof buf;
    assert_int_equal(wal_store_submit_writes(f->ws), 0);
    while (wal_store_written_lsn(f->ws) < lsn)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(wal_store_idle(f->ws));
    assert_int_equal(wal_store_flush_lsn(f->ws), lsn - sizeof buf);
    assert_int_equal(st->fdatasyncs, 3);
    /* ...and the next round syncs them (written already, so no write). */
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    assert_int_equal(covers, lsn);
    while (f->nflushed < 3)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(f->flushed[2], lsn);
    assert_int_equal(l.bad_reports, 0);
    assert_int_equal(f->errors, 0);
}

static void test_linked_write_failure_reports_nothing(void **state)
{
    /* A round whose write fails must not report its LSN as flushed even
     * though the fdatasync after it would have worked. */
    fixture *f = *state;
    linked l;
    open_linked(f, &l);
    lsn_t start = 100;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    l.written = start;
    uint8_t buf[2000];
    fill(buf, sizeof buf, start);
    assert_int_equal(wal_store_append(f->ws, start, buf, sizeof buf), 0);
    lsn_t covers;
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    while (f->nflushed < 1)
        uv_run(&f->loop, UV_RUN_ONCE);
    lsn_t durable = start + sizeof buf;
    assert_int_equal(f->flushed[0], durable);

    /* The segment exists (zero-filled) already; a file size limit just past
     * the next write's start cuts that write short, the rest fails. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = durable + 10;
    fill(buf, sizeof buf, durable);
    assert_int_equal(wal_store_append(f->ws, durable, buf, sizeof buf), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    assert_int_equal(covers, durable + sizeof buf);
    for (int i = 0; i < 10000 && f->errors == 0; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(f->errors, 1);
    run_a_bit(f);
    assert_int_equal(f->nflushed, 1); /* nothing more reported */
    assert_int_equal(wal_store_flush_lsn(f->ws), durable);
    assert_int_equal(l.bad_reports, 0);
    assert_int_equal(wal_store_append(f->ws, covers, buf, 1), -EIO);
    /* Wait for the ring to drain before teardown closes the store. */
    for (int i = 0; i < 10000 && uring_in_flight(f->ring) > 0; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(uring_in_flight(f->ring), 0);
}

/* A vote's flush inside on_written, the way the timeline runs it: the
 * running round's write has completed, its linked fdatasync has not. */
typedef struct vote_probe {
    linked l;
    bool probed;
    bool round_was_active;
    uint64_t fdatasyncs_done_before; /* completed fdatasyncs when flush_now began */
    uint64_t fdatasyncs_after;       /* ...and when it returned */
    int rc;
} vote_probe;

static void on_written_vote(void *arg, lsn_t lsn)
{
    vote_probe *v = arg;
    on_written_linked(&v->l, lsn);
    if (v->probed)
        return;
    v->probed = true;
    wal_store *ws = v->l.f->ws;
    v->round_was_active = ws->round_active;
    v->fdatasyncs_done_before = ws->stats.fdatasyncs;
    v->rc = wal_store_flush_now(ws);
    v->fdatasyncs_after = ws->stats.fdatasyncs;
}

static void test_vote_flush_waits_for_the_rounds_fdatasync(void **state)
{
    /* Issue 11.3: on a kernel without IORING_FEAT_CQE_SKIP the write of a
     * round completes before its linked fdatasync.  A vote arriving then
     * (flush_now after every write completed) found no dirty segment and
     * reported the round's bytes flushed with no fdatasync done. */
    fixture *f = *state;
    uring_disable_cqe_skip(f->ring);
    vote_probe v = {0};
    wal_store_close(f->ws);
    v.l = (linked){.f = f};
    wal_store_config cfg = {.dir = f->dir,
                            .seg_size = SEG,
                            .ring = f->ring,
                            .on_flushed = on_flushed_linked,
                            .on_error = on_error_linked,
                            .on_written = on_written_vote,
                            .arg = &v,
                            .caller_syncs = true,
                            .link_writes = true};
    assert_int_equal(wal_store_open(&cfg, &f->ws), 0);
    lsn_t start = 500;
    assert_int_equal(wal_store_truncate(f->ws, start), 0);
    v.l.written = start;
    uint8_t buf[4000];
    fill(buf, sizeof buf, start);
    assert_int_equal(wal_store_append(f->ws, start, buf, sizeof buf), 0);
    lsn_t covers;
    assert_int_equal(wal_store_sync_begin(f->ws, &covers), 0);
    while (f->nflushed < 1)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(v.probed);
    assert_true(v.round_was_active);
    assert_int_equal(v.rc, 0);
    /* flush_now claimed the round's bytes (flush_lsn >= covers): it must
     * have synced them itself, since the round's fdatasync had not completed. */
    assert_int_equal(v.fdatasyncs_done_before, 0);
    assert_true(v.fdatasyncs_after > v.fdatasyncs_done_before);
    assert_int_equal(f->flushed[0], covers);
    assert_int_equal(v.l.bad_reports, 0);
    assert_int_equal(f->errors, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_names),
        cmocka_unit_test_setup_teardown(test_append_creates_partial_zero_filled, setup_plain,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_crossing_segments_renames_complete_ones, setup_plain,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_caller_driven_sync, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_truncate, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_remove_below, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_shared_ring_full, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_tidies_names, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_linked_rounds, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_vote_flush_waits_for_the_rounds_fdatasync, setup_plain,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_linked_write_failure_reports_nothing, setup_plain,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_append_creates_partial_zero_filled, setup_blocking,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_crossing_segments_renames_complete_ones,
                                        setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_caller_driven_sync, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_truncate, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_remove_below, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_shared_ring_full, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_tidies_names, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_linked_rounds, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_vote_flush_waits_for_the_rounds_fdatasync,
                                        setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_linked_write_failure_reports_nothing, setup_blocking,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
