"""Parsers for Slurm's JSON: `squeue --json`, `sinfo --json`, `scontrol show ... --json`,
`sdiag --json` and slurmrestd `/slurm/v0.0.XX/{jobs,nodes,partitions,reservations,diag}`.

One parser covers data_parser v0.0.38 (Slurm 22.05) to v0.0.44 (25.11). The version is read from
the document itself (`meta.plugin.data_parser`, `meta.plugins.data_parser`, or for v0.0.38 the
`openapi/v0.0.38` plugin type): one Slurm release can answer in several parser versions, so the
release number is not used to choose. Fields are read by shape rather than by version where
possible (a number may be a plain int or a `{set, infinite, number}` object, a state a string or a
list, `job_resources.nodes` a string or an object), so a version we have never seen is parsed
best effort and reported as a warning. Nothing here raises on bad input: a record that cannot be
read is skipped and counted in the returned warnings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import hostlist
from .model import Job, Node, NodeAllocation, Partition, Reservation, SchedulerStats, SourceError
from .parse_common import (integer, is_infinite, memory_bytes, number, parse_dependency, parse_each, parse_gres,
                           str_list, text, timestamp, tres_gpus, tres_request_gpus)

OLDEST_KNOWN = 38
NEWEST_KNOWN = 44

JOB_BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
NODE_BASE_STATES = frozenset({"IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN"})


@dataclass
class Meta:
    """What a document says about itself."""

    data_parser: str = ""  # "v0.0.40"; "" when the document does not say
    minor: int | None = None  # 40
    slurm_version: str = ""  # "24.05.3"
    cluster: str = ""
    errors: list[str] = field(default_factory=list)  # the document's own errors[] descriptions
    warnings: list[str] = field(default_factory=list)  # ours: unknown version, skipped records


_VER = re.compile(r"v0\.0\.(\d+)")


def read_meta(doc: Any) -> Meta:
    meta = Meta()
    if not isinstance(doc, dict):
        meta.warnings.append("document is not a JSON object")
        return meta
    m = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    plugin = m.get("plugin") if isinstance(m.get("plugin"), dict) else {}
    plugins = m.get("plugins") if isinstance(m.get("plugins"), dict) else {}
    for cand in (plugin.get("data_parser"), plugins.get("data_parser"), plugin.get("type")):
        found = _VER.search(cand) if isinstance(cand, str) else None
        if found:
            meta.minor = int(found.group(1))
            meta.data_parser = f"v0.0.{meta.minor}"
            break
    slurm = m.get("slurm") if isinstance(m.get("slurm"), dict) else m.get("Slurm") if isinstance(m.get("Slurm"), dict) else {}
    meta.slurm_version = text(slurm.get("release"))
    meta.cluster = text(slurm.get("cluster"))
    if meta.minor is None:
        meta.warnings.append("no data_parser version in meta; parsed best effort")
    elif meta.minor > NEWEST_KNOWN:
        meta.warnings.append(f"data_parser {meta.data_parser} is newer than the newest known "
                             f"(v0.0.{NEWEST_KNOWN}); parsed best effort")
    elif meta.minor < OLDEST_KNOWN:
        meta.warnings.append(f"data_parser {meta.data_parser} is older than v0.0.{OLDEST_KNOWN}; parsed best effort")
    for err in doc.get("errors") or []:
        if isinstance(err, dict):
            desc = text(err.get("description")) or text(err.get("error")) or "error"
            meta.errors.append(desc)
        elif isinstance(err, str):
            meta.errors.append(err)
    return meta


try:  # orjson decodes Slurm's large documents about twice as fast; the stdlib is the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the installation
    _orjson = None


def loads(raw: str | bytes) -> Any:
    """Decode JSON; every failure becomes ValueError (callers record it, never crash)."""
    try:
        if _orjson is not None:
            return _orjson.loads(raw)
        return json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _parse_records(doc: Any, key: str, parse: Callable[[dict], Any], what: str, meta: Meta) -> list:
    """parse() over the document's `key` records; what cannot be read is counted in meta.warnings."""
    out, skipped = parse_each(_records(doc, key, meta), parse)
    if skipped:
        meta.warnings.append(f"{skipped} {what} record(s) could not be read")
    return out


