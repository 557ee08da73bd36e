"""bench/bench_vm_import.py's data: the simulated cluster's series as its agents expose them, and the
same samples in a real VictoriaMetrics and a real Prometheus (promtool's blocks)."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from bench.bench_victoriametrics import metric
from bench.bench_vm_import import JOB, import_vm, prometheus_blocks, simulate, write
from tests.conftest import which
from tests.support import vmstack
from tests.support.promstack import Prometheus

# on the 15 s grid, in the recent past: VictoriaMetrics drops samples more than two days ahead
END = math.floor(time.time() / 900) * 900 - 3600
NODES, STEPS = 4, 3


@pytest.fixture(scope="module")
def cols():
    return simulate(NODES, STEPS, seed=5, end=END)


def test_every_wanted_line_of_each_exposition_is_a_sample_at_its_step(cols):
    """The columns against the agent's whole /metrics text (render(), the path a scrape reads),
    step by step: same series, same value text, the scrape's labels added."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.render import NodeRenderer
    from dashboard.sources.build import WANTED
    from dashboard.sources.exposition import split_line

    sim = Simulation(SimConfig(nodes=NODES, seed=5, start=END - 15 * STEPS - 300, history_seconds=300))
    renderer = NodeRenderer(sim)
    at = {}  # (node, name, labels without the scrape's) -> {step: value text}
    for sid, (vals, steps) in enumerate(zip(cols.values, cols.steps)):
        name, labels = cols.labels(sid)
        assert labels["job"] == JOB and labels["instance"] == labels["node"] == cols.names[cols.heads[sid][0]]
        own = tuple(sorted((k, v) for k, v in labels.items() if k not in ("job", "instance", "node")))
        at[(labels["node"], name, own)] = dict(zip(steps, vals))
    seen = 0
    for k in range(STEPS):
        sim.step()
        assert cols.times[k] == sim.t
        for i, node in enumerate(cols.names):
            for line in renderer.render(i).splitlines():
                got = split_line(line) if line and not line.startswith("#") else None
                if got is None or got[0] not in WANTED:
                    continue
                name, labels, value, _ = got
                if "node" in labels:  # a scrape keeps the exposition's own node label as exported_node
                    labels["exported_node"] = labels.pop("node")
                assert at[(node, name, tuple(sorted(labels.items())))][k] == value
                seen += 1
    assert seen == cols.samples


def test_counters_never_decrease(cols):
    for sid, vals in enumerate(cols.values):
        if cols.heads[sid][1].split("{", 1)[0].endswith("_total"):
            nums = [float(v) for v in vals]
            assert nums == sorted(nums), cols.heads[sid]


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.skipif(not (which("prometheus") and which("promtool") and vmstack.available()),
                    reason="needs Debian's prometheus and victoria-metrics (tests/run-all.sh installs them)")
def test_both_engines_hold_the_same_samples(cols, tmp_path):
    jsonl, om = tmp_path / "series.jsonl", tmp_path / "series.om"
    write(cols, jsonl, om)
    blocks, series, samples = prometheus_blocks(om, tmp_path / "prom-data")
    assert blocks >= 1 and series >= len(cols.heads)  # summed over blocks: a series in two counts twice
    assert samples == cols.samples
    started = []
    try:
        # imported data has no staleness markers: a series that ended (a job's) would stay 5 minutes on
        # Prometheus, about two steps on VictoriaMetrics (docs/victoriametrics.md#where-metricsql-differs)
        prom = Prometheus(tmp_path, [], extra_flags=["--query.lookback-delta=29s"])
        started.append(prom)
        vm = vmstack.VictoriaMetrics(tmp_path)
        started.append(vm)
        import_vm(vm.url, jsonl)
        at = f"{END:.3f}"

        def ask(url: str, expr: str) -> list[dict]:
            q = urllib.parse.urlencode({"query": expr, "time": at})
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=60) as r:
                    return json.loads(r.read())["data"]["result"]
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"{url} {expr}: {exc.read()[:300]!r}") from None

        for expr in ("sum(count_over_time(gangwatch_lustre_client_target_operations_total[10m]))",
                     "count(gangwatch_job_gpu_info)", "count(gangwatch_sim_node_info)",
                     "sum by (node) (gangwatch_gpu_power_watts)",
                     'sum by (node) (gangwatch_lustre_client_target_io_bytes_total{operation="read"})'):
            p, v = ({json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in ask(url, expr)}
                    for url in (prom.url, vm.url))
            assert p and p == pytest.approx(v, rel=1e-9), expr  # sums: each engine adds in its own order
        assert metric(vm.url, "vm_rows_added_to_storage_total") == cols.samples
    finally:
        for proc in reversed(started):
            proc.stop()


def test_rules_bench_writes_the_rules_families_into_prometheus_by_remote_write(tmp_path):
    """bench_rules_import.py's data: only the families the rules read, the slurm-exporter's under its
    own job and instance (its series' own `node` kept), every target's `up`; and its hand-made remote
    write (protobuf, snappy literals) read back by a real Prometheus sample for sample."""
    from bench.bench_rules_import import SLURM, remote_write, rule_families

    wanted = rule_families()
    assert {"gangwatch_gpu_node_utilization_ratio", "gangwatch_slurm_node_info", "up"} <= wanted
    assert "gangwatch_gpu_utilization_ratio" not in wanted  # rules read no per-GPU family
    cols = simulate(NODES, STEPS, seed=5, end=END, wanted=wanted, slurm=SLURM)
    named = [cols.labels(sid) for sid in range(len(cols.heads))]
    assert {name for name, _ in named} <= wanted
    slurm = [labels for name, labels in named if labels["job"] == "gangwatch-slurm"]
    assert slurm and all(lb["instance"] == SLURM for lb in slurm)
    assert any(name == "gangwatch_slurm_node_info" and lb.get("node") in cols.names for name, lb in named)
    ups = {(lb["job"], lb["instance"]) for name, lb in named if name == "up"}
    assert ups == {("gangwatch-agent", n) for n in cols.names[:NODES]} | {("gangwatch-slurm", SLURM)}
    prom = Prometheus(tmp_path, [], extra_flags=["--web.enable-remote-write-receiver"])
    try:
        remote_write(prom.url, cols)
        held = sum(float(prom.query(f"sum(count_over_time({name}[{STEPS * 15 + 60}s] @ {END}))")[0]["value"][1])
                   for name in {name for name, _ in named})
        assert held == cols.samples
        got = prom.query(f'gangwatch_gpu_node_utilization_ratio{{node="{cols.names[0]}"}} @ {END}')
        sid = next(i for i, (name, lb) in enumerate(named)
                   if name == "gangwatch_gpu_node_utilization_ratio" and lb["node"] == cols.names[0])
        assert float(got[0]["value"][1]) == float(cols.values[sid][-1])
    finally:
        prom.stop()
