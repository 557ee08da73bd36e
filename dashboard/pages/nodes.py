"""Nodes (`/nodes`): every node's state, GPUs, CPUs, partitions and jobs; search and filter by state.

Server-side paging like the jobs table, so 4,096 nodes cost one page of rows per refresh."""

from __future__ import annotations

from collections import Counter

from dash import Input, Output, dash_table, dcc, html

from dashboard import ids, ui
from dashboard.datasource import Datasource

TITLE = "Nodes"
PAGE_SIZE = 50


def jobs_by_node(snap) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j in snap.jobs:
        if j.state == "RUNNING":
            for n in j.nodes:
                out.setdefault(n, []).append(j.job_id)
    return out


def all_rows(ds: Datasource, ctx: ui.Ctx, search: str = "", state: str = "all") -> list[dict]:
    snap = ds.snapshot()
    if snap is None:
        return []
    on = jobs_by_node(snap)
    q = (search or "").strip().lower()
    rows = []
    for n in snap.nodes:
        label = n.state_label
        if state != "all" and label != state:
            continue
        if q and q not in n.name.lower() and q not in n.reason.lower():
            continue
        jobs = on.get(n.name, [])
        rows.append({"name": f"[{ui.markdown_escape(n.name)}]({ctx.node(n.name)})", "state": label,
                     "gpus": f"{n.gpus_allocated or 0}/{n.gpus_total or 0}",
                     "cpus": f"{n.cpus_allocated or 0}/{n.cpus_total or 0}", "partitions": ",".join(n.partitions),
                     # job ids are integers: safe markdown link text
                     "jobs": " ".join(f"[{j}]({ctx.job(j)})" for j in jobs[:6]) + (f" +{len(jobs) - 6}" if len(jobs) > 6 else ""),
                     "reason": n.reason})
    return rows


def counts(ds: Datasource):
    snap = ds.snapshot()
    if snap is None:
        return html.P("No scheduler data yet.", className="gw-muted")
    c = Counter(n.state_label for n in snap.nodes)
    return html.Div([ui.card(k, f"{v:,}") for k, v in sorted(c.items(), key=lambda kv: -kv[1])], className="gw-cards")


def layout(ds: Datasource, ctx: ui.Ctx):
    snap = ds.snapshot()
    states = sorted({n.state_label for n in snap.nodes}) if snap else []
    return html.Div([
        html.H1("Nodes"),
        html.Div(counts(ds), id=ids.NODES_COUNTS),
        html.Div([dcc.Input(id=ids.NODES_SEARCH, type="search", placeholder="search node name or reason",
                            debounce=True, className="gw-search"),
                  dcc.Dropdown(id=ids.NODES_STATE, value="all", clearable=False, className="gw-dropdown",
                               options=[{"label": "all states", "value": "all"}] + [{"label": s, "value": s} for s in states])],
                 className="gw-toolbar"),
        dash_table.DataTable(
            id=ids.NODES_TABLE, columns=[{"id": "name", "name": "node", "presentation": "markdown"}] +
            [{"id": c, "name": n, **({"presentation": "markdown"} if c == "jobs" else {})}
             for c, n in (("state", "state"), ("gpus", "GPUs alloc/total"), ("cpus", "CPUs alloc/total"),
                          ("partitions", "partitions"), ("jobs", "running jobs"), ("reason", "reason"))],
            page_action="custom", page_current=0, page_size=PAGE_SIZE, markdown_options={"html": False, "link_target": "_self"},
            style_table={"overflowX": "auto"}, style_cell={"textAlign": "left", "fontSize": "13px"},
            css=[{"selector": "p", "rule": "margin: 0"}]),
    ])


def page(ds, ctx, search, state, page_current, page_size):
    rows = all_rows(ds, ctx, search, state)
    size = page_size or PAGE_SIZE
    pages = max(1, -(-len(rows) // size))
    cur = min(page_current or 0, pages - 1)
    return rows[cur * size:(cur + 1) * size], pages


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.NODES_TABLE, "data"), Output(ids.NODES_TABLE, "page_count"),
                  Input(ids.NODES_SEARCH, "value"), Input(ids.NODES_STATE, "value"),
                  Input(ids.NODES_TABLE, "page_current"), Input(ids.NODES_TABLE, "page_size"),
                  Input(ids.REFRESH, "n_intervals"))
    def update(search, state, page_current, page_size, _n):
        return page(ds, ctx, search, state, page_current, page_size)
