"""The dashboard's one data-source facade: everything a page shows comes through `Datasource`.

Sources composed here (and nowhere else in the dashboard):
- the scheduler: a `collectors.slurm.model.Snapshot`, from the simulator, a slurm-exporter's
  `/api/v1/snapshot`, the local Slurm CLI (collectors.slurm.sources.Poller) or a snapshot file;
- metrics: per-node and per-GPU time series (the simulator's in-memory history; a Prometheus or
  embedded metric source where one is configured);
- findings: verdicts per running job and incidents, from the diagnosis when it is importable, else
  (simulator only) the simulator's fault ground truth, labelled as such;
- the backfill plan: dashboard.analysis.planner over the current snapshot;
- inventory now: per node its GPUs, InfiniBand ports, filesystems, disks and GPU topology
  (`node_inventory`, `gpu_topology`), per switch and port (`network`), per filesystem target
  (`storage_targets`), from the simulator's counters or the metric window; None where the source
  has no such series (pages show "unknown", never 0), and counter rates only from two samples.

Everything returned is plain frozen data (no Dash objects); pages hand it to dashboard/figures.py.
Privileges: none. Failure modes: a source that fails or is missing yields None / empty results and
says so in `status()` (each source's age and last error); no method raises for a missing source.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Protocol

import numpy as np

from collectors.slurm.model import Job, Snapshot
from dashboard.analysis import findings as model

log = logging.getLogger(__name__)

# The verdict states that flag a job (dashboard/analysis/findings.py holds them all).
FLAGGED = model.STALL_STATES
# Node-level value of a per-rail or per-target signal: the sum over rails / targets (traffic adds up).
SUMMED = frozenset({"ib_tx", "ib_wait", "io_read"})
# A source whose data is older than this many refresh periods is shown as stale.
STALE_AFTER_SECONDS = 120.0


@dataclass(frozen=True)
class Signal:
    key: str
    label: str
    unit: str  # plotly tick suffix / hover unit
    scale: float = 1.0  # multiply raw values for display (ratio -> percent)
    per_gpu: bool = True
    metric: str = ""  # the agent's metric the signal is derived from


SIGNALS: dict[str, Signal] = {s.key: s for s in (
    Signal("gpu_util", "GPU utilisation", "%", 100.0, True, "gangwatch_gpu_utilization_ratio"),
    Signal("gpu_sm", "SM activity", "%", 100.0, True, "gangwatch_gpu_sm_active_ratio"),
    Signal("gpu_power", "GPU power", "W", 1.0, True, "gangwatch_gpu_power_watts"),
    Signal("gpu_temp", "GPU temperature", "°C", 1.0, True, "gangwatch_gpu_temperature_celsius"),
    Signal("ib_tx", "InfiniBand transmit", "B/s", 1.0, False, "gangwatch_infiniband_port_transmit_bytes_total"),
    Signal("ib_wait", "InfiniBand transmit wait", "ticks/s", 1.0, False, "gangwatch_infiniband_port_transmit_wait_total"),
    Signal("io_read", "Lustre read", "B/s", 1.0, False, "gangwatch_lustre_client_target_io_bytes_total"),
    Signal("io_pressure", "I/O pressure (some)", "%", 100.0, False, "gangwatch_pressure_waiting_seconds_total"),
)}


# ----------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Evidence:
    signal: str
    node: str = ""
    value: float | None = None
    baseline: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class Verdict:
    jobid: str
    state: str
    nodes: tuple[str, ...] = ()
    gpus: int | None = None
    confidence: float | None = None
    since: float | None = None
    culprit: str = ""
    evidence: tuple[Evidence, ...] = ()
    gpu_hours_lost: float | None = None
    detail: str = ""
    culprit_kind: str = ""
    placement: tuple[tuple[str, str, str, str], ...] = ()  # (kind, node, detail, expected cost)

    def __post_init__(self):
        # a job the diagnosis could not judge has lost an unknown amount, not 0 GPU-hours
        if self.state == "insufficient_data" and self.gpu_hours_lost is not None:
            object.__setattr__(self, "gpu_hours_lost", None)

    @property
    def flagged(self) -> bool:
        return self.state in FLAGGED

    @property
    def unknown_why(self) -> str:
        """Why this job's GPU-hours lost are unknown ("" when they are known)."""
        if self.gpu_hours_lost is not None:
            return ""
        if self.state == "insufficient_data":
            return self.detail or "not judged: the metric window lacks the GPU data to judge this job"
        return "the findings carry no GPU-hours lost figure for this job"


@dataclass(frozen=True)
class Incident:
    culprit: str
    cause: str
    jobs: tuple[str, ...]
    gpu_hours_lost: float
    since: float | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Findings:
    """The pages' view of the findings. `diagnosis` is the record it was made from, when there is
    one: `/api/v1/findings` and `/metrics` serve that, so nothing is lost in the pages' view."""

    generated_at: float
    source: str  # "diagnosis", "simulator ground truth", "none"
    verdicts: tuple[Verdict, ...] = ()
    incidents: tuple[Incident, ...] = ()
    diagnosis: model.Diagnosis | None = None
    degraded: str = ""  # why these findings may be wrong or old (a metric source down); "" when not

    def verdict(self, jobid: str) -> Verdict | None:
        for v in self.verdicts:
            if v.jobid == str(jobid):
                return v
        return None

    def by_job(self) -> dict[str, Verdict]:
        return {v.jobid: v for v in self.verdicts}

    def as_diagnosis(self) -> model.Diagnosis:
        """The findings as the one findings model (the record itself where there is one); findings
        kept from before a metric source died say so in their notes."""
        if self.diagnosis is not None:
            d = self.diagnosis
            return replace(d, notes=tuple(d.notes) + (f"degraded: {self.degraded}",)) if self.degraded else d
        verdicts = tuple(model.Verdict(v.jobid, v.nodes, v.gpus, v.state, v.confidence, v.since, v.culprit,
                                       v.culprit_kind,
                                       tuple(model.Evidence(e.signal, e.node, e.value, e.baseline, e.threshold)
                                             for e in v.evidence),
                                       v.gpu_hours_lost, v.detail, tuple(model.Placement(*p) for p in v.placement))
                         for v in self.verdicts)
        incidents = tuple(model.Incident(i.culprit, "", i.cause, i.jobs, i.gpu_hours_lost, i.since)
                          for i in self.incidents)
        return model.Diagnosis(self.generated_at, verdicts, incidents, source=self.source,
                               notes=(f"degraded: {self.degraded}",) if self.degraded else ())


