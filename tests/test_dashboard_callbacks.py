"""Dashboard callbacks and data helpers called as plain functions; the HTTP endpoints through
Flask's test client; the simulator adapter on a small simulation."""

from __future__ import annotations

import base64
import gzip
import json
import math
import shutil
import subprocess
import time

import numpy as np
import plotly.graph_objects as go
import pytest
from dash import Patch, dcc, no_update
from hypothesis import given, settings, strategies as st

from dashboard import figures, ids
from dashboard.app import build_app
from dashboard.datasource import Findings, SimDatasource, Verdict, aggregate_rows, downsample_cols, group_incidents
from dashboard.pages import job, jobs, node, nodes, overview, queue
from dashboard.ui import Ctx
from tests.support import dashboard_fake
from tests.support.dashboard_fake import NOW, XSS

# dash_table.DataTable still ships with Dash 4 (dash-ag-grid is an extra download); its notice is noise here
pytestmark = pytest.mark.filterwarnings(r"ignore:\s*The dash_table.DataTable will be removed:DeprecationWarning")


@pytest.fixture(scope="module")
def fake():
    ds = dashboard_fake.datasource()
    app = build_app(ds, prefix="/gw/")
    return ds, app, Ctx(app.get_relative_path)


# ------------------------------------------------------------------------------------ overview

def test_summary_figures(fake):
    ds, _, _ = fake
    s = overview.summarise(ds)
    # 8 nodes x 8 GPUs; jobs hold 16 + 16 + 2; gpu008 is drained with nothing on it
    assert (s.gpus_total, s.gpus_allocated, s.gpus_down, s.gpus_idle) == (64, 34, 8, 22)
    assert (s.running, s.pending, s.pending_gangs, s.gang_wait_max) == (3, 2, 1, 1800)
    # 4001 lost 4.0 GPU-h over 15 min (all inside the last hour), 4003 0.17 over 10 min
    assert s.lost_hour == pytest.approx(4.17) and s.lost_day == pytest.approx(4.17) and s.flagged == 2


def test_lost_within_prorates_long_stalls():
    f = Findings(NOW, "diagnosis", (Verdict("1", (), 8, "hung", 1.0, NOW - 7200, gpu_hours_lost=16.0),))
    assert overview.lost_within(f, NOW, 3600) == pytest.approx(8.0)
    assert overview.lost_within(f, NOW, 86400) == pytest.approx(16.0)


def test_refresh_skips_when_data_unchanged(fake):
    ds, _, ctx = fake
    version = ds.status().version
    assert overview.refresh_tables(ds, ctx, version) == (no_update,) * 4
    cards, incidents, flagged, new = overview.refresh_tables(ds, ctx, "old")
    assert new == version
    assert _text(incidents) == _text(overview.incidents(ds, ctx))
    # the two stalled jobs, most GPU-hours lost first; the progressing one is not flagged (a culprit
    # that names a job links to it too)
    assert list(dict.fromkeys(_links(flagged))) == ["4001", "4003"]


def test_heatmap_full_then_patch(fake):
    ds, _, _ = fake
    fig, drawn = overview.heatmap_update(ds, ids.THEME, "dark", {"v": ds.status().version, "theme": "light"})
    go.Figure(fig)  # a valid figure
    assert fig["layout"]["template"]["layout"]["paper_bgcolor"] == "rgb(17,17,17)"  # plotly_dark
    assert fig["data"][0]["y"][0] == "gpu008"  # unknown (NaN) first: it needs looking at
    assert fig["data"][0]["z"][0][0] is None  # unknown stays unknown, never 0
    assert fig["data"][0]["z"][-1][0] == 80 and len(fig["data"][0]["x"]) == 240  # 241 samples -> 240 columns
    assert drawn == {"v": ds.status().version, "theme": "dark"}
    # the figure on screen is current: a tick, or the initial call after the page came, sends nothing
    assert overview.heatmap_update(ds, ids.REFRESH, "dark", drawn) == (no_update, no_update)
    assert overview.heatmap_update(ds, None, "dark", drawn) == (no_update, no_update)
    # new data: only the trace's data goes out
    patch, drawn2 = overview.heatmap_update(ds, ids.REFRESH, "dark", {"v": "old", "theme": "dark"})
    assert isinstance(patch, Patch) and drawn2 == drawn
    ops = patch.to_plotly_json()["operations"]
    assert {tuple(o["location"]) for o in ops} == {("data", 0, "z"), ("data", 0, "x"), ("data", 0, "y")}
    # the page was drawn light while the toggle switched to dark: the next call redraws it whole
    fig, _ = overview.heatmap_update(ds, None, "dark", {"v": ds.status().version, "theme": "light"})
    assert isinstance(fig, dict) and fig["layout"]["template"]["layout"]["paper_bgcolor"] == "rgb(17,17,17)"


