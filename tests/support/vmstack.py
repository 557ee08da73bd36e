"""A real VictoriaMetrics single node, vmagent shards and vmalert on loopback, for tests and benchmarks.

Debian's `victoria-metrics` 1.79 package (victoria-metrics, vmagent, vmalert). Every process runs
on private ports with temporary storage and is stopped by its own PID (promstack.Process). The
flags are those of deploy/victoriametrics/ where they matter to the result:
`-search.latencyOffset=0s` (VictoriaMetrics otherwise hides the last 30 s, so a query at "now"
would disagree with Prometheus) and `-search.disableCache` for imported history (its rollup cache
would otherwise keep answers computed before an import finished).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import yaml

from tests.support.promstack import Process, Prometheus, free_port, http_get, wait_for

BINARIES = ("victoria-metrics", "vmagent", "vmalert")


def available() -> bool:
    return all(shutil.which(b) for b in BINARIES)


class VictoriaMetrics:
    def __init__(self, workdir: Path, extra_flags: list[str] = (), name: str = "vm", port: int | None = None,
                 cache: bool = False):
        self.workdir, self.name, self.extra_flags = workdir, name, list(extra_flags)
        self.cache = cache  # live scrapes only (benchmarks): imported history needs it off (module doc)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = workdir / f"{name}-data"
        self.start()

    def start(self) -> None:
        self.process = Process([shutil.which("victoria-metrics") or "victoria-metrics",
                                f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{self.port}",
                                "-retentionPeriod=100y", "-search.latencyOffset=0s", *([] if self.cache else ["-search.disableCache"]),
                                "-loggerLevel=ERROR", *self.extra_flags],
                               self.workdir / f"{self.name}.log")
        wait_for(lambda: self.process.check_alive() or http_get(self.url + "/health"), 30, "VictoriaMetrics ready")

    def import_openmetrics(self, path: Path) -> None:
        """A bundle's metrics.om (timestamps in seconds) through /api/v1/import/prometheus, then a
        flush so queries see every sample."""
        self.import_text(b"".join(_millis(line) for line in path.read_bytes().splitlines(keepends=True)
                                  if not line.startswith(b"#")))

    def import_text(self, body: bytes) -> None:
        """Prometheus text lines with timestamps in milliseconds through /api/v1/import/prometheus,
        then a flush so queries see every sample."""
        req = urllib.request.Request(self.url + "/api/v1/import/prometheus", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
        http_get(self.url + "/internal/force_flush", timeout=60)

    # the same Prometheus query API: promstack's client works unchanged
    query = Prometheus.query

    def stop(self) -> None:
        self.process.stop()


class VMAgent:
    """One scrape shard: `member` of `members`, writing to `remote_write` (VictoriaMetrics); with
    `replication` > 1 each target is scraped by that many shards (VictoriaMetrics then deduplicates)."""

    def __init__(self, workdir: Path, scrape_configs: list[dict], remote_write: str, member: int = 0,
                 members: int = 1, interval: str = "1s", external_labels: dict | None = None, replication: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        name = f"vmagent-{member}"
        conf = {"global": {"scrape_interval": interval, "scrape_timeout": interval,
                           **({"external_labels": external_labels} if external_labels else {})},
                "scrape_configs": scrape_configs}
        config = workdir / f"{name}.yml"
        config.write_text(yaml.safe_dump(conf, sort_keys=False))
        self.process = Process([shutil.which("vmagent") or "vmagent", f"-promscrape.config={config}",
                                f"-remoteWrite.url={remote_write}/api/v1/write",
                                f"-remoteWrite.tmpDataPath={workdir / (name + '-queue')}",
                                f"-promscrape.cluster.membersCount={members}", f"-promscrape.cluster.memberNum={member}",
                                f"-promscrape.cluster.replicationFactor={replication}",
                                "-remoteWrite.flushInterval=200ms", f"-httpListenAddr=127.0.0.1:{self.port}",
                                "-loggerLevel=ERROR"], workdir / f"{name}.log")
        wait_for(lambda: self.process.check_alive() or http_get(self.url + "/health"), 30, f"{name} ready")

    def targets(self) -> dict:
        body = http_get(self.url + "/api/v1/targets")
        return json.loads(body)["data"] if body else {}

    def stop(self) -> None:
        self.process.stop()


class VMAlert:
    """vmalert evaluating `rule_files` against `datasource`, writing recording rules back to it and
    notifying Alertmanager."""

    def __init__(self, workdir: Path, rule_files: list[Path], datasource: str, alertmanager: str | None,
                 interval: str = "1s", extra_flags: list[str] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = Process([shutil.which("vmalert") or "vmalert", *(f"-rule={p}" for p in rule_files),
                                f"-datasource.url={datasource}", f"-remoteWrite.url={datasource}",
                                f"-remoteRead.url={datasource}",
                                *([f"-notifier.url={alertmanager}"] if alertmanager else []),
                                f"-evaluationInterval={interval}", f"-httpListenAddr=127.0.0.1:{self.port}",
                                "-remoteWrite.flushInterval=200ms", "-loggerLevel=ERROR", *extra_flags],
                               workdir / "vmalert.log")
        wait_for(lambda: self.process.check_alive() or http_get(self.url + "/health"), 30, "vmalert ready")

    def alerts(self, state: str | None = None, **labels) -> list[dict]:
        body = http_get(self.url + "/api/v1/alerts")
        found = (json.loads(body)["data"]["alerts"] or []) if body else []  # `null` while none is active
        return [a for a in found if (state is None or a["state"] == state)
                and all(a["labels"].get(k) == v for k, v in labels.items())]

    def groups(self) -> list[dict]:
        body = http_get(self.url + "/api/v1/groups")
        return json.loads(body)["data"]["groups"] if body else []

    def stop(self) -> None:
        self.process.stop()


def _millis(line: bytes) -> bytes:
    """An OpenMetrics sample line (timestamp in seconds) in the Prometheus text format VictoriaMetrics
    imports (timestamp in milliseconds)."""
    head, _, ts = line.rstrip(b"\n").rpartition(b" ")
    return b"%s %d\n" % (head, round(float(ts) * 1000))
