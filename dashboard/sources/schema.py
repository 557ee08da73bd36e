"""Which exporter metric feeds which diagnosis signal: the one mapping table, and host-name matching.

Schemas: gangwatch's own agent (`gangwatch_*`, RoCE from its roce and ethtool collectors), node_exporter (`node_*`), dcgm-exporter
(`DCGM_FI_*`, host label `Hostname` or `hostname`, job label `hpc_job`), the Lustre exporters
(`lustre_*`, HPE/GSI names) and gpfs_exporter (`gpfs_*`). Keys are metric names, never HELP texts
(older dcgm-exporter HELP says "(in %)" for 0-1 ratios and "(in KB)" for byte rates).

A row: signal, level (gpu / rail / node / target), metric, whether it is a counter (turned into a
per-second rate, or per-step increase for event counters), a scale to base units, label filters
(exact values; a leading `!` excludes), and how several series of the same key combine (`mean`
for GPU-wide gauges repeated per MIG instance, `sum` for per-target or per-CPU counters). A row
with a `fallback` is read for a node only where that node lacks the metric it names.

Nodes are matched to Slurm by the first of `HOST_LABELS` present, with the port and the domain
stripped (`node0001.cluster.local:9810` -> `node0001`); `NodeMatcher` also takes an alias map
for hosts whose exporter name differs from Slurm's (cloud instance ids, k8s node names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Host labels in order of preference. `exported_instance` is where Prometheus moves an exporter's
# own `instance` label when it collides with the scrape target's (honor_labels: false).
HOST_LABELS = ("node", "hostname", "Hostname", "nodename", "exported_instance", "instance")


@dataclass(frozen=True)
class Mapping:
    signal: str
    level: str  # gpu, rail, node, target
    metric: str
    counter: bool = False
    scale: float = 1.0
    filters: tuple[tuple[str, str], ...] = ()
    combine: str = "mean"  # how series with the same (node, key) combine: mean or sum
    events: bool = False  # counter of events: per-step increase, not per-second rate
    key: str = ""  # label that keys a target-level series, when not `target`
    scale_label: str = ""  # label whose value multiplies the scale (a histogram bucket's bound)
    # a metric that, where a node has it for this signal, is read instead of this one (the same
    # quantity from fewer series): `drop_fallbacks`, and the Prometheus plan's `covered`
    fallback: str = ""


MIB = float(1 << 20)
# The ethtool collector's node rollups where the node has RDMA devices: the NICs that carry them
# (`nics="rdma"`) apart from the others (`nics="other"`: the management network, whose pauses and
# link-downs pace no collective); an agent before the split, or a node without RDMA, has one
# unlabelled series of all its NICs
RDMA_NICS = (("nics", "!other"),)

MAPPINGS: tuple[Mapping, ...] = (
    # ---- GPU (key: the `gpu` index label; MIG instances of one GPU average into it)
    Mapping("util", "gpu", "gangwatch_gpu_utilization_ratio"),
    Mapping("util", "gpu", "DCGM_FI_DEV_GPU_UTIL", scale=0.01),  # percent
    Mapping("sm", "gpu", "gangwatch_gpu_prof_sm_active_ratio"),
    Mapping("sm", "gpu", "DCGM_FI_PROF_SM_ACTIVE"),  # ratio despite old HELP "(in %)"
    Mapping("power", "gpu", "gangwatch_gpu_power_watts"),
    Mapping("power", "gpu", "DCGM_FI_DEV_POWER_USAGE"),
    Mapping("mem", "gpu", "gangwatch_gpu_memory_used_bytes"),
    Mapping("mem", "gpu", "DCGM_FI_DEV_FB_USED", scale=MIB),  # MiB
    Mapping("clock", "gpu", "gangwatch_gpu_clock_hz", filters=(("clock", "sm"),)),
    Mapping("clock", "gpu", "DCGM_FI_DEV_SM_CLOCK", scale=1e6),  # MHz
    # ---- InfiniBand (key: device/port)
    Mapping("ib_tx", "rail", "gangwatch_infiniband_port_transmit_data_bytes_total", counter=True),
    Mapping("ib_tx", "rail", "node_infiniband_port_data_transmitted_bytes_total", counter=True),
    Mapping("ib_wait", "rail", "gangwatch_infiniband_port_transmit_wait_ticks_total", counter=True),
    Mapping("ib_wait", "rail", "node_infiniband_port_transmit_wait_total", counter=True),
    Mapping("ib_down", "rail", "gangwatch_infiniband_port_link_downed_total", counter=True, events=True),
    Mapping("ib_down", "rail", "node_infiniband_link_downed_total", counter=True, events=True),
    # symbol errors: a failing cable or transceiver errs before and between its link drops
    Mapping("ib_err", "rail", "gangwatch_infiniband_port_symbol_errors_total", counter=True, events=True),
    Mapping("ib_err", "rail", "node_infiniband_symbol_error_total", counter=True, events=True),
    # the rate the link trained at (width x speed): a degraded link paces a ring collective
    Mapping("ib_rate", "rail", "gangwatch_infiniband_port_rate_bytes_per_second"),
    Mapping("ib_rate", "rail", "node_infiniband_rate_bytes_per_second"),
    # the agent's node rollups of the two (every port's own value summed at every scrape, never left
    # out): a port's series left out while still comes back a scrape after its move, at the value it
    # stood at, so its event shows a scrape late there; the rollup shows it at the scrape after the
    # move, as node_exporter's per-port counter does (catalogue seed 2400 scraped every minute)
    Mapping("ib_down_node", "node", "gangwatch_infiniband_node_link_downed_total", counter=True, events=True),
    Mapping("ib_err_node", "node", "gangwatch_infiniband_node_symbol_errors_total", counter=True, events=True),
    # where the agent says it leaves a port's still error counters out, a missing one is 0, not unknown
    # (build.zero_port_events; dropped from the window there)
    Mapping("ib_quiet", "node", "gangwatch_infiniband_port_idle_series"),
    # ---- RoCE (key: device/port, as InfiniBand): no port_xmit_wait there; congestion is ECN-marked
    # packets plus the CNPs senders acted on (per second, summed), link trouble is sequence errors,
    # NAKs, ACK timeouts and retransmissions (per step, summed); the diagnosis reads them in
    # InfiniBand's place
    Mapping("roce_cong", "rail", "gangwatch_roce_port_ecn_marked_packets_total", counter=True, combine="sum"),
    Mapping("roce_cong", "rail", "gangwatch_roce_port_cnp_handled_total", counter=True, combine="sum"),
    Mapping("roce_err", "rail", "gangwatch_roce_port_out_of_sequence_packets_total", counter=True, events=True, combine="sum"),
    Mapping("roce_err", "rail", "gangwatch_roce_port_packet_sequence_errors_total", counter=True, events=True, combine="sum"),
    Mapping("roce_err", "rail", "gangwatch_roce_port_local_ack_timeouts_total", counter=True, events=True, combine="sum"),
    # retransmissions the NIC made on loss (adaptive retransmission, on by default on ConnectX-5 and later)
    Mapping("roce_err", "rail", "gangwatch_roce_port_adaptive_retransmissions_total", counter=True, events=True, combine="sum"),
    # PFC and global pause frames the node's NICs received (the ethtool collector's rollup); node_exporter's
    # ethtool collector names each driver's counters by their `ethtool -S` names (rx_ -> received_, no
    # _total), added up per node: mlx5's global pause counter (rx_pause_ctrl_phy, IEEE 802.3's PAUSE
    # frames, which mlx5 documents as counting under global pause only) and the PFC frames, per
    # priority (mlx5 rx_prio<p>_pause; ice rx_priority_<p>_xoff.nic, `.` read as `_`) or in all (bnxt
    # rx_pfc_frames). A RoCE fabric runs PFC, so its
    # pauses may be in those alone; and only a lossless fabric counts PFC, where another vendor's global
    # pause counter may be the management NIC's (node_exporter does not say which NIC carries RDMA).
    Mapping("eth_pause", "node", "gangwatch_ethtool_node_received_pause_frames_total", counter=True, filters=RDMA_NICS),
    *(Mapping("eth_pause", "node", f"node_ethtool_{name}", counter=True, combine="sum")
      for name in ("received_pause_ctrl_phy", *(f"received_prio{p}_pause" for p in range(8)),
                   *(f"received_priority_{p}_xoff_nic" for p in range(8)), "received_pfc_frames")),
    # physical link-down events of the node's NICs (the ethtool collector's rollup; node_exporter's
    # ethtool collector names mlx5's counter this way): on RoCE the link events beside the transport
    # errors, as link_downed is on InfiniBand
    Mapping("eth_down", "node", "gangwatch_ethtool_node_link_down_events_total", counter=True, events=True,
            filters=RDMA_NICS),
    Mapping("eth_down", "node", "node_ethtool_link_down_events_phy", counter=True, events=True, combine="sum"),
    # frames the NICs' PHYs received with errors (symbol, CRC) that FEC could not correct (the ethtool
    # collector's rollup; node_exporter's names for mlx5's counters): on RoCE a failing cable's errors
    # between its drops, as symbol errors are on InfiniBand; a healthy FEC link counts none
    Mapping("eth_err", "node", "gangwatch_ethtool_node_link_errors_total", counter=True, events=True,
            filters=RDMA_NICS),
    Mapping("eth_err", "node", "node_ethtool_received_symbol_err_phy", counter=True, events=True, combine="sum"),
    Mapping("eth_err", "node", "node_ethtool_received_crc_errors_phy", counter=True, events=True, combine="sum"),
    # times the NICs' PFC storm guard fired (the ethtool collector's rollup; node_exporter's ethtool
    # collector renames mlx5's tx_ to transmitted_): the node kept sending pause frames, which stall
    # every link through its switch
    Mapping("eth_storm", "node", "gangwatch_ethtool_node_pause_storm_events_total", counter=True, events=True,
            filters=RDMA_NICS),
    Mapping("eth_storm", "node", "node_ethtool_transmitted_pause_storm_warning_events", counter=True, events=True,
            combine="sum"),
    Mapping("eth_storm", "node", "node_ethtool_transmitted_pause_storm_error_events", counter=True, events=True,
            combine="sum"),
    # ---- filesystem clients, per node (all targets summed): the agent's one series per filesystem,
    # else (an agent from before it) the same bytes from its one series per target (hundreds a node)
    Mapping("fs_read", "node", "gangwatch_lustre_client_targets_io_bytes_total", counter=True,
            filters=(("operation", "read"), ("type", "osc")), combine="sum"),
    Mapping("fs_write", "node", "gangwatch_lustre_client_targets_io_bytes_total", counter=True,
            filters=(("operation", "write"), ("type", "osc")), combine="sum"),
    Mapping("fs_read", "node", "gangwatch_lustre_client_target_io_bytes_total", counter=True,
            filters=(("operation", "read"), ("type", "osc")), combine="sum",
            fallback="gangwatch_lustre_client_targets_io_bytes_total"),
    Mapping("fs_write", "node", "gangwatch_lustre_client_target_io_bytes_total", counter=True,
            filters=(("operation", "write"), ("type", "osc")), combine="sum",
            fallback="gangwatch_lustre_client_targets_io_bytes_total"),
    Mapping("fs_read", "node", "gangwatch_gpfs_read_bytes_total", counter=True, combine="sum"),
    Mapping("fs_write", "node", "gangwatch_gpfs_write_bytes_total", counter=True, combine="sum"),
    Mapping("fs_read", "node", "gpfs_perf_read_bytes_total", counter=True, combine="sum"),
    Mapping("fs_write", "node", "gpfs_perf_write_bytes_total", counter=True, combine="sum"),
    Mapping("fs_read", "node", "lustre_read_bytes_total", counter=True, filters=(("component", "client"),), combine="sum"),
    Mapping("fs_read", "node", "gangwatch_beegfs_client_read_bytes_total", counter=True, combine="sum"),
    Mapping("fs_write", "node", "gangwatch_beegfs_client_write_bytes_total", counter=True, combine="sum"),
    Mapping("fs_write", "node", "lustre_write_bytes_total", counter=True, filters=(("component", "client"),), combine="sum"),
    # ---- pressure and CPU, per node
    Mapping("psi_io", "node", "gangwatch_pressure_waiting_seconds_total", counter=True, filters=(("resource", "io"),)),
    Mapping("psi_io", "node", "node_pressure_io_waiting_seconds_total", counter=True),
    Mapping("iowait_cpu", "node", "gangwatch_cpu_seconds_total", counter=True, filters=(("mode", "iowait"),), combine="sum"),
    Mapping("iowait_cpu", "node", "node_cpu_seconds_total", counter=True, filters=(("mode", "iowait"),), combine="sum"),
    Mapping("cpu_all", "node", "gangwatch_cpu_seconds_total", counter=True, combine="sum"),
    Mapping("cpu_all", "node", "node_cpu_seconds_total", counter=True, combine="sum"),
    # tasks in I/O wait at the scrape (/proc/stat procs_blocked): readers waiting where PSI is off
    Mapping("blocked", "node", "gangwatch_node_procs_blocked"),
    Mapping("blocked", "node", "node_procs_blocked"),
    # ---- per job (key: jobid): the job cgroup's own I/O pressure, which tells a job's stall from
    # its neighbours' on a shared node
    Mapping("psi_io", "job", "gangwatch_job_pressure_waiting_seconds_total", counter=True, filters=(("resource", "io"),)),
    # ---- filesystem targets, per node (key: target)
    Mapping("read", "target", "gangwatch_lustre_client_target_io_bytes_total", counter=True,
            filters=(("operation", "read"), ("type", "osc")), combine="sum"),
    Mapping("read", "target", "lustre_read_bytes_total", counter=True, filters=(("component", "client"),), combine="sum"),
    Mapping("lat_sum", "target", "gangwatch_lustre_client_target_operation_latency_seconds_total", counter=True,
            filters=(("operation", "ost_read"),), combine="sum"),
    Mapping("lat_count", "target", "gangwatch_lustre_client_target_operations_total", counter=True,
            filters=(("operation", "ost_read"),), combine="sum"),
    # Lustre exporters: a client's reads per mount (above: target = `<fs>-<instance>`) tell the
    # filesystem; the OSS's brw_stats "I/O time (1/1000s)" histogram (`size` = the bucket's upper
    # bound in ms, counts of reads per bucket) gives each OST's read service time, bucket midpoints
    # at 3/4 of the bound.
    Mapping("lat_sum", "target", "lustre_io_time_milliseconds_total", counter=True,
            filters=(("component", "ost"), ("operation", "read")), combine="sum", scale=0.75e-3, scale_label="size"),
    Mapping("lat_count", "target", "lustre_io_time_milliseconds_total", counter=True,
            filters=(("component", "ost"), ("operation", "read")), combine="sum"),
    # GPFS reports per filesystem: the filesystem is the target
    Mapping("read", "target", "gangwatch_gpfs_read_bytes_total", counter=True, combine="sum", key="fs"),
    Mapping("read", "target", "gpfs_perf_read_bytes_total", counter=True, combine="sum", key="fs"),
    # BeeGFS: a client's reads per mount (the mount is the filesystem, as for GPFS); each storage
    # target's time per request from its server's load by Little's law: requests in the server
    # (queued + active) over the requests it served in the last second
    Mapping("read", "target", "gangwatch_beegfs_client_read_bytes_total", counter=True, combine="sum", key="fs"),
    Mapping("lat_sum", "target", "gangwatch_beegfs_target_server_requests", combine="sum"),
    Mapping("lat_count", "target", "gangwatch_beegfs_target_server_requests_per_second"),
)

# Facts (instant values): GPU -> job, leaf switch, NVLink peers, NUMA affinity, ports' link layers, and which
# filesystem targets a job did I/O on (a target's job_stats lists a job only after its I/O there,
# and drops it after job_cleanup_interval, 10 minutes by default).
JOB_TARGET_METRICS = ("gangwatch_lustre_job_io_bytes_total", "lustre_job_read_bytes_total")
PORT_INFO = "gangwatch_infiniband_port_info"  # an RDMA port's link layer: which fabric the rails are
INFO_METRICS = ("gangwatch_job_gpu_info", "gangwatch_sim_node_info", "gangwatch_gpu_nvlink_peer_info",
                "gangwatch_gpu_affinity_info", PORT_INFO) + JOB_TARGET_METRICS
HPC_JOB_LABEL = "hpc_job"  # dcgm-exporter's job label (set from the prolog's GPU -> job files)

# Per fallback's replacement, a series of one per node and filesystem that every agent with the
# fallback's series exports too, older ones included: the nodes lacking the replacement are those
# with it (prometheus.FALLBACK_FACTS), found without reading the one-per-target series. The agent
# exports the replacement's read and write for every filesystem whose OSC stats it reads, from 0.
FALLBACK_MARKERS = {"gangwatch_lustre_client_targets_io_bytes_total":
                    Mapping("", "node", "gangwatch_lustre_client_import_rpc_wait_max_seconds", filters=(("type", "osc"),))}

BY_METRIC: dict[str, tuple[Mapping, ...]] = {}
for _m in MAPPINGS:
    BY_METRIC[_m.metric] = BY_METRIC.get(_m.metric, ()) + (_m,)

KEY_OF_LEVEL = {"gpu": ("gpu",), "rail": ("device", "port"), "target": ("target",), "node": (), "job": ("jobid",)}
# derived signal -> (numerator, denominator, level): the ratio of two counters' rates, unknown where
# the denominator is 0 (PromQL divides in the query; bundles and the embedded scraper in build.py)
RATIOS = {"iowait": ("iowait_cpu", "cpu_all", "node"), "latency": ("lat_sum", "lat_count", "target")}


def drop_fallbacks(items: list, cell, mapping) -> list:
    """`items` less those of a fallback mapping whose replacement feeds the same cell (`cell(item)`:
    (signal, level, node, key); `mapping(item)`: its Mapping), so the two are never added up."""
    replacements = {m.fallback for m in map(mapping, items) if m.fallback}
    if not replacements:
        return items
    have = {(cell(it), mapping(it).metric) for it in items if mapping(it).metric in replacements}
    return [it for it in items if not mapping(it).fallback or (cell(it), mapping(it).fallback) not in have]


def matches(m: Mapping, labels: dict[str, str]) -> bool:
    for k, v in m.filters:
        have = labels.get(k)
        if v.startswith("!"):
            if have == v[1:]:
                return False
        elif have != v:
            return False
    return True


def sub_key(m: Mapping, labels: dict[str, str]) -> str | None:
    """The per-node key of a series (GPU index, "device/port", target) or None when it lacks one."""
    if m.level == "gpu":
        g = labels.get("gpu", "")
        return g if g.isdigit() else None
    if m.level == "rail":
        dev = labels.get("device")
        return f"{dev}/{labels.get('port', '1')}" if dev else None
    if m.level == "target":
        return labels.get(m.key or "target") or labels.get("ost") or None
    if m.level == "job":
        return labels.get("jobid") or None
    return ""


_PORT = re.compile(r":\d+$")
_IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def short_host(value: str) -> str:
    """`node0001.cluster.local:9810` -> `node0001`; an IP address stays whole (no domain to strip)."""
    v = (value or "").strip()
    if v.startswith("[") and "]" in v:  # [ipv6]:port
        return v[1:v.index("]")]
    v = _PORT.sub("", v)
    if _IPV4.match(v):
        return v
    return v.split(".", 1)[0]


class NodeMatcher:
    """Maps a series' labels to a Slurm node name (or None), caching per distinct host value."""

    def __init__(self, host_labels: tuple[str, ...] = HOST_LABELS, aliases: dict[str, str] | None = None):
        self.host_labels = tuple(host_labels)
        self.aliases = {k: v for k, v in (aliases or {}).items()}
        self._cache: dict[str, str] = {}

    def __call__(self, labels: dict[str, str]) -> str | None:
        for key in self.host_labels:
            v = labels.get(key)
            if v:
                got = self._cache.get(v)
                if got is None:
                    got = self.aliases.get(v) or self.aliases.get(short_host(v)) or short_host(v)
                    self._cache[v] = got
                return got
        return None
