#!/usr/bin/env python3
"""One diagnosis cycle's queries at sizes this host cannot scrape live: the simulated cluster's
samples imported, the same series into VictoriaMetrics and into Prometheus, and the diagnosis
cycles measured on each.

Live scraping stops near 1,024 nodes on 2 cores (bench_victoriametrics.py), but a diagnosis cycle
only reads what the engine holds. So:

1. `--nodes N` simulated for `--steps` steps of 15 s (ending when the run starts); at each step
   every node's agent exposition, as the demo serves it (NodeRenderer's families: the very lines a
   scrape reads), is collected into per-series columns: the families the diagnosis reads
   (dashboard.sources.build.WANTED), with the labels a scrape of the demo's /sim/prometheus.yml adds (job, instance, node;
   a series' own label of those names becomes `exported_<name>`, as a scrape with honor_labels
   false renames it). Then one file per engine, each series written once with all its steps: JSON
   lines for VictoriaMetrics' /api/v1/import (one line per series: "values" and "timestamps"),
   OpenMetrics with timestamps for `promtool tsdb create-blocks-from openmetrics`. The values are
   the exposition's own text, never re-formatted.
2. VictoriaMetrics (rollup cache off: every answer computed from the samples, as the newest steps of
   a live steady cycle are) imports the JSON lines; PrometheusSource's cycles run on it; stopped.
3. promtool turns the OpenMetrics into TSDB blocks in a fresh Prometheus' storage directory;
   Prometheus starts on it (15 s self-scrape only, so the source re-asks a scraping Prometheus'
   settle, 15 s, as on a live one) and the same cycles run on it, read from blocks on disk rather
   than a live head's chunks (docs/victoriametrics.md, Sizing, says what that changes).

The cycles, per engine, as `serve --prometheus` runs them over the last hour: a cold one (the hour
asked, only the imported minutes there) `--repeat` steps before the last imported step, then
`--repeat` steady ones, one per step up to the last (each source warm from the cycle one step
before asks only for the new step and its settle), the best of them reported. `--profile` adds one
more steady cycle under cProfile (the main thread: decoding, merging, window building) and times
orjson over that cycle's answers (the query threads' parsing). `--baseline DIR` measures another
checkout's source (main's) on the same engines right after ours (before them with
`--baseline-first`), in a process of its own.

Prints the series and samples imported and how long each stage took, the engines' resident memory,
per cycle: wall time, time queries were in flight and their seconds added up, bytes and series
answered, span asked, the CPU seconds the engine and our process used (with its decode processes,
`--decode-processes N`, which serve starts on a host of 4 cores or more; and per series answered:
on a host whose cores other work shares, these, not the wall time, are the cycle's cost); the
bytes serve holds for them (the last window's arrays, the source's held ones); and the load
average at each stage. `--osts K` gives the filesystem K OSTs (each a series per client and
counter; the simulator's default stops at 32, where sites of thousands of nodes have hundreds).

`--serve-cycles K` first runs K cycles from cold as `serve --prometheus` does (its default 10 s
deadline, or `--serve-timeout S`), printing per cycle the signals that failed and those known only
in part: at a size whose cold cycle does not fit that deadline, how many cycles it takes to see
every signal. With `--repeat 0` only those run.

`--idle 0,600` measures the agents' still counters (Lustre's per-target ones, InfiniBand's per-port
error counters) exported at every scrape (0) and left out while they stand still (600 s, the
agent's defaults: collectors.quiet.QuietSeries), each a dataset of its own through the same stages,
and ends with the steady cycles' ratio; `TARGETS:PORTS` sets the two windows apart (`600:0,600`:
the port error counters alone, as agents before they were left out).

Usage: python bench/bench_vm_import.py [--nodes 4096] [--steps 20] [--repeat 3] [--baseline DIR [--baseline-first]] [--profile]
                                       [--serve-cycles K [--serve-timeout S]] [--osts K] [--idle S|T:P[,...]]
                                       [--fabric roce]
Needs: Debian's victoria-metrics and prometheus packages (promtool).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import orjson  # noqa: E402
import psutil  # noqa: E402

from bench.bench_victoriametrics import QueryMeter, metric  # noqa: E402
from tests.support import vmstack  # noqa: E402
from tests.support.promstack import Prometheus, http_get  # noqa: E402

STEP = 15.0
BLOCK_SECONDS = 7200.0  # Prometheus' block range (promtool create-blocks-from cuts there)
JOB = "gangwatch-agent"  # the demo's /sim/prometheus.yml job, with instance = node = the node's name
SCRAPE_LABELS = ("job", "instance", "node")
MIB = 2 ** 20


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class Columns:
    """The wanted series of every node over the simulated steps: per series its exposition head
    (`name{labels}`), node, and the (step, value text) pairs it was exposed at (a series can start
    late or pause: a job's, a lost GPU's)."""

    def __init__(self, names: list[str], times: list[float]):
        self.names, self.times = names, times  # node names; every step's time, seconds
        self.heads: list[tuple[int, str]] = []  # per series: (node, exposition head)
        self.values: list[list[str]] = []
        self.steps: list[list[int]] = []
        # scrape targets other than the nodes' agents (the slurm-exporter): index in `names` ->
        # their job; instance = the name, no `node` label added
        self.jobs: dict[int, str] = {}

    @property
    def samples(self) -> int:
        return sum(map(len, self.values))

    def labels(self, sid: int) -> tuple[str, dict[str, str]]:
        """A series' name and labels as a scrape stores them (module doc)."""
        from dashboard.sources.exposition import split_line

        node, head = self.heads[sid]
        name, labels, _, _ = split_line(head + " 0")
        job = self.jobs.get(node)
        added = ("job", "instance") if job else SCRAPE_LABELS
        for key in added:
            if key in labels:
                labels["exported_" + key] = labels.pop(key)
        name_of = self.names[node]
        if job:
            return name, {**labels, "job": job, "instance": name_of}
        return name, {**labels, "job": JOB, "instance": name_of, "node": name_of}


