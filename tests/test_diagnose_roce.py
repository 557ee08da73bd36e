"""Diagnosis on a RoCE fabric (no credit wait: a RoCE port's port_xmit_wait, where listed, does not make
it InfiniBand): congestion from ECN/CNP/PFC against the cluster's
typical node, a flapping link from link events, from transport errors alone or from the NICs'
link-down events (ethtool) alone, a PFC pause storm's source named rather than its victims' leaf,
the culprit named only where it stands out, no alarm on the healthy
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


def test_roce_windows_transmit_wait_stands_still_and_congestion_is_named(congested):
    rec, d = congested
    win = rec.window()
    assert {"roce_cong", "roce_err"} <= set(win.rail) and "eth_pause" in win.node
    assert np.nanmax(win.rail["ib_wait"]) == 0 and fabric_view(win, TH)[1] == "roce"
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


@pytest.fixture(scope="module")
def flapping():
    rec = recorded("link_flap@62m+8m", 260)
    (fault,) = rec.sim.ground_truth()
    return rec, rec.window(), fault


def without(win, rail=(), node=()):
    """The window as a site that does not export these signals sees it."""
    return dataclasses.replace(win, rail={k: v for k, v in win.rail.items() if k not in rail},
                               node={k: v for k, v in win.node.items() if k not in node})


def test_flapping_link_from_transport_errors_alone(flapping):
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    # a RoCE NIC whose link_downed counter is not exported, nor ethtool's: retransmissions and sequence errors remain
    blind = without(win, rail=("ib_down",), node=("eth_down",))
    v = network(diagnose(blind, rec.jobs()).verdicts)[job]
    node, _, port = fault["culprit"].partition(" ")
    assert v.culprit == f"{node}:{port.replace(' port ', '/')}" and v.culprit_kind == "port"
    assert any(e.signal == "roce_transport_errors" and e.node == node for e in v.evidence)


def test_flapping_link_from_nic_link_down_events_alone(flapping):
    """Only ethtool's link-down events tell the link dropped (no link_downed, no hw_counters errors):
    the stall is the network's and the one node whose NIC went down is named."""
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    node = fault["culprit"].split()[0]
    down = win.node["eth_down"]
    assert np.nansum(down[win.nodes.index(node)]) > 0
    assert np.nansum(down) == np.nansum(down[win.nodes.index(node)])  # no other node's NIC went down
    v = network(diagnose(without(win, rail=("ib_down", "roce_err")), rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (node, "node")
    assert [e.node for e in v.evidence if e.signal == "eth_link_down"] == [node]
    assert v.confidence >= 0.9


def test_nic_link_down_and_transport_errors_name_the_port(flapping):
    """The node whose NIC went down stands out; its port that counted the retransmissions is named."""
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    node, _, port = fault["culprit"].partition(" ")
    v = network(diagnose(without(win, rail=("ib_down",)), rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (f"{node}:{port.replace(' port ', '/')}", "port")
    assert {"eth_link_down", "roce_transport_errors"} <= {e.signal for e in v.evidence if e.node == node}


def test_nics_down_across_a_leaf_name_the_leaf(flapping):
    """Every node of the culprit's leaf lost its links at once (a switch that rebooted): the leaf
    stands out, not the node."""
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    node = fault["culprit"].split()[0]
    leaf = win.leaf_of[node]
    down = win.node["eth_down"].copy()
    steps = np.flatnonzero(np.nan_to_num(down[win.nodes.index(node)]) > 0)
    for i, n in enumerate(win.nodes):
        if win.leaf_of.get(n) == leaf:
            down[i, steps] = 1
    view = without(win, rail=("ib_down", "roce_err"))
    view = dataclasses.replace(view, node={**view.node, "eth_down": down})
    v = network(diagnose(view, rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (leaf, "leaf_switch")


def test_nics_down_on_two_nodes_of_the_job_name_nothing(flapping):
    """Two of the job's nodes lost links, not a leaf's worth: no node stands out, none is named,
    both are in the evidence."""
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    node = fault["culprit"].split()[0]
    other = next(n for n in next(j for j in rec.jobs() if str(j.job_id) == job).nodes if n != node)
    down = win.node["eth_down"].copy()
    i, o = win.nodes.index(node), win.nodes.index(other)
    down[o] = np.where(np.isfinite(down[o]), down[i], np.nan)
    leaf_size = sum(1 for n in win.nodes if win.leaf_of.get(n) == win.leaf_of[node])
    assert leaf_size >= 6  # two nodes are not half of it, whichever leaves they hang off
    view = without(win, rail=("ib_down", "roce_err"))
    view = dataclasses.replace(view, node={**view.node, "eth_down": down})
    v = network(diagnose(view, rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == ("", "")
    assert {e.node for e in v.evidence if e.signal == "eth_link_down"} == {node, other}


@pytest.fixture(scope="module")
def storm():
    """A NIC in a PFC pause storm on a cluster of four leaf switches (16 nodes each)."""
    sim = Simulation(SimConfig(nodes=64, seed=2, prefill=False, nodes_per_leaf=16, fabric="roce",
                               faults="pfc_storm@62m+10m"))
    rec = SimRecorder(sim, capacity=241)
    rec.step(260)
    (fault,) = sim.ground_truth()
    return rec, rec.window(), fault


def test_pause_storm_names_the_storming_node_not_its_victims_leaf(storm):
    rec, win, fault = storm
    node = fault["culprit"]
    leaf = win.leaf_of[node]
    storms = np.nansum(win.node["eth_storm"], axis=1)
    assert storms[win.nodes.index(node)] > 0 and np.count_nonzero(storms) == 1
    hit = network(diagnose(win, rec.jobs()).verdicts)
    assert hit and set(hit) <= set(fault["jobs"])
    for v in hit.values():
        assert (v.culprit, v.culprit_kind) == (node, "node"), v
        (e,) = [e for e in v.evidence if e.signal == "eth_pause_storm"]
        assert e.node == node and e.value > 0 and "pause frames" in e.note
        assert "roce_congestion" in {e.signal for e in v.evidence}
    # the storm guard's events are what name it: without them the victims' leaf is the common element
    blind = without(win, node=("eth_storm",))
    assert {v.culprit for v in network(diagnose(blind, rec.jobs()).verdicts).values()} == {leaf}


def test_pause_storm_on_another_leaf_is_not_blamed(storm):
    """A storm on a leaf none of a job's nodes hang off does not name that node for the job's stall."""
    rec, win, fault = storm
    node = fault["culprit"]
    leaves = {win.leaf_of[n] for j in rec.jobs() if str(j.job_id) in fault["jobs"] for n in j.nodes}
    far = next(n for n in win.nodes if win.leaf_of[n] not in leaves)
    moved = np.zeros_like(win.node["eth_storm"])
    moved[win.nodes.index(far)] = win.node["eth_storm"][win.nodes.index(node)]
    got = network(diagnose(dataclasses.replace(win, node={**win.node, "eth_storm": moved}), rec.jobs()).verdicts)
    assert set(fault["jobs"]) <= set(got)
    assert {got[jid].culprit for jid in fault["jobs"]} == {win.leaf_of[node]}
    # without the leaf switches the one storm in the cluster is the likeliest source; two are not placed
    blind = dataclasses.replace(win, leaf_of={}, node={**win.node, "eth_storm": moved})
    got = network(diagnose(blind, rec.jobs()).verdicts)
    assert {got[jid].culprit for jid in fault["jobs"]} == {far}
    assert all("the one storm in the cluster" in e.note for v in got.values() for e in v.evidence
               if e.signal == "eth_pause_storm")
    moved[win.nodes.index(node)] = moved[win.nodes.index(far)]
    got = network(diagnose(dataclasses.replace(blind, node={**win.node, "eth_storm": moved}), rec.jobs()).verdicts)
    assert {got[jid].culprit for jid in fault["jobs"]} == {node}  # one of the job's own nodes stormed


def test_a_link_that_dropped_before_the_storm_began_yields_to_it(storm):
    """A port of a victim gang that went down minutes before the storm began is not what holds the
    gang now: the storming node is named. One that goes down after the storm began names itself."""
    rec, win, fault = storm
    node = fault["culprit"]
    began = int(np.flatnonzero(np.nan_to_num(win.node["eth_storm"][win.nodes.index(node)]) > 0)[0])
    jid = sorted(fault["jobs"])[0]
    victim = next(n for j in rec.jobs() if str(j.job_id) == jid for n in j.nodes if n != node)
    i = win.nodes.index(victim)
    port = f"{victim}:{win.rails[i][0]}"
    for at, named in ((began - 3, node), (began + 4, port)):
        down = np.array(win.rail["ib_down"], copy=True)
        down[i, 0, at] = 1.0
        v = network(diagnose(dataclasses.replace(win, rail={**win.rail, "ib_down": down}), rec.jobs()).verdicts)[jid]
        assert v.culprit == named, (at - began, v.culprit)


def test_pause_storm_needs_a_roce_fabric():
    with pytest.raises(ValueError, match="pfc_storm needs fabric roce"):
        Simulation(SimConfig(nodes=8, seed=1, prefill=False, faults="pfc_storm@5m+5m", fabric="ib"))


def test_pause_storm_through_a_bundle_and_the_demo_history(tmp_path):
    """The ethtool collector's storm rollup, rendered by the simulated agents and read back from a
    bundle, and the demo's history window: each names the storming node."""
    from dashboard.analysis.sim.slurm_view import build_snapshot
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.simulated import BundleWriter

    def config(**kw):
        return SimConfig(nodes=8, seed=6, nodes_per_leaf=4, fabric="roce", load=1.3, faults="pfc_storm@8m+20m", **kw)

    sim = Simulation(config(prefill=False))
    BundleWriter(sim).run(56).write(str(tmp_path))
    (fault,) = sim.ground_truth()
    b = load_bundle(str(tmp_path))
    storms = np.nansum(b.window.node["eth_storm"], axis=1)
    assert storms[b.window.nodes.index(fault["culprit"])] == storms.sum() > 0
    hit = network(diagnose(b.window, b.jobs).verdicts)
    assert hit and {v.culprit for v in hit.values()} == {fault["culprit"]}
    # node_exporter's ethtool collector: mlx5's two storm counters per device, added up per node
    om = tmp_path / "metrics.om"
    rollup = "gangwatch_ethtool_node_pause_storm_events"
    lines = []
    for line in om.read_text().splitlines(keepends=True):
        if line.startswith(f"# TYPE {rollup} "):
            lines += [f"# TYPE node_ethtool_transmitted_pause_storm_{kind}_events unknown\n" for kind in ("warning", "error")]
        elif line.startswith(f"{rollup}_total{{"):
            lines += [line.replace(f"{rollup}_total{{", f'node_ethtool_transmitted_pause_storm_{kind}_events{{device="{dev}",')
                      for kind, dev in (("warning", "eth2"), ("error", "eth3"))]
        elif not line.startswith(f"# HELP {rollup} "):
            lines.append(line)
    om.write_text("".join(lines))
    exporter = load_bundle(str(tmp_path))
    assert np.array_equal(np.nan_to_num(exporter.window.node["eth_storm"]), 2 * np.nan_to_num(b.window.node["eth_storm"]))
    sim = Simulation(config(history_seconds=900))
    (fault,) = sim.ground_truth()
    hit = network(diagnose(window_from_history(sim), build_snapshot(sim).jobs).verdicts)
    assert hit and {v.culprit for v in hit.values()} == {fault["culprit"]}


def test_ethernet_link_downs_ignored_on_infiniband():
    """On InfiniBand the Ethernet NICs are the management network: their drops and pause storms
    change no verdict."""
    rec = recorded("none", 120, nodes=16, seed=4, fabric="ib")
    win = rec.window()
    assert "eth_down" not in win.node
    down = np.zeros((len(win.nodes), win.n_steps), np.float32)
    down[:, -10:] = 3  # every node's management link flapping
    noisy = dataclasses.replace(win, node={**win.node, "eth_down": down, "eth_storm": down})
    view, fabric = fabric_view(noisy, TH)
    assert fabric == "ib" and "eth_down" not in view.node and "eth_storm" not in view.node
    states = lambda w: {v.jobid: v.state for v in diagnose(w, rec.jobs()).verdicts}  # noqa: E731
    assert states(noisy) == states(win)


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
    assert "gangwatch_ethtool_node_link_down_events_total" in text
    assert 'link_layer="Ethernet"' in text and 'link_layer="InfiniBand"' not in text
    w.write(str(tmp_path))
    b = load_bundle(str(tmp_path))
    assert "roce_cong" in b.window.rail and "eth_pause" in b.window.node
    # a RoCE port's PortCounters transmit wait is exported, and stands still
    assert "transmit_wait" in text and np.nanmax(b.window.rail["ib_wait"]) == 0
    assert set(b.window.link_layers["node0001"].values()) == {"Ethernet"}
    d = diagnose(b.window, b.jobs)
    truth = {j for f in sim.ground_truth() for j in f["jobs"]}
    hit = network(d.verdicts)
    assert hit and set(hit) <= truth
    assert all(any(e.signal == "roce_congestion" for e in v.evidence) for v in hit.values())
    assert {v.culprit for v in hit.values()} == {"leaf00"}


def test_nic_link_down_through_a_bundle(tmp_path):
    """The ethtool collector's link-down rollup, rendered by the simulated agents and read back from
    a bundle, is the window's eth_down: alone it finds the flapping link's node."""
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.simulated import BundleWriter

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults="link_flap@8m+20m"))
    BundleWriter(sim).run(56).write(str(tmp_path))
    (fault,) = sim.ground_truth()
    node = fault["culprit"].split()[0]
    b = load_bundle(str(tmp_path))
    down = b.window.node["eth_down"]
    assert np.nansum(down) == np.nansum(down[b.window.nodes.index(node)]) > 0
    job = next(iter(fault["jobs"]))
    # the port's symbol errors (the infiniband collector reads them on RoCE ports too) name it
    v = network(diagnose(without(b.window, rail=("ib_down",)), b.jobs).verdicts)[job]
    assert v.culprit_kind == "port" and v.culprit.startswith(node + ":")
    v = network(diagnose(without(b.window, rail=("ib_down", "ib_err", "roce_err")), b.jobs).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (node, "node")


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


def test_roce_demo_showcase_with_a_pause_storm_names_its_node():
    """`gangwatch demo --fabric roce --faults showcase,pfc_storm@48m+25m` (docs/demo.md): every kind
    active when the pre-filled hour ends, the storm's gangs' verdicts naming the storming node."""
    from dashboard.analysis.sim.faults import KINDS
    from dashboard.analysis.sim.slurm_view import build_snapshot
    from dashboard.demo import build_parser, sim_config

    args = build_parser().parse_args(["--fabric", "roce", "--faults", "showcase,pfc_storm@48m+25m"])
    sim = Simulation(sim_config(args, 1.8e9))
    assert {af.spec.kind for af in sim.active} == set(KINDS)
    storm = next(g for g in sim.ground_truth() if g["kind"] == "pfc_storm")
    hit = network(diagnose(window_from_history(sim), build_snapshot(sim).jobs).verdicts)
    named = {jid for jid, v in hit.items() if v.culprit == storm["culprit"]}
    assert named and named <= set(storm["jobs"])


def test_transport_errors_add_sequence_errors_timeouts_and_retransmissions(tmp_path):
    """The window's roce_err is the per-step sum of the port's sequence errors, ACK timeouts and
    adaptive retransmissions, as the agent exports them (a bundle read back)."""
    from dashboard.sources.bundle import load_bundle, squeue_json, write_bundle

    t0 = 1767225600
    rows = {"out_of_sequence_packets": (10, 12, 12), "packet_sequence_errors": (0, 1, 1),
            "local_ack_timeouts": (5, 5, 8), "adaptive_retransmissions": (100, 150, 150)}
    text = "".join(f"# TYPE gangwatch_roce_port_{name} counter\n" + "".join(
        f'gangwatch_roce_port_{name}_total{{node="n1",device="mlx5_0",port="1"}} {v} {t0 + 15 * k}\n'
        for k, v in enumerate(values)) for name, values in rows.items())
    write_bundle(str(tmp_path), text, squeue_json([], t0 + 30), start=t0, end=t0 + 30)
    win = load_bundle(str(tmp_path)).window
    err = win.rail["roce_err"][win.nodes.index("n1"), 0]
    assert err[-2:].tolist() == [2 + 1 + 0 + 50, 0 + 0 + 3 + 0]


def test_a_site_without_rdma_counters_is_read_as_roce_from_its_nics_pauses(congested, flapping):
    """node_exporter reads no hw_counters: no ECN, CNPs or transport errors, only the NICs' pause
    frames and link-downs (its ethtool collector). No transmit wait either, so the fabric is RoCE, the
    congestion is found from the pauses and the NICs' link-downs stay link events."""
    rec, d = congested
    site = without(rec.window(), rail=("roce_cong", "roce_err"))
    view, fabric = fabric_view(site, TH)
    assert fabric == "roce" and "ib_wait" in view.rail
    assert set(network(diagnose(site, rec.jobs()).verdicts)) == set(network(d.verdicts))
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    v = network(diagnose(without(win, rail=("roce_cong", "roce_err", "ib_down")), rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (fault["culprit"].split()[0], "node")


def test_roce_ports_transmit_wait_does_not_make_the_fabric_infiniband(congested):
    """A RoCE port has PortCounters too (`counters/port_xmit_wait`, which the agent and node_exporter
    read): still on some firmware, counting only PFC's holds on other. Either way the window stays
    RoCE (ECN marks and CNPs are RoCE's alone; without them a still wait, or one that moves only
    where the node received pause frames), judged as without it; an InfiniBand window whose nodes'
    management NICs pause now and then stays InfiniBand."""
    rec, d = congested
    win = rec.window()
    pause = win.node["eth_pause"]
    R = max(len(r) for r in win.rails)
    still = np.zeros((len(win.nodes), R, win.n_steps), np.float32)
    # the ticks PFC held one port of each node: wait only where pause frames came
    held = still.copy()
    held[:, 1, :] = np.nan_to_num(pause) * 4096.0
    site = without(win, rail=("roce_cong", "roce_err"))
    expected = set(network(diagnose(site, rec.jobs()).verdicts))
    assert expected
    for wait in (still, held):
        agent = dataclasses.replace(win, rail={**win.rail, "ib_wait": wait})
        exporter = dataclasses.replace(site, rail={**site.rail, "ib_wait": wait})
        assert fabric_view(agent, TH)[1] == "roce" and fabric_view(exporter, TH)[1] == "roce"
        assert set(network(diagnose(agent, rec.jobs()).verdicts)) == set(network(d.verdicts))
        assert set(network(diagnose(exporter, rec.jobs()).verdicts)) == expected
    ib = recorded("ib_congestion@62m+10m:leaf=leaf00", 260, fabric="ib")
    iw = ib.window()
    mgmt = np.zeros((len(iw.nodes), iw.n_steps), np.float32)
    mgmt[::5, 100:140] = 50.0  # a fifth of the nodes' management switch pausing them for 10 minutes
    noisy = dataclasses.replace(iw, node={**iw.node, "eth_pause": mgmt})
    assert fabric_view(noisy, TH)[1] == "ib"
    states = lambda w: {v.jobid: (v.state, v.culprit) for v in diagnose(w, ib.jobs()).verdicts}  # noqa: E731
    assert states(noisy) == states(iw)


def with_storage_ports(win, layers: bool):
    """An InfiniBand window whose nodes also have two RoCE storage ports each (as a DGX's Ethernet
    NICs): ECN marks and CNPs counted there, their transmit wait still, storage traffic on them."""
    N, T = len(win.nodes), win.n_steps
    R = max(len(r) for r in win.rails)
    pad = lambda a: np.concatenate([a, np.full((N, 2, T), np.nan, a.dtype)], axis=1)  # noqa: E731
    rail = {k: pad(v) for k, v in win.rail.items()}
    rng = np.random.default_rng(3)
    cong = np.full((N, R + 2, T), np.nan, np.float32)
    cong[:, R:, :] = rng.uniform(0, 500, (N, 2, T))  # the storage network's own congestion, busy at times
    rail["roce_cong"] = cong
    rail["ib_wait"][:, R:, :] = 0.0
    rail["ib_tx"][:, R:, :] = rng.uniform(1e8, 2e9, (N, 2, T))
    rails = tuple(r + (f"mlx5_{R}/1", f"mlx5_{R + 1}/1") for r in win.rails)
    link = {n: {**dict.fromkeys(r[:R], "InfiniBand"), **dict.fromkeys(r[R:], "Ethernet")} for n, r in zip(win.nodes, rails)}
    return dataclasses.replace(win, rail=rail, rails=rails, link_layers=link if layers else {})


def test_infiniband_nodes_with_roce_storage_nics_stay_infiniband():
    """A DGX's compute rails are InfiniBand and its storage NICs often RoCE, whose ECN and CNP
    counters the agent and node_exporter read: the window stays InfiniBand (its link layers say so,
    or, where no agent says them, more ports wait without ECN counters than count them), and its
    verdicts are those of the compute rails alone."""
    ib = recorded("ib_congestion@62m+10m:leaf=leaf00", 260, fabric="ib")
    iw = ib.window()
    states = lambda w: {v.jobid: (v.state, v.culprit) for v in diagnose(w, ib.jobs()).verdicts}  # noqa: E731
    expected = states(iw)
    assert any(s == "stalled_network" for s, _ in expected.values())
    for layers in (True, False):
        dgx = with_storage_ports(iw, layers)
        assert fabric_view(dgx, TH)[1] == "ib", layers
        assert states(dgx) == expected, layers
    # nodes with as many storage ports as rails (two HCAs, two storage NICs): still InfiniBand
    two = dataclasses.replace(iw, rails=tuple(r[:2] for r in iw.rails), rail={k: v[:, :2] for k, v in iw.rail.items()})
    for layers in (True, False):
        assert fabric_view(with_storage_ports(two, layers), TH)[1] == "ib", layers


def test_link_layers_make_a_roce_window_whose_wait_moves_on_its_own_roce(congested):
    """A RoCE port whose transmit wait counts more than PFC's holds, on NICs without ECN counters
    (bnxt_re before Linux 6.6): the agents' link layers say Ethernet, so the window is RoCE and its
    pauses are read, as with a still wait. Where nobody says the link layer (node_exporter) such a
    wait reads as InfiniBand's: documented, the counters cannot tell."""
    rec, _ = congested
    win = without(rec.window(), rail=("roce_cong",))
    pause = win.node["eth_pause"]
    # pause frames only where a switch queue passed XOFF (no healthy trickle): the wait moves without them
    win = dataclasses.replace(win, node={**win.node, "eth_pause": np.where(pause > 10, pause, 0).astype(np.float32)})
    N, T = len(win.nodes), win.n_steps
    R = max(len(r) for r in win.rails)
    moving = np.random.default_rng(5).uniform(1e3, 5e4, (N, R, T)).astype(np.float32)
    still = dataclasses.replace(win, rail={**win.rail, "ib_wait": np.zeros((N, R, T), np.float32)})
    expected = set(network(diagnose(still, rec.jobs()).verdicts))
    assert expected
    agent = dataclasses.replace(win, rail={**win.rail, "ib_wait": moving})
    assert set(agent.link_layers[win.nodes[0]].values()) == {"Ethernet"}
    assert fabric_view(agent, TH)[1] == "roce"
    assert set(network(diagnose(agent, rec.jobs()).verdicts)) == expected
    assert fabric_view(dataclasses.replace(agent, link_layers={}), TH)[1] == "ib"


def test_flapping_link_from_the_nics_uncorrected_errors(flapping):
    """Between its drops a failing cable loses frames FEC cannot correct (ethtool's symbol and CRC
    errors, per node): with no other link signal exported they are the link events, and the one
    node whose NICs erred is named."""
    rec, win, fault = flapping
    job = next(iter(fault["jobs"]))
    node = fault["culprit"].split()[0]
    i = win.nodes.index(node)
    errs = np.zeros((len(win.nodes), win.n_steps), np.float32)
    onset = int(np.flatnonzero(np.nan_to_num(win.node["eth_down"][i]) > 0)[0])
    errs[i, onset:] = 5.0
    site = without(win, rail=("ib_down", "roce_err"), node=("eth_down",))
    blind = network(diagnose(site, rec.jobs()).verdicts).get(job)
    assert blind is None or blind.culprit != node  # its congestion alone does not place the link
    v = network(diagnose(dataclasses.replace(site, node={**site.node, "eth_err": errs}), rec.jobs()).verdicts)[job]
    assert (v.culprit, v.culprit_kind) == (node, "node")
    assert [e.node for e in v.evidence if e.signal == "eth_link_errors"] == [node]
    # on InfiniBand the Ethernet NICs are the management network: their errors are dropped there
    ib = recorded("none", 10, nodes=8, fabric="ib").window()
    noisy = dataclasses.replace(ib, node={**ib.node, "eth_err": np.ones((len(ib.nodes), ib.n_steps), np.float32)})
    assert "eth_err" not in fabric_view(noisy, TH)[0].node


@pytest.mark.parametrize("fabric", ["ib", "roce"])
def test_half_the_leaves_congested_at_once_each_gang_names_its_leaf(fabric):
    """Two of four leaves congested: no node stands out from a cluster half of whose busy nodes
    wait, so each node is judged against its own past. A gang spanning a hot leaf and a healthy one
    names the hot one; a gang whose nodes fill a healthy leaf too (they wait for the hot one, less)
    names the leaf where its nodes wait most."""
    from dashboard.analysis.sim.slurm_view import build_snapshot

    sim = Simulation(SimConfig(nodes=16, seed=6, history_seconds=3600.0, nodes_per_leaf=4, load=1.3, fabric=fabric,
                               faults="ib_congestion@50m+20m:leaf=leaf00,ib_congestion@50m+20m:leaf=leaf02"))
    hit = network(diagnose(window_from_history(sim), build_snapshot(sim).jobs).verdicts)
    truth = {jid: f["culprit"] for f in sim.ground_truth() for jid in f["jobs"]}
    assert set(truth.values()) == {"leaf00", "leaf02"} and set(hit) == set(truth)
    for jid, v in hit.items():
        assert (v.culprit, v.culprit_kind) == (truth[jid], "leaf_switch"), v
        assert any("own past" in e.note for e in v.evidence)
