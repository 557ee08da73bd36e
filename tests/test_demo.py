"""`gangwatch demo` over HTTP: the endpoints, and a real Prometheus scraping every virtual node."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from collectors.exposition import iter_samples
from collectors.slurm.model import Snapshot
from collectors.web import make_server, serve_in_thread
from dashboard.analysis.sim import SimConfig, Simulation
from dashboard.demo import Demo, build_dashboard, main, prometheus_config

T0 = 1_767_225_600.0


@pytest.fixture
def served():
    """A demo on a free loopback port; yields (demo, base URL); everything stops afterwards."""
    started = []

    def start(nodes=8, faults="none", **kw):
        sim = Simulation(SimConfig(nodes=nodes, seed=1, start=T0, history_seconds=600, faults=faults, **kw))
        demo = Demo(sim, speed=0)
        server = make_server("127.0.0.1:0", demo.routes())
        demo.public_address = "127.0.0.1:%d" % server.server_address[1]
        serve_in_thread(server)
        started.append((demo, server))
        return demo, f"http://{demo.public_address}"

    yield start
    for demo, server in started:
        demo.stop()
        server.shutdown()
        server.server_close()


def get(url: str, timeout: float = 10) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def test_endpoints(served):
    demo, base = served(nodes=8, trace=None)
    status, ctype, page = get(base + "/")
    assert status == 200 and "text/html" in ctype and "SIMULATED" in page
    assert 'href="/metrics?target=node0001"' in page and 'href="/slurm/metrics"' in page
    status, _, text = get(base + "/slurm/metrics")
    samples = list(iter_samples(text))
    names = {n for n, _, _ in samples}
    assert {"gangwatch_slurm_node_gpus", "gangwatch_slurm_job_node_gpus", "gangwatch_sim_info", "gangwatch_slurm_up"} <= names
    node_gpus = [(lbl["node"], v) for n, lbl, v in samples if n == "gangwatch_slurm_node_gpus"]
    assert sorted(node_gpus) == [(f"node{i:04d}", 8.0) for i in range(1, 9)]
    # the simulated fabric, as in /sim/topology.conf: 8 nodes under one leaf
    switch = sorted((lbl["node"], lbl["switch"], v) for n, lbl, v in samples if n == "gangwatch_slurm_node_switch_info")
    assert switch == [(f"node{i:04d}", "leaf00", 1.0) for i in range(1, 9)]
    assert get(base + "/findings/metrics")[0] == 404
    status, ctype, text = get(base + "/metrics?target=node0005")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    gpus = {lbl["gpu"] for n, lbl, _ in iter_samples(text) if n == "gangwatch_gpu_utilization_ratio"}
    assert gpus == {str(k) for k in range(8)}
    # the agent's rollups come along (tests/test_sim.py checks them against the devices), not the opt-in PCIe series
    rollups = {n: v for n, lbl, v in iter_samples(text) if not lbl}
    assert rollups["gangwatch_gpu_node_gpus"] == 8 and rollups["gangwatch_infiniband_node_ports_down"] == 0
    assert rollups["gangwatch_scrape_collectors_failed"] == 0
    assert "gangwatch_gpu_pcie_throughput_bytes_per_second" not in text
    assert get(base + "/metrics?target=node9999")[0] == 404
    status, _, body = get(base + "/api/v1/snapshot")
    snap = Snapshot.from_json(body)
    assert snap.source == "simulator" and len(snap.nodes) == 8 and snap.taken_at == demo.sim.t
    status, _, body = get(base + "/api/v1/sim/faults")
    assert json.loads(body)["simulated"] is True
    assert "SwitchName=leaf00 Nodes=node[0001-0008]" in get(base + "/sim/topology.conf")[2]
    assert json.loads(get(base + "/healthz")[2])["status"] == "ok"
    before = demo.sim.t
    demo.advance(2)
    assert demo.sim.t == before + 30 and Snapshot.from_json(get(base + "/api/v1/snapshot")[2]).taken_at == before + 30


def test_metrics_without_dashboard_are_serves_findings(served):
    """--no-dashboard: /metrics is what serve exports, from the demo's own diagnosis and backfill
    plan, computed once per simulated step; every running job is judged or counted."""
    demo, base = served(nodes=8, faults="default")
    status, ctype, text = get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    samples = list(iter_samples(text))
    names = {n for n, _, _ in samples}
    assert {"gangwatch_job_stalled", "gangwatch_job_verdict_info", "gangwatch_diagnosis_jobs",
            "gangwatch_backfill_startable_jobs", "gangwatch_backfill_idle_gpus"} <= names
    assert not any(n.startswith(("gangwatch_slurm_", "gangwatch_gpu_")) for n in names)
    judged = sum(v for n, _, v in samples if n == "gangwatch_diagnosis_jobs")
    assert judged == len(demo.sim.running)
    parts = {lbl["partition"] for n, lbl, _ in samples if n == "gangwatch_backfill_idle_gpus"}
    assert parts == {p.name for p in demo.snapshot().partitions}
    assert get(base + "/metrics")[2] == text  # cached within a step
    demo.advance()
    assert get(base + "/metrics")[2] != text


def test_backfill_families():
    from collectors.exposition import encode
    from dashboard.analysis.planner import BackfillPlan, PartitionPlan, Startable, Window
    from dashboard.findings_api import backfill_families

    part = PartitionPlan("gpu", True, 4, 3, None, (Window(2, 8, 64, None, "n[1-2]"), Window(1, 4, 32, T0, "n3")),
                         (Startable("7", ("n1",), T0 + 60, "backfill"),), ())
    gone = PartitionPlan("old", False, 0, 0, None, (), (), ())
    text = encode(backfill_families(BackfillPlan(T0, (part, gone))))
    got = {(n, tuple(sorted(lbl.items()))): v for n, lbl, v in iter_samples(text)}
    assert got == {("gangwatch_backfill_startable_jobs", (("partition", "gpu"),)): 1.0,
                   ("gangwatch_backfill_idle_gpus", (("partition", "gpu"),)): 20.0}
    # no plan: no series (unknown is not zero)
    assert not list(iter_samples(encode(backfill_families(None))))


def test_serve_metrics_include_the_backfill_plan():
    """`serve`'s own /metrics (dashboard/app.py) carries the plan's series too, as the demo's does."""
    from dashboard.app import build_app
    from dashboard.datasource import SimDatasource

    ds = SimDatasource(Simulation(SimConfig(nodes=8, seed=1, start=T0, history_seconds=600, faults="none")))
    text = build_app(ds).server.test_client().get("/metrics").get_data(as_text=True)
    idle = {lbl["partition"]: v for n, lbl, v in iter_samples(text) if n == "gangwatch_backfill_idle_gpus"}
    assert set(idle) == {"gpu", "debug"} and all(v >= 0 for v in idle.values())


