/*
 * metrics.c: the Prometheus registry.  See metrics.h.
 *
 * Families and series are linked lists guarded by the registry mutex and
 * only ever appended to, so a series pointer handed out stays valid and its
 * atomics can be updated without the lock.  Histogram buckets are stored
 * per bucket (not cumulative) and summed at render time; the count is the
 * sum of the buckets, so _count always equals the +Inf bucket.
 * Not here: HTTP (common/net/http.c serves the rendered text).
 */
#include "base/metrics.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

typedef enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM } metric_type;

typedef struct series {
    struct series *next;
    char *label_values[METRICS_MAX_LABELS];
    _Atomic uint64_t value;                            /* counter; gauge as double bits */
    _Atomic uint64_t buckets[METRICS_MAX_BUCKETS + 1]; /* histogram, last = +Inf */
    _Atomic uint64_t sum_bits;                         /* histogram sum as double bits */
} series;

typedef struct family {
    struct family *next;
    metric_type type;
    char *name;
    char *help;
    int nlabels;
    char *label_names[METRICS_MAX_LABELS];
    int nbounds;
    double bounds[METRICS_MAX_BUCKETS];
    series *first, *last;
} family;

struct metrics_registry {
    pthread_mutex_t mu;
    family *first, *last;
};

/* The public series types are the internal one. */
struct metrics_counter {
    series s;
};
struct metrics_gauge {
    series s;
};
struct metrics_histogram {
    series s;
    const family *f;
};

static const char *const type_names[] = {"counter", "gauge", "histogram"};

metrics_registry *metrics_registry_new(void)
{
    metrics_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

/* The public structs begin with the series, so s is the allocated block. */
static void series_free(series *s, int nlabels)
{
    for (int i = 0; i < nlabels; i++)
        free(s->label_values[i]);
    free(s);
}

void metrics_registry_free(metrics_registry *r)
{
    if (!r)
        return;
    family *f = r->first;
    while (f) {
        family *fn = f->next;
        series *s = f->first;
        while (s) {
            series *sn = s->next;
            series_free(s, f->nlabels);
            s = sn;
        }
        free(f->name);
        free(f->help);
        for (int i = 0; i < f->nlabels; i++)
            free(f->label_names[i]);
        free(f);
        f = fn;
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static metrics_registry *default_registry;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void)
{
    default_registry = metrics_registry_new();
}

metrics_registry *metrics_default_registry(void)
{
    pthread_once(&default_once, default_init);
    return default_registry;
}

/* ------------------------------------------------------------ registration */

static bool valid_name(const char *s, bool colon_ok)
{
    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
        bool digit = c >= '0' && c <= '9';
        if (!(alpha || (digit && p != s)))
            return false;
    }
    return true;
}

static bool family_matches(const family *f, metric_type type, const char *help, int nlabels,
                           const char *const label_names[], const double *bounds, int nbounds)
{
    if (f->type != type || strcmp(f->help, help) != 0 || f->nlabels != nlabels)
        return false;
    for (int i = 0; i < nlabels; i++)
        if (strcmp(f->label_names[i], label_names[i]) != 0)
            return false;
    if (type == METRIC_HISTOGRAM) {
        if (f->nbounds != nbounds)
            return false;
        for (int i = 0; i < nbounds; i++)
            if (f->bounds[i] != bounds[i])
                return false;
    }
    return true;
}

static family *family_new(metric_type type, const char *name, const char *help, int nlabels,
                          const char *const label_names[], const double *bounds, int nbounds)
{
    family *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help);
    f->nlabels = nlabels;
    bool ok = f->name && f->help;
    for (int i = 0; i < nlabels; i++) {
        f->label_names[i] = strdup(label_names[i]);
        ok = ok && f->label_names[i];
    }
    f->nbounds = nbounds;
    for (int i = 0; i < nbounds; i++)
        f->bounds[i] = bounds[i];
    if (!ok) {
        free(f->name);
        free(f->help);
        for (int i = 0; i < nlabels; i++)
            free(f->label_names[i]);
        free(f);
        return NULL;
    }
    return f;
}

