"""End to end through a real Prometheus: a simulated scenario written as a bundle, loaded with
`promtool tsdb create-blocks-from openmetrics`, served by `prometheus`, read back through the
Prometheus source (aggregated queries), gives the same verdicts and culprits as the bundle itself;
`gangwatch capture` from that Prometheus writes a bundle that does too. Skipped when promtool or
prometheus is not installed (tests/run-all.sh installs the Debian package)."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx
import pytest

from dashboard.sources.prometheus import QUERY_BUDGET
from tests.conftest import which

pytestmark = pytest.mark.skipif(not (which("promtool") and which("prometheus")), reason="needs promtool and prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root, sim, steps: int):
    """The simulator's bundle after `steps` steps, imported into a real Prometheus: (url, bundle)."""
    from dashboard.sources.simulated import BundleWriter

    bundle = root / "bundle"
    BundleWriter(sim).run(steps).write(str(bundle))
    data = root / "data"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(bundle / "metrics.om"), str(data)],
                   check=True, capture_output=True, timeout=120)
    (root / "prom.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = _free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={root / 'prom.yml'}", f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield url, bundle
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from dashboard.analysis.sim import SimConfig, Simulation

    root = tmp_path_factory.mktemp("prom")
    sim = Simulation(SimConfig(nodes=10, seed=3, prefill=False, nodes_per_leaf=4,
                               faults="ost_slow@12m+20m,gpu_throttle@5m+40m,idle_gpus@8m+30m,nccl_hang@10m+30m"))
    for url, bundle in _serve(root, sim, 72):
        yield url, bundle, root


def _verdicts(d):
    return {v.jobid: (v.state, v.culprit) for v in d.verdicts}


def test_prometheus_source_matches_bundle(served):
    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    url, bundle, _ = served
    b = load_bundle(str(bundle))
    want = _verdicts(diagnose(b.window, b.jobs))
    assert {s for s, _ in want.values()} - {"progressing", "insufficient_data"}
    src = PrometheusSource(url)
    win = src.window(b.end, b.end - b.start, 15.0)
    assert src.queries_last_cycle <= QUERY_BUDGET and not win.notes
    assert _verdicts(diagnose(win, b.jobs)) == want


def test_capture_from_prometheus_matches_bundle(served):
    from dashboard.analysis.diagnose import diagnose
    from dashboard.capture_cli import main as capture
    from dashboard.sources.bundle import load_bundle

    url, bundle, root = served
    b = load_bundle(str(bundle))
    out = root / "captured"
    assert capture(["--prometheus", url, "--out", str(out), "--at", str(b.end), "--span", str(b.end - b.start),
                    "--snapshot", str(bundle / "squeue.json")]) == 0
    c = load_bundle(str(out))
    assert _verdicts(diagnose(c.window, c.jobs)) == _verdicts(diagnose(b.window, b.jobs))


def test_diagnose_cli_against_prometheus(served, capsys):
    import json

    from dashboard.diagnose_cli import main
    from dashboard.sources.bundle import load_bundle

    url, bundle, _ = served
    b = load_bundle(str(bundle))
    assert main(["--prometheus", url, "--snapshot", str(bundle / "squeue.json"), "--at", str(b.end),
                 "--span", str(b.end - b.start), "--topology", str(bundle / "topology.conf"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(n.startswith("Prometheus: ") and int(n.split()[1]) <= QUERY_BUDGET for n in doc["notes"])
    assert {v["state"] for v in doc["verdicts"]} - {"progressing", "insufficient_data"}


def test_prometheus_source_matches_bundle_on_roce(tmp_path):
    """RoCE's signals share one query (each part labelled with its signal) and its ECN marks and CNPs
    are added up by PromQL as the bundle reader adds them: the same verdicts either way."""
    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults="ib_congestion@8m+30m:leaf=leaf00"))
    for url, bundle in _serve(tmp_path, sim, 56):
        b = load_bundle(str(bundle))
        want = _verdicts(diagnose(b.window, b.jobs))
        assert "stalled_network" in {s for s, _ in want.values()}
        src = PrometheusSource(url)
        win = src.window(b.end, b.end - b.start, 15.0)
        assert src.queries_last_cycle <= QUERY_BUDGET and not win.notes
        assert "roce_cong" in win.rail and "roce_err" in win.rail
        assert _verdicts(diagnose(win, b.jobs)) == want


def test_prometheus_source_reads_nic_link_downs_on_roce(tmp_path):
    """The ethtool rollups (PFC pause, link-down events) share one query: the NICs' link-down events
    read through Prometheus find the flapping link's node as the bundle does, within the budget."""
    import dataclasses

    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults="link_flap@8m+20m"))
    node = None
    for url, bundle in _serve(tmp_path, sim, 56):
        (fault,) = sim.ground_truth()
        node, job = fault["culprit"].split()[0], next(iter(fault["jobs"]))
        b = load_bundle(str(bundle))
        src = PrometheusSource(url)
        win = src.window(b.end, b.end - b.start, 15.0)
        assert src.queries_last_cycle <= QUERY_BUDGET and not win.notes
        assert "eth_down" in win.node and "eth_pause" in win.node
        assert _verdicts(diagnose(win, b.jobs)) == _verdicts(diagnose(b.window, b.jobs))

        def nic_only(w):  # a site whose RDMA counters say nothing of the drop
            return dataclasses.replace(w, rail={k: v for k, v in w.rail.items() if k not in ("ib_down", "ib_err", "roce_err")})

        got = _verdicts(diagnose(nic_only(win), b.jobs))
        assert got == _verdicts(diagnose(nic_only(b.window), b.jobs))
        assert got[job] == ("stalled_network", node)
    assert node is not None


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian package prometheus) not installed")
@pytest.mark.parametrize("scrape", [15, 60])
def test_event_counters_are_counted_off_the_scrape_grid(tmp_path, scrape):
    """Live scrapes are never on the query's grid: at 67 s, with samples every 15 s (or 60 s) from
    0 s, Prometheus' `increase(x[15s])` sees one sample and returns nothing, so a link that went down
    would be unknown. The diagnosis's event query (evaluated by promtool's PromQL engine) counts the
    drop once, at the first step that sees it, and nothing at the steps around it."""
    import subprocess

    import yaml

    from dashboard.sources.prometheus import plan_queries

    (query,) = [q for s, _, q in plan_queries() if s == "ib_down"]
    n = 6 if scrape == 15 else 3
    values = " ".join(["0"] * n + ["1"] * n)  # the link went down between sample n-1 and n
    went = n * scrape
    first = next(t for t in (went + k * 15 + 7 for k in range(-2, 8)) if t >= went)
    tests = [{"interval": f"{scrape}s",
              "input_series": [{"series": 'node_infiniband_link_downed_total{device="mlx5_0",port="1",instance="n1:9100"}',
                                "values": values}],
              "promql_expr_test": (
                  [{"expr": query, "eval_time": f"{first}s",
                    "exp_samples": [{"labels": '{device="mlx5_0",instance="n1:9100",port="1"}', "value": 1}]},
                   {"expr": "increase(node_infiniband_link_downed_total[15s])", "eval_time": f"{first}s", "exp_samples": []}]
                  + [{"expr": query, "eval_time": f"{t}s",
                      "exp_samples": [{"labels": '{device="mlx5_0",instance="n1:9100",port="1"}', "value": 0}]}
                     for t in (first - 15, first + 15)])}]
    f = tmp_path / "t.yml"
    f.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "15s", "tests": tests}))
    r = subprocess.run(["promtool", "test", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
