"""The scenario catalogue: stalls and healthy look-alikes written from documented behaviour.

Each `Scenario` names the cause it demonstrates (`stalled_io`, `stalled_network`, `straggler`,
`hung`, `idle_gpus`, or `progressing` for healthy jobs), a signature, what physically happens and
where that behaviour is documented (`cites`, keys of CITATIONS). `build(scenario, seed)` draws a
cluster (size, GPUs per node, GPU model, scrape interval, noise, link speed, filesystem, whether
DCGM profiling fields exist; the fabric, InfiniBand or RoCE, is given), places the scenario's focus
job beside healthy neighbour jobs, paints every job's physics and returns the cluster with one
ground-truth record per running job.

Culprit conventions (truth.json `culprit`, `culprit_kind`):
- stalled_io: the filesystem target (`scratch-OST0003`) when one target's service time stands out,
  else the filesystem name (`scratch`, `gpfs1`) when the job's reads slow down as a whole.
- stalled_network: the InfiniBand port `node0007:mlx5_0/1` whose transmit-wait (or link errors)
  stand out most; `culprit_alternates` lists the job's other ports and that port's leaf switch. In a
  PFC pause storm (RoCE), the node whose NIC storms (kind node), whether or not it is the job's.
- straggler: the GPU `node0007:gpu3`, or the node `node0007` when the whole node is slow (power
  brake of a node, a degraded NIC; the port is then an alternate).
- hung, idle_gpus: the job itself, as its job id string.
- progressing: null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import behaviours as B
from . import roce
from .model import IB_LINKS, Cluster, Job

WINDOW_S = 1200.0
TYPICAL_WAIT = 10 ** -3.5  # median healthy PortXmitWait fraction drawn by draw_workload
CAUSES = ("stalled_io", "stalled_network", "straggler", "hung", "idle_gpus", "progressing")
FABRICS = ("ib", "roce")  # InfiniBand, or RoCE (the same ports seen through Ethernet NICs' counters: roce.py)

CITATIONS: dict[str, str] = {
    "dcgm-fields": "DCGM field definitions (dcgm_fields.h, DCGM user guide 'Profiling Metrics'): DCGM_FI_DEV_GPU_UTIL is "
                   "the fraction of the sample period during which one or more kernels executed; DCGM_FI_PROF_GR_ENGINE_ACTIVE "
                   "the fraction of time the graphics/compute engine is active; DCGM_FI_PROF_SM_ACTIVE the fraction of "
                   "cycles an SM has at least one warp assigned, averaged over all SMs, so a kernel occupying a few SMs "
                   "reads near 0 while GPU_UTIL reads 100%.",
    "dcgm-exporter-csv": "dcgm-exporter etc/default-counters.csv and dcp-metrics-included.csv: the default field set "
                         "(SM_CLOCK, POWER_USAGE, FB_USED/FREE/RESERVED, GPU_UTIL, PROF_GR_ENGINE/PIPE_TENSOR/DRAM_ACTIVE; "
                         "PROF_SM_ACTIVE and CLOCK_THROTTLE_REASONS only when a site enables them); labels gpu, UUID, "
                         "device, modelName, Hostname, hpc_job (HPC job mapping), GPU_I_ID/GPU_I_PROFILE per MIG instance.",
    "dcgm-mig": "DCGM/NVML under MIG: DCGM_FI_DEV_GPU_UTIL is not supported for MIG instances, use "
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE (dcgm-exporter issues #50, #430; #216: some releases report 0 on "
                "every instance); clocks are per physical GPU, repeated per instance (#50); PROF_* per GPU instance "
                "with GPU_I_ID / GPU_I_PROFILE (#317, #512).",
    "nvml-throttle": "NVML nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons): GpuIdle 0x1, "
                     "SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, "
                     "HwPowerBrakeSlowdown 0x80; DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, field "
                     "112, since DCGM 3.3) carries the same bitmask.",
    "nvml-power": "NVML nvmlDeviceGetEnforcedPowerLimit / nvidia-smi -pl: board power is held at the enforced "
                  "limit by lowering clocks (SwPowerCap); an external power-brake signal forces minimum clocks.",
    "nvml-idle": "nvidia-smi / NVML with no context: P8 performance state, idle clocks, the framebuffer at the "
                 "driver's reservation (a few hundred MiB on drivers that count it as used; near 0 with "
                 "FB_RESERVED reported apart), no compute process.",
    "nccl-spin": "NCCL collectives are GPU kernels that poll for their peers' data, so a rank waiting in a "
                 "collective shows 100% utilisation at low power: NVIDIA/nccl issue #968 ('GPU util is 100% but the "
                 "power consumption is pretty low (~70W)' during a hang), cupy issue #3557 (ranks blocked in allGather "
                 "at 100% utilisation, low temperature), NVIDIA/nccl issue #2389 (a silent hang: 'GPUs stay at 100% "
                 "utilization').",
    "torch-nccl-env": "PyTorch ProcessGroupNCCL environment variables: TORCH_NCCL_BLOCKING_WAIT (NCCL_BLOCKING_WAIT) "
                      "makes wait() block the host thread, with a timeout; the watchdog / TORCH_NCCL_ENABLE_MONITORING "
                      "abort a stuck process; facebookresearch/ClassyVision PR #546 (hangs at 100% GPU utilisation "
                      "without it).",
    "gloo-mpi": "PyTorch distributed (gloo backend) and MPI: collectives progress on host CPU threads over TCP or "
                "verbs; while they wait the GPU runs no kernel (utilisation drops), the host polls.",
    "ib-xmitwait": "IBTA PortCounters PortXmitWait: ticks in which the port had data to send but sent none for lack "
                   "of credits or arbitration; PortXmitData in 4-byte words (node_exporter multiplies by 4); NVIDIA "
                   "ibdiagnet user manual 'Congestion Assessment on InfiniBand Links': the tick is a device-specific "
                   "multiple of the symbol time (Quantum: one per 8 bytes), lost bandwidth = counter x tick bytes.",
    "ib-linkerr": "IBTA PortCounters LinkDownedCounter (link failed to recover and went down), SymbolErrorCounter "
                  "(minor lane errors), LinkErrorRecoveryCounter; sysfs ports/N/state (1 Down, 4 Active), "
                  "phys_state (2 Polling, 5 LinkUp) and rate ('200 Gb/sec (4X HDR)') per the kernel's "
                  "Documentation/ABI/stable/sysfs-class-infiniband.",
    "ib-width": "Link training: a 4X port that comes up at 1X or 2X width, or at a lower lane speed, reports the "
                "lower rate in sysfs `rate` (node_infiniband_rate_bytes_per_second) and carries at most that rate.",
    "psi": "Linux Documentation/accounting/psi.rst: 'some' is the share of time at least one task was stalled on "
           "the resource; pressure/io total is in microseconds (node_exporter: node_pressure_io_waiting_seconds_total).",
    "procstat": "Linux Documentation/filesystems/proc.rst /proc/stat: iowait is CPU idle time while I/O was "
                "outstanding (node_cpu_seconds_total{mode=\"iowait\"}); procs_blocked counts tasks in D state.",
    "lustre-osc": "Lustre wiki 'Lustre Monitoring and Statistics Guide' and 'Lustre IO Monitoring', Lustre Operations "
                  "Manual (lctl get_param osc.*.stats, osc.*.rpc_stats): per-OST RPC counts, bytes and service times "
                  "(ost_read in usecs), RPCs in flight; osc.*.import rpc wait; obdfilter.*.brw_stats 'I/O time "
                  "(1/1000s)' histogram on the OSS.",
    "lustre-exporter": "HewlettPackard/lustre_exporter sources/procfs.go: client llite stats as "
                       "lustre_{read,write}_bytes_total{component=\"client\",target=<fs-instance>}, osc rpc_stats as "
                       "lustre_rpcs_in_flight{component,operation,size,target,type}, OST brw_stats as "
                       "lustre_io_time_milliseconds_total{component=\"ost\",operation,size,target}, job_stats as "
                       "lustre_job_read_bytes_total{component=\"ost\",jobid,target}.",
    "gpfs-mmpmon": "IBM Storage Scale mmpmon fs_io_s (bytes read/written per filesystem per node) as treydock "
                   "gpfs_exporter gpfs_perf_{read,write}_bytes_total{fs}, gpfs_perf_operations_total.",
    "node-exporter": "prometheus/node_exporter collector names: node_infiniband_* (infiniband_linux.go), "
                     "node_pressure_* (pressure_linux.go), node_cpu_seconds_total, node_procs_blocked, "
                     "node_network_{receive,transmit}_bytes_total.",
    "checkpoint": "PyTorch distributed checkpointing (torch.save / DCP): training pauses while state is copied "
                  "and written; writes go at filesystem speed, writers block on dirty-page throttling (PSI io).",
    "moe-alltoall": "Mixture-of-experts training (expert parallelism) exchanges tokens with all-to-all every layer: "
                    "fabric-bound traffic with sustained credit stalls on a busy fabric, steady over time.",
    "roce-dcqcn": "DCQCN (Zhu et al., 'Congestion Control for Large-Scale RDMA Deployments', SIGCOMM 2015) and "
                  "NVIDIA's RoCE congestion control guides: switches ECN-mark packets of queues past a threshold, the "
                  "receiving NIC returns congestion notification packets (coalesced per queue pair), and the sender "
                  "cuts its rate on each one it handles.",
    "roce-pfc": "IEEE 802.1Qbb priority flow control: a port past its XOFF threshold sends pause frames for the "
                "lossless priority, each holding the sender for up to 65535 quanta of 512 bit times, refreshed "
                "while it lasts; Guo et al., 'RDMA over Commodity Ethernet at Scale' (SIGCOMM 2016): pauses spread upstream "
                "to ports whose traffic never went to the congested one, and a NIC whose receive pipeline stops "
                "sends pause frames without end (a PFC pause storm) that can block a whole switch, hence NIC and "
                "switch storm watchdogs.",
    "mlx5-counters": "NVIDIA 'Understanding mlx5 Linux counters' and the kernel's mlx5 counters.rst: RDMA "
                     "hw_counters np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled, out_of_sequence, "
                     "packet_seq_err, local_ack_timeout_err, roce_adp_retrans; ethtool -S rx/tx_pause_ctrl_phy, "
                     "rx/tx_prio<p>_pause, link_down_events_phy, rx_symbol_err_phy, tx_pause_storm_warning_events "
                     "(the device kept sending pauses for a long time) and tx_pause_storm_error_events (it reached the "
                     "timeout and stopped sending them); node_exporter's ethtool collector keeps these names with "
                     "rx/tx spelled out and reads no hw_counters.",
    "slurm-gres": "Slurm squeue --json (data_parser v0.0.40+): gres_detail 'gpu:<type>:<n>(IDX:<list>)' per node; "
                  "MIG devices are separate GPU gres typed by profile; topology.conf SwitchName/Nodes tree.",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    cause: str
    signature: str
    description: str
    cites: tuple[str, ...]
    paint: Callable  # (Ctx, Job) -> truth fields (culprit, onset, ...)
    nodes: tuple[int, int] = (1, 8)  # focus job size range
    fs: str = ""  # "lustre" or "gpfs" when the scenario needs one
    mig: bool = False
    shared: bool = False
    can_share: bool = False  # a one-node focus job may share its node with a healthy job
    fabric: str = ""  # "roce" for a fault only that fabric has; "" on either


@dataclass
class Ctx:
    c: Cluster
    rng: np.random.Generator
    avoid_targets: set[int] = field(default_factory=set)
    workloads: dict[int, B.Workload] = field(default_factory=dict)
    later: list = field(default_factory=list)  # painted once the neighbours are, against the cluster's typical node
    focus_nodes: set[int] = field(default_factory=set)
    focus_jobs: set[int] = field(default_factory=set)

    def typical_wait(self) -> float:
        """The cluster's typical node: median, over the nodes outside the focus whose jobs use the fabric,
        of their ports' mean wait fraction (idle ports and one-node jobs wait for nothing)."""
        c = self.c
        busy = [i for i in range(c.N) if i not in self.focus_nodes and c.ib_wait[i].mean() > 0]
        if not busy:
            return TYPICAL_WAIT
        return float(np.median([c.ib_wait[i].mean() / c.wait_ticks_per_s for i in busy]))

    def workload(self, job: Job, **over) -> B.Workload:
        w = self.workloads.get(job.jobid)
        if w is None:
            w = B.draw_workload(self.c, self.rng)
            if self.avoid_targets:
                keep = tuple(k for k in w.targets if k not in self.avoid_targets)
                w.targets = keep or tuple(k for k in range(self.c.K) if k not in self.avoid_targets)[:2]
            for k, v in over.items():
                setattr(w, k, v)
            self.workloads[job.jobid] = w
        return w

    def onset(self, lo_min: float = 9.0, hi_min: float = 3.0) -> float:
        """A fault start between lo_min and hi_min minutes before the end, on a scrape boundary."""
        c = self.c
        scale = min(1.0, c.window / 900.0)  # windows under 15 min (tests) squeeze the onset in
        t = c.end - self.rng.uniform(hi_min, lo_min) * 60 * scale
        return float(c.times[np.searchsorted(c.times, t)])

    def live(self, job: Job) -> np.ndarray:
        return self.c.mask(job.start)


