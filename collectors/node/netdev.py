"""Network interfaces: `/proc/net/dev` counters, `/sys/class/net` link facts, and TCP counters from `/proc/net/snmp`.

Sources (world-readable; no privileges):
- `<procfs>/net/dev`: per interface receive bytes, packets, errs, drop, fifo, frame, compressed,
  multicast and transmit bytes, packets, errs, drop, fifo, colls, carrier, compressed.
  node_exporter reads the same counters over netlink by default; the values are the kernel's same
  `rtnl_link_stats64`, so names match `node_network_*` with the `gangwatch_network_` prefix.
- `<sysfs>/class/net/<iface>/{speed,operstate,carrier_changes,mtu}`: `speed` is Mb/s and is exported
  as bytes/s (x 125000, like node_exporter's `node_network_speed_bytes`); it reads -1 (or fails) on
  virtual and down interfaces, which means unknown, so the series is left out. operstate and
  carrier_changes are read on every scrape; speed and mtu again only when one of those two moved,
  or after LINK_REFRESH_SECONDS (5 min): an MTU changed without a link flap shows within 5 minutes.
  operstate and carrier_changes stay open and are re-read with pread(2) (readers.AttributeFiles);
  the descriptors are bound to the `/sys/class/net` entry's inode, so a renamed, removed or
  re-created interface is opened afresh.
- `<procfs>/net/snmp`: the `Tcp:` counters, retransmitted segments above all (a lossy or congested
  Ethernet path shows here first).
Metrics (label `device`): `gangwatch_network_{receive,transmit}_<counter>_total`,
`gangwatch_network_speed_bytes`, `gangwatch_network_mtu_bytes`, `gangwatch_network_carrier_changes_total`,
`gangwatch_network_up` (operstate is "up"), `gangwatch_network_info{device,operstate}`, and
`gangwatch_network_tcp_*` (see TCP_FIELDS).
Flags: `--collector.netdev.device-include` / `--collector.netdev.device-exclude` (regexes; no default).
Failure modes: each source is optional on its own (a missing `/proc/net/dev`, as in node_exporter's
fixture tree, still leaves the sysfs and TCP series); the collector fails only when none of the
three can be read, or when `/proc/net/dev` has lines but none parsable. A short or garbled line
drops that interface's missing columns; an unreadable sysfs attribute drops that one series.
"""

from __future__ import annotations

from typing import NamedTuple

from ..exposition import counter, format_labels, gauge
import os

from ..readers import AttributeFiles, parse_number, read_first_line, read_text
from ..registry import Collector, register
from .devices import DeviceFilter, add_device_filter_arguments

RECEIVE = ("bytes", "packets", "errs", "drop", "fifo", "frame", "compressed", "multicast")
TRANSMIT = ("bytes", "packets", "errs", "drop", "fifo", "colls", "carrier", "compressed")
COUNTER_HELP = {
    ("receive", "bytes"): "Total bytes received by the interface.",
    ("receive", "packets"): "Total packets received by the interface.",
    ("receive", "errs"): "Total receive errors detected by the driver.",
    ("receive", "drop"): "Total received packets dropped before reaching the protocol stack.",
    ("receive", "fifo"): "Total receive FIFO buffer overrun errors.",
    ("receive", "frame"): "Total received frames with framing or CRC errors.",
    ("receive", "compressed"): "Total compressed packets received.",
    ("receive", "multicast"): "Total multicast packets received.",
    ("transmit", "bytes"): "Total bytes transmitted by the interface.",
    ("transmit", "packets"): "Total packets transmitted by the interface.",
    ("transmit", "errs"): "Total transmit errors detected by the driver.",
    ("transmit", "drop"): "Total packets dropped on transmit.",
    ("transmit", "fifo"): "Total transmit FIFO buffer errors.",
    ("transmit", "colls"): "Total collisions detected on transmit.",
    ("transmit", "carrier"): "Total carrier losses detected on transmit.",
    ("transmit", "compressed"): "Total compressed packets transmitted.",
}
MEGABIT_BYTES = 125000  # 1 Mb/s = 10**6 bits/s = 125000 bytes/s

