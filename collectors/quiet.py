"""Counters left out of the exposition while they stand still.

A node holds many counters that stay where they are for hours: a Lustre client's per-target
counters for the OSTs its jobs' files are not striped over (hundreds to thousands a node), an
InfiniBand port's error counters on a healthy link (a dozen a port). Each is a series that every
query over its family reads, in every TSDB block, for a value nobody needs again. A collector
that takes an idle window exports such a series while its value moved in the last `idle`
seconds, from its first reading on (the agent's start, a target or port that appears); left out,
it goes stale in the TSDB, and it comes back at its next move at the value it stood at for that
one scrape and at its own from the next: `rate()` and `increase()` count the growth in between
one scrape late rather than never (a second scraper of the same agent, which did not scrape that
one, misses it). The collector also exports how many it left out: a reader takes that gauge as
the sign that a missing series of this agent means "no change", not "unknown".
"""

from __future__ import annotations

import threading
from typing import Hashable, Sequence

# Seconds a counter may stand still before a collector leaves its series out (the collectors'
# `...-idle-seconds` flags; the simulator renders its agents the same way).
IDLE_SECONDS = 600.0


class QuietSeries:
    """When each counter series last moved; which to export. Series not read in a scrape (a file
    unreadable once) keep when they last moved, so they do not count as new; those unread for
    longer than `idle` are forgotten. Concurrent scrapes update under a lock."""

    def __init__(self, idle: float):
        self.idle = idle
        self._seen: dict[Hashable, tuple[float, float]] = {}  # key -> (value, when it last moved)
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
                    # counts the growth since (one scrape late) rather than none of it
                    out.append((key, old[0]))
                else:
                    out.append((key, value))
            if len(seen) > 2 * len(readings) + 64:  # series gone: forget them once unread for longer than `idle`
                read = {key for key, _ in readings}
                self._seen = {k: v for k, v in seen.items() if k in read or now - v[1] <= idle}
        return out, dropped
