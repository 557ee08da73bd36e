"""Verdicts for running jobs from a metric window: progressing, stalled on I/O or network, straggler,
hung, idle GPUs, or not enough data to say; with the culprit, evidence and GPU-hours lost.

Inputs: a `Window` (dashboard/analysis/window.py) and the scheduler's jobs (collectors.slurm.model.Job).
Pure: no I/O, no clock (the window's end is "now").

How a job is judged (thresholds in thresholds.py):

1. Its GPUs come from Slurm's allocation (GPU indices per node), else from GPU -> job labels in the
   metrics, else all GPUs of an exclusively held node. Steps before the job started are ignored.
2. Activity = SM activity (DCGM profiling) where known, else GPU utilisation, averaged over the
   job's GPUs. Baseline = a high quantile of the job's own activity in the window (its training
   level). A step is degraded when activity falls below a fraction of it, or the job's GPUs sit
   idle, or kernels are resident with SMs at ~0 (a hung collective).
3. A degraded step that writes at checkpoint speed is a checkpoint, not a stall (and its I/O
   pressure is the checkpoint's own, no evidence of an I/O stall). The stall is the
   trailing run of unexplained degraded steps (one-step gaps bridged, as a flapping link makes);
   it must last `stall_min_seconds` (longer when no filesystem signal exists to recognise a
   checkpoint). Its cause is the one most of its steps show: I/O (PSI/iowait high, or GPUs idle
   while the nodes read at full speed), hung (GPUs busy, SMs ~0, network flat), network (GPUs busy,
   SMs waiting, InfiniBand wait up, traffic collapsed or a link down), idle (GPUs idle, nothing else
   happening). I/O wins over idle: GPUs starve because data does not come.
4. Peer tests name culprits: per-GPU SM clock and SM activity across the job's GPUs (straggler),
   per-target read latency across the filesystem's targets (I/O), per-node port_xmit_wait across
   the cluster and link_downed events per port (network). A member is named only when a one-sided
   robust z-test (median/MAD) rejects "same as its peers" at `alpha` after Bonferroni correction for
   the number of members tested; the evidence carries z and p. Otherwise the culprit stays empty.
   On RoCE (no port_xmit_wait) ECN marks, CNPs and PFC pause take xmit_wait's place, transport
   errors count as link events (`fabric_view`), and so do the NICs' link-down events (ethtool,
   per node): a node is named for them when it is the only one of the job's nodes whose NICs
   went down, a leaf when most of its nodes went down together.
5. Cluster sanity: if most nodes went silent, or most jobs "stall" within seconds of each other
   with no shared culprit, that is a collector or network outage: every job gets
   insufficient_data with that reason instead of a thousand stalls.

Failure modes: NaN/Inf anywhere is unknown; a job on nodes the metrics do not know, with too few
GPUs reporting, or too young gets insufficient_data (or is left unjudged during its grace period)
with the reason; nothing raises for one bad job: `diagnose` judges the rest.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from collectors.slurm.model import Job

# The findings records live in findings.py (one model for diagnosis, serve, demo, the CLI and the
# metrics); they are re-exported here, where callers have always imported them from.
from .findings import STALL_STATES, STATES, Diagnosis, Evidence, Incident, Placement, State, Verdict  # noqa: F401
from .findings import finite as _f
from .thresholds import DEFAULT, Thresholds
from .window import Window

# Slurm states in which a job holds its nodes but is not supposed to run (gang time-slicing and
# preemption by suspend): reported as such, never judged as stalls.
SUSPENDED_STATES = frozenset({"SUSPENDED", "PREEMPTED"})
# MIG profile names (nvidia-smi mig -lgip: 1g.10gb, 3g.40gb, 1g.12gb+me), as Slurm's GRES types take them
_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(?:\+\w+)?$")


# ------------------------------------------------------------------------------------ statistics

def robust_z(values: np.ndarray, floor_frac: float, abs_floor: float = 1e-12) -> tuple[np.ndarray, float, float]:
    """(z per value, median, scale): z = (x - median) / (1.4826 MAD), the scale floored so that a
    uniform group does not turn noise into significance. NaN values get NaN z."""
    v = np.asarray(values, np.float64)
    ok = np.isfinite(v)
    if ok.sum() == 0:
        return np.full(v.shape, np.nan), float("nan"), float("nan")
    med = float(np.median(v[ok]))
    mad = float(np.median(np.abs(v[ok] - med))) * 1.4826
    scale = max(mad, floor_frac * abs(med), abs_floor)
    z = np.where(ok, (v - med) / scale, np.nan)
    return z, med, scale


def p_one_sided(z: float) -> float:
    """P(Z >= z) for a standard normal."""
    if not math.isfinite(z):
        return float("nan")
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def outliers(values: np.ndarray, th: Thresholds, high: bool, min_ratio: float | None = None,
             min_abs: float | None = None) -> list[tuple[int, float, float, float, float]]:
    """Members that stand out (one side) beyond chance: [(index, value, median, z, p)], Bonferroni
    over the members tested. `min_ratio`: value must also be >= ratio x median (high) or
    <= ratio x median (low); `min_abs`: |value - median| at least this (effect size)."""
    v = np.asarray(values, np.float64)
    m = int(np.isfinite(v).sum())
    if m < th.min_peers:
        return []
    z, med, _ = robust_z(v, th.scale_floor)
    zz = z if high else -z
    out = []
    for i in np.flatnonzero(np.isfinite(zz) & (zz > 0)):
        zi = float(zz[i])
        p = p_one_sided(zi)
        if p * m >= th.alpha:
            continue
        x = float(v[i])
        if min_ratio is not None and (x < min_ratio * med if high else x > min_ratio * med):
            continue
        if min_abs is not None and abs(x - med) < min_abs:
            continue
        out.append((int(i), x, med, zi, p))
    return out


def _nanmean(a: np.ndarray, axis) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.nansum(a, axis=axis)
        c = np.sum(np.isfinite(a), axis=axis)
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def _trailing_run(mask: np.ndarray, unknown: np.ndarray | None = None) -> np.ndarray:
    """Length of the trailing run of True per row of a (J, T) bool array, one-step gaps bridged.
    Steps in `unknown` (no data: a lost scrape, 2 % of a site's scrapes) continue a run as well: a
    gap in the data is no evidence that the stall ended."""
    if mask.shape[1] == 0:
        return np.zeros(mask.shape[0], int)
    mask = mask if unknown is None else mask | unknown
    m = mask.copy()
    if m.shape[1] >= 3:
        gap = ~mask[:, 1:-1] & mask[:, :-2] & mask[:, 2:]
        m[:, 1:-1] |= gap
    rev = ~m[:, ::-1]
    has_false = rev.any(axis=1)
    first_false = np.argmax(rev, axis=1)
    return np.where(has_false, first_false, m.shape[1])


# ------------------------------------------------------------------------------------ job table

@dataclass
class _JobMap:
    job: Job
    jobid: str
    node_rows: list[int]
    gpu_flat: list[int]  # indices into the (N*G) flattening of the window's GPU arrays
    gpu_names: list[tuple[str, int]]  # (node, gpu index) per gpu_flat entry
    missing_nodes: list[str]
    n_gpus: int
    shared: bool = False  # another running job holds GPUs on one of its nodes: node-level signals are mixed
    mig: tuple[str, ...] = ()  # MIG profiles the job holds instances of


def _map_jobs(win: Window, jobs: Sequence[Job]) -> list[_JobMap]:
    idx = win.node_index()
    g = next(iter(win.gpu.values())).shape[1] if win.gpu else 0
    by_label: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (node, gpu), jid in win.gpu_jobs.items():
        by_label[str(jid)].append((node, gpu))
    out = []
    for job in jobs:
        jid = str(job.display_id)
        rows, flat, names, missing = [], [], [], []
        mig: set[str] = set()
        allocs = {a.node: a for a in job.allocations}
        labelled = defaultdict(list)
        for node, gpu in by_label.get(jid, ()) or by_label.get(str(job.job_id), ()):
            labelled[node].append(gpu)
        n_gpus = 0
        for node in job.nodes:
            i = idx.get(node)
            a = allocs.get(node)
            want: Iterable[int] = ()
            if a is not None and a.gpu_type and _MIG_PROFILE.match(a.gpu_type):
                # MIG instances: Slurm numbers them apart from the physical GPUs and the window
                # keys series by GPU, so a GPU's columns are not this job's alone; not judged
                mig.add(a.gpu_type)
                n_gpus += a.gpus or len(a.gpu_indices) or 0
                if i is None:
                    missing.append(node)
                else:
                    rows.append(i)
                continue
            if a is not None and a.gpu_indices:
                want = a.gpu_indices
            elif labelled.get(node):
                want = sorted(labelled[node])
            elif i is not None and ((a is not None and a.gpus and a.gpus >= len([c for c in win.gpus[i] if c >= 0]))
                                    or job.exclusive or (job.gpus and job.gang_size and
                                                         job.gpus // max(job.gang_size, 1) >= len(win.gpus[i]))):
                want = [c for c in win.gpus[i] if c >= 0]
            want = list(want)
            n_gpus += len(want) if want else (a.gpus or 0 if a is not None else 0)
            if i is None:
                missing.append(node)
                continue
            rows.append(i)
            for gpu in want:
                col = win.gpu_column(i, gpu)
                if col >= 0:
                    flat.append(i * g + col)
                    names.append((node, gpu))
        if not n_gpus and job.gpus:
            n_gpus = int(job.gpus)
        out.append(_JobMap(job, jid, rows, flat, names, missing, n_gpus, mig=tuple(sorted(mig))))
    per_node: dict[str, int] = defaultdict(int)
    for jm in out:
        for node in set(jm.job.nodes):
            per_node[node] += 1
    for jm in out:
        jm.shared = any(per_node[n] > 1 for n in jm.job.nodes)
    return out


def _group_mean(x2d: np.ndarray, members: list[list[int]]) -> np.ndarray:
    """(K, T) means over row groups of a (rows, T) array, NaN-aware, in one pass (no Python per step)."""
    T = x2d.shape[1]
    K = len(members)
    lens = np.array([len(m) for m in members], np.int64)
    out = np.full((K, T), np.nan, np.float64)
    nz = np.flatnonzero(lens)
    if nz.size == 0:
        return out
    flat = np.concatenate([np.asarray(members[k], np.int64) for k in nz])
    starts = np.concatenate([[0], np.cumsum(lens[nz])[:-1]])
    vals = x2d[flat]
    fin = np.isfinite(vals)
    vals[~fin] = 0.0  # a gathered copy: the window is not touched
    s = np.add.reduceat(vals, starts, axis=0, dtype=np.float64)
    c = np.add.reduceat(fin, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[nz] = np.where(c > 0, s / np.maximum(c, 1), np.nan)
    return out


# ------------------------------------------------------------------------------------ main entry

def diagnose(win: Window, jobs: Sequence[Job], th: Thresholds = DEFAULT) -> Diagnosis:
    """One verdict per job in `jobs` that holds nodes (RUNNING, SUSPENDED, ...), gangs first."""
    now = win.end
    T = win.n_steps
    notes = list(win.notes)
    held = [j for j in jobs if j.state in ("RUNNING", "COMPLETING") or j.state in SUSPENDED_STATES]
    held.sort(key=lambda j: (-(j.gang_size or 0), -(j.gpus or 0), str(j.job_id)))
    if T == 0 or not win.nodes:
        reason = "no metric samples in the window" if T == 0 else "the metric source knows no nodes"
        vs = tuple(_simple(j, "insufficient_data", reason) for j in held)
        return Diagnosis(now, vs, (), tuple(notes + [reason]), reason)
    win, fabric = fabric_view(win, th)
    maps = _map_jobs(win, held)
    sig = _Signals(win, maps, th)
    sig.screen(maps)
    outage = sig.outage_reason()
    verdicts: list[Verdict] = []
    for k, jm in enumerate(maps):
        try:
            v = _judge(win, sig, k, jm, th, outage)
        except Exception as exc:  # one malformed job must not cost the others their verdict
            v = _simple(jm.job, "insufficient_data", f"diagnosis failed for this job: {type(exc).__name__}: {exc}")
        verdicts.append(v)
    verdicts, cluster_reason = _cluster_check(verdicts, th, outage)
    placement = placement_findings(win, maps)
    verdicts = [v if not placement.get(v.jobid) else _replace(v, placement=tuple(placement[v.jobid]))
                for v in verdicts]
    if fabric == "roce":
        verdicts = [_roce_names(v) for v in verdicts]
    return Diagnosis(now, tuple(verdicts), tuple(incidents(verdicts)), tuple(notes), cluster_reason)


# ------------------------------------------------------------------------------------ RoCE

_ETHERNET_EVENTS = frozenset({"eth_down", "eth_err", "eth_storm"})
# the agent's rollups of its InfiniBand collector's ports' events: on RoCE the transport errors
# (`roce_err`, in `ib_err` there) are not in them, and the NICs' own (ethtool's) stand for them
_PORT_ROLLUPS = frozenset({"ib_down_node", "ib_err_node"})


def _known(a: np.ndarray | None) -> bool:
    return a is not None and bool(np.isfinite(a).any())


def fabric_view(win: Window, th: Thresholds) -> tuple[Window, str]:
    """A RoCE fabric seen through the InfiniBand signals the network tests read, and which fabric it is.

    RoCE ports have no port_xmit_wait: congestion is ECN-marked packets, CNPs acted on (`roce_cong`,
    per rail) and PFC pause frames the switch sent (`eth_pause`, per node, spread evenly over its
    rails), all per second; they take the place of `ib_wait` and are judged by the same relative
    tests (the cluster's typical busy node, the job's own median, the leaf, the port). Transport
    errors (`roce_err`: sequence errors, NAKs, ACK timeouts, retransmissions per step) count as
    link events from `roce_error_events` per step, beside link-down events of the ports and of the
    nodes' NICs (`eth_down`, ethtool, per node: read as it is, every NIC drop is an event).

    Which fabric (`which_fabric`): where the agents say their ports' link layers
    (`gangwatch_infiniband_port_info`: `win.link_layers`), InfiniBand wherever the nodes have
    InfiniBand ports (`_link_layer_fabric`), and the other fabric's ports (a DGX's RoCE storage
    NICs) are left out of every rail signal. Otherwise from the counters: a RoCE port has
    PortCounters too (`counters/`, read by node_exporter and the agent), `port_xmit_wait` among
    them, which stands still or counts only PFC's holds (firmware dependent), so a known transmit
    wait does not make a window InfiniBand. ECN marks and CNPs (`roce_cong`) are counted by RoCE
    ports only: a window with them is RoCE, unless at least as many nodes have a port with a
    transmit wait and no such counters (InfiniBand nodes whose storage NICs run RoCE). Without them, a window whose ports waited at some step is InfiniBand: units of the two fabrics are not mixed in
    one cluster reference, and its `eth_down` and `eth_storm` (the management Ethernet there) are
    dropped. A site running node_exporter, whose ethtool collector reads the NICs but which reads no
    RDMA hw_counters, is RoCE where its transmit wait says nothing of its own: unknown, or still on
    every port (an InfiniBand fabric carrying gangs waits somewhere within the hour) while transport
    errors or the NICs' pause frames are known, or counting only where the node's NICs received
    pause frames (`_wait_is_pfc`).
    """
    fabric, pfc_wait = which_fabric(win, th)
    other = win.other_fabric_ports(fabric)
    if other is not None:
        # the other fabric's ports (a DGX's RoCE storage NICs beside its InfiniBand rails): not the
        # collectives' rails, their traffic, waits and link rates judged with none of the gangs'
        win = _without_ports(win, other)
    rail = win.rail
    if fabric == "ib":
        if _ETHERNET_EVENTS & set(win.node):
            # On InfiniBand the Ethernet NICs are the management network: their link going down
            # or pausing does not pace a gang's collectives, and would name the wrong cause
            from dataclasses import replace

            return replace(win, node={k: v for k, v in win.node.items() if k not in _ETHERNET_EVENTS}), "ib"
        return win, "ib"
    out = dict(rail)
    cong = rail.get("roce_cong")
    pause = win.node.get("eth_pause")
    if cong is not None or pause is not None:
        N, T = len(win.nodes), win.n_steps
        R = max((len(r) for r in win.rails), default=1) or 1
        c = cong.astype(np.float64) if cong is not None else np.full((N, R, T), np.nan)
        if pause is not None:
            # a node's pause frames spread over its ports: evenly, or, where the ports' transmit wait
            # counts PFC's holds, as each port was held (the paused port named, not its node)
            share = np.full(c.shape, 1.0 / c.shape[1])
            wait = rail.get("ib_wait")
            if pfc_wait and wait.shape == c.shape:
                with np.errstate(invalid="ignore", divide="ignore"):
                    held = np.nan_to_num(np.clip(wait, 0, None))
                    total = held.sum(axis=1, keepdims=True)
                    share = np.where(total > 0, held / np.where(total > 0, total, 1.0), share)
            per_rail = pause.astype(np.float64)[:, None, :] * share
            with np.errstate(invalid="ignore"):
                c = np.where(np.isfinite(c) | np.isfinite(per_rail), np.nan_to_num(c) + np.nan_to_num(per_rail), np.nan)
        out["ib_wait"] = c
    err = rail.get("roce_err")
    if err is not None:
        with np.errstate(invalid="ignore"):
            err = np.where(np.isfinite(err), np.where(err >= th.roce_error_events, err, 0.0), np.nan)
        old = rail.get("ib_err")
        out["ib_err"] = err if old is None else _link_events(old, err)
    from dataclasses import replace

    return replace(win, rail=out, node={k: v for k, v in win.node.items() if k not in _PORT_ROLLUPS}), "roce"


def which_fabric(win: Window, th: Thresholds = DEFAULT) -> tuple[str, bool]:
    """("ib" or "roce", whether the ports' transmit wait counts PFC's holds): fabric_view's choice."""
    rail = win.rail
    wait = rail.get("ib_wait")
    with np.errstate(invalid="ignore"):
        waited = wait is not None and bool((wait > 0).any())
    pfc_wait = waited and _wait_is_pfc(wait, win.node.get("eth_pause"), th)
    said = _link_layer_fabric(win)
    if said is not None:
        return said, pfc_wait
    cong = rail.get("roce_cong")
    if cong is not None and wait is not None and cong.shape == wait.shape:
        # per port: RoCE's if it counts ECN marks or CNPs, InfiniBand's if it has a transmit wait and
        # not those; a node with InfiniBand ports runs its collectives on them
        ecn = np.isfinite(cong).any(axis=2)
        ib = (np.isfinite(wait).any(axis=2) & ~ecn).any(axis=1)
        if ecn.any() and int(ib.sum()) >= int(ecn.any(axis=1).sum()) and not pfc_wait:
            return "ib", pfc_wait
    credit_wait = waited and not pfc_wait  # InfiniBand's own
    ethernet = _known(rail.get("roce_err")) or _known(win.node.get("eth_pause"))
    return ("roce" if _known(cong) or (ethernet and not credit_wait) else "ib"), pfc_wait


