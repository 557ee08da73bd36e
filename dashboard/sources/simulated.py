"""The simulated cluster (dashboard/analysis/sim) as a metric source, without HTTP or text.

`SimRecorder` steps a `Simulation` and keeps, per step, exactly what the agent would export for
every virtual node (the same quantities `sim/render.py` writes as `gangwatch_*` series: GPU gauges,
InfiniBand and Lustre counters, PSI, and the jobs collector's per-job cgroup io pressure), in a
bounded ring; `window()` turns the counters into rates the way the other sources do and returns a
`Window` (`job_psi=False`: as a site without the jobs collector, node-level signals only). A lost GPU (XID 79) is NaN, as the agent
leaves its series out. Used by the accuracy benchmark, tests and `serve`'s demo mode; the bundle
path (sim -> OpenMetrics text -> bundle source) exercises the real parsers instead.
"""

from __future__ import annotations

import numpy as np

from dashboard.analysis.window import LINK_LAYER, Window

GAUGES = ("util", "sm", "power", "clock", "mem_used")
COUNTERS = ("ib_tx", "ib_wait", "ib_downed", "ost_read", "ost_write", "ost_read_ops", "ost_read_lat", "psi_io_some")
ROCE_COUNTERS = ("roce_ecn", "roce_cnp", "roce_err", "eth_pause", "eth_down", "eth_storm")  # fabric "roce" only


