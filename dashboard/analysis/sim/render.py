"""One virtual node's `/metrics`, exactly as `gangwatch agent` names and labels its series.

Names, types and help texts are taken from the agent's own collectors where they are data (the GPU
and GPU-profiling SPECS, the InfiniBand counter table, the Lustre stats families, the jobs
collector's families), so a rename there reaches the simulator. Collectors rendered: gpu,
gpu_profiling (as if DCGM were running), infiniband (one HCA `mlx5_<k>` per GPU, port 1),
lustre_client (filesystem `lustre`, every OST and MDT, type osc/mdc), pressure, jobs, and the
scrape's own success/duration series. Not simulated: cpu, memory, diskstats, netdev, filesystem,
GPFS (a reader of those gets no series, which the agent also allows: a collector with no data).

The label strings are rendered once per node; a scrape formats only the values (about 0.5 ms for
a node with 8 GPUs, 8 rails and 16 OSTs).
"""

from __future__ import annotations

import numpy as np

from collectors import __version__
from collectors.exposition import COUNTER, GAUGE, Family, encode, format_labels
from collectors.lustre_common import Accumulator, StatsFamilies
from collectors.node.gpu import SPECS as GPU_SPECS
from collectors.node.gpu_profiling import SPECS as PROF_SPECS
from collectors.node.infiniband import COUNTERS as IB_COUNTERS, PREFIX as IB
from collectors.node.jobs import _Families as JobFamilies

from . import cluster as C
from .engine import THROTTLE_REASONS

COLLECTORS = ("gpu", "gpu_profiling", "infiniband", "jobs", "lustre_client", "pressure")
ECC = (("corrected", "volatile"), ("corrected", "aggregate"), ("uncorrected", "volatile"), ("uncorrected", "aggregate"))
IB_DATA = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait",
           "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards")
_lustre = Accumulator()
_target_stats = StatsFamilies(_lustre, "gangwatch_lustre_client_target", "the client's OSC/MDC for the target")
LUSTRE_HELP = {name: fam.help for name, fam in _lustre.families.items()}


def _fam(spec: tuple[str, str, str]) -> Family:
    name, kind, help_ = spec
    return Family(name, kind, help_)


def _r(a: np.ndarray, digits: int = 4) -> list:
    return np.round(a.astype(np.float64), digits).tolist()


