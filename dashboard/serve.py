"""`gangwatch serve`: the dashboard, the findings as metrics and JSON, the backfill plan.

Sources (one scheduler source is required):
  --slurm-exporter URL   a `gangwatch slurm-exporter`'s /api/v1/snapshot (polled)
  --slurm-cli            the local Slurm commands (squeue, sinfo, scontrol, sprio, sshare, sdiag)
  --snapshot FILE        a snapshot JSON file (the slurm-exporter's /api/v1/snapshot), re-read when polled
  --prometheus URL       a Prometheus-compatible HTTP API (dashboard/sources/prometheus.py: aggregated
                         range queries, a fixed number per cycle whatever the node count)
  --targets FILE         agent endpoints (one host:port or URL per line) scraped by serve itself
                         (dashboard/sources/embedded.py)
  Without a metric source the pages show scheduler data only, and say so.
  With one, a background thread fetches the last hour and runs the diagnosis every --poll-interval.

Serves on 127.0.0.1:8050 by default (job names and accounts are visible: do not expose it without
--web.config.file, which takes the exporters' TLS and bcrypt basic-auth config). --path-prefix /gw/
serves everything below /gw/ for a reverse proxy that keeps the prefix.

Privileges: none beyond what the chosen scheduler source needs (the Slurm CLI as any user).
Failure modes: an unreachable source keeps the last good data on screen with a stale banner and
`/healthz` reports its age; a bad web config or listen address exits 2 at start.
"""

from __future__ import annotations

import argparse
import logging
import sys

from collectors.web import WebConfig, WebConfigError, parse_listen_address

DEFAULT_LISTEN = "127.0.0.1:8050"
log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangwatch serve", description="The gangwatch dashboard, findings and backfill plan.")
    p.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    p.add_argument("--web.config.file", dest="web_config", default=None,
                   help="exporter-toolkit web config: TLS and basic auth with bcrypt hashes")
    p.add_argument("--path-prefix", default="/", help="serve under this path, e.g. /gw/ behind a reverse proxy")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--slurm-exporter", metavar="URL", help="base URL of a gangwatch slurm-exporter")
    src.add_argument("--slurm-cli", action="store_true", help="poll the local Slurm commands")
    src.add_argument("--snapshot", metavar="FILE", help="a scheduler snapshot JSON file")
    met = p.add_mutually_exclusive_group()
    met.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible HTTP API for node metrics")
    met.add_argument("--targets", metavar="FILE", help="agent endpoints to scrape directly (embedded metric source)")
    p.add_argument("--refresh", type=float, default=15.0, help="browser refresh interval in seconds (default %(default)s)")
    p.add_argument("--poll-interval", type=float, default=15.0, help="scheduler poll interval in seconds (default %(default)s)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
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

        return PrometheusSource(args.prometheus)
    if args.targets:
        from dashboard.sources.embedded import EmbeddedSource

        return EmbeddedSource(read_targets(args.targets))
    return None


def make_datasource(args: argparse.Namespace):
    from dashboard.datasource import LiveDatasource, snapshot_from_file, snapshot_from_url

    metrics = make_metrics(args)
    if args.snapshot:
        fn, name, every = snapshot_from_file(args.snapshot), f"snapshot file {args.snapshot}", args.poll_interval
    elif args.slurm_exporter:
        fn, name, every = snapshot_from_url(args.slurm_exporter), f"slurm-exporter {args.slurm_exporter}", args.poll_interval
    else:
        from collectors.slurm.sources import CliSource, Poller

        poller = Poller(CliSource(), interval=args.poll_interval)
        poller.start()
        fn, name, every = poller.current, "slurm CLI", 1.0
    return LiveDatasource(fn, name, every, metrics=metrics, metrics_interval=args.poll_interval)


def run_server(app, listen: str, web_config: WebConfig | None = None, banner: str = "gangwatch serve") -> int:
    """Serve a built app's Flask server until interrupted (threaded werkzeug, TLS when configured)."""
    from werkzeug.serving import make_server

    try:
        host, port = parse_listen_address(listen, "127.0.0.1")
        server = make_server(host or "0.0.0.0", port, app.server, threaded=True,
                             ssl_context=web_config.ssl_context() if web_config else None)
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
    from dashboard.app import build_app

    try:
        ds = make_datasource(args)
    except (OSError, ValueError) as exc:
        print(f"gangwatch serve: {exc}", file=sys.stderr)
        return 2
    app = build_app(ds, prefix=args.path_prefix, refresh_seconds=args.refresh, web_config=web)
    ds.start()
    try:
        return run_server(app, args.listen, web)
    finally:
        ds.close()


if __name__ == "__main__":
    sys.exit(main())