def _records(doc: Any, key: str, meta: Meta) -> list[dict]:
    if not isinstance(doc, dict):
        return []
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        meta.warnings.append(f"'{key}' is {type(value).__name__}, expected a list")
        return []
    return [r for r in value if isinstance(r, dict)]


_STATE_CACHE: dict = {}


def _state(value: Any, base_states: frozenset[str], extra_flags: Any = None) -> tuple[str, tuple[str, ...]]:
    """(base, flags) from "RUNNING", ["RUNNING"], ["IDLE", "DRAIN"], or "mixed" + ["DRAIN"]."""
    try:  # the same few state spellings recur for every record: remember the answers
        key = (value if type(value) is str else tuple(value) if type(value) is list else None,
               tuple(extra_flags) if type(extra_flags) is list else None, base_states)
        hit = _STATE_CACHE.get(key)
        if hit is not None:
            return hit
    except TypeError:  # unhashable items (garbage input): no caching
        key = None
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []
    items = [str(s).upper() for s in items if isinstance(s, (str, int))]
    if isinstance(extra_flags, list):
        items += [str(s).upper() for s in extra_flags if isinstance(s, str)]
    base = next((s for s in items if s in base_states), items[0] if items else "")
    flags = tuple(s for s in items if s != base)
    if key is not None and len(_STATE_CACHE) < 4096:
        _STATE_CACHE[key] = (base, flags)
    return base, flags


# ----------------------------------------------------------------------------------------- jobs

def _count_allocated(statuses: list) -> int:
    n = statuses.count("allocated")  # v0.0.38-40 write exactly this; count the rest the slow way
    if n != len(statuses):
        n += sum(1 for v in statuses if v != "allocated" and "alloc" in str(v).lower() and "unalloc" not in str(v).lower())
    return n


def _cores_in(sockets: Any) -> int | None:
    """Allocated cores in a v0.0.38-v0.0.40 `sockets` dict or a v0.0.41+ `sockets` list."""
    count = 0
    seen = False
    if isinstance(sockets, dict):
        for sock in sockets.values():
            cores = sock.get("cores") if isinstance(sock, dict) else None
            if isinstance(cores, dict):
                seen = True
                count += _count_allocated(list(cores.values()))
    elif isinstance(sockets, list):
        for sock in sockets:
            cores = sock.get("cores") if isinstance(sock, dict) else None
            if isinstance(cores, list):
                seen = True
                for c in cores:
                    st = c.get("status") if isinstance(c, dict) else None
                    st = [st] if isinstance(st, str) else st or []
                    if any(str(s).upper() == "ALLOCATED" for s in st):
                        count += 1
    return count if seen else None


def _job_allocations(j: dict, nodes: tuple[str, ...]) -> tuple[NodeAllocation, ...]:
    jr = j.get("job_resources") if isinstance(j.get("job_resources"), dict) else {}
    per: dict[str, tuple[int | None, int | None]] = {}
    jr_nodes = jr.get("nodes")
    if isinstance(jr_nodes, dict):  # v0.0.41+
        for a in jr_nodes.get("allocation") or []:
            if not isinstance(a, dict) or not isinstance(a.get("name"), str):
                continue
            cpus = integer((a.get("cpus") or {}).get("count")) if isinstance(a.get("cpus"), dict) else None
            if cpus is None:
                cpus = _cores_in(a.get("sockets"))
            mem = a.get("memory")
            mem_b = memory_bytes(mem.get("allocated")) if isinstance(mem, dict) else None
            per[a["name"]] = (cpus, mem_b)
    else:
        for a in jr.get("allocated_nodes") or []:
            if not isinstance(a, dict) or not isinstance(a.get("nodename"), str):
                continue
            per[a["nodename"]] = (_cores_in(a.get("sockets")), memory_bytes(a.get("memory_allocated")))
    if not nodes:
        nodes = tuple(per)
    gres = j.get("gres_detail") if isinstance(j.get("gres_detail"), list) else []
    per_node_req = tres_request_gpus(text(j.get("tres_per_node")))
    # a job that asked for no GPU anywhere holds none: 0 is a fact here, not a gap
    no_gpus = isinstance(j.get("gres_detail"), list) and not gres and not _requests_gpus(j)
    out = []
    for i, name in enumerate(nodes):
        cpus, mem = per.get(name, (None, None))
        gpus, idx, gtype = (None, (), None)
        if len(gres) == len(nodes) and isinstance(gres[i], str):
            gpus, idx, gtype = parse_gres(gres[i])
            if gpus is None:
                gpus = 0  # the node's GRES line names no GPU: this job holds none there
        elif per_node_req is not None:
            gpus = per_node_req
        elif no_gpus:
            gpus = 0
        out.append(NodeAllocation(node=name, cpus=cpus, memory_bytes=mem, gpus=gpus, gpu_indices=idx, gpu_type=gtype))
    return tuple(out)