def port(c: Cluster, n: int, p: int) -> str:
    return f"{c.names[n]}:{c.devices[p]}/1"


def gpu_name(c: Cluster, n: int, g: int) -> str:
    return f"{c.names[n]}:gpu{g}"


# ------------------------------------------------------------------------- healthy painters

def steady(x: Ctx, job: Job) -> dict:
    B.train(x.c, job, x.workload(job), x.live(job))
    return {}


def checkpointing(x: Ctx, job: Job) -> dict:
    c, rng, w = x.c, x.rng, x.workload(job)
    live = x.live(job)
    B.train(c, job, w, live)
    period, dur = rng.uniform(6, 14) * 60, rng.uniform(30, 120)
    first = c.start + rng.uniform(0, period)
    starts = list(np.arange(first, c.end, period))
    if rng.random() < 0.3:  # one still writing at the end of the window
        starts.append(c.end - rng.uniform(c.interval, 60))
    for t0 in starts:
        m = c.mask(t0, t0 + dur) & live
        B.hold_idle_gpu(c, job, m, w)
        for n in job.nodes:  # the training loop is blocked in the save: no gradients, no batches
            c.ib_tx[n][:, m] *= 0.02
            c.ib_rx[n][:, m] *= 0.02
            c.fs_read[n][:, m] *= 0.02
        B.fs(c, job, m, read_bps=0.0, write_bps=rng.uniform(0.5e9, 3e9), targets=w.targets)
        B.host(c, job, m, user=0.05, psi_io=rng.uniform(0.1, 0.6), iowait=rng.uniform(0.02, 0.1), blocked=4)
    return {"note": f"checkpoint every {period / 60:.1f} min for {dur:.0f} s"}


