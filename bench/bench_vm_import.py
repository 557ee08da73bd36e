#!/usr/bin/env python3
"""One diagnosis cycle's queries at a size this host cannot scrape live: the simulated cluster's
samples imported into VictoriaMetrics, then the cycles measured on it.

Live scraping stops near 1,024 nodes on 2 cores (bench_victoriametrics.py), but a diagnosis cycle
only reads what the engine holds. So: `--nodes N` simulated for `--steps` steps of 15 s (ending
now), each node's agent exposition, as the demo serves it, posted to VictoriaMetrics'
/api/v1/import/prometheus with the labels a scrape adds (job, instance, node: `extra_label`) and
the step's timestamp (the families the diagnosis reads: WANTED); then a flush, and PrometheusSource's cycles over the last hour on it: a cold
one (the hour asked, only the imported minutes there), and a steady one (a source warm from the
cycle one step before asks only for the new step and its settle), best of `--repeat`. `--baseline
DIR` measures another checkout's source (main's) on the same data right after ours, in a process
of its own. Prints wall time, query time in flight, bytes and series answered, and the load.

Usage: python bench/bench_vm_import.py [--nodes 4096] [--steps 10] [--baseline DIR]
Needs: Debian's victoria-metrics package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.bench_victoriametrics import metric  # noqa: E402
from dashboard.sources.schema import BY_METRIC, INFO_METRICS  # noqa: E402
from tests.support import vmstack  # noqa: E402
from tests.support.promstack import http_get  # noqa: E402

STEP = 15.0
# the families a diagnosis cycle selects (signals, facts, dcgm-exporter's job label): the rest of an
# agent's exposition (two thirds of its lines: throttle reasons, ECC, temperatures, NVLink and PCIe
# traffic) only costs the engine memory and the import time, and no query here reads it
WANTED = frozenset(BY_METRIC) | frozenset(INFO_METRICS) | {"DCGM_FI_DEV_GPU_UTIL"}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def fill(vm_url: str, nodes: int, steps: int, seed: int) -> tuple[float, int]:
    """Simulate and import; returns (the last step's time, samples imported)."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.demo import Demo

    end = math.floor(time.time() / STEP) * STEP
    start = end - STEP * steps
    sim = Simulation(SimConfig(nodes=nodes, seed=seed, start=start - 300, history_seconds=300))
    demo = Demo(sim)
    names = sim.cluster.names
    sent = [0]

    def post(i: int, ms: int) -> None:
        lines = [line for line in demo.renderer.render(i).splitlines() if line.split("{", 1)[0].split(" ", 1)[0] in WANTED]
        body = "".join(f"{line} {ms}\n" for line in lines).encode()
        sent[0] += len(lines)
        q = urllib.parse.urlencode([("extra_label", "job=gangwatch-agent"), ("extra_label", f"instance={names[i]}"),
                                    ("extra_label", f"node={names[i]}")])
        with httpx.Client(timeout=300) as c:
            c.post(f"{vm_url}/api/v1/import/prometheus?{q}", content=body).raise_for_status()

    with ThreadPoolExecutor(2) as pool:
        while sim.t < end - 1e-6:
            demo.advance()
            ms = int(round(sim.t * 1000))
            list(pool.map(lambda i: post(i, ms), range(len(names))))
            print(f"  step {sim.t:.0f} imported ({sent[0]:,} samples so far, load {load()})", flush=True)
    http_get(vm_url + "/internal/force_flush", timeout=300)
    return float(sim.t), sent[0]


def cycles(url: str, end: float, repeat: int) -> dict:
    """{"cold": row, "steady": best row}: (wall s, in flight s, bytes, series, span asked s)."""
    from dashboard.sources.prometheus import PrometheusSource

    got = {"bytes": 0, "series": 0, "first": math.inf, "last": 0.0}

    def sent(request):
        got["first"] = min(got["first"], time.perf_counter())

    def count(response):
        response.read()
        got["bytes"] += len(response.content)
        got["series"] += response.content.count(b'"metric":')
        got["last"] = max(got["last"], time.perf_counter())

    def source():
        return PrometheusSource(url, timeout=1200, client=httpx.Client(timeout=600, event_hooks={
            "request": [sent], "response": [count]}))

    def one(src, at):
        got.update(bytes=0, series=0, first=math.inf, last=0.0)
        t0 = time.perf_counter()
        win = src.window(at, 3600.0, STEP)
        assert not src.failed_last_cycle, win.notes
        return (time.perf_counter() - t0, got["last"] - got["first"], got["bytes"], got["series"],
                src.seconds_asked_last_cycle)

    cold = one(source(), end)
    steady = []
    for _ in range(repeat):
        warm = source()
        one(warm, end - STEP)
        steady.append(one(warm, end))
    return {"cold": cold, "steady": min(steady)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout whose diagnosis cycles to measure beside ours")
    ap.add_argument("--cycles", help=argparse.SUPPRESS)  # the baseline's process: URL,end
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cycles:
        sys.path.insert(0, str(Path(args.root).resolve()))
        import dashboard.sources.prometheus as source
        assert Path(source.__file__).resolve().is_relative_to(Path(args.root).resolve()), source.__file__
        url, end = args.cycles.rsplit(",", 1)
        print(json.dumps(cycles(url, float(end), args.repeat)))
        return 0
    if not vmstack.available():
        print("needs Debian's victoria-metrics")
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-vm-import-"))
    # a cold cycle's queries over 4,096 nodes on 2 loaded cores take longer than the default 30 s
    vm = vmstack.VictoriaMetrics(work, cache=True, extra_flags=["-search.maxQueryDuration=600s"])
    try:
        rss0 = psutil.Process(vm.process.proc.pid).memory_info().rss
        t0 = time.perf_counter()
        end, samples = fill(vm.url, args.nodes, args.steps, args.seed)
        series = metric(vm.url, "vm_cache_entries", type="storage/hour_metric_ids")  # a count() hits the series limit
        rss = psutil.Process(vm.process.proc.pid).memory_info().rss - rss0
        print(f"{args.nodes} nodes, {args.steps} steps: {samples:,} samples, {series:,.0f} series imported in "
              f"{time.perf_counter() - t0:.0f} s; VictoriaMetrics RSS growth {rss / 2**30:.2f} GiB; load {load()}", flush=True)
        rows = {"ours": cycles(vm.url, end, args.repeat)}
        print(f"load after ours: {load()}", flush=True)
        if args.baseline:
            out = subprocess.run([sys.executable, __file__, "--cycles", f"{vm.url},{end}", "--root", args.baseline,
                                  "--repeat", str(args.repeat)], capture_output=True, text=True, timeout=7200, check=True)
            rows["baseline"] = {k: tuple(v) for k, v in json.loads(out.stdout.splitlines()[-1]).items()}
            print(f"load after the baseline's: {load()}", flush=True)
        print(f"\n{'VictoriaMetrics, ' + str(args.nodes) + ' nodes':34} {'wall':>8} {'in flight':>10} {'MB':>7} "
              f"{'series':>9} {'span':>6}")
        for who, got in rows.items():
            for kind in ("cold", "steady"):
                w, f, b, s, span = got[kind]
                print(f"{who + ' ' + kind:34} {w:7.2f}s {f:9.2f}s {b / 1e6:7.1f} {s:9,} {span:5.0f}s")
        return 0
    finally:
        vm.stop()
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
