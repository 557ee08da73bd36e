"""A fake `pynvml` that replays an 8-GPU H100 (or A100) node and injects NVML errors.

Identity and load (UUIDs, PCI bus ids, model, driver, temperature, power, utilisation) come from a
real dcgm-exporter scrape of an 8x H100 80GB HBM3 node, read in place from
`../shared/fixtures/exporters-real/dcgm/`; the other values use the ranges nvidia-smi reports for
the same model (`exporters-real/nvidia_gpu_exporter/*h100-80gb-hbm3*`: 85520809984 bytes of memory,
345 MHz idle SM clock, 2619 MHz memory clock, 700 W limit, 48 C memory temperature).

The fake mirrors pynvml's surface: every `nvml*` method has the name and parameter names of the
real function (tests check this against the installed pynvml), errors are pynvml's own `NVMLError`
subclasses, and the constants are pynvml's. Injection:
- `fail(call, code, gpu=None)`: that call raises `NVMLError(code)` (for one GPU, or all);
- `lose(gpu)`: every call on that GPU raises GpuIsLost;
- `init_error = code`: nvmlInit raises;
- `hang(call, seconds)`: that call blocks first (until `release()`);
- `xid(gpu, xid)`: queue an XID critical-error event.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pynvml as real

from collectors.exposition import iter_samples

DCGM_H100 = "exporters-real/dcgm/nvidia-aicr_eks-8xH100-80GB-HBM3_dcgm-metrics-sampled.txt"
MIB = 1 << 20


@dataclass
class FakeMig:
    gpu_instance: int
    compute_instance: int
    profile: str
    total: int
    used: int
    uuid: str


@dataclass
class FakeGpu:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    temp: int = 30
    mem_temp: int = 48
    power_mw: int = 69850
    util_gpu: int = 0
    util_mem: int = 0
    mem_total: int = 85520809984
    mem_used: int = 0
    energy_mj: int = 1_893_412_554
    clocks: dict = field(default_factory=lambda: {0: 345, 1: 345, 2: 2619})
    reasons: int = 0x1  # gpu_idle, as an idle H100 reports
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (0, 1): 2, (1, 0): 0, (1, 1): 0})
    remap: tuple = (0, 0, 0, 0)
    pcie_kbps: dict = field(default_factory=lambda: {0: 1843, 1: 2211})
    replays: int = 0
    nvlinks: list = field(default_factory=lambda: [1] * 18)
    nvlink_kib: dict = field(default_factory=dict)  # (field id, link) -> KiB
    procs: int = 0
    pstate: int = 0
    fan: int | None = None  # SXM boards have no fan of their own: NotSupported
    numa: int = 0
    cpu_masks: tuple = (0,)
    mig: list | None = None
    max_mig: int = 7
    gpm_supported: bool = True
    gpm: dict = field(default_factory=dict)  # metric id -> value over the interval


class FakeHandle:
    __slots__ = ("gpu", "mig")

    def __init__(self, gpu: int, mig: int | None = None):
        self.gpu, self.mig = gpu, mig

    def __repr__(self):
        return f"FakeHandle({self.gpu}, {self.mig})"


class FakeGpmSample:
    def __init__(self):
        self.gpu = None
        self.seq = 0


class c_nvmlGpmMetricsGet_t:  # noqa: N801 - pynvml's name
    """Plain-Python stand-in for pynvml's ctypes struct of the same name."""

    def __init__(self):
        self.version = 0
        self.numMetrics = 0
        self.sample1 = None
        self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(real.NVML_GPM_METRIC_MAX)]


