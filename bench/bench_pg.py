"""Stock PostgreSQL 15 servers for the benchmarks: a primary, its standbys.

For: initdb, configuring, starting and stopping one stock server on
127.0.0.1 (as the postgres OS user, data under a directory that user owns),
cloning a streaming standby with pg_basebackup, a primary with synchronous
standbys (stock_servers), running SQL through psql, and reading the settings
that matter for a report.  stop() never leaves the
server running: pg_ctl first, then signals to the postmaster pid we recorded.

Not for: Strata clusters (bench_strata.py) or running pgbench (bench_pgbench.py).
"""

import contextlib
import os
import signal
import time

from bench_cli import log
from bench_proc import (BenchError, as_pg_user, free_port, give_to_pg_user, pid_alive, run,
                        write_pg_file)

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
PG_SUPERUSER = "postgres"

# Settings a report records for every setup, stock or Strata.
REPORT_SETTINGS = (
    "server_version", "fsync", "full_page_writes", "synchronous_commit",
    "synchronous_standby_names", "wal_sync_method", "wal_level", "shared_buffers",
    "wal_buffers", "max_wal_size", "checkpoint_timeout", "commit_delay",
    "wal_writer_delay", "wal_compression", "autovacuum", "shared_preload_libraries",
)


def pg_tool(name):
    return os.path.join(PG_BIN, name)


