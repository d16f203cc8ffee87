/*
 * fuzz_manifest: manifest_decode (pageserver/remote/manifest.c) on arbitrary
 * bytes, as read from an object store anyone with the keys can write.
 * Properties checked: no crash or sanitizer report; a refusal leaves the
 * output zeroed with a message; an accepted manifest passes manifest_check,
 * and encoding it and decoding the encoding gives the same manifest and the
 * same bytes again (the encoding is canonical).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "pageserver/remote/manifest.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_init("fuzz_manifest", LOG_LEVEL_ERROR);
    return 0;
}

static bool same(const manifest *a, const manifest *b)
{
    if (a->seq != b->seq || !strata_id_equal(&a->tenant, &b->tenant) ||
        !strata_id_equal(&a->timeline, &b->timeline) || a->consistent_lsn != b->consistent_lsn ||
        a->gc_horizon != b->gc_horizon || a->start_lsn != b->start_lsn ||
        a->n_safekeepers != b->n_safekeepers || a->next_file_id != b->next_file_id ||
        a->n_files != b->n_files || a->has_ancestor != b->has_ancestor ||
        !strata_id_equal(&a->ancestor_timeline, &b->ancestor_timeline) ||
        a->ancestor_lsn != b->ancestor_lsn)
        return false;
    for (int i = 0; i < a->n_safekeepers; i++)
        if (strcmp(a->safekeepers[i], b->safekeepers[i]) != 0)
            return false;
    return a->n_files == 0 || memcmp(a->files, b->files, a->n_files * sizeof *a->files) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    manifest m, back;
    char err[512] = "";
    if (manifest_decode(data, size, &m, err, sizeof err) != 0) {
        if (err[0] == '\0' || m.files != NULL || m.n_files != 0 || m.seq != 0)
            abort();
        return 0;
    }
    if (manifest_check(&m, err, sizeof err) != 0)
        abort();
    char *text, *again;
    size_t len, again_len;
    if (manifest_encode(&m, &text, &len, err, sizeof err) != 0)
        abort();
    if (manifest_decode(text, len, &back, err, sizeof err) != 0 || !same(&m, &back))
        abort();
    if (manifest_encode(&back, &again, &again_len, err, sizeof err) != 0 || again_len != len ||
        memcmp(again, text, len) != 0)
        abort();
    free(again);
    free(text);
    manifest_free(&back);
    manifest_free(&m);
    return 0;
}
