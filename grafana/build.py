#!/usr/bin/env python3
"""Generate gangwatch's Grafana dashboards (grafana/*.json) from the panel lists below.

Run `python grafana/build.py` after changing a panel; `--check` exits 1 when a committed JSON file
differs from what this script generates (tests/test_grafana.py does the same). Dashboards are plain
Grafana 11 JSON (schemaVersion 39; importable into Grafana 10.x and later) with three variables:
`datasource` (any Prometheus-compatible data source), `job` (Slurm job ids) and `node`.

Cluster-wide panels read the recording rules of rules/recording.yml (cluster:, jobid:, switch:,
fs_target: ...), which read only the agent's per-node rollups. Per-node and per-device detail is not
recorded (at 4,096 nodes that alone would blow the rule budget): those panels read the agent's
rollups (gangwatch_gpu_node_*, gangwatch_infiniband_node_*) or its raw per-device series on demand,
always behind a `node=~"$node"` or `jobid=~"$job"` matcher so a panel selects only what the
variables pick. Every query must parse and name only metrics that exist (tests/test_grafana.py);
the few that come from `gangwatch serve`'s findings are listed in rules/expected_metrics.yml.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
NODE = 'node=~"$node"'
JOB = 'jobid=~"$job"'
_QUIET_PORTS = ("0 for a port whose counter the agent left out while it stood still "
                "(--collector.infiniband.error-idle-seconds; its port_idle_series says it does); no line where "
                "nothing says so.")


def _port_errors(metric: str) -> str:
    """A port error counter's increase over the hour, and 0 for the ports of the nodes whose agent
    leaves still error counters out (gangwatch_infiniband_port_idle_series) where the counter is
    missing: there a missing series means no event, and a panel of only the ports that erred
    would be empty on a healthy fabric, as if nothing were collected."""
    # the port's rate series carry the counter's labels (job, instance, node, device, port), so
    # `or` keeps one line a port, the same on every engine
    return (f"increase({metric}{{{NODE}}}[1h]) or (0 * gangwatch_infiniband_port_rate_bytes_per_second{{{NODE}}} "
            f"and on (node) gangwatch_infiniband_port_idle_series{{{NODE}}})")
# The selected jobs' GPUs, joined on demand to a per-GPU series of the selected nodes: the job's
# GPU map on the "many" side, so a GPU shared by two jobs shows under both.
JOB_GPUS = f"gangwatch_job_gpu_info{{{JOB},{NODE}}} * on (node, gpu) group_left "


@dataclass(frozen=True)
class Q:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class P:
    """One panel: `kind` is a Grafana panel type (timeseries, stat, table, bargauge)."""
    title: str
    queries: tuple[Q, ...]
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    width: int = 12
    max: float | None = None


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[P, ...]


@dataclass(frozen=True)
class D:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = field(default=())


def ts(title, *queries, unit="short", **kw) -> P:
    return P(title, tuple(queries), unit=unit, **kw)


def stat(title, *queries, unit="short", **kw) -> P:
    return P(title, tuple(queries), unit=unit, kind="stat", width=kw.pop("width", 4), **kw)


def table(title, *queries, **kw) -> P:
    return P(title, tuple(Q(q.expr, q.legend, instant=True) for q in queries), kind="table",
             width=kw.pop("width", 24), **kw)


# ------------------------------------------------------------------------------------- dashboards

CLUSTER = D("gangwatch-cluster", "gangwatch / cluster",
            "GPU use, stalled jobs and what they cost, cluster-wide.", (
    Row("Now", (
        stat("GPUs", Q("cluster:gangwatch_gpu_node_gpus:sum"), description="GPUs that answered NVML."),
        stat("GPUs allocated", Q("cluster:gangwatch_job_gpus:sum")),
        stat("Allocated GPUs idle", Q("cluster:gangwatch_job_gpus_idle:sum"),
             description="Allocated GPUs of a job on a node where that job's GPUs averaged under 5 % "
                         "utilisation (ran no kernel) at the last evaluation."),
        stat("Mean GPU utilisation", Q("cluster:gangwatch_gpu_utilization_ratio:avg"), unit="percentunit", max=1),
        stat("Stalled jobs", Q("count(gangwatch_job_stalled == 1) or 0 * count(gangwatch_job_stalled)"),
             description="Jobs gangwatch serve judges stalled (any cause)."),
        stat("GPU-hours lost", Q("cluster:gangwatch_job_gpu_hours_lost:sum"),
             description="GPU-hours running jobs lost to stalls (gangwatch serve)."),
    )),
    Row("GPUs", (
        ts("Mean GPU utilisation", Q("cluster:gangwatch_gpu_utilization_ratio:avg", "cluster"), unit="percentunit", max=1),
        ts("GPU utilisation by node", Q(f"gangwatch_gpu_node_utilization_ratio{{{NODE}}}", "{{node}}"),
           unit="percentunit", max=1),
        ts("GPUs by Slurm state", Q("sum by (state) (gangwatch_slurm_partition_gpus)", "{{state}}")),
        ts("Allocated GPUs idle", Q("cluster:gangwatch_job_gpus_idle:sum", "idle")),
    )),
    Row("Stalls and incidents", (
        ts("Stalled jobs by cause", Q(f'sum by (cause) (gangwatch_job_stalled{{{JOB},cause!="none"}})', "{{cause}}"),
           description="Jobs gangwatch serve judges stalled, by cause; 0 when none is."),
        ts("GPU-hours lost", Q("cluster:gangwatch_job_gpu_hours_lost:sum", "lost")),
        table("Incidents by GPU-hours lost",
              Q("sort_desc(sum by (culprit, cause) (gangwatch_incident_gpu_hours_lost))")),
        table("Firing alerts", Q('sum by (alertname, severity, culprit) (ALERTS{alertstate="firing"})')),
    )),
), tags=("gangwatch",))

JOB_D = D("gangwatch-job", "gangwatch / job",
          "One Slurm job: its GPUs, nodes, network and storage traffic, and gangwatch's verdict.", (
    Row("Job", (
        stat("GPUs", Q(f"jobid:gangwatch_job_gpus:sum{{{JOB}}}")),
        stat("Nodes", Q(f"jobid:gangwatch_job_nodes:count{{{JOB}}}")),
        stat("Mean GPU utilisation", Q(f"jobid:gangwatch_gpu_utilization_ratio:avg{{{JOB}}}"), unit="percentunit", max=1),
        stat("Slowest node", Q(f"jobid:gangwatch_gpu_utilization_ratio:min{{{JOB}}}"), unit="percentunit", max=1,
             description="Mean GPU utilisation of the job's slowest node."),
        stat("Stalled", Q(f"gangwatch_job_stalled{{{JOB}}}", "{{cause}}")),
        stat("GPU-hours lost", Q(f"gangwatch_job_gpu_hours_lost_total{{{JOB}}}")),
        table("Slurm", Q(f"gangwatch_slurm_job_info{{{JOB}}}")),
    )),
    Row("GPUs", (
        ts("GPU utilisation by node", Q(f"gangwatch_job_gpu_utilization_ratio{{{JOB},{NODE}}}", "{{jobid}} {{node}}"),
           unit="percentunit", max=1),
        ts("GPU utilisation by GPU",
           Q(JOB_GPUS + f"gangwatch_gpu_utilization_ratio{{{NODE}}}", "{{jobid}} {{node}}/{{gpu}}"),
           unit="percentunit", max=1, description="Per-GPU series of the selected nodes: pick the job's nodes "
                                                  "in Node to keep this cheap on a large cluster."),
        ts("Tensor cores active",
           Q(f"avg by (jobid) ({JOB_GPUS}max by (node, gpu) "
             f"(gangwatch_gpu_prof_tensor_active_ratio{{{NODE},pipe=\"any\"}}))", "{{jobid}}"),
           unit="percentunit", max=1, description="Mean over the job's GPUs on the selected nodes. "
                                                  "Needs DCGM or NVML GPM (Hopper and newer)."),
        ts("Mean and slowest node", Q(f"jobid:gangwatch_gpu_utilization_ratio:avg{{{JOB}}}", "mean {{jobid}}"),
           Q(f"jobid:gangwatch_gpu_utilization_ratio:min{{{JOB}}}", "slowest {{jobid}}"), unit="percentunit", max=1),
    )),
    Row("Network and storage", (
        ts("InfiniBand traffic of the job's nodes",
           Q(f"jobid:gangwatch_infiniband_node_transmit_data_bytes:rate5m{{{JOB}}}", "transmit {{jobid}}"),
           Q(f"jobid:gangwatch_infiniband_node_receive_data_bytes:rate5m{{{JOB}}}", "receive {{jobid}}"), unit="Bps"),
        ts("Lustre client I/O of the job's nodes",
           Q(f"jobid:gangwatch_lustre_client_read_bytes:rate5m{{{JOB}}}", "read {{jobid}}"),
           Q(f"jobid:gangwatch_lustre_client_write_bytes:rate5m{{{JOB}}}", "write {{jobid}}"), unit="Bps"),
        ts("Lustre servers' job_stats", Q(f"jobid_operation:gangwatch_lustre_job_io_bytes:rate5m{{{JOB}}}", "{{operation}}"),
           unit="Bps"),
        ts("CPU and memory (cgroup)", Q(f"jobid:gangwatch_job_cpu_seconds:rate5m{{{JOB}}}", "CPUs busy"),
           Q(f"jobid:gangwatch_job_memory_usage_bytes:sum{{{JOB}}} / 2^30", "memory GiB")),
    )),
), tags=("gangwatch",))

NODE_D = D("gangwatch-node", "gangwatch / node", "One or more nodes: GPUs, health counters, host and collectors.", (
    Row("GPUs", (
        ts("GPU utilisation", Q(f"gangwatch_gpu_utilization_ratio{{{NODE}}}", "{{node}}/{{gpu}}"), unit="percentunit", max=1),
        ts("GPU memory used", Q(f"gangwatch_gpu_memory_used_bytes{{{NODE}}}", "{{node}}/{{gpu}}"), unit="bytes"),
        ts("GPU temperature", Q(f'gangwatch_gpu_temperature_celsius{{{NODE},sensor="gpu"}}', "{{node}}/{{gpu}}"), unit="celsius"),
        ts("GPU power", Q(f"gangwatch_gpu_power_watts{{{NODE}}}", "{{node}}/{{gpu}}"), unit="watt"),
    )),
    Row("GPU health", (
        ts("XID events (1h)", Q(f"increase(gangwatch_gpu_xid_errors_total{{{NODE}}}[1h])", "{{node}}/{{gpu}} xid {{xid}}")),
        ts("ECC errors (volatile, 1h)",
           Q(f'increase(gangwatch_gpu_ecc_errors_total{{{NODE},counter="volatile"}}[1h])', "{{node}}/{{gpu}} {{error}}")),
        ts("Remapped rows", Q(f"gangwatch_gpu_remapped_rows{{{NODE}}}", "{{node}}/{{gpu}} {{cause}}")),
        ts("Clock throttle reasons active", Q(f"sum by (node, reason) (gangwatch_gpu_clock_throttle_reason{{{NODE}}})",
                                               "{{node}} {{reason}}")),
        ts("GPUs answering NVML and lost", Q(f"gangwatch_gpu_node_gpus{{{NODE}}}", "answering {{node}}"),
           Q(f"gangwatch_gpu_node_lost{{{NODE}}}", "lost {{node}}"), width=24),
    )),
    Row("Host", (
        ts("CPU busy", Q(f'1 - sum by (node) (rate(gangwatch_cpu_seconds_total{{{NODE},mode=~"idle|iowait"}}[5m]))'
                         f' / count by (node) (gangwatch_cpu_seconds_total{{{NODE},mode="idle"}})', "{{node}}"),
           unit="percentunit", max=1),
        ts("Memory used", Q(f"max by (node) (1 - (gangwatch_memory_mem_free_bytes{{{NODE}}} + gangwatch_memory_cached_bytes{{{NODE}}}"
                            f" + gangwatch_memory_buffers_bytes{{{NODE}}}) / gangwatch_memory_mem_total_bytes{{{NODE}}})", "{{node}}"),
           unit="percentunit", max=1),
        ts("Pressure stalled (some tasks)", Q(f"sum by (node, resource) (rate(gangwatch_pressure_stalled_seconds_total{{{NODE}}}[5m]))",
                                              "{{node}} {{resource}}"), unit="percentunit"),
        ts("Disk busy", Q(f"sum by (node, device) (rate(gangwatch_disk_io_time_seconds_total{{{NODE}}}[5m]))", "{{node}} {{device}}"),
           unit="percentunit", max=1, description="Fraction of time the device was busy (iostat %util / 100)."),
    )),
    Row("Jobs and collectors", (
        table("Jobs on the node", Q(f"sum by (node, jobid) (rate(gangwatch_job_cpu_seconds_total{{{NODE},{JOB}}}[5m]))", "CPUs busy"),
              Q(f"max by (node, jobid) (gangwatch_job_gpus{{{NODE},{JOB}}})", "GPUs"),
              Q(f"max by (node, jobid) (gangwatch_job_gpu_utilization_ratio{{{NODE},{JOB}}})", "GPU utilisation"), width=12),
        ts("Collectors failing", Q(f"gangwatch_scrape_collectors_failed{{{NODE}}}", "{{node}}"), width=12),
    )),
), tags=("gangwatch",))

STORAGE = D("gangwatch-storage", "gangwatch / storage", "Lustre targets, GPFS, BeeGFS, hung mounts and the jobs behind the I/O.", (
    Row("Lustre", (
        ts("OST traffic (servers)", Q("fs_target_operation:gangwatch_lustre_ost_io_bytes:rate5m", "{{target}} {{operation}}"),
           unit="Bps"),
        ts("Traffic per target (selected clients)",
           Q(f"sum by (target, operation) (rate(gangwatch_lustre_client_target_io_bytes_total{{{NODE}}}[5m]))",
             "{{target}} {{operation}}"), unit="Bps", description="As the selected nodes' OSC/MDC see it."),
        ts("Client I/O per node", Q(f"node_operation:gangwatch_lustre_client_io_bytes:rate5m{{{NODE}}}",
                                    "{{node}} {{operation}}"), unit="Bps"),
        ts("Worst client RPC wait", Q("fs_type:gangwatch_lustre_client_import_rpc_wait_max_seconds:max", "{{fs}} {{type}}"),
           unit="s", description="The largest average RPC wait any client sees on an import of the filesystem."),
        ts("RPC wait per target (selected clients)",
           Q(f"max by (target) (gangwatch_lustre_client_import_rpc_wait_average_seconds{{{NODE}}})", "{{target}}"),
           unit="s", description="The worst of the selected nodes' average RPC wait, per target."),
        ts("Clients disconnected per target", Q("fs_target:gangwatch_lustre_client_import_disconnected:count", "{{target}}")),
        ts("MDT operations", Q("fs_target:gangwatch_lustre_mdt_operations:rate5m", "{{target}}"), unit="ops"),
        ts("Top jobs by Lustre I/O (job_stats)",
           Q("topk(10, sum by (jobid) (jobid_operation:gangwatch_lustre_job_io_bytes:rate5m))", "{{jobid}}"), unit="Bps"),
    )),
    Row("GPFS", (
        ts("GPFS traffic", Q("cluster_fs:gangwatch_gpfs_read_bytes:rate5m", "read {{fs}}"),
           Q("cluster_fs:gangwatch_gpfs_write_bytes:rate5m", "write {{fs}}"), unit="Bps"),
        ts("Longest waiter", Q(f"max by (node) (gangwatch_gpfs_waiter_longest_seconds{{{NODE}}})", "{{node}}"), unit="s"),
        ts("Waiters by reason", Q("sum by (reason) (gangwatch_gpfs_waiters_by_reason)", "{{reason}}")),
    )),
    # Every node running beegfs-ctl reports the same targets and servers: `max by` keeps one each.
    Row("BeeGFS", (
        table("BeeGFS targets not online or not good",
              Q('max by (fs, nodetype, target, state) (gangwatch_beegfs_target_reachability{state!="Online"} == 1)'),
              Q('max by (fs, nodetype, target, state) (gangwatch_beegfs_target_consistency{state!="Good"} == 1)'),
              description="beegfs-ctl --listtargets --state: targets Offline or Probably-offline, and targets "
                          "that need a resync or are Bad. Empty when every target is Online and Good."),
        ts("Targets not online", Q('count by (fs, nodetype) (max by (fs, nodetype, target) '
                                   '(gangwatch_beegfs_target_reachability{state!="Online"}) == 1)', "{{fs}} {{nodetype}}")),
        ts("Requests in progress per target", Q("sum by (target) (max by (fs, target, state) "
                                                "(gangwatch_beegfs_target_server_requests))", "{{target}}"),
           description="Queued plus active requests at the storage server holding each target "
                       "(BeeGFS reports load per server)."),
        ts("Metadata server requests in progress", Q("sum by (server) (max by (fs, server, state) "
                                                     "(gangwatch_beegfs_meta_server_requests))", "{{server}}"),
           Q("max by (server) (gangwatch_beegfs_meta_server_requests_per_second)", "{{server}} per second")),
        ts("Storage server throughput", Q("max by (server) (gangwatch_beegfs_server_read_bytes_per_second)", "read {{server}}"),
           Q("max by (server) (gangwatch_beegfs_server_write_bytes_per_second)", "write {{server}}"), unit="Bps"),
        ts("Client I/O per node", Q(f"sum by (node) (rate(gangwatch_beegfs_client_read_bytes_total{{{NODE}}}[5m]))",
                                    "read {{node}}"),
           Q(f"sum by (node) (rate(gangwatch_beegfs_client_write_bytes_total{{{NODE}}}[5m]))", "write {{node}}"),
           unit="Bps"),
    )),
    Row("Mounts and jobs", (
        ts("Nodes where a mount hangs", Q("mountpoint_fstype:gangwatch_filesystem_stat_timeout:sum", "{{mountpoint}}")),
        ts("Space available", Q(f"gangwatch_filesystem_avail_bytes{{{NODE}}} / gangwatch_filesystem_size_bytes{{{NODE}}}",
                                "{{node}} {{mountpoint}}"), unit="percentunit", max=1),
        ts("Selected jobs' Lustre I/O", Q(f"jobid:gangwatch_lustre_client_read_bytes:rate5m{{{JOB}}}", "read {{jobid}}"),
           Q(f"jobid:gangwatch_lustre_client_write_bytes:rate5m{{{JOB}}}", "write {{jobid}}"), unit="Bps"),
    )),
), tags=("gangwatch",))

TX, RX = "gangwatch_infiniband_port_transmit_data_bytes_total", "gangwatch_infiniband_port_receive_data_bytes_total"
NETWORK = D("gangwatch-network", "gangwatch / network", "InfiniBand ports, links, congestion and switches.", (
    Row("Traffic", (
        ts("Transmit per port", Q(f"rate({TX}{{{NODE}}}[5m])", "{{node}} {{device}}/{{port}}"), unit="Bps"),
        ts("Receive per port", Q(f"rate({RX}{{{NODE}}}[5m])", "{{node}} {{device}}/{{port}}"), unit="Bps"),
        # The busier direction over the link's rate: `(a >= b) or b` is the element-wise maximum.
        ts("Link utilisation (busier direction)",
           Q(f"(rate({TX}{{{NODE}}}[5m]) >= rate({RX}{{{NODE}}}[5m]) or rate({RX}{{{NODE}}}[5m]))"
             f" / on (node, device, port) max by (node, device, port) (gangwatch_infiniband_port_rate_bytes_per_second{{{NODE}}})",
             "{{node}} {{device}}/{{port}}"), unit="percentunit", max=1),
        ts("Traffic per leaf switch", Q("switch:gangwatch_infiniband_node_transmit_data_bytes:rate5m", "{{switch}} tx"),
           Q("switch:gangwatch_infiniband_node_receive_data_bytes:rate5m", "{{switch}} rx"), unit="Bps",
           description="Needs the node to switch map (gangwatch_slurm_node_switch_info)."),
    )),
    Row("Congestion and errors", (
        ts("Wait ticks per second", Q(f"node:gangwatch_infiniband_node_transmit_wait_ticks:rate5m{{{NODE}}}", "{{node}}"),
           description="Summed over the node's rails (its InfiniBand ports: a DGX's RoCE storage NICs are left out); "
                       "InfinibandCongestion fires above 1e6 for 10 minutes."),
        ts("Wait per leaf switch", Q("switch:gangwatch_infiniband_node_transmit_wait_ticks:rate5m", "{{switch}}")),
        ts("Symbol errors (1h)", Q(_port_errors("gangwatch_infiniband_port_symbol_errors_total"),
                                   "{{node}} {{device}}/{{port}}"), description=_QUIET_PORTS),
        ts("Link downs (1h)", Q(_port_errors("gangwatch_infiniband_port_link_downed_total"),
                                "{{node}} {{device}}/{{port}}"), description=_QUIET_PORTS),
    )),
    Row("Ports", (
        ts("Ports down", Q(f"gangwatch_infiniband_node_ports_down{{{NODE}}}", "{{node}}"), width=12,
           description="InfiniBand ports not Active that were Active since the agent started "
                       "(uncabled and disabled ports are left out)."),
        ts("Ports below their expected rate", Q(f"sum by (node) (gangwatch_infiniband_port_degraded{{{NODE}}})", "{{node}}"),
           width=12),
        ts("Traffic per node", Q(f"node:gangwatch_infiniband_node_transmit_data_bytes:rate5m{{{NODE}}}", "transmit {{node}}"),
           Q(f"node:gangwatch_infiniband_node_receive_data_bytes:rate5m{{{NODE}}}", "receive {{node}}"), unit="Bps"),
        ts("Selected jobs' InfiniBand traffic",
           Q(f"jobid:gangwatch_infiniband_node_transmit_data_bytes:rate5m{{{JOB}}}", "transmit {{jobid}}"),
           Q(f"jobid:gangwatch_infiniband_node_receive_data_bytes:rate5m{{{JOB}}}", "receive {{jobid}}"), unit="Bps"),
    )),
), tags=("gangwatch",))

QUEUE = D("gangwatch-queue", "gangwatch / queue", "Slurm's queue: pending gangs, idle GPUs, backfill and the scheduler; Kubernetes gangs (Volcano, Kueue).", (
    Row("Queue", (
        ts("Pending jobs by reason", Q("partition_reason:gangwatch_slurm_jobs_pending:sum", "{{partition}} {{reason}}")),
        ts("Running jobs", Q('sum by (partition) (gangwatch_slurm_jobs{state="RUNNING"})', "{{partition}}")),
        ts("GPUs by state", Q("gangwatch_slurm_partition_gpus", "{{partition}} {{state}}")),
        ts("Idle share of GPUs", Q("partition:gangwatch_slurm_partition_gpus_idle:ratio", "{{partition}}"),
           unit="percentunit", max=1),
        ts("Oldest pending gang", Q("gangwatch_slurm_pending_gang_jobs_oldest_wait_seconds", "{{partition}}"), unit="s"),
        table("Pending gangs", Q("sort_desc(gangwatch_slurm_pending_gang_job_wait_seconds)")),
    )),
    Row("Backfill", (
        ts("Idle GPUs and startable jobs (planner)", Q("gangwatch_backfill_idle_gpus", "idle GPUs {{partition}}"),
           Q("gangwatch_backfill_startable_jobs", "startable jobs {{partition}}")),
        ts("Scheduler cycles", Q("gangwatch_slurm_scheduler_main_cycle_last_seconds", "main"),
           Q("gangwatch_slurm_scheduler_backfill_cycle_last_seconds", "backfill"), unit="s"),
        ts("Backfill depth", Q("gangwatch_slurm_scheduler_backfill_depth_last", "jobs examined")),
        ts("Slurm reachable and snapshot age", Q("gangwatch_slurm_up", "up"),
           Q("gangwatch_slurm_snapshot_age_seconds", "age (s)")),
    )),
    # gangwatch kube-exporter (docs/kube-exporter.md): Volcano PodGroups and Kueue Workloads.
    Row("Kubernetes gangs", (
        ts("Gangs by state", Q("sum by (scheduler, queue, state) (gangwatch_kube_gangs)", "{{scheduler}} {{queue}} {{state}}")),
        ts("Queue quota and use", Q("gangwatch_kube_queue_quota", "quota {{queue}} {{flavor}} {{resource}}"),
           Q("gangwatch_kube_queue_used", "used {{queue}} {{flavor}} {{resource}}"),
           description="Volcano capability against allocated, Kueue nominal quota against admitted use."),
        ts("Partial gangs (GPUs held, no progress)", Q("sum by (instance) (gangwatch_kube_gang_partial)", "{{instance}}")),
        ts("API server reachable and snapshot age", Q("gangwatch_kube_up", "up"),
           Q("gangwatch_kube_snapshot_age_seconds", "age (s)")),
        ts("API requests by verb", Q("sum by (verb) (rate(gangwatch_kube_api_requests_total[$__rate_interval]))", "{{verb}}"),
           unit="reqps", description="Steady state is one WATCH per resource per watch timeout, whatever the object count."),
        table("Pending gangs: resource missing", Q("sort_desc(gangwatch_kube_gang_blocking_resource_missing)"), width=12),
    )),
    Row("Selected jobs and nodes", (
        table("Jobs", Q(f"gangwatch_slurm_job_info{{{JOB}}}"), width=12),
        table("Nodes", Q(f"gangwatch_slurm_node_info{{{NODE}}}"), width=12),
    )),
), tags=("gangwatch",))

DASHBOARDS = {"cluster": CLUSTER, "job": JOB_D, "node": NODE_D, "storage": STORAGE, "network": NETWORK, "queue": QUEUE}

# ------------------------------------------------------------------------------------- rendering


def variables() -> list[dict]:
    def query_var(name, label, query, multi):
        return {"name": name, "label": label, "type": "query", "datasource": DS, "query": query,
                "refresh": 2, "sort": 3, "multi": multi, "includeAll": True,
                "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "options": [], "hide": 0, "regex": "", "skipUrlSync": False}

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "options": [], "hide": 0, "refresh": 1, "regex": "", "skipUrlSync": False},
        query_var("job", "Job", "label_values(jobid:gangwatch_job_nodes:count, jobid)", True),
        query_var("node", "Node", 'label_values(gangwatch_scrape_collector_success{job="gangwatch-agent"}, node)', True),
    ]


def panel(p: P, pid: int, x: int, y: int) -> tuple[dict, int]:
    height = 4 if p.kind == "stat" else 8
    defaults: dict = {"unit": p.unit}
    if p.max is not None:
        defaults.update(min=0, max=p.max)
    targets = [{"datasource": DS, "expr": q.expr, "legendFormat": q.legend or "__auto", "refId": chr(ord("A") + i),
                "range": not q.instant, "instant": q.instant, **({"format": "table"} if p.kind == "table" else {})}
               for i, q in enumerate(p.queries)]
    options = {"table": {"showHeader": True, "cellHeight": "sm"},
               "stat": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"},
               "timeseries": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                              "tooltip": {"mode": "multi", "sort": "desc"}}}[p.kind]
    out = {"id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": DS,
           "gridPos": {"h": height, "w": p.width, "x": x, "y": y}, "targets": targets, "options": options,
           "fieldConfig": {"defaults": defaults, "overrides": []}}
    if p.kind == "table":
        out["transformations"] = [{"id": "merge", "options": {}}]
    return out, height


def dashboard(d: D) -> dict:
    panels, pid, y = [], 1, 0
    for row in d.rows:
        panels.append({"id": pid, "type": "row", "title": row.title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y, x, row_h = pid + 1, y + 1, 0, 0
        for p in row.panels:
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            out, h = panel(p, pid, x, y)
            panels.append(out)
            pid, x, row_h = pid + 1, x + p.width, max(row_h, h)
        y += row_h
    return {
        "uid": d.uid, "title": d.title, "description": d.description, "tags": list(d.tags),
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"}, "timepicker": {}, "timezone": "browser", "refresh": "1m",
        "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "gangwatch", "type": "dashboards", "tags": ["gangwatch"], "asDropdown": True,
                   "includeVars": True, "keepTime": True, "icon": "external link", "targetBlank": False,
                   "tooltip": "", "url": ""}],
        "templating": {"list": variables()},
        "panels": panels,
    }


def render(d: D) -> str:
    return json.dumps(dashboard(d), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed dashboard differs from the generated one")
    args = ap.parse_args(argv)
    stale = []
    for name, d in DASHBOARDS.items():
        path = HERE / f"{name}.json"
        text = render(d)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python grafana/build.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