def _requests_gpus(j: dict) -> bool:
    fields = ("tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task", "tres_alloc_str", "tres_req_str",
              "cpus_per_tres", "memory_per_tres")
    return any("gpu" in text(j.get(k)) for k in fields)


def _exit_code(value: Any) -> int | None:
    if isinstance(value, dict) and "return_code" in value:
        return integer(value.get("return_code"))
    return integer(value)


def _exclusive(j: dict) -> bool | None:
    ex, sh = j.get("exclusive"), j.get("shared")
    ex_l = [ex] if isinstance(ex, str) else ex if isinstance(ex, list) else []
    sh_l = [sh] if isinstance(sh, str) else sh if isinstance(sh, list) else []
    if any(str(v).lower() in ("true", "user", "mcs", "topo") for v in ex_l) or any(str(v).lower() == "none" for v in sh_l):
        return True
    if "exclusive" in j or "shared" in j:
        return False
    return None


def parse_job(j: dict, priority_factors: dict | None = None) -> Job | None:
    job_id = integer(j.get("job_id"))
    if job_id is None:
        return None
    state, flags = _state(j.get("job_state"), JOB_BASE_STATES)
    jr = j.get("job_resources") if isinstance(j.get("job_resources"), dict) else {}
    node_expr = text(j.get("nodes"))
    if not node_expr:
        jr_nodes = jr.get("nodes")
        node_expr = text(jr_nodes.get("list")) if isinstance(jr_nodes, dict) else text(jr_nodes)
    nodes = hostlist.expand_cached(node_expr) if node_expr else ()
    allocs = _job_allocations(j, nodes) if state in ("RUNNING", "SUSPENDED") or nodes and state not in ("PENDING",) else ()
    node_count = integer(j.get("node_count"))
    if state == "RUNNING" and nodes:
        node_count = len(nodes)
    gpus = None
    if allocs and all(a.gpus is not None for a in allocs):
        gpus = sum(a.gpus for a in allocs)
    if gpus is None or gpus == 0:
        gpus = tres_gpus(text(j.get("tres_alloc_str"))) or gpus
    if gpus is None:
        per_job = tres_request_gpus(text(j.get("tres_per_job")))
        per_node = tres_request_gpus(text(j.get("tres_per_node")))
        if per_job is not None:
            gpus = per_job
        elif per_node is not None and node_count:
            gpus = per_node * node_count
        else:
            gpus = tres_gpus(text(j.get("tres_req_str")))
    tl = j.get("time_limit")
    tl_min = integer(tl)
    array_job = integer(j.get("array_job_id"))
    return Job(
        job_id=job_id,
        name=text(j.get("name")),
        user=text(j.get("user_name")) or (str(j["user_id"]) if isinstance(j.get("user_id"), int) else ""),
        account=text(j.get("account")),
        partition=text(j.get("partition")),
        qos=text(j.get("qos")),
        state=state,
        state_flags=flags,
        reason=text(j.get("state_reason")),
        array_job_id=array_job or None,
        array_task_id=integer(j.get("array_task_id")) if array_job else None,
        array_task_string=text(j.get("array_task_string")),
        priority=integer(j.get("priority")),
        priority_factors=priority_factors.get(job_id) if priority_factors else None,
        nice=integer(j.get("nice")),
        submit_time=timestamp(j.get("submit_time")),
        eligible_time=timestamp(j.get("eligible_time")),
        start_time=timestamp(j.get("start_time")),
        end_time=timestamp(j.get("end_time")),
        time_limit_seconds=tl_min * 60 if tl_min is not None else None,
        time_limit_infinite=is_infinite(tl),
        node_count=node_count,
        cpus=integer(j.get("cpus")),
        gpus=gpus,
        nodes=nodes,
        scheduled_nodes=hostlist.expand_cached(text(j.get("scheduled_nodes"))) if j.get("scheduled_nodes") else (),
        allocations=allocs,
        dependency=text(j.get("dependency")),
        dependencies=parse_dependency(text(j.get("dependency"))),
        reservation=text(j.get("resv_name")),
        features=text(j.get("features")),
        exclusive=_exclusive(j),
        restarts=integer(j.get("restart_cnt")),
        batch_host=text(j.get("batch_host")),
        comment=text(j.get("comment")),
        tres_per_node=text(j.get("tres_per_node")),
        tres_per_job=text(j.get("tres_per_job")),
        tres_alloc=text(j.get("tres_alloc_str")), licenses=text(j.get("licenses")),
        exit_code=_exit_code(j.get("exit_code")),
        flags=str_list(j.get("flags")),
    )