def _sparse_mask(cpus: range | list) -> tuple:
    words = [0] * 4
    for c in cpus:
        words[c // 64] |= 1 << (c % 64)
    return tuple(words)


def h100_node(fixtures_dir: Path) -> tuple[list[FakeGpu], str]:
    """Eight H100s whose identity and load come from the real dcgm-exporter scrape."""
    seen: dict[int, dict] = {}
    driver = ""
    for name, labels, value in iter_samples((fixtures_dir / DCGM_H100).read_text()):
        i = int(labels["gpu"])
        g = seen.setdefault(i, {"uuid": labels["UUID"], "pci": labels["pci_bus_id"], "name": labels["modelName"]})
        driver = labels.get("DCGM_FI_DRIVER_VERSION", driver)
        g[name] = value
    gpus = []
    for i, d in sorted(seen.items()):
        node = 0 if i < 4 else 1
        g = FakeGpu(i, d["uuid"], d["name"], d["pci"], temp=int(d["DCGM_FI_DEV_GPU_TEMP"]),
                    power_mw=int(d["DCGM_FI_DEV_POWER_USAGE"] * 1000), util_gpu=int(d.get("DCGM_FI_DEV_GPU_UTIL", 0)),
                    util_mem=int(d.get("DCGM_FI_DEV_MEM_COPY_UTIL", 0)), numa=node,
                    cpu_masks=_sparse_mask(list(range(48 * node, 48 * node + 48)) +
                                           list(range(96 + 48 * node, 96 + 48 * node + 48))))
        g.nvlink_kib = {(138, link): 1_200_000 + 1000 * i + link for link in range(18)}
        g.nvlink_kib.update({(139, link): 1_100_000 + 1000 * i + link for link in range(18)})
        g.gpm = {1: 97.0, 2: 88.5, 3: 41.2, 5: 63.0, 7: 61.5, 10: 35.0, 20: 1200.0, 21: 950.5, 60: 150000.0, 61: 149000.0}
        gpus.append(g)
    # GPU 0 runs the vLLM worker of that capture (its pod label): give it memory and a process.
    gpus[0].mem_used, gpus[0].procs = 76_235_669_504, 1
    return gpus, driver


def a100_node() -> tuple[list[FakeGpu], str]:
    """A DGX A100: 12 NVLinks per GPU to NVSwitch, and no GPM (Ampere)."""
    gpus = []
    for i in range(8):
        g = FakeGpu(i, f"GPU-a100{i:04x}-0000-0000-0000-000000000000", "NVIDIA A100-SXM4-80GB",
                    f"00000000:{[0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD][i]:02X}:00.0",
                    mem_total=85899345920, clocks={0: 210, 1: 210, 2: 1593}, nvlinks=[1] * 12,
                    power_mw=61000, numa=i // 4, gpm_supported=False)
        gpus.append(g)
    return gpus, "535.129.03"


class FakeNvml:
    """Instances stand in for the `pynvml` module (`Context(nvml=FakeNvml(...))`)."""

    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(self, gpus: list[FakeGpu], driver: str = "580.105.08"):
        for name in dir(real):
            if name.startswith(("NVML_", "NVMLError", "nvmlClocks", "nvmlEventType")):
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.driver = driver
        self.initialised = 0
        self.init_error: int | None = None
        self.errors: dict[tuple[str, int | None], int] = {}
        self.hangs: dict[str, float] = {}
        self.lost: set[int] = set()
        self.events: list = []
        self.calls: dict[str, int] = {}
        self.p2p_nvlink = True
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._seq = 0

    # -- injection
    def fail(self, call: str, code: int, gpu: int | None = None) -> "FakeNvml":
        self.errors[(call, gpu)] = code
        return self

    def lose(self, gpu: int) -> "FakeNvml":
        self.lost.add(gpu)
        return self

    def hang(self, call: str, seconds: float) -> "FakeNvml":
        self.hangs[call] = seconds
        return self

    def release(self) -> None:
        """Ends every hang now (so tests leave no thread sleeping)."""
        self._release.set()

    def xid(self, gpu: int, xid: int) -> None:
        self.events.append(SimpleNamespace(device=FakeHandle(gpu), eventType=real.nvmlEventTypeXidCriticalError,
                                           eventData=xid, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))

    # -- plumbing
    def _enter(self, call: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        with self._lock:
            self.calls[call] = self.calls.get(call, 0) + 1
        if call in self.hangs:
            self._release.wait(self.hangs[call])
        if not self.initialised:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        gpu = handle.gpu if handle is not None else None
        for key in ((call, gpu), (call, None)):
            if key in self.errors:
                raise real.NVMLError(self.errors[key])
        if gpu is None:
            return None
        if gpu in self.lost:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        if not 0 <= gpu < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[gpu]

    def _mig(self, handle: FakeHandle) -> FakeMig | None:
        g = self.gpus[handle.gpu]
        return None if handle.mig is None else g.mig[handle.mig]

    # -- init
    def nvmlInit(self):
        with self._lock:
            self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        handle = FakeHandle(index)
        self._enter("nvmlDeviceGetHandleByIndex", handle)  # a lost GPU answers GpuIsLost here too
        return handle

    def nvmlDeviceGetIndex(self, handle):
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.gpu

    # -- identity
    def nvmlDeviceGetUUID(self, handle):
        g = self._enter("nvmlDeviceGetUUID", handle)
        mig = self._mig(handle)
        return mig.uuid if mig else g.uuid

    def nvmlDeviceGetName(self, handle):
        g = self._enter("nvmlDeviceGetName", handle)
        mig = self._mig(handle)
        return f"{g.name} MIG {mig.profile}" if mig else g.name

    def nvmlDeviceGetPciInfo(self, handle):
        g = self._enter("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=g.pci_bus_id.encode(), busIdLegacy=g.pci_bus_id[4:].encode())

    def nvmlDeviceGetMigMode(self, device):
        g = self._enter("nvmlDeviceGetMigMode", device)
        on = 1 if g.mig is not None else 0
        return [on, on]

    # -- load and health
    def nvmlDeviceGetUtilizationRates(self, handle):
        g = self._enter("nvmlDeviceGetUtilizationRates", handle)
        if g.mig is not None:  # NVML has no utilisation while MIG is on
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        g = self._enter("nvmlDeviceGetMemoryInfo", handle)
        mig = self._mig(handle)
        total, used = (mig.total, mig.used) if mig else (g.mem_total, g.mem_used)
        return SimpleNamespace(total=total, used=used, free=total - used - (0 if mig else 502267904))

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._enter("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._enter("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._enter("nvmlDeviceGetTemperature", handle).temp

    def nvmlDeviceGetClockInfo(self, handle, type):  # noqa: A002 - pynvml's parameter name
        return self._enter("nvmlDeviceGetClockInfo", handle).clocks[type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle).reasons

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        return self._enter("nvmlDeviceGetTotalEccErrors", handle).ecc[(errorType, counterType)]

    def nvmlDeviceGetRemappedRows(self, device):
        return self._enter("nvmlDeviceGetRemappedRows", device).remap

    def nvmlDeviceGetPcieThroughput(self, device, counter):
        return self._enter("nvmlDeviceGetPcieThroughput", device).pcie_kbps[counter]

    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return self._enter("nvmlDeviceGetPcieReplayCounter", handle).replays

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        g = self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=4000 + n, usedGpuMemory=g.mem_used) for n in range(g.procs)]

    def nvmlDeviceGetPerformanceState(self, handle):
        return self._enter("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetFanSpeed(self, handle):
        g = self._enter("nvmlDeviceGetFanSpeed", handle)
        if g.fan is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return g.fan

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        g = self._enter("nvmlDeviceGetFieldValues", handle)
        out = []
        for fid, scope in fieldIds:
            value = g.mem_temp if fid == real.NVML_FI_DEV_MEMORY_TEMP else g.nvlink_kib.get((fid, scope))
            ret = real.NVML_SUCCESS if value is not None else real.NVML_ERROR_NOT_SUPPORTED
            vtype = real.NVML_VALUE_TYPE_SIGNED_INT if fid == real.NVML_FI_DEV_MEMORY_TEMP else real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            val = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
            setattr(val, "siVal" if vtype == real.NVML_VALUE_TYPE_SIGNED_INT else "ullVal", value or 0)
            out.append(SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=0, latencyUsec=0,
                                       valueType=vtype, nvmlReturn=ret, value=val))
        return out

    # -- NVLink and topology
    def nvmlDeviceGetNvLinkState(self, device, link):
        g = self._enter("nvmlDeviceGetNvLinkState", device)
        if link >= len(g.nvlinks):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlinks[link]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device, link):
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", device)
        return SimpleNamespace(busId=f"00000000:{0x05 + link % 4:02X}:00.0".encode())  # an NVSwitch

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", handle)
        return real.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetP2PStatus(self, device1, device2, p2pIndex):
        self._enter("nvmlDeviceGetP2PStatus", device1)
        self._enter("nvmlDeviceGetP2PStatus", device2)
        return real.NVML_P2P_STATUS_OK if self.p2p_nvlink else real.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, device1, device2):
        a = self._enter("nvmlDeviceGetTopologyCommonAncestor", device1)
        b = self._enter("nvmlDeviceGetTopologyCommonAncestor", device2)
        return real.NVML_TOPOLOGY_NODE if a.numa == b.numa else real.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetCpuAffinity(self, handle, cpuSetSize):
        g = self._enter("nvmlDeviceGetCpuAffinity", handle)
        return list(g.cpu_masks[:cpuSetSize]) + [0] * max(0, cpuSetSize - len(g.cpu_masks))

    def nvmlDeviceGetNumaNodeId(self, handle):
        return self._enter("nvmlDeviceGetNumaNodeId", handle).numa

    # -- MIG
    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        g = self._enter("nvmlDeviceGetMaxMigDeviceCount", device)
        return g.max_mig if g.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        g = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if g.mig is None or index >= len(g.mig):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return FakeHandle(device.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, device):
        self._enter("nvmlDeviceGetGpuInstanceId", device)
        return self._mig(device).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, device):
        self._enter("nvmlDeviceGetComputeInstanceId", device)
        return self._mig(device).compute_instance

    # -- events
    def nvmlEventSetCreate(self):
        self._enter("nvmlEventSetCreate")
        return SimpleNamespace(kind="eventset")

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._enter("nvmlDeviceRegisterEvents", handle)

    def nvmlEventSetWait(self, eventSet, timeoutms):
        self._enter("nvmlEventSetWait")
        if not self.events:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def nvmlEventSetFree(self, eventSet):
        self._enter("nvmlEventSetFree")

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, device):
        g = self._enter("nvmlGpmQueryDeviceSupport", device)
        return SimpleNamespace(version=real.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(g.gpm_supported))

    def nvmlGpmSampleAlloc(self):
        self._enter("nvmlGpmSampleAlloc")
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, gpmSample):
        self._enter("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, device, gpmSample):
        g = self._enter("nvmlGpmSampleGet", device)
        if not g.gpm_supported:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            self._seq += 1
            gpmSample.gpu, gpmSample.seq = device.gpu, self._seq
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet):
        self._enter("nvmlGpmMetricsGet")
        s1, s2 = metricsGet.sample1, metricsGet.sample2
        if s1 is None or s2 is None or s1.gpu != s2.gpu or s1.gpu is None or s2.seq <= s1.seq:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[s1.gpu]
        for m in metricsGet.metrics[:metricsGet.numMetrics]:
            if m.metricId in g.gpm:
                m.nvmlReturn, m.value = real.NVML_SUCCESS, g.gpm[m.metricId]
            else:
                m.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    @property
    def api_functions(self) -> list[str]:
        return sorted(n for n in dir(self) if n.startswith("nvml") and callable(getattr(self, n))
                      and not n.startswith(("nvmlClocks", "nvmlEventType")))