def test_click_on_heatmap_row_opens_node(fake):
    _, _, ctx = fake
    assert overview.node_from_click({"points": [{"y": "gpu003 +9", "x": 0}]}, ctx) == "/gw/nodes/gpu003"
    assert overview.node_from_click(None, ctx) is no_update
    assert overview.node_from_click({"points": []}, ctx) is no_update


# ----------------------------------------------------------------------------------- jobs/nodes

def test_jobs_search_filter_sort_page(fake):
    ds, _, ctx = fake
    rows, pages, count, _ = jobs.page(ds, ctx, "alice", "active", False, 0, 50, [])
    assert [r["name"] for r in rows] == ["llama-ft"] and pages == 1 and count == "1 jobs match"
    rows, _, _, _ = jobs.page(ds, ctx, "", "active", True, 0, 50, None)
    assert [r["verdict"] for r in rows] == ["stalled_io", "idle_gpus"]  # by GPU-hours lost, worst first
    assert rows[0]["name"] == XSS and rows[0]["jobid"] == "[4001](/gw/jobs/4001)"
    rows, _, _, _ = jobs.page(ds, ctx, "", "PENDING", False, 0, 50, [{"column_id": "gpus", "direction": "asc"}])
    assert [r["gpus"] for r in rows] == [1, 32] and rows[1]["reason"] == "Dependency"
    rows, pages, _, _ = jobs.page(ds, ctx, "", "active", False, 2, 2, [{"column_id": "jobid", "direction": "asc"}])
    assert pages == 3 and [r["jobid"] for r in rows] == ["[4005](/gw/jobs/4005)"]
    rows, _, _, _ = jobs.page(ds, ctx, "4003", "all", False, 0, 50, [])
    assert rows[0]["verdict"] == "idle_gpus" and rows[0]["time"] == "15m"


def test_unknown_losses_are_unknown_not_zero(fake, monkeypatch):
    """Jobs judged insufficient_data: "unknown" (reason on hover) in the jobs table, on the job page
    and in the overview's totals when nothing could be judged; running jobs have a reason too."""
    from dataclasses import replace

    ds, _, ctx = fake
    f = ds.findings()
    blind = tuple(replace(v, state="insufficient_data", gpu_hours_lost=0.0, reason="no GPU samples for 2 of 2 nodes")
                  if v.jobid == "4003" else v for v in f.verdicts)
    assert blind[-1].lost is None and blind[-1].unknown_why == "no GPU samples for 2 of 2 nodes"
    monkeypatch.setattr(ds, "findings", lambda: replace(f, verdicts=blind))
    rows, _, _, tips = jobs.page(ds, ctx, "", "RUNNING", False, 0, 50, [{"column_id": "lost", "direction": "desc"}])
    by_id = {r["jobid"]: (r, t) for r, t in zip(rows, tips)}
    row, tip = by_id["[4003](/gw/jobs/4003)"]
    assert row["lost"] == "unknown" and tip["lost"]["value"] == "no GPU samples for 2 of 2 nodes"
    assert row["reason"] == "no GPU samples for 2 of 2 nodes"
    assert rows[0]["jobid"] == "[4001](/gw/jobs/4001)" and rows[-1]["lost"] == "unknown"  # unknown sorts last
    assert all(r["reason"] for r in rows)  # running jobs: the verdict's why, never blank
    # culprits that are nodes or jobs are links; targets and mounts stay text
    from dashboard import ui

    assert ui.culprit_cell(ctx, "gpu003", {"gpu003"}).href == "/gw/nodes/gpu003"
    assert ui.culprit_cell(ctx, "job 4003", set()).children[1].href == "/gw/jobs/4003"
    assert ui.culprit_cell(ctx, "lustre-OST0003", {"gpu003"}) == "lustre-OST0003"
    assert "unknown" in str(job.verdict_block(blind[-1], NOW)) and "no GPU samples" in str(job.verdict_block(blind[-1], NOW))
    # nothing judged at all: the overview's totals are unknown, not 0.0
    monkeypatch.setattr(ds, "findings", lambda: replace(f, verdicts=tuple(
        replace(v, state="insufficient_data") for v in f.verdicts), incidents=()))
    cards = str(overview.cards(ds))
    assert "unknown" in cards and "could be judged" in cards and "0.0" not in cards


