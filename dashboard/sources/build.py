"""Raw samples (any schema in schema.py) -> a `Window` on a common time grid.

Two entry points share the grid alignment:
* `RawStore`: samples as exporters emit them (bundles, the embedded scraper). Counters become
  per-second rates between consecutive samples of one series (a decrease is a counter reset: the
  increase is the new value, as Prometheus' `rate()` does; a non-increasing timestamp gives no
  rate), gauges are scaled to base units, then series are mapped to (signal, node, key).
* `SignalStore`: series already in signal units (the Prometheus source's aggregated queries).

Alignment: each grid time takes the latest sample at or before it, if that sample is younger than
`lookback` (default 2 steps); otherwise NaN. So a node that stopped reporting goes NaN, never 0,
and modest clock skew between nodes (seconds) is absorbed. NaN and Inf samples are unknown.
"""

from __future__ import annotations

import math
import sys
import weakref
import zlib
from collections import Counter, defaultdict
from dataclasses import replace
from functools import partial
from operator import itemgetter
from typing import Callable, Iterable, NamedTuple

import numpy as np

from dashboard.analysis.window import Window, grid

from .exposition import Columns, Sample, concat_ranges
from .schema import (BY_METRIC, FALLBACK_MARKERS, HPC_JOB_LABEL, INFO_METRICS, JOB_TARGET_METRICS, PORT_INFO, RATIOS, Mapping,
                     NodeMatcher, drop_fallbacks, matches, sub_key)

# the metrics a bundle keeps: the mapped ones, the facts, and the markers by which the Prometheus
# source tells an older agent (a bundle imported into an engine is read as a live one)
WANTED = frozenset(BY_METRIC) | frozenset(INFO_METRICS) | frozenset(m.metric for m in FALLBACK_MARKERS.values())
# Steps back a grid time looks for its latest sample (`align`'s lookback, unless given): two scrapes at the
# step's interval, so one missed scrape is carried over, two are unknown.
LOOKBACK_STEPS = 2
_UNSEEN = object()


def align(ts: np.ndarray, vs: np.ndarray, times: np.ndarray, lookback: float, events: bool = False) -> np.ndarray:
    """Latest sample at or before each grid time, within `lookback` seconds; NaN elsewhere.
    `events` (increments per sample): each grid time takes the sum of those since the grid time
    before it instead (see `step_sums`)."""
    out = np.full(times.shape[0], np.nan, np.float64)
    if ts.size == 0 or times.size == 0:
        return out
    order = np.argsort(ts, kind="stable")
    ts, vs = ts[order], vs[order]
    idx = np.searchsorted(ts, times + 1e-6, side="right") - 1
    ok = idx >= 0
    safe = np.maximum(idx, 0)
    ok &= (times - ts[safe]) < lookback
    if events:
        return np.where(ok, step_sums(ts, vs, np.zeros(ts.shape[0], np.int64), times)[0], np.nan)
    out[ok] = vs[safe[ok]]
    out[~np.isfinite(out)] = np.nan
    return out


def step_sums(ts: np.ndarray, vs: np.ndarray, row: np.ndarray, times: np.ndarray) -> np.ndarray:
    """(rows, T): per row (`row[i]`: sample i's row) and grid time, the sum of the samples after the
    grid time before it and at or before it (one step before the first); NaN where one of them is.
    Events counted per scrape land once, in the step they happened in: held over the steps of a
    slower scrape they would count again, and taking only the latest of a faster one's would lose
    the others. As the Prometheus source's step increases of the raw counter."""
    T = times.shape[0]
    R = int(row.max()) + 1 if row.size else 0
    step = float(times[1] - times[0]) if T > 1 else 0.0
    at = np.searchsorted(times + 1e-6, ts, side="left")
    keep = (at < T) & (ts > times[0] - step - 1e-6)
    at = row[keep] * T + at[keep]
    v = vs[keep]
    bad = ~np.isfinite(v)
    out = np.bincount(at, weights=np.where(bad, 0.0, v), minlength=R * T).reshape(R, T)
    if bad.any():
        out[np.bincount(at[bad], minlength=R * T).reshape(R, T) > 0] = np.nan
    return out


def align_grid(vals: np.ndarray, have: np.ndarray, step: float, lookback: float) -> np.ndarray:
    """`align` of rows already on the grid (a range query's answer): (rows, T) values and whether a
    point is there at all (a point whose value is NaN is there: it hides the older ones, as in
    `align`). A grid time without a point takes the nearest earlier one within `lookback`."""
    if have.all():  # a point at every grid time (a level's steady answer): nothing to carry over
        out = np.array(vals, np.float64)
        out[~np.isfinite(out)] = np.nan
        return out
    out = np.full(vals.shape, np.nan, np.float64)
    filled = np.zeros(vals.shape, bool)
    T = vals.shape[-1]
    k = 0
    while k < T and k * step < lookback:  # k steps back, nearest first: `align`'s "latest at or before"
        take = have[:, :T - k] & ~filled[:, k:]
        out[:, k:][take] = vals[:, :T - k][take]
        filled[:, k:] |= take
        k += 1
    out[~np.isfinite(out)] = np.nan
    return out


def _increments(ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, increases, intervals) between consecutive samples of a counter; a decrease is a reset
    (the increase is the new value), a repeated timestamp is one sample (overlapping captures)."""
    if ts.size < 2:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    order = np.argsort(ts, kind="stable")
    ts, vs = ts[order], vs[order]
    keep = np.append(np.diff(ts) != 0, True)
    ts, vs = ts[keep], vs[keep]
    if ts.size < 2:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    with np.errstate(all="ignore"):
        dv = np.diff(vs)
        inc = np.where(dv < 0, vs[1:], dv)
    return ts[1:], inc, np.diff(ts)


def counter_rate(ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, per-second rates) between consecutive samples; a reset counts from zero."""
    t2, inc, dt = _increments(ts, vs)
    with np.errstate(all="ignore"):
        rate = np.where(dt > 0, inc / np.where(dt > 0, dt, 1.0), np.nan)
    rate[~np.isfinite(rate)] = np.nan
    return t2, rate


