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
    assert engine_headers(args_of()) == {}
    assert engine_headers(args_of("--prometheus-bearer-token-file", str(tmp_path / "token"),
                                  "--prometheus-header", "X-Scope-OrgID: hpc")) == \
        {"Authorization": "Bearer t0k3n", "X-Scope-OrgID": "hpc"}
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
