"""Event-driven replay of an SWF workload under FCFS, EASY or conservative backfilling.

Sources: `SwfJob` records (dashboard.analysis.swf); pure computation, no I/O, no privileges.

Semantics (fixed, so that results can be compared with other simulators):
- processors = the allocated processors (SWF field 5), clipped to the machine size (clipped jobs
  are counted); records whose run time or processor count is not positive are skipped and counted.
- a job runs for its run time but is killed at its requested time: duration = min(run, requested).
  A missing requested time (<= 0) is replaced by the run time (perfect estimate) and counted.
- reservations (EASY's shadow time, conservative's per-job reservations) use the requested time,
  so a running job is expected to end at start + requested time; it never ends later than that.
- jobs are queued in submission order (ties kept in trace order); one scheduling pass per event.
- at equal timestamps submissions come before terminations, and terminations follow the order in
  which the jobs started.
- EASY: start queue heads while they fit; the first that does not fit is the top job, reserved at
  the shadow time (when enough running jobs will have ended by their requested times); a later job
  backfills when it fits now and either ends by the shadow time or uses only processors the top job
  will not need ("extra": free at the shadow time, counting every job expected to end at that instant,
  not only those the top job needs). A submission while a top job waits can only change the new job's fate,
  so that pass checks only the new job: its result is identical to a full pass (the free
  processors, shadow time and extra processors are unchanged, and every earlier rejection still
  holds because time only moved forward).
- conservative: every queued job holds a reservation in an availability profile, made at
  submission at the earliest slot; when a job ends before its requested time the queue is
  compressed in order (each job is removed and re-reserved at the earliest slot, which is never
  later than its old one), and jobs whose reservation is now start. A reserved start is an event of
  its own (after the submissions and terminations at that time): compression can leave a job
  reserved at a time where nothing ends.
- wait = start - submit; bounded slowdown = max(1, (wait + duration) / max(duration, 10));
  utilisation = sum(processors x duration) / (machine processors x makespan);
  makespan = last end - first submission.

Failure modes: a machine size below 1 raises ValueError; an unknown policy raises ValueError.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from itertools import islice
from operator import add, mul
from typing import NamedTuple, Sequence

import numpy as np

from dashboard.analysis.lazy import LazyRecords
from dashboard.analysis.swf import SwfJob

POLICIES = ("fcfs", "easy", "conservative")
BSLD_BOUND_S = 10  # the customary 10 s bound (Feitelson et al., "Theory and practice in parallel job scheduling")


class JobStart(NamedTuple):  # a named tuple: a replay makes one per job, hundreds of thousands
    job_id: int
    submit: int
    start: int
    end: int
    procs: int


@dataclass(frozen=True, slots=True)
class SkipCounts:
    no_run_time: int = 0
    no_processors: int = 0
    clipped_processors: int = 0  # simulated, with fewer processors than the trace says
    requested_time_missing: int = 0  # simulated, with the run time as the estimate
    killed_at_requested_time: int = 0  # simulated, cut short

    def to_json(self) -> dict:
        return {
            "skipped_no_run_time": self.no_run_time,
            "skipped_no_processors": self.no_processors,
            "clipped_processors": self.clipped_processors,
            "requested_time_missing": self.requested_time_missing,
            "killed_at_requested_time": self.killed_at_requested_time,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    policy: str
    procs: int
    jobs: int
    avg_wait_s: float
    avg_bounded_slowdown: float
    utilisation: float
    makespan_s: int
    counts: SkipCounts
    starts: Sequence[JobStart] = field(repr=False)  # a tuple, or the replay's lazily built _Starts
    # job id -> the first start time promised to it (EASY: as top job; conservative: at submission)
    first_reservation: dict[int, int] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "procs": self.procs,
            "jobs": self.jobs,
            "avg_wait_s": round(self.avg_wait_s, 3),
            "avg_bounded_slowdown": round(self.avg_bounded_slowdown, 4),
            "utilisation": round(self.utilisation, 6),
            "makespan_s": self.makespan_s,
            **self.counts.to_json(),
        }

    def starts_csv(self) -> str:
        rows = ["job_id,submit,start,end"]
        rows += [f"{s.job_id},{s.submit},{s.start},{s.end}" for s in self.starts]
        return "\n".join(rows) + "\n"


class _Profile:
    """Free processors as a step function of time: free[i] holds on [times[i], times[i+1])."""

    __slots__ = ("times", "free")

    def __init__(self, now: int, free: int) -> None:
        self.times = [now]
        self.free = [free]

    def trim(self, now: int) -> None:
        i = bisect_right(self.times, now) - 1
        if i > 0:
            del self.times[:i]
            del self.free[:i]

    def _split(self, t: int) -> int:
        i = bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.free.insert(i, self.free[i - 1])
        return i

    def add(self, start: int, end: int, procs: int) -> None:
        """Add `procs` free processors on [start, end) (negative to reserve)."""
        i, j = self._split(start), self._split(end)
        free = self.free
        for k in range(i, j):
            free[k] += procs

    def earliest(self, now: int, procs: int, duration: int) -> int:
        times, free = self.times, self.free
        n = len(times)
        i = max(bisect_right(times, now) - 1, 0)
        while True:
            t = times[i] if times[i] > now else now
            end = t + duration
            k = i
            while k < n and times[k] < end:
                if free[k] < procs:
                    break
                k += 1
            else:
                return t
            i = k + 1  # no start before the end of the segment that was too full

    def compact(self) -> None:
        times, free = [self.times[0]], [self.free[0]]
        for t, f in zip(self.times[1:], self.free[1:]):
            if f != free[-1]:
                times.append(t)
                free.append(f)
        self.times, self.free = times, free


def _column(jobs: Sequence[SwfJob], name: str) -> np.ndarray:
    """One field of every record: the reader's numpy column (SwfJobs), else the records' own values
    in an object array, so that numpy applies Python's arithmetic to whatever numbers they hold."""
    column = getattr(jobs, "column", None)
    if column is not None:
        return column(name)
    values = np.empty(len(jobs), dtype=object)
    values[:] = [getattr(job, name) for job in jobs]
    return values


