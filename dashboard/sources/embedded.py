"""Metric source that scrapes agent endpoints itself: the default when no Prometheus is given.

`EmbeddedSource(targets)` scrapes each target's `/metrics` (gangwatch agents, or node_exporter /
dcgm-exporter endpoints) every `scrape()` call, concurrently (a thread pool, one httpx request per
target with a timeout), keeps only the series the diagnosis maps (schema.py) and only the last
`retention` seconds: memory is bounded by targets x mapped series x retention / interval.
Samples without a timestamp get the scrape's time (the scraper's clock, so the nodes' clock skew
does not matter); the target's host is added as `instance` when the sample has no host label.

`run(interval, stop)` scrapes forever on a thread (what `serve` uses); `window()` builds a
`Window` from what is held. Failure modes: a target that fails, times out or returns garbage is
counted in `last_errors` and its series go NaN (stale), never 0; the others are unaffected.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import httpx

from collectors import fetch
from dashboard.analysis.window import Window

from .build import WANTED, RawStore
from .exposition import iter_samples
from .schema import NodeMatcher


def _url(target: str) -> str:
    t = target.strip()
    if "://" not in t:
        t = "http://" + t
    if t.count("/") < 3:
        t += "/metrics"
    return t


def _host(target: str) -> str:
    t = target.split("://", 1)[-1]
    return t.split("/", 1)[0]


class EmbeddedSource:
    name = "embedded"

    def __init__(self, targets: list[str], timeout: float = 5.0, retention: float = 3660.0,
                 matcher: NodeMatcher | None = None, workers: int = 32, client: httpx.Client | None = None):
        self.targets = list(targets)
        self.timeout = timeout
        self.retention = retention
        self.store = RawStore(matcher)
        self.client = client or httpx.Client(timeout=httpx.Timeout(timeout))
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(self.targets) or 1)))
        self.lock = threading.Lock()
        self.last_errors: dict[str, str] = {}
        self.last_scrape: float | None = None

    def _fetch(self, target: str) -> tuple[str, str | None, str | None]:
        try:
            r = fetch.get(_url(target), self.timeout, client=self.client)
            r.raise_for_status()
            return target, r.text, None
        except httpx.HTTPError as exc:
            return target, None, f"{type(exc).__name__}: {str(exc)[:100]}"

    def scrape(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        # Each fetch ends by its own deadline; the cycle takes what has answered by then, so one
        # slow target delays the others by at most `timeout`, never holds them.
        futures = {self.pool.submit(self._fetch, t): t for t in self.targets}
        wait(futures, timeout=self.timeout + 1.0)
        results = []
        for f, t in futures.items():
            if f.done():
                results.append(f.result())
            else:
                f.cancel()  # still queued behind slow targets: not worth starting now
                results.append((t, None, f"no answer within {self.timeout:g} s"))
        errors = {}
        with self.lock:
            for target, text, err in results:
                if err is not None:
                    errors[target] = err
                    continue
                host = _host(target)
                for s in iter_samples(text, wanted=WANTED):
                    if not any(k in s.labels for k in self.store.matcher.host_labels):
                        s.labels["instance"] = host
                    self.store.add(s, default_ts=now)
            self.store.prune(now - self.retention)
            self.last_errors = errors
            self.last_scrape = now

    def run(self, interval: float, stop: threading.Event) -> None:
        while not stop.is_set():
            t0 = time.time()
            self.scrape(t0)
            stop.wait(max(0.0, interval - (time.time() - t0)))

    def window(self, end: float | None = None, span: float = 3600.0, step: float = 15.0) -> Window:
        end = (self.last_scrape or time.time()) if end is None else end
        with self.lock:
            sig = self.store.signals()
        if self.last_errors:
            sig.notes.append(f"{len(self.last_errors)} of {len(self.targets)} targets failed in the last scrape: "
                             + "; ".join(f"{t} ({e})" for t, e in list(self.last_errors.items())[:3]))
        return sig.window(end - step * int(span // step), end, step)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()
