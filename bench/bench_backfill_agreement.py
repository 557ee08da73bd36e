"""Benchmark: agreement of gangwatch's backfill plan with the real Slurm, over randomised workloads.

For each workload (tests/backfill_agreement.py: 8 GPU nodes, partitions gpu and long, gangs of 1-8
nodes, short and long limits, a reservation, a QOS with MaxJobsPerUser=2 when slurmdbd is there,
dependencies, held jobs) gangwatch plans a snapshot, then Slurm runs its main scheduler and one
backfill cycle. Prints precision and recall of "startable now" (gangwatch's list vs the jobs Slurm
started, Scheduler=Main or Backfill), the share of workloads whose top-job reserved start is within
one bf_resolution of `squeue --start`, and every disagreement with the Slurm rule that explains it.
The peer is a plain EASY plan of the same snapshots (gangwatch without Slurm's parameters: one
reservation per partition, best-fit nodes), scored the same way in the same run.
Targets (issue 14): precision and recall >= 0.95, top job within bf_resolution in >= 95 % of workloads.
Needs root and the Slurm packages (tests/run-all.sh installs them).

    .venv/bin/python bench/bench_backfill_agreement.py [workloads=30] [first seed=0]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import slurm_cluster  # noqa: E402
from tests.backfill_agreement import Harness, make_workload, report, summary  # noqa: E402


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    why = slurm_cluster.unavailable_reason()
    if why:
        print(f"cannot run: {why}")
        return 2
    dbd = slurm_cluster.have_dbd()
    c = slurm_cluster.SlurmCluster(state_dir=f"/tmp/gw-slurm-agreebench{os.getpid()}", dbd=dbd)
    began = time.monotonic()
    try:
        c.start()
        h = Harness(c, dbd)
        h.setup()
        h.compare_easy = True
        outcomes = []
        for seed in range(first, first + n):
            o = h.run(make_workload(seed, dbd))
            outcomes.append(o)
            print(f"seed {seed}: gangwatch {sorted(o.ours, key=int)} Slurm {sorted(o.slurm, key=int)} "
                  f"top {'ok' if o.top_ok else 'OFF'} ({o.seconds:.1f} s)", flush=True)
    finally:
        c.stop()
    s = summary(outcomes)
    print(f"\nSlurm 22.05, slurmdbd {'yes' if dbd else 'no (no QOS limit)'}, {time.monotonic() - began:.0f} s")
    print("gangwatch (Slurm's parameters): " + report(s))
    e = summary([o.easy for o in outcomes])
    print(f"peer, plain EASY on the same snapshots: precision {e['precision']:.3f}, recall {e['recall']:.3f}, "
          f"top job within bf_resolution {e['top_within_bf_resolution']:.0%}")
    ok = s["precision"] >= 0.95 and s["recall"] >= 0.95 and s["top_within_bf_resolution"] >= 0.95
    print("targets (0.95 / 0.95 / 95 %):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