def test_dashboard_is_mounted_with_the_simulator_endpoints_beside_it():
    sim = Simulation(SimConfig(nodes=8, seed=1, start=T0, history_seconds=900, faults="default"))
    demo = Demo(sim, speed=0)
    app, ds = build_dashboard(demo)
    try:
        client = app.server.test_client()
        page = client.get("/")
        assert page.status_code == 200 and "SIMULATED" in page.get_data(as_text=True)
        assert "SIMULATED" in client.get("/_dash-layout").get_data(as_text=True)  # the badge on every page
        # /metrics is serve's (findings, backfill, serve's own health); the exporter is on /slurm/metrics
        names = {n for n, _, _ in iter_samples(client.get("/metrics").get_data(as_text=True))}
        assert {"gangwatch_job_stalled", "gangwatch_backfill_idle_gpus", "gangwatch_serve_info"} <= names
        assert not any(n.startswith("gangwatch_slurm_") for n in names)
        slurm = {n for n, _, _ in iter_samples(client.get("/slurm/metrics").get_data(as_text=True))}
        assert {"gangwatch_slurm_node_gpus", "gangwatch_slurm_node_switch_info"} <= slurm
        node = client.get("/metrics?target=node0002").get_data(as_text=True)
        assert 'gangwatch_gpu_utilization_ratio{gpu="7"}' in node
        assert client.get("/metrics?target=nope").status_code == 404
        # gone: the path falls through to the dashboard's pages (Dash answers any path with its shell)
        assert "gangwatch_job_stalled" not in client.get("/findings/metrics").get_data(as_text=True)
        assert client.get("/api/v1/findings").status_code == 200
        assert Snapshot.from_json(client.get("/api/v1/snapshot").get_data()).source == "simulator"
        assert json.loads(client.get("/healthz").get_data())["simulated"] is True
        sim_page = client.get("/sim/").get_data(as_text=True)
        assert "SIMULATED" in sim_page and 'href="/"' in sim_page
        yml = client.get("/sim/prometheus.yml", headers={"Host": "demo.example:8050"}).get_data(as_text=True)
        assert "replacement: 'demo.example:8050'" in yml
        assert [c["job_name"] for c in yaml.safe_load(yml)["scrape_configs"]] == \
            ["gangwatch-agent", "gangwatch-slurm", "gangwatch-serve"]
    finally:
        ds.close()


