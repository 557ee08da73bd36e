"""The Slurm exporter against a real Slurm started for this session (tests/slurm_cluster.py):
munge, slurmctld, 8 `slurmd -N` GPU nodes (gres.conf File= entries), slurmdbd + MariaDB when
installed, and a realistic queue (running gangs, an array, an afterok chain, a never-satisfiable
dependency, user/admin holds, a begin time, a maintenance reservation, a drained and a down node,
a backfilled job, hostile job names). Every fact is checked against what Slurm itself prints.
Skipped, with the reason, where Slurm is not installed or we are not root."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import httpx
import pytest

from collectors.exposition import iter_samples
from collectors.runner import CommandRunner
from collectors.slurm import exporter, hostlist, parse_text
from collectors.slurm.sources import CliSource, Poller, RestSource
from collectors.web import make_server, serve_in_thread
from tests import slurm_cluster

pytestmark = slurm_cluster.pytest_marks()


@pytest.fixture(scope="module")
def cluster():
    yield from slurm_cluster.started(slurm_cluster.SlurmCluster(), populate=True)


@pytest.fixture(scope="module")
def runner(cluster):
    return CommandRunner(env=cluster.env)


@pytest.fixture(scope="module")
def snap(cluster, runner):
    poller = Poller(CliSource(runner=runner, timeout=15))
    assert poller.poll_once(), poller.statuses
    return poller.current()


def test_snapshot_is_clean(snap, cluster):
    assert snap.data_parser == "v0.0.38" or snap.data_parser.startswith("v0.0.")
    assert [e for e in snap.errors if e.severity == "error"] == []
    assert len(snap.nodes) == 8 and {p.name for p in snap.partitions} == {"gpu", "debug", "long"}


def test_jobs_agree_with_squeue(snap, cluster):
    out = cluster.run("squeue", "-h", "-t", "all", "-o", "%A|%T|%D|%N|%P|%u|%a|%Q")
    seen = {}
    for line in out.splitlines():
        jid, state, nnodes, nodes, part, user, account, prio = line.split("|")
        seen[int(jid)] = (state, int(nnodes), tuple(hostlist.expand(nodes)), part, user, account, int(prio))
    ours = {j.job_id: j for j in snap.jobs}
    assert set(ours) == set(seen)
    for jid, (state, nnodes, nodes, part, user, account, prio) in seen.items():
        j = ours[jid]
        assert (j.state, j.nodes, j.partition, j.user, j.account) == (state, nodes, part, user, account), jid
        if state in ("RUNNING", "PENDING"):
            assert j.gang_size == nnodes, jid
        if state == "PENDING":
            assert j.priority == prio or abs(j.priority - prio) < 50, jid  # priorities recalculated each minute


def test_reasons_holds_dependencies(snap, cluster):
    J = cluster.jobs
    by = {j.job_id: j for j in snap.jobs}
    out = cluster.run("squeue", "-h", "-t", "PD", "-o", "%A|%r|%E")
    # these three move with every backfill pass (recipe pitfall 14); the others are fixed facts
    volatile = {"Resources", "Priority", "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"}
    for line in out.splitlines():
        jid, reason, dep = line.split("|", 2)
        j = by[int(jid)]
        assert j.reason == reason or {j.reason, reason} <= volatile, (jid, j.reason, reason)
        assert j.dependency == ("" if dep == "(null)" else dep)
    assert by[J["J_TRAIN"]].dependencies[0].job_id == str(J["J_PREP"]) and by[J["J_TRAIN"]].reason == "Dependency"
    assert by[J["J_EVAL"]].dependencies[0].job_id == str(J["J_TRAIN"])
    never = by[J["J_NEVER"]]
    assert never.reason == "DependencyNeverSatisfied" and never.dependencies[0].state == "failed"
    assert by[J["J_HOLDU"]].reason == "JobHeldUser" and by[J["J_HOLDA"]].reason == "JobHeldAdmin"
    begin = by[J["J_BEGIN"]]
    assert begin.reason == "BeginTime" and begin.eligible_time > time.time() + 5 * 3600
    assert by[J["J_BF"]].state == "RUNNING"
    reasons = {j.reason for j in snap.jobs if j.state == "PENDING"}
    assert {"Resources", "Priority"} & reasons  # which of them depends on timing (recipe pitfall 14)
    arr = [j for j in snap.jobs if j.array_job_id == J["J_ARR"]]
    assert sum(j.state == "RUNNING" for j in arr) == 4 and any(j.array_task_string for j in arr)


def test_allocations_agree_with_scontrol(snap, cluster):
    """Per-node CPUs, memory and GPU indices from squeue --json vs `scontrol show job -d`."""
    pat = re.compile(r"Nodes=(\S+) CPU_IDs=(\S+) Mem=(\d+) GRES=(\S*)")
    for j in snap.jobs:
        if j.state != "RUNNING":
            continue
        text = cluster.run("scontrol", "-o", "show", "job", "-d", str(j.job_id))
        want = {}
        for nodes, cpu_ids, mem, gres in pat.findall(text):
            idx = re.search(r"IDX:([0-9,-]+)", gres)
            cpus = sum((int(b) - int(a) + 1) if b else 1 for a, _, b in (p.partition("-") for p in cpu_ids.split(",")))
            for n in hostlist.expand(nodes):
                want[n] = (cpus, int(mem) * 2**20, tuple(hostlist.expand(f"x[{idx.group(1)}]")) if idx else ())
        got = {a.node: (a.cpus, a.memory_bytes, tuple(f"x{i}" for i in a.gpu_indices)) for a in j.allocations}
        assert got == want, j.job_id
    gang = snap.job(cluster.jobs["J_PRE"])
    assert gang.gang_size == 4 and gang.gpus == 32 and all(a.gpus == 8 for a in gang.allocations)


def test_nodes_agree_with_sinfo_and_scontrol(snap, cluster):
    out = cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N|%T|%E")
    ours = {n.name: n for n in snap.nodes}
    for line in out.splitlines():
        name, state, reason = line.split("|", 2)
        n = ours[name]
        assert n.state_label.rstrip("*") == state.rstrip("*").replace("allocated", "allocated"), (name, n.state_label, state)
        assert n.reason == ("" if reason == "none" else reason)
    assert ours["gpu006"].drain and ours["gpu006"].reason.startswith("Xid 79")
    assert ours["gpu008"].down and ours["gpu008"].reason == "NHC: ib0 link down"
    text = cluster.run("scontrol", "-o", "show", "node", "-d")
    matches = list(re.finditer(r"NodeName=(\S+) .*?CPUAlloc=(\d+) .*?GresUsed=gpu:\w+:(\d+)", text))
    assert len(matches) == 8
    for m in matches:
        n = ours[m.group(1)]
        assert (n.cpus_allocated, n.gpus_allocated) == (int(m.group(2)), int(m.group(3))), m.group(1)


def test_reservations_and_sdiag(snap, cluster):
    out = cluster.run("scontrol", "-o", "show", "reservation")
    names = re.findall(r"ReservationName=(\S+)", out)
    assert sorted(r.name for r in snap.reservations) == sorted(names) == ["maint-gpu007", "vision-demo"]
    maint = next(r for r in snap.reservations if r.name == "maint-gpu007")
    assert maint.nodes == ("gpu007",) and "MAINT" in maint.flags and maint.end_time - maint.start_time == 4 * 3600
    sdiag = cluster.run("sdiag")
    bf = int(re.search(r"Total backfilled jobs \(since last slurm start\): (\d+)", sdiag).group(1))
    assert snap.scheduler.backfill_jobs_total == bf >= 1
    if cluster.dbd:
        accounts = {ln.split("|")[0].strip() for ln in cluster.run("sshare", "-a", "-P", "-n").splitlines()}
        assert {r.account for r in snap.fairshare} == accounts >= {"ml-research", "vision", "infra"}


def test_text_forms_agree_with_json(snap, cluster):
    """`scontrol -o show job -d` parsed by our text parser vs squeue --json, on the same cluster.
    The job whose name holds a newline breaks scontrol's one-line format: exactly why JSON is used."""
    text_jobs = {j.job_id: j for j in parse_text.parse_scontrol_jobs(cluster.run("scontrol", "-o", "show", "job", "-d"))}
    evil = cluster.jobs["J_EVIL"]
    for j in snap.jobs:
        if j.job_id == evil or j.state not in ("RUNNING", "PENDING"):
            continue
        t = text_jobs[j.job_id]
        assert (t.state, t.nodes, t.user, t.name, t.partition, t.gang_size, t.gpus) == \
            (j.state, j.nodes, j.user, j.name, j.partition, j.gang_size, j.gpus), j.job_id
        assert [(a.node, a.cpus, a.memory_bytes, a.gpu_indices) for a in t.allocations] == \
            [(a.node, a.cpus, a.memory_bytes, a.gpu_indices) for a in j.allocations], j.job_id
    assert text_jobs[cluster.jobs["J_BF"]].scheduler == "Backfill"  # the job backfill started
    nodes = {n.name: n for n in parse_text.parse_scontrol_nodes(cluster.run("scontrol", "-o", "show", "node", "-d"))}
    assert {k: (n.state, n.state_flags, n.gpus_allocated) for k, n in nodes.items()} == \
        {n.name: (n.state, n.state_flags, n.gpus_allocated) for n in snap.nodes}


