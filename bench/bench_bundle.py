"""Speed and memory of `gangwatch diagnose --bundle` on site-scale bundles, beside a floor.

Bundles come from the simulator (dashboard/sources/simulated.BundleWriter): `--nodes` nodes
(default 32) for `--minutes` (default 30) at 15 s, in gangwatch's names and in node_exporter +
dcgm-exporter + Lustre exporter names (the issue's case: 32 nodes x 30 min, ~45 MB). The big run
repeats the exporter bundle `--copies` times (default 8) with the node names changed (a
32 x copies node cluster, the same jobs), to see how time and memory grow with the size.

Timed, best of `--repeat`, one process, interleaved:
* ours: the whole `diagnose --bundle DIR --span 3600` (diagnose_cli.run: read the bundle, build the
  window, judge every job), without printing;
* floor: one plain Python pass over the same metrics.om that splits every line into its series and
  its value, `line.rpartition(" ")` (reading and decoding the file included).
Goals (issue 13): ours <= 3x the floor, >= 50 MB/s.

Memory: the peak of Python's traced allocations (tracemalloc: numpy's buffers and Python objects;
not the interpreter's own memory) during one more run, against the decoded arrays = 16 bytes per
kept sample (its float64 time and value) + the Window's arrays. Goal: peak <= 2x decoded.
The time of a 4,096-node hour is extrapolated from the big run's MB/s (its size is stated).

    python bench/bench_bundle.py [--nodes 32] [--minutes 30] [--copies 8] [--repeat 3] [--old]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dashboard.analysis.sim import SimConfig, Simulation  # noqa: E402
from dashboard.diagnose_cli import build_parser, run  # noqa: E402
from dashboard.sources.build import WANTED  # noqa: E402
from dashboard.sources.exposition import read_columns  # noqa: E402
from dashboard.sources.simulated import BundleWriter  # noqa: E402


def make_bundles(root: str, nodes: int, minutes: int) -> dict[str, str]:
    sim = Simulation(SimConfig(nodes=nodes, seed=1, prefill=False, faults="ost_slow@5m+20m,gpu_throttle@5m+20m"))
    writers = {"gangwatch": BundleWriter(sim), "exporters": BundleWriter(sim, "exporters")}
    for k in range(minutes * 4 + 1):
        if k:
            sim.step()
        for w in writers.values():
            w.capture()
    out = {}
    for name, w in writers.items():
        out[name] = os.path.join(root, name)
        w.write(out[name])
    return out


def replicate(src: str, dst: str, copies: int) -> None:
    """The bundle's nodes `copies` times over: copy k renames "node..." label values to "cKKnode..."."""
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f != "metrics.om":
            with open(os.path.join(src, f), "rb") as a, open(os.path.join(dst, f), "wb") as b:
                b.write(a.read())
    with open(os.path.join(src, "metrics.om"), "rb") as f:
        data = f.read().replace(b"# EOF\n", b"")
    with open(os.path.join(dst, "metrics.om"), "wb") as out:
        for k in range(copies):
            out.write(data if k == 0 else data.replace(b'"node', b'"c%02dnode' % k))
        out.write(b"# EOF\n")


def floor(path: str) -> float:
    t = time.perf_counter()
    with open(os.path.join(path, "metrics.om"), encoding="utf-8", errors="replace") as f:
        for line in f:
            line.rpartition(" ")
    return time.perf_counter() - t


def ours(path: str):
    args = build_parser().parse_args(["--bundle", path, "--span", "3600"])
    t = time.perf_counter()
    diag, _ = run(args)
    return time.perf_counter() - t, diag


