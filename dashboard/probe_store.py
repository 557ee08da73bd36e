"""The latest link probe per job, kept by `serve` so that the measurement stays on the job's verdict
(`/api/v1/findings`, the job page after a reload), not only in the button's answer.

Bounded: at most MAX_JOBS jobs (the oldest probe dropped first), and a job's entry goes when the
job is no longer running in the scheduler snapshot (or after MAX_AGE_SECONDS, for a serve whose
snapshot stopped moving). In memory only: a restarted serve has no probes, as after a new
diagnosis the measurement would be one to repeat anyway.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Callable, Iterable

from dashboard.analysis.linkprobe import PairResult, attach

# A probe is an operator's question about one incident: a few hundred jobs probed at once is
# already more than any operator asks, and each entry holds one result per pair of the job's nodes.
MAX_JOBS = 256
# Past a day the links have likely changed (a reboot, a cable swapped): probe again.
MAX_AGE_SECONDS = 24 * 3600.0


class ProbeStore:
    def __init__(self, max_jobs: int = MAX_JOBS, max_age: float = MAX_AGE_SECONDS,
                 clock: Callable[[], float] = time.time):
        self.max_jobs, self.max_age, self.clock = max_jobs, max_age, clock
        self._lock = threading.Lock()
        self._probes: OrderedDict[str, tuple[float, tuple[PairResult, ...]]] = OrderedDict()

    def put(self, jobid: str, results: Iterable[PairResult]) -> None:
        with self._lock:
            self._probes.pop(str(jobid), None)
            self._probes[str(jobid)] = (self.clock(), tuple(results))
            while len(self._probes) > self.max_jobs:
                self._probes.popitem(last=False)

    def get(self, jobid: str) -> tuple[float, tuple[PairResult, ...]] | None:
        with self._lock:
            return self._probes.get(str(jobid))

    def __len__(self) -> int:
        return len(self._probes)

    def expire(self, running: set[str] | None) -> None:
        """Drop the probes of jobs not in `running` (None: the snapshot is unknown, keep them) and
        those older than max_age."""
        oldest = self.clock() - self.max_age
        with self._lock:
            for jobid, (at, _) in list(self._probes.items()):
                if at < oldest or (running is not None and jobid not in running):
                    del self._probes[jobid]

    def attach_to(self, findings):
        """`findings` (a datasource's Findings record) with each stored probe on its job's verdict,
        after the verdict's own evidence and stamped with when it ran."""
        if not self._probes:
            return findings

        def one(v):
            got = self.get(v.jobid)
            return v if got is None else attach(v, got[1], at=got[0])

        verdicts = tuple(one(v) for v in findings.verdicts)
        diag = findings.diagnosis
        if diag is not None:
            diag = replace(diag, verdicts=tuple(one(v) for v in diag.verdicts))
        return replace(findings, verdicts=verdicts, diagnosis=diag)


def running_jobs(snapshot) -> set[str] | None:
    if snapshot is None:
        return None
    return {str(j.job_id) for j in snapshot.jobs if j.state == "RUNNING"}


class WithProbes:
    """A datasource whose findings carry the stored probes; everything else is the wrapped one's."""

    def __init__(self, ds, store: ProbeStore):
        self.inner, self.store = ds, store

    def findings(self):
        self.store.expire(running_jobs(self.inner.snapshot()))
        return self.store.attach_to(self.inner.findings())

    def __getattr__(self, name):
        return getattr(self.inner, name)
