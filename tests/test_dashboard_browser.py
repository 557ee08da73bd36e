"""The dashboard in a real browser: Debian's Chromium driven by Playwright (no browser download).

Two servers on free loopback ports: the simulated cluster (every page, the click path from an
incident to its job to one of its nodes, the theme toggle) and the small fake cluster under a
path prefix (a job named like an XSS payload shows as text and runs nothing). A screenshot of
every page goes to tests/artifacts/dashboard/ (git-ignored).
"""

from __future__ import annotations

import os
import re
import threading

import pytest

from tests.support import dashboard_fake

CHROMIUM = os.environ.get("GW_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.path.join(os.path.dirname(__file__), "artifacts", "dashboard")

pytestmark = [pytest.mark.browser,
              pytest.mark.filterwarnings(r"ignore:\s*The dash_table.DataTable will be removed:DeprecationWarning"),
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM} "
                                 "(apt-get install chromium; tests/run-all.sh does)")]
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip package playwright not installed")
T = 15_000  # ms: generous for a loaded 2-core machine


def serve(app):
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    return srv, th


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


@pytest.fixture(scope="module")
def sim_site():
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.app import build_app
    from dashboard.datasource import SimDatasource

    sim = Simulation(SimConfig(nodes=32, seed=3, start=1_767_225_600.0, history_seconds=3600))
    ds = SimDatasource(sim)
    srv, th = serve(build_app(ds, refresh_seconds=3600))
    yield f"http://127.0.0.1:{srv.server_port}", ds
    srv.shutdown()
    th.join(5)


@pytest.fixture(scope="module")
def fake_site():
    from dashboard.app import build_app

    srv, th = serve(build_app(dashboard_fake.datasource(), prefix="/gw/", refresh_seconds=3600))
    yield f"http://127.0.0.1:{srv.server_port}/gw"
    srv.shutdown()
    th.join(5)


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 860})  # a laptop screen
    pg = ctx.new_page()
    pg.errors, pg.dialogs = [], []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    ctx.close()


def shot(pg, name: str) -> None:
    os.makedirs(ARTIFACTS, exist_ok=True)
    pg.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"), full_page=True)


def test_every_page_and_click_path(page, sim_site):
    expect = playwright_api.expect
    base, ds = sim_site
    f = ds.findings()
    assert f.incidents, "the default fault scenario should give at least one incident"
    page.goto(base + "/")
    expect(page.locator("#app-sim-badge")).to_contain_text("SIMULATED", timeout=T)
    expect(page.locator("#overview-cards")).to_contain_text("GPUs allocated", timeout=T)
    # the first view comes with the page (server-rendered, the heatmap as an image), then the figure
    expect(page.locator("#overview-heatmap-box img.gw-heatmap-preview, #overview-heatmap .main-svg").first).to_be_attached(
        timeout=T)
    expect(page.locator("#overview-heatmap .main-svg").first).to_be_visible(timeout=T)
    expect(page.locator("#overview-incidents")).to_contain_text(f.incidents[0].culprit, timeout=T)
    shot(page, "overview")

    # incident -> its job -> one of its nodes, by clicking links (client-side navigation)
    jobid = f.incidents[0].jobs[0]
    page.locator("#overview-incidents").get_by_role("link", name=jobid, exact=True).first.click()
    expect(page).to_have_url(re.compile(rf"/jobs/{jobid}$"), timeout=T)
    expect(page.locator("h1")).to_contain_text(f"Job {jobid}", timeout=T)
    expect(page.locator("#job-verdict")).to_contain_text(f.incidents[0].cause.replace("_", " "), timeout=T)
    expect(page.locator("#job-heatmaps .main-svg").first).to_be_visible(timeout=T)
    # placement: the GPUs on each node and their NVLink/NUMA topology, as the simulated agents export it
    expect(page.locator("#job-placement")).to_contain_text("NVLink", timeout=T)
    expect(page.locator("#job-placement")).to_contain_text("leaf")
    shot(page, "job")
    node = f.verdict(jobid).nodes[0]
    page.locator("#job-placement").get_by_role("link", name=node, exact=True).click()
    expect(page).to_have_url(re.compile(rf"/nodes/{node}$"), timeout=T)
    expect(page.locator("#node-summary")).to_contain_text("GPUs allocated", timeout=T)
    expect(page.locator("#node-graphs .main-svg").first).to_be_visible(timeout=T)
    expect(page.locator("#node-jobs")).to_contain_text(jobid)
    # hardware now: GPUs with the job holding them, the HCA ports, the Lustre client; no disk series
    expect(page.locator("#node-gpus")).to_contain_text(jobid)
    expect(page.locator("#node-gpus")).to_contain_text("1, 2, 3, 4, 5, 6, 7")  # GPU 0's NVLink peers
    expect(page.locator("#node-ports")).to_contain_text("mlx5_0/1")
    expect(page.locator("#node-ports")).to_contain_text("active")
    expect(page.locator("#node-filesystems")).to_contain_text("lustre")
    expect(page.locator("#node-disks")).to_contain_text("Disks unknown")
    shot(page, "node")

    for path, check in (("/jobs", "#jobs-table"), ("/nodes", "#nodes-table"), ("/queue", "#queue-plan"),
                        ("/storage", "#storage-heatmap"), ("/network", "#network-heatmap")):
        page.goto(base + path)
        expect(page.locator("#app-sim-badge")).to_contain_text("SIMULATED", timeout=T)
        expect(page.locator(check)).to_be_visible(timeout=T)
        if path in ("/jobs", "/nodes"):
            expect(page.locator(f"{check} td").first).to_be_visible(timeout=T)
        if path in ("/storage", "/network"):
            expect(page.locator(f"{check} .main-svg").first).to_be_visible(timeout=T)
        if path == "/storage":  # every OST and MDT, with its state
            expect(page.locator("#storage-targets")).to_contain_text("lustre-OST0000", timeout=T)
            expect(page.locator("#storage-targets")).to_contain_text("MDT")
            expect(page.locator("#storage-targets")).to_contain_text("connected")
        if path == "/network":  # per switch, and the ports worth a look
            expect(page.locator("#network-switches")).to_contain_text("leaf00", timeout=T)
            expect(page.locator("#network-ports")).to_contain_text("mlx5_")
        shot(page, path.strip("/"))
    page.goto(base + "/queue")
    expect(page.locator("#queue-freed .main-svg").first).to_be_visible(timeout=T)
    expect(page.locator("#queue-plan")).to_contain_text("Partition gpu", timeout=T)

    # a pending job shows why it waits
    pending = next(j for j in ds.snapshot().jobs if j.state == "PENDING")
    page.goto(f"{base}/jobs/{pending.job_id}")
    expect(page.locator("#job-why")).to_contain_text("rank in its partition", timeout=T)
    shot(page, "job-pending")

    # dark theme: the toggle flips the document's theme and is remembered
    page.goto(base + "/")
    page.locator("#app-theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark", timeout=T)
    # the figures are redrawn in plotly_dark (its font colour), not just the page around them
    expect(page.locator("#overview-heatmap .xtick text").first).to_have_css("fill", "rgb(242, 245, 250)", timeout=T)
    shot(page, "overview-dark")
    assert not page.dialogs
    assert not page.errors, page.errors


