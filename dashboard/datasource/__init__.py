"""The dashboard's one data-source facade: everything a page shows comes through `Datasource`.

Sources composed here (and nowhere else in the dashboard):
- the scheduler: a `collectors.slurm.model.Snapshot`, from the simulator, a slurm-exporter's
  `/api/v1/snapshot`, the local Slurm CLI (collectors.slurm.sources.Poller) or a snapshot file;
- metrics: per-node and per-GPU time series (the simulator's in-memory history; a Prometheus or
  embedded metric source where one is configured);
- findings: verdicts per running job and incidents, from the diagnosis when it is importable, else
  (simulator only) the simulator's fault ground truth, labelled as such;
- the backfill plan: dashboard.analysis.planner over the current snapshot;
- inventory now: per node its GPUs, InfiniBand ports, filesystems, disks and GPU topology
  (`node_inventory`, `gpu_topology`), per switch and port (`network`), per filesystem target
  (`storage_targets`), from the simulator's counters or the metric window; None where the source
  has no such series (pages show "unknown", never 0), and counter rates only from two samples.

Everything returned is plain frozen data (no Dash objects); pages hand it to dashboard/figures.py.
Privileges: none. Failure modes: a source that fails or is missing yields None / empty results and
says so in `status()` (each source's age and last error); no method raises for a missing source.

Layout: `records` (the frozen records and signals), `protocol` (`Datasource`), `base` (what every
implementation shares), one module per implementation (`memory`, `simulator`, `live` with the
metric-window series of `window_series`), `convert` (diagnosis -> Findings) and `arrays` (pure
array helpers). The public names are re-exported here.
"""

from __future__ import annotations

from dashboard.analysis.findings import Evidence, Incident, Placement, Verdict, finite
from dashboard.datasource.arrays import aggregate_rows, build_network, downsample_cols, nanmean, nansum
from dashboard.datasource.base import BaseDatasource
from dashboard.datasource.convert import convert_diagnosis
from dashboard.datasource.live import LiveDatasource, outage_text, partly_down, snapshot_from_file, snapshot_from_url, source_down
from dashboard.datasource.memory import MemoryDatasource
from dashboard.datasource.protocol import Datasource
from dashboard.datasource.records import (CONGESTION, FLAGGED, SIGNALS, STALE_AFTER_SECONDS, SUMMED, Findings, GpuNow, GpuTopology,
                                          Heatmap, Mount, Network, NodeInventory, NodeSeries, Port, Signal, SourceStatus,
                                          Status, SwitchStat, Target, fmt_age, group_incidents, job_verdict_label, signal_label)
from dashboard.datasource.simulator import SimDatasource
from dashboard.datasource.window_series import WindowSeries

__all__ = [
    "CONGESTION", "FLAGGED", "SIGNALS", "STALE_AFTER_SECONDS", "SUMMED", "BaseDatasource", "Datasource", "Evidence", "Findings", "GpuNow",
    "GpuTopology", "Heatmap", "Incident", "LiveDatasource", "MemoryDatasource", "Mount", "Network", "NodeInventory",
    "NodeSeries", "Placement", "Port", "Signal", "SimDatasource", "SourceStatus", "Status", "SwitchStat", "Target", "Verdict",
    "WindowSeries", "aggregate_rows", "build_network", "convert_diagnosis", "downsample_cols", "finite", "fmt_age",
    "group_incidents", "job_verdict_label", "nanmean", "nansum", "outage_text", "partly_down", "snapshot_from_file",
    "signal_label", "snapshot_from_url", "source_down",
]
