"""
Helpers for the smgr tests (test_smgr.py, test_compute_gaps.py,
and pg_regress runs): a cluster whose compute is STATELESS -- started by
`strata start compute` from a non-full pageserver basebackup with
strata.pageserver set (STRATA_COMPUTE_MODE=stateless), so every permanent
relation is read from the pageserver.

SmgrCluster extends conftest's StrataCluster:
  - `strata up` with the patched build (STRATA_PG_BINDIR/PREFIX) and
    STRATA_COMPUTE_MODE=stateless: the pageserver imports a patched initdb and
    every compute starts on a new, empty data directory from a basebackup;
  - configure(**settings) / make_stateless(): compute settings the CLI does not
    write (shared_buffers, strata.log_evicted_pages, ...).  The CLI writes
    every configuration file of a compute it starts from a basebackup, so the
    harness points STRATA_PG_PREFIX at a wrapper prefix (everything symlinked
    to the patched build) whose bin/postgres adds `-c` settings read from a
    file; configure() replaces the running compute (stop + start: a new
    compute on a new empty data directory, the product's path).

The CLI and daemons come from STRATA_SMGR_CLI_BUILD when set, else from
the build conftest.daemon_build() names for the test (STRATA_SAN_BUILD, or
STRATA_BUILD for a test marked release_daemons); strata.so from STRATA_BUILD.
"""
import contextlib
import os
import shutil
import subprocess

from conftest import (REPO, StrataCluster, daemon_build, make_shared_dir, require_binaries,
                      walredo_lib_path)

CLI_BUILD = os.environ.get("STRATA_SMGR_CLI_BUILD")


def pg_prefix():
    """The patched build: STRATA_PG_PREFIX when set (e.g. a build of an older
    patch, to see a test fail without a fix), else build.sh's for the
    current patch."""
    if os.environ.get("STRATA_PG_PREFIX"):
        return os.environ["STRATA_PG_PREFIX"]
    return subprocess.check_output(["bash", os.path.join(REPO, "compute/postgres/build.sh"),
                                    "--prefix-only"], text=True).strip()


WRAPPER = """#!/bin/sh
# strata smgr test harness: the patched postgres, plus the settings of
# %(settings)s when started as a server (postgres -D DIR, how the CLI starts a
# compute); any other use (the pageserver's redo helpers) passes through.
if [ "$1" = "-D" ] && [ -r "%(settings)s" ]; then
    set -- "$@" $(cat "%(settings)s")
fi
exec "%(real)s" "$@"
"""


def make_wrapper_prefix(prefix, wrap, settings_file):
    """A prefix that looks like the patched build's (everything symlinked)
    whose bin/postgres adds the harness's -c settings when it starts a server:
    the CLI writes every configuration file of a compute it starts from a
    basebackup, so this is the one place a test can add settings without
    restarting the compute on its own data directory."""
    os.makedirs(os.path.join(wrap, "bin"), exist_ok=True)
    for name in os.listdir(prefix):
        if name != "bin" and not os.path.exists(os.path.join(wrap, name)):
            os.symlink(os.path.join(prefix, name), os.path.join(wrap, name))
    for name in os.listdir(os.path.join(prefix, "bin")):
        dst = os.path.join(wrap, "bin", name)
        if name == "postgres" or os.path.exists(dst):
            continue
        os.symlink(os.path.join(prefix, "bin", name), dst)
    path = os.path.join(wrap, "bin", "postgres")
    with open(path, "w") as f:
        f.write(WRAPPER % {"settings": settings_file,
                           "real": os.path.join(prefix, "bin", "postgres")})
    os.chmod(path, 0o755)
    for d in (wrap, os.path.join(wrap, "bin")):
        os.chmod(d, 0o755)


