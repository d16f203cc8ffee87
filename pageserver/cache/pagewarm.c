/*
 * pagewarm.c: the set of pages waiting to be rebuilt and its worker.  See
 * pagewarm.h.
 *
 * Shape: a fixed array of entries, a chained hash table of their indices
 * by key (so a note for a waiting page finds it), and a FIFO of the waiting
 * entries in the order they were queued; unused entries form a free list
 * through the FIFO link.  The worker looks at the head: when it has been
 * quiet for quiet_ms it is taken out and rebuilt without the lock held;
 * when it was changed after it was queued it goes to the tail again (its
 * turn then comes quiet_ms after that change at the earliest); otherwise
 * the worker sleeps until it is due.  Everything is guarded by one mutex.
 */
#include "pageserver/cache/pagewarm.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/strata_assert.h"

#define NONE (-1)

typedef struct entry {
    pg_key key;
    lsn_t lsn;          /* the newest change noted */
    uint64_t queued_ns; /* when it took its place in the FIFO */
    uint64_t last_ns;   /* when the newest change was noted */
    int32_t hnext;      /* next in the hash chain */
    int32_t fnext;      /* next in the FIFO, or in the free list */
    uint32_t bucket;
} entry;

struct pagewarm {
    pagewarm_options o;
    pagewarm_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    bool stop;
    pthread_t thread;
    entry *entries;
    int32_t *buckets;
    uint32_t bucket_mask;
    int32_t head, tail, free_list;
    uint64_t waiting;
    pagewarm_stats st;
};

static uint32_t key_bucket(const pagewarm *w, const pg_key *k)
{
    uint64_t h = (uint64_t)k->kind << 56 ^ (uint64_t)k->fork << 48 ^ (uint64_t)k->spc << 32 ^
                 (uint64_t)k->db << 16 ^ k->rel;
    h = (h ^ ((uint64_t)k->blk << 20 | k->blk)) * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(h >> 32) & w->bucket_mask;
}

static bool key_equal(const pg_key *a, const pg_key *b)
{
    return a->kind == b->kind && a->spc == b->spc && a->db == b->db && a->rel == b->rel &&
           a->fork == b->fork && a->blk == b->blk;
}

void pagewarm_options_default(pagewarm_options *o)
{
    o->capacity = PAGEWARM_DEFAULT_CAPACITY;
    o->quiet_ms = PAGEWARM_DEFAULT_QUIET_MS;
}

/* Appends entry i to the FIFO.  Locked. */
static void fifo_push(pagewarm *w, int32_t i, uint64_t now)
{
    w->entries[i].fnext = NONE;
    w->entries[i].queued_ns = now;
    if (w->tail == NONE)
        w->head = i;
    else
        w->entries[w->tail].fnext = i;
    w->tail = i;
}

/* Takes the FIFO's head out.  Locked, FIFO not empty. */
static int32_t fifo_pop(pagewarm *w)
{
    int32_t i = w->head;
    STRATA_ASSERT(i != NONE);
    w->head = w->entries[i].fnext;
    if (w->head == NONE)
        w->tail = NONE;
    return i;
}

/* Removes entry i (already out of the FIFO) from its hash chain and frees
 * it.  Locked. */
static void release(pagewarm *w, int32_t i)
{
    entry *e = &w->entries[i];
    int32_t *link = &w->buckets[e->bucket];
    while (*link != i) {
        STRATA_ASSERT(*link != NONE);
        link = &w->entries[*link].hnext;
    }
    *link = e->hnext;
    e->fnext = w->free_list;
    w->free_list = i;
    w->waiting--;
}

/* Notes (k, lsn) at time now; false when dropped.  Locked. */
static bool note_locked(pagewarm *w, const pg_key *k, lsn_t lsn, uint64_t now)
{
    w->st.noted++;
    uint32_t b = key_bucket(w, k);
    for (int32_t i = w->buckets[b]; i != NONE; i = w->entries[i].hnext) {
        entry *e = &w->entries[i];
        if (key_equal(&e->key, k)) {
            if (lsn > e->lsn)
                e->lsn = lsn;
            e->last_ns = now;
            w->st.coalesced++;
            return true;
        }
    }
    int32_t i = w->free_list;
    if (i == NONE) {
        w->st.dropped++;
        return false;
    }
    entry *e = &w->entries[i];
    w->free_list = e->fnext;
    *e = (entry){.key = *k, .lsn = lsn, .last_ns = now, .hnext = w->buckets[b], .bucket = b};
    w->buckets[b] = i;
    fifo_push(w, i, now);
    w->waiting++;
    if (w->head == i)
        pthread_cond_signal(&w->cv);
    return true;
}

