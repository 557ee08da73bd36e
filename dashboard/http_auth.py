"""Credentials and headers for the servers the dashboard-side commands ask: the agents (the link
probe) and the metrics engine (`serve`, `diagnose`, `capture --prometheus`); and how many queries
`serve` and `diagnose` send that engine at a time.

An engine behind vmauth or a reverse proxy asks for a bearer token or basic auth; a multi-tenant
Mimir or Cortex for its tenant (`X-Scope-OrgID`); a VictoriaMetrics cluster's tenant is in the URL
instead (`/select/<tenant>/prometheus`). Secrets are read from files, never taken on the command
line, where `ps` and the shell's history show them. Every problem is a ValueError naming the flag.
"""

from __future__ import annotations

import argparse
import base64
import re

from collectors import fetch

# RFC 9110's field name (a token); a value may not hold a line break, which would end the header
# and let the rest forge another
_FIELD_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _read_secret(path: str, flag: str) -> str:
    try:
        with open(path) as fh:
            secret = fh.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    if not secret or any(c in secret for c in "\r\n"):
        raise ValueError(f"{flag} {path}: {'empty' if not secret else 'more than one line'}")
    return secret


def auth_headers(token_file: str | None, user: str | None, password_file: str | None,
                 flags: tuple[str, str, str] = ("--token-file", "--basic-auth-user", "--basic-auth-password-file")
                 ) -> dict[str, str]:
    """Authorization from a bearer token file, or a basic-auth user and password file (`flags`: the
    three flags' names, for the messages)."""
    if token_file and user:
        raise ValueError(f"give {flags[0]} or {flags[1]}, not both")
    if token_file:
        return {"Authorization": f"Bearer {_read_secret(token_file, flags[0])}"}
    if user:
        if not password_file:
            raise ValueError(f"{flags[1]} needs {flags[2]}")
        pw = _read_secret(password_file, flags[2])
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}
    if password_file:
        raise ValueError(f"{flags[2]} needs {flags[1]}")
    return {}


ENGINE_FLAGS = ("--prometheus-bearer-token-file", "--prometheus-basic-auth-user", "--prometheus-basic-auth-password-file")


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(ENGINE_FLAGS[0], dest="prometheus_token_file", metavar="FILE",
                   help="file holding the bearer token --prometheus asks for (vmauth, a reverse proxy)")
    p.add_argument(ENGINE_FLAGS[1], dest="prometheus_user", metavar="USER", help="basic-auth user for --prometheus")
    p.add_argument(ENGINE_FLAGS[2], dest="prometheus_password_file", metavar="FILE",
                   help="file holding that user's password")
    p.add_argument("--prometheus-header", dest="prometheus_headers", action="append", default=[],
                   metavar="'NAME: VALUE'",
                   help="a header for every request to --prometheus, e.g. 'X-Scope-OrgID: hpc' for a multi-tenant "
                        "Mimir or Cortex (repeatable)")
    p.add_argument("--prometheus-compression", choices=fetch.COMPRESSION, default="auto",
                   help="ask --prometheus for gzipped answers or for them as they are (none: less CPU on both ends, "
                        "about 5x the bytes; for a link of 10 Gb/s or more). Default auto: none where --prometheus is "
                        "on this host (localhost, a loopback address, one of its interfaces' addresses or its own name; no name is "
                        "resolved), gzip elsewhere")


def engine_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers every request to --prometheus carries, from `add_engine_arguments`' flags (its
    Accept-Encoding too: `fetch.accept_encoding`)."""
    headers = auth_headers(args.prometheus_token_file, args.prometheus_user, args.prometheus_password_file, ENGINE_FLAGS)
    headers.update(fetch.accept_encoding(getattr(args, "prometheus", None) or "", args.prometheus_compression))
    for item in args.prometheus_headers:
        name, sep, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _FIELD_NAME.match(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"--prometheus-header {item!r} is not 'NAME: VALUE' (one line, a header name)")
        if name.lower() == "authorization" and "Authorization" in headers:
            raise ValueError("--prometheus-header Authorization and a credentials flag: give one")
        if name.lower() == "accept-encoding":
            raise ValueError("--prometheus-header Accept-Encoding: give --prometheus-compression")
        headers[name] = value
    return headers


def query_concurrency(text: str) -> int | None:
    """`--prometheus-query-concurrency`'s value (an argparse type): 1 to 64 queries, or None for `auto`."""
    if text == "auto":
        return None
    n = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of queries at a time, 1 to 64, or auto")
    return n


def add_concurrency_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus-query-concurrency", dest="prometheus_concurrency", type=query_concurrency,
                   default=None, metavar="N|auto",
                   help="queries a cycle sends --prometheus at a time (default auto: half the cores a Prometheus "
                        "reports, 2 to 8; 2 where the engine does not say, as VictoriaMetrics, which spreads each "
                        "query over its cores itself)")
