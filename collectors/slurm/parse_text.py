"""Parsers for Slurm's text outputs, for versions or commands without JSON:

* `scontrol -o show job -d` (22.05 has no `scontrol --json`; the `-d` per-node lines
  `Nodes=gpu[001-002] CPU_IDs=0-7,32-39 Mem=64000 GRES=gpu:h100:2(IDX:0-1)` are the only place the
  CPU ids are printed), `scontrol -o show node`, `scontrol show partition` and
  `scontrol show reservation` (one-line `-o` or the multi-line default: records are separated by
  blank lines or start at their first key);
* `sprio` in our pipe format `SPRIO_FORMAT` or as `sprio -l` columns;
* `sshare -l -a -P` (pipes) or `sshare -l -a` (columns);
* `sdiag` (text; `sdiag --json` exists from 23.02 and goes through parse_json).

`Key=Value` text is ambiguous when a value itself contains ` Word=` (a job name or comment can);
such a job's fields after the name may be misread. The JSON forms have no such problem and are
preferred wherever the Slurm version has them. No function here raises on bad input.
"""

from __future__ import annotations

import re
from typing import Iterator

from . import hostlist
from .sched_config import partition_extras
from .model import (FairshareRow, Job, Node, NodeAllocation, Partition, PriorityFactors, Reservation,
                    SchedulerStats)
from .parse_common import (duration_seconds, integer, memory_bytes, number, parse_dependency, parse_each,
                           parse_gres, str_list, text_time, tres_gpus, tres_request_gpus)

# `sprio -h -o SPRIO_FORMAT`: job id, partition, user, then the weighted terms.
SPRIO_FORMAT = "%i|%r|%u|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T"
_SPRIO_FIELDS = ("job_id", "partition", "user", "priority", "site", "age", "assoc", "fairshare", "jobsize",
                 "partition_prio", "qos", "nice", "tres")

_KEY_SPLIT = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_:/]*=)")
_NULLS = ("(null)", "N/A", "None", "")


def kv_pairs(record: str) -> list[tuple[str, str]]:
    """`A=1 B=two words C=3` -> [("A", "1"), ("B", "two words"), ("C", "3")], keeping repeats in order."""
    out = []
    for tok in _KEY_SPLIT.split(record.strip()):
        k, sep, v = tok.partition("=")
        if sep:
            out.append((k, v.strip()))
        elif out:  # a stray word belongs to the previous value
            out[-1] = (out[-1][0], f"{out[-1][1]} {tok}".strip())
    return out


def records(textblob: str, first_key: str) -> Iterator[str]:
    """Split `scontrol show X` output (one-line or multi-line) into one string per record."""
    cur: list[str] = []
    for line in textblob.splitlines():
        s = line.strip()
        if not s:
            if cur:
                yield " ".join(cur)
                cur = []
            continue
        if s.startswith(first_key + "=") and cur:
            yield " ".join(cur)
            cur = []
        cur.append(s)
    if cur:
        yield " ".join(cur)


def _nz(v: str | None) -> str:
    return "" if v is None or v in _NULLS else v


def _user(v: str) -> str:
    return v.split("(", 1)[0] if v else ""


# ----------------------------------------------------------------------------------------- jobs

