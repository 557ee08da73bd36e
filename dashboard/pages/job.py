"""Job (`/jobs/<id>`): for a running job, its verdict, node x time heatmaps of GPU utilisation,
fabric (InfiniBand or RoCE) and Lustre traffic with the stall shaded, the evidence, culprit and GPU-hours lost, and
its placement; for a pending job, why it waits (the backfill planner's reasons, expected start,
what-if, priority)."""

from __future__ import annotations

from dash import Input, Output, State, dcc, html

from dashboard import figures, ids, probe_button, ui
from dashboard.datasource import Datasource
from dashboard.datasource.records import SIGNALS
from dashboard.units import fmt_value

TITLE = "Job"
HEATMAPS = (("gpu_util", "GPU utilisation (mean over the job's GPUs on each node)"),
            ("gpu_sm", "SM activity (a hang or a network wait keeps utilisation up but SMs idle)"),
            ("ib_tx", "{label} per node"), ("io_read", "Lustre reads per node"))  # {label}: the fabric's name


def _find(ds: Datasource, jobid: str):
    snap = ds.snapshot()
    if snap is None or not str(jobid).isdigit():
        return None
    return snap.job(int(jobid))


def summary(j, now: float):
    running = j.state == "RUNNING"
    facts = [("user", j.user), ("account", j.account), ("partition", j.partition), ("state", j.state),
             ("nodes", str(j.gang_size)), ("GPUs", str(j.gpus if j.gpus is not None else "—")),
             ("submitted", ui.fmt_time(j.submit_time)),
             ("started" if running else "expected start (Slurm)", ui.fmt_time(j.start_time)),
             ("time limit", "unlimited" if j.time_limit_infinite else ui.fmt_dur(j.time_limit_seconds)),
             ("elapsed" if running else "waiting", ui.fmt_dur(now - (j.start_time if running else j.submit_time)
                                                                if (j.start_time if running else j.submit_time) else None))]
    return html.Dl([x for k, v in facts for x in (html.Dt(k), html.Dd(v or "—"))], className="gw-facts")


def verdict_block(v, now: float):
    if v is None:
        return html.P("Not judged: the diagnosis has no verdict on this job (it may be too young, or no "
                      "diagnosis runs here).", className="gw-muted")
    rows = [("verdict", ui.state_badge(v.state)), ("culprit", v.culprit or "—"),
            ("since", f"{ui.fmt_time(v.since)} ({ui.fmt_dur(now - v.since) if v.since else '—'})"),
            ("GPU-hours lost", ui.known_or_unknown(v.lost, v.unknown_why)),
            ("confidence", "—" if v.confidence is None else f"{v.confidence:.0%}")]
    if v.reason:
        rows.append(("why", v.reason))
    return html.Dl([x for k, val in rows for x in (html.Dt(k), html.Dd(val))], className="gw-facts gw-verdict")


def evidence(v, ctx: ui.Ctx):
    if v is None or not v.evidence:
        return ui.table([], [], empty="No evidence rows.")
    rows = [[e.signal, ui.node_link(ctx, e.node) if e.node else "—",
             *(fmt_value(e.signal, x) for x in (e.value, e.baseline, e.threshold))] for e in v.evidence]
    return ui.table(["signal", "node", "value", "baseline", "threshold"], rows)


def placement(ds: Datasource, j, ctx: ui.Ctx):
    allocs = {a.node: a for a in j.allocations}
    rows, leaves, known = [], set(), 0
    for n in j.nodes:
        a = allocs.get(n)
        leaf = ds.leaf_of(n)
        leaves.add(leaf)
        gpus = a.gpu_indices if a else ()
        topo = ds.gpu_topology(n)
        known += topo.known
        rows.append([ui.node_link(ctx, n), leaf or ui.UNKNOWN, ", ".join(map(str, gpus)) if gpus else ui.UNKNOWN,
                     topo.describe(gpus) if gpus else ui.UNKNOWN, str(a.cpus) if a and a.cpus else ui.UNKNOWN])
    mapped = leaves - {""}
    if not mapped:  # no topology plugin, topology.conf or switch labels: unknown, not "0 switches"
        note = (f"{len(j.nodes)} nodes; leaf switches unknown: no topology (Slurm topology/tree, "
                "--slurm.topology-file or switch labels) maps these nodes.")
    else:
        unmapped = sum(1 for r in rows if r[1] == ui.UNKNOWN)
        note = f"{len(j.nodes)} nodes on {len(mapped)} leaf switch(es)" + (f" ({unmapped} unmapped)." if unmapped else ".")
    if known < len(j.nodes):
        note += (" GPU topology unknown" + (f" on {len(j.nodes) - known} of {len(j.nodes)} nodes" if known else "")
                 + ": the metric source has no gangwatch_gpu_nvlink_peer_info / gangwatch_gpu_topology_info series.")
    v = ds.findings().verdict(str(j.job_id))
    found = ui.table(["finding", "node", "detail", "expected cost"],
                     [[p.kind.replace("_", " "), ui.node_link(ctx, p.node) if p.node else "—", p.detail, p.expected_cost]
                      for p in (v.placement if v else ())], empty="No placement findings.")
    return html.Div([html.P(note, className="gw-muted"),
                     ui.table(["node", "leaf switch", "GPUs", "GPU topology (NVLink, NUMA)", "CPUs"], rows,
                              empty="No nodes allocated."),
                     html.H4("Placement findings"), found])


