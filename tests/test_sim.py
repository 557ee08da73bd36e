"""The simulated cluster: determinism, scheduling invariants, faults against their ground truth,
the Slurm snapshot, the agent-compatible exposition and the workload sources."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collectors.exposition import iter_samples
from collectors.slurm.hostlist import expand
from collectors.slurm.model import Snapshot
from dashboard.analysis.sim import SimConfig, Simulation
from dashboard.analysis.sim import cluster as C
from dashboard.analysis.sim.faults import KINDS, ROCE_KINDS, parse_duration, parse_faults
from dashboard.analysis.sim.render import IB_ROWS, QUIET_IB, NodeRenderer
from dashboard.analysis.sim.slurm_view import build_snapshot
from dashboard.analysis.sim.workload import parse_rows, model_arrivals, read_trace, trace_arrivals

REPO = Path(__file__).resolve().parent.parent
T0 = 1_767_225_600.0
# Faults at fixed times, far enough apart that each one's window is clean.
SCENARIO = ("ost_slow@10m+10m,nccl_hang@5m+20m,gpu_throttle@12m+20m,ib_congestion@30m+8m,idle_gpus@20m+30m,"
            "xid79@40m+1h,link_flap@45m+6m,slow_node@25m+10m,scrape_hang@0s+2h:node=node0003,scrape_slow@0s+2h:node=node0004")


@pytest.fixture(scope="module")
def sim() -> Simulation:
    return Simulation(SimConfig(nodes=32, seed=7, start=T0, faults=SCENARIO))


def test_same_seed_same_cluster_other_seed_other_cluster():
    cfg = SimConfig(nodes=16, seed=3, start=T0, history_seconds=900, faults="default")
    a, b = Simulation(cfg), Simulation(cfg)
    for name in a.history.series:
        # equal_nan: read latency is NaN where a client read nothing from an OST
        assert np.array_equal(a.history.window(name)[1], b.history.window(name)[1], equal_nan=True), name
    assert a.ground_truth() == b.ground_truth()
    assert build_snapshot(a).to_json() == build_snapshot(b).to_json()
    assert NodeRenderer(a).render(5) == NodeRenderer(b).render(5)
    c = Simulation(SimConfig(nodes=16, seed=4, start=T0, history_seconds=900, faults="default"))
    assert not np.array_equal(a.history.window("util")[1], c.history.window("util")[1])


def _check_invariants(s: Simulation) -> None:
    cl = s.cluster
    held = s.gpu_job >= 0
    assert held.sum() == sum(j.gpus_per_node * j.nodes_n for j in s.running.values())
    assert (s.cpus_alloc <= cl.cfg.cpus_per_node).all() and (s.cpus_alloc >= 0).all()
    for j in s.running.values():
        # a gang holds all its nodes, each with its share of GPUs, or it is not running at all
        assert len(j.nodes) == j.nodes_n == len(set(j.nodes))
        for i, idx in zip(j.nodes, j.gpu_idx):
            assert len(idx) == j.gpus_per_node
            assert (s.gpu_job[i, list(idx)] == j.slot).all()
        assert (s.gpu_job == j.slot).sum() == j.gpus_per_node * j.nodes_n
        assert s.t - j.start <= j.time_limit + 1e-6
        if j.nodes_n > 1:  # gangs are exclusive
            assert all(s.cpus_alloc[i] == cl.cfg.cpus_per_node for i in j.nodes)
    for j in s.finished:
        assert j.end - j.start <= j.time_limit + 1e-6
    for arr in (s.util, s.sm, s.tensor):
        assert (arr >= 0).all() and (arr <= 1).all()
    assert (s.power >= C.GPU_IDLE_WATTS - 1e-3).all() and (s.power <= C.GPU_TDP_WATTS + 1e-3).all()


def test_invariants_hold_at_every_step_and_counters_only_grow():
    s = Simulation(SimConfig(nodes=24, seed=11, start=T0, history_seconds=600, faults="random:12", load=1.3))
    renderer = NodeRenderer(s)
    counters = ("energy", "ib_tx", "ib_rx", "ib_wait", "ib_downed", "ost_read", "ost_write", "ost_read_ops",
                "ost_read_lat", "psi_io_some", "mdt_ops")
    before = {c: getattr(s, c).copy() for c in counters}
    text_before = {n: _counter_samples(renderer.render(n)) for n in (0, 7)}
    drained_at: dict[int, float] = {}
    for _ in range(160):
        s.step()
        _check_invariants(s)
        for c in counters:
            now = getattr(s, c)
            assert (now >= before[c]).all(), c
            before[c] = now.copy()
        for i in np.flatnonzero(~s.usable):
            drained_at.setdefault(int(i), s.t)
        for j in s.running.values():  # nothing starts on a drained node
            if j.start >= s.t and any(i in drained_at and not s.usable[i] for i in j.nodes):
                pytest.fail(f"job {j.job_id} started on a drained node")
    assert s.stats["started"] > 20 and s.stats["completed"] > 0 and len(s.truth) > 3
    # counters in the exposition are monotonic too (per series, where the series still exists)
    for n, old in text_before.items():
        new = _counter_samples(renderer.render(n))
        for key, value in old.items():
            if key in new and "gangwatch_job_" not in key[0]:
                assert new[key] >= value, key


def _counter_samples(text: str) -> dict:
    out = {}
    for name, labels, value in iter_samples(text):
        if name.endswith("_total"):
            out[(name, tuple(sorted(labels.items())))] = value
    return out


def test_planner_schedules_a_congested_queue():
    s = Simulation(SimConfig(nodes=16, seed=2, start=T0, history_seconds=1800, faults="none", load=1.6))
    assert s.last_cycle_policy == "easy"  # the planner never failed
    assert s.stats["backfill_cycles"] > 0
    assert s.pending, "a 160 % load must leave a queue"
    snap = build_snapshot(s)
    reasons = {j.reason for j in snap.jobs if j.state == "PENDING"}
    assert reasons <= {"Resources", "Priority"} and "Resources" in reasons


# --------------------------------------------------------------------------------------- faults

def _job_gpu_mask(s: Simulation, job_id: int, t0: float, t1: float, skip=()):
    """(times, mask of the job's GPUs per sample), samples inside the `skip` spans left out."""
    times, ids = s.history.window("gpu_job", t0, t1)
    keep = np.array([not any(f - s.dt <= t <= l + s.dt for f, l in skip) for t in times], bool)
    return times, (ids == job_id) & keep[:, None, None]


def _mean_where(s, name, mask_times, mask, t0, t1):
    times, data = s.history.window(name, t0, t1)
    assert len(times) == len(mask_times) and mask.any()
    return float(data[mask].mean())


def _truth(s, kind):
    got = [g for g in s.ground_truth() if g["kind"] == kind]
    assert got, f"no {kind} injected"
    return got[0]


def test_every_fault_kind_has_ground_truth(sim):
    kinds = {g["kind"] for g in sim.ground_truth()}
    assert kinds == set(KINDS) - ROCE_KINDS  # those of a RoCE fabric: tests/test_diagnose_roce.py
    for g in sim.ground_truth():
        assert g["cause"] == KINDS[g["kind"]][0]
        assert g["end"] > g["start"] >= sim.t0
        if g["kind"] not in ("scrape_hang", "scrape_slow", "ib_congestion"):
            assert g["jobs"], g
        for span in g["jobs"].values():
            assert g["start"] <= span["from"] <= span["to"] <= g["end"]


def _other_faults(s, g, jid) -> list[tuple[float, float]]:
    """When other faults affected the same job: those samples would mix two causes."""
    return [(o["jobs"][jid]["from"], o["jobs"][jid]["to"]) for o in s.ground_truth()
            if o["id"] != g["id"] and jid in o["jobs"]]


@pytest.mark.parametrize("kind", ["ost_slow", "ib_congestion", "link_flap", "nccl_hang", "gpu_throttle",
                                  "slow_node", "idle_gpus"])
def test_fault_signal_is_in_the_affected_jobs_series(sim, kind):
    g = _truth(sim, kind)
    # the affected job with the most samples that no other fault touched
    choices = []
    for jid, span in g["jobs"].items():
        a, b = span["from"], span["to"]
        times, mask = _job_gpu_mask(sim, int(jid), a, b, _other_faults(sim, g, jid))
        choices.append((int(mask.any(axis=(1, 2)).sum()), jid, a, b, times, mask))
    count, jid, a, b, times, mask = max(choices, key=lambda c: c[0])
    assert count >= 2, f"fault {g['id']}: no job with two samples of this fault alone"
    util = _mean_where(sim, "util", times, mask, a, b)
    sm = _mean_where(sim, "sm", times, mask, a, b)
    if kind == "ost_slow":
        assert util < 0.3 and sm < 0.15
        _, press = sim.history.window("io_pressure", a, b)
        assert press.max() > 0.5
        # the job reads from the slow OST at a few per cent of what it read before the fault
        ost = sim.cluster.osts.index(g["culprit"])
        _, during = sim.history.window("ost_read_rate", a, b)
        t_before, before = sim.history.window("ost_read_rate", a - 600, a - 15)
        held_before = _job_gpu_mask(sim, int(jid), a - 600, a - 15)[1].any(axis=2)
        if held_before.any():
            assert during[mask.any(axis=2)][:, ost].mean() < 0.25 * before[held_before][:, ost].mean()
        # ... and waits 1/SLOW_OST_FACTOR times longer per read RPC, while its other OSTs answer as usual
        _, lat = sim.history.window("ost_read_latency", a, b)
        on = mask.any(axis=2)
        slow = lat[on][:, ost].astype(np.float64)
        assert np.nanmedian(slow) > 10 * 0.003
        others = np.delete(lat[on].astype(np.float64), ost, axis=1)
        assert np.isnan(others).all() or np.nanmedian(others) < 0.01
    elif kind in ("ib_congestion", "link_flap"):
        assert util > 0.85 and sm < 0.3  # NCCL kernels resident, waiting
        ib = _mean_where(sim, "ib_tx_rate", times, mask, a, b)
        assert ib < 0.2 * 0.9 * C.IB_RATE_BYTES
        if kind == "ib_congestion":
            assert _mean_where(sim, "ib_wait_rate", times, mask, a, b) > 1e6
    elif kind == "nccl_hang":
        assert util > 0.97 and sm < 0.05
        assert _mean_where(sim, "ib_tx_rate", times, mask, a, b) == 0.0
    elif kind in ("gpu_throttle", "slow_node"):
        node = sim.cluster.index(g["nodes"][0])
        _, clock = sim.history.window("clock", a, b)
        gpus = [int(g["culprit"].split()[-1])] if kind == "gpu_throttle" else list(range(sim.g))
        held = mask[:, node, gpus]
        assert np.allclose(clock[:, node, gpus][held], C.SM_CLOCK_MAX_HZ * 0.55, rtol=1e-3)
        assert sm < 0.7
    elif kind == "idle_gpus":
        _, u = sim.history.window("util", a, b)
        idle = (u == 0) & mask
        assert idle.sum() >= mask.sum() - len(times) * 1  # all but the first GPU idle at every sample
        assert (u[mask] > 0.5).any()  # the first GPU works


def test_xid79_fails_the_job_drains_the_node_and_shows_in_the_agent_metrics():
    s = Simulation(SimConfig(nodes=16, seed=5, start=T0, history_seconds=900, faults="xid79@5m+1h"))
    g = _truth(s, "xid79")
    node = g["nodes"][0]
    jid = int(next(iter(g["jobs"])))
    snap = build_snapshot(s)
    n = snap.node(node)
    assert n.drain and "XID 79" in n.reason
    j = s.job(jid)
    assert j is None or j.state == "NODE_FAIL"
    text = NodeRenderer(s).render(s.cluster.index(node))
    gpu = g["culprit"].split()[-1]
    assert f'gangwatch_gpu_xid_errors_total{{gpu="{gpu}",xid="79"}} 1' in text
    assert f'gangwatch_gpu_lost{{gpu="{gpu}"}} 1' in text
    assert f'gangwatch_gpu_utilization_ratio{{gpu="{gpu}"}}' not in text
    # after the hour the node is resumed
    s.run_until(s.t0 + 900 + 3600 + 60)
    assert build_snapshot(s).node(node).drain is False


def test_scrape_faults_are_reported_for_their_nodes(sim):
    assert sim.endpoint_delay("node0003") == ("scrape_hang", 60.0)
    assert sim.endpoint_delay("node0004") == ("scrape_slow", 3.0)
    assert sim.endpoint_delay("node0005") is None


# --------------------------------------------------------------------------------------- views

def test_snapshot_round_trips_and_agrees_with_the_state(sim):
    snap = build_snapshot(sim)
    assert Snapshot.from_json(snap.to_json()) == snap
    running = [j for j in snap.jobs if j.state == "RUNNING"]
    assert sum(j.gpus for j in running) == int((sim.gpu_job >= 0).sum())
    assert sum(n.gpus_allocated for n in snap.nodes) == int((sim.gpu_job >= 0).sum())
    for j in running:
        assert len(j.nodes) == j.node_count and sum(a.gpus for a in j.allocations) == j.gpus
    assert {p.name for p in snap.partitions} == {"gpu", "debug"}


def test_topology_conf_lists_every_node_once():
    cl = C.build_cluster(C.ClusterConfig(nodes=100, nodes_per_leaf=32))
    seen = []
    for line in cl.topology_conf().splitlines():
        m = re.match(r"SwitchName=(\S+) Nodes=(\S+)", line)
        if m:
            seen += expand(m.group(2))
    assert sorted(seen) == cl.names and len(cl.leaves) == 4
    assert "SwitchName=spine Switches=leaf[00-03]" in cl.topology_conf()


def _agent_names() -> set[str]:
    """Every metric name the agent's collectors can emit, read from their code and tables."""
    from collectors.lustre_common import Accumulator, StatsFamilies
    from collectors.node.gpu import SPECS
    from collectors.node.gpu_profiling import SPECS as PROF
    from collectors.node.infiniband import COUNTERS, PREFIX

    names = {v[0] for v in SPECS.values()} | {v[0] for v in PROF.values()}
    names |= {PREFIX + c.metric for c in COUNTERS.values()}
    names |= {PREFIX + c.node for c in COUNTERS.values() if getattr(c, "node", "")}  # the node rollups they feed
    acc = Accumulator()
    StatsFamilies(acc, "gangwatch_lustre_client", "")  # llite
    StatsFamilies(acc, "gangwatch_lustre_client_target", "")
    names |= set(acc.families)
    source = "\n".join(p.read_text() for p in (REPO / "collectors").rglob("*.py"))
    names |= set(re.findall(r'"(gangwatch_[a-z0-9_]+)"', source))
    names |= {PREFIX + m for m in re.findall(r'fams\.get\("([a-z_]+)"', source)}
    names |= {PREFIX + m for m in re.findall(r'PREFIX \+ "([a-z_]+)"', source)}
    names |= {"gangwatch_" + m for m in re.findall(r'f"\{[a-z_.]*prefix\}_([a-z_]+)"', source)}
    # lustre_client's import gauges: f"gangwatch_lustre_client_import_{metric}" over (imp.field, "metric", help)
    names |= {"gangwatch_lustre_client_import_" + m for m in re.findall(r'\(imp\.[a-z_]+, "([a-z_]+)"', source)}
    return names


def test_node_metrics_use_the_agents_names_and_are_valid(sim):
    text = NodeRenderer(sim).render(3)
    names = {name for name, _, _ in iter_samples(text)}
    own = {n for n in names if n.startswith("gangwatch_sim_")}
    unknown = {n for n in names - own if n not in _agent_names() and n.removesuffix("_total") not in _agent_names()}
    assert not unknown, unknown
    assert {"gangwatch_gpu_utilization_ratio", "gangwatch_gpu_prof_sm_active_ratio",
            "gangwatch_infiniband_port_transmit_data_bytes_total", "gangwatch_lustre_client_target_io_bytes_total",
            "gangwatch_job_gpu_info"} <= names


def _series(text: str) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list[tuple[dict, float]]] = {}
    for name, labels, value in iter_samples(text):
        out.setdefault(name, []).append((labels, value))
    return out


