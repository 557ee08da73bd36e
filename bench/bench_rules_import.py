#!/usr/bin/env python3
"""Rule evaluation at sizes this host cannot scrape live: Prometheus beside vmalert on the same
imported samples, every group of rules/recording.yml and rules/alerts.yml.

bench_rules.py measures Prometheus' groups on a live scrape of the demo (4,096 nodes need 14 GiB
and both cores for Prometheus alone); bench_victoriametrics.py measures both engines live, up to
the 1,024 nodes this host can scrape twice over. This one gives vmalert's figure at 4,096 nodes
beside Prometheus' in one run:

1. `--nodes N` simulated for `--steps` steps of 15 s, the last `--ahead` seconds after the run's
   start, so the newest samples are still "now" while the rules are evaluated (an engine answers a
   query at time t from samples at or before t: the samples ahead wait their turn). Collected as
   bench_vm_import does (the labels a scrape of the demo adds), but only the families the rules
   read (their selectors, parsed with promql_parser): the agents' per-node rollups, the
   slurm-exporter's families, and every target's `up`. Serve's findings (`gangwatch_job_stalled`,
   ...) are not imported, as bench_rules.py does not scrape them: the rules over them select
   nothing here.
2. Prometheus, empty, with the rules (evaluated every 15 s, as in production) and its remote-write
   receiver: the series are written to it (remote write 1.0, protobuf, snappy) into its head, as a
   scrape would have put them (a block written ahead of time would refuse the rules' own samples,
   appended at now); then `--cycles` whole evaluation cycles (every group once, started after the
   write), each group's evaluation time from /api/v1/rules.
3. VictoriaMetrics, fresh, imports the same series (JSON lines); vmalert (the deployment's flags:
   deploy/victoriametrics/) evaluates the same rules every 15 s against it, writing the recordings
   back; after `--cycles` evaluations each group's median iteration time (vmalert 1.79 exports no
   per-group last duration; the median of its iterations leaves out the first, cold ones).

Prints per group both figures, the longest group and the sum over groups on each, and the ratio
vmalert / Prometheus (the peer: the same rules, the same samples, the same host, one run).
Goal (issue 16): the longest group <= 1 s on either at 4,096 nodes.

What differs from a live site: the engines hold only the families the rules read (about 57
series a node, not the agent's ~930), so their index is smaller; the history is the imported
`--steps` (a `[1h]` window sees those minutes); no scrape competes for the cores.

Usage: python bench/bench_rules_import.py [--nodes 4096] [--steps 48] [--ahead 480] [--cycles 4]
Needs: Debian's prometheus, victoria-metrics and vmalert packages.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench import bench_vm_import as imp  # noqa: E402
from bench.bench_rules import one_cycle  # noqa: E402
from bench.bench_victoriametrics import vmalert_rule_times  # noqa: E402
from tests.support import vmstack  # noqa: E402
from tests.support.promql_names import alerting_rules, metric_names, recording_rules  # noqa: E402
from tests.support.promstack import Prometheus, wait_for  # noqa: E402

RULES = Path(__file__).resolve().parents[1] / "rules"
RULE_FILES = (RULES / "recording.yml", RULES / "alerts.yml")
SLURM = "127.0.0.1:9815"  # the slurm-exporter's scrape address (its `instance`)
BATCH = 2000  # series per remote-write request


def recorded(url: str) -> str:
    """How many recording rules' outputs have series now, and which have none: the rules saw the
    samples (a rule over nothing costs nothing, and would flatter the figures)."""
    names = sorted(recording_rules())
    with httpx.Client(timeout=60) as client:
        r = client.get(url + "/api/v1/query", params={"query": f'count by (__name__) ({{__name__=~"{"|".join(names)}"}})'})
        r.raise_for_status()
        have = {s["metric"]["__name__"] for s in r.json()["data"]["result"]}
    return f"{len(have)} of {len(names)} recording rules have series (none: {', '.join(sorted(set(names) - have))})"


def rule_families() -> frozenset[str]:
    """The metric names the rules select, less their own recordings."""
    records = recording_rules()
    exprs = [*records.values(), *(r["expr"] for r in alerting_rules())]
    return frozenset(set().union(*map(metric_names, exprs)) - set(records))


# ---- remote write 1.0: protobuf by hand (prometheus.WriteRequest), snappy's block format with
# literals only (valid snappy that any decoder reads; the receiver needs no compression ratio)

def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _series(labels: dict[str, str], values: list[str], stamps: list[int]) -> bytes:
    body = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in sorted(labels.items()))
    return _field(1, body + b"".join(_field(2, b"\x09" + struct.pack("<d", float(v)) + b"\x10" + _varint(t))
                                     for v, t in zip(values, stamps)))


def snappy_literal(data: bytes) -> bytes:
    out = bytearray(_varint(len(data)))
    for off in range(0, len(data), 65536):
        chunk = data[off:off + 65536]
        n = len(chunk) - 1
        out += bytes([n << 2]) if n < 60 else bytes([60 << 2, n]) if n < 256 else bytes([61 << 2]) + n.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def remote_write(url: str, cols: imp.Columns) -> None:
    ms = [int(round(t * 1000)) for t in cols.times]
    headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
               "X-Prometheus-Remote-Write-Version": "0.1.0"}
    with httpx.Client(timeout=300) as client:
        for lo in range(0, len(cols.heads), BATCH):
            body = b"".join(_series({"__name__": name, **labels}, cols.values[sid], [ms[k] for k in cols.steps[sid]])
                            for sid in range(lo, min(lo + BATCH, len(cols.heads)))
                            for name, labels in (cols.labels(sid),))
            r = client.post(url + "/api/v1/write", content=snappy_literal(body), headers=headers)
            if r.status_code >= 300:
                raise RuntimeError(f"remote write: HTTP {r.status_code}: {r.text[:300]}")


def prometheus_groups(work: Path, cols: imp.Columns, cycles: int) -> dict[str, list[float]]:
    prom = Prometheus(work, [], rule_files=list(RULE_FILES), interval="15s",
                      extra_flags=["--web.enable-remote-write-receiver"])
    try:
        t0 = time.perf_counter()
        remote_write(prom.url, cols)
        print(f"Prometheus: {len(cols.heads):,} series written in {time.perf_counter() - t0:.0f} s; "
              f"RSS {psutil.Process(prom.process.proc.pid).memory_info().rss / 2**30:.2f} GiB; load {imp.load()}",
              flush=True)
        after, got = time.time(), {}
        for _ in range(cycles):
            cycle = one_cycle(prom, after, 120)
            if cycle is None:
                raise RuntimeError("Prometheus: no whole evaluation cycle in 120 s")
            for group, took in cycle.items():
                got.setdefault(group, []).append(took)
            after = time.time()
        print(f"Prometheus: {recorded(prom.url)}", flush=True)
        return got
    finally:
        prom.stop()


def vmalert_groups(work: Path, jsonl: Path, cycles: int) -> dict[str, float]:
    vm = vmstack.VictoriaMetrics(work)
    alert = None
    try:
        t0 = time.perf_counter()
        imp.import_vm(vm.url, jsonl)
        print(f"VictoriaMetrics: imported in {time.perf_counter() - t0:.0f} s; load {imp.load()}", flush=True)
        # no Alertmanager: vmalert 1.79 needs a notifier for alerting rules, and a refused
        # connection costs nothing beside the evaluations
        alert = vmstack.VMAlert(work, list(RULE_FILES), vm.url, "http://127.0.0.1:9", interval="15s")
        time.sleep(15 * cycles + 5)
        got: dict[str, float] = {}
        wait_for(lambda: (got.update(vmalert_rule_times(alert)) or got) and len(got) >= 2, 60, "vmalert's iterations")
        print(f"VictoriaMetrics: {recorded(vm.url)}", flush=True)
        return got
    finally:
        if alert:
            alert.stop()
        vm.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--ahead", type=float, default=480.0, help="seconds the last step lies after the run's start")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if not vmstack.available() or not shutil.which("prometheus"):
        print("needs Debian's prometheus, victoria-metrics and vmalert")
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-rules-import-"))
    try:
        print(f"load {imp.load()}; {psutil.virtual_memory().available / 2**30:.1f} GiB available", flush=True)
        t0 = time.perf_counter()
        cols = imp.simulate(args.nodes, args.steps, args.seed, end=time.time() + args.ahead,
                            wanted=rule_families(), slurm=SLURM)
        jsonl = work / "series.jsonl"
        imp.write(cols, jsonl, None)
        print(f"{args.nodes:,} nodes, {len(cols.times)} steps to {args.ahead:.0f} s ahead: {len(cols.heads):,} series "
              f"({len(cols.heads) / args.nodes:.0f} a node), {cols.samples:,} samples, in {time.perf_counter() - t0:.0f} s; "
              f"load {imp.load()}", flush=True)
        end = cols.times[-1]
        for sub in ("prom", "vm"):
            (work / sub).mkdir()
        prom = prometheus_groups(work / "prom", cols, args.cycles)
        del cols
        vm = vmalert_groups(work / "vm", jsonl, args.cycles)
        if time.time() > end:
            print(f"WARNING: the evaluations ran {time.time() - end:.0f} s past the last imported step: "
                  "raise --ahead", flush=True)
        prom_med = {g: statistics.median(v) for g, v in prom.items()}
        print(f"\n{'group':44} {'Prometheus':>11} {'vmalert':>9}   (s; Prometheus: median of {args.cycles} cycles; "
              f"vmalert: its iterations' median)")
        for g in sorted(set(prom_med) | set(vm), key=lambda g: -max(prom_med.get(g, 0), vm.get(g, 0))):
            print(f"{g:44} {_s(prom_med.get(g))} {_s(vm.get(g))}")
        for what, fn in (("longest group", max), ("sum over groups", sum)):
            p, v = fn(prom_med.values()), fn(vm.values())
            print(f"{what:44} {p:10.3f}s {v:8.3f}s   vmalert/Prometheus {v / max(p, 1e-9):.2f}")
        worst = max(max(prom_med.values()), max(vm.values()))
        print(f"goal: the longest group <= 1 s on either at 4,096 nodes: {worst:.3f} s at {args.nodes:,} nodes, "
              f"{'met' if worst <= 1.0 else 'NOT met'}; load at the end {imp.load()}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _s(v: float | None) -> str:
    return f"{v:10.3f}s" if v is not None else f"{'-':>11}"


if __name__ == "__main__":
    sys.exit(main())
