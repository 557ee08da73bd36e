"""The physical state of a small GPU cluster over a window, as plain numpy arrays.

A `Cluster` holds what the hardware would report, in physical units, per scrape step:
GPUs (utilisation, SM activity, power, memory, clocks, throttle reasons), InfiniBand ports
(data rates, transmit-wait ticks, link events, trained rate; on RoCE the same ports as Ethernet
NICs, with their pauses and storm guard: roce.py renders them), filesystem clients per target
(bytes, RPC service times), and the host (PSI, CPU modes). Jobs paint their behaviour into
those arrays (tests/scenarios/behaviours.py); render.py turns them into exporter series.

Independent of gangwatch's diagnosis and simulator on purpose: nothing here imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class GpuModel:
    """Board figures from the vendors' datasheets (TDP, boost clock, memory, SM count)."""

    key: str  # Slurm gres type
    name: str  # NVML/DCGM modelName
    tdp_w: float
    idle_w: float  # P8, no context
    max_sm_mhz: float
    idle_sm_mhz: float
    mem_mhz: float
    fb_mib: int
    sms: int
    slowdown_c: float  # temperature at which HW/SW thermal slowdown engages (nvidia-smi -q "GPU Slowdown Temp")
    mig_profiles: tuple[tuple[str, int], ...] = ()  # (profile, instances per GPU) for a typical layout


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("a100", "NVIDIA A100-SXM4-80GB", 400, 55, 1410, 210, 1593, 81920, 108, 87,
             (("1g.10gb", 7), ("2g.20gb", 3), ("3g.40gb", 2))),
    GpuModel("a100", "NVIDIA A100-SXM4-40GB", 400, 52, 1410, 210, 1215, 40960, 108, 87,
             (("1g.5gb", 7), ("2g.10gb", 3), ("3g.20gb", 2))),
    GpuModel("h100", "NVIDIA H100 80GB HBM3", 700, 70, 1980, 345, 2619, 81559, 132, 90,
             (("1g.10gb", 7), ("2g.20gb", 3), ("3g.40gb", 2))),
    GpuModel("h200", "NVIDIA H200", 700, 75, 1980, 345, 3201, 143771, 132, 90,
             (("1g.18gb", 7), ("2g.35gb", 3), ("3g.71gb", 2))),
    GpuModel("a800", "NVIDIA A800-SXM4-80GB", 400, 58, 1410, 210, 1593, 81920, 108, 87,
             (("1g.10gb", 7), ("2g.20gb", 3))),
    GpuModel("l40s", "NVIDIA L40S", 350, 32, 2520, 210, 9001, 46068, 142, 88),
    GpuModel("v100", "Tesla V100-SXM2-32GB", 300, 42, 1530, 135, 877, 32768, 80, 83),
)

# Throttle ("clocks event") reason bits, nvmlClocksEventReason* / DCGM_CLOCKS_EVENT_REASON_*.
THR_IDLE, THR_APP, THR_SW_POWER, THR_HW_SLOW = 0x1, 0x2, 0x4, 0x8
THR_SYNC, THR_SW_THERMAL, THR_HW_THERMAL, THR_HW_POWER_BRAKE = 0x10, 0x20, 0x40, 0x80

# InfiniBand: width x lane speed -> data rate in Gb/s, as sysfs `rate` prints it ("400 Gb/sec (4X NDR)").
IB_LINKS = {"HDR": ("4X", "HDR", 200.0), "NDR": ("4X", "NDR", 400.0), "HDR100": ("2X", "HDR", 100.0)}
# PortXmitWait counts ticks of an implementation-defined multiple of the symbol time; NVIDIA's
# ibdiagnet manual ("Congestion Assessment on InfiniBand Links") gives Quantum ports one tick per 8
# bytes of link time, so a port blocked for a whole second adds link_bytes/8. Counters are modelled
# 64 bits wide: the 32-bit PMA copy saturating is a different failure, not in this catalogue.
WAIT_TICK_BYTES = 8


@dataclass
class Job:
    jobid: int
    name: str
    user: str
    account: str
    nodes: list[int]  # cluster node indices
    gpus: dict[int, list[int]]  # node index -> GPU indices (or MIG device indices)
    start: float
    partition: str = "gpu"
    gpu_type: str = ""
    mig: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # node -> [(gpu, GI id, profile)]
    state: str = "RUNNING"
    cpus_per_node: int = 32
    time_limit_min: int = 1440
    truth: dict | None = None  # filled by the scenario: expected state, culprit, onset, signature


