"""The credentials and headers `serve`, `diagnose` and `capture` send to a metrics engine
(dashboard/http_auth.py): read from files, checked, and refused with a message naming the flag."""

from __future__ import annotations

import argparse
import base64

import httpx
import pytest

from dashboard.http_auth import add_engine_arguments, auth_headers, engine_headers


def args_of(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_engine_arguments(p)
    return p.parse_args(list(argv))


def test_a_token_or_a_user_and_headers(tmp_path):
    (tmp_path / "token").write_text("t0k3n\n")
    (tmp_path / "pw").write_text("p:w d\n")
    assert engine_headers(args_of()) == {"Accept-Encoding": "gzip"}
    assert engine_headers(args_of("--prometheus-bearer-token-file", str(tmp_path / "token"),
                                  "--prometheus-header", "X-Scope-OrgID: hpc")) == \
        {"Authorization": "Bearer t0k3n", "X-Scope-OrgID": "hpc", "Accept-Encoding": "gzip"}
    got = engine_headers(args_of("--prometheus-basic-auth-user", "ops", "--prometheus-basic-auth-password-file",
                                 str(tmp_path / "pw")))
    assert base64.b64decode(got["Authorization"].removeprefix("Basic ")) == b"ops:p:w d"


@pytest.mark.parametrize("argv, says", [
    (("--prometheus-bearer-token-file", "/nonexistent/token"), "cannot read --prometheus-bearer-token-file"),
    (("--prometheus-bearer-token-file", "EMPTY"), "empty"),
    (("--prometheus-bearer-token-file", "TWO"), "more than one line"),
    (("--prometheus-basic-auth-user", "ops"), "needs --prometheus-basic-auth-password-file"),
    (("--prometheus-basic-auth-password-file", "TWO"), "needs --prometheus-basic-auth-user"),
    (("--prometheus-bearer-token-file", "TOKEN", "--prometheus-basic-auth-user", "ops"), "not both"),
    (("--prometheus-header", "X-Scope-OrgID"), "is not 'NAME: VALUE'"),
    (("--prometheus-header", "Bad Name: x"), "is not 'NAME: VALUE'"),
    (("--prometheus-header", "X-A: b\r\nX-Forged: 1"), "is not 'NAME: VALUE'"),
    (("--prometheus-bearer-token-file", "TOKEN", "--prometheus-header", "authorization: Basic x"), "give one"),
    (("--prometheus-header", "Accept-Encoding: br"), "give --prometheus-compression"),
])
def test_bad_credentials_are_refused_naming_the_flag(tmp_path, argv, says):
    files = {"EMPTY": "\n", "TWO": "a\nb\n", "TOKEN": "t\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = tuple(str(tmp_path / a) if a in files else a for a in argv)
    with pytest.raises(ValueError, match=says):
        engine_headers(args_of(*argv))


def test_the_probes_flags_keep_their_names(tmp_path):
    with pytest.raises(ValueError, match="--basic-auth-user needs --basic-auth-password-file"):
        auth_headers(None, "ops", None)


def test_every_query_carries_them(tmp_path):
    """The Prometheus source sends them with every request of a cycle (a multi-tenant engine
    answers nothing without its tenant)."""
    from dashboard.serve import build_parser, make_metrics

    (tmp_path / "token").write_text("t0k3n")
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("authorization"), request.headers.get("x-scope-orgid")))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    src = make_metrics(build_parser().parse_args([
        "--snapshot", "s.json", "--prometheus", "http://mimir/prometheus", "--prometheus-header", "X-Scope-OrgID: hpc",
        "--prometheus-bearer-token-file", str(tmp_path / "token")]))
    src.client = httpx.Client(transport=httpx.MockTransport(handler), headers=src.client.headers)
    src.window(1_796_440_800, 600, 15)
    assert len(seen) >= 20 and set(seen) == {("Bearer t0k3n", "hpc")}


@pytest.fixture
def this_host(monkeypatch):
    """This host as `fetch.is_this_host` sees it: its name and its interfaces' addresses (a MAC
    address among them, as psutil lists the link layer's)."""
    import socket
    from types import SimpleNamespace as A

    import psutil

    monkeypatch.setattr(socket, "gethostname", lambda: "Monitor01.hpc.example")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "lo": [A(address="127.0.0.1"), A(address="::1")],
        "ib0": [A(address="10.1.0.7"), A(address="fe80::1%ib0"), A(address="80:00:02:08:fe:80")]})


