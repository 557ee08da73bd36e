"""Diagnosis on a RoCE fabric (no port_xmit_wait): congestion from ECN/CNP/PFC against the cluster's
typical node, a flapping link from link events or from transport errors alone, no alarm on the healthy
trickle of retransmissions, and the whole path through the agents' metric names (sim -> exposition ->
bundle -> schema -> window -> verdicts) and the demo's history window."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dashboard.analysis.diagnose import diagnose, fabric_view
from dashboard.analysis.sim import SimConfig, Simulation
from dashboard.analysis.thresholds import DEFAULT as TH
from dashboard.sources.simulated import SimRecorder, window_from_history


def recorded(faults: str, steps: int, nodes: int = 32, seed: int = 1, fabric: str = "roce") -> SimRecorder:
    sim = Simulation(SimConfig(nodes=nodes, seed=seed, prefill=False, faults=faults, fabric=fabric))
    rec = SimRecorder(sim, capacity=241)
    rec.step(steps)
    return rec


def network(verdicts):
    return {v.jobid: v for v in verdicts if v.state == "stalled_network"}


@pytest.fixture(scope="module")
def congested():
    rec = recorded("ib_congestion@62m+10m:leaf=leaf00", 260)
    return rec, diagnose(rec.window(), rec.jobs())


def test_roce_window_has_no_transmit_wait_and_congestion_is_named(congested):
    rec, d = congested
    win = rec.window()
    assert "ib_wait" not in win.rail and {"roce_cong", "roce_err"} <= set(win.rail) and "eth_pause" in win.node
    truth = {j for f in rec.sim.ground_truth() for j in f["jobs"]}
    hit = network(d.verdicts)
    assert hit and set(hit) <= truth
    for v in hit.values():
        assert v.culprit == "leaf00" and v.culprit_kind == "leaf_switch"
        signals = {e.signal for e in v.evidence}
        assert "roce_congestion" in signals and "ib_wait" not in signals
    assert all("InfiniBand transmit wait" not in v.reason for v in d.verdicts)


def test_congestion_without_pfc_counters_still_found(congested):
    rec, _ = congested
    win = rec.window()
    no_pause = dataclasses.replace(win, node={k: v for k, v in win.node.items() if k != "eth_pause"})
    assert set(network(diagnose(no_pause, rec.jobs()).verdicts)) == set(network(diagnose(win, rec.jobs()).verdicts))


def test_flapping_link_from_transport_errors_alone():
    rec = recorded("link_flap@62m+8m", 260)
    win = rec.window()
    (fault,) = rec.sim.ground_truth()
    job = next(iter(fault["jobs"]))
    # a RoCE NIC whose link_downed counter is not exported: retransmissions and sequence errors remain
    blind = dataclasses.replace(win, rail={k: v for k, v in win.rail.items() if k != "ib_down"})
    v = network(diagnose(blind, rec.jobs()).verdicts)[job]
    node, _, port = fault["culprit"].partition(" ")
    assert v.culprit == f"{node}:{port.replace(' port ', '/')}" and v.culprit_kind == "port"
    assert any(e.signal == "roce_transport_errors" and e.node == node for e in v.evidence)


def test_healthy_trickle_of_retransmissions_raises_nothing():
    rec = recorded("none", 250, nodes=16, seed=4)
    win = rec.window()
    assert np.nansum(win.rail["roce_err"]) > 0  # the healthy links did count a few errors
    states = {v.state for v in diagnose(win, rec.jobs()).verdicts}
    assert "stalled_network" not in states
    # one error under the threshold per step on one port is not a link event; at the threshold it is
    view, fabric = fabric_view(win, TH)
    assert fabric == "roce" and np.nanmax(view.rail["ib_err"]) == 0


def test_infiniband_window_is_left_alone():
    rec = recorded("none", 10, nodes=8, fabric="ib")
    win = rec.window()
    view, fabric = fabric_view(win, TH)
    assert fabric == "ib" and view is win


def test_bad_fabric_name_is_refused():
    with pytest.raises(ValueError, match="unknown fabric"):
        Simulation(SimConfig(nodes=4, prefill=False, faults="none", fabric="ethernet"))


def test_agent_names_through_a_bundle(tmp_path):
    """The simulator's agent exposition (roce and ethtool collectors' names) read back as a bundle."""
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.simulated import BundleWriter

    # seed 6: a 4-node gang on leaf00 (kept small: rendering and parsing every node's exposition is the cost)
    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults="ib_congestion@8m+30m:leaf=leaf00"))
    w = BundleWriter(sim).run(56)
    text = w.text()
    assert "gangwatch_roce_port_cnp_handled_total" in text and "gangwatch_ethtool_node_received_pause_frames_total" in text
    assert "transmit_wait" not in text
    w.write(str(tmp_path))
    b = load_bundle(str(tmp_path))
    assert "roce_cong" in b.window.rail and "ib_wait" not in b.window.rail and "eth_pause" in b.window.node
    d = diagnose(b.window, b.jobs)
    truth = {j for f in sim.ground_truth() for j in f["jobs"]}
    hit = network(d.verdicts)
    assert hit and set(hit) <= truth
    assert all(any(e.signal == "roce_congestion" for e in v.evidence) for v in hit.values())
    assert {v.culprit for v in hit.values()} == {"leaf00"}


def test_demo_history_window_on_roce():
    sim = Simulation(SimConfig(nodes=8, seed=6, history_seconds=900, nodes_per_leaf=4, load=1.3, fabric="roce",
                               faults="ib_congestion@8m+30m:leaf=leaf00"))
    win = window_from_history(sim)
    assert "roce_cong" in win.rail and "ib_wait" not in win.rail
    from dashboard.analysis.sim.slurm_view import build_snapshot

    hit = network(diagnose(win, build_snapshot(sim).jobs).verdicts)
    assert hit and all(v.culprit == "leaf00" for v in hit.values())


def test_demo_command_line_takes_the_fabric():
    from dashboard.demo import build_parser, sim_config

    assert sim_config(build_parser().parse_args(["--fabric", "roce"]), 1.8e9).fabric == "roce"
    assert sim_config(build_parser().parse_args([]), 1.8e9).fabric == "ib"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--fabric", "omnipath"])
