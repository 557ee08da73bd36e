"""RoCE congestion and transport counters from the RDMA driver's hw_counters, per port and per node.

Sources (no privileges): `<sysfs>/class/infiniband/<device>/ports/<port>/hw_counters/<name>`, one
counter per file (mlx5 names; other drivers expose fewer or none). On RoCE there is no useful
`port_xmit_wait`: congestion shows as ECN-marked packets at the receiver (`np_ecn_marked_roce_packets`),
congestion notification packets it sends back (`np_cnp_sent`) and that senders act on
(`rp_cnp_handled`, `rp_cnp_ignored`); a lossy or flapping link shows as sequence errors
(`out_of_sequence`, `packet_seq_err`), retransmissions (`roce_adp_retrans`, `local_ack_timeout_err`,
`rnr_nak_retry_err`) and slow restarts.

Metrics (labels `device`, `port`): `gangwatch_roce_port_<counter>_total` for each counter in COUNTERS.
Node rollups (no labels): `gangwatch_roce_node_{ecn_marked_packets,cnp_sent,cnp_handled,
sequence_errors,retransmissions,local_ack_timeouts}_total`, sums over the ports that gave the counter
in this scrape (left out when none did), as the InfiniBand collector's node rollups; rules, alerts
and the diagnosis read these. A port that vanishes makes a sum drop, which Prometheus reads as a
counter reset.

Every other hw_counters file (`implied_nak_seq_err`, `roce_adp_retrans_to`, `out_of_buffer`,
`duplicate_request`, other drivers' and newer kernels' files) is left to the infiniband collector's
generic `gangwatch_infiniband_port_hw_stat_total{counter}`, never read twice, never an error here. Files that are empty, truncated or not a number are left out one by one. Some mlx5
counters are 32-bit and wrap: the value is exported as read, and Prometheus takes the drop for a
reset (rate() then misses at most the part before the wrap).

Failure modes: no `class/infiniband` folder, or no port with any of these counters -> NoData (quiet).
Cost: the layout (files per port, label strings) is built once and rebuilt when the device list
changes or every RESCAN_SECONDS; files stay open and are re-read with pread (infiniband.OpenFiles).
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


COUNTERS: dict[str, Spec] = {
    "np_ecn_marked_roce_packets": Spec("port_ecn_marked_packets_total", "RoCE packets received with the ECN "
                                       "congestion-experienced mark (np_ecn_marked_roce_packets).", "node_ecn_marked_packets_total"),
    "np_cnp_sent": Spec("port_cnp_sent_total", "Congestion notification packets sent to senders after ECN-marked "
                        "packets arrived (np_cnp_sent).", "node_cnp_sent_total"),
    "rp_cnp_handled": Spec("port_cnp_handled_total", "Congestion notification packets received and acted on: this "
                           "port's sending rate was cut (rp_cnp_handled).", "node_cnp_handled_total"),
    "rp_cnp_ignored": Spec("port_cnp_ignored_total", "Congestion notification packets received but ignored "
                           "(rp_cnp_ignored)."),
    "out_of_sequence": Spec("port_out_of_sequence_packets_total", "Packets received out of sequence, a sign of "
                            "loss on the path (out_of_sequence).", "node_sequence_errors_total"),
    "packet_seq_err": Spec("port_packet_sequence_errors_total", "NAKs for packet sequence errors received "
                           "(packet_seq_err).", "node_sequence_errors_total"),
    "roce_adp_retrans": Spec("port_adaptive_retransmissions_total", "Adaptive retransmissions of RoCE traffic "
                             "(roce_adp_retrans).", "node_retransmissions_total"),
    "roce_slow_restart": Spec("port_slow_restarts_total", "Times a QP entered slow restart after repeated "
                              "retransmissions (roce_slow_restart)."),
    "roce_slow_restart_cnps": Spec("port_slow_restart_cnps_total", "CNPs that triggered slow restart "
                                   "(roce_slow_restart_cnps)."),
    "roce_slow_restart_trans": Spec("port_slow_restart_transitions_total", "Transitions out of slow restart "
                                    "(roce_slow_restart_trans)."),
    "local_ack_timeout_err": Spec("port_local_ack_timeouts_total", "Times the sender's ACK timer expired and it "
                                  "retransmitted (local_ack_timeout_err).", "node_local_ack_timeouts_total"),
    "rnr_nak_retry_err": Spec("port_rnr_nak_retry_errors_total", "Receiver-not-ready NAKs that exhausted the "
                              "retry count (rnr_nak_retry_err)."),
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


def scan(base: str) -> tuple[list[str], dict[str, list[tuple[str, str]]]]:
    """Devices under `base`, and per counter this collector knows, the (file path, sample prefix
    `name{device,port} `) of every port that has it: a scrape then goes counter by counter."""
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return [], {}
    by_counter: dict[str, list[tuple[str, str]]] = {}
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
            labels = format_labels((("device", device), ("port", port)))
            for n in names:
                spec = COUNTERS.get(n)
                if spec is not None:
                    by_counter.setdefault(n, []).append((f"{hw}/{n}", f"{PREFIX}{spec.metric}{labels} "))
    return devices, {n: by_counter[n] for n in COUNTERS if n in by_counter}


@register
class RoceCollector(Collector):
    """RoCE congestion (ECN, CNP) and transport error counters (sequence errors, retransmissions) per port and node."""

    name = "roce"

    def __init__(self, ctx):
        super().__init__(ctx)
        self._devices: list[str] | None = None
        self._files: dict[str, list[tuple[str, str]]] = {}
        self._scanned = 0.0
        self._open = OpenFiles()

    def collect(self):
        base = self.ctx.paths.sys("class", "infiniband")
        now = time.monotonic()
        try:
            listed = sorted(os.listdir(base))
        except OSError:
            listed = []
        if self._devices != listed or now - self._scanned > RESCAN_SECONDS:
            self._open.close()
            self._devices, self._files = scan(base)
            self._scanned = now
        if not self._files:
            raise NoData(f"no RDMA port with RoCE hw_counters under {base}")
        read = self._open.read
        out: list[Family] = []
        totals: dict[str, int] = {}
        for name, files in self._files.items():
            spec = COUNTERS[name]
            lines, total = [], 0
            for path, prefix in files:
                data = read(path)
                # parse_counter inlined: this runs for every port's every counter on every scrape
                if data is None:
                    continue
                data = data.strip()
                if not data.isdigit():  # "N/A (no PMA)", empty, negative, garbage: left out
                    continue
                value = int(data)
                lines.append(prefix + str(value))
                total += value
            if lines:
                fam = counter(PREFIX + spec.metric, spec.help)
                fam.lines = lines
                out.append(fam)
                if spec.node:
                    totals[spec.node] = totals.get(spec.node, 0) + total
        return [*out, *(counter(PREFIX + m, NODE_HELP[m]).add_rendered("", v) for m, v in totals.items())]

    def close(self) -> None:
        self._open.close()
