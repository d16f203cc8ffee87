/*
 * store_snap.c: the store's open data files and its published snapshots
 * (store_priv.h has how publication works without blocking readers).
 *
 * For: opening and reference-counting data files; taking, copying,
 * publishing and releasing the snapshot that lists the open layer, the frozen
 * layers and the data files a reader may use.
 * Not for: deciding what a snapshot holds (the flush, GC and writer do).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

store_file *store_file_open(store *st, uint64_t id, char *err, size_t errlen)
{
    char path[4400];
    store_df_path(st->data_dir, id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "open data file %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    store_file *f = calloc(1, sizeof *f);
    if (f == NULL || fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "open data file %s: %s", path, f ? strerror(errno) : "out of memory");
        free(f);
        close(fd);
        return NULL;
    }
    f->id = id;
    f->fd = fd;
    f->size = (uint64_t)sb.st_size;
    atomic_init(&f->refs, 1);
    return f;
}

void store_file_unref(store_file *f)
{
    if (f == NULL)
        return;
    int was = atomic_fetch_sub(&f->refs, 1);
    STRATA_ASSERT_MSG(was > 0, "data file %016llx released with %d references",
                      (unsigned long long)f->id, was);
    if (was == 1) {
        close(f->fd);
        free(f);
    }
}

void store_snap_free(store *st, store_snap *s)
{
    store_layer_unref(s->open);
    for (int i = 0; i < s->nfrozen; i++)
        store_layer_unref(s->frozen[i]);
    for (size_t i = 0; i < s->nfiles; i++)
        store_file_unref(s->files[i]);
    free(s->files);
    uint32_t slot = s->slot;
    free(s);
    if (slot < STORE_SNAP_SLOTS)
        atomic_store(&st->snap_slots[slot], NULL);
}

store_snap *store_snap_acquire(store *st)
{
    uint64_t w = atomic_fetch_add(&st->snap_word, (uint64_t)1 << 32);
    store_snap *s = atomic_load(&st->snap_slots[(uint32_t)w]);
    STRATA_ASSERT(s != NULL); /* a pinned slot is never empty */
    return s;
}

void store_snap_release(store *st, store_snap *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        store_snap_free(st, s);
}

store_snap *store_snap_clone_current(store *st)
{
    store_snap *cur = atomic_load(&st->snap_slots[(uint32_t)atomic_load(&st->snap_word)]);
    store_snap *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->slot = STORE_SNAP_SLOTS;
    if (cur == NULL)
        return s;
    s->files = cur->nfiles ? malloc(cur->nfiles * sizeof *s->files) : NULL;
    if (cur->nfiles && s->files == NULL) {
        free(s);
        return NULL;
    }
    s->open = cur->open;
    store_layer_ref(s->open);
    s->nfrozen = cur->nfrozen;
    for (int i = 0; i < cur->nfrozen; i++) {
        s->frozen[i] = cur->frozen[i];
        store_layer_ref(s->frozen[i]);
    }
    s->nfiles = cur->nfiles;
    for (size_t i = 0; i < cur->nfiles; i++) {
        s->files[i] = cur->files[i];
        atomic_fetch_add(&s->files[i]->refs, 1);
    }
    return s;
}

int store_snap_publish(store *st, store_snap *s)
{
    uint32_t slot = STORE_SNAP_SLOTS;
    uint32_t cur_slot = (uint32_t)atomic_load(&st->snap_word);
    for (int tries = 0; tries < 1000 && slot == STORE_SNAP_SLOTS; tries++) {
        for (uint32_t i = 0; i < STORE_SNAP_SLOTS; i++) {
            if (i != cur_slot && atomic_load(&st->snap_slots[i]) == NULL) {
                slot = i;
                break;
            }
        }
        if (slot == STORE_SNAP_SLOTS)
            sched_yield(); /* every slot is held by a reader: wait briefly */
    }
    if (slot == STORE_SNAP_SLOTS) {
        s->slot = STORE_SNAP_SLOTS;
        atomic_store(&s->refs, 1);
        store_snap_release(st, s);
        return -1;
    }
    s->slot = slot;
    atomic_store(&s->refs, STORE_SNAP_BIAS);
    atomic_store(&st->snap_slots[slot], s);
    uint64_t old_word = atomic_exchange(&st->snap_word, (uint64_t)slot);
    store_snap *old = atomic_load(&st->snap_slots[(uint32_t)old_word]);
    if (old != NULL && old != s) {
        int64_t pinned = (int64_t)(old_word >> 32);
        int64_t delta = pinned - STORE_SNAP_BIAS;
        if (atomic_fetch_add(&old->refs, delta) + delta == 0)
            store_snap_free(st, old);
    }
    return 0;
}

store_file *store_snap_find_file(const store_snap *s, uint64_t id)
{
    size_t lo = 0, hi = s->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->files[mid]->id == id)
            return s->files[mid];
        if (s->files[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int store_snap_add_file(store_snap *s, store_file *f)
{
    store_file **nf = realloc(s->files, (s->nfiles + 1) * sizeof *nf);
    if (nf == NULL)
        return -1;
    s->files = nf;
    size_t pos = s->nfiles;
    while (pos > 0 && s->files[pos - 1]->id > f->id) {
        s->files[pos] = s->files[pos - 1];
        pos--;
    }
    s->files[pos] = f;
    s->nfiles++;
    atomic_fetch_add(&f->refs, 1);
    return 0;
}

void store_snap_remove_file(store_snap *s, uint64_t id)
{
    for (size_t i = 0; i < s->nfiles; i++) {
        if (s->files[i]->id == id) {
            store_file_unref(s->files[i]);
            memmove(&s->files[i], &s->files[i + 1], (s->nfiles - i - 1) * sizeof *s->files);
            s->nfiles--;
            return;
        }
    }
}
