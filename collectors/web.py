"""HTTP serving for the exporters: `/metrics`, a landing page, and the exporter-toolkit web config.

`--web.config.file` takes the same YAML as Prometheus' exporter-toolkit, checked strictly at
start-up (unknown keys, non-bcrypt passwords and unreadable certificates are errors):

    tls_server_config: {cert_file, key_file, client_ca_file, client_auth_type, min_version, max_version}
    basic_auth_users: {alice: <bcrypt hash>}
    http_server_config: {headers: {X-Frame-Options: deny, ...}}

Listen addresses follow node_exporter: `:9810` means every interface, `HOST:PORT` one of them.
Connections, their idle time and each request's time are bounded by `ConnectionGuard`, which
`serve` and `demo` use too (limits: docs/deployment.md).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Callable
from urllib.parse import parse_qs

log = logging.getLogger(__name__)

# (status, content type, body bytes, extra headers)
Response = tuple[int, str, bytes, dict]
Handler = Callable[["Request"], Response]


@dataclass
class Request:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    client: str = ""  # the connection's peer, address:port


class WebConfigError(ValueError):
    pass


TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"}
CLIENT_AUTH_TYPES = {
    # exporter-toolkit name -> (ssl verify mode, needs client_ca_file). Python's ssl cannot accept a
    # client certificate without verifying it, so the two "any certificate" modes verify too.
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_OPTIONAL, True),
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# The response headers exporter-toolkit lets `http_server_config.headers` set.
ALLOWED_HEADERS = {"Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options",
                   "X-XSS-Protection", "Content-Security-Policy"}
# Checked against when the user is unknown, so a wrong user name costs as long as a wrong password.
_DUMMY_HASH = b"$2b$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"


@dataclass
class WebConfig:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None
    users: dict[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers
    _ok_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | None) -> "WebConfig":
        """Parse and check an exporter-toolkit web config; every problem is a WebConfigError."""
        if not path:
            return cls()
        import yaml

        try:
            with open(path) as fh:
                doc = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise WebConfigError(f"cannot read web config {path}: {exc}") from exc
        where = f"web config {path}"
        if not isinstance(doc, dict):
            raise WebConfigError(f"{where}: top level must be a mapping")
        _no_unknown(doc, {"tls_server_config", "basic_auth_users", "http_server_config"}, where)
        tls = _mapping(doc, "tls_server_config", where)
        users = _mapping(doc, "basic_auth_users", where)
        http = _mapping(doc, "http_server_config", where)
        _no_unknown(tls, TLS_KEYS, f"{where}: tls_server_config")
        _no_unknown(http, {"headers", "http2"}, f"{where}: http_server_config")
        headers = http.get("headers") or {}
        if not isinstance(headers, dict):
            raise WebConfigError(f"{where}: http_server_config.headers must be a mapping")
        bad = sorted(set(headers) - ALLOWED_HEADERS)
        if bad:
            raise WebConfigError(f"{where}: http_server_config.headers may not set {bad} "
                                 f"(allowed: {sorted(ALLOWED_HEADERS)})")
        for key in tls:
            if tls[key] is not None and not isinstance(tls[key], str):
                raise WebConfigError(f"{where}: tls_server_config.{key} must be a string")
        cfg = cls(cert_file=tls.get("cert_file"), key_file=tls.get("key_file"),
                  client_ca_file=tls.get("client_ca_file"),
                  client_auth_type=tls.get("client_auth_type") or "NoClientCert",
                  min_version=tls.get("min_version") or "TLS12", max_version=tls.get("max_version"),
                  users={str(k): str(v) for k, v in users.items()},
                  headers={str(k): str(v) for k, v in headers.items()})
        if tls and not (cfg.cert_file and cfg.key_file):
            raise WebConfigError(f"{where}: tls_server_config needs both cert_file and key_file")
        if cfg.client_auth_type not in CLIENT_AUTH_TYPES:
            raise WebConfigError(f"{where}: client_auth_type {cfg.client_auth_type!r} is not one of "
                                 f"{sorted(CLIENT_AUTH_TYPES)}")
        if CLIENT_AUTH_TYPES[cfg.client_auth_type][1] and not cfg.client_ca_file:
            raise WebConfigError(f"{where}: client_auth_type {cfg.client_auth_type} needs client_ca_file")
        for key in ("min_version", "max_version"):
            value = getattr(cfg, key)
            if value is not None and value not in TLS_VERSIONS:
                raise WebConfigError(f"{where}: {key} {value!r} is not one of {sorted(TLS_VERSIONS)}")
        for user, hashed in cfg.users.items():
            if not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
                raise WebConfigError(f"{where}: password of {user!r} is not a bcrypt hash "
                                     "(make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)")
        for key in ("cert_file", "key_file", "client_ca_file"):
            name = getattr(cfg, key)
            if name and not os.access(name, os.R_OK):
                raise WebConfigError(f"{where}: cannot load TLS files: {key} {name} is missing or unreadable")
        try:
            cfg.ssl_context()  # load the certificate and key now, so a bad file fails at start-up
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{where}: cannot load TLS files: {exc}") from exc
        return cfg

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.cert_file:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = TLS_VERSIONS.get(self.min_version, ssl.TLSVersion.TLSv1_2)
        if self.max_version:
            ctx.maximum_version = TLS_VERSIONS[self.max_version]
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            ctx.load_verify_locations(self.client_ca_file)
        ctx.verify_mode = CLIENT_AUTH_TYPES.get(self.client_auth_type, (ssl.CERT_NONE, False))[0]
        return ctx

    def authorized(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except Exception:
            return False
        if not sep:
            return False
        hashed = self.users.get(user)
        # bcrypt is deliberately slow (~50-250 ms); remember good pairs so scrapes stay cheap.
        key = (user, password)
        if hashed is not None and self._ok_cache.get(key) == hashed:
            return True
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed.encode() if hashed is not None else _DUMMY_HASH)
        except ValueError:  # e.g. a password longer than bcrypt's 72 bytes
            ok = False
        if ok and hashed is not None:
            self._ok_cache[key] = hashed
            return True
        return False


def _mapping(doc: dict, key: str, where: str) -> dict:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: {key} must be a mapping")
    return value


def _no_unknown(doc: dict, known: set[str], where: str) -> None:
    unknown = set(doc) - known
    if unknown:
        raise WebConfigError(f"{where}: unknown keys {sorted(map(str, unknown))} (known: {sorted(known)})")


def parse_listen_address(addr: str, default_host: str = "") -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {addr!r} is not HOST:PORT or :PORT")
    host = host.strip("[]") or default_host
    return host, int(port)


class _Conn:
    __slots__ = ("sock", "busy", "deadline")

    def __init__(self, sock, deadline: float):
        self.sock, self.busy, self.deadline = sock, False, deadline


class ConnectionGuard:
    """Bounds what clients can hold on a threaded server: connections (a thread each), the time
    to send a request, idle keep-alive time and the time a request may run.

    Each connection is *waiting* (TLS handshake, or reading a request line and headers: due by a
    deadline) or *busy* (its request is being handled). Past `max_connections`, a new connection
    closes the oldest waiting one rather than being refused, so idle sockets cannot lock out
    scrapers (an attacker's connections are always older than a scraper's next one). Deadlines are
    enforced by closing the socket under the thread (`reap()`, from the accept loop), which ends
    its read at once: a socket timeout alone bounds each read, not the request, so a client
    trickling one byte at a time would otherwise hold its thread forever.
    """

    def __init__(self, max_connections: int, request_timeout: float, idle_timeout: float,
                 handle_timeout: float, clock: Callable[[], float] = time.monotonic):
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.handle_timeout = handle_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}  # by id(socket), oldest first (dicts keep insertion order)
        self.dropped = 0  # connections closed for the cap or a deadline
        self._logged = 0.0
        self._next_reap = 0.0

    def admit(self, sock) -> bool:
        """Register a new connection, closing the oldest waiting one when full; False: every slot is busy."""
        with self._lock:
            if len(self._conns) >= self.max_connections:
                victim = next((c for c in self._conns.values() if not c.busy), None)
                if victim is None:
                    self._log_once("refusing a connection: all %d are busy", self.max_connections)
                    return False
                self._drop(victim)
            self._conns[id(sock)] = _Conn(sock, self._clock() + self.request_timeout)
            return True

    def release(self, sock) -> None:
        with self._lock:
            self._conns.pop(id(sock), None)

    def waiting(self, sock, first: bool = False) -> None:
        """The connection now waits for a request (its first, or the next on a kept-alive connection)."""
        self._set(sock, False, self.request_timeout if first else self.idle_timeout)

    def busy(self, sock) -> None:
        """The connection's request has arrived whole and is being handled."""
        self._set(sock, True, self.handle_timeout)

    def _set(self, sock, busy: bool, timeout: float) -> None:
        with self._lock:
            c = self._conns.pop(id(sock), None)
            if c is not None:
                c.busy, c.deadline = busy, self._clock() + timeout
                self._conns[id(sock)] = c  # to the end: the most recently active

    def reap(self) -> None:
        """Close every connection past its deadline (at most ten times a second: the accept loop
        calls this after every connection, and a burst of scrapers should not pay a scan each)."""
        now = self._clock()
        if now < self._next_reap:
            return
        self._next_reap = now + 0.1
        with self._lock:
            for c in [c for c in self._conns.values() if c.deadline < now]:
                self._drop(c)

    def open_connections(self) -> int:
        return len(self._conns)

    def _drop(self, c: _Conn) -> None:
        self._conns.pop(id(c.sock), None)
        self.dropped += 1
        try:
            # socket.socket's own shutdown, not SSLSocket's (which drops its TLS state under the
            # thread still using it): the thread's blocked read returns at once and it ends.
            socket.socket.shutdown(c.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def _log_once(self, msg: str, *args) -> None:
        now = self._clock()
        if now - self._logged > 60:  # a flood must not flood the log too
            self._logged = now
            log.warning(msg, *args)


class GuardedServerMixin:
    """For socketserver.ThreadingMixIn servers: a ConnectionGuard around every connection, its
    deadlines checked on each turn of the accept loop (`service_actions`, every poll interval),
    and a listen backlog deep enough for a burst of scrapers (the kernel caps it at somaxconn)."""

    request_queue_size = 1024
    max_connections = 256
    request_timeout = 5.0  # a scraper sends its request as soon as it connects
    idle_timeout = 60.0
    handle_timeout = 120.0

    def init_guard(self) -> None:
        self.guard = ConnectionGuard(self.max_connections, self.request_timeout, self.idle_timeout,
                                     self.handle_timeout)

    def process_request(self, request, client_address):
        if not self.guard.admit(request):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.guard.release(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.guard.release(request)

    def service_actions(self):
        super().service_actions()
        self.guard.reap()


def tls_handshake(sock, timeout: float) -> bool:
    """Complete a server-side TLS handshake on the connection's own thread, within `timeout`.

    The listening socket is wrapped with do_handshake_on_connect=False, so accept() never waits
    on a client: a handshake in the accept loop lets one silent client stop the whole server."""
    if not isinstance(sock, ssl.SSLSocket):
        return True
    sock.settimeout(timeout)
    try:
        sock.do_handshake()
        return True
    except (OSError, ValueError) as exc:  # ssl.SSLError and timeouts are OSErrors
        log.debug("TLS handshake failed: %s", exc)
        return False


class _Server(GuardedServerMixin, socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs):
        self.init_guard()
        super().__init__(*args, **kwargs)


# Limits that keep a misbehaving client from holding memory: node_exporter's Go server allows 1 MiB of
# headers; a scrape request is a few hundred bytes.
MAX_LINE = 8192
MAX_HEADERS = 100
# Per read: the ConnectionGuard's deadlines are what bound a request as a whole.
READ_TIMEOUT = 60.0
_REASONS = {s.value: s.phrase for s in HTTPStatus}


class _Date:
    """The HTTP Date header, formatted once per second rather than per response."""

    second = -1
    text = ""

    @classmethod
    def now(cls) -> str:
        t = int(time.time())
        if t != cls.second:
            cls.text = formatdate(t, usegmt=True)
            cls.second = t
        return cls.text


class _Handler(socketserver.StreamRequestHandler):
    """A lean HTTP/1.1 server loop: GET and HEAD, keep-alive, one write per response.

    Why not BaseHTTPRequestHandler: its header parsing goes through the email package and its
    response through several writes. Measured on a cached scrape (bench/bench_agent.py's client
    against the agent): 0.37 ms of server CPU per request with it, 0.03 ms with this loop; a
    whole uncached scrape costs about 1.2 ms.
    """

    timeout = READ_TIMEOUT
    disable_nagle_algorithm = True
    routes: dict[str, Handler] = {}
    cfg: "WebConfig"

    def handle(self) -> None:
        guard = self.server.guard
        if not tls_handshake(self.request, guard.request_timeout):
            return
        self.request.settimeout(self.timeout)
        first = True
        try:
            while True:
                guard.waiting(self.request, first)
                first = False
                if not self._one_request(guard):
                    break
        except (OSError, ValueError):  # reset, timeout, closed by the guard: the connection just ends
            pass

    def _one_request(self, guard: ConnectionGuard) -> bool:
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            return False
        if len(line) > MAX_LINE:
            return self._error(414, "URI Too Long")
        parts = line.decode("latin-1").split()
        if not parts:
            return True  # RFC 9112 2.2: ignore an empty line before a request line
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return self._error(400, "Bad Request")
        method, target, version = parts
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS):
            h = self.rfile.readline(MAX_LINE + 1)
            if h in (b"\r\n", b"\n"):
                break
            if not h or len(h) > MAX_LINE:
                return self._error(431, "Request Header Fields Too Large")
            key, sep, value = h.decode("latin-1").partition(":")
            if not sep:
                return self._error(400, "Bad Request")
            headers[key.strip().lower()] = value.strip()
        else:
            return self._error(431, "Request Header Fields Too Large")
        guard.busy(self.request)
        conn = headers.get("connection", "").lower()
        keep = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
        if "content-length" in headers or "transfer-encoding" in headers:
            keep = False  # a body we do not read would be taken for the next request
        if method not in ("GET", "HEAD"):
            self._send(405, "text/plain; charset=utf-8", b"Method Not Allowed\n", {"Allow": "GET, HEAD"}, True, False)
            return False
        send_body = method == "GET"
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s %s", self.client_address[0], method, target)
        if not self.cfg.authorized(headers.get("authorization")):
            self._send(401, "text/plain; charset=utf-8", b"Unauthorized\n",
                       {"WWW-Authenticate": 'Basic realm="gangwatch"'}, send_body, keep)
            return keep
        path, _, qs = target.partition("?")
        if not path.startswith("/"):  # absolute-form request target
            from urllib.parse import urlsplit

            split = urlsplit(target)
            path, qs = split.path or "/", split.query
        handler = self.routes.get(path)
        if handler is None:
            self._send(404, "text/plain; charset=utf-8", b"Not Found\n", {}, send_body, keep)
            return keep
        try:
            status, ctype, body, extra = handler(Request(path, parse_qs(qs) if qs else {}, headers,
                                                          ":".join(map(str, self.client_address[:2]))))
        except Exception as exc:
            log.exception("handler for %s failed", path)
            status, ctype, body, extra = 500, "text/plain; charset=utf-8", f"error: {type(exc).__name__}\n".encode(), {}
        self._send(status, ctype, body, extra, send_body, keep)
        return keep

    def _error(self, status: int, text: str) -> bool:
        self._send(status, "text/plain; charset=utf-8", f"{text}\n".encode(), {}, True, False)
        return False

    def _send(self, status: int, ctype: str, body: bytes, extra: dict, send_body: bool, keep: bool) -> None:
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}", f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}", f"Date: {_Date.now()}"]
        head += [f"{k}: {v}" for k, v in extra.items()]
        head += [f"{k}: {v}" for k, v in self.cfg.headers.items()]
        if not keep:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(data + body if send_body else data)


