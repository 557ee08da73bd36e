"""A real Prometheus and Alertmanager on loopback for end-to-end tests and benchmarks.

Debian's `prometheus` 2.42 and `prometheus-alertmanager` 0.25 run on private ports with temporary
storage (never Debian's defaults), a webhook receiver records what Alertmanager delivers, and every
process started here is stopped by its own PID. Recipes and timings:
../shared/recipes/prometheus/README.md §1 (first scrape ~5-6 s after start; poll, never sleep).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str, interval: float = 0.2, context=None):
    """Poll `pred` until it returns something truthy; raise TimeoutError naming `what` (and, when
    given, what `context()` says about the state of things then)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                               + (f"\n{context()}" if context else ""))
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except OSError:
        return None


def fast_rules(dest: Path, for_seconds: int = 2) -> list[Path]:
    """Copies of rules/recording.yml and alerts.yml with every alert's `for:` cut to `for_seconds`,
    so an end-to-end test sees alerts fire within seconds. Expressions, labels and annotations are
    the real ones; promtool's unit tests (rules/tests/) cover the real `for:` durations."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in ("recording.yml", "alerts.yml"):
        doc = yaml.safe_load((RULES / name).read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                if "alert" in rule and "for" in rule:
                    rule["for"] = f"{for_seconds}s"
        path = dest / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(path)
    return out


class Webhook:
    """An HTTP receiver for Alertmanager's webhook: keeps every delivered payload."""

    def __init__(self):
        self.payloads: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.payloads.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, status: str | None = None, **labels) -> list[dict]:
        """Every delivered alert (`status` firing or resolved, when given) whose labels include
        `labels`, with the receiver it was delivered to."""
        with self.lock:
            payloads = list(self.payloads)
        return [dict(a, receiver=p["receiver"]) for p in payloads for a in p["alerts"]
                if (status is None or a["status"] == status) and all(a["labels"].get(k) == v for k, v in labels.items())]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Process:
    """A child process started with a log file, stopped by its PID."""

    def __init__(self, cmd: list[str], log: Path, **kw):
        self.cmd = cmd
        self.log = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, **kw)

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.cmd[0]} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def alertmanager_config(webhook_url: str) -> dict:
    """rules/alertmanager.example.yml with its real routes and inhibit rules, every receiver
    pointed at `webhook_url`, and timings cut to seconds."""
    conf = yaml.safe_load((RULES / "alertmanager.example.yml").read_text())
    for r in conf["receivers"]:
        r["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]

    def fast(route):
        for key, value in (("group_wait", "0s"), ("group_interval", "1s"), ("repeat_interval", "1h")):
            if key in route or route is conf["route"]:
                route[key] = value
        for child in route.get("routes", []):
            fast(child)

    fast(conf["route"])
    return conf


class Alertmanager:
    def __init__(self, workdir: Path, webhook_url: str, binary: str = "prometheus-alertmanager"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "alertmanager.yml"
        config.write_text(yaml.safe_dump(alertmanager_config(webhook_url)))
        self.process = Process([shutil.which(binary) or binary, f"--config.file={config}",
                                f"--storage.path={workdir / 'am-data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                                "--cluster.listen-address=", "--log.level=warn"], workdir / "alertmanager.log")
        wait_for(lambda: self.process.check_alive() or http_get(self.url + "/-/ready"), 30, "Alertmanager ready")

    def alerts(self, **labels) -> list[dict]:
        flt = "&".join("filter=" + urllib.parse.quote(f'{k}="{v}"') for k, v in labels.items())
        body = http_get(f"{self.url}/api/v2/alerts?{flt}")
        return json.loads(body) if body else []

    def stop(self):
        self.process.stop()


class Prometheus:
    """Prometheus with the given scrape configs and rule files, 1 s scrape and evaluation."""

    def __init__(self, workdir: Path, scrape_configs: list[dict], rule_files: list[Path] = (),
                 alertmanager_port: int | None = None, interval: str = "1s", extra_flags: list[str] = (),
                 external_labels: dict | None = None, self_scrape: bool = False, scrape_timeout: str | None = None,
                 env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if self_scrape:  # its own telemetry, e.g. prometheus_rule_group_last_duration_seconds
            scrape_configs = [*scrape_configs, {"job_name": "prometheus",
                                                "static_configs": [{"targets": [f"127.0.0.1:{self.port}"]}]}]
        conf = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                           "scrape_timeout": scrape_timeout or (interval if int(interval[:-1]) < 10 else "10s"),
                           **({"external_labels": external_labels} if external_labels else {})},
                "rule_files": [str(p) for p in rule_files],  # absolute: relative ones are relative to the config's dir
                "scrape_configs": scrape_configs}
        if alertmanager_port:
            conf["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(conf, sort_keys=False))
        check = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60)
        if check.returncode != 0:
            raise RuntimeError(f"promtool check config failed:\n{check.stdout}{check.stderr}")
        self.process = Process([shutil.which("prometheus") or "prometheus", f"--config.file={config}",
                                f"--storage.tsdb.path={workdir / 'prom-data'}",
                                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn", *extra_flags],
                               workdir / "prometheus.log", env={**os.environ, **env} if env else None)
        wait_for(lambda: self.process.check_alive() or http_get(self.url + "/-/ready"), 30, "Prometheus ready")

    def query(self, expr: str) -> list[dict]:
        body = http_get(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=30)
        if body is None:
            raise RuntimeError(f"query failed: {expr}")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {doc}")
        return doc["data"]["result"]

    def query_error(self, expr: str) -> str | None:
        """None when Prometheus evaluates `expr`, else its error text."""
        url = f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            doc = json.loads(exc.read() or b"{}")
        return None if doc.get("status") == "success" else doc.get("error", "unknown error")

    def wait_targets_up(self, jobs: set[str], timeout: float = 60):
        def all_up():
            self.process.check_alive()
            got = {r["metric"]["job"] for r in self.query("up == 1")}
            return jobs <= got
        wait_for(all_up, timeout, f"first successful scrape of {sorted(jobs)}")

    def alerts(self, state: str | None = None, **labels) -> list[dict]:
        """Prometheus' active alerts (`state` pending or firing, when given) whose labels include `labels`."""
        body = http_get(self.url + "/api/v1/alerts")
        found = json.loads(body)["data"]["alerts"] if body else []
        return [a for a in found if (state is None or a["state"] == state)
                and all(a["labels"].get(k) == v for k, v in labels.items())]

    def stop(self):
        self.process.stop()


def node_relabel() -> list[dict]:
    """The `node` label relabelling of rules/prometheus.example.yml (one source of truth)."""
    conf = yaml.safe_load((RULES / "prometheus.example.yml").read_text())
    agent = next(c for c in conf["scrape_configs"] if c["job_name"] == "gangwatch-agent")
    return agent["relabel_configs"]
