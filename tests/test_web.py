"""Web serving: `--web.config.file` (TLS, basic auth with bcrypt), the lean HTTP/1.1 loop, `--help`.

Certificates are made per test session with the `openssl` CLI (Debian's openssl package) in a temp
dir; bcrypt hashes use the minimum cost (4 rounds) so the suite stays fast. Servers run in-process
on 127.0.0.1 random ports, except the checks of `gangwatch agent` itself (exit codes, HTTPS + auth
end to end, `--help`), which run the real command.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest

from collectors.agent import build_parser
from collectors.exposition import gauge
from collectors.registry import Collector, Context, load_builtin_collectors
from collectors.scrape import Scraper
from collectors.web import (WebConfig, WebConfigError, accepts_gzip, make_server, metrics_handler,
                            serve_in_thread)
from tests.conftest import REPO, which

PASSWORD = "s3cret pass:word"  # a space and a colon: only the first colon splits user from password


class One(Collector):
    name = "one"

    def collect(self):
        return [gauge("gangwatch_test_value", "A test value.").add(1)]


def openssl_cert(dest: Path, name: str) -> tuple[Path, Path]:
    """A self-signed EC certificate for 127.0.0.1/localhost, valid for one day."""
    cert, key = dest / f"{name}.pem", dest / f"{name}-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    if which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    server_cert, server_key = openssl_cert(d, "server")
    client_cert, client_key = openssl_cert(d, "client")
    return {"dir": d, "cert": server_cert, "key": server_key, "client_cert": client_cert, "client_key": client_key}


@pytest.fixture(scope="module")
def password_hash() -> str:
    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class Running:
    """An in-process server with one trivial collector; `.conn()` opens a connection to it."""

    def __init__(self, cfg: WebConfig):
        self.scraper = Scraper([One(Context())], cache_ttl=0)
        self.server = make_server("127.0.0.1:0", {"/metrics": metrics_handler(self.scraper)}, cfg)
        self.port = self.server.server_address[1]
        self.thread = serve_in_thread(self.server)

    def conn(self, ctx: ssl.SSLContext | None = None) -> http.client.HTTPConnection:
        if ctx is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=5, context=ctx)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.scraper.close()


def client_ctx(pki, with_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["cert"]))
    if with_cert:
        ctx.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def get(conn: http.client.HTTPConnection, headers: dict[str, str] | None = None, path: str = "/metrics"):
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    return resp, resp.read()


@pytest.fixture(scope="module")
def tls_auth_server(pki, password_hash, tmp_path_factory):
    cfg_path = write_config(tmp_path_factory.mktemp("web") / "web.yml", f"""
tls_server_config:
  cert_file: {pki['cert']}
  key_file: {pki['key']}
basic_auth_users:
  alice: {password_hash}
http_server_config:
  headers:
    X-Content-Type-Options: nosniff
""")
    srv = Running(WebConfig.load(str(cfg_path)))
    yield srv
    srv.close()


def test_https_with_basic_auth(tls_auth_server, pki):
    conn = tls_auth_server.conn(client_ctx(pki))
    resp, body = get(conn)
    assert resp.status == 401
    assert resp.getheader("WWW-Authenticate") == 'Basic realm="gangwatch"'
    resp, _ = get(conn, basic("alice", "wrong"))
    assert resp.status == 401
    resp, _ = get(conn, basic("mallory", PASSWORD))
    assert resp.status == 401
    resp, body = get(conn, basic("alice", PASSWORD))
    assert resp.status == 200
    assert b"gangwatch_test_value 1\n" in body
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    # the same kept-alive connection: every request is checked on its own
    resp, _ = get(conn)
    assert resp.status == 401
    resp, _ = get(conn, basic("alice", PASSWORD))
    assert resp.status == 200
    conn.close()


def test_garbled_authorization_is_401(tls_auth_server, pki):
    conn = tls_auth_server.conn(client_ctx(pki))
    for value in ("Basic !!!not-base64", "Basic " + base64.b64encode(b"no-colon").decode(), "Bearer abc", "Basic "):
        resp, _ = get(conn, {"Authorization": value})
        assert resp.status == 401, value
    conn.close()


def test_plain_http_to_tls_port_gets_no_page(tls_auth_server):
    conn = tls_auth_server.conn()
    with pytest.raises((http.client.HTTPException, OSError)):
        resp, _ = get(conn)
        assert resp.status != 200  # pragma: no cover - a TLS server never answers plain HTTP with a page
    conn.close()


def test_a_stalled_tls_handshake_does_not_block_others(tls_auth_server, pki):
    """The handshake runs on the connection's thread: a client that connects and says nothing
    must not stop the accept loop from serving the next client."""
    idle = socket.create_connection(("127.0.0.1", tls_auth_server.port), timeout=5)
    try:
        conn = tls_auth_server.conn(client_ctx(pki))
        t0 = time.monotonic()
        resp, _ = get(conn, basic("alice", PASSWORD))
        assert resp.status == 200 and time.monotonic() - t0 < 2
        conn.close()
    finally:
        idle.close()


def test_client_certificates_required(pki, tmp_path):
    cfg = WebConfig.load(str(write_config(tmp_path / "web.yml", f"""
