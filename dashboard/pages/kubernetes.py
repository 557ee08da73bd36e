"""Kubernetes (`/kubernetes`): gangs of both schedulers side by side, and the Kubernetes queues.

A scheduler selector (all, Slurm, Kubernetes) filters one table of gangs: scheduler, gang, queue,
state, GPUs, size, position and why it waits in plain words (the kube-exporter's `why`). Below, each
Volcano queue and Kueue ClusterQueue with its quota against use per resource (and flavor). Shown
when serve reads a kube-exporter (`--kube-exporter`); the data come from dashboard/kube_feed.py."""

from __future__ import annotations

from dash import Input, Output, dcc, html

from collectors.kube.quantity import format_amount
from dashboard import ids, ui
from dashboard.datasource import Datasource
from dashboard.kube_feed import is_kube

TITLE = "Kubernetes"
PAGE_SIZE = 200
CHOICES = (("all", "all schedulers"), ("slurm", "Slurm"), ("kubernetes", "Kubernetes"))


def available(ds: Datasource) -> bool:
    return ds.kube_feed is not None


def _amount(resource: str, v) -> str:
    """Memory in GiB, counts as counts; "—" where the queue sets nothing (no limit, not 0)."""
    return "—" if not isinstance(v, (int, float)) else format_amount(resource, float(v))


def gang_rows(ds: Datasource, ctx: ui.Ctx, choice: str) -> list[list]:
    snap = ds.snapshot()
    if snap is None:
        return []
    feed = ds.kube_feed
    gangs = {g.get("job_id"): g for g in ((feed.view() if feed else {}).get("gangs") or []) if isinstance(g, dict)}
    rows = []
    order = {"RUNNING": 0, "PENDING": 1}
    for j in sorted(snap.jobs, key=lambda j: (order.get(j.state, 2), j.partition, j.job_id)):
        kube = is_kube(j)
        if (choice == "slurm" and kube) or (choice == "kubernetes" and not kube):
            continue
        if j.state not in ("RUNNING", "PENDING") or (j.gang_size < 2 and not kube):
            continue
        g = gangs.get(j.job_id, {})
        why = list(g.get("why") or ([] if j.state == "RUNNING" else [f"Slurm: {j.reason}"]))
        pos = f"{g['position']} of {g.get('queue_pending')}" if g.get("position") else "—"
        rows.append([j.flags[0] if kube else "slurm", ui.job_link(ctx, j.job_id), j.name, j.partition,
                     j.state + (" (partial)" if "PARTIAL" in j.state_flags else ""),
                     "—" if j.gpus is None else str(j.gpus), str(j.gang_size), pos,
                     html.Ul([html.Li(w) for w in why[:4]], className="gw-why") if why else ""])
        if len(rows) >= PAGE_SIZE:
            break
    return rows


def queue_blocks(ds: Datasource) -> list:
    feed = ds.kube_feed
    view = feed.view() if feed else {}
    queues = view.get("queues") or []
    flavors = view.get("flavors") if isinstance(view.get("flavors"), dict) else {}
    out = []
    for q in queues:
        if not isinstance(q, dict):
            continue
        kind = "Volcano queue" if q.get("kind") == "volcano-queue" else "Kueue ClusterQueue"
        head = f"{kind} {q.get('name')}: {q.get('state') or 'state unknown'}; {q.get('pending', 0)} pending, {q.get('running', 0)} running"
        if q.get("cohort"):
            head += f"; cohort {q['cohort']}"
        rows = [[str(r.get("resource", "")), r.get("flavor") or "—"]
                + [_amount(str(r.get("resource", "")), r.get(k)) for k in ("quota", "reserved", "used", "deserved")]
                for r in q.get("rows") or [] if isinstance(r, dict)]
        local = ", ".join(q.get("local_queues") or [])
        used_flavors = sorted({str(r.get("flavor")) for r in q.get("rows") or [] if isinstance(r, dict) and r.get("flavor")})
        selects = "; ".join(f"{f}: " + (", ".join(f"{k}={v}" for k, v in sorted((flavors.get(f) or {}).items()))
                                          or "any node") for f in used_flavors if f in flavors)
        out.append(html.Div([html.H3(head), html.P(f"LocalQueues: {local}", className="gw-muted") if local else None,
                             html.P(f"Flavors select nodes by label: {selects}", className="gw-muted") if selects else None,
                             ui.table(["resource", "flavor", "quota (capability / nominal)", "reserved", "used", "deserved"],
                                      rows, empty="No quota set: the queue limits nothing.")], className="gw-partition"))
    return out


def content(ds: Datasource, ctx: ui.Ctx, choice: str):
    feed = ds.kube_feed
    problems = [f"{k}: {v.get('error')}" for k, v in ((feed.view() if feed else {}).get("resources") or {}).items()
                if isinstance(v, dict) and not v.get("ok")]
    return html.Div([
        ui.section("Gangs", ui.table(["scheduler", "job", "name", "queue", "state", "GPUs", "size", "position", "why"],
                                     gang_rows(ds, ctx, choice), empty="No running or pending gang.", cid=ids.KUBE_GANGS)),
        ui.section("Kubernetes queues: quota against use", *(queue_blocks(ds) or [html.P("No Volcano queue or Kueue ClusterQueue read.",
                                                                                         className="gw-muted")])),
        ui.section("Not read", html.Ul([html.Li(p) for p in problems])) if problems else None,
    ])


def layout(ds: Datasource, ctx: ui.Ctx):
    return html.Div([
        html.H1("Schedulers: Slurm and Kubernetes"),
        dcc.RadioItems(id=ids.KUBE_SCHEDULER, value="all", inline=True, className="gw-toolbar",
                       options=[{"label": label, "value": value} for value, label in CHOICES]),
        html.Div(content(ds, ctx, "all"), id=ids.KUBE_CONTENT),
    ])


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.KUBE_CONTENT, "children"), Input(ids.KUBE_SCHEDULER, "value"),
                  Input(ids.REFRESH, "n_intervals"), prevent_initial_call=True)
    def update(choice, _n):
        return content(ds, ctx, choice if choice in dict(CHOICES) else "all")
