"""The plan's deadline (issue 14): a Slurm-mode plan of a long queue on a large cluster can take the
planner minutes, so serve plans with a deadline; past it the remaining jobs get reason
`not_planned_in_time` and no estimate, the API counts them and the Queue page says so. Real planner
runs on the benchmark's snapshot (bench/bench_planner.py), no mocks."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from dashboard.analysis.planner import plan
from dashboard.analysis.planner_model import BackfillConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_planner import snapshot  # noqa: E402 - the benchmark's seeded 4,096-node cluster

from tests.test_backfill import NOW_2205, snap2205  # noqa: E402,F401 - the 22.05 snapshot fixture


def _codes(doc) -> dict[str, list[str]]:
    return {w["job_id"]: [r["code"] for r in w["reasons"]] for p in doc["partitions"] for w in p["why"]}


def test_slurm_mode_plan_of_a_long_queue_stops_at_its_deadline():
    # without a deadline this plan takes ~100 s of CPU (1,200 jobs, Slurm's defaults, 4,096 nodes)
    inp = dataclasses.replace(snapshot(n_pending=1200), config=BackfillConfig())
    began = time.monotonic()
    got = plan(inp, deadline_s=0.5)
    doc = got.to_json()
    took = time.monotonic() - began
    # plan and rows get the deadline each, plus one job's search; a loaded 2-core machine is slow
    assert took < 15, took
    late = [j for j, codes in _codes(doc).items() if "not_planned_in_time" in codes]
    assert late and doc["deadline"] == {"deadline_s": 0.5, "not_planned_in_time": len(late)}
    assert got.not_planned_in_time == len(late)
    first = inp.pending[0].job_id  # planned before the deadline: a real answer
    assert "not_planned_in_time" not in _codes(doc)[first]
    for p in doc["partitions"]:
        for w in p["why"]:
            if "not_planned_in_time" in [r["code"] for r in w["reasons"]]:
                assert w["expected_start"]["time"] is None and w["state"] == "waiting"


def test_a_deadline_that_is_not_hit_changes_nothing():
    inp = dataclasses.replace(snapshot(n_pending=40), config=BackfillConfig())
    bounded, full = plan(inp, deadline_s=600).to_json(), plan(inp).to_json()
    assert bounded.pop("deadline") == {"deadline_s": 600, "not_planned_in_time": 0}
    bounded.pop("generated_at"), full.pop("generated_at")
    assert bounded == full


def test_queue_page_says_the_plan_is_incomplete(snap2205):  # noqa: F811
    from dashboard.datasource import Findings, MemoryDatasource
    from dashboard.pages import queue
    from dashboard.ui import Ctx

    def text(c):
        ch = getattr(c, "children", None)
        kids = ch if isinstance(ch, (list, tuple)) else [ch] if ch is not None else []
        return " ".join([c] if isinstance(c, str) else [text(x) for x in kids])

    ds = MemoryDatasource(snap2205, Findings(NOW_2205, "none"), now=NOW_2205)
    assert "Plan incomplete" not in text(queue.plan_block(ds, Ctx(lambda p: p)))
    ds = MemoryDatasource(snap2205, Findings(NOW_2205, "none"), now=NOW_2205)
    ds.plan_deadline_s = 0.0  # everything after the start is past it
    page = text(queue.plan_block(ds, Ctx(lambda p: p)))
    assert ds.backfill().not_planned_in_time > 0
    assert f"Plan incomplete: {ds.backfill().not_planned_in_time} pending job(s) were not planned" in page