def parse_jobs(doc: Any, priority_factors: dict | None = None) -> tuple[list[Job], Meta]:
    """`squeue --json`, `scontrol show jobs --json`, slurmrestd `/jobs` or `/job/<id>`;
    `priority_factors` ({job id: PriorityFactors}, from sprio) are attached as the jobs are built."""
    meta = read_meta(doc)
    return _parse_records(doc, "jobs", lambda rec: parse_job(rec, priority_factors), "job", meta), meta


# ---------------------------------------------------------------------------------------- nodes

def parse_node(n: dict) -> Node | None:
    name = n.get("name")
    if not isinstance(name, str) or not name:
        return None
    state, flags = _state(n.get("state"), NODE_BASE_STATES, n.get("state_flags"))
    gres = text(n.get("gres"))
    gres_used = text(n.get("gres_used"))
    g_total, _, g_types = parse_gres(gres)
    g_used, g_idx, _ = parse_gres(gres_used)
    if g_used is None and g_total is not None and gres_used in ("", "N/A"):
        g_used = None
    load = number(n.get("cpu_load"))
    free = n.get("free_mem", n.get("free_memory"))
    return Node(
        name=name,
        state=state,
        state_flags=flags,
        reason=text(n.get("reason")),
        reason_user=text(n.get("reason_set_by_user")),
        reason_time=timestamp(n.get("reason_changed_at")),
        cpus_total=integer(n.get("cpus")),
        cpus_allocated=integer(n.get("alloc_cpus")),
        memory_total_bytes=memory_bytes(n.get("real_memory")),
        memory_allocated_bytes=memory_bytes(n.get("alloc_memory")),
        memory_free_bytes=memory_bytes(free),
        gpus_total=g_total,
        gpus_allocated=g_used if g_used is not None else (0 if g_total is not None and gres_used else None),
        gpu_types=tuple(g_types.split(",")) if g_types else (),
        gres=gres,
        gres_used=gres_used,
        features=str_list(n.get("features")),
        active_features=str_list(n.get("active_features")),
        partitions=str_list(n.get("partitions")),
        weight=integer(n.get("weight")),
        cpu_load=load / 100.0 if load is not None else None,
    )


def parse_nodes(doc: Any) -> tuple[list[Node], Meta]:
    """slurmrestd `/nodes`, `scontrol show nodes --json`, and 22.05's `sinfo --json` (a node list).
    A v0.0.39+ `sinfo --json` document (`sinfo[]` rows) is handed to `parse_sinfo`."""
    meta = read_meta(doc)
    if isinstance(doc, dict) and "sinfo" in doc and "nodes" not in doc:
        nodes, _parts, meta = parse_sinfo(doc)
        return nodes, meta
    return _parse_records(doc, "nodes", parse_node, "node", meta), meta


# ----------------------------------------------------------------------------------- partitions

def _minutes(value: Any) -> int | None:
    m = integer(value)
    return m * 60 if m is not None and m >= 0 else None


