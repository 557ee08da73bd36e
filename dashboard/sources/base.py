"""The metric-source interface shared by the Prometheus, embedded, bundle and simulator sources."""

from __future__ import annotations

from typing import Protocol

from dashboard.analysis.window import Window


class SourceError(RuntimeError):
    """The source could not deliver a window at all (unreachable, not a bundle); the message says why."""


class MetricSource(Protocol):
    name: str

    def window(self, end: float | None = None, span: float = 3600.0, step: float = 15.0) -> Window:
        """The last `span` seconds up to `end` (default: now / the data's end) on a `step` grid.
        Never raises for partial data: what is missing is NaN and named in `Window.notes`."""
        ...
