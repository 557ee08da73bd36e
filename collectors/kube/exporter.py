"""`gangwatch kube-exporter`: Volcano and Kueue gang jobs on Kubernetes as Prometheus metrics
(`/metrics`, `gangwatch_kube_*`) and as the scheduler snapshot (`/api/v1/snapshot`, the same schema
as the Slurm exporter's, plus a `kube` section: why each gang waits, its position, queue quotas).

Sources: the API server named by `--kube.config` (a kubeconfig; default $KUBECONFIG, else the pod's
service account): LIST then WATCH of nodes, pods, Volcano podgroups/queues/jobs and Kueue
workloads/clusterqueues/localqueues/resourceflavors (collectors/kube/resources.py), each in its own
thread (collectors/kube/reflector.py). Privileges: get/list/watch on exactly those resources
(deploy/kubernetes/clusterrole.yaml). Failure modes: a resource forbidden by RBAC, not installed or
served in an unknown version is absent and named (`gangwatch_kube_resource_up 0`, snapshot errors),
the rest is served; the API server gone: the last objects are served marked stale with their age
(`gangwatch_kube_up 0`), never a crash; before pods and nodes were listed once `/api/v1/snapshot`
answers 503.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import time

from ..exposition import Family
from ..registry import Collector, Context, NoData
from ..scrape import Scraper, build_info
from ..slurm.exporter import SnapshotBody, add_exporter_arguments
from ..slurm.model import to_plain
from ..web import Request, landing_handler, metrics_handler, run_exporter
from .api import Client, in_cluster, load_kubeconfig
from .cache import KubeCache
from .metrics import cache_families, snapshot_families

DEFAULT_LISTEN = ":9812"
log = logging.getLogger(__name__)


class KubeCollector(Collector):
    name = "kube"
    timeout = 5.0

    def __init__(self, ctx: Context, cache: KubeCache):
        super().__init__(ctx)
        self.cache = cache

    def collect(self) -> list[Family]:
        got = self.cache.current()
        if got is None:
            raise NoData("pods and nodes not listed yet")
        return snapshot_families(got[0], got[1], self.ctx.clock(), int(self.ctx.option("kube_top_pending", 100)))


class KubeCacheCollector(Collector):
    name = "kube_watch"

    def __init__(self, ctx: Context, cache: KubeCache):
        super().__init__(ctx)
        self.cache = cache

    def collect(self) -> list[Family]:
        return cache_families(self.cache, self.ctx.clock())


def build_parser(prog: str = "gangwatch kube-exporter") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Volcano PodGroups and Kueue Workloads (gang jobs on Kubernetes) as Prometheus metrics and "
                    "as the gangwatch scheduler snapshot, with why each pending gang waits.")
    add_exporter_arguments(p, DEFAULT_LISTEN)
    p.add_argument("--kube.config", dest="kube_config", default=os.environ.get("KUBECONFIG", ""),
                   help="kubeconfig file; empty: the pod's service account (in-cluster).")
    p.add_argument("--kube.context", dest="kube_context", default="", help="kubeconfig context (default: current).")
    p.add_argument("--kube.namespace", dest="kube_namespace", default="",
                   help="Read namespaced objects of this namespace only (nodes, queues, ClusterQueues stay cluster-wide).")
    p.add_argument("--kube.cluster-name", dest="kube_cluster_name", default="", help="Cluster name in the snapshot.")
    p.add_argument("--kube.watch-timeout", dest="kube_watch_timeout", type=int, default=300,
                   help="Seconds one WATCH lasts before it is renewed from its resourceVersion.")
    p.add_argument("--kube.page-size", dest="kube_page_size", type=int, default=500, help="Objects per LIST page.")
    p.add_argument("--kube.request-timeout", dest="kube_request_timeout", type=float, default=10.0,
                   help="Seconds one request (a LIST page, a connect) may take.")
    p.add_argument("--kube.retry-interval", dest="kube_retry_interval", type=float, default=30.0,
                   help="Seconds between tries of a forbidden, absent or failing resource (backoff up to this).")
    p.add_argument("--kube.top-pending", dest="kube_top_pending", type=int, default=100,
                   help="Per-gang series for the first this many pending gangs of each queue.")
    return p


def credentials(args: argparse.Namespace):
    if args.kube_config:
        return load_kubeconfig(args.kube_config, args.kube_context)
    return in_cluster()


class PlainMemo:
    """The plain dicts of a snapshot's jobs, nodes and gangs, kept per object between snapshots.
    translate.build hands on the very Job, Node and Gang objects of what did not change, so a new
    document after one watch event converts only what changed: converting all of them took ~1 s of
    CPU at 5,000 gangs on a busy host, paid by the first request after every change."""

    def __init__(self):
        self._prev: dict[str, dict[int, tuple]] = {}

    def plain(self, kind: str, items: tuple) -> list:
        prev, new, out = self._prev.get(kind, {}), {}, []
        for it in items:
            hit = prev.get(id(it))
            d = hit[1] if hit is not None and hit[0] is it else to_plain(it)
            new[id(it)] = (it, d)
            out.append(d)
        self._prev[kind] = new  # objects gone from the snapshot are dropped with the old map
        return out


def snapshot_document(snap, view, now: float, memo: PlainMemo | None = None) -> dict:
    """The snapshot schema plus the `kube` section; with `memo`, unchanged objects are not converted again."""
    memo = PlainMemo() if memo is None else memo
    doc = dataclasses.replace(snap, jobs=(), nodes=()).to_dict(now)
    doc["jobs"], doc["nodes"] = memo.plain("jobs", snap.jobs), memo.plain("nodes", snap.nodes)
    kube = to_plain(dataclasses.replace(view, gangs=()))
    kube["gangs"] = memo.plain("gangs", view.gangs)
    doc["kube"] = kube
    return doc


def snapshot_handler(cache: KubeCache, clock=time.time):
    body, memo = SnapshotBody(), PlainMemo()

    def document(snap, view):
        return lambda: snapshot_document(snap, view, snap.taken_at, memo)

    def prepare(snap, view) -> None:
        body.prepare(snap, document(snap, view))

    cache.on_built.append(prepare)

    def handle(req: Request):
        got = cache.current()
        if got is None:
            h = cache.health(clock())
            doc = json.dumps({"error": "pods and nodes not listed yet",
                              "resources": {k: v["error"] for k, v in h["resources"].items() if v["error"]}})
            return 503, "application/json", doc.encode(), {"Retry-After": "5"}
        snap, view = got
        return 200, "application/json", body.render(snap, document(snap, view), snap.age(clock()), "pretty" in req.query), {}
    return handle


def build_app(args: argparse.Namespace, client: Client | None = None, clock=time.time):
    """(cache, scraper, routes); tests build it over a client of their own."""
    if client is None:
        client = Client(credentials(args), timeout=args.kube_request_timeout)
    cache = KubeCache(client, namespace=args.kube_namespace, cluster=args.kube_cluster_name,
                      watch_timeout=args.kube_watch_timeout, page_size=args.kube_page_size,
                      retry=args.kube_retry_interval, clock=clock)
    ctx = Context(clock=clock, options=vars(args))
    scraper = Scraper([KubeCacheCollector(ctx, cache), KubeCollector(ctx, cache)], timeout=args.scrape_timeout,
                      cache_ttl=1.0, static=[build_info("gangwatch", "kube-exporter")])
    routes = {
        args.web_telemetry_path: metrics_handler(scraper),
        "/api/v1/snapshot": snapshot_handler(cache, clock),
        "/": landing_handler("gangwatch kube-exporter", {args.web_telemetry_path: "Metrics",
                                                         "/api/v1/snapshot?pretty": "Snapshot (JSON)"}),
    }
    return cache, scraper, routes


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def build():
        try:
            cache, scraper, routes = build_app(args)
        except (ValueError, KeyError) as exc:
            raise OSError(f"cannot read Kubernetes credentials: {exc}") from exc

        def stop() -> None:
            cache.stop()
            scraper.close()

        return routes, cache.start, stop

    return run_exporter("gangwatch kube-exporter", args.web_listen_address, args.web_config_file, build)