def test_hostile_names_live(snap, cluster):
    evil = snap.job(cluster.jobs["J_EVIL"])
    assert evil.name == '<script>alert("x")</script> \'q\' "dq" \\back\nnewline {a="b"} Evil=1'
    assert evil.comment == "<b>" * 250
    assert len(snap.job(cluster.jobs["J_LONG"]).name) == 1000


def test_exporter_http_and_promtool(cluster, runner):
    args = exporter.build_parser().parse_args(["--web.listen-address", "127.0.0.1:0", "--slurm.poll-interval", "60"])
    poller, scraper, routes = exporter.build_app(args, runner=runner)
    assert poller.poll_once()
    server = make_server(args.web_listen_address, routes)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        text = httpx.get(base + "/metrics").text
        snap_doc = httpx.get(base + "/api/v1/snapshot").json()
    finally:
        server.shutdown()
        server.server_close()
        scraper.close()
    if shutil.which("promtool"):
        proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    s = list(iter_samples(text))
    get = lambda name, **lb: [v for n, l, v in s if n == name and all(l.get(k) == str(x) for k, x in lb.items())]  # noqa: E731
    squeue_states = cluster.run("squeue", "-h", "-t", "all", "-o", "%T").split()
    for state in set(squeue_states):
        assert sum(get("gangwatch_slurm_jobs", state=state)) == squeue_states.count(state)
    pre = cluster.jobs["J_PRE"]
    assert sorted(l["node"] for n, l, v in s if n == "gangwatch_slurm_job_node_gpus" and l["jobid"] == str(pre) and v == 8) == \
        ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert get("gangwatch_slurm_partition_gpus", partition="gpu", state="down") == [8]
    assert get("gangwatch_slurm_partition_gpus", partition="gpu", state="drained")[0] > 0
    assert sum(v for n, l, v in s if n == "gangwatch_slurm_partition_gpus" and l["partition"] == "gpu") == 64
    assert get("gangwatch_slurm_up") == [1]
    assert len(snap_doc["jobs"]) == len(squeue_states)
    # no TopologyPlugin here: `scontrol show topology` says so, which is no failure and no map
    assert get("gangwatch_slurm_command_success", command="scontrol_topology") == [1]
    assert not get("gangwatch_slurm_node_switch_info") and snap_doc["switches"] == []