def _one(series, name):
    got = series.get(name, [])
    assert len(got) <= 1, (name, got)
    return got[0][1] if got else None


def _counters(r: NodeRenderer, i: int) -> tuple:
    """Node i's counters that the agent leaves out while they stand still, as the step holds them
    (exported or not) and as the series show them (one back after standing still: the value it
    stood at): every OST's read and write counters, ((every read, every write), (shown read, shown
    write)) by target; every port's symbol errors and link drops, {counter: (every, shown)} by device."""
    v = r.values()
    osts = tuple(tuple(dict(zip(r.sim.cluster.osts, a[i, k].tolist())) for k in (0, 1)) for a in (v.ost_i, v.shown_i))
    devices = [f"mlx5_{k}" for k in range(r.g)]
    ports = {key: tuple(dict(zip(devices, a[i, IB_ROWS.index(key)].tolist())) for a in (v.ib, v.ib_shown))
             for key in QUIET_IB}
    return osts, ports


def _check_rollups(text: str, counters: tuple) -> dict:
    """Every rollup of the exposition against the per-device series it summarises (the agent's
    semantics: over the devices that gave the reading, left out when none did); returns the series.
    `counters`: every OST's and port's counters that may be left out (_counters), which the Lustre
    totals and the InfiniBand error rollups sum."""
    S = _series(text)
    osts, ports = counters

    def per(name, **want):
        return [(lbl, v) for lbl, v in S.get(name, []) if all(lbl.get(k) == x for k, x in want.items())]

    def close(a, b):
        return a == pytest.approx(b, rel=1e-9, abs=1e-9)

    # GPUs
    lost = per("gangwatch_gpu_lost")
    assert _one(S, "gangwatch_gpu_node_gpus") == sum(v == 0 for _, v in lost)
    assert _one(S, "gangwatch_gpu_node_lost") == sum(v == 1 for _, v in lost)
    util = {lbl["gpu"]: v for lbl, v in per("gangwatch_gpu_utilization_ratio")}
    assert set(util) == {lbl["gpu"] for lbl, v in lost if v == 0}
    rollups = {"gangwatch_gpu_node_utilization_ratio": (util.values(), lambda vs: math.fsum(vs) / len(vs)),
               "gangwatch_gpu_node_memory_used_bytes": ([v for _, v in per("gangwatch_gpu_memory_used_bytes")], math.fsum),
               "gangwatch_gpu_node_power_watts": ([v for _, v in per("gangwatch_gpu_power_watts")], math.fsum),
               "gangwatch_gpu_node_max_temperature_celsius":
                   ([v for _, v in per("gangwatch_gpu_temperature_celsius", sensor="gpu")], max),
               "gangwatch_gpu_node_row_remap_pending":
                   ([v for _, v in per("gangwatch_gpu_row_remap_pending")], lambda vs: sum(v != 0 for v in vs)),
               "gangwatch_gpu_node_row_remap_failure":
                   ([v for _, v in per("gangwatch_gpu_row_remap_failure")], lambda vs: sum(v != 0 for v in vs)),
               "gangwatch_gpu_node_ecc_uncorrected_errors_total":
                   ([v for _, v in per("gangwatch_gpu_ecc_errors_total", error="uncorrected", counter="volatile")], math.fsum)}
    for name, (values, combine) in rollups.items():
        values = list(values)
        got = _one(S, name)
        if not values:
            assert got is None, name  # unknown is not zero
        elif name == "gangwatch_gpu_node_power_watts":
            assert got == pytest.approx(combine(values), abs=0.006), name  # rendered with 2 decimals, as each GPU
        else:
            assert close(got, combine(values)), name
    # jobs: GPUs held (the gpu_info pairs) and their mean utilisation
    held: dict[str, list[str]] = {}
    for lbl, _ in per("gangwatch_job_gpu_info"):
        held.setdefault(lbl["jobid"], []).append(lbl["gpu"])
    assert {lbl["jobid"]: v for lbl, v in per("gangwatch_job_gpus")} == {j: len(g) for j, g in held.items()}
    job_util = {lbl["jobid"]: v for lbl, v in per("gangwatch_job_gpu_utilization_ratio")}
    assert set(job_util) == {j for j, gpus in held.items() if any(g in util for g in gpus)}
    for jid, value in job_util.items():
        answered = [util[g] for g in held[jid] if g in util]
        assert close(value, math.fsum(answered) / len(answered)), jid
    # InfiniBand: sums over the ports, and the ports that left Active (all were Active at start)
    ib = "gangwatch_infiniband_"
    for name in ("transmit_data_bytes", "receive_data_bytes", "transmit_wait_ticks"):
        assert _one(S, f"{ib}node_{name}_total") == sum(v for _, v in per(f"{ib}port_{name}_total")), name
    # the error rollups count every port's own value; a port's series, where shown, its shown value
    for key, name in (("link_downed", "link_downed"), ("symbol_error", "symbol_errors")):
        every, shown = ports[key]
        assert _one(S, f"{ib}node_{name}_total") == sum(every.values()), name
        assert all(shown[lbl["device"]] == v for lbl, v in per(f"{ib}port_{name}_total")), name
    state = {(lbl["device"], lbl["port"]): v for lbl, v in per(f"{ib}port_state_id")}
    phys = {(lbl["device"], lbl["port"]): v for lbl, v in per(f"{ib}port_physical_state_id")}
    assert _one(S, f"{ib}node_ports_down") == sum(v < 4 and phys[key] != 3 for key, v in state.items())
    # Lustre: llite and the targets' sum are what went through the OSCs (every OST's, exported or left
    # out for standing still: the per-target series the node renders are some of them, each at its
    # OST's value); the slowest import per type; every import FULL
    for every, shown, op in zip(*osts, ("read", "write")):
        osc = {lbl["target"]: v for lbl, v in per("gangwatch_lustre_client_target_io_bytes_total", type="osc", operation=op)}
        assert all(shown[t] == v for t, v in osc.items())
        total = sum(every.values())
        assert [v for _, v in per("gangwatch_lustre_client_io_bytes_total", fs=C.FS_NAME, operation=op)] == [total]
        assert [v for _, v in per("gangwatch_lustre_client_targets_io_bytes_total", fs=C.FS_NAME, type="osc",
                                  operation=op)] == [total]
    for kind in ("osc", "mdc"):
        waits = [v for _, v in per("gangwatch_lustre_client_import_rpc_wait_average_seconds", type=kind)]
        assert [v for _, v in per("gangwatch_lustre_client_import_rpc_wait_max_seconds", fs=C.FS_NAME, type=kind)] == \
            ([max(waits)] if waits else [])
    imports = {(lbl["target"], lbl["type"]) for lbl, _ in per("gangwatch_lustre_client_import_connected")}
    info = per("gangwatch_lustre_client_import_info")
    assert {(lbl["target"], lbl["type"]) for lbl, _ in info} == imports and len(info) == len(imports)
    assert all(lbl["state"] == "FULL" and lbl["connection"].endswith("@o2ib") and v == 1 for lbl, v in info)
    # the scrape
    assert _one(S, "gangwatch_scrape_collectors_failed") == sum(v == 0 for _, v in per("gangwatch_scrape_collector_success"))
    return S