def parse_scontrol_job(record: str) -> Job | None:
    pairs = kv_pairs(record)
    d: dict[str, str] = {}
    allocs: list[NodeAllocation] = []
    group: dict[str, str] | None = None
    for k, v in pairs:
        # `-d` adds per-node groups `Nodes=.. CPU_IDs=.. Mem=.. GRES=..` after NodeList
        if k == "Nodes" and "NodeList" in d:
            if group is not None:
                allocs.extend(_group_allocs(group))
            group = {"Nodes": v}
            continue
        if group is not None and k in ("CPU_IDs", "Mem", "GRES"):
            group[k] = v
            continue
        if group is not None:
            allocs.extend(_group_allocs(group))
            group = None
        d.setdefault(k, v)
    if group is not None:
        allocs.extend(_group_allocs(group))
    job_id = integer(d.get("JobId"))
    if job_id is None:
        return None
    state = d.get("JobState", "")
    nodes = hostlist.expand_lenient(_nz(d.get("NodeList")))
    num_nodes = d.get("NumNodes", "")
    node_count = integer(num_nodes.split("-", 1)[0]) if num_nodes else None
    tres = d.get("TRES") or d.get("AllocTRES") or ""
    gpus = sum(a.gpus for a in allocs) if allocs and all(a.gpus is not None for a in allocs) else None
    if not gpus:
        gpus = tres_gpus(tres) or gpus
    if gpus is None:
        per_node = tres_request_gpus(_nz(d.get("TresPerNode")))
        per_job = tres_request_gpus(_nz(d.get("TresPerJob")))
        gpus = per_job if per_job is not None else (per_node * node_count if per_node is not None and node_count else None)
    exit_code = d.get("ExitCode", "")
    tl = d.get("TimeLimit")
    array_job = integer(d.get("ArrayJobId"))
    dep = _nz(d.get("Dependency"))
    return Job(
        job_id=job_id, name=d.get("JobName", ""), user=_user(d.get("UserId", "")), account=_nz(d.get("Account")),
        partition=_nz(d.get("Partition")), qos=_nz(d.get("QOS")), state=state.split("+")[0],
        state_flags=tuple(state.split("+")[1:]),
        # scontrol writes multi-word reasons with underscores; JSON and squeue use spaces
        reason=d.get("Reason", "").replace("_", " "),
        array_job_id=array_job or None,
        array_task_id=integer(d.get("ArrayTaskId")) if array_job else None,
        array_task_string=d.get("ArrayTaskId", "") if array_job and integer(d.get("ArrayTaskId")) is None else "",
        priority=integer(d.get("Priority")), nice=integer(d.get("Nice")),
        submit_time=text_time(d.get("SubmitTime")), eligible_time=text_time(d.get("EligibleTime")),
        start_time=text_time(d.get("StartTime")), end_time=text_time(d.get("EndTime")),
        time_limit_seconds=duration_seconds(tl), time_limit_infinite=tl in ("UNLIMITED", "INFINITE"),
        node_count=len(nodes) if state == "RUNNING" and nodes else node_count,
        cpus=integer(d.get("NumCPUs")), gpus=gpus,
        nodes=tuple(nodes), scheduled_nodes=tuple(hostlist.expand_lenient(_nz(d.get("SchedNodeList")))),
        allocations=tuple(allocs),
        dependency=dep, dependencies=parse_dependency(dep),
        reservation=_nz(d.get("Reservation")), features=_nz(d.get("Features")),
        exclusive=(d.get("OverSubscribe") == "NO") if "OverSubscribe" in d else None,
        restarts=integer(d.get("Restarts")), batch_host=_nz(d.get("BatchHost")), comment=_nz(d.get("Comment")),
        tres_per_node=_nz(d.get("TresPerNode")), tres_per_job=_nz(d.get("TresPerJob")), tres_alloc=tres,
        licenses=_nz(d.get("Licenses")),
        exit_code=integer(exit_code.split(":", 1)[0]) if exit_code else None,
        scheduler=d.get("Scheduler", "").split(":", 1)[0],
    )


def _group_allocs(group: dict[str, str]) -> list[NodeAllocation]:
    gpus, idx, gtype = parse_gres(group.get("GRES"))
    mem = memory_bytes(group.get("Mem"))
    cpu_ids = group.get("CPU_IDs")
    cpus = _count_ids(cpu_ids) if cpu_ids else None
    return [NodeAllocation(node=n, cpus=cpus, memory_bytes=mem, gpus=gpus if gpus is not None else 0,
                           gpu_indices=idx, gpu_type=gtype, cpu_ids=cpu_ids)
            for n in hostlist.expand_lenient(group.get("Nodes"))]


