"""Plans IDENTICAL to another checkout's planner: every job's state, start, nodes and reasons.

For each seed, the benchmark's cluster (bench_planner.snapshot: 4,096 nodes) is planned by our
planner and by DIR's dashboard/analysis/planner.py, in EASY mode (no config; N_EASY pending jobs) and
in Slurm mode (Slurm's default SchedulerParameters; N_SLURM jobs, once with bf_max_job_test=500 and
once with a small bf_max_job_test so the untested jobs' path is exercised too), and the full
`/api/v1/backfill` documents are compared (only generated_at, the planning moment, may differ). A
change meant to be a pure speed-up must print no difference here.

`--edge` adds, per seed, snapshots the benchmark's cluster never has (150 pending jobs, in EASY and
Slurm mode with two configs): running jobs with no time limit, and pending ones too on a cluster a third as
busy (unlimited jobs started in the plan), a negative allocation (a node whose
room does not only grow), no running job at all, and exclusive jobs beside running jobs past their
limit.

    .venv/bin/python bench/compare_planner.py [--baseline ../main] [--seeds 10] [--slurm-jobs 60] [--edge]
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time

from bench_planner import baseline_plan, snapshot
from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import Allocation, BackfillConfig

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


def _freed(nodes, kept):
    """The nodes with only the kept running jobs' allocations in use."""
    used: dict[str, list[int]] = {}
    for r in kept:
        for a in r.allocations:
            u = used.setdefault(a.node, [0, 0, 0])
            u[0], u[1], u[2] = u[0] + a.cpus, u[1] + a.mem_mb, u[2] + a.gpus
    for n in nodes:
        c, m, g = used.get(n.name, (0, 0, 0))
        yield dataclasses.replace(n, cpus_free=n.cpus_total - c, mem_free_mb=n.mem_total_mb - m,
                                  gpus_free=n.gpus_total - g)


def _edge(seed: int):
    """(label, snapshot) of the --edge cases for one seed (see the module docstring)."""
    base = snapshot(seed, n_pending=150)
    rnd = random.Random(seed)
    run = list(base.running)
    yield "unlimited", dataclasses.replace(base, running=tuple(
        dataclasses.replace(r, time_limit_s=float("inf")) if rnd.random() < 0.05 else r for r in run))
    # unlimited jobs started in the plan too, on a cluster a third as busy (many starts): their
    # releases (at +inf) merged into the running ones'
    yield "unlimited, pending too", dataclasses.replace(base, running=tuple(
        dataclasses.replace(r, time_limit_s=float("inf")) if rnd.random() < 0.05 else r for r in run[::3]),
        nodes=tuple(_freed(base.nodes, run[::3])), pending=tuple(
        dataclasses.replace(j, time_limit_s=float("inf")) if rnd.random() < 0.2 else j for j in base.pending))
    run[3] = dataclasses.replace(run[3], allocations=(Allocation(run[3].allocations[0].node, -4, 0, -1),))
    yield "negative allocation", dataclasses.replace(base, running=tuple(run))
    yield "no running job", dataclasses.replace(base, running=())
    yield "exclusive, overrun", dataclasses.replace(
        base, pending=tuple(dataclasses.replace(j, exclusive=True) if rnd.random() < 0.2 else j for j in base.pending),
        running=tuple(dataclasses.replace(r, start=r.start - 2 * r.time_limit_s) if rnd.random() < 0.1 else r
                      for r in base.running))


def _cases(seed: int, n_slurm: int, edge: bool):
    """(label, snapshot) to compare for one seed."""
    for label, cfg, n in (("easy", None, N_EASY), ("slurm", BackfillConfig(), n_slurm),
                          ("slurm bf_max_job_test=20", BackfillConfig(bf_max_job_test=20), 3 * n_slurm)):
        yield label, dataclasses.replace(snapshot(seed, n_pending=n), config=cfg)
    if edge:
        for label, inp in _edge(seed):
            for mode, cfg in (("easy", None), ("slurm", BackfillConfig()),
                              ("slurm bf_max_job_test=30 bf_resolution 30 s",
                               BackfillConfig(bf_max_job_test=30, bf_resolution_s=30))):
                yield f"{label}, {mode}", dataclasses.replace(inp, config=cfg)


def main() -> int:
    other = baseline_plan(_arg("--baseline", "../main"))
    seeds, n_slurm = _arg("--seeds", 10), _arg("--slurm-jobs", 60)
    bad = total = 0
    for seed in range(seeds):
        for label, inp in _cases(seed, n_slurm, "--edge" in sys.argv):
            total += 1
            t = time.perf_counter()
            ours, theirs = _doc(plan, inp), _doc(other, inp)
            jobs = sum(len(p["why"]) for p in ours["partitions"])
            same = ours == theirs
            bad += not same
            print(f"seed {seed} {label}: {jobs} jobs, {'identical' if same else 'DIFFERENT: '}"
                  f"{'' if same else _first_difference(ours, theirs)} ({time.perf_counter() - t:.1f} s)", flush=True)
    print(f"{total - bad} of {total} plans identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
