"""What every datasource shares: a per-data-version cache, and the backfill plan over the snapshot."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from collectors.slurm.model import Snapshot
from collectors.slurm.topology import leaf_switches
from dashboard.datasource.records import Findings, GpuTopology

log = logging.getLogger(__name__)


class _Memo:
    """One cached value per key (the data version): recomputed only when the data changed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._store: dict[str, tuple[object, object]] = {}

    def get(self, name: str, key, compute: Callable[[], object], stale_ok: bool = False):
        """The value for `key`; with stale_ok, whatever value is there (a background thread
        refreshes it), computing only when there is none yet."""
        with self._lock:
            hit = self._store.get(name)
        if hit is not None and (hit[0] == key or stale_ok):
            return hit[1]
        value = compute()
        with self._lock:
            self._store[name] = (key, value)
        return value


class BaseDatasource:
    """What every datasource shares: the plan and findings derived from the snapshot, cached per
    data version. Subclasses provide snapshot(), now(), status() and the series."""

    simulated = False
    kube_feed = None  # set by serve when a kube-exporter is configured
    # A page refresh waits for the plan: in Slurm mode a long queue on a large cluster can take the
    # planner far longer than this (issue 14), so past it the remaining jobs are marked
    # not_planned_in_time (and the rows read later get as long again) instead of hanging the page.
    plan_deadline_s: float | None = 2.0

    def __init__(self):
        self._memo = _Memo()
        self._plan_error = ""

    def version(self) -> str:
        snap = self.snapshot()
        return f"{snap.taken_at if snap else 0}"

    def _plan(self, snap: Snapshot):
        from dashboard.analysis import planner
        from dashboard.analysis.snapshot_to_planner import snapshot_to_planner

        try:
            self._plan_error = ""
            return planner.plan(snapshot_to_planner(snap), self.plan_deadline_s)
        except Exception as exc:  # the planner must not take a page down
            log.exception("backfill planner failed")
            self._plan_error = f"{type(exc).__name__}: {exc}"
            return None

    def backfill(self):
        snap = self.snapshot()
        if snap is None:
            return None
        return self._memo.get("plan", snap.taken_at, lambda: self._plan(snap))

    def findings(self) -> Findings:
        return Findings(self.now(), "none")

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        return None

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        return None

    def node_series(self, node, signals, window=3600.0):
        return None

    def ost_series(self, window=3600.0):
        return None

    def leaf_series(self, window=3600.0):
        return None

    def node_inventory(self, node):
        return None

    def gpu_topology(self, node):
        return GpuTopology()

    def leaf_of(self, node: str) -> str:
        """The node's leaf switch from Slurm's topology/tree in the snapshot ("" when unknown)."""
        snap = self.snapshot()
        if snap is None or not snap.switches:
            return ""
        return self._memo.get("leaves", snap.taken_at, lambda: leaf_switches(snap.switches)).get(node, "")

    def network(self):
        return None

    def storage_targets(self):
        return None
