"""Talking to the Kubernetes API server: credentials (a kubeconfig or the pod's service account)
and three requests, over plain httpx: GET, a paginated LIST, and a streaming WATCH.

No client library: the exporter needs only these, and a small surface keeps its memory and start-up
low. Every request has a deadline; a WATCH's read deadline is its own timeoutSeconds plus a margin,
so a frozen API server shows as an error, never as a hung thread. Requests are counted per verb
(`gangwatch_kube_api_requests_total`): steady state is one WATCH per resource per
`--kube.watch-timeout`, whatever the number of objects.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import httpx
import yaml

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(Exception):
    """An answer other than 200: `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, message: str, reason: str = ""):
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass
class Credentials:
    server: str
    token: str = ""
    ca_file: str = ""  # "" and not insecure: the system's trust store
    cert_file: str = ""
    key_file: str = ""
    insecure: bool = False
    origin: str = ""  # which kubeconfig or "in-cluster", for messages


def _data_file(data: str, suffix: str, keep: list) -> str:
    """kubeconfig's *-data fields are base64 PEM; ssl wants files."""
    fh = tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False)
    with fh:
        fh.write(base64.b64decode(data))
    keep.append(fh.name)
    return fh.name


def load_kubeconfig(path: str, context: str = "") -> Credentials:
    """The current (or named) context of a kubeconfig file. Raises ValueError naming what is missing."""
    with open(path) as fh:
        doc = yaml.safe_load(fh) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a kubeconfig (no mapping)")
    base = os.path.dirname(os.path.abspath(path))
    ctx_name = context or doc.get("current-context") or ""

    def pick(kind: str, name: str) -> dict:
        for item in doc.get(kind) or []:
            if isinstance(item, dict) and item.get("name") == name:
                return item.get(kind[:-1]) or {}
        raise ValueError(f"{path}: no {kind[:-1]} named {name!r}")

    ctx = pick("contexts", ctx_name)
    cluster, user = pick("clusters", ctx.get("cluster", "")), pick("users", ctx.get("user", ""))
    if not cluster.get("server"):
        raise ValueError(f"{path}: cluster of context {ctx_name!r} has no server")
    temps: list[str] = []

    def file_of(key: str, suffix: str) -> str:
        if user.get(key + "-data") or cluster.get(key + "-data"):
            return _data_file(user.get(key + "-data") or cluster.get(key + "-data"), suffix, temps)
        value = user.get(key) or cluster.get(key) or ""
        return os.path.join(base, value) if value and not os.path.isabs(value) else value

    token = user.get("token") or ""
    if not token and user.get("tokenFile"):
        with open(os.path.join(base, user["tokenFile"])) as fh:
            token = fh.read().strip()
    return Credentials(server=cluster["server"].rstrip("/"), token=token,
                       ca_file=file_of("certificate-authority", ".crt"), cert_file=file_of("client-certificate", ".crt"),
                       key_file=file_of("client-key", ".key"),
                       insecure=bool(cluster.get("insecure-skip-tls-verify")), origin=path)


def in_cluster(sa_dir: str = SA_DIR, env: dict | None = None) -> Credentials:
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError("not in a cluster (KUBERNETES_SERVICE_HOST unset): pass --kube.config FILE")
    with open(os.path.join(sa_dir, "token")) as fh:
        token = fh.read().strip()
    host = f"[{host}]" if ":" in host else host
    return Credentials(server=f"https://{host}:{port}", token=token, ca_file=os.path.join(sa_dir, "ca.crt"),
                       origin="in-cluster service account")


@dataclass
class Counters:
    requests: dict[str, int] = field(default_factory=dict)  # verb -> count
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, verb: str) -> None:
        with self.lock:
            self.requests[verb] = self.requests.get(verb, 0) + 1

    def copy(self) -> dict[str, int]:
        with self.lock:
            return dict(self.requests)


class Client:
    """One httpx client (connection pool) shared by every resource's reflector thread."""

    def __init__(self, creds: Credentials, timeout: float = 10.0):
        self.creds, self.timeout = creds, timeout
        self.counters = Counters()
        verify: ssl.SSLContext | bool
        if creds.insecure:
            verify = False
        else:
            verify = ssl.create_default_context(cafile=creds.ca_file or None)
            if creds.cert_file:
                verify.load_cert_chain(creds.cert_file, creds.key_file or None)
        headers = {"Accept": "application/json", "User-Agent": "gangwatch-kube-exporter"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        self._http = httpx.Client(base_url=creds.server, verify=verify, headers=headers,
                                  timeout=httpx.Timeout(timeout), limits=httpx.Limits(max_connections=32))

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: dict | None = None, verb: str = "get") -> dict:
        self.counters.add(verb)
        try:
            r = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"{self.creds.server} unreachable: {type(exc).__name__}: {exc}") from exc
        if r.status_code != 200:
            raise _error(r.status_code, r.content)
        try:
            return r.json()
        except ValueError as exc:
            raise ApiError(r.status_code, f"GET {path}: not JSON") from exc

    def list_all(self, path: str, page_size: int = 500, each: Callable[[dict], Any] | None = None) -> tuple[list, str]:
        """Every item of a collection, page by page (limit/continue): (items, resourceVersion).
        `each` maps every item as its page arrives, so only one page of full objects is held at a
        time (20,000 pods as sent weigh ~300 MB decoded; trimmed, a tenth).
        A continue token that expired mid-way (410) raises; the caller lists again from the start."""
        items: list = []
        params: dict = {"limit": page_size}
        while True:
            doc = self.get(path, params, verb="list")
            page = doc.get("items") or []
            items.extend(page if each is None else map(each, page))
            meta = doc.get("metadata") or {}
            del doc, page  # this page's full objects go before the next page arrives
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion") or "")
            params = {"limit": page_size, "continue": meta["continue"]}

    def watch(self, path: str, resource_version: str, timeout_seconds: int,
              opened: Callable[[socket.socket | None], None] | None = None) -> Iterator[dict]:
        """The events of one WATCH from `resource_version`, until the server ends it (after about
        timeout_seconds). Yields the decoded event objects; raises ApiError on a refused watch.
        `opened` gets the stream's socket once it is open and None once it is done, so another
        thread can end the watch with `end_watch` instead of waiting for the next event."""
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        self.counters.add("watch")
        timeout = httpx.Timeout(self.timeout, read=timeout_seconds + self.timeout)
        try:
            with self._http.stream("GET", path, params=params, timeout=timeout) as r:
                if r.status_code != 200:
                    raise _error(r.status_code, r.read())
                if opened is not None:
                    stream = r.extensions.get("network_stream")
                    opened(stream.get_extra_info("socket") if stream is not None else None)
                for line in r.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"{self.creds.server}: watch broke: {type(exc).__name__}: {exc}") from exc
        finally:
            if opened is not None:
                opened(None)


def end_watch(sock: socket.socket | None) -> None:
    """Wake a thread blocked reading a WATCH from another thread. Closing the socket there instead
    would free its descriptor while the reader may still use the number: the next connection
    opened gets it and both read each other's TLS records ("bad record mac", seen in the suite).
    A shutdown only ends the stream; the reading thread sees EOF and closes it itself. The plain
    socket's shutdown, not SSLSocket's, which would also drop the TLS object under the reader."""
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected: nothing to wake


def _error(status: int, body: bytes) -> ApiError:
    """The API server's Status object, when it sent one, says why in its own words."""
    try:
        doc = json.loads(body)
        return ApiError(status, str(doc.get("message") or doc)[:500], str(doc.get("reason") or ""))
    except ValueError:
        return ApiError(status, f"HTTP {status}: {body[:200]!r}")