def _link_layer_fabric(win: Window) -> str | None:
    """The fabric the window's nodes' RDMA ports say they run on: InfiniBand where at least as many
    nodes have an InfiniBand port as have Ethernet (RoCE) ports only (an InfiniBand HCA is there for
    the collectives; Ethernet RDMA ports beside it are a storage or front-end network, as a DGX's
    are), else RoCE; None where no agent says (node_exporter does not)."""
    ib = eth = 0
    for node in win.nodes:
        layers = set(win.link_layers.get(node, {}).values())
        if "InfiniBand" in layers:
            ib += 1
        elif "Ethernet" in layers:
            eth += 1
    return None if not ib and not eth else "ib" if ib >= eth else "roce"


def _without_ports(win: Window, ports: np.ndarray) -> Window:
    """The window with the (N, R) `ports` left out of every rail signal: where they are the same
    columns on every node (the usual case: each node's storage NICs listed after its rails) those
    columns are dropped, a view when they are the last ones (the rail tests then cost what they do
    without them); else their cells are NaN."""
    from dataclasses import replace

    cols = ports.all(axis=0)
    fits = lambda v: v.ndim == 3 and v.shape[:2] == ports.shape  # noqa: E731
    if not (ports == cols[None, :]).all():
        return replace(win, rail={k: np.where(ports[:, :, None], v.dtype.type(np.nan), v) if fits(v) else v
                                  for k, v in win.rail.items()})
    keep = np.flatnonzero(~cols)
    take = slice(0, keep.size) if np.array_equal(keep, np.arange(keep.size)) else keep
    return replace(win, rail={k: v[:, take] if fits(v) else v for k, v in win.rail.items()},
                   rails=tuple(tuple(r[c] for c in keep if c < len(r)) for r in win.rails))


def _wait_is_pfc(wait: np.ndarray, pause: np.ndarray | None, th: Thresholds) -> bool:
    """Whether the ports' transmit wait (N, R, T) counts PFC's holds and nothing else, as some RoCE
    firmware counts `port_xmit_wait`: at `pfc_wait_share` or more of the node-steps (at least
    `pfc_wait_min_steps`) where a port of the node waited, the node's NICs received pause frames
    (`pause`, N x T)."""
    if pause is None:
        return False
    with np.errstate(invalid="ignore"):
        waited = (wait > 0).any(axis=1) & np.isfinite(pause)
        paused = waited & (pause > 0)
    n = int(waited.sum())
    return n >= th.pfc_wait_min_steps and int(paused.sum()) >= th.pfc_wait_share * n


_ROCE_SIGNALS = {"ib_wait": "roce_congestion", "ib_symbol_errors": "roce_transport_errors", "ib_tx": "roce_tx"}
_ROCE_TEXT = (("InfiniBand transmit wait", "RoCE congestion (ECN marks, CNPs, PFC pause)"),
              ("symbol error(s)", "transport error(s) (sequence errors, retransmissions)"),
              ("InfiniBand traffic", "RoCE traffic"))


def _roce_text(text: str) -> str:
    for a, b in _ROCE_TEXT:
        text = text.replace(a, b)
    return text


def _roce_names(v: Verdict) -> Verdict:
    """Evidence and reasons in RoCE's words: the tests ran on its signals in InfiniBand's slots."""
    from dataclasses import replace

    ev = tuple(replace(e, signal=_ROCE_SIGNALS.get(e.signal, e.signal), note=_roce_text(e.note)) for e in v.evidence)
    return _replace(v, evidence=ev, reason=_roce_text(v.reason))


def _replace(v: Verdict, **kw) -> Verdict:
    from dataclasses import replace
    return replace(v, **kw)


def _simple(job: Job, state: str, reason: str, gpus: int | None = None) -> Verdict:
    return Verdict(str(job.display_id), tuple(job.nodes), int(gpus if gpus is not None else (job.gpus or 0)), state,
                   0.0 if state == "insufficient_data" else 1.0, None, reason=reason, slurm_state=job.state,
                   name=job.name, user=job.user)


class _LazyNodes:
    """`sig.nodesig.get(name)` / `sig.nodesig[name]` over `_Signals.node_signal`."""

    def __init__(self, sig):
        self.sig = sig

    def get(self, name, default=None):
        got = self.sig.node_signal(name)
        return default if got is None else got


def nanquantile_rows(a: np.ndarray, q: float) -> np.ndarray:
    """Per-row quantile ignoring NaN (linear interpolation, as np.quantile), vectorised: numpy's
    nanquantile loops over rows in Python."""
    s = np.sort(a, axis=1)  # NaN sorts last
    n = np.isfinite(a).sum(axis=1)
    pos = q * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    frac = pos - lo
    rows = np.arange(a.shape[0])
    out = s[rows, lo] * (1 - frac) + s[rows, hi] * frac
    return np.where(n > 0, out, np.nan)


def _typical(per_node: np.ndarray, exclude: Sequence[int]) -> float:
    """The median of per-node values, the rows in `exclude` left out while others remain."""
    if len(exclude):
        others = per_node.copy()
        others[np.asarray(exclude, np.int64)] = np.nan
        if np.isfinite(others).any():
            return _q(others, 0.5)
    return _q(per_node, 0.5)


class _Signals:
    """Job-level (J, T) series computed for all jobs at once, plus the per-node arrays they come from."""

    def __init__(self, win: Window, maps: list[_JobMap], th: Thresholds):
        self.win, self.th = win, th
        N, T = len(win.nodes), win.n_steps
        self.T = T
        gpu2d = {s: a.reshape(-1, T) for s, a in win.gpu.items()}
        self.gpu2d = gpu2d
        self.maps = maps
        self.cache: dict = {}
        members = [m.gpu_flat for m in maps]
        # only what the screen needs for every job; the rest is computed per judged job on demand
        self.job_gpu = {s: _group_mean(gpu2d[s], members) for s in ("util", "sm") if s in gpu2d}
        self._nodesig: dict[str, np.ndarray | None] = {}
        # steps before a job started are not its own
        starts = np.array([m.job.start_time if m.job.start_time else -np.inf for m in maps], np.float64)
        self.alive = win.times[None, :] >= starts[:, None] - 1e-6 if maps else np.zeros((0, T), bool)

    def node_signal(self, name: str) -> np.ndarray | None:
        """(N, T) node-level series, computed on first use: rails averaged per node (ib_wait: the
        worst rail, link events summed), node signals as they are."""
        if name in self._nodesig:
            return self._nodesig[name]
        win = self.win
        out = None
        if name in win.node:
            out = win.node[name]
        elif name in win.rail:
            a = win.rail[name]
            fin = np.isfinite(a)
            anyf = fin.any(axis=1)
            with np.errstate(all="ignore"):
                if name == "ib_wait":
                    out = np.where(anyf, np.where(fin, a, -np.inf).max(axis=1), np.nan)
                elif name in ("ib_down", "ib_err"):
                    out = np.where(anyf, np.where(fin, a, 0).sum(axis=1), np.nan)
                    # the agent's node rollup where the node has it: its ports' series left out while
                    # still show a move a scrape late, the rollup at the scrape after it
                    roll = win.node.get(name + "_node")
                    if roll is not None:
                        out = np.where(np.isfinite(roll), roll, out)
                else:
                    out = np.where(anyf, np.where(fin, a, 0).sum(axis=1) / np.maximum(fin.sum(axis=1), 1), np.nan)
        self._nodesig[name] = out
        return out

    @property
    def nodesig(self):
        return _LazyNodes(self)

    def link_events(self) -> np.ndarray | None:
        """(N, T) link trouble per node and step: its ports' link-down events and errors, and its
        NICs' link-down events (RoCE, ethtool); None when none of them is exported."""
        return _link_events(_link_events(self.node_signal("ib_down"), self.node_signal("ib_err")),
                            _link_events(self.node_signal("eth_down"), self.node_signal("eth_err")))

    def cluster_wait_median(self, exclude: Sequence[int] = ()) -> float:
        """port_xmit_wait rate of the cluster's typical busy node (median over the nodes that carry
        traffic of their median): idle nodes wait for nothing, and counting them would make any
        traffic look congested on a cluster with many free nodes. Nodes in `exclude` (the judged
        job's own) are left out while other busy nodes remain: a gang spanning half a small
        cluster would otherwise be its own reference and hide its congestion."""
        if "cwm" not in self.cache:
            w, tx = self.node_signal("ib_wait"), self.node_signal("ib_tx")
            per_node = np.full(len(self.win.nodes), np.nan)
            if w is not None and w.size:
                per_node = nanquantile_rows(w, 0.5)
                if tx is not None:
                    with np.errstate(invalid="ignore"):
                        per_node = np.where(nanquantile_rows(tx, 0.5) >= self.th.busy_link_bytes, per_node, np.nan)
            self.cache["cwm"] = per_node
        return _typical(self.cache["cwm"], exclude)

    def cluster_blocked_median(self, exclude: Sequence[int] = ()) -> float:
        """Tasks in I/O wait on the cluster's typical node (median over nodes of their median),
        the judged job's own nodes left out while others remain."""
        if "cbm" not in self.cache:
            b = self.node_signal("blocked")
            self.cache["cbm"] = nanquantile_rows(b, 0.5) if b is not None and b.size else np.full(0, np.nan)
        return _typical(self.cache["cbm"], exclude) if self.cache["cbm"].size else math.nan

    def screen(self, maps: list[_JobMap]) -> None:
        """Vectorised pre-screen over all jobs: which could be anything but progressing. A superset
        of what the detailed per-job judgement can flag (its conditions only narrow these), so the
        Python-level work is spent on the few jobs that need it."""
        th, T, step = self.th, self.T, self.win.step
        J = len(maps)
        recent = max(2, int(round(th.recent_seconds / step)))
        u = self.job_gpu.get("util")
        if u is None or J == 0:
            self.candidate = np.ones(J, bool)
            self.act_recent = self.act_base = np.full(J, np.nan)
            return
        u = np.where(self.alive, u, np.nan)
        sm = self.job_gpu.get("sm")
        sm = np.where(self.alive, sm, np.nan) if sm is not None else np.full_like(u, np.nan)
        act = np.where(np.isfinite(sm), sm, u)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            base = nanquantile_rows(act, th.baseline_quantile)
            self.act_recent = np.nanmean(act[:, -recent:], axis=1)
            # io_degraded_fraction: a smaller slowdown with readers waiting (judged in detail)
            broad = ((act < max(th.degraded_fraction, th.io_degraded_fraction) * base[:, None])
                     | (u < th.idle_util) | (act < th.low_activity)
                     | ((u >= th.busy_util) & (sm < th.waiting_sm_ratio * u)) | ((u >= th.busy_util) & (sm < th.hang_sm)))
            down = self.link_events()
            if down is not None:
                # a gang that lost a link lately and slowed (a flapping link)
                gangs = [m.node_rows if len(m.node_rows) > 1 else [] for m in maps]
                jd = _group_mean(down, gangs)
                flaps = _recent_events(np.nan_to_num(jd) > 0, int(round(th.link_window_seconds / step)))
                slowed = act < th.link_degraded_fraction * base[:, None]
                tx = self.node_signal("ib_tx")
                jt = jt_base = None
                if tx is not None and flaps.any():
                    jt = np.where(self.alive, _group_mean(tx, gangs), np.nan)
                    jt_base = nanquantile_rows(jt, th.baseline_quantile)[:, None]
                    slowed |= jt < th.link_degraded_fraction * jt_base
                broad |= flaps & slowed
                drops = _link_events(self.node_signal("ib_down"), self.node_signal("eth_down"))
                if drops is not None:
                    # a link that went down and still errs or drops: judged in detail (`_felt_drops`),
                    # past the link window too while the gang's traffic has not come back
                    jdrop = np.nan_to_num(_group_mean(drops, gangs)) > 0
                    felt = _recent_events(jdrop, int(round(th.link_window_seconds / step)))
                    if jt is not None:
                        felt |= (np.cumsum(jdrop, axis=1) > 0) & (jt < th.link_recovered_fraction * jt_base)
                    broad |= felt & _recent_events(np.nan_to_num(jd) > 0, max(2, int(round(th.stall_min_seconds / step))))
            no_sm = ~np.isfinite(sm[:, -recent:]).any(axis=1)
            if no_sm.any() and "power" in self.gpu2d:
                rows = np.flatnonzero(no_sm)
                pw = _group_mean(self.gpu2d["power"], [maps[r].gpu_flat for r in rows])
                pw = np.where(self.alive[rows], pw, np.nan)
                pbase = nanquantile_rows(pw, th.baseline_quantile)
                broad[rows] |= (u[rows] >= th.busy_util) & (pw < th.waiting_power_fraction * pbase[:, None])
            tx = self.node_signal("ib_tx")
            if no_sm.any() and tx is not None:
                # kernels resident while a gang's traffic collapsed (judged in detail with its wait)
                rows = np.flatnonzero(no_sm)
                jt = _group_mean(tx, [maps[r].node_rows if len(maps[r].node_rows) > 1 else [] for r in rows])
                jt = np.where(self.alive[rows], jt, np.nan)
                broad[rows] |= (u[rows] >= th.busy_util) & (jt < th.ib_collapse_fraction
                                                           * nanquantile_rows(jt, th.baseline_quantile)[:, None])
        self.act_base = base
        need = max(2, int(math.ceil(th.stall_min_seconds / step)))
        cand = _trailing_run(broad & np.isfinite(act), self.alive & ~np.isfinite(act)) >= need
        util2d = self.gpu2d.get("util")
        has = np.array([len(m.gpu_flat) > 0 for m in maps])
        if util2d is not None and has.any():
            flat = np.concatenate([np.asarray(m.gpu_flat, np.int64) for m in maps if m.gpu_flat])
            lens = np.array([len(m.gpu_flat) for m in maps if m.gpu_flat])
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            rows = np.flatnonzero(has)
            with np.errstate(invalid="ignore"):
                idle_runs = _trailing_run((util2d[flat] < th.idle_util), ~np.isfinite(util2d[flat]))
            cand[rows] |= np.maximum.reduceat(idle_runs, starts) >= need
            allc = _busy_clock(self, th)
            if allc is not None:
                c = allc[flat]
                lo, hi = np.fmin.reduceat(c, starts), np.fmax.reduceat(c, starts)
                ref = _median(allc)
                ref = np.nan if ref is None else ref
                with np.errstate(invalid="ignore"):
                    cand[rows] |= (lo <= (1 - th.clock_drop) * hi) | (lo <= (1 - th.clock_drop) * ref)
            smg = self.gpu2d.get("sm")
            if smg is not None:
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    g_sm = np.nanmean(smg[flat][:, -recent:], axis=1)
                    g_u = np.nanmean(util2d[flat][:, -recent:], axis=1)
                    g_sm[~(g_u > th.idle_util)] = np.nan
                    lo, hi = np.fmin.reduceat(g_sm, starts), np.fmax.reduceat(g_sm, starts)
                    cand[rows] |= (hi >= 1.5 * lo) & (hi - lo >= 0.2)
        rate = self.win.rail.get("ib_rate")
        multi = np.array([len(m.node_rows) > 1 for m in maps])
        if rate is not None and multi.any():
            # a gang whose ports trained at different rates (one degraded link): judged in detail
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                r = np.nanmean(rate[:, :, -recent:].astype(np.float64), axis=2)
                r[~(r > 0)] = np.nan
                rmin, rmax = np.nanmin(r, axis=1), np.nanmax(r, axis=1)
                rows = np.flatnonzero(multi)
                flat = np.concatenate([np.asarray(maps[k].node_rows, np.int64) for k in rows])
                starts = np.concatenate([[0], np.cumsum([len(maps[k].node_rows) for k in rows])[:-1]])
                lo, hi = np.fmin.reduceat(rmin[flat], starts), np.fmax.reduceat(rmax[flat], starts)
                cand[rows] |= lo <= (1 - th.clock_drop) * hi
        storm = self.win.node.get("eth_storm")
        if storm is not None and multi.any():
            # a gang near a NIC in a PFC storm lately is judged in detail: one that started inside the
            # storm has it as its own baseline, so no drop from that baseline flags it
            with np.errstate(invalid="ignore"):
                fired = np.flatnonzero((storm[:, -max(1, int(round(th.link_window_seconds / step))):] > 0).any(axis=1))
            if fired.size:
                for k in np.flatnonzero(multi):
                    cand[k] |= bool(_storming_near(self.win, maps[k].node_rows, fired))
        self.candidate = cand

    def get(self, name: str, k: int) -> np.ndarray | None:
        """Job k's series of a signal (mean over its GPUs, or over its nodes), NaN before it started."""
        a = self.job_gpu.get(name)
        if a is not None:
            row = a[k]
        elif name in self.gpu2d:
            row = _group_mean(self.gpu2d[name], [self.maps[k].gpu_flat])[0]
        elif self.node_signal(name) is not None:
            row = _group_mean(self.node_signal(name), [self.maps[k].node_rows])[0]
        else:
            return None
        return np.where(self.alive[k], row, np.nan)

    def outage_reason(self) -> str:
        """Most nodes silent at the end of the window: the collectors or their network failed."""
        win, th = self.win, self.th
        util = win.gpu.get("util")
        if util is None or util.shape[1] == 0:
            return ""
        recent = max(1, int(round(th.stale_seconds / win.step)))
        has_gpus = np.isfinite(util).any(axis=(1, 2))
        fresh = np.isfinite(util[:, :, -recent:]).any(axis=(1, 2))
        n = int(has_gpus.sum())
        silent = int((has_gpus & ~fresh).sum())
        if n >= 4 and silent >= th.outage_fraction * n:
            return (f"{silent} of {n} nodes sent no GPU samples in the last {th.stale_seconds:.0f} s: collector, "
                    "Prometheus or network outage, not job stalls")
        return ""


