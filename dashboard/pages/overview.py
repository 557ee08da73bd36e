"""Overview (`/`): is anything wasting GPUs now, why, what does it cost.

Headline figures, incidents ranked by GPU-hours lost, the node x time heatmap of GPU utilisation
(aggregated on the server: nodes sorted by their mean, lowest first, at most 400 rows x 240
columns whatever the node count), and the flagged jobs. The heatmap comes with the page as a PNG
of the same data (no plotly.js needed for the first view), and a callback then mounts the
interactive figure in its place. Refreshes on the shell's interval: when the data version has not
changed nothing is sent; when it has, the heatmap is patched (data only, layout untouched).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dash import ALL, Input, Output, Patch, State, ctx as dash_ctx, dcc, html, no_update

from dashboard import figures, ids, ui
from dashboard.datasource import Datasource, Findings

TITLE = "Overview"
HEATMAP_WINDOW = 3600.0


@dataclass(frozen=True)
class Summary:
    gpus_total: int
    gpus_allocated: int
    gpus_idle: int
    gpus_down: int
    running: int
    pending: int
    pending_gangs: int
    gang_wait_max: float | None
    gang_wait_median: float | None
    flagged: int
    lost_hour: float | None  # None: unknown (no running job could be judged)
    lost_day: float | None
    lost_unknown: str = ""  # why the totals are unknown, or which jobs they leave out


def lost_unknown(f: Findings, running: int) -> tuple[bool, str]:
    """(totals unknown?, why / what they leave out): jobs judged insufficient_data have lost an
    unknown amount, and with no running job judged at all the total is unknown, not 0."""
    if not running:
        return False, ""
    if f.source == "none":
        return True, "no diagnosis runs here (no metric source): nothing is judged"
    if f.source != "diagnosis":  # the simulator's ground truth lists only the faulted jobs: the rest lost nothing
        return False, ""
    blind = sum(1 for v in f.verdicts if v.state == "insufficient_data")
    judged = len(f.verdicts) - blind
    if not judged:
        return True, (f"none of the {running:,} running jobs could be judged: the metric window lacks their GPU data"
                      if blind or not f.verdicts else "no running job has a verdict yet")
    return False, (f"{blind:,} running jobs not judged (insufficient data): their losses are unknown and not "
                   f"counted" if blind else "")


def lost_within(f: Findings, now: float, span: float) -> float:
    """GPU-hours lost in the last `span` seconds, pro rata over each stall's duration."""
    total = 0.0
    for v in f.verdicts:
        if not v.flagged or not v.gpu_hours_lost:
            continue
        dur = max(1.0, now - v.since) if v.since is not None else span
        total += v.gpu_hours_lost * min(1.0, span / dur)
    return total


def summarise(ds: Datasource) -> Summary | None:
    snap = ds.snapshot()
    if snap is None:
        return None
    now = ds.now()
    total = alloc = down = 0
    for n in snap.nodes:
        g = n.gpus_total or 0
        total += g
        if n.down or n.drain or n.state in ("FUTURE", "UNKNOWN", "POWERED_DOWN") or "NOT_RESPONDING" in n.state_flags:
            down += g - (n.gpus_allocated or 0)
        alloc += n.gpus_allocated or 0
    running = [j for j in snap.jobs if j.state == "RUNNING"]
    pending = [j for j in snap.jobs if j.state == "PENDING"]
    gangs = [j for j in pending if j.gang_size > 1]
    waits = [now - j.submit_time for j in gangs if j.submit_time is not None]
    f = ds.findings()
    unknown, why = lost_unknown(f, len(running))
    return Summary(total, alloc, max(0, total - alloc - down), down, len(running), len(pending), len(gangs),
                   max(waits) if waits else None, statistics.median(waits) if waits else None,
                   sum(1 for v in f.verdicts if v.flagged), None if unknown else lost_within(f, now, 3600.0),
                   None if unknown else lost_within(f, now, 86400.0), why)


