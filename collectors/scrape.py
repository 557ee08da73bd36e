"""Fail-soft scrape execution: collectors run off the request thread, under one deadline per scrape.

- A collector that raises costs only itself (`gangwatch_scrape_collector_success 0`).
- A collector that hangs past the deadline is reported failed; its thread is left to finish and
  later scrapes report it as still busy instead of queueing more calls behind it. A thread stuck
  in the kernel cannot be cancelled, so at most one thread per hung collector is ever stuck.
- Concurrent scrapers share one collection (single flight), and a result younger than `cache_ttl`
  is served again as is, so ten Prometheus servers do not cost ten collections.

Why not one thread per collector: handing each of 7 quick collectors to its own thread and back
cost more CPU than the collectors themselves (measured, bench/profile_agent.py: ~0.7 ms of
hand-offs and GIL switching against ~0.5 ms of collecting). So one pooled runner thread drains the
scrape's queue of collectors in sequence (one hand-off per scrape), and the scrape widens only when
needed: a collector that was slow last time starts on its own runner at once, and whenever the
queue has not drained after `spread_after` seconds another runner joins, so a collector that hangs
delays the ones behind it by at most that long.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from .exposition import Family, counter, encode, format_labels, gauge
from .quiet import ScrapeCadence
from .registry import Collector, NoData

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    families: list[Family]
    success: bool
    duration: float
    error: str = ""
    no_data: bool = False


def run_collector(collector: Collector) -> Outcome:
    """One collect() call turned into an Outcome; never raises."""
    start = time.perf_counter()
    try:
        fams = [f for f in collector.collect() if f is not None]
        return Outcome(fams, True, time.perf_counter() - start)
    except NoData as exc:
        return Outcome([], True, time.perf_counter() - start, str(exc), no_data=True)
    except Exception as exc:  # fail-soft: the error is reported, never raised
        log.warning("collector %s failed: %s: %s", collector.name, type(exc).__name__, exc)
        return Outcome([], False, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")


class _Job:
    """The collectors of one scrape still to run, and what came back; shared by its runners."""

    def __init__(self, collectors: list[Collector], busy: set[str]):
        self.lock = threading.Lock()
        self.pending: deque[Collector] = deque(collectors)
        self.left = len(collectors)
        self.outcomes: dict[str, Outcome] = {}
        self.started: dict[str, float] = {}
        # Released once when the last collector is in: a bare lock is a latch without
        # threading.Event's Python-level Condition machinery (measured: cheaper per hand-off).
        self.done = threading.Lock()
        self.done.acquire()
        self.closed = False  # set at the deadline: runners stop taking collectors from this job
        self.runners = 0  # runners handed this job (by the leader only)
        self.busy = busy  # the Scraper's set of collectors running now (shared across jobs)

    def drain(self) -> None:
        while True:
            with self.lock:
                if self.closed or not self.pending:
                    return
                c = self.pending.popleft()
                self.started[c.name] = time.monotonic()
                self.busy.add(c.name)
            out = run_collector(c)
            with self.lock:
                self.busy.discard(c.name)
                if self.closed:
                    continue
                self.outcomes[c.name] = out
                self.left -= 1
                if self.left == 0:
                    self.done.release()


class _Runner:
    """A pooled daemon thread that drains jobs; it returns to the pool when its job runs dry."""

    def __init__(self, pool: "_Pool"):
        self.pool = pool
        self.job: _Job | None = None
        # A bare lock as a binary semaphore: the cheapest cross-thread wake-up CPython has.
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread = threading.Thread(target=self._loop, name="collector-runner", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.wake.acquire()
            job, self.job = self.job, None
            if job is None:
                return  # the pool is closing
            job.drain()
            if not self.pool.release(self):
                return


class _Pool:
    def __init__(self, max_idle: int = 4):
        self.lock = threading.Lock()
        self.idle: list[_Runner] = []
        self.max_idle = max_idle
        self.closed = False

    def start(self, job: _Job) -> None:
        with self.lock:
            runner = self.idle.pop() if self.idle else None
        if runner is None:
            runner = _Runner(self)
        job.runners += 1
        runner.job = job
        runner.wake.release()

    def release(self, runner: _Runner) -> bool:
        """Back to the pool; False tells a surplus runner (after a hang cleared) to end."""
        with self.lock:
            if self.closed or len(self.idle) >= self.max_idle:
                return False
            self.idle.append(runner)
            return True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for r in idle:
            r.job = None
            r.wake.release()


@dataclass
class Scrape:
    text: str
    gzipped: bytes | None
    created: float
    outcomes: dict[str, Outcome]
    _body: bytes | None = None

    def body(self) -> bytes:
        if self._body is None:
            self._body = self.text.encode()
        return self._body

    def gzip_body(self) -> bytes:
        if self.gzipped is None:
            # Level 1: most of the size win at a fraction of level 9's CPU (measured for issue 2).
            self.gzipped = gzip.compress(self.body(), compresslevel=1, mtime=0)
        return self.gzipped


class Scraper:
    def __init__(self, collectors: Iterable[Collector], timeout: float = 0.9, cache_ttl: float = 1.0,
                 prefix: str = "gangwatch", static: Iterable[Family] = (), spread_after: float = 0.05,
                 cadence: ScrapeCadence | None = None):
        self.collectors = list(collectors)
        self.cadence = cadence  # told of every scrape, served from the cache or not
        self.timeout = timeout
        self.cache_ttl = cache_ttl
        self.spread_after = spread_after
        self.prefix = prefix
        self.static = list(static)
        self._pool = _Pool(max_idle=max(2, min(8, len(self.collectors))))
        self._busy: set[str] = set()  # collectors whose collect() is running now, in any job
        self._last_duration: dict[str, float] = {}
        self._lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self._last: Scrape | None = None
        self.collections = 0  # how many real collections ran; benchmarks and tests read it
        self._help_success = "Whether the collector succeeded in this scrape (1) or failed or timed out (0)."
        self._help_duration = "Seconds the collector took in this scrape."
        self._labels = {c.name: format_labels({"collector": c.name}) for c in self.collectors}

    def _run(self) -> dict[str, Outcome]:
        deadline = time.monotonic() + self.timeout
        outcomes: dict[str, Outcome] = {}
        quick: list[Collector] = []
        slow: list[Collector] = []
        busy = set(self._busy)
        for c in self.collectors:
            if c.name in busy:
                outcomes[c.name] = Outcome([], False, 0.0, "still running from an earlier scrape")
            elif self._last_duration.get(c.name, 0.0) > self.spread_after:
                slow.append(c)
            else:
                quick.append(c)
        jobs = [_Job([c], self._busy) for c in slow]
        if quick:
            jobs.append(_Job(quick, self._busy))
        for job in jobs:
            self._pool.start(job)
        for job in jobs:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if job.done.acquire(timeout=min(left, self.spread_after)):
                    break
                with job.lock:
                    # Collectors wait in the queue while every runner on the job sits inside one
                    # (slow or stuck): let another runner take the rest. A runner woken but not yet
                    # scheduled (an overloaded node) is not stuck, so it gets no company.
                    more = bool(job.pending) and job.runners <= len(job.started) - len(job.outcomes)
                if more:
                    self._pool.start(job)
            with job.lock:
                job.closed = True
                outcomes.update(job.outcomes)
                now = time.monotonic()
                for name, t0 in job.started.items():
                    if name not in job.outcomes:
                        outcomes[name] = Outcome([], False, now - t0, f"timed out after {self.timeout:g}s")
                for c in job.pending:
                    outcomes[c.name] = Outcome([], False, 0.0, "not started before the scrape deadline")
        for name, out in outcomes.items():
            self._last_duration[name] = out.duration
        return {c.name: outcomes[c.name] for c in self.collectors}

    def collect_once(self) -> Scrape:
        outcomes = self._run()
        fams: list[Family] = list(self.static)
        success = gauge(f"{self.prefix}_scrape_collector_success", self._help_success)
        duration = gauge(f"{self.prefix}_scrape_collector_duration_seconds", self._help_duration)
        for name, out in outcomes.items():
            fams.extend(out.families)
            lbl = self._labels[name]
            success.add_rendered(lbl, 1 if out.success else 0)
            duration.add_rendered(lbl, round(out.duration, 6))
        self.collections += 1
        collections = counter(f"{self.prefix}_scrape_collections_total",
                              "Collections this process has run; scrapes served from the cache or joining "
                              "one in flight do not count.").add_rendered("", self.collections)
        # one per-node series for alerts, instead of selecting the per-collector success of every node
        failed = gauge(f"{self.prefix}_scrape_collectors_failed", "Collectors that failed or timed out in this "
                       "scrape (collector_success 0); 0 when all succeeded.").add_rendered(
            "", sum(not out.success for out in outcomes.values()))
        fams += [success, duration, failed, collections]
        return Scrape(encode(fams), None, time.monotonic(), outcomes)

    def scrape(self, client: str | None = None) -> Scrape:
        """Return a fresh-enough scrape, joining one in flight rather than starting another;
        `client`: the scraper's connection (ScrapeCadence)."""
        if client is not None and self.cadence is not None:
            self.cadence.scraped(client)
        while True:
            with self._lock:
                last = self._last
                if last is not None and time.monotonic() - last.created < self.cache_ttl:
                    return last
                event = self._inflight
                if event is None:
                    event = self._inflight = threading.Event()
                    leader = True
                else:
                    leader = False
            if not leader:
                event.wait(self.timeout + 5.0)
                with self._lock:
                    if self._last is not None:
                        return self._last
                continue
            result = None
            try:
                result = self.collect_once()
            finally:
                with self._lock:
                    if result is not None:
                        self._last = result
                    self._inflight = None
                event.set()
            return result

    def close(self) -> None:
        self._pool.close()
        for c in self.collectors:
            try:
                c.close()
            except Exception:
                pass


def build_info(prefix: str, component: str) -> Family:
    from . import __version__

    return gauge(f"{prefix}_build_info", "A metric with value 1 labelled with gangwatch's version and component.").add(
        1, version=__version__, component=component)
