"""`gangwatch backfill`: backfill windows, the top job's reserved start, startable jobs, and why every
pending job waits, as a table like Maui's `showbf` or as JSON (`/api/v1/backfill`'s shape).

Sources (one of): `--slurm-cli` (default when `squeue` is on PATH: runs squeue/sinfo/scontrol/sprio
like the slurm-exporter, plus `squeue --start` for Slurm's own expected starts), `--snapshot FILE`
(the slurm-exporter's `/api/v1/snapshot` JSON; `-` reads stdin), `--slurm-exporter URL` (fetches
`URL/api/v1/snapshot`). `--slurm-what-if` (live only) asks Slurm's planner about each of our what-ifs
with `sbatch --test-only` (which never submits a job). Privileges: a Slurm user's; none for a file.
Slurm's scheduling parameters: live, `scontrol show config` and `sacctmgr show qos` are read too; for a
file, `--slurm-config FILE` (saved `scontrol show config` output) and `--qos FILE` (`sacctmgr -P show
qos`). With them the plan follows sched/backfill (a reservation for every job a cycle tests, within
bf_window and bf_max_job_*), QOS limits and job defaults, and says where a parameter changes an
answer; without them it is plain EASY (one reservation per partition).
Every estimate is labelled gangwatch's or Slurm's.
Exit status: 0 on success, 2 on bad arguments, an unreadable or malformed snapshot, or an
unreachable Slurm/exporter (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import shutil
import sys
import time
import types
import typing
from datetime import datetime, timezone

from collectors.slurm.model import Snapshot
from collectors.slurm.parse_common import text_time
from dashboard.analysis.planner_model import format_duration
from dashboard.analysis.snapshot_to_planner import snapshot_to_planner, usable_time
from dashboard.backfill_api import backfill_json

PROG = "gangwatch backfill"
WHAT_IF_MAX = 10  # sbatch --test-only calls per run: each is a round trip to slurmctld
_TEST_ONLY = re.compile(r"Job (\S+) to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+)")


class InputError(Exception):
    """A problem with the input the user gave: reported in one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--slurm-cli", action="store_true", help="ask the local Slurm (default when squeue exists)")
    src.add_argument("--snapshot", metavar="FILE", help="a /api/v1/snapshot JSON file ('-': stdin)")
    src.add_argument("--slurm-exporter", metavar="URL", help="a gangwatch slurm-exporter, e.g. http://head:9811")
    p.add_argument("--slurm-config", metavar="FILE",
                   help="`scontrol show config` output to plan with Slurm's parameters (live: read from Slurm)")
    p.add_argument("--qos", metavar="FILE", help="`sacctmgr -P show qos` output: QOS limits (live: read from Slurm)")
    p.add_argument("--easy", action="store_true", help="plain EASY: ignore Slurm's scheduler parameters and QOS")
    p.add_argument("--partition", action="append", default=[], help="show only this partition (repeatable)")
    p.add_argument("--now", type=float, default=None,
                   help="plan as of this unix time (default: now for live sources, the snapshot's time for a file)")
    p.add_argument("--slurm-what-if", action="store_true",
                   help="check each what-if with `sbatch --test-only` (never submits; --slurm-cli only)")
    p.add_argument("--timeout", type=float, default=15.0,
                   help="seconds one poll of Slurm may take (its commands run concurrently); with "
                        "--slurm-exporter, for the whole run up to the snapshot")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


# ------------------------------------------------------------------------------------------ inputs

def parse_snapshot(text: str | bytes, origin: str) -> Snapshot:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{origin}: not JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"{origin}: not a snapshot (JSON nested too deeply)") from None
    if not isinstance(doc, dict) or "taken_at" not in doc or not isinstance(doc.get("jobs", []), list) \
            or not isinstance(doc.get("nodes", []), list):
        raise InputError(f"{origin}: not a gangwatch snapshot (expected the /api/v1/snapshot JSON object "
                         "with taken_at, jobs and nodes)")
    try:
        snap = Snapshot.from_dict(doc)
        problem = type_problem(snap, "snapshot")
        if problem is None:
            snapshot_to_planner(snap)  # e.g. a non-finite taken_at
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        raise InputError(f"{origin}: malformed snapshot ({problem})")
    return snap