_TCP = frozenset(("Tcp",))
# /proc/net/snmp Tcp field -> (metric suffix, kind, help)
TCP_FIELDS = {
    "RetransSegs": ("retransmitted_segments_total", counter, "Total TCP segments retransmitted."),
    "InSegs": ("received_segments_total", counter, "Total TCP segments received, including those in error."),
    "OutSegs": ("sent_segments_total", counter, "Total TCP segments sent, excluding retransmissions."),
    "InErrs": ("receive_errors_total", counter, "Total TCP segments received in error (bad checksums included)."),
    "InCsumErrors": ("checksum_errors_total", counter, "Total TCP segments received with a bad checksum."),
    "OutRsts": ("sent_resets_total", counter, "Total TCP segments sent with the RST flag."),
    "ActiveOpens": ("active_opens_total", counter, "Total TCP connections opened by this host (SYN-SENT)."),
    "PassiveOpens": ("passive_opens_total", counter, "Total TCP connections accepted by this host (SYN-RCVD)."),
    "AttemptFails": ("failed_connection_attempts_total", counter, "Total TCP connection attempts that failed."),
    "EstabResets": ("established_resets_total", counter,
                    "Total TCP connections reset from the ESTABLISHED or CLOSE-WAIT state."),
    "CurrEstab": ("established_connections", gauge,
                  "Number of TCP connections currently in the ESTABLISHED or CLOSE-WAIT state."),
}


# speed and mtu are re-read when operstate or carrier_changes moved, else at most this often: a
# speed change means renegotiating the link, which the carrier counter sees, and each sysfs read
# costs ~10 us (more where the driver asks the NIC's firmware for the speed).
LINK_REFRESH_SECONDS = 300.0


class _Link(NamedTuple):
    state: str | None
    carrier_changes: float | None
    read_at: float
    speed: int | None
    mtu: float | None


class NetDev(NamedTuple):
    device: str
    counters: tuple[int, ...]  # RECEIVE then TRANSMIT columns, as many as the line had


def parse_net_dev(text: str) -> list[NetDev]:
    """`/proc/net/dev` text -> one record per interface; header and garbled lines are skipped, never raises."""
    out: list[NetDev] = []
    seen: set[str] = set()
    for line in text.split("\n"):
        # Interface names cannot contain ':' (dev_valid_name), and old kernels glue the first
        # counter to it ("eth0:1234"), so split on the colon, not on whitespace.
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name or "|" in rest or name in seen:
            continue
        try:
            values = tuple(map(int, rest.split()[:16]))
        except ValueError:
            continue
        if values:
            seen.add(name)
            out.append(NetDev(name, values))
    return out


def parse_snmp(text: str, protocols: frozenset[str] | None = None) -> dict[str, dict[str, int]]:
    """`/proc/net/snmp` (header line, value line per protocol) -> {protocol: {field: value}}; never raises.

    `protocols` limits the work to those prefixes (the collector wants only "Tcp").
    """
    out: dict[str, dict[str, int]] = {}
    header: dict[str, list[str]] = {}
    for line in text.split("\n"):
        proto, sep, rest = line.partition(":")
        if not sep or (protocols is not None and proto not in protocols):
            continue
        fields = rest.split()
        names = header.pop(proto, None)
        if names is None:
            header[proto] = fields
            continue
        values = out.setdefault(proto, {})
        for key, raw in zip(names, fields):
            try:
                values.setdefault(key, int(raw))
            except ValueError:
                pass
    return out


def link_speed_bytes(text: str | None) -> int | None:
    """sysfs `speed` (Mb/s) -> bytes/s; None for unknown (missing, garbage, -1 or other negatives)."""
    value = parse_number(text)
    if value is None or value < 0 or not isinstance(value, int):
        return None
    return value * MEGABIT_BYTES


# (name, help) of the 16 counter families and of the TCP ones, formatted once, not per scrape.
_COLUMNS = tuple((f"gangwatch_network_{direction}_{col}_total", COUNTER_HELP[direction, col])
                 for direction, cols in (("receive", RECEIVE), ("transmit", TRANSMIT)) for col in cols)
_TCP_SERIES = tuple((key, kind, f"gangwatch_network_tcp_{suffix}", f"{help[:-1]} (from /proc/net/snmp Tcp {key}).")
                    for key, (suffix, kind, help) in TCP_FIELDS.items())


def tcp_lines(snmp: str) -> str:
    """The two `Tcp:` lines (names, values) of /proc/net/snmp, or the whole text when they are not
    found together: parse_snmp then needs to look at far fewer lines."""
    start = snmp.find("\nTcp:") + 1
    if start and snmp.startswith("Tcp:", start):
        end = snmp.find("\n", snmp.find("\n", start) + 1)
        return snmp[start:] if end < 0 else snmp[start:end]
    return snmp


def _list_class_net(path: str) -> list[tuple[str, int]]:
    """(name, directory-entry inode) per interface in /sys/class/net, sorted; [] when unreadable."""
    try:
        with os.scandir(path) as it:
            return sorted((e.name, e.inode()) for e in it)
    except OSError:
        return []


