"""The Slurm exporter without a live Slurm: polling, metrics, the snapshot endpoint, and bad input
(slurmctld down or slow, non-zero exits, unknown or missing JSON fields, a newer data_parser,
hostile job names). Commands are answered from real 22.05 captures (../shared/fixtures/slurm-22.05)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from collectors.exposition import iter_samples
from collectors.runner import CommandRunner
from collectors.slurm import exporter
from collectors.slurm.metrics import LABEL_MAX, METRICS, metric_table_markdown
from collectors.slurm.model import Snapshot
from collectors.slurm.sched_config import QOS_ARGV
from collectors.slurm.sources import CliSource, Poller, cli_plan
from collectors.web import make_server, serve_in_thread
from tests.slurm.fakes import FileRunner, failing_result, slow_result, text_result, timeout_result

T0 = 1795980010.0  # a moment just after the 22.05 capture
GOLDEN = Path(__file__).parent / "data" / "slurm-golden" / "metrics-22.05.prom"
EVIL = '<script>alert("x")</script> \'q\' "dq" \\back\nnewline {a="b"} Evil=1 ' + "x" * 10240


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def f2205(fixtures_dir) -> Path:
    return fixtures_dir / "slurm-22.05"


@pytest.fixture
def runner(f2205) -> FileRunner:
    return FileRunner(f2205)


def samples(text: str) -> list[tuple[str, dict, float]]:
    return list(iter_samples(text))


def value(text: str, name: str, **labels) -> float | None:
    for n, lbl, v in samples(text):
        if n == name and all(lbl.get(k) == str(v2) for k, v2 in labels.items()):
            return v
    return None


def promtool_check(text: str) -> None:
    if shutil.which("promtool") is None:
        return  # CI installs it (tests/run-all.sh); the other assertions still run
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def render(poller: Poller, clock: Clock, top_pending: int = 100) -> str:
    return exporter.render_once(poller, clock(), top_pending)


# ------------------------------------------------------------------------------------ happy path

def test_cli_plan_follows_the_version():
    assert [p[2] for p in cli_plan((22, 5))][:2] == [["squeue", "--json"], ["sinfo", "--json"]]
    new = {p[0]: p[2] for p in cli_plan((24, 11))}
    assert new["nodes"] == ["scontrol", "show", "nodes", "--json"] and new["scheduler"] == ["sdiag", "--json"]
    assert new["reservations"] == ["scontrol", "show", "reservations", "--json"]
    assert cli_plan((20, 11))[0][2] == ["scontrol", "-o", "show", "job", "-d"]


def test_poll_2205_commands(runner):
    poller = Poller(CliSource(runner=runner), clock=Clock())
    assert poller.poll_once()
    assert runner.calls == ["squeue --version", "squeue --json", "sinfo --json", "scontrol -o show partition",
                            "scontrol -o show reservation", "sdiag", "sprio", "sshare -l -a -P", "scontrol show topology",
                            "scontrol show config", " ".join(QOS_ARGV), "scontrol -o show licenses"]
    snap = poller.current()
    assert (len(snap.jobs), len(snap.nodes), len(snap.partitions), len(snap.reservations)) == (27, 8, 3, 2)
    assert snap.data_parser == "v0.0.38" and snap.slurm_version == "22.05.8" and snap.errors == ()
    assert snap.job(15).priority_factors.nice == 1000  # sprio joined onto the job
    assert snap.scheduler.backfill_jobs_total == 3 and len(snap.fairshare) == 10
    assert not snap.stale and poller.up
    # Slurm's configuration, read on the slow interval: what the dashboard's backfill plan follows
    assert snap.config.scheduler_type == "sched/backfill" and snap.config.bf_resolution_s == 60
    assert {q.name for q in snap.qos} == {"normal", "high", "low"} and snap.licenses == ()


def test_configuration_is_read_on_its_own_interval_and_kept(runner):
    t = [0.0]
    poller = Poller(CliSource(runner=runner, slow_interval=300, clock=lambda: t[0]), clock=Clock())
    assert poller.poll_once()
    runner.calls.clear()
    t[0] = 100.0  # within the interval: not asked again, still in the snapshot
    runner.override("scontrol show config", failing_result())
    assert poller.poll_once()
    assert "scontrol show config" not in runner.calls and poller.current().config.bf_window_s == 4320 * 60
    t[0] = 400.0  # asked again; it fails: the last good read stays, the failure is reported
    assert poller.poll_once()
    snap = poller.current()
    assert "scontrol show config" in runner.calls and snap.config.bf_window_s == 4320 * 60
    assert not poller.health()["statuses"]["scontrol_config"].ok
    runner.override("scontrol show config", text_result("garbage\n"))  # not config output: an error, not a config
    t[0] = 800.0
    assert poller.poll_once()
    assert poller.current().config.bf_window_s == 4320 * 60
    runner.calls.clear()
    assert CliSource(runner=runner, slow_interval=0).poll()[0] and "scontrol show config" not in runner.calls


def test_metrics_golden(runner, update_golden):
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    poller.poll_once()
    text = render(poller, clock)
    stable = "\n".join(ln for ln in text.splitlines() if "poll_duration_seconds" not in ln) + "\n"
    if update_golden or not GOLDEN.exists():
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(stable)
    assert stable == GOLDEN.read_text()
    promtool_check(text)


def test_metric_facts(runner):
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    poller.poll_once()
    text = render(poller, clock, top_pending=3)
    p = "gangwatch_slurm_"
    # GPUs per partition by state; each GPU counted once: 8 nodes x 8 GPUs
    gpu = {s: value(text, p + "partition_gpus", partition="gpu", state=s) for s in ("allocated", "idle", "drained", "down")}
    assert gpu == {"allocated": 46, "idle": 7, "drained": 3, "down": 8} and sum(gpu.values()) == 64
    assert value(text, p + "job_node_gpus", jobid=1, node="gpu003") == 8
    assert value(text, p + "job_node_gpus", jobid=5, node="gpu005") == 0
    idx = {(l["node"], l["gpu"]) for n, l, _ in samples(text) if n == p + "job_gpu_info" and l["jobid"] == "2"}
    assert idx == {(n, str(g)) for n in ("gpu005", "gpu006") for g in range(4)}
    # bounded: all 10 running jobs + the 3 highest-priority pending ones
    infos = [l for n, l, _ in samples(text) if n == p + "job_info"]
    assert sum(l["state"] == "RUNNING" for l in infos) == 10 and sum(l["state"] == "PENDING" for l in infos) == 3
    assert {l["jobid"] for l in infos if l["state"] == "PENDING"} == {"17", "15", "24"}  # priorities 11253, 9555, 9098
    assert value(text, p + "jobs", state="PENDING", partition="gpu", reason="Dependency") == 2
    assert value(text, p + "nodes", state="draining") == 1 and value(text, p + "nodes", state="down") == 1
    assert value(text, p + "reservation_end_time_seconds", reservation="maint-gpu007") - \
        value(text, p + "reservation_start_time_seconds", reservation="maint-gpu007") == 4 * 3600
    assert value(text, p + "scheduler_backfilled_jobs_total") == 3
    assert value(text, p + "fairshare_factor", account="ml-research", user="alice") == pytest.approx(0.166667)
    assert value(text, p + "fairshare_level", account="root", user="root") == math.inf
    assert value(text, p + "pending_gang_jobs_oldest_wait_seconds", partition="gpu") == pytest.approx(T0 - 1795979850)
    assert value(text, p + "up") == 1 and value(text, p + "command_success", command="squeue") == 1
    assert value(text, p + "snapshot_age_seconds") == 0


def test_snapshot_json_roundtrip(runner):
    poller = Poller(CliSource(runner=runner), clock=Clock())
    poller.poll_once()
    snap = poller.current()
    doc = json.loads(snap.to_json(now=T0 + 5))
    assert doc["age_seconds"] == 5 and doc["schema_version"] == 1
    assert doc["jobs"][0]["allocations"][0] == {"node": "gpu001", "cpus": 48, "memory_bytes": 491520 * 2**20, "gpus": 8,
                                                "gpu_indices": list(range(8)), "gpu_type": "h100", "cpu_ids": None}
    assert Snapshot.from_json(snap.to_json()) == snap
    doc["unknown_future_field"] = 1  # a newer writer must not break an older reader
    assert Snapshot.from_dict(doc) == snap


def test_snapshot_body_encoded_once_per_snapshot_with_each_requests_age(runner):
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    poller.poll_once()
    snap, handle = poller.current(), exporter.snapshot_handler(poller, clock)
    bodies = []
    for dt in (0.0, 2.5):
        clock.t = T0 + dt
        bodies.append(handle(exporter.Request("/api/v1/snapshot", {}, {}))[2])
    pretty = handle(exporter.Request("/api/v1/snapshot", {"pretty": [""]}, {}))[2]
    first, second = (json.loads(b) for b in bodies)
    assert (first["age_seconds"], second["age_seconds"]) == (0.0, 2.5)
    assert dict(first, age_seconds=2.5) == second == json.loads(pretty) == json.loads(snap.to_json(now=T0 + 2.5))
    assert b"\n  " in pretty
    made = []
    body = exporter.SnapshotBody()
    for age in (1.0, 2.0):  # the document is made and encoded once per snapshot, not per request
        body.render(snap, lambda: made.append(1) or snap.to_dict(), age)
    assert len(made) == 1


def test_docs_table_lists_every_metric():
    table = metric_table_markdown()
    assert all(f"`gangwatch_slurm_{name}`" in table for name in METRICS)
    page = (Path(__file__).resolve().parent.parent / "docs" / "slurm-exporter.md").read_text()
    assert table in page, "docs/slurm-exporter.md's metric table is stale: paste metrics.metric_table_markdown()"


# ------------------------------------------------------------------------------ failure handling

def test_slurmctld_down_keeps_last_good_snapshot(runner):
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    assert poller.poll_once()
    runner.override("squeue --json", failing_result())
    runner.override("sinfo --json", failing_result("slurm_load_node error: Unable to contact slurm controller"))
    clock.t += 45
    assert not poller.poll_once()
    snap = poller.current()
    assert snap.stale and snap.taken_at == T0 and snap.last_attempt == T0 + 45 and len(snap.jobs) == 27
    assert any("Unable to contact slurm controller" in e.message and e.source == "squeue --json" for e in snap.errors)
    text = render(poller, clock)
    p = "gangwatch_slurm_"
    assert value(text, p + "up") == 0 and value(text, p + "snapshot_stale") == 1
    assert value(text, p + "snapshot_age_seconds") == 45
    assert value(text, p + "command_success", command="squeue") == 0
    assert value(text, p + "command_success", command="sdiag") == 1
    assert value(text, p + "command_errors_total", command="squeue") == 1
    assert value(text, p + "poll_failures_total") == 1
    assert value(text, p + "jobs", state="RUNNING", partition="gpu", reason="") == 10  # still served
    promtool_check(text)
    # recovery
    runner.override("squeue --json", None)
    runner.override("sinfo --json", None)
    clock.t += 15
    assert poller.poll_once()
    assert not poller.current().stale and poller.current().taken_at == T0 + 60


CTLD_DOWN = Path(__file__).parent / "data" / "slurm-ctld-down"  # what 22.05.8 printed with slurmctld killed


def test_controller_down_json_with_errors_is_a_failed_poll(runner, caplog):
    """22.05's squeue/sinfo --json answer a dead controller with exit 0, `errors` and no jobs/nodes:
    that is an outage (up 0, counted, logged, last good data kept with its start), never an empty cluster."""
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    assert poller.poll_once()
    for key, name in (("squeue --json", "squeue_--json.json"), ("sinfo --json", "sinfo_--json.json")):
        runner.override(key, text_result((CTLD_DOWN / name).read_text()))
    for key in ("scontrol -o show partition", "scontrol -o show reservation", "sdiag", "sprio", "sshare -l -a -P"):
        runner.override(key, failing_result(rc=255))
    # what 22.05's `scontrol show topology` prints then: exit 0, nothing on stdout, the error on stderr
    runner.override("scontrol show topology", failing_result(
        "slurm_load_topo error: Unable to contact slurm controller (connect failure)", rc=0))
    clock.t += 15
    with caplog.at_level("WARNING", logger="collectors.slurm.sources"):
        assert not poller.poll_once()
    clock.t += 15
    assert not poller.poll_once()
    snap = poller.current()
    assert snap.stale and len(snap.jobs) == 27 and snap.taken_at == T0
    assert snap.failing_since == T0 + 15 and snap.last_attempt == T0 + 30  # the outage's start, not the last try
    assert "slurm reported: Failed while looking for jobs" in [e.message for e in snap.errors]
    assert any("failing since" in r.getMessage() and "Failed while looking for jobs" in r.getMessage() for r in caplog.records)
    h = poller.health()
    assert not h["up"] and h["failing_since"] == T0 + 15 and any("Failed while looking" in e for e in h["errors"])
    text = render(poller, clock)
    assert value(text, "gangwatch_slurm_up") == 0 and value(text, "gangwatch_slurm_poll_failures_total") == 2
    # exit 0, yet failed: Slurm's own errors count against the command
    assert value(text, "gangwatch_slurm_command_success", command="squeue") == 0
    assert value(text, "gangwatch_slurm_command_errors_total", command="sinfo") == 2
    assert poller.statuses["squeue"].error == "slurm reported: Failed while looking for jobs"
    assert poller.statuses["scontrol_topology"].error.startswith("exit status 0 but: slurm_load_topo error")
    assert value(text, "gangwatch_slurm_snapshot_stale") == 1 and value(text, "gangwatch_slurm_snapshot_age_seconds") == 30
    assert value(text, "gangwatch_slurm_jobs", state="RUNNING", partition="gpu", reason="") == 10  # alerts held, not reset
    assert Snapshot.from_json(snap.to_json()).failing_since == T0 + 15
    for key in list(runner.overrides):
        runner.override(key, None)
    clock.t += 15
    with caplog.at_level("WARNING", logger="collectors.slurm.sources"):
        assert poller.poll_once()
    assert not poller.current().stale and poller.current().failing_since is None and poller.health()["up"]
    assert any("succeeded again" in r.getMessage() for r in caplog.records)


def test_one_deadline_per_poll_not_one_per_command(runner):
    """Every command hangs (a frozen controller): the poll ends after one deadline, not eight."""
    poller = Poller(CliSource(runner=runner, timeout=0.5), clock=Clock())
    poller.poll_once()
    for key in ("squeue --json", "sinfo --json", "scontrol -o show partition", "scontrol -o show reservation",
                "sdiag", "sprio", "sshare -l -a -P", "scontrol show topology"):
        runner.override(key, slow_result(30))
    start = time.monotonic()
    assert not poller.poll_once()
    assert time.monotonic() - start < 1.5  # serial timeouts would take 8 x 0.5 s
    # (the configuration, read on its own slower interval, was not asked again)
    assert all(not st.ok for name, st in poller.statuses.items()
               if name not in ("squeue_version", "scontrol_config", "sacctmgr_qos", "scontrol_licenses"))


def test_exporter_caps_the_poll_deadline_at_the_interval():
    args = exporter.build_parser().parse_args(["--slurm.poll-interval", "5", "--slurm.command-timeout", "30"])
    assert exporter.make_source(args).timeout == 5


def test_timeouts_are_reported(runner):
    clock = Clock()
    poller = Poller(CliSource(runner=runner, timeout=0.2), clock=clock)
    poller.poll_once()
    runner.override("squeue --json", slow_result(5))  # sleeps only up to the timeout
    runner.override("sdiag", timeout_result)
    start = time.monotonic()
    assert not poller.poll_once()
    assert time.monotonic() - start < 2
    assert poller.statuses["squeue"].error.startswith("timed out") and poller.statuses["sdiag"].ok is False
    assert poller.current().stale


def test_real_processes_time_out(tmp_path, f2205):
    """The real CommandRunner against stand-in Slurm commands: a hung squeue is killed at the deadline."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    hang = tmp_path / "hang"
    for name, fname in (("sinfo", "sinfo_--json.json"), ("sdiag", "sdiag.txt"), ("sprio", "sprio_-l.txt"),
                        ("sshare", "sshare_-l_-a_-P.txt")):
        (bindir / name).write_text(f"#!/bin/sh\ncat '{f2205 / fname}'\n")
    (bindir / "scontrol").write_text(f"#!/bin/sh\ncase \"$*\" in *partition*) cat '{f2205}/scontrol_show_partition.txt';;"
                                     f" *) cat '{f2205}/scontrol_-o_show_reservation.txt';; esac\n")
    (bindir / "squeue").write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'slurm 22.05.8'; exit 0; }}\n"
                                   f"[ -e '{hang}' ] && exec sleep 30\ncat '{f2205}/squeue_--json.json'\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    poller = Poller(CliSource(runner=CommandRunner(), timeout=0.5, bin_dir=str(bindir)), clock=Clock())
    assert poller.poll_once() and len(poller.current().jobs) == 27
    hang.touch()
    start = time.monotonic()
    assert not poller.poll_once()
    assert time.monotonic() - start < 3
    assert poller.statuses["squeue"].error.startswith("timed out") and poller.current().stale


