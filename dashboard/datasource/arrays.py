"""Pure array helpers the implementations share: NaN-aware sums and means, downsampling of a
window for the browser, and the per-switch view of node x port arrays."""

from __future__ import annotations

import math
import warnings
from typing import Callable

import numpy as np

from dashboard.datasource.records import Network, Port, SwitchStat


def nansum(a: np.ndarray, axis: int) -> np.ndarray:
    """Sum over channels; NaN only where every channel is unknown."""
    return np.where(np.isnan(a).all(axis=axis), np.nan, np.nansum(a, axis=axis))


def nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    """np.nanmean without the warning for all-NaN slices (unknown stays NaN: that is the point)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def downsample_cols(times: np.ndarray, z: np.ndarray, max_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Average consecutive columns so that at most max_cols remain (NaN-aware)."""
    t = len(times)
    if t <= max_cols or max_cols < 1:
        return times, z
    if t <= max_cols * 1.25:  # a few samples over (an hour at 15 s is 241): drop the oldest, keep resolution
        return times[-max_cols:], z[:, -max_cols:]
    k = math.ceil(t / max_cols)
    cut = t - (t // k) * k  # drop the oldest columns that do not fill a bin
    times, z = times[cut:], z[:, cut:]
    m = len(times) // k
    zz = nanmean(z.reshape(z.shape[0], m, k), axis=2) if z.size else z.reshape(z.shape[0], m)
    return times.reshape(m, k)[:, -1], zz


def aggregate_rows(names: list[str] | tuple[str, ...], z: np.ndarray, max_rows: int,
                   order: str = "mean") -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], np.ndarray]:
    """Sort nodes (by their mean, lowest first, so idle nodes come to the top) and average
    consecutive nodes into at most max_rows rows. Returns (labels, nodes per row, z)."""
    n = len(names)
    if n == 0:
        return (), (), z.reshape(0, z.shape[1] if z.ndim == 2 else 0)
    if order == "mean":
        key = nanmean(z, axis=1)
        key = np.where(np.isnan(key), -1.0, key)  # unknown first: it needs looking at
        idx = np.lexsort((np.arange(n), key))
    else:
        idx = np.arange(n)
    per = max(1, math.ceil(n / max_rows))
    labels, members, rows = [], [], []
    for start in range(0, n, per):
        sel = idx[start:start + per]
        group = tuple(names[i] for i in sel)
        members.append(group)
        labels.append(group[0] if len(group) == 1 else f"{group[0]} +{len(group) - 1}")
        if len(sel) == 1:
            rows.append(z[sel[0]])
        else:
            rows.append(nanmean(z[sel], axis=0))
    return tuple(labels), tuple(members), np.vstack(rows)


def build_network(leaf_idx: np.ndarray, leaves: list[str], valid: np.ndarray, tx: np.ndarray, wait: np.ndarray,
                  port_of: Callable[[int, int], Port], up: np.ndarray | None = None,
                  recent: np.ndarray | None = None, limit: int = 40) -> Network:
    """Per-switch sums and the ports worth a look from node x port arrays (NaN = unknown).
    `leaf_idx[i]` is node i's switch in `leaves` (-1: not known); `port_of(i, k)` builds port k of node i."""
    names = list(leaves) + ["unknown switch"]
    idx = np.where(leaf_idx < 0, len(leaves), leaf_idx)
    per_port = np.repeat(idx, valid.shape[1]).reshape(valid.shape)[valid]
    m = len(names)

    def summed(a):
        if a is None:
            return [None] * m
        v = a[valid].astype(np.float64)
        known = np.bincount(per_port, weights=np.isfinite(v), minlength=m)
        tot = np.bincount(per_port, weights=np.nan_to_num(v), minlength=m)
        return [float(t) if k else None for t, k in zip(tot, known)]

    nodes = np.bincount(idx, minlength=m)
    ports = np.bincount(per_port, minlength=m)
    down = None if up is None else np.bincount(per_port, weights=~up[valid], minlength=m)
    txs, waits, errs = summed(tx), summed(wait), summed(recent)
    switches = tuple(SwitchStat(names[k], int(nodes[k]), int(ports[k]), None if down is None else int(down[k]),
                                txs[k], waits[k], errs[k]) for k in range(m) if nodes[k])
    # the worst ports: most congested first, then any down or with new errors
    score = np.where(valid, np.nan_to_num(wait.astype(np.float64), nan=-1.0), -np.inf).ravel()
    pick = list(np.argsort(-score, kind="stable")[:limit])
    for flag in ((None if up is None else valid & ~up), (None if recent is None else valid & (np.nan_to_num(recent) > 0))):
        if flag is not None:
            pick += list(np.flatnonzero(flag.ravel())[:limit])
    seen, out = set(), []
    r = valid.shape[1]
    for f in pick:
        if f not in seen and score[f] > -np.inf:
            seen.add(f)
            out.append(port_of(int(f) // r, int(f) % r))
    return Network(switches, tuple(out), int(valid.sum()))