class SignalStore:
    """Series in signal units keyed by (signal, level, node, key); several per key combine."""

    def __init__(self):
        self.series: dict[tuple[str, str, str, str], list[tuple[np.ndarray, np.ndarray, str, bool]]] = defaultdict(list)
        # blocks of rows on a step grid (a range query's answer: add_grid), aligned without a
        # per-series search
        self.grids: list[tuple[str, str, list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray]] = []
        self.gpu_jobs: dict[tuple[str, int], str] = {}
        self.leaf_of: dict[str, str] = {}
        self.nvlink_peers: dict[str, set[tuple[int, int]]] = defaultdict(set)
        self.gpu_numa: dict[str, dict[int, int]] = defaultdict(dict)
        self.link_layers: dict[str, dict[str, str]] = defaultdict(dict)
        self.job_targets: dict[str, set[str]] = defaultdict(set)
        # filesystem targets known to exist though no series of theirs was given (the Prometheus
        # source asks for reads only where there are any): the window still has their columns
        self.known_targets: set[str] = set()
        self.notes: list[str] = []

    def add(self, signal: str, level: str, node: str, key: str, ts, vs, combine: str = "mean",
            events: bool = False) -> None:
        """`events`: `vs` are increments per sample, summed per grid step (`align`)."""
        self.series[(signal, level, node, key)].append((np.asarray(ts, np.float64), np.asarray(vs, np.float64), combine,
                                                        events))

    def add_grid(self, signal: str, level: str, cells: list[tuple[str, str]], times: np.ndarray, vals: np.ndarray,
                 have: np.ndarray) -> None:
        """Rows (node, key) of one signal on the grid `times`: values and presence (rows, T), each
        row as `add(..., "mean")` of its points would be."""
        some = have.any(axis=1)  # a row without a point is no series at all, as `add` would have none
        if not some.all():
            cells, vals, have = [c for c, s in zip(cells, some) if s], vals[some], have[some]
        if cells:
            self.grids.append((signal, level, list(cells), np.asarray(times, np.float64), vals, have))

    def _grid_rows(self, times: np.ndarray, lookback: float):
        """The grid blocks aligned to the window's `times`: (signal, level, cells, rows); a block on
        another grid goes through `align` point by point, as `add` would have."""
        for signal, level, cells, gtimes, vals, have in self.grids:
            if gtimes.shape == times.shape and np.array_equal(gtimes, times) and times.size > 1:
                yield signal, level, cells, align_grid(vals, have, float(times[1] - times[0]), lookback)
            else:
                yield signal, level, cells, np.array([align(gtimes[h], v[h], times, lookback) for v, h in zip(vals, have)]
                                                     ).reshape(len(cells), times.shape[0])

    def add_info(self, name: str, labels: dict[str, str], node: str | None) -> None:
        if name in JOB_TARGET_METRICS:  # from the OSS, not a compute node
            if labels.get("jobid") and labels.get("target") and labels.get("operation", "read") == "read":
                self.job_targets[labels["jobid"]].add(labels["target"])
            return
        if node is None:
            return
        try:
            if name == "gangwatch_job_gpu_info" and labels.get("jobid") and labels.get("gpu", "").isdigit():
                self.gpu_jobs[(node, int(labels["gpu"]))] = labels["jobid"]
            elif name == "gangwatch_sim_node_info" and labels.get("leaf"):
                self.leaf_of[labels.get("node") or node] = labels["leaf"]
            elif name == "gangwatch_gpu_nvlink_peer_info":
                a, b = int(labels["gpu"]), int(labels["peer_gpu"])
                self.nvlink_peers[node].add((min(a, b), max(a, b)))
            elif name == "gangwatch_gpu_affinity_info" and labels.get("numa_node", "") not in ("", "-1"):
                self.gpu_numa[node][int(labels["gpu"])] = int(labels["numa_node"])
            elif name == PORT_INFO and labels.get("device") and labels.get("link_layer"):
                self.link_layers[node][f"{labels['device']}/{labels.get('port', '1')}"] = labels["link_layer"]
        except (KeyError, ValueError):
            pass

    def add_hardware(self, other: "SignalStore") -> None:
        """The leaf switches, NVLink peers, NUMA nodes and known targets `other` was given (kept
        between windows)."""
        self.leaf_of.update(other.leaf_of)
        self.known_targets |= other.known_targets
        for node, pairs in other.nvlink_peers.items():
            self.nvlink_peers[node] |= pairs
        for node, numa in other.gpu_numa.items():
            self.gpu_numa[node].update(numa)
        for node, layers in other.link_layers.items():
            self.link_layers[node].update(layers)

    def add_infos(self, infos: Iterable[tuple[str, dict[str, str]]],
                  matcher: Callable[[dict[str, str]], str | None]) -> None:
        for name, labels in infos:
            node = matcher(labels)
            if name.startswith("DCGM_FI_"):
                if node and labels.get("gpu", "").isdigit() and labels.get(HPC_JOB_LABEL):
                    self.gpu_jobs[(node, int(labels["gpu"]))] = labels[HPC_JOB_LABEL]
            else:
                self.add_info(name, labels, node)

    def window(self, start: float, end: float, step: float, lookback: float | None = None,
               leaf_of: dict[str, str] | None = None) -> Window:
        times = grid(start, end, step)
        lookback = LOOKBACK_STEPS * step if lookback is None else lookback
        blocks = list(self._grid_rows(times, lookback))
        cells = Counter((signal, level, node, key) for signal, level, rows, _ in blocks for node, key in rows)
        cells.update(self.series.keys())
        lay = Layout(cells, times.shape[0], self.known_targets)
        arrays: dict[str, dict[str, np.ndarray]] = {"gpu": {}, "rail": {}, "node": {}, "target": {}}
        per_job: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
        # a cell fed by one grid row alone (nearly all) is written with its block's other such rows in
        # one assignment; the rest join the cells' rows below, combined as `add`'s series are
        shared: dict[tuple[str, str, str, str], list[tuple[np.ndarray, str]]] = defaultdict(list)
        for signal, level, rows, aligned in blocks:
            alone = [i for i, (node, key) in enumerate(rows) if level != "job" and cells[(signal, level, node, key)] == 1]
            if alone:
                where = np.array([lay.index(level, *rows[i]) for i in alone], np.int64)
                _array(arrays, lay, level, signal)[tuple(where.T)] = aligned[alone]
            if len(alone) < len(rows):
                lone = set(alone)
                for i, (node, key) in enumerate(rows):
                    if i not in lone:
                        shared[(signal, level, node, key)].append((aligned[i], "mean"))
        for cell, items in self.series.items():
            shared[cell].extend((align(ts, vs, times, lookback, events), combine) for ts, vs, combine, events in items)
        for (signal, level, node, key), items in shared.items():
            if level == "job":
                per_job[signal][key].extend(row for row, _ in items)
                continue
            stack = np.vstack([row for row, _ in items])
            _array(arrays, lay, level, signal)[lay.index(level, node, key)] = stack[0] if len(items) == 1 else \
                combine_rows(stack, items[0][1])
        jobs_out = {signal: {jid: job_mean(np.vstack(rows)) for jid, rows in by_job.items()} for signal, by_job in per_job.items()}
        return lay.window(times, step, arrays, jobs_out, self, leaf_of, list(self.notes))


class GridBlock(NamedTuple):
    """One signal's rows, aligned to the window's grid already, that a source keeps between
    windows (HeldGrid): which rows of its aligned array they are, each row's (node, key) and sort
    key, and a version that changes whenever any of these do (blocks from one source share it,
    told apart by their signal). `addends`, for a signal that adds its counters up (combine="sum":
    RoCE's), each row's counter: a cell's rows of one counter average (one agent scraped twice),
    and the counters' means add up as `combine_rows` adds a bundle's."""
    signal: str
    level: str
    rows: np.ndarray
    cells: list[tuple[str, str]]
    order: list
    version: int
    addends: tuple[str, ...] | None = None


