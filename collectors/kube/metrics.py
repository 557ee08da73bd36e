"""The kube-exporter's metric families, from the snapshot, the Kubernetes view and the watch caches.

Per-gang series exist for running gangs and the `top_pending` first pending gangs of each queue;
the rest is aggregated. Names, namespaces and queues are label values only (escaped, cut to LABEL_MAX).
`METRICS` is the single list; docs/kube-exporter.md's table is generated from it.
"""

from __future__ import annotations

from collections import Counter

from ..exposition import COUNTER, GAUGE, Family
from ..slurm import metrics as slurm_metrics
from ..slurm.model import Snapshot
from .translate import KubeView

P = "gangwatch_kube_"

METRICS: dict[str, tuple[str, str, str]] = {
    "up": (GAUGE, "", "Whether the watch caches of pods and nodes follow the API server (1) or not (0); on 0 the last objects are served, stale."),
    "snapshot_age_seconds": (GAUGE, "", "Seconds since the served snapshot was known to match the API server."),
    "resource_up": (GAUGE, "resource,version", "Whether the resource is listed and watched (1), or absent: forbidden, not installed, unknown version, unreachable (0)."),
    "resource_objects": (GAUGE, "resource", "Objects of the resource in the watch cache."),
    "resource_relists_total": (COUNTER, "resource", "Full LISTs of the resource since start (the first, and one after each 410 Gone or broken watch)."),
    "resource_watch_events_total": (COUNTER, "resource", "Watch events applied to the resource's cache since start."),
    "api_requests_total": (COUNTER, "verb", "Requests sent to the API server by verb (discovery, list, watch); steady state is one watch per resource per watch timeout."),
    "gangs": (GAUGE, "scheduler,queue,state,reason", "Gangs (Volcano PodGroups, Kueue Workloads) by scheduler, queue, state and reason."),
    "gang_info": (GAUGE, "jobid,scheduler,namespace,name,queue,local_queue,state,reason", "Facts about a running gang or a top pending gang; value 1."),
    "gang_pods": (GAUGE, "jobid,phase", "Pods of a running or top pending gang by phase (running, pending, failing)."),
    "gang_min_member": (GAUGE, "jobid", "Pods the gang needs running together (Volcano minMember, Kueue pod set counts)."),
    "gang_gpus": (GAUGE, "jobid", "GPUs a running gang's pods hold, or a pending gang asks for."),
    "gang_partial": (GAUGE, "jobid", "Whether a running gang misses pods (pending, failing or crash-looping) while holding GPUs (1)."),
    "gang_queue_position": (GAUGE, "jobid,queue", "Position of a pending gang in its queue (1 = next), by priority then age."),
    "gang_wait_seconds": (GAUGE, "jobid,queue,reason", "Seconds a pending gang has waited since it was created."),
    "gang_blocking_resource_missing": (GAUGE, "jobid,resource,flavor", "Amount of a resource a pending gang misses (quota or free capacity), in the resource's unit."),
    "job_node_gpus": (GAUGE, "jobid,node", "GPUs a running gang's pods hold on a node; join node metrics to gangs on `node`."),
    "queue_info": (GAUGE, "queue,kind,state,cohort", "A Volcano queue or Kueue ClusterQueue and its state; value 1."),
    "queue_quota": (GAUGE, "queue,flavor,resource", "Volcano capability or Kueue nominal quota of a resource (absent when unlimited)."),
    "queue_used": (GAUGE, "queue,flavor,resource", "Volcano allocated or Kueue used (admitted) amount of a resource."),
    "queue_reserved": (GAUGE, "queue,flavor,resource", "Kueue quota reserved (admitted or waiting for admission checks) of a resource."),
    "queue_deserved": (GAUGE, "queue,resource", "Volcano deserved share of a resource (capacity plugin)."),
    "node_gpus": (GAUGE, "node", "Allocatable nvidia.com/gpu of the node."),
    "node_gpus_allocated": (GAUGE, "node", "nvidia.com/gpu requested by the pods bound to the node."),
    "node_info": (GAUGE, "node,state,flags", "A node's state (idle, mixed, allocated, down, drained when cordoned); value 1."),
}


def _fam(name: str) -> Family:
    return slurm_metrics.family(name, METRICS, P)


_cut = slurm_metrics.cut_label