def test_user_strings_are_text_and_prefix_works(page, fake_site):
    expect = playwright_api.expect
    xss = dashboard_fake.XSS
    page.goto(fake_site + "/")
    expect(page.locator("#overview-flagged")).to_contain_text(xss, timeout=T)
    expect(page.locator("#overview-incidents")).to_contain_text("lustre-OST0003")
    page.goto(fake_site + "/jobs")
    expect(page.locator("#jobs-table")).to_contain_text(xss, timeout=T)
    page.goto(fake_site + "/jobs/4001")
    expect(page.locator("h1")).to_contain_text(xss, timeout=T)
    expect(page.locator("#job-heatmaps .main-svg").first).to_be_visible(timeout=T)
    shot(page, "job-xss")
    page.goto(fake_site + "/nodes/gpu001")
    expect(page.locator("#node-jobs")).to_contain_text(xss, timeout=T)
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("b", has_text="acct").count() == 0
    assert page.dialogs == [], f"a user string ran as code: {page.dialogs}"
    assert not page.errors, page.errors


HOSTILE_NODE = "n64)![t](http://203.0.113.9/track.png)"


@pytest.fixture(scope="module")
def hostile_site():
    from dataclasses import replace

    from dashboard.app import build_app
    from dashboard.datasource import MemoryDatasource

    snap = dashboard_fake.snapshot()
    jobs = tuple(replace(j, name="x" * 10_000) if j.job_id == 4002 else j for j in snap.jobs)
    nodes = tuple(replace(n, name=HOSTILE_NODE) if i == len(snap.nodes) - 1 else n for i, n in enumerate(snap.nodes))
    times, data = dashboard_fake.series()
    ds = MemoryDatasource(replace(snap, jobs=jobs, nodes=nodes), dashboard_fake.findings(), times, data,
                          now=dashboard_fake.NOW)
    srv, th = serve(build_app(ds, refresh_seconds=3600))
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    th.join(5)


