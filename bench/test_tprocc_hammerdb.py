"""Tests of `tprocc --driver hammerdb` (python3 -m pytest -q bench/test_tprocc_hammerdb.py).

- HammerDB's result line parsed in both of its forms, refused when absent or
  doubled; failed transactions counted per virtual user; the scripts we
  write for HammerDB's CLI; the kit's variables checked with a message that
  names them; whole minutes enforced;
- one real quick run through `strata bench tprocc --driver hammerdb --quick
  --setups c`: HammerDB's own CLI builds 1 warehouse on a Strata cluster and
  drives it with 2 virtual users for 1 minute; NOPM > 0, the TPC-C
  consistency checks pass, the report's NOPM and TPM are the numbers of
  HammerDB's own line, and nothing started is left running.

The real run needs the HammerDB kit: HAMMERDB_KIT names it (see
bench/README.md); without it the test fails and says so.
"""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import tprocc  # noqa: E402
import tprocc_hammerdb as hdb  # noqa: E402
from bench_proc import BenchError, pids_mentioning  # noqa: E402
from bench_testlib import check_probe, need_strata_build, scratch_workdir  # noqa: E402

INFO = {"host": "127.0.0.1", "port": "5544", "user": "postgres", "dbname": "postgres"}


def test_parse_result_both_forms_and_refusals():
    text = ("Vuser 1:Test complete, Taking end Transaction Count.\n"
            "Vuser 1:TEST RESULT : System achieved 6500 NOPM from 14619 PostgreSQL TPM\n"
            "Vuser 1:FINISHED SUCCESS\n")
    assert hdb.parse_result(text) == (
        6500, 14619, "Vuser 1:TEST RESULT : System achieved 6500 NOPM from 14619 PostgreSQL TPM")
    other = "Vuser 1:TEST RESULT : System achieved 14619 PostgreSQL TPM at 6500 NOPM\n"
    assert hdb.parse_result(other)[:2] == (6500, 14619)
    with pytest.raises(BenchError):
        hdb.parse_result("Vuser 1:FINISHED FAILED\n")
    with pytest.raises(BenchError):
        hdb.parse_result(text + text)


def test_counts_failed_transactions_and_cli_refusals():
    text = ("Vuser 2:New Order Procedure Error set RAISEERROR for Details\n"
            "Vuser 3:Payment Procedure Error set RAISEERROR for Details\n"
            "Vuser 2:Delivery Procedure Error set RAISEERROR for Details\n"
            "Vuser 2:Processing 10000000 transactions with output suppressed...\n")
    assert hdb.count_vu_errors(text) == {2: 2, 3: 1}
    assert hdb.cli_errors(text) == []
    refused = "Error: Virtual Users exist, destroy with vudestroy before changing settings\n"
    assert hdb.cli_errors(text + refused) == [refused.strip()]


def test_scripts():
    build = hdb.build_script(INFO, 4, 2)
    assert "diset connection pg_port {5544}" in build
    assert "diset tpcc pg_count_ware 4" in build and "diset tpcc pg_num_vu 2" in build
    # buildschema leaves its loader virtual users: they must go before a run.
    assert build.index("buildschema") < build.index("vudestroy")
    run = hdb.run_script(INFO, 8, 1, 3)
    for line in ("diset tpcc pg_driver timed", "diset tpcc pg_rampup 1",
                 "diset tpcc pg_duration 3", "diset tpcc pg_raiseerror false", "vuset vu 8"):
        assert line in run.splitlines(), line
    assert run.index("loadscript") < run.index("vucreate") < run.index("vurun") \
        < run.index("vudestroy")
    with pytest.raises(BenchError):
        hdb.build_script(dict(INFO, host="x}; exec rm"), 1, 1)


def test_kit_variables_named_when_missing(tmp_path):
    with pytest.raises(BenchError, match="HAMMERDB_KIT is not set"):
        hdb.find_kit({})
    with pytest.raises(BenchError, match="HAMMERDB_KIT=.*hammerdbcli86.tcl"):
        hdb.find_kit({"HAMMERDB_KIT": str(tmp_path)})
    (tmp_path / "hammerdbcli86.tcl").write_text("# launcher\n")
    (tmp_path / "tcl").mkdir()
    (tmp_path / "tcl" / "pgtclcompat-1.0.tm").write_text("# shim\n")
    with pytest.raises(BenchError, match="0 hammerdb-.*tar.gz"):
        hdb.find_kit({"HAMMERDB_KIT": str(tmp_path)})
    with pytest.raises(BenchError, match="HAMMERDB_HOME=.*no hammerdbcli"):
        hdb.find_kit({"HAMMERDB_KIT": str(tmp_path), "HAMMERDB_HOME": str(tmp_path)})
    # The program itself: exit code 2 and the variable named.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMMERDB_")}
    cp = subprocess.run([sys.executable, os.path.join(HERE, "tprocc.py"), "--driver",
                         "hammerdb", "--quick", "--docs", "no"], capture_output=True, text=True,
                        timeout=60, env=env, check=False)
    assert cp.returncode == 2 and "HAMMERDB_KIT is not set" in cp.stderr, cp.stderr


