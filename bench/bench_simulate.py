"""Benchmark: `gangwatch simulate` on KTH-SP2 (the PWA's cleaned log; the site itself ran EASY).

Prints jobs/second for EASY beside FCFS (the floor: no backfilling at all, one queue-head check per
event) measured in the same run, on the first 10,000 jobs and on all ~28k. Times include reading
and parsing the gzip trace, as the command does. Targets (issue 7): 10,000 jobs under EASY
<= 0.75 s, all 28k <= 3 s.

    /tmp/gwvenv/bin/python bench/bench_simulate.py [path/to/KTH-SP2-1996-2.1-cln.swf.gz]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dashboard.analysis.replay import simulate
from dashboard.analysis.swf import read_swf

DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
REPEATS = 3


def timed(path: Path, limit: int | None, policy: str) -> tuple[float, int]:
    best = float("inf")
    jobs = 0
    for _ in range(REPEATS):
        began = time.perf_counter()
        trace = read_swf(path, limit=limit)
        result = simulate(trace.jobs, trace.header.max_procs or 100, policy)
        best = min(best, time.perf_counter() - began)
        jobs = result.jobs
    return best, jobs


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    targets = {10_000: 0.75, None: 3.0}
    ok = True
    for limit, target in targets.items():
        easy_s, jobs = timed(path, limit, "easy")
        fcfs_s, _ = timed(path, limit, "fcfs")
        label = f"first {limit}" if limit else "all"
        print(f"KTH-SP2 {label:>11} ({jobs} jobs): easy {easy_s:.3f} s = {jobs / easy_s:,.0f} jobs/s"
              f" | fcfs (floor) {fcfs_s:.3f} s = {jobs / fcfs_s:,.0f} jobs/s"
              f" | easy/fcfs time ratio {easy_s / fcfs_s:.2f} | target {target} s:"
              f" {'met' if easy_s <= target else 'MISSED'}")
        ok &= easy_s <= target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
