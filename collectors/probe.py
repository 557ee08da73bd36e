"""The agent's on-demand link probe: iperf3 (TCP) or perftest's ib_write_bw / ib_write_lat (RDMA),
as server or client, when an authenticated operator asks (`gangwatch probe JOBID`).

Off unless `--probe.enable`; then only for authenticated callers: the web config's basic-auth users
(checked by the server for every path), or, on an agent without such users, a bearer token
(`--probe.token-file`). The agent will not start with the probe enabled and neither configured.

Endpoints (GET, answers are JSON):
- `/api/v1/probe/serve?tool=T&seconds=S`: start a one-connection server of tool T bound to
  `--probe.address`, answer `{address, port, tool}` once it listens; it is killed S + 5 s later
  if no client came.
- `/api/v1/probe/run?tool=T&peer=IP&port=P&seconds=S`: run the client against a peer's server for S
  seconds (at most `--probe.max-seconds`, 10) and answer `{bits_per_second, latency_seconds,
  rated_bits_per_second, ...}`; the rated speed is the local link's (sysfs), null when unknown.
At most one probe per node at a time: a second request while one runs (server or client) gets 429
with Retry-After. Bandwidth is capped at `--probe.max-bitrate` (iperf3 `-b`, perftest
`--rate_limit`). Commands are argv lists; the peer must be an IP address and every number is
range-checked, so no request string reaches a command line unparsed. Without an RDMA device the
RDMA tools say so and the answer is 503 `no RDMA device: <the tool's words>`.
"""

from __future__ import annotations

import fcntl
import hmac
import ipaddress
import json
import os
import re
import select
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass

from .runner import CommandRunner
from .web import Request, Response

TOOLS = ("iperf3", "ib_write_bw", "ib_write_lat")
MAX_SECONDS = 10  # the bound per pair
JSON = "application/json"
_BITRATE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMG]?)$")
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
NO_DEVICE = ("Did not detect devices", "Unable to find the Infiniband/RoCE device", "No IB devices found",
             "Failed to get IB devices list")


def add_arguments(p) -> None:
    p.add_argument("--probe.enable", dest="probe_enable", action="store_true",
                   help="Serve the on-demand link probe (/api/v1/probe/*) to authenticated callers.")
    p.add_argument("--probe.token-file", dest="probe_token_file", default=None,
                   help="File holding the bearer token probe callers must send (else the web config's "
                        "basic-auth users).")
    p.add_argument("--probe.address", dest="probe_address", default=None,
                   help="Address the probe tools bind to (default: the listen address' host).")
    p.add_argument("--probe.port", dest="probe_port", type=int, default=5201, help="Port of the probe server.")
    p.add_argument("--probe.max-seconds", dest="probe_max_seconds", type=int, default=MAX_SECONDS,
                   help=f"Longest probe run in seconds (at most {MAX_SECONDS}).")
    p.add_argument("--probe.max-bitrate", dest="probe_max_bitrate", default="10G",
                   help="Bandwidth cap of a probe in bits/s, with K, M or G (iperf3 -b, perftest --rate_limit).")
    p.add_argument("--probe.rdma-device", dest="probe_rdma_device", default=None,
                   help="RDMA device for ib_write_bw/ib_write_lat (default: the first one).")


def bitrate(text: str) -> float:
    m = _BITRATE.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"bitrate {text!r} is not a positive number with K, M or G")
    return float(m.group(1)) * _SCALE[m.group(2)]


# ---------------------------------------------------------------------------------------------
# Parsers (pure)


def parse_iperf3(text: str) -> dict:
    """iperf3 -J (client) -> bits per second received and the sender's mean RTT in seconds."""
    doc = json.loads(text)
    if doc.get("error"):
        raise ValueError(str(doc["error"]))
    end = doc.get("end") or {}
    bps = (end.get("sum_received") or {}).get("bits_per_second")
    rtts = [s.get("sender", {}).get("mean_rtt") for s in end.get("streams", ())]
    rtts = [r for r in rtts if isinstance(r, (int, float))]
    if not isinstance(bps, (int, float)):
        raise ValueError("iperf3 reported no received bitrate")
    return {"bits_per_second": float(bps), "latency_seconds": (sum(rtts) / len(rtts) / 1e6) if rtts else None}


def _columns(header: str) -> list[str]:
    """A perftest table header's column names: they are apart by two spaces or more and may hold
    one ("BW average[Gb/sec]", "tps average"), except perftest 4.5's latency header, which opens
    with "#bytes #iterations", one space apart."""
    out: list[str] = []
    for piece in re.split(r"\s{2,}", header.strip()):
        words = piece.split()
        out.extend(words if all(w.startswith("#") for w in words) else [piece])
    return out


