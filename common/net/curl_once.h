/*
 * curl_once.h: libcurl's process-wide initialisation, done once.
 *
 * For: every libcurl user in Strata (remote_s3.c, etcd.c): curl_global_init
 * is not thread-safe and must run once per process, before any handle.
 * Not for: handles or requests (each user keeps its own).
 */
#ifndef STRATA_NET_CURL_ONCE_H
#define STRATA_NET_CURL_ONCE_H

#include <curl/curl.h>

/* Runs curl_global_init on the first call (any thread); returns its result,
 * the same on every call. */
CURLcode curl_once_init(void);

#endif
