"""RoCE storage NICs beside the InfiniBand rails, as a DGX H100/B200 has them.

A DGX's eight compute rails are InfiniBand HCAs; its two or four storage and in-band ports are
ConnectX NICs in Ethernet mode with RDMA (RoCE: GPUDirect Storage, NFS over RDMA, object stores).
Both are RDMA devices, so every tool that reads `/sys/class/infiniband` reads both: the agent's
infiniband collector (PortCounters, a trained rate of their own, `link_layer` Ethernet), its roce
collector (the storage ports' ECN marks and CNPs, which move with the storage network's own
congestion), its ethtool rollup of the NICs that carry RDMA (their PFC pauses), and node_exporter's
infiniband and ethtool collectors (no link layer there). None of it is the compute fabric: the
diagnosis must judge the gangs on the InfiniBand rails and leave the storage network's congestion,
pauses and slower ports out.

Half the InfiniBand clusters get two such ports a node (`mlx5_<P>`, `mlx5_<P+1>`, 200 GbE):
- traffic: the node's filesystem I/O where it does not go over the InfiniBand HCAs (LNet o2ib), else
  a front-end trickle; their transmit wait stands still (Ethernet has no credits);
- the storage network's congestion: ECN marks and CNPs in bursts of 1-10 minutes on a third of
  the nodes, a trickle elsewhere; PFC pauses where the marks are (per priority; global pause counts
  them too on half the clusters);
- no link drops and no errors (no fault of the catalogue is on the storage network).

Drawn from a generator of the build's own (render._storage_view), after everything else: a seed's
other draws, and its RoCE build, are unchanged by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Cluster
from .roce import MTU_BYTES, PAUSE_QUANTA_BITS

PORTS = 2
RATE_BYTES = 200e9 / 8  # 200 GbE
SPEED = "HDR"  # what sysfs' rate says of a 200 Gb/s Ethernet port: "200 Gb/sec (4X HDR)"


@dataclass(frozen=True)
class StorageNics:
    """Per storage port and step (node, port, step), rates per second."""

    devices: tuple[str, ...]
    netdevs: tuple[str, ...]
    tx: np.ndarray
    rx: np.ndarray
    ecn: np.ndarray
    cnp_handled: np.ndarray
    pause_rx: np.ndarray
    wait_start: np.ndarray  # (node, port): the still transmit wait's value
    global_pause_counts_pfc: bool


def view(c: Cluster, rng: np.random.Generator) -> StorageNics | None:
    """The storage NICs of an InfiniBand cluster, on half of them; None on the others and on RoCE."""
    if c.fabric != "ib" or rng.random() >= 0.5:
        return None
    shape = (c.N, PORTS, c.T)
    io = np.zeros((c.N, c.T)) if c.lnet_ib else (c.fs_read.sum(axis=1) + c.fs_write.sum(axis=1))
    front = rng.uniform(1e5, 5e7, size=shape)  # in-band management, container pulls, checkpoints to object stores
    rx = io[:, None, :] / PORTS * rng.uniform(0.9, 1.1, size=shape) + front
    tx = front * rng.uniform(0.5, 2.0, size=shape) + 0.05 * rx
    line_pps = RATE_BYTES / MTU_BYTES
    busy = np.full(shape, rng.uniform(1e-5, 1e-4))  # healthy: a trickle of marks
    for n in np.flatnonzero(rng.random(c.N) < 1 / 3):
        for _ in range(int(rng.integers(1, 4))):
            start, length = int(rng.integers(0, c.T)), int(rng.integers(60, 600) // c.interval) + 1
            busy[n, :, start:start + length] = rng.uniform(0.05, 0.5)  # a queue standing at the storage switch
    burst = np.exp(rng.normal(0.0, 0.3, size=shape))
    ecn = busy * line_pps * rng.uniform(0.02, 0.1) * burst
    full_pause = 2.0 * RATE_BYTES * 8 / PAUSE_QUANTA_BITS
    pause_rx = np.where(busy > 1e-3, busy * rng.uniform(0.02, 0.2) * full_pause, 0.0) * burst
    return StorageNics(devices=tuple(f"mlx5_{c.P + k}" for k in range(PORTS)),
                       netdevs=tuple(f"enp{0x41 + k:x}s0f0np0" for k in range(PORTS)),
                       tx=tx, rx=rx, ecn=ecn, cnp_handled=ecn * rng.uniform(0.1, 0.5),
                       pause_rx=pause_rx, wait_start=rng.integers(10**5, 10**9, size=(c.N, PORTS)).astype(float),
                       global_pause_counts_pfc=bool(rng.random() < 0.5))
