"""Metric source: the Prometheus HTTP API (also Thanos, Mimir, VictoriaMetrics: same API).

One range query per diagnosis signal (`/api/v1/query_range`), aggregated on the server to one
series per node (and GPU, port or target): `avg by (<host labels>, gpu) (...)`, `sum by (...)
(rate(...[1m]))` (the window widened to 2.5 scrape intervals where scrapes are sparser:
INTERVAL_QUERY), event counters as the difference of samples one step apart; the per-GPU and
per-port levels (utilisation, power, clocks, a link's rate) as their raw samples instead, one
instant query of `selector[span]` each, placed on the step grid here (SAMPLED), and on an engine other
than Prometheus' own the port counters' too, their rate worked out here as Prometheus works it out
(RATED). Every exporter schema
a signal can come from (schema.MAPPINGS) is OR-ed into the same query, so the number of queries per
cycle is fixed (`len(plan_queries())`, 19) whatever the node count or the schemas in use; plus one
instant query for facts (GPU -> job, leaf switch, NVLink peers, NUMA) and, on a cold cycle, one
for the scrape interval. PromQL lives here and nowhere else. The queries run `QUERY_WORKERS` at a time
(more on a Prometheus with more cores: `engine_workers`);
answers are decoded in bulk (matrix.py: no JSON object per point or per series, each series'
labels' bytes finding its row as they are; then every point of an answer at once onto the step
grid; a large answer split in a worker process on a host with cores to spare: decode_pool.py),
never series by series, and written into the signal's held arrays in place (`Held`); the window
is assembled from those by `HeldGrid` (build.py), which keeps the layout and where each row lands
between cycles. So a steady cycle's own work follows its new points, not the hour it holds; what
still grows with the hour is numpy copying the held rows into the window's arrays (those of a
window nothing holds any more, refilled: build.py `_Recycler`).

The per-node-and-target signals (`read`, `latency`: every client has a series for every target)
are asked for only where they carry something (`SPARSE`: reads > 0, finite latencies), which
leaves what the diagnosis takes from them as it was (docs/victoriametrics.md, Sizing). A node's
filesystem throughput (`fs_read`, `fs_write`) comes from the agent's one series per filesystem;
the per-target series it is the sum of (an older agent's only ones) are a fallback the plan leaves
out where no node lacks the total (PLAN_QUERY, asked before the plan: FALLBACK_FACTS, `covered`):
PromQL's `or` would read them for every node.

Steady state: the source keeps what it fetched and each cycle asks only for the span since the
previous cycle's end, plus a settle before it (points a late sample could still change:
`SETTLE_SECONDS`, or the longest scrape timeout of a Prometheus that only scrapes, `scrape_settle`,
or the arrival and -search.latencyOffset of a VictoriaMetrics, `latency_settle`),
so serve's every-15-s cycle over a one-hour window costs two to six steps per query instead of 240.
A steady window equals a cold one bit for bit: the rows one cell or job adds up are added in the
order of their labels, whichever cycle each came in.
The hardware facts (leaf, NVLink peers, NUMA: nine tenths of the facts' answer) are asked for on a
cold cycle and then every `TOPOLOGY_SECONDS`, or on the cycle after a node appears that they did not
cover; the cycles between ask for the job facts only.
A point the engine computes at time t depends only on samples at or before t, so held points equal
what a cold query returns; a signal whose query fails (or a change of step, rate window or a jump
out of the held span) is fetched whole the next cycle, unless it only came late (a timeout: what is
held stays, and the next cycle asks from its end). Samples that reach the engine more than
`SETTLE_SECONDS` late (a vmagent replaying its disk buffer) are seen by cold cycles only: a failed
cycle drops what is held, so the cycles after an engine restart start cold.

Failure modes: the queries of one window share a deadline (`timeout`, default 10 s) and each may
use at most a quarter of it (`QUERY_SHARE`; twice that the next cycle where it used all of it,
up to the whole: `_shares`), so one hung query costs its own signal, not the ones after it (what
a cycle costs per size: docs/victoriametrics.md, Sizing); a failed, slow or erroring query leaves
its signal absent (unknown) and adds a note naming it (and where a cold cycle's whole window is
what failed, the next asks for its newest part: COLD_SHRINK); Prometheus down means an empty
window whose notes say so, and the diagnosis then reports insufficient_data with that reason.
Nodes that sent GPU samples earlier in the window but none in its last `stale_seconds` (their
scraper died: one vmagent shard of several, one Prometheus of a functional shard set) are named
in a note and in `last_errors` (serve's "partly down" detail); the other nodes are judged as usual.
"""

from __future__ import annotations

import itertools
import math
import re
import time
import urllib.parse
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import httpx
import orjson
import yaml

from collectors import fetch
from collectors.fetch import Deadline
import numpy as np

from dashboard.analysis.gcpause import gc_paused
from dashboard.analysis.thresholds import Thresholds
from dashboard.analysis.window import Window, grid

from . import decode_pool
from .matrix import (Matrix, counter_samples, decode_increase, decode_range, decode_rate, decode_samples, in_order, rates,
                     split_vector)
from .build import LOOKBACK_STEPS, GridBlock, HeldGrid, SignalStore, align_grid
from .schema import (FALLBACK_MARKERS, HOST_LABELS, HPC_JOB_LABEL, KEY_OF_LEVEL, MAPPINGS, PORT_INFO, RATIOS, Mapping,
                     NodeMatcher, sub_key)


def series_selector(m: Mapping) -> str:
    """The PromQL selector of one mapping's raw series (its metric and label filters)."""
    parts = []
    for k, v in m.filters:
        op, v = ("!=", v[1:]) if v.startswith("!") else ("=", v)
        parts.append(f'{k}{op}"{v}"')
    return m.metric + ("{" + ",".join(parts) + "}" if parts else "")


def _summed(ms: list[Mapping]) -> list[list[Mapping]]:
    """Mappings of one signal that one exporter means to be added up (combine="sum", the same kind,
    scale and filters: RoCE's ECN marks and CNPs) grouped, so PromQL adds them as the bundle reader
    does instead of `or` keeping the first; every other mapping alone (a fallback too: `or` keeps
    its replacement where a node has both, as `drop_fallbacks` does)."""
    out: list[list[Mapping]] = []
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for m in ms:
        if m.combine == "sum" and m.counter:
            groups[(_family(m.metric), m.events, m.scale, m.filters, m.key, m.fallback)].append(m)
        else:
            out.append([m])
    return out + list(groups.values())


# Levels whose series are asked for as they stand on Prometheus' own engine, not aggregated by the
# host labels and the key (those of their signals that are not SAMPLED: the port counters' rates):
# one series a GPU or port and exporter, so `avg by`/`sum by` only renamed them, and Prometheus
# hashes every series' labels at every step to do it, about as much again as reading them (the ten per-GPU and per-port queries 13.8 CPU-seconds a steady cycle at 4,096 nodes
# against 5.7: bench/README.md, "Per-device series as they stand"). VictoriaMetrics aggregates in
# the pass that reads (the same queries 7.5 s against 6.9 s, within its noise), and the answers as
# they stand are a quarter larger, which cost serve more than that: it keeps the aggregates
# (`raw_levels`). Serve maps each row to its GPU or port as it did the aggregate's, and the rows
# of one cell average (HeldGrid), which is what `avg by` did and, for a rate, what the bundle
# reader does where `sum by` added a duplicate (one agent scraped twice) twice. Mappings added up
# by design (combine="sum") that are not asked for as raw series are aggregated by the engine
# whatever it is.
RAW_LEVELS = ("gpu", "rail")


def raw_levels(runtimeinfo) -> tuple[str, ...]:
    """The levels to ask for as they stand from an engine whose /api/v1/status/runtimeinfo `data`
    this is: RAW_LEVELS where it is Prometheus' own (it says its GOMAXPROCS; VictoriaMetrics answers
    400), none where it does not say (the aggregates, as before)."""
    return RAW_LEVELS if _gomaxprocs(runtimeinfo) is not None else ()


def _sum_expr(ms: list[Mapping], by: str, rate_window: float, step: float, sparse: bool = False,
              raw: tuple[str, ...] = ()) -> str:
    if len(ms) == 1:
        return _expr(ms[0], by, rate_window, step, sparse, aggregate=ms[0].level not in raw or ms[0].combine != "mean")
    # each part labelled apart so `or` keeps them all, then added up where any is present
    return f"sum by ({by}) (" + " or ".join(
        f'label_replace({_expr(m, by, rate_window, step, sparse)}, "gw_part", "{i}", "", "")'
        for i, m in enumerate(ms)) + ")"


def _expr(m: Mapping, by: str, rate_window: float, step: float, sparse: bool = False, aggregate: bool = True) -> str:
    """One mapping's PromQL, aggregated `by` the host labels and the level's key where asked to
    `aggregate` (not the RAW_LEVELS of a Prometheus). `sparse` (a SPARSE
    signal's counters): each raw series' rate filtered to > 0 before the sum, which leaves every
    sum > 0 as it was (rates are never negative) and drops the zero ones, so the engine aggregates
    and matches only the series that moved (docs/victoriametrics.md, Sizing)."""
    if m.key and m.level == "target":
        # a target named by another label (GPFS, BeeGFS: the filesystem `fs`): grouped by that
        # label, then named `target` as the window keys it
        by_key = ",".join(m.key if k == "target" else k for k in by.split(","))
        return (f'label_replace({_expr(replace(m, key=""), by_key, rate_window, step, sparse)}, '
                f'"target", "$1", "{m.key}", "(.+)")')
    sel = series_selector(m)
    if m.events:
        # the step's increase as the difference of the latest samples at t and t - step: Prometheus'
        # increase() over one step sees a single sample (scrapes are not on the query's grid) and
        # returns nothing; this counts each event once, at the first step that sees it, at any
        # scrape interval (a counter reset counts none)
        inner = f"clamp_min({sel} - {sel} offset {int(max(step, 1))}s, 0)"
    elif m.counter:
        inner = f"rate({sel}[{int(rate_window)}s]){' > 0' if sparse else ''}"
    else:  # gauges: several series of one key average, or add up where the schema says so
        inner = sel
    if aggregate:
        inner = f"{'avg' if not (m.events or m.counter) and m.combine != 'sum' else 'sum'} by ({by}) ({inner})"
    # repr: every digit of the scale (`:g` wrote 1.04858e+06 for a MiB)
    return inner if m.scale == 1.0 else f"({inner}) * {float(m.scale)!r}"


