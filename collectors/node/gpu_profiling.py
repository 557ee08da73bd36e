"""GPU profiling signals: what the SMs, tensor cores, DRAM and links actually did between two scrapes.

Why: NVML's "utilisation" says only that *a* kernel was resident. A hung NCCL collective keeps the
GPU 100 % "busy" while its SMs sit idle; SM activity, tensor activity and link bytes tell the two apart.

Sources, in order of preference:
1. a DCGM host engine at 127.0.0.1:5555, when its Python bindings (`pydcgm`, `dcgm_structs`,
   `dcgm_fields`) are importable: its profiling fields DCGM_FI_PROF_* (GR_ENGINE_ACTIVE, SM_ACTIVE,
   SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, PIPE_TENSOR_HMMA_ACTIVE, DRAM_ACTIVE, PCIE/NVLINK TX/RX bytes).
   DCGM owns the profiling counters while it runs, so NVML GPM would be refused then anyway;
2. otherwise NVML GPM (Hopper and newer, driver >= 520): two GPM samples per GPU are kept, and each
   scrape reports the metrics over the interval since the previous scrape (the first scrape, and the
   first after any sampling failure, reports none).
Privileges: none (GPM and DCGM profiling run as an ordinary user on datacenter GPUs).

Metrics (labels `gpu`, plus `pipe` or `direction`): `gangwatch_gpu_prof_*` below in SPECS, and
`gangwatch_gpu_prof_source_info{source}`.

Failure modes: no NVML/driver -> NoData; a GPU without GPM (pre-Hopper, MIG, vGPU) is left out
quietly; a failing GPM call drops that GPU for this scrape and counts
`gangwatch_gpu_prof_nvml_errors_total{call,error}`; no GPU with GPM and no DCGM -> NoData.
DCGM problems (import, connection, watch) fall back to GPM and are retried every 5 minutes.
"""

from __future__ import annotations

import importlib
import logging
import socket
from typing import Any

from ..exposition import COUNTER, GAUGE, Family
from ..registry import Collector, Context, NoData, register
from .gpu import GpuLost, Guard, NvmlSession, new_families, num

log = logging.getLogger(__name__)

MIB = 1 << 20
DCGM_ADDRESS = ("127.0.0.1", 5555)
DCGM_RETRY_SECONDS = 300.0
DCGM_BLANK = 1e300  # DCGM marks missing values with huge sentinels (DCGM_FP64_BLANK = 140737488355328.0 * 1e285)

SPECS: dict[str, tuple[str, str, str]] = {
    "source": ("gangwatch_gpu_prof_source_info", GAUGE,
               "A metric with value 1 naming where the profiling metrics come from (gpm or dcgm)."),
    "gr": ("gangwatch_gpu_prof_graphics_engine_active_ratio", GAUGE,
           "Fraction of the interval (0-1) during which the graphics/compute engine was active."),
    "sm": ("gangwatch_gpu_prof_sm_active_ratio", GAUGE,
           "Fraction of SM cycles (0-1) with at least one warp resident, averaged over all SMs."),
    "occ": ("gangwatch_gpu_prof_sm_occupancy_ratio", GAUGE,
            "Resident warps as a fraction (0-1) of the SMs' maximum, averaged over the interval."),
    "tensor": ("gangwatch_gpu_prof_tensor_active_ratio", GAUGE,
               "Fraction of cycles (0-1) a tensor pipe was active: pipe=\"any\" for any tensor pipe, \"hmma\" for FP16/BF16 matrix ops."),
    "dram": ("gangwatch_gpu_prof_dram_active_ratio", GAUGE,
             "Fraction (0-1) of the theoretical DRAM bandwidth used over the interval."),
    "nvlink": ("gangwatch_gpu_prof_nvlink_bytes_per_second", GAUGE,
               "NVLink traffic over the interval, all links together, by direction (tx, rx), in bytes per second."),
    "pcie": ("gangwatch_gpu_prof_pcie_bytes_per_second", GAUGE,
             "PCIe traffic over the interval, by direction (tx, rx), in bytes per second."),
    # Its own name: the gpu collector's counter may carry the same (call, error) pairs, and one
    # exposition must not hold the same series twice.
    "errors": ("gangwatch_gpu_prof_nvml_errors_total", COUNTER,
               "NVML calls of the profiling collector that failed with an error other than NotSupported, "
               "by call and error, since the agent started."),
}

