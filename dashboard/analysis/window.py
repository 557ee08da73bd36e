"""The metric window the diagnosis reads: dense numpy arrays on one time grid, NaN for unknown.

A `Window` holds the last stretch of telemetry (typically one hour at 15 s) for every node the
metric source knows, already turned into rates and aligned to a common step:

* per node x GPU x step (`gpu[signal]`, shape (N, G, T)): `util` (0-1), `sm` (SM active 0-1, from
  DCGM profiling where available), `power` (W), `mem` (bytes used), `clock` (SM clock, Hz);
* per node x rail x step (`rail[signal]`, (N, R, T)): `ib_tx` (bytes/s), `ib_wait`
  (port_xmit_wait ticks/s), `ib_down` (link_downed events per step), `ib_err` (symbol errors per
  step), `ib_rate` (the rate the link trained at, bytes/s); on RoCE `roce_cong` (ECN-marked packets
  plus CNPs acted on, per second) and `roce_err` (sequence errors, NAKs, ACK timeouts and
  adaptive retransmissions per step);
* per node x step (`node[signal]`, (N, T)): `fs_read`, `fs_write` (filesystem client bytes/s, all
  targets), `psi_io` (fraction of time some task waited on I/O), `iowait` (CPU iowait fraction),
  `eth_pause` (PFC/pause frames received by the node's NICs per second), `eth_down` (physical
  link-down events of the node's NICs per step, ethtool), `eth_err` (frames the NICs' PHYs received
  with errors FEC could not correct, per step: symbol and CRC errors, ethtool), `eth_storm` (times
  per step the NICs' PFC storm guard fired: the node kept sending pause frames, ethtool),
  `ib_down_node`, `ib_err_node` (the agent's node rollups of `ib_down` and `ib_err`: every port's
  count summed at every scrape, where the per-port series are left out while still);
* per node x filesystem target x step (`target[signal]`, (N, F, T)): `read` (bytes/s) and
  `latency` (seconds per read RPC);
* per job x step (`job[signal][jobid]`, (T,), mean over the job's nodes): `psi_io` from the job's
  own cgroup (gangwatch agent), which separates a job's I/O stall from a neighbour's.

Unknown is NaN, never 0: a node without InfiniBand has no rails, a series missing at a step is NaN
there, and a signal no node has is absent from its dict. Facts that do not vary (GPU -> job from
labels, leaf switch per node, NVLink peers, NUMA node per GPU) sit beside the arrays.
Pure data: no I/O. Sources (dashboard/sources/) build windows; the diagnosis reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GPU_SIGNALS = ("util", "sm", "power", "mem", "clock")
# the link layer an RDMA port of each fabric reports (sysfs `link_layer`, the agent's port_info)
LINK_LAYER = {"ib": "InfiniBand", "roce": "Ethernet"}
RAIL_SIGNALS = ("ib_tx", "ib_wait", "ib_down", "ib_err", "ib_rate", "roce_cong", "roce_err")
NODE_SIGNALS = ("fs_read", "fs_write", "psi_io", "iowait", "eth_pause", "eth_down", "eth_err", "eth_storm",
                "ib_down_node", "ib_err_node")
TARGET_SIGNALS = ("read", "latency")


@dataclass(frozen=True)
class Window:
    """One time grid's signals for every node. Its arrays are shared (the Prometheus source moves
    the next window's columns from them, and they may be read-only): derive, never write in place."""

    times: np.ndarray  # (T,) unix seconds, ascending, evenly spaced by `step`
    step: float
    nodes: tuple[str, ...]  # N node names, as Slurm spells them
    gpus: tuple[tuple[int, ...], ...] = ()  # per node: GPU index of each of the G columns (-1 = padding)
    rails: tuple[tuple[str, ...], ...] = ()  # per node: "device/port" of each of the R columns ("" = padding)
    targets: tuple[str, ...] = ()  # F filesystem targets, e.g. "lustre-OST0003"
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    rail: dict[str, np.ndarray] = field(default_factory=dict)
    node: dict[str, np.ndarray] = field(default_factory=dict)
    target: dict[str, np.ndarray] = field(default_factory=dict)
    job: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # signal -> job id -> (T,), over its nodes
    gpu_jobs: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, gpu index) -> job id, from labels
    leaf_of: dict[str, str] = field(default_factory=dict)  # node -> leaf switch
    nvlink_peers: dict[str, frozenset[tuple[int, int]]] = field(default_factory=dict)  # node -> GPU pairs with NVLink
    gpu_numa: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> GPU index -> NUMA node
    job_targets: dict[str, frozenset[str]] = field(default_factory=dict)  # job id -> targets it read, job_stats
    # node -> "device/port" -> the RDMA port's link layer ("InfiniBand", "Ethernet": RoCE), where the
    # agent says it (gangwatch_infiniband_port_info; node_exporter does not)
    link_layers: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the source could not read (shown with the verdicts)
    # the sites' usual scrape interval where the source knows it (a bundle's samples), else 0: a
    # grid finer than it holds each sample over several steps
    scrape_seconds: float = 0.0

    @property
    def n_steps(self) -> int:
        return int(self.times.shape[0])

    @property
    def end(self) -> float:
        return float(self.times[-1]) if self.times.size else float("nan")

    @property
    def start(self) -> float:
        return float(self.times[0]) if self.times.size else float("nan")

    def until(self, n: int) -> "Window":
        """The window as it stood at its n-th step (the first n steps): replays a bundle's past, as
        detection-delay measurements need. Facts that do not vary are kept."""
        from dataclasses import replace

        n = max(0, min(int(n), self.n_steps))

        def cut(d):
            return {k: v[..., :n] for k, v in d.items()}

        return replace(self, times=self.times[:n], gpu=cut(self.gpu), rail=cut(self.rail), node=cut(self.node),
                       target=cut(self.target), job={s: cut(by_job) for s, by_job in self.job.items()})

    def node_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.nodes)}

    def other_fabric_ports(self, fabric: str) -> np.ndarray | None:
        """(N, R) mask of the ports whose link layer the agents say is not `fabric`'s ("ib",
        "roce"): a DGX's RoCE storage NICs on an InfiniBand window. None where there are none or
        nobody says (node_exporter)."""
        own = LINK_LAYER[fabric]
        other = [(i, c) for i, node in enumerate(self.nodes) if (layers := self.link_layers.get(node))
                 for c, port in enumerate(self.rails[i] if i < len(self.rails) else ()) if layers.get(port, own) != own]
        if not other:
            return None
        mask = np.zeros((len(self.nodes), max((len(r) for r in self.rails), default=0)), bool)
        rows, cols = zip(*other)
        mask[list(rows), list(cols)] = True
        return mask

    def gpu_column(self, node_i: int, gpu: int) -> int:
        """Column of GPU index `gpu` on node row `node_i`, or -1 when the metrics do not know it."""
        cols = self.gpus[node_i] if node_i < len(self.gpus) else ()
        try:
            return cols.index(gpu)
        except ValueError:
            return -1


def grid(start: float, end: float, step: float) -> np.ndarray:
    """Times start, start+step, ... up to end (inclusive when it falls on the grid)."""
    if not (np.isfinite(start) and np.isfinite(end) and step > 0) or end < start:
        return np.zeros(0)
    n = int(np.floor((end - start) / step + 1e-9)) + 1
    return start + step * np.arange(n, dtype=np.float64)
