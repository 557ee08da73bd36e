"""`/api/v1/backfill` and `gangwatch backfill --format json`: the backfill plan of one Slurm snapshot.

Sources: a `Snapshot` (collectors/slurm/model.py) and optionally Slurm's own expected starts
(`squeue --start`). Pure: no I/O; `serve` calls `backfill_json` with the slurm-exporter's latest
snapshot. Output: `BackfillPlan.to_json()` (the ARCHITECTURE "Backfill plan" shape, documented in
docs/backfill.md), per partition `unusable_nodes` ([{node, reason}]: down, drained, ... in Slurm's words), plus
`snapshot` facts (when it was taken, its age, stale, source, cluster), so a reader can
tell how old the picture is. Every estimate is labelled: `"source": "gangwatch"` for ours,
`"source": "slurm"` for Slurm's.

Slurm's association/QOS limits are not modelled by the planner: a job the planner lists as startable
while Slurm says a limit holds it gets a `slurm_limit` warning in its `why`.
Failure modes: none raised for a Snapshot; an empty cluster gives partitions without windows.
"""

from __future__ import annotations

from typing import Mapping

from collectors.slurm.model import Snapshot
from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import slurm_reason_text
from dashboard.analysis.snapshot_to_planner import snapshot_to_planner

# Slurm reasons that are limits (association, QOS, array throttle): not modelled by the planner.
LIMIT_PREFIXES = ("QOS", "Assoc", "JobArrayTaskLimit", "MaxJobs", "MaxCpu", "MaxGRES", "MaxNode")


def is_limit_reason(reason: str) -> bool:
    return reason.startswith(LIMIT_PREFIXES)


def backfill_json(snapshot: Snapshot, now: float | None = None,
                  slurm_starts: Mapping[str, float] | None = None) -> dict:
    """The backfill plan of `snapshot` at `now` (default: when it was taken), as a JSON-ready dict."""
    now = snapshot.taken_at if now is None else now
    inp = snapshot_to_planner(snapshot, now, slurm_starts)
    doc = plan(inp).to_json()
    unusable: dict[str, list[dict]] = {}
    for n in inp.nodes:
        if not n.usable:
            for p in n.partitions:
                unusable.setdefault(p, []).append({"node": n.name, "reason": n.reason})
    for part in doc["partitions"]:
        part["unusable_nodes"] = unusable.get(part["partition"], [])
        for why in part["why"]:
            if why["state"] == "startable" and is_limit_reason(why["slurm_reason"]):
                why["reasons"].append({
                    "code": "slurm_limit", "severity": "warning",
                    "message": f"Slurm holds it by a limit gangwatch does not model: {why['slurm_reason']} "
                               f"({slurm_reason_text(why['slurm_reason'])})"})
    doc["snapshot"] = snapshot_facts(snapshot, now)
    return doc


def snapshot_facts(snapshot: Snapshot, now: float) -> dict:
    """How old the planned picture is, and whether Slurm stopped answering (and since when)."""
    return {"taken_at": snapshot.taken_at, "age_seconds": round(snapshot.age(now), 3),
            "stale": snapshot.stale, "failing_since": snapshot.failing_since, "source": snapshot.source,
            "cluster": snapshot.cluster, "slurm_version": snapshot.slurm_version}