def group_incidents(verdicts: tuple[Verdict, ...] | list[Verdict]) -> tuple[Incident, ...]:
    """Flagged verdicts that share a culprit (or, without one, a job) are one incident, worst first."""
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        if v.flagged:
            groups.setdefault((v.culprit or f"job {v.jobid}", v.state), []).append(v)
    out = []
    for (culprit, cause), vs in groups.items():
        lost = sum(v.gpu_hours_lost or 0.0 for v in vs)
        since = min((v.since for v in vs if v.since is not None), default=None)
        nodes = tuple(sorted({n for v in vs for n in v.nodes}))
        out.append(Incident(culprit, cause, tuple(v.jobid for v in vs), round(lost, 3), since, nodes))
    out.sort(key=lambda i: (-i.gpu_hours_lost, i.culprit))
    return tuple(out)


@dataclass(frozen=True)
class Heatmap:
    """Rows (nodes, or bins of nodes) x time; z in display units, NaN where unknown."""

    signal: str
    rows: tuple[str, ...]  # row labels
    row_nodes: tuple[tuple[str, ...], ...]  # nodes aggregated into each row
    times: np.ndarray
    z: np.ndarray  # len(rows) x len(times)
    total_nodes: int


@dataclass(frozen=True)
class NodeSeries:
    node: str
    times: np.ndarray
    values: dict[str, np.ndarray]  # signal -> channels x time (GPUs, or one row for node-level signals)
    channels: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SourceStatus:
    name: str
    ok: bool
    age_seconds: float | None  # None: never got data
    detail: str = ""

    @property
    def stale(self) -> bool:
        return (not self.ok) or self.age_seconds is None or self.age_seconds > STALE_AFTER_SECONDS


@dataclass(frozen=True)
class Status:
    simulated: bool
    now: float
    sources: tuple[SourceStatus, ...]
    version: str = ""  # changes when the data changes; callbacks skip work when it does not

    @property
    def stale(self) -> tuple[SourceStatus, ...]:
        return tuple(s for s in self.sources if s.stale)

    def to_json(self) -> dict:
        """`/healthz`: "ok" true only when every source answered its latest poll with fresh data;
        otherwise "status" is "degraded" and "reasons" says which source and why. The HTTP status
        stays 200: the server is alive (a liveness probe must not restart it for a dead upstream)."""
        bad = self.stale
        reasons = [f"{s.name}: " + (s.detail or ("no data yet" if s.age_seconds is None else
                                                   "down" if not s.ok else f"data {fmt_age(s.age_seconds)} old"))
                   for s in bad]
        return {"status": "degraded" if bad else "ok", "ok": not bad, "reasons": reasons,
                "simulated": self.simulated, "now": self.now,
                "sources": {s.name: {"ok": s.ok, "age_seconds": None if s.age_seconds is None else round(s.age_seconds, 3),
                                     "stale": s.stale, "detail": s.detail} for s in self.sources}}


@dataclass(frozen=True)
class Port:
    """One InfiniBand port (an HCA's port, "mlx5_0/1") as the node's agent reports it; None = unknown."""

    node: str
    device: str
    switch: str = ""  # leaf switch, "" when the source does not say
    up: bool | None = None
    rate_bytes: float | None = None  # the link's trained data rate, bytes/s
    tx_bps: float | None = None  # transmit, bytes/s now
    wait_per_s: float | None = None  # port_xmit_wait ticks/s now (congestion)
    symbol_errors: float | None = None  # counter since boot
    link_downed: float | None = None  # counter since boot
    errors_recent: float | None = None  # symbol errors + link downs in the last interval


@dataclass(frozen=True)
class SwitchStat:
    """A leaf switch, from its nodes' ports (the switch's own counters are not scraped)."""

    switch: str
    nodes: int
    ports: int
    ports_down: int | None
    tx_bps: float | None
    wait_per_s: float | None
    errors_recent: float | None


@dataclass(frozen=True)
class Network:
    switches: tuple[SwitchStat, ...]
    ports: tuple[Port, ...]  # the ports worth a look: most congested, down, with new errors (bounded)
    total_ports: int
    note: str = ""


@dataclass(frozen=True)
class Target:
    """A filesystem target (OST, MDT, NSD) summed over the clients that report it; None = unknown."""

    fs: str
    name: str
    kind: str  # "OST", "MDT", "NSD"
    read_bps: float | None = None
    write_bps: float | None = None
    ops_per_s: float | None = None
    latency_s: float | None = None  # mean read RPC latency over the last interval
    rpcs_in_flight: float | None = None
    clients_connected: int | None = None
    clients: int | None = None

    @property
    def state(self) -> str:
        if self.clients_connected is None or not self.clients:
            return "unknown"
        if self.clients_connected == self.clients:
            return "connected"
        return f"disconnected on {self.clients - self.clients_connected} of {self.clients} clients"


@dataclass(frozen=True)
class GpuNow:
    index: int
    util: float | None = None  # ratio 0-1
    power_w: float | None = None
    temp_c: float | None = None


@dataclass(frozen=True)
class Mount:
    """A filesystem the node's client mounts, as its client counters show it."""

    fs: str
    kind: str  # "lustre", "gpfs"
    targets: int
    connected: int | None
    read_bps: float | None
    write_bps: float | None = None


