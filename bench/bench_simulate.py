"""Benchmark: `gangwatch simulate` on KTH-SP2 and HPC2N (the PWA's cleaned logs).

Prints jobs/second for EASY beside FCFS (the floor: no backfilling at all, one queue-head check per
event) measured in the same run: KTH-SP2's first 10,000 jobs and all ~28k, and all 202,876 HPC2N
records. Times include reading and parsing the gzip trace, as the command does. Targets: KTH-SP2
10,000 jobs under EASY <= 0.75 s and all 28k <= 3 s (issue 7); all of HPC2N <= 3 s (issue 14).

    .venv/bin/python bench/bench_simulate.py [path/to/traces/]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dashboard.analysis.replay import simulate
from dashboard.analysis.swf import read_swf

DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
KTH = "KTH-SP2-1996-2.1-cln.swf.gz"
HPC2N = "HPC2N-2002-2.1-cln.swf.gz"
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
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    cases = [(KTH, 10_000, 0.75), (KTH, None, 3.0), (HPC2N, None, 3.0)]
    ok = True
    for name, limit, target in cases:
        path = folder / name
        easy_s, jobs = timed(path, limit, "easy")
        fcfs_s, _ = timed(path, limit, "fcfs")
        label = f"first {limit}" if limit else "all"
        print(f"{name.split('-')[0]:>7} {label:>11} ({jobs} jobs): easy {easy_s:.3f} s = {jobs / easy_s:,.0f} jobs/s"
              f" | fcfs (floor) {fcfs_s:.3f} s = {jobs / fcfs_s:,.0f} jobs/s"
              f" | easy/fcfs time ratio {easy_s / fcfs_s:.2f} | target {target} s:"
              f" {'met' if easy_s <= target else 'MISSED'}")
        ok &= easy_s <= target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
