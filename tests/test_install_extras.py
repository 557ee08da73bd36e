"""The install extras: a plain `pip install gangwatch` is the agent and the exporters; the
dashboard commands need `gangwatch[dashboard]` and say so in one line when it is missing.

A node without the extra is stood in for by a fresh interpreter in which the extra's packages
cannot be imported (tests/support/blocked_imports.py)."""

from __future__ import annotations

import re
import sys

import pytest

from dashboard import cli
from tests.support import blocked_imports

REPO = blocked_imports.REPO
NO_EXTRA = set(cli.DASHBOARD_EXTRA) | {"pandas"}
RUN_CLI = "import sys\nfrom dashboard.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


@pytest.fixture(scope="module")
def project() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("not applicable here: tomllib needs Python 3.11")
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_base_install_is_the_agent_and_exporters(project):
    base = requirement_names(project["dependencies"])
    assert not base & {"dash", "plotly", "pandas", "numpy", "flask"}, base
    assert {"httpx", "orjson", "pyyaml", "bcrypt", "nvidia-ml-py"} <= base


def test_dashboard_extra_matches_what_the_cli_checks(project):
    extras = project["optional-dependencies"]
    assert requirement_names(extras["dashboard"]) == set(cli.DASHBOARD_EXTRA)
    assert "gangwatch[dashboard]" in extras["test"]


def test_scripts_install_the_right_extra():
    assert '-e ".[dashboard]"' in (REPO / "deploy" / "quickstart.sh").read_text()
    assert '-e ".[test]"' in (REPO / "tests" / "run-all.sh").read_text()


@pytest.mark.parametrize("command", ["serve", "demo", "diagnose", "backfill", "capture", "simulate"])
def test_dashboard_commands_without_the_extra_say_so(command):
    res = blocked_imports.run(NO_EXTRA, RUN_CLI, command, "--web.listen-address", "127.0.0.1:1")
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"gangwatch {command}: needs the dashboard extra")
    assert "pip install 'gangwatch[dashboard]'" in res.stderr


@pytest.mark.parametrize("command", ["agent", "slurm-exporter"])
def test_agent_and_exporter_run_without_the_extra(command):
    res = blocked_imports.run(NO_EXTRA, RUN_CLI, command, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"usage: gangwatch {command}")


def test_with_the_extra_the_commands_start():
    """The check does not misfire where the extra is installed (this venv has it)."""
    assert cli.missing_extra() is None
    res = blocked_imports.run(set(), RUN_CLI, "serve", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: gangwatch serve"), res.stderr


def test_demo_without_dash_runs_its_dash_free_mode():
    res = blocked_imports.run({"dash", "plotly"}, RUN_CLI, "demo", "--no-dashboard", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: gangwatch demo"), res.stderr
    res = blocked_imports.run({"dash", "plotly"}, RUN_CLI, "demo", "--help")
    assert res.returncode == 2 and "'dash' is not installed" in res.stderr


def test_dashboard_assets_are_package_data(project):
    """A non-editable install carries the stylesheet (app.py serves dashboard/assets)."""
    import tomllib  # the `project` fixture already skipped where it is absent

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["dashboard"]
    css = sorted(p.name for p in (REPO / "dashboard" / "assets").glob("*.css"))
    assert css and all(any((REPO / "dashboard").glob(pat)) for pat in patterns)
    assert sorted(p.name for pat in patterns for p in (REPO / "dashboard").glob(pat)) == css
