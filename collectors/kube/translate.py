"""From the watch cache to the scheduler snapshot: pure, no I/O (the benchmark times this).

A gang is a Volcano PodGroup or a Kueue Workload; it becomes a `collectors.slurm.model.Job`, so the
diagnosis, the backfill views and the dashboard read Kubernetes gangs as they read Slurm jobs:

* `job_id`: a stable number made from the object's UID; `name`: `namespace/name`; `account`: the namespace;
* `partition`: the Volcano queue or the Kueue ClusterQueue; `qos`: the Kueue LocalQueue (`namespace/name`);
* `state`: PENDING, RUNNING, COMPLETED, FAILED or SUSPENDED; `state_flags` has PARTIAL for a running
  gang missing pods (some pending, crash-looping or failed: GPUs held, no progress);
* `reason`: a short code (Unschedulable, QueueClosed, QueueOverCapability, InsufficientQuota,
  AdmissionCheck, Preempted, Inadmissible, QueueStopped, Priority, NoStatus, PartialGang);
* `node_count`: the nodes its pods run on, or, pending, the pods it needs (`minMember`, the pod sets'
  counts): a pod-based gang asks for pods, not nodes; `gpus`, `cpus`: summed over its pods (or, pending,
  what it asks for); `nodes`, `allocations`: where its pods run, with the GPUs each holds;
* `flags`: ("volcano",) or ("kueue",).

What Slurm's model has no place for (why pending in plain words, the position in the queue and the
gangs ahead, queue quota against use) is in `KubeView`, served beside the snapshot as `kube`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime

from ..slurm.model import Job, Node, NodeAllocation, Partition, Snapshot, SourceError
from .quantity import format_amount, parse_quantity
from .trim import GPU

VOLCANO, KUEUE = "volcano", "kueue"
AHEAD_MAX = 10  # gangs ahead listed by name; the count is always complete
# pod container states that mean the pod makes no progress while it holds its node
BAD_WAITING = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "RunContainerError"}
_INSUFFICIENT = re.compile(r"(\d+) Insufficient ([\w./-]+)")
_KUEUE_QUOTA = re.compile(r"insufficient (unused )?quota for ([\w./-]+) in flavor ([\w.-]+)(?:[^,]*, (\S+) more needed)?")
_PREEMPTOR_UID = re.compile(r"UID: ([0-9a-fA-F-]{8,})")


@dataclass(frozen=True)
class QuotaRow:
    """One resource of a queue: Volcano's capability/deserved/guarantee against allocated; Kueue's
    nominal quota (per flavor) against reserved and used. None: not set (no limit), never 0."""

    resource: str
    flavor: str = ""
    quota: float | None = None  # Volcano capability, Kueue nominalQuota
    used: float | None = None  # Volcano allocated, Kueue flavorsUsage (admitted)
    reserved: float | None = None  # Kueue flavorsReservation (quota reserved, maybe not yet admitted)
    deserved: float | None = None
    guarantee: float | None = None
    borrowing_limit: float | None = None


@dataclass(frozen=True)
class KubeQueue:
    kind: str  # "volcano-queue" or "kueue-clusterqueue"
    name: str
    state: str = ""  # Volcano Open/Closed/Closing; Kueue Active, or its stopPolicy
    cohort: str = ""
    rows: tuple[QuotaRow, ...] = ()
    pending: int = 0
    running: int = 0
    local_queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ahead:
    name: str  # namespace/name
    owner: str  # the namespace (a tenant), or the owning job's name
    size: int | None
    priority: int | None


@dataclass(frozen=True)
class Gang:
    job_id: int
    kind: str  # volcano / kueue
    namespace: str
    name: str
    queue: str
    local_queue: str = ""
    min_member: int | None = None  # pods that must run together
    pods_running: int = 0
    pods_pending: int = 0
    pods_failing: int = 0  # crash-looping, failed or not pulling their image
    why: tuple[str, ...] = ()  # plain words, most important first
    position: int | None = None  # 1 = next in its queue (pending gangs only)
    queue_pending: int = 0
    ahead: tuple[Ahead, ...] = ()
    local_position: int | None = None  # Kueue: position in its LocalQueue
    blocking: tuple[tuple[str, str, float], ...] = ()  # (resource, flavor, amount missing)
    preempted_by: str = ""  # namespace/name of the preemptor, when known
    preemptor_queue: str = ""
    partial: bool = False


@dataclass(frozen=True)
class KubeView:
    gangs: tuple[Gang, ...] = ()
    queues: tuple[KubeQueue, ...] = ()
    resources: dict = field(default_factory=dict)  # resource key -> {"version", "ok", "error", "objects"}
    flavors: dict = field(default_factory=dict)  # Kueue ResourceFlavor -> the node labels it selects


def gang_id(uid: str, fallback: str) -> int:
    """A stable 48-bit id (JSON-safe) from the UID: ids survive exporter restarts."""
    return int.from_bytes(hashlib.blake2b((uid or fallback).encode(), digest_size=6).digest(), "big")


def ts(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _d(v) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v) -> list:
    return v if isinstance(v, list) else []


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _conds(obj: dict) -> dict[str, dict]:
    return {str(c.get("type")): c for c in _l(_d(obj.get("status")).get("conditions")) if isinstance(c, dict)}


def _resources(raw: dict) -> dict[str, float]:
    """A resource list as numbers; ResourceQuota-style keys ("requests.cpu", "count/pods") folded or dropped."""
    out: dict[str, float] = {}
    for k, v in _d(raw).items():
        k = str(k)
        if k.startswith("limits.") or k.startswith("count/") or k == "pods":
            continue
        k = k[len("requests."):] if k.startswith("requests.") else k
        q = parse_quantity(v)
        if q is not None:
            out[k] = max(out.get(k, 0.0), q)
    return out


# ----------------------------------------------------------------------------- pods and nodes
@dataclass
class _PodSummary:
    running: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    failing: list = field(default_factory=list)
    done: int = 0


def _summarise(pods: list[dict]) -> _PodSummary:
    s = _PodSummary()
    for p in pods:
        if p["phase"] == "Succeeded":
            s.done += 1
        elif p["phase"] == "Failed" or any(w in BAD_WAITING for w in p["waiting"]):
            s.failing.append(p)
        elif p["phase"] == "Running":
            s.running.append(p)
        else:
            s.pending.append(p)
    return s


def _holding(p: dict) -> bool:
    return bool(p["node"]) and p["phase"] not in ("Succeeded", "Failed")


def build_nodes(nodes: list[dict], pods: list[dict], queues: tuple[str, ...],
                memo: dict | None = None) -> tuple[list[Node], dict[str, dict]]:
    """(Nodes, {node: free resources}) from Node objects and the requests of the pods bound to them.
    `memo` ({name: (node object, used, Node)}) keeps the Node of an unchanged node with unchanged use."""
    used: dict[str, dict[str, float]] = {}
    for p in pods:
        if p["node"] and p["phase"] not in ("Succeeded", "Failed"):
            u = used.get(p["node"])
            if u is None:
                u = used[p["node"]] = {}
            for k, v in p["requests"].items():
                u[k] = u.get(k, 0.0) + v
    out, free = [], {}
    memo = {} if memo is None else memo
    for n in nodes:
        alloc, u = n["allocatable"], used.get(n["name"], {})
        if n["ready"] and not n["unschedulable"]:
            free[n["name"]] = {k: v - u.get(k, 0.0) for k, v in alloc.items()}
        hit = memo.get(n["name"])
        if hit is not None and hit[0] is n and hit[1] == u:
            out.append(hit[2])
            continue
        gpus, gpus_used = alloc.get(GPU), u.get(GPU, 0.0)
        if n["ready"] is False or n["ready"] is None:
            state = "DOWN" if n["ready"] is False else "UNKNOWN"
        elif not u:
            state = "IDLE"
        elif gpus and gpus_used >= gpus:
            state = "ALLOCATED"
        else:
            state = "MIXED"
        flags = ("DRAIN",) if n["unschedulable"] else ()
        mem = alloc.get("memory")
        out.append(Node(
            name=n["name"], state=state, state_flags=flags,
            reason=n["ready_message"] if n["ready"] is False else ("cordoned" if n["unschedulable"] else ""),
            cpus_total=int(alloc["cpu"]) if "cpu" in alloc else None,
            cpus_allocated=int(-(-u.get("cpu", 0.0) // 1)) if "cpu" in alloc else None,
            memory_total_bytes=int(mem) if mem is not None else None,
            memory_allocated_bytes=int(u.get("memory", 0.0)) if mem is not None else None,
            gpus_total=int(gpus) if gpus is not None else 0, gpus_allocated=int(gpus_used),
            gpu_types=tuple(v for k, v in n["labels"].items() if k == "nvidia.com/gpu.product"),
            gres=f"gpu:{int(gpus)}" if gpus else "",
            features=tuple(f"{k}={v}" for k, v in sorted(n["labels"].items())), partitions=queues))
        memo[n["name"]] = (n, u, out[-1])
    if len(memo) > len(nodes):  # deleted nodes
        names = {n["name"] for n in nodes}
        for gone in [k for k in memo if k not in names]:
            del memo[gone]
    return out, free


def fit_gap(free: dict[str, dict], per_pod: dict[str, float], pods: int) -> tuple[int, list[tuple[str, float]]]:
    """How many of `pods` identical pods fit the free resources now, first fit, and what is missing
    (per resource, for the pods that do not fit). A hint beside the scheduler's own words.
    `free` is only read."""
    need = {k: v for k, v in per_pod.items() if v > 0}
    if not need or pods <= 0:
        return pods, []
    fits = 0
    for room in free.values():
        while fits < pods and all(room.get(k, 0.0) >= v for k, v in need.items()):
            room = {k: room.get(k, 0.0) - need.get(k, 0.0) for k in room}
            fits += 1
        if fits >= pods:
            break
    left = pods - fits
    if not left:
        return fits, []
    total_free = {k: sum(max(0.0, r.get(k, 0.0)) for r in free.values()) for k in need}
    missing = [(k, v * pods - total_free[k]) for k, v in need.items() if v * pods > total_free[k]]
    if not missing:  # enough in total, but fragmented over nodes: name the largest resource per pod
        k = max(need, key=lambda r: (r == GPU, need[r]))
        missing = [(k, need[k] * left)]
    return fits, missing


# ----------------------------------------------------------------------------- the gangs
@dataclass
class _Draft:
    """A gang being built: its Job fields and its KubeView fields."""

    kind: str
    obj: dict
    namespace: str
    name: str
    uid: str
    queue: str
    local_queue: str = ""
    state: str = "PENDING"
    reason: str = ""
    why: list = field(default_factory=list)
    min_member: int | None = None
    size: int | None = None
    per_pod: dict = field(default_factory=dict)
    total: dict = field(default_factory=dict)
    priority: int | None = None
    created: float | None = None
    started: float | None = None
    pods: list = field(default_factory=list)
    blocking: list = field(default_factory=list)
    preempted_by: str = ""
    preemptor_queue: str = ""
    owner: str = ""
    limit: int | None = None  # seconds (Kueue maximumExecutionTimeSeconds)
    _entry: "Ahead | None" = None

    def entry(self) -> "Ahead":
        """How this gang is listed among those ahead of another (made once per draft)."""
        if self._entry is None:
            self._entry = Ahead(f"{self.namespace}/{self.name}", self.owner or self.namespace, self.size, self.priority)
        return self._entry


def _controller(m: dict) -> dict:
    return next((_d(o) for o in _l(m.get("ownerReferences")) if _d(o).get("controller")), {})


def _volcano(pg: dict, pods: list[dict], queues: dict[str, tuple], queues_known: bool, free: dict,
             fit_memo: dict, vcjob: dict | None = None) -> _Draft:
    m, spec, st = _d(pg.get("metadata")), _d(pg.get("spec")), _d(pg.get("status"))
    owner = str(_controller(m).get("name") or "")
    d = _Draft(VOLCANO, pg, str(m.get("namespace") or ""), str(m.get("name") or ""), str(m.get("uid") or ""),
               str(spec.get("queue") or "default"), owner=owner, min_member=_int(spec.get("minMember")),
               created=ts(m.get("creationTimestamp")), pods=pods)
    d.size = d.min_member
    d.total = _resources(spec.get("minResources"))
    sizes = [p["requests"] for p in pods]
    if sizes:
        d.per_pod = max(sizes, key=lambda r: (r.get(GPU, 0.0), r.get("cpu", 0.0)))
    elif d.size:
        d.per_pod = {k: v / d.size for k, v in d.total.items()}
    phase = str(st.get("phase") or "")
    conds = _conds(pg)
    d.state = {"Running": "RUNNING", "Completed": "COMPLETED", "Pending": "PENDING", "Inqueue": "PENDING",
               "Unknown": "UNKNOWN", "": "PENDING"}.get(phase, phase.upper())
    sched = conds.get("Scheduled")
    if sched and sched.get("status") == "True":
        d.started = ts(sched.get("lastTransitionTime"))
    # the Volcano Job that owns the group says what its controller is doing with it
    jst = _d(_d(vcjob).get("status"))
    jphase = str(_d(jst.get("state")).get("phase") or "")
    if jphase and jphase not in ("Pending", "Running", "Completed", "Completing"):
        retries = _int(jst.get("retryCount"))
        msg = str(_d(jst.get("state")).get("message") or _d(jst.get("state")).get("reason") or "")
        d.why.append(f"Volcano job {owner} is {jphase.lower()}" + (f" (retry {retries})" if retries else "")
                     + (f": {msg}" if msg else ""))
    if d.state != "PENDING":
        return d
    if not st:
        d.reason = "NoStatus"
        d.why.append("no status yet: the Volcano scheduler has not looked at this PodGroup (is it running, "
                     "and is schedulerName volcano?)")
    q = queues.get(d.queue)
    if queues_known and q is None:
        d.reason = d.reason or "QueueMissing"
        d.why.append(f"queue {d.queue} does not exist")
    elif q is not None:
        qstate, cap, alloc, deserved = q
        if qstate and qstate != "Open":
            d.reason = "QueueClosed"
            d.why.append(f"queue {d.queue} is {qstate.lower()}: it admits no new gangs")
        for res, need in sorted(d.total.items()):
            if res in cap and alloc.get(res, 0.0) + need > cap[res]:
                room = max(0.0, cap[res] - alloc.get(res, 0.0))
                d.reason = d.reason or "QueueOverCapability"
                d.blocking.append((res, "", need - room))
                d.why.append(f"queue {d.queue} is at its capability for {res}: the gang needs {format_amount(res, need)}, "
                             f"capability {format_amount(res, cap[res])} with {format_amount(res, alloc.get(res, 0.0))} "
                             f"allocated ({format_amount(res, room)} free, {format_amount(res, need - room)} missing)")
        over = [r for r, v in deserved.items() if alloc.get(r, 0.0) >= v > 0]
        if over:
            d.why.append(f"queue {d.queue} already uses its deserved share of {', '.join(sorted(over))}: "
                         "it gets more only from idle capacity of other queues")
    unsched = conds.get("Unschedulable")
    if unsched and unsched.get("status") == "True":
        msg = str(unsched.get("message") or unsched.get("reason") or "")
        d.reason = d.reason or "Unschedulable"
        d.why.insert(0, f"unschedulable: {msg}" if msg else "unschedulable (the scheduler gave no message)")
        named = _INSUFFICIENT.findall(msg)
        waiting = max(1, (d.size or 1) - len([p for p in pods if p["phase"] == "Running"]))
        # gangs of one shape share the answer: thousands of pending gangs cost one fit each shape
        memo_key = (tuple(sorted(d.per_pod.items())), waiting)
        if memo_key not in fit_memo:
            fits, missing = fit_gap(free, d.per_pod, waiting)
            short = {r for r, _ in missing}
            need = ", ".join(f"{format_amount(r, v)} {r}" for r, v in sorted(d.per_pod.items()) if r in short)
            text = (f"{waiting} pod(s) of {need} each wait; the nodes have room for {fits} now: missing "
                    + ", ".join(f"{format_amount(r, a)} {r}" for r, a in missing)) if missing else ""
            fit_memo[memo_key] = (missing, text)
        missing, text = fit_memo[memo_key]
        d.blocking.extend((res, "", amount) for res, amount in missing)
        if missing:
            d.why.insert(1, text)
        elif named:
            for count, res in named:
                d.blocking.append((res, "", float(count)))
    if not d.reason:
        d.reason = "Priority"
    return d


def _kueue(wl: dict, pods: list[dict], lqs: dict[str, dict], cqs: dict[str, dict], lq_known: bool,
           by_uid: dict[str, "_Draft"]) -> _Draft:
    m, spec, st = _d(wl.get("metadata")), _d(wl.get("spec")), _d(wl.get("status"))
    ns = str(m.get("namespace") or "")
    lq_name = str(spec.get("queueName") or "")
    lq = lqs.get(f"{ns}/{lq_name}")
    admission = _d(st.get("admission"))
    cq = str(admission.get("clusterQueue") or _d(_d(lq).get("spec")).get("clusterQueue") or "")
    owner = next((str(_d(o).get("name")) for o in _l(m.get("ownerReferences")) if _d(o).get("controller")), "")
    d = _Draft(KUEUE, wl, ns, str(m.get("name") or ""), str(m.get("uid") or ""), cq,
               local_queue=f"{ns}/{lq_name}" if lq_name else "", owner=owner, priority=_int(spec.get("priority")),
               limit=_int(spec.get("maximumExecutionTimeSeconds")),
               created=ts(m.get("creationTimestamp")), pods=pods)
    sets = [_d(s) for s in _l(spec.get("podSets"))]
    counts = [_int(s.get("count")) for s in sets]
    d.size = sum(c for c in counts if c) if sets and all(c is not None for c in counts) else None
    d.min_member = sum((_int(s.get("minCount")) or _int(s.get("count")) or 0) for s in sets) or None
    for s in sets:
        for k, v in _d(s.get("requests")).items():
            d.total[k] = d.total.get(k, 0.0) + v * (_int(s.get("count")) or 0)
    if sets:
        d.per_pod = max((_d(s.get("requests")) for s in sets), key=lambda r: (r.get(GPU, 0.0), r.get("cpu", 0.0)))
    for rr in _l(st.get("resourceRequests")):  # what Kueue itself computed, per pod set (totals)
        for k, v in _resources(_d(rr).get("resources")).items():
            d.total.setdefault(k, v)
    conds = _conds(wl)

    def true(t: str) -> bool:
        return _d(conds.get(t)).get("status") == "True"

    if true("Finished"):
        d.state = "FAILED" if str(_d(conds["Finished"]).get("reason")) == "Failed" else "COMPLETED"
        return d
    if true("Admitted"):
        d.state = "RUNNING"
        d.started = ts(_d(conds["Admitted"]).get("lastTransitionTime"))
        return d
    if spec.get("active") is False:
        d.state, d.reason = "SUSPENDED", "Deactivated"
        d.why.append("deactivated (spec.active is false): Kueue will not admit it until it is reactivated")
        return d
    if not st:
        d.reason = "NoStatus"
        d.why.append("no status yet: Kueue has not looked at this Workload (is the Kueue controller running?)")
    if lq_name and lq_known and lq is None:
        d.reason = "Inadmissible"
        d.why.append(f"LocalQueue {lq_name} does not exist in namespace {ns}")
    cq_obj = cqs.get(cq)
    if cq_obj is not None:
        stop = str(_d(cq_obj.get("spec")).get("stopPolicy") or "None")
        if stop != "None":
            d.reason = d.reason or "QueueStopped"
            d.why.append(f"ClusterQueue {cq} is stopped ({stop})")
    elif cq and cqs:
        d.reason = d.reason or "Inadmissible"
        d.why.append(f"ClusterQueue {cq} does not exist")
    qr = _d(conds.get("QuotaReserved"))
    msg = str(qr.get("message") or "")
    if qr.get("status") == "False" and msg:
        if str(qr.get("reason")) == "Inadmissible":
            d.reason = d.reason or "Inadmissible"
            if f"LocalQueue {lq_name} does not exist" not in " ".join(d.why):
                d.why.append(f"inadmissible: {msg}")
        else:
            d.reason = d.reason or "InsufficientQuota"
            d.why.append(f"Kueue: {msg}")
            for unused, res, flavor, more in _KUEUE_QUOTA.findall(msg):
                amount = parse_quantity(more) if more else _quota_gap(cq_obj, flavor, res, d.total.get(res))
                if amount is not None:
                    d.blocking.append((res, flavor, amount))
                    d.why.append(_quota_words(cq, cq_obj, flavor, res, d.total.get(res), amount))
    if true("QuotaReserved"):
        checks = [_d(c) for c in _l(st.get("admissionChecks")) if _d(c).get("state") != "Ready"]
        if checks:
            d.reason = d.reason or "AdmissionCheck"
            d.why.append("quota reserved; waiting for admission check(s): " + ", ".join(
                f"{c.get('name')} ({c.get('state') or 'no state'}{': ' + str(c['message']) if c.get('message') else ''})"
                for c in checks))
    ev = _d(conds.get("Evicted"))
    if ev.get("status") == "True" or _d(conds.get("Preempted")).get("status") == "True":
        pre = _d(conds.get("Preempted")) if _d(conds.get("Preempted")).get("status") == "True" else ev
        if str(pre.get("reason")) in ("Preempted", "InClusterQueue", "InCohort", "InCohortReclamation",
                                      "InCohortFairSharing", "InCohortReclaimWhileBorrowing") or "reempt" in str(pre.get("message")):
            d.reason = d.reason if d.reason not in ("", "InsufficientQuota") else "Preempted"
            uid = _PREEMPTOR_UID.search(str(pre.get("message") or ""))
            who = by_uid.get(uid.group(1)) if uid else None
            if who is not None:
                d.preempted_by, d.preemptor_queue = f"{who.namespace}/{who.name}", who.queue
            d.why.insert(0, f"preempted: {pre.get('message') or pre.get('reason')}"
                         + (f" (by {d.preempted_by} in ClusterQueue {d.preemptor_queue})" if who else ""))
    if not d.reason:
        d.reason = "Priority"
    return d


def _quota_row(cq_obj: dict | None, flavor: str, res: str) -> tuple[float | None, float | None]:
    """(nominal quota, reserved) of a flavor's resource in a ClusterQueue."""
    if cq_obj is None:
        return None, None
    quota = None
    for rg in _l(_d(cq_obj.get("spec")).get("resourceGroups")):
        for fl in _l(_d(rg).get("flavors")):
            if _d(fl).get("name") == flavor:
                for r in _l(_d(fl).get("resources")):
                    if _d(r).get("name") == res:
                        quota = parse_quantity(_d(r).get("nominalQuota"))
    reserved = None
    for fl in _l(_d(cq_obj.get("status")).get("flavorsReservation")):
        if _d(fl).get("name") == flavor:
            for r in _l(_d(fl).get("resources")):
                if _d(r).get("name") == res:
                    reserved = parse_quantity(_d(r).get("total"))
    return quota, reserved