def cards(ds: Datasource):
    s = summarise(ds)
    if s is None:
        return html.P("No scheduler data yet.", className="gw-muted")
    f = ds.findings()
    est = "estimated; " + f.source if f.source != "diagnosis" else "from the diagnosis"
    return html.Div([
        ui.card("GPUs allocated", f"{s.gpus_allocated:,}", f"of {s.gpus_total:,} ({s.running:,} running jobs)"),
        ui.card("GPUs idle", f"{s.gpus_idle:,}", "free on usable nodes"),
        ui.card("GPUs down", f"{s.gpus_down:,}", "on down or drained nodes"),
        ui.card("GPU-hours lost, last hour", ui.known_or_unknown(s.lost_hour, s.lost_unknown, 1),
                est + (f"; {s.lost_unknown}" if s.lost_unknown and s.lost_hour is not None else "")),
        ui.card("GPU-hours lost, last day", ui.known_or_unknown(s.lost_day, s.lost_unknown, 1),
                f"{s.flagged} flagged jobs now"),
        ui.card("Pending gang jobs", f"{s.pending_gangs:,}", f"longest wait {ui.fmt_dur(s.gang_wait_max)}, "
                f"median {ui.fmt_dur(s.gang_wait_median)}; {s.pending:,} pending in all"),
    ], className="gw-cards")


def incidents(ds: Datasource, ctx: ui.Ctx, limit: int = 20):
    f = ds.findings()
    now = ds.now()
    snap = ds.snapshot()
    names = {n.name for n in snap.nodes} if snap else set()
    rows = [[str(k), ui.state_badge(i.cause), ui.culprit_cell(ctx, i.culprit, names),
             ui.fmt_num(i.gpu_hours_lost), ui.fmt_dur(now - i.since if i.since else None),
             html.Span([x for n, j in enumerate(i.jobs[:10]) for x in ((" ",) if n else ()) + (ui.job_link(ctx, j),)]
                       + ([f" +{len(i.jobs) - 10} more"] if len(i.jobs) > 10 else []))]
            for k, i in enumerate(f.incidents[:limit], 1)]
    return ui.table(["#", "cause", "culprit", "GPU-h lost", "for", "jobs"], rows,
                    empty="No incidents: no running job is flagged.")


def flagged(ds: Datasource, ctx: ui.Ctx, limit: int = 50):
    f = ds.findings()
    snap = ds.snapshot()
    now = ds.now()
    jobs = {str(j.job_id): j for j in snap.jobs} if snap else {}
    rows = []
    for v in sorted((v for v in f.verdicts if v.flagged), key=lambda v: -(v.gpu_hours_lost or 0))[:limit]:
        j = jobs.get(v.jobid)
        rows.append([ui.job_link(ctx, v.jobid), j.name if j else "", j.user if j else "", ui.state_badge(v.state),
                     ui.culprit_cell(ctx, v.culprit, set(v.nodes)), str(v.gpus if v.gpus is not None else "—"),
                     ui.fmt_num(v.gpu_hours_lost),
                     ui.fmt_dur(now - v.since if v.since else None)])
    return ui.table(["job", "name", "user", "verdict", "culprit", "GPUs", "GPU-h lost", "for"], rows,
                    empty="No flagged jobs.")


def layout(ds: Datasource, ctx: ui.Ctx):
    f = ds.findings()
    src = f"Findings: {f.source}." + (" The diagnosis is not available here; these are the simulator's injected faults."
                                      if f.source == "simulator ground truth" else "")
    version = ds.status().version
    return html.Div([
        html.H1("Overview"),
        dcc.Store(id=ids.OV_VERSION, data=version),
        dcc.Store(id=ids.OV_HEATMAP_VERSION, data=None),
        html.Div(cards(ds), id=ids.OV_CARDS),
        ui.section("Incidents, by GPU-hours lost", html.Div(incidents(ds, ctx), id=ids.OV_INCIDENTS),
                   html.P(src, id=ids.OV_FINDINGS_SOURCE, className="gw-muted")),
        ui.section("GPU utilisation, node x time (last hour)",
                   html.Div(heatmap_preview(ds), id=ids.OV_HEATMAP_BOX),
                   note="Nodes sorted by their mean utilisation, lowest first; on large clusters each row "
                        "averages several nodes (its label names the first). Click a row to open that node."),
        ui.section("Flagged jobs", html.Div(flagged(ds, ctx), id=ids.OV_FLAGGED)),
    ])


