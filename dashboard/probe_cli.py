"""`gangwatch probe JOBID`: measure the links between a running job's nodes, pair by pair, through
their agents (`gangwatch agent --probe.enable`), and show each pair's bandwidth and latency against
the link's rated speed; with `--findings URL` (serve's /api/v1/findings) the job's verdict is shown
with the measurements attached as evidence.

The job comes from Slurm (`--slurm-cli`, default when squeue exists), a slurm-exporter
(`--slurm-exporter URL`) or a snapshot file (`--snapshot FILE`). Each node's agent is
`--agent-url` with `{node}` replaced (default `http://{node}:9810`), or `--agent NODE=URL`.
Pairs run in rounds of disjoint pairs, so no node takes part in two probes at once; each probe
lasts `--seconds` (at most 10). Credentials: `--token-file` (the agents' `--probe.token-file`) or
`--basic-auth-user` with `--basic-auth-password-file` (the agents' web config users).
With `--serve URL` serve runs the probe instead, with its own agent settings (`serve
--probe.agent-url`), and keeps the result on the job's verdict in its findings (`POST
URL/api/v1/probe?jobid=`; `--basic-auth-user` then authenticates to serve's web config).
Exit status: 0 when every pair was measured, 1 when some could not be, 2 on bad input (a job that
ended or is unknown, a one-node job, unreadable credentials): one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Mapping

from collectors.slurm.model import Job, Snapshot
from dashboard import http_auth
from dashboard.analysis.findings import Verdict
from dashboard.analysis.linkprobe import PairResult, attach, evidence, rounds

PROG = "gangwatch probe"
TOOLS = {"tcp": "iperf3", "rdma-bw": "ib_write_bw", "rdma-lat": "ib_write_lat"}


class InputError(Exception):
    """A problem with the input the user gave: one line on stderr, exit status 2."""


@dataclass(frozen=True)
class ProbeSettings:
    """How `serve` reaches the agents for the job page's probe button."""

    agent_url: str = ""  # each node's agent, `{node}` replaced; "" = the probe is not configured
    agents: Mapping[str, str] = field(default_factory=dict)  # node -> agent URL, overriding agent_url
    headers: Mapping[str, str] = field(default_factory=dict)  # the agents' credentials
    tool: str = "iperf3"
    seconds: int = 3


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """`serve`'s flags for the job page's probe button."""
    p.add_argument("--probe.agent-url", dest="probe_agent_url", default="",
                   help="each node's agent for the job page's link probe, {node} replaced, e.g. http://{node}:9810 "
                        "(default: no probe button action)")
    p.add_argument("--probe.agent", dest="probe_agent", action="append", default=[], metavar="NODE=URL",
                   help="one node's agent (repeatable)")
    p.add_argument("--probe.tool", dest="probe_tool", choices=tuple(TOOLS), default="tcp", help="probe tool")
    p.add_argument("--probe.seconds", dest="probe_seconds", type=int, default=3, help="seconds per pair (1-10)")
    p.add_argument("--probe.token-file", dest="probe_token_file", help="file holding the agents' bearer token")
    p.add_argument("--probe.basic-auth-user", dest="probe_basic_auth_user", help="user of the agents' web config")
    p.add_argument("--probe.basic-auth-password-file", dest="probe_basic_auth_password_file",
                   help="file holding that user's password")


def serve_settings(args) -> ProbeSettings | None:
    """ProbeSettings from `serve`'s flags (None when no agent is configured); InputError when bad."""
    if not (args.probe_agent_url or args.probe_agent):
        return None
    if not 1 <= args.probe_seconds <= 10:
        raise InputError("--probe.seconds must be from 1 to 10")
    return ProbeSettings(args.probe_agent_url, agent_urls([], "", args.probe_agent) if args.probe_agent else {},
                         auth_headers(args.probe_token_file, args.probe_basic_auth_user,
                                      args.probe_basic_auth_password_file),
                         TOOLS[args.probe_tool], args.probe_seconds)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("jobid", help="the running job whose links to measure")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--slurm-cli", action="store_true", help="ask the local Slurm (default when squeue exists)")
    src.add_argument("--snapshot", metavar="FILE", help="a slurm-exporter /api/v1/snapshot JSON file ('-': stdin)")
    src.add_argument("--slurm-exporter", metavar="URL", help="a gangwatch slurm-exporter, e.g. http://head:9811")
    p.add_argument("--agent-url", default="http://{node}:9810", help="each node's agent, {node} replaced")
    p.add_argument("--agent", action="append", default=[], metavar="NODE=URL", help="one node's agent (repeatable)")
    p.add_argument("--tool", choices=tuple(TOOLS), default="tcp",
                   help="tcp: iperf3; rdma-bw / rdma-lat: perftest's ib_write_bw / ib_write_lat")
    p.add_argument("--seconds", type=int, default=5, help="seconds per pair (1-10)")
    p.add_argument("--token-file", help="file holding the agents' bearer token")
    p.add_argument("--basic-auth-user", help="user of the agents' web config")
    p.add_argument("--basic-auth-password-file", help="file holding that user's password")
    p.add_argument("--serve", metavar="URL", help="let this gangwatch serve run the probe and keep it with the job's "
                                                  "verdict, e.g. http://head:8050 (its --path-prefix included)")
    p.add_argument("--findings", metavar="URL", help="serve's /api/v1/findings, to attach the result to the job's verdict")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to read the job from Slurm")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