def _q(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if x.size else float("nan")


def _judge(win: Window, sig: _Signals, k: int, jm: _JobMap, th: Thresholds, outage: str) -> Verdict:
    job = jm.job
    base = dict(jobid=jm.jobid, nodes=tuple(job.nodes), gpus=int(jm.n_gpus), slurm_state=job.state, name=job.name,
                user=job.user)
    now, step, T = win.end, win.step, win.n_steps
    if job.state in SUSPENDED_STATES:
        return Verdict(**base, state="suspended", confidence=1.0, since=None,
                       reason=f"Slurm has the job {job.state.lower()} (gang time-slicing or preemption by suspend); "
                              "not judged")
    if outage:
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None, reason=outage)
    if jm.missing_nodes and len(jm.missing_nodes) == len(job.nodes):
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None,
                       reason=f"the metrics know none of the job's nodes ({', '.join(jm.missing_nodes[:5])})")
    if not jm.gpu_flat:
        why = (f"the job runs on MIG instances ({', '.join(jm.mig)}): metrics per instance are not told apart "
               "from the rest of their GPU, so the job is not judged" if jm.mig else
               "no GPU series for the job's GPUs (GPU indices unknown or not exported)")
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None, reason=why)
    if job.start_time and now - job.start_time < th.job_grace_seconds:
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None,
                       reason=f"job started {now - job.start_time:.0f} s ago; not judged in its first "
                              f"{th.job_grace_seconds:.0f} s (start-up, data-loader warm-up)")
    recent = max(2, int(round(th.recent_seconds / step)))
    util_g = sig.gpu2d["util"][jm.gpu_flat] if "util" in sig.gpu2d else None
    if util_g is None:
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None, reason="no GPU utilisation series")
    fresh = max(1, int(round(th.stale_seconds / step)))
    reporting = np.isfinite(util_g[:, -fresh:]).any(axis=1)
    cover = reporting.sum() / max(jm.n_gpus, len(jm.gpu_flat), 1)
    if cover < th.min_coverage:
        silent = sorted({f"{n}" for (n, _), ok in zip(jm.gpu_names, reporting) if not ok} | set(jm.missing_nodes))
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=None,
                       reason=f"only {int(reporting.sum())} of {max(jm.n_gpus, len(jm.gpu_flat))} GPUs reported in the "
                              f"last {fresh * step:.0f} s (silent or unknown: {', '.join(silent[:6])})")
    notes = []
    if jm.missing_nodes:
        notes.append(f"nodes without metrics: {', '.join(jm.missing_nodes[:5])}")
    if not sig.candidate[k]:
        ab, ar = float(sig.act_base[k]), float(sig.act_recent[k])
        return Verdict(**base, state="progressing", confidence=0.9 if "sm" in sig.job_gpu else 0.75, since=None,
                       reason="; ".join([f"activity at {ar / ab:.0%} of baseline" if ab > 0 else "activity normal"] + notes),
                       evidence=(Evidence("activity", "", _f(ar), _f(ab), _f(th.degraded_fraction * ab)),))

    nanT = np.full(T, np.nan)
    util = sig.get("util", k)
    sm = sig.get("sm", k)
    has_sm = sm is not None and np.isfinite(sm[-recent:]).any()
    act = np.where(np.isfinite(sm), sm, util) if has_sm else util
    act_base = _q(act, th.baseline_quantile)
    util_base = _q(util, th.baseline_quantile)
    sm_base = _q(sm, th.baseline_quantile) if has_sm else float("nan")
    power = None if has_sm else sig.get("power", k)
    has_power = power is not None and bool(np.isfinite(power[-recent:]).any())
    power_base = _q(power, th.baseline_quantile) if has_power else float("nan")
    partial = _partial_idle(win, sig, jm, th, base, util_g)
    rows = jm.gpu_flat  # the GPUs the job is judged on
    if partial is not None:
        # the GPUs that do work keep their pace: some GPUs were left idle, the job is not stalled
        rows = [g for g, name in zip(jm.gpu_flat, jm.gpu_names) if name not in partial.idle_names]
        with np.errstate(all="ignore"):
            rest = _mean((sig.gpu2d["sm"] if has_sm else sig.gpu2d["util"])[rows][:, -recent:])
        rest = np.nan if rest is None else rest
        works = np.isfinite(rest) and rest >= th.degraded_fraction * act_base
        if works and not has_sm and has_power:
            # without SM activity, busy utilisation may be kernels spinning in a hung collective
            # (the ranks on the idle GPUs died): board power tells work from spinning
            with np.errstate(all="ignore"):
                p_rest = _mean(sig.gpu2d["power"][rows][:, -recent:])
            works = p_rest is not None and p_rest >= th.waiting_power_fraction * power_base
        if works:
            return partial.verdict
        # The others do not work either: what the job does is what the GPUs it still holds do.
        # Ranks that died (OOM, a segfault) free their GPUs while the survivors spin forever in
        # the collective waiting for them; averaged with the freed GPUs, the survivors' pinned
        # utilisation reads as half a gang idle, which it is not (NCCL busy-polls).
        util = _rows_series(sig, "util", rows, k)
        sm = _rows_series(sig, "sm", rows, k) if sm is not None else None
        power = _rows_series(sig, "power", rows, k) if power is not None else None
        act = np.where(np.isfinite(sm), sm, util) if has_sm else util
        act_base, util_base = _q(act, th.baseline_quantile), _q(util, th.baseline_quantile)
        sm_base = _q(sm, th.baseline_quantile) if has_sm else float("nan")
        power_base = _q(power, th.baseline_quantile) if has_power else float("nan")
        notes.append(f"{len(partial.idle_names)} of {len(jm.gpu_flat)} GPUs idle; judged on the other {len(rows)}")
    fs_w, fs_r = sig.get("fs_write", k), sig.get("fs_read", k)
    psi, iow = sig.get("psi_io", k), sig.get("iowait", k)
    ib_tx, ib_wait = sig.get("ib_tx", k), sig.get("ib_wait", k)
    ib_down = _link_events(_link_events(sig.get("ib_down", k), sig.get("ib_err", k)),
                           _link_events(sig.get("eth_down", k), sig.get("eth_err", k)))
    multi_node = len(jm.node_rows) > 1

    def val(a):
        return a if a is not None else nanT

    fs_w, fs_r, psi, iow, ib_tx, ib_wait, ib_down = map(val, (fs_w, fs_r, psi, iow, ib_tx, ib_wait, ib_down))
    blocked = sig.get("blocked", k)
    own_psi = win.job.get("psi_io", {}).get(jm.jobid)
    if own_psi is not None and own_psi.shape == (T,) and np.isfinite(own_psi).any():
        # the job's own cgroup pressure: on a shared node it is this job's, not a neighbour's
        psi = np.where(sig.alive[k], own_psi.astype(np.float64), np.nan)
        shared_io = False
    else:
        shared_io = jm.shared
    ib_base = _q(ib_tx, th.baseline_quantile)
    wait_base = _q(ib_wait, 0.5)
    read_base = _q(fs_r, th.baseline_quantile)
    held, empty = _holding(sig, jm, k, th, rows)
    mem_known = bool((held | empty).any())
    with np.errstate(invalid="ignore"):
        idle_all = util < th.idle_util
        if has_sm:
            lazy = sm < th.hang_sm
        elif has_power:  # no profiling metrics: board power tells resident-but-idle kernels apart
            lazy = power < th.hang_power_fraction * power_base
        else:
            lazy = np.zeros(T, bool)
        writing = fs_w >= th.checkpoint_write_bytes
        # Readers wait: I/O pressure or iowait. While the job writes at checkpoint speed the pressure
        # is the checkpoint's own (writers block in dirty-page throttling): no evidence of an input
        # stall there. On a shared node the writes may be a neighbour's while the pressure is the
        # job's own: then it stands.
        io_wait = (psi >= th.psi_io_stalled) | (iow >= th.iowait_stalled)
        # where PSI is not exported, the tasks in I/O wait say the same (thresholds: blocked_waiting);
        # where it is, pressure short of a stall (25 % of the time) with readers piling up in I/O
        # wait is one: two witnesses that agree, each at its elevated level
        no_psi = ~np.isfinite(psi)
        readers_blocked = _readers_blocked(sig, k, jm, blocked, act, act_base, th)
        readers_blocked &= no_psi | (psi >= th.psi_io_elevated) | (iow >= th.iowait_elevated)
        io_wait |= readers_blocked
        if not (jm.shared and not shared_io):
            io_wait &= ~writing
        # a filesystem target the job reads from answering far slower than its peers (Lustre client
        # waits are not all iowait, so PSI alone misses a slow OST)
        slow_target = _slow_target_steps(win, sig, jm, th, sig.alive[k])
        spinning = util >= th.busy_util
        congested = np.zeros(T, bool)
        wait_ref = math.nan
        link_event = np.zeros(T, bool)
        collapsed = np.zeros(T, bool)
        flat = np.zeros(T, bool)
        if multi_node:
            if np.isfinite(wait_base):
                # the cluster's typical node is the reference: a gang congested for the whole
                # window has its congestion as its own median
                cluster_wait = sig.cluster_wait_median(jm.node_rows)
                ref = wait_ref = cluster_wait if np.isfinite(cluster_wait) else wait_base
                # ... and not below the job's own typical wait: a job whose traffic naturally waits
                # (all-to-all on a busy fabric) is not congested when it waits less than usual
                congested = (ib_wait >= th.wait_ratio * max(ref, 1.0)) & (ib_wait >= th.own_wait_fraction * wait_base)
                if np.isfinite(cluster_wait):
                    # a gang whose traffic marks far less than the cluster's typical node (RoCE's ECN
                    # marks and CNPs follow the traffic pattern) backs up where its wait jumps
                    # wait_ratio times its own at pace and half that over the cluster's: two
                    # references that agree, each at its lesser level
                    with np.errstate(invalid="ignore"):
                        at_pace = act >= th.degraded_fraction * act_base
                    own = _q(ib_wait[at_pace], 0.5) if at_pace.sum() >= recent else math.nan
                    if own < cluster_wait:
                        congested |= ((ib_wait >= th.wait_ratio * max(own, 1.0))
                                      & (ib_wait >= 0.5 * th.wait_ratio * max(cluster_wait, 1.0)))
            # a link that went down lately is still suspect: a bad cable or transceiver flaps every
            # few minutes and the gang crawls between the drops (retrains, retransmissions)
            link_event = _recent_events(ib_down > 0, int(round(th.link_window_seconds / step)))
            if np.isfinite(ib_base) and ib_base > 0:
                collapsed = ib_tx < th.ib_collapse_fraction * ib_base
                flat = ~(ib_tx >= th.ib_flat_fraction * ib_base)
            else:
                flat = np.ones(T, bool)
        else:
            flat = np.ones(T, bool)
        fabric = congested | link_event  # the job's own ports back up or its links drop
        # a NIC in a PFC storm on the gang's nodes or leaf (RoCE; lately, as a flapping link)
        storms = _storms_near(win, jm) if multi_node else np.zeros(T, bool)
        storm_near = _recent_events(storms, int(round(th.link_window_seconds / step)))
        degraded = (act < th.degraded_fraction * act_base) | idle_all
        if not has_sm:
            # kernels resident with the board drawing what a spin draws (`hang_power_fraction`) are
            # no work, whatever the utilisation says (SM activity, where exported, says so itself):
            # a gang whose ranks died spins from the scrape they did, though its wire's rate shows
            # the hang a scrape later (catalogue seed 2402 scraped every minute: read as idle GPUs
            # while the others work)
            degraded |= spinning & lazy
        if multi_node:
            # a gang paced by a flapping link: slower work, or (kernels spinning keep utilisation
            # up where SM activity is not exported) less traffic than its baseline
            slowed = act < th.link_degraded_fraction * act_base
            if np.isfinite(ib_base) and ib_base > 0:
                slowed |= ib_tx < th.link_degraded_fraction * ib_base
            degraded |= link_event & slowed
            # A link that went down under the gang, taking its traffic with it (its rate collapsed,
            # fell below link_degraded_fraction of its baseline, or its ports backed up in the
            # scrape of the drop: a drop of seconds is diluted in a minute's rate, catalogue RoCE
            # seed 1504 scraped every minute, 53 % of its traffic), and still errs or drops: the
            # gang's collectives stall at every drop and retransmit between them, however fast it
            # runs in the meantime. A drop alone is no stall (the port may carry none of the gang's
            # traffic), nor errors alone (marginal cables err at a low rate for months).
            known_base = np.isfinite(ib_base) and ib_base > 0
            crawl = ib_tx < th.link_recovered_fraction * ib_base if known_base else np.zeros(T, bool)
            dip = collapsed | congested | (ib_tx < th.link_degraded_fraction * ib_base if known_base else False)
            degraded |= _felt_drops(sig, k, ib_down, dip, crawl, step, th)
        if not shared_io:
            # a job stalled since before the window has its stall as baseline: absolute rule (not
            # on a shared node without the job's own pressure: the PSI may be a neighbour's)
            degraded |= (act < th.low_activity) & io_wait
            degraded |= (act < th.io_degraded_fraction * act_base) & io_wait
        if has_sm:
            slack = (sm < th.waiting_sm_fraction * sm_base) | (sm < th.waiting_sm_ratio * util)
        elif has_power:
            slack = power < th.waiting_power_fraction * power_base
        else:
            slack = act < th.degraded_fraction * act_base
        victim = np.zeros(T, bool)
        if multi_node:
            # A PFC storm on the gang's leaf pauses every lossless link through the switch: a gang
            # spinning there whose own ports are held back is its victim, whatever its own baselines
            # say (one that started inside the storm has the storm as its baseline). Where SM
            # activity is exported, SMs busy for their utilisation say it works all the same.
            # A storm that comes in bursts leaves the ports calm for a scrape between them: a calm
            # under stall_min_seconds near the storm does not end the hold.
            # Its ports held back 10x their wait before the storm began, while its GPUs spin with
            # the slack of a wait, hold it back too: the storm pauses the cluster's other links as
            # well, so their typical node is no reference then (RoCE seed 1301: 1,000x its own wait,
            # under the cluster's 10x), nor its baselines where the storm is most of the window.
            # Held back so, it is no hang though its wire goes quiet (RoCE seed 1404: its traffic
            # at 1.4 % of its baseline, its ports waiting 500x their wait before the storm).
            # Ports that waited 10x the cluster's typical node before the storm as a rule (an
            # all-to-all on a busy fabric) say nothing new by waiting so in it: only their jump
            # holds the gang back (catalogue RoCE seed 2001: a gang at its power and traffic).
            began = np.flatnonzero(storms)
            before = ib_wait[:began[0]] if began.size else ib_wait[:0]
            calm = _q(before, 0.5) if np.isfinite(before).sum() >= recent else math.nan
            jumped = (ib_wait >= th.wait_ratio * max(calm, 1.0)) & slack if np.isfinite(calm) else congested
            usual = np.isfinite(calm) and np.isfinite(wait_ref) and calm >= th.wait_ratio * max(wait_ref, 1.0)
            held_back = _recent_events(jumped if usual else congested | jumped, int(round(th.stall_min_seconds / step)))
            victim = storm_near & held_back & spinning
            if has_sm:
                victim &= sm < th.waiting_sm_ratio * util
        # Hung: kernels resident with SMs idle and nothing on the wire (an NCCL collective that
        # never completes), or every GPU idle while the job's processes still hold their memory,
        # nothing moves on the fabric and no reader waits (a whole-job deadlock on the host).
        # Congestion or a link event is the network's doing, not a hang.
        # (on a node shared with other jobs the node's reads are theirs as much as this job's: a
        # neighbour that keeps reading says nothing about whether this job's processes still run)
        reading = ((fs_r >= 0.5 * read_base) if np.isfinite(read_base) and read_base > 1e6 and not jm.shared
                   else np.zeros(T, bool))
        hang = ((spinning & lazy) | (idle_all & held & ~io_wait & ~slow_target & ~reading)) & flat & ~fabric & ~victim
        if multi_node and np.isfinite(ib_base) and ib_base > 0:
            # Power says kernels spin, not what they wait for: a collective over a fabric that backs up
            # and one that waits for ranks that will never come draw the same. A gang's wire that went
            # quiet while its ports neither back up nor drop waits on no network, at whatever level
            # the spin draws (an A100 spinning draws ~120 W, half of a light training load). A NIC
            # near the gang in a PFC storm is the network's doing though its pauses may not reach 10x.
            hang |= spinning & slack & flat & ~fabric & ~storm_near
        # Network: GPUs spin in a collective that waits on the fabric (NCCL busy-polls, so
        # utilisation stays high while SM activity falls), or the GPUs go quiet because the wait
        # happens on the host (MPI/Gloo over the host, host-staged copies, blocking waits) while the
        # job's own ports show the fabric backing up or links dropping.
        net = multi_node & ~hang & ((spinning & slack & (fabric | collapsed)) | (degraded & fabric & ~io_wait))
        if not has_sm:
            # Kernels resident while the gang's traffic collapsed and its own ports back up: the
            # network stall, whatever the power (a spin draws 55-65 % of a training load, about
            # the cut: seed 1509, 62 %). SMs at work, where exported, say otherwise.
            net |= multi_node & ~hang & spinning & congested & collapsed
        net |= victim
        degraded |= net | hang
        # I/O: readers wait, or a target the job reads from is slow, while GPUs the job holds starve
        # (GPUs with nothing on them are idle whatever the node reads)
        io = (io_wait | slow_target) & ~empty
        # ... but GPUs spinning in a collective that a PFC storm holds back starve for no data: tasks
        # blocked in I/O beside them (a checkpoint's writers, storage behind the paused links) are
        # the storm's doing too (catalogue RoCE seed 2900 without PSI or the filesystem's series)
        io &= ~victim
        if not shared_io and np.isfinite(read_base) and read_base > 1e6:
            # readers waiting a smaller share of the time while the job's reads fell well below
            # their own past: the loaders wait for data (a network stall or a hang reads less too,
            # but nobody waits on storage there)
            some_wait = (psi >= th.psi_io_elevated) | (iow >= th.iowait_elevated) | readers_blocked
            io |= some_wait & ~writing & (fs_r < th.read_fell_fraction * read_base) & held
        # idle: GPUs with no work and no memory of the job's; with memory unknown, idle GPUs that
        # nothing else explains
        unused = idle_all & empty
        idle = idle_all & ~held & ~net
    alive = sig.alive[k]
    known = np.isfinite(act) & alive
    gaps = (alive & ~known)[None, :]  # lost scrapes inside a stall do not end it
    stall_step = degraded & known
    run = int(_trailing_run(stall_step[None, :], gaps)[0])
    fs_known = np.isfinite(fs_w).any()  # write traffic is what tells a checkpoint from a stall
    need = th.stall_min_seconds if fs_known else th.stall_min_seconds_blind
    if run and not fs_known:
        # a checkpoint pauses the GPUs, keeps their memory and quiets the fabric; kernels left
        # resident, a fabric that backs up, links that drop or GPUs emptied are no checkpoint, so
        # they need no longer wait
        # (ports that back up at the gang's pace as a rule, as a spread gang's on a busy fabric
        # or HCAs carrying the storage traffic do, say nothing new by backing up in a pause:
        # catalogue seed 1503 without PSI or the filesystem's series)
        tail_run = slice(T - run, T)
        with np.errstate(invalid="ignore"):
            at_pace = act >= th.degraded_fraction * act_base
        usual = at_pace.sum() >= recent and congested[at_pace].mean() >= 0.5
        backs_up = fabric
        if usual:
            # ... unless they now back up wait_ratio times their own wait at pace (a host-waiting
            # stall: RoCE seed 1600 without PSI or the filesystem's series, 60x)
            own = _q(ib_wait[at_pace], 0.5)
            with np.errstate(invalid="ignore"):
                backs_up = link_event | (ib_wait >= th.wait_ratio * max(own, 1.0))
        if (spinning[tail_run] | backs_up[tail_run] | empty[tail_run]).mean() >= 0.5:
            need = th.stall_min_seconds
    with np.errstate(invalid="ignore"):
        # GPUs that keep kernels resident (a network wait, a hang) are not pausing for a checkpoint
        ckpt_like = writing & ~(util >= th.busy_util)
    # The pause began after the last step of the run where the job worked: the run bridges one such
    # step, so a one-scrape hiccup (a slow batch) a step before a checkpoint joins it (catalogue
    # seed 2104), and the pause would seem to begin before its writes.
    with np.errstate(invalid="ignore"):
        worked = np.flatnonzero((known & ~degraded)[T - run:])
    begin = T - run + (int(worked[-1]) + 1 if worked.size else 0)
    # the pause's first steps whose writes are known, as many as one write sample spans and one more:
    # the filesystem's exporter is scraped apart from the GPUs', its rate up to a scrape behind
    # them (a lost scrape there says nothing; once a minute on a 15 s grid, four steps hold a sample)
    head = (begin + np.flatnonzero(np.isfinite(fs_w[begin:]))[:_held_steps(win) + 1]
            if begin < T else [])
    # ... and at its end the GPUs' exporter may be a scrape behind the node's: steps where the
    # writes ended and the job's traffic or reads are back, as many as one sample spans, are the
    # gang resuming while its GPUs still read idle (catalogue seed 1704 without PSI)
    end = T
    while T - end < min(_held_steps(win), T - begin - 1) and (~flat | reading)[end - 1] and not writing[end - 1]:
        end -= 1
    if run and ckpt_like[head].any() and ckpt_like[max(begin, end - 2):end].all():
        # a checkpoint: GPUs pause when the writing starts and for as long as it lasts (I/O
        # pressure during it is normal); only one that runs far too long is a stall. A pause that
        # began before the writes or outlasts them is no checkpoint.
        need = max(need, th.checkpoint_max_seconds)
    ev: list[Evidence] = []
    if run * step >= need and run >= 2:
        # the cause is what the latest part of the stall shows (a stall can change cause: GPUs
        # left idle, then the filesystem slows); it began where that cause's own run began
        last = min(run, recent)
        lag = _held_steps(win)
        if lag > 1 and run > lag:
            # at a scrape slower than the grid, the run's first sample holds rates (traffic,
            # reads, I/O pressure) over a scrape interval that began before the stall, diluted,
            # while the gauges (utilisation) show the fall whole: once a later sample is in, the
            # cause is what the samples after the first show (catalogue seeds 2401 and 2405
            # scraped every minute: an input stall and a deadlock unexplained for a minute)
            last = min(run - lag, recent)
        tail = slice(T - last, T)
        flags = {"stalled_io": io, "hung": hang, "stalled_network": net, "idle_gpus": idle | unused}
        votes = {c: int((f & known)[tail].sum()) for c, f in flags.items()}
        cause = max(votes, key=lambda c: (votes[c], -list(votes).index(c)))
        seen = max(1, int(known[tail].sum()))  # the steps with data decide, not the lost ones
        if int((unused & known)[tail].sum()) >= 0.5 * seen:
            # nothing of the job's on its GPUs: idle whatever the node reads or the fabric does
            cause = "idle_gpus"
        elif votes["stalled_io"] >= 0.5 * seen:
            # I/O first: GPUs the job holds that starve because data does not come
            cause = "stalled_io"
        share = votes[cause] / seen
        if share < 0.5:
            # no stall cause holds: a member that paces the gang (a link trained narrower long
            # ago, a GPU clocked down) explains a gang slowed this far
            v = _slow_link(win, sig, jm, th, base) or _straggler(win, sig, jm, th, base)
            if v is not None:
                return v
            if partial is not None:
                return partial.verdict
            seg = slice(T - run, T)
            why = _unexplained(th, tail, dict(
                psi=psi, iowait=iow, blocked=blocked, fs_read=fs_r, read_base=read_base, slow_target=slow_target, target_known=_has_target_latency(win),
                ib_wait=ib_wait, cluster_wait=sig.cluster_wait_median(jm.node_rows) if multi_node else float("nan"),
                ib_tx=ib_tx, ib_base=ib_base, ib_down=ib_down, multi_node=multi_node, has_sm=has_sm,
                has_power=has_power, util=util, held=held, empty=empty, mem_known=mem_known, flags=flags))
            return Verdict(**base, state="insufficient_data", confidence=0.0, since=float(win.times[T - run]),
                           evidence=(Evidence("activity", "", _mean((act[seg])), act_base,
                                              th.degraded_fraction * act_base),),
                           reason=f"activity fell below {th.degraded_fraction:.0%} of the job's baseline "
                                  f"{run * step:.0f} s ago and no single cause holds for most of the last "
                                  f"{last * step:.0f} s: {why}" + ("; " + "; ".join(notes) if notes else ""))
        crun = int(_trailing_run((flags[cause] & stall_step)[None, :], gaps)[0])
        crun = min(run, max(crun, last if share >= 0.5 else 0, 1))
        if last < min(run, recent) and crun >= last:
            crun = run  # ... and the stall began with that first sample, whose rates were diluted
        seg = slice(T - crun, T)
        since = float(win.times[T - crun])
        ev.append(Evidence("activity", "", _mean((act[seg])), act_base, th.degraded_fraction * act_base,
                           note="SM activity" if has_sm else "GPU utilisation"))
        culprit, kind, cev = "", "", []
        if cause == "stalled_io":
            ev += [Evidence("psi_io", "", _mean((psi[seg])), _median((psi[:T - crun])) if T > crun else None,
                            th.psi_io_stalled)] if np.isfinite(psi[seg]).any() else []
            if readers_blocked[seg].any():
                ev.append(Evidence("procs_blocked", "", _mean(blocked[seg]),
                                   _median(blocked[:T - crun]) if T > crun else None, th.blocked_waiting,
                                   note="tasks in I/O wait per node" + (" (PSI not exported)" if no_psi[seg].all() else "")))
            culprit, kind, cev = _io_culprit(win, sig, jm, seg, th, sig.alive[k])
        elif cause == "stalled_network":
            # a link that retrained at a lower width or speed and stays up paces the gang: that
            # port is a straggler (its retrain counts a link-down), not a fabric-wide stall
            slow = _slow_link(win, sig, jm, th, base)
            if slow is not None:
                return slow
            ev.append(Evidence("ib_wait", "", _mean((ib_wait[seg])), _f(wait_base),
                               _f(th.wait_ratio * wait_base) if np.isfinite(wait_base) else None))
            ev.append(Evidence("ib_tx", "", _mean((ib_tx[seg])), _f(ib_base), _f(th.ib_collapse_fraction * ib_base)))
            culprit, kind, cev = _net_culprit(win, sig, jm, seg, th)
        elif cause == "hung":
            ev.append(Evidence("util", "", _mean((util[seg])), util_base, th.busy_util))
            if has_sm:
                ev.append(Evidence("sm", "", _mean((sm[seg])), sm_base, th.hang_sm))
            elif has_power:
                ev.append(Evidence("power", "", _mean(power[seg]), _f(power_base), _f(th.hang_power_fraction * power_base)))
            if multi_node:
                ev.append(Evidence("ib_tx", "", _mean((ib_tx[seg])), _f(ib_base),
                                   _f(th.ib_flat_fraction * ib_base)))
            culprit, kind = f"job {jm.jobid}", "job"
        elif cause == "idle_gpus":
            ev.append(Evidence("util", "", _mean((util[seg])), util_base, th.idle_util))
            culprit, kind = f"job {jm.jobid}", "job"
        conf = min(1.0, share * min(1.0, crun * step / (2 * need)) + 0.25 * bool(culprit and cev))
        return Verdict(**base, state=cause, confidence=round(conf, 3), since=since, culprit=culprit, culprit_kind=kind,
                       evidence=tuple(ev + cev), gpu_hours_lost=jm.n_gpus * (now - since) / 3600.0,
                       reason="; ".join(notes))
    # not stalled: stragglers and partially idle GPUs
    v = _straggler(win, sig, jm, th, base)
    if v is not None:
        return v
    if partial is not None:
        # GPUs idle for long while the working ones pause (a checkpoint): still idle GPUs
        return partial.verdict
    spun = _spun_throughout(win, sig, jm, th, base, known, spinning & lazy, util, sm, ib_wait) if has_sm else None
    if spun is not None:
        return spun
    if not fs_known and run >= 2 and run * step >= th.stall_min_seconds:
        # past the time any other stall takes to be judged, without the write rates that tell a
        # checkpoint from a stall: not known to progress either (a site without the filesystem's
        # exporter waits up to stall_min_seconds_blind for every stall that looks like a checkpoint)
        seg = slice(T - run, T)
        return Verdict(**base, state="insufficient_data", confidence=0.0, since=float(win.times[T - run]),
                       evidence=(Evidence("activity", "", _mean(act[seg]), act_base, th.degraded_fraction * act_base),),
                       reason=f"activity below {th.degraded_fraction:.0%} of the job's baseline for {run * step:.0f} s "
                              "with no filesystem write rates: a checkpoint (GPUs paused, memory kept, fabric no busier "
                              "than at the job's pace) "
                              f"cannot be told from a stall until it lasts {need:.0f} s"
                              + ("; " + "; ".join(notes) if notes else ""))
    conf = 0.9 if has_sm else 0.75
    ar = _mean(act[-recent:])
    r = f"activity at {ar / act_base:.0%} of baseline" if ar is not None and act_base > 0 else "activity normal"
    return Verdict(**base, state="progressing", confidence=conf, since=None, reason="; ".join([r] + notes),
                   evidence=(Evidence("activity", "", _mean((act[-recent:])), act_base,
                                      th.degraded_fraction * act_base),))


