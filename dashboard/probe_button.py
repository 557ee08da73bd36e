"""The job page's "Probe links" button: asks the agents of a running job's nodes to measure each
pair of links (dashboard/probe_cli.py does the asking) and shows the measurements as evidence rows
below the verdict's own. Configured by `serve --probe.agent-url` (off without it). The latest probe of each job is kept
(dashboard/probe_store.py) and rides on the job's verdict in the findings."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict

from dash import Input, Output, State, html

from dashboard import ids, ui
from dashboard.analysis.findings import finite
from dashboard.analysis.linkprobe import evidence
from dashboard.probe_cli import ProbeSettings
from dashboard.probe_store import ProbeStore, WithProbes
from dashboard.units import fmt_value

PATH = "/api/v1/probe"  # below serve's --path-prefix


def configured(settings: ProbeSettings | None) -> bool:
    return settings is not None and bool(settings.agent_url or settings.agents)


def with_store(ds, settings: ProbeSettings | None):
    """(datasource, store): with the probe configured, a datasource whose findings carry the probes
    kept in the store; without, the datasource as it is and no store."""
    if not configured(settings):
        return ds, None
    store = ProbeStore()
    return WithProbes(ds, store), store


def block(job) -> html.Div:
    """The button and the place its result goes; only for a running job on several nodes."""
    if job.state != "RUNNING" or len(job.nodes) < 2:
        return html.Div()
    return html.Div([html.Button("Probe links between this job's nodes", id=ids.JOB_PROBE_BUTTON, n_clicks=0,
                                 className="gw-button",
                                 title="iperf3 (or perftest) between each pair of nodes, a few seconds each"),
                     html.Div(id=ids.JOB_PROBE_RESULT)], className="gw-probe")


class Refused(Exception):
    """Why serve will not probe a job now, with the HTTP status that says so."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# One probe from this serve at a time (the button and /api/v1/probe alike): a flood of requests
# then costs one answer each, not a fan-out of probes to the agents, which take one each anyway.
_BUSY = threading.Lock()


def measure(ds, settings: ProbeSettings | None, jobid: str, store: ProbeStore | None):
    """Probe the running job's links through its agents and keep the result in `store`:
    (job, pair results), or Refused saying why not."""
    from dashboard.probe_cli import InputError, agent_urls, probe_job, running_job

    if not configured(settings):
        raise Refused(404, "The link probe is not configured: start serve with --probe.agent-url (and the agents "
                           "with --probe.enable).")
    snap = ds.snapshot()
    if snap is None:
        raise Refused(503, "No scheduler snapshot: the job's nodes are unknown.")
    try:
        job = running_job(snap, jobid)
        urls = agent_urls(job.nodes, settings.agent_url or "", [f"{n}={u}" for n, u in settings.agents.items()])
    except InputError as exc:
        raise Refused(409, str(exc)) from None
    if not _BUSY.acquire(blocking=False):
        raise Refused(429, "A link probe is already running from this serve; one at a time.")
    try:
        results = probe_job(job, urls, settings.tool, settings.seconds, dict(settings.headers))
    finally:
        _BUSY.release()
    if store is not None:
        store.put(jobid, results)
    return job, results


def run(ds, settings: ProbeSettings | None, jobid: str, store: ProbeStore | None = None):
    """The probe's evidence rows for the job, or a sentence saying why there are none; the result
    is kept in `store` for the job's verdict."""
    try:
        _, results = measure(ds, settings, jobid, store)
    except Refused as exc:
        return html.P(str(exc), className="gw-muted")
    rows = [[e.signal, e.node, *(fmt_value(e.signal, x) for x in (e.value, e.baseline, e.threshold)), e.note]
            for e in evidence(results)]
    failed = sum(1 for r in results if r.error)
    note = f"{len(results)} pair(s) measured with {settings.tool}" + (f", {failed} could not be" if failed else "")
    return html.Div([html.P(note, className="gw-muted"),
                     ui.table(["signal", "pair", "value", "rated", "threshold", "note"], rows)])


def answer(ds, settings: ProbeSettings | None, jobid: str, store: ProbeStore | None) -> tuple[int, dict]:
    """`POST /api/v1/probe?jobid=`: (status, JSON document), as `gangwatch probe --serve` reads it."""
    if not jobid:
        return 400, {"error": "jobid is required"}
    try:
        job, results = measure(ds, settings, jobid, store)
    except Refused as exc:
        return exc.status, {"error": str(exc)}
    pairs = [{k: finite(v) if isinstance(v, float) else v for k, v in asdict(r).items()} for r in results]
    return 200, {"jobid": str(job.job_id), "nodes": list(job.nodes), "pairs": pairs,
                 "evidence": [e.to_json() for e in evidence(results)]}


def register(app, ds, settings: ProbeSettings | None, store: ProbeStore | None = None) -> None:
    @app.callback(Output(ids.JOB_PROBE_RESULT, "children"), Input(ids.JOB_PROBE_BUTTON, "n_clicks"),
                  State(ids.JOB_ID, "data"), prevent_initial_call=True)
    def probe(n, jobid):
        return run(ds, settings, str(jobid), store) if n else html.Div()

    def endpoint():
        from flask import Response, request

        status, doc = answer(ds, settings, request.args.get("jobid", "")[:64], store)
        return Response(json.dumps(doc, allow_nan=False), status=status, mimetype="application/json")

    app.server.add_url_rule(app.config.routes_pathname_prefix + PATH.lstrip("/"), "gangwatch_probe", endpoint,
                            methods=["POST"])
