/*
 * failpoint.c: STRATA_FAILPOINTS parsing and the actions (failpoint.h).
 */
#include "base/failpoint.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FP_MAX 32
#define FP_NAME_LEN 64

typedef enum fp_action { FP_EXIT = 1, FP_SLEEP = 2 } fp_action;

typedef struct fp_entry {
    char name[FP_NAME_LEN];
    fp_action action;
    long sleep_ms;
} fp_entry;

static fp_entry entries[FP_MAX];
static int n_entries;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Parses one "NAME=ACTION" item into *e; false (with a note on stderr) if
 * it is malformed. */
static bool parse_item(const char *item, fp_entry *e)
{
    const char *eq = strchr(item, '=');
    size_t nlen = eq ? (size_t)(eq - item) : 0;
    if (eq == NULL || nlen == 0 || nlen >= FP_NAME_LEN) {
        fprintf(stderr, "%s: ignoring malformed entry \"%s\" (want NAME=exit or NAME=sleep:MS)\n",
                FAILPOINT_ENV, item);
        return false;
    }
    memcpy(e->name, item, nlen);
    e->name[nlen] = '\0';
    const char *act = eq + 1;
    if (strcmp(act, "exit") == 0) {
        e->action = FP_EXIT;
        return true;
    }
    if (strncmp(act, "sleep:", 6) == 0) {
        char *end = NULL;
        long ms = strtol(act + 6, &end, 10);
        if (end != act + 6 && *end == '\0' && ms >= 0 && ms <= 3600 * 1000) {
            e->action = FP_SLEEP;
            e->sleep_ms = ms;
            return true;
        }
    }
    fprintf(stderr, "%s: ignoring unknown action \"%s\" for %s\n", FAILPOINT_ENV, act, e->name);
    return false;
}

static void load(void)
{
    n_entries = 0;
    const char *v = getenv(FAILPOINT_ENV);
    if (v == NULL || *v == '\0')
        return;
    char *copy = strdup(v);
    if (copy == NULL)
        return;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item != NULL && n_entries < FP_MAX;
         item = strtok_r(NULL, ",", &save)) {
        if (parse_item(item, &entries[n_entries]))
            n_entries++;
    }
    free(copy);
}

void failpoint_reload(void)
{
    load();
}

void failpoint_hit(const char *name)
{
    pthread_once(&once, load);
    for (int i = 0; i < n_entries; i++) {
        if (strcmp(entries[i].name, name) != 0)
            continue;
        if (entries[i].action == FP_EXIT) {
            fprintf(stderr, "failpoint %s: exiting\n", name);
            _exit(137);
        }
        struct timespec ts = {entries[i].sleep_ms / 1000, (entries[i].sleep_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}