# NVML GPM metric id -> (family key, extra labels, multiplier, divisor) to base units; dividing percent
# by 100 (not multiplying by 0.01) keeps 35 % as 0.35 exactly.
GPM_METRICS: dict[int, tuple[str, tuple, float, float]] = {
    1: ("gr", (), 1, 100),                       # NVML_GPM_METRIC_GRAPHICS_UTIL, percent
    2: ("sm", (), 1, 100),                       # SM_UTIL
    3: ("occ", (), 1, 100),                      # SM_OCCUPANCY
    5: ("tensor", (("pipe", "any"),), 1, 100),   # ANY_TENSOR_UTIL
    7: ("tensor", (("pipe", "hmma"),), 1, 100),  # HMMA_TENSOR_UTIL
    10: ("dram", (), 1, 100),                    # DRAM_BW_UTIL
    20: ("pcie", (("direction", "tx"),), MIB, 1),  # PCIE_TX_PER_SEC, MiB/s
    21: ("pcie", (("direction", "rx"),), MIB, 1),  # PCIE_RX_PER_SEC
    60: ("nvlink", (("direction", "rx"),), MIB, 1),  # NVLINK_TOTAL_RX_PER_SEC
    61: ("nvlink", (("direction", "tx"),), MIB, 1),  # NVLINK_TOTAL_TX_PER_SEC
}
GPM_METRICS_GET_VERSION = 1

# DCGM field id -> (family key, extra labels, multiplier, divisor). PROF ratios are already 0-1, bytes already per second.
DCGM_FIELDS: dict[int, tuple[str, tuple, float, float]] = {
    1001: ("gr", (), 1, 1),                        # DCGM_FI_PROF_GR_ENGINE_ACTIVE
    1002: ("sm", (), 1, 1),                        # SM_ACTIVE
    1003: ("occ", (), 1, 1),                       # SM_OCCUPANCY
    1004: ("tensor", (("pipe", "any"),), 1, 1),    # PIPE_TENSOR_ACTIVE
    1014: ("tensor", (("pipe", "hmma"),), 1, 1),   # PIPE_TENSOR_HMMA_ACTIVE
    1005: ("dram", (), 1, 1),                      # DRAM_ACTIVE
    1009: ("pcie", (("direction", "tx"),), 1, 1),  # PCIE_TX_BYTES (per second)
    1010: ("pcie", (("direction", "rx"),), 1, 1),
    1011: ("nvlink", (("direction", "tx"),), 1, 1),
    1012: ("nvlink", (("direction", "rx"),), 1, 1),
}


class _GpmState:
    """Two GPM sample buffers per GPU; `prev` holds the last scrape's sample when `primed`."""

    __slots__ = ("index", "handle", "prev", "cur", "primed")

    def __init__(self, index: int, handle: Any, prev: Any, cur: Any):
        self.index, self.handle, self.prev, self.cur, self.primed = index, handle, prev, cur, False


class DcgmSource:
    """DCGM profiling fields for all GPUs, through the host engine's Python bindings."""

    def __init__(self, modules: dict[str, Any] | None = None, address: tuple[str, int] = DCGM_ADDRESS):
        self.address = address
        self.modules = modules
        self.handle = self.group = self.field_group = None

    def open(self) -> bool:
        mods = self.modules
        if mods is None:
            try:
                mods = {m: importlib.import_module(m) for m in ("pydcgm", "dcgm_structs", "dcgm_fields")}
            except Exception:
                return False
            # Probe the port first: the bindings' own connect can wait for seconds.
            try:
                socket.create_connection(self.address, timeout=0.2).close()
            except OSError:
                return False
        pydcgm, structs = mods["pydcgm"], mods["dcgm_structs"]
        try:
            self.handle = pydcgm.DcgmHandle(ipAddress=f"{self.address[0]}:{self.address[1]}",
                                            opMode=structs.DCGM_OPERATION_MODE_AUTO)
            self.group = self.handle.GetSystem().GetDefaultGroup()
            self.field_group = pydcgm.DcgmFieldGroup(self.handle, name="gangwatch_prof",
                                                     fieldIds=list(DCGM_FIELDS))
            # 1 s updates, keep 10 s: enough for one scrape interval's latest value.
            self.group.samples.WatchFields(self.field_group, 1_000_000, 10.0, 0)
        except Exception as exc:
            log.info("DCGM host engine present but unusable, using NVML GPM: %s", exc)
            self.close()
            return False
        return True

    def read(self, fams: dict[str, Family]) -> int:
        """Adds the latest values; returns how many it added. Raises when DCGM fails."""
        values = self.group.samples.GetLatest(self.field_group).values
        added = 0
        for gpu_id, fields in values.items():
            for field_id, series in fields.items():
                spec = DCGM_FIELDS.get(field_id)
                samples = getattr(series, "values", None) or []
                if spec is None or not samples:
                    continue
                last = samples[-1]
                value = num(getattr(last, "value", None))
                if getattr(last, "isBlank", False) or value is None or abs(value) >= DCGM_BLANK:
                    continue
                key, extra, mul, div = spec
                fams[key].add(value * mul / div, dict((("gpu", gpu_id),) + extra))
                added += 1
        return added

    def close(self) -> None:
        for obj, method in ((self.field_group, "Delete"), (self.handle, "Shutdown")):
            try:
                if obj is not None:
                    getattr(obj, method)()
            except Exception:
                pass
        self.handle = self.group = self.field_group = None


