"""NIC driver statistics (what `ethtool -S` prints), normalised with node_exporter's ethtool names.

Sources: the ethtool ioctl (SIOCETHTOOL on an AF_INET datagram socket: ETHTOOL_GSSET_INFO for the
count, ETHTOOL_GSTRINGS for the names, ETHTOOL_GSTATS for the values), no subprocess and no
privileges (the kernel lets any user read driver stats). Interfaces are those under
`<sysfs>/class/net`. With `--collector.ethtool.fixtures DIR[,DIR...]` the values come instead from
`DIR/<device>/statistics`, text files holding `ethtool -S` output (node_exporter's fixture layout):
tests and benchmarks read captured outputs of drivers this host lacks.

Off by default: a driver answers GSTATS by reading its hardware counters (mlx5 reads several
firmware pages for ~1000 stats), which is not free on every scrape.

Metrics (label `device`; names as node_exporter's `node_ethtool_*`: lower-cased, `rx` -> `received`,
`tx` -> `transmitted`, plus `_total`):
- `gangwatch_ethtool_<stat>_total`: each device-wide stat (`rx_discards_phy` ->
  `gangwatch_ethtool_received_discards_phy_total`).
- `gangwatch_ethtool_queue_<stat>_total`: per-queue stats (mlx5 `rx3_packets`, virtio/veth
  `rx_queue_3_packets`, i40e `rx-3.packets`, ena `queue_3_tx_cnt`) summed over the queues; with
  `--collector.ethtool.per-queue` one series per queue (label `queue`).
- `gangwatch_ethtool_prio_<stat>_total{priority}`: per-priority stats (mlx5 `rx_prio3_pause`, ice
  `rx_priority_3_xoff.nic` as `prio_received_xoff`: PFC);
  pause durations (`*_pause_duration`, microseconds in mlx5) are exported in seconds
  (`..._pause_duration_seconds_total`).
- `gangwatch_ethtool_stats_supported{device}`: 1 when the driver gave statistics, 0 when it has none
  (loopback, bonding, most virtual devices).
- Node rollups (sums over the devices that report them this scrape, absent when none does):
  `gangwatch_ethtool_node_received_pause_frames_total` (each NIC's global pause or PFC count, the
  larger: PAUSE_STATS),
  `gangwatch_ethtool_node_link_down_events_total`, `gangwatch_ethtool_node_link_errors_total` (CRC and
  symbol errors), `gangwatch_ethtool_node_pause_storm_events_total` (the PFC storm guard's events).
  Where the node has RDMA devices, the NICs that carry them (`<sysfs>/class/infiniband/*/device/net/`,
  and a RoCE LAG bond's other ports; read again every RESCAN_SECONDS) are added up apart from the
  others: label `nics="rdma"` or `nics="other"` (the management network, whose pauses pace no
  collective); else no label.
Flags: `--collector.ethtool.device-include`/`-exclude` (regexes, as node_exporter),
`--collector.ethtool.metrics-include` (regex on the driver's stat name; default DEFAULT_METRICS_INCLUDE:
discards, drops, pause/PFC, buffer exhaustion, CRC/symbol errors, link-down events, timeouts, which
/proc/net/dev lacks; `.` for every stat, as node_exporter's default),
`--collector.ethtool.per-queue`, `--collector.ethtool.fixtures DIR`.

Cardinality: device-wide stats are the driver's fixed list; per-queue stats are one series per stat
unless asked for; priorities are 0-7 (others are left as plain stats). A driver reporting more than
MAX_STATS stats is refused (unsupported, with its count) rather than read in part.

Failure modes: a device whose driver has no stats (EOPNOTSUPP, a count of 0, `ethtool -S` answering
"no stats available" or an error) reports stats_supported 0 and nothing else, never an error; a
device that vanishes between listing and reading costs only itself. Counters that go backwards (a
driver reload, fewer queues after `ethtool -L`) are exported as read: Prometheus treats the drop as a
counter reset. The names are re-read when the driver's stat count changes, and every RESCAN_SECONDS
(an unchanged list keeps its plan).

Cost: a device's plan (which stats make which samples, the rendered sample prefixes) is built once
per stat list; devices whose plans have one shape (NICs of one driver) are scraped together as a
Group: a few C-level calls per group and one %-format renders all their lines.
"""

from __future__ import annotations

import array
import errno
import fcntl
import os
import re
import socket
import struct
import time
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Sequence

from ..exposition import Family, counter, escape_label_value, gauge
from ..registry import Collector, NoData, register
from .devices import DeviceFilter, add_device_filter_arguments, regex_argument

