"""The patched PostgreSQL 15 that compute/postgres/build.sh produces.

Skipped, with the reason, unless `compute/postgres/build.sh --prefix-only`
finds a finished build (building takes many minutes, so tests never start
one). Otherwise, with that build only (never Debian's binaries mixed in):

- the install is the one build.sh describes: pg_config reports our prefix
  and debug build without cassert, the hook symbols are exported by the
  postgres binary (and absent from Debian's stock binary, so the check can
  fail), and the contrib modules we rely on are installed;
- initdb (as the unprivileged `postgres` user), start on 127.0.0.1 and a free
  port, run queries and the contrib modules against real data, and check that
  the running server is the patched binary and reports the built version;
- a small test extension, compiled here with PGXS against the installed
  headers, sets smgr_hook, smgr_init_hook and smgr_shutdown_hook: it routes
  permanent relations to an f_smgr of its own that counts reads and passes
  them to md.c, and leaves temporary relations to md.c. The test shows that
  the hook decides per relation, that every smgr call of a routed relation
  goes through its f_smgr, and that both lifecycle hooks run.

The server is stopped by pid (fast shutdown, SIGKILL if it hangs).
"""
import hashlib
import os
import pwd
import re
import signal
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest
from conftest import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_SH = os.path.join(REPO, "compute", "postgres", "build.sh")
STOCK_POSTGRES = "/usr/lib/postgresql/15/bin/postgres"
HOOK_SYMBOLS = ("smgr_hook", "smgr_init_hook", "smgr_shutdown_hook", "smgr_relation_size_hook",
                "smgr_storage_size_hook", "smgr_tablespace_in_use_hook")
CONTRIB = ("amcheck", "pageinspect", "pg_stat_statements", "pg_buffercache", "pg_prewarm")