/* Finds or creates the series; size is the public struct to allocate. */
static series *register_series(metrics_registry *r, metric_type type, const char *name,
                               const char *help, const double *bounds, int nbounds, int nlabels,
                               const char *const label_names[], const char *const label_values[],
                               size_t size)
{
    if (!r || !valid_name(name, true) || !help || nlabels < 0 || nlabels > METRICS_MAX_LABELS) {
        log_error("metrics: invalid registration of \"%s\"", name ? name : "(null)");
        return NULL;
    }
    for (int i = 0; i < nlabels; i++) {
        if (!valid_name(label_names[i], false) || !label_values[i] ||
            (type == METRIC_HISTOGRAM && strcmp(label_names[i], "le") == 0) ||
            strncmp(label_names[i], "__", 2) == 0) {
            log_error("metrics: invalid label on \"%s\"", name);
            return NULL;
        }
    }
    if (type == METRIC_HISTOGRAM) {
        if (!bounds || nbounds < 1 || nbounds > METRICS_MAX_BUCKETS) {
            log_error("metrics: histogram \"%s\" needs 1 to %d bounds", name, METRICS_MAX_BUCKETS);
            return NULL;
        }
        for (int i = 0; i < nbounds; i++)
            if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
                log_error("metrics: histogram \"%s\" bounds must increase", name);
                return NULL;
            }
    }
    pthread_mutex_lock(&r->mu);
    family *f;
    for (f = r->first; f; f = f->next)
        if (strcmp(f->name, name) == 0)
            break;
    if (f && !family_matches(f, type, help, nlabels, label_names, bounds, nbounds)) {
        pthread_mutex_unlock(&r->mu);
        log_error("metrics: \"%s\" registered twice with different type, help or labels", name);
        return NULL;
    }
    if (!f) {
        f = family_new(type, name, help, nlabels, label_names, bounds, nbounds);
        if (!f) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        if (r->last)
            r->last->next = f;
        else
            r->first = f;
        r->last = f;
    }
    series *s;
    for (s = f->first; s; s = s->next) {
        int i = 0;
        while (i < nlabels && strcmp(s->label_values[i], label_values[i]) == 0)
            i++;
        if (i == nlabels)
            break;
    }
    if (!s) {
        s = calloc(1, size);
        bool ok = s != NULL;
        for (int i = 0; ok && i < nlabels; i++) {
            s->label_values[i] = strdup(label_values[i]);
            ok = s->label_values[i] != NULL;
        }
        if (!ok) {
            if (s)
                series_free(s, nlabels);
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        if (type == METRIC_HISTOGRAM)
            ((metrics_histogram *)s)->f = f;
        if (f->last)
            f->last->next = s;
        else
            f->first = s;
        f->last = s;
    }
    pthread_mutex_unlock(&r->mu);
    return s;
}

metrics_counter *metrics_counter_register(metrics_registry *r, const char *name, const char *help,
                                          int nlabels, const char *const label_names[],
                                          const char *const label_values[])
{
    return (metrics_counter *)register_series(r, METRIC_COUNTER, name, help, NULL, 0, nlabels,
                                              label_names, label_values, sizeof(metrics_counter));
}

metrics_gauge *metrics_gauge_register(metrics_registry *r, const char *name, const char *help,
                                      int nlabels, const char *const label_names[],
                                      const char *const label_values[])
{
    return (metrics_gauge *)register_series(r, METRIC_GAUGE, name, help, NULL, 0, nlabels,
                                            label_names, label_values, sizeof(metrics_gauge));
}

metrics_histogram *metrics_histogram_register(metrics_registry *r, const char *name,
                                              const char *help, const double *bounds, int nbounds,
                                              int nlabels, const char *const label_names[],
                                              const char *const label_values[])
{
    return (metrics_histogram *)register_series(r, METRIC_HISTOGRAM, name, help, bounds, nbounds,
                                                nlabels, label_names, label_values,
                                                sizeof(metrics_histogram));
}

/* ----------------------------------------------------------------- updates */