def job_means(ids: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """{job id: (T,) mean of `values` (N, G, T) over the GPUs the job held at each step}, for the
    jobs holding GPUs at the last step; NaN where none of its GPUs has a value. With every GPU of a
    job carrying the job's figure on its node, this is the mean over the job's nodes, as the other
    sources average a job's per-node series."""
    last = ids[..., -1]
    want = np.unique(last[last >= 0])
    if not want.size:
        return {}
    T = ids.shape[-1]
    pos = np.minimum(np.searchsorted(want, ids), want.size - 1)
    hit = (ids >= 0) & (want[pos] == ids) & np.isfinite(values)
    key = pos[hit] * T + np.broadcast_to(np.arange(T), ids.shape)[hit]
    total = np.bincount(key, weights=values[hit], minlength=want.size * T).reshape(want.size, T)
    count = np.bincount(key, minlength=want.size * T).reshape(want.size, T)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return {str(int(j)): out[r] for r, j in enumerate(want.tolist())}


class SimRecorder:
    def __init__(self, sim, capacity: int = 241, job_psi: bool = True):
        self.sim = sim
        self.capacity = int(capacity)
        self.job_psi = job_psi
        self.times: list[float] = []
        self.rows: list[dict[str, np.ndarray]] = []
        self.record()

    def record(self) -> None:
        s = self.sim
        lost = s.gpu_lost
        row = {k: np.where(lost, np.nan, getattr(s, k)).astype(np.float32) for k in GAUGES}
        row.update({k: np.array(getattr(s, k), np.float64, copy=True) for k in COUNTERS})
        if s.fabric == "roce":
            row.update({k: np.array(getattr(s, k), np.float64, copy=True) for k in ROCE_COUNTERS})
        row["gpu_job"] = s._job_ids_now().copy()
        # the job cgroup's io "some" seconds held by each GPU's share (the agent exports the sum per job and node)
        row["job_psi_io"] = s.job_psi[("io", "some")].copy()
        gpn = s.j_gpus // np.maximum(s.j_nodes, 1)
        row["job_gpn"] = np.where(s.gpu_job >= 0, gpn[np.maximum(s.gpu_job, 0)], 0).astype(np.int16)
        self.times.append(float(s.t))
        self.rows.append(row)
        if len(self.rows) > self.capacity:
            del self.rows[0]
            del self.times[0]

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.sim.step()
            self.record()

    def window(self) -> Window:
        s = self.sim
        cl = s.cluster
        times = np.asarray(self.times)
        T = len(times)

        def stack(k):
            return np.stack([r[k] for r in self.rows], axis=-1)  # (..., T)

        def rate(k):
            c = stack(k)
            out = np.full(c.shape, np.nan)
            dt = np.diff(times)
            out[..., 1:] = np.diff(c, axis=-1) / dt
            return out

        def increase(k):  # event counters: per step, as the schema's events=True rows
            c = stack(k)
            out = np.full(c.shape, np.nan)
            out[..., 1:] = np.diff(c, axis=-1)
            return out

        gpu = {"util": stack("util"), "sm": stack("sm"), "power": stack("power"), "clock": stack("clock"),
               "mem": stack("mem_used")}
        rail = {"ib_tx": rate("ib_tx").astype(np.float32), "ib_wait": rate("ib_wait").astype(np.float32),
                "ib_down": increase("ib_downed").astype(np.float32)}
        roce_node = {}
        if s.fabric == "roce":
            # what the roce and ethtool collectors export, as the schema maps them, beside the ports'
            # PortCounters (their transmit wait stands still on RoCE)
            rail = {**rail, "roce_err": increase("roce_err").astype(np.float32),
                    "roce_cong": (rate("roce_ecn") + rate("roce_cnp")).astype(np.float32)}
            roce_node = {"eth_pause": rate("eth_pause").astype(np.float32),
                         "eth_down": increase("eth_down").astype(np.float32),
                         "eth_storm": increase("eth_storm").astype(np.float32)}
        read = rate("ost_read")
        ops, lat = rate("ost_read_ops"), rate("ost_read_lat")
        with np.errstate(invalid="ignore", divide="ignore"):
            latency = np.where(ops > 0, lat / ops, np.nan)
        node = {"fs_read": read.sum(axis=1).astype(np.float32), "fs_write": rate("ost_write").sum(axis=1).astype(np.float32),
                "psi_io": rate("psi_io_some").astype(np.float32), **roce_node}
        target = {"read": read.astype(np.float32), "latency": latency.astype(np.float32)}
        last = self.rows[-1]["gpu_job"]
        gpu_jobs = {(cl.names[i], k): str(int(last[i, k])) for i, k in zip(*np.nonzero(last >= 0))}
        job = {}
        if self.job_psi:
            ids = stack("gpu_job")
            held = np.zeros(ids.shape, bool)
            held[..., 1:] = (ids[..., 1:] == ids[..., :-1]) & (ids[..., 1:] >= 0)  # one cgroup across the step
            with np.errstate(invalid="ignore"):
                # a GPU's share of its job's counter, scaled by the job's GPUs on the node: the job's rate there
                frac = rate("job_psi_io") * stack("job_gpn")
            job = {"psi_io": job_means(np.where(held, ids, -1), np.where(held & (frac >= 0), frac, np.nan))}
        return Window(times=times, step=float(s.dt), nodes=tuple(cl.names), gpus=tuple(tuple(range(s.g)) for _ in range(s.n)),
                      rails=tuple(tuple(f"mlx5_{k}/1" for k in range(s.g)) for _ in range(s.n)),
                      targets=tuple(cl.osts), gpu=gpu, rail=rail, node=node, target=target, job=job, gpu_jobs=gpu_jobs,
                      **_facts(cl, s.g, s.fabric))

    def jobs(self):
        from dashboard.analysis.sim.slurm_view import build_snapshot
        return build_snapshot(self.sim).jobs


def window_from_history(sim) -> Window:
    """A window from what the simulator itself records (`sim.history`): GPU gauges, InfiniBand
    rates, per-OST read rates and read latency, node and per-job (cgroup) I/O pressure. It lacks write
    traffic and link events, so checkpoints wait `stall_min_seconds_blind`."""
    h = sim.history
    cl = sim.cluster
    times, util = h.window("util")

    def arr(name):
        return np.moveaxis(h.window(name)[1].astype(np.float32), 0, -1)

    lost = sim.gpu_lost[:, :, None]
    gpu = {k: np.where(lost, np.nan, arr(src)) for k, src in
           (("util", "util"), ("sm", "sm"), ("power", "power"), ("clock", "clock"), ("mem", "mem_used"))}
    read = arr("ost_read_rate")
    ids = np.moveaxis(h.window("gpu_job")[1], 0, -1)
    jobs = ids[..., -1] if len(times) else np.full((sim.n, sim.g), -1)
    job = {"psi_io": job_means(ids, arr("job_io_pressure"))} if len(times) else {}
    rail, node = {"ib_tx": arr("ib_tx_rate"), "ib_wait": arr("ib_wait_rate")}, {}
    if sim.fabric == "roce":  # no transmit wait on RoCE: ECN/CNP per rail, PFC pause (and storms) per node
        rail = {"ib_tx": rail["ib_tx"], "roce_cong": arr("roce_cong_rate")}
        node = {"eth_pause": arr("eth_pause_rate"), "eth_storm": arr("eth_storm_step")}
    return Window(times=np.asarray(times, np.float64), step=float(sim.dt), nodes=tuple(cl.names),
                  gpus=tuple(tuple(range(sim.g)) for _ in range(sim.n)),
                  rails=tuple(tuple(f"mlx5_{k}/1" for k in range(sim.g)) for _ in range(sim.n)), targets=tuple(cl.osts),
                  gpu=gpu, rail=rail,
                  node={"fs_read": read.sum(axis=1), "psi_io": arr("io_pressure"), **node}, target={"read": read, "latency": arr("ost_read_latency")}, job=job,
                  gpu_jobs={(cl.names[i], int(k)): str(int(jobs[i, k])) for i, k in zip(*np.nonzero(jobs >= 0))},
                  **_facts(cl, sim.g, sim.fabric))


def _facts(cl, g: int, fabric: str) -> dict:
    """What never changes in a window: each node's leaf switch, NVLink peers, GPU NUMA nodes and
    ports' link layers (the facts the agent exports as `gangwatch_sim_node_info`,
    `..._nvlink_peer_info`, `..._affinity_info`, `gangwatch_infiniband_port_info`)."""
    peers, numa = cl.nvlink_peers(), cl.gpu_numa()
    layers = dict.fromkeys((f"mlx5_{k}/1" for k in range(g)), LINK_LAYER[fabric])
    return {"leaf_of": {n: cl.leaves[cl.leaf_of[i]] for i, n in enumerate(cl.names)},
            "nvlink_peers": dict.fromkeys(cl.names, peers), "gpu_numa": dict.fromkeys(cl.names, numa),
            "link_layers": dict.fromkeys(cl.names, layers)}


# ------------------------------------------------------------------------------------ bundles

# gangwatch name -> (exporter name, scale, extra label filter) for `schema="exporters"`: what the
# same cluster looks like to a site running node_exporter + dcgm-exporter + a Lustre exporter.
EXPORTER_NAMES = {
    "gangwatch_gpu_utilization_ratio": ("DCGM_FI_DEV_GPU_UTIL", 100.0, None),
    "gangwatch_gpu_prof_sm_active_ratio": ("DCGM_FI_PROF_SM_ACTIVE", 1.0, None),
    "gangwatch_gpu_power_watts": ("DCGM_FI_DEV_POWER_USAGE", 1.0, None),
    "gangwatch_gpu_memory_used_bytes": ("DCGM_FI_DEV_FB_USED", 1.0 / (1 << 20), None),
    "gangwatch_gpu_clock_hz": ("DCGM_FI_DEV_SM_CLOCK", 1e-6, ("clock", "sm")),
    "gangwatch_infiniband_port_transmit_data_bytes_total": ("node_infiniband_port_data_transmitted_bytes_total", 1.0, None),
    "gangwatch_infiniband_port_receive_data_bytes_total": ("node_infiniband_port_data_received_bytes_total", 1.0, None),
    "gangwatch_infiniband_port_transmit_wait_ticks_total": ("node_infiniband_port_transmit_wait_total", 1.0, None),
    "gangwatch_infiniband_port_link_downed_total": ("node_infiniband_link_downed_total", 1.0, None),
    "gangwatch_pressure_waiting_seconds_total": ("node_pressure_io_waiting_seconds_total", 1.0, ("resource", "io")),
}


class BundleWriter:
    """Renders every virtual node at each `capture()` with the simulator's agent renderer (the real
    metric names) and accumulates OpenMetrics text for a bundle, in gangwatch's names (as Prometheus
    would have scraped them: `instance` = node:9810) or, with `schema="exporters"`, in
    node_exporter + dcgm-exporter (+ Lustre exporter) names with FQDN host labels."""

    def __init__(self, sim, schema: str = "gangwatch", domain: str = "cluster.local", **renderer):
        """`renderer`: NodeRenderer's options (target_idle_seconds: the agents' idle window)."""
        from dashboard.analysis.sim.render import NodeRenderer

        from .build import WANTED

        self.sim, self.schema, self.domain = sim, schema, domain
        self.renderer = NodeRenderer(sim, **renderer)
        self.wanted = WANTED | {"gangwatch_lustre_client_target_io_bytes_total"}
        self.samples: list = []
        self.start: float | None = None
        self.end: float | None = None

    def capture(self) -> None:
        from .exposition import Sample, iter_samples

        sim, t = self.sim, float(self.sim.t)
        self.start = t if self.start is None else self.start
        self.end = t
        for i, name in enumerate(sim.cluster.names):
            fams = [f for f in self.renderer.families(i) if f.name in self.wanted]
            text = "\n".join(line for f in fams for line in f.lines)
            gpu_job = {}
            first = len(self.samples)
            for s in iter_samples(text):
                if self.schema == "gangwatch":
                    self.samples.append(Sample(s.name, {**s.labels, "instance": f"{name}:9810"}, s.value, t))
                    continue
                if s.name == "gangwatch_job_gpu_info":
                    gpu_job[s.labels.get("gpu")] = s.labels.get("jobid")
                    continue
                if s.name == "gangwatch_lustre_client_target_io_bytes_total":
                    op = s.labels.get("operation")
                    if op in ("read", "write") and s.labels.get("type") == "osc":
                        self.samples.append(Sample(f"lustre_{op}_bytes_total", {"component": "client", "target": s.labels["target"],
                                                   "instance": f"{name}.{self.domain}:9169"}, s.value, t))
                    continue
                spec = EXPORTER_NAMES.get(s.name)
                if spec is None:
                    continue
                new, scale, need = spec
                if need is not None and s.labels.get(need[0]) != need[1]:
                    continue
                if new.startswith("DCGM_"):
                    labels = {"gpu": s.labels["gpu"], "device": f"nvidia{s.labels['gpu']}", "Hostname": f"{name}.{self.domain}",
                              "instance": f"10.0.{i // 250}.{i % 250}:9400"}
                else:
                    labels = {k: v for k, v in s.labels.items() if k in ("device", "port")}
                    labels["instance"] = f"{name}.{self.domain}:9100"
                self.samples.append(Sample(new, labels, s.value * scale, t))
            if self.schema != "gangwatch" and gpu_job:
                # dcgm-exporter's hpc_job label, from the prolog's GPU -> job mapping
                for s in self.samples[first:]:
                    job = gpu_job.get(s.labels.get("gpu")) if s.name.startswith("DCGM_") else None
                    if job:
                        s.labels["hpc_job"] = job

    def run(self, steps: int) -> "BundleWriter":
        """Capture now and after each of `steps` simulation steps."""
        self.capture()
        for _ in range(steps):
            self.sim.step()
            self.capture()
        return self

    def text(self) -> str:
        from .bundle import openmetrics

        return openmetrics(self.samples)

    def write(self, path: str) -> None:
        from dashboard.analysis.sim.slurm_view import build_snapshot

        from .bundle import squeue_json, write_bundle

        snap = build_snapshot(self.sim)
        jobs = [j for j in snap.jobs if j.state in ("RUNNING", "SUSPENDED")]
        write_bundle(path, self.text(), squeue_json(jobs, self.end or self.sim.t), self.start, self.end, "sim",
                     topology_conf=self.sim.cluster.topology_conf())
