"""One virtual node's `/metrics`, exactly as `gangwatch agent` names and labels its series.

Names, types and help texts are taken from the agent's own collectors where they are data (the GPU
and GPU-profiling SPECS, the InfiniBand counter table and node help texts, the Lustre stats
families, the jobs collector's families), so a rename there reaches the simulator. Collectors
rendered: gpu, gpu_profiling (as if DCGM were running), infiniband (one HCA `mlx5_<k>` per GPU, port
1; error counters left out while they stand still, as the agent does), lustre_client (filesystem
`lustre`, every OST and MDT, type osc/mdc; per-OST counters left out while they stand still, as
the agent does), pressure, jobs, and the
scrape's own success/duration series. Not simulated: cpu, memory, diskstats, netdev, filesystem,
GPFS (a reader of those gets no series, which the agent also allows: a collector with no data).
Not rendered either: `gangwatch_gpu_pcie_throughput_bytes_per_second` (opt-in in the agent).

The agent's per-node and per-job rollups (`gangwatch_gpu_node_*`, `gangwatch_job_gpus`,
`gangwatch_job_gpu_utilization_ratio`, `gangwatch_infiniband_node_*`, the llite
`gangwatch_lustre_client_io_bytes_total`, `gangwatch_lustre_client_targets_io_bytes_total`,
`gangwatch_lustre_client_import_rpc_wait_max_seconds`, `gangwatch_scrape_collectors_failed`) are computed here from the very values rendered in the
per-device series of the same exposition, as the agent computes them from the readings of one
scrape, so the two always agree. Faults show in them as in the devices: a link_flap rail counts in
`gangwatch_infiniband_node_ports_down` while it is down, an ost_slow OST raises the rpc wait of the
clients reading from it. Every import stays FULL (no fault makes a target unreachable).

Cost (a Prometheus scraping every virtual node renders them all each interval): each family's
`name{labels} ` prefixes are rendered once per renderer, node-independent families once per
renderer and the few node facts once per node; the step's values are rounded and converted for all
nodes at once (`_Step`, on the first render after a step); a scrape then only joins prefixes and
values, one map() per family: about 0.3 ms for a node with 8 GPUs, 8 rails and 34 imports (~1,050
lines; bench/bench_sim.py). The simulation must not change between steps without `step()` (the
demo renders under its lock).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from collectors import __version__
from collectors.exposition import COUNTER, GAUGE, Family, encode, format_labels
from collectors.quiet import IDLE_SECONDS
from collectors.lustre_common import Accumulator, StatsFamilies
from collectors.node.gpu import SPECS as GPU_SPECS
from collectors.node.gpu_profiling import SPECS as PROF_SPECS
from collectors.node.infiniband import COUNTERS as IB_COUNTERS, NODE_HELP as IB_NODE_HELP, PORTS_DOWN_HELP
from collectors.node.infiniband import IDLE_SERIES as IB_IDLE_SERIES, IDLE_SERIES_HELP as IB_IDLE_SERIES_HELP
from collectors.node.infiniband import PREFIX as IB
from collectors.node.jobs import JobFamilies
from collectors.node.lustre_client import IDLE_SERIES, IDLE_SERIES_HELP, TARGETS_IO, TARGETS_IO_HELP
from collectors.node.ethtool import NODE_HELP as ETH_NODE_HELP, PREFIX as ETH
from collectors.node.roce import COUNTERS as ROCE_COUNTERS, NODE_HELP as ROCE_NODE_HELP, PREFIX as ROCE

from ..window import LINK_LAYER
from . import cluster as C
from .engine import THROTTLE_REASONS

COLLECTORS = ("gpu", "gpu_profiling", "infiniband", "jobs", "lustre_client", "pressure")
ECC = (("corrected", "volatile"), ("corrected", "aggregate"), ("uncorrected", "volatile"), ("uncorrected", "aggregate"))
IB_DATA = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait",
           "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards")
# the simulated port counters, in the order of _Step.ib's rows (the other IB_DATA counters stay 0)
IB_ROWS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait",
           "symbol_error", "link_downed")
QUIET_IB = ("symbol_error", "link_downed")  # the simulated error counters: left out while they stand still
# fabric "roce": the simulated hw_counters (in the order of _Step.roce's rows); port_xmit_wait stands still
ROCE_ROWS = ("np_ecn_marked_roce_packets", "rp_cnp_handled", "out_of_sequence")
ETH_PAUSE = ETH + "node_received_pause_frames_total"
ETH_DOWN = ETH + "node_link_down_events_total"
ETH_STORM = ETH + "node_pause_storm_events_total"
# The simulator does not model metadata service time: a healthy MDS answers in well under a millisecond.
MDC_WAIT_SECONDS = 0.0004
LUSTRE_NID_BASE = 200  # OSS/MDS NIDs 10.1.0.<base + k>@o2ib, one server per target
_lustre = Accumulator()  # the stats families, named as the lustre_client collector names them
StatsFamilies(_lustre, "gangwatch_lustre_client", "the client's llite layer")
StatsFamilies(_lustre, "gangwatch_lustre_client_target", "the client's OSC/MDC for the target")

# Families whose type and help are code, not data, in the agent: the agent's words, repeated.
_OWN: dict[str, tuple[str, str]] = {
    IB + "info": (GAUGE, "Facts about an RDMA device (board, firmware, HCA model, node GUID); value 1."),
    IB + "port_rate_bytes_per_second": (GAUGE, "Data rate the port's link trained at, in bytes per second (sysfs "
                                               "rate in Gb/s divided by 8)."),
    IB + "port_info": (GAUGE, "Facts about a port (link layer, active width and speed, LID); value 1."),
    IB + "port_state_id": (GAUGE, "Logical state of the port (0: no change, 1: down, 2: init, 3: armed, 4: active, "
                                  "5: active defer)."),
    IB + "port_physical_state_id": (GAUGE, "Physical state of the port (1: sleep, 2: polling, 3: disabled, 4: port "
                                           "configuration training, 5: link up, 6: link error recovery, 7: phy test)."),
    "gangwatch_lustre_client_import_info": (GAUGE, "The client's import of the target: connection state (FULL, "
                                                   "DISCONN, CONNECTING, REPLAY, EVICTED, ...) and the server NID it "
                                                   "talks to; value 1."),
    "gangwatch_lustre_client_import_connected": (GAUGE, "Whether the client's import of the target is in state FULL "
                                                        "(1) or not (0)."),
    "gangwatch_lustre_client_import_rpc_wait_average_seconds": (GAUGE, "Average seconds an RPC to the target waited "
                                                                       "for its reply (import avg_waittime)."),
    "gangwatch_lustre_client_import_rpc_wait_max_seconds": (GAUGE, "Largest average seconds an RPC waited for its "
                                                                   "reply among this node's imports of the filesystem "
                                                                   "and type (max over targets of gangwatch_lustre_"
                                                                   "client_import_rpc_wait_average_seconds)."),
    "gangwatch_lustre_client_target_rpcs_in_flight": (GAUGE, "RPCs the client has in flight to the target now "
                                                             "(rpc_stats)."),
    "gangwatch_pressure_waiting_seconds_total": (COUNTER, "Total seconds in which at least one task was stalled on "
                                                          "the resource (PSI some)."),
    "gangwatch_pressure_stalled_seconds_total": (COUNTER, "Total seconds in which all non-idle tasks were stalled on "
                                                          "the resource (PSI full)."),
    "gangwatch_scrape_collector_success": (GAUGE, "Whether the collector succeeded in this scrape (1) or failed or "
                                                  "timed out (0)."),
    "gangwatch_scrape_collector_duration_seconds": (GAUGE, "Seconds the collector took in this scrape."),
    "gangwatch_scrape_collectors_failed": (GAUGE, "Collectors that failed or timed out in this scrape "
                                                  "(collector_success 0); 0 when all succeeded."),
    "gangwatch_sim_node_info": (GAUGE, "This node is SIMULATED by `gangwatch demo`; its leaf switch; value 1."),
    "gangwatch_build_info": (GAUGE, "A metric with value 1 labelled with gangwatch's version and component."),
}


def _agent_specs() -> dict[str, tuple[str, str]]:
    """name -> (type, help) of the families the agent's collectors hold as data."""
    out = {name: (kind, help_) for name, kind, help_ in (*GPU_SPECS.values(), *PROF_SPECS.values())}
    out.update((IB + c.metric, (COUNTER, c.help)) for c in IB_COUNTERS.values())
    out.update((IB + metric, (COUNTER, help_)) for metric, help_ in IB_NODE_HELP.items())
    out[IB + "node_ports_down"] = (GAUGE, PORTS_DOWN_HELP)
    out.update((ROCE + c.metric, (COUNTER, c.help)) for c in ROCE_COUNTERS.values())
    out.update((ROCE + metric, (COUNTER, help_)) for metric, help_ in ROCE_NODE_HELP.items())
    out[ETH_PAUSE] = (COUNTER, ETH_NODE_HELP["node_received_pause_frames_total"])
    out[ETH_DOWN] = (COUNTER, ETH_NODE_HELP["node_link_down_events_total"])
    out[ETH_STORM] = (COUNTER, ETH_NODE_HELP["node_pause_storm_events_total"])
    out.update((f.name, (f.kind, f.help)) for f in _lustre.families.values())
    out[TARGETS_IO] = (COUNTER, TARGETS_IO_HELP)
    out[IDLE_SERIES] = (GAUGE, IDLE_SERIES_HELP)
    out[IB_IDLE_SERIES] = (GAUGE, IB_IDLE_SERIES_HELP)
    out.update((f.name, (f.kind, f.help)) for f in JobFamilies().all())
    return out