bool pagewarm_note(pagewarm *w, const pg_key *k, lsn_t lsn)
{
    uint64_t now = clock_mono_ns();
    pthread_mutex_lock(&w->mu);
    bool taken = note_locked(w, k, lsn, now);
    pthread_mutex_unlock(&w->mu);
    return taken;
}

static void wait_until(pagewarm *w, uint64_t due_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(due_ns / 1000000000u),
                          .tv_nsec = (long)(due_ns % 1000000000u)};
    int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    STRATA_ASSERT(rc == 0 || rc == ETIMEDOUT);
}

static void *worker_main(void *arg)
{
    pagewarm *w = arg;
    uint64_t quiet = (uint64_t)w->o.quiet_ms * 1000000u;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        if (w->head == NONE) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        entry *e = &w->entries[w->head];
        uint64_t now = clock_mono_ns();
        if (now < e->last_ns + quiet) {
            if (e->last_ns > e->queued_ns) { /* changed while it waited: to the back */
                int32_t i = fifo_pop(w);
                fifo_push(w, i, e->last_ns);
            } else {
                wait_until(w, e->last_ns + quiet);
            }
            continue;
        }
        int32_t i = fifo_pop(w);
        pg_key k = e->key;
        lsn_t lsn = e->lsn;
        release(w, i);
        pthread_mutex_unlock(&w->mu);

        char err[512] = "";
        int rc = w->fn(w->arg, &k, lsn, err, sizeof err);
        if (rc < 0) {
            char kb[96];
            log_warn("warming %s: %s", pg_key_format(&k, kb, sizeof kb), err);
        }

        pthread_mutex_lock(&w->mu);
        if (rc > 0) {
            w->st.rebuilt++;
        } else if (rc == 0) {
            w->st.retried++;
            (void)note_locked(w, &k, lsn, clock_mono_ns());
            w->st.noted--; /* a retry, not a change */
        } else {
            w->st.failures++;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int pagewarm_create(const pagewarm_options *o, pagewarm_fn fn, void *arg, pagewarm **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (o->capacity < 16 || o->capacity > (1u << 20)) {
        snprintf(err, errlen, "page warming: capacity %zu is outside [16, 1048576]", o->capacity);
        return -1;
    }
    pagewarm *w = calloc(1, sizeof *w);
    uint32_t nb = 1;
    while (nb < 2 * o->capacity)
        nb <<= 1;
    if (w != NULL) {
        w->entries = calloc(o->capacity, sizeof *w->entries);
        w->buckets = malloc(nb * sizeof *w->buckets);
    }
    if (w == NULL || w->entries == NULL || w->buckets == NULL) {
        if (w != NULL) {
            free(w->entries);
            free(w->buckets);
        }
        free(w);
        snprintf(err, errlen, "page warming: out of memory");
        return -1;
    }
    w->o = *o;
    w->fn = fn;
    w->arg = arg;
    w->bucket_mask = nb - 1;
    for (uint32_t b = 0; b < nb; b++)
        w->buckets[b] = NONE;
    w->head = w->tail = NONE;
    w->free_list = NONE;
    for (int32_t i = (int32_t)o->capacity - 1; i >= 0; i--) {
        w->entries[i].fnext = w->free_list;
        w->free_list = i;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "page warming: cannot start its thread: %s", strerror(rc));
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w->entries);
        free(w->buckets);
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void pagewarm_destroy(pagewarm *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->entries);
    free(w->buckets);
    free(w);
}

void pagewarm_get_stats(pagewarm *w, pagewarm_stats *out)
{
    pthread_mutex_lock(&w->mu);
    *out = w->st;
    out->waiting = w->waiting;
    pthread_mutex_unlock(&w->mu);
}