def evaluating(x: Ctx, job: Job) -> dict:
    c, rng, w = x.c, x.rng, x.workload(job)
    live = x.live(job)
    dur = rng.uniform(3, 8) * 60
    t0 = c.end - dur * rng.uniform(0.3, 2.5)
    ev = c.mask(t0, t0 + dur) & live
    B.train(c, job, w, live & ~ev)
    B.gpu(c, job, ev, util=rng.uniform(0.35, 0.7), sm=rng.uniform(0.12, 0.35), tensor=0.1, dram=0.2,
          power_frac=rng.uniform(0.25, 0.5), fb_mib=w.fb_frac * c.model.fb_mib)
    B.net(c, job, ev, frac=w.ib_frac * rng.uniform(0.03, 0.15), wait_frac=w.wait_frac * 0.3)
    B.fs(c, job, ev, read_bps=w.read_bps * rng.uniform(0.3, 1.0), targets=w.targets)
    B.host(c, job, ev, user=w.cpu_user, psi_io=0.004)
    return {"note": f"evaluation phase of {dur / 60:.1f} min"}


def warming_up(x: Ctx, job: Job) -> dict:
    c, rng, w = x.c, x.rng, x.workload(job)
    load = rng.uniform(60, 240)
    lm = c.mask(job.start, job.start + load)
    idx = np.flatnonzero(lm)
    B.gpu(c, job, lm, util=0.05, sm=0.01, power_frac=0.08, fb_mib=None, clock_frac=1.0)
    for n, g in B.cells(job):  # weights and optimiser state land on the GPU as the shards arrive
        c.fb[n, g, idx] = np.linspace(c.idle_fb_mib + 500, w.fb_frac * c.model.fb_mib, len(idx)) if len(idx) else []
    B.fs(c, job, lm, read_bps=rng.uniform(1e9, 4e9), targets=w.targets)
    B.host(c, job, lm, user=rng.uniform(0.3, 0.7), psi_io=rng.uniform(0.02, 0.15), iowait=0.03)
    B.train(c, job, w, c.mask(job.start + load))
    return {"note": f"loading for {load:.0f} s after start"}


