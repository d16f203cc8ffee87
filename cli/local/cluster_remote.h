/*
 * cluster_remote.h: the local cluster's remote store (docs/storage.md), where the
 * pageserver uploads its data files and manifests and the safekeepers back up
 * closed WAL segments (common/net/remote_storage.h).
 *
 * Every cluster has one, fixed when the cluster is made and kept in
 * cluster.json ("remote"): by default the local directory D/remote, beside
 * (not inside) the pageserver's data directory D/pageserver, as
 * file:///.../remote; with `strata up --remote s3://BUCKET/PREFIX` an S3
 * store whose endpoint and keys come from the environment (STRATA_S3_ENDPOINT,
 * STRATA_S3_ACCESS_KEY, STRATA_S3_SECRET_KEY, STRATA_S3_REGION), never from
 * cluster.json, so no secret is written to disk.
 *
 * The daemons get it as `--remote URL`, built here and nowhere else
 * (cluster_remote_daemon_args).
 *
 * Not for: moving objects (cmd_remote.c) or what they mean (pageserver/,
 * safekeeper/).
 */
#ifndef STRATA_CLI_CLUSTER_REMOTE_H
#define STRATA_CLI_CLUSTER_REMOTE_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "base/must_check.h"

/* The default remote of the cluster under c->dir: file://<dir>/remote. */
STRATA_MUST_CHECK int cluster_remote_default(const cluster *c, char *url, size_t len, cli_err *err);

/*
 * Checks url (file:///PATH or s3://BUCKET[/PREFIX], settings from the
 * environment as the daemons read them).  With create (a cluster choosing
 * its store) a missing store is created: the local directory, or the bucket.
 * Without it (every later up or start) a missing local directory is an
 * error: a store that vanished (an unmounted disk, a moved directory) must
 * not come back empty and silently (an S3 bucket is still created if
 * missing: CreateBucket on one we own is how S3 says it exists).  Bounded
 * (an unreachable S3 endpoint fails within about 15 s).  0, or -1 with a
 * reason that names the URL, the store's answer and, for S3, the
 * environment variables it reads.
 */
STRATA_MUST_CHECK int cluster_remote_prepare(const char *url, bool create, cli_err *err);

/* Appends "--remote URL" to argv (NULL-terminated again) when the cluster
 * has a remote store; argv must have room for two more and the NULL. */
void cluster_remote_daemon_args(const cluster *c, char **argv, int *argc);

#endif
