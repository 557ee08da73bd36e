"""The simulated scheduler as the Slurm model: `Snapshot` (collectors/slurm/model.py), whose JSON is
`/api/v1/snapshot`, and the slurm-exporter's metric families built from it by its own code.

This module is the simulator's only dependency on the Slurm model and exporter, so a change there
is absorbed here. Running and pending jobs are listed, and jobs that ended in the last 5 minutes
(slurmctld's MinJobAge), as squeue would show them.
"""

from __future__ import annotations

from types import SimpleNamespace

from collectors.exposition import Family, gauge
from collectors.slurm.metrics import METRICS, P, poller_families, snapshot_families
from collectors.slurm.model import (Dependency, FairshareRow, Job, Node, NodeAllocation, Partition, PriorityFactors,
                                    Reservation, SchedulerStats, Snapshot)

GPU_TYPE = "h100"


def _job(sim, j, fs) -> Job:
    names = sim.cluster.names
    running = j.state in ("RUNNING", "SUSPENDED")
    allocs = tuple(NodeAllocation(names[i], j.cpus_per_node, None, len(idx), idx, GPU_TYPE)
                   for i, idx in zip(j.nodes, j.gpu_idx)) if running else ()
    end = (j.start + j.suspended_s + j.time_limit) if running else j.end
    factors = None
    if j.state == "PENDING" and sim.cfg.priority != "multifactor":  # priority/basic: by age
        factors = PriorityFactors(float(int(10000 + min(10000, max(0.0, sim.t - j.submit) / 60))))
    elif j.state == "PENDING":
        f = sim.priority_factors(j, fs)
        factors = PriorityFactors(f["priority"], 0.0, f["age"], None, f["fairshare"], f["jobsize"], f["partition"], 0.0, 0.0)
    deps = ()
    if j.after_ok is not None:
        deps = (Dependency("afterok", str(j.after_ok), j.dep_state),)
    return Job(
        job_id=j.job_id, name=j.name, user=j.user, account=j.account, partition=j.partition, qos="normal",
        state=j.state, reason=j.reason if j.state == "PENDING" else "None",
        priority=int(factors.priority) if factors else 10000, priority_factors=factors,
        dependency=f"afterok:{j.after_ok}({j.dep_state})" if deps else "", dependencies=deps,
        submit_time=j.submit, eligible_time=j.submit, start_time=j.start, end_time=end,
        time_limit_seconds=int(j.time_limit), node_count=j.nodes_n, cpus=j.cpus_per_node * j.nodes_n,
        gpus=j.gpus, nodes=tuple(names[i] for i in j.nodes) if j.start is not None else (), allocations=allocs,
        exclusive=j.nodes_n > 1, batch_host=names[j.nodes[0]] if j.nodes else "",
        tres_per_node=f"gres/gpu:{j.gpus_per_node}", exit_code=j.exit_code,
        scheduler=("Backfill" if j.backfilled else "Main") if j.start is not None else "",
        comment="simulated job")


def _node(sim, i: int, partitions: tuple[str, ...]) -> Node:
    cl = sim.cluster
    held = sim.gpu_job[i] >= 0
    alloc = int(held.sum())
    cpus = int(sim.cpus_alloc[i])
    state = "IDLE" if cpus == 0 else ("ALLOCATED" if cpus >= cl.cfg.cpus_per_node or alloc == cl.g else "MIXED")
    flags: tuple[str, ...] = ()
    reason, when = "", None
    if i in sim.drain_reason:
        reason, when = sim.drain_reason[i]
        flags = ("DRAIN",)
    return Node(name=cl.names[i], state=state, state_flags=flags, reason=reason, reason_user="root" if reason else "",
                reason_time=when, cpus_total=cl.cfg.cpus_per_node, cpus_allocated=cpus,
                memory_total_bytes=cl.cfg.memory_bytes, gpus_total=cl.g, gpus_allocated=alloc, gpu_types=(GPU_TYPE,),
                gres=f"gpu:{GPU_TYPE}:{cl.g}", gres_used=f"gpu:{GPU_TYPE}:{alloc}", features=(GPU_TYPE, cl.leaves[cl.leaf_of[i]]),
                active_features=(GPU_TYPE, cl.leaves[cl.leaf_of[i]]), partitions=partitions, weight=1,
                cpu_load=round(float(sim.util[i].mean()) * cpus / 4, 2))


