"""Which metric names exist, and which ones a PromQL expression (or a Grafana query) uses.

Used by tests/test_rules.py and tests/test_grafana.py to prove that every rule and every dashboard
query reads only metrics that exist: a metric in a golden output under tests/ (what the agent and
the slurm-exporter really emit), a recording rule in rules/recording.yml, a series Prometheus makes
itself, or an entry of rules/expected_metrics.yml (metrics announced but not exported yet; callers
report those separately).
"""

from __future__ import annotations

import re
from pathlib import Path

import promql_parser as pp
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
GOLDEN_GLOBS = ("tests/golden/**/*.prom", "tests/data/slurm-golden/*.prom")
# Series Prometheus writes itself (scrape health, alert state, its own telemetry used by bench/).
PROMETHEUS_BUILTIN = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds",
                                "scrape_samples_scraped", "scrape_series_added"})
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")
# Grafana macros and template variables are not PromQL: substitute before parsing.
_MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "${__range}": "1h",
           "${__rate_interval}": "5m", "${__interval}": "1m"}
_VAR = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def golden_metrics() -> set[str]:
    names: set[str] = set()
    for pattern in GOLDEN_GLOBS:
        for path in REPO.glob(pattern):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("# TYPE "):
                    names.add(line.split()[2])
                elif line and not line.startswith("#"):
                    m = _NAME.match(line)
                    if m:
                        names.add(m.group(1))
    return names


# Exporter source whose metric names count as declared: the collectors, and serve's findings.
DECLARING_SOURCES = ("collectors/**/*.py", "dashboard/findings_api.py")


def declared_metrics() -> set[str]:
    """Full metric names written as string literals in the exporters' source: the metrics a
    collector (or serve's findings) declares where no golden output holds them (NVML-only GPU series)."""
    names: set[str] = set()
    for path in (p for pattern in DECLARING_SOURCES for p in REPO.glob(pattern)):
        names.update(re.findall(r"[\"'](gangwatch_[a-z0-9_]+)[\"']", path.read_text()))
    # The kube-exporter declares its names as suffixes of one prefix (collectors/kube/metrics.py),
    # as do the ethtool and roce collectors their node rollups.
    from collectors.kube.metrics import METRICS as KUBE_METRICS, P as KUBE_PREFIX
    from collectors.node import ethtool, roce
    names |= {m.PREFIX + suffix for m in (ethtool, roce) for suffix in m.NODE_HELP}
    return names | {KUBE_PREFIX + suffix for suffix in KUBE_METRICS}


def rule_groups(name: str) -> list[dict]:
    return yaml.safe_load((RULES / name).read_text())["groups"]


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for g in rule_groups("recording.yml") for r in g["rules"]}


def alerting_rules() -> list[dict]:
    return [r for g in rule_groups("alerts.yml") for r in g["rules"]]


def expected_metrics() -> set[str]:
    return {m["name"] for m in yaml.safe_load((RULES / "expected_metrics.yml").read_text())["metrics"]}


def grafana_to_promql(query: str) -> str:
    """A Grafana query with its macros and `$var`/`${var}` variables replaced by PromQL-valid text."""
    for macro, value in _MACROS.items():
        query = query.replace(macro, value)
    return _VAR.sub("dummy", query)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (by name or by an exact `__name__` matcher). Raises
    ValueError when the expression does not parse, or selects metrics by a `__name__` regex."""
    found: set[str] = set()
    problems: list[str] = []

    def visit(node):
        if isinstance(node, pp.VectorSelector):
            if node.name:
                found.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    if m.op == pp.MatchOp.Equal:
                        found.add(m.value)
                    else:
                        problems.append(f"selects metrics by a __name__ regex: {m.value!r}")
        return True

    pp.walk(pp.parse(expr), visit)
    if problems:
        raise ValueError("; ".join(problems))
    return found


def known_metrics() -> tuple[set[str], set[str], set[str]]:
    """(metrics in golden outputs, recording rules or Prometheus itself; metrics only declared in
    collector source; metrics only announced in rules/expected_metrics.yml)."""
    exist = golden_metrics() | set(recording_rules()) | PROMETHEUS_BUILTIN
    declared = declared_metrics() - exist
    return exist, declared, expected_metrics() - exist - declared
