"""Build one scenario for one seed: draw a cluster, place jobs, paint them, collect the truth."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from . import behaviours as B
from .catalogue import FABRICS, HEALTHY_NEIGHBOURS, SCENARIOS, WINDOW_S, Ctx, Scenario, _healthy, steady
from .model import GPU_MODELS, IB_LINKS, Cluster, Job

USERS = ("alice", "bob", "chen", "dana", "emre", "fatima", "gita", "hugo", "ines", "jamal")
BASE_EPOCH = 1_790_000_000
NAME_FORMATS = ("node{:04d}", "gpu{:03d}", "nid{:06d}", "hgx-{:03d}", "g{:04d}")  # sites name nodes their own way


@dataclass
class Built:
    scenario: Scenario
    seed: int
    cluster: Cluster
    truth: list[dict]
    params: dict


def _seed(scenario: Scenario, seed: int) -> int:
    return zlib.crc32(f"{scenario.name}/{seed}".encode())


def draw_cluster(rng: np.random.Generator, sc: Scenario, max_nodes: int = 64,
                 window_s: float | None = None, fabric: str = "ib") -> tuple[Cluster, dict]:
    """`fabric` is given, not drawn: a RoCE build of a seed holds the cluster and jobs its InfiniBand
    build holds, seen through other counters (roce.py)."""
    models = [m for m in GPU_MODELS if m.mig_profiles] if sc.mig else list(GPU_MODELS)
    model = models[int(rng.integers(len(models)))]
    gpus = int(rng.choice([4, 8]))
    # 8-64 nodes, small clusters likelier (bundles grow with nodes x GPUs x steps); max_nodes caps it
    nodes = min(max_nodes, int(round(8 * 2 ** (3 * rng.uniform(0, 1) ** 2))))
    interval = float(rng.choice([10, 15, 30]))
    if window_s is None:  # how much past a capture holds varies too
        window_s = float(rng.choice([900.0, WINDOW_S, 1500.0]))
    steps = int(window_s // interval) + 1
    end = float(BASE_EPOCH + int(rng.integers(0, 30_000_000)) // 30 * 30)
    ports = int(rng.choice([1, 2, 4] if gpus == 4 else [2, 4, 8]))
    link = str(rng.choice(list(IB_LINKS)))
    fs = sc.fs or ("lustre" if rng.random() < 0.7 else "gpfs")
    fs_name = str(rng.choice(["scratch", "lustre", "work", "fs1"] if fs == "lustre" else ["gpfs1", "scratch", "project"]))
    prof = str(rng.choice(["none", "default", "full"], p=[0.25, 0.35, 0.4]))
    idle_fb = float(rng.uniform(250, 600) if rng.random() < 0.7 else rng.uniform(0, 4))
    leaf = int(min(rng.choice([4, 8, 16]), nodes))
    mig_nodes: tuple[int, ...] = ()
    if sc.mig or (model.mig_profiles and rng.random() < 0.3):
        mig_nodes = (nodes - 1,)
    params = dict(fabric=fabric, window_s=window_s, model=model.name, gpus_per_node=gpus, nodes=nodes,
                  interval=interval, steps=steps, ports=ports,
                  link=link, fs=fs, fs_name=fs_name, prof=prof, idle_fb_mib=round(idle_fb, 1), leaf_size=leaf)
    c = Cluster(rng, nodes=nodes, gpus=gpus, model=model, interval=interval, steps=steps, end=end, ports=ports,
                link=link, osts=int(rng.integers(4, 13)), fs=fs, fs_name=fs_name, prof=prof,
                cpus=int(rng.choice([16, 24, 32])), noise=float(rng.uniform(0.02, 0.08)), idle_fb_mib=idle_fb,
                throttle_field=bool(rng.random() < 0.5), leaf_size=leaf, topology=bool(rng.random() < 0.7),
                mig_nodes=mig_nodes, name_format=str(rng.choice(NAME_FORMATS)), fabric=fabric)
    c.lnet_ib = bool(rng.random() < 0.6)
    params["missed_scrapes"] = float(rng.choice([0.0, 0.005, 0.02]))  # share of a target's scrapes lost
    params.update(lnet_ib=c.lnet_ib, slurm=str(rng.choice(["23.11", "24.05", "24.11", "25.05"])),
                  domain=str(rng.choice(["", "", ".cluster.local", ".hpc.example.org"])))
    params.update(noise=round(c.noise, 3), osts=c.K, cpus=c.cpus, throttle_field=c.throttle_field,
                  topology=c.topology, mig_nodes=[c.names[i] for i in mig_nodes])
    return c, params


class Placer:
    def __init__(self, c: Cluster, rng: np.random.Generator):
        self.c, self.rng = c, rng
        self.used: set[int] = set()
        self.next_id = int(rng.integers(100_000, 9_000_000))

    def jobid(self) -> int:
        self.next_id += int(self.rng.integers(1, 40))
        return self.next_id

    def block(self, size: int) -> list[int] | None:
        """`size` free nodes, contiguous where possible (Slurm's topology-aware placement packs leaves)."""
        free = self.c.free_nodes(self.used)
        if len(free) < size:
            return None
        starts = [i for i in range(len(free) - size + 1) if free[i + size - 1] - free[i] == size - 1]
        i = int(self.rng.choice(starts)) if starts else int(self.rng.integers(len(free) - size + 1))
        return free[i:i + size]

    def job(self, nodes: list[int], gpus: dict[int, list[int]] | None = None, age: float | None = None,
            name: str = "train") -> Job:
        c, rng = self.c, self.rng
        self.used.update(nodes)
        if age is None:
            age = rng.uniform(c.window + 300, 48 * 3600)
        start = float(np.floor((c.end - age) / c.interval) * c.interval)
        user = USERS[int(rng.integers(len(USERS)))]
        return c.add_job(Job(self.jobid(), name, user, f"proj-{user}", nodes,
                             gpus or {n: list(range(c.G)) for n in nodes}, start, gpu_type=c.model.key,
                             cpus_per_node=c.cpus))


def _neighbour_kinds(rng):
    return HEALTHY_NEIGHBOURS[int(rng.integers(len(HEALTHY_NEIGHBOURS)))]


def paint_mig(x: Ctx, pl: Placer, n: int) -> list[dict]:
    """A MIG node: every GPU split into one profile's instances; a few small jobs, one instance each."""
    c, rng = x.c, x.rng
    prof, per = c.model.mig_profiles[int(rng.integers(len(c.model.mig_profiles)))]
    c.mig_layout = getattr(c, "mig_layout", {})
    gi_ids = {1: [0], 2: [1, 2], 3: [1, 2, 3], 7: [7, 8, 9, 10, 11, 12, 13]}.get(per, list(range(per)))
    c.mig_layout[n] = [(g, gi_ids[i], prof) for g in range(c.G) for i in range(per)]
    pl.used.add(n)
    c.mig_state = getattr(c, "mig_state", {})
    for g, gi, _ in c.mig_layout[n]:
        c.mig_state[(n, g, gi)] = {k: np.zeros(c.T) for k in ("gr", "sm", "tensor", "dram", "fb")}
    c.util[n] = np.nan  # not supported under MIG
    slots = list(range(len(c.mig_layout[n])))
    rng.shuffle(slots)
    truths = []
    frac_fb = 1.0 / per
    for k in slots[: int(rng.integers(2, min(6, len(slots)) + 1))]:
        g, gi, _ = c.mig_layout[n][k]
        job = pl.job([n], {n: [k]}, name="infer")
        job.gpu_type = prof
        job.mig = {n: [(g, gi, prof)]}
        live = c.mask(job.start)
        st = c.mig_state[(n, g, gi)]
        act = rng.uniform(0.3, 0.95)
        st["gr"][live] = np.clip(act * c.jitter(int(live.sum())), 0, 1)
        st["sm"][live] = np.clip(act * rng.uniform(0.5, 0.9) * c.jitter(int(live.sum())), 0, 1)
        st["tensor"][live] = st["sm"][live] * 0.4
        st["dram"][live] = st["sm"][live] * 0.6
        st["fb"][live] = c.model.fb_mib * frac_fb * rng.uniform(0.4, 0.9)
        c.power[n, g, live] += (c.model.tdp_w - c.model.idle_w) * act * 0.7 / per
        c.clock[n, g, live] = c.model.max_sm_mhz
        c.throttle[n, g, live] = 0
        c.procs[n, g, live] += 1
        B.host(c, job, live, user=0.03)
        job.truth = {"expected": "progressing", "culprit": None, "culprit_kind": None, "onset": None,
                     "scenario": "ok_mig", "signature": "mig-slices", "focus": False}
        truths.append(job)
    return truths


def build(sc: Scenario, seed: int, max_nodes: int = 64, window_s: float | None = None, fabric: str = "ib") -> Built:
    """`window_s`: None draws 15-25 min; a short one scales fault onsets into it (tests, for speed).
    `fabric`: "ib" (InfiniBand) or "roce"; a scenario only one fabric has refuses the other."""
    if fabric not in FABRICS:
        raise ValueError(f"fabric must be one of {FABRICS}, not {fabric!r}")
    if sc.fabric and sc.fabric != fabric:
        raise ValueError(f"{sc.name} happens on a {sc.fabric} fabric only")
    rng = np.random.default_rng(_seed(sc, seed))
    c, params = draw_cluster(rng, sc, max_nodes, window_s, fabric)
    x = Ctx(c, rng)
    pl = Placer(c, rng)
    focus: list[Job] = []
    co_tenant: Job | None = None
    painted: list[tuple[Job, object, str, str]] = []

    if sc.mig:
        n = sorted(c.mig_nodes)[0]
        for j in paint_mig(x, pl, n):
            j.truth["focus"] = True
            focus.append(j)
    elif sc.shared:
        n = pl.block(1)[0]
        split = int(rng.choice([c.G // 2, c.G // 4, 3 * c.G // 4])) or 1
        a = pl.job([n], {n: list(range(split))})
        b = pl.job([n], {n: list(range(split, c.G))})
        for j in (a, b):
            painted.append((j, sc.paint, sc.name, sc.signature))
            focus.append(j)
    else:
        lo, hi = sc.nodes
        room = (c.N - len(c.mig_nodes)) // 2  # half the cluster at most: the rest holds healthy neighbours
        size = int(min(hi, room, 2 ** rng.integers(int(np.log2(lo)), int(np.log2(hi)) + 1)))
        size = max(lo, size)
        age = rng.uniform(180, 540) if sc.name == "ok_warmup" else None
        if sc.can_share and size == 1 and c.G >= 4 and rng.random() < 0.4:
            # the stalled job holds part of a node; a healthy job works on the rest of its GPUs
            n = pl.block(1)[0]
            k = int(rng.choice([c.G // 4, c.G // 2, 3 * c.G // 4]))
            fj = pl.job([n], {n: list(range(k))}, age=age)
            co_tenant = pl.job([n], {n: list(range(k, c.G))})
        else:
            fj = pl.job(pl.block(size) or pl.block(lo), age=age)
        painted.append((fj, sc.paint, sc.name, sc.signature))
        focus.append(fj)

    # the focus is painted first, so a slow target it claims is kept away from the neighbours
    truths_out: list[Job] = []
    for j, _, _, _ in painted:
        x.focus_nodes.update(j.nodes)
        x.focus_jobs.add(j.jobid)
    for j, paint, name, sig in painted:
        info = paint(x, j)
        j.truth = {"expected": sc.cause, "scenario": name, "signature": sig, "focus": True, **info}
        if sc.name == "io_target_slow":
            x.avoid_targets.add(c.targets.index(info["culprit"]))
    truths_out += focus
    if co_tenant is not None:
        co_tenant.truth = {"expected": "progressing", "scenario": "ok_shared_nodes", "signature": "shared-node",
                           "focus": False, **_healthy(steady)(x, co_tenant)}
        truths_out.append(co_tenant)

    # healthy neighbours on the rest of the cluster, a shared node and a MIG node now and then
    if not sc.mig and c.mig_nodes:
        truths_out += paint_mig(x, pl, sorted(c.mig_nodes)[0])
    if not sc.shared and rng.random() < 0.5:
        blk = pl.block(1)
        if blk:
            n = blk[0]
            for gs in (list(range(c.G // 2)), list(range(c.G // 2, c.G))):
                j = pl.job([n], {n: gs})
                j.truth = {"expected": "progressing", "scenario": "ok_shared_nodes", "signature": "shared-node",
                           "focus": False, **_healthy(steady)(x, j)}
                truths_out.append(j)
    target = int(c.N * rng.uniform(0.6, 0.9))
    tries = neighbours = moe_nodes = fabric_nodes = 0
    while (len(pl.used) < target or neighbours < 2) and tries < 40:
        tries += 1
        # the first neighbour spans nodes, so the fabric has a typical node to compare with
        size = 2 if neighbours == 0 else int(rng.choice([1, 1, 2, 2, 4, 4, 8, 16]))
        blk = pl.block(size)
        if not blk:
            continue
        kind = _neighbour_kinds(rng)
        if kind.__name__ == "moe_busy_fabric":
            if moe_nodes + size > min(c.N // 6, fabric_nodes // 2):
                kind = steady  # MoE everywhere would make its transmit-wait the cluster's typical level
            else:
                moe_nodes += size
        if size >= 2 and kind.__name__ != "moe_busy_fabric":
            fabric_nodes += size
        j = pl.job(blk, age=rng.uniform(180, 540) if kind.__name__ == "warming_up" else None)
        info = _healthy(kind)(x, j)
        j.truth = {"expected": "progressing", "scenario": f"neighbour_{kind.__name__}",
                   "signature": kind.__name__.replace("_", "-"), "focus": False, **info}
        truths_out.append(j)
        neighbours += 1
    for paint_later in x.later:
        paint_later()
    B.finish(c, x.workloads)
    # a few pending jobs, as any real squeue shows
    for _ in range(int(rng.integers(1, 4))):
        j = Job(pl.jobid(), "queued", USERS[int(rng.integers(len(USERS)))], "proj", [], {}, c.end, state="PENDING",
                gpu_type=c.model.key)
        j.node_count = int(rng.choice([1, 2, 4, 8]))
        c.pending.append(j)

    truth = []
    for j in c.jobs:
        t = dict(j.truth or {})
        t.setdefault("culprit", None)
        t.setdefault("culprit_kind", None)
        t.setdefault("onset", None)
        t.setdefault("culprit_alternates", [])
        truth.append({"jobid": str(j.jobid), "nodes": [c.names[n] for n in j.nodes],
                      "gpus": {c.names[n]: gs for n, gs in j.gpus.items()}, "start": j.start, **t})
    return Built(sc, seed, c, truth, params)


def build_all(seeds: int = 1, names: list[str] | None = None, max_nodes: int = 64, window_s: float | None = None,
              first_seed: int = 0, fabric: str = "ib"):
    for sc in SCENARIOS:
        if (names and sc.name not in names) or (sc.fabric and sc.fabric != fabric):
            continue
        for s in range(first_seed, first_seed + seeds):
            yield build(sc, s, max_nodes, window_s, fabric)