def test_non_critical_command_failure_keeps_snapshot_fresh(runner):
    runner.override("sprio", failing_result("sprio: error: You are not running a supported priority plugin", 1))
    runner.override("sshare -l -a -P", failing_result("sshare: error: Problem talking to the database", 1))
    poller = Poller(CliSource(runner=runner), clock=Clock())
    assert poller.poll_once()
    snap = poller.current()
    assert not snap.stale and len(snap.jobs) == 27 and snap.fairshare == ()
    assert {e.source for e in snap.errors} == {"sprio -h -o %i|%r|%u|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T", "sshare -l -a -P"}
    text = render(poller, Clock())
    assert value(text, "gangwatch_slurm_command_success", command="sprio") == 0
    assert value(text, "gangwatch_slurm_up") == 1


def test_garbage_and_missing_jobs_fail_the_poll(runner, f2205):
    poller = Poller(CliSource(runner=runner), clock=Clock())
    poller.poll_once()
    runner.override("squeue --json", text_result((f2205 / "squeue_--json.json").read_text()[:5000]))  # truncated
    assert not poller.poll_once()
    assert any("not JSON" in e.message for e in poller.current().errors)
    err = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [{"description": "Unable to contact slurm controller"}]}
    runner.override("squeue --json", text_result(json.dumps(err)))
    assert not poller.poll_once()
    msgs = [e.message for e in poller.current().errors]
    assert "slurm reported: Unable to contact slurm controller" in msgs and "no 'jobs' in the document" in msgs


