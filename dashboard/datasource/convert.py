"""A diagnosis -> the pages' Findings: the same records, with numbers made plain (numpy scalars and
NaN become floats and None, so pages show "unknown" rather than "nan")."""

from __future__ import annotations

from dataclasses import replace

from dashboard.analysis.findings import finite
from dashboard.datasource.records import Findings


def convert_diagnosis(diag, now: float) -> Findings:
    """A `dashboard.analysis.findings.Diagnosis` -> Findings (the record itself kept in `diagnosis`)."""
    verdicts = tuple(replace(v, nodes=tuple(v.nodes), gpus=None if v.gpus is None else int(v.gpus),
                             confidence=finite(v.confidence), since=finite(v.since),
                             gpu_hours_lost=finite(v.gpu_hours_lost),
                             evidence=tuple(replace(e, value=finite(e.value), baseline=finite(e.baseline),
                                                    threshold=finite(e.threshold)) for e in v.evidence))
                     for v in diag.verdicts)
    incs = tuple(sorted((replace(i, jobs=tuple(i.jobs), gpu_hours_lost=finite(i.gpu_hours_lost) or 0.0,
                                 since=finite(i.since)) for i in diag.incidents),
                        key=lambda i: (-i.gpu_hours_lost, i.culprit)))
    at = finite(diag.at)
    return Findings(at if at is not None else now, diag.source, verdicts, incs, diag)
