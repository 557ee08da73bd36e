"""End to end: real gangwatch processes -> a real Prometheus with rules/*.yml -> a real Alertmanager
with rules/alertmanager.example.yml's routes and inhibitions -> a webhook.

Part A (always, needs Debian's prometheus and prometheus-alertmanager):
- `node001`: the real agent on node_exporter's fixture trees (every host collector);
- `node002`: the real agent whose filesystem collector probes `/scratch/slow_lustre` with the
  test stat function (tests/support/fsfakes.py), so the test can hang and release the mount;
- a findings stub under the scrape job `gangwatch-serve`: serve's own findings encoder
  (dashboard/findings_api.py) over one verdict the test switches between stalled_io and
  progressing (it stands in for serve's diagnosis only; part B runs the real serve).
The test hangs the mount: FilesystemHung fires and reaches the webhook; the stub reports job 4242
stalled on I/O with the mount as culprit: Prometheus fires GangJobStalled, Alertmanager holds it
back (inhibited by the filesystem incident); the mount recovers: FilesystemHung resolves and the
job alert is delivered; the stall ends: it resolves. Every Grafana query is then evaluated by this
Prometheus, and every query whose input metrics are present must return data.

Part B (needs `gangwatch demo` and `gangwatch serve` with findings on /metrics): the simulated
cluster with an injected OST slowdown, scraped by Prometheus as agents + slurm-exporter, and the
real serve's findings; GangJobStalled{cause="stalled_io"} fires for a job the fault's ground truth
names and resolves after the fault ends; every Grafana query returns data. It runs for about ten
minutes of real time (Prometheus starts empty, so serve's baseline starts with the test), so it runs
only with GW_E2E_DEMO=1; it also skips, with the reason, while the demo or serve cannot do their part.

Alert `for:` durations are cut to 2 s (tests/support/promstack.fast_rules); promtool's unit tests
in rules/tests/ check the real ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collectors.registry import load_builtin_collectors
from tests.conftest import REPO, which
from tests.support.promql_names import grafana_to_promql, metric_names, recording_rules
from tests.support.promstack import (Alertmanager, Process, Prometheus, Webhook, fast_rules, free_port, http_get,
                                     node_relabel, wait_for)
from tests.test_agent_e2e import fixture_root, hardware_flags  # noqa: F401  (fixture_root is a fixture)
from tests.test_filesystem import host_tree

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not (which("prometheus") and which("promtool") and which("prometheus-alertmanager")),
                       reason="needs Debian's prometheus and prometheus-alertmanager (tests/run-all.sh installs them)"),
]
MOUNT = "/scratch/slow_lustre"
JOBID = "4242"


def load_build():
    spec = importlib.util.spec_from_file_location("grafana_build_e2e", REPO / "grafana" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class FindingsStub:
    """Serves serve's findings metrics, encoded by serve's own dashboard/findings_api.py, for one
    job: stalled on I/O with the mount as culprit while `stalled` is set, else progressing."""

    def __init__(self):
        from dashboard.analysis.diagnose import Diagnosis, Verdict
        from dashboard.findings_api import findings_metrics

        self.stalled = threading.Event()
        outer = self

        def body() -> bytes:
            stalled = outer.stalled.is_set()
            verdict = Verdict(jobid=JOBID, nodes=("node002",), gpus=8, state="stalled_io" if stalled else "progressing",
                              confidence=0.9, since=time.time() - 60 if stalled else None,
                              culprit=MOUNT if stalled else "", culprit_kind="target" if stalled else "")
            return findings_metrics(Diagnosis(at=time.time(), verdicts=(verdict,), incidents=()))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                data = body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def start_agent(workdir: Path, name: str, module: str, flags: list[str]) -> tuple[Process, str]:
    port = free_port()
    proc = Process([sys.executable, "-m", module, "agent" if module == "dashboard.cli" else "--log-level=error",
                    f"--web.listen-address=127.0.0.1:{port}", *flags],
                   workdir / f"agent-{name}.log", cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    wait_for(lambda: proc.check_alive() or http_get(f"http://127.0.0.1:{port}/"), 30, f"agent {name}")
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, fixture_root):  # noqa: F811
    work = tmp_path_factory.mktemp("rules-e2e")
    procfs, rootfs = host_tree(work / "node002", {MOUNT: "lustre", "/home": "nfs"})
    only_fs = [f"--no-collector.{n}" for n in load_builtin_collectors() if n != "filesystem"]
    started = []
    hook = Webhook()
    stub = FindingsStub()
    try:
        a1, t1 = start_agent(work, "node001", "dashboard.cli",
                             ["--log-level=error", f"--path.procfs={fixture_root / 'proc'}",
                              f"--path.sysfs={fixture_root / 'sys'}", f"--path.rootfs={fixture_root}", *hardware_flags()])
        started.append(a1)
        a2, t2 = start_agent(work, "node002", "tests.support.agent_fsfakes",
                             [f"--path.procfs={procfs}", f"--path.sysfs={work / 'no-sys'}", f"--path.rootfs={rootfs}",
                              *only_fs])
        started.append(a2)
        am = Alertmanager(work, hook.url)
        started.append(am)
        scrape = [
            {"job_name": "gangwatch-agent", "relabel_configs": node_relabel(),
             "static_configs": [{"targets": [t1], "labels": {"node": "node001"}},
                                {"targets": [t2], "labels": {"node": "node002"}}]},
            {"job_name": "gangwatch-serve", "static_configs": [{"targets": [stub.target]}]},
        ]
        prom = Prometheus(work, scrape, fast_rules(work / "rules"), alertmanager_port=am.port,
                          external_labels={"cluster": "e2e"})
        started.append(prom)
        prom.wait_targets_up({"gangwatch-agent", "gangwatch-serve"})

        def state() -> str:
            return (f"Prometheus alerts: {json.dumps(prom.alerts())[:3000]}\n"
                    f"Alertmanager alerts: {json.dumps(am.alerts())[:3000]}\n"
                    f"webhook: {json.dumps(hook.payloads)[:3000]}\n"
                    f"targets: {json.dumps(prom.query('up'))}\n"
                    f"stat_timeout: {json.dumps(prom.query('gangwatch_filesystem_stat_timeout'))}")

        yield {"prom": prom, "am": am, "hook": hook, "stub": stub, "state": state,
               "block": Path(str(rootfs / MOUNT.lstrip("/")) + ".block")}
    finally:
        for p in reversed(started):
            p.stop()
        hook.stop()
        stub.stop()


def test_hung_mount_and_inhibited_io_stall(stack):
    prom, am, hook, stub, block = stack["prom"], stack["am"], stack["hook"], stack["stub"], stack["block"]

    def wait(pred, timeout, what):
        return wait_for(pred, timeout, what, context=stack["state"])

    assert not hook.alerts(alertname="FilesystemHung"), "fired before the fault"
    assert prom.query('gangwatch_filesystem_stat_timeout{node="node002"} == 1') == []

    # 1. The mount hangs: the agent reports it, the rule fires, Alertmanager delivers it.
    block.touch()
    fired = wait(lambda: hook.alerts(alertname="FilesystemHung", status="firing"), 40, "FilesystemHung at the webhook")
    labels = fired[0]["labels"]
    assert labels["culprit"] == MOUNT and labels["mountpoint"] == MOUNT and labels["fstype"] == "lustre"
    assert labels["severity"] == "critical" and labels["scope"] == "filesystem" and labels["cluster"] == "e2e"
    assert fired[0]["annotations"]["runbook_url"].endswith("rules/runbooks/FilesystemHung.md")
    assert "hangs on 1 node(s)" in fired[0]["annotations"]["summary"]
    # Grouped by culprit: the notification's group key names the mount.
    assert any(p["groupLabels"].get("culprit") == MOUNT for p in hook.payloads)

    # 2. serve says job 4242 is stalled on that mount: Prometheus fires, Alertmanager inhibits.
    stub.stalled.set()
    wait(lambda: prom.alerts(alertname="GangJobStalled", state="firing"), 30, "GangJobStalled firing in Prometheus")
    held = wait(lambda: [a for a in am.alerts(alertname="GangJobStalled") if a["status"]["inhibitedBy"]], 30,
                    "GangJobStalled inhibited in Alertmanager")
    assert held[0]["labels"]["jobid"] == JOBID and held[0]["status"]["state"] == "suppressed"
    assert not hook.alerts(alertname="GangJobStalled"), "an inhibited alert reached the webhook"

    # 3. The mount recovers: FilesystemHung resolves, and the job's own alert goes out.
    block.unlink()
    wait(lambda: hook.alerts(alertname="FilesystemHung", status="resolved"), 40, "FilesystemHung resolved")
    job = wait(lambda: hook.alerts(alertname="GangJobStalled", status="firing"), 40, "GangJobStalled delivered")
    assert job[0]["labels"]["jobid"] == JOBID and job[0]["labels"]["cause"] == "stalled_io"
    assert job[0]["labels"]["severity"] == "critical" and job[0]["labels"]["culprit"] == MOUNT

    # 4. The stall ends: resolved.
    stub.stalled.clear()
    wait(lambda: hook.alerts(alertname="GangJobStalled", status="resolved"), 40, "GangJobStalled resolved")


def _source_metrics(expr: str, records: dict[str, str]) -> set[str]:
    """Raw metrics an expression depends on, through recording rules."""
    out = set()
    for name in metric_names(expr):
        out |= _source_metrics(records[name], records) if name in records else {name}
    return out


def test_every_grafana_query_evaluates(stack):
    """Prometheus evaluates every dashboard query (variables set to All). A query whose raw input
    metrics are all present in this Prometheus must return data: that proves the joins and label
    names, not only the syntax."""
    prom = stack["prom"]
    build = load_build()
    records = recording_rules()
    present = {r["metric"]["__name__"] for r in prom.query('count by (__name__) ({__name__=~".+"})')}
    errors, empty, with_data, skipped = [], [], 0, 0
    for name, d in build.DASHBOARDS.items():
        for p in build.dashboard(d)["panels"]:
            for t in p.get("targets", []):
                expr = grafana_to_promql(t["expr"].replace("$node", ".*").replace("$job", ".*"))
                err = prom.query_error(expr)
                if err:
                    errors.append(f"{name}/{p['title']}: {err}")
                    continue
                if not _source_metrics(expr, records) <= present:
                    skipped += 1
                    continue
                if prom.query(expr):
                    with_data += 1
                else:
                    empty.append(f"{name}/{p['title']}: {expr}")
    print(f"\n{with_data} queries returned data; {skipped} read metrics this stack does not produce")
    assert not errors, errors
    assert not empty, f"queries with all their inputs present returned nothing: {empty}"
    assert with_data >= 10


# ------------------------------------------------------------------------------------ part B: demo

def _demo_missing() -> str | None:
    for mod in ("dashboard.demo", "dashboard.serve", "dashboard.findings_api"):
        try:
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not importable yet"
            importlib.import_module(mod)
        except Exception as exc:  # a module mid-construction by its author
            return f"{mod} does not import: {exc!r}"
    if not os.environ.get("GW_E2E_DEMO"):
        # Prometheus starts empty, so serve has the baseline only from the test's start: the fault
        # is injected minutes in and the test runs for about ten minutes of real time.
        return "takes ~10 minutes of real time: set GW_E2E_DEMO=1 to run it"
    return None


@pytest.mark.timeout(1500)
@pytest.mark.skipif(_demo_missing() is not None, reason=str(_demo_missing()))
def test_demo_io_stall_alert_fires_for_the_right_job_and_resolves(tmp_path):
    """Simulated cluster + the real serve on this Prometheus: an OST slowdown injected 3 minutes
    into the live part (Prometheus has no data before it starts, so that is the baseline serve
    gets) becomes GangJobStalled{cause="stalled_io"} for jobs the fault's ground truth names, and
    resolves after the fault ends; then every Grafana query returns data."""
    from tests.support.demo_stack import DemoStack

    with DemoStack(tmp_path, nodes=16, faults="ost_slow@63m+5m") as s:
        health = json.loads(http_get(f"http://{s.serve}/healthz") or b"{}")
        metrics_src = health.get("sources", {}).get("metrics", {})
        if not metrics_src.get("ok") and "no metric source" in metrics_src.get("detail", ""):
            pytest.skip(f"gangwatch serve does not diagnose from --prometheus yet: {metrics_src['detail']}")
        fired = wait_for(lambda: [a for a in s.hook.alerts(alertname="GangJobStalled", status="firing")
                                  if a["labels"].get("cause") == "stalled_io"], 420, "a stalled_io alert")
        truth = s.ground_truth("ost_slow")
        assert truth, "the demo has no ost_slow fault record"
        jobs = {str(j) for j in truth["jobs"]}
        assert {a["labels"]["jobid"] for a in fired} <= jobs, (fired, truth)
        wait_for(lambda: [a for a in s.hook.alerts(alertname="GangJobStalled", status="resolved")
                          if a["labels"]["jobid"] in jobs], 420, "the stalled_io alert resolved")
        missing = s.grafana_queries_without_data()
        assert not missing, missing
