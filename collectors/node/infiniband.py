"""InfiniBand (and RoCE / Omni-Path) port counters, state, rate and a degraded-link flag.

Sources (no privileges; the kernel queries the HCA's performance agent when a counter file is read):
- `<sysfs>/class/infiniband/<device>/{board_id,fw_ver,hca_type,node_guid}`
- `<sysfs>/class/infiniband/<device>/ports/<port>/{state,phys_state,rate,lid,link_layer}`
- `<sysfs>/class/infiniband/<device>/ports/<port>/counters/*`: the IBA PortCounters, data counted in
  4-byte words (multiplied by 4 here: bytes); `counters_ext/*` (mlx4's 64-bit copies, old kernels);
  `hw_counters/*` (driver-specific RDMA counters, e.g. mlx5's `out_of_buffer`, `local_ack_timeout_err`).

Metrics (labels `device`, `port`): `gangwatch_infiniband_port_{transmit,receive}_data_bytes_total`,
packets (all, unicast, multicast), `..._transmit_wait_ticks_total` (congestion), the error counters
(symbol errors, link downed, link error recoveries, receive errors, transmit discards, remote physical,
switch relay and constraint errors, local link integrity, excessive buffer overrun, VL15 dropped),
`gangwatch_infiniband_port_hw_stat_total{counter}`, `..._state_id`, `..._physical_state_id`,
`..._rate_bytes_per_second`, `gangwatch_infiniband_port_info{link_layer,width,speed,lid}`,
`gangwatch_infiniband_info{board_id,firmware_version,hca_type,node_guid}`,
`gangwatch_infiniband_pma_saturated{counter}` (only for saturated counters, value 1),
`gangwatch_infiniband_port_degraded` and `..._port_expected_rate_bytes_per_second{basis}`.

Node rollups (no labels; from the same readings as the per-port series, so they always agree; rules
and alerts read these instead of the 8-per-node port series):
`gangwatch_infiniband_node_{transmit_data_bytes,receive_data_bytes,transmit_wait_ticks,link_downed,
symbol_errors}_total`: sums over the node's rails that gave the counter in this scrape, left out when
none did. The rails are its InfiniBand ports where it has one (its Ethernet RDMA ports, a DGX's RoCE
storage NICs, hang off other switches and are left out), else every port (RoCE). A port that
vanishes (driver unload, hot unplug) makes a sum drop: Prometheus takes it for a counter reset. A
saturated 32-bit port counter stays stuck inside the sum too.
`gangwatch_infiniband_node_ports_down`: ports with link layer InfiniBand whose state is not Active
(state_id < 4), whose physical state is not Disabled (3: shut on purpose), and that this collector saw
Active since the agent started. That memory of (device, port) lives in the collector instance and is
lost on restart: a port already down when the agent starts is not counted until it has been up once
(its port_state_id still shows it); an uncabled port that never came up is never counted. Left out
when no InfiniBand port's state could be read.

Degraded links: sysfs gives only the rate a port trained at, not what both ends could do. The
reference ("expected") rate is, in this order: the operator's `--collector.infiniband.expected-rate`
(a rate for all devices, or `GLOB=RATE` rules per device name); otherwise the best rate among the
link-up ports of the same HCA model (`hca_type`, else `board_id`) and link layer on this node, when
there are at least two such ports. A port whose link is up and whose rate is below the reference is
degraded (1). With no reference (a lone HCA and no flag) the flag is left out: unknown, not healthy.
A per-model table of "best known rates" is deliberately not used: an HDR HCA on an EDR switch, or a
2X HDR100 split cable, runs below the HCA's best by design and would be flagged forever.

Failure modes: no `class/infiniband` folder or no device -> NoData (quiet). Counter files that read
`N/A (no PMA)` (iWARP, some RoCE drivers), are empty, truncated or non-numeric are left out one by one;
an unreadable device or port costs only that device or port.

Cost: the layout (devices, ports, counter files, label strings) is built once and rebuilt when the
device list changes, or every RESCAN_SECONDS; counter files stay open and are
re-read with pread (see OpenFiles), so a scrape is one listdir plus one pread per counter.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import time
from dataclasses import dataclass
from itertools import repeat
from typing import Iterable, NamedTuple

from ..exposition import Family, counter, escape_label_value, format_labels, gauge
from ..quiet import IDLE_SECONDS, QuietSeries
from ..registry import Collector, NoData, register

PREFIX = "gangwatch_infiniband_"


class CounterSpec(NamedTuple):
    metric: str
    help: str
    scale: int = 1
    width: int = 0  # IBA PortCounters width in bits; 0: 64-bit or unknown, never flagged saturated
    node: str = ""  # the per-node rollup this counter is summed into, if any


_W = "Data counters count 4-byte words; this is words x 4."
COUNTERS: dict[str, CounterSpec] = {
    "port_xmit_data": CounterSpec("port_transmit_data_bytes_total", f"Bytes transmitted on all VLs (port_xmit_data). {_W}", 4, 32, "node_transmit_data_bytes_total"),
    "port_rcv_data": CounterSpec("port_receive_data_bytes_total", f"Bytes received on all VLs (port_rcv_data). {_W}", 4, 32, "node_receive_data_bytes_total"),
    "port_xmit_packets": CounterSpec("port_transmit_packets_total", "Packets transmitted on all VLs, including errors (port_xmit_packets).", 1, 32),
    "port_rcv_packets": CounterSpec("port_receive_packets_total", "Packets received on all VLs, including errors (port_rcv_packets).", 1, 32),
    "unicast_xmit_packets": CounterSpec("port_unicast_transmit_packets_total", "Unicast packets transmitted (unicast_xmit_packets)."),
    "unicast_rcv_packets": CounterSpec("port_unicast_receive_packets_total", "Unicast packets received (unicast_rcv_packets)."),
    "multicast_xmit_packets": CounterSpec("port_multicast_transmit_packets_total", "Multicast packets transmitted (multicast_xmit_packets)."),
    "multicast_rcv_packets": CounterSpec("port_multicast_receive_packets_total", "Multicast packets received (multicast_rcv_packets)."),
    "port_xmit_wait": CounterSpec("port_transmit_wait_ticks_total", "Ticks during which the port had data to send but sent none, a congestion signal (port_xmit_wait); the tick length is hardware-specific.", 1, 32, "node_transmit_wait_ticks_total"),
    "symbol_error": CounterSpec("port_symbol_errors_total", "Minor link errors detected on one or more physical lanes (symbol_error).", 1, 16, "node_symbol_errors_total"),
    "link_downed": CounterSpec("port_link_downed_total", "Times the link failed to recover from an error and went down (link_downed).", 1, 8, "node_link_downed_total"),
    "link_error_recovery": CounterSpec("port_link_error_recoveries_total", "Times the link recovered from an error state (link_error_recovery).", 1, 8),
    "port_rcv_errors": CounterSpec("port_receive_errors_total", "Received packets containing an error (port_rcv_errors).", 1, 16),
    "port_xmit_discards": CounterSpec("port_transmit_discards_total", "Outbound packets discarded because the port was down or congested (port_xmit_discards).", 1, 16),
    "port_rcv_discards": CounterSpec("port_receive_discards_total", "Inbound packets discarded because the port was down or congested (port_rcv_discards)."),
    "port_rcv_remote_physical_errors": CounterSpec("port_receive_remote_physical_errors_total", "Received packets marked with the EBP delimiter by a remote physical error (port_rcv_remote_physical_errors).", 1, 16),
    "port_rcv_switch_relay_errors": CounterSpec("port_receive_switch_relay_errors_total", "Received packets discarded because they could not be forwarded (port_rcv_switch_relay_errors).", 1, 16),
    "port_xmit_constraint_errors": CounterSpec("port_transmit_constraint_errors_total", "Packets not transmitted because of outbound partition or raw filtering (port_xmit_constraint_errors).", 1, 8),
    "port_rcv_constraint_errors": CounterSpec("port_receive_constraint_errors_total", "Packets discarded because of inbound partition or raw filtering (port_rcv_constraint_errors).", 1, 8),
    "local_link_integrity_errors": CounterSpec("port_local_link_integrity_errors_total", "Times the local physical link error threshold was exceeded (local_link_integrity_errors).", 1, 4),
    "excessive_buffer_overrun_errors": CounterSpec("port_excessive_buffer_overrun_errors_total", "Times consecutive receive buffer overruns exceeded the threshold (excessive_buffer_overrun_errors).", 1, 4),
    "VL15_dropped": CounterSpec("port_vl15_dropped_total", "Subnet management (VL15) packets dropped for lack of buffers (VL15_dropped).", 1, 16),
}

# mlx4's counters_ext: 64-bit copies of the data and packet counters (node_exporter's "legacy" set).
COUNTERS_EXT: dict[str, CounterSpec] = {
    "port_xmit_data_64": CounterSpec("port_ext_transmit_data_bytes_total", f"Bytes transmitted, from the 64-bit counters_ext/port_xmit_data_64. {_W}", 4),
    "port_rcv_data_64": CounterSpec("port_ext_receive_data_bytes_total", f"Bytes received, from the 64-bit counters_ext/port_rcv_data_64. {_W}", 4),
    "port_xmit_packets_64": CounterSpec("port_ext_transmit_packets_total", "Packets transmitted, from the 64-bit counters_ext/port_xmit_packets_64."),
    "port_rcv_packets_64": CounterSpec("port_ext_receive_packets_total", "Packets received, from the 64-bit counters_ext/port_rcv_packets_64."),
    "port_unicast_xmit_packets": CounterSpec("port_ext_unicast_transmit_packets_total", "Unicast packets transmitted, from counters_ext."),
    "port_unicast_rcv_packets": CounterSpec("port_ext_unicast_receive_packets_total", "Unicast packets received, from counters_ext."),
    "port_multicast_xmit_packets": CounterSpec("port_ext_multicast_transmit_packets_total", "Multicast packets transmitted, from counters_ext."),
    "port_multicast_rcv_packets": CounterSpec("port_ext_multicast_receive_packets_total", "Multicast packets received, from counters_ext."),
}

_SUM = ("summed over the node's rails that report it in this scrape (its InfiniBand ports where it has one: "
        "Ethernet RDMA ports beside them, storage NICs, are left out; else every port); a port that vanishes "
        "makes the sum drop, which Prometheus reads as a counter reset. Absent when no port reports it.")
NODE_HELP: dict[str, str] = {
    "node_transmit_data_bytes_total": f"Bytes transmitted (port_xmit_data x 4), {_SUM}",
    "node_receive_data_bytes_total": f"Bytes received (port_rcv_data x 4), {_SUM}",
    "node_transmit_wait_ticks_total": f"Ticks a port had data to send but sent none (port_xmit_wait), {_SUM}",
    "node_link_downed_total": f"Times a link failed to recover from an error and went down (link_downed), {_SUM}",
    "node_symbol_errors_total": f"Minor link errors on the physical lanes (symbol_error), {_SUM}",
}
# Counters that move on any port in use (data, packets, transmit wait: the diagnosis reads their
# rates as levels). Every other counter, and every hw_counters entry, counts events that a healthy
# link does not have: left out while it stands still (--collector.infiniband.error-idle-seconds).
TRAFFIC = frozenset({"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
                     "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets", "port_xmit_wait"})
QUIET_METRICS = frozenset(spec.metric for key, spec in COUNTERS.items() if key not in TRAFFIC)
IDLE_SERIES = PREFIX + "port_idle_series"
IDLE_SERIES_HELP = ("Port error and hw_counters series left out of this scrape because they stood still for "
                    "--collector.infiniband.error-idle-seconds: a missing one of them means no change, not unknown.")
PORTS_DOWN_HELP = ("InfiniBand ports of this node that are not Active (state_id < 4), not Disabled on purpose "
                   "(physical_state_id 3), and were seen Active since the agent started; a port never seen "
                   "Active (uncabled) does not count. Absent when no InfiniBand port's state could be read.")

# hw_counters entries that are settings, not counters (mlx5's lifespan is the refresh period in ms).
HW_NOT_COUNTERS = frozenset({"lifespan"})


# ---------------------------------------------------------------------------------------------
# Pure parsers


def parse_counter(data: bytes | str | None) -> int | None:
    """A sysfs counter (b"12345\\n") -> int; "N/A (no PMA)", empty, negative or garbage -> None.

    Bytes are parsed as read, without decoding: this runs for every counter file on every scrape.
    """
    if data is None:
        return None
    data = data.strip()
    if not data.isdigit() or not data.isascii():  # isdigit alone would let "١٢" through for str
        return None
    return int(data)


class State(NamedTuple):
    id: int | None
    name: str


_STATE_NAMES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
_PHYS_NAMES = {"NOP": 0, "SLEEP": 1, "POLLING": 2, "DISABLED": 3, "PORTCONFIGURATIONTRAINING": 4,
               "LINKUP": 5, "LINKERRORRECOVERY": 6, "PHYTEST": 7}


def parse_state(text: str | None, names: dict[str, int] = _STATE_NAMES) -> State | None:
    """`4: ACTIVE` / `5: LinkUp` -> State(4, "ACTIVE"); a bare name or a bare number is accepted too."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    num, sep, name = text.partition(":")
    num, name = num.strip(), name.strip()
    if not sep:
        if num.isdigit() and num.isascii():
            return State(int(num), "")
        num, name = "", text
    if num.isdigit() and num.isascii() and len(num) < 4:
        return State(int(num), name)
    key = name.replace(" ", "").replace("_", "").upper()
    for known, ident in names.items():
        if key == known.replace("_", ""):
            return State(ident, name)
    return State(None, name) if name else None


