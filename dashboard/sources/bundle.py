"""Bundles: offline input for `diagnose --bundle`, written by `capture`, tests and replays.

A directory (../shared/ARCHITECTURE.md) with `metrics.om` (OpenMetrics, timestamps in seconds,
`# EOF`; gangwatch's or node_exporter/dcgm-exporter/Lustre/GPFS exporters' names), `squeue.json`
(Slurm's `squeue --json`), optionally `sinfo.json`, `bundle.json` (`{"start", "end", "cluster"}`)
and, as a gangwatch extension, `topology.conf` (Slurm's tree topology, for placement findings).

Reading never raises for bad content: a missing or broken file becomes a note (no jobs, no
window), a bad line is skipped and counted. Size: metrics.om is streamed (exposition.read_columns)
and the window is built column-wise (build.columns_window): see docs/diagnosis-bundles.md. `write_bundle` writes the same layout, and
`squeue_json` renders model Jobs in the shape `squeue --json` (data_parser v0.0.40) prints, so
simulated scenarios can be replayed through exactly the path a real capture takes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Iterable

from collectors.exposition import format_labels
from collectors.slurm.hostlist import compress
from collectors.slurm.model import Job
from collectors.slurm.parse_json import loads, parse_jobs

from dashboard.analysis.gcpause import gc_paused
from dashboard.analysis.topology import parse_topology_conf
from dashboard.analysis.window import Window

from .build import MAX_NODES, WANTED, columns_window
from .exposition import MAX_LINE, Columns, Sample, read_columns
from .schema import NodeMatcher


@dataclass(frozen=True)
class Bundle:
    window: Window
    jobs: tuple[Job, ...]
    start: float
    end: float
    cluster: str
    notes: tuple[str, ...]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_jobs(text: str | None, notes: list[str]) -> list[Job]:
    if text is None:
        notes.append("squeue.json missing: no jobs to judge")
        return []
    try:
        jobs, meta = parse_jobs(loads(text))
    except ValueError as exc:
        notes.append(f"squeue.json unreadable: {exc}")
        return []
    notes.extend(f"squeue.json: {w}" for w in getattr(meta, "warnings", []) or [])
    return jobs


def load_bundle(path: str, step: float = 15.0, span: float | None = None, matcher: NodeMatcher | None = None,
                max_nodes: int = MAX_NODES) -> Bundle:
    """Read a bundle. metrics.om is streamed (memory: the kept samples, one chunk, then the window);
    at most `max_nodes` nodes get a row in the window: the jobs' nodes first (build.cap_nodes)."""
    notes: list[str] = []
    meta = {}
    raw_meta = _read(os.path.join(path, "bundle.json"))
    if raw_meta is not None:
        try:
            meta = json.loads(raw_meta)
            if not isinstance(meta, dict):
                meta = {}
                notes.append("bundle.json is not an object; ignored")
        except ValueError:
            notes.append("bundle.json unreadable; window is the span of the samples")
    # the jobs first: their nodes keep their rows when the window is capped, and their notes
    # travel with the window to the verdicts
    job_notes: list[str] = []
    jobs = read_jobs(_read(os.path.join(path, "squeue.json")), job_notes)
    with gc_paused():
        cols = Columns()
        try:
            with open(os.path.join(path, "metrics.om"), "rb") as f:
                # chunks small beside what a small file keeps, up to 1 MiB for big ones
                size = os.fstat(f.fileno()).st_size
                cols = read_columns(f, WANTED, chunk=min(1 << 20, max(1 << 16, size // 48)))
        except OSError:
            notes.append("metrics.om missing")
        if cols.skipped_lines:
            notes.append(f"metrics.om: {cols.skipped_lines} line(s) not parsable, skipped")
        if cols.long_lines:
            notes.append(f"metrics.om: {cols.long_lines} line(s) longer than {MAX_LINE // 1024} KiB, skipped unread")
        lo, hi = (float(cols.ts.min()), float(cols.ts.max())) if cols.samples else (math.inf, -math.inf)
        start, end = _num(meta.get("start"), lo), _num(meta.get("end"), hi)
        if span is not None and math.isfinite(end):
            start = max(start, end - span)
        leaf_of, tnotes = parse_topology_conf(_read(os.path.join(path, "topology.conf")) or "")
        notes += tnotes + job_notes
        if math.isfinite(start) and math.isfinite(end):
            # the grid ends at the bundle's end, so "now" is the capture time
            start = end - step * math.floor((end - start) / step)
        win = columns_window(cols, start, end, step, leaf_of=leaf_of, matcher=matcher,
                             keep_nodes={n for j in jobs for n in j.nodes}, max_nodes=max_nodes)
        win = Window(**{**win.__dict__, "notes": tuple(win.notes) + tuple(notes)})
        return Bundle(win, tuple(jobs), start, end, str(meta.get("cluster", "")), tuple(notes))


def _num(x, default: float) -> float:
    try:
        v = float(x)
        return v if math.isfinite(v) else default
    except (TypeError, ValueError):
        return default


class BundleSource:
    """A bundle as a `MetricSource` (the window is fixed: `end`/`span` only narrow it)."""

    name = "bundle"

    def __init__(self, path: str, matcher: NodeMatcher | None = None):
        self.path, self.matcher = path, matcher

    def window(self, end: float | None = None, span: float = 3600.0, step: float = 15.0) -> Window:
        return load_bundle(self.path, step, span, self.matcher).window


# ------------------------------------------------------------------------------------ writing

def _fmt(v: float) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    return repr(float(v)) if isinstance(v, float) else str(v)


def _ts(t: float | None) -> str:
    if t is None:
        return ""
    return f" {int(t)}" if t == int(t) else f" {t:.3f}"


def openmetrics(samples: Iterable[Sample], types: dict[str, str] | None = None) -> str:
    """Samples (with timestamps) -> OpenMetrics text grouped by metric, ending in `# EOF`.

    promtool's OpenMetrics reader wants each family contiguous and counters named `_total` with a
    `# TYPE <name without _total> counter` line; gauges get `# TYPE <name> gauge`."""
    series: dict[str, dict[tuple, list[Sample]]] = {}
    for s in samples:
        series.setdefault(s.name, {}).setdefault(tuple(s.labels.items()), []).append(s)
    out = []
    types = types or {}
    for name, by_labels in series.items():
        kind = types.get(name) or ("counter" if name.endswith("_total") else "gauge")
        family = name[:-6] if kind == "counter" and name.endswith("_total") else name
        out.append(f"# TYPE {family} {kind}\n")
        for items, group in by_labels.items():
            head = name + (format_labels(dict(items)) if items else "") + " "
            group.sort(key=lambda s: s.timestamp or 0)
            out.extend(f"{head}{_fmt(s.value)}{_ts(s.timestamp)}\n" for s in group)
    out.append("# EOF\n")
    return "".join(out)


def squeue_json(jobs: Iterable[Job], taken_at: float) -> dict:
    """Model jobs -> the document `squeue --json` prints (data_parser v0.0.40 shape)."""
    out = []
    for j in jobs:
        gres = []
        for a in j.allocations:
            if a.gpu_indices:
                idx = ",".join(str(i) for i in a.gpu_indices)
                gres.append(f"gpu:{a.gpu_type or 'gpu'}:{len(a.gpu_indices)}(IDX:{idx})")
            else:
                gres.append(f"gpu:{a.gpus or 0}" if a.gpus else "")
        rec = {"job_id": j.job_id, "name": j.name, "user_name": j.user, "account": j.account,
               "partition": j.partition, "job_state": [j.state], "nodes": compress(j.nodes) if j.nodes else "",
               "node_count": {"set": True, "infinite": False, "number": len(j.nodes) or (j.node_count or 0)},
               "start_time": {"set": j.start_time is not None, "infinite": False, "number": int(j.start_time or 0)},
               "submit_time": {"set": j.submit_time is not None, "infinite": False, "number": int(j.submit_time or 0)},
               "gres_detail": gres, "tres_alloc_str": f"gres/gpu={j.gpus}" if j.gpus else ""}
        out.append(rec)
    return {"meta": {"plugins": {"data_parser": "data_parser/v0.0.40"}, "slurm": {"version": {"major": "23", "minor": "11", "micro": "0"}}},
            "jobs": out, "last_backfill": {"set": True, "infinite": False, "number": int(taken_at)},
            "last_update": {"set": True, "infinite": False, "number": int(taken_at)}, "errors": [], "warnings": []}


def write_bundle(path: str, metrics_text: str, squeue: dict, start: float | None = None, end: float | None = None,
                 cluster: str = "", sinfo: dict | None = None, topology_conf: str | None = None) -> None:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.om"), "w", encoding="utf-8") as f:
        f.write(metrics_text if metrics_text.rstrip().endswith("# EOF") else metrics_text + "# EOF\n")
    with open(os.path.join(path, "squeue.json"), "w", encoding="utf-8") as f:
        json.dump(squeue, f)
    if sinfo is not None:
        with open(os.path.join(path, "sinfo.json"), "w", encoding="utf-8") as f:
            json.dump(sinfo, f)
    meta = {k: v for k, v in (("start", start), ("end", end), ("cluster", cluster)) if v not in (None, "")}
    if meta:
        with open(os.path.join(path, "bundle.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)
    if topology_conf:
        with open(os.path.join(path, "topology.conf"), "w", encoding="utf-8") as f:
            f.write(topology_conf)
