"""The simulated cluster behind a real Prometheus, Alertmanager and a webhook: what
tests/test_rules_e2e.py part B and bench/bench_rules.py run.

- `gangwatch demo` is `serve` on a simulated cluster: it serves every virtual node's agent metrics
  (`/metrics?target=NODE`), the slurm-exporter's (`/slurm/metrics`, `/api/v1/snapshot`) and serve's
  findings as metrics (`/metrics`, from its own diagnosis of the simulation's history). Prometheus
  scrapes them with the demo's own `/sim/prometheus.yml` (jobs `gangwatch-agent`, `gangwatch-slurm`,
  `gangwatch-serve`), exactly as a site would scrape real agents, a real exporter and serve;
- Prometheus evaluates rules/*.yml (`for:` cut short unless told) and sends to Alertmanager with
  rules/alertmanager.example.yml's routes and inhibitions, delivering to a webhook.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from tests.support.promql_names import grafana_to_promql
from tests.support.promstack import (REPO, Alertmanager, Process, Prometheus, Webhook, fast_rules, free_port,
                                     http_get, wait_for)

RULES = REPO / "rules"


class DemoStack:
    def __init__(self, workdir: Path, nodes: int = 16, faults: str = "ost_slow@61m+4m", speed: float = 1.0,
                 with_serve: bool = True, with_alertmanager: bool = True, interval: str = "1s",
                 for_seconds: int | None = 2, history: float = 3600.0, extra_rules: list[Path] = (),
                 self_scrape: bool = False, scrape_timeout: str | None = None, dashboard: bool = True,
                 up_timeout: float = 120):
        """`with_serve`: scrape the demo's /metrics as `gangwatch-serve`; `dashboard`: run the demo
        with its dashboard (findings precomputed after each step) rather than `--no-dashboard`
        (findings computed when /metrics is scraped)."""
        self.workdir = workdir
        self.nodes, self.faults, self.speed, self.history = nodes, faults, speed, history
        self.with_serve, self.with_alertmanager, self.dashboard = with_serve, with_alertmanager, dashboard
        self.interval, self.for_seconds = interval, for_seconds
        self.extra_rules, self.self_scrape, self.scrape_timeout = list(extra_rules), self_scrape, scrape_timeout
        self.up_timeout = up_timeout
        self.started: list = []

    def __enter__(self) -> "DemoStack":
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        port = free_port()
        self.demo = f"127.0.0.1:{port}"
        demo = Process([sys.executable, "-m", "dashboard.cli", "demo", f"--nodes={self.nodes}", f"--faults={self.faults}",
                        f"--speed={self.speed}", f"--history={self.history}", f"--web.listen-address={self.demo}",
                        "--log-level=warning", *([] if self.dashboard else ["--no-dashboard"])],
                       self.workdir / "demo.log", cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.started.append(demo)
        self.demo_process = demo
        wait_for(lambda: demo.check_alive() or http_get(f"http://{self.demo}/healthz"), 120, "gangwatch demo")
        self.node_names = [f"node{i:04d}" for i in range(1, self.nodes + 1)]
        self.hook = Webhook()
        am_port = None
        if self.with_alertmanager:
            self.am = Alertmanager(self.workdir, self.hook.url)
            self.started.append(self.am)
            am_port = self.am.port
        # The demo's own scrape config: what its /sim/ page tells a user to give Prometheus.
        scrape = yaml.safe_load(http_get(f"http://{self.demo}/sim/prometheus.yml"))["scrape_configs"]
        if not self.with_serve:
            scrape = [c for c in scrape if c["job_name"] != "gangwatch-serve"]
        rules = fast_rules(self.workdir / "rules", self.for_seconds) if self.for_seconds is not None else \
            [RULES / "recording.yml", RULES / "alerts.yml"]
        self.prom = Prometheus(self.workdir, scrape, [*rules, *self.extra_rules], alertmanager_port=am_port,
                               interval=self.interval, external_labels={"cluster": "demo"}, self_scrape=self.self_scrape,
                               scrape_timeout=self.scrape_timeout)
        self.started.append(self.prom)
        self.prom.wait_targets_up({c["job_name"] for c in scrape}, timeout=self.up_timeout)

    def alerts_state(self) -> str:
        """What Prometheus, Alertmanager and the webhook hold now (for a timeout's message)."""
        return (f"Prometheus alerts: {json.dumps(self.prom.alerts())[:3000]}\n"
                + (f"Alertmanager alerts: {json.dumps(self.am.alerts())[:3000]}\n" if self.with_alertmanager else "")
                + f"webhook: {json.dumps(self.hook.payloads)[:3000]}\n"
                f"stalled: {json.dumps(self.prom.query('gangwatch_job_stalled == 1'))[:1500]}\n"
                f"faults: {json.dumps(self.faults_now())[:1500]}")

    def faults_now(self) -> list[dict]:
        return self._faults_doc()["faults"]

    def sim_now(self) -> float:
        """The simulated clock (unix seconds)."""
        return float(self._faults_doc()["now"])

    def _faults_doc(self) -> dict:
        body = http_get(f"http://{self.demo}/api/v1/sim/faults")
        if body is None:
            raise RuntimeError(f"gangwatch demo does not answer at {self.demo}")
        return json.loads(body)

    def ground_truth(self, kind: str) -> dict | None:
        """The demo's record of the first fault of `kind` once it has started, else None."""
        return next((f for f in self.faults_now() if f["kind"] == kind), None)

    @staticmethod
    def grafana_queries() -> list[tuple[str, str]]:
        """Every Grafana dashboard query, as ("dashboard/panel title", expr with $variables)."""
        from tests.test_grafana import BUILD  # the generator, loaded once

        return [(f"{name}/{p['title']}", t["expr"]) for name, d in BUILD.DASHBOARDS.items()
                for p in BUILD.dashboard(d)["panels"] for t in p.get("targets", [])]

    def grafana_queries_without_data(self, variables: dict[str, str] | None = None) -> list[tuple[str, str]]:
        """("dashboard/panel title", expr) of each Grafana query this Prometheus answers with nothing
        (variables All unless given)."""
        values = {"node": ".*", "job": ".*", **(variables or {})}
        missing = []
        for where, expr in self.grafana_queries():
            q = expr
            for var, value in values.items():
                q = q.replace(f"${var}", value)
            if not self.prom.query(grafana_to_promql(q)):
                missing.append((where, expr))
        return missing

    def __exit__(self, *exc) -> None:
        for p in reversed(self.started):
            p.stop()
        self.started.clear()
        if hasattr(self, "hook"):
            self.hook.stop()