def plan_queries(rate_window: float = 60.0, step: float = 15.0, host_labels: tuple[str, ...] = HOST_LABELS,
                 covered: frozenset[str] = frozenset(), raw: tuple[str, ...] = (),
                 by_engine: bool = False) -> list[tuple[str, str, str]]:
    """[(signal, level, PromQL)]: one query per signal, every schema OR-ed in, less the fallback
    mappings whose replacement every node has (`covered`: PLAN_QUERY's FALLBACK_FACTS said so); the
    series of the `raw` levels as they stand (RAW_LEVELS, on an engine that gains by it), the
    event counters of STEP_INCREASE read once and the SAMPLED levels' raw series (a selector each,
    asked for its samples), unless everything is to be worked out `by_engine` (benchmarks measure
    both). PromQL's `or`
    evaluates both sides, so a fallback left in costs its series even where its replacement is read."""
    # a scale read from a label (a histogram bucket's bound) has no PromQL form: such rows are for
    # bundles and the embedded scraper only
    mappings = [m for m in MAPPINGS if not m.scale_label and m.fallback not in covered]
    groups: dict[tuple[str, str], list[Mapping]] = defaultdict(list)
    for m in mappings:
        groups[(m.signal, m.level)].append(m)
    out = []
    parts = {name for pair in RATIOS.values() for name in pair[:2]}  # derived: divided on the server
    for (signal, level), ms in groups.items():
        if signal in parts or (signal in READ_WITH and not by_engine):
            continue
        by = ",".join(host_labels + KEY_OF_LEVEL[level])
        if signal in STEP_INCREASE and not by_engine:
            out.append((signal, level, counters_selector(ms + [m for s, host in READ_WITH.items() if host == signal
                                                              for m in groups.get((s, level), ())])))
            continue
        if (signal in SAMPLED or signal in RATED) and not by_engine:
            out.append((signal, level, sampled_selector(ms)))
            continue
        kept_raw = () if by_engine else raw
        out.append((signal, level, " or ".join(f"({_sum_expr(g, by, rate_window, step, signal in SPARSE, kept_raw)})"
                                               for g in _summed(ms))))
    for signal, (num, den, level) in RATIOS.items():
        by = ",".join(host_labels + KEY_OF_LEVEL[level])
        nums = [m for m in mappings if m.signal == num]
        # a numerator pairs with the denominator of the same exporter and subsystem (gangwatch_lustre_*,
        # gangwatch_beegfs_*, node_cpu_*)
        dens = {_family(m.metric): m for m in mappings if m.signal == den}
        exprs = []
        for n in nums:
            d = dens.get(_family(n.metric))
            if d is not None:
                sparse = signal in SPARSE
                exprs.append(f"({_expr(n, by, rate_window, step, sparse)}) / ({_expr(d, by, rate_window, step, sparse)})")
        out.append((signal, level, " or ".join(f"({e})" for e in exprs)))
    return _shared([(signal, level, f"({q}) {SPARSE[signal]}" if signal in SPARSE else q) for signal, level, q in out])


# Signals asked for only where they carry something, and the filter that says so. Per node and
# filesystem target they are most of a cycle's series (every client has a series for every target,
# 16,384 of each at 512 nodes), yet a client reads from few targets at a time, and what the
# diagnosis takes from them survives the filter exactly: from `read` which targets each node read
# from in the window (a sum > 0), from `latency` its finite values (a target with no reads has none:
# 0/0, which Prometheus answers as NaN and VictoriaMetrics leaves out). Their counters are filtered
# before the sum as well (`_expr`'s `sparse`: each raw series' rate > 0), so the engine aggregates and
# divides only the series that moved (Prometheus hashes every series of a `sum by` at every step: it
# spends 3-4x less CPU on these two so; the answer is the same, a latency whose time counter stood
# still while its operations counter moved being the one point left out, as no RPC takes 0 s). A
# point the filter dropped is NaN in the window, never an earlier point carried over it (`add_held`),
# and `read` is 0 there wherever the node's filesystem total (`fs_read`) is known (build.zero_reads), as
# the unfiltered answer said; the targets nobody read come from TARGET_FACTS. docs/victoriametrics.md,
# Sizing.
SPARSE = {"read": "> 0", "latency": "< +Inf"}
FACT_LABEL = "gw_fact"


def _target_facts() -> str:
    """An instant query for every filesystem target a node has a read counter for (read or not):
    one series per target, labelled FACT_LABEL="target"."""
    ms = [m for m in MAPPINGS if m.signal == "read" and not m.scale_label]

    def count(m: Mapping) -> str:
        if not m.key:
            return f"count by (target) ({series_selector(m)})"
        return f'label_replace(count by ({m.key}) ({series_selector(m)}), "target", "$1", "{m.key}", "(.+)")'
    return " or ".join(f'label_replace({count(m)}, "{FACT_LABEL}", "target", "", "")' for m in ms)


def _fallback_facts() -> str:
    """An instant query for the nodes that lack a fallback's replacement (an agent from before it):
    those with its marker (FALLBACK_MARKERS: one series a node and filesystem, where the fallback's
    own are one per target) and no series of the replacement; one series per such node, labelled
    FACT_LABEL="lacks" and LACKS_LABEL=<the replacement metric>. None answered for a replacement
    means every node has it, and the plan leaves its fallbacks out (`covered`). (Reading the
    fallback's per-target series instead cost a 512-node, 256-OST cold cycle about 3 s more of
    VictoriaMetrics' CPU.)"""
    by = ",".join(HOST_LABELS)
    parts = []
    for metric, marker in FALLBACK_MARKERS.items():
        lacking = (f"count by ({by}) ({series_selector(marker)}) unless on ({by}) "
                   f"{series_selector(replace(marker, metric=metric))}")
        parts.append(f'label_replace(label_replace({lacking}, "{FACT_LABEL}", "lacks", "", ""), '
                     f'"{LACKS_LABEL}", "{metric}", "", "")')
    return " or ".join(parts)


LACKS_LABEL = "gw_lacks"
FALLBACK_FACTS = _fallback_facts()
# a fallback without a marker is never left out: no fact could say every node does without it
REPLACEMENTS = frozenset(m.fallback for m in MAPPINGS if m.fallback in FALLBACK_MARKERS)


# Event counters whose step's increase this process works out from the counters themselves, asked
# from one step before the span (matrix.decode_increase): `clamp_min(c - c offset <step>, 0)` makes
# the engine read each raw series twice, match the two and aggregate, 2-6x the work of reading it
# once (bench/README.md, "Event counters read once"). Those whose mappings stand alone and share
# their label filters, and the counters read with them (READ_WITH: RoCE's transport errors, added
# up per port by `Held.blocks`); one sharing a query (SHARED_QUERIES) is asked as before. All of a
# signal's counters (the agent's, node_exporter's) are one selector on their names
# (`counters_selector`), neither `or` nor `sum by`, which cost Prometheus as much again: each series
# keeps its name, so no counter's count is ever taken from another's (an `or` of the counters
# would, where relabelling gives both the same labels), each row's increase is its own, and the
# rows of one port average as any series of one key do (two scrapes of one agent count a link's
# drop once, where `sum by` counted it twice).
def _step_increase() -> frozenset[str]:
    return frozenset(signal for signal, ms in _alone().items() if len({(m.level, m.filters) for m in ms}) == 1
                     and all(m.events and m.scale == 1.0 and len(g) == 1 for g in _summed(ms) for m in g))


def _alone() -> dict[str, list[Mapping]]:
    """The mappings PromQL can ask for of each signal that has a query of its own: neither a part of
    a shared one (SHARED_QUERIES) nor of a ratio (RATIOS), nor read in another's (READ_WITH)."""
    by_signal: dict[str, list[Mapping]] = defaultdict(list)
    for m in MAPPINGS:
        if not m.scale_label:
            by_signal[m.signal].append(m)
    shared = {s for members in SHARED_QUERIES.values() for s in members}
    parts = {name for pair in RATIOS.values() for name in pair[:2]}
    return {signal: ms for signal, ms in by_signal.items() if signal not in shared | parts | set(READ_WITH)}


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def counters_selector(ms: list[Mapping]) -> str:
    """One selector for the raw series of mappings that share their label filters."""
    names = sorted({m.metric for m in ms})
    if not all(_METRIC_NAME.fullmatch(n) for n in names) or len({m.filters for m in ms}) != 1:
        raise ValueError(f"not one selector: {names}")
    if len(names) == 1:
        return series_selector(ms[0])
    rest = series_selector(replace(ms[0], metric=""))
    return "{" + f'__name__=~"{"|".join(names)}"' + ("," + rest[1:-1] if rest else "") + "}"


# Signals of one level that are only read where the others are absent (the ethtool collector's
# rollups, read on RoCE, where InfiniBand has no transmit wait; the tasks in I/O wait, read where
# PSI is off, beside iowait; the agent's one-a-node marker that it leaves still port error counters
# out, and its node rollups of those counters, beside the NICs' link events) share one query: each
# part is labelled with its signal, which add_matrix reads. So the cycle's query count stays in budget.
SHARED_QUERIES = {"links": ("eth_pause", "eth_down", "eth_err", "eth_storm", "ib_quiet", "ib_down_node", "ib_err_node"),
                  "host_io": ("iowait", "blocked")}
# Event counters read in another's query, as its raw counters are (STEP_INCREASE): RoCE's transport
# errors (four counters a port, added up) in InfiniBand's symbol errors' selector, each row's step
# increase worked out by serve and told apart by its name (`Held`: a row's mapping gives its
# signal). In the engine, `clamp_min(c - c offset, 0)` of the four summed read each of the 32
# series a node twice and matched them: with RoCE's congestion counters' rates, two thirds of a
# RoCE cycle's engine CPU on Prometheus at 4,096 nodes (bench/README.md, "RoCE's counters read as
# they stand").
READ_WITH = {"roce_err": "ib_err"}
SIGNAL_LABEL = "gw_signal"


