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
import numpy as np
import pytest

from dashboard.sources.prometheus import QUERY_BUDGET
from tests.conftest import which

pytestmark = pytest.mark.skipif(not (which("promtool") and which("prometheus")), reason="needs promtool and prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str) -> None:
    for _ in range(100):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def _serve(root, sim, steps: int, edit=None, rewrite=None, **renderer):
    """The simulator's bundle after `steps` steps (its metrics passed through `edit(line) -> keep`
    where given, then `rewrite(text) -> text`; `renderer`: NodeRenderer's options), imported into a
    real Prometheus: (url, bundle)."""
    from dashboard.sources.simulated import BundleWriter

    bundle = root / "bundle"
    BundleWriter(sim, **renderer).run(steps).write(str(bundle))
    om = bundle / "metrics.om"
    if edit is not None:
        om.write_text("".join(line for line in om.read_text().splitlines(keepends=True) if edit(line)))
    if rewrite is not None:
        om.write_text(rewrite(om.read_text()))
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
        _wait_ready(url + "/-/ready")
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
    assert win.link_layers == b.window.link_layers and len(win.link_layers) == 10
    assert {layer for d in win.link_layers.values() for layer in d.values()} == {"InfiniBand"}
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


@pytest.mark.parametrize("fault", ["ib_congestion@8m+30m:leaf=leaf00", "pfc_storm@8m+20m"])
def test_prometheus_source_matches_bundle_on_roce(tmp_path, fault):
    """RoCE's counters read as they stand (ECN marks and CNPs raw, their rates worked out and added up
    by serve; the transport errors with InfiniBand's symbol errors, their step increases added up)
    give the window the engine's own sums gave, to the bit, and the verdicts the bundle gives; a
    PFC storm's source named through the ethtool rollups' shared query."""
    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.build import SignalStore
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource, add_matrix, plan_queries
    from dashboard.sources.schema import NodeMatcher

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults=fault))
    for url, bundle in _serve(tmp_path, sim, 56):
        b = load_bundle(str(bundle))
        want = _verdicts(diagnose(b.window, b.jobs))
        assert "stalled_network" in {s for s, _ in want.values()}
        src = PrometheusSource(url)
        win = src.window(b.end, b.end - b.start, 15.0)
        assert src.queries_last_cycle <= QUERY_BUDGET and not win.notes
        assert "roce_cong" in win.rail and "roce_err" in win.rail
        # the ports' link layers, asked with the hardware facts, as the bundle has them
        assert win.link_layers == b.window.link_layers and len(win.link_layers) == 8
        assert {layer for d in win.link_layers.values() for layer in d.values()} == {"Ethernet"}
        assert _verdicts(diagnose(win, b.jobs)) == want
        engine = {s: q for s, _, q in plan_queries(60.0, 15.0, by_engine=True)}  # sum by (rate), c - c offset
        store = SignalStore()
        for signal in ("roce_cong", "roce_err"):
            r = httpx.get(url + "/api/v1/query_range", params={"query": engine[signal], "start": win.start,
                                                               "end": win.end, "step": 15})
            add_matrix(store, signal, "rail", r.json()["data"], NodeMatcher())
        ref = store.window(win.start, win.end, 15.0)
        for signal in ("roce_cong", "roce_err"):
            assert np.nansum(win.rail[signal]) > 0 and np.array_equal(win.rail[signal], ref.rail[signal], equal_nan=True)
        # and a steady source's, its columns moved along and the newest added up alone
        steady = PrometheusSource(url)
        for back in (4, 2, 1, 0):
            got = steady.window(b.end - 15 * back, b.end - b.start, 15.0)
        assert steady._grid.moved > 0
        for signal in ("roce_cong", "roce_err"):
            assert np.array_equal(got.rail[signal], win.rail[signal], equal_nan=True)
        if fault.startswith("pfc_storm"):
            (truth,) = sim.ground_truth()
            assert np.array_equal(np.nan_to_num(win.node["eth_storm"]), np.nan_to_num(b.window.node["eth_storm"]))
            assert {c for s, c in want.values() if s == "stalled_network"} == {truth["culprit"]}


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


