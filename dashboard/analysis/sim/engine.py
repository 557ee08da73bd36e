"""The simulation: jobs arrive, are scheduled, run and end; every 15 s every GPU, rail and OST moves.

State is kept as numpy vectors over nodes x GPUs (which job slot holds each GPU, utilisation, SM
activity, power, clocks, temperatures, energy), nodes x rails (InfiniBand counters, one HCA per GPU
as on rail-optimised DGX-class nodes) and nodes x OSTs (Lustre client counters); per-job figures
live in slot arrays indexed by those vectors, so one step costs a fixed number of array operations
whatever the node count. Only scheduling and the (few) active faults loop in Python.

A training job's signals (per GPU): utilisation near its base (0.85-0.98) with periodic dips for
checkpoints (I/O bound, writes to Lustre) and evaluation; SM and tensor activity a job-specific
fraction of it; data loading reads on the job's OST stripe; ring all-reduce on InfiniBand for gangs
over more than one node, 2(n-1)/n of the gradient volume per step and more for larger models (so it
grows with gang size); power, temperature and SM clock follow SM activity. A quarter of one-GPU
jobs are interactive or inference work with low, noisy utilisation. Each job also has the cgroup
figures the agent's jobs collector reads (CPU seconds, memory, io.stat of the local NVMe, and cpu,
io and memory pressure): its io pressure runs at ~0.9 while it is stalled on I/O, 0.2-0.5 while it
writes a checkpoint and a few per cent otherwise; a node's pressure combines its jobs'.

Faults that overlap on one job compose as a pipeline: the slowest stage shows (faults.py,
`CAUSE_PRECEDENCE`); a job stalled on its input or its all-reduce reaches no checkpoint meanwhile.

Every random draw comes from generators spawned from the seed, and nothing reads the wall clock:
the same config and seed give the same history, snapshots and ground truth.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from . import cluster as C
from .faults import KINDS, RANDOM_KINDS, ROCE_KINDS, FaultSpec, GroundTruth, parse_faults
from .history import History
from .sched import Request, Scheduler, shape
from .workload import JobSpec, model_arrivals, model_batch, read_trace, trace_arrivals

MIB = 1 << 20
# Throttle reasons the GPU collector reports (bit order of nvmlClocksEventReasons): the simulator
# raises hw_slowdown for a throttled GPU and sw_thermal_slowdown for a slow (hot) node.
THROTTLE_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting")
R_IDLE, R_HW, R_THERMAL = 0, 3, 5
MAX_PENDING = 10_000  # Slurm's MaxJobCount default: beyond it, submissions are refused
THROTTLED_CLOCK = 0.55  # fraction of the max SM clock a throttled GPU keeps
SLOW_OST_FACTOR = 0.05  # throughput left to the jobs striped on a slowed OST
OST_READ_LATENCY = 0.003  # s per 1 MiB read RPC from a healthy OST (NVMe-backed OSS, one network hop)
OST_LATENCY_SIGMA = 0.25  # log-normal jitter of that latency from step to step and client to client
USERS = [f"user{i:02d}" for i in range(1, 41)]
ACCOUNTS = ("vision", "nlp", "speech", "rl", "research")
# Fairshare (Slurm's priority/multifactor with the classic formula F = 2^(-usage/shares)): each
# account's shares, and the share of the recent past's GPU time it used before the simulation starts
# (so the tree is not flat at start); usage decays with Slurm's default PriorityDecayHalfLife (7 days).
SHARES = {"vision": 30, "nlp": 30, "speech": 15, "rl": 15, "research": 10}
PRIOR_USAGE = {"vision": 0.42, "nlp": 0.30, "speech": 0.05, "rl": 0.18, "research": 0.05}
PRIOR_DAYS = 3.0  # the prior usage amounts to this many days of the whole cluster at full use
USAGE_HALF_LIFE = 7 * 86400.0
# PriorityWeight* as a site sets them (Slurm's defaults are 0 but for age); age saturates at PriorityMaxAge (7 days)
PRIORITY_WEIGHTS = {"fairshare": 10000, "age": 1000, "jobsize": 1000, "partition": 1000}
PRIORITY_MAX_AGE = 7 * 86400.0
NAMES = {1: ("notebook", "resnet50-ft", "bert-eval", "sweep-lr"), 2: ("ddp-small", "vit-b16"),
         4: ("ddp-vit", "whisper-ft"), 8: ("llama-7b-ft", "sd-xl-train", "gpt-1b"),
         16: ("gpt-13b", "moe-pretrain"), 32: ("llama-30b", "gpt-30b"), 64: ("gpt-70b-pretrain",)}


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 64
    gpus_per_node: int = 8
    seed: int = 0
    start: float = 1_767_225_600.0  # unix s of the first history sample (demo: now - 1 h)
    step_seconds: float = 15.0
    history_seconds: float = 3600.0
    prefill: bool = True  # run history_seconds of simulation at construction
    load: float = 0.9  # offered GPU load relative to capacity
    trace: str | None = None
    faults: str = "default"
    policy: str = "easy"
    max_pending_planned: int = 64
    showcase: bool = False  # the demo's scripted scene (showcase.py): big gangs, pipelines, a reservation, a suspension
    priority: str = "basic"  # Slurm's PriorityType: "basic" (first come, first served) or "multifactor" (fairshare, age, size)
    backfill_interval: float = 30.0  # Slurm's bf_interval
    nodes_per_leaf: int = 32
    osts: int | None = None
    fabric: str = "ib"  # "ib" (InfiniBand: port_xmit_wait) or "roce" (RDMA over Ethernet: ECN, CNP, PFC)


@dataclass
class JobRec:
    job_id: int
    name: str
    user: str
    account: str
    partition: str
    gpus: int
    nodes_n: int
    gpus_per_node: int
    cpus_per_node: int
    submit: float
    time_limit: float
    duration: float
    kind: str = "training"
    state: str = "PENDING"
    reason: str = "None"
    start: float | None = None
    end: float | None = None
    nodes: list[int] = field(default_factory=list)
    gpu_idx: list[tuple[int, ...]] = field(default_factory=list)
    slot: int = -1
    exit_code: int | None = None
    backfilled: bool = False
    after_ok: int | None = None  # --dependency=afterok:<job>
    dep_state: str = ""  # "", unfulfilled, fulfilled, failed (the parent did not complete: never satisfied)
    fails: bool = False  # ends FAILED (exit 1) when its duration is up
    suspended_s: float = 0.0  # time spent (or scheduled to spend) suspended: it does not count against the limit
    resume_at: float | None = None

    @property
    def planned_end(self) -> float:
        return (self.start or 0) + self.suspended_s + min(self.duration, self.time_limit)

    @property
    def eligible(self) -> bool:
        return self.dep_state in ("", "fulfilled")


@dataclass
class ActiveFault:
    spec: FaultSpec
    truth: GroundTruth
    node: int = -1
    gpu: int = -1
    ost: int = -1
    leaf: int = -1
    job: int = -1


class Simulation:
    def __init__(self, cfg: SimConfig | None = None):
        self.cfg = cfg = cfg or SimConfig()
        self.cluster = cl = C.build_cluster(C.ClusterConfig(nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node,
                                                            nodes_per_leaf=cfg.nodes_per_leaf, osts=cfg.osts))
        seeds = np.random.SeedSequence(cfg.seed).spawn(5)
        self.rng_work, self.rng_job, self.rng_noise, self.rng_fault, self.rng_init = (np.random.default_rng(s) for s in seeds)
        # read-latency jitter has a stream of its own, so adding it left every other draw as it was
        self.rng_lat = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(6)[5])
        self.rng_show = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(7)[6])  # the showcase's own
        self.dt = float(cfg.step_seconds)
        self.t0 = float(cfg.start)
        self.t = self.t0
        self.steps = 0
        n, g = cl.n, cl.g
        self.n, self.g, self.o = n, g, len(cl.osts)
        cap = self.capacity_gpus = n * g
        src = (trace_arrivals(read_trace(cfg.trace), cap, cfg.load) if cfg.trace
               else model_arrivals(self.rng_work, cap, cfg.load))
        self._arrivals: Iterator[JobSpec] = src
        self._next_spec: JobSpec | None = next(src)
        self._spec_origin = self.t0  # workload time 0 = history start (the pre-placed jobs came before)
        self.scheduler = Scheduler(cl.names, [cl.node_partitions(i) for i in range(n)], cl.cfg.cpus_per_node, g,
                                   cl.partition_max_time, cfg.policy, cfg.max_pending_planned)
        # ---- jobs
        self.jobs: dict[int, JobRec] = {}
        self.pending: list[JobRec] = []
        self.running: dict[int, JobRec] = {}
        self._run_tuples: dict[int, tuple] = {}  # what the planner needs of each running job, built once
        self.finished: list[JobRec] = []  # ended within the last FINISHED_KEEP seconds (Slurm's MinJobAge)
        self._ends: list[tuple[float, int]] = []
        self.next_job_id = 1000
        self.stats = {"submitted": 0, "started": 0, "backfilled": 0, "completed": 0, "cycles": 0, "failed": 0,
                      "backfill_cycles": 0, "rejected": 0}
        self._requests: dict[int, Request] = {}
        self._last_backfill = -math.inf
        self._dirty = True
        self.last_cycle_policy = cfg.policy
        self.top_jobs: set[str] = set()
        self._children: dict[int, list[int]] = {}  # parent job -> jobs that depend on it
        self._suspended: set[int] = set()
        self.reservations: list = []  # showcase.Reservation
        self._scripted: list[tuple[float, int, object]] = []  # (time, order, action(sim, t)) of the showcase
        # ---- fairshare: decayed GPU-seconds per (account, user), and GPUs each holds now
        self.usage: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._decay = 0.5 ** (cfg.step_seconds / USAGE_HALF_LIFE)
        self._seed_usage(cap)
        # ---- slot arrays (per running job), grown on demand
        self._slot_cap = 0
        self._free_slots: list[int] = []
        self._grow_slots(max(64, cap // 2))
        # ---- node x GPU state
        self.gpu_job = np.full((n, g), -1, np.int32)
        self.gpu_lost = np.zeros((n, g), bool)
        self.usable = np.ones(n, bool)
        self.drain_reason: dict[int, tuple[str, float]] = {}
        self.cpus_alloc = np.zeros(n, np.int32)
        f32 = np.float32
        self.util = np.zeros((n, g), f32)
        self.sm = np.zeros((n, g), f32)
        self.tensor = np.zeros((n, g), f32)
        self.power = np.full((n, g), C.GPU_IDLE_WATTS, f32)
        self.temp = np.full((n, g), 30.0, f32)
        self.clock = np.full((n, g), C.SM_CLOCK_IDLE_HZ, f32)
        self.mem_used = np.zeros((n, g), f32)
        self.nvlink = np.zeros((n, g), f32)
        self.pcie_rx = np.zeros((n, g), f32)
        self.throttle = np.zeros((n, g), np.int8)  # index into THROTTLE_REASONS, -1 none
        self.energy = self.rng_init.uniform(1e8, 5e8, (n, g))  # J since the driver loaded
        self.job_cpu = np.zeros((n, g))
        # The jobs collector's per-job cgroup counters, kept per node x GPU: each of a job's GPUs on
        # a node holds 1/(its GPUs there) of the job's cgroup figures on that node, so a job's series
        # on a node is the sum over its GPUs there and a step costs a few array operations whatever
        # the job count. Zeroed when a job takes the GPU (a new cgroup starts from 0).
        self.job_io = {key: np.zeros((n, g)) for key in ("rbytes", "wbytes")}  # io.stat of the local NVMe
        self.job_psi = {(res, kind): np.zeros((n, g)) for res in ("cpu", "io", "memory") for kind in ("some", "full")}
        self.job_io_pressure = np.zeros((n, g), f32)  # the job's own io PSI some on the node, this step
        self.xids: dict[tuple[int, int], dict[int, int]] = {}
        # ---- rails (one HCA per GPU)
        self.ib_tx = self.rng_init.uniform(1e13, 1e14, (n, g))
        self.ib_rx = self.ib_tx * 0.999
        self.ib_wait = self.rng_init.uniform(1e9, 1e10, (n, g))
        self.ib_rate = np.zeros((n, g), f32)
        self.ib_wait_rate = np.zeros((n, g), f32)
        self.ib_downed = np.zeros((n, g))
        self.ib_symerr = np.zeros((n, g))
        self.ib_up = np.ones((n, g), bool)
        # ---- RoCE (fabric "roce"): the same rails carry RDMA over Ethernet, whose congestion
        # counters are the mlx5 hw_counters (ECN marks, CNPs) and the NIC's PFC pause frames
        if cfg.fabric not in ("ib", "roce"):
            raise ValueError(f"unknown fabric {cfg.fabric!r} (ib or roce)")
        self.fabric = cfg.fabric
        self.roce_ecn = np.full((n, g), 1e6)
        self.roce_cnp = np.full((n, g), 1e6)
        self.roce_err = np.full((n, g), 100.0)  # sequence errors, NAKs and ACK timeouts
        self.eth_pause = np.full(n, 1e4)  # PFC pause frames received, all NICs of the node
        self.eth_down = np.zeros(n)  # physical link-down events of the node's NICs (ethtool)
        # times the NICs' PFC storm guard fired (ethtool tx_pause_storm_*_events): a NIC that kept
        # sending pause frames past its watermark, as one does whose host stopped draining it
        self.eth_storm = np.zeros(n)
        self.eth_storm_step = np.zeros(n, f32)
        self.storm_node = np.zeros(n, bool)
        self.roce_cong_rate = np.zeros((n, g), f32)
        self.eth_pause_rate = np.zeros(n, f32)
        # ---- Lustre client, per node x OST
        o = self.o
        self.ost_read = self.rng_init.uniform(1e11, 1e12, (n, o))
        self.ost_write = self.ost_read * 0.3
        self.ost_read_ops = self.ost_read / MIB
        self.ost_write_ops = self.ost_write / MIB
        self.ost_read_lat = self.ost_read_ops * 0.003
        self.ost_rate = np.zeros((n, o), f32)
        self.ost_inflight = np.zeros((n, o), f32)
        self.ost_lat_now = np.full((n, o), np.nan, f32)  # seconds per read RPC this step (NaN: no reads)
        self.ost_wait_avg = np.full((n, o), OST_READ_LATENCY, f32)  # the import's running avg_waittime
        self.mdt_ops = self.rng_init.uniform(1e5, 1e6, n)
        self.psi_io_some = self.rng_init.uniform(1e3, 1e4, n)
        self.psi_io_full = self.psi_io_some * 0.5
        self.psi_cpu_some = self.rng_init.uniform(1e3, 1e4, n)
        # ---- faults
        self.fault_specs, self.fault_rate = parse_faults(cfg.faults)
        roce_only = sorted({f.kind for f in self.fault_specs} & ROCE_KINDS)
        if roce_only and self.fabric != "roce":
            raise ValueError(f"fault {', '.join(roce_only)} needs fabric roce: InfiniBand has no pause frames")
        self._fault_queue = list(self.fault_specs)
        self.active: list[ActiveFault] = []
        self.truth: list[GroundTruth] = []
        self._next_random = (self.t0 + self._random_gap()) if self.fault_rate > 0 else math.inf
        self.endpoint_faults: dict[int, tuple[str, float]] = {}
        self._effects()
        # ---- history
        cap_t = int(round(cfg.history_seconds / self.dt)) + 1
        self.history = h = History(cap_t)
        for name in ("util", "sm", "tensor", "power", "temp", "clock", "mem_used"):
            h.add(name, (n, g), f32)
        h.add("gpu_job", (n, g), np.int32)
        h.add("ib_tx_rate", (n, g), f32)  # bytes/s per rail (rx mirrors it: ring all-reduce)
        h.add("ib_wait_rate", (n, g), f32)  # xmit_wait ticks/s
        if self.fabric == "roce":
            h.add("roce_cong_rate", (n, g), f32)  # ECN-marked packets + CNPs handled per second
            h.add("eth_pause_rate", (n,), f32)  # PFC pause frames received per second, per node
            h.add("eth_storm_step", (n,), f32)  # PFC storm guard events per step, per node
        h.add("ost_read_rate", (n, o), f32)  # bytes/s per node and OST
        h.add("ost_read_latency", (n, o), np.float16)  # s per read RPC (float16: 3 digits do, and it is the biggest series)
        h.add("io_pressure", (n,), f32)  # fraction of the step with some task stalled on I/O
        h.add("job_io_pressure", (n, g), f32)  # the same for the job holding the GPU, from its own cgroup
        self._io_pressure = np.zeros(n, f32)
        self._place_initial()
        self._physics(0.0)
        self._record()
        if cfg.prefill:
            self.run_until(self.t0 + cfg.history_seconds)

    # ------------------------------------------------------------------------------ public API

    @property
    def now(self) -> float:
        return self.t

    def run_until(self, t: float) -> int:
        n = 0
        while self.t + self.dt <= t + 1e-9:
            self.step()
            n += 1
        return n

    def step(self) -> None:
        self.t += self.dt
        self.steps += 1
        t = self.t
        self._account(self.dt)
        while self._scripted and self._scripted[0][0] <= t:
            heapq.heappop(self._scripted)[2](self, t)
        self._end_due(t)
        self._resume_due(t)
        self._fault_tick(t)
        self._arrive(t)
        self._schedule(t)
        self._effects()
        self._physics(self.dt)
        self._touch_truth(t)
        self._record()

    def ground_truth(self) -> list[dict]:
        """Every fault injected so far, with its cause, culprit, window, nodes and affected jobs."""
        return [g.to_json() for g in self.truth]

    def job(self, job_id: int | str) -> JobRec | None:
        return self.jobs.get(int(job_id))

    def node_name(self, i: int) -> str:
        return self.cluster.names[i]

    def endpoint_delay(self, node: str) -> tuple[str, float] | None:
        """For scrape faults: (kind, seconds) the node's metrics endpoint should wait before answering."""
        try:
            return self.endpoint_faults.get(self.cluster.index(node))
        except KeyError:
            return None

    # ------------------------------------------------------------------------------ job slots

    def _grow_slots(self, want: int) -> None:
        old = self._slot_cap
        new = max(want, old * 2)
        def grow(name, dtype, fill=0):
            arr = np.full(new, fill, dtype)
            if old:
                arr[:old] = getattr(self, name)
            setattr(self, name, arr)
        for name in ("j_util", "j_smr", "j_tens", "j_mem", "j_ckp", "j_ckl", "j_evp", "j_evl", "j_off",
                     "j_read", "j_grad", "j_start", "j_cpu", "j_ckw"):
            grow(name, np.float64, 1.0)
        grow("j_nodes", np.int32, 1)
        grow("j_gpus", np.int32, 1)
        grow("f_io", bool, False)
        grow("f_net", bool, False)
        grow("f_hang", bool, False)
        grow("f_slow", bool, False)
        grow("f_susp", bool, False)
        stripe = np.zeros((new, 4), np.int32)
        if old:
            stripe[:old] = self.j_stripe
        self.j_stripe = stripe
        ids = np.full(new, -1, np.int64)
        if old:
            ids[:old] = self._job_id_of_slot
        self._job_id_of_slot = ids
        self._free_slots.extend(range(new - 1, old - 1, -1))
        self._slot_cap = new

    def _take_slot(self, job: JobRec) -> int:
        if not self._free_slots:
            self._grow_slots(self._slot_cap * 2)
        s = self._free_slots.pop()
        r = self.rng_job
        interactive = job.kind != "training"
        self.j_util[s] = r.uniform(0.05, 0.45) if interactive else r.uniform(0.86, 0.98)
        self.j_smr[s] = r.uniform(0.3, 0.6) if interactive else r.uniform(0.68, 0.88)
        self.j_tens[s] = r.uniform(0.2, 0.5) if interactive else r.uniform(0.5, 0.8)
        self.j_mem[s] = r.uniform(0.1, 0.5) if interactive else r.uniform(0.55, 0.95)
        self.j_ckp[s] = 1e12 if interactive else float(r.choice((900, 1200, 1800, 3600)))
        self.j_ckl[s] = float(r.choice((30, 45, 60, 90, 120)))
        self.j_evp[s] = 1e12 if interactive else float(r.choice((600, 900, 1200)))
        self.j_evl[s] = float(r.choice((30, 45, 60)))
        self.j_off[s] = r.uniform(0, 3600)
        self.j_read[s] = (r.lognormal(math.log(5e6), 0.8) if interactive else r.lognormal(math.log(120e6), 0.7))
        # all-reduce volume per GPU per second while training, before the gang-size factor
        self.j_grad[s] = r.uniform(2e9, 8e9)
        self.j_ckw[s] = self.j_mem[s] * C.GPU_MEMORY_BYTES * 0.25 / self.j_ckl[s]  # checkpoint write B/s per GPU
        self.j_cpu[s] = r.uniform(0.2, 0.7)
        self.j_start[s] = job.start
        self.j_nodes[s] = job.nodes_n
        self.j_gpus[s] = job.gpus
        count = int(r.choice((1, 2, 4), p=(0.5, 0.3, 0.2)))
        osts = r.choice(self.o, size=min(count, self.o), replace=False)
        self.j_stripe[s] = np.resize(osts, 4)
        self._job_id_of_slot[s] = job.job_id
        return s

    # ------------------------------------------------------------------------------ workload

    def _new_job(self, spec: JobSpec, submit: float) -> JobRec:
        r = self.rng_work
        cl = self.cluster
        gpus = min(spec.gpus, self.capacity_gpus)
        nodes, gpn = shape(gpus, self.g)
        debug = nodes == 1 and spec.duration <= 3000 and r.random() < 0.3
        part = "debug" if debug else "gpu"
        # Users ask for more time than they use: 1.2x-3x, rounded up to 15 min, within the partition's cap.
        limit = min(cl.partition_max_time[part], math.ceil(spec.duration * r.uniform(1.2, 3.0) / 900) * 900)
        if r.random() < 0.05:
            limit = min(cl.partition_max_time[part], max(900, math.floor(spec.duration * 0.8 / 900) * 900))
        user = USERS[min(len(USERS) - 1, int(r.zipf(1.6)) - 1)]
        size_key = max(k for k in NAMES if k <= max(1, gpus))
        kind = "interactive" if gpus == 1 and r.random() < 0.25 else "training"
        job = JobRec(self.next_job_id, str(r.choice(NAMES[size_key])), user, ACCOUNTS[int(user[4:]) % len(ACCOUNTS)], part, gpus, nodes, gpn,
                     cl.cfg.cpus_per_node if nodes > 1 else 16 * gpn, submit, float(limit), spec.duration, kind)
        self.next_job_id += 1
        self.jobs[job.job_id] = job
        self.stats["submitted"] += 1
        return job

    def _arrive(self, t: float) -> None:
        while self._next_spec is not None and self._spec_origin + self._next_spec.submit <= t:
            spec = self._next_spec
            if len(self.pending) < MAX_PENDING:
                self.pending.append(self._new_job(spec, self._spec_origin + spec.submit))
                self._dirty = True
            else:
                self.stats["rejected"] += 1
            self._next_spec = next(self._arrivals, None)

    def _place_initial(self) -> None:
        """Fill the cluster to about the target load with jobs that started before the history."""
        r = self.rng_init
        target = self.cfg.load * 0.95 * self.capacity_gpus
        init = model_arrivals(r, self.capacity_gpus, self.cfg.load)
        free = np.full(self.n, self.g, np.int32)
        placed = 0
        if self.cfg.showcase:
            from .showcase import seed

            placed = seed(self, free)
        # Jobs running at a random instant are length-biased (long jobs are more likely to be caught
        # running): draw candidates, pick them with probability proportional to GPUs x duration.
        gpus, durs = model_batch(r, self.capacity_gpus, max(2000, 30 * self.n))
        weight = gpus * durs
        order = r.choice(len(gpus), size=len(gpus), replace=False, p=weight / weight.sum())
        for k in order.tolist():
            if placed >= target:
                break
            spec = JobSpec(0.0, float(durs[k]), int(gpus[k]))
            nodes_n, gpn = shape(spec.gpus, self.g)
            if nodes_n == 1:
                ok = np.flatnonzero(free >= gpn)
                if not len(ok):
                    continue
                chosen = [int(ok[np.argmin(free[ok])])]
            else:
                ok = np.flatnonzero(free == self.g)
                if len(ok) < nodes_n:
                    continue
                start_at = int(r.integers(0, len(ok) - nodes_n + 1))
                chosen = [int(i) for i in ok[start_at:start_at + nodes_n]]
            job = self._new_job(spec, 0.0)
            self.stats["submitted"] -= 1  # not submitted in the simulated window
            elapsed = float(r.uniform(0, min(job.duration, job.time_limit)))
            job.submit = self.t0 - elapsed - float(r.uniform(0, 1800))
            for i in chosen:
                free[i] -= self.g if nodes_n > 1 else gpn
            self._start(job, chosen, self.t0 - elapsed, count=False)
            placed += job.gpus
        # a short queue, as a busy cluster has
        for _ in range(max(2, self.n // 8)):
            spec = next(init)
            self.pending.append(self._new_job(spec, self.t0 - float(r.uniform(0, 3600))))
            self.stats["submitted"] -= 1
        self._order_pending()

    def _start(self, job: JobRec, nodes: list[int], t: float, count: bool = True) -> None:
        job.state, job.reason, job.start = "RUNNING", "None", t
        job.nodes = list(nodes)
        job.gpu_idx = []
        job.slot = s = self._take_slot(job)
        for i in nodes:
            free = np.flatnonzero(self.gpu_job[i] < 0)
            take = free[: job.gpus_per_node]
            if len(take) < job.gpus_per_node:
                raise AssertionError(f"scheduler placed job {job.job_id} on {self.cluster.names[i]} without room")
            self.gpu_job[i, take] = s
            self.job_cpu[i, take] = 0.0
            for arr in (*self.job_io.values(), *self.job_psi.values()):
                arr[i, take] = 0.0
            self.cpus_alloc[i] += job.cpus_per_node
            job.gpu_idx.append(tuple(int(x) for x in take))
        self.running[job.job_id] = job
        self._run_tuple(job)
        key = (job.account, job.user)
        self._held[key] = self._held.get(key, 0) + job.gpus
        heapq.heappush(self._ends, (job.planned_end, job.job_id))
        if count:
            self.stats["started"] += 1

    def _run_tuple(self, job: JobRec) -> None:
        """What the planner needs of a running job; its limit stretched by the time it spends suspended."""
        self._run_tuples[job.job_id] = (str(job.job_id), job.start, job.time_limit + job.suspended_s, job.partition,
                                        [(i, job.gpus_per_node, job.cpus_per_node) for i in job.nodes])

    def suspend(self, job: JobRec, t: float, seconds: float) -> None:
        """`scontrol suspend`: the job keeps its nodes, GPUs and GPU memory but runs nothing until
        resumed; the time suspended does not count against its limit (its end moves by as much)."""
        if job.state != "RUNNING":
            return
        job.state, job.resume_at = "SUSPENDED", t + seconds
        job.suspended_s += seconds
        self._suspended.add(job.job_id)
        self.f_susp[job.slot] = True
        self._run_tuple(job)
        heapq.heappush(self._ends, (job.planned_end, job.job_id))
        self._dirty = True

    def _resume_due(self, t: float) -> None:
        for jid in [j for j in self._suspended if self.running[j].resume_at <= t]:
            job = self.running[jid]
            job.state, job.resume_at = "RUNNING", None
            self.f_susp[job.slot] = False
            self._suspended.discard(jid)

    def _finish(self, job: JobRec, t: float, state: str, exit_code: int = 0) -> None:
        if job.state not in ("RUNNING", "SUSPENDED"):
            return
        for i, idx in zip(job.nodes, job.gpu_idx):
            self.gpu_job[i, list(idx)] = -1
            self.cpus_alloc[i] -= job.cpus_per_node
        self._free_slots.append(job.slot)
        self._job_id_of_slot[job.slot] = -1
        self.f_io[job.slot] = self.f_net[job.slot] = self.f_hang[job.slot] = self.f_slow[job.slot] = False
        self.f_susp[job.slot] = False
        job.slot = -1
        job.resume_at = None
        self._suspended.discard(job.job_id)
        key = (job.account, job.user)
        self._held[key] -= job.gpus
        job.state, job.end, job.exit_code = state, t, exit_code
        del self.running[job.job_id]
        del self._run_tuples[job.job_id]
        self.finished.append(job)
        self._dirty = True
        self.stats["completed" if state == "COMPLETED" else "failed"] += 1
        for cid in self._children.pop(job.job_id, ()):  # afterok: satisfied by COMPLETED only, never after
            child = self.jobs.get(cid)
            if child is not None and child.state == "PENDING":
                child.dep_state = "fulfilled" if state == "COMPLETED" else "failed"

    def depend(self, child: JobRec, parent: JobRec) -> None:
        """`--dependency=afterok:<parent>` on a pending job."""
        child.after_ok = parent.job_id
        if parent.state == "COMPLETED":
            child.dep_state = "fulfilled"
        elif parent.state in ("PENDING", "RUNNING", "SUSPENDED"):
            child.dep_state = "unfulfilled"
            self._children.setdefault(parent.job_id, []).append(child.job_id)
        else:
            child.dep_state = "failed"

    # ------------------------------------------------------------------------------ fairshare and priority

    def _seed_usage(self, cap: int) -> None:
        """Usage before the simulation, per account, split over its users 1/rank (a few heavy users)."""
        total = cap * PRIOR_DAYS * 86400.0
        for acct, share in PRIOR_USAGE.items():
            users = [u for u in USERS if ACCOUNTS[int(u[4:]) % len(ACCOUNTS)] == acct]
            w = [1.0 / (k + 1) for k in range(len(users))]
            for u, wk in zip(users, w):
                self.usage[(acct, u)] = total * share * wk / sum(w)

    def _account(self, dt: float) -> None:
        d = self._decay
        for key in self.usage:
            self.usage[key] *= d
        for key, gpus in self._held.items():
            if gpus:
                self.usage[key] = self.usage.get(key, 0.0) + gpus * dt

    def fairshare(self) -> dict[str, tuple[float, float, float]]:
        """account -> (normalised shares, effective usage, fairshare factor 2^(-usage/shares))."""
        by_acct: dict[str, float] = {}
        for (acct, _), u in self.usage.items():
            by_acct[acct] = by_acct.get(acct, 0.0) + u
        total = sum(by_acct.values()) or 1.0
        shares = sum(SHARES.values())
        out = {}
        for acct, sh in SHARES.items():
            ns, eu = sh / shares, by_acct.get(acct, 0.0) / total
            out[acct] = (ns, eu, 2.0 ** (-eu / ns))
        return out

    def priority_factors(self, job: JobRec, fs: dict | None = None) -> dict[str, float]:
        """Slurm's multifactor priority of a pending job: each factor in [0, 1] times its weight, and the sum."""
        fs = fs if fs is not None else self.fairshare()
        f = {"age": PRIORITY_WEIGHTS["age"] * min(1.0, max(0.0, self.t - job.submit) / PRIORITY_MAX_AGE),
             "fairshare": PRIORITY_WEIGHTS["fairshare"] * fs.get(job.account, (0, 0, 0.0))[2],
             "jobsize": PRIORITY_WEIGHTS["jobsize"] * job.gpus / self.capacity_gpus,
             "partition": float(PRIORITY_WEIGHTS["partition"])}
        f["priority"] = float(int(sum(f.values())))
        return f

    def _order_pending(self) -> None:
        """Pending jobs in Slurm's order: priority, then submit time, then job id."""
        if self.cfg.priority != "multifactor":
            self.pending.sort(key=lambda j: (j.submit, j.job_id))
            return
        fs = self.fairshare()
        self.pending.sort(key=lambda j: (-self.priority_factors(j, fs)["priority"], j.submit, j.job_id))

    FINISHED_KEEP = 300.0

    def _end_due(self, t: float) -> None:
        while self._ends and self._ends[0][0] <= t:
            end, jid = heapq.heappop(self._ends)
            job = self.running.get(jid)
            if job is None or abs(job.planned_end - end) > 1e-6:
                continue
            timeout = job.duration > job.time_limit
            if job.fails and not timeout:
                self._finish(job, end, "FAILED", 1)
            else:
                self._finish(job, end, "TIMEOUT" if timeout else "COMPLETED", 0 if not timeout else 15)
        cut = t - self.FINISHED_KEEP
        if self.finished and (self.finished[0].end or 0) < cut:
            keep = []
            for j in self.finished:
                if (j.end or 0) >= cut:
                    keep.append(j)
                else:  # forgotten entirely, as slurmctld forgets, so memory stays bounded over days
                    self.jobs.pop(j.job_id, None)
            self.finished = keep

    def _schedule(self, t: float) -> None:
        if not self.pending:
            self.top_jobs = set()
            return
        due = t - self._last_backfill >= self.cfg.backfill_interval
        if due and self._dirty and self.cfg.priority == "multifactor":  # re-ranked at the backfill interval
            self._order_pending()
        free_gpus = (self.gpu_job < 0).sum(axis=1).astype(np.int32)
        free_cpus = (self.cluster.cfg.cpus_per_node - self.cpus_alloc).astype(np.int32)
        eligible = [j for j in self.pending if j.eligible] if self._children or self.cfg.showcase else self.pending
        window = eligible[: self.cfg.max_pending_planned]
        reqs = [self._request(j) for j in window]
        main = self.scheduler.fcfs(free_gpus, free_cpus, self.usable, reqs, t, self.reservations)
        self.stats["cycles"] += 1
        started = self._apply(main.starts, t)
        self.top_jobs = main.top_jobs
        # backfilling needs a blocked job and at least one behind it: with fewer there is nothing to do
        if len(reqs) - len(started) >= 2 and due and (self._dirty or started):
            self._last_backfill = t
            self._dirty = False
            running = list(self._run_tuples.values())
            rest = [r for r in reqs if int(r.job_id) not in started]
            cyc = self.scheduler.backfill(t, free_gpus, free_cpus, self.usable, running, rest, self.reservations)
            if cyc is not None:
                self.stats["backfill_cycles"] += 1
                started |= self._apply(cyc.starts, t)
                self.top_jobs = cyc.top_jobs
        self.last_cycle_policy = self.scheduler.policy
        if started:
            self.pending = [j for j in self.pending if j.job_id not in started]
        k = 0
        for j in self.pending:
            if not j.eligible:
                j.reason = "Dependency" if j.dep_state == "unfulfilled" else "DependencyNeverSatisfied"
                continue
            j.reason = "Resources" if (str(j.job_id) in self.top_jobs or k == 0) else "Priority"
            k += 1

    def _request(self, j: JobRec) -> Request:
        r = self._requests.get(j.job_id)
        if r is None:
            r = self._requests[j.job_id] = Request(str(j.job_id), j.partition, j.gpus, j.nodes_n, j.gpus_per_node,
                                                   j.cpus_per_node, j.time_limit, j.user, j.account)
        return r

    def _apply(self, starts, t: float) -> set[int]:
        done = set()
        for jid, nodes, by in starts:
            job = self.jobs[int(jid)]
            self._requests.pop(job.job_id, None)
            self._start(job, nodes, t)
            if by == "backfill":
                job.backfilled = True
                self.stats["backfilled"] += 1
            done.add(job.job_id)
        return done

    # ------------------------------------------------------------------------------ faults

    def _random_gap(self) -> float:
        return float(self.rng_fault.exponential(3600.0 / self.fault_rate))

    def _fault_tick(self, t: float) -> None:
        while self._fault_queue and self.t0 + self._fault_queue[0].start <= t:
            self._activate(self._fault_queue.pop(0), t)
        while self._next_random <= t:
            kind = str(self.rng_fault.choice(RANDOM_KINDS))
            dur = float(self.rng_fault.uniform(300, 1800))
            self._activate(FaultSpec(kind, self._next_random - self.t0, dur), t)
            self._next_random += self._random_gap()
        for af in list(self.active):
            if af.truth.end <= t:
                self._deactivate(af, t)

    def _running_multi(self, busy: set[int] = frozenset()) -> list[JobRec]:
        free = [j for j in self.running.values() if j.job_id not in busy]
        return [j for j in free if j.nodes_n > 1] or [j for j in free if j.gpus > 1] or free

    def _busy_jobs(self) -> set[int]:
        """Jobs another fault affects now (left alone, so each job's ground truth has one cause), and
        suspended jobs (they run nothing a fault could show in)."""
        busy = {af.job for af in self.active} | {int(j) for af in self.active for j, (_, last) in af.truth.jobs.items()
                                                 if last >= self.t - self.dt}
        return busy | {j.job_id for j in self.running.values() if j.state != "RUNNING"}

    def _pick_job(self, spec: FaultSpec) -> JobRec | None:
        want = spec.get("job")
        if want:
            return self.running.get(int(want))
        busy = self._busy_jobs()
        cands = [j for j in self._running_multi(busy) if j.job_id not in busy and j.planned_end > self.t + 600]
        if spec.kind == "idle_gpus":
            cands = [j for j in self.running.values() if j.gpus >= 4 and j.job_id not in busy] or cands
        if not cands:
            return None
        cands.sort(key=lambda j: j.job_id)
        return cands[int(self.rng_fault.integers(len(cands)))]

    def _pick_node(self, spec: FaultSpec) -> int:
        want = spec.get("node")
        if want:
            return self.cluster.index(want)
        job = self._pick_job(FaultSpec(spec.kind, spec.start, spec.duration))
        if job is None:
            return int(self.rng_fault.integers(self.n))
        return job.nodes[int(self.rng_fault.integers(len(job.nodes)))]

    def _activate(self, spec: FaultSpec, t: float) -> None:
        cause = KINDS[spec.kind][0]
        start = self.t0 + spec.start
        truth = GroundTruth(len(self.truth) + 1, spec.kind, cause, start, start + spec.duration)
        af = ActiveFault(spec, truth)
        cl = self.cluster
        k = spec.kind
        if k == "ost_slow":
            o = spec.get("ost")
            if o is None:
                used = np.bincount(self.j_stripe[[j.slot for j in self.running.values()]].ravel(), minlength=self.o) \
                    if self.running else np.ones(self.o)
                # among the busier OSTs, those fewest jobs of other faults read from
                busy = self._busy_jobs()
                hit = np.bincount(self.j_stripe[[j.slot for j in self.running.values() if j.job_id in busy]].ravel(),
                                  minlength=self.o) if busy & set(self.running) else np.zeros(self.o, np.int64)
                ok = np.flatnonzero(used >= max(1, used.max() // 2))
                ok = ok[hit[ok] == hit[ok].min()]
                o = int(self.rng_fault.choice(ok))
            af.ost = int(o)
            truth.culprit = cl.osts[af.ost]
        elif k == "pfc_storm":
            af.node = self._pick_node(spec)
            af.leaf = int(cl.leaf_of[af.node])
            truth.culprit = cl.names[af.node]
            # the storming node's leaf switch pauses every link toward it: its nodes are the victims
            truth.nodes = tuple(cl.names[i] for i in np.flatnonzero(cl.leaf_of == af.leaf))
        elif k == "ib_congestion":
            leaf = spec.get("leaf")
            if leaf is None:
                # the leaf with most gangs, less those other faults affect (each job shows one cause)
                counts = np.zeros(len(cl.leaves))
                busy = self._busy_jobs()
                for j in self.running.values():
                    if j.nodes_n > 1:
                        for li in set(cl.leaf_of[j.nodes].tolist()):
                            counts[li] += -len(cl.leaves) * 64 if j.job_id in busy else 1
                af.leaf = int(np.argmax(counts))
            else:
                af.leaf = cl.leaves.index(leaf)
            truth.culprit = cl.leaves[af.leaf]
            truth.nodes = tuple(cl.names[i] for i in np.flatnonzero(cl.leaf_of == af.leaf))
        elif k in ("link_flap", "gpu_throttle", "slow_node", "scrape_hang", "scrape_slow"):
            if k.startswith("scrape") and not spec.get("node"):
                af.node = int(self.rng_fault.integers(self.n))
            else:
                af.node = self._pick_node(spec)
            truth.nodes = (cl.names[af.node],)
            if k == "gpu_throttle":
                g = spec.get("gpu")
                if g is None:
                    held = np.flatnonzero(self.gpu_job[af.node] >= 0)
                    g = int(self.rng_fault.choice(held)) if len(held) else int(self.rng_fault.integers(self.g))
                af.gpu = int(g)
                truth.culprit = f"{cl.names[af.node]} GPU {af.gpu}"
            elif k == "link_flap":
                af.gpu = int(spec.get("gpu") or self.rng_fault.integers(self.g))
                truth.culprit = f"{cl.names[af.node]} mlx5_{af.gpu} port 1"
            else:
                truth.culprit = cl.names[af.node]
            if k.startswith("scrape"):
                delay = float(spec.get("delay") or (60.0 if k == "scrape_hang" else 3.0))
                self.endpoint_faults[af.node] = (k, delay)
                truth.note = f"the endpoint waits {delay:g} s before answering"
        elif k in ("nccl_hang", "idle_gpus"):
            job = self._pick_job(spec)
            if job is None:
                truth.note = "no running job to inject into"
            else:
                af.job = job.job_id
                truth.culprit = f"job {job.job_id}"
                truth.nodes = tuple(cl.names[i] for i in job.nodes)
                truth.touch(str(job.job_id), t)
                if k == "nccl_hang":
                    truth.note = "the job is cancelled by an operator when the fault ends"
        elif k == "xid79":
            af.node = self._pick_node(spec)
            held = np.flatnonzero(self.gpu_job[af.node] >= 0)
            g = spec.get("gpu")
            af.gpu = int(g) if g is not None else (int(self.rng_fault.choice(held)) if len(held) else 0)
            truth.culprit = f"{cl.names[af.node]} GPU {af.gpu}"
            truth.nodes = (cl.names[af.node],)
            slot = self.gpu_job[af.node, af.gpu]
            self.gpu_lost[af.node, af.gpu] = True
            key = (af.node, af.gpu)
            self.xids.setdefault(key, {})
            self.xids[key][79] = self.xids[key].get(79, 0) + 1
            if slot >= 0:
                job = self.running[int(self._job_id_of_slot[slot])]
                truth.touch(str(job.job_id), t)
                self._finish(job, t, "NODE_FAIL", 1)
            self.usable[af.node] = False
            self.drain_reason[af.node] = (f"XID 79 on GPU {af.gpu}: GPU has fallen off the bus", t)
            truth.note = "the node is drained until the fault ends (reboot and resume)"
        self.truth.append(truth)
        self.active.append(af)

    def _deactivate(self, af: ActiveFault, t: float) -> None:
        self.active.remove(af)
        k = af.spec.kind
        if k.startswith("scrape"):
            self.endpoint_faults.pop(af.node, None)
        elif k == "xid79":
            self.gpu_lost[af.node, af.gpu] = False
            self.usable[af.node] = True
            self.drain_reason.pop(af.node, None)
        elif k == "nccl_hang":
            job = self.running.get(af.job)
            if job is not None:
                self._finish(job, t, "CANCELLED", 0)

    def _effects(self) -> None:
        """Per-step fault effects as arrays: which slots stall, which GPUs are throttled or idle."""
        n, g = self.n, self.g
        self.throttle_by_fault = np.full((n, g), -1, np.int8)
        self.idle_forced = np.zeros((n, g), bool)
        self.rail_down = np.zeros((n, g), bool)
        slow_ost = np.zeros(self.o, bool)
        hot_leaf = np.zeros(len(self.cluster.leaves), bool)
        flap_node = np.zeros(n, bool)  # a flapping rail stalls the gang in its up phases too (NCCL retries)
        self.storm_node = np.zeros(n, bool)
        self.f_io[:] = self.f_net[:] = self.f_hang[:] = self.f_slow[:] = False
        for af in self.active:
            k = af.spec.kind
            if k == "ost_slow":
                slow_ost[af.ost] = True
            elif k == "ib_congestion":
                hot_leaf[af.leaf] = True
            elif k == "pfc_storm":
                # the switch buffers toward the storming NIC fill, and it pauses its other ports:
                # on the wire, the leaf congested
                hot_leaf[af.leaf] = True
                self.storm_node[af.node] = True
            elif k == "link_flap":
                self.rail_down[af.node, af.gpu] = self.steps % 2 == 0  # down one step, up the next
                flap_node[af.node] = True
            elif k == "gpu_throttle":
                self.throttle_by_fault[af.node, af.gpu] = R_HW
            elif k == "slow_node":
                self.throttle_by_fault[af.node, :] = R_THERMAL
            elif k in ("nccl_hang", "idle_gpus"):
                job = self.running.get(af.job)
                if job is not None:
                    if k == "nccl_hang":
                        self.f_hang[job.slot] = True
                    else:
                        first = True
                        for i, idx in zip(job.nodes, job.gpu_idx):
                            for x in idx:
                                if not first:
                                    self.idle_forced[i, x] = True
                                first = False
        self.slow_ost, self.hot_leaf = slow_ost, hot_leaf
        self.flap_node = flap_node
        busy = self.gpu_job >= 0
        if not busy.any():
            return
        slots = self.gpu_job[busy]
        cap = self._slot_cap
        if slow_ost.any():
            hit = slow_ost[self.j_stripe].any(axis=1)
            self.f_io |= hit & (self._job_id_of_slot >= 0)
        node_bad = hot_leaf[self.cluster.leaf_of] | self.flap_node
        if node_bad.any():
            bad = np.bincount(slots, weights=np.broadcast_to(node_bad[:, None], busy.shape)[busy], minlength=cap) > 0
            self.f_net |= bad & (self.j_nodes > 1)
        thr = self.throttle_by_fault >= 0
        if thr.any():
            self.f_slow |= np.bincount(slots, weights=thr[busy], minlength=cap) > 0

    def _touch_truth(self, t: float) -> None:
        for af in self.active:
            k = af.spec.kind
            flag = {"ost_slow": self.f_io, "ib_congestion": self.f_net, "pfc_storm": self.f_net,
                    "link_flap": self.f_net,
                    "gpu_throttle": self.f_slow, "slow_node": self.f_slow}.get(k)
            if flag is None:
                if k in ("nccl_hang", "idle_gpus") and af.job in self.running:
                    af.truth.touch(str(af.job), t)
                continue
            if k == "ost_slow":
                hit = np.flatnonzero(flag & (self.j_stripe == af.ost).any(axis=1))
            elif k in ("ib_congestion", "pfc_storm"):
                on_leaf = self.gpu_job[self.cluster.leaf_of == af.leaf]
                hit = np.intersect1d(np.flatnonzero(flag), on_leaf[on_leaf >= 0])
            else:
                on = self.gpu_job[af.node]
                hit = np.intersect1d(np.flatnonzero(flag), on[on >= 0])
            nodes = set(af.truth.nodes)
            for s in hit.tolist():
                jid = int(self._job_id_of_slot[s])
                af.truth.touch(str(jid), t)
                if k == "ost_slow":
                    nodes.update(self.cluster.names[i] for i in self.running[jid].nodes)
            if k == "ost_slow":
                af.truth.nodes = tuple(sorted(nodes))

    # ------------------------------------------------------------------------------ physics

    def _physics(self, dt: float) -> None:
        t = self.t
        slot = self.gpu_job
        busy = (slot >= 0) & ~self.gpu_lost
        s = np.where(slot >= 0, slot, 0)
        noise = self.rng_noise.normal(0.0, 0.015, slot.shape)
        since = t - self.j_start[s]
        ckpt = ((since + self.j_off[s]) % self.j_ckp[s]) < self.j_ckl[s]
        evalp = ((since + 2 * self.j_off[s]) % self.j_evp[s]) < self.j_evl[s]
        train = ~ckpt & ~evalp
        util = self.j_util[s] * np.where(ckpt, 0.08, np.where(evalp, 0.6, 1.0)) + noise
        smr = self.j_smr[s]
        sm = util * smr
        speed = np.where(train, 1.0, 0.0)
        io, net, hang, slow = self.f_io[s], self.f_net[s], self.f_hang[s], self.f_slow[s]
        # Overlapping faults: the slowest stage of the step sets the pace and is what the GPUs show
        # (faults.CAUSE_PRECEDENCE): a hang (speed 0) hides an I/O stall (0.05), which hides a
        # network stall (0.15), which hides a throttled GPU (0.55). The throttled clock itself stays
        # visible: it is the GPU's state, whatever the job waits for.
        io = io & ~hang
        net = net & ~hang & ~io
        slow = slow & ~hang & ~io & ~net
        throttled = self.throttle_by_fault >= 0
        # an I/O stall starves the GPUs; a network stall leaves NCCL kernels resident but idle
        util = np.where(io, 0.1 + noise, util)
        sm = np.where(io, 0.06, sm)
        speed = np.where(io, SLOW_OST_FACTOR * speed, speed)
        util = np.where(net, 0.96 + noise / 3, util)
        sm = np.where(net, 0.15 + noise / 3, sm)
        speed = np.where(net, 0.15 * speed, speed)
        # a straggler gang: the throttled GPU works flat out, the others wait at the barrier
        sm = np.where(slow & ~throttled, sm * 0.55, np.where(slow & throttled, 0.95, sm))
        speed = np.where(slow, THROTTLED_CLOCK * speed, speed)
        util = np.where(hang, 1.0, util)
        sm = np.where(hang, 0.01, sm)
        speed = np.where(hang, 0.0, speed)
        susp = self.f_susp[s] & (slot >= 0)  # SIGSTOPped: memory held, nothing runs
        speed = np.where(susp, 0.0, speed)
        job_speed = np.where(busy, speed, 0.0)  # the job's pace, also on GPUs it leaves idle
        off = ~busy | self.idle_forced | susp
        util = np.clip(np.where(off, 0.0, util), 0.0, 1.0)
        sm = np.clip(np.where(off, 0.0, sm), 0.0, 1.0)
        speed = np.where(off, 0.0, speed)
        clockf = np.where(throttled, THROTTLED_CLOCK, 1.0)
        power = C.GPU_IDLE_WATTS + (C.GPU_TDP_WATTS - C.GPU_IDLE_WATTS) * (0.12 * util + 0.88 * sm ** 0.9) * clockf
        self.util[:] = util
        self.sm[:] = sm
        self.tensor[:] = sm * self.j_tens[s]
        self.power[:] = power
        self.energy += power * dt
        target_temp = 28.0 + 0.065 * power + np.where(self.throttle_by_fault == R_THERMAL, 22.0, 0.0)
        self.temp += (target_temp - self.temp) * (0.35 if dt else 1.0)
        self.clock[:] = np.where(util > 0.02, C.SM_CLOCK_MAX_HZ * clockf, C.SM_CLOCK_IDLE_HZ)
        self.throttle[:] = np.where(throttled, self.throttle_by_fault, np.where(util > 0.02, -1, R_IDLE))
        self.mem_used[:] = np.where(busy, np.where(self.idle_forced, 0.5 * 2**30, self.j_mem[s] * C.GPU_MEMORY_BYTES), 0.0)
        multi = self.j_gpus[s] > 1
        self.nvlink[:] = np.where(busy & multi, self.j_grad[s] * 2.0 * speed, 0.0)
        read = self.j_read[s] * speed * np.where(busy, 1.0, 0.0)
        self.pcie_rx[:] = read
        # data-loader workers block while the input does not come
        self.job_cpu += np.where(busy & ~susp, 16.0 * self.j_cpu[s] * dt * np.where(io, 0.3, 1.0), 0.0)
        # ---- InfiniBand: ring all-reduce over the rails, only for gangs over several nodes
        n_nodes = self.j_nodes[s].astype(np.float64)
        gang = busy & (n_nodes > 1)
        ring = 2.0 * (n_nodes - 1) / np.maximum(n_nodes, 1) * (1 + 0.15 * np.log2(np.maximum(n_nodes, 1)))
        rate = np.where(gang, np.minimum(0.9 * C.IB_RATE_BYTES, self.j_grad[s] * ring * speed), 0.0)
        rate = np.where(self.rail_down, 0.0, rate)
        hot = self.hot_leaf[self.cluster.leaf_of][:, None]
        wait_rate = 2e3 + 4e5 * rate / C.IB_RATE_BYTES + np.where(hot, 3e7, 0.0) + np.where(gang & net, 5e6, 0.0)
        self.ib_rate[:] = rate
        self.ib_wait_rate[:] = wait_rate
        self.ib_tx += rate * dt
        self.ib_rx += rate * dt
        if self.fabric == "ib":  # a RoCE port's PortCounters wait stands still: Ethernet has no credits
            self.ib_wait += wait_rate * dt
        went_down = self.rail_down & self.ib_up
        self.ib_downed += went_down
        if went_down.any():
            self.ib_symerr += went_down * self.rng_noise.integers(5, 50, self.rail_down.shape)
        self.ib_up[:] = ~self.rail_down
        if self.fabric == "roce":
            # DCQCN: a switch queue past its ECN threshold marks packets, the receiver answers each
            # marked flow with CNPs and the sender cuts its rate; marks grow with queueing as IB's
            # credit wait does (here 1/100 of its ticks, a trickle on healthy busy links). A queue
            # past XOFF sends PFC pause frames to the nodes on a congested leaf. A link that drops
            # throws every in-flight QP into retransmission (hundreds of sequence errors and
            # timeouts); healthy links count one now and then.
            cong = self.roce_cong_rate = 0.01 * wait_rate
            # (the storming NIC is the one sending them, and receives the usual trickle; its storm
            # guard fires about every 20 s, each time it has sent pauses past the watermark)
            self.eth_pause_rate = np.where(self.hot_leaf[self.cluster.leaf_of] & ~self.storm_node, 2e3, 1.0)
            self.eth_storm_step = (self.storm_node * (dt / 20.0)).astype(np.float32)
            self.eth_storm += self.eth_storm_step
            self.roce_ecn += 0.5 * cong * dt
            self.roce_cnp += 0.5 * cong * dt
            self.eth_pause += self.eth_pause_rate * dt
            self.roce_err += self.rng_noise.poisson(0.05, self.rail_down.shape)
            if went_down.any():
                self.roce_err += went_down * self.rng_noise.integers(50, 500, self.rail_down.shape)
                # the NIC under the rail counts the drop too (mlx5 link_down_events_phy)
                self.eth_down += went_down.sum(axis=1)
        # ---- Lustre: reads spread over the job's stripe; checkpoints write there
        # checkpoints come every so many iterations: a job stalled on its input or its all-reduce
        # (or hung) does not reach one while the stall lasts
        ckpt = ckpt & ~hang & ~io & ~net & ~susp
        write = np.where(busy & ckpt & ~self.idle_forced, self.j_ckw[s], 0.0)
        node_idx = np.broadcast_to(np.arange(self.n)[:, None, None], (self.n, self.g, 4))
        osts = self.j_stripe[s]  # (n, g, 4)
        flat = (node_idx * self.o + osts).ravel()
        size = self.n * self.o
        rrate = np.bincount(flat, weights=np.repeat(read.ravel() / 4, 4), minlength=size).reshape(self.n, self.o)
        wrate = np.bincount(flat, weights=np.repeat(write.ravel() / 4, 4), minlength=size).reshape(self.n, self.o)
        self.ost_rate[:] = rrate
        self.ost_read += rrate * dt
        self.ost_write += wrate * dt
        rops = rrate * dt / MIB
        self.ost_read_ops += rops
        self.ost_write_ops += wrate * dt / MIB
        # per-RPC read latency: a few ms with log-normal jitter and a little queueing under load; a
        # slowed OST serves 1/SLOW_OST_FACTOR times slower, so every client reading from it waits that
        # much longer per RPC and keeps its RPC slots full (max_rpcs_in_flight = 8) while the bytes drop
        jitter = self.rng_lat.lognormal(0.0, OST_LATENCY_SIGMA, (self.n, self.o))
        lat = OST_READ_LATENCY * jitter * (1.0 + rrate / 2e9) * np.where(self.slow_ost[None, :], 1.0 / SLOW_OST_FACTOR, 1.0)
        self.ost_read_lat += rops * lat
        reading = rrate > 0
        self.ost_lat_now[:] = np.where(reading, lat, np.nan)
        self.ost_wait_avg[:] = np.where(reading, 0.7 * self.ost_wait_avg + 0.3 * lat, self.ost_wait_avg)
        self.ost_inflight[:] = np.where(self.slow_ost[None, :] & reading, 8.0, np.minimum(8.0, rrate / 200e6))
        self.mdt_ops += busy.sum(axis=1) * 2.0 * dt
        self._cgroups(dt, busy, s, io, hang, ckpt, job_speed, read, write, noise)

    def _cgroups(self, dt: float, busy, s, io, hang, ckpt, job_speed, read, write, noise) -> None:
        """The jobs' cgroup counters (what the agent's jobs collector reads) and the node's PSI.

        A job's io PSI "some" is the share of time one of its tasks waited on I/O: ~0.9 while it
        is stalled on I/O (its loaders wait on every read), 0.2-0.5 while it writes a checkpoint
        (writers block in dirty-page throttling), 1-4 % while it reads normally (prefetching hides
        most reads), ~0 otherwise. A node's PSI counts any task of any job, so it is
        1 - prod(1 - job's) over the jobs on the node, over a floor for system daemons."""
        per_gpu = np.where(busy, 1.0 / np.maximum(self.j_gpus[s] // np.maximum(self.j_nodes[s], 1), 1), 0.0)
        share = per_gpu * dt
        # job-level states (not the GPU's: a job's GPUs left idle share its cgroup)
        job_read = self.j_read[s] * job_speed
        some = np.where(io, 0.9 + 2.0 * noise, np.where(ckpt & ~hang, 0.2 + 0.3 * self.j_off[s] / 3600.0,
                        np.where(job_read > 0, 0.01 + 0.03 * np.minimum(job_read / 2e8, 1.0), 0.001)))
        some = np.where(busy, np.clip(some, 0.0, 0.99), 0.0)
        self.job_io_pressure[:] = some
        full = some * np.where(io, 0.65, 0.3)
        cpu = 0.02 + 0.08 * self.j_cpu[s] * np.where(io, 0.3, 1.0)
        for key, frac in ((("io", "some"), some), (("io", "full"), full), (("cpu", "some"), cpu),
                          (("cpu", "full"), 0.2 * cpu), (("memory", "some"), 0.001), (("memory", "full"), 0.0005)):
            self.job_psi[key] += frac * share
        self.job_io["rbytes"] += 0.1 * read * dt  # the share of the input served by the local NVMe cache
        self.job_io["wbytes"] += (0.05 * write + 2e5 * per_gpu) * dt  # staging and logs
        with np.errstate(divide="ignore"):
            some_n = 1.0 - 0.998 * np.exp((np.log1p(-some) * per_gpu).sum(axis=1))
            full_n = 1.0 - 0.999 * np.exp((np.log1p(-full) * per_gpu).sum(axis=1))
        self._io_pressure = some_n.astype(np.float32)
        self.psi_io_some += some_n * dt
        self.psi_io_full += full_n * dt
        self.psi_cpu_some += (0.02 + 0.1 * busy.mean(axis=1)) * dt

    def _record(self) -> None:
        self.history.record(self.t, {
            "util": self.util, "sm": self.sm, "tensor": self.tensor, "power": self.power, "temp": self.temp,
            "clock": self.clock, "mem_used": self.mem_used, "gpu_job": self._job_ids_now(),
            "ib_tx_rate": self.ib_rate, "ib_wait_rate": self.ib_wait_rate, "ost_read_rate": self.ost_rate,
            "ost_read_latency": self.ost_lat_now,
            "io_pressure": self._io_pressure, "job_io_pressure": self.job_io_pressure,
            **({"roce_cong_rate": self.roce_cong_rate, "eth_pause_rate": self.eth_pause_rate,
                "eth_storm_step": self.eth_storm_step} if self.fabric == "roce" else {})})

    def _job_ids_now(self) -> np.ndarray:
        """node x GPU -> Slurm job id (-1 free); history keeps ids, not slots, since slots are reused."""
        return np.where(self.gpu_job >= 0, self._job_id_of_slot[np.maximum(self.gpu_job, 0)], -1)