def test_nodes_filter(fake):
    ds, _, ctx = fake
    rows, pages = nodes.page(ds, ctx, "", "drained", 0, 50)
    assert [r["name"] for r in rows] == ["[gpu008](/gw/nodes/gpu008)"] and rows[0]["reason"] == "XID 79 on GPU 3"
    rows, _ = nodes.page(ds, ctx, "gpu00", "all", 0, 50)
    assert len(rows) == 8 and rows[0]["jobs"] == "[4001](/gw/jobs/4001)" and rows[0]["gpus"] == "8/8"


# ------------------------------------------------------------------------------------ job/node

def test_job_heatmaps_shade_the_stall(fake):
    ds, _, _ = fake
    graphs = job.heatmaps(ds, "4001", "light")
    assert len(graphs) == 4
    fig = go.Figure(graphs[0].figure)
    assert fig.layout.shapes[0].x0 == int((NOW - 900) * 1000)
    assert list(fig.data[0].y) == ["gpu001", "gpu002"]
    assert fig.data[0].z[0][-1] == 8  # 0.08 -> 8 %
    ib = go.Figure(graphs[2].figure)
    assert ib.data[0].z[1][0] == 8.0 and ib.data[0].colorbar.title.text == "GB/s"  # 8 rails x 1e9 B/s
    healthy = job.heatmaps(ds, "4002", "light")
    assert not go.Figure(healthy[0].figure).layout.shapes


def test_node_graphs(fake):
    ds, _, _ = fake
    graphs = node.graphs(ds, "gpu001", None)
    assert len(graphs) == 5 and len(graphs[0].figure.data) == 8
    assert "No metrics" in node.graphs(ds, "nope", None).children


def test_rounded_keeps_gaps_in_one_and_two_dimensions():
    assert figures._rounded(np.array([1.0, np.nan]), 2) == [1.0, None]
    assert figures._rounded(np.array([[1.234, np.nan], [np.nan, 2.0]]), 0) == [[1, None], [None, 2]]
    assert figures._rounded(np.array([np.nan, np.nan]), 1) == [None, None]


def test_node_last_hour_renders_with_gaps(fake, monkeypatch):
    """Real scrapes miss samples: the node page's "Last hour" graphs draw the gaps, never a 500."""
    from dataclasses import replace

    ds, _, _ = fake
    ns = ds.node_series("gpu001", node.SIGNALS)
    holed = {k: np.where(np.arange(v.shape[-1]) % 7 == 3, np.nan, v) for k, v in ns.values.items()}
    monkeypatch.setattr(ds, "node_series", lambda name, signals: replace(ns, values=holed))
    graphs = node.graphs(ds, "gpu001", None)
    ys = graphs[0].figure.data[0].y
    assert len(graphs) == 5 and None in ys and ys[3] is None and ys[0] is not None


# ---------------------------------------------------------------------------------------- queue

def test_queue_figures_and_tables(fake):
    ds, _, ctx = fake
    fr, dg = queue.freed(ds, "light"), queue.deps(ds, "light")
    assert isinstance(fr, go.Figure) and fr.data[0].y[0] == 22  # free GPUs now on usable nodes
    assert list(dg.data[1].text) == ["4002", "4004"]  # 4004 waits for 4002
    tl = queue.timeline(ds, "light")
    assert list(tl.data[0].y) == ["4001 (16 GPUs)", "4002 (16 GPUs)", "4003 (2 GPUs)"]
    assert tl.data[0].x[0] == 4 * 3600 * 1000  # 4001 runs to its 4 h limit
    plan = ds.backfill()
    assert plan is not None and {p.name for p in plan.partitions} == {"gpu"}
    assert queue.why_table(ds, ctx) is not None


# ------------------------------------------------------------------------------------ endpoints