# ------------------------------------------------------------------------------------------ pieces


def running_job(snapshot: Snapshot, jobid: str) -> Job:
    """The job to probe, or an InputError that says why not."""
    job = next((j for j in snapshot.jobs if str(j.job_id) == str(jobid)), None)
    if job is None:
        raise InputError(f"job {jobid} is not in Slurm's queue (it ended, or never existed): nothing to probe")
    if job.state != "RUNNING":
        raise InputError(f"job {jobid} is {job.state or 'in an unknown state'}, not running: nothing to probe")
    if len(job.nodes) < 2:
        raise InputError(f"job {jobid} runs on {len(job.nodes)} node(s): no links between nodes to probe")
    return job


def agent_urls(nodes, template: str, overrides: list[str]) -> dict[str, str]:
    """Each node's agent URL (for `nodes`; with none given, just the overrides, checked)."""
    given = {}
    for item in overrides:
        node, sep, url = item.partition("=")
        if not sep or not node or not url.startswith(("http://", "https://")):
            raise InputError(f"--agent {item!r} is not NODE=http(s)://HOST:PORT")
        given[node] = url.rstrip("/")
    if not nodes:
        return given
    return {n: given.get(n) or template.replace("{node}", n).rstrip("/") for n in nodes}


def auth_headers(token_file: str | None, user: str | None, password_file: str | None) -> dict[str, str]:
    try:
        return http_auth.auth_headers(token_file, user, password_file)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _get(url: str, params: dict, headers: dict, timeout: float) -> tuple[int | None, dict, str]:
    """(status, JSON body, error text): status None when the agent could not be reached."""
    import httpx

    from collectors import fetch

    try:
        resp = fetch.get(url, timeout, params=params, headers=headers, max_bytes=1 << 20)
    except httpx.HTTPError as exc:
        return None, {}, f"no agent answering at {url.rsplit('/api/', 1)[0]} ({type(exc).__name__})"
    try:
        doc = resp.json()
    except ValueError:
        doc = {}
    return resp.status_code, doc if isinstance(doc, dict) else {}, resp.text.strip()[:200]


def _why(status: int | None, doc: dict, text: str, node: str) -> str:
    if status is None:
        return text
    if status == 404:
        return f"the agent on {node} does not serve the probe (started without --probe.enable?)"
    if status == 401:
        return f"the agent on {node} refused the credentials"
    if status == 429:
        return f"a probe is already running on {node}"
    return doc.get("error") or f"the agent on {node} answered HTTP {status}: {text}"


# A node that was the server of the previous round frees its slot when its server process exits,
# a few milliseconds after the client finished: a 429 is asked again for this long, then reported.
BUSY_RETRY_SECONDS = 3.0


def _ask(url: str, params: dict, headers: dict, timeout: float) -> tuple[int | None, dict, str]:
    end = time.monotonic() + BUSY_RETRY_SECONDS
    while True:
        status, doc, text = _get(url, params, headers, timeout)
        if status != 429 or time.monotonic() > end:
            return status, doc, text
        time.sleep(0.2)


def probe_pair(client: str, server: str, urls: dict[str, str], tool: str, seconds: int,
               headers: dict) -> PairResult:
    """The server's agent starts the tool's server; the client's agent runs the client against it."""
    status, doc, text = _ask(urls[server] + "/api/v1/probe/serve", {"tool": tool, "seconds": seconds}, headers, 10.0)
    if status != 200:
        return PairResult(client, server, tool, error=_why(status, doc, text, server))
    params = {"tool": tool, "seconds": seconds, "peer": doc.get("address", ""), "port": doc.get("port", "")}
    status, doc, text = _ask(urls[client] + "/api/v1/probe/run", params, headers, seconds + 10.0)
    if status != 200:
        return PairResult(client, server, tool, rated_bits_per_second=doc.get("rated_bits_per_second"),
                          error=_why(status, doc, text, client))
    return PairResult(client, server, tool, doc.get("bits_per_second"), doc.get("latency_seconds"),
                      doc.get("rated_bits_per_second"))


