"""The dashboard on both fabrics: wherever it shows InfiniBand's transmit wait, a window without one
but with RoCE's counters shows RoCE's congestion (ECN-marked packets + CNPs per second; PFC pause
per node) named as such, from the simulator read in place and from a bundle the simulated agents'
expositions were written to; a source with neither shows unknown, never an empty chart or a zero."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dashboard.analysis.sim import SimConfig, Simulation
from dashboard.analysis.thresholds import DEFAULT as TH
from dashboard.datasource import LiveDatasource, SimDatasource
from dashboard.ui import Ctx

CONGESTED = "leaf00"
LABEL = {"ib": "InfiniBand transmit wait", "roce": "RoCE congestion (ECN+CNP)"}
TRAFFIC = {"ib": "InfiniBand transmit", "roce": "RoCE transmit"}


def simulation(fabric: str, history: float = 900.0, nodes: int = 8) -> Simulation:
    # seed 6, 4 nodes per leaf: a gang runs on leaf00 when its congestion starts (test_diagnose_roce.py)
    return Simulation(SimConfig(nodes=nodes, seed=6, history_seconds=history, nodes_per_leaf=4, load=1.3, fabric=fabric,
                                faults=f"ib_congestion@8m+30m:leaf={CONGESTED}"))


def bundle_datasource(sim: Simulation, tmp_path, edit=lambda win: win) -> LiveDatasource:
    """A LiveDatasource over the window `load_bundle` reads from the simulated agents' expositions
    (`edit`ed)."""
    from dashboard.sources.bundle import load_bundle
    from dashboard.sources.simulated import BundleWriter

    BundleWriter(sim).run(56).write(str(tmp_path))
    return window_datasource(edit(load_bundle(str(tmp_path)).window))


def window_datasource(win) -> LiveDatasource:
    """A LiveDatasource over one window."""

    class Metrics:
        name = "bundle"

        def window(self):
            return win

    ds = LiveDatasource(lambda: None, "no scheduler", clock=lambda: win.end, metrics=Metrics())
    ds.refresh_metrics()
    return ds


def stands_out(hm) -> list[str]:
    """The leaves whose latest congestion is over TH.wait_ratio x the other leaves' median (the Network
    page's threshold; against the others, as two leaves' median would include the hot one)."""
    recent = np.nanmean(hm.z[:, -4:], axis=1)
    return [leaf for k, (leaf, v) in enumerate(zip(hm.rows, recent))
            if v > TH.wait_ratio * float(np.nanmedian(np.delete(recent, k)))]


def check_fabric(ds, fabric: str) -> None:
    signal, other = ("roce_cong", "ib_wait") if fabric == "roce" else ("ib_wait", "roce_cong")
    hm = ds.leaf_series()
    assert hm is not None and hm.signal == signal and np.isfinite(hm.z).any()
    assert stands_out(hm) == [CONGESTED]
    net = ds.network()
    assert net.congestion == signal and any(sw.wait_per_s for sw in net.switches)
    hot = max(net.switches, key=lambda sw: sw.wait_per_s or 0.0)
    assert hot.switch == CONGESTED
    node = next(n for n in ds.window().nodes if ds.leaf_of(n) == CONGESTED) if isinstance(ds, LiveDatasource) \
        else ds.sim.cluster.names[0]
    inv = ds.node_inventory(node)
    assert inv.congestion == signal and inv.ports and all(p.wait_per_s is not None for p in inv.ports)
    ns = ds.node_series(node, ("ib_tx", "ib_wait", "roce_cong", "eth_pause", "eth_storm"))
    # the other fabric's signal is absent, not a row of zeros
    assert signal in ns.values and other not in ns.values
    assert ("eth_pause" in ns.values) == ("eth_storm" in ns.values) == (fabric == "roce")
    # the traffic is the fabric's, by name: the node's chart and the heatmap
    from dashboard import figures

    assert figures.node_lines(ns, "ib_tx").layout.title.text.startswith(TRAFFIC[fabric] + " (")
    assert ds.heatmap("ib_tx").label == TRAFFIC[fabric]


@pytest.mark.parametrize("fabric", ["ib", "roce"])
def test_simulator_shows_the_fabrics_congestion(fabric):
    sim = simulation(fabric)
    ds = SimDatasource(sim)
    check_fabric(ds, fabric)
    if fabric == "roce":  # the physics' internal transmit wait is not something a RoCE agent exports
        assert ds.heatmap("ib_wait") is None and ds.job_series(next(iter(sim.running)), "ib_wait") is None


@pytest.mark.parametrize("fabric", ["ib", "roce"])
def test_bundle_window_shows_the_fabrics_congestion(fabric, tmp_path):
    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric=fabric, load=1.3,
                               faults=f"ib_congestion@8m+30m:leaf={CONGESTED}"))
    ds = bundle_datasource(sim, tmp_path)
    win = ds.window()
    # a RoCE port's PortCounters transmit wait is read too, and stands still
    assert (np.nanmax(win.rail["ib_wait"]) > 0) == (fabric == "ib")
    assert {layer for layers in win.link_layers.values() for layer in layers.values()} == {
        {"ib": "InfiniBand", "roce": "Ethernet"}[fabric]}
    check_fabric(ds, fabric)


def test_a_roce_ports_own_transmit_wait_leaves_the_pages_on_roce(tmp_path):
    """A RoCE port's PortCounters list a `port_xmit_wait` too, which stands still on some firmware:
    the pages show RoCE's congestion where the diagnosis judges the window RoCE, not that wait, also
    where no agent says its ports' link layer (node_exporter)."""
    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="roce", load=1.3,
                               faults=f"ib_congestion@8m+30m:leaf={CONGESTED}"))

    def still_wait(win):
        shape = (len(win.nodes), max(len(r) for r in win.rails), win.n_steps)
        return dataclasses.replace(win, rail={**win.rail, "ib_wait": np.zeros(shape, np.float32)}, link_layers={})

    ds = bundle_datasource(sim, tmp_path, still_wait)
    hm = ds.leaf_series()
    assert hm.signal == "roce_cong" and stands_out(hm) == [CONGESTED]
    assert ds.network().congestion == "roce_cong"
    node = next(n for n in ds.window().nodes if ds.leaf_of(n) == CONGESTED)
    ns = ds.node_series(node, ("ib_tx", "ib_wait", "roce_cong"))
    assert "roce_cong" in ns.values and "ib_wait" not in ns.values