@dataclass(frozen=True)
class GpuTopology:
    """What the agent's gangwatch_gpu_nvlink_peer_info / gangwatch_gpu_topology_info say; None = unknown."""

    nvlink_peers: frozenset[tuple[int, int]] | None = None
    numa: dict[int, int] | None = None

    @property
    def known(self) -> bool:
        return self.nvlink_peers is not None or self.numa is not None

    def describe(self, gpus) -> str:
        """The topology among `gpus` of one node, in words ("unknown" when the source has none)."""
        gpus = sorted(set(gpus))
        parts = []
        if self.nvlink_peers is not None and len(gpus) > 1:
            pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
            linked = sum(1 for p in pairs if p in self.nvlink_peers)
            parts.append("all NVLink peers" if linked == len(pairs) else f"{linked} of {len(pairs)} pairs NVLink peers, "
                         "the rest over PCIe")
        if self.numa is not None:
            nodes = sorted({self.numa[g] for g in gpus if g in self.numa})
            if nodes:
                parts.append("NUMA " + ",".join(map(str, nodes)))
        if not parts:
            return "single GPU" if len(gpus) == 1 and self.known else "unknown"
        return "; ".join(parts)


@dataclass(frozen=True)
class NodeInventory:
    node: str
    gpus: tuple[GpuNow, ...] | None = None
    ports: tuple[Port, ...] | None = None
    filesystems: tuple[Mount, ...] | None = None
    disks: tuple[tuple[str, float | None, float | None], ...] | None = None  # (device, read B/s, write B/s)
    topology: GpuTopology = GpuTopology()
    note: str = ""


class Datasource(Protocol):
    def now(self) -> float: ...
    def status(self) -> Status: ...
    def snapshot(self) -> Snapshot | None: ...
    def findings(self) -> Findings: ...
    def backfill(self): ...  # dashboard.analysis.planner.BackfillPlan | None
    def heatmap(self, signal: str = "gpu_util", window: float = 3600.0, max_rows: int = 400,
                max_cols: int = 240) -> Heatmap | None: ...
    def job_series(self, jobid: str, signal: str, window: float = 3600.0, max_cols: int = 240) -> Heatmap | None: ...
    def node_series(self, node: str, signals: tuple[str, ...], window: float = 3600.0) -> NodeSeries | None: ...
    def ost_series(self, window: float = 3600.0) -> Heatmap | None: ...
    def leaf_series(self, window: float = 3600.0) -> Heatmap | None: ...
    def node_inventory(self, node: str) -> NodeInventory | None: ...
    def gpu_topology(self, node: str) -> GpuTopology: ...
    def network(self) -> Network | None: ...
    def storage_targets(self) -> tuple[Target, ...] | None: ...


# ----------------------------------------------------------------------------- pure helpers

def _nansum(a: np.ndarray, axis: int) -> np.ndarray:
    """Sum over channels; NaN only where every channel is unknown."""
    return np.where(np.isnan(a).all(axis=axis), np.nan, np.nansum(a, axis=axis))


def nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    """np.nanmean without the warning for all-NaN slices (unknown stays NaN: that is the point)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def downsample_cols(times: np.ndarray, z: np.ndarray, max_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Average consecutive columns so that at most max_cols remain (NaN-aware)."""
    t = len(times)
    if t <= max_cols or max_cols < 1:
        return times, z
    if t <= max_cols * 1.25:  # a few samples over (an hour at 15 s is 241): drop the oldest, keep resolution
        return times[-max_cols:], z[:, -max_cols:]
    k = math.ceil(t / max_cols)
    cut = t - (t // k) * k  # drop the oldest columns that do not fill a bin
    times, z = times[cut:], z[:, cut:]
    m = len(times) // k
    zz = nanmean(z.reshape(z.shape[0], m, k), axis=2) if z.size else z.reshape(z.shape[0], m)
    return times.reshape(m, k)[:, -1], zz


def aggregate_rows(names: list[str] | tuple[str, ...], z: np.ndarray, max_rows: int,
                   order: str = "mean") -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], np.ndarray]:
    """Sort nodes (by their mean, lowest first, so idle nodes come to the top) and average
    consecutive nodes into at most max_rows rows. Returns (labels, nodes per row, z)."""
    n = len(names)
    if n == 0:
        return (), (), z.reshape(0, z.shape[1] if z.ndim == 2 else 0)
    if order == "mean":
        key = nanmean(z, axis=1)
        key = np.where(np.isnan(key), -1.0, key)  # unknown first: it needs looking at
        idx = np.lexsort((np.arange(n), key))
    else:
        idx = np.arange(n)
    per = max(1, math.ceil(n / max_rows))
    labels, members, rows = [], [], []
    for start in range(0, n, per):
        sel = idx[start:start + per]
        group = tuple(names[i] for i in sel)
        members.append(group)
        labels.append(group[0] if len(group) == 1 else f"{group[0]} +{len(group) - 1}")
        if len(sel) == 1:
            rows.append(z[sel[0]])
        else:
            rows.append(nanmean(z[sel], axis=0))
    return tuple(labels), tuple(members), np.vstack(rows)


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


# ------------------------------------------------------------- inventory builders (shared)

