#!/usr/bin/env python3
"""serve's facts answers taken by their series' labels (prometheus.FactCache) against parsed as JSON.

A cold cycle, and every TOPOLOGY_SECONDS a steady one, asks INFO_QUERY: per node its leaf switch,
its GPUs' NVLink pairs and NUMA nodes and which job holds each GPU, and the filesystem targets
(about 300,000 series at 4,096 nodes from the demo's agents); the other steady cycles ask
JOB_FACTS, the GPUs' jobs alone. The answers are written here as VictoriaMetrics and Prometheus
write an instant vector (compact JSON), labels as the demo's agents give them after a scrape. Each
is taken, best of --repeat, the way serve took it before (orjson, the hardware facts apart, then
each series into the store) and the way it does now (the labels cut out, each series'
parsed once: a first answer, every series new, and the next, every series known), into stores
that must come out the same.

    python bench/bench_facts.py [--nodes 4096] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboard.sources.build import SignalStore  # noqa: E402
from dashboard.sources.matrix import split_vector  # noqa: E402
from dashboard.sources.prometheus import FactCache, add_facts, hardware_fact  # noqa: E402
from dashboard.sources.schema import NodeMatcher  # noqa: E402

GPUS, TARGETS, LEAF = 8, 32, 32


def answers(nodes: int, at: float) -> tuple[bytes, bytes]:
    """(INFO_QUERY's answer, JOB_FACTS') for `nodes` nodes of GPUS GPUs, every GPU in a job."""
    hw, jobs = [], []
    for n in range(nodes):
        node = f"node{n + 1:04d}"
        agent = {"instance": node, "job": "gangwatch-agent", "node": node}
        hw.append({"__name__": "gangwatch_sim_node_info", **agent, "leaf": f"leaf{n // LEAF:03d}"})
        for g in range(GPUS):
            hw.append({"__name__": "gangwatch_gpu_affinity_info", "gpu": str(g), **agent, "numa_node": str(g * 2 // GPUS)})
            hw += [{"__name__": "gangwatch_gpu_nvlink_peer_info", "gpu": str(g), **agent, "peer_gpu": str(p)}
                   for p in range(GPUS) if p != g]
            jobs.append({"__name__": "gangwatch_job_gpu_info", "gpu": str(g), **agent, "jobid": str(1000 + n // 4),
                         "source": "mapping"})
    hw += [{"gw_fact": "target", "target": f"fs-OST{t:04x}"} for t in range(TARGETS)]

    def vector(series: list[dict]) -> bytes:
        return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": labels, "value": [at, "1"]} for labels in series]}})
    return vector(hw + jobs), vector(jobs)


def as_json(raw: bytes, matcher: NodeMatcher, apart: bool) -> tuple[SignalStore, SignalStore]:
    result = orjson.loads(raw)["data"]["result"]
    hw, store = SignalStore(), SignalStore()
    if apart:
        add_facts(hw, [r.get("metric") or {} for r in result if hardware_fact(r)], matcher)
        result = [r for r in result if not hardware_fact(r)]
    add_facts(store, [r.get("metric") or {} for r in result], matcher)
    return hw, store


def by_labels(raw: bytes, cache: FactCache, matcher: NodeMatcher, apart: bool) -> tuple[SignalStore, SignalStore]:
    facts = cache.labels(split_vector(raw)[0])
    hw, store = SignalStore(), SignalStore()
    add_facts(hw, [labels for is_hw, labels in facts if is_hw and apart], matcher)
    add_facts(store, [labels for is_hw, labels in facts if not (is_hw and apart)], matcher)
    return hw, store


def best(repeat: int, run) -> tuple[float, object]:
    times, got = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = run()
        times.append(time.perf_counter() - t0)
    return min(times), got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    info, jobs = answers(args.nodes, 1_796_525_220.0)
    matcher = NodeMatcher()
    for name, raw, apart in (("INFO_QUERY (cold, every topology refresh)", info, True), ("JOB_FACTS (steady)", jobs, False)):
        series = raw.count(b'"metric":')
        json_s, want = best(args.repeat, lambda: as_json(raw, matcher, apart))
        first = [FactCache() for _ in range(args.repeat)]
        first_s, got = best(args.repeat, lambda: by_labels(raw, first.pop(), matcher, apart))
        cache = FactCache()
        by_labels(raw, cache, matcher, apart)
        next_s, again = best(args.repeat, lambda: by_labels(raw, cache, matcher, apart))
        if not all(vars(a) == vars(b) for pair in (got, again) for a, b in zip(pair, want)):
            print(f"{name}: the stores differ from the JSON path's", file=sys.stderr)
            return 1
        print(f"{name}: {series:,} series, {len(raw) / 2**20:.1f} MiB; as JSON {json_s:.3f} s; by labels, every "
              f"series new {first_s:.3f} s ({first_s / json_s:.2f}), every series known {next_s:.3f} s "
              f"({next_s / json_s:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