# each vendor's counters as node_exporter's ethtool collector names them (lower case, `.` -> `_`,
# rx -> received): its global pause counter (IEEE 802.3's PAUSE frames), priority 3's PFC frames
# (the RoCE traffic class) and priority 0's
PAUSE_COUNTERS = {
    "mlx5": {"received_pause_ctrl_phy": 0, "received_prio3_pause": 1, "received_prio0_pause": 0},
    # ice (E810): link_xoff_rx.nic, rx_priority_3_xoff.nic
    "ice": {"link_xoff_received_nic": 0, "received_priority_3_xoff_nic": 1, "received_priority_0_xoff_nic": 0},
}


def _pfc_as_node_exporter_reads_it(text: str, vendor: str = "mlx5") -> str:
    """A node_exporter-only RoCE site running PFC: no RDMA hw_counters (the agent's roce families
    gone), and the agent's pause rollup as a vendor's counters of two NICs a node, as node_exporter's
    ethtool collector names them (untyped, no _total): the pauses in priority 3's counter, the
    global one and the other priorities standing at 0."""
    rollup = "gangwatch_ethtool_node_received_pause_frames"
    parts = PAUSE_COUNTERS[vendor]
    out, fams = [], {name: [] for name in parts}
    for line in text.splitlines(keepends=True):
        if line.startswith(("gangwatch_roce_", "# TYPE gangwatch_roce_", "# HELP gangwatch_roce_",
                            f"# HELP {rollup} ")):
            continue
        if line.startswith(f"# TYPE {rollup} "):
            out.append(fams)  # the new families go where the rollup's went
        elif line.startswith(f"{rollup}_total{{"):
            labels, value, ts = line[len(rollup) + 7:].rsplit(" ", 2)
            for name, moves in parts.items():
                for dev, share in (("ens1f0np0", moves), ("ens2f0np0", 0)):
                    fams[name].append(f'node_ethtool_{name}{{device="{dev}",{labels} {float(value) * share} {ts}')
        else:
            out.append(line)
    block = "".join(f"# TYPE node_ethtool_{name} unknown\n" + "".join(lines) for name, lines in fams.items())
    return "".join(block if part is fams else part for part in out)


