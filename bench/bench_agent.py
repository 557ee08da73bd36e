#!/usr/bin/env python3
"""CPU per scrape and scrape latency: `gangwatch agent` against Debian's prometheus-node-exporter.

Both servers run in this one run, on 127.0.0.1 random ports, over the same /proc and /sys (the live
machine's, or with --fixtures node_exporter's fixture trees), with comparable collector sets:
node_exporter `--collector.disable-defaults` plus cpu, meminfo, pressure, diskstats, netdev,
infiniband, filesystem; ours with the same names enabled and every other registered collector
disabled (a name not registered yet is simply absent and listed as such).

Part 1 - CPU per scrape. Scrapes go out as Prometheus sends them (its Accept header, gzip, one
kept-alive connection). Ours runs with `--scrape.cache-ttl 0` so every scrape really collects.
The figure is the server's CPU time (user+system of the process, of its live descendants and of
its reaped children, from psutil/procfs) over N scrapes after a warm-up, divided by N. The two
servers are measured in alternating rounds so that load from other processes on a shared machine
falls on both alike. Goal (issue 2): ours <= 0.5x node_exporter. Besides the overall figure it prints
each round's ratio (CPU from schedstat, in nanoseconds) and their median, the figure least moved by
other load on a shared machine, and both servers' series counts.

Part 2 - concurrency. 1 and then 10 threads each scrape in a loop for a few seconds; prints latency
percentiles (goal: p99 <= 50 ms with 10 scrapers), the server's CPU, and how many collections ran
(`gangwatch_scrape_collections_total`): ours at the default cache TTL should collect about as often
with 10 scrapers as with 1. node_exporter, which collects on every request, is shown for contrast.

Usage: python bench/bench_agent.py [--scrapes 300] [--rounds 5] [--fixtures] [--skip-concurrency] [--seconds 3]
       [--baseline DIR]  (another checkout's agent in the same rounds: before/after under the same load)
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
HEADERS = {"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "Prometheus/2.45.0"}
COLLECTORS = ("cpu", "meminfo", "pressure", "diskstats", "netdev", "infiniband", "filesystem")
MATCH_NETDEV = ("netclass", "netstat")
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
# Runtime self-metrics each server adds on its own; shown separately so series counts compare data.
SELF_PREFIXES = ("go_", "process_", "promhttp_", "node_scrape_", "node_exporter_build_info",
                 "gangwatch_scrape_", "gangwatch_build_info")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User+system seconds of the process, its reaped children and its live descendants."""
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc] + proc.children(recursive=True):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue  # exited between listing and reading; its parent's children_* has it
        total += t.user + t.system + t.children_user + t.children_system
    return total


def cpu_ns_precise(pid: int) -> int:
    """Nanoseconds on CPU of every live thread of the process and its descendants (schedstat):
    exact where /proc/<pid>/stat counts 10 ms ticks, so a round of 100 scrapes is measured to
    the microsecond; threads that exited are missing, which is why the overall figure uses
    cpu_seconds and only the per-round ratios use this."""
    try:
        procs = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total


class Client:
    """One kept-alive HTTP connection, as Prometheus holds per target."""

    def __init__(self, port: int):
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str = "/metrics") -> tuple[int, bytes, dict[str, str]]:
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                self.conn.request("GET", path, headers=HEADERS)
                resp = self.conn.getresponse()
                body = resp.read()
                return resp.status, body, {k.lower(): v for k, v in resp.getheaders()}
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def decode(body: bytes, headers: dict[str, str]) -> str:
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return body.decode()