def _count_ids(spec: str) -> int | None:
    total = 0
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdecimal() or (sep and not hi.isdecimal()):
            return None
        total += (int(hi) - int(lo) + 1) if sep else 1
    return total


def parse_scontrol_jobs(textblob: str) -> list[Job]:
    return parse_each(records(textblob, "JobId"), parse_scontrol_job)[0]


# ---------------------------------------------------------------------------------------- nodes

_REASON_TAIL = re.compile(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\]]*)@(?P<time>[^\]]*)\]\s*$")


def parse_scontrol_node(record: str) -> Node | None:
    d = dict(reversed(kv_pairs(record)))  # first occurrence wins
    name = d.get("NodeName")
    if not name:
        return None
    state = d.get("State", "")
    parts = state.split("+")
    base = parts[0].rstrip("*~#!%$@^-")
    flags = [p for p in parts[1:] if p]
    if parts[0].endswith("*"):
        flags.append("NOT_RESPONDING")
    reason, ruser, rtime = d.get("Reason", ""), "", None
    m = _REASON_TAIL.match(reason)
    if m:
        reason, ruser, rtime = m.group("reason"), m.group("user"), text_time(m.group("time"))
    g_total, _, g_types = parse_gres(_nz(d.get("Gres")))
    g_used, _, _ = parse_gres(_nz(d.get("GresUsed")))
    load = number(d.get("CPULoad"))
    return Node(
        name=name, state=base, state_flags=tuple(flags), reason=_nz(reason), reason_user=ruser, reason_time=rtime,
        cpus_total=integer(d.get("CPUTot")), cpus_allocated=integer(d.get("CPUAlloc")),
        memory_total_bytes=memory_bytes(integer(d.get("RealMemory"))),
        memory_allocated_bytes=memory_bytes(integer(d.get("AllocMem"))),
        memory_free_bytes=memory_bytes(integer(d.get("FreeMem"))),
        # GresUsed is only printed with `-d`; without it the allocation is unknown, not 0
        gpus_total=g_total, gpus_allocated=g_used if g_used is not None else (0 if g_total is not None and "GresUsed" in d else None),
        gpu_types=tuple(g_types.split(",")) if g_types else (),
        gres=_nz(d.get("Gres")), gres_used=_nz(d.get("GresUsed")),
        features=str_list(d.get("AvailableFeatures")), active_features=str_list(d.get("ActiveFeatures")),
        partitions=str_list(d.get("Partitions")), weight=integer(d.get("Weight")),
        cpu_load=float(load) if load is not None else None,
    )


def parse_scontrol_nodes(textblob: str) -> list[Node]:
    return parse_each(records(textblob, "NodeName"), parse_scontrol_node)[0]


# ------------------------------------------------------------------------- partitions / reservations

def parse_scontrol_partitions(textblob: str) -> list[Partition]:
    out = []
    for rec in records(textblob, "PartitionName"):
        d = dict(reversed(kv_pairs(rec)))
        name = d.get("PartitionName")
        if not name:
            continue
        max_nodes = d.get("MaxNodes")
        out.append(Partition(
            name=name, state=d.get("State", ""), nodes=tuple(hostlist.expand_lenient(_nz(d.get("Nodes")))),
            total_nodes=integer(d.get("TotalNodes")), total_cpus=integer(d.get("TotalCPUs")),
            is_default=d.get("Default") == "YES",
            max_time_seconds=duration_seconds(d.get("MaxTime")), default_time_seconds=duration_seconds(d.get("DefaultTime")),
            max_nodes=integer(max_nodes) if max_nodes and max_nodes.isdecimal() else None,
            priority_job_factor=integer(d.get("PriorityJobFactor")), priority_tier=integer(d.get("PriorityTier")),
            tres=_nz(d.get("TRES")), **partition_extras(d),
        ))
    return out