tls_server_config:
  cert_file: {pki['cert']}
  key_file: {pki['key']}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {pki['client_cert']}
""")))
    srv = Running(cfg)
    try:
        conn = srv.conn(client_ctx(pki, with_cert=True))
        resp, _ = get(conn)
        assert resp.status == 200
        conn.close()
        conn = srv.conn(client_ctx(pki))
        with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
            get(conn)
        conn.close()
    finally:
        srv.close()


@pytest.mark.parametrize("body, message", [
    ("tls_server_config: {}\nbasic_auth: {}\n", "unknown keys ['basic_auth']"),
    ("tls_server_config:\n  cert_file: /c\n  key_file: /k\n  cipher: x\n", "unknown keys ['cipher']"),
    ("basic_auth_users:\n  alice: hunter2\n", "not a bcrypt hash"),
    ("basic_auth_users:\n  alice: $1$abc$abcdefgh\n", "not a bcrypt hash"),
    ("basic_auth_users: [alice]\n", "must be a mapping"),
    ("tls_server_config:\n  cert_file: CERT\n", "needs both cert_file and key_file"),
    ("tls_server_config:\n  cert_file: CERT\n  key_file: /nonexistent/key.pem\n", "cannot load TLS files"),
    ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n  client_auth_type: Sometimes\n",
     "client_auth_type 'Sometimes' is not one of"),
    ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n  client_auth_type: RequireAndVerifyClientCert\n",
     "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n  min_version: TLS10\n", "min_version 'TLS10'"),
    ("http_server_config:\n  headers:\n    Set-Cookie: a=b\n", "may not set ['Set-Cookie']"),
    ("- just\n- a list\n", "top level must be a mapping"),
    ("tls_server_config: [\n", "cannot read web config"),
])
def test_bad_configs_are_clear_errors(tmp_path, pki, body, message):
    body = body.replace("CERT", str(pki["cert"])).replace("KEY", str(pki["key"]))
    with pytest.raises(WebConfigError) as err:
        WebConfig.load(str(write_config(tmp_path / "web.yml", body)))
    assert message in str(err.value)


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(WebConfigError, match="cannot read web config"):
        WebConfig.load(str(tmp_path / "absent.yml"))


def run_agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dashboard.cli", "agent", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_agent_exits_2_on_bad_web_config(tmp_path, pki):
    missing_key = write_config(tmp_path / "web.yml",
                               f"tls_server_config:\n  cert_file: {pki['cert']}\n  key_file: {tmp_path}/nokey.pem\n")
    res = run_agent("--web.config.file", str(missing_key), "--web.listen-address", "127.0.0.1:0")
    assert res.returncode == 2
    assert "cannot load TLS files" in res.stderr and "nokey.pem" in res.stderr
    assert "Traceback" not in res.stderr


def test_agent_serves_https_with_auth_end_to_end(tmp_path, pki, password_hash):
    cfg = write_config(tmp_path / "web.yml", f"tls_server_config:\n  cert_file: {pki['cert']}\n"
                                              f"  key_file: {pki['key']}\nbasic_auth_users:\n  alice: {password_hash}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    disabled = [f"--no-collector.{name}" for name in load_builtin_collectors() if name != "pressure"]
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.cli", "agent", "--web.listen-address",
                             f"127.0.0.1:{port}", "--web.config.file", str(cfg), "--log-level", "error",
                             "--collector.pressure", *disabled],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=client_ctx(pki))
                resp, _ = get(conn)
                break
            except OSError:
                assert time.monotonic() < deadline, "agent did not answer over HTTPS"
                time.sleep(0.1)
        assert resp.status == 401
        resp, body = get(conn, {**basic("alice", PASSWORD), "Accept-Encoding": "gzip"})
        assert resp.status == 200 and resp.getheader("Content-Encoding") == "gzip"
        assert b'gangwatch_scrape_collector_success{collector="pressure"}' in gzip.decompress(body)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()


# --- the HTTP loop itself, over raw sockets --------------------------------------------------

@pytest.fixture(scope="module")
def plain_server():
    srv = Running(WebConfig())
    yield srv
    srv.close()


def raw(port: int, data: bytes, read_all: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if not read_all:
                break
        return b"".join(chunks)


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"GET /metrics SPDY/3\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nNoColonHere\r\n\r\n", b"400"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", b"431"),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
    (b"GET /nope HTTP/1.0\r\n\r\n", b"404"),
])
def test_malformed_requests_get_an_error_and_a_closed_connection(plain_server, request_bytes, status):
    reply = raw(plain_server.port, request_bytes)
    assert reply.split(b" ", 2)[1] == status
    assert reply.count(b"HTTP/1.1 ") == 1  # answered once; the server closed the connection after it


def test_keep_alive_and_head(plain_server):
    t0 = time.monotonic()
    reply = raw(plain_server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                    b"GET /metrics?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert reply.count(b"HTTP/1.1 200 OK\r\n") == 3  # three requests answered on one connection
    assert reply.count(b"gangwatch_test_value 1\n") == 2  # HEAD has headers only
    assert reply.count(b"Connection: close") == 1
    assert time.monotonic() - t0 < 3  # and the server closed it when asked, without waiting for a timeout


def test_past_the_cap_the_oldest_idle_connection_makes_room(monkeypatch):
    from collectors import web

    monkeypatch.setattr(web._Server, "max_connections", 2)
    srv = Running(WebConfig())
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(2)]
    try:
        time.sleep(0.2)  # let the server accept both
        reply = raw(srv.port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200")  # a third connection is served, not refused
        assert idle[0].recv(10) == b""  # by closing the oldest idle one
    finally:
        for s in idle:
            s.close()
        srv.close()


def test_busy_connections_are_not_evicted(monkeypatch):
    from collectors import web

    monkeypatch.setattr(web._Server, "max_connections", 1)
    monkeypatch.setattr(web._Server, "handle_timeout", 5.0)
    started = __import__("threading").Event()

    def slow(req):
        started.set()
        time.sleep(0.5)
        return 200, "text/plain", b"slow\n", {}

    server = make_server("127.0.0.1:0", {"/slow": slow})
    serve_in_thread(server)
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /slow HTTP/1.1\r\nConnection: close\r\n\r\n")
            assert started.wait(5)
            try:
                refused = raw(port, b"GET /slow HTTP/1.1\r\n\r\n")
            except ConnectionResetError:
                refused = b""
            assert refused == b""  # refused while the one slot works
            assert s.recv(1000).startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
        server.server_close()


def test_gzip_negotiation(plain_server):
    conn = plain_server.conn()
    resp, body = get(conn, {"Accept-Encoding": "gzip"})
    assert resp.getheader("Content-Encoding") == "gzip" and body[:2] == b"\x1f\x8b"
    resp, body = get(conn, {"Accept-Encoding": "gzip;q=0, identity"})
    assert resp.getheader("Content-Encoding") is None and body.startswith(b"# HELP")
    conn.close()
    assert accepts_gzip("deflate, gzip;q=1.0") and not accepts_gzip("x-gzip") and not accepts_gzip("gzip; q=0.0")


# --- --help documents every flag -----------------------------------------------------------

def test_help_documents_every_flag():
    parser = build_parser()
    res = run_agent("--help")
    assert res.returncode == 0
    undocumented = []
    for action in parser._actions:
        for option in action.option_strings:
            if option not in res.stdout:
                undocumented.append(f"{option} missing from --help")
        if action.option_strings and not (action.help or "").strip():
            undocumented.append(f"{'/'.join(action.option_strings)} has no help text")
    assert not undocumented, "\n".join(undocumented)