def test_version_probe_failure_is_visible():
    class Down:
        def run(self, argv, timeout=5.0, input=None):
            return timeout_result(argv, timeout)
    poller = Poller(CliSource(runner=Down()), clock=Clock())
    assert not poller.poll_once() and poller.current() is None
    assert poller.statuses["squeue_version"].ok is False
    text = exporter.render_once(poller, T0)
    assert value(text, "gangwatch_slurm_up") == 0
    promtool_check(text)


def _mutate_squeue(f2205: Path, fn) -> str:
    doc = json.loads((f2205 / "squeue_--json.json").read_text())
    fn(doc)
    return json.dumps(doc)


def test_unknown_and_missing_fields(runner, f2205):
    def mutate(doc):
        for j in doc["jobs"]:
            j["brand_new_field"] = {"nested": [1, 2, {"x": None}]}
            for k in ("gres_detail", "job_resources", "priority", "time_limit", "account"):
                if j["job_id"] % 2:
                    j.pop(k, None)
        doc["jobs"].append({"no_job_id": True})
        doc["jobs"].append("not an object")
    runner.override("squeue --json", text_result(_mutate_squeue(f2205, mutate)))
    poller = Poller(CliSource(runner=runner), clock=Clock())
    assert poller.poll_once()
    snap = poller.current()
    assert len(snap.jobs) == 27
    assert snap.job(1).priority is None and snap.job(1).time_limit_seconds is None  # unknown, not 0
    assert snap.job(2).priority == 987
    assert any("could not be read" in e.message and e.severity == "warning" for e in snap.errors)
    promtool_check(render(poller, Clock()))


