"""grafana/: the dashboards, checked offline.

- The committed JSON equals what grafana/build.py generates (edit build.py, never the JSON).
- Each dashboard validates against Grafana's dashboard JSON Schema, built by grafana/schema.sh from
  Grafana's own TypeScript types (@grafana/schema 11.6); row panels against `RowPanel`, the others
  against `Panel`, since `best_match` over the anyOf can blame the wrong branch.
- Layout and wiring: unique uids and panel ids, grid positions inside 24 columns without overlap,
  every panel and query on the `${datasource}` variable, `datasource`, `job` and `node` variables.
- Every query (panels and variables) parses with promql-parser after Grafana's macros are replaced,
  and again with Prometheus' own parser (`promtool check rules` on all of them as recording rules),
  and reads only metrics that exist: golden outputs, recording rules, collector source, Prometheus'
  own series, or rules/expected_metrics.yml (metrics announced for `gangwatch serve`; printed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, which
from tests.support.promql_names import (alerting_rules, grafana_to_promql, known_metrics, metric_names,
                                        recording_rules)

GRAFANA = REPO / "grafana"
NAMES = ("cluster", "job", "node", "storage", "network", "queue")


def load_build():
    spec = importlib.util.spec_from_file_location("grafana_build", GRAFANA / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


BUILD = load_build()
DASHBOARDS = {name: json.loads((GRAFANA / f"{name}.json").read_text()) for name in NAMES}


def all_queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's inner expression."""
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"{dash['uid']} / {p['title']} / {t['refId']}", grafana_to_promql(t["expr"])))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"])
            assert m, f"variable {v['name']}: not label_values(expr, label)"
            out.append((f"{dash['uid']} / variable {v['name']}", grafana_to_promql(m.group(1))))
    return out


def test_generated_json_is_in_sync():
    assert {p.stem for p in GRAFANA.glob("*.json")} == set(NAMES) == set(BUILD.DASHBOARDS)
    for name, d in BUILD.DASHBOARDS.items():
        assert (GRAFANA / f"{name}.json").read_text() == BUILD.render(d), \
            f"grafana/{name}.json is stale: run python grafana/build.py"
    assert BUILD.main(["--check"]) == 0


@pytest.fixture(scope="module")
def schema() -> dict:
    path = os.environ.get("GW_GRAFANA_SCHEMA")
    if not path:
        base = Path(os.environ.get("GW_GRAFANA_SCHEMA_DIR", Path.home() / ".cache/gangwatch/grafana-schema"))
        path = base / "dashboard-11.6.16.schema.json"
        if not path.exists() and (base / "node_modules/@grafana/schema").is_dir():
            # Packages already installed: generating is offline (npx --no-install).
            subprocess.run([str(GRAFANA / "schema.sh"), str(base)], check=True, capture_output=True, timeout=120)
    if not Path(path).exists():
        pytest.skip(f"Grafana dashboard schema not built ({path}); tests/run-all.sh builds it with grafana/schema.sh")
    return json.loads(Path(path).read_text())


@pytest.mark.parametrize("name", NAMES)
def test_valid_against_grafana_schema(schema, name):
    jsonschema = pytest.importorskip("jsonschema")
    dash = DASHBOARDS[name]
    top = {**schema, "$ref": "#/definitions/Dashboard"}
    errors = [e.message for e in jsonschema.Draft7Validator(top).iter_errors(dash)]
    for p in dash["panels"]:
        kind = "RowPanel" if p["type"] == "row" else "Panel"
        v = jsonschema.Draft7Validator({**schema, "$ref": f"#/definitions/{kind}"})
        errors += [f"panel {p['id']} {p.get('title')!r}: {e.message}" for e in v.iter_errors(p)]
    assert not errors, errors[:10]


def test_schema_check_catches_a_broken_dashboard(schema):
    """The validator is not vacuous: Grafana's known bad shapes are flagged."""
    jsonschema = pytest.importorskip("jsonschema")
    bad = json.loads(json.dumps(DASHBOARDS["node"]))
    bad["refresh"] = 5
    bad["time"] = {"from": "now-6h"}
    bad["panels"][1]["gridPos"]["w"] = "wide"
    v = jsonschema.Draft7Validator({**schema, "$ref": "#/definitions/Dashboard"})
    assert len(list(v.iter_errors(bad))) >= 2
    pv = jsonschema.Draft7Validator({**schema, "$ref": "#/definitions/Panel"})
    assert list(pv.iter_errors(bad["panels"][1]))


