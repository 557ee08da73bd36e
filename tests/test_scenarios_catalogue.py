"""The scenario catalogue (tests/scenarios) builds every scenario into well-formed bundles.

Checks form only: OpenMetrics that gangwatch's reader parses without a skipped line and that ends in
`# EOF`, counters that never go down, a `squeue --json` that Slurm's parser reads with GPU indices
for every running job, truth for every running job, and one bundle through promtool. Whether the
diagnosis gets them right is the accuracy test's business, not this one's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from collectors.slurm.parse_json import loads, parse_jobs
from dashboard.sources.exposition import iter_samples
from tests.conftest import which
from tests.scenarios.build import build
from tests.scenarios.catalogue import CAUSES, CITATIONS, SCENARIOS, citations, table
from tests.scenarios.checks import violations
from tests.scenarios.render import SCHEMAS, render

SEEDS = (0, 1)
MAX_NODES, WINDOW_S = 8, 300.0  # the catalogue draws 8-64 nodes over 15-25 min; form does not depend on size


def test_catalogue_covers_every_cause_twice():
    by_cause: dict[str, set[str]] = {}
    for s in SCENARIOS:
        assert s.cause in CAUSES
        assert s.cites and all(c in CITATIONS for c in s.cites), s.name
        by_cause.setdefault(s.cause, set()).add(s.signature)
    assert all(len(by_cause.get(c, ())) >= 2 for c in CAUSES), by_cause


def test_builds_are_deterministic():
    a, b = build(SCENARIOS[0], 3, MAX_NODES, WINDOW_S), build(SCENARIOS[0], 3, MAX_NODES, WINDOW_S)
    assert a.truth == b.truth and a.params == b.params
    assert (a.cluster.util == b.cluster.util).all()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_bundles_well_formed(scenario, tmp_path):
    for seed in SEEDS:
        built = build(scenario, seed, MAX_NODES, WINDOW_S, scenario.fabric or "ib")
        for schema in SCHEMAS:
            path = Path(render(built, str(tmp_path), schema))
            _check_bundle(path, scenario, schema)


ROCE_SHOWN = [s for s in SCENARIOS if s.name.startswith(("net_", "ok_moe", "strag_slow"))]


@pytest.mark.parametrize("scenario", ROCE_SHOWN, ids=lambda s: s.name)
def test_roce_bundles_well_formed(scenario, tmp_path):
    """On RoCE: the RDMA ports' transmit wait as their PortCounters list it (still, or PFC's holds);
    the agent's roce and ethtool collectors' names, or node_exporter's ethtool names (it reads no
    RDMA hw_counters); the link layer says Ethernet."""
    built = build(scenario, 0, MAX_NODES, WINDOW_S, "roce")
    for schema in SCHEMAS:
        path = Path(render(built, str(tmp_path), schema))
        assert path.name.endswith(f"-roce-{schema}")
        _check_bundle(path, scenario, schema)
        text = (path / "metrics.om").read_text()
        assert ("\ngangwatch_infiniband_port_transmit_wait_ticks_total{" if schema == "gangwatch"
                else "\nnode_infiniband_port_transmit_wait_total{") in text
        if schema == "gangwatch":
            assert 'link_layer="Ethernet"' in text and 'link_layer="InfiniBand"' not in text
            for name in ("gangwatch_roce_port_ecn_marked_packets_total", "gangwatch_roce_port_cnp_handled_total",
                         "gangwatch_roce_port_local_ack_timeouts_total",
                         "gangwatch_ethtool_node_received_pause_frames_total",
                         "gangwatch_ethtool_node_pause_storm_events_total",
                         "gangwatch_ethtool_node_link_down_events_total"):
                assert f"\n{name}{{" in text, name
        else:
            assert "roce" not in text and "\nnode_ethtool_received_pause_ctrl_phy{" in text
            assert "\nnode_ethtool_transmitted_pause_storm_warning_events{" in text


def test_a_roce_build_holds_the_infiniband_builds_cluster_and_jobs():
    """The fabric is given, not drawn: the same seed's RoCE build differs only in what the NICs count."""
    sc = next(s for s in SCENARIOS if s.name == "net_nccl_spin")
    a, b = build(sc, 2, MAX_NODES, WINDOW_S, "ib"), build(sc, 2, MAX_NODES, WINDOW_S, "roce")
    assert a.truth == b.truth and {**a.params, "fabric": "roce"} == b.params
    assert np.array_equal(a.cluster.ib_wait, b.cluster.ib_wait)
    assert np.array_equal(a.cluster.util, b.cluster.util, equal_nan=True)


