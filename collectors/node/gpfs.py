"""IBM Storage Scale (GPFS) client I/O, waiters and health, from the mm* commands.

Sources (each command path is a flag; all need root, as the GPFS commands themselves do):
- `mmpmon -s -p` fed `fs_io_s` and `io_s` on stdin: bytes read and written, opens, closes, reads,
  writes, readdirs and inode updates per mounted filesystem (`fs_io_s`) and for the whole node (`io_s`).
- `mmdiag --waiters -Y`: the threads waiting inside the daemon now, how long and why.
- `mmhealth node show -Y`: the state of each component and entity, and active events.

Metrics:
- `gangwatch_gpfs_{read,write}_bytes_total{cluster,fs}`, `gangwatch_gpfs_operations_total{cluster,fs,operation}`,
  `gangwatch_gpfs_node_{read,write}_bytes_total`, `gangwatch_gpfs_node_operations_total{operation}`,
  `gangwatch_gpfs_filesystem_disks{cluster,fs}`, `gangwatch_gpfs_filesystem_info{cluster,fs,nodename}`.
- `gangwatch_gpfs_waiter_longest_seconds`, `gangwatch_gpfs_waiters_wait_seconds`,
  `gangwatch_gpfs_waiters_by_reason{reason}`, `gangwatch_gpfs_waiters_by_thread{thread}`.
- `gangwatch_gpfs_health_state{component,entity,entitytype,state}` (1 for the current state),
  `gangwatch_gpfs_health_event{component,entity,entitytype,event}`.
- `gangwatch_gpfs_command_{error,timeout}{command}` and `gangwatch_gpfs_command_duration_seconds{command}`.

mmpmon's counters are 32-bit in some releases and wrap; `CounterAccumulator` turns the raw values
into 64-bit totals that only go up (see its docstring for how a wrap is told from a daemon restart).

Failure modes: no command installed -> NoData (quiet). Commands run in background threads, each under
`--collector.gpfs.timeout` (killed with its process group when it passes); a scrape waits at most
`--collector.gpfs.wait` for fresh results and otherwise serves the last finished ones, so a hung
`mmhealth` costs a `command_timeout` metric, never a hung scrape or a pile of stuck threads (one run
per command at a time). A non-zero exit, a start failure or output without any recognisable record
sets `command_error`; a garbled field drops only that field.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import unquote

from ..exposition import Family, counter, format_labels, gauge
from ..registry import Collector, NoData, register
from ..runner import CommandResult

MMFS_BIN = "/usr/lpp/mmfs/bin"
DEFAULT_WAITER_EXCLUDE = r"(EventsExporterSenderThread|Fsck)"  # idle by design; as gpfs_exporter excludes them

# mmpmon keyword -> our operation name (bytes are separate families).
OPERATIONS = {
    "_oc_": "opens",
    "_cc_": "closes",
    "_rdc_": "reads",
    "_wc_": "writes",
    "_dir_": "readdirs",
    "_iu_": "inode_updates",
}
COUNTER_KEYS = ("_br_", "_bw_", *OPERATIONS)
_KEYWORD = re.compile(r"^_[a-z]+_$")


# ---------------------------------------------------------------------------------------------
# Parsers (pure)


@dataclass(frozen=True)
class PmonRecord:
    """One `_fs_io_s_` or `_io_s_` response line of `mmpmon -p`."""

    kind: str  # "fs_io_s" or "io_s"
    nodename: str = ""
    cluster: str = ""
    filesystem: str = ""
    rc: int | None = None
    timestamp: float | None = None  # _t_ + _tu_/1e6: the sample's wall-clock time
    disks: int | None = None
    counters: Mapping[str, int] = field(default_factory=dict)  # keyed by mmpmon keyword, e.g. "_br_"


def _int(text: str | None) -> int | None:
    if text is None or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def parse_mmpmon(text: str) -> list[PmonRecord]:
    """`mmpmon -p` output -> records; lines of other requests and garbage are skipped."""
    out: list[PmonRecord] = []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or tokens[0] not in ("_fs_io_s_", "_io_s_"):
            continue
        pairs: dict[str, str] = {}
        i = 1
        while i < len(tokens):
            key = tokens[i]
            if _KEYWORD.match(key) and i + 1 < len(tokens) and not _KEYWORD.match(tokens[i + 1]):
                pairs.setdefault(key, tokens[i + 1])
                i += 2
            else:
                i += 1
        t, tu = _int(pairs.get("_t_")), _int(pairs.get("_tu_"))
        counters = {k: v for k in COUNTER_KEYS if (v := _int(pairs.get(k))) is not None}
        out.append(PmonRecord(
            kind=tokens[0].strip("_"),
            nodename=pairs.get("_nn_", ""),
            cluster=pairs.get("_cl_", ""),
            filesystem=pairs.get("_fs_", ""),
            rc=_int(pairs.get("_rc_")),
            timestamp=None if t is None else t + (tu or 0) / 1e6,
            disks=_int(pairs.get("_d_")),
            counters=counters,
        ))
    return out


def parse_y(text: str, command: str) -> dict[str, list[dict[str, str]]]:
    """The colon-separated `-Y` format -> {record type: [row as {header field: value}]}.

    Fields are mapped by the HEADER row of the same record type (column sets change between
    releases), values are URL-decoded (`%3A` -> `:`), extra trailing columns are ignored and
    missing ones are simply absent from the row.
    """
    headers: dict[str, list[str]] = {}
    rows: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        items = line.rstrip("\r").split(":")
        if len(items) < 3 or items[0] != command:
            continue
        kind = items[1]
        if items[2] == "HEADER":
            headers[kind] = items
            continue
        header = headers.get(kind)
        if header is None:
            continue
        # the first three columns are the command, the record type and HEADER (or a sequence number)
        row = {h: unquote(v) for h, v in zip(header[3:], items[3:]) if h}
        rows.setdefault(kind, []).append(row)
    return rows


@dataclass(frozen=True)
class Waiter:
    thread: str
    seconds: float
    reason: str


_SECONDS = re.compile(r"^\d+(?:\.\d+)?$")


def parse_waiters(text: str) -> list[Waiter]:
    """`mmdiag --waiters -Y` -> waiters; a row whose wait time is not a number is dropped."""
    out = []
    for row in parse_y(text, "mmdiag").get("waiters", ()):
        wait = row.get("waitTime", "")
        if not _SECONDS.match(wait):
            continue
        reason = row.get("auxReason") or row.get("condVarReason") or row.get("delayReason") or ""
        out.append(Waiter(row.get("threadName", ""), float(wait), reason))
    return out


_NORMALISE = (
    (re.compile(r"0x[0-9A-Fa-f]+|\b[0-9A-Fa-f]{8,}\b"), "ADDR"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "IP"),
    (re.compile(r"<c\d+n\d+>"), "<node>"),
    (re.compile(r"\b\w*Thread\b"), "THREAD"),
    (re.compile(r"\d+"), "N"),
    (re.compile(r"[\s']+"), " "),
)


def normalise_reason(reason: str, limit: int = 80) -> str:
    """Bound a waiter reason's cardinality: addresses, IPs, node ids, thread names and numbers go."""
    for pattern, repl in _NORMALISE:
        reason = pattern.sub(repl, reason)
    reason = reason.strip()[:limit].strip()
    return reason or "none"


