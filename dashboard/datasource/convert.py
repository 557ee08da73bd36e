"""The diagnosis's records -> the pages' Findings."""

from __future__ import annotations

import math

from dashboard.datasource.records import Evidence, Findings, Incident, Verdict


def convert_diagnosis(diag, now: float) -> Findings:
    """A `dashboard.analysis.diagnose.Diagnosis` -> Findings, reading its records directly."""
    verdicts = tuple(Verdict(v.jobid, v.state, tuple(v.nodes), int(v.gpus), _finite(v.confidence), _finite(v.since),
                             v.culprit,
                             tuple(Evidence(e.signal, e.node, _finite(e.value), _finite(e.baseline), _finite(e.threshold))
                                   for e in v.evidence),
                             _finite(v.gpu_hours_lost), v.reason, v.culprit_kind,
                             tuple((p.kind, p.node, p.detail, p.expected_cost) for p in v.placement))
                     for v in diag.verdicts)
    nodes_of = {v.jobid: v.nodes for v in verdicts}
    incs = tuple(sorted((Incident(i.culprit, i.cause, tuple(i.jobs), _finite(i.gpu_hours_lost) or 0.0, _finite(i.since),
                                  tuple(sorted({n for j in i.jobs for n in nodes_of.get(j, ())})))
                         for i in diag.incidents), key=lambda i: (-i.gpu_hours_lost, i.culprit)))
    at = _finite(diag.at)
    return Findings(at if at is not None else now, diag.source, verdicts, incs, diag)


def _finite(x):
    """A plain float, or None for missing and non-finite values (numpy scalars do not serialise)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