def _spun_throughout(win: Window, sig: _Signals, jm: _JobMap, th: Thresholds, base: dict, known: np.ndarray,
                     spin: np.ndarray, util: np.ndarray, sm: np.ndarray, ib_wait: np.ndarray) -> Verdict | None:
    """An insufficient_data verdict for a job whose GPUs' SMs have been idle at every step the
    window holds of it, with kernels resident over the latest (a collective or NCCL's set-up
    waiting since before the job's first judged step, or a job that started inside a fault): its
    own baselines are that wait, so "at its baseline" says nothing, and without a step of work to
    compare with, a hang and a network wait its ports do not show beyond the cluster's 10x cannot
    be told apart. None when any step shows the SMs at work, too few are known, or the GPUs are not
    busy now (a job that lets its GPUs idle is judged on that)."""
    need = max(2, int(math.ceil(th.stall_min_seconds / win.step)))
    sm_known = known & np.isfinite(sm)
    if int(sm_known.sum()) < need or bool((sm[sm_known] >= th.hang_sm).any()):
        return None
    if not bool(spin[np.flatnonzero(known)[-need:]].all()):
        return None
    first = int(np.flatnonzero(known)[0])
    since = float(win.times[first])
    started = bool(jm.job.start_time) and jm.job.start_time >= float(win.times[0])
    span = f"since it started {win.end - since:.0f} s ago" if started else \
        f"for the whole window ({win.end - since:.0f} s of it)"
    what = [f"its GPUs have run kernels with their SMs idle (utilisation {_mean(util[known]):.0%}, SM activity "
            f"{_mean(sm[known]):.1%}) {span}: no step of work to judge it against, so it is not called "
            "progressing; a collective or NCCL set-up waiting since then, or a job that started inside a fault"]
    if len(jm.node_rows) > 1:
        cw = sig.cluster_wait_median(jm.node_rows)
        w = _mean(ib_wait[known])
        if w is not None and np.isfinite(cw) and cw > 0:
            what.append(f"its ports wait {w / cw:.1f}x the cluster's typical node (congested from "
                        f"{th.wait_ratio:g}x)")
    return Verdict(**base, state="insufficient_data", confidence=0.0, since=since, reason="; ".join(what),
                   evidence=(Evidence("sm", "", _mean(sm[known]), None, th.hang_sm, note="SM activity"),
                             Evidence("util", "", _mean(util[known]), None, th.busy_util, note="GPU utilisation")))


