"""Input records of the backfill planner: a frozen picture of one scheduler at one instant.

These are the planner's own dataclasses, independent of where the picture comes from (a live
Slurm, the slurm-exporter's snapshot, the simulator); adapters build them. Pure, no I/O.
Times are unix seconds (floats), memory in MiB, durations in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# Dependency states: "none" (no dependency), "pending" (waits on jobs that have not finished),
# "satisfiable"/"satisfied" (already satisfied, does not block), "never" (can never be satisfied,
# Slurm's DependencyNeverSatisfied: the job waits forever unless someone acts).
DEPENDENCY_BLOCKING = frozenset({"pending", "never"})


@dataclass(frozen=True, slots=True)
class PlannerNode:
    name: str
    partitions: tuple[str, ...]
    cpus_total: int
    cpus_free: int
    mem_total_mb: int = 0
    mem_free_mb: int = 0
    gpus_total: int = 0
    gpus_free: int = 0
    usable: bool = True  # False for down, drained, draining, fail, future, powered-down nodes
    reason: str = ""  # why not usable, in Slurm's words ("drained: disk full")
    gpu_type: str | None = None
    features: frozenset[str] = frozenset()
    # Slurm's backfill holds this node for a pending job from its planned start (state flag PLANNED):
    # the planner's reservations take such nodes first
    planned: bool = False
    weight: int = 0  # Slurm's node Weight: the scheduler fills lower weights first


@dataclass(frozen=True, slots=True)
class Allocation:
    node: str
    cpus: int
    mem_mb: int = 0
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    start: float
    time_limit_s: float
    allocations: tuple[Allocation, ...]
    partition: str = ""
    user: str = ""
    qos: str = ""

    @property
    def expected_end(self) -> float:
        return self.start + self.time_limit_s


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    nodes: tuple[str, ...]
    start: float
    end: float
    flags: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()

    @property
    def maintenance(self) -> bool:
        return "MAINT" in self.flags

    def admits(self, user: str, account: str) -> bool:
        if not self.users and not self.accounts:
            return True
        return user in self.users or account in self.accounts


@dataclass(frozen=True, slots=True)
class PendingJob:
    """One pending job's request. `partitions` lists the partitions it may run in, in order."""

    job_id: str
    partitions: tuple[str, ...]
    time_limit_s: float
    min_nodes: int = 1
    tasks: int = 1
    cpus_per_task: int = 1
    cpus_per_node: int | None = None  # overrides tasks x cpus_per_task when set
    mem_per_node_mb: int = 0
    gpus_per_node: int = 0
    gpus_per_job: int = 0  # --gpus: spread over the nodes (ceil per node)
    gpu_type: str | None = None
    exclusive: bool = False
    features: tuple[str, ...] = ()  # all required (Slurm's "a&b")
    # Slurm's "a|b&c": each node has every feature of one of these (with `features` as well);
    # ((),) never occurs. "[a|b]" (one alternative for all nodes) is planned as "a|b".
    feature_alternatives: tuple[tuple[str, ...], ...] = ()
    dependency: str = "none"
    dependency_text: str = ""
    begin_time: float | None = None
    held: bool = False
    user: str = ""
    account: str = ""
    qos: str = ""
    reservation: str | None = None
    licenses: tuple[tuple[str, int], ...] = ()  # (name, count) it asks for
    slurm_reason: str = ""
    priority: float | None = None
    priority_factors: Mapping[str, float] = field(default_factory=dict)
    slurm_expected_start: float | None = None  # squeue --start, shown beside our estimate


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    name: str
    max_time_s: float | None = None
    up: bool = True
    max_nodes: int | None = None  # MaxNodes: a larger job pends for ever (PartitionNodeLimit)
    max_cpus_per_node: int | None = None  # MaxCPUsPerNode: a job asking more per node never starts


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    """Slurm's scheduler as `scontrol show config` describes it. Without one the planner is plain EASY
    (one reservation per partition); with one it plans as Slurm's sched/backfill does: every job it
    tests that cannot start now gets a reservation, within these bounds."""

    scheduler_type: str = "sched/backfill"  # sched/builtin: no backfilling at all
    bf_window_s: float = 1440 * 60  # no reservation starts later than now + bf_window
    bf_resolution_s: float = 60
    bf_max_job_test: int = 500  # jobs a backfill cycle considers, in priority order
    bf_max_job_part: int = 0  # per partition (0: no limit)
    bf_max_job_user: int = 0  # per user (0: no limit)
    bf_min_prio_reserve: int = 0  # jobs below this priority start only if they fit now: no reservation
    bf_continue: bool = False
    bf_busy_nodes: bool = False
    not_modelled: tuple[str, ...] = ()  # SchedulerParameters and settings the planner does not model


@dataclass(frozen=True, slots=True)
class QosLimit:
    """A QOS's limits on running jobs (None: no limit). Slurm neither starts nor reserves for a job
    that a limit holds."""

    name: str
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    max_cpus_per_user: int | None = None
    max_nodes_per_user: int | None = None
    grp_gpus: int | None = None
    grp_cpus: int | None = None
    grp_nodes: int | None = None
    grp_jobs: int | None = None
    max_wall_s: float | None = None


@dataclass(frozen=True, slots=True)
class PlannerInput:
    now: float
    nodes: tuple[PlannerNode, ...]
    running: tuple[RunningJob, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    pending: tuple[PendingJob, ...] = ()  # in the scheduler's priority order, highest first
    partitions: tuple[PartitionInfo, ...] = ()  # optional limits; partitions also come from the nodes
    config: BackfillConfig | None = None  # None: plain EASY
    qos: tuple[QosLimit, ...] = ()
    # licenses free now, (name, free) (`scontrol show licenses`); None: not known, not checked
    licenses: tuple[tuple[str, int], ...] | None = None


# Slurm's pending reasons (squeue %r) in plain words; those not listed are shown as Slurm writes them.
SLURM_REASONS = {
    "Priority": "higher-priority jobs are ahead of it",
    "Resources": "it waits for resources to become free",
    "Dependency": "it waits for the jobs it depends on",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "JobHeldUser": "its owner put it on hold",
    "JobHeldAdmin": "an administrator put it on hold",
    "BeginTime": "its begin time has not arrived",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "Reservation": "it waits for its reservation to start",
    "PartitionTimeLimit": "its time limit exceeds the partition's limit",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "BadConstraints": "no node has the features it asks for",
    "QOSMaxGRESPerUser": "its QOS limit on GPUs per user is reached",
    "AssocGrpGRES": "its account's GPU limit is reached",
    "AssocGrpCpuLimit": "its account's CPU limit is reached",
    "QOSGrpGRES": "its QOS GPU limit is reached",
    "launch failed requeued held": "its launch failed and Slurm held it",
    "None": "Slurm has not evaluated it yet",
}


def slurm_reason_text(reason: str) -> str:
    return SLURM_REASONS.get(reason, reason)


def format_duration(seconds: float) -> str:
    """Seconds as Slurm writes a time limit: [D-]H:MM:SS, or UNLIMITED."""
    if seconds != seconds or seconds == float("inf"):
        return "UNLIMITED"
    s = max(0, int(seconds))
    days, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if days:
        return f"{days}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h}:{m:02d}:{sec:02d}"
