"""
Helpers for the smgr tests (test_smgr.py, test_compute_gaps.py,
test_pg_regress_stateless.py): a cluster whose compute is STATELESS -- started by
`strata start compute` from a non-full pageserver basebackup with
strata.pageserver set (STRATA_COMPUTE_MODE=stateless), so every permanent
relation is read from the pageserver.

SmgrCluster extends conftest's StrataCluster:
  - `strata up` with the patched build (STRATA_PG_BINDIR/PREFIX) and
    STRATA_COMPUTE_MODE=stateless: the pageserver imports a patched initdb and
    every compute starts on a new, empty data directory from a basebackup;
  - configure(**settings) / make_stateless(): compute settings the CLI does not
    write (shared_buffers, strata.log_evicted_pages, ...).  The CLI rewrites
    postgresql.conf and strata.conf at every start and a basebackup brings an
    empty postgresql.auto.conf, so the harness writes postgresql.auto.conf
    after the CLI started the compute and restarts that postmaster in place
    (fast shutdown, same data directory, the pid file updated).  Every later
    start("compute") re-applies them.

The CLI and daemons come from STRATA_SMGR_CLI_BUILD when set, else from
STRATA_SAN_BUILD like every integration test; strata.so from STRATA_BUILD.
"""
import os
import shutil
import signal
import subprocess
import threading

import psycopg

from conftest import (REPO, SAN_BUILD, StrataCluster, make_shared_dir, pid_alive,
                      pg_user, wait_until)

CLI_BUILD = os.environ.get("STRATA_SMGR_CLI_BUILD", SAN_BUILD)


def pg_prefix():
    return subprocess.check_output(["bash", os.path.join(REPO, "compute/postgres/build.sh"),
                                    "--prefix-only"], text=True).strip()


class SmgrCluster(StrataCluster):
    def __init__(self, directory):
        super().__init__(directory)
        self.strata = os.path.join(CLI_BUILD, "bin", "strata")
        self.prefix = pg_prefix()
        self.env["STRATA_PG_BINDIR"] = os.path.join(self.prefix, "bin")
        self.env["STRATA_PG_PREFIX"] = self.prefix
        self.env["STRATA_COMPUTE_MODE"] = "stateless"
        self.settings = {}

    def pg_program(self, name):
        return os.path.join(self.prefix, "bin", name)

    @property
    def pageserver_addr(self):
        return "127.0.0.1:%d" % self.status()["pageserver"]["pg_port"]

    # -- starting with our settings -----------------------------------------
    def up(self, *extra):
        proc = super().up(*extra)
        self._apply_settings()
        return proc

    def start(self, name):
        proc = super().start(name)
        if name == "compute":
            self._apply_settings()
        return proc

    def configure(self, **settings):
        """Adds compute settings (kept for every later start) and applies them."""
        self.settings.update(settings)
        self._apply_settings()

    def make_stateless(self, shared_buffers="1MB", log_evicted=True, extra=None):
        """The smgr settings of the tests: tiny buffers, eviction logging as
        given, no autovacuum (deterministic eviction)."""
        settings = {
            "strata.log_evicted_pages": "on" if log_evicted else "off",
            "strata.pageserver_timeout": "60s",
            "shared_buffers": shared_buffers,
            "autovacuum": "off",
        }
        settings.update(extra or {})
        self.configure(**settings)

    def compute_pid(self):
        with open(os.path.join(self.dir, "compute.pid")) as f:
            return int(f.read().strip())

    def _apply_settings(self):
        if not self.settings:
            return
        pgdata = self.compute_datadir
        with self.connect() as conn:
            (conf_ps,), = conn.execute("show strata.pageserver").fetchall()
        assert conf_ps, "the CLI did not start a stateless compute (strata.pageserver empty)"
        pid = self.compute_pid()
        os.kill(pid, signal.SIGINT)  # fast shutdown
        wait_until(lambda: not pid_alive(pid), 120, "compute %d to stop" % pid)
        with open(os.path.join(pgdata, "postgresql.auto.conf"), "w") as f:
            f.write("# strata smgr test harness\n")
            for k, v in self.settings.items():
                f.write("%s = '%s'\n" % (k, v))
        shutil.chown(os.path.join(pgdata, "postgresql.auto.conf"), pg_user(), pg_user())
        log = open(os.path.join(self.dir, "compute.log"), "ab")
        try:
            proc = subprocess.Popen([self.pg_program("postgres"), "-D", pgdata], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=pgdata, start_new_session=True,
                                    user=pg_user(), group=pg_user())
        finally:
            log.close()
        with open(os.path.join(self.dir, "compute.pid"), "w") as f:
            f.write("%d\n" % proc.pid)

        def ready():
            if proc.poll() is not None:
                raise AssertionError("compute exited %d on restart\n%s" % (
                    proc.returncode, self.log_tails(40)))
            try:
                with self.connect(connect_timeout=2) as conn:
                    conn.execute("select 1")
                return True
            except psycopg.OperationalError:
                return False

        # Reap the postmaster whenever it exits (the CLI stops it by pid and
        # must not see a zombie).
        threading.Thread(target=proc.wait, daemon=True).start()
        wait_until(ready, 120, "compute to accept connections after the restart")

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


def new_cluster():
    directory = make_shared_dir("strata-smgr-")
    return SmgrCluster(directory)


def destroy(cluster, failed=False):
    try:
        cluster.run("down", check=False, timeout=120)
    except subprocess.TimeoutExpired:
        pass
    cluster.kill_everything()
    if failed:
        print(cluster.log_tails(80))
    shutil.rmtree(cluster.dir, ignore_errors=True)