def _rows_series(sig: _Signals, name: str, rows: list[int], k: int) -> np.ndarray | None:
    """Mean over some of job k's GPUs of a GPU signal, NaN before the job started."""
    a = sig.gpu2d.get(name)
    if a is None:
        return None
    return np.where(sig.alive[k], _group_mean(a, [rows])[0], np.nan)


def _mean(x) -> float | None:
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _median(x) -> float | None:
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else None


def _link_events(down: np.ndarray | None, errors: np.ndarray | None) -> np.ndarray | None:
    """Link trouble per step: link-down events, or symbol errors counted (a failing cable or
    transceiver errs before and between its drops); None when neither is exported."""
    if down is None:
        return errors
    if errors is None:
        return down
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(down) | np.isfinite(errors), np.nan_to_num(down) + np.nan_to_num(errors), np.nan)


def _felt_drops(sig: _Signals, k: int, events: np.ndarray, dip: np.ndarray, crawl: np.ndarray, step: float,
                th: Thresholds) -> np.ndarray:
    """Per step: one of job k's links went down in the last `link_window_seconds` in a step where
    the gang's traffic dipped (`dip`, the step before or after too: a counter and a rate land in
    different scrapes), and the links still err or drop (an event in the last
    `stall_min_seconds`). Past that window too while the gang's traffic has not come back
    (`crawl`) and the links still err: a link that flaps every few minutes under a gang that
    crawls between the drops (catalogue seed 2105: drops 8 minutes apart, the gang at 76 % of its
    traffic) is one stall, not one per drop. At a scrape a minute, an event in either of the last
    two scrapes: the one before may have landed a grid step late or been lost (seed 2105 scraped
    every minute: 75 s between two). All False where link-down counters are not exported."""
    drops = _link_events(sig.get("ib_down", k), sig.get("eth_down", k))
    if drops is None:
        return np.zeros(dip.shape, bool)
    near = dip.copy()
    near[1:] |= dip[:-1]
    near[:-1] |= dip[1:]
    with np.errstate(invalid="ignore"):
        hit = (drops > 0) & near
        live = _recent_events(events > 0, max(2, int(round(th.stall_min_seconds / step)), 2 * _held_steps(sig.win)))
    felt = _recent_events(hit, int(round(th.link_window_seconds / step))) & live
    crawling = live & crawl
    for t in range(1, felt.size):
        felt[t] |= felt[t - 1] and crawling[t]
    return felt


def _recent_events(events: np.ndarray, width: int) -> np.ndarray:
    """Per step (last axis): an event happened in this step or the `width - 1` before it."""
    ev = events.astype(np.int64)
    c = np.concatenate([np.zeros(ev.shape[:-1] + (1,), np.int64), np.cumsum(ev, axis=-1)], axis=-1)
    w = max(int(width), 1)
    lo = np.maximum(np.arange(1, c.shape[-1]) - w, 0)
    return (c[..., 1:] - c[..., lo]) > 0


def _storming_near(win: Window, rows: Sequence[int], storming: Sequence[int]) -> list[int]:
    """Of the nodes whose NICs stormed (`storming`), those near a job on `rows`: one of its nodes or
    on a leaf switch they hang off (its pause frames stall every link through the switch); without
    the leaf switches, its own nodes or the one storm in the cluster."""
    leaves = {win.leaf_of.get(win.nodes[i], "") for i in rows} - {""}
    mine = set(rows)
    near = [int(i) for i in storming if i in mine or win.leaf_of.get(win.nodes[i], "") in leaves]
    if not near and not win.leaf_of and len(storming) == 1:
        near = [int(storming[0])]
    return near


def _storms_near(win: Window, jm: _JobMap) -> np.ndarray:
    """(T,) steps where a NIC's PFC storm guard fired (`eth_storm`) near the job (`_storming_near`)."""
    a = win.node.get("eth_storm")
    if a is None:
        return np.zeros(win.n_steps, bool)
    with np.errstate(invalid="ignore"):
        fired = a > 0
    near = _storming_near(win, jm.node_rows, np.flatnonzero(fired.any(axis=1)))
    return fired[near].any(axis=0) if near else np.zeros(win.n_steps, bool)


