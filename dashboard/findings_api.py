"""Findings as data for `serve`: `/api/v1/findings` JSON and `/metrics` text, as pure functions.

`serve` (built elsewhere) mounts these: `findings_json(diag)` -> bytes for `/api/v1/findings`,
`findings_metrics(diag)` -> bytes in the Prometheus text format for `/metrics`, so Alertmanager
can route findings. `simulation_diagnosis(sim, snap, lock)` runs the diagnosis over the simulator's
history: the one path for the demo, with or without the dashboard (dashboard/datasource/simulator.py,
`gangwatch demo --no-dashboard`). The records and their JSON are dashboard/analysis/findings.py's.
`backfill_families(plan)` turns serve's backfill plan into the per-partition series the BackfillHole
alert reads.

Metrics (one series per judged job; jobs not judged are left out, never reported as 0):

| metric | labels | meaning |
|---|---|---|
| `gangwatch_job_stalled` | jobid, cause | 1 while the job's verdict is a stall cause (stalled_io, stalled_network, straggler, hung, idle_gpus), else 0 with cause="none" |
| `gangwatch_job_verdict_info` | jobid, state, culprit | the verdict; value 1 |
| `gangwatch_job_verdict_confidence_ratio` | jobid | confidence 0-1 |
| `gangwatch_job_stall_since_timestamp_seconds` | jobid, cause | when the stall began |
| `gangwatch_job_gpu_hours_lost_total` | jobid | GPU-hours lost since the stall began |
| `gangwatch_incident_gpu_hours_lost` | culprit, culprit_kind, cause | GPU-hours lost by the jobs of one incident |
| `gangwatch_incident_jobs` | culprit, culprit_kind, cause | jobs in the incident |
| `gangwatch_diagnosis_jobs` | state | jobs per verdict state |
| `gangwatch_diagnosis_timestamp_seconds` | | end of the window judged |
| `gangwatch_backfill_startable_jobs` | partition | pending jobs the backfill plan can start now (by priority or backfill) |
| `gangwatch_backfill_idle_gpus` | partition | GPUs free now in the plan's windows (before the startable jobs take them) |

A partition the plan does not know (no snapshot, or the planner failed) has no backfill series.
"""

from __future__ import annotations

import json

from contextlib import nullcontext

from collectors.exposition import COUNTER, GAUGE, Family, encode

from dashboard.analysis.diagnose import diagnose
from dashboard.analysis.findings import STALL_STATES, STATES, Diagnosis


def findings_json(diag: Diagnosis) -> bytes:
    return json.dumps(diag.to_json(), separators=(",", ":"), allow_nan=False).encode()


def findings_families(diag: Diagnosis) -> list[Family]:
    stalled = Family("gangwatch_job_stalled", GAUGE,
                     "Whether the job is stalled (1) with the named cause, or judged healthy (0, cause=\"none\").")
    info = Family("gangwatch_job_verdict_info", GAUGE, "The diagnosis verdict for a running job, with its culprit; value 1.")
    conf = Family("gangwatch_job_verdict_confidence_ratio", GAUGE, "Confidence of the job's verdict, from 0 to 1.")
    since = Family("gangwatch_job_stall_since_timestamp_seconds", GAUGE,
                   "Unix time in seconds at which the job's current stall began.")
    lost = Family("gangwatch_job_gpu_hours_lost_total", COUNTER,
                  "GPU-hours the job has lost since its current stall began (GPUs x stalled hours).")
    inc_lost = Family("gangwatch_incident_gpu_hours_lost", GAUGE,
                      "GPU-hours lost by all jobs of an incident (verdicts that share a culprit).")
    inc_jobs = Family("gangwatch_incident_jobs", GAUGE, "Number of jobs affected by an incident.")
    per_state = Family("gangwatch_diagnosis_jobs", GAUGE, "Number of running jobs per verdict state in the last diagnosis.")
    at = Family("gangwatch_diagnosis_timestamp_seconds", GAUGE, "End of the metric window the last diagnosis judged, in unix seconds.")
    counts = {s: 0 for s in STATES}
    for v in diag.verdicts:
        counts[v.state] = counts.get(v.state, 0) + 1
        if v.state in ("insufficient_data", "suspended"):
            info.add(1, jobid=v.jobid, state=v.state, culprit=v.culprit)
            continue
        is_stall = v.state in STALL_STATES
        stalled.add(1 if is_stall else 0, jobid=v.jobid, cause=v.state if is_stall else "none")
        info.add(1, jobid=v.jobid, state=v.state, culprit=v.culprit)
        if v.confidence is not None:  # unknown (a source that did not say) is left out, never 0
            conf.add(round(v.confidence, 3), jobid=v.jobid)
        if is_stall:
            if v.since is not None:
                since.add(v.since, jobid=v.jobid, cause=v.state)
            if v.gpu_hours_lost is not None:
                lost.add(round(v.gpu_hours_lost, 4), jobid=v.jobid)
    for i in diag.incidents:
        inc_lost.add(round(i.gpu_hours_lost, 4), culprit=i.culprit, culprit_kind=i.culprit_kind, cause=i.cause)
        inc_jobs.add(len(i.jobs), culprit=i.culprit, culprit_kind=i.culprit_kind, cause=i.cause)
    for s, n in counts.items():
        per_state.add(n, state=s)
    if diag.at == diag.at:  # not NaN
        at.add(diag.at)
    return [stalled, info, conf, since, lost, inc_lost, inc_jobs, per_state, at]


def findings_metrics(diag: Diagnosis) -> bytes:
    text = encode(findings_families(diag))
    return text.encode() if isinstance(text, str) else text


def backfill_families(plan) -> list[Family]:
    """Per partition of a `dashboard.analysis.planner.BackfillPlan` (None: no plan, no series): the
    jobs it can start now and the GPUs free now in its windows (windows of one partition are
    disjoint groups of nodes, so their GPUs add up)."""
    startable = Family("gangwatch_backfill_startable_jobs", GAUGE,
                       "Pending jobs the backfill plan can start now without delaying the top job, per partition.")
    idle = Family("gangwatch_backfill_idle_gpus", GAUGE,
                  "GPUs free now in the partition's backfill windows, before the startable jobs take them.")
    for p in getattr(plan, "partitions", ()) or ():
        if not p.exists:
            continue
        startable.add(len(p.startable), partition=p.name)
        idle.add(sum(w.nodes * w.gpus_per_node for w in p.windows), partition=p.name)
    return [startable, idle]


def simulation_diagnosis(sim, snap=None, lock=None) -> Diagnosis:
    """The diagnosis over a running `Simulation`'s in-memory history (demo mode). Only the window's
    copy is taken under `lock` (the simulation's); the diagnosis itself runs outside it."""
    from dashboard.analysis.sim.slurm_view import build_snapshot
    from dashboard.sources.simulated import window_from_history

    with lock if lock is not None else nullcontext():
        snap = build_snapshot(sim) if snap is None else snap
        win = window_from_history(sim)
    return diagnose(win, [j for j in snap.jobs if j.state in ("RUNNING", "SUSPENDED")])
