"""What the benchmark programs' tests (bench/test_*.py) share.

For: finding the release build a test runs against (STRATA_BUILD, else
./build) and skipping the test when a file it needs was not built; a scratch
directory for one real --quick run that the postgres user can enter, and
that is left with nothing running in it and removed afterwards.

Not for: the programs themselves (they never import pytest) or asserting
anything: a test still checks, inside the with block, that the program
stopped what it started (pids_mentioning(work) == []) before the clean-up
here kills what was left.
"""

import contextlib
import os
import shutil
import tempfile

import pytest

from bench_proc import pids_mentioning

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATA_NEEDS = ("bin/strata", "bin/strata-pageserver", "lib/strata.so")


def strata_build():
    """The release build the tests use: STRATA_BUILD, else <repo>/build."""
    return os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))


def need_strata_build(needs=STRATA_NEEDS):
    """strata_build(); skips the calling test when any of needs (paths
    relative to it) does not exist."""
    build = strata_build()
    for need in needs:
        if not os.path.exists(os.path.join(build, need)):
            pytest.skip(f"not built: {os.path.join(build, need)}")
    return build


def kill_pids_mentioning(text):
    """SIGKILLs every process whose command line contains text; returns their pids."""
    pids = pids_mentioning(text)
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return pids


@contextlib.contextmanager
def scratch_workdir(prefix):
    """A new directory under /tmp, mode 755 (pytest's tmp_path sits under a
    0700 directory the postgres user cannot enter), for a run's servers.  On
    leaving the block, whatever still mentions it is killed and it is removed."""
    work = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(work, 0o755)
    try:
        yield work
    finally:
        kill_pids_mentioning(work)
        shutil.rmtree(work, ignore_errors=True)