def moe_busy_fabric(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    mult = rng.uniform(20, 200)
    w = x.workload(job, wait_frac=0.0, ib_frac=rng.uniform(0.4, 0.75), sm=rng.uniform(0.3, 0.6))
    B.train(c, job, w, x.live(job))
    if job.jobid in x.focus_jobs:
        x.later.append(lambda: B.net(c, job, x.live(job), frac=0.0, wait_frac=x.typical_wait() * mult))
    else:  # a neighbour: against the drawn typical level, so it does not move the cluster's median itself
        B.net(c, job, x.live(job), frac=0.0, wait_frac=TYPICAL_WAIT * mult)
    return {"note": f"all-to-all, xmit_wait {mult:.0f}x the typical node, steady"}


HEALTHY_NEIGHBOURS = (steady, steady, steady, checkpointing, evaluating, moe_busy_fabric, warming_up)


# -------------------------------------------------------------------------- fault painters

def _before(x: Ctx, job: Job, t: float) -> B.Workload:
    w = x.workload(job)
    B.train(x.c, job, w, x.live(job) & x.c.mask(None, t))
    return w


def _fault(x: Ctx, job: Job) -> tuple[float, B.Workload, np.ndarray]:
    """Healthy training up to a drawn onset; returns the onset, the job's workload and the mask after it."""
    t = x.onset()
    w = _before(x, job, t)
    return t, w, x.c.mask(t) & x.live(job)


def _hot_port(x: Ctx, job: Job) -> tuple[int, int]:
    return int(x.rng.choice(job.nodes)), int(x.rng.integers(x.c.P))


def _port_alternates(c: Cluster, job: Job, n: int, p: int) -> list[str]:
    return [port(c, m, q) for m in job.nodes for q in range(c.P) if (m, q) != (n, p)] + [c.leaf_of[n]]


def _job_ports_wait(x: Ctx, job: Job, m, level: float, hot: tuple[int, int]) -> None:
    c, rng = x.c, x.rng
    level = min(level, 0.12)  # room for the hot port to stand out below a fully blocked link
    for n in job.nodes:
        for p in range(c.P):
            mult = rng.uniform(2.5, 6) if (n, p) == hot else rng.uniform(0.7, 1.3)
            B.net(c, job, m, frac=0.0, wait_frac=min(level * mult, 0.95), nodes=[n], ports=[p])


def _congested(x: Ctx, job: Job, m, w: B.Workload, t: float, traffic: float) -> dict:
    """The job's data rate falls to `traffic` of its own; its ports wait 100-1000x the typical node's
    (set once the neighbours are painted), one hot port most."""
    B.net(x.c, job, m, frac=w.ib_frac * traffic, wait_frac=0.0)
    hot = _hot_port(x, job)
    mult = x.rng.uniform(100, 1000)
    x.later.append(lambda: _job_ports_wait(x, job, m, x.typical_wait() * mult, hot))
    return {"culprit": port(x.c, *hot), "culprit_kind": "port", "onset": t,
            "culprit_alternates": _port_alternates(x.c, job, *hot)}


def net_nccl_spin(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t, w, m = _fault(x, job)
    B.gpu(c, job, m, util=rng.uniform(0.97, 1.0), sm=rng.uniform(0.01, 0.1), tensor=0.0, dram=0.02,
          power_frac=rng.uniform(0.12, 0.3), fb_mib=w.fb_frac * c.model.fb_mib)
    truth = _congested(x, job, m, w, t, rng.uniform(0.02, 0.25))
    B.fs(c, job, m, read_bps=w.read_bps * 0.05, targets=w.targets)
    B.host(c, job, m, user=w.cpu_user * 0.5, psi_io=0.003)
    return truth


def net_host_wait(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t, w, m = _fault(x, job)
    B.gpu(c, job, m, util=rng.uniform(0.0, 0.08), sm=rng.uniform(0.0, 0.03), tensor=0.0, dram=0.01,
          power_frac=rng.uniform(0.04, 0.1), fb_mib=w.fb_frac * c.model.fb_mib)
    truth = _congested(x, job, m, w, t, rng.uniform(0.03, 0.2))
    # progress slowed, so the loaders read less, but nobody waits on storage
    B.fs(c, job, m, read_bps=w.read_bps * rng.uniform(0.03, 0.2), targets=w.targets)
    B.host(c, job, m, user=rng.uniform(0.08, 0.4), sys=rng.uniform(0.03, 0.12), psi_io=0.002)
    how = ("gloo over IPoIB", "MPI host-staged allreduce", "parameter-server incast", "NCCL_BLOCKING_WAIT host wait")
    return {**truth, "note": how[int(rng.integers(len(how)))]}


def net_flapping_link(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t = x.onset(9, 5)
    w = _before(x, job, t)
    n, p = _hot_port(x, job)
    after = c.mask(t) & x.live(job)
    idx = np.flatnonzero(after)
    flaps = sorted(rng.choice(idx[:-1], size=min(len(idx) - 1, int(rng.integers(2, 6))), replace=False).tolist())
    flaps[0] = int(idx[0])
    down = np.zeros(c.T, bool)
    for i in flaps:
        down[i:i + int(rng.integers(1, 3))] = True
    down &= after
    between = after & ~down
    scale = rng.uniform(0.4, 0.8)  # retransmissions and re-routing between the flaps
    B.train(c, job, w, between, scale)
    B.gpu(c, job, down, util=1.0, sm=rng.uniform(0.01, 0.08), power_frac=0.2, fb_mib=w.fb_frac * c.model.fb_mib)
    B.net(c, job, down, frac=w.ib_frac * 0.1, wait_frac=TYPICAL_WAIT * rng.uniform(20, 200))
    B.net(c, job, between, frac=0.0, wait_frac=TYPICAL_WAIT * rng.uniform(5, 40), nodes=[n], ports=[p])
    c.ib_tx[n, p, down] = rng.uniform(0, 1e3)
    c.ib_rx[n, p, down] = rng.uniform(0, 1e3)
    c.ib_state[n, p, down] = 1
    c.ib_phys[n, p, down] = 2
    for i in flaps:
        c.ib_down[n, p, i] += 1
    c.ib_symerr[n, p, after] += rng.poisson(rng.uniform(2, 60), int(after.sum()))
    c.ib_symerr[n, p, flaps] += rng.integers(200, 5000, len(flaps))
    return {"culprit": port(c, n, p), "culprit_kind": "port", "onset": t,
            "culprit_alternates": [c.names[n], c.leaf_of[n]], "note": f"{len(flaps)} link-down events"}


def net_pfc_storm(x: Ctx, job: Job) -> dict:
    """One NIC on a leaf switch the gang uses stops being drained by its host and sends pause frames
    without end: the switch fills and pauses every port on that leaf, so every gang with a node there
    crawls in its collectives, while the storm guard on the source NIC fires again and again. The
    source is one of the gang's nodes, or another node on its leaf (idle, or another gang's)."""
    c, rng = x.c, x.rng
    t = x.onset()
    B.train(c, job, x.workload(job), x.live(job))  # its collectives crawl from the onset: painted once all jobs are
    x.later.append(lambda: job.truth.update(_storm(x, job, t)))  # build() has set job.truth by then
    return {"culprit_kind": "node", "onset": t}


def _storm(x: Ctx, job: Job, t: float) -> dict:
    c, rng = x.c, x.rng
    leaves = {c.leaf_of[n] for n in job.nodes}
    owner = {n: j for j in c.jobs for n in j.nodes}
    others = [n for n in range(c.N) if c.leaf_of[n] in leaves and n not in job.nodes and n not in c.mig_nodes
              and (n not in owner or len(owner[n].nodes) > 1)]
    s = int(rng.choice(job.nodes)) if not others or rng.random() < 0.4 else int(rng.choice(others))
    nic = int(rng.integers(c.P))
    m = c.mask(t)
    on = m & (rng.random(c.T) < rng.uniform(0.8, 1.0))  # the host drains now and then, and the storm pauses
    on[np.flatnonzero(m)[0]] = True
    n_on = int(on.sum())
    c.pause_tx[s, nic, on] = roce.full_pause_rate(c) * rng.uniform(0.6, 1.0, n_on)
    c.storm[s, nic, on] = np.maximum(1, rng.poisson(c.interval / rng.uniform(6, 15), n_on))
    leaf = c.leaf_of[s]
    for v in range(c.N):
        if c.leaf_of[v] == leaf and v != s:
            c.paused[v][:, on] = rng.uniform(0.2, 0.7, (c.P, n_on))
    culprit = {"culprit": c.names[s], "culprit_kind": "node", "onset": t, "culprit_alternates": [],
               "note": f"{c.devices[nic]} on {c.names[s]} ({leaf}) storms"
                       f"{'' if s in job.nodes else ', not one of the gang' + chr(39) + 's nodes'}"}
    for j in c.jobs:
        if j.mig or len(j.nodes) < 2 or all(c.leaf_of[n] != leaf for n in j.nodes):
            continue
        jm = m & x.live(j)
        w = x.workload(j)
        progress = rng.uniform(0.03, 0.25)
        B.gpu(c, j, jm, util=rng.uniform(0.97, 1.0), sm=rng.uniform(0.01, 0.1), tensor=0.0, dram=0.02,
              power_frac=rng.uniform(0.12, 0.3), fb_mib=w.fb_frac * c.model.fb_mib)
        for n in j.nodes:
            c.ib_tx[n][:, jm] *= progress
            c.ib_rx[n][:, jm] *= progress
            c.fs_read[n][:, jm] *= progress
        if j is not job:
            j.truth = {**(j.truth or {}), "expected": "stalled_network", "scenario": "net_pfc_storm",
                       "signature": "pfc-storm-victim", **culprit}
    return culprit


def _starve(x: Ctx, job: Job, w: B.Workload, m, progress: float) -> None:
    c, rng = x.c, x.rng
    B.gpu(c, job, m, util=max(0.05, progress * rng.uniform(0.8, 1.0)), sm=w.sm * progress, tensor=w.tensor * progress,
          dram=w.dram * progress, power_frac=0.05 + w.power_frac * progress, fb_mib=w.fb_frac * c.model.fb_mib)
    B.net(c, job, m, frac=w.ib_frac * progress, wait_frac=w.wait_frac)


def io_loader_bound(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t, w, m = _fault(x, job)
    progress = rng.uniform(0.1, 0.45)
    _starve(x, job, w, m, progress)
    B.fs(c, job, m, read_bps=w.read_bps * rng.uniform(0.12, 0.5), targets=w.targets)
    B.host(c, job, m, user=w.cpu_user * 0.6, psi_io=rng.uniform(0.25, 0.8), iowait=rng.uniform(0.05, 0.3),
           blocked=rng.uniform(4, 40))
    for k in w.targets:  # the job's own request mix (small files, metadata) queues behind itself
        for n in job.nodes:
            c.fs_lat[n, k, m] *= rng.uniform(1.5, 4)
    return {"culprit": c.fs_name, "culprit_kind": "filesystem", "onset": t,
            "culprit_alternates": [c.targets[k] for k in w.targets] if c.fs == "lustre" else []}


def io_target_slow(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t = x.onset()
    w = _before(x, job, t)
    k = w.targets[int(rng.integers(len(w.targets)))]
    m = c.mask(t) & x.live(job)
    progress = rng.uniform(0.08, 0.4)
    _starve(x, job, w, m, progress)
    # every read touches all stripes, so the slow target paces the job; its peers idle waiting for it
    B.fs(c, job, m, read_bps=w.read_bps * progress, targets=w.targets)
    B.host(c, job, m, user=w.cpu_user * 0.5, psi_io=rng.uniform(0.2, 0.7), iowait=rng.uniform(0.03, 0.2),
           blocked=rng.uniform(4, 30))
    slow = rng.uniform(20, 200)

    def slow_target() -> None:  # against its peers as they stand once every job is painted
        peers = np.median(np.delete(c.fs_lat[:, :, m], k, axis=1), axis=1)
        c.fs_lat[:, k, m] = peers * slow

    x.later.append(slow_target)
    return {"culprit": c.targets[k], "culprit_kind": "target", "onset": t, "culprit_alternates": [c.fs_name]}


def _gang_paced(x: Ctx, job: Job, w: B.Workload, m, pace: float, slow: dict[int, list[int]]) -> None:
    """Peers of a slow member finish their step early and wait inside the collective kernel."""
    c, rng = x.c, x.rng
    peers = {n: [g for g in gs if g not in slow.get(n, [])] for n, gs in job.gpus.items()}
    B.gpu(c, job, m, util=w.util, sm=w.sm * pace, tensor=w.tensor * pace, dram=w.dram * pace,
          power_frac=w.power_frac * (0.5 + 0.5 * pace), fb_mib=w.fb_frac * c.model.fb_mib, only=peers)
    B.net(c, job, m, frac=w.ib_frac * pace, wait_frac=w.wait_frac * rng.uniform(1, 2))
    B.fs(c, job, m, read_bps=w.read_bps * pace, write_bps=w.write_bps, targets=w.targets)
    B.host(c, job, m, user=w.cpu_user * pace, psi_io=0.003)


def strag_thermal(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t = x.onset()
    w = _before(x, job, t)
    n = int(rng.choice(job.nodes))
    g = int(rng.choice(job.gpus[n]))
    m = c.mask(t) & x.live(job)
    pace = rng.uniform(0.5, 0.8)
    _gang_paced(x, job, w, m, pace, {n: [g]})
    kind = rng.choice(["thermal", "sw_thermal"])
    B.gpu(c, job, m, util=1.0, sm=min(0.95, w.sm / pace), tensor=min(0.9, w.tensor / pace), dram=w.dram,
          power_frac=w.power_frac * rng.uniform(0.6, 0.85), fb_mib=w.fb_frac * c.model.fb_mib, clock_frac=pace,
          throttle=B.THROTTLES[kind], only={n: [g]})
    c.temp[n, g, m] = c.model.slowdown_c + rng.uniform(0, 5, int(m.sum()))
    return {"culprit": gpu_name(c, n, g), "culprit_kind": "gpu", "onset": t, "culprit_alternates": [c.names[n]],
            "note": f"{kind}, clocks at {pace:.0%}"}


def strag_power_cap(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t = x.onset()
    w = _before(x, job, t)
    n = int(rng.choice(job.nodes))
    whole = rng.random() < 0.35  # a node-wide power brake (PSU / BMC) rather than one board's limit
    gs = list(job.gpus[n]) if whole else [int(rng.choice(job.gpus[n]))]
    m = c.mask(t) & x.live(job)
    pace = rng.uniform(0.45, 0.8)
    _gang_paced(x, job, w, m, pace, {n: gs})
    cap = c.model.tdp_w * (rng.uniform(0.3, 0.5) if whole else rng.uniform(0.4, 0.65))
    for g in gs:
        c.power_limit[n, g, m] = cap
    B.gpu(c, job, m, util=1.0, sm=min(0.95, w.sm / pace), tensor=min(0.9, w.tensor / pace), dram=w.dram,
          power_frac=1.0, fb_mib=w.fb_frac * c.model.fb_mib, clock_frac=pace,
          throttle=B.THROTTLES["power_brake" if whole else "power_cap"], only={n: gs})
    if whole:
        return {"culprit": c.names[n], "culprit_kind": "node", "onset": t,
                "culprit_alternates": [gpu_name(c, n, g) for g in gs], "note": f"node power brake, cap {cap:.0f} W"}
    return {"culprit": gpu_name(c, n, gs[0]), "culprit_kind": "gpu", "onset": t, "culprit_alternates": [c.names[n]],
            "note": f"power limit {cap:.0f} W"}


def strag_slow_nic(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    full_width, full_speed, _ = IB_LINKS[c.link]
    lanes = int(full_width[0])
    slower = {"NDR": "HDR", "HDR": "EDR"}[full_speed]  # one lane-speed generation down halves the rate
    options = [(1 / lanes, "1X", full_speed), (0.5, full_width, slower)]
    if lanes == 4:
        options.append((0.5, "2X", full_speed))
    ratio, width, speed = options[int(rng.integers(len(options)))]
    # a communication-bound job, whose traffic needs more than the degraded link carries
    w = x.workload(job, ib_frac=rng.uniform(min(0.8, ratio * 1.25), 0.85))
    from_start = rng.random() < 0.4
    t = job.start if from_start else x.onset()
    if not from_start:
        B.train(c, job, w, x.live(job) & c.mask(None, t))
    n = int(rng.choice(job.nodes))
    m = c.mask(t) & x.live(job)
    c.ib_rate[n][:, m] = c.link_bytes * ratio
    c.ib_width[n] = [width] * c.P
    c.ib_speed[n] = [speed] * c.P
    pace = ratio * 0.95 / w.ib_frac
    _gang_paced(x, job, w, m, pace, {})
    # the slow node's ports run flat out at their trained rate; peers back up behind them
    B.net(c, job, m, frac=0.0, wait_frac=w.wait_frac * rng.uniform(3, 10), nodes=[q for q in job.nodes if q != n])
    for p in range(c.P):
        c.ib_tx[n, p, m] = c.link_bytes * ratio * rng.uniform(0.9, 0.97, int(m.sum()))
        c.ib_rx[n, p, m] = c.link_bytes * ratio * rng.uniform(0.9, 0.97, int(m.sum()))
    if not from_start:
        c.ib_down[n, :, np.flatnonzero(m)[0]] += 1  # the retrain that brought it back narrower
    return {"culprit": c.names[n], "culprit_kind": "node", "onset": float(t),
            "culprit_alternates": [port(c, n, p) for p in range(c.P)],
            "note": f"link at {width} {speed} ({ratio:.0%} rate){' since job start' if from_start else ''}"}


def hung_nccl(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    t, w, m = _fault(x, job)
    B.gpu(c, job, m, util=1.0, sm=rng.uniform(0.0, 0.02), tensor=0.0, dram=0.0, power_frac=rng.uniform(0.08, 0.2),
          fb_mib=w.fb_frac * c.model.fb_mib)
    # one proxy thread per rank spins on the CPU; nothing moves on the fabric or the filesystem
    B.host(c, job, m, user=len(next(iter(job.gpus.values()))) / c.cpus, psi_io=0.0)
    if len(job.nodes) > 1 and rng.random() < 0.3:
        # one node's ranks died (OOM, segfault) and freed their GPUs; the survivors wait on them forever
        n = int(rng.choice(job.nodes))
        B.no_gpu_use(c, job, m, only={n: job.gpus[n]})
        return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": t, "culprit_alternates": [c.names[n]],
                "note": f"ranks on {c.names[n]} exited, the rest spin"}
    return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": t}


def hung_deadlock(x: Ctx, job: Job) -> dict:
    t, w, m = _fault(x, job)
    B.hold_idle_gpu(x.c, job, m, w)  # every rank blocked on the host: contexts and memory stay, no kernel runs
    return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": t}


def idle_never_used(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    w = x.workload(job)
    live = x.live(job)
    B.no_gpu_use(c, job, live)
    # CPU-side work (preprocessing, a CPU-only tool) reads its files at its usual pace
    B.fs(c, job, live, read_bps=w.read_bps * rng.uniform(0.5, 1.2), targets=w.targets)
    B.host(c, job, live, user=rng.uniform(0.2, 0.8), psi_io=rng.uniform(0.0, 0.05), iowait=0.01)
    return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": float(job.start)}


def idle_left(x: Ctx, job: Job) -> dict:
    c, rng = x.c, x.rng
    w = x.workload(job)
    live = x.live(job)
    if rng.random() < 0.5 or sum(len(g) for g in job.gpus.values()) < 2:
        t = x.onset()
        B.train(c, job, w, live & c.mask(None, t))
        B.no_gpu_use(c, job, live & c.mask(t))
        B.host(c, job, live & c.mask(t), user=rng.uniform(0.0, 0.05))
        return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": t, "note": "processes exited, job kept"}
    unused = {n: gs[len(gs) // 2:] for n, gs in job.gpus.items()}
    used = {n: gs[:len(gs) // 2] for n, gs in job.gpus.items()}
    B.train_gpu(c, job, w, live, only=used)
    B.no_gpu_use(c, job, live, only=unused)
    B.net(c, job, live, frac=w.ib_frac * 0.5, wait_frac=w.wait_frac)
    B.fs(c, job, live, read_bps=w.read_bps * 0.5, targets=w.targets)
    B.host(c, job, live, user=w.cpu_user * 0.5, psi_io=0.003)
    return {"culprit": str(job.jobid), "culprit_kind": "job", "onset": float(job.start),
            "culprit_alternates": [gpu_name(c, n, g) for n, gs in unused.items() for g in gs],
            "note": "half of its GPUs never used"}


def _healthy(fn):
    def paint(x: Ctx, job: Job) -> dict:
        out = fn(x, job)
        return {"culprit": None, "culprit_kind": None, "onset": None, **out}
    return paint


# ------------------------------------------------------------------------------- catalogue

S = Scenario
SCENARIOS: tuple[Scenario, ...] = (
    S("net_nccl_spin", "stalled_network", "nccl-spinning",
      "Collectives stall on a congested port: NCCL kernels stay resident and busy-poll (GPU_UTIL ~100%, SM "
      "activity a few %), the job's ports wait for credits 100-1000x the cluster's typical node, data rate falls.",
      ("nccl-spin", "dcgm-fields", "ib-xmitwait"), net_nccl_spin, (2, 16)),
    S("net_host_wait", "stalled_network", "host-waiting",
      "Collectives progress on the host (gloo/MPI over the host, host-staged copies, parameter servers, "
      "NCCL_BLOCKING_WAIT): GPUs go quiet (util and SM low, memory held), transmit-wait 100-1000x typical, data "
      "rate falls, no I/O pressure; host CPUs poll.",
      ("gloo-mpi", "torch-nccl-env", "ib-xmitwait", "psi"), net_host_wait, (2, 16)),
    S("net_flapping_link", "stalled_network", "flapping-link",
      "One port's link goes down and retrains repeatedly: link_downed increments, symbol errors, its rate dips to "
      "zero while down; the gang spins in collectives during each flap and crawls between them.",
      ("ib-linkerr", "ib-xmitwait", "nccl-spin"), net_flapping_link, (2, 12)),
    S("net_pfc_storm", "stalled_network", "pfc-storm",
      "RoCE only. One NIC's host stops draining it and the NIC sends PFC pause frames without end: its leaf switch "
      "fills and pauses every port on the leaf, so every gang with a node there spins in its collectives (received "
      "pauses and ECN marks up on the victims, data rate down), while the source NIC's storm guard fires again and "
      "again. The source is one of the gang's nodes or another node on its leaf.",
      ("roce-pfc", "mlx5-counters", "nccl-spin"), net_pfc_storm, (2, 16), fabric="roce"),
    S("io_loader_bound", "stalled_io", "loader-bound",
      "Data loaders cannot keep up: readers block (PSI io some 25-80%, iowait, tasks in D state), read rate falls "
      "below the job's own past, GPUs starve (util and SM low, memory held).",
      ("psi", "procstat", "lustre-osc", "gpfs-mmpmon", "dcgm-fields"), io_loader_bound, (1, 8), can_share=True),
    S("io_target_slow", "stalled_io", "target-slow",
      "One OST answers 20-200x slower than its peers (ost_read service time, RPCs in flight pile up); every read "
      "touches that stripe, so the job's reads and GPUs crawl while its readers wait.",
      ("lustre-osc", "lustre-exporter", "psi"), io_target_slow, (1, 8), fs="lustre"),
    S("strag_thermal", "straggler", "thermal",
      "One GPU overheats and clocks down (SM clock 50-80% of max, SW/HW thermal slowdown bits, temperature at the "
      "slowdown threshold); the gang paces at it: peers' SM activity and the job's data rate drop by its clock ratio.",
      ("nvml-throttle", "dcgm-fields", "nccl-spin"), strag_thermal, (2, 16)),
    S("strag_power_cap", "straggler", "power-capped",
      "One GPU's enforced power limit is set low (or a node's power brake engages): power pinned at the cap, clocks "
      "down, SwPowerCap / HwPowerBrake bits; the gang paces at it.",
      ("nvml-power", "nvml-throttle", "dcgm-fields"), strag_power_cap, (2, 16)),
    S("strag_slow_nic", "straggler", "slow-nic",
      "One node's HCA trained at 1X or 2X width or a lane speed down (NDR->HDR, HDR->EDR): its ports carry at most "
      "that rate and run flat out; the peers wait for it in every collective (lower SM activity, data rate paced "
      "by the slow node).",
      ("ib-width", "ib-linkerr", "ib-xmitwait"), strag_slow_nic, (2, 16)),
    S("hung_nccl", "hung", "nccl-hang",
      "A collective never completes: NCCL kernels spin forever (GPU_UTIL 100%, SM activity ~0), no fabric traffic, "
      "no I/O, until a watchdog timeout (if any) kills it; sometimes because one node's ranks died and freed their "
      "GPUs while the others spin.",
      ("nccl-spin", "torch-nccl-env", "dcgm-fields"), hung_nccl, (1, 16), can_share=True),
    S("hung_deadlock", "hung", "deadlock-idle",
      "The whole job deadlocks on the host (every rank blocked): GPU memory still held with a context (P0), "
      "utilisation 0, no traffic, no I/O, CPUs idle.",
      ("dcgm-fields", "nvml-idle", "psi"), hung_deadlock, (1, 16), can_share=True),
    S("idle_never_used", "idle_gpus", "never-used",
      "A job holds GPUs it never touches: framebuffer at the driver's idle level, 0% all window, no process, P8; "
      "its node reads files at its usual pace for CPU-side work.",
      ("nvml-idle", "dcgm-fields", "slurm-gres"), idle_never_used, (1, 4), can_share=True),
    S("idle_left", "idle_gpus", "left-idle",
      "GPUs used then left at 0%: the processes exit and memory returns to the idle level while the job keeps "
      "running, or half of a job's GPUs stay unused while the others work.",
      ("nvml-idle", "dcgm-fields"), idle_left, (1, 4), can_share=True),
    S("ok_checkpoint", "progressing", "checkpoint",
      "Periodic checkpoints: GPUs pause 30-120 s (memory held) while the nodes write at GB/s and writers block on "
      "writeback (PSI io up); training resumes after each.",
      ("checkpoint", "psi"), _healthy(checkpointing), (1, 16)),
    S("ok_eval", "progressing", "evaluation",
      "An evaluation phase: lower utilisation and SM activity, little gradient traffic, eval data read.",
      ("dcgm-fields",), _healthy(evaluating), (1, 8)),
    S("ok_warmup", "progressing", "warm-up",
      "A job that just started: loading shards at GB/s with GPUs mostly idle while memory fills, then training.",
      ("dcgm-fields", "psi"), _healthy(warming_up), (1, 8)),
    S("ok_moe_high_wait", "progressing", "moe-busy-fabric",
      "Mixture-of-experts all-to-all on a busy fabric: transmit-wait 20-200x the typical node all window, steady, "
      "with high data rate and busy GPUs.",
      ("moe-alltoall", "ib-xmitwait"), _healthy(moe_busy_fabric), (2, 16)),
    S("ok_shared_nodes", "progressing", "shared-node",
      "Two jobs on one node, each on its own GPUs (gres IDX), sharing its ports, filesystem client and CPUs.",
      ("slurm-gres", "dcgm-exporter-csv"), _healthy(steady), (1, 1), shared=True),
    S("ok_mig", "progressing", "mig-slices",
      "Small jobs on MIG instances: no GPU_UTIL (not supported under MIG); per-instance PROF_* series labelled "
      "GPU_I_ID / GPU_I_PROFILE.",
      ("dcgm-mig", "dcgm-exporter-csv", "slurm-gres"), _healthy(steady), (1, 1), mig=True),
)

BY_NAME = {s.name: s for s in SCENARIOS}


def table() -> str:
    """The catalogue as the markdown table tests/scenarios/README.md carries (kept equal by a test)."""
    rows = ["| scenario | cause | signature | what physically happens | citations |", "|---|---|---|---|---|"]
    for sc in SCENARIOS:
        rows.append(f"| `{sc.name}` | {sc.cause} | {sc.signature} | {sc.description} | "
                    f"{', '.join(sc.cites)} |")
    return "\n".join(rows) + "\n"


def citations() -> str:
    return "".join(f"- **{k}**: {v}\n" for k, v in CITATIONS.items())
