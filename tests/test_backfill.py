"""`gangwatch backfill`, `/api/v1/backfill` and the Snapshot -> planner adapter, on real captures:
../shared/fixtures/slurm-22.05 (22.05 CLI JSON, scontrol text and slurmrestd v0.0.38, with and
without slurmdbd), ../shared/fixtures/slurm-versions (v0.0.39 .. v0.0.44, every jobs+nodes set), and
our own live capture tests/data/slurm-live. Bad input: missing partitions and GPU types, every node
down, jobs larger than the machine, malformed snapshot JSON (exit 2, one line, no traceback)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.slurm.model import Job, Node, NodeAllocation, Partition, Reservation, Snapshot
from collectors.slurm.snapshot import RawOutput, build_snapshot
from dashboard.analysis.planner import plan
from dashboard.analysis.snapshot_to_planner import node_unusable_reason, snapshot_to_planner
from dashboard.backfill_api import backfill_json
from dashboard.backfill_cli import main, parse_squeue_start, parse_test_only, render_table, sbatch_test_only_argv
from tests.slurm.fakes import FileRunner, failing_result, text_result

HERE = Path(__file__).parent
LIVE = HERE / "data" / "slurm-live"
GOLDEN_TABLE = HERE / "golden" / "backfill_2205.txt"
GOLDEN_JSON = HERE / "golden" / "backfill_2205.json"
# The 22.05 capture was taken about 150 s after its jobs were submitted (its README); plan as of then.
NOW_2205 = 1795980000.0
BF_RESOLUTION = 60  # the capture's SchedulerParameters: Slurm rounds its estimates to this


@pytest.fixture(scope="module", autouse=True)
def utc():
    """Slurm's text forms print local time; the captures were taken on a UTC host, so read them in UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def _raws(d: Path, form: str) -> list[RawOutput]:
    def r(kind, name, fmt):
        return RawOutput(kind, name, fmt, (d / name).read_text())
    common = [r("partitions", "scontrol_show_partition.txt", "text"),
              r("reservations", "scontrol_-o_show_reservation.txt", "text")]
    if form == "cli-json":
        return [r("jobs", "squeue_--json.json", "json"), r("nodes", "sinfo_--json.json", "json"),
                r("priority", "sprio_-l.txt", "sprio"), *common]
    if form == "text":
        return [r("jobs", "scontrol_-o_show_job_-d.txt", "text"), r("nodes", "scontrol_-o_show_node_-d.txt", "text"),
                *common]
    return [r(k, f"slurmrestd_GET_slurm_v0.0.38_{k}.json", "json") for k in ("jobs", "nodes", "partitions",
                                                                                "reservations")]


@pytest.fixture(scope="module")
def snap2205(fixtures_dir) -> Snapshot:
    return build_snapshot(_raws(fixtures_dir / "slurm-22.05", "cli-json"), NOW_2205, "files")


@pytest.fixture(scope="module")
def doc2205(snap2205) -> dict:
    return backfill_json(snap2205, NOW_2205)


def _part(doc, name):
    return next(p for p in doc["partitions"] if p["partition"] == name)


def _whys(doc) -> dict[str, dict]:
    return {w["job_id"]: w for p in doc["partitions"] for w in p["why"]}


# ------------------------------------------------------------------------------ adapter, 22.05

def test_nodes_states_and_free_resources(snap2205):
    inp = snapshot_to_planner(snap2205, NOW_2205)
    nodes = {n.name: n for n in inp.nodes}
    assert not nodes["gpu006"].usable and nodes["gpu006"].reason == "draining: Xid 79: GPU has fallen off the bus (GPU 3)"
    assert not nodes["gpu008"].usable and nodes["gpu008"].reason == "down: NHC: ib0 link down"
    assert all(nodes[f"gpu00{i}"].usable for i in (1, 2, 3, 4, 5, 7))
    # gpu007 runs one 1-GPU, 4-CPU, 16 GiB job (27); memory in MiB from Slurm's RealMemory (515000 MB)
    g7 = nodes["gpu007"]
    assert (g7.cpus_free, g7.gpus_free, g7.mem_total_mb, g7.mem_free_mb) == (60, 7, 515000, 515000 - 16384)
    assert g7.gpu_type == "a100" and g7.partitions == ("gpu", "long") and "ib" in g7.features
    # free = total - allocated, never the OS's free memory (sinfo's free_mem is the host's)
    assert all(0 <= n.mem_free_mb <= n.mem_total_mb for n in inp.nodes)


