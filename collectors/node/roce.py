"""RoCE congestion and transport counters from the RDMA driver's hw_counters, per port and per node.

Sources (no privileges): `<sysfs>/class/infiniband/<device>/ports/<port>/hw_counters/<name>`, one
counter per file (mlx5 names; Broadcom's bnxt_re, from Linux 6.6 until its counters took mlx5's
names, counts ECN marks, CNPs and the transport errors under its own, `rx_ecn_marked_pkts`,
`tx_cnp_pkts`, `rx_cnp_pkts`, `oos_drop_count`, `seq_err_naks_rcvd`, `to_retransmits`, and Intel's
irdma, an E810 in RoCEv2 mode, ECN marks and CNPs as `RxECNMrkd`, `cnpSent`, `cnpHandled`,
`cnpIgnored`: read into the same families; other drivers expose fewer or none). On RoCE there is
no useful `port_xmit_wait`: congestion shows as ECN-marked packets at the receiver
(`np_ecn_marked_roce_packets`), congestion notification packets it sends back (`np_cnp_sent`) and that senders act on
(`rp_cnp_handled`, `rp_cnp_ignored`); a lossy or flapping link shows as sequence errors
(`out_of_sequence`, `packet_seq_err`), retransmissions (`roce_adp_retrans`, `local_ack_timeout_err`,
`rnr_nak_retry_err`) and slow restarts.

Metrics (labels `device`, `port`): `gangwatch_roce_port_<counter>_total` for each counter in COUNTERS.
Node rollups (no labels): `gangwatch_roce_node_{ecn_marked_packets,cnp_sent,cnp_handled,
sequence_errors,retransmissions,local_ack_timeouts}_total`, sums over the ports that gave the counter
in this scrape (left out when none did), as the InfiniBand collector's node rollups, but over every
RDMA port: a DGX's storage NICs are in them (no rule or alert reads them; the NICLinkErrors runbook
points at them; the diagnosis reads the per-port series).
A port that vanishes makes a sum drop, which Prometheus reads as a counter reset.

Every other hw_counters file (`implied_nak_seq_err`, `roce_adp_retrans_to`, `out_of_buffer`,
`duplicate_request`, other drivers' and newer kernels' files) is left to the infiniband collector's
generic `gangwatch_infiniband_port_hw_stat_total{counter}`, never read twice, never an error here. Files that are empty, truncated or not a number are left out one by one. Some mlx5
counters are 32-bit and wrap: the value is exported as read, and Prometheus takes the drop for a
reset (rate() then misses at most the part before the wrap).

Failure modes: no `class/infiniband` folder, or no port with any of these counters -> NoData (quiet).
Cost: the layout (files per port, sample prefixes, a render template) is built once and rebuilt when
the device list changes (every file then opened afresh) or when the check every RESCAN_SECONDS
finds a port's hw_counters folder changed (unchanged(): one listing a port; files still in the new
layout stay open: a sysfs attribute removed meanwhile fails its read, and the file is opened again,
as on any failed read); files stay open and a scrape is one listdir plus
one map() of pread over them (infiniband.OpenFiles.read_all), one check that every file holds a
number, and one %-format of the template; only a scrape where some file does not is handled file
by file.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from ..exposition import Family, counter, format_labels
from ..registry import Collector, NoData, register
from .infiniband import OpenFiles

PREFIX = "gangwatch_roce_"
RESCAN_SECONDS = 60.0


class Spec(NamedTuple):
    metric: str
    help: str
    node: str = ""  # the node rollup this counter is summed into


# Counters that Broadcom's bnxt_re (drivers/infiniband/hw/bnxt_re/hw_counters.c from Linux 6.6; later
# kernels give it mlx5's names, np_cnp_pkts for a while) and Intel's irdma have under their own names:
# one family each, whichever driver a port has.
_ECN_MARKED = Spec("port_ecn_marked_packets_total", "RoCE packets received with the ECN congestion-experienced "
                   "mark (mlx5 np_ecn_marked_roce_packets, bnxt_re rx_ecn_marked_pkts, irdma RxECNMrkd).",
                   "node_ecn_marked_packets_total")
_CNP_SENT = Spec("port_cnp_sent_total", "Congestion notification packets sent to senders after ECN-marked packets "
                 "arrived (mlx5 np_cnp_sent, bnxt_re tx_cnp_pkts or np_cnp_pkts, irdma cnpSent).", "node_cnp_sent_total")
_CNP_HANDLED = Spec("port_cnp_handled_total", "Congestion notification packets received and acted on: this port's "
                    "sending rate was cut (mlx5 rp_cnp_handled, bnxt_re rx_cnp_pkts, irdma cnpHandled).",
                    "node_cnp_handled_total")
_OUT_OF_SEQUENCE = Spec("port_out_of_sequence_packets_total", "Packets received out of sequence, a sign of loss "
                        "on the path (mlx5 out_of_sequence, bnxt_re oos_drop_count).", "node_sequence_errors_total")
_SEQUENCE_NAKS = Spec("port_packet_sequence_errors_total", "NAKs for packet sequence errors received (mlx5 "
                      "packet_seq_err, bnxt_re seq_err_naks_rcvd).", "node_sequence_errors_total")
_ACK_TIMEOUTS = Spec("port_local_ack_timeouts_total", "Times the sender's ACK timer expired and it retransmitted "
                     "(mlx5 local_ack_timeout_err, bnxt_re to_retransmits).", "node_local_ack_timeouts_total")
_CNP_IGNORED = Spec("port_cnp_ignored_total", "Congestion notification packets received but ignored "
                    "(mlx5 rp_cnp_ignored, irdma cnpIgnored).")
COUNTERS: dict[str, Spec] = {
    "np_ecn_marked_roce_packets": _ECN_MARKED,
    "np_cnp_sent": _CNP_SENT,
    "rp_cnp_handled": _CNP_HANDLED,
    "rp_cnp_ignored": _CNP_IGNORED,
    "out_of_sequence": _OUT_OF_SEQUENCE,
    "packet_seq_err": _SEQUENCE_NAKS,
    "roce_adp_retrans": Spec("port_adaptive_retransmissions_total", "Adaptive retransmissions of RoCE traffic "
                             "(roce_adp_retrans).", "node_retransmissions_total"),
    "roce_slow_restart": Spec("port_slow_restarts_total", "Times a QP entered slow restart after repeated "
                              "retransmissions (roce_slow_restart)."),
    "roce_slow_restart_cnps": Spec("port_slow_restart_cnps_total", "CNPs that triggered slow restart "
                                   "(roce_slow_restart_cnps)."),
    "roce_slow_restart_trans": Spec("port_slow_restart_transitions_total", "Transitions out of slow restart "
                                    "(roce_slow_restart_trans)."),
    "local_ack_timeout_err": _ACK_TIMEOUTS,
    "rnr_nak_retry_err": Spec("port_rnr_nak_retry_errors_total", "Receiver-not-ready NAKs that exhausted the "
                              "retry count (rnr_nak_retry_err)."),
    "oos_drop_count": _OUT_OF_SEQUENCE,
    "seq_err_naks_rcvd": _SEQUENCE_NAKS,
    "to_retransmits": _ACK_TIMEOUTS,
    "rx_ecn_marked_pkts": _ECN_MARKED,
    "np_cnp_pkts": _CNP_SENT,  # the later name first: it wins where a port has both
    "tx_cnp_pkts": _CNP_SENT,
    "rx_cnp_pkts": _CNP_HANDLED,
    # Intel's irdma (E810 in RoCEv2 mode, drivers/infiniband/hw/irdma/verbs.c): ECN marks and CNPs under
    # its own names, per port since Linux 5.15; it has no out-of-sequence or retransmission counter
    "RxECNMrkd": _ECN_MARKED,
    "cnpSent": _CNP_SENT,
    "cnpHandled": _CNP_HANDLED,
    "cnpIgnored": _CNP_IGNORED,
}

_SUM = ("summed over the node's ports that report it in this scrape; absent when none does; a port that "
        "vanishes makes the sum drop (read as a counter reset).")
NODE_HELP = {
    "node_ecn_marked_packets_total": f"RoCE packets received with the ECN congestion mark, {_SUM}",
    "node_cnp_sent_total": f"Congestion notification packets sent, {_SUM}",
    "node_cnp_handled_total": f"Congestion notification packets acted on (sending rate cut), {_SUM}",
    "node_sequence_errors_total": f"Out-of-sequence packets plus packet sequence error NAKs, {_SUM}",
    "node_retransmissions_total": f"Adaptive retransmissions (roce_adp_retrans), {_SUM}",
    "node_local_ack_timeouts_total": f"ACK timeouts that made a sender retransmit (local_ack_timeout_err), {_SUM}",
}


# A counter is at most 20 digits and a newline: a read that fills this many bytes is not one
READ_SIZE = 64


class Layout(NamedTuple):
    """What a scrape reads and writes, built once per device set: every port's counter files in
    counter-major order, the rendered sample prefix `name{device,port} ` of each, and per counter
    its Spec and the [start, end) of its files in those lists; `template`, every sample line with
    a %s for its value, renders a scrape whose files all gave a number in one %-format."""

    paths: list[str]
    prefixes: list[str]
    spans: tuple[tuple[Spec, int, int], ...]
    template: bytes
    ports: tuple[tuple[str, frozenset[str]], ...] = ()  # each port's hw_counters folder, the known counters in it


def scan(base: str) -> Layout:
    """The Layout of the ports under `base` that have any counter this collector knows."""
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        devices = []
    by_counter: dict[str, list[tuple[str, str]]] = {}
    ports: list[tuple[str, frozenset[str]]] = []
    for device in devices:
        try:
            port_names = sorted(os.listdir(f"{base}/{device}/ports"), key=lambda p: (len(p), p))
        except OSError:
            continue
        for port in port_names:
            hw = f"{base}/{device}/ports/{port}/hw_counters"
            try:
                names = os.listdir(hw)
            except OSError:
                continue
            ports.append((hw, frozenset(COUNTERS.keys() & set(names))))
            labels = format_labels((("device", device), ("port", port)))
            present, taken = set(names), set()
            for n, spec in COUNTERS.items():
                # a port with two of a family's names (a kernel keeping an old name beside mlx5's) gives
                # one series, the first name's, never two with the same labels
                if n in present and spec not in taken:
                    taken.add(spec)
                    by_counter.setdefault(n, []).append((f"{hw}/{n}", f"{PREFIX}{spec.metric}{labels} "))
    paths: list[str] = []
    prefixes: list[str] = []
    spans = []
    for spec in dict.fromkeys(COUNTERS.values()):  # one family per metric, every driver's name in it
        files = [f for name, s in COUNTERS.items() if s is spec for f in by_counter.get(name, ())]
        if files:
            spans.append((spec, len(paths), len(paths) + len(files)))
            paths += [path for path, _ in files]
            prefixes += [prefix for _, prefix in files]
    # surrogateescape: a device name that is not UTF-8 comes back as os.listdir gave it
    template = "\n".join([p.replace("%", "%%") + "%s" for p in prefixes]).encode("utf-8", "surrogateescape")
    return Layout(paths, prefixes, tuple(spans), template, tuple(ports))


def unchanged(layout: Layout) -> bool:
    """Whether every port folder of the layout still holds exactly the counters it had: the periodic
    check, one listing a port, where scan() lists every device's ports as well (half the listings).
    Ports are fixed when a device registers; a device registered again under the same name between
    two scrapes fails the reads of its open files (sysfs answers ENODEV), which are then opened
    again by path; a port it gained is seen when the device list next changes."""
    known = COUNTERS.keys()
    for hw, names in layout.ports:
        try:
            if known & set(os.listdir(hw)) != names:
                return False
        except OSError:
            return False
    return True


def parse_values(datas: list[bytes | None]) -> tuple[list[bytes | None], bool]:
    """Each file's unsigned integer, its ASCII digits as read (None for a file that is unreadable,
    empty, `N/A (no PMA)`, negative, garbage or longer than a counter), and whether every file gave one."""
    if None not in datas:
        toks = list(map(bytes.strip, datas))
        # every file one run of ASCII digits (bytes.isdigit is ASCII only) shorter than the read:
        # checked for all files at once, the usual case, in C
        if all(toks) and b"".join(toks).isdigit() and max(map(len, datas), default=0) < READ_SIZE:
            return toks, True
    values: list[bytes | None] = []
    for data in datas:
        tok = data.strip() if data is not None and len(data) < READ_SIZE else b""
        values.append(tok if tok.isdigit() else None)
    return values, False


@register
class RoceCollector(Collector):
    """RoCE congestion (ECN, CNP) and transport error counters (sequence errors, retransmissions) per port and node."""

    name = "roce"

    def __init__(self, ctx):
        super().__init__(ctx)
        self._listed: list[str] | None = None
        self._layout = Layout([], [], (), b"")
        self._scanned = 0.0
        self._open = OpenFiles()

    def collect(self):
        base = self.ctx.paths.sys("class", "infiniband")
        now = time.monotonic()
        try:
            listed = os.listdir(base)
        except OSError:
            listed = []
        changed = self._listed != listed
        due = now - self._scanned > RESCAN_SECONDS
        if changed or (due and not unchanged(self._layout)):
            layout = scan(base)
            if changed:  # a device came or went: every file opened afresh
                self._open.close()
            elif layout != self._layout:
                self._open.retain(layout.paths)
            if layout != self._layout:  # else the old one stays: read_all's batch is keyed on its list
                self._layout = layout
            self._listed = listed
        if changed or due:
            self._scanned = now
        lay = self._layout
        if not lay.spans:
            raise NoData(f"no RDMA port with RoCE hw_counters under {base}")
        values, complete = parse_values(self._open.read_all(lay.paths, READ_SIZE))
        if complete:  # every sample rendered by one %-format (label values are escaped: no raw newline)
            lines = (lay.template % tuple(values)).decode("utf-8", "surrogateescape").split("\n")
        out: list[Family] = []
        totals: dict[str, int] = {}
        for spec, start, end in lay.spans:
            if complete:
                fam_lines, got = lines[start:end], values[start:end]
            else:  # some file gave no number: only that port's sample is left out
                pairs = [(p, v) for p, v in zip(lay.prefixes[start:end], values[start:end]) if v is not None]
                fam_lines, got = [p + v.decode() for p, v in pairs], [v for _, v in pairs]
            if fam_lines:
                fam = counter(PREFIX + spec.metric, spec.help)
                fam.lines = fam_lines
                out.append(fam)
                if spec.node:
                    totals[spec.node] = totals.get(spec.node, 0) + sum(map(int, got))
        return [*out, *(counter(PREFIX + m, NODE_HELP[m]).add_rendered("", v) for m, v in totals.items())]

    def close(self) -> None:
        self._open.close()
