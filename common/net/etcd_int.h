/*
 * etcd_int.h: what etcd.c and etcd_json.c share, private to them.
 *
 * For: the error helper, the printable copy of etcd's messages and the
 * lease TTL bound both halves check.
 * Not for: callers (etcd.h is the contract).
 */
#ifndef STRATA_NET_ETCD_INT_H
#define STRATA_NET_ETCD_INT_H

#include <stddef.h>

/* etcd's largest lease TTL (its MaxLeaseTTL, 9e9 s). */
#define ETCD_MAX_TTL 9000000000LL

/* Formats into err[errlen] (when given) and returns -1. */
int etcd_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies a message into out[cap], printable ASCII only (others become '?'). */
void etcd_copy_printable(char *out, size_t cap, const char *s);

#endif