def _quota_gap(cq_obj, flavor, res, need) -> float | None:
    quota, reserved = _quota_row(cq_obj, flavor, res)
    if quota is None or need is None:
        return None
    return max(0.0, need - max(0.0, quota - (reserved or 0.0)))


def _quota_words(cq: str, cq_obj, flavor: str, res: str, need, missing: float) -> str:
    quota, reserved = _quota_row(cq_obj, flavor, res)
    parts = [f"blocked by {res} in flavor {flavor}" + (f" of ClusterQueue {cq}" if cq else ""),
             f"needs {format_amount(res, need)}" if need is not None else "",
             f"nominal quota {format_amount(res, quota)}" if quota is not None else "",
             f"{format_amount(res, reserved)} reserved" if reserved is not None else "",
             f"missing {format_amount(res, missing)}"]
    return ": " .join(parts[:1]) + ": " + ", ".join(p for p in parts[1:] if p)


def _positions(drafts: list[_Draft]) -> dict[int, tuple[int, int, tuple[Ahead, ...], int | None]]:
    """Pending gangs per queue in the order the schedulers take them: priority, then age (Kueue's
    BestEffortFIFO/StrictFIFO and Volcano's default order). -> {index: (position, pending, ahead, local position)}."""
    by_queue: dict[tuple[str, str], list[int]] = {}
    for i, d in enumerate(drafts):
        if d.state == "PENDING":
            by_queue.setdefault((d.kind, d.queue), []).append(i)
    out = {}
    for idxs in by_queue.values():
        idxs.sort(key=lambda i: (-(drafts[i].priority or 0), drafts[i].created or 0.0, drafts[i].name))
        local_seen: dict[str, int] = {}
        entries = [drafts[j].entry() for j in idxs]
        for pos, i in enumerate(idxs):
            d = drafts[i]
            ahead = tuple(entries[max(0, pos - AHEAD_MAX):pos])
            local = None
            if d.local_queue:
                local = local_seen[d.local_queue] = local_seen.get(d.local_queue, 0) + 1
            out[i] = (pos + 1, len(idxs), ahead, local)
    return out


