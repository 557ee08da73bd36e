#!/usr/bin/env python3
"""serve's own CPU a steady diagnosis cycle, without the engine beside it: answers captured once,
replayed to our source and to another checkout's, alternately.

bench_vm_import.py measures whole cycles against a live engine, whose work shares this host's cores
with ours: at 4,096 nodes on 2 cores the engine's 6-9 CPU-seconds a cycle make our 1.6-2 s vary by
a fifth from run to run, more than most changes to serve's part. Here the simulated cluster
(bench_vm_import's data, `--nodes` x `--steps` of 15 s) is imported into VictoriaMetrics once, and
the answers to a cold cycle and `--cycles` steady ones (one step apart, up to the last imported
step) are kept, keyed by their URL. Then each checkout's PrometheusSource runs the same cycles in a
process of its own whose HTTP client answers from what was kept (httpx.MockTransport): no engine,
no network, the same bytes for both; ours and the baseline's in turn, `--rounds` times, the order
swapped each round. serve keeps the last window (a page draws it) and the source reuses the
arrays of the one before (build._Recycler), as here.

Prints, per checkout, our CPU seconds of every steady cycle after the first (the first reuses no
arrays yet), their least and median, and the medians' ratio. A cycle answered differently from the
capture (a checkout that asks other queries or spans) is refused, not measured.

    python bench/bench_serve_replay.py --baseline DIR [--nodes 4096] [--cycles 5] [--rounds 4] [--keep DIR]

Needs Debian's victoria-metrics package.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench import bench_vm_import as imp  # noqa: E402
from tests.support import vmstack  # noqa: E402


def capture(nodes: int, steps: int, cycles: int, work: Path) -> Path:
    """The answers (URL -> status, body) of a cold cycle and `cycles` steady ones, pickled."""
    kept = work / f"answers-{nodes}-{steps}-{cycles}.pickle"
    if kept.exists():
        return kept
    jsonl = work / "series.jsonl"
    if not jsonl.exists():
        cols = imp.simulate(nodes, steps, 1)
        imp.write(cols, jsonl, None)
        del cols
    end = json.loads(jsonl.open().readline())["timestamps"][-1] / 1000
    from dashboard.sources.prometheus import PrometheusSource

    engine_dir = work / "capture"  # a fresh engine each capture: an import into a kept one would add the samples twice
    shutil.rmtree(engine_dir, ignore_errors=True)
    engine_dir.mkdir()
    vm = vmstack.VictoriaMetrics(engine_dir, extra_flags=["-search.maxQueryDuration=1200s"])
    try:
        imp.import_vm(vm.url, jsonl)
        log: list[tuple[str, int, bytes]] = []

        def keep(response):
            response.read()
            log.append((str(response.request.url), response.status_code, response.content))

        src = PrometheusSource(vm.url, timeout=2400, client=httpx.Client(timeout=600, event_hooks={"response": [keep]}))
        got = []
        for k in range(cycles + 1):
            log.clear()
            at = end - imp.STEP * (cycles - k)
            src.window(at, 3600.0, imp.STEP)
            if src.failed_last_cycle:
                raise SystemExit(f"cycle {k}: {src.failed_last_cycle} queries failed on VictoriaMetrics")
            got.append((at, {url: (status, body) for url, status, body in log}))
        with kept.open("wb") as f:
            pickle.dump({"url": vm.url, "cycles": got}, f, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        vm.stop()
    return kept


def replay(answers: Path) -> list[float]:
    """This process' CPU seconds of each cycle of `answers` through the PrometheusSource on sys.path."""
    from dashboard.sources.prometheus import PrometheusSource

    with answers.open("rb") as f:
        kept = pickle.load(f)
    now: dict[str, tuple[int, bytes]] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        if str(request.url) not in now:
            raise SystemExit(f"not captured: {request.url}")
        status, body = now[str(request.url)]
        return httpx.Response(status, content=body, headers={"content-type": "application/json"})

    src = PrometheusSource(kept["url"], timeout=2400, client=httpx.Client(transport=httpx.MockTransport(answer)))
    out, shown = [], None
    for at, now in kept["cycles"]:
        t0 = time.process_time()
        shown = src.window(at, 3600.0, imp.STEP)  # noqa: F841 (held, as a page holds the last window)
        out.append(time.process_time() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="another checkout to replay the same answers to")
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=5, help="steady cycles after the cold one")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--keep", help="a directory to keep the import and the answers in (default: a temporary one)")
    ap.add_argument("--replay", help=argparse.SUPPRESS)  # a replaying process: the answers' pickle
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.replay:
        sys.path.insert(0, str(Path(args.root).resolve()))
        for name in [m for m in sys.modules if m == "dashboard" or m.startswith("dashboard.")]:
            del sys.modules[name]
        import dashboard.sources.prometheus as source
        assert Path(source.__file__).resolve().is_relative_to(Path(args.root).resolve()), source.__file__
        print(json.dumps(replay(Path(args.replay))))
        return 0
    if not vmstack.available():
        print("needs Debian's victoria-metrics")
        return 2
    if args.cycles < 2:
        ap.error("--cycles: 2 at least (the first steady cycle is not counted)")
    ours_root = Path(__file__).resolve().parents[1]
    trees = {"ours": ours_root} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    with nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="bench-replay-") as where:
        work = Path(where)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        answers = capture(args.nodes, args.steps, args.cycles, work)
        print(f"{args.nodes:,} nodes: the answers of a cold and {args.cycles} steady cycles captured from "
              f"VictoriaMetrics ({answers.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.0f} s; "
              f"load {imp.load()}", flush=True)
        steady: dict[str, list[float]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                done = subprocess.run([sys.executable, __file__, "--replay", str(answers), "--root", str(trees[name])],
                                      capture_output=True, text=True, check=False)
                if done.returncode:
                    print(f"{name}: {done.stderr.strip()[-2000:]}")
                    return 1
                cpu = json.loads(done.stdout.strip().splitlines()[-1])
                steady[name] += cpu[2:]
                print(f"  round {r + 1}, {name:8}: cold {cpu[0]:.2f} s, steady " +
                      " ".join(f"{c:.3f}" for c in cpu[1:]) + f" s; load {imp.load()}", flush=True)
    print(f"\nour CPU a steady cycle, {args.nodes:,} nodes ({args.rounds} rounds x {args.cycles - 1} cycles, "
          f"the first steady cycle of each left out):")
    for name, cpu in steady.items():
        print(f"  {name:8} least {min(cpu):.3f} s, median {statistics.median(cpu):.3f} s")
    if "baseline" in steady:
        print(f"  ours / baseline, medians: {statistics.median(steady['ours']) / statistics.median(steady['baseline']):.2f}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