def _metrics_get(nvml: Any, sample1: Any, sample2: Any) -> list[tuple[Any, Any, Any]]:
    """nvmlGpmMetricsGet over two samples -> [(metric id, nvml return, value)]."""
    ids = list(GPM_METRICS)
    mg = nvml.c_nvmlGpmMetricsGet_t()
    mg.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", GPM_METRICS_GET_VERSION)
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = sample1, sample2
    for i, mid in enumerate(ids):
        mg.metrics[i].metricId = mid
    result = nvml.nvmlGpmMetricsGet(mg)
    return [(m.metricId, m.nvmlReturn, m.value) for m in result.metrics[:len(ids)]]


@register
class GpuProfilingCollector(Collector):
    """SM/tensor/DRAM activity and NVLink/PCIe bytes per GPU from NVML GPM (Hopper+) or DCGM."""

    name = "gpuprof"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.session = NvmlSession(ctx.nvml, ctx.clock)
        self.errors: dict[tuple[str, str], int] = {}
        self.states: list[_GpmState] | None = None
        self.dcgm: DcgmSource | None = None
        self.dcgm_next_try = 0.0
        self.dcgm_modules = ctx.option("dcgm_modules")  # tests inject fake bindings here

    def collect(self):
        fams = new_families(SPECS)
        if self._from_dcgm(fams):
            return list(fams.values())
        nvml = self.session.acquire()
        call = Guard(nvml, self.errors)
        if self.states is None:
            self.states = self._discover(call)
        if not self.states:
            raise NoData("no GPU with GPM (needs Hopper or newer and driver >= 520)")
        for st in self.states:
            self._sample(nvml, call, st, fams)
        fams["source"].add(1, source="gpm")
        for (c, e), n in sorted(self.errors.items()):
            fams["errors"].add(n, call=c, error=e)
        return list(fams.values())

    def _from_dcgm(self, fams: dict[str, Family]) -> bool:
        now = self.ctx.clock()
        if self.dcgm is None and now >= self.dcgm_next_try:
            self.dcgm_next_try = now + DCGM_RETRY_SECONDS
            src = DcgmSource(self.dcgm_modules)
            if src.open():
                self.dcgm = src
        if self.dcgm is None:
            return False
        try:
            self.dcgm.read(fams)
        except Exception as exc:
            log.warning("DCGM read failed, falling back to NVML GPM: %s", exc)
            self.dcgm.close()
            self.dcgm = None
            for f in fams.values():
                f.lines.clear()
            return False
        fams["source"].add(1, source="dcgm")
        return True

    def _discover(self, call: Guard) -> list[_GpmState]:
        try:
            count = call("nvmlDeviceGetCount", post=num) or 0
        except GpuLost:
            count = 0
        states = []
        for i in range(int(count)):
            try:
                h = call("nvmlDeviceGetHandleByIndex", i)
                if h is None or not call("nvmlGpmQueryDeviceSupport", h, post=lambda s: bool(s.isSupportedDevice)):
                    continue
                prev, cur = call("nvmlGpmSampleAlloc"), call("nvmlGpmSampleAlloc")
            except GpuLost:
                continue
            if prev is not None and cur is not None:
                states.append(_GpmState(i, h, prev, cur))
        return states

    @staticmethod
    def _sample(nvml: Any, call: Guard, st: _GpmState, fams: dict[str, Family]) -> None:
        try:
            ok = call("nvmlGpmSampleGet", st.handle, st.cur, post=lambda _: True)
        except GpuLost:
            ok = None
        if not ok:
            st.primed = False
            return
        if st.primed:
            got = call.run("nvmlGpmMetricsGet", lambda: _metrics_get(nvml, st.prev, st.cur))
            for mid, ret, value in got or ():
                spec = GPM_METRICS.get(mid)
                v = num(value)
                if spec is None or ret != 0 or v is None:
                    continue
                key, extra, mul, div = spec
                fams[key].add(v * mul / div, dict((("gpu", st.index),) + extra))
        # The sample just taken becomes the start of the next interval.
        st.prev, st.cur, st.primed = st.cur, st.prev, True

    def close(self) -> None:
        if self.dcgm is not None:
            self.dcgm.close()
        if self.states and self.session.ready:
            for st in self.states:
                for s in (st.prev, st.cur):
                    try:
                        self.session.nvml.nvmlGpmSampleFree(s)
                    except Exception:
                        pass
        self.states = None
        self.session.shutdown()
