"""`gangwatch diagnose`: one-shot verdicts for running jobs, from Prometheus or a bundle.

    gangwatch diagnose --bundle DIR [--format table|json]
    gangwatch diagnose --prometheus URL [--snapshot URL|FILE] [--topology FILE] [--format json]

Jobs: from the bundle's squeue.json; with --prometheus, from --snapshot (a slurm-exporter's
`/api/v1/snapshot` URL, a snapshot JSON file or a `squeue --json` file), else from the local
`squeue --json`. Exit status: 0 when the diagnosis ran on its inputs (whatever it found); 1 when
it ran but an input was missing or broken (squeue.json missing, truncated or not JSON; Prometheus
answering none of the queries; the jobs unreadable): the result is printed with a note saying
which; 2 for bad arguments or a --bundle that is not a directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time

from collectors.slurm.model import Job
from dashboard import http_auth
from dashboard.units import fmt_value

log = logging.getLogger("gangwatch.diagnose")


def build_parser(prog: str = "gangwatch diagnose", description: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=description or __doc__.split("\n")[0])
    ap.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    ap.add_argument("--prometheus", metavar="URL", help="Prometheus (or compatible) base URL")
    http_auth.add_engine_arguments(ap)
    http_auth.add_concurrency_argument(ap)
    ap.add_argument("--bundle", metavar="DIR", help="a bundle directory (metrics.om + squeue.json)")
    ap.add_argument("--snapshot", metavar="URL|FILE",
                    help="jobs for --prometheus: slurm-exporter /api/v1/snapshot URL, snapshot file or squeue --json file")
    ap.add_argument("--topology", metavar="FILE", help="Slurm topology.conf, for leaf-switch culprits and placement")
    ap.add_argument("--span", type=float, default=3600.0, help="seconds of history to judge (default 3600)")
    ap.add_argument("--step", type=float, default=15.0, help="grid step in seconds (default 15)")
    ap.add_argument("--at", type=float, help="unix time the window ends (default: now, or the bundle's end)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds for all of the run's requests together (Prometheus queries, the snapshot, squeue)")
    ap.add_argument("--host-label", action="append", default=None,
                    help="label naming the node (repeatable, in order of preference; default: node, hostname, "
                         "Hostname, nodename, exported_instance, instance)")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    return ap


def _matcher(args):
    from dashboard.sources.schema import HOST_LABELS, NodeMatcher

    return NodeMatcher(tuple(args.host_label) if args.host_label else HOST_LABELS)


def jobs_from(spec: str | None, timeout: float, deadline=None) -> tuple[list[Job], list[str]]:
    """Jobs from a snapshot URL/file, a squeue --json file, or the local squeue; a URL or squeue
    within `timeout` or what is left of `deadline` (collectors.fetch.Deadline)."""
    from collectors.slurm.model import Snapshot
    from dashboard.sources.bundle import read_jobs

    notes: list[str] = []
    if spec is None:
        from collectors.runner import CommandRunner

        left = min(timeout, deadline.left()) if deadline else timeout
        res = CommandRunner().run(["squeue", "--json"], timeout=left)
        if not res.ok:
            notes.append(f"squeue --json failed: {res.error or res.stderr.strip()[:200] or 'timed out'}")
            return [], notes
        return read_jobs(res.stdout, notes), notes
    if spec.startswith(("http://", "https://")):
        import httpx

        from collectors import fetch

        try:
            r = fetch.get(spec, timeout, deadline=deadline)
            r.raise_for_status()
            text = r.text
        except httpx.HTTPError as exc:
            notes.append(f"snapshot {spec}: {type(exc).__name__}: {exc}")
            return [], notes
    else:
        try:
            with open(spec, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            notes.append(f"snapshot {spec}: {exc}")
            return [], notes
    try:
        snap = Snapshot.from_json(text)
        if snap.jobs or '"schema_version"' in text:
            return list(snap.jobs), notes
    except Exception:  # not a gangwatch snapshot: try squeue --json
        pass
    return read_jobs(text, notes), notes


class InputError(Exception):
    """An input that cannot be used at all (exit 2)."""


def run(args, broken: list[str] | None = None) -> tuple[object, list[str]]:
    """-> (Diagnosis, notes); inputs that were missing or broken are added to `broken` too;
    raises InputError when there is nothing to diagnose from."""
    broken = [] if broken is None else broken
    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.topology import parse_topology_conf
    from dashboard.analysis.window import Window

    leaf_of: dict[str, str] = {}
    notes: list[str] = []
    if args.topology:
        try:
            with open(args.topology, encoding="utf-8") as f:
                leaf_of, tn = parse_topology_conf(f.read())
            notes += tn
        except OSError as exc:
            notes.append(f"topology {args.topology}: {exc}")
    if args.bundle:
        from dashboard.sources.bundle import load_bundle

        if not os.path.isdir(args.bundle):
            raise InputError(f"bundle {args.bundle}: not a directory")
        b = load_bundle(args.bundle, args.step, args.span, _matcher(args))
        win, jobs = b.window, list(b.jobs)
        notes += [n for n in b.notes if n not in win.notes]  # the jobs' notes come after the window's
        # no job and a complaint about squeue.json: missing, truncated, or JSON that is not squeue's
        broken += [n for n in b.notes if n.startswith("metrics.om missing")
                   or (not jobs and n.startswith("squeue.json"))]
    else:
        from dashboard.sources.prometheus import PrometheusSource

        from collectors.fetch import Deadline

        deadline = Deadline.for_command(args.timeout)  # --timeout bounds the whole run, not each query
        try:
            headers = http_auth.engine_headers(args)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        src = PrometheusSource(args.prometheus, timeout=args.timeout, matcher=_matcher(args), headers=headers,
                               concurrency=args.prometheus_concurrency)
        win = src.window(args.at if args.at is not None else time.time(), args.span, args.step, deadline)
        notes.append(f"Prometheus: {src.queries_last_cycle} queries")
        if src.queries_last_cycle and src.failed_last_cycle == src.queries_last_cycle:
            broken.append(f"Prometheus {args.prometheus} answered none of the {src.queries_last_cycle} queries")
        jobs, jn = jobs_from(args.snapshot, args.timeout, deadline)
        notes += jn
        if not jobs and jn:
            broken += jn
    if leaf_of:
        win = Window(**{**win.__dict__, "leaf_of": {**win.leaf_of, **leaf_of}})
    return diagnose(win, jobs), notes


def _ts(t) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) if t is not None and math.isfinite(t) else "-"


def render_table(diag, notes: list[str]) -> str:
    rows = [("JOBID", "NODES", "GPUS", "STATE", "CONF", "SINCE(UTC)", "LOST GPU-H", "CULPRIT", "WHY")]
    for v in diag.verdicts:
        why = v.reason
        if not why and v.evidence:
            e = v.evidence[-1]
            why = f"{e.signal}{'@' + e.node if e.node else ''}={fmt_value(e.signal, e.value, '?')} " \
                  f"(baseline {fmt_value(e.signal, e.baseline, '?')}" + \
                  (f", z={e.z:.1f}, p={e.p:.1e}" if e.z is not None and e.p is not None else "") + ")"
        rows.append((v.jobid, str(len(v.nodes)), str(v.gpus), v.state, f"{v.confidence:.2f}", _ts(v.since),
                     "unknown" if v.state == "insufficient_data" else f"{v.gpu_hours_lost:.2f}", v.culprit or "-",
                     why[:90]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    if diag.incidents:
        lines += ["", "INCIDENTS (by GPU-hours lost)"]
        for i in diag.incidents:
            lines.append(f"  {i.gpu_hours_lost:8.2f} GPU-h  {i.cause:<16} {i.culprit_kind or '-':<12} {i.culprit:<30} "
                         f"jobs {', '.join(i.jobs[:10])}{' ...' if len(i.jobs) > 10 else ''}")
    placements = [(v.jobid, p) for v in diag.verdicts for p in v.placement]
    if placements:
        lines += ["", "PLACEMENT"]
        for jid, p in placements:
            lines.append(f"  job {jid}: {p.kind} {p.node} {p.detail}; expected cost: {p.expected_cost}")
    for n in list(diag.notes) + notes + ([diag.cluster_reason] if diag.cluster_reason else []):
        lines.append(f"note: {n}")
    return "\n".join(lines)



def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if bool(args.prometheus) == bool(args.bundle):
        ap.print_usage(sys.stderr)
        print("gangwatch diagnose: give exactly one of --prometheus URL or --bundle DIR", file=sys.stderr)
        return 2
    broken: list[str] = []
    try:
        diag, notes = run(args, broken)
    except InputError as exc:
        print(f"gangwatch diagnose: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc = diag.to_json()
        doc["notes"] = list(doc["notes"]) + notes
        print(json.dumps(doc, indent=1))
    else:
        print(render_table(diag, notes))
    for b in broken:
        print(f"gangwatch diagnose: {b}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
