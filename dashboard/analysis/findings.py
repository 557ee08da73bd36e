"""The findings model: what the diagnosis concludes about running jobs, as frozen records.

One model for every place findings appear: `diagnose.py` produces a `Diagnosis`; `serve` and
`demo` show it and serve it on `/api/v1/findings`; `gangwatch diagnose --format json` prints it;
dashboard/findings_api.py exports it as metrics. `Diagnosis.to_json()` is the one JSON shape,
versioned by `SCHEMA_VERSION` (bumped on an incompatible change; documented in docs/findings.md).
Pure data: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum

import numpy as np

SCHEMA_VERSION = 1


class State(str, Enum):
    """A verdict's state. Records keep the plain string (`Verdict.state`); `State(v.state)` checks one."""

    PROGRESSING = "progressing"
    STALLED_IO = "stalled_io"
    STALLED_NETWORK = "stalled_network"
    STRAGGLER = "straggler"
    HUNG = "hung"
    IDLE_GPUS = "idle_gpus"
    INSUFFICIENT_DATA = "insufficient_data"
    SUSPENDED = "suspended"  # Slurm suspended or preempted the job: reported, never judged

    __str__ = str.__str__
    __format__ = str.__format__


STATES = tuple(s.value for s in State)
# The states that flag a job: a stall with a cause, costing GPU-hours.
STALL_STATES = frozenset({State.STALLED_IO.value, State.STALLED_NETWORK.value, State.STRAGGLER.value,
                          State.HUNG.value, State.IDLE_GPUS.value})


@dataclass(frozen=True)
class Evidence:
    signal: str
    node: str
    value: float | None
    baseline: float | None
    threshold: float | None
    z: float | None = None
    p: float | None = None
    note: str = ""
    at: float | None = None  # when it was measured (unix s), for evidence not from the window (a link probe)

    def to_json(self) -> dict:
        d = {k: _clean(v) for k, v in asdict(self).items()}
        core = ("signal", "node", "value", "baseline", "threshold")
        return {k: d[k] for k in core} | {k: v for k, v in d.items() if k not in core and v is not None and v != ""}


@dataclass(frozen=True)
class Placement:
    kind: str  # gpus_not_nvlink_peers, gpus_span_numa, spread_over_leaves
    node: str
    detail: str
    expected_cost: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    # The diagnosis always knows gpus, confidence and gpu_hours_lost; a verdict converted from
    # another source may not (None: unknown, serialised as null and left out of the metrics).
    jobid: str
    nodes: tuple[str, ...]
    gpus: int | None
    state: str
    confidence: float | None
    since: float | None
    culprit: str = ""
    culprit_kind: str = ""  # target, filesystem, leaf_switch, port, node, gpu, gpus, job
    evidence: tuple[Evidence, ...] = ()
    gpu_hours_lost: float | None = 0.0
    reason: str = ""
    placement: tuple[Placement, ...] = ()
    slurm_state: str = "RUNNING"
    name: str = ""
    user: str = ""

    @property
    def flagged(self) -> bool:
        return self.state in STALL_STATES

    @property
    def lost(self) -> float | None:
        """GPU-hours lost; None (unknown, never 0) for a job the diagnosis could not judge."""
        return None if self.state == State.INSUFFICIENT_DATA.value else self.gpu_hours_lost

    @property
    def unknown_why(self) -> str:
        """Why this job's GPU-hours lost are unknown ("" when they are known)."""
        if self.lost is not None:
            return ""
        if self.state == State.INSUFFICIENT_DATA.value:
            return self.reason or "not judged: the metric window lacks the GPU data to judge this job"
        return "the findings carry no GPU-hours lost figure for this job"

    def to_json(self) -> dict:
        return {"jobid": self.jobid, "name": self.name, "user": self.user, "nodes": list(self.nodes),
                "gpus": self.gpus, "state": self.state, "confidence": _round(self.confidence, 3),
                "since": _clean(self.since), "culprit": self.culprit, "culprit_kind": self.culprit_kind,
                "evidence": [e.to_json() for e in self.evidence],
                # not judged: the loss is unknown (null), never 0
                "gpu_hours_lost": _round(self.lost, 3),
                "reason": self.reason, "placement": [p.to_json() for p in self.placement],
                "slurm_state": self.slurm_state}


@dataclass(frozen=True)
class Incident:
    culprit: str
    culprit_kind: str
    cause: str
    jobs: tuple[str, ...]
    gpu_hours_lost: float
    since: float | None

    def to_json(self) -> dict:
        return {"culprit": self.culprit, "culprit_kind": self.culprit_kind, "cause": self.cause, "jobs": list(self.jobs),
                "gpu_hours_lost": _round(self.gpu_hours_lost, 3), "since": _clean(self.since)}


@dataclass(frozen=True)
class Diagnosis:
    at: float
    verdicts: tuple[Verdict, ...]
    incidents: tuple[Incident, ...]
    notes: tuple[str, ...] = ()
    cluster_reason: str = ""  # non-empty when a cluster-wide outage was detected
    source: str = "diagnosis"  # or "simulator ground truth" (demo without a diagnosis), "none"

    def to_json(self) -> dict:
        """The findings document: `/api/v1/findings`, `gangwatch diagnose --format json` and the demo
        all emit exactly this (docs/findings.md)."""
        return {"schema_version": SCHEMA_VERSION, "generated_at": _clean(self.at), "source": self.source,
                "verdicts": [v.to_json() for v in self.verdicts],
                "incidents": [i.to_json() for i in self.incidents], "notes": list(self.notes),
                "cluster_reason": self.cluster_reason}


def finite(x) -> float | None:
    """A plain float, or None for missing and non-finite values (numpy scalars do not serialise)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _round(x, digits: int):
    x = _clean(x)
    return round(x, digits) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def _clean(x):
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return round(x, 6) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
