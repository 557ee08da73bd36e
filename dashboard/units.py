"""Values in the units people read: evidence and findings tables format a value by its signal name.

The diagnosis keeps SI base units (Hz, bytes/s, ratios 0-1, seconds, W); this table says how each
signal is shown: `gpu_sm_clock` 1,088,999,936 -> "1.09 GHz", `ib_tx` 3.2e9 -> "3.20 GB/s", `sm`
0.152 -> "15.2 %". A signal not listed is shown as a plain number (never dropped). Pure, no Dash:
the pages and the CLI share it.
"""

from __future__ import annotations

import math

# signal -> (multiply by, unit, decimals); ratios become per cent
RATIO = (100.0, "%", 1)
UNITS: dict[str, tuple[float, str, int]] = {
    # GPU
    "gpu_sm_clock": (1e-9, "GHz", 2), "clock": (1e-9, "GHz", 2),
    "util": RATIO, "gpu_util": RATIO, "sm": RATIO, "gpu_sm": RATIO, "gpu_sm_active": RATIO, "activity": RATIO,
    "tensor": RATIO, "power": (1.0, "W", 0), "gpu_power": (1.0, "W", 0), "temp": (1.0, "°C", 0),
    "gpu_temp": (1.0, "°C", 0), "mem": (1.0 / 1024**3, "GiB", 1), "gpu_mem": (1.0 / 1024**3, "GiB", 1),
    # InfiniBand
    "ib_tx": (1e-9, "GB/s", 2), "ib_rx": (1e-9, "GB/s", 2), "ib_link_rate": (1e-9, "GB/s", 1),
    "ib_wait": (1e-6, "M ticks/s", 2), "ib_link_downed": (1.0, "downs", 0), "eth_link_down": (1.0, "downs", 0),
    "eth_link_errors": (1.0, "frames", 0),
    # filesystem and pressure
    "fs_read": (1e-9, "GB/s", 2), "fs_write": (1e-9, "GB/s", 2), "fs_target_read": (1e-9, "GB/s", 2),
    "fs_target_read_latency": (1e3, "ms", 1), "psi_io": RATIO, "io_pressure": RATIO,
    # the on-demand link probe
    "link_probe_bandwidth_bits_per_second": (1e-9, "Gb/s", 2), "link_probe_latency_seconds": (1e6, "us", 1),
    "link_probe": (1e-9, "Gb/s", 2),
}


def fmt_value(signal: str, value: float | None, missing: str = "—") -> str:
    """`value` of `signal` in its display unit, e.g. "1.09 GHz"; `missing` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    scale, unit, digits = UNITS.get(signal, (1.0, "", 2))
    text = f"{value * scale:,.{digits}f}"
    return f"{text} {unit}" if unit else text
