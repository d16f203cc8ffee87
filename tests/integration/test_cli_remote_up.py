"""`strata up` and the cluster's remote store (cli/local/cluster_remote.h).

Every cluster gets a remote store when it is made and keeps it in cluster.json:
by default the local directory D/remote, beside (not inside) the pageserver's
data directory D/pageserver; with `strata up --remote s3://BUCKET/PREFIX` an
S3 store whose endpoint and keys come from the environment, created (the
bucket) before anything starts.  `strata status` shows it.  The daemons get
`--remote URL`.

Checked here, whatever the daemons can do:
  - the default remote's URL in status (JSON and text) and cluster.json, its
    directory created beside D/pageserver;
  - a cluster.json from before remote storage gets the default at the next up;
  - a different --remote for an existing cluster is refused, nothing started;
  - --remote s3://... without endpoint or keys, or with an unreachable
    endpoint, fails within seconds naming the URL and the variables, with
    nothing started; a malformed --remote is a usage error;
  - each daemon's command line has `--remote URL`;
  - after a workload the remote holds the timeline's manifests and data files
    (the pageserver's upload) and WAL segments (the safekeepers' WAL backup).
test_up_remote_s3_radosgw does the same against a real radosgw started from
STRATA_S3_SCRIPT (left out by `make test` without it, like
test_remote_storage.py's S3 test).
"""

import json
import os
import socket
import subprocess
import time

import pytest

from conftest import StrataCluster, wait_until
from test_remote_storage import radosgw  # noqa: F401  (fixture)

# The subject is the CLI and the compute: the release build's daemons
# (conftest.py, release_daemons).
pytestmark = pytest.mark.release_daemons


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def daemon_pids(cluster):
    st = cluster.status()
    pids = {"pageserver": st["pageserver"]["pid"]}
    for sk in st["safekeepers"]:
        pids[sk["name"]] = sk["pid"]
    return pids


def check_daemon_flags(cluster, url):
    """Each daemon runs with --remote URL."""
    for name, pid in daemon_pids(cluster).items():
        assert pid, "%s not running" % name
        args = cmdline(pid)
        assert "--remote" in args and args[args.index("--remote") + 1] == url, (name, args)


def make_wal(cluster, mb=40):
    """About mb MB of WAL (closes at least two 16 MB segments) and a checkpoint."""
    cluster.sql("create table if not exists remote_up_t (id int, pad text)")
    rows = mb * 1024 * 1024 // 150
    cluster.sql("insert into remote_up_t select g, repeat('x', 100) from generate_series(1, %d) g"
                % rows)
    cluster.sql("checkpoint")
    return cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0]


def remote_keys(list_keys, tenant, timeline):
    prefix = "tenants/%s/timelines/%s/" % (tenant, timeline)
    keys = [k for k in list_keys() if k.startswith(prefix)]
    return ([k for k in keys if k.startswith(prefix + "manifest/")],
            [k for k in keys if k.startswith(prefix + "data/")],
            [k for k in keys if k.startswith(prefix + "wal/")])


def check_uploads(cluster, list_keys):
    """After a workload: the pageserver's manifests and data files and the
    safekeepers' WAL segments are in the remote store."""
    make_wal(cluster)
    tenant, timeline = cluster.ids()

    def arrived():
        manifests, data, wal = remote_keys(list_keys, tenant, timeline)
        return (manifests, data, wal) if manifests and data and wal else None

    manifests, data, wal = wait_until(arrived, 180, "the timeline's objects in the remote store",
                                      interval=2)
    print("uploads: %d manifests, %d data files, %d WAL segments" % (
        len(manifests), len(data), len(wal)))


def local_keys(root):
    def list_keys():
        out = []
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                if not name.startswith(".strata-tmp"):
                    out.append(os.path.relpath(os.path.join(dirpath, name), root))
        return out
    return list_keys


