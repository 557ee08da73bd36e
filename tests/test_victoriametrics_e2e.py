"""End to end on real processes, the scale-out layout of deploy/victoriametrics/:

`gangwatch demo --no-dashboard` (every virtual node's agent, the slurm-exporter and serve's findings)
-> two vmagent shards (-promscrape.cluster.membersCount=2, each keeping its share of the targets of
the demo's own /sim/prometheus.yml) -> VictoriaMetrics -> vmalert with rules/*.yml (`for:` cut to
2 s) -> a real Alertmanager with rules/alertmanager.example.yml -> a webhook; and
`gangwatch serve --prometheus <VictoriaMetrics>` read in Chromium.

An injected OST slowdown becomes GangJobStalled{cause="stalled_io"} at the webhook for a job the
fault's ground truth names, with the OST as culprit; serve, judging from VictoriaMetrics, shows that
job stalled on the Jobs page. Then the faults: one shard stopped (its nodes named stale by serve,
the others still judged); VictoriaMetrics stopped (serve keeps the last findings, marked stale with
their age) and started again (fresh findings).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest
import yaml

from tests.conftest import REPO, which
from tests.support import vmstack
from tests.support.promstack import Alertmanager, Process, Webhook, fast_rules, free_port, http_get, wait_for
from tests.test_dashboard_browser import CHROMIUM, browser  # noqa: F401  (browser is a fixture)

pytestmark = [
    pytest.mark.victoriametrics, pytest.mark.browser,
    pytest.mark.skipif(not (vmstack.available() and which("prometheus-alertmanager")),
                       reason="needs Debian's victoria-metrics and prometheus-alertmanager (tests/run-all.sh installs them)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
    pytest.mark.timeout(300),
]
NODES = 16
SPEED = 40
FAULT = "ost_slow@70m+60m"


def _gangwatch(args: list[str], log) -> Process:
    return Process([sys.executable, "-m", "dashboard.cli", *args], log, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("vmstack")
    started: list = []
    hook = Webhook()
    try:
        demo = f"127.0.0.1:{free_port()}"
        started.append(_gangwatch(["demo", f"--nodes={NODES}", f"--faults={FAULT}", f"--speed={SPEED}", "--no-dashboard",
                                   f"--web.listen-address={demo}", "--log-level=warning"], work / "demo.log"))
        wait_for(lambda: started[0].check_alive() or http_get(f"http://{demo}/healthz"), 120, "gangwatch demo")
        vm = vmstack.VictoriaMetrics(work)
        started.append(vm)
        am = Alertmanager(work, hook.url)
        started.append(am)
        scrape = yaml.safe_load(http_get(f"http://{demo}/sim/prometheus.yml"))["scrape_configs"]
        shards = [vmstack.VMAgent(work, scrape, vm.url, member=i, members=2, external_labels={"cluster": "demo"})
                  for i in range(2)]
        started.extend(shards)
        alert = vmstack.VMAlert(work, fast_rules(work / "rules"), vm.url, am.url,
                                extra_flags=["-external.label=cluster=demo"])
        started.append(alert)
        serve_port = free_port()
        serve = f"http://127.0.0.1:{serve_port}"
        started.append(_gangwatch(["serve", f"--web.listen-address=127.0.0.1:{serve_port}", "--slurm-exporter",
                                   f"http://{demo}", "--prometheus", vm.url, "--poll-interval=2", "--refresh=2",
                                   "--log-level=warning"], work / "serve.log"))
        wait_for(lambda: started[-1].check_alive() or http_get(serve + "/healthz"), 60, "gangwatch serve")
        yield {"demo": demo, "vm": vm, "am": am, "shards": shards, "vmalert": alert, "serve": serve, "hook": hook,
               "work": work, "scrape": scrape}
    finally:
        for p in reversed(started):
            p.stop()
        hook.stop()


def _truth(demo: str, kind: str) -> dict | None:
    doc = json.loads(http_get(f"http://{demo}/api/v1/sim/faults") or b'{"faults": []}')
    return next((f for f in doc["faults"] if f["kind"] == kind), None)


def _findings(serve: str) -> dict:
    return json.loads(http_get(serve + "/api/v1/findings") or b"{}")


def page_text(browser, url: str, wait_text: str) -> str:  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        pg = ctx.new_page()
        pg.goto(url)
        pg.wait_for_selector(f"text={wait_text}", timeout=30_000)
        return pg.inner_text("body")
    finally:
        ctx.close()


def test_sharded_scrape_alert_and_dashboard(stack, browser):  # noqa: F811
    demo, hook, vm = stack["demo"], stack["hook"], stack["vm"]
    # each shard scrapes its own share: together every target once
    targets = [[(t["labels"]["job"], t["labels"]["instance"]) for t in s.targets().get("activeTargets", [])] for s in stack["shards"]]
    n_targets = NODES + 2  # the agents, /slurm/metrics and serve's /metrics
    assert all(targets) and sum(map(len, targets)) == n_targets and not set(targets[0]) & set(targets[1]), targets
    wait_for(lambda: len(vm.query('up{job="gangwatch-agent"} == 1')) == NODES, 60, "every agent scraped")

    def stall_alerts():
        return [a for a in hook.alerts(alertname="GangJobStalled", status="firing") if a["labels"].get("cause") == "stalled_io"]

    fired = wait_for(stall_alerts, 120, "GangJobStalled{cause=stalled_io} from vmalert at the webhook",
                     interval=0.5, context=lambda: json.dumps(stack["vmalert"].alerts())[:2000])
    truth = _truth(demo, "ost_slow")
    assert truth and {a["labels"]["jobid"] for a in fired} <= set(truth["jobs"]), (fired, truth)
    assert {a["labels"].get("culprit") for a in fired} == {truth["culprit"]}
    assert fired[0]["labels"]["cluster"] == "demo"
    # vmalert renders the rule's template query: how old serve's verdict was when it judged it
    age = fired[0]["annotations"]["data_age"]
    assert re.fullmatch(r"(\d+m )?\d+(\.\d+)?(s|ms)", age), age
    # recording rules evaluated by vmalert and written back (the chained ones too)
    assert vm.query("jobid:gangwatch_job_nodes:count") and vm.query("node_jobid:gangwatch_job_info:max")

    # serve's own diagnosis over VictoriaMetrics names a job of the fault stalled on I/O
    def stalled():
        return [v for v in _findings(stack["serve"]).get("verdicts", []) if v["state"] == "stalled_io"]

    found = wait_for(stalled, 90, "serve (over VictoriaMetrics) finding the I/O stall", interval=1,
                     context=lambda: json.dumps(_findings(stack["serve"]))[:3000])
    job = found[0]["jobid"]
    assert job in truth["jobs"], (found, truth)
    text = page_text(browser, f"{stack['serve']}/jobs/{job}", "stalled")
    assert job in text and "stalled" in text.lower()


def test_shard_down_then_victoriametrics_restart(stack):
    """One vmagent shard stopped: serve names its nodes stale and judges the others as before;
    VictoriaMetrics stopped: serve keeps the last findings, saying since when; started again: fresh."""
    serve, vm = stack["serve"], stack["vm"]
    # the shard with fewer nodes: one holding 60 % or more of them is a monitoring outage to the
    # diagnosis (thresholds.outage_fraction), which then judges nothing (docs/victoriametrics.md)
    shares = [{t["labels"]["instance"] for t in s.targets()["activeTargets"] if t["labels"]["job"] == "gangwatch-agent"}
              for s in stack["shards"]]
    victim = min(range(2), key=lambda i: len(shares[i]))
    dead = shares[victim]
    judged = {v["jobid"]: v for v in _findings(serve)["verdicts"] if v["state"] not in ("insufficient_data", "suspended")}
    assert dead and judged
    stack["shards"][victim].stop()

    def stale_cycle():
        """Findings of a cycle that names every node of the dead shard stale and whose own queries all
        answered (a query late under the suite's load leaves its signal unknown for that cycle only,
        and every job's verdict with it). The shard's nodes go stale one by one, each
        stale_seconds after its own last scrape (spread over the scrape interval): a cycle between
        names some of them and still judges the others on data that is not yet old."""
        got = _findings(serve)
        notes = got.get("notes", [])
        stale = [m for n in notes for m in re.findall(r"(\d+) of \d+ nodes stale", n)]
        if stale and int(stale[0]) >= len(dead) and not any(re.search(r": \d+ quer(y|ies) failed", n) for n in notes):
            return got

    def seen():
        """On a timeout: the notes, when the findings' window ended against now (a cycle that stopped
        completing leaves the findings of the last one that did), how long ago VictoriaMetrics last
        had a sample of each dead node (a shard still writing would be seen here) and serve's log."""
        def ages(series: str) -> dict:
            got = vm.query(f'max by (instance) (timestamp({series}{{instance=~"{"|".join(sorted(dead))}"}}))')
            return {r["metric"].get("instance"): round(time.time() - float(r["value"][1]), 1) for r in got}

        log = (stack["work"] / "serve.log").read_text(errors="replace")[-3000:]
        now = _findings(serve)
        verdicts = [(v["jobid"], v["state"], v.get("culprit"), v.get("nodes")) for v in now.get("verdicts", [])]
        return (json.dumps({k: now.get(k) for k in ("notes", "generated_at")} | {"now": time.time()}
                           | {"dead nodes' last sample, s ago": ages("up"),
                              "their last GPU utilisation sample, s ago": ages("gangwatch_gpu_utilization_ratio"),
                              "verdicts": verdicts})[:4000] + "\nserve.log:\n" + log)

    cycle = wait_for(stale_cycle, 120, "serve naming the dead shard's nodes stale", interval=1, context=seen)
    note = next(n for n in cycle["notes"] if "nodes stale" in n)
    named = set(re.findall(r"node\d{4}", note))
    assert named == dead, (note, dead)  # a shard holds fewer than 9 of the 16 nodes: the note lists all
    after = {v["jobid"]: v for v in cycle["verdicts"]}
    live_jobs = [j for j, v in judged.items() if not set(v["nodes"]) & dead and j in after]
    dead_jobs = [j for j, v in judged.items() if set(v["nodes"]) <= dead and j in after]
    assert live_jobs, "no judged job on the live shard's nodes: the check proves nothing"
    for j in live_jobs:  # the others are judged on their own data: the dead shard costs them nothing
        v = after[j]
        # a live job may be between causes (a fault of the simulator starting): judged on its own
        # series, which the dead shard did not touch; what must not happen is a data verdict
        ambiguous = v["state"] == "insufficient_data" and "no single cause holds" in v["reason"]
        assert v["state"] != "insufficient_data" or ambiguous, (v["reason"], v["nodes"], sorted(dead))
        assert not dead & set(re.findall(r"node\d{4}", v["reason"])) and "stale" not in v["reason"], v
    for j in dead_jobs:  # unknown, not healthy and not stalled, and the node named
        v = after[j]
        assert v["state"] == "insufficient_data" and any(n in v["reason"] for n in v["nodes"]), (v["reason"], v["nodes"])

    vm.stop()
    kept = wait_for(lambda: [n for n in _findings(serve).get("notes", []) if "metric source down" in n], 60,
                    "serve marking its findings stale while VictoriaMetrics is down", interval=1)
    assert "findings from" in kept[0]
    assert _findings(serve)["verdicts"], "the last findings must stay on screen"
    vm.start()
    wait_for(lambda: not [n for n in _findings(serve).get("notes", []) if "metric source down" in n], 60,
             "fresh findings after VictoriaMetrics restarted", interval=1)
