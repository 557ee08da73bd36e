"""Fail-soft scrape execution: every collector in its own long-lived worker, one deadline per scrape.

- A collector that raises costs only itself (`gangwatch_scrape_collector_success 0`).
- A collector that hangs past its timeout is reported failed; its worker stays busy, and later
  scrapes report it as still busy instead of queueing more calls behind it.
- Concurrent scrapers share one collection (single flight), and a result younger than `cache_ttl`
  is served again as is, so ten Prometheus servers do not cost ten collections.
"""

from __future__ import annotations

import gzip
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from .exposition import Family, encode, format_labels, gauge
from .registry import Collector, NoData

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    families: list[Family]
    success: bool
    duration: float
    error: str = ""
    no_data: bool = False


class _Worker:
    """A daemon thread that runs one collector's collect() on request."""

    def __init__(self, collector: Collector):
        self.collector = collector
        self.requests: queue.Queue = queue.Queue()
        self.busy = False
        self.thread = threading.Thread(target=self._loop, name=f"collector-{collector.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            slot = self.requests.get()
            if slot is None:
                return
            start = time.perf_counter()
            try:
                fams = [f for f in self.collector.collect() if f is not None]
                slot.put(Outcome(fams, True, time.perf_counter() - start))
            except NoData as exc:
                slot.put(Outcome([], True, time.perf_counter() - start, str(exc), no_data=True))
            except Exception as exc:  # fail-soft: the error is reported, never raised
                log.warning("collector %s failed: %s: %s", self.collector.name, type(exc).__name__, exc)
                slot.put(Outcome([], False, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"))
            finally:
                self.busy = False

    def submit(self) -> "queue.Queue | None":
        if self.busy:
            return None
        self.busy = True
        slot: queue.Queue = queue.Queue(maxsize=1)
        self.requests.put(slot)
        return slot

    def stop(self) -> None:
        self.requests.put(None)


@dataclass
class Scrape:
    text: str
    gzipped: bytes | None
    created: float
    outcomes: dict[str, Outcome]

    def gzip_body(self) -> bytes:
        if self.gzipped is None:
            # Level 1: most of the size win at a fraction of level 9's CPU (measured for issue 2).
            self.gzipped = gzip.compress(self.text.encode(), compresslevel=1, mtime=0)
        return self.gzipped


class Scraper:
    def __init__(self, collectors: Iterable[Collector], timeout: float = 0.9, cache_ttl: float = 1.0,
                 prefix: str = "gangwatch", static: Iterable[Family] = ()):
        self.workers = [_Worker(c) for c in collectors]
        self.timeout = timeout
        self.cache_ttl = cache_ttl
        self.prefix = prefix
        self.static = list(static)
        self._lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self._last: Scrape | None = None
        self.collections = 0  # how many real collections ran; benchmarks and tests read it

    def collect_once(self) -> Scrape:
        deadline = time.monotonic() + self.timeout
        slots = [(w, w.submit()) for w in self.workers]
        outcomes: dict[str, Outcome] = {}
        for w, slot in slots:
            name = w.collector.name
            if slot is None:
                outcomes[name] = Outcome([], False, 0.0, "still running from an earlier scrape")
                continue
            try:
                outcomes[name] = slot.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                outcomes[name] = Outcome([], False, self.timeout, f"timed out after {self.timeout:g}s")
        fams: list[Family] = list(self.static)
        success = gauge(f"{self.prefix}_scrape_collector_success",
                        "Whether the collector succeeded in this scrape (1) or failed or timed out (0).")
        duration = gauge(f"{self.prefix}_scrape_collector_duration_seconds",
                         "Seconds the collector took in this scrape.")
        for name, out in outcomes.items():
            fams.extend(out.families)
            lbl = format_labels({"collector": name})
            success.add_rendered(lbl, 1 if out.success else 0)
            duration.add_rendered(lbl, round(out.duration, 6))
        fams += [success, duration]
        self.collections += 1
        return Scrape(encode(fams), None, time.monotonic(), outcomes)

    def scrape(self) -> Scrape:
        """Return a fresh-enough scrape, joining one in flight rather than starting another."""
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
            try:
                result = self.collect_once()
            finally:
                with self._lock:
                    if "result" in locals():
                        self._last = result
                    self._inflight = None
                event.set()
            return result

    def close(self) -> None:
        for w in self.workers:
            w.stop()
            try:
                w.collector.close()
            except Exception:
                pass


def build_info(prefix: str, component: str) -> Family:
    from . import __version__

    return gauge(f"{prefix}_build_info", "A metric with value 1 labelled with gangwatch's version and component.").add(
        1, version=__version__, component=component)

