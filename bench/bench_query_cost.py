#!/usr/bin/env python3
"""What each of a diagnosis cycle's queries costs the engine, VictoriaMetrics beside Prometheus.

bench_vm_import.py measures whole cycles; this says which queries the engine's CPU goes to, and
why. The same imported data (bench_vm_import's simulated cluster, `--nodes` x 20 steps of 15 s,
into both engines; VictoriaMetrics' caches off, so every answer is computed from the samples), then
each query `serve --prometheus` sends a steady cycle (dashboard.sources.prometheus.plan_queries,
less the per-target fallbacks where every node has the filesystem totals; the versions with them,
as asked while a node lacks the totals, beside them, marked `fallback`; the per-GPU and per-port
queries as the engine would aggregate them, the levels' as range queries rather than their raw
samples, and the event counters' as it would work out their step's increase, marked `by engine`)
asked alone over the span a steady cycle asks that engine for (15 s new and the settle it says:
30 s on VictoriaMetrics with -search.latencyOffset=0s, 15 s on a Prometheus that scrapes), best of `--repeat`:
the engine's CPU seconds and the wall time, the series answered and the raw series the query's
selectors match (each mapping's selector counted at the last step: what the engine must read).

The engine's work follows the raw series read, not the series answered: a query that sums or
filters many raw series (the Lustre client's per-target counters, one per node and target) costs
in proportion to those, whatever it returns. The last lines give both totals and the shares. The
`floor` column is the least any query reading the same raw series can cost: `count()` of each of
its selectors over the same span (each series read once, nothing computed, one series answered per
selector); its total, in CPU-seconds, is the cores a cycle that reads every series needs to take
1 s of the engine's wall time.

    python bench/bench_query_cost.py [--nodes 512] [--repeat 3] [--osts K] [--engines victoriametrics,prometheus]
                                     [--fabric roce]

Needs Debian's victoria-metrics and prometheus packages (promtool).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench import bench_vm_import as imp  # noqa: E402
from collectors.fetch import accept_encoding  # noqa: E402
from dashboard.sources.prometheus import (FALLBACK_FACTS, LACKS_LABEL, RATED, READ_WITH, REPLACEMENTS, RUNTIME_PATH,  # noqa: E402
                                          SHARED_QUERIES, PrometheusSource, plan_queries, query_request,
                                          raw_levels, series_selector)
from dashboard.sources.schema import MAPPINGS, RATIOS  # noqa: E402
from tests.support import vmstack  # noqa: E402
from tests.support.promstack import Prometheus  # noqa: E402

ENGINE_SIDE = "by engine"


def selectors(signal: str, level: str, covered: frozenset[str]) -> list[str]:
    """The selectors of the raw series one planned query reads (its shared members' and its
    ratio's parts' too)."""
    names = set(SHARED_QUERIES.get(signal, (signal,))) | {s for s, host in READ_WITH.items() if host == signal}
    for name in list(names):
        if name in RATIOS:
            names |= set(RATIOS[name][:2])
    return sorted({series_selector(m) for m in MAPPINGS
                   if m.signal in names and m.level == level and not m.scale_label and m.fallback not in covered})


def steady_plan(client: httpx.Client, url: str, end: float) -> tuple[frozenset[str], frozenset[str], list]:
    """What serve asks a cycle: the plan less the fallbacks every node does without, as FALLBACK_FACTS
    say (the source's `_covered`); and the queries of the plan with them (while a node lacks the
    totals: an older agent) that differ, marked, to be measured beside them; and the port counters
    whose rate serve works out (RATED, on every engine)."""
    r = client.get(url + "/api/v1/query", params={"query": FALLBACK_FACTS, "time": end})
    r.raise_for_status()
    covered = REPLACEMENTS - {row["metric"].get(LACKS_LABEL) for row in r.json()["data"]["result"]}
    info = client.get(url + RUNTIME_PATH)  # which levels serve asks this engine for as they stand
    raw = raw_levels(info.json().get("data") if info.status_code == 200 else None)
    steady = plan_queries(60.0, imp.STEP, covered=covered, raw=raw)
    kept = [(f"{signal} fallback", level, q) for signal, level, q in plan_queries(60.0, imp.STEP, raw=raw)
            if (signal, level, q) not in steady]
    # the per-device series aggregated and the event counters' step increase worked out by the engine
    # (avg by, sum by, clamp_min(c - c offset 15s, 0)), where the plan differs
    by_engine = [(f"{signal} {ENGINE_SIDE}", level, q) for signal, level, q in
                 plan_queries(60.0, imp.STEP, covered=covered, by_engine=True) if (signal, level, q) not in steady]
    return covered, frozenset(RATED), steady + kept + by_engine


def steady_span(url: str) -> float:
    """The span a steady cycle asks the engine at `url` for: the new step and the settle the engine
    says (PrometheusSource.settle), on the step grid as the source puts it."""
    return imp.STEP * (1 + math.ceil(PrometheusSource(url, timeout=60).settle() / imp.STEP))


def timed(client: httpx.Client, url: str, pid: int, end: float, query: str, repeat: int, span: float,
          signal: str = "", rated: frozenset[str] = frozenset()) -> tuple[float, float, int, int]:
    """The query over the steady span, asked as serve asks `signal`'s (prometheus.query_request: a
    range query, from a step before the span for an event counter, the raw samples of a level's and
    of a port counter's whose rate serve works out),
    best of `repeat`: (engine CPU, wall, series answered, bytes)."""
    best = None
    # a steady cycle holds a rated counter's samples of the rate window before its span (Held.tail)
    path, params = query_request(signal, query, end - span, end, imp.STEP, 0.0 if signal in rated else None)
    for _ in range(repeat):
        cpu0, t0 = imp.cpu(pid), time.perf_counter()
        r = client.get(url + path, params=params, headers=accept_encoding(url))  # as serve asks (gzip or not)
        wall, cpu = time.perf_counter() - t0, imp.cpu(pid) - cpu0
        r.raise_for_status()
        got = (cpu, wall, len(r.json()["data"]["result"]), len(r.content))
        best = got if best is None or got[0] < best[0] else best
    return best


def floor_query(sels: list[str]) -> str:
    """The least a query reading `sels` can cost: each raw series read once over the span and
    counted, nothing computed or answered per series (one series per selector)."""
    return " or ".join(f'label_replace(count({sel}), "gw_sel", "{i}", "", "")' for i, sel in enumerate(sels))


def cost(client: httpx.Client, url: str, pid: int, end: float, repeat: int) -> tuple[float, list[dict]]:
    """(the steady span, a row per query asked over it)."""
    rows, span = [], steady_span(url)
    covered, rated, plan = steady_plan(client, url, end)
    for signal, level, query in plan:
        best = timed(client, url, pid, end, query, repeat, span, "" if signal.endswith(ENGINE_SIDE) else signal, rated)
        raw = 0
        fallback = signal.endswith((" fallback", f" {ENGINE_SIDE}"))
        sels = selectors(signal.split(" ")[0], level, frozenset() if signal.endswith(" fallback") else covered)
        for sel in sels:
            r = client.get(url + "/api/v1/query", params={"query": f"count({sel})", "time": end})
            r.raise_for_status()
            res = r.json()["data"]["result"]
            raw += int(float(res[0]["value"][1])) if res else 0
        rows.append({"query": f"{signal}/{level}", "cpu": best[0], "wall": best[1], "series": best[2],
                     "bytes": best[3], "raw": raw, "fallback": fallback,
                     "floor": timed(client, url, pid, end, floor_query(sels), repeat, span)[0] if sels else 0.0})
    return span, rows


def report(engine: str, nodes: int, costed: tuple[float, list[dict]]) -> dict:
    """The cycle's queries; those of the plan that keeps the per-target fallbacks (`... fallback`: as
    a cycle asks while a node lacks the totals) that differ, and the queries as the engine would work
    them out (`... by engine`, the peer: per-device aggregates, the event counters' increase),
    listed, not counted."""
    span, rows = costed
    kept, rows = [r for r in rows if r["fallback"]], [r for r in rows if not r["fallback"]]
    cpu, raw, series = (sum(r[k] for r in rows) for k in ("cpu", "raw", "series"))
    print(f"\n{engine}, {nodes:,} nodes, span {span:.0f} s, load {imp.load()}")
    floor = sum(r["floor"] for r in rows)
    print(f"{'query':22} {'engine CPU':>10} {'wall':>7} {'answered':>9} {'raw read':>9} {'us/raw':>7} {'us/answered':>11} "
          f"{'floor':>7}")
    for r in sorted(rows, key=lambda r: -r["cpu"]) + kept:
        print(f"{r['query']:22} {r['cpu']:9.3f}s {r['wall']:6.3f}s {r['series']:9,} {r['raw']:9,} "
              f"{1e6 * r['cpu'] / max(r['raw'], 1):7.1f} {1e6 * r['cpu'] / max(r['series'], 1):11.1f} {r['floor']:6.3f}s")
    target = [r for r in rows if r["query"].endswith("/target") or r["query"].startswith(("fs_read", "fs_write"))]
    tcpu, traw, tser = (sum(r[k] for r in target) for k in ("cpu", "raw", "series"))
    print(f"{'all queries':22} {cpu:9.3f}s {'':7} {series:9,} {raw:9,} {1e6 * cpu / max(raw, 1):7.1f} "
          f"{1e6 * cpu / max(series, 1):11.1f} {floor:6.3f}s")
    print(f"floor (each query's raw series read once over the span and counted, nothing computed or answered per "
          f"series): {floor:.2f} s, {1e6 * floor / max(raw, 1):.1f} us per raw series; the queries cost "
          f"{cpu / max(floor, 1e-9):.2f}x it. Cores a 1 s cycle needs for the reading alone: {floor:.1f}; "
          f"for the queries as they are: {cpu:.1f}")
    print(f"the filesystem queries (read, latency per node and target; fs_read, fs_write per node): "
          f"{tcpu / max(cpu, 1e-9):.0%} of the engine's CPU, {traw / max(raw, 1):.0%} of the raw series read, "
          f"{tser / max(series, 1):.0%} of the series answered")
    for suffix, what in ((" fallback", "from the agents' per-filesystem totals against {was:.3f} s with the "
                                       "per-target fallback kept (a node lacking them)"),
                         (f" {ENGINE_SIDE}", "as serve asks this engine (the levels' raw samples placed on the grid, "
                                             "the port counters' rates worked out from theirs except on Prometheus' own "
                                             "engine, and the event counters read once, their step's increase worked "
                                             "out, by serve) against {was:.3f} s worked out by the engine (avg by, sum by, range "
                                             "queries; clamp_min(c - c offset 15s, 0))")):
        these = [r for r in kept if r["query"].split("/")[0].endswith(suffix)]
        if not these:
            continue
        swapped = {r["query"].replace(suffix, "") for r in these}
        now = sum(r["cpu"] for r in rows if r["query"] in swapped)
        was = sum(r["cpu"] for r in these)
        print(f"{', '.join(sorted(swapped))}: {now:.3f} s " + what.format(was=was) + f": {now / max(was, 1e-9):.2f}; "
              f"the steady cycle {cpu:.2f} s against {cpu - now + was:.2f} s ({cpu / max(cpu - now + was, 1e-9):.2f})")
    return {"cpu": cpu, "raw": raw, "series": series, "floor": floor}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--osts", type=int, help="the Lustre filesystem's OSTs (default: the simulator's, at most 32)")
    ap.add_argument("--engines", default="victoriametrics,prometheus")
    ap.add_argument("--fabric", choices=("ib", "roce"), default="ib",
                    help="the simulated compute fabric: InfiniBand, or RoCE (ECN, CNP, transport errors per port)")
    ap.add_argument("--idle", type=imp.parse_idle, metavar="S|TARGETS:PORTS",
                    help="the agents' idle windows (--collector.lustre_client.target-idle-seconds and "
                         "--collector.infiniband.error-idle-seconds; default theirs; 0: every counter at every scrape)")
    args = ap.parse_args(argv)
    engines = args.engines.split(",")
    if not vmstack.available() or not shutil.which("promtool"):
        print("needs Debian's victoria-metrics and prometheus (promtool)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-qcost-"))
    totals = {}
    try:
        cols = imp.simulate(args.nodes, 20, 1, osts=args.osts, idle=args.idle, fabric=args.fabric)
        jsonl, om = work / "series.jsonl", work / "series.om"
        imp.write(cols, jsonl, om)
        end = cols.times[-1]
        print(f"{args.nodes:,} nodes: {len(cols.heads):,} series, {cols.samples:,} samples imported; load {imp.load()}")
        del cols
        with httpx.Client(timeout=1200) as client:
            if "victoriametrics" in engines:
                vm = vmstack.VictoriaMetrics(work, extra_flags=["-search.maxQueryDuration=1200s", "-search.disableCache"])
                try:
                    imp.import_vm(vm.url, jsonl)
                    pid = vm.process.proc.pid
                    totals["VictoriaMetrics"] = report("VictoriaMetrics", args.nodes,
                                                       cost(client, vm.url, pid, end, args.repeat))
                finally:
                    vm.stop()
            if "prometheus" in engines:
                imp.prometheus_blocks(om, work / "prom-data")
                prom = Prometheus(work, [], interval="15s", self_scrape=True,
                                  extra_flags=["--query.timeout=20m", "--query.max-samples=200000000"])
                try:
                    pid = prom.process.proc.pid
                    totals["Prometheus"] = report("Prometheus", args.nodes, cost(client, prom.url, pid, end, args.repeat))
                finally:
                    prom.stop()
        if len(totals) == 2:
            vm, pr = totals["VictoriaMetrics"], totals["Prometheus"]
            print(f"\nengine CPU of one steady cycle's queries, asked one by one: VictoriaMetrics {vm['cpu']:.2f} s, "
                  f"Prometheus {pr['cpu']:.2f} s (VictoriaMetrics/Prometheus {vm['cpu'] / max(pr['cpu'], 1e-9):.2f})")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
