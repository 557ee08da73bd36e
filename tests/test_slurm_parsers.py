"""Parsers of Slurm's JSON (v0.0.38 .. v0.0.44) and text outputs, on real captured output:
../shared/fixtures/slurm-22.05 (22.05 CLI + slurmrestd), ../shared/fixtures/slurm-versions (23.02 ..
25.11, every file), and tests/data/slurm-live (our own live Slurm, captured by tests/slurm/capture.sh)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.slurm import hostlist, parse_json, parse_text
from collectors.slurm.parse_common import (duration_seconds, memory_bytes, number, parse_dependency, parse_gres,
                                           tres_request_gpus)

LIVE = Path(__file__).parent / "data" / "slurm-live"


def load(path: Path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def f2205(fixtures_dir) -> Path:
    return fixtures_dir / "slurm-22.05"


@pytest.fixture(scope="module")
def versions(fixtures_dir) -> Path:
    return fixtures_dir / "slurm-versions"


# ------------------------------------------------------------------------------------ 22.05 JSON

def test_squeue_json_2205_jobs(f2205):
    jobs, meta = parse_json.parse_jobs(load(f2205 / "squeue_--json.json"))
    assert meta.data_parser == "v0.0.38" and meta.slurm_version == "22.05.8" and not meta.warnings
    assert len(jobs) == 27
    by = {j.job_id: j for j in jobs}
    assert Counter(j.state for j in jobs) == {"RUNNING": 10, "PENDING": 14, "COMPLETED": 1, "FAILED": 1, "CANCELLED": 1}
    gang = by[1]
    assert gang.name == "llm-pretrain-70b" and gang.user == "alice" and gang.gang_size == 4
    assert gang.nodes == ("gpu001", "gpu002", "gpu003", "gpu004") and gang.gpus == 32
    a = gang.allocations[0]
    assert (a.node, a.cpus, a.gpus, a.gpu_indices, a.gpu_type) == ("gpu001", 48, 8, tuple(range(8)), "h100")
    assert a.memory_bytes == 491520 * 2**20
    assert gang.time_limit_seconds == 86400 and gang.comment == "gang: 4x8 H100"
    # typed GRES request on 2 nodes, 4 GPUs each, indices 0-3
    assert [(x.node, x.gpus, x.gpu_indices) for x in by[2].allocations] == [("gpu005", 4, (0, 1, 2, 3)), ("gpu006", 4, (0, 1, 2, 3))]
    # array: running tasks are their own records, pending tasks stay in the master record
    assert (by[7].array_job_id, by[7].array_task_id, by[7].display_id) == (4, 0, "4_0")
    assert (by[4].state, by[4].array_task_string, by[4].reason) == ("PENDING", "4-5", "QOSMaxGRESPerUser")
    # dependencies and their state
    assert by[19].dependencies[0].kind == "afterok" and by[19].dependencies[0].job_id == "6"
    assert by[19].dependencies[0].state == "unfulfilled" and by[19].reason == "Dependency"
    assert by[21].dependencies[0].state == "failed" and by[21].reason == "DependencyNeverSatisfied"
    assert by[22].reason == "JobHeldUser" and by[23].reason == "JobHeldAdmin" and by[24].reason == "BeginTime"
    assert by[14].exclusive is True and by[14].node_count == 5 and by[14].gpus == 40
    assert by[15].nice == 1000
    assert by[5].gpus == 0  # CPU-only job: zero GPUs is known, not missing
    assert by[27].nodes == ("gpu007",) and by[27].allocations[0].gpu_type == "a100"


def test_restd_and_cli_agree_2205(f2205):
    a, _ = parse_json.parse_jobs(load(f2205 / "squeue_--json.json"))
    b, _ = parse_json.parse_jobs(load(f2205 / "slurmrestd_GET_slurm_v0.0.38_jobs.json"))
    assert a == b


def test_sinfo_json_2205_nodes(f2205):
    nodes, meta = parse_json.parse_nodes(load(f2205 / "sinfo_--json.json"))
    by = {n.name: n for n in nodes}
    assert len(nodes) == 8
    assert by["gpu006"].state == "MIXED" and by["gpu006"].drain and by["gpu006"].state_label == "draining"
    from collectors.slurm.model import Node
    # as sinfo names them: a node held for the top job or under maintenance is not "idle"
    assert Node("a", "IDLE", ("PLANNED",)).state_label == "planned"
    assert Node("a", "IDLE", ("MAINT", "RESERVED")).state_label == "maint"
    assert Node("a", "IDLE", ("RESERVED",)).state_label == "reserved"
    assert Node("a", "MIXED", ("MAINT",)).state_label == "mixed"
    assert Node("a", "IDLE", ("DRAIN", "MAINT")).state_label == "drained"
    assert by["gpu006"].reason == "Xid 79: GPU has fallen off the bus (GPU 3)" and by["gpu006"].reason_user == "root"
    assert by["gpu008"].down and by["gpu008"].reason == "NHC: ib0 link down"
    assert by["gpu001"].gpus_total == 8 and by["gpu001"].gpus_allocated == 8 and by["gpu001"].gpu_types == ("h100",)
    assert by["gpu006"].gpus_allocated == 5 and by["gpu007"].gpu_types == ("a100",)
    assert by["gpu001"].partitions == ("gpu", "debug") and by["gpu001"].cpus_total == 64
    assert by["gpu001"].memory_total_bytes == 515000 * 2**20


def test_partitions_reservations_diag_2205(f2205):
    parts, _ = parse_json.parse_partitions(load(f2205 / "slurmrestd_GET_slurm_v0.0.38_partitions.json"))
    text_parts = parse_text.parse_scontrol_partitions((f2205 / "scontrol_show_partition.txt").read_text())
    assert [p.name for p in parts] == [p.name for p in text_parts] == ["gpu", "debug", "long"]
    for pj, pt in zip(parts, text_parts):
        assert (pj.nodes, pj.max_time_seconds, pj.default_time_seconds, pj.state, pj.is_default) == \
               (pt.nodes, pt.max_time_seconds, pt.default_time_seconds, pt.state, pt.is_default)
    assert parts[1].max_nodes == text_parts[1].max_nodes == 2
    res, _ = parse_json.parse_reservations(load(f2205 / "slurmrestd_GET_slurm_v0.0.38_reservations.json"))
    res_t = parse_text.parse_scontrol_reservations((f2205 / "scontrol_-o_show_reservation.txt").read_text())
    assert [(r.name, r.nodes, r.flags, r.users) for r in res] == [(r.name, r.nodes, r.flags, r.users) for r in res_t]
    assert res[0].name == "maint-gpu007" and "MAINT" in res[0].flags and res[0].end_time - res[0].start_time == 4 * 3600
    assert res[1].users == ("carol", "dave")
    # a record we cannot read costs only itself, and is counted (every record kind alike)
    for parse, name, key in ((parse_json.parse_partitions, "partitions", "partition"),
                             (parse_json.parse_reservations, "reservations", "reservation")):
        doc = load(f2205 / f"slurmrestd_GET_slurm_v0.0.38_{name}.json")
        doc[name] += [{"name": ""}, {"name": {"not": "a name"}}]
        recs, meta = parse(doc)
        assert len(recs) == len(parts if name == "partitions" else res)
        assert meta.warnings == [f"2 {key} record(s) could not be read"]
    diag, _ = parse_json.parse_diag(load(f2205 / "slurmrestd_GET_slurm_v0.0.38_diag.json"))
    diag_t = parse_text.parse_sdiag((f2205 / "sdiag.txt").read_text())
    assert diag_t.backfill_jobs_total == 3 == diag.backfill_jobs_total
    assert diag_t.main_last_cycle_seconds == pytest.approx(202e-6)
    assert diag_t.backfill_mean_cycle_seconds == pytest.approx(2126e-6)
    assert diag_t.backfill_last_cycle_time == 1795980000
    assert diag_t.jobs_submitted == 28 and diag_t.main_last_queue_length == 7


# ------------------------------------------------------------------------------------ 22.05 text

def test_scontrol_job_text_matches_json(f2205):
    text_jobs = {j.job_id: j for j in parse_text.parse_scontrol_jobs((f2205 / "scontrol_-o_show_job_-d.txt").read_text())}
    multi = {j.job_id: j for j in parse_text.parse_scontrol_jobs((f2205 / "scontrol_show_job_-d.txt").read_text())}
    json_jobs = {j.job_id: j for j in parse_json.parse_jobs(load(f2205 / "squeue_--json.json"))[0]}
    assert text_jobs == multi
    assert set(text_jobs) == set(json_jobs)
    for jid, jj in json_jobs.items():
        tj = text_jobs[jid]
        assert (tj.state, tj.nodes, tj.partition, tj.user, tj.name, tj.priority) == \
               (jj.state, jj.nodes, jj.partition, jj.user, jj.name, jj.priority), jid
        # the two captures are seconds apart: a pending job's reason may have moved on in between
        assert tj.reason == jj.reason or jj.state == "PENDING", jid
        assert tj.time_limit_seconds == jj.time_limit_seconds
        if jj.state == "RUNNING":
            assert [(a.node, a.cpus, a.memory_bytes, a.gpus, a.gpu_indices) for a in tj.allocations] == \
                   [(a.node, a.cpus, a.memory_bytes, a.gpus, a.gpu_indices) for a in jj.allocations], jid
    assert text_jobs[1].allocations[0].cpu_ids == "0-23,32-55"
    assert text_jobs[27].scheduler == "Backfill" and text_jobs[1].scheduler == "Main"


def test_scontrol_node_text_matches_json(f2205):
    tn = {n.name: n for n in parse_text.parse_scontrol_nodes((f2205 / "scontrol_-o_show_node_-d.txt").read_text())}
    jn = {n.name: n for n in parse_json.parse_nodes(load(f2205 / "sinfo_--json.json"))[0]}
    assert set(tn) == set(jn)
    for name in jn:
        a, b = tn[name], jn[name]
        assert (a.state, a.state_flags, a.reason, a.gpus_total, a.gpus_allocated, a.cpus_allocated, a.partitions) == \
               (b.state, b.state_flags, b.reason, b.gpus_total, b.gpus_allocated, b.cpus_allocated, b.partitions), name


def test_sprio_and_sshare(f2205):
    prio = parse_text.parse_sprio((f2205 / "sprio_-l.txt").read_text())
    assert set(prio) == {4, 14, 15, 16, 17, 18, 25, 26}
    assert prio[15].nice == 1000 and prio[15].fairshare == 8333 and prio[17].partition == 2000
    assert prio[14].tres == "cpu=8,gres/gpu=625"
    rows = parse_text.parse_sshare((f2205 / "sshare_-l_-a_-P.txt").read_text())
    cols = parse_text.parse_sshare((f2205 / "sshare_-l_-a.txt").read_text())
    assert [(r.account, r.user, r.depth) for r in rows] == [(r.account, r.user, r.depth) for r in cols]
    users = {(r.account, r.user): r for r in rows if r.user}
    assert users[("ml-research", "alice")].fairshare == pytest.approx(0.166667)
    assert users[("root", "root")].level_fs == float("inf")
    assert rows[0].account == "root" and rows[0].depth == 0 and rows[1].depth == 1
    assert parse_text.parse_sshare((f2205 / "nodbd" / "sshare_-l_-a_-P.txt").read_text()) == []


# ------------------------------------------------------------------------- every versioned file

def _kind(doc: dict) -> str:
    for key in ("jobs", "nodes", "sinfo", "partitions", "reservations", "statistics", "pings"):
        if key in doc:
            return key
    return "jobs" if "errors" in doc else "?"


def test_every_version_file_parses(versions):
    files = sorted(versions.glob("v0.0.*/*.json"))
    assert len(files) >= 80
    seen_versions = set()
    for f in files:
        doc = load(f)
        kind = _kind(doc)
        folder = f.parent.name
        if kind == "jobs":
            recs, meta = parse_json.parse_jobs(doc)
            assert len(recs) == len(doc.get("jobs") or []), f
        elif kind in ("nodes", "sinfo"):
            recs, meta = parse_json.parse_nodes(doc)
            assert recs, f
        elif kind == "partitions":
            recs, meta = parse_json.parse_partitions(doc)
            assert len(recs) == len(doc["partitions"]), f
        elif kind == "reservations":
            recs, meta = parse_json.parse_reservations(doc)
            assert len(recs) == len(doc["reservations"]), f
        elif kind == "statistics":
            stats, meta = parse_json.parse_diag(doc)
            assert stats is not None and stats.jobs_submitted is not None, f
        else:
            meta = parse_json.read_meta(doc)
        assert meta.data_parser == folder, f  # chosen from the document, not the release
        assert not meta.warnings, (f, meta.warnings)
        seen_versions.add(meta.data_parser)
    assert seen_versions == {f"v0.0.{n}" for n in range(39, 45)}


# (file, job id) -> (state, nodes, GPUs, per-node GPU indices of the first node)
KNOWN_JOBS = {
    "v0.0.39/slurmrestd-23.02.8-slurm-job-running.json": (310, "RUNNING", "cn[052-067]", 0, ()),
    "v0.0.40/slurmrestd-23.11.10-slurm-job-gpus-multi-nodes.json": (793, "RUNNING", "ia[1-2]", 12, (0, 1, 2, 3, 4, 5)),
    "v0.0.40/slurmrestd-23.11.1-jobs-talapas.json": (7745162, "RUNNING", "n0180", 0, ()),
    "v0.0.41/slurmrestd-24.05.3-slurm-job-gpus-multi-nodes.json": (11, "RUNNING", "gpu[1-2]", 8, (0, 1, 2, 3)),
    "v0.0.42/slurmrestd-24.11.5-slurm-job-gpus-multi-nodes.json": (6371, "RUNNING", "ia[1-2]", 12, (0, 1, 2, 3, 4, 5)),
    "v0.0.42/cli-squeue-u-24.11.6-ozstar.json": (9685110, "RUNNING", "dave[4,31,40-42,57,68,73,119,132,305-306]", 0, ()),
    "v0.0.43/slurmrestd-25.05.4-slurm-job-gpus-multi-nodes.json": (4746, "RUNNING", "gpu[1-2]", 8, (0, 1, 2, 3)),
    "v0.0.44/slurmrestd-25.11.0-slurm-job-gpus-multi-nodes.json": (5679, "RUNNING", "gpu[1-2]", 8, (0, 1, 2, 3)),
    "v0.0.44/cli-squeue-25.11.4-ucr-gcp.json": (260, "RUNNING", "ucrslurmcl-c3nodeset-0", 0, ()),
}
JOB_COUNTS = {
    "v0.0.39/slurmrestd-23.02.8-slurm-jobs.json": {"COMPLETED": 1, "RUNNING": 3, "PENDING": 26},
    "v0.0.40/slurmrestd-23.11.10-slurm-jobs.json": {"TIMEOUT": 1, "COMPLETED": 5, "FAILED": 1, "RUNNING": 5, "PENDING": 2},
    "v0.0.41/slurmrestd-24.05.3-slurm-jobs.json": {"TIMEOUT": 1, "COMPLETED": 8, "FAILED": 1, "RUNNING": 3, "PENDING": 1},
    "v0.0.42/slurmrestd-24.11.5-slurm-jobs.json": {"CANCELLED": 2, "TIMEOUT": 1, "COMPLETED": 3, "FAILED": 1, "RUNNING": 7, "PENDING": 2},
    "v0.0.43/slurmrestd-25.05.4-slurm-jobs.json": {"CANCELLED": 5, "TIMEOUT": 1, "COMPLETED": 4, "FAILED": 1, "RUNNING": 6, "PENDING": 2},
    "v0.0.44/slurmrestd-25.11.0-slurm-jobs.json": {"CANCELLED": 1, "TIMEOUT": 1, "COMPLETED": 7, "FAILED": 1, "RUNNING": 4, "PENDING": 1},
}


@pytest.mark.parametrize("name", sorted(KNOWN_JOBS))
def test_known_job_per_version(versions, name):
    jid, state, nodes, gpus, idx = KNOWN_JOBS[name]
    jobs, _ = parse_json.parse_jobs(load(versions / name))
    job = {j.job_id: j for j in jobs}[jid]
    assert (job.state, hostlist.compress(job.nodes), job.gpus) == (state, nodes, gpus)
    assert job.gang_size == len(hostlist.expand(nodes)) == len(job.allocations)
    assert job.allocations[0].gpu_indices == idx
    assert job.allocations[0].memory_bytes is not None or "talapas" in name or "ucr" in name or "ozstar" in name
    assert job.submit_time and job.start_time and job.time_limit_seconds


@pytest.mark.parametrize("name", sorted(JOB_COUNTS))
def test_job_state_counts_per_version(versions, name):
    jobs, _ = parse_json.parse_jobs(load(versions / name))
    assert Counter(j.state for j in jobs) == JOB_COUNTS[name]
    for j in jobs:
        if j.state == "PENDING":
            assert j.nodes == () and j.allocations == () and j.reason


def test_node_states_per_version(versions):
    cases = {
        "v0.0.39/slurmrestd-23.02.8-slurm-nodes.json": {("ALLOCATED",): 95, ("IDLE", "DRAIN"): 1, ("IDLE",): 3, ("DOWN",): 1},
        "v0.0.40/slurmrestd-23.11.1-nodes-talapas.json": {("DOWN", "NOT_RESPONDING"): 2, ("ALLOCATED",): 6, ("MIXED",): 2, ("IDLE", "DRAIN"): 2},
        "v0.0.41/slurmrestd-24.05.6-nodes-fluidstack-subset.json": {("ALLOCATED", "DYNAMIC_NORM"): 265, ("IDLE", "DYNAMIC_NORM"): 300,
                                                                    ("MIXED", "DYNAMIC_NORM"): 27, ("DOWN", "DRAIN", "DYNAMIC_NORM"): 1,
                                                                    ("ALLOCATED", "DRAIN", "DYNAMIC_NORM"): 2},
        "v0.0.42/slurmrestd-24.11.5-slurm-nodes.json": {("IDLE",): 3, ("DOWN",): 1, ("IDLE", "DRAIN"): 1, ("IDLE", "COMPLETING"): 1},
        "v0.0.43/slurmrestd-25.05.4-slurm-node-planned.json": {("IDLE", "COMPLETING", "PLANNED"): 1},
        "v0.0.44/cli-scontrol-show-nodes-25.11.4-ucr-gcp.json": {("ALLOCATED", "CLOUD", "POWER_DOWN"): 1, ("IDLE", "CLOUD", "POWERED_DOWN"): 5},
    }
    for name, want in cases.items():
        nodes, _ = parse_json.parse_nodes(load(versions / name))
        assert Counter((n.state,) + n.state_flags for n in nodes) == want, name
    gpu, _ = parse_json.parse_nodes(load(versions / "v0.0.41/slurmrestd-24.05.3-slurm-node-with-gpus-model-allocated.json"))
    assert (gpu[0].gpus_total, gpu[0].gpus_allocated) == (4, 4)
    mixed, _ = parse_json.parse_nodes(load(versions / "v0.0.44/slurmrestd-25.11.0-slurm-node-with-gpus-model-mixed.json"))
    assert (mixed[0].gpus_total, mixed[0].gpus_allocated, mixed[0].state) == (4, 1, "MIXED")


def test_partitions_and_sinfo_per_version(versions):
    parts, _ = parse_json.parse_partitions(load(versions / "v0.0.44/slurmrestd-25.11.0-slurm-partitions.json"))
    assert [(p.name, p.state, p.max_time_seconds, p.total_nodes) for p in parts] == [("normal", "UP", 7200, 4), ("gpu", "UP", 7200, 2)]
    v39, _ = parse_json.parse_partitions(load(versions / "v0.0.39/slurmrestd-23.02.8-slurm-partitions.json"))
    assert all(p.state == "" for p in v39)  # v0.0.39 has no partition state at all: unknown, not UP
    nodes, parts, meta = parse_json.parse_sinfo(load(versions / "v0.0.42/cli-sinfo-24.11.6-ozstar.json"))
    assert meta.data_parser == "v0.0.42" and len(parts) == 7 and len(nodes) == 322
    by = {n.name: n for n in nodes}
    assert by["bryan1"].gpus_total == 2 and "skylake" in by["bryan1"].partitions


def test_reservations_and_diag_per_version(versions):
    res, _ = parse_json.parse_reservations(load(versions / "v0.0.41/slurmrestd-24.05.3-slurm-reservations.json"))
    r = res[0]
    assert r.name == "training" and len(r.nodes) == 512 and r.end_time - r.start_time == 86400
    assert r.users == ("bparks",) and "FLEX" in r.flags and r.accounts == ("optic",)
    d39, _ = parse_json.parse_diag(load(versions / "v0.0.39/cli-sdiag-23.02.4-rivosinc.json"))
    assert d39.backfill_jobs_total == 2488 and d39.main_last_cycle_seconds == pytest.approx(0.010824)
    assert d39.jobs_pending == 13455 and d39.backfill_last_cycle_time == 1698885541
    d41, _ = parse_json.parse_diag(load(versions / "v0.0.41/cli-sdiag-24.05.5-rivosinc.json"))
    assert d41.main_cycles_total == 162 and d41.backfill_last_cycle_time is None  # 0 = never ran


def test_unfound_job_errors_are_reported(versions):
    for f in versions.glob("*/*-job-unfound.json"):
        jobs, meta = parse_json.parse_jobs(load(f))
        assert jobs == [] and meta.errors and "Unable to query" in meta.errors[0]


# ------------------------------------------------------------------------------ our live capture

def test_live_capture_parses():
    jobs, meta = parse_json.parse_jobs(load(LIVE / "squeue_--json.json"))
    env = dict(kv.split("=") for kv in (LIVE / "jobs.env").read_text().split() if kv.split("=")[1])
    ids = {k: int(v) for k, v in env.items()}
    by = {j.job_id: j for j in jobs}
    evil = by[ids["J_EVIL"]]
    assert evil.name == '<script>alert("x")</script> \'q\' "dq" \\back\nnewline {a="b"} Evil=1'
    assert evil.comment == "<b>" * 250 and evil.reason == "JobHeldUser"
    assert len(by[ids["J_LONG"]].name) == 1000
    assert by[ids["J_BF"]].state == "RUNNING" and by[ids["J_PRE"]].gang_size == 4
    text_jobs = {j.job_id: j for j in parse_text.parse_scontrol_jobs((LIVE / "scontrol_show_job_-d.txt").read_text())}
    assert text_jobs[ids["J_BF"]].scheduler == "Backfill"
    restd, _ = parse_json.parse_jobs(load(LIVE / "slurmrestd_GET_slurm_v0.0.38_jobs.json"))
    assert {j.job_id for j in restd} == set(by)
    prio = parse_text.parse_sprio((LIVE / "sprio_-h_-o_gangwatch.txt").read_text())
    prio_l = parse_text.parse_sprio((LIVE / "sprio_-l.txt").read_text())
    assert set(prio) == set(prio_l) and prio
    for jid in prio:
        assert (prio[jid].age, prio[jid].fairshare, prio[jid].jobsize, prio[jid].partition, prio[jid].qos, prio[jid].nice) == \
               (prio_l[jid].age, prio_l[jid].fairshare, prio_l[jid].jobsize, prio_l[jid].partition, prio_l[jid].qos, prio_l[jid].nice)


# ------------------------------------------------------------------------------------ helpers

def test_hostlist_examples():
    assert hostlist.expand("gpu[001-003,007],login1") == ["gpu001", "gpu002", "gpu003", "gpu007", "login1"]
    assert hostlist.compress(["gpu001", "gpu002", "gpu003", "gpu007", "login1"]) == "gpu[001-003,007],login1"
    assert hostlist.expand("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert hostlist.expand("") == [] and hostlist.expand("(null)") == []
    assert hostlist.expand_lenient("gpu[1-") == ["gpu[1-"]
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand("a[3-1]")
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand("a[0-99999999]")


def test_common_helpers():
    assert number({"set": True, "infinite": False, "number": 5}) == 5
    assert number({"set": False, "infinite": False, "number": 0}) is None
    assert number({"set": True, "infinite": True, "number": 0}) is None
    assert number(4294967294) is None and number(-9223372036854775296) is None
    assert parse_gres("gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)") == (6, (0, 1, 2, 3, 4, 5), "h100,h200")
    assert parse_gres("gpu:p100:2(S:0-1),tmp:1860G") == (2, (), "p100")
    assert parse_gres("gpu:4(IDX:0,2-3,5)") == (4, (0, 2, 3, 5), None)
    assert parse_gres("gpu:a100:0(IDX:N/A)") == (0, (), "a100")
    assert parse_gres("tmp(CNT:262144000)") == (None, (), None)
    assert tres_request_gpus("gres:gpu:8") == 8 and tres_request_gpus("gres/gpu:h100:4") == 4
    assert tres_request_gpus("gres/gpu=2") == 2 and tres_request_gpus("gres/tmp:250M") is None
    deps = parse_dependency("afterok:6(unfulfilled),afterany:7_1:9+10(failed)?singleton")
    assert [(d.kind, d.job_id, d.state) for d in deps] == [("afterok", "6", "unfulfilled"), ("afterany", "7_1", "failed"),
                                                          ("afterany", "9", "failed"), ("singleton", "", "")]
    assert duration_seconds("1-00:00:00") == 86400 and duration_seconds("30:00") == 1800
    assert duration_seconds("2-12") == 216000 and duration_seconds("UNLIMITED") is None
    assert memory_bytes("480G") == 480 * 2**30 and memory_bytes(512) == 512 * 2**20 and memory_bytes("x") is None


# --------------------------------------------------------------------------- property-based tests

@given(st.lists(st.from_regex(r"\A[a-z]{1,3}(0[0-9]{2}|[1-9][0-9]{0,2})\Z", fullmatch=True), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_hostlist_roundtrip(names):
    assert sorted(set(hostlist.expand(hostlist.compress(names)))) == sorted(set(names))


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_hostlist_never_raises_unexpectedly(text):
    try:
        hostlist.expand(text)
    except hostlist.HostlistError:
        pass
    assert isinstance(hostlist.expand_lenient(text), list)


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
                       max_leaves=25)
JOB_KEYS = ["job_id", "job_state", "nodes", "job_resources", "gres_detail", "time_limit", "array_job_id", "priority",
            "dependency", "tres_per_node", "tres_alloc_str", "state_reason", "node_count", "exclusive", "shared", "start_time"]


@given(st.lists(st.dictionaries(st.sampled_from(JOB_KEYS), JSONISH, max_size=10), max_size=4), JSONISH)
@settings(max_examples=300, deadline=None)
def test_json_parsers_never_raise(records, meta):
    doc = {"meta": meta, "jobs": records, "nodes": records, "partitions": records, "reservations": records,
           "sinfo": records, "statistics": records[0] if records else {}}
    parse_json.parse_jobs(doc)
    parse_json.parse_nodes(doc)
    parse_json.parse_partitions(doc)
    parse_json.parse_reservations(doc)
    parse_json.parse_diag(doc)
    parse_json.parse_sinfo(doc)


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_text_parsers_never_raise(text):
    for fn in (parse_text.parse_scontrol_jobs, parse_text.parse_scontrol_nodes, parse_text.parse_scontrol_partitions,
               parse_text.parse_scontrol_reservations, parse_text.parse_sprio, parse_text.parse_sshare,
               parse_text.parse_sdiag):
        fn(text)
    for prefix in ("JobId=1 ", "NodeName=n1 ", "Account|User|RawShares\n", "Main schedule statistics\n"):
        parse_text.parse_scontrol_jobs(prefix + text)
        parse_text.parse_scontrol_nodes(prefix + text)
        parse_text.parse_sshare(prefix + text)
        parse_text.parse_sdiag(prefix + text)


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_gres_and_dependency_never_raise(text):
    parse_gres(text)
    parse_dependency(text)
    tres_request_gpus(text)
    duration_seconds(text)
    memory_bytes(text)
