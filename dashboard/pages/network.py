"""Network (`/network`): per leaf switch now (ports, ports down, transmit throughput, congestion,
new errors), the ports worth a look (most congested, down, with new errors), the congestion per
leaf switch over the last hour (summed over the switch's nodes), and the gangs spanning the
congested switches. Congestion is the fabric's own signal: InfiniBand's transmit wait, or on RoCE
(which counts none) ECN-marked packets + CNPs, named as such. "unknown" where the source has no
series. Linked only where a metric source provides per-port series."""

from __future__ import annotations

import numpy as np
from dash import html

from dashboard import figures, ids, ui
from dashboard.analysis.thresholds import DEFAULT as TH
from dashboard.datasource import SIGNALS, Datasource, nanmean

TITLE = "Network"
# congestion signal -> (table column, what the heatmap's numbers count)
COLUMNS = {"ib_wait": ("transmit wait", "Transmit wait counts the ticks a port had data but no credits: congestion."),
           "roce_cong": ("ECN+CNP", "ECN-marked packets received plus congestion notification packets handled per "
                         "second (DCQCN): switch queues past their ECN threshold. RoCE ports count no transmit wait.")}


UNAVAILABLE = ("No InfiniBand or RoCE source reports here: no agent's infiniband or roce collector appears in the metric source "
               "(or serve runs without one), or no node maps to a leaf switch, so links, congestion and errors are "
               "unknown.")


def congestion_column(signal: str) -> tuple[str, str]:
    """(table column, unit) of a congestion signal (records.CONGESTION)."""
    return COLUMNS.get(signal, COLUMNS["ib_wait"])[0], SIGNALS[signal].unit


def leaf_heatmap(ds: Datasource, theme):
    hm = ds.leaf_series()
    return figures.heatmap(hm, theme, SIGNALS[hm.signal].label if hm else "", colorscale="Inferno")


def available(ds: Datasource) -> bool:
    return ds.leaf_series(60.0) is not None


def congested(ds: Datasource) -> list[str]:
    """Leaf switches whose congestion of the last minute is `wait_ratio` times the median over
    leaves, and those the findings name as a network stall's culprit: with half the leaves hot at
    once the median is half a hot one's, while each stalled gang's verdict still names its leaf
    (and never a leaf its gang only spans: those wait for the hot one)."""
    hm = ds.leaf_series(300.0)
    if hm is None or not hm.z.size:
        return []
    recent = nanmean(hm.z[:, -4:], axis=1)
    med = float(np.nanmedian(recent)) or 1.0
    named = {v.culprit for v in ds.findings().verdicts
             if v.state == "stalled_network" and v.culprit_kind == "leaf_switch"}
    return [leaf for leaf, v in zip(hm.rows, recent) if v > TH.wait_ratio * med or leaf in named]


def gangs(ds: Datasource, ctx: ui.Ctx):
    hot = set(congested(ds))
    snap = ds.snapshot()
    if not hot or snap is None:
        return html.P("No leaf switch is congested now." if snap is not None else "No data.", className="gw-muted")
    rows = []
    for j in snap.jobs:
        if j.state == "RUNNING" and j.gang_size > 1:
            leaves = {ds.leaf_of(n) for n in j.nodes}
            if leaves & hot:
                rows.append([ui.job_link(ctx, j.job_id), j.name, j.user, str(j.gang_size), ", ".join(sorted(leaves & hot)),
                             str(len(leaves))])
    return html.Div([html.P(f"Congested now: {', '.join(sorted(hot))}."),
                     ui.table(["job", "name", "user", "nodes", "congested leaves", "leaves spanned"], rows,
                              empty="No gang spans the congested switches.")])


def switches(ds: Datasource, ctx: ui.Ctx):
    net = ds.network()
    if net is None:
        return html.P("Switches and ports unknown: no per-port series.", className="gw-muted")
    col, unit = congestion_column(net.congestion)
    waits = [sw.wait_per_s for sw in net.switches if sw.wait_per_s is not None]
    med = (float(np.median(waits)) or 1.0) if waits else None
    sw_rows = []
    for sw in sorted(net.switches, key=lambda sw: -(sw.wait_per_s or 0.0)):
        hot = med is not None and sw.wait_per_s is not None and sw.wait_per_s > TH.wait_ratio * med
        sw_rows.append([sw.switch, str(sw.nodes), str(sw.ports), ui.fmt_known(sw.ports_down, 0),
                        ui.fmt_si(sw.tx_bps, "B/s"),
                        html.Span(ui.fmt_si(sw.wait_per_s, unit) + (" (congested)" if hot else ""),
                                  className="gw-sev-error" if hot else ""), ui.fmt_known(sw.errors_recent, 0)])
    port_rows = [[ui.node_link(ctx, p.node), p.device, p.switch or ui.UNKNOWN, ui.fmt_state(p.up),
                  ui.fmt_si(p.tx_bps, "B/s"), ui.fmt_si(p.wait_per_s, unit), ui.fmt_known(p.symbol_errors, 0),
                  ui.fmt_known(p.link_downed, 0), ui.fmt_known(p.errors_recent, 0)] for p in net.ports]
    return html.Div([
        ui.section("Leaf switches now", ui.table(["switch", "nodes", "ports", "ports down", "transmit", col,
                                                  "new errors (last interval)"], sw_rows, cid=ids.NETWORK_SWITCHES),
                   note=net.note),
        ui.section(f"Ports worth a look (of {net.total_ports:,}): most congested, down, or with new errors",
                   ui.table(["node", "port", "leaf switch", "state", "transmit", col, "symbol errors",
                             "link downed", "new errors"], port_rows, empty="No port data.", cid=ids.NETWORK_PORTS)),
    ])


def layout(ds: Datasource, ctx: ui.Ctx):
    hm = ds.leaf_series(60.0)
    title, note = ((SIGNALS[hm.signal].label, COLUMNS[hm.signal][1]) if hm is not None and hm.signal in COLUMNS else
                   ("Congestion", "Unknown: the metric source has neither InfiniBand transmit wait nor RoCE ECN/CNP series."))
    return html.Div([html.H1("Network"),
                     html.Div(switches(ds, ctx), id=ids.NETWORK_TABLES),
                     ui.section(f"{title} per leaf switch (last hour)", ui.graph(id=ids.NETWORK_HEATMAP), note=note),
                     ui.section("Gangs spanning congested switches", html.Div(gangs(ds, ctx), id=ids.NETWORK_GANGS))])


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    ui.refresh_on_tick(app, {ids.NETWORK_HEATMAP: lambda theme: leaf_heatmap(ds, theme)},
                       {ids.NETWORK_TABLES: lambda: switches(ds, ctx), ids.NETWORK_GANGS: lambda: gangs(ds, ctx)})
