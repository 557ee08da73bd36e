"""The simulator (`gangwatch demo`) as a datasource: its history, counters and findings, read in place."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

import numpy as np

from collectors.slurm.model import Snapshot
from dashboard.analysis.findings import Evidence, Verdict
from dashboard.datasource.arrays import aggregate_rows, build_network, downsample_cols, nanmean
from dashboard.datasource.base import BaseDatasource
from dashboard.datasource.convert import convert_diagnosis
from dashboard.datasource.records import (FLAGGED, SIGNALS, SUMMED, Findings, GpuNow, GpuTopology, Heatmap, Mount, Network,
                                          NodeInventory, NodeSeries, Port, SourceStatus, Status, Target, group_incidents,
                                          signal_label)

log = logging.getLogger(__name__)


class SimDatasource(BaseDatasource):
    """The simulator (dashboard.analysis.sim.Simulation) read in place, under the demo's lock.

    `snapshot_fn` lets `gangwatch demo` share its cached snapshot; without it one is built per
    simulated step."""

    simulated = True

    HEATMAP = ("gpu_util", 3600.0, 400, 240)  # what the overview asks for: precomputed in background mode
    # signal -> the simulator's history series it is read from
    HISTORY = {"gpu_util": "util", "gpu_sm": "sm", "gpu_power": "power", "gpu_temp": "temp", "ib_tx": "ib_tx_rate",
               "ib_wait": "ib_wait_rate", "roce_cong": "roce_cong_rate", "eth_pause": "eth_pause_rate",
               "eth_storm": "eth_storm_step", "io_read": "ost_read_rate", "io_pressure": "io_pressure"}

    def __init__(self, sim, lock=None, snapshot_fn: Callable[[], Snapshot] | None = None,
                 clock: Callable[[], float] = time.monotonic, background: bool = False):
        super().__init__()
        self.sim = sim
        self.lock = lock or threading.RLock()
        self._snapshot_fn = snapshot_fn
        self._clock = clock
        self._seen = (-1, 0.0)  # (step, monotonic time it was first seen)
        # Background mode (the demo): one thread recomputes snapshot, findings, plan and the
        # overview heatmap after each simulated step, and requests read the latest results, so
        # a browser refresh never waits for a diagnosis of thousands of nodes.
        self._background = background
        self._warm_step = -1
        self._samples: list[dict] = []  # counter samples of the last two steps seen (rates)
        self._stop = threading.Event()
        if background:
            self.warm()
            threading.Thread(target=self._warm_loop, name="gangwatch-dashboard-warm", daemon=True).start()

    def close(self) -> None:
        self._stop.set()

    def warm(self) -> None:
        step = self.sim.steps
        self._memo.get("snapshot", step, self._build_snapshot)
        self._memo.get("findings", step, self._compute_findings)
        self._memo.get("heatmap:%s:%s:%s:%s" % self.HEATMAP, step, lambda: self._heatmap(*self.HEATMAP))
        snap = self.snapshot()
        self._memo.get("plan", snap.taken_at, lambda: self._plan(snap))
        self._counters()
        self._warm_step = step

    def _warm_loop(self, poll: float = 0.2) -> None:
        while not self._stop.wait(poll):
            if self.sim.steps != self._warm_step:
                try:
                    self.warm()
                except Exception:  # keep serving the last results; the next step tries again
                    log.exception("dashboard precomputation failed")

    def now(self) -> float:
        return float(self.sim.t)

    @property
    def congestion(self) -> str:
        """The congestion signal the simulated fabric's agents export (CONGESTION)."""
        return "roce_cong" if self.sim.fabric == "roce" else "ib_wait"

    def _exports(self, signal: str) -> bool:
        """Whether the simulated agents export `signal`: a RoCE port counts no transmit wait (the
        physics keeps one to derive ECN marks from, which no real RoCE agent could show)."""
        return (self.HISTORY.get(signal) in self.sim.history.series
                and not (signal == "ib_wait" and self.congestion != "ib_wait"))

    def version(self) -> str:
        return str(self._warm_step if self._background else self.sim.steps)

    def _build_snapshot(self) -> Snapshot:
        if self._snapshot_fn is not None:
            return self._snapshot_fn()
        from dashboard.analysis.sim.slurm_view import build_snapshot

        with self.lock:
            return build_snapshot(self.sim)

    def snapshot(self) -> Snapshot:
        return self._memo.get("snapshot", self.sim.steps, self._build_snapshot, self._background)

    def status(self) -> Status:
        steps = self.sim.steps
        mono = self._clock()
        if steps != self._seen[0]:
            self._seen = (steps, mono)
        age = mono - self._seen[1]
        f = self.findings()
        return Status(True, self.now(), (SourceStatus("simulator", True, age, f"step {steps}"),
                                          SourceStatus(f"findings ({f.source})", f.source != "none",
                                                       max(0.0, self.now() - f.generated_at))),
                      self.version())

    # ---- history access (the simulator's ring buffer, read without copying what is not needed)

    def _window(self, name: str, t0: float, nodes: np.ndarray | None = None):
        h = self.sim.history
        with self.lock:
            k = min(h.count, h.capacity)
            order = np.arange(h.count - k, h.count) % h.capacity
            times = h.times[order]
            keep = order[times >= t0]
            arr = h.series[name]
            data = arr[keep] if nodes is None else arr[np.ix_(keep, nodes)]  # copy only the nodes asked for
            return h.times[keep].copy(), data

    def _node_level(self, signal: str, t0: float, nodes=None, gpu_mask=None) -> tuple[np.ndarray, np.ndarray]:
        """(times, nodes x time) of a signal in display units; per-GPU signals averaged over GPUs
        (over the GPUs in gpu_mask[t, node, gpu] when given)."""
        times, data = self._window(self.HISTORY[signal], t0, nodes)
        sig = SIGNALS[signal]
        data = data.astype(np.float32)
        if data.ndim == 3:
            if signal in SUMMED:
                z = data.sum(axis=2)
            elif gpu_mask is not None:
                z = nanmean(np.where(gpu_mask, data, np.nan), axis=2)
            else:
                z = data.mean(axis=2)
        else:
            z = data
        return times, (z.T * sig.scale)

    def _heatmap(self, signal, window, max_rows, max_cols) -> Heatmap:
        times, z = self._node_level(signal, self.now() - window)
        times, z = downsample_cols(times, z, max_cols)
        names = self.sim.cluster.names
        labels, members, zz = aggregate_rows(names, z, max_rows)
        return Heatmap(signal, labels, members, times, zz, len(names), signal_label(signal, self.congestion))

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        if not self._exports(signal):
            return None
        key = (signal, float(window), max_rows, max_cols)
        return self._memo.get("heatmap:%s:%s:%s:%s" % key, self.sim.steps,
                              lambda: self._heatmap(*key), self._background and key == self.HEATMAP)

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        snap = self.snapshot()
        job = snap.job(int(jobid)) if str(jobid).isdigit() else None
        if job is None or not job.nodes or not self._exports(signal):
            return None
        cl = self.sim.cluster
        idx = np.array([cl.index(n) for n in job.nodes])
        t0 = max(self.now() - window, (job.start_time or 0) - 300)
        mask = None
        if SIGNALS[signal].per_gpu:
            _, owner = self._window("gpu_job", t0, idx)
            mask = owner == int(jobid)
        times, z = self._node_level(signal, t0, idx, mask)
        times, z = downsample_cols(times, z, max_cols)
        return Heatmap(signal, job.nodes, tuple((n,) for n in job.nodes), times, z, len(job.nodes),
                       signal_label(signal, self.congestion))

    def node_series(self, node, signals, window=3600.0):
        try:
            i = self.sim.cluster.index(node)
        except KeyError:
            return None
        t0 = self.now() - window
        values, chans, times = {}, {}, np.zeros(0)
        for s in (s for s in signals if self._exports(s)):
            times, data = self._window(self.HISTORY[s], t0, np.array([i]))
            data = data[:, 0].astype(np.float32)  # time x (GPUs | OSTs) or time
            sig = SIGNALS[s]
            if s == "io_read":
                data = data.sum(axis=1)
            if data.ndim == 1:
                values[s], chans[s] = data[None, :] * sig.scale, (node,)
            else:
                values[s] = data.T * sig.scale
                chans[s] = tuple(f"GPU {k}" if sig.per_gpu else f"mlx5_{k}" for k in range(data.shape[1]))
        return NodeSeries(node, times, values, chans, {s: signal_label(s, self.congestion) for s in values})

    def ost_series(self, window=3600.0):
        """OST x time: read bytes/s summed over all clients."""
        times, data = self._window("ost_read_rate", self.now() - window)
        z = data.astype(np.float64).sum(axis=1).T
        times, z = downsample_cols(times, z, 240)
        osts = tuple(self.sim.cluster.osts)
        return Heatmap("io_read", osts, tuple((o,) for o in osts), times, z, len(osts))

    def leaf_series(self, window=3600.0):
        """Leaf switch x time: the fabric's congestion signal summed over the leaf's nodes."""
        times, data = self._window(self.HISTORY[self.congestion], self.now() - window)
        node_sum = data.astype(np.float64).sum(axis=2)  # time x node
        leaf_of = self.sim.cluster.leaf_of
        leaves = tuple(self.sim.cluster.leaves)
        z = np.vstack([node_sum[:, leaf_of == k].sum(axis=1) for k in range(len(leaves))])
        times, z = downsample_cols(times, z, 240)
        return Heatmap(self.congestion, leaves, tuple((lf,) for lf in leaves), times, z, len(leaves))

    def leaf_of(self, node: str) -> str:
        cl = self.sim.cluster
        try:
            return cl.leaves[int(cl.leaf_of[cl.index(node)])]
        except KeyError:
            return ""

    # ---- inventory: the simulated agent's current counters (what its /metrics would show)

    SIM_NOTE = ("The simulator exports no diskstats, filesystem or netdev series, nor the GPUs' PCIe levels "
                "(gangwatch_gpu_topology_info): those are unknown here.")

    def gpu_topology(self, node):
        cl = self.sim.cluster
        try:
            cl.index(node)
        except KeyError:
            return GpuTopology()
        return GpuTopology(cl.nvlink_peers(), cl.gpu_numa())  # what its gangwatch_gpu_nvlink_peer_info / affinity say

    def _counters(self) -> tuple[dict, dict | None]:
        """(this step's sample of the cumulative counters, an earlier step's sample or None): rates
        come from their difference, as a Prometheus rate() over the agent's counters would."""
        step = self.sim.steps
        samples = self._samples
        if samples and samples[-1]["step"] == step:
            return samples[-1], samples[0] if len(samples) > 1 else None
        s = self.sim
        with self.lock:
            cur = {"step": s.steps, "t": float(s.t), "ost_write": s.ost_write.sum(axis=0),
                   "ost_ops": s.ost_read_ops.sum(axis=0) + s.ost_write_ops.sum(axis=0),
                   "ost_read_ops": s.ost_read_ops.sum(axis=0), "ost_lat": s.ost_read_lat.sum(axis=0),
                   "mdt_ops": float(s.mdt_ops.sum()), "node_write": s.ost_write.sum(axis=1),
                   "errors": s.ib_symerr + s.ib_downed}
        prev = samples[-1] if samples and samples[-1]["t"] < cur["t"] else None
        self._samples = [prev, cur] if prev is not None else [cur]
        return cur, prev

    def _rate(self, key: str) -> np.ndarray | float | None:
        cur, prev = self._counters()
        if prev is None:
            return None
        return (cur[key] - prev[key]) / (cur["t"] - prev["t"])

    def _port(self, i: int, k: int, arrays: dict, node_i: int | None = None) -> Port:
        """Port k of row i of `arrays` (node_i: the node's index when the arrays hold only its row)."""
        cl = self.sim.cluster
        recent = arrays["recent"]
        n = i if node_i is None else node_i
        return Port(cl.names[n], f"mlx5_{k}/1", cl.leaves[int(cl.leaf_of[n])], bool(arrays["up"][i, k]),
                    float(arrays["link"]), float(arrays["tx"][i, k]), float(arrays["wait"][i, k]),
                    float(arrays["symerr"][i, k]), float(arrays["downed"][i, k]),
                    None if recent is None else float(recent[i, k]))

    def _port_arrays(self, rows=slice(None)) -> dict:
        from dashboard.analysis.sim import cluster as C

        s = self.sim
        with self.lock:
            wait = s.roce_cong_rate if self.congestion == "roce_cong" else s.ib_wait_rate
            arrays = {"tx": s.ib_rate[rows].copy(), "wait": wait[rows].copy(), "up": s.ib_up[rows].copy(),
                      "symerr": s.ib_symerr[rows].copy(), "downed": s.ib_downed[rows].copy()}
        cur, prev = self._counters()
        arrays["recent"] = None if prev is None else (cur["errors"] - prev["errors"])[rows]
        arrays["link"] = C.IB_RATE_BYTES
        return arrays

    def network(self):
        return self._memo.get("network", self.sim.steps, self._network)

    def _network(self) -> Network:
        cl = self.sim.cluster
        a = self._port_arrays()
        net = build_network(cl.leaf_of, list(cl.leaves), np.ones(a["tx"].shape, bool), a["tx"], a["wait"],
                            lambda i, k: self._port(i, k, a), up=a["up"], recent=a["recent"])
        return Network(net.switches, net.ports, net.total_ports, "Per-switch figures are sums over the switch's "
                       "nodes' HCA ports (simulated); spine switches are not scraped.", self.congestion)

    def storage_targets(self):
        return self._memo.get("targets", self.sim.steps, self._targets)

    def _targets(self) -> tuple[Target, ...]:
        from dashboard.analysis.sim import cluster as C

        s, cl = self.sim, self.sim.cluster
        cur, prev = self._counters()
        with self.lock:
            read = s.ost_rate.sum(axis=0).astype(np.float64)
            inflight = s.ost_inflight.sum(axis=0).astype(np.float64)
        write, ops, rops, lat = (self._rate(k) for k in ("ost_write", "ost_ops", "ost_read_ops", "ost_lat"))
        mdt = self._rate("mdt_ops")
        n = cl.n  # every simulated client keeps its imports connected (the agent's import_connected is 1)
        out = []
        for o, name in enumerate(cl.osts):
            latency = None if lat is None or not rops[o] else float(lat[o] / rops[o])
            out.append(Target(C.FS_NAME, name, "OST", float(read[o]), None if write is None else float(write[o]),
                              None if ops is None else float(ops[o]), latency, float(inflight[o]), n, n))
        for name in cl.mdts:
            out.append(Target(C.FS_NAME, name, "MDT", None, None, None if mdt is None else mdt / len(cl.mdts),
                              None, None, n, n))
        return tuple(out)

    def node_inventory(self, node):
        from dashboard.analysis.sim import cluster as C

        s, cl = self.sim, self.sim.cluster
        try:
            i = cl.index(node)
        except KeyError:
            return None
        with self.lock:
            lost = s.gpu_lost[i].copy()
            util, power, temp = s.util[i].copy(), s.power[i].copy(), s.temp[i].copy()
            read = float(s.ost_rate[i].sum())
        gpus = tuple(GpuNow(k) if lost[k] else GpuNow(k, float(util[k]), float(power[k]), float(temp[k]))
                     for k in range(cl.g))
        a = self._port_arrays(slice(i, i + 1))
        ports = tuple(self._port(0, k, a, i) for k in range(cl.g))
        write = self._rate("node_write")
        nt = len(cl.osts) + len(cl.mdts)
        fs = (Mount(C.FS_NAME, "lustre", nt, nt, read, None if write is None else float(write[i])),)
        return NodeInventory(node, gpus, ports, fs, None, self.gpu_topology(node), self.SIM_NOTE, self.congestion)

    # ---- findings

    def findings(self) -> Findings:
        return self._memo.get("findings", self.sim.steps, self._compute_findings, self._background)

    def backfill(self):
        if not self._background:
            return super().backfill()
        snap = self.snapshot()
        return self._memo.get("plan", snap.taken_at, lambda: self._plan(snap), True)

    def _compute_findings(self) -> Findings:
        diag = _diagnosis_for_sim(self)
        if diag is not None:
            return diag
        return self._truth_findings()

    def _truth_findings(self) -> Findings:
        """Ground truth of the injected faults as verdicts, for when no diagnosis is installed.
        Labelled "simulator ground truth" wherever shown: it is what the diagnosis should find."""
        sim, now = self.sim, self.now()
        with self.lock:
            truth = [g for g in sim.truth if g.end > now - sim.dt]
            running = {str(j): (len(r.nodes), r.gpus, tuple(sim.cluster.names[i] for i in r.nodes))
                       for j, r in sim.running.items()}
        verdicts = []
        for g in truth:
            if g.cause not in FLAGGED:
                continue
            for jid, (first, last) in g.jobs.items():
                if jid not in running or last < now - 2 * sim.dt:
                    continue
                _, gpus, nodes = running[jid]
                # the share of the job's GPU time the fault wastes, from the simulator's own physics
                lost = gpus * max(0.0, last - first + sim.dt) / 3600.0 * _wasted_share(g.cause, gpus)
                verdicts.append(Verdict(jid, nodes, gpus, g.cause, 1.0, first, g.culprit,
                                        evidence=self._evidence(jid, nodes, g.cause, first), gpu_hours_lost=round(lost, 3),
                                        reason=f"injected fault #{g.fault_id}: {g.kind}"))
        verdicts.sort(key=lambda v: -(v.gpu_hours_lost or 0))
        return Findings(now, "simulator ground truth", tuple(verdicts), group_incidents(verdicts))

    def _evidence(self, jobid: str, nodes: tuple[str, ...], cause: str, since: float) -> tuple[Evidence, ...]:
        """Each node's signal since the stall began against the job's level before it."""
        signal = {"stalled_io": "io_pressure", "stalled_network": self.congestion}.get(cause, "gpu_sm")
        cl = self.sim.cluster
        idx = np.array([cl.index(n) for n in nodes])
        t0 = since - 900
        times, z = self._node_level(signal, t0, idx)
        if not len(times):
            return ()
        before, after = times < since, times >= since
        out = []
        for k, n in enumerate(nodes[:64]):
            with np.errstate(all="ignore"):
                base = float(np.nanmedian(z[k, before])) if before.any() else None
                val = float(np.nanmedian(z[k, after])) if after.any() else None
            out.append(Evidence(SIGNALS[signal].label, n, None if val is None or math.isnan(val) else round(val, 3),
                                None if base is None or math.isnan(base) else round(base, 3), None))
        return tuple(out)


def _wasted_share(cause: str, gpus: int) -> float:
    from dashboard.analysis.sim import engine

    return {"stalled_io": 1.0 - engine.SLOW_OST_FACTOR, "stalled_network": 0.85, "hung": 1.0,
            "straggler": 1.0 - engine.THROTTLED_CLOCK, "idle_gpus": (gpus - 1) / max(1, gpus)}.get(cause, 1.0)


def _diagnosis_for_sim(ds: SimDatasource) -> Findings | None:
    """The diagnosis over the simulator's history (findings_api.simulation_diagnosis: the demo's
    one path), or None when it fails. Only the window's copy is taken under the simulation's lock;
    the diagnosis itself (seconds at 4,096 nodes) runs outside it."""
    try:
        from dashboard.findings_api import simulation_diagnosis

        return convert_diagnosis(simulation_diagnosis(ds.sim, ds.snapshot(), ds.lock), ds.now())
    except Exception:
        log.exception("diagnosis failed; showing the simulator's ground truth")
        return None