def parse_scontrol_reservations(textblob: str) -> list[Reservation]:
    out = []
    for rec in records(textblob, "ReservationName"):
        d = dict(reversed(kv_pairs(rec)))
        name = d.get("ReservationName")
        if not name:
            continue
        out.append(Reservation(
            name=name, nodes=tuple(hostlist.expand_lenient(_nz(d.get("Nodes")))),
            start_time=text_time(d.get("StartTime")), end_time=text_time(d.get("EndTime")),
            flags=str_list(d.get("Flags")), users=str_list(d.get("Users")), accounts=str_list(d.get("Accounts")),
            partition=_nz(d.get("PartitionName")), state=_nz(d.get("State")),
        ))
    return out


# ---------------------------------------------------------------------------------------- sprio

def parse_sprio(textblob: str) -> dict[int, PriorityFactors]:
    """`sprio -h -o SPRIO_FORMAT` (pipes) or `sprio -l` / `sprio` columns -> {job id: factors}.
    A job with several partitions has one row per partition; the first row is kept."""
    out: dict[int, PriorityFactors] = {}
    header: list[str] | None = None
    for line in textblob.splitlines():
        if not line.strip():
            continue
        if "|" in line:
            vals = line.split("|")
            if len(vals) < len(_SPRIO_FIELDS):
                continue
            row = dict(zip(_SPRIO_FIELDS, (v.strip() for v in vals)))
        else:
            cols = line.split()
            if cols and cols[0] == "JOBID":
                header = ["partition_prio" if c == "PARTITION" and i > 1 else c.lower() for i, c in enumerate(cols)]
                header = ["job_id" if c == "jobid" else c for c in header]
                continue
            if header is None or not cols or not cols[0].isdecimal():
                continue
            row = dict(zip(header, cols))
        jid = integer(row.get("job_id"))
        if jid is None or jid in out:
            continue
        f = lambda k: number(row.get(k))  # noqa: E731
        out[jid] = PriorityFactors(priority=f("priority"), site=f("site"), age=f("age"), assoc=f("assoc"),
                                   fairshare=f("fairshare"), jobsize=f("jobsize"), partition=f("partition_prio"),
                                   qos=f("qos"), nice=f("nice"), tres=row.get("tres", "") or "")
    return out


# --------------------------------------------------------------------------------------- sshare

_SSHARE_KEYS = {"Account": "account", "User": "user", "RawShares": "raw_shares", "NormShares": "norm_shares",
                "RawUsage": "raw_usage", "NormUsage": "norm_usage", "EffectvUsage": "effective_usage",
                "FairShare": "fairshare", "LevelFS": "level_fs"}


def _fs_number(v: str | None) -> float | None:
    if v is None:
        return None
    v = v.strip()
    if v == "inf":
        return float("inf")
    n = number(v)
    return float(n) if n is not None else None


def parse_sshare(textblob: str) -> list[FairshareRow]:
    """`sshare -l -a -P` (preferred) or `sshare -l -a`; the tree depth comes from the account's indent."""
    lines = [ln for ln in textblob.splitlines() if ln.strip()]
    if not lines:
        return []
    out: list[FairshareRow] = []
    if "|" in lines[0]:
        header = lines[0].split("|")
        rows = [dict(zip(header, ln.split("|"))) for ln in lines[1:]]
    else:
        header_cols = lines[0].split()
        rows = []
        # fixed-width columns: take the widths from the dashed ruler line
        if len(lines) > 1 and set(lines[1].replace(" ", "")) == {"-"}:
            spans, pos = [], 0
            for dash in lines[1].split(" "):
                if dash:
                    spans.append((pos, pos + len(dash)))
                pos += len(dash) + 1
            for ln in lines[2:]:
                rows.append({h: ln[a:b] for h, (a, b) in zip(header_cols, spans)})
    for row in rows:
        acct_raw = row.get("Account", "")
        if not acct_raw.strip():
            continue
        depth = len(acct_raw) - len(acct_raw.lstrip(" "))
        out.append(FairshareRow(
            account=acct_raw.strip(), user=(row.get("User") or "").strip(), depth=depth,
            raw_shares=_fs_number(row.get("RawShares")), norm_shares=_fs_number(row.get("NormShares")),
            raw_usage=_fs_number(row.get("RawUsage")), norm_usage=_fs_number(row.get("NormUsage")),
            effective_usage=_fs_number(row.get("EffectvUsage")), fairshare=_fs_number(row.get("FairShare")),
            level_fs=_fs_number(row.get("LevelFS"))))
    return out