SPEC = {**_OWN, **_agent_specs()}  # name -> (type, help) of every family rendered
_GPU = {key: spec[0] for key, spec in GPU_SPECS.items()}
_PROF = {key: spec[0] for key, spec in PROF_SPECS.items()}
_JF = JobFamilies()  # the jobs collector's family names


Series = tuple[str, list[str]]  # a family's name and its sample lines, before it becomes a Family


def _fam(name: str, lines: list[str]) -> Family:
    kind, help_ = SPEC[name]
    fam = Family(name, kind, help_)
    fam.lines = lines
    return fam


def _lines(prefixes: list[str], values: list) -> list[str]:
    """`name{labels} value` lines: the prefixes end in a space; values are Python ints or floats."""
    return list(map(str.__add__, prefixes, map(str, values)))


def _kept(prefixes: list[str], values: list, keep: np.ndarray) -> list[str]:
    """_lines of the rows `keep` says are exported."""
    return [p + str(x) for p, x, k in zip(prefixes, values, keep.tolist()) if k]


def _text(families: list[Series]) -> str:
    """Text format of families known to have distinct names (encode() without its merging and sorting)."""
    out = []
    for name, lines in families:
        if lines:
            out.append(_header(name))
            out.extend(lines)
    return "\n".join(out)


def _pre(name: str, labels: list[str]) -> list[str]:
    return [f"{name}{lbl} " for lbl in labels]