class _Placement:
    """Where one block's rows land in a Layout: the rows alone in their cell, written with one
    assignment, and the cells fed by several rows (a node under two host labels; a job's nodes),
    their rows in the block's sort order so the float sums are the same whichever cycle a row
    came in (a steady window is bit for bit a cold one)."""

    def __init__(self, block: GridBlock, lay: Layout):
        job = block.level == "job"
        by_cell: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, (node, key) in enumerate(block.cells):
            by_cell[(key,) if job else (node, key)].append(i)  # a job's series: its nodes' rows together
        alone = [] if job else [rs[0] for rs in by_cell.values() if len(rs) == 1]
        self.alone = block.rows[np.array(alone, np.int64)]
        where = [lay.index(block.level, *block.cells[i]) for i in alone]
        self.where = tuple(np.array(where, np.int64).T) if where else ()
        self.groups = [(cell, block.rows[np.array(sorted(rs, key=lambda i: block.order[i]), np.int64)])
                       for cell, rs in by_cell.items() if job or len(rs) > 1]
        # per cell of several rows, where they are of several counters (addends), each counter's rows;
        # the cells of one row a counter (every RoCE port: tens of thousands) added up in one pass
        # (`sums`: per count of counters, the cells and their rows, a column per counter)
        self.terms: list[list[np.ndarray] | None] = [None] * len(self.groups)
        self.sums: list[tuple[tuple, np.ndarray]] = []
        if block.addends is not None and not job:
            at = {int(r): a for r, a in zip(block.rows, block.addends)}
            by_count: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
            kept = []
            for cell, rows in self.groups:
                names = sorted({at[int(r)] for r in rows})
                terms = [rows[np.array([at[int(r)] == a for r in rows])] for a in names] if len(names) > 1 else None
                if terms is not None and len(names) == len(rows):
                    cells, mats = by_count[len(rows)]
                    cells.append(lay.index(block.level, *cell))
                    mats.append([int(t[0]) for t in terms])
                else:
                    kept.append(((cell, rows), terms))
            self.groups, self.terms = [g for g, _ in kept], [t for _, t in kept]
            self.sums = [(tuple(np.array(cells, np.int64).T), np.array(mats, np.int64))
                         for cells, mats in by_count.values()]
        # every cell of the array written (most per-GPU and per-port signals): its array need not
        # be filled with NaN first
        self.whole = not job and len(by_cell) == math.prod(lay.shapes[block.level][:-1])
        if job:  # every job's rows one after the other: their means in one pass (thousands of jobs)
            self.job_rows = np.concatenate([rows for _, rows in self.groups]) if self.groups else np.zeros(0, np.int64)
            self.job_sizes = np.array([rows.shape[0] for _, rows in self.groups], np.int64)
            self.job_starts = np.cumsum(self.job_sizes) - self.job_sizes

    def fill(self, block: GridBlock, aligned: np.ndarray, lay: Layout, arrays: dict, jobs: dict, full=None) -> None:
        if full is not None and self.whole:
            full = partial(full, fill=False)
        if self.alone.size:
            _array(arrays, lay, block.level, block.signal, full)[self.where] = aligned[self.alone]
        if block.level == "job":
            if self.groups:
                means = job_means(aligned[self.job_rows], self.job_starts, self.job_sizes)
                jobs[block.signal].update((cell[0], means[i]) for i, (cell, _) in enumerate(self.groups))
            return
        for (cell, rows), terms in zip(self.groups, self.terms):
            _array(arrays, lay, block.level, block.signal, full)[lay.index(block.level, *cell)] = \
                _cell(aligned, rows, terms)
        for where, mat in self.sums:
            _array(arrays, lay, block.level, block.signal, full)[where] = _added(aligned[mat])

    def fill_columns(self, block: GridBlock, aligned: np.ndarray, lay: Layout, arr: np.ndarray, cols: slice) -> None:
        """`fill` of the columns `cols` alone, into `arr` (not the job level). A cell of several rows
        is combined over all columns, then cut: the same bits as `fill` gives those columns."""
        if self.alone.size:
            arr[self.where + (cols,)] = aligned[self.alone, cols]
        for (cell, rows), terms in zip(self.groups, self.terms):
            arr[lay.index(block.level, *cell) + (cols,)] = _cell(aligned, rows, terms)[cols]
        for where, mat in self.sums:
            arr[where + (cols,)] = _added(aligned[:, cols][mat])


