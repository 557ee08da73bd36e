"""Speed of a full diagnosis: 4,096 nodes x 8 GPUs, 1 hour at 15 s, 2,000 running jobs, in memory.

Builds a synthetic window (every signal the diagnosis reads, float32, with noise, checkpoint dips
and a few injected stalls) and a Slurm job list (gangs of 2-64 nodes and single-node jobs), then
times `diagnose()` on one core, beside a floor measured in the same run: one numpy pass computing
the per-series mean over time of the same arrays (what any analysis must at least read).
Goal (issue 6): <= 1 s. Also prints the Prometheus source's query count per cycle (goal <= 20),
which does not depend on the node count. The ports' link layers are given as the agent says them
(InfiniBand); `--storage-nics` gives every node two 200 Gb/s RoCE storage ports beside its eight
rails, as a DGX has them (ECN marks on them, their link layer Ethernet), which the diagnosis leaves
out of the rail signals.

    python bench/bench_diagnose.py [--nodes 4096] [--jobs 2000] [--repeat 3] [--storage-nics]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from collectors.slurm.model import Job, NodeAllocation  # noqa: E402
from dashboard.analysis.diagnose import diagnose  # noqa: E402
from dashboard.analysis.window import Window  # noqa: E402
from dashboard.sources.prometheus import plan_queries  # noqa: E402


def build(nodes: int, n_jobs: int, steps: int = 240, g: int = 8, seed: int = 0, storage: bool = False):
    rng = np.random.default_rng(seed)
    t_end = 1_767_225_600.0
    times = t_end - 15.0 * np.arange(steps)[::-1]
    f32 = np.float32
    util = np.clip(rng.normal(0.92, 0.02, (nodes, g, steps)), 0, 1).astype(f32)
    dip = (np.arange(steps) % 60) < 4  # checkpoints every 15 min, 1 min long
    util[:, :, dip] *= 0.08
    sm = (util * 0.75).astype(f32)
    power = (100 + 500 * sm).astype(f32)
    clock = np.full((nodes, g, steps), 1.98e9, f32)
    mem = np.full((nodes, g, steps), 6e10, f32)
    rails = {"ib_tx": np.full((nodes, g, steps), 2e10, f32), "ib_wait": np.full((nodes, g, steps), 1e5, f32),
             "ib_down": np.zeros((nodes, g, steps), f32)}
    osts = 32
    node = {"fs_read": np.full((nodes, steps), 5e8, f32), "fs_write": np.where(dip, 2e9, 0).astype(f32) * np.ones((nodes, 1), f32),
            "psi_io": np.full((nodes, steps), 0.02, f32)}
    target = {"read": np.full((nodes, osts, steps), 5e8 / osts, f32), "latency": np.full((nodes, osts, steps), 0.003, f32)}
    names = tuple(f"n{i:05d}" for i in range(nodes))
    jobs = []
    i = 0
    jid = 1000
    sizes = [2, 4, 8, 16, 32, 64]
    gang_nodes = int(nodes * 0.55)
    while i < gang_nodes and len(jobs) < n_jobs:
        k = int(rng.choice(sizes, p=[0.35, 0.3, 0.15, 0.1, 0.07, 0.03]))
        k = min(k, gang_nodes - i)
        if k < 2:
            break
        ns = names[i:i + k]
        jobs.append(Job(job_id=jid, state="RUNNING", start_time=t_end - 7200, nodes=ns, node_count=k, gpus=8 * k,
                        allocations=tuple(NodeAllocation(n, gpus=8, gpu_indices=tuple(range(8))) for n in ns)))
        i += k
        jid += 1
    while len(jobs) < n_jobs and i < nodes:
        per = 8 if (n_jobs - len(jobs)) * 8 <= (nodes - i) * 8 else 4
        for half in range(8 // per):
            if len(jobs) >= n_jobs:
                break
            idx = tuple(range(half * per, half * per + per))
            jobs.append(Job(job_id=jid, state="RUNNING", start_time=t_end - 3000, nodes=(names[i],), node_count=1,
                            gpus=per, allocations=(NodeAllocation(names[i], gpus=per, gpu_indices=idx),)))
            jid += 1
        i += 1
    # a few faults: an I/O stall on 20 gangs' nodes, a hang, a throttled GPU
    for j in jobs[:20]:
        rows = [names.index(n) for n in j.nodes]
        util[rows, :, -20:] = 0.1
        sm[rows, :, -20:] = 0.05
        node["psi_io"][rows, -20:] = 0.9
    target["latency"][:, 3, -20:] = 0.25
    r = [names.index(n) for n in jobs[25].nodes]
    util[r, :, -30:] = 1.0
    sm[r, :, -30:] = 0.01
    rails["ib_tx"][r, :, -30:] = 0
    clock[names.index(jobs[30].nodes[0]), 3, -60:] = 1.1e9
    ports = [f"mlx5_{k}/1" for k in range(g)]
    layers = dict.fromkeys(ports, "InfiniBand")
    if storage:  # two RoCE storage ports a node: their traffic, ECN marks, still wait, 200 Gb/s
        extra = [f"mlx5_{g + k}/1" for k in range(2)]
        layers.update(dict.fromkeys(extra, "Ethernet"))
        ports += extra
        pad = np.full((nodes, 2, steps), np.nan, f32)
        rails = {k: np.concatenate([a, pad], axis=1) for k, a in rails.items()}
        rails["ib_tx"][:, g:] = 3e9
        rails["ib_wait"][:, g:] = 0
        cong = np.concatenate([pad[:, :1].repeat(g, axis=1), pad], axis=1)
        cong[:, g:] = rng.uniform(0, 500, (nodes, 2, steps))
        rails["roce_cong"] = cong
        rails["ib_rate"] = np.concatenate([np.full((nodes, g, steps), 50e9, f32), np.full((nodes, 2, steps), 25e9, f32)], axis=1)
    win = Window(times=times, step=15.0, nodes=names, gpus=tuple(tuple(range(g)) for _ in names),
                 rails=tuple(tuple(ports) for _ in names), link_layers={n: dict(layers) for n in names},
                 targets=tuple(f"fs-OST{k:04x}" for k in range(osts)),
                 gpu={"util": util, "sm": sm, "power": power, "clock": clock, "mem": mem}, rail=rails, node=node,
                 target=target, leaf_of={n: f"leaf{k // 32:03d}" for k, n in enumerate(names)})
    return win, jobs


def floor(win: Window) -> float:
    """One numpy pass over the same arrays: per-series mean over time."""
    t0 = time.perf_counter()
    for d in (win.gpu, win.rail, win.node, win.target):
        for a in d.values():
            a.mean(axis=-1)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--storage-nics", action="store_true", help="two RoCE storage ports a node beside the rails")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    win, jobs = build(args.nodes, args.jobs, storage=args.storage_nics)
    nbytes = sum(a.nbytes for d in (win.gpu, win.rail, win.node, win.target) for a in d.values())
    print(f"window: {args.nodes} nodes x 8 GPUs x {win.n_steps} steps, {len(jobs)} running jobs "
          f"({sum(1 for j in jobs if len(j.nodes) > 1)} gangs), {nbytes / 2**20:.0f} MiB, built in {time.perf_counter() - t0:.1f} s")
    ours, base = [], []
    d = None
    for _ in range(args.repeat):
        base.append(floor(win))
        t = time.perf_counter()
        d = diagnose(win, jobs)
        ours.append(time.perf_counter() - t)
    from collections import Counter
    print("verdicts:", dict(Counter(v.state for v in d.verdicts)))
    o, f = min(ours), min(base)
    print(f"diagnosis (ours):            {o * 1e3:8.1f} ms  (best of {args.repeat}; goal <= 1000 ms)")
    print(f"floor (one numpy mean pass): {f * 1e3:8.1f} ms")
    print(f"ratio ours / floor:          {o / f:8.1f}x")
    print(f"Prometheus mode: {len(plan_queries()) + 1} queries per cycle whatever the node count (goal <= 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
