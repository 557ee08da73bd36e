"""Backfill planner: hand-built clusters with known answers, a golden plan, and properties."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import (
    Allocation,
    PartitionInfo,
    PendingJob,
    PlannerInput,
    PlannerNode,
    Reservation,
    RunningJob,
    format_duration,
)

NOW = 1_750_000_000.0
H = 3600.0
GOLDEN = Path(__file__).parent / "golden" / "backfill_plan.json"


def gpu_node(i, free_gpus=8, free_cpus=64, **kw):
    return PlannerNode(f"gpu{i:03d}", kw.pop("partitions", ("gpu",)), 64, free_cpus, 512_000,
                       512_000 - (8 - free_gpus) * 64_000, 8, free_gpus, **kw)


def busy(i, gpus=8, cpus=64):
    return gpu_node(i, free_gpus=8 - gpus, free_cpus=64 - cpus)


def running(job_id, nodes, ends_in, gpus=8, cpus=64):
    return RunningJob(job_id, NOW - 60, ends_in + 60,
                      tuple(Allocation(f"gpu{i:03d}", cpus, (gpus * 64_000), gpus) for i in nodes))


def job(job_id, nodes=1, gpus=8, hours=1.0, **kw):
    kw.setdefault("partitions", ("gpu",))
    return PendingJob(job_id, time_limit_s=hours * H, min_nodes=nodes, gpus_per_node=gpus, **kw)


def snap(nodes, run=(), pending=(), reservations=(), partitions=()):
    return PlannerInput(NOW, tuple(nodes), tuple(run), tuple(reservations), tuple(pending), tuple(partitions))


def startable_ids(result, partition="gpu"):
    return [s.job_id for s in result.partition(partition).startable]


# ------------------------------------------------------------------------------ gangs and EASY

def base_cluster():
    """gpu001-004 busy until +2 h (one gang), gpu005-006 idle, gpu007 half busy until +1 h."""
    nodes = [busy(1), busy(2), busy(3), busy(4), gpu_node(5), gpu_node(6), busy(7, gpus=4, cpus=32)]
    run = [running("100", [1, 2, 3, 4], 2 * H), running("101", [7], 1 * H, gpus=4, cpus=32)]
    return nodes, run


def test_gang_needs_all_its_nodes_at_once():
    nodes, run = base_cluster()
    r = plan(snap(nodes, run, [job("200", nodes=6, hours=4)]))
    top = r.partition("gpu").top_job
    # 2.5 nodes' worth of GPUs are free now, but a 6-node gang must wait for the 4-node gang to end
    assert top.job_id == "200" and top.shadow_time == NOW + 2 * H
    assert set(top.nodes) == {"gpu001", "gpu002", "gpu003", "gpu004", "gpu007", "gpu005"}
    assert startable_ids(r) == []
    why = r.why("200")
    assert why.state == "top" and why.expected_start == NOW + 2 * H


def test_job_that_would_delay_the_top_job_is_not_startable():
    nodes, run = base_cluster()
    pending = [job("200", nodes=6, hours=4),
               job("201", nodes=2, hours=1),  # ends before the shadow time: backfills
               job("202", nodes=1, gpus=4, hours=5)]  # fits gpu007 now, but would still run at +2 h
    r = plan(snap(nodes, run, pending))
    assert startable_ids(r) == ["201"]
    s = r.partition("gpu").startable[0]
    assert s.nodes == ("gpu005", "gpu006") and s.by == "backfill" and s.end == NOW + H
    why = r.why("202")
    assert why.state == "waiting"
    assert "priority" in why.codes
    assert "would delay top job 200" in next(x.message for x in why.reasons if x.code == "priority")
    assert why.what_if is not None and why.what_if.time_limit_s == 2 * H
    assert why.what_if.message == "with --time at most 2:00:00 it could start now on gpu007"
    # gpu006 is free for ever once job 201 ends, so 202's earliest start is +1 h there
    assert why.expected_start == NOW + H and why.expected_nodes == ("gpu006",)


def test_job_on_nodes_the_top_job_does_not_need_is_startable():
    nodes = [busy(1), busy(2), gpu_node(3), gpu_node(4)]
    run = [running("100", [1, 2], 3 * H)]
    pending = [job("200", nodes=3, hours=2), job("201", nodes=1, hours=10)]
    r = plan(snap(nodes, run, pending))
    top = r.partition("gpu").top_job
    assert top.shadow_time == NOW + 3 * H
    assert set(top.nodes) == {"gpu001", "gpu002", "gpu003"}  # the nodes freeing up last, then by name
    assert startable_ids(r) == ["201"]
    assert r.partition("gpu").startable[0].nodes == ("gpu004",)


def test_jobs_ahead_of_the_top_job_start_by_priority_and_best_fit():
    nodes = [gpu_node(1, free_gpus=2, free_cpus=16), gpu_node(2)]
    pending = [job("1", gpus=2), job("2", gpus=8), job("3", gpus=8)]
    r = plan(snap(nodes, [running("9", [1], H, gpus=6, cpus=48)], pending))
    starts = {s.job_id: s for s in r.partition("gpu").startable}
    assert starts["1"].nodes == ("gpu001",) and starts["1"].by == "priority"  # the tighter fit
    assert starts["2"].nodes == ("gpu002",)
    assert r.partition("gpu").top_job.job_id == "3"


# ------------------------------------------------------------------------------ nodes out of use

def test_drained_down_and_reserved_nodes_are_excluded():
    nodes = [gpu_node(1, usable=False, reason="drained: bad GPU"),
             gpu_node(2, usable=False, reason="down"), gpu_node(3), gpu_node(4)]
    resv = Reservation("ops", ("gpu004",), NOW - H, NOW + 5 * H, users=frozenset({"ops"}))
    r = plan(snap(nodes, pending=[job("1", nodes=2), job("2")], reservations=[resv]))
    p = r.partition("gpu")
    assert p.nodes_usable == 2
    assert [s.job_id for s in p.startable] == ["2"] and p.startable[0].nodes == ("gpu003",)
    assert [w.node_list for w in p.windows] == ["gpu003"]
    assert p.top_job.job_id == "1" and p.top_job.shadow_time == NOW + 5 * H  # when ops ends
    why1 = r.why("1")
    assert why1.state == "top" and set(why1.expected_nodes) == {"gpu003", "gpu004"}


def test_maintenance_reservation_blocks_its_nodes_from_its_start():
    nodes = [gpu_node(1), gpu_node(2)]
    maint = Reservation("maint", ("gpu001", "gpu002"), NOW + H, NOW + 3 * H, frozenset({"MAINT"}))
    r = plan(snap(nodes, pending=[job("long", nodes=2, hours=2), job("short", nodes=2, hours=0.5)],
                  reservations=[maint]))
    p = r.partition("gpu")
    assert p.top_job.job_id == "long" and p.top_job.shadow_time == NOW + 3 * H
    assert startable_ids(r) == ["short"]
    assert [(w.nodes, w.gpus_per_node, w.until) for w in p.windows] == [(2, 8, NOW + H)]
    # the top job is told why it cannot start now: the reservation, and the what-if
    why = r.why("long")
    assert "reservation" in why.codes
    msg = next(x.message for x in why.reasons if x.code == "reservation")
    assert "maint (maintenance) on gpu[001-002]" in msg
    assert why.what_if.message == "with --time at most 1:00:00 it could start now on gpu[001-002]"


def test_job_in_its_own_reservation():
    nodes = [gpu_node(1), gpu_node(2)]
    resv = Reservation("train", ("gpu002",), NOW - H, NOW + 10 * H, users=frozenset({"alice"}))
    pending = [job("mine", reservation="train", user="alice"), job("theirs", reservation="train", user="bob"),
               job("none", reservation="nope"), job("other", nodes=2)]
    r = plan(snap(nodes, pending=pending, reservations=[resv]))
    starts = {s.job_id: s.nodes for s in r.partition("gpu").startable}
    assert starts == {"mine": ("gpu002",)}
    assert r.why("theirs").codes == ("reservation_access",) and r.why("theirs").state == "never"
    assert r.why("none").codes == ("no_such_reservation",)
    assert r.partition("gpu").top_job.job_id == "other"


def test_every_node_down():
    nodes = [gpu_node(i, usable=False, reason="down") for i in range(1, 5)]
    r = plan(snap(nodes, pending=[job("1"), job("2", nodes=4)]))
    p = r.partition("gpu")
    assert p.windows == () and p.startable == () and p.top_job is None and p.nodes_usable == 0
    for jid in ("1", "2"):
        why = r.why(jid)
        assert why.state == "blocked" and why.codes == ("no_usable_nodes",)
        assert "0 of 4" in why.reasons[0].message and "gpu[001-004] down or drained" in why.reasons[0].message
        assert why.expected_start is None


# ------------------------------------------------------------------------------ why it waits

def test_fragmentation_message():
    nodes = [busy(i, gpus=4, cpus=32) for i in range(1, 13)]
    run = [running(f"r{i}", [i], 5 * H, gpus=4, cpus=32) for i in range(1, 13)]
    r = plan(snap(nodes, run, [job("big", nodes=6, gpus=8, hours=2), job("next", nodes=6, gpus=8)]))
    why = r.why("next")
    frag = next(x.message for x in why.reasons if x.code == "fragmentation")
    assert frag == "48 GPUs are free in partition gpu, but no 6 nodes have 8 free GPUs each (0 do)"
    assert "resources" in why.codes and "priority" in why.codes
    assert r.why("big").state == "top" and r.why("big").expected_start == NOW + 5 * H


def test_never_satisfiable_dependency_is_said_loudly():
    r = plan(snap([gpu_node(1)], pending=[job("1", dependency="never", dependency_text="afterok:41(failed)"),
                                          job("2", dependency="pending", dependency_text="afterany:40"),
                                          job("3", dependency="satisfiable")]))
    never = r.why("1")
    assert never.state == "never" and never.reasons[0].severity == "error"
    assert never.reasons[0].message.startswith("NEVER SATISFIABLE: its dependency afterok:41(failed)")
    assert r.why("2").state == "blocked" and r.why("2").codes == ("dependency",)
    assert r.why("3").state == "startable"
    # a job that can never run has no place in the queue order: the next one ranks first
    assert never.rank is None and r.why("2").rank == 1 and r.why("3").rank == 2
    data = never.to_json()
    assert data["dependency"] == {"state": "never", "text": "afterok:41(failed)"} and data["rank"] is None


def test_held_and_begin_time():
    nodes = [gpu_node(1)]
    r = plan(snap(nodes, pending=[job("h", held=True, slurm_reason="JobHeldUser"),
                                  job("b", begin_time=NOW + 2 * H)]))
    assert r.why("h").codes == ("held",) and r.why("h").expected_start is None
    assert r.why("h").to_json()["slurm_reason_text"] == "its owner put it on hold"
    b = r.why("b")
    assert b.state == "blocked" and b.codes == ("begin_time",) and b.expected_start == NOW + 2 * H
    assert startable_ids(r) == []  # neither takes the node


def test_requests_that_cannot_exist():
    nodes = [gpu_node(1, gpu_type="a100", features=frozenset({"ib"})), gpu_node(2, gpu_type="a100")]
    pending = [job("part", partitions=("nope",)), job("type", gpu_type="h100"), job("feat", features=("nvlink",)),
               job("nodes", nodes=3), job("gpus", gpus=16), job("time", hours=48),
               job("zero", hours=0), job("neg", hours=-1)]
    r = plan(snap(nodes, pending=pending, partitions=[PartitionInfo("gpu", max_time_s=24 * H)]))
    expect = {"part": "no_such_partition", "type": "no_such_gpu_type", "feat": "no_such_feature",
              "nodes": "too_large", "gpus": "too_large", "time": "too_large", "zero": "bad_time_limit",
              "neg": "bad_time_limit"}
    for jid, code in expect.items():
        why = r.why(jid)
        assert why.codes == (code,), (jid, why.reasons)
        assert why.state == "never" and why.reasons[0].severity == "error"
    assert r.partition("nope").exists is False and r.why("part").partition == "nope"
    assert "asks for 3 nodes but partition gpu has 2" in r.why("nodes").reasons[0].message


def test_gpus_per_job_spreads_over_nodes_and_gpus_per_node_does_not():
    nodes = [gpu_node(i) for i in range(1, 4)]
    pending = [job("perjob", gpus=0, gpus_per_job=16), job("pernode", gpus=16),
               job("cpu", gpus=0, cpus_per_node=8), job("nogpu-part", gpus_per_job=2, partitions=("cpu",))]
    nodes.append(PlannerNode("cpu001", ("cpu",), 128, 128, 256_000, 256_000))
    r = plan(snap(nodes, pending=pending))
    starts = {s.job_id: s.nodes for s in r.partition("gpu").startable}
    assert starts["perjob"] == ("gpu001", "gpu002")
    assert r.why("pernode").codes == ("too_large",)
    assert starts["cpu"] == ("gpu001",)  # best fit: a CPU-only job goes where the GPUs are taken
    assert r.why("nogpu-part").codes == ("no_such_gpu_type",)


def test_exclusive_needs_idle_nodes():
    nodes = [gpu_node(1, free_gpus=7, free_cpus=60), gpu_node(2)]
    run = [running("9", [1], H, gpus=1, cpus=4)]
    r = plan(snap(nodes, run, [job("x", nodes=2, gpus=1, exclusive=True), job("y", gpus=1, hours=2)]))
    assert r.partition("gpu").top_job.shadow_time == NOW + H
    # y would fit on gpu002 now but the exclusive top job needs that whole node from +1 h
    assert startable_ids(r) == []
    assert r.why("y").what_if.time_limit_s == H


def test_multi_partition_job_starts_where_it_fits():
    nodes = [busy(1), gpu_node(2, partitions=("small",))]
    run = [running("9", [1], H)]
    r = plan(snap(nodes, run, [job("x", partitions=("gpu", "small"))]))
    assert startable_ids(r, "small") == ["x"] and r.why("x").partition == "small"


def test_overdue_running_job_frees_its_nodes_now():
    nodes = [busy(1)]
    run = [RunningJob("9", NOW - 2 * H, H, (Allocation("gpu001", 64, 512_000, 8),))]
    r = plan(snap(nodes, run, [job("x")]))
    assert r.partition("gpu").top_job.shadow_time == NOW


def test_slurm_estimate_shown_beside_ours():
    nodes, run = base_cluster()
    r = plan(snap(nodes, run, [job("200", nodes=6, hours=4, slurm_expected_start=NOW + 2 * H + 30,
                                   priority=12345.0, priority_factors={"age": 0.5, "fairshare": 0.2})]))
    data = r.why("200").to_json()
    assert data["expected_start"] == {"time": NOW + 2 * H, "nodes": data["expected_start"]["nodes"],
                                      "source": "gangwatch"}
    assert data["slurm_expected_start"] == {"time": NOW + 2 * H + 30, "source": "slurm"}
    assert data["priority_factors"] == {"age": 0.5, "fairshare": 0.2}


def test_format_duration():
    assert format_duration(3 * H + 40 * 60) == "3:40:00"
    assert format_duration(26 * H) == "1-02:00:00"
    assert format_duration(-5) == "0:00:00"


def test_golden_plan(update_golden):
    nodes, run = base_cluster()
    nodes.append(gpu_node(8, usable=False, reason="drained: bad GPU"))
    pending = [job("200", nodes=6, hours=4), job("201", nodes=2, hours=1), job("202", nodes=2, hours=5),
               job("203", nodes=1, gpus=4, hours=5), job("204", partitions=("gpux",)),
               job("205", dependency="never", dependency_text="afterok:99"), job("206", nodes=16),
               job("207", gpus=0, gpus_per_job=16)]
    result = json.dumps(plan(snap(nodes, run, pending)).to_json(), indent=1, sort_keys=True) + "\n"
    if update_golden or not GOLDEN.exists():
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(result)
    assert result == GOLDEN.read_text()


# ------------------------------------------------------------------------------ properties

@st.composite
def snapshots(draw):
    """Small clusters, mostly eligible jobs (so that top jobs and backfilling happen often), with a
    sprinkling of every odd case: down nodes, a maintenance reservation, jobs in it, held, dependent,
    begin-time, exclusive, over-sized, nonexistent partitions, odd CPU requests."""
    n = draw(st.integers(1, 6))
    nodes, run = [], []
    for i in range(1, n + 1):
        parts = draw(st.lists(st.integers(1, 4), max_size=2))  # up to two running jobs, in GPUs
        used = min(8, sum(parts))
        nodes.append(replace(gpu_node(i, free_gpus=8 - used, free_cpus=64 - 8 * used),
                             usable=draw(st.integers(0, 5)) > 0 or i == 1))
        left = 8
        for k, g in enumerate(parts):
            g = min(g, left)
            left -= g
            if g:
                ends_in = draw(st.integers(-100, 20_000)) if draw(st.integers(0, 7)) else float("inf")  # unlimited
                run.append(running(f"r{i}.{k}", [i], ends_in, gpus=g, cpus=8 * g))
    resv = []
    if n and draw(st.integers(0, 2)) == 0:
        start = NOW + draw(st.integers(-5000, 20_000))
        resv.append(Reservation("m", (f"gpu{draw(st.integers(1, n)):03d}",), start,
                                start + draw(st.integers(1, 20_000)), frozenset({"MAINT"})))
    pending = []

    def rare(normal, *odd):  # the normal value five times in six
        return normal if draw(st.integers(0, 5)) else draw(st.sampled_from(odd))

    for k in range(draw(st.integers(0, 10))):
        pending.append(PendingJob(
            f"p{k}", rare(("gpu",), ("nope",), ("nope", "gpu")),
            draw(st.integers(1, 30_000)) if draw(st.integers(0, 9)) else draw(st.sampled_from((-10, 0, float("inf")))),
            reservation=rare(None, "m", "x"), begin_time=rare(None, NOW - 5, NOW + 500),
            tasks=draw(st.integers(-1, 5)), cpus_per_node=rare(None, 0, -3, 8, 70),
            min_nodes=rare(draw(st.integers(1, n)), 0, 7), gpus_per_node=rare(1, 0, 2, 4, 8, 9),
            gpus_per_job=rare(0, 4, 12), exclusive=rare(False, True), held=rare(False, True),
            dependency=rare("none", "pending", "never")))
    return snap(nodes, run, pending, resv)


def _share(req_job, node_by_name, nodes_used):
    """(CPUs, GPUs) a startable job takes per node, recomputed from its request."""
    n = len(nodes_used)
    if req_job.exclusive:
        return None
    g = req_job.gpus_per_node
    if req_job.gpus_per_job:
        g = -(-req_job.gpus_per_job // n)
    c = max(1, req_job.cpus_per_node or -(-max(1, req_job.tasks) // n) * req_job.cpus_per_task)
    return c, g


@given(snapshots())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_startable_jobs_fit_and_never_delay_the_top_job(inp):
    result = plan(inp)  # never raises
    json.dumps(result.to_json())
    node_by_name = {n.name: n for n in inp.nodes}
    pending = {j.job_id: j for j in inp.pending}
    used_g = {n.name: 0 for n in inp.nodes}
    used_c = {n.name: 0 for n in inp.nodes}
    p = result.partition("gpu") if any(x.name == "gpu" for x in result.partitions) else None
    if p is None:
        return
    for s in p.startable:
        j = pending[s.job_id]
        assert len(s.nodes) >= max(1, j.min_nodes)  # a gang gets all its nodes at once
        share = _share(j, node_by_name, s.nodes)
        for name in s.nodes:
            node = node_by_name[name]
            assert node.usable
            used_g[name] += node.gpus_free if share is None else share[1]
            used_c[name] += node.cpus_free if share is None else share[0]
            assert used_g[name] <= node.gpus_free and used_c[name] <= node.cpus_free  # never over-allocated
            for r in inp.reservations:  # never inside a reservation it did not ask for
                if name in r.nodes and j.reservation != r.name:
                    assert s.end <= r.start or r.end <= NOW
                if j.reservation == r.name:
                    assert name in r.nodes and r.start <= NOW
    top = p.top_job
    if top is None:
        return
    tj = pending[top.job_id]
    per_node_g = tj.gpus_per_node if not tj.gpus_per_job else -(-tj.gpus_per_job // len(top.nodes))
    for name in top.nodes:
        node = node_by_name[name]
        free_at_shadow = node.gpus_free + sum(
            a.gpus for r in inp.running for a in r.allocations
            if a.node == name and max(r.expected_end, NOW) <= top.shadow_time)
        late = [s for s in p.startable if name in s.nodes and s.end > top.shadow_time]
        taken = sum(node.gpus_free if pending[s.job_id].exclusive else
                    _share(pending[s.job_id], node_by_name, s.nodes)[1] for s in late)
        need = node.gpus_total if tj.exclusive else per_node_g
        assert free_at_shadow - taken >= need, (name, top, late)


def test_partition_down_and_empty_partition():
    nodes = [gpu_node(1)]
    parts = [PartitionInfo("gpu", up=False), PartitionInfo("empty")]
    r = plan(snap(nodes, pending=[job("1"), job("2", partitions=("empty",))], partitions=parts))
    assert r.why("1").codes == ("partition_down",) and r.why("1").state == "blocked"
    assert startable_ids(r) == []
    assert r.why("2").codes == ("too_large",) and "has no nodes" in r.why("2").reasons[0].message
    assert r.partition("empty").exists and r.partition("empty").nodes_total == 0


def test_plan_json_shape():
    nodes, run = base_cluster()
    data = plan(snap(nodes, run, [job("200", nodes=6, hours=4), job("201", nodes=2)])).to_json()
    assert set(data) == {"generated_at", "source", "policy", "scheduler", "partitions"}
    assert data["source"] == "gangwatch" and data["policy"] == "easy" and data["scheduler"] is None
    part = data["partitions"][0]
    assert set(part) == {"partition", "exists", "nodes_total", "nodes_usable", "top_job", "windows",
                         "startable", "why"}
    assert set(part["windows"][0]) == {"nodes", "gpus_per_node", "cpus", "until", "node_list"}
    assert part["top_job"]["source"] == "gangwatch" and part["top_job"]["node_list"] == "gpu[001-005,007]"
    assert part["startable"][0] == {"job_id": "201", "nodes": ["gpu005", "gpu006"], "node_list": "gpu[005-006]",
                                    "end": NOW + H, "by": "backfill"}
    assert [w["rank"] for w in part["why"]] == [1, 2]
    json.dumps(data)


def test_unlimited_and_nan_time_limits():
    nodes = [busy(1), gpu_node(2)]
    run = [running("9", [1], H)]
    inf = float("inf")
    r = plan(snap(nodes, run, [job("gang", nodes=2, hours=inf), job("nan", hours=float("nan")),
                               job("short", hours=0.5), job("long", hours=inf)],
                  partitions=[PartitionInfo("gpu", max_time_s=inf)]))
    assert r.partition("gpu").top_job.job_id == "gang" and r.partition("gpu").top_job.shadow_time == NOW + H
    assert r.why("nan").codes == ("bad_time_limit",)
    assert startable_ids(r) == ["short"]  # ends before the unlimited gang's shadow time
    assert r.why("long").codes == ("priority", "no_start_in_plan")
    json.dumps(r.to_json())
    assert format_duration(inf) == "UNLIMITED"


def test_an_unlimited_job_started_in_the_plan_keeps_every_release_in_order():
    """An unlimited job started in the plan releases at +inf; merging that release into the sorted
    ones must keep it on its own node (a key of node + 1j * inf is NaN + inf j, which sorted it past
    every node and left gpu001's 10-minute job without its release: p3 was 'blocked')."""
    inf = float("inf")
    r = plan(snap([gpu_node(1), gpu_node(2)], (), [
        job("p0", gpus=2, hours=600 / H), job("p1", gpus=1, hours=inf), job("p2", nodes=2, gpus=4, hours=27),
        job("p3", nodes=2, gpus=2)]))
    assert startable_ids(r) == ["p0", "p1", "p2"]
    top = r.partition("gpu").top_job
    assert top.job_id == "p3" and top.shadow_time == NOW + 600


def _request_of(j):
    n = max(1, j.min_nodes)
    g = max(0, j.gpus_per_node)
    if j.gpus_per_job > 0:
        n = max(n, -(-j.gpus_per_job // 8))
        g = -(-j.gpus_per_job // n)
    c = max(1, j.cpus_per_node or -(-max(1, j.tasks) // n) * max(1, j.cpus_per_task))
    return n, c, g


@given(snapshots())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_shadow_time_is_the_earliest(inp):
    """Brute force: at no candidate time before the shadow time do enough nodes have room for the top
    job's whole time limit, and at the shadow time its reserved nodes do."""
    result = plan(inp)
    if not any(x.name == "gpu" for x in result.partitions) or result.partition("gpu").top_job is None:
        return
    p = result.partition("gpu")
    top = p.top_job
    pending = {j.job_id: j for j in inp.pending}
    tj = pending[top.job_id]
    n_need, c_need, g_need = _request_of(tj)
    limit = tj.time_limit_s
    ahead = [s for s in p.startable if s.by == "priority"]  # committed before the top job was placed
    resv = {r.name: r for r in inp.reservations}
    own = resv.get(tj.reservation) if tj.reservation else None
    t0 = max(NOW, own.start) if own else NOW

    def free_at(node, t):
        c, g = node.cpus_free, node.gpus_free
        for r in inp.running:
            for a in r.allocations:
                if a.node == node.name and max(r.expected_end, NOW) <= t:
                    c, g = c + a.cpus, g + a.gpus
        for s in ahead:
            if node.name in s.nodes:
                sj = pending[s.job_id]
                sn, sc, sg = _request_of(sj)
                take_c, take_g = (node.cpus_free, node.gpus_free) if sj.exclusive else (sc, sg)
                if s.end > t:
                    c, g = c - take_c, g - take_g
        return c, g

    def fits(node, t):
        if not node.usable or (own is not None and node.name not in own.nodes):
            return False
        for r in inp.reservations:
            if r is not own and node.name in r.nodes and r.start < t + limit and r.end > t:
                return False
        c, g = free_at(node, t)
        if tj.exclusive:
            return c >= node.cpus_total and g >= node.gpus_total
        return c >= c_need and g >= g_need

    times = {t0} | {max(r.expected_end, NOW) for r in inp.running} | {s.end for s in ahead} \
        | {r.end for r in inp.reservations}
    gpu_nodes = [n for n in inp.nodes if "gpu" in n.partitions]
    for t in sorted(x for x in times if t0 <= x < top.shadow_time):
        assert sum(fits(n, t) for n in gpu_nodes) < n_need, (t, top)
    by_name = {n.name: n for n in gpu_nodes}
    assert len(top.nodes) == n_need and all(fits(by_name[x], top.shadow_time) for x in top.nodes)


def test_inconsistent_node_counts_are_clamped():
    odd = PlannerNode("gpu001", ("gpu",), 64, 100, 1000, 5000, 8, 12)  # more free than total
    neg = PlannerNode("gpu002", ("gpu",), 64, -4, 1000, -1, 8, -2)
    r = plan(snap([odd, neg], pending=[job("a", gpus=8), job("b", gpus=8)]))
    assert startable_ids(r) == ["a"] and r.partition("gpu").startable[0].nodes == ("gpu001",)
    # after job a (by priority) gpu001 keeps 63 CPUs until top job b's reservation; gpu002 has nothing
    assert [(w.node_list, w.gpus_per_node, w.cpus, w.until) for w in r.partition("gpu").windows] == [
        ("gpu001", 0, 63, NOW + H)]


# ------------------------------------------------------------------------------ ties at the shadow time

def test_every_job_ending_at_the_shadow_time_frees_its_share_for_backfill():
    # gpu001: 2 GPUs free now, jobs 100 and 101 (3 GPUs each) both end at +1 h. Top job 200 needs 7
    # GPUs on one node: shadow +1 h. Job 101 ends at that same instant, so 8 GPUs are free then and 1
    # is left over beside the top job: a 1-GPU job for 10 h fits now without delaying it.
    nodes = [gpu_node(1, free_gpus=2, free_cpus=16)]
    run = [running("100", [1], H, gpus=3, cpus=24), running("101", [1], H, gpus=3, cpus=24)]
    r = plan(snap(nodes, run, [job("200", gpus=7, cpus_per_node=8), job("201", gpus=1, hours=10)]))
    assert r.partition("gpu").top_job.shadow_time == NOW + H
    assert startable_ids(r) == ["201"]
    # two such jobs do not fit beside the top job: only one GPU is left over at the shadow time
    r = plan(snap(nodes, run, [job("200", gpus=7, cpus_per_node=8), job("201", gpus=1, hours=10),
                               job("202", gpus=1, hours=10)]))
    assert startable_ids(r) == ["201"]


def test_a_job_ending_just_after_the_shadow_time_frees_nothing_for_backfill():
    nodes = [gpu_node(1, free_gpus=2, free_cpus=16)]
    run = [running("100", [1], H, gpus=3, cpus=24), running("101", [1], H + 1, gpus=3, cpus=24)]
    r = plan(snap(nodes, run, [job("200", gpus=5, cpus_per_node=8), job("201", gpus=1, hours=10)]))
    assert r.partition("gpu").top_job.shadow_time == NOW + H
    assert startable_ids(r) == []  # 2 + 3 = 5 at +1 h, all for the top job
    r = plan(snap(nodes, run, [job("200", gpus=5, cpus_per_node=8), job("201", gpus=1, hours=0.5)]))
    assert startable_ids(r) == ["201"]  # ends before the shadow time


def test_equal_priority_ties_keep_the_given_order():
    # Two identical jobs: the first listed is the top job, the second is planned after it.
    nodes = [busy(1)]
    run = [running("100", [1], H)]
    r = plan(snap(nodes, run, [job("201"), job("200")]))
    assert r.partition("gpu").top_job.job_id == "201"
    assert r.why("200").expected_start == NOW + 2 * H