def test_newer_data_parser_is_parsed_best_effort(runner, f2205):
    """A fake v0.0.99: newest shapes (lists, {set,infinite,number}, nested job_resources) plus unknown fields."""
    def mutate(doc):
        doc["meta"] = {"plugin": {"type": "", "data_parser": "data_parser/v0.0.99"},
                       "slurm": {"version": {"major": "27", "minor": "05", "micro": "0"}, "release": "27.05.0", "cluster": "future"}}
        for j in doc["jobs"]:
            j["job_state"] = [j["job_state"], "SOME_NEW_FLAG"]
            for k in ("submit_time", "start_time", "end_time", "eligible_time", "priority", "time_limit", "node_count", "cpus"):
                if isinstance(j.get(k), int):
                    j[k] = {"set": True, "infinite": False, "number": j[k]}
            jr = j.get("job_resources") or {}
            if jr.get("allocated_nodes"):
                j["job_resources"] = {"nodes": {"count": len(jr["allocated_nodes"]), "list": jr["nodes"], "allocation": [
                    {"name": a["nodename"], "cpus": {"count": 7}, "memory": {"allocated": a["memory_allocated"]}, "gpu_slices": 3}
                    for a in jr["allocated_nodes"]]}}
            j["quantum_entanglement"] = {"set": True}
    runner.override("squeue --json", text_result(_mutate_squeue(f2205, mutate)))
    poller = Poller(CliSource(runner=runner), clock=Clock())
    assert poller.poll_once()
    snap = poller.current()
    assert snap.data_parser == "v0.0.99" and snap.cluster == "future"
    job = snap.job(1)
    assert job.state == "RUNNING" and job.state_flags == ("SOME_NEW_FLAG",) and job.gang_size == 4
    assert job.allocations[0].cpus == 7 and job.allocations[0].gpu_indices == tuple(range(8))
    assert job.time_limit_seconds == 86400 and job.submit_time == 1795979846
    warn = [e for e in snap.errors if e.severity == "warning"]
    assert warn and "newer than the newest known" in warn[0].message
    text = render(poller, Clock())
    assert value(text, "gangwatch_slurm_snapshot_errors", source="squeue --json", severity="warning") == 1
    assert value(text, "gangwatch_slurm_info", data_parser="v0.0.99", cluster="future", version="27.05.0", source="cli") == 1


