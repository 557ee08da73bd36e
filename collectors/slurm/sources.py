"""Where the Slurm state comes from, and the poller that reads it once per interval.

* `CliSource`: the Slurm commands on this host (needs a working `SLURM_CONF`/munge; any user may
  run them, though `sshare -a` and `sprio` show more to operators). The Slurm version
  (`squeue --version`) picks JSON where that version has it: `squeue --json` everywhere
  (21.08+); `sinfo --json` for nodes on 22.05 and `scontrol show nodes|partitions|reservations
  --json` and `sdiag --json` from 23.02; the text forms `scontrol -o show partition|reservation`
  and `sdiag` on 22.05; `sprio`, `sshare -P` and `scontrol show topology` text on every version.
  The commands of one poll run concurrently under ONE deadline (`timeout`, the poll's budget, not
  each command's), through `CommandRunner` (no shell): a frozen or dead controller costs one
  deadline per poll, not one per command, so `up 0` shows within a poll interval. "No topology information
  available" (no topology plugin) is an answer, not a failure: no switches, no error.
* `RestSource`: slurmrestd over a unix socket (`unix:/path`) or HTTP(S) with a JWT
  (`X-SLURM-USER-TOKEN`). The OpenAPI version is found by asking `/slurm/<v>/ping` newest first
  (or fixed by flag). slurmrestd has no sprio/sshare/topology; those may still come from the CLI.
* `TopologyFile`: wraps either source and reads the switches from a topology.conf file instead.
* `Poller`: one background thread polls the source every `interval` seconds, so any number of
  scrapers cost one poll per interval. A failed poll (timeout, non-zero exit, garbage, missing
  jobs or nodes, or Slurm's own "Unable to contact slurm controller" in an exit-0 JSON document)
  keeps the last good snapshot, served marked `stale` with its age, its errors and
  `failing_since` (when the outage began); each failure is logged and counted.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ..runner import CommandRunner
from .model import Snapshot, SourceError
from .parse_text import SPRIO_FORMAT
from .sched_config import QOS_ARGV
from .snapshot import PollFailed, RawOutput, build_snapshot
from .topology import NO_TOPOLOGY

log = logging.getLogger(__name__)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class CommandStatus:
    command: str  # short name used as the metric label: squeue, sinfo, scontrol_nodes, sprio, ...
    ok: bool
    duration: float
    error: str = ""


class Source(Protocol):
    name: str

    def poll(self) -> tuple[list[RawOutput], list[CommandStatus]]: ...


def parse_version(text: str) -> tuple[int, int] | None:
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def cli_plan(version: tuple[int, int] | None) -> list[tuple[str, str, list[str], str]]:
    """(kind, label, argv, fmt) per command for a Slurm version (None = unknown: 22.05's forms)."""
    new = version is not None and version >= (23, 2)
    old = version is not None and version < (21, 8)
    plan = []
    if old:  # no --json at all before 21.08
        plan += [("jobs", "scontrol_jobs", ["scontrol", "-o", "show", "job", "-d"], "text"),
                 ("nodes", "scontrol_nodes", ["scontrol", "-o", "show", "node", "-d"], "text")]
    else:
        plan.append(("jobs", "squeue", ["squeue", "--json"], "json"))
        plan.append(("nodes", "scontrol_nodes", ["scontrol", "show", "nodes", "--json"], "json") if new
                    else ("nodes", "sinfo", ["sinfo", "--json"], "json"))
    if new:
        plan += [("partitions", "scontrol_partitions", ["scontrol", "show", "partitions", "--json"], "json"),
                 ("reservations", "scontrol_reservations", ["scontrol", "show", "reservations", "--json"], "json"),
                 ("scheduler", "sdiag", ["sdiag", "--json"], "json")]
    else:
        plan += [("partitions", "scontrol_partitions", ["scontrol", "-o", "show", "partition"], "text"),
                 ("reservations", "scontrol_reservations", ["scontrol", "-o", "show", "reservation"], "text"),
                 ("scheduler", "sdiag", ["sdiag"], "text")]
    plan += [("priority", "sprio", ["sprio", "-h", "-o", SPRIO_FORMAT], "sprio"),
             ("fairshare", "sshare", ["sshare", "-l", "-a", "-P"], "sshare"),
             ("topology", "scontrol_topology", ["scontrol", "show", "topology"], "topology")]
    return plan


# Slurm's configuration changes rarely: read every `slow_interval` seconds, not every poll. Kinds:
# config (`scontrol show config`: SchedulerType, SchedulerParameters, job defaults), qos (QOS limits,
# needs slurmdbd), licenses.
SLOW_PLAN = [("config", "scontrol_config", ["scontrol", "show", "config"], "config"),
             ("qos", "sacctmgr_qos", QOS_ARGV, "qos"),
             ("licenses", "scontrol_licenses", ["scontrol", "-o", "show", "licenses"], "licenses")]
SLOW_KINDS = frozenset(k for k, *_ in SLOW_PLAN)


def _describe_failure(res) -> str:
    if res.error:
        return res.error
    if res.timed_out:
        return f"timed out after {res.duration:.1f}s"
    err = (res.stderr or "").strip().splitlines()
    return f"exit status {res.returncode}" + (f": {err[-1][:300]}" if err else "")


class CliSource:
    name = "cli"

    def __init__(self, runner: CommandRunner | None = None, timeout: float = 10.0, bin_dir: str = "",
                 skip: tuple[str, ...] = (), slow_interval: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.runner = runner or CommandRunner()
        self.timeout = timeout
        self.bin_dir = bin_dir.rstrip("/")
        self.skip = set(skip)  # kinds not to poll, e.g. {"fairshare"} on a cluster without slurmdbd
        self.slow_interval = slow_interval  # <= 0: never read the configuration
        self.clock = clock
        self._slow_at: float | None = None  # when the configuration was last read
        self._slow: dict[str, RawOutput] = {}  # its last good outputs, added to every poll
        self.version: tuple[int, int] | None = None
        self.version_text = ""

    def _argv(self, argv: list[str]) -> list[str]:
        return [f"{self.bin_dir}/{argv[0]}", *argv[1:]] if self.bin_dir else argv

    def _run(self, argv: list[str], deadline: float):
        return self.runner.run(self._argv(argv), timeout=max(0.1, deadline - time.monotonic()))

    def detect_version(self, deadline: float | None = None) -> CommandStatus:
        res = self._run(["squeue", "--version"], deadline or time.monotonic() + self.timeout)
        if res.ok and parse_version(res.stdout):
            self.version = parse_version(res.stdout)
            self.version_text = res.stdout.strip()
            return CommandStatus("squeue_version", True, res.duration)
        return CommandStatus("squeue_version", False, res.duration, _describe_failure(res))

    def poll(self) -> tuple[list[RawOutput], list[CommandStatus]]:
        deadline = time.monotonic() + self.timeout
        statuses: list[CommandStatus] = []
        if self.version is None:
            statuses.append(self.detect_version(deadline))
            if self.version is None:
                # without a version we do not know which forms to ask for; the poll fails visibly
                return [RawOutput("jobs", "squeue --version", "json", None, statuses[-1].error)], statuses
        plan = [p for p in cli_plan(self.version) if p[0] not in self.skip]
        now = self.clock()
        slow = self.slow_interval > 0 and (self._slow_at is None or now - self._slow_at >= self.slow_interval)
        if slow:  # in the same poll, under the same deadline
            self._slow_at = now
            plan += [p for p in SLOW_PLAN if p[0] not in self.skip]
        # one thread per command, all under the same deadline: a poll costs the slowest command
        with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="slurm-cmd") as pool:
            results = list(pool.map(lambda p: self._run(p[2], deadline), plan))
        raws: list[RawOutput] = []
        for (kind, label, argv, fmt), res in zip(plan, results):
            shown = " ".join(argv)
            if kind == "topology" and not res.timed_out and NO_TOPOLOGY in res.stderr + res.stdout:
                # no topology plugin: a valid answer (no switches), whatever the exit status says
                res = replace(res, returncode=0, stdout="", stderr="")
            silent_error = res.ok and not res.stdout.strip() and "error" in res.stderr.lower()
            if silent_error:
                # exit 0, no output, an error on stderr: how 22.05's `scontrol show topology` answers a
                # dead controller ("slurm_load_topo error: Unable to contact slurm controller")
                said = res.stderr.strip().splitlines()[-1][:300]
                res = replace(res, returncode=None, error=f"exit status 0 but: {said}")
            if kind == "config" and res.ok and "SchedulerType" not in res.stdout:
                res = replace(res, returncode=None, error="not `scontrol show config` output (no SchedulerType line)")
            if res.ok:
                raws.append(RawOutput(kind, shown, fmt, res.stdout, duration=res.duration, label=label))
                statuses.append(CommandStatus(label, True, res.duration))
            else:
                why = _describe_failure(res)
                raws.append(RawOutput(kind, shown, fmt, None, why, res.duration, label))
                statuses.append(CommandStatus(label, False, res.duration, why))
        if slow:
            for raw in raws:
                if raw.kind in SLOW_KINDS and (raw.text is not None or raw.kind not in self._slow):
                    self._slow[raw.kind] = raw
            # a configuration read that failed keeps the last good one (older, not absent); its
            # status still says it failed
            raws = [r for r in raws if r.kind not in SLOW_KINDS]
        return raws + list(self._slow.values()), statuses


class TopologyFile:
    """Another source, plus the switches of a topology.conf file read at every poll (instead of
    `scontrol show topology`: for slurmrestd, or a controller without topology/tree)."""

    MAX_BYTES = 16 << 20

    def __init__(self, inner: Source, path: str):
        self.inner = inner
        self.path = path
        self.name = inner.name

    def poll(self) -> tuple[list[RawOutput], list[CommandStatus]]:
        raws, statuses = self.inner.poll()
        start = time.monotonic()
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                text, err = fh.read(self.MAX_BYTES + 1), ""
            if len(text) > self.MAX_BYTES:
                text, err = None, f"larger than {self.MAX_BYTES} bytes"
        except OSError as exc:
            text, err = None, f"{type(exc).__name__}: {exc}"
        dur = time.monotonic() - start
        raws.append(RawOutput("topology", self.path, "topology", text, err, dur))
        statuses.append(CommandStatus("topology_file", text is not None, dur, err))
        return raws, statuses

    def close(self) -> None:
        getattr(self.inner, "close", lambda: None)()


class RestSource:
    """slurmrestd client. `url` is `unix:/path/to/slurmrestd.sock` or `http(s)://host:port`."""

    name = "slurmrestd"
    VERSIONS = ("v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")

    def __init__(self, url: str, api_version: str = "auto", token: str = "", user: str = "", timeout: float = 10.0,
                 extras: CliSource | None = None, transport=None):
        import httpx

        headers = {}
        if token:
            headers["X-SLURM-USER-TOKEN"] = token
            if user:
                headers["X-SLURM-USER-NAME"] = user
        if url.startswith("unix:"):
            transport = transport or httpx.HTTPTransport(uds=url[5:])
            base = "http://localhost"
        else:
            base = url.rstrip("/")
        self.client = httpx.Client(base_url=base, transport=transport, headers=headers, timeout=timeout)
        self.timeout = timeout  # the whole poll's budget, shared by its requests
        self.api_version = None if api_version == "auto" else api_version
        self.auto_version = api_version == "auto"
        self.extras = extras  # a CliSource for sprio/sshare, which slurmrestd does not offer

    def _get(self, path: str, deadline: float | None = None):
        start = time.monotonic()
        left = self.timeout if deadline is None else deadline - start
        if left <= 0:
            return None, 0.0, "not asked: the poll's deadline had passed"
        try:
            resp = self.client.get(path, timeout=left)
        except Exception as exc:  # connection refused, timeout, bad socket path
            return None, time.monotonic() - start, f"{type(exc).__name__}: {exc}"
        dur = time.monotonic() - start
        if resp.status_code != 200:
            body = resp.text.strip().splitlines()
            return resp.text if resp.headers.get("content-type", "").startswith("application/json") else None, dur, \
                f"HTTP {resp.status_code}" + (f": {body[0][:300]}" if body else "")
        return resp.text, dur, ""

    def detect_version(self, deadline: float | None = None) -> CommandStatus:
        start = time.monotonic()
        last = "no version answered"
        for v in self.VERSIONS:
            text, _, err = self._get(f"/slurm/{v}/ping", deadline)
            if text is not None and not err:
                self.api_version = v
                return CommandStatus("rest_ping", True, time.monotonic() - start)
            last = err or last
            if err.startswith(("ConnectError", "ConnectTimeout", "ReadTimeout")):
                break
        return CommandStatus("rest_ping", False, time.monotonic() - start, last)

    def poll(self) -> tuple[list[RawOutput], list[CommandStatus]]:
        deadline = time.monotonic() + self.timeout
        statuses: list[CommandStatus] = []
        if self.api_version is None:
            statuses.append(self.detect_version(deadline))
            if self.api_version is None:
                return [RawOutput("jobs", "GET /slurm/*/ping", "json", None, statuses[-1].error)], statuses
        raws = []
        for kind, ep in (("jobs", "jobs"), ("nodes", "nodes"), ("partitions", "partitions"),
                         ("reservations", "reservations"), ("scheduler", "diag")):
            path = f"/slurm/{self.api_version}/{ep}"
            text, dur, err = self._get(path, deadline)
            label = f"rest_{ep}"
            if err:
                raws.append(RawOutput(kind, f"GET {path}", "json", None, err, dur, label))
                statuses.append(CommandStatus(label, False, dur, err))
                if kind == "jobs" and self.auto_version and err.startswith("HTTP 404"):
                    self.api_version = None  # slurmrestd restarted with other plugins: ask again next poll
            else:
                raws.append(RawOutput(kind, f"GET {path}", "json", text, duration=dur, label=label))
                statuses.append(CommandStatus(label, True, dur))
        if self.extras is not None:
            self.extras.skip |= {"jobs", "nodes", "partitions", "reservations", "scheduler"}
            more, st = self.extras.poll()
            raws += more
            statuses += st
        return raws, statuses

    def close(self) -> None:
        self.client.close()


def _reported(statuses: list[CommandStatus], raws: list[RawOutput], errors) -> list[CommandStatus]:
    """A command that exited 0 but whose document carries Slurm's own errors (22.05's answer to a
    dead controller) failed: its status says so, so command_success and command_errors_total do."""
    said = {}
    for e in errors:
        if e.severity == "error" and e.message.startswith("slurm reported:"):
            said.setdefault(e.source, e.message)
    if not said:
        return statuses
    label_msg = {r.label: said[r.source] for r in raws if r.label and r.source in said}
    return [replace(st, ok=False, error=label_msg[st.command]) if st.ok and st.command in label_msg else st
            for st in statuses]


def _utc(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t is not None else "?"


class Poller:
    """Polls a source in one background thread; readers get the latest (or last good) snapshot."""

    def __init__(self, source: Source, interval: float = 15.0, clock: Callable[[], float] = time.time):
        self.source = source
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._good: Snapshot | None = None
        self._served: Snapshot | None = None
        self._failed_errors: tuple[SourceError, ...] = ()
        self._failing_since: float | None = None  # first failed poll since the last good one
        self._last_attempt: float | None = None
        self.statuses: dict[str, CommandStatus] = {}
        self.command_errors: dict[str, int] = {}
        self.polls = 0
        self.poll_failures = 0
        self.last_poll_duration = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> bool:
        """One poll; True when it produced a fresh snapshot. Never raises."""
        start = time.monotonic()
        now = self.clock()
        statuses: list[CommandStatus] = []
        raws: list[RawOutput] = []
        try:
            raws, statuses = self.source.poll()
            snap = build_snapshot(raws, now, self.source.name)
            errors: tuple[SourceError, ...] = ()
            ok = True
            statuses = _reported(statuses, raws, snap.errors)
        except PollFailed as exc:
            snap, errors, ok = None, tuple(exc.errors), False
            statuses = _reported(statuses, raws, errors)
        except Exception as exc:  # a bug or a source in a state we never saw: report, keep serving
            log.exception("slurm poll failed")
            snap, errors, ok = None, (SourceError(self.source.name, f"{type(exc).__name__}: {exc}"),), False
        with self._lock:
            recovered_from = self._failing_since if ok else None
            self.polls += 1
            self._last_attempt = now
            self.last_poll_duration = time.monotonic() - start
            for st in statuses:
                self.statuses[st.command] = st
                if not st.ok:
                    self.command_errors[st.command] = self.command_errors.get(st.command, 0) + 1
            if ok:
                self._good = self._served = snap
                self._failed_errors = ()
                self._failing_since = None
            else:
                self.poll_failures += 1
                self._failed_errors = errors
                if self._failing_since is None:
                    self._failing_since = now
                if self._good is not None:  # built once per failed poll, so readers share one object
                    self._served = replace(self._good, stale=True, errors=errors + self._good.errors, last_attempt=now,
                                           failing_since=self._failing_since)
        if not ok:
            log.warning("slurm poll failed (failing since %s): %s", _utc(self._failing_since),
                        "; ".join(f"{e.source}: {e.message}" for e in errors)[:500])
        elif recovered_from is not None:
            log.warning("slurm poll succeeded again after failing since %s", _utc(recovered_from))
        return ok

    def current(self) -> Snapshot | None:
        """The latest good snapshot; marked stale (with the failing poll's errors) if a later poll failed."""
        with self._lock:
            return self._served

    def health(self) -> dict:
        """A consistent copy of the polling counters (read by scrapes while the poller writes)."""
        with self._lock:
            return {"up": self._good is not None and not self._failed_errors, "polls": self.polls,
                    "poll_failures": self.poll_failures, "last_poll_duration": self.last_poll_duration,
                    "failing_since": self._failing_since,
                    "errors": [f"{e.source}: {e.message}" for e in self._failed_errors if e.severity == "error"],
                    "statuses": dict(self.statuses), "command_errors": dict(self.command_errors)}

    @property
    def up(self) -> bool:
        with self._lock:
            return self._good is not None and not self._failed_errors

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="slurm-poller", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
