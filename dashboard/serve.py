"""`gangwatch serve`: the dashboard, the findings as metrics and JSON, the backfill plan.

Sources (one scheduler source is required; --kube-exporter may also go beside a Slurm one):
  --slurm-exporter URL   a `gangwatch slurm-exporter`'s /api/v1/snapshot (polled)
  --slurm-cli            the local Slurm commands (squeue, sinfo, scontrol, sprio, sshare, sdiag)
  --snapshot FILE        a snapshot JSON file (the slurm-exporter's /api/v1/snapshot), re-read when polled
  --kube-exporter URL    a `gangwatch kube-exporter` (Volcano, Kueue): alone, or merged beside Slurm
                         (dashboard/kube_feed.py), with the Kubernetes page (/kubernetes)
  --prometheus URL       a Prometheus-compatible HTTP API (dashboard/sources/prometheus.py: aggregated
                         range queries, a fixed number per cycle whatever the node count; after
                         the first cycle each asks only for the span since the previous one;
                         --prometheus-timeout is one cycle's deadline)
  --targets FILE         agent endpoints (one host:port or URL per line) scraped by serve itself
                         (dashboard/sources/embedded.py)
  Without a metric source the pages show scheduler data only, and say so.
  With one, a background thread fetches the last hour and runs the diagnosis every --poll-interval.

Serves on 127.0.0.1:8050 by default (job names and accounts are visible: do not expose it without
--web.config.file, which takes the exporters' TLS and bcrypt basic-auth config). --path-prefix /gw/
serves everything below /gw/ for a reverse proxy that keeps the prefix.

Privileges: none beyond what the chosen scheduler source needs (the Slurm CLI as any user).
Failure modes: an unreachable source keeps the last good data on screen with a stale banner and
`/healthz` says `"ok": false` with the reason (docs/deployment.md: limits, deadlines, health); the
sources are polled in the background, so no request waits on one; a bad web config or listen
address exits 2 at start.
"""

from __future__ import annotations

import argparse
import logging
import sys

from collectors.web import WebConfig, WebConfigError, parse_listen_address
from dashboard import http_auth, probe_cli

