"""Scheduling the simulated queue as slurmctld does: a main FCFS pass, and EASY backfill cycles.

- `fcfs`: the main scheduler, run every step: pending jobs in priority order, each all-or-nothing
  (a gang gets all its nodes at once or nothing), the first that does not fit stops the pass.
- `easy`: a backfill cycle, run every `backfill_interval` simulated seconds while jobs wait (Slurm's
  bf_interval, 30 s by default): gangwatch's own EASY planner (dashboard/analysis/planner.py)
  gets a `PlannerInput` (usable nodes with free CPUs and GPUs, running jobs with their time limits,
  the first `max_pending` pending jobs, as bf_max_job_test bounds Slurm's cycle) and the jobs it
  calls startable start on the nodes it chose. This module is the simulator's only dependency on
  the planner. Should the planner raise, the simulation goes on with FCFS only (logged once).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Request:
    job_id: str
    partition: str
    gpus: int
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    time_limit: float
    user: str = ""
    account: str = ""


def shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """GPUs -> (nodes, GPUs per node): up to a node's worth on one node, more as whole-node gangs."""
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    return nodes, math.ceil(gpus / nodes)


@dataclass
class Cycle:
    starts: list[tuple[str, list[int], str]]  # (job id, node indices, "priority" | "backfill")
    top_jobs: set[str]
    policy: str  # what actually planned: "easy" or "fcfs"


class Scheduler:
    def __init__(self, names: list[str], node_partitions: list[tuple[str, ...]], cpus_per_node: int,
                 gpus_per_node: int, partition_max_time: dict[str, int], policy: str = "easy", max_pending: int = 64):
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.node_partitions = node_partitions
        self.cpus = cpus_per_node
        self.gpus = gpus_per_node
        self.max_time = partition_max_time
        self.policy = policy
        self.max_pending = max_pending
        self._warned = False
        self._running_cache: dict[str, object] = {}
        self._pending_cache: dict[str, object] = {}
        self._nodes: list | None = None
        self._node_state: np.ndarray | None = None

    def backfill(self, now: float, free_gpus: np.ndarray, free_cpus: np.ndarray, usable: np.ndarray,
                 running: list[tuple[str, float, float, str, list[tuple[int, int, int]]]],
                 pending: list[Request], reservations=()) -> Cycle | None:
        """One EASY cycle, or None when the policy is FCFS (or the planner failed)."""
        if self.policy != "easy" or not pending:
            return None
        try:
            return self._easy(now, free_gpus, free_cpus, usable, running, pending[: self.max_pending], reservations)
        except Exception:  # the planner must never stop the simulation
            if not self._warned:
                log.exception("backfill planner failed; this simulation schedules FCFS only from now on")
                self._warned = True
            self.policy = "fcfs"
            return None

    def _easy(self, now, free_gpus, free_cpus, usable, running, pending, reservations=()) -> Cycle:
        from dashboard.analysis import planner
        from dashboard.analysis.planner_model import (Allocation, PartitionInfo, PendingJob, PlannerInput,
                                                      PlannerNode, Reservation, RunningJob)

        # PlannerNode objects are immutable: rebuild only those of nodes whose free resources changed
        state = np.stack([free_cpus, free_gpus, usable.astype(np.int32)], axis=1)
        if self._nodes is None or len(self._nodes) != len(self.names):
            changed = range(len(self.names))
            self._nodes = [None] * len(self.names)
        else:
            changed = np.flatnonzero((state != self._node_state).any(axis=1)).tolist()
        fc, fg, us = free_cpus.tolist(), free_gpus.tolist(), usable.tolist()
        for i in changed:
            self._nodes[i] = PlannerNode(self.names[i], self.node_partitions[i], self.cpus, fc[i], gpus_total=self.gpus,
                                         gpus_free=fg[i], usable=us[i], reason="" if us[i] else "drained")
        self._node_state = state
        nodes = tuple(self._nodes)
        run = []
        cache: dict[str, object] = {}
        for job_id, start, limit, part, allocs in running:
            rj = self._running_cache.get(job_id)
            if rj is None:
                rj = RunningJob(job_id, start, limit, tuple(Allocation(self.names[i], c, 0, g) for i, g, c in allocs), part)
            cache[job_id] = rj
            run.append(rj)
        self._running_cache = cache
        resv = tuple(Reservation(r.name, tuple(self.names[i] for i in r.nodes), r.start, r.end, frozenset(r.flags),
                                 frozenset(r.users)) for r in reservations if r.end > now)
        pend = []
        for r in pending:
            pj = self._pending_cache.get(r.job_id)
            if pj is None:
                pj = self._pending_cache[r.job_id] = PendingJob(
                    r.job_id, (r.partition,), r.time_limit, min_nodes=r.nodes, cpus_per_node=r.cpus_per_node,
                    gpus_per_node=r.gpus_per_node, exclusive=r.nodes > 1, user=r.user, account=r.account)
            pend.append(pj)
        parts = tuple(PartitionInfo(p, float(t)) for p, t in self.max_time.items())
        result = planner.plan(PlannerInput(now, nodes, tuple(run), resv, tuple(pend), parts))
        starts, tops = [], set()
        for p in result.partitions:
            if p.top_job is not None:
                tops.add(p.top_job.job_id)
            for s in p.startable:
                starts.append((s.job_id, [self.index[n] for n in s.nodes], s.by))
        for job_id, _, _ in starts:
            self._pending_cache.pop(job_id, None)
        return Cycle(starts, tops, "easy")

    def fcfs(self, free_gpus: np.ndarray, free_cpus: np.ndarray, usable: np.ndarray, pending: list[Request],
             now: float = 0.0, reservations=()) -> Cycle:
        """The main pass; updates free_gpus/free_cpus in place for the jobs it starts. A job does not
        start on a node a (maintenance) reservation takes before the job's time limit is up."""
        starts = []
        in_part = {}
        resv = [r for r in reservations if r.end > now]
        for r in pending:
            mask = in_part.get(r.partition)
            if mask is None:
                mask = in_part[r.partition] = np.array([r.partition in p for p in self.node_partitions]) & usable
            for rv in resv:
                if rv.start < now + r.time_limit:
                    mask = mask.copy()
                    mask[list(rv.nodes)] = False
            if r.nodes == 1:
                ok = np.flatnonzero(mask & (free_gpus >= r.gpus_per_node) & (free_cpus >= r.cpus_per_node))
                if not len(ok):
                    return Cycle(starts, {r.job_id}, "fcfs")
                chosen = [int(ok[np.argmin(free_gpus[ok])])]  # best fit keeps whole nodes for gangs
            else:
                ok = np.flatnonzero(mask & (free_gpus == self.gpus) & (free_cpus == self.cpus))
                if len(ok) < r.nodes:
                    return Cycle(starts, {r.job_id}, "fcfs")
                chosen = [int(i) for i in ok[: r.nodes]]
            for i in chosen:
                free_gpus[i] -= r.gpus_per_node if r.nodes == 1 else self.gpus
                free_cpus[i] -= r.cpus_per_node if r.nodes == 1 else self.cpus
            starts.append((r.job_id, chosen, "priority"))
        return Cycle(starts, set(), "fcfs")