def test_window_without_either_is_unknown():
    ds = SimDatasource(simulation("roce", 300.0))
    from dashboard.sources.simulated import window_from_history

    win = window_from_history(ds.sim)
    bare = dataclasses.replace(win, rail={k: v for k, v in win.rail.items() if k not in ("ib_wait", "roce_cong")})

    class Metrics:
        name = "bare"

        def window(self):
            return bare

    live = LiveDatasource(lambda: None, "no scheduler", clock=lambda: bare.end, metrics=Metrics())
    live.refresh_metrics()
    assert live.leaf_series() is None
    net = live.network()
    assert net is not None and all(p.wait_per_s is None for p in net.ports)  # unknown, not 0
    assert all(sw.wait_per_s is None for sw in net.switches)


def test_a_dgx_storage_nics_are_not_on_the_infiniband_leaves(tmp_path):
    """A DGX's RoCE storage NICs beside its InfiniBand rails (the agents say their link layer,
    Ethernet) hang off the storage network's switches, not the fabric's leaves: the leaf switches'
    sums, the ports worth a look and the nodes' and jobs' traffic and congestion are the rails'
    alone, as without them; the node's page lists the storage ports apart, with their own
    congestion (ECN marks + CNPs)."""
    from dashboard.app import build_app
    from dashboard.pages.node import inventory
    from tests.test_dashboard_layout import strings
    from tests.test_diagnose_roce import with_storage_ports

    sim = Simulation(SimConfig(nodes=8, seed=6, prefill=False, nodes_per_leaf=4, fabric="ib", load=1.3,
                               faults=f"ib_congestion@8m+30m:leaf={CONGESTED}"))
    plain = bundle_datasource(sim, tmp_path)
    dgx = window_datasource(with_storage_ports(plain.window(), layers=True))
    assert dgx.window().rails[0][-2:] == ("mlx5_8/1", "mlx5_9/1")
    same = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, equal_nan=True)  # noqa: E731
    same(dgx.leaf_series().z, plain.leaf_series().z)
    assert dgx.leaf_series().signal == "ib_wait"
    for signal in ("ib_tx", "ib_wait"):
        same(dgx.heatmap(signal).z, plain.heatmap(signal).z)
    net, ref = dgx.network(), plain.network()
    assert net.congestion == "ib_wait" and net.total_ports == ref.total_ports
    assert [(sw.switch, sw.ports) for sw in net.switches] == [(sw.switch, sw.ports) for sw in ref.switches]
    same([sw.tx_bps for sw in net.switches], [sw.tx_bps for sw in ref.switches])
    assert {p.device for p in net.ports} <= {f"mlx5_{k}/1" for k in range(8)}
    assert "Ethernet" not in ref.note and "16 RDMA ports of another link layer (Ethernet" in net.note
    node = next(n for n in dgx.window().nodes if dgx.leaf_of(n) == CONGESTED)
    inv, before = dgx.node_inventory(node), plain.node_inventory(node)
    assert inv.ports == before.ports and not before.other_ports
    assert [(p.device, p.link_layer, p.switch) for p in inv.other_ports] == [("mlx5_8/1", "Ethernet", ""),
                                                                            ("mlx5_9/1", "Ethernet", "")]
    i = dgx.window().nodes.index(node)
    assert [p.tx_bps for p in inv.other_ports] == pytest.approx(dgx.window().rail["ib_tx"][i, -2:, -1].tolist(), rel=1e-6)
    assert [p.wait_per_s for p in inv.other_ports] == pytest.approx(dgx.window().rail["roce_cong"][i, -2:, -1].tolist(),
                                                                     rel=1e-6)
    ns, ns0 = dgx.node_series(node, ("ib_tx", "ib_wait")), plain.node_series(node, ("ib_tx", "ib_wait"))
    for signal in ("ib_tx", "ib_wait"):
        same(ns.values[signal], ns0.values[signal])
    text = " ".join(strings(inventory(dgx, Ctx(build_app(dgx).get_relative_path), node, {})))
    assert "InfiniBand ports" in text and "Other RDMA ports" in text and "mlx5_9/1" in text and "ECN+CNP" in text