static uint64_t double_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double bits_double(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static void atomic_add_double(_Atomic uint64_t *bits, double delta)
{
    uint64_t old = atomic_load_explicit(bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(bits, &old, double_bits(bits_double(old) + delta),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void metrics_counter_inc(metrics_counter *c)
{
    metrics_counter_add(c, 1);
}

void metrics_counter_add(metrics_counter *c, uint64_t n)
{
    if (c)
        atomic_fetch_add_explicit(&c->s.value, n, memory_order_relaxed);
}

uint64_t metrics_counter_value(const metrics_counter *c)
{
    return c ? atomic_load_explicit(&((metrics_counter *)c)->s.value, memory_order_relaxed) : 0;
}

void metrics_gauge_set(metrics_gauge *g, double v)
{
    if (g)
        atomic_store_explicit(&g->s.value, double_bits(v), memory_order_relaxed);
}

void metrics_gauge_add(metrics_gauge *g, double delta)
{
    if (g)
        atomic_add_double(&g->s.value, delta);
}

double metrics_gauge_value(const metrics_gauge *g)
{
    if (!g)
        return 0;
    return bits_double(atomic_load_explicit(&((metrics_gauge *)g)->s.value, memory_order_relaxed));
}

void metrics_histogram_observe(metrics_histogram *h, double v)
{
    if (!h)
        return;
    const family *f = h->f;
    int i = 0;
    while (i < f->nbounds && !(v <= f->bounds[i])) /* NaN lands in +Inf */
        i++;
    atomic_fetch_add_explicit(&h->s.buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&h->s.sum_bits, v);
}

/* --------------------------------------------------------------- rendering */

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool failed;
} strbuf;

static void sb_append(strbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len < n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s)
{
    sb_append(b, s, strlen(s));
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert(n >= 0 && (size_t)n < sizeof tmp);
    sb_append(b, tmp, (size_t)n);
}

/* Shortest of %.15g / %.17g that reads back as v; Prometheus spellings for
 * the special values. */
static void format_double(double v, char *out, size_t len)
{
    if (isnan(v)) {
        snprintf(out, len, "NaN");
    } else if (isinf(v)) {
        snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
    } else {
        snprintf(out, len, "%.15g", v);
        if (strtod(out, NULL) != v)
            snprintf(out, len, "%.17g", v);
    }
}

/* Escapes backslash and newline (HELP), and the double quote (labels). */
static void sb_escaped(strbuf *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            sb_puts(b, "\\\\");
        else if (*s == '\n')
            sb_puts(b, "\\n");
        else if (quote && *s == '"')
            sb_puts(b, "\\\"");
        else
            sb_append(b, s, 1);
    }
}

/* {a="x",b="y"[,le="..."]} or nothing. */
static void sb_labels(strbuf *b, const family *f, const series *s, const char *le)
{
    if (f->nlabels == 0 && !le)
        return;
    sb_puts(b, "{");
    for (int i = 0; i < f->nlabels; i++) {
        if (i)
            sb_puts(b, ",");
        sb_puts(b, f->label_names[i]);
        sb_puts(b, "=\"");
        sb_escaped(b, s->label_values[i], true);
        sb_puts(b, "\"");
    }
    if (le) {
        if (f->nlabels)
            sb_puts(b, ",");
        sb_puts(b, "le=\"");
        sb_puts(b, le);
        sb_puts(b, "\"");
    }
    sb_puts(b, "}");
}

static void render_series(strbuf *b, const family *f, series *s)
{
    char num[64];
    switch (f->type) {
    case METRIC_COUNTER:
        sb_puts(b, f->name);
        sb_labels(b, f, s, NULL);
        sb_printf(b, " %llu\n",
                  (unsigned long long)atomic_load_explicit(&s->value, memory_order_relaxed));
        return;
    case METRIC_GAUGE:
        format_double(bits_double(atomic_load_explicit(&s->value, memory_order_relaxed)), num,
                      sizeof num);
        sb_puts(b, f->name);
        sb_labels(b, f, s, NULL);
        sb_printf(b, " %s\n", num);
        return;
    case METRIC_HISTOGRAM: {
        uint64_t cumulative = 0;
        char le[64];
        for (int i = 0; i <= f->nbounds; i++) {
            cumulative += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
            if (i < f->nbounds)
                format_double(f->bounds[i], le, sizeof le);
            else
                snprintf(le, sizeof le, "+Inf");
            sb_puts(b, f->name);
            sb_puts(b, "_bucket");
            sb_labels(b, f, s, le);
            sb_printf(b, " %llu\n", (unsigned long long)cumulative);
        }
        format_double(bits_double(atomic_load_explicit(&s->sum_bits, memory_order_relaxed)), num,
                      sizeof num);
        sb_puts(b, f->name);
        sb_puts(b, "_sum");
        sb_labels(b, f, s, NULL);
        sb_printf(b, " %s\n", num);
        sb_puts(b, f->name);
        sb_puts(b, "_count");
        sb_labels(b, f, s, NULL);
        sb_printf(b, " %llu\n", (unsigned long long)cumulative);
        return;
    }
    }
}

char *metrics_render(metrics_registry *r, size_t *len)
{
    strbuf b = {0};
    sb_puts(&b, ""); /* an empty registry renders as "" rather than NULL */
    pthread_mutex_lock(&r->mu);
    for (family *f = r->first; f; f = f->next) {
        sb_puts(&b, "# HELP ");
        sb_puts(&b, f->name);
        sb_puts(&b, " ");
        sb_escaped(&b, f->help, false);
        sb_puts(&b, "\n# TYPE ");
        sb_puts(&b, f->name);
        sb_puts(&b, " ");
        sb_puts(&b, type_names[f->type]);
        sb_puts(&b, "\n");
        for (series *s = f->first; s; s = s->next)
            render_series(&b, f, s);
    }
    pthread_mutex_unlock(&r->mu);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