PREFIX = "gangwatch_ethtool_"
MAX_STATS = 8192  # mlx5 with 256 channels has ~7000; beyond this a driver is misbehaving
RESCAN_SECONDS = 60.0
# What the issue asks of driver stats and /proc/net/dev cannot give (the netdev collector already
# exports bytes, packets, errors and drops per interface): discards, drops, pause/PFC, buffer
# exhaustion, CRC/symbol errors, link-down events, timeouts. `--collector.ethtool.metrics-include .`
# exports every stat as node_exporter does (mlx5: ~100 device-wide stats plus ~30 per queue).
DEFAULT_METRICS_INCLUDE = (r"discard|drop|pause|pfc|xoff|out_of_buffer|buff_alloc|crc|fcs|symbol|err|link_down|"
                           r"timeout|missed")


class Unsupported(Exception):
    """The device's driver gives no statistics (the reason is the message)."""


# ---------------------------------------------------------------------------------------------
# Pure parser and normaliser

# `name: value` lines; a `# ...` comment and ethtool's "ERROR: n" are not stats
_STAT_LINE = re.compile(r"^[ \t]*(?!#|ERROR:)([^:\n]*[^:\s])[ \t]*:[ \t]*(\d+)[ \t]*$", re.M)


def parse_stats_text(text: str) -> tuple[tuple[str, ...], list[int]]:
    """`ethtool -S` output -> (names, values), in the driver's order; Unsupported when it holds none.

    Lines that are not `name: unsigned integer` (the `NIC statistics:` header, `# ...` comments,
    negative or non-numeric values) are skipped; "no stats available" or an `ERROR:` line, with no
    stat at all, is the driver saying it has none.
    """
    pairs = _STAT_LINE.findall(text)
    if not pairs:
        first = next((l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")), "empty output")
        raise Unsupported(f"no statistics ({first[:80]})")
    names, values = zip(*pairs)
    return names, list(map(int, values))


_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_RX = re.compile(r"(^|_)rx(_|$)")
_TX = re.compile(r"(^|_)tx(_|$)")
_QUEUE_PATTERNS = (
    re.compile(r"^(rx|tx)(\d+)_(.+)$"),  # mlx5: rx3_packets, tx3_dropped
    re.compile(r"^(rx|tx)_queue_(\d+)_(.+)$"),  # virtio_net, veth, ixgbe: rx_queue_3_packets
    re.compile(r"^(rx|tx)-(\d+)\.(.+)$"),  # i40e, ice: rx-3.packets
    re.compile(r"^(ch)(\d+)_(.+)$"),  # mlx5 channels: ch3_events, ch3_arm
)
_ENA_QUEUE = re.compile(r"^queue_(\d+)_(rx|tx)_(.+)$")  # ena: queue_3_tx_cnt
_PRIO_PATTERNS = (
    re.compile(r"^(rx|tx)_prio([0-7])_(.+)$"),  # mlx5: rx_prio3_pause, tx_prio3_pause_duration
    re.compile(r"^(rx|tx)_priority_([0-7])_(xon|xoff)\.nic$"),  # ice: rx_priority_3_xoff.nic
)


def metric_name(stat: str) -> str:
    """node_exporter's ethtool naming: lower case, non-alphanumerics to `_`, rx/tx spelled out."""
    name = _NON_ALNUM.sub("_", stat.lower()).strip("_")
    name = _RX.sub(r"\1received\2", name)
    return _TX.sub(r"\1transmitted\2", name)


@dataclass(frozen=True)
class Classified:
    kind: str  # "device", "queue" or "prio"
    base: str  # the stat name without its queue or priority: "rx_packets", "rx_pause"
    index: str  # the queue or priority, "" for device-wide stats


def classify(stat: str) -> Classified:
    for pattern in _QUEUE_PATTERNS:
        m = pattern.match(stat)
        if m:
            return Classified("queue", f"{m.group(1)}_{m.group(3)}", m.group(2))
    m = _ENA_QUEUE.match(stat)
    if m:
        return Classified("queue", f"{m.group(2)}_{m.group(3)}", m.group(1))
    for pattern in _PRIO_PATTERNS:
        m = pattern.match(stat)
        if m:
            return Classified("prio", f"{m.group(1)}_{m.group(3)}", m.group(2))
    return Classified("device", stat, "")


# Stats folded into the node rollups (driver names: mlx5, ice/i40e, bnxt, ixgbe and the generic ones).
# Pause frames are the XOFF ones (XON resumes); PFC frames count where the driver counts them apart
# from global pause: bnxt's rx_pfc_frames (all priorities), mlx5's rx_prio<p>_pause and ice's
# rx_priority_<p>_xoff.nic (per priority); ice and i40e name their port's global counters
# link_xoff_rx with a `.nic` suffix or a `port.` prefix.
# A NIC runs global pause or PFC, never both (mlx5 and ice refuse the pair), and some mlx5 firmware
# counts PFC frames in its global counter too: a NIC's pause frames are the larger of its global
# and its PFC counts, not their sum (which counted such a NIC's PFC frames twice). The larger of two
# counters only grows, so the rollup stays a counter.
PAUSE_STATS = frozenset({"rx_pause_ctrl_phy", "rx_pause", "rx_pause_frames", "rx_flow_control_xoff", "link_xoff_rx",
                         "link_xoff_rx.nic", "port.link_xoff_rx", "rx_pause_frames_rcvd"})
PFC_STATS = frozenset({"rx_pfc_frames"})
PRIO_PAUSE_BASES = frozenset({"rx_pause", "rx_xoff"})  # rx_prio<p>_pause (mlx5), rx_priority_<p>_xoff.nic (ice)
PAUSE_ROLLUP = "node_received_pause_frames_total"
PFC_PART = PAUSE_ROLLUP + "/pfc"  # a PFC stat's place in Plan.rollups: the pause rollup's other side
LINK_DOWN_STATS = frozenset({"link_down_events_phy", "link_down_count", "link_down_events", "carrier_down"})
LINK_ERROR_STATS = frozenset({"rx_crc_errors_phy", "rx_symbol_err_phy", "rx_crc_errors", "rx_symbol_errors",
                              "rx_fcs_errors", "crc_errors", "rx_crc_errors_frames"})
# A NIC's PFC storm guard (mlx5): it has been sending pause frames for longer than the minor
# watermark (warning) or the critical one (error: it then stops sending them). Normal overload
# never holds a port paused that long; a host that stopped draining its receive queues does.
PAUSE_STORM_STATS = frozenset({"tx_pause_storm_warning_events", "tx_pause_storm_error_events"})
NODE_HELP = {
    PAUSE_ROLLUP: "Pause frames received (each NIC's global pause or PFC count, whichever is larger: a NIC runs "
                  "one of them), summed over the node's NICs that report them: the switch asked this node to stop "
                  "sending.",
    "node_link_down_events_total": "Physical link-down events counted by the NIC drivers, summed over the node's NICs.",
    "node_link_errors_total": "Frames received with CRC/FCS or symbol errors, summed over the node's NICs.",
    "node_pause_storm_events_total": "Times a NIC's pause storm guard fired (mlx5 tx_pause_storm_warning_events and "
                                     "tx_pause_storm_error_events: it sent pause frames past the minor or the "
                                     "critical watermark; a storm that lasts past both counts twice), summed over "
                                     "the node's NICs that report them.",
}


def _rollup(c: Classified) -> str:
    if c.kind == "device":
        if c.base in PAUSE_STATS:
            return PAUSE_ROLLUP
        if c.base in PFC_STATS:
            return PFC_PART
        if c.base in LINK_DOWN_STATS:
            return "node_link_down_events_total"
        if c.base in LINK_ERROR_STATS:
            return "node_link_errors_total"
        if c.base in PAUSE_STORM_STATS:
            return "node_pause_storm_events_total"
    elif c.kind == "prio" and c.base in PRIO_PAUSE_BASES:
        return PFC_PART
    return ""


@dataclass(frozen=True)
class Plan:
    """What each scrape of one device emits, decided once per (device, stat list); sample k sums the
    driver's values at `selects[k]` (a slice when the indices are evenly spaced: queues)."""

    names: tuple[str, ...]
    metrics: tuple[str, ...]  # per sample: its family's name
    helps: tuple[str, ...]  # per sample: its family's HELP
    prefixes: tuple[str, ...]  # per sample: "name{labels} ", rendered once
    selects: tuple[slice | tuple[int, ...], ...]
    singles: int = 0  # the first `singles` samples are one stat each, taken by one itemgetter call
    scaled: tuple[tuple[int, float], ...] = ()  # (sample, factor): mlx5 pause durations, us -> s
    rollups: tuple[tuple[int, str], ...] = ()  # (sample, node rollup it is added to)
    pick: tuple[int, ...] = ()  # the driver's index of each of the first `singles` samples


def _selector(indices: list[int]) -> slice | tuple[int, ...]:
    if len(indices) == 1:
        return slice(indices[0], indices[0] + 1)
    step = indices[1] - indices[0]
    if step > 0 and all(b - a == step for a, b in zip(indices, indices[1:])):
        return slice(indices[0], indices[-1] + 1, step)
    return tuple(indices)


def build_plan(device: str, names: Sequence[str], include: re.Pattern | None = None,
               per_queue: bool = False) -> Plan:
    """Decide once per (device, stat list) what each scrape emits: pure, cached by the collector."""
    groups: dict[tuple[str, str], list[int]] = {}
    meta: dict[tuple[str, str], tuple[str, float, str]] = {}
    seen: set[str] = set()
    dev = f'device="{escape_label_value(device)}"'
    for i, stat in enumerate(names[:MAX_STATS]):
        if include is not None and not include.search(stat):
            continue
        c = classify(stat)
        base = metric_name(c.base)
        scale = 1.0
        if base.endswith("_pause_duration"):
            base, scale = base + "_seconds", 1e-6  # mlx5 counts microseconds
        if c.kind == "queue":
            metric = f"queue_{base}_total"
            labels = "{" + dev + (f',queue="{c.index}"' if per_queue else "") + "}"
            what = f"Driver statistic {c.base} of {'one queue' if per_queue else 'all queues summed'} (ethtool -S)."
        elif c.kind == "prio":
            metric, labels = f"prio_{base}_total", "{" + dev + f',priority="{c.index}"' + "}"
            what = f"Driver statistic {c.base} per 802.1p priority (ethtool -S {c.base.split('_')[0]}_prio<p>_...)."
        else:
            metric, labels = f"{base}_total", "{" + dev + "}"
            what = f"Driver statistic {stat} (ethtool -S)."
        if c.kind == "device" and (metric, labels) in groups or stat in seen:
            continue  # two driver names that normalise alike ("a b", "a_b"): the first wins, as in node_exporter
        seen.add(stat)
        if scale != 1.0:
            what += " Converted from microseconds to seconds."
        key = (metric, labels)
        groups.setdefault(key, []).append(i)
        meta.setdefault(key, (what, scale, _rollup(c)))
    # samples of one stat first (most of them: picked by one itemgetter call), then the sums
    keys = sorted(groups, key=lambda k: len(groups[k]) > 1)
    return Plan(tuple(names), tuple(PREFIX + m for m, _ in keys), tuple(meta[k][0] for k in keys),
                tuple(f"{PREFIX}{m}{lbl} " for m, lbl in keys), tuple(_selector(groups[k]) for k in keys),
                sum(len(groups[k]) == 1 for k in keys),
                tuple((j, meta[k][1]) for j, k in enumerate(keys) if meta[k][1] != 1.0),
                tuple((j, meta[k][2]) for j, k in enumerate(keys) if meta[k][2]),
                tuple(groups[k][0] for k in keys if len(groups[k]) == 1))


class Group:
    """Devices whose plans have one shape (the same stat list: 8 NICs of one driver) scraped as one:
    each device's single-stat samples taken by one itemgetter call, interleaved family by family by
    zip, every line rendered by one %-format of a template built here, each family a slice of the
    lines. Samples are laid out family by family (sample k of every device, then k+1), the order
    of the lines in the exposition. Per scrape this is a few C-level calls per group rather than
    a Python pass per device and per sample."""

    __slots__ = ("plans", "n", "getter", "sums", "scaled", "rollups", "pause", "template", "nics")

    def __init__(self, plans: Sequence[Plan], nics: str = ""):
        first = plans[0]
        self.nics = nics  # its devices' class in the rollups: "rdma", "other", or "" on a node without RDMA
        d, n, s = len(plans), len(first.names), first.singles
        self.plans = tuple(plans)
        self.n = n
        pick = first.pick
        self.getter = itemgetter(*pick) if s > 1 else lambda row: tuple([row[i] for i in pick])
        # sample k > singles sums its stats: one getter (a slice: queues) applied to every device's row
        self.sums = [itemgetter(sel) if type(sel) is slice else itemgetter(*sel) for sel in first.selects[s:]]
        self.scaled = tuple((k * d, (k + 1) * d, factor) for k, factor in first.scaled)
        nodes: dict[str, list[int]] = {}
        for k, node in first.rollups:
            nodes.setdefault(node, []).extend(range(k * d, (k + 1) * d))
        pfc = nodes.pop(PFC_PART, None)
        self.rollups = tuple((node, itemgetter(*pos) if len(pos) > 1 else None, pos[0]) for node, pos in nodes.items()
                             if not (pfc and node == PAUSE_ROLLUP))
        # per device: the positions of its global pause samples and of its PFC ones (samples k*d + j)
        pause = nodes.get(PAUSE_ROLLUP, [])
        self.pause = (tuple(pause[j::d] for j in range(d)), tuple(pfc[j::d] for j in range(d))) if pfc else None
        # driver stats are unsigned integers (%d), scaled ones floats (%a: their repr, as str() gives);
        # bytes formatting is the cheapest; surrogateescape brings a non-UTF-8 device name back as listed
        scaled = {k for k, _ in first.scaled}
        self.template = "\n".join([p.prefixes[k].replace("%", "%%") + ("%a" if k in scaled else "%d")
                                   for k in range(len(first.prefixes)) for p in plans]).encode("utf-8", "surrogateescape")

    @staticmethod
    def shape(plan: Plan) -> tuple:
        """Plans of equal shape differ only in their device label."""
        selects = tuple((s.start, s.stop, s.step) if type(s) is slice else s for s in plan.selects)  # hashable
        return plan.metrics, plan.helps, plan.pick, selects, plan.scaled, plan.rollups, len(plan.names)

    def values(self, rows: Sequence[Sequence[int]], totals: dict[tuple[str, str], float]) -> list:
        """The samples' values, family by family (scaled ones as floats), the rollups added to
        `totals` (by rollup and NICs' class); `rows` are the devices' values, each exactly `n` long."""
        vals: list = list(chain.from_iterable(zip(*map(self.getter, rows))))
        for getter in self.sums:
            vals += map(sum, map(getter, rows))
        for start, end, factor in self.scaled:
            vals[start:end] = [v * factor for v in vals[start:end]]
        for node, getter, pos in self.rollups:
            key = (node, self.nics)
            totals[key] = totals.get(key, 0) + (sum(getter(vals)) if getter is not None else vals[pos])
        if self.pause is not None:
            key = (PAUSE_ROLLUP, self.nics)
            totals[key] = totals.get(key, 0) + sum(max(sum(vals[i] for i in glob), sum(vals[i] for i in pfc))
                                                   for glob, pfc in zip(*self.pause))
        return vals

    def lines(self, vals: list) -> list[str]:
        # a rendered label holds no raw newline (escaped), so the split gives back one line per sample
        return (self.template % tuple(vals)).decode("utf-8", "surrogateescape").split("\n") if vals else []

    def add(self, families: dict[str, Family], rows: Sequence[Sequence[int]],
            totals: dict[tuple[str, str], float]) -> None:
        lines = self.lines(self.values(rows, totals))
        d = len(self.plans)
        first = self.plans[0]
        for k, metric in enumerate(first.metrics):
            fam = families.get(metric)
            if fam is None:
                fam = families[metric] = counter(metric, first.helps[k])
                fam.lines = lines[k * d:(k + 1) * d]
            else:  # another group's devices gave this family first
                fam.lines += lines[k * d:(k + 1) * d]


def group_plans(plans: Sequence[Plan], nics: Sequence[str] = ()) -> list[tuple[Group, list[int]]]:
    """Plans (in device order) split into Groups of one shape and NICs' class (`nics`, per plan;
    none: one class), each with the positions of its plans."""
    by_shape: dict[tuple, list[int]] = {}
    for i, plan in enumerate(plans):
        by_shape.setdefault((Group.shape(plan), nics[i] if nics else ""), []).append(i)
    return [(Group([plans[i] for i in idx], cls), idx) for (_, cls), idx in by_shape.items()]


def rdma_netdevs(sysfs_infiniband: str, sysfs_net: str) -> frozenset[str]:
    """The network interfaces that carry an RDMA device (`<ibdev>/device/net/<netdev>`: a RoCE NIC's
    Ethernet port, an InfiniBand HCA's IPoIB interface) and, for one enslaved to a bond, the bond's
    other ports (`<net>/<bond>/lower_*`: RoCE LAG, whose RDMA device sits on the first port's PCI
    function alone); empty where there is none or it cannot be read."""
    out: set[str] = set()
    try:
        with os.scandir(sysfs_infiniband) as it:
            ibdevs = [e.path for e in it]
    except OSError:
        return frozenset()
    for ib in ibdevs:
        try:
            out.update(os.listdir(os.path.join(ib, "device", "net")))
        except OSError:
            continue
    for dev in list(out):
        try:
            bond = os.path.join(sysfs_net, os.path.basename(os.readlink(os.path.join(sysfs_net, dev, "master"))))
            if os.path.isdir(os.path.join(bond, "bonding")):  # a bond's ports, not a bridge's (VMs' taps)
                out.update(e[len("lower_"):] for e in os.listdir(bond) if e.startswith("lower_"))
        except OSError:
            continue
    return frozenset(out)


def apply_plan(plan: Plan, values: Sequence[int], totals: dict[tuple[str, str], float]) -> list[str] | None:
    """One device's sample lines, in the plan's order, and its rollups added to `totals`; None when
    there are fewer values than names (the driver shrank between the two calls)."""
    if len(values) < len(plan.names):
        return None
    group = Group([plan])
    return group.lines(group.values([values[:group.n]], totals))


# ---------------------------------------------------------------------------------------------
# Readers: the ioctl, and fixture text files in its place

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16


class IoctlReader:
    """Driver stats through SIOCETHTOOL. One socket for the collector's life; buffers per call."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._names: dict[str, tuple[bytes, tuple[str, ...]]] = {}  # device -> (raw name table, names)

    def _ioctl(self, device: str, buf: array.array) -> None:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        name = device.encode()
        if not name or len(name) >= IFNAMSIZ:
            raise Unsupported(f"invalid interface name {device!r}")
        # struct ifreq: the name, then ifr_data pointing at our buffer (padded to the union's 24 bytes)
        ifreq = struct.pack(f"{IFNAMSIZ}sP", name, buf.buffer_info()[0]).ljust(40, b"\0")
        fcntl.ioctl(self._sock.fileno(), SIOCETHTOOL, ifreq)

    def count(self, device: str) -> int:
        buf = array.array("B", struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0))
        try:
            self._ioctl(device, buf)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                raise Unsupported(f"driver has no statistics ({os.strerror(exc.errno)})") from None
            raise
        _, _, mask, n = struct.unpack("=IIQI", buf.tobytes())
        if not mask & (1 << ETH_SS_STATS) or n == 0:
            raise Unsupported("driver has no statistics (0 stats)")
        if n > MAX_STATS:  # the kernel would write them all: never hand it a buffer sized below its count
            raise Unsupported(f"driver reports {n} stats, more than the {MAX_STATS} read")
        return n

    @staticmethod
    def _room(n: int) -> int:
        # Older kernels write as many entries as the driver counts at the time of the call, whatever
        # size we pass: room for a count that grew between two ioctls (channels added meanwhile).
        return 2 * n + 64

    def names(self, device: str) -> tuple[str, ...]:
        n = self.count(device)
        buf = array.array("B", struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n) + bytes(self._room(n) * ETH_GSTRING_LEN))
        self._ioctl(device, buf)
        raw = buf.tobytes()
        got = struct.unpack_from("=I", raw, 8)[0]
        if got != n:
            raise _Changed()
        table = raw[12:12 + got * ETH_GSTRING_LEN]
        last = self._names.get(device)
        if last is not None and last[0] == table:
            # the periodic re-read of an unchanged list: no decoding (~1000 names on mlx5), and the
            # same tuple, which the collector recognises as its plan's without comparing names
            return last[1]
        names = tuple([table[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode("ascii", "replace")
                       for i in range(0, len(table), ETH_GSTRING_LEN)])
        if len(self._names) > 1024:  # veth churn must not grow it forever
            self._names.clear()
        self._names[device] = (table, names)
        return names

    def values(self, device: str, names: tuple[str, ...]) -> array.array:
        # Newer kernels (6.x) answer n_stats 0 and no data when our n_stats is not the driver's count:
        # it is asked first and passed exactly; older ones ignore it (see _room).
        n = len(names)  # a driver's stat list changes only with its count (channels, features)
        live = self.count(device)
        if live != n:
            raise _Changed()
        buf = array.array("Q", bytes(8 * (self._room(live) + 1)))
        struct.pack_into("=II", buf, 0, ETHTOOL_GSTATS, live)
        self._ioctl(device, buf)
        got = struct.unpack_from("=II", buf, 0)[1]  # host order, as the kernel wrote it
        if got != n:
            raise _Changed()
        return buf[1:1 + got]

    def devices(self, sysfs_net: str) -> list[str]:
        try:
            return sorted(os.listdir(sysfs_net))
        except OSError:
            return []

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class _Changed(Exception):
    """The driver's stat count changed since the names were read: read them again."""


def _read_file(path: str, limit: int = 4 << 20) -> bytes:
    """The whole file with os.read (cheaper than a buffered file object), in 64 KiB reads."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536 and sum(map(len, chunks)) < limit:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks) if len(chunks) > 1 else chunks[0]
    finally:
        os.close(fd)


class FixtureReader:
    """`ethtool -S` text files (`DIR/<device>/statistics`) read in place of the ioctl."""

    def __init__(self, roots: str):
        self.roots = [r for r in roots.split(",") if r]  # several capture folders may be merged
        self._paths: dict[str, str] = {}  # device -> its statistics file, from the last listing
        self._stamp: list | None = None
        self._devices: list[str] = []
        # device -> (the bytes last read, their parse): a capture read again unchanged is not parsed
        # again, so a scrape costs a read per device as the ioctl does (the text parse is the
        # fixture's own cost, not the collector's); any changed byte is parsed afresh
        self._last: dict[str, tuple[bytes, tuple[tuple[str, ...], list[int]]]] = {}

    def _parse(self, device: str) -> tuple[tuple[str, ...], list[int]]:
        path = self._paths.get(device) or os.path.join(self.roots[0] if self.roots else "", device, "statistics")
        try:
            raw = _read_file(path)
        except FileNotFoundError:
            raise Unsupported("no statistics file") from None
        last = self._last.get(device)
        if last is not None and last[0] == raw:
            return last[1]
        parsed = parse_stats_text(raw.decode("utf-8", "replace"))
        self._last[device] = (raw, parsed)
        return parsed

    def names(self, device: str) -> tuple[str, ...]:
        return self._parse(device)[0]

    def values(self, device: str, names: tuple[str, ...]) -> list[int]:
        got, values = self._parse(device)
        if got != names:
            raise _Changed()
        return values

    def devices(self, _sysfs_net: str) -> list[str]:
        # listed again only when a folder's mtime moves (a device folder added or removed)
        stamp = []
        for root in self.roots:
            try:
                stamp.append(os.stat(root).st_mtime_ns)
            except OSError:
                stamp.append(None)
        if stamp == self._stamp:
            return self._devices
        where: dict[str, str] = {}
        for root in reversed(self.roots):  # the first folder wins for a device in several
            try:
                with os.scandir(root) as it:  # d_type: no stat per entry
                    where.update((e.name, root) for e in it if e.is_dir())
            except OSError:
                continue
        self._paths = {d: os.path.join(root, d, "statistics") for d, root in where.items()}
        self._stamp, self._devices = stamp, sorted(where)
        return self._devices

    def close(self) -> None:
        pass


@register
class EthtoolCollector(Collector):
    """NIC driver statistics (`ethtool -S`) through the ethtool ioctl: drops, discards, pause/PFC, errors."""

    name = "ethtool"
    default_enabled = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.filter = DeviceFilter.from_options(ctx, "ethtool")
        include = ctx.option("collector_ethtool_metrics_include", DEFAULT_METRICS_INCLUDE)
        self.include = re.compile(include) if include else None
        self.per_queue = bool(ctx.option("collector_ethtool_per_queue", False))
        root = ctx.option("collector_ethtool_fixtures")
        self.reader: IoctlReader | FixtureReader = FixtureReader(root) if root else IoctlReader()
        self._plans: dict[str, Plan | str] = {}  # device -> plan, or the reason it has no stats
        self._stale: dict[str, Plan | str] = {}  # the plans before the last periodic re-read, until checked
        self._grouped: tuple[tuple, list[Plan], list[tuple[Group, list[int]]]] | None = None
        self._scanned = 0.0
        self._rdma: frozenset[str] = frozenset()  # rdma_netdevs, read again with the stat lists

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_device_filter_arguments(parser, "ethtool")
        parser.add_argument("--collector.ethtool.metrics-include", dest="collector_ethtool_metrics_include",
                            type=regex_argument, default=DEFAULT_METRICS_INCLUDE, metavar="REGEX",
                            help="Regexp of driver stat names to export (searched in the name). Default: what "
                                 "/proc/net/dev lacks (discards, drops, pause/PFC, errors, link-down events); "
                                 "'.' exports every stat, as node_exporter does.")
        parser.add_argument("--collector.ethtool.per-queue", dest="collector_ethtool_per_queue",
                            action="store_true", help="One series per queue for per-queue stats (label queue) "
                                                      "instead of their sum per device.")
        parser.add_argument("--collector.ethtool.fixtures", dest="collector_ethtool_fixtures", default=None,
                            metavar="DIR[,DIR...]", help="Read `ethtool -S` text from DIR/<device>/statistics "
                                                "instead of the ioctl (tests, benchmarks, replaying a capture).")

    def _plan(self, device: str) -> Plan | str | None:
        """The device's plan, why it has no stats, or None when its stat list changed while read
        (not remembered: read again next scrape)."""
        try:
            names = self.reader.names(device)
            old = self._stale.pop(device, None)
            # the periodic re-read found the same list: the plan stands (a rebuild costs ~0.5 ms for
            # 168 stats, and keeping the object keeps the cached groups)
            if type(old) is Plan and (old.names is names or old.names == tuple(names)):
                return old
            return build_plan(device, names, self.include, self.per_queue)
        except _Changed:
            return None
        except Unsupported as exc:
            return str(exc)
        except OSError as exc:
            return f"cannot read statistics: {os.strerror(exc.errno) if exc.errno else exc}"

    def collect(self):
        now = time.monotonic()
        if now - self._scanned > RESCAN_SECONDS:  # every device's names read again, its plan kept if they are the same
            self._stale, self._plans = self._plans, {}
            self._scanned = now
            self._rdma = rdma_netdevs(self.ctx.paths.sys("class", "infiniband"), self.ctx.paths.sys("class", "net"))
        kept = self.filter
        devices = [(d, lbl) for d in self.reader.devices(self.ctx.paths.sys("class", "net")) if (lbl := kept(d))]
        if not devices:
            raise NoData("no network interface to read (or all filtered out)")
        families: dict[str, Family] = {}
        totals: dict[tuple[str, str], float] = {}
        supported = gauge(PREFIX + "stats_supported", "1 when the device's driver gives statistics through "
                                                      "ethtool, 0 when it has none (loopback, bonds, most "
                                                      "virtual devices).")
        plans: list[Plan] = []
        rows: list[Sequence[int]] = []
        rdma, nics = self._rdma, []
        for device, label in devices:
            plan = self._plans.get(device)
            if plan is None:
                plan = self._remember(device)
            values = None
            if type(plan) is Plan:
                values = self._values(device, plan)
                if values is None:  # the stat list changed under us: one fresh read of names and values
                    plan = self._remember(device)
                    values = self._values(device, plan)
            if values is None:
                if type(plan) is str:
                    supported.add_rendered(label, 0)
                continue  # a device that vanished or changed twice in one scrape: nothing rather than a guess
            supported.add_rendered(label, 1)
            plans.append(plan)
            rows.append(values)
            if rdma:
                nics.append("rdma" if device in rdma else "other")
        for group, idx in self._groups(plans, nics):
            group.add(families, [rows[i] for i in idx], totals)
        if len(self._plans) > 4 * len(devices) + 64:  # veth churn must not grow the cache forever
            listed = {d for d, _ in devices}
            self._plans = {d: p for d, p in self._plans.items() if d in listed}
        self._stale.clear()  # devices not listed in the re-read's scrape: gone
        node: dict[str, Family] = {}
        for (metric, cls), total in sorted(totals.items()):
            if metric not in node:
                node[metric] = counter(PREFIX + metric, NODE_HELP[metric])
            node[metric].add_rendered(f'{{nics="{cls}"}}' if cls else "", total)
        return [supported, *families.values(), *node.values()]

    def _remember(self, device: str) -> Plan | str | None:
        plan = self._plan(device)
        if plan is None:
            self._plans.pop(device, None)
        else:
            self._plans[device] = plan
        return plan

    def _values(self, device: str, plan: Plan | str | None) -> Sequence[int] | None:
        """The device's values, exactly as many as its plan's names; None when they cannot be read."""
        if type(plan) is not Plan:
            return None
        try:
            values = self.reader.values(device, plan.names)
        except (_Changed, Unsupported, OSError):
            return None
        n = len(plan.names)
        return values if len(values) == n else values[:n] if len(values) > n else None

    def _groups(self, plans: list[Plan], nics: list[str]) -> list[tuple[Group, list[int]]]:
        """group_plans(plans, nics), kept while the same plan objects come in the same order with
        the same classes (the key holds them, so their ids are not reused meanwhile)."""
        key = (tuple(map(id, plans)), tuple(nics))
        cached = self._grouped
        if cached is None or cached[0] != key:
            cached = self._grouped = (key, plans, group_plans(plans, nics))
        return cached[2]

    def unsupported(self) -> dict[str, str]:
        """Devices without stats and why (for `--log-level debug` and tests)."""
        return {d: p for d, p in self._plans.items() if isinstance(p, str)}

    def close(self) -> None:
        self.reader.close()
