"""The simulated cluster behind a real Prometheus, the real `gangwatch serve`, Alertmanager and a
webhook: what tests/test_rules_e2e.py part B and bench/bench_rules.py run.

- `gangwatch demo` serves every virtual node's agent metrics (`/metrics?target=NODE`) and the
  slurm-exporter's (`/metrics`, `/api/v1/snapshot`); Prometheus scrapes them as the jobs
  `gangwatch-agent` (with the `node` relabelling of rules/prometheus.example.yml) and
  `gangwatch-slurm`, exactly as a site would scrape real agents and a real exporter;
- `gangwatch serve --slurm-exporter <demo> --prometheus <this Prometheus>` diagnoses the jobs and
  exports its findings on `/metrics`, scraped as `gangwatch-serve`;
- Prometheus evaluates rules/*.yml (`for:` cut short unless told) and sends to Alertmanager with
  rules/alertmanager.example.yml's routes and inhibitions, delivering to a webhook.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.promql_names import grafana_to_promql
from tests.support.promstack import (REPO, Alertmanager, Process, Prometheus, Webhook, fast_rules, free_port,
                                     http_get, node_relabel, wait_for)

RULES = REPO / "rules"


class DemoStack:
    def __init__(self, workdir: Path, nodes: int = 16, faults: str = "ost_slow@61m+4m", speed: float = 1.0,
                 with_serve: bool = True, with_alertmanager: bool = True, interval: str = "1s",
                 for_seconds: int | None = 2, history: float = 3600.0, extra_rules: list[Path] = (),
                 self_scrape: bool = False, scrape_timeout: str | None = None):
        self.workdir = workdir
        self.nodes, self.faults, self.speed, self.history = nodes, faults, speed, history
        self.with_serve, self.with_alertmanager = with_serve, with_alertmanager
        self.interval, self.for_seconds = interval, for_seconds
        self.extra_rules, self.self_scrape, self.scrape_timeout = list(extra_rules), self_scrape, scrape_timeout
        self.started: list = []

    def __enter__(self) -> "DemoStack":
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _python(self, name: str, args: list[str]) -> tuple[Process, str]:
        port = free_port()
        proc = Process([sys.executable, "-m", "dashboard.cli", *args, f"--web.listen-address=127.0.0.1:{port}",
                        "--log-level=warning"], self.workdir / f"{name}.log", cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
        self.started.append(proc)
        return proc, f"127.0.0.1:{port}"

    def _start(self) -> None:
        demo, self.demo = self._python("demo", ["demo", f"--nodes={self.nodes}", f"--faults={self.faults}",
                                                f"--speed={self.speed}", f"--history={self.history}"])
        wait_for(lambda: demo.check_alive() or http_get(f"http://{self.demo}/healthz"), 120, "gangwatch demo")
        self.demo_process = demo
        self.node_names = [f"node{i:04d}" for i in range(1, self.nodes + 1)]
        self.hook = Webhook()
        am_port = None
        if self.with_alertmanager:
            self.am = Alertmanager(self.workdir, self.hook.url)
            self.started.append(self.am)
            am_port = self.am.port
        scrape = [
            {"job_name": "gangwatch-slurm", "static_configs": [{"targets": [self.demo]}]},
            {"job_name": "gangwatch-agent", "metrics_path": "/metrics",
             "static_configs": [{"targets": self.node_names}],
             # Multi-target, as the blackbox exporter: the target is a parameter, the address the demo's.
             "relabel_configs": [{"source_labels": ["__address__"], "target_label": "__param_target"},
                                 {"source_labels": ["__param_target"], "target_label": "instance"},
                                 {"target_label": "__address__", "replacement": self.demo},
                                 *[dict(r, source_labels=["node", "instance"]) for r in node_relabel()]]},
        ]
        serve_port = free_port() if self.with_serve else None
        if self.with_serve:
            scrape.append({"job_name": "gangwatch-serve", "static_configs": [{"targets": [f"127.0.0.1:{serve_port}"]}]})
        rules = fast_rules(self.workdir / "rules", self.for_seconds) if self.for_seconds is not None else \
            [RULES / "recording.yml", RULES / "alerts.yml"]
        self.prom = Prometheus(self.workdir, scrape, [*rules, *self.extra_rules], alertmanager_port=am_port,
                               interval=self.interval, external_labels={"cluster": "demo"}, self_scrape=self.self_scrape,
                               scrape_timeout=self.scrape_timeout)
        self.started.append(self.prom)
        if self.with_serve:
            proc = Process([sys.executable, "-m", "dashboard.cli", "serve", f"--slurm-exporter=http://{self.demo}",
                            f"--prometheus={self.prom.url}", f"--web.listen-address=127.0.0.1:{serve_port}",
                            "--poll-interval=2", "--log-level=warning"], self.workdir / "serve.log", cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
            self.started.append(proc)
            wait_for(lambda: proc.check_alive() or http_get(f"http://127.0.0.1:{serve_port}/healthz"), 120, "gangwatch serve")
            self.serve = f"127.0.0.1:{serve_port}"
        jobs = {"gangwatch-slurm", "gangwatch-agent"} | ({"gangwatch-serve"} if self.with_serve else set())
        self.prom.wait_targets_up(jobs, timeout=120)

    def ground_truth(self, kind: str) -> dict | None:
        """The demo's record of the first fault of `kind` once it has started, else None."""
        faults = json.loads(http_get(f"http://{self.demo}/api/v1/sim/faults") or b'{"faults": []}')["faults"]
        return next((f for f in faults if f["kind"] == kind), None)

    def grafana_queries_without_data(self, variables: dict[str, str] | None = None) -> list[str]:
        from tests.test_grafana import BUILD  # the generator, loaded once

        values = {"node": ".*", "job": ".*", **(variables or {})}
        missing = []
        for name, d in BUILD.DASHBOARDS.items():
            for p in BUILD.dashboard(d)["panels"]:
                for t in p.get("targets", []):
                    expr = t["expr"]
                    for var, value in values.items():
                        expr = expr.replace(f"${var}", value)
                    if not self.prom.query(grafana_to_promql(expr)):
                        missing.append(f"{name}/{p['title']}: {t['expr']}")
        return missing

    def __exit__(self, *exc) -> None:
        for p in reversed(self.started):
            p.stop()
        self.started.clear()
        if hasattr(self, "hook"):
            self.hook.stop()
