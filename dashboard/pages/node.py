"""Node (`/nodes/<name>`): state and reason, GPUs (now, with the job on each and their NVLink/NUMA
topology where the agent reports it), InfiniBand or RoCE ports (state, rate, traffic, congestion in
the fabric's own signal, errors),
filesystems and disks where the metric source has them ("unknown" otherwise, never 0), leaf
switch, the jobs on it, and its GPUs', rails' (transmit wait, or RoCE's ECN+CNP and PFC pause)
and Lustre client's series over the last hour."""

from __future__ import annotations

from dash import Input, Output, State, dcc, html

from dashboard import figures, ids, ui
from dashboard.datasource import Datasource
from dashboard.pages.network import congestion_column

TITLE = "Node"
# a source has either fabric's congestion signals, not both: graphs are drawn for the ones it has
SIGNALS = ("gpu_util", "gpu_sm", "gpu_power", "gpu_temp", "ib_tx", "ib_wait", "roce_cong", "eth_pause", "eth_storm",
           "io_read", "io_pressure")


def layout(ds: Datasource, ctx: ui.Ctx, name: str = ""):
    snap = ds.snapshot()
    n = snap.node(name) if snap else None
    if n is None:
        return html.Div([html.H1(f"Node {name}"), html.P("The scheduler does not list this node.")])
    facts = [("state", n.state_label + (f" ({', '.join(n.state_flags)})" if n.state_flags else "")),
             ("reason", n.reason or "—"), ("reason set", ui.fmt_time(n.reason_time) if n.reason else "—"),
             ("GPUs allocated", f"{n.gpus_allocated or 0} of {n.gpus_total or 0} ({', '.join(n.gpu_types) or '—'})"),
             ("CPUs allocated", f"{n.cpus_allocated or 0} of {n.cpus_total or 0}"),
             ("memory", f"{(n.memory_total_bytes or 0) / 2**30:,.0f} GiB"), ("partitions", ", ".join(n.partitions)),
             ("features", ", ".join(n.active_features or n.features) or "—")]
    facts.append(("leaf switch", ds.leaf_of(name) or ui.UNKNOWN))
    f = ds.findings().by_job()
    rows = []
    for j in snap.jobs:
        if j.state == "RUNNING" and name in j.nodes:
            a = next((a for a in j.allocations if a.node == name), None)
            v = f.get(str(j.job_id))
            rows.append([ui.job_link(ctx, j.job_id), j.name, j.user, str(j.gang_size),
                         ", ".join(map(str, a.gpu_indices)) if a and a.gpu_indices else "—",
                         ui.state_badge(v.state) if v else "not judged"])
    gpu_job = {(a.node, g): j.job_id for j in snap.jobs if j.state == "RUNNING" for a in j.allocations
               if a.node == name for g in a.gpu_indices}
    return html.Div([
        html.H1(f"Node {n.name}"), dcc.Store(id=ids.NODE_NAME, data=n.name),
        html.Dl([x for k, v in facts for x in (html.Dt(k), html.Dd(v))], className="gw-facts", id=ids.NODE_SUMMARY),
        ui.section("Jobs on this node", html.Div(ui.table(["job", "name", "user", "nodes", "GPUs here", "verdict"], rows,
                                                          empty="No running job."), id=ids.NODE_JOBS)),
        html.Div(inventory(ds, ctx, name, gpu_job), id=ids.NODE_INVENTORY),
        ui.section("Last hour", dcc.Loading(html.Div(id=ids.NODE_GRAPHS, className="gw-grid2"))),
    ])