def _r(a: np.ndarray, digits: int) -> np.ndarray:
    return np.round(a.astype(np.float64), digits)


def _ints(a: np.ndarray) -> np.ndarray:
    return np.floor(a).astype(np.int64)


@functools.cache
def _header(name: str) -> str:
    """`# HELP` and `# TYPE` lines of a family, as the agent's encoder writes them."""
    kind, help_ = SPEC[name]
    return encode([Family(name, kind, help_).add(0)]).rsplit("\n", 2)[0]


class _Step:
    """The state of one simulated step as the exposition shows it (rounded, integer counters),
    converted for all nodes at once: per node, a scrape then costs one tolist() per table rather
    than a numpy call per series."""

    def __init__(self, s):
        sm, tensor = s.sm, s.tensor
        self.key = (s.steps, s.t)
        # GPU tables (node, row, gpu); rows in the order of NodeRenderer.gpu_rows
        self.g4 = _r(np.stack([s.util, sm * 0.5, sm, sm * 0.4, sm * 0.55, tensor, tensor * 0.9], axis=1), 4)
        self.g1 = _r(np.stack([s.temp, s.temp + 6.0], axis=1), 1)
        self.g2, self.g3 = _r(s.power, 2), _r(s.energy, 3)
        mem = s.mem_used.astype(np.int64)
        # rows: memory used, free, SM clock, NVLink, PCIe rx, tx; lost, throttle reason, job slot
        self.gi = np.stack([mem, C.GPU_MEMORY_BYTES - mem, s.clock.astype(np.int64), np.rint(s.nvlink).astype(np.int64),
                            np.rint(s.pcie_rx).astype(np.int64), np.rint(s.pcie_rx * 0.05).astype(np.int64),
                            s.gpu_lost.astype(np.int64), s.throttle.astype(np.int64), s.gpu_job], axis=1)
        # rails (node, row, rail): IB_ROWS, then whether the port is up
        self.ib = np.stack([_ints(s.ib_tx), _ints(s.ib_rx), _ints(s.ib_tx / 4096), _ints(s.ib_rx / 4096), _ints(s.ib_wait),
                            _ints(s.ib_symerr), _ints(s.ib_downed), s.ib_up.astype(np.int64)], axis=1)
        if s.fabric == "roce":
            self.roce = np.stack([_ints(s.roce_ecn), _ints(s.roce_cnp), _ints(s.roce_err)], axis=1)
            self.pause = _ints(s.eth_pause)
            self.nic_down = _ints(s.eth_down)
            self.storm = _ints(s.eth_storm)
        # Lustre (node, row, OST)
        self.ost_i = np.stack([_ints(s.ost_read), _ints(s.ost_write), _ints(s.ost_read_ops), _ints(s.ost_write_ops),
                               _ints(s.ost_inflight)], axis=1)
        self.ost_f = np.stack([_r(s.ost_read_lat, 6), _r(s.ost_wait_avg, 6)], axis=1)
        self.node = np.stack([_r(s.psi_io_some, 3), _r(s.psi_io_full, 3), _r(s.psi_cpu_some, 3),
                              np.floor(s.mdt_ops)], axis=1)


