"""Counters left out of the exposition while they stand still.

A node holds many counters that stay where they are for hours: a Lustre client's per-target
counters for the OSTs its jobs' files are not striped over (hundreds to thousands a node), an
InfiniBand port's error counters on a healthy link (a dozen a port). Each is a series that every
query over its family reads, in every TSDB block, for a value nobody needs again. A collector
that takes an idle window exports such a series while its value moved in the last `idle`
seconds, from its first reading on (the agent's start, a target or port that appears); left out,
it goes stale in the TSDB, and it comes back at its next move at the value it stood at for that
one scrape and at its own from the next: `rate()` and `increase()` count the growth in between
one scrape late rather than never. A counter back is shown at the value it stood at for as long
as the slowest scraper of this process takes between two scrapes (`ScrapeCadence`), so that an HA
pair of Prometheus servers, or vmagent shards scraping each target twice
(`-promscrape.cluster.replicationFactor`), each scrape it there once at least, and a
VictoriaMetrics deduplicating their samples (`-dedup.minScrapeInterval`) keeps one: with a single
scraper that is its one next scrape, as before. The collector also exports how many it left out: a
reader takes that gauge as the sign that a missing series of this agent means "no change", not
"unknown".
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Hashable, Sequence

# Seconds a counter may stand still before a collector leaves its series out (the collectors'
# `...-idle-seconds` flags; the simulator renders its agents the same way).
IDLE_SECONDS = 600.0


# The longest gap between one scraper's scrapes that `ScrapeCadence` takes (a scraper slower than
# this may still miss a counter's comeback; the hold would otherwise show every scraper the growth
# that much later); how many of its gaps a scraper may go without scraping before it no longer
# counts; how many scrapers (connections) are followed at once, the least recent dropped first.
MAX_HOLD_SECONDS = 120.0
FORGET_GAPS = 2.5
MAX_SCRAPERS = 64


class ScrapeCadence:
    """The gap between each scraper's last two scrapes of this process, a scraper being the
    connection its requests come on (Prometheus and vmagent keep theirs open between scrapes, so one
    connection is one scraper), and `hold()`: the longest gap of the scrapers still scraping. A
    counter that comes back after standing still is shown at the value it stood at for that long
    (QuietSeries), so each scraper's next scrape after its comeback finds it there. A scraper that
    opens a connection per scrape has no gap here, and a scraper gone quiet for FORGET_GAPS of its
    gaps no longer counts: with none, a comeback is shown for the one collection that finds it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._last: dict[str, tuple[float, float]] = {}  # scraper -> (its last scrape, the gap before it; 0: none)
        self._lock = threading.Lock()

    def scraped(self, scraper: str) -> None:
        now = self.clock()
        with self._lock:
            prev = self._last.pop(scraper, None)  # re-added last: the dict stays in order of the last scrape
            gap = now - prev[0] if prev is not None else 0.0
            self._last[scraper] = (now, gap if 0.0 < gap <= MAX_HOLD_SECONDS else prev[1] if prev is not None else 0.0)
            while len(self._last) > MAX_SCRAPERS:
                del self._last[next(iter(self._last))]

    def hold(self) -> float:
        now = self.clock()
        with self._lock:
            return max((gap for last, gap in self._last.values() if gap > 0.0 and now - last <= FORGET_GAPS * gap),
                       default=0.0)


class QuietSeries:
    """When each counter series last moved; which to export. Series not read in a scrape (a file
    unreadable once) keep when they last moved, so they do not count as new; those unread for
    longer than `idle` are forgotten. A series back after standing still is shown at the value it
    stood at while its comeback is less than `cadence.hold()` old, and in the collection that finds
    it in any case. Concurrent scrapes update under a lock."""

    def __init__(self, idle: float, cadence: ScrapeCadence | None = None):
        self.idle = idle
        self.cadence = cadence
        self._seen: dict[Hashable, tuple[float, float]] = {}  # key -> (value, when it last moved)
        self._back: dict[Hashable, tuple[float, float]] = {}  # key -> (the value it stood at, when it came back)
        self._lock = threading.Lock()

    def shown(self, readings: Sequence[tuple[Hashable, float]], now: float) -> tuple[list[tuple[Hashable, float]], int]:
        """The (key, value) of `readings` to export, each at the value to show, and how many were
        left out. With no idle window every reading is shown."""
        if self.idle <= 0:
            return list(readings), 0
        out: list[tuple[Hashable, float]] = []
        dropped, idle = 0, self.idle
        with self._lock:
            seen = self._seen
            for key, value in readings:
                old = seen.get(key)
                if old is not None and old[0] == value:  # most scrapes: nothing to store
                    if now - old[1] > idle:
                        dropped += 1
                    else:
                        out.append((key, value))
                    continue
                seen[key] = (value, now)
                if old is not None and now - old[1] > idle:
                    # back after standing still: the value it stood at first, so that rate()
                    # counts the growth since (a scrape late) rather than none of it
                    out.append((key, old[0]))
                    self._back[key] = (old[0], now)
                else:
                    out.append((key, value))
            if self._back:
                self._held_back(out, now)
            if len(seen) > 2 * len(readings) + 64:  # series gone: forget them once unread for longer than `idle`
                read = {key for key, _ in readings}
                self._seen = {k: v for k, v in seen.items() if k in read or now - v[1] <= idle}
        return out, dropped

    def _held_back(self, out: list[tuple[Hashable, float]], now: float) -> None:
        """The series that came back less than the hold ago shown at the value they stood at (moved
        again since or not); the comebacks older than that forgotten."""
        hold = min(self.cadence.hold(), self.idle) if self.cadence is not None else 0.0
        self._back = back = {k: b for k, b in self._back.items() if now - b[1] < hold}
        if back:
            for i, (key, _) in enumerate(out):
                b = back.get(key)
                if b is not None:
                    out[i] = (key, b[0])