def inventory(ds: Datasource, ctx: ui.Ctx, name: str, gpu_job: dict):
    """GPUs, InfiniBand ports, filesystems and disks now, as the metric source reports them."""
    inv = ds.node_inventory(name)
    if inv is None:
        return ui.section("Hardware", html.P("No metric source reports this node: GPUs, ports, filesystems and "
                                             "disks are unknown.", className="gw-muted"))
    topo = inv.topology
    gpu_rows = [[str(g.index), ui.job_link(ctx, gpu_job[name, g.index]) if (name, g.index) in gpu_job else "idle",
                 ui.fmt_known(None if g.util is None else g.util * 100, 0, "%"), ui.fmt_known(g.power_w, 0, "W"),
                 ui.fmt_known(g.temp_c, 0, "°C"),
                 ", ".join(str(b if a == g.index else a) for a, b in sorted(topo.nvlink_peers) if g.index in (a, b))
                 if topo.nvlink_peers is not None else ui.UNKNOWN,
                 str(topo.numa[g.index]) if topo.numa is not None and g.index in topo.numa else ui.UNKNOWN]
                for g in inv.gpus or ()]
    col, unit = congestion_column(inv.congestion)
    port_rows = [[p.device, p.switch or ui.UNKNOWN, ui.fmt_state(p.up), ui.fmt_si(p.rate_bytes, "B/s"),
                  ui.fmt_si(p.tx_bps, "B/s"), ui.fmt_si(p.wait_per_s, unit), ui.fmt_known(p.symbol_errors, 0),
                  ui.fmt_known(p.link_downed, 0), ui.fmt_known(p.errors_recent, 0)] for p in inv.ports or ()]
    other_col, other_unit = congestion_column(inv.other_congestion) if inv.other_congestion else ("congestion", "")
    other_rows = [[p.device, p.link_layer or ui.UNKNOWN, ui.fmt_si(p.tx_bps, "B/s"), ui.fmt_si(p.wait_per_s, other_unit)]
                  for p in inv.other_ports]
    fs_rows = [[m.fs, m.kind, str(m.targets), ui.fmt_known(m.connected, 0), ui.fmt_si(m.read_bps, "B/s"),
                ui.fmt_si(m.write_bps, "B/s")] for m in inv.filesystems or ()]
    disk_rows = [[d, ui.fmt_si(r, "B/s"), ui.fmt_si(w, "B/s")] for d, r, w in inv.disks or ()]
    topo_note = ("" if topo.known else "GPU topology unknown: the metric source has no gangwatch_gpu_nvlink_peer_info "
                 "or gangwatch_gpu_topology_info series for this node.")
    return html.Div([x for x in [
        ui.section("GPUs now", ui.table(["GPU", "job", "utilisation", "power", "temperature", "NVLink peers", "NUMA node"],
                                        gpu_rows, empty="GPUs unknown: no GPU series for this node.", cid=ids.NODE_GPUS),
                   note=topo_note),
        ui.section("RoCE ports" if inv.congestion == "roce_cong" else "InfiniBand ports",
                   ui.table(["port", "leaf switch", "state", "link rate", "transmit", col,
                             "symbol errors", "link downed", "new errors (last interval)"],
                            port_rows, empty="Ports unknown: no InfiniBand or RoCE series for this node.",
                            cid=ids.NODE_PORTS)),
        ui.section("Other RDMA ports", ui.table(["port", "link layer", "transmit", other_col], other_rows),
                   note="Not the collectives' fabric: storage or front-end NICs, on other switches; left out of the "
                        "leaf switches' figures and of the diagnosis.") if other_rows else None,
        ui.section("Filesystems", ui.table(["filesystem", "type", "targets", "targets connected", "read", "write"], fs_rows,
                                           empty="Filesystems unknown: no filesystem client series for this node.",
                                           cid=ids.NODE_FILESYSTEMS)),
        ui.section("Disks", ui.table(["device", "read", "write"], disk_rows,
                                     empty="Disks unknown: no disk series for this node.", cid=ids.NODE_DISKS)),
        html.P(inv.note, className="gw-muted") if inv.note else None,
    ] if x is not None])


def graphs(ds: Datasource, name: str, theme):
    ns = ds.node_series(name, SIGNALS)
    if ns is None:
        return html.P("No metrics for this node.", className="gw-muted")
    return [ui.graph(figure=figures.node_lines(ns, s, theme)) for s in SIGNALS
            if s in ns.values]


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.NODE_GRAPHS, "children"), Input(ids.REFRESH, "n_intervals"), Input(ids.THEME, "data"),
                  State(ids.NODE_NAME, "data"))
    def update(_n, theme, name):
        return graphs(ds, name, theme)
