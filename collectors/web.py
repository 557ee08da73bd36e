"""HTTP serving for the exporters: `/metrics`, a landing page, and the exporter-toolkit web config.

`--web.config.file` takes the same YAML as Prometheus' exporter-toolkit:

    tls_server_config: {cert_file: ..., key_file: ..., client_ca_file: ..., client_auth_type: ...}
    basic_auth_users: {alice: <bcrypt hash>}

Listen addresses follow node_exporter: `:9810` means every interface, `HOST:PORT` one of them.
"""

from __future__ import annotations

import base64
import hmac
import logging
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)

# (status, content type, body bytes, extra headers)
Response = tuple[int, str, bytes, dict]
Handler = Callable[["Request"], Response]


@dataclass
class Request:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class WebConfigError(ValueError):
    pass


@dataclass
class WebConfig:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    users: dict[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    _ok_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | None) -> "WebConfig":
        if not path:
            return cls()
        import yaml

        try:
            with open(path) as fh:
                doc = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise WebConfigError(f"cannot read web config {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise WebConfigError(f"web config {path}: top level must be a mapping")
        unknown = set(doc) - {"tls_server_config", "basic_auth_users", "http_server_config"}
        if unknown:
            raise WebConfigError(f"web config {path}: unknown keys {sorted(unknown)}")
        tls = doc.get("tls_server_config") or {}
        users = doc.get("basic_auth_users") or {}
        if not isinstance(tls, dict) or not isinstance(users, dict):
            raise WebConfigError(f"web config {path}: tls_server_config and basic_auth_users must be mappings")
        cfg = cls(cert_file=tls.get("cert_file"), key_file=tls.get("key_file"),
                  client_ca_file=tls.get("client_ca_file"),
                  client_auth_type=tls.get("client_auth_type", "NoClientCert"),
                  users={str(k): str(v) for k, v in users.items()})
        if bool(cfg.cert_file) != bool(cfg.key_file):
            raise WebConfigError(f"web config {path}: cert_file and key_file go together")
        for user, hashed in cfg.users.items():
            if not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise WebConfigError(f"web config {path}: password of {user!r} is not a bcrypt hash")
        return cfg

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.cert_file:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            ctx.load_verify_locations(self.client_ca_file)
        if self.client_auth_type in ("RequireAndVerifyClientCert", "RequireAnyClientCert"):
            ctx.verify_mode = ssl.CERT_REQUIRED
        elif self.client_auth_type in ("VerifyClientCertIfGiven", "RequestClientCert"):
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def authorized(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except Exception:
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        # bcrypt is deliberately slow (~50-250 ms); remember good pairs so scrapes stay cheap.
        key = (user, password)
        if self._ok_cache.get(key) == hashed:
            return True
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed.encode())
        except ValueError:
            ok = False
        if ok:
            self._ok_cache[key] = hashed
        return ok


def parse_listen_address(addr: str, default_host: str = "") -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {addr!r} is not HOST:PORT or :PORT")
    host = host.strip("[]") or default_host
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def make_server(address: str, routes: dict[str, Handler], web_config: WebConfig | None = None,
                default_host: str = "") -> ThreadingHTTPServer:
    """Build (not start) a threaded HTTP server dispatching exact paths to handlers."""
    from urllib.parse import parse_qs, urlsplit

    cfg = web_config or WebConfig()
    host, port = parse_listen_address(address, default_host)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "gangwatch"

        def log_message(self, fmt, *args):
            log.debug("%s - " + fmt, self.address_string(), *args)

        def do_GET(self):
            self._dispatch(send_body=True)

        def do_HEAD(self):
            self._dispatch(send_body=False)

        def _dispatch(self, send_body: bool):
            if not cfg.authorized(self.headers.get("Authorization")):
                self._send(401, "text/plain; charset=utf-8", b"Unauthorized\n",
                           {"WWW-Authenticate": 'Basic realm="gangwatch"'}, send_body)
                return
            parts = urlsplit(self.path)
            handler = routes.get(parts.path)
            if handler is None:
                self._send(404, "text/plain; charset=utf-8", b"Not Found\n", {}, send_body)
                return
            req = Request(parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()})
            try:
                status, ctype, body, extra = handler(req)
            except Exception as exc:
                log.exception("handler for %s failed", parts.path)
                status, ctype, body, extra = 500, "text/plain; charset=utf-8", f"error: {type(exc).__name__}\n".encode(), {}
            self._send(status, ctype, body, extra, send_body)

        def _send(self, status, ctype, body, extra, send_body):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

    family = _Server
    if ":" in host:
        import socket

        class _Server6(_Server):
            address_family = socket.AF_INET6

        family = _Server6
    server = family((host, port), H)
    ctx = cfg.ssl_context()
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    return server


def metrics_handler(scraper) -> Handler:
    def handle(req: Request) -> Response:
        scrape = scraper.scrape()
        headers = {}
        if "gzip" in req.headers.get("accept-encoding", ""):
            body = scrape.gzip_body()
            headers["Content-Encoding"] = "gzip"
        else:
            body = scrape.text.encode()
        return 200, "text/plain; version=0.0.4; charset=utf-8", body, headers

    return handle


def landing_handler(title: str, links: dict[str, str]) -> Handler:
    import html

    items = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>' for href, text in links.items())
    page = f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1><ul>{items}</ul></body></html>"

    def handle(req: Request) -> Response:
        return 200, "text/html; charset=utf-8", page.encode(), {}

    return handle


def serve_forever(server: ThreadingHTTPServer) -> None:
    host, port = server.server_address[:2]
    log.info("listening on %s:%s", host or "*", port)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t
