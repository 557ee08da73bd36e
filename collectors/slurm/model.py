"""The typed scheduler model: what gangwatch knows about a Slurm cluster at one moment.

Every parser (JSON of any data_parser version, slurmrestd, the text forms) produces these frozen
dataclasses, so consumers (the exporter's metrics, `/api/v1/snapshot`, the backfill planner, the
dashboard) never see Slurm's version differences. Conventions:

* times are unix seconds (float) and durations seconds; memory is bytes; None means "unknown or
  not set", never 0 (an unlimited time limit is None with `time_limit_infinite=True`);
* job states are Slurm's upper-case base state (`RUNNING`, `PENDING`, ...) plus a tuple of flags;
  node states likewise (`MIXED` + `("DRAIN",)`);
* names, comments and reasons are data: they are stored verbatim and never interpreted.

`Snapshot.to_json()` / `Snapshot.from_json()` round-trip exactly; that JSON is `/api/v1/snapshot`
(schema in docs/slurm-exporter.md, `SCHEMA_VERSION` below bumps on incompatible changes).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class NodeAllocation:
    """What one job holds on one node."""

    node: str
    cpus: int | None = None
    memory_bytes: int | None = None
    gpus: int | None = None
    gpu_indices: tuple[int, ...] = ()
    gpu_type: str | None = None
    cpu_ids: str | None = None  # only from `scontrol show job -d` (e.g. "0-23,32-55")


@dataclass(frozen=True)
class Dependency:
    """One term of a job's dependency expression, e.g. afterok:6(unfulfilled)."""

    kind: str  # after, afterany, afterok, afternotok, aftercorr, afterburstbuffer, singleton, ...
    job_id: str  # "" for singleton; "4_2" for an array task
    state: str = ""  # unfulfilled, failed, fulfilled, ... as Slurm reports it ("" = not reported)


@dataclass(frozen=True)
class PriorityFactors:
    """Weighted priority terms as `sprio` shows them (already multiplied by their weights)."""

    priority: float | None = None
    site: float | None = None
    age: float | None = None
    assoc: float | None = None
    fairshare: float | None = None
    jobsize: float | None = None
    partition: float | None = None
    qos: float | None = None
    nice: float | None = None
    tres: str = ""  # sprio's TRES column: "cpu=8,gres/gpu=625" (weighted, one term per TRES)

    @property
    def tres_total(self) -> float | None:
        """The TRES term as one number (the sum of sprio's per-TRES terms); None when sprio showed none."""
        total, seen = 0.0, False
        for item in self.tres.split(","):
            _, sep, val = item.rpartition("=")
            try:
                total += float(val) if sep else 0.0
                seen = seen or bool(sep)
            except ValueError:
                continue
        return total if seen else None


@dataclass(frozen=True)
class Gres:
    """One generic resource: name ("gpu", "shard", "mps"), type ("h100"; None: any), count."""

    name: str
    type: str | None = None
    count: int | None = None


@dataclass(frozen=True)
class License:
    name: str
    count: int


@dataclass(frozen=True)
class Tres:
    """Trackable resources as typed fields, parsed once from Slurm's TRES strings
    (collectors/slurm/tres.py). For a job: `gpus_per_node`/`gres_per_node` from its per-node request
    (--gres, --gpus-per-node), `gpus_per_job`/`gres_per_job` from --gpus, and the totals (cpus,
    mem_bytes, nodes, gpus, gres, licenses, billing) from tres_alloc: the allocation, or for a
    pending job in scontrol's text the request. For a QOS limit only the totals. None: not given."""

    cpus: int | None = None
    mem_bytes: int | None = None
    nodes: int | None = None
    gpus: int | None = None
    gpu_type: str | None = None  # the GPU type a job's request names (a total: the first typed term)
    gres: tuple[Gres, ...] = ()
    licenses: tuple[License, ...] = ()
    billing: int | None = None
    gpus_per_node: int | None = None
    gpus_per_job: int | None = None
    gres_per_node: tuple[Gres, ...] = ()
    gres_per_job: tuple[Gres, ...] = ()