def _type_ok(value, tp) -> str | None:
    """None when `value` matches the annotation `tp`, else a description of the mismatch."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        return _type_ok(value, next(a for a in typing.get_args(tp) if a is not type(None)))
    if origin is tuple:
        if not isinstance(value, tuple):
            return f"a list expected, got {type(value).__name__}"
        inner = (typing.get_args(tp) or (typing.Any,))[0]
        for v in value:
            bad = _type_ok(v, inner)
            if bad:
                return bad
        return None
    if dataclasses.is_dataclass(tp):
        return type_problem(value, tp.__name__) if isinstance(value, tp) else f"an object expected for {tp.__name__}"
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp in (str, bool):
        ok = isinstance(value, tp)
    else:
        ok = True
    return None if ok else f"{tp.__name__} expected, got {type(value).__name__} {value!r:.40}"


def type_problem(obj, where: str) -> str | None:
    """The first field of a snapshot (recursively) whose JSON value has the wrong type, or None:
    a hand-edited or foreign file must fail here, in one line, not deep inside the planner."""
    hints = typing.get_type_hints(type(obj), vars(sys.modules[type(obj).__module__]))
    for f in dataclasses.fields(obj):
        bad = _type_ok(getattr(obj, f.name), hints[f.name])
        if bad:
            nested = "." in bad.split(":", 1)[0]  # already names the record and field it is in
            return bad if nested else f"{where}.{f.name}: {bad}"
    return None


def read_snapshot_file(path: str) -> Snapshot:
    try:
        text = sys.stdin.read() if path == "-" else open(path, "rb").read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_snapshot(text, path)


def fetch_exporter(url: str, timeout: float) -> Snapshot:
    import httpx

    from collectors import fetch

    if not url.rstrip("/").endswith("/api/v1/snapshot"):
        url = url.rstrip("/") + "/api/v1/snapshot"
    try:
        resp = fetch.get(url, timeout, deadline=fetch.Deadline.for_command(timeout))
    except httpx.HTTPError as exc:
        raise InputError(f"cannot reach {url}: {exc}") from None
    if resp.status_code != 200:
        raise InputError(f"{url} answered HTTP {resp.status_code}: {resp.text.strip()[:200]}")
    return parse_snapshot(resp.content, url)


def poll_slurm(runner, timeout: float) -> Snapshot:
    from collectors.slurm.sources import CliSource, Poller

    poller = Poller(CliSource(runner=runner, timeout=timeout))
    if not poller.poll_once() or poller.current() is None:
        # Slurm's own errors first: with the controller down squeue --json "succeeds" with an errors list
        failed = poller.health()["errors"] + [f"{name}: {st.error}" for name, st in poller.statuses.items() if not st.ok]
        raise InputError("cannot read Slurm (is slurmctld reachable?): " + ("; ".join(dict.fromkeys(failed))[:1000]
                                                                          or "the poll failed"))
    return poller.current()


def parse_squeue_start(text: str) -> dict[str, float]:
    """`squeue -h -t PD --start -o %i|%S` -> {job id: expected start}; N/A and Unknown are left out."""
    out = {}
    for line in text.splitlines():
        jid, sep, start = line.strip().partition("|")
        t = text_time(start.strip()) if sep else None
        if jid and t is not None:
            out[jid] = t
    return out


def slurm_starts(runner, timeout: float) -> dict[str, float] | None:
    res = runner.run(["squeue", "-h", "-t", "PD", "--start", "-o", "%i|%S"], timeout=timeout)
    return parse_squeue_start(res.stdout) if res.ok else None


def read_scheduling_files(config_path: str | None, qos_path: str | None):
    from collectors.slurm.sched_config import parse_sacctmgr_qos, parse_scontrol_config

    def read(path):
        try:
            return open(path, encoding="utf-8", errors="replace").read()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None

    cfg = None
    if config_path:
        text = read(config_path)
        if "SchedulerType" not in text:
            raise InputError(f"{config_path}: not `scontrol show config` output (no SchedulerType line)")
        cfg = parse_scontrol_config(text)
    return cfg, (parse_sacctmgr_qos(read(qos_path)) if qos_path else [])


def sbatch_test_only_argv(job, partition: str, time_limit_s: int) -> list[str]:
    """`sbatch --test-only` for a pending job's request with another time limit (never submits)."""
    argv = ["sbatch", "--test-only", "-p", partition, "-N", str(job.min_nodes),
            f"--time={max(1, time_limit_s // 60)}", "--ntasks-per-node=1", f"--cpus-per-task={job.cpus_per_node or 1}"]
    gtype = f"{job.gpu_type}:" if job.gpu_type else ""
    if job.gpus_per_node:
        argv.append(f"--gres=gpu:{gtype}{job.gpus_per_node}")
    elif job.gpus_per_job:
        argv.append(f"--gpus={gtype}{job.gpus_per_job}")
    if job.mem_per_node_mb:
        argv.append(f"--mem={job.mem_per_node_mb}M")
    if job.exclusive:
        argv.append("--exclusive")
    if job.features:
        argv.append("--constraint=" + "&".join(job.features))
    if job.reservation:
        argv.append(f"--reservation={job.reservation}")
    return argv + ["--wrap", "true"]