def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def build_network(leaf_idx: np.ndarray, leaves: list[str], valid: np.ndarray, tx: np.ndarray, wait: np.ndarray,
                  port_of: Callable[[int, int], Port], up: np.ndarray | None = None,
                  recent: np.ndarray | None = None, limit: int = 40) -> Network:
    """Per-switch sums and the ports worth a look from node x port arrays (NaN = unknown).
    `leaf_idx[i]` is node i's switch in `leaves` (-1: not known); `port_of(i, k)` builds port k of node i."""
    names = list(leaves) + ["unknown switch"]
    idx = np.where(leaf_idx < 0, len(leaves), leaf_idx)
    per_port = np.repeat(idx, valid.shape[1]).reshape(valid.shape)[valid]
    m = len(names)

    def summed(a):
        if a is None:
            return [None] * m
        v = a[valid].astype(np.float64)
        known = np.bincount(per_port, weights=np.isfinite(v), minlength=m)
        tot = np.bincount(per_port, weights=np.nan_to_num(v), minlength=m)
        return [float(t) if k else None for t, k in zip(tot, known)]

    nodes = np.bincount(idx, minlength=m)
    ports = np.bincount(per_port, minlength=m)
    down = None if up is None else np.bincount(per_port, weights=~up[valid], minlength=m)
    txs, waits, errs = summed(tx), summed(wait), summed(recent)
    switches = tuple(SwitchStat(names[k], int(nodes[k]), int(ports[k]), None if down is None else int(down[k]),
                                txs[k], waits[k], errs[k]) for k in range(m) if nodes[k])
    # the worst ports: most congested first, then any down or with new errors
    score = np.where(valid, np.nan_to_num(wait.astype(np.float64), nan=-1.0), -np.inf).ravel()
    pick = list(np.argsort(-score, kind="stable")[:limit])
    for flag in ((None if up is None else valid & ~up), (None if recent is None else valid & (np.nan_to_num(recent) > 0))):
        if flag is not None:
            pick += list(np.flatnonzero(flag.ravel())[:limit])
    seen, out = set(), []
    r = valid.shape[1]
    for f in pick:
        if f not in seen and score[f] > -np.inf:
            seen.add(f)
            out.append(port_of(int(f) // r, int(f) % r))
    return Network(switches, tuple(out), int(valid.sum()))


# -------------------------------------------------------------------------------- backfill

def planner_input(snap: Snapshot):
    """The Slurm model -> the planner's input (the planner's own adapter, with Slurm's scheduling
    order, usable-node rules and request normalisation)."""
    from dashboard.analysis.snapshot_to_planner import snapshot_to_planner

    return snapshot_to_planner(snap)


class _Memo:
    """One cached value per key (the data version): recomputed only when the data changed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._store: dict[str, tuple[object, object]] = {}

    def get(self, name: str, key, compute: Callable[[], object], stale_ok: bool = False):
        """The value for `key`; with stale_ok, whatever value is there (a background thread
        refreshes it), computing only when there is none yet."""
        with self._lock:
            hit = self._store.get(name)
        if hit is not None and (hit[0] == key or stale_ok):
            return hit[1]
        value = compute()
        with self._lock:
            self._store[name] = (key, value)
        return value


class BaseDatasource:
    """What every datasource shares: the plan and findings derived from the snapshot, cached per
    data version. Subclasses provide snapshot(), now(), status() and the series."""

    simulated = False

    def __init__(self):
        self._memo = _Memo()
        self._plan_error = ""

    def version(self) -> str:
        snap = self.snapshot()
        return f"{snap.taken_at if snap else 0}"

    def _plan(self, snap: Snapshot):
        from dashboard.analysis import planner

        try:
            self._plan_error = ""
            return planner.plan(planner_input(snap))
        except Exception as exc:  # the planner must not take a page down
            log.exception("backfill planner failed")
            self._plan_error = f"{type(exc).__name__}: {exc}"
            return None

    def backfill(self):
        snap = self.snapshot()
        if snap is None:
            return None
        return self._memo.get("plan", snap.taken_at, lambda: self._plan(snap))

    def findings(self) -> Findings:
        return Findings(self.now(), "none")

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        return None

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        return None

    def node_series(self, node, signals, window=3600.0):
        return None

    def ost_series(self, window=3600.0):
        return None

    def leaf_series(self, window=3600.0):
        return None

    def node_inventory(self, node):
        return None

    def gpu_topology(self, node):
        return GpuTopology()

    def network(self):
        return None

    def storage_targets(self):
        return None


# --------------------------------------------------------------------------- in-memory source

class MemoryDatasource(BaseDatasource):
    """Fixed data held in memory: a snapshot, findings, and optional per-node series.

    `series[node][signal]` is a (channels x time) array sharing `times`. Used by tests and by
    `serve --snapshot FILE` (no metrics there: pages say so)."""

    def __init__(self, snapshot: Snapshot | None, findings: Findings | None = None, times=None,
                 series: dict[str, dict[str, np.ndarray]] | None = None, simulated: bool = False,
                 now: float | None = None, source_name: str = "snapshot"):
        super().__init__()
        self._snap = snapshot
        self._findings = findings
        self._times = np.asarray(times if times is not None else [], float)
        self._series = series or {}
        self.simulated = simulated
        self._now = now
        self.source_name = source_name

    def now(self) -> float:
        if self._now is not None:
            return self._now
        return self._snap.taken_at if self._snap else time.time()

    def snapshot(self):
        return self._snap

    def findings(self):
        return self._findings or Findings(self.now(), "none")

    def status(self) -> Status:
        now = self.now()
        src = [SourceStatus(self.source_name, self._snap is not None,
                            None if self._snap is None else self._snap.age(now))]
        if self._series:
            src.append(SourceStatus("metrics", True, max(0.0, now - float(self._times[-1])) if len(self._times) else None))
        return Status(self.simulated, now, tuple(src), self.version())

    def _node_matrix(self, signal: str, nodes: list[str]) -> np.ndarray:
        rows = []
        combine = _nansum if signal in SUMMED else nanmean
        for n in nodes:
            a = self._series.get(n, {}).get(signal)
            rows.append(combine(a, axis=0) if a is not None and a.size else np.full(len(self._times), np.nan))
        return np.vstack(rows) if rows else np.zeros((0, len(self._times)))

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        if not self._series or self._snap is None:
            return None
        names = [n.name for n in self._snap.nodes]
        z = self._node_matrix(signal, names) * SIGNALS[signal].scale
        times, z = downsample_cols(self._times, z, max_cols)
        labels, members, zz = aggregate_rows(names, z, max_rows)
        return Heatmap(signal, labels, members, times, zz, len(names))

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        job = self._snap.job(int(jobid)) if self._snap and str(jobid).isdigit() else None
        if job is None or not job.nodes or not self._series:
            return None
        z = self._node_matrix(signal, list(job.nodes)) * SIGNALS[signal].scale
        times, z = downsample_cols(self._times, z, max_cols)
        return Heatmap(signal, job.nodes, tuple((n,) for n in job.nodes), times, z, len(job.nodes))

    def node_series(self, node, signals, window=3600.0):
        data = self._series.get(node)
        if data is None:
            return None
        values = {s: data[s] * SIGNALS[s].scale for s in signals if s in data}
        chans = {s: tuple(f"GPU {k}" for k in range(v.shape[0])) if SIGNALS[s].per_gpu else (node,)
                 for s, v in values.items()}
        return NodeSeries(node, self._times, values, chans)


# ------------------------------------------------------------------------------ the simulator

class SimDatasource(BaseDatasource):
    """The simulator (dashboard.analysis.sim.Simulation) read in place, under the demo's lock.

    `snapshot_fn` lets `gangwatch demo` share its cached snapshot; without it one is built per
    simulated step."""

    simulated = True

    HEATMAP = ("gpu_util", 3600.0, 400, 240)  # what the overview asks for: precomputed in background mode

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
        raw = {"gpu_util": "util", "gpu_sm": "sm", "gpu_power": "power", "gpu_temp": "temp",
               "ib_tx": "ib_tx_rate", "ib_wait": "ib_wait_rate", "io_read": "ost_read_rate",
               "io_pressure": "io_pressure"}[signal]
        times, data = self._window(raw, t0, nodes)
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
        return Heatmap(signal, labels, members, times, zz, len(names))

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        key = (signal, float(window), max_rows, max_cols)
        return self._memo.get("heatmap:%s:%s:%s:%s" % key, self.sim.steps,
                              lambda: self._heatmap(*key), self._background and key == self.HEATMAP)

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        snap = self.snapshot()
        job = snap.job(int(jobid)) if str(jobid).isdigit() else None
        if job is None or not job.nodes:
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
        return Heatmap(signal, job.nodes, tuple((n,) for n in job.nodes), times, z, len(job.nodes))

    def node_series(self, node, signals, window=3600.0):
        try:
            i = self.sim.cluster.index(node)
        except KeyError:
            return None
        t0 = self.now() - window
        raw = {"gpu_util": "util", "gpu_sm": "sm", "gpu_power": "power", "gpu_temp": "temp",
               "ib_tx": "ib_tx_rate", "ib_wait": "ib_wait_rate", "io_read": "ost_read_rate",
               "io_pressure": "io_pressure"}
        values, chans, times = {}, {}, np.zeros(0)
        for s in signals:
            times, data = self._window(raw[s], t0, np.array([i]))
            data = data[:, 0].astype(np.float32)  # time x (GPUs | OSTs) or time
            sig = SIGNALS[s]
            if s == "io_read":
                data = data.sum(axis=1)
            if data.ndim == 1:
                values[s], chans[s] = data[None, :] * sig.scale, (node,)
            else:
                values[s] = data.T * sig.scale
                chans[s] = tuple(f"GPU {k}" if sig.per_gpu else f"mlx5_{k}" for k in range(data.shape[1]))
        return NodeSeries(node, times, values, chans)

    def ost_series(self, window=3600.0):
        """OST x time: read bytes/s summed over all clients."""
        times, data = self._window("ost_read_rate", self.now() - window)
        z = data.astype(np.float64).sum(axis=1).T
        times, z = downsample_cols(times, z, 240)
        osts = tuple(self.sim.cluster.osts)
        return Heatmap("io_read", osts, tuple((o,) for o in osts), times, z, len(osts))

    def leaf_series(self, window=3600.0):
        """Leaf switch x time: transmit wait ticks/s summed over the leaf's nodes (congestion)."""
        times, data = self._window("ib_wait_rate", self.now() - window)
        node_sum = data.astype(np.float64).sum(axis=2)  # time x node
        leaf_of = self.sim.cluster.leaf_of
        leaves = tuple(self.sim.cluster.leaves)
        z = np.vstack([node_sum[:, leaf_of == k].sum(axis=1) for k in range(len(leaves))])
        times, z = downsample_cols(times, z, 240)
        return Heatmap("ib_wait", leaves, tuple((lf,) for lf in leaves), times, z, len(leaves))

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
            arrays = {"tx": s.ib_rate[rows].copy(), "wait": s.ib_wait_rate[rows].copy(), "up": s.ib_up[rows].copy(),
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
                       "nodes' HCA ports (simulated); spine switches are not scraped.")

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
        return NodeInventory(node, gpus, ports, fs, None, self.gpu_topology(node), self.SIM_NOTE)

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
                verdicts.append(Verdict(jid, g.cause, nodes, gpus, 1.0, first, g.culprit,
                                        self._evidence(jid, nodes, g.cause, first), round(lost, 3),
                                        f"injected fault #{g.fault_id}: {g.kind}"))
        verdicts.sort(key=lambda v: -(v.gpu_hours_lost or 0))
        return Findings(now, "simulator ground truth", tuple(verdicts), group_incidents(verdicts))

    def _evidence(self, jobid: str, nodes: tuple[str, ...], cause: str, since: float) -> tuple[Evidence, ...]:
        """Each node's signal since the stall began against the job's level before it."""
        signal = {"stalled_io": "io_pressure", "stalled_network": "ib_wait"}.get(cause, "gpu_sm")
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
                                None if base is None or math.isnan(base) else round(base, 3)))
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


