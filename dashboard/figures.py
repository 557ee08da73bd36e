"""Pure figure builders: datasource records in, plotly figures out. No Dash, no data access.

Only cartesian trace types are used (heatmap, scatter, bar): they stay fast at thousands of rows.
Sizes are bounded here: heatmaps arrive already aggregated (≤ ~400 rows x 240 columns, see
dashboard/datasource/arrays.py) and are sent as rounded numbers, so a refresh stays small; unknown values
are None (a gap), never 0.
"""

from __future__ import annotations

import base64
import math
import struct
import zlib

import numpy as np
import plotly.graph_objects as go

from dashboard.datasource.records import SIGNALS, Heatmap, NodeSeries

STATE_COLOURS = {"stalled_io": "#e6550d", "stalled_network": "#756bb1", "straggler": "#fdae6b", "hung": "#de2d26",
                 "idle_gpus": "#969696", "progressing": "#31a354", "insufficient_data": "#bdbdbd"}


def template(theme: str | None) -> str:
    return "plotly_dark" if theme == "dark" else "plotly_white"


def _base(fig: go.Figure, theme: str | None, height: int, title: str = "") -> go.Figure:
    fig.update_layout(template=template(theme), height=height, margin=dict(l=10, r=10, t=36 if title else 10, b=30),
                      title=dict(text=title, x=0.01, font=dict(size=14)) if title else None,
                      paper_bgcolor="rgba(0,0,0,0)", uirevision="keep")
    return fig


def _ms(times) -> list[int]:
    return [int(t * 1000) for t in np.asarray(times, float)]


def _rounded(z: np.ndarray, digits: int) -> list:
    """A matrix (or one series) as nested lists, NaN -> None, rounded: about 3 characters per cell
    on the wire. (Plain lists are built directly: going through numpy object arrays or plotly's
    validators costs ~0.3 s for a 400 x 240 heatmap.) Gaps (NaN) stay gaps, in 1-D as in 2-D."""
    if z.size == 0:
        return []
    r = np.round(z.astype(np.float64), digits)
    nan = np.isnan(r)
    clean = np.where(nan, 0, r)
    out = clean.astype(np.int64).tolist() if digits == 0 else clean.tolist()
    if nan.any():
        for idx in zip(*np.nonzero(nan)):
            row = out
            for k in idx[:-1]:
                row = row[k]
            row[idx[-1]] = None
    return out


def _scale_for(z: np.ndarray) -> tuple[float, str]:
    """Bytes/s or ticks/s shown in a readable unit: (divisor, prefix)."""
    with np.errstate(all="ignore"):
        peak = float(np.nanmax(z)) if z.size and not np.all(np.isnan(z)) else 0.0
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if peak >= div:
            return div, prefix
    return 1.0, ""


def heatmap_data(hm: Heatmap) -> dict:
    """The heatmap trace's data (z in display units, x in ms, y labels) and its unit label."""
    sig = SIGNALS.get(hm.signal)
    unit = sig.unit if sig else ""
    div, prefix = (1.0, "") if unit in ("%", "W", "°C") else _scale_for(hm.z)
    digits = 0 if unit in ("%", "W", "°C") else 2
    return {"z": _rounded(hm.z / div, digits), "x": _ms(hm.times), "y": list(hm.rows), "unit": f"{prefix}{unit}"}


def heatmap_height(rows: int) -> int:
    """Pixels for a heatmap of `rows` rows (also the overview's still preview, so nothing jumps when
    the interactive figure replaces it): readable rows for a few nodes, bounded for thousands."""
    return int(min(900, max(160, 60 + rows * (14 if rows < 40 else 2))))


def heatmap(hm: Heatmap | None, theme: str | None = None, title: str = "", shade: list[tuple[float, float]] = (),
            height: int | None = None, colorscale: str = "Viridis") -> dict | go.Figure:
    """Rows x time heatmap as a figure dict (the big arrays bypass plotly's validation); `shade`
    marks intervals (e.g. a stall) with a translucent band."""
    if hm is None or not len(hm.rows):
        return empty("no data for this view", theme, height or 200)
    d = heatmap_data(hm)
    # colour from 0 (plotly needs both ends fixed, or it autoscales around the data: a flat 100 MB/s
    # would span 99.5-100.5 and look like a signal)
    peak = max((v for row in d["z"] for v in row if v is not None), default=None)
    zmax = 100 if d["unit"] == "%" else (peak if peak else 1)
    fig = go.Figure(go.Heatmap(
        z=[[0]], zmin=0, zmax=zmax, colorscale=colorscale, colorbar=dict(title=dict(text=d["unit"]), thickness=12),
        hoverongaps=False, hovertemplate="%{y}<br>%{x|%H:%M:%S}<br>%{z} " + d["unit"] + "<extra></extra>"))
    rows = len(hm.rows)
    h = height or heatmap_height(rows)
    _base(fig, theme, h, title)
    fig.update_yaxes(autorange="reversed", showticklabels=rows <= 60, type="category")
    fig.update_xaxes(type="date")
    for t0, t1 in shade:
        fig.add_vrect(x0=int(t0 * 1000), x1=int(t1 * 1000), fillcolor="#de2d26", opacity=0.18, line_width=0,
                      annotation_text="stall", annotation_position="top left")
    out = fig.to_plotly_json()
    out["data"][0].update(z=d["z"], x=d["x"], y=d["y"])
    return out