# ---------------------------------------------------------------------------------------- sdiag

_SDIAG_MAIN = {"Last cycle": "main_last_cycle_seconds", "Max cycle": "main_max_cycle_seconds",
               "Total cycles": "main_cycles_total", "Mean cycle": "main_mean_cycle_seconds",
               "Mean depth cycle": "main_mean_depth", "Cycles per minute": "main_cycles_per_minute",
               "Last queue length": "main_last_queue_length"}
_SDIAG_BF = {"Total backfilled jobs (since last slurm start)": "backfill_jobs_total",
             "Total backfilled jobs (since last stats cycle start)": "backfill_jobs_since_cycle_start",
             "Total cycles": "backfill_cycles_total", "Last cycle when": "backfill_last_cycle_time",
             "Last cycle": "backfill_last_cycle_seconds", "Max cycle": "backfill_max_cycle_seconds",
             "Mean cycle": "backfill_mean_cycle_seconds", "Last depth cycle": "backfill_last_depth",
             "Last depth cycle (try sched)": "backfill_last_depth_try", "Depth Mean": "backfill_depth_mean",
             "Last queue length": "backfill_last_queue_length", "Queue length mean": "backfill_queue_length_mean"}
_SDIAG_TOP = {"Server thread count": "server_thread_count", "Agent queue size": "agent_queue_size",
              "DBD Agent queue size": "dbd_agent_queue_size", "Jobs submitted": "jobs_submitted",
              "Jobs started": "jobs_started", "Jobs completed": "jobs_completed", "Jobs canceled": "jobs_canceled",
              "Jobs failed": "jobs_failed", "Jobs pending": "jobs_pending", "Jobs running": "jobs_running"}
_EPOCH_IN_PARENS = re.compile(r"\((\d+)\)\s*$")


def parse_sdiag(textblob: str) -> SchedulerStats | None:
    values: dict[str, float | int] = {}
    section = "top"
    for line in textblob.splitlines():
        s = line.strip()
        if s.startswith("Main schedule statistics"):
            section = "main"
            continue
        if s.startswith("Backfilling stats"):
            section = "bf"
            continue
        if s.startswith(("Remote Procedure Call", "Latency for", "Pending RPC")):
            section = "other"
            continue
        if s.startswith("Data since"):
            m = _EPOCH_IN_PARENS.search(s)
            if m:
                values["data_since"] = float(m.group(1))
            continue
        key, sep, val = s.partition(":")
        if not sep:
            continue
        key, val = key.strip(), val.strip()
        table = {"top": _SDIAG_TOP, "main": _SDIAG_MAIN, "bf": _SDIAG_BF}.get(section)
        if not table or key not in table:
            continue
        name = table[key]
        if name == "backfill_last_cycle_time":
            m = _EPOCH_IN_PARENS.search(val)
            if m and int(m.group(1)) > 0:
                values[name] = float(m.group(1))
            continue
        n = integer(val.split()[0]) if val else None
        if n is None:
            continue
        values[name] = n / 1e6 if name.endswith("_seconds") else n
    if not values:
        return None
    return SchedulerStats(**values)