def parse_phys_state(text: str | None) -> State | None:
    return parse_state(text, _PHYS_NAMES)


@dataclass(frozen=True)
class Rate:
    gbit_per_second: float
    width: str  # "4X", or "" when sysfs does not say
    speed: str  # "EDR", "HDR", ...; "" for plain rates such as "10 Gb/sec (4X)"

    @property
    def bytes_per_second(self) -> float:
        return self.gbit_per_second * 1e9 / 8


_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec\s*(?:\(\s*([0-9]+X)?\s*([A-Za-z0-9]*)\s*\))?\s*$")


def parse_rate(text: str | None) -> Rate | None:
    """`100 Gb/sec (4X EDR)` -> Rate(100.0, "4X", "EDR"); anything else -> None."""
    if not text:
        return None
    m = _RATE_RE.match(text.split("\n", 1)[0])
    if m is None:
        return None
    return Rate(float(m.group(1)), m.group(2) or "", m.group(3) or "")


_GBPS_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:G|Gb|Gbit|Gb/s|Gb/sec|Gbit/s|Gbps)?\s*$", re.IGNORECASE)


def parse_gbps(text: str) -> float | None:
    """An operator's rate: `200 Gb/sec`, `200Gb/s`, `200G`, `200` (Gb/s assumed), `200 Gb/sec (4X HDR)`."""
    rate = parse_rate(text)
    if rate is not None:
        return rate.gbit_per_second
    m = _GBPS_RE.match(text)
    if m is None:
        return None
    value = float(m.group(1))
    return value if value > 0 else None