def test_running_jobs_end_at_start_plus_time_limit(snap2205):
    inp = snapshot_to_planner(snap2205, NOW_2205)
    run = {r.job_id: r for r in inp.running}
    j1 = snap2205.job(1)
    assert run["1"].expected_end == j1.start_time + 86400
    assert [(a.node, a.gpus) for a in run["1"].allocations] == [(f"gpu00{i}", 8) for i in range(1, 5)]
    assert sum(a.mem_mb for a in run["1"].allocations) == 1920 * 1024  # tres mem=1920G over 4 nodes
    assert run["2"].allocations[0].gpus == 4 and run["3"].allocations[0].gpus == 1  # typed GRES, --gpus=1


def test_pending_requests_and_order(snap2205):
    inp = snapshot_to_planner(snap2205, NOW_2205)
    pend = {p.job_id: p for p in inp.pending}
    order = [p.job_id for p in inp.pending]
    # Slurm's order: priority descending (every partition has PriorityTier 1)
    prios = [p.priority for p in inp.pending]
    assert prios == sorted(prios, reverse=True) and order[0] == "17"
    assert (pend["15"].min_nodes, pend["15"].gpus_per_node, pend["15"].exclusive) == (8, 8, True)
    assert (pend["26"].gpus_per_job, pend["26"].gpus_per_node) == (8, 0)
    assert pend["16"].time_limit_s == 43200 and pend["18"].partitions == ("debug",)
    assert pend["19"].dependency == "pending" and pend["19"].dependency_text == "afterok:6(unfulfilled)"
    assert pend["21"].dependency == "never"
    assert pend["22"].held and pend["23"].held and not pend["26"].held
    assert pend["24"].begin_time == snap2205.job(24).eligible_time > NOW_2205
    assert pend["26"].slurm_expected_start == snap2205.job(26).start_time
    assert pend["26"].priority_factors["age"] > 0  # from sprio


def test_plan_2205(doc2205, snap2205, fixtures_dir):
    gpu = _part(doc2205, "gpu")
    whys = _whys(doc2205)
    # the highest-priority gpu job (15, 8 whole nodes) can never start while gpu006/gpu008 are out:
    # Slurm gives it no start time either, so the top job is 26, as Slurm's own plan says
    assert whys["15"]["state"] == "blocked" and "gpu[006,008]" in whys["15"]["reasons"][0]["message"]
    assert snap2205.job(15).start_time is None
    assert gpu["top_job"]["job_id"] == "26" and gpu["top_job"]["node_list"] == "gpu007"
    start_txt = (fixtures_dir / "slurm-22.05" / "squeue_--start.txt").read_text()
    assert any(line.split()[:1] == ["26"] and "gpu007" in line.split() for line in start_txt.splitlines())
    assert abs(gpu["top_job"]["shadow_time"] - snap2205.job(26).start_time) <= BF_RESOLUTION
    # the maintenance reservation on gpu007 limits its window
    assert gpu["windows"][0] == {"nodes": 1, "gpus_per_node": 7, "cpus": 60, "until": 1795983450.0,
                                 "node_list": "gpu007"}
    assert whys["21"]["state"] == "never" and "NEVER SATISFIABLE" in whys["21"]["reasons"][0]["message"]
    assert whys["18"]["reasons"][0]["code"] == "too_large"  # 2 h in the 30 min debug partition
    assert {whys[j]["state"] for j in ("19", "20", "22", "23", "24")} == {"blocked"}
    # a startable job that Slurm holds by a QOS limit is flagged, not hidden
    assert [s["job_id"] for s in gpu["startable"]] == ["4_[4-5]"]
    assert whys["4_[4-5]"]["reasons"][-1]["code"] == "slurm_limit"
    assert doc2205["snapshot"]["taken_at"] == NOW_2205 and doc2205["source"] == "gangwatch"
    json.dumps(doc2205, allow_nan=False)


