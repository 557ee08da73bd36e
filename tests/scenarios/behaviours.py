"""What a job does to the hardware, painted into a `Cluster`'s arrays over a time mask.

Every painter takes the job, a boolean step mask and physical levels; noise comes from the
cluster. Rates on shared resources (ports, filesystem, CPUs) add up across the jobs of a node;
GPU cells belong to one job. A `Workload` is one job's healthy steady state, drawn per job so no
two jobs (or seeds) look alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import (THR_HW_POWER_BRAKE, THR_HW_SLOW, THR_HW_THERMAL, THR_IDLE, THR_SW_POWER, THR_SW_THERMAL,
                    Cluster, Job)


@dataclass
class Workload:
    util: float  # DCGM_FI_DEV_GPU_UTIL / NVML: fraction of the period with any kernel running
    sm: float  # DCGM_FI_PROF_SM_ACTIVE: fraction of SM cycles with a warp resident, over all SMs
    tensor: float
    dram: float
    power_frac: float  # (P - idle) / (TDP - idle)
    fb_frac: float
    ib_frac: float  # per-port data rate as a fraction of the trained link rate
    wait_frac: float  # fraction of PortXmitWait ticks in a healthy step (credit stalls of a busy fabric)
    read_bps: float  # per node, from the parallel filesystem
    write_bps: float
    cpu_user: float  # fraction of the node's CPUs busy in user mode (data loaders, launcher)
    targets: tuple[int, ...]  # OSTs the job's files are striped over
    nvlink_bps: float = 0.0  # per GPU, intra-node collective traffic at full pace


def draw_workload(c: Cluster, rng: np.random.Generator, kind: str = "train") -> Workload:
    k = min(c.K, int(rng.integers(2, 9)))
    targets = tuple(sorted(rng.choice(c.K, size=k, replace=False).tolist()))
    sm = rng.uniform(0.45, 0.85)
    return Workload(
        util=rng.uniform(0.9, 1.0), sm=sm, tensor=sm * rng.uniform(0.25, 0.7), dram=rng.uniform(0.25, 0.6),
        power_frac=rng.uniform(0.55, 0.92), fb_frac=rng.uniform(0.5, 0.95),
        ib_frac=rng.uniform(0.12, 0.55), wait_frac=10 ** rng.uniform(-4.2, -2.8),
        read_bps=10 ** rng.uniform(7.3, 8.9), write_bps=10 ** rng.uniform(5, 6.5),
        cpu_user=rng.uniform(0.05, 0.35), targets=targets, nvlink_bps=10 ** rng.uniform(10.2, 11.1))


def cells(job: Job, gpus: dict[int, list[int]] | None = None):
    for n, gs in (gpus or job.gpus).items():
        for g in gs:
            yield n, g


def gpu(c: Cluster, job: Job, m: np.ndarray, *, util: float, sm: float, tensor: float = 0.0, dram: float = 0.0,
        power_frac: float, fb_mib: float | None, clock_frac: float | None = 1.0, throttle: int = 0,
        procs: int = 1, only: dict[int, list[int]] | None = None, noise: float = 1.0) -> None:
    """Paint GPU cells. `fb_mib=None` leaves memory as it was; `clock_frac=None` means idle clocks."""
    md = c.model
    n_t = int(m.sum())
    if not n_t:
        return
    for n, g in cells(job, only):
        j = c.jitter(n_t, noise)
        # a saturated duty cycle (a resident kernel) barely moves; a partial one wanders with the work
        spread = 0.01 if util >= 0.985 else 0.3 * util
        c.util[n, g, m] = np.clip(util + (j - 1) * spread, 0, 1)
        c.sm[n, g, m] = np.clip(sm * j, 0, 1)
        c.gr[n, g, m] = np.clip(np.maximum(c.util[n, g, m] * 0.98, c.sm[n, g, m]), 0, 1)
        c.tensor[n, g, m] = np.clip(tensor * j, 0, 1)
        c.dram[n, g, m] = np.clip(dram * j, 0, 1)
        p = md.idle_w + (md.tdp_w - md.idle_w) * np.clip(power_frac * c.jitter(n_t, noise), 0, 1.02)
        c.power[n, g, m] = np.minimum(p, c.power_limit[n, g, m] * 1.01)
        if fb_mib is not None:
            c.fb[n, g, m] = np.clip(fb_mib * c.jitter(n_t, 0.02), 0, md.fb_mib)
        if clock_frac is None:
            c.clock[n, g, m] = md.idle_sm_mhz
        else:
            c.clock[n, g, m] = np.round(md.max_sm_mhz * np.clip(clock_frac * c.jitter(n_t, 0.2), 0.2, 1.0) / 15) * 15
        c.temp[n, g, m] = 32 + 48 * np.clip(power_frac, 0, 1) + c.rng.normal(0, 1.5, n_t)
        thr = np.full(n_t, throttle, dtype=np.int64)
        if util < 0.01:  # NVML reports GpuIdle whenever nothing runs, context or not
            thr |= THR_IDLE
        c.throttle[n, g, m] = thr
        c.procs[n, g, m] = procs


def train_gpu(c: Cluster, job: Job, w: Workload, m: np.ndarray, scale: float = 1.0, **kw) -> None:
    """Healthy training: kernels nearly always resident, clocks at boost, power-limited at times."""
    throttle = THR_SW_POWER if w.power_frac > 0.85 else 0
    gpu(c, job, m, util=w.util, sm=w.sm * scale, tensor=w.tensor * scale, dram=w.dram * scale,
        power_frac=w.power_frac * (0.4 + 0.6 * scale), fb_mib=w.fb_frac * c.model.fb_mib,
        clock_frac=0.985 if w.power_frac > 0.85 else 1.0, throttle=throttle, **kw)


def net(c: Cluster, job: Job, m: np.ndarray, *, frac: float, wait_frac: float, nodes=None, ports=None,
        noise: float = 1.0) -> None:
    """Add the job's fabric traffic (bytes/s) and credit stalls (ticks/s) on its nodes' ports."""
    n_t = int(m.sum())
    if not n_t:
        return
    if nodes is None and len(job.nodes) == 1:
        return  # a one-node job's collectives stay on NVLink / PCIe, off the fabric
    for n in nodes if nodes is not None else job.nodes:
        for p in ports if ports is not None else range(c.P):
            rate = np.minimum(c.ib_rate[n, p, m], c.link_bytes) * frac
            c.ib_tx[n, p, m] += rate * c.jitter(n_t, noise)
            c.ib_rx[n, p, m] += rate * c.jitter(n_t, noise)
            # credit stalls are bursty: lognormal spread around the level
            wait = wait_frac * c.wait_ticks_per_s * np.exp(c.rng.normal(0, 0.25 + 2 * c.noise, n_t))
            c.ib_wait[n, p, m] += np.minimum(wait, c.wait_ticks_per_s)


def fs(c: Cluster, job: Job, m: np.ndarray, *, read_bps: float, write_bps: float = 0.0, targets=None,
       nodes=None, noise: float = 1.0) -> None:
    n_t = int(m.sum())
    if not n_t:
        return
    tg = list(targets if targets is not None else range(c.K))
    for n in nodes if nodes is not None else job.nodes:
        for k in tg:
            c.fs_read[n, k, m] += read_bps / len(tg) * c.jitter(n_t, noise * 1.5)
            c.fs_write[n, k, m] += write_bps / len(tg) * c.jitter(n_t, noise * 1.5)


def host(c: Cluster, job: Job, m: np.ndarray, *, user: float, psi_io: float = 0.0, iowait: float = 0.0,
         sys: float = 0.02, nodes=None, blocked: float = 0.0) -> None:
    """CPU fractions add up (capped); PSI 'some' of independent waiters combines as 1-(1-a)(1-b)."""
    n_t = int(m.sum())
    if not n_t:
        return
    for n in nodes if nodes is not None else job.nodes:
        share = len(job.gpus.get(n, [])) / max(c.G, 1) if job.gpus.get(n) else 1.0
        c.cpu_user[n, m] = np.minimum(c.cpu_user[n, m] + user * share * c.jitter(n_t), 0.97)
        c.cpu_sys[n, m] = np.minimum(c.cpu_sys[n, m] + sys * share * c.jitter(n_t), 0.5)
        c.cpu_iowait[n, m] = np.minimum(c.cpu_iowait[n, m] + iowait * share * c.jitter(n_t), 0.9)
        p = np.clip(psi_io * c.jitter(n_t, 0.8), 0, 0.99)
        c.psi_io[n, m] = 1 - (1 - c.psi_io[n, m]) * (1 - p)
        c.psi_io_full[n, m] = 1 - (1 - c.psi_io_full[n, m]) * (1 - p * 0.4)
        c.procs_blocked[n, m] += blocked * c.jitter(n_t)
        jp = c.job_psi.setdefault((job.jobid, n), np.zeros(c.T))
        jp[m] = 1 - (1 - jp[m]) * (1 - p)


def lustre_latency(c: Cluster, job: Job, m: np.ndarray, w: Workload) -> None:
    """Busy targets answer a little slower: queueing on the OSS grows with its load."""
    n_t = int(m.sum())
    for k in w.targets:
        c.fs_lat[:, k, m] += c.ost_base_lat[k] * 0.05 * c.jitter(n_t)


def train(c: Cluster, job: Job, w: Workload, m: np.ndarray, scale: float = 1.0) -> None:
    """One steady training period: GPUs busy, gradients on the fabric, data read, loaders on CPUs,
    with the odd one-scrape hiccup (garbage collection, a slow batch, logging) that healthy jobs show."""
    train_gpu(c, job, w, m, scale)
    net(c, job, m, frac=w.ib_frac * scale, wait_frac=w.wait_frac)
    fs(c, job, m, read_bps=w.read_bps * scale, write_bps=w.write_bps, targets=w.targets)
    host(c, job, m, user=w.cpu_user, psi_io=0.004, iowait=0.002)
    lustre_latency(c, job, m, w)
    idx = np.flatnonzero(m)
    hiccups = idx[c.rng.random(len(idx)) < 0.02]
    if len(hiccups):
        dip = c.rng.uniform(0.4, 0.85, len(hiccups))
        for n, g in cells(job):
            c.util[n, g, hiccups] *= (1 + dip) / 2  # kernels still ran for part of the period
            c.sm[n, g, hiccups] *= dip
        for n in job.nodes:
            c.ib_tx[n][:, hiccups] *= dip


def hold_idle_gpu(c: Cluster, job: Job, m: np.ndarray, w: Workload, *, only=None) -> None:
    """A process holds its memory and context but runs no kernel (P0 with a context: above idle power)."""
    gpu(c, job, m, util=0.0, sm=0.0, power_frac=0.06, fb_mib=w.fb_frac * c.model.fb_mib, clock_frac=1.0,
        procs=1, only=only)


def no_gpu_use(c: Cluster, job: Job, m: np.ndarray, *, only=None) -> None:
    """Allocated but nothing on it: framebuffer at the driver's idle level, P8 clocks, no process."""
    gpu(c, job, m, util=0.0, sm=0.0, power_frac=0.0, fb_mib=c.idle_fb_mib, clock_frac=None, procs=0,
        only=only, noise=0.3)


THROTTLES = {"thermal": THR_HW_THERMAL | THR_SW_THERMAL | THR_HW_SLOW, "sw_thermal": THR_SW_THERMAL,
             "power_cap": THR_SW_POWER, "power_brake": THR_HW_POWER_BRAKE | THR_HW_SLOW}


def finish(c: Cluster, workloads: dict[int, Workload]) -> None:
    """Traffic that follows from what the jobs did: NVLink moves with the job's progress (its SM
    activity against its healthy level), and with LNet over InfiniBand the filesystem's bytes ride the
    first HCA port too."""
    if c.nvlink_capable:
        for job in c.jobs:
            w = workloads.get(job.jobid)
            if w is None or job.mig:
                continue
            for n, gs in job.gpus.items():
                if len(gs) < 2:
                    continue
                for g in gs:
                    pace = np.clip(c.sm[n, g] / max(w.sm, 1e-6), 0, 1.2)
                    c.nvlink[n, g] = w.nvlink_bps * pace * c.jitter(c.T)
    if c.lnet_ib:
        c.ib_rx[:, 0] += c.fs_read.sum(axis=1)
        c.ib_tx[:, 0] += c.fs_write.sum(axis=1)
