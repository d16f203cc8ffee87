/*
 * fuzz_timelines: the decoder of D/timelines.json (cli/local/timelines.c,
 * timelines_parse): the named timelines and computes of a cluster.
 * Properties checked: no crash or sanitizer report; a parsed registry has
 * main and the default compute first, every name valid and unique, every
 * parent and compute timeline known, and survives a save and a load
 * unchanged.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/local/timelines.h"
#include "base/strata_assert.h"

static cluster the_cluster;
static timeline_registry reg, again;

/* The scratch directory goes when the fuzzer exits. */
static void cleanup(void)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", the_cluster.dir, TIMELINES_FILE);
    unlink(path);
    rmdir(the_cluster.dir);
}

static void setup(void)
{
    if (the_cluster.dir[0] != '\0')
        return;
    char tmpl[] = "/tmp/fuzz_timelines.XXXXXX";
    STRATA_ASSERT(mkdtemp(tmpl) != NULL);
    snprintf(the_cluster.dir, sizeof the_cluster.dir, "%s", tmpl);
    STRATA_ASSERT(strata_id_parse("3c1d0000000000000000000000000000", &the_cluster.timeline_id));
    the_cluster.compute_port = 5432;
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    cli_err err = {{0}};
    if (timelines_parse(&the_cluster, "input", (const char *)data, size, &reg, &err) != 0)
        return 0;
    STRATA_ASSERT(strcmp(reg.timelines[0].name, TIMELINES_MAIN) == 0);
    STRATA_ASSERT(strcmp(reg.computes[0].name, TIMELINES_DEFAULT_COMPUTE) == 0);
    for (int i = 0; i < reg.ntimelines; i++) {
        STRATA_ASSERT(timelines_name_ok(reg.timelines[i].name, &err));
        STRATA_ASSERT(timelines_find(&reg, reg.timelines[i].name) == &reg.timelines[i]);
        STRATA_ASSERT(i == 0 || timelines_find(&reg, reg.timelines[i].parent) != NULL);
    }
    for (int i = 0; i < reg.ncomputes; i++) {
        STRATA_ASSERT(timelines_find_compute(&reg, reg.computes[i].name) == &reg.computes[i]);
        STRATA_ASSERT(timelines_find(&reg, reg.computes[i].timeline) != NULL);
    }
    STRATA_ASSERT(timelines_save(&the_cluster, &reg, &err) == 0);
    STRATA_ASSERT(timelines_load(&the_cluster, &again, &err) == 0);
    STRATA_ASSERT(again.ntimelines == reg.ntimelines && again.ncomputes == reg.ncomputes);
    STRATA_ASSERT(memcmp(again.timelines, reg.timelines,
                         sizeof reg.timelines[0] * (size_t)reg.ntimelines) == 0);
    for (int i = 0; i < reg.ncomputes; i++) {
        const compute_entry *a = &again.computes[i], *b = &reg.computes[i];
        STRATA_ASSERT(strcmp(a->name, b->name) == 0 && strcmp(a->timeline, b->timeline) == 0 &&
                      a->port == b->port && a->read_only == b->read_only &&
                      a->has_lsn == b->has_lsn && (!a->has_lsn || a->lsn == b->lsn));
    }
    return 0;
}
