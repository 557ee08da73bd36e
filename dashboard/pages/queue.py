"""Queue (`/queue`): what could run now and when the top jobs start.

Per partition, the backfill planner's top job and its reserved start (shadow time), the windows
free now and until when (as Maui's `showbf`), and the jobs startable now without delaying the top
job; GPUs freed over the next day as running jobs reach their time limits, with reservations;
why every pending job waits; the dependency graph of pending chains; fairshare and priority."""

from __future__ import annotations

from dash import html

from collectors.slurm.hostlist import expand_lenient
from dashboard import figures, ids, ui
from dashboard.datasource import Datasource

TITLE = "Queue"
WHY_ROWS = 100
TIMELINE_JOBS = 30  # bars in the running-jobs timeline: the largest, whatever the cluster size


def unusable_nodes(snap) -> dict[str, list[tuple[str, str]]]:
    """{partition: [(node, why)]}: the nodes Slurm would start nothing on, in Slurm's words (the
    planner's own rule, as `gangwatch backfill` lists them)."""
    from dashboard.analysis.snapshot_to_planner import node_unusable_reason

    out: dict[str, list[tuple[str, str]]] = {}
    known = bool(snap.reservations) if snap is not None else False
    for n in (snap.nodes if snap is not None else ()):
        why = node_unusable_reason(n, known)
        if why:
            for p in n.partitions:
                out.setdefault(p, []).append((n.name, why))
    return out


def _node_list(ctx: ui.Ctx, text: str, limit: int = 8) -> list:
    """A Slurm host list ("gpu[001-004]") as links to the node pages."""
    return ui.node_links(ctx, expand_lenient(text), limit) if text else ["—"]


def _start_pair(now: float, ours: float | None, slurm: float | None) -> str:
    """gangwatch's estimate beside Slurm's own (squeue --start), each labelled."""
    text = f"{ui.fmt_time(ours)} (in {ui.fmt_dur(ours - now)}, gangwatch)" if ours is not None else "— (gangwatch)"
    return text + (f"; Slurm expects {ui.fmt_time(slurm)}" if slurm is not None else "; Slurm gives no start")


def plan_block(ds: Datasource, ctx: ui.Ctx):
    plan = ds.backfill()
    if plan is None:
        return html.P("No backfill plan (no scheduler snapshot, or the planner failed).", className="gw-muted")
    now = ds.now()
    unusable = unusable_nodes(ds.snapshot())
    out = []
    if plan.not_planned_in_time:
        out.append(html.P(
            f"Plan incomplete: {plan.not_planned_in_time} pending job(s) were not planned within the planner's "
            f"{plan.deadline['deadline_s']:g} s deadline (reason not_planned_in_time, no estimate); the next "
            "refresh plans again.", className="gw-banner"))
    for p in plan.partitions:
        top = p.top_job
        slurm_top = next((ui.why_field(w, "slurm_expected_start") for w in p.why if top and w.job_id == top.job_id), None)
        head = (["Top job ", ui.job_link(ctx, top.job_id), ": reserved start "
                 + _start_pair(now, top.shadow_time, slurm_top) + f" on {len(top.nodes)} node(s): ",
                 *ui.node_links(ctx, top.nodes)]
                if top else ["No job waits for resources in this partition."])
        bad = unusable.get(p.name, [])
        not_usable = (html.P(["Not usable: "] + [x for k, (n, why) in enumerate(bad)
                                                 for x in ((", " if k else ""), ui.node_link(ctx, n), f" ({why})")],
                             className="gw-muted") if bad else None)
        windows = ui.table(["nodes", "GPUs per node", "CPUs per node", "free until", "node list"],
                           [[str(w.nodes), str(w.gpus_per_node), str(w.cpus),
                             "no limit" if w.until is None else f"{ui.fmt_time(w.until)} ({ui.fmt_dur(w.until - now)})",
                             html.Span(_node_list(ctx, w.node_list))] for w in p.windows], empty="Nothing free now.")
        start = ui.table(["job", "by", "nodes", "ends by"],
                         [[ui.job_link(ctx, s.job_id), s.by, html.Span(ui.node_links(ctx, s.nodes)),
                           ui.fmt_time(s.end)] for s in p.startable], empty="No pending job can start now.")
        out.append(html.Div([html.H3(f"Partition {p.name}: {p.nodes_usable} of {p.nodes_total} nodes usable"),
                             html.P(head), not_usable, html.H4("Free now (windows)"), windows,
                             html.H4("Startable now without delaying the top job"), start], className="gw-partition"))
    return html.Div(out)


def top_job(ds: Datasource, snap):
    """(reserved start, GPUs, job id) of the largest top job: the gang the backfill windows exist for."""
    plan = ds.backfill()
    top = None
    if plan is not None:
        # the largest top job: the gang whose wait the backfill windows exist for
        tops = []
        for p in plan.partitions:
            if p.top_job is not None:
                job = snap.job(int(p.top_job.job_id)) if p.top_job.job_id.isdigit() else None
                tops.append((p.top_job.shadow_time, (job.gpus or 0) if job else 0, p.top_job.job_id))
        if tops:
            top = max(tops, key=lambda t: (t[1], -t[0]))
    return top