def test_both_schemas_of_a_roce_seed_show_the_same_nics(tmp_path):
    """Whether the RDMA port's link_downed counts on RoCE is the firmware's, so the cluster's: a flap
    moves it in both schemas of a seed or in neither."""
    sc = next(s for s in SCENARIOS if s.name == "net_flapping_link")
    counted = set()
    for seed in range(6):
        built = build(sc, seed, MAX_NODES, WINDOW_S, "roce")
        moved = []
        for schema, name in (("gangwatch", "gangwatch_infiniband_port_link_downed_total"),
                             ("exporters", "node_infiniband_link_downed_total")):
            text = (Path(render(built, str(tmp_path), schema)) / "metrics.om").read_text()
            seen: dict = {}
            for s in iter_samples(text, ts_unit="s"):
                if s.name == name:
                    seen.setdefault(tuple(sorted(s.labels.items())), []).append(s.value)
            moved.append(any(v[-1] > v[0] for v in seen.values()))
        assert moved[0] == moved[1], seed
        counted.add(moved[0])
    assert counted == {True, False}  # half the clusters' firmware counts it, over 6 seeds both kinds


def test_a_roce_only_scenario_refuses_infiniband():
    storm = next(s for s in SCENARIOS if s.fabric == "roce")
    with pytest.raises(ValueError, match="roce fabric only"):
        build(storm, 0, MAX_NODES, WINDOW_S, "ib")
    with pytest.raises(ValueError, match="fabric must be one of"):
        build(storm, 0, MAX_NODES, WINDOW_S, "ethernet")


def _check_bundle(path: Path, scenario, schema: str) -> None:
    text = (path / "metrics.om").read_text()
    assert text.endswith("# EOF\n")
    stats: dict = {}
    last: dict[tuple, float] = {}
    names = set()
    for s in iter_samples(text, ts_unit="s", stats=stats):
        names.add(s.name)
        assert s.timestamp is not None
        if s.name.endswith("_total"):
            key = (s.name, tuple(sorted(s.labels.items())))
            assert s.value >= last.get(key, 0.0), key
            last[key] = s.value
    assert not stats.get("skipped_lines"), stats
    prefix = ("gangwatch_",) if schema == "gangwatch" else ("node_", "DCGM_FI_", "lustre_", "gpfs_")
    assert all(n.startswith(prefix) for n in names), sorted(n for n in names if not n.startswith(prefix))[:5]
    jobs, meta = parse_jobs(loads((path / "squeue.json").read_text()))
    assert not getattr(meta, "warnings", None)
    truth = json.loads((path / "truth.json").read_text())
    running = {str(j.job_id): j for j in jobs if j.state == "RUNNING"}
    assert set(running) == {t["jobid"] for t in truth["jobs"]}
    for j in running.values():
        assert all(a.gpu_indices for a in j.allocations), j.job_id
    focus = [t for t in truth["jobs"] if t["focus"]]
    assert focus and all(t["expected"] == scenario.cause for t in focus)
    assert any(not t["focus"] for t in truth["jobs"]) or scenario.mig, "no healthy neighbour"
    meta_b = json.loads((path / "bundle.json").read_text())
    assert meta_b["start"] < meta_b["end"]


def test_promtool_accepts_a_bundle(tmp_path):
    promtool = which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    path = Path(render(build(SCENARIOS[0], 0, 8, WINDOW_S), str(tmp_path), "exporters"))
    out = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(path / "metrics.om"),
                          str(tmp_path / "blocks")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenarios_hold_their_documented_shape(scenario):
    """Each build shows its signature (util/SM, transmit-wait vs the typical node, PSI, clocks ...)
    at full size, across seeds: the physics, not gangwatch's verdict."""
    problems = [v for seed in range(6) for v in violations(build(scenario, seed, fabric=scenario.fabric or "ib"))]
    assert not problems, problems[:5]


def test_readme_carries_the_catalogue():
    readme = (Path(__file__).parent / "scenarios" / "README.md").read_text()
    assert table() in readme and citations() in readme, "run: python -m tests.scenarios --table"
