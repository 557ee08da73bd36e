"""Jobs (`/jobs`): running and pending jobs with their verdicts; search by id, user or name.

Paging, sorting and filtering run on the server (DataTable custom actions), so a refresh sends
one page of rows whatever the queue length. Names and users are DataTable text cells (rendered as
text); only the job-id column is markdown, and its text is digits and escaped punctuation.
"""

from __future__ import annotations

from dash import Input, Output, dash_table, dcc, html

from dashboard import ids, ui
from dashboard.datasource import Datasource, job_verdict_label

TITLE = "Jobs"
PAGE_SIZE = 50
COLUMNS = [("jobid", "job", "markdown"), ("name", "name", "text"), ("user", "user", "text"),
           ("account", "account", "text"), ("partition", "partition", "text"), ("state", "state", "text"),
           ("verdict", "verdict", "text"), ("nodes", "nodes", "numeric"), ("gpus", "GPUs", "numeric"),
           ("time", "elapsed / waited", "text"), ("lost", "GPU-h lost", "text"), ("reason", "reason", "text")]


NOT_JUDGED = "not judged: the diagnosis has no verdict on this job (too young, or no metric source)"


def lost_cell(v, running: bool) -> str:
    """GPU-hours lost as text: a number where judged, "unknown" where not (the reason is the
    cell's tooltip), blank for pending jobs, which hold no GPUs."""
    if not running:
        return ""
    return ui.UNKNOWN if v is None or v.lost is None else f"{v.lost:,.2f}"


def reason_cell(v, j) -> str:
    """Slurm's reason for a pending job; for a running one the verdict's why (Slurm says "None")."""
    if j.state != "RUNNING":
        return j.reason
    if v is not None:
        return v.reason or v.state.replace("_", " ")
    return "" if j.reason in ("", "None") else j.reason


def all_rows(ds: Datasource, ctx: ui.Ctx, search: str = "", state: str = "active", flagged_only: bool = False,
             sort_by: list | None = None) -> list[dict]:
    snap = ds.snapshot()
    if snap is None:
        return []
    by_job = ds.findings().by_job()
    now = ds.now()
    q = (search or "").strip().lower()
    rows = []
    for j in snap.jobs:
        if state == "active" and j.state not in ("RUNNING", "PENDING"):
            continue
        if state not in ("active", "all") and j.state != state:
            continue
        v = by_job.get(str(j.job_id))
        if flagged_only and not (v and v.flagged):
            continue
        if q and not (q in str(j.job_id) or q in j.display_id.lower() or q in j.user.lower() or q in j.name.lower()
                      or q in j.account.lower()):
            continue
        running = j.state == "RUNNING"
        since = j.start_time if running else j.submit_time
        secs = (now - since) if since is not None else None
        rows.append({"jobid": f"[{ui.markdown_escape(j.display_id)}]({ctx.job(j.job_id)})", "name": j.name,
                     "user": j.user, "account": j.account, "partition": j.partition, "state": j.state,
                     "verdict": job_verdict_label(v, j), "nodes": j.gang_size, "gpus": j.gpus,
                     "time": ui.fmt_dur(secs), "lost": lost_cell(v, running), "reason": reason_cell(v, j),
                     "_id": j.job_id, "_secs": secs or 0, "_lost": v.lost if v else None,
                     "_lost_why": (v.unknown_why if v else NOT_JUDGED) if running else ""})
    for s in reversed(sort_by or [{"column_id": "lost", "direction": "desc"}]):
        col = {"jobid": "_id", "time": "_secs", "lost": "_lost"}.get(s["column_id"], s["column_id"])
        present = [r for r in rows if r.get(col) is not None]
        missing = [r for r in rows if r.get(col) is None]
        present.sort(key=lambda r: r[col], reverse=s.get("direction") == "desc")
        rows = present + missing  # unknown sorts last either way
    return rows


def page(ds, ctx, search, state, flagged_only, page_current, page_size, sort_by):
    rows = all_rows(ds, ctx, search, state, flagged_only, sort_by)
    size = page_size or PAGE_SIZE
    pages = max(1, -(-len(rows) // size))
    cur = min(page_current or 0, pages - 1)
    shown = rows[cur * size:(cur + 1) * size]
    out = [{k: v for k, v in r.items() if not k.startswith("_")} for r in shown]
    tips = [{"lost": {"value": r["_lost_why"], "type": "text"}} if r["_lost_why"] else {} for r in shown]
    return out, pages, f"{len(rows):,} jobs match", tips


def layout(ds: Datasource, ctx: ui.Ctx):
    return html.Div([
        html.H1("Jobs"),
        html.Div([
            dcc.Input(id=ids.JOBS_SEARCH, type="search", placeholder="search job id, user, name or account",
                      debounce=True, className="gw-search"),
            dcc.Dropdown(id=ids.JOBS_STATE, value="active", clearable=False, className="gw-dropdown",
                         options=[{"label": "running and pending", "value": "active"},
                                  {"label": "running", "value": "RUNNING"}, {"label": "pending", "value": "PENDING"},
                                  {"label": "all, with recently ended", "value": "all"}]),
            dcc.Checklist(id=ids.JOBS_FLAGGED, options=[{"label": " flagged only", "value": "flagged"}], value=[]),
            html.Span(id=ids.JOBS_COUNT, className="gw-muted"),
        ], className="gw-toolbar"),
        dash_table.DataTable(
            id=ids.JOBS_TABLE, columns=[{"id": c, "name": n, "presentation": "markdown"} if p == "markdown"
                                        else {"id": c, "name": n, "type": "numeric" if p == "numeric" else "text"}
                                        for c, n, p in COLUMNS],
            page_action="custom", page_current=0, page_size=PAGE_SIZE, sort_action="custom", sort_mode="multi",
            sort_by=[], markdown_options={"html": False, "link_target": "_self"},
            style_table={"overflowX": "auto"}, style_cell={"textAlign": "left", "fontSize": "13px",
                                                           "maxWidth": "240px", "overflow": "hidden",
                                                           "textOverflow": "ellipsis"},
            css=[{"selector": "p", "rule": "margin: 0"}]),
    ])


def register(app, ds: Datasource, ctx: ui.Ctx) -> None:
    @app.callback(Output(ids.JOBS_TABLE, "data"), Output(ids.JOBS_TABLE, "page_count"), Output(ids.JOBS_COUNT, "children"),
                  Output(ids.JOBS_TABLE, "tooltip_data"),
                  Input(ids.JOBS_SEARCH, "value"), Input(ids.JOBS_STATE, "value"), Input(ids.JOBS_FLAGGED, "value"),
                  Input(ids.JOBS_TABLE, "page_current"), Input(ids.JOBS_TABLE, "page_size"),
                  Input(ids.JOBS_TABLE, "sort_by"), Input(ids.REFRESH, "n_intervals"))
    def update(search, state, flagged, page_current, page_size, sort_by, _n):
        return page(ds, ctx, search, state, bool(flagged), page_current, page_size, sort_by)