def _png(index: np.ndarray, palette: np.ndarray, transparent: int) -> bytes:
    """An (h x w) uint8 array of palette indices as an 8-bit indexed PNG (no filter), palette entry
    `transparent` fully transparent: one byte a pixel, a quarter of RGBA."""
    h, w = index.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), index.astype(np.uint8)], axis=1).tobytes()
    alpha = bytes(0 if k == transparent else 255 for k in range(len(palette)))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
            + chunk(b"PLTE", palette.astype(np.uint8).tobytes()) + chunk(b"tRNS", alpha)
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def heatmap_png(hm: Heatmap | None, colorscale: str = "Viridis") -> tuple[str, str] | None:
    """The heatmap as a PNG data URI (one pixel per row x column, in the plotly figure's colours and
    scale; unknown is transparent) and its unit: the first view shows it without waiting for
    plotly.js (whose evaluation is the largest cost of a first load), then the figure replaces it."""
    if hm is None or not len(hm.rows) or not hm.z.size:
        return None
    from plotly.colors import hex_to_rgb, sample_colorscale, sequential

    d = heatmap_data(hm)
    z = np.array([[np.nan if v is None else v for v in row] for row in d["z"]], float)
    finite = z[np.isfinite(z)]
    zmax = 100.0 if d["unit"] == "%" else (float(finite.max()) if finite.size and finite.max() > 0 else 1.0)
    stops = [c if c.startswith("rgb") else "rgb" + str(hex_to_rgb(c)) for c in getattr(sequential, colorscale)]
    levels = 255  # palette entries 0-254 are the scale, 255 is unknown
    palette = np.array([[float(x) for x in c[c.index("(") + 1:-1].split(",")]
                        for c in sample_colorscale(stops, list(np.linspace(0, 1, levels)))] + [[0, 0, 0]])
    idx = np.clip(np.nan_to_num(z / zmax * (levels - 1), nan=0), 0, levels - 1).round().astype(np.uint8)
    idx[~np.isfinite(z)] = levels
    return "data:image/png;base64," + base64.b64encode(_png(idx, palette, levels)).decode("ascii"), d["unit"]


def node_lines(ns: NodeSeries | None, signal: str, theme: str | None = None, height: int = 240) -> go.Figure:
    """One line per GPU (or rail, or one for the node) over time."""
    if ns is None or signal not in ns.values:
        return empty("no data for this node", theme, height)
    sig = SIGNALS[signal]
    v = ns.values[signal]
    div, prefix = (1.0, "") if sig.unit in ("%", "W", "°C") else _scale_for(v)
    x = _ms(ns.times)
    traces = [go.Scatter(x=x, y=_rounded(row / div, 2), name=ch, mode="lines", line=dict(width=1.3))
              for ch, row in zip(ns.channels[signal], v)]
    fig = go.Figure(traces)
    _base(fig, theme, height, f"{ns.labels.get(signal) or sig.label} ({prefix}{sig.unit})")
    fig.update_xaxes(type="date")
    if sig.unit == "%":
        fig.update_yaxes(range=[0, 105])
    fig.update_layout(legend=dict(orientation="h", y=-0.25, font=dict(size=10)))
    return fig