def parse_test_only(stderr: str) -> dict | None:
    m = _TEST_ONLY.search(stderr or "")
    if not m:
        return None
    return {"time": text_time(m.group(2)), "nodes": m.group(4), "partition": m.group(5), "source": "slurm"}


def add_slurm_what_ifs(doc: dict, pending: dict, runner, timeout: float) -> None:
    asked = 0
    for part in doc["partitions"]:
        for why in part["why"]:
            wi = why.get("what_if")
            if not wi or asked >= WHAT_IF_MAX or why["job_id"] not in pending:
                continue
            asked += 1
            res = runner.run(sbatch_test_only_argv(pending[why["job_id"]], part["partition"], wi["time_limit_s"]),
                             timeout=timeout)
            wi["slurm"] = parse_test_only(res.stderr) or {
                "error": (res.stderr or res.error or "no answer").strip().splitlines()[-1][:300] if (
                    res.stderr or res.error) else "no answer", "source": "slurm"}


# ------------------------------------------------------------------------------------------ output

def _ts(t) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rel(t, now: float) -> str:
    if t is None:
        return ""
    return "now" if t <= now else f"in {format_duration(t - now)}"


def _table(rows: list[list[str]], indent: str = "    ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(value):
    """`value` with every control character in its strings (ESC, BEL, newlines from Slurm reasons
    or job names) shown as "?": a table on a terminal must not be re-coloured, rung or re-lined by
    the data it prints. One character for one, so the columns stay aligned."""
    if isinstance(value, str):
        return _CONTROL.sub("?", value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


def render_table(doc: dict) -> str:
    doc = printable(doc)
    now = doc["generated_at"]
    snap = doc.get("snapshot", {})
    cluster = f" of cluster {snap['cluster']}" if snap.get("cluster") else ""
    out = [f"backfill plan{cluster} at {_ts(now)} (policy {doc['policy']}; estimates are gangwatch's unless "
           "marked [slurm])",
           f"snapshot: {snap.get('source') or '?'}, Slurm {snap.get('slurm_version') or '?'}, taken "
           f"{_ts(snap.get('taken_at'))}, age {format_duration(snap.get('age_seconds') or 0)}"
           + (" (STALE: the latest poll failed)" if snap.get("stale") else "")]
    sched = doc.get("scheduler")
    if sched:
        prm = sched["parameters"]
        out.append(f"scheduler: {sched['type']} planned as {sched['policy']}: bf_window "
                   f"{format_duration(prm['bf_window_s'])}, bf_resolution {prm['bf_resolution_s']:.0f} s, "
                   f"bf_max_job_test {prm['bf_max_job_test']}, bf_max_job_part {prm['bf_max_job_part'] or '-'}, "
                   f"bf_max_job_user {prm['bf_max_job_user'] or '-'}, bf_min_prio_reserve "
                   f"{prm['bf_min_prio_reserve'] or '-'}")
        if sched["not_modelled"]:
            out.append("  not modelled by gangwatch: " + ", ".join(sched["not_modelled"]))
    else:
        out.append("scheduler: Slurm's parameters not read; planned as plain EASY (one reservation per partition)")
    for part in doc["partitions"]:
        out.append("")
        exists = "" if part["exists"] else " (NO SUCH PARTITION)"
        out.append(f"partition {part['partition']}{exists}: {part['nodes_usable']} of {part['nodes_total']} nodes usable")
        if part.get("unusable_nodes"):
            out.append("  not usable: " + ", ".join(f"{u['node']} ({u['reason']})" for u in part["unusable_nodes"]))
        top = part["top_job"]
        if top:
            slurm = next((w["slurm_expected_start"]["time"] for w in part["why"] if w["job_id"] == top["job_id"]), None)
            out.append(f"  top job {top['job_id']}: reserved start {_ts(top['shadow_time'])} "
                       f"({_rel(top['shadow_time'], now)}) on {top['node_list']}"
                       + (f"   [slurm: {_ts(slurm)}]" if slurm is not None else ""))
        else:
            out.append("  top job: none")
        if part["windows"]:
            rows = [["NODES", "GPUS/NODE", "CPUS/NODE", "UNTIL", "NODELIST"]]
            rows += [[str(w["nodes"]), str(w["gpus_per_node"]), str(w["cpus"]),
                      "no limit" if w["until"] is None else f"{_ts(w['until'])} ({_rel(w['until'], now)})",
                      w["node_list"]] for w in part["windows"]]
            out.append("  windows (free now):")
            out += _table(rows)
        else:
            out.append("  windows: none free now")
        if part["startable"]:
            rows = [["JOBID", "BY", "NODES", "ENDS"]]
            rows += [[s["job_id"], s["by"], s["node_list"], _ts(s["end"])] for s in part["startable"]]
            out.append("  startable now:")
            out += _table(rows)
        if part["why"]:
            rows = [["JOBID", "RANK", "STATE", "START (gangwatch)", "START [slurm]", "SLURM REASON", "WHY"]]
            for w in part["why"]:
                msg = "; ".join(r["message"] for r in w["reasons"] if r["code"] not in ("expected_start",))
                if w.get("what_if"):
                    msg += f"; what-if: {w['what_if']['message']}"
                    sl = w["what_if"].get("slurm")
                    if sl:
                        msg += (f" [slurm --test-only: {_ts(sl['time'])} on {sl['nodes']}]" if "time" in sl
                                else f" [slurm --test-only: {sl['error']}]")
                rows.append([w["job_id"], "-" if w["rank"] is None else str(w["rank"]), w["state"], _ts(w["expected_start"]["time"]),
                             _ts(w["slurm_expected_start"]["time"]), w["slurm_reason"] or "-", msg])
            out.append("  pending jobs:")
            out += _table(rows)
    return "\n".join(out)


def main(argv: list[str] | None = None, runner=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.now is not None and usable_time(args.now) is None:
        print(f"{PROG}: --now must be a unix time between 1970 and 2100", file=sys.stderr)
        return 2
    live = not (args.snapshot or args.slurm_exporter)
    if live and not args.slurm_cli and shutil.which("squeue") is None:
        print(f"{PROG}: squeue not found; give --snapshot FILE or --slurm-exporter URL", file=sys.stderr)
        return 2
    if args.slurm_what_if and not live:
        print(f"{PROG}: --slurm-what-if needs a live Slurm (--slurm-cli)", file=sys.stderr)
        return 2
    if live and runner is None:
        from collectors.runner import CommandRunner

        runner = CommandRunner()
    starts = None
    try:
        cfg, qos = read_scheduling_files(args.slurm_config, args.qos)
        if args.snapshot:
            snap = read_snapshot_file(args.snapshot)
        elif args.slurm_exporter:
            snap = fetch_exporter(args.slurm_exporter, args.timeout)
        else:
            snap = poll_slurm(runner, args.timeout)
            starts = slurm_starts(runner, args.timeout)  # the poll read Slurm's configuration and QOS too
        if args.easy:
            snap = dataclasses.replace(snap, config=None, qos=())
        elif cfg is not None or qos:
            snap = dataclasses.replace(snap, config=cfg or snap.config, qos=tuple(qos) or snap.qos)
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    now = args.now if args.now is not None else (time.time() if live else snap.taken_at)
    doc = backfill_json(snap, now, starts)
    if args.slurm_what_if:
        pending = {j.job_id: j for j in snapshot_to_planner(snap, now, starts).pending}
        add_slurm_what_ifs(doc, pending, runner, args.timeout)
    if args.partition:
        doc["partitions"] = [p for p in doc["partitions"] if p["partition"] in args.partition]
    if args.format == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(render_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