DEFAULT_LISTEN = "127.0.0.1:8050"
# Connection limits of the dashboard's server (docs/deployment.md): a browser holds about six.
MAX_CONNECTIONS = 512
MAX_REQUEST_HEAD = 64 * 1024  # request line and headers, in bytes
READ_TIMEOUT = 60.0  # per read; the guard's deadlines bound whole requests
log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """One scheduler source is required, and --kube-exporter may go beside a Slurm one: more than
    a mutually exclusive group can say."""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        if not (ns.slurm_exporter or ns.slurm_cli or ns.snapshot or ns.kube_exporter):
            self.error("one scheduler source is required: --slurm-exporter, --slurm-cli, --snapshot or --kube-exporter")
        return ns


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gangwatch serve", description="The gangwatch dashboard, findings and backfill plan.")
    p.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    p.add_argument("--web.config.file", dest="web_config", default=None,
                   help="exporter-toolkit web config: TLS and basic auth with bcrypt hashes")
    p.add_argument("--path-prefix", default="/", help="serve under this path, e.g. /gw/ behind a reverse proxy")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--slurm-exporter", metavar="URL", help="base URL of a gangwatch slurm-exporter")
    src.add_argument("--slurm-cli", action="store_true", help="poll the local Slurm commands")
    src.add_argument("--snapshot", metavar="FILE", help="a scheduler snapshot JSON file")
    p.add_argument("--kube-exporter", metavar="URL",
                   help="base URL of a gangwatch kube-exporter (Volcano/Kueue); alone or beside one Slurm source")
    met = p.add_mutually_exclusive_group()
    met.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible HTTP API for node metrics")
    met.add_argument("--targets", metavar="FILE", help="agent endpoints to scrape directly (embedded metric source)")
    http_auth.add_engine_arguments(p)
    http_auth.add_concurrency_argument(p)
    p.add_argument("--prometheus-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="seconds one cycle's queries to --prometheus may take, each at most a quarter (default "
                        "%(default)s); raise it for large clusters, whose first cycle fetches the whole hour")
    p.add_argument("--refresh", type=float, default=15.0, help="browser refresh interval in seconds (default %(default)s)")
    p.add_argument("--poll-interval", type=float, default=15.0, help="scheduler poll interval in seconds (default %(default)s)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    probe_cli.add_serve_arguments(p)
    return p


def read_targets(path: str) -> list[str]:
    """One agent endpoint per line (host:port or a URL); blank lines and # comments are skipped."""
    with open(path) as fh:
        targets = [line.split("#", 1)[0].strip() for line in fh]
    targets = [t for t in targets if t]
    if not targets:
        raise ValueError(f"{path} names no targets")
    return targets


def make_metrics(args: argparse.Namespace):
    if args.prometheus:
        from dashboard.sources.prometheus import PrometheusSource

        return PrometheusSource(args.prometheus, timeout=args.prometheus_timeout, headers=http_auth.engine_headers(args),
                                concurrency=args.prometheus_concurrency)
    if args.targets:
        from dashboard.sources.embedded import EmbeddedSource

        return EmbeddedSource(read_targets(args.targets))
    return None


def make_datasource(args: argparse.Namespace):
    from dashboard.datasource.live import LiveDatasource, snapshot_from_file, snapshot_from_url

    metrics = make_metrics(args)
    feed = None
    if args.kube_exporter:
        from dashboard.kube_feed import KubeFeed

        feed = KubeFeed(args.kube_exporter)
    if feed is not None and not (args.snapshot or args.slurm_exporter or args.slurm_cli):
        fn, name, every = feed.fetch, f"kube-exporter {args.kube_exporter}", args.poll_interval
    elif args.snapshot:
        fn, name, every = snapshot_from_file(args.snapshot), f"snapshot file {args.snapshot}", args.poll_interval
    elif args.slurm_exporter:
        fn, name, every = snapshot_from_url(args.slurm_exporter), f"slurm-exporter {args.slurm_exporter}", args.poll_interval
    else:
        from collectors.slurm.sources import CliSource, Poller

        poller = Poller(CliSource(), interval=args.poll_interval)
        poller.start()
        fn, name, every = poller.current, "slurm CLI", 1.0
    if feed is not None and fn is not feed.fetch:
        from dashboard.kube_feed import merged

        fn, name = merged(fn, feed), f"{name} + kube-exporter {args.kube_exporter}"
    ds = LiveDatasource(fn, name, every, metrics=metrics, metrics_interval=args.poll_interval)
    ds.kube_feed = feed  # the Kubernetes page reads the exporter's `kube` section through it
    return ds


class _HeadTooLarge(Exception):
    pass


class _HeadBudget:
    """The request's rfile while its request line and headers are read: at most `left` bytes in
    all (http.server alone allows 100 header lines of 64 KiB each, 6.5 MB per connection)."""

    def __init__(self, raw, left: int):
        self.raw, self.left = raw, left

    def readline(self, size: int = -1) -> bytes:
        line = self.raw.readline(self.left + 1 if size < 0 else min(size, self.left + 1))
        self.left -= len(line)
        if self.left < 0:
            raise _HeadTooLarge()
        return line

    def __getattr__(self, name):
        return getattr(self.raw, name)


def make_wsgi_server(app, host: str, port: int, web_config: WebConfig | None = None):
    """A threaded werkzeug server with the exporters' connection guard (collectors/web.py): a
    bounded number of connections (the oldest idle one closed for a new one), deadlines for the TLS
    handshake, the request head, keep-alive idle time and each request, a bounded request head,
    and TLS handshakes on each connection's own thread, never in the accept loop.

    Why werkzeug and not gunicorn or waitress: waitress has no TLS; gunicorn forks its workers
    away from the process that holds serve's poller and caches, and its threaded worker does the
    handshake without a deadline too. The guard is the part of a production server we needed."""
    from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

    from collectors.web import GuardedServerMixin, tls_handshake

    class Handler(WSGIRequestHandler):
        timeout = READ_TIMEOUT
        _first = True

        def handle(self):
            if not tls_handshake(self.connection, self.server.guard.request_timeout):
                return
            self.connection.settimeout(self.timeout)
            super().handle()

        def handle_one_request(self):
            self.server.guard.waiting(self.connection, self._first)
            self._first = False
            raw = self.rfile
            self.rfile = _HeadBudget(raw, MAX_REQUEST_HEAD)
            try:
                super().handle_one_request()
            except _HeadTooLarge:
                self.close_connection = True
                self.wfile.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
            finally:
                self.rfile = raw

        def parse_request(self):
            ok = super().parse_request()
            if isinstance(self.rfile, _HeadBudget):  # the body is Flask's to read: MAX_CONTENT_LENGTH caps it
                self.rfile = self.rfile.raw
            if ok:
                self.server.guard.busy(self.connection)
            return ok

    class Server(GuardedServerMixin, ThreadedWSGIServer):
        max_connections = MAX_CONNECTIONS

        def __init__(self, *args, **kwargs):
            self.init_guard()
            super().__init__(*args, **kwargs)

    server = Server(host, port, app, Handler)
    ctx = web_config.ssl_context() if web_config else None
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        server.ssl_context = ctx  # what werkzeug reads to say https in the WSGI environ
    return server


def run_server(app, listen: str, web_config: WebConfig | None = None, banner: str = "gangwatch serve") -> int:
    """Serve a built app's Flask server until interrupted (make_wsgi_server: TLS when configured)."""
    try:
        host, port = parse_listen_address(listen, "127.0.0.1")
        server = make_wsgi_server(app.server, host or "0.0.0.0", port, web_config)
    except (OSError, ValueError, SystemExit) as exc:
        print(f"{banner}: cannot listen on {listen}: {exc}", file=sys.stderr)
        return 2
    scheme = "https" if web_config and web_config.cert_file else "http"
    print(f"{banner}: dashboard on {scheme}://{host}:{server.server_port}{app.config.requests_pathname_prefix}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "debug":
        # werkzeug logs every request (each browser refresh is several) and httpx every Prometheus
        # query (~1.3 MB an hour) at info: both only at debug
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        web = WebConfig.load(args.web_config)
    except WebConfigError as exc:
        print(f"gangwatch serve: {exc}", file=sys.stderr)
        return 2
    try:
        probe = probe_cli.serve_settings(args)
    except probe_cli.InputError as exc:
        print(f"gangwatch serve: {exc}", file=sys.stderr)
        return 2
    from dashboard.app import build_app

    try:
        ds = make_datasource(args)
    except (OSError, ValueError) as exc:
        print(f"gangwatch serve: {exc}", file=sys.stderr)
        return 2
    app = build_app(ds, prefix=args.path_prefix, refresh_seconds=args.refresh, web_config=web, probe=probe)
    ds.start()
    try:
        return run_server(app, args.listen, web)
    finally:
        ds.close()


if __name__ == "__main__":
    sys.exit(main())
