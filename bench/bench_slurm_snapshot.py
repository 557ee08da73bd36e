#!/usr/bin/env python3
"""Benchmark: building the Slurm snapshot for 10,000 jobs on 2,000 nodes, against the time of the
`squeue --json` call itself, measured in the same run.

With root and Slurm installed (the default), it starts a real Slurm through tests/slurm_cluster.py:
8 GPU nodes with slurmd plus 1,992 declared nodes without slurmd (DOWN, in partition gpu) =
2,000 nodes; tests/slurm/populate.sh's realistic queue (running gangs with per-node allocations,
holds, dependencies, reservations); then a held job array is added and its tasks split into
individual job records (`scontrol hold <id>_<task>,...`) until slurmctld holds 10,000 jobs. The
exporter polls it once (all commands: squeue/sinfo --json, scontrol, sprio, sshare, sdiag), and we
time `build_snapshot` on those outputs (JSON decoding and all parsing included) against
`squeue --json` itself (median of 3 each).

Without Slurm (`--synthetic`, or automatically when it cannot start) it scales up our real live
capture (tests/data/slurm-live) to 10,000 jobs on 2,000 nodes and prints only our figure.

Target: build <= 1 s and <= 0.5 x the squeue --json call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.runner import CommandRunner  # noqa: E402
from collectors.slurm.snapshot import RawOutput, build_snapshot  # noqa: E402
from collectors.slurm.sources import CliSource  # noqa: E402

N_JOBS = 10_000
N_NODES = 2_000


def median_time(fn, n: int = 3, cpu: list | None = None) -> tuple[float, object]:
    """Median wall time of n runs (and, into `cpu`, the median CPU time of this process)."""
    times, cpus, out = [], [], None
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    if cpu is not None:
        cpu.append(statistics.median(cpus))
    return statistics.median(times), out


def fill_queue(cluster, target: int) -> None:
    have = len(json.loads(cluster.run("squeue", "--json", timeout=120))["jobs"])
    need = target - have
    if need <= 0:
        return
    out = cluster.run("sbatch", "--parsable", "--uid=erin", "--gid=erin", "--chdir=/tmp", "-o", "/dev/null", "-e", "/dev/null",
                      "--hold", "-J", "bench-sweep", f"--array=0-{need - 1}", "-N", "2", "--gpus-per-node=8", "-t", "01:00:00",
                      "--wrap", "sleep 1")
    arr = int(out.strip().split(";")[0])
    # a pending array is one record until its tasks are touched one by one; split all but the last
    for start in range(0, need - 1, 1000):
        ids = ",".join(f"{arr}_{i}" for i in range(start, min(start + 1000, need - 1)))
        cluster.run("scontrol", "hold", ids, timeout=300)


def bench_real(keep: bool) -> int:
    from tests import slurm_cluster

    why = slurm_cluster.unavailable_reason()
    if why:
        print(f"real Slurm not available: {why}; falling back to --synthetic")
        return bench_synthetic()
    cluster = slurm_cluster.SlurmCluster(sim_nodes=N_NODES - 8, dbd=False, max_jobs=N_JOBS + 2000)
    t0 = time.time()
    try:
        cluster.start()
        cluster.populate()
        fill_queue(cluster, N_JOBS)
        print(f"cluster ready in {time.time() - t0:.0f} s")
        runner = CommandRunner(env=cluster.env)
        src = CliSource(runner=runner, timeout=300)
        raws, statuses = src.poll()
        assert all(s.ok for s in statuses), statuses
        squeue_t, _ = median_time(lambda: runner.run(["squeue", "--json"], timeout=300))
        return report(raws, squeue_t, {s.command: s.duration for s in statuses}, "real Slurm " + src.version_text)
    finally:
        if not keep:
            cluster.stop()


def bench_synthetic() -> int:
    live = ROOT / "tests" / "data" / "slurm-live"
    sq = json.loads((live / "squeue_--json.json").read_text())
    nodes = json.loads((live / "sinfo_--json.json").read_text())
    names = [f"gpu{i:04d}" for i in range(1, N_NODES + 1)]
    node_tpl = nodes["nodes"]
    nodes["nodes"] = [dict(node_tpl[i % len(node_tpl)], name=n) for i, n in enumerate(names)]
    tpl = sq["jobs"]
    jobs = []
    for i in range(N_JOBS):
        j = json.loads(json.dumps(tpl[i % len(tpl)]))
        j["job_id"] = 1000 + i
        if j.get("nodes"):
            base = (i * 4) % (N_NODES - 8)
            k = len(j["job_resources"].get("allocated_nodes") or [])
            mine = names[base:base + max(1, k)]
            j["nodes"] = ",".join(mine)
            j["job_resources"]["nodes"] = j["nodes"]
            for a, n in zip(j["job_resources"].get("allocated_nodes") or [], mine):
                a["nodename"] = n
        jobs.append(j)
    sq["jobs"] = jobs
    raws = [RawOutput("jobs", "squeue --json", "json", json.dumps(sq)),
            RawOutput("nodes", "sinfo --json", "json", json.dumps(nodes))]
    for kind, fname, fmt in (("partitions", "scontrol_show_partition.txt", "text"),
                             ("reservations", "scontrol_-o_show_reservation.txt", "text"),
                             ("scheduler", "sdiag.txt", "text"), ("fairshare", "sshare_-l_-a_-P.txt", "sshare")):
        raws.append(RawOutput(kind, fname, fmt, (live / fname).read_text()))
    return report(raws, None, {}, "synthetic: live capture scaled up")


def report(raws, squeue_t, durations, what: str) -> int:
    cpu: list = []
    build_t, snap = median_time(lambda: build_snapshot(raws, time.time(), "cli"), cpu=cpu)
    running = sum(j.state == "RUNNING" for j in snap.jobs)
    size = sum(len(r.text or "") for r in raws)
    print(f"source: {what}")
    print(f"jobs: {len(snap.jobs)} ({running} running), nodes: {len(snap.nodes)}, outputs: {size / 1e6:.1f} MB")
    if durations:
        print("command times in the poll: " + ", ".join(f"{k} {v:.3f}s" for k, v in durations.items()))
    print(f"gangwatch build_snapshot (decode + parse all outputs): {build_t:.3f} s wall, {cpu[0]:.3f} s CPU")
    if squeue_t is None:
        print("squeue --json: not measured (no Slurm in this run)")
        ok = build_t <= 1.0
    else:
        ratio = build_t / squeue_t
        print(f"squeue --json call itself:                           {squeue_t:.3f} s")
        print(f"ratio build/squeue: {ratio:.2f} (target <= 0.5)")
        ok = build_t <= 1.0 and ratio <= 0.5
    print("PASS" if ok else "FAIL", "(target: build <= 1 s" + (" and <= 0.5 x squeue --json)" if squeue_t else ")"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", action="store_true", help="no real Slurm: scale up the live capture")
    ap.add_argument("--keep", action="store_true", help="leave the benchmark cluster running")
    args = ap.parse_args()
    return bench_synthetic() if args.synthetic else bench_real(args.keep)


if __name__ == "__main__":
    sys.exit(main())