def _records(jobs: Sequence[SwfJob], procs: int) -> tuple[list, list, list, list, list, SkipCounts]:
    """Apply the documented record rules, a column at a time: job ids, submit times, requested times,
    durations and processors (lists, in submission order; ties keep trace order)."""
    if procs < 1:
        raise ValueError(f"machine size must be at least 1 processor, got {procs}")
    run, size = _column(jobs, "run"), _column(jobs, "alloc_procs")
    no_run = run <= 0
    no_procs = ~no_run & (size <= 0)
    keep = ~(no_run | no_procs)
    run, size = run[keep], size[keep]
    req, submit, job_id = _column(jobs, "req_time")[keep], _column(jobs, "submit")[keep], _column(jobs, "job_id")[keep]
    clipped = size > procs
    size = np.where(clipped, procs, size)
    no_req = req <= 0
    req = np.where(no_req, run, req)
    killed = run > req
    dur = np.where(killed, req, run)
    order = np.argsort(submit, kind="stable")
    counts = SkipCounts(int(no_run.sum()), int(no_procs.sum()), int(clipped.sum()), int(no_req.sum()),
                        int(killed.sum()))
    return (job_id[order].tolist(), submit[order].tolist(), req[order].tolist(), dur[order].tolist(),
            size[order].tolist(), counts)


def prepare(jobs: Sequence[SwfJob], procs: int) -> tuple[list[tuple[int, int, int, int, int]], SkipCounts]:
    """Apply the documented record rules: (job_id, submit, requested, duration, processors) per job."""
    *columns, counts = _records(jobs, procs)
    return list(zip(*columns)), counts


def simulate(jobs: Sequence[SwfJob], procs: int, policy: str = "easy") -> ReplayResult:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    job_ids, submit, req, dur, size, counts = _records(jobs, procs)
    start = [0] * len(submit)
    first_res: dict[int, int] = {}
    if policy == "conservative":
        _run_conservative(submit, req, dur, size, procs, start, first_res)
    else:
        _run_queue(submit, req, dur, size, procs, start, first_res, policy == "easy")
    return _result(policy, procs, job_ids, submit, dur, size, start, counts, first_res)


def _run_queue(submit, req, dur, size, procs, start, first_res, easy):
    """FCFS and EASY. running_exp holds (expected end, start order, job) sorted by expected end."""
    n = len(submit)
    ends: list[tuple[int, int, int]] = []  # heap of (actual end, start order, job)
    running_exp: list[tuple[int, int, int]] = []
    queue: list[int] = []
    free = procs
    seq = 0
    i = 0
    shadow = extra = 0  # valid while queue is non-empty (EASY), see the module docstring

    def launch(j, now):
        nonlocal seq
        start[j] = now
        heapq.heappush(ends, (now + dur[j], seq, j))
        insort(running_exp, (now + req[j], seq, j))
        seq += 1

    while i < n or ends:
        if i < n and (not ends or submit[i] <= ends[0][0]):
            now = submit[i]
            j = i
            i += 1
            p = size[j]
            if queue:
                if easy and p <= free and (now + req[j] <= shadow or p <= extra):
                    launch(j, now)
                    free -= p
                    if now + req[j] > shadow:
                        extra -= p
                else:
                    queue.append(j)
                continue
            if p <= free:
                launch(j, now)
                free -= p
                continue
            queue.append(j)
        else:
            now, s, j = heapq.heappop(ends)
            free += size[j]
            del running_exp[bisect_left(running_exp, (start[j] + req[j], s, j))]
            if not queue:
                continue
        # full pass: queue heads, then (EASY) the top job's reservation and backfilling
        h = 0
        nq = len(queue)
        while h < nq and size[queue[h]] <= free:
            j = queue[h]
            launch(j, now)
            free -= size[j]
            h += 1
        if h:
            del queue[:h]
        if not queue or not easy:
            continue
        top = queue[0]
        need = size[top]
        # Every job expected to end at the shadow time frees its processors then, not only those the
        # top job needs: the rest are "extra" (leaving them out refused jobs that fit, issue 14).
        avail = free
        shadow = -1
        for exp_end, _, r in running_exp:
            if shadow >= 0 and exp_end != shadow:
                break
            avail += size[r]
            if shadow < 0 and avail >= need:
                shadow = exp_end
        extra = avail - need
        if top not in first_res:
            first_res[top] = shadow
        if free == 0:
            continue
        # Most passes start nothing: the queue is only rewritten when one does (the scan itself is
        # the replay's main cost on a long queue).
        started = []
        for q, j in enumerate(islice(queue, 1, None), 1):
            p = size[j]
            if p <= free and (now + req[j] <= shadow or p <= extra):
                launch(j, now)
                free -= p
                if now + req[j] > shadow:
                    extra -= p
                started.append(q)
                if free == 0:
                    break
        for q in reversed(started):
            del queue[q]