def convert_diagnosis(diag, now: float) -> Findings:
    """A `dashboard.analysis.diagnose.Diagnosis` -> Findings, reading its records directly."""
    verdicts = tuple(Verdict(v.jobid, v.state, tuple(v.nodes), int(v.gpus), _finite(v.confidence), _finite(v.since),
                             v.culprit,
                             tuple(Evidence(e.signal, e.node, _finite(e.value), _finite(e.baseline), _finite(e.threshold))
                                   for e in v.evidence),
                             _finite(v.gpu_hours_lost), v.reason, v.culprit_kind,
                             tuple((p.kind, p.node, p.detail, p.expected_cost) for p in v.placement))
                     for v in diag.verdicts)
    nodes_of = {v.jobid: v.nodes for v in verdicts}
    incs = tuple(sorted((Incident(i.culprit, i.cause, tuple(i.jobs), _finite(i.gpu_hours_lost) or 0.0, _finite(i.since),
                                  tuple(sorted({n for j in i.jobs for n in nodes_of.get(j, ())})))
                         for i in diag.incidents), key=lambda i: (-i.gpu_hours_lost, i.culprit)))
    at = _finite(diag.at)
    return Findings(at if at is not None else now, diag.source, verdicts, incs, diag)


def _finite(x):
    """A plain float, or None for missing and non-finite values (numpy scalars do not serialise)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# ------------------------------------------------------------------ metric windows (serve)

class WindowSeries:
    """Series for the pages from a diagnosis `Window` (dashboard/analysis/window.py), which every
    metric source builds (Prometheus, embedded scraper, bundle). Mixed into LiveDatasource."""

    _GPU = {"gpu_util": "util", "gpu_sm": "sm", "gpu_power": "power"}

    def window(self):  # -> Window | None
        return None

    def _node_rows(self, win, signal: str, rows: list[int], gpu_cols: list[list[int]] | None = None) -> np.ndarray | None:
        """(len(rows) x T) node-level values of a signal in display units, None when absent."""
        sig = SIGNALS[signal]
        if signal in self._GPU:
            a = win.gpu.get(self._GPU[signal])
            if a is None:
                return None
            if gpu_cols is None:
                z = nanmean(a[rows], axis=1)
            else:
                z = np.vstack([nanmean(a[r][cols], axis=0) if cols else np.full(a.shape[2], np.nan)
                               for r, cols in zip(rows, gpu_cols)]) if rows else np.zeros((0, a.shape[2]))
        elif signal in ("ib_tx", "ib_wait"):
            a = win.rail.get(signal)
            if a is None:
                return None
            z = _nansum(a[rows], axis=1)
        else:
            a = win.node.get({"io_read": "fs_read", "io_pressure": "psi_io"}.get(signal, ""))
            if a is None:
                return None
            z = a[rows]
        return z.astype(np.float64) * sig.scale

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        win = self.window()
        if win is None or not win.nodes:
            return None
        z = self._node_rows(win, signal, list(range(len(win.nodes))))
        if z is None:
            return None
        keep = win.times >= win.end - window
        times, z = downsample_cols(win.times[keep], z[:, keep], max_cols)
        labels, members, zz = aggregate_rows(list(win.nodes), z, max_rows)
        return Heatmap(signal, labels, members, times, zz, len(win.nodes))

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        win, snap = self.window(), self.snapshot()
        job = snap.job(int(jobid)) if snap is not None and str(jobid).isdigit() else None
        if win is None or job is None or not job.nodes:
            return None
        index = win.node_index()
        names = [n for n in job.nodes if n in index]
        if not names:
            return None
        rows = [index[n] for n in names]
        allocs = {a.node: a.gpu_indices for a in job.allocations}
        cols = [[c for c in (win.gpu_column(r, g) for g in allocs.get(n, ())) if c >= 0] or None for n, r in zip(names, rows)]
        z = self._node_rows(win, signal, rows, cols if all(c is not None for c in cols) else None)
        if z is None:
            return None
        keep = win.times >= max(win.end - window, (job.start_time or 0) - 300)
        times, z = downsample_cols(win.times[keep], z[:, keep], max_cols)
        return Heatmap(signal, tuple(names), tuple((n,) for n in names), times, z, len(names))

    def node_series(self, node, signals, window=3600.0):
        win = self.window()
        if win is None or node not in win.node_index():
            return None
        i = win.node_index()[node]
        keep = win.times >= win.end - window
        values, chans = {}, {}
        for s in signals:
            sig = SIGNALS[s]
            if s in self._GPU and self._GPU[s] in win.gpu:
                cols = [k for k, g in enumerate(win.gpus[i]) if g >= 0] if win.gpus else []
                values[s] = win.gpu[self._GPU[s]][i][cols][:, keep].astype(np.float64) * sig.scale
                chans[s] = tuple(f"GPU {win.gpus[i][k]}" for k in cols)
            elif s in ("ib_tx", "ib_wait") and s in win.rail:
                cols = [k for k, r in enumerate(win.rails[i]) if r] if win.rails else []
                values[s] = win.rail[s][i][cols][:, keep].astype(np.float64)
                chans[s] = tuple(win.rails[i][k] for k in cols)
            elif s in ("io_read", "io_pressure"):
                z = self._node_rows(win, s, [i])
                if z is not None:
                    values[s], chans[s] = z[:, keep], (node,)
        return NodeSeries(node, win.times[keep], values, chans) if values else None

    def ost_series(self, window=3600.0):
        win = self.window()
        a = win.target.get("read") if win is not None else None
        if a is None or not win.targets:
            return None
        keep = win.times >= win.end - window
        times, z = downsample_cols(win.times[keep], _nansum(a, axis=0)[:, keep].astype(np.float64), 240)
        return Heatmap("io_read", tuple(win.targets), tuple((t,) for t in win.targets), times, z, len(win.targets))

    def leaf_series(self, window=3600.0):
        win = self.window()
        a = win.rail.get("ib_wait") if win is not None else None
        if a is None or not win.leaf_of:
            return None
        per_node = _nansum(a, axis=1)
        leaves = sorted(set(win.leaf_of.values()))
        z = np.vstack([_nansum(per_node[[k for k, n in enumerate(win.nodes) if win.leaf_of.get(n) == lf]], axis=0)
                       for lf in leaves]).astype(np.float64)
        keep = win.times >= win.end - window
        times, z = downsample_cols(win.times[keep], z[:, keep], 240)
        return Heatmap("ib_wait", tuple(leaves), tuple((lf,) for lf in leaves), times, z, len(leaves))

    def leaf_of(self, node: str) -> str:
        win = self.window()
        return win.leaf_of.get(node, "") if win is not None else ""

    @staticmethod
    def _last(a: np.ndarray) -> np.ndarray:
        """The latest column of (... x T), as float64 (NaN where unknown)."""
        return a[..., -1].astype(np.float64) if a.shape[-1] else np.full(a.shape[:-1], np.nan)

    def gpu_topology(self, node):
        win = self.window()
        if win is None:
            return GpuTopology()
        peers, numa = win.nvlink_peers.get(node), win.gpu_numa.get(node)
        return GpuTopology(peers if peers else None, dict(numa) if numa else None)

    def network(self):
        win = self.window()
        if win is None or not win.rails or "ib_tx" not in win.rail:
            return None
        return self._memo.get("network", (id(win), win.end), lambda: self._network(win))

    def _network(self, win) -> Network:
        leaves = sorted(set(win.leaf_of.values()))
        pos = {lf: k for k, lf in enumerate(leaves)}
        leaf_idx = np.array([pos.get(win.leaf_of.get(n, ""), -1) for n in win.nodes])
        valid = np.array([[bool(r) for r in rails] for rails in win.rails])
        tx = self._last(win.rail["ib_tx"])
        wait = self._last(win.rail["ib_wait"]) if "ib_wait" in win.rail else np.full(tx.shape, np.nan)

        def port(i, k):
            node = win.nodes[i]
            return Port(node, win.rails[i][k], win.leaf_of.get(node, ""), None, None, _num(tx[i, k]), _num(wait[i, k]))

        net = build_network(leaf_idx, leaves, valid, tx, wait, port)
        return Network(net.switches, net.ports, net.total_ports, "Port state and error counters are not in the metric "
                       "window: unknown. Per-switch figures are sums over the switch's nodes' ports.")

    def storage_targets(self):
        win = self.window()
        if win is None or not win.targets or not win.target:
            return None
        return self._memo.get("targets", (id(win), win.end), lambda: self._targets(win))

    def _targets(self, win) -> tuple[Target, ...]:
        got = {k: self._last(a) for k, a in win.target.items()}  # nodes x targets

        def col(key, j, mean=False):
            a = got.get(key)
            if a is None or not np.isfinite(a[:, j]).any():
                return None
            return float(np.nanmean(a[:, j]) if mean else np.nansum(a[:, j]))

        out = []
        for j, name in enumerate(win.targets):
            fs, _, tail = name.rpartition("-")
            kind = "MDT" if tail.startswith("MDT") else ("OST" if tail.startswith("OST") else "NSD")
            out.append(Target(fs or name, name, kind, col("read", j), col("write", j), None, col("latency", j, True)))
        return tuple(out)

    def node_inventory(self, node):
        win = self.window()
        if win is None or node not in win.node_index():
            return None
        i = win.node_index()[node]
        gpus = None
        if win.gpus and "util" in win.gpu:
            util = self._last(win.gpu["util"][i])
            power = self._last(win.gpu["power"][i]) if "power" in win.gpu else np.full(util.shape, np.nan)
            gpus = tuple(GpuNow(g, _num(util[k]), _num(power[k])) for k, g in enumerate(win.gpus[i]) if g >= 0)
        ports = None
        if win.rails and "ib_tx" in win.rail:
            tx = self._last(win.rail["ib_tx"][i])
            wait = self._last(win.rail["ib_wait"][i]) if "ib_wait" in win.rail else np.full(tx.shape, np.nan)
            ports = tuple(Port(node, r, win.leaf_of.get(node, ""), None, None, _num(tx[k]), _num(wait[k]))
                          for k, r in enumerate(win.rails[i]) if r)
        fs = None
        if win.targets and "read" in win.target:
            read = self._last(win.target["read"][i])
            write = self._last(win.target["write"][i]) if "write" in win.target else np.full(read.shape, np.nan)
            by_fs: dict[str, list[int]] = {}
            for j, t in enumerate(win.targets):
                by_fs.setdefault(t.rpartition("-")[0] or t, []).append(j)
            fs = tuple(Mount(name, "lustre", len(js), None,
                             _num(np.nansum(read[js])) if np.isfinite(read[js]).any() else None,
                             _num(np.nansum(write[js])) if np.isfinite(write[js]).any() else None)
                       for name, js in sorted(by_fs.items()))
        return NodeInventory(node, gpus, ports, fs, None, self.gpu_topology(node),
                             "Disks and local filesystems are not in the metric window: unknown.")


# -------------------------------------------------------------------------- live (serve) source

class LiveDatasource(WindowSeries, BaseDatasource):
    """`gangwatch serve`: a scheduler snapshot from a poller or URL or file, and optionally a metric
    source (dashboard/sources: Prometheus, embedded scraper) whose window feeds the pages and the
    diagnosis. `snapshot_fn` returns the latest Snapshot or raises; its failures are kept for
    status() and the last good snapshot stays on screen, marked stale. The metric window and the
    diagnosis are refreshed by one background thread (`start()`), never inside a request."""

    def __init__(self, snapshot_fn: Callable[[], Snapshot | None], source_name: str,
                 min_interval: float = 10.0, clock: Callable[[], float] = time.time, metrics=None,
                 metrics_interval: float = 15.0):
        super().__init__()
        self._fn = snapshot_fn
        self.source_name = source_name
        self._min_interval = min_interval
        self._clock = clock
        self._snap: Snapshot | None = None
        self._last_try = -math.inf
        self._error = ""
        self._lock = threading.Lock()
        self.metrics = metrics
        self._metrics_interval = metrics_interval
        self._win = None
        self._win_error = ""
        self._win_failed = False
        self._findings: Findings | None = None
        self._stop = threading.Event()
        self._polling = False  # start() hands fetching to a background thread

    def now(self) -> float:
        return self._clock()

    def snapshot(self):
        """The latest snapshot. Once start()ed, only the background poller fetches: a request never
        waits on the scheduler source (a frozen slurm-exporter made every page wait its timeout)."""
        if not self._polling:
            self.refresh_snapshot()
        return self._snap

    def refresh_snapshot(self) -> None:
        """Fetch a snapshot if the last try is at least min_interval old (one fetch at a time)."""
        with self._lock:
            if self._clock() - self._last_try < self._min_interval:
                return
            self._last_try = self._clock()
            try:
                snap = self._fn()
                if snap is not None:
                    self._snap, self._error = snap, ""
            except Exception as exc:
                self._error = f"{type(exc).__name__}: {exc}"
                log.warning("scheduler source %s failed: %s", self.source_name, self._error)

    def version(self) -> str:
        snap = self._snap
        win = self._win
        return f"{snap.taken_at if snap else 0}:{win.end if win is not None else 0}"

    # ---- metrics and diagnosis

    def window(self):
        return self._win

    def refresh_metrics(self) -> None:
        """One metric window and one diagnosis (what the background thread does each interval)."""
        if self.metrics is None:
            return
        try:
            scrape = getattr(self.metrics, "scrape", None)
            if scrape is not None:  # the embedded source scrapes its targets itself
                scrape()
            win = self.metrics.window()
            down = source_down(self.metrics)
            if down:
                raise ConnectionError(down)
            self._win, self._win_error, self._win_failed = win, "; ".join(win.notes)[:300], False
        except Exception as exc:
            # the last good window and findings stay, marked: a dead source must not turn every
            # verdict into insufficient_data, nor pass for healthy
            self._win_error, self._win_failed = f"{type(exc).__name__}: {exc}", True
            log.warning("metric source failed: %s", self._win_error)
            if self._findings is not None:
                self._findings = replace(self._findings, degraded=f"metric source down ({self._win_error[:200]}): "
                                         f"findings from {time.strftime('%H:%M:%S', time.gmtime(self._findings.generated_at))} UTC")
            return
        snap = self.snapshot()
        if snap is None:
            return
        try:
            from dashboard.analysis.diagnose import diagnose

            jobs = [j for j in snap.jobs if j.state in ("RUNNING", "SUSPENDED")]
            findings = convert_diagnosis(diagnose(self._win, jobs), self.now())
            partial = partly_down(self.metrics)
            if partial:  # a job can be insufficient_data because its nodes' data did not arrive
                findings = replace(findings, degraded=partial, verdicts=tuple(
                    replace(v, detail=f"{v.detail}; {partial}" if v.detail else partial)
                    if v.state == "insufficient_data" else v for v in findings.verdicts))
            self._findings = findings
        except ImportError:
            pass
        except Exception:
            log.exception("diagnosis failed")

    def start(self) -> "LiveDatasource":
        def loop():
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.refresh_metrics()
                self._stop.wait(max(1.0, self._metrics_interval - (time.monotonic() - t0)))

        def poll():
            while not self._stop.is_set():
                self.refresh_snapshot()
                self._stop.wait(max(0.2, min(self._min_interval, 5.0)))

        self._polling = True
        threading.Thread(target=poll, name="gangwatch-serve-scheduler", daemon=True).start()
        if self.metrics is not None:
            threading.Thread(target=loop, name="gangwatch-serve-metrics", daemon=True).start()
        return self

    def close(self) -> None:
        self._stop.set()

    def findings(self) -> Findings:
        return self._findings or Findings(self.now(), "none")

    def status(self) -> Status:
        snap = self.snapshot()
        now = self.now()
        ok = snap is not None and not self._error and not snap.stale
        detail = self._error or (outage_text(snap, now) if snap is not None and snap.stale else "")
        src = [SourceStatus(self.source_name, ok, snap.age(now) if snap else None, detail)]
        if self.metrics is not None:  # none configured is a choice, not an outage: no banner for it
            win = self._win
            age = max(0.0, now - win.end) if win is not None and win.n_steps else None
            src.append(SourceStatus(f"metrics ({getattr(self.metrics, 'name', 'source')})",
                                    win is not None and not self._win_failed,
                                    age, self._win_error))
        if self._plan_error:
            src.append(SourceStatus("backfill planner", False, None, self._plan_error))
        return Status(False, now, tuple(src), self.version())


def source_down(metrics) -> str:
    """Why a metric source answered nothing in its latest cycle ("" if it answered something):
    every Prometheus query failed, or every scrape target."""
    queries, failed = getattr(metrics, "queries_last_cycle", 0), getattr(metrics, "failed_last_cycle", 0)
    if queries and failed >= queries:
        return f"all {queries} queries failed"
    targets, errors = getattr(metrics, "targets", None), getattr(metrics, "last_errors", None)
    if targets and errors is not None and len(errors) >= len(targets):
        return f"all {len(targets)} targets failed: " + "; ".join(f"{t} ({e})" for t, e in list(errors.items())[:3])
    return ""


def partly_down(metrics) -> str:
    """What part of a metric source failed in its latest cycle ("" when none did)."""
    failed = getattr(metrics, "failed_last_cycle", 0)
    if failed:
        return f"metric source partly down: {failed} of {metrics.queries_last_cycle} queries failed"
    targets, errors = getattr(metrics, "targets", None), getattr(metrics, "last_errors", None)
    if targets and errors:
        return f"metric source partly down: {len(errors)} of {len(targets)} targets failed ({', '.join(list(errors)[:3])})"
    return ""


def outage_text(snap: Snapshot, now: float) -> str:
    """The banner line for a stale snapshot: when polling Slurm began to fail, and why."""
    since = snap.failing_since or snap.last_attempt
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    why = "; ".join(f"{e.source}: {e.message}" for e in snap.errors if e.severity == "error")
    return (f"controller unreachable since {when}; showing the last good data, taken "
            f"{time.strftime('%H:%M:%S UTC', time.gmtime(snap.taken_at))} ({int(snap.age(now))} s old)"
            + (f" — {why[:300]}" if why else ""))


def snapshot_from_url(url: str, timeout: float = 10.0) -> Callable[[], Snapshot]:
    """A slurm-exporter's /api/v1/snapshot (or any URL serving that JSON)."""
    full = url.rstrip("/") + ("" if url.rstrip("/").endswith("/api/v1/snapshot") else "/api/v1/snapshot")

    def fetch() -> Snapshot:
        from collectors import fetch as http

        r = http.get(full, timeout)
        r.raise_for_status()
        return Snapshot.from_json(r.content)

    return fetch


def snapshot_from_file(path: str) -> Callable[[], Snapshot]:
    def read() -> Snapshot:
        with open(path, "rb") as fh:
            data = fh.read()
        doc = json.loads(data)
        if "jobs" in doc and "taken_at" not in doc:
            raise ValueError(f"{path} is not a gangwatch snapshot (no taken_at): use the slurm-exporter's "
                             "/api/v1/snapshot JSON")
        return Snapshot.from_dict(doc)

    return read


def job_verdict_label(v: Verdict | None, job: Job) -> str:
    if job.state != "RUNNING":
        return ""
    return v.state if v is not None else "not judged"
