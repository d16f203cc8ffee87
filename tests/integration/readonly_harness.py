"""A read-only compute started by hand, for the tests of the pageserver,
extension and safekeeper parts of read-only computes (docs/operations.md,
"Read-only computes") without the CLI: the patched postgres on a basebackup
fetched from the pageserver, configured as `strata start compute NAME
--read-only` configures it.

  * static (lsn given): `basebackup T TL L` (pg_control + the synthetic
    shutdown checkpoint at L), standby.signal, no primary_conninfo, no
    walproposer, strata.read_lsn = L;
  * replica (lsn None): `basebackup T TL latest replica` (pg_control at the
    newest real checkpoint record, no WAL), standby.signal, primary_conninfo
    naming a safekeeper, reads at the replay LSN.

Every postgres process runs as the unprivileged postgres user; it listens on
127.0.0.1 on a free port and is stopped by pid.
"""
import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile

import psycopg

from conftest import (as_pg_user_kwargs, chown_to_pg_user, kill_hard, make_shared_dir,
                      pid_alive, pg_user, wait_until)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def patched_bindir():
    out = subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "..", "..", "compute",
                                               "postgres", "build.sh"), "--prefix-only"],
                         capture_output=True, text=True, check=True)
    return os.path.join(out.stdout.strip(), "bin")


def pageserver_conn(cluster):
    port = cluster.status()["pageserver"]["pg_port"]
    admin, _token = cluster.tokens()
    return psycopg.connect("host=127.0.0.1 port=%d user=%s dbname=postgres" % (port, pg_user()),
                           autocommit=True, connect_timeout=10, password=admin)


def basebackup(cluster, lsn, mode=""):
    """The archive bytes of `basebackup T TL lsn [mode]`."""
    tenant, timeline = cluster.ids()
    cmd = "basebackup %s %s %s%s" % (tenant, timeline, lsn, " " + mode if mode else "")
    buf = io.BytesIO()
    with pageserver_conn(cluster) as conn:
        with conn.cursor().copy(cmd) as copy:
            for chunk in copy:
                buf.write(chunk)
    return buf.getvalue()


# Settings a hot standby must have at least as high as its primary's
# (pg_control's values, from XLOG_PARAMETER_CHANGE): taken from the primary.
PRIMARY_LIMITS = ("max_connections", "max_worker_processes", "max_wal_senders",
                  "max_prepared_transactions", "max_locks_per_transaction")


class ReadOnlyCompute:
    def __init__(self, cluster, lsn=None, safekeeper="sk1"):
        self.cluster = cluster
        self.lsn = lsn
        self.root = make_shared_dir("strata-ro-")
        self.datadir = os.path.join(self.root, "pgdata")
        self.log = os.path.join(self.root, "postgres.log")
        self.port = free_port()
        self.proc = None
        data = basebackup(cluster, lsn, "") if lsn else basebackup(cluster, "latest", "replica")
        os.mkdir(self.datadir, 0o700)
        tarfile.open(fileobj=io.BytesIO(data)).extractall(self.datadir)
        tenant, timeline = cluster.ids()
        with cluster.connect() as conn:
            lib = conn.execute("show shared_preload_libraries").fetchone()[0]
            limits = {k: conn.execute("show %s" % k).fetchone()[0] for k in PRIMARY_LIMITS}
        _admin, token = cluster.tokens()
        conf = ["listen_addresses = '127.0.0.1'", "port = %d" % self.port,
                "unix_socket_directories = ''", "shared_preload_libraries = '%s'" % lib,
                "strata.pageserver = '127.0.0.1:%d'" % cluster.status()["pageserver"]["pg_port"],
                "strata.tenant_id = '%s'" % tenant, "strata.timeline_id = '%s'" % timeline,
                "strata.file_cache_size = 0", "hot_standby = on", "fsync = off",
                "wal_receiver_status_interval = '1s'", "log_line_prefix = '%m [%p] '"]
        conf += ["%s = '%s'" % kv for kv in limits.items()]
        if token:
            conf.append("strata.pageserver_password = '%s'" % token)
        if lsn:
            conf.append("strata.read_lsn = '%s'" % lsn)
        else:
            conninfo = cluster.safekeeper_connstr(safekeeper) + " application_name=ro_replica"
            conf.append("primary_conninfo = '%s'" % conninfo.replace("'", "''"))
        with open(os.path.join(self.datadir, "postgresql.conf"), "w") as f:
            f.write("\n".join(conf) + "\n")
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("host all all 127.0.0.1/32 trust\n")
        open(os.path.join(self.datadir, "standby.signal"), "w").close()
        chown_to_pg_user(self.root)

    def start(self, timeout=60):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen([os.path.join(patched_bindir(), "postgres"), "-D",
                                      self.datadir], stdout=logf, stderr=subprocess.STDOUT,
                                     start_new_session=True, **as_pg_user_kwargs())
        logf.close()
        wait_until(self.ready, timeout, "the read-only compute to accept connections")

    @property
    def connstr(self):
        return "host=127.0.0.1 port=%d user=%s dbname=postgres" % (self.port, pg_user())

    def ready(self):
        assert self.proc.poll() is None, "the read-only compute exited:\n" + self.log_text()
        try:
            with psycopg.connect(self.connstr, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def sql(self, query, params=None):
        with psycopg.connect(self.connstr, autocommit=True, connect_timeout=10) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else None

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-6000:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            kill_hard([p for p in (self.proc.pid,) if pid_alive(p)])
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