def series(text: str) -> tuple[int, int]:
    """(all sample lines, sample lines that are not the server's self-metrics)."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    data = [ln for ln in lines if not ln.startswith(SELF_PREFIXES)]
    return len(lines), len(data)


@dataclass
class Server:
    name: str
    argv: list[str]
    port: int
    proc: subprocess.Popen | None = None
    cpu_s: float = 0.0
    scrapes: int = 0
    rounds: list = None  # CPU ms per scrape in each measured round (schedstat, live threads)
    cwd: Path = REPO
    log: object = None

    def start(self) -> None:
        # A file, not a pipe: node_exporter logs every failing collector on every scrape, and an
        # unread pipe would fill up and block it mid-benchmark.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log, cwd=self.cwd)
        deadline = time.monotonic() + 30
        client = Client(self.port)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"{self.name} exited: {self.log.read().decode(errors='replace')[-2000:]}")
            try:
                status, _, _ = client.get()
                if status == 200:
                    client.close()
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not answer on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()
            self.log = None


def node_exporter_argv(port: int, paths: dict[str, str], extra: tuple[str, ...] = ()) -> list[str]:
    argv = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
            f"--path.procfs={paths['procfs']}", f"--path.sysfs={paths['sysfs']}", f"--path.rootfs={paths['rootfs']}"]
    return argv + [f"--collector.{c}" for c in COLLECTORS + extra]


def agent_argv(port: int, paths: dict[str, str], registered: list[str], cache_ttl: float) -> list[str]:
    argv = [sys.executable, "-m", "dashboard.cli", "agent", "--web.listen-address", f"127.0.0.1:{port}",
            "--scrape.cache-ttl", str(cache_ttl), "--log-level", "warning",
            "--path.procfs", paths["procfs"], "--path.sysfs", paths["sysfs"], "--path.rootfs", paths["rootfs"]]
    for name in registered:
        argv.append(f"--collector.{name}" if name in COLLECTORS else f"--no-collector.{name}")
    return argv


def measure_cpu(servers: list[Server], scrapes: int, warmup: int, rounds: int) -> None:
    clients = {s.name: Client(s.port) for s in servers}
    for s in servers:
        for _ in range(warmup):
            clients[s.name].get()
    per_round = max(1, scrapes // rounds)
    for s in servers:
        s.rounds = []
    for _ in range(rounds):
        for s in servers:
            c = clients[s.name]
            before, before_ns = cpu_seconds(s.proc.pid), cpu_ns_precise(s.proc.pid)
            for _ in range(per_round):
                status, _, _ = c.get()
                if status != 200:
                    raise SystemExit(f"{s.name} answered {status}")
            spent_ns = cpu_ns_precise(s.proc.pid) - before_ns
            s.cpu_s += cpu_seconds(s.proc.pid) - before
            s.scrapes += per_round
            s.rounds.append(spent_ns / 1e6 / per_round)
    for c in clients.values():
        c.close()


def collections_total(port: int) -> float | None:
    c = Client(port)
    try:
        status, body, headers = c.get()
    finally:
        c.close()
    for line in decode(body, headers).splitlines():
        if line.startswith("gangwatch_scrape_collections_total"):
            return float(line.rsplit(" ", 1)[1])
    return None


@dataclass
class LoadResult:
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_ms_per_s: float
    cpu_ms_per_request: float
    collections: float | None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def load(server: Server, scrapers: int, seconds: float, count_collections: bool) -> LoadResult:
    latencies: list[list[float]] = [[] for _ in range(scrapers)]
    errors = [0] * scrapers
    stop = time.monotonic() + seconds
    start_gate = threading.Barrier(scrapers + 1)

    def loop(i: int) -> None:
        c = Client(server.port)
        start_gate.wait()
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                status, _, _ = c.get()
            except OSError:
                status = 0
            latencies[i].append(time.perf_counter() - t0)
            if status != 200:
                errors[i] += 1
        c.close()

    before_coll = collections_total(server.port) if count_collections else None
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(scrapers)]
    for t in threads:
        t.start()
    cpu0, t0 = cpu_seconds(server.proc.pid), time.monotonic()
    start_gate.wait()
    for t in threads:
        t.join()
    cpu = cpu_seconds(server.proc.pid) - cpu0
    elapsed = time.monotonic() - t0
    after_coll = collections_total(server.port) if count_collections else None
    flat = [x for lat in latencies for x in lat]
    coll = None if before_coll is None or after_coll is None else after_coll - before_coll
    return LoadResult(len(flat), sum(errors), percentile(flat, 0.5) * 1e3, percentile(flat, 0.99) * 1e3,
                      max(flat, default=float("nan")) * 1e3, cpu * 1e3 / elapsed,
                      cpu * 1e3 / max(1, len(flat)), coll)


def fixture_paths(tmp: str) -> dict[str, str]:
    """node_exporter's fixture layout (proc/, sys/ under one root), read in place where possible."""
    from tests.support import ttar

    shared = Path(os.environ.get("GW_SHARED", REPO.parent / "shared")) / "fixtures" / "node_exporter"
    root = Path(tmp) / "fixtures"
    root.mkdir()
    os.symlink(shared / "proc", root / "proc")
    ttar.unpack(str(shared / "sys.ttar"), str(root))
    return {"procfs": str(root / "proc"), "sysfs": str(root / "sys"), "rootfs": str(root)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=300, help="Measured scrapes per server (after warm-up).")
    ap.add_argument("--warmup", type=int, default=20, help="Unmeasured scrapes per server first.")
    ap.add_argument("--rounds", type=int, default=5, help="Alternating measurement rounds.")
    ap.add_argument("--seconds", type=float, default=3.0, help="Duration of each concurrency phase.")
    ap.add_argument("--scrapers", type=int, default=10, help="Concurrent scrapers in the second phase.")
    ap.add_argument("--cache-ttl", type=float, default=1.0, help="Our --scrape.cache-ttl in the concurrency part.")
    ap.add_argument("--fixtures", action="store_true", help="Run both on node_exporter's fixture trees.")
    ap.add_argument("--skip-concurrency", action="store_true", help="Only the CPU-per-scrape part.")
    ap.add_argument("--baseline", metavar="DIR", type=Path,
                    help="Also measure the agent of another checkout (e.g. `git archive HEAD | tar -x -C DIR`) "
                         "in the same alternating rounds: a before/after comparison under the same load.")
    ap.add_argument("--match-netdev", action="store_true",
                    help="Also measure node_exporter with netclass and netstat, which read what our netdev "
                         "collector reads beyond /proc/net/dev.")
    args = ap.parse_args(argv)

    if not os.access(NODE_EXPORTER, os.X_OK):
        print(f"{NODE_EXPORTER} not found: apt-get install prometheus-node-exporter", file=sys.stderr)
        return 2
    from collectors.registry import load_builtin_collectors

    registered = list(load_builtin_collectors())
    tmp = tempfile.mkdtemp(prefix="gw-bench-")
    servers: list[Server] = []
    try:
        paths = fixture_paths(tmp) if args.fixtures else {"procfs": "/proc", "sysfs": "/sys", "rootfs": "/"}
        ne_port, ours_port = free_port(), free_port()
        ne = Server("node_exporter", node_exporter_argv(ne_port, paths), ne_port)
        ours = Server("gangwatch", agent_argv(ours_port, paths, registered, 0.0), ours_port)
        servers = [ne, ours]
        if args.match_netdev:
            port = free_port()
            servers.insert(1, Server("node_exporter+", node_exporter_argv(port, paths, MATCH_NETDEV), port))
        if args.baseline:
            port = free_port()
            servers.append(Server("baseline", agent_argv(port, paths, registered, 0.0), port,
                                  cwd=args.baseline.resolve()))
        for s in servers:
            s.start()
        enabled = [c for c in COLLECTORS if c in registered]
        missing = [c for c in COLLECTORS if c not in registered]
        print(f"source: {'node_exporter fixtures' if args.fixtures else 'live /proc and /sys'}; "
              f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}")
        print(f"collectors: node_exporter {','.join(COLLECTORS)}")
        print(f"            gangwatch     {','.join(enabled)}" + (f"  (not registered yet: {','.join(missing)})" if missing else ""))

        counts = {}
        for s in servers:
            c = Client(s.port)
            status, body, headers = c.get()
            c.close()
            counts[s.name] = series(decode(body, headers)) + (headers.get("content-encoding", "identity"),
                                                             headers.get("content-type", ""))
        measure_cpu(servers, args.scrapes, args.warmup, args.rounds)
        ms = {s.name: s.cpu_s * 1e3 / s.scrapes for s in servers}
        med = {s.name: statistics.median(s.rounds) for s in servers}
        ratio = ms["gangwatch"] / ms["node_exporter"] if ms["node_exporter"] else float("nan")
        # Rounds alternate, so round i of both servers ran under about the same outside load: the
        # median of the per-round ratios is the figure least moved by a noisy, shared machine.
        per_round = [a / b for a, b in zip(ours.rounds, ne.rounds) if b]
        median_ratio = statistics.median(per_round) if per_round else float("nan")
        print()
        print(f"CPU per scrape ({ne.scrapes} scrapes each, {args.rounds} alternating rounds, gzip, Prometheus Accept header)")
        print(f"  {'server':<15} {'ms/scrape':>10} {'median':>8} {'series':>7} {'data series':>12}  encoding"
              f"   (ms/scrape: all CPU over all rounds; median: of the rounds, schedstat)")
        for s in servers:
            total, data, enc, ctype = counts[s.name]
            print(f"  {s.name:<15} {ms[s.name]:>10.3f} {med[s.name]:>8.3f} {total:>7} {data:>12}  {enc}, {ctype}")
        print(f"  series: gangwatch {counts['gangwatch'][0]} ({counts['gangwatch'][1]} data), "
              f"node_exporter {counts['node_exporter'][0]} ({counts['node_exporter'][1]} data)")
        print(f"  per-round ratios: {' '.join(f'{r:.2f}' for r in per_round)}")
        print(f"  RATIO gangwatch/node_exporter: {ratio:.2f}x overall, {median_ratio:.2f}x median of rounds "
              f"(goal <= 0.50x: {'met' if median_ratio <= 0.5 else 'NOT met'})")
        if args.match_netdev:
            print(f"  ratio gangwatch/node_exporter+: {ms['gangwatch'] / ms['node_exporter+']:.2f}x  (node_exporter+ adds "
                  f"{', '.join(MATCH_NETDEV)}: the sysfs link state and /proc/net/snmp TCP counters our netdev also reads)")
        if args.baseline:
            base = next(s for s in servers if s.name == "baseline")
            base_rounds = [a / b for a, b in zip(base.rounds, ne.rounds) if b]
            print(f"  baseline ({args.baseline}) /node_exporter: {ms['baseline'] / ms['node_exporter']:.2f}x overall, "
                  f"{statistics.median(base_rounds):.2f}x median of rounds; gangwatch/baseline: "
                  f"{ms['gangwatch'] / ms['baseline']:.2f}x")

        if not args.skip_concurrency:
            for s in servers:
                s.stop()
            ours_port = free_port()
            ours = Server("gangwatch", agent_argv(ours_port, paths, registered, args.cache_ttl), ours_port)
            ne = Server("node_exporter", node_exporter_argv(ne_port, paths), ne_port)
            servers = [ours, ne]
            for s in servers:
                s.start()
            rows = []
            for s in servers:
                for n in (1, args.scrapers):
                    rows.append((s.name, n, load(s, n, args.seconds, s is ours)))
            print()
            print(f"Concurrency ({args.seconds:g} s per phase, each scraper in a tight loop; "
                  f"gangwatch at --scrape.cache-ttl {args.cache_ttl:g})")
            print(f"  {'server':<15} {'scrapers':>8} {'requests':>8} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} "
                  f"{'max ms':>7} {'CPU ms/s':>9} {'CPU ms/req':>10} {'collections':>11}")
            for name, n, r in rows:
                coll = "-" if r.collections is None else f"{r.collections:g}"
                print(f"  {name:<15} {n:>8} {r.requests:>8} {r.errors:>6} {r.p50_ms:>7.2f} {r.p99_ms:>7.2f} "
                      f"{r.max_ms:>7.2f} {r.cpu_ms_per_s:>9.1f} {r.cpu_ms_per_request:>10.3f} {coll:>11}")
            one = next(r for name, n, r in rows if name == "gangwatch" and n == 1)
            many = next(r for name, n, r in rows if name == "gangwatch" and n == args.scrapers)
            print(f"  gangwatch p99 with {args.scrapers} scrapers: {many.p99_ms:.1f} ms "
                  f"(goal <= 50 ms: {'met' if many.p99_ms <= 50 else 'NOT met'}); collections with "
                  f"{args.scrapers} scrapers vs 1: {many.collections:g} vs {one.collections:g} "
                  f"for {many.requests} vs {one.requests} requests")
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
