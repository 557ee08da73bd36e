"""A watch cache per resource: LIST (paginated) once, then WATCH from its resourceVersion.

Each resource has one thread. It finds the served version (discovery), lists, then watches; a
watch that ends normally is resumed from the last resourceVersion seen (bookmarks keep it fresh), a
410 Gone (the version is too old: the server compacted its history) or a broken stream leads to a
fresh LIST. Objects are stored trimmed (`trim`), so memory grows with what gangwatch reads, not with
the size of the objects. Failures cost only this resource: 403 (RBAC), 404 (CRD absent) or an
unknown version are recorded in `error` with the reason and retried every `retry` seconds; an
unreachable API server marks the resource unhealthy, keeps its last objects, and retries with
backoff. Readers take `items()` (a shallow copy under the lock) and `generation`, which changes
with every event, so a snapshot is rebuilt only when something changed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from .api import ApiError, Client, end_watch
from .resources import Resource

log = logging.getLogger(__name__)


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class Reflector:
    def __init__(self, client: Client, resource: Resource, trim: Callable[[dict], dict], namespace: str = "",
                 page_size: int = 500, watch_timeout: int = 300, retry: float = 30.0,
                 clock: Callable[[], float] = time.time):
        self.client, self.resource, self.trim = client, resource, trim
        self.namespace = namespace if resource.namespaced else ""
        self.page_size, self.watch_timeout, self.retry, self.clock = page_size, watch_timeout, retry, clock
        self._lock = threading.Lock()
        self._items: dict[str, dict] = {}
        self.version = ""
        self.resource_version = ""
        self.generation = 0
        self.synced = False  # listed at least once
        self.healthy = False  # listed and the watch is (re)connecting without errors
        self.error = ""  # why this resource is absent or stale, in words
        self.absent = False  # forbidden, not installed or of an unknown version: not an outage
        self.last_ok: float | None = None  # when the cache was last known to be current
        self.failing_since: float | None = None
        self.relists = 0
        self.gone = 0  # 410s seen
        self.events = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch_sock = None  # the open WATCH's socket, for stop() to end it

    # ---------------------------------------------------------------- readers
    def items(self) -> list[dict]:
        with self._lock:
            return list(self._items.values())

    def current(self) -> bool:
        """True while the cache follows the server; refreshes last_ok."""
        with self._lock:
            if self.healthy:
                self.last_ok = self.clock()
            return self.healthy

    # ---------------------------------------------------------------- the loop
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"kube-{self.resource.key}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        end_watch(self._watch_sock)

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end -> whether it did (or never started)."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _opened(self, sock) -> None:
        self._watch_sock = sock
        if sock is not None and self._stop.is_set():
            end_watch(sock)  # stopped while this watch was being opened

    def run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if not self.version:
                    self.version = self._discover()
                self.list_once()
                backoff = 1.0
                self._watch_until_broken()
            except ApiError as exc:
                if self._stop.is_set():
                    return  # the watch was ended by stop(), not by a failure
                wait = self._failed(exc, backoff)
                backoff = min(backoff * 2, self.retry)
                self._stop.wait(wait)
            except Exception as exc:  # a bug or an answer we never saw: this resource only, and retried
                if self._stop.is_set():
                    return
                log.exception("kube %s: unexpected failure", self.resource.key)
                self._failed(ApiError(0, f"{type(exc).__name__}: {exc}"), backoff)
                self._stop.wait(self.retry)

    def _discover(self) -> str:
        r = self.resource
        if not r.group:
            return r.versions[0]
        try:
            doc = self.client.get(f"/apis/{r.group}", verb="discovery")
        except ApiError as exc:
            if exc.status == 404:
                raise ApiError(404, f"API group {r.group} is not served (CRD not installed)", "NotFound") from exc
            raise
        served = [v.get("version") for v in doc.get("versions") or [] if isinstance(v, dict)]
        for v in r.versions:
            if v in served:
                return v
        raise ApiError(-1, f"{r.group} serves versions {', '.join(map(str, served)) or 'none'}; "
                           f"gangwatch reads {', '.join(r.versions)}", "UnknownVersion")

    def list_once(self) -> None:
        path = self.resource.path(self.version, self.namespace)
        pairs, rv = self.client.list_all(path, self.page_size, each=lambda obj: (object_key(obj), self.trim(obj)))
        fresh = dict(pairs)
        with self._lock:
            self._items = fresh
            self.resource_version = rv
            self.generation += 1
            self.synced = self.healthy = True
            self.absent = False
            self.error = ""
            self.failing_since = None
            self.last_ok = self.clock()
            self.relists += 1

    def _watch_until_broken(self) -> None:
        path = self.resource.path(self.version, self.namespace)
        while not self._stop.is_set():
            for ev in self.client.watch(path, self.resource_version, self.watch_timeout, opened=self._opened):
                if self._stop.is_set():
                    return
                if not self._apply(ev):
                    return  # 410 Gone: list again
            # the server ended the watch at timeoutSeconds: resume from the last version seen

    def _apply(self, ev: dict) -> bool:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                self.gone += 1
                return False
            raise ApiError(int(code or 0), str(obj.get("message") or obj), str(obj.get("reason") or ""))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self.events += 1
            self.last_ok = self.clock()
            if rv:
                self.resource_version = rv
            if kind in ("ADDED", "MODIFIED"):
                self._items[object_key(obj)] = self.trim(obj)
                self.generation += 1
            elif kind == "DELETED":
                if self._items.pop(object_key(obj), None) is not None:
                    self.generation += 1
        return True

    def _failed(self, exc: ApiError, backoff: float) -> float:
        """Record a failure; -> seconds to wait before trying again."""
        absent = exc.status in (403, 404, -1)
        what = {403: "forbidden", 404: "not found", -1: "unknown version"}.get(exc.status, "unreachable or failing")
        msg = f"{self.resource.key}: {what}: {exc}"
        with self._lock:
            first = self.error != msg
            self.healthy = False
            self.absent = absent
            self.error = msg
            if self.failing_since is None:
                self.failing_since = self.clock()
            if exc.status == 404 and self.version:
                self.version = ""  # the CRD may come back in another version
            self.generation += 1
        if first:
            log.warning("kube %s", msg)
        return self.retry if absent else backoff