def probe_job(job: Job, urls: dict[str, str], tool: str, seconds: int, headers: dict) -> list[PairResult]:
    """Every pair of the job's nodes, a round of disjoint pairs at a time (in parallel within a round)."""
    out: list[PairResult] = []
    for pairs in rounds(job.nodes):
        got: list[PairResult | None] = [None] * len(pairs)

        def one(i: int, a: str, b: str) -> None:
            got[i] = probe_pair(a, b, urls, tool, seconds, headers)

        threads = [threading.Thread(target=one, args=(i, a, b), daemon=True) for i, (a, b) in enumerate(pairs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 25.0)
        out.extend(r if r is not None else PairResult(a, b, tool, error="no answer in time")
                   for r, (a, b) in zip(got, pairs))
    return out


def verdict_of(findings_url: str, jobid: str, timeout: float) -> Verdict | None:
    """The job's verdict from serve's /api/v1/findings (evidence as JSON objects), or None."""
    from dashboard.analysis.findings import Evidence

    status, doc, text = _get(findings_url, {}, {}, timeout)
    if status != 200:
        raise InputError(f"cannot read findings from {findings_url}: {text or status}")
    v = next((v for v in doc.get("verdicts", ()) if str(v.get("jobid")) == str(jobid)), None)
    if v is None:
        return None
    fields = set(Evidence.__dataclass_fields__)
    ev = tuple(Evidence(**{k: e.get(k) if k in ("value", "baseline", "threshold", "z", "p", "at") else e.get(k, "")
                           for k in fields}) for e in v.get("evidence", ()))
    return Verdict(jobid=str(v["jobid"]), nodes=tuple(v.get("nodes", ())), gpus=v.get("gpus"), state=v.get("state", ""),
                   confidence=v.get("confidence"), since=v.get("since"), culprit=v.get("culprit", ""),
                   culprit_kind=v.get("culprit_kind", ""), evidence=ev, gpu_hours_lost=v.get("gpu_hours_lost"),
                   reason=v.get("reason", ""), name=v.get("name", ""), user=v.get("user", ""))


def _snapshot(args) -> Snapshot:
    from dashboard import backfill_cli as b

    try:
        if args.snapshot:
            return b.read_snapshot_file(args.snapshot)
        if args.slurm_exporter:
            return b.fetch_exporter(args.slurm_exporter, args.timeout)
        from collectors.runner import CommandRunner

        return b.poll_slurm(CommandRunner(), args.timeout)
    except b.InputError as exc:
        raise InputError(str(exc)) from None


def table(job: Job, results: list[PairResult]) -> str:
    def g(x):
        return "-" if x is None else f"{x / 1e9:.3g}"

    lines = [f"job {job.job_id}: {len(job.nodes)} nodes, {len(results)} pairs",
             f"{'pair':<32} {'tool':<12} {'Gb/s':>8} {'rated':>8} {'latency us':>11}  note"]
    for r in results:
        lat = "-" if r.latency_seconds is None else f"{r.latency_seconds * 1e6:.1f}"
        note = r.error or {True: "slow: under half the rated speed", False: "", None: "rated speed unknown"}[r.slow]
        lines.append(f"{r.pair:<32} {r.tool:<12} {g(r.bits_per_second):>8} {g(r.rated_bits_per_second):>8} {lat:>11}  {note}")
    return "\n".join(lines)


def through_serve(url: str, jobid: str, headers: dict) -> tuple[Job, list[PairResult]]:
    """Ask serve to probe the job (it keeps the result); InputError with serve's reason when it will not."""
    import httpx

    target = url.rstrip("/") + "/api/v1/probe"
    try:
        # serve answers once every round of pairs ran (each up to 10 s + the agents' start-up)
        resp = httpx.post(target, params={"jobid": jobid}, headers=headers, timeout=httpx.Timeout(600.0, connect=10.0))
        doc = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise InputError(f"no serve answering at {target} ({type(exc).__name__})") from None
    if resp.status_code != 200 or not isinstance(doc, dict):
        raise InputError(f"serve at {url}: {doc.get('error') if isinstance(doc, dict) else ''} "
                         f"(HTTP {resp.status_code})".replace(": None ", ": ").strip())
    fields = set(PairResult.__dataclass_fields__)
    results = [PairResult(**{k: v for k, v in p.items() if k in fields}) for p in doc.get("pairs", ())]
    return Job(job_id=int(doc["jobid"]) if str(doc.get("jobid", "")).isdigit() else 0,
               nodes=tuple(doc.get("nodes", ())), state="RUNNING"), results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not 1 <= args.seconds <= 10:
            raise InputError("--seconds must be from 1 to 10")
        if args.serve:
            headers = auth_headers(None, args.basic_auth_user, args.basic_auth_password_file)
            job, results = through_serve(args.serve, args.jobid, headers)
        else:
            headers = auth_headers(args.token_file, args.basic_auth_user, args.basic_auth_password_file)
            job = running_job(_snapshot(args), args.jobid)
            urls = agent_urls(job.nodes, args.agent_url, args.agent)
            results = probe_job(job, urls, TOOLS[args.tool], args.seconds, headers)
        verdict = verdict_of(args.findings, args.jobid, args.timeout) if args.findings else None
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc = {"jobid": str(job.job_id), "nodes": list(job.nodes), "pairs": [asdict(r) for r in results],
               "evidence": [e.to_json() for e in evidence(results)]}
        if verdict is not None:
            doc["verdict"] = attach(verdict, results).to_json()
        print(json.dumps(doc, indent=2))
    else:
        print(table(job, results))
        if verdict is not None:
            v = attach(verdict, results)
            print(f"\nverdict {v.state} {v.culprit}".rstrip())
            for e in v.evidence:
                print(f"  {e.signal} {e.node} {e.note}".rstrip())
    return 0 if all(not r.error for r in results) else 1