def make_server(address: str, routes: dict[str, Handler], web_config: WebConfig | None = None,
                default_host: str = "") -> socketserver.ThreadingTCPServer:
    """Build (not start) a threaded HTTP server dispatching exact paths to handlers."""
    cfg = web_config or WebConfig()
    host, port = parse_listen_address(address, default_host)
    handler = type("H", (_Handler,), {"routes": dict(routes), "cfg": cfg})
    family = _Server
    if ":" in host:
        class _Server6(_Server):
            address_family = socket.AF_INET6

        family = _Server6
    server = family((host, port), handler)
    ctx = cfg.ssl_context()
    if ctx is not None:
        # The handshake happens on the connection's own thread (tls_handshake), so a client
        # that stalls mid-handshake cannot block the accept loop.
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding value allows gzip (an explicit `gzip;q=0` refuses it)."""
    if "gzip" not in accept_encoding:
        return False
    for part in accept_encoding.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() == "gzip":
            q = params.replace(" ", "")
            if not q.startswith("q="):
                return True
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
    return False


TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def metrics_handler(scraper) -> Handler:
    def handle(req: Request) -> Response:
        scrape = scraper.scrape(req.client)
        if accepts_gzip(req.headers.get("accept-encoding", "")):
            return 200, TEXT_FORMAT, scrape.gzip_body(), {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        return 200, TEXT_FORMAT, scrape.body(), {"Vary": "Accept-Encoding"}

    return handle


def landing_handler(title: str, links: dict[str, str]) -> Handler:
    import html

    items = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>' for href, text in links.items())
    page = f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1><ul>{items}</ul></body></html>"

    def handle(req: Request) -> Response:
        return 200, "text/html; charset=utf-8", page.encode(), {}

    return handle


def serve_forever(server: socketserver.ThreadingTCPServer) -> None:
    host, port = server.server_address[:2]
    log.info("listening on %s:%s", host or "*", port)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def serve_in_thread(server: socketserver.ThreadingTCPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t


def run_exporter(prog: str, listen: str, web_config_file: str | None,
                 build: Callable[[], tuple[dict[str, Handler], Callable[[], None], Callable[[], None]]]) -> int:
    """The life of an exporter command: web config, the app from `build()` -> (routes, start, stop),
    the listening socket, serving until interrupted. Setup errors are one line on stderr, exit 2."""
    import sys

    try:
        web = WebConfig.load(web_config_file)
    except WebConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        routes, start, stop = build()
    except OSError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        server = make_server(listen, routes, web)
    except (OSError, ValueError) as exc:
        print(f"{prog}: cannot listen on {listen}: {exc}", file=sys.stderr)
        stop()
        return 2
    start()
    try:
        serve_forever(server)
    finally:
        stop()
    return 0
