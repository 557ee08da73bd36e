"""`gangwatch serve`'s datasource: a polled scheduler snapshot and a metric source's window, with
the diagnosis refreshed in the background; and the scheduler sources it polls (URL, file)."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import replace
from typing import Callable

from collectors.slurm.model import Snapshot
from dashboard.datasource.base import BaseDatasource
from dashboard.datasource.convert import convert_diagnosis
from dashboard.datasource.records import Findings, SourceStatus, Status
from dashboard.datasource.window_series import WindowSeries

log = logging.getLogger(__name__)


class LiveDatasource(WindowSeries, BaseDatasource):
    """`gangwatch serve`: a scheduler snapshot from a poller or URL or file, and optionally a metric
    source (dashboard/sources: Prometheus, embedded scraper) whose window feeds the pages and the
    diagnosis. `snapshot_fn` returns the latest Snapshot or raises; its failures are kept for
    status() and the last good snapshot stays on screen, marked stale. The metric window and the
    diagnosis are refreshed by one background thread (`start()`), never inside a request."""

    def __init__(self, snapshot_fn: Callable[[], Snapshot | None], source_name: str,
                 min_interval: float = 10.0, clock: Callable[[], float] = time.time, metrics=None,
                 metrics_interval: float = 15.0):
        super().__init__()
        self._fn = snapshot_fn
        self.source_name = source_name
        self._min_interval = min_interval
        self._clock = clock
        self._snap: Snapshot | None = None
        self._last_try = -math.inf
        self._error = ""
        self._lock = threading.Lock()
        self.metrics = metrics
        self._metrics_interval = metrics_interval
        self._win = None
        self._win_error = ""
        self._win_failed = False
        self._findings: Findings | None = None
        self._stop = threading.Event()
        self._polling = False  # start() hands fetching to a background thread

    def now(self) -> float:
        return self._clock()

    def snapshot(self):
        """The latest snapshot. Once start()ed, only the background poller fetches: a request never
        waits on the scheduler source (a frozen slurm-exporter made every page wait its timeout)."""
        if not self._polling:
            self.refresh_snapshot()
        return self._snap

    def refresh_snapshot(self) -> None:
        """Fetch a snapshot if the last try is at least min_interval old (one fetch at a time)."""
        with self._lock:
            if self._clock() - self._last_try < self._min_interval:
                return
            self._last_try = self._clock()
            try:
                snap = self._fn()
                if snap is not None:
                    self._snap, self._error = snap, ""
            except Exception as exc:
                self._error = f"{type(exc).__name__}: {exc}"
                log.warning("scheduler source %s failed: %s", self.source_name, self._error)

    def version(self) -> str:
        snap = self._snap
        win = self._win
        return f"{snap.taken_at if snap else 0}:{win.end if win is not None else 0}"

    # ---- metrics and diagnosis

    def window(self):
        return self._win

    def refresh_metrics(self) -> None:
        """One metric window and one diagnosis (what the background thread does each interval)."""
        if self.metrics is None:
            return
        try:
            scrape = getattr(self.metrics, "scrape", None)
            if scrape is not None:  # the embedded source scrapes its targets itself
                scrape()
            win = self.metrics.window()
            down = source_down(self.metrics)
            if down:
                raise ConnectionError(down)
            self._win, self._win_error, self._win_failed = win, "; ".join(win.notes)[:300], False
        except Exception as exc:
            # the last good window and findings stay, marked: a dead source must not turn every
            # verdict into insufficient_data, nor pass for healthy
            self._win_error, self._win_failed = f"{type(exc).__name__}: {exc}", True
            log.warning("metric source failed: %s", self._win_error)
            if self._findings is not None:
                self._findings = replace(self._findings, degraded=f"metric source down ({self._win_error[:200]}): "
                                         f"findings from {time.strftime('%H:%M:%S', time.gmtime(self._findings.generated_at))} UTC")
            return
        snap = self.snapshot()
        if snap is None:
            return
        try:
            from dashboard.analysis.diagnose import diagnose

            jobs = [j for j in snap.jobs if j.state in ("RUNNING", "SUSPENDED")]
            findings = convert_diagnosis(diagnose(self._win, jobs), self.now())
            partial = partly_down(self.metrics)
            if partial:  # a job can be insufficient_data because its nodes' data did not arrive
                findings = replace(findings, degraded=partial, verdicts=tuple(
                    replace(v, reason=f"{v.reason}; {partial}" if v.reason else partial)
                    if v.state == "insufficient_data" else v for v in findings.verdicts))
            self._findings = findings
        except ImportError:
            pass
        except Exception:
            log.exception("diagnosis failed")

    def start(self) -> "LiveDatasource":
        def loop():
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.refresh_metrics()
                self._stop.wait(max(1.0, self._metrics_interval - (time.monotonic() - t0)))

        def poll():
            while not self._stop.is_set():
                self.refresh_snapshot()
                self._stop.wait(max(0.2, min(self._min_interval, 5.0)))

        self._polling = True
        threading.Thread(target=poll, name="gangwatch-serve-scheduler", daemon=True).start()
        if self.metrics is not None:
            threading.Thread(target=loop, name="gangwatch-serve-metrics", daemon=True).start()
        return self

    def close(self) -> None:
        self._stop.set()

    def findings(self) -> Findings:
        return self._findings or Findings(self.now(), "none")

    def status(self) -> Status:
        snap = self.snapshot()
        now = self.now()
        ok = snap is not None and not self._error and not snap.stale
        detail = self._error or (outage_text(snap, now) if snap is not None and snap.stale else "")
        src = [SourceStatus(self.source_name, ok, snap.age(now) if snap else None, detail)]
        if self.metrics is not None:  # none configured is a choice, not an outage: no banner for it
            win = self._win
            age = max(0.0, now - win.end) if win is not None and win.n_steps else None
            src.append(SourceStatus(f"metrics ({getattr(self.metrics, 'name', 'source')})",
                                    win is not None and not self._win_failed,
                                    age, self._win_error))
        if self._plan_error:
            src.append(SourceStatus("backfill planner", False, None, self._plan_error))
        return Status(False, now, tuple(src), self.version())


def source_down(metrics) -> str:
    """Why a metric source answered nothing in its latest cycle ("" if it answered something):
    every Prometheus query failed, or every scrape target."""
    queries, failed = getattr(metrics, "queries_last_cycle", 0), getattr(metrics, "failed_last_cycle", 0)
    if queries and failed >= queries:
        return f"all {queries} queries failed"
    targets, errors = getattr(metrics, "targets", None), getattr(metrics, "last_errors", None)
    if targets and errors is not None and len(errors) >= len(targets):
        return f"all {len(targets)} targets failed: " + "; ".join(f"{t} ({e})" for t, e in list(errors.items())[:3])
    return ""


def partly_down(metrics) -> str:
    """What part of a metric source failed in its latest cycle ("" when none did)."""
    failed = getattr(metrics, "failed_last_cycle", 0)
    if failed:
        return f"metric source partly down: {failed} of {metrics.queries_last_cycle} queries failed"
    targets, errors = getattr(metrics, "targets", None), getattr(metrics, "last_errors", None)
    if targets and errors:
        return f"metric source partly down: {len(errors)} of {len(targets)} targets failed ({', '.join(list(errors)[:3])})"
    return ""


def outage_text(snap: Snapshot, now: float) -> str:
    """The banner line for a stale snapshot: when polling Slurm began to fail, and why."""
    since = snap.failing_since or snap.last_attempt
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    why = "; ".join(f"{e.source}: {e.message}" for e in snap.errors if e.severity == "error")
    return (f"controller unreachable since {when}; showing the last good data, taken "
            f"{time.strftime('%H:%M:%S UTC', time.gmtime(snap.taken_at))} ({int(snap.age(now))} s old)"
            + (f" — {why[:300]}" if why else ""))


def snapshot_from_url(url: str, timeout: float = 10.0) -> Callable[[], Snapshot]:
    """A slurm-exporter's /api/v1/snapshot (or any URL serving that JSON)."""
    full = url.rstrip("/") + ("" if url.rstrip("/").endswith("/api/v1/snapshot") else "/api/v1/snapshot")

    def fetch() -> Snapshot:
        from collectors import fetch as http

        r = http.get(full, timeout)
        r.raise_for_status()
        return Snapshot.from_json(r.content)

    return fetch


def snapshot_from_file(path: str) -> Callable[[], Snapshot]:
    def read() -> Snapshot:
        with open(path, "rb") as fh:
            data = fh.read()
        doc = json.loads(data)
        if "jobs" in doc and "taken_at" not in doc:
            raise ValueError(f"{path} is not a gangwatch snapshot (no taken_at): use the slurm-exporter's "
                             "/api/v1/snapshot JSON")
        return Snapshot.from_dict(doc)

    return read