def normalise_thread(name: str) -> str:
    name = re.sub(r"\d+", "N", name.strip())[:64]
    return name or "unknown"


# mmhealth states gpfs_exporter knows; anything else is reported as UNKNOWN, as it does.
HEALTH_STATES = frozenset((
    "CHECKING", "DEGRADED", "DEPEND", "DISABLED", "FAILED", "HEALTHY", "STARTING", "STOPPED",
    "SUSPENDED", "TIPS", "UNKNOWN",
))


@dataclass(frozen=True)
class HealthState:
    component: str
    entity: str
    entitytype: str
    state: str


@dataclass(frozen=True)
class HealthEvent:
    component: str
    entity: str
    entitytype: str
    event: str


def parse_mmhealth(text: str) -> tuple[list[HealthState], list[HealthEvent]]:
    """`mmhealth node show -Y` -> current states and active events (old and new header layouts)."""
    rows = parse_y(text, "mmhealth")
    states = []
    for r in rows.get("State", ()):
        if not r.get("component"):
            continue
        status = r.get("status", "").upper()
        states.append(HealthState(r["component"], r.get("entityname", ""), r.get("entitytype", ""),
                                  status if status in HEALTH_STATES else "UNKNOWN"))
    events = [HealthEvent(r["component"], r.get("entityname", ""), r.get("entitytype", ""), r["event"])
              for r in rows.get("Event", ()) if r.get("component") and r.get("event")]
    return states, events


