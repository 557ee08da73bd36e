"""The job page's "Probe links" button: asks the agents of a running job's nodes to measure each
pair of links (dashboard/probe_cli.py does the asking) and shows the measurements as evidence rows
below the verdict's own. Configured by `serve --probe.agent-url` (off without it). The latest probe of each job is kept
(dashboard/probe_store.py) and rides on the job's verdict in the findings."""

from __future__ import annotations

from dash import Input, Output, State, html

from dashboard import ids, ui
from dashboard.analysis.linkprobe import evidence
from dashboard.probe_cli import ProbeSettings
from dashboard.probe_store import ProbeStore, WithProbes
from dashboard.units import fmt_value


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


def run(ds, settings: ProbeSettings | None, jobid: str, store: ProbeStore | None = None):
    """The probe's evidence rows for the job, or a sentence saying why there are none; the result
    is kept in `store` for the job's verdict."""
    from dashboard.probe_cli import InputError, agent_urls, probe_job, running_job

    if not configured(settings):
        return html.P("The link probe is not configured: start serve with --probe.agent-url (and the agents "
                      "with --probe.enable).", className="gw-muted")
    snap = ds.snapshot()
    if snap is None:
        return html.P("No scheduler snapshot: the job's nodes are unknown.", className="gw-muted")
    try:
        job = running_job(snap, jobid)
        urls = agent_urls(job.nodes, settings.agent_url or "", [f"{n}={u}" for n, u in settings.agents.items()])
    except InputError as exc:
        return html.P(str(exc), className="gw-muted")
    results = probe_job(job, urls, settings.tool, settings.seconds, dict(settings.headers))
    if store is not None:
        store.put(jobid, results)
    rows = [[e.signal, e.node, *(fmt_value(e.signal, x) for x in (e.value, e.baseline, e.threshold)), e.note]
            for e in evidence(results)]
    failed = sum(1 for r in results if r.error)
    note = f"{len(results)} pair(s) measured with {settings.tool}" + (f", {failed} could not be" if failed else "")
    return html.Div([html.P(note, className="gw-muted"),
                     ui.table(["signal", "pair", "value", "rated", "threshold", "note"], rows)])


def register(app, ds, settings: ProbeSettings | None, store: ProbeStore | None = None) -> None:
    @app.callback(Output(ids.JOB_PROBE_RESULT, "children"), Input(ids.JOB_PROBE_BUTTON, "n_clicks"),
                  State(ids.JOB_ID, "data"), prevent_initial_call=True)
    def probe(n, jobid):
        return run(ds, settings, str(jobid), store) if n else html.Div()
