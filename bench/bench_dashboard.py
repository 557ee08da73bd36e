"""Benchmark: the dashboard in a real browser (Debian's Chromium via Playwright) over the simulated
cluster at 4,096 nodes and at 64 nodes, in the same run (issue 8 targets at 4,096 nodes: Overview's
first load <= 2 s, refresh callbacks p95 <= 300 ms, <= 500 kB transferred per refresh).

For each size: build the simulation (1 h of history), serve `build_app(SimDatasource(sim,
background=True))` (what `gangwatch demo` mounts) on a free loopback port, then
- first load: a fresh browser context (empty cache) opens `/`; timed in the page from the start of
  navigation to the first full view (cards, incidents and the heatmap, as the server-drawn image
  that comes with the page) and to the interactive plotly heatmap that replaces it; also three
  loads with a warm cache (median);
- refresh: the page stays open with a REFRESH s interval while a thread advances the simulation by
  one step per interval; every Dash callback request is recorded (server time to the last byte,
  and its encoded body size as the browser received it); bytes per refresh = all callback bytes
  over the ticks / ticks.

The 64-node run is the peer: it shows how the cost grows with the cluster (ratio printed).

    /tmp/gwvenv/bin/python bench/bench_dashboard.py [--sizes 64,4096] [--ticks 8] [--refresh 5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time

CHROMIUM = "/usr/bin/chromium"
TARGETS = {"first_load_s": 2.0, "callback_p95_ms": 300.0, "kb_per_refresh": 500.0}
# Timestamps taken in the page (performance.now(), from the start of navigation) at the animation
# frame after each milestone's elements are in the DOM, so a busy main thread cannot hide or delay
# the moment: "view" = the cards, the incidents and the heatmap (its image or its figure) shown;
# "interactive" = the plotly heatmap drawn.
PROBE = """(() => {
  const marks = window.__gw = {};
  const q = (s) => document.querySelector(s);
  const want = {view: () => q('#overview-cards .gw-card') && q('#overview-incidents')
                            && q('#overview-heatmap-box img, #overview-heatmap .heatmaplayer'),
                interactive: () => q('#overview-heatmap .heatmaplayer')};
  const check = () => { for (const k in want) { if (!(k in marks) && want[k]()) {
      marks[k] = -1; requestAnimationFrame(() => { marks[k] = performance.now(); }); } } };
  new MutationObserver(check).observe(document, {subtree: true, childList: true});
})();"""


def serve(app):
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def measure(nodes: int, ticks: int, refresh: float, browser) -> dict:
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.app import build_app
    from dashboard.datasource import SimDatasource

    t0 = time.perf_counter()
    sim = Simulation(SimConfig(nodes=nodes, seed=0, start=time.time() - 3600, history_seconds=3600))
    build_s = time.perf_counter() - t0
    ds = SimDatasource(sim, background=True)
    warm_s = time.perf_counter() - t0 - build_s
    srv = serve(build_app(ds, refresh_seconds=refresh))
    url = f"http://127.0.0.1:{srv.server_port}/"
    res = {"nodes": nodes, "running_jobs": len(sim.running), "pending_jobs": len(sim.pending), "build_s": build_s,
           "precompute_s": warm_s}

    def first_load(ctx) -> tuple[float, float, dict]:
        """(seconds from navigation to the first full view, to the interactive heatmap, resources)."""
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_function("window.__gw && window.__gw.view > 0 && window.__gw.interactive > 0", timeout=60_000)
        marks = page.evaluate("window.__gw")
        res_ = page.evaluate("""() => Object.fromEntries(performance.getEntriesByType('resource').map(
            e => [e.name.replace(location.origin, '').split('?')[0], [Math.round(e.startTime), Math.round(e.responseEnd)]]))""")
        page.close()
        return marks["view"] / 1000, marks["interactive"] / 1000, res_

    ctx = browser.new_context(viewport={"width": 1366, "height": 860})
    ctx.add_init_script(PROBE)
    res["first_load_s"], res["interactive_s"], res["resources"] = first_load(ctx)  # empty cache: all bundles
    warm = [first_load(ctx) for _ in range(3)]
    res["warm_load_s"] = statistics.median(w[0] for w in warm)
    res["warm_interactive_s"] = statistics.median(w[1] for w in warm)

    page = ctx.new_page()
    calls: list[tuple[float, float, int]] = []  # (start time, ms, bytes)
    recording = threading.Event()

    def done(req):
        if recording.is_set() and "_dash-update-component" in req.url:
            t = req.timing
            size = req.sizes()["responseBodySize"]
            calls.append((t["startTime"], t["responseEnd"] - t["requestStart"], size))

    page.on("requestfinished", done)
    page.goto(url)
    page.locator("#overview-heatmap .main-svg").first.wait_for(timeout=60_000)
    stop = threading.Event()

    def clock():  # one simulated step per refresh interval, as the demo's clock at speed dt/refresh
        while not stop.wait(refresh):
            with ds.lock:
                sim.step()

    th = threading.Thread(target=clock, daemon=True)
    th.start()
    time.sleep(refresh * 1.5)
    recording.set()
    t_rec = time.perf_counter()
    page.wait_for_timeout(ticks * refresh * 1000)
    recording.clear()
    elapsed = time.perf_counter() - t_rec
    stop.set()
    th.join()
    page.close()
    ctx.close()
    srv.shutdown()
    ds.close()
    n_ticks = max(1, round(elapsed / refresh))
    ms = sorted(c[1] for c in calls)
    res.update(callbacks=len(calls), ticks=n_ticks,
               callback_p50_ms=statistics.median(ms) if ms else float("nan"),
               callback_p95_ms=ms[min(len(ms) - 1, int(0.95 * len(ms)))] if ms else float("nan"),
               callback_max_ms=ms[-1] if ms else float("nan"),
               kb_per_refresh=sum(c[2] for c in calls) / n_ticks / 1000)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="64,4096")
    p.add_argument("--ticks", type=int, default=8)
    p.add_argument("--refresh", type=float, default=5.0, help="refresh interval in seconds (default %(default)s)")
    args = p.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        for n in (int(x) for x in args.sizes.split(",")):
            print(f"== {n} nodes: building the simulation (1 h of history) ...", flush=True)
            r = measure(n, args.ticks, args.refresh, browser)
            results.append(r)
            print(f"   {r['running_jobs']} running, {r['pending_jobs']} pending jobs; sim built in {r['build_s']:.1f} s, "
                  f"dashboard precomputed in {r['precompute_s']:.2f} s", flush=True)
            print(f"   Overview first view {r['first_load_s']:.2f} s (empty cache), {r['warm_load_s']:.2f} s (cached); "
                  f"interactive heatmap {r['interactive_s']:.2f} s, {r['warm_interactive_s']:.2f} s (cached)")
            slow = sorted(r["resources"].items(), key=lambda kv: -kv[1][1])[:6]
            print("   empty-cache load, latest responses (ms from navigation start to end): "
                  + ", ".join(f"{k.rsplit('/', 1)[-1]} {v[1]}" for k, v in slow))
            print(f"   refresh: {r['callbacks']} callbacks over {r['ticks']} ticks; p50 {r['callback_p50_ms']:.0f} ms, "
                  f"p95 {r['callback_p95_ms']:.0f} ms, max {r['callback_max_ms']:.0f} ms; "
                  f"{r['kb_per_refresh']:.1f} kB per refresh")
        browser.close()
    big, small = max(results, key=lambda r: r["nodes"]), min(results, key=lambda r: r["nodes"])
    print()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'':28}{small['nodes']:>10}{big['nodes']:>10}{'ratio':>8}   target at {big['nodes']}")
    ok = True
    for key, label in (("first_load_s", "first view (s)"), ("warm_load_s", "cached first view (s)"),
                       ("interactive_s", "interactive heatmap (s)"), ("warm_interactive_s", "cached interactive (s)"),
                       ("callback_p95_ms", "refresh callback p95 (ms)"), ("kb_per_refresh", "kB per refresh")):
        ratio = big[key] / small[key] if small[key] else float("nan")
        target = TARGETS.get(key)
        verdict = "" if target is None else (f"<= {target:g} " + ("ok" if big[key] <= target else "MISSED"))
        ok &= target is None or big[key] <= target
        print(f"{label:28}{small[key]:>10.2f}{big[key]:>10.2f}{ratio:>8.1f}   {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
