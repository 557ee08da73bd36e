"""TRES and GRES strings parsed once into the model's typed fields (collectors/slurm/tres.py), on
Slurm 22.05's own output and on hand-written forms of every version, and kept out of the snapshot
JSON (a reader computes them again)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collectors.slurm.model import Gres, Job, License, Qos, Snapshot
from collectors.slurm.snapshot import build_snapshot
from tests.test_backfill import NOW_2205, _raws


@pytest.fixture(scope="module")
def snap(fixtures_dir) -> Snapshot:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    try:
        return build_snapshot(_raws(Path(fixtures_dir) / "slurm-22.05", "cli-json"), NOW_2205, "files")
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old


def test_real_2205_jobs_have_typed_tres(snap):
    jobs = {j.job_id: j for j in snap.jobs}
    t1 = jobs[1].tres  # --gres=gpu:8 on 4 nodes: "cpu=192,mem=1920G,node=4,billing=1184,gres/gpu=32,gres/gpu:h100=32"
    assert (t1.gpus_per_node, t1.gpus_per_job, t1.cpus, t1.mem_bytes, t1.nodes, t1.gpus, t1.billing) == (
        8, None, 192, 1920 << 30, 4, 32, 1184)
    assert t1.gpu_type is None and Gres("gpu", "h100", 32) in t1.gres
    t2 = jobs[2].tres  # --gres=gpu:h100:4
    assert (t2.gpus_per_node, t2.gpu_type, t2.gpus) == (4, "h100", 8)
    assert (jobs[3].tres.gpus_per_job, jobs[3].tres.gpus_per_node) == (1, None)
    assert all(j.tres is not None for j in snap.jobs)


@pytest.mark.parametrize("per_node,per_job,gpn,gpj,gtype", [
    ("gres:gpu:8", "", 8, None, None),              # squeue/scontrol 22.05
    ("gres/gpu:h100=4", "", 4, None, "h100"),       # slurmrestd v0.0.40+
    ("gres/gpu=2", "", 2, None, None),
    ("", "gres:gpu", None, 1, None),                # a name alone asks for one
    ("gres:gpu:h100", "", 1, None, "h100"),
    ("", "gres/gpu:a100=1,gres/gpu:h100=1", None, 2, "a100"),
    ("gres/shard=2", "", None, None, None),         # not a GPU
    ("", "", None, None, None),
])
def test_request_forms(per_node, per_job, gpn, gpj, gtype):
    t = Job(1, tres_per_node=per_node, tres_per_job=per_job).tres
    assert (t.gpus_per_node, t.gpus_per_job, t.gpu_type) == (gpn, gpj, gtype)


def test_totals_licenses_and_qos_limits():
    t = Job(1, tres_alloc="cpu=8,mem=64G,node=1,billing=8,gres/gpu=2,license/matlab=1,license/ansys=4").tres
    assert (t.cpus, t.mem_bytes, t.nodes, t.gpus) == (8, 64 << 30, 1, 2)
    assert t.licenses == (License("matlab", 1), License("ansys", 4))
    assert Job(1, tres_alloc="cpu=x,garbage,mem=").tres.cpus is None  # bad terms are skipped
    q = Qos("lim", max_tres_per_user="gres/gpu=4,cpu=64,node=2", grp_tres="gres/gpu=16")
    assert (q.max_per_user.gpus, q.max_per_user.cpus, q.max_per_user.nodes, q.grp.gpus) == (4, 64, 2, 16)


def test_typed_tres_stays_out_of_the_snapshot_json(snap):
    text = snap.to_json()
    assert '"tres":{' not in text and '"max_per_user"' not in text
    back = Snapshot.from_json(text)
    assert [j.tres for j in back.jobs] == [j.tres for j in snap.jobs]


def test_license_requests_and_pools():
    from collectors.slurm.sched_config import parse_scontrol_licenses

    assert Job(1, licenses="matlab:2,ansys@db:1,comsol").tres.licenses == (
        License("matlab", 2), License("ansys@db", 1), License("comsol", 1))
    assert Job(1, licenses="(null)").tres.licenses == ()
    # 22.05 without Licenses= (captured from the test cluster); and the configured form
    none = (Path(__file__).parent / "data" / "slurm-licenses" / "scontrol_-o_show_licenses.none.txt").read_text()
    assert parse_scontrol_licenses(none) == []
    pools = parse_scontrol_licenses("LicenseName=matlab Total=4 Used=1 Free=3 Reserved=0 Remote=no\n")
    assert [(p.name, p.total, p.used, p.free, p.remote) for p in pools] == [("matlab", 4, 1, 3, False)]