@pytest.mark.parametrize("fabric", ["ib", "roce"])
def test_pages_name_the_signal(fabric):
    from dashboard.app import build_app, render_page
    from tests.test_dashboard_layout import strings

    ds = SimDatasource(simulation(fabric, nodes=16))  # 4 leaves: the page's median is a healthy one
    ctx = Ctx(build_app(ds).get_relative_path)
    net = " ".join(strings(render_page(ds, ctx, "network")))
    node = " ".join(strings(render_page(ds, ctx, f"nodes/{ds.sim.cluster.names[0]}")))
    assert f"{LABEL[fabric]} per leaf switch" in net and f"Congested now: {CONGESTED}." in net
    if fabric == "roce":
        assert "ECN+CNP" in net and "InfiniBand" not in net and "ticks/s" not in net and "packets/s" in net
        assert "RoCE ports" in node and "ECN+CNP" in node and "InfiniBand ports" not in node
    else:
        assert "transmit wait" in net and "ECN" not in net and "InfiniBand ports" in node
    # the job page's traffic heatmap is titled by the fabric
    from dashboard.pages import job

    jobid = next(str(j.job_id) for j in ds.snapshot().jobs if j.state == "RUNNING" and len(j.nodes) > 1)
    titles = [g.figure["layout"]["title"]["text"] for g in job.heatmaps(ds, jobid, None)]
    assert f"{TRAFFIC[fabric]} per node" in titles
    assert not any(t.startswith(TRAFFIC["ib" if fabric == "roce" else "roce"]) for t in titles)


@pytest.mark.parametrize("fabric", ["ib", "roce"])
def test_congested_now_lists_half_the_leaves_hot_at_once(fabric):
    """Two of four leaves congested at once: the median over leaves is then half a hot one's and
    lists neither, but the findings name each gang's leaf, and the page lists both."""
    from dashboard.pages.network import congested

    sim = Simulation(SimConfig(nodes=16, seed=6, history_seconds=3600.0, nodes_per_leaf=4, load=1.3, fabric=fabric,
                               faults="ib_congestion@50m+20m:leaf=leaf00,ib_congestion@50m+20m:leaf=leaf02"))
    ds = SimDatasource(sim)
    recent = np.nanmean(ds.leaf_series(300.0).z[:, -4:], axis=1)
    assert not (recent > TH.wait_ratio * np.nanmedian(recent)).any()  # the median over leaves alone lists none
    assert sorted(congested(ds)) == ["leaf00", "leaf02"]
