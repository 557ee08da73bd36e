"""`gangwatch demo`: a SIMULATED GPU cluster and the gangwatch dashboard in one process.

The simulation (dashboard/analysis/sim) starts with an hour of history already simulated, then a
background thread advances it by one 15 s step every 15/`--speed` real seconds. Served, on
127.0.0.1:8050 by default (`--web.listen-address`):

| path | content |
|---|---|
| `/` and the pages below it | the dashboard (dashboard/app.py) over the simulator; every page says SIMULATED |
| `/api/v1/findings`, `/api/v1/backfill` | the dashboard's findings and backfill plan, as for `serve` |
| `/metrics` | what `serve` has on `/metrics`: the findings as metrics, the backfill plan's `gangwatch_backfill_*` and (with the dashboard) `gangwatch_serve_*` |
| `/metrics?target=node0042` | that virtual node's agent `/metrics` (multi-target, as the blackbox exporter) |
| `/slurm/metrics` | what `gangwatch slurm-exporter` would serve for the cluster, `gangwatch_slurm_node_switch_info` included (from the simulated fabric, as the exporter reads `scontrol show topology`), plus `gangwatch_sim_*` |
| `/api/v1/snapshot` | the simulated scheduler as the slurm-exporter's snapshot JSON |
| `/api/v1/sim/faults` | ground truth of every injected fault (kind, cause, culprit, window, nodes, jobs) |
| `/sim/` | a plain page about the simulation, linking these endpoints |
| `/sim/prometheus.yml` | a Prometheus scrape config with rules/alerts.yml's job names: gangwatch-agent (every virtual node), gangwatch-slurm, gangwatch-serve |
| `/sim/topology.conf` | the InfiniBand tree in Slurm's topology.conf syntax |
| `/healthz` | 200 and the age of each source |

By default the cluster is offered 1.3x its capacity (`--load`), the scheduler ranks jobs by Slurm's
multifactor priority (fairshare), and the showcase scene (`--scenario`, sim/showcase.py) and fault
scenario (`--faults showcase`) put every feature on show in the first minute: big gangs waiting
with backfill windows and startable jobs, a maintenance reservation, afterok pipelines (one never
satisfied), a suspended job, GPU topology with placement findings, and each fault kind.

The demo is `serve` on a simulated cluster, so `/metrics` is serve's (ARCHITECTURE.md); the agents
it stands in for answer on the same path with `?target=` and the slurm-exporter on `/slurm/metrics`,
so one Prometheus scrapes all three as a site scrapes its agents, exporter and serve. The findings
come from the diagnosis over the simulation's own history, in simulated time: `--speed` does not
distort them (rates an external Prometheus computes are `--speed` times too high, though).
`--no-dashboard` serves the simulator's endpoints and `/metrics` without Dash (lighter), computing
the findings and the backfill plan at most once per simulated step when scraped, with the `/sim/`
page at `/` as well.

Privileges: none. Failure modes: an unknown `target` answers 404; a node under a `scrape_hang` or
`scrape_slow` fault answers after its delay (that is the point); `--trace` that cannot be read, or
a `--faults` that does not parse, stops the command at start with the reason (exit 2); a build
without the dashboard's dependencies falls back to `--no-dashboard` with a warning.
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import logging
import sys
import threading
import time

from collectors.exposition import Family, encode
from collectors.web import (Request, Response, WebConfig, WebConfigError, accepts_gzip, make_server,
                            serve_forever)
from dashboard.analysis.sim import SimConfig, Simulation
from dashboard.analysis.sim.faults import KINDS
from dashboard.analysis.sim.render import NodeRenderer
from dashboard.analysis.sim.slurm_view import build_snapshot, exporter_families
from dashboard.findings_api import backfill_families, simulation_diagnosis
from dashboard.findings_api import findings_families as diagnosis_families

DEFAULT_LISTEN = "127.0.0.1:8050"
TEXT = "text/plain; version=0.0.4; charset=utf-8"
JSON = "application/json"
log = logging.getLogger(__name__)


class Demo:
    """The simulation, a lock around it, and the HTTP handlers; `advance()` is the clock."""

    def __init__(self, sim: Simulation, speed: float = 1.0, sleep=time.sleep):
        self.sim = sim
        self.dashboard = False  # whether the dashboard is mounted at /
        self.speed = speed
        self.lock = threading.RLock()
        self.renderer = NodeRenderer(sim)
        self._snap = None
        self._snap_step = -1
        self._bodies: dict[str, bytes] = {}
        self._sleep = sleep
        self._stop = threading.Event()
        self.public_address = DEFAULT_LISTEN
        # serve's /metrics text; build_dashboard() replaces it with the dashboard's own
        self.serve_metrics = self._sim_serve_metrics
        self._serve_lock = threading.Lock()  # one diagnosis at a time, outside the simulation's lock
        self._serve_body = (-1, b"")

    # ---- the clock

    def advance(self, steps: int = 1) -> None:
        with self.lock:
            for _ in range(steps):
                self.sim.step()

    def run(self) -> None:
        """Step every step_seconds / speed real seconds until stop(); never faster than it can compute."""
        if self.speed <= 0:
            return
        period = self.sim.dt / self.speed
        due = time.monotonic() + period
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self.advance()
            due += period
            if time.monotonic() - due > 10 * period:  # fell far behind: do not try to catch up in a burst
                due = time.monotonic() + period

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="sim-clock", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()

    # ---- data

    def snapshot(self):
        with self.lock:
            if self._snap_step != self.sim.steps:
                self._snap = build_snapshot(self.sim)
                self._snap_step = self.sim.steps
                self._bodies = {}
            return self._snap

    def _cached(self, key: str, build) -> bytes:
        """A body computed at most once per simulated step (4,096 nodes: ~0.3 s each to build)."""
        with self.lock:
            self.snapshot()
            body = self._bodies.get(key)
            if body is None:
                body = self._bodies[key] = build()
            return body

    # ---- handlers

    def sim_routes(self) -> dict:
        """The simulator's own endpoints (mounted beside the dashboard, or alone)."""
        return {"/sim/": self.landing, "/metrics": self.metrics, "/slurm/metrics": self.slurm_metrics,
                "/api/v1/snapshot": self.api_snapshot,
                "/api/v1/sim/faults": self.api_faults, "/sim/prometheus.yml": self.prometheus_yml,
                "/sim/topology.conf": self.topology}

    def routes(self) -> dict:
        """Everything, for the lean server without the dashboard."""
        return {**self.sim_routes(), "/": self.landing, "/healthz": self.healthz}

    def metrics(self, req: Request) -> Response:
        target = (req.query.get("target") or [""])[0]
        if target:
            try:
                i = self.sim.cluster.index(target)
            except KeyError:
                return 404, "text/plain; charset=utf-8", f"no simulated node {target!r}\n".encode(), {}
            fault = self.sim.endpoint_delay(target)
            if fault is not None:
                self._stop.wait(fault[1])  # a hanging or slow agent; the wait ends early at shutdown
            # once per node and step however many scrape it (Prometheus beside vmagent shards, a
            # replicationFactor=2): the page changes only when the simulation steps
            if accepts_gzip(req.headers.get("accept-encoding", "")):
                return 200, TEXT, self._cached(f"node-gz:{i}", lambda: gzip.compress(self.renderer.render(i).encode(), 1)), \
                    {"Content-Encoding": "gzip"}
            return 200, TEXT, self._cached(f"node:{i}", lambda: self.renderer.render(i).encode()), {}
        return _text(req, self.serve_metrics())

    def slurm_metrics(self, req: Request) -> Response:
        return _text(req, self._cached("slurm", lambda: encode(self.slurm_families()).encode()))

    def slurm_families(self) -> list[Family]:
        return exporter_families(self.sim, self.snapshot())

    def _sim_serve_metrics(self) -> bytes:
        """Without the dashboard: the diagnosis over the simulation's own window and the backfill
        plan of its snapshot, computed at most once per simulated step."""
        from dashboard.analysis.planner import plan
        from dashboard.analysis.snapshot_to_planner import snapshot_to_planner

        with self._serve_lock:
            with self.lock:
                step, snap = self.sim.steps, self.snapshot()
            if self._serve_body[0] != step:
                fams = diagnosis_families(simulation_diagnosis(self.sim, snap, self.lock))
                try:
                    fams += backfill_families(plan(snapshot_to_planner(snap, snap.taken_at)))
                except Exception:  # the planner must not take the findings down
                    log.exception("backfill planner failed")
                self._serve_body = (step, encode(fams).encode())
            return self._serve_body[1]

    def api_snapshot(self, req: Request) -> Response:
        return 200, JSON, self._cached("snapshot", lambda: self.snapshot().to_json(now=self.sim.t).encode()), {}

    def api_faults(self, req: Request) -> Response:
        with self.lock:
            doc = {"simulated": True, "now": self.sim.t, "faults": self.sim.ground_truth()}
        return 200, JSON, json.dumps(doc).encode(), {}

    def topology(self, req: Request) -> Response:
        return 200, "text/plain; charset=utf-8", self.sim.cluster.topology_conf().encode(), {}

    def prometheus_yml(self, req: Request) -> Response:
        address = req.headers.get("host") or self.public_address  # as the client reached us
        return 200, "text/yaml; charset=utf-8", prometheus_config(self.sim.cluster.names, address).encode(), {}

    def healthz(self, req: Request) -> Response:
        with self.lock:
            doc = {"status": "ok", "simulated": True, "sim_time": self.sim.t, "steps": self.sim.steps,
                   "sources": {"simulator": {"age_seconds": 0.0}}}
        return 200, JSON, json.dumps(doc).encode(), {}

    def landing(self, req: Request) -> Response:
        sim = self.sim
        with self.lock:
            running, pending, active = len(sim.running), len(sim.pending), [af.spec.kind for af in sim.active]
            t = sim.t
        first = sim.cluster.names[0]
        e = html.escape
        workload = sim.cfg.trace or "model fitted to the Microsoft ITP 2021 trace"
        links = [("/", "the dashboard")] if self.dashboard else []
        links += [("/metrics", "findings as metrics (what serve exports)"),
                 ("/slurm/metrics", "cluster metrics (simulated slurm-exporter)"),
                 (f"/metrics?target={first}", f"agent metrics of {first} (any node: ?target=NAME)"),
                 ("/api/v1/snapshot", "scheduler snapshot (JSON)"), ("/api/v1/sim/faults", "injected faults, ground truth (JSON)"),
                 ("/sim/prometheus.yml", "Prometheus scrape config for every virtual node"),
                 ("/sim/topology.conf", "InfiniBand topology (Slurm topology.conf)"), ("/healthz", "health")]
        if self.dashboard:
            links += [("/api/v1/findings", "findings (JSON)"), ("/api/v1/backfill", "backfill plan (JSON)")]
        items = "".join(f'<li><a href="{e(h, quote=True)}">{e(text)}</a></li>' for h, text in links)
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>gangwatch demo: SIMULATED cluster</title></head>"
            "<body><p style='background:#ffd54f;padding:.6em;font-weight:bold'>This cluster is SIMULATED. "
            "No real nodes, jobs or users are shown.</p><h1>gangwatch demo</h1>"
            f"<p>{sim.cluster.n} simulated nodes x {sim.cluster.g} GPUs, seed {e(str(sim.cfg.seed))}, "
            f"speed {e(f'{self.speed:g}')}x, workload: {e(workload)}.</p>"
            f"<p>Simulated time {e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(t)))}: {running} running jobs, "
            f"{pending} pending; active faults: {e(', '.join(active) or 'none')}.</p><ul>{items}</ul></body></html>")
        return 200, "text/html; charset=utf-8", page.encode(), {}