# Fields computed from others when a record is built: not written to the snapshot JSON (a reader
# computes them again), so the schema does not change.
DERIVED = {"derived": True}


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""
    state: str = ""  # base state: PENDING, RUNNING, COMPLETED, ...
    state_flags: tuple[str, ...] = ()
    reason: str = ""  # Slurm's state_reason ("None" when it has none)
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_string: str = ""  # pending tasks still in one record, e.g. "4-5" or "4-5%4"
    priority: int | None = None
    priority_factors: PriorityFactors | None = None
    nice: int | None = None
    submit_time: float | None = None
    eligible_time: float | None = None
    start_time: float | None = None  # actual start, or the expected start of a pending job
    end_time: float | None = None
    time_limit_seconds: int | None = None
    time_limit_infinite: bool = False
    node_count: int | None = None  # gang size: nodes allocated (running) or requested (pending)
    cpus: int | None = None
    gpus: int | None = None  # allocated when known, else requested
    nodes: tuple[str, ...] = ()  # allocated nodes, expanded
    scheduled_nodes: tuple[str, ...] = ()  # nodes backfill plans for a pending job
    allocations: tuple[NodeAllocation, ...] = ()
    dependency: str = ""  # raw expression
    dependencies: tuple[Dependency, ...] = ()
    reservation: str = ""
    features: str = ""
    exclusive: bool | None = None
    restarts: int | None = None
    batch_host: str = ""
    comment: str = ""
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_alloc: str = ""
    licenses: str = ""  # the licenses it asks for, as Slurm writes them ("matlab:2,ansys@db:1")
    exit_code: int | None = None
    scheduler: str = ""  # "Main" or "Backfill" (text form only)
    flags: tuple[str, ...] = ()
    tres: Tres = dataclasses.field(default=None, compare=False, repr=False, metadata=DERIVED)  # type: ignore

    def __post_init__(self) -> None:
        if self.tres is None:
            from .tres import job_tres  # tres imports this module
            object.__setattr__(self, "tres", job_tres(self.tres_per_node or "", self.tres_per_job or "",
                                                      self.tres_alloc or "", self.licenses or ""))

    @property
    def gang_size(self) -> int:
        return self.node_count if self.node_count is not None else len(self.nodes)

    @property
    def display_id(self) -> str:
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.array_job_id and self.array_task_string:
            return f"{self.array_job_id}_[{self.array_task_string}]"
        return str(self.job_id)


@dataclass(frozen=True)
class Node:
    name: str
    state: str = ""  # base state: IDLE, MIXED, ALLOCATED, DOWN, FUTURE, UNKNOWN, ...
    state_flags: tuple[str, ...] = ()  # DRAIN, NOT_RESPONDING, COMPLETING, RESERVED, ...
    reason: str = ""
    reason_user: str = ""
    reason_time: float | None = None
    cpus_total: int | None = None
    cpus_allocated: int | None = None
    memory_total_bytes: int | None = None
    memory_allocated_bytes: int | None = None
    memory_free_bytes: int | None = None
    gpus_total: int | None = None
    gpus_allocated: int | None = None
    gpu_types: tuple[str, ...] = ()
    gres: str = ""
    gres_used: str = ""
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    weight: int | None = None
    cpu_load: float | None = None  # load average (Slurm reports it x100 in JSON; stored as is / 100)

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.state_flags

    @property
    def down(self) -> bool:
        return self.state == "DOWN"

    @property
    def drained(self) -> bool:
        """Draining and nothing left running on it (Slurm's `drained`)."""
        return self.drain and self.state in ("IDLE", "DOWN")

    @property
    def state_label(self) -> str:
        """One word as `sinfo` prints it: idle, mixed, alloc, down, drained, draining, maint,
        planned (idle but held for a higher-priority job), reserved, ... A node in a MAINT
        reservation or PLANNED for the top job is not free: "idle" there would mislead."""
        flags = self.state_flags
        if "MAINT" in flags and not self.drain and self.state not in ("ALLOCATED", "MIXED", "DOWN"):
            return "maint"
        if self.state == "IDLE" and not self.drain:
            if "PLANNED" in flags:
                return "planned"
            if "RESERVED" in flags:
                return "reserved"
        if self.drain:
            return "drained" if self.state in ("IDLE", "DOWN") else "draining"
        return {"ALLOCATED": "allocated"}.get(self.state, self.state.lower() or "unknown")


