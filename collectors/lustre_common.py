"""What the Lustre collectors share: where parameters come from, command health metrics, and the
conversion of `stats` files into metric families.

Sources, chosen per scrape (`--collector.lustre.source`, default `auto`):
- `files`: `<procfs>/fs/lustre`, `<sysfs>/fs/lustre` and `<sysfs>/kernel/debug/lustre` (Lustre
  moved files between them across versions; for each parameter the first root holding it wins).
  Reading debugfs needs root.
- `lctl`: `lctl get_param <patterns>` (`--collector.lustre.lctl-path`, no shell), under a timeout
  (`--collector.lustre.timeout`, 5 s) that is capped just below `--scrape.timeout`, so that a hung
  `lctl` is reported in the same scrape instead of making the collector miss the deadline.
- `auto`: files when the roots hold any of the wanted parameters, else `lctl` when it is on the
  PATH, else NoData (quiet: a node without Lustre reports nothing).

Absence is remembered for ABSENT_RECHECK_SECONDS (60 s) so that a node without Lustre pays almost
nothing per scrape (it was ~0.3 ms per collector: 21 globs and a PATH search): when none of the
three roots exists they are not looked at again for 60 s; in `auto` mode an `lctl` missing from
the PATH, or one that ran and printed no parameter, is not tried again for 60 s. A root that
exists is globbed on every scrape, and `lctl` that printed parameters runs on every scrape, so
Lustre that appears (module loaded, filesystem mounted) is reported within a minute, and data
is never cached: only the absence of a source is.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable

from .exposition import Family, counter, format_labels, gauge
from .lustre_parse import Stats, split_lctl_output
from .quiet import IDLE_SECONDS, QuietSeries
from .readers import read_text
from .registry import Context

COMMAND = "lctl get_param"
SCRAPE_MARGIN = 0.2  # seconds kept free between the lctl deadline and the scrape deadline
ABSENT_RECHECK_SECONDS = 60.0  # a missing source (roots, lctl) is looked for again this often


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--collector.lustre.*` flags both Lustre collectors read; registered once."""
    try:
        parser.add_argument("--collector.lustre.source", dest="collector_lustre_source", default="auto",
                            choices=["auto", "files", "lctl"],
                            help="Where the Lustre collectors read statistics: files under procfs/sysfs/"
                                 "debugfs, `lctl get_param`, or auto (files, else lctl, else nothing).")
    except argparse.ArgumentError:
        return  # the other Lustre collector registered them already
    parser.add_argument("--collector.lustre.lctl-path", dest="collector_lustre_lctl_path", default="lctl",
                        help="The lctl program (a name on the PATH or a path); run without a shell.")
    parser.add_argument("--collector.lustre.timeout", dest="collector_lustre_timeout", type=float, default=5.0,
                        help="Seconds lctl may run before it is killed and reported as timed out "
                             "(capped just below --scrape.timeout).")


@dataclass
class Fetch:
    """The parameters one collection read, and how the lctl run went (None for files)."""

    source: str  # "files", "lctl" or "none"
    params: list[tuple[str, str]] = field(default_factory=list)
    timed_out: bool | None = None
    error: bool | None = None
    returncode: int | None = None
    duration: float | None = None
    detail: str = ""
    printed: bool = False  # lctl wrote something to stdout