def test_slurmrestd_unix_socket_agrees_with_cli(cluster, snap):
    if shutil.which("slurmrestd") is None:
        pytest.skip("slurmrestd not installed")
    sock = cluster.start_slurmrestd()
    src = RestSource(f"unix:{sock}", api_version="auto", timeout=10)
    try:
        poller = Poller(src)
        assert poller.poll_once(), poller.statuses
        rest = poller.current()
    finally:
        src.close()
    assert src.api_version == "v0.0.38" and rest.source == "slurmrestd"
    a = {j.job_id: (j.state, j.nodes, j.allocations, j.gpus, j.name) for j in snap.jobs if j.state in ("RUNNING", "PENDING")}
    b = {j.job_id: (j.state, j.nodes, j.allocations, j.gpus, j.name) for j in rest.jobs if j.state in ("RUNNING", "PENDING")}
    assert a == b
    assert {n.name: (n.state, n.state_flags, n.gpus_allocated) for n in snap.nodes} == \
        {n.name: (n.state, n.state_flags, n.gpus_allocated) for n in rest.nodes}
    assert [r.name for r in rest.reservations] == [r.name for r in snap.reservations]
    assert rest.scheduler is not None and {p.name for p in rest.partitions} == {"gpu", "debug", "long"}


def test_slurmrestd_jwt_over_http(cluster, snap):
    if shutil.which("slurmrestd") is None or not cluster.jwt:
        pytest.skip("slurmrestd or auth/jwt (slurm-wlm-jwt-plugin) not installed")
    url, token = cluster.start_slurmrestd_jwt()
    src = RestSource(url, token=token, user="alice", timeout=10)
    bad = RestSource(url, token="not-a-token", user="alice", timeout=10)
    try:
        poller = Poller(src)
        assert poller.poll_once(), poller.statuses
        assert {j.job_id for j in poller.current().jobs} == {j.job_id for j in snap.jobs}
        refused = Poller(bad)
        assert not refused.poll_once() and refused.current() is None
        assert not refused.health()["statuses"]["rest_ping"].ok
    finally:
        src.close()
        bad.close()


