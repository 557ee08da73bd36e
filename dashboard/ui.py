"""Small layout helpers shared by the pages: formatting, cards, tables of links.

User strings (job names, users, accounts, reasons) only ever go in as component children or
DataTable cell values: React renders them as text. Nothing here builds HTML or markdown from data.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from dash import Input, Output, dcc, html

from dashboard import ids
from dashboard.datasource.records import fmt_age


class Ctx:
    """What a page needs besides the datasource: how to build links under the path prefix."""

    def __init__(self, get_relative_path, theme: str | None = None):
        self.rel = get_relative_path
        self.theme = theme  # the browser's theme when the page was requested (figures drawn in it)

    def with_theme(self, theme: str | None) -> "Ctx":
        return Ctx(self.rel, theme)

    # Ids and names are percent-encoded into one path segment: a node named "a/b", "n#1" or
    # "n)![x](http://host/t.png)" stays one reachable page and cannot end a Markdown link target.
    def job(self, jobid) -> str:
        return self.rel("/jobs/" + quote(str(jobid), safe=""))

    def node(self, name: str) -> str:
        return self.rel("/nodes/" + quote(str(name), safe=""))


def fmt_time(t: float | None) -> str:
    if t is None:
        return "—"
    if t != t or t in (float("inf"), float("-inf")):  # a job without a time limit ends "never"
        return "no limit"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC"


def fmt_hm(t: float | None) -> str:
    return "—" if t is None else time.strftime("%H:%M", time.gmtime(t))


def fmt_dur(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(max(0, seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, _ = divmod(s, 60)
    return f"{d}d {h}h" if d else (f"{h}h {m:02d}m" if h else f"{m}m")


def fmt_num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


UNKNOWN = "unknown"


def fmt_known(v: float | None, digits: int = 1, unit: str = "") -> str:
    """A measured value, or "unknown" where the source has none (never 0)."""
    if v is None:
        return UNKNOWN
    return f"{v:,.{digits}f}" + (f" {unit}" if unit else "")


def unknown(reason: str) -> html.Span:
    """"unknown" with the reason on hover: for values no source has (never shown as 0)."""
    return html.Span(UNKNOWN, title=reason, className="gw-unknown")


def known_or_unknown(v: float | None, reason: str, digits: int = 2):
    return unknown(reason) if v is None else fmt_num(v, digits)


def priority_terms(factors: dict, priority: float | None = None) -> str:
    """sprio's weighted terms as a sum ("age 13 + fairshare 8,333 + TRES 1,002 − nice 1,000"),
    with Slurm's priority beside it; nice is subtracted, as Slurm does."""
    terms = [(k, v) for k, v in sorted(factors.items()) if k != "nice" and v]
    text = " + ".join(f"{'TRES' if k == 'tres' else k} {v:,.0f}" for k, v in terms) or "0"
    if factors.get("nice"):
        text += f" − nice {factors['nice']:,.0f}"
    return text + ("" if priority is None else f" ≈ {priority:,.0f} (Slurm's priority)")


def fmt_si(v: float | None, unit: str) -> str:
    """Rates in a readable SI unit ("3.2 GB/s", "140 k/s"), or "unknown"."""
    if v is None:
        return UNKNOWN
    for div, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:,.1f} {prefix}{unit}"
    return f"{v:,.0f} {unit}"


def fmt_state(up: bool | None) -> str:
    return UNKNOWN if up is None else ("active" if up else "down")


def card(label: str, value: str, note: str = "", cid: str | None = None) -> html.Div:
    kw = {"id": cid} if cid else {}
    return html.Div([html.Div(label, className="gw-card-label"), html.Div(value, className="gw-card-value"),
                     html.Div(note, className="gw-card-note")], className="gw-card", **kw)


def table(header: list[str], rows: list[list], empty: str = "nothing to show", cid: str | None = None) -> html.Div:
    """A plain table; cells may be strings or components (links)."""
    kw = {"id": cid} if cid else {}
    if not rows:
        return html.Div(html.P(empty, className="gw-muted"), **kw)
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in header])),
                                html.Tbody([html.Tr([html.Td(c) for c in r]) for r in rows])],
                               className="gw-table"), className="gw-table-wrap", **kw)


def job_link(ctx: Ctx, jobid) -> dcc.Link:
    return dcc.Link(str(jobid), href=ctx.job(jobid), className="gw-link")


def node_link(ctx: Ctx, name: str) -> dcc.Link:
    return dcc.Link(name, href=ctx.node(name), className="gw-link")


def node_links(ctx: Ctx, names, limit: int = 8) -> list:
    names = list(names)
    out: list = []
    for k, n in enumerate(names[:limit]):
        if k:
            out.append(" ")
        out.append(node_link(ctx, n))
    if len(names) > limit:
        out.append(f" +{len(names) - limit} more")
    return out


def culprit_cell(ctx: Ctx, culprit: str, nodes) -> object:
    """A culprit as a link where it names a node (or "job N"), else its text (a Lustre target, a mount)."""
    if culprit and culprit in nodes:
        return node_link(ctx, culprit)
    kind, _, jid = (culprit or "").partition(" ")
    if kind == "job" and jid.isdigit():
        return html.Span(["job ", job_link(ctx, jid)])
    return culprit or "—"


def state_badge(state: str) -> html.Span:
    return html.Span(state.replace("_", " ") if state else "—", className=f"gw-badge gw-state-{state or 'none'}")


def graph(**kwargs) -> dcc.Graph:
    """A Plotly graph as every page shows it (no Plotly logo in the mode bar)."""
    return dcc.Graph(config={"displaylogo": False}, **kwargs)


def section(title: str, *children, note: str = "") -> html.Section:
    head = [html.H2(title)]
    if note:
        head.append(html.P(note, className="gw-muted"))
    return html.Section([*head, *children], className="gw-section")


def refresh_on_tick(app, figures: dict, tables: dict) -> None:
    """A page's usual refresh: `figures` (id -> build(theme)) are drawn at load, on every tick and on a
    theme change; `tables` (id -> build()) are already in the layout, so only ticks re-render them."""
    fig_ids, table_ids = list(figures), list(tables)

    @app.callback(*(Output(i, "figure") for i in fig_ids), Input(ids.REFRESH, "n_intervals"), Input(ids.THEME, "data"))
    def draw(_n, theme):
        out = tuple(figures[i](theme) for i in fig_ids)
        return out if len(out) > 1 else out[0]

    @app.callback(*(Output(i, "children") for i in table_ids), Input(ids.REFRESH, "n_intervals"),
                  prevent_initial_call=True)
    def render(_n):
        out = tuple(tables[i]() for i in table_ids)
        return out if len(out) > 1 else out[0]


def age_text(seconds: float | None) -> str:
    return f"data {fmt_age(seconds)} old"


def markdown_escape(text: str) -> str:
    """For DataTable markdown cells holding link text (node names): no markup survives."""
    return "".join("\\" + c if c in "\\`*_{}[]()#+-.!|<>&" else c for c in text)


def why_field(w, name: str, default=None):
    """A field of the planner's JobWhy, wherever this planner version keeps it (on the record, or on
    the PendingJob it carries as `job`)."""
    if hasattr(w, name):
        return getattr(w, name)
    return getattr(getattr(w, "job", None), name, default)