@pytest.mark.parametrize("vendor", sorted(PAUSE_COUNTERS))
def test_node_exporter_pfc_per_priority_through_prometheus(tmp_path, vendor):
    """On a PFC fabric the pauses a switch sends may show in the NICs' per-priority counters alone
    (mlx5 documents its global pause counter as counting under global pause only; ice counts PFC's
    XOFF per priority and link-level XOFF apart): a node_exporter-only
    site's congested gang is judged from them, through a real Prometheus as from the bundle (the
    global counter's zeros add nothing and mask nothing: the counters are parts of one sum)."""
    from dashboard.analysis.diagnose import diagnose, fabric_view
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.thresholds import Thresholds
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults="ib_congestion@8m+30m:leaf=leaf00"))
    for url, bundle in _serve(tmp_path, sim, 56, rewrite=lambda text: _pfc_as_node_exporter_reads_it(text, vendor)):
        (fault,) = sim.ground_truth()
        b = load_bundle(str(bundle))
        assert "roce_cong" not in b.window.rail and np.nansum(b.window.node["eth_pause"]) > 0
        assert fabric_view(b.window, Thresholds())[1] == "roce"
        want = _verdicts(diagnose(b.window, b.jobs))
        assert {job: want[job][0] for job in fault["jobs"]} == {job: "stalled_network" for job in fault["jobs"]}
        src = PrometheusSource(url)
        win = src.window(b.end, b.end - b.start, 15.0)
        assert src.queries_last_cycle <= QUERY_BUDGET and not win.notes
        rows = [win.nodes.index(n) for n in b.window.nodes]
        got, ref = win.node["eth_pause"][rows], b.window.node["eth_pause"]
        assert np.nansum(got) > 0 and np.allclose(got[:, -20:], ref[:, -20:], rtol=0.05, equal_nan=True)
        assert _verdicts(diagnose(win, b.jobs)) == want


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian package prometheus) not installed")
@pytest.mark.parametrize("scrape", [15, 60])
def test_event_counters_are_counted_off_the_scrape_grid(tmp_path, scrape):
    """Live scrapes are never on the query's grid: at 67 s, with samples every 15 s (or 60 s) from
    0 s, Prometheus' `increase(x[15s])` sees one sample and returns nothing, so a link that went down
    would be unknown. The diagnosis's event query (evaluated by promtool's PromQL engine) reads the
    counter at each step, and its step's increase worked out here (matrix.decode_increase) counts
    the drop once, at the first step that sees it, and nothing at the steps around it."""
    import numpy as np

    from dashboard.sources.matrix import decode_increase
    from dashboard.sources.prometheus import plan_queries

    (query,) = [q for s, _, q in plan_queries() if s == "ib_down"]
    n = 6 if scrape == 15 else 3
    values = " ".join(["0"] * n + ["1"] * n)  # the link went down between sample n-1 and n
    went = n * scrape
    first = next(t for t in (went + k * 15 + 7 for k in range(-2, 8)) if t >= went)
    steps = [first - 30, first - 15, first, first + 15]
    counter = [0, 0, 1, 1]
    labels = {"__name__": "node_infiniband_link_downed_total", "device": "mlx5_0", "instance": "n1:9100", "port": "1"}
    tests = [{"interval": f"{scrape}s",
              "input_series": [{"series": 'node_infiniband_link_downed_total{device="mlx5_0",port="1",instance="n1:9100"}',
                                "values": values}],
              "promql_expr_test": (
                  [{"expr": "increase(node_infiniband_link_downed_total[15s])", "eval_time": f"{first}s", "exp_samples": []}]
                  + [{"expr": query, "eval_time": f"{t}s",
                      "exp_samples": [{"labels": "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
                                       "value": c}]}
                     for t, c in zip(steps, counter)])}]
    _promtool(tmp_path, tests)
    answer = {"result": [{"metric": labels, "values": [[t, str(c)] for t, c in zip(steps, counter)]}]}
    _, _, _, col, rise = decode_increase(answer, first - 15, 15, 3)
    assert col.tolist() == [0, 1, 2] and np.array_equal(rise, [0.0, 1.0, 0.0])