@dataclass(frozen=True)
class Partition:
    name: str
    state: str = ""  # UP, DOWN, DRAIN, INACTIVE ("" when the version does not say, v0.0.39)
    nodes: tuple[str, ...] = ()
    total_nodes: int | None = None
    total_cpus: int | None = None
    is_default: bool | None = None  # None: the version does not say (v0.0.39+ JSON)
    max_time_seconds: int | None = None
    default_time_seconds: int | None = None
    max_nodes: int | None = None
    priority_job_factor: int | None = None
    priority_tier: int | None = None
    tres: str = ""
    # job defaults and per-node limits (scontrol show partition: JobDefaults=, DefMemPer*, MaxCPUsPerNode)
    def_cpu_per_gpu: int | None = None
    def_mem_per_gpu_bytes: int | None = None
    def_mem_per_cpu_bytes: int | None = None
    def_mem_per_node_bytes: int | None = None
    max_cpus_per_node: int | None = None
    qos: str = ""  # the partition's QOS ("" for none)


@dataclass(frozen=True)
class SchedulerConfig:
    """What `scontrol show config` says about scheduling (collectors/slurm/sched_config.py).
    None: not set in the output (Slurm's default applies, see sched_config.DEFAULTS)."""

    scheduler_type: str = ""  # sched/backfill, sched/builtin
    scheduler_parameters: str = ""  # verbatim
    bf_interval_s: int | None = None
    bf_window_s: int | None = None  # bf_window is in minutes in Slurm; stored in seconds
    bf_resolution_s: int | None = None
    bf_max_job_test: int | None = None
    bf_max_job_part: int | None = None
    bf_max_job_user: int | None = None
    bf_min_prio_reserve: int | None = None
    bf_continue: bool = False
    bf_busy_nodes: bool = False
    other_parameters: tuple[str, ...] = ()  # SchedulerParameters the planner does not model, verbatim
    select_type_parameters: str = ""  # CR_Core_Memory, ...: memory is planned only when it is consumable
    def_cpu_per_gpu: int | None = None
    def_mem_per_gpu_bytes: int | None = None
    def_mem_per_cpu_bytes: int | None = None
    def_mem_per_node_bytes: int | None = None
    licenses: str = ""
    gres_types: str = ""


@dataclass(frozen=True)
class Qos:
    """One QOS's limits (`sacctmgr show qos -P`). None: no limit."""

    name: str
    priority: int | None = None
    max_jobs_per_user: int | None = None
    max_submit_per_user: int | None = None
    max_tres_per_user: str = ""  # "gres/gpu=4,cpu=64"
    max_tres_per_job: str = ""
    grp_tres: str = ""
    grp_jobs: int | None = None
    max_wall_seconds: int | None = None
    max_per_user: Tres = dataclasses.field(default=None, compare=False, repr=False, metadata=DERIVED)  # type: ignore
    grp: Tres = dataclasses.field(default=None, compare=False, repr=False, metadata=DERIVED)  # type: ignore

    def __post_init__(self) -> None:
        from .tres import limit_tres  # tres imports this module
        if self.max_per_user is None:
            object.__setattr__(self, "max_per_user", limit_tres(self.max_tres_per_user or ""))
        if self.grp is None:
            object.__setattr__(self, "grp", limit_tres(self.grp_tres or ""))