# ---------------------------------------------------------------------------------------------
# 32-bit counters -> 64-bit totals

WRAP = 1 << 32


class CounterAccumulator:
    """Monotonic 64-bit totals from raw counters that may be 32-bit and wrap, or reset.

    Per key (a filesystem, or the node) it keeps the last raw value of each field and adds the
    deltas to a running total. When a raw value goes down it is either a 32-bit wrap (the total
    gains 2^32 - previous + new) or a counter reset (mmpmon `reset`, or the daemon restarted: the
    total gains the new value, which counts from zero). It is a wrap only when it is plausible:
    the field has never been seen above 2^32 (so it is 32-bit), the wrapped delta is under 2^31
    (less than half the range in one interval: the previous value was near the top and the new one
    near zero), and no other field of the same record went down at the same time. A restart makes
    every busy counter drop at once, typically by little, so it fails these tests. mmpmon's `_t_` is
    the sample's wall-clock time, not the daemon's start, so it cannot show a restart by itself; a
    sample whose `_t_` is not newer than the last one is a repeat and changes nothing.
    """

    def __init__(self) -> None:
        self._raw: dict[object, dict[str, int]] = {}
        self._total: dict[object, dict[str, int]] = {}
        self._stamp: dict[object, float | None] = {}
        self._wide: set[tuple[object, str]] = set()
        self.wraps = 0
        self.resets = 0

    def update(self, key: object, values: Mapping[str, int], stamp: float | None = None) -> dict[str, int]:
        raw = self._raw.setdefault(key, {})
        totals = self._total.setdefault(key, {})
        last = self._stamp.get(key)
        if raw and stamp is not None and last is not None and stamp <= last:
            return {n: totals[n] for n in values if n in totals}  # a repeat of an older sample
        for name, value in values.items():
            if value >= WRAP:
                self._wide.add((key, name))
        drops = [n for n, v in values.items() if n in raw and v < raw[n]]
        wrapped = len(drops) == 1 and self._plausible_wrap(key, drops[0], raw[drops[0]], values[drops[0]])
        reset = bool(drops) and not wrapped
        for name, value in values.items():
            old = raw.get(name)
            if old is None or reset:
                delta = value  # first sight, or counting again from zero
            elif value >= old:
                delta = value - old
            else:  # the one plausible wrap
                delta = WRAP - old + value
            totals[name] = totals.get(name, 0) + delta
        self.wraps += wrapped
        self.resets += reset
        raw.update(values)
        if stamp is not None:
            self._stamp[key] = stamp
        return {n: totals[n] for n in values}

    def _plausible_wrap(self, key: object, name: str, old: int, new: int) -> bool:
        return (key, name) not in self._wide and old < WRAP and (WRAP - old + new) < (1 << 31)


# ---------------------------------------------------------------------------------------------
# Commands in the background