def failed_poll_keeps(poller: Poller, good, limit: float):
    """One poll that must fail within `limit` seconds and keep `good`'s data, served stale;
    -> (the stale snapshot, the /metrics text then)."""
    start = time.monotonic()
    assert not poller.poll_once()
    assert time.monotonic() - start < limit
    stale = poller.current()
    assert stale.stale and stale.taken_at == good.taken_at and len(stale.jobs) == len(good.jobs)
    return stale, exporter.render_once(poller, time.time())


def test_frozen_slurmctld_times_out_and_recovers(cluster, runner):
    """SIGSTOP slurmctld: the commands hang, are killed at the deadline, the last good snapshot is
    served stale with its age; SIGCONT and the next poll is fresh again. Runs last in this module."""
    poller = Poller(CliSource(runner=runner, timeout=1.5))
    assert poller.poll_once()
    good = poller.current()
    cluster.freeze_ctld()
    try:
        _, text = failed_poll_keeps(poller, good, 4)  # one 1.5 s deadline for all eight commands, not eight
        assert poller.statuses["squeue"].error.startswith("timed out")
        assert "gangwatch_slurm_up 0" in text and 'gangwatch_slurm_command_success{command="squeue"} 0' in text
    finally:
        cluster.thaw_ctld()
    for _ in range(20):
        if poller.poll_once():
            break
        time.sleep(0.5)
    assert not poller.current().stale


def test_killed_slurmctld_is_an_outage_not_an_empty_cluster(cluster, runner, capsys):
    """SIGKILL slurmctld: 22.05's squeue/sinfo --json exit 0 with `errors` and no jobs/nodes after
    ~9 s each. The poll fails within its one deadline, the last good snapshot is kept with the
    outage's start, `backfill --slurm-cli` exits 2; a restarted slurmctld brings fresh data back.
    Runs last in this module (it restarts the controller)."""
    from dashboard import backfill_cli

    poller = Poller(CliSource(runner=runner, timeout=12))
    assert poller.poll_once()
    good = poller.current()
    cluster.kill_ctld()
    try:
        stale, text = failed_poll_keeps(poller, good, 14)
        assert stale.failing_since is not None and stale.failing_since >= good.taken_at
        assert any(e.source == "squeue --json" and e.message.startswith("slurm reported:") for e in stale.errors)
        assert "gangwatch_slurm_up 0" in text and "gangwatch_slurm_poll_failures_total 1" in text
        assert backfill_cli.main(["--slurm-cli", "--timeout", "12"], runner=runner) == 2
        assert "cannot read Slurm" in capsys.readouterr().err
    finally:
        cluster.start_ctld()
    assert poller.poll_once(), poller.health()["errors"]
    assert not poller.current().stale and poller.current().failing_since is None
    assert {j.job_id for j in poller.current().jobs} >= {j.job_id for j in good.jobs if j.state == "RUNNING"}
