/*
 * timeline_reaper.c: the thread that tears timelines down once their last
 * reference is gone (timeline.h, "teardown off the caller's thread").
 *
 * Why: the teardown joins the WAL receiver, the image workers and the
 * uploader (which may be inside an object-store call of up to 300 s), and
 * for a deleted timeline lists and deletes its objects in the store and
 * removes its directory.  The last reference is often dropped on an event
 * loop (a pagestream connection closing): done there, every connection of
 * every tenant would wait for it.
 *
 * For: the queue and the thread, and waiting for them to drain.
 * Not for: what the teardown does (timeline.c, timeline_destroy).
 *
 * One FIFO queue, linked through timeline.reap_next, under one mutex; one
 * thread pops and destroys, holding no lock meanwhile.  A teardown may
 * drop the last reference of another timeline (a branch's ancestor), which
 * then joins the same queue.  Stopping drains the queue first, so a
 * shutdown still flushes every store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/failpoint.h"
#include "base/strata_assert.h"
#include "pageserver/timeline/timeline_priv.h"

struct timeline_reaper {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    timeline *head, *tail; /* waiting for teardown, oldest first */
    bool quit;
    pthread_t thread;
};

static void *reaper_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-reaper");
    timeline_reaper *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->head == NULL && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        timeline *tl = r->head;
        if (tl == NULL)
            break; /* quit, and nothing left */
        r->head = tl->reap_next;
        if (r->head == NULL)
            r->tail = NULL;
        pthread_mutex_unlock(&r->mu);
        /* A slow teardown on demand, for tests (failpoint.h). */
        failpoint_hit("reaper.before_teardown");
        timeline_destroy(tl);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int timeline_reaper_start(timeline_reaper **out, char *err, size_t errlen)
{
    *out = NULL;
    timeline_reaper *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc = pthread_create(&r->thread, NULL, reaper_main, r);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the timeline reaper thread: %s", strerror(rc));
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void timeline_reaper_take(timeline_reaper *r, timeline *tl)
{
    STRATA_ASSERT(atomic_load(&tl->refs) == 0);
    tl->reap_next = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->tail != NULL)
        r->tail->reap_next = tl;
    else
        r->head = tl;
    r->tail = tl;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void timeline_reaper_stop(timeline_reaper *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    STRATA_ASSERT(r->head == NULL && r->tail == NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
