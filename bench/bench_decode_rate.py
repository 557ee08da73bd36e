#!/usr/bin/env python3
"""What working a port counter's rate out of its raw samples costs serve, beside reading the
engine's own `rate` answer for the same ports and grid times.

On an engine other than Prometheus' own, serve asks for `ib_tx` and `ib_wait` as raw samples and
works the rate out itself (prometheus.RATED). This times one signal's answer merged into what serve
holds (`Held.merge_rates`: split, rows found, rates worked out, written and aligned), on answers
written as VictoriaMetrics writes them (the agent's label set, millisecond times, scrapes every
15 s at a port's own offset): a steady cycle's (the last 75 s, the new step and the settle, with
the rate window before them held from the cycle before; rates at the 6 newest grid times) and a
cold cycle's (an hour and the window before it; 241 grid times). The peer is what serve did before
with the engine's answer, `Held.merge` of a range answer holding the same ports' rates at the same
grid times (host labels only, as `sum by` leaves them). Best of `--repeat`, each on a copy of the
same held state, after one warm-up (a fresh process' first pass also pays for its fresh pages).

    python bench/bench_decode_rate.py [--ports 32768] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard.sources.matrix import split_numbers  # noqa: E402
from dashboard.sources.prometheus import RATED, Held  # noqa: E402

END = 1_796_440_800.0
STEP, WINDOW, SCRAPE = 15.0, 60.0, 15.0


def raw_answer(ports: int, span: float, end: float = END) -> bytes:
    """The raw samples of `ports` transmit counters over the `span` seconds before `end` (each port
    scraped at its own offset, its counter the same function of time whatever the span)."""
    rng = np.random.default_rng(1)
    result = []
    for p in range(ports):
        offset = int(rng.integers(0, 15_000)) / 1000
        total = int(rng.integers(10**9, 10**12))
        times = np.arange(END - 7200 + offset, end, SCRAPE)
        times = times[times > end - span]
        counts = total + 3_000_000 * (times - END) + 10**6 * (times % 7)
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


def best(fn, state: Held, repeat: int) -> float:
    """Least seconds of fn(a copy of `state`), after a warm-up."""
    times = []
    for _ in range(repeat + 1):
        held = copy.deepcopy(state)
        t = time.perf_counter()
        fn(held)
        times.append(time.perf_counter() - t)
    return min(times[1:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ports", type=int, default=32_768, help="ports answered (4,096 nodes x 8: 32,768)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    start, settle, lookback = END - 3600.0, 60.0, 2 * STEP
    print(f"{args.ports:,} ports, one signal; best of {args.repeat} after a warm-up")
    print(f"{'cycle':8} {'raw MB':>7} {'ours: merge_rates':>18} {'range MB':>9} {'peer: merge':>12} {'ratio':>6}")
    for name, since in (("steady", END - 75.0), ("cold", start)):
        ranged = range_answer(args.ports, since, int(round((END - since) / STEP)) + 1)
        ours, peer = Held(RATED["ib_tx"]), Held()
        fresh = None
        if name == "steady":  # the cycle before, one step earlier: what it holds, the tail among it
            was = END - STEP
            ours.merge_rates(split_numbers(raw_answer(args.ports, was - (was - 75.0 - WINDOW) + 0.001, was)),
                             start - STEP, was - 75.0, was, STEP, lookback, WINDOW, None, keep=was - settle - WINDOW)
            peer.merge(split_numbers(range_answer(args.ports, was - 75.0, 6)), start - STEP, was - 75.0, was, STEP, lookback)
            fresh = since
        raw = raw_answer(args.ports, (END - since) + (WINDOW if fresh is None else 0.0) + 0.001)
        o = best(lambda h: h.merge_rates(split_numbers(raw), start, since, END, STEP, lookback, WINDOW, fresh,
                                         keep=END - settle - WINDOW), ours, args.repeat)
        p = best(lambda h: h.merge(split_numbers(ranged), start, since, END, STEP, lookback), peer, args.repeat)
        print(f"{name:8} {len(raw) / 1e6:7.1f} {o:17.3f}s {len(ranged) / 1e6:9.1f} {p:11.3f}s {o / p:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
