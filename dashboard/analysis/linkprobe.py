"""On-demand link probe results as findings evidence (pure: no I/O).

The agents measure each pair of a job's nodes (collectors/probe.py); this module schedules the
pairs and turns the measurements into `Evidence` attached to the job's verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

from .findings import Evidence, Verdict

# A link delivering less than half its rated speed to a lone TCP or RDMA stream is suspect: one
# iperf3 stream reaches ~90 % of 25-100 GbE line rate on a healthy link, ib_write_bw ~95 % of the
# InfiniBand rate, so half leaves room for a busy host without missing a link trained down a step.
SLOW_FRACTION = 0.5


@dataclass(frozen=True)
class PairResult:
    source: str  # the node running the client
    target: str  # the node running the server
    tool: str
    bits_per_second: float | None = None
    latency_seconds: float | None = None
    rated_bits_per_second: float | None = None  # the client's link; None: unknown
    error: str = ""

    @property
    def pair(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def slow(self) -> bool | None:
        """Below SLOW_FRACTION of the rated speed; None when either is unknown."""
        if self.bits_per_second is None or not self.rated_bits_per_second:
            return None
        return self.bits_per_second < SLOW_FRACTION * self.rated_bits_per_second


def rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every unordered pair once, in rounds of disjoint pairs (the circle method), so each node
    takes part in at most one probe at a time and a round lasts one probe."""
    ring = list(dict.fromkeys(nodes))
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append("")
    n = len(ring)
    out = []
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        out.append([p for p in pairs if p[0] and p[1]])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def _gbps(x: float | None) -> str:
    return "unknown" if x is None else f"{x / 1e9:.3g} Gb/s"


def evidence(results: Iterable[PairResult], at: float | None = None) -> tuple[Evidence, ...]:
    """One bandwidth item per pair (value vs the rated speed, threshold SLOW_FRACTION of it), one
    latency item where measured, and the reason where a pair could not be measured; `at`: when the
    probe ran (unix s), where known."""
    out: list[Evidence] = []
    for r in results:
        if r.error:
            out.append(Evidence("link_probe", r.pair, None, r.rated_bits_per_second, None, note=f"{r.tool}: {r.error}", at=at))
            continue
        rated = r.rated_bits_per_second
        share = f", {r.bits_per_second / rated:.0%} of the rated {_gbps(rated)}" if rated and r.bits_per_second else \
            ", rated speed unknown"
        verdict = {True: "; slow", False: "", None: ""}[r.slow]
        out.append(Evidence("link_probe_bandwidth_bits_per_second", r.pair, r.bits_per_second, rated,
                            SLOW_FRACTION * rated if rated else None,
                            note=f"{r.tool}: {_gbps(r.bits_per_second)}{share}{verdict}", at=at))
        if r.latency_seconds is not None:
            out.append(Evidence("link_probe_latency_seconds", r.pair, r.latency_seconds, None, None,
                                note=f"{r.tool}: {r.latency_seconds * 1e6:.1f} us", at=at))
    return tuple(out)


def attach(verdict: Verdict, results: Iterable[PairResult], at: float | None = None) -> Verdict:
    """The verdict with the probe's evidence added after its own (earlier probe evidence replaced)."""
    kept = tuple(e for e in verdict.evidence if not e.signal.startswith("link_probe"))
    return dataclasses.replace(verdict, evidence=kept + evidence(results, at))
