"""`gangwatch slurm-exporter`: Slurm's queue, nodes, partitions, reservations, fairshare and
scheduler statistics as Prometheus metrics (`/metrics`) and as one JSON snapshot
(`/api/v1/snapshot`, the model in collectors/slurm/model.py).

Sources: the Slurm commands on this host (default), or slurmrestd (`--slurm.rest-url`), and the
network topology from `scontrol show topology` or a topology.conf (`--slurm.topology-file`), polled
every `--slurm.poll-interval` seconds by one background thread; scrapes only read the latest
snapshot, so the commands run at most once per interval whatever the number of scrapers.
Privileges: none beyond a user that may run squeue/sinfo/scontrol/sprio/sshare/sdiag (operators see
all users' jobs; `PrivateData` in slurm.conf may hide some). Metrics: see metrics.METRICS.
Failure modes: slurmctld down or slow (commands time out, or the JSON forms answer exit 0 with
"Unable to contact slurm controller" in `errors`), a command exiting non-zero, unparsable or
unexpected output -> the last good snapshot is served marked stale with its age and
`failing_since`, the failure is logged and counted,
`gangwatch_slurm_up 0`, `gangwatch_slurm_command_success{command} 0`; before the first good poll
`/api/v1/snapshot` answers 503 and /metrics carries only the health series. Without a topology
plugin there is no `gangwatch_slurm_node_switch_info` and no error; a failing topology read costs
only the switch map (collectors/slurm/topology.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Callable

from ..exposition import Family, encode
from ..registry import Collector, Context, NoData
from ..runner import CommandRunner
from ..scrape import Scraper, build_info
from ..web import Request, landing_handler, metrics_handler, run_exporter
from .metrics import poller_families, snapshot_families
from .sources import CliSource, Poller, RestSource, TopologyFile

DEFAULT_LISTEN = ":9811"
log = logging.getLogger(__name__)


class SlurmCollector(Collector):
    """Scheduler state from the poller's latest snapshot (never runs Slurm commands itself)."""

    name = "slurm"
    timeout = 5.0

    def __init__(self, ctx: Context, poller: Poller):
        super().__init__(ctx)
        self.poller = poller

    def collect(self) -> list[Family]:
        now = self.ctx.clock()
        snap = self.poller.current()
        if snap is None:
            raise NoData("no successful poll of Slurm yet")
        return snapshot_families(snap, now, int(self.ctx.option("slurm_top_pending", 100)))


class SlurmPollCollector(Collector):
    """Health of the Slurm polling: up, per-command success and duration."""

    name = "slurm_poll"

    def __init__(self, ctx: Context, poller: Poller):
        super().__init__(ctx)
        self.poller = poller

    def collect(self) -> list[Family]:
        return poller_families(self.poller, self.ctx.clock())