def test_hostile_names_stay_inert_and_long_names_wrap(page, hostile_site):
    expect = playwright_api.expect
    foreign = []
    page.on("request", lambda r: foreign.append(r.url) if "127.0.0.1" not in r.url else None)
    page.goto(hostile_site + "/jobs/4002")
    expect(page.locator("h1")).to_contain_text("xxxx", timeout=T)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1366 + 20, f"a 10 kB job name made the page {width} px wide"
    page.goto(hostile_site + "/nodes")
    link = page.get_by_role("link", name=HOSTILE_NODE)
    expect(link).to_be_visible(timeout=T)
    link.click()
    expect(page.locator("h1")).to_contain_text(f"Node {HOSTILE_NODE}", timeout=T)
    assert not foreign, f"a node name made the browser fetch {foreign}"
    assert not page.errors, page.errors


@pytest.fixture(scope="module")
def roce_demo():
    """`gangwatch demo --fabric roce` (its showcase faults, 128 nodes: four leaf switches) on a free port."""
    from dashboard.analysis.sim import Simulation
    from dashboard.demo import Demo, build_dashboard, build_parser, sim_config

    sim = Simulation(sim_config(build_parser().parse_args(["--fabric", "roce", "--nodes", "128"]), 1_767_225_600.0))
    demo = Demo(sim, speed=0)
    app, ds = build_dashboard(demo, refresh_seconds=3600)
    srv, th = serve(app)
    yield f"http://127.0.0.1:{srv.server_port}", sim
    srv.shutdown()
    th.join(5)
    ds.close()


# each row's mean over the heatmap's last four columns, as drawn (nulls are unknown: skipped)
RECENT_ROWS = """el => { const d = el.data[0]; return d.y.map((y, i) => {
    const v = d.z[i].slice(-4).filter(x => x !== null); return [y, v.length ? v.reduce((a, b) => a + b) / v.length : null]; }); }"""


def test_roce_demo_network_shows_its_congestion(page, roce_demo):
    """On RoCE (no transmit wait) the leaf heatmap is titled for ECN+CNP and the congested leaf stands out."""
    from dashboard.analysis.thresholds import DEFAULT as TH

    expect = playwright_api.expect
    base, sim = roce_demo
    (leaf,) = {g["culprit"] for g in sim.ground_truth() if g["cause"] == "stalled_network" and g["culprit"].startswith("leaf")}
    page.goto(base + "/network")
    expect(page.locator("h2", has_text="RoCE congestion (ECN+CNP) per leaf switch")).to_be_visible(timeout=T)
    expect(page.locator("#network-heatmap .gtitle")).to_have_text("RoCE congestion (ECN+CNP)", timeout=T)
    expect(page.locator("#network-heatmap .cbtitle")).to_contain_text("packets/s")
    expect(page.locator("#network-switches")).to_contain_text("ECN+CNP")
    expect(page.locator("#network-gangs")).to_contain_text(f"Congested now: {leaf}.", timeout=T)
    rows = dict(page.locator("#network-heatmap .js-plotly-plot").evaluate(RECENT_ROWS))
    assert len(rows) == 4 and all(v is not None for v in rows.values()), rows  # drawn, not an empty chart
    others = sorted(v for k, v in rows.items() if k != leaf)
    assert rows[leaf] > TH.wait_ratio * others[len(others) // 2], rows
    shot(page, "network-roce")
    # a node on that leaf: its ports' congestion and the ECN+CNP and PFC pause series, named for RoCE
    node = next(n for i, n in enumerate(sim.cluster.names) if sim.cluster.leaves[int(sim.cluster.leaf_of[i])] == leaf)
    page.goto(f"{base}/nodes/{node}")
    expect(page.locator("h2", has_text="RoCE ports")).to_be_visible(timeout=T)
    expect(page.locator("#node-ports")).to_contain_text("ECN+CNP")
    expect(page.locator("#node-graphs .gtitle", has_text="RoCE congestion (ECN+CNP)")).to_be_visible(timeout=T)
    expect(page.locator("#node-graphs .gtitle", has_text="PFC pause frames received")).to_be_visible()
    expect(page.locator("#node-graphs .gtitle", has_text="transmit wait")).to_have_count(0)
    # its traffic is RoCE's, by name, on the node page and on a gang's job page
    expect(page.locator("#node-graphs .gtitle", has_text="RoCE transmit")).to_be_visible()
    expect(page.locator("#node-graphs .gtitle", has_text="InfiniBand")).to_have_count(0)
    shot(page, "node-roce")
    from dashboard.analysis.sim.slurm_view import build_snapshot

    job = next(j for j in build_snapshot(sim).jobs if j.state == "RUNNING" and len(j.nodes) > 1)
    page.goto(f"{base}/jobs/{job.job_id}")
    expect(page.locator(".gtitle", has_text="RoCE transmit per node")).to_be_visible(timeout=T)
    expect(page.locator(".gtitle", has_text="InfiniBand")).to_have_count(0)
    assert not page.errors, page.errors