class ExpectedRule(NamedTuple):
    device_glob: str  # "*" for the plain form
    gbit_per_second: float


def parse_expected_rate(text: str) -> tuple[ExpectedRule, ...]:
    """`--collector.infiniband.expected-rate`: `RATE` or `GLOB=RATE[,GLOB=RATE...]`; ValueError if malformed."""
    rules = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        glob, sep, rate = part.rpartition("=")
        if not sep:
            glob = "*"
        gbps = parse_gbps(rate)
        if gbps is None or not glob.strip():
            raise ValueError(f"cannot parse expected rate {part!r} (want e.g. '200 Gb/sec' or 'mlx5_*=400')")
        rules.append(ExpectedRule(glob.strip(), gbps))
    return tuple(rules)


def expected_for(rules: Iterable[ExpectedRule], device: str) -> float | None:
    """The first rule whose glob matches the device wins; rules are in the operator's order."""
    for rule in rules:
        if fnmatch.fnmatchcase(device, rule.device_glob):
            return rule.gbit_per_second
    return None


def saturated(value: int, width: int) -> bool:
    """IBA PortCounters stop at their maximum instead of wrapping: a counter at 2^width-1 counts no more."""
    return width > 0 and value == (1 << width) - 1


# ---------------------------------------------------------------------------------------------
# Reading sysfs