@pytest.mark.parametrize("folder", ["slurm-22.05", "slurm-22.05/nodbd", "live"])
def test_cli_text_and_restd_forms_give_the_same_plan(fixtures_dir, folder):
    d = LIVE if folder == "live" else fixtures_dir / folder
    plans = []
    for form in ("cli-json", "text", "restd"):
        snap = build_snapshot(_raws(d, form), 0, "files")
        now = max(j.submit_time or 0 for j in snap.jobs) + 150
        doc = backfill_json(snap, now)
        plans.append([(p["partition"], p["nodes_usable"], p["top_job"] and p["top_job"]["job_id"],
                       p["top_job"] and p["top_job"]["shadow_time"], [s["job_id"] for s in p["startable"]],
                       {w["job_id"]: w["state"] for w in p["why"]}) for p in doc["partitions"]])
    assert plans[0] == plans[1] == plans[2]
    assert any(p[2] for p in plans[0])  # a top job somewhere


def _version_sets(root: Path) -> dict[str, dict[str, Path]]:
    sets = {}
    for d in sorted(root.glob("v0.0.*")):
        for f in d.glob("slurmrestd-*-slurm-jobs.json"):
            rel = f.name.split("-slurm-")[0]
            sets[f"{d.name}/{rel}"] = {k: d / f"{rel}-slurm-{k}.json" for k in ("jobs", "nodes", "partitions",
                                                                              "reservations")}
    sets["v0.0.40/talapas"] = {k: root / f"v0.0.40/slurmrestd-23.11.1-{k}-talapas.json"
                               for k in ("jobs", "nodes", "partitions")}
    sets["v0.0.42/ozstar"] = {"jobs": root / "v0.0.42/cli-squeue-u-24.11.6-ozstar.json",
                              "nodes": root / "v0.0.42/cli-sinfo-24.11.6-ozstar.json"}
    sets["v0.0.44/ucr-gcp"] = {"jobs": root / "v0.0.44/cli-squeue-25.11.4-ucr-gcp.json",
                               "nodes": root / "v0.0.44/cli-scontrol-show-nodes-25.11.4-ucr-gcp.json"}
    return sets


def test_every_version_set_plans(fixtures_dir):
    sets = _version_sets(fixtures_dir / "slurm-versions")
    assert {k.split("/")[0] for k in sets} == {f"v0.0.{n}" for n in range(39, 45)}
    seen = {}
    for name, files in sets.items():
        snap = build_snapshot([RawOutput(k, str(p), "json", p.read_text()) for k, p in files.items()], 0, "files")
        now = max(j.submit_time or 0 for j in snap.jobs) + 60
        doc = backfill_json(snap, now)
        json.dumps(doc, allow_nan=False)
        pending = {j.display_id for j in snap.jobs if j.state == "PENDING"}
        assert set(_whys(doc)) == pending, name
        for p in doc["partitions"]:
            assert 0 <= p["nodes_usable"] <= p["nodes_total"], name
            for w in p["why"]:
                assert w["reasons"], (name, w["job_id"])  # every pending job says why
        seen[name] = doc
    v39 = _part(seen["v0.0.39/slurmrestd-23.02.8"], "batch")
    assert v39["top_job"]["job_id"] == "326" and len(v39["top_job"]["nodes"]) == 16
    assert _part(seen["v0.0.39/slurmrestd-23.02.8"], "batch")["nodes_usable"] == 79  # one drained node
    v40 = _part(seen["v0.0.40/slurmrestd-23.11.10"], "standard")
    assert v40["nodes_usable"] == 2  # cn1 drained, cn4 down
    assert _whys(seen["v0.0.44/slurmrestd-25.11.0"])["5750"]["reasons"][0]["code"] == "begin_time"
    # cloud nodes powered down for power saving are resumed by Slurm: usable; the one powering down is not
    ucr = _part(seen["v0.0.44/ucr-gcp"], "computehigh")
    assert (ucr["nodes_usable"], ucr["nodes_total"]) == (5, 6)


def test_node_usability_rules():
    def reason(state, flags=(), why="", known=False):
        return node_unusable_reason(Node("n", state=state, state_flags=flags, reason=why), known)
    assert reason("IDLE") == "" and reason("MIXED") == "" and reason("ALLOCATED", ("PLANNED",)) == ""
    assert reason("IDLE", ("DRAIN",), "disk") == "drained: disk" and reason("MIXED", ("DRAIN",)) == "draining"
    assert reason("DOWN", (), "NHC") == "down: NHC" and reason("FUTURE") == "future"
    assert reason("IDLE", ("NOT_RESPONDING",)) == "not responding"
    assert reason("IDLE", ("CLOUD", "POWERED_DOWN")) == ""
    assert reason("IDLE", ("RESERVED",)) == "reserved" and reason("IDLE", ("RESERVED",), known=True) == ""


