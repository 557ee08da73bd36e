"""`diagnose --bundle` of this checkout beside another checkout's (e.g. main's), interleaved.

The bundles are made once (bench_bundle.make_bundles, `--copies` for the big one); then each round
runs, for each bundle and each checkout in turn, a fresh process that times the floor and the whole
diagnose (best of 2), CPU time (process_time) and wall time. Best over `--rounds`, so a busy moment
on a shared machine costs both sides alike. The load average is printed after each round.

    python bench/compare_bundle.py OTHER_CHECKOUT [--rounds 3] [--copies 8]
    (an old commit: git archive REV | tar -x -C /tmp/old, then pass /tmp/old)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_bundle  # noqa: E402

# one measurement in the checkout argv[1] (its bench_bundle and dashboard) on the bundle argv[2]
_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "bench")); sys.path.insert(0, sys.argv[1])
from dashboard.diagnose_cli import build_parser, run
p = sys.argv[2]
args = build_parser().parse_args(["--bundle", p, "--span", "3600"])
def floor():
    t, w = time.process_time(), time.perf_counter()
    with open(os.path.join(p, "metrics.om"), encoding="utf-8", errors="replace") as f:
        for line in f:
            line.rpartition(" ")
    return time.process_time() - t, time.perf_counter() - w
def ours():
    t, w = time.process_time(), time.perf_counter()
    run(args)
    return time.process_time() - t, time.perf_counter() - w
ours()
print(json.dumps([min(floor() for _ in range(2)), min(ours() for _ in range(2))]))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("other", help="the other checkout's root")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--minutes", type=int, default=30)
    args = ap.parse_args(argv)
    trees = {"other": os.path.abspath(args.other), "this": os.path.dirname(HERE)}
    with tempfile.TemporaryDirectory(prefix="compare-bundle-") as root:
        paths = bench_bundle.make_bundles(root, args.nodes, args.minutes)
        if args.copies > 1:
            paths[f"exporters x{args.copies}"] = os.path.join(root, "big")
            bench_bundle.replicate(paths["exporters"], paths[f"exporters x{args.copies}"], args.copies)
        best: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for name, p in paths.items():
                for side, tree in trees.items():
                    out = subprocess.run([sys.executable, "-c", _CHILD, tree, p], capture_output=True, text=True, check=True)
                    (fc, fw), (oc, ow) = json.loads(out.stdout)
                    got = best.setdefault((name, side), [float("inf")] * 4)
                    best[(name, side)] = [min(a, b) for a, b in zip(got, (fc, fw, oc, ow))]
            print(f"round {r + 1}: load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        print(f"{'bundle':<14}{'side':>6}{'MB':>7}{'floor s':>9}{'ours s':>8}{'ratio':>7}{'MB/s':>6}{'CPU floor':>11}"
              f"{'CPU ours':>10}{'ratio':>7}")
        for (name, side), (fc, fw, oc, ow) in best.items():
            mb = os.path.getsize(os.path.join(paths[name], "metrics.om")) / 1e6
            print(f"{name:<14}{side:>6}{mb:>7.0f}{fw:>9.3f}{ow:>8.3f}{ow / fw:>7.2f}{mb / ow:>6.0f}{fc:>11.3f}{oc:>10.3f}"
                  f"{oc / fc:>7.2f}")
    print(f"other = {trees['other']}, this = {trees['this']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