def test_rollups_agree_with_the_per_device_series(sim):
    """On every node of a cluster with faults under way (a GPU lost to XID 79 among them)."""
    from collectors.exposition import encode

    r = NodeRenderer(sim)
    lost_seen = 0
    for i in range(sim.n):
        text = r.render(i)
        S = _check_rollups(text, _counters(r, i))
        lost_seen += _one(S, "gangwatch_gpu_node_lost")
        assert "gangwatch_gpu_pcie_throughput_bytes_per_second" not in S  # opt-in in the agent
        # render() writes the families itself: the same samples as the agent's encoder, each family once
        assert sorted(map(repr, iter_samples(text))) == sorted(map(repr, iter_samples(encode(r.families(i)))))
        helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
        assert len(helps) == len(set(helps))
    assert lost_seen == 1  # the XID 79 GPU, so the lost path was checked too
    assert sim.running  # and jobs were there to check


def test_per_ost_counters_rendered_while_they_moved_in_the_agents_idle_window():
    """As the agent (QuietSeries): a node renders an OST's read counters while that OST's read bytes
    moved in the last TARGET_IDLE_SECONDS, from the first rendered step on where it was being read,
    and one back after standing still at the value it stood at for that step; target_idle_series
    counts those left out; the totals keep counting every OST."""
    from collectors.lustre_common import TARGET_IDLE_SECONDS

    s = Simulation(SimConfig(nodes=16, seed=5, start=T0, history_seconds=600))
    r = NodeRenderer(s)
    last = np.where(s.ost_rate > 0, s.t, -np.inf)
    prev = s.ost_read.copy()
    shown, hidden, back = set(), set(), 0
    before = None  # the previous step's read counters as the step held them
    for k in range(120):  # 30 minutes: OSTs go quiet past one idle window, and some come back
        if k:
            s.step()
            was = last.copy()
            last[s.ost_read != prev] = s.t
            prev = s.ost_read.copy()
        for i in range(s.n):
            text = r.render(i)
            S = (_check_rollups(text, _counters(r, i)) if k % 10 == 0 else  # the rest: the families checked here
                 _series("\n".join(line for line in text.splitlines() if line.startswith("gangwatch_lustre_client_target_"))))
            rows = {lbl["target"]: v for lbl, v in S.get("gangwatch_lustre_client_target_io_bytes_total", [])
                    if lbl["operation"] == "read"}
            got = set(rows)
            want = {t for j, t in enumerate(s.cluster.osts) if s.t - last[i, j] <= TARGET_IDLE_SECONDS}
            assert got == want, (k, i)
            for j, t in enumerate(s.cluster.osts):  # back after standing still: at the value it stood at
                if k and t in want and last[i, j] == s.t and s.t - s.cfg.step_seconds - was[i, j] > TARGET_IDLE_SECONDS:
                    assert rows[t] == before[i, j] != r.values().ost_i[i, 0, j]
                    back += 1
            lat = {lbl["target"] for lbl, _ in S.get("gangwatch_lustre_client_target_operation_latency_seconds_total", [])}
            assert lat == want
            writes = {lbl["target"] for lbl, _ in S.get("gangwatch_lustre_client_target_io_bytes_total", [])
                      if lbl["operation"] == "write"}
            assert _one(S, "gangwatch_lustre_client_target_idle_series") == 4 * (len(s.cluster.osts) - len(want)) + 2 * (
                len(s.cluster.osts) - len(writes))
            shown |= {(i, t) for t in want}
            hidden |= {(i, t) for t in set(s.cluster.osts) - want}
        before = r.values().ost_i[:, 0, :].copy()
    assert shown & hidden and back  # some OSTs went quiet and came back while rendered
    assert len(hidden) > len(shown) / 4


