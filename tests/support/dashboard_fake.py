"""A small in-memory cluster for the dashboard tests, built from the real model dataclasses.

Eight nodes (one drained), three running jobs (one of them named like an XSS payload, stalled on
I/O), a pending gang that depends on a running job, a reservation, a fairshare tree, an hour of
per-GPU series. Deterministic: no clock, no randomness.
"""

from __future__ import annotations

import numpy as np

from collectors.slurm.model import (Dependency, FairshareRow, Job, Node, NodeAllocation, Partition, PriorityFactors,
                                    Reservation, Snapshot)
from dashboard.datasource import Evidence, Findings, MemoryDatasource, Verdict, group_incidents

NOW = 1_767_229_200.0
XSS = "<img src=x onerror=alert(1)>"
NODES = [f"gpu{i:03d}" for i in range(1, 9)]


def snapshot() -> Snapshot:
    def alloc(names, gpus=8):
        return tuple(NodeAllocation(n, 64, None, gpus, tuple(range(gpus)), "h100") for n in names)

    jobs = (
        Job(4001, name=XSS, user="mallory", account="<b>acct</b>", partition="gpu", state="RUNNING", reason="None",
            submit_time=NOW - 7200, start_time=NOW - 5400, time_limit_seconds=4 * 3600, node_count=2, gpus=16,
            nodes=tuple(NODES[0:2]), allocations=alloc(NODES[0:2]), cpus=128),
        Job(4002, name="llama-ft", user="alice", account="nlp", partition="gpu", state="RUNNING", reason="None",
            submit_time=NOW - 4000, start_time=NOW - 3600, time_limit_seconds=2 * 3600, node_count=2, gpus=16,
            nodes=tuple(NODES[2:4]), allocations=alloc(NODES[2:4]), cpus=128),
        Job(4003, name="notebook", user="bob", account="vision", partition="gpu", state="RUNNING", reason="None",
            submit_time=NOW - 1000, start_time=NOW - 900, time_limit_seconds=3600, node_count=1, gpus=2,
            nodes=(NODES[4],), allocations=alloc([NODES[4]], 2), cpus=16),
        Job(4004, name="gpt-13b", user="carol", account="nlp", partition="gpu", state="PENDING", reason="Dependency",
            submit_time=NOW - 1800, time_limit_seconds=6 * 3600, node_count=4, gpus=32, cpus=512,
            tres_per_node="gres/gpu:8", priority=12000, dependency="afterok:4002(unfulfilled)",
            dependencies=(Dependency("afterok", "4002", "unfulfilled"),),
            priority_factors=PriorityFactors(priority=12000, age=500, fairshare=8000, jobsize=3500)),
        Job(4005, name="sweep-lr", user="dave", account="rl", partition="gpu", state="PENDING", reason="Priority",
            submit_time=NOW - 600, time_limit_seconds=1800, node_count=1, gpus=1, cpus=16, tres_per_node="gres/gpu:1",
            priority=9000),
    )
    nodes = []
    used = {n: 0 for n in NODES}
    for j in jobs:
        for a in j.allocations:
            used[a.node] += a.gpus
    for k, n in enumerate(NODES):
        drained = n == NODES[7]
        g = used[n]
        nodes.append(Node(n, state="IDLE" if g == 0 else ("ALLOCATED" if g == 8 else "MIXED"),
                          state_flags=("DRAIN",) if drained else (), reason="XID 79 on GPU 3" if drained else "",
                          reason_time=NOW - 3000 if drained else None, cpus_total=128, cpus_allocated=64 if g else 0,
                          memory_total_bytes=2 * 1024**4, gpus_total=8, gpus_allocated=g, gpu_types=("h100",),
                          partitions=("gpu",), features=("h100",)))
    return Snapshot(taken_at=NOW, source="test", cluster="fake", jobs=jobs, nodes=tuple(nodes),
                    partitions=(Partition("gpu", "UP", tuple(NODES), 8, 1024, True, 3 * 86400),),
                    reservations=(Reservation("maint", (NODES[6],), NOW + 7200, NOW + 10800, ("MAINT",), ("root",)),),
                    fairshare=(FairshareRow("root", depth=0, fairshare=1.0), FairshareRow("nlp", depth=1, norm_shares=0.5,
                                                                                         effective_usage=0.7, fairshare=0.4),
                               FairshareRow("nlp", "alice", depth=2, fairshare=0.35)))


def findings() -> Findings:
    verdicts = (
        Verdict("4001", tuple(NODES[0:2]), 16, "stalled_io", 0.97, NOW - 900, "lustre-OST0003", "target",
                (Evidence("io_pressure", NODES[0], 0.91, 0.02, 0.3), Evidence("io_pressure", NODES[1], 0.88, 0.03, 0.3)),
                4.0),
        Verdict("4002", tuple(NODES[2:4]), 16, "progressing", 0.9, None),
        Verdict("4003", (NODES[4],), 2, "idle_gpus", 0.8, NOW - 600, "job 4003", "job", (), 0.17),
    )
    return Findings(NOW, "diagnosis", verdicts, group_incidents(verdicts))


def series():
    times = NOW - 3600 + 15.0 * np.arange(241)
    data = {}
    for k, n in enumerate(NODES):
        util = np.full((8, len(times)), 0.9 - 0.05 * k)
        if n in NODES[0:2]:
            util[:, times >= NOW - 900] = 0.08  # the stall
        if n == NODES[7]:
            util[:] = np.nan  # drained: no data, which is not 0
        data[n] = {"gpu_util": util, "gpu_sm": util * 0.8, "ib_tx": np.full((8, len(times)), 1e9 * k),
                   "io_read": np.full((1, len(times)), 1e8), "io_pressure": np.full((1, len(times)), 0.02)}
    return times, data


def datasource(simulated: bool = True) -> MemoryDatasource:
    times, data = series()
    return MemoryDatasource(snapshot(), findings(), times, data, simulated=simulated, now=NOW)
