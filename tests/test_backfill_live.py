"""gangwatch's backfill plan against Slurm's own backfill scheduler, on a real Slurm started for this
module (tests/slurm_cluster.py: munge, slurmctld, 8 `slurmd -N` nodes of 64 CPUs and 8 GPUs,
sched/backfill with bf_interval=5; no slurmdbd, not needed here).

Why a cluster of its own: the exporter's live tests populate a realistic but busy queue; this test
needs a controlled one. It runs after (never beside) that module's cluster: pytest finalises a module
fixture before the next module starts, and this one also uses its own state folder and port range,
so even a concurrent run could not share ports or files with it.

Scenario (partition gpu, gpu[001-008]; bf_resolution is set to 1 s so Slurm's estimates are not
rounded to the default 60 s):
  A  4 nodes x 8 GPUs, --time 10 min, running on 4 nodes     -> frees them at A.start + 600 s
  B  2 nodes x 8 GPUs, --time 20 min, running on 2 nodes     -> 2 nodes (8 GPUs each) stay free
  G  6 nodes x 8 GPUs, --time 30 min, pending: the top job; it can start when A ends (4 + 2 nodes)
  small jobs, lower priority (nice), submitted HELD:
  S1 1 node x 8 GPUs, 5 min  -> fits a free node and ends before the shadow time: startable
  S2 1 node x 8 GPUs, 60 min -> would still hold a node G needs at its shadow time: must wait
  S3 1 node x 4 GPUs, 5 min  -> fits the other free node and ends in time: startable
  S4 1 node x 1 GPU,  60 min -> would delay G: must wait

Order of events, and why: gangwatch must plan from a snapshot taken BEFORE Slurm's backfill cycle
sees the small jobs, otherwise we would only be reading Slurm's decision back. So the small jobs are
submitted held, the snapshot is taken, and the plan is made with those jobs as they will be once
released (the hold removed, priorities below G in nice order: checked against Slurm afterwards).
Then they are released; Slurm's main scheduler does not start them (G, ahead of them in the same
partition, cannot start), so only the backfill scheduler can, within one bf_interval. We wait two
cycles and compare: the jobs gangwatch lists as startable are exactly those Slurm started with
`Scheduler=Backfill`, the others still pend, and G's expected start did not move (nothing delayed it).
gangwatch's shadow time for G must be within one bf_interval of `squeue --start`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time

import pytest

from collectors.runner import CommandRunner
from collectors.slurm.sources import CliSource, Poller
from dashboard.backfill_api import backfill_json
from dashboard.backfill_cli import main as backfill_main, parse_squeue_start
from tests import slurm_cluster

pytestmark = pytest.mark.slurm

_reason = slurm_cluster.unavailable_reason()
if _reason:
    pytestmark = [pytest.mark.slurm, pytest.mark.skip(reason=_reason)]

BF_INTERVAL = 5  # tests/slurm/slurm.conf.in
# name: (nice, GPUs, minutes, gangwatch/Slurm should start it now). Without slurmdbd the priorities
# are small (G's is about 1000, a 1-node job's a few hundred, floored at 1), so a negative nice
# orders the small jobs clearly while keeping them below G.
SMALL = {
    "S1": (-400, 8, 5, True),
    "S2": (-300, 8, 60, False),
    "S3": (-200, 4, 5, True),
    "S4": (-100, 1, 60, False),
}


def _sbatch(c, *args: str) -> int:
    out = c.run("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-e", "/dev/null", "-p", "gpu",
                "--ntasks-per-node=1", *args, "--wrap", "sleep 900")
    return int(out.strip().split(";")[0])


def _state(c, jid: int) -> dict[str, str]:
    text = c.run("scontrol", "-o", "show", "job", str(jid))
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _slurm_start(c, jid: int) -> float | None:
    return parse_squeue_start(c.run("squeue", "-h", "-j", str(jid), "--start", "-o", "%i|%S")).get(str(jid))


def _wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def scenario():
    # Ports apart from the exporter tests' cluster even when CI pins GW_SLURM_PORT_BASE for that one
    # (it uses base+6 .. base+30).
    pinned = os.environ.get("GW_SLURM_PORT_BASE")
    first = int(pinned) + 100 if pinned else 19600
    base = next(b for b in range(first, first + 4000, 200) if slurm_cluster._ports_free(b, range(6, 31)))
    c = slurm_cluster.SlurmCluster(state_dir=f"/tmp/gw-slurm-bf{os.getpid()}", dbd=False, port_base=base)
    try:
        c.start()
        conf = c.dir / "etc" / "slurm.conf"
        conf.write_text(conf.read_text().replace("bf_resolution=60", "bf_resolution=1"))
        c.run("scontrol", "reconfigure")
        jobs = {"A": _sbatch(c, "-N", "4", "--gres=gpu:8", "-c", "64", "--time=10"),
                "B": _sbatch(c, "-N", "2", "--gres=gpu:8", "-c", "64", "--time=20")}
        _wait(lambda: all(_state(c, jobs[k])["JobState"] == "RUNNING" for k in "AB"), 30, "A and B to run")
        jobs["G"] = _sbatch(c, "-N", "6", "--gres=gpu:8", "-c", "64", "--time=30")
        for name, (nice, gpus, minutes, _) in SMALL.items():
            jobs[name] = _sbatch(c, "-H", f"--nice={nice}", "-N", "1", f"--gres=gpu:{gpus}", "-c", str(8 * gpus),
                                 f"--time={minutes}")
        # Slurm's estimate for G exists once a backfill cycle has seen it
        slurm_before = _wait(lambda: _slurm_start(c, jobs["G"]), 4 * BF_INTERVAL, "squeue --start for G")
        poller = Poller(CliSource(runner=CommandRunner(env=c.env), timeout=15, skip=("fairshare",)))
        assert poller.poll_once(), poller.statuses
        snap = poller.current()
        c.run("scontrol", "release", ",".join(str(jobs[k]) for k in SMALL))
        release = time.time()
        time.sleep(2 * BF_INTERVAL + 1)  # two backfill cycles
        after = {k: _state(c, jobs[k]) for k in jobs}
        prios = {k: int(after[k]["Priority"]) for k in ("G", *SMALL)}
        slurm_after = _slurm_start(c, jobs["G"])
        yield dict(cluster=c, jobs=jobs, snap=snap, slurm_before=slurm_before, slurm_after=slurm_after,
                   after=after, prios=prios, release=release)
    finally:
        c.stop()


def _released(snap, jobs, prio_g: int):
    """The snapshot as it will be once the small jobs are released: no hold, priority below G's,
    in nice order (the order Slurm gives them; test_priority_order_as_assumed checks it)."""
    rank = {jobs[k]: i for i, k in enumerate(SMALL, 1)}
    out = []
    for j in snap.jobs:
        if j.job_id in rank:
            j = dataclasses.replace(j, reason="Priority", priority=max(1, prio_g - 100 * rank[j.job_id]))
        out.append(j)
    return dataclasses.replace(snap, jobs=tuple(out))


@pytest.fixture(scope="module")
def plan_doc(scenario):
    snap, jobs = scenario["snap"], scenario["jobs"]
    g = snap.job(jobs["G"])
    assert g.state == "PENDING" and g.priority
    starts = {str(jobs["G"]): scenario["slurm_before"]}
    return backfill_json(_released(snap, jobs, g.priority), snap.taken_at, starts)


def test_priority_order_as_assumed(scenario):
    p = scenario["prios"]
    assert p["G"] > p["S1"] > p["S2"] > p["S3"] > p["S4"] > 0, p


def test_top_job_and_shadow_time_match_squeue_start(scenario, plan_doc):
    part = next(p for p in plan_doc["partitions"] if p["partition"] == "gpu")
    top = part["top_job"]
    assert top["job_id"] == str(scenario["jobs"]["G"])
    a = scenario["snap"].job(scenario["jobs"]["A"])
    assert top["shadow_time"] == a.start_time + 600  # A's end by its time limit
    diff = top["shadow_time"] - scenario["slurm_before"]
    print(f"shadow time: gangwatch {top['shadow_time']:.0f}, squeue --start {scenario['slurm_before']:.0f}, "
          f"difference {diff:+.0f} s")
    assert abs(diff) <= BF_INTERVAL
    assert len(top["nodes"]) == 6


def test_startable_jobs_are_those_slurm_backfills(scenario, plan_doc):
    jobs, after = scenario["jobs"], scenario["after"]
    part = next(p for p in plan_doc["partitions"] if p["partition"] == "gpu")
    ours = {s["job_id"] for s in part["startable"]}
    assert all(s["by"] == "backfill" for s in part["startable"])
    want = {str(jobs[k]) for k, v in SMALL.items() if v[3]}
    assert ours == want
    slurm_backfilled = {str(jobs[k]) for k in SMALL
                        if after[k]["JobState"] == "RUNNING" and after[k].get("Scheduler") == "Backfill"}
    still_pending = {str(jobs[k]) for k in SMALL if after[k]["JobState"] == "PENDING"}
    assert slurm_backfilled == ours, after
    assert still_pending == {str(jobs[k]) for k in SMALL} - ours
    # and none delays the top job: Slurm's own estimate for G did not move later
    assert after["G"]["JobState"] == "PENDING"
    assert scenario["slurm_after"] is not None and scenario["slurm_after"] <= scenario["slurm_before"] + BF_INTERVAL
    # the jobs we say must wait say so: they would delay G
    whys = {w["job_id"]: w for w in part["why"]}
    for k, v in SMALL.items():
        if not v[3]:
            assert whys[str(jobs[k])]["state"] == "waiting"
            assert any(r["code"] == "priority" for r in whys[str(jobs[k])]["reasons"]), whys[str(jobs[k])]


def test_cli_against_live_slurm(scenario, capsys):
    """`gangwatch backfill --slurm-cli` end to end (after the release: the small jobs now run)."""
    c = scenario["cluster"]
    rc = backfill_main(["--slurm-cli", "--format", "table", "--partition", "gpu"], runner=CommandRunner(env=c.env))
    out = capsys.readouterr().out
    assert rc == 0
    g = str(scenario["jobs"]["G"])
    assert f"top job {g}:" in out and "[slurm:" in out
    assert "partition gpu: 8 of 8 nodes usable" in out


def test_what_if_beside_sbatch_test_only(scenario, capsys):
    """S4 (1 GPU, 60 min) waits because it would delay G; our what-if says which shorter --time would
    let it start now, and `sbatch --test-only` (never submits) gives Slurm's will-run answer beside it,
    labelled. The two are not asserted equal: Slurm 22.05's will-run estimate is not its backfill plan
    (here it answers about half an hour later for a job that fits a free node now and ends before G)."""
    c, jobs = scenario["cluster"], scenario["jobs"]
    before = c.run("squeue", "-h", "-o", "%i").split()
    rc = backfill_main(["--slurm-cli", "--slurm-what-if", "--format", "json"], runner=CommandRunner(env=c.env))
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert c.run("squeue", "-h", "-o", "%i").split() == before  # nothing was submitted
    why = next(w for p in doc["partitions"] for w in p["why"] if w["job_id"] == str(jobs["S4"]))
    wi = why["what_if"]
    assert wi is not None and wi["source"] == "gangwatch", why
    assert doc["generated_at"] + wi["time_limit_s"] <= scenario["slurm_after"]  # ends before G's reserved start
    slurm = wi["slurm"]
    print(f"what-if for S4 at {doc['generated_at']:.0f}: gangwatch {wi['message']!r}; "
          f"sbatch --test-only: {slurm}")
    assert slurm["source"] == "slurm" and slurm["time"] is not None and slurm["partition"] == "gpu", slurm
    assert slurm["nodes"]