def _shared(plan: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    by_signal = {signal: (level, q) for signal, level, q in plan}
    grouped = {s for members in SHARED_QUERIES.values() for s in members}
    out = [row for row in plan if row[0] not in grouped]
    for name, members in SHARED_QUERIES.items():
        parts = [(s, *by_signal[s]) for s in members if s in by_signal]
        if parts:
            out.append((name, parts[0][1], " or ".join(
                f'label_replace({q}, "{SIGNAL_LABEL}", "{s}", "", "")' for s, _, q in parts)))
    return out


def _family(metric: str) -> str:
    return "_".join(metric.split("_")[:2])


STEP_INCREASE = _step_increase()


# The levels of one GPU or port (utilisation, SM activity, power, memory, SM clock, the rate a link
# trained at: two thirds of a cycle's per-device series) are asked for as their raw samples,
# `selector[span]` in an instant query at the span's end, and placed on the grid here
# (matrix.decode_samples: the latest sample of the step that ends at each grid time), then carried
# over one missed scrape as a bundle's samples are (`sample_lookback`, align_grid). A range query
# makes the engine work out every series' point at every step (and VictoriaMetrics aggregate them
# by the host labels): the samples as stored cost it 0.55 of that on VictoriaMetrics and 0.70 on
# Prometheus at 4,096 nodes (bench/README.md, "The levels as raw samples, built"). A signal's
# mappings share one selector: its metric names, each label filter with its alternatives (and
# none, where a mapping has no such filter: `sampled_selector`); each answered series then finds its
# own mapping by its name and labels (`sample_mapping`), which scales it (DCGM's percent, MiB, MHz)
# or leaves it out (a series the alternatives let in that no mapping takes), and the series of one
# GPU or port average (HeldGrid), as RAW_LEVELS' do. What differs from a range query: a series that
# stops is carried over for `sample_lookback` (an engine ends it at its staleness marker at once), and
# a gap of more than that is unknown, where an engine carries the last sample up to 5 minutes
# (docs/victoriametrics.md, "Levels as raw samples").
def _raw_series(counters: bool) -> dict[str, tuple[Mapping, ...]]:
    """The signals of one GPU or port whose mappings are all levels (or all counters of a rate) that
    one selector can ask for: neither events, nor keyed by another label, nor a fallback, nor
    excluding a label's value, each series standing for its GPU or port alone (mean), or each
    counter one part of a sum (combine="sum": RoCE's ECN marks and CNPs; `Held.blocks` adds them
    up, each averaged over its own rows)."""
    return {signal: tuple(ms) for signal, ms in _alone().items()
            if signal not in SPARSE and len({m.level for m in ms}) == 1 and ms[0].level in RAW_LEVELS
            and len({m.combine for m in ms}) == 1 and ms[0].combine in ("mean", "sum")
            and all(m.counter == counters and not (m.events or m.key or m.fallback)
                    and not any(v.startswith("!") for _, v in m.filters) for m in ms)}


SAMPLED = _raw_series(counters=False)

# The port counters' rates (a link's traffic, its transmit wait, RoCE's ECN marks and CNPs added up:
# a third of a cycle's per-device series) are asked for as their raw samples too, from one rate
# window before the span, and their rate worked out here as Prometheus works it out
# (matrix.decode_rate: the same extrapolation, the samples' own milliseconds), so every engine gives
# the same rate: VictoriaMetrics' `rate` starts from the sample before the window and does not
# extrapolate, so where scrapes are off the query's grid it covered up to a scrape interval more
# than Prometheus' (docs/victoriametrics.md, "Rates from raw samples").
# A rate's points are what the engine's range query has, so they are carried as its points are
# (LOOKBACK_STEPS), not as a level's samples. A cycle keeps each port's samples of the rate window
# before the next cycle's first grid time (`Held.tail`: settled, so what the engine would answer
# again), and that cycle asks for its own span alone, as a level's. On Prometheus' own engine too:
# its `rate` is that rate already, but with the answers not gzipped (fetch.accept_encoding) writing
# out the samples costs it less than working the rate out (4,096 nodes, steady: 2.98-3.46 CPU-s a
# cycle against 3.40-3.67; bench/README.md, "Port rates from raw samples on Prometheus too").
RATED = _raw_series(counters=True)


def _read_with() -> dict[str, tuple[Mapping, ...]]:
    """Per signal whose query reads others' counters too (READ_WITH), its mappings and theirs."""
    def of(signal):
        return tuple(m for m in MAPPINGS if m.signal == signal and not m.scale_label)
    out: dict[str, tuple[Mapping, ...]] = {}
    for signal, host in READ_WITH.items():
        out[host] = out.get(host, of(host)) + of(signal)
    return out


# The mappings a held signal's rows find theirs among (`sample_mapping`): its scale, and the signal
# and the counter it is part of (a RATED sum's, a READ_WITH signal's)
HELD_MAPPINGS = {**SAMPLED, **RATED, **_read_with()}


def sampled_selector(ms: tuple[Mapping, ...] | list[Mapping]) -> str:
    """One selector for the raw series of all of a signal's mappings: their names, and per label a
    filter names the value (or values) the mappings want, "" among them where one has no filter on
    it (PromQL's empty value matches a series without the label)."""
    names = sorted({m.metric for m in ms})
    if not all(_METRIC_NAME.fullmatch(n) for n in names):
        raise ValueError(f"not one selector: {names}")
    parts = [f'__name__=~"{"|".join(names)}"'] if len(names) > 1 else []
    for k in sorted({k for m in ms for k, _ in m.filters}):
        alts = sorted({dict(m.filters).get(k, "") for m in ms})
        parts.append(f'{k}="{alts[0]}"' if len(alts) == 1 else
                     f'{k}=~"' + "|".join(re.escape(a).replace("\\", "\\\\") for a in alts) + '"')
    return (names[0] if len(names) == 1 else "") + ("{" + ",".join(parts) + "}" if parts else "")


def sample_mapping(ms: tuple[Mapping, ...], labels: dict) -> Mapping | None:
    """The mapping a raw series of `sampled_selector(ms)` belongs to, by its name and labels; None
    where no mapping takes it."""
    name = labels.get("__name__")
    return next((m for m in ms if m.metric == name and all(labels.get(k) == v for k, v in m.filters)), None)


def sample_lookback(step: float, interval: float) -> float:
    """How far back a grid time takes a raw sample's value (SAMPLED): LOOKBACK_STEPS scrape
    intervals rounded up to whole steps, at least one, so one missed scrape is carried over at any
    interval and nothing longer (a node whose scraper died goes unknown, then stale, as soon as
    that allows: 30 s at a 15 s scrape, at once where it scrapes twice a step or more); LOOKBACK_STEPS
    steps where the interval is unknown (0: data imported, no `up`). A quarter of a step's leeway
    keeps it from moving with the measured interval's jitter (a 15 s scrape measured at 14.3 or
    15.8 s), which would make every held signal cold (`window`'s shape)."""
    if interval <= 0:
        return LOOKBACK_STEPS * step
    return step * max(1, math.ceil(LOOKBACK_STEPS * interval / step - 0.25))


# Queries per cycle, whatever the node count: one range query per signal (the NICs' node rollups
# sharing one, RoCE's transport errors read with the symbol errors) and the facts query, plus
# PLAN_QUERY (the scrape interval, the nodes lacking a fallback's replacement) on a cold cycle and
# with the hardware facts.
# Tests hold the source to it. (While a signal is known only in part, after its whole window
# failed, each cycle asks for the span before that part too: COLD_SHRINK.)
QUERY_BUDGET = 21

# Share of the window's deadline one query may take, but never under QUERY_MIN_SECONDS (a short
# --timeout on a loaded host must not fail queries that would answer in a second).
QUERY_SHARE = 0.25
QUERY_MIN_SECONDS = 2.0

# Queries in flight at once: enough that the engine works on the next answer while this process
# decodes one; no more, as queries that share an engine's cores each take longer, and the engine
# ends one at its own limit (Prometheus' --query.timeout, 2 min: four at a time, a cold cycle at
# 1,024 nodes on a loaded 2-core host lost its two costliest queries to it) or queues it past
# VictoriaMetrics' -search.maxQueueDuration (its -search.maxConcurrentRequests slots, twice its
# cores, are shared with vmalert and Grafana).
QUERY_WORKERS = 2
RANGE_PATH = "/api/v1/query_range"
# Prometheus (and a Thanos querier on Prometheus' engine) evaluates each query on one core, so two
# at a time bound a cycle to two of its cores however many it has: at 4,096 nodes a steady cycle is
# 10-13 CPU-seconds of the engine's work, 5-6 s of wall time at two at a time on any host. An engine
# that says its GOMAXPROCS (/api/v1/status/runtimeinfo; VictoriaMetrics, which spreads each query
# over its cores itself, does not) is given half its cores (the other half ingest, evaluate rules
# and answer Grafana), QUERY_WORKERS to MAX_QUERY_WORKERS at a time; serve's and diagnose's
# `--prometheus-query-concurrency` sets it instead (http_auth.py). Asked on each cold cycle.
MAX_QUERY_WORKERS = 8
RUNTIME_PATH = "/api/v1/status/runtimeinfo"


def engine_workers(runtimeinfo) -> int:
    """Queries a cycle runs at a time on an engine whose /api/v1/status/runtimeinfo `data` this is:
    half its GOMAXPROCS, within QUERY_WORKERS..MAX_QUERY_WORKERS; QUERY_WORKERS where it does not say."""
    procs = _gomaxprocs(runtimeinfo)
    return QUERY_WORKERS if procs is None else max(QUERY_WORKERS, min(MAX_QUERY_WORKERS, procs // 2))


def _gomaxprocs(runtimeinfo) -> int | None:
    procs = runtimeinfo.get("GOMAXPROCS") if isinstance(runtimeinfo, dict) else None
    return procs if isinstance(procs, int) and not isinstance(procs, bool) and procs >= 1 else None

# The facts of a window: which job holds each GPU (changes with every job), and the node's hardware
# (leaf switch, NVLink peers, NUMA: changes when the hardware does; 56 NVLink pairs a node make it
# nine tenths of the answer). INFO_QUERY asks for both; a steady cycle asks for JOB_FACTS only and
# keeps the hardware facts of the last INFO_QUERY (`TOPOLOGY_SECONDS`, module doc).
TOPOLOGY_METRICS = ("gangwatch_sim_node_info", "gangwatch_gpu_nvlink_peer_info", "gangwatch_gpu_affinity_info",
                    PORT_INFO)
JOB_FACTS = ('gangwatch_job_gpu_info or count by (Hostname, hostname, node, instance, gpu, hpc_job) '
             '(DCGM_FI_DEV_GPU_UTIL{hpc_job!=""})')
# the filesystem targets (sparse `read` answers name only those read from): they change with the hardware
TARGET_FACTS = _target_facts()
INFO_QUERY = " or ".join(TOPOLOGY_METRICS) + " or " + TARGET_FACTS + " or " + JOB_FACTS
# Seconds a steady cycle reuses the hardware facts for; a node the previous window had and the facts'
# window had not makes the next cycle ask again (a new node's facts come one cycle after its metrics).
TOPOLOGY_SECONDS = 600.0

# The scrape interval of the slowest tenth of the targets, asked for on a cold cycle and every
# TOPOLOGY_SECONDS: `rate` needs two samples in its window, so at a 1-minute scrape interval
# (Prometheus' default) a 60 s window holds one and every counter would be unknown. The window
# is then `RATE_INTERVALS` scrape intervals (at least the configured one): two samples always;
# the raw samples' carry is two of them (`sample_lookback`). A target scraped for less than the 5
# minutes counted (a fresh stack, a new target) is measured over its last minute instead where it
# has two samples there or more, and one scraped for less than a minute not at all: its span over
# its count would make 1 s scrapes 20-60 s long in their first seconds (the query's time is the
# window's end, up to a step before now), and the rate window and the carry as long until the next
# measure, TOPOLOGY_SECONDS later (a dead shard's nodes then named stale minutes late); a minute
# over one sample says nothing of a 60 s scrape (anything from 0 to 60 s). Where no target can be
# measured yet the answer is -1 (`YOUNG`): no interval yet, asked again the next cycle. Each target's count is over the time up to
# its last sample (`timestamp(up)`), not up to the query's time: a target that stopped (a dead
# vmagent shard writes no staleness marker) counted as few samples over the whole 5 minutes made its
# interval 1.4-4x longer, the 0.9 quantile took it wherever the shard held a tenth of the targets,
# and the rate window and the carry stayed that long for TOPOLOGY_SECONDS: its nodes were named
# stale minutes late.
INTERVAL_PER_TARGET = ("((timestamp(up) - time() + 300) / count_over_time(up[5m]) and up offset 5m)"
                       " or ((timestamp(up) - time() + 60) / (count_over_time(up[1m]) > 1) and up offset 1m)")
YOUNG = -1.0
INTERVAL_QUERY = f"quantile(0.9, {INTERVAL_PER_TARGET}) or count(up) * 0 - 1"
# What the plan depends on, asked in one instant query before it, on a cold cycle and whenever the
# hardware facts are asked again (every TOPOLOGY_SECONDS, a node they did not cover): the scrape
# interval (a series without labels) and the nodes lacking a fallback's replacement (FALLBACK_FACTS),
# so even a cold cycle leaves out the fallbacks no node needs.
PLAN_QUERY = f"{INTERVAL_QUERY} or {FALLBACK_FACTS}"
RATE_INTERVALS = 2.5


# Seconds before the previous cycle's end that a steady-state cycle asks for again: a scrape's samples
# reach the engine up to its scrape timeout (10 s here) plus the remote-write queue after their
# timestamp, and VictoriaMetrics answers its last 30 s (-search.latencyOffset) with the point before,
# so the newest points can still change; older ones cannot. Less on a Prometheus that only scrapes
# (`scrape_settle`), and on a VictoriaMetrics whose offset is less (`latency_settle`).
SETTLE_SECONDS = 60.0
# Of those, VictoriaMetrics' default -search.latencyOffset, and what a sample's arrival takes (its
# scrape timeout and the remote-write queue): where the engine's /flags page says its offset
# (`latency_settle`), a steady cycle re-asks the arrival and that offset.
VM_LATENCY_OFFSET = 30.0
ARRIVAL_SECONDS = SETTLE_SECONDS - VM_LATENCY_OFFSET

# A signal whose whole window failed (the engine's query timeout, its sample limit, our deadline: at
# a size where one query of the hour costs more than its share of the cycle) is asked next for a
# part of it, the newest: COLD_SHRINK times less each time it fails, never under COLD_MIN_SECONDS
# (twice the diagnosis' longest look-back, 5 minutes: a stall without I/O signals, a link's
# errors). A part that answers is held and kept up to date as any other, its earlier columns
# unknown (NaN) until the cycles after it have fetched as much again before it each (`_fill`), and
# the part asked on the next cold cycle is twice as long, so a signal goes back to its whole window
# once the engine answers that in time.
COLD_SHRINK = 4.0
COLD_MIN_SECONDS = 600.0


def scrape_settle(flags: dict, config_yaml: str) -> float | None:
    """Seconds after its timestamp a sample can still reach a Prometheus whose flags and configuration
    (/api/v1/status/flags, /api/v1/status/config) these are, when only its own scrapes bring samples:
    its longest scrape timeout (a scrape's samples carry its start time and are appended when it
    ends, never later). None (use SETTLE_SECONDS) when samples can come later or otherwise: a
    remote-write receiver, out-of-order ingestion, federation (samples as old as the other server's
    scrape), no scrape job (backfilled blocks), or an engine without these APIs (VictoriaMetrics,
    Thanos, Mimir)."""
    if (flags.get("web.enable-remote-write-receiver") != "false" or not flags.get("storage.tsdb.path")
            or "remote-write-receiver" in flags.get("enable-feature", "")):
        return None
    try:
        cfg = yaml.safe_load(config_yaml) or {}
        ooo = str(((cfg.get("storage") or {}).get("tsdb") or {}).get("out_of_order_time_window") or "0s")
        default = (cfg.get("global") or {}).get("scrape_timeout", "10s")
        jobs = cfg.get("scrape_configs") or []
        if _seconds(ooo) or not jobs or any(str(j.get("metrics_path", "")).rstrip("/").endswith("federate") for j in jobs):
            return None
        return max(_seconds(str(j.get("scrape_timeout") or default)) for j in jobs)
    except (yaml.YAMLError, AttributeError, TypeError, ValueError):
        return None


# a VictoriaMetrics component's /flags page: the flags it was given, one `-name="value"` a line
_FLAG_LINE = re.compile(r'-([A-Za-z0-9_.]+)="(.*)"')


def latency_settle(page: str) -> float | None:
    """Seconds a steady cycle re-asks of a VictoriaMetrics (single-node, or a cluster's vmselect)
    whose /flags page this is: ARRIVAL_SECONDS and its -search.latencyOffset (VM_LATENCY_OFFSET where
    the page does not set it: it lists the flags given). None (use SETTLE_SECONDS) where the page is
    not such a list (another engine's, an HTML page, an empty one) or the offset does not parse."""
    lines = page.strip().splitlines()
    flags = dict(m.groups() for m in map(_FLAG_LINE.fullmatch, lines) if m)
    if not lines or len(flags) != len(lines):
        return None
    try:
        offset = _seconds(flags.get("search.latencyOffset", f"{VM_LATENCY_OFFSET:g}s"))
    except ValueError:
        return None
    return ARRIVAL_SECONDS + offset


# a VictoriaMetrics cluster's vmselect serves the query API below /select/<tenant>/prometheus (after
# its -http.pathPrefix, if any) and its /flags page at its root
_VMSELECT_PATH = re.compile(r"(.*)/select/[^/]+/prometheus/*")


def flags_url(url: str) -> str:
    """The /flags page of the VictoriaMetrics whose query API is at `url`: a single node's below it
    (its -http.pathPrefix is part of `url`), a cluster vmselect's at its root. Through vmauth that
    root is vmauth's own page, which does not list the offset: the default settle then holds."""
    parts = urllib.parse.urlsplit(url)
    cluster = _VMSELECT_PATH.fullmatch(parts.path)
    if cluster is None:
        return url.rstrip("/") + "/flags"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, cluster.group(1) + "/flags", "", ""))


_DURATION = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800,
             "y": 31536000}