def _job(d: _Draft, gid: int, partial: bool) -> Job:
    holding = [p for p in d.pods if _holding(p)]
    per_node: dict[str, dict[str, float]] = {}
    for p in holding:
        acc = per_node.setdefault(p["node"], {})
        for k, v in p["requests"].items():
            acc[k] = acc.get(k, 0.0) + v
    nodes = tuple(sorted(per_node))
    running = d.state == "RUNNING"
    if running and holding:
        gpus = int(sum(a.get(GPU, 0.0) for a in per_node.values()))
        cpus = int(-(-sum(a.get("cpu", 0.0) for a in per_node.values()) // 1))
    else:
        gpus = int(d.total[GPU]) if GPU in d.total else (int(d.per_pod.get(GPU, 0.0) * d.size) if d.size else None)
        cpus = int(-(-d.total["cpu"] // 1)) if "cpu" in d.total else None
    flags = ("PARTIAL",) if partial else ()
    return Job(
        job_id=gid, name=f"{d.namespace}/{d.name}", account=d.namespace, partition=d.queue, qos=d.local_queue,
        state=d.state, state_flags=flags, reason=d.reason or ("PartialGang" if partial else "None"),
        priority=d.priority, submit_time=d.created, eligible_time=d.created,
        # pods run until they end; Kueue's maximumExecutionTimeSeconds is the only limit there is
        time_limit_seconds=d.limit, time_limit_infinite=d.limit is None,
        start_time=d.started if running else None,
        node_count=len(nodes) if running and nodes else d.size, cpus=cpus, gpus=gpus,
        nodes=nodes if running else (), allocations=tuple(
            NodeAllocation(node=n, cpus=int(-(-a.get("cpu", 0.0) // 1)) if "cpu" in a else None,
                           memory_bytes=int(a["memory"]) if "memory" in a else None, gpus=int(a.get(GPU, 0.0)))
            for n, a in sorted(per_node.items())) if running else (),
        restarts=sum(p["restarts"] for p in d.pods), comment=d.owner, flags=(d.kind,),
        tres_per_node=f"gres/gpu:{int(d.per_pod[GPU])}" if d.per_pod.get(GPU) else "")


def _group_pods(pods: list[dict]) -> tuple[dict, dict]:
    by_group: dict[tuple[str, str], list] = {}
    by_owner: dict[str, list] = {}
    for p in pods:
        if p["group"]:
            by_group.setdefault((p["namespace"], p["group"]), []).append(p)
        for o in p["owners"]:
            by_owner.setdefault(o, []).append(p)
    return by_group, by_owner


def _same(before: list | None, now: list) -> bool:
    """The same cached objects in the same order (an unchanged watch cache)."""
    return before is not None and len(before) == len(now) and all(a is b for a, b in zip(before, now))


def _reuse(hit, refs: tuple, flags: tuple) -> "_Draft | None":
    """The previous build's draft when every input is the same object (and the flags equal)."""
    if hit is None or hit[1] != flags or len(hit[0]) != len(refs):
        return None
    return hit[2] if all(a is b for a, b in zip(hit[0], refs)) else None


def _finish(d: _Draft, pos, qlen: int, ahead: tuple, local) -> tuple[Job, Gang]:
    """The Job and the Gang of a draft at its place in the queue (the draft is left as it is)."""
    s = _summarise(d.pods)
    # without any pod joined to the gang nothing is known about its progress: not "partial"
    partial = d.state == "RUNNING" and bool(d.pods) and bool(
        s.pending or s.failing or (d.min_member and len(s.running) + s.done < d.min_member))
    why = list(d.why)
    if partial:
        why.append(f"partial gang: {len(s.running)} of {d.min_member or d.size or '?'} pods running, "
                   f"{len(s.pending)} pending, {len(s.failing)} failing or crash-looping; "
                   "its GPUs are held without progress")
        for p in (s.pending + s.failing)[:3]:
            why.append(f"pod {p['name']}: " + (p["unschedulable"] or ", ".join(p["waiting"]) or p["phase"] or "no status"))
    if pos is not None:
        why.append(f"position {pos} of {qlen} pending in {'queue' if d.kind == VOLCANO else 'ClusterQueue'} {d.queue}"
                   + (f" ({pos - 1} ahead)" if pos > 1 else ""))
    gid = gang_id(d.uid, f"{d.kind}/{d.namespace}/{d.name}")
    gang = Gang(job_id=gid, kind=d.kind, namespace=d.namespace, name=d.name, queue=d.queue,
                local_queue=d.local_queue, min_member=d.min_member, pods_running=len(s.running),
                pods_pending=len(s.pending), pods_failing=len(s.failing), why=tuple(why), position=pos,
                queue_pending=qlen, ahead=ahead, local_position=local, blocking=tuple(d.blocking),
                preempted_by=d.preempted_by, preemptor_queue=d.preemptor_queue, partial=partial)
    return _job(d, gid, partial), gang


def build(objects: dict[str, list[dict]], status: dict[str, dict], now: float, cluster: str = "",
          stale: bool = False, taken_at: float | None = None, failing_since: float | None = None,
          memo: dict | None = None) -> tuple[Snapshot, KubeView]:
    """The snapshot and the Kubernetes view from the cached objects of each resource.

    `status[key]` = {"ok": bool, "error": str, "version": str, "absent": bool}: a resource that is not
    ok is named in the snapshot's errors and its part is left out (a queue we cannot read is not an
    open queue: the reasons that need it are not guessed). `memo`, a dict the caller keeps between
    builds, makes a rebuild cost only the gangs whose objects changed."""
    def get(key: str) -> list[dict]:
        return objects.get(key) or []

    def known(key: str) -> bool:
        return bool(_d(status.get(key)).get("ok"))

    errors = [SourceError(f"kube {k}", s.get("error") or "not read", "error" if k in ("pods", "nodes") or not s.get("absent") else "warning")
              for k, s in sorted(status.items()) if not s.get("ok") and s.get("error")]
    vq = {str(_d(q.get("metadata")).get("name")): q for q in get("queues")}
    cqs = {str(_d(q.get("metadata")).get("name")): q for q in get("clusterqueues")}
    lqs = {f"{_d(q.get('metadata')).get('namespace')}/{_d(q.get('metadata')).get('name')}": q for q in get("localqueues")}
    pods = get("pods")
    queue_names = tuple(sorted(vq) + sorted(set(cqs) - set(vq)))
    # memo: what the previous build made of each object, reused while its inputs are the very same
    # cached objects (the watch cache replaces an object on every change), so a rebuild after one
    # event costs a lookup per unchanged gang instead of its whole translation
    memo = {} if memo is None else memo
    node_objs = get("nodes")
    same_pods = _same(memo.get("pods"), pods)
    if same_pods and _same(memo.get("nodes"), node_objs) and memo.get("queue_names") == queue_names:
        nodes, free = memo["nodes_built"]
    else:
        if memo.get("queue_names") != queue_names:
            memo["node_memo"] = {}
        nodes, free = build_nodes(node_objs, pods, queue_names, memo.setdefault("node_memo", {}))
    by_group, by_owner = memo["grouped"] if same_pods else _group_pods(pods)
    memo.update(pods=list(pods), nodes=list(node_objs), queue_names=queue_names, nodes_built=(nodes, free),
                grouped=(by_group, by_owner))
    prev_drafts, new_drafts = memo.get("drafts", {}), {}
    # the free capacity enters the fit hint of pending Volcano gangs
    free_version = hash(tuple(sorted((n, tuple(sorted(r.items()))) for n, r in free.items())))
    drafts: list[_Draft] = []
    fit_memo: dict = {}
    # (state, capability, allocated, deserved) per Volcano queue, parsed once for all its gangs
    vq_parsed = {name: (str(_d(q.get("status")).get("state") or ""), _resources(_d(q.get("spec")).get("capability")),
                        _resources(_d(q.get("status")).get("allocated")), _resources(_d(q.get("spec")).get("deserved")))
                 for name, q in vq.items()}
    q_known = known("queues")
    vcjobs = {(str(_d(j.get("metadata")).get("namespace") or ""), str(_d(j.get("metadata")).get("name") or "")): j
              for j in get("vcjobs")}
    for pg in get("podgroups"):
        m = _d(pg.get("metadata"))
        gpods = by_group.get((str(m.get("namespace") or ""), str(m.get("name") or "")), [])
        ctl = _controller(m)
        job = vcjobs.get((str(m.get("namespace") or ""), str(ctl.get("name") or ""))) if ctl.get("kind") == "Job" else None
        refs = (pg, vq.get(str(_d(pg.get("spec")).get("queue") or "default")), job, *gpods)
        d = _reuse(prev_drafts.get(id(pg)), refs, (q_known, free_version))
        if d is None:
            d = _volcano(pg, gpods, vq_parsed, q_known, free, fit_memo, job)
        new_drafts[id(pg)] = (refs, (q_known, free_version), d)
        drafts.append(d)
    by_uid: dict[str, _Draft] = {}
    lq_known = known("localqueues")
    for wl in get("workloads"):
        m = _d(wl.get("metadata"))
        owners = [str(_d(o).get("uid")) for o in _l(m.get("ownerReferences"))]
        wpods = by_group.get((str(m.get("namespace") or ""), str(m.get("name") or ""))) or \
            [p for o in owners for p in by_owner.get(o, [])]
        spec = _d(wl.get("spec"))
        lq = lqs.get(f"{m.get('namespace')}/{spec.get('queueName')}")
        cq_name = _d(_d(wl.get("status")).get("admission")).get("clusterQueue") or _d(_d(lq).get("spec")).get("clusterQueue")
        refs = (wl, lq, cqs.get(str(cq_name)), *wpods)
        d = _reuse(prev_drafts.get(id(wl)), refs, (lq_known, bool(cqs)))
        if d is None or d.reason == "Preempted":  # the preemptor is looked up among this build's gangs
            d = _kueue(wl, wpods, lqs, cqs, lq_known, by_uid)
        new_drafts[id(wl)] = (refs, (lq_known, bool(cqs)), d)
        by_uid[d.uid] = d
        drafts.append(d)
    # preemptors named by UID may come later in the list than the workloads they preempted
    for i, d in enumerate(drafts):
        if d.kind == KUEUE and d.reason == "Preempted" and not d.preempted_by and _PREEMPTOR_UID.search(" ".join(d.why)):
            drafts[i] = _kueue(d.obj, d.pods, lqs, cqs, lq_known, by_uid)
            new_drafts[id(d.obj)] = (new_drafts[id(d.obj)][0], new_drafts[id(d.obj)][1], drafts[i])
    positions = _positions(drafts)
    prev_final, new_final = memo.get("final", {}), {}
    jobs, gangs = [], []
    for i, d in enumerate(drafts):
        pos, qlen, ahead, local = positions.get(i, (None, 0, (), None))
        key = (pos, qlen, local, tuple(map(id, ahead)))
        hit = prev_final.get(id(d))
        if hit is not None and hit[0] is d and hit[1] == key:
            job, gang = hit[2], hit[3]
        else:
            job, gang = _finish(d, pos, qlen, ahead, local)
        new_final[id(d)] = (d, key, job, gang)
        jobs.append(job)
        gangs.append(gang)
    memo["drafts"], memo["final"] = new_drafts, new_final
    queues = _queues(vq, cqs, lqs, jobs)
    partitions = tuple(Partition(name=q.name, state="UP" if q.state in ("Open", "Active", "") else "DOWN",
                                 nodes=tuple(n.name for n in nodes), total_nodes=len(nodes)) for q in queues)
    versions = ", ".join(f"{k} {s['version']}" for k, s in sorted(status.items()) if s.get("version") and k not in ("pods", "nodes"))
    snap = Snapshot(taken_at=now if taken_at is None else taken_at, source="kubernetes", cluster=cluster,
                    data_parser=versions, jobs=tuple(jobs), nodes=tuple(nodes), partitions=partitions,
                    errors=tuple(errors), stale=stale, last_attempt=now, failing_since=failing_since)
    flavors = {str(_d(f.get("metadata")).get("name")): {str(k): str(v) for k, v in _d(_d(f.get("spec")).get("nodeLabels")).items()}
               for f in get("resourceflavors")}
    view = KubeView(gangs=tuple(gangs), queues=queues, flavors=flavors,
                    resources={k: {"version": s.get("version", ""), "ok": bool(s.get("ok")), "error": s.get("error", ""),
                                   "objects": len(get(k))} for k, s in sorted(status.items())})
    return snap, view


def _queues(vq: dict, cqs: dict, lqs: dict, jobs: list[Job]) -> tuple[KubeQueue, ...]:
    counts: dict[tuple[str, str], list[int]] = {}
    for j in jobs:
        c = counts.setdefault((j.flags[0], j.partition), [0, 0])
        c[0] += j.state == "PENDING"
        c[1] += j.state == "RUNNING"
    out = []
    for name, q in sorted(vq.items()):
        spec, st = _d(q.get("spec")), _d(q.get("status"))
        cap, alloc = _resources(spec.get("capability")), _resources(st.get("allocated"))
        des, gua = _resources(spec.get("deserved")), _resources(_d(spec.get("guarantee")).get("resource"))
        rows = tuple(QuotaRow(resource=r, quota=cap.get(r), used=alloc.get(r), deserved=des.get(r), guarantee=gua.get(r))
                     for r in sorted(set(cap) | set(alloc) | set(des) | set(gua)))
        pending, running = counts.get((VOLCANO, name), [0, 0])
        out.append(KubeQueue("volcano-queue", name, str(st.get("state") or ""), "", rows, pending, running))
    for name, q in sorted(cqs.items()):
        spec, st = _d(q.get("spec")), _d(q.get("status"))
        usage = _flavor_totals(st.get("flavorsUsage"))
        reserved = _flavor_totals(st.get("flavorsReservation"))
        rows = []
        for rg in _l(spec.get("resourceGroups")):
            for fl in _l(_d(rg).get("flavors")):
                fname = str(_d(fl).get("name") or "")
                for r in _l(_d(fl).get("resources")):
                    rname = str(_d(r).get("name") or "")
                    rows.append(QuotaRow(resource=rname, flavor=fname, quota=parse_quantity(_d(r).get("nominalQuota")),
                                         used=usage.get((fname, rname)), reserved=reserved.get((fname, rname)),
                                         borrowing_limit=parse_quantity(_d(r).get("borrowingLimit"))))
        stop = str(spec.get("stopPolicy") or "None")
        active = _conds(q).get("Active")
        state = stop if stop != "None" else ("Active" if not active or active.get("status") == "True"
                                             else f"Inactive: {active.get('message') or active.get('reason')}")
        pending, running = counts.get((KUEUE, name), [0, 0])
        local = tuple(sorted(k for k, lq in lqs.items() if _d(lq.get("spec")).get("clusterQueue") == name))
        out.append(KubeQueue("kueue-clusterqueue", name, state, str(spec.get("cohortName") or spec.get("cohort") or ""),
                             tuple(rows), pending, running, local))
    return tuple(out)


def _flavor_totals(items) -> dict[tuple[str, str], float]:
    out = {}
    for fl in _l(items):
        for r in _l(_d(fl).get("resources")):
            q = parse_quantity(_d(r).get("total"))
            if q is not None:
                out[(str(_d(fl).get("name")), str(_d(r).get("name")))] = q
    return out