def _holding(sig: _Signals, jm: _JobMap, k: int, th: Thresholds, rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(held, empty) per step: most of the GPUs `rows` (the job's) hold memory beyond what the
    driver and a bare context take (its processes are on them), or most sit at that idle level.
    Both False where no GPU memory is known."""
    T = sig.T
    mem = sig.gpu2d.get("mem")
    if mem is None or not rows:
        return np.zeros(T, bool), np.zeros(T, bool)
    m = mem[rows].astype(np.float64)
    fin = np.isfinite(m)
    n = fin.sum(axis=0)
    with np.errstate(invalid="ignore"):
        full = (m >= th.held_mem_bytes).sum(axis=0)
    known = (n > 0) & sig.alive[k]
    return known & (full >= 0.5 * n), known & (full < 0.5 * n)


def _has_target_latency(win: Window) -> bool:
    """Target latency known anywhere (clients' OSC stats, or the servers' own service times)."""
    lat = win.target.get("latency")
    return lat is not None and bool(np.isfinite(lat).any())


def _slow_target_steps(win: Window, sig: _Signals, jm: _JobMap, th: Thresholds,
                       alive: np.ndarray) -> np.ndarray:
    """Per step: a filesystem target the job's nodes read from (at the `alive` steps: since the job
    started) answers `latency_ratio` times slower than the median target (mean over every client
    of the cluster, so one client's bad moment does not count)."""
    T = win.n_steps
    lat = win.target.get("latency")
    rd = win.target.get("read")
    if lat is None or rd is None or lat.shape[1] < th.min_peers or not jm.node_rows:
        return np.zeros(T, bool)
    ratio = sig.cache.get("target_ratio")
    if ratio is None:
        per_target = _nanmean(lat.astype(np.float64), 0)  # (F, T)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(per_target, axis=0)
            ratio = sig.cache["target_ratio"] = np.where(med > 0, per_target / med, np.nan)
    readers = _job_targets(win, sig, jm.node_rows, jm.jobid, alive)
    if not readers.any():
        return np.zeros(T, bool)
    with np.errstate(invalid="ignore"):
        return (ratio[readers] >= th.latency_ratio).any(axis=0)


def _held_steps(win: Window) -> int:
    """Grid steps one sample spans (the grid holds a sample until the next scrape): 1 at a scrape a
    step, 4 for a scrape a minute on a 15 s grid; 1 where the source does not know the interval."""
    if not win.scrape_seconds > win.step:
        return 1
    return max(1, int(round(win.scrape_seconds / win.step)))


def _readers_blocked(sig: _Signals, k: int, jm: _JobMap, blocked: np.ndarray | None, act: np.ndarray,
                     act_base: float, th: Thresholds) -> np.ndarray:
    """Steps where the job's nodes have readers waiting by their count of tasks in I/O wait
    (thresholds: blocked_waiting): at least `blocked_waiting` per node and `blocked_ratio` times the
    lower of the job's own typical count while it ran at pace and the cluster's typical node's."""
    if blocked is None or not np.isfinite(blocked).any():
        return np.zeros(sig.T, bool)
    with np.errstate(invalid="ignore"):
        at_pace = act >= th.degraded_fraction * act_base
    refs = [_q(blocked[at_pace], 0.5) if at_pace.any() else math.nan, sig.cluster_blocked_median(jm.node_rows)]
    refs = [r for r in refs if np.isfinite(r)]
    ref = min(refs) if refs else 0.0
    with np.errstate(invalid="ignore"):
        return (blocked >= th.blocked_waiting) & (blocked >= th.blocked_ratio * ref)


def _unexplained(th: Thresholds, tail: slice, d: dict) -> str:
    """Which signals were present over the stall's latest stretch, what they showed against their
    thresholds, and which were missing: an insufficient_data verdict never calls a present
    signal absent."""
    present, missing = [], []

    def m(a):
        return _mean(np.asarray(a)[tail])

    def share(mask):
        return float(np.mean(np.asarray(mask)[tail])) if np.asarray(mask).size else 0.0

    for key, label, thr in (("psi", "I/O pressure", th.psi_io_stalled), ("iowait", "CPU iowait", th.iowait_stalled)):
        v = m(d[key])
        if v is None:
            missing.append(label)
        else:
            present.append(f"{label} {v:.0%} of the time (a stall from {thr:.0%})")
    b = m(d["blocked"]) if d["blocked"] is not None else None
    if b is not None:
        present.append(f"{b:.1f} tasks in I/O wait per node (readers waiting from {th.blocked_waiting:g}, "
                       f"{th.blocked_ratio:g}x their reference)")
    elif m(d["psi"]) is None:
        missing.append("tasks in I/O wait")
    r = m(d["fs_read"])
    if r is None:
        missing.append("filesystem reads")
    elif np.isfinite(d["read_base"]) and d["read_base"] > 0:
        present.append(f"filesystem reads at {r / d['read_base']:.0%} of the job's baseline")
    if d["target_known"]:
        present.append(f"a slow filesystem target in {share(d['slow_target']):.0%} of the steps")
    else:
        missing.append("filesystem target latency")
    if d["multi_node"]:
        w, cw = m(d["ib_wait"]), d["cluster_wait"]
        if w is None:
            missing.append("InfiniBand transmit wait")
        elif np.isfinite(cw) and cw > 0:
            present.append(f"InfiniBand transmit wait {w / cw:.1f}x the cluster's typical node (congestion from "
                           f"{th.wait_ratio:g}x)")
        else:
            present.append(f"InfiniBand transmit wait {w:.3g} ticks/s (no cluster reference)")
        tx = m(d["ib_tx"])
        if tx is None:
            missing.append("InfiniBand traffic")
        elif np.isfinite(d["ib_base"]) and d["ib_base"] > 0:
            present.append(f"InfiniBand traffic at {tx / d['ib_base']:.0%} of the job's baseline")
        down = m(d["ib_down"])
        if down is None:
            missing.append("link-down counters")
        else:
            present.append(f"link-down events in {share(d['ib_down'] > 0):.0%} of the steps")
    if not d["has_sm"]:
        missing.append("SM activity (DCGM profiling)" + ("" if d["has_power"] else " and board power"))
    if d["mem_known"]:
        present.append(f"GPU memory held in {share(d['held']):.0%} and at the idle level in {share(d['empty']):.0%} "
                       "of the steps")
    else:
        missing.append("GPU memory")
    votes = ", ".join(f"{c} {share(f):.0%}" for c, f in d["flags"].items())
    return (f"present: {'; '.join(present) or 'none'}; missing: {', '.join(missing) or 'none'}; share of steps "
            f"each cause explains: {votes} (a verdict needs 50 %)")


def _io_culprit(win: Window, sig: _Signals, jm: _JobMap, seg: slice, th: Thresholds, alive: np.ndarray):
    """A filesystem target whose read latency stands out from the other targets (cluster-wide, and
    one the job's nodes read from since it started: `alive`), else a node whose I/O pressure stands
    out from the gang's other nodes, else the filesystem the job's nodes read from when they read
    from only one; else nothing."""
    ev: list[Evidence] = []
    lat = win.target.get("latency")
    rows = jm.node_rows
    if lat is not None and lat.shape[1] >= th.min_peers:
        n_recent = max(1, int(round(th.culprit_recent_seconds / win.step))) if win.step > 0 else 1
        recent = slice(max(seg.start, seg.stop - n_recent), seg.stop)
        per_target = _per_target_latency(lat, sig, recent)
        hits = outliers(per_target, th, high=True, min_ratio=th.latency_ratio)
        rd = win.target.get("read")
        readers = None
        if rd is not None and rows:
            readers = (_job_targets(win, sig, rows, jm.jobid).astype(int) if win.job_targets.get(jm.jobid) else
                       np.sum(np.nansum(_steps_of(rd[rows], alive), axis=2) > 0, axis=0)
                       + _job_targets(win, sig, rows, steps=alive))
        if hits and readers is not None:
            hits = [h for h in hits if readers[h[0]] > 0]  # only a target the job's nodes read from
        if hits:
            # Several slow targets that the job's nodes read from (two OSTs slow at once, a node
            # shared with a job striped on the other): one that has recovered in the last 30 s no
            # longer explains a stall that goes on; of the others, the one that slowed when the job
            # stalled explains it best; one that slowed only after the stall began, or was slow
            # already while the job progressed, less; then the one most of the job's nodes read from.
            pre = slice(max(0, seg.start - n_recent), seg.start)
            first = slice(seg.start, min(seg.stop, seg.start + n_recent))
            nan = np.full(len(per_target), np.nan)
            before = _per_target_latency(lat, sig, pre) if pre.stop > pre.start else nan
            at_onset = _per_target_latency(lat, sig, first) if len(hits) > 1 else nan
            now = _per_target_latency(lat, sig, slice(max(seg.start, seg.stop - 2), seg.stop)) if len(hits) > 1 else nan
            slow = th.latency_ratio * hits[0][2]

            def rank(h):
                over = bool(np.isfinite(now[h[0]]) and now[h[0]] < slow)
                late = bool(np.isfinite(at_onset[h[0]]) and at_onset[h[0]] < slow)
                already = bool(np.isfinite(before[h[0]]) and before[h[0]] >= slow)
                return (over, late, already, -(int(readers[h[0]]) if readers is not None else 0), -h[3])
            i, x, med, z, p = min(hits, key=rank)
            name = win.targets[i]
            ev.append(Evidence("fs_target_read_latency", "", x, med, th.latency_ratio * med, z, p,
                               note=f"target {name} vs {int(np.isfinite(per_target).sum())} targets, "
                                    f"last {(recent.stop - recent.start) * win.step:.0f} s, all clients"))
            if rows:  # how the job's own nodes see it: the worst of them on that target
                mine = _nanmean(lat[rows, i, recent].astype(np.float64), 1)
                if np.isfinite(mine).any():
                    k = int(np.nanargmax(mine))
                    ev.append(Evidence("fs_target_read_latency", win.nodes[rows[k]], float(mine[k]), med,
                                       th.latency_ratio * med, note=f"this job's node reading from {name}"))
            if len(hits) > 1:
                ev.append(Evidence("fs_target_read_latency", "", None, med, th.latency_ratio * med,
                                   note="also slow: " + ", ".join(f"{win.targets[h[0]]} (z {h[3]:.0f})"
                                                                  for h in hits if h[0] != i)))
            return name, "target", ev
    psi = sig.nodesig.get("psi_io")
    if psi is not None and len(jm.node_rows) >= th.min_peers:
        vals = _nanmean(psi[jm.node_rows][:, seg], 1)
        hits = outliers(vals, th, high=True, min_abs=th.psi_io_stalled / 2)
        if len(hits) == 1:
            i, x, med, z, p = hits[0]
            node = win.nodes[jm.node_rows[i]]
            ev.append(Evidence("psi_io", node, x, med, th.psi_io_stalled, z, p, note="node vs the gang's other nodes"))
            return node, "node", ev
    fs = _job_filesystem(win, rows, alive)
    if fs:
        ev.append(Evidence("fs_filesystem", "", None, None, None,
                           note=f"no target stands out; the job's nodes read only from filesystem {fs}"))
        return fs, "filesystem", ev
    return "", "", ev


def _per_target_latency(lat: np.ndarray, sig: _Signals, seg: slice) -> np.ndarray:
    """Mean read latency per target over all clients and the steps of `seg` (cached per cycle)."""
    key = ("per_target_latency", seg.start, seg.stop)
    got = sig.cache.get(key)
    if got is None:
        got = sig.cache[key] = _nanmean(_nanmean(lat[:, :, seg].astype(np.float64), 2), 0)
    return got


def _job_filesystem(win: Window, rows: list[int], steps: np.ndarray | None = None) -> str:
    """The one filesystem the job's nodes read from at `steps` of the window (Lustre targets are
    named `<fs>-OSTxxxx`, `<fs>-MDTxxxx`), or "" when they read from none, several, or it cannot be told."""
    rd = win.target.get("read")
    if rd is None or not rows or not win.targets:
        return ""
    used = np.flatnonzero(np.nansum(_steps_of(rd[rows], steps), axis=(0, 2)) > 0)
    names = {_fs_of(win.targets[i]) for i in used if i < len(win.targets)}
    return names.pop() if len(names) == 1 and "" not in names else ""


# Lustre `<fs>-OST0006` (and a client's import of it); BeeGFS `<mount>:target101` (collectors/node/beegfs.py)
_TARGET = re.compile(r"^(.+)(?:-(?:OST|MDT)[0-9a-fA-F]{4}(?:-(?:osc|mdc)-[0-9a-fA-F]+)?|:target[0-9]+)$")
_LLITE = re.compile(r"^(.+)-[0-9a-fA-F]{16}$")


def _fs_of(target: str) -> str:
    """The filesystem a target key names: `lustre-OST0006` and `lustre-OST0006-osc-ffff8a..` (a
    Lustre target and a client's import of it) -> `lustre`; `lustre-ffff8a1b2c3d4e5f` (a client mount,
    as llite names it) -> `lustre`; a bare name (GPFS reports per filesystem) is the filesystem."""
    t = target or ""
    m = _TARGET.match(t) or _LLITE.match(t)
    return m.group(1) if m else t


def _steps_of(a: np.ndarray, steps: np.ndarray | None) -> np.ndarray:
    """`a` (..., T) at the steps of the mask `steps` (all where None)."""
    return a if steps is None or steps.all() else a[..., steps]


def _job_targets(win: Window, sig: _Signals, rows: list[int], jobid: str = "",
                 steps: np.ndarray | None = None) -> np.ndarray:
    """(F,) the targets the job's nodes read from (at `steps`, a mask of the window's: the job's own,
    since it started, as the jobs before it on its nodes read elsewhere): those read per target where
    the metrics say so (Lustre client OSC stats); where they only say which filesystem a node reads
    (llite per mount, GPFS per filesystem), every target of that filesystem, as striping spreads a
    file over them."""
    rd = win.target.get("read")
    F = len(win.targets)
    mine = win.job_targets.get(jobid)
    if mine:  # the servers' job_stats say which targets the job itself read
        return np.array([t in mine for t in win.targets], bool)
    if rd is None or not rows or not F:
        return np.zeros(F, bool)
    is_target = sig.cache.get("is_target")
    if is_target is None:
        is_target = sig.cache["is_target"] = np.array([bool(_TARGET.match(t)) for t in win.targets])
    direct = np.nansum(_steps_of(rd[rows], steps), axis=(0, 2)) > 0
    if (direct & is_target).any():
        return direct
    fss = {_fs_of(win.targets[i]) for i in np.flatnonzero(direct)}
    return direct | (is_target & np.array([_fs_of(t) in fss for t in win.targets]))


def _net_culprit(win: Window, sig: _Signals, jm: _JobMap, seg: slice, th: Thresholds):
    """A NIC in a PFC pause storm near the job, unless one of the job's links went down or erred
    since it began; else a port whose link went down (or erred) during the stall, or a node whose
    NICs went down; else a NIC in a storm after all; else nodes whose port_xmit_wait stands out
    from every node of the cluster, named as their leaf switch when they fill most of it."""
    # the link events that make a flapping link: the stall's own stretch and the link window before
    # its last step (a cable that flaps went down or erred shortly before the gang slowed)
    lo = max(0, min(seg.start, seg.stop - int(round(th.link_window_seconds / win.step))))
    span = slice(lo, seg.stop)
    storm = _storm_culprit(win, jm, span)
    if storm is not None and not _links_erred_since(win, sig, jm, storm[2], seg.stop):
        # a link that went down or erred only before the storm began is not what holds the gang
        # now: the storm's victims wait, the storming node is the cause
        return storm[0], "node", storm[1] + _congestion_culprit(win, sig, jm, seg, th)[2]
    down = _port_events(win, jm.node_rows, span, "ib_down")
    if down:  # a port that went down names itself
        e = max(down, key=lambda e: e.value or 0)
        return f"{e.node}:{e.note.split()[1]}", "port", down
    errs = _port_events(win, jm.node_rows, span, "ib_err")
    nic = _nic_down_culprit(win, jm, span)
    if nic is not None:
        # NICs that went down (ethtool, per node) come before errors alone; on the one node that
        # stands out, its port that erred (every in-flight QP retransmits there) is more precise
        culprit, kind, nev = nic
        mine = [e for e in errs if e.node == culprit]
        if kind == "node" and mine:
            e = max(mine, key=lambda e: e.value or 0)
            return f"{e.node}:{e.note.split()[1]}", "port", nev + mine
        return culprit, kind, nev + errs
    if errs:  # errors alone name a port only where no link went down
        e = max(errs, key=lambda e: e.value or 0)
        return f"{e.node}:{e.note.split()[1]}", "port", errs
    # frames lost to errors FEC could not correct (ethtool, per node: a site without the RDMA
    # counters): the node, when it is the only one of the job's (several: the congestion decides)
    lossy = _nic_events(win, jm, span, "eth_err", "eth_link_errors", "received {n} frame(s) with uncorrected errors")
    if lossy is not None and len(lossy[1]) == 1:
        return win.nodes[lossy[1][0]], "node", lossy[2]
    culprit, kind, ev = _congestion_culprit(win, sig, jm, seg, th)
    if storm is not None:  # the congestion is the storm's
        return storm[0], "node", storm[1] + ev
    return culprit, kind, ev


def _links_erred_since(win: Window, sig: _Signals, jm: _JobMap, start: int, stop: int) -> bool:
    """Whether a port or NIC of the job's nodes went down or erred in steps [start, stop)."""
    links = sig.link_events()
    if links is None:
        return False
    with np.errstate(invalid="ignore"):
        return bool((links[jm.node_rows, start:stop] > 0).any())


def _congestion_culprit(win: Window, sig: _Signals, jm: _JobMap, seg: slice, th: Thresholds):
    """Nodes whose port_xmit_wait (RoCE: ECN, CNPs, PFC pause) stands out from every node of the
    cluster, named as their leaf switch when they fill most of it and the switch, not the gang's
    own traffic, is the common element (`_follows_the_gang`), else the port or the node."""
    ev: list[Evidence] = []
    w = sig.nodesig.get("ib_wait")
    if w is None:
        return "", "", ev
    per_node = _nanmean(w[:, seg], 1)
    tx = sig.nodesig.get("ib_tx")
    if tx is not None:
        # idle nodes wait for nothing: the reference is the cluster's busy nodes (and the job's own)
        with np.errstate(invalid="ignore"):
            idle = ~(nanquantile_rows(tx, 0.5) >= th.busy_link_bytes)
        idle[jm.node_rows] = False
        per_node = np.where(idle, np.nan, per_node)
    with np.errstate(all="ignore"):
        logv = np.log10(np.maximum(per_node, 1.0))
    z, med, scale = robust_z(logv, 0.05)
    m = int(np.isfinite(logv).sum())
    if m < th.min_peers:
        # too few busy nodes for a cluster reference (a small cluster, or the gang alone on it): the
        # port where the gang's collectives back up still stands out from the gang's other ports
        return _hot_port(win, jm.node_rows, seg, th, ev)
    sig_nodes = []
    for i in jm.node_rows:
        zi = z[i]
        if np.isfinite(zi) and zi > 0 and p_one_sided(float(zi)) * m < th.alpha \
                and per_node[i] >= th.wait_ratio * 10 ** med:
            sig_nodes.append((i, float(zi)))
    if not sig_nodes:
        got = _congested_leaf_by_history(win, w, tx, jm, seg, th, ev)
        return got if got[0] else _hot_port(win, jm.node_rows, seg, th, ev)
    for i, zi in sorted(sig_nodes, key=lambda t: -t[1])[:8]:
        ev.append(Evidence("ib_wait", win.nodes[i], float(per_node[i]), float(10 ** med), th.wait_ratio * 10 ** med,
                           zi, p_one_sided(zi), note=f"node vs {m} nodes of the cluster (log scale)"))
    # A leaf the job's nodes hang off whose busy nodes (the job's and others': an idle node waits for
    # nothing, congested or not) mostly wait beyond chance: the switch is the common element. A
    # gang's collectives make its nodes on healthy leaves wait too, so every leaf of the job is
    # tested, not only the one holding most of its outlying nodes.
    hot = np.array([bool(np.isfinite(zj) and zj > 0 and p_one_sided(float(zj)) * m < th.alpha) for zj in z])
    # ... but a busy neighbour that waits as it did before at its traffic (an all-to-all's own wait
    # stands out from a cluster of lightly loaded nodes) is no victim of the switch (catalogue seed
    # 2504: two such nodes and the gang's one filled its leaf, the port the gang waited on elsewhere)
    leaves = {win.leaf_of.get(win.nodes[i], "") for i in jm.node_rows} - {""}
    mine = set(jm.node_rows)
    near = [j for j, n in enumerate(win.nodes) if hot[j] and j not in mine and win.leaf_of.get(n) in leaves]
    if near:
        with np.errstate(invalid="ignore"):
            past = _own_past_wait(win, w[near], tx[near] if tx is not None else None, seg, th)
            hot[near] &= ~(np.isfinite(past) & ~(per_node[near] >= th.wait_ratio * np.maximum(past, 1.0)))
    busy = np.where(np.isfinite(z), per_node, np.nan)
    congested_leaves = []
    for lf in sorted(leaves):
        on_leaf = [j for j, n in enumerate(win.nodes) if win.leaf_of.get(n) == lf and np.isfinite(z[j])]
        if sum(bool(hot[j]) for j in on_leaf) >= max(2, 0.5 * len(on_leaf)):
            congested_leaves.append(lf)
    if len(congested_leaves) == 1 and not _follows_the_gang(win, jm, congested_leaves[0], hot, busy, th):
        return congested_leaves[0], "leaf_switch", ev
    # one node, or several with no leaf they fill (on one leaf or on several: a gang spread over
    # leaves waits on every one of them for the port it backs up on): the one port where the job's
    # traffic backs up most, when one does; else the node when only one stands out
    port = _hot_port(win, [sig_nodes[0][0]] if len(sig_nodes) == 1 else jm.node_rows, seg, th, [])
    if port[0]:
        return port[0], "port", ev + port[2]
    if len(sig_nodes) == 1:
        return win.nodes[sig_nodes[0][0]], "node", ev
    return "", "", ev


def _port_events(win: Window, rows: list[int], span: slice, signal: str) -> list[Evidence]:
    """Evidence per port of `rows` that counted link-down events (`ib_down`) or errors (`ib_err`) in `span`."""
    arr = win.rail.get(signal)
    if arr is None:
        return []
    name, what = (("ib_link_downed", "went down {n} time(s)") if signal == "ib_down"
                  else ("ib_symbol_errors", "counted {n} symbol error(s)"))
    ev = []
    for i in rows:
        d = np.nansum(arr[i][:, span], axis=1)
        for r in np.flatnonzero(d > 0):
            port = win.rails[i][r] if i < len(win.rails) and r < len(win.rails[i]) else str(r)
            ev.append(Evidence(name, win.nodes[i], float(d[r]), 0.0, 0.0,
                               note=f"port {port} " + what.format(n=int(d[r])) + " during the stall"))
    return ev


def _storm_culprit(win: Window, jm: _JobMap, span: slice) -> tuple[str, list[Evidence], int] | None:
    """(node, evidence, the step its storm began) for a PFC pause storm behind the job's network
    stall: a NIC whose storm guard fired (`eth_storm`, ethtool) in `span`, on one of the job's nodes
    or on a leaf switch the job's nodes hang off (a NIC that keeps sending pause frames fills the
    switch's buffers toward it, and the switch pauses its other ports: every link through it
    stalls, and its victims show the congestion). Without the leaf switches, only a storm on the
    job's own nodes, or the one storm in the cluster. The node with most events is named; None when
    no storm is near the job."""
    a = win.node.get("eth_storm")
    if a is None:
        return None
    with np.errstate(invalid="ignore"):
        per = np.nansum(a[:, span].astype(np.float64), axis=1)
    storming = np.flatnonzero(per > 0)
    if not storming.size:
        return None
    mine = set(jm.node_rows)
    near = _storming_near(win, jm.node_rows, storming)
    if not near:
        return None
    near.sort(key=lambda i: (-per[i], win.nodes[i]))

    def where(i: int) -> str:
        leaf = win.leaf_of.get(win.nodes[i], "")
        return "a node of the job" if i in mine else f"on the job's leaf switch {leaf}" if leaf else \
            "the one storm in the cluster"

    ev = [Evidence("eth_pause_storm", win.nodes[i], float(per[i]), 0.0, 0.0,
                   note=f"its NICs' PFC storm guard fired {int(per[i])} time(s) during the stall (ethtool): "
                        f"it kept sending pause frames ({where(i)})") for i in near[:8]]
    with np.errstate(invalid="ignore"):
        began = span.start + int(np.argmax(a[near[0], span] > 0))
    return win.nodes[near[0]], ev, began


def _nic_down_culprit(win: Window, jm: _JobMap, span: slice):
    """(culprit, kind, evidence) from the NICs' link-down events (`eth_down`, per node; on
    InfiniBand the agent's node rollup `ib_down_node`, which shows a drop a scrape before the
    port's own series is back) in `span`; None when none of the job's nodes had one. Named only
    when it stands out: a leaf switch when
    the nodes that went down anywhere in the cluster all hang off it and fill at least half of it
    (a switch that reboots or flaps takes its links down together), else the node when it is the
    only one of the job's; several of the job's nodes short of that are left unnamed (a shared
    cause the window cannot place), with their evidence."""
    got = (_nic_events(win, jm, span, "eth_down", "eth_link_down", "went down {n} time(s)")
           or _nic_events(win, jm, span, "ib_down_node", "ib_link_downed", "went down {n} time(s)"))
    if got is None:
        return None
    per, mine, ev = got
    down = np.flatnonzero(per > 0)
    leaves = {win.leaf_of.get(win.nodes[i], "") for i in down}
    if len(down) >= 2 and len(leaves) == 1 and "" not in leaves:
        leaf = next(iter(leaves))
        on_leaf = sum(1 for n in win.nodes if win.leaf_of.get(n) == leaf)
        if len(down) >= 0.5 * on_leaf:
            return leaf, "leaf_switch", ev
    if len(mine) == 1:
        return win.nodes[mine[0]], "node", ev
    return "", "", ev


def _nic_events(win: Window, jm: _JobMap, span: slice, signal: str, name: str, what: str):
    """(events per node in `span`, the job's nodes that had any, their evidence) of a per-node NIC
    signal (ethtool); None when none of the job's nodes had one."""
    a = win.node.get(signal)
    if a is None:
        return None
    with np.errstate(invalid="ignore"):
        per = np.nansum(a[:, span].astype(np.float64), axis=1)
    mine = [i for i in jm.node_rows if per[i] > 0]
    if not mine:
        return None
    whose = "its ports" if signal in _PORT_ROLLUPS else "its NICs"
    by = "the agent's node count" if signal in _PORT_ROLLUPS else "ethtool"
    return per, mine, [Evidence(name, win.nodes[i], float(per[i]), 0.0, 0.0,
                                note=f"{whose} {what.format(n=int(per[i]))} during the stall ({by})") for i in mine]


def _hot_port(win: Window, rows: list[int], seg: slice, th: Thresholds, ev: list[Evidence]):
    """The one port of `rows` whose transmit wait is `port_wait_ratio` times the median of the other
    ports there that carry traffic: a collective waits on its slowest hop, so the port where the
    credits run out backs up most while the others wait for it."""
    wait, tx = win.rail.get("ib_wait"), win.rail.get("ib_tx")
    if wait is None or not rows:
        return "", "", ev
    vals = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in rows:
            m = np.nanmean(wait[i][:, seg].astype(np.float64), axis=1)
            used = np.nanmax(tx[i].astype(np.float64), axis=1) > 0 if tx is not None else np.ones(m.shape, bool)
            vals += [(i, r, float(m[r])) for r in range(m.shape[0]) if np.isfinite(m[r]) and used[r]]
    if len(vals) == 1 and len(rows) == 1:  # the node's only port
        i, r, top = vals[0]
        port = win.rails[i][r] if i < len(win.rails) and r < len(win.rails[i]) else str(r)
        return f"{win.nodes[i]}:{port}", "port", ev
    if len(vals) < 2:
        return "", "", ev
    vals.sort(key=lambda t: -t[2])
    i, r, top = vals[0]
    rest = float(np.median([v for _, _, v in vals[1:]]))
    if not (top >= th.port_wait_ratio * max(rest, 1.0)):
        return "", "", ev
    port = win.rails[i][r] if i < len(win.rails) and r < len(win.rails[i]) else str(r)
    ev.append(Evidence("ib_wait", win.nodes[i], top, rest, th.port_wait_ratio * rest,
                       note=f"port {port} vs the median of {len(vals) - 1} other ports of the job"))
    return f"{win.nodes[i]}:{port}", "port", ev


def _follows_the_gang(win: Window, jm: _JobMap, leaf: str, hot: np.ndarray, wait: np.ndarray, th: Thresholds) -> bool:
    """True when a leaf's congested nodes are the job's own and its nodes on other leaves wait as
    much (within `port_wait_ratio`): the congestion follows the gang's traffic, not the switch. A
    gang that fills most of a leaf makes that leaf look congested while the port it backs up on may
    be on another one; a congested switch stalls its other busy nodes too, and the gang's nodes
    elsewhere wait only for the ones behind it."""
    mine = set(jm.node_rows)
    on_leaf = [j for j, n in enumerate(win.nodes) if win.leaf_of.get(n) == leaf]
    if any(bool(hot[j]) for j in on_leaf if j not in mine):
        return False
    with np.errstate(invalid="ignore"):
        here = [float(wait[j]) for j in on_leaf if j in mine and hot[j] and np.isfinite(wait[j])]
        away = [float(wait[i]) for i in jm.node_rows if win.leaf_of.get(win.nodes[i]) != leaf and np.isfinite(wait[i])]
    return bool(here and away) and float(np.median(away)) * th.port_wait_ratio > float(np.median(here))


def _congested_leaf_by_history(win: Window, w: np.ndarray, tx: np.ndarray | None, jm: _JobMap, seg: slice,
                               th: Thresholds, ev: list[Evidence]):
    """No node of the job stands out from the cluster because the congestion covers much of it (a
    small cluster, or half its leaves hot at once): each node against its own past instead, the
    wait of the past steps it carried traffic like its traffic now in (`tx`,
    `past_traffic_share`; a node idle until a job started on it has no past to be congested
    against: any wait is "10x" an idle one's), and waiting at least as much as the job's nodes did
    at pace. A leaf
    switch the job's nodes hang off whose nodes are mostly congested against their own past is the
    common element; where several are (a gang's nodes that fill a healthy leaf wait for the hot
    one), the one whose congested nodes wait `port_wait_ratio` times more than every other's, and
    not where that congestion follows the gang (`_follows_the_gang`)."""
    if not win.leaf_of or seg.start < 2:
        return "", "", ev
    with np.errstate(all="ignore"):
        past = _own_past_wait(win, w, tx, seg, th)
        now = np.where(np.isfinite(past), _nanmean(w[:, seg], 1), np.nan)
        # and at least the wait the job's nodes had at pace: a node that waited for nothing
        # (background traffic) and now waits less than a healthy gang is no congestion
        pace = np.nanmedian(past[jm.node_rows]) if np.isfinite(past[jm.node_rows]).any() else 0.0
        hot = (now >= th.wait_ratio * np.maximum(past, 1.0)) & (now >= pace)
    level = {}  # congested leaf -> median wait of its congested nodes
    for leaf in {win.leaf_of.get(win.nodes[i], "") for i in jm.node_rows if hot[i]} - {""}:
        on_leaf = [j for j, n in enumerate(win.nodes) if win.leaf_of.get(n) == leaf and np.isfinite(now[j])]
        n_hot = sum(bool(hot[j]) for j in on_leaf)
        if len(on_leaf) >= 2 and n_hot >= max(2, 0.5 * len(on_leaf)):
            level[leaf] = (float(np.median([now[j] for j in on_leaf if hot[j]])), n_hot, len(on_leaf))
    if not level:
        return "", "", ev
    leaf = max(level, key=lambda lf: level[lf][0])
    if any(level[lf][0] * th.port_wait_ratio > level[leaf][0] for lf in level if lf != leaf) or \
            _follows_the_gang(win, jm, leaf, hot, now, th):
        return "", "", ev
    _, n_hot, on_leaf = level[leaf]
    mine = [i for i in jm.node_rows if hot[i] and win.leaf_of.get(win.nodes[i]) == leaf]
    for i in sorted(mine, key=lambda i: -now[i])[:8]:
        ev.append(Evidence("ib_wait", win.nodes[i], float(now[i]), float(past[i]), th.wait_ratio * max(float(past[i]), 1.0),
                           note=f"node vs its own past; {n_hot} of {on_leaf} nodes on {leaf} congested alike"))
    return leaf, "leaf_switch", ev


def _own_past_wait(win: Window, w: np.ndarray, tx: np.ndarray | None, seg: slice, th: Thresholds) -> np.ndarray:
    """Per node: its median wait (`w`) over the steps before `seg` in which it carried traffic
    like its traffic in `seg` (`tx`, `past_traffic_share` of it, a minute of such steps at least:
    one busy sample is no past); NaN where it has no such past (idle until now, or `seg` begins
    the window)."""
    if seg.start < 2:
        return np.full(w.shape[0], np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        before = w[:, :seg.start].astype(np.float64)
        if tx is not None:
            like_now = th.past_traffic_share * np.nanmedian(tx[:, seg].astype(np.float64), axis=1)
            moved = tx[:, :seg.start] >= np.fmax(like_now, th.busy_link_bytes)[:, None]
            before = np.where(moved, before, np.nan)
            before[moved.sum(axis=1) < max(2, int(round(60.0 / win.step)))] = np.nan
        return np.nanmedian(before, axis=1)


def _busy_clock(sig: _Signals, th: Thresholds) -> np.ndarray | None:
    """Mean SM clock of every GPU over the recent stretch, counting only busy samples (an idle GPU
    clocks down by design); computed once per diagnosis."""
    if not hasattr(sig, "_busy_clock"):
        clock = sig.gpu2d.get("clock")
        if clock is None or "util" not in sig.gpu2d:
            sig._busy_clock = None
        else:
            recent = max(2, int(round(th.recent_seconds / sig.win.step)))
            with np.errstate(invalid="ignore"):
                busy = sig.gpu2d["util"][:, -recent:] > th.idle_util
            sig._busy_clock = _nanmean(np.where(busy, clock[:, -recent:].astype(np.float64), np.nan), 1)
    return sig._busy_clock


def _low_vs(x: float, ref: np.ndarray, th: Thresholds, tests: int):
    """One-sided test: is x below the reference group beyond chance (Bonferroni over `tests`) and
    by at least the minimum effect? -> (median, z, p) or None."""
    ref = ref[np.isfinite(ref)]
    if ref.size < th.min_peers or not np.isfinite(x):
        return None
    _, med, scale = robust_z(ref, th.scale_floor)
    z = (med - x) / scale
    p = p_one_sided(z)
    if z > 0 and p * tests < th.alpha and x <= (1 - th.clock_drop) * med:
        return med, float(z), p
    return None


def _clock_tests(cm: np.ndarray, jm: _JobMap, allc: np.ndarray, th: Thresholds):
    """GPUs whose SM clock lags: each GPU against the job's other GPUs (leave-one-out) and against
    the GPUs on the job's other nodes (leave-node-out: a whole slow node in a two-node gang); a job
    with too few GPUs against every busy GPU of the cluster. Bonferroni over all tests made."""
    n = len(jm.gpu_flat)
    hits = []
    if n >= th.min_peers + 1 or len({nd for nd, _ in jm.gpu_names}) > 1:
        nodes = np.array([nd for nd, _ in jm.gpu_names])
        tests = 2 * n
        for i in range(n):
            if not np.isfinite(cm[i]):
                continue
            others = np.delete(cm, i)
            got = _low_vs(cm[i], others, th, tests)
            if got is None:
                got = _low_vs(cm[i], cm[nodes != nodes[i]], th, tests)
            if got is not None:
                hits.append((i, float(cm[i]), *got))
        if hits or len(set(nodes.tolist())) > 1:
            return hits, "the job's other GPUs"
    # a job on one node whose GPUs all lag alike (a hot or power-capped node), or too few GPUs to
    # compare among themselves: against every busy GPU of the cluster
    ref = allc[np.isfinite(allc)]
    for i in range(n):
        got = _low_vs(cm[i], ref, th, ref.size)
        if got is not None:
            hits.append((i, float(cm[i]), *got))
    return hits, f"{ref.size} busy GPUs of the cluster"


def _checkpointing(win: Window, jm: _JobMap, th: Thresholds, recent: int) -> bool:
    """Whether the job's nodes wrote at checkpoint speed in the last `recent` steps. GPUs that work
    while their peers wait are then the checkpoint's (one rank writes while the others wait at the
    barrier; nodes scraped at different offsets of the pause), not a straggler: one outlasts it."""
    w = win.node.get("fs_write")
    if w is None or not jm.node_rows:
        return False
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return bool((np.nanmean(w[jm.node_rows][:, -recent:].astype(np.float64), axis=0)
                     >= th.checkpoint_write_bytes).any())


def _straggler(win: Window, sig: _Signals, jm: _JobMap, th: Thresholds, base: dict) -> Verdict | None:
    T, step, now = win.n_steps, win.step, win.end
    recent = max(2, int(round(th.recent_seconds / step)))
    ev: list[Evidence] = []
    culprits: list[int] = []
    clock = sig.gpu2d.get("clock")
    drop = None
    allc = _busy_clock(sig, th)
    if allc is not None:
        cm = allc[jm.gpu_flat]
        hits, peers = _clock_tests(cm, jm, allc, th)
        for i, x, med, z, p in hits:
            node, gpu = jm.gpu_names[i]
            ev.append(Evidence("gpu_sm_clock", node, x, med, (1 - th.clock_drop) * med, z, p, note=f"GPU {gpu} vs {peers}"))
            culprits.append(i)
        if hits:
            drop = 1 - float(np.mean([h[1] for h in hits])) / hits[0][2]
    sm = sig.gpu2d.get("sm")
    if not culprits and sm is not None and len(jm.gpu_flat) >= th.min_peers and not _checkpointing(win, jm, th, recent):
        # samples of the job's start-up are no pace: its nodes leave the warm-up a scrape or more
        # apart, and the first to train would read as working while the rest wait (catalogue RoCE
        # seed 1800 scraped every minute, a job 335 s old)
        first = T - recent
        if jm.job.start_time:
            first = max(first, min(T - 1, int(np.searchsorted(win.times, jm.job.start_time + th.job_grace_seconds))))
        # a pace takes two scrapes of each GPU: a gang's brief dip seen by some nodes' last scrape
        # and not yet by the rest reads as peers waiting on the rest (catalogue seed 3500 scraped
        # every 45 s, a job a scrape past its first 300 s)
        if T - first < max(2, 2 * _held_steps(win) - 1):
            return _slow_link(win, sig, jm, th, base)
        with np.errstate(invalid="ignore"):
            # an idle GPU is not a peer that waits at a barrier (it waits within each iteration,
            # not for whole samples): only samples where a GPU runs kernels tell its pace, and a
            # GPU that ran none is no peer. A gang that pauses (a checkpoint whose writes are not
            # exported) shows the pause on each node at its own scrape offset: the node seen
            # working longest is no straggler (RoCE seed 2105 scraped every minute).
            busy = sig.gpu2d["util"][jm.gpu_flat][:, first:].astype(np.float64) > th.idle_util
            s = _nanmean(np.where(busy, sm[jm.gpu_flat][:, first:].astype(np.float64), np.nan), 1)
        hits = outliers(s, th, high=True, min_ratio=1.5, min_abs=0.2)
        if 0 < len(hits) <= max(1, len(jm.gpu_flat) // 4):
            for i, x, med, z, p in hits:
                node, gpu = jm.gpu_names[i]
                ev.append(Evidence("gpu_sm_active", node, x, med, 1.5 * med, z, p,
                                   note=f"GPU {gpu} works while its peers wait at the barrier"))
                culprits.append(i)
            drop = 1 - hits[0][2] / hits[0][1]
    if not culprits:
        return _slow_link(win, sig, jm, th, base)
    names = [jm.gpu_names[i] for i in culprits]
    nodes = sorted({n for n, _ in names})
    if len(nodes) == 1:
        node = nodes[0]
        on_node = [g for n, g in jm.gpu_names if n == node]
        if len(names) == len(on_node) and len(on_node) > 1:
            culprit, kind = node, "node"
        else:
            culprit, kind = f"{node}:gpu{','.join(str(g) for _, g in names)}", "gpu"
    else:
        culprit, kind = ",".join(f"{n}:gpu{g}" for n, g in names[:8]), "gpus"
    # since: the trailing run of steps in which the first culprit lagged its peers
    since = float(win.times[max(0, T - recent)])
    if clock is not None and ev and ev[0].signal == "gpu_sm_clock":
        c = clock[jm.gpu_flat].astype(np.float64)
        with np.errstate(all="ignore"):
            med_t = nanquantile_rows(c.T, 0.5)
            low = c[culprits[0]] < (1 - th.clock_drop) * med_t
        run = int(_trailing_run(low[None, :])[0])
        since = float(win.times[T - max(run, 1)])
    if jm.job.start_time:
        since = max(since, float(jm.job.start_time))
    lost = jm.n_gpus * (now - since) / 3600.0 * float(min(max(drop or 0.0, 0.0), 1.0))
    conf = min(1.0, 0.6 + 0.1 * len(ev))
    return Verdict(**base, state="straggler", confidence=round(conf, 3), since=since, culprit=culprit, culprit_kind=kind,
                   evidence=tuple(ev), gpu_hours_lost=lost,
                   reason=f"the gang runs at the pace of {culprit} (about {drop or 0:.0%} slower)")


def _used_rail_rates(win: Window, jm: _JobMap, recent: int) -> list[tuple[int, int, float]]:
    """[(node row, rail column, link rate)] of the job's rails that carry traffic in the window (all
    rails with a known rate when traffic is unknown): a spare port at another speed is no peer (the
    other fabric's ports, where the agents say the link layers, were left out by fabric_view)."""
    rate = win.rail.get("ib_rate")
    if rate is None or not jm.node_rows:
        return []
    tx = win.rail.get("ib_tx")
    out = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = np.nanmean(rate[jm.node_rows][:, :, -recent:].astype(np.float64), axis=2)
        used = (np.nanmax(tx[jm.node_rows].astype(np.float64), axis=2) > 0) if tx is not None else None
    for a, i in enumerate(jm.node_rows):
        for c in range(r.shape[1]):
            if np.isfinite(r[a, c]) and r[a, c] > 0 and (used is None or not np.isfinite(used[a, c]) or used[a, c]):
                out.append((i, c, float(r[a, c])))
    return out


def _port_name(win: Window, i: int, c: int) -> str:
    return win.rails[i][c] if i < len(win.rails) and c < len(win.rails[i]) else str(c)


def _slow_link(win: Window, sig: _Signals, jm: _JobMap, th: Thresholds, base: dict) -> Verdict | None:
    """A port of the gang's that trained at a lower rate than the gang's other ports (a degraded
    width or speed after a bad cable or transceiver): a ring collective runs at its pace."""
    T, step, now = win.n_steps, win.step, win.end
    if len(jm.node_rows) < 2:
        return None
    recent = max(2, int(round(th.recent_seconds / step)))
    rails = _used_rail_rates(win, jm, recent)
    if len({i for i, _, _ in rails}) < 2:
        return None
    # each port against the same port of the gang's other nodes (a node's ports need not be alike: a
    # storage NIC at 200 Gb/s beside 400 Gb/s rails), a port no other node has against all of them
    med = float(np.median([x for _, _, x in rails]))
    peers: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for i, c, x in rails:
        peers[_port_name(win, i, c)].append((i, x))

    def reference(i: int, c: int) -> float:
        others = [y for j, y in peers[_port_name(win, i, c)] if j != i]
        return float(np.median(others)) if others else med

    slow = [(i, c, x, ref) for i, c, x in rails for ref in (reference(i, c),) if x <= (1 - th.clock_drop) * ref]
    if not slow or len({i for i, _, _, _ in slow}) > max(1, len(jm.node_rows) // 4):
        return None  # most of the gang alike is the fabric's design, not one bad link
    rate = win.rail["ib_rate"]
    ev, names, runs = [], [], []
    for i, c, x, ref in sorted(slow, key=lambda t: t[2] / t[3])[:8]:
        port = _port_name(win, i, c)
        names.append(f"{win.nodes[i]}:{port}")
        with np.errstate(invalid="ignore"):
            runs.append(int(_trailing_run((rate[i, c] <= (1 - th.clock_drop) * ref)[None, :])[0]))
        ev.append(Evidence("ib_link_rate", win.nodes[i], x, ref, (1 - th.clock_drop) * ref,
                           note=f"port {port} trained at {x * 8 / 1e9:.0f} Gb/s; the gang's other ports "
                                f"{ref * 8 / 1e9:.0f} Gb/s"))
    since = float(win.times[T - max(max(runs), 1)])
    if jm.job.start_time:
        since = max(since, float(jm.job.start_time))
    drop = 1.0 - min(x / ref for _, _, x, ref in slow)
    culprit = names[0] if len(names) == 1 else ",".join(names)
    # what the gang lost is its own slowdown: activity now against its baseline (a link slow since
    # before the window shows none, and the reason says so)
    k = next(n for n, m in enumerate(sig.maps) if m is jm)
    ab, ar = float(sig.act_base[k]), float(sig.act_recent[k])
    slowed = min(max(1.0 - ar / ab, 0.0), 1.0) if np.isfinite(ab) and ab > 0 and np.isfinite(ar) else 0.0
    return Verdict(**base, state="straggler", confidence=0.9, since=since, culprit=culprit,
                   culprit_kind="port" if len(names) == 1 else "ports", evidence=tuple(ev),
                   gpu_hours_lost=jm.n_gpus * (now - since) / 3600.0 * slowed,
                   reason=f"the gang's collectives run at the pace of {culprit}, whose link trained {drop:.0%} "
                          f"slower than the gang's other ports; GPU activity {slowed:.0%} below the job's baseline"
                          + ("" if slowed else " (slow since before the window: the loss is not measured)"))


@dataclass(frozen=True)
class _Partial:
    verdict: Verdict
    idle_names: frozenset


def _partial_idle(win: Window, sig: _Signals, jm: _JobMap, th: Thresholds, base: dict, util_g: np.ndarray) -> _Partial | None:
    T, step, now = win.n_steps, win.step, win.end
    with np.errstate(invalid="ignore"):
        idle = util_g < th.idle_util
    # a lost scrape ends no idleness (GPUs left idle for minutes, one scrape of their node lost in
    # the last minute); a GPU that stopped reporting is unknown, not idle
    known = np.isfinite(util_g)
    runs = _trailing_run(idle & known, ~known)
    runs[~known[:, -max(1, int(round(th.stale_seconds / step))):].any(axis=1)] = 0
    # ... in two samples at least: one sample held over the grid's steps is no duration (a gang's
    # nodes scraped once a minute at their own offsets, a 45 s checkpoint in one sample of some:
    # catalogue seeds 2302 and 2304 scraped every minute)
    need = max(2, int(math.ceil(th.stall_min_seconds / step)), _held_steps(win) + 1)
    if jm.job.start_time:
        age_steps = int((now - jm.job.start_time) // step) + 1
        runs = np.minimum(runs, age_steps)
    bad = np.flatnonzero(runs >= need)
    fs_w = sig.node_signal("fs_write")
    if bad.size and fs_w is not None:
        # GPUs paused while their node writes at checkpoint speed are checkpointing (nodes of a
        # gang resume a scrape or two apart), unless the pause outlasts any checkpoint
        idx = win.node_index()
        keep = []
        for i in bad:
            r = int(runs[i])
            w = fs_w[idx[jm.gpu_names[i][0]], T - r:]
            with np.errstate(invalid="ignore"):
                writing = bool(np.isfinite(w).any() and np.nanmax(w) >= th.checkpoint_write_bytes)
            if not writing or r * step > th.checkpoint_max_seconds:
                keep.append(i)
        bad = np.array(keep, dtype=np.int64)
    if bad.size == 0 or bad.size == len(jm.gpu_flat):
        return None
    # "while the others work" needs the others seen working: a GPU whose last scrapes were lost
    # (unknown) or that went idle a little later than the rest is no evidence of work, and the
    # whole job is then judged as one (a deadlock idles every GPU, not "28 of 32"). Each other
    # GPU's latest sample says whether it works now: a gang's nodes pause a scrape apart (a
    # checkpoint, a hang reaching one rank after another: RoCE seed 1404), and a minute ago the
    # later ones still worked.
    others = np.setdiff1d(np.arange(util_g.shape[0]), bad)
    tail = util_g[others, max(0, T - need):]
    seen = np.isfinite(tail)
    latest = tail[np.arange(len(others)), tail.shape[1] - 1 - np.argmax(seen[:, ::-1], axis=1)]
    with np.errstate(invalid="ignore"):
        if not (seen.any(axis=1) & (latest >= th.idle_util)).any():
            return None
        # ... and each idle GPU idle while the others worked for as long as a stall takes: the
        # others back a scrape before it is a gang resuming a scrape apart (catalogue seed 1605
        # without the filesystem's series: a checkpoint's last scrape), not GPUs left idle
        busy = (util_g[others] >= th.idle_util).any(axis=0)
        work = np.cumsum(busy[::-1])[::-1]
        # ... unless every other GPU paused too inside that run (a gang's pause, each node seen
        # pausing and resuming at its own scrape offset: a checkpoint with no write rate exported,
        # catalogue seed 3104 scraped every 30 s): then the others work again for as long
        paused = ~busy & np.isfinite(util_g[others]).any(axis=0)
    # counted from the gang's last pause, not bridged over it: one step in which every other GPU
    # paused is the gang's pause, no gap in a stall (catalogue seed 3500 scraped every 45 s, two
    # nodes seen resuming a scrape before the rest). A pause before the idle run is at least `need`
    # steps back, as every run here is.
    last = np.flatnonzero(paused)
    resumed = T - 1 - int(last[-1]) if last.size else T
    bad = np.array([i for i in bad if work[T - int(runs[i])] >= need
                    and (resumed >= need or runs[i] * step > th.checkpoint_max_seconds)], dtype=np.int64)
    if bad.size == 0:
        return None
    names = [jm.gpu_names[i] for i in bad]
    since = float(win.times[T - int(runs[bad].max())])
    ev = tuple(Evidence("gpu_util", n, _mean((util_g[i, T - int(runs[i]):])), None, th.idle_util,
                        note=f"GPU {g} idle for {int(runs[i]) * step:.0f} s")
               for i, (n, g) in zip(bad[:16], names[:16]))
    lost = float(sum(int(runs[i]) * step for i in bad)) / 3600.0
    by_node = defaultdict(list)
    for n, g in names:
        by_node[n].append(str(g))
    culprit = ";".join(f"{n}:gpu{','.join(gs)}" for n, gs in sorted(by_node.items()))
    return _Partial(Verdict(**base, state="idle_gpus", confidence=0.9, since=since, culprit=culprit, culprit_kind="gpus",
                            evidence=ev, gpu_hours_lost=lost,
                            reason=f"{bad.size} of {len(jm.gpu_flat)} allocated GPUs idle while the others work"),
                    frozenset(names))


# ------------------------------------------------------------------------------------ cluster view

def _cluster_check(verdicts: list[Verdict], th: Thresholds, outage: str) -> tuple[list[Verdict], str]:
    """Many jobs stalling at the same moment with no shared culprit: an outage, not job faults."""
    if outage:
        return verdicts, outage
    judged = [v for v in verdicts if v.state not in ("insufficient_data", "suspended")]
    stalled = [v for v in judged if v.state in ("stalled_io", "stalled_network", "hung", "idle_gpus")
               and v.since is not None]
    if len(judged) < th.outage_min_jobs or len(stalled) < th.outage_fraction * len(judged):
        return verdicts, ""
    sinces = np.array([v.since for v in stalled])
    culprits = {v.culprit for v in stalled if v.culprit_kind in ("target", "filesystem", "leaf_switch", "port", "node")}
    if np.ptp(sinces) > th.outage_spread_seconds or (culprits and len(culprits) <= 2):
        return verdicts, ""
    reason = (f"{len(stalled)} of {len(judged)} jobs went quiet within {np.ptp(sinces):.0f} s of each other with no "
              "shared culprit: a collector, Prometheus or network outage is likelier than that many stalls")
    out = [(_replace(v, state="insufficient_data", confidence=0.0, culprit="", culprit_kind="", gpu_hours_lost=0.0,
                     reason=reason) if v in stalled else v) for v in verdicts]
    return out, reason


def incidents(verdicts: Iterable[Verdict]) -> list[Incident]:
    """Verdicts sharing a culprit are one incident; ranked by GPU-hours lost (largest first)."""
    groups: dict[tuple[str, str], list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if v.state not in STALL_STATES:
            continue
        key = (v.culprit_kind, v.culprit) if v.culprit and v.culprit_kind not in ("job", "gpus") else ("job", v.jobid)
        groups[key].append(v)
    out = []
    for (kind, culprit), vs in groups.items():
        causes = defaultdict(float)
        for v in vs:
            causes[v.state] += v.gpu_hours_lost + 1e-9
        sinces = [v.since for v in vs if v.since is not None]
        out.append(Incident(culprit if kind != "job" else (vs[0].culprit or f"job {culprit}"), kind,
                            max(causes, key=causes.get), tuple(v.jobid for v in vs),
                            sum(v.gpu_hours_lost for v in vs), min(sinces) if sinces else None))
    out.sort(key=lambda i: (-i.gpu_hours_lost, i.culprit))
    return out


# ------------------------------------------------------------------------------------ placement

NVLINK_COST = ("intra-node collectives fall back from NVLink (hundreds of GB/s) to PCIe/SMP (tens of GB/s): "
               "all-reduce inside the node several times slower")
NUMA_COST = ("host-to-GPU copies of some ranks cross the CPU socket link: data loading and pinned-memory "
             "transfers typically 20-40 % slower for those GPUs")


def placement_findings(win: Window, maps: list[_JobMap]) -> dict[str, list[Placement]]:
    out: dict[str, list[Placement]] = defaultdict(list)
    leaf_size: dict[str, int] = defaultdict(int)
    for leaf in win.leaf_of.values():
        leaf_size[leaf] += 1
    for jm in maps:
        per_node = defaultdict(list)
        for n, g in jm.gpu_names:
            per_node[n].append(g)
        for n, gs in per_node.items():
            if len(gs) < 2:
                continue
            peers = win.nvlink_peers.get(n)
            if peers:
                missing = [(a, b) for i, a in enumerate(sorted(gs)) for b in sorted(gs)[i + 1:]
                           if (a, b) not in peers and (b, a) not in peers]
                if missing:
                    out[jm.jobid].append(Placement("gpus_not_nvlink_peers", n,
                                                   f"GPU pairs without NVLink: {', '.join(f'{a}-{b}' for a, b in missing[:8])}",
                                                   NVLINK_COST))
            numa = win.gpu_numa.get(n)
            if numa:
                doms = sorted({numa[g] for g in gs if g in numa})
                per_dom = defaultdict(int)
                for d in numa.values():
                    per_dom[d] += 1
                # a job with more GPUs than one NUMA node holds must span several: only more
                # domains than its GPU count needs is a bad placement (a whole DGX spans both)
                if len(doms) > math.ceil(len(gs) / max(max(per_dom.values()), 1)):
                    out[jm.jobid].append(Placement("gpus_span_numa", n, f"GPUs {sorted(gs)} on NUMA nodes {doms}", NUMA_COST))
        nodes = list(jm.job.nodes)
        if len(nodes) > 1 and win.leaf_of:
            leaves = {win.leaf_of[n] for n in nodes if n in win.leaf_of}
            cap = max((leaf_size[lf] for lf in leaves), default=0)
            if cap and len(leaves) > math.ceil(len(nodes) / cap):
                need = math.ceil(len(nodes) / cap)
                out[jm.jobid].append(Placement(
                    "spread_over_leaves", "", f"{len(nodes)} nodes on {len(leaves)} leaf switches where {need} would do "
                    f"({', '.join(sorted(leaves)[:6])})",
                    f"all-reduce crosses the spine on {len(leaves) - 1} hop(s) of the ring instead of "
                    f"{need - 1}; with an oversubscribed spine (2:1 is common) those hops run at up to half speed "
                    "and share with other jobs"))
    return out