class Cluster:
    """State arrays of one cluster; index [node, gpu|port|target, step]."""

    def __init__(self, rng: np.random.Generator, *, nodes: int, gpus: int, model: GpuModel, interval: float,
                 steps: int, end: float, ports: int, link: str, osts: int, fs: str, fs_name: str, prof: str,
                 cpus: int, noise: float, idle_fb_mib: float, throttle_field: bool, leaf_size: int,
                 topology: bool, mig_nodes: tuple[int, ...] = (), name_format: str = "node{:04d}", fabric: str = "ib"):
        self.rng = rng
        self.N, self.G, self.P, self.K, self.T = nodes, gpus, ports, osts, steps
        self.model, self.interval, self.end = model, interval, end
        self.times = end - interval * np.arange(steps - 1, -1, -1, dtype=float)
        self.start = float(self.times[0])
        self.window = interval * (steps - 1)
        self.link = link
        self.fs, self.fs_name, self.prof, self.cpus, self.noise = fs, fs_name, prof, cpus, noise
        self.idle_fb_mib, self.throttle_field = idle_fb_mib, throttle_field
        self.leaf_size, self.topology = leaf_size, topology
        self.mig_nodes = set(mig_nodes)
        self.names = [name_format.format(i + 1) for i in range(nodes)]
        self.leaf_of = [f"leaf{i // leaf_size + 1:02d}" for i in range(nodes)]
        self.devices = [f"mlx5_{p}" for p in range(ports)]
        self.targets = [f"{fs_name}-OST{k:04x}" for k in range(osts)]  # Lustre names targets by hex index
        sh = (nodes, gpus, steps)
        m = model
        # GPUs at rest: no context, P8, idle clocks
        self.util = np.zeros(sh)
        self.sm = np.zeros(sh)
        self.gr = np.zeros(sh)
        self.tensor = np.zeros(sh)
        self.dram = np.zeros(sh)
        self.power = np.full(sh, m.idle_w) * rng.uniform(0.9, 1.1, size=(nodes, gpus, 1))
        self.fb = np.full(sh, idle_fb_mib)
        self.clock = np.full(sh, m.idle_sm_mhz)
        self.temp = np.full(sh, 30.0) + rng.uniform(0, 6, size=(nodes, gpus, 1))
        self.throttle = np.full(sh, THR_IDLE, dtype=np.int64)
        self.procs = np.zeros(sh, dtype=np.int64)
        self.nvlink = np.zeros(sh)  # bytes/s each way, summed over the GPU's links
        self.nvlink_capable = not model.key.startswith("l40")  # PCIe boards have no NVLink
        self.lnet_ib = False  # Lustre/GPFS traffic over the same HCAs (LNet o2ib, GPFS verbs)
        self.power_limit = np.full((nodes, gpus, steps), float(m.tdp_w))
        # InfiniBand ports, bytes/s and ticks/s; events per step
        psh = (nodes, ports, steps)
        rate_gbps = IB_LINKS[link][2]
        self.link_bytes = rate_gbps * 1e9 / 8
        self.wait_ticks_per_s = self.link_bytes / WAIT_TICK_BYTES
        self.ib_rate = np.full(psh, self.link_bytes)  # trained rate in bytes/s
        self.ib_width = [[IB_LINKS[link][0]] * ports for _ in range(nodes)]
        self.ib_speed = [[IB_LINKS[link][1]] * ports for _ in range(nodes)]
        # fabric management (SM sweeps, IPoIB ARP, ...) keeps a trickle on every port
        self.ib_tx = rng.uniform(2e3, 2e4, size=psh)
        self.ib_rx = self.ib_tx * rng.uniform(0.8, 1.2, size=psh)
        self.ib_wait = np.zeros(psh)
        self.ib_down = np.zeros(psh, dtype=np.int64)
        self.ib_symerr = np.zeros(psh, dtype=np.int64)
        self.ib_state = np.full(psh, 4, dtype=np.int64)  # Active
        self.ib_phys = np.full(psh, 5, dtype=np.int64)  # LinkUp
        # On a RoCE fabric ("roce") the same ports are Ethernet NICs: render.py shows the state above
        # through their RDMA and Ethernet counters (roce.py). What only RoCE has: the share of each step a
        # switch held the port paused (PFC), the pause frames the NIC sent, and its storm guard's events.
        self.fabric = fabric
        self.paused = np.zeros(psh)
        self.pause_tx = np.zeros(psh)
        self.storm = np.zeros(psh, dtype=np.int64)
        # filesystem client, per target: bytes/s, and mean service time of ost_read RPCs
        ksh = (nodes, osts, steps)
        self.fs_read = np.zeros(ksh)
        self.fs_write = np.zeros(ksh)
        self.ost_base_lat = rng.uniform(0.002, 0.012, size=osts)  # healthy OST service time (s)
        self.fs_lat = np.broadcast_to(self.ost_base_lat[None, :, None], ksh).copy()
        # host: PSI fractions (some/full), CPU fractions of all CPUs by mode, Ethernet bytes/s
        nsh = (nodes, steps)
        self.psi_io = rng.uniform(0.0, 0.003, size=nsh)
        self.psi_io_full = self.psi_io * 0.3
        self.psi_cpu = rng.uniform(0.0, 0.01, size=nsh)
        self.psi_mem = np.zeros(nsh)
        self.cpu_user = rng.uniform(0.002, 0.01, size=nsh)
        self.cpu_sys = rng.uniform(0.002, 0.006, size=nsh)
        self.cpu_iowait = rng.uniform(0.0, 0.002, size=nsh)
        self.procs_blocked = np.zeros(nsh)
        self.eth_rx = rng.uniform(1e4, 1e5, size=nsh)
        self.eth_tx = rng.uniform(1e4, 1e5, size=nsh)
        # per job cgroup PSI io (fraction), keyed by (jobid, node)
        self.job_psi: dict[tuple[int, int], np.ndarray] = {}
        self.jobs: list[Job] = []
        self.pending: list[Job] = []
        self.oss_of = {t: f"oss{k // 4 + 1:02d}" for k, t in enumerate(self.targets)}

    # -------------------------------------------------------------------------- helpers
    def mask(self, t0: float | None = None, t1: float | None = None) -> np.ndarray:
        lo = -np.inf if t0 is None else t0
        hi = np.inf if t1 is None else t1
        return (self.times >= lo) & (self.times < hi)

    def jitter(self, shape, rel: float = 1.0) -> np.ndarray:
        """Multiplicative noise around 1, scaled by the cluster's noise level."""
        return np.clip(1.0 + self.rng.normal(0.0, self.noise * rel, size=shape), 0.0, None)

    def free_nodes(self, used: set[int]) -> list[int]:
        return [i for i in range(self.N) if i not in used and i not in self.mig_nodes]

    def add_job(self, job: Job) -> Job:
        self.jobs.append(job)
        return job