class NodeRenderer:
    """Renders any node of one simulation; holds the label strings, built once (node facts on first use)."""

    def __init__(self, sim, target_idle_seconds: float = IDLE_SECONDS, port_idle_seconds: float = IDLE_SECONDS):
        self.sim = sim
        self.target_idle = target_idle_seconds if target_idle_seconds > 0 else math.inf  # 0: every OST's counters, always
        self.port_idle = port_idle_seconds if port_idle_seconds > 0 else math.inf  # 0: every port error counter, always
        self.g = g = sim.g
        self._topo: list[Family] | None = None
        cl = sim.cluster
        G, P = _GPU, _PROF

        def gpu_pre(name: str, **extra) -> list[str]:
            return _pre(name, [format_labels({"gpu": k, **extra}) for k in range(g)])

        # a prefix per GPU for each row of _Step's GPU tables (g4, g1, g2, g3, gi[:6]), and the family
        self.gpu_rows = [
            [(G["util"], gpu_pre(G["util"])), (G["mem_util"], gpu_pre(G["mem_util"])), (P["sm"], gpu_pre(P["sm"])),
             (P["occ"], gpu_pre(P["occ"])), (P["dram"], gpu_pre(P["dram"])),
             (P["tensor"], gpu_pre(P["tensor"], pipe="any")), (P["tensor"], gpu_pre(P["tensor"], pipe="hmma"))],
            [(G["temp"], gpu_pre(G["temp"], sensor="gpu")), (G["temp"], gpu_pre(G["temp"], sensor="memory"))],
            [(G["power"], gpu_pre(G["power"]))],
            [(G["energy"], gpu_pre(G["energy"]))],
            [(G["mem_used"], gpu_pre(G["mem_used"])), (G["mem_free"], gpu_pre(G["mem_free"])),
             (G["clock"], gpu_pre(G["clock"], clock="sm")), (P["nvlink"], gpu_pre(P["nvlink"], direction="tx")),
             (P["pcie"], gpu_pre(P["pcie"], direction="rx")), (P["pcie"], gpu_pre(P["pcie"], direction="tx"))]]
        # the same values again under other labels: (family, prefixes, table, row)
        self.gpu_again = [(P["gr"], gpu_pre(P["gr"]), 0, 0), (G["clock"], gpu_pre(G["clock"], clock="graphics"), 4, 2),
                          (P["nvlink"], gpu_pre(P["nvlink"], direction="rx"), 4, 3)]
        self.lost_pre = gpu_pre(G["lost"])
        # Per GPU, the block of series whose value takes one of a few states: throttle reasons (one-hot
        # over THROTTLE_REASONS, or none), compute processes (0/1), and the constant ones.
        reasons = [gpu_pre(G["throttle"], reason=r) for r in THROTTLE_REASONS]
        self.throttle = [[[reasons[r][k] + ("1" if r == state else "0") for r in range(len(THROTTLE_REASONS))]
                          for state in range(-1, len(THROTTLE_REASONS))] for k in range(g)]
        self.procs = [[p + v for v in ("0", "1")] for p in gpu_pre(G["procs"])]

        def const(value: object, name: str, **extra) -> list[str]:
            return [p + str(value) for p in gpu_pre(name, **extra)]

        const_rows = {G["clock"]: [const(int(C.MEM_CLOCK_HZ), G["clock"], clock="memory")],
                      G["ecc"]: [const(0, G["ecc"], error=e, counter=c) for e, c in ECC],
                      **{G[key]: [const(0, G[key])] for key in ("pcie_replay", "pstate", "remap_pending", "remap_failure")}}
        self.const_gpu = {name: [[row[k] for row in rows] for k in range(g)] for name, rows in const_rows.items()}
        # InfiniBand: a rail per GPU
        self.rail_l = rail_l = [format_labels({"device": f"mlx5_{k}", "port": "1"}) for k in range(g)]
        # (family, prefixes, the node rollup it is summed into or "") per row of _Step.ib
        self.ib_rows = [(IB + c.metric, _pre(IB + c.metric, rail_l), c.node and IB + c.node)
                        for c in (IB_COUNTERS[key] for key in IB_ROWS)]
        self.roce = sim.fabric == "roce"
        if self.roce:  # (their PortCounters' transmit wait is exported, and stands still: the engine's ib_wait)
            self.roce_rows = [(ROCE + c.metric, _pre(ROCE + c.metric, rail_l), c.node and ROCE + c.node)
                              for c in (ROCE_COUNTERS[key] for key in ROCE_ROWS)]
        zero = [IB + IB_COUNTERS[key].metric for key in IB_DATA if key not in IB_ROWS and key != "link_error_recovery"]
        self.ib_zero = [(name, [p + "0" for p in _pre(name, rail_l)]) for name in zero]
        self.ib_downed_again = _pre(IB + IB_COUNTERS["link_error_recovery"].metric, rail_l)
        self.ib_state = [[f"{IB}port_state_id{lbl} {v}" for v in (1, 4)] for lbl in rail_l]
        self.ib_phys = [[f"{IB}port_physical_state_id{lbl} {v}" for v in (2, 5)] for lbl in rail_l]
        # Lustre: OSTs (osc) then MDTs (mdc)
        self.n_mdts = len(cl.mdts)
        targets = [(t, "osc") for t in cl.osts] + [(t, "mdc") for t in cl.mdts]
        imp = [format_labels({"fs": C.FS_NAME, "target": t, "type": kind}) for t, kind in targets]

        def tgt_pre(name: str, op: str, kind: str = "osc") -> list[str]:
            return _pre(name, [format_labels({"fs": C.FS_NAME, "target": t, "type": k, "operation": op})
                               for t, k in targets if k == kind])

        tops, tio = "gangwatch_lustre_client_target_operations_total", "gangwatch_lustre_client_target_io_bytes_total"
        wait = "gangwatch_lustre_client_import_rpc_wait_average_seconds"
        # prefixes of _Step's Lustre tables' rows: ost_i (read, write, read ops, write ops, in flight), ost_f
        self.ost_i = [tgt_pre(tio, "read"), tgt_pre(tio, "write"), tgt_pre(tops, "read_bytes"), tgt_pre(tops, "write_bytes"),
                      tgt_pre("gangwatch_lustre_client_target_rpcs_in_flight", "read")]
        self.ost_read_ops_again = tgt_pre(tops, "ost_read")
        self.ost_f = [tgt_pre("gangwatch_lustre_client_target_operation_latency_seconds_total", "ost_read"),
                      _pre(wait, imp[:len(cl.osts)])]
        self.mds_getattr = tgt_pre(tops, "mds_getattr", "mdc")
        self.mdc_wait = [p + str(MDC_WAIT_SECONDS) for p in _pre(wait, imp[len(cl.osts):])]
        self.llite_pre = _pre("gangwatch_lustre_client_io_bytes_total",
                              [format_labels({"fs": C.FS_NAME, "operation": op}) for op in ("read", "write")])
        self.osc_sum_pre = _pre(TARGETS_IO,
                                [format_labels({"fs": C.FS_NAME, "type": "osc", "operation": op}) for op in ("read", "write")])
        self.wait_max_pre = _pre("gangwatch_lustre_client_import_rpc_wait_max_seconds",
                                 [format_labels({"fs": C.FS_NAME, "type": t}) for t in ("osc", "mdc")])
        self._jobs_pre: dict[int, dict] = {}
        self._node_facts: dict[int, tuple[list[Family], str]] = {}
        self._shared = self._shared_families(imp, targets)
        self._shared_text = _text([(f.name, f.lines) for f in self._shared])
        self._step: _Step | None = None
        self._moved: tuple[np.ndarray, np.ndarray] | None = None  # per node and OST: when its read, write counters last moved
        self._port_moved: np.ndarray | None = None  # (node, QUIET_IB, rail): when each error counter last moved

    def values(self) -> _Step:
        """This step's tables, converted on the first render of the step (rendering is read-only: the
        demo holds its lock, and the simulation changes only in step())."""
        s = self.sim
        if self._step is None or self._step.key != (s.steps, s.t):
            step = _Step(s)
            self._quiet(step, s.t, s.ost_rate > 0, self._step)
            self._quiet_ports(step, s.t, self._step)
            self._step = step
        return self._step

    def _quiet(self, step: _Step, t: float, reading: np.ndarray, prev: _Step | None) -> None:
        """Which OSC counters each node exports this step, and at what value, as the agent leaves out
        those that stood still for its --collector.lustre_client.target-idle-seconds and shows one
        back at the value it stood at for one scrape (collectors.quiet.QuietSeries): a
        target's read counters (bytes, calls, ost_read RPCs and their time) move together, its write
        counters together. The virtual agents have run longer than that window: a target not read
        in the first rendered step counts as still since long before it. `step.shown_i`,
        `step.shown_f`: the Lustre tables as the per-target series show them (the totals count the
        steps' own values)."""
        reads, writes = step.ost_i[:, 0, :], step.ost_i[:, 1, :]
        step.shown_i, step.shown_f = step.ost_i, step.ost_f
        if prev is None:  # the first rendered step
            self._moved = (np.where(reading, t, -np.inf), np.full(writes.shape, -np.inf))
            step.keep_r, step.keep_w = ((t - m) <= self.target_idle for m in self._moved)
        else:
            last_r, last_w = self._moved
            moved_r, moved_w = reads != prev.ost_i[:, 0, :], writes != prev.ost_i[:, 1, :]
            last_r[moved_r] = t
            last_w[moved_w] = t
            step.keep_r, step.keep_w = ((t - m) <= self.target_idle for m in self._moved)
            back_r, back_w = moved_r & ~prev.keep_r, moved_w & ~prev.keep_w
            if back_r.any() or back_w.any():
                shown_i, shown_f = step.ost_i.copy(), step.ost_f.copy()
                for row, back in ((0, back_r), (2, back_r), (1, back_w), (3, back_w)):
                    shown_i[:, row, :][back] = prev.ost_i[:, row, :][back]
                shown_f[:, 0, :][back_r] = prev.ost_f[:, 0, :][back_r]
                step.shown_i, step.shown_f = shown_i, shown_f
        # per node: the read counters are 4 series a target (io read, read_bytes and ost_read calls,
        # ost_read time), the write counters 2 (io write, write_bytes calls)
        step.idle = (4 * (~step.keep_r).sum(axis=1) + 2 * (~step.keep_w).sum(axis=1)).tolist()

    def _quiet_ports(self, step: _Step, t: float, prev: _Step | None) -> None:
        """Which port error counters each node exports this step, and at what value, as the agent
        leaves out those that stood still for its --collector.infiniband.error-idle-seconds
        (collectors.quiet.QuietSeries): the simulated symbol errors and link drops (a drop's link
        error recovery moves with it); the error counters the simulator keeps at 0 are never shown,
        the virtual agents having run longer than the window. A counter that is not 0 at the first
        rendered step counts as moved then (when is not known; shown for a window more than needed,
        never less). `step.ib_shown`: the port table as the per-port series show it (the node
        rollups count the step's own values); `step.keep_ib` (node, QUIET_IB, rail)."""
        rows = [IB_ROWS.index(k) for k in QUIET_IB]
        now = step.ib[:, rows, :]
        step.ib_shown = step.ib
        if prev is None:
            self._port_moved = np.where(now != 0, t, -np.inf)
        else:
            moved = now != prev.ib[:, rows, :]
            self._port_moved[moved] = t
            back = moved & ~prev.keep_ib
            if back.any():
                shown = step.ib.copy()
                for k, row in enumerate(rows):
                    shown[:, row, :][back[:, k, :]] = prev.ib[:, row, :][back[:, k, :]]
                step.ib_shown = shown
        step.keep_ib = (t - self._port_moved) <= self.port_idle
        # per node: symbol errors 1 series a port, link drops 2 (link_downed, link_error_recovery),
        # and the counters kept at 0 unless every counter is exported
        never = 0 if self.port_idle == math.inf else len(self.ib_zero) * self.g
        step.port_idle = ((~step.keep_ib[:, 0, :]).sum(axis=1) + 2 * (~step.keep_ib[:, 1, :]).sum(axis=1) + never).tolist()

    # ------------------------------------------------------------------------------ facts

    def _shared_families(self, imp: list[str], targets: list[tuple[str, str]]) -> list[Family]:
        """Series that are the same on every node and never change: device counts, link facts, import
        facts, the scrape's own series."""
        g, G, P = self.g, _GPU, _PROF

        def fam(name: str) -> Family:
            return Family(name, *SPEC[name])

        total, rate, port = fam(G["mem_total"]), fam(IB + "port_rate_bytes_per_second"), fam(IB + "port_info")
        for k in range(g):
            total.add(C.GPU_MEMORY_BYTES, gpu=k)
            rate.add(C.IB_RATE_BYTES, device=f"mlx5_{k}", port="1")
            port.add(1, device=f"mlx5_{k}", port="1", link_layer=LINK_LAYER[self.sim.fabric], width="4X", speed="NDR",
                     lid="0" if self.sim.fabric == "roce" else str(100 + k))
        conn, info = fam("gangwatch_lustre_client_import_connected"), fam("gangwatch_lustre_client_import_info")
        for k, (target, kind) in enumerate(targets):
            conn.add(1, fs=C.FS_NAME, target=target, type=kind)
            info.add(1, fs=C.FS_NAME, target=target, type=kind, state="FULL", connection=f"10.1.0.{LUSTRE_NID_BASE + k}@o2ib")
        success, duration = fam("gangwatch_scrape_collector_success"), fam("gangwatch_scrape_collector_duration_seconds")
        for c in COLLECTORS:
            success.add(1, collector=c)
            duration.add(0.001, collector=c)
        return [total, fam(G["nvml_devices"]).add(g), fam(G["pci_devices"]).add(g), fam(G["missing"]).add(0),
                fam(P["source"]).add(1, source="dcgm"), rate, port, conn, info,
                fam("gangwatch_build_info").add(1, version=__version__, component="agent"),
                success, duration, fam("gangwatch_scrape_collectors_failed").add(0)]

    def _facts(self, i: int) -> tuple[list[Family], str]:
        """Series of one node that never change (its GPUs' and HCAs' identities, its leaf switch), and their text."""
        got = self._node_facts.get(i)
        if got is not None:
            return got
        sim, g = self.sim, self.g
        info = Family(*GPU_SPECS["info"])
        for k in range(g):
            uuid = f"GPU-{(i * 7919 + k * 104729) & 0xffffffff:08x}-sim0-{i:04x}-{k:04x}-{sim.cfg.seed & 0xffff:012x}"
            info.add(1, gpu=k, uuid=uuid, name=C.GPU_MODEL, pci_bus_id=f"00000000:{0x18 + 16 * k:02X}:00.0",
                     mig_mode="disabled", driver_version=C.DRIVER_VERSION)
        hca = Family(IB + "info", *SPEC[IB + "info"])
        for k in range(g):
            hca.add(1, device=f"mlx5_{k}", board_id="MT_0000000838", firmware_version="28.39.1002", hca_type="MT4129",
                    node_guid=f"b83f:d203:00{i >> 8 & 0xff:02x}:{i & 0xff:02x}{k:02x}")
        node = Family("gangwatch_sim_node_info", *SPEC["gangwatch_sim_node_info"]).add(
            1, node=sim.cluster.names[i], leaf=sim.cluster.leaves[sim.cluster.leaf_of[i]])
        fams = [info, hca, node, *self._topology()]
        got = self._node_facts[i] = (fams, _text([(f.name, f.lines) for f in fams]))
        return got

    def _topology(self) -> list[Family]:
        """NVLink peers (both directions, as the GPU collector lists each GPU's) and NUMA affinity:
        the same on every node, so built once."""
        if self._topo is None:
            cl = self.sim.cluster
            peer, aff = Family(*GPU_SPECS["peer"]), Family(*GPU_SPECS["affinity"])
            for a, b in sorted(cl.nvlink_peers()):
                peer.add(1, gpu=a, peer_gpu=b, links=C.NVLINKS_PER_GPU, via="nvswitch")
                peer.add(1, gpu=b, peer_gpu=a, links=C.NVLINKS_PER_GPU, via="nvswitch")
            for k, numa in cl.gpu_numa().items():
                aff.add(1, gpu=k, numa_node=numa, cpus=cl.numa_cpus(numa))
            self._topo = [peer, aff]
        return self._topo

    # ------------------------------------------------------------------------------ per scrape

    def families(self, i: int) -> list[Family]:
        """Every family of the node's exposition (shared and fact families are reused: do not modify)."""
        return [*self._shared, *self._facts(i)[0], *(_fam(name, lines) for name, lines in self._changing(i))]

    def render(self, i: int) -> str:
        return "\n".join([self._shared_text, self._facts(i)[1], _text(self._changing(i))]) + "\n"

    def _changing(self, i: int) -> list[Series]:
        v = self.values()
        roce = self._roce(v, i) if self.roce else []
        return [*self._gpu(v, i), *self._infiniband(v, i), *roce, *self._lustre(v, i), *self._pressure(v, i), *self._jobs(v, i)]

    def _roce(self, v: _Step, i: int) -> list[Series]:
        """The roce collector's hw_counters and the ethtool collector's pause-frame, link-down and
        pause-storm rollups."""
        out: list[Series] = []
        node_sums: dict[str, int] = {}
        for (name, prefixes, node), values in zip(self.roce_rows, v.roce[i].tolist()):
            out.append((name, _lines(prefixes, values)))
            if node:
                node_sums[node] = node_sums.get(node, 0) + sum(values)
        out += [(node, [f"{node} {total}"]) for node, total in node_sums.items()]
        out.append((ETH_PAUSE, [f"{ETH_PAUSE} {int(v.pause[i])}"]))
        out.append((ETH_DOWN, [f"{ETH_DOWN} {int(v.nic_down[i])}"]))
        out.append((ETH_STORM, [f"{ETH_STORM} {int(v.storm[i])}"]))
        return out

    def _gpu(self, v: _Step, i: int) -> list[Series]:
        """The gpu and gpu_profiling collectors; a lost GPU shows only in gangwatch_gpu_lost (and its XIDs)."""
        g, G = self.g, _GPU
        tables = [v.g4[i].tolist(), v.g1[i].tolist(), [v.g2[i].tolist()], [v.g3[i].tolist()], v.gi[i].tolist()]
        lost, thr, job = tables[4][6:9]
        ok = [k for k in range(g) if not lost[k]]
        lines: dict[str, list[str]] = {}

        def put(name: str, prefixes: list[str], values: list) -> None:
            if len(ok) < g:
                prefixes, values = [prefixes[k] for k in ok], [values[k] for k in ok]
            got = _lines(prefixes, values)
            if name in lines:
                lines[name] += got
            else:
                lines[name] = got

        for rows, table in zip(self.gpu_rows, tables):
            for (name, prefixes), values in zip(rows, table):
                put(name, prefixes, values)
        for name, prefixes, t, row in self.gpu_again:
            put(name, prefixes, tables[t][row])
        for name, per_gpu in self.const_gpu.items():
            lines.setdefault(name, []).extend(line for k in ok for line in per_gpu[k])
        lines[G["lost"]] = _lines(self.lost_pre, lost)
        lines[G["throttle"]] = [line for k in ok for line in self.throttle[k][thr[k] + 1]]
        lines[G["procs"]] = [self.procs[k][job[k] >= 0] for k in ok]
        xids = self.sim.xids
        if xids:
            xid = [f'{G["xid"]}{format_labels({"gpu": k, "xid": x})} {n}'
                   for k in range(g) for x, n in sorted(xids.get((i, k), {}).items())]
            if xid:
                lines[G["xid"]] = xid
        # the node rollups, from the values just rendered, over the GPUs that gave them; the simulated
        # GPUs report row remapping and ECC (all zero), so those rollups are real zeros
        roll = [("node_gpus", len(ok)), ("node_lost", g - len(ok))]
        if ok:
            util, temp, power, mem = tables[0][0], tables[1][0], tables[2][0], tables[4][0]
            roll += [("node_util", math.fsum(util[k] for k in ok) / len(ok)), ("node_mem_used", sum(mem[k] for k in ok)),
                     ("node_power", round(math.fsum(power[k] for k in ok), 2)), ("node_max_temp", max(temp[k] for k in ok)),
                     ("node_remap_pending", 0), ("node_remap_failure", 0), ("node_ecc_uncorrected", 0)]
        return [(name, ls) for name, ls in lines.items()] + [(G[key], [f"{G[key]} {value}"]) for key, value in roll]

    def _infiniband(self, v: _Step, i: int) -> list[Series]:
        g = self.g
        table, shown = v.ib[i].tolist(), v.ib_shown[i].tolist()
        sym, down = v.keep_ib[i]
        keep = {"symbol_error": sym, "link_downed": down}
        out = []
        for key, (name, prefixes, node), values, seen in zip(IB_ROWS, self.ib_rows, table, shown):
            out.append((name, _kept(prefixes, seen, keep[key]) if key in keep else _lines(prefixes, seen)))
            if node:
                out.append((node, [f"{node} {sum(values)}"]))
        recoveries = IB + IB_COUNTERS["link_error_recovery"].metric  # as often as the link went down
        out.append((recoveries, _kept(self.ib_downed_again, shown[IB_ROWS.index("link_downed")], down)))
        if self.port_idle == math.inf:
            out += [(name, lines) for name, lines in self.ib_zero]
        else:
            out.append((IB_IDLE_SERIES, [f"{IB_IDLE_SERIES} {v.port_idle[i]}"]))
        up = table[-1]
        out.append((IB + "port_state_id", [self.ib_state[k][up[k]] for k in range(g)]))
        out.append((IB + "port_physical_state_id", [self.ib_phys[k][up[k]] for k in range(g)]))
        # every simulated rail was Active when the (virtual) agent started, and none is disabled
        out.append((IB + "node_ports_down", [f"{IB}node_ports_down {g - sum(up)}"]))
        return out

    def _lustre(self, v: _Step, i: int) -> list[Series]:
        (rb, wb, ro, wo, inflight), (lat, wait) = v.shown_i[i].tolist(), v.shown_f[i].tolist()
        p = self.ost_i
        r, w = v.keep_r[i], v.keep_w[i]
        mdt_ops = [int(v.node[i, 3]) // max(1, self.n_mdts)] * self.n_mdts
        ops = (_kept(p[2], ro, r) + _kept(p[3], wo, w) + _kept(self.ost_read_ops_again, ro, r)
               + _lines(self.mds_getattr, mdt_ops))
        wait_max = [self.wait_max_pre[0] + str(max(wait))] if wait else []
        if self.n_mdts:
            wait_max.append(self.wait_max_pre[1] + str(MDC_WAIT_SECONDS))
        # llite counts what the node's processes read and wrote through the mount: all of it went
        # to the OSTs (no client cache is simulated), so it is the sum over the OSCs; so is the
        # agent's targets_io_bytes here (its rate is; a real agent's value counts from its start)
        total = v.ost_i[i, :2].sum(axis=1).tolist()  # every OST's own value, shown or not
        return [("gangwatch_lustre_client_target_operations_total", ops),
                ("gangwatch_lustre_client_target_io_bytes_total", _kept(p[0], rb, r) + _kept(p[1], wb, w)),
                ("gangwatch_lustre_client_target_operation_latency_seconds_total", _kept(self.ost_f[0], lat, r)),
                (IDLE_SERIES, [f"{IDLE_SERIES} {v.idle[i]}"]),
                ("gangwatch_lustre_client_target_rpcs_in_flight", _lines(p[4], inflight)),
                ("gangwatch_lustre_client_import_rpc_wait_average_seconds", _lines(self.ost_f[1], wait) + self.mdc_wait),
                ("gangwatch_lustre_client_import_rpc_wait_max_seconds", wait_max),
                (TARGETS_IO, _lines(self.osc_sum_pre, total)),
                ("gangwatch_lustre_client_io_bytes_total", _lines(self.llite_pre, total))]

    def _pressure(self, v: _Step, i: int) -> list[Series]:
        io_some, io_full, cpu_some, _ = v.node[i].tolist()
        some, full = "gangwatch_pressure_waiting_seconds_total", "gangwatch_pressure_stalled_seconds_total"
        return [(some, [f'{some}{{resource="io"}} {io_some}', f'{some}{{resource="cpu"}} {cpu_some}']),
                (full, [f'{full}{{resource="io"}} {io_full}'])]

    def _job_pre(self, jid: int, job) -> dict:
        """The label prefixes of one job's series, rendered once per job."""
        got = self._jobs_pre.get(jid)
        if got is not None:
            return got
        if len(self._jobs_pre) > 2 * len(self.sim.running) + 256:  # forget ended jobs
            self._jobs_pre = {j: p for j, p in self._jobs_pre.items() if j in self.sim.running}
        f = _JF
        L = format_labels({"jobid": jid})[:-1]  # '{jobid="N"', closed after each family's own labels

        def one(fam: Family, extra: str = "") -> str:
            return f"{fam.name}{L}{extra}}} "

        got = {"info": f"{f.info.name}{L},cgroup_version=\"v2\",uid=\"{20000 + int(job.user[4:])}\"}} 1",
               "cpu": one(f.cpu), "user": one(f.cpu_mode, ',mode="user"'), "system": one(f.cpu_mode, ',mode="system"'),
               "cpus": one(f.cpus), "tasks": one(f.tasks), "usage": one(f.mem["usage"]), "peak": one(f.mem["peak"]),
               "gpus": one(f.gpus), "gpu_util": one(f.gpu_util),
               "gpu": [f"{f.gpu.name}{L},gpu=\"{k}\",source=\"mapping\"}} 1" for k in range(self.g)],
               "gpu_mem": [one(f.gpu_mem, f',gpu="{k}"') for k in range(self.g)]}
        for key in ("rbytes", "wbytes", "rios", "wios"):
            got[key] = one(f.io[key], ',device="nvme0n1"')
        for res, kind in self.sim.job_psi:
            got[res, kind] = one(f.psi[kind], f',resource="{res}"')
        self._jobs_pre[jid] = got
        return got

    def _jobs(self, v: _Step, i: int) -> list[Series]:
        """The jobs collector on a cgroup v2 node: per job its GPUs, CPU, memory, io.stat of the
        local NVMe and PSI; a job's figures on the node are the sums over its GPUs there (engine);
        its GPU utilisation the mean over its GPUs there that answered NVML."""
        s = self.sim
        gi = v.gi[i].tolist()
        mem, lost, slots = gi[0], gi[6], gi[8]
        by_job: dict[int, list[int]] = {}
        for k, slot in enumerate(slots):
            if slot >= 0:
                by_job.setdefault(int(s._job_id_of_slot[slot]), []).append(k)
        if not by_job:
            return []
        util = v.g4[i, 0].tolist()
        cpu = s.job_cpu[i].tolist()
        io = {key: a[i].tolist() for key, a in s.job_io.items()}
        psi = {key: a[i].tolist() for key, a in s.job_psi.items()}
        out: dict[str, list[str]] = {}

        def put(name: str, line: str) -> None:
            got = out.get(name)
            if got is None:
                out[name] = [line]
            else:
                got.append(line)

        f = _JF
        for jid, gpus in sorted(by_job.items()):
            job = s.running.get(jid)
            if job is None:
                continue
            p = self._job_pre(jid, job)
            put(f.info.name, p["info"])
            used = sum(cpu[k] for k in gpus)
            put(f.cpu.name, p["cpu"] + str(round(used, 2)))
            put(f.cpu_mode.name, p["user"] + str(round(0.92 * used, 2)))
            put(f.cpu_mode.name, p["system"] + str(round(0.08 * used, 2)))
            put(f.cpus.name, p["cpus"] + str(job.cpus_per_node))
            put(f.tasks.name, p["tasks"] + str(8 + 6 * len(gpus)))  # a rank per GPU, data-loader workers, helpers
            put(f.mem["usage"].name, p["usage"] + str(int(len(gpus) * 48 * 2**30 * s.j_mem[job.slot])))
            put(f.mem["peak"].name, p["peak"] + str(int(len(gpus) * 52 * 2**30 * s.j_mem[job.slot])))
            for key, per_op in (("rbytes", "rios"), ("wbytes", "wios")):
                value = int(sum(io[key][k] for k in gpus))
                put(f.io[key].name, p[key] + str(value))
                put(f.io[per_op].name, p[per_op] + str(value // 131072))  # 128 KiB requests
            for (res, kind), arr in psi.items():
                put(f.psi[kind].name, p[res, kind] + str(round(sum(arr[k] for k in gpus), 3)))
            answered = [k for k in gpus if not lost[k]]
            for k in gpus:
                put(f.gpu.name, p["gpu"][k])
            for k in answered:
                put(f.gpu_mem.name, p["gpu_mem"][k] + str(mem[k]))
            put(f.gpus.name, p["gpus"] + str(len(gpus)))
            if answered:
                put(f.gpu_util.name, p["gpu_util"] + str(math.fsum(util[k] for k in answered) / len(answered)))
        return [(name, lines) for name, lines in out.items()]
