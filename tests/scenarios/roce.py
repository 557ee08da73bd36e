"""The cluster on a RoCE fabric: what its NICs count of the state painted into a `Cluster`.

The painters (behaviours.py, catalogue.py) describe a port by the share of time it had data and
could not send (`ib_wait`, in InfiniBand's PortXmitWait ticks), its link-down events and its
traffic. A RoCE NIC keeps no transmit-wait worth reading; the same physics shows as
(citations `roce-dcqcn`, `roce-pfc`, `mlx5-counters`):
- ECN: switch queues past their marking threshold mark a share of the packets through them; the
  receiving NIC counts them (`np_ecn_marked_roce_packets`) and answers with congestion notification
  packets (`np_cnp_sent`), which the sender acts on (`rp_cnp_handled`) by cutting its rate;
- PFC: where ECN's rate cut is not enough the switch pauses the sender's port outright; the NIC
  counts the pause frames it receives per priority (`rx_prio3_pause`), one every half pause quanta
  while a port is held, and in its global pause counter (`rx_pause_ctrl_phy`) on half the clusters
  (it is IEEE 802.3's PAUSE counter, which mlx5 documents as counting only under global pause);
- a link that goes down counts a PHY link-down (`link_down_events_phy`) and every queue pair with
  packets in flight times out (`local_ack_timeout_err`) and retransmits (`roce_adp_retrans`); its
  peers see the gap as packets out of sequence (`out_of_sequence`, NAKs: `packet_seq_err`); between
  the drops, a failing link's symbol errors that FEC cannot correct lose frames, retransmitted too
  (the PHY's symbol errors are ethtool's `rx_symbol_err_phy`, not the RDMA port's counter);
- a NIC whose host stops draining it sends pause frames without end (`tx_pause_ctrl_phy`) until its
  storm guard fires (`tx_pause_storm_warning_events`, `..._error_events`: pausing stops for a while);
- each node's onboard management NIC (no RDMA) sees pause bursts and the odd link-down of its own,
  which pace no collective;
- the RDMA port's PortCounters are there on RoCE too (`counters/`, which node_exporter's infiniband
  collector and the agent read), `port_xmit_wait` among them: it stands still on half the clusters
  and counts the ticks PFC held the port on the others (firmware dependent; no InfiniBand credit
  wait behind it either way).

Kept as a view, derived at render time, so an InfiniBand build of a seed is unchanged by it. Its
draws come from a generator of the build's own (render._roce_view): both schemas of a seed show the
same NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Cluster

MTU_BYTES = 4096  # RoCE's usual path MTU on GPU fabrics
PAUSE_QUANTA_BITS = 65535 * 512  # the longest hold one pause frame asks for
PRIORITY = 3  # the lossless (RoCE) traffic class most sites give PFC


@dataclass(frozen=True)
class RoceView:
    """Per port and step (node, port, step): rates per second, events per step."""

    ecn: np.ndarray  # ECN-marked packets received
    cnp_sent: np.ndarray  # CNPs this NIC sent back for them
    cnp_handled: np.ndarray  # CNPs received and acted on (this port's rate cut)
    pause_rx: np.ndarray  # pause frames received
    pause_tx: np.ndarray  # pause frames sent
    ack_timeouts: np.ndarray  # events per step
    retrans: np.ndarray
    out_of_seq: np.ndarray
    seq_naks: np.ndarray
    link_down: np.ndarray  # PHY link-down events per step
    storm_warn: np.ndarray
    storm_err: np.ndarray
    counts_link_downed: bool  # whether the RDMA port's PortCounters link_downed counts too (firmware dependent)
    # whether the NIC's global pause counter (`rx_pause_ctrl_phy`, IEEE 802.3's PAUSE frames) counts
    # the PFC frames too: mlx5's documentation says it counts only while global pause is on, and
    # sites running PFC report it both ways; the per-priority counter (`rx_prio3_pause`) always does
    global_pause_counts_pfc: bool
    # the management NIC (onboard Ethernet, no RDMA), per node and step: pause frames its switch sent
    # (a busy NFS or image pull; global pause, which management switches negotiate) and its link-down
    # events; it paces no collective, so none of it is a fault
    mgmt_pause: np.ndarray
    mgmt_down: np.ndarray
    # the RDMA port's PortCounters port_xmit_wait as read (a counter, node x port x step): still, or
    # the ticks PFC held the port
    xmit_wait: np.ndarray


def full_pause_rate(c: Cluster) -> float:
    """Pause frames a second that hold a port paused the whole time: one every half quanta."""
    return 2.0 * c.link_bytes * 8 / PAUSE_QUANTA_BITS


def view(c: Cluster, rng: np.random.Generator) -> RoceView:
    blocked = np.clip(c.ib_wait / c.wait_ticks_per_s, 0.0, 1.0)
    line_pps = c.link_bytes / MTU_BYTES
    mark = rng.uniform(0.02, 0.1)  # of the packets through a standing queue, the share marked
    # a paused port's traffic queues behind it, so marks grow with the pause as well
    ecn = np.minimum(blocked + 0.5 * c.paused, 1.0) * line_pps * mark * _burst(c, rng)
    cnp_sent = ecn * rng.uniform(0.2, 0.6)  # CNPs are coalesced per queue pair
    cnp_handled = cnp_sent * rng.uniform(0.8, 1.2)  # the peers' CNPs: on average as many come back
    pfc_share = rng.uniform(0.02, 0.2)  # of the time a port waits, the share PFC holds it (ECN slows the rest)
    pause_rx = np.minimum(blocked * pfc_share + c.paused, 1.0) * full_pause_rate(c) * _burst(c, rng)
    flaps = c.ib_down.astype(float)
    shape = flaps.shape
    ack = rng.integers(10, 300, size=shape) * flaps + rng.poisson(0.002, size=shape)
    retrans = ack * rng.uniform(0.5, 2.0, size=shape)
    oos = rng.integers(5, 80, size=shape) * flaps + rng.poisson(0.002, size=shape)
    for job in c.jobs:  # the gang's peers see the gap in what the flapping port sent them
        per_step = flaps[job.nodes].sum(axis=(0, 1))
        if len(job.nodes) > 1 and per_step.any():
            for n in job.nodes:
                oos[n] += rng.poisson(np.broadcast_to(per_step * 3.0, (c.P, c.T)))
    # a failing cable's symbol errors between its drops: the ones FEC cannot correct drop the frame,
    # which its receiver sees out of sequence and its sender retransmits
    lost = c.ib_symerr * rng.uniform(0.2, 1.0)
    oos += np.floor(lost * rng.uniform(0.5, 1.0))
    retrans += lost
    storm_err = rng.binomial(c.storm, 0.5)
    return RoceView(ecn=ecn, cnp_sent=cnp_sent, cnp_handled=cnp_handled, pause_rx=pause_rx,
                    pause_tx=c.pause_tx + pause_rx * rng.uniform(0.0, 0.2),
                    ack_timeouts=ack, retrans=np.floor(retrans), out_of_seq=oos, seq_naks=np.floor(oos * 0.5),
                    link_down=c.ib_down, storm_warn=c.storm, storm_err=storm_err,
                    counts_link_downed=bool(rng.random() < 0.5), global_pause_counts_pfc=bool(rng.random() < 0.5),
                    **_management_nic(c, rng), xmit_wait=_xmit_wait(c, pause_rx, rng))


def _xmit_wait(c: Cluster, pause_rx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """port_xmit_wait of RoCE ports, as a counter: still on half the clusters, else the ticks the
    pause frames received in each step held the port (whole frames, as the pause counters count
    them: no wait without a frame; drawn last: the other draws are as before it)."""
    counts = rng.random() < 0.5
    start = rng.integers(10**5, 10**9, size=pause_rx.shape[:2]).astype(float)[..., None]
    frames = np.floor(np.maximum(pause_rx, 0) * c.interval)
    held = np.clip(frames / (full_pause_rate(c) * c.interval), 0.0, 1.0) * c.wait_ticks_per_s * c.interval
    return start + np.cumsum(np.floor(held) if counts else np.zeros(pause_rx.shape), axis=-1)


def _management_nic(c: Cluster, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A fifth of the nodes see bursts of pause frames on the management network (1-10 min each, up to
    a third of a fabric port's full pause rate); one or two nodes' management links go down 1-3 times."""
    pause = np.zeros((c.N, c.T))
    for n in np.flatnonzero(rng.random(c.N) < 0.2):
        for _ in range(int(rng.integers(1, 4))):
            start, length = int(rng.integers(0, c.T)), int(rng.integers(60, 600) // c.interval) + 1
            pause[n, start:start + length] = full_pause_rate(c) * rng.uniform(0.05, 0.33)
    down = np.zeros((c.N, c.T))
    for n in rng.choice(c.N, size=min(c.N, int(rng.integers(1, 3))), replace=False):
        for t in rng.integers(0, c.T, size=int(rng.integers(1, 4))):
            down[n, t] += 1
    return {"mgmt_pause": pause, "mgmt_down": down}


def _burst(c: Cluster, rng: np.random.Generator) -> np.ndarray:
    """Marks and pauses come in bursts: lognormal spread around the level, per port and step."""
    return np.exp(rng.normal(0.0, 0.25 + 2 * c.noise, size=c.ib_wait.shape))


def netdev(p: int) -> str:
    """The Ethernet interface of the RDMA device mlx5_<p> (udev's predictable names)."""
    return f"ens{p + 1}f0np0"