class NodeRenderer:
    """Renders any node of one simulation; holds per-node label strings, built on first use."""

    def __init__(self, sim):
        self.sim = sim
        self.g = sim.g
        cl = sim.cluster
        self.gpu_l = [format_labels({"gpu": k}) for k in range(self.g)]
        self.gpu_x = {key: [format_labels({"gpu": k, **dict(key)}) for k in range(self.g)]
                      for key in ([(("sensor", "gpu"),), (("sensor", "memory"),)]
                                  + [(("clock", c),) for c in ("graphics", "sm", "memory")]
                                  + [(("reason", r),) for r in THROTTLE_REASONS]
                                  + [(("error", e), ("counter", c)) for e, c in ECC]
                                  + [(("direction", d),) for d in ("tx", "rx")]
                                  + [(("pipe", p),) for p in ("any", "hmma")])}
        self.rail_l = [format_labels({"device": f"mlx5_{k}", "port": "1"}) for k in range(self.g)]
        self.rail_info = [format_labels({"device": f"mlx5_{k}", "port": "1", "link_layer": "InfiniBand", "width": "4X",
                                         "speed": "NDR", "lid": str(100 + k)}) for k in range(self.g)]
        targets = [(t, "osc") for t in cl.osts] + [(t, "mdc") for t in cl.mdts]
        self.tgt = {(t, kind, op): format_labels({"fs": C.FS_NAME, "target": t, "type": kind, "operation": op})
                    for t, kind in targets for op in ("read", "write", "read_bytes", "write_bytes", "ost_read", "mds_getattr")}
        self.imp = [format_labels({"fs": C.FS_NAME, "target": t, "type": kind}) for t, kind in targets]
        self._static: dict[int, list[Family]] = {}

    def _static_families(self, i: int) -> list[Family]:
        """Series that never change for a node: GPU, HCA and import facts."""
        got = self._static.get(i)
        if got is not None:
            return got
        sim, g = self.sim, self.g
        name = sim.cluster.names[i]
        info = _fam(GPU_SPECS["info"])
        for k in range(g):
            uuid = f"GPU-{(i * 7919 + k * 104729) & 0xffffffff:08x}-sim0-{i:04x}-{k:04x}-{sim.cfg.seed & 0xffff:012x}"
            info.add(1, gpu=k, uuid=uuid, name=C.GPU_MODEL, pci_bus_id=f"00000000:{0x18 + 16 * k:02X}:00.0",
                     mig_mode="disabled", driver_version=C.DRIVER_VERSION)
        total = _fam(GPU_SPECS["mem_total"])
        for lbl in self.gpu_l:
            total.add_rendered(lbl, C.GPU_MEMORY_BYTES)
        counts = [_fam(GPU_SPECS["nvml_devices"]).add(g), _fam(GPU_SPECS["pci_devices"]).add(g),
                  _fam(GPU_SPECS["missing"]).add(0)]
        src = _fam(PROF_SPECS["source"]).add(1, source="dcgm")
        hca = Family(IB + "info", GAUGE, "Facts about an RDMA device (board, firmware, HCA model, node GUID); value 1.")
        rate = Family(IB + "port_rate_bytes_per_second", GAUGE, "Data rate the port's link trained at, in bytes per "
                      "second (sysfs rate in Gb/s divided by 8).")
        pinfo = Family(IB + "port_info", GAUGE, "Facts about a port (link layer, active width and speed, LID); value 1.")
        for k in range(g):
            hca.add(1, device=f"mlx5_{k}", board_id="MT_0000000838", firmware_version="28.39.1002", hca_type="MT4129",
                    node_guid=f"b83f:d203:00{i >> 8 & 0xff:02x}:{i & 0xff:02x}{k:02x}")
            rate.add_rendered(self.rail_l[k], C.IB_RATE_BYTES)
            pinfo.add_rendered(self.rail_info[k], 1)
        conn = Family("gangwatch_lustre_client_import_connected", GAUGE,
                      "Whether the client's import of the target is in state FULL (1) or not (0).")
        for lbl in self.imp:
            conn.add_rendered(lbl, 1)
        sim_info = Family("gangwatch_sim_node_info", GAUGE, "This node is SIMULATED by `gangwatch demo`; its leaf "
                          "switch; value 1.").add(1, node=name, leaf=sim.cluster.leaves[sim.cluster.leaf_of[i]])
        build = Family("gangwatch_build_info", GAUGE, "A metric with value 1 labelled with gangwatch's version and "
                       "component.").add(1, version=__version__, component="agent")
        got = self._static[i] = [info, total, *counts, src, hca, rate, pinfo, conn, sim_info, build]
        return got

    def families(self, i: int) -> list[Family]:
        sim, g = self.sim, self.g
        fams = list(self._static_families(i))
        lost = sim.gpu_lost[i].tolist()
        ok = [k for k in range(g) if not lost[k]]
        F = {key: _fam(spec) for key, spec in GPU_SPECS.items()
             if key in ("lost", "util", "mem_util", "mem_used", "mem_free", "power", "energy", "temp", "clock",
                        "throttle", "ecc", "pcie_bps", "pcie_replay", "procs", "pstate", "xid")}
        P = {key: _fam(spec) for key, spec in PROF_SPECS.items() if key in ("gr", "sm", "occ", "tensor", "dram", "nvlink", "pcie")}
        util, sm, tensor = _r(sim.util[i]), _r(sim.sm[i]), _r(sim.tensor[i])
        power, temp, clock = _r(sim.power[i], 2), _r(sim.temp[i], 1), sim.clock[i].tolist()
        mem, energy = sim.mem_used[i].tolist(), _r(sim.energy[i], 3)
        nvl, pcie = _r(sim.nvlink[i], 0), _r(sim.pcie_rx[i], 0)
        thr = sim.throttle[i].tolist()
        busy = (sim.gpu_job[i] >= 0).tolist()
        x = self.gpu_x
        for k in range(g):
            F["lost"].add_rendered(self.gpu_l[k], 1 if lost[k] else 0)
        for k in ok:
            L = self.gpu_l[k]
            F["util"].add_rendered(L, util[k])
            F["mem_util"].add_rendered(L, round(sm[k] * 0.5, 4))
            F["mem_used"].add_rendered(L, int(mem[k]))
            F["mem_free"].add_rendered(L, C.GPU_MEMORY_BYTES - int(mem[k]))
            F["power"].add_rendered(L, power[k])
            F["energy"].add_rendered(L, energy[k])
            F["temp"].add_rendered(x[(("sensor", "gpu"),)][k], temp[k])
            F["temp"].add_rendered(x[(("sensor", "memory"),)][k], round(temp[k] + 6.0, 1))
            F["clock"].add_rendered(x[(("clock", "sm"),)][k], int(clock[k]))
            F["clock"].add_rendered(x[(("clock", "graphics"),)][k], int(clock[k]))
            F["clock"].add_rendered(x[(("clock", "memory"),)][k], int(C.MEM_CLOCK_HZ))
            for r, reason in enumerate(THROTTLE_REASONS):
                F["throttle"].add_rendered(x[(("reason", reason),)][k], 1 if thr[k] == r else 0)
            for e, c in ECC:
                F["ecc"].add_rendered(x[(("error", e), ("counter", c))][k], 0)
            F["pcie_bps"].add_rendered(x[(("direction", "rx"),)][k], pcie[k])
            F["pcie_bps"].add_rendered(x[(("direction", "tx"),)][k], round(pcie[k] * 0.05))
            F["pcie_replay"].add_rendered(L, 0)
            F["procs"].add_rendered(L, 1 if busy[k] else 0)
            F["pstate"].add_rendered(L, 0)
            P["gr"].add_rendered(L, util[k])
            P["sm"].add_rendered(L, sm[k])
            P["occ"].add_rendered(L, round(sm[k] * 0.4, 4))
            P["tensor"].add_rendered(x[(("pipe", "any"),)][k], tensor[k])
            P["tensor"].add_rendered(x[(("pipe", "hmma"),)][k], round(tensor[k] * 0.9, 4))
            P["dram"].add_rendered(L, round(sm[k] * 0.55, 4))
            P["nvlink"].add_rendered(x[(("direction", "tx"),)][k], nvl[k])
            P["nvlink"].add_rendered(x[(("direction", "rx"),)][k], nvl[k])
            P["pcie"].add_rendered(x[(("direction", "rx"),)][k], pcie[k])
            P["pcie"].add_rendered(x[(("direction", "tx"),)][k], round(pcie[k] * 0.05))
        for k in range(g):
            for xid, count in sorted(sim.xids.get((i, k), {}).items()):
                F["xid"].add(count, gpu=k, xid=xid)
        fams += F.values()
        fams += P.values()
        fams += self._infiniband(i)
        fams += self._lustre(i)
        fams += self._pressure(i)
        fams += self._jobs(i)
        success = Family("gangwatch_scrape_collector_success", GAUGE, "Whether the collector succeeded in this scrape (1) or failed or timed out (0).")
        duration = Family("gangwatch_scrape_collector_duration_seconds", GAUGE, "Seconds the collector took in this scrape.")
        for c in COLLECTORS:
            success.add(1, collector=c)
            duration.add(0.001, collector=c)
        return fams + [success, duration]

    def _infiniband(self, i: int) -> list[Family]:
        s = self.sim
        values = {"port_xmit_data": s.ib_tx[i], "port_rcv_data": s.ib_rx[i], "port_xmit_packets": s.ib_tx[i] / 4096,
                  "port_rcv_packets": s.ib_rx[i] / 4096, "port_xmit_wait": s.ib_wait[i], "symbol_error": s.ib_symerr[i],
                  "link_downed": s.ib_downed[i], "link_error_recovery": s.ib_downed[i]}
        out = []
        for key in IB_DATA:
            spec = IB_COUNTERS[key]
            fam = Family(IB + spec.metric, COUNTER, spec.help)
            vals = np.floor(values[key]).astype(np.int64).tolist() if key in values else [0] * self.g
            for k in range(self.g):
                fam.add_rendered(self.rail_l[k], vals[k])
            out.append(fam)
        up = s.ib_up[i].tolist()
        state = Family(IB + "port_state_id", GAUGE, "Logical state of the port (0: no change, 1: down, 2: init, 3: armed, "
                       "4: active, 5: active defer).")
        phys = Family(IB + "port_physical_state_id", GAUGE, "Physical state of the port (1: sleep, 2: polling, 3: disabled, "
                      "4: port configuration training, 5: link up, 6: link error recovery, 7: phy test).")
        for k in range(self.g):
            state.add_rendered(self.rail_l[k], 4 if up[k] else 1)
            phys.add_rendered(self.rail_l[k], 5 if up[k] else 2)
        return out + [state, phys]

    def _lustre(self, i: int) -> list[Family]:
        s, cl = self.sim, self.sim.cluster
        ops = Family("gangwatch_lustre_client_target_operations_total", COUNTER,
                     LUSTRE_HELP["gangwatch_lustre_client_target_operations_total"])
        io = Family("gangwatch_lustre_client_target_io_bytes_total", COUNTER,
                    LUSTRE_HELP["gangwatch_lustre_client_target_io_bytes_total"])
        lat = Family("gangwatch_lustre_client_target_operation_latency_seconds_total", COUNTER,
                     LUSTRE_HELP["gangwatch_lustre_client_target_operation_latency_seconds_total"])
        inflight = Family("gangwatch_lustre_client_target_rpcs_in_flight", GAUGE,
                          "RPCs the client has in flight to the target now (rpc_stats).")
        rb, wb = np.floor(s.ost_read[i]).astype(np.int64).tolist(), np.floor(s.ost_write[i]).astype(np.int64).tolist()
        ro, wo = np.floor(s.ost_read_ops[i]).astype(np.int64).tolist(), np.floor(s.ost_write_ops[i]).astype(np.int64).tolist()
        wait = Family("gangwatch_lustre_client_import_rpc_wait_average_seconds", GAUGE,
                      "Average seconds an RPC to the target waited for its reply (import avg_waittime).")
        rl, fl, wa = _r(s.ost_read_lat[i], 6), _r(s.ost_inflight[i], 0), _r(s.ost_wait_avg[i], 6)
        t = self.tgt
        for o, name in enumerate(cl.osts):
            io.add_rendered(t[name, "osc", "read"], rb[o])
            io.add_rendered(t[name, "osc", "write"], wb[o])
            ops.add_rendered(t[name, "osc", "read_bytes"], ro[o])
            ops.add_rendered(t[name, "osc", "write_bytes"], wo[o])
            ops.add_rendered(t[name, "osc", "ost_read"], ro[o])
            lat.add_rendered(t[name, "osc", "ost_read"], rl[o])
            inflight.add_rendered(t[name, "osc", "read"], int(fl[o]))
            wait.add_rendered(self.imp[o], wa[o])
        mdt_ops = int(s.mdt_ops[i])
        for m, name in enumerate(cl.mdts):
            ops.add_rendered(t[name, "mdc", "mds_getattr"], mdt_ops // len(cl.mdts))
        return [ops, io, lat, inflight, wait]

    def _pressure(self, i: int) -> list[Family]:
        s = self.sim
        some = Family("gangwatch_pressure_waiting_seconds_total", COUNTER,
                      "Total seconds in which at least one task was stalled on the resource (PSI some).")
        full = Family("gangwatch_pressure_stalled_seconds_total", COUNTER,
                      "Total seconds in which all non-idle tasks were stalled on the resource (PSI full).")
        some.add(round(float(s.psi_io_some[i]), 3), resource="io")
        full.add(round(float(s.psi_io_full[i]), 3), resource="io")
        some.add(round(float(s.psi_cpu_some[i]), 3), resource="cpu")
        return [some, full]

    def _jobs(self, i: int) -> list[Family]:
        """The jobs collector on a cgroup v2 node: per job its GPUs, CPU, memory, io.stat of the
        local NVMe and PSI; a job's figures on the node are the sums over its GPUs there (engine)."""
        s = self.sim
        f = JobFamilies()
        slots = s.gpu_job[i].tolist()
        by_job: dict[int, list[int]] = {}
        for k, slot in enumerate(slots):
            if slot >= 0:
                by_job.setdefault(int(s._job_id_of_slot[slot]), []).append(k)
        if not by_job:
            return []
        mem = s.mem_used[i].tolist()
        cpu = s.job_cpu[i].tolist()
        io = {key: a[i].tolist() for key, a in s.job_io.items()}
        psi = {key: a[i].tolist() for key, a in s.job_psi.items()}
        for jid, gpus in sorted(by_job.items()):
            job = s.running.get(jid)
            if job is None:
                continue
            uid = 20000 + int(job.user[4:])
            f.info.add(1, jobid=jid, cgroup_version="v2", uid=uid)
            used = sum(cpu[k] for k in gpus)
            f.cpu.add(round(used, 2), jobid=jid)
            f.cpu_mode.add(round(0.92 * used, 2), jobid=jid, mode="user")
            f.cpu_mode.add(round(0.08 * used, 2), jobid=jid, mode="system")
            f.cpus.add(job.cpus_per_node, jobid=jid)
            f.tasks.add(8 + 6 * len(gpus), jobid=jid)  # a rank per GPU, data-loader workers, helpers
            f.mem["usage"].add(int(len(gpus) * 48 * 2**30 * s.j_mem[job.slot]), jobid=jid)
            f.mem["peak"].add(int(len(gpus) * 52 * 2**30 * s.j_mem[job.slot]), jobid=jid)
            for key, per_op in (("rbytes", "rios"), ("wbytes", "wios")):
                value = int(sum(io[key][k] for k in gpus))
                f.io[key].add(value, jobid=jid, device="nvme0n1")
                f.io[per_op].add(value // 131072, jobid=jid, device="nvme0n1")  # 128 KiB requests
            for (res, kind), arr in psi.items():
                f.psi[kind].add(round(sum(arr[k] for k in gpus), 3), jobid=jid, resource=res)
            for k in gpus:
                f.gpu.add(1, jobid=jid, gpu=k, source="mapping")
                if not s.gpu_lost[i, k]:
                    f.gpu_mem.add(int(mem[k]), jobid=jid, gpu=k)
        return [fam for fam in f.all() if len(fam)]

    def render(self, i: int) -> str:
        return encode(self.families(i))
