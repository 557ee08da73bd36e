"""Every page's layout builds from the fake cluster; component ids are unique and all come from
dashboard/ids.py; user strings only ever appear as text."""

from __future__ import annotations

from collections import Counter

import pytest
from dash import dash_table, dcc

from dashboard import ids
from dashboard.app import NAV, PAGES, build_app, render_page, resolve
from dashboard.datasource import MemoryDatasource
from tests.support import dashboard_fake
from tests.support.dashboard_fake import XSS

# dash_table.DataTable still ships with Dash 4 (dash-ag-grid is an extra download); its notice is noise here
pytestmark = pytest.mark.filterwarnings(r"ignore:\s*The dash_table.DataTable will be removed:DeprecationWarning")

PATHS = ["", "jobs", "jobs/4001", "jobs/4004", "jobs/4003", "jobs/999", "nodes", "nodes/gpu001", "nodes/gpu008",
         "nodes/nope", "queue", "storage", "network", "kubernetes"]
ALL_IDS = {v for k, v in vars(ids).items() if k.isupper()}


def walk(component):
    yield component
    children = getattr(component, "children", None)
    if isinstance(children, (list, tuple)):
        for c in children:
            yield from walk(c)
    elif children is not None and hasattr(children, "to_plotly_json"):
        yield from walk(children)


def strings(component):
    for c in walk(component):
        ch = getattr(c, "children", None)
        if isinstance(ch, str):
            yield ch
        elif isinstance(ch, (list, tuple)):
            yield from (x for x in ch if isinstance(x, str))


@pytest.fixture(scope="module")
def app_ctx():
    ds = dashboard_fake.datasource()
    app = build_app(ds)
    from dashboard.ui import Ctx

    return ds, app, Ctx(app.get_relative_path)


def test_ids_module_has_no_duplicates():
    values = [v for k, v in vars(ids).items() if k.isupper()]
    assert len(values) == len(set(values))
    prefixes = {"app", "overview", "jobs", "job", "nodes", "node", "queue", "storage", "network", "kubernetes"}
    assert all(v.split("-")[0] in prefixes and v == v.lower() for v in values)


@pytest.mark.parametrize("path", PATHS)
def test_every_page_builds_with_unique_known_ids(app_ctx, path):
    ds, app, ctx = app_ctx
    tree = render_page(ds, ctx, path)
    found = [c.id for c in walk(tree) if getattr(c, "id", None) is not None]
    assert not [i for i, n in Counter(found).items() if n > 1], "duplicate ids"
    assert set(found) <= ALL_IDS, set(found) - ALL_IDS


def test_page_ids_do_not_collide_across_pages(app_ctx):
    ds, app, ctx = app_ctx
    owner: dict[str, str] = {}
    shell_ids = {c.id for c in walk(app.layout()) if getattr(c, "id", None)}
    for path in ("", "jobs", "jobs/4001", "nodes", "nodes/gpu001", "queue", "storage", "network"):
        module, _ = resolve(path)
        for c in walk(render_page(ds, ctx, path)):
            cid = getattr(c, "id", None)
            if cid:
                assert cid not in shell_ids
                assert owner.setdefault(cid, module.__name__) == module.__name__, f"{cid} on two pages"


def test_shell_says_simulated_and_links_pages(app_ctx):
    ds, app, ctx = app_ctx
    shell = app.layout()
    text = " ".join(strings(shell))
    assert "SIMULATED" in text
    hrefs = {c.href for c in walk(shell) if isinstance(c, dcc.Link)}
    # the fake has scheduler data and node series, but no per-target or per-switch series, no kube-exporter
    assert hrefs == {href for _, href, _ in NAV} - {"/storage", "/network", "/kubernetes"}
    real = build_app(dashboard_fake.datasource(simulated=False)).layout()
    assert "SIMULATED" not in " ".join(strings(real))


def test_pages_without_data_are_not_linked():
    ds = MemoryDatasource(dashboard_fake.snapshot(), dashboard_fake.findings(), simulated=False)
    app = build_app(ds)
    hrefs = {c.href for c in walk(app.layout()) if isinstance(c, dcc.Link)}
    assert "/storage" not in hrefs and "/network" not in hrefs and "/jobs" in hrefs
    assert ds.heatmap() is None  # no series: the overview says so instead of drawing zeros
    from dashboard.ui import Ctx

    ctx = Ctx(app.get_relative_path)
    storage = " ".join(strings(render_page(ds, ctx, "storage")))
    network = " ".join(strings(render_page(ds, ctx, "network")))
    assert "Not found" not in storage + network  # real pages whose source is absent say which source
    assert "No Lustre or GPFS source reports" in storage and "No InfiniBand or RoCE source reports" in network
    assert "Not found" in " ".join(strings(render_page(ds, ctx, "no-such-page")))
    # no topology maps the job's nodes: the switch count is unknown, not 0
    placement = " ".join(strings(render_page(ds, ctx, "jobs/4001")))
    assert "leaf switches unknown" in placement and "0 leaf switch" not in placement


def test_job_page_content(app_ctx):
    ds, app, ctx = app_ctx
    running = render_page(ds, ctx, "jobs/4001")
    text = " ".join(strings(running))
    assert XSS in text and "lustre-OST0003" in text and "Placement" in text
    pending = " ".join(strings(render_page(ds, ctx, "jobs/4004")))
    assert "Why is it waiting" in pending and "rank in its partition" in pending
    assert "does not list this job" in " ".join(strings(render_page(ds, ctx, "jobs/999")))


def test_no_raw_html_anywhere(app_ctx):
    """No component may render HTML from strings: no dangerously_allow_html, no markdown with html."""
    ds, app, ctx = app_ctx
    for path in PATHS:
        for c in walk(render_page(ds, ctx, path)):
            assert not getattr(c, "dangerously_allow_html", False)
            if isinstance(c, dash_table.DataTable):
                assert c.markdown_options.get("html") is False
            assert not isinstance(c, dcc.Markdown)


def test_every_page_module_has_layout_and_register():
    for m in PAGES:
        assert callable(m.layout) and callable(m.register) and m.__doc__


# how much a page shows (rows, page length, a chart's time span): not what counts as slow or congested
DISPLAY_SIZES = {"PAGE_SIZE", "WHY_ROWS", "TIMELINE_JOBS", "HEATMAP_WINDOW"}


def test_pages_keep_no_analysis_constants():
    """A ratio that decides "slow" or "congested" lives in dashboard/analysis/thresholds.py, where the
    diagnosis reads it too; a page's module-level numbers are display sizes only."""
    numbers = {f"{m.__name__}.{k}" for m in PAGES for k, v in vars(m).items()
               if k.isupper() and isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers and {n.rpartition(".")[2] for n in numbers} <= DISPLAY_SIZES, sorted(numbers)


def test_figures_use_only_cartesian_trace_types(app_ctx):
    """Every figure the pages draw is a heatmap, scatter or bar: cheap to render at thousands of rows."""
    ds, app, ctx = app_ctx
    from dashboard.pages import job, node, queue

    figs = [g.figure for g in job.heatmaps(ds, "4001", None)] + [g.figure for g in node.graphs(ds, "gpu001", None)]
    figs += [queue.freed(ds, None), queue.deps(ds, None), queue.timeline(ds, None)]
    for path in ("",):
        figs += [c.figure for c in walk(render_page(ds, ctx, path)) if isinstance(c, dcc.Graph) and c.figure]
    import plotly.graph_objects as go

    types = {t.type for f in figs for t in go.Figure(f).data}
    assert types and types <= {"heatmap", "scatter", "bar"}, types