def test_up_default_remote_beside_the_pageserver(cluster_dir):
    c = cluster_dir
    out = c.up().stdout
    root = os.path.join(c.dir, "remote")
    url = "file://" + root
    assert "remote: %s\n" % url in out, out
    st = c.status()
    assert st["remote"] == url
    text = c.run("status").stdout
    assert "remote    %s\n" % url in text, text
    with open(os.path.join(c.dir, "cluster.json")) as f:
        assert json.load(f)["remote"] == url
    # beside the pageserver's data directory, not inside it
    assert os.path.isdir(root)
    assert os.path.realpath(os.path.dirname(root)) == os.path.realpath(c.dir)
    assert not os.path.realpath(root).startswith(
        os.path.realpath(os.path.join(c.dir, "pageserver")) + "/")
    check_daemon_flags(c, url)
    check_uploads(c, local_keys(root))

    # A cluster.json from before remote storage: the next up gives it the default.
    c.down()
    path = os.path.join(c.dir, "cluster.json")
    with open(path) as f:
        state = json.load(f)
    del state["remote"]
    with open(path, "w") as f:
        json.dump(state, f)
    assert c.status()["remote"] is None
    assert "(none: set at the next `strata up`)" in c.run("status").stdout
    out = c.up().stdout
    assert c.status()["remote"] == url
    check_daemon_flags(c, url)

    # Its remote is fixed: another one is refused, before anything changes.
    c.down()
    other = "file://" + os.path.join(c.dir, "elsewhere")
    proc = c.run("up", "--remote", other, check=False)
    assert proc.returncode == 1, proc
    assert "keeps its data in the remote store %s" % url in proc.stderr, proc.stderr
    assert all(pid is None for pid in daemon_pids(c).values())
    assert not os.path.exists(os.path.join(c.dir, "elsewhere"))
    # the same URL again is fine
    c.up("--remote", url)
    assert c.status()["remote"] == url


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_up_remote_s3_errors_start_nothing(cluster_dir):
    c = cluster_dir
    for name in list(c.env):
        if name.startswith("STRATA_S3_") or name.startswith("AWS_"):
            del c.env[name]
    # malformed
    proc = c.run("up", "--remote", "http://example/bucket", check=False)
    assert proc.returncode == 2 and "--remote needs s3://BUCKET/PREFIX or file:///PATH" in \
        proc.stderr, proc
    # no endpoint or keys
    proc = c.run("up", "--remote", "s3://strata-up/c1", check=False)
    assert proc.returncode == 1, proc
    assert "remote s3://strata-up/c1" in proc.stderr and "STRATA_S3_ENDPOINT" in proc.stderr, \
        proc.stderr
    assert all(pid is None for pid in daemon_pids(c).values())
    # an endpoint nobody listens on: a bounded, clear failure
    c.env.update(STRATA_S3_ENDPOINT="http://127.0.0.1:%d" % closed_port(),
                 STRATA_S3_ACCESS_KEY="AK", STRATA_S3_SECRET_KEY="SK")
    t0 = time.monotonic()
    proc = c.run("up", "--remote", "s3://strata-up/c1", check=False, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc
    assert "remote s3://strata-up/c1 cannot be used" in proc.stderr, proc.stderr
    assert "STRATA_S3_ACCESS_KEY" in proc.stderr, proc.stderr
    assert took < 30, "took %.1f s" % took
    assert all(pid is None for pid in daemon_pids(c).values())
    # the cluster remembers the URL it was made with
    assert c.status()["remote"] == "s3://strata-up/c1"


def test_up_remote_s3_radosgw(cluster_dir, radosgw):  # noqa: F811
    c = cluster_dir
    c.env.update({k: v for k, v in radosgw.items() if k.startswith("STRATA_S3_")})
    url = "s3://strata-up/cluster-1"
    out = c.up("--remote", url).stdout
    assert "remote: %s\n" % url in out, out
    assert c.status()["remote"] == url
    assert "remote    %s\n" % url in c.run("status").stdout
    # the bucket exists now (up created it)
    ls = subprocess.run([c.strata, "remote", "ls", url], env=c.env, capture_output=True,
                        text=True, timeout=60)
    assert ls.returncode == 0, ls.stderr
    check_daemon_flags(c, url)

    def list_keys():
        cp = subprocess.run([c.strata, "remote", "ls", url], env=c.env, capture_output=True,
                            text=True, timeout=60, check=True)
        return [line.split("\t", 1)[1] for line in cp.stdout.splitlines()]
    check_uploads(c, list_keys)
    # a daemon started alone needs the store's settings too
    c.stop("pageserver")
    env = {k: v for k, v in c.env.items() if not k.startswith("STRATA_S3_")}
    proc = subprocess.run([c.strata, "start", "pageserver", "--dir", c.dir], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "STRATA_S3_ENDPOINT" in proc.stderr, proc
    c.start("pageserver")