def _promtool(tmp_path, tests: list) -> None:
    """Runs promtool's rule-test PromQL engine over `tests` (its unit-test format); fails with its output."""
    import subprocess

    import yaml

    f = tmp_path / "t.yml"
    f.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "15s", "tests": tests}))
    r = subprocess.run(["promtool", "test", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian package prometheus) not installed")
def test_per_filesystem_reads_reach_the_window_keyed_as_targets(tmp_path):
    """GPFS and BeeGFS name their filesystem `fs`, which the window keys as a target: the read query
    groups by it and names it `target`, so a GPFS site's per-filesystem reads arrive through
    Prometheus as they do from a bundle (they used to be summed away)."""
    from dashboard.sources.prometheus import plan_queries

    (query,) = [q for s, _, q in plan_queries() if s == "read"]
    _promtool(tmp_path, [{
        "interval": "15s",
        "input_series": [{"series": 'gpfs_perf_read_bytes_total{fs="gpfs1",instance="n1:9100"}', "values": "0+15000000x10"},
                         {"series": 'gpfs_perf_read_bytes_total{fs="scratch",instance="n1:9100"}', "values": "0+0x10"}],
        "promql_expr_test": [{"expr": query, "eval_time": "90s",
                              "exp_samples": [{"labels": '{fs="gpfs1",instance="n1:9100",target="gpfs1"}', "value": 1e6}]}]}])


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian package prometheus) not installed")
def test_a_node_reads_its_filesystem_total_once_old_agents_from_their_targets(tmp_path):
    """The agent's one series per filesystem (`targets_io_bytes`) is read where a node has it, and an
    older agent's per-target series where it has not: never both added up. The facts name the nodes
    without it, and the plan that leaves the per-target series out (every node has the total) reads
    the same for the others."""
    from dashboard.sources.prometheus import FALLBACK_FACTS, REPLACEMENTS, plan_queries

    def fs_read(**kw) -> str:
        (query,) = [q for s, _, q in plan_queries(**kw) if s == "fs_read"]
        return query

    per_target = 'gangwatch_lustre_client_target_io_bytes_total{{fs="lfs",type="osc",operation="read",target="lfs-OST000{}",instance="{}"}}'
    total = 'gangwatch_lustre_client_targets_io_bytes_total{fs="lfs",type="osc",operation="read",instance="new:9810"}'
    series = [{"series": per_target.format(0, "new:9810"), "values": "0+15000x10"},  # 1,000 B/s
              {"series": per_target.format(1, "new:9810"), "values": "0+15000x10"},
              {"series": total, "values": "0+30000x10"},
              {"series": per_target.format(0, "old:9810"), "values": "0+15000x10"},
              {"series": per_target.format(1, "old:9810"), "values": "0+45000x10"},
              # an older agent's node that only writes
              {"series": per_target.format(0, "writer:9810").replace('"read"', '"write"'), "values": "0+15000x10"}]
    # every agent's one-per-filesystem marker (FALLBACK_MARKERS), by which the facts tell the nodes
    # without the totals, whatever they read or write
    series += [{"series": f'gangwatch_lustre_client_import_rpc_wait_max_seconds{{fs="lfs",type="osc",instance="{n}:9810"}}',
                "values": "0.001x10"} for n in ("new", "old", "writer")]
    assert "gangwatch_lustre_client_target_io_bytes_total" not in fs_read(covered=REPLACEMENTS)
    _promtool(tmp_path, [{
        "interval": "15s", "input_series": series,
        "promql_expr_test": [
            {"expr": fs_read(), "eval_time": "90s",
             "exp_samples": [{"labels": '{instance="new:9810"}', "value": 2000},
                             {"labels": '{instance="old:9810"}', "value": 4000}]},
            {"expr": fs_read(covered=REPLACEMENTS), "eval_time": "90s",
             "exp_samples": [{"labels": '{instance="new:9810"}', "value": 2000}]},
            {"expr": FALLBACK_FACTS, "eval_time": "90s",
             "exp_samples": [{"labels": '{gw_fact="lacks",gw_lacks="gangwatch_lustre_client_targets_io_bytes_total",'
                                        f'instance="{node}:9810"}}', "value": 1} for node in ("old", "writer")]}]}])