def test_hostile_names_travel_as_data(runner, f2205):
    def mutate(doc):
        for j in doc["jobs"]:
            if j["job_id"] in (1, 14):
                j["name"] = EVIL
                j["comment"] = EVIL
                j["user_name"] = 'mallory"} 1\nfake_metric 1'
    runner.override("squeue --json", text_result(_mutate_squeue(f2205, mutate)))
    clock = Clock()
    poller = Poller(CliSource(runner=runner), clock=clock)
    assert poller.poll_once()
    assert poller.current().job(1).name == EVIL and poller.current().job(14).comment == EVIL
    text = render(poller, clock)
    promtool_check(text)
    names = {n for n, _, _ in samples(text)}
    assert "fake_metric" not in names and all(n.startswith("gangwatch_") for n in names)
    info = {l["jobid"]: l for n, l, _ in samples(text) if n == "gangwatch_slurm_job_info"}
    assert info["1"]["name"] == EVIL[: LABEL_MAX - 1] + "…" and info["1"]["user"] == 'mallory"} 1\nfake_metric 1'
    assert info["14"]["name"].startswith('<script>alert("x")</script>')
    # the JSON snapshot carries the full text, escaped by JSON, never interpreted
    doc = json.loads(Snapshot.from_json(poller.current().to_json()).to_json())
    assert [j["name"] for j in doc["jobs"] if j["job_id"] == 1] == [EVIL]


