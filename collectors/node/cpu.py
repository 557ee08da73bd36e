"""CPU time per CPU and mode, and the kernel's activity counters, from `/proc/stat`.

Source: `<procfs>/stat` (world-readable; no privileges). Values in the file are in USER_HZ ticks,
which the kernel fixes at 100 per second for user space on every architecture (`sysconf(_SC_CLK_TCK)`),
so seconds = ticks / 100, exactly as node_exporter computes them.
Metrics:
- `gangwatch_cpu_seconds_total{cpu,mode}`: user, nice, system, idle, iowait, irq, softirq, steal.
- `gangwatch_cpu_guest_seconds_total{cpu,mode}`: guest (mode="user") and guest_nice (mode="nice").
  The kernel already counts guest time inside user/nice; it is reported apart, as node_exporter does.
- `gangwatch_node_context_switches_total`, `gangwatch_node_interrupts_total`, `gangwatch_node_forks_total`,
  `gangwatch_node_boot_time_seconds`, `gangwatch_node_procs_running`, `gangwatch_node_procs_blocked`.
Failure modes: an unreadable or empty file, or one without any `cpuN` line, fails the collector;
a truncated line yields the columns it has; a non-numeric column drops only that column. Older
kernels without steal/guest columns simply have fewer modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..exposition import counter, format_labels, gauge
from ..readers import read_required
from ..registry import Collector, register

USER_HZ = 100.0
# Column order of a `cpuN` line after the name (proc(5)).
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
GUEST_MODES = ("user", "nice")  # guest, guest_nice
# Lines whose first value is kept; each names a `Stat` attribute.
_SCALARS = frozenset(("ctxt", "btime", "processes", "procs_running", "procs_blocked", "intr"))


class CpuTimes(NamedTuple):
    cpu: str
    ticks: tuple[int | None, ...]  # up to 10 columns; None where a column was not a number


@dataclass(frozen=True)
class Stat:
    cpus: tuple[CpuTimes, ...] = ()
    ctxt: int | None = None
    btime: int | None = None
    processes: int | None = None
    procs_running: int | None = None
    procs_blocked: int | None = None
    intr: int | None = None


def _ints(fields: list[str]) -> tuple[int | None, ...]:
    try:
        return tuple(map(int, fields))
    except ValueError:
        out = []
        for f in fields:
            try:
                out.append(int(f))
            except ValueError:
                out.append(None)
        return tuple(out)


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def parse_stat(text: str) -> Stat:
    """`/proc/stat` text -> per-CPU tick columns and the scalar counters; never raises."""
    cpus: list[CpuTimes] = []
    scalars: dict[str, int | None] = {}
    seen: set[str] = set()
    for line in text.split("\n"):
        # Split off the key only: the intr and softirq lines carry thousands of columns on big
        # machines and only their first one is wanted.
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        key = parts[0]
        if key.startswith("cpu"):
            cpu = key[3:]
            # "cpu" alone is the sum over all CPUs (derivable, not exported); a repeated id
            # would make duplicate series, so the first one wins.
            if cpu.isdigit() and cpu not in seen:
                seen.add(cpu)
                cpus.append(CpuTimes(cpu, _ints(line.split()[1:11])))
        elif key in _SCALARS:
            scalars[key] = _int(parts[1])
    return Stat(cpus=tuple(cpus), **scalars)


_NODE_SCALARS = (
    # attribute, metric, kind, help
    ("ctxt", "gangwatch_node_context_switches_total", counter,
     "Total number of context switches since boot (from /proc/stat ctxt)."),
    ("intr", "gangwatch_node_interrupts_total", counter,
     "Total number of interrupts serviced since boot (from /proc/stat intr)."),
    ("processes", "gangwatch_node_forks_total", counter,
     "Total number of forks (processes and threads created) since boot (from /proc/stat processes)."),
    ("btime", "gangwatch_node_boot_time_seconds", gauge,
     "Boot time of the node in seconds since the Unix epoch (from /proc/stat btime)."),
    ("procs_running", "gangwatch_node_procs_running", gauge,
     "Number of tasks currently runnable (from /proc/stat procs_running)."),
    ("procs_blocked", "gangwatch_node_procs_blocked", gauge,
     "Number of tasks currently blocked waiting for I/O to complete (from /proc/stat procs_blocked)."),
)


@register
class CpuCollector(Collector):
    """Per-CPU, per-mode CPU seconds (iowait and steal included) and kernel activity counters from /proc/stat."""

    name = "cpu"

    def __init__(self, ctx):
        super().__init__(ctx)
        # cpu id -> rendered label strings for every mode and guest mode; CPUs rarely change, so
        # labels are rendered once rather than on every scrape.
        self._labels: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def _cpu_labels(self, cpu: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        got = self._labels.get(cpu)
        if got is None:
            if len(self._labels) > 4096:  # only a garbled file could get here; stay bounded
                self._labels.clear()
            got = (tuple(format_labels((("cpu", cpu), ("mode", m))) for m in MODES),
                   tuple(format_labels((("cpu", cpu), ("mode", m))) for m in GUEST_MODES))
            self._labels[cpu] = got
        return got

    def collect(self):
        path = self.ctx.paths.proc("stat")
        text = read_required(path)
        stat = parse_stat(text)
        if not stat.cpus:
            raise ValueError(f"no cpuN lines in {path}")
        seconds = counter("gangwatch_cpu_seconds_total",
                          "Seconds the CPU spent in each mode since boot (from /proc/stat, USER_HZ=100).")
        guest = counter("gangwatch_cpu_guest_seconds_total",
                        "Seconds the CPU spent running virtual guests since boot, mode user (guest) or "
                        "nice (guest_nice); already included in the user and nice modes.")
        add, add_guest = seconds.add_rendered, guest.add_rendered
        for c in stat.cpus:
            mode_lbls, guest_lbls = self._cpu_labels(c.cpu)
            ticks = c.ticks
            for lbl, t in zip(mode_lbls, ticks[:8]):
                if t is not None:
                    add(lbl, t / USER_HZ)
            for lbl, t in zip(guest_lbls, ticks[8:10]):
                if t is not None:
                    add_guest(lbl, t / USER_HZ)
        fams = [seconds, guest]
        for attr, name, kind, help in _NODE_SCALARS:
            value = getattr(stat, attr)
            if value is not None:
                fams.append(kind(name, help).add_rendered("", value))
        return fams
