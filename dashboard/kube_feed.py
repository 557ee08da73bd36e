"""The Kubernetes scheduler source of `gangwatch serve --kube-exporter URL`, alone or beside Slurm.

The kube-exporter's /api/v1/snapshot is the Slurm snapshot schema plus a `kube` section (why each
gang waits, its position, queue quotas). `KubeFeed.fetch` reads both: the Snapshot goes to the
pages and the diagnosis like any scheduler snapshot, the `kube` section to the Kubernetes page.
With Slurm as well, `merged` puts both clusters in one Snapshot (jobs, nodes and queues of each,
Kubernetes gangs flagged `volcano`/`kueue`); a failing source keeps its last snapshot, marked stale,
so one scheduler going away never blanks the other.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Callable

from collectors.slurm.model import Snapshot, SourceError

KUBE_FLAGS = ("volcano", "kueue")


def is_kube(job) -> bool:
    return bool(job.flags) and job.flags[0] in KUBE_FLAGS


class KubeFeed:
    def __init__(self, url: str, timeout: float = 10.0, reader: Callable[[], bytes] | None = None):
        self.url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/api/v1/snapshot") else "/api/v1/snapshot")
        self.timeout = timeout
        self._reader = reader
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._view: dict = {}
        self.error = ""

    def _read(self) -> bytes:
        if self._reader is not None:
            return self._reader()
        from collectors import fetch as http

        r = http.get(self.url, self.timeout)
        r.raise_for_status()
        return r.content

    def fetch(self) -> Snapshot:
        """The latest snapshot; raises when the exporter cannot be read (the caller keeps the last)."""
        doc = json.loads(self._read())
        if not isinstance(doc, dict) or "taken_at" not in doc:
            raise ValueError(f"{self.url} is not a gangwatch snapshot (no taken_at)")
        snap = Snapshot.from_dict(doc)
        view = doc.get("kube") if isinstance(doc.get("kube"), dict) else {}
        with self._lock:
            self._snap, self._view, self.error = snap, view, ""
        return snap

    def last(self) -> Snapshot | None:
        with self._lock:
            return self._snap

    def view(self) -> dict:
        with self._lock:
            return self._view


def merged(slurm_fn: Callable[[], Snapshot | None], feed: KubeFeed) -> Callable[[], Snapshot]:
    """One Snapshot holding both schedulers' clusters; each side's failure costs only that side."""
    last_slurm: dict = {}

    def side(fn, name: str):
        try:
            snap = fn()
            if snap is not None:
                last_slurm[name] = snap
            return snap, None
        except Exception as exc:  # noqa: BLE001 - a source's failure is data for the banner
            prev = last_slurm.get(name)
            err = SourceError(name, f"{type(exc).__name__}: {exc}")
            return (replace(prev, stale=True, errors=(err,) + prev.errors) if prev is not None else None), err

    def fetch() -> Snapshot:
        s, s_err = side(slurm_fn, "slurm")
        k, k_err = side(feed.fetch, "kubernetes")
        if s is None and k is None:
            raise RuntimeError("; ".join(f"{e.source}: {e.message}" for e in (s_err, k_err) if e))
        parts = [x for x in (s, k) if x is not None]
        errors = tuple(e for x in parts for e in x.errors) + tuple(
            e for e, x in ((s_err, s), (k_err, k)) if e is not None and x is None)
        first = parts[0]
        return replace(first, taken_at=min(x.taken_at for x in parts), source="+".join(x.source for x in parts),
                       cluster=" + ".join(x.cluster for x in parts if x.cluster),
                       jobs=tuple(j for x in parts for j in x.jobs), nodes=tuple(n for x in parts for n in x.nodes),
                       partitions=tuple(p for x in parts for p in x.partitions),
                       reservations=tuple(r for x in parts for r in x.reservations),
                       errors=errors, stale=any(x.stale for x in parts) or len(parts) < 2)
    return fetch