def build_parser(prog: str = "gangwatch slurm-exporter") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Slurm state (jobs, nodes, GPUs, reservations, fairshare, sdiag) as Prometheus metrics "
                    "and as a JSON snapshot for the gangwatch dashboard and backfill planner.")
    add_exporter_arguments(p, DEFAULT_LISTEN)
    p.add_argument("--slurm.poll-interval", dest="slurm_poll_interval", type=float, default=15.0,
                   help="Seconds between polls of Slurm; every scrape in between is served from the latest poll.")
    p.add_argument("--slurm.command-timeout", dest="slurm_command_timeout", type=float, default=10.0,
                   help="Seconds one poll of Slurm may take: its commands run concurrently (slurmrestd requests "
                        "in turn) under this one deadline, and whatever is still running then is killed. Capped at "
                        "the poll interval, so a dead or frozen controller shows as gangwatch_slurm_up 0 within "
                        "one interval.")
    p.add_argument("--slurm.bin-dir", dest="slurm_bin_dir", default="",
                   help="Folder holding squeue, sinfo, scontrol, ... (default: search PATH).")
    p.add_argument("--slurm.rest-url", dest="slurm_rest_url", default="",
                   help="Read slurmrestd instead of the commands: unix:/path/to/socket or http(s)://host:port.")
    p.add_argument("--slurm.rest-api-version", dest="slurm_rest_api_version", default="auto",
                   help="OpenAPI version to ask slurmrestd for, e.g. v0.0.40; auto tries the newest first.")
    p.add_argument("--slurm.rest-token-file", dest="slurm_rest_token_file", default="",
                   help="File holding a JWT for slurmrestd (X-SLURM-USER-TOKEN); SLURM_JWT is used when unset.")
    p.add_argument("--slurm.rest-user", dest="slurm_rest_user", default="",
                   help="User name sent with the JWT (X-SLURM-USER-NAME).")
    p.add_argument("--slurm.rest-with-cli", dest="slurm_rest_with_cli", action=argparse.BooleanOptionalAction,
                   default=False, help="With slurmrestd, still run sprio and sshare locally (slurmrestd has neither).")
    p.add_argument("--slurm.no-fairshare", dest="slurm_no_fairshare", action="store_true",
                   help="Do not run sshare nor sacctmgr (clusters without slurmdbd).")
    p.add_argument("--slurm.config-interval", dest="slurm_config_interval", type=float, default=300.0,
                   help="Seconds between reads of Slurm's configuration (`scontrol show config`: SchedulerType and "
                        "SchedulerParameters; QOS limits from `sacctmgr show qos`; `scontrol show licenses`), "
                        "within a poll and under its deadline; the snapshot carries the last good read, so the "
                        "dashboard's backfill plan follows Slurm's parameters. 0: never.")
    p.add_argument("--slurm.topology-file", dest="slurm_topology_file", default="",
                   help="Read the node -> switch tree from this topology.conf at every poll instead of running "
                        "`scontrol show topology` (for slurmrestd, or a controller without topology/tree).")
    p.add_argument("--slurm.no-topology", dest="slurm_no_topology", action="store_true",
                   help="Do not read the network topology at all (no gangwatch_slurm_node_switch_info).")
    p.add_argument("--slurm.top-pending", dest="slurm_top_pending", type=int, default=100,
                   help="Per-job series for at most this many pending jobs (highest priority first); running jobs always.")
    return p


def add_exporter_arguments(p: argparse.ArgumentParser, default_listen: str) -> None:
    """The flags every scheduler exporter shares (node_exporter's names)."""
    p.add_argument("--web.listen-address", dest="web_listen_address", default=default_listen,
                   help="Address to serve on, HOST:PORT or :PORT (all interfaces).")
    p.add_argument("--web.config.file", dest="web_config_file", default=None,
                   help="Exporter-toolkit style YAML enabling TLS and/or basic auth (bcrypt hashes).")
    p.add_argument("--web.telemetry-path", dest="web_telemetry_path", default="/metrics", help="Path of the metrics.")
    p.add_argument("--scrape.timeout", dest="scrape_timeout", type=float, default=5.0,
                   help="Seconds one scrape waits for rendering the snapshot.")
    p.add_argument("--log-level", dest="log_level", default="info", choices=["debug", "info", "warning", "error"])


def make_source(args: argparse.Namespace, runner: CommandRunner | None = None):
    no_topology, topology_file = args.slurm_no_topology, args.slurm_topology_file
    skip = tuple(kind for kind, off in (("fairshare", args.slurm_no_fairshare), ("qos", args.slurm_no_fairshare),
                                        ("topology", no_topology or topology_file)) if off)
    deadline = min(args.slurm_command_timeout, args.slurm_poll_interval)
    cli = CliSource(runner=runner, timeout=deadline, bin_dir=args.slurm_bin_dir, skip=skip,
                    slow_interval=getattr(args, "slurm_config_interval", 300.0))
    source = cli if not args.slurm_rest_url else _rest_source(args, cli)
    if topology_file and not no_topology:
        source = TopologyFile(source, topology_file)
    return source