def test_link_flap_shows_in_the_ports_down_rollup_while_the_rail_is_down():
    s = Simulation(SimConfig(nodes=8, seed=3, start=T0, history_seconds=60, faults="link_flap@90s+3m:node=node0002;gpu=3"))
    r = NodeRenderer(s)
    seen = []
    for _ in range(10):
        s.step()
        S = _check_rollups(r.render(1), _counters(r, 1))
        state = {lbl["device"]: v for lbl, v in S["gangwatch_infiniband_port_state_id"]}
        down = _one(S, "gangwatch_infiniband_node_ports_down")
        assert down == (state["mlx5_3"] != 4) and all(v == 4 for d, v in state.items() if d != "mlx5_3")
        seen.append((s.t, down, _one(S, "gangwatch_infiniband_node_link_downed_total")))
        assert _one(_series(r.render(2)), "gangwatch_infiniband_node_ports_down") == 0  # another node
    g = _truth(s, "link_flap")
    during = [d for t, d, _ in seen if g["start"] <= t < g["end"]]
    assert 1 in during and 0 in during, seen  # down one step, up the next
    assert all(d == 0 for t, d, _ in seen if not g["start"] <= t <= g["end"])
    assert seen[-1][2] - seen[0][2] == sum(during)  # every time it went down counts once


