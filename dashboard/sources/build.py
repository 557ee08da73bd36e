"""Raw samples (any schema in schema.py) -> a `Window` on a common time grid.

Two entry points share the grid alignment:
* `RawStore`: samples as exporters emit them (bundles, the embedded scraper). Counters become
  per-second rates between consecutive samples of one series (a decrease is a counter reset: the
  increase is the new value, as Prometheus' `rate()` does; a non-increasing timestamp gives no
  rate), gauges are scaled to base units, then series are mapped to (signal, node, key).
* `SignalStore`: series already in signal units (the Prometheus source's aggregated queries).

Alignment: each grid time takes the latest sample at or before it, if that sample is younger than
`lookback` (default 2 steps); otherwise NaN. So a node that stopped reporting goes NaN, never 0,
and modest clock skew between nodes (seconds) is absorbed. NaN and Inf samples are unknown.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable

import numpy as np

from dashboard.analysis.window import Window, grid

from .exposition import Sample
from .schema import BY_METRIC, HPC_JOB_LABEL, INFO_METRICS, Mapping, NodeMatcher, matches, sub_key

WANTED = frozenset(BY_METRIC) | frozenset(INFO_METRICS)


def align(ts: np.ndarray, vs: np.ndarray, times: np.ndarray, lookback: float) -> np.ndarray:
    """Latest sample at or before each grid time, within `lookback` seconds; NaN elsewhere."""
    out = np.full(times.shape[0], np.nan, np.float64)
    if ts.size == 0 or times.size == 0:
        return out
    order = np.argsort(ts, kind="stable")
    ts, vs = ts[order], vs[order]
    idx = np.searchsorted(ts, times + 1e-6, side="right") - 1
    ok = idx >= 0
    safe = np.maximum(idx, 0)
    ok &= (times - ts[safe]) < lookback
    out[ok] = vs[safe[ok]]
    out[~np.isfinite(out)] = np.nan
    return out


def _increments(ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, increases, intervals) between consecutive samples of a counter; a decrease is a reset
    (the increase is the new value), a repeated timestamp is one sample (overlapping captures)."""
    if ts.size < 2:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    order = np.argsort(ts, kind="stable")
    ts, vs = ts[order], vs[order]
    keep = np.append(np.diff(ts) != 0, True)
    ts, vs = ts[keep], vs[keep]
    if ts.size < 2:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    with np.errstate(all="ignore"):
        dv = np.diff(vs)
        inc = np.where(dv < 0, vs[1:], dv)
    return ts[1:], inc, np.diff(ts)