def test_whole_minutes_and_defaults():
    args = tprocc.parse_args(["--driver", "hammerdb", "--quick"])
    assert (args.warehouses, args.vus, args.rampup, args.duration) == (1, 2, 0, 60)
    assert args.setups == ["a", "b", "c"]
    assert tprocc.parse_args(["--quick"]).setups == ["a", "c"]
    for bad in (["--duration", "90"], ["--rampup", "30"], ["--scale-down", "10"],
                ["--kill-compute-at", "5"]):
        with pytest.raises(SystemExit):
            tprocc.parse_args(["--driver", "hammerdb"] + bad)


def test_report_of_hammerdb_results():
    def setup(key, nopm, tpm):
        return {"key": key, "title": tprocc.SETUPS[key][0], "description": "d", "status": "ok",
                "reason": "", "settings": {},
                "run": {"nopm": nopm, "tpm": tpm, "errors": 0, "load_s": 70.0,
                        "hammerdb_result": f"Vuser 1:TEST RESULT : System achieved {nopm} NOPM "
                                           f"from {tpm} PostgreSQL TPM",
                        "checks": [{"ok": True}] * 4, "nopm_series": [(10, nopm)]}}
    res = {"date": "today", "quick": False, "setups": [setup("a", 30000, 70000),
                                                       setup("b", 24000, 56000),
                                                       setup("c", 21000, 48000)],
           "params": {"argv": ["--driver", "hammerdb"], "driver": "hammerdb", "warehouses": 4,
                      "vus": 8, "rampup_s": 60, "duration_s": 180},
           "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB", "filesystem": "ext4",
                       "loadavg_start": "0", "loadavg_end": "0",
                       "loadavg_during": {"mean": 5.0, "max": 7.5, "samples": 9, "every_s": 30}}}
    text = tprocc.console_table(res)
    assert "21,000" in text and "0.70" in text and "0.88" in text  # (c)/(a), (c)/(b)
    md = tprocc.hammerdb_section(res, None)
    assert md.startswith(tprocc.HAMMERDB_SECTION_BEGIN)
    assert "shared with other work" in md and "mean 5.0, max 7.5" in md
    assert "System achieved 24000 NOPM from 56000 PostgreSQL TPM" in md
    assert "load avg (timed window)" not in md
    res["setups"][2]["run"]["loadavg_window"] = 6.5
    assert "load avg (timed window)" in tprocc.hammerdb_section(res, None)
    assert tprocc.hammerdb_rows(res)[2][-1] == "6.5" and tprocc.hammerdb_rows(res)[0][-1] == "-"


def _kit_or_fail():
    if not os.environ.get("HAMMERDB_KIT"):
        pytest.fail("HAMMERDB_KIT is not set: this test runs the real HammerDB; set it to the "
                    "HammerDB kit directory (hammerdbcli86.tcl, tcl/pgtclcompat-1.0.tm, "
                    "hammerdb-*.tar.gz; see bench/README.md)")


def test_quick_hammerdb_run_on_strata(tmp_path):
    _kit_or_fail()
    build = need_strata_build()
    out = tmp_path / "out"
    with scratch_workdir("tprocc-hammerdb-test-") as work:
        argv = [os.path.join(build, "bin", "strata"), "bench", "tprocc", "--driver", "hammerdb",
                "--quick", "--setups", "c", "--strata-build", build, "--workdir", work,
                "--out", str(out), "--docs", "no"]
        env = dict(os.environ, STRATA_BENCH_DIR=HERE)
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env,
                            check=False)
        assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
        with open(out / "results.json", encoding="utf-8") as f:
            results = json.load(f)
        (c,) = results["setups"]
        assert c["status"] == "ok", c
        r = c["run"]
        assert results["params"]["driver"] == "hammerdb" and r["driver"] == "hammerdb"
        assert r["nopm"] > 0 and r["tpm"] > 0, r
        assert r["loadavg_window"] is not None and r["nopm_series"], r
        assert len(r["checks"]) == 4 and all(x["ok"] for x in r["checks"]), r["checks"]
        # The numbers are HammerDB's: the line its CLI printed, as relayed.
        said = [line for line in cp.stdout.splitlines()
                if "hammerdb: Vuser 1:TEST RESULT : System achieved" in line]
        assert len(said) == 1, cp.stdout[-4000:]
        m = re.search(r"achieved (\d+) NOPM from (\d+) PostgreSQL TPM", said[0])
        assert (int(m.group(1)), int(m.group(2))) == (r["nopm"], r["tpm"])
        assert said[0].endswith(r["hammerdb_result"])
        assert r["errors"] == cp.stdout.count("Procedure Error set RAISEERROR")
        # HammerDB's own schema build ran, and progress lines came while it drove.
        assert "hammerdb: Vuser 1:TPCC SCHEMA COMPLETE" in cp.stdout
        assert "(server, last" in cp.stdout
        assert c["settings"]["strata.pageserver"] and c["settings"]["full_page_writes"] == "off"
        # Where the CPU went over HammerDB's timed window (tclsh included).
        check_probe(c, strata=True, need_getpage=False)
        assert c["run"]["probe"]["cpu"]["groups_s"].get("client", 0) > 0
        assert "CPU per 1,000 new orders (ms), per process group" in cp.stdout
        assert pids_mentioning(work) == []
        assert os.listdir(work) == []