def test_endpoints(fake):
    ds, app, _ = fake
    c = app.server.test_client()
    health = c.get("/gw/healthz")
    assert health.status_code == 200 and health.json["simulated"] is True
    assert health.json["sources"]["snapshot"]["age_seconds"] == 0
    f = c.get("/gw/api/v1/findings").json
    v = {x["jobid"]: x for x in f["verdicts"]}
    assert v["4001"]["state"] == "stalled_io" and v["4001"]["evidence"][0]["signal"] == "io_pressure"
    assert f["incidents"][0]["culprit"] == "lustre-OST0003"
    plan = c.get("/gw/api/v1/backfill").json
    assert plan["partitions"][0]["partition"] == "gpu"
    assert plan["snapshot"]["stale"] is False and plan["snapshot"]["failing_since"] is None  # how old the plan is
    from collectors.exposition import iter_samples

    samples = {(n, tuple(sorted(lbl.items()))): v for n, lbl, v in iter_samples(c.get("/gw/metrics").get_data(as_text=True))}
    assert samples[("gangwatch_job_stalled", (("cause", "stalled_io"), ("jobid", "4001")))] == 1
    assert samples[("gangwatch_job_stalled", (("cause", "none"), ("jobid", "4002")))] == 0
    assert samples[("gangwatch_job_gpu_hours_lost_total", (("jobid", "4001"),))] == 4.0
    assert samples[("gangwatch_serve_source_up", (("source", "snapshot"),))] == 1
    assert any(n == "gangwatch_incident_gpu_hours_lost" and dict(lbl)["culprit"] == "lustre-OST0003"
               for n, lbl in samples)
    assert c.post("/gw/healthz").status_code == 405
    assert c.delete("/gw/").status_code == 405
    assert c.get("/healthz").status_code == 404  # everything lives under the prefix
    big = c.get("/gw/api/v1/backfill", headers={"Accept-Encoding": "gzip"})
    if len(big.data) > 1024 or big.headers.get("Content-Encoding"):
        assert json.loads(gzip.decompress(big.data))["partitions"]


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool not installed")
def test_metrics_pass_promtool(fake):
    from collectors.exposition import encode

    from dashboard.app import serve_families

    ds, _, _ = fake
    text = encode(serve_families(ds)).encode()  # this module's own series (the findings' are the diagnosis')
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_basic_auth(tmp_path):
    import bcrypt

    from collectors.web import WebConfig

    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_users:\n  ops: " + bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode() + "\n")
    app = build_app(dashboard_fake.datasource(), web_config=WebConfig.load(str(cfg)))
    c = app.server.test_client()
    assert c.get("/healthz").status_code == 401
    assert c.get("/").status_code == 401
    good = base64.b64encode(b"ops:s3cret").decode()
    bad = base64.b64encode(b"ops:nope").decode()
    assert c.get("/healthz", headers={"Authorization": "Basic " + bad}).status_code == 401
    assert c.get("/healthz", headers={"Authorization": "Basic " + good}).status_code == 200


def test_serve_command_line(tmp_path, capsys):
    from dashboard import serve

    with pytest.raises(SystemExit):
        serve.build_parser().parse_args([])  # a scheduler source is required
    bad = tmp_path / "web.yml"
    bad.write_text("nonsense: 1\n")
    assert serve.main(["--snapshot", "x.json", "--web.config.file", str(bad)]) == 2
    snap = tmp_path / "snap.json"
    snap.write_text(dashboard_fake.snapshot().to_json())
    args = serve.build_parser().parse_args(["--snapshot", str(snap)])
    ds = serve.make_datasource(args)
    assert len(ds.snapshot().jobs) == 5 and ds.status().sources[0].ok
    targets = tmp_path / "targets.txt"
    targets.write_text("# agents\nnode0001:9810\n\nhttp://node0002:9810/metrics  # second\n")
    assert serve.read_targets(str(targets)) == ["node0001:9810", "http://node0002:9810/metrics"]
    with_metrics = serve.make_datasource(serve.build_parser().parse_args(["--snapshot", str(snap), "--targets", str(targets)]))
    assert with_metrics.metrics.targets == ["node0001:9810", "http://node0002:9810/metrics"]
    with_metrics.metrics.close()
    (tmp_path / "empty.txt").write_text("# nothing\n")
    assert serve.main(["--snapshot", str(snap), "--targets", str(tmp_path / "empty.txt")]) == 2
    missing = serve.make_datasource(serve.build_parser().parse_args(["--snapshot", str(tmp_path / "nope.json")]))
    st_ = missing.status()
    assert missing.snapshot() is None and not st_.sources[0].ok and st_.stale and "FileNotFoundError" in st_.sources[0].detail


