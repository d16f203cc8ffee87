"""The command-line pieces every benchmark program shares.

For: the options each program takes alike (--strata-build, --workdir, --out,
--docs, --from-json, --keep) with one default and one meaning each; which
release build to use (STRATA_BUILD, else the build `strata bench` ran from,
else ./build); whether a run updates docs/benchmarks.md; the time-stamped
progress line; SIGTERM turned into KeyboardInterrupt so that a program's
clean-up runs when it is stopped; reading an earlier results.json back.

Not for: a program's own options (sizes, setups, steps), measuring, or
writing reports (bench_report.py).  No state: every function works on what
it is given.
"""

import argparse
import json
import os
import signal
import time

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
