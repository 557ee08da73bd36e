"""Adapter: a Slurm `Snapshot` (collectors/slurm/model.py) -> the planner's `PlannerInput`.

Sources: one Snapshot, from `gangwatch slurm-exporter`'s `/api/v1/snapshot`, a live poll
(`CliSource`/`RestSource`) or the Slurm parsers over captured files; optionally Slurm's own expected
starts (`squeue --start`). Pure: no I/O, no privileges. The model already hides Slurm's version
differences (times in unix seconds, memory in bytes, durations in seconds); this module converts
memory to MiB, the planner's unit.

What it builds:
- Nodes: usable unless Slurm would not start a new job there: DOWN, DRAIN (draining or drained),
  FUTURE, UNKNOWN, NOT_RESPONDING, REBOOT_*, POWER_DOWN/POWERING_DOWN (a POWERED_DOWN node is usable:
  power saving resumes it for the job), FAIL, INVALID, or RESERVED with no
  reservation in the snapshot to say for whom (a known reservation is modelled as a reservation, so
  the jobs it admits may still use the node). The reason is Slurm's words ("drained: Xid 79").
  Free CPUs/memory/GPUs = total - allocated from the node record; where a node does not report its
  allocated count, the sum of the running jobs' allocations on it. Memory free is Slurm's view
  (RealMemory - allocated), not the OS's free memory.
- Running jobs (RUNNING, SUSPENDED, COMPLETING): per-node allocations (missing per-node figures are
  the job's totals spread evenly over its nodes), expected end = start + time limit (an unset limit:
  the partition's DefaultTime, then MaxTime; UNLIMITED or unknown: never; a COMPLETING job frees its
  nodes now; an unknown start counts as now, so the end is the latest it can be).
- Reservations that have not ended; partitions with their MaxTime and whether they accept jobs.
- Pending jobs in Slurm's scheduling order (partition PriorityTier, then priority, then submit time,
  then job id). Requests: nodes = the requested node count (at least 1); CPUs per node = ceil(the job's
  minimum CPU count / nodes) (`--exclusive` asks for whole nodes); memory per node from the requested
  TRES when the source reports it (scontrol text), else no memory constraint (the JSON forms do not
  carry a pending job's memory request); GPUs per node from tres_per_node, per job from tres_per_job,
  else the job's GPU count spread over the job (tres_per_task); the GPU type from a typed request
  ("gres:gpu:h100:4"); time limit (unset: the partition's DefaultTime, then MaxTime, then unlimited);
  features ("a&b" all required; a constraint with "|" or "[" is not modelled and left out); dependency
  state from the parsed terms and Slurm's reason; begin time = eligible time when it is in the future;
  held = Slurm's JobHeld* reasons or priority 0 with a held state; Slurm's expected start from
  `slurm_starts` (squeue --start) or else the job record's start time.
- A pending array record that still holds several tasks ("4_[4-5]") is one entry, named by its
  display id: the planner plans the next task.
- Job defaults Slurm applies when a job does not say (issue 19): CPUs per node at least
  DefCpuPerGPU x GPUs per node (the partition's JobDefaults, else the cluster's); memory, when
  memory is a consumable resource (SelectTypeParameters *_MEMORY) and the job's TRES does not give
  it: DefMemPerGPU x GPUs, else DefMemPerCPU x CPUs, else DefMemPerNode (partition first, then the
  cluster). A node in state PLANNED (Slurm's backfill holds it for a pending job) is flagged: the
  planner's reservations take such nodes first.
- With the snapshot's `config` (scontrol show config), the planner plans as Slurm's scheduler does
  (SchedulerType, bf_window, bf_max_job_*, bf_min_prio_reserve; see planner_model.BackfillConfig)
  and lists what it does not model; with its `qos`, QOS limits hold jobs as Slurm's do.

Failure modes: nothing raised for any Snapshot taken at a usable time (any other planning time is
a ValueError); records with missing fields fall back as described (a node with no CPU count has
none, so it is never used); NaN, infinite or out-of-range times in a record are treated as unknown.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from collectors.slurm.model import Job, Node, Qos, SchedulerConfig, Snapshot
from collectors.slurm.sched_config import DEFAULTS
from dashboard.analysis.planner_model import (
    Allocation,
    BackfillConfig,
    PartitionInfo,
    PendingJob,
    PlannerInput,
    PlannerNode,
    QosLimit,
    Reservation,
    RunningJob,
)

MIB = 1 << 20
# Node flags (and base states) under which slurmctld starts no new job on the node.
# POWERED_DOWN is absent on purpose: Slurm's power saving resumes such a node for the job it starts.
UNUSABLE_FLAGS = ("DRAIN", "FAIL", "NOT_RESPONDING", "POWER_DOWN", "POWERING_DOWN", "REBOOT_REQUESTED",
                  "REBOOT_ISSUED", "INVALID", "INVALID_REG")
UNUSABLE_STATES = ("DOWN", "FUTURE", "UNKNOWN", "ERROR")
HOLDING_STATES = ("RUNNING", "SUSPENDED", "COMPLETING")
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "launch failed requeued held")


# Times past 2100 are not real scheduler times (Slurm's "unknown" sentinels, hand edits); with time
# limits capped at a century, every time the planner derives stays printable (datetime ends in 9999).
LATEST_TIME = 4102444800.0  # 2100-01-01
LONGEST_LIMIT_S = 100 * 365 * 86400
# Per-node figures past these are not hardware but a corrupt or hand-edited snapshot. The planner's
# structures grow with a node's GPU count (1e9 GPUs on a node hung it), and its int64 arrays overflow
# on figures like 1e30 bytes: such a node is left out of the plan with a reason saying so.
MAX_NODE_GPUS = 1024
MAX_NODE_CPUS = 1 << 20
MAX_NODE_MEMORY_BYTES = 1 << 60  # 1 EiB
# Any other count or MiB figure (a job's request or allocation) is clipped here: a request this
# large fits nowhere either way, and the planner's sums stay far inside int64.
MAX_COUNT = 1 << 40


def usable_time(value: float | None) -> float | None:
    """A unix time we can plan and print with, or None (NaN, infinities and times past 2100 in a
    hand-edited snapshot are not times)."""
    return value if value is not None and 0 <= value <= LATEST_TIME else None


_time = usable_time


def _mib(value: int | None) -> int:
    return _count(value // MIB) if value else 0


def _count(value) -> int:
    """A non-negative int no larger than MAX_COUNT (absurd figures clipped, not trusted)."""
    return max(0, min(int(value), MAX_COUNT)) if value else 0


def implausible(node: Node) -> str:
    """Why a node's totals cannot be real hardware ("" when they can)."""
    for what, value, limit, text in (("GPUs", node.gpus_total, MAX_NODE_GPUS, "1024"),
                                     ("CPUs", node.cpus_total, MAX_NODE_CPUS, "2^20"),
                                     ("bytes of memory", node.memory_total_bytes, MAX_NODE_MEMORY_BYTES, "1 EiB")):
        if value is not None and value > limit:
            return f"the snapshot gives it {value:.3g} {what}, more than {text}: not planned"
    return ""


