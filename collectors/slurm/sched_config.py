"""Slurm's scheduling configuration and QOS limits, as the backfill planner needs them.

Sources: `scontrol show config` (text, every version: `Key = value` lines), and `sacctmgr show qos
-P` (pipe-separated, header first; needs slurmdbd). Pure parsers: text in, model records out.

What is read from `scontrol show config`: SchedulerType; SchedulerParameters (bf_window in minutes,
bf_resolution and bf_interval in seconds, bf_max_job_test/_part/_user, bf_min_prio_reserve,
bf_continue, bf_busy_nodes; every other parameter is kept verbatim in `other_parameters`, so that a
reader can see what the planner does not model); SelectTypeParameters (whether memory is a
consumable resource); the cluster-wide job defaults DefCpuPerGPU, DefMemPerGPU, DefMemPerCPU,
DefMemPerNode; Licenses and GresTypes. `DEFAULTS` holds Slurm 22.05's defaults for what is unset.

Failure modes: none raised; unparsable values are left unset (None) and the parameter is listed in
`other_parameters` with its text; an empty text gives an empty config.
"""

from __future__ import annotations

import re

from .model import LicensePool, Qos, SchedulerConfig
from .parse_common import duration_seconds, integer, memory_bytes

# Slurm 22.05's defaults (slurm.conf(5)) for the SchedulerParameters the planner honours.
DEFAULTS = {"bf_interval_s": 30, "bf_window_s": 1440 * 60, "bf_resolution_s": 60, "bf_max_job_test": 500,
            "bf_max_job_part": 0, "bf_max_job_user": 0, "bf_min_prio_reserve": 0}
_INT_PARAMS = {"bf_interval": ("bf_interval_s", 1), "bf_window": ("bf_window_s", 60),
               "bf_resolution": ("bf_resolution_s", 1), "bf_max_job_test": ("bf_max_job_test", 1),
               "bf_max_job_part": ("bf_max_job_part", 1), "bf_max_job_user": ("bf_max_job_user", 1),
               "bf_min_prio_reserve": ("bf_min_prio_reserve", 1)}
_FLAG_PARAMS = {"bf_continue": "bf_continue", "bf_busy_nodes": "bf_busy_nodes"}


def _unset(value: str | None) -> bool:
    return value is None or value.strip() in ("", "(null)", "N/A", "UNLIMITED", "NONE")


def _memory(value: str | None) -> int | None:
    """DefMemPerCPU = 4000 (MiB); 0 and UNLIMITED mean none."""
    if _unset(value):
        return None
    got = memory_bytes(value.strip())
    return got or None


def config_lines(text: str) -> dict[str, str]:
    """`Key = value` lines -> {Key: value}; the first occurrence of a key wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key and key not in out:
            out[key] = value.strip()
    return out


def parse_scheduler_parameters(text: str) -> dict:
    """"bf_interval=5,bf_continue,bf_window=4320" -> SchedulerConfig fields (other_parameters: the rest)."""
    fields: dict = {}
    other = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if name in _INT_PARAMS and sep:
            n = integer(value)
            if n is not None and n >= 0:
                field, scale = _INT_PARAMS[name]
                fields[field] = n * scale
                continue
        elif name in _FLAG_PARAMS and not sep:
            fields[_FLAG_PARAMS[name]] = True
            continue
        other.append(item)
    fields["other_parameters"] = tuple(other)
    return fields


def parse_scontrol_config(text: str) -> SchedulerConfig:
    """`scontrol show config` -> the scheduling part of it."""
    d = config_lines(text)
    params = d.get("SchedulerParameters", "")
    params = "" if _unset(params) else params
    cpu_per_gpu = integer(d.get("DefCpuPerGPU")) if not _unset(d.get("DefCpuPerGPU")) else None
    return SchedulerConfig(
        scheduler_type=d.get("SchedulerType", ""), scheduler_parameters=params,
        **parse_scheduler_parameters(params),
        select_type_parameters="" if _unset(d.get("SelectTypeParameters")) else d["SelectTypeParameters"],
        def_cpu_per_gpu=cpu_per_gpu or None,
        def_mem_per_gpu_bytes=_memory(d.get("DefMemPerGPU")), def_mem_per_cpu_bytes=_memory(d.get("DefMemPerCPU")),
        def_mem_per_node_bytes=_memory(d.get("DefMemPerNode")),
        licenses="" if _unset(d.get("Licenses")) else d["Licenses"],
        gres_types="" if _unset(d.get("GresTypes")) else d["GresTypes"])


def job_defaults(value: str | None) -> dict:
    """A partition's `JobDefaults=DefCpuPerGPU=8,DefMemPerGPU=4096` -> Partition fields."""
    out: dict = {}
    for item in (value or "").split(","):
        key, sep, v = item.strip().partition("=")
        if key == "DefCpuPerGPU" and integer(v):
            out["def_cpu_per_gpu"] = integer(v)
        elif key == "DefMemPerGPU" and _memory(v):
            out["def_mem_per_gpu_bytes"] = _memory(v)
    return out