def build_dashboard(demo: Demo, web_config: WebConfig | None = None, refresh_seconds: float = 15.0):
    """The dashboard (dashboard/app.py) over the simulator, with the simulator's endpoints beside it.
    Returns (Dash app, datasource); the datasource's background thread stops with `ds.close()`."""
    from dashboard.app import build_app, findings_families, serve_families
    from dashboard.datasource.simulator import SimDatasource

    ds = SimDatasource(demo.sim, lock=demo.lock, snapshot_fn=demo.snapshot, background=True)
    # serve's /metrics over the dashboard's datasource (precomputed after each step in the background)
    demo.serve_metrics = lambda: encode(findings_families(ds) + backfill_families(ds.backfill())
                                        + serve_families(ds)).encode()
    app = build_app(ds, refresh_seconds=refresh_seconds, web_config=web_config, extra_routes=demo.sim_routes(),
                    title="gangwatch demo (SIMULATED)")
    demo.dashboard = True
    return app, ds


def prometheus_config(names: list[str], address: str) -> str:
    """A scrape config for the demo under the job names rules/alerts.yml expects: every node through
    ?target= (with `node` = the node name, as rules/prometheus.example.yml sets it for real agents),
    the simulated slurm-exporter, and the demo's own /metrics as serve's."""
    targets = ", ".join(f"'{n}'" for n in names)
    return f"""# Scrape config for `gangwatch demo` at {address} (a SIMULATED cluster).
scrape_configs:
  - job_name: gangwatch-agent
    metrics_path: /metrics
    static_configs: [{{targets: [{targets}]}}]
    relabel_configs:
      - {{source_labels: [__address__], target_label: __param_target}}
      - {{source_labels: [__param_target], target_label: instance}}
      - {{source_labels: [__param_target], target_label: node}}
      - {{target_label: __address__, replacement: '{address}'}}
  - job_name: gangwatch-slurm
    metrics_path: /slurm/metrics
    static_configs: [{{targets: ['{address}']}}]
  - job_name: gangwatch-serve
    metrics_path: /metrics
    static_configs: [{{targets: ['{address}']}}]
"""