def parse_partition(p: dict) -> Partition | None:
    name = p.get("name")
    if not isinstance(name, str) or not name:
        return None
    if isinstance(p.get("nodes"), dict):  # v0.0.39+: nested
        nodes_d = p["nodes"]
        maxs = p.get("maximums") if isinstance(p.get("maximums"), dict) else {}
        defs = p.get("defaults") if isinstance(p.get("defaults"), dict) else {}
        prio = p.get("priority") if isinstance(p.get("priority"), dict) else {}
        inner = p.get("partition") if isinstance(p.get("partition"), dict) else {}
        state, _ = _state(inner.get("state"), frozenset({"UP", "DOWN", "DRAIN", "INACTIVE"}))
        cpus = p.get("cpus") if isinstance(p.get("cpus"), dict) else {}
        return Partition(
            name=name, state=state,
            nodes=tuple(hostlist.expand_lenient(text(nodes_d.get("configured")))),
            total_nodes=integer(nodes_d.get("total")), total_cpus=integer(cpus.get("total")),
            is_default=None,  # v0.0.39+ partitions carry no default flag
            max_time_seconds=_minutes(maxs.get("time")), default_time_seconds=_minutes(defs.get("time")),
            max_nodes=integer(maxs.get("nodes")),
            priority_job_factor=integer(prio.get("job_factor")), priority_tier=integer(prio.get("tier")),
            tres=text((p.get("tres") or {}).get("configured")) if isinstance(p.get("tres"), dict) else "",
        )
    max_nodes = integer(p.get("maximum_nodes_per_job"))
    return Partition(  # v0.0.38: flat
        name=name, state=text(p.get("state")).upper(),
        nodes=tuple(hostlist.expand_lenient(text(p.get("nodes")))),
        total_nodes=integer(p.get("total_nodes")), total_cpus=integer(p.get("total_cpus")),
        is_default="default" in [f.lower() for f in str_list(p.get("flags"))],
        max_time_seconds=_minutes(p.get("max_time_limit")), default_time_seconds=_minutes(p.get("default_time_limit")),
        max_nodes=max_nodes if max_nodes is not None and max_nodes >= 0 else None,
        priority_job_factor=integer(p.get("priority_job_factor")), priority_tier=integer(p.get("priority_tier")),
        tres=text(p.get("tres")),
    )


def parse_partitions(doc: Any) -> tuple[list[Partition], Meta]:
    meta = read_meta(doc)
    if isinstance(doc, dict) and "sinfo" in doc and "partitions" not in doc:
        _nodes, parts, meta = parse_sinfo(doc)
        return parts, meta
    return _parse_records(doc, "partitions", parse_partition, "partition", meta), meta


def parse_sinfo(doc: Any) -> tuple[list[Node], list[Partition], Meta]:
    """v0.0.39+ `sinfo --json`: rows grouped by state and partition. Nodes are rebuilt from the rows;
    per-node allocation counts are only exact for single-node rows, so they are left unknown
    otherwise (prefer `scontrol show nodes --json` for nodes)."""
    meta = read_meta(doc)
    nodes: dict[str, Node] = {}
    parts: dict[str, Partition] = {}
    for row in _records(doc, "sinfo", meta):
        try:
            part = parse_partition(row["partition"]) if isinstance(row.get("partition"), dict) else None
            if part is not None and part.name not in parts:
                parts[part.name] = part
            names = (row.get("nodes") or {}).get("nodes") or []
            state, flags = _state((row.get("node") or {}).get("state"), NODE_BASE_STATES)
            cpus = row.get("cpus") or {}
            mem = row.get("memory") or {}
            gres = row.get("gres") or {}
            single = len(names) == 1
            g_total, _, g_types = parse_gres(text(gres.get("total")))
            g_used = parse_gres(text(gres.get("used")))[0] if single else None
            reason = row.get("reason") or {}
            for name in names:
                if not isinstance(name, str):
                    continue
                prev = nodes.get(name)
                partitions = (prev.partitions if prev else ()) + ((part.name,) if part else ())
                nodes[name] = Node(
                    name=name, state=state, state_flags=flags,
                    reason=text(reason.get("description")), reason_user=text(reason.get("user")),
                    reason_time=timestamp(reason.get("time")),
                    cpus_total=integer(cpus.get("maximum")) if cpus.get("minimum") == cpus.get("maximum") else None,
                    cpus_allocated=integer(cpus.get("allocated")) if single else None,
                    memory_total_bytes=memory_bytes(mem.get("maximum")) if mem.get("minimum") == mem.get("maximum") else None,
                    memory_allocated_bytes=memory_bytes(mem.get("allocated")) if single else None,
                    gpus_total=g_total, gpus_allocated=g_used,
                    gpu_types=tuple(g_types.split(",")) if g_types else (),
                    gres=text(gres.get("total")), gres_used=text(gres.get("used")) if single else "",
                    features=str_list((row.get("features") or {}).get("total")),
                    active_features=str_list((row.get("features") or {}).get("active")),
                    partitions=tuple(dict.fromkeys(partitions)),
                )
        except Exception:
            meta.warnings.append("an sinfo row could not be read")
    return list(nodes.values()), list(parts.values()), meta


