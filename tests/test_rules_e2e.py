"""End to end: real gangwatch processes -> a real Prometheus with rules/*.yml -> a real Alertmanager
with rules/alertmanager.example.yml's routes and inhibitions -> a webhook.

Part A (always, needs Debian's prometheus and prometheus-alertmanager):
- `node001`: the real agent on node_exporter's fixture trees (every host collector);
- `node002`: the real agent whose filesystem collector probes `/scratch/slow_lustre` with the
  test stat function (tests/support/fsfakes.py), so the test can hang and release the mount;
- a findings stub under the scrape job `gangwatch-serve`: serve's own findings encoder
  (dashboard/findings_api.py) over one verdict the test switches between stalled_io and
  progressing (it stands in for serve's diagnosis only; part B runs the real one, in the demo).
The test hangs the mount: FilesystemHung fires and reaches the webhook; the stub reports job 4242
stalled on I/O with the mount as culprit: Prometheus fires GangJobStalled, Alertmanager holds it
back (inhibited by the filesystem incident); the mount recovers: FilesystemHung resolves and the
job alert is delivered; the stall ends: it resolves. Every Grafana query is then evaluated by this
Prometheus, and every query whose input metrics are present must return data.

Part B: `gangwatch demo` (serve on a simulated cluster: agents on `/metrics?target=NODE`, the
slurm-exporter on `/slurm/metrics`, serve's findings on `/metrics`) at --speed 20 with an injected
OST slowdown, scraped by Prometheus under its own /sim/prometheus.yml; GangJobStalled{cause=
"stalled_io"} reaches the webhook for a job the fault's ground truth names, with the slowed OST as
its culprit, and resolves after the fault ends; every Grafana query returns data, or NOT_SIMULATED /
ONLY_WHEN below says why not (~50 s of real time). The job alert is delivered, not inhibited: the
filesystem inhibition (alertmanager.example.yml: scope="filesystem" with the same culprit) would
hold it back only while LustreTargetSlow fires for that OST, and the simulated slowdown (clients
wait ~60 ms per RPC, 20x the usual) stays under that alert's 1 s; the test checks it did not fire.

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
    # a stalled job, so that panels of stalls (`cause!="none"`) have their input: with none stalled,
    # no series is the honest answer, not a faked zero
    stack["stub"].stalled.set()
    try:
        wait_for(lambda: prom.query('gangwatch_job_stalled{cause!="none"}') and
                 prom.query("cluster:gangwatch_job_gpu_hours_lost:sum") and
                 prom.alerts(alertname="GangJobStalled", state="firing"), 60,
                 "a stalled job in Prometheus, its recording rules and a firing alert", context=stack["state"])
        _evaluate_grafana_queries(prom)
    finally:
        stack["stub"].stalled.clear()


def _evaluate_grafana_queries(prom) -> None:
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

# The pre-filled hour ends at 60m; at --speed 20 one simulated minute is 3 s of real time. The fault
# starts 3 simulated minutes into the live part (Prometheus is scraping by then or soon after: the
# diagnosis judges the demo's own history, so it does not need Prometheus to have seen the onset), is
# diagnosed once it has lasted the diagnosis' minimum (5 simulated minutes without write-traffic data)
# and ends 12 minutes later: ~40 s of real time from fault to resolution.
SPEED = 20
FAULT = "ost_slow@63m+12m"
# Why some Grafana queries have no data from the demo's Prometheus, by the raw metric they read:
# series the simulator does not produce at all (checked: each is absent) ...
NOT_SIMULATED = {
    **dict.fromkeys(("gangwatch_cpu_seconds_total", "gangwatch_memory_mem_total_bytes", "gangwatch_memory_mem_free_bytes",
                     "gangwatch_memory_buffers_bytes", "gangwatch_memory_cached_bytes",
                     "gangwatch_disk_io_time_seconds_total", "gangwatch_filesystem_avail_bytes",
                     "gangwatch_filesystem_size_bytes", "gangwatch_filesystem_stat_timeout"),
                    "the host collectors (cpu, memory, disk, filesystem) are not simulated"),
    **dict.fromkeys(("gangwatch_gpfs_read_bytes_total", "gangwatch_gpfs_write_bytes_total",
                     "gangwatch_gpfs_waiter_longest_seconds", "gangwatch_gpfs_waiters_by_reason"),
                    "the simulated cluster has Lustre only, no GPFS"),
    **dict.fromkeys(("gangwatch_lustre_ost_io_bytes_total", "gangwatch_lustre_mdt_operations_total",
                     "gangwatch_lustre_job_io_bytes_total"),
                    "Lustre servers (OSS/MDS exporters, job_stats) are not simulated, only clients"),
    "gangwatch_infiniband_port_degraded": "the simulated agent does not judge port rates",
    "gangwatch_gpu_remapped_rows": "row remapping is not simulated",
    **dict.fromkeys(("gangwatch_slurm_scheduler_main_cycle_last_seconds",
                     "gangwatch_slurm_scheduler_backfill_cycle_last_seconds",
                     "gangwatch_slurm_scheduler_backfill_depth_last"),
                    "the simulated scheduler has no sdiag statistics"),
}
# ... and series that exist only while something is wrong or waiting (none of which this test causes).
ONLY_WHEN = {
    "gangwatch_gpu_xid_errors_total": "a GPU has had an XID (no xid79 fault injected here)",
    "gangwatch_slurm_pending_gang_job_wait_seconds": "a multi-node job pends (the 16-node queue rarely holds one)",
    "gangwatch_slurm_pending_gang_jobs_oldest_wait_seconds": "a multi-node job pends",
    "partition_reason:gangwatch_slurm_jobs_pending:sum": "a job pends",
    "fs_target:gangwatch_lustre_client_import_disconnected:count": "a client has lost a Lustre import (never simulated)",
}


# whole families the demo has no source for
NOT_SIMULATED_FAMILIES = {
    "gangwatch_kube_": "Kubernetes: the demo runs no kube-exporter",
    "gangwatch_beegfs_": "the simulated cluster has Lustre only, no BeeGFS",
}


def _not_simulated(metric: str) -> str | None:
    family = next((why for prefix, why in NOT_SIMULATED_FAMILIES.items() if metric.startswith(prefix)), None)
    return family or NOT_SIMULATED.get(metric) or ONLY_WHEN.get(metric)


def explain_without_data(missing: list[tuple[str, str]], present: set[str]) -> tuple[dict[str, str], list[str]]:
    """Grafana queries without data, as (panel, expr) -> ({"panel: expr": why}, [queries nothing
    above explains]). `present`: the metric names this Prometheus holds."""
    records = recording_rules()
    why, unexplained = {}, []
    for where, raw in missing:
        entry = f"{where}: {raw}"
        expr = grafana_to_promql(raw.replace("$node", ".*").replace("$job", ".*"))
        blamed = sorted(m for m in _source_metrics(expr, records) if m not in present) + \
            sorted(n for n in metric_names(expr) if n in ONLY_WHEN)
        reasons = [_not_simulated(m) for m in blamed]
        if blamed and all(reasons):
            why[entry] = "; ".join(sorted({f"{m}: {r}" for m, r in zip(blamed, reasons)}))
        else:
            unexplained.append(f"{entry} (absent inputs: {blamed or 'none'})")
    return why, unexplained


def test_demo_io_stall_alert_fires_for_the_right_job_and_resolves(tmp_path):
    """Simulated cluster (`gangwatch demo`: agents, slurm-exporter and serve) scraped by a real
    Prometheus with rules/*.yml: an injected OST slowdown becomes GangJobStalled{cause="stalled_io"}
    at the webhook for a job the fault's ground truth names, and resolves after the fault ends;
    meanwhile every Grafana query returns data, except those listed in DEMO_WITHOUT_DATA."""
    from tests.support.demo_stack import DemoStack

    t0 = time.monotonic()
    with DemoStack(tmp_path, nodes=16, faults=FAULT, speed=SPEED) as s:
        started = time.monotonic() - t0

        def wait(pred, timeout, what):
            return wait_for(pred, timeout, what, interval=0.5, context=s.alerts_state)

        def stall_alerts(status):
            return [a for a in s.hook.alerts(alertname="GangJobStalled", status=status)
                    if a["labels"].get("cause") == "stalled_io"]

        fired = wait(lambda: stall_alerts("firing"), 90, "GangJobStalled{cause=stalled_io} at the webhook")
        t_fired = time.monotonic() - t0
        truth, now = s.ground_truth("ost_slow"), s.sim_now()
        assert truth and truth["cause"] == "stalled_io", truth
        assert truth["start"] < now < truth["end"], "the alert came outside the fault's window"
        jobs = set(truth["jobs"])
        assert {a["labels"]["jobid"] for a in fired} <= jobs, (fired, truth)
        alert = fired[0]
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["scope"] == "job"
        # the culprit serve named is the slowed OST, not the job (the diagnosis reads per-target latency)
        assert {a["labels"].get("culprit") for a in fired} == {truth["culprit"]}, (fired, truth)
        # delivered, not inhibited: no filesystem alert names that OST (see the module docstring)
        assert not s.prom.alerts(alertname="LustreTargetSlow"), s.prom.alerts(alertname="LustreTargetSlow")
        assert alert["labels"]["cluster"] == "demo" and alert["receiver"] in ("ops-pager", "ops-default")
        # While the stall lasts: every Grafana query returns data, or NOT_SIMULATED / ONLY_WHEN says why not.
        missing = s.grafana_queries_without_data()
        present = {r["metric"]["__name__"] for r in s.prom.query('count by (__name__) ({__name__=~".+"})')}
        resolved = wait(lambda: [a for a in stall_alerts("resolved") if a["labels"]["jobid"] == alert["labels"]["jobid"]],
                        90, "the stalled_io alert resolved")
        t_resolved = time.monotonic() - t0
        end = s.ground_truth("ost_slow")["end"]
        assert s.sim_now() >= end, "resolved before the fault ended"
        print(f"\nstack up {started:.1f} s, alert at the webhook {t_fired:.1f} s, resolved {t_resolved:.1f} s; "
              f"job {alert['labels']['jobid']} (truth: {sorted(jobs)}), culprit {alert['labels'].get('culprit')}")
    assert resolved
    n_queries = len(s.grafana_queries())
    why, unexplained = explain_without_data(missing, present)
    print(f"{n_queries - len(missing)} of {n_queries} Grafana queries returned data; without data:\n  "
          + "\n  ".join(f"{q} <- {w}" for q, w in sorted(why.items())))
    assert not unexplained, f"Grafana queries without data from the demo's Prometheus, unexplained: {unexplained}"
    stale = sorted(m for m in NOT_SIMULATED if m in present)
    assert not stale, f"the demo now produces these: remove them from NOT_SIMULATED: {stale}"
    assert n_queries - len(missing) >= 40
