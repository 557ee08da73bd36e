"""Turning a Snapshot (plus the poller's own health) into Prometheus metric families.

Cardinality is bounded on purpose: per-job series exist only for running jobs and the `top_pending`
highest-priority pending jobs; everything else is aggregated (jobs by state, partition and reason;
GPUs by partition and state). Job names, users and comments are label *values* only, escaped by
the encoder and cut to `LABEL_MAX` characters (the full text is in /api/v1/snapshot).
`METRICS` is the single list of names, types and help texts; the table in docs/slurm-exporter.md is generated from it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from ..exposition import COUNTER, GAUGE, Family
from .hostlist import compress
from .model import Job, Node, Snapshot
from .topology import leaf_switches

P = "gangwatch_slurm_"
LABEL_MAX = 256

# name (without prefix) -> (type, labels, help)
METRICS: dict[str, tuple[str, str, str]] = {
    "up": (GAUGE, "", "Whether the latest poll of Slurm succeeded (1) or failed (0); on failure the last good snapshot is served."),
    "snapshot_age_seconds": (GAUGE, "", "Seconds since the served snapshot was taken."),
    "snapshot_timestamp_seconds": (GAUGE, "", "Unix time the served snapshot was taken."),
    "snapshot_stale": (GAUGE, "", "Whether the served snapshot is stale (1) because later polls failed."),
    "poll_duration_seconds": (GAUGE, "", "Seconds the latest poll of Slurm took, all commands together."),
    "polls_total": (COUNTER, "", "Polls of Slurm since the exporter started."),
    "poll_failures_total": (COUNTER, "", "Polls of Slurm that failed (no jobs or no nodes could be read)."),
    "command_success": (GAUGE, "command", "Whether the command (or slurmrestd request) succeeded in the latest poll."),
    "command_duration_seconds": (GAUGE, "command", "Seconds the command (or slurmrestd request) took in the latest poll."),
    "command_errors_total": (COUNTER, "command", "Failed runs of the command (timeout, non-zero exit, unreachable) since start."),
    "snapshot_errors": (GAUGE, "source,severity", "Problems recorded in the served snapshot (unreadable output, unknown data_parser, Slurm's own errors)."),
    "info": (GAUGE, "cluster,version,data_parser,source", "Slurm cluster, version and the data_parser version its output named; value 1."),
    "jobs": (GAUGE, "state,partition,reason", "Jobs known to slurmctld by state, partition and pending reason (including finished jobs still in memory)."),
    "job_info": (GAUGE, "jobid,array_job_id,array_task_id,name,user,account,partition,qos,state,reason", "Facts about a running or top pending job; value 1."),
    "job_nodes": (GAUGE, "jobid", "Gang size: nodes a running job holds or a pending job asks for."),
    "job_gpus": (GAUGE, "jobid", "GPUs a running job holds (or a pending job asks for)."),
    "job_cpus": (GAUGE, "jobid", "CPUs a running job holds (or a pending job asks for)."),
    "job_priority": (GAUGE, "jobid", "Scheduling priority of the job."),
    "job_priority_factor": (GAUGE, "jobid,factor", "Weighted priority term of a pending job as sprio shows it."),
    "job_submit_time_seconds": (GAUGE, "jobid", "Unix time the job was submitted."),
    "job_start_time_seconds": (GAUGE, "jobid", "Unix time a running job started, or the expected start of a pending job."),
    "job_end_time_seconds": (GAUGE, "jobid", "Unix time a running job reaches its time limit."),
    "job_time_limit_seconds": (GAUGE, "jobid", "The job's time limit in seconds (absent when unlimited)."),
    "job_node_gpus": (GAUGE, "jobid,node", "GPUs a running job holds on a node; join node metrics to jobs on `node`."),
    "job_node_cpus": (GAUGE, "jobid,node", "CPUs (cores) a running job holds on a node."),
    "job_gpu_info": (GAUGE, "jobid,node,gpu", "A GPU index a running job holds on a node; value 1."),
    "pending_gang_job_wait_seconds": (GAUGE, "jobid,partition,reason", "Seconds a pending multi-node job has waited since it became eligible (or was submitted)."),
    "pending_gang_jobs_oldest_wait_seconds": (GAUGE, "partition", "Longest wait of any pending multi-node job in the partition."),
    "partition_gpus": (GAUGE, "partition,state", "GPUs on the partition's nodes by state: allocated, idle, drained (unusable on draining/drained nodes) and down."),
    "partition_nodes": (GAUGE, "partition,state", "Nodes in the partition by state as sinfo names it (idle, mixed, allocated, draining, drained, down, ...)."),
    "partition_info": (GAUGE, "partition,state,default", "A partition and its state; value 1."),
    "partition_max_time_seconds": (GAUGE, "partition", "The partition's maximum job time limit (absent when unlimited)."),
    "nodes": (GAUGE, "state", "Nodes by state as sinfo names it."),
    "node_info": (GAUGE, "node,state,flags,reason,partitions", "A node's state, state flags, reason and partitions; value 1."),
    "node_gpus": (GAUGE, "node", "GPUs configured on the node (gres gpu)."),
    "node_gpus_allocated": (GAUGE, "node", "GPUs allocated to jobs on the node."),
    "node_cpus": (GAUGE, "node", "CPUs configured on the node."),
    "node_cpus_allocated": (GAUGE, "node", "CPUs allocated to jobs on the node."),
    "node_memory_bytes": (GAUGE, "node", "Memory configured on the node (RealMemory) in bytes."),
    "node_memory_allocated_bytes": (GAUGE, "node", "Memory allocated to jobs on the node in bytes."),
    "node_switch_info": (GAUGE, "node,switch", "The leaf switch a node is cabled to: the lowest-level switch of Slurm's topology/tree (scontrol show topology or topology.conf) that lists the node; value 1."),
    "reservation_start_time_seconds": (GAUGE, "reservation", "Unix time the reservation starts."),
    "reservation_end_time_seconds": (GAUGE, "reservation", "Unix time the reservation ends."),
    "reservation_nodes": (GAUGE, "reservation", "Nodes in the reservation."),
    "reservation_active": (GAUGE, "reservation", "Whether the reservation window is open now."),
    "reservation_info": (GAUGE, "reservation,nodes,flags,users,accounts,partition", "A reservation's nodes, flags, users and accounts; value 1."),
    "scheduler_main_cycle_last_seconds": (GAUGE, "", "Duration of the last main scheduling cycle (sdiag)."),
    "scheduler_main_cycle_max_seconds": (GAUGE, "", "Longest main scheduling cycle since the sdiag counters were reset."),
    "scheduler_main_cycle_mean_seconds": (GAUGE, "", "Mean main scheduling cycle since the sdiag counters were reset."),
    "scheduler_main_cycles_total": (COUNTER, "", "Main scheduling cycles since the sdiag counters were reset."),
    "scheduler_main_depth_mean": (GAUGE, "", "Mean number of jobs the main scheduler examined per cycle."),
    "scheduler_main_queue_length": (GAUGE, "", "Jobs in the main scheduler's queue at its last cycle."),
    "scheduler_backfill_cycle_last_seconds": (GAUGE, "", "Duration of the last backfill cycle (sdiag)."),
    "scheduler_backfill_cycle_max_seconds": (GAUGE, "", "Longest backfill cycle since the sdiag counters were reset."),
    "scheduler_backfill_cycle_mean_seconds": (GAUGE, "", "Mean backfill cycle since the sdiag counters were reset."),
    "scheduler_backfill_cycles_total": (COUNTER, "", "Backfill cycles since the sdiag counters were reset."),
    "scheduler_backfill_depth_last": (GAUGE, "", "Jobs the last backfill cycle examined."),
    "scheduler_backfill_depth_mean": (GAUGE, "", "Mean number of jobs a backfill cycle examined."),
    "scheduler_backfill_queue_length": (GAUGE, "", "Jobs in the backfill queue at its last cycle."),
    "scheduler_backfill_last_cycle_timestamp_seconds": (GAUGE, "", "Unix time of the last backfill cycle."),
    "scheduler_backfilled_jobs_total": (COUNTER, "", "Jobs started by backfill since slurmctld started."),
    "scheduler_jobs_submitted_total": (COUNTER, "", "Jobs submitted since the sdiag counters were reset."),
    "scheduler_jobs_started_total": (COUNTER, "", "Jobs started since the sdiag counters were reset."),
    "scheduler_server_threads": (GAUGE, "", "slurmctld server threads in use."),
    "scheduler_agent_queue_size": (GAUGE, "", "Outgoing RPCs queued in slurmctld's agent."),
    "scheduler_dbd_agent_queue_size": (GAUGE, "", "Messages queued for slurmdbd (grows when slurmdbd is down or slow)."),
    "fairshare_factor": (GAUGE, "account,user", "Fair-share factor (0-1) of an association as sshare shows it."),
    "fairshare_level": (GAUGE, "account,user", "LevelFS of an association (above 1: under-served)."),
    "fairshare_raw_usage": (GAUGE, "account,user", "Decayed raw usage of an association (sshare RawUsage, CPU-seconds weighted by TRES billing)."),
    "fairshare_norm_shares": (GAUGE, "account,user", "Normalised shares of an association (0-1)."),
    "fairshare_effective_usage": (GAUGE, "account,user", "Effective usage of an association (0-1)."),
}


def family(name: str, metrics: dict | None = None, prefix: str = P) -> Family:
    """An empty family of a metric in METRICS (or another exporter's list of the same shape)."""
    kind, _labels, help_ = (METRICS if metrics is None else metrics)[name]
    return Family(prefix + name, kind, help_)


def _fam(name: str) -> Family:
    return family(name)


def cut_label(value: object) -> str:
    """A label value no longer than LABEL_MAX characters (the full text stays in the JSON)."""
    s = str(value)
    return s if len(s) <= LABEL_MAX else s[: LABEL_MAX - 1] + "…"


_cut = cut_label


def selected_jobs(snap: Snapshot, top_pending: int) -> tuple[list[Job], list[Job]]:
    """Running jobs, and the `top_pending` pending jobs by priority (then submit time)."""
    running = [j for j in snap.jobs if j.state == "RUNNING"]
    pending = [j for j in snap.jobs if j.state == "PENDING"]
    pending.sort(key=lambda j: (-(j.priority or 0), j.submit_time or 0, j.job_id))
    return running, pending[: max(0, top_pending)]


def gpu_state_by_partition(snap: Snapshot) -> dict[str, dict[str, int]]:
    """partition -> {allocated, idle, drained, down}; each GPU counted once per partition."""
    by_node = {n.name: n for n in snap.nodes}
    members: dict[str, set[str]] = defaultdict(set)
    for p in snap.partitions:
        members[p.name].update(p.nodes)
    for n in snap.nodes:
        for p in n.partitions:
            members[p].add(n.name)
    out: dict[str, dict[str, int]] = {}
    for part, names in members.items():
        c = {"allocated": 0, "idle": 0, "drained": 0, "down": 0}
        for name in names:
            n = by_node.get(name)
            if n is None or n.gpus_total is None:
                continue
            split = node_gpu_split(n)
            for k, v in split.items():
                c[k] += v
        out[part] = c
    return out


def node_gpu_split(n: Node) -> dict[str, int]:
    total = n.gpus_total or 0
    alloc = min(n.gpus_allocated or 0, total)
    if n.state == "DOWN" or n.state == "FUTURE" or "NOT_RESPONDING" in n.state_flags:
        return {"allocated": 0, "idle": 0, "drained": 0, "down": total}
    if n.drain or "MAINT" in n.state_flags or "REBOOT_REQUESTED" in n.state_flags:
        return {"allocated": alloc, "idle": 0, "drained": total - alloc, "down": 0}
    return {"allocated": alloc, "idle": total - alloc, "drained": 0, "down": 0}


def snapshot_families(snap: Snapshot, now: float, top_pending: int = 100) -> list[Family]:
    f = {name: _fam(name) for name in METRICS}
    f["info"].add(1, cluster=snap.cluster, version=snap.slurm_version, data_parser=snap.data_parser, source=snap.source)
    f["snapshot_age_seconds"].add(round(snap.age(now), 3))
    f["snapshot_timestamp_seconds"].add(snap.taken_at)
    f["snapshot_stale"].add(1 if snap.stale else 0)
    errs = Counter((e.source, e.severity) for e in snap.errors)
    for (src, sev), n in sorted(errs.items()):
        f["snapshot_errors"].add(n, source=_cut(src), severity=sev)

    # ---- jobs, aggregated
    counts = Counter((j.state, j.partition, j.reason if j.state == "PENDING" else "") for j in snap.jobs)
    for (state, part, reason), n in sorted(counts.items()):
        f["jobs"].add(n, state=state, partition=part, reason=_cut(reason))

    running, top = selected_jobs(snap, top_pending)
    for j in running + top:
        jid = str(j.job_id)
        f["job_info"].add(1, jobid=jid, array_job_id=j.array_job_id or "",
                          array_task_id=j.array_task_id if j.array_task_id is not None else (j.array_task_string or ""),
                          name=_cut(j.name), user=_cut(j.user), account=_cut(j.account), partition=j.partition,
                          qos=j.qos, state=j.state, reason=_cut(j.reason))
        lbl = {"jobid": jid}
        for fam, value in (("job_nodes", j.node_count if j.node_count is not None else (len(j.nodes) or None)),
                           ("job_gpus", j.gpus), ("job_cpus", j.cpus), ("job_priority", j.priority),
                           ("job_submit_time_seconds", j.submit_time), ("job_start_time_seconds", j.start_time),
                           ("job_time_limit_seconds", j.time_limit_seconds)):
            if value is not None:
                f[fam].add(value, lbl)
        if j.state == "RUNNING" and j.end_time is not None:
            f["job_end_time_seconds"].add(j.end_time, lbl)
        pf = j.priority_factors
        if j.state == "PENDING" and pf is not None:
            for factor in ("age", "assoc", "fairshare", "jobsize", "partition", "qos", "site", "nice"):
                v = getattr(pf, factor)
                if v is not None:
                    f["job_priority_factor"].add(v, jobid=jid, factor=factor)
    for j in running:
        jid = str(j.job_id)
        for a in j.allocations:
            if a.gpus is not None:
                f["job_node_gpus"].add(a.gpus, jobid=jid, node=a.node)
            if a.cpus is not None:
                f["job_node_cpus"].add(a.cpus, jobid=jid, node=a.node)
            for g in a.gpu_indices:
                f["job_gpu_info"].add(1, jobid=jid, node=a.node, gpu=g)

    # ---- pending gang jobs: how long they wait
    oldest: dict[str, float] = {}
    top_ids = {j.job_id for j in top}
    for j in snap.jobs:
        if j.state != "PENDING" or (j.node_count or 0) < 2:
            continue
        since = j.eligible_time or j.submit_time
        if since is None:
            continue
        wait = max(0.0, now - since)
        oldest[j.partition] = max(oldest.get(j.partition, 0.0), wait)
        if j.job_id in top_ids:
            f["pending_gang_job_wait_seconds"].add(round(wait, 3), jobid=str(j.job_id), partition=j.partition,
                                                   reason=_cut(j.reason))
    for part, wait in sorted(oldest.items()):
        f["pending_gang_jobs_oldest_wait_seconds"].add(round(wait, 3), partition=part)

    # ---- partitions and nodes
    for part, split in sorted(gpu_state_by_partition(snap).items()):
        for state, n in split.items():
            f["partition_gpus"].add(n, partition=part, state=state)
    by_node = {n.name: n for n in snap.nodes}
    for p in snap.partitions:
        f["partition_info"].add(1, partition=p.name, state=p.state, default={True: "true", False: "false"}.get(p.is_default, ""))
        if p.max_time_seconds is not None:
            f["partition_max_time_seconds"].add(p.max_time_seconds, partition=p.name)
        states = Counter(by_node[n].state_label for n in p.nodes if n in by_node)
        for state, n in sorted(states.items()):
            f["partition_nodes"].add(n, partition=p.name, state=state)
    for state, n in sorted(Counter(n.state_label for n in snap.nodes).items()):
        f["nodes"].add(n, state=state)
    for n in snap.nodes:
        lbl = {"node": n.name}
        f["node_info"].add(1, node=n.name, state=n.state_label, flags=",".join(n.state_flags), reason=_cut(n.reason),
                           partitions=",".join(n.partitions))
        for fam, value in (("node_gpus", n.gpus_total), ("node_gpus_allocated", n.gpus_allocated),
                           ("node_cpus", n.cpus_total), ("node_cpus_allocated", n.cpus_allocated),
                           ("node_memory_bytes", n.memory_total_bytes),
                           ("node_memory_allocated_bytes", n.memory_allocated_bytes)):
            if value is not None:
                f[fam].add(value, lbl)
    # the join target of the per-switch InfiniBand rules (rules/recording.yml); absent without topology/tree
    for node, switch in sorted(leaf_switches(snap.switches).items()):
        f["node_switch_info"].add(1, node=_cut(node), switch=_cut(switch))

    # ---- reservations
    for r in snap.reservations:
        lbl = {"reservation": r.name}
        if r.start_time is not None:
            f["reservation_start_time_seconds"].add(r.start_time, lbl)
        if r.end_time is not None:
            f["reservation_end_time_seconds"].add(r.end_time, lbl)
        if r.start_time is not None and r.end_time is not None:
            f["reservation_active"].add(1 if r.active_at(now) else 0, lbl)
        f["reservation_nodes"].add(len(r.nodes), lbl)
        f["reservation_info"].add(1, reservation=r.name, nodes=_cut(compress(r.nodes)), flags=",".join(r.flags),
                                  users=_cut(",".join(r.users)), accounts=_cut(",".join(r.accounts)), partition=r.partition)

    # ---- sdiag
    s = snap.scheduler
    if s is not None:
        for fam, value in (("scheduler_main_cycle_last_seconds", s.main_last_cycle_seconds),
                           ("scheduler_main_cycle_max_seconds", s.main_max_cycle_seconds),
                           ("scheduler_main_cycle_mean_seconds", s.main_mean_cycle_seconds),
                           ("scheduler_main_cycles_total", s.main_cycles_total),
                           ("scheduler_main_depth_mean", s.main_mean_depth),
                           ("scheduler_main_queue_length", s.main_last_queue_length),
                           ("scheduler_backfill_cycle_last_seconds", s.backfill_last_cycle_seconds),
                           ("scheduler_backfill_cycle_max_seconds", s.backfill_max_cycle_seconds),
                           ("scheduler_backfill_cycle_mean_seconds", s.backfill_mean_cycle_seconds),
                           ("scheduler_backfill_cycles_total", s.backfill_cycles_total),
                           ("scheduler_backfill_depth_last", s.backfill_last_depth),
                           ("scheduler_backfill_depth_mean", s.backfill_depth_mean),
                           ("scheduler_backfill_queue_length", s.backfill_last_queue_length),
                           ("scheduler_backfill_last_cycle_timestamp_seconds", s.backfill_last_cycle_time),
                           ("scheduler_backfilled_jobs_total", s.backfill_jobs_total),
                           ("scheduler_jobs_submitted_total", s.jobs_submitted),
                           ("scheduler_jobs_started_total", s.jobs_started),
                           ("scheduler_server_threads", s.server_thread_count),
                           ("scheduler_agent_queue_size", s.agent_queue_size),
                           ("scheduler_dbd_agent_queue_size", s.dbd_agent_queue_size)):
            if value is not None:
                f[fam].add(value)

    # ---- fairshare
    seen: set[tuple[str, str]] = set()
    for row in snap.fairshare:
        key = (row.account, row.user)
        if key in seen:  # the same account can appear under several parents; keep the first
            continue
        seen.add(key)
        lbl = {"account": _cut(row.account), "user": _cut(row.user)}
        for fam, value in (("fairshare_factor", row.fairshare), ("fairshare_level", row.level_fs),
                           ("fairshare_raw_usage", row.raw_usage), ("fairshare_norm_shares", row.norm_shares),
                           ("fairshare_effective_usage", row.effective_usage)):
            if value is not None:
                f[fam].add(value, lbl)
    return [fam for fam in f.values() if fam.lines]


def poller_families(poller, now: float) -> list[Family]:
    """Health of the polling itself: up, per-command success/duration/errors, poll counts."""
    f = {name: _fam(name) for name in ("up", "poll_duration_seconds", "polls_total", "poll_failures_total",
                                        "command_success", "command_duration_seconds", "command_errors_total")}
    h = poller.health()
    f["up"].add(1 if h["up"] else 0)
    f["poll_duration_seconds"].add(round(h["last_poll_duration"], 6))
    f["polls_total"].add(h["polls"])
    f["poll_failures_total"].add(h["poll_failures"])
    for name, st in sorted(h["statuses"].items()):
        f["command_success"].add(1 if st.ok else 0, command=name)
        f["command_duration_seconds"].add(round(st.duration, 6), command=name)
        f["command_errors_total"].add(h["command_errors"].get(name, 0), command=name)
    return [fam for fam in f.values() if fam.lines]


def metric_table_markdown(metrics: dict | None = None, prefix: str = P) -> str:
    """docs/slurm-exporter.md's metric table, generated from METRICS (or another exporter's list)."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, (kind, labels, help_) in (METRICS if metrics is None else metrics).items():
        rows.append(f"| `{prefix}{name}` | {kind} | {labels.replace(',', ', ') or '–'} | {help_} |")
    return "\n".join(rows)


def iter_names() -> Iterable[str]:
    return (P + n for n in METRICS)