@dataclass(frozen=True)
class LicensePool:
    """One of the cluster's licenses (`scontrol show licenses`). None: not reported."""

    name: str
    total: int | None = None
    used: int | None = None
    free: int | None = None
    reserved: int | None = None
    remote: bool = False


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: tuple[str, ...] = ()
    start_time: float | None = None
    end_time: float | None = None
    flags: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partition: str = ""
    state: str = ""  # ACTIVE / INACTIVE where Slurm prints it (text form), else ""; see active_at()

    def active_at(self, t: float) -> bool:
        return self.start_time is not None and self.end_time is not None and self.start_time <= t < self.end_time


@dataclass(frozen=True)
class FairshareRow:
    """One row of `sshare -l -a -P`: an account (user == "") or a user association."""

    account: str
    user: str = ""
    depth: int = 0  # indentation level in the tree (root = 0)
    raw_shares: float | None = None
    norm_shares: float | None = None
    raw_usage: float | None = None
    norm_usage: float | None = None
    effective_usage: float | None = None
    fairshare: float | None = None
    level_fs: float | None = None  # inf is kept as float("inf")


@dataclass(frozen=True)
class SchedulerStats:
    """`sdiag` figures. Cycle times are in seconds (Slurm reports microseconds)."""

    server_thread_count: int | None = None
    agent_queue_size: int | None = None
    dbd_agent_queue_size: int | None = None
    jobs_submitted: int | None = None
    jobs_started: int | None = None
    jobs_completed: int | None = None
    jobs_canceled: int | None = None
    jobs_failed: int | None = None
    jobs_pending: int | None = None
    jobs_running: int | None = None
    main_cycles_total: int | None = None
    main_last_cycle_seconds: float | None = None
    main_max_cycle_seconds: float | None = None
    main_mean_cycle_seconds: float | None = None
    main_mean_depth: int | None = None
    main_cycles_per_minute: int | None = None
    main_last_queue_length: int | None = None
    backfill_jobs_total: int | None = None  # since slurmctld start
    backfill_jobs_since_cycle_start: int | None = None
    backfill_cycles_total: int | None = None
    backfill_last_cycle_time: float | None = None  # unix s of the last backfill cycle
    backfill_last_cycle_seconds: float | None = None
    backfill_max_cycle_seconds: float | None = None
    backfill_mean_cycle_seconds: float | None = None
    backfill_last_depth: int | None = None
    backfill_last_depth_try: int | None = None
    backfill_depth_mean: int | None = None
    backfill_last_queue_length: int | None = None
    backfill_queue_length_mean: int | None = None
    backfill_active: bool | None = None
    data_since: float | None = None  # unix s the counters were reset


@dataclass(frozen=True)
class Switch:
    """One switch of Slurm's network topology (topology/tree), as `scontrol show topology` or
    topology.conf gives it. In scontrol's form `nodes` are all nodes below the switch; in
    topology.conf only a leaf's own (collectors/slurm/topology.py finds each node's leaf)."""

    name: str
    level: int | None = None  # 0 = leaf; None where the source does not say (topology.conf)
    link_speed: int | None = None  # Slurm's relative LinkSpeed (a weight, no unit)
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()  # child switches


@dataclass(frozen=True)
class SourceError:
    """One thing that went wrong while building a snapshot (a command, a field, a version)."""

    source: str  # the command or endpoint, e.g. "squeue", "sdiag", "GET /slurm/v0.0.40/jobs"
    message: str
    severity: str = "error"  # "error": data missing; "warning": data there but maybe incomplete


