#!/usr/bin/env python3
"""What working a port counter's rate out of its raw samples costs serve (matrix.decode_rate),
beside decoding the engine's own `rate` answer for the same ports and grid times (decode_range).

On an engine other than Prometheus' own, serve asks for `ib_tx` and `ib_wait` as raw samples and
works the rate out itself (prometheus.RATED). This times that, in one process, on answers written
as VictoriaMetrics writes them (the agent's label set, millisecond times, scrapes every 15 s at a
port's own offset): a steady cycle's (the last 135 s: the new step, the settle and the rate window;
rates at the 6 newest grid times) and a cold cycle's (an hour and the window before it; 241 grid
times). The peer is what serve did before with the engine's answer: the split of a range answer
holding the same ports' rates at the same grid times (host labels only, as `sum by` leaves them) and
its placement on the grid. Best of `--repeat`, each after one warm-up (a fresh process' first
pass also pays for its fresh pages).

    python bench/bench_decode_rate.py [--ports 32768] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard.sources.matrix import decode_range, decode_rate, split_numbers  # noqa: E402

END = 1_796_440_800.0
STEP, WINDOW, SCRAPE = 15.0, 60.0, 15.0


def raw_answer(ports: int, span: float) -> bytes:
    """The raw samples of `ports` transmit counters over the `span` seconds before END."""
    rng = np.random.default_rng(1)
    result = []
    for p in range(ports):
        offset = int(rng.integers(0, 15_000)) / 1000
        total = int(rng.integers(10**9, 10**12))
        times = np.arange(END - span + offset, END, SCRAPE)
        counts = total + np.cumsum(rng.integers(10**6, 10**9, times.size))
        result.append({"metric": {"__name__": "gangwatch_infiniband_port_transmit_data_bytes_total",
                                  "device": f"mlx5_{p % 8}", "instance": f"node{p // 8:05d}:9810",
                                  "job": "gangwatch", "port": "1"},
                       "values": [[round(float(t), 3), str(int(c))] for t, c in zip(times, counts)]})
    return orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def range_answer(ports: int, start: float, n: int) -> bytes:
    """The engine's `sum by (instance, device, port) (rate(...))` at n grid times from `start`."""
    rng = np.random.default_rng(2)
    result = [{"metric": {"device": f"mlx5_{p % 8}", "instance": f"node{p // 8:05d}:9810", "port": "1"},
               "values": [[start + STEP * k, repr(float(v))] for k, v in enumerate(rng.uniform(1e6, 1e9, n))]}
              for p in range(ports)]
    return orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def best(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ports", type=int, default=32_768, help="ports answered (4,096 nodes x 8: 32,768)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    start = END - 3600.0
    print(f"{args.ports:,} ports, one signal; best of {args.repeat} after a warm-up")
    print(f"{'cycle':8} {'raw MB':>7} {'ours: split + rate':>19} {'range MB':>9} {'peer: split + place':>20} {'ratio':>6}")
    for name, span, since in (("steady", 75.0 + WINDOW, END - 75.0), ("cold", 3600.0 + WINDOW, start)):
        raw = raw_answer(args.ports, span + 0.001)
        n_new = int(round((END - since) / STEP)) + 1
        ranged = range_answer(args.ports, since, n_new)
        n = int(round((END - start) / STEP)) + 1

        def ours():
            return decode_rate(split_numbers(raw), start, STEP, n, WINDOW, since)

        def peer():
            return decode_range(split_numbers(ranged), start, STEP, n)

        got = ours()
        assert got[2].size >= args.ports * (n_new - 1), "fewer rates than grid times"
        o, p = best(ours, args.repeat), best(peer, args.repeat)
        print(f"{name:8} {len(raw) / 1e6:7.1f} {o:18.3f}s {len(ranged) / 1e6:9.1f} {p:19.3f}s {o / p:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