def node_unusable_reason(node: Node, reserved_known: bool) -> str:
    """Why slurmctld would not start a new job on `node` ("" when it would)."""
    flags = set(node.state_flags)
    why = ""
    if node.drain:
        why = node.state_label  # drained / draining
    elif node.state in UNUSABLE_STATES:
        why = node.state.lower()
    else:
        bad = [f for f in UNUSABLE_FLAGS if f in flags]
        if bad:
            why = bad[0].lower().replace("_", " ")
        elif "RESERVED" in flags and not reserved_known:
            why = "reserved"
    if why and node.reason:
        why = f"{why}: {node.reason}"
    return why


@lru_cache(maxsize=4096)
def constraint_features(expr: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Slurm's --constraint as (features every node needs, alternatives one of which each node has):
    "ib&nvlink" -> (("ib", "nvlink"), ()); "h100|a100&nvlink" -> ((), (("h100",), ("a100", "nvlink")));
    "[h100|a100]" (all nodes alike) is planned as "h100|a100". Counts ("a*2") are not modelled:
    no constraint (optimistic)."""
    expr = (expr or "").strip().replace(",", "&")
    if not expr or "*" in expr:
        return (), ()
    expr = expr.replace("[", "").replace("]", "").replace("(", "").replace(")", "")
    alts = [tuple(f.strip() for f in alt.split("&") if f.strip()) for alt in expr.split("|")]
    alts = [a for a in alts if a]
    if len(alts) <= 1:
        return (alts[0] if alts else ()), ()
    return (), tuple(alts)


def _dependency_state(job: Job) -> str:
    if job.reason == "DependencyNeverSatisfied" or any(d.state in ("failed", "never") for d in job.dependencies):
        return "never"
    if job.reason == "Dependency" or any(d.state == "unfulfilled" for d in job.dependencies):
        return "pending"
    if job.dependencies:
        return "satisfied"
    return "none"


def _priority_factors(job: Job) -> dict[str, float]:
    f = job.priority_factors
    if f is None:
        return {}
    out = {}
    for name in ("site", "age", "assoc", "fairshare", "jobsize", "partition", "qos", "nice"):
        v = getattr(f, name)
        if v is not None and math.isfinite(v):
            out[name] = float(v)
    tres = f.tres_total  # sprio's TRES term: without it the terms do not add up to the priority
    if tres is not None and math.isfinite(tres):
        out["tres"] = tres
    return out


def _allocations(job: Job) -> tuple[Allocation, ...]:
    nodes = job.nodes or tuple(a.node for a in job.allocations)
    if not nodes:
        return ()
    n = len(nodes)
    mem_total = job.tres.mem_bytes
    by_node = {a.node: a for a in job.allocations}
    out = []
    for name in nodes:
        a = by_node.get(name)
        cpus = a.cpus if a is not None and a.cpus is not None else -(-(job.cpus or 0) // n)
        mem = a.memory_bytes if a is not None and a.memory_bytes is not None else (
            mem_total // n if mem_total else 0)
        gpus = a.gpus if a is not None and a.gpus is not None else -(-(job.gpus or 0) // n)
        out.append(Allocation(name, _count(cpus), _mib(mem), _count(gpus)))
    return tuple(out)


def _time_limit(job: Job, part) -> float:
    if job.time_limit_infinite or (job.time_limit_seconds or 0) > LONGEST_LIMIT_S:
        return math.inf
    if job.time_limit_seconds is not None and job.time_limit_seconds > 0:
        return float(job.time_limit_seconds)
    if job.time_limit_seconds is not None:
        return float(job.time_limit_seconds)  # 0 or negative: the planner reports it
    if part is not None:
        for v in (part.default_time_seconds, part.max_time_seconds):
            if v and 0 < v <= LONGEST_LIMIT_S:
                return float(v)
    return math.inf


def _default(part, cfg: SchedulerConfig | None, name: str):
    """A job default: the partition's, else the cluster's (scontrol show config), else None."""
    got = getattr(part, name, None) if part is not None else None
    if got is None and cfg is not None:
        got = getattr(cfg, name, None)
    return got


def _pending(job: Job, now: float, parts: Mapping, slurm_starts: Mapping[str, float] | None,
             cfg: SchedulerConfig | None = None) -> PendingJob:
    names = tuple(p.strip() for p in job.partition.split(",") if p.strip())
    nodes = max(1, job.node_count or 1)
    tres = job.tres  # typed once by the model (collectors/slurm/tres.py)
    per_node = tres.gpus_per_node
    per_job = tres.gpus_per_job
    gpus_per_node = per_node or 0
    gpus_per_job = per_job or 0
    if not gpus_per_node and not gpus_per_job and job.gpus:
        gpus_per_job = job.gpus  # --gpus-per-task and other forms: the job's total
    part = parts.get(names[0]) if names else None
    cpus = max(1, -(-(job.cpus or 1) // nodes))
    gpn = gpus_per_node or -(-gpus_per_job // nodes)
    per_gpu = _default(part, cfg, "def_cpu_per_gpu")
    if per_gpu and gpn:
        cpus = max(cpus, per_gpu * gpn)  # Slurm gives a --gpus job DefCpuPerGPU CPUs per GPU
    mem = tres.mem_bytes  # scontrol text: a pending job's TRES is its request
    mem_per_node = _mib(mem) // nodes if mem else 0
    if not mem and cfg is not None and "MEMORY" in cfg.select_type_parameters.upper():
        by_gpu, by_cpu = _default(part, cfg, "def_mem_per_gpu_bytes"), _default(part, cfg, "def_mem_per_cpu_bytes")
        by_node = _default(part, cfg, "def_mem_per_node_bytes")
        if by_gpu and gpn:
            mem_per_node = _mib(by_gpu * gpn)
        elif by_cpu:
            mem_per_node = _mib(by_cpu * cpus)
        elif by_node:
            mem_per_node = _mib(by_node)
    eligible = _time(job.eligible_time)
    begin = eligible if eligible is not None and eligible > now else None
    held = job.reason in HELD_REASONS or (job.priority == 0 and "Held" in job.reason)
    did = job.display_id
    slurm_start = None
    if slurm_starts is not None:
        slurm_start = _time(slurm_starts.get(did, slurm_starts.get(str(job.job_id))))
    elif job.start_time:
        slurm_start = _time(job.start_time)
    return PendingJob(
        job_id=did, partitions=names, time_limit_s=_time_limit(job, part),
        min_nodes=_count(nodes), tasks=1, cpus_per_task=1, cpus_per_node=max(1, _count(cpus)),
        mem_per_node_mb=mem_per_node, gpus_per_node=_count(gpus_per_node), gpus_per_job=_count(gpus_per_job),
        gpu_type=tres.gpu_type,
        exclusive=bool(job.exclusive), features=constraint_features(job.features)[0],
        feature_alternatives=constraint_features(job.features)[1],
        dependency=_dependency_state(job), dependency_text=job.dependency,
        begin_time=begin, held=held, user=job.user, account=job.account, qos=job.qos,
        reservation=job.reservation or None,
        licenses=tuple((lic.name, lic.count) for lic in tres.licenses),
        slurm_reason=job.reason, priority=float(job.priority) if job.priority is not None else None,
        priority_factors=_priority_factors(job), slurm_expected_start=slurm_start,
    )


def scheduling_order(pending: list[Job], parts: Mapping) -> list[Job]:
    """Slurm's order: partition PriorityTier, then priority, then submit time, then job id."""
    def key(j: Job):
        first = j.partition.split(",", 1)[0]
        tier = getattr(parts.get(first), "priority_tier", None) or 0
        return (-tier, -(j.priority or 0), _time(j.submit_time) or 0.0, j.job_id, j.array_task_id or 0)
    return sorted(pending, key=key)


def backfill_config(cfg: SchedulerConfig) -> BackfillConfig:
    """The planner's view of `scontrol show config` (Slurm's defaults where it says nothing)."""
    def get(name):
        v = getattr(cfg, name)
        return DEFAULTS[name] if v is None else v

    not_modelled = list(cfg.other_parameters)
    if cfg.licenses:
        not_modelled.append(f"Licenses={cfg.licenses} (license counts are not planned)")
    return BackfillConfig(
        scheduler_type=cfg.scheduler_type or "sched/backfill", bf_window_s=float(get("bf_window_s")),
        bf_resolution_s=float(get("bf_resolution_s")), bf_max_job_test=int(get("bf_max_job_test")),
        bf_max_job_part=int(get("bf_max_job_part")), bf_max_job_user=int(get("bf_max_job_user")),
        bf_min_prio_reserve=int(get("bf_min_prio_reserve")), bf_continue=cfg.bf_continue,
        bf_busy_nodes=cfg.bf_busy_nodes, not_modelled=tuple(not_modelled))


def qos_limit(q: Qos) -> QosLimit:
    return QosLimit(q.name, max_jobs_per_user=q.max_jobs_per_user,
                    max_gpus_per_user=q.max_per_user.gpus, max_cpus_per_user=q.max_per_user.cpus,
                    max_nodes_per_user=q.max_per_user.nodes,
                    grp_gpus=q.grp.gpus, grp_cpus=q.grp.cpus, grp_nodes=q.grp.nodes, grp_jobs=q.grp_jobs,
                    max_wall_s=float(q.max_wall_seconds) if q.max_wall_seconds else None)


def snapshot_to_planner(snap: Snapshot, now: float | None = None,
                        slurm_starts: Mapping[str, float] | None = None) -> PlannerInput:
    """The planner's input for one snapshot at `now` (default: when the snapshot was taken).

    `slurm_starts` maps job ids (display ids, "123" or "123_4") to Slurm's expected start
    (`squeue --start`); without it the pending job records' start times are used."""
    now = _time(float(snap.taken_at if now is None else now))
    if now is None:
        raise ValueError("the planning time is not a unix time between 1970 and 2100")
    parts = {p.name: p for p in snap.partitions}
    reserved_known = bool(snap.reservations)
    member: dict[str, list[str]] = {}
    for p in snap.partitions:
        for n in p.nodes:
            member.setdefault(n, []).append(p.name)
    holding = [j for j in snap.jobs if j.state in HOLDING_STATES or "COMPLETING" in j.state_flags]
    running, used = [], {}
    for j in holding:
        allocs = _allocations(j)
        for a in allocs:
            u = used.setdefault(a.node, [0, 0, 0])
            u[0] += a.cpus
            u[1] += a.mem_mb
            u[2] += a.gpus
        limit = _time_limit(j, parts.get(j.partition))
        if j.state == "COMPLETING" or "COMPLETING" in j.state_flags:
            start, limit = now, 0.0
        elif _time(j.start_time) is None:
            start = now  # start unknown: at the latest it ends a whole time limit from now
        else:
            start = j.start_time
        running.append(RunningJob(j.display_id, float(start), limit, allocs, j.partition, j.user, j.qos))
    nodes = []
    for n in snap.nodes:
        u = used.get(n.name, (0, 0, 0))
        ct, mt, gt = _count(n.cpus_total), _mib(n.memory_total_bytes), _count(n.gpus_total)
        ca = _count(n.cpus_allocated) if n.cpus_allocated is not None else u[0]
        ma = _mib(n.memory_allocated_bytes) if n.memory_allocated_bytes is not None else u[1]
        ga = _count(n.gpus_allocated) if n.gpus_allocated is not None else u[2]
        absurd = implausible(n)
        why = absurd or node_unusable_reason(n, reserved_known)
        if absurd:
            ct = mt = gt = 0
        nodes.append(PlannerNode(
            name=n.name, partitions=tuple(dict.fromkeys((*n.partitions, *member.get(n.name, ())))),
            cpus_total=ct, cpus_free=max(0, ct - ca), mem_total_mb=mt, mem_free_mb=max(0, mt - ma),
            gpus_total=gt, gpus_free=max(0, gt - ga), usable=not why, reason=why,
            gpu_type=",".join(n.gpu_types) or None,
            features=frozenset(n.active_features or n.features), planned="PLANNED" in n.state_flags,
            weight=n.weight or 0))
    resvs = tuple(
        Reservation(r.name, r.nodes, _time(r.start_time) or now,
                    _time(r.end_time) or math.inf, frozenset(r.flags), frozenset(r.users), frozenset(r.accounts))
        for r in snap.reservations if _time(r.end_time) is None or r.end_time > now)
    pend = scheduling_order([j for j in snap.jobs if j.state == "PENDING"], parts)
    partitions = tuple(
        PartitionInfo(p.name, float(p.max_time_seconds) if p.max_time_seconds and
                      0 < p.max_time_seconds <= LONGEST_LIMIT_S else None,
                      p.state in ("UP", ""), p.max_nodes, p.max_cpus_per_node)
        for p in snap.partitions)
    cfg = snap.config
    return PlannerInput(now=now, nodes=tuple(nodes), running=tuple(running), reservations=resvs,
                        pending=tuple(_pending(j, now, parts, slurm_starts, cfg) for j in pend),
                        partitions=partitions, config=backfill_config(cfg) if cfg is not None else None,
                        qos=tuple(qos_limit(q) for q in snap.qos),
                        licenses=None if snap.licenses is None else tuple(
                            (lic.name, lic.free) for lic in snap.licenses if lic.free is not None))