# ------------------------------------------------------------------------------ bad input

def _with_pending(snap: Snapshot, **changes) -> Snapshot:
    """The 22.05 snapshot plus one extra pending job (id 900) with `changes`, at the top priority."""
    base = dict(job_id=900, user="erin", account="infra", partition="gpu", state="PENDING", reason="Priority",
                priority=10**6, time_limit_seconds=600, node_count=1, cpus=1, tres_per_node="gres:gpu:1",
                submit_time=NOW_2205 - 10)
    base.update(changes)
    return dataclasses.replace(snap, jobs=snap.jobs + (Job(**base),))


def test_missing_partition(snap2205):
    doc = backfill_json(_with_pending(snap2205, partition="nosuch"), NOW_2205)
    p = _part(doc, "nosuch")
    assert p["exists"] is False and p["nodes_total"] == 0 and p["windows"] == []
    w = p["why"][0]
    assert (w["state"], w["reasons"][0]["code"]) == ("never", "no_such_partition")
    assert _part(doc, "gpu")["top_job"]["job_id"] == "26"  # the others are planned as before


def test_missing_gpus(snap2205):
    doc = backfill_json(_with_pending(snap2205, tres_per_node="gres:gpu:v100:2"), NOW_2205)
    w = _whys(doc)["900"]
    assert w["state"] == "never" and w["reasons"][0]["code"] == "no_such_gpu_type"
    assert "v100" in w["reasons"][0]["message"]
    # GPUs in a partition without GPUs
    cpu_only = dataclasses.replace(snap2205, nodes=tuple(dataclasses.replace(n, gpus_total=0, gpus_allocated=0,
                                                                             gpu_types=()) for n in snap2205.nodes))
    w = _whys(backfill_json(_with_pending(cpu_only), NOW_2205))["900"]
    assert w["state"] == "never" and w["reasons"][0]["code"] == "no_such_gpu_type"


def test_larger_than_the_machine(snap2205):
    for changes, words in (({"node_count": 100}, "100 nodes"), ({"tres_per_node": "gres:gpu:16"}, "16 GPUs"),
                           ({"node_count": 1, "cpus": 512}, "512 CPUs")):
        w = _whys(backfill_json(_with_pending(snap2205, **changes), NOW_2205))["900"]
        assert w["state"] == "never" and w["reasons"][0]["code"] == "too_large", changes
        assert words in w["reasons"][0]["message"], (changes, w["reasons"][0]["message"])


def test_bad_time_limits(snap2205):
    w = _whys(backfill_json(_with_pending(snap2205, time_limit_seconds=0), NOW_2205))["900"]
    assert w["reasons"][0]["code"] == "bad_time_limit"
    w = _whys(backfill_json(_with_pending(snap2205, time_limit_seconds=None, time_limit_infinite=True),
                            NOW_2205))["900"]
    # UNLIMITED is over gpu's MaxTime of 2 days: Slurm says PartitionTimeLimit, we say too_large
    assert w["state"] == "never" and "UNLIMITED exceeds partition gpu's limit 2-00:00:00" in w["reasons"][0]["message"]


def test_every_node_down(snap2205):
    down = dataclasses.replace(snap2205, nodes=tuple(dataclasses.replace(n, state="DOWN", state_flags=(),
                                                                         reason="power") for n in snap2205.nodes))
    doc = backfill_json(down, NOW_2205)
    for p in doc["partitions"]:
        assert p["nodes_usable"] == 0 and p["windows"] == [] and p["startable"] == [] and p["top_job"] is None
        for w in p["why"]:
            assert w["state"] in ("blocked", "never") and w["reasons"], w
    codes = {r["code"] for w in _whys(doc).values() for r in w["reasons"]}
    assert "no_usable_nodes" in codes
    assert "down: power" in snapshot_to_planner(down).nodes[0].reason


def test_empty_snapshot():
    doc = backfill_json(Snapshot(taken_at=1.0), 1.0)
    assert doc["partitions"] == [] and doc["snapshot"]["age_seconds"] == 0


