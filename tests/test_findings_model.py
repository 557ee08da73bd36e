"""One findings model: `serve`'s /api/v1/findings, the demo and `gangwatch diagnose --format json`
emit one JSON shape (docs/findings.schema.json, `schema_version` 1), and `/metrics` exports the
diagnosis' own records (culprit kinds, confidence) rather than a lossy copy."""

from __future__ import annotations

import json

import pytest

from dashboard import datasource
from dashboard.analysis import diagnose, findings
from dashboard.app import build_app
from dashboard.datasource import SimDatasource
from tests.conftest import REPO

SCHEMA = json.loads((REPO / "docs" / "findings.schema.json").read_text())
NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def validate():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(SCHEMA)

    def check(doc: dict) -> dict:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, errors[:5]
        return doc

    return check


@pytest.fixture(scope="module")
def sim_ds():
    from dashboard.analysis.sim import SimConfig, Simulation

    sim = Simulation(SimConfig(nodes=8, seed=2, start=NOW - 1200, history_seconds=1200,
                               faults="nccl_hang@2m+30m,ost_slow@3m+30m"))
    return SimDatasource(sim)


def test_one_set_of_states():
    assert findings.STATES == tuple(s.value for s in findings.State)
    assert diagnose.STATES is findings.STATES and diagnose.Verdict is findings.Verdict
    assert datasource.FLAGGED is findings.STALL_STATES
    # the pages read the same records the diagnosis writes: no second Verdict to convert into
    assert (datasource.Verdict, datasource.Evidence, datasource.Incident) == (findings.Verdict, findings.Evidence,
                                                                              findings.Incident)
    assert not hasattr(datasource, "STATES")  # the copy that had drifted (no "suspended") is gone
    assert findings.STALL_STATES < set(findings.STATES)
    assert findings.State("hung") == "hung" and f"{findings.State.HUNG}" == "hung"
    assert SCHEMA["$defs"]["state"]["enum"] == list(findings.STATES)


def test_serve_serves_the_diagnosis_record_itself(sim_ds, validate):
    f = sim_ds.findings()
    assert f.source == "diagnosis" and f.diagnosis is not None
    doc = build_app(sim_ds).server.test_client().get("/api/v1/findings").json
    assert validate(doc) == json.loads(json.dumps(f.diagnosis.to_json()))
    assert doc["schema_version"] == findings.SCHEMA_VERSION
    assert {v["state"] for v in doc["verdicts"]} & findings.STALL_STATES, "the scenario must contain faults"


def test_metrics_keep_what_the_diagnosis_said(sim_ds):
    from collectors.exposition import iter_samples

    diag = sim_ds.findings().diagnosis
    text = build_app(sim_ds).server.test_client().get("/metrics").get_data(as_text=True)
    kinds = {lbl["culprit"]: lbl["culprit_kind"] for n, lbl, _ in iter_samples(text)
             if n == "gangwatch_incident_gpu_hours_lost"}
    assert kinds and kinds == {i.culprit: i.culprit_kind for i in diag.incidents} and all(kinds.values())
    conf = {lbl["jobid"]: v for n, lbl, v in iter_samples(text) if n == "gangwatch_job_verdict_confidence_ratio"}
    assert conf == {v.jobid: round(v.confidence, 3) for v in diag.verdicts
                    if v.state not in ("insufficient_data", "suspended")}


def test_ground_truth_and_empty_findings_have_the_same_shape(sim_ds, validate):
    truth = validate(sim_ds._truth_findings().as_diagnosis().to_json())
    assert truth["source"] == "simulator ground truth" and truth["verdicts"]
    assert all(v["culprit_kind"] == "" and v["slurm_state"] == "RUNNING" for v in truth["verdicts"])
    empty = validate(datasource.Findings(NOW, "none").as_diagnosis().to_json())
    assert empty["verdicts"] == [] and empty["generated_at"] == NOW


def test_unknown_numbers_stay_unknown(validate):
    """A verdict from a source that did not know its confidence or cost says null, and /metrics
    leaves those series out, rather than 0."""
    from collectors.exposition import encode
    from dashboard.findings_api import findings_families

    f = datasource.Findings(NOW, "diagnosis", (datasource.Verdict("7", ("n1",), None, "hung", None, NOW - 60, gpu_hours_lost=None),))
    doc = validate(f.as_diagnosis().to_json())
    assert (doc["verdicts"][0]["confidence"], doc["verdicts"][0]["gpus"], doc["verdicts"][0]["gpu_hours_lost"]) \
        == (None, None, None)
    text = encode(findings_families(f.as_diagnosis()))
    assert "gangwatch_job_stalled{" in text and "gangwatch_job_verdict_confidence_ratio{" not in text
    assert "gangwatch_job_gpu_hours_lost_total{" not in text


def test_cli_prints_the_same_shape(tmp_path, capsys, validate):
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.diagnose_cli import main
    from dashboard.sources.simulated import BundleWriter

    sim = Simulation(SimConfig(nodes=6, seed=4, prefill=False, nodes_per_leaf=3, faults="nccl_hang@4m+20m"))
    writer = BundleWriter(sim)
    writer.capture()
    for _ in range(50):
        sim.step()
        writer.capture()
    writer.write(str(tmp_path))
    assert main(["--bundle", str(tmp_path), "--format", "json"]) == 0
    doc = validate(json.loads(capsys.readouterr().out))
    assert doc["source"] == "diagnosis" and doc["verdicts"]