def parse_perftest(text: str) -> dict:
    """ib_write_bw / ib_write_lat report table -> bits per second (BW average) or latency (t_avg)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            header = _columns(line)
            for row in lines[i + 1:]:
                values = row.split()
                if values and values[0].isdigit():
                    got = dict(zip(header, values))
                    out: dict = {"bits_per_second": None, "latency_seconds": None}
                    if "BW average[Gb/sec]" in got:
                        out["bits_per_second"] = float(got["BW average[Gb/sec]"]) * 1e9
                    lat = got.get("t_avg[usec]") or got.get("t_typical[usec]")
                    if lat is not None:
                        out["latency_seconds"] = float(lat) / 1e6
                    return out
    raise ValueError("no result table in the perftest output")


def no_device(text: str) -> str | None:
    """The perftest tool's own words when it found no RDMA device, else None."""
    if any(s in text for s in NO_DEVICE):
        return " ".join(line.strip() for line in text.splitlines() if line.strip())[:300]
    return None


# ---------------------------------------------------------------------------------------------
# Link speed


def _iface_of(address: str) -> str | None:
    """The interface holding an IPv4 address (SIOCGIFADDR per interface), or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
        if socket.inet_ntoa(raw[20:24]) == address:
            return name
    return None


def rated_bits_per_second(sysfs: str, tool: str, address: str, rdma_device: str | None) -> float | None:
    """The local link's rated speed: net/<iface>/speed (Mb/s) for TCP, infiniband/<dev>/ports/1/rate
    for RDMA; None when unknown (loopback, virtual NICs and down links report none)."""
    try:
        if tool == "iperf3":
            iface = _iface_of(address)
            if iface is None:
                return None
            with open(os.path.join(sysfs, "class", "net", iface, "speed")) as fh:
                mbps = int(fh.read().strip())
            return mbps * 1e6 if mbps > 0 else None
        dev = rdma_device or sorted(os.listdir(os.path.join(sysfs, "class", "infiniband")))[0]
        with open(os.path.join(sysfs, "class", "infiniband", dev, "ports", "1", "rate")) as fh:
            m = re.match(r"\s*([0-9.]+) Gb/sec", fh.read())
        return float(m.group(1)) * 1e9 if m else None
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------
# The agent side


@dataclass
class ProbeConfig:
    address: str
    port: int
    max_seconds: int
    max_bitrate: float
    token: str | None
    basic_auth: bool
    sysfs: str = "/sys"
    rdma_device: str | None = None


class ProbeService:
    """One probe at a time on this node; each request validated, each tool an argv list."""

    def __init__(self, cfg: ProbeConfig, runner: CommandRunner | None = None):
        self.cfg = cfg
        self.runner = runner or CommandRunner()
        self._slot = threading.Lock()
        self.busy_since = 0.0

    # -- HTTP -------------------------------------------------------------------------------------

    def routes(self) -> dict:
        return {"/api/v1/probe/serve": self._guarded(self.serve), "/api/v1/probe/run": self._guarded(self.run)}

    def _guarded(self, fn):
        def handle(req: Request) -> Response:
            # with web-config users the server has checked the caller's basic auth before this handler
            # (a bearer header would have been refused there): the token is for agents without users
            if not self.cfg.basic_auth and not self._bearer_ok(req.headers.get("authorization", "")):
                return _answer(401, {"error": "a bearer token is needed for the probe"},
                               {"WWW-Authenticate": 'Bearer realm="gangwatch-probe"'})
            try:
                args = self._params(req)
            except ValueError as exc:
                return _answer(400, {"error": str(exc)})
            if not self._slot.acquire(blocking=False):
                left = max(1, int(self.busy_since + self.cfg.max_seconds + 5 - time.monotonic()))
                return _answer(429, {"error": "a probe is already running on this node; one at a time"},
                               {"Retry-After": str(left)})
            self.busy_since = time.monotonic()
            return fn(args)
        return handle

    def _bearer_ok(self, header: str) -> bool:
        if self.cfg.token is None:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), (self.cfg.token or "").encode())

    def _params(self, req: Request) -> dict:
        q = {k: v[-1] for k, v in req.query.items()}
        tool = q.get("tool", "iperf3")
        if tool not in TOOLS:
            raise ValueError(f"tool must be one of {', '.join(TOOLS)}")
        seconds = _int(q.get("seconds", "5"), "seconds", 1, self.cfg.max_seconds)
        out = {"tool": tool, "seconds": seconds}
        if req.path.endswith("/run"):
            try:
                out["peer"] = str(ipaddress.ip_address(q.get("peer", "")))
            except ValueError:
                raise ValueError("peer must be an IP address") from None
            out["port"] = _int(q.get("port", ""), "port", 1, 65535)
        return out

    # -- server -----------------------------------------------------------------------------------

    def serve(self, a: dict) -> Response:
        """Start the one-connection server; the slot is held until it exits (handed to its reaper)."""
        handed = False
        try:
            argv = self._server_argv(a["tool"], a["seconds"])
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                return _answer(503, {"error": f"cannot start {a['tool']}: {exc.strerror or exc}"})
            ready, text = _wait_listening(proc, a["tool"], 3.0)
            if not ready:
                _kill(proc)
                reason = no_device(text)
                if reason:
                    return _answer(503, {"error": f"no RDMA device: {reason}", "tool": a["tool"]})
                return _answer(503, {"error": f"{a['tool']} server did not start: {text.strip()[:300]}"})
            threading.Thread(target=self._reap, args=(proc, a["seconds"] + 5.0), daemon=True,
                             name="probe-server").start()
            handed = True
            return _answer(200, {"address": self.cfg.address, "port": self.cfg.port, "tool": a["tool"]})
        finally:
            if not handed:
                self._slot.release()

    def _reap(self, proc: subprocess.Popen, limit: float) -> None:
        try:
            proc.communicate(timeout=limit)  # reading its output, so a chatty server never blocks on the pipe
        except subprocess.TimeoutExpired:
            _kill(proc)
        finally:
            self._slot.release()

    def _server_argv(self, tool: str, seconds: int) -> list[str]:
        if tool == "iperf3":
            return ["iperf3", "-s", "-1", "--forceflush", "-B", self.cfg.address, "-p", str(self.cfg.port)]
        return [tool, *self._rdma_args(tool, seconds), "-p", str(self.cfg.port)]

    def _rdma_args(self, tool: str, seconds: int) -> list[str]:
        dev = ["-d", self.cfg.rdma_device] if self.cfg.rdma_device else []
        if tool == "ib_write_lat":
            return dev + ["-D", str(seconds)]
        return dev + ["-D", str(seconds), "--report_gbits", "--rate_limit_type=SW", "--rate_units=g",
                      f"--rate_limit={self.cfg.max_bitrate / 1e9:g}"]

    # -- client -----------------------------------------------------------------------------------

    def run(self, a: dict) -> Response:
        try:
            tool, seconds = a["tool"], a["seconds"]
            if tool == "iperf3":
                argv = ["iperf3", "-c", a["peer"], "-p", str(a["port"]), "-B", self.cfg.address, "-t", str(seconds),
                        "-J", "-b", f"{self.cfg.max_bitrate:.0f}"]
            else:
                argv = [tool, *self._rdma_args(tool, seconds), "-p", str(a["port"]), a["peer"]]
            res = self.runner.run(argv, timeout=seconds + 5.0)
            rated = rated_bits_per_second(self.cfg.sysfs, tool, self.cfg.address, self.cfg.rdma_device)
            base = {"tool": tool, "seconds": seconds, "source": self.cfg.address, "peer": a["peer"],
                    "rated_bits_per_second": rated}
            if res.error:
                return _answer(503, base | {"error": f"cannot run {tool}: {res.error}"})
            if res.timed_out:
                return _answer(504, base | {"error": f"{tool} did not finish in {seconds + 5} s"})
            reason = no_device(res.stdout + res.stderr)
            if reason:
                return _answer(503, base | {"error": f"no RDMA device: {reason}"})
            try:
                got = parse_iperf3(res.stdout) if tool == "iperf3" else parse_perftest(res.stdout)
            except ValueError as exc:
                return _answer(502, base | {"error": f"{tool} failed: {exc}"})
            return _answer(200, base | got)
        finally:
            self._slot.release()


def _wait_listening(proc: subprocess.Popen, tool: str, limit: float) -> tuple[bool, str]:
    """Read the server's output until it says it listens (iperf3), or for a moment (perftest
    servers print nothing until a client connects: still running after 0.5 s means waiting)."""
    end = time.monotonic() + (limit if tool == "iperf3" else 0.5)
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not r:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            return False, buf.decode(errors="replace")
        buf += chunk
        if tool == "iperf3" and b"listening" in buf:
            return True, buf.decode(errors="replace")
        if no_device(buf.decode(errors="replace")):
            return False, buf.decode(errors="replace")
    text = buf.decode(errors="replace")
    return (tool != "iperf3" and proc.poll() is None), text


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        pass


def _int(text: str, name: str, lo: int, hi: int) -> int:
    if not str(text).isascii() or not str(text).isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}")
    return int(text)


def _answer(status: int, doc: dict, extra: dict | None = None) -> Response:
    return status, JSON, json.dumps(doc).encode(), dict(extra or {})


def build_service(args, users: bool) -> ProbeService:
    """The agent's probe from its flags; ValueError (with the reason) when it may not run."""
    token = None
    if args.probe_token_file:
        try:
            with open(args.probe_token_file) as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read --probe.token-file: {exc.strerror or exc}") from None
        if not token:
            raise ValueError("--probe.token-file is empty")
    if token is None and not users:
        raise ValueError("--probe.enable needs authentication: basic_auth_users in --web.config.file, "
                         "or --probe.token-file")
    host = args.probe_address or args.web_listen_address.rpartition(":")[0].strip("[]")
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError("--probe.enable needs --probe.address (an IP address the probe tools bind to)") from None
    max_seconds = args.probe_max_seconds
    if not 1 <= max_seconds <= MAX_SECONDS:
        raise ValueError(f"--probe.max-seconds must be from 1 to {MAX_SECONDS}")
    if not 1 <= args.probe_port <= 65535:
        raise ValueError("--probe.port must be from 1 to 65535")
    cfg = ProbeConfig(address=address, port=args.probe_port, max_seconds=max_seconds,
                      max_bitrate=bitrate(args.probe_max_bitrate), token=token, basic_auth=users,
                      sysfs=args.path_sysfs, rdma_device=args.probe_rdma_device)
    return ProbeService(cfg)