def _seconds(text: str) -> float:
    """A Prometheus or Go duration ("10s", "1m30s", "0s", "1.5s", "500ms") in seconds; ValueError
    when it is none."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _DURATION[u] for n, u in parts)


# Each Held's rows and cells get a version of their own (HeldGrid keeps where they land per version),
# and each write of its aligned columns a stamp (HeldGrid takes unchanged columns from its last window).
_VERSIONS = itertools.count()
_STAMPS = itertools.count(1)


# A held signal's arrays (whether a point is there, the row as the window takes it): the type of
# each, and what its empty cells hold.
_ARRAYS = ((bool, False), (np.float64, np.nan))


class Held:
    """One signal's series as fetched so far, kept between cycles on the window's step grid (column
    j is the window's start + j * step): per row its labels, whether a point is there (a point
    whose value is NaN is there: the window's alignment carries an earlier point over a missing
    one, never over a NaN), and the row as the window takes it (`align_grid`). The points' values
    are not kept apart: a column with a point aligns to that point's own value (an infinite one to
    NaN, which aligns the same), and aligning reads a column's value only where it has a point, so
    the aligned row serves as the values when columns are aligned again.

    A steady cycle moves the window over these arrays by the steps it moved and writes the fetched
    columns in place, so its cost follows its new points, not the held hour: each array is a view
    of the window's T columns into a buffer a quarter wider, moved along it and copied back to its
    start only when it reaches the end (every T / 4 steps: amortised, a few columns a cycle). Rows
    are looked up by their labels once per answered series, and a row's cell (signal part, node,
    key) is worked out once, when it appears. Rows are the `n` first of the arrays' rows; the
    spare ones, and columns as they enter the window, are empty (NaN, no point). `stamps`: per
    column of the window, a number that changes whenever its aligned values may have (a new array
    each time, so one handed out stays as it was)."""

    __slots__ = ("rows", "answered", "labels", "keys", "cells", "n", "T", "_bufs", "_off", "t0", "until", "version", "_blocks",
                 "mappings", "scale", "parts", "tail", "stamps")

    def __init__(self, mappings: tuple[Mapping, ...] | None = None):
        # a SAMPLED signal's mappings (HELD_MAPPINGS): each row's own scales it (`scale`: NaN where
        # none takes it) and says which signal it is of and, where that signal adds its counters up
        # (combine="sum"), which counter (`parts`: ("", "") for the signal asked for, averaged)
        self.mappings = mappings
        self.scale: list[float] = []
        self.parts: list[tuple[str, str]] = []
        self.rows: dict[tuple, int] = {}  # labels sorted -> row
        self.answered: dict[tuple, int] = {}  # labels as answered (names, values) -> row
        self.labels: list[dict] = []
        self.keys: list[tuple] = []  # per row its labels sorted: the order a cell's rows are added in
        self.cells: list[tuple | None] = []  # per row (signal part, node, key), () for none, None: not mapped yet
        self.n = 0
        self.T = 0
        self._bufs = [np.full((0, 0), empty, dtype) for dtype, empty in _ARRAYS]
        self._off = 0  # the buffers' column that is the window's first
        self.t0 = math.nan
        self.until = -math.inf
        self.version = next(_VERSIONS)
        self._blocks: list[GridBlock] | None = None
        # a RATED counter's samples of the last rate window before the next cycle's first grid time
        # (settled: no late sample changes them), so that cycle asks for its own span only:
        # (rows, times in ms, values, the time in ms they are kept from), None where not held
        self.tail: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None
        self.stamps = np.zeros(0, np.int64)

    have = property(lambda self: self._window_of(0))
    aligned = property(lambda self: self._window_of(1))

    def _window_of(self, i: int) -> np.ndarray:
        return self._bufs[i][:, self._off:self._off + self.T]

    def merge(self, data: dict | Matrix, start: float, since: float, until: float, step: float, lookback: float,
              sparse: bool = False, decode=decode_range) -> None:
        """The points before `since` held, the fetched ones from `since` on (they replace the held
        ones there), those before `start` dropped; rows left without a point dropped. A sparse
        signal's missing point is one the filter dropped (SPARSE): aligned as NaN, never as the
        point before it. `decode`: decode_range, decode_increase (an event counter asked from one
        step before `since`, held as its step's increase: STEP_INCREASE) or decode_samples (raw
        samples: SAMPLED; those of the step before `since` dropped)."""
        T = grid(start, until, step).shape[0]
        answered, labels_of, sid, col, val = decode(data, start, step, T)
        self._frame(start, T, step)
        rows = self._rows_of(answered, labels_of)
        self._write(rows[sid], col, val, start, since, until, step, lookback, sparse)

    def merge_rates(self, data: dict | Matrix, start: float, since: float, until: float, step: float, lookback: float,
                    window: float, fresh: float | None, keep: float) -> None:
        """`merge` of a RATED counter's raw samples, its rates over `window` worked out here
        (matrix.rates): those fetched from `fresh` on with the held `tail` before it (None: all
        fetched, from a window before `since`); the samples from `keep` on held as the next tail."""
        T = grid(start, until, step).shape[0]
        answered, labels_of, sid, tms, vs = counter_samples(data)
        self._frame(start, T, step)
        rows = self._rows_of(answered, labels_of)[sid]
        if fresh is not None:
            cut = round(fresh * 1000)
            new = tms >= cut
            rows, tms, vs = rows[new], tms[new], vs[new]
            if self.tail is not None:
                old = self.tail[1] < cut
                rows, tms, vs = (np.concatenate((a[old], b)) for a, b in zip(self.tail[:3], (rows, tms, vs)))
                # every held sample is older than every fetched one: grouped by row, stably, each row's
                # are in time order (two ascending runs where the engine answers in the rows' order)
                order = np.argsort(rows, kind="stable")
                rows, tms, vs = rows[order], tms[order], vs[order]
        rows, tms, vs = in_order(rows, tms, vs)
        kept = round(keep * 1000)
        held = tms >= kept
        self.tail = (rows[held], tms[held], vs[held], kept)
        self._write(*rates(rows, tms, vs, self.n, start, step, T, window, since), start, since, until, step, lookback)

    def _write(self, rows: np.ndarray, col: np.ndarray, val: np.ndarray, start: float, since: float, until: float,
               step: float, lookback: float, sparse: bool = False) -> None:
        """The points fetched from `since` on (per point its row, column, value) written in place of
        the held ones there, and aligned (`merge`)."""
        T = self.T
        cut = int(round((since - start) / step))  # the first column fetched again
        if col.size and col.min() < cut:
            keep = col >= cut
            rows, col, val = rows[keep], col[keep], val[keep]
        val = self._scaled(rows, val)
        have = self.have
        have[:self.n, cut:] = False
        have[rows, col] = True
        fetched = np.full((self.n, T - cut), np.nan)
        fetched[rows, col - cut] = val
        self._align(cut, fetched, step, lookback, sparse)
        self._drop_empty()
        self.t0, self.until = start, until

    def tail_reaches(self, since: float, window: float) -> bool:
        """Whether the held tail has the samples of the rate window before `since`."""
        return self.tail is not None and self.tail[3] <= round((since - window) * 1000)

    def fill(self, data: dict | Matrix, lo: int, hi: int, step: float, lookback: float, sparse: bool = False,
             decode=decode_range) -> None:
        """Columns lo..hi-1 of the window (held empty: a cold ask that answered in part) fetched: their
        points written, they and the columns that look back into them aligned again."""
        answered, labels_of, sid, col, val = decode(data, self.t0 + lo * step, step, hi - lo)
        rows = self._rows_of(answered, labels_of)
        val = self._scaled(rows[sid], val)
        n, T = self.n, self.T
        reach = max(0, math.ceil(lookback / step - 1e-9) - 1)
        ctx, stop = max(0, lo - reach), min(T, hi + reach)
        self.have[:n, lo:hi] = False
        self.have[rows[sid], col + lo] = True
        vals = self.aligned[:n, ctx:stop].copy()  # held points' values (class doc)
        vals[:, lo - ctx:hi - ctx] = np.nan
        vals[rows[sid], col + lo - ctx] = val
        have = np.ones((n, stop - ctx), bool) if sparse else self.have[:n, ctx:stop]
        self.aligned[:n, lo:stop] = align_grid(vals, have, step, lookback)[:, lo - ctx:]
        self._stamp(lo, stop)

    def _frame(self, start: float, T: int, step: float) -> None:
        """The window starting at `start`, T columns: moved along the buffers by the steps it moved
        (a steady cycle), else the buffers laid out anew keeping what overlaps."""
        moved = int(round((start - self.t0) / step)) if self.n else T
        if T == self.T and 0 <= moved < T:
            width = self._bufs[0].shape[1]
            if self._off + moved + T <= width:
                self._off += moved
                for buf, (_, empty) in zip(self._bufs, _ARRAYS):
                    buf[:, self._off + T - moved:self._off + T] = empty  # the columns entering the window
            else:  # the end of the buffers: what stays in the window back to their start
                for buf, (_, empty) in zip(self._bufs, _ARRAYS):
                    buf[:, :T - moved] = buf[:, self._off + moved:self._off + T]
                    buf[:, T - moved:] = empty
                self._off = 0
            if moved:
                self._stamp(T - moved, T, moved)
            return
        old = (self.have, self.aligned)
        cap, n = self._bufs[0].shape[0], self.n
        self._bufs = [np.full((cap, T + T // 4 + 1), empty, dtype) for dtype, empty in _ARRAYS]
        self._off, self.T = 0, T
        self.stamps = np.zeros(T, np.int64)
        self._stamp(0, T)
        lo, hi = max(0, -moved), min(T, old[0].shape[1] - moved)  # new columns that held columns land on
        if hi > lo and n:
            for new, was in zip((self.have, self.aligned), old):
                new[:n, lo:hi] = was[:n, lo + moved:hi + moved]

    def _rows_of(self, answered: list, labels_of) -> np.ndarray:
        """The row of each answered series, new rows added. Looked up by the labels as the engine
        answered them (decode_range's keys: the same every cycle, no sort), by the sorted labels
        (`labels_of(i)`, parsed only here) on a miss."""
        got = list(map(self.answered.get, answered))
        for i in (i for i, r in enumerate(got) if r is None):
            labels = labels_of(i)
            key = tuple(sorted(labels.items()))
            r = self.rows.get(key)
            if r is None:
                r = self.rows[key] = self.n
                self.labels.append(labels)
                self.keys.append(key)
                self.cells.append(None)
                m = None if self.mappings is None else sample_mapping(self.mappings, labels)
                self.scale.append(1.0 if self.mappings is None else math.nan if m is None else m.scale)
                self.parts.append(("", "") if m is None else (m.signal, m.metric if m.combine == "sum" else ""))
                self.n += 1
                self._changed()
            got[i] = self.answered[answered[i]] = r
        self._grow(self.n)
        return np.array(got, np.int64)

    def _scaled(self, rows: np.ndarray, val: np.ndarray) -> np.ndarray:
        """The points' values in the signal's unit: each row's mapping's scale (SAMPLED), NaN for a
        row no mapping takes (left out of every cell: `blocks`)."""
        if self.mappings is None:
            return val
        return val * np.array(self.scale)[rows]

    def _grow(self, need: int) -> None:
        cap = self._bufs[0].shape[0]
        if need > cap:  # by a quarter at least: rows appearing a few a cycle cost amortised O(1) each
            cap = max(need, cap + cap // 4, 64)
            grown = [np.full((cap, buf.shape[1]), empty, dtype) for buf, (dtype, empty) in zip(self._bufs, _ARRAYS)]
            for new, buf in zip(grown, self._bufs):
                new[:buf.shape[0]] = buf
            self._bufs = grown

    def _drop_empty(self) -> None:
        """Rows left without a point in the window dropped (the arrays' spare rows kept empty)."""
        n = self.n
        live = self.have[:n].any(axis=1)
        if self.tail is not None:  # a row with samples held for the next cycle's rates stays
            live[self.tail[0]] = True
        if live.all():
            return
        idx = np.flatnonzero(live)
        m = idx.shape[0]
        for a, (_, empty) in zip((self.have, self.aligned), _ARRAYS):
            a[:m] = a[idx]
            a[m:n] = empty
        self.labels = [self.labels[i] for i in idx]
        self.keys = [self.keys[i] for i in idx]
        self.cells = [self.cells[i] for i in idx]
        self.scale = [self.scale[i] for i in idx]
        self.parts = [self.parts[i] for i in idx]
        self.rows = {k: i for i, k in enumerate(self.keys)}
        self.answered = {}  # found again by their sorted labels on the next answer
        if self.tail is not None:
            moved = np.full(n, -1, np.int64)
            moved[idx] = np.arange(m)
            self.tail = (moved[self.tail[0]], *self.tail[1:])
        self.n = m
        self._changed()

    def _changed(self) -> None:
        self.version = next(_VERSIONS)
        self._blocks = None

    def _align(self, cut: int, fetched: np.ndarray, step: float, lookback: float, sparse: bool) -> None:
        """`aligned` again where it may have changed: from the first column fetched on (`fetched`:
        their values), and the first columns (the ones before them moved out of the window). A
        column depends only on itself and the `reach` before it."""
        n, T = self.n, self.T
        reach = max(0, math.ceil(lookback / step - 1e-9) - 1)
        for lo, hi in ((0, min(reach, cut, T)), (cut, T)):
            if hi > lo:
                ctx = max(0, lo - reach)
                vals = self.aligned[:n, ctx:min(hi, cut)]  # held points' values (class doc)
                if hi > cut:
                    vals = np.hstack([vals, fetched[:, :hi - cut]])
                have = np.ones((n, hi - ctx), bool) if sparse else self.have[:n, ctx:hi]
                self.aligned[:n, lo:hi] = align_grid(vals, have, step, lookback)[:, lo - ctx:]
                self._stamp(lo, hi)

    def _stamp(self, lo: int, hi: int, moved: int = 0) -> None:
        """Columns lo..hi-1 of `aligned` written (after the window moved `moved` columns on)."""
        stamps = np.concatenate((self.stamps[moved:], np.zeros(moved, np.int64))) if moved else self.stamps.copy()
        stamps[lo:hi] = next(_STAMPS)
        self.stamps = stamps

    def blocks(self, signal: str, level: str, matcher: NodeMatcher) -> list[tuple[GridBlock, np.ndarray, np.ndarray]]:
        """The rows as HeldGrid blocks (a shared query's parts apart, and the signals read with this
        one: READ_WITH), each with its aligned rows and their columns' stamps; rows the matcher gives
        no node or key left out. A signal that adds its counters up has each row's counter in its
        block (`GridBlock.addends`)."""
        if self._blocks is None:
            probe = Mapping(signal, level, "")
            parts: dict[str, list[int]] = defaultdict(list)
            for i, labels in enumerate(self.labels):
                if self.cells[i] is None:  # a row's labels never change: mapped once, on the cycle it appears
                    node, key = matcher(labels), sub_key(probe, labels)
                    mapped = node is not None and key is not None and not math.isnan(self.scale[i])
                    part = labels.get(SIGNAL_LABEL) or self.parts[i][0] or signal
                    self.cells[i] = (part, node, key) if mapped else ()
                if self.cells[i]:
                    parts[self.cells[i][0]].append(i)
            self._blocks = []
            for part, rows in parts.items():
                addends = tuple(self.parts[i][1] for i in rows)
                self._blocks.append(GridBlock(part, level, np.array(rows, np.int64), [self.cells[i][1:] for i in rows],
                                              [self.keys[i] for i in rows], self.version,
                                              addends if any(addends) else None))
        aligned = self.aligned[:self.n]
        return [(b, aligned, self.stamps) for b in self._blocks]


class PrometheusSource:
    name = "prometheus"

    def __init__(self, url: str, timeout: float = 10.0, rate_window: float = 60.0, matcher: NodeMatcher | None = None,
                 client: httpx.Client | None = None, headers: dict | None = None, concurrency: int | None = None,
                 decode_processes: int | None = None):
        if concurrency is not None and not 1 <= concurrency <= 64:
            raise ValueError(f"query concurrency {concurrency}: 1 to 64")
        self.url = url.rstrip("/")
        self.concurrency = concurrency  # queries at a time; None: as the engine's cores allow (engine_workers)
        self.workers = concurrency or QUERY_WORKERS
        self.raw_levels: tuple[str, ...] = ()  # the levels asked for as they stand (`raw_levels`)
        # large range answers split in worker processes where the host has cores to spare (decode_pool.py)
        self.decode = decode_pool.shared(decode_pool.host_processes() if decode_processes is None else decode_processes)
        self.rate_window = rate_window
        self.matcher = matcher or NodeMatcher()
        # INFO_QUERY's facts and JOB_FACTS' apart: each forgets the series its own last answer lacked
        self._facts = {query: FactCache() for query in (INFO_QUERY, JOB_FACTS)}
        self.client = client or httpx.Client(timeout=httpx.Timeout(timeout), headers=headers or {})
        # gzipped answers or not (fetch.accept_encoding): as `headers` say, else as this URL's host
        # suggests; on every request, whatever client it goes through
        given = {k: v for k, v in (headers or {}).items() if k.lower() == "accept-encoding"}
        self.encoding = given or fetch.accept_encoding(self.url)
        self.timeout = timeout
        self.queries_last_cycle = 0
        self.failed_last_cycle = 0
        # serve's partly_down()/source_down() read these: the nodes seen in the latest window, and
        # those of them gone silent (node -> why)
        self.targets: tuple[str, ...] = ()
        self.last_errors: dict[str, str] = {}
        self._deadline: Deadline | None = None
        # steady state (module doc): (signal, level) -> what is held, valid for one query shape
        self._held: dict[tuple[str, str], Held] = {}
        self._held_shape: tuple = ()
        # the hardware facts of the last INFO_QUERY: (them, their time, the nodes of its window)
        self._topology: tuple[SignalStore, float, frozenset[str] | None] | None = None
        self.seconds_asked_last_cycle = 0.0  # the longest span one range query of the latest cycle asked for
        self.settle_seconds = SETTLE_SECONDS  # what a steady cycle asks for again (`settle`, on each cold cycle)
        self._interval: tuple[float, float] | None = None  # (scrape interval, when asked)
        self._grid = HeldGrid()  # the window's layout and where the held rows land in it, kept between cycles
        # (signal, level) -> (seconds to ask on its next cold cycle, why its whole window failed)
        # (COLD_SHRINK); and -> (the time it is held from, why, the span that answered) while that is
        # after the window's start: each cycle asks for that span before it too (`_fill`)
        self._cold: dict[tuple[str, str], tuple[float, str]] = {}
        self._partial: dict[tuple[str, str], tuple[float, str, float]] = {}
        self._shares: dict[str, float] = {}  # query (signal or "facts") -> its time share, where it was slow
        self._too_short = False
        # the fallbacks' replacements every node has, as the last PLAN_QUERY said (FALLBACK_FACTS),
        # and per held signal the fallbacks its points were asked without
        self._covered: frozenset[str] = frozenset()
        self._dropped: dict[tuple[str, str], frozenset[str]] = {}
        self._in_part: list[str] = []  # the queries of this cycle answered without a storage node (_answered_in_part)

    def _get(self, path: str, params: dict, name: str = "", matrix: bool = False, facts: bool = False
             ) -> dict | Matrix | list[bytes]:
        """One request, within the time share of query `name` (QUERY_SHARE, or more where it was slow:
        `_shares`) and the cycle's deadline; SlowQuery where it used its whole share and did not answer.
        A `matrix` (a range query's answer, an instant one's of raw samples) is split, not parsed as
        JSON, where it can be (matrix.py); `facts` (an instant query's vector) likewise, to its
        series' labels (FactCache)."""
        share = self._shares.get(name, max(self.timeout * QUERY_SHARE, QUERY_MIN_SECONDS))
        whole = self._deadline is None or share <= 1.1 * self._deadline.left()  # (nearly) its whole share
        try:
            r = fetch.get(self.url + path, share, params=params, headers=self.encoding, client=self.client,
                          deadline=self._deadline, max_bytes=fetch.PROMETHEUS_MAX_BYTES)
        except (fetch.FetchLate, httpx.TimeoutException) as exc:
            if whole and name:
                raise SlowQuery(name, share, exc) from None
            raise
        if r.status_code >= 400:  # the engine's own words where it gives them (its timeout, its sample limit)
            try:
                doc = orjson.loads(r.content)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("error"), str):
                raise RuntimeError(f"HTTP {r.status_code} {doc.get('errorType') or 'error'}: {doc['error']}")
        r.raise_for_status()
        if matrix:  # its points not one JSON object each (matrix.py)
            split = self.decode.split(r.content)
            if split is not None:
                self._answered_in_part(split.envelope, name or path)
                return split
        if facts:
            labels = split_vector(r.content)
            if labels is not None:
                self._answered_in_part(labels[1], name or path)
                return labels[0]
        try:
            doc = orjson.loads(r.content)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise RuntimeError((doc.get("error") if isinstance(doc, dict) else None) or "status not success")
        self._answered_in_part(doc, name or path)
        return doc.get("data") or {}

    def _answered_in_part(self, doc: dict, name: str) -> None:
        """A VictoriaMetrics cluster answers without a storage node that did not (`isPartial`, unless
        vmselect runs with -search.denyPartialResponse): the series that node holds are missing, so
        their nodes go silent and are named stale; the cycle's notes say why."""
        if doc.get("isPartial") is True:
            self._in_part.append(name)

    def settle(self) -> float:
        """What a steady cycle re-asks of this engine, as it says (asked on each cold cycle):
        `scrape_settle` of a Prometheus, `latency_settle` of a VictoriaMetrics (which has no status
        API: its /flags page instead), SETTLE_SECONDS where the engine says neither or cannot be
        asked."""
        try:
            got = scrape_settle(self._get("/api/v1/status/flags", {}), self._get("/api/v1/status/config", {}).get("yaml", ""))
        except httpx.HTTPStatusError as exc:  # VictoriaMetrics refuses the path with a 400
            got = self._vm_settle() if exc.response.status_code == 400 else None
        except (httpx.HTTPError, RuntimeError, ValueError, AttributeError):
            got = None
        return SETTLE_SECONDS if got is None else got

    def _vm_settle(self) -> float | None:
        try:
            r = fetch.get(flags_url(self.url), max(self.timeout * QUERY_SHARE, QUERY_MIN_SECONDS), headers=self.encoding,
                          client=self.client, deadline=self._deadline, max_bytes=1 << 20)
        except httpx.HTTPError:
            return None
        return latency_settle(r.text) if r.status_code == 200 else None

    def _runtimeinfo(self) -> dict | None:
        """This engine's /api/v1/status/runtimeinfo `data`; None where it cannot be asked."""
        try:
            return self._get(RUNTIME_PATH, {})
        except (httpx.HTTPError, RuntimeError, ValueError):
            return None

    def _slow(self, exc: Exception) -> None:
        """A query that used its whole share of the deadline without an answer is given twice as much
        the next cycle, up to the whole deadline: at a size where it legitimately takes longer, it
        comes back (and keeps that share); a hung one holds one of the `workers`, and the others
        have the whole deadline for the rest. (Half the deadline at most was tried: at 1,024 nodes
        Prometheus' cold `read` and `latency` then never answered.)"""
        if isinstance(exc, SlowQuery):
            self._too_short |= exc.share >= self.timeout
            self._shares[exc.name] = min(self.timeout, 2 * exc.share)
        elif isinstance(exc, (fetch.FetchLate, httpx.TimeoutException)):
            self._too_short = True  # the cycle's deadline ran out before this query's share did

    def _fill(self, held: Held, key: tuple[str, str], start: float, step: float, rated: float | None, lo: float,
              hi: float, got) -> None:
        """The span before a signal known in part (`_partial`), times lo..hi, written into what is held;
        one that fails is asked again the next cycle (the signal is not affected)."""
        try:
            held.fill(got.result(), round((lo - start) / step), round((hi - start) / step) + 1, step,
                      self._lookback(key[0], step), key[0] in SPARSE, _decoder(key[0], rated))
        except (httpx.HTTPError, RuntimeError, ValueError):
            return
        _, why, span = self._partial[key]
        self._partial[key] = (lo, why, span)

    def _cold_answered(self, key: tuple[str, str], start: float, since: float, end: float) -> None:
        """A cold ask of a signal whose whole window had failed answered: held from `since` (the window's
        earlier part unknown until it moves past it), and twice as much asked on its next cold cycle
        (COLD_SHRINK)."""
        span, why = self._cold.pop(key)
        if since > start:
            self._partial[key] = (since, why, end - since)
        if 2 * span < end - start:
            self._cold[key] = (2 * span, why)

    def _lookback(self, signal: str, step: float) -> float:
        """How far back a grid time takes the latest point of `signal` (align_grid): LOOKBACK_STEPS
        steps of the engine's points, `sample_lookback` of a SAMPLED signal's raw samples."""
        if signal in SAMPLED:
            return sample_lookback(step, self._interval[0] if self._interval else 0.0)
        return LOOKBACK_STEPS * step

    def _rate_window(self, end: float, failed: list[str], again: bool) -> float:
        """The configured rate window, widened to RATE_INTERVALS scrape intervals (PLAN_QUERY, which
        also sets `_covered`; asked `again` with the hardware facts); a failed query is added to
        `failed` (the cycle's failures: all of them failed means down) and leaves `_covered` as it was."""
        if again or self._interval is None or not self._interval[1] <= end < self._interval[1] + TOPOLOGY_SECONDS:
            self.queries_last_cycle += 1
            try:
                result = self._get("/api/v1/query", {"query": PLAN_QUERY, "time": f"{end:.3f}"}).get("result") or []
                labels = [r.get("metric") or {} for r in result]
                got = next((float(r["value"][1]) for r, lbl in zip(result, labels) if FACT_LABEL not in lbl), 0.0)
                self._covered = REPLACEMENTS - {lbl.get(LACKS_LABEL) for lbl in labels if lbl.get(FACT_LABEL) == "lacks"}
            except (httpx.HTTPError, RuntimeError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                got = math.nan  # unknown: the configured window, asked again next cycle
                failed.append(f"scrape interval ({type(exc).__name__})")
            if got == YOUNG:  # every target scraped for less than a minute: none yet, measured next cycle
                self._interval = (0.0, -math.inf)
            elif not math.isnan(got):  # no `up` series (data imported, not scraped): the configured window
                self._interval = (min(got, 300.0) if math.isfinite(got) and got > 0 else 0.0, end)
        interval = self._interval[0] if self._interval else 0.0
        return float(max(self.rate_window, math.ceil(RATE_INTERVALS * interval)))

    def window(self, end: float | None = None, span: float = 3600.0, step: float = 15.0,
               deadline: Deadline | None = None) -> Window:
        """All the queries of one window share `deadline` (default: `timeout` seconds from now)."""
        # The cycle makes a Python object per answered point (orjson) and drops them within the
        # cycle: the cyclic collector would walk them, and every held label dict, many times over
        # for nothing (reference counting frees them; they hold no cycles). Paused meanwhile.
        with gc_paused():
            return self._window(end, span, step, deadline)

    def _window(self, end: float | None, span: float, step: float, deadline: Deadline | None) -> Window:
        self.queries_last_cycle = 0
        self._deadline = deadline or Deadline(self.timeout)
        self._too_short = False  # a query had the whole deadline, or what the others left of it, and did not answer
        end = time.time() if end is None else float(end)
        end = math.floor(end / step) * step
        start = end - step * math.floor(span / step)
        store = SignalStore()
        failed = []
        self._in_part = []
        topo = self._topology  # the hardware facts, unless too old or a node of the last window is not in them
        if topo is not None and (not topo[1] <= end < topo[1] + TOPOLOGY_SECONDS or not topo[2].issuperset(self.targets)):
            topo = None
        rate_window = self._rate_window(end, failed, again=topo is None)
        shape = (step, rate_window, self._lookback(next(iter(SAMPLED), ""), step), self.matcher.host_labels)
        if shape != self._held_shape:
            self._held, self._held_shape = {}, shape
        if not self._held:  # cold: how late samples can reach this engine, its cores and its kind, asked again
            self.settle_seconds = self.settle()
            info = self._runtimeinfo()
            self.workers = self.concurrency or engine_workers(info)
            self.raw_levels = raw_levels(info)
        settle = step * math.ceil(self.settle_seconds / step)  # on the step grid, as start and end are
        self.seconds_asked_last_cycle = 0.0
        plan = plan_queries(rate_window, step, self.matcher.host_labels, self._covered, self.raw_levels)
        asks, fills = [], {}
        for signal, level, q in plan:
            held = self._held.pop((signal, level), None) or Held(HELD_MAPPINGS.get(signal))
            rated = rate_window if signal in RATED else None
            # a fallback dropped from the plan keeps what it answered (its replacement's points, where a
            # node had both; the node's only ones before its agent had it); one back in the plan (a node
            # without the replacement appeared) makes the signal cold, as that node's points were not asked
            dropped = frozenset(m.fallback for m in MAPPINGS if m.signal == signal and m.fallback in self._covered)
            widened = not self._dropped.get((signal, level), frozenset()) <= dropped
            self._dropped[(signal, level)] = dropped
            # ask only for what is not held yet (a cold cycle, or a window that begins before the
            # held one (a longer span, a step back): the whole window, or its newest part where the
            # whole failed before: COLD_SHRINK)
            cold = widened or not held.t0 <= start <= held.until <= end
            if cold:
                since = max(start, end - step * math.floor(self._cold.get((signal, level), (end - start,))[0] / step))
                self._partial.pop((signal, level), None)
            else:
                since = max(start, held.until - settle)
                part = self._partial.get((signal, level))
                if part is not None and part[0] > start:  # known in part: the span before it too
                    lo = max(start, part[0] - part[2])
                    fills[(signal, level)] = (lo, part[0] - step, query_request(signal, q, lo, part[0] - step, step, rated))
            # a rate worked out here asks for the window before `since` too, unless the tail held has it
            fresh = since if rated is not None and not cold and held.tail_reaches(since, rated) else None
            asks.append((signal, level, held, since, cold, fresh,
                         query_request(signal, q, since, end, step, 0.0 if fresh is not None else rated)))
        self.queries_last_cycle += len(asks) + 1 + len(fills)
        # the queries are independent: `workers` at a time (QUERY_WORKERS, or as the engine's cores
        # allow), so the engine computes the next ones while this thread decodes and merges an answer
        # (in plan order: the window is the same whatever order the answers arrive in)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="gangwatch-query") as pool:
            # the facts first: without them no GPU has a job, and a cycle short of time drops its last queries
            info = pool.submit(self._get, "/api/v1/query", {"query": JOB_FACTS if topo else INFO_QUERY,
                                                            "time": f"{end:.3f}"}, "facts", facts=True)
            pending = [pool.submit(self._get, *ask, signal, True) for signal, *_, ask in asks]
            filling = {k: (lo, hi, pool.submit(self._get, *ask, "", True)) for k, (lo, hi, ask) in fills.items()}
            blocks = []
            for (signal, level, held, since, cold, fresh, _), got in zip(asks, pending):
                try:
                    if signal in RATED:
                        held.merge_rates(got.result(), start, since, end, step, self._lookback(signal, step), rate_window,
                                         fresh, keep=end - settle - rate_window)
                    else:
                        held.merge(got.result(), start, since, end, step, self._lookback(signal, step), signal in SPARSE,
                                   _decoder(signal))
                except (httpx.HTTPError, RuntimeError, ValueError) as exc:
                    # absent this cycle (unknown, as a cold cycle would say) and fetched whole the next,
                    # or only its newest part where a cold ask failed (COLD_SHRINK)
                    why = f"{type(exc).__name__}: {str(exc)[:80]}"
                    failed.append(f"{signal} ({why})")
                    self._slow(exc)
                    if cold:
                        self._cold[(signal, level)] = (max(COLD_MIN_SECONDS, (end - since) / COLD_SHRINK), why)
                    elif isinstance(exc, (SlowQuery, fetch.FetchLate, httpx.TimeoutException)):
                        # late, not wrong: what is held stays valid, and the next cycle asks from its end
                        # (a cycle over its deadline would otherwise make its last signals cold, costlier still)
                        self._held[(signal, level)] = held
                    continue
                if cold and (signal, level) in self._cold:
                    self._cold_answered((signal, level), start, since, end)
                if (signal, level) in filling:
                    self._fill(held, (signal, level), start, step, rate_window if signal in RATED else None,
                               *filling[(signal, level)])
                self.seconds_asked_last_cycle = max(self.seconds_asked_last_cycle, end - since)
                blocks += held.blocks(signal, level, self.matcher)
                self._held[(signal, level)] = held
            try:
                data = info.result()
            except (httpx.HTTPError, RuntimeError, ValueError) as exc:
                failed.append(f"facts ({type(exc).__name__})")
                self._slow(exc)
                self._topology = None
            else:
                if isinstance(data, list):  # the facts' labels (split_vector), each series' parsed once
                    facts = self._facts[JOB_FACTS if topo else INFO_QUERY].labels(data)
                else:
                    facts = [(hardware_fact(r), r.get("metric") or {}) for r in data.get("result") or []]
                if topo is None:  # hardware facts apart, kept as read
                    hw = SignalStore()
                    add_facts(hw, [f for is_hw, f in facts if is_hw], self.matcher)
                    facts = [(is_hw, f) for is_hw, f in facts if not is_hw]
                    topo = (hw, end, None)
                store.add_hardware(topo[0])
                add_facts(store, [f for _, f in facts], self.matcher)
        self.failed_last_cycle = len(failed)
        self._partial = {k: v for k, v in self._partial.items() if v[0] > start}  # others: the window moved past
        partial = sorted((t, signal, why) for (signal, _), (t, why, _) in self._partial.items())
        if partial:
            store.notes.append(f"Prometheus {self.url}: {len(partial)} signal{'s' if len(partial) > 1 else ''} known only "
                               "for the newest part of the window, the rest unknown until the next cycles have fetched it "
                               "(the whole window's query failed: " + partial[0][2] + "): " + ", ".join(
                                   f"{signal} (its last {(end - t) / 60:.3g} min)" for t, signal, _ in partial[:4])
                               + (" ..." if len(partial) > 4 else ""))
        if failed:
            store.notes.append(f"Prometheus {self.url}: {len(failed)} quer{'y' if len(failed) == 1 else 'ies'} failed: "
                               + "; ".join(failed[:4]) + (" ..." if len(failed) > 4 else "")
                               + (f" (the cycle's deadline, {self.timeout:g} s, is too short for the engine at this size: "
                                  "raise it, serve --prometheus-timeout)" if self._too_short else ""))
        if self._in_part:
            store.notes.append(f"Prometheus {self.url}: {len(self._in_part)} quer{'y' if len(self._in_part) == 1 else 'ies'} "
                               "answered in part (isPartial: a storage node of the VictoriaMetrics cluster did not answer; "
                               "the series it holds are missing): " + ", ".join(sorted(set(self._in_part))[:6]))
        # the measured interval (the slowest tenth of the targets'), as a bundle's samples give it:
        # a checkpoint's writes may show that much after its pause began (diagnose._held_steps)
        win = replace(self._grid.window(store, blocks, start, end, step),
                      scrape_seconds=self._interval[0] if self._interval else 0.0)
        seen, silent = silent_nodes(win, Thresholds().stale_seconds)
        self.targets, self.last_errors = seen, silent
        if topo is not None and topo[2] is None:  # fetched this cycle: valid for the nodes of this window
            self._topology = (topo[0], topo[1], frozenset(seen))
        if silent and len(silent) < len(seen):
            names = sorted(silent)
            win = replace(win, notes=(*win.notes, f"{len(silent)} of {len(seen)} nodes stale (no samples in the last "
                                                  f"{Thresholds().stale_seconds:.0f} s; their scraper or the node is down): "
                                                  + ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")))
        return win


def query_request(signal: str, q: str, lo: float, hi: float, step: float,
                  rated: float | None = None) -> tuple[str, dict]:
    """(path, parameters) of the request for `signal`'s points at the grid times lo..hi: a range
    query, from one step before lo for an event counter's first increase (STEP_INCREASE); the raw
    samples of the steps ending at lo..hi for a SAMPLED level, of the `rated` (the rate window's
    seconds; 0 where the window before lo is held: `Held.tail`) windows ending at lo..hi for a
    RATED counter (its rate worked out here; a range selector, in milliseconds where the span is not whole seconds; one more
    millisecond where an engine leaves out a sample at its start, as Prometheus 3 and
    VictoriaMetrics do, and Prometheus 2's rate takes one at the window's start)."""
    if signal in SAMPLED or (signal in RATED and rated is not None):
        ms = round((hi - lo + step) * 1000) if signal in SAMPLED else round((hi - lo + rated) * 1000) + 1
        span = f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
        # nocache: a VictoriaMetrics left at its default -search.latencyOffset (30 s) would otherwise
        # move an instant query's time that far back, and the newest steps would have no samples
        # (a sample not visible yet is only missing: the next cycle's settle asks for it again);
        # other engines ignore the parameter
        return "/api/v1/query", {"query": f"{q}[{span}]", "time": f"{hi:.3f}", "nocache": "1"}
    before = step if signal in STEP_INCREASE else 0.0  # the point each first increase is counted from
    return RANGE_PATH, {"query": q, "start": f"{lo - before:.3f}", "end": f"{hi:.3f}", "step": f"{step:g}"}


def _decoder(signal: str, rated: float | None = None):
    """How `signal`'s answers are read onto the grid (matrix.py); a RATED counter's whose rate is
    worked out here as its rate over `rated` seconds (a window's whole span: `Held.fill`; a cycle's
    go through `Held.merge_rates`)."""
    if signal in RATED and rated is not None:
        return partial(decode_rate, window=rated)
    return decode_samples if signal in SAMPLED else decode_increase if signal in STEP_INCREASE else decode_range


class SlowQuery(RuntimeError):
    """Query `name` used its whole time share (`share` seconds) without an answer."""

    def __init__(self, name: str, share: float, cause: Exception):
        super().__init__(f"no answer within its {share:g} s share of the deadline ({type(cause).__name__})")
        self.name, self.share = name, share


def hardware_fact(series: dict) -> bool:
    """Whether a facts answer's series is a hardware fact (kept TOPOLOGY_SECONDS), not a job's."""
    labels = series.get("metric") or {}
    return labels.get("__name__") in TOPOLOGY_METRICS or FACT_LABEL in labels


def silent_nodes(win: Window, stale_seconds: float) -> tuple[tuple[str, ...], dict[str, str]]:
    """(nodes with GPU samples in the window, {node: why} for those without any in its last
    `stale_seconds`). Unknown, never zero: a silent node's signals stay absent."""
    util = win.gpu.get("util")
    if util is None or util.size == 0 or not win.times.size:
        return (), {}
    recent = max(1, int(round(stale_seconds / win.step)))
    finite = np.isfinite(util).any(axis=1)  # (nodes, T)
    seen = finite.any(axis=1)
    out = {}
    for i in np.flatnonzero(seen & ~finite[:, -recent:].any(axis=1)):
        last = float(win.times[np.flatnonzero(finite[i])[-1]])
        out[win.nodes[i]] = f"stale: last sample {win.end - last:.0f} s before the window's end"
    return tuple(n for n, ok in zip(win.nodes, seen) if ok), out


_PROBE = Mapping("", "gpu", "")
_TARGET_PROBE = Mapping("", "target", "")


def add_matrix(store: SignalStore, signal: str, level: str, data: dict, matcher: NodeMatcher) -> None:
    probe = Mapping(signal, level, "")
    for series in data.get("result") or []:
        labels = series.get("metric") or {}
        part = labels.get(SIGNAL_LABEL) or signal  # a shared query's part
        node = matcher(labels)
        key = sub_key(probe, labels)
        if node is None or key is None:
            continue
        if "times" in series:  # decoded already (Held.merge)
            ts, vs = series["times"], series["vals"]
        else:
            vals = series.get("values") or ([series["value"]] if series.get("value") else [])
            try:
                ts = np.array([float(v[0]) for v in vals])
                vs = np.array([float(v[1]) for v in vals])
            except (TypeError, ValueError, IndexError):
                continue
        store.add(part, level, node, key, ts, vs, "mean")


def add_fact(store: SignalStore, labels: dict, matcher: NodeMatcher) -> None:
    """One fact series (INFO_QUERY's, by its labels) into the store."""
    name = labels.get("__name__", "")
    node = matcher(labels)
    if labels.get(FACT_LABEL) == "target":
        key = sub_key(_TARGET_PROBE, labels)
        if key:
            store.known_targets.add(key)
    elif not name and labels.get(HPC_JOB_LABEL) and node and labels.get("gpu", "").isdigit():
        store.gpu_jobs[(node, int(labels["gpu"]))] = labels[HPC_JOB_LABEL]
    else:
        store.add_info(name, labels, node)


class FactCache:
    """The facts answered as their series' labels' bytes (matrix.split_vector): a steady cycle's
    JOB_FACTS (a series per GPU with a job: about 30,000 at 4,096 nodes), and on a cold cycle and
    every TOPOLOGY_SECONDS INFO_QUERY's hardware facts too (about 300,000: NVLink pairs, NUMA nodes,
    leaf switches, targets). Each series' labels are parsed once, when those bytes first appear, and
    kept, with whether it is a hardware fact, while they are answered; parsing the whole answer as
    JSON made a dict, a list and a float per series every time (bench/bench_facts.py)."""

    def __init__(self):
        self._known: dict[bytes, tuple[bool, dict]] = {}

    def labels(self, raws: list[bytes]) -> list[tuple[bool, dict]]:
        """Per series, in order: (whether it is a hardware fact, its labels); those not seen in the
        last answer parsed in one call."""
        got = list(map(self._known.get, raws))
        new = [i for i, fact in enumerate(got) if fact is None]
        if new:
            try:
                parsed = orjson.loads(b"[" + b",".join([raws[i] for i in new]) + b"]")
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"a fact's labels: {exc}") from None
            if len(parsed) != len(new):  # a piece holding more than one object: not the engines' layout
                raise ValueError("a fact's labels are not one object")
            for i, labels in zip(new, parsed):
                labels = labels if isinstance(labels, dict) else {}
                got[i] = (hardware_fact({"metric": labels}), labels)
        self._known = dict(zip(raws, got))  # series no longer answered forgotten
        return got


def add_facts(store: SignalStore, labels: list[dict], matcher: NodeMatcher) -> None:
    """`add_fact` of each series' labels, in order."""
    for one in labels:
        add_fact(store, one, matcher)
