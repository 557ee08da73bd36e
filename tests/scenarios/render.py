"""A built scenario -> a bundle directory (../shared/ARCHITECTURE.md "Bundle"), in one of two schemas.

- `gangwatch`: the names gangwatch's own agent exports (collectors/), host in `instance`.
- `exporters`: what sites already run: node_exporter (`node_*`), dcgm-exporter (`DCGM_FI_*`, host label
  `Hostname` or `hostname`, `hpc_job`), HPE lustre_exporter (`lustre_*`, client and OSS side) or
  gpfs_exporter (`gpfs_*`), each scraped on its usual port.

Counters are cumulative from a random value at boot; each target is scraped at its own phase (a
fraction of a second apart), as Prometheus spreads scrapes. A value the exporter would not emit
(GPU utilisation under MIG) is absent, never zero. Kept smaller than real scrapes on purpose:
four CPUs per node (the node-wide fractions kept) and five CPU modes, only throttle reasons active
in the window (and hw_slowdown), RPC histograms only for targets a node reads, no PCIe replay /
XID / SM occupancy fields (README.md says so).
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from collectors.exposition import format_labels
from collectors.slurm.hostlist import compress

from . import roce, storage_nics
from .build import Built
from .model import Cluster, Job

SCHEMAS = ("gangwatch", "exporters")
CPU_MODES = ("user", "system", "idle", "iowait", "softirq")
REASONS = {0x1: "gpu_idle", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
           0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
RPC_SIZE = 4 << 20  # bytes per bulk read RPC (Lustre 2.12+ default brw_size 4 MiB with 1024 pages)
IO_TIME_BUCKETS_MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class Writer:
    """OpenMetrics text, one contiguous block per family, timestamps in seconds."""

    def __init__(self, times: np.ndarray, rng: np.random.Generator | None = None, miss: float = 0.0):
        self.times = times
        self.fams: dict[str, tuple[str, list[str]]] = {}
        self.rng, self.miss = rng, miss
        self.up: dict[str, np.ndarray] = {}  # per scrape target: scrapes that succeeded

    def target_up(self, instance: str) -> np.ndarray:
        """A target's failed scrapes (timeouts, restarts) lose all its series at once, as in Prometheus."""
        up = self.up.get(instance)
        if up is None:
            up = np.ones(len(self.times), bool)
            if self.rng is not None and self.miss > 0:
                up &= self.rng.random(len(self.times)) >= self.miss
                up[-1] = True  # the capture's last scrape is there (keeps "now" defined for every target)
            self.up[instance] = up
        return up

    def add(self, name: str, labels: dict, values, *, kind: str = "gauge", fmt: str = "%.6g",
            offset: float = 0.0, mask: np.ndarray | None = None) -> None:
        fam = name[:-6] if kind == "counter" and name.endswith("_total") else name
        if kind == "counter" and not name.endswith("_total"):
            kind = "unknown"  # OpenMetrics counters end in _total; dcgm-exporter's do not
        typ, lines = self.fams.setdefault(fam, (kind, []))
        vals = np.broadcast_to(np.asarray(values, dtype=float), self.times.shape)
        keep = ~np.isnan(vals)
        if mask is not None:
            keep &= mask
        if "instance" in labels:
            keep &= self.target_up(labels["instance"])
        if not keep.any():
            return
        head = name + format_labels(labels) + " "
        ts = self.times[keep] + offset
        lines.extend(f"{head}{fmt % v} {t:.3f}\n" for v, t in zip(vals[keep].tolist(), ts.tolist()))

    def text(self) -> str:
        out = []
        for fam, (kind, lines) in self.fams.items():
            if lines:
                out.append(f"# TYPE {fam} {kind}\n")
                out.extend(lines)
        out.append("# EOF\n")
        return "".join(out)


def counter(rate: np.ndarray, dt: float, rng: np.random.Generator, start: float | None = None) -> np.ndarray:
    """Per-second rates -> a cumulative integer counter as an exporter would read it."""
    inc = np.floor(np.maximum(rate, 0) * dt)
    base = float(rng.integers(10**6, 10**12)) if start is None else start
    return base + np.cumsum(inc)