@pytest.mark.parametrize("name", NAMES)
def test_layout_and_wiring(name):
    dash = DASHBOARDS[name]
    assert dash["uid"] == f"gangwatch-{name}" and dash["title"].startswith("gangwatch / ")
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert set(variables) == {"datasource", "job", "node"}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for v in ("job", "node"):
        assert variables[v]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
    # Both variables filter some query on every dashboard.
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
    assert 'node=~"$node"' in exprs and 'jobid=~"$job"' in exprs


def test_uids_unique():
    assert len({d["uid"] for d in DASHBOARDS.values()}) == len(DASHBOARDS)


@pytest.mark.parametrize("name", NAMES)
def test_queries_parse_and_use_existing_metrics(name):
    exist, declared, expected = known_metrics()
    announced = []
    for where, expr in all_queries(DASHBOARDS[name]):
        try:
            names = metric_names(expr)
        except ValueError as exc:
            pytest.fail(f"{where}: {expr!r} does not parse: {exc}")
        assert names, f"{where}: selects no metric"
        unknown = names - exist - declared - expected
        assert not unknown, f"{where} reads metrics nobody exports: {sorted(unknown)}"
        announced += [f"{where}: {n}" for n in sorted(names & expected)]
    if announced:
        print(f"\n{name}: queries on metrics announced in rules/expected_metrics.yml (gangwatch serve / "
              "slurm-exporter, not exported yet):\n  " + "\n  ".join(announced))


def test_expected_metrics_list_is_honest():
    """Every announced metric is used by a rule or a dashboard, and none is already exported."""
    exist, declared, expected = known_metrics()
    listed = {m["name"] for m in yaml.safe_load((REPO / "rules/expected_metrics.yml").read_text())["metrics"]}
    assert listed == expected, f"already exported, remove from rules/expected_metrics.yml: {sorted(listed - expected)}"
    used = set()
    for expr in list(recording_rules().values()) + [r["expr"] for r in alerting_rules()]:
        used |= metric_names(expr)
    for dash in DASHBOARDS.values():
        for _, expr in all_queries(dash):
            used |= metric_names(expr)
    assert expected <= used, f"unused entries: {sorted(expected - used)}"


@pytest.mark.skipif(not which("promtool"), reason="promtool not installed")
def test_queries_parse_with_prometheus(tmp_path):
    """Prometheus' own parser agrees (promql-parser follows Prometheus 3 in a few corners)."""
    rules = [{"record": f"gangwatch_check:q{i}:x", "expr": expr}
             for i, (_, expr) in enumerate(q for d in DASHBOARDS.values() for q in all_queries(d))]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not which("promtool"), reason="promtool not installed")
def test_port_error_panels_show_0_for_counters_an_agent_left_out(tmp_path):
    """The per-port error panels (promtool test rules on their queries): a port that erred shows its
    increase; a port whose counter the agent left out for standing still shows 0 where the node
    has the agent's port_idle_series; a node without it (node_exporter's names, an older agent)
    shows nothing for a port without the counter: unknown, not 0."""
    panels = {p["title"]: p["targets"][0]["expr"] for p in DASHBOARDS["network"]["panels"] if p.get("targets")}
    exprs = {name: panels[title].replace("$node", ".*") for name, title in
             (("downs", "Link downs (1h)"), ("symbols", "Symbol errors (1h)"))}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:{name}", "expr": expr} for name, expr in exprs.items()]}]}))
    ib = "gangwatch_infiniband_"

    def port(node, device, more=""):
        return f'{{job="agent",instance="{node}:9810",node="{node}",device="{device}",port="1"{more}}}'

    series = [{"series": f"{ib}port_rate_bytes_per_second{port(n, d)}", "values": "5e10x8"}
              for n in ("gpu1", "gpu2") for d in ("mlx5_0", "mlx5_1")]
    series += [{"series": f'{ib}port_idle_series{{job="agent",instance="gpu1:9810",node="gpu1"}}', "values": "7x8"},
               {"series": f"{ib}port_link_downed_total{port('gpu1', 'mlx5_1')}", "values": "2 2 3 3 4 4 4 4 4"}]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": "panel:downs", "eval_time": "8m", "exp_samples": [
                {"labels": f"panel:downs{port('gpu1', 'mlx5_0')}", "value": 0},
                # 2 drops over the 8 minutes, extrapolated half a scrape interval back (increase())
                {"labels": f"panel:downs{port('gpu1', 'mlx5_1')}", "value": 2 * 8.5 / 8}]},
            {"expr": "panel:symbols", "eval_time": "8m", "exp_samples": [
                {"labels": f"panel:symbols{port('gpu1', d)}", "value": 0}
                for d in ("mlx5_0", "mlx5_1")]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    r = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
