"""`gangwatch capture`: write a bundle (metrics.om + squeue.json [+ sinfo.json, bundle.json]) from a
live Prometheus and Slurm, for post-mortems and for replaying a diagnosis elsewhere.

    gangwatch capture --prometheus URL --out DIR [--span 3600] [--step 15] [--snapshot URL|FILE]

Metrics: every series of every metric the diagnosis maps (dashboard/sources/schema.py, any
schema), fetched raw (no aggregation) with range queries of one `__name__` regex per signal level
and written as OpenMetrics with timestamps in seconds, which `promtool tsdb create-blocks-from
openmetrics` loads. Jobs: `squeue --json` run locally (its output kept verbatim), or from
--snapshot (a slurm-exporter `/api/v1/snapshot` URL or file, or a `squeue --json` file).
`sinfo --json` is added when the local command works. `--timeout` bounds the whole capture (every
query and command shares it). Failure modes: a failed query or command is reported on stderr and
in bundle.json's "notes", and the bundle is still written with what was read; but when no query
succeeded (Prometheus down or unreachable) or none returned a sample, nothing is written and the
exit status is 1; an --out that cannot be created or written exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import httpx

from collectors import fetch
from collectors.fetch import Deadline
from dashboard import http_auth
from dashboard.sources.build import WANTED
from dashboard.sources.exposition import Sample
from dashboard.sources.schema import FALLBACK_MARKERS, MAPPINGS


def _queries(per_query: int = 12) -> list[str]:
    """Raw selectors for every mapped metric and fallback marker, each name in exactly one query."""
    names = sorted({m.metric for m in MAPPINGS} | {m.metric for m in FALLBACK_MARKERS.values()})
    return [f'{{__name__=~"{"|".join(names[i:i + per_query])}"}}' for i in range(0, len(names), per_query)]


def fetch_samples(url: str, start: float, end: float, step: float, timeout: float, notes: list[str],
                  client: httpx.Client | None = None, deadline: Deadline | None = None,
                  max_bytes: int = fetch.PROMETHEUS_MAX_BYTES, headers: dict | None = None) -> tuple[list[Sample], int]:
    """-> (samples, how many queries succeeded); every query within what is left of `deadline`."""
    deadline = deadline or Deadline(timeout)
    out: list[Sample] = []
    ok = 0
    queries = _queries() + ['{__name__=~"' + "|".join(sorted(n for n in WANTED if n.endswith("_info"))) + '"}']
    for q in queries:
        try:
            r = fetch.get(url.rstrip("/") + "/api/v1/query_range", timeout, client=client, deadline=deadline,
                          max_bytes=max_bytes, headers=headers,
                          params={"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
            r.raise_for_status()
            doc = r.json()
            if not isinstance(doc, dict) or doc.get("status") != "success":
                raise RuntimeError((doc.get("error") if isinstance(doc, dict) else None) or "query failed")
            result = doc.get("data") or {}
            result = (result.get("result") if isinstance(result, dict) else None) or []
            if not isinstance(result, list):
                raise ValueError("the answer's result is not a list of series")
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            notes.append(f"query {q[:60]}...: {type(exc).__name__}: {exc}")
            continue
        ok += 1
        for series in result:
            out.extend(_series_samples(series))
    return out, ok


def _series_samples(series) -> list[Sample]:
    """One answered series' samples; none from a series of another shape, and no point that is
    not [time, value] (an engine's odd answer is skipped, never a crash)."""
    if not isinstance(series, dict) or not isinstance(series.get("metric") or {}, dict):
        return []
    labels = dict(series.get("metric") or {})
    name = labels.pop("__name__", "")
    values = series.get("values") or []
    if not name or not isinstance(values, list) or not all(isinstance(v, str) for v in labels.values()):
        return []
    out = []
    for point in values:
        try:
            t, v = point
            out.append(Sample(name, labels, float(v), float(t)))
        except (TypeError, ValueError):
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gangwatch capture", description=__doc__.split("\n")[0])
    ap.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    ap.add_argument("--prometheus", metavar="URL", required=True)
    http_auth.add_engine_arguments(ap)
    ap.add_argument("--out", metavar="DIR", required=True, help="bundle directory to write (created)")
    ap.add_argument("--span", type=float, default=3600.0)
    ap.add_argument("--step", type=float, default=15.0)
    ap.add_argument("--at", type=float, help="end of the window, unix s (default now)")
    ap.add_argument("--snapshot", metavar="URL|FILE", help="jobs: slurm-exporter snapshot URL/file or squeue --json file")
    ap.add_argument("--cluster", default="")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole capture (default %(default)s)")
    ap.add_argument("--max-query-mb", type=float, default=1024.0,
                    help="largest answer one query may return, in MiB (raw series: default %(default)s)")
    args = ap.parse_args(argv)
    try:
        headers = http_auth.engine_headers(args)
    except ValueError as exc:
        print(f"gangwatch capture: {exc}", file=sys.stderr)
        return 2
    from collectors.runner import CommandRunner
    from dashboard.diagnose_cli import jobs_from
    from dashboard.sources.bundle import openmetrics, squeue_json, write_bundle

    end = args.at if args.at is not None else time.time()
    end = math.floor(end / args.step) * args.step
    start = end - args.step * math.floor(args.span / args.step)
    notes: list[str] = []
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        print(f"gangwatch capture: cannot create {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    deadline = Deadline.for_command(args.timeout)
    samples, ok = fetch_samples(args.prometheus, start, end, args.step, args.timeout, notes, deadline=deadline,
                                max_bytes=int(args.max_query_mb * 1024 * 1024), headers=headers)
    if not samples:
        for n in notes[:3]:
            print(f"gangwatch capture: {n}", file=sys.stderr)
        why = "no query succeeded" if not ok else "the window holds no sample of any metric the diagnosis reads"
        print(f"gangwatch capture: {why} at {args.prometheus}; no bundle written", file=sys.stderr)
        return 1
    runner = CommandRunner()
    if args.snapshot:
        jobs, jn = jobs_from(args.snapshot, args.timeout, deadline)
        notes += jn
        squeue = squeue_json(jobs, end)
    else:
        res = runner.run(["squeue", "--json"], timeout=max(0.1, deadline.left()))
        if res.ok:
            squeue = json.loads(res.stdout)
        else:
            notes.append(f"squeue --json failed: {res.error or res.stderr.strip()[:200] or 'timed out'}")
            squeue = squeue_json([], end)
    sinfo = None
    res = runner.run(["sinfo", "--json"], timeout=max(0.1, deadline.left()))
    if res.ok:
        try:
            sinfo = json.loads(res.stdout)
        except ValueError:
            notes.append("sinfo --json: not JSON")
    try:
        write_bundle(args.out, openmetrics(samples), squeue, start, end, args.cluster, sinfo)
        if notes:
            with open(f"{args.out}/bundle.json", encoding="utf-8") as f:
                meta = json.load(f)
            meta["notes"] = notes
            with open(f"{args.out}/bundle.json", "w", encoding="utf-8") as f:
                json.dump(meta, f)
    except OSError as exc:
        print(f"gangwatch capture: cannot write the bundle to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
        for n in notes:
            print(f"gangwatch capture: {n}", file=sys.stderr)
    print(f"wrote {args.out}: {len(samples)} samples, {len(squeue.get('jobs', []))} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