# ------------------------------------------------------------------------------------ HTTP serving

def test_http_endpoints_and_single_poll_per_interval(runner):
    args = exporter.build_parser().parse_args(["--web.listen-address", "127.0.0.1:0", "--slurm.poll-interval", "0.5"])
    poller, scraper, routes = exporter.build_app(args, runner=runner)
    server = make_server(args.web_listen_address, routes)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        r = httpx.get(base + "/api/v1/snapshot")
        assert r.status_code == 503 and "no successful poll" in r.json()["error"]
        r = httpx.get(base + "/metrics")
        assert r.status_code == 200 and "gangwatch_slurm_up 0" in r.text
        poller.start()
        deadline = time.monotonic() + 5
        while poller.current() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        start = time.monotonic()
        errors: list = []

        def hammer():
            with httpx.Client() as c:
                for _ in range(15):
                    try:
                        assert c.get(base + "/metrics").status_code == 200
                    except Exception as exc:  # collected, asserted below
                        errors.append(exc)
        threads = [threading.Thread(target=hammer) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        assert not errors
        polls = runner.calls.count("squeue --json")
        # 90 scrapes, but squeue ran at most once per 0.5 s interval (+1 for the poll in flight)
        assert polls <= math.ceil((elapsed + (time.monotonic() - start)) / 0.5) + 2 and polls < 90
        r = httpx.get(base + "/api/v1/snapshot?pretty")
        doc = r.json()
        assert r.status_code == 200 and len(doc["jobs"]) == 27 and doc["stale"] is False
        metrics = httpx.get(base + "/metrics").text
        assert value(metrics, "gangwatch_scrape_collector_success", collector="slurm") == 1
        assert value(metrics, "gangwatch_scrape_collector_success", collector="slurm_poll") == 1
        assert httpx.get(base + "/").status_code == 200
    finally:
        poller.stop()
        server.shutdown()
        server.server_close()
        scraper.close()


def test_cli_dispatcher_knows_the_command(capsys):
    from dashboard.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["slurm-exporter", "--help"])
    assert exc.value.code == 0
    assert "--slurm.poll-interval" in capsys.readouterr().out


