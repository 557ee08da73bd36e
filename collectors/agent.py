"""`gangwatch agent`: the node agent, serving every enabled collector on one `/metrics`."""

from __future__ import annotations

import argparse
import logging
import sys

from . import probe
from .registry import Context, Paths, load_builtin_collectors
from .runner import CommandRunner
from .scrape import Scraper, build_info
from .web import landing_handler, metrics_handler, run_exporter

DEFAULT_LISTEN = ":9810"


def build_parser(prog: str = "gangwatch agent") -> argparse.ArgumentParser:
    collectors = load_builtin_collectors()
    p = argparse.ArgumentParser(
        prog=prog,
        description="gangwatch node agent: GPUs, filesystems, disks, network, InfiniBand, pressure and "
                    "Slurm job cgroups as Prometheus metrics. Flags follow node_exporter's conventions.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--web.listen-address", dest="web_listen_address", default=DEFAULT_LISTEN,
                   help="Address to serve /metrics on, HOST:PORT or :PORT (all interfaces).")
    p.add_argument("--web.config.file", dest="web_config_file", default=None,
                   help="Exporter-toolkit style YAML enabling TLS and/or basic auth (bcrypt hashes).")
    p.add_argument("--web.telemetry-path", dest="web_telemetry_path", default="/metrics",
                   help="Path under which metrics are served.")
    p.add_argument("--path.procfs", dest="path_procfs", default="/proc", help="procfs mountpoint.")
    p.add_argument("--path.sysfs", dest="path_sysfs", default="/sys", help="sysfs mountpoint.")
    p.add_argument("--path.rootfs", dest="path_rootfs", default="/",
                   help="Root of the host filesystem (for mount points and cgroups).")
    p.add_argument("--scrape.timeout", dest="scrape_timeout", type=float, default=0.9,
                   help="Seconds one scrape waits for its collectors; a slower collector is reported "
                        "failed for that scrape.")
    p.add_argument("--scrape.cache-ttl", dest="scrape_cache_ttl", type=float, default=1.0,
                   help="Seconds a finished collection is served again to other scrapers, so that "
                        "several Prometheus servers do not multiply the collection cost. 0 disables.")
    p.add_argument("--log-level", dest="log_level", default="info",
                   choices=["debug", "info", "warning", "error"], help="Log level.")
    for name, cls in collectors.items():
        doc = (cls.__doc__ or "").strip().splitlines()
        p.add_argument(f"--collector.{name}", dest=f"collector_{name}", action=argparse.BooleanOptionalAction,
                       default=cls.default_enabled,
                       help=f"Enable the {name} collector" + (f": {doc[0]}" if doc else "."))
        cls.add_arguments(p)
    probe.add_arguments(p)
    return p


def build_scraper(args: argparse.Namespace, runner: CommandRunner | None = None, nvml=None) -> Scraper:
    collectors = load_builtin_collectors()
    ctx = Context(paths=Paths(args.path_procfs, args.path_sysfs, args.path_rootfs),
                  runner=runner or CommandRunner(), nvml=nvml, options=vars(args))
    enabled = [cls(ctx) for name, cls in collectors.items() if getattr(args, f"collector_{name}")]
    return Scraper(enabled, timeout=args.scrape_timeout, cache_ttl=args.scrape_cache_ttl,
                   static=[build_info("gangwatch", "agent")], cadence=ctx.cadence)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prober = None
    if args.probe_enable:
        from .web import WebConfig

        try:
            users = bool(WebConfig.load(args.web_config_file).users)
        except ValueError:
            users = None  # a bad web config is reported by run_exporter below, in its own words
        if users is not None:
            try:
                prober = probe.build_service(args, users)
            except ValueError as exc:
                print(f"gangwatch agent: {exc}", file=sys.stderr)
                return 2

    def build():
        scraper = build_scraper(args)
        routes = {
            args.web_telemetry_path: metrics_handler(scraper),
            "/": landing_handler("gangwatch agent", {args.web_telemetry_path: "Metrics"}),
        }
        if prober is not None:
            routes.update(prober.routes())
        return routes, lambda: None, scraper.close

    return run_exporter("gangwatch agent", args.web_listen_address, args.web_config_file, build)