def partition_extras(d: dict[str, str]) -> dict:
    """Job defaults and per-node limits from one `scontrol show partition` record's key/values."""
    out = job_defaults(d.get("JobDefaults"))
    for key, field in (("DefMemPerCPU", "def_mem_per_cpu_bytes"), ("DefMemPerNode", "def_mem_per_node_bytes")):
        got = _memory(d.get(key))
        if got:
            out[field] = got
    cap = d.get("MaxCPUsPerNode")
    if cap and cap.isdecimal():
        out["max_cpus_per_node"] = int(cap)
    if not _unset(d.get("QoS")):
        out["qos"] = d["QoS"]
    return out


def parse_sacctmgr_qos(text: str) -> list[Qos]:
    """`sacctmgr show qos -P` (header line first; any subset of columns, in any order) -> QOS limits."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    out = []
    for line in lines[1:]:
        row = dict(zip(header, line.split("|")))
        name = row.get("Name", "").strip()
        if not name:
            continue

        def num(key: str) -> int | None:
            v = (row.get(key) or "").strip()
            return int(v) if v.isdecimal() else None

        wall = (row.get("MaxWall") or "").strip()
        out.append(Qos(name=name, priority=num("Priority"), max_jobs_per_user=num("MaxJobsPU"),
                       max_submit_per_user=num("MaxSubmitPU"), max_tres_per_user=(row.get("MaxTRESPU") or "").strip(),
                       max_tres_per_job=(row.get("MaxTRES") or "").strip(), grp_tres=(row.get("GrpTRES") or "").strip(),
                       grp_jobs=num("GrpJobs"), max_wall_seconds=duration_seconds(wall) if wall else None))
    return out


# The columns `gangwatch backfill` and the slurm-exporter ask sacctmgr for (any order parses).
QOS_FORMAT = "format=Name,Priority,MaxJobsPU,MaxSubmitPU,MaxTRESPU,MaxTRES,GrpTRES,GrpJobs,MaxWall"
QOS_ARGV = ["sacctmgr", "-P", "show", "qos", QOS_FORMAT]


def parse_scontrol_licenses(text: str) -> list[LicensePool]:
    """`scontrol -o show licenses` ("LicenseName=matlab Total=4 Used=1 Free=3 Reserved=0 Remote=no",
    one per line) -> the cluster's license pools. "No licenses configured" gives none."""
    out = []
    for line in text.splitlines():
        d = dict(re.findall(r"(\w+)=(\S*)", line))
        name = d.get("LicenseName")
        if not name:
            continue

        def num(key: str) -> int | None:
            v = d.get(key, "")
            return int(v) if v.isdecimal() else None

        out.append(LicensePool(name, num("Total"), num("Used"), num("Free"), num("Reserved"),
                               d.get("Remote", "").lower() == "yes"))
    return out
