"""Offline fitting of the default workload model from the Microsoft ITP 2021 GPU trace.

Run once by hand (not at import, not in tests):

    python -m dashboard.analysis.sim.fit ../shared/traces/microsoft-itp-2021-raw-traces.tar.gz

It prints the figures that dashboard/analysis/sim/fitted.py keeps; the trace itself never enters
the project. Method:
- size: the empirical share of jobs per GPU count over all 10 clusters (69,351 jobs); counts that
  are not a power of two up to 64 do not occur in ITP.
- duration: per size class, a log-normal by maximum likelihood (mean and standard deviation of
  ln(duration)), durations below 60 s clipped to 60 s first (a job that short is a failed launch,
  and the simulator's resolution is 15 s).
- arrivals: inter-arrival gaps within each cluster. The share of zero gaps (jobs submitted in the
  same second: sweeps, array-like batches) is kept; the positive gaps, normalised by that cluster's
  mean positive gap (so that clusters of different sizes pool), get a log-normal by maximum
  likelihood (a gamma by moments fits badly: shape 0.026, the tail is that heavy). The absolute
  rate is not kept: ITP does not say how many GPUs each cluster had, so the simulator sets the
  rate for a target load.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import tarfile

SIZES = (1, 2, 4, 8, 16, 32, 64)
MIN_DURATION = 60.0


def read_itp(path: str) -> dict[str, list[tuple[float, float, int]]]:
    """cluster name -> [(submission_time, duration, num_gpu)] from the ITP tar.gz."""
    out: dict[str, list[tuple[float, float, int]]] = {}
    with tarfile.open(path) as tf:
        for member in tf.getmembers():
            if not member.name.endswith(".csv"):
                continue
            fh = tf.extractfile(member)
            if fh is None:
                continue
            rows = []
            for row in csv.DictReader(io.TextIOWrapper(fh, encoding="utf-8")):
                try:
                    rows.append((float(row["submission_time"]), float(row["duration"]), int(row["num_gpu"])))
                except (KeyError, ValueError):
                    continue
            out[member.name.rsplit("/", 1)[-1].removesuffix(".csv")] = rows
    return out


def fit(clusters: dict[str, list[tuple[float, float, int]]]) -> dict:
    jobs = [j for rows in clusters.values() for j in rows]
    n = len(jobs)
    share = {g: sum(1 for j in jobs if j[2] == g) / n for g in SIZES}
    lognormal = {}
    for g in SIZES:
        logs = [math.log(max(MIN_DURATION, j[1])) for j in jobs if j[2] == g]
        mu = sum(logs) / len(logs)
        sigma = math.sqrt(sum((x - mu) ** 2 for x in logs) / len(logs))
        lognormal[g] = (round(mu, 3), round(sigma, 3), len(logs))
    gaps: list[float] = []
    zero = total = 0
    for rows in clusters.values():
        times = sorted(r[0] for r in rows)
        diffs = [b - a for a, b in zip(times, times[1:])]
        total += len(diffs)
        zero += sum(1 for d in diffs if d <= 0)
        pos = [d for d in diffs if d > 0]
        if pos:
            mean = sum(pos) / len(pos)
            gaps.extend(d / mean for d in pos)
    logs = [math.log(g) for g in gaps]
    gmu = sum(logs) / len(logs)
    gsigma = math.sqrt(sum((x - gmu) ** 2 for x in logs) / len(logs))
    gpu_seconds = sum(j[2] * max(MIN_DURATION, j[1]) for j in jobs)
    return {"jobs": n, "share": share, "lognormal": lognormal, "zero_gap_share": round(zero / total, 4),
            "gap_lognormal": (round(gmu, 3), round(gsigma, 3)),
            "mean_gpu_seconds_per_job": round(gpu_seconds / n, 1)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    res = fit(read_itp(argv[0]))
    print(f"jobs: {res['jobs']}")
    print("SIZE_SHARE = {" + ", ".join(f"{g}: {p:.5f}" for g, p in res["share"].items()) + "}")
    print("DURATION_LOGNORMAL = {")
    for g, (mu, sigma, count) in res["lognormal"].items():
        print(f"    {g}: ({mu}, {sigma}),  # {count} jobs")
    print("}")
    print(f"BATCH_SHARE = {res['zero_gap_share']}")
    print(f"GAP_LOGNORMAL = {res['gap_lognormal']}")
    print(f"mean GPU-seconds per job: {res['mean_gpu_seconds_per_job']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
