/*
 * fuzz_tar.c: libFuzzer target for the CLI's basebackup tar reader
 * (cli/client/basebackup_tar.h), the decoder of what a pageserver sends a compute
 * launcher.  The reader is pure C with no dependencies, so it is compiled
 * in here (the fuzz targets do not link strata_cli).  Each input is fed
 * whole and then again split at a point taken from its first byte; both
 * must agree, and every entry the reader hands out must have a safe name
 * and data exactly as long as its declared size.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cli/client/basebackup_tar.c"

typedef struct check {
    uint64_t declared, got;
    bool in_file;
} check;

static int on_begin(const bbtar_entry *e, void *arg)
{
    check *c = arg;
    assert(bbtar_name_is_safe(e->name));
    assert(!c->in_file);
    c->declared = e->size;
    c->got = 0;
    c->in_file = !e->is_dir;
    assert(!e->is_dir || e->size == 0);
    return 0;
}

static int on_data(const uint8_t *p, size_t n, void *arg)
{
    check *c = arg;
    (void)p;
    assert(c->in_file);
    c->got += n;
    assert(c->got <= c->declared);
    return 0;
}

static int on_end(const bbtar_entry *e, void *arg)
{
    check *c = arg;
    (void)e;
    assert(c->in_file && c->got == c->declared);
    c->in_file = false;
    return 0;
}

static int run(const uint8_t *data, size_t size, size_t split)
{
    check c = {0};
    bbtar_callbacks cb = {.begin = on_begin, .data = on_data, .end = on_end, .arg = &c};
    bbtar_reader r;
    bbtar_init(&r, &cb);
    int rc = bbtar_feed(&r, data, split);
    if (rc == 0)
        rc = bbtar_feed(&r, data + split, size - split);
    if (rc == 0)
        rc = bbtar_finish(&r);
    assert(rc == 0 || r.err[0] != '\0');
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int whole = run(data, size, 0);
    size_t split = size > 0 ? (size_t)data[0] * 37 % (size + 1) : 0;
    int parts = run(data, size, split);
    assert(whole == parts);
    return 0;
}
