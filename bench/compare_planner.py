"""Plans IDENTICAL to another checkout's planner: every job's state, start, nodes and reasons.

For each seed, the benchmark's cluster (bench_planner.snapshot: 4,096 nodes) is planned by our
planner and by DIR's dashboard/analysis/planner.py, in EASY mode (no config; N_EASY pending jobs) and
in Slurm mode (Slurm's default SchedulerParameters; N_SLURM jobs, once with bf_max_job_test=500 and
once with a small bf_max_job_test so the untested jobs' path is exercised too), and the full
`/api/v1/backfill` documents are compared (only generated_at, the planning moment, may differ). A
change meant to be a pure speed-up must print no difference here.

    .venv/bin/python bench/compare_planner.py [--baseline ../main] [--seeds 10] [--slurm-jobs 60]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

from bench_planner import baseline_plan, snapshot
from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import BackfillConfig

N_EASY = 3000


def _arg(name: str, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def _doc(fn, inp) -> dict:
    doc = fn(inp).to_json()
    doc.pop("generated_at")
    return doc


def _first_difference(a, b, path="") -> str:
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"


def main() -> int:
    other = baseline_plan(_arg("--baseline", "../main"))
    seeds, n_slurm = _arg("--seeds", 10), _arg("--slurm-jobs", 60)
    cases = [("easy", None, N_EASY), ("slurm", BackfillConfig(), n_slurm),
             ("slurm bf_max_job_test=20", BackfillConfig(bf_max_job_test=20), 3 * n_slurm)]
    bad = 0
    for seed in range(seeds):
        for label, cfg, n in cases:
            inp = dataclasses.replace(snapshot(seed, n_pending=n), config=cfg)
            t = time.perf_counter()
            ours, theirs = _doc(plan, inp), _doc(other, inp)
            jobs = sum(len(p["why"]) for p in ours["partitions"])
            same = ours == theirs
            bad += not same
            print(f"seed {seed} {label}: {jobs} jobs, {'identical' if same else 'DIFFERENT: '}"
                  f"{'' if same else _first_difference(ours, theirs)} ({time.perf_counter() - t:.1f} s)", flush=True)
    print(f"{seeds * len(cases) - bad} of {seeds * len(cases)} plans identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
