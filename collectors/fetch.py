"""Outbound HTTP GET with a deadline for the whole operation and a cap on the body.

httpx's timeouts bound each network read, not a request: a server that trickles one byte every
second keeps a "timeout=5" request alive for as long as it likes, and a body has no size limit.
`get()` bounds both: the request runs on a helper thread that the caller waits for until the
deadline (then it gets a `FetchError`, and the helper stops at its next chunk or read timeout),
and the body is counted as it arrives, decompressed, so neither a huge nor a gzip-bombed answer
is held whole.

`Deadline` shares one budget between the several requests of one operation (a diagnosis' dozen
Prometheus queries, a capture): each request gets what is left.

Used by every client in gangwatch: serve's sources (slurm-exporter snapshot, Prometheus, the
embedded scraper), `backfill --slurm-exporter`, `diagnose --prometheus/--snapshot URL`, `capture`.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

# What one answer may hold, decompressed (the body is briefly held twice while it is joined).
# An agent's /metrics is a few MB, a slurm-exporter snapshot of 10,000 jobs ~20 MB; a Prometheus
# range query of one aggregated signal over 16,384 nodes for an hour ~100 MB (PROMETHEUS_MAX_BYTES).
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
PROMETHEUS_MAX_BYTES = 160 * 1024 * 1024


# How an answer travels (`accept_encoding`): gzip costs the server more CPU than the bytes it saves
# cost a fast link. Gzipping one 11 MB answer (32,768 series) took Prometheus 0.1-0.2 CPU-s on top of
# the 0.22-0.29 its query took, VictoriaMetrics 0.01-0.06 on top of 0.25; it compresses about 5x
# (bench/README.md, "Answers as they are").
COMPRESSION = ("auto", "gzip", "none")


def accept_encoding(url: str, compression: str = "auto") -> dict[str, str]:
    """The Accept-Encoding header for requests to `url`: `none` asks for the answer as it is,
    `gzip` compressed; `auto` is `none` where `url` names this host (`is_this_host`: the bytes
    cost nothing to move), `gzip` elsewhere."""
    if compression not in COMPRESSION:
        raise ValueError(f"compression {compression!r}: one of {', '.join(COMPRESSION)}")
    if compression == "auto":
        compression = "none" if is_this_host(url) else "gzip"
    return {"Accept-Encoding": "identity" if compression == "none" else "gzip"}


def is_this_host(url: str) -> bool:
    """Whether `url` names this host: `localhost`, a loopback address, an address of one of its
    interfaces, or its own name (as `hostname` gives it, or its first label). No name is resolved:
    a lookup could hang, and an alias this cannot tell is only asked for gzip."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:  # an unbalanced IPv6 bracket
        return False
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        name = socket.gethostname().lower()
        return host in (name, name.split(".")[0]) or host.split(".")[0] == name
    return addr.is_loopback or addr in _own_addresses()


def _own_addresses() -> set:
    try:
        import psutil

        found = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs]
    except Exception:  # psutil missing or the interfaces unreadable: only loopback is known
        return set()
    own = set()
    for text in found:
        try:
            own.add(ipaddress.ip_address(text.split("%")[0]))  # less an IPv6 zone ("fe80::1%ib0")
        except ValueError:  # a link-layer (MAC) address
            pass
    return own


class FetchError(httpx.HTTPError):
    """The request did not complete in time, or its body was too large (an httpx.HTTPError, so
    callers that handle httpx's errors handle these too)."""


class FetchLate(FetchError):
    """The request did not complete within its timeout, or the deadline had no time left for it."""


class Deadline:
    """One time budget for several requests: `left()` seconds remain (never below 0)."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self._clock = clock
        self.seconds = seconds
        self.end = clock() + seconds

    @classmethod
    def for_command(cls, seconds: float) -> "Deadline":
        """A CLI's `--timeout`: counted from the process' start, so the interpreter's start-up and
        imports (a second or more on a loaded machine) come out of it too; at least a quarter of
        it is left for the requests."""
        return cls(max(seconds - process_age(), seconds / 4))

    def left(self) -> float:
        return max(0.0, self.end - self._clock())

    def expired(self) -> bool:
        return self.left() <= 0.0


def process_age() -> float:
    """Seconds since this process started (0 when that cannot be read)."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # psutil missing or /proc unreadable: count from now
        return 0.0


def get(url: str, timeout: float, *, params: dict | None = None, headers: dict | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES, client: httpx.Client | None = None,
        deadline: Deadline | None = None) -> httpx.Response:
    """GET `url`, complete (headers and whole body) within `timeout` seconds, or within what is
    left of `deadline` if that is less. Returns a read httpx.Response (any status: call
    raise_for_status() as usual); raises FetchError when late or too large, httpx.HTTPError
    for the rest."""
    if deadline is not None:
        timeout = min(timeout, deadline.left())
    if timeout <= 0:
        raise FetchLate(f"GET {url}: no time left for the request")
    cancel = threading.Event()
    done = threading.Event()
    box: dict = {}

    def work() -> None:
        try:
            box["response"] = _read(client, url, params, headers, timeout, max_bytes, cancel)
        except BaseException as exc:  # handed to the caller, which raises it on its own thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="gangwatch-fetch", daemon=True).start()
    if not done.wait(timeout):
        cancel.set()
        raise FetchLate(f"GET {url}: no complete answer within {timeout:g} s")
    err = box.pop("error", None)
    if err is not None:
        try:
            raise err
        finally:
            del err  # else this frame, the error and its traceback form a cycle only the GC frees
    return box.pop("response")


def _read(client: httpx.Client | None, url: str, params, headers, timeout: float, max_bytes: int,
          cancel: threading.Event) -> httpx.Response:
    own = client is None
    client = client or httpx.Client()
    try:
        with client.stream("GET", url, params=params, headers=headers, timeout=httpx.Timeout(timeout)) as r:
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise FetchError(f"GET {url}: the answer is {int(declared)} bytes, more than the {max_bytes} allowed")
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                if cancel.is_set() or size + len(chunk) > max_bytes:
                    chunks.clear()  # the traceback keeps this frame: not the body with it
                    if cancel.is_set():
                        raise FetchError(f"GET {url}: abandoned at its deadline")
                    raise FetchError(f"GET {url}: the answer is more than the {max_bytes} bytes allowed")
                size += len(chunk)
                chunks.append(chunk)
            # a plain Response over the decoded body (so no Content-Encoding to decode again)
            keep = [(k, v) for k, v in r.headers.multi_items() if k.lower() not in ("content-encoding", "content-length",
                                                                                   "transfer-encoding")]
            return httpx.Response(r.status_code, headers=keep, content=b"".join(chunks), request=r.request)
    finally:
        if own:
            client.close()