def snapshot_families(snap: Snapshot, view: KubeView, now: float, top_pending: int = 100) -> list[Family]:
    f = {name: _fam(name) for name in METRICS if name.startswith(("gang", "job_", "queue", "node"))}
    jobs = {j.job_id: j for j in snap.jobs}
    agg = Counter((g.kind, g.queue, jobs[g.job_id].state, jobs[g.job_id].reason) for g in view.gangs)
    for (kind, queue, state, reason), n in sorted(agg.items()):
        f["gangs"].add(n, scheduler=kind, queue=_cut(queue), state=state, reason=reason)
    for g in view.gangs:
        j = jobs[g.job_id]
        if j.state == "PENDING" and (g.position is None or g.position > top_pending):
            continue
        if j.state not in ("PENDING", "RUNNING"):
            continue
        jid = str(g.job_id)
        f["gang_info"].add(1, jobid=jid, scheduler=g.kind, namespace=_cut(g.namespace), name=_cut(g.name),
                           queue=_cut(g.queue), local_queue=_cut(g.local_queue), state=j.state, reason=j.reason)
        for phase, n in (("running", g.pods_running), ("pending", g.pods_pending), ("failing", g.pods_failing)):
            f["gang_pods"].add(n, jobid=jid, phase=phase)
        if g.min_member is not None:
            f["gang_min_member"].add(g.min_member, jobid=jid)
        if j.gpus is not None:
            f["gang_gpus"].add(j.gpus, jobid=jid)
        if j.state == "RUNNING":
            f["gang_partial"].add(1 if g.partial else 0, jobid=jid)
            for a in j.allocations:
                if a.gpus:
                    f["job_node_gpus"].add(a.gpus, jobid=jid, node=_cut(a.node))
        else:
            f["gang_queue_position"].add(g.position, jobid=jid, queue=_cut(g.queue))
            if j.submit_time is not None:
                f["gang_wait_seconds"].add(round(max(0.0, now - j.submit_time), 3), jobid=jid, queue=_cut(g.queue), reason=j.reason)
            for res, flavor, amount in g.blocking:
                f["gang_blocking_resource_missing"].add(amount, jobid=jid, resource=_cut(res), flavor=_cut(flavor))
    for q in view.queues:
        f["queue_info"].add(1, queue=_cut(q.name), kind=q.kind, state=_cut(q.state), cohort=_cut(q.cohort))
        for r in q.rows:
            labels = {"queue": _cut(q.name), "flavor": _cut(r.flavor), "resource": _cut(r.resource)}
            for name, value in (("queue_quota", r.quota), ("queue_used", r.used), ("queue_reserved", r.reserved)):
                if value is not None:
                    f[name].add(value, **labels)
            if r.deserved is not None:
                f["queue_deserved"].add(r.deserved, queue=_cut(q.name), resource=_cut(r.resource))
    for n in snap.nodes:
        if n.gpus_total is not None:
            f["node_gpus"].add(n.gpus_total, node=_cut(n.name))
            f["node_gpus_allocated"].add(n.gpus_allocated or 0, node=_cut(n.name))
        f["node_info"].add(1, node=_cut(n.name), state=n.state_label, flags=",".join(n.state_flags))
    return [fam for fam in f.values() if fam.lines]


def cache_families(cache, now: float) -> list[Family]:
    """Health of the watch caches: up, per-resource state, request counts (always served)."""
    f = {name: _fam(name) for name in ("up", "snapshot_age_seconds", "resource_up", "resource_objects",
                                        "resource_relists_total", "resource_watch_events_total", "api_requests_total")}
    h = cache.health(now)
    f["up"].add(1 if h["up"] else 0)
    if h["age"] is not None:
        f["snapshot_age_seconds"].add(round(h["age"], 3))
    for key, r in sorted(h["resources"].items()):
        f["resource_up"].add(1 if r["ok"] else 0, resource=key, version=r["version"])
        f["resource_objects"].add(r["objects"], resource=key)
        f["resource_relists_total"].add(r["relists"], resource=key)
        f["resource_watch_events_total"].add(r["events"], resource=key)
    for verb, n in sorted(h["requests"].items()):
        f["api_requests_total"].add(n, verb=verb)
    return [fam for fam in f.values() if fam.lines]


def metric_table_markdown() -> str:
    return slurm_metrics.metric_table_markdown(METRICS, P)
