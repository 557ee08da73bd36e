"""deploy/victoriametrics/: the files load in the real tools that will read them.

The scrape config in promtool and in vmagent (`-dryRun`, which rejects keys Prometheus accepts
and vmagent does not); rules/*.yml in vmalert (`-dryRun`); the systemd units in systemd-analyze;
the Grafana datasource's shape.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO, which

DEPLOY = REPO / "deploy" / "victoriametrics"
pytestmark = pytest.mark.victoriametrics


def run(*cmd) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not (which("vmagent") and which("promtool")), reason="needs Debian's victoria-metrics and prometheus")
def test_scrape_config_loads_in_vmagent_and_promtool():
    res = run("vmagent", f"-promscrape.config={DEPLOY / 'scrape.yml'}", "-dryRun")
    assert res.returncode == 0, res.stderr[-2000:]
    res = run("promtool", "check", "config", DEPLOY / "scrape.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = {c["job_name"] for c in yaml.safe_load((DEPLOY / "scrape.yml").read_text())["scrape_configs"]}
    assert jobs == {"gangwatch-agent", "gangwatch-slurm", "gangwatch-serve"}  # the names rules/alerts.yml reads


@pytest.mark.skipif(not which("vmalert"), reason="needs Debian's victoria-metrics")
def test_rules_load_in_vmalert():
    res = run("vmalert", f"-rule={REPO / 'rules' / 'recording.yml'}", f"-rule={REPO / 'rules' / 'alerts.yml'}", "-dryRun")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "error" not in res.stderr.lower(), res.stderr[-2000:]


@pytest.mark.skipif(not which("systemd-analyze"), reason="needs systemd-analyze")
def test_units_verify(tmp_path):
    # a template unit verifies as an instance of it
    units = [DEPLOY / "victoria-metrics.service", DEPLOY / "vmalert.service"]
    inst = tmp_path / "vmagent@0.service"
    shutil.copy(DEPLOY / "vmagent@.service", inst)
    res = run("systemd-analyze", "verify", *units, inst)
    problems = [ln for ln in (res.stdout + res.stderr).splitlines()
                if ln.strip() and "is not executable: No such file or directory" not in ln]
    assert not problems, problems


def test_grafana_datasource_points_at_victoriametrics():
    ds = yaml.safe_load((DEPLOY / "grafana-datasource.yml").read_text())["datasources"][0]
    assert ds["type"] == "prometheus" and ds["url"].endswith(":8428")
