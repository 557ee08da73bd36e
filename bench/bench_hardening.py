#!/usr/bin/env python3
"""Hostile clients, slow upstreams and oversized inputs (issue 20), measured on the real commands.

Part 1 - idle connections. For each server (`gangwatch agent`, `gangwatch slurm-exporter` with no
Slurm on its PATH, `gangwatch serve --snapshot`, and Debian's prometheus-node-exporter as the peer),
plain and over TLS: open N idle TCP connections (default 1,000; over TLS they never send a
ClientHello, the attack that froze `serve`), then time M normal requests, each on a new connection
(with its TLS handshake). Goal: the slowest <= 1 s. Prints ours beside node_exporter's.

Part 2 - 200 concurrent scrapers. 200 threads each open a connection, GET /metrics, read to the
close: in 10 bursts (all 200 at once), then in a tight loop for a few seconds, against the agent and
node_exporter (same collectors). Goal: agent p99 <= 200 ms. The client is Python on the same
machine: node_exporter's figure shows what the client costs (it also answers 503 past its
--web.max-requests of 40, counted as errors).

Part 3 - bad inputs. Each bad input of the issue runs as its own process; prints its peak RSS
(wait4's ru_maxrss) and wall time beside the floor (`gangwatch backfill --help`: the interpreter
and imports). Goal: <= 500 MB and <= 60 s each. Serve's static cache: RSS after 100 made-up
fingerprints of plotly.js, beside its RSS after the real one.

Part 4 - trickling upstream. Every CLI with an outbound request against a server that answers
200 and then sends one byte every 2 s; prints its wall time beside its --timeout. Goal: <= timeout
+ 1 s.

Usage: python bench/bench_hardening.py [--idle 1000] [--requests 5] [--scrapers 200] [--seconds 5]
                                       [--skip-rss] [--skip-scrapers] [--baseline DIR]
(--baseline DIR: another checkout's servers, e.g. the code before this change, in parts 1 and 2.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.trickle import TrickleServer  # noqa: E402

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
GANGWATCH = [sys.executable, "-m", "dashboard.cli"]
COLLECTORS = ("cpu", "meminfo", "loadavg")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def make_tls(tmp: Path) -> tuple[Path, Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=bench",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    cfg = tmp / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    return cert, key, cfg


def snapshot_file(tmp: Path) -> Path:
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.slurm_view import build_snapshot

    sim = Simulation(SimConfig(nodes=16, seed=1, start=time.time() - 600, history_seconds=600))
    p = tmp / "snapshot.json"
    p.write_text(json.dumps(build_snapshot(sim).to_dict()))
    return p


class Server:
    def __init__(self, name: str, argv: list[str], port: int, path: str, tls: bool, src: Path = REPO):
        self.name, self.argv, self.port, self.path, self.tls = name, argv, port, path, tls
        env = {**os.environ, "PYTHONPATH": str(src)}  # another checkout's code (--baseline) comes first
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=src, env=env,
                                     preexec_fn=lambda: raise_nofile(8192))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.get(timeout=2) == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start: {argv}")

    def get(self, timeout: float = 5.0) -> int:
        if self.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", self.path, headers={"Connection": "close"})
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def server_specs(tmp: Path, cfg: Path, snap: Path, tls: bool, baseline: Path | None = None
                 ) -> list[tuple[str, list[str], str, int, Path]]:
    web = ["--web.config.file", str(cfg)] if tls else []
    empty = tmp / "no-slurm"
    empty.mkdir(exist_ok=True)
    port = free_port()
    specs = [("node_exporter (peer)", [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                                       "--collector.disable-defaults"] + [f"--collector.{c}" for c in COLLECTORS]
              + ([f"--web.config.file={cfg}"] if tls else []), "/metrics", port, REPO)]
    for src, tag in ((REPO, ""), (baseline, " (baseline)")) if baseline else ((REPO, ""),):
        ports = [free_port() for _ in range(3)]
        specs += [
            ("gangwatch agent" + tag, GANGWATCH + ["agent", "--web.listen-address", f"127.0.0.1:{ports[0]}"] + web,
             "/metrics", ports[0], src),
            ("gangwatch slurm-exporter" + tag, GANGWATCH + ["slurm-exporter", "--web.listen-address",
                                                           f"127.0.0.1:{ports[1]}", "--slurm.bin-dir", str(empty)] + web,
             "/metrics", ports[1], src),
            ("gangwatch serve" + tag, GANGWATCH + ["serve", "--snapshot", str(snap), "--web.listen-address",
                                                  f"127.0.0.1:{ports[2]}"] + web, "/healthz", ports[2], src)]
    return specs


def idle_part(tmp: Path, cfg: Path, snap: Path, n_idle: int, n_requests: int, baseline: Path | None) -> None:
    print(f"\n## 1. {n_idle} idle connections open, then {n_requests} normal requests (each on a new connection)")
    print(f"{'server':<36} {'tls':<4} {'slowest s':>10} {'median s':>9} {'answered':>9}")
    for tls in (False, True):
        for name, argv, path, port, src in server_specs(tmp, cfg, snap, tls, baseline):
            srv = Server(name, argv, port, path, tls, src)
            held = []
            try:
                for _ in range(n_idle):
                    try:
                        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                    except OSError:
                        break
                time.sleep(2.0)  # the server has accepted (or shed) them all: the steady state of the attack
                times, ok = [], 0
                for _ in range(n_requests):
                    t0 = time.monotonic()
                    try:
                        ok += srv.get(timeout=5) == 200
                    except OSError:
                        pass
                    times.append(time.monotonic() - t0)
                first = times[0]
                times.sort()
                print(f"{name:<36} {'yes' if tls else 'no':<4} {times[-1]:>10.3f} {times[len(times) // 2]:>9.3f} "
                      f"{ok:>4}/{n_requests:<4} (idle held: {len(held)}; first {first:.3f} s)", flush=True)
            finally:
                for s in held:
                    s.close()
                srv.stop()


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


REQUEST = b"GET /metrics HTTP/1.1\r\nHost: bench\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"


def raw_scrape(port: int) -> bool:
    """One scrape on a new connection, read to the server's close: the cheapest client Python has,
    so that 200 of them measure the server more than themselves."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(REQUEST)
            head = s.recv(65536)
            while s.recv(65536):
                pass
            return head.startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def scrapers_part(tmp: Path, cfg: Path, snap: Path, scrapers: int, seconds: float, baseline: Path | None) -> None:
    """Two shapes of load: bursts (all scrapers at once, one scrape each, as when many Prometheus
    servers or a restart align their scrapes; what overflowed the old backlog of 64) and a tight
    loop for `seconds` (a throughput test: latency is then scrapers / throughput)."""
    print(f"\n## 2. {scrapers} concurrent scrapers (a new connection per scrape)")
    print(f"{'server':<36} {'load':<10} {'scrapes':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, argv, path, port, src in server_specs(tmp, cfg, snap, False, baseline):
        if "agent" not in name and "node_exporter" not in name:
            continue
        srv = Server(name, argv, port, "/metrics", False, src)
        for shape in ("bursts", "loop"):
            lat: list[float] = []
            errors = [0]
            rounds = 10
            stop = time.monotonic() + seconds
            gate = threading.Barrier(scrapers)

            def one() -> None:
                t0 = time.monotonic()
                if raw_scrape(port):
                    lat.append(time.monotonic() - t0)
                else:
                    errors[0] += 1

            def scraper() -> None:
                if shape == "bursts":
                    for _ in range(rounds):
                        gate.wait()  # every scraper starts its scrape together
                        one()
                        gate.wait()
                        time.sleep(0.2)
                else:
                    gate.wait()
                    while time.monotonic() < stop:
                        one()

            threads = [threading.Thread(target=scraper, daemon=True) for _ in range(scrapers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(seconds + 120)
            print(f"{name:<36} {shape:<10} {len(lat):>8} {errors[0]:>7} {percentile(lat, .5) * 1000:>8.1f} "
                  f"{percentile(lat, .99) * 1000:>8.1f} {max(lat, default=float('nan')) * 1000:>8.1f}", flush=True)
        srv.stop()


def run_measured(argv: list[str], timeout: float = 120.0) -> tuple[int | None, float, float, str]:
    """-> (exit status, wall s, peak RSS MB, last stderr line) of one process."""
    t0 = time.monotonic()
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            status = None
            break
        time.sleep(0.02)
    wall = time.monotonic() - t0
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    rc = None if status is None else os.waitstatus_to_exitcode(status)
    return rc, wall, usage.ru_maxrss / 1024, (lines[-1] if lines else "")[:90]


def bad_inputs(tmp: Path, snap: Path) -> list[tuple[str, list[str]]]:
    doc = json.loads(snap.read_text())
    cases = []
    for label, field, value in (("gpus_total=1e9", "gpus_total", 10 ** 9), ("gpus_total=1e7", "gpus_total", 10 ** 7),
                                ("memory_total_bytes=1e30", "memory_total_bytes", 10 ** 30)):
        d = json.loads(json.dumps(doc))
        d["nodes"][0][field] = value
        p = tmp / f"{field}-{value}.json"
        p.write_text(json.dumps(d))
        cases.append((f"backfill --snapshot ({label})", GANGWATCH + ["backfill", "--snapshot", str(p)]))
    nested = tmp / "nested.json"
    nested.write_text('{"taken_at": 1, "jobs": ' + "[" * 200_000 + "]" * 200_000 + "}")
    cases.append(("backfill --snapshot (nested 200k deep)", GANGWATCH + ["backfill", "--snapshot", str(nested)]))
    cases.append(("simulate --swf /dev/zero", GANGWATCH + ["simulate", "--swf", "/dev/zero", "--procs", "8"]))
    swf = tmp / "t.swf"
    swf.write_text("; MaxProcs: 8\n1 0 -1 60 2 -1 -1 2 90 -1 1 1 1 -1 -1 -1 -1 -1\n")
    cases.append(("simulate --out /dev/full", GANGWATCH + ["simulate", "--swf", str(swf), "--out", "/dev/full"]))
    cases.append(("diagnose --bundle /nonexistent", GANGWATCH + ["diagnose", "--bundle", "/nonexistent"]))
    cases.append(("capture --out /proc/x", GANGWATCH + ["capture", "--prometheus", "http://127.0.0.1:9", "--out",
                                                        "/proc/x", "--timeout", "3"]))
    return cases


def rss_part(tmp: Path, snap: Path) -> None:
    print("\n## 3. bad inputs: one process each (goal <= 500 MB, <= 60 s)")
    print(f"{'input':<44} {'exit':>4} {'wall s':>7} {'RSS MB':>7}  message")
    rc, wall, rss, _ = run_measured(GANGWATCH + ["backfill", "--help"])
    print(f"{'floor: backfill --help':<44} {rc!s:>4} {wall:>7.2f} {rss:>7.0f}")
    for label, argv in bad_inputs(tmp, snap):
        rc, wall, rss, msg = run_measured(argv)
        print(f"{label:<44} {rc!s:>4} {wall:>7.2f} {rss:>7.0f}  {msg}", flush=True)
    flood = TrickleServer(mode="flood")
    try:
        for label, argv in (("backfill --slurm-exporter (endless body)",
                             GANGWATCH + ["backfill", "--slurm-exporter", flood.url, "--timeout", "30"]),
                            ("diagnose --prometheus (endless body)",
                             GANGWATCH + ["diagnose", "--prometheus", flood.url, "--snapshot", str(snap), "--timeout",
                                          "30"])):
            rc, wall, rss, msg = run_measured(argv)
            print(f"{label:<44} {rc!s:>4} {wall:>7.2f} {rss:>7.0f}  {msg}", flush=True)
    finally:
        flood.close()
    serve_cache(snap)


def serve_cache(snap: Path) -> None:
    import psutil

    port = free_port()
    srv = Server("serve", GANGWATCH + ["serve", "--snapshot", str(snap), "--web.listen-address", f"127.0.0.1:{port}"],
                 port, "/healthz", False)
    try:
        proc = psutil.Process(srv.proc.pid)

        def fetch(path: str) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
            conn.getresponse().read()
            conn.close()

        fetch("/_dash-component-suites/plotly/package_data/plotly.min.js")
        time.sleep(2)
        before = proc.memory_info().rss / 2 ** 20
        for i in range(100):
            fetch(f"/_dash-component-suites/plotly/package_data/plotly.v9_9_{i}m{i:08x}.min.js")
            fetch(f"/assets/x{i}/../style.css")
        after = proc.memory_info().rss / 2 ** 20
        print(f"{'serve: 100 made-up plotly.js fingerprints':<44} {'':>4} {'':>7} {after:>7.0f}  "
              f"(after the real one: {before:.0f} MB; growth {after - before:+.0f} MB)")
    finally:
        srv.stop()


def trickle_part(tmp: Path, snap: Path) -> None:
    print("\n## 4. every CLI against a server trickling one byte every 2 s (goal: wall <= --timeout + 1 s)")
    print(f"{'command':<52} {'--timeout':>9} {'wall s':>7} {'exit':>5}")
    srv = TrickleServer(interval=2.0)
    t = 5
    try:
        cmds = [("backfill --slurm-exporter", ["backfill", "--slurm-exporter", srv.url]),
                ("diagnose --prometheus", ["diagnose", "--prometheus", srv.url, "--snapshot", str(snap)]),
                ("diagnose --prometheus --snapshot URL", ["diagnose", "--prometheus", "http://127.0.0.1:9",
                                                         "--snapshot", srv.url + "/api/v1/snapshot"]),
                ("capture --prometheus", ["capture", "--prometheus", srv.url, "--out", str(tmp / "cap")])]
        for label, args in cmds:
            rc, wall, _, _ = run_measured(GANGWATCH + args + ["--timeout", str(t)])
            print(f"{label:<52} {t:>9} {wall:>7.2f} {rc!s:>5}", flush=True)
        # serve --targets: one trickling target beside a healthy one; /api/v1/findings stays fast
        from dashboard.sources.embedded import EmbeddedSource

        src = EmbeddedSource([srv.url + "/metrics", f"127.0.0.1:{free_port()}"], timeout=t)
        t0 = time.monotonic()
        src.scrape()
        print(f"{'serve --targets: one scrape cycle (trickling + dead)':<52} {t:>9} {time.monotonic() - t0:>7.2f}")
        src.close()
    finally:
        srv.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--scrapers", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--skip-scrapers", action="store_true")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout (e.g. before this change): its servers measured too in parts 1 and 2")
    args = ap.parse_args(argv)
    raise_nofile(args.idle * 2 + 1024)
    if not os.path.exists(NODE_EXPORTER):
        print(f"{NODE_EXPORTER} not found: apt-get install prometheus-node-exporter", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        _, _, cfg = make_tls(tmp)
        snap = snapshot_file(tmp)
        idle_part(tmp, cfg, snap, args.idle, args.requests, args.baseline)
        if not args.skip_scrapers:
            scrapers_part(tmp, cfg, snap, args.scrapers, args.seconds, args.baseline)
        if not args.skip_rss:
            rss_part(tmp, snap)
        trickle_part(tmp, snap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
