"""Slurm's scheduling parameters in the backfill plan: parsers over real Slurm 22.05 captures, and the
planner's Slurm mode (a reservation per tested job, bf_window, bf_max_job_*, bf_min_prio_reserve,
sched/builtin, QOS limits, job defaults, PLANNED nodes) on hand-built clusters with known answers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from collectors.slurm.sched_config import (
    DEFAULTS,
    parse_sacctmgr_qos,
    parse_scheduler_parameters,
    parse_scontrol_config,
)
from collectors.slurm.parse_text import parse_scontrol_partitions
from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import BackfillConfig, PartitionInfo, QosLimit
from dashboard.analysis.snapshot_to_planner import backfill_config, constraint_features, qos_limit, snapshot_to_planner
from dashboard.backfill_cli import main as backfill_main
from tests.test_backfill import NOW_2205, snap2205  # noqa: F401 - the 22.05 snapshot fixture
from tests.test_planner import H, NOW, busy, gpu_node, job, running, snap, startable_ids

SLURM = BackfillConfig()


def slurm_snap(nodes, run=(), pending=(), config=SLURM, qos=(), partitions=()):
    return dataclasses.replace(snap(nodes, run, pending, partitions=partitions), config=config, qos=tuple(qos))


# ------------------------------------------------------------------------------ parsers, real 22.05

def test_scontrol_show_config_2205(fixtures_dir):
    cfg = parse_scontrol_config((fixtures_dir / "slurm-22.05" / "scontrol_show_config.txt").read_text())
    assert cfg.scheduler_type == "sched/backfill"
    assert (cfg.bf_interval_s, cfg.bf_window_s, cfg.bf_resolution_s, cfg.bf_max_job_test) == (5, 4320 * 60, 60, 500)
    assert cfg.bf_continue and not cfg.bf_busy_nodes
    assert cfg.bf_max_job_part is None and cfg.bf_min_prio_reserve is None
    assert cfg.other_parameters == ("default_queue_depth=200",)
    assert cfg.select_type_parameters == "CR_CORE_MEMORY"
    assert cfg.def_mem_per_cpu_bytes == 4000 << 20 and cfg.def_mem_per_node_bytes is None
    assert cfg.licenses == "" and cfg.gres_types == "gpu"
    bc = backfill_config(cfg)
    assert bc.bf_window_s == 4320 * 60 and bc.bf_max_job_part == DEFAULTS["bf_max_job_part"]
    assert bc.not_modelled == ("default_queue_depth=200",)


def test_scheduler_parameters_unknown_and_bad_values_are_listed():
    got = parse_scheduler_parameters("bf_window=x,bf_max_job_user=10,bf_busy_nodes,bf_yield_interval=2000000,"
                                     "bf_min_prio_reserve=1000,,bf_continue=1")
    assert got["bf_max_job_user"] == 10 and got["bf_busy_nodes"] and got["bf_min_prio_reserve"] == 1000
    assert got["other_parameters"] == ("bf_window=x", "bf_yield_interval=2000000", "bf_continue=1")
    assert parse_scontrol_config("") == parse_scontrol_config("garbage\n= =\n")


def test_partition_job_defaults_2205(fixtures_dir):
    parts = {p.name: p for p in parse_scontrol_partitions(
        (fixtures_dir / "slurm-22.05" / "scontrol_show_partition.txt").read_text())}
    assert parts["gpu"].def_cpu_per_gpu == 8 and parts["gpu"].def_mem_per_node_bytes is None
    assert parts["debug"].max_nodes == 2 and parts["gpu"].max_cpus_per_node is None and parts["gpu"].qos == ""
    text = ("PartitionName=x Nodes=n1 JobDefaults=DefCpuPerGPU=4,DefMemPerGPU=8G MaxCPUsPerNode=32 "
            "DefMemPerCPU=2000 QoS=gpuqos State=UP")
    x = parse_scontrol_partitions(text)[0]
    assert (x.def_cpu_per_gpu, x.def_mem_per_gpu_bytes, x.max_cpus_per_node, x.def_mem_per_cpu_bytes, x.qos) == (
        4, 8 << 30, 32, 2000 << 20, "gpuqos")


def test_sacctmgr_qos_2205(fixtures_dir):
    qos = {q.name: q for q in parse_sacctmgr_qos((fixtures_dir / "slurm-22.05" / "sacctmgr_show_qos_-P.txt").read_text())}
    assert set(qos) == {"normal", "high", "low"} and qos["high"].priority == 1000
    assert qos_limit(qos["low"]).max_gpus_per_user == 4 and qos_limit(qos["normal"]) == QosLimit("normal")
    ours = parse_sacctmgr_qos("Name|Priority|MaxJobsPU|MaxSubmitPU|MaxTRESPU|MaxTRES|GrpTRES|GrpJobs|MaxWall\n"
                              "lim|0|2||||gres/gpu=16,node=4|5|01:00:00\n")[0]
    lim = qos_limit(ours)
    assert (lim.max_jobs_per_user, lim.grp_gpus, lim.grp_nodes, lim.grp_jobs, lim.max_wall_s) == (2, 16, 4, 5, 3600)
    assert parse_sacctmgr_qos("") == []


def test_defaults_and_config_from_a_real_snapshot(snap2205, fixtures_dir):  # noqa: F811
    cfg = parse_scontrol_config((fixtures_dir / "slurm-22.05" / "scontrol_show_config.txt").read_text())
    inp = snapshot_to_planner(dataclasses.replace(snap2205, config=cfg), NOW_2205)
    assert inp.config.bf_window_s == 4320 * 60
    # job 26 asks --gres=gpu:8 with 1 CPU: Slurm's DefCpuPerGPU=8 gives it 64
    j26 = next(j for j in inp.pending if j.job_id == "26")
    assert j26.cpus_per_node == 64
    # CR_Core_Memory: DefMemPerCPU applies where the job's TRES gives no memory
    assert all(j.mem_per_node_mb > 0 for j in inp.pending)


# ------------------------------------------------------------------------------ Slurm mode

def test_every_tested_job_gets_a_reservation():
    # gpu001-002 busy until +2 h, gpu003-004 until +4 h, gpu005 idle. 200 (2 nodes, 1 h) is reserved at
    # +2 h on gpu001-002; 201 (3 nodes) cannot start before +3 h, on gpu001-002 and gpu005. 202 (1 node,
    # 3.5 h) fits gpu005 now: EASY reserves only for 200, so 202 runs; Slurm also reserves for 201,
    # which 202 would delay, so it must wait.
    nodes = [busy(1), busy(2), busy(3), busy(4), gpu_node(5)]
    run = [running("100", [1, 2], 2 * H), running("101", [3, 4], 4 * H)]
    pending = [job("200", nodes=2, hours=1), job("201", nodes=3, hours=1), job("202", hours=3.5)]
    easy = plan(snap(nodes, run, pending))
    assert startable_ids(easy) == ["202"]
    slurm = plan(slurm_snap(nodes, run, pending))
    assert slurm.policy == "slurm-backfill" and startable_ids(slurm) == []
    why201 = slurm.why("201")
    # 200's reservation ends at +3 h rounded down to bf_resolution (backfill.c's node map), when 201 starts
    assert why201.state == "waiting" and "reserved" in why201.codes
    assert why201.expected_start == (NOW + 3 * H) // 60 * 60 != NOW + 3 * H
    assert slurm.partition("gpu").top_job.job_id == "200"
    doc = slurm.to_json()
    assert doc["policy"] == "slurm-backfill" and doc["scheduler"]["parameters"]["bf_max_job_test"] == 500


def test_outside_bf_window_slurm_does_not_plan_the_job():
    nodes = [busy(1), busy(2), gpu_node(3)]
    run = [running("100", [1, 2], 10 * H)]
    pending = [job("200", nodes=3, hours=1), job("201", hours=20)]
    cfg = dataclasses.replace(SLURM, bf_window_s=4 * H)
    r = plan(slurm_snap(nodes, run, pending, cfg))
    why = r.why("200")
    assert "outside_bf_window" in why.codes and why.state == "waiting"
    assert "outside bf_window (4:00:00): its earliest start" in next(x.message for x in why.reasons
                                                                       if x.code == "outside_bf_window")
    assert "Slurm will not plan this job" in why.reasons[0].message
    assert startable_ids(r) == ["201"]  # nothing is reserved, so the long job takes gpu003
    # within the window: 200 is reserved and 201 would delay it
    r = plan(slurm_snap(nodes, run, pending, dataclasses.replace(SLURM, bf_window_s=11 * H)))
    assert r.partition("gpu").top_job.job_id == "200" and startable_ids(r) == []


def test_bf_max_job_test_part_user_and_min_prio_reserve():
    nodes = [busy(1), gpu_node(2)]
    run = [running("100", [1], H)]
    pending = [job("200", nodes=2, hours=1, user="a", priority=100.0),
               job("201", hours=0.5, user="a", priority=50.0), job("202", hours=0.5, user="b", priority=40.0)]
    # the top job 200 is the cycle's first test
    r = plan(slurm_snap(nodes, run, pending, dataclasses.replace(SLURM, bf_max_job_test=2)))
    assert startable_ids(r) == ["201"] and "bf_max_job_test" in r.why("202").codes
    r = plan(slurm_snap(nodes, run, pending, dataclasses.replace(SLURM, bf_max_job_user=1)))
    assert startable_ids(r) == ["202"] and "bf_max_job_user" in r.why("201").codes
    r = plan(slurm_snap(nodes, run, pending, dataclasses.replace(SLURM, bf_max_job_part=1)))
    assert startable_ids(r) == [] and "bf_max_job_part" in r.why("201").codes
    # below bf_min_prio_reserve: no reservation, so a later job may take its nodes
    r = plan(slurm_snap(nodes, run, [job("200", nodes=2, priority=10.0), job("201", hours=3, priority=5.0)],
                        dataclasses.replace(SLURM, bf_min_prio_reserve=50)))
    assert "bf_min_prio_reserve" in r.why("200").codes and startable_ids(r) == ["201"]


def test_sched_builtin_never_backfills():
    nodes = [busy(1), gpu_node(2)]
    run = [running("100", [1], H)]
    pending = [job("200", nodes=2), job("201", hours=0.5)]
    r = plan(slurm_snap(nodes, run, pending, dataclasses.replace(SLURM, scheduler_type="sched/builtin")))
    assert r.policy == "slurm-builtin" and startable_ids(r) == []
    assert "sched_builtin" in r.why("201").codes


def test_qos_limits_hold_jobs_and_give_no_reservation():
    nodes = [gpu_node(1), gpu_node(2), gpu_node(3)]
    run = [dataclasses.replace(running("100", [1], H, gpus=2, cpus=16), user="u", qos="lim")]
    qos = [QosLimit("lim", max_jobs_per_user=2, grp_gpus=12)]
    pending = [job("200", gpus=2, user="u", qos="lim"), job("201", gpus=2, user="u", qos="lim"),
               job("202", gpus=2, user="v", qos="lim"), job("203", gpus=8, user="w", qos="lim"),
               job("204", gpus=8, user="w")]
    for cfg in (None, SLURM):
        r = plan(slurm_snap(nodes, run, pending, cfg, qos))
        assert startable_ids(r) == ["200", "202", "204"], cfg
        w201, w203 = r.why("201"), r.why("203")
        assert w201.state == "blocked" and "QOS lim MaxJobsPerUser=2: user u already has 2 running jobs" in \
            w201.reasons[-1].message
        assert "GrpTRES gres/gpu=12" in w203.reasons[-1].message and w203.expected_start is None
    wall = plan(slurm_snap(nodes, run, [job("205", hours=3, qos="short")], SLURM, [QosLimit("short", max_wall_s=H)]))
    assert wall.why("205").state == "blocked" and "MaxWall" in wall.why("205").reasons[-1].message


def test_partition_max_nodes_and_max_cpus_per_node():
    nodes = [gpu_node(1), gpu_node(2), gpu_node(3)]
    parts = (PartitionInfo("gpu", max_nodes=2, max_cpus_per_node=32),)
    r = plan(slurm_snap(nodes, (), [job("200", nodes=3), job("201", cpus_per_node=48), job("202", cpus_per_node=32)],
                        partitions=parts))
    assert r.why("200").state == "never" and "PartitionNodeLimit" in r.why("200").reasons[0].message
    assert r.why("201").state == "never" and "MaxCPUsPerNode" in r.why("201").reasons[0].message
    assert startable_ids(r) == ["202"]


def test_planned_nodes_are_where_the_top_job_is_reserved():
    # gpu001-002 busy for 1 h, gpu003-004 idle, and Slurm's backfill marked gpu004 PLANNED for the top
    # job. 200 needs 3 nodes at +1 h: its reservation takes the planned node (gangwatch alone would
    # take gpu003 by name), so a long job may start on gpu003 and only a short one on gpu004.
    run = [running("100", [1, 2], H)]
    nodes = [busy(1), busy(2), gpu_node(3), gpu_node(4, planned=True)]
    pending = [job("200", nodes=3), job("201", hours=5), job("202", hours=0.5)]
    r = plan(snap(nodes, run, pending))
    assert set(r.partition("gpu").top_job.nodes) == {"gpu001", "gpu002", "gpu004"}
    assert {s.job_id: s.nodes for s in r.partition("gpu").startable} == {"201": ("gpu003",), "202": ("gpu004",)}
    unplanned = plan(snap([busy(1), busy(2), gpu_node(3), gpu_node(4)], run, pending))
    assert set(unplanned.partition("gpu").top_job.nodes) == {"gpu001", "gpu002", "gpu003"}
    slurm = plan(slurm_snap(nodes, run, pending))
    assert set(slurm.partition("gpu").top_job.nodes) == {"gpu001", "gpu002", "gpu004"}
    assert startable_ids(slurm) == ["201", "202"]  # 202 ends before the reservation on gpu004 starts


# ------------------------------------------------------------------------------ CLI

def test_cli_reads_config_and_qos_files(tmp_path, snap2205, fixtures_dir, capsys):  # noqa: F811
    f = fixtures_dir / "slurm-22.05"
    path = tmp_path / "snap.json"
    path.write_text(snap2205.to_json())
    assert backfill_main(["--snapshot", str(path), "--slurm-config", str(f / "scontrol_show_config.txt"),
                          "--qos", str(f / "sacctmgr_show_qos_-P.txt"), "--now", str(NOW_2205)]) == 0
    out = capsys.readouterr().out
    assert "scheduler: sched/backfill planned as slurm-backfill: bf_window 3-00:00:00, bf_resolution 60 s" in out
    assert "not modelled by gangwatch: default_queue_depth=200" in out
    assert backfill_main(["--snapshot", str(path), "--slurm-config", str(f / "scontrol_show_config.txt"),
                          "--now", str(NOW_2205), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "slurm-backfill" and doc["scheduler"]["not_modelled"] == ["default_queue_depth=200"]
    assert backfill_main(["--snapshot", str(path), "--now", str(NOW_2205)]) == 0
    assert "planned as plain EASY" in capsys.readouterr().out
    assert backfill_main(["--snapshot", str(path), "--slurm-config", str(f / "sdiag.txt")]) == 2
    assert "not `scontrol show config` output" in capsys.readouterr().err
    assert backfill_main(["--snapshot", str(path), "--qos", str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize("policy", ["easy", "slurm"])
def test_plan_is_deterministic(policy):
    nodes = [busy(1), busy(2), gpu_node(3), gpu_node(4)]
    run = [running("100", [1, 2], 3 * H)]
    pending = [job("200", nodes=3, hours=2), job("201", hours=10), job("202", hours=1)]
    mk = (lambda: snap(nodes, run, pending)) if policy == "easy" else (lambda: slurm_snap(nodes, run, pending))
    assert plan(mk()).to_json() == plan(mk()).to_json()


def test_top_job_start_as_slurms_will_run_test_batches_running_jobs():
    # Jobs end at +100, +1000, +1100 and +1500 s; the 3-node job fits from +1100. Slurm's will-run test
    # removes running jobs in batches (30 s barrier after the first end, window doubled per batch):
    # {+100}, {+1000} (window 960 s), then {+1100, +1500} (1920 s), so Slurm plans it at +1500.
    nodes = [busy(1), busy(2), busy(3), busy(4)]
    run = [running("100", [1], 100), running("101", [2], 1000), running("102", [3], 1100), running("103", [4], 1500)]
    pending = [job("200", nodes=3, hours=1)]
    assert plan(snap(nodes, run, pending)).partition("gpu").top_job.shadow_time == NOW + 1100
    top = plan(slurm_snap(nodes, run, pending)).partition("gpu").top_job
    assert top.shadow_time == NOW + 1500 and len(top.nodes) == 3
    # one job fewer in the last batch: the exact start again
    run = run[:3] + [running("103", [4], 9000)]
    assert plan(slurm_snap(nodes, run, pending)).partition("gpu").top_job.shadow_time == NOW + 1100


def test_will_run_batches_close_on_jobs_of_other_nodes_too():
    # gpu001-004 free at +100, +1000, +3000, +3100 s; the 3-node job fits from +3000. Batches: {+100},
    # {+1000}, then the window grows to reach +3000 and takes +3100 too: Slurm plans +3100. A job on
    # gpu005 (another partition) ending at +1500 closes the second batch early: Slurm looks at the
    # next job in its whole list, so the window stays small and the next batch is {+3000}.
    nodes = [busy(1), busy(2), busy(3), busy(4)]
    run = [running("100", [1], 100), running("101", [2], 1000), running("102", [3], 3000), running("103", [4], 3100)]
    pending = [job("200", nodes=3, hours=1)]
    assert plan(slurm_snap(nodes, run, pending)).partition("gpu").top_job.shadow_time == NOW + 3100
    other = dataclasses.replace(busy(5), partitions=("other",))
    got = plan(slurm_snap(nodes + [other], run + [running("104", [5], 1500)], pending))
    assert got.partition("gpu").top_job.shadow_time == NOW + 3000


def test_top_job_start_as_the_next_cycle_reports_it_with_backfilled_jobs_running():
    # gpu001-002 free at +1000 s, gpu003-006 at +5000 s: the 6-node job is reserved at +5000. The
    # 1-node job starts now on a node the reservation does not need. In Slurm's next cycle it runs,
    # and the will-run batch that frees gpu003-006 also takes its end (+5500): squeue --start says +5500.
    nodes = [busy(i) for i in range(1, 7)] + [gpu_node(7), gpu_node(8)]
    run = [running("100", [1, 2], 1000), running("101", [3, 4, 5, 6], 5000)]
    pending = [job("200", nodes=6, hours=1), job("201", nodes=1, hours=5500 / H)]
    easy = plan(snap(nodes, run, pending))
    assert startable_ids(easy) == ["201"] and easy.partition("gpu").top_job.shadow_time == NOW + 5000
    got = plan(slurm_snap(nodes, run, pending))
    assert startable_ids(got) == ["201"]
    assert got.partition("gpu").top_job.shadow_time == NOW + 5500 == got.why("200").expected_start
    assert "Slurm's next backfill cycle" in next(r.message for r in got.why("200").reasons if r.code == "top_job")


def test_no_reservation_when_backfills_node_map_walk_finds_no_later_start():
    # gpu001 and gpu003 busy for 400 min, gpu002 half busy for 10 min, gpu004 (partition other) for
    # 15. Job 201 (1 node, 5 h) is reserved on gpu002 from +10 min; 202 and 203 one after the other
    # on gpu004. The 3-node job 204 (20 min) finds gpu002 reserved within its time; backfill.c walks
    # its node map up to the first slot beginning after the job's end, and no slot there frees a
    # node (gpu002 only at +5 h 10 min, gpu004 is not in its partition), so later_start stays unset:
    # Slurm gives it no reservation (squeue --start: N/A) instead of one at +400 min.
    other = [dataclasses.replace(busy(4), partitions=("other",))]
    nodes = [busy(1), busy(2, gpus=4, cpus=32), busy(3)] + other
    run = [running("100", [1], 400 * 60), running("101", [2], 600, gpus=4, cpus=32), running("102", [3], 400 * 60),
           running("103", [4], 900)]
    pending = [job("201", hours=5), job("202", hours=1 / 6, partitions=("other",)),
               job("203", hours=1 / 6, partitions=("other",)), job("204", nodes=3, hours=1 / 3)]
    got = plan(slurm_snap(nodes, run, pending))
    assert got.why("201").state == "top" and got.why("202").state == "top"
    assert "reserved" in got.why("203").codes
    why = got.why("204")
    assert "no_reservation" in why.codes and "reserved" not in why.codes and why.state == "waiting"


def test_feature_alternatives():
    # --constraint="h100|a100&nvlink": each node has h100, or both a100 and nvlink
    nodes = [gpu_node(1, features=frozenset({"h100"})), gpu_node(2, features=frozenset({"a100", "nvlink"})),
             gpu_node(3, features=frozenset({"a100"}))]
    alts = (("h100",), ("a100", "nvlink"))
    r = plan(snap(nodes, (), [job("200", nodes=2, feature_alternatives=alts)]))
    assert startable_ids(r) == ["200"] and set(r.why("200").expected_nodes) == {"gpu001", "gpu002"}
    r = plan(snap(nodes, (), [job("201", nodes=3, feature_alternatives=alts)]))
    assert r.why("201").state == "never" and "too_large" in r.why("201").codes
    r = plan(snap(nodes, (), [job("202", feature_alternatives=(("v100",), ("a100", "ib")))]))
    why = next(x for x in r.why("202").reasons if x.code == "no_such_feature")
    assert why.message.endswith("has the features (a100&ib|v100)")


@pytest.mark.parametrize("expr,features,alternatives", [
    ("ib&nvlink", ("ib", "nvlink"), ()),
    ("ib,nvlink", ("ib", "nvlink"), ()),
    ("h100|a100&nvlink", (), (("h100",), ("a100", "nvlink"))),
    ("[h100|a100]", (), (("h100",), ("a100",))),
    ("h100*2", (), ()),  # counts: not modelled (no constraint)
    ("", (), ()),
])
def test_constraint_expressions(expr, features, alternatives):
    assert constraint_features(expr) == (features, alternatives)


def test_licenses_free_now_limit_what_starts():
    # `scontrol show licenses`: 1 matlab free. Two jobs ask for it on idle nodes: the first starts, the
    # second waits for it (without the pool, both would start).
    nodes = [gpu_node(1), gpu_node(2)]
    pending = [job("200", licenses=(("matlab", 1),)), job("201", licenses=(("matlab", 1),)), job("202")]
    assert startable_ids(plan(snap(nodes, (), pending))) == ["200", "201"]
    got = plan(dataclasses.replace(snap(nodes, (), pending), licenses=(("matlab", 1),)))
    assert startable_ids(got) == ["200", "202"]
    why = next(r for r in got.why("201").reasons if r.code == "licenses")
    assert why.message.startswith("it needs 1 license(s) matlab, 0 free")
    none = plan(dataclasses.replace(snap(nodes, (), pending[:1]), licenses=()))
    assert "(no such license)" in next(r.message for r in none.why("200").reasons if r.code == "licenses")


def test_qos_limit_used_up_by_jobs_started_now_holds_a_reserved_job():
    # QOS lim allows 2 running jobs per user; one runs on gpu001 for 1 h. A (lim, 3 nodes) cannot
    # start and is reserved at +1 h; C (lim, 30 min) starts now on gpu002, so user u has 2 lim jobs:
    # Slurm's main scheduler starts C before its backfill cycle, which then holds A (QOS limit) and
    # reserves nothing for it, so D (10 h) starts on gpu003 as well. Plain EASY keeps A's reservation.
    nodes = [busy(1), gpu_node(2), gpu_node(3)]
    run = [dataclasses.replace(running("100", [1], H), user="u", qos="lim")]
    qos = [QosLimit("lim", max_jobs_per_user=2)]
    pending = [job("A", nodes=3, user="u", qos="lim"), job("C", hours=0.5, user="u", qos="lim"),
               job("D", hours=10, user="v")]
    easy = plan(dataclasses.replace(snap(nodes, run, pending), qos=tuple(qos)))
    assert startable_ids(easy) == ["C"] and easy.partition("gpu").top_job.job_id == "A"
    got = plan(slurm_snap(nodes, run, pending, SLURM, qos))
    assert startable_ids(got) == ["C", "D"] and got.partition("gpu").top_job is None
    a = got.why("A")
    assert a.state == "blocked" and "use up a limit of this QOS" in a.reasons[-1].message