class LustreSource:
    def __init__(self, ctx: Context, file_limits: dict[str, int] | None = None):
        self.ctx = ctx
        self.mode = ctx.option("collector_lustre_source", "auto") or "auto"
        self.lctl = ctx.option("collector_lustre_lctl_path", "lctl") or "lctl"
        timeout = float(ctx.option("collector_lustre_timeout", 5.0) or 5.0)
        scrape = ctx.option("scrape_timeout")
        if scrape:
            timeout = min(timeout, max(0.1, float(scrape) - SCRAPE_MARGIN))
        self.timeout = timeout
        self.file_limits = file_limits or {}
        self._no_roots_until = 0.0  # monotonic time before which the roots are known absent
        self._no_lctl_until = 0.0  # same for a usable lctl (auto mode only)

    def roots(self) -> list[str]:
        p = self.ctx.paths
        return [p.proc("fs", "lustre"), p.sys("fs", "lustre"), p.sys("kernel", "debug", "lustre")]

    def present_roots(self) -> list[str]:
        """The roots that exist; none, without looking, for a minute after none did."""
        now = time.monotonic()
        if now < self._no_roots_until:
            return []
        roots = [r for r in self.roots() if os.path.isdir(r)]
        if not roots:
            self._no_roots_until = now + ABSENT_RECHECK_SECONDS
        return roots

    def fetch(self, patterns: Iterable[str]) -> Fetch:
        patterns = list(patterns)
        if self.mode in ("auto", "files"):
            params = self.read_files(patterns)
            if params or self.mode == "files":
                return Fetch("files" if params else "none", params)
        if self.mode == "lctl":
            return self.run_lctl(patterns)
        now = time.monotonic()
        if now < self._no_lctl_until:
            return Fetch("none")
        if not shutil.which(self.lctl):
            self._no_lctl_until = now + ABSENT_RECHECK_SECONDS
            return Fetch("none")
        fetch = self.run_lctl(patterns)
        if fetch.error and fetch.returncode is not None and not fetch.printed:
            # lctl ran and found none of the parameters (a server asked for client ones, a
            # node with lustre-utils but nothing mounted): nothing to report, not an error
            self._no_lctl_until = time.monotonic() + ABSENT_RECHECK_SECONDS
            return Fetch("none")
        return fetch

    def read_files(self, patterns: list[str]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        roots = self.present_roots()
        if not roots:
            return out
        for pattern in patterns:
            parts = pattern.split(".")
            for root in roots:
                for path in sorted(glob.glob(os.path.join(root, *parts))):
                    rel = os.path.relpath(path, root).split(os.sep)
                    name = ".".join(rel)
                    if name in seen or not os.path.isfile(path):
                        continue
                    text = read_text(path, self.file_limits.get(parts[-1], 4 << 20))
                    if text is None:
                        continue
                    seen.add(name)
                    out.append((name, text))
        return out

    def run_lctl(self, patterns: list[str]) -> Fetch:
        res = self.ctx.runner.run([self.lctl, "get_param", *patterns], timeout=self.timeout)
        fetch = Fetch("lctl", timed_out=res.timed_out, returncode=res.returncode, duration=res.duration)
        if res.timed_out:
            fetch.error, fetch.detail = False, f"timed out after {self.timeout:g}s"
            return fetch
        if res.error:
            fetch.error, fetch.detail = True, res.error
            return fetch
        # lctl exits non-zero when one pattern matches nothing (a client has no obdfilter) yet prints
        # the others: the run failed only when it produced no parameter at all.
        fetch.printed = bool(res.stdout.strip())
        fetch.params = split_lctl_output(res.stdout)
        fetch.error = not fetch.params
        if fetch.error:
            fetch.detail = (res.stderr.strip().splitlines() or ["no parameters in the output"])[-1][:200]
        return fetch


def command_families(collector: str, fetch: Fetch) -> list[Family]:
    """Health of the lctl run: timeout, error, exit code and duration, labelled by collector."""
    if fetch.source != "lctl":
        return []
    labels = format_labels({"collector": collector, "command": COMMAND})
    fams = [
        gauge("gangwatch_lustre_command_timeout",
              "Whether the Lustre command was killed at its timeout in this scrape (1) or not (0)."
              ).add_rendered(labels, 1 if fetch.timed_out else 0),
        gauge("gangwatch_lustre_command_error",
              "Whether the Lustre command could not run or printed no usable parameter (1) or not (0)."
              ).add_rendered(labels, 1 if fetch.error else 0),
    ]
    if fetch.returncode is not None:
        fams.append(gauge("gangwatch_lustre_command_exit_code",
                          "Exit status of the Lustre command in this scrape (absent when it timed out or "
                          "could not start).").add_rendered(labels, fetch.returncode))
    if fetch.duration is not None:
        fams.append(gauge("gangwatch_lustre_command_duration_seconds",
                          "Seconds the Lustre command ran in this scrape.").add_rendered(labels, round(fetch.duration, 6)))
    return fams


def parse_failures_family(collector: str, failures: int) -> Family:
    return gauge("gangwatch_lustre_parse_failures",
                 "Lustre parameters read in this scrape whose text could not be parsed."
                 ).add(failures, collector=collector)


def wanted(patterns: Iterable[str]) -> set[tuple[str, str]]:
    """(first, last) components of the patterns asked for: `osc.*.stats` -> ("osc", "stats")."""
    return {(p.split(".")[0], p.split(".")[-1]) for p in patterns}


def split_param(name: str) -> tuple[str, str, str] | None:
    """`osc.lustrefs-OST0000-osc-ffff8810.stats` -> (`osc`, `lustrefs-OST0000-osc-ffff8810`, `stats`)."""
    parts = name.split(".")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], ".".join(parts[1:-1]), parts[-1]


