"""`gangwatch simulate`: replay a Standard Workload Format trace under fcfs, easy or conservative.

Reads an SWF file (plain or gzip), prints average wait, average bounded slowdown (10 s bound),
utilisation, makespan and the skipped/adjusted record counts, and writes `job_id,submit,start,end`
per simulated job to `--out`. Malformed trace lines are reported on stderr with their line numbers
and skipped. Semantics: dashboard/analysis/replay.py's docstring and docs/backfill.md.
Exit status: 0 on success, 2 on bad arguments, an unreadable trace or an --out that cannot be written.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from dashboard.analysis.replay import POLICIES, simulate
from dashboard.analysis.swf import read_swf

MAX_PROBLEMS_SHOWN = 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangwatch simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--swf", required=True, help="SWF trace, plain or gzip")
    p.add_argument("--procs", type=int, default=None,
                   help="machine size in processors (default: the trace header's MaxProcs, else MaxNodes)")
    p.add_argument("--policy", choices=POLICIES, default="easy")
    p.add_argument("--out", default=None, help="write job_id,submit,start,end per job to this CSV file")
    p.add_argument("--limit", type=int, default=None, help="replay only the trace's first N job records")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.limit is not None and args.limit < 0:
        print("gangwatch simulate: --limit must be >= 0", file=sys.stderr)
        return 2
    began = time.perf_counter()
    try:
        trace = read_swf(args.swf, limit=args.limit)
    except OSError as exc:
        print(f"gangwatch simulate: cannot read {args.swf}: {exc}", file=sys.stderr)
        return 2
    for problem in trace.problems[:MAX_PROBLEMS_SHOWN]:
        print(f"{args.swf}:{problem.line}: skipped: {problem.reason}", file=sys.stderr)
    if len(trace.problems) > MAX_PROBLEMS_SHOWN:
        print(f"{args.swf}: ... {len(trace.problems) - MAX_PROBLEMS_SHOWN} more malformed lines skipped",
              file=sys.stderr)
    procs = args.procs or trace.header.max_procs or trace.header.max_nodes
    if not procs or procs < 1:
        print("gangwatch simulate: the trace header has no MaxProcs/MaxNodes; give --procs N", file=sys.stderr)
        return 2
    result = simulate(trace.jobs, procs, args.policy)
    elapsed = time.perf_counter() - began
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(result.starts_csv())
        except OSError as exc:  # a directory, a full disk (/dev/full), no permission
            print(f"gangwatch simulate: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    summary = {"trace": args.swf, **result.to_json(), "malformed_lines": len(trace.problems),
               "elapsed_s": round(elapsed, 3)}
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