# ------------------------------------------------------------------------------------- helpers

@settings(max_examples=60, deadline=None)
@given(st.integers(0, 900), st.integers(1, 60), st.integers(1, 450), st.integers(1, 300))
def test_aggregate_and_downsample_bound_the_figure(n, t, max_rows, max_cols):
    rng = np.random.default_rng(n * 7 + t)
    z = rng.random((n, t))
    z[rng.random((n, t)) < 0.1] = np.nan
    names = [f"n{i:04d}" for i in range(n)]
    labels, members, zz = aggregate_rows(names, z, max_rows)
    assert len(labels) == len(members) == zz.shape[0] <= max_rows
    assert sorted(x for m in members for x in m) == names
    times, zd = downsample_cols(np.arange(t, dtype=float), zz, max_cols)
    assert zd.shape == (zz.shape[0], len(times)) and len(times) <= max_cols
    if t and n:
        assert times[-1] == t - 1  # the newest sample is always kept


def test_incidents_group_by_culprit():
    vs = [Verdict("1", ("a",), 8, "stalled_io", 1.0, since=10, culprit="OST1", gpu_hours_lost=2.0),
          Verdict("2", ("b",), 8, "stalled_io", 1.0, since=5, culprit="OST1", gpu_hours_lost=3.0),
          Verdict("3", ("c",), 16, "hung", 1.0, since=7, gpu_hours_lost=4.0),
          Verdict("4", ("d",), 8, "progressing", 1.0, None)]
    inc = group_incidents(vs)
    assert [(i.culprit, i.jobs, i.gpu_hours_lost, i.since) for i in inc] == [
        ("OST1", ("1", "2"), 5.0, 5), ("job 3", ("3",), 4.0, 7)]


def test_figures_handle_missing_data():
    assert figures.heatmap(None).layout.annotations[0].text == "no data for this view"
    assert figures.node_lines(None, "gpu_util").layout.annotations
    assert figures.dependency_graph([], {}).layout.annotations
    fig = figures.freed_gpus(0.0, [(3600.0, 8), (-5.0, 4)], 2, (1800.0, 16, "9"), [("m", 100.0, 200.0)])
    assert list(fig.data[0].y)[:3] == [2, 2, 6] and max(fig.data[0].y) == 14


# ----------------------------------------------------------------------------------- simulator

def test_sim_datasource():
    from dashboard.analysis.sim import SimConfig, Simulation

    sim = Simulation(SimConfig(nodes=8, seed=2, start=NOW - 1200, history_seconds=1200,
                               faults="nccl_hang@2m+30m,ost_slow@3m+30m"))
    ds = SimDatasource(sim)
    st_ = ds.status()
    assert st_.simulated and st_.version == str(sim.steps)
    hm = ds.heatmap("gpu_util", 3600, max_rows=4, max_cols=30)
    assert hm.z.shape[0] == 4 and 20 <= hm.z.shape[1] <= 30 and hm.total_nodes == 8 and np.nanmax(hm.z) <= 100
    f = ds.findings()
    assert f.source == "diagnosis" and f.verdicts and f.generated_at == sim.t
    assert {v.jobid for v in f.verdicts} == {str(j) for j in sim.running}
    c = build_app(ds).server.test_client()
    doc = c.get("/api/v1/findings").json  # the diagnosis' numbers serialise (no numpy scalars leak)
    assert doc["source"] == "diagnosis" and len(doc["verdicts"]) == len(f.verdicts)
    assert c.get("/metrics").status_code == 200 and c.get("/api/v1/backfill").status_code == 200
    truth = ds._truth_findings()  # what the dashboard shows where no diagnosis is installed
    assert truth.source == "simulator ground truth" and "hung" in {v.state for v in truth.verdicts}
    for v in truth.verdicts:
        assert v.gpu_hours_lost > 0 and v.since is not None and v.evidence
        js = ds.job_series(v.jobid, "gpu_util")
        assert js.z.shape[0] == len(v.nodes) and not math.isnan(float(np.nanmax(js.z)))
    ns = ds.node_series("node0001", ("gpu_util", "io_read", "ib_tx"))
    assert ns.values["gpu_util"].shape[0] == 8 and ns.values["io_read"].shape[0] == 1
    assert ds.ost_series().z.shape[0] == len(sim.cluster.osts)
    assert ds.leaf_series().rows == tuple(sim.cluster.leaves)
    assert ds.backfill() is not None
    before = ds.heatmap("gpu_util")
    sim.step()
    assert ds.heatmap("gpu_util") is not before and ds.status().version == str(sim.steps)