def counter_rate(ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, per-second rates) between consecutive samples; a reset counts from zero."""
    t2, inc, dt = _increments(ts, vs)
    with np.errstate(all="ignore"):
        rate = np.where(dt > 0, inc / np.where(dt > 0, dt, 1.0), np.nan)
    rate[~np.isfinite(rate)] = np.nan
    return t2, rate


class SignalStore:
    """Series in signal units keyed by (signal, level, node, key); several per key combine."""

    def __init__(self):
        self.series: dict[tuple[str, str, str, str], list[tuple[np.ndarray, np.ndarray, str]]] = defaultdict(list)
        self.gpu_jobs: dict[tuple[str, int], str] = {}
        self.leaf_of: dict[str, str] = {}
        self.nvlink_peers: dict[str, set[tuple[int, int]]] = defaultdict(set)
        self.gpu_numa: dict[str, dict[int, int]] = defaultdict(dict)
        self.notes: list[str] = []

    def add(self, signal: str, level: str, node: str, key: str, ts, vs, combine: str = "mean") -> None:
        self.series[(signal, level, node, key)].append((np.asarray(ts, np.float64), np.asarray(vs, np.float64), combine))

    def add_info(self, name: str, labels: dict[str, str], node: str | None) -> None:
        if node is None:
            return
        try:
            if name == "gangwatch_job_gpu_info" and labels.get("jobid") and labels.get("gpu", "").isdigit():
                self.gpu_jobs[(node, int(labels["gpu"]))] = labels["jobid"]
            elif name == "gangwatch_sim_node_info" and labels.get("leaf"):
                self.leaf_of[labels.get("node") or node] = labels["leaf"]
            elif name == "gangwatch_gpu_nvlink_peer_info":
                a, b = int(labels["gpu"]), int(labels["peer_gpu"])
                self.nvlink_peers[node].add((min(a, b), max(a, b)))
            elif name == "gangwatch_gpu_affinity_info" and labels.get("numa_node", "") not in ("", "-1"):
                self.gpu_numa[node][int(labels["gpu"])] = int(labels["numa_node"])
        except (KeyError, ValueError):
            pass

    def window(self, start: float, end: float, step: float, lookback: float | None = None,
               leaf_of: dict[str, str] | None = None) -> Window:
        times = grid(start, end, step)
        lookback = 2 * step if lookback is None else lookback
        T = times.shape[0]
        per_level: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
        nodes: set[str] = set()
        for (signal, level, node, key) in self.series:
            if level == "job":
                continue
            nodes.add(node)
            per_level[level][node][signal].add(key)
        nodes_t = tuple(sorted(nodes))
        ni = {n: i for i, n in enumerate(nodes_t)}

        def keys_of(level: str, numeric: bool) -> dict[str, list[str]]:
            out = {}
            for n in nodes_t:
                ks = set().union(*per_level[level][n].values()) if per_level[level].get(n) else set()
                out[n] = sorted(ks, key=(lambda k: int(k)) if numeric else str)
            return out

        gpu_keys = keys_of("gpu", True)
        rail_keys = keys_of("rail", False)
        targets = sorted(set().union(*[set(v) for v in keys_of("target", False).values()]) if nodes_t else set())
        G = max((len(v) for v in gpu_keys.values()), default=0)
        R = max((len(v) for v in rail_keys.values()), default=0)
        F = len(targets)
        ti = {t: i for i, t in enumerate(targets)}
        gcol = {n: {k: c for c, k in enumerate(ks)} for n, ks in gpu_keys.items()}
        rcol = {n: {k: c for c, k in enumerate(ks)} for n, ks in rail_keys.items()}
        arrays: dict[str, dict[str, np.ndarray]] = {"gpu": {}, "rail": {}, "node": {}, "target": {}}
        per_job: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
        shapes = {"gpu": (len(nodes_t), G, T), "rail": (len(nodes_t), R, T), "node": (len(nodes_t), T),
                  "target": (len(nodes_t), F, T)}
        for (signal, level, node, key), items in self.series.items():
            if level == "job":
                per_job[signal][key].extend(align(ts, vs, times, lookback) for ts, vs, _ in items)
                continue
            arr = arrays[level].get(signal)
            if arr is None:
                arr = arrays[level][signal] = np.full(shapes[level], np.nan, np.float64)
            aligned = [align(ts, vs, times, lookback) for ts, vs, _ in items]
            combine = items[0][2]
            stack = np.vstack(aligned)
            with np.errstate(invalid="ignore"):
                if len(aligned) == 1:
                    v = stack[0]
                elif combine == "sum":
                    cnt = np.isfinite(stack).sum(axis=0)
                    v = np.where(cnt == len(aligned), np.nansum(stack, axis=0), np.nan)
                else:
                    cnt = np.isfinite(stack).sum(axis=0)
                    v = np.where(cnt > 0, np.nansum(stack, axis=0) / np.maximum(cnt, 1), np.nan)
            i = ni[node]
            if level == "node":
                arr[i] = v
            elif level == "gpu":
                arr[i, gcol[node][key]] = v
            elif level == "rail":
                arr[i, rcol[node][key]] = v
            else:
                arr[i, ti[key]] = v
        node_arr = arrays["node"]
        if "iowait_cpu" in node_arr and "cpu_all" in node_arr:
            with np.errstate(invalid="ignore", divide="ignore"):
                node_arr["iowait"] = np.where(node_arr["cpu_all"] > 0, node_arr["iowait_cpu"] / node_arr["cpu_all"], np.nan)
        node_arr.pop("iowait_cpu", None)
        node_arr.pop("cpu_all", None)
        tg = arrays["target"]
        if "lat_sum" in tg and "lat_count" in tg:
            with np.errstate(invalid="ignore", divide="ignore"):
                tg["latency"] = np.where(tg["lat_count"] > 0, tg["lat_sum"] / tg["lat_count"], np.nan)
        tg.pop("lat_sum", None)
        tg.pop("lat_count", None)
        f32 = {lvl: {s: a.astype(np.float32) for s, a in d.items()} for lvl, d in arrays.items()}
        jobs_out = {}
        for signal, by_job in per_job.items():
            jobs_out[signal] = {}
            for jid, rows in by_job.items():
                st = np.vstack(rows)
                cnt = np.isfinite(st).sum(axis=0)
                jobs_out[signal][jid] = np.where(cnt > 0, np.where(np.isfinite(st), st, 0).sum(axis=0) / np.maximum(cnt, 1),
                                                 np.nan)
        notes = list(self.notes)
        if not f32["gpu"]:
            notes.append("no GPU metrics found (gangwatch_gpu_*, DCGM_FI_*)")
        leaves = dict(self.leaf_of)
        leaves.update(leaf_of or {})
        return Window(times=times, step=float(step), nodes=nodes_t,
                      gpus=tuple(tuple(int(k) for k in gpu_keys[n]) + (-1,) * (G - len(gpu_keys[n])) for n in nodes_t),
                      rails=tuple(tuple(rail_keys[n]) + ("",) * (R - len(rail_keys[n])) for n in nodes_t),
                      targets=tuple(targets), gpu=f32["gpu"], rail=f32["rail"], node=f32["node"], target=f32["target"],
                      job=jobs_out, gpu_jobs=dict(self.gpu_jobs), leaf_of=leaves,
                      nvlink_peers={n: frozenset(p) for n, p in self.nvlink_peers.items()},
                      gpu_numa={n: dict(d) for n, d in self.gpu_numa.items()}, notes=tuple(notes))


class RawStore:
    """Exporter samples grouped per series; `signals()` maps them through schema.MAPPINGS."""

    def __init__(self, matcher: NodeMatcher | None = None):
        self.matcher = matcher or NodeMatcher()
        self.points: dict[tuple[str, tuple], tuple[list[float], list[float]]] = {}
        self.info: dict[tuple[str, tuple], dict[str, str]] = {}
        self.unmatched = 0

    def add(self, s: Sample, default_ts: float | None = None) -> None:
        ts = s.timestamp if s.timestamp is not None else default_ts
        if ts is None or not math.isfinite(ts):
            return
        if s.name in INFO_METRICS or (s.name.startswith("DCGM_FI_") and s.labels.get(HPC_JOB_LABEL)):
            self.info[(s.name, tuple(sorted(s.labels.items())))] = s.labels
            if s.name in INFO_METRICS:
                return
        if s.name not in BY_METRIC:
            return
        key = (s.name, tuple(sorted(s.labels.items())))
        got = self.points.get(key)
        if got is None:
            got = self.points[key] = ([], [])
        got[0].append(ts)
        got[1].append(s.value)

    def prune(self, before: float) -> None:
        """Drop samples older than `before` (the embedded source's bounded window)."""
        dead = []
        for key, (ts, vs) in self.points.items():
            k = 0
            while k < len(ts) and ts[k] < before:
                k += 1
            if k:
                del ts[:k]
                del vs[:k]
            if not ts:
                dead.append(key)
        for key in dead:
            del self.points[key]

    def add_all(self, samples: Iterable[Sample], default_ts: float | None = None) -> None:
        for s in samples:
            self.add(s, default_ts)

    def signals(self) -> SignalStore:
        out = SignalStore()
        for (name, items), (ts_l, vs_l) in self.points.items():
            labels = dict(items)
            node = self.matcher(labels)
            if node is None:
                self.unmatched += 1
                continue
            ts, vs = np.asarray(ts_l, np.float64), np.asarray(vs_l, np.float64)
            for m in BY_METRIC[name]:
                if not matches(m, labels):
                    continue
                key = sub_key(m, labels)
                if key is None:
                    continue
                scale = _scale(m, labels)
                if scale is None:
                    continue
                t2, v2 = _transform(m, ts, vs)
                out.add(m.signal, m.level, node, key, t2, v2 * (scale / m.scale) if m.scale else v2, m.combine)
        for (name, _), labels in self.info.items():
            node = self.matcher(labels)
            if name.startswith("DCGM_FI_"):
                if node and labels.get("gpu", "").isdigit() and labels.get(HPC_JOB_LABEL):
                    out.gpu_jobs[(node, int(labels["gpu"]))] = labels[HPC_JOB_LABEL]
            else:
                out.add_info(name, labels, node)
        if self.unmatched:
            out.notes.append(f"{self.unmatched} series without a host label ({', '.join(self.matcher.host_labels)})")
        return out


def _scale(m: Mapping, labels: dict[str, str]) -> float | None:
    """The mapping's scale for this series (times a histogram bucket's bound where it says so)."""
    if not m.scale_label:
        return m.scale
    try:
        b = float(labels.get(m.scale_label, ""))
    except ValueError:
        return None
    return m.scale * b if np.isfinite(b) else None


def _transform(m: Mapping, ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if m.events:  # events per sample interval (the link went down twice since the last scrape)
        t2, inc, _ = _increments(ts, vs)
        inc[~np.isfinite(inc)] = np.nan
        return t2, inc * m.scale
    if m.counter:
        t2, r = counter_rate(ts, vs)
        return t2, r * m.scale
    return ts, vs * m.scale
