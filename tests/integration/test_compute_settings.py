"""Settings survive the compute (issue #10 part 4), on a `strata up` cluster
with real processes:

  * ALTER SYSTEM persists with the timeline: it survives
    `strata stop compute --immediate` + `strata start compute` and a compute
    on an empty directory (D/compute removed), and ALTER SYSTEM RESET removes
    it again; ALTER SYSTEM on a setting Strata owns is refused;
  * `strata start compute --set name=value` persists in the compute spec
    (D/compute.settings) until `--reset name`; STRATA_COMPUTE_SETTINGS adds
    settings for one start without storing them;
  * `--set shared_preload_libraries=strata,pg_stat_statements` starts (strata
    merged in, pg_stat_statements found by its short name) and
    pg_stat_statements works;
  * a bad --set gets a clear error and changes nothing.
"""
import os
import shutil

import psycopg
import pytest

from conftest import pageserver_built

# The subject is the compute's settings: the release daemons (conftest.py).
pytestmark = [pytest.mark.release_daemons,
              pytest.mark.skipif(not pageserver_built(), reason="pageserver not built")]


def show(cluster, name):
    return cluster.sql("show %s" % name)[0][0]


def restart_immediate(cluster, *start_args, env=None):
    cluster.stop("compute", immediate=True)
    saved = dict(cluster.env)
    if env:
        cluster.env.update(env)
    try:
        return cluster.run("start", "compute", *start_args)
    finally:
        cluster.env = saved


def test_alter_system_and_set_survive_restarts(cluster):
    cluster.sql("alter system set work_mem = '7MB'")
    cluster.sql("alter system set log_min_duration_statement = '2s'")
    # ALTER SYSTEM has returned: the file is with the safekeepers.  Kill the
    # compute at once and start it with a spec setting.
    out = restart_immediate(cluster, "--set", "statement_timeout=123s").stdout
    assert "statement_timeout=123s" in out, out
    assert show(cluster, "work_mem") == "7MB"
    assert show(cluster, "log_min_duration_statement") == "2s"
    assert show(cluster, "statement_timeout") == "123s"

    # A compute on an empty directory: nothing of the old one is left.
    cluster.stop("compute", immediate=True)
    shutil.rmtree(os.path.join(cluster.dir, "compute"))
    cluster.run("start", "compute")
    assert show(cluster, "work_mem") == "7MB"
    assert show(cluster, "statement_timeout") == "123s"

    # ALTER SYSTEM RESET and --reset remove them; other settings stay.
    cluster.sql("alter system reset work_mem")
    restart_immediate(cluster, "--reset", "statement_timeout")
    assert show(cluster, "work_mem") == "4MB"
    assert show(cluster, "statement_timeout") == "0"
    assert show(cluster, "log_min_duration_statement") == "2s"
    cluster.sql("alter system reset all")
    restart_immediate(cluster)
    assert show(cluster, "log_min_duration_statement") == "-1"

    # The environment's settings apply to one start, never stored.
    restart_immediate(cluster, env={"STRATA_COMPUTE_SETTINGS": "lock_timeout=5s\n# c\n"})
    assert show(cluster, "lock_timeout") == "5s"
    restart_immediate(cluster)
    assert show(cluster, "lock_timeout") == "0"

    # Settings Strata owns: refused by ALTER SYSTEM, with a hint.
    with pytest.raises(psycopg.Error) as e:
        cluster.sql("alter system set synchronous_commit = off")
    assert "set by Strata" in str(e.value)
    with pytest.raises(psycopg.Error) as e:
        cluster.sql("alter system set shared_preload_libraries = 'pg_stat_statements'")
    assert "--set shared_preload_libraries" in (e.value.diag.message_hint or "")


def test_preload_libraries_and_bad_settings(cluster):
    spec = os.path.join(cluster.dir, "compute.settings")
    cluster.stop("compute")
    cluster.run("start", "compute", "--set", "shared_preload_libraries=strata,pg_stat_statements",
                "--set", "application_name=it's \\ quoted")
    libs = show(cluster, "shared_preload_libraries")
    assert libs.endswith("strata.so,pg_stat_statements"), libs
    assert show(cluster, "application_name") == "it's \\ quoted"
    cluster.sql("create extension pg_stat_statements")
    cluster.sql("select 1")
    assert cluster.sql("select count(*) from pg_stat_statements")[0][0] > 0

    # --set while the compute runs: refused, it would not apply.
    proc = cluster.run("start", "compute", "--set", "work_mem=8MB", check=False)
    assert proc.returncode != 0 and "the compute runs" in proc.stderr, proc.stderr
    cluster.stop("compute")
    with open(spec) as f:
        before = f.read()
    bad = [
        (["--set", "port=6543"], "port is set by Strata"),
        (["--set", "strata.safekeepers=127.0.0.1:1"], "set by Strata"),
        (["--set", "work mem=1MB"], "is not a setting name"),
        (["--set", "work_mem"], "NAME=VALUE"),
        (["--set", "work_mem=1\n2"], "control character"),
        (["--set", "shared_preload_libraries=strata,no_such_library"],
         "library no_such_library not found"),
        (["--reset", "synchronous_commit"], "set by Strata"),
    ]
    for args, message in bad:
        proc = cluster.run("start", "compute", *args, check=False)
        assert proc.returncode != 0, (args, proc.stdout)
        assert message in proc.stderr, (args, proc.stderr)
        with open(spec) as f:
            assert f.read() == before, args
    # A setting Postgres itself refuses stops the start with the log named.
    proc = cluster.run("start", "compute", "--set", "work_mem=lots", check=False)
    assert proc.returncode != 0 and "compute.log" in proc.stderr, proc.stderr
    with open(os.path.join(cluster.dir, "compute.log"), errors="replace") as f:
        assert 'invalid value for parameter "work_mem"' in f.read()
    cluster.run("start", "compute", "--reset", "work_mem")
    assert show(cluster, "application_name") == "it's \\ quoted"
