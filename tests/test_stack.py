"""The real deployment, end to end, through a controller outage (pytest marker `stack`).

Started here, all on loopback: a real Slurm 22.05 (tests/slurm_cluster.py: munge, slurmctld,
8 `slurmd -N` GPU nodes, slurmdbd where installed, the populated queue with running gangs, a
draining node under jobs, holds and a failed dependency), the agent (node_exporter's fixture
trees), the slurm-exporter, Prometheus with the rules of rules/ (alert `for:` cut to 2 s:
tests/support/promstack.fast_rules), Alertmanager with rules/alertmanager.example.yml's routing and
a webhook receiver, and `gangwatch serve` over the exporter and Prometheus, read in Chromium.

The story: slurmctld is killed. Within one poll (interval + the poll's one deadline) the exporter
says `gangwatch_slurm_up 0`, keeps its last good snapshot (stale, with `failing_since`), and every
page says "controller unreachable since …" over the last good data; SlurmControllerUnreachable
reaches the webhook, and the Slurm alerts that were firing (the draining node under jobs) are held,
not resolved. slurmctld restarts: fresh data, no banner, the outage alert resolves. Then it is
frozen (SIGSTOP) and the exporter reports up 0 within one poll again. Last, the exporter itself is
stopped (serve keeps the last data and says so; GangwatchTargetDown reaches the webhook) and
restarted. ~2.5-3 minutes, a minute of it Slurm's start-up.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests import slurm_cluster
from tests.conftest import REPO, which
from tests.support.promstack import (Alertmanager, Process, Prometheus, Webhook, fast_rules, free_port, http_get,
                                     node_relabel, wait_for)
from tests.test_agent_e2e import fixture_root, hardware_flags  # noqa: F401  (fixture_root is a fixture)
from tests.test_dashboard_browser import CHROMIUM, browser  # noqa: F401  (browser is a fixture)
# The exporter's poll interval and its per-poll deadline, seconds: above the ~9 s 22.05's squeue/sinfo
# --json take to answer a dead controller (exit 0, `errors`, no jobs), so that answer is what it reads.
POLL = 11
pytestmark = [
    pytest.mark.stack, *slurm_cluster.pytest_marks(), pytest.mark.prometheus, pytest.mark.browser,
    pytest.mark.skipif(not (which("prometheus") and which("promtool") and which("prometheus-alertmanager")),
                       reason="needs Debian's prometheus and prometheus-alertmanager (tests/run-all.sh installs them)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
    pytest.mark.timeout(400),
]
OUTAGE = "controller unreachable since"


def _gangwatch(cmd: list[str], log, env: dict) -> Process:
    return Process([sys.executable, "-m", "dashboard.cli", *cmd], log, cwd=REPO,
                   env={**env, "PYTHONPATH": str(REPO)})


def _metric(url: str, name: str) -> float | None:
    body = http_get(url + "/metrics")
    for line in (body or b"").decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@pytest.fixture(scope="module")
def stack(tmp_path_factory, fixture_root):  # noqa: F811
    work = tmp_path_factory.mktemp("stack")
    procs: list = []
    hook = Webhook()
    gen = slurm_cluster.started(slurm_cluster.SlurmCluster(), populate=True)
    cluster = next(gen)
    try:
        env = cluster.env
        agent_port, exp_port, serve_port = free_port(), free_port(), free_port()
        procs.append(_gangwatch(["agent", f"--web.listen-address=127.0.0.1:{agent_port}", "--log-level=error",
                                 f"--path.procfs={fixture_root / 'proc'}", f"--path.sysfs={fixture_root / 'sys'}",
                                 f"--path.rootfs={fixture_root}", *hardware_flags()], work / "agent.log", env))
        exporter = f"http://127.0.0.1:{exp_port}"
        exporter_cmd = ["slurm-exporter", f"--web.listen-address=127.0.0.1:{exp_port}",
                        f"--slurm.poll-interval={POLL}", f"--slurm.command-timeout={POLL}"]
        procs.append(_gangwatch(exporter_cmd, work / "slurm-exporter.log", env))
        am = Alertmanager(work, hook.url)
        procs.append(am)
        prom = Prometheus(work, [
            {"job_name": "gangwatch-agent", "relabel_configs": node_relabel(),
             "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"], "labels": {"node": "gpu001"}}]},
            {"job_name": "gangwatch-slurm", "static_configs": [{"targets": [f"127.0.0.1:{exp_port}"]}]},
            {"job_name": "gangwatch-serve", "static_configs": [{"targets": [f"127.0.0.1:{serve_port}"]}]},
        ], fast_rules(work / "rules"), alertmanager_port=am.port)
        procs.append(prom)
        serve = f"http://127.0.0.1:{serve_port}"
        procs.append(_gangwatch(["serve", f"--web.listen-address=127.0.0.1:{serve_port}", "--slurm-exporter", exporter,
                                 "--prometheus", prom.url, "--poll-interval=2", "--refresh=2", "--log-level=info"],
                                work / "serve.log", env))
        def ready():
            for p in procs:
                getattr(p, "process", p).check_alive()
            return http_get(serve + "/healthz") and _metric(exporter, "gangwatch_slurm_up") == 1

        wait_for(ready, 60, "serve and the exporter's first good poll")
        prom.wait_targets_up({"gangwatch-agent", "gangwatch-slurm", "gangwatch-serve"})
        def restart_exporter(stop: bool) -> None:
            if stop:
                procs[1].stop()
            else:
                procs[1] = _gangwatch(exporter_cmd, work / "slurm-exporter-2.log", env)

        yield {"cluster": cluster, "hook": hook, "prom": prom, "am": am, "exporter": exporter, "serve": serve,
               "work": work, "restart_exporter": restart_exporter}
    finally:
        for p in reversed(procs):
            p.stop()
        hook.stop()
        next(gen, None)  # stops the cluster


def page_text(browser, url: str, wait_for_text: str | None = None) -> str:
    ctx = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        pg = ctx.new_page()
        pg.goto(url)
        pg.wait_for_selector("#app-banner", state="attached", timeout=20_000)
        if wait_for_text:
            pg.wait_for_selector(f"text={wait_for_text}", timeout=20_000)
        pg.wait_for_timeout(500)
        return pg.inner_text("body")
    finally:
        ctx.close()


def test_controller_outage_end_to_end(stack, browser):
    cluster, hook, prom = stack["cluster"], stack["hook"], stack["prom"]
    exporter, serve = stack["exporter"], stack["serve"]
    before = json.loads(http_get(exporter + "/api/v1/snapshot"))
    running = [j for j in before["jobs"] if j["state"] == "RUNNING"]
    assert running and not before["stale"]
    # the Slurm alerts of the populated queue: a draining node under running jobs
    held = wait_for(lambda: prom.alerts("firing", alertname="SlurmNodeDrainingUnderJobs"), 60,
                    "SlurmNodeDrainingUnderJobs firing before the outage")
    wait_for(lambda: hook.alerts("firing", alertname="SlurmNodeDrainingUnderJobs"), 30, "its delivery")
    text = page_text(browser, serve + "/")
    assert OUTAGE not in text and f"of {sum(n['gpus_total'] or 0 for n in before['nodes'])}" in text

    # ---- slurmctld killed: up 0 within one poll, last good data kept, every page says so
    last = json.loads(http_get(exporter + "/api/v1/snapshot"))
    cluster.kill_ctld()
    killed = time.monotonic()
    wait_for(lambda: _metric(exporter, "gangwatch_slurm_up") == 0, 2 * POLL + 3, "gangwatch_slurm_up 0")
    print(f"slurmctld killed -> gangwatch_slurm_up 0 after {time.monotonic() - killed:.1f} s (poll {POLL} s)")
    assert time.monotonic() - killed <= 2 * POLL + 3  # the next poll, bounded by its one deadline
    stale = json.loads(http_get(exporter + "/api/v1/snapshot"))
    assert stale["stale"] and stale["taken_at"] >= last["taken_at"] and stale["failing_since"] > stale["taken_at"]
    assert {j["job_id"] for j in stale["jobs"] if j["state"] == "RUNNING"} == \
        {j["job_id"] for j in last["jobs"] if j["state"] == "RUNNING"}
    assert _metric(exporter, "gangwatch_slurm_poll_failures_total") >= 1
    assert any(e["message"].startswith("slurm reported:") for e in stale["errors"])  # exit 0, yet an outage
    for path in ("/", "/queue", "/jobs", "/nodes"):
        text = page_text(browser, serve + path, OUTAGE)
        assert OUTAGE in text, path
    overview = page_text(browser, serve + "/", OUTAGE)
    assert f"({len(running)} running jobs)" in overview  # the last good data, not an empty cluster
    health = json.loads(http_get(serve + "/healthz"))
    assert any(OUTAGE in s["detail"] for s in health["sources"].values())
    plan = json.loads(http_get(serve + "/api/v1/backfill"))
    assert plan["snapshot"]["stale"] and plan["snapshot"]["taken_at"] == stale["taken_at"]
    wait_for(lambda: hook.alerts("firing", alertname="SlurmControllerUnreachable"), 30,
             "SlurmControllerUnreachable at the webhook")
    # the other Slurm alerts are held on the last good data, not resolved
    assert {a["labels"]["node"] for a in prom.alerts("firing", alertname="SlurmNodeDrainingUnderJobs")} == \
        {a["labels"]["node"] for a in held}
    assert not hook.alerts("resolved", alertname="SlurmNodeDrainingUnderJobs")

    # ---- slurmctld restarted: fresh data, the banner goes, the outage alert resolves
    cluster.start_ctld()
    wait_for(lambda: _metric(exporter, "gangwatch_slurm_up") == 1, 2 * POLL + 20, "gangwatch_slurm_up 1 again")
    fresh = json.loads(http_get(exporter + "/api/v1/snapshot"))
    assert not fresh["stale"] and fresh["failing_since"] is None and fresh["taken_at"] > before["taken_at"]
    wait_for(lambda: OUTAGE not in json.dumps(json.loads(http_get(serve + "/healthz"))), 20, "serve's banner cleared")
    assert OUTAGE not in page_text(browser, serve + "/queue")
    wait_for(lambda: hook.alerts("resolved", alertname="SlurmControllerUnreachable"), 30, "the outage alert resolved")
    assert not hook.alerts("resolved", alertname="SlurmNodeDrainingUnderJobs")

    # ---- slurmctld frozen: up 0 within one poll too (one deadline for all commands)
    cluster.freeze_ctld()
    try:
        frozen = time.monotonic()
        wait_for(lambda: _metric(exporter, "gangwatch_slurm_up") == 0, 2 * POLL + 3, "up 0 with slurmctld frozen")
        print(f"slurmctld frozen -> gangwatch_slurm_up 0 after {time.monotonic() - frozen:.1f} s (poll {POLL} s)")
        assert time.monotonic() - frozen <= 2 * POLL + 3
    finally:
        cluster.thaw_ctld()  # the restarted exporter's first good poll below shows the recovery

    # ---- the slurm-exporter itself down: serve keeps the last data and says the exporter is unreachable;
    # Prometheus sees the target down (GangwatchTargetDown); restarted, everything is fresh again
    stack["restart_exporter"](stop=True)
    wait_for(lambda: not json.loads(http_get(serve + "/healthz"))["sources"][f"slurm-exporter {exporter}"]["ok"],
             20, "serve noticing the exporter is gone")
    text = page_text(browser, serve + "/", "Connection refused")
    assert f"({len(running)} running jobs)" in text
    wait_for(lambda: hook.alerts("firing", alertname="GangwatchTargetDown", job="gangwatch-slurm"), 40,
             "GangwatchTargetDown for the exporter at the webhook")
    stack["restart_exporter"](stop=False)
    wait_for(lambda: _metric(exporter, "gangwatch_slurm_up") == 1, 60, "the restarted exporter's first good poll")
    wait_for(lambda: json.loads(http_get(serve + "/healthz"))["sources"][f"slurm-exporter {exporter}"]["ok"], 20,
             "serve reading the restarted exporter")

    # the node page's "Last hour" renders from real scrapes (gaps and all), no server error
    node = page_text(browser, serve + "/nodes/gpu001", "Last hour")
    assert "Last hour" in node and "Error" not in node

    # serve logs Prometheus queries at debug only (item: 1.3 MB an hour at info)
    log = (stack["work"] / "serve.log").read_text()
    assert "HTTP Request" not in log and "/api/v1/query" not in log
    assert "slurm poll failed" in (stack["work"] / "slurm-exporter.log").read_text()
