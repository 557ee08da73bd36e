"""serve's store of the latest link probe per job (dashboard/probe_store.py): bounded, expiring
with the job, and riding on the job's verdict in the findings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from collectors.slurm.model import Snapshot
from dashboard.analysis.linkprobe import PairResult
from dashboard.probe_store import ProbeStore, WithProbes
from tests.support.dashboard_fake import NODES, NOW, datasource

REPO = Path(__file__).resolve().parents[1]
PAIR = f"{NODES[0]}->{NODES[1]}"


class Clock:
    def __init__(self, t: float = NOW):
        self.t = t

    def __call__(self) -> float:
        return self.t


def measured(bps: float = 9e9) -> tuple[PairResult, ...]:
    return (PairResult(NODES[0], NODES[1], "iperf3", bits_per_second=bps, latency_seconds=4e-5),)


def signals(findings, jobid: str) -> list[str]:
    return [e.signal for e in findings.verdict(jobid).evidence]


def test_the_latest_probe_rides_on_the_verdict_and_in_the_findings_json():
    clock = Clock()
    store = ProbeStore(clock=clock)
    ds = WithProbes(datasource(), store)
    assert signals(ds.findings(), "4001") == ["io_pressure", "io_pressure"]
    store.put("4001", measured(1e9))
    clock.t += 30
    store.put("4001", measured(9e9))  # the latest replaces the earlier one
    f = ds.findings()
    assert signals(f, "4001") == ["io_pressure", "io_pressure", "link_probe_bandwidth_bits_per_second",
                                  "link_probe_latency_seconds"]
    assert signals(f, "4002") == []  # other jobs untouched
    doc = json.loads(json.dumps(f.as_diagnosis().to_json()))
    ev = next(v for v in doc["verdicts"] if v["jobid"] == "4001")["evidence"]
    assert (ev[2]["node"], ev[2]["value"], ev[2]["at"]) == (PAIR, 9e9, NOW + 30)
    assert "at" not in ev[0]  # the diagnosis' own evidence has no probe time
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json.loads((REPO / "docs" / "findings.schema.json").read_text())).validate(doc)


def test_a_probe_expires_with_its_job_and_with_age():
    clock = Clock()
    store = ProbeStore(max_age=3600, clock=clock)
    inner = datasource()
    ds = WithProbes(inner, store)
    store.put("4001", measured())
    store.put("4002", measured())
    store.put("9999", measured())  # a job the snapshot does not hold as running
    ds.findings()
    assert (store.get("4001") is not None, store.get("4002") is not None, store.get("9999")) == (True, True, None)
    snap = inner.snapshot()
    ended = Snapshot(taken_at=snap.taken_at, source=snap.source,
                     jobs=tuple(replace(j, state="COMPLETED") if j.job_id == 4001 else j for j in snap.jobs))
    inner._snap = ended
    assert signals(ds.findings(), "4001") == ["io_pressure", "io_pressure"] and store.get("4001") is None
    clock.t += 3601
    ds.findings()
    assert len(store) == 0  # 4002 still runs, but its probe is past max_age


def test_no_snapshot_keeps_the_probes_and_the_store_is_bounded():
    store = ProbeStore(max_jobs=3, clock=Clock())
    for j in range(5):
        store.put(str(j), measured())
    assert [store.get(str(j)) is not None for j in range(5)] == [False, False, True, True, True]
    store.expire(None)  # the snapshot is unknown: nothing is known to have ended
    assert len(store) == 3


def test_serves_probe_endpoint_says_why_it_will_not_probe():
    """POST /api/v1/probe on a serve without --probe.agent-url, and while another probe runs."""
    from dashboard import probe_button
    from dashboard.app import build_app
    from dashboard.probe_cli import ProbeSettings

    off = build_app(datasource()).server.test_client()
    r = off.post("/api/v1/probe?jobid=4001")
    assert r.status_code == 404 and "not configured" in r.get_json()["error"]
    on = build_app(datasource(), probe=ProbeSettings(agents={NODES[0]: "http://127.0.0.1:9", NODES[1]: "http://127.0.0.1:9"}))
    client = on.server.test_client()
    assert client.post("/api/v1/probe?jobid=9999").status_code == 409  # not in the queue
    with probe_button._BUSY:  # a probe already running from this serve: a flood costs one answer each
        r = client.post("/api/v1/probe?jobid=4001")
    assert r.status_code == 429 and "one at a time" in r.get_json()["error"]