# --------------------------------------------------------------------------------- reservations

def parse_reservation(r: dict) -> Reservation | None:
    name = r.get("name")
    if not isinstance(name, str) or not name:
        return None
    return Reservation(
        name=name,
        nodes=tuple(hostlist.expand_lenient(text(r.get("node_list")))),
        start_time=timestamp(r.get("start_time")), end_time=timestamp(r.get("end_time")),
        flags=str_list(r.get("flags")),
        users=tuple(dict.fromkeys(str_list(r.get("users")))),
        accounts=tuple(dict.fromkeys(str_list(r.get("accounts")))),
        partition=text(r.get("partition")),
    )


def parse_reservations(doc: Any) -> tuple[list[Reservation], Meta]:
    meta = read_meta(doc)
    return _parse_records(doc, "reservations", parse_reservation, "reservation", meta), meta


# ------------------------------------------------------------------------------------ sdiag/diag

def _usec(value: Any) -> float | None:
    n = number(value)
    return n / 1e6 if n is not None else None


def parse_diag(doc: Any) -> tuple[SchedulerStats | None, Meta]:
    """`sdiag --json` (23.02+) or slurmrestd `/diag`."""
    meta = read_meta(doc)
    s = doc.get("statistics") if isinstance(doc, dict) else None
    if not isinstance(s, dict):
        meta.warnings.append("no 'statistics' object")
        return None, meta
    i = lambda k: integer(s.get(k))  # noqa: E731
    active = s.get("bf_active")
    return SchedulerStats(
        server_thread_count=i("server_thread_count"), agent_queue_size=i("agent_queue_size"),
        dbd_agent_queue_size=i("dbd_agent_queue_size"),
        jobs_submitted=i("jobs_submitted"), jobs_started=i("jobs_started"), jobs_completed=i("jobs_completed"),
        jobs_canceled=i("jobs_canceled"), jobs_failed=i("jobs_failed"), jobs_pending=i("jobs_pending"),
        jobs_running=i("jobs_running"),
        main_cycles_total=i("schedule_cycle_total"), main_last_cycle_seconds=_usec(s.get("schedule_cycle_last")),
        main_max_cycle_seconds=_usec(s.get("schedule_cycle_max")), main_mean_cycle_seconds=_usec(s.get("schedule_cycle_mean")),
        main_mean_depth=i("schedule_cycle_mean_depth"), main_cycles_per_minute=i("schedule_cycle_per_minute"),
        main_last_queue_length=i("schedule_queue_length"),
        backfill_jobs_total=i("bf_backfilled_jobs"), backfill_jobs_since_cycle_start=i("bf_last_backfilled_jobs"),
        backfill_cycles_total=i("bf_cycle_counter"), backfill_last_cycle_time=timestamp(s.get("bf_when_last_cycle")),
        backfill_last_cycle_seconds=_usec(s.get("bf_cycle_last")), backfill_max_cycle_seconds=_usec(s.get("bf_cycle_max")),
        backfill_mean_cycle_seconds=_usec(s.get("bf_cycle_mean")),
        backfill_last_depth=i("bf_last_depth"), backfill_last_depth_try=i("bf_last_depth_try"),
        backfill_depth_mean=i("bf_depth_mean"), backfill_last_queue_length=i("bf_queue_len"),
        backfill_queue_length_mean=i("bf_queue_len_mean"),
        backfill_active=active if isinstance(active, bool) else None,
        data_since=timestamp(s.get("req_time_start")),
    ), meta


def meta_errors(source: str, meta: Meta) -> list[SourceError]:
    """The document's own errors and our warnings about it, as snapshot errors."""
    out = [SourceError(source, f"slurm reported: {e}", "error") for e in meta.errors]
    out += [SourceError(source, w, "warning") for w in meta.warnings]
    return out


__all__ = ["Meta", "read_meta", "loads", "parse_jobs", "parse_nodes", "parse_partitions", "parse_sinfo",
           "parse_reservations", "parse_diag", "parse_job", "parse_node", "meta_errors"]
