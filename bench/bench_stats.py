"""Statistics of pgbench per-transaction logs: TPS, latency percentiles, TPS over time.

For: parsing the lines pgbench -l writes (one per transaction), and reducing
them to the figures a report shows.  Everything is computed from the log, not
from pgbench's own summary, so every setup is measured the same way.

Not for: running pgbench (bench_pgbench.py) or formatting (bench_report.py).

pgbench 15 log line (no --sampling-rate, no --aggregate-interval):
    client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]
where `time` is the transaction's latency in microseconds, or "failed" /
"skipped", and time_epoch.time_us is when it completed.
"""

import math


class Txn:
    """One logged transaction: completion time (s since the epoch), latency (us)."""
    __slots__ = ("end_s", "latency_us")

    def __init__(self, end_s, latency_us):
        self.end_s = end_s
        self.latency_us = latency_us


def parse_log_lines(lines):
    """(transactions, failed_count) from pgbench log lines; raises ValueError on garbage."""
    txns = []
    failed = 0
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 6:
            raise ValueError(f"pgbench log line {lineno}: expected >= 6 fields: {line!r}")
        if fields[2] in ("failed", "skipped"):
            failed += 1
            continue
        try:
            latency_us = int(fields[2])
            end_s = int(fields[4]) + int(fields[5]) / 1e6
        except ValueError as e:
            raise ValueError(f"pgbench log line {lineno}: {e}: {line!r}") from e
        if latency_us < 0:
            raise ValueError(f"pgbench log line {lineno}: negative latency: {line!r}")
        txns.append(Txn(end_s, latency_us))
    return txns, failed


def percentile(sorted_values, pct):
    """Nearest-rank percentile (0 < pct <= 100) of an ascending non-empty list.

    The rank is rounded to 9 decimals before ceil so that float error cannot
    push it up one place (99.9% of 1000 values is rank 999, not 1000)."""
    assert sorted_values, "percentile of nothing"
    assert 0 < pct <= 100
    rank = math.ceil(round(pct / 100.0 * len(sorted_values), 9))
    return sorted_values[max(rank, 1) - 1]


def summarize(txns, failed=0):
    """TPS and latency figures (milliseconds) of one run's transactions.

    TPS = completed transactions / (last completion - first start), the
    wall-clock span the log covers.
    """
    if not txns:
        return {"txns": 0, "failed": failed, "span_s": 0.0, "tps": 0.0}
    lat = sorted(t.latency_us for t in txns)
    first_start = min(t.end_s - t.latency_us / 1e6 for t in txns)
    last_end = max(t.end_s for t in txns)
    span = max(last_end - first_start, 1e-6)
    return {
        "txns": len(txns),
        "failed": failed,
        "span_s": round(span, 3),
        "tps": round(len(txns) / span, 1),
        "lat_ms": {
            "mean": round(sum(lat) / len(lat) / 1000.0, 3),
            "p50": percentile(lat, 50) / 1000.0,
            "p90": percentile(lat, 90) / 1000.0,
            "p99": percentile(lat, 99) / 1000.0,
            "p99.9": percentile(lat, 99.9) / 1000.0,
            "max": lat[-1] / 1000.0,
        },
    }


def tps_over_time(txns, duration_s=None):
    """[(second, tps)] counting completions in each whole second since the first start.

    The last bucket is dropped when it is only partly covered by the run
    (pgbench stops mid-second), so it does not read as a dip.
    """
    if not txns:
        return []
    t0 = min(t.end_s - t.latency_us / 1e6 for t in txns)
    last = max(t.end_s for t in txns)
    nbuckets = int(last - t0)  # whole seconds only
    if duration_s is not None:
        nbuckets = min(nbuckets, int(duration_s))
    counts = [0] * max(nbuckets, 0)
    for t in txns:
        b = int(t.end_s - t0)
        if 0 <= b < nbuckets:
            counts[b] += 1
    return [(i, c) for i, c in enumerate(counts)]


# Points of the latency percentile curve: x = -log10(1 - p), so 90% is 1,
# 99% is 2, 99.9% is 3; the tail gets as much room as the body.
CURVE_PERCENTILES = (1, 10, 25, 50, 75, 90, 95, 97.5, 99, 99.5, 99.7, 99.9, 99.95, 99.99)


def latency_curve(txns):
    """[(x, pct, latency_ms)] for CURVE_PERCENTILES, x on the -log10(1-p) scale."""
    if not txns:
        return []
    lat = sorted(t.latency_us for t in txns)
    curve = []
    for pct in CURVE_PERCENTILES:
        x = -math.log10(1.0 - pct / 100.0)
        curve.append((round(x, 4), pct, percentile(lat, pct) / 1000.0))
    return curve