def _text(component) -> str:
    from plotly.utils import PlotlyJSONEncoder

    return json.dumps(component, cls=PlotlyJSONEncoder)


def _links(component) -> list[str]:
    """The texts of the dcc.Link components inside a component tree, in document order."""
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in _links(c)]
    if isinstance(component, dcc.Link):
        return [str(component.children)]
    return _links(getattr(component, "children", None) or [])


def test_sim_inventory_network_storage():
    """Node hardware, switches and ports, filesystem targets: the simulated agent's counters, rates
    from two steps' samples (unknown before the second), and "unknown" where it exports nothing."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.pages import network, storage

    sim = Simulation(SimConfig(nodes=128, seed=2, start=NOW - 600, history_seconds=600,
                               faults="ost_slow@1m+30m,ib_congestion@1m+30m"))
    ds = SimDatasource(sim)
    first = {t.name: t for t in ds.storage_targets()}
    ost = first[sim.cluster.osts[0]]
    assert ost.kind == "OST" and ost.read_bps is not None and ost.write_bps is None and ost.latency_s is None
    assert ost.state == "connected" and {t.kind for t in first.values()} == {"OST", "MDT"}
    sim.step()
    targets = ds.storage_targets()
    lat = {t.name: t.latency_s for t in targets if t.kind == "OST" and t.latency_s is not None}
    assert lat and max(lat.values()) > 10 * min(lat.values())  # the slowed OST stands out
    assert all(t.ops_per_s is not None for t in targets)
    ctx = Ctx(lambda p: p)
    # only the slowed OST, at the diagnosis's own slow-target ratio (thresholds.latency_ratio)
    assert _text(storage.targets(ds)).count("(slow)") == 1

    net = ds.network()
    assert net.total_ports == 128 * 8 and [s.switch for s in net.switches] == list(sim.cluster.leaves)
    assert all(s.ports_down == 0 and s.errors_recent is not None for s in net.switches)
    hot = max(net.switches, key=lambda s: s.wait_per_s)
    assert net.ports[0].switch == hot.switch  # the most congested port sits on the congested leaf
    assert "(congested)" in _text(network.switches(ds, ctx))

    inv = ds.node_inventory("node0001")
    assert [g.index for g in inv.gpus] == list(range(8)) and inv.ports[0].device == "mlx5_0/1"
    assert inv.filesystems[0].fs == "lustre" and inv.filesystems[0].write_bps is not None
    assert inv.disks is None and inv.topology.known and ds.node_inventory("nope") is None
    # the simulated nodes are DGX H100-like: NVSwitch joins every pair, GPUs 0-3 on NUMA node 0, 4-7 on 1
    assert ds.gpu_topology("node0001").describe([0, 1]) == "all NVLink peers; NUMA 0"
    assert ds.gpu_topology("node0001").describe([3, 4]) == "all NVLink peers; NUMA 0,1"
    assert not ds.gpu_topology("nope").known
    text = _text(node.inventory(ds, ctx, "node0001", {}))
    assert "Disks unknown" in text and "GPU topology unknown" not in text and "1, 2, 3, 4, 5, 6, 7" in text


def test_gpu_topology_describe():
    from dashboard.datasource import GpuTopology

    topo = GpuTopology(frozenset({(0, 1), (2, 3)}), {0: 0, 1: 0, 2: 1, 3: 1})
    assert topo.describe([0, 1]) == "all NVLink peers; NUMA 0"
    assert topo.describe([1, 2]) == "0 of 1 pairs NVLink peers, the rest over PCIe; NUMA 0,1"
    assert GpuTopology().describe([0, 1]) == "unknown" and GpuTopology(None, {0: 1}).describe([0]) == "NUMA 1"


def test_heatmap_png_and_first_view(fake):
    ds, app, ctx = fake
    uri, unit = figures.heatmap_png(ds.heatmap("gpu_util"))
    png = base64.b64decode(uri.split(",", 1)[1])
    assert uri.startswith("data:image/png;base64,") and png[:8] == b"\x89PNG\r\n\x1a\n" and unit == "%"
    assert figures.heatmap_png(None) is None
    graph, drawn = overview.mount_heatmap(ds, "dark")
    assert graph.id == ids.OV_HEATMAP and drawn == {"v": ds.status().version, "theme": "dark"}
    # the router leaves the server-rendered first page alone, and renders on navigation
    from dashboard.app import route_page

    assert route_page(ds, ctx, "jobs/4001", "jobs/4001") == (no_update, no_update)
    page, path = route_page(ds, ctx, "jobs/4001", "")
    assert path == "jobs/4001" and page is not no_update
    c = app.server.test_client()
    assert c.get("/gw/").status_code == 200 and "rel=\"preload\"" in c.get("/gw/").get_data(as_text=True)
    doc = c.get("/gw/_dash-layout", headers={"Referer": "http://x/gw/jobs/4001"}).json
    assert "4001" in json.dumps(doc) and ids.RENDERED in json.dumps(doc)


def test_sim_datasource_background_mode():
    from dashboard.analysis.sim import SimConfig, Simulation

    sim = Simulation(SimConfig(nodes=8, seed=2, start=NOW - 600, history_seconds=600, faults="none"))
    ds = SimDatasource(sim, background=True)
    try:
        assert ds.version() == str(sim.steps)
        first = ds.findings()
        with ds.lock:
            sim.step()
        for _ in range(100):
            if ds.version() == str(sim.steps):
                break
            import time

            time.sleep(0.05)
        assert ds.version() == str(sim.steps) and ds.findings() is not first
    finally:
        ds.close()


def test_live_datasource_with_a_metric_source():
    """serve's datasource over a metric source's window (here the simulator's, through the same
    Window every source builds): series for every page, and the diagnosis run in refresh_metrics()."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.slurm_view import build_snapshot
    from dashboard.datasource import LiveDatasource
    from dashboard.sources.simulated import window_from_history

    sim = Simulation(SimConfig(nodes=8, seed=2, start=NOW - 1200, history_seconds=1200,
                               faults="nccl_hang@2m+30m"))

    class Metrics:
        name = "test"

        def window(self):
            return window_from_history(sim)

    ds = LiveDatasource(lambda: build_snapshot(sim), "test snapshot", clock=lambda: sim.t, metrics=Metrics())
    assert ds.heatmap() is None and ds.findings().source == "none"  # nothing until the first refresh
    ds.refresh_metrics()
    st_ = ds.status()
    assert [s.ok for s in st_.sources] == [True, True] and st_.sources[1].name == "metrics (test)"
    f = ds.findings()
    assert f.source == "diagnosis" and {v.jobid for v in f.verdicts} == {str(j) for j in sim.running}
    hm = ds.heatmap("gpu_util")
    assert hm.total_nodes == 8 and hm.z.shape[0] == 8 and np.nanmax(hm.z) <= 100
    job = next(j for j in ds.snapshot().jobs if j.state == "RUNNING" and j.gang_size > 1)
    js = ds.job_series(str(job.job_id), "gpu_util")
    assert js.rows == job.nodes
    ns = ds.node_series("node0001", ("gpu_util", "ib_tx", "io_read", "gpu_temp"))
    assert ns.values["gpu_util"].shape[0] == 8 and "gpu_temp" not in ns.values  # the window has no temperature
    assert ds.ost_series().rows == tuple(sim.cluster.osts) and ds.leaf_series().rows == tuple(sim.cluster.leaves)
    assert ds.leaf_of("node0001") == "leaf00"
    # inventory from the same window: what it holds, and unknown (None) for what it does not
    net = ds.network()
    assert [s.switch for s in net.switches] == list(sim.cluster.leaves) and net.total_ports == 8 * 8
    assert net.switches[0].ports_down is None and net.ports[0].up is None and net.ports[0].tx_bps is not None
    targets = ds.storage_targets()
    assert [t.name for t in targets] == list(sim.cluster.osts) and all(t.read_bps is not None for t in targets)
    assert {t.kind for t in targets} == {"OST"} and targets[0].state == "unknown"
    inv = ds.node_inventory("node0001")
    assert len(inv.gpus) == 8 and inv.gpus[0].temp_c is None and len(inv.ports) == 8 and inv.disks is None
    assert inv.filesystems[0].targets == len(sim.cluster.osts)
    # the simulated agents export gangwatch_gpu_nvlink_peer_info / gangwatch_gpu_affinity_info
    assert inv.topology.known and inv.topology.numa == {k: k // 4 for k in range(8)}

    class Down:
        name = "down"

        def window(self):
            raise ConnectionError("refused")

    bad = LiveDatasource(lambda: build_snapshot(sim), "test snapshot", clock=lambda: sim.t, metrics=Down())
    bad.refresh_metrics()
    st_ = bad.status()
    assert not st_.sources[1].ok and "refused" in st_.sources[1].detail and st_.stale
    assert bad.heatmap() is None


def test_controller_outage_banner_keeps_last_data_with_its_start():
    """A stale snapshot (the exporter's polls failing) stays on screen; the banner on every page says
    since when the controller is unreachable, and why."""
    from dataclasses import replace

    from collectors.slurm.model import SourceError
    from dashboard.app import stale_banner
    from dashboard.datasource import LiveDatasource

    good = dashboard_fake.datasource().snapshot()
    stale = replace(good, stale=True, failing_since=good.taken_at + 30, last_attempt=good.taken_at + 90,
                    errors=(SourceError("squeue --json", "slurm reported: Failed while looking for jobs"),))
    ds = LiveDatasource(lambda: stale, "slurm-exporter", clock=lambda: good.taken_at + 100)
    assert ds.snapshot().jobs == good.jobs
    st_ = ds.status()
    src = st_.sources[0]
    assert not src.ok and src.age_seconds == 100 and st_.stale
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(good.taken_at + 30))
    assert src.detail.startswith(f"controller unreachable since {since}") and "Failed while looking for jobs" in src.detail
    assert "controller unreachable since" in str(stale_banner(st_))


