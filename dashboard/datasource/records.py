"""The records every datasource returns: plain frozen data (no Dash objects, no I/O), and the
signals the pages may ask for. None in a field means unknown; pages show it as such, never as 0.
Verdicts, evidence and incidents are the findings model's own (dashboard/analysis/findings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from collectors.slurm.model import Job
from dashboard.analysis import findings as model
from dashboard.analysis.diagnose import incidents
from dashboard.analysis.findings import Incident, Verdict

# The verdict states that flag a job (dashboard/analysis/findings.py holds them all).
FLAGGED = model.STALL_STATES
# Node-level value of a per-rail or per-target signal: the sum over rails / targets (traffic adds up).
SUMMED = frozenset({"ib_tx", "ib_wait", "roce_cong", "io_read"})
# The fabric's congestion signal, in order of preference: InfiniBand's transmit wait, else RoCE's
# ECN marks + CNPs (a RoCE port counts no port_xmit_wait; the diagnosis reads the same pair).
CONGESTION = ("ib_wait", "roce_cong")
# Signals whose name depends on the fabric: a RoCE port's traffic counts in the same rail slot as
# InfiniBand's (ib_tx), and must not be called InfiniBand there.
FABRIC_LABELS = {("ib_tx", "roce_cong"): "RoCE transmit"}
# A source whose data is older than this many seconds is shown as stale (a few missed polls).
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
    Signal("roce_cong", "RoCE congestion (ECN+CNP)", "packets/s", 1.0, False, "gangwatch_roce_port_ecn_marked_packets_total"),
    Signal("eth_pause", "PFC pause frames received", "frames/s", 1.0, False,
           "gangwatch_ethtool_node_received_pause_frames_total"),
    # events per step of the source's grid: a NIC that kept sending pause frames (a PFC storm)
    Signal("eth_storm", "PFC storm guard events", " events", 1.0, False,
           "gangwatch_ethtool_node_pause_storm_events_total"),
    Signal("io_read", "Lustre read", "B/s", 1.0, False, "gangwatch_lustre_client_target_io_bytes_total"),
    Signal("io_pressure", "I/O pressure (some)", "%", 100.0, False, "gangwatch_pressure_waiting_seconds_total"),
)}


def signal_label(signal: str, congestion: str | None) -> str:
    """The signal's name on a fabric whose congestion signal is `congestion` (CONGESTION)."""
    return FABRIC_LABELS.get((signal, congestion or ""), SIGNALS[signal].label)


# ----------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Findings:
    """The findings the pages show, in the one findings model's records (dashboard/analysis/findings.py),
    with where they came from and how fresh they are. `diagnosis` is the record they were taken from,
    when there is one: `/api/v1/findings` and `/metrics` serve it as it is."""

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
        """The findings as one Diagnosis record (the diagnosis's own where there is one); findings kept
        from before a metric source died say so in their notes."""
        notes = (f"degraded: {self.degraded}",) if self.degraded else ()
        if self.diagnosis is not None:
            return replace(self.diagnosis, notes=tuple(self.diagnosis.notes) + notes) if notes else self.diagnosis
        return model.Diagnosis(self.generated_at, self.verdicts, self.incidents, source=self.source, notes=notes)


def group_incidents(verdicts) -> tuple[Incident, ...]:
    """Flagged verdicts that share a culprit (or, without one, a job) are one incident, worst first:
    the diagnosis's own grouping, for findings that did not come from it (ground truth, fixed data)."""
    return tuple(incidents(replace(v, gpu_hours_lost=v.gpu_hours_lost or 0.0) for v in verdicts))


@dataclass(frozen=True)
class Heatmap:
    """Rows (nodes, or bins of nodes) x time; z in display units, NaN where unknown."""

    signal: str
    rows: tuple[str, ...]  # row labels
    row_nodes: tuple[tuple[str, ...], ...]  # nodes aggregated into each row
    times: np.ndarray
    z: np.ndarray  # len(rows) x len(times)
    total_nodes: int
    label: str = ""  # the signal's name on this source's fabric (signal_label); "" = SIGNALS' label


@dataclass(frozen=True)
class NodeSeries:
    node: str
    times: np.ndarray
    values: dict[str, np.ndarray]  # signal -> channels x time (GPUs, or one row for node-level signals)
    channels: dict[str, tuple[str, ...]]
    labels: dict[str, str] = field(default_factory=dict)  # signal -> its name on the source's fabric, where it differs


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
    """One InfiniBand or RoCE port (an HCA's port, "mlx5_0/1") as the node's agent reports it; None = unknown."""

    node: str
    device: str
    switch: str = ""  # leaf switch, "" when the source does not say
    up: bool | None = None
    rate_bytes: float | None = None  # the link's trained data rate, bytes/s
    tx_bps: float | None = None  # transmit, bytes/s now
    wait_per_s: float | None = None  # congestion now: the fabric's CONGESTION signal (the record's `congestion`)
    symbol_errors: float | None = None  # counter since boot
    link_downed: float | None = None  # counter since boot
    errors_recent: float | None = None  # symbol errors + link downs in the last interval
    link_layer: str = ""  # "InfiniBand", "Ethernet" (RoCE), where the agent says it


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
    congestion: str = "ib_wait"  # the signal wait_per_s holds (CONGESTION)


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
    congestion: str = "ib_wait"  # the signal the ports' wait_per_s holds (CONGESTION)
    # RDMA ports of another fabric than the one the collectives run on (a DGX's RoCE storage NICs
    # beside its InfiniBand rails): not on the fabric's leaf switches; their wait_per_s holds
    # `other_congestion`, their own fabric's signal
    other_ports: tuple[Port, ...] = ()
    other_congestion: str = ""


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def job_verdict_label(v: Verdict | None, job: Job) -> str:
    if job.state != "RUNNING":
        return ""
    return v.state if v is not None else "not judged"
