"""gangwatch's "startable now" and top-job reservations against the real Slurm's next backfill cycle, on
a few randomised workloads (tests/backfill_agreement.py says how each is built and compared; the
bench bench/bench_backfill_agreement.py runs >= 30). Bounded: about 10 s a workload plus the
cluster's start (slurmdbd when installed, for the QOS limit)."""

from __future__ import annotations

import os

import pytest

from tests import slurm_cluster
from tests.backfill_agreement import Harness, make_workload, report, summary

pytestmark = [pytest.mark.slurm, pytest.mark.backfill_agreement]
_reason = slurm_cluster.unavailable_reason()
if _reason:
    pytestmark.append(pytest.mark.skip(reason=_reason))

SEEDS = range(int(os.environ.get("GW_AGREEMENT_SEED", "100")), int(os.environ.get("GW_AGREEMENT_SEED", "100")) + 4)


@pytest.fixture(scope="module")
def outcomes():
    pinned = os.environ.get("GW_SLURM_PORT_BASE")
    first = int(pinned) + 300 if pinned else 20600
    base = next(b for b in range(first, first + 4000, 200) if slurm_cluster._ports_free(b, range(6, 31)))
    dbd = slurm_cluster.have_dbd()
    c = slurm_cluster.SlurmCluster(state_dir=f"/tmp/gw-slurm-agree{os.getpid()}", dbd=dbd, port_base=base)
    try:
        c.start()
        h = Harness(c, dbd)
        h.setup()
        yield [h.run(make_workload(seed, dbd)) for seed in SEEDS]
    finally:
        c.stop()


def test_startable_now_agrees_with_slurm(outcomes):
    s = summary(outcomes)
    print(report(s))
    assert s["started_by_slurm"] > 0 and s["startable_ours"] > 0  # the workloads exercise backfilling
    assert s["precision"] >= 0.85 and s["recall"] >= 0.85, report(s)


def test_top_job_start_within_bf_resolution(outcomes):
    s = summary(outcomes)
    assert s["workloads_with_top"] >= 2
    assert s["top_within_bf_resolution"] >= 0.75, report(s)
    # every disagreement names the Slurm rule that explains it
    assert all("rule:" in d for d in s["disagreements"])
