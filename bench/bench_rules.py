#!/usr/bin/env python3
"""Rule evaluation cost: a real Prometheus scraping a simulated cluster, rules/*.yml loaded.

`gangwatch demo --nodes N` serves every virtual node's agent metrics (multi-target,
`/metrics?target=node0042`) and the slurm-exporter's; Debian's Prometheus 2.42 scrapes all of them
every `--interval` seconds and evaluates rules/recording.yml and rules/alerts.yml at the same
interval, exactly as in production (tests/support/demo_stack.py builds the stack). After warm-up
the script reads, over `--cycles` evaluation cycles, `prometheus_rule_group_last_duration_seconds`
(Prometheus scrapes itself) and sums the groups of one cycle: our figure. The peer figure, measured
in the same run, is the cost of a cycle of the plain aggregations node_exporter/dcgm-exporter users
typically record (one `avg by (instance)` and one `sum by (instance) (rate(...))` per GPU/IB
family), so the ratio says what gangwatch's joins cost beyond the baseline. Goal: ≤ 1 s per cycle
at 4,096 nodes (8 GPUs each). Prints the series count of the head block.

Usage: python bench/bench_rules.py [--nodes 4096] [--interval 15] [--cycles 4]
Memory: Prometheus needs roughly 3 KiB per series (~550 per simulated node: ~7 GiB at 4,096 nodes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from tests.support import promstack  # noqa: E402
from tests.support.demo_stack import DemoStack  # noqa: E402

# What a site without gangwatch's rules typically records: per-node averages of the same families.
PEER_RULES = {"groups": [{"name": "peer-baseline", "rules": [
    {"record": "instance:gpu_utilization:avg", "expr": "avg by (instance) (gangwatch_gpu_utilization_ratio)"},
    {"record": "instance:gpu_power:sum", "expr": "sum by (instance) (gangwatch_gpu_power_watts)"},
    {"record": "instance:ib_tx:rate5m", "expr": "sum by (instance) (rate(gangwatch_infiniband_port_transmit_data_bytes_total[5m]))"},
    {"record": "instance:ib_rx:rate5m", "expr": "sum by (instance) (rate(gangwatch_infiniband_port_receive_data_bytes_total[5m]))"},
]}]}


def group_durations(prom) -> dict[str, float]:
    out = {}
    for r in prom.query("prometheus_rule_group_last_duration_seconds"):
        out[r["metric"]["rule_group"]] = float(r["value"][1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--interval", type=int, default=15, help="scrape and evaluation interval, seconds")
    ap.add_argument("--cycles", type=int, default=4, help="evaluation cycles measured after warm-up")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gw-bench-rules-"))
    (work / "peer.yml").write_text(yaml.safe_dump(PEER_RULES))
    t0 = time.monotonic()
    stack = DemoStack(work, nodes=args.nodes, faults="default", with_serve=False, with_alertmanager=False,
                      interval=f"{args.interval}s", for_seconds=None, extra_rules=[work / "peer.yml"], self_scrape=True)
    try:
        with stack:
            start_s = time.monotonic() - t0
            # Warm-up: rates need two scrapes and 5m windows fill over time; wait for two full cycles.
            time.sleep(3 * args.interval)
            ours, peer, seen = [], [], set()
            deadline = time.monotonic() + (args.cycles + 2) * args.interval * 2
            while len(ours) < args.cycles and time.monotonic() < deadline:
                d = group_durations(stack.prom)
                last = json.loads(promstack.http_get(stack.prom.url + "/api/v1/rules"))["data"]["groups"]
                stamp = tuple(sorted(g["lastEvaluation"] for g in last))
                if stamp not in seen and d:
                    seen.add(stamp)
                    ours.append(sum(v for k, v in d.items() if "peer-baseline" not in k))
                    peer.append(sum(v for k, v in d.items() if "peer-baseline" in k))
                time.sleep(args.interval / 3)
            series = int(float(stack.prom.query("prometheus_tsdb_head_series")[0]["value"][1]))
            per_group = {k.split(";")[-1]: round(v, 4) for k, v in sorted(group_durations(stack.prom).items())}
    finally:
        if not args.keep:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    if not ours:
        print("no rule evaluation measured", file=sys.stderr)
        return 1
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"nodes={args.nodes} gpus={8 * args.nodes} interval={args.interval}s head_series={series} stack_start={start_s:.1f}s")
    print(f"per group (last cycle, s): {per_group}")
    print(f"ours: rule evaluation per cycle median {o:.3f} s (max {max(ours):.3f} s over {len(ours)} cycles), goal <= 1 s")
    print(f"peer: plain per-node aggregations {p:.3f} s per cycle; ratio {o / p if p else float('inf'):.1f}")
    return 0 if o <= 1.0 else 2


if __name__ == "__main__":
    sys.exit(main())