class Probe:
    """Runs one command in a background thread; a scrape reads the latest finished result.

    At most one run per command is in flight: a command stuck past its timeout is killed by the
    runner, and until then later scrapes do not start another copy.
    """

    def __init__(self, name: str, runner, argv: list[str], stdin: str | None, timeout: float):
        self.name, self.runner, self.argv, self.stdin, self.timeout = name, runner, argv, stdin, timeout
        self.last: CommandResult | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    def begin(self) -> threading.Event | None:
        """Start a run unless one is in flight: the event of the run started now, or None when an
        earlier scrape's run is still going. A scrape waits only for the runs it started, so a
        command stuck until its timeout costs one scrape the wait, not every scrape meanwhile."""
        with self._lock:
            if self._thread is not None:
                return None
            self._done = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._done,), daemon=True,
                                            name=f"gpfs-{self.name}")
            self._thread.start()
            return self._done

    def _run(self, done: threading.Event) -> None:
        try:
            result = self.runner.run(self.argv, timeout=self.timeout, input=self.stdin)
        except Exception as exc:  # a broken runner is this command's error, not the thread's death
            result = CommandResult(tuple(self.argv), None, "", "", 0.0, error=f"{type(exc).__name__}: {exc}")
        with self._lock:
            self.last = result
            self._thread = None
        done.set()

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


def _installed(path: str) -> bool:
    if os.path.isabs(path):
        return os.path.exists(path)
    return shutil.which(path) is not None


def _not_found(result: CommandResult) -> bool:
    return result.error.startswith(("FileNotFoundError", "NotADirectoryError"))


# ---------------------------------------------------------------------------------------------
# The collector


