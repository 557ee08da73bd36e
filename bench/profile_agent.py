#!/usr/bin/env python3
"""Where one scrape's CPU goes: each collector, the scrape framework, encoding, gzip, HTTP.

Runs in one process on the live /proc and /sys (or --fixtures) with the same collector set as
bench_agent.py and prints CPU microseconds per step (process CPU time, so worker threads count).
`--cprofile` adds a cProfile of the collectors and encoder run inline.

Usage: python bench/profile_agent.py [--n 300] [--fixtures] [--cprofile]
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_agent import COLLECTORS, Client, fixture_paths  # noqa: E402


def cpu_us(fn, n: int) -> float:
    fn()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) * 1e6 / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("--cprofile", action="store_true")
    args = ap.parse_args(argv)

    from collectors.agent import build_parser, build_scraper
    from collectors.exposition import encode
    from collectors.registry import load_builtin_collectors
    from collectors.scrape import run_collector
    from collectors.web import make_server, metrics_handler, serve_in_thread

    registered = list(load_builtin_collectors())
    tmp = tempfile.mkdtemp(prefix="gw-prof-")
    try:
        paths = fixture_paths(tmp) if args.fixtures else {"procfs": "/proc", "sysfs": "/sys", "rootfs": "/"}
        argv2 = ["--path.procfs", paths["procfs"], "--path.sysfs", paths["sysfs"], "--path.rootfs", paths["rootfs"],
                 "--scrape.cache-ttl", "0"]
        argv2 += [f"--collector.{n}" if n in COLLECTORS else f"--no-collector.{n}" for n in registered]
        ns = build_parser().parse_args(argv2)
        scraper = build_scraper(ns)
        collectors = scraper.collectors
        print(f"{'step':<34} {'CPU us':>9}")
        total_inline = 0.0
        for c in collectors:
            us = cpu_us(lambda: run_collector(c), args.n)
            total_inline += us
            print(f"  collector {c.name:<24} {us:>9.1f}")
        print(f"  {'sum of collectors inline':<34} {total_inline:>9.1f}")
        # Like for like with collect_once: all of them in turn (each alone above runs hot in cache).
        print(f"  {'all collectors inline + encode':<34} "
              f"{cpu_us(lambda: encode([f for c in collectors for f in run_collector(c).families]), args.n):>9.1f}")
        fams = [f for c in collectors for f in run_collector(c).families]
        print(f"  {'encode':<34} {cpu_us(lambda: encode(fams), args.n):>9.1f}")
        text = encode(fams).encode()
        print(f"  {'gzip level 1':<34} {cpu_us(lambda: gzip.compress(text, 1, mtime=0), args.n):>9.1f}")
        print(f"  {'Scraper.collect_once (all)':<34} {cpu_us(scraper.collect_once, args.n):>9.1f}")
        s = scraper.collect_once()
        print(f"  {'Scrape.gzip_body (fresh)':<34} {cpu_us(lambda: (setattr(s, 'gzipped', None), s.gzip_body()), args.n):>9.1f}")

        server = make_server("127.0.0.1:0", {"/metrics": metrics_handler(scraper)})
        serve_in_thread(server)
        port = server.server_address[1]
        client = Client(port)
        client_cost = cpu_us(lambda: client.get(), args.n)
        scraper.cache_ttl = 3600.0
        cached = cpu_us(lambda: client.get(), args.n)
        print(f"  {'HTTP request, full (incl. client)':<34} {client_cost:>9.1f}")
        print(f"  {'HTTP request, cached (incl. client)':<34} {cached:>9.1f}")
        server.shutdown()
        server.server_close()
        client.close()
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.n):
                fams = [f for c in collectors for f in run_collector(c).families]
                gzip.compress(encode(fams).encode(), 1, mtime=0)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        scraper.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
