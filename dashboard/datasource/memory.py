"""Fixed data held in memory (tests, `serve --snapshot FILE`)."""

from __future__ import annotations

import time

import numpy as np

from collectors.slurm.model import Snapshot
from dashboard.datasource.arrays import aggregate_rows, downsample_cols, nanmean, nansum
from dashboard.datasource.base import BaseDatasource
from dashboard.datasource.records import SIGNALS, SUMMED, Findings, Heatmap, NodeSeries, SourceStatus, Status


class MemoryDatasource(BaseDatasource):
    """Fixed data held in memory: a snapshot, findings, and optional per-node series.

    `series[node][signal]` is a (channels x time) array sharing `times`. Used by tests and by
    `serve --snapshot FILE` (no metrics there: pages say so)."""

    def __init__(self, snapshot: Snapshot | None, findings: Findings | None = None, times=None,
                 series: dict[str, dict[str, np.ndarray]] | None = None, simulated: bool = False,
                 now: float | None = None, source_name: str = "snapshot"):
        super().__init__()
        self._snap = snapshot
        self._findings = findings
        self._times = np.asarray(times if times is not None else [], float)
        self._series = series or {}
        self.simulated = simulated
        self._now = now
        self.source_name = source_name

    def now(self) -> float:
        if self._now is not None:
            return self._now
        return self._snap.taken_at if self._snap else time.time()

    def snapshot(self):
        return self._snap

    def findings(self):
        return self._findings or Findings(self.now(), "none")

    def status(self) -> Status:
        now = self.now()
        src = [SourceStatus(self.source_name, self._snap is not None,
                            None if self._snap is None else self._snap.age(now))]
        if self._series:
            src.append(SourceStatus("metrics", True, max(0.0, now - float(self._times[-1])) if len(self._times) else None))
        return Status(self.simulated, now, tuple(src), self.version())

    def _node_matrix(self, signal: str, nodes: list[str]) -> np.ndarray:
        rows = []
        combine = nansum if signal in SUMMED else nanmean
        for n in nodes:
            a = self._series.get(n, {}).get(signal)
            rows.append(combine(a, axis=0) if a is not None and a.size else np.full(len(self._times), np.nan))
        return np.vstack(rows) if rows else np.zeros((0, len(self._times)))

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        if not self._series or self._snap is None:
            return None
        names = [n.name for n in self._snap.nodes]
        z = self._node_matrix(signal, names) * SIGNALS[signal].scale
        times, z = downsample_cols(self._times, z, max_cols)
        labels, members, zz = aggregate_rows(names, z, max_rows)
        return Heatmap(signal, labels, members, times, zz, len(names))

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        job = self._snap.job(int(jobid)) if self._snap and str(jobid).isdigit() else None
        if job is None or not job.nodes or not self._series:
            return None
        z = self._node_matrix(signal, list(job.nodes)) * SIGNALS[signal].scale
        times, z = downsample_cols(self._times, z, max_cols)
        return Heatmap(signal, job.nodes, tuple((n,) for n in job.nodes), times, z, len(job.nodes))

    def node_series(self, node, signals, window=3600.0):
        data = self._series.get(node)
        if data is None:
            return None
        values = {s: data[s] * SIGNALS[s].scale for s in signals if s in data}
        chans = {s: tuple(f"GPU {k}" for k in range(v.shape[0])) if SIGNALS[s].per_gpu else (node,)
                 for s, v in values.items()}
        return NodeSeries(node, self._times, values, chans)