class Accumulator:
    """Sums samples that land on the same series (a filesystem mounted twice, a job listed twice)
    before rendering, so that the exposition never holds a series twice."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}
        self.values: dict[str, dict[tuple, float]] = {}

    def family(self, name: str, kind: str, help: str) -> str:
        if name not in self.families:
            self.families[name] = (counter if kind == "counter" else gauge)(name, help)
            self.values[name] = {}
        return name

    def add(self, name: str, labels: tuple[tuple[str, str], ...], value: float) -> None:
        series = self.values[name]
        series[labels] = series.get(labels, 0) + value

    def set(self, name: str, labels: tuple[tuple[str, str], ...], value: float) -> None:
        self.values[name][labels] = value

    def render(self) -> list[Family]:
        out = []
        for name, fam in self.families.items():
            for labels, value in self.values[name].items():
                fam.add_rendered(format_labels(labels), value)
            out.append(fam)
        return out


class MemberSum:
    """Totals of counters summed over members (a filesystem's targets) that only go up, across scrapes.

    A plain sum would drop when a member goes away (an OST deactivated, its OSC gone) or one member's
    counter is cleared (`lctl set_param osc.*.stats=clear`, a reconnect), and `rate()` would read the
    drop as a reset of the whole total: one step of the filesystem's whole history as throughput.
    Here each member adds what it grew since its last reading, and one whose counter went down adds
    its new value (counting from zero again). A member's first reading only sets where it starts:
    the totals count from the agent's start (0 then, a reset `rate()` reads as such), never a
    member's history at once, whether it was unreadable at the start (a hung `lctl`) or appeared
    later. A member missing from one reading (its file unreadable that scrape) keeps its last value,
    so it does not count twice when it is back. Concurrent scrapes (two Prometheus servers) update
    under a lock. Groups named in `also` are reported even without a member reading this time
    (their total so far, 0 if none), so a series is there from the start, not from the first byte
    (which is what a reader tells an agent that has it from one that has not by).
    """

    def __init__(self) -> None:
        self._last: dict[tuple, float] = {}
        self._total: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def update(self, readings: dict[tuple[tuple, tuple], float], also: Iterable[tuple] = ()) -> dict[tuple, float]:
        """{(group, member): counter} -> {group: total} for the groups with a member in `readings`
        and those in `also`."""
        with self._lock:
            seen: dict[tuple, None] = {}  # in the readings' order, then `also`'s sorted: the same every scrape
            for key, value in readings.items():
                old = self._last.get(key)
                grew = 0.0 if old is None else value if value < old else value - old
                group = key[0]
                self._total[group] = self._total.get(group, 0.0) + grew
                self._last[key] = value
                seen[group] = None
            for group in sorted(also):
                seen.setdefault(group)
            return {g: self._total.get(g, 0.0) for g in seen}


# Seconds a per-target counter may stand still before the client collector leaves its series out
# (--collector.lustre_client.target-idle-seconds; the simulator renders its agents the same way).
TARGET_IDLE_SECONDS = IDLE_SECONDS


def prune_quiet(quiet: QuietSeries, acc: "Accumulator", families: Iterable[str], now: float) -> int:
    """Drop from `acc` the series of `families` that `quiet` leaves out and set the others to the
    value it shows; how many were left out."""
    families = list(families)
    shown, dropped = quiet.shown([((fam, labels), value) for fam in families
                                  for labels, value in acc.values.get(fam, {}).items()], now)
    for fam in families:
        acc.values[fam] = {}
    for (fam, labels), value in shown:
        acc.values[fam][labels] = value
    return dropped


_LATENCY_DIVISORS = {"usec": 1e6, "usecs": 1e6}  # division keeps 1234 usec -> 0.001234 exact


class StatsFamilies:
    """The three families a `stats` file becomes under one prefix:
    `<prefix>_operations_total{operation}` (samples of every line, named as in the file),
    `<prefix>_io_bytes_total{operation}` (sum of `[bytes]` lines, `read_bytes` -> `read`), and
    `<prefix>_operation_latency_seconds_total{operation}` (sum of `[usec]`/`[usecs]` lines)."""

    def __init__(self, acc: Accumulator, prefix: str, what: str):
        self.acc = acc
        self.ops = acc.family(f"{prefix}_operations_total", "counter",
                              f"Operations counted by {what}, by the stat name Lustre uses (for "
                              f"`read_bytes`/`write_bytes` the number of read/write calls).")
        self.bytes = acc.family(f"{prefix}_io_bytes_total", "counter",
                                f"Bytes read or written as counted by {what}.")
        self.latency = acc.family(f"{prefix}_operation_latency_seconds_total", "counter",
                                  f"Total seconds spent in the operation as timed by {what} (Lustre 2.12+ "
                                  f"times most operations; divide by the operations counter for the mean).")

    def add(self, stats: Stats, labels: tuple[tuple[str, str], ...]) -> None:
        for name, line in stats.lines.items():
            self.acc.add(self.ops, labels + (("operation", name),), line.samples)
            if line.sum is None:
                continue
            if line.unit == "bytes":
                op = name[:-6] if name.endswith("_bytes") else name
                self.acc.add(self.bytes, labels + (("operation", op),), line.sum)
            elif line.unit in _LATENCY_DIVISORS:
                self.acc.add(self.latency, labels + (("operation", name),), line.sum / _LATENCY_DIVISORS[line.unit])
