"""The simulated cluster (dashboard/analysis/sim) as a metric source, without HTTP or text.

`SimRecorder` steps a `Simulation` and keeps, per step, exactly what the agent would export for
every virtual node (the same quantities `sim/render.py` writes as `gangwatch_*` series: GPU gauges,
InfiniBand and Lustre counters, PSI), in a bounded ring; `window()` turns the counters into rates
the way the other sources do and returns a `Window`. A lost GPU (XID 79) is NaN, as the agent
leaves its series out. Used by the accuracy benchmark, tests and `serve`'s demo mode; the bundle
path (sim -> OpenMetrics text -> bundle source) exercises the real parsers instead.
"""

from __future__ import annotations

import numpy as np

from dashboard.analysis.window import Window

GAUGES = ("util", "sm", "power", "clock", "mem_used")
COUNTERS = ("ib_tx", "ib_wait", "ib_downed", "ost_read", "ost_write", "ost_read_ops", "ost_read_lat", "psi_io_some")


class SimRecorder:
    def __init__(self, sim, capacity: int = 241):
        self.sim = sim
        self.capacity = int(capacity)
        self.times: list[float] = []
        self.rows: list[dict[str, np.ndarray]] = []
        self.record()

    def record(self) -> None:
        s = self.sim
        lost = s.gpu_lost
        row = {k: np.where(lost, np.nan, getattr(s, k)).astype(np.float32) for k in GAUGES}
        row.update({k: np.array(getattr(s, k), np.float64, copy=True) for k in COUNTERS})
        row["gpu_job"] = s._job_ids_now().copy()
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

        gpu = {"util": stack("util"), "sm": stack("sm"), "power": stack("power"), "clock": stack("clock"),
               "mem": stack("mem_used")}
        down = np.full((s.n, s.g, T), np.nan)
        down[..., 1:] = np.diff(stack("ib_downed"), axis=-1)
        rail = {"ib_tx": rate("ib_tx").astype(np.float32), "ib_wait": rate("ib_wait").astype(np.float32),
                "ib_down": down.astype(np.float32)}
        read = rate("ost_read")
        ops, lat = rate("ost_read_ops"), rate("ost_read_lat")
        with np.errstate(invalid="ignore", divide="ignore"):
            latency = np.where(ops > 0, lat / ops, np.nan)
        node = {"fs_read": read.sum(axis=1).astype(np.float32), "fs_write": rate("ost_write").sum(axis=1).astype(np.float32),
                "psi_io": rate("psi_io_some").astype(np.float32)}
        target = {"read": read.astype(np.float32), "latency": latency.astype(np.float32)}
        last = self.rows[-1]["gpu_job"]
        gpu_jobs = {(cl.names[i], k): str(int(last[i, k])) for i, k in zip(*np.nonzero(last >= 0))}
        return Window(times=times, step=float(s.dt), nodes=tuple(cl.names), gpus=tuple(tuple(range(s.g)) for _ in range(s.n)),
                      rails=tuple(tuple(f"mlx5_{k}/1" for k in range(s.g)) for _ in range(s.n)),
                      targets=tuple(cl.osts), gpu=gpu, rail=rail, node=node, target=target, gpu_jobs=gpu_jobs,
                      leaf_of={n: cl.leaves[cl.leaf_of[i]] for i, n in enumerate(cl.names)})

    def jobs(self):
        from dashboard.analysis.sim.slurm_view import build_snapshot
        return build_snapshot(self.sim).jobs


def window_from_history(sim) -> Window:
    """A window from what the simulator itself records (`sim.history`): GPU gauges, InfiniBand
    rates, per-OST read rates and I/O pressure. It lacks write traffic, read latency and link
    events, so checkpoints wait `stall_min_seconds_blind` and I/O culprits fall back to nodes."""
    h = sim.history
    cl = sim.cluster
    times, util = h.window("util")

    def arr(name):
        return np.moveaxis(h.window(name)[1].astype(np.float32), 0, -1)

    lost = sim.gpu_lost[:, :, None]
    gpu = {k: np.where(lost, np.nan, arr(src)) for k, src in
           (("util", "util"), ("sm", "sm"), ("power", "power"), ("clock", "clock"), ("mem", "mem_used"))}
    read = arr("ost_read_rate")
    jobs = h.window("gpu_job")[1][-1] if len(times) else np.full((sim.n, sim.g), -1)
    return Window(times=np.asarray(times, np.float64), step=float(sim.dt), nodes=tuple(cl.names),
                  gpus=tuple(tuple(range(sim.g)) for _ in range(sim.n)),
                  rails=tuple(tuple(f"mlx5_{k}/1" for k in range(sim.g)) for _ in range(sim.n)), targets=tuple(cl.osts),
                  gpu=gpu, rail={"ib_tx": arr("ib_tx_rate"), "ib_wait": arr("ib_wait_rate")},
                  node={"fs_read": read.sum(axis=1), "psi_io": arr("io_pressure")}, target={"read": read},
                  gpu_jobs={(cl.names[i], int(k)): str(int(jobs[i, k])) for i, k in zip(*np.nonzero(jobs >= 0))},
                  leaf_of={n: cl.leaves[cl.leaf_of[i]] for i, n in enumerate(cl.names)})