def events(per_step: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return float(rng.integers(0, 3)) + np.cumsum(per_step)


AGENT_IDLE_S = 600.0  # the agent's --collector.*.{error,target}-idle-seconds default (docs/agent.md)


def quiet(values: np.ndarray, times: np.ndarray, idle: float = AGENT_IDLE_S) -> tuple[np.ndarray, np.ndarray]:
    """(values, kept) as gangwatch's agent exports a counter it leaves out while still (docs/agent.md,
    "Per-target counters that stand still are left out"): a sample only while the counter moved in
    the last `idle` seconds (the agent started long before the capture, so a counter still since its
    start is never there); back at its next move, at the value it stood at for that one scrape, at
    its own from the next."""
    v = np.asarray(values, dtype=float)
    out, kept = v.copy(), np.zeros(v.shape, bool)
    last, shown = -np.inf, False
    for i in range(v.shape[0]):
        if i and v[i] != v[i - 1]:
            if not shown:
                out[i] = v[i - 1]
            last = times[i]
        shown = kept[i] = times[i] - last < idle
    return out, kept


# the RDMA ports' series, by what they count, in the agent's and node_exporter's names
IB_AGENT_NAMES = {"tx": "transmit_data_bytes_total", "rx": "receive_data_bytes_total", "wait": "transmit_wait_ticks_total",
                  "down": "link_downed_total", "sym": "symbol_errors_total", "rec": "link_error_recoveries_total",
                  "rate": "rate_bytes_per_second", "state": "state_id", "phys": "physical_state_id"}
IB_EXPORTER_NAMES = {"tx": "port_data_transmitted_bytes_total", "rx": "port_data_received_bytes_total",
                     "wait": "port_transmit_wait_total", "down": "link_downed_total", "sym": "symbol_error_total",
                     "rec": "link_error_recovery_total", "rate": "rate_bytes_per_second", "state": "state_id",
                     "phys": "physical_state_id"}
IB_AGENT_PREFIX = "gangwatch_infiniband_port_"
LUSTRE_TARGET_IO = "gangwatch_lustre_client_target_io_bytes_total"
LUSTRE_TARGET_OPS = "gangwatch_lustre_client_target_operations_total"
LUSTRE_TARGET_LATENCY = "gangwatch_lustre_client_target_operation_latency_seconds_total"
# the agent's families that `quiet` leaves out while still: a site scraping less often than the
# render sees such a series back at the value it stood at for one of its own scrapes (`as_site`)
QUIET_FAMILIES = (IB_AGENT_PREFIX + IB_AGENT_NAMES["down"], IB_AGENT_PREFIX + IB_AGENT_NAMES["sym"],
                  LUSTRE_TARGET_IO, LUSTRE_TARGET_OPS, LUSTRE_TARGET_LATENCY)


def _roce_view(b: Built) -> roce.RoceView | None:
    """The NICs' view of a RoCE build, drawn from the build's seed: both schemas of a seed show the
    same NICs (the same firmware, marking share and retransmissions), as they show the same GPUs."""
    if b.cluster.fabric != "roce":
        return None
    key = int(hashlib.sha1(b.scenario.name.encode()).hexdigest()[:8], 16)
    return roce.view(b.cluster, np.random.default_rng([b.seed, key]))


def _gpu_owner(c: Cluster) -> dict[tuple[int, int], Job]:
    own = {}
    for j in c.jobs:
        if j.mig:
            continue
        for n, gs in j.gpus.items():
            for g in gs:
                own[(n, g)] = j
    return own


def _hex(*parts) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def _uuid(rng, c: Cluster, n: int, g: int) -> str:
    h = _hex(c.names[n], g, c.end)
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# ------------------------------------------------------------------------------- gangwatch

def render_gangwatch(b: Built, w: Writer, rng: np.random.Generator, offs: np.ndarray) -> None:
    c = b.cluster
    dt = c.interval
    own = _gpu_owner(c)
    mib = float(1 << 20)
    mig = getattr(c, "mig_layout", {})
    dom = b.params.get("domain", "")
    starts = {j.jobid: j.start for j in c.jobs}
    rv = _roce_view(b)
    for n, host in enumerate(c.names):
        base = {"instance": f"{host}{dom}:9810", "job": "gangwatch"}
        o = offs[n]
        for g in range(c.G):
            lg = {**base, "gpu": str(g)}
            w.add("gangwatch_gpu_info", {**lg, "name": c.model.name, "uuid": _uuid(rng, c, n, g),
                                         "mig_mode": "1" if n in mig else "0"}, 1, offset=o)
            w.add("gangwatch_gpu_utilization_ratio", lg, np.round(c.util[n, g], 2), offset=o)
            if n not in mig:
                w.add("gangwatch_gpu_memory_used_bytes", lg, np.round(c.fb[n, g]) * mib, fmt="%.0f", offset=o)
            w.add("gangwatch_gpu_memory_total_bytes", lg, c.model.fb_mib * mib, fmt="%.0f", offset=o)
            w.add("gangwatch_gpu_power_watts", lg, np.round(c.power[n, g], 3), offset=o)
            w.add("gangwatch_gpu_energy_joules_total", lg, counter(c.power[n, g], dt, rng), kind="counter",
                  fmt="%.0f", offset=o)
            w.add("gangwatch_gpu_temperature_celsius", {**lg, "sensor": "gpu"}, np.round(c.temp[n, g]), offset=o)
            w.add("gangwatch_gpu_clock_hz", {**lg, "clock": "sm"}, c.clock[n, g] * 1e6, fmt="%.0f", offset=o)
            seen = int(np.bitwise_or.reduce(c.throttle[n, g]))
            for bit, reason in REASONS.items():
                if not (bit & (seen | 0x8)):
                    continue  # trimmed: reasons never active in the window (hw_slowdown always kept)
                w.add("gangwatch_gpu_clock_throttle_reason", {**lg, "reason": reason},
                      (c.throttle[n, g] & bit) > 0, fmt="%d", offset=o)
            w.add("gangwatch_gpu_compute_processes", lg, c.procs[n, g], fmt="%d", offset=o)
            if c.nvlink_capable and n not in mig:
                for link in ("0", "1"):  # two of the GPU's links carry the traffic here (trimmed)
                    for d in ("tx", "rx"):
                        w.add("gangwatch_gpu_nvlink_data_bytes_total", {**lg, "link": link, "direction": d},
                              counter(c.nvlink[n, g] / 2, dt, rng) // 1024 * 1024, kind="counter", fmt="%.0f",
                              offset=o)
            if c.prof != "none" and n not in mig:
                w.add("gangwatch_gpu_prof_graphics_engine_active_ratio", lg, np.round(c.gr[n, g], 4), offset=o)
                w.add("gangwatch_gpu_prof_tensor_active_ratio", {**lg, "pipe": "tensor"}, np.round(c.tensor[n, g], 4),
                      offset=o)
                w.add("gangwatch_gpu_prof_dram_active_ratio", lg, np.round(c.dram[n, g], 4), offset=o)
                if c.prof == "full":
                    w.add("gangwatch_gpu_prof_sm_active_ratio", lg, np.round(c.sm[n, g], 4), offset=o)
            j = own.get((n, g))
            if j is not None:
                w.add("gangwatch_job_gpu_info", {**base, "jobid": str(j.jobid), "gpu": str(g), "source": "mapping"},
                      1, fmt="%d", offset=o, mask=c.times >= j.start)
        for g, gi, prof in mig.get(n, []):
            st = c.mig_state[(n, g, gi)]
            li = {**base, "gpu": str(g), "gpu_instance": str(gi), "compute_instance": "0", "profile": prof}
            w.add("gangwatch_gpu_mig_info", {**li, "uuid": f"MIG-{_uuid(rng, c, n, g)[4:]}{gi}"}, 1, fmt="%d", offset=o)
            w.add("gangwatch_gpu_mig_memory_used_bytes", li, np.round(st["fb"] + 13) * mib, fmt="%.0f", offset=o)
        for j in c.jobs:
            for jn, slots in j.mig.items():
                if jn == n:
                    for g, gi, _ in slots:
                        w.add("gangwatch_job_gpu_info", {**base, "jobid": str(j.jobid), "gpu": str(g),
                                                         "source": "mapping"}, 1, fmt="%d", offset=o,
                              mask=c.times >= j.start)
        _ib(w, c, n, base, o, rng, IB_AGENT_PREFIX, IB_AGENT_NAMES, rv,
            idle="gangwatch_infiniband_port_idle_series")
        for p, dev in enumerate(c.devices):
            w.add("gangwatch_infiniband_port_info", {**base, "device": dev, "port": "1",
                                                     "link_layer": "Ethernet" if rv else "InfiniBand",
                                                     "width": c.ib_width[n][p], "speed": c.ib_speed[n][p],
                                                     "lid": "0" if rv else str(n * c.P + p + 1)}, 1, fmt="%d", offset=o)
        if rv:
            _roce_gangwatch(w, c, n, base, o, rng, rv)
        _host(w, c, n, base, o, rng, cpu="gangwatch_cpu_seconds_total",
              psi=lambda res, kind: (f"gangwatch_pressure_{kind}_seconds_total", {"resource": res}),
              blocked="gangwatch_node_procs_blocked", net="gangwatch_network_{}_bytes_total")
        for (jid, jn), arr in c.job_psi.items():
            if jn == n:  # the job's cgroup exists from its start
                w.add("gangwatch_job_pressure_waiting_seconds_total", {**base, "jobid": str(jid), "resource": "io"},
                      np.cumsum(arr * dt), kind="counter", fmt="%.3f", offset=o, mask=c.times >= starts[jid])
        if c.fs == "lustre":
            lt = {**base, "fs": c.fs_name, "type": "osc"}
            hidden = np.zeros(c.T)
            totals = {"read": np.zeros(c.T), "write": np.zeros(c.T)}

            def target_counter(name: str, labels: dict, vals: np.ndarray, fmt: str) -> None:
                """The agent leaves a per-target counter out while it stands still."""
                shown, kept = quiet(vals, c.times)
                hidden[:] += ~kept
                w.add(name, labels, shown, kind="counter", fmt=fmt, offset=o, mask=kept)

            for k, tgt in enumerate(c.targets):
                lk = {**lt, "target": tgt}
                rd, wr = c.fs_read[n, k], c.fs_write[n, k]
                ops = rd / RPC_SIZE
                for op, rate in (("read", rd), ("write", wr)):
                    grown = counter(rate, dt, rng)
                    totals[op] += grown - grown[0]
                    target_counter(LUSTRE_TARGET_IO, {**lk, "operation": op}, grown,
                                   "%.0f")
                n_ops = counter(ops, dt, rng)
                target_counter(LUSTRE_TARGET_OPS, {**lk, "operation": "ost_read"},
                               n_ops, "%.0f")
                lat = np.diff(n_ops, prepend=n_ops[0]) * c.fs_lat[n, k]
                target_counter(LUSTRE_TARGET_LATENCY,
                               {**lk, "operation": "ost_read"}, rng.uniform(1e3, 1e5) + np.cumsum(lat), "%.6f")
            # the per-filesystem sums of the targets' growth since the agent started, always there
            since = rng.uniform(1e9, 1e13)
            for op, grown in totals.items():
                w.add("gangwatch_lustre_client_targets_io_bytes_total", {**lt, "operation": op}, since + grown,
                      kind="counter", fmt="%.0f", offset=o)
            w.add("gangwatch_lustre_client_target_idle_series", base, hidden, fmt="%d", offset=o)
            waits = np.where(c.fs_read[n] > 0, c.fs_lat[n], np.nan)
            w.add("gangwatch_lustre_client_import_rpc_wait_max_seconds", {**base, "fs": c.fs_name, "type": "osc"},
                  np.nan_to_num(np.nanmax(np.vstack([waits, c.fs_lat[n] * 0 + c.ost_base_lat[:, None]]), axis=0)),
                  fmt="%.6f", offset=o)
            w.add("gangwatch_lustre_client_io_bytes_total", {**base, "fs": c.fs_name, "operation": "read"},
                  counter(c.fs_read[n].sum(0), dt, rng), kind="counter", fmt="%.0f", offset=o)
        else:
            lf = {**base, "cluster": "gpfs.cluster", "fs": c.fs_name}
            w.add("gangwatch_gpfs_read_bytes_total", lf, counter(c.fs_read[n].sum(0), dt, rng), kind="counter",
                  fmt="%.0f", offset=o)
            w.add("gangwatch_gpfs_write_bytes_total", lf, counter(c.fs_write[n].sum(0), dt, rng), kind="counter",
                  fmt="%.0f", offset=o)
            count, longest = _gpfs_waiters(c, n, rng)
            w.add("gangwatch_gpfs_waiters_by_thread", {**base, "thread": "WorkerThread"}, count, fmt="%d", offset=o)
            w.add("gangwatch_gpfs_waiters_by_reason", {**base, "reason": "for NSD I/O completion"}, count, fmt="%d",
                  offset=o)
            w.add("gangwatch_gpfs_waiter_longest_seconds", base, longest, fmt="%.4f", offset=o)
    _storage_nodes(b, w, offs, ":9810", "gangwatch", _storage_gangwatch)


def _ib(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, prefix: str, names: dict,
        rv: roce.RoceView | None = None, idle: str = "") -> None:
    """The RDMA ports' PortCounters and sysfs state. On RoCE (`rv`) the transmit wait stands still or
    counts PFC's holds, symbol errors are the PHY's (ethtool's), and link_downed counts only where
    the firmware counts it.
    `idle` (gangwatch's agent): its error counters left out while still, counted in that gauge."""
    dt = c.interval
    hidden = np.zeros(c.T)
    rollups = {names["down"]: np.zeros(c.T), names["sym"]: np.zeros(c.T)}
    for p, dev in enumerate(c.devices):
        lp = {**base, "device": dev, "port": "1"}
        w.add(prefix + names["tx"], lp, counter(c.ib_tx[n, p], dt, rng) // 4 * 4, kind="counter", fmt="%.0f", offset=o)
        w.add(prefix + names["rx"], lp, counter(c.ib_rx[n, p], dt, rng) // 4 * 4, kind="counter", fmt="%.0f", offset=o)
        if rv is None:
            w.add(prefix + names["wait"], lp, counter(c.ib_wait[n, p], dt, rng, float(rng.integers(10**5, 10**9))),
                  kind="counter", fmt="%.0f", offset=o)
        else:
            w.add(prefix + names["wait"], lp, rv.xmit_wait[n, p], kind="counter", fmt="%.0f", offset=o)
        down = c.ib_down[n, p] if rv is None or rv.counts_link_downed else np.zeros(c.T)
        sym = c.ib_symerr[n, p] if rv is None else np.zeros(c.T)
        for name, per_step in ((names["down"], down), (names["sym"], sym)):
            vals, kept = events(per_step, rng), None
            rollups[name] += vals
            if idle:
                vals, kept = quiet(vals, c.times)
                hidden += ~kept
            w.add(prefix + name, lp, vals, kind="counter", fmt="%.0f", offset=o, mask=kept)
        w.add(prefix + names["rate"], lp, c.ib_rate[n, p], fmt="%.0f", offset=o)
        w.add(prefix + names["state"], lp, c.ib_state[n, p], fmt="%d", offset=o)
        w.add(prefix + names["phys"], lp, c.ib_phys[n, p], fmt="%d", offset=o)
    if idle:
        w.add(idle, base, hidden, fmt="%d", offset=o)
        # the agent's node rollups of the two, every port's own value at every scrape (its traffic
        # and wait rollups are left out: nothing here reads them)
        for name, total in rollups.items():
            w.add(prefix.replace("_port_", "_node_") + name, base, total, kind="counter", fmt="%.0f", offset=o)


def _roce_gangwatch(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, rv: roce.RoceView) -> None:
    """The agent's roce collector (hw_counters per port, and its node rollups) and ethtool collector's
    node rollups (pause frames received, PHY link-downs, storm guard events, CRC/symbol errors)."""
    dt = c.interval
    per_port = (("port_ecn_marked_packets_total", rv.ecn, True), ("port_cnp_sent_total", rv.cnp_sent, True),
                ("port_cnp_handled_total", rv.cnp_handled, True),
                ("port_out_of_sequence_packets_total", rv.out_of_seq, False),
                ("port_packet_sequence_errors_total", rv.seq_naks, False),
                ("port_local_ack_timeouts_total", rv.ack_timeouts, False),
                ("port_adaptive_retransmissions_total", rv.retrans, False))
    for p, dev in enumerate(c.devices):
        lp = {**base, "device": dev, "port": "1"}
        for name, arr, rate in per_port:
            w.add("gangwatch_roce_" + name, lp, counter(arr[n, p], dt, rng) if rate else events(arr[n, p], rng),
                  kind="counter", fmt="%.0f", offset=o)
    node = (("roce_node_ecn_marked_packets_total", counter(rv.ecn[n].sum(0), dt, rng)),
            ("roce_node_cnp_handled_total", counter(rv.cnp_handled[n].sum(0), dt, rng)),
            ("roce_node_sequence_errors_total", events((rv.out_of_seq[n] + rv.seq_naks[n]).sum(0), rng)),
            ("roce_node_local_ack_timeouts_total", events(rv.ack_timeouts[n].sum(0), rng)),
            # the rollup takes each NIC's global or PFC count, the larger: the PFC frames once,
            # whether or not the global counter counts them too
            ("ethtool_node_received_pause_frames_total", counter(rv.pause_rx[n].sum(0), dt, rng)),
            ("ethtool_node_link_down_events_total", events(rv.link_down[n].sum(0), rng)),
            ("ethtool_node_pause_storm_events_total", events((rv.storm_warn[n] + rv.storm_err[n]).sum(0), rng)),
            ("ethtool_node_link_errors_total", events(c.ib_symerr[n].sum(0), rng)))
    # the ethtool rollups of the NICs that carry RDMA apart from the management NIC's (the agent's
    # `nics` label where the node has RDMA devices)
    rdma = {**base, "nics": "rdma"}
    for name, vals in node:
        w.add("gangwatch_" + name, rdma if name.startswith("ethtool_") else base, vals, kind="counter", fmt="%.0f",
              offset=o)
    other = {**base, "nics": "other"}
    for name, vals in (("ethtool_node_received_pause_frames_total", counter(rv.mgmt_pause[n], dt, rng)),
                       ("ethtool_node_link_down_events_total", events(rv.mgmt_down[n], rng))):
        w.add("gangwatch_" + name, other, vals, kind="counter", fmt="%.0f", offset=o)


def _ethtool_exporter(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, rv: roce.RoceView) -> None:
    """node_exporter's ethtool collector on each NIC (mlx5's `ethtool -S` names, rx/tx spelled out; no
    _total). node_exporter reads no hw_counters: ECN and CNPs are not there."""
    dt = c.interval
    pfc_too = float(rv.global_pause_counts_pfc)  # PFC is all the pausing there is on these fabrics
    for p in range(c.P):
        ld = {**base, "device": roce.netdev(p)}
        for name, vals in (("received_pause_ctrl_phy", counter(rv.pause_rx[n, p] * pfc_too, dt, rng)),
                           (f"received_prio{roce.PRIORITY}_pause", counter(rv.pause_rx[n, p], dt, rng)),
                           ("transmitted_pause_ctrl_phy", counter(rv.pause_tx[n, p] * pfc_too, dt, rng)),
                           (f"transmitted_prio{roce.PRIORITY}_pause", counter(rv.pause_tx[n, p], dt, rng)),
                           ("link_down_events_phy", events(rv.link_down[n, p], rng)),
                           ("transmitted_pause_storm_warning_events", events(rv.storm_warn[n, p], rng)),
                           ("transmitted_pause_storm_error_events", events(rv.storm_err[n, p], rng)),
                           ("received_symbol_err_phy", events(c.ib_symerr[n, p], rng))):
            w.add("node_ethtool_" + name, ld, vals, kind="counter", fmt="%.0f", offset=o)
        # mlx5 lists every priority's counter; only the lossless class's moves (drawn last: the
        # other series keep their draws)
        for prio in sorted(set(range(8)) - {roce.PRIORITY}):
            w.add(f"node_ethtool_received_prio{prio}_pause", ld, counter(np.zeros(c.T), dt, rng), kind="counter",
                  fmt="%.0f", offset=o)
    # the onboard management NIC (bnxt): its global pause counter
    w.add("node_ethtool_received_pause_frames", {**base, "device": "eno1"}, counter(rv.mgmt_pause[n], dt, rng),
          kind="counter", fmt="%.0f", offset=o)


def _storage_view(b: Built) -> storage_nics.StorageNics | None:
    """The storage NICs of an InfiniBand build (storage_nics.py), from a generator of the build's own:
    both schemas of a seed show the same NICs."""
    key = int(hashlib.sha1(("storage " + b.scenario.name).encode()).hexdigest()[:8], 16)
    return storage_nics.view(b.cluster, np.random.default_rng([b.seed, key]))


def _storage_ports(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, sv: storage_nics.StorageNics,
                   prefix: str, names: dict, still_errors_shown: bool) -> None:
    """The storage NICs' PortCounters and sysfs rate and state, as `_ib` writes the rails'; their error
    counters stand still (the agent leaves them out, node_exporter shows zeros: `still_errors_shown`)."""
    dt = c.interval
    for s, dev in enumerate(sv.devices):
        lp = {**base, "device": dev, "port": "1"}
        w.add(prefix + names["tx"], lp, counter(sv.tx[n, s], dt, rng) // 4 * 4, kind="counter", fmt="%.0f", offset=o)
        w.add(prefix + names["rx"], lp, counter(sv.rx[n, s], dt, rng) // 4 * 4, kind="counter", fmt="%.0f", offset=o)
        w.add(prefix + names["wait"], lp, np.full(c.T, sv.wait_start[n, s]), kind="counter", fmt="%.0f", offset=o)
        if still_errors_shown:
            for name in (names["down"], names["sym"]):
                w.add(prefix + name, lp, np.zeros(c.T), kind="counter", fmt="%.0f", offset=o)
        w.add(prefix + names["rate"], lp, np.full(c.T, storage_nics.RATE_BYTES), fmt="%.0f", offset=o)
        w.add(prefix + names["state"], lp, np.full(c.T, 4), fmt="%d", offset=o)
        w.add(prefix + names["phys"], lp, np.full(c.T, 5), fmt="%d", offset=o)


def _storage_gangwatch(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, sv: storage_nics.StorageNics) -> None:
    """The agent on a node with storage NICs: their ports (link layer Ethernet), the roce collector's
    ECN marks and CNPs per port and per node, and the ethtool rollup of the NICs that carry RDMA
    (theirs: the InfiniBand HCAs have no Ethernet side)."""
    dt = c.interval
    _storage_ports(w, c, n, base, o, rng, sv, IB_AGENT_PREFIX, IB_AGENT_NAMES, False)
    for s, dev in enumerate(sv.devices):
        lp = {**base, "device": dev, "port": "1"}
        w.add("gangwatch_infiniband_port_info", {**lp, "link_layer": "Ethernet", "width": "4X",
                                                 "speed": storage_nics.SPEED, "lid": "0"}, 1, fmt="%d", offset=o)
        for name, arr in (("port_ecn_marked_packets_total", sv.ecn), ("port_cnp_handled_total", sv.cnp_handled)):
            w.add("gangwatch_roce_" + name, lp, counter(arr[n, s], dt, rng), kind="counter", fmt="%.0f", offset=o)
    for name, arr in (("roce_node_ecn_marked_packets_total", sv.ecn), ("roce_node_cnp_handled_total", sv.cnp_handled)):
        w.add("gangwatch_" + name, base, counter(arr[n].sum(0), dt, rng), kind="counter", fmt="%.0f", offset=o)
    w.add("gangwatch_ethtool_node_received_pause_frames_total", {**base, "nics": "rdma"},
          counter(sv.pause_rx[n].sum(0), dt, rng), kind="counter", fmt="%.0f", offset=o)


def _storage_exporter(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, sv: storage_nics.StorageNics) -> None:
    """node_exporter on a node with storage NICs: their ports beside the rails (no link layer), and
    its ethtool collector's PFC counters of theirs."""
    dt = c.interval
    _storage_ports(w, c, n, base, o, rng, sv, "node_infiniband_", IB_EXPORTER_NAMES, True)
    for dev in sv.devices:
        w.add("node_infiniband_info", {**base, "board_id": "MT_0000000891", "device": dev,
                                       "firmware_version": "28.39.1002", "hca_type": "MT4129"}, 1, fmt="%d", offset=o)
    pfc_too = float(sv.global_pause_counts_pfc)
    for s, dev in enumerate(sv.netdevs):
        ld = {**base, "device": dev}
        for name, vals in (("received_pause_ctrl_phy", counter(sv.pause_rx[n, s] * pfc_too, dt, rng)),
                           (f"received_prio{roce.PRIORITY}_pause", counter(sv.pause_rx[n, s], dt, rng)),
                           ("link_down_events_phy", events(np.zeros(c.T), rng))):
            w.add("node_ethtool_" + name, ld, vals, kind="counter", fmt="%.0f", offset=o)


def _storage_nodes(b: Built, w: Writer, offs: np.ndarray, port: str, job: str, render) -> None:
    """Every node's storage NICs where the build has them, after all else, with draws of their own."""
    sv = _storage_view(b)
    if sv is None:
        return
    rng = np.random.default_rng([b.seed, 0x5707])
    dom = b.params.get("domain", "")
    for n, host in enumerate(b.cluster.names):
        render(w, b.cluster, n, {"instance": f"{host}{dom}{port}", "job": job}, offs[n], rng, sv)


def _host(w: Writer, c: Cluster, n: int, base: dict, o: float, rng, *, cpu: str, psi, blocked: str, net: str) -> None:
    dt = c.interval
    ncpu = 4  # fewer CPUs than the node has, same node-wide fractions: keeps bundles small
    user, sys, iow = c.cpu_user[n], c.cpu_sys[n], c.cpu_iowait[n]
    soft = np.full(c.T, 0.003)
    # spread the node's busy fractions over its CPUs unevenly, as schedulers do
    weights = rng.dirichlet(np.full(ncpu, 4.0)) * ncpu
    for i in range(ncpu):
        wi = weights[i]
        parts = {"user": np.minimum(user * wi, 1), "system": np.minimum(sys * wi, 1),
                 "iowait": np.minimum(iow * wi, 1), "softirq": soft}
        parts["idle"] = np.clip(1 - parts["user"] - parts["system"] - parts["iowait"] - soft, 0, 1)
        for mode in CPU_MODES:
            w.add(cpu, {**base, "cpu": str(i), "mode": mode},
                  float(rng.uniform(1e4, 1e6)) + np.cumsum(parts[mode] * dt), kind="counter", fmt="%.2f", offset=o)
    for res, kind, arr in (("io", "waiting", c.psi_io[n]), ("io", "stalled", c.psi_io_full[n]),
                           ("cpu", "waiting", c.psi_cpu[n]), ("memory", "waiting", c.psi_mem[n]),
                           ("memory", "stalled", c.psi_mem[n])):
        name, extra = psi(res, kind)
        w.add(name, {**base, **extra}, float(rng.uniform(10, 1e4)) + np.cumsum(arr * dt), kind="counter",
              fmt="%.6f", offset=o)
    w.add(blocked, base, np.round(c.procs_blocked[n]), fmt="%d", offset=o)
    for d, arr in (("receive", c.eth_rx[n]), ("transmit", c.eth_tx[n])):
        w.add(net.format(d), {**base, "device": "eth0"}, counter(arr, dt, rng), kind="counter", fmt="%.0f", offset=o)


# ------------------------------------------------------------------------------- exporters

def render_exporters(b: Built, w: Writer, rng: np.random.Generator, offs: np.ndarray) -> None:
    c = b.cluster
    dt = c.interval
    own = _gpu_owner(c)
    mig = getattr(c, "mig_layout", {})
    # released dcgm-exporter says Hostname, its HEAD hostname; --no-hostname leaves only the scrape's instance
    host_label = str(rng.choice(["Hostname", "hostname", ""], p=[0.7, 0.2, 0.1]))
    dom = b.params.get("domain", "")
    domain = dom if rng.random() < 0.5 else ""  # dcgm-exporter reports the node's own hostname
    driver = str(rng.choice(["535.129.03", "550.90.07", "570.124.06"]))
    pci = rng.random() < 0.6
    mig_util_zero = rng.random() < 0.5  # dcgm-exporter issue #216: GPU_UTIL 0 on every MIG instance
    # the same bitmask field, renamed with DCGM 3.3's "clocks event reasons"
    throttle_name = str(rng.choice(["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]))
    new_fb = c.idle_fb_mib < 50  # drivers that report the reservation apart (FB_RESERVED)
    reserved = rng.uniform(400, 700)
    fb_total = c.model.fb_mib - (reserved if new_fb else 0)
    rv = _roce_view(b)
    mig_job = {}
    for j in c.jobs:
        for jn, slots in j.mig.items():
            for g, gi, _ in slots:
                mig_job[(jn, g, gi)] = j
    for n, host in enumerate(c.names):
        o = offs[n]
        od = o + 0.137  # dcgm-exporter is its own scrape target
        for g in range(c.G):
            lg = {"gpu": str(g), "UUID": _uuid(rng, c, n, g), "device": f"nvidia{g}", "modelName": c.model.name}
            if pci:
                lg["pci_bus_id"] = f"00000000:{0x18 + 0x10 * g:02X}:00.0"
            if host_label:
                lg[host_label] = host + domain
            lg["DCGM_FI_DRIVER_VERSION"] = driver
            lg.update({"instance": f"{host}{dom}:9400", "job": "dcgm"})
            instances = [(gi, prof) for (gg, gi, prof) in mig.get(n, []) if gg == g] or [(None, None)]
            for gi, prof in instances:
                li = dict(lg)
                owner = own.get((n, g)) if gi is None else mig_job.get((n, g, gi))
                if gi is not None:
                    li["GPU_I_PROFILE"], li["GPU_I_ID"] = prof, str(gi)
                hpc = None
                if owner is not None:
                    hpc = c.times >= owner.start
                self_series = [
                    ("DCGM_FI_DEV_SM_CLOCK", c.clock[n, g], "%.0f"),
                    ("DCGM_FI_DEV_MEM_CLOCK", np.where(c.procs[n, g] > 0, c.model.mem_mhz, c.model.mem_mhz * 0.25),
                     "%.0f"),
                    ("DCGM_FI_DEV_GPU_TEMP", np.round(c.temp[n, g]), "%.0f"),
                    ("DCGM_FI_DEV_POWER_USAGE", c.power[n, g], "%.6f"),
                    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter(c.power[n, g] * 1000, dt, rng), "%.0f"),
                ]
                if gi is None:
                    used = np.round(c.fb[n, g])
                    self_series += [
                        ("DCGM_FI_DEV_GPU_UTIL", np.round(c.util[n, g] * 100), "%.0f"),
                        ("DCGM_FI_DEV_MEM_COPY_UTIL", np.round(c.dram[n, g] * 60), "%.0f"),
                        ("DCGM_FI_DEV_FB_USED", used, "%.0f"),
                        ("DCGM_FI_DEV_FB_FREE", np.round(fb_total - used), "%.0f"),
                    ]
                    if new_fb:
                        self_series.append(("DCGM_FI_DEV_FB_RESERVED", np.full(c.T, round(reserved)), "%.0f"))
                    prof = {"gr": c.gr[n, g], "tensor": c.tensor[n, g], "dram": c.dram[n, g], "sm": c.sm[n, g]}
                else:
                    st = c.mig_state[(n, g, gi)]
                    self_series.append(("DCGM_FI_DEV_FB_USED", np.round(st["fb"] + 13), "%.0f"))
                    if mig_util_zero:  # some releases report 0 for MIG instances instead of leaving it out
                        self_series.append(("DCGM_FI_DEV_GPU_UTIL", np.zeros(c.T), "%.0f"))
                    prof = {k: st[k] for k in ("gr", "tensor", "dram", "sm")}
                if c.prof != "none":
                    self_series += [("DCGM_FI_PROF_GR_ENGINE_ACTIVE", prof["gr"], "%.6f"),
                                    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", prof["tensor"], "%.6f"),
                                    ("DCGM_FI_PROF_DRAM_ACTIVE", prof["dram"], "%.6f")]
                    if c.prof == "full":
                        self_series.append(("DCGM_FI_PROF_SM_ACTIVE", prof["sm"], "%.6f"))
                        if c.nvlink_capable and gi is None:
                            self_series += [("DCGM_FI_PROF_NVLINK_TX_BYTES", np.round(c.nvlink[n, g]), "%.0f"),
                                            ("DCGM_FI_PROF_NVLINK_RX_BYTES", np.round(c.nvlink[n, g]), "%.0f")]
                if c.throttle_field:
                    self_series += [(throttle_name, c.throttle[n, g].astype(float), "%.0f"),
                                    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", c.power_limit[n, g], "%.6f")]
                for name, vals, fmt in self_series:
                    kind = "counter" if name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                                                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") else "gauge"
                    if hpc is None:
                        w.add(name, li, vals, kind=kind, fmt=fmt, offset=od)
                    else:  # the hpc_job label appears once the prolog has written the GPU's job file
                        w.add(name, li, vals, kind=kind, fmt=fmt, offset=od, mask=~hpc)
                        w.add(name, {**li, "hpc_job": str(owner.jobid)}, vals, kind=kind, fmt=fmt, offset=od, mask=hpc)
        base = {"instance": f"{host}{dom}:9100", "job": "node"}
        _ib(w, c, n, base, o, rng, "node_infiniband_", IB_EXPORTER_NAMES, rv)
        if rv:
            _ethtool_exporter(w, c, n, base, o, rng, rv)
        for dev in c.devices:
            w.add("node_infiniband_info", {**base, "board_id": "MT_0000000838", "device": dev,
                                           "firmware_version": "28.39.1002", "hca_type": "MT4129"}, 1, fmt="%d",
                  offset=o)
        _host(w, c, n, base, o, rng, cpu="node_cpu_seconds_total",
              psi=lambda res, kind: (f"node_pressure_{res}_{kind}_seconds_total", {}),
              blocked="node_procs_blocked", net="node_network_{}_bytes_total")
        if c.fs == "lustre":
            lb = {"instance": f"{host}{dom}:9169", "job": "lustre"}
            inst = f"{c.fs_name}-ffff{_hex(host, c.end)[:12]}"
            rd, wr = c.fs_read[n].sum(0), c.fs_write[n].sum(0)
            lc = {**lb, "component": "client", "target": inst}
            w.add("lustre_read_bytes_total", lc, counter(rd, dt, rng), kind="counter", fmt="%.0f", offset=o)
            w.add("lustre_write_bytes_total", lc, counter(wr, dt, rng), kind="counter", fmt="%.0f", offset=o)
            w.add("lustre_read_samples_total", lc, counter(rd / (1 << 20), dt, rng), kind="counter", fmt="%.0f",
                  offset=o)
            for k, tgt in enumerate(c.targets):
                if not (c.fs_read[n, k] > 0).any():
                    continue
                # rpc_stats 'rpcs in flight': reads sent while i were already outstanding; a slow target
                # keeps the client at max_rpcs_in_flight (8)
                ops = c.fs_read[n, k] / RPC_SIZE
                depth = np.clip(ops * c.fs_lat[n, k], 0, 8)  # Little's law: outstanding = rate x service time
                for i in range(9):
                    share = np.exp(-0.5 * ((i - depth) / 1.2) ** 2)
                    w.add("lustre_rpcs_in_flight", {**lb, "component": "client", "operation": "read", "size": str(i),
                                                    "target": f"{tgt}-osc-{inst.split('-')[-1]}", "type": "osc"},
                          counter(ops * share / np.maximum(1e-9, _norm(depth)), dt, rng, 0.0), fmt="%.0f", offset=o)
        else:
            lb = {"instance": f"{host}{dom}:9303", "job": "gpfs"}
            w.add("gpfs_perf_info", {**lb, "fs": c.fs_name, "nodename": host + ".gpfs"}, 1, fmt="%d", offset=o)
            w.add("gpfs_perf_read_bytes_total", {**lb, "fs": c.fs_name}, counter(c.fs_read[n].sum(0), dt, rng),
                  kind="counter", fmt="%.0f", offset=o)
            w.add("gpfs_perf_write_bytes_total", {**lb, "fs": c.fs_name}, counter(c.fs_write[n].sum(0), dt, rng),
                  kind="counter", fmt="%.0f", offset=o)
            count, _ = _gpfs_waiters(c, n, rng)
            w.add("gpfs_waiter_info_count", {**lb, "waiter": "WorkerThread"}, count, fmt="%d", offset=o)
            for op, arr in (("reads", c.fs_read[n].sum(0) / (1 << 20)), ("writes", c.fs_write[n].sum(0) / (1 << 20))):
                w.add("gpfs_perf_operations_total", {**lb, "fs": c.fs_name, "operation": op}, counter(arr, dt, rng),
                      kind="counter", fmt="%.0f", offset=o)
    if c.fs == "lustre":
        _oss(w, b, rng)
    _storage_nodes(b, w, offs, ":9100", "node", _storage_exporter)


def _gpfs_waiters(c: Cluster, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """mmdiag --waiters: reader threads blocked 'for NSD I/O completion' grow with the node's I/O
    pressure (the same stalls PSI counts), and so does the longest wait."""
    count = rng.poisson(c.psi_io[n] * 40).astype(float)
    longest = np.where(count > 0, c.psi_io[n] * rng.uniform(0.5, 8, c.T), 0.0)
    return count, longest


def _norm(depth: np.ndarray) -> np.ndarray:
    return sum(np.exp(-0.5 * ((i - depth) / 1.2) ** 2) for i in range(9))


def _oss(w: Writer, b: Built, rng) -> None:
    """OSS-side obdfilter stats, brw_stats I/O time histogram and job_stats, per OST."""
    c = b.cluster
    dt = c.interval
    centers = np.log2(np.array(IO_TIME_BUCKETS_MS, float))
    for k, tgt in enumerate(c.targets):
        oss = c.oss_of[tgt]
        lb = {"instance": f"{oss}:9169", "job": "lustre", "component": "ost", "target": tgt}
        rd = c.fs_read[:, k].sum(0)
        w.add("lustre_read_bytes_total", lb, counter(rd, dt, rng), kind="counter", fmt="%.0f")
        w.add("lustre_write_bytes_total", lb, counter(c.fs_write[:, k].sum(0), dt, rng), kind="counter", fmt="%.0f")
        ops = rd / RPC_SIZE
        weights = np.where(c.fs_read[:, k] > 0, c.fs_read[:, k], 0)
        lat = (np.sum(c.fs_lat[:, k] * weights, 0) / np.maximum(weights.sum(0), 1e-9))
        lat = np.where(weights.sum(0) > 0, lat, c.ost_base_lat[k])
        mu = np.log2(np.maximum(lat * 1000, 0.5))
        shares = np.exp(-0.5 * ((centers[:, None] - mu[None, :]) / 0.8) ** 2)
        shares /= shares.sum(0, keepdims=True)
        for i, ms in enumerate(IO_TIME_BUCKETS_MS):
            w.add("lustre_io_time_milliseconds_total", {**lb, "operation": "read", "size": str(ms)},
                  counter(ops * shares[i], dt, rng, 0.0), kind="counter", fmt="%.0f")
        for j in c.jobs:
            jr = c.fs_read[j.nodes, k].sum(0) if j.nodes else np.zeros(c.T)
            if (jr > 0).any():
                w.add("lustre_job_read_bytes_total", {**lb, "jobid": str(j.jobid)}, counter(jr, dt, rng, 0.0),
                      kind="counter", fmt="%.0f", mask=c.times >= j.start)


# ------------------------------------------------------------------------------- squeue etc.

def _num(v) -> dict:
    return {"set": v is not None, "infinite": False, "number": int(v or 0)}


SLURM = {  # release -> (data_parser, micro)
    "23.11": ("v0.0.40", "10"), "24.05": ("v0.0.41", "3"), "24.11": ("v0.0.42", "6"), "25.05": ("v0.0.43", "4")}


def squeue(c: Cluster, release: str = "24.11") -> dict:
    """`squeue --json` as that Slurm release prints it (job_resources changed shape in data_parser
    v0.0.41), trimmed to the fields that matter."""
    parser, micro = SLURM.get(release, SLURM["24.11"])
    old = parser == "v0.0.40"
    jobs = []
    for j in c.jobs + c.pending:
        running = j.state == "RUNNING"
        nodes = [c.names[n] for n in j.nodes]
        gres, allocation = [], []
        for i, n in enumerate(j.nodes):
            idx = j.gpus.get(n, [])
            gres.append(f"gpu:{j.gpu_type}:{len(idx)}(IDX:{_ranges(idx)})" if idx else "")
            if old:
                allocation.append({"sockets": {"0": {"cores": {str(k): "allocated" for k in range(j.cpus_per_node)}}},
                                   "nodename": c.names[n], "cpus_used": 0, "memory_used": 0,
                                   "memory_allocated": 256000})
            else:
                allocation.append({"index": i, "name": c.names[n],
                                   "cpus": {"count": j.cpus_per_node, "used": j.cpus_per_node},
                                   "memory": {"used": 0, "allocated": 256000}})
        ngpu = sum(len(g) for g in j.gpus.values())
        count = len(nodes) if running else getattr(j, "node_count", 1)
        if not running:
            resources = {}
        elif old:
            resources = {"nodes": compress(nodes), "allocated_cores": j.cpus_per_node * len(nodes),
                         "allocated_cpus": j.cpus_per_node * len(nodes), "allocated_hosts": len(nodes),
                         "allocated_nodes": allocation}
        else:
            resources = {"select_type": ["CORE"], "nodes": {"count": len(nodes), "select_type": ["ONE_ROW"],
                                                            "list": compress(nodes), "whole": False,
                                                            "allocation": allocation}}
        rec = {
            "account": j.account, "batch_host": nodes[0] if nodes else "", "cluster": "catalogue",
            "gres_detail": gres, "group_name": j.user, "job_id": j.jobid, "name": j.name,
            "job_state": [j.state], "state_reason": "None" if running else "Resources",
            "partition": j.partition, "nodes": compress(nodes) if nodes else "", "user_name": j.user,
            "node_count": _num(count), "cpus": _num(j.cpus_per_node * max(count, 1)),
            "start_time": _num(j.start if running else c.end + 3600), "submit_time": _num(j.start - 120),
            "end_time": _num(j.start + j.time_limit_min * 60), "time_limit": _num(j.time_limit_min),
            "tres_per_node": f"gres/gpu:{max(len(g) for g in j.gpus.values())}" if j.gpus else "gres/gpu:8",
            "tres_alloc_str": (f"cpu={j.cpus_per_node * len(nodes)},mem={256 * len(nodes)}G,node={len(nodes)},"
                               f"billing={j.cpus_per_node * len(nodes)},gres/gpu={ngpu}") if running else "",
            "tres_req_str": f"cpu={j.cpus_per_node * max(count, 1)},node={count},gres/gpu={ngpu or 8 * count}",
            "job_resources": resources, "priority": _num(1000), "qos": "normal", "shared": [],
        }
        jobs.append(rec)
    major, minor = release.split(".")
    return {"jobs": jobs, "last_backfill": _num(c.end - 20), "last_update": _num(c.end),
            "meta": {"plugin": {"type": "", "name": "", "data_parser": f"data_parser/{parser}",
                                "accounting_storage": "accounting_storage/slurmdbd"},
                     "client": {"source": "", "user": "root", "group": "root"}, "command": ["squeue", "--json"],
                     "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                               "release": f"{release}.{micro}", "cluster": "catalogue"}},
            "errors": [], "warnings": []}


def _ranges(idx: list[int]) -> str:
    out, i = [], 0
    idx = sorted(idx)
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(out)


def topology_conf(c: Cluster) -> str:
    leaves: dict[str, list[str]] = {}
    for n, leaf in enumerate(c.leaf_of):
        leaves.setdefault(leaf, []).append(c.names[n])
    lines = [f"SwitchName={leaf} Nodes={compress(nodes)}" for leaf, nodes in leaves.items()]
    lines.append(f"SwitchName=spine01 Switches={compress(list(leaves))}")
    return "\n".join(lines) + "\n"


def render(b: Built, outdir: str, schema: str) -> str:
    """Write one bundle; returns its directory."""
    if schema not in SCHEMAS:
        raise ValueError(f"schema must be one of {SCHEMAS}, not {schema!r}")
    c = b.cluster
    rng = np.random.default_rng([b.seed, SCHEMAS.index(schema), len(b.scenario.name)])
    offs = np.round(rng.uniform(0, min(2.0, c.interval / 5), c.N), 3)
    w = Writer(c.times, rng, b.params.get("missed_scrapes", 0.0))
    (render_gangwatch if schema == "gangwatch" else render_exporters)(b, w, rng, offs)
    fabric = "" if c.fabric == "ib" else f"-{c.fabric}"
    path = os.path.join(outdir, f"{b.scenario.name}-s{b.seed}{fabric}-{schema}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.om"), "w", encoding="utf-8") as f:
        f.write(w.text())
    with open(os.path.join(path, "squeue.json"), "w", encoding="utf-8") as f:
        json.dump(squeue(c, b.params.get("slurm", "24.11")), f)
    with open(os.path.join(path, "bundle.json"), "w", encoding="utf-8") as f:
        json.dump({"start": c.start, "end": c.end + 2.0, "cluster": f"catalogue-{b.scenario.name}-{b.seed}"}, f)
    if c.topology:
        with open(os.path.join(path, "topology.conf"), "w", encoding="utf-8") as f:
            f.write(topology_conf(c))
    truth = {"scenario": b.scenario.name, "cause": b.scenario.cause, "signature": b.scenario.signature,
             "description": b.scenario.description, "cites": list(b.scenario.cites), "seed": b.seed,
             "schema": schema, "params": {**b.params, "storage_nics": _storage_view(b) is not None}, "window": {"start": c.start, "end": c.end},
             "jobs": b.truth}
    with open(os.path.join(path, "truth.json"), "w", encoding="utf-8") as f:
        json.dump(truth, f, indent=1, default=_json_default)
    return path


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))