def heatmap_preview(ds: Datasource):
    """The first view of the heatmap: the same data as an image, shown with the page (no plotly.js
    needed); `mount_heatmap` replaces it with the interactive figure once the page is up."""
    hm = ds.heatmap("gpu_util", HEATMAP_WINDOW)
    png = figures.heatmap_png(hm)
    if png is None:
        return html.P("No GPU utilisation series.", className="gw-muted")
    uri, unit = png
    return html.Div([html.Img(src=uri, className="gw-heatmap-preview", alt="GPU utilisation, node x time",
                              style={"height": f"{figures.heatmap_height(len(hm.rows))}px"}),
                     html.P(f"{ui.fmt_hm(float(hm.times[0]))} to {ui.fmt_hm(float(hm.times[-1]))} UTC, 0 to "
                            f"{'100 ' if unit == '%' else 'peak '}{unit}, {hm.total_nodes:,} nodes; loading the "
                            "interactive view...", className="gw-muted")], className="gw-heatmap-preview-box")


def mount_heatmap(ds: Datasource, theme):
    """The interactive heatmap (replacing the preview), drawn in the browser's theme, and what it shows."""
    theme = theme or "light"
    fig = figures.heatmap(ds.heatmap("gpu_util", HEATMAP_WINDOW), theme)
    graph = ui.graph(id={"type": ids.OV_HEATMAP_GRAPH, "index": 0}, figure=fig)
    return html.Div(graph, id=ids.OV_HEATMAP), {"v": ds.status().version, "theme": theme}


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.OV_HEATMAP_BOX, "children"), Output(ids.OV_HEATMAP_VERSION, "data", allow_duplicate=True),
                  Input(ids.OV_HEATMAP_BOX, "id"), State(ids.THEME, "data"), prevent_initial_call="initial_duplicate")
    def mount(_box, theme):
        return mount_heatmap(ds, theme)

    @app.callback(Output(ids.OV_CARDS, "children"), Output(ids.OV_INCIDENTS, "children"),
                  Output(ids.OV_FLAGGED, "children"), Output(ids.OV_VERSION, "data"),
                  Input(ids.REFRESH, "n_intervals"), State(ids.OV_VERSION, "data"), prevent_initial_call=True)
    def refresh(_n, version):
        return refresh_tables(ds, ctx, version)

    # The figure exists only once mounted (a refresh or a theme change can come first): a
    # pattern-matching output is an empty list until then, where a plain id would be an error.
    graphs = {"type": ids.OV_HEATMAP_GRAPH, "index": ALL}

    @app.callback(Output(graphs, "figure"), Output(ids.OV_HEATMAP_VERSION, "data"),
                  Input(ids.REFRESH, "n_intervals"), Input(ids.THEME, "data"), State(ids.OV_HEATMAP_VERSION, "data"),
                  State(graphs, "id"))
    def heatmap(_n, theme, drawn, present):
        if not present:
            return [], no_update
        fig, drawn = heatmap_update(ds, dash_ctx.triggered_id, theme, drawn)
        return [fig] * len(present), drawn

    @app.callback(Output(ids.NAV_URL, "pathname"), Input(graphs, "clickData"), prevent_initial_call=True)
    def open_node(clicks):
        return node_from_click(next((c for c in clicks or () if c), None), ctx)


def refresh_tables(ds: Datasource, ctx: ui.Ctx, version):
    now_version = ds.status().version
    if now_version == version:
        return no_update, no_update, no_update, no_update
    return cards(ds), incidents(ds, ctx), flagged(ds, ctx), now_version


def heatmap_update(ds: Datasource, trigger, theme, drawn):
    """Returns (figure or Patch or no_update, drawn). `drawn` ({"v": data version, "theme"}) says
    what the figure on screen shows. A refresh tick with new data patches only the trace's data
    (layout untouched); a theme change, or a figure drawn in another theme than the browser's (the
    toggle was clicked while the page loaded), gets a full figure; otherwise nothing is sent."""
    theme = theme or "light"
    now_version = ds.status().version
    state = {"v": now_version, "theme": theme}
    if drawn == state:
        return no_update, no_update
    if trigger == ids.REFRESH and isinstance(drawn, dict) and drawn.get("theme") == theme:
        hm = ds.heatmap("gpu_util", HEATMAP_WINDOW)
        if hm is None:
            return no_update, no_update
        d = figures.heatmap_data(hm)
        patch = Patch()
        for key in ("z", "x", "y"):
            patch["data"][0][key] = d[key]
        return patch, state
    return figures.heatmap(ds.heatmap("gpu_util", HEATMAP_WINDOW), theme), state


def node_from_click(click, ctx: ui.Ctx):
    try:
        label = click["points"][0]["y"]
    except (TypeError, KeyError, IndexError):
        return no_update
    return ctx.node(str(label).split(" +")[0])