@pytest.mark.parametrize("url, flag, want", [
    ("http://127.0.0.1:8428", None, "identity"),
    ("http://localhost:9090/prometheus", None, "identity"),
    ("http://[::1]:9090", None, "identity"),
    ("https://127.3.0.9", None, "identity"),
    ("http://vm.localhost:8428", None, "identity"),
    ("http://10.1.0.7:8428", None, "identity"),  # an interface's address
    ("http://[fe80::1]:8428", None, "identity"),
    ("http://monitor01:8428", None, "identity"),  # its name, short or whole, any case
    ("http://MONITOR01.hpc.example:8428", None, "identity"),
    ("http://10.1.0.8:8428", None, "gzip"),
    ("http://monitor02:8428", None, "gzip"),
    ("http://vmselect:8481/select/0/prometheus", None, "gzip"),
    ("http://localhost.example.org:9090", None, "gzip"),  # no name is resolved: only localhost itself
    ("http://10.1.0.8:8428", "none", "identity"),
    ("http://127.0.0.1:8428", "gzip", "gzip"),
])
def test_answers_come_as_they_are_from_this_host(this_host, url, flag, want):
    """Gzip costs the engine more CPU than moving the bytes costs within this host: a cycle asks an
    engine on it for its answers as they are, one elsewhere for them gzipped, unless
    --prometheus-compression says; every request carries it, and a source built without headers
    decides by its URL alike."""
    from dashboard.serve import build_parser, make_metrics
    from dashboard.sources.prometheus import PrometheusSource

    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("accept-encoding"))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    argv = ["--snapshot", "s.json", "--prometheus", url] + (["--prometheus-compression", flag] if flag else [])
    src = make_metrics(build_parser().parse_args(argv))
    src.client = httpx.Client(transport=httpx.MockTransport(handler), headers=src.client.headers)
    src.window(1_796_440_800, 600, 15)
    assert len(seen) >= 20 and set(seen) == {want}
    if flag is None:
        seen.clear()
        PrometheusSource(url, client=httpx.Client(transport=httpx.MockTransport(handler))).window(1_796_440_800, 600, 15)
        assert len(seen) >= 20 and set(seen) == {want}


def test_an_address_not_understood_is_not_this_host(monkeypatch):
    import psutil

    from collectors.fetch import accept_encoding, is_this_host

    assert not is_this_host("http://[::1:9090") and not is_this_host("") and not is_this_host("127.0.0.1")
    with pytest.raises(ValueError, match="one of auto, gzip, none"):
        accept_encoding("http://127.0.0.1", "br")

    def unreadable():
        raise OSError("no interfaces")

    monkeypatch.setattr(psutil, "net_if_addrs", unreadable)  # then only loopback is known
    assert is_this_host("http://127.0.0.1:8428") and not is_this_host("http://10.1.0.7:8428")


def test_commands_refuse_bad_credentials_in_one_line(tmp_path, capsys):
    from dashboard.capture_cli import main as capture
    from dashboard.diagnose_cli import main as diagnose
    from dashboard.serve import main as serve

    bad = ["--prometheus-basic-auth-user", "ops"]
    assert diagnose(["--prometheus", "http://127.0.0.1:9", *bad]) == 2
    assert capture(["--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path / "b"), *bad]) == 2
    assert serve(["--snapshot", str(tmp_path / "s.json"), "--prometheus", "http://127.0.0.1:9", *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("needs --prometheus-basic-auth-password-file") == 3 and "Traceback" not in err


@pytest.mark.parametrize("value, want", [("auto", None), ("1", 1), ("8", 8), ("64", 64)])
def test_query_concurrency_flag(value, want):
    from dashboard.diagnose_cli import build_parser
    from dashboard.serve import build_parser as serve_parser

    assert build_parser().parse_args(["--prometheus-query-concurrency", value]).prometheus_concurrency == want
    assert serve_parser().parse_args(["--snapshot", "s.json", "--prometheus-query-concurrency", value]).prometheus_concurrency == want
    assert build_parser().parse_args([]).prometheus_concurrency is None  # auto


@pytest.mark.parametrize("value", ["0", "65", "-2", "two", "", "1.5", "\u00b2", "\u0663"])
def test_query_concurrency_flag_refuses_other_values(value, capsys):
    from dashboard.diagnose_cli import main as diagnose

    with pytest.raises(SystemExit) as exc:
        diagnose(["--prometheus", "http://127.0.0.1:9", "--prometheus-query-concurrency", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--prometheus-query-concurrency" in err and "1 to 64, or auto" in err and "Traceback" not in err