class SmgrCluster(StrataCluster):
    def __init__(self, directory, build=None):
        super().__init__(directory, CLI_BUILD or build)
        self.prefix = pg_prefix()
        self.wrap = os.path.join(directory, "pgwrap")
        self.settings_file = os.path.join(self.wrap, "settings")
        make_wrapper_prefix(self.prefix, self.wrap, self.settings_file)
        self.env["STRATA_PG_BINDIR"] = os.path.join(self.wrap, "bin")
        self.env["STRATA_PG_PREFIX"] = self.wrap
        self.env["STRATA_COMPUTE_MODE"] = "stateless"
        self.settings = {}

    def pg_program(self, name):
        return os.path.join(self.prefix, "bin", name)

    @property
    def pageserver_addr(self):
        return "127.0.0.1:%d" % self.status()["pageserver"]["pg_port"]

    # -- compute settings ------------------------------------------------------
    def configure(self, **settings):
        """Adds compute settings (kept for every later start) and, when the
        compute runs, replaces it: `strata stop compute` + `strata start
        compute`, a new compute on a new empty data directory."""
        self.settings.update(settings)
        with open(self.settings_file, "w") as f:
            for k, v in self.settings.items():
                assert " " not in str(v) and "\n" not in str(v), (k, v)
                f.write("-c%s=%s\n" % (k, v))
        if self.status()["compute"].get("pid"):
            # A commit waits for the safekeepers: afterwards they end past the
            # pageserver's timeline start.  Stopped before that, the next
            # `strata start compute` takes the compute for one made before the
            # pageserver and restarts it on its (stateless) data directory
            # without the smgr (cli/compute/compute.c, rep->legacy).
            with self.connect() as conn:
                conn.execute("select txid_current()")
            self.stop("compute")
            self.start("compute")
        with self.connect() as conn:
            (conf_ps,), = conn.execute("show strata.pageserver").fetchall()
            assert conf_ps, "the CLI did not start a stateless compute (strata.pageserver empty)"
            # The settings reached the server (units aside: SHOW normalises).
            for k, v in self.settings.items():
                (source,), = conn.execute("select source from pg_settings where name = %s",
                                          (k,)).fetchall()
                assert source == "command line", (k, v, source)

    def make_stateless(self, shared_buffers="1MB", log_evicted=True, extra=None):
        """The smgr settings of the tests: tiny buffers, eviction logging as
        given, no autovacuum (deterministic eviction), no local file cache."""
        settings = {
            "strata.log_evicted_pages": "on" if log_evicted else "off",
            "strata.pageserver_timeout": "60s",
            "shared_buffers": shared_buffers,
            "autovacuum": "off",
            # Every miss of shared_buffers goes to the pageserver: the round
            # trips, and the WAL's view of each page, are what these tests are
            # about (test_file_cache.py tests the cache in front of it).
            "strata.file_cache_size": "0",
        }
        settings.update(extra or {})
        self.configure(**settings)

    # -- observations ----------------------------------------------------------
    def stats(self):
        with self.connect() as conn:
            (lib,), = conn.execute("show shared_preload_libraries").fetchall()
            conn.execute("create or replace function strata_smgr_stats(out name text, "
                         "out value bigint) returns setof record language c as '%s'" % lib)
            return dict(conn.execute("select * from strata_smgr_stats()").fetchall())

    def local_file(self, relname, conn=None):
        """Absolute path of a relation's main fork in the compute's datadir."""
        own = conn is None
        conn = conn or self.connect()
        try:
            (rel,), = conn.execute("select pg_relation_filepath(%s)", (relname,)).fetchall()
        finally:
            if own:
                conn.close()
        return os.path.join(self.compute_datadir, rel)

    def evict(self, conn, big="strata_evict_big"):
        """Pushes (almost) every other page out of shared buffers: an index
        scan over a table much larger than shared_buffers (no ring buffer)."""
        conn.execute("set enable_seqscan = off")
        conn.execute("set enable_bitmapscan = off")
        conn.execute("select sum(length(pad)) from %s where id > 0" % big)
        conn.execute("reset enable_seqscan")
        conn.execute("reset enable_bitmapscan")


def create_evict_table(conn, big="strata_evict_big", rows=60000):
    """~16 MB table with an index, for SmgrCluster.evict()."""
    conn.execute("create table %s (id int primary key, pad text)" % big)
    conn.execute("insert into %s select g, repeat('x', 200) from generate_series(1, %d) g"
                 % (big, rows))


def new_cluster(node=None):
    """A SmgrCluster in a fresh directory, with the daemons of the build
    daemon_build(node) names for the test of pytest node."""
    directory = make_shared_dir("strata-smgr-")
    return SmgrCluster(directory, daemon_build(node))


@contextlib.contextmanager
def running_cluster(request, *binaries):
    """A new_cluster() after `strata up`, for the test of the pytest request
    (a fixture yields it); skips the test when the CLI, the walredo library or
    one of binaries has not been built.  On leaving: destroy(), with the
    logs' tails printed when the test failed."""
    c = new_cluster(request.node)
    require_binaries(c.strata, *binaries, walredo_lib_path())
    try:
        c.up()
        yield c
    finally:
        rep = getattr(request.node, "rep_call", None)
        destroy(c, failed=rep is not None and rep.failed)


def destroy(cluster, failed=False):
    try:
        cluster.run("down", check=False, timeout=120)
    except subprocess.TimeoutExpired:
        pass
    cluster.kill_everything()
    if failed:
        print(cluster.log_tails(80))
    shutil.rmtree(cluster.dir, ignore_errors=True)