def test_old_agents_on_some_nodes_are_read_from_their_targets_through_prometheus_and_bundles(tmp_path):
    """Two of six nodes run an agent without the per-filesystem total: the facts name them, the plan
    keeps the per-target fallback (cycle after cycle), and every node's filesystem reads are its
    targets' reads added up once, from Prometheus as from the bundle (where a node with both would
    otherwise count them twice); the verdicts are the bundle's."""
    import numpy as np

    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    old = ('instance="node0002:9810"', 'instance="node0005:9810"')  # agents from before the totals, which
    # exported every target's counters at every scrape: so do the others here (target_idle_seconds 0)
    sim = Simulation(SimConfig(nodes=6, seed=3, prefill=False, nodes_per_leaf=3, faults="ost_slow@10m+20m"))

    def without_totals(line: str) -> bool:
        return not (line.startswith("gangwatch_lustre_client_targets_io_bytes_total{") and any(o in line for o in old))

    for url, bundle in _serve(tmp_path, sim, 60, edit=without_totals, target_idle_seconds=0):
        b = load_bundle(str(bundle))
        src = PrometheusSource(url)
        cold = src.window(b.end - 60, b.end - b.start - 60, 15.0)
        assert src._covered == frozenset() and not cold.notes
        steady = src.window(b.end, b.end - b.start - 60, 15.0)
        fresh = PrometheusSource(url).window(b.end, b.end - b.start - 60, 15.0)
        for win in (b.window, cold, steady):
            fs, read = win.node["fs_read"], win.target["read"]
            assert np.isfinite(fs).any(axis=1).all()  # every node's reads known, the old agents' too
            both = np.isfinite(fs) & np.isfinite(read).all(axis=1)
            assert both.sum() > len(win.nodes) * 20
            assert np.allclose(fs[both], np.nansum(read, axis=1)[both], rtol=1e-6)  # once, not twice
            assert (fs[both] > 0).any()
        assert np.array_equal(steady.node["fs_read"], fresh.node["fs_read"], equal_nan=True)
        want = _verdicts(diagnose(b.window, b.jobs))
        assert _verdicts(diagnose(steady, b.jobs)) == want and {s for s, _ in want.values()} - {"progressing"}


def test_agents_leaving_still_counters_out_give_the_same_verdicts(tmp_path):
    """The same simulated cluster with the agents' per-target Lustre counters and per-port error
    counters left out while they stand still (the defaults, collectors.quiet) and with every one at
    every scrape: about half the target series and a fifth of the port error series, and the same
    verdicts and culprits from the bundle and through Prometheus; a node's `read` from a target it
    does not use is 0 (its filesystem total known), not unknown, and a port's `ib_down` and
    `ib_err` 0 where its counters were left out (the agent's marker known), in both sources; the
    targets' latency the same wherever the nodes read; the link drops counted the same, and by the
    agent's node rollups of the port counters as by the ports."""
    import numpy as np

    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.prometheus import PrometheusSource

    got = {}
    for idle in (0.0, 600.0):
        sim = Simulation(SimConfig(nodes=10, seed=10, prefill=False, nodes_per_leaf=4,
                                   faults="ost_slow@12m+20m,gpu_throttle@5m+40m,nccl_hang@10m+30m,link_flap@8m+20m"))
        for url, bundle in _serve(tmp_path / f"idle{idle:g}", sim, 72, target_idle_seconds=idle, port_idle_seconds=idle):
            b = load_bundle(str(bundle))
            win = PrometheusSource(url).window(b.end, b.end - b.start, 15.0)
            lines = {kind: sum(1 for line in (bundle / "metrics.om").open() if line.startswith(prefix))
                     for kind, prefix in (("target", "gangwatch_lustre_client_target_"),
                                          ("port", ("gangwatch_infiniband_port_symbol", "gangwatch_infiniband_port_link_down")))}
            got[idle] = (b, win, lines)
    (b0, w0, n0), (b1, w1, n1) = got[0.0], got[600.0]
    assert n1["target"] < 0.6 * n0["target"] and n1["port"] < 0.2 * n0["port"]
    want = _verdicts(diagnose(b0.window, b0.jobs))
    assert {"stalled_io", "stalled_network"} <= {state for state, _ in want.values()}, want
    for win in (w0, b1.window, w1):
        assert _verdicts(diagnose(win, b0.jobs)) == want
    for win in (b1.window, w1):
        fs, read = win.node["fs_read"], win.target["read"]
        known = np.broadcast_to(np.isfinite(fs)[:, None, :], read.shape)
        assert np.isfinite(read[known]).all()  # 0 where left out, not unknown
        assert (read[known] == 0).mean() > 0.5
        port = np.isfinite(win.rail["ib_rate"])
        assert port.mean() > 0.9 and all(np.isfinite(win.rail[s][port]).all() for s in ("ib_down", "ib_err"))
        assert "ib_quiet" not in win.node
    for win in (b0.window, w0):
        # the agent's node rollups of the two counters (never left out) count what the ports count
        for signal in ("ib_down", "ib_err"):
            roll, ports = win.node[signal + "_node"], np.nansum(win.rail[signal], axis=1)
            assert np.nansum(roll) > 0 and np.nansum(roll) == np.nansum(ports), signal
    for a, b in ((b0.window, b1.window), (w0, w1)):
        assert a.targets == b.targets or set(b.targets) <= set(a.targets)
        cols = [a.targets.index(t) for t in b.targets]
        la, lb = a.target["latency"][:, cols], b.target["latency"]
        both = np.isfinite(la) & np.isfinite(lb)
        # a pair back after standing still shows its first interval one step late: that step
        # unknown, and PromQL's 60 s rates over its next few steps span only the samples since
        assert both.sum() > 0.9 * np.isfinite(la).sum()
        assert np.isclose(la[both], lb[both], rtol=1e-5).mean() > 0.95
        # a port's first drop after standing still counts one step late, never lost
        for signal in ("ib_down", "ib_err"):
            da, db = np.nansum(a.rail[signal], axis=2), np.nansum(b.rail[signal], axis=2)
            assert da.sum() > 0 and np.array_equal(da, db), signal