@register
class NetdevCollector(Collector):
    """Per-interface traffic and error counters, link speed/state/MTU from sysfs, and TCP retransmits."""

    name = "netdev"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.keep = DeviceFilter.from_options(ctx, "netdev")
        self._links: dict[str, _Link] = {}
        self._files = AttributeFiles()
        self._info_labels: dict[tuple[str, str], str] = {}

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_device_filter_arguments(parser, "netdev")

    def collect(self):
        paths = self.ctx.paths
        fams = []
        sources = 0
        text = read_text(paths.proc("net", "dev"))
        devices: list[tuple[str, str]] = []  # (name, rendered labels), in kernel order
        known: set[str] = set()
        if text is not None:
            sources += 1
            records = parse_net_dev(text)
            if not records and text.strip():
                raise ValueError(f"no parsable interface lines in {paths.proc('net', 'dev')}")
            columns = [counter(name, help) for name, help in _COLUMNS]
            fams += columns
            for rec in records:
                lbl = self.keep(rec.device)
                if lbl is None:
                    continue
                devices.append((rec.device, lbl))
                known.add(rec.device)
                for fam, value in zip(columns, rec.counters):
                    fam.lines.append(f"{fam.name}{lbl} {value}")  # ints: add_rendered's output, inlined
        class_net = paths.sys("class", "net")
        listed = _list_class_net(class_net)
        if listed:
            sources += 1
        inodes = dict(listed)
        for name, _ in listed:
            if name not in known:
                lbl = self.keep(name)
                if lbl is not None:
                    devices.append((name, lbl))
        fams += self._link_families(class_net, devices, inodes)
        snmp = read_text(paths.proc("net", "snmp"))
        if snmp is not None:
            sources += 1
            fams += self._tcp_families(parse_snmp(tcp_lines(snmp), _TCP).get("Tcp", {}))
        if not sources:
            raise OSError(f"none of {paths.proc('net', 'dev')}, {class_net}, {paths.proc('net', 'snmp')} is readable")
        return fams

    def _link_families(self, class_net: str, devices: list[tuple[str, str]], inodes: dict[str, int]):
        speed = gauge("gangwatch_network_speed_bytes",
                      "Link speed in bytes per second as the driver reports it (sysfs speed in Mb/s x 125000); "
                      "absent when unknown.")
        mtu = gauge("gangwatch_network_mtu_bytes", "Maximum transmission unit of the interface, in bytes.")
        changes = counter("gangwatch_network_carrier_changes_total",
                          "Total number of times the interface's carrier (link) went up or down.")
        up = gauge("gangwatch_network_up", "Whether the interface's operational state is up (1) or not (0).")
        info = gauge("gangwatch_network_info", "Interface facts as labels (operational state from sysfs); value 1.")
        now = self.ctx.clock()
        links: dict[str, _Link] = {}
        files = self._files
        for name, lbl in devices:
            base = f"{class_net}/{name}/"
            ino = inodes.get(name)
            if ino is None:  # in /proc/net/dev but not (or no longer) in sysfs: nothing to keep open
                state = read_first_line(base + "operstate")
                flips = parse_number(read_first_line(base + "carrier_changes"))
            else:
                state = files.read_first_line(base[:-1], ino, "operstate")
                flips = parse_number(files.read_first_line(base[:-1], ino, "carrier_changes"))
            old = self._links.get(name)
            if old is not None and old.state == state and old.carrier_changes == flips \
                    and 0 <= now - old.read_at < LINK_REFRESH_SECONDS:
                link = old
            else:
                link = _Link(state, flips, now, link_speed_bytes(read_first_line(base + "speed")),
                             parse_number(read_first_line(base + "mtu")))
            links[name] = link
            if state is not None:
                up.add_rendered(lbl, 1 if state == "up" else 0)
                info_lbl = self._info_labels.get((name, state))
                if info_lbl is None:
                    if len(self._info_labels) > 4096:
                        self._info_labels.clear()
                    info_lbl = self._info_labels[name, state] = format_labels((("device", name), ("operstate", state)))
                info.add_rendered(info_lbl, 1)
            if flips is not None:
                changes.add_rendered(lbl, flips)
            if link.speed is not None:
                speed.add_rendered(lbl, link.speed)
            if link.mtu is not None:
                mtu.add_rendered(lbl, link.mtu)
        self._links = links  # interfaces gone since the last scrape are forgotten
        files.retain({f"{class_net}/{name}" for name in inodes})
        return [speed, mtu, changes, up, info]

    @staticmethod
    def _tcp_families(tcp: dict[str, int]):
        fams = []
        for key, kind, name, help in _TCP_SERIES:
            value = tcp.get(key)
            if value is not None:
                fams.append(kind(name, help).add_rendered("", value))
        return fams

    def close(self) -> None:
        self._files.close()