def _added(stack: np.ndarray) -> np.ndarray:
    """Cells of one row a counter (cells, counters, T) added up as `_cell` adds them: the sum where
    every counter is known, else NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(stack).all(axis=1), np.nansum(stack, axis=1), np.nan)


def _cell(aligned: np.ndarray, rows: np.ndarray, terms: list[np.ndarray] | None) -> np.ndarray:
    """A cell of several grid rows: their mean, or where they are of several counters (`terms`, each
    counter's rows) the sum of each counter's mean."""
    if terms is None:
        return combine_rows(aligned[rows], "mean")
    return combine_rows(np.vstack([combine_rows(aligned[t], "mean") for t in terms]), "sum")


class HeldGrid:
    """Windows from grid blocks a source keeps between windows (the Prometheus source's held
    signals, each row aligned already): the window `SignalStore.window` gives for the same rows
    added with `add_grid` (cells of several rows added in the blocks' sort order), but the layout
    and where each row lands are worked out again only for blocks whose rows changed, and the
    layout only when the nodes, keys or targets did. A steady window's Python work then does not
    grow with its rows; what is left per window is numpy copying the aligned rows into the window's
    arrays: fresh ones, or those of an earlier window nothing holds any more (`_Recycler`); a window
    handed out is never written to again (its arrays are read-only).

    A block that comes with its rows' column stamps (`Held.stamps`: a column's stamp changes
    whenever any of its rows' values there may have) need not even be copied whole: where the
    layout, the blocks of an array and where they land are those of the last window, a column
    whose stamps are those its time had then is that window's column, moved by the steps the
    window moved (one contiguous copy of the array), and only the others (a steady cycle's newest
    few, and the first, whose look-back moved out) are copied from the rows. At 4,096 nodes the
    rows' gather into the per-GPU and per-port arrays was about a sixth of a steady cycle's own CPU."""

    def __init__(self):
        self._lay: Layout | None = None
        self._lay_key: tuple = ()
        self._lay_union: tuple = ()  # what self._lay was laid out from: (T, targets, the union of the blocks' facts)
        self._facts: dict[tuple[int, str], frozenset] = {}  # block (version, signal) -> _layout_facts
        self._placed: dict[tuple[int, str], _Placement] = {}  # block (version, signal) -> where its rows land in self._lay
        self._recycler = _Recycler()
        self._last: _LastWindow | None = None
        self.moved = 0  # arrays made from the last window's, in all

    def _layout(self, blocks: list[GridBlock], T: int, targets: set[str]) -> Layout:
        """The layout of the last window again unless what it depends on changed; a new one (and
        every block placed again) otherwise. What it depends on is the union of the blocks' facts:
        a node that starts reading from a target changes the sparse signals' facts every few
        cycles at a thousand nodes, yet it is in the layout already by its GPUs, and laying the
        window out again placed every block again (about a tenth of a steady cycle's own CPU)."""
        facts = {(b.version, b.signal): self._facts.get((b.version, b.signal)) or _layout_facts(b) for b in blocks}
        self._facts = facts
        lay_key = (T, frozenset(targets), tuple(facts.values()))  # unchanged blocks: the same objects, compared by identity
        if self._lay is None or lay_key != self._lay_key:
            union = (T, lay_key[1], frozenset().union(*facts.values()))
            if self._lay is None or union != self._lay_union:
                cells = [("", b.level, node, key) for b in blocks for node, key in b.cells]
                self._lay, self._lay_union, self._placed = Layout(cells, T, targets), union, {}
            self._lay_key = lay_key
        return self._lay

    def window(self, store: SignalStore, blocks: list[tuple], start: float, end: float,
               step: float, leaf_of: dict[str, str] | None = None) -> Window:
        """`store`'s facts and notes with `blocks` ((block, its aligned rows on grid(start, end,
        step)[, their columns' stamps])); the store's own series and grids are not read, so it must
        have none."""
        if store.series or store.grids:
            raise ValueError("HeldGrid builds windows from held blocks only")
        times = grid(start, end, step)
        lay = self._layout([b for b, *_ in blocks], times.shape[0], store.known_targets)
        placed = {(b.version, b.signal): self._placed.get((b.version, b.signal)) or _Placement(b, lay) for b, *_ in blocks}
        self._placed = placed
        arrays: dict[str, dict[str, np.ndarray]] = {"gpu": {}, "rail": {}, "node": {}, "target": {}}
        jobs: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
        by_array: dict[tuple[str, str], list[tuple]] = defaultdict(list)
        for entry in blocks:
            by_array[entry[0].level, entry[0].signal].append(entry)
        stamped: dict[tuple[str, str], dict] = {}
        for (level, signal), members in by_array.items():
            stamps = {(b.version, b.signal): rest[0] if rest else None for b, _, *rest in members}
            if level != "job" and all(s is not None for s in stamps.values()):
                stamped[level, signal] = stamps
                if self._moved(level, signal, members, stamps, placed, lay, times, step, arrays):
                    continue
            for b, aligned, *_ in members:
                placed[b.version, b.signal].fill(b, aligned, lay, arrays, jobs, self._recycler.full)
        win = lay.window(times, step, arrays, dict(jobs), store, leaf_of, list(store.notes),
                         partial(self._recycler.full, fill=False))
        handed = {(level, s): a for level in ("gpu", "rail", "node", "target") for s, a in getattr(win, level).items()}
        for a in handed.values():
            a.flags.writeable = False
        self._recycler.handed_out(list(handed.values()))
        # what the next window may take columns from: arrays handed out as assembled here
        self._last = _LastWindow(lay, float(times[0]) if times.size else math.nan, times.shape[0], step, {
            key: (handed[key], stamps) for key, stamps in stamped.items()
            if key[1] not in _REWRITTEN and handed.get(key) is arrays[key[0]].get(key[1])})
        return win

    def _moved(self, level: str, signal: str, members: list[tuple], stamps: dict, placed: dict, lay: Layout,
               times: np.ndarray, step: float, arrays: dict) -> bool:
        """The array of (level, signal) from the last window's where it can (class doc): its columns
        whose stamps are unchanged copied, moved by the steps the window moved, the others from the
        rows; False where it cannot, the array not made."""
        last, T = self._last, times.shape[0]
        if last is None or last.lay is not lay or last.step != step or last.T != T or not T:
            return False
        k = int(round((times[0] - last.t0) / step))
        got = last.arrays.get((level, signal))
        if got is None or not 0 <= k < T or abs(times[0] - (last.t0 + k * step)) > 1e-6:
            return False
        before, stamps_then = got
        if stamps_then.keys() != stamps.keys():
            return False
        same = np.zeros(T, bool)
        same[:T - k] = True
        for key, now in stamps.items():
            then = stamps_then[key]
            if now.shape != (T,) or then.shape != (T,):
                return False
            same[:T - k] &= now[:T - k] == then[k:]
        if not same.any():
            return False
        whole = any(placed[key].whole for key in stamps)
        arr = arrays[level][signal] = self._recycler.full(before.shape, before.dtype, fill=False)
        edges = np.flatnonzero(np.diff(same.astype(np.int8))) + 1
        for lo, hi in zip(np.concatenate(([0], edges)).tolist(), np.concatenate((edges, [T])).tolist()):
            if same[lo]:
                arr[..., lo:hi] = before[..., lo + k:hi + k]
                continue
            if not whole:
                arr[..., lo:hi] = np.nan
            for b, aligned, *_ in members:
                placed[b.version, b.signal].fill_columns(b, aligned, lay, arr, slice(lo, hi))
        self.moved += 1
        return True


class _LastWindow(NamedTuple):
    """What HeldGrid keeps of the window it made last: its layout and grid, and per array the
    stamps of the blocks it was made from."""
    lay: "Layout"
    t0: float
    T: int
    step: float
    arrays: dict[tuple[str, str], tuple[np.ndarray, dict]]


def _layout_facts(block: GridBlock) -> frozenset:
    """What a Layout takes from a block's cells: its nodes, their GPU and port keys, the target
    names. Not which node has which target (a sparse signal's rows come and go with the reads,
    and each such change would otherwise lay out the whole window again)."""
    if block.level == "job":
        return frozenset()
    nodes = {("node", node, "") for node, _ in block.cells}  # for every level: HeldGrid compares their union
    if block.level in ("gpu", "rail"):
        return frozenset(nodes.union((block.level, node, key) for node, key in block.cells))
    return frozenset(nodes | {("target", "", key) for _, key in block.cells} if block.level == "target" else nodes)


def combine_rows(stack: np.ndarray, combine: str) -> np.ndarray:
    """One cell from its rows (k, T): their sum where all are known ("sum"), else the mean of the
    known ones; NaN where none is."""
    with np.errstate(invalid="ignore"):
        cnt = np.isfinite(stack).sum(axis=0)
        if combine == "sum":
            return np.where(cnt == stack.shape[0], np.nansum(stack, axis=0), np.nan)
        return np.where(cnt > 0, np.nansum(stack, axis=0) / np.maximum(cnt, 1), np.nan)


def job_mean(stack: np.ndarray) -> np.ndarray:
    """A job's series from its nodes' rows (k, T): the mean of the known ones, NaN where none is."""
    if not stack.shape[0]:
        return np.full(stack.shape[1:], np.nan)
    return job_means(stack, np.zeros(1, np.int64), np.array([stack.shape[0]], np.int64))[0]


def job_means(stack: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """`job_mean` of each run of `sizes[i]` (>= 1) rows of `stack` from `starts[i]`, one row each:
    the runs side by side, a pass per row of the longest run rather than a call per job (thousands
    a window). A run's rows are added one after another in their order, in both, so a job's mean is
    the same to the last bit however many jobs are worked out with it (numpy's `sum(axis=0)` and
    `add.reduceat` choose their own order)."""
    by_size = np.argsort(-sizes, kind="stable")  # the runs still adding a j-th row: a prefix
    first, longest = starts[by_size], int(sizes.max(initial=0))
    left = np.searchsorted(-sizes[by_size], -np.arange(longest), side="left")  # left[j]: the runs of more than j rows
    with np.errstate(invalid="ignore"):
        rows = stack[first]
        known = np.isfinite(rows)
        total, cnt = np.where(known, rows, 0) + 0.0, known.astype(np.int64)  # + 0.0: sum()'s start, so -0.0 adds up to 0.0
        for j in range(1, longest):
            m = left[j]
            rows = stack[first[:m] + j]
            known = np.isfinite(rows)
            total[:m] += np.where(known, rows, 0)
            cnt[:m] += known
        out = np.empty_like(total)
        out[by_size] = np.where(cnt > 0, total / np.maximum(cnt, 1), np.nan)
        return out


AUX_SIGNALS = frozenset(part for num, den, _ in RATIOS.values() for part in (num, den))  # only feed derived signals


class Layout:
    """Where each (level, node, key) lands in a Window's arrays, from the keys that have data: nodes
    sorted, GPU columns per node by index, rail columns by name, targets shared by all nodes."""

    def __init__(self, cells: Iterable[tuple[str, str, str, str]], n_steps: int, targets: Iterable[str] = ()):
        per_level: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for _signal, level, node, key in cells:
            if level != "job":
                per_level[level][node].add(key)
        nodes = set().union(*[set(d) for d in per_level.values()]) if per_level else set()
        self.nodes = nodes_t = tuple(sorted(nodes))
        self.ni = {n: i for i, n in enumerate(nodes_t)}
        self.gpu_keys = {n: sorted(per_level["gpu"].get(n, ()), key=int) for n in nodes_t}
        self.rail_keys = {n: sorted(per_level["rail"].get(n, ())) for n in nodes_t}
        self.targets = sorted(set(targets).union(*per_level["target"].values()))
        G = max((len(v) for v in self.gpu_keys.values()), default=0)
        R = max((len(v) for v in self.rail_keys.values()), default=0)
        self.G, self.R = G, R
        self.ti = {t: i for i, t in enumerate(self.targets)}
        self.gcol = {n: {k: c for c, k in enumerate(ks)} for n, ks in self.gpu_keys.items()}
        self.rcol = {n: {k: c for c, k in enumerate(ks)} for n, ks in self.rail_keys.items()}
        N, T = len(nodes_t), n_steps
        self.shapes = {"gpu": (N, G, T), "rail": (N, R, T), "node": (N, T), "target": (N, len(self.targets), T)}

    def index(self, level: str, node: str, key: str) -> tuple[int, ...]:
        i = self.ni[node]
        if level == "node":
            return (i,)
        if level == "gpu":
            return i, self.gcol[node][key]
        if level == "rail":
            return i, self.rcol[node][key]
        return i, self.ti[key]

    def window(self, times: np.ndarray, step: float, arrays: dict[str, dict[str, np.ndarray]],
               jobs: dict[str, dict[str, np.ndarray]], info: "SignalStore", leaf_of: dict[str, str] | None,
               notes: list[str], full: Callable | None = None) -> Window:
        """The Window from filled arrays (float64 or float32; AUX_SIGNALS float64): derived signals
        are computed in float64, then everything is stored as float32. `full(shape, dtype)`: where
        an array it adds comes from (np.empty's, or _Recycler.full's)."""
        for name, (num, den, level) in RATIOS.items():
            _ratio(arrays[level], name, num, den)
        f32 = {lvl: {s: a.astype(np.float32, copy=False) for s, a in d.items()} for lvl, d in arrays.items()}
        zero_reads(f32, len(self.nodes), len(self.targets), len(times))
        zero_port_events(f32, full)
        if not f32["gpu"]:
            notes.append("no GPU metrics found (gangwatch_gpu_*, DCGM_FI_*)")
        leaves = dict(info.leaf_of)
        leaves.update(leaf_of or {})
        nodes_t, G, R = self.nodes, self.G, self.R
        return Window(times=times, step=float(step), nodes=nodes_t,
                      gpus=tuple(tuple(int(k) for k in self.gpu_keys[n]) + (-1,) * (G - len(self.gpu_keys[n])) for n in nodes_t),
                      rails=tuple(tuple(self.rail_keys[n]) + ("",) * (R - len(self.rail_keys[n])) for n in nodes_t),
                      targets=tuple(self.targets), gpu=f32["gpu"], rail=f32["rail"], node=f32["node"], target=f32["target"],
                      job=jobs, gpu_jobs=dict(info.gpu_jobs), leaf_of=leaves,
                      nvlink_peers={n: frozenset(p) for n, p in info.nvlink_peers.items()},
                      gpu_numa={n: dict(d) for n, d in info.gpu_numa.items()},
                      link_layers={n: dict(d) for n, d in info.link_layers.items()},
                      job_targets={j: frozenset(t) for j, t in info.job_targets.items()}, notes=tuple(notes))


def zero_reads(arrays: dict[str, dict[str, np.ndarray]], N: int, F: int, T: int) -> None:
    """`read` 0 wherever a node's series for a target is missing and that node's filesystem total
    (`fs_read`) is known: the node read nothing from it (Prometheus' sparse answer leaves such
    points out, SPARSE; an agent leaves out a target's counters while they stand still,
    collectors.quiet.QuietSeries); NaN stays where the node's reads are unknown. Pages show
    0, not unknown, and every source (Prometheus, bundle, embedded scraper) says the same. In place:
    one `fmax` with 0 where the total is known (NaN elsewhere) fills only the NaN cells, as every
    point there is >= 0 (at 4,096 nodes and 32 targets a copy and a masked write took 0.2 s of a
    steady cycle)."""
    total = arrays["node"].get("fs_read")
    if total is None or not F:
        return
    zero = np.where(np.isfinite(total), np.float32(0), np.float32(np.nan))[:, None, :]
    read = arrays["target"].get("read")
    if read is not None:
        np.fmax(read, zero, out=read)
    else:
        arrays["target"]["read"] = np.broadcast_to(zero, (N, F, T)).copy()


PORT_EVENTS = ("ib_down", "ib_err")  # what an agent with QUIET_MARKER leaves out while it stands still
QUIET_MARKER = "ib_quiet"
# the arrays Layout.window writes in place or drops (HeldGrid takes no columns from these)
_REWRITTEN = frozenset(("read", *PORT_EVENTS, QUIET_MARKER)) | AUX_SIGNALS


def zero_port_events(arrays: dict[str, dict[str, np.ndarray]], full: Callable | None = None) -> None:
    """`ib_down` and `ib_err` 0 wherever a port's series is missing, the port was read at that step
    (its `ib_rate` or `ib_tx` is known) and the node's agent says it leaves still error counters out
    (`ib_quiet`, its gangwatch_infiniband_port_idle_series; collectors.quiet): no event there. NaN
    stays where either is unknown: node_exporter and older agents, which export every counter, give
    no marker, so a counter they miss stays unknown. The marker only feeds this and is dropped."""
    marker = arrays["node"].pop(QUIET_MARKER, None)
    rail = arrays["rail"]
    read = [rail[s] for s in ("ib_rate", "ib_tx") if s in rail]
    if marker is None or not read:
        return
    known = np.isfinite(read[0])
    for more in read[1:]:
        known |= np.isfinite(more)
    known &= np.isfinite(marker)[:, None, :]
    for signal in PORT_EVENTS:
        got = rail.get(signal)
        if got is not None:
            np.fmax(got, np.float32(0), out=got, where=known)  # every point there is >= 0: fills only the NaN cells
        elif known.any():
            # an array of its own (`full`: one a window no longer holds, whose pages are mapped already)
            zero = rail[signal] = (full or np.empty)(known.shape, np.float32)
            np.copyto(zero, np.float32(np.nan))
            np.copyto(zero, np.float32(0), where=known)


class RawStore:
    """Exporter samples grouped per series; `signals()` maps them through schema.MAPPINGS."""

    def __init__(self, matcher: NodeMatcher | None = None):
        self.matcher = matcher or NodeMatcher()
        self.points: dict[tuple[str, tuple], tuple[list[float], list[float]]] = {}
        self.info: dict[tuple[str, tuple], dict[str, str]] = {}
        self.unmatched = 0

    def add(self, s: Sample, default_ts: float | None = None) -> None:
        ts = s.timestamp if s.timestamp is not None else default_ts
        if ts is None or not math.isfinite(ts):
            return
        if is_info(s.name, s.labels):
            self.info[(s.name, tuple(sorted(s.labels.items())))] = s.labels
            if s.name in INFO_METRICS:
                return
        if s.name not in BY_METRIC:
            return
        key = (s.name, tuple(sorted(s.labels.items())))
        got = self.points.get(key)
        if got is None:
            got = self.points[key] = ([], [])
        got[0].append(ts)
        got[1].append(s.value)

    def prune(self, before: float) -> None:
        """Drop samples older than `before` (the embedded source's bounded window)."""
        dead = []
        for key, (ts, vs) in self.points.items():
            k = 0
            while k < len(ts) and ts[k] < before:
                k += 1
            if k:
                del ts[:k]
                del vs[:k]
            if not ts:
                dead.append(key)
        for key in dead:
            del self.points[key]

    def add_all(self, samples: Iterable[Sample], default_ts: float | None = None) -> None:
        for s in samples:
            self.add(s, default_ts)

    def signals(self) -> SignalStore:
        out = SignalStore()
        feeds = []  # (cell, mapping, series): a fallback mapping's dropped where its replacement feeds the cell
        for (name, items), points in self.points.items():
            labels = dict(items)
            node = self.matcher(labels)
            if node is None:
                self.unmatched += 1
                continue
            feeds.extend(((m.signal, m.level, node, key), m, points) for m, key in cells_of(name, labels))
        for (signal, level, node, key), m, (ts_l, vs_l) in drop_fallbacks(feeds, itemgetter(0), itemgetter(1)):
            t2, v2 = _transform(m, np.asarray(ts_l, np.float64), np.asarray(vs_l, np.float64))
            out.add(signal, level, node, key, t2, v2, m.combine, m.events)
        out.add_infos(((name, labels) for (name, _), labels in self.info.items()), self.matcher)
        if self.unmatched:
            out.notes.append(f"{self.unmatched} series without a host label ({', '.join(self.matcher.host_labels)})")
        return out


def is_info(name: str, labels: dict[str, str]) -> bool:
    """Series read for their labels: facts, and dcgm-exporter's GPU -> job label."""
    return name in INFO_METRICS or (name.startswith("DCGM_FI_") and bool(labels.get(HPC_JOB_LABEL)))


def cells_of(name: str, labels: dict[str, str]) -> list[tuple[Mapping, str]]:
    """The (mapping, key) pairs a series feeds; a mapping whose scale comes from a label (a
    histogram bucket's bound) is returned with this series' scale."""
    out = []
    for m in BY_METRIC.get(name, ()):
        if matches(m, labels):
            key = sub_key(m, labels)
            if key is None:
                continue
            if m.scale_label:
                try:
                    bound = float(labels.get(m.scale_label, ""))
                except ValueError:
                    continue
                if not math.isfinite(bound):
                    continue
                m = replace(m, scale=m.scale * bound, scale_label="")
            out.append((m, key))
    return out


def _transform(m: Mapping, ts: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if m.events:  # events per sample interval (the link went down twice since the last scrape)
        t2, inc, _ = _increments(ts, vs)
        inc[~np.isfinite(inc)] = np.nan
        return t2, inc * m.scale
    if m.counter:
        t2, r = counter_rate(ts, vs)
        return t2, r * m.scale
    return ts, vs * m.scale


# ------------------------------------------------------------------------------------ columns -> Window

MAX_NODES = 16384  # nodes given a dense row in a bundle's window (see cap_nodes)
MAX_WINDOW_BYTES = 2 << 30  # and the window's arrays, all levels together


def cap_nodes(nodes: Iterable[str], keep: Iterable[str], limit: int) -> tuple[set[str], str | None]:
    """At most `limit` nodes: those in `keep` (the jobs' nodes) first, then the others in the order
    of a hash of their name: a stable, unbiased sample of the rest of the cluster, which the
    diagnosis needs as the typical node a job's nodes are compared with."""
    nodes = set(nodes)
    if len(nodes) <= limit:
        return nodes, None
    first = sorted(nodes & set(keep))[:limit]
    rest = sorted(nodes - set(first), key=lambda n: (zlib.crc32(n.encode("utf-8", "replace")), n))
    kept = set(first) | set(rest[:max(0, limit - len(first))])
    return kept, (f"{len(nodes)} nodes carry metrics; the window keeps {len(kept)}: the {len(first)} the jobs run on "
                  f"and {len(kept) - len(first)} others sampled by a hash of their name")


def _sorted_columns(cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(codes, ts, vs, offsets, first) with each series' samples together and in time order (ties
    in file order); `first[c]`: file position of series c's first sample. Consumes `cols`' arrays."""
    codes, ts, vs = cols.codes, cols.ts, cols.vs
    cols.codes = cols.ts = cols.vs = None  # type: ignore[assignment]
    order = None
    if codes.shape[0] > 1:
        same = codes[1:] == codes[:-1]
        if not (np.all(codes[1:] >= codes[:-1]) and np.all(~same | (ts[1:] >= ts[:-1]))):
            order = np.lexsort((ts, codes))  # stable: equal times keep file order
            codes = codes[order]
            ts = ts[order]
            vs = vs[order]
        del same
    counts = np.bincount(codes, minlength=len(cols.series))
    off = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    start = np.minimum(off[:-1], max(codes.shape[0] - 1, 0))
    first = (order[start] if order is not None else start) if codes.shape[0] else start
    first = np.where(counts > 0, first, np.iinfo(np.int64).max)
    return codes, ts, vs, off, first


def scrape_interval(ts: np.ndarray, off: np.ndarray, probe: int = 8) -> float:
    """The longest usual scrape interval of a file's series (0 when none has two samples): the
    90th percentile over series of the median of each one's first `probe` sample spacings. Sites
    scrape every 15 s to 1 min (Prometheus' default scrape_interval is 1m, dcgm-exporter collects
    every 30 s): a grid finer than that takes each step from the latest sample within 1.5 intervals,
    as a Prometheus range query carries a sample forward, rather than leaving every other step
    unknown. A missed scrape doubles one spacing, which a median over several does not see."""
    n = np.diff(off)
    lo = off[:-1][n >= 2]
    if not lo.size:
        return 0.0
    k = np.minimum(n[n >= 2] - 1, probe)
    j = np.arange(probe)
    at = lo[:, None] + j[None, :]
    valid = j[None, :] < k[:, None]
    at = np.where(valid, at, lo[:, None])
    gaps = np.where(valid, ts[at + 1] - ts[at], np.nan)
    with np.errstate(invalid="ignore"):
        per_series = np.nanmedian(gaps, axis=1)
    per_series = per_series[np.isfinite(per_series) & (per_series > 0)]
    return float(np.quantile(per_series, 0.9)) if per_series.size else 0.0


def aligned_rows(ts: np.ndarray, vs: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray,
             times: np.ndarray, lookback: float, events: bool = False) -> np.ndarray:
    """Rows of `align` for the series ts[lo[r]:hi[r]] (each sorted by time), times `scale[r]`."""
    R, T = lo.shape[0], times.shape[0]
    n = hi - lo
    # per row, how many of its samples lie at or before each grid time (what a searchsorted of the
    # grid into the row, side="right", gives: the same comparisons), for all rows at once: each
    # sample's first grid time at or after it, counted per (row, grid time), summed along the grid
    sel = concat_ranges(lo, n)
    at = np.searchsorted(times + 1e-6, ts[sel], side="left")
    at += np.repeat(np.arange(0, R * (T + 1), T + 1), n)
    counts = np.bincount(at, minlength=R * (T + 1)).reshape(R, T + 1)
    del at
    idx = np.cumsum(counts, axis=1, out=counts)[:, :T]  # in place: one (R, T) array of indices, as before
    idx += lo[:, None] - 1
    ok = idx >= lo[:, None]
    safe = np.maximum(idx, 0, out=idx)
    ok &= (times[None, :] - ts[safe]) < lookback
    if events:
        out = step_sums(ts[sel], vs[sel], np.repeat(np.arange(R), n), times) if R else np.empty((0, T))
    else:
        out = vs[safe]
    del sel
    if np.any(scale != 1.0):
        with np.errstate(invalid="ignore", over="ignore"):
            out *= scale[:, None]
    ok &= np.isfinite(out)
    out[~ok] = np.nan
    return out


def _increments_of(ts: np.ndarray, vs: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """`_increments` of several series at once: (times, increases, intervals, new lo, new hi)."""
    n = hi - lo
    c = np.repeat(np.arange(lo.shape[0]), n)
    sel = concat_ranges(lo, n)
    t, v = ts[sel], vs[sel]
    del sel
    if c.shape[0] > 1:  # a repeated time is one sample (the last)
        keep = np.ones(c.shape[0], bool)
        keep[:-1] = (c[1:] != c[:-1]) | (t[1:] != t[:-1])
        c, t, v = c[keep], t[keep], v[keep]
    pair = c[1:] == c[:-1]
    with np.errstate(all="ignore"):
        dv = v[1:] - v[:-1]
        inc = np.where(dv < 0, v[1:], dv)[pair]
        dt = (t[1:] - t[:-1])[pair]
    c2 = c[1:][pair]
    off = np.zeros(lo.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(c2, minlength=lo.shape[0]), out=off[1:])
    return t[1:][pair], inc, dt, off[:-1], off[1:]


def _kind(m: Mapping) -> int:
    return 2 if m.events else 1 if m.counter else 0  # as `_transform`: events, rates, gauges


def _block(items: list, ts: np.ndarray, vs: np.ndarray, off: np.ndarray, times: np.ndarray, lookback: float) -> np.ndarray:
    """Aligned rows (len(items), T) of `items` (cell, series, mapping)."""
    block = np.empty((len(items), times.shape[0]))
    kinds = [_kind(m) for _, _, m in items]
    series = np.array([c for _, c, _ in items], np.int64)
    scale = np.array([m.scale for _, _, m in items])
    raw = np.array([k == 0 for k in kinds])
    if raw.any():
        block[raw] = aligned_rows(ts, vs, off[series[raw]], off[series[raw] + 1], scale[raw], times, lookback)
    if not raw.all():
        cnt = ~raw
        uniq, pos = np.unique(series[cnt], return_inverse=True)
        t2, inc, dt, lo, hi = _increments_of(ts, vs, off[uniq], off[uniq + 1])
        with np.errstate(all="ignore"):
            rate = np.where(dt > 0, inc / np.where(dt > 0, dt, 1.0), np.nan)
        rate[~np.isfinite(rate)] = np.nan
        inc[~np.isfinite(inc)] = np.nan
        kind = np.array(kinds)[cnt]
        rows = np.flatnonzero(cnt)
        for k, vals in ((1, rate), (2, inc)):
            m = kind == k
            if m.any():
                block[rows[m]] = aligned_rows(t2, vals, lo[pos[m]], hi[pos[m]], scale[cnt][m], times, lookback,
                                              events=k == 2)
    return block


def columns_window(cols: Columns, start: float, end: float, step: float, lookback: float | None = None,
                   leaf_of: dict[str, str] | None = None, matcher: NodeMatcher | None = None,
                   keep_nodes: Iterable[str] = (), max_nodes: int = MAX_NODES,
                   max_bytes: int = MAX_WINDOW_BYTES) -> Window:
    """The Window of a file's samples (`exposition.read_columns`), the same as RawStore's, computed
    column-wise: at most one sort of all samples, then batches of series (a sixteenth of the samples'
    size each) whose counters become rates and whose rows are aligned with numpy, one searchsorted
    per batch. Nodes beyond `max_nodes` (or beyond `max_bytes` of window) are
    left out as `cap_nodes` says, with a note. Consumes `cols`' arrays."""
    matcher = matcher or NodeMatcher()
    times = grid(start, end, step)
    T = times.shape[0]
    codes, ts, vs, off, first = _sorted_columns(cols)
    interval = scrape_interval(ts, off)
    lookback = max(2 * step, 1.5 * interval) if lookback is None else lookback
    info = SignalStore()
    items: list[tuple[tuple[str, str, str, str], int, Mapping]] = []  # (cell, series, mapping), series in order
    infos, unmatched = [], 0
    node_of: dict[int, str | None] = {}

    def node_for(labels: dict[str, str]) -> str | None:
        """matcher(labels), once per label block: its series share one dict (read_columns)."""
        got = node_of.get(id(labels), _UNSEEN)
        if got is _UNSEEN:
            got = node_of[id(labels)] = matcher(labels)
        return got

    for c in np.argsort(first, kind="stable")[:int(np.count_nonzero(first < np.iinfo(np.int64).max))].tolist():
        name, labels = cols.series[c]
        if is_info(name, labels):
            infos.append((name, labels))
            if name in INFO_METRICS:
                continue
        if name not in BY_METRIC:
            continue
        node = node_for(labels)
        if node is None:
            unmatched += 1
            continue
        items.extend(((m.signal, m.level, node, key), c, m) for m, key in cells_of(name, labels))
    items = drop_fallbacks(items, itemgetter(0), itemgetter(2))
    info.add_infos(infos, node_for)
    notes: list[str] = []
    if unmatched:
        notes.append(f"{unmatched} series without a host label ({', '.join(matcher.host_labels)})")
    keep_nodes = set(keep_nodes)
    nodes = {cell[2] for cell, _, _ in items if cell[1] != "job"}
    kept, note = cap_nodes(nodes, keep_nodes, max_nodes)
    lay = Layout([cell for cell, _, _ in items if cell[1] == "job" or cell[2] in kept], T)
    signals_of: dict[str, set[str]] = defaultdict(set)
    for cell, _, _ in items:
        signals_of[cell[1]].add(cell[0])
    per_node = 4 * sum(len(signals_of[lvl]) * int(np.prod(shp[1:])) for lvl, shp in lay.shapes.items())
    if per_node and len(lay.nodes) * per_node > max_bytes:
        kept, note = cap_nodes(kept, keep_nodes, max(1, max_bytes // per_node))
        lay = Layout([cell for cell, _, _ in items if cell[1] == "job" or cell[2] in kept], T)
    if note:
        notes.append(note)
        items = [it for it in items if it[0][1] == "job" or it[0][2] in kept]
    del codes
    order = sorted(range(len(items)), key=lambda k: items[k][0])  # stable: a cell's items stay in order
    arrays: dict[str, dict[str, np.ndarray]] = {"gpu": {}, "rail": {}, "node": {}, "target": {}}
    jobs: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    # batches of rows sized to a sixteenth of the samples: the work arrays stay small beside them
    rows_per_batch = max(1, max(1 << 15, ts.shape[0] // 16) // max(T, 1))
    k = 0
    while k < len(order):
        batch = order[k:k + rows_per_batch]
        k += len(batch)
        while k < len(order) and items[order[k]][0] == items[batch[-1]][0]:  # a cell never spans batches
            batch.append(order[k])
            k += 1
        its = [items[i] for i in batch]
        _store(_block(its, ts, vs, off, times, lookback), its, lay, arrays, jobs)
    return replace(lay.window(times, step, arrays, dict(jobs), info, leaf_of, notes), scrape_seconds=interval)


def _store(block: np.ndarray, items: list, lay: Layout, arrays: dict, jobs: dict) -> None:
    """Combine each cell's aligned rows as SignalStore.window does and write them in place; cells
    of one row (most) are written together, one assignment per signal."""
    single: dict[tuple[str, str], tuple[list[int], list[tuple[int, ...]]]] = defaultdict(lambda: ([], []))
    i = 0
    while i < len(items):
        cell, _, m = items[i]
        j = i + 1
        while j < len(items) and items[j][0] == cell:
            j += 1
        signal, level, node, key = cell
        if j - i == 1 and level != "job":
            rows, where = single[(level, signal)]
            rows.append(i)
            where.append(lay.index(level, node, key))
            i = j
            continue
        stack = block[i:j]
        if level == "job":
            jobs[signal][key] = job_mean(stack)
        else:
            _array(arrays, lay, level, signal)[lay.index(level, node, key)] = combine_rows(stack, m.combine)
        i = j
    for (level, signal), (rows, where) in single.items():
        _array(arrays, lay, level, signal)[tuple(np.array(where, np.int64).T)] = block[rows]


def _array(arrays: dict, lay: Layout, level: str, signal: str, full=None) -> np.ndarray:
    arr = arrays[level].get(signal)
    if arr is None:
        shape, dtype = lay.shapes[level], np.float64 if signal in AUX_SIGNALS else np.float32
        arr = arrays[level][signal] = np.full(shape, np.nan, dtype) if full is None else full(shape, dtype)
    return arr


class _Recycler:
    """The arrays of the windows HeldGrid handed out, given to a later window once nothing else
    holds them (the window, and every view of its arrays, dropped): at 4,096 nodes a window's fresh
    arrays (554 MiB) cost a steady cycle 0.7 s, mostly the kernel mapping new pages, where filling
    mapped ones takes a tenth of that. An array anything still refers to (a window a page is
    drawing, a view of it, a weak reference) is never touched, so a window handed out is still
    never written to. The arrays of the last KEEP windows are kept, at most."""

    KEEP = 2

    def __init__(self):
        self._arrays: list[np.ndarray] = []
        self.reused = 0  # arrays given again, in all

    def full(self, shape: tuple, dtype, fill: bool = True) -> np.ndarray:
        """An array of `shape` and `dtype` full of NaN (with `fill`; otherwise whatever it holds, for a
        caller that writes every cell): a free one of those kept, else a new one."""
        pool = self._arrays
        for i in range(len(pool)):
            if pool[i].shape == shape and pool[i].dtype == dtype and self._free(i):
                arr = pool.pop(i)
                arr.flags.writeable = True  # its own memory, read-only while a window had it
                if fill:
                    arr.fill(np.nan)
                self.reused += 1
                return arr
        return np.full(shape, np.nan, dtype) if fill else np.empty(shape, dtype)

    def _free(self, i: int) -> bool:
        # referred to by this list alone (getrefcount's own argument is the other reference)
        return sys.getrefcount(self._arrays[i]) == 2 and not weakref.getweakrefcount(self._arrays[i])

    def handed_out(self, arrays: list[np.ndarray]) -> None:
        self._arrays = (self._arrays + arrays)[-self.KEEP * max(1, len(arrays)):]


def _ratio(arrays: dict[str, np.ndarray], name: str, num: str, den: str) -> None:
    """arrays[name] = num / den where den > 0, NaN (unknown) elsewhere; the two inputs are dropped."""
    n, d = arrays.pop(num, None), arrays.pop(den, None)
    if n is not None and d is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            arrays[name] = np.where(d > 0, n / d, np.nan)