def test_deploy_files():
    import yaml
    root = Path(__file__).resolve().parent.parent / "deploy"
    cfg = yaml.safe_load((root / "prometheus" / "slurm-exporter.yml").read_text())
    job = cfg["scrape_configs"][0]
    assert job["job_name"] == "gangwatch-slurm" and job["static_configs"][0]["targets"][0].endswith(":9811")
    unit = (root / "systemd" / "gangwatch-slurm-exporter.service").read_text()
    assert "gangwatch slurm-exporter" in unit and "[Install]" in unit
    if shutil.which("promtool"):
        full = dict(cfg, **{"global": {"scrape_interval": "15s"}})
        proc = subprocess.run(["promtool", "check", "config", "/dev/stdin"], input=yaml.safe_dump(full),
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rest_source_versions_and_jwt(fixtures_dir):
    """slurmrestd over HTTP with a JWT: the version is found by ping (newest first), the token and
    user travel as headers, and real v0.0.40 responses (23.11) become a snapshot."""
    v40 = fixtures_dir / "slurm-versions" / "v0.0.40"
    files = {"jobs": "slurmrestd-23.11.10-slurm-jobs.json", "nodes": "slurmrestd-23.11.10-slurm-nodes.json",
             "partitions": "slurmrestd-23.11.10-slurm-partitions.json", "ping": "slurmrestd-23.11.10-slurm-ping.json",
             "reservations": "slurmrestd-23.11.10-slurm-reservations.json", "diag": "slurmrestd-23.11.1-diag-talapas.json"}
    seen: list[tuple[str, str | None, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("x-slurm-user-token"), request.headers.get("x-slurm-user-name")))
        if request.headers.get("x-slurm-user-token") != "t0ken":
            return httpx.Response(401, text="Authentication failure")
        parts = request.url.path.strip("/").split("/")
        if parts[:2] != ["slurm", "v0.0.40"] or parts[2] not in files:
            return httpx.Response(404, text="Unable to find plugin")
        return httpx.Response(200, content=(v40 / files[parts[2]]).read_bytes(), headers={"content-type": "application/json"})

    from collectors.slurm.sources import RestSource
    src = RestSource("http://restd.example:6820", token="t0ken", user="gangwatch", transport=httpx.MockTransport(handler))
    poller = Poller(src, clock=Clock())
    assert poller.poll_once(), poller.statuses
    snap = poller.current()
    assert src.api_version == "v0.0.40" and [p for p, _, _ in seen[:5]] == [f"/slurm/v0.0.4{n}/ping" for n in (4, 3, 2, 1, 0)]
    assert all(tok == "t0ken" and user == "gangwatch" for _, tok, user in seen)
    assert snap.source == "slurmrestd" and snap.data_parser == "v0.0.40" and len(snap.jobs) == 14 and len(snap.nodes) == 6
    assert snap.scheduler is not None and snap.scheduler.jobs_submitted is not None and snap.partitions[0].state == "UP"
    gpu_job = [j for j in snap.jobs if j.state == "RUNNING"]
    assert gpu_job and not snap.stale
    text = exporter.render_once(poller, T0)
    assert value(text, "gangwatch_slurm_command_success", command="rest_jobs") == 1
    promtool_check(text)
    # a bad token: every request fails, nothing crashes, the poll is reported failed
    bad = RestSource("http://restd.example:6820", token="wrong", transport=httpx.MockTransport(handler))
    p2 = Poller(bad, clock=Clock())
    assert not p2.poll_once() and p2.current() is None and p2.statuses["rest_ping"].ok is False
    assert "HTTP 401" in p2.statuses["rest_ping"].error


def test_cli_plan_for_24_11_end_to_end(fixtures_dir):
    """A 24.11 host: the exporter asks for scontrol/sdiag --json; real v0.0.41-v0.0.44 CLI and
    slurmrestd documents stand in for the answers (each names its own data_parser)."""
    v = fixtures_dir / "slurm-versions"
    files = {"squeue --json": "v0.0.42/cli-squeue-u-24.11.6-ozstar.json",
             "scontrol show nodes --json": "v0.0.44/cli-scontrol-show-nodes-25.11.4-ucr-gcp.json",
             "scontrol show partitions --json": "v0.0.42/slurmrestd-24.11.5-slurm-partitions.json",
             "scontrol show reservations --json": "v0.0.41/slurmrestd-24.05.3-slurm-reservations.json",
             "sdiag --json": "v0.0.41/cli-sdiag-24.05.5-rivosinc.json"}
    runner = FileRunner(v, version="slurm 24.11.6", files=files)
    runner.override("sprio", text_result(""))
    runner.override("sshare -l -a -P", text_result("Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS\n"))
    poller = Poller(CliSource(runner=runner), clock=Clock())
    assert poller.poll_once(), poller.statuses
    assert [c for c in runner.calls if "--json" in c] == list(files)
    snap = poller.current()
    assert snap.data_parser == "v0.0.42" and snap.slurm_version == "24.11.6" and snap.cluster == "farnarkle"
    assert len(snap.jobs) == 2 and snap.job(9685110).gang_size == 12 and len(snap.nodes) == 6
    assert snap.reservations[0].name == "training" and snap.scheduler.main_cycles_total == 162
    assert [e for e in snap.errors if e.severity == "error"] == []
    promtool_check(exporter.render_once(poller, T0))
