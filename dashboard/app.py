"""The Dash application: the shell (header, banner, theme, refresh), the router, and the HTTP
endpoints beside the pages (/metrics, /api/v1/findings, /api/v1/backfill, /healthz).

`build_app(datasource, prefix="/")` returns a `dash.Dash`; its Flask server is `app.server`.
Routing is our own (one dcc.Location and a table of page modules) rather than Dash Pages: Dash
Pages keeps a process-wide page registry and its callbacks would need a global datasource, while
here every page's callbacks close over the datasource they were built with, so several apps
(tests, the benchmark's two cluster sizes) can live in one process.

Access: read-only (GET/HEAD, plus POST only to Dash's own callback endpoint, which reads); basic
auth (bcrypt) from the exporter-toolkit web config is checked before every request; TLS is the
server's job (dashboard/serve.py passes the config's ssl context). Responses are gzip-compressed
when the browser accepts it (static bundles compressed once per process and cached; plotly.js at
start, in the background).

First load: the page the browser opens is rendered into the layout (`first_page`), so no callback
round trip comes before content; plotly.js is preloaded but runs only when a figure mounts (see
`early_scripts`; the Overview shows its heatmap as an image until then).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import posixpath
import re
import threading
from typing import Callable
from urllib.parse import unquote, urlsplit

import dash
from dash import Input, Output, State, dcc, html, no_update
from flask import Response, has_request_context, request

from dashboard import ids, probe_button, ui
from dashboard.datasource import Datasource, fmt_age
from dashboard.pages import job, jobs, kubernetes, network, node, nodes, overview, queue, storage

log = logging.getLogger(__name__)
ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
# (pattern on the path below the prefix, module). Order matters: first match wins.
ROUTES = [
    (re.compile(r"^$"), overview),
    (re.compile(r"^jobs/?$"), jobs),
    (re.compile(r"^jobs/(?P<jobid>[^/]+)$"), job),
    (re.compile(r"^nodes/?$"), nodes),
    (re.compile(r"^nodes/(?P<name>[^/]+)$"), node),
    (re.compile(r"^queue/?$"), queue),
    (re.compile(r"^storage/?$"), storage),
    (re.compile(r"^network/?$"), network),
    (re.compile(r"^kubernetes/?$"), kubernetes),
]
NAV = [("Overview", "/", overview), ("Jobs", "/jobs", jobs), ("Nodes", "/nodes", nodes), ("Queue", "/queue", queue),
       ("Storage", "/storage", storage), ("Network", "/network", network), ("Kubernetes", "/kubernetes", kubernetes)]
PAGES = [overview, jobs, job, nodes, node, queue, storage, network, kubernetes]
# what dcc loads on demand once a graph mounts, as it names them (window._dashPlotlyJSURL, its graph chunk)
PLOTLY_JS = "plotly/package_data/plotly.min.js"
GRAPH_CHUNK = "dash/dcc/async-graph.js"
COMPRESSIBLE = ("text/", "application/json", "application/javascript")


def normalise_prefix(prefix: str) -> str:
    prefix = "/" + (prefix or "").strip("/")
    return prefix if prefix == "/" else prefix + "/"


def resolve(path: str):
    """Path below the prefix ("jobs/123") -> (page module, params) or (None, {})."""
    path = (path or "").strip("/")
    for pattern, module in ROUTES:
        m = pattern.match(path)
        if m:
            return module, {k: unquote(v) for k, v in m.groupdict().items()}  # Ctx.node/job encode them
    return None, {}


def available(module, ds: Datasource) -> bool:
    """A page is linked only when its data exists (no placeholder pages)."""
    check = getattr(module, "available", None)
    return True if check is None else bool(check(ds))


def build_app(datasource: Datasource, prefix: str = "/", refresh_seconds: float = 15.0, web_config=None,
              extra_routes: dict | None = None, title: str = "gangwatch", probe=None) -> dash.Dash:
    prefix = normalise_prefix(prefix)
    ds, probes = probe_button.with_store(datasource, probe)  # findings carry the latest probe per job
    app = dash.Dash(__name__, requests_pathname_prefix=prefix, routes_pathname_prefix=prefix, assets_folder=ASSETS,
                    suppress_callback_exceptions=True, update_title=None, title=title, serve_locally=True)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}" + early_scripts(prefix), 1)
    ctx = ui.Ctx(app.get_relative_path)

    def first_page():
        """The page the browser is opening, rendered into the layout itself, so the first view needs
        no callback round trip. `/_dash-layout` is requested by the page: its Referer names the
        page's path. None (the router's callback renders it) when there is no such request."""
        if not has_request_context() or not request.referrer:
            return None, None
        path = urlsplit(request.referrer).path
        if not (path + "/").startswith(prefix):
            return None, None
        path = path[len(prefix):].strip("/")
        return path, render_page(ds, ctx, path)

    def shell():
        path, page = first_page()
        st = ds.status()
        links = [dcc.Link(label, href=app.get_relative_path(href), className="gw-nav-link")
                 for label, href, module in NAV if available(module, ds)]
        sim = html.Span("SIMULATED cluster: no real nodes, jobs or users", id=ids.SIM_BADGE,
                        className="gw-sim") if st.simulated else html.Span(id=ids.SIM_BADGE)
        return html.Div([
            dcc.Location(id=ids.URL, refresh=False),
            dcc.Location(id=ids.NAV_URL, refresh="callback-nav"),
            dcc.Interval(id=ids.REFRESH, interval=int(refresh_seconds * 1000)),
            dcc.Store(id=ids.THEME, storage_type="local"),
            html.Div(id=ids.THEME_SINK, hidden=True),
            html.Header([html.A("gangwatch", href=prefix, className="gw-brand"),
                         html.Nav(links, id=ids.NAV, className="gw-nav"), sim,
                         html.Span(_age_text(st), id=ids.AGE, className="gw-age"),
                         html.Button("◐ theme", id=ids.THEME_TOGGLE, className="gw-theme-toggle", n_clicks=0,
                                     title="Switch between light and dark")], className="gw-header"),
            html.Div(stale_banner(st), id=ids.BANNER),
            dcc.Store(id=ids.RENDERED, data=path),
            html.Main(page, id=ids.PAGE, className="gw-main"),
        ], className="gw-shell")

    app.layout = shell

    @app.callback(Output(ids.PAGE, "children"), Output(ids.RENDERED, "data"), Input(ids.URL, "pathname"),
                  State(ids.THEME, "data"), State(ids.RENDERED, "data"))
    def route(pathname, theme, rendered):
        return route_page(ds, ctx.with_theme(theme), app.strip_relative_path(pathname or prefix) or "", rendered)

    @app.callback(Output(ids.AGE, "children"), Output(ids.BANNER, "children"), Input(ids.REFRESH, "n_intervals"),
                  prevent_initial_call=True)
    def refresh_status(_n):
        st = ds.status()
        return _age_text(st), stale_banner(st)

    app.clientside_callback(
        """function(n, cur) { if (!n) { return window.dash_clientside.no_update; }
               return cur === 'dark' ? 'light' : 'dark'; }""",
        Output(ids.THEME, "data"), Input(ids.THEME_TOGGLE, "n_clicks"), State(ids.THEME, "data"))
    app.clientside_callback(
        """function(theme) { document.documentElement.setAttribute('data-theme', theme || 'light');
               return theme || 'light'; }""",
        Output(ids.THEME_SINK, "title"), Input(ids.THEME, "data"))

    for module in PAGES:
        module.register(app, ds, ctx)
    probe_button.register(app, ds, probe, probes)  # the job page's "Probe links" (probe: serve's ProbeSettings)
    _add_endpoints(app, ds, prefix, extra_routes or {})
    _add_http_hooks(app, web_config)
    return app


def early_scripts(prefix: str) -> str:
    """Head tags that take plotly.js's download off the first load's critical path.

    dcc fetches plotly.js (4.8 MB) and its graph chunk only once a graph mounts, after the layout
    arrived: a serial download. Preloading them fetches them beside the other bundles, without
    running them (evaluating plotly.js is ~1 s of main thread here, the largest single cost of a
    first load: the Overview's first view is an image of the heatmap for that reason, and the
    figure follows); dcc's script tags then find them in the preload cache. (Dash's
    eager_loading would also run MathJax, the date picker...: 3 MB more to parse.)"""
    suites = f"{prefix}_dash-component-suites/"
    return "".join(f'<link rel="preload" as="script" href="{suites}{path}">' for path in (PLOTLY_JS, GRAPH_CHUNK))


def route_page(ds: Datasource, ctx: ui.Ctx, path: str, rendered: str | None):
    """The router: (page, path now shown). Nothing to send when the layout already holds this
    path's page (the first view, rendered on the server; its figures follow the theme through
    their own callbacks)."""
    if rendered is not None and path.strip("/") == rendered:
        return no_update, no_update
    return render_page(ds, ctx, path), path.strip("/")


def render_page(ds: Datasource, ctx: ui.Ctx, path: str):
    module, params = resolve(path)
    if module is not None and not available(module, ds) and getattr(module, "UNAVAILABLE", ""):
        # a real page whose source is absent here: say which source, not "Not found"
        return html.Div([html.H1(module.TITLE), html.P(module.UNAVAILABLE, className="gw-muted")],
                        className="gw-unavailable")
    if module is None or not available(module, ds):
        return html.Div([html.H1("Not found"), html.P(f"No page at /{path}.")], className="gw-notfound")
    return module.layout(ds, ctx, **params)


def _age_text(st) -> str:
    ages = [s.age_seconds for s in st.sources if s.age_seconds is not None]
    return f"data {fmt_age(max(ages))} old" if ages else "no data yet"


def stale_banner(st):
    bad = st.stale
    if not bad:
        return None
    items = [html.Li(f"{s.name}: " + (s.detail or ("stale: data " + fmt_age(s.age_seconds) + " old"
                                                    if s.ok else "down")))
             for s in bad]
    return html.Div([html.Strong("Some data is stale or missing; what is shown may be out of date."), html.Ul(items)],
                    className="gw-banner", role="alert")


# ---------------------------------------------------------------------------------- endpoints

def serve_families(ds: Datasource) -> list:
    """This server's own health: each source's age and whether it answers."""
    from collectors.exposition import gauge

    st = ds.status()
    age = gauge("gangwatch_serve_source_age_seconds", "Age of each data source's latest data, in seconds.")
    up = gauge("gangwatch_serve_source_up", "Whether each data source's latest poll succeeded (1) or not (0).")
    for s in st.sources:
        if s.age_seconds is not None:
            age.add(round(s.age_seconds, 3), source=s.name)
        up.add(1 if s.ok else 0, source=s.name)
    info = gauge("gangwatch_serve_info", "Facts about this dashboard: whether its cluster is simulated and where "
                 "its findings come from; value 1.").add(1, simulated=str(st.simulated).lower(),
                                                        findings_source=ds.findings().source)
    return [age, up, info]


def findings_families(ds: Datasource) -> list:
    """The findings as metrics, named and shaped by the diagnosis' own exporter
    (dashboard/findings_api.py), so `serve`, `demo` and `diagnose` agree on every series."""
    from dashboard import findings_api

    return findings_api.findings_families(ds.findings().as_diagnosis())


def _metrics_text(ds: Datasource) -> str:
    from collectors.exposition import encode
    from dashboard.findings_api import backfill_families

    return encode(findings_families(ds) + backfill_families(ds.backfill()) + serve_families(ds))


def _add_endpoints(app: dash.Dash, ds: Datasource, prefix: str, extra: dict) -> None:
    server = app.server

    def metrics():
        return Response(_metrics_text(ds), mimetype="text/plain", content_type="text/plain; version=0.0.4; charset=utf-8")

    def findings():
        from dashboard.findings_api import findings_json

        return Response(findings_json(ds.findings().as_diagnosis()), mimetype="application/json")

    def backfill():
        plan = ds.backfill()
        if plan is None:
            return Response(json.dumps({"error": "no scheduler snapshot or the planner failed"}), status=503,
                            mimetype="application/json")
        from dashboard.backfill_api import snapshot_facts

        doc, snap = plan.to_json(), ds.snapshot()
        if snap is not None:  # so an API reader sees a stale plan for what it is
            doc["snapshot"] = snapshot_facts(snap, ds.now())
        return Response(json.dumps(doc, allow_nan=False), mimetype="application/json")

    def healthz():
        return Response(json.dumps(ds.status().to_json(), allow_nan=False), mimetype="application/json")

    routes = {"metrics": metrics, "api/v1/findings": findings, "api/v1/backfill": backfill, "healthz": healthz}
    for path, handler in extra.items():
        routes[path.lstrip("/")] = _adapt(handler)
    for path, view in routes.items():
        server.add_url_rule(prefix + path, endpoint="gw:" + path, view_func=view, methods=["GET", "HEAD"])


def _adapt(handler):
    """A collectors.web handler (Request -> (status, ctype, body, headers)) as a Flask view, so that
    `gangwatch demo` can serve its own endpoints from the same server."""
    from collectors.web import Request

    def view():
        req = Request(request.path, {k: request.args.getlist(k) for k in request.args},
                      {k.lower(): v for k, v in request.headers.items()})
        status, ctype, body, headers = handler(req)
        return Response(body, status=status, content_type=ctype, headers=headers)

    view.__name__ = getattr(handler, "__name__", "view")
    return view


class _StaticGzip:
    """Compressed bodies of the static bundles, made once per process and shared by every app in
    it (tests and the benchmark build several). Keyed by the file a URL names (`static_key`: the
    fingerprint stripped, `..` resolved), never the URL as sent, so made-up variants of one path
    share an entry; and bounded in entries and bytes, past which bodies are compressed but not kept.
    A request that finds a compression under way waits for it rather than compressing the same
    4.8 MB again."""

    max_entries = 64
    max_bytes = 32 * 1024 * 1024  # compressed; plotly.js is ~1.4 MB of it

    def __init__(self):
        self._lock = threading.Lock()
        self._bodies: dict[str, bytes] = {}
        self._busy: dict[str, threading.Lock] = {}
        self._size = 0

    def get(self, key: str, data: Callable[[], bytes]) -> bytes:
        with self._lock:
            body = self._bodies.get(key)
            if body is not None:
                return body
            busy = self._busy.setdefault(key, threading.Lock())
        with busy:
            with self._lock:
                body = self._bodies.get(key)
            if body is None:
                body = gzip.compress(data(), 9)
                with self._lock:
                    if len(self._bodies) < self.max_entries and self._size + len(body) <= self.max_bytes:
                        self._bodies[key] = body
                        self._size += len(body)
        with self._lock:
            self._busy.pop(key, None)
        return body


def static_key(path: str) -> str:
    """The cache key of a static URL: the file it serves, whatever fingerprint or `x/..` it carries."""
    from dash.fingerprint import check_fingerprint

    return posixpath.normpath(check_fingerprint(path)[0])


STATIC_GZIP = _StaticGzip()


def _read(path: str) -> Callable[[], bytes]:
    def read() -> bytes:
        with open(path, "rb") as fh:
            return fh.read()
    return read


# Defaults a web config's http_server_config.headers may override. Dash's renderer and clientside
# callbacks are inline scripts and plotly's WebGL traces compile shaders with `new Function`, hence
# 'unsafe-inline' and 'unsafe-eval'; what the policy buys is no foreign source (an image or script
# from another host, e.g. smuggled in through a node name) and no framing.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
                               "worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'; "
                               "base-uri 'self'; form-action 'self'",
}
# Dash's callback requests carry the inputs and states of one callback: kilobytes, rarely more.
MAX_REQUEST_BODY = 8 * 1024 * 1024


def _add_http_hooks(app: dash.Dash, web_config) -> None:
    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BODY
    prefix = app.config.routes_pathname_prefix

    def precompress():  # plotly.js takes ~0.3-1 s to compress: at start, not on a user's first load
        import plotly

        bundle = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
        if os.path.exists(bundle):
            STATIC_GZIP.get(f"{prefix}_dash-component-suites/{PLOTLY_JS}", _read(bundle))
        for name in sorted(os.listdir(ASSETS)):
            if name.endswith((".js", ".css")):
                STATIC_GZIP.get(f"{prefix}assets/{name}", _read(os.path.join(ASSETS, name)))

    threading.Thread(target=precompress, name="gangwatch-gzip-assets", daemon=True).start()

    @server.errorhandler(dash.exceptions.DependencyException)
    def not_a_bundle(_exc):  # a made-up or traversing component-suite path: one line, not a traceback
        log.info("404 %s: not a registered bundle", request.path[:200].encode("unicode_escape").decode())
        return Response("Not Found\n", status=404, content_type="text/plain; charset=utf-8")

    @server.before_request
    def guard():
        if request.method not in ("GET", "HEAD", "POST"):
            return Response("Method Not Allowed\n", status=405, headers={"Allow": "GET, HEAD"})
        if request.method == "POST" and not request.path.endswith(("_dash-update-component", probe_button.PATH)):
            return Response("Method Not Allowed\n", status=405, headers={"Allow": "GET, HEAD"})
        if web_config is not None and not web_config.authorized(request.headers.get("Authorization")):
            return Response("Unauthorized\n", status=401, headers={"WWW-Authenticate": 'Basic realm="gangwatch"'})
        return None

    @server.after_request
    def finish(resp):
        for k, v in SECURITY_HEADERS.items():
            resp.headers.setdefault(k, v)
        if web_config is not None:
            for k, v in web_config.headers.items():
                resp.headers[k] = v
        static = "_dash-component-suites" in request.path or "/assets/" in request.path
        if ((resp.direct_passthrough and not static) or resp.status_code != 200
                or "gzip" not in request.headers.get("Accept-Encoding", "")
                or resp.headers.get("Content-Encoding") or not (resp.mimetype or "").startswith(COMPRESSIBLE)):
            return resp
        resp.direct_passthrough = False  # assets are sent as files; read them so they can be compressed
        data = resp.get_data()
        if len(data) < 1024:
            return resp
        if static:
            body = STATIC_GZIP.get(static_key(request.path), lambda: data)
        else:
            body = gzip.compress(data, 5)
        resp.set_data(body)
        resp.headers["Content-Encoding"] = "gzip"
        resp.headers["Content-Length"] = str(len(body))
        resp.headers.add("Vary", "Accept-Encoding")
        return resp
