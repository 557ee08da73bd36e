"""The demo's scripted scene (`SimConfig(showcase=True)`): what a busy GPU cluster always has, placed
so that the first minute of `gangwatch demo` shows every part of the product.

On top of the workload model (which the demo runs above capacity), from the start of the history:
- big gangs waiting (64, 32 GPUs, another 64 later), from accounts with little recent usage, so
  they head the queue: the backfill planner reserves nodes for the first, and the windows before
  its reserved start are where short jobs backfill;
- pipelines `preprocess -> train -> evaluate` chained with `--dependency=afterok`: one completes its
  preprocessing in the history, one fails it (its train can never start: DependencyNeverSatisfied),
  one is submitted during the history;
- a batch of long one-GPU jobs from an account with little usage (they rank high), then a
  hyperparameter sweep of short one-GPU jobs from the account with the most (it ranks last):
  beyond the first `max_pending_planned` jobs (Slurm's bf_max_job_test), which is all the simulated
  scheduler's backfill looks at. The long jobs cannot use the reserved nodes before the
  reservation; the backfill plan over the whole queue finds sweep jobs that could start there now;
- a maintenance reservation on a few nodes, starting two hours after the history ends;
- a job suspended by an operator (`scontrol suspend`) half-way through the history, for four hours;
- a badly placed job: 4 GPUs given first-fit after a 2-GPU job on the same node, so GPUs 2-5, two
  on each CPU socket (NUMA node), as Slurm does without GPU-to-core binding in gres.conf.

Every draw comes from the simulation's `rng_show`, so the rest of the simulation is as without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sched import shape

GANG_ACCOUNT = "speech"  # little recent usage: its gangs rank first
BATCH_ACCOUNT = "research"  # ranks after the gangs, before the other accounts
SWEEP_ACCOUNT = "vision"  # the most recent usage: ranks last
WAVES = 6  # a gang and a sweep each hour of the live demo for its first hours
SUSPEND_AT = 0.5  # of the history
SUSPEND_FOR = 4 * 3600.0
RESERVATION_AFTER = 2 * 3600.0  # after the end of the history
RESERVATION_FOR = 4 * 3600.0
SWEEP_JOBS = 48


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: tuple[int, ...]
    start: float
    end: float
    flags: tuple[str, ...] = ("MAINT", "SPEC_NODES")
    users: tuple[str, ...] = ("root",)


def _job(sim, name: str, user: str, gpus: int, duration: float, limit: float, submit: float,
         account: str | None = None, fails: bool = False):
    from .engine import ACCOUNTS, JobRec

    gpus = min(gpus, sim.capacity_gpus)
    nodes, gpn = shape(gpus, sim.g)
    job = JobRec(sim.next_job_id, name, user, account or ACCOUNTS[int(user[4:]) % len(ACCOUNTS)], "gpu", gpus, nodes,
                 gpn, sim.cluster.cfg.cpus_per_node if nodes > 1 else 16 * gpn, submit, float(limit), float(duration),
                 fails=fails)
    sim.next_job_id += 1
    sim.jobs[job.job_id] = job
    return job


def _user_of(account: str) -> str:
    from .engine import ACCOUNTS, USERS

    return next(u for u in USERS if ACCOUNTS[int(u[4:]) % len(ACCOUNTS)] == account)


def pipeline(sim, tag: str, submit: float, pre_running_since: float | None = None, pre_fails: bool = False,
             pre_seconds: float = 1200.0, train_gpus: int = 8, free: np.ndarray | None = None) -> tuple:
    """preprocess -> train -> evaluate, each afterok on the one before. With `pre_running_since`, the
    preprocessing already runs (placed on `free`) and ends `pre_seconds` after that, failed or not."""
    user = _user_of("nlp")
    pre = _job(sim, f"{tag}-preprocess", user, 1, pre_seconds, 3600, submit, fails=pre_fails)
    train = _job(sim, f"{tag}-train", user, train_gpus, 10 * 3600, 12 * 3600, submit)
    ev = _job(sim, f"{tag}-evaluate", user, 1, 900, 1800, submit)
    if pre_running_since is not None and free is not None:
        ok = np.flatnonzero(free >= 1)
        if len(ok):
            i = int(ok[np.argmin(free[ok])])
            free[i] -= 1
            sim._start(pre, [i], pre_running_since, count=False)
    if pre.state == "PENDING":
        sim.pending.append(pre)
    sim.depend(train, pre)
    sim.depend(ev, train)
    sim.pending += [train, ev]
    return pre, train, ev


def _submit_gang(sim, t: float, name: str, gpus: int, account: str, ago: float = 0.0) -> None:
    job = _job(sim, name, _user_of(account), gpus, 14 * 3600, 24 * 3600, t - ago, account)
    sim.pending.append(job)
    sim._dirty = True


def _batch(sim, t: float, name: str, account: str, count: int, duration: tuple[float, float], limit: float) -> None:
    user = _user_of(account)
    for _ in range(count):
        sim.pending.append(_job(sim, name, user, 1, float(sim.rng_show.uniform(*duration)), limit, t))
    sim._dirty = True


def _suspend_one(sim, t: float) -> None:
    """An operator suspends a running single-node job of 4+ GPUs (the largest such, then the lowest id)."""
    faulted = {af.job for af in sim.active}
    cands = [j for j in sim.running.values() if j.state == "RUNNING" and j.nodes_n == 1 and j.gpus >= 4
             and j.job_id not in faulted and j.planned_end > t + 1800]
    if cands:
        job = min(cands, key=lambda j: (-j.gpus, j.job_id))
        sim.suspend(job, t, SUSPEND_FOR)


def _badly_placed(sim, free: np.ndarray) -> None:
    empty = np.flatnonzero(free == sim.g)
    if sim.g < 6 or not len(empty):
        return
    i = int(empty[0])
    first = _job(sim, "ddp-small", _user_of("rl"), 2, 9 * 3600, 12 * 3600, sim.t0 - 7200)
    sim._start(first, [i], sim.t0 - 3600, count=False)
    job = _job(sim, "whisper-ft", _user_of("rl"), 4, 10 * 3600, 14 * 3600, sim.t0 - 3600)
    sim._start(job, [i], sim.t0 - 1800, count=False)  # GPUs 2-5: the first free ones
    free[i] -= 6


def _later(sim, at: float, action) -> None:
    import heapq

    heapq.heappush(sim._scripted, (at, len(sim._scripted), action))


def seed(sim, free: np.ndarray) -> int:
    """Set the scene at the start of the history; returns the GPUs it occupies (out of `free`)."""
    t0, hist = sim.t0, sim.cfg.history_seconds
    before = int(free.sum())
    for k, (gpus, name) in enumerate(((64, "gpt-70b-pretrain"), (32, "llama-30b"))):
        _submit_gang(sim, t0, name, gpus, GANG_ACCOUNT, ago=5400 - 1800 * k)
    _badly_placed(sim, free)
    pipeline(sim, "bert-large", t0 - 1800, pre_running_since=t0 - 600, pre_seconds=1200, free=free)
    pipeline(sim, "wav2vec", t0 - 1800, pre_running_since=t0 - 900, pre_seconds=1200, pre_fails=True,
             train_gpus=16, free=free)
    _later(sim, t0 + 0.6 * hist, lambda s, t: pipeline(s, "vit-huge", t, train_gpus=8))
    for k in range(WAVES):
        at = t0 + 0.8 * hist + 3600 * k
        _later(sim, at, lambda s, t, k=k: _submit_gang(s, t, ("moe-pretrain", "llama-30b")[k % 2], (64, 32)[k % 2],
                                                      GANG_ACCOUNT))
        _later(sim, at + 180, lambda s, t: _batch(s, t, "sweep-lr", SWEEP_ACCOUNT, SWEEP_JOBS, (1200, 3000), 3600))
    _later(sim, t0 + SUSPEND_AT * hist, _suspend_one)
    _later(sim, t0 + 0.78 * hist, lambda s, t: _batch(s, t, "sd-xl-finetune", BATCH_ACCOUNT, s.cfg.max_pending_planned,
                                                      (10 * 3600, 20 * 3600), 24 * 3600))
    n_debug = max(1, sim.n // 32)
    k = max(2, sim.n // 16)
    nodes = tuple(range(max(0, sim.n - n_debug - k), max(0, sim.n - n_debug))) or (0,)
    start = t0 + hist + RESERVATION_AFTER
    sim.reservations.append(Reservation("maint_ib_firmware", nodes, start, start + RESERVATION_FOR))
    return before - int(free.sum())