@register
class GpfsCollector(Collector):
    """IBM Storage Scale (GPFS): per-filesystem I/O from mmpmon, waiters, mmhealth states."""

    name = "gpfs"

    @classmethod
    def add_arguments(cls, parser) -> None:
        for cmd in ("mmpmon", "mmdiag", "mmhealth"):
            parser.add_argument(f"--collector.gpfs.{cmd}-path", dest=f"collector_gpfs_{cmd}_path",
                                default=f"{MMFS_BIN}/{cmd}", help=f"Path of the {cmd} command.")
        parser.add_argument("--collector.gpfs.timeout", dest="collector_gpfs_timeout", type=float, default=5.0,
                            help="Seconds each GPFS command may run before it is killed and reported "
                                 "as timed out.")
        parser.add_argument("--collector.gpfs.wait", dest="collector_gpfs_wait", type=float, default=0.5,
                            help="Seconds a scrape waits for fresh command results before serving the "
                                 "last finished ones (keep it under --scrape.timeout).")
        parser.add_argument("--collector.gpfs.waiter-exclude", dest="collector_gpfs_waiter_exclude",
                            default=DEFAULT_WAITER_EXCLUDE,
                            help="Regular expression of waiter thread names to ignore (threads that "
                                 "wait by design).")
        parser.add_argument("--collector.gpfs.max-reasons", dest="collector_gpfs_max_reasons", type=int,
                            default=20, help="Most distinct waiter reasons (and thread names) exported; "
                                             "the rest are summed under \"other\".")

    def __init__(self, ctx):
        super().__init__(ctx)
        opt = ctx.option
        timeout = float(opt("collector_gpfs_timeout", 5.0) or 5.0)
        self.wait = float(opt("collector_gpfs_wait", 0.5) or 0.0)
        self.exclude = re.compile(opt("collector_gpfs_waiter_exclude", DEFAULT_WAITER_EXCLUDE) or r"(?!)")
        self.max_reasons = max(1, int(opt("collector_gpfs_max_reasons", 20) or 20))
        path = lambda cmd: opt(f"collector_gpfs_{cmd}_path") or f"{MMFS_BIN}/{cmd}"
        self.probes = {
            "mmpmon": Probe("mmpmon", ctx.runner, [path("mmpmon"), "-s", "-p"], "fs_io_s\nio_s\n", timeout),
            "mmdiag": Probe("mmdiag", ctx.runner, [path("mmdiag"), "--waiters", "-Y"], None, timeout),
            "mmhealth": Probe("mmhealth", ctx.runner, [path("mmhealth"), "node", "show", "-Y"], None, timeout),
        }
        self.parsers = {"mmpmon": self._mmpmon, "mmdiag": self._mmdiag, "mmhealth": self._mmhealth}
        self.accumulator = CounterAccumulator()
        self._pmon_result: CommandResult | None = None
        self._pmon_families: list[Family] = []
        self._pmon_ok = True

    def collect(self) -> Iterable[Family]:
        probes = [p for p in self.probes.values() if _installed(p.argv[0])]
        if not probes:
            raise NoData("no GPFS commands installed")
        deadline = time.monotonic() + self.wait
        for done in [p.begin() for p in probes]:
            if done is not None:  # a run an earlier scrape started and still going is not waited for again
                done.wait(max(0.0, deadline - time.monotonic()))
        status_error = gauge("gangwatch_gpfs_command_error",
                             "Whether the last finished run of the GPFS command failed: non-zero exit, "
                             "could not start, or output without any recognisable record (1), or not (0).")
        status_timeout = gauge("gangwatch_gpfs_command_timeout",
                               "Whether the last run of the GPFS command was killed at its timeout (1) or not (0).")
        duration = gauge("gangwatch_gpfs_command_duration_seconds",
                         "Seconds the last finished run of the GPFS command took.")
        fams: list[Family] = [status_error, status_timeout, duration]
        absent = 0
        for probe in probes:
            result = probe.last
            if result is None:
                continue  # first run still going; its outcome shows in a later scrape
            if _not_found(result):
                absent += 1
                continue
            ok = result.ok
            if ok:
                ok, parsed = self.parsers[probe.name](result)
                fams.extend(parsed)
            lbl = format_labels({"command": probe.name})
            status_error.add_rendered(lbl, 0 if ok or result.timed_out else 1)
            status_timeout.add_rendered(lbl, 1 if result.timed_out else 0)
            duration.add_rendered(lbl, round(result.duration, 6))
        if absent == len(probes):
            raise NoData("GPFS commands not found")
        return fams

    # -- mmpmon ---------------------------------------------------------------------------------

    def _mmpmon(self, result: CommandResult) -> tuple[bool, list[Family]]:
        if result is not self._pmon_result:  # counters advance once per finished run, not per scrape
            self._pmon_result = result
            self._pmon_ok, self._pmon_families = self._pmon_families_for(parse_mmpmon(result.stdout))
        return self._pmon_ok, self._pmon_families

    def _pmon_families_for(self, records: list[PmonRecord]) -> tuple[bool, list[Family]]:
        rb = counter("gangwatch_gpfs_read_bytes_total", "Bytes read from the GPFS filesystem by this node (mmpmon fs_io_s).")
        wb = counter("gangwatch_gpfs_write_bytes_total", "Bytes written to the GPFS filesystem by this node (mmpmon fs_io_s).")
        ops = counter("gangwatch_gpfs_operations_total",
                      "GPFS operations by this node on the filesystem, by operation: opens, closes, reads, "
                      "writes, readdirs, inode_updates (mmpmon fs_io_s).")
        nrb = counter("gangwatch_gpfs_node_read_bytes_total", "Bytes read from all GPFS filesystems by this node (mmpmon io_s).")
        nwb = counter("gangwatch_gpfs_node_write_bytes_total", "Bytes written to all GPFS filesystems by this node (mmpmon io_s).")
        nops = counter("gangwatch_gpfs_node_operations_total",
                       "GPFS operations by this node on all filesystems, by operation (mmpmon io_s).")
        disks = gauge("gangwatch_gpfs_filesystem_disks", "Number of disks (NSDs) of the GPFS filesystem (mmpmon _d_).")
        info = gauge("gangwatch_gpfs_filesystem_info",
                     "A GPFS filesystem mounted on this node, labelled with its cluster and the GPFS node name; value 1.")
        seen: set[tuple] = set()
        for rec in records:
            if rec.rc not in (None, 0):
                continue  # the request failed for this filesystem (e.g. not mounted)
            if rec.kind == "fs_io_s":
                key = ("fs", rec.cluster, rec.filesystem)
                base = {"cluster": rec.cluster, "fs": rec.filesystem}
                fam_rb, fam_wb, fam_ops = rb, wb, ops
            else:
                key, base = ("node",), {}
                fam_rb, fam_wb, fam_ops = nrb, nwb, nops
            if key in seen:
                continue  # one series per key, whatever the command repeated
            seen.add(key)
            totals = self.accumulator.update(key, rec.counters, rec.timestamp)
            lbl = format_labels(base)
            if "_br_" in totals:
                fam_rb.add_rendered(lbl, totals["_br_"])
            if "_bw_" in totals:
                fam_wb.add_rendered(lbl, totals["_bw_"])
            for kw, op in OPERATIONS.items():
                if kw in totals:
                    fam_ops.add(totals[kw], base, operation=op)
            if rec.kind == "fs_io_s":
                if rec.disks is not None:
                    disks.add_rendered(lbl, rec.disks)
                info.add(1, base, nodename=rec.nodename)
        return bool(records), [rb, wb, ops, nrb, nwb, nops, disks, info]

    # -- mmdiag --waiters -----------------------------------------------------------------------

    def _mmdiag(self, result: CommandResult) -> tuple[bool, list[Family]]:
        text = result.stdout
        if text.strip() and "mmdiag:waiters:HEADER" not in text:
            return False, []
        waiters = [w for w in parse_waiters(text) if not self.exclude.search(w.thread)]
        longest = gauge("gangwatch_gpfs_waiter_longest_seconds",
                        "Seconds the longest current GPFS waiter has been waiting (0 when none).")
        total = gauge("gangwatch_gpfs_waiters_wait_seconds",
                      "Sum of the seconds all current GPFS waiters have been waiting.")
        by_reason = gauge("gangwatch_gpfs_waiters_by_reason",
                          "Current GPFS waiters by reason, with numbers, addresses and thread names "
                          "normalised out of the reason.")
        by_thread = gauge("gangwatch_gpfs_waiters_by_thread", "Current GPFS waiters by thread name.")
        longest.add(max((w.seconds for w in waiters), default=0.0))
        total.add(round(sum(w.seconds for w in waiters), 6))
        for fam, label, key in ((by_reason, "reason", lambda w: normalise_reason(w.reason)),
                                (by_thread, "thread", lambda w: normalise_thread(w.thread))):
            for value, count in _top(Counter(key(w) for w in waiters), self.max_reasons):
                fam.add(count, {label: value})
        return True, [longest, total, by_reason, by_thread]

    # -- mmhealth -------------------------------------------------------------------------------

    def _mmhealth(self, result: CommandResult) -> tuple[bool, list[Family]]:
        states, events = parse_mmhealth(result.stdout)
        state = gauge("gangwatch_gpfs_health_state",
                      "Current mmhealth state of a GPFS component's entity: 1 for the state it is in "
                      "(HEALTHY, TIPS, DEGRADED, FAILED, DEPEND, ...; states this version does not know "
                      "are UNKNOWN).")
        event = gauge("gangwatch_gpfs_health_event", "An active mmhealth event on a GPFS component's entity; value 1.")
        for fam, items, last in ((state, states, "state"), (event, events, "event")):
            for item in dict.fromkeys(items):  # dedupe, keep order
                fam.add(1, component=item.component, entity=item.entity, entitytype=item.entitytype,
                        **{last: getattr(item, last)})
        return bool(states), [state, event]

    def close(self) -> None:
        for p in self.probes.values():
            p.join(p.timeout + 2.0)  # the runner kills a command at its timeout


def _top(counts: Counter, limit: int) -> list[tuple[str, int]]:
    """The `limit` most common values (ties by name); the rest summed as "other"."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    head, tail = ranked[:limit], ranked[limit:]
    if tail:
        merged = dict(head)
        merged["other"] = merged.get("other", 0) + sum(c for _, c in tail)
        head = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
    return head
