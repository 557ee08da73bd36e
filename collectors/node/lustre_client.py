"""Lustre client statistics: per filesystem (llite) and per target (OSC/MDC) of each mount.

Sources: `llite.*.stats`, `osc.*.stats`, `osc.*.rpc_stats`, `osc.*.import`, `mdc.*.stats`,
`mdc.*.rpc_stats`, `mdc.*.import`, from the files under `<procfs>/fs/lustre`, `<sysfs>/fs/lustre`
or `<sysfs>/kernel/debug/lustre`, or from `lctl get_param` (see collectors/lustre_common.py).
Privileges: none for procfs/sysfs; debugfs (Lustre 2.12+ keeps `stats` there) and lctl need root.

Metrics (labels `fs` = filesystem name, `target` = OST/MDT name such as `lustre-OST0001`, `type` =
`osc` or `mdc`):
- `gangwatch_lustre_client_{operations,io_bytes,operation_latency_seconds}_total{fs,operation}` from llite.
- `gangwatch_lustre_client_target_{operations,io_bytes,operation_latency_seconds}_total{fs,target,type,operation}`
  from the OSC/MDC `stats` (RPC counts and service times per request type, `req_waittime`, ...),
  each series only while it moved in the last `--collector.lustre_client.target-idle-seconds` (600;
  0: always): a client has an OSC per OST of every mount, and the counters of the OSTs its jobs do
  not use stand still for hours yet would be series every query over the family reads
  (collectors.quiet). `gangwatch_lustre_client_target_idle_series`: how many were left out.
- `gangwatch_lustre_client_targets_io_bytes_total{fs,type,operation}`: the target counters' bytes
  summed over the filesystem's targets, one series per node and filesystem where the per-target
  ones are one per OST (hundreds on a large filesystem); what the diagnosis reads a node's filesystem
  throughput from. It counts from the agent's start (0; `read` and `write` of every filesystem with
  OSC stats are there from the first scrape on) and never drops while the agent runs
  (lustre_common.MemberSum): a target that goes away, or whose stats are cleared, does not make it
  drop (which `rate()` would read as a reset), nor does a target first read late add its history.
- `gangwatch_lustre_client_target_rpcs_in_flight`, `..._pending_pages` {fs,target,type,operation}: now.
- `gangwatch_lustre_client_rpcs_by_pages_total{fs,type,operation,pages}` and
  `gangwatch_lustre_client_rpcs_by_in_flight_total{fs,type,operation,in_flight}`: the rpc_stats
  histograms summed over the targets of a filesystem (a large filesystem has thousands of OSTs);
  `--collector.lustre_client.per-target-histograms` adds the `target` label instead.
- `gangwatch_lustre_client_import_{connected,rpc_wait_average_seconds,rpcs_in_flight,rpc_timeouts,
  connection_attempts}{fs,target,type}` and `gangwatch_lustre_client_import_info{...,state,connection}`
  (state FULL when healthy: alerts select `{state!="FULL"}`, which the label index answers cheaply).
- `gangwatch_lustre_client_import_rpc_wait_max_seconds{fs,type}`: the largest import rpc-wait average
  among this node's imports of the filesystem, so rules read one series per node and filesystem
  instead of one per target (~33 per node); left out when no import of that fs and type gave one.
- lctl health: `gangwatch_lustre_command_{timeout,error,exit_code,duration_seconds}{collector,command}`,
  and `gangwatch_lustre_parse_failures{collector}`.
Failure modes: no Lustre -> NoData (quiet); lctl hangs -> killed at its timeout and reported by
`gangwatch_lustre_command_timeout 1`; lctl fails or prints garbage -> `..._command_error 1`; an
unparsable parameter is skipped and counted. A hung Lustre mount can block a file read in the
kernel: the scrape wrapper then reports this collector as failed and the scrape still answers.
"""

from __future__ import annotations

from ..lustre_common import (TARGET_IDLE_SECONDS, Accumulator, LustreSource, MemberSum, StatsFamilies,
                             add_common_arguments, prune_quiet, command_families, parse_failures_family, split_param, wanted)
from ..lustre_parse import fs_of_target, parse_import, parse_rpc_stats, parse_stats, split_client_device
from ..quiet import QuietSeries
from ..registry import Collector, NoData, register

