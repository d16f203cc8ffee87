"""A simulator seed names one run, whichever build runs it (tests/sim).

The replay line a failing seed prints is only useful if the release build and
the sanitizer build (GCC and Clang here) make the same random draws in the same
order.  C leaves the order of a call's arguments to the compiler, so two draws
in one call's arguments would split the runs; this compares whole traces.
"""
import os
import subprocess

import pytest

from conftest import BUILD, SAN_BUILD

SIMS = [os.path.join(b, "bin", "strata-sim") for b in (BUILD, SAN_BUILD)]
pytestmark = pytest.mark.skipif(not all(os.access(s, os.X_OK) for s in SIMS),
                                reason="needs strata-sim in %s and %s" % (BUILD, SAN_BUILD))


@pytest.mark.parametrize("seed", [1, 77, 1298, 4242])
def test_a_seed_replays_the_same_run_in_both_builds(seed):
    traces = []
    for sim in SIMS:
        res = subprocess.run([sim, "--seed", str(seed), "--steps", "6000"], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        traces.append(res.stdout + res.stderr)
    assert traces[0].count("\n") > 100, traces[0][-2000:]
    if traces[0] != traces[1]:
        a, b = traces[0].splitlines(), traces[1].splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        pytest.fail("seed %d: the builds part at trace line %d:\n  %s\n  %s" % (
            seed, first + 1, a[first] if first < len(a) else "<end>",
            b[first] if first < len(b) else "<end>"))