def test_overview_losses_known_where_the_source_knows_them():
    """The simulator's ground truth names only faulted jobs: none faulted is 0 lost, not unknown;
    a diagnosis with no verdict for running jobs, or no diagnosis at all, is unknown."""
    from dashboard.datasource import Findings
    from dashboard.pages.overview import lost_unknown

    assert lost_unknown(Findings(NOW, "simulator ground truth"), 3) == (False, "")
    assert lost_unknown(Findings(NOW, "diagnosis"), 3)[0] and lost_unknown(Findings(NOW, "none"), 3)[0]
    assert lost_unknown(Findings(NOW, "none"), 0) == (False, "")


def test_pages_refresh_on_tick():
    """Storage, Network and Queue register their refresh through ui.refresh_on_tick: figures at load,
    on each tick and theme change; tables (already in the layout) on ticks only."""
    from dash.dependencies import Input, Output

    from dashboard.pages import network, storage

    class App:
        def __init__(self):
            self.callbacks = []

        def callback(self, *deps, prevent_initial_call=False):
            def add(fn):
                self.callbacks.append(([d for d in deps if isinstance(d, Output)],
                                       [d for d in deps if isinstance(d, Input)], prevent_initial_call, fn))
                return fn
            return add

    ds, ctx = dashboard_fake.datasource(), Ctx(lambda p: p)
    for page, figs, tables in ((storage, [ids.STORAGE_HEATMAP], [ids.STORAGE_TARGETS, ids.STORAGE_TOP]),
                               (network, [ids.NETWORK_HEATMAP], [ids.NETWORK_TABLES, ids.NETWORK_GANGS]),
                               (queue, [ids.QUEUE_TIMELINE, ids.QUEUE_FREED, ids.QUEUE_DEPS], [ids.QUEUE_PLAN, ids.QUEUE_WHY])):
        app = App()
        page.register(app, ds, ctx)
        (fo, fi, f_later, draw), (to, ti, t_later, render) = app.callbacks
        assert [(o.component_id, o.component_property) for o in fo] == [(i, "figure") for i in figs]
        assert [i.component_id for i in fi] == [ids.REFRESH, ids.THEME] and not f_later
        assert [(o.component_id, o.component_property) for o in to] == [(i, "children") for i in tables]
        assert [i.component_id for i in ti] == [ids.REFRESH] and t_later
        drawn, rendered = draw(1, "dark"), render(1)
        drawn = drawn if len(figs) > 1 else (drawn,)
        assert len(drawn) == len(figs) and all("data" in go.Figure(f).to_dict() for f in drawn)
        assert len(rendered) == len(tables) and all(hasattr(c, "to_plotly_json") for c in rendered)