class PgServer:
    """One stock postgres server: its data directory, port and postmaster pid."""

    def __init__(self, name, datadir, sockdir, port=None):
        self.name = name
        self.datadir = datadir
        self.sockdir = sockdir
        self.port = port or free_port()
        self.logfile = datadir + ".log"
        self.pid = None
        # argv put before `pg_ctl start` (run as root; it must end by exec'ing
        # the rest): bench/constrained.py moves the server into a cgroup so.
        self.launch_prefix = []

    def initdb(self):
        run([pg_tool("initdb"), "-D", self.datadir, "-U", PG_SUPERUSER, "-A", "trust",
             "-E", "UTF8", "--no-locale", "--no-instructions"], timeout=120, pg_user=True)

    def configure(self, settings):
        """Appends settings (name -> value) to postgresql.conf; later lines win."""
        lines = ["", "# strata bench"]
        for key, value in settings.items():
            lines.append(f"{key} = '{value}'")
        write_pg_file(os.path.join(self.datadir, "postgresql.conf"),
                      "\n".join(lines) + "\n", append=True)

    def base_settings(self, shared_buffers):
        """What every server of a run shares, so setups differ only where they should.

        WAL and checkpoint sizing stay at PostgreSQL's defaults because that is
        what the `strata` CLI gives its compute; each run starts right after a
        CHECKPOINT, so neither max_wal_size nor checkpoint_timeout is reached
        within a run of a few minutes at these rates.
        """
        return {
            "listen_addresses": "127.0.0.1",
            "port": self.port,
            "unix_socket_directories": self.sockdir,
            "shared_buffers": shared_buffers,
            "max_connections": 100,
            "wal_level": "replica",
            "max_wal_senders": 10,
            "fsync": "on",
            "full_page_writes": "on",
            "synchronous_commit": "on",
            "hot_standby": "on",
            "logging_collector": "off",
        }

    def start(self, timeout=120):
        if not os.path.exists(self.logfile):
            write_pg_file(self.logfile, "")
        argv = as_pg_user([pg_tool("pg_ctl"), "-D", self.datadir, "-l", self.logfile, "-w",
                           "-t", str(int(timeout)), "start"])
        run(list(self.launch_prefix) + argv, timeout=timeout + 10)
        self.pid = self._read_postmaster_pid()
        if self.pid is None:
            raise BenchError(f"{self.name}: started but postmaster.pid has no pid")

    def _read_postmaster_pid(self):
        try:
            with open(os.path.join(self.datadir, "postmaster.pid"), encoding="utf-8") as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def stop(self):
        """Stops the server; escalates to SIGQUIT, then SIGKILL of the recorded pid."""
        if self.pid is None:
            self.pid = self._read_postmaster_pid()
            if self.pid is None:
                return
        if pid_alive(self.pid):
            try:
                run([pg_tool("pg_ctl"), "-D", self.datadir, "-m", "fast", "-w", "-t", "60",
                     "stop"], timeout=70, pg_user=True)
            except BenchError as e:
                print(f"warning: {self.name}: {e}")
        for sig in (signal.SIGQUIT, signal.SIGKILL):
            if not pid_alive(self.pid):
                break
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + 10
            while pid_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.pid = None

    def conninfo(self, dbname="postgres"):
        return {"host": "127.0.0.1", "port": str(self.port), "user": PG_SUPERUSER,
                "dbname": dbname}

    def psql(self, sql, timeout=300):
        return psql(self.conninfo(), sql, timeout)

    def basebackup_standby(self, name, datadir, application_name, shared_buffers):
        """Clones a streaming standby of this server into datadir (not started)."""
        standby = PgServer(name, datadir, self.sockdir)
        run([pg_tool("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", PG_SUPERUSER, "-D", datadir, "-X", "stream", "-c", "fast"],
            timeout=600, pg_user=True)
        settings = standby.base_settings(shared_buffers)
        settings["primary_conninfo"] = (f"host=127.0.0.1 port={self.port} "
                                        f"user={PG_SUPERUSER} application_name={application_name}")
        standby.configure(settings)
        write_pg_file(os.path.join(datadir, "standby.signal"), "")
        return standby


def psql(conninfo, sql, timeout=300):
    """Runs sql through psql (unaligned, tuples only); returns stdout.  Raises BenchError."""
    cp = run([pg_tool("psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
              "-h", conninfo["host"], "-p", conninfo["port"], "-U", conninfo["user"],
              "-d", conninfo["dbname"], "-c", sql], timeout=timeout)
    return cp.stdout


def read_settings(conninfo):
    """The REPORT_SETTINGS of a running server, plus any strata.* GUCs."""
    names = ",".join(f"'{n}'" for n in REPORT_SETTINGS)
    out = psql(conninfo, "SELECT name, current_setting(name) FROM pg_settings "
                         f"WHERE name IN ({names}) OR name LIKE 'strata.%' ORDER BY name")
    settings = {}
    for line in out.splitlines():
        if "|" in line:
            key, value = line.split("|", 1)
            if "password" in key or "secret" in key:
                continue  # a report is no place for credentials
            if key in ("strata.tenant_id", "strata.timeline_id"):
                continue  # fresh random ids every run: noise in a report
            settings[key] = value
    return settings


def wait_sync_standbys(primary, count, timeout=120):
    """Waits until count standbys are synchronous (sync or quorum) on primary."""
    deadline = time.monotonic() + timeout
    while True:
        out = primary.psql("SELECT count(*) FROM pg_stat_replication "
                           "WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming'")
        if int(out.strip() or 0) >= count:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{primary.name}: {count} synchronous standbys not streaming "
                             f"after {timeout}s (have {out.strip()})")
        time.sleep(0.5)


def make_pg_dir(path):
    """Creates a directory owned by the postgres OS user."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    give_to_pg_user(path)


@contextlib.contextmanager
def stock_servers(work, sock, key, primary_name, shared_buffers, standbys=(), settings=None,
                  launch_prefix=()):
    """A started stock server <work>/<primary_name> with base_settings(shared_buffers)
    updated by settings (name -> value), started through launch_prefix
    (PgServer.launch_prefix), and, for each application name in standbys, a streaming standby
    <work>/<key>-<name> cloned from it and started, which every commit then
    waits for (synchronous_standby_names = 'ANY n (names)').  Yields
    (primary, [standby servers]); stops them all on leaving, on failure too.
    Raises BenchError."""
    primary = PgServer(primary_name, os.path.join(work, primary_name), sock)
    servers = [primary]
    try:
        primary.initdb()
        primary.configure(dict(primary.base_settings(shared_buffers), **(settings or {})))
        primary.launch_prefix = list(launch_prefix)
        primary.start()
        for name in standbys:
            log(f"({key}) pg_basebackup {name}")
            sb = primary.basebackup_standby(f"{key}-{name}", os.path.join(work, f"{key}-{name}"),
                                            name, shared_buffers)
            servers.append(sb)
            sb.start()
        if standbys:
            primary.psql("ALTER SYSTEM SET synchronous_standby_names = "
                         f"'ANY {len(standbys)} ({', '.join(standbys)})'")
            primary.psql("SELECT pg_reload_conf()")
            wait_sync_standbys(primary, len(standbys))
        yield primary, servers[1:]
    finally:
        for srv in servers:
            srv.stop()