def test_landing_page_escapes_user_strings(served, fixtures_dir):
    trace = str(fixtures_dir.parent / "traces" / "microsoft-itp-2021-raw-traces.tar.gz") + "#cluster10"
    demo, base = served(nodes=4)
    object.__setattr__(demo.sim.cfg, "trace", trace + "<script>x</script>")
    page = get(base + "/")[2]
    assert "<script>x" not in page and "&lt;script&gt;x" in page


def test_bad_flags_exit_2(capsys, tmp_path):
    assert main(["--faults", "bogus@1m", "--nodes", "2"]) == 2
    assert "unknown fault" in capsys.readouterr().err
    assert main(["--trace", "/nonexistent.csv", "--nodes", "2"]) == 2
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar archive")
    assert main(["--trace", str(broken), "--nodes", "2"]) == 2
    assert "cannot read trace archive" in capsys.readouterr().err


def test_clock_thread_advances_at_the_given_speed():
    sim = Simulation(SimConfig(nodes=2, seed=1, start=T0, history_seconds=60, faults="none"))
    demo = Demo(sim, speed=1500.0)  # one 15 s step every 10 ms
    before = sim.steps
    thread = demo.start()
    time.sleep(0.5)
    demo.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert 5 <= sim.steps - before <= 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, promql: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        status, _, body = get(url, timeout=5)
    except OSError:  # not listening yet
        return []
    return json.loads(body)["data"]["result"] if status == 200 else []