# ------------------------------------------------------------------------------ the CLI

def _run(capsys, argv, **kw):
    rc = main(argv, **kw)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_table_golden(snap2205, tmp_path, capsys, update_golden):
    f = tmp_path / "snap.json"
    f.write_text(snap2205.to_json())
    rc, out, err = _run(capsys, ["--snapshot", str(f), "--now", str(NOW_2205)])
    assert rc == 0 and err == ""
    if update_golden or not GOLDEN_TABLE.exists():
        GOLDEN_TABLE.write_text(out)
    assert out == GOLDEN_TABLE.read_text()
    assert "top job 26: reserved start 2026-11-30T00:17:30Z (in 4:57:30) on gpu007   [slurm: 2026-11-30T00:18:01Z]" in out
    rc, js, _ = _run(capsys, ["--snapshot", str(f), "--now", str(NOW_2205), "--format", "json"])
    doc = json.loads(js)
    if update_golden or not GOLDEN_JSON.exists():
        GOLDEN_JSON.write_text(js)
    assert doc == json.loads(GOLDEN_JSON.read_text())
    assert doc == backfill_json(snap2205, NOW_2205)


def test_cli_snapshot_defaults_to_its_own_time_and_filters(snap2205, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(snap2205.to_json()))
    rc, out, _ = _run(capsys, ["--snapshot", "-", "--format", "json", "--partition", "debug"])
    doc = json.loads(out)
    assert rc == 0 and doc["generated_at"] == NOW_2205 and [p["partition"] for p in doc["partitions"]] == ["debug"]


