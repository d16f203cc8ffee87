/*
 * metrics.h: a small Prometheus registry.
 *
 * Counters, gauges and fixed-bucket histograms, each a family (name, help,
 * label names) with one series per set of label values.  Registration and
 * rendering take the registry's mutex; updates (inc/add/set/observe) are
 * lock-free atomics, safe from any thread (event loops update, the HTTP
 * thread renders).  Not a general client library: no summaries, no
 * expiry, series live until the registry is freed.
 *
 * Ownership: series pointers belong to the registry and stay valid until
 * metrics_registry_free().  Registering the same name with the same type,
 * help text, label names and values returns the existing series.
 */
#ifndef STRATA_COMMON_METRICS_H
#define STRATA_COMMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 4
#define METRICS_MAX_BUCKETS 32

typedef struct metrics_registry metrics_registry;
typedef struct metrics_counter metrics_counter;
typedef struct metrics_gauge metrics_gauge;
typedef struct metrics_histogram metrics_histogram;

/* A new empty registry, or NULL when out of memory. */
metrics_registry *metrics_registry_new(void);
/* Frees the registry and every series in it.  No update may race this. */
void metrics_registry_free(metrics_registry *r);

/* The process-wide registry the daemons register into and /metrics renders
 * by default; created on first use, never freed.  NULL only when out of
 * memory. */
metrics_registry *metrics_default_registry(void);

/*
 * Registration.  name must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* (at most METRICS_MAX_LABELS; "le" is reserved for
 * histograms).  label_names/label_values may be NULL when nlabels is 0.
 * Returns NULL (and logs) on an invalid name, a clash with an existing
 * family of another type/help/label names, or out of memory.
 */
metrics_counter *metrics_counter_register(metrics_registry *r, const char *name, const char *help,
                                          int nlabels, const char *const label_names[],
                                          const char *const label_values[]);
metrics_gauge *metrics_gauge_register(metrics_registry *r, const char *name, const char *help,
                                      int nlabels, const char *const label_names[],
                                      const char *const label_values[]);
/* bounds: strictly increasing finite upper bounds (1..METRICS_MAX_BUCKETS);
 * a +Inf bucket is implied.  A family's series all share its bounds. */
metrics_histogram *metrics_histogram_register(metrics_registry *r, const char *name,
                                              const char *help, const double *bounds, int nbounds,
                                              int nlabels, const char *const label_names[],
                                              const char *const label_values[]);

/* Updates: lock-free, any thread.  A NULL series is ignored, so a failed
 * registration degrades to no metrics rather than a crash. */
void metrics_counter_inc(metrics_counter *c);
void metrics_counter_add(metrics_counter *c, uint64_t n);
uint64_t metrics_counter_value(const metrics_counter *c);
void metrics_gauge_set(metrics_gauge *g, double v);
void metrics_gauge_add(metrics_gauge *g, double delta);
double metrics_gauge_value(const metrics_gauge *g);
void metrics_histogram_observe(metrics_histogram *h, double v);

/* The Prometheus text exposition format (version 0.0.4) of every family in
 * registration order: # HELP, # TYPE, then the series.  Returns a malloc'd
 * NUL-terminated string (caller frees) and its length in *len, or NULL when
 * out of memory. */
char *metrics_render(metrics_registry *r, size_t *len);

#endif
