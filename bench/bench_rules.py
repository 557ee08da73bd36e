#!/usr/bin/env python3
"""Rule evaluation cost: a real Prometheus scraping a simulated cluster, rules/*.yml loaded.

`gangwatch demo --nodes N --no-dashboard` serves every virtual node's agent metrics (multi-target,
`/metrics?target=node0042`), the slurm-exporter's (`/slurm/metrics`) and serve's findings
(`/metrics`); Debian's Prometheus 2.42 scrapes them with the demo's /sim/prometheus.yml every
`--interval` seconds and evaluates rules/recording.yml and rules/alerts.yml (real `for:`) at the same
interval, as in production (tests/support/demo_stack.py builds the stack). Serve's findings are
scraped only with `--serve` (a diagnosis of all N nodes per scrape would compete with the rules). After warm-up
the script takes whole evaluation cycles (every group evaluated once) while the demo is scraped, as
in production (ingestion competes for the CPUs), and reads each group's evaluation time from
/api/v1/rules (the value Prometheus exports as prometheus_rule_group_last_duration_seconds).
Prometheus evaluates groups concurrently, each on its own schedule, so a cycle's wall time is the
longest group's; the sum over groups is the CPU the rules cost. Both are printed, per group too.
The peer figure, from the same Prometheus in the same cycles, is a group of the plain per-device
aggregations node_exporter and dcgm-exporter users typically record (4 rules); the ratio is what all
of gangwatch's recording rules and alerts cost against those four. Goal: every group <= 1 s per
cycle at 4,096 nodes (8 GPUs each). Prints the head series count. (Pausing the demo to measure
"quiet" cycles is not done: at this size the scrapes that time out mark every series stale at once,
and that work lands in the very cycles measured.)

Usage: python bench/bench_rules.py [--nodes 4096] [--interval 15] [--cycles 4] [--warmup 900] [--serve]
Needs: Debian's prometheus; memory roughly 3.7 KiB per head series (~930 per simulated node: 3.8 M
series, ~14 GiB RSS at 4,096 nodes); about 20 minutes at 4,096 nodes with the default warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from tests.support.promstack import http_get  # noqa: E402
from tests.support.demo_stack import DemoStack  # noqa: E402

# What a site without gangwatch's rules typically records: per-node averages of the same families.
PEER_RULES = {"groups": [{"name": "peer-baseline", "rules": [
    {"record": "instance:gpu_utilization:avg", "expr": "avg by (instance) (gangwatch_gpu_utilization_ratio)"},
    {"record": "instance:gpu_power:sum", "expr": "sum by (instance) (gangwatch_gpu_power_watts)"},
    {"record": "instance:ib_tx:rate5m", "expr": "sum by (instance) (rate(gangwatch_infiniband_port_transmit_data_bytes_total[5m]))"},
    {"record": "instance:ib_rx:rate5m", "expr": "sum by (instance) (rate(gangwatch_infiniband_port_receive_data_bytes_total[5m]))"},
]}]}


def rule_groups(prom) -> list[dict]:
    return json.loads(http_get(prom.url + "/api/v1/rules"))["data"]["groups"]


def one_cycle(prom, after: float, timeout: float) -> dict[str, float] | None:
    """Each group's evaluation time (s) in its first evaluation that started after `after` (unix s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        groups = rule_groups(prom)
        done = {g["name"]: g for g in groups if _ts(g["lastEvaluation"]) > after}
        if len(done) == len(groups):
            return {name: g["evaluationTime"] for name, g in done.items()}
        time.sleep(0.5)
    return None