def why_block(ds: Datasource, j):
    plan = ds.backfill()
    if plan is None:
        return html.P("No backfill plan (no scheduler snapshot, or the planner failed).", className="gw-muted")
    try:
        w = plan.why(str(j.job_id))
    except KeyError:
        return html.P("The planner has no entry for this job.", className="gw-muted")
    items = [html.Li([html.Strong(r.code + ": "), r.message], className=f"gw-sev-{r.severity}") for r in w.reasons]
    facts = [("state in the plan", w.state), ("rank in its partition", "— (can never run)" if w.rank is None else str(w.rank)),
             ("Slurm's reason", ui.why_field(w, "slurm_reason") or "—"),
             ("expected start (gangwatch)", ui.fmt_time(w.expected_start)),
             ("expected start (Slurm)", ui.fmt_time(ui.why_field(w, "slurm_expected_start"))),
             ("priority", ui.fmt_num(ui.why_field(w, "priority"), 0)),
             ("dependency", f"{ui.why_field(w, 'dependency', '')} {ui.why_field(w, 'dependency_text', '')}".strip())]
    factors = ui.why_field(w, "priority_factors") or {}
    if factors:
        facts.append(("priority factors", ui.priority_terms(factors, ui.why_field(w, "priority"))))
    if w.what_if is not None:
        facts.append(("what if", w.what_if.message))
    return html.Div([html.Ul(items, className="gw-reasons"),
                     html.Dl([x for k, v in facts for x in (html.Dt(k), html.Dd(v))], className="gw-facts")])


def layout(ds: Datasource, ctx: ui.Ctx, jobid: str = ""):
    j = _find(ds, jobid)
    if j is None:
        return html.Div([html.H1(f"Job {jobid}"), html.P("The scheduler does not list this job (it may have ended "
                                                          "more than a few minutes ago).")])
    now = ds.now()
    v = ds.findings().verdict(str(j.job_id))
    body = [html.H1([f"Job {j.display_id}: ", html.Span(j.name, className="gw-jobname")]),
            dcc.Store(id=ids.JOB_ID, data=str(j.job_id)), html.Div(summary(j, now), id=ids.JOB_SUMMARY)]
    if j.state == "RUNNING":
        body += [ui.section("Verdict", html.Div(verdict_block(v, now), id=ids.JOB_VERDICT)),
                 ui.section("Node x time", dcc.Loading(html.Div(id=ids.JOB_HEATMAPS)),
                            note="The stall, when there is one, is shaded."),
                 ui.section("Evidence", html.Div(evidence(v, ctx), id=ids.JOB_EVIDENCE), probe_button.block(j)),
                 ui.section("Placement", html.Div(placement(ds, j, ctx), id=ids.JOB_PLACEMENT))]
    elif j.state == "PENDING":
        body.append(ui.section("Why is it waiting", html.Div(why_block(ds, j), id=ids.JOB_WHY)))
    return html.Div(body)


def heatmaps(ds: Datasource, jobid: str, theme):
    v = ds.findings().verdict(str(jobid))
    shade = [(v.since, ds.now())] if v is not None and v.flagged and v.since else []
    out = []
    for signal, title in HEATMAPS:
        hm = ds.job_series(jobid, signal)
        if hm is None:
            continue
        out.append(ui.graph(figure=figures.heatmap(hm, theme, title.format(label=hm.label or SIGNALS[signal].label), shade)))
    return out or html.P("No metrics for this job's nodes.", className="gw-muted")


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.JOB_HEATMAPS, "children"), Input(ids.REFRESH, "n_intervals"), Input(ids.THEME, "data"),
                  State(ids.JOB_ID, "data"))
    def update(_n, theme, jobid):
        return heatmaps(ds, jobid, theme)