@pytest.mark.prometheus
def test_real_prometheus_scrapes_every_virtual_node(served, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip("Debian's prometheus is not installed")
    # 16 healthy nodes and one whose endpoint hangs: Prometheus must see 16 up and 1 down
    demo, base = served(nodes=17, faults="scrape_hang@0s+2h:node=node0017")
    cfg = prometheus_config(demo.sim.cluster.names, demo.public_address)
    cfg = "global: {scrape_interval: 1s, scrape_timeout: 900ms}\n" + cfg
    (tmp_path / "prometheus.yml").write_text(cfg)
    port = _free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        up: dict[str, float] = {}
        deadline = time.monotonic() + 40  # the first scrape comes ~5 s after start
        while time.monotonic() < deadline:
            res = _query(port, 'up{job="gangwatch-agent"}')
            up = {r["metric"]["instance"]: float(r["value"][1]) for r in res}
            if len(up) == 17 and sum(up.values()) == 16:
                break
            time.sleep(0.3)
        assert {k for k, v in up.items() if v == 1} == {f"node{i:04d}" for i in range(1, 17)}, up
        assert up.get("node0017") == 0
        # the scraped series carry the agent's names, one per GPU of every node
        res = _query(port, 'count by (instance) (gangwatch_gpu_utilization_ratio)')
        assert {r["metric"]["instance"]: r["value"][1] for r in res} == {f"node{i:04d}": "8" for i in range(1, 17)}
        # ... and the node rollups the rules read, one series per node
        res = _query(port, 'gangwatch_gpu_node_gpus{job="gangwatch-agent"}')
        assert {r["metric"]["instance"]: r["value"][1] for r in res} == {f"node{i:04d}": "8" for i in range(1, 17)}
        assert _query(port, 'gangwatch_slurm_up{job="gangwatch-slurm"}')[0]["value"][1] == "1"
        # the agent series carry `node` = the node name, as the rules join them with Slurm's
        assert {r["metric"]["node"] for r in _query(port, 'gangwatch_gpu_info{gpu="0"}')} >= {"node0001", "node0016"}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_default_demo_shows_every_feature_at_start():
    """`gangwatch demo` with no flags: within its first minute the queue, the reservation, the
    pipelines, fairshare, a suspended job, placement findings and every fault kind are there."""
    from dashboard.analysis.sim.faults import KINDS, ROCE_KINDS
    from dashboard.demo import build_parser, sim_config
    from dashboard.units import fmt_value

    sim = Simulation(sim_config(build_parser().parse_args([]), T0 + 3600))
    assert sim.cfg.nodes == 64 and sim.cfg.load > 1
    demo = Demo(sim, speed=0)
    demo.advance(4)  # the first minute
    app, ds = build_dashboard(demo)
    try:
        client = app.server.test_client()
        plan = json.loads(client.get("/api/v1/backfill").get_data())
        gpu = next(p for p in plan["partitions"] if p["partition"] == "gpu")
        assert gpu["top_job"] and gpu["top_job"]["shadow_time"] > sim.t
        assert gpu["windows"] and gpu["startable"]
        assert any(w["reasons"] for w in gpu["why"])
        snap = Snapshot.from_json(client.get("/api/v1/snapshot").get_data())
        waiting = [j for j in snap.jobs if j.state == "PENDING"]
        assert max(j.gpus for j in waiting) >= 32  # big gangs wait
        assert snap.reservations and "MAINT" in snap.reservations[0].flags and snap.reservations[0].start_time > sim.t
        assert {j.reason for j in waiting} >= {"Dependency", "DependencyNeverSatisfied", "Priority", "Resources"}
        never = next(j for j in waiting if j.reason == "DependencyNeverSatisfied")
        assert never.dependencies[0].kind == "afterok" and never.dependencies[0].state == "failed"
        assert any(j.state == "SUSPENDED" for j in snap.jobs)
        accounts = [r for r in snap.fairshare if r.depth == 1]
        assert len(accounts) >= 3 and len({round(r.fairshare, 3) for r in accounts}) >= 3
        assert all(j.priority_factors and j.priority_factors.fairshare for j in waiting)
        findings = json.loads(client.get("/api/v1/findings").get_data())
        verdicts = findings["verdicts"]
        states = {v["state"] for v in verdicts}
        assert {"stalled_io", "stalled_network", "straggler", "hung", "idle_gpus", "suspended"} <= states, states
        # a job of 4 GPUs given GPUs 2-5 (two per CPU socket), beside the gangs that span a node's both
        assert any(p["kind"] == "gpus_span_numa" and v["gpus"] < 8 for v in verdicts for p in v.get("placement", ()))
        active = {kind for kind, _ in ((af.spec.kind, af) for af in sim.active)}
        assert active == set(KINDS) - ROCE_KINDS  # and on --fabric roce those too: tests/test_diagnose_roce.py
        node = client.get("/metrics?target=node0002").get_data(as_text=True)
        assert "gangwatch_gpu_nvlink_peer_info{" in node and 'gangwatch_gpu_affinity_info{gpu="7",numa_node="1"' in node
    finally:
        ds.close()
    assert fmt_value("gpu_sm_clock", 1_088_999_936.0) == "1.09 GHz" and fmt_value("ib_tx", 3.2e9) == "3.20 GB/s"
    assert fmt_value("sm", 0.152) == "15.2 %" and fmt_value("power", 412.4) == "412 W"
    assert fmt_value("unknown_signal", 2.5) == "2.50" and fmt_value("sm", None) == "—"
