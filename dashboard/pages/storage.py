"""Storage (`/storage`): per filesystem and target (OST, MDT, NSD) now: throughput, operations,
read latency, RPCs in flight and state (clients connected), "unknown" where the source has no
series; read throughput per target over the last hour; the running jobs reading the most.
Linked only where a metric source provides per-target series."""

from __future__ import annotations

import numpy as np
from dash import html

from dashboard import figures, ids, ui
from dashboard.analysis.thresholds import DEFAULT as TH
from dashboard.datasource import Datasource

TITLE = "Storage"


UNAVAILABLE = ("No Lustre or GPFS source reports here: no agent's lustre or gpfs collector appears in the metric "
               "source (or serve runs without one), so filesystem targets, their throughput and latency are unknown.")


def available(ds: Datasource) -> bool:
    return ds.ost_series(60.0) is not None


def top_jobs(ds: Datasource, ctx: ui.Ctx, limit: int = 20):
    """Jobs by the Lustre reads of their nodes now (a node's reads shared by its jobs' GPU share)."""
    snap = ds.snapshot()
    hm = ds.heatmap("io_read", 120.0, max_rows=10**9, max_cols=1)
    if snap is None or hm is None:
        return ui.table([], [], empty="No data.")
    node_rate = {m[0]: float(hm.z[k, -1]) for k, m in enumerate(hm.row_nodes) if hm.z.shape[1] and not np.isnan(hm.z[k, -1])}
    gpus_on = {n.name: n.gpus_allocated or 0 for n in snap.nodes}
    rates = []
    for j in snap.jobs:
        if j.state != "RUNNING":
            continue
        r = 0.0
        for a in j.allocations:
            share = (a.gpus or 0) / gpus_on[a.node] if gpus_on.get(a.node) else 1.0
            r += node_rate.get(a.node, 0.0) * share
        rates.append((r, j))
    rates.sort(key=lambda x: -x[0])
    rows = [[ui.job_link(ctx, j.job_id), j.name, j.user, str(j.gang_size), f"{r / 1e6:,.1f}"] for r, j in rates[:limit]]
    return ui.table(["job", "name", "user", "nodes", "read MB/s"], rows)


def targets(ds: Datasource):
    ts = ds.storage_targets()
    if not ts:
        return ui.table([], [], empty="Targets unknown: no per-target series.")
    lats = [t.latency_s for t in ts if t.latency_s is not None]
    med = float(np.median(lats)) if lats else None
    rows = []
    for t in sorted(ts, key=lambda t: (t.fs, t.kind != "MDT", t.name)):
        slow = med is not None and t.latency_s is not None and t.latency_s > TH.latency_ratio * med
        rows.append([t.fs, t.name, t.kind, html.Span(t.state, className="gw-sev-error" if t.state.startswith("dis") else ""),
                     ui.fmt_si(t.read_bps, "B/s"), ui.fmt_si(t.write_bps, "B/s"), ui.fmt_si(t.ops_per_s, "op/s"),
                     html.Span(ui.fmt_known(None if t.latency_s is None else t.latency_s * 1000, 1, "ms")
                               + (" (slow)" if slow else ""), className="gw-sev-error" if slow else ""),
                     ui.fmt_known(t.rpcs_in_flight, 0)])
    return ui.table(["filesystem", "target", "kind", "state", "read", "write", "operations", "read latency",
                     "RPCs in flight"], rows)


def layout(ds: Datasource, ctx: ui.Ctx):
    return html.Div([html.H1("Storage"),
                     ui.section("Targets now", html.Div(targets(ds), id=ids.STORAGE_TARGETS),
                                note=f"Summed over the clients that report each target; a read latency over {TH.latency_ratio:g}x "
                                     "the median target's is marked slow."),
                     ui.section("Read throughput per object storage target (last hour)",
                                ui.graph(id=ids.STORAGE_HEATMAP),
                                note="A target much slower than its peers stalls every job striped on it."),
                     ui.section("Top jobs by reads now", html.Div(top_jobs(ds, ctx), id=ids.STORAGE_TOP))])


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    ui.refresh_on_tick(app, {ids.STORAGE_HEATMAP: lambda theme: figures.heatmap(ds.ost_series(), theme, colorscale="Cividis")},
                       {ids.STORAGE_TARGETS: lambda: targets(ds), ids.STORAGE_TOP: lambda: top_jobs(ds, ctx)})
