"""rules/: Prometheus recording and alerting rules, their promtool unit tests, the Alertmanager and
Prometheus example configurations, and the runbooks, checked offline with Debian's promtool 2.42
and amtool 0.25 (`promtool check rules --lint-fatal`, `promtool test rules`, `amtool check-config`).

Beyond what promtool checks: every alert has a severity, scope, culprit, summary, description and
a runbook_url pointing at a runbook page that exists and has the four sections; every alert has a
unit test that fires and one that expects silence; every metric a rule reads exists (golden output,
recording rule, collector source, or rules/expected_metrics.yml, which is reported); recording
rules follow `level:metric:operations`; no rule selects a per-GPU, per-port or per-Lustre-import
family except the sparse selections listed (the cost design in rules/recording.yml's header).
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO, which
import promql_parser as pp

from tests.support.promql_names import (GOLDEN_GLOBS, alerting_rules, known_metrics, metric_names,
                                        recording_rules, rule_groups)

RULES = REPO / "rules"
RULE_FILES = ["recording.yml", "alerts.yml"]
UNIT_TESTS = sorted((RULES / "tests").glob("*.yml"))
RUNBOOK_BASE = "https://github.com/gangwatch/gangwatch/blob/main/rules/runbooks/"
SEVERITIES = {"critical", "warning"}
SCOPES = {"job", "gpu", "network", "filesystem", "node-down", "node", "queue", "collector", "slurm"}
RECORD_NAME = re.compile(r"^[a-z_]+:gangwatch_[a-z0-9_]+:[a-z0-9_]+$")

needs_promtool = pytest.mark.skipif(not which("promtool"), reason="promtool (Debian package prometheus) not installed")
needs_amtool = pytest.mark.skipif(not which("amtool"), reason="amtool (Debian package prometheus-alertmanager) not installed")


def run(*cmd: str) -> subprocess.CompletedProcess:
    # promtool prints headers on stdout and failures on stderr: keep both for the assertion message.
    return subprocess.run(cmd, cwd=RULES, capture_output=True, text=True, timeout=60)


@needs_promtool
def test_lint_fatal_catches_duplicates(tmp_path):
    """Debian's promtool 2.42 has --lint-fatal: a duplicate rule then fails (rc 3), where plain
    `check rules` reports it and still exits 0."""
    dup = tmp_path / "dup.yml"
    rule = {"record": "job:up:sum", "expr": "sum by (job) (up)"}
    dup.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule, rule]}]}))
    assert run("promtool", "check", "rules", str(dup)).returncode == 0
    assert run("promtool", "check", "rules", "--lint-fatal", str(dup)).returncode == 3


@needs_promtool
def test_promtool_check_rules_lint_fatal():
    r = run("promtool", "check", "rules", "--lint=all", "--lint-fatal", *RULE_FILES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(RULE_FILES)
    assert "lint" not in (r.stdout + r.stderr).lower()


@needs_promtool
def test_promtool_unit_tests():
    assert UNIT_TESTS, "no promtool unit tests under rules/tests/"
    r = run("promtool", "test", "rules", *map(str, UNIT_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(UNIT_TESTS)


@needs_promtool
def test_promtool_check_example_prometheus_config():
    r = run("promtool", "check", "config", "prometheus.example.yml")
    assert r.returncode == 0, r.stdout + r.stderr


@needs_amtool
def test_amtool_check_config():
    r = run("amtool", "check-config", "alertmanager.example.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@needs_amtool
@pytest.mark.parametrize("labels, receivers", [
    (["severity=critical", "scope=filesystem", "alertname=LustreTargetUnreachable"], {"ops-pager", "storage-team"}),
    (["severity=warning", "scope=queue", "alertname=GangJobStarved"], {"scheduler-team"}),
    (["severity=warning", "scope=job", "alertname=GangJobStalled", "cause=straggler"], {"ops-default"}),
    (["severity=warning", "scope=gpu", "alertname=GPURowRemapPending"], {"hardware-team"}),
])
def test_alertmanager_routes(labels, receivers):
    r = run("amtool", "config", "routes", "test", "--config.file=alertmanager.example.yml", *labels)
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(r.stdout.split()[0].split(",")) == receivers, r.stdout


def test_alertmanager_inhibitions_use_labels_the_alerts_have():
    """Every label an inhibit rule compares (`equal`) or matches on is one the alerts can carry."""
    conf = yaml.safe_load((RULES / "alertmanager.example.yml").read_text())
    alert_labels = {"alertname", "cluster", "jobid", "node"}
    for rule in alerting_rules():
        alert_labels |= set(rule["labels"])
    alert_labels |= {"cause", "partition", "incident"}  # from the series (serve's findings, Slurm)
    for inhibit in conf["inhibit_rules"]:
        for matcher in inhibit["source_matchers"] + inhibit["target_matchers"]:
            assert re.match(r"^(\w+)", matcher).group(1) in alert_labels, matcher
        assert set(inhibit["equal"]) <= alert_labels, inhibit


ALERTS = alerting_rules()


def test_alert_names_are_unique():
    names = [r["alert"] for r in ALERTS]
    assert len(names) == len(set(names))
    assert len(names) >= 20


@pytest.mark.parametrize("rule", ALERTS, ids=lambda r: r["alert"])
def test_alert_has_labels_annotations_and_runbook(rule):
    name = rule["alert"]
    labels, ann = rule["labels"], rule["annotations"]
    severity = labels["severity"]
    # A templated severity must still only produce the known values.
    assert set(re.findall(r"\b(critical|warning|info)\b", severity)) <= SEVERITIES and (
        severity in SEVERITIES or "{{" in severity), severity
    assert labels["scope"] in SCOPES
    assert labels["culprit"]
    assert ann["summary"].strip() and ann["description"].strip()
    assert len(ann["description"]) > len(ann["summary"])
    assert ann["runbook_url"] == f"{RUNBOOK_BASE}{name}.md"
    page = RULES / "runbooks" / f"{name}.md"
    assert page.is_file(), f"missing runbook {page}"
    text = page.read_text()
    assert text.startswith(f"# {name}\n")
    for section in ("**Meaning.**", "**Impact.**", "**Diagnosis.**", "**Mitigation.**"):
        assert section in text, f"{page.name} lacks {section}"
    assert "`" in text.split("**Diagnosis.**")[1], f"{page.name}: diagnosis without commands"


def test_no_orphan_runbooks():
    pages = {p.stem for p in (RULES / "runbooks").glob("*.md")}
    assert pages == {r["alert"] for r in ALERTS}


def _unit_cases() -> dict[str, dict[str, int]]:
    cases: dict[str, dict[str, int]] = {}
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                kind = "fires" if case.get("exp_alerts") else "silent"
                c = cases.setdefault(case["alertname"], {"fires": 0, "silent": 0})
                c[kind] += 1
    return cases


@pytest.mark.parametrize("name", [r["alert"] for r in ALERTS])
def test_every_alert_has_firing_and_silent_unit_tests(name):
    cases = _unit_cases().get(name, {"fires": 0, "silent": 0})
    assert cases["fires"] >= 1, f"{name}: no promtool case where it fires"
    assert cases["silent"] >= 1, f"{name}: no promtool case where it stays silent"


def test_unit_tests_evaluate_recording_groups_first():
    """promtool evaluates groups in random order unless told: without this, alerts built on
    recording rules lag one step at random and the tests flake."""
    recording = [g["name"] for g in rule_groups("recording.yml")]
    for path in UNIT_TESTS:
        assert yaml.safe_load(path.read_text()).get("group_eval_order") == recording, path.name


def test_recording_rule_names():
    rules = recording_rules()
    for name in rules:
        assert RECORD_NAME.match(name), f"{name} is not level:gangwatch_metric:operations"
    alert_groups = {g["name"] for g in rule_groups("alerts.yml")}
    assert not alert_groups & {g["name"] for g in rule_groups("recording.yml")}, "group names must differ"


def test_no_rule_fakes_a_zero():
    """`or vector(0)` turns "no data" into 0: unknown must stay absent (0 only where a source reports)."""
    fake = re.compile(r"\bor\s+vector\s*\(\s*0(\.0*)?\s*\)")
    for name in ("recording.yml", "alerts.yml"):
        for group in rule_groups(name):
            for rule in group["rules"]:
                assert not fake.search(rule["expr"]), (rule.get("record") or rule.get("alert"), rule["expr"])


def test_rules_read_only_metrics_that_exist():
    exist, declared, expected = known_metrics()
    used_expected, used_declared = set(), set()
    exprs = [(f"record {n}", e) for n, e in recording_rules().items()] + [(f"alert {r['alert']}", r["expr"]) for r in ALERTS]
    for what, expr in exprs:
        names = metric_names(expr)
        unknown = names - exist - declared - expected
        assert not unknown, f"{what} reads metrics nobody exports: {sorted(unknown)}"
        used_expected |= names & expected
        used_declared |= names & declared
    print(f"\nmetrics only in collector source (no golden output): {sorted(used_declared)}")
    print(f"metrics announced in rules/expected_metrics.yml, not exported yet: {sorted(used_expected)}")


# Agent families with one series per GPU, per IB port or per Lustre import on every node: at 4,096
# nodes 32 k to 135 k series, each costing every evaluation that selects them (rules/recording.yml's
# header). Rules read the agent's per-node rollups instead; alert descriptions may still query these
# for one node with a template `query`, which runs only while the alert is active.
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
# Per-device families a rule may select anyway, with the matcher that keeps the selection sparse
# (None: the family is sparse by nature).
SPARSE_SELECTIONS = {
    "gangwatch_gpu_xid_errors_total": None,  # a series exists only once its GPU had that XID
    "gangwatch_lustre_client_import_info": ("state", pp.MatchOp.NotEqual, "FULL"),  # only imports that are down
}


def per_device_families() -> set[str]:
    """Families of the golden outputs with a `gpu` or `port` label, and Lustre client families with a
    `target` label (the servers' per-target families are a few hundred series, not per node)."""
    found: set[str] = set()
    for path in (p for pattern in GOLDEN_GLOBS for p in REPO.glob(pattern)):
        for line in path.read_text(errors="replace").splitlines():
            m = _SERIES.match(line)
            if not m:
                continue
            labels = set(re.findall(r'(\w+)="', m.group(2)))
            if labels & {"gpu", "port"} or (m.group(1).startswith("gangwatch_lustre_client_") and "target" in labels):
                found.add(m.group(1))
    return found | set(SPARSE_SELECTIONS)


def dense_selections(expr: str, dense: set[str]) -> list[str]:
    """The selectors of `expr` that read a per-device family without the matcher that keeps it sparse."""
    bad: list[str] = []

    def visit(node):
        if isinstance(node, pp.VectorSelector) and node.name in dense:
            needed = SPARSE_SELECTIONS.get(node.name, ())
            if needed is not None and not any((m.name, m.op, m.value) == needed for m in node.matchers.matchers):
                bad.append(node.name)
        return True

    pp.walk(pp.parse(expr), visit)
    return bad


def test_per_device_families_are_found():
    dense = per_device_families()
    assert {"gangwatch_gpu_utilization_ratio", "gangwatch_infiniband_port_transmit_wait_ticks_total",
            "gangwatch_lustre_client_import_rpc_wait_average_seconds", "gangwatch_job_gpu_info",
            "gangwatch_slurm_job_gpu_info"} <= dense
    assert not {"gangwatch_gpu_node_utilization_ratio", "gangwatch_infiniband_node_transmit_wait_ticks_total",
                "gangwatch_lustre_client_import_rpc_wait_max_seconds", "gangwatch_job_gpu_utilization_ratio",
                "gangwatch_lustre_ost_io_bytes_total"} & dense
    assert dense_selections("avg by (node) (gangwatch_gpu_utilization_ratio)", dense) == ["gangwatch_gpu_utilization_ratio"]
    assert dense_selections('count(gangwatch_lustre_client_import_info{state="DISCONN"})', dense)
    assert not dense_selections('count(gangwatch_lustre_client_import_info{state!="FULL"})', dense)


def test_rules_read_no_per_device_family():
    dense = per_device_families()
    exprs = [(f"record {n}", e) for n, e in recording_rules().items()] + [(f"alert {r['alert']}", r["expr"]) for r in ALERTS]
    bad = {what: found for what, expr in exprs if (found := dense_selections(expr, dense))}
    assert not bad, f"rules selecting per-GPU/per-port/per-import families (read the agent's rollups): {bad}"