def old_reader(path: str) -> float:
    """The former path, for the record: every line through the regex reader and RawStore."""
    import math

    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.build import RawStore
    from dashboard.sources.bundle import read_jobs
    from dashboard.sources.exposition import iter_samples

    t = time.perf_counter()
    with open(os.path.join(path, "metrics.om"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    store, lo, hi = RawStore(), math.inf, -math.inf
    for s in iter_samples(text, ts_unit="s", wanted=WANTED):
        if s.timestamp is not None:
            lo, hi = min(lo, s.timestamp), max(hi, s.timestamp)
        store.add(s)
    win = store.signals().window(hi - 15 * math.floor((min(hi - lo, 3600)) / 15), hi, 15.0)
    with open(os.path.join(path, "squeue.json"), encoding="utf-8") as f:
        diagnose(win, read_jobs(f.read(), []))
    return time.perf_counter() - t


def memory(path: str) -> tuple[float, float]:
    """(peak traced MiB of one diagnose, decoded MiB)."""
    with open(os.path.join(path, "metrics.om"), "rb") as f:
        kept = read_columns(f, WANTED).samples
    tracemalloc.start()
    try:
        _, diag = ours(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    args = build_parser().parse_args(["--bundle", path, "--span", "3600"])
    from dashboard.sources.bundle import load_bundle

    win = load_bundle(path, args.step, args.span).window
    window = sum(a.nbytes for d in (win.gpu, win.rail, win.node, win.target) for a in d.values())
    window += sum(a.nbytes for d in win.job.values() for a in d.values())
    return peak / 2**20, (16 * kept + window) / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--copies", type=int, default=8, help="the big run: the exporter bundle this many times over")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old", action="store_true", help="also time the former reader once (slow)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as root:
        t = time.perf_counter()
        paths = make_bundles(root, args.nodes, args.minutes)
        if args.copies > 1:
            paths[f"exporters x{args.copies}"] = os.path.join(root, "big")
            replicate(paths["exporters"], paths[f"exporters x{args.copies}"], args.copies)
        print(f"bundles from the simulator ({args.nodes} nodes x {args.minutes} min) in {time.perf_counter() - t:.0f} s")
        print(f"{'bundle':<16}{'nodes':>6}{'MB':>8}{'lines':>10}{'floor s':>9}{'ours s':>8}{'ratio':>7}{'MB/s':>7}"
              f"{'peak MiB':>10}{'decoded':>9}{'peak/dec':>9}  verdicts")
        last_rate = None
        for name, p in paths.items():
            size = os.path.getsize(os.path.join(p, "metrics.om"))
            with open(os.path.join(p, "metrics.om"), "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))
            fs, os_ = [], []
            diag = None
            for _ in range(args.repeat if size < 200e6 else max(1, args.repeat - 1)):
                fs.append(floor(p))
                took, diag = ours(p)
                os_.append(took)
            peak, decoded = memory(p)
            f_, o_ = min(fs), min(os_)
            n_nodes = args.nodes * (args.copies if name.endswith(f" x{args.copies}") else 1)
            states: dict[str, int] = {}
            for v in diag.verdicts:
                states[v.state] = states.get(v.state, 0) + 1
            print(f"{name:<16}{n_nodes:>6}{size / 1e6:>8.1f}{lines:>10}{f_:>9.3f}{o_:>8.3f}{o_ / f_:>7.1f}"
                  f"{size / 1e6 / o_:>7.0f}{peak:>10.1f}{decoded:>9.1f}{peak / decoded:>9.2f}  {states}")
            last_rate = (size, o_)
        if last_rate:
            size, o_ = last_rate
            per_node_hour = size / (args.nodes * (args.copies if args.copies > 1 else 1)) * (60 / args.minutes)
            big = per_node_hour * 4096
            print(f"4,096 nodes x 1 hour in exporter names: ~{big / 1e9:.1f} GB; at the largest run's "
                  f"{size / 1e6 / o_:.0f} MB/s: ~{big / (size / o_) / 60:.1f} min (extrapolated, not run)")
        if args.old:
            p = paths["exporters"]
            print(f"former reader on '{'exporters'}': {old_reader(p):.2f} s (ours above)")
    print("goals (issue 13): ratio <= 3, >= 50 MB/s, peak/decoded <= 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
