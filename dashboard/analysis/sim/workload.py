"""Where the simulated jobs come from: the fitted ITP model (default) or a real trace replayed.

`model_arrivals` draws jobs from the figures in fitted.py; `read_trace` reads a Microsoft ITP
tar.gz (all clusters merged, or one with `FILE#cluster04`), an ITP cluster CSV, or the Philly CSV
(`timestamp,duration,num_gpus,...`, sorted here because the file is not). `trace_arrivals` replays
a trace with its submit times stretched or squeezed so that the offered load (GPU-seconds asked per
second) is `load` times the simulated cluster's GPUs; jobs larger than the cluster are dropped.
Pure apart from reading the one trace file; every random draw comes from the caller's generator.
"""

from __future__ import annotations

import csv
import io
import math
import tarfile
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator

import numpy as np

from . import fitted

MIN_DURATION = 60.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    submit: float  # seconds after the workload's start
    duration: float  # how long it would run if nothing killed it
    gpus: int


def _capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X log-normal(mu, sigma): jobs are killed at the partition's time limit."""
    phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    lc = math.log(cap)
    return math.exp(mu + sigma * sigma / 2) * phi((lc - mu - sigma * sigma) / sigma) + cap * (1 - phi((lc - mu) / sigma))


def model_arrivals(rng: np.random.Generator, capacity_gpus: int, load: float,
                   max_duration: float = 3 * 86400) -> Iterator[JobSpec]:
    """An endless stream of jobs from the fitted model, at a rate that offers `load` x capacity."""
    sizes = np.array([g for g in fitted.SIZE_SHARE if g <= capacity_gpus])
    p = np.array([fitted.SIZE_SHARE[g] for g in sizes])
    p /= p.sum()
    mean_gpu_s = float(sum(pi * g * _capped_mean(*fitted.DURATION_LOGNORMAL[g], max_duration)
                           for g, pi in zip(sizes, p)))
    rate = load * capacity_gpus / mean_gpu_s  # jobs per second
    mu, sigma = fitted.GAP_LOGNORMAL
    unit_mean = math.exp(mu + sigma * sigma / 2)  # mean of the normalised positive gap
    mean_pos_gap = (1 - fitted.BATCH_SHARE) / rate
    t = 0.0
    while True:
        g = int(rng.choice(sizes, p=p))
        dmu, dsig = fitted.DURATION_LOGNORMAL[g]
        yield JobSpec(t, max(MIN_DURATION, float(rng.lognormal(dmu, dsig))), g)
        if rng.random() >= fitted.BATCH_SHARE:
            # cap the heavy tail at 50 mean gaps, so a small cluster is never idle for days
            t += mean_pos_gap * min(50.0, float(rng.lognormal(mu, sigma)) / unit_mean)


def model_batch(rng: np.random.Generator, capacity_gpus: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` (GPUs, duration) draws from the fitted model at once, without arrival times."""
    sizes = np.array([g for g in fitted.SIZE_SHARE if g <= capacity_gpus])
    p = np.array([fitted.SIZE_SHARE[g] for g in sizes])
    gpus = rng.choice(sizes, size=count, p=p / p.sum())
    mu = np.array([fitted.DURATION_LOGNORMAL[g][0] for g in gpus])
    sigma = np.array([fitted.DURATION_LOGNORMAL[g][1] for g in gpus])
    return gpus, np.maximum(MIN_DURATION, rng.lognormal(mu, sigma))


def read_trace(path: str) -> list[JobSpec]:
    """Jobs of an ITP tar.gz/CSV or Philly CSV, sorted by submit time, times from the first submit."""
    path, _, only = path.partition("#")
    rows: list[tuple[float, float, int]] = []
    if path.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path) as tf:
                for m in tf.getmembers():
                    name = m.name.rsplit("/", 1)[-1]
                    if not name.endswith(".csv") or (only and name.removesuffix(".csv") != only):
                        continue
                    fh = tf.extractfile(m)
                    if fh is not None:
                        rows += parse_rows(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"))
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise ValueError(f"cannot read trace archive {path}: {exc}") from exc
    else:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            rows = parse_rows(fh)
    if not rows:
        raise ValueError(f"no jobs read from {path}{'#' + only if only else ''}")
    rows.sort()
    t0 = rows[0][0]
    return [JobSpec(s - t0, max(MIN_DURATION, d), g) for s, d, g in rows]


def parse_rows(fh) -> list[tuple[float, float, int]]:
    """ITP (`submission_time,duration,num_gpu`) or Philly (`timestamp,duration,num_gpus`) rows."""
    out = []
    reader = csv.DictReader(fh)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error:  # a NUL byte or a broken quote: skip that line, keep reading
            continue
        try:
            if "submission_time" in row:  # ITP
                submit, gpus = float(row["submission_time"]), int(row["num_gpu"])
            else:  # Philly: "2017-10-09 07:01:55", no zone given (taken as UTC)
                submit = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
                gpus = int(float(row["num_gpus"]))
            duration = float(row["duration"])
        except (KeyError, ValueError, TypeError, OverflowError):
            continue  # a malformed row costs only itself
        if gpus >= 1 and duration > 0 and math.isfinite(duration) and math.isfinite(submit):
            out.append((submit, duration, gpus))
    return out


def trace_arrivals(jobs: list[JobSpec], capacity_gpus: int, load: float) -> Iterator[JobSpec]:
    """Replay `jobs` (sorted), times scaled so the trace offers `load` x capacity; repeats forever."""
    fit = [j for j in jobs if j.gpus <= capacity_gpus]
    if not fit:
        raise ValueError("no job of the trace fits the simulated cluster")
    span = max(1.0, fit[-1].submit - fit[0].submit)
    offered = sum(j.gpus * j.duration for j in fit) / span
    scale = offered / (load * capacity_gpus)
    offset = 0.0
    while True:
        for j in fit:
            yield JobSpec(offset + (j.submit - fit[0].submit) * scale, j.duration, j.gpus)
        offset += span * scale + 60.0
