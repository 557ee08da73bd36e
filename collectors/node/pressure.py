"""Pressure stall information (PSI) for cpu, io and memory.

Source: `<procfs>/pressure/{cpu,io,memory}` (Linux >= 4.20 with CONFIG_PSI; no privileges).
Metrics: `gangwatch_pressure_<resource>_{waiting,stalled}_seconds_total` from the `some` and `full`
totals (microseconds in the file, seconds here). `full` for cpu exists only on kernels >= 5.13.
Failure modes: no pressure folder -> NoData (quiet); a garbled file drops that resource only.
"""

from __future__ import annotations

from ..exposition import counter
from ..readers import read_text
from ..registry import Collector, NoData, register

RESOURCES = ("cpu", "io", "memory")


def parse_psi(text: str) -> dict[str, float]:
    """`some avg10=.. avg60=.. avg300=.. total=N` lines -> {"some": seconds, "full": seconds}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind not in ("some", "full"):
            continue
        for field in rest.split():
            key, _, value = field.partition("=")
            if key == "total" and value.isdigit():
                out[kind] = int(value) / 1e6
    return out


@register
class PressureCollector(Collector):
    """PSI some/full stall totals for cpu, io and memory."""

    name = "pressure"

    def collect(self):
        fams = {
            "some": counter("gangwatch_pressure_waiting_seconds_total",
                              "Total seconds in which at least one task was stalled on the resource (PSI some)."),
            "full": counter("gangwatch_pressure_stalled_seconds_total",
                              "Total seconds in which all non-idle tasks were stalled on the resource (PSI full)."),
        }
        found = False
        for res in RESOURCES:
            text = read_text(self.ctx.paths.proc("pressure", res))
            if text is None:
                continue
            found = True
            for kind, seconds in parse_psi(text).items():
                fams[kind].add(seconds, resource=res)
        if not found:
            raise NoData("no PSI files (kernel without CONFIG_PSI?)")
        return list(fams.values())