@pytest.mark.skipif(not which("vmauth"), reason="vmauth (Debian package victoria-metrics) not installed")
def test_diagnose_and_capture_through_vmauth_with_credentials(served, tmp_path, capsys):
    """The engine behind a real vmauth that asks for a bearer token or basic auth: `diagnose` and
    `capture` given the credentials' files get the same verdicts; without them the queries fail
    (401) and say so."""
    import json

    from dashboard.analysis.diagnose import diagnose
    from dashboard.capture_cli import main as capture
    from dashboard.diagnose_cli import main as diagnose_cli
    from dashboard.sources.bundle import load_bundle

    url, bundle, _ = served
    b = load_bundle(str(bundle))
    (tmp_path / "token").write_text("gw-t0ken\n")
    (tmp_path / "pw").write_text("s3cret\n")
    (tmp_path / "auth.yml").write_text(f'users:\n- bearer_token: "gw-t0ken"\n  url_prefix: "{url}"\n'
                                       f'- username: "ops"\n  password: "s3cret"\n  url_prefix: "{url}"\n')
    port = _free_port()
    proc = subprocess.Popen(["vmauth", f"-auth.config={tmp_path / 'auth.yml'}", f"-httpListenAddr=127.0.0.1:{port}",
                             "-loggerLevel=ERROR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proxy + "/health")
        common = ["--prometheus", proxy, "--snapshot", str(bundle / "squeue.json"), "--at", str(b.end),
                  "--span", str(b.end - b.start), "--format", "json"]
        want = {(v.jobid, v.state) for v in diagnose(b.window, b.jobs).verdicts}
        for creds in (["--prometheus-bearer-token-file", str(tmp_path / "token")],
                      ["--prometheus-basic-auth-user", "ops", "--prometheus-basic-auth-password-file", str(tmp_path / "pw")]):
            assert diagnose_cli(common + creds) == 0
            doc = json.loads(capsys.readouterr().out)
            assert {(v["jobid"], v["state"]) for v in doc["verdicts"]} == want
            assert not any("failed" in n for n in doc["notes"])
        assert diagnose_cli(common) == 1
        doc = json.loads(capsys.readouterr().out)
        assert any("failed" in n and "401" in n for n in doc["notes"])
        out = tmp_path / "captured"
        assert capture(["--prometheus", proxy, "--out", str(out), "--at", str(b.end), "--span", str(b.end - b.start),
                        "--snapshot", str(bundle / "squeue.json"), *creds]) == 0
        assert _verdicts(diagnose(load_bundle(str(out)).window, b.jobs)) == _verdicts(diagnose(b.window, b.jobs))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
