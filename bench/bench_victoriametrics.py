#!/usr/bin/env python3
"""Prometheus against VictoriaMetrics on the same targets, side by side, in one run.

`gangwatch demo --nodes N --no-dashboard` (every virtual node's agent metrics and the
slurm-exporter's) is scraped every `--interval` seconds, with the demo's own /sim/prometheus.yml, by
Debian's Prometheus 2.42 (rules/recording.yml and alerts.yml loaded) and by two vmagent shards
(1.79, -promscrape.cluster.membersCount=2) writing to VictoriaMetrics, with vmalert evaluating the
same rule files (the layout of deploy/victoriametrics/). After `--warmup` seconds it prints, for both:

- active series and resident memory: bytes per series = (RSS now - RSS just after start) / series;
- disk once compressed, samples and series apart: Prometheus' head written as a block (admin
  snapshot API): chunks per sample, index per series; VictoriaMetrics after a flush and a forced
  merge: data/ per row, indexdb/ per series. A short run's per-sample figure is an upper bound
  (chunks of few samples compress less than the 2-hour ones of a long run);
- rule evaluation: the longest group and the sum over groups (Prometheus' last duration per group
  from /api/v1/rules; vmalert's median iteration duration per group from its /metrics), the
  longest groups, and the costliest rules (each expression as one instant query on either engine);
- diagnosis cycles (dashboard/sources/prometheus.py over the last hour, as `serve --prometheus`
  runs them): the first, cold cycle (the whole hour) and the steady state (the best of three later
  cycles, 15 s apart, each asking only for the span since the previous one): the whole cycle
  (queries, decoding and assembly), the time queries were in flight (two at a time) and their
  seconds added up, query count and response bytes;

then extrapolates the per-series and per-sample costs to 4,096, 16,384 and 65,536 nodes (the
series per node measured here) and says which deployment each needs. The ratio printed is
VictoriaMetrics' memory per series against Prometheus' (issue 16's goal: <= 1/3 at 4,096 nodes).

`--baseline DIR` measures the diagnosis cycles of another checkout's source too (main's, for
before/after figures), on the same engines right after ours, and prints them beside.

Usage: python bench/bench_victoriametrics.py [--nodes 256] [--interval 15] [--warmup 240] [--baseline DIR]
Needs: Debian's prometheus and victoria-metrics packages, psutil (the [test] extra).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

from tests.support import vmstack  # noqa: E402
from tests.support.promstack import RULES, Process, Prometheus, free_port, http_get, wait_for  # noqa: E402

GIB = 1024 ** 3
# A host the size sites buy for monitoring: a deployment "fits one node" when its TSDB needs at most
# half of this (the rest: queries, page cache, rule evaluation).
HOST_RAM = 256 * GIB


def metric(url: str, name: str, **labels) -> float:
    """Sum of one metric's samples on an exporter page, matching `labels`."""
    body = (http_get(url + "/metrics", timeout=30) or b"").decode()
    total = 0.0
    for line in body.splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ("{", " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def du(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except FileNotFoundError:  # a part VictoriaMetrics merged away while we walked
            pass
    return total


def rss(proc: Process) -> int:
    return psutil.Process(proc.proc.pid).memory_info().rss


class QueryMeter:
    """httpx event hooks that measure one diagnosis cycle's queries; `cycle()` runs one and returns
    its row: (wall s, seconds from the first query sent to the last answer read, the queries'
    seconds added up (they overlap: the source's `workers` at a time), queries, response bytes, longest
    span asked in s, series answered). `keep`: the cycle's answers are kept in `bodies` too. The hooks
    run in the query threads: the counts are added under a lock (a `+=` on a dict item is a read and
    a write, and two threads interleaving them lose one answer's count: the 32,768 series "missing"
    from some 4,096-node cycles in earlier sessions' figures were that, one per-GPU query's)."""

    def __init__(self, keep: bool = False):
        self.keep = keep
        self._lock = threading.Lock()
        self.bodies: list[bytes] = []
        self._sent_at: dict[int, float] = {}
        self.window = None
        self._reset()
        self.hooks = {"request": [self._sent], "response": [self._count]}

    def _reset(self):
        self.got = {"bytes": 0, "seconds": 0.0, "first": math.inf, "last": 0.0, "series": 0}
        self.bodies = []

    def _sent(self, request):
        with self._lock:
            self._sent_at[id(request)] = now = time.perf_counter()
            self.got["first"] = min(self.got["first"], now)

    def _count(self, response):  # request to last byte is one query's (engine and transfer)
        response.read()
        now = time.perf_counter()
        series = response.content.count(b'"metric":')  # one per series, in either engine's JSON
        with self._lock:
            got = self.got
            got["bytes"] += len(response.content)
            got["series"] += series
            got["seconds"] += now - self._sent_at.pop(id(response.request), now)
            got["last"] = max(got["last"], now)
            if self.keep:
                self.bodies.append(response.content)

    def cycle(self, src, end: float) -> tuple:
        self._reset()
        t0 = time.perf_counter()
        self.window = src.window(end, 3600.0, 15.0)  # its notes name what failed
        got = self.got
        return (time.perf_counter() - t0, max(0.0, got["last"] - got["first"]), got["seconds"], src.queries_last_cycle,
                got["bytes"], src.seconds_asked_last_cycle, got["series"])


def diagnosis_cycles(url: str, steady: int = 3, interval: float = 15.0) -> dict[str, tuple]:
    """One PrometheusSource over the last hour, as `serve --prometheus` runs it: its first (cold)
    cycle asks for the whole hour, the next ones (steady state, one per `interval`, as serve's) only
    for the span since the previous one. {"cold": row, "steady": the best of `steady` rows}, a row
    being QueryMeter's."""
    from dashboard.sources.prometheus import PrometheusSource

    meter = QueryMeter()
    # a long deadline: a cold cycle at this size must be measured, not cut short (each query may
    # take a quarter of it)
    src = PrometheusSource(url, timeout=600, client=httpx.Client(timeout=300, event_hooks=meter.hooks))

    def cycle():
        row = meter.cycle(src, time.time())
        if src.failed_last_cycle:
            print(f"  ({url}: {'; '.join(meter.window.notes)[:200]})")
        return row

    cold = cycle()
    rows = []
    for _ in range(steady):
        time.sleep(interval - time.time() % interval + 1.0)  # just past the next step, as serve's next cycle
        rows.append(cycle())
    return {"cold": cold, "steady": min(rows)}


def baseline_cycles(root: str, url: str) -> dict[str, tuple]:
    """`diagnosis_cycles` with the dashboard package of the checkout at `root` (a process of its own,
    so neither source's imports see the other's)."""
    out = subprocess.run([sys.executable, __file__, "--cycles", url, "--root", root], capture_output=True, text=True,
                         timeout=3600, check=True).stdout
    return {k: tuple(v) for k, v in json.loads(out.splitlines()[-1]).items()}


def prom_block(prom) -> tuple[int, int, int]:
    """(chunk bytes, index bytes, samples) of the head written as a compacted block (admin snapshot
    API): what it costs on disk once Prometheus compacts it (the WAL holds it uncompressed until
    then). Chunks grow with samples, the index with series."""
    doc = json.loads(urllib.request.urlopen(urllib.request.Request(
        prom.url + "/api/v1/admin/tsdb/snapshot", method="POST"), timeout=900).read())
    snap = Path(prom.workdir) / "prom-data" / "snapshots" / doc["data"]["name"]
    chunks = index = samples = 0
    for meta in snap.glob("*/meta.json"):
        samples += json.loads(meta.read_text())["stats"]["numSamples"]
        chunks += du(meta.parent / "chunks")
        index += (meta.parent / "index").stat().st_size
    return chunks, index, samples


def vm_disk(vm) -> tuple[int, int, float]:
    """(data bytes, index bytes, rows) of VictoriaMetrics after a flush and a forced merge of this
    month's partition (the compressed form its background merges reach within minutes anyway),
    waited for until no merge is running. `data/` grows with samples, `indexdb/` with series."""
    http_get(vm.url + "/internal/force_flush", timeout=60)
    http_get(vm.url + "/internal/force_merge?partition_prefix=" + time.strftime("%Y_%m", time.gmtime()), timeout=300)
    wait_for(lambda: metric(vm.url, "vm_active_merges") == 0, 300, "VictoriaMetrics' merges", interval=1)
    return du(vm.data / "data"), du(vm.data / "indexdb"), metric(vm.url, "vm_rows_added_to_storage_total")


def prom_rule_times(prom) -> dict[str, float]:
    groups = json.loads(http_get(prom.url + "/api/v1/rules"))["data"]["groups"]
    return {g["name"]: float(g.get("evaluationTime", 0.0)) for g in groups}


def vmalert_rule_times(alert) -> dict[str, float]:
    # vmalert's groups API has no per-group duration in 1.79; its /metrics has the iteration summary
    # (median over its recent iterations: the first ones, before the caches warm, would dominate a max)
    body = (http_get(alert.url + "/metrics", timeout=30) or b"").decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("vmalert_iteration_duration_seconds{") and 'quantile="0.5"' in line:
            group = line.split('group="', 1)[1].split('"', 1)[0]
            out[group] = max(out.get(group, 0.0), float(line.rsplit(" ", 1)[1]))
    return out


def rule_costs(url: str) -> dict[str, float]:
    """Seconds of each rule's expression as one instant query (what vmalert sends per rule; a
    group's duration is about the sum over its rules), best of two."""
    out = {}
    with httpx.Client(timeout=120) as client:
        for f in ("recording.yml", "alerts.yml"):
            for g in yaml.safe_load((RULES / f).read_text())["groups"]:
                for r in g["rules"]:
                    took = []
                    for _ in range(2):
                        t0 = time.perf_counter()
                        client.get(url + "/api/v1/query", params={"query": r["expr"]}).raise_for_status()
                        took.append(time.perf_counter() - t0)
                    out[f"{g['name']}/{r.get('record') or r.get('alert')}"] = min(took)
    return out


def plan(series_per_node: float, bytes_per_series: float, bytes_per_sample: float, interval: float,
         nodes: int) -> tuple[float, float]:
    """(GiB of memory, GiB of disk per day) for `nodes`."""
    series = series_per_node * nodes
    return series * bytes_per_series / GIB, series * (86400 / interval) * bytes_per_sample / GIB


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--interval", type=int, default=15)
    ap.add_argument("--warmup", type=float, default=240.0)
    ap.add_argument("--baseline", help="another checkout whose diagnosis cycles to measure beside ours")
    ap.add_argument("--cycles", help=argparse.SUPPRESS)  # baseline_cycles' process: this engine URL only
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cycles:
        sys.path.insert(0, str(Path(args.root).resolve()))
        import dashboard.sources.prometheus as source
        assert Path(source.__file__).resolve().is_relative_to(Path(args.root).resolve()), source.__file__
        print(json.dumps(diagnosis_cycles(args.cycles)))
        return 0
    if not (shutil.which("prometheus") and vmstack.available()):
        print("needs Debian's prometheus and victoria-metrics")
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-vm-"))
    started = []
    iv = f"{args.interval}s"
    try:
        demo = f"127.0.0.1:{free_port()}"
        started.append(Process([sys.executable, "-m", "dashboard.cli", "demo", f"--nodes={args.nodes}", "--no-dashboard",
                                f"--web.listen-address={demo}", "--log-level=warning"], work / "demo.log",
                               cwd=Path(__file__).resolve().parents[1]))
        wait_for(lambda: started[0].check_alive() or http_get(f"http://{demo}/healthz"), 300, "gangwatch demo")
        scrape = [c for c in yaml.safe_load(http_get(f"http://{demo}/sim/prometheus.yml"))["scrape_configs"]
                  if c["job_name"] != "gangwatch-serve"]  # as bench_rules.py: no N-node diagnosis per scrape
        for c in scrape:
            c["scrape_timeout"] = "10s"
        prom_dir = work / "prom"
        vm_dir = work / "vm"
        prom_dir.mkdir()
        vm_dir.mkdir()
        prom = Prometheus(prom_dir, scrape, [RULES / "recording.yml", RULES / "alerts.yml"], interval=iv,
                          scrape_timeout="10s", extra_flags=["--web.enable-admin-api"])
        prom.workdir = prom_dir
        started.append(prom)
        prom_rss0 = rss(prom.process)
        vm = vmstack.VictoriaMetrics(vm_dir, cache=True)  # as deployed: its rollup cache on
        started.append(vm)
        vm_rss0 = rss(vm.process)
        shards = [vmstack.VMAgent(vm_dir, scrape, vm.url, member=i, members=2, interval=iv) for i in range(2)]
        started.extend(shards)
        alert = vmstack.VMAlert(vm_dir, [RULES / "recording.yml", RULES / "alerts.yml"], vm.url,
                                "http://127.0.0.1:9", interval=iv)  # a notifier nobody listens on
        started.append(alert)
        print(f"{args.nodes} nodes, scraped every {args.interval} s; warm-up {args.warmup:.0f} s ...", flush=True)
        # cores each side used during the warm-up: what limits the size this host sustains
        sides = {"demo": [started[0]], "Prometheus": [prom.process], "VictoriaMetrics": [vm.process, alert.process],
                 "vmagents": [s.process for s in shards]}
        cpu0 = {k: [sum(psutil.Process(p.proc.pid).cpu_times()[:2]) for p in ps] for k, ps in sides.items()}
        t0 = time.monotonic()
        time.sleep(args.warmup)
        cores = {k: sum(sum(psutil.Process(p.proc.pid).cpu_times()[:2]) - c for p, c in zip(ps, cpu0[k]))
                 / (time.monotonic() - t0) for k, ps in sides.items()}
        shard_cpu = cores["vmagents"]
        print("cores during the warm-up: " + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
              + f"; load average {os.getloadavg()[0]:.1f}", flush=True)

        # a size this host sustains: every target scraped in time by both (the demo renders every
        # node once per scraper per interval)
        p_up, v_up = (float(e.query("avg(up)")[0]["value"][1]) for e in (prom, vm))
        p_took = float(prom.query("max(scrape_duration_seconds)")[0]["value"][1])
        p_series = metric(prom.url, "prometheus_tsdb_head_series")
        p_mem = rss(prom.process) - prom_rss0
        # series active this hour (a count() over every series hits -search.maxUniqueTimeseries)
        v_series = metric(vm.url, "vm_cache_entries", type="storage/hour_metric_ids")
        v_mem = rss(vm.process) - vm_rss0
        p_rules, v_rules = prom_rule_times(prom), vmalert_rule_times(alert)
        print("rules and diagnosis cycles ...", flush=True)
        p_costs, v_costs = rule_costs(prom.url), rule_costs(vm.url)
        p_diag, v_diag = diagnosis_cycles(prom.url), diagnosis_cycles(vm.url)
        print(f"load average after our cycles: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        base = {}
        if args.baseline:
            print(f"baseline diagnosis cycles ({args.baseline}) ...", flush=True)
            base = {"": (baseline_cycles(args.baseline, prom.url), baseline_cycles(args.baseline, vm.url))}
            print(f"load average after the baseline's: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        print("disk ...", flush=True)
        try:  # last: a snapshot of a large head under load can take minutes
            p_chunks, p_index, p_block_samples = prom_block(prom)
            v_data, v_index, v_samples = vm_disk(vm)
        except OSError as exc:
            print(f"  disk not measured: {exc}")
            p_chunks = p_index = v_data = v_index = math.nan
            p_block_samples = v_samples = 1
        p_per_sample, v_per_sample = p_chunks / max(p_block_samples, 1), v_data / max(v_samples, 1)

        rows = [("targets up (avg of up)", f"{p_up:.3f}", f"{v_up:.3f}"),
                ("slowest scrape", f"{p_took:.1f} s", ""),
                ("active series", f"{p_series:,.0f}", f"{v_series:,.0f}"),
                ("memory (RSS growth)", f"{p_mem / GIB:.2f} GiB", f"{v_mem / GIB:.2f} GiB"),
                ("bytes per active series", f"{p_mem / p_series:,.0f}", f"{v_mem / v_series:,.0f}"),
                ("samples stored", f"{p_block_samples:,.0f}", f"{v_samples:,.0f}"),
                ("disk bytes per sample (chunks/data)", f"{p_per_sample:.2f}", f"{v_per_sample:.2f}"),
                ("disk index bytes per series", f"{p_index / p_series:.0f}", f"{v_index / v_series:.0f}"),
                ("rules: longest group", f"{max(p_rules.values(), default=0):.3f} s", f"{max(v_rules.values(), default=0):.3f} s"),
                ("rules: sum over groups", f"{sum(p_rules.values()):.3f} s", f"{sum(v_rules.values()):.3f} s"),
                ("rules: groups", f"{len(p_rules)}", f"{len(v_rules)}")]
        for kind in ("cold", "steady"):
            p, v = p_diag[kind], v_diag[kind]
            for pb, vb in base.values():
                rows.append((f"baseline {kind}: whole cycle", f"{pb[kind][0]:.3f} s", f"{vb[kind][0]:.3f} s"))
                rows.append((f"baseline {kind}: MB, span, series", f"{pb[kind][4] / 1e6:.1f}, {pb[kind][5]:.0f} s, {pb[kind][6]:,}",
                             f"{vb[kind][4] / 1e6:.1f}, {vb[kind][5]:.0f} s, {vb[kind][6]:,}"))
            rows += [(f"diagnosis {kind}: whole cycle", f"{p[0]:.3f} s", f"{v[0]:.3f} s"),
                     (f"diagnosis {kind}: queries in flight", f"{p[1]:.3f} s", f"{v[1]:.3f} s"),
                     (f"diagnosis {kind}: queries' s added", f"{p[2]:.3f} s", f"{v[2]:.3f} s"),
                     (f"diagnosis {kind}: queries, MB, span", f"{p[3]}, {p[4] / 1e6:.1f}, {p[5]:.0f} s",
                      f"{v[3]}, {v[4] / 1e6:.1f}, {v[5]:.0f} s"),
                     (f"diagnosis {kind}: series answered", f"{p[6]:,}", f"{v[6]:,}")]
        print(f"\n{'':34} {'Prometheus 2.42':>18} {'VictoriaMetrics 1.79':>22}")
        for name, a, b in rows:
            print(f"{name:34} {a:>18} {b:>22}")
        top = sorted(p_rules, key=lambda g: -max(p_rules[g], v_rules.get(g, 0.0)))[:4]
        for g in top:
            print(f"{'  group ' + g:34} {p_rules[g]:16.3f} s {v_rules.get(g, 0.0):20.3f} s")
        for r in sorted(p_costs, key=lambda r: -max(p_costs[r], v_costs[r]))[:4]:
            print(f"{'  rule ' + r.split('/', 1)[1][:27]:34} {p_costs[r]:16.3f} s {v_costs[r]:20.3f} s")
        # a cold cycle asks for the last hour: its answer grows with nodes x samples held; a steady
        # one asks for a fixed span (SETTLE_SECONDS and one interval) and grows with nodes only
        points = min(args.warmup, 3600.0) / 15.0
        for kind, scale in (("cold", 4096 / args.nodes * 240 / points), ("steady", 4096 / args.nodes)):
            p, v = p_diag[kind], v_diag[kind]
            print(f"{'  ' + kind + ' at 4,096 nodes' + (', 1 h held' if kind == 'cold' else '') + ' (x' + format(scale, '.0f') + ')':34}"
                  f" {p[0] * scale:8.1f} s {p[4] * scale / 1e9:6.2f} GB {v[0] * scale:12.1f} s {v[4] * scale / 1e9:6.2f} GB")
        ratio = (v_mem / v_series) / (p_mem / p_series)
        print(f"\nVictoriaMetrics' memory per series / Prometheus': {ratio:.2f} (goal <= 0.33)")
        spn = p_series / args.nodes
        print(f"\nextrapolated ({spn:,.0f} series per node, {args.interval} s scrapes):")
        for nodes in (4096, 16384, 65536):
            pm, pd = plan(spn, p_mem / p_series, p_per_sample, args.interval, nodes)
            vmm, vmd = plan(spn, v_mem / v_series, v_per_sample, args.interval, nodes)
            need_p = "one Prometheus" if pm <= HOST_RAM / 2 / GIB else "sharded Prometheus + Thanos/Mimir"
            need_v = "VictoriaMetrics single node" if vmm <= HOST_RAM / 2 / GIB else "VictoriaMetrics cluster"
            print(f"  {nodes:>6} nodes: {spn * nodes / 1e6:6.1f} M series; Prometheus {pm:7.1f} GiB, {pd:7.1f} GiB/day "
                  f"({need_p}); VictoriaMetrics {vmm:7.1f} GiB, {vmd:7.1f} GiB/day ({need_v})")
        per_core = args.nodes / max(shard_cpu, 1e-9)
        print(f"  (a deployment fits one node when its TSDB needs at most half of a {HOST_RAM // GIB} GiB host)")
        print(f"vmagent: {shard_cpu:.3f} cores for {args.nodes} nodes (both shards): one core scrapes about "
              f"{per_core:,.0f} nodes; 65,536 nodes need about {65536 / per_core:.0f} cores of vmagent shards")
        return 0
    finally:
        for p in reversed(started):
            p.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