def freed_gpus(now: float, ends: list[tuple[float, int]], free_now: int, top: tuple[float, int, str] | None,
               reservations: list[tuple[str, float, float]], theme: str | None = None, horizon: float = 86400.0,
               height: int = 300) -> go.Figure:
    """GPUs free over the next `horizon` seconds if every running job runs to its time limit, with
    the top pending job's reserved start and GPU need, and reservations as bands."""
    ends = sorted((max(t, now), g) for t, g in ends if t <= now + horizon)
    xs, ys = [now], [free_now]
    level = free_now
    for t, g in ends:
        level += g
        xs += [t, t]
        ys += [ys[-1], level]
    xs.append(now + horizon)
    ys.append(level)
    fig = go.Figure(go.Scatter(x=_ms(xs), y=ys, mode="lines", name="GPUs free (running jobs to their limits)",
                               line=dict(shape="linear", width=2), fill="tozeroy"))
    if top is not None:
        t, need, jobid = top
        if math.isfinite(t):
            fig.add_vline(x=int(t * 1000), line_dash="dash", line_color="#de2d26")
            fig.add_annotation(x=int(t * 1000), y=need, text=f"job {jobid} reserved start", showarrow=True)
        fig.add_hline(y=need, line_dash="dot", line_color="#de2d26", annotation_text=f"top job needs {need} GPUs")
    for name, t0, t1 in reservations:
        fig.add_vrect(x0=int(max(t0, now) * 1000), x1=int(min(t1, now + horizon) * 1000), fillcolor="#3182bd",
                      opacity=0.15, line_width=0, annotation_text=f"reservation {name}")
    _base(fig, theme, height, "GPUs that free up as running jobs reach their time limits")
    fig.update_xaxes(type="date")
    fig.update_layout(showlegend=False)
    return fig


def job_timeline(now: float, jobs: list[tuple[str, float, float, int]], top: tuple[float, int, str] | None,
                 theme: str | None = None) -> go.Figure:
    """Running jobs as bars from their start to their time limit (label, start, end, GPUs), the
    largest first, with now and the top pending job's reserved start."""
    if not jobs:
        return empty("no running jobs", theme, 120)
    labels = [j[0] for j in jobs]
    fig = go.Figure(go.Bar(y=labels, base=_ms([j[1] for j in jobs]), x=[int((j[2] - j[1]) * 1000) for j in jobs],
                           orientation="h", marker_color="#3182bd", customdata=[j[3] for j in jobs],
                           hovertemplate="%{y}: %{customdata} GPUs<br>%{base|%H:%M} to %{x|%H:%M}<extra></extra>"))
    fig.add_vline(x=int(now * 1000), line_color="#31a354", annotation_text="now")
    if top is not None and math.isfinite(top[0]):
        fig.add_vline(x=int(top[0] * 1000), line_dash="dash", line_color="#de2d26",
                      annotation_text=f"job {top[2]} reserved start", annotation_position="bottom right")
    _base(fig, theme, 40 + 18 * len(jobs), "Largest running jobs, from start to time limit")
    fig.update_xaxes(type="date")
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def dependency_graph(edges: list[tuple[str, str]], labels: dict[str, str], theme: str | None = None,
                     height: int = 320) -> go.Figure:
    """Pending chains: nodes are jobs, laid out in columns by depth, arrows from dependency to dependant."""
    if not edges:
        return empty("no pending job depends on another", theme, 120)
    parents: dict[str, list[str]] = {}
    nodes = set()
    for a, b in edges:
        parents.setdefault(b, []).append(a)
        nodes |= {a, b}
    depth: dict[str, int] = {}

    def d(n: str, seen=()) -> int:
        if n in depth:
            return depth[n]
        if n in seen:  # a cycle: Slurm would reject it, but the data could still hold one
            return 0
        depth[n] = 1 + max((d(p, seen + (n,)) for p in parents.get(n, [])), default=-1)
        return depth[n]

    for n in sorted(nodes):
        d(n)
    cols: dict[int, list[str]] = {}
    for n in sorted(nodes, key=lambda n: (depth[n], n)):
        cols.setdefault(depth[n], []).append(n)
    pos = {n: (c, -k) for c, ns in cols.items() for k, n in enumerate(ns)}
    ex, ey = [], []
    for a, b in edges:
        ex += [pos[a][0], pos[b][0], None]
        ey += [pos[a][1], pos[b][1], None]
    fig = go.Figure([go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#888", width=1), hoverinfo="skip"),
                     go.Scatter(x=[pos[n][0] for n in pos], y=[pos[n][1] for n in pos], mode="markers+text",
                                text=list(pos), textposition="top center", marker=dict(size=12),
                                hovertext=[labels.get(n, n) for n in pos], hoverinfo="text")])
    _base(fig, theme, height, "Dependencies of pending jobs (left: what they wait for)")
    fig.update_layout(showlegend=False)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def empty(message: str, theme: str | None = None, height: int = 160) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    _base(fig, theme, height)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
