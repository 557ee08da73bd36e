"""The exporter's state: one Reflector per resource, and the snapshot built from them on demand.

The snapshot is rebuilt only when a cache changed (the sum of the reflectors' generations) and at
most once per `min_rebuild` seconds, in a background thread, so scrapes and snapshot requests never
wait for a build but the first (or a change between fresh and stale, which must show at once). Staleness: while the pods and nodes caches follow the API server the snapshot is
fresh; once either loses it (API server gone, token revoked) the last objects are served marked
stale, `taken_at` being when they were last known current and `failing_since` when that stopped.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Callable

from ..slurm.model import Snapshot
from .api import Client
from .reflector import Reflector
from .resources import RESOURCES, Resource
from .translate import KubeView, build
from .trim import trimmer

log = logging.getLogger(__name__)

NOT_LISTED = "not listed yet"


def build_snapshot(objects: dict, status: dict, now: float, **kw) -> tuple[Snapshot, KubeView]:
    """translate.build with the cyclic garbage collector paused: the build allocates tens of
    thousands of small objects, which would trigger full collections that walk every cached
    object (measured: about half the time of a rebuild after one event at 20,000 pods); it makes
    no reference cycles, so nothing is left for the collector afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        return build(objects, status, now, **kw)
    finally:
        if was:
            gc.enable()


class KubeCache:
    def __init__(self, client: Client, namespace: str = "", resources: tuple[Resource, ...] = RESOURCES,
                 cluster: str = "", watch_timeout: int = 300, page_size: int = 500, retry: float = 30.0,
                 min_rebuild: float = 1.0, clock: Callable[[], float] = time.time):
        self.client, self.cluster, self.clock, self.min_rebuild = client, cluster, clock, min_rebuild
        self.reflectors = {r.key: Reflector(client, r, trimmer(r.key), namespace, page_size=page_size,
                                            watch_timeout=watch_timeout, retry=retry, clock=clock) for r in resources}
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # one build at a time: they share the memo
        self._builder: threading.Thread | None = None
        self._built: tuple[int, bool, float, Snapshot, KubeView] | None = None
        # called with each snapshot built in the background, in that thread: the exporter encodes
        # its JSON there, so no request waits for it
        self.on_built: list[Callable[[Snapshot, KubeView], None]] = []
        self._memo: dict = {}  # translate.build's per-gang results, reused for unchanged objects

    def start(self) -> None:
        for r in self.reflectors.values():
            r.start()

    def stop(self) -> None:
        """End every reflector's thread, then close the connections. A thread still inside a
        request (a LIST page, up to the request timeout) keeps the client open: closing a socket
        another thread reads lets a new connection reuse its descriptor (see api.end_watch)."""
        for r in self.reflectors.values():
            r.stop()
        deadline = time.monotonic() + self.client.timeout + 2.0
        if all(r.join(max(0.0, deadline - time.monotonic())) for r in self.reflectors.values()):
            self.client.close()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.synced or r.absent for r in self.reflectors.values()):
                return True
            time.sleep(0.05)
        return False

    def _critical(self) -> list[Reflector]:
        return [r for r in self.reflectors.values() if r.resource.critical]

    def health(self, now: float) -> dict:
        up = all(r.current() for r in self._critical())
        lasts = [r.last_ok for r in self._critical()]
        age = None if any(x is None for x in lasts) else max(0.0, now - min(lasts))
        return {"up": up, "age": 0.0 if up else age, "requests": self.client.counters.copy(),
                "resources": {k: {"ok": r.healthy, "version": r.version, "objects": len(r._items), "relists": r.relists,
                                  "events": r.events, "error": r.error} for k, r in self.reflectors.items()}}

    def current(self) -> tuple[Snapshot, KubeView] | None:
        """The latest snapshot, or None before pods and nodes were listed once."""
        crit = self._critical()
        if not all(r.synced for r in crit):
            return None
        now = self.clock()
        up = all(r.current() for r in crit)
        gen = sum(r.generation for r in self.reflectors.values())
        with self._lock:
            b = self._built
            # unchanged caches, or changed within min_rebuild (a burst of events): serve what was built
            if b is not None and b[1] == up and (b[0] == gen or now - b[2] < self.min_rebuild):
                return b[3], b[4]
            if b is not None and b[1] == up and self.min_rebuild > 0:
                # changed objects: rebuilt in the background (at 20,000 pods ~0.1 s of CPU, more on a
                # busy host) while this request gets the last build, stamped with its own time
                if self._builder is None or not self._builder.is_alive():
                    self._builder = threading.Thread(target=self._rebuild, name="kube-snapshot", daemon=True)
                    self._builder.start()
                return b[3], b[4]
            # the first build, or up/down changed (stale must show at once): built now
            with self._build_lock:
                snap, view = self.build(now, up)
            self._built = (gen, up, now, snap, view)
            return snap, view

    def _rebuild(self) -> None:
        crit = self._critical()
        now, gen = self.clock(), sum(r.generation for r in self.reflectors.values())
        up = all(r.current() for r in crit)
        with self._build_lock:
            snap, view = self.build(now, up)
        for prepare in self.on_built:  # before it is served; a failing one only costs the time saved
            try:
                prepare(snap, view)
            except Exception:
                log.exception("kube snapshot: preparing the built snapshot failed")
        with self._lock:
            if self._built is None or self._built[2] <= now:  # never replace a newer synchronous build
                self._built = (gen, up, now, snap, view)

    def build(self, now: float, up: bool | None = None) -> tuple[Snapshot, KubeView]:
        crit = self._critical()
        up = all(r.healthy for r in crit) if up is None else up
        objects = {k: r.items() for k, r in self.reflectors.items()}
        # a resource still being listed is named, not served as an empty one (no queue, no workload)
        status = {k: {"ok": r.healthy, "error": r.error or ("" if r.synced or r.absent else NOT_LISTED),
                      "version": r.version, "absent": r.absent}
                  for k, r in self.reflectors.items()}
        taken = now if up else min((r.last_ok or now) for r in crit)
        failing = None if up else min((r.failing_since or now) for r in crit)
        return build_snapshot(objects, status, now, cluster=self.cluster, stale=not up, taken_at=taken,
                              failing_since=failing, memo=self._memo)