def _text(req: Request, data: bytes) -> Response:
    if accepts_gzip(req.headers.get("accept-encoding", "")):
        return 200, TEXT, gzip.compress(data, 1), {"Content-Encoding": "gzip"}
    return 200, TEXT, data, {}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangwatch demo", description="A SIMULATED GPU cluster and the dashboard over it: "
                                "agent metrics for every virtual node, the scheduler snapshot, injected faults.")
    p.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    p.add_argument("--web.config.file", dest="web_config", default=None, help="exporter-toolkit web config (TLS, basic auth)")
    p.add_argument("--nodes", type=int, default=64, help="virtual nodes, 8 GPUs each (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same cluster (default %(default)s)")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second (default %(default)s; "
                   "above 1, rates an external Prometheus computes are that many times too high)")
    p.add_argument("--trace", default=None, help="replay a workload trace: Microsoft ITP tar.gz (FILE#cluster04 for one "
                   "cluster) or CSV, or the Philly CSV; default: the model fitted to ITP")
    p.add_argument("--faults", default="showcase", help="'showcase' (every kind active as the pre-filled hour ends), "
                   "'default' (one of each kind, spread over two hours), 'none', 'random:RATE' per hour, "
                   f"or KIND@START+DURATION:key=value;... (kinds: {', '.join(KINDS)})")
    p.add_argument("--load", type=float, default=1.3, help="offered GPU load relative to capacity (default %(default)s: "
                   "above 1, as busy GPU clusters run, so a queue builds)")
    p.add_argument("--scenario", choices=("showcase", "none"), default="showcase",
                   help="'showcase' adds big gangs waiting, dependency pipelines, a maintenance reservation and a "
                        "suspended job to the workload (default %(default)s)")
    p.add_argument("--fabric", choices=("ib", "roce"), default="ib",
                   help="compute fabric of the virtual nodes: InfiniBand (port_xmit_wait) or RoCE (ECN, CNP and "
                        "PFC pause counters; no transmit wait) (default %(default)s)")
    p.add_argument("--policy", choices=("easy", "fcfs"), default="easy", help="scheduling policy (default %(default)s)")
    p.add_argument("--no-dashboard", action="store_true", help="serve only the simulator's endpoints (no Dash)")
    p.add_argument("--refresh", type=float, default=15.0, help="dashboard refresh interval in seconds (default %(default)s)")
    p.add_argument("--history", type=float, default=3600.0, help="seconds of history pre-filled and kept (default %(default)s)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p


def sim_config(args: argparse.Namespace, now: float) -> SimConfig:
    """The simulation the command line asks for, its history ending at `now`."""
    return SimConfig(nodes=args.nodes, seed=args.seed, start=now - args.history, history_seconds=args.history,
                     trace=args.trace, faults=args.faults, load=args.load, policy=args.policy,
                     showcase=args.scenario == "showcase", priority="multifactor", fabric=args.fabric)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "debug":  # one line per scrape of every virtual node would drown the log
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if not 1 <= args.nodes <= 16_384:
        print("gangwatch demo: --nodes must be between 1 and 16384 (one hour of history takes ~0.1 MiB per node)", file=sys.stderr)
        return 2
    try:
        web = WebConfig.load(args.web_config)
        cfg = sim_config(args, time.time())
        log.info("simulating %d nodes (seed %d): pre-filling %.0f s of history", args.nodes, args.seed, args.history)
        sim = Simulation(cfg)
    except (ValueError, OSError, WebConfigError) as exc:
        print(f"gangwatch demo: {exc}", file=sys.stderr)
        return 2
    demo = Demo(sim, args.speed)
    if not args.no_dashboard:
        try:
            app, ds = build_dashboard(demo, web, args.refresh)
        except ImportError as exc:
            log.warning("the dashboard is not available in this build (%s): serving the simulator only", exc)
        else:
            from dashboard.serve import run_server

            print(f"gangwatch demo: SIMULATED cluster of {args.nodes} nodes", flush=True)
            demo.start()
            try:
                return run_server(app, args.listen, web, banner="gangwatch demo")
            finally:
                demo.stop()
                ds.close()
    try:
        server = make_server(args.listen, demo.routes(), web, default_host="127.0.0.1")
    except (OSError, ValueError) as exc:
        print(f"gangwatch demo: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    demo.public_address = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    print(f"gangwatch demo: SIMULATED cluster of {args.nodes} nodes on http://{demo.public_address}/", flush=True)
    demo.start()
    try:
        serve_forever(server)
    finally:
        demo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
