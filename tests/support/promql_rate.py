"""Prometheus' `rate` written out as its own loop: what serve's rates from raw samples
(dashboard/sources/matrix.py `decode_rate`) are checked against."""

from __future__ import annotations


def prometheus_rate(points: list[tuple[int, float]], at_ms: int, window_ms: int) -> float | None:
    """Prometheus 2.42's `rate(selector[window])` at `at_ms` (promql/functions.go, extrapolatedRate),
    written out as its loop: the samples in [at - window, at], at least two."""
    pts = [(t, v) for t, v in points if at_ms - window_ms <= t <= at_ms]
    if len(pts) < 2:
        return None
    correction, last = 0.0, 0.0
    for _, v in pts:
        if v < last:
            correction += last
        last = v
    result = last - pts[0][1] + correction
    to_start = (pts[0][0] - (at_ms - window_ms)) / 1000
    to_end = (at_ms - pts[-1][0]) / 1000
    sampled = (pts[-1][0] - pts[0][0]) / 1000
    spacing = sampled / (len(pts) - 1)
    if result > 0 and pts[0][1] >= 0:
        to_zero = sampled * (pts[0][1] / result)
        if to_zero < to_start:
            to_start = to_zero
    reach = spacing * 1.1
    stretch = sampled
    stretch += to_start if to_start < reach else spacing / 2
    stretch += to_end if to_end < reach else spacing / 2
    result = result * (stretch / sampled)
    return result / (window_ms / 1000)
