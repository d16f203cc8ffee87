"""The command-line pieces every benchmark program shares.

For: the options each program takes alike (--strata-build, --workdir, --out,
--docs, --from-json, --keep) with one default and one meaning each; which
release build to use (STRATA_BUILD, else the build `strata bench` ran from,
else ./build); whether a run updates docs/benchmarks.md; the time-stamped
progress line; SIGTERM turned into KeyboardInterrupt so that a program's
clean-up runs when it is stopped; the --from-json path (report_from_json);
the machine a run measured on; the results dict a side-by-side run starts
with (new_results), the loop over its setups (run_setups, SkipSetup) and the
timed run of them in a temporary directory (run_timed).

Not for: a program's own options (sizes, setups, steps), measuring, or
writing reports (bench_report.py).  No state: every function works on what
it is given.
"""

import argparse
import copy
import datetime
import json
import os
import signal
import time

from bench_proc import BenchError, run_then_clean

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def log(msg):
    """Prints msg with the wall-clock time, flushed (progress of a long run)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def default_strata_build():
    """STRATA_BUILD, else the build `strata bench` ran from (STRATA_BINDIR/..), else ./build."""
    if os.environ.get("STRATA_BUILD"):
        return os.environ["STRATA_BUILD"]
    if os.environ.get("STRATA_BINDIR"):
        return os.path.dirname(os.path.abspath(os.environ["STRATA_BINDIR"]))
    return os.path.join(REPO, "build")


def add_common_options(ap, name, keep=True, workdir_note=""):
    """Adds to the argparse parser ap the options every benchmark takes:
    --strata-build, --workdir, --out (default bench/results/<name>), --docs,
    --from-json and, with keep, --keep.  workdir_note is appended to
    --workdir's help (what its filesystem means to this benchmark)."""
    assert isinstance(ap, argparse.ArgumentParser) and name
    ap.add_argument("--strata-build", default=default_strata_build(),
                    help="release build directory holding bin/strata and lib/strata.so "
                         "(env STRATA_BUILD; under `strata bench`, the build of that strata; "
                         "default ./build)")
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp"),
                    help="where the temporary data directories go" + workdir_note)
    ap.add_argument("--out", default=os.path.join(HERE, "results", name),
                    help="directory for results.json, results.md and the plots")
    ap.add_argument("--docs", choices=("auto", "yes", "no"), default="auto",
                    help="update docs/benchmarks.md and docs/img/ (auto: unless --quick)")
    ap.add_argument("--from-json", metavar="RESULTS_JSON",
                    help="measure nothing: rewrite the reports (and docs, per --docs) from "
                         "the results.json of an earlier run")
    if keep:
        ap.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (data, server logs)")


def docs_wanted(docs, quick):
    """Whether a run updates docs/benchmarks.md: --docs yes, or auto and not quick."""
    assert docs in ("auto", "yes", "no")
    return docs == "yes" or (docs == "auto" and not quick)


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm():
    """From now on SIGTERM raises KeyboardInterrupt in the main thread, as
    Ctrl-C does, so that the program stops what it started before it exits."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def load_results(path):
    """The results dict of an earlier run (its results.json).  Raises OSError
    or ValueError (not JSON)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def machine_description(path):
    """nproc, CPU model, memory, filesystem of path, kernel, load average."""
    desc = {"nproc": os.cpu_count(), "cpu_model": "unknown", "mem_total": "unknown",
            "kernel": os.uname().release}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    desc["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    desc["mem_total"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except OSError:
        pass
    best = ("?", "?", "/", "")
    try:
        real = os.path.realpath(path)
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                dev, mnt, fstype, opts = line.split()[:4]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) \
                        and len(mnt) >= len(best[2]):
                    best = (dev, fstype, mnt, opts)
    except OSError:
        pass
    desc["filesystem"] = f"{best[1]} on {best[0]} mounted at {best[2]} ({best[3]})"
    desc["loadavg_start"] = load_average()
    return desc


def load_average():
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def report_from_json(args, console, write_reports, derive=None):
    """--from-json: measures nothing.  Reads the results.json args.from_json
    names (args.quick becomes its "quick"), lets derive(results) recompute
    what is derived from the measurements (verdicts), prints
    console(results) and calls write_reports(args, results).  Returns 0."""
    results = load_results(args.from_json)
    args.quick = results.get("quick", False)
    if derive is not None:
        derive(results)
    print(console(results))
    write_reports(args, results)
    return 0


class SkipSetup(Exception):
    """A setup cannot run here (for example, the Strata build is missing)."""


def run_setups(args, results, setups, runners, fields, failures=(BenchError,)):
    """Runs the setups args.setups names, in order.  Each gets an entry in
    results["setups"]: key, title and description (setups[key] = (title,
    description)), status "ok", reason "", settings {} and then fields (name
    -> initial value); runners[key]() returns the values of ("settings",
    *fields).  SkipSetup marks the entry skipped, an exception of failures
    failed (both logged; the next setup runs); KeyboardInterrupt marks it
    interrupted and propagates.  Every entry records its elapsed_s."""
    for key in args.setups:
        title, description = setups[key]
        setup = {"key": key, "title": title, "description": description, "status": "ok",
                 "reason": "", "settings": {}}
        setup.update(copy.deepcopy(fields))
        results["setups"].append(setup)
        started = time.monotonic()
        try:
            values = runners[key]()
            assert len(values) == 1 + len(fields), f"({key}) runner returned {len(values)} values"
            setup.update(zip(("settings",) + tuple(fields), values))
        except SkipSetup as e:
            setup["status"], setup["reason"] = "skipped", str(e)
            log(f"({key}) skipped: {e}")
        except failures as e:  # pylint: disable=catching-non-exception
            setup["status"], setup["reason"] = "failed", str(e).splitlines()[0]
            log(f"({key}) failed: {e}")
        except KeyboardInterrupt:
            setup["status"], setup["reason"] = "interrupted", "interrupted by a signal"
            raise
        finally:
            setup["elapsed_s"] = round(time.monotonic() - started, 1)


def new_results(name, args, argv, work, params, **extra):
    """The results dict of a side-by-side run of benchmark name: date (UTC),
    quick, params ({"argv": argv, **params, "strata_build": ...}), the machine
    (its filesystem: that of work), then extra's keys, then an empty
    "setups" list the run fills in."""
    results = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "params": dict({"argv": argv}, **params,
                       strata_build=os.path.abspath(args.strata_build)),
        "machine": machine_description(work),
    }
    results.update(extra)
    results["setups"] = []
    return results


def run_timed(step, args, work, results):
    """Runs step() (bench_proc.run_then_clean: work removed afterwards unless
    --keep), then records the load average at the end and the elapsed
    seconds in results.  Returns True when step was interrupted."""
    started = time.monotonic()
    interrupted = run_then_clean(step, work, args.keep, log)
    results["machine"]["loadavg_end"] = load_average()
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return interrupted


def print_table(text):
    """Prints a console table with a blank line before and after it."""
    print()
    print(text)
    print()