def _run_conservative(submit, req, dur, size, procs, start, first_res):
    """Conservative backfilling. `wake` holds (reserved start, job): a reservation can land on a time
    where nothing ends (the end of a later job's old reservation that compression then moved), so
    each reserved start is an event of its own, after the submissions and terminations at that time."""
    n = len(submit)
    ends: list[tuple[int, int, int]] = []
    wake: list[tuple[int, int]] = []
    queue: list[int] = []
    res = [0] * n  # current reservation of each queued job
    profile = _Profile(submit[0] if n else 0, procs)
    seq = 0
    i = 0
    while i < n or ends or wake:
        t_sub = submit[i] if i < n else None
        t_end = ends[0][0] if ends else None
        if t_sub is not None and (t_end is None or t_sub <= t_end) and (not wake or t_sub <= wake[0][0]):
            now = submit[i]
            j = i
            i += 1
            profile.trim(now)
            t = profile.earliest(now, size[j], req[j])
            profile.add(t, t + req[j], -size[j])
            res[j] = first_res[j] = t
            if t == now:
                start[j] = now
                heapq.heappush(ends, (now + dur[j], seq, j))
                seq += 1
            else:
                queue.append(j)
                heapq.heappush(wake, (t, j))
            continue
        if t_end is not None and (not wake or t_end <= wake[0][0]):
            now, _, j = heapq.heappop(ends)
            profile.trim(now)
            expected = start[j] + req[j]
            if now < expected:
                profile.add(now, expected, size[j])
                for q in queue:  # compression in queue order; a job never moves later
                    old = res[q]
                    profile.add(old, old + req[q], size[q])
                    t = profile.earliest(now, size[q], req[q])
                    profile.add(t, t + req[q], -size[q])
                    if t != old:
                        res[q] = t
                        heapq.heappush(wake, (t, q))
                if len(profile.times) > 4 * (len(queue) + len(ends)) + 64:
                    profile.compact()
        else:
            now, _ = heapq.heappop(wake)
            while wake and wake[0][0] == now:
                heapq.heappop(wake)
        if not queue:
            continue
        kept = []
        for q in queue:
            if res[q] == now:
                start[q] = now
                heapq.heappush(ends, (now + dur[q], seq, q))
                seq += 1
            else:
                kept.append(q)
        queue = kept


class _Starts(LazyRecords):
    """The per-job starts of a replay, made into JobStart records when first read: building 200,000
    named tuples cost more than replaying the trace, and the summary needs none of them."""

    __slots__ = ("_cols",)

    def __init__(self, job_ids, submit, start, dur, size) -> None:
        super().__init__()
        self._cols = (job_ids, submit, start, dur, size)

    def _raw_len(self) -> int:
        return len(self._cols[0])

    def _build(self) -> tuple:
        job_ids, submit, start, dur, size = self._cols
        self._cols = ((),)
        new = tuple.__new__
        return tuple(new(JobStart, (j, u, s, s + d, p)) for j, u, s, d, p in zip(job_ids, submit, start, dur, size))


def _result(policy, procs, job_ids, submit, dur, size, start, counts, first_res) -> ReplayResult:
    n = len(job_ids)
    total_bsld = 0.0
    for s, u, d in zip(start, submit, dur):
        x = (s - u + d) / (d if d > BSLD_BOUND_S else BSLD_BOUND_S)
        total_bsld += x if x > 1.0 else 1.0
    makespan = max(0, max(map(add, start, dur))) - submit[0] if n else 0
    work = sum(map(mul, size, dur))
    return ReplayResult(
        policy=policy,
        procs=procs,
        jobs=n,
        avg_wait_s=(sum(start) - sum(submit)) / n if n else 0.0,
        avg_bounded_slowdown=total_bsld / n if n else 0.0,
        utilisation=work / (procs * makespan) if makespan > 0 else 0.0,
        makespan_s=makespan,
        counts=counts,
        starts=_Starts(job_ids, submit, start, dur, size),
        first_reservation={job_ids[k]: t for k, t in first_res.items()},
    )