def test_port_error_counters_rendered_while_they_moved_in_the_agents_idle_window():
    """As the agent (--collector.infiniband.error-idle-seconds): a port's error counters are left
    out while they stand still, counted in port_idle_series with those the simulator keeps at 0; a
    flapping link's come back at the value they stood at for one step, then their own, so the
    port's increases add up to the rollup's, one step late; gone again an idle window after the
    last drop. Every counter at every step with the window 0, and no gauge."""
    s = Simulation(SimConfig(nodes=8, seed=3, start=T0, history_seconds=60, faults="link_flap@90s+3m:node=node0002;gpu=3"))
    r, every = NodeRenderer(s), NodeRenderer(s, port_idle_seconds=0)
    i = s.cluster.names.index("node0002")
    ib = "gangwatch_infiniband_"
    seen = []
    for k in range(80):  # 20 minutes: the flap, then one idle window past its last drop
        if k:
            s.step()
        S = _check_rollups(r.render(i), _counters(r, i))
        downed = {lbl["device"]: v for lbl, v in S.get(f"{ib}port_link_downed_total", [])}
        assert downed == {lbl["device"]: v for lbl, v in S.get(f"{ib}port_link_error_recoveries_total", [])}
        sym = {lbl["device"] for lbl, _ in S.get(f"{ib}port_symbol_errors_total", [])}
        assert set(downed) <= {"mlx5_3"} and sym <= {"mlx5_3"}
        assert _one(S, f"{ib}port_idle_series") == 40 - len(sym) - 2 * len(downed)  # 5 error counters x 8 ports
        assert f"{ib}port_receive_errors_total" not in S
        seen.append((s.t, downed.get("mlx5_3"), _one(S, f"{ib}node_link_downed_total")))
        E = _series(every.render(i))
        assert len(E[f"{ib}port_link_downed_total"]) == len(E[f"{ib}port_receive_errors_total"]) == 8
        assert f"{ib}port_idle_series" not in E
    rollup = [total for _, _, total in seen]
    moves = [k for k in range(1, len(seen)) if rollup[k] != rollup[k - 1]]
    assert len(moves) >= 2 and all(seen[k - 1][1] is None for k in moves[:1])
    first, last = moves[0], moves[-1]
    assert seen[first][1] == rollup[first - 1]  # back at the value it stood at
    assert seen[first + 1][1] == rollup[first + 1]  # then its own
    shown = [k for k, (_, v, _) in enumerate(seen) if v is not None]
    assert shown == list(range(first, shown[-1] + 1))
    assert seen[shown[-1]][0] - seen[last][0] <= 600 < seen[shown[-1] + 1][0] - seen[last][0]
    increases = sum(b - a for (_, a, _), (_, b, _) in zip(seen, seen[1:]) if a is not None and b is not None)
    assert increases == rollup[-1] - rollup[0]