def _ts(rfc3339: str) -> float:
    """Prometheus' RFC 3339 time with nanoseconds (or the zero time before a first evaluation)."""
    if rfc3339.startswith("0001"):
        return 0.0
    base, _, frac = rfc3339.rstrip("Z").partition(".")
    return datetime.fromisoformat(base + "+00:00").timestamp() + float("0." + (frac or "0"))


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def split(cycle: dict[str, float]) -> tuple[float, float, float]:
    """(sum of our groups' durations: the CPU a cycle costs; the longest of our groups: the cycle's
    wall time, since Prometheus runs groups concurrently; the peer group's duration)."""
    ours = [v for k, v in cycle.items() if k != "peer-baseline"]
    return sum(ours), max(ours), cycle.get("peer-baseline", 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--interval", type=int, default=15, help="scrape and evaluation interval, seconds")
    ap.add_argument("--cycles", type=int, default=4, help="evaluation cycles measured after warm-up")
    ap.add_argument("--warmup", type=float, default=900.0,
                    help="seconds of scraping before measuring (default 900: a rule's cost per series grows "
                         "with the samples in the head chunk it decodes, up to 120; 15 min at 15 s is 60, "
                         "the steady-state mean)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--serve", action="store_true", help="also scrape the demo's /metrics (serve's findings)")
    ap.add_argument("--top", type=int, default=6, help="how many of the slowest rules to print")
    args = ap.parse_args()

    # Prometheus (Go) lets its heap grow to twice the live data before collecting; at 4,096 nodes
    # that overshoots a small machine. A soft limit at 75 % of the memory available now makes the
    # collector work harder only near it (the environment is inherited by the Prometheus child).
    avail = _mem_available()
    if avail and "GOMEMLIMIT" not in os.environ:
        os.environ["GOMEMLIMIT"] = f"{int(avail * 0.75)}B"
    work = Path(tempfile.mkdtemp(prefix="gw-bench-rules-"))
    (work / "peer.yml").write_text(yaml.safe_dump(PEER_RULES))
    t0 = time.monotonic()
    stack = DemoStack(work, nodes=args.nodes, faults="default", up_timeout=600, with_serve=args.serve, with_alertmanager=False,
                      dashboard=False,
                      interval=f"{args.interval}s", for_seconds=None, extra_rules=[work / "peer.yml"], self_scrape=True,
                      scrape_timeout=f"{args.interval}s")
    try:
        with stack:
            start_s = time.monotonic() - t0
            # Warm-up: at least two scrapes for rates, and head chunks as full as they are on average
            # in steady state (a series' chunk holds up to 120 samples and every selection decodes it).
            time.sleep(max(3 * args.interval, args.warmup))
            loaded = []
            for _ in range(args.cycles):
                c = one_cycle(stack.prom, time.time(), 3 * args.interval)
                if c:
                    loaded.append(c)
            series = int(float(stack.prom.query("prometheus_tsdb_head_series")[0]["value"][1]))
            groups = rule_groups(stack.prom)
            slowest = sorted(((r["evaluationTime"], r.get("name")) for g in groups for r in g["rules"]), reverse=True)[:args.top]
            rule_count = sum(len(g["rules"]) for g in groups if g["name"] != "peer-baseline")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if not loaded:
        print("no complete rule evaluation cycle measured", file=sys.stderr)
        return 1
    load = os.getloadavg()
    print(f"nodes={args.nodes} gpus={8 * args.nodes} interval={args.interval}s head_series={series} "
          f"gangwatch_rules={rule_count} warmup={args.warmup:.0f}s stack_start={start_s:.1f}s loadavg={load[0]:.1f} "
          f"cpus={os.cpu_count()} GOMEMLIMIT={os.environ.get('GOMEMLIMIT', '-')}")
    print("slowest rules (last cycle, s): " + ", ".join(f"{n} {t:.3f}" for t, n in slowest))
    print("groups (median of the cycles, s): " + ", ".join(
        f"{name} {statistics.median(c[name] for c in loaded):.3f}" for name in sorted(loaded[0])))
    total, longest, peer = (statistics.median(x[i] for x in map(split, loaded)) for i in range(3))
    print(f"while scraping (median of {len(loaded)} cycles): ours: longest group {longest:.3f} s per cycle "
          f"(goal <= 1 s), sum over groups {total:.3f} s; peer group {peer:.3f} s; ratio sum/peer "
          f"{total / peer if peer else float('inf'):.1f}")
    return 0 if longest <= 1.0 else 2


if __name__ == "__main__":
    sys.exit(main())