def patched_prefix():
    """The finished build's prefix, or None (with build.sh's exit status)."""
    res = subprocess.run([BUILD_SH, "--prefix-only"], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return None
    lines = res.stdout.strip().splitlines()
    return lines[-1] if lines else None


PREFIX = patched_prefix()
pytestmark = pytest.mark.skipif(
    PREFIX is None,
    reason="patched PostgreSQL not built: `compute/postgres/build.sh --prefix-only` found no "
           "finished build (run compute/postgres/build.sh once; it takes about 15 minutes)")


def build_info():
    info = {}
    with open(os.path.join(PREFIX, "strata-build-info.txt")) as f:
        for line in f:
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    return info


def upstream_version():
    """15.18 from a Debian version 15.18-0+deb12u1 or an upstream 15.18-upstream."""
    m = re.match(r"^(15\.\d+)", build_info()["version"])
    assert m, build_info()
    return m.group(1)


def pg_bin(name):
    return os.path.join(PREFIX, "bin", name)


def as_postgres():
    """subprocess keyword arguments that run a program as the unprivileged user."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Server:
    """One postmaster of the patched build, owned by this test."""

    def __init__(self, datadir, port, log_path, settings):
        self.datadir = datadir
        self.port = port
        self.log_path = log_path
        args = [pg_bin("postgres"), "-D", datadir, "-p", str(port),
                "-c", "listen_addresses=127.0.0.1",
                "-c", "unix_socket_directories=%s" % datadir,
                "-c", "fsync=off"]
        for key, value in settings.items():
            args += ["-c", "%s=%s" % (key, value)]
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, **as_postgres())
        self.pid = self.proc.pid

    def dsn(self):
        return "host=127.0.0.1 port=%d user=postgres dbname=postgres connect_timeout=5" % self.port

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("postgres exited with %s:\n%s" % (self.proc.returncode, self.log_text()))
            try:
                with psycopg.connect(self.dsn()) as conn:
                    conn.execute("select 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise AssertionError("postgres did not accept connections:\n" + self.log_text())
                time.sleep(0.2)

    def connect(self):
        return psycopg.connect(self.dsn(), autocommit=True)

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="strata-pgpatch-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def initdb(workdir):
    datadir = os.path.join(workdir, "data")
    os.mkdir(datadir, 0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(datadir, pw.pw_uid, pw.pw_gid)
    res = subprocess.run([pg_bin("initdb"), "-D", datadir, "-U", "postgres", "-A", "trust",
                          "--no-sync", "-E", "UTF8", "--locale=C"],
                         capture_output=True, text=True, timeout=300, **as_postgres())
    assert res.returncode == 0, res.stdout + res.stderr
    return datadir


@pytest.fixture
def server_factory(workdir):
    started = []

    def start(settings=None):
        datadir = initdb(workdir)
        server = Server(datadir, free_port(), os.path.join(workdir, "postgres.log"), settings or {})
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()
        assert not pid_alive(server.pid), "postgres %d still running after stop" % server.pid


def dynamic_symbols(binary):
    res = subprocess.run(["nm", "-D", "--defined-only", binary], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return {line.split()[-1]: line.split()[-2] for line in res.stdout.splitlines() if line.strip()}


def test_install_matches_build_script():
    configure = subprocess.run([pg_bin("pg_config"), "--configure"], capture_output=True,
                               text=True, timeout=30, check=True).stdout
    assert "'--prefix=%s'" % PREFIX in configure
    assert "--enable-debug" in configure
    assert "--enable-cassert" not in configure
    assert subprocess.run([pg_bin("pg_config"), "--bindir"], capture_output=True, text=True,
                          check=True).stdout.strip() == os.path.join(PREFIX, "bin")
    version = subprocess.run([pg_bin("postgres"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    assert version.strip() == "postgres (PostgreSQL) %s" % upstream_version()

    info = build_info()
    with open(os.path.join(REPO, "compute", "postgres", "smgr-hook.patch"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert info["patch"].endswith(digest), "the cached build is not of the current patch"
    # The cache key: the patch followed by the build script's recipe number.
    with open(os.path.join(REPO, "compute", "postgres", "build.sh")) as f:
        recipe = re.search(r"^recipe=(\d+)$", f.read(), re.M).group(1)
    with open(os.path.join(REPO, "compute", "postgres", "smgr-hook.patch"), "rb") as f:
        keyed = f.read() + ("strata build recipe %s\n" % recipe).encode()
    assert PREFIX.endswith("-" + hashlib.sha256(keyed).hexdigest()[:12])

    # The prefix must be reachable by the unprivileged user that runs postgres.
    res = subprocess.run([pg_bin("postgres"), "--version"], capture_output=True, text=True,
                         **as_postgres())
    assert res.returncode == 0, res.stderr

    sharedir = subprocess.run([pg_bin("pg_config"), "--sharedir"], capture_output=True,
                              text=True, check=True).stdout.strip()
    pkglibdir = subprocess.run([pg_bin("pg_config"), "--pkglibdir"], capture_output=True,
                               text=True, check=True).stdout.strip()
    # Modules live under the prefix: never in the stock package's directory.
    assert pkglibdir.startswith(PREFIX + os.sep), pkglibdir
    for module in CONTRIB:
        assert os.path.exists(os.path.join(sharedir, "extension", module + ".control")), module
        assert os.path.exists(os.path.join(pkglibdir, module + ".so")), module


def test_hook_symbols_exported():
    ours = dynamic_symbols(pg_bin("postgres"))
    for name in HOOK_SYMBOLS:
        # Writable data (B: bss, D: data) that an extension assigns to.
        assert ours.get(name) in ("B", "D"), "%s not exported by the patched postgres" % name
    if os.path.exists(STOCK_POSTGRES):
        stock = dynamic_symbols(STOCK_POSTGRES)
        assert not any(name in stock for name in HOOK_SYMBOLS), "stock postgres has the hooks?"
    header = os.path.join(subprocess.run([pg_bin("pg_config"), "--includedir-server"],
                                         capture_output=True, text=True, check=True).stdout.strip(),
                          "storage", "smgr.h")
    with open(header) as f:
        text = f.read()
    assert "typedef struct f_smgr" in text and "smgr_impl" in text and "smgr_which" not in text
    with open(os.path.join(os.path.dirname(header), "..", "postmaster", "bgworker.h")) as f:
        assert "BGWORKER_STOP_AFTER_CHECKPOINT" in f.read()


def test_queries_and_contrib(server_factory):
    server = server_factory({"shared_preload_libraries": "pg_stat_statements"})
    exe = os.path.realpath("/proc/%d/exe" % server.pid)
    assert exe == os.path.realpath(pg_bin("postgres")), "running %s, not the patched build" % exe

    with server.connect() as conn:
        version = conn.execute("select version()").fetchone()[0]
        assert version.startswith("PostgreSQL %s " % upstream_version()), version
        assert conn.execute("show server_version").fetchone()[0].startswith(upstream_version())
        assert conn.execute("show data_directory").fetchone()[0] == server.datadir

        conn.execute("create table items(id int primary key, qty int, note text)")
        conn.execute("insert into items select g, g % 97, md5(g::text) from generate_series(1, 20000) g")
        conn.execute("update items set qty = qty + 1 where id % 3 = 0")
        conn.execute("delete from items where id % 10 = 0")
        count, total = conn.execute("select count(*), sum(qty) from items").fetchone()
        expected = [(g, g % 97 + (1 if g % 3 == 0 else 0)) for g in range(1, 20001) if g % 10 != 0]
        assert count == len(expected)
        assert total == sum(q for _, q in expected)
        assert conn.execute("select note from items where id = 4242").fetchone()[0] == \
            hashlib.md5(b"4242").hexdigest()
        conn.execute("vacuum analyze items")
        conn.execute("checkpoint")

        for module in CONTRIB:
            conn.execute("create extension %s" % module)
        # amcheck: the primary key's btree is consistent with the heap.
        conn.execute("select bt_index_check('items_pkey'::regclass, true)")
        conn.execute("select verify_heapam('items')")
        assert conn.execute("select count(*) from verify_heapam('items')").fetchone()[0] == 0
        # pageinspect: page 0 of the heap is a real heap page with tuples.
        lower, upper = conn.execute(
            "select lower, upper from page_header(get_raw_page('items', 0))").fetchone()
        assert 24 < lower < upper <= 8192
        nblocks = conn.execute("select pg_relation_size('items') / 8192").fetchone()[0]
        assert nblocks > 10
        # pg_prewarm reads every block; pg_buffercache then sees them in shared buffers.
        assert conn.execute("select pg_prewarm('items')").fetchone()[0] == nblocks
        cached = conn.execute(
            "select count(*) from pg_buffercache where relfilenode = pg_relation_filenode('items') "
            "and relforknumber = 0 and reldatabase = (select oid from pg_database where datname = current_database())"
        ).fetchone()[0]
        assert cached == nblocks
        # pg_stat_statements (preloaded) saw the statements above.
        calls = conn.execute("select sum(calls) from pg_stat_statements "
                             "where query like 'insert into items%'").fetchone()[0]
        assert calls == 1


HOOKTEST_C = r"""
/* A test extension: routes permanent relations through a counting f_smgr. */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "storage/md.h"
#include "storage/smgr.h"
#include "utils/array.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static int64 hook_calls;
static int64 routed_opens;
static int64 routed_reads;
static int64 init_calls;

static void
counting_open(SMgrRelation reln)
{
	routed_opens++;
	mdopen(reln);
}

static void
counting_read(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer)
{
	routed_reads++;
	mdread(reln, forknum, blocknum, buffer);
}

static const f_smgr counting_smgr = {
	.smgr_init = NULL,
	.smgr_shutdown = NULL,
	.smgr_open = counting_open,
	.smgr_close = mdclose,
	.smgr_create = mdcreate,
	.smgr_exists = mdexists,
	.smgr_unlink = mdunlink,
	.smgr_extend = mdextend,
	.smgr_prefetch = mdprefetch,
	.smgr_read = counting_read,
	.smgr_write = mdwrite,
	.smgr_writeback = mdwriteback,
	.smgr_nblocks = mdnblocks,
	.smgr_truncate = mdtruncate,
	.smgr_immedsync = mdimmedsync,
};

static const f_smgr *
choose_smgr(BackendId backend, RelFileNode rnode)
{
	hook_calls++;
	if (backend != InvalidBackendId)
		return NULL;			/* temporary relation: md.c */
	return &counting_smgr;
}

static void
hooktest_init(void)
{
	init_calls++;
}

static void
hooktest_shutdown(void)
{
	elog(LOG, "hooktest: smgr shutdown hook ran after %lld routed reads",
		 (long long) routed_reads);
}

void
_PG_init(void)
{
	smgr_hook = choose_smgr;
	smgr_init_hook = hooktest_init;
	smgr_shutdown_hook = hooktest_shutdown;
}

PG_FUNCTION_INFO_V1(hooktest_counts);

Datum
hooktest_counts(PG_FUNCTION_ARGS)
{
	Datum		values[4];

	values[0] = Int64GetDatum(hook_calls);
	values[1] = Int64GetDatum(routed_opens);
	values[2] = Int64GetDatum(routed_reads);
	values[3] = Int64GetDatum(init_calls);
	PG_RETURN_ARRAYTYPE_P(construct_array(values, 4, INT8OID, 8, FLOAT8PASSBYVAL, 'd'));
}
"""

HOOKTEST_MAKEFILE = """MODULES = hooktest
PG_CONFIG = {pg_config}
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
"""


def build_hooktest(workdir):
    """Compiles the test extension with PGXS against the patched build's headers."""
    src = os.path.join(workdir, "hooktest")
    os.mkdir(src)
    os.chmod(src, 0o755)
    with open(os.path.join(src, "hooktest.c"), "w") as f:
        f.write(HOOKTEST_C)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(HOOKTEST_MAKEFILE.format(pg_config=pg_bin("pg_config")))
    res = subprocess.run(["make", "-C", src, "COPT=-Werror"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lib = os.path.join(src, "hooktest.so")
    assert os.path.exists(lib)
    os.chmod(lib, 0o755)
    return lib


def test_smgr_hook_routes_relations(workdir, server_factory):
    lib = build_hooktest(workdir)
    server = server_factory({"shared_preload_libraries": lib})

    def counts(conn):
        hook_calls, opens, reads, inits = conn.execute("select hooktest_counts()").fetchone()[0]
        return {"hook": hook_calls, "opens": opens, "reads": reads, "inits": inits}

    with server.connect() as conn:
        conn.execute("create function hooktest_counts() returns int8[] "
                     "as '%s', 'hooktest_counts' language c strict" % lib)
        conn.execute("create extension pg_prewarm")
        start = counts(conn)
        # smgrinit ran in this backend and called the init hook once.
        assert start["inits"] == 1, start
        # Catalog reads while connecting already went through the hook's f_smgr.
        assert start["hook"] > 0 and start["opens"] == start["hook"], start

        conn.execute("create table perm(id int, body text)")
        conn.execute("insert into perm select g, repeat('x', 200) from generate_series(1, 5000) g")
        conn.execute("create temp table tmp(id int, body text)")
        conn.execute("insert into tmp select g, repeat('y', 200) from generate_series(1, 5000) g")
        conn.execute("checkpoint")
        perm_blocks = conn.execute("select pg_relation_size('perm') / 8192").fetchone()[0]
        tmp_blocks = conn.execute("select pg_relation_size('tmp') / 8192").fetchone()[0]
        assert perm_blocks > 50 and tmp_blocks > 50
        after_create = counts(conn)
        # The hook was asked for both new relations (and their catalog rows' relations).
        assert after_create["hook"] >= start["hook"] + 2, after_create

        # 'read' mode calls smgrread for every block, bypassing shared buffers:
        # each block of the permanent relation goes through our f_smgr ...
        assert conn.execute("select pg_prewarm('perm', 'read')").fetchone()[0] == perm_blocks
        after_perm = counts(conn)
        assert after_perm["reads"] - after_create["reads"] == perm_blocks, (after_create, after_perm)

        # ... and no block of the temporary relation does: the hook gave it md.c.
        assert conn.execute("select pg_prewarm('tmp', 'read')").fetchone()[0] == tmp_blocks
        after_tmp = counts(conn)
        assert after_tmp["reads"] == after_perm["reads"], (after_perm, after_tmp)

        # The data read through the routed f_smgr is intact.
        assert conn.execute("select count(*), sum(id) from perm").fetchone() == (5000, 5000 * 5001 // 2)
        assert conn.execute("select count(*) from tmp").fetchone()[0] == 5000
        backend_pid = conn.execute("select pg_backend_pid()").fetchone()[0]

    # The backend's exit ran the shutdown hook (it logs how many reads it routed).
    deadline = time.monotonic() + 10
    # The default log_line_prefix is '%m [%p] '.
    pattern = re.compile(r"\[%d\] .*hooktest: smgr shutdown hook ran after (\d+) routed reads"
                         % backend_pid)
    while True:
        found = [int(m.group(1)) for m in map(pattern.search, server.log_text().splitlines()) if m]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert found, "no shutdown-hook line for backend %d in:\n%s" % (backend_pid, server.log_text())
    assert found[-1] >= after_tmp["reads"]