def simulate(nodes: int, steps: int, seed: int, end: float | None = None, wanted: frozenset[str] | None = None,
             slurm: str = "", osts: int | None = None, idle: tuple[float, float] | None = None,
             fabric: str = "ib") -> Columns:
    """`steps` steps of the simulated cluster, the last at `end` (default: the latest 15 s boundary
    before now): the families in `wanted` (default: those the diagnosis reads) of every node's
    agent, and with `slurm` (the exporter's address, its `instance`) the slurm-exporter's families
    and every target's `up`, as the demo's /sim/prometheus.yml scrapes them. `osts`: the Lustre
    filesystem's OSTs (default: the simulator's, nodes / 16 between 8 and 32; sites of thousands of
    nodes have hundreds, each a series per client and counter). `idle`: the agents'
    --collector.lustre_client.target-idle-seconds and --collector.infiniband.error-idle-seconds
    (default theirs; 0: every OST's or port's counters at every scrape). `fabric`: the simulated
    compute fabric (roce: ECN, CNP and transport-error counters per port, no transmit wait)."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.render import NodeRenderer
    from dashboard.analysis.sim.slurm_view import build_snapshot, exporter_families
    # the families a diagnosis reads: the rest of an agent's exposition (three quarters of its
    # lines: throttle reasons, ECC, temperatures, NVLink and PCIe traffic) only costs the engines
    # memory and the import time, and no query here reads it. (dashboard is imported in the
    # functions, not at the top: a baseline's process imports its own.)
    from dashboard.sources.build import WANTED

    wanted = WANTED if wanted is None else wanted
    if end is None:
        end = time.time()
        # promtool cuts blocks at Prometheus' 2-hour boundaries: data across one is two blocks that
        # each hold every series, so Prometheus reads each twice, and a comparison would favour
        # the dataset that did not cross one. Such data ends just before the boundary instead.
        if math.floor(end / BLOCK_SECONDS) != math.floor((end - STEP * (steps + 1)) / BLOCK_SECONDS):
            end = math.floor(end / BLOCK_SECONDS) * BLOCK_SECONDS - STEP
    end = math.floor(end / STEP) * STEP
    start = end - STEP * steps
    sim = Simulation(SimConfig(nodes=nodes, seed=seed, start=start - 300, history_seconds=300, osts=osts,
                               fabric=fabric))
    renderer = NodeRenderer(sim, *(idle or ()))
    cols = Columns(list(sim.cluster.names), [])
    if slurm:
        cols.jobs[len(cols.names)] = "gangwatch-slurm"
        cols.names.append(slurm)
    index: list[dict[str, int]] = [{} for _ in cols.names]  # per target: exposition head -> series
    heads, values, steps_of = cols.heads, cols.values, cols.steps

    def put(i: int, lines, k: int) -> None:
        own = index[i]
        for line in lines:
            head, _, value = line.rpartition(" ")
            sid = own.get(head)
            if sid is None:
                sid = own[head] = len(heads)
                heads.append((i, head))
                values.append([])
                steps_of.append([])
            values[sid].append(value)
            steps_of[sid].append(k)

    up = ("up 1",) if slurm else ()
    while sim.t < end - 1e-6:
        sim.step()
        k = len(cols.times)
        cols.times.append(float(sim.t))
        for i in range(nodes):
            for fam in renderer.families(i):
                if fam.name in wanted:
                    put(i, fam.lines, k)
            put(i, up, k)
        if slurm:
            for fam in exporter_families(sim, build_snapshot(sim)):
                if fam.name in wanted:
                    put(nodes, fam.lines, k)
            put(nodes, up, k)
    return cols


def write(cols: Columns, jsonl: Path, om: Path | None) -> None:
    """Both import files (JSON lines only without `om`), each series once with all its steps
    (module doc). A value that is not a finite number (NaN, Inf: the text JSON cannot hold) stops
    the run: none is dropped or replaced."""
    from collectors.exposition import format_labels

    ms = [str(int(round(t * 1000))) for t in cols.times]
    secs = [f"{t:.3f}" for t in cols.times]
    all_ms = ",".join(ms)
    with open(jsonl, "wb") as fj, open(om or os.devnull, "w") as fo:
        for sid, (vals, steps) in enumerate(zip(cols.values, cols.steps)):
            joined = ",".join(vals)
            if "n" in joined:  # nan, inf: no digit string or exponent holds an n
                raise ValueError(f"non-finite value in {cols.heads[sid]}: {vals}")
            name, labels = cols.labels(sid)
            ts = all_ms if len(steps) == len(ms) else ",".join([ms[k] for k in steps])
            fj.write(b'{"metric":%s,"values":[%s],"timestamps":[%s]}\n' % (
                orjson.dumps({"__name__": name, **labels}), joined.encode(), ts.encode()))
            if om:
                head = name + format_labels(labels) + " "
                fo.write("".join([f"{head}{v} {secs[k]}\n" for v, k in zip(vals, steps)]))
        fo.write("# EOF\n")


def import_vm(url: str, jsonl: Path) -> None:
    """The JSON lines posted as one stream, then a flush so queries see every sample."""
    with open(jsonl, "rb") as f, httpx.Client(timeout=3600) as c:
        c.post(url + "/api/v1/import", content=iter(lambda: f.read(MIB), b"")).raise_for_status()
    http_get(url + "/internal/force_flush", timeout=300)


def prometheus_blocks(om: Path, storage: Path) -> tuple[int, int, int]:
    """promtool's blocks from the OpenMetrics file into `storage`: (blocks, series summed over
    blocks, samples)."""
    storage.mkdir(parents=True, exist_ok=True)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(om), str(storage)],
                   check=True, timeout=7200, capture_output=True)
    metas = [json.loads(p.read_text())["stats"] for p in storage.glob("*/meta.json")]
    return len(metas), sum(m["numSeries"] for m in metas), sum(m["numSamples"] for m in metas)


def cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def our_cpu() -> tuple[float, float]:
    """(this process' CPU seconds, its decode processes': dashboard/sources/decode_pool.py, the
    forkserver and its workers; not the engines, which are this process' children too)."""
    workers = [c for c in psutil.Process().children(recursive=True) if "multiprocessing" in " ".join(c.cmdline())]
    return time.process_time(), sum(c.cpu_times().user + c.cpu_times().system for c in workers)


def cycles(url: str, end: float, repeat: int, engine_pid: int, profile: bool = False, decode: int | None = None) -> dict:
    """{"cold": row, "steady": best row, "our_cpu": (min, median), "profile": text}, a row being QueryMeter's (wall s, in
    flight s, the queries' seconds added up, queries, bytes, span asked s, series answered) and the
    CPU seconds the engine's process and this one (all threads) used in the cycle: on a host whose
    cores are shared, the wall time says more about the other work than about the cycle; the CPU
    seconds are what the cycle costs wherever it runs. The best row is the one of least wall time,
    whose CPU seconds are those of that one cycle: "our_cpu" is this process' CPU seconds over all
    the steady cycles (least and median), steadier against the other work on shared cores."""
    from dashboard.sources.prometheus import PrometheusSource

    meter = QueryMeter(keep=profile)
    # a long deadline: a cold cycle at these sizes must be measured, not cut short
    src = PrometheusSource(url, timeout=2400, client=httpx.Client(timeout=600, event_hooks=meter.hooks),
                           **({} if decode is None else {"decode_processes": decode}))

    in_workers = []

    def one(at):
        engine0, (main0, workers0) = cpu(engine_pid), our_cpu()
        row = meter.cycle(src, at)
        assert not src.failed_last_cycle, meter.window.notes
        main, workers = our_cpu()
        in_workers.append(workers - workers0)
        return (*row, cpu(engine_pid) - engine0, main - main0 + workers - workers0)

    first = end - STEP * (repeat + (1 if profile else 0))
    out = {"cold": one(first)}
    steady = [one(first + STEP * k) for k in range(1, repeat + 1)]
    out["steady"] = min(steady)
    ours = sorted(row[-1] for row in steady)
    out["our_cpu"] = (ours[0], ours[len(ours) // 2])
    out["decode_processes"] = (src.decode.processes, sorted(in_workers[1:])[len(in_workers[1:]) // 2])  # steady: median
    win = meter.window  # what serve holds: the last window's arrays and the source's held ones
    out["held_bytes"] = (sum(a.nbytes for level in (win.gpu, win.rail, win.node, win.target) for a in level.values()),
                         sum(buf.nbytes for held in src._held.values() for buf in held._bufs))
    if profile:
        out["profile"] = profiled(src, meter, end)
    return out


def profiled(src, meter: QueryMeter, end: float) -> str:
    """One more steady cycle under cProfile (the thread that decodes, merges and builds the window),
    and the answers' split timed again (done in the query threads): where a cycle's time goes."""
    prof = cProfile.Profile()
    prof.enable()
    row = meter.cycle(src, end)
    prof.disable()
    from dashboard.sources.matrix import split_matrix

    t0 = time.perf_counter()
    for body in meter.bodies:  # as the query threads read them: split, else (an instant query) parsed
        split_matrix(body) or orjson.loads(body)
    parse = time.perf_counter() - t0
    stats = pstats.Stats(prof)

    def cum(file: str, *funcs: str) -> float:
        return sum(v[3] for (f, _, fn), v in stats.stats.items() if f.endswith(file) and fn in funcs)

    parts = {"waiting for answers": cum("concurrent/futures/_base.py", "result"),
             "decode + merge (Held.merge)": cum("sources/prometheus.py", "merge"),
             "into the store (Held.blocks, the facts: FactCache.labels, add_facts; older add_held, add_info)":
                 cum("sources/prometheus.py", "blocks", "labels", "add_facts", "add_held", "add_info"),
             "window assembly (HeldGrid.window or SignalStore.window, zero_reads, silent_nodes)":
                 cum("sources/build.py", "window") + cum("sources/prometheus.py", "silent_nodes")}
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(8)
    return (f"profiled steady cycle (main thread; load {load()}): wall {row[0]:.3f} s, queries in flight {row[1]:.3f} s, "
            f"{row[6]:,} series, {row[4] / 1e6:.1f} MB\n"
            + "".join(f"  {k:66} {v:7.3f} s\n" for k, v in parts.items())
            + f"  {'split_matrix over its ' + str(len(meter.bodies)) + ' answers (query threads; timed again alone)':66} {parse:7.3f} s\n"
            + "\n".join(line for line in text.getvalue().splitlines()[-12:] if line.strip()))


def serve_cycles(url: str, end: float, k: int, timeout: float = 10.0) -> None:
    """`k` cycles one step apart, from cold, with serve's defaults (its 10 s deadline): at a size
    where a signal's whole window does not answer in its share of that, the cycle leaves it absent
    and the next ones ask for its newest part (COLD_SHRINK). Per cycle: wall time, the signals
    that failed and those known only in part."""
    from dashboard.sources.prometheus import PrometheusSource

    src = PrometheusSource(url, timeout=timeout)
    for i in range(k):
        t0 = time.perf_counter()
        win = src.window(end - STEP * (k - 1 - i), 3600.0, STEP)
        wall = time.perf_counter() - t0
        failed = next((n.split(": ", 1)[1] for n in win.notes if re.search(r": \d+ quer(y|ies) failed: ", n)), "")
        part = next((n.rsplit("): ", 1)[1] for n in win.notes if "newest part" in n), "")
        print(f"    serve cycle {i + 1}: {wall:5.1f} s, {src.failed_last_cycle} failed"
              + (f" ({failed[:300]})" if failed else "")
              + (f"; in part: {part}" if part else ""), flush=True)


def measure(engine: str, url: str, pid: int, end: float, args) -> dict:
    """Our source's cycles, then the baseline's (a process of its own), on one engine; the other way
    round with `--baseline-first` (the first cycles after an import also pay the engine's background
    merges, which its CPU counts)."""
    rows = {}

    def ours() -> None:
        rows["ours"] = cycles(url, end, args.repeat, pid, args.profile, args.decode_processes)
        print(f"  {engine}: our cycles done, load {load()}", flush=True)

    def baseline() -> None:
        out = subprocess.run([sys.executable, __file__, "--cycles", f"{url},{end},{pid}", "--root", args.baseline,
                              "--repeat", str(args.repeat)], capture_output=True, text=True, timeout=7200, check=True)
        rows["baseline"] = json.loads(out.stdout.splitlines()[-1])
        print(f"  {engine}: the baseline's cycles done, load {load()}", flush=True)

    order = (baseline, ours) if args.baseline and args.baseline_first else (ours, baseline) if args.baseline else (ours,)
    for run in order:
        run()
    return {k: rows[k] for k in ("ours", "baseline") if k in rows}


def run_on(engine: str, server, end: float, args, before=lambda: None) -> dict | None:
    """`before()` (the import), then our cycles and the baseline's on a started engine, its memory
    after them, the figures (returned); the engine stopped in any case."""
    try:
        before()
        if args.serve_cycles:
            print(f"  {engine}: {args.serve_cycles} cycles as serve runs them, --prometheus-timeout "
                  f"{args.serve_timeout:g} s, from cold:", flush=True)
            serve_cycles(server.url, end, args.serve_cycles, args.serve_timeout)
        if not args.repeat:
            return None
        rows = measure(engine, server.url, server.process.proc.pid, end, args)
        print(f"  {engine} RSS after the cycles: "
              f"{psutil.Process(server.process.proc.pid).memory_info().rss / 2**30:.2f} GiB", flush=True)
        report(engine, args.nodes, rows, args.repeat)
        return rows
    finally:
        server.stop()


def report(engine: str, nodes: int, rows: dict, nsteady: int) -> None:
    print(f"{engine + ', ' + format(nodes, ',') + ' nodes':24} {'wall':>8} {'in flight':>9} {'added':>8} {'MB':>6} "
          f"{'series':>8} {'span':>5} {'engine CPU':>10} {'our CPU':>8} {'CPU us/series':>14}")
    for who, got in rows.items():
        for kind in ("cold", "steady"):
            w, f, added, _, b, span, s, ecpu, ocpu = got[kind]
            print(f"{who + ' ' + kind:24} {w:7.2f}s {f:8.2f}s {added:7.2f}s {b / 1e6:6.1f} {s:8,} {span:4.0f}s "
                  f"{ecpu:9.2f}s {ocpu:7.2f}s {1e6 * ecpu / max(s, 1):6.1f} +{1e6 * ocpu / max(s, 1):6.1f}")
    for who, got in rows.items():
        procs, in_workers = got.get("decode_processes", (0, 0.0))
        print(f"{who} steady, our CPU over the {nsteady} cycles: least {got['our_cpu'][0]:.2f} s, "
              f"median {got['our_cpu'][1]:.2f} s" + (f", of which in its {procs} decode processes {in_workers:.2f} s "
                                                     f"(median)" if procs else ""))
        if "held_bytes" in got:
            print(f"{who}: the window's arrays {got['held_bytes'][0] / 2**20:,.0f} MiB, the held signals' "
                  f"{got['held_bytes'][1] / 2**20:,.0f} MiB")
    if rows["ours"].get("profile"):
        print(rows["ours"]["profile"])
    print(flush=True)


def parse_idle(text: str) -> tuple[float, float]:
    """`S` (both windows) or `TARGETS:PORTS`."""
    parts = [float(x) for x in text.split(":")]
    if len(parts) > 2:
        raise ValueError(f"not S or TARGETS:PORTS: {text!r}")
    return parts[0], parts[-1]


def one_dataset(args, work: Path, engines: list[str], idle: tuple[float, float] | None):
    """Simulate, write, import into each engine and measure; yields (engine, rows)."""
    t0 = time.perf_counter()
    cols = simulate(args.nodes, args.steps, args.seed, osts=args.osts, idle=idle, fabric=args.fabric)
    t1 = time.perf_counter()
    jsonl, om = work / "series.jsonl", work / "series.om"
    write(cols, jsonl, om)
    t2 = time.perf_counter()
    end, series, samples = cols.times[-1], len(cols.heads), cols.samples
    print(f"{args.nodes:,} nodes, {len(cols.times)} steps: {series:,} series ({series / args.nodes:.0f} a node), "
          f"{samples:,} samples; simulated and collected in {t1 - t0:.0f} s ({samples / (t1 - t0):,.0f} samples/s), "
          f"written in {t2 - t1:.0f} s (JSON lines {jsonl.stat().st_size / MIB:,.0f} MiB, OpenMetrics "
          f"{om.stat().st_size / MIB:,.0f} MiB); load {load()}", flush=True)
    del cols
    if "victoriametrics" in engines:
        vm = vmstack.VictoriaMetrics(work, extra_flags=["-search.maxQueryDuration=1200s"])

        def fill():
            rss0 = psutil.Process(vm.process.proc.pid).memory_info().rss
            t0 = time.perf_counter()
            import_vm(vm.url, jsonl)
            rows = metric(vm.url, "vm_rows_added_to_storage_total")
            held = json.loads(http_get(vm.url + "/api/v1/series/count", timeout=300))["data"][0]  # count() hits the series limit
            rss = psutil.Process(vm.process.proc.pid).memory_info().rss
            print(f"VictoriaMetrics: {rows:,.0f} samples, {held:,.0f} series imported in {time.perf_counter() - t0:.0f} s; "
                  f"RSS {rss / 2**30:.2f} GiB (growth {(rss - rss0) / 2**30:.2f}); load {load()}", flush=True)

        rows = run_on("VictoriaMetrics", vm, end, args, fill)
        if rows:
            yield "VictoriaMetrics", rows
    if "prometheus" in engines:
        t0 = time.perf_counter()
        blocks, bseries, bsamples = prometheus_blocks(om, work / "prom-data")
        print(f"promtool: {blocks} block(s), {bseries:,} series, {bsamples:,} samples in "
              f"{time.perf_counter() - t0:.0f} s; load {load()}", flush=True)
        # a cold cycle's queries at these sizes take minutes (as on VictoriaMetrics' side: its
        # -search.maxQueryDuration above): 503 past Prometheus' default 2 min
        rows = run_on("Prometheus", Prometheus(work, [], interval="15s", self_scrape=True,
                                               extra_flags=["--query.timeout=20m", "--query.max-samples=200000000"]),
                      end, args)
        if rows:
            yield "Prometheus", rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--osts", type=int, help="the Lustre filesystem's OSTs (default: the simulator's, at most 32)")
    ap.add_argument("--fabric", choices=("ib", "roce"), default="ib",
                    help="the simulated compute fabric: InfiniBand, or RoCE (ECN, CNP, transport errors per port)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default="victoriametrics,prometheus")
    ap.add_argument("--profile", action="store_true", help="one more steady cycle of ours under cProfile")
    ap.add_argument("--baseline", help="another checkout whose diagnosis cycles to measure beside ours")
    ap.add_argument("--baseline-first", action="store_true", help="the baseline's cycles before ours")
    ap.add_argument("--serve-cycles", type=int, default=0,
                    help="first, this many cycles from cold as serve runs them (--repeat 0: only those)")
    ap.add_argument("--serve-timeout", type=float, default=10.0, help="their deadline (serve's --prometheus-timeout)")
    ap.add_argument("--decode-processes", type=int,
                    help="our source's decode processes (default: as serve picks them for this host: "
                         "dashboard/sources/decode_pool.py)")
    ap.add_argument("--idle", help="the agents' idle windows (--collector.lustre_client.target-idle-seconds and "
                                   "--collector.infiniband.error-idle-seconds), or several comma-separated (each a "
                                   "dataset of its own, measured in turn; 0: every counter at every scrape); default "
                                   "the agent's")
    ap.add_argument("--keep", help="a directory to keep the import files and engines' data in (default: a temporary one)")
    ap.add_argument("--cycles", help=argparse.SUPPRESS)  # the baseline's process: URL,end,engine's PID
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cycles:
        sys.path.insert(0, str(Path(args.root).resolve()))
        import dashboard.sources.prometheus as source
        assert Path(source.__file__).resolve().is_relative_to(Path(args.root).resolve()), source.__file__
        url, end, pid = args.cycles.rsplit(",", 2)
        print(json.dumps(cycles(url, float(end), args.repeat, int(pid))))
        return 0
    engines = args.engines.split(",")
    if not vmstack.available() or not shutil.which("promtool"):
        print("needs Debian's victoria-metrics and prometheus (promtool)")
        return 2
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-import-"))
    work.mkdir(parents=True, exist_ok=True)
    idles = [(x, parse_idle(x)) for x in args.idle.split(",")] if args.idle else [("", None)]
    try:
        print(f"load {load()}; {psutil.virtual_memory().available / 2**30:.1f} GiB available", flush=True)
        steady = {}
        for name, idle in idles:
            if idle is not None:
                print(f"\n== the agents' idle windows: Lustre targets {idle[0]:g} s, InfiniBand port errors "
                      f"{idle[1]:g} s (0: every counter at every scrape)", flush=True)
            sub = work / f"idle-{name.replace(':', '-')}" if len(idles) > 1 else work
            sub.mkdir(parents=True, exist_ok=True)
            for engine, rows in one_dataset(args, sub, engines, idle):
                steady[(name, engine)] = rows["ours"]["steady"]
        if len(idles) > 1:
            print("\nsteady cycle, ours, by the agents' idle window (wall s, engine CPU s, series answered):")
            for (name, engine), row in steady.items():
                first = steady[(idles[0][0], engine)]
                print(f"  {engine:16} {name:>8} s: {row[0]:6.2f} s, {row[7]:6.2f} s, {row[6]:8,}   ratio to "
                      f"{idles[0][0]} s: wall {row[0] / first[0]:.2f}, engine CPU {row[7] / max(first[7], 1e-9):.2f}")
        print(f"\nload at the end: {load()}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
