"""Bounded in-memory history: one numpy ring buffer per series, all sharing one clock.

Each series is an array of shape (capacity, *shape): node x GPU state vectors go in whole at every
step, so recording costs one copy per series and memory is fixed (capacity x the state's size).
`window()` returns the samples between two times in time order, as a view-free copy.
"""

from __future__ import annotations

import numpy as np


class History:
    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.times = np.full(self.capacity, np.nan)
        self.series: dict[str, np.ndarray] = {}
        self.count = 0  # samples recorded so far (the next write goes to count % capacity)

    def add(self, name: str, shape: tuple[int, ...], dtype) -> None:
        self.series[name] = np.zeros((self.capacity, *shape), dtype=dtype)

    def record(self, t: float, values: dict[str, np.ndarray]) -> None:
        k = self.count % self.capacity
        self.times[k] = t
        for name, value in values.items():
            self.series[name][k] = value
        self.count += 1

    def _order(self) -> np.ndarray:
        n = min(self.count, self.capacity)
        start = self.count - n
        return (np.arange(start, start + n) % self.capacity)

    def window(self, name: str, t0: float | None = None, t1: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(times, samples) with t0 <= time <= t1, oldest first."""
        order = self._order()
        times = self.times[order]
        keep = np.ones(len(order), bool)
        if t0 is not None:
            keep &= times >= t0
        if t1 is not None:
            keep &= times <= t1
        return times[keep], self.series[name][order[keep]]

    @property
    def span(self) -> tuple[float, float] | None:
        order = self._order()
        return (float(self.times[order[0]]), float(self.times[order[-1]])) if len(order) else None

    @property
    def nbytes(self) -> int:
        return self.times.nbytes + sum(a.nbytes for a in self.series.values())