def freed(ds: Datasource, theme):
    snap = ds.snapshot()
    if snap is None:
        return figures.empty("no scheduler data", theme)
    now = ds.now()
    ends = [((j.start_time or now) + j.time_limit_seconds, j.gpus or 0) for j in snap.jobs
            if j.state == "RUNNING" and j.time_limit_seconds is not None]
    free_now = sum(max(0, (n.gpus_total or 0) - (n.gpus_allocated or 0)) for n in snap.nodes
                   if not (n.drain or n.down))
    resv = [(r.name, r.start_time, r.end_time) for r in snap.reservations if r.start_time and r.end_time]
    return figures.freed_gpus(now, ends, free_now, top_job(ds, snap), resv, theme)


def timeline(ds: Datasource, theme, limit: int = TIMELINE_JOBS):
    snap = ds.snapshot()
    if snap is None:
        return figures.empty("no scheduler data", theme)
    now = ds.now()
    running = sorted((j for j in snap.jobs if j.state == "RUNNING" and j.start_time is not None
                      and j.time_limit_seconds is not None), key=lambda j: (-(j.gpus or 0), j.job_id))[:limit]
    rows = [(f"{j.job_id} ({j.gpus} GPUs)", j.start_time, j.start_time + j.time_limit_seconds, j.gpus or 0)
            for j in running]
    return figures.job_timeline(now, rows, top_job(ds, snap), theme)


def why_table(ds: Datasource, ctx: ui.Ctx):
    plan = ds.backfill()
    snap = ds.snapshot()
    if plan is None or snap is None:
        return html.P("No plan.", className="gw-muted")
    jobs = {str(j.job_id): j for j in snap.jobs}
    rows = []
    order = sorted((w for p in plan.partitions for w in p.why),
                   key=lambda w: (w.partition, w.rank is None, w.rank or 0))  # never-runnable jobs last
    for w in order[:WHY_ROWS]:
        j = jobs.get(w.job_id)
        prio = ui.why_field(w, "priority")
        factors = ui.why_field(w, "priority_factors") or {}
        rows.append([ui.job_link(ctx, w.job_id), w.partition, "—" if w.rank is None else str(w.rank),
                     j.user if j else "", j.name if j else "",
                     str(j.gpus if j and j.gpus is not None else "—"), w.state,
                     "; ".join(r.message for r in w.reasons[:2]), ui.fmt_time(w.expected_start),
                     ui.fmt_time(ui.why_field(w, "slurm_expected_start")),
                     ui.fmt_num(prio, 0), ui.priority_terms(factors) if factors else "—"])
    return ui.table(["job", "partition", "rank", "user", "name", "GPUs", "plan", "why", "expected start (gangwatch)",
                     "expected start (Slurm)", "priority", "priority terms (sprio)"],
                    rows, empty="No pending jobs.")


def reservations(ds: Datasource, ctx: ui.Ctx):
    snap = ds.snapshot()
    return ui.table(["name", "start", "end", "nodes", "flags", "users/accounts"], [
        [r.name, ui.fmt_time(r.start_time), ui.fmt_time(r.end_time), html.Span(ui.node_links(ctx, r.nodes)),
         ", ".join(r.flags), ", ".join(r.users + r.accounts)] for r in (snap.reservations if snap else ())],
        empty="No reservations.")


def deps(ds: Datasource, theme):
    snap = ds.snapshot()
    edges, labels = [], {}
    for j in (snap.jobs if snap else ()):
        if j.state == "PENDING":
            for d in j.dependencies:
                if d.job_id:
                    edges.append((d.job_id, str(j.job_id)))
                    labels[str(j.job_id)] = f"{j.job_id} {d.kind}:{d.job_id} ({d.state or '?'})"
    return figures.dependency_graph(edges, labels, theme)


def fairshare(ds: Datasource):
    snap = ds.snapshot()
    rows = [["  " * r.depth + r.account, r.user, ui.fmt_num(r.norm_shares, 3), ui.fmt_num(r.effective_usage, 3),
             ui.fmt_num(r.fairshare, 3)] for r in (snap.fairshare if snap else ())][:200]
    return ui.table(["account", "user", "norm. shares", "effective usage", "fairshare"], rows,
                    empty="The scheduler reported no fairshare tree (sshare).")


def layout(ds: Datasource, ctx: ui.Ctx):
    return html.Div([
        html.H1("Queue"),
        ui.section("Backfill plan", html.Div(plan_block(ds, ctx), id=ids.QUEUE_PLAN),
                   note="Estimates are gangwatch's (EASY backfill over the running jobs' time limits) unless "
                        "labelled Slurm's; Slurm's own expected start (squeue --start) stands beside each."),
        ui.section("Timeline", ui.graph(id=ids.QUEUE_TIMELINE),
                   ui.graph(id=ids.QUEUE_FREED)),
        ui.section("Why pending jobs wait", html.Div(why_table(ds, ctx), id=ids.QUEUE_WHY)),
        ui.section("Reservations", html.Div(reservations(ds, ctx), id=ids.QUEUE_RESERVATIONS)),
        ui.section("Dependencies", ui.graph(id=ids.QUEUE_DEPS)),
        ui.section("Fairshare", html.Div(fairshare(ds), id=ids.QUEUE_FAIRSHARE)),
    ])


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    ui.refresh_on_tick(app, {ids.QUEUE_TIMELINE: lambda theme: timeline(ds, theme), ids.QUEUE_FREED: lambda theme: freed(ds, theme),
                             ids.QUEUE_DEPS: lambda theme: deps(ds, theme)},
                       {ids.QUEUE_PLAN: lambda: plan_block(ds, ctx), ids.QUEUE_WHY: lambda: why_table(ds, ctx)})