def _read(path: str) -> bytes | None:
    # os.open/os.read: about 2.5x cheaper than open() per small sysfs file.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


class OpenFiles:
    """Counter files kept open between scrapes and re-read with pread at offset 0.

    A sysfs attribute re-runs its show() on every read from offset 0, so the value is fresh; this
    costs ~1.2 us per counter against ~9 us for open+read+close (measured on this kernel's sysfs), and
    there are 20-50 counter files per port. Open files do not block a driver unload (reads then fail,
    and the device's folder is gone, which triggers a rescan). At most `limit` files are held; the
    rest are opened per read.
    """

    def __init__(self, limit: int = 256):
        self.limit = limit
        self.fds: dict[str, int] = {}
        # (the list read_all was last given, the fds of its paths in order) once all of them are open
        self._held: tuple[list[str], list[int]] | None = None

    def read(self, path: str, size: int = 4096) -> bytes | None:
        fd = self.fds.get(path)
        if fd is None:
            if len(self.fds) >= self.limit:
                return _read(path)
            try:
                fd = self.fds[path] = os.open(path, os.O_RDONLY)
            except OSError:
                return None
        try:
            return os.pread(fd, size, 0)
        except OSError:
            del self.fds[path]
            os.close(fd)
            self._held = None  # its fd number may be reused by the next open
            return None

    def read_all(self, paths: list[str], size: int = 4096) -> list[bytes | None]:
        """Each path's bytes (None where it cannot be read), in order, at most `size` each.

        Given the same list object as last time and every file open (the usual scrape), it is one
        map() of pread over their fds: with ~100 counters the Python work per file (a call, a dict
        look-up, a try) cost as much as the syscall. Any error falls back to read() file by file,
        which drops the failing file (opened again next time) and costs only it.
        """
        held = self._held
        if held is not None and held[0] is paths:
            fds = held[1]
            try:
                return list(map(os.pread, fds, repeat(size, len(fds)), repeat(0, len(fds))))
            except OSError:
                self._held = None
        out = [self.read(p, size) for p in paths]
        fds = self.fds
        if all(p in fds for p in paths):
            self._held = (paths, [fds[p] for p in paths])
        return out

    def retain(self, paths: Iterable[str]) -> None:
        """Close the files not in `paths` (a layout rebuilt with fewer files); the others stay open."""
        keep = set(paths)
        for path in [p for p in self.fds if p not in keep]:
            fd = self.fds.pop(path)
            self._held = None  # its fd number may be reused by the next open
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        fds, self.fds, self._held = self.fds, {}, None
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def _decode(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def _text(path: str) -> str | None:
    return _decode(_read(path))


def _line(path: str) -> str:
    text = _text(path)
    return text.split("\n", 1)[0].strip() if text else ""


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


SATURATED_HELP = ("1 when a port counter sits at the maximum of its IBA width (e.g. 4294967295 for 32-bit) and "
                  "no longer counts; rates computed from it read 0. Present only for saturated counters.")
HW_HELP = ("Driver-specific RDMA counters from hw_counters/, by file name (e.g. out_of_buffer, "
           "local_ack_timeout_err, np_cnp_sent).")
HW_SPEC = CounterSpec("port_hw_stat_total", HW_HELP)


@dataclass
class PortPlan:
    """What to read for one port, with every path and label string built once per layout scan."""

    device: str
    port: str
    group: tuple[str, str]  # (HCA model, link layer): ports compared with each other
    labels: str  # {device="..",port=".."}
    info_labels: str  # the port_info label string
    dir: str
    counters: list[tuple[str, CounterSpec, str]]  # (path, spec, label string with counter=file name)
    hw: list[tuple[str, str]]  # (path, label string with counter=file name)

    @property
    def link_layer(self) -> str:
        return self.group[1]

    @property
    def state_path(self) -> str:
        return f"{self.dir}/state"

    @property
    def phys_path(self) -> str:
        return f"{self.dir}/phys_state"

    @property
    def rate_path(self) -> str:
        return f"{self.dir}/rate"


@dataclass
class Layout:
    names: list[str]  # device names, sorted
    devices: list[str]  # rendered gangwatch_infiniband_info label strings
    ports: list[PortPlan]


@dataclass
class PortReading:
    plan: PortPlan
    state: State | None
    phys: State | None
    rate: Rate | None

    @property
    def active(self) -> bool:
        return self.state is not None and self.state.id is not None and self.state.id >= 4

    @property
    def link_up(self) -> bool:
        # phys_state LinkUp, or a logical state that implies the link trained (INIT/ARMED/ACTIVE):
        # procfs' mlx5 fixture reads phys_state "4: ACTIVE", so neither file alone is trusted.
        if self.phys is not None and self.phys.id == 5:
            return True
        return self.state is not None and self.state.id in (2, 3, 4, 5)


def scan_layout(base: str) -> Layout:
    """List devices, ports and counter files, and read the attributes that do not change while a
    device exists (board, firmware, model, node GUID, link layer, LID)."""
    names, devices, ports = sorted(_listdir(base)), [], []
    for device in names:
        ddir = f"{base}/{device}"
        board, fw, hca, guid = (_line(f"{ddir}/{f}") for f in ("board_id", "fw_ver", "hca_type", "node_guid"))
        devices.append(format_labels((("device", device), ("board_id", board), ("firmware_version", fw),
                                      ("hca_type", hca), ("node_guid", guid))))
        model = hca or board or device.rstrip("0123456789").rstrip("_")
        for port in sorted(_listdir(f"{ddir}/ports"), key=lambda p: (len(p), p)):
            pdir = f"{ddir}/ports/{port}"
            if not os.path.isdir(pdir):
                continue
            lbl = format_labels((("device", device), ("port", port)))
            counters = []
            for sub, table in (("counters", COUNTERS), ("counters_ext", COUNTERS_EXT)):
                for fname in sorted(_listdir(f"{pdir}/{sub}")):
                    spec = table.get(fname)
                    if spec is not None:
                        counters.append((f"{pdir}/{sub}/{fname}", spec, _with_label(lbl, "counter", fname)))
            hw = [(f"{pdir}/hw_counters/{fname}", _with_label(lbl, "counter", fname))
                  for fname in sorted(_listdir(f"{pdir}/hw_counters")) if fname not in HW_NOT_COUNTERS]
            link_layer = _line(f"{pdir}/link_layer")
            rate = parse_rate(_text(f"{pdir}/rate"))
            info = format_labels((("device", device), ("port", port), ("link_layer", link_layer),
                                  ("width", rate.width if rate else ""), ("speed", rate.speed if rate else ""),
                                  ("lid", _line(f"{pdir}/lid"))))
            ports.append(PortPlan(device, port, (model, link_layer), lbl, info, pdir, counters, hw))
    return Layout(names, devices, ports)


class _Families:
    """The families of one scrape, created on first use so absent counters cost nothing."""

    def __init__(self) -> None:
        self.by_metric: dict[str, Family] = {}

    def get(self, metric: str, help: str, kind=counter) -> Family:
        fam = self.by_metric.get(metric)
        if fam is None:
            fam = self.by_metric[metric] = kind(PREFIX + metric, help)
        return fam


def _with_label(rendered: str, key: str, value: str) -> str:
    return f'{rendered[:-1]},{key}="{escape_label_value(value)}"}}'


# The device list is checked on every scrape (one listdir) and the layout rebuilt when it changes;
# ports and counter files of a device that stays are listed again this often. A file that fails to
# read does not trigger a rescan: some drivers answer EINVAL for counters they lack, on every read.
RESCAN_SECONDS = 60.0


@register
class InfinibandCollector(Collector):
    """InfiniBand/RoCE port counters (bytes, packets, congestion, errors), state, rate and degraded links."""

    name = "infiniband"

    def __init__(self, ctx):
        super().__init__(ctx)
        raw = ctx.option("collector_infiniband_expected_rate", "")
        self.expected: tuple[ExpectedRule, ...] = parse_expected_rate(raw) if isinstance(raw, str) else tuple(raw or ())
        self._layout: Layout | None = None
        self._quiet_of: dict[str, tuple[CounterSpec, str]] = {}  # counter file -> its spec and port labels
        self._scanned = 0.0
        self._files = OpenFiles()
        # (device, port) of the InfiniBand ports seen Active since start: only those count as down
        # when they leave Active. Bounded by the ports the node ever had; kept across layout rescans.
        self._seen_active: set[tuple[str, str]] = set()
        self.quiet = QuietSeries(float(ctx.option("collector_infiniband_error_idle_seconds", IDLE_SECONDS)), ctx.cadence)

    @classmethod
    def add_arguments(cls, parser) -> None:
        def rules(text: str):
            try:
                return parse_expected_rate(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        parser.add_argument(
            "--collector.infiniband.expected-rate", dest="collector_infiniband_expected_rate", type=rules,
            default="", metavar="RATE|GLOB=RATE,...",
            help="Rate every link-up port should run at, e.g. '200 Gb/sec', or per device name "
                 "'mlx5_[0-7]=400,mlx5_8=200'. A port below it is flagged degraded. Without it, ports "
                 "are compared with the fastest link-up port of the same HCA model and link layer.")
        parser.add_argument(
            "--collector.infiniband.error-idle-seconds", dest="collector_infiniband_error_idle_seconds",
            type=float, default=IDLE_SECONDS, metavar="SECONDS",
            help="Export a port's error counters and hw_counters only while they moved in the last SECONDS "
                 "(they stand still on a healthy link, yet each is a series every query reads); back at "
                 "the value they stood at for one scrape, then their own. 0: every counter at every scrape.")

    def collect(self):
        base = self.ctx.paths.sys("class", "infiniband")
        now = time.monotonic()
        layout = self._layout
        if layout is None or now - self._scanned > RESCAN_SECONDS or sorted(_listdir(base)) != layout.names:
            self._files.close()  # files of devices that went away must not stay open
            self._layout, self._scanned = scan_layout(base), now
            # the idle window's keys are the counter files' paths (a string keeps its hash): what each renders as
            self._quiet_of = {path: (spec, plan.labels) for plan in self._layout.ports
                              for path, spec, _ in plan.counters if spec.metric in QUIET_METRICS}
            self._quiet_of.update((path, (HW_SPEC, lbl)) for plan in self._layout.ports for path, lbl in plan.hw)
        layout = self._layout
        if not layout.devices:
            self._layout = None  # look again next scrape: the driver may still be loading
            raise NoData(f"no InfiniBand devices under {base}")
        fams = _Families()
        info = gauge(PREFIX + "info", "Facts about an RDMA device (board, firmware, HCA model, node GUID); value 1.")
        for lbl in layout.devices:
            info.add_rendered(lbl, 1)
        totals: dict[str, int] = {}
        still: list[tuple[str, int]] = []
        # the rollups are the collectives' fabric: a node with an InfiniBand HCA runs them there, and
        # its Ethernet RDMA ports (a DGX's RoCE storage NICs) hang off other switches
        rails = "InfiniBand" if any(plan.link_layer == "InfiniBand" for plan in layout.ports) else None
        readings = [self._collect_port(fams, plan, totals if rails is None or plan.link_layer in (rails, "") else None, still)
                    for plan in layout.ports]
        for metric, total in totals.items():
            fams.get(metric, NODE_HELP[metric]).add_rendered("", total)
        shown, idle = self.quiet.shown(still, self.ctx.clock())  # after the sums, which count every port
        quiet_of = self._quiet_of
        for path, value in shown:
            spec, lbl = quiet_of[path]
            fams.get(spec.metric, spec.help).add_rendered(lbl, value)
        if self.quiet.idle > 0:
            fams.get("port_idle_series", IDLE_SERIES_HELP, gauge).add_rendered("", idle)
        self._degraded(fams, readings)
        self._ports_down(fams, readings)
        return [info, *fams.by_metric.values()]

    def close(self) -> None:
        self._files.close()

    def _collect_port(self, fams: _Families, plan: PortPlan, totals: dict[str, int] | None,
                      still: list[tuple[str, int]]) -> PortReading:
        """The port's series into `fams`, its counters summed into `totals` (None: not one of the
        node's rails); its error counters and hw_counters into `still` by file path, for the idle
        window to choose from."""
        lbl = plan.labels
        read = self._files.read
        for path, spec, counter_lbl in plan.counters:
            value = parse_counter(read(path))
            if value is None:
                continue
            scaled = value * spec.scale
            if spec.metric in QUIET_METRICS:
                still.append((path, scaled))
            else:
                fams.get(spec.metric, spec.help).add_rendered(lbl, scaled)
            if spec.node and totals is not None:
                totals[spec.node] = totals.get(spec.node, 0) + scaled
            if spec.width and saturated(value, spec.width):
                fams.get("pma_saturated", SATURATED_HELP, gauge).add_rendered(counter_lbl, 1)
        for path, counter_lbl in plan.hw:
            value = parse_counter(read(path))
            if value is not None:
                still.append((path, value))
        state = parse_state(_decode(read(plan.state_path)))
        phys = parse_phys_state(_decode(read(plan.phys_path)))
        rate = parse_rate(_decode(read(plan.rate_path)))
        if state is not None and state.id is not None:
            fams.get("port_state_id", "Logical state of the port (0: no change, 1: down, 2: init, 3: armed, "
                     "4: active, 5: active defer).", gauge).add_rendered(lbl, state.id)
        if phys is not None and phys.id is not None:
            fams.get("port_physical_state_id", "Physical state of the port (1: sleep, 2: polling, 3: disabled, "
                     "4: port configuration training, 5: link up, 6: link error recovery, 7: phy test).",
                     gauge).add_rendered(lbl, phys.id)
        if rate is not None:
            fams.get("port_rate_bytes_per_second", "Data rate the port's link trained at, in bytes per second "
                     "(sysfs rate in Gb/s divided by 8).", gauge).add_rendered(lbl, rate.bytes_per_second)
        fams.get("port_info", "Facts about a port (link layer, active width and speed, LID); value 1.",
                 gauge).add_rendered(plan.info_labels, 1)
        return PortReading(plan, state, phys, rate)

    def _degraded(self, fams: _Families, readings: list[PortReading]) -> None:
        best: dict[tuple[str, str], list[float]] = {}
        for r in readings:
            if r.link_up and r.rate is not None:
                best.setdefault(r.plan.group, []).append(r.rate.gbit_per_second)
        for r in readings:
            if not r.link_up or r.rate is None:
                continue
            reference = expected_for(self.expected, r.plan.device)
            basis = "flag"
            if reference is None:
                peers = best.get(r.plan.group, [])
                if len(peers) < 2:
                    continue
                reference, basis = max(peers), "peers"
            fams.get("port_expected_rate_bytes_per_second", "Rate the port is expected to run at, in bytes per "
                     "second: from --collector.infiniband.expected-rate (basis=flag) or the fastest link-up port "
                     "of the same HCA model and link layer on this node (basis=peers).", gauge).add_rendered(
                _with_label(r.plan.labels, "basis", basis), reference * 1e9 / 8)
            fams.get("port_degraded", "1 when the port's link is up at a rate below its expected rate (fewer "
                     "lanes or a lower speed than the ends support), else 0; absent when nothing says what to "
                     "expect.", gauge).add_rendered(r.plan.labels, 1 if r.rate.gbit_per_second < reference else 0)

    def _ports_down(self, fams: _Families, readings: list[PortReading]) -> None:
        known = down = 0
        seen = self._seen_active
        for r in readings:
            if r.plan.link_layer != "InfiniBand" or r.state is None or r.state.id is None:
                continue
            known += 1
            key = (r.plan.device, r.plan.port)
            if r.active:
                seen.add(key)
            elif key in seen and not (r.phys is not None and r.phys.id == 3):
                down += 1
        if known:
            fams.get("node_ports_down", PORTS_DOWN_HELP, gauge).add_rendered("", down)
