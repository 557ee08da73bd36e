"""The simulated cluster's fixed shape: nodes, GPUs, partitions, InfiniBand leaf/spine tree, Lustre.

Pure data, built once from a `ClusterConfig`. Node names are `node0001`... (four digits, more when
there are more than 9,999 nodes), as Slurm clusters usually number them. The tree is exported in
Slurm's topology.conf syntax (topology/tree plugin) by `topology_conf()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from collectors.slurm.hostlist import compress
from collectors.slurm.topology import parse_topology

GPU_MODEL = "NVIDIA H100 80GB HBM3"
GPU_MEMORY_BYTES = 80 * 1024**3
GPU_TDP_WATTS = 700.0
GPU_IDLE_WATTS = 70.0
SM_CLOCK_MAX_HZ = 1980e6
SM_CLOCK_IDLE_HZ = 345e6
MEM_CLOCK_HZ = 2619e6
IB_RATE_BYTES = 400e9 / 8  # NDR 400 Gb/s per rail, one HCA per GPU (rail-optimised, as on a DGX H100)
DRIVER_VERSION = "550.54.15"
FS_NAME = "lustre"
# The node's GPU topology, as on a DGX/HGX H100: NVSwitches join every GPU pair (18 NVLink 4 links
# per GPU), and the first half of the GPUs hang off CPU socket 0 (NUMA node 0), the rest off socket 1.
NVLINKS_PER_GPU = 18
NUMA_NODES = 2


@dataclass(frozen=True)
class ClusterConfig:
    nodes: int = 64
    gpus_per_node: int = 8
    cpus_per_node: int = 128
    memory_bytes: int = 2 * 1024**4
    nodes_per_leaf: int = 32
    osts: int | None = None  # default: nodes / 16, between 8 and 32
    mdts: int | None = None  # default: 1, or 2 from 1,024 nodes
    name: str = "simulated"


@dataclass
class Cluster:
    cfg: ClusterConfig
    names: list[str] = field(default_factory=list)
    leaf_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    leaves: list[str] = field(default_factory=list)
    spines: list[str] = field(default_factory=list)
    osts: list[str] = field(default_factory=list)
    mdts: list[str] = field(default_factory=list)
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> node indices
    partition_max_time: dict[str, int] = field(default_factory=dict)
    default_partition: str = "gpu"

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def g(self) -> int:
        return self.cfg.gpus_per_node

    def index(self, name: str) -> int:
        return self._index[name]

    def node_partitions(self, i: int) -> tuple[str, ...]:
        return self._node_parts[i]

    def gpu_numa(self) -> dict[int, int]:
        """GPU index -> NUMA node of every node (all nodes are alike)."""
        per = max(1, -(-self.g // NUMA_NODES))
        return {k: k // per for k in range(self.g)}

    def numa_cpus(self, numa: int) -> str:
        """The CPUs of a NUMA node, as `nvmlDeviceGetCpuAffinity` lists them (one range per socket)."""
        per = self.cfg.cpus_per_node // NUMA_NODES
        return f"{numa * per}-{(numa + 1) * per - 1}"

    def nvlink_peers(self) -> frozenset[tuple[int, int]]:
        """GPU pairs (low, high) joined by NVLink: all of them, through the NVSwitches."""
        return frozenset((a, b) for a in range(self.g) for b in range(a + 1, self.g))

    def topology_conf(self) -> str:
        """The leaf/spine tree in Slurm's topology.conf syntax (TopologyPlugin=topology/tree)."""
        lines = ["# Simulated InfiniBand fabric: leaf switches of "
                 f"{self.cfg.nodes_per_leaf} nodes under {len(self.spines)} spine switch(es)."]
        for li, leaf in enumerate(self.leaves):
            members = [self.names[i] for i in np.flatnonzero(self.leaf_of == li)]
            lines.append(f"SwitchName={leaf} Nodes={compress(members)} LinkSpeed=400")
        lines.append(f"SwitchName=spine Switches={compress(self.leaves)}")
        return "\n".join(lines) + "\n"

    @cached_property
    def switches(self) -> tuple:
        """The fabric as Slurm's topology/tree reports it, parsed from topology_conf() by the
        exporter's own parser, so `/slurm/metrics` exports the node -> switch map the real way."""
        return parse_topology(self.topology_conf(), "simulator").switches


def build_cluster(cfg: ClusterConfig) -> Cluster:
    if cfg.nodes < 1 or cfg.gpus_per_node < 1:
        raise ValueError("a cluster needs at least one node and one GPU per node")
    width = max(4, len(str(cfg.nodes)))
    names = [f"node{i + 1:0{width}d}" for i in range(cfg.nodes)]
    leaf_of = (np.arange(cfg.nodes) // cfg.nodes_per_leaf).astype(np.int32)
    n_leaves = int(leaf_of.max()) + 1
    osts = cfg.osts or int(min(32, max(8, cfg.nodes // 16)))
    mdts = cfg.mdts or (2 if cfg.nodes >= 1024 else 1)
    c = Cluster(cfg, names, leaf_of, [f"leaf{i:02d}" for i in range(n_leaves)],
                [f"spine{i:02d}" for i in range(max(1, n_leaves // 4))],
                [f"{FS_NAME}-OST{i:04x}" for i in range(osts)], [f"{FS_NAME}-MDT{i:04x}" for i in range(mdts)])
    # "debug": a few nodes for short jobs, also in "gpu" (as sites overlap partitions).
    debug = tuple(range(cfg.nodes - max(1, cfg.nodes // 32), cfg.nodes))
    c.partitions = {"gpu": tuple(range(cfg.nodes)), "debug": debug}
    c.partition_max_time = {"gpu": 3 * 86400, "debug": 3600}
    c._index = {n: i for i, n in enumerate(names)}
    parts: list[tuple[str, ...]] = [("gpu",)] * cfg.nodes
    for i in debug:
        parts[i] = ("gpu", "debug")
    c._node_parts = parts
    return c