@dataclass(frozen=True)
class Snapshot:
    taken_at: float
    source: str = ""  # "cli", "slurmrestd", "files"
    cluster: str = ""
    slurm_version: str = ""
    data_parser: str = ""  # e.g. "v0.0.38" (the one the jobs output named)
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    fairshare: tuple[FairshareRow, ...] = ()
    scheduler: SchedulerStats | None = None
    switches: tuple[Switch, ...] = ()  # empty: no topology/tree (or it could not be read)
    config: SchedulerConfig | None = None  # None: `scontrol show config` was not read
    qos: tuple[Qos, ...] = ()  # empty: no QOS read (no slurmdbd, or not polled)
    licenses: tuple[LicensePool, ...] | None = None  # None: not read; (): none configured
    errors: tuple[SourceError, ...] = ()
    stale: bool = False  # True when the latest poll failed and this is the last good snapshot
    last_attempt: float | None = None  # unix s of the latest poll, good or not
    # unix s of the first failed poll since the last good one (stale snapshots only): "controller
    # unreachable since ..." is what operators need, not just the age of the data
    failing_since: float | None = None
    schema_version: int = SCHEMA_VERSION

    def age(self, now: float) -> float:
        return max(0.0, now - self.taken_at)

    def job(self, job_id: int) -> Job | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None

    def node(self, name: str) -> Node | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def to_dict(self, now: float | None = None) -> dict:
        d = _to_plain(self)
        if now is not None:
            d["age_seconds"] = round(self.age(now), 3)
        return d

    def to_json(self, now: float | None = None, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(now), indent=indent, allow_nan=False, default=_json_default,
                          separators=(",", ":") if indent is None else None)

    @classmethod
    def from_dict(cls, data: dict) -> "Snapshot":
        return _from_plain(cls, data)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Snapshot":
        return cls.from_dict(json.loads(text))


# ----------------------------------------------------------------------------- (de)serialisation
# inf/nan are not JSON; they only occur in fairshare (LevelFS=inf) and are written as strings.

def _json_default(obj):  # pragma: no cover - only reached for unexpected types
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, bool, type(None))


def to_plain(obj: Any) -> Any:
    """A model object (or a tuple of them) as the plain JSON values `to_dict` writes."""
    return _to_plain(obj)


def _to_plain(obj: Any) -> Any:
    t = type(obj)
    names = _FIELD_NAMES.get(t)
    if names is None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELD_NAMES[t] = tuple(f.name for f in dataclasses.fields(obj) if not f.metadata.get("derived"))
    if names is not None:
        return {n: _to_plain(getattr(obj, n)) for n in names}
    if t is tuple or t is list:
        if all(type(v) in _SCALARS for v in obj):  # node names, GPU indices: no recursion needed
            return list(obj)
        return [_to_plain(v) for v in obj]
    if t is float and (obj != obj or obj in (float("inf"), float("-inf"))):
        return "inf" if obj == float("inf") else "-inf" if obj == float("-inf") else "nan"
    return obj


_CONVERTERS: dict[Any, Any] = {}


def _identity(v):
    return v


def _converter(tp: Any):
    """A function turning JSON values into `tp`, built once per type (from_json of 10k jobs stays fast)."""
    conv = _CONVERTERS.get(tp)
    if conv is not None:
        return conv
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = _converter(args[0]) if len(args) == 1 else _identity
        conv = (lambda v: None if v is None else inner(v)) if inner is not _identity else _identity
    elif origin is tuple:
        inner = _converter((typing.get_args(tp) or (Any,))[0])
        if inner is _identity:
            conv = lambda v: None if v is None else tuple(v)  # noqa: E731
        else:
            conv = lambda v: None if v is None else tuple(inner(x) for x in v)  # noqa: E731
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp, vars(sys.modules[tp.__module__]))
        fields = {f.name: _converter(hints[f.name]) for f in dataclasses.fields(tp) if not f.metadata.get("derived")}

        def conv(v, _tp=tp, _fields=fields):
            if v is None:
                return None
            # unknown keys (a newer writer) are ignored; missing keys take their defaults
            return _tp(**{k: _fields[k](x) for k, x in v.items() if k in _fields})
    elif tp is float:
        conv = lambda v: None if v is None else float(v)  # noqa: E731 - also reads "inf"
    else:
        conv = _identity
    _CONVERTERS[tp] = conv
    return conv


def _from_plain(tp: Any, value: Any) -> Any:
    return _converter(tp)(value)