class _Exporter(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(self.status if self.path == "/api/v1/snapshot" else 404)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def exporter():
    srv = HTTPServer(("127.0.0.1", 0), _Exporter)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_cli_from_slurm_exporter(snap2205, exporter, capsys):
    srv, url = exporter
    _Exporter.body, _Exporter.status = snap2205.to_json(now=NOW_2205).encode(), 200
    rc, out, err = _run(capsys, ["--slurm-exporter", url, "--now", str(NOW_2205), "--format", "json"])
    assert rc == 0 and json.loads(out)["partitions"] == backfill_json(snap2205, NOW_2205)["partitions"]
    _Exporter.body, _Exporter.status = b"no snapshot yet", 503
    rc, out, err = _run(capsys, ["--slurm-exporter", url])
    assert rc == 2 and "HTTP 503" in err and "Traceback" not in err


def test_cli_from_fake_slurm(fixtures_dir, capsys):
    runner = FileRunner(fixtures_dir / "slurm-22.05")
    runner.override("squeue -h -t PD --start -o %i|%S", text_result("26|2026-11-30T00:18:01\n17|N/A\n"))
    rc, out, err = _run(capsys, ["--slurm-cli", "--now", str(NOW_2205), "--format", "json"], runner=runner)
    doc = json.loads(out)
    assert rc == 0, err
    whys = _whys(doc)
    assert whys["26"]["slurm_expected_start"]["time"] is not None
    assert whys["17"]["slurm_expected_start"]["time"] is None  # squeue --start said N/A
    runner.override("squeue --json", failing_result())
    rc, out, err = _run(capsys, ["--slurm-cli"], runner=runner)
    assert rc == 2 and "cannot read Slurm" in err and "Unable to contact slurm controller" in err


BAD_SNAPSHOTS = {
    "truncated.json": '{"taken_at": 1, "jobs": [',
    "empty.json": "",
    "array.json": "[1, 2]",
    "no_taken_at.json": '{"jobs": [], "nodes": []}',
    "jobs_not_list.json": '{"taken_at": 1, "jobs": "x", "nodes": []}',
    "bad_job.json": '{"taken_at": 1, "jobs": [{"job_id": 1, "state": "PENDING", "node_count": "x"}], "nodes": []}',
    "bad_node.json": '{"taken_at": 1, "jobs": [], "nodes": [{"name": "n1", "cpus_total": "many"}]}',
    "bad_time.json": '{"taken_at": "yesterday", "jobs": [], "nodes": []}',
    "job_not_object.json": '{"taken_at": 1, "jobs": [5], "nodes": []}',
    "binary.json": "\udcff\x00garbage",
    "node_name_number.json": '{"taken_at": 1, "jobs": [], "nodes": [{"name": 5, "cpus_total": 4}]}',
    "alloc_cpus_text.json": '{"taken_at": 1, "jobs": [{"job_id": 1, "state": "RUNNING", "allocations": '
                            '[{"node": "a", "cpus": "x"}]}], "nodes": []}',
    "infinite_time.json": '{"taken_at": 1e400, "jobs": [], "nodes": []}',
    "resv_time_text.json": '{"taken_at": 1, "jobs": [], "nodes": [], "reservations": [{"name": "r", '
                           '"start_time": "x"}]}',
}


@pytest.mark.parametrize("name", sorted(BAD_SNAPSHOTS))
def test_cli_malformed_snapshot(tmp_path, capsys, name):
    f = tmp_path / name
    f.write_bytes(BAD_SNAPSHOTS[name].encode("utf-8", "surrogateescape"))
    rc, out, err = _run(capsys, ["--snapshot", str(f)])
    assert rc == 2 and out == ""
    assert err.startswith("gangwatch backfill: ") and err.count("\n") == 1 and "Traceback" not in err, err
    if name == "node_name_number.json":
        assert "malformed snapshot (Node.name: str expected, got int 5)" in err


def test_cli_argument_errors(tmp_path, capsys):
    rc, _, err = _run(capsys, ["--snapshot", str(tmp_path / "missing.json")])
    assert rc == 2 and "cannot read" in err and "Traceback" not in err
    rc, _, err = _run(capsys, ["--snapshot", str(tmp_path / "missing.json"), "--slurm-what-if"])
    assert rc == 2 and "--slurm-what-if needs a live Slurm" in err
    rc, _, err = _run(capsys, ["--slurm-exporter", "http://127.0.0.1:1", "--timeout", "2"])
    assert rc == 2 and "cannot reach" in err
    with pytest.raises(SystemExit) as exc:
        main(["--snapshot", "a", "--slurm-exporter", "b"])
    assert exc.value.code == 2


def test_squeue_start_and_test_only_parsers():
    got = parse_squeue_start("26|2026-11-30T00:18:01\n4_[4-5]|N/A\n17|Unknown\ngarbage\n|\n")
    assert list(got) == ["26"]
    ans = parse_test_only("sbatch: Job 31 to start at 2026-11-30T17:20:00 using 8 processors on nodes gpu008 "
                          "in partition gpu\n")
    assert ans["nodes"] == "gpu008" and ans["partition"] == "gpu" and ans["source"] == "slurm" and ans["time"]
    assert parse_test_only("sbatch: error: Batch job submission failed: Requested node configuration is not "
                           "available") is None


def test_sbatch_test_only_argv(snap2205):
    pend = {p.job_id: p for p in snapshot_to_planner(snap2205, NOW_2205).pending}
    argv = sbatch_test_only_argv(pend["15"], "gpu", 3540)
    assert argv[:2] == ["sbatch", "--test-only"] and "--time=59" in argv and "--exclusive" in argv
    assert "--gres=gpu:8" in argv and argv[-2:] == ["--wrap", "true"] and "-N" in argv
    assert "--gpus=8" in sbatch_test_only_argv(pend["26"], "gpu", 60)


# ------------------------------------------------------------------------------ property test

_names = st.sampled_from(["gpu001", "gpu002", "n1", ""])
_parts = st.sampled_from(["gpu", "debug", "gpu,debug", "", "nosuch"])
_maybe_int = st.none() | st.integers(-5, 10**6) | st.integers(10**9, 10**13)
_jobs = st.builds(
    Job, job_id=st.integers(0, 50), state=st.sampled_from(["PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "X"]),
    partition=_parts, reason=st.sampled_from(["Priority", "JobHeldUser", "Dependency", "QOSMaxGRESPerUser", ""]),
    priority=_maybe_int, node_count=_maybe_int, cpus=_maybe_int, gpus=_maybe_int,
    time_limit_seconds=_maybe_int, time_limit_infinite=st.booleans(),
    start_time=st.none() | st.floats(), eligible_time=st.none() | st.floats(), submit_time=st.none() | st.floats(),
    nodes=st.lists(_names, max_size=3).map(tuple),
    allocations=st.lists(st.builds(NodeAllocation, node=_names, cpus=_maybe_int, memory_bytes=_maybe_int,
                                   gpus=_maybe_int), max_size=3).map(tuple),
    tres_per_node=st.sampled_from(["", "gres:gpu:8", "gres/gpu:h100=2", "gres:gpu:x:y", "gpu"]) | st.text(max_size=8),
    tres_per_job=st.sampled_from(["", "gres/gpu:3", "gres:gpu:a100:0"]), tres_alloc=st.text(max_size=12),
    features=st.sampled_from(["", "ib", "h100&ib", "a|b", "[x*2]"]), exclusive=st.none() | st.booleans(),
    reservation=st.sampled_from(["", "maint", "nosuch"]), array_job_id=st.none() | st.integers(0, 5),
    array_task_id=st.none() | st.integers(0, 5), array_task_string=st.sampled_from(["", "1-3"]))
_nodes = st.builds(
    Node, name=_names, state=st.sampled_from(["IDLE", "MIXED", "DOWN", "ALLOCATED", ""]),
    state_flags=st.lists(st.sampled_from(["DRAIN", "RESERVED", "POWERED_DOWN", "COMPLETING"]), max_size=2).map(tuple),
    cpus_total=_maybe_int, cpus_allocated=_maybe_int, memory_total_bytes=_maybe_int,
    memory_allocated_bytes=_maybe_int, gpus_total=st.none() | st.integers(-1, 16), gpus_allocated=_maybe_int,
    gpu_types=st.lists(st.sampled_from(["h100", "a100"]), max_size=2).map(tuple),
    partitions=st.lists(st.sampled_from(["gpu", "debug"]), max_size=2).map(tuple))
_snaps = st.builds(
    Snapshot, taken_at=st.floats(0, 2e9), jobs=st.lists(_jobs, max_size=8).map(tuple),
    nodes=st.lists(_nodes, max_size=5).map(tuple),
    partitions=st.lists(st.builds(Partition, name=st.sampled_from(["gpu", "debug"]),
                                  state=st.sampled_from(["UP", "DOWN", ""]), nodes=st.lists(_names).map(tuple),
                                  max_time_seconds=_maybe_int, default_time_seconds=_maybe_int,
                                  priority_tier=_maybe_int), max_size=2).map(tuple),
    reservations=st.lists(st.builds(Reservation, name=st.sampled_from(["maint", "r2"]),
                                    nodes=st.lists(_names, max_size=2).map(tuple),
                                    start_time=st.none() | st.floats(), end_time=st.none() | st.floats(),
                                    flags=st.sampled_from([(), ("MAINT",)])), max_size=2).map(tuple))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_snaps)
def test_adapter_and_plan_never_raise(snap):
    inp = snapshot_to_planner(snap)
    for n in inp.nodes:
        assert n.cpus_free >= 0 and n.mem_free_mb >= 0 and n.gpus_free >= 0
    doc = plan(inp).to_json()
    json.dumps(doc, allow_nan=False)
    assert not math.isnan(doc["generated_at"])
    assert render_table(backfill_json(snap)).startswith("backfill plan")


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats() | st.text(max_size=6),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
                     max_leaves=12)
_field = st.sampled_from(["job_id", "state", "partition", "nodes", "allocations", "cpus_total", "name", "gpus_total",
                          "time_limit_seconds", "start_time", "node", "cpus", "tres_per_node", "partitions"])
_records = st.lists(st.dictionaries(_field, _json | st.sampled_from(["PENDING", "RUNNING", "gpu", "n1"]), max_size=6),
                    max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({"taken_at": _json, "jobs": _records | _json, "nodes": _records | _json},
                             optional={"reservations": _records, "partitions": _records}) | _json)
def test_snapshot_reader_only_reports_input_errors(doc):
    from dashboard.backfill_cli import InputError, parse_snapshot
    try:
        snap = parse_snapshot(json.dumps(doc), "x.json")
    except InputError:
        return
    json.dumps(backfill_json(snap), allow_nan=False)  # what it accepts, the planner can plan


class _SbatchRunner:
    """The 22.05 capture for every Slurm command, and a canned `sbatch --test-only` answer."""

    def __init__(self, folder: Path, stderr: str, rc: int = 0):
        self.files = FileRunner(folder)
        self.files.override("squeue -h -t PD --start -o %i|%S", text_result(""))
        self.stderr, self.rc, self.sbatch_calls = stderr, rc, []

    def run(self, argv, timeout: float = 5.0, input=None):
        from collectors.runner import CommandResult
        if argv[0] == "sbatch":
            self.sbatch_calls.append(list(argv))
            return CommandResult(tuple(argv), self.rc, "", self.stderr, 0.01)
        return self.files.run(argv, timeout, input)


def test_cli_slurm_what_if_with_fake_sbatch(fixtures_dir, capsys):
    ok = _SbatchRunner(fixtures_dir / "slurm-22.05",
                       "sbatch: Job 99 to start at 2026-11-29T19:20:00 using 8 processors on nodes gpu007 in partition gpu\n")
    rc, out, err = _run(capsys, ["--slurm-cli", "--slurm-what-if", "--now", str(NOW_2205), "--format", "json"], runner=ok)
    assert rc == 0, err
    wi = _whys(json.loads(out))["25"]["what_if"]
    assert wi["source"] == "gangwatch" and wi["slurm"] == {"time": NOW_2205, "nodes": "gpu007", "partition": "gpu",
                                                           "source": "slurm"}
    assert ok.sbatch_calls and all("--test-only" in c for c in ok.sbatch_calls)
    assert f"--time={wi['time_limit_s'] // 60}" in ok.sbatch_calls[0]
    bad = _SbatchRunner(fixtures_dir / "slurm-22.05",
                        "sbatch: error: Batch job submission failed: Requested node configuration is not available\n", 1)
    rc, out, err = _run(capsys, ["--slurm-cli", "--slurm-what-if", "--now", str(NOW_2205)], runner=bad)
    assert rc == 0 and "[slurm --test-only: sbatch: error: Batch job submission failed" in out


def test_sprio_terms_add_up_with_tres(snap2205):
    """sprio's weighted terms, TRES included and nice subtracted, add up to Slurm's priority (to
    sprio's rounding of each term)."""
    checked = 0
    for j in snap2205.jobs:
        f = j.priority_factors
        if f is None or f.priority is None:
            continue
        terms = sum(v or 0 for v in (f.site, f.age, f.assoc, f.fairshare, f.jobsize, f.partition, f.qos))
        assert f.tres_total is not None
        assert abs(terms + f.tres_total - (f.nice or 0) - f.priority) <= 3, (j.job_id, f)
        checked += 1
    assert checked >= 5


def test_queue_page_shows_slurms_answer(snap2205):
    """The Queue page: Slurm's expected start beside gangwatch's, labelled; the unusable nodes (as the
    CLI lists them); priority terms with TRES; node and job ids as links."""
    from dash import dcc

    from dashboard.datasource import Findings, MemoryDatasource
    from dashboard.pages import queue
    from dashboard.ui import Ctx, fmt_time

    ds = MemoryDatasource(snap2205, Findings(NOW_2205, "none"), now=NOW_2205)
    ctx = Ctx(lambda p: p)

    def walk(c):
        yield c
        ch = getattr(c, "children", None)
        for x in (ch if isinstance(ch, (list, tuple)) else [ch] if ch is not None else []):
            yield from walk(x)

    def text(c):
        return " ".join(x for x in walk(c) if isinstance(x, str))

    plan = queue.plan_block(ds, ctx)
    gpu = next(p for p in ds.backfill().partitions if p.name == "gpu")
    top = next(w for w in gpu.why if w.job_id == gpu.top_job.job_id)
    assert "gangwatch" in text(plan) and "Slurm expects " + fmt_time(top.job.slurm_expected_start) in text(plan)
    unusable = queue.unusable_nodes(snap2205)["gpu"]
    assert unusable and "Not usable:" in text(plan) and all(f"({why})" in text(plan) for _, why in unusable)
    links = {c.href for c in walk(plan) if isinstance(c, dcc.Link)}
    assert {f"/nodes/{n}" for n, _ in unusable} <= links and f"/jobs/{gpu.top_job.job_id}" in links
    assert {f"/nodes/{n}" for n in gpu.top_job.nodes} <= links
    why = queue.why_table(ds, ctx)
    assert "expected start (Slurm)" in text(why) and "TRES" in text(why)
    assert [str(w.rank) for w in gpu.why if w.rank is not None][:1] == ["1"]