def fairshare_rows(sim, fs: dict) -> tuple[FairshareRow, ...]:
    """The sshare tree: root, each account, and its users with usage (Slurm's classic fairshare)."""
    from .engine import SHARES

    by_user: dict[str, list[tuple[str, float]]] = {}
    for (acct, user), u in sim.usage.items():
        by_user.setdefault(acct, []).append((user, u))
    total = sum(u for rows in by_user.values() for _, u in rows) or 1.0
    rows = [FairshareRow("root", depth=0, raw_shares=None, norm_shares=1.0, raw_usage=round(total), norm_usage=1.0,
                         effective_usage=1.0, fairshare=1.0)]
    for acct in sorted(SHARES):
        ns, eu, f = fs[acct]
        rows.append(FairshareRow(acct, depth=1, raw_shares=SHARES[acct], norm_shares=ns,
                                 raw_usage=round(eu * total), norm_usage=eu, effective_usage=eu, fairshare=f,
                                 level_fs=ns / eu if eu > 0 else float("inf")))
        users = sorted(by_user.get(acct, ()))
        for user, u in users:
            uns, ueu = ns / len(users), u / total
            rows.append(FairshareRow(acct, user, depth=2, raw_shares=1, norm_shares=uns, raw_usage=round(u),
                                     norm_usage=ueu, effective_usage=ueu, fairshare=2.0 ** (-ueu / uns),
                                     level_fs=uns / ueu if ueu > 0 else float("inf")))
    return tuple(rows)


def build_snapshot(sim) -> Snapshot:
    cl = sim.cluster
    fs = sim.fairshare()
    jobs = [*sim.running.values(), *sim.pending, *sim.finished]
    jobs.sort(key=lambda j: j.job_id)
    parts = tuple(Partition(name=p, state="UP", nodes=tuple(cl.names[i] for i in idx), total_nodes=len(idx),
                            total_cpus=len(idx) * cl.cfg.cpus_per_node, is_default=p == cl.default_partition,
                            max_time_seconds=cl.partition_max_time[p], default_time_seconds=3600)
                  for p, idx in cl.partitions.items())
    st = sim.stats
    sched = SchedulerStats(jobs_submitted=st["submitted"], jobs_started=st["started"], jobs_completed=st["completed"],
                           jobs_failed=st["failed"], jobs_pending=len(sim.pending), jobs_running=len(sim.running),
                           main_cycles_total=st["cycles"], backfill_cycles_total=st["backfill_cycles"],
                           backfill_jobs_total=st["backfilled"], backfill_active=False, data_since=sim.t0)
    return Snapshot(taken_at=sim.t, source="simulator", cluster=cl.cfg.name, slurm_version="simulated",
                    jobs=tuple(_job(sim, j, fs) for j in jobs),
                    reservations=tuple(Reservation(r.name, tuple(cl.names[i] for i in r.nodes), r.start, r.end, r.flags,
                                                   r.users, partition=cl.default_partition,
                                                   state="ACTIVE" if r.start <= sim.t < r.end else "INACTIVE")
                                       for r in sim.reservations if r.end > sim.t),
                    fairshare=fairshare_rows(sim, fs),
                    nodes=tuple(_node(sim, i, cl.node_partitions(i)) for i in range(cl.n)),
                    partitions=parts, scheduler=sched, switches=cl.switches, last_attempt=sim.t)


def exporter_families(sim, snap: Snapshot, top_pending: int = 100) -> list[Family]:
    """What `gangwatch slurm-exporter` would serve for this cluster, plus the simulator's own facts."""
    fams = snapshot_families(snap, sim.t, top_pending)
    # the simulated scheduler is "polled" once per step and never fails
    health = {"up": True, "last_poll_duration": 0.0, "polls": sim.steps + 1, "poll_failures": 0, "statuses": {},
              "command_errors": {}}
    poller = SimpleNamespace(health=lambda: health, **health)
    try:
        fams += poller_families(poller, sim.t)
    except (AttributeError, KeyError, TypeError):  # the exporter's poller interface moved: keep `up` at least
        kind, _, help_ = METRICS["up"]
        fams.append(Family(P + "up", kind, help_).add(1))
    fams.append(gauge("gangwatch_sim_info", "The cluster is SIMULATED by `gangwatch demo`: its nodes, seed, scheduling "
                      "policy and workload source; value 1.").add(
        1, cluster=sim.cluster.cfg.name, nodes=sim.cluster.n, seed=sim.cfg.seed, policy=sim.last_cycle_policy,
        workload=sim.cfg.trace or "fitted-itp-model"))
    fams.append(gauge("gangwatch_sim_time_seconds", "The simulated clock, in unix seconds.").add(sim.t))
    active = gauge("gangwatch_sim_faults_active", "Injected faults active now, by kind (ground truth at /api/v1/sim/faults).")
    counts: dict[str, int] = {}
    for af in sim.active:
        counts[af.spec.kind] = counts.get(af.spec.kind, 0) + 1
    for kind, n in sorted(counts.items()):
        active.add(n, kind=kind)
    fams.append(active)
    return fams