def _rest_source(args: argparse.Namespace, cli: CliSource) -> RestSource:
    token = ""
    if args.slurm_rest_token_file:
        with open(args.slurm_rest_token_file) as fh:
            token = fh.read().strip()
    else:
        token = os.environ.get("SLURM_JWT", "")
    if token.startswith("SLURM_JWT="):
        token = token[len("SLURM_JWT="):]
    return RestSource(args.slurm_rest_url, args.slurm_rest_api_version, token=token, user=args.slurm_rest_user,
                      timeout=min(args.slurm_command_timeout, args.slurm_poll_interval), extras=cli if args.slurm_rest_with_cli else None)


class SnapshotBody:
    """The JSON body of the served snapshot, made once per snapshot: building the plain dict (10k
    Slurm jobs: ~0.5 s) and encoding it (5,000 Kubernetes gangs: 8.8 MiB, 20 ms on a quiet core,
    over 100 ms on a busy one) are paid when the snapshot changes, not per request. A request
    splices its own age in front of the encoded rest; `?pretty` (for people) encodes in full."""

    def __init__(self):
        self._cur: tuple = (None, {}, b"")  # (snapshot, doc without its age, doc encoded); one tuple: threads see all or nothing

    def prepare(self, snap, make_doc: Callable[[], dict]) -> tuple:
        """Make and encode the document of `snap` unless that is done (callable ahead of requests)."""
        cur = self._cur
        if cur[0] is not snap:
            doc = make_doc()
            doc.pop("age_seconds", None)
            cur = self._cur = (snap, doc, dumps_json(doc))
        return cur

    def render(self, snap, make_doc: Callable[[], dict], age: float, pretty: bool = False) -> bytes:
        cur = self.prepare(snap, make_doc)
        age = round(age, 3)
        if pretty or not cur[1]:
            return dumps_json(dict(cur[1], age_seconds=age), pretty=pretty)
        return b'{"age_seconds":' + dumps_json(age) + b"," + cur[2][1:]


def snapshot_handler(poller: Poller, clock=time.time):
    body = SnapshotBody()

    def handle(req: Request):
        snap = poller.current()
        if snap is None:
            doc = json.dumps({"error": "no successful poll of Slurm yet",
                              "statuses": {k: {"ok": v.ok, "error": v.error} for k, v in poller.health()["statuses"].items()}})
            return 503, "application/json", doc.encode(), {"Retry-After": "5"}
        return 200, "application/json", body.render(snap, snap.to_dict, snap.age(clock()), "pretty" in req.query), {}
    return handle


def dumps_json(doc: dict, pretty: bool = False) -> bytes:
    from .parse_json import _orjson

    if _orjson is not None:
        return _orjson.dumps(doc, option=_orjson.OPT_INDENT_2 if pretty else 0)
    return json.dumps(doc, indent=2 if pretty else None, allow_nan=False).encode()


def build_app(args: argparse.Namespace, source=None, runner: CommandRunner | None = None, clock=time.time):
    """(poller, scraper, routes) for the exporter; tests build it over a fake runner."""
    poller = Poller(source or make_source(args, runner), interval=args.slurm_poll_interval, clock=clock)
    ctx = Context(clock=clock, options=vars(args))
    scraper = Scraper([SlurmPollCollector(ctx, poller), SlurmCollector(ctx, poller)], timeout=args.scrape_timeout,
                      cache_ttl=1.0, static=[build_info("gangwatch", "slurm-exporter")])
    routes = {
        args.web_telemetry_path: metrics_handler(scraper),
        "/api/v1/snapshot": snapshot_handler(poller, clock),
        "/": landing_handler("gangwatch slurm-exporter", {args.web_telemetry_path: "Metrics",
                                                          "/api/v1/snapshot?pretty": "Snapshot (JSON)"}),
    }
    return poller, scraper, routes


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def build():
        poller, scraper, routes = build_app(args)

        def stop() -> None:
            poller.stop()
            scraper.close()

        return routes, poller.start, stop

    return run_exporter("gangwatch slurm-exporter", args.web_listen_address, args.web_config_file, build)


def render_once(poller: Poller, now: float, top_pending: int = 100) -> str:
    """The /metrics text for the poller's current state without HTTP (used by tests and bench)."""
    fams = poller_families(poller, now)
    snap = poller.current()
    if snap is not None:
        fams += snapshot_families(snap, now, top_pending)
    return encode(fams)
