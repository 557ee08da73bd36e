"""End to end: the real `gangwatch agent` process on node_exporter's fixture trees, scraped over HTTP.

As node_exporter's own end-to-end test: start the agent with every filesystem root pointed at the
fixtures, scrape `/metrics`, drop the series that vary (durations, build info), and diff against
tests/golden/agent-e2e.prom (`pytest --update-golden` rewrites it). The scraped text is linted with
`promtool check metrics`. Every collector that can run on fixture trees runs; collectors added
later join automatically (the golden file then needs `--update-golden`), GPU ones are switched off
because they read the real driver rather than a path.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from collectors.exposition import iter_samples
from collectors.registry import load_builtin_collectors
from tests.conftest import REPO, which
from tests.support.agent_process import AgentProcess

GOLDEN = REPO / "tests" / "golden" / "agent-e2e.prom"
# Collectors that read live hardware through a library, not through --path.*: their output would
# depend on the machine running the test.
HARDWARE_ONLY = re.compile(r"^(gpu.*|dcgm.*|nvml.*)$")
# Series whose values change from run to run.
VARYING = re.compile(r"^gangwatch_(build_info|scrape_collections_total|\w*_duration_seconds(_sum|_count|_bucket)?)$")
# Series kept but whose values come from the machine running the test: with --path.rootfs on a
# temp dir, the fixture's "/" mount is statvfs'd on the real disk holding that dir.
VALUE_VARIES = re.compile(r"^gangwatch_filesystem_(avail_bytes|free_bytes|size_bytes|files|files_free)$")
HOST_COLLECTORS = ("cpu", "meminfo", "diskstats", "netdev", "pressure")


def hardware_flags() -> list[str]:
    return [f"--no-collector.{name}" for name in load_builtin_collectors() if HARDWARE_ONLY.match(name)]


class Agent(AgentProcess):
    def __init__(self, procfs: Path, sysfs: Path, rootfs: Path, extra: list[str] = ()):
        super().__init__([f"--path.procfs={procfs}", f"--path.sysfs={sysfs}", f"--path.rootfs={rootfs}",
                          "--log-level=error", *hardware_flags(), *extra])

    def scrape(self) -> tuple[str, float]:
        t0 = time.monotonic()
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = resp.read().decode()
        return body, time.monotonic() - t0


@pytest.fixture(scope="module")
def fixture_root(node_exporter_sys, fixtures_dir) -> Path:
    """A root laid out like node_exporter's `collector/fixtures`: proc linked in place, sys unpacked."""
    root = node_exporter_sys.parent
    proc = root / "proc"
    if not proc.exists():
        proc.symlink_to(fixtures_dir / "node_exporter" / "proc", target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def fixture_scrape(fixture_root):
    agent = Agent(fixture_root / "proc", fixture_root / "sys", fixture_root)
    try:
        first = agent.scrape()
        yield first
    finally:
        agent.stop()


def normalize(text: str, root: Path) -> str:
    """Drop varying series (and their HELP/TYPE), mask host-dependent values and the temp root's
    path, so that runs on different machines compare equal."""
    out = []
    for line in text.splitlines():
        if line.startswith("# "):
            name = line.split(" ", 3)[2]
        else:
            name = re.split(r"[{ ]", line, 1)[0]
        if VARYING.match(name):
            continue
        if VALUE_VARIES.match(name) and not line.startswith("#"):
            line = line.rsplit(" ", 1)[0] + " <varies>"
        out.append(line.replace(str(root), "<root>"))
    return "\n".join(out) + "\n"


def test_scrape_answers_within_one_second(fixture_scrape):
    _, elapsed = fixture_scrape
    assert elapsed < 1.0


def test_host_collectors_succeed_on_fixtures(fixture_scrape):
    text, _ = fixture_scrape
    success = {l["collector"]: v for n, l, v in iter_samples(text) if n == "gangwatch_scrape_collector_success"}
    for name in HOST_COLLECTORS:
        assert success.get(name) == 1, (name, success)
    assert not any(HARDWARE_ONLY.match(n) for n in success)


def test_matches_golden(fixture_scrape, fixture_root, update_golden):
    got = normalize(fixture_scrape[0], fixture_root)
    if update_golden or not GOLDEN.exists():
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got)
        if not update_golden:
            pytest.skip(f"wrote missing golden file {GOLDEN}")
        return
    want = GOLDEN.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "scraped", n=1))
        pytest.fail(f"/metrics differs from {GOLDEN.name} (rerun with --update-golden if intended):\n{diff[:20000]}")


def test_promtool_lint(fixture_scrape):
    promtool = which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; tests/run-all.sh installs it)")
    res = subprocess.run([promtool, "check", "metrics"], input=fixture_scrape[0].encode(),
                         capture_output=True, timeout=30)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()


def test_missing_roots_fail_soft_and_fast(tmp_path):
    agent = Agent(tmp_path / "no-proc", tmp_path / "no-sys", tmp_path)
    try:
        text, elapsed = agent.scrape()
    finally:
        agent.stop()
    assert elapsed < 1.0
    success = {l["collector"]: v for n, l, v in iter_samples(text) if n == "gangwatch_scrape_collector_success"}
    assert {c: success[c] for c in ("cpu", "meminfo", "diskstats", "netdev")} == {
        "cpu": 0, "meminfo": 0, "diskstats": 0, "netdev": 0}
