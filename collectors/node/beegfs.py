"""BeeGFS: this client's I/O per mount, the storage servers' load, and target reachability/consistency.

Sources (the command path and the client's procfs directory are flags; beegfs-ctl needs root, as
it reads the client config and talks to the management daemon):
- `beegfs-ctl --mount=<mnt> --clientstats --nodetype=storage --interval=0 --rwunit=B --allstats`:
  the storage servers' per-client operation counters since they started, summed over servers. The
  rows of this node's own addresses (from `<proc>/fs/beegfs/*/client_info`, or
  `--collector.beegfs.client-address`) become its per-mount counters.
- `beegfs-ctl --mount=<mnt> --serverstats --nodetype=storage --perserver --names`: per storage
  server, the last second's requests, bytes read/written, and the requests queued and being worked
  on now.
- `beegfs-ctl --mount=<mnt> --serverstats --nodetype=meta --perserver --names` (mode `metastats`):
  per metadata server, the same without bytes (beegfs-ctl's ModeIOStat prints reqs, qlen and bsy
  only for meta and mgmtd nodes).
- `beegfs-ctl --mount=<mnt> --listtargets --nodetype=storage|meta --state --longnodes`: each target's
  reachability (Online, Probably-offline, Offline) and consistency (Good, Needs-resync, Bad) and the
  server holding it.
- `<proc>/fs/beegfs/<session>/{storage,meta}_target_state`: the same states as this client sees
  them, readable without beegfs-ctl.
Mounts are the `beegfs` entries of `<procfs>/mounts` (or `--collector.beegfs.mount`); the `fs`
label is the mount point.

Metrics:
- `gangwatch_beegfs_client_{read,write}_bytes_total{fs}`, `gangwatch_beegfs_client_operations_total{fs,operation}`.
- `gangwatch_beegfs_server_requests{fs,server,state=queued|active}`, `gangwatch_beegfs_server_requests_per_second{fs,server}`,
  `gangwatch_beegfs_server_{read,write}_bytes_per_second{fs,server}`.
- `gangwatch_beegfs_meta_server_requests{fs,server,state}`, `gangwatch_beegfs_meta_server_requests_per_second{fs,server}`.
- `gangwatch_beegfs_target_server_requests{fs,target,state}` and
  `gangwatch_beegfs_target_server_requests_per_second{fs,target}`: the figures of the server holding
  each storage target. BeeGFS reports load per server, not per target; by Little's law (requests
  in the server / requests per second) they give the target's time per request, which the
  diagnosis compares across targets as it does Lustre OST read latency.
- `gangwatch_beegfs_target_reachability{fs,nodetype,target,state}` and
  `gangwatch_beegfs_target_consistency{fs,nodetype,target,state}` (1 for the current state, 0 for the
  others), `gangwatch_beegfs_target_info{fs,nodetype,target,target_id,server}`,
  `gangwatch_beegfs_client_target_reachability{session,nodetype,target,state}` (from procfs).
- `gangwatch_beegfs_command_{error,timeout}{command,fs}`, `gangwatch_beegfs_command_duration_seconds{command,fs}`.
Target labels are `<fs>:target<ID>` (storage) and `<fs>:meta<ID>` (metadata), so one name says
which filesystem a culprit belongs to.

Failure modes: neither beegfs-ctl nor the procfs directory -> NoData (quiet). Each command runs in
a background thread under `--collector.beegfs.timeout` (killed with its process group when it
passes) and a scrape waits at most `--collector.beegfs.wait` for the runs it started, else serves
the last finished ones; a run still going from an earlier scrape is not waited for again, so a hung
management daemon costs one scrape the wait and a `command_timeout` metric, never a hung scrape. A
non-zero exit or output without any recognisable row sets `command_error`. clientstats prints bytes
with six significant digits (std::ostream's default), so byte counters move in steps of a
millionth of their value.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..exposition import Family, counter, format_labels, gauge
from ..registry import Collector, NoData, register
from .gpfs import Probe

REACHABILITY = ("Online", "Probably-offline", "Offline")
CONSISTENCY = ("Good", "Needs-resync", "Bad")
# beegfs-ctl's storage op names (OpCounterTypes.h, StorageOpToStringMapping) -> ours; bytes apart
OPERATIONS = {
    "open": "opens", "close": "closes", "ops-rd": "reads", "ops-wr": "writes", "fsync": "fsyncs",
    "getFSize": "getfsizes", "sAttr": "setattrs", "statfs": "statfs", "trunc": "truncates", "unlnk": "unlinks",
}
MODES = ("clientstats", "serverstats", "metastats", "listtargets", "listmeta")


# ---------------------------------------------------------------------------------------------
# Parsers (pure)

_OP = re.compile(r"(-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?)\s+\[([^\]\s]+)\]")


def parse_clientstats(text: str) -> dict[str, dict[str, float]]:
    """`--clientstats` output -> {client id (IP or name, "Sum:" for the total): {op name: value}}."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        if not head or "[" in head:
            continue
        ops = {}
        for value, name in _OP.findall(rest):
            try:
                ops[name] = float(value)
            except ValueError:
                continue  # a garbled number drops only that field
        if ops:
            out.setdefault(head, ops)
    return out


@dataclass(frozen=True)
class ServerStats:
    node_id: str
    name: str
    values: Mapping[str, float] = field(default_factory=dict)  # header name -> value


def parse_serverstats(text: str) -> tuple[int | None, list[ServerStats]]:
    """`--serverstats --perserver [--names]` -> (time index, one row per server); columns by header."""
    stamp, header, rows = None, None, []
    for line in text.splitlines():
        m = re.match(r"^=+ time index: (\d+)", line)
        if m:
            stamp = int(m.group(1))
            continue
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "nodeID":
            header = tokens[1:]
            continue
        if header is None or not tokens[0].isdigit():
            continue
        values = {}
        for name, tok in zip(header, tokens[1:]):
            if name != "name" and re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", tok):
                values[name] = float(tok)
        name = tokens[len(header)] if "name" in header and len(tokens) > len(header) else ""
        rows.append(ServerStats(tokens[0], name, values))
    return stamp, rows


@dataclass(frozen=True)
class TargetState:
    target_id: str
    reachability: str  # one of REACHABILITY, or "unknown"
    consistency: str  # one of CONSISTENCY, "resyncing", or "unknown"
    server_id: str = ""
    server: str = ""


_NODE = re.compile(r"^(?:beegfs-\w+\s+)?(.*?)\s*\[ID:\s*(\d+)\]$")
_PROC_STATE = re.compile(r"^\[Target ID: (\d+)\] @ (.*?): (\S+) / (\S+)\s*$")


def _state(value: str, known: tuple[str, ...]) -> str:
    return value if value in known or value == "resyncing" else "unknown"


def _server(field_: str) -> tuple[str, str]:
    m = _NODE.match(field_.strip())
    if m:
        return m.group(2), m.group(1)
    return (field_.strip(), "") if field_.strip().isdigit() else ("", field_.strip())


def parse_listtargets(text: str) -> list[TargetState]:
    """`--listtargets --state [--longnodes]` -> target states (`<invalid_value>` is unknown)."""
    out = []
    for line in text.splitlines():
        tokens = line.split(None, 3)
        if not tokens or not tokens[0].isdigit():
            continue
        if len(tokens) >= 2 and tokens[1] == "<invalid_value>":
            node = line.split("<invalid_value>", 1)[1]
            out.append(TargetState(tokens[0], "unknown", "unknown", *_server(node)))
        elif len(tokens) == 4:
            out.append(TargetState(tokens[0], _state(tokens[1], REACHABILITY), _state(tokens[2], CONSISTENCY),
                                   *_server(tokens[3])))
    return out


def parse_proc_target_states(text: str) -> list[TargetState]:
    """`<proc>/fs/beegfs/<session>/*_target_state` -> the client's view of each target."""
    out = []
    for line in text.splitlines():
        m = _PROC_STATE.match(line)
        if m:
            out.append(TargetState(m.group(1), _state(m.group(3), REACHABILITY), _state(m.group(4), CONSISTENCY),
                                   *_server(m.group(2))))
    return out


_IP = re.compile(r"ip addr: ([0-9A-Fa-f.:]+)")


def parse_client_info(text: str) -> list[str]:
    """`client_info` -> the addresses the client talks to the servers from."""
    return _IP.findall(text)


def parse_mounts(text: str) -> list[str]:
    """`/proc/mounts` -> BeeGFS mount points (octal escapes such as `\\040` decoded)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "beegfs":
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1]))
    return out


def target_name(fs: str, nodetype: str, target_id: str) -> str:
    return f"{fs}:{'meta' if nodetype == 'meta' else 'target'}{target_id}"


# ---------------------------------------------------------------------------------------------
# The collector


def _read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as fh:
            return fh.read(1 << 20)
    except OSError:
        return None


@register
class BeegfsCollector(Collector):
    """BeeGFS: client I/O per mount, storage server load, target reachability and consistency."""

    name = "beegfs"

    @classmethod
    def add_arguments(cls, parser) -> None:
        parser.add_argument("--collector.beegfs.ctl-path", dest="collector_beegfs_ctl_path", default="beegfs-ctl",
                            help="Path of the beegfs-ctl command.")
        parser.add_argument("--collector.beegfs.proc-path", dest="collector_beegfs_proc_path", default="",
                            help="The BeeGFS client's procfs directory (default: <path.procfs>/fs/beegfs).")
        parser.add_argument("--collector.beegfs.mount", dest="collector_beegfs_mount", action="append", default=None,
                            help="BeeGFS mount point to query (repeatable; default: every beegfs mount).")
        parser.add_argument("--collector.beegfs.client-address", dest="collector_beegfs_client_address",
                            action="append", default=None,
                            help="Address the servers see this client as (repeatable; default: the addresses "
                                 "in client_info).")
        parser.add_argument("--collector.beegfs.modes", dest="collector_beegfs_modes", default=",".join(MODES),
                            help="beegfs-ctl queries to run, comma-separated: " + ", ".join(MODES) + ".")
        parser.add_argument("--collector.beegfs.timeout", dest="collector_beegfs_timeout", type=float, default=5.0,
                            help="Seconds each beegfs-ctl run may take before it is killed and reported as "
                                 "timed out.")
        parser.add_argument("--collector.beegfs.wait", dest="collector_beegfs_wait", type=float, default=0.5,
                            help="Seconds a scrape waits for fresh beegfs-ctl results before serving the last "
                                 "finished ones (keep it under --scrape.timeout).")

    def __init__(self, ctx):
        super().__init__(ctx)
        opt = ctx.option
        self.ctl = opt("collector_beegfs_ctl_path") or "beegfs-ctl"
        self.proc = opt("collector_beegfs_proc_path") or ctx.paths.proc("fs", "beegfs")
        self.mounts = list(opt("collector_beegfs_mount") or [])
        self.addresses = list(opt("collector_beegfs_client_address") or [])
        modes = str(opt("collector_beegfs_modes", ",".join(MODES)) or "")
        self.modes = [m for m in (x.strip() for x in modes.split(",")) if m in MODES]
        self.timeout = float(opt("collector_beegfs_timeout", 5.0) or 5.0)
        self.wait = float(opt("collector_beegfs_wait", 0.5) or 0.0)
        self.probes: dict[tuple[str, str], Probe] = {}

    def _argv(self, mode: str, mount: str) -> list[str]:
        base = [self.ctl] + ([f"--mount={mount}"] if mount else [])
        return base + {
            "clientstats": ["--clientstats", "--nodetype=storage", "--interval=0", "--rwunit=B", "--allstats"],
            "serverstats": ["--serverstats", "--nodetype=storage", "--perserver", "--names"],
            "metastats": ["--serverstats", "--nodetype=meta", "--perserver", "--names"],
            "listtargets": ["--listtargets", "--nodetype=storage", "--state", "--longnodes"],
            "listmeta": ["--listtargets", "--nodetype=meta", "--state", "--longnodes"],
        }[mode]

    def _probe(self, mode: str, mount: str) -> Probe:
        key = (mode, mount)
        p = self.probes.get(key)
        if p is None:
            p = self.probes[key] = Probe(f"beegfs-{mode}", self.ctx.runner, self._argv(mode, mount), None, self.timeout)
        return p

    def _installed(self) -> bool:
        return os.path.exists(self.ctl) if os.path.isabs(self.ctl) else shutil.which(self.ctl) is not None

    def collect(self) -> Iterable[Family]:
        sessions = sorted(os.listdir(self.proc)) if os.path.isdir(self.proc) else []
        ctl = self._installed()
        if not ctl and not sessions:
            raise NoData("no beegfs-ctl and no BeeGFS client procfs directory")
        fams: list[Family] = self._proc_families(sessions)
        if not ctl:
            return fams
        # one set of runs per mount point, however often it is listed (bind mounts repeat it)
        mounts = list(dict.fromkeys(self.mounts or parse_mounts(_read(self.ctx.paths.proc("mounts")) or ""))) or [""]
        deadline = time.monotonic() + self.wait
        runs = [(mode, mount, self._probe(mode, mount)) for mount in mounts for mode in self.modes]
        for done in [p.begin() for _, _, p in runs]:
            if done is not None:  # a run an earlier scrape started and still going is not waited for again
                done.wait(max(0.0, deadline - time.monotonic()))
        f = _Families()
        addresses = set(self.addresses) or self._addresses(sessions)
        for mode, mount, probe in runs:
            result = probe.last
            if result is None:
                continue  # first run still going; its outcome shows in a later scrape
            fs = mount or "beegfs"
            ok = result.ok and getattr(self, f"_{mode}")(f, fs, result.stdout, addresses)
            lbl = format_labels({"command": mode, "fs": fs})
            f.error.add_rendered(lbl, 0 if ok or result.timed_out else 1)
            f.timeout.add_rendered(lbl, 1 if result.timed_out else 0)
            f.duration.add_rendered(lbl, round(result.duration, 6))
        return fams + f.all()

    def _addresses(self, sessions: list[str]) -> set[str]:
        out: set[str] = set()
        for s in sessions:
            out.update(parse_client_info(_read(os.path.join(self.proc, s, "client_info")) or ""))
        return out

    def _proc_families(self, sessions: list[str]) -> list[Family]:
        fam = gauge("gangwatch_beegfs_client_target_reachability",
                    "Reachability of a BeeGFS target as this client sees it (procfs): 1 for the current state "
                    "(Online, Probably-offline, Offline), 0 for the others.")
        for s in sessions:
            for nodetype in ("storage", "meta"):
                for t in parse_proc_target_states(_read(os.path.join(self.proc, s, f"{nodetype}_target_state")) or ""):
                    for state in REACHABILITY:
                        fam.add(int(t.reachability == state), session=s, nodetype=nodetype,
                                target=target_name("", nodetype, t.target_id).lstrip(":"), state=state)
        return [fam]

    # -- one method per beegfs-ctl mode: parse, fill families, say whether the output made sense --

    def _clientstats(self, f: "_Families", fs: str, text: str, addresses: set[str]) -> bool:
        rows = parse_clientstats(text)
        mine = [ops for ip, ops in rows.items() if ip in addresses]
        if mine:
            total = {k: sum(o.get(k, 0.0) for o in mine) for k in {k for o in mine for k in o}}
            base = {"fs": fs}
            if "B-rd" in total:
                f.rb.add(total["B-rd"], base)
            if "B-wr" in total:
                f.wb.add(total["B-wr"], base)
            for name, op in OPERATIONS.items():
                if name in total:
                    f.ops.add(total[name], base, operation=op)
        return bool(rows) or not text.strip()  # no client has done I/O yet: empty, not an error

    def _serverstats(self, f: "_Families", fs: str, text: str, addresses: set[str], nodetype: str = "storage") -> bool:
        _, rows = parse_serverstats(text)
        req, rate = (f.srv_req, f.srv_rate) if nodetype == "storage" else (f.meta_req, f.meta_rate)
        by_id = {}
        for r in rows:
            server = r.name or r.node_id
            by_id[r.node_id] = r
            v = r.values
            base = {"fs": fs, "server": server}
            if "qlen" in v and "bsy" in v:
                req.add(v["qlen"], base, state="queued")
                req.add(v["bsy"], base, state="active")
            if "reqs" in v:
                rate.add(v["reqs"], base)
            if "read_KiB" in v:
                f.srv_rb.add(v["read_KiB"] * 1024, base)
            if "write_KiB" in v:
                f.srv_wb.add(v["write_KiB"] * 1024, base)
        if nodetype == "storage":
            f.server_stats[fs] = by_id
            f.join(fs)
        return bool(rows)

    def _metastats(self, f: "_Families", fs: str, text: str, addresses: set[str]) -> bool:
        return self._serverstats(f, fs, text, addresses, "meta")

    def _listtargets(self, f: "_Families", fs: str, text: str, addresses: set[str], nodetype: str = "storage") -> bool:
        targets = parse_listtargets(text)
        for t in targets:
            name = target_name(fs, nodetype, t.target_id)
            base = {"fs": fs, "nodetype": nodetype, "target": name}
            for state in REACHABILITY:
                f.reach.add(int(t.reachability == state), base, state=state)
            for state in CONSISTENCY:
                f.cons.add(int(t.consistency == state), base, state=state)
            f.info.add(1, base, target_id=t.target_id, server=t.server or t.server_id)
        if nodetype == "storage":
            f.targets[fs] = targets
            f.join(fs)
        return bool(targets)

    def _listmeta(self, f: "_Families", fs: str, text: str, addresses: set[str]) -> bool:
        return self._listtargets(f, fs, text, addresses, "meta")

    def close(self) -> None:
        for p in self.probes.values():
            p.join(p.timeout + 2.0)


class _Families:
    """The families of one scrape, and the per-mount server rows and targets to join."""

    def __init__(self) -> None:
        self.rb = counter("gangwatch_beegfs_client_read_bytes_total",
                          "Bytes this node read from the BeeGFS filesystem, as the storage servers counted them "
                          "since they started (clientstats; six significant digits).")
        self.wb = counter("gangwatch_beegfs_client_write_bytes_total",
                          "Bytes this node wrote to the BeeGFS filesystem, as the storage servers counted them "
                          "since they started (clientstats; six significant digits).")
        self.ops = counter("gangwatch_beegfs_client_operations_total",
                           "Storage operations of this node on the BeeGFS filesystem since the servers started, "
                           "by operation (clientstats).")
        self.srv_req = gauge("gangwatch_beegfs_server_requests",
                             "Requests at the BeeGFS storage server now: queued, or active (being worked on by a "
                             "worker thread) (serverstats qlen, bsy).")
        self.srv_rate = gauge("gangwatch_beegfs_server_requests_per_second",
                              "Requests the BeeGFS storage server processed in the last second (serverstats reqs).")
        self.meta_req = gauge("gangwatch_beegfs_meta_server_requests",
                              "Requests at the BeeGFS metadata server now: queued, or active (being worked on by a "
                              "worker thread) (serverstats --nodetype=meta qlen, bsy).")
        self.meta_rate = gauge("gangwatch_beegfs_meta_server_requests_per_second",
                               "Requests the BeeGFS metadata server processed in the last second (serverstats "
                               "--nodetype=meta reqs).")
        self.srv_rb = gauge("gangwatch_beegfs_server_read_bytes_per_second",
                            "Bytes the BeeGFS storage server read from its targets in the last second.")
        self.srv_wb = gauge("gangwatch_beegfs_server_write_bytes_per_second",
                            "Bytes the BeeGFS storage server wrote to its targets in the last second.")
        self.tgt_req = gauge("gangwatch_beegfs_target_server_requests",
                             "Requests queued or active at the storage server holding the BeeGFS target (BeeGFS "
                             "reports load per server); divided by the server's requests per second it is the "
                             "time per request (Little's law).")
        self.tgt_rate = gauge("gangwatch_beegfs_target_server_requests_per_second",
                              "Requests processed in the last second by the storage server holding the BeeGFS target.")
        self.reach = gauge("gangwatch_beegfs_target_reachability",
                           "Reachability of the BeeGFS target as the management daemon reports it: 1 for the current "
                           "state (Online, Probably-offline, Offline), 0 for the others; all 0 when unknown.")
        self.cons = gauge("gangwatch_beegfs_target_consistency",
                          "Consistency of the BeeGFS target: 1 for the current state (Good, Needs-resync, Bad), 0 for "
                          "the others; all 0 while a resync runs or when unknown.")
        self.info = gauge("gangwatch_beegfs_target_info", "A BeeGFS target and the server holding it; value 1.")
        self.error = gauge("gangwatch_beegfs_command_error",
                           "Whether the last finished beegfs-ctl run failed: non-zero exit, could not start, or "
                           "output without any recognisable row (1), or not (0).")
        self.timeout = gauge("gangwatch_beegfs_command_timeout",
                             "Whether the last beegfs-ctl run was killed at its timeout (1) or not (0).")
        self.duration = gauge("gangwatch_beegfs_command_duration_seconds",
                              "Seconds the last finished beegfs-ctl run took.")
        self.server_stats: dict[str, dict[str, ServerStats]] = {}
        self.targets: dict[str, list[TargetState]] = {}

    def join(self, fs: str) -> None:
        """Once both the server rows and the targets of a mount are in: each target gets its server's load."""
        rows, targets = self.server_stats.get(fs), self.targets.get(fs)
        if rows is None or targets is None:
            return
        for t in targets:
            r = rows.get(t.server_id)
            if r is None or "qlen" not in r.values or "bsy" not in r.values:
                continue  # a server that did not answer: unknown, not idle
            base = {"fs": fs, "target": target_name(fs, "storage", t.target_id)}
            self.tgt_req.add(r.values["qlen"], base, state="queued")
            self.tgt_req.add(r.values["bsy"], base, state="active")
            if "reqs" in r.values:
                self.tgt_rate.add(r.values["reqs"], base)

    def all(self) -> list[Family]:
        return [self.rb, self.wb, self.ops, self.srv_req, self.srv_rate, self.meta_req, self.meta_rate, self.srv_rb, self.srv_wb, self.tgt_req,
                self.tgt_rate, self.reach, self.cons, self.info, self.error, self.timeout, self.duration]
