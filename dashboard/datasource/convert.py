"""The diagnosis's records -> the pages' Findings."""

from __future__ import annotations

from dashboard.datasource.arrays import finite
from dashboard.datasource.records import Evidence, Findings, Incident, Verdict


def convert_diagnosis(diag, now: float) -> Findings:
    """A `dashboard.analysis.diagnose.Diagnosis` -> Findings, reading its records directly."""
    verdicts = tuple(Verdict(v.jobid, v.state, tuple(v.nodes), int(v.gpus), finite(v.confidence), finite(v.since),
                             v.culprit,
                             tuple(Evidence(e.signal, e.node, finite(e.value), finite(e.baseline), finite(e.threshold))
                                   for e in v.evidence),
                             finite(v.gpu_hours_lost), v.reason, v.culprit_kind,
                             tuple((p.kind, p.node, p.detail, p.expected_cost) for p in v.placement))
                     for v in diag.verdicts)
    nodes_of = {v.jobid: v.nodes for v in verdicts}
    incs = tuple(sorted((Incident(i.culprit, i.cause, tuple(i.jobs), finite(i.gpu_hours_lost) or 0.0, finite(i.since),
                                  tuple(sorted({n for j in i.jobs for n in nodes_of.get(j, ())})))
                         for i in diag.incidents), key=lambda i: (-i.gpu_hours_lost, i.culprit)))
    at = finite(diag.at)
    return Findings(at if at is not None else now, diag.source, verdicts, incs, diag)