def test_slow_ost_raises_the_rpc_wait_rollup_of_its_clients():
    s = Simulation(SimConfig(nodes=32, seed=7, start=T0, history_seconds=900, faults="ost_slow@5m+20m"))
    g = _truth(s, "ost_slow")
    r = NodeRenderer(s)
    hit, other = [], []
    for i, name in enumerate(s.cluster.names):
        S = _check_rollups(r.render(i), _counters(r, i))
        (lbl, worst), = [(lbl, v) for lbl, v in S["gangwatch_lustre_client_import_rpc_wait_max_seconds"] if lbl["type"] == "osc"]
        slowest = max(S["gangwatch_lustre_client_import_rpc_wait_average_seconds"], key=lambda lv: lv[1])[0]["target"]
        if name in g["nodes"]:
            hit.append(worst)
            assert slowest == g["culprit"], name  # the rollup is the slowed OST's import
        else:
            other.append(worst)
    assert hit and other
    # 1/SLOW_OST_FACTOR x the healthy few ms on every client of the slowed OST, the others unchanged
    assert min(hit) > 10 * 0.003 and np.median(other) < 0.01


def test_promtool_accepts_the_node_and_cluster_expositions(sim, tmp_path):
    import shutil
    import subprocess

    from collectors.exposition import encode
    from dashboard.analysis.sim.slurm_view import exporter_families

    if not shutil.which("promtool"):
        pytest.skip("promtool not installed")
    for text in (NodeRenderer(sim).render(0), encode(exporter_families(sim, build_snapshot(sim)))):
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stdout + res.stderr


# --------------------------------------------------------------------------------------- workload

def test_fitted_model_reproduces_the_itp_size_mix():
    rng = np.random.default_rng(0)
    it = model_arrivals(rng, 512, 0.9)
    jobs = [next(it) for _ in range(4000)]
    ones = sum(j.gpus == 1 for j in jobs) / len(jobs)
    assert 0.80 < ones < 0.86  # ITP: 83.2 % one-GPU jobs
    assert all(j.duration >= 60 for j in jobs)
    assert all(b.submit >= a.submit for a, b in zip(jobs, jobs[1:]))


