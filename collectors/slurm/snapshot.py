"""Building a Snapshot from the raw outputs of one poll: pure, no I/O (the benchmark times this).

A poll produces one `RawOutput` per logical source (jobs, nodes, partitions, reservations,
priority, fairshare, scheduler, topology), each the text of a command, a file or an HTTP response,
or the reason it is missing. `build_snapshot` parses what is there, records what is not, and
decides whether the poll as a whole failed: without jobs or without nodes the picture would be
wrong, so such a poll raises `PollFailed` and the caller keeps the last good snapshot instead.
Slurm's JSON commands answer an unreachable controller with exit status 0, an `errors` list and
empty `jobs`/`nodes` (22.05 onwards): such a document is a failure, not an empty cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import parse_json, parse_text, sched_config, topology
from .model import Job, Snapshot, SourceError

# logical sources whose absence makes a snapshot worthless
CRITICAL = ("jobs", "nodes")
KINDS = ("jobs", "nodes", "partitions", "reservations", "priority", "fairshare", "scheduler", "topology")
# kind -> parser of its JSON document (-> (records, Meta); the document holds them under the kind's
# own key) or of its text output; topology has one parser for both of its forms
JSON_PARSERS = {"jobs": parse_json.parse_jobs, "nodes": parse_json.parse_nodes, "partitions": parse_json.parse_partitions,
                "reservations": parse_json.parse_reservations, "scheduler": parse_json.parse_diag}
TEXT_PARSERS = {"jobs": parse_text.parse_scontrol_jobs, "nodes": parse_text.parse_scontrol_nodes,
                "partitions": parse_text.parse_scontrol_partitions, "reservations": parse_text.parse_scontrol_reservations,
                "priority": parse_text.parse_sprio, "fairshare": parse_text.parse_sshare, "scheduler": parse_text.parse_sdiag,
                "config": sched_config.parse_scontrol_config, "qos": sched_config.parse_sacctmgr_qos,
                "licenses": sched_config.parse_scontrol_licenses}


@dataclass(frozen=True)
class RawOutput:
    kind: str  # one of KINDS
    source: str  # what produced it: "squeue --json", "GET /slurm/v0.0.40/jobs"
    fmt: str  # "json", "text" (scontrol/sinfo/sdiag), "sprio", "sshare", "topology" (scontrol or topology.conf)
    text: str | None  # None when the command failed
    error: str = ""
    duration: float = 0.0
    label: str = ""  # the command's short name (CommandStatus.command), when it has one


class PollFailed(Exception):
    def __init__(self, errors: list[SourceError]):
        super().__init__("; ".join(f"{e.source}: {e.message}" for e in errors if e.severity == "error"))
        self.errors = errors


CONFIG_KINDS = frozenset({"config", "qos", "licenses"})  # read on the slow interval (sources.SLOW_PLAN)


def _parse(raw: RawOutput, errors: list[SourceError], meta_out: dict, prio: dict | None = None):
    """-> parsed value for the kind, or None (with an error recorded)."""
    if raw.text is None:
        # without Slurm's configuration the plan is plain EASY: worth a warning, not a failed poll
        errors.append(SourceError(raw.source, raw.error or "no output", "warning" if raw.kind in CONFIG_KINDS else "error"))
        return None
    try:
        if raw.kind == "topology":
            topo = topology.parse_topology(raw.text, raw.source)
            errors.extend(SourceError(raw.source, note, "warning") for note in topo.notes)
            return topo.switches
        if raw.fmt == "json":
            doc = parse_json.loads(raw.text)
            if raw.kind not in JSON_PARSERS:
                raise ValueError(f"no JSON parser for {raw.kind}")
            value, meta = parse_json.parse_jobs(doc, prio) if raw.kind == "jobs" else JSON_PARSERS[raw.kind](doc)
            errors.extend(parse_json.meta_errors(raw.source, meta))
            if not isinstance(doc, dict) or (raw.kind != "scheduler" and raw.kind not in doc
                                             and not (raw.kind in ("nodes", "partitions") and "sinfo" in doc)):
                errors.append(SourceError(raw.source, f"no '{raw.kind}' in the document"))
                return None
            if raw.kind in CRITICAL and meta.errors and not value:
                return None  # "Unable to contact slurm controller": not an empty cluster
            meta_out.setdefault(raw.kind, meta)
            return value
        if raw.kind == "config" and "SchedulerType" not in raw.text:
            raise ValueError("not `scontrol show config` output (no SchedulerType line)")
        if raw.kind not in TEXT_PARSERS:
            raise ValueError(f"unknown kind {raw.kind}")
        return TEXT_PARSERS[raw.kind](raw.text)
    except Exception as exc:  # unparsable output costs only this source
        errors.append(SourceError(raw.source, f"{type(exc).__name__}: {exc}"))
        return None


def build_snapshot(raws: list[RawOutput], taken_at: float, source: str) -> Snapshot:
    """Parse one poll's outputs into a Snapshot; raises PollFailed when jobs or nodes are missing."""
    errors: list[SourceError] = []
    metas: dict = {}
    parsed: dict = {}
    # sprio first, so priority factors go into each Job as it is built (no second pass over 10k jobs)
    for raw in sorted(raws, key=lambda r: r.kind != "priority"):
        parsed[raw.kind] = _parse(raw, errors, metas, parsed.get("priority"))
    missing = [k for k in CRITICAL if parsed.get(k) is None]
    if missing:
        raise PollFailed(errors or [SourceError(k, "not polled") for k in missing])
    jobs: list[Job] = parsed["jobs"]
    prio = parsed.get("priority") or {}
    if prio and raws and any(r.kind == "jobs" and r.fmt != "json" for r in raws):
        jobs = [replace(j, priority_factors=prio[j.job_id]) if j.job_id in prio else j for j in jobs]
    meta = metas.get("jobs") or metas.get("nodes")
    return Snapshot(
        taken_at=taken_at, source=source,
        cluster=meta.cluster if meta else "", slurm_version=meta.slurm_version if meta else "",
        data_parser=meta.data_parser if meta else "",
        jobs=tuple(jobs), nodes=tuple(parsed["nodes"]),
        partitions=tuple(parsed.get("partitions") or ()), reservations=tuple(parsed.get("reservations") or ()),
        fairshare=tuple(parsed.get("fairshare") or ()), scheduler=parsed.get("scheduler"),
        switches=tuple(parsed.get("topology") or ()),
        config=parsed.get("config"), qos=tuple(parsed.get("qos") or ()),
        licenses=tuple(parsed["licenses"]) if parsed.get("licenses") is not None else None,
        errors=tuple(errors), last_attempt=taken_at,
    )