PARAMS = ("llite.*.stats", "osc.*.stats", "osc.*.rpc_stats", "osc.*.import",
          "mdc.*.stats", "mdc.*.rpc_stats", "mdc.*.import")
WANTED = wanted(PARAMS)
TARGETS_IO = "gangwatch_lustre_client_targets_io_bytes_total"
TARGETS_IO_HELP = ("Bytes read or written as counted by the client's OSCs (or MDCs) of the filesystem since the "
                   "agent started: the growth of gangwatch_lustre_client_target_io_bytes_total summed over the "
                   "targets, kept from going down when a target goes away or its counters are cleared.")
IDLE_SERIES = "gangwatch_lustre_client_target_idle_series"
IDLE_SERIES_HELP = ("Per-target counter series left out of this scrape because they have not moved for "
                    "--collector.lustre_client.target-idle-seconds (targets this node does not use now).")
HISTOGRAMS = {"pages per rpc": ("rpcs_by_pages", "pages", "RPCs sent, by the number of pages they carried"),
              "rpcs in flight": ("rpcs_by_in_flight", "in_flight",
                                 "RPCs sent, by how many RPCs were already in flight to the target")}


@register
class LustreClientCollector(Collector):
    """Lustre client I/O, metadata and RPC statistics per filesystem and target."""

    name = "lustre_client"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.source = LustreSource(ctx)
        self.per_target = bool(ctx.option("collector_lustre_client_per_target_histograms", False))
        self.target_sums = MemberSum()  # gangwatch_lustre_client_targets_io_bytes_total, across scrapes
        self.quiet = QuietSeries(float(ctx.option("collector_lustre_client_target_idle_seconds", TARGET_IDLE_SECONDS)), ctx.cadence)

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_common_arguments(parser)
        parser.add_argument("--collector.lustre_client.per-target-histograms",
                            dest="collector_lustre_client_per_target_histograms", action="store_true",
                            help="Label the rpc_stats histograms by target instead of summing them per "
                                 "filesystem (many more series on large filesystems).")
        parser.add_argument("--collector.lustre_client.target-idle-seconds", dest="collector_lustre_client_target_idle_seconds",
                            type=float, default=TARGET_IDLE_SECONDS,
                            help="Leave a per-target counter's series out while it has not moved for this many "
                                 "seconds (the OSTs this node's jobs do not use); 0 exports every one.")

    def collect(self):
        fetch = self.source.fetch(PARAMS)
        if fetch.source == "none":
            raise NoData("no Lustre client parameters and no lctl")
        acc = Accumulator()
        fs_stats = StatsFamilies(acc, "gangwatch_lustre_client", "the client's llite layer")
        target_stats = StatsFamilies(acc, "gangwatch_lustre_client_target", "the client's OSC/MDC for the target")
        failures = 0
        for param, text in fetch.params:
            parts = split_param(param)
            if parts is None or (parts[0], parts[2]) not in WANTED:
                continue  # not asked for (an lctl that prints more than it was asked)
            kind, instance, leaf = parts
            if kind == "llite" and leaf == "stats":
                stats = parse_stats(text)
                if not stats.lines:
                    failures += stats.snapshot_time is None
                    continue
                fs_stats.add(stats, (("fs", fs_of_target(instance)),))
                continue
            names = split_client_device(instance)
            if names is None:
                # a server's OSP device listed under osc/ is not ours; anything else is odd
                failures += "-osc-" not in instance and "-mdc-" not in instance
                continue
            labels = (("fs", names[0]), ("target", names[1]), ("type", kind))
            if leaf == "stats":
                stats = parse_stats(text)
                if stats.lines:
                    target_stats.add(stats, labels)
                elif stats.snapshot_time is None:
                    failures += 1
            elif leaf == "rpc_stats":
                failures += not self._rpc_stats(acc, text, labels)
            elif leaf == "import":
                failures += not self._import(acc, text, labels)
        self._target_sums(acc, target_stats)
        per_target = (target_stats.ops, target_stats.bytes, target_stats.latency)
        if self.quiet.idle > 0 and any(acc.values[f] for f in per_target):  # after the sums, which count every target
            idle = prune_quiet(self.quiet, acc, per_target, self.ctx.clock())
            acc.set(acc.family(IDLE_SERIES, "gauge", IDLE_SERIES_HELP), (), idle)
        fams = acc.render()
        fams += command_families(self.name, fetch)
        fams.append(parse_failures_family(self.name, failures))
        return fams

    def _target_sums(self, acc: Accumulator, target_stats: StatsFamilies) -> None:
        readings = {((labels[0], labels[2], labels[3]), labels[1]): value
                    for labels, value in acc.values[target_stats.bytes].items()}  # (fs, type, operation), target
        # read and write of every filesystem with OSC stats, from 0 before its first byte: a reader
        # tells this agent from an older one by the series being there (prometheus.FALLBACK_FACTS)
        also = {(labels[0], labels[2], ("operation", op)) for labels in acc.values[target_stats.ops]
                if labels[2] == ("type", "osc") for op in ("read", "write")}
        if not (readings or also):
            return
        fam = acc.family(TARGETS_IO, "counter", TARGETS_IO_HELP)
        for group, total in self.target_sums.update(readings, also).items():
            acc.set(fam, group, total)

    def _rpc_stats(self, acc: Accumulator, text: str, labels) -> bool:
        rpc = parse_rpc_stats(text)
        if not (rpc.in_flight or rpc.histograms):
            return False
        now = acc.family("gangwatch_lustre_client_target_rpcs_in_flight", "gauge",
                         "RPCs the client has in flight to the target now (rpc_stats).")
        for op, value in rpc.in_flight.items():
            acc.set(now, labels + (("operation", op),), value)
        pending = acc.family("gangwatch_lustre_client_target_pending_pages", "gauge",
                             "Pages queued in the client for the target, not yet sent (rpc_stats).")
        for op, value in rpc.pending_pages.items():
            acc.set(pending, labels + (("operation", op),), value)
        hist_labels = labels if self.per_target else (labels[0], labels[2])
        for title, table in rpc.histograms.items():
            spec = HISTOGRAMS.get(title)
            if spec is None:
                continue
            metric, bucket_label, what = spec
            fam = acc.family(f"gangwatch_lustre_client_{metric}_total", "counter",
                             f"{what} (rpc_stats histogram; `pages` are client pages, usually 4 KiB).")
            for op, rows in table.items():
                for bucket, count in rows:
                    acc.add(fam, hist_labels + (("operation", op), (bucket_label, str(bucket))), count)
        return True

    def _import(self, acc: Accumulator, text: str, labels) -> bool:
        imp = parse_import(text)
        if imp is None or imp.state is None:
            return False
        info = acc.family("gangwatch_lustre_client_import_info", "gauge",
                          "The client's import of the target: connection state (FULL, DISCONN, CONNECTING, "
                          "REPLAY, EVICTED, ...) and the server NID it talks to; value 1.")
        acc.set(info, labels + (("state", imp.state), ("connection", imp.current_connection or "")), 1)
        connected = acc.family("gangwatch_lustre_client_import_connected", "gauge",
                               "Whether the client's import of the target is in state FULL (1) or not (0).")
        acc.set(connected, labels, 1 if imp.state == "FULL" else 0)
        for value, metric, help in (
                (imp.avg_waittime_seconds, "rpc_wait_average_seconds",
                 "Average seconds an RPC to the target waited for its reply (import avg_waittime)."),
                (imp.inflight, "rpcs_in_flight", "RPCs in flight on the import now."),
                (imp.timeouts, "rpc_timeouts", "RPC timeouts the import has seen since it connected."),
                (imp.connection_attempts, "connection_attempts",
                 "Connection attempts the import has made to the target.")):
            if value is not None:
                acc.set(acc.family(f"gangwatch_lustre_client_import_{metric}", "gauge", help), labels, value)
        if imp.avg_waittime_seconds is not None:
            slowest = acc.family("gangwatch_lustre_client_import_rpc_wait_max_seconds", "gauge",
                                 "Largest average seconds an RPC waited for its reply among this node's imports "
                                 "of the filesystem and type (max over targets of "
                                 "gangwatch_lustre_client_import_rpc_wait_average_seconds).")
            fs_type = (labels[0], labels[2])
            if imp.avg_waittime_seconds > acc.values[slowest].get(fs_type, -1.0):
                acc.set(slowest, fs_type, imp.avg_waittime_seconds)
        return True