def test_traces_are_read_and_replayed(fixtures_dir):
    traces = fixtures_dir.parent / "traces"
    itp = read_trace(str(traces / "microsoft-itp-2021-raw-traces.tar.gz") + "#cluster10")
    assert len(itp) == 260 and itp[0].submit == 0
    philly = read_trace(str(traces / "microsoft-philly-2017-jobs.csv"))
    assert len(philly) > 80_000 and all(b.submit >= a.submit for a, b in zip(philly, philly[1:]))
    assert {j.gpus for j in philly} >= {1, 8, 16, 128}
    replay = trace_arrivals(itp, 128, 0.9)
    first = [next(replay) for _ in range(300)]  # runs past the end: the trace repeats
    assert first[260].submit > first[259].submit
    s = Simulation(SimConfig(nodes=16, seed=1, start=T0, history_seconds=600, faults="none",
                             trace=str(traces / "microsoft-itp-2021-raw-traces.tar.gz") + "#cluster10"))
    assert s.stats["submitted"] > 0
    _check_invariants(s)


def test_fault_syntax():
    specs, rate = parse_faults("ost_slow@10m+5m:ost=2,random:3,xid79@1h")
    assert rate == 3 and [f.kind for f in specs] == ["ost_slow", "xid79"]
    assert specs[0].start == 600 and specs[0].duration == 300 and specs[0].get("ost") == "2"
    assert specs[1].duration == KINDS["xid79"][1]
    assert parse_faults("none") == ([], 0.0)
    assert len(parse_faults("default")[0]) == 10
    for bad in ("bogus@1m", "ost_slow@ten", "ost_slow:nope", "random:x"):
        with pytest.raises(ValueError):
            parse_faults(bad)
    assert parse_duration("90") == 90 and parse_duration("2h") == 7200


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fault_parser_raises_only_value_error(text):
    try:
        specs, rate = parse_faults(text)
    except ValueError:
        return
    assert all(f.kind in KINDS and math.isfinite(f.start) for f in specs) and rate >= 0


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["submission_time,duration,num_gpu\n", "timestamp,duration,num_gpus,gpu_time,cluster\n", ""]),
       st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_trace_row_parser_never_raises(header, body):
    import io

    for submit, duration, gpus in parse_rows(io.StringIO(header + body)):
        assert gpus >= 1 and duration > 0 and math.isfinite(submit) and math.isfinite(duration)


# --------------------------------------------------------------------------------------- jobs collector, overlaps

def _job_series(text: str) -> dict:
    """{(name, jobid, extra labels): value} of the jobs collector's per-job series."""
    out = {}
    for name, labels, value in iter_samples(text):
        if name.startswith("gangwatch_job_"):
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "jobid"))
            out[(name, labels.get("jobid"), rest)] = value
    return out


def test_jobs_collector_series_for_every_running_job_with_the_agents_names():
    from collectors.node.jobs import JobFamilies

    s = Simulation(SimConfig(nodes=8, seed=2, start=T0, history_seconds=300, faults="ost_slow@1m+1h"))
    r = NodeRenderer(s)
    fams = {f.name: f for f in JobFamilies().all()}
    before = {i: _job_series(r.render(i)) for i in range(s.n)}
    for _ in range(8):
        s.step()
    truth = _truth(s, "ost_slow")
    for i in range(s.n):
        text = r.render(i)
        got = _job_series(text)
        for name, _, _ in got:
            assert name in fams, name  # the names the agent's jobs collector emits, nothing else
        for fam in fams.values():  # help texts and types as the agent's
            if f"# HELP {fam.name} " in text:
                assert f"# HELP {fam.name} {fam.help}" in text and f"# TYPE {fam.name} {fam.kind}" in text
        on_node = {int(x) for x in s._job_ids_now()[i] if x >= 0}
        assert {j for (_, j, _) in got} == {str(j) for j in on_node}
        for jid in map(str, on_node):
            held = sorted(int(k) for k in np.flatnonzero(s._job_ids_now()[i] == int(jid)))
            assert {int(dict(rest)["gpu"]) for (n, j, rest) in got if n == "gangwatch_job_gpu_info" and j == jid} == set(held)
            for name, rest in (("gangwatch_job_cpu_seconds_total", ()), ("gangwatch_job_memory_usage_bytes", ()),
                               ("gangwatch_job_io_read_bytes_total", (("device", "nvme0n1"),)),
                               ("gangwatch_job_io_write_bytes_total", (("device", "nvme0n1"),)),
                               *((f"gangwatch_job_pressure_{k}_seconds_total", (("resource", res),))
                                 for k in ("waiting", "stalled") for res in ("cpu", "io", "memory"))):
                assert (name, jid, rest) in got, (name, jid)
            # counters only grow for the same job; io pressure grows at the job's stall fraction
            waited = got[("gangwatch_job_pressure_waiting_seconds_total", jid, (("resource", "io"),))]
            old = before[i].get(("gangwatch_job_pressure_waiting_seconds_total", jid, (("resource", "io"),)))
            for key, value in got.items():
                if key[1] == jid and key[0].endswith("_total") and key in before[i]:
                    assert value >= before[i][key], key
            if old is None or s.job(jid).start > T0 + 300:
                continue
            frac = (waited - old) / (8 * s.dt)
            if jid in truth["jobs"] and truth["jobs"][jid]["from"] <= T0 + 300:
                assert 0.8 <= frac <= 1.0, (jid, frac)  # stalled on its input all along
            elif not any(jid in f["jobs"] for f in s.ground_truth()):
                assert frac < 0.55, (jid, frac)  # reading (and at most a checkpoint's writes)


