"""Node (`/nodes/<name>`): state and reason, GPUs, leaf switch, the jobs on it, and its GPUs',
InfiniBand rails' and Lustre client's series over the last hour."""

from __future__ import annotations

from dash import Input, Output, State, dcc, html

from dashboard import figures, ids, ui
from dashboard.datasource import Datasource

TITLE = "Node"
SIGNALS = ("gpu_util", "gpu_sm", "gpu_power", "gpu_temp", "ib_tx", "ib_wait", "io_read", "io_pressure")


def layout(ds: Datasource, ctx: ui.Ctx, name: str = ""):
    snap = ds.snapshot()
    n = snap.node(name) if snap else None
    if n is None:
        return html.Div([html.H1(f"Node {name}"), html.P("The scheduler does not list this node.")])
    leaf_of = getattr(ds, "leaf_of", None)
    facts = [("state", n.state_label + (f" ({', '.join(n.state_flags)})" if n.state_flags else "")),
             ("reason", n.reason or "—"), ("reason set", ui.fmt_time(n.reason_time) if n.reason else "—"),
             ("GPUs allocated", f"{n.gpus_allocated or 0} of {n.gpus_total or 0} ({', '.join(n.gpu_types) or '—'})"),
             ("CPUs allocated", f"{n.cpus_allocated or 0} of {n.cpus_total or 0}"),
             ("memory", f"{(n.memory_total_bytes or 0) / 2**30:,.0f} GiB"), ("partitions", ", ".join(n.partitions)),
             ("features", ", ".join(n.active_features or n.features) or "—")]
    if leaf_of:
        facts.append(("leaf switch", leaf_of(name) or "—"))
    f = ds.findings().by_job()
    rows = []
    for j in snap.jobs:
        if j.state == "RUNNING" and name in j.nodes:
            a = next((a for a in j.allocations if a.node == name), None)
            v = f.get(str(j.job_id))
            rows.append([ui.job_link(ctx, j.job_id), j.name, j.user, str(j.gang_size),
                         ", ".join(map(str, a.gpu_indices)) if a and a.gpu_indices else "—",
                         ui.state_badge(v.state) if v else "not judged"])
    return html.Div([
        html.H1(f"Node {n.name}"), dcc.Store(id=ids.NODE_NAME, data=n.name),
        html.Dl([x for k, v in facts for x in (html.Dt(k), html.Dd(v))], className="gw-facts", id=ids.NODE_SUMMARY),
        ui.section("Jobs on this node", html.Div(ui.table(["job", "name", "user", "nodes", "GPUs here", "verdict"], rows,
                                                          empty="No running job."), id=ids.NODE_JOBS)),
        ui.section("Last hour", dcc.Loading(html.Div(id=ids.NODE_GRAPHS, className="gw-grid2"))),
    ])


def graphs(ds: Datasource, name: str, theme):
    ns = ds.node_series(name, SIGNALS)
    if ns is None:
        return html.P("No metrics for this node.", className="gw-muted")
    return [dcc.Graph(figure=figures.node_lines(ns, s, theme), config={"displaylogo": False}) for s in SIGNALS
            if s in ns.values]


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.NODE_GRAPHS, "children"), Input(ids.REFRESH, "n_intervals"), Input(ids.THEME, "data"),
                  State(ids.NODE_NAME, "data"))
    def update(_n, theme, name):
        return graphs(ds, name, theme)
