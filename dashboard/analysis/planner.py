"""Gang-aware EASY backfill planner and "why is it waiting" for every pending job.

Sources: a `PlannerInput` (dashboard.analysis.planner_model): usable nodes and their free CPUs,
memory and GPUs, running jobs with their time limits, reservations, partitions, and the pending jobs
in the scheduler's priority order. Pure computation: no I/O, no privileges, no Dash.

Semantics (EASY, one reservation per partition, gang-aware):
- Jobs are taken in priority order. Held jobs, jobs with an unsatisfied dependency, jobs whose begin
  time has not come, and jobs that can never run (no such partition, GPU type, feature or
  reservation; larger than the partition; over its time limit) are not planned; they get reasons.
- In each partition, eligible jobs that fit now (all their nodes at once) start "by priority". The
  first that does not fit is the partition's top job: it is reserved at the earliest time (the
  shadow time) when enough nodes are free for its whole time limit, on the nodes that free up last
  before then (so that idle nodes stay open for backfilling).
- A later job is startable ("backfill") when it fits now for its whole time limit without touching
  the resources the top jobs' reservations hold: it ends before the shadow time, or it runs on
  nodes/resources the top job does not need. Startable jobs are committed, so later jobs see less.
- Running jobs free their resources at start + time limit (what Slurm plans with); a running job past
  its limit is expected to free them now. Drained, down and other unusable nodes are never used.
  A reservation blocks its nodes from its start to its end for every job that does not request it
  (maintenance reservations included); a job that requests a reservation it may use runs only on
  the reservation's nodes and not before it starts.
- Expected start of a waiting job: the earliest time it fits in the plan (running jobs' time limits,
  the startable jobs, the top jobs' reservations). Jobs ahead of it other than the top jobs are not
  reserved (EASY), so this is the earliest it can start, labelled source "gangwatch".
- `--gpus` per job: nodes = max(min nodes, ceil(GPUs / most GPUs on one node)), and each node gets
  ceil(GPUs / nodes). CPUs per node: cpus_per_node, else ceil(tasks / nodes) x cpus_per_task.
- A multi-partition job starts in the first of its partitions where it fits; otherwise it becomes
  the top job of the first of them that has none, else it waits in the first.
- Windows (Maui's showbf): usable nodes with free CPUs now, grouped by (free GPUs, free CPUs, until),
  where until is the start of the first reservation or top-job hold on the node; taken after the top
  jobs' reservations and before backfilled jobs use them.
- What-if: the longest whole-minute time limit (>= 1 min) under which the job would fit now.
- Ties: every running job expected to end at the shadow time frees its share then; a reservation
  takes from a node what it has when the reservation starts, not what it has now.
- With `PlannerInput.config` (Slurm's scheduler, see planner_model.BackfillConfig and `_Policy`):
  every job the cycle tests that cannot start now is reserved (whole nodes, as Slurm's backfill
  plans), within bf_window, bf_max_job_test/_part/_user and bf_min_prio_reserve; nodes are chosen
  as select/cons_tres does (node weight, then runs of consecutive nodes); sched/builtin never
  backfills. QOS limits (`PlannerInput.qos`) hold jobs in both modes. Nodes Slurm marked PLANNED
  are taken first by reservations. A reservation's start and nodes follow backfill.c's search and
  cons_tres's will-run test (`_Cluster.slurm_earliest`: batches of running jobs, reservations kept
  rounded to bf_resolution, later_start retries as backfill.c's walk of its node map sets them, and
  no reservation at all where that walk finds no later_start), and a top job's start is the one the
  next cycle reports, searched again from now with the jobs backfilled now running (`_next_cycle`).
- Licenses (`PlannerInput.licenses`, free now): a job that needs more than are free is blocked.
- Features: every one of `features` on each node, and one of `feature_alternatives` (a|b&c).

How it stays fast (10,000 jobs on 4,096 nodes in tens of milliseconds, bench/bench_planner.py): the
cyclic GC is paused while a plan is made; the nodes fall into a few classes (partitions, GPU type,
features, totals), against which a request's size, type and feature checks run once per class and
request shape; "fits now" reads one order of the nodes without reservation or hold per partition
(bucketed by weight and free GPUs, each bucket sorted by free CPUs, memory and name), shared by
every request and kept up to date by each start and hold, while the few other nodes are checked per
time limit; a request that waits is known to wait for the rest of the pass, and a queued job whose
fields match one already known to wait or to be blocked shares its record; a start writes a node's
release into its list and the free arrays only when they are next read; a node's first time with
room comes from the releases as flat sorted arrays (running sums per node) where every release adds
room, else from per-partition release matrices, with the few nodes under a reservation or hold
checked one by one; windows are grouped with one stable sort; the `why` rows are grouped by
partition when first read, and a waiting job's reasons are computed once per distinct (partition,
request, earliest start), when its row is first read. Slurm mode (1,200 jobs in about a second): a node's room only grows, so room at t
is "first time with room <= t" (`_first_room`); the earliest-start check counts the fitting nodes
for all candidate times at once (`_fit_counts`); the will-run test's batches are binary searches
over the sorted ends of the jobs on its nodes (`_job_index`).

Failure modes: none raised for any well-typed input; unknown nodes in running jobs or reservations
are ignored, a snapshot with every node down gives no windows, no startable jobs and a reason on
every job.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from heapq import merge
from itertools import chain, islice, repeat
from itertools import compress as select
from operator import attrgetter, itemgetter, le
from typing import NamedTuple, Sequence

import numpy as np

from collectors.slurm.hostlist import compress
from dashboard.analysis.gcpause import gc_paused
from dashboard.analysis.lazy import LazyRecords
from dashboard.analysis.planner_model import (
    DEPENDENCY_BLOCKING,
    PendingJob,
    PlannerInput,
    Reservation,
    format_duration,
    slurm_reason_text,
)

SOURCE = "gangwatch"
# Slurm's --time has minute granularity: a what-if shorter than a minute is not a request users can make.
MIN_WHAT_IF_S = 60
INF = math.inf


# ------------------------------------------------------------------------------------------ output

def _t(value: float | None) -> float | None:
    return None if value is None or value == INF else round(value, 3)


@dataclass(frozen=True, slots=True)
class Window:
    nodes: int
    gpus_per_node: int
    cpus: int  # free CPUs on each of these nodes
    until: float | None  # None: no reservation limits it
    names: tuple[str, ...] | str  # the nodes, or their hostlist; compressed when read (few plans are)

    @property
    def node_list(self) -> str:
        return self.names if type(self.names) is str else compress(self.names)

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "cpus": self.cpus,
                "until": _t(self.until), "node_list": self.node_list}


@dataclass(frozen=True, slots=True)
class TopJob:
    job_id: str
    shadow_time: float
    nodes: tuple[str, ...]

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "shadow_time": _t(self.shadow_time), "nodes": list(self.nodes),
                "node_list": compress(self.nodes), "source": SOURCE}


@dataclass(frozen=True, slots=True)
class Startable:
    job_id: str
    nodes: tuple[str, ...]
    end: float
    by: str  # "priority": it is ahead of the top job; "backfill": behind it, without delaying it

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "nodes": list(self.nodes), "node_list": compress(self.nodes),
                "end": _t(self.end), "by": self.by}


@dataclass(frozen=True, slots=True)
class Reason:
    code: str
    message: str
    severity: str = "info"  # info | warning | error

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message, "severity": self.severity}


@dataclass(frozen=True, slots=True)
class WhatIf:
    time_limit_s: int
    nodes: tuple[str, ...]
    message: str

    def to_json(self) -> dict:
        return {"time_limit_s": self.time_limit_s, "time_limit": format_duration(self.time_limit_s),
                "nodes": list(self.nodes), "node_list": compress(self.nodes), "message": self.message,
                "source": SOURCE}


class JobWhy(NamedTuple):
    """Why one pending job waits. Slurm's own view (reason, priority, squeue --start) comes from `job`.

    An immutable record like the frozen dataclasses here, but a named tuple: /api/v1/backfill reads
    every job's row at once, and a frozen dataclass' __init__ (one object.__setattr__ a field) cost
    three times the rest of the row, 30 ms for 10,000 jobs."""

    job: PendingJob
    partition: str
    # 1-based position among the jobs of its partition that can ever run, in priority order; None
    # for a job that never can (a never-runnable job ahead must not push the top job to "rank 2")
    rank: int | None
    state: str  # startable | top | waiting | blocked | never
    reasons: tuple[Reason, ...]
    expected_start: float | None = None
    expected_nodes: tuple[str, ...] = ()
    what_if: WhatIf | None = None

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def to_json(self) -> dict:
        j = self.job
        return {
            "job_id": j.job_id, "partition": self.partition, "rank": self.rank, "state": self.state,
            "reasons": [r.to_json() for r in self.reasons],
            "slurm_reason": j.slurm_reason, "slurm_reason_text": slurm_reason_text(j.slurm_reason),
            "priority": j.priority, "priority_factors": dict(j.priority_factors),
            "dependency": {"state": j.dependency, "text": j.dependency_text},
            "expected_start": {"time": _t(self.expected_start), "nodes": list(self.expected_nodes),
                               "source": SOURCE},
            "slurm_expected_start": {"time": _t(j.slurm_expected_start), "source": "slurm"},
            "what_if": self.what_if.to_json() if self.what_if else None,
        }


_tuple_new = tuple.__new__  # JobWhy from a row of its fields in order, without a call to its __new__


class _Whys(LazyRecords):
    """A partition's `why` records, built when first read: a plan of 10,000 pending jobs is read a
    few rows at a time (the Queue page, one job's page), and building every record up front cost more
    than the plan itself. A row is JobWhy's fields in order (a tuple), or a list that `resolve`
    completes from the finished plan (a waiting job's reasons, expected start and what-if). The rows
    themselves come from `rows()`, which groups the whole queue by partition on its first call."""

    __slots__ = ("_rows", "_resolve")

    def __init__(self, rows, resolve=None) -> None:
        super().__init__()
        self._rows = rows  # a sequence of rows, or a callable returning it
        self._resolve = resolve

    def _raw(self):
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    def _row(self, r) -> JobWhy:
        return _tuple_new(JobWhy, r) if type(r) is tuple else self._resolve(r)

    def _raw_len(self) -> int:
        return len(self._raw())

    def _build(self) -> tuple:
        rows, self._rows = self._raw(), ()
        with gc_paused():
            return tuple(self._row(r) for r in rows)

    def find(self, job_id: str) -> JobWhy | None:
        if self._built is None:
            for r in self._raw():
                if r[0].job_id == job_id:
                    return self._row(r)
            return None
        return next((w for w in self._built if w.job_id == job_id), None)


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    name: str
    exists: bool
    nodes_total: int
    nodes_usable: int
    top_job: TopJob | None
    windows: tuple[Window, ...]
    startable: tuple[Startable, ...]
    why: Sequence[JobWhy]  # a tuple, or the planner's lazily built _Whys

    def to_json(self) -> dict:
        return {"partition": self.name, "exists": self.exists, "nodes_total": self.nodes_total,
                "nodes_usable": self.nodes_usable,
                "top_job": self.top_job.to_json() if self.top_job else None,
                "windows": [w.to_json() for w in self.windows],
                "startable": [s.to_json() for s in self.startable],
                "why": [w.to_json() for w in self.why]}


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    generated_at: float
    partitions: tuple[PartitionPlan, ...]
    policy: str = "easy"  # easy | slurm-backfill | slurm-builtin
    scheduler: dict | None = None  # the Slurm parameters planned with, and those not modelled
    # with a deadline: {"deadline_s", "not_planned_in_time": job ids left unplanned}; the set grows while
    # the waiting rows are first read, so it stays a mutable set inside the frozen plan
    deadline: dict | None = None

    @property
    def not_planned_in_time(self) -> int:
        """How many jobs the deadline left unplanned (0 without a deadline, or when none was hit)."""
        return len(self.deadline["not_planned_in_time"]) if self.deadline else 0

    def partition(self, name: str) -> PartitionPlan:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)

    def why(self, job_id: str) -> JobWhy:
        for p in self.partitions:
            got = p.why.find(job_id) if isinstance(p.why, _Whys) else next(
                (w for w in p.why if w.job_id == job_id), None)
            if got is not None:
                return got
        raise KeyError(job_id)

    def to_json(self) -> dict:
        parts = [p.to_json() for p in self.partitions]  # first: reading the rows can hit the deadline
        doc = {"generated_at": _t(self.generated_at), "source": SOURCE, "policy": self.policy,
               "scheduler": self.scheduler, "partitions": parts}
        if self.deadline is not None:
            doc["deadline"] = {"deadline_s": self.deadline["deadline_s"],
                               "not_planned_in_time": self.not_planned_in_time}
        return doc


# ---------------------------------------------------------------------------------------- internal

# The fields of a pending job that decide its request in a partition (the memo key of `request`), and
# those of them that decide its shape (all but the time limit; the memo key of `_shape`). _plan's
# fast-path key reads the same fields inline: a field added here must be added there too.
_SHAPE_NAMES = ("reservation", "gpu_type", "features", "feature_alternatives", "min_nodes", "gpus_per_node",
                "gpus_per_job", "cpus_per_node", "tasks", "cpus_per_task", "mem_per_node_mb", "exclusive")
_REQUEST_FIELDS = attrgetter("time_limit_s", *_SHAPE_NAMES)
_SHAPE_FIELDS = attrgetter(*_SHAPE_NAMES)


@dataclass(frozen=True, slots=True, eq=False)
class _Req:
    """A job's request in one partition, normalised per node. Made only by `_Cluster.request`, which
    returns one object per distinct request, so identity (a cheap hash) keys the memo tables."""

    nodes: int
    cpus: int
    mem: int
    gpus: int
    exclusive: bool
    duration: float
    gpu_type: str | None
    features: frozenset
    resv: int  # index of the reservation it runs in, -1 for none


class _Arrays(NamedTuple):
    """A partition's usable nodes over time: row r is node pos[r]; column k its k-th event."""

    pos: np.ndarray  # node indices
    times: np.ndarray  # (n, K): now, then release times ascending, padded with inf
    cpus: np.ndarray  # (n, K): free after that event (cumulative)
    mem: np.ndarray
    gpus: np.ndarray
    cpus_total: np.ndarray
    mem_total: np.ndarray
    gpus_total: np.ndarray
    # every release adds room (no negative allocation in the input): a node's room only grows over
    # time, so "room at t" is "first time with room <= t" (see _Cluster._first_room)
    monotone: bool


class _Cluster:
    def __init__(self, inp: PlannerInput) -> None:
        self.now = now = float(inp.now)
        # list comprehensions read slots through the interpreter's specialised attribute loads, about
        # twice as fast as map(attrgetter(...)) here
        names = [n.name for n in inp.nodes]
        index = dict(zip(names, range(len(names))))
        if len(index) == len(names):
            nodes = inp.nodes  # read only: no copy (a copy is one more list for the collector to scan)
        else:  # a name listed twice: the first record counts
            first: dict[str, object] = {}
            for node in inp.nodes:
                first.setdefault(node.name, node)
            nodes, names = list(first.values()), list(first)
            index = {name: i for i, name in enumerate(names)}
        self.nodes = nodes
        self.names: list[str] = names
        self.index: dict[str, int] = index
        self.usable = [n.usable for n in nodes]
        self.weight = [n.weight for n in nodes]
        self.planned = [n.planned for n in nodes]
        self.any_planned = any(self.planned)
        self.slurm = inp.config is not None  # plan as Slurm's sched/backfill (see _Policy)
        self.resolution = float(inp.config.bf_resolution_s) if inp.config is not None else 0.0
        totals = [[n.cpus_total for n in nodes], [n.mem_total_mb for n in nodes], [n.gpus_total for n in nodes]]
        free = [[n.cpus_free for n in nodes], [n.mem_free_mb for n in nodes], [n.gpus_free for n in nodes]]
        # free never above total (a snapshot taken mid-update must not invent resources), never below 0
        (self.ct, self.mt, self.gt, self.cf, self.mf, self.gf), self._totals, free_now = _clamped_columns(totals, free)
        # the free resources as arrays too, kept up to date by commit (the windows, the first times
        # with room and the release matrices read them)
        self.free = list(free_now)
        self._free_stale: list[int] = []  # nodes commit changed since the arrays were last read
        # every allocation of a running job at once, field by field (C-level loops over the records):
        # its node (-1: unknown, ignored), and its job's end, which frees it
        allocs = [job.allocations for job in inp.running]
        per_job = np.fromiter(map(len, allocs), np.int64, count=len(allocs))
        flat = list(chain.from_iterable(allocs))
        on = np.fromiter(map(index.get, [a.node for a in flat], repeat(-1)), np.int64, count=len(flat))
        known = on >= 0
        ends = np.maximum(np.fromiter([job.expected_end for job in inp.running], float, count=len(allocs)), now)
        self.releases = _Releases(len(nodes), on[known], np.repeat(ends, per_job)[known], *(
            np.fromiter(v, np.int64, count=len(flat))[known] for v in ([a.cpus for a in flat], [a.mem_mb for a in flat],
                                                                      [a.gpus for a in flat])))
        # the running jobs' ends and nodes, and (end, nodes) of each job started in the plan: the
        # will-run test's list (see _job_index)
        bounds = np.concatenate(([0], np.cumsum(known, dtype=np.int64)))[np.concatenate(([0], np.cumsum(per_job)))]
        self._running = (ends, on[known], bounds)
        self.started: list[tuple[float, list[int]]] = []
        self.commits = 0  # jobs started in this plan: the release matrices change only then
        self._ends_index: tuple = (-1,)
        # a node's holds and reservations: most nodes have none and share one empty tuple; a list is
        # made for a node when it gets its first
        self.holds: list[list[tuple[float, float, int, int, int, str]]] = [()] * len(nodes)
        self.hold_seq: dict[str, int] = {}  # job id -> the order its hold was made in
        self.hold_list: list[tuple[float, float, str, frozenset]] = []  # (start, end, job, nodes), in that order
        # the node map of every hold so far, kept up to date hold by hold (see _slots): [holds applied,
        # slot beginnings ascending, the nodes held in each slot (bitmaps, see _node_space), whether
        # any hold ends after now]
        self._map: list = [0, [self.now], [0], False]
        self._hold_flat: tuple[list, list, list] = ([], [], [])  # every hold's (node, start, end), one per node
        self._held = np.zeros(len(nodes), dtype=bool)  # nodes with a hold
        self.reservations: list[Reservation] = list(inp.reservations)
        self.resv_index = {r.name: k for k, r in enumerate(self.reservations)}
        self.blocks: list[list[tuple[float, float, int]]] = [()] * len(nodes)
        reserved: set[int] = set()
        for k, r in enumerate(self.reservations):
            if r.end <= now:
                continue
            for name in r.nodes:
                i = self.index.get(name)
                if i is not None:
                    self.blocks[i] = [*self.blocks[i], (r.start, r.end, k)]
                    reserved.add(i)
        # nodes share a few classes (partition list, GPU type, features, totals): the nodes of each
        # distinct class at once (one dict operation per node; the node's partitions below, the GPU
        # type and feature matching of requests (_codes) and their size checks (_matching) are then
        # found by its class's number)
        code: dict[tuple, int] = {}
        node_code = [code.setdefault((n.partitions, n.gpu_type, n.features, n.cpus_total, n.mem_total_mb,
                                      n.gpus_total), len(code)) for n in nodes]
        distinct = list(code)
        codes = np.fromiter(node_code, np.int64, count=len(node_code))
        self.part_nodes: dict[str, list[int]] = {}
        class_totals = []  # (CPUs, memory, GPUs) of each class, as clamped above
        for k, (ps, *_) in enumerate(distinct):
            members = np.flatnonzero(codes == k).tolist()
            class_totals.append((self.ct[members[0]], self.mt[members[0]], self.gt[members[0]]))
            for p in ps:
                self.part_nodes.setdefault(p, []).extend(members)
        self._node_class = (distinct, codes, class_totals)
        for p in self.part_nodes:
            self.part_nodes[p].sort(key=self.names.__getitem__)
        self.part_usable = {p: list(select(idx, map(self.usable.__getitem__, idx)))
                            for p, idx in self.part_nodes.items()}
        self.part_info = {p.name: p for p in inp.partitions}
        for p in self.part_info:
            self.part_nodes.setdefault(p, [])
            self.part_usable.setdefault(p, [])
        # A partition's version changes whenever one of its nodes does: it keys the memo tables.
        self.version = dict.fromkeys(self.part_nodes, 0)
        # the marked nodes of p changed by a commit or hold, in order: fit_now re-checks those changed
        # since it last looked (its memo keeps how many it had seen)
        self.changes: dict[str, list[int]] = {p: [] for p in self.part_nodes}
        self._fit_memo: dict = {}
        self._bp_memo: dict = {}
        self._allowed_memo: dict = {}
        self._arrays_memo: dict = {}
        self._stale: dict[str, set[int]] = {p: set() for p in self.part_nodes}  # rows of arrays(p) to rewrite
        self._request_memo: dict = {}
        self._partition_request_memo: dict = {}
        self._shape_memo: dict = {}
        once = [tuple(dict.fromkeys(c[0])) for c in distinct]  # a node's partitions, each once
        self.node_parts = list(map(once.__getitem__, node_code))
        # Nodes whose future is not "only releases": a reservation or a top job's hold touches them.
        self.reserved_nodes = sorted(reserved)
        self.marked = set(self.reserved_nodes)
        self.max_gpus = max(self.gt, default=0)
        # "Fits now" over the plain nodes (usable, unmarked, some CPU free): per partition, per (node
        # weight, free GPUs), those nodes as (free CPUs, free memory, name, index), sorted; fit_now's
        # order, shared by every request. Made per GPU count when a request first needs it (see
        # _plain_fits), kept up to date by commit and hold.
        self._buckets: dict[str, dict[tuple, list]] = {}
        self._built: dict[str, set[int]] = {}
        self._marked_of: dict[str, set[int]] = {}  # see _marked_in

    # --- requests and static checks -----------------------------------------------------------

    def request(self, job: PendingJob, p: str) -> _Req | Reason:
        key = (p, _REQUEST_FIELDS(job), (job.user, job.account) if job.reservation else None)
        got = self._partition_request_memo.get(key)
        if got is None:
            got = self._partition_request_memo[key] = self._request(job, p)
        return got

    def _request(self, job: PendingJob, p: str) -> _Req | Reason:
        info = self.part_info.get(p)
        if info is not None and info.max_time_s is not None and job.time_limit_s > info.max_time_s:
            return Reason("too_large", f"its time limit {format_duration(job.time_limit_s)} exceeds partition "
                          f"{p}'s limit {format_duration(info.max_time_s)}", "error")
        # Requests that differ only in their time limit (most of a queue) share the rest of the checks
        key = (p, _SHAPE_FIELDS(job), (job.user, job.account) if job.reservation else None)
        shape = self._shape_memo.get(key)
        if shape is None:
            shape = self._shape_memo[key] = self._shape(job, p, info)
        if isinstance(shape, Reason):
            return shape
        if not job.time_limit_s > 0:  # also NaN; an infinite limit is Slurm's UNLIMITED and allowed
            return Reason("bad_time_limit", f"its time limit ({job.time_limit_s} s) is not positive", "error")
        return _Req(*shape[:5], float(job.time_limit_s), *shape[5:])

    def _shape(self, job: PendingJob, p: str, info) -> tuple | Reason:
        """A request's per-node shape in p, (nodes, CPUs, memory, GPUs, exclusive, GPU type, features,
        reservation index), or why p can never take it; everything of `_request` but the time limit."""
        if info is not None and info.max_nodes is not None and job.min_nodes > info.max_nodes:
            return Reason("partition_node_limit", f"it asks for {job.min_nodes} nodes but partition {p} allows "
                          f"{info.max_nodes} (MaxNodes; Slurm: PartitionNodeLimit)", "error")
        resv = -1
        if job.reservation:
            resv = self.resv_index.get(job.reservation, -2)
            if resv == -2:
                return Reason("no_such_reservation", f"reservation {job.reservation} does not exist", "error")
            r = self.reservations[resv]
            if not r.admits(job.user, job.account):
                return Reason("reservation_access", f"user {job.user or '?'} / account {job.account or '?'} "
                              f"may not use reservation {r.name}", "error")
        features = frozenset(job.features)
        if job.feature_alternatives:  # one term: the node has every feature of one alternative
            features |= {frozenset(frozenset(a) for a in job.feature_alternatives)}
        got = self._matching(p, resv, job.gpu_type, features)
        if isinstance(got, Reason):
            return got
        sizes = got
        nodes = max(1, job.min_nodes)
        gpus = max(0, job.gpus_per_node)
        most = max(g for _, _, g, _ in sizes)
        if job.gpus_per_job > 0:
            if most == 0:
                return Reason("no_such_gpu_type", f"it asks for {job.gpus_per_job} GPUs but partition {p} has "
                              "no GPUs", "error")
            nodes = max(nodes, -(-job.gpus_per_job // most))
            gpus = -(-job.gpus_per_job // nodes)
        elif gpus and most == 0:
            return Reason("no_such_gpu_type", f"it asks for GPUs but partition {p} has none", "error")
        cpus = max(1, job.cpus_per_node or -(-max(1, job.tasks) // nodes) * max(1, job.cpus_per_task))
        mem = max(0, job.mem_per_node_mb)
        if info is not None and info.max_cpus_per_node is not None and cpus > info.max_cpus_per_node:
            return Reason("too_large", f"it needs {cpus} CPUs per node but partition {p} lets a job use "
                          f"{info.max_cpus_per_node} (MaxCPUsPerNode)", "error")
        matching = sum(n for *_, n in sizes)
        if nodes > matching:
            return Reason("too_large", f"it asks for {nodes} nodes but partition {p} has {matching} that match",
                          "error")
        big = sum(n for c, m, g, n in sizes if c >= cpus and m >= mem and g >= gpus)
        if big < nodes:
            return Reason("too_large", f"it needs {nodes} node(s) with {_shape(cpus, mem, gpus)} each, but only "
                          f"{big} node(s) in partition {p} are that large", "error")
        return nodes, cpus, mem, gpus, bool(job.exclusive), job.gpu_type, features, resv

    def _matching(self, p: str, resv: int, gpu_type: str | None, features: frozenset):
        """The sizes of the nodes of p, usable or not, that the request could use: (CPUs, memory, GPUs,
        how many nodes have those totals), a few, read per request shape without numpy."""
        key = ("match", p, resv, gpu_type, features)
        got = self._allowed_memo.get(key)
        if got is not None:
            return got
        idx = self._array(("all", p), self.part_nodes[p])
        if resv >= 0:
            in_resv = set(self.index[n] for n in self.reservations[resv].nodes if n in self.index)
            idx = np.array([i for i in idx.tolist() if i in in_resv], dtype=np.int64)
        if gpu_type:
            idx = self._of_type(idx, gpu_type)
            if not len(idx):
                got = Reason("no_such_gpu_type", f"no node in partition {p} has GPUs of type {gpu_type}", "error")
        if features and not isinstance(got, Reason):
            idx = self._with_features(idx, features)
            if not len(idx):
                got = Reason("no_such_feature", f"no node in partition {p} has the features "
                             f"{_feature_text(features)}", "error")
        if got is None and not len(idx):
            got = Reason("too_large", f"partition {p} has no nodes", "error")
        if got is None:
            _, codes, class_totals = self._node_class
            counts = np.bincount(codes[idx], minlength=len(class_totals)).tolist()
            got = [(*t, n) for t, n in zip(class_totals, counts) if n]
        self._allowed_memo[key] = got
        return got

    def allowed(self, p: str, req: _Req) -> set[int] | None:
        """Usable nodes of p that match the request's type, features and reservation (None: all do)."""
        if req.gpu_type is None and not req.features and req.resv < 0:
            return None
        key = (p, req.gpu_type, req.features, req.resv)
        got = self._allowed_memo.get(key)
        if got is None:
            idx = self.part_pos(p)
            if req.gpu_type is not None:
                idx = self._of_type(idx, req.gpu_type)
            if req.features:
                idx = self._with_features(idx, req.features)
            idx = idx.tolist()
            if req.resv >= 0:
                names = set(self.reservations[req.resv].nodes)
                idx = [i for i in idx if self.names[i] in names]
            got = self._allowed_memo[key] = set(idx)
        return got

    def _codes(self, attr: str) -> tuple[list, np.ndarray]:  # attr: "gpu_type" or "features"
        """A node attribute's value per node class (see __init__) and, per node, its class: nodes share
        a few GPU types and feature sets, so a request is matched against each class once."""
        classes, codes, _ = self._node_class
        return [c[1] if attr == "gpu_type" else c[2] for c in classes], codes

    def _matching_values(self, idx: np.ndarray, attr: str, ok) -> np.ndarray:
        values, codes = self._codes(attr)
        good = np.array([ok(v) for v in values], dtype=bool)
        return idx[good[codes[idx]]]

    def _of_type(self, idx: np.ndarray, gpu_type: str) -> np.ndarray:
        return self._matching_values(idx, "gpu_type", lambda v: v == gpu_type)

    def _with_features(self, idx: np.ndarray, wanted: frozenset) -> np.ndarray:
        return self._matching_values(idx, "features", lambda fs: _has_features(wanted, fs))

    def totals(self) -> np.ndarray:
        """(CPUs, memory, GPUs) x node: each node's totals as an array."""
        return self._totals

    def name_array(self) -> np.ndarray:
        got = self._allowed_memo.get("names")
        if got is None:
            got = self._allowed_memo["names"] = np.array(self.names, dtype=object)
        return got

    def part_pos(self, p: str) -> np.ndarray:
        """The usable nodes of p, in name order, as an array of node indices."""
        return self._array(("pos", p), self.part_usable[p])

    def _array(self, key, nodes: list[int]) -> np.ndarray:
        got = self._allowed_memo.get(key)
        if got is None:
            got = self._allowed_memo[key] = np.array(nodes, dtype=np.int64)
        return got

    def free_arrays(self) -> list[np.ndarray]:
        """Free CPUs, memory and GPUs per node as arrays, as they are now (commit updates them): read
        them, or copy them to change them. The nodes commit changed are written when next read (numpy's
        per-item assignment costs more than a few hundred items written at once)."""
        stale = self._free_stale
        if stale:
            idx = np.fromiter(stale, np.int64, count=len(stale))
            for arr, values in zip(self.free, (self.cf, self.mf, self.gf)):
                arr[idx] = [values[i] for i in stale]
            stale.clear()
        return self.free

    def earliest_allowed_start(self, req: _Req) -> float:
        """A job in a reservation cannot start before the reservation does."""
        return max(self.now, self.reservations[req.resv].start) if req.resv >= 0 else self.now

    # --- now ----------------------------------------------------------------------------------

    def _room_now(self, i: int, req: _Req, end: float, with_holds: bool = True) -> tuple[int, int, int] | None:
        """Resources node i offers the request on [now, end), or None if it cannot host it."""
        if req.exclusive and (self.cf[i] != self.ct[i] or self.mf[i] != self.mt[i] or self.gf[i] != self.gt[i]):
            return None
        c, m, g = self.cf[i], self.mf[i], self.gf[i]
        now = self.now
        for s, e, r in self.blocks[i]:
            if r != req.resv and s < end and e > now:
                return None
        if c < req.cpus or m < req.mem or g < req.gpus:
            return None
        if with_holds and self.holds[i]:
            if self.resolution > 0:
                # Slurm mode: whole-node holds. A job that would start now is kept off a node whose
                # hold (rounded down to bf_resolution) begins by its exact end, inclusive: backfill.c
                # takes the nodes free in every slot of its map that begins at or before the end
                return None if any(s <= end and e > now for s, e, *_ in self.holds[i]) else (c, m, g)
            # A hold takes its share from what the node has when the hold starts: the resources free
            # now plus every release by then (all jobs ending at the shadow time, not only those the
            # top job needed), less the other holds active then.
            holds = self.holds[i]
            for s, e, *_ in holds:
                if s < end and e > now:
                    if req.exclusive:
                        return None
                    t = s if s > now else now
                    hc_, hm_, hg_ = self.free_at(i, t)
                    for s2, e2, hc, hm, hg, _ in holds:
                        if s2 <= t < e2:
                            hc_, hm_, hg_ = hc_ - hc, hm_ - hm, hg_ - hg
                    if hc_ < req.cpus or hm_ < req.mem or hg_ < req.gpus:
                        return None
                    c, m, g = min(c, hc_), min(m, hm_), min(g, hg_)
        return c, m, g

    def free_at(self, i: int, t: float) -> tuple[int, int, int]:
        """Resources free on node i at time t: free now plus every release at or before t."""
        c, m, g = self.cf[i], self.mf[i], self.gf[i]
        for rt, rc, rm, rg in self.releases[i]:
            if rt > t:
                break
            c, m, g = c + rc, m + rm, g + rg
        return c, m, g

    def fit_now(self, p: str, req: _Req) -> list[int] | None:
        """N nodes that can run the job from now for its whole time limit, best fit first, or None."""
        key = (p, req)
        memo = self._fit_memo.get(key)
        version = self.version[p]
        # Room only shrinks while a plan is made (starts and reservations take, nothing gives back),
        # so "does not fit" stays true; a fit is brought up to date from the nodes changed since.
        if memo is not None and (memo[1] is None or memo[0] == version):
            return memo[1]
        changes = self.changes[p]
        allowed = self.allowed(p, req)
        # Plain nodes (no reservation, no hold) have the same room whatever the time limit, and the
        # same order for every request (_plain_fits); only the few marked nodes are checked per
        # time limit.
        need = req.nodes
        plain = self._plain_fits(p, req, allowed, None if self.slurm else need)
        # the marked nodes of p, or those changed since (changes[p] lists only marked nodes of p)
        todo = self._marked_in(p) if memo is None else set(changes[memo[3]:])
        special = [] if memo is None else [t for t in memo[2] if t[-1] not in todo]
        # (of those, the nodes with some CPU and enough GPUs free: few)
        gf, cf, k = self.gf, self.cf, req.gpus
        self._fits([i for i in todo if gf[i] >= k and cf[i] > 0], req, allowed, special.append)
        result = None
        if len(plain) + len(special) >= need:
            if self.slurm:
                result = self.slurm_choose([t[-1] for t in chain(plain, special)], need)
            else:  # lower node weights first, then best fit: the fullest nodes that still fit (big holes stay whole)
                special.sort()
                # (heapq.merge is a Python generator: without special nodes, the plain ones' head)
                result = [t[-1] for t in (islice(merge(plain, special), need) if special else plain[:need])]
        self._fit_memo[key] = (version, result, special, len(changes))
        return result

    def _marked_in(self, p: str) -> set[int]:
        """The marked nodes (reservation or hold) that are usable nodes of p; hold adds to it."""
        got = self._marked_of.get(p)
        if got is None:
            rows = self.row_array(p)
            got = self._marked_of[p] = {i for i in self.marked if rows[i] >= 0}
        return got

    def _plain_fits(self, p: str, req: _Req, allowed: set[int] | None, limit: int | None) -> list[tuple]:
        """The plain nodes of p with room for one node of req, as fit_now's sort keys (weight, free
        GPUs, CPUs, memory, name, index), in that order: the first `limit` of them (all: None).

        A plain node has no reservation nor hold, so its room is what is free now, and its key does
        not depend on the request: the nodes are kept sorted once per partition, bucketed by
        (weight, free GPUs), and a request reads the buckets with enough GPUs from the first node
        with enough CPUs (a binary search) until it has `limit` nodes."""
        buckets = self._buckets.get(p)
        if buckets is None:
            buckets = self._buckets[p] = {}
            self._built[p] = set()
        built = self._built[p]
        k = req.gpus
        # the nodes with some GPU free (few in a busy cluster) at once; those with none (every node
        # of a CPU partition) only for a request without GPUs
        if k <= 0 and 0 not in built:
            self._build_buckets(p, 0, 0)
        if 1 not in built and self.max_gpus >= max(k, 1):
            self._build_buckets(p, 1, self.max_gpus)
        out: list[tuple] = []
        c, m, exclusive = req.cpus, req.mem, req.exclusive
        ct, mt, gt = self.ct, self.mt, self.gt
        for w, g in sorted(b for b in buckets if b[1] >= k):
            nodes = buckets[w, g]
            for j in range(bisect_left(nodes, (c,)), len(nodes)):
                fc, fm, name, i = nodes[j]
                if fm < m or (allowed is not None and i not in allowed):
                    continue
                if exclusive and (fc != ct[i] or fm != mt[i] or g != gt[i]):
                    continue
                out.append((w, g, fc, fm, name, i))
                if len(out) == limit:
                    return out
        return out

    def _build_buckets(self, p: str, lo: int, hi: int) -> None:
        """_plain_fits' buckets of p's plain nodes with lo to hi GPUs free, from the state now."""
        self._built[p].update(range(lo, hi + 1))
        pos = self.part_pos(p)
        cf_now, _, gf_now = self.free_arrays()
        g_now = gf_now[pos]
        sel = pos[(g_now >= lo) & (g_now <= hi) & (cf_now[pos] > 0)].tolist()
        buckets = self._buckets[p]
        marked, weight, cf, mf, gf, names = self.marked, self.weight, self.cf, self.mf, self.gf, self.names
        made = set()
        for i in dict.fromkeys(sel):  # a node that lists p twice is one node
            if i not in marked:
                key = (weight[i], gf[i])
                made.add(key)
                buckets.setdefault(key, []).append((cf[i], mf[i], names[i], i))
        for key in made:
            buckets[key].sort()

    def _unbucket(self, i: int, c: int, m: int, g: int) -> None:
        """Node i, plain with c CPUs, m memory and g GPUs free, leaves its buckets (if made)."""
        if c <= 0:
            return
        entry = (c, m, self.names[i], i)
        for p in self.node_parts[i]:
            built = self._built.get(p)
            if built and g in built:
                nodes = self._buckets[p][self.weight[i], g]
                del nodes[bisect_left(nodes, entry)]

    def _rebucket(self, i: int) -> None:
        """Node i, plain, joins its buckets (if made) with what it has free now."""
        c, g = self.cf[i], self.gf[i]
        if c <= 0:
            return
        entry = (c, self.mf[i], self.names[i], i)
        for p in self.node_parts[i]:
            built = self._built.get(p)
            if built and g in built:
                insort(self._buckets[p].setdefault((self.weight[i], g), []), entry)

    def _fits(self, nodes, req: _Req, allowed: set[int] | None, add) -> None:
        """add(sort key) for each of these nodes with room for one node of req from now to its end."""
        end = self.now + req.duration
        weight, names, room_now = self.weight, self.names, self._room_now
        for i in nodes:
            if allowed is not None and i not in allowed:
                continue
            room = room_now(i, req, end)
            if room is not None:
                add((weight[i], room[2], room[0], room[1], names[i], i))

    def commit(self, nodes: list[int], req: _Req) -> list[tuple[int, int, int]]:
        """Start the job on these nodes now; returns (node, CPUs, GPUs) taken on each."""
        end = self.now + req.duration
        self.commits += 1
        if self.slurm:  # (only the will-run test reads them)
            self.started.append((end, nodes))
        taken = []
        cf, mf, gf = self.cf, self.mf, self.gf
        self._free_stale += nodes
        version, changes, arrays, stale = self.version, self.changes, self._arrays_memo, self._stale
        add, marked = self.releases.add, self.marked
        for i in nodes:
            old_c, old_m, old_g = cf[i], mf[i], gf[i]
            if req.exclusive:
                c, m, g = old_c, old_m, old_g
            else:
                c, m, g = req.cpus, req.mem, req.gpus
            plain = i not in marked
            if plain:
                self._unbucket(i, old_c, old_m, old_g)
            cf[i] = old_c - c
            mf[i] = old_m - m
            gf[i] = old_g - g
            if plain:
                self._rebucket(i)
            taken.append((i, c, g))
            add(i, end, c, m, g)
            for p in self.node_parts[i]:
                version[p] += 1
                if not plain:
                    changes[p].append(i)
                if p in arrays:  # its row is rewritten when the matrices are next read
                    stale[p].add(i)
        return taken

    def span(self, start: float, duration: float) -> tuple[float, float]:
        """A job's interval as backfill.c compares it with its reservations: both ends rounded down to
        bf_resolution, at least one bf_resolution long (a job ending within the slot a reservation
        starts in does not collide with it)."""
        res = self.resolution
        lo = (start // res) * res
        hi = ((start + duration) // res) * res
        return lo, hi if hi > lo else lo + res

    def hold(self, nodes: list[int], start: float, req: _Req, job_id: str) -> None:
        # Slurm's backfill reserves whole nodes (its plan is a map of node bitmaps over time)
        whole = req.exclusive or self.slurm
        end = start + req.duration
        if self.resolution > 0:
            # backfill.c's node map keeps a reservation rounded down to bf_resolution at both ends: a
            # later job may start at the rounded end
            start, end = self.span(start, req.duration)
        self.hold_seq.setdefault(job_id, len(self.hold_seq))  # the order Slurm's cycle made them in
        self.hold_list.append((start, end, job_id, frozenset(nodes)))
        self._held[nodes] = True
        self._hold_flat[0].extend(nodes)
        self._hold_flat[1].extend([start] * len(nodes))
        self._hold_flat[2].extend([end] * len(nodes))
        for i in nodes:
            c, m, g = (self.ct[i], self.mt[i], self.gt[i]) if whole else (req.cpus, req.mem, req.gpus)
            self.holds[i] = [*self.holds[i], (start, end, c, m, g, job_id)]
            if i not in self.marked:  # no longer plain
                self._unbucket(i, self.cf[i], self.mf[i], self.gf[i])
                self.marked.add(i)
                for p in self.node_parts[i]:
                    got = self._marked_of.get(p)
                    if got is not None:
                        got.add(i)
            for p in self.node_parts[i]:
                self.version[p] += 1
                self.changes[p].append(i)

    # --- over time ----------------------------------------------------------------------------

    def arrays(self, p: str) -> _Arrays:
        """Built once per partition; the rows of the nodes `commit` changed since are rewritten when
        next read (a few reads per plan, hundreds of commits: a node committed to twice is written once)."""
        got = self._arrays_memo.get(p)
        if got is not None:
            stale = self._stale[p]
            if not stale:
                return got
            for i in sorted(stale):
                self._update_row(p, i)
            stale.clear()
            got = self._arrays_memo.get(p)  # None when a row outgrew the matrix: built again below
            if got is not None:
                return got
        pos = self.part_pos(p)
        n = len(pos)
        # every release of these nodes, sorted by node and then as its tuple: row r's k-th release
        # goes to column k (column 0 is now)
        node, t, c, m, g = self.releases.flat()
        rows = self.row_array(p)[node]
        mine = rows >= 0
        node, rows, t, c, m, g = node[mine], rows[mine], t[mine], c[mine], m[mine], g[mine]
        first = np.ones(len(node), dtype=bool)
        first[1:] = node[1:] != node[:-1]
        starts = np.flatnonzero(first)
        cols = np.arange(len(node)) - np.repeat(starts, np.diff(np.append(starts, len(node)))) + 1
        counts = np.bincount(rows, minlength=n)
        # two spare columns, so that committing a job to the busiest node rarely forces a rebuild
        width = 3 + int(counts.max(initial=0))
        times = np.full((n, width), INF)
        deltas = np.zeros((3, n, width), dtype=np.int64)
        times[:, 0] = self.now
        for k, v in enumerate(self.free_arrays()):
            deltas[k, :, 0] = v[pos]
        times[rows, cols] = t
        deltas[0, rows, cols] = c
        deltas[1, rows, cols] = m
        deltas[2, rows, cols] = g
        for k in range(1, width):  # cumulative, a column at a time: rows are a few columns long
            deltas[:, :, k] += deltas[:, :, k - 1]
        ct, mt, gt = self.totals()[:, pos]
        arr = _Arrays(pos, times, deltas[0], deltas[1], deltas[2], ct, mt, gt,
                      bool((c >= 0).all() and (m >= 0).all() and (g >= 0).all()))
        self._arrays_memo[p] = arr
        return arr

    def _update_row(self, p: str, i: int) -> None:
        arr = self._arrays_memo.get(p)
        if arr is None:
            return
        rel = self.releases[i]
        width = arr.times.shape[1]
        if len(rel) + 1 > width:
            del self._arrays_memo[p]  # no room for the new release: rebuild when next asked
            return
        r = int(self.row_array(p)[i])
        c, m, g = self.cf[i], self.mf[i], self.gf[i]
        ts, cs, ms, gs = [self.now], [c], [m], [g]
        for t, dc, dm, dg in rel:
            c, m, g = c + dc, m + dm, g + dg
            ts.append(t)
            cs.append(c)
            ms.append(m)
            gs.append(g)
        pad = width - len(ts)
        # whole-row writes: numpy's per-item assignment costs more than building the row in Python
        arr.times[r] = ts + [INF] * pad
        arr.cpus[r] = cs + [c] * pad
        arr.mem[r] = ms + [m] * pad
        arr.gpus[r] = gs + [g] * pad

    def special(self, p: str, req: _Req) -> list[int]:
        """Nodes of p (allowed for req) whose room over time is not just free-now plus releases."""
        key = ("special", p, self.version[p], req.gpu_type, req.features, req.resv)
        got = self._arrays_memo.get(key)
        if got is None:
            # the marked nodes of p (allowed) with a hold or another reservation, in row order
            marked = np.fromiter(self.marked, np.int64, count=len(self.marked))
            rows = self.row_array(p)[marked]
            keep = rows >= 0
            mask = self.allowed_mask(p, req)
            if mask is not None:
                keep &= mask[np.where(keep, rows, 0)]
            keep &= self._held[marked] | self._other_blocks(req.resv)[marked]
            got = self._arrays_memo[key] = marked[keep][np.argsort(rows[keep], kind="stable")].tolist()
        return got

    def _other_blocks(self, resv: int) -> np.ndarray:
        """Per node: whether a reservation other than resv is on it."""
        key = ("other_blocks", resv)
        got = self._allowed_memo.get(key)
        if got is None:
            got = self._allowed_memo[key] = np.zeros(len(self.names), dtype=bool)
            got[[i for i in self.reserved_nodes if any(r != resv for _, _, r in self.blocks[i])]] = True
        return got

    def allowed_mask(self, p: str, req: _Req) -> np.ndarray | None:
        allowed = self.allowed(p, req)
        if allowed is None:
            return None
        key = ("mask", p, req.gpu_type, req.features, req.resv)
        got = self._allowed_memo.get(key)
        if got is None:
            got = np.zeros(len(self.part_usable[p]), dtype=bool)
            got[self.row_array(p)[np.fromiter(allowed, np.int64, count=len(allowed))]] = True
            self._allowed_memo[key] = got
        return got

    def _fits_at(self, i: int, t: float, req: _Req) -> bool:
        end = t + req.duration
        for s, e, r in self.blocks[i]:
            if r != req.resv and s < end and e > t:
                return False
        holds = self.holds[i]
        if self.resolution > 0:
            # Slurm mode: whole-node holds; a later start is checked as backfill.c's _test_resv_overlap
            # does, both intervals rounded down to bf_resolution
            lo, hi = self.span(t, req.duration)
            if any(s < hi and e > lo for s, e, *_ in holds):
                return False
            c, m, g = self.free_at(i, t)
            if req.exclusive:
                return c >= self.ct[i] and m >= self.mt[i] and g >= self.gt[i]
            return c >= req.cpus and m >= req.mem and g >= req.gpus
        # the room at t and at the start of every hold within [t, end): releases only add room
        for u in [t] + [s for s, e, *_ in holds if t < s < end]:
            c, m, g = self.free_at(i, u)
            for s, e, hc, hm, hg, _ in holds:
                if s <= u < e:
                    if req.exclusive:
                        return False
                    c, m, g = c - hc, m - hm, g - hg
            if req.exclusive:
                if not (c >= self.ct[i] and m >= self.mt[i] and g >= self.gt[i]):
                    return False
            elif c < req.cpus or m < req.mem or g < req.gpus:
                return False
        return True

    def _first_room(self, p: str, req: _Req) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per usable node of p (the rows of arrays(p)): the first time it has room for one node's
        share of req, ignoring reservations and holds (inf where never), whether it ever has, and
        whether it has now. Only a commit changes the release matrices, so the commits key the memo
        (holds, which Slurm mode makes for most jobs, do not invalidate it)."""
        key = ("first", p, self.commits, req.cpus, req.mem, req.gpus, req.exclusive)
        got = self._arrays_memo.get(key)
        if got is None:
            got = self._arrays_memo[key] = self._first_room_flat(p, req)
        if got is None:
            arr = self.arrays(p)
            if req.exclusive:
                ok = ((arr.cpus >= arr.cpus_total[:, None]) & (arr.mem >= arr.mem_total[:, None])
                      & (arr.gpus >= arr.gpus_total[:, None]))
            else:
                ok = (arr.cpus >= req.cpus) & (arr.mem >= req.mem) & (arr.gpus >= req.gpus)
            first = ok.argmax(axis=1)
            rows = np.arange(len(arr.pos))
            ever = ok[rows, first]
            got = self._arrays_memo[key] = (np.where(ever, arr.times[rows, first], INF), ever, ok[:, 0])
        return got

    def _flat_part(self, p: str):
        """The releases of p's usable nodes as flat arrays (row, time, CPUs, memory, GPUs), sorted by
        row and time, each release's cumulative sums within its row (CPUs, memory, GPUs), and whether
        every release adds room; or None where one takes room. Only a commit adds a release."""
        key = ("flat", p, self.commits)
        got = self._arrays_memo.get(key, False)
        if got is False:
            node, t, c, m, g = self.releases.flat()
            rows = self.row_array(p)[node]
            mine = rows >= 0
            rows, t, c, m, g = rows[mine], t[mine], c[mine], m[mine], g[mine]
            got = None
            if (c >= 0).all() and (m >= 0).all() and (g >= 0).all():
                # a row's sums: the running sums less those before its first release (rows are
                # ascending, as node indices are within a partition's name order)
                head = np.ones(len(rows), dtype=bool)
                head[1:] = rows[1:] != rows[:-1]
                starts = np.flatnonzero(head)
                lens = np.diff(np.append(starts, len(rows)))
                sums = []
                for v in (c, m, g):
                    run = np.cumsum(v)
                    sums.append(run - np.repeat(run[starts] - v[starts], lens))
                got = (rows, t, *sums)
            self._arrays_memo[key] = got
        return got

    def _first_room_flat(self, p: str, req: _Req):
        """_first_room's answer from the flat releases (no release matrix), where every release adds
        room: a node's room then only grows, so the first release after which its free resources
        suffice is its first time with room, whatever the order of releases at one time; None where
        a release takes room (the matrix's order then decides, see arrays)."""
        flat = self._flat_part(p)
        if flat is None:
            return None
        rows, t, sc, sm, sg = flat
        pos = self.part_pos(p)
        fc, fm, fg = (v[pos] for v in self.free_arrays())
        if req.exclusive:
            nc, nm, ng = self.totals()[:, pos]
            ok0 = (fc >= nc) & (fm >= nm) & (fg >= ng)
            ok = (fc[rows] + sc >= nc[rows]) & (fm[rows] + sm >= nm[rows]) & (fg[rows] + sg >= ng[rows])
        else:
            ok0 = (fc >= req.cpus) & (fm >= req.mem) & (fg >= req.gpus)
            ok = (fc[rows] + sc >= req.cpus) & (fm[rows] + sm >= req.mem) & (fg[rows] + sg >= req.gpus)
        hit = np.flatnonzero(ok)
        hit_rows = rows[hit]
        head = np.ones(len(hit), dtype=bool)
        head[1:] = hit_rows[1:] != hit_rows[:-1]
        first = np.full(len(pos), INF)
        first[hit_rows[head]] = t[hit[head]]
        ever = ok0.copy()
        ever[hit_rows] = True
        first[ok0] = self.now
        return first, ever, ok0

    def now_columns(self, p: str) -> tuple[np.ndarray, ...]:
        """p's usable nodes (node indices, name order), their free CPUs, memory and GPUs now, and their
        totals: the release matrices' first column, without the matrices."""
        key = ("now_columns", p, self.version[p])
        got = self._arrays_memo.get(key)
        if got is None:
            pos = self.part_pos(p)
            got = self._arrays_memo[key] = (pos, *(v[pos] for v in self.free_arrays()), *self.totals()[:, pos])
        return got

    def _room_at(self, p: str, nodes: list[int], req: _Req):
        """free_at over all of `nodes` (usable in p) at once, from the partition's release matrix:
        (the nodes as an array, a function of t giving the mask of those with room for one node's
        share of req at t, and for monotone matrices (first time with room, ever) per node, else None)."""
        arr = self.arrays(p)
        ids = np.array(nodes, dtype=np.int64)
        rows = self.row_array(p)[ids]
        if arr.monotone:
            # room only grows: at t >= now a node has room iff its first time with room is <= t, one
            # comparison per node instead of a search through its events at every t
            tau, ever, ok0 = (a[rows] for a in self._first_room(p, req))
            now = self.now

            def room_from(t: float) -> np.ndarray:
                return ever & (tau <= t) if t >= now else ok0.copy()  # before now: the room now only
            return ids, room_from, (tau, ever)
        times = arr.times[rows]
        need = (arr.cpus_total[rows], arr.mem_total[rows], arr.gpus_total[rows]) if req.exclusive else \
            (req.cpus, req.mem, req.gpus)

        def room(t: float) -> np.ndarray:
            # the last event at or before t (column 0 is now, which free_at also counts before now)
            k = np.maximum((times <= t).sum(axis=1) - 1, 0)
            return (arr.cpus[rows, k] >= need[0]) & (arr.mem[rows, k] >= need[1]) & (arr.gpus[rows, k] >= need[2])
        return ids, room, None

    def _slurm_scan(self, p: str, req: _Req, t0: float, t_mono: float, special: list[int],
                    plain: np.ndarray) -> tuple[float | None, list[int]]:
        """Slurm mode's search of `earliest` over its special nodes (usable in p, allowed): the first
        candidate time in [t0, t_mono] (a node's release, a hold's or reservation's end, the last
        time it can start before one begins, or a plain node's first fit) at which the plain nodes
        with room and the special nodes that fit are enough; and those special nodes, in the order
        given. A special node fits at t (`_fits_at`) if it has room then and no reservation (other
        than the job's) overlaps [t, t + duration) and no hold overlaps the job's span at
        bf_resolution. Counted for every candidate at once (see _fit_counts), then checked at the
        one found."""
        need, dur, nspec = req.nodes, req.duration, len(special)
        ids, room, first = self._room_at(p, special, req)
        where = np.full(len(self.names), -1, dtype=np.int64)
        where[ids] = np.arange(nspec)
        # reservations (other than the job's own) and holds on these nodes, one entry per node
        bn, bs, be, br = self._flat_blocks()
        b = np.flatnonzero((where[bn] >= 0) & (br != req.resv))
        bk, bs, be = where[bn[b]], bs[b], be[b]
        hn, hs, he = self._flat_holds()
        h = np.flatnonzero(where[hn] >= 0)
        hk, hs, he = where[hn[h]], hs[h], he[h]
        # the candidates: every breakpoint of these nodes (`_breakpoints_of`) and the plain nodes'
        # first fits that could complete a gang, within [t0, t_mono], ascending
        arr = self.arrays(p)
        counts = self.release_counts()[ids]
        rel = arr.times[self.row_array(p)[ids], 1:]
        rel = rel[np.arange(rel.shape[1]) < counts[:, None]]
        lo = max(0, need - 1 - nspec)
        cands = np.concatenate(([t0], rel[rel > t0], be, np.nextafter(bs - dur, INF), he,
                                np.nextafter(hs - dur, INF), np.maximum(plain[lo:need], t0)))
        times = np.unique(cands[(cands >= t0) & (cands <= t_mono)])
        before = np.searchsorted(plain, times, side="right")  # plain nodes with room by then
        res = self.resolution
        span_lo = np.floor_divide(times, res) * res  # span(): as backfill.c rounds both ends
        span_hi = np.floor_divide(times + dur, res) * res
        span_hi = np.where(span_hi > span_lo, span_hi, span_lo + res)

        def fitting(c: int) -> np.ndarray:  # the special nodes that fit at candidate c
            t = float(times[c])
            ok = room(t)
            ok[bk[(bs < t + dur) & (be > t)]] = False
            ok[hk[(hs < span_hi[c]) & (he > span_lo[c])]] = False
            return ok

        if first is not None and len(times) and times[0] >= self.now and all(
                not len(v) or bool((v[1:] >= v[:-1]).all()) for v in (times + dur, span_lo, span_hi)):
            got = self._fit_counts(times, first, [
                (bk, np.searchsorted(times + dur, bs, side="right"), np.searchsorted(times, be, side="left")),
                (hk, np.searchsorted(span_hi, hs, side="right"), np.searchsorted(span_lo, he, side="left"))])
            enough = np.flatnonzero(before + got >= need)
            if not len(enough):
                return None, []
            c = int(enough[0])
            return float(times[c]), ids[fitting(c)].tolist()
        for c in np.flatnonzero(before + nspec >= need).tolist():  # room not monotone: one time at a time
            ok = fitting(c)
            if before[c] + int(ok.sum()) >= need:
                return float(times[c]), ids[ok].tolist()
        return None, []

    @staticmethod
    def _fit_counts(times: np.ndarray, first, entries) -> np.ndarray:
        """How many nodes fit at each candidate time: those with room then (room only grows: from
        the first candidate at or after their first time with room on) less those that an entry
        (a reservation or a hold) rules out then. What an entry rules out is an interval of
        candidates [a, b): its test is "t before one bound and t (or t + duration, or the span's
        end, all ascending with t) after the other". A node's intervals are merged, so that a node
        is taken away once, and clipped to the candidates at which it has room."""
        n = len(times)
        tau, ever = first
        start = np.where(ever, np.searchsorted(times, tau, side="left"), n)
        k = np.concatenate([e[0] for e in entries])
        a = np.maximum(np.concatenate([e[1] for e in entries]), start[k])
        b = np.concatenate([e[2] for e in entries])
        keep = a < b
        k, a, b = k[keep], a[keep], b[keep]
        delta = np.bincount(start[start < n], minlength=n + 1)
        if len(k):
            # merge each node's intervals: sorted by (node, start), offset per node so that one running
            # maximum of the ends serves every node; an interval that begins after it opens a new run
            order = np.lexsort((a, k))
            width = n + 1
            a, b = k[order] * width + a[order], k[order] * width + b[order]
            reach = np.maximum.accumulate(b)
            opens = np.ones(len(a), dtype=bool)
            opens[1:] = a[1:] > reach[:-1]
            runs = np.flatnonzero(opens)
            base = (a[runs] // width) * width
            delta -= np.bincount(a[runs] - base, minlength=n + 1)
            delta += np.bincount(np.maximum.reduceat(b, runs) - base, minlength=n + 1)
        return np.cumsum(delta)[:n]

    def release_counts(self) -> np.ndarray:
        """How many releases each node has (the real columns of its row in the release matrices)."""
        key = ("nrel", self.commits)
        got = self._arrays_memo.get(key)
        if got is None:
            got = self._arrays_memo[key] = self.releases.counts()
        return got

    def _flat_holds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every hold so far, one entry per node: (node, start, end) as arrays, made again only when
        holds were added."""
        nodes, starts, ends = self._hold_flat
        key = ("holds", len(nodes))
        got = self._arrays_memo.get(key)
        if got is None:
            got = self._arrays_memo[key] = (np.fromiter(nodes, np.int64, count=len(nodes)),
                                            np.fromiter(starts, float, count=len(starts)),
                                            np.fromiter(ends, float, count=len(ends)))
        return got

    def _flat_blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every reservation on every node, one entry per node: (node, start, end, reservation)."""
        got = self._allowed_memo.get("blocks")
        if got is None:
            flat = [(i, s, e, r) for i in self.reserved_nodes for s, e, r in self.blocks[i]]
            cols = list(zip(*flat)) or [(), (), (), ()]
            got = self._allowed_memo["blocks"] = (np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=float),
                                                  np.array(cols[2], dtype=float), np.array(cols[3], dtype=np.int64))
        return got

    def row_array(self, p: str) -> np.ndarray:
        """Each node's row among the usable nodes of p (their position in name order), -1 for the others."""
        key = ("rows", p)
        got = self._allowed_memo.get(key)
        if got is None:
            got = self._allowed_memo[key] = np.full(len(self.names), -1, dtype=np.int64)
            got[self.part_usable[p]] = np.arange(len(self.part_usable[p]))
        return got

    def _breakpoints(self, i: int, req: _Req, t0: float) -> list[float]:
        # a node's releases and holds only grow, so their counts date its breakpoints
        key = (i, req.duration, req.resv, t0, len(self.releases[i]), len(self.holds[i]))
        got = self._bp_memo.get(key)
        if got is None:
            got = self._bp_memo[key] = self._breakpoints_of(i, req, t0)
        return got

    def _breakpoints_of(self, i: int, req: _Req, t0: float) -> list[float]:
        out = [t0]
        out += [t for t, _, _, _ in self.releases[i] if t > t0]
        for s, e, r in self.blocks[i]:
            if r != req.resv:
                out += [e, math.nextafter(s - req.duration, INF)]
        for s, e, *_ in self.holds[i]:
            out += [e, math.nextafter(s - req.duration, INF)]
        return [t for t in out if t >= t0]

    def _tau(self, p: str, req: _Req) -> tuple[np.ndarray, np.ndarray]:
        """Per usable node of p: the first time it has room for one node's share of req, ignoring
        reservations and holds (inf where never or not allowed); and those times, sorted, of the
        plain (not special) nodes. Independent of the time limit and of the earliest start."""
        key = ("tau", p, self.version[p], req.cpus, req.mem, req.gpus, req.exclusive, req.gpu_type,
               req.features, req.resv)
        got = self._arrays_memo.get(key)
        if got is not None:
            return got
        tau = self._first_room(p, req)[0].copy()
        mask = self.allowed_mask(p, req)
        if mask is not None:
            tau[~mask] = INF
        plain = tau.copy()
        special = self.special(p, req)
        if special:
            plain[self.row_array(p)[special]] = INF
        plain = np.sort(plain[plain < INF])
        self._arrays_memo[key] = got = (tau, plain)
        return got

    def earliest(self, p: str, req: _Req, t0: float, pick: bool = True) -> tuple[float | None, list[int]]:
        """The earliest time >= t0 at which `req.nodes` nodes can run the job for its time limit.

        Nodes whose future is only releases ("plain") have room from their first fitting time on,
        for ever; nodes under a reservation or a hold ("special") are checked at their own
        breakpoints, and only those that could fit before the plain nodes alone suffice."""
        tau_raw, plain = self._tau(p, req)
        all_special = self.special(p, req)
        need = req.nodes
        t_mono = max(float(plain[need - 1]), t0) if len(plain) >= need else INF
        tau_special = tau_raw[self.row_array(p)[all_special]] if all_special else tau_raw[:0]
        special = np.array(all_special, dtype=np.int64)[(tau_special <= t_mono) & (tau_special < INF)]
        if self.resolution <= 0:
            special = special.tolist()
        nspec = len(special)
        if len(plain) + nspec < need:
            return None, []
        chosen_spec: list[int] = []
        when = t_mono
        if nspec and self.resolution > 0:
            when, chosen_spec = self._slurm_scan(p, req, t0, t_mono, special, plain)
            if when is None or when == INF:
                return None, []
        elif nspec:
            lo = max(0, need - 1 - nspec)
            cands = set(np.maximum(plain[lo:need], t0).tolist())
            for i in special:
                cands.update(t for t in self._breakpoints(i, req, t0) if t <= t_mono)
            when = INF
            for t in sorted(cands):
                count = int(np.searchsorted(plain, t, side="right"))
                if count + nspec < need:
                    continue
                # special nodes in name order; EASY's pick prefers them (they fit at `when`, the latest
                # time), so the first `need` that fit decide it and the rest need no check (Slurm's
                # node choice looks at every candidate)
                fitting = []
                left = nspec
                for i in special:
                    left -= 1
                    if self._fits_at(i, t, req):
                        fitting.append(i)
                        if len(fitting) >= need and not self.slurm:
                            break
                    elif count + len(fitting) + left < need:
                        break
                if count + len(fitting) >= need:
                    when, chosen_spec = t, fitting
                    break
            if when == INF:
                return None, []
        if not pick:  # the caller wants the time only
            return when, []
        # the nodes that free up last before `when` (idle ones stay open for backfilling); requests of
        # one shape with different time limits mostly share `when`, hence the memo
        key = ("pick", p, self.version[p], req.cpus, req.mem, req.gpus, req.exclusive, req.gpu_type, req.features,
               req.resv, t0, when, need, tuple(chosen_spec))
        got = self._arrays_memo.get(key)
        if got is None:
            got = self._arrays_memo[key] = self._pick(p, req, tau_raw, all_special, t0, when, chosen_spec)
        return when, got

    def slurm_earliest(self, p: str, req: _Req, t0: float, own: str = "") -> tuple[float | None, list[int]]:
        """A reserved job's start and nodes as Slurm's backfill finds them (backfill.c, one job): from
        start_res = t0, the nodes no reservation covers from start_res to its end (`_avail`) go to
        the will-run test (`will_run_on`); the start is the later of its answer and start_res. If
        that is after the next time a covered node frees up (later_start), or the nodes it picks
        collide with a reservation at bf_resolution (`_test_resv_overlap`), it tries again from
        there. Large gangs, which need many running jobs gone, get a later start than the exact one.
        With `own`, only the holds made before job own's count (its search in a later cycle)."""
        start_res = t0
        seq = self.hold_seq
        first = seq.get(own, len(seq))
        for _ in range(200):
            avail, later_start = self._avail(p, req, start_res, own)
            got = self.will_run_on(p, avail, req)
            if got is None:
                if later_start is None:
                    return None, []
                start_res = later_start
                continue
            at, cands = got
            start = at if at > start_res else start_res
            if later_start is not None and start > later_start:
                start_res = later_start
                continue
            nodes = self.slurm_choose(cands, req.nodes)
            lo, hi = self.span(start, req.duration)
            if start > self.now and any(s < hi and e > lo and seq[h[-1]] < first
                                        for i in nodes for s, e, *h in self.holds[i]):
                start_res = start
                continue
            return start, nodes
        return None, []

    def _avail(self, p: str, req: _Req, start_res: float, own: str = "") -> tuple[np.ndarray, float | None]:
        """The usable nodes of p the request may use that no reservation, nor a hold made before job
        `own`'s, covers from start_res to its end (inclusive, as backfill.c's node map); and when to
        try again if they do not suffice (later_start; None: never, Slurm makes no reservation)."""
        seq = self.hold_seq
        first = seq.get(own, len(seq))
        end = start_res + req.duration
        # the nodes the request may use, and which of them (positions) an advanced reservation covers
        # at some time: only those depend on start_res (reservations are fixed for the plan)
        key = ("avail", p, req.gpu_type, req.features, req.resv)
        got = self._arrays_memo.get(key)
        if got is None:
            allowed = self.allowed(p, req)
            cands = [i for i in self.part_usable[p] if allowed is None or i in allowed]
            got = self._arrays_memo[key] = (np.array(cands, dtype=np.int64), [
                k for k, i in enumerate(cands) if any(r != req.resv for _, _, r in self.blocks[i])], [])
        base, marked, bits = got
        later = INF
        drop = []
        for k in marked:
            ends = [e for s, e, r in self.blocks[base[k]] if r != req.resv and s <= end and e > start_res]
            if ends:  # an advanced reservation: job_test_resv leaves the node out until it ends
                later = min(later, max(ends))
                drop.append(k)
        if drop:
            base, bits = np.delete(base, drop), None
        elif not bits:  # the bitmap of every allowed node, made once
            bits.append(self._bits(base))
        avail, slot_later = self._node_space(base, start_res, end, first, bits[0] if bits else None)
        if slot_later is not None:
            later = min(later, slot_later)
        return avail, (None if later == INF else later)

    def _node_space(self, base: np.ndarray, start_res: float, end: float, first: int, tmp: int | None = None):
        """backfill.c's walk of its node map (the holds made before the job's, as time slots of
        free nodes, split at every hold's rounded start and end on any node) for a job from
        start_res to end: the nodes of `base` free in every slot it overlaps, and later_start: the
        end of the first slot, from start_res on and up to the first that begins after `end`, whose
        successor frees a node of `base` that is not free now in it (None: no such slot; if the
        nodes then do not suffice, Slurm gives the job no reservation and no expected start)."""
        slots = self._slots(first)
        if not slots:
            return base, None
        # node sets as bitmaps (Python ints, bit i: node i), as backfill.c's: set operations on
        # thousands of nodes per slot are a few machine words each
        tmp = self._bits(base) if tmp is None else tmp
        avail = tmp
        later = None
        # the slots that end by start_res change nothing: start at the one start_res falls in
        k0 = max(0, bisect_right(slots, start_res, key=itemgetter(0)) - 1)
        for k, (b, b2, held) in enumerate(islice(slots, k0, None), k0):
            if later is None and b2 > start_res and k + 1 < len(slots):
                if tmp & ~slots[k + 1][2] & ~(avail & ~held):  # not (tmp - next) <= (avail - held)
                    later = b2
            if b2 <= start_res:
                continue
            if b > end:
                break
            avail &= ~held
        nbytes = (len(self.names) + 7) // 8
        free = np.unpackbits(np.frombuffer(avail.to_bytes(nbytes, "little"), np.uint8), bitorder="little")
        return base[free[base].astype(bool)], later

    def _bits(self, nodes) -> int:
        """A node set as a bitmap: bit i set for node i."""
        mask = np.zeros(len(self.names), dtype=bool)
        mask[nodes if isinstance(nodes, np.ndarray) else np.fromiter(nodes, np.int64, count=len(nodes))] = True
        return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")

    def _slots(self, first: int) -> list[tuple[float, float, int]]:
        """The node map of the holds made before the first-th: (begin, end, nodes held) per time
        slot, from now on, split at every hold's start and end. Holds are only added, so the
        number of them keys the memo (a job's search asks for the same map many times)."""
        now = self.now
        seq = self.hold_seq
        if first >= len(seq):
            # every hold (a job's own search): the map of the previous call plus the holds made since,
            # instead of a sweep over all of them each time a hold is added
            done, bounds, held, used = self._map
            for s, e, _, nodes in self.hold_list[done:]:
                if e <= now:
                    continue
                s = max(s, now)
                for x in (s, e):
                    k = bisect_right(bounds, x) - 1
                    if x < INF and bounds[k] != x:  # split the slot at x
                        bounds.insert(k + 1, x)
                        held.insert(k + 1, held[k])
                k = bisect_right(bounds, s) - 1
                bits = self._bits(nodes)
                while k < len(bounds) and bounds[k] < e:
                    held[k] |= bits
                    k += 1
                used = True
            self._map[0], self._map[3] = len(self.hold_list), used
            return list(zip(bounds, bounds[1:] + [INF], held)) if used else []
        key = ("slots", first, len(self.hold_list))
        got = self._arrays_memo.get(key)
        if got is not None:
            return got
        holds = [(max(s, now), e, nodes) for s, e, job_id, nodes in self.hold_list if seq[job_id] < first and e > now]
        got = []
        if holds:
            # a sweep over the starts and ends: how many holds cover each node in each slot
            events: dict[float, list] = {}
            for s, e, nodes in holds:
                events.setdefault(s, []).append((1, nodes))
                if e < INF:
                    events.setdefault(e, []).append((-1, nodes))
            events.setdefault(now, [])
            times = sorted(events)
            count: dict[int, int] = {}
            for b, b2 in zip(times, times[1:] + [INF]):
                for d, nodes in events[b]:
                    for i in nodes:
                        count[i] = count.get(i, 0) + d
                got.append((b, b2, self._bits([i for i, c in count.items() if c > 0])))
        self._arrays_memo[key] = got
        return got

    def will_run_on(self, p: str, avail: list[int], req: _Req) -> tuple[float, list[int]] | None:
        """select/cons_tres `_will_run_test` on these nodes: (start, nodes that fit then) or None. Now
        if it fits now; else it removes the running jobs in end order, one batch at a time, and tries
        the job after each batch: the start is the end of the batch's last job. A batch closes when
        the next job in the whole list (on any node) ends after the barrier (the first end on these
        nodes rounded up to 30 s) plus the window, which then doubles until it reaches that job; a job
        on other nodes is passed over without that look ahead."""
        ids, room, first = self._room_at(p, avail, req)
        now, need = self.now, req.nodes
        if first is not None:  # how many nodes have room at t: one binary search over their first times
            ordered = np.sort(first[0][first[1]])

            def count(t: float) -> int:
                return int(np.searchsorted(ordered, t, side="right")) if t >= now else int(room(t).sum())
        else:
            def count(t: float) -> int:
                return int(room(t).sum())
        if count(now) >= need:
            return now, ids[room(now)].tolist()
        ends, ends_array, touches = self._job_index()
        mine = np.flatnonzero(touches(avail))  # the jobs (positions in end order) on these nodes
        if not len(mine):
            return None
        n = len(ends)
        e = ends[mine[0]]
        barrier = e + (WILL_RUN_WINDOW_S - e % WILL_RUN_WINDOW_S)
        window = WILL_RUN_WINDOW_S
        k = 0
        while True:
            # The batch from position k closes at the first job on these nodes whose successor in the
            # whole list ends after barrier + window: ends are sorted, so that is the first of ours at
            # or after the last position ending by then; with none, the batch runs to the list's end.
            cut = max(k, int(np.searchsorted(ends_array, barrier + window, side="right")) - 1)
            m = int(np.searchsorted(mine, cut))
            if m < len(mine):
                j = int(mine[m])
                last, k = ends[j], j + 1
            elif int(np.searchsorted(mine, k)) < len(mine):
                last, k = ends[mine[-1]], n
            else:
                return None
            if count(last) >= need:
                return last, ids[room(last)].tolist()
            if k >= n:
                return None
            window *= 2
            while ends[k] > barrier + window:
                window *= 2

    def _job_index(self):
        """The running jobs and those started in this plan in end order, stably sorted (equal ends
        keep the order jobs were listed or started): their ends as a list and an array, and a
        function of a node list giving, per job in that order, whether it runs on any of them.
        Made again when a job was started since."""
        if self._ends_index[0] != self.commits:
            ends, on, bounds = self._running
            if self.started:
                more = [e for e, _ in self.started]
                sizes = np.fromiter(map(len, map(itemgetter(1), self.started)), np.int64, count=len(more))
                ends = np.concatenate((ends, more))
                on = np.concatenate((on, np.fromiter(chain.from_iterable(map(itemgetter(1), self.started)), np.int64,
                                                     count=int(sizes.sum()))))
                bounds = np.concatenate((bounds, bounds[-1] + np.cumsum(sizes)))
            order = np.argsort(ends, kind="stable")
            size = len(self.names)

            def touches(nodes) -> np.ndarray:
                mask = np.zeros(size, dtype=bool)
                mask[nodes] = True
                hits = np.concatenate(([0], np.cumsum(mask[on])))
                return (hits[bounds[1:]] > hits[bounds[:-1]])[order]
            self._ends_index = (self.commits, ends[order].tolist(), ends[order], touches)
        return self._ends_index[1:]

    def slurm_choose(self, cands: list[int], need: int) -> list[int]:
        """Nodes as Slurm's select/cons_tres picks them among those that can take the job: the lowest
        node weights that suffice; among them, runs of consecutive nodes (Slurm's node order): the
        smallest run that holds the whole job, else the largest runs first."""
        weight = self.weight
        planned = [i for i in cands if self.planned[i]]
        if planned:  # nodes Slurm's own plan already holds for a pending job come first
            if len(planned) < need:
                return sorted(planned + self.slurm_choose([i for i in cands if not self.planned[i]],
                                                          need - len(planned)))
            cands = planned
        pool = cands
        for w in sorted({weight[i] for i in cands}):
            pool = [i for i in cands if weight[i] <= w]
            if len(pool) >= need:
                break
        pool.sort()
        runs: list[list[int]] = []
        for i in pool:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        whole = [r for r in runs if len(r) >= need]
        if whole:
            return min(whole, key=len)[:need]
        out: list[int] = []
        for r in sorted(runs, key=len, reverse=True):
            out += r[:need - len(out)]
            if len(out) == need:
                break
        return sorted(out)

    def _pick(self, p, req, tau_raw, all_special, t0, when, chosen_spec) -> list[int]:
        pos = self.part_pos(p)
        need = req.nodes
        tau = np.maximum(tau_raw, t0)
        if all_special:
            tau[self.row_array(p)[all_special]] = INF
        if self.slurm:  # Slurm reserves the nodes its node selection picks among those free at `when`
            return self.slurm_choose(pos[np.nonzero(tau <= when)[0]].tolist() + list(chosen_spec), need)
        sel = np.nonzero(tau <= when)[0]  # rows are in name order
        tsel = tau[sel]
        if len(sel) > need and not self.any_planned:  # keep the `need` latest; at the cut, the first by name
            cut = float(np.partition(tsel, len(tsel) - need)[len(tsel) - need])
            above = tsel > cut
            sel = np.concatenate([sel[above], sel[tsel == cut][:need - int(above.sum())]])
            tsel = tau[sel]
        order = sel[np.argsort(-tsel, kind="stable")]
        picked = [(float(tau[r]), int(pos[r])) for r in order]
        picked += [(when, i) for i in chosen_spec]
        # nodes Slurm's backfill already plans for a pending job (PLANNED) first, so that our
        # reservation lands where Slurm's is; then those freeing up last
        picked.sort(key=lambda x: (not self.planned[x[1]], -x[0], self.names[x[1]]))
        return [i for _, i in picked[:need]]

    def blocked_now(self, p: str, resv: int) -> np.ndarray:
        """Usable nodes of p that a reservation (other than resv) holds right now."""
        key = ("blocked_now", p, resv)
        got = self._allowed_memo.get(key)
        if got is None:
            got = np.zeros(len(self.part_usable[p]), dtype=bool)
            rows = self.row_array(p)
            for i in self.reserved_nodes:  # few: only they can be blocked
                r = rows[i]
                if r >= 0 and any(s <= self.now < e and k != resv for s, e, k in self.blocks[i]):
                    got[r] = True
            self._allowed_memo[key] = got
        return got

    def room_until(self, i: int, req: _Req) -> float:
        """How long node i, which has room now, keeps that room for this request (reservations, holds)."""
        until = INF
        now = self.now
        for s, e, r in self.blocks[i]:
            if r != req.resv and e > now:
                until = min(until, s)
        c, m, g = self.cf[i], self.mf[i], self.gf[i]
        for s, e, hc, hm, hg, _ in sorted(self.holds[i]):
            if e > now and (req.exclusive or c - hc < req.cpus or m - hm < req.mem or g - hg < req.gpus):
                until = min(until, s)
        return until

    def settle(self) -> None:
        """The plan is complete: only the lazily read `why` rows read this cluster from now on. What
        only the planning of starts reads (the fits-now buckets, fits and change logs, the request
        memos) is dropped, so that the collector does not scan it while the plan is kept."""
        self._buckets, self._built, self._marked_of, self.changes, self._fit_memo = {}, {}, {}, {}, {}
        self._request_memo, self._partition_request_memo, self._shape_memo = {}, {}, {}


class _Releases:
    """Every node's releases, (time, CPUs, memory, GPUs) ascending: those of the running jobs as
    flat arrays sorted by node and time (made without a Python loop over the allocations), and a node's list
    of tuples made when first asked for (commit, free_at and the breakpoints ask for a few nodes'
    lists); `add` records a job started in the plan in both (in a node's list only once it is made:
    most nodes a job starts on are never asked for)."""

    __slots__ = ("cols", "bounds", "lists", "added", "_flat", "_py", "_later", "_key")

    def __init__(self, nodes: int, node, t, c, m, g) -> None:
        order = np.lexsort((t, node))  # by node and time; a node's list is sorted as tuples when made
        self.cols = tuple(a[order] for a in (node, t, c, m, g))
        self.bounds = np.searchsorted(self.cols[0], np.arange(nodes + 1)).tolist()  # node i: bounds[i]:bounds[i + 1]
        self.lists: dict[int, list] = {}
        self.added: tuple[list, ...] = ([], [], [], [], [])
        self._flat = None
        self._py = None  # the columns as Python lists, made for the first node list asked for
        self._later: dict[int, list] = {}  # added releases of the nodes whose list is not made yet
        self._key = None  # (node, time) of the running jobs' releases as complex numbers (see flat)

    def __getitem__(self, i: int) -> list[tuple[float, int, int, int]]:
        got = self.lists.get(i)
        if got is None:
            a, b = self.bounds[i], self.bounds[i + 1]
            if b > a and self._py is None:
                self._py = [col.tolist() for col in self.cols[1:]]
            got = sorted(zip(*(col[a:b] for col in self._py))) if b > a else []
            later = self._later.pop(i, None)
            if later is not None:  # sorted as tuples, as insort would have placed them
                got = sorted(got + later)
            self.lists[i] = got
        return got

    def add(self, i: int, t: float, c: int, m: int, g: int) -> None:
        got = self.lists.get(i)
        if got is not None:
            insort(got, (t, c, m, g))
        else:
            self._later.setdefault(i, []).append((t, c, m, g))
        added = self.added
        added[0].append(i)
        added[1].append(t)
        added[2].append(c)
        added[3].append(m)
        added[4].append(g)
        self._flat = None

    def flat(self) -> tuple[np.ndarray, ...]:
        """(node, time, CPUs, memory, GPUs) of every release, the added ones too, sorted by node
        and time."""
        if self._flat is None:
            if not self.added[0]:
                self._flat = self.cols
            else:
                added = [np.array(b, dtype=a.dtype) for a, b in zip(self.cols, self.added)]
                if np.isnan(added[1]).any() or np.isnan(self.cols[1]).any():
                    cols = [np.concatenate((a, b)) for a, b in zip(self.cols, added)]
                    # by node and time: the order of equal times changes no time nor total of a row
                    order = np.lexsort((cols[1], cols[0]))
                    self._flat = tuple(a[order] for a in cols)
                else:
                    # the same order without sorting the running jobs' releases again: the few added
                    # ones, sorted (stable) by (node, time) as complex numbers (numpy orders them by
                    # real part, then imaginary), go in after the equal and smaller ones
                    if self._key is None:
                        self._key = _node_time_key(self.cols[0], self.cols[1])
                    key = _node_time_key(added[0], added[1])
                    order = np.argsort(key, kind="stable")
                    # where each added release lands in the merged columns (np.insert, without its
                    # per-call overhead: five columns share the positions)
                    at = np.searchsorted(self._key, key[order], side="right") + np.arange(len(order))
                    n = len(self._key) + len(order)
                    base = np.ones(n, dtype=bool)
                    base[at] = False
                    merged = []
                    for a, b in zip(self.cols, added):
                        col = np.empty(n, dtype=a.dtype)
                        col[base] = a
                        col[at] = b[order]
                        merged.append(col)
                    self._flat = tuple(merged)
        return self._flat

    def counts(self) -> np.ndarray:
        got = np.diff(self.bounds)
        if self.added[0]:
            got += np.bincount(self.added[0], minlength=len(got))
        return got


def _node_time_key(node: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(node, time) as complex numbers, set part by part: `node + 1j * t` would make the real part
    of an unlimited job's release (t = inf) NaN (0 * inf), which sorts it after every node's."""
    key = np.empty(len(node), np.complex128)
    key.real = node
    key.imag = t
    return key


def _clamped_columns(totals: list[list], free: list[list]) -> tuple[list[list], np.ndarray, np.ndarray]:
    """Per-node totals (at least 0) and free resources (at least 0, at most the total), each a
    list, and the same as (3, nodes) int64 arrays; most snapshots need no change, which numpy finds
    without a Python loop over the nodes."""
    n = len(totals[0])
    if n:
        t, f = np.array(totals), np.array(free)
        if t.dtype == np.int64 and f.dtype == np.int64 and (f >= 0).all() and (f <= t).all():
            return totals + free, t, f  # free >= 0 and <= total: totals >= 0 too
    ct, mt, gt = (_clamped(v) for v in totals)
    lists = [ct, mt, gt, _clamped(free[0], ct), _clamped(free[1], mt), _clamped(free[2], gt)]
    return lists, np.array(lists[:3], dtype=np.int64).reshape(3, n), np.array(lists[3:], dtype=np.int64).reshape(3, n)


def _clamped(values: list, cap: list | None = None) -> list:
    """A node attribute per node, at least 0 and at most cap (when given); most snapshots need no
    change, which C-level checks find without a Python loop."""
    if (not values or min(values) >= 0) and (cap is None or all(map(le, values, cap))):
        return values
    if cap is None:
        return [v if v > 0 else 0 for v in values]
    return [0 if v < 0 else v if v < t else t for v, t in zip(values, cap)]


# cons_tres `_will_run_test`: the first batch's window, doubled after every batch that fails
WILL_RUN_WINDOW_S = 30


def _has_features(wanted: frozenset, node: frozenset) -> bool:
    """Every term of a request on a node: a feature name, or a set of alternatives (Slurm's a|b),
    each the features all of which the node must have (a&b)."""
    return wanted <= node or all(t in node if type(t) is str else any(a <= node for a in t) for t in wanted)


def _feature_text(wanted: frozenset) -> str:
    """A request's features as Slurm writes a constraint: "ib&(h100|a100&nvlink)"."""
    terms = sorted(t for t in wanted if type(t) is str)
    terms += ["(" + "|".join(sorted("&".join(sorted(a)) for a in t)) + ")" for t in wanted if type(t) is not str]
    return "&".join(terms)


def _shape(cpus: int, mem: int, gpus: int) -> str:
    parts = [f"{cpus} CPU{'s' if cpus != 1 else ''}"]
    if mem:
        parts.append(f"{mem} MiB")
    if gpus:
        parts.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------ planning

@dataclass(slots=True)
class _Job:
    job: PendingJob
    partition: str
    reasons: list
    state: str = "waiting"
    req: _Req | None = None
    estimate: bool = False  # blocked only until a known time (begin time, reservation start)
    t0: float = 0.0
    expected: float | None = None
    nodes: tuple[str, ...] = ()
    what_if: WhatIf | None = None
    reserved: bool = False  # Slurm mode: holds its own reservation (expected start = its start)
    behind: str | None = None  # startable by backfill: the top job it does not delay
    unplanned: bool = False  # the plan's deadline passed before its turn: no search, no estimate


class _Policy:
    """How jobs that do not start by priority are treated, and the QOS limits that hold jobs back.

    Without a BackfillConfig: EASY, one reservation per partition (the top job). With one (Slurm's
    sched/backfill): every job the backfill cycle tests that cannot start now gets a reservation if
    it starts within bf_window and its priority reaches bf_min_prio_reserve; at most bf_max_job_test
    jobs are tested (bf_max_job_part per partition, bf_max_job_user per user); with sched/builtin
    nothing backfills: jobs start in priority order only. A job held by a QOS limit neither starts
    nor gets a reservation (Slurm does the same)."""

    def __init__(self, inp: PlannerInput, later_held: frozenset = frozenset()) -> None:
        self.later_held = later_held  # jobs the QOS usage after this cycle's starts holds back
        cfg = inp.config
        self.cfg = cfg
        self.slurm = cfg is not None
        self.builtin = cfg is not None and cfg.scheduler_type.endswith("builtin")
        self.name = "easy" if cfg is None else ("slurm-builtin" if self.builtin else "slurm-backfill")
        self.tested = 0
        self.per_part: dict[str, int] = {}
        self.per_user: dict[str, int] = {}
        self.qos = {q.name: q for q in inp.qos}
        self.licenses = dict(inp.licenses) if inp.licenses is not None else None  # free now
        # running usage per (qos, user) and per qos: [jobs, GPUs, CPUs, nodes]
        self.used: dict = {}
        if self.qos:
            for r in inp.running:
                q = r.qos or "normal"
                if q in self.qos:
                    self._add(q, r.user, sum(a.gpus for a in r.allocations), sum(a.cpus for a in r.allocations),
                              len(r.allocations))

    def _add(self, q: str, user: str, gpus: int, cpus: int, nodes: int) -> None:
        for key in ((q, user), q):
            u = self.used.get(key)
            if u is None:
                u = self.used[key] = [0, 0, 0, 0]
            u[0] += 1
            u[1] += gpus
            u[2] += cpus
            u[3] += nodes

    def limit(self, job: PendingJob, req: _Req) -> Reason | None:
        """The QOS limit that holds the job now, or None."""
        q = self.qos.get(job.qos or "normal")
        if q is None:
            return None
        if q.max_wall_s is not None and job.time_limit_s > q.max_wall_s:
            return Reason("qos_limit", f"its time limit exceeds QOS {q.name}'s MaxWall {format_duration(q.max_wall_s)} "
                          "(Slurm: QOSMaxWallDurationPerJobLimit)", "error")
        mine = self.used.get((q.name, job.user), (0, 0, 0, 0))
        grp = self.used.get(q.name, (0, 0, 0, 0))
        want = (1, req.gpus * req.nodes, req.cpus * req.nodes, req.nodes)
        checks = (("MaxJobsPerUser", q.max_jobs_per_user, mine, 0, "QOSMaxJobsPerUserLimit", "running jobs"),
                  ("MaxTRESPerUser gres/gpu", q.max_gpus_per_user, mine, 1, "QOSMaxGRESPerUser", "GPUs"),
                  ("MaxTRESPerUser cpu", q.max_cpus_per_user, mine, 2, "QOSMaxCpuPerUserLimit", "CPUs"),
                  ("MaxTRESPerUser node", q.max_nodes_per_user, mine, 3, "QOSMaxNodePerUserLimit", "nodes"),
                  ("GrpJobs", q.grp_jobs, grp, 0, "QOSGrpJobsLimit", "running jobs"),
                  ("GrpTRES gres/gpu", q.grp_gpus, grp, 1, "QOSGrpGRES", "GPUs"),
                  ("GrpTRES cpu", q.grp_cpus, grp, 2, "QOSGrpCpuLimit", "CPUs"),
                  ("GrpTRES node", q.grp_nodes, grp, 3, "QOSGrpNodeLimit", "nodes"))
        for label, cap, used, k, slurm, what in checks:
            if cap is not None and used[k] + want[k] > cap:
                whose = f"user {job.user or '?'}" if used is mine else f"QOS {q.name}"
                return Reason("qos_limit", f"QOS {q.name} {label}={cap}: {whose} already has {used[k]} {what} "
                              f"running and this job needs {want[k]} more (Slurm: {slurm}); it starts when one "
                              "ends, and gets no reservation meanwhile", "warning")
        return None

    def no_licenses(self, job: PendingJob) -> Reason | None:
        """Why the job cannot start now for want of licenses, or None (unknown pools: not checked)."""
        if self.licenses is None or not job.licenses:
            return None
        short = [(name, n, self.licenses.get(name, 0)) for name, n in job.licenses if n > self.licenses.get(name, 0)]
        if not short:
            return None
        return Reason("licenses", "it needs " + ", ".join(
            f"{n} license(s) {name}, {free} free" + ("" if name in self.licenses else " (no such license)")
            for name, n, free in short) + " (scontrol show licenses); it starts when they are released")

    def held_later(self, job: PendingJob) -> Reason | None:
        if job.job_id not in self.later_held:
            return None
        return Reason("qos_limit", f"QOS {job.qos or 'normal'}: the jobs that start now (some of lower priority, "
                      "which Slurm's main scheduler starts before its backfill cycle) use up a limit of this "
                      "QOS, so Slurm holds it and gets it no reservation until one ends", "warning")

    def started(self, job: PendingJob, req: _Req) -> None:
        if self.licenses is not None:
            for name, n in job.licenses:
                self.licenses[name] = self.licenses.get(name, 0) - n
        q = job.qos or "normal"
        if q in self.qos:
            self._add(q, job.user, req.gpus * req.nodes, req.cpus * req.nodes, req.nodes)

    def untested(self, job: PendingJob, p: str) -> Reason | None:
        """Slurm mode: why this cycle's backfill does not consider the job (it is counted when it is)."""
        cfg = self.cfg
        if self.tested >= cfg.bf_max_job_test:
            return Reason("bf_max_job_test", f"bf_max_job_test={cfg.bf_max_job_test}: Slurm's backfill tests only that "
                          "many jobs per cycle; this one waits for a later cycle or the main scheduler")
        if cfg.bf_max_job_part and self.per_part.get(p, 0) >= cfg.bf_max_job_part:
            return Reason("bf_max_job_part", f"bf_max_job_part={cfg.bf_max_job_part}: Slurm's backfill tests only that "
                          f"many jobs of partition {p} per cycle")
        if cfg.bf_max_job_user and self.per_user.get(job.user, 0) >= cfg.bf_max_job_user:
            return Reason("bf_max_job_user", f"bf_max_job_user={cfg.bf_max_job_user}: Slurm's backfill tests only that "
                          f"many jobs of user {job.user or '?'} per cycle")
        self.tested += 1
        self.per_part[p] = self.per_part.get(p, 0) + 1
        self.per_user[job.user] = self.per_user.get(job.user, 0) + 1
        return None

    def no_reservation(self, job: PendingJob, when: float, now: float) -> Reason | None:
        """Slurm mode: why the backfill cycle makes no reservation for a job it tested."""
        cfg = self.cfg
        if cfg.bf_min_prio_reserve and (job.priority or 0) < cfg.bf_min_prio_reserve:
            return Reason("bf_min_prio_reserve", f"bf_min_prio_reserve={cfg.bf_min_prio_reserve}: its priority "
                          f"{job.priority or 0:.0f} is lower, so Slurm starts it only when it fits now and never "
                          "reserves for it")
        if when - now > cfg.bf_window_s:
            return Reason("outside_bf_window", f"outside bf_window ({format_duration(cfg.bf_window_s)}): its earliest "
                          f"start {_fmt_ts(when)} is later, so Slurm will not plan this job (no reservation; later "
                          "jobs may take its resources)", "warning")
        return None

    def describe(self) -> dict | None:
        cfg = self.cfg
        if cfg is None:
            return None
        return {"type": cfg.scheduler_type, "policy": self.name,
                "parameters": {"bf_window_s": cfg.bf_window_s, "bf_resolution_s": cfg.bf_resolution_s,
                               "bf_max_job_test": cfg.bf_max_job_test, "bf_max_job_part": cfg.bf_max_job_part,
                               "bf_max_job_user": cfg.bf_max_job_user, "bf_min_prio_reserve": cfg.bf_min_prio_reserve,
                               "bf_continue": cfg.bf_continue, "bf_busy_nodes": cfg.bf_busy_nodes},
                "not_modelled": list(cfg.not_modelled)}


def plan(inp: PlannerInput, deadline_s: float | None = None) -> BackfillPlan:
    """The EASY plan for one snapshot: per partition its top job, windows, startable jobs and a `why`
    for every pending job (see the module docstring for the semantics).

    deadline_s bounds the time spent (a live page must not hang on a slow Slurm-mode plan): the jobs
    whose turn comes after it get reason `not_planned_in_time` and no estimate, and the waiting rows
    first read more than deadline_s after the first one get it too; `BackfillPlan.deadline` counts them.
    """
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    with gc_paused():  # tens of thousands of short-lived tuples, no cycles (see gcpause)
        got, later_held = _plan(inp, frozenset(), deadline, deadline_s)
        if later_held and (deadline is None or time.monotonic() < deadline):
            # Slurm mode with QOS limits: jobs started now, of lower priority too, can use up a QOS limit
            # of a job this plan reserved for; Slurm's main scheduler starts them before its backfill
            # cycle, which then makes no reservation for the held job. Planned again with it held.
            got, _ = _plan(inp, later_held, deadline, deadline_s)
    return got


def _plan(inp: PlannerInput, later_held: frozenset, deadline: float | None = None,
          deadline_s: float | None = None) -> tuple[BackfillPlan, frozenset]:
    """One planning pass; also the reserved jobs that the QOS usage at its end holds back. Past
    `deadline` (time.monotonic()) the remaining jobs are left unplanned (see `plan`)."""
    late: set[str] = set()  # ids of the jobs the deadline left unplanned
    cl = _Cluster(inp)
    now = cl.now
    tops: dict[str, tuple[str, float, list[int]]] = {}
    starts: dict[str, list[Startable]] = {}
    backfilled: list[tuple[int, int, int]] = []
    fit_memo, version, request_memo = cl._fit_memo, cl.version, cl._request_memo
    policy = _Policy(inp, later_held)
    fast = not policy.slurm and not policy.qos
    # Most jobs of a long queue wait: eligible now, their request already known not to fit in any of
    # their partitions, and every such partition already has its top job.
    # Those take the fast path below (a tuple, no planning); the others are planned one by one.
    jobs: list = []
    homes: set[str] = set()
    # Requests (by their memo entry's id) known to wait: each partition has its top job and the
    # request does not fit now there. Both stay true for the rest of the pass (tops are only added,
    # and room only shrinks), so a request is checked until it first qualifies, then never again.
    waits: set[int] = set()
    # A job whose key (below) was seen on a job that took the fast path takes it too: one tuple and
    # one lookup per job, for most of a long queue (jobs with a reservation are left out: their
    # request depends on their user and account too).
    known: dict[tuple, tuple] = {}
    for job in inp.pending:
        # everything that decides whether a job (without a reservation) takes the fast path: its
        # partitions and request, and what could block it; read inline, as the interpreter's
        # specialised attribute loads cost less than attrgetter's generic lookups
        key = (job.partitions, job.held, job.dependency, job.begin_time, job.time_limit_s, job.reservation,
               job.gpu_type, job.features, job.feature_alternatives, job.min_nodes, job.gpus_per_node,
               job.gpus_per_job, job.cpus_per_node, job.tasks, job.cpus_per_task, job.mem_per_node_mb, job.exclusive)
        prep = known.get(key)
        if prep is not None:
            jobs.append(prep)
            continue
        # _prepare's memo key: key[4:] is _REQUEST_FIELDS(job), already read
        prep = request_memo.get((job.partitions, key[4:], (job.user, job.account) if job.reservation else None))
        if fast and prep is not None and prep[0] and not prep[3] and not job.held \
                and job.dependency not in DEPENDENCY_BLOCKING and (job.begin_time is None or job.begin_time <= now):
            if id(prep) not in waits:
                for p, req in prep[0]:
                    if req.resv >= 0 or p not in tops:
                        break
                    m = fit_memo.get((p, req))
                    if m is None or m[1] is not None:  # "does not fit" stays true (see fit_now)
                        break
                else:
                    waits.add(id(prep))
            if id(prep) in waits:
                if not job.reservation:
                    known[key] = prep
                jobs.append(prep)
                continue
        elif prep is not None and prep[0] and not prep[3] and job.dependency != "never" \
                and (job.held or job.dependency == "pending") \
                and job.begin_time is None and prep[0][0][1].resv < 0:
            # held or waiting on a dependency, nothing else in the way: blocked, with no estimate; the
            # row is shared by the jobs with the same key (and dependency text)
            same = (key, job.dependency_text) if job.dependency == "pending" else key
            row = known.get(same) if not job.reservation else None
            if row is None:
                row = (prep[2], prep[1] + ((_HELD,) if job.held else ()) + ((Reason(
                    "dependency", f"it waits for its dependency {job.dependency_text}".rstrip()),)
                    if job.dependency == "pending" else ()))
                if not job.reservation:
                    known[same] = row
            jobs.append(row)
            continue
        if deadline is not None and time.monotonic() > deadline:
            rec = _unplanned(cl, job, late)
        else:
            rec = _plan_job(cl, job, tops, starts, backfilled, policy, key[4:])
            if fast and not job.reservation and ((rec.estimate and rec.state == "blocked") or (
                    rec.state == "never" and rec.req is None)):
                # blocked until its begin time, or no partition can ever take it: its record (all
                # but the job, which _rows takes from the queue) follows from the key's fields
                # alone, so jobs with this key share it
                known[key] = rec
        homes.add(rec.partition)  # the others' partitions exist: they had a request there
        jobs.append(rec)
    if policy.slurm and backfilled:
        _next_cycle(cl, tops, jobs)
    windows = _windows(cl, backfilled)
    cl.settle()
    # Reasons, expected start and what-if of the jobs left waiting depend only on the request, its
    # partition and its earliest allowed start: computed once per distinct triple, shared by its jobs,
    # when a row is first read (the plan is complete by then and no longer changes).
    memo: dict = {}
    grouped: list[dict] = []
    rows_deadline: list[float] = []  # the rows get deadline_s of their own, from the first one read

    def rows() -> dict[str, list]:
        """Every job's row, grouped by partition: made once, when the first partition's `why` is read."""
        if not grouped:
            with gc_paused():
                grouped.append(_rows(inp.pending, jobs, now))
        return grouped[0]

    def resolve(r: list) -> JobWhy:
        """A lazy row [job, partition, rank, state, reasons, request, earliest start, estimate only]:
        reasons, expected start and what-if once per (partition, request, earliest start)."""
        job, part, n, state, reasons, req, t0, estimate_only = r
        key = (part, req, t0)
        got = memo.get(key)
        if got is None:
            if deadline_s is not None:
                if not rows_deadline:
                    rows_deadline.append(time.monotonic() + deadline_s)
                elif time.monotonic() > rows_deadline[0]:
                    late.add(job.job_id)
                    return JobWhy(job, part, n, "waiting", reasons + (_NOT_PLANNED,), None, (), None)
            got = memo[key] = _waiting_reasons(cl, part, req, t0, tops.get(part))
        if estimate_only:  # blocked until a known time (begin time, reservation start)
            return JobWhy(job, part, n, state, reasons, got[0], got[1], None)
        return JobWhy(job, part, n, "waiting" if got[0] is not None else "blocked",
                      reasons + got[2] if reasons else got[2], got[0], got[1], got[3])

    parts = []
    for p in sorted(set(cl.part_nodes) | homes):
        top = tops.get(p)
        parts.append(PartitionPlan(
            p, p in cl.part_nodes, len(cl.part_nodes.get(p, ())), len(cl.part_usable.get(p, ())),
            TopJob(top[0], top[1], tuple(cl.names[i] for i in top[2])) if top else None,
            windows.get(p, ()), tuple(starts.get(p, ())), _Whys(lambda p=p: rows().get(p, ()), resolve)))
    held = frozenset()
    if policy.slurm and policy.qos and not later_held:
        held = frozenset(r.job.job_id for r in jobs if type(r) is _Job and (r.state == "top" or r.reserved)
                         and r.req is not None and policy.limit(r.job, r.req) is not None)
    return BackfillPlan(cl.now, tuple(parts), policy.name, policy.describe(),
                        None if deadline_s is None else {"deadline_s": deadline_s, "not_planned_in_time": late}), held


def _rows(pending, jobs: list, now: float) -> dict[str, list]:
    """The `why` rows of a plan, per partition, in queue order (see _Whys and `resolve` in _plan)."""
    rows: dict[str, list] = {}
    ranked: dict[str, int] = {}  # queue position among the jobs that can run at all (never: none)
    for job, rec in zip(pending, jobs):
        if type(rec) is tuple:
            part = rec[0] if len(rec) == 2 else rec[0][0][0]
            n = ranked[part] = ranked.get(part, 0) + 1
            # blocked: (partition, reasons); the fast path: (requests, reasons, home, down), waiting from now
            row = (job, part, n, "blocked", rec[1], None, (), None) if len(rec) == 2 else \
                [job, part, n, "waiting", rec[1], rec[0][0][1], now, False]
        else:
            part = rec.partition
            if rec.state == "never":
                n = None
            else:
                n = ranked[part] = ranked.get(part, 0) + 1
            if (rec.state == "waiting" and not rec.reserved and not rec.unplanned) or rec.estimate:
                row = [job, part, n, rec.state, tuple(rec.reasons), rec.req, rec.t0, rec.state != "waiting"]
            elif rec.state == "startable":  # its reason's node list is compressed only now, when read
                row = (job, part, n, rec.state, (*rec.reasons, Reason(
                    "startable", f"it can start now on {compress(rec.nodes)}" + (
                        f" without delaying top job {rec.behind}" if rec.behind is not None else ""))),
                    rec.expected, rec.nodes, rec.what_if)
            else:  # (the job from the queue: a record can be shared, see _plan)
                row = (job, part, n, rec.state, tuple(rec.reasons), rec.expected, rec.nodes, rec.what_if)
        part_rows = rows.get(part)
        if part_rows is None:
            part_rows = rows[part] = []
        part_rows.append(row)
    return rows


_HELD = Reason("held", "it is held (scontrol release it to let it run)", "warning")
_NOT_PLANNED = Reason("not_planned_in_time", "the plan's deadline passed before its turn: gangwatch did not plan "
                      "it in this refresh (no estimate; Slurm itself is not affected)", "warning")


def _unplanned(cl: _Cluster, job: PendingJob, late: set) -> _Job:
    """A job whose turn came after the plan's deadline: its partition and request only, no search."""
    reqs, reasons, home, _ = _prepare(cl, job)
    rec = _Job(job, home, list(reasons))
    if not reqs:
        rec.state = "never"
        return rec
    rec.req, rec.unplanned = reqs[0][1], True
    rec.reasons.append(_NOT_PLANNED)
    late.add(job.job_id)
    return rec


def _prepare(cl: _Cluster, job: PendingJob, fields: tuple | None = None):
    """(requests per usable partition, reasons when there is none, home partition, partitions down),
    shared by every job with the same partitions and request. fields: _REQUEST_FIELDS(job) if
    already read."""
    key = (job.partitions, _REQUEST_FIELDS(job) if fields is None else fields,
           (job.user, job.account) if job.reservation else None)
    got = cl._request_memo.get(key)
    if got is not None:
        return got
    reqs: list[tuple[str, _Req]] = []
    missing, problems = [], []
    for p in job.partitions:
        if p not in cl.part_nodes:
            missing.append(Reason("no_such_partition", f"partition {p} does not exist", "error"))
            continue
        r = cl.request(job, p)
        if isinstance(r, Reason):
            problems.append(r)
        else:
            reqs.append((p, r))
    if not job.partitions:
        missing.append(Reason("no_such_partition", "it names no partition", "error"))
    if reqs:
        home = reqs[0][0]
        reasons = tuple(missing)  # problems in other partitions do not matter once one can take it
    else:
        home = next((p for p in job.partitions if p in cl.part_nodes),
                    job.partitions[0] if job.partitions else "")
        reasons = tuple(missing + problems)
    down = bool(cl.part_info) and all(cl.part_info.get(p) is not None and not cl.part_info[p].up
                                      for p, _ in reqs)
    got = cl._request_memo[key] = (tuple(reqs), reasons, home, down)
    return got


def _plan_job(cl: _Cluster, job: PendingJob, tops, starts, backfilled, policy: _Policy,
              fields: tuple | None = None) -> _Job:
    now = cl.now
    reqs, reasons, home, down = _prepare(cl, job, fields)
    rec = _Job(job, home, list(reasons))
    if not reqs:
        rec.state = "never"
        return rec
    rec.req = req0 = reqs[0][1]
    rec.t0 = t0 = cl.earliest_allowed_start(req0) if req0.resv >= 0 else now
    if job.held or job.dependency in DEPENDENCY_BLOCKING or down or t0 > now or (
            job.begin_time is not None and job.begin_time > now):
        if job.dependency == "never":
            rec.reasons.append(Reason(
                "dependency_never", f"NEVER SATISFIABLE: its dependency {job.dependency_text or ''} can never be "
                "met, so it will wait forever; cancel it or change the dependency".replace("  ", " "), "error"))
            rec.state = "never"
            return rec
        if job.held:
            rec.reasons.append(_HELD)
        if job.dependency == "pending":
            rec.reasons.append(Reason("dependency", f"it waits for its dependency {job.dependency_text}".rstrip()))
        if down:
            rec.reasons.append(Reason("partition_down", f"partition {home} is down", "warning"))
        if job.begin_time is not None and job.begin_time > now:
            rec.t0 = max(t0, float(job.begin_time))
            rec.reasons.append(Reason("begin_time", f"its begin time is {_fmt_ts(job.begin_time)}"))
        elif t0 > now:
            rec.reasons.append(Reason("reservation_not_started",
                                      f"its reservation {job.reservation} starts at {_fmt_ts(t0)}"))
        rec.state = "blocked"
        rec.estimate = not (job.held or job.dependency == "pending" or down)
        return rec
    held_by = policy.limit(job, req0) or policy.held_later(job)
    if held_by is not None:
        rec.reasons.append(held_by)
        rec.state = "blocked"
        return rec
    no_licenses = policy.no_licenses(job)
    if no_licenses is not None:
        # licenses are not planned over time: like a QOS limit, it holds no nodes meanwhile
        rec.reasons.append(no_licenses)
        rec.state = "blocked"
        return rec
    untested: Reason | None = None
    for p, req in reqs:
        if p in tops and policy.slurm:
            # behind a job that cannot start: only the backfill cycle can start it (never sched/builtin)
            if policy.builtin:
                continue
            untested = untested or policy.untested(job, p)
            if untested is not None:
                continue
        fit = cl.fit_now(p, req)
        if fit is not None:
            by = "backfill" if p in tops else "priority"
            taken = cl.commit(fit, req)
            policy.started(job, req)
            if by == "backfill":
                backfilled.extend(taken)
            names = tuple(cl.names[i] for i in fit)
            starts.setdefault(p, []).append(Startable(job.job_id, names, now + req.duration, by))
            rec.partition, rec.req, rec.state = p, req, "startable"
            rec.expected, rec.nodes = now, names
            rec.behind = tops[p][0] if by == "backfill" else None  # its reason is written by _rows
            return rec
    if untested is not None:
        rec.reasons.append(untested)
        return rec
    unplanned = False
    for p, req in reqs:
        if p in tops and not policy.slurm:
            continue
        if p in tops and policy.builtin:
            rec.reasons.append(Reason("sched_builtin", f"SchedulerType=sched/builtin: jobs start in priority order "
                                      f"only, and top job {tops[p][0]} of partition {p} is ahead of it"))
            return rec
        if policy.slurm and p not in tops:
            untested = policy.untested(job, p)  # the cycle's first job here is tested too
            if untested is not None:
                rec.reasons.append(untested)
                return rec
        when, nodes = (cl.slurm_earliest if policy.slurm else cl.earliest)(p, req, now)
        if when is None:
            unplanned = unplanned or policy.slurm
            continue
        if policy.slurm:
            why_not = policy.no_reservation(job, when, now)
            if why_not is not None:
                rec.partition, rec.req = p, req
                rec.reasons.append(why_not)
                return rec
        # why it cannot start now, from the plan as it stands before its own reservation
        _, _, now_reasons, what_if = _waiting_reasons(cl, p, req, now, tops.get(p), nodes=False)
        cl.hold(nodes, when, req, job.job_id)
        rec.partition, rec.req = p, req
        rec.expected, rec.nodes, rec.what_if = when, tuple(cl.names[i] for i in nodes), what_if
        if p in tops:  # Slurm mode: a reservation of its own behind the top job
            rec.reserved = True
            rec.reasons.append(Reason("reserved", f"Slurm's backfill reserves it from {_fmt_ts(when)} on "
                                      f"{compress(rec.nodes)} (every job a cycle tests gets a reservation)"))
            rec.reasons += [r for r in now_reasons if r.code != "expected_start"]
            return rec
        tops[p] = (job.job_id, when, nodes)
        rec.state = "top"
        rec.reasons.append(Reason("top_job", f"it is the top job of partition {p}: reserved from "
                                  f"{_fmt_ts(when)} on {compress(rec.nodes)}"))
        rec.reasons += [r for r in now_reasons if r.code != "expected_start"]
        return rec
    if unplanned:
        rec.reasons.append(Reason("no_reservation", "Slurm's backfill makes no reservation for it: the nodes that "
                                  "the reservations of higher-priority jobs leave free do not suffice, and none of "
                                  "them frees up within its time limit (backfill.c finds no later_start); "
                                  "lower-priority jobs may take its nodes meanwhile"))
    return rec  # waiting; explained once the plan is complete


def _next_cycle(cl: _Cluster, tops: dict, jobs: list) -> None:
    """Slurm mode: the top jobs' starts as the next backfill cycle reports them (what `squeue --start`
    shows once the jobs started now run). That cycle searches again from its own start, now, with
    the jobs backfilled in this one running and only the reservations made before the top job's:
    they take part in the will-run test's batches, which can end at one of their ends (later than
    this cycle's start, though the top job does not need their nodes), or start earlier (their ends
    align the batches differently, or an advanced reservation that this cycle's retry from a later
    start ran into is not in the way from now)."""
    recs = {r.job.job_id: r for r in jobs if type(r) is _Job and r.state == "top"}
    for p, (job_id, when, nodes) in list(tops.items()):
        rec = recs.get(job_id)
        if rec is None or rec.req is None:
            continue
        again, _ = cl.slurm_earliest(p, rec.req, rec.t0, job_id)
        if again is not None and again != when:
            tops[p] = (job_id, again, nodes)
            rec.expected = again
            rec.reasons = [Reason("top_job", f"it is the top job of partition {p}: reserved from {_fmt_ts(again)} "
                                  f"on {compress(rec.nodes)} (Slurm's next backfill cycle, with the jobs started now "
                                  f"running, searches again from now; this cycle: {_fmt_ts(when)})")
                           if r.code == "top_job" else r for r in rec.reasons]


@lru_cache(maxsize=4096)
def _fmt_ts(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _waiting_reasons(cl: _Cluster, p: str, req: _Req, t0: float, top, nodes: bool = True):
    """(expected start, its nodes (with `nodes`), reasons, what-if) of a job that cannot start now."""
    when, nodes, raw, unblocked, frag, what_if_s, what_if_nodes, blockers = _facts(cl, p, req, t0, nodes)
    names = tuple(cl.names[i] for i in nodes)
    reasons: list[Reason] = []
    if when is None:
        _, _, _, _, ct, mt, gt = cl.now_columns(p)
        big = (ct >= req.cpus) & (mt >= req.mem) & (gt >= req.gpus)
        mask = cl.allowed_mask(p, req)
        if int((big if mask is None else big & mask).sum()) < req.nodes:
            usable = len(cl.part_usable.get(p, ()))
            total = len(cl.part_nodes.get(p, ()))
            down = [cl.names[i] for i in cl.part_nodes[p] if not cl.usable[i]]
            reasons.append(Reason(
                "no_usable_nodes", f"not enough usable nodes: {usable} of {total} in partition {p} are usable"
                + (f" ({compress(down)} down or drained)" if down else ""), "warning"))
        else:
            if top is not None:
                reasons.append(Reason("priority", f"it waits behind top job {top[0]} (reserved from "
                                      f"{_fmt_ts(top[1])} with no end)"))
            reasons.append(Reason("no_start_in_plan", "no start time exists in the plan: reservations or holds "
                                  "without an end cover the nodes it needs", "warning"))
        return None, names, tuple(reasons), None
    if raw >= req.nodes and unblocked < req.nodes and blockers:
        reasons.append(Reason("reservation", "reservation " + ", ".join(
            f"{r.name}{' (maintenance)' if r.maintenance else ''} on {compress(r.nodes)} from {_fmt_ts(r.start)}"
            f" to {_fmt_ts(r.end)}" for r in blockers) + " blocks the nodes it could use", "warning"))
    if top is not None:
        if unblocked >= req.nodes:
            msg = (f"it could start now but would delay top job {top[0]}, reserved from {_fmt_ts(top[1])} "
                   f"on {compress([cl.names[i] for i in top[2]])}")
        else:
            msg = f"it waits behind top job {top[0]} (reserved from {_fmt_ts(top[1])})"
        reasons.append(Reason("priority", msg))
    if raw < req.nodes:
        reasons.append(Reason("resources", f"it needs {req.nodes} node(s) with {_shape(req.cpus, req.mem, req.gpus)}"
                              f"{' (whole nodes)' if req.exclusive else ''} free; {raw} have that now"))
    if frag:
        reasons.append(Reason("fragmentation", frag))
    what_if = None
    if what_if_s is not None and what_if_s < req.duration:
        wnames = tuple(cl.names[i] for i in what_if_nodes)
        what_if = WhatIf(int(what_if_s), wnames, f"with --time at most {format_duration(what_if_s)} it "
                         f"could start now on {compress(wnames)}")
    reasons.append(Reason("expected_start", f"expected to start at {_fmt_ts(when)} at the earliest"
                          + ("" if when > cl.now else " (now, once the jobs ahead of it are placed)")))
    return when, names, tuple(reasons), what_if


def _facts(cl: _Cluster, p: str, req: _Req, t0: float, nodes: bool = True):
    """What a waiting job's reasons need, computed once per distinct request in the final plan."""
    when, nodes = cl.earliest(p, req, t0, nodes)
    fits, raw, plain, fit_special, frag = _now_facts(cl, p, req)
    end = cl.now + req.duration
    unblocked = plain
    blockers: dict[int, Reservation] = {}
    room: list[tuple[float, int]] = []
    for i in fit_special:
        if cl._room_now(i, req, end, with_holds=False) is not None:
            unblocked += 1
        else:
            for s, e, k in cl.blocks[i]:
                if k != req.resv and s < end and e > cl.now:
                    blockers[k] = cl.reservations[k]
        until = cl.room_until(i, req)
        if until > cl.now:
            room.append((until, i))
    what_if_s, what_if_nodes = None, []
    if plain < req.nodes <= plain + len(room):
        room.sort(key=lambda x: (-x[0], cl.names[x[1]]))
        span = room[req.nodes - plain - 1][0] - cl.now
        span = (span // 60) * 60
        if MIN_WHAT_IF_S <= span:
            pos = cl.part_pos(p)
            special = set(fit_special)
            plain_nodes = [i for i in pos[np.nonzero(fits)[0]].tolist() if i not in special]
            what_if_s = span
            what_if_nodes = plain_nodes + [i for _, i in room[:req.nodes - plain]]
    return when, nodes, raw, unblocked, frag, what_if_s, what_if_nodes, list(blockers.values())


def _now_facts(cl: _Cluster, p: str, req: _Req):
    """The part of `_facts` that does not depend on the time limit: which nodes have room now
    (ignoring reservations and holds), which of them are special, and the fragmentation message."""
    key = ("now", p, cl.version[p], req.nodes, req.cpus, req.mem, req.gpus, req.exclusive, req.gpu_type,
           req.features, req.resv)
    got = cl._arrays_memo.get(key)
    if got is not None:
        return got
    _, c0, m0, g0, ct, mt, gt = cl.now_columns(p)
    if req.exclusive:
        fits = (c0 >= ct) & (m0 >= mt) & (g0 >= gt)
    else:
        fits = (c0 >= req.cpus) & (m0 >= req.mem) & (g0 >= req.gpus)
    mask = cl.allowed_mask(p, req)
    if mask is not None:
        fits &= mask
    raw = int(fits.sum())
    rows = cl.row_array(p)
    # Nodes without reservations or holds keep their room for ever; only the special ones need a look.
    fit_special = [i for i in cl.special(p, req) if fits[rows[i]]]
    frag = None
    blocked_now = cl.blocked_now(p, req.resv)
    usable_now = ~blocked_now if mask is None else (mask & ~blocked_now)
    if req.gpus and not req.exclusive:
        total = int(g0[usable_now].sum())
        enough = int(((g0 >= req.gpus) & usable_now).sum())
        if total >= req.nodes * req.gpus and enough < req.nodes:
            frag = (f"{total} GPUs are free in partition {p}, but no {req.nodes} nodes have {req.gpus} free GPUs "
                    f"each ({enough} do)")
    elif not req.exclusive:
        total = int(c0[usable_now].sum())
        enough = int(((c0 >= req.cpus) & usable_now).sum())
        if total >= req.nodes * req.cpus and enough < req.nodes:
            frag = (f"{total} CPUs are free in partition {p}, but no {req.nodes} nodes have {req.cpus} free CPUs "
                    f"each ({enough} do)")
    got = cl._arrays_memo[key] = (fits, raw, raw - len(fit_special), fit_special, frag)
    return got


def _windows(cl: _Cluster, backfilled) -> dict[str, tuple[Window, ...]]:
    """showbf: per partition, free resources now (before backfilled jobs take them) and until when."""
    cf, _, gf = (a.copy() for a in cl.free_arrays())
    for i, c, g in backfilled:
        cf[i] += c
        gf[i] += g
    now = cl.now
    # Only nodes under a reservation or a hold have an `until`, or are closed now: few, one by one.
    until = np.full(len(cf), INF)
    as_given: dict[float, float] = {}  # each `until` as the input wrote it (an int stays an int in JSON)
    for i in cl.marked:
        if any(s <= now < e for s, e, _ in cl.blocks[i]):
            cf[i] = 0  # reserved now: not free for the jobs of this partition
            continue
        t = min([s for s, e, _ in cl.blocks[i] if s > now] + [s for s, *_ in cl.holds[i]], default=INF)
        until[i] = as_given.setdefault(t, t)
    names = cl.name_array()
    out = {}
    for p, idx in cl.part_usable.items():
        pos = cl.part_pos(p)
        pos = pos[cf[pos] > 0]
        if not len(pos):
            out[p] = ()
            continue
        # one window per distinct (free GPUs, free CPUs, until), as one integer key; its nodes in
        # name order (pos is)
        g, c, u = gf[pos], cf[pos], until[pos]
        # the distinct untils: inf for all but the few marked nodes (no sort over every node)
        finite = u < INF
        if np.isnan(u).any():  # (a reservation starting at NaN: unique sorts it last)
            times, t = np.unique(u, return_inverse=True)
            t = t.reshape(-1)
        else:
            times = np.unique(u[finite])
            if not finite.all():
                times = np.append(times, INF)
            t = np.searchsorted(times, u)
        key = (g * (int(c.max()) + 1) + c) * len(times) + t
        # the nodes grouped by key, each group in name order (a stable sort), and the groups' bounds
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        bounds = np.flatnonzero(np.diff(sorted_key)) + 1
        starts = np.concatenate(([0], bounds)).tolist()
        ends = starts[1:] + [len(order)]
        members = names[pos[order]].tolist()
        first = order[starts].tolist()
        ws = [Window(b - a, int(g[k]), int(c[k]), None if times[t[k]] == INF else as_given[float(times[t[k]])],
                     tuple(members[a:b]))
              for k, a, b in zip(first, starts, ends)]
        # (GPUs, until, CPUs) is unique per window, so this order needs no tie-break
        ws.sort(key=lambda w: (-w.gpus_per_node, -(w.until or INF), -w.cpus))
        out[p] = tuple(ws)
    return out