def test_overlapping_faults_show_the_dominant_one_and_truth_lists_both():
    from dashboard.analysis.sim.faults import CAUSE_PRECEDENCE, dominant

    assert dominant({"straggler", "stalled_io"}) == "stalled_io"
    assert dominant({"stalled_network", "hung"}) == "hung" and dominant(set()) is None
    assert CAUSE_PRECEDENCE[0] == "hung"
    probe = Simulation(SimConfig(nodes=16, seed=5, start=T0, history_seconds=60, faults="none"))
    job = max(probe.running.values(), key=lambda j: (j.gpus, -j.job_id))
    node = probe.cluster.names[job.nodes[0]]
    ost = int(probe.j_stripe[job.slot][0])
    # the same seed replays the same jobs: throttle the job's node, then slow one of its OSTs
    s = Simulation(SimConfig(nodes=16, seed=5, start=T0, history_seconds=60,
                             faults=f"slow_node@0s+30m:node={node},ost_slow@3m+10m:ost={ost}"))
    s.run_until(T0 + 150)
    i = s.cluster.index(node)
    gpus = list(job.gpu_idx[0])
    assert np.allclose(s.clock[i, gpus], C.SM_CLOCK_MAX_HZ * 0.55, rtol=1e-3)
    if job.gpus > 1:
        assert s.sm[i, gpus].max() >= 0.9  # a straggler: its GPUs on the slow node work flat out
    s.run_until(T0 + 360)
    # stalled on its input now: every GPU starves, the throttled clock stays, nothing writes
    assert s.sm[i, gpus].max() < 0.1 and np.allclose(s.clock[i, gpus], C.SM_CLOCK_MAX_HZ * 0.55, rtol=1e-3)
    causes = {f["cause"] for f in s.ground_truth() if str(job.job_id) in f["jobs"]}
    assert causes == {"straggler", "stalled_io"} and dominant(causes) == "stalled_io"


def test_shared_node_io_stall_is_found_through_the_jobs_own_pressure():
    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.simulated import SimRecorder, window_from_history

    s = Simulation(SimConfig(nodes=16, seed=3, start=T0, prefill=False, faults="ost_slow@10m+30m"))
    rec = SimRecorder(s, capacity=81)
    rec.step(60)
    hit = set(_truth(s, "ost_slow")["jobs"])
    jobs = [j for j in rec.jobs() if j.state == "RUNNING"]
    per_node = {}
    for j in jobs:
        for n in j.nodes:
            per_node[n] = per_node.get(n, 0) + 1
    shared = {str(j.job_id) for j in jobs if any(per_node[n] > 1 for n in j.nodes) and j.start_time < s.t - 600}
    assert shared & hit, "the scenario must stall jobs that share a node"
    for win in (rec.window(), window_from_history(s)):
        assert set(win.job["psi_io"]) == {str(j.job_id) for j in jobs}
        d = diagnose(win, jobs)
        got = {v.jobid: v.state for v in d.verdicts}
        assert all(got[j] == "stalled_io" for j in shared & hit), got
        assert all(got[j] in ("progressing", "insufficient_data") for j in shared - hit), got
        # the culprit is the slowed OST (its read latency stands out from the other targets), and the
        # jobs it stalls are one incident
        stalled = [v for v in d.verdicts if v.state == "stalled_io"]
        assert {(v.culprit, v.culprit_kind) for v in stalled} == {(_truth(s, "ost_slow")["culprit"], "target")}
        assert [(i.culprit, set(i.jobs)) for i in d.incidents if i.cause == "stalled_io"] == \
            [(_truth(s, "ost_slow")["culprit"], {v.jobid for v in stalled})]


def test_showcase_suspension_dependencies_reservation_and_priority():
    from dashboard.analysis.sim.slurm_view import build_snapshot

    s = Simulation(SimConfig(nodes=16, seed=2, start=T0, history_seconds=1200, faults="none", load=1.3,
                             showcase=True, priority="multifactor"))
    snap = build_snapshot(s)
    # a suspended job keeps its GPUs and their memory but runs nothing; its end moves by the suspension
    (job,) = [j for j in s.running.values() if j.state == "SUSPENDED"]
    i, gpus = job.nodes[0], list(job.gpu_idx[0])
    assert s.util[i, gpus].max() == 0 and s.mem_used[i, gpus].min() > 0
    sj = snap.job(job.job_id)
    assert sj.state == "SUSPENDED" and sj.end_time == job.start + job.time_limit + job.suspended_s
    # afterok on a failed parent can never be satisfied: the job waits with that reason and never starts
    never = [j for j in s.pending if j.dep_state == "failed"]
    assert never and all(j.reason == "DependencyNeverSatisfied" for j in never)
    assert snap.job(never[0].job_id).dependencies[0].state == "failed"
    waiting = [j for j in s.pending if j.dep_state == "unfulfilled"]
    assert waiting and all(j.reason == "Dependency" for j in waiting)
    # a maintenance reservation: no job runs on its nodes past its start
    (r,) = s.reservations
    s.run_until(T0 + 1200 + 1800)
    assert all(j.planned_end <= r.start for j in s.running.values() if set(j.nodes) & set(r.nodes) and j.start > T0)
    assert all(j.state == "PENDING" for j in never)
    # the queue is in multifactor priority order, and the snapshot says so with the factors
    snap = build_snapshot(s)
    prio = [snap.job(j.job_id).priority for j in s.pending if j.eligible]
    assert prio == sorted(prio, reverse=True) and len(set(prio)) > 1
    fs = {r.account: r.fairshare for r in snap.fairshare if r.depth == 1}
    assert len(fs) == 5 and max(fs.values()) > min(fs.values())
