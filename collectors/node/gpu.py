"""NVIDIA GPUs through NVML: health, load, errors, MIG instances and the topology between GPUs.

Sources: NVML through `pynvml` (package nvidia-ml-py), taken from `Context.nvml` (tests pass a fake)
or imported lazily; `<sysfs>/bus/pci/devices/*/{vendor,class,driver}` to count the GPUs on the PCI bus.
Privileges: none beyond read access to /dev/nvidia* (NVML works as an ordinary user).

Metrics (all labelled `gpu` = NVML index; see SPECS below and the "GPUs" table of docs/agent.md):
utilisation, memory, power, energy, temperatures, clocks, clock-event (throttle) reasons, ECC and
row-remap counts, XID events by XID (NVML event set, polled without blocking), PCIe throughput and
replays, NVLink state and traffic, compute processes, performance state, fan speed; MIG instances;
`gangwatch_gpu_info` and topology info series (NVLink peers, common PCIe ancestor, CPU/NUMA
affinity); PCI-bus versus NVML device counts (`gangwatch_gpu_missing`).
Per-node rollups without a `gpu` label (`gangwatch_gpu_node_*`: GPUs answering, GPUs lost, mean
utilisation, summed memory used and power, hottest die, GPUs with a pending/failed row remap, summed
volatile uncorrected ECC errors), so that rules select one series per node instead of one per GPU.
They are computed from the very readings of the per-GPU series in the same scrape (no extra NVML
call), over the GPUs that gave that reading; a rollup no GPU gave a reading for is left out, except
`gangwatch_gpu_node_gpus` and `gangwatch_gpu_node_lost`, present whenever NVML works. The ECC rollup
is a sum of counters: a GPU that stops answering makes it drop, which Prometheus takes for a reset.

Failure modes:
- no NVML library, or no driver and no NVIDIA GPU on the PCI bus -> NoData (quiet);
- driver not loaded while NVIDIA GPUs sit on the PCI bus -> only the device counts, flagging them missing;
- any other nvmlInit failure (e.g. LibRmVersionMismatch after a driver upgrade without reboot) -> the
  collector fails (success 0) and init is retried with exponential backoff (1 s .. 5 min);
- every NVML call is guarded on its own: NotSupported (or a function the driver lacks) drops that field
  quietly; GpuIsLost marks that GPU `gangwatch_gpu_lost 1` and drops its other series for the scrape;
  any other error drops the field and counts `gangwatch_gpu_nvml_errors_total{call,error}`;
- a hung NVML call is cut off by the scrape deadline (the Scraper's per-collector timeout).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..exposition import COUNTER, GAUGE, Family, format_labels
from ..readers import list_dir, read_first_line
from ..registry import Collector, Context, NoData, register

log = logging.getLogger(__name__)

# NVML return codes and constants are part of NVML's C ABI; keeping them here lets the collector
# work with any pynvml version (and with fakes) without depending on which names it exports.
SUCCESS = 0
ERR_NOT_SUPPORTED = 3
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
NO_DRIVER = {ERR_DRIVER_NOT_LOADED, ERR_LIBRARY_NOT_FOUND}
QUIET = frozenset({ERR_NOT_SUPPORTED, ERR_FUNCTION_NOT_FOUND})  # "this GPU/driver has no such field"

CLOCK_TYPES = {"graphics": 0, "sm": 1, "memory": 2}
TEMPERATURE_GPU = 0
FI_DEV_MEMORY_TEMP = 82
FI_NVLINK_DATA_TX_KIB = 138
FI_NVLINK_DATA_RX_KIB = 139
PCIE_TX, PCIE_RX = 0, 1
ECC_TYPES = {"corrected": 0, "uncorrected": 1}
ECC_COUNTERS = {"volatile": 0, "aggregate": 1}
EVENT_XID = 0x8
NVLINK_MAX_LINKS = 36
NVLINK_DEVICE_SWITCH = 2
P2P_CAPS_NVLINK = 2
P2P_STATUS_OK = 0
PSTATE_UNKNOWN = 32
CLOCK_EVENT_REASONS = {  # bit -> name (nvmlClocksEventReason*)
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
TOPOLOGY_LEVELS = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node", 50: "system"}
REDISCOVER_SECONDS = 60.0  # a GPU without a handle is looked for again this often, not every scrape
XID_EVENTS_PER_SCRAPE = 256  # a storm of XIDs must not turn one scrape into an unbounded loop
PCI_VENDOR_NVIDIA = "0x10de"
PCI_CLASS_GPU = ("0x0300", "0x0302")  # VGA and 3D controllers; not NVSwitch (0x0680) or audio (0x0403)

# Metric families as data: key -> (name, type, help). docs/agent.md's table is generated from this.
SPECS: dict[str, tuple[str, str, str]] = {
    "info": ("gangwatch_gpu_info", GAUGE,
             "A metric with value 1 per GPU labelled with its index, UUID, model name, PCI bus id, MIG mode and driver version."),
    "lost": ("gangwatch_gpu_lost", GAUGE,
             "Whether NVML reported the GPU as lost (fallen off the bus or otherwise unreachable) in this scrape (1) or not (0)."),
    "util": ("gangwatch_gpu_utilization_ratio", GAUGE,
             "Fraction of the last sample period (0-1) during which one or more kernels ran on the GPU."),
    "mem_util": ("gangwatch_gpu_memory_utilization_ratio", GAUGE,
                 "Fraction of the last sample period (0-1) during which device memory was being read or written."),
    "mem_used": ("gangwatch_gpu_memory_used_bytes", GAUGE, "Device memory in use, in bytes."),
    "mem_total": ("gangwatch_gpu_memory_total_bytes", GAUGE, "Total device memory, in bytes."),
    "mem_free": ("gangwatch_gpu_memory_free_bytes", GAUGE, "Free device memory, in bytes."),
    "power": ("gangwatch_gpu_power_watts", GAUGE, "Power drawn by the GPU board, in watts."),
    "energy": ("gangwatch_gpu_energy_joules_total", COUNTER,
               "Energy consumed by the GPU since the driver was last loaded, in joules."),
    "temp": ("gangwatch_gpu_temperature_celsius", GAUGE,
             "Temperature of the GPU die (sensor=\"gpu\") or of its memory (sensor=\"memory\"), in degrees Celsius."),
    "clock": ("gangwatch_gpu_clock_hz", GAUGE, "Current clock frequency of the SM, memory or graphics domain, in hertz."),
    "throttle": ("gangwatch_gpu_clock_throttle_reason", GAUGE,
                 "Whether the named clock event (throttle) reason is currently active (1) or not (0)."),
    "ecc": ("gangwatch_gpu_ecc_errors_total", COUNTER,
            "ECC memory errors by type (corrected, uncorrected); counter=\"volatile\" since the driver loaded, "
            "\"aggregate\" over the GPU's life."),
    "remap": ("gangwatch_gpu_remapped_rows", GAUGE,
              "Number of device-memory rows remapped because of correctable or uncorrectable errors."),
    "remap_pending": ("gangwatch_gpu_row_remap_pending", GAUGE,
                      "Whether a row remapping is pending and needs a GPU reset to take effect (1) or not (0)."),
    "remap_failure": ("gangwatch_gpu_row_remap_failure", GAUGE,
                      "Whether a row remapping has failed, so the GPU needs service (1) or not (0)."),
    "xid": ("gangwatch_gpu_xid_errors_total", COUNTER,
            "XID critical error events seen by the agent since it started, by XID number."),
    "pcie_bps": ("gangwatch_gpu_pcie_throughput_bytes_per_second", GAUGE,
                 "PCIe throughput sampled by the driver over 20 ms, by direction (tx, rx), in bytes per second; "
                 "only with --collector.gpu.pcie-throughput."),
    "pcie_replay": ("gangwatch_gpu_pcie_replays_total", COUNTER,
                    "PCIe replays (link-level retransmissions) since the driver loaded."),
    "nvlink_up": ("gangwatch_gpu_nvlink_up", GAUGE, "Whether the NVLink link is active (1) or not (0)."),
    "nvlink_bytes": ("gangwatch_gpu_nvlink_data_bytes_total", COUNTER,
                     "NVLink data payload bytes carried by the link, by direction (tx, rx)."),
    "procs": ("gangwatch_gpu_compute_processes", GAUGE, "Number of compute processes running on the GPU."),
    "pstate": ("gangwatch_gpu_performance_state", GAUGE, "Current performance state P0 (maximum) to P15 (minimum), as a number."),
    "fan": ("gangwatch_gpu_fan_speed_ratio", GAUGE, "Intended fan speed as a fraction (0-1) of its maximum."),
    "mig_info": ("gangwatch_gpu_mig_info", GAUGE,
                 "A metric with value 1 per MIG device labelled with its GPU, GPU instance, compute instance, profile and UUID."),
    "mig_used": ("gangwatch_gpu_mig_memory_used_bytes", GAUGE, "Device memory in use by the MIG device, in bytes."),
    "mig_total": ("gangwatch_gpu_mig_memory_total_bytes", GAUGE, "Device memory of the MIG device, in bytes."),
    "peer": ("gangwatch_gpu_nvlink_peer_info", GAUGE,
             "A metric with value 1 for each pair of GPUs joined by NVLink, directly or through NVSwitch, with the number of links."),
    "topology": ("gangwatch_gpu_topology_info", GAUGE,
                 "A metric with value 1 per GPU pair labelled with their closest common PCIe/CPU ancestor "
                 "(internal, single, multiple, hostbridge, node, system)."),
    "affinity": ("gangwatch_gpu_affinity_info", GAUGE,
                 "A metric with value 1 per GPU labelled with its NUMA node and the CPUs closest to it."),
    "pci_devices": ("gangwatch_gpu_pci_devices", GAUGE,
                    "NVIDIA GPUs (VGA/3D controllers) present on the PCI bus and not bound to another driver."),
    "nvml_devices": ("gangwatch_gpu_nvml_devices", GAUGE, "GPUs visible to the NVIDIA driver through NVML."),
    "missing": ("gangwatch_gpu_missing", GAUGE,
                "NVIDIA GPUs on the PCI bus that the driver does not see (fallen off the bus or failed to initialise)."),
    "errors": ("gangwatch_gpu_nvml_errors_total", COUNTER,
               "NVML calls that failed with an error other than NotSupported, by call and error, since the agent started."),
    # Per-node rollups of the per-GPU readings of the same scrape (see ROLLUPS).
    "node_gpus": ("gangwatch_gpu_node_gpus", GAUGE, "GPUs of this node that answered NVML in this scrape (lost GPUs not counted)."),
    "node_lost": ("gangwatch_gpu_node_lost", GAUGE, "GPUs of this node that NVML reported as lost in this scrape."),
    "node_util": ("gangwatch_gpu_node_utilization_ratio", GAUGE,
                  "Mean of gangwatch_gpu_utilization_ratio (0-1) over this node's GPUs that reported utilisation in this scrape."),
    "node_mem_used": ("gangwatch_gpu_node_memory_used_bytes", GAUGE,
                      "Device memory in use, summed over this node's GPUs that reported it in this scrape, in bytes."),
    "node_power": ("gangwatch_gpu_node_power_watts", GAUGE,
                   "Power drawn by the GPU boards, summed over this node's GPUs that reported it in this scrape, in watts."),
    "node_max_temp": ("gangwatch_gpu_node_max_temperature_celsius", GAUGE,
                      "Die temperature (sensor=\"gpu\") of this node's hottest GPU in this scrape, in degrees Celsius."),
    "node_remap_pending": ("gangwatch_gpu_node_row_remap_pending", GAUGE,
                           "GPUs of this node with a row remapping pending a GPU reset, among those reporting row remapping."),
    "node_remap_failure": ("gangwatch_gpu_node_row_remap_failure", GAUGE,
                           "GPUs of this node with a failed row remapping (needing service), among those reporting row remapping."),
    "node_ecc_uncorrected": ("gangwatch_gpu_node_ecc_uncorrected_errors_total", COUNTER,
                             "Uncorrected ECC memory errors since the driver loaded (counter=\"volatile\"), summed over this "
                             "node's GPUs that reported them in this scrape; a GPU that stops answering makes the sum "
                             "drop, which Prometheus treats as a counter reset."),
}


def _count_nonzero(values: list[float]) -> int:
    return sum(1 for v in values if v)


# How each rollup combines the readings its GPUs recorded under its key (Out.add's `rollup`).
ROLLUPS: dict[str, Callable[[list[float]], float]] = {
    "node_util": lambda vs: math.fsum(vs) / len(vs),
    "node_mem_used": math.fsum,
    "node_power": math.fsum,
    "node_max_temp": max,
    "node_remap_pending": _count_nonzero,
    "node_remap_failure": _count_nonzero,
    "node_ecc_uncorrected": math.fsum,
}


def new_families(specs: dict[str, tuple[str, str, str]]) -> dict[str, Family]:
    return {key: Family(name, kind, help) for key, (name, kind, help) in specs.items()}


# ----------------------------------------------------------------------------- value helpers

def num(value: Any) -> float | int | None:
    """A finite real number from an NVML result, or None for anything else."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def scaled(value: Any, factor: float) -> float | None:
    v = num(value)
    return None if v is None else v * factor


def divided(value: Any, divisor: float) -> float | None:
    """Division rather than multiplication by 0.01 keeps 57 % printing as 0.57, not 0.5700000000000001."""
    v = num(value)
    return None if v is None else v / divisor


def text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    if isinstance(value, str):
        return value
    return None


def error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def error_name(exc: BaseException) -> str:
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    if name == "NVMLError":
        code = error_code(exc)
        return f"code_{code}" if code is not None else name
    return name


def field_value(fv: Any) -> float | int | None:
    """The number held by an nvmlFieldValue_t, read by its valueType (a C union)."""
    if getattr(fv, "nvmlReturn", SUCCESS) != SUCCESS:
        return None
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        getattr(fv, "valueType", None))
    return None if member is None else num(getattr(fv.value, member, None))


def cpulist(masks: Iterable[Any]) -> str:
    """NVML's CPU affinity bitmask words (64 CPUs each) -> a cpulist like '0-55,112-167'."""
    cpus = [w * 64 + b for w, mask in enumerate(masks) for b in range(64)
            if isinstance(mask, int) and mask >> b & 1]
    ranges: list[str] = []
    start = prev = None
    for c in cpus + [None]:
        if start is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(ranges)


def mig_profile(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3 MIG 1g.10gb' -> '1g.10gb'."""
    if not name:
        return ""
    _, sep, tail = name.rpartition("MIG ")
    return tail.strip() if sep else ""


def short_bus_id(bus_id: str) -> str:
    """NVML's '00000000:53:00.0' -> sysfs' '0000:53:00.0' (lower case)."""
    dom, sep, rest = bus_id.partition(":")
    if not sep:
        return bus_id.lower()
    return f"{dom[-4:]}:{rest}".lower()


def count_pci_gpus(sysfs: str) -> int | None:
    """NVIDIA VGA/3D controllers on the PCI bus that are bound to nvidia or to no driver at all.

    A GPU passed through to a VM (bound to vfio-pci) is not expected to be visible to NVML.
    None when the PCI device list cannot be read (e.g. a container without /sys/bus/pci).
    """
    base = os.path.join(sysfs, "bus", "pci", "devices")
    devices = list_dir(base)
    if not devices:
        return None
    n = 0
    for dev in devices:
        path = os.path.join(base, dev)
        if (read_first_line(os.path.join(path, "vendor")) or "").lower() != PCI_VENDOR_NVIDIA:
            continue
        if not (read_first_line(os.path.join(path, "class")) or "").lower().startswith(PCI_CLASS_GPU):
            continue
        try:
            driver = os.path.basename(os.readlink(os.path.join(path, "driver")))
        except OSError:
            driver = ""
        if driver in ("", "nvidia"):
            n += 1
    return n


# ----------------------------------------------------------------------------- NVML session and guard

class NvmlInitError(RuntimeError):
    """nvmlInit failed for a reason other than 'no driver here'."""


class NoDriver(NoData):
    def __init__(self, msg: str, code: int | None):
        super().__init__(msg)
        self.code = code


def _detached(err: Exception) -> Exception:
    """A new exception saying what `err` says, with no traceback or context. NvmlSession raises one
    per scrape during a backoff: raising the stored exception itself grew its traceback by each
    raise's frames and kept every scrape's locals (its output) alive until the backoff ended."""
    try:
        return NoDriver(str(err), err.code) if isinstance(err, NoDriver) else type(err)(*err.args)
    except Exception:  # an exception type that cannot be rebuilt from its args
        return NvmlInitError(str(err))


class NvmlSession:
    """Initialises NVML once and keeps it; after a failure, retries with exponential backoff."""

    MIN_BACKOFF, MAX_BACKOFF = 1.0, 300.0

    def __init__(self, module: Any, clock: Callable[[], float]):
        self._given = module
        self.clock = clock
        self.nvml: Any = None
        self.ready = False
        self.backoff = self.MIN_BACKOFF
        self.next_try = 0.0
        self.last_error: Exception | None = None
        self.inits = 0

    def acquire(self) -> Any:
        if self.ready:
            return self.nvml
        now = self.clock()
        # (The second test ignores a wall clock that jumped backwards past the longest backoff.)
        if self.last_error is not None and 0 < self.next_try - now <= self.MAX_BACKOFF:
            raise _detached(self.last_error) from None
        try:
            nvml = self._given if self._given is not None else importlib.import_module("pynvml")
        except Exception as exc:  # ImportError, or a broken install
            self._failed(now, NoDriver(f"pynvml not importable: {exc}", ERR_LIBRARY_NOT_FOUND))
            raise _detached(self.last_error) from None
        try:
            nvml.nvmlInit()
        except Exception as exc:
            code = error_code(exc)
            err: Exception = (NoDriver(f"no NVIDIA driver: {error_name(exc)}", code) if code in NO_DRIVER
                              else NvmlInitError(f"nvmlInit failed: {error_name(exc)}: {exc}"))
            self._failed(now, err)
            raise err from None
        self.nvml, self.ready, self.backoff, self.last_error = nvml, True, self.MIN_BACKOFF, None
        self.inits += 1
        return nvml

    def _failed(self, now: float, err: Exception) -> None:
        self.last_error = _detached(err)
        self.next_try = now + self.backoff
        self.backoff = min(self.backoff * 2, self.MAX_BACKOFF)

    def invalidate(self, err: Exception) -> None:
        """Drop the session after a device-wide failure; the next scrape re-inits after the backoff."""
        self.shutdown()
        self._failed(self.clock(), err)

    def shutdown(self) -> None:
        if self.ready:
            self.ready = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass


class GpuLost(Exception):
    pass


class Guard:
    """Runs one NVML call and the conversion of its result; a failure drops only that field."""

    def __init__(self, nvml: Any, errors: dict[tuple[str, str], int]):
        self.nvml = nvml
        self.errors = errors  # (call, error) -> count, kept across scrapes by the collector

    def __call__(self, call: str, *args: Any, post: Callable[[Any], Any] | None = None,
                 quiet: frozenset = QUIET, count: bool = True) -> Any:
        return self.run(call, getattr(self.nvml, call, None), *args, post=post, quiet=quiet, count=count)

    def run(self, call: str, fn: Callable[..., Any] | None, *args: Any, post: Callable[[Any], Any] | None = None,
            quiet: frozenset = QUIET, count: bool = True) -> Any:
        """Like calling, for a function that wraps NVML calls; `call` names it in the error counter."""
        if fn is None:  # an older pynvml without this function: the field does not exist here
            return None
        try:
            value = fn(*args)
            return post(value) if post is not None else value
        except Exception as exc:
            code = error_code(exc)
            if code == ERR_GPU_IS_LOST and args:  # only a call about a device can lose one
                lost = True
            else:
                lost = False
                if code not in quiet and count:
                    key = (call, error_name(exc))
                    self.errors[key] = self.errors.get(key, 0) + 1
        if lost:
            raise GpuLost(call)
        return None


# ----------------------------------------------------------------------------- static facts per GPU

@dataclass
class Gpu:
    index: int
    handle: Any
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    links: list[int] = field(default_factory=list)
    switch_links: int = 0
    xid_registered: bool = False
    _labels: dict = field(default_factory=dict, repr=False)

    def lbl(self, *extra: tuple[str, object]) -> str:
        s = self._labels.get(extra)
        if s is None:
            s = self._labels[extra] = format_labels((("gpu", self.index),) + extra)
        return s


@dataclass
class Topology:
    gpus: list[Gpu]
    driver_version: str
    peers: list[tuple[int, int, int, str]]  # (gpu, peer, links, via)
    levels: list[tuple[int, int, str]]
    affinity: list[tuple[int, str, str]]  # (gpu, numa node, cpus)
    event_set: Any = None
    unreachable: dict[int, bool] = field(default_factory=dict)  # index -> lost, for GPUs without a handle
    created: float = 0.0


class Out:
    """Samples of one GPU, committed to the families only if the GPU was not lost midway."""

    __slots__ = ("rows", "node")

    def __init__(self):
        self.rows: list[tuple[str, str, float]] = []
        self.node: dict[str, float] = {}  # ROLLUPS key -> this GPU's reading, for the node rollups

    def add(self, key: str, labels: str, value: Any, rollup: str | None = None) -> None:
        v = num(value)
        if v is not None:
            self.rows.append((key, labels, v))
            if rollup is not None:
                self.node[rollup] = v


@register
class GpuCollector(Collector):
    """NVIDIA GPUs via NVML: load, memory, power, clocks, errors, XIDs, NVLink, MIG and topology."""

    name = "gpu"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.session = NvmlSession(ctx.nvml, ctx.clock)
        self.errors: dict[tuple[str, str], int] = {}
        self.xids: dict[tuple[int, int], int] = {}
        self.topo: Topology | None = None
        self.pcie_throughput = bool(ctx.option("collector_gpu_pcie_throughput", False))

    @classmethod
    def add_arguments(cls, parser) -> None:
        parser.add_argument("--collector.gpu.pcie-throughput", dest="collector_gpu_pcie_throughput",
                            action="store_true", default=False,
                            help="Also sample PCIe TX/RX throughput through NVML; each sample blocks "
                                 "20 ms per direction per GPU.")

    # -- discovery (once per NVML session)
    def _discover(self, nvml: Any, call: Guard, count: int) -> Topology:
        gpus: list[Gpu] = []
        unreachable: dict[int, bool] = {}
        for i in range(count):
            try:
                h = call("nvmlDeviceGetHandleByIndex", i)
            except GpuLost:
                h, unreachable[i] = None, True
            if h is None:
                unreachable.setdefault(i, False)
                continue  # retried at a later discovery
            g = Gpu(i, h)
            try:
                g.uuid = call("nvmlDeviceGetUUID", h, post=text) or ""
                g.name = call("nvmlDeviceGetName", h, post=text) or ""
                g.pci_bus_id = call("nvmlDeviceGetPciInfo", h, post=lambda p: text(p.busId)) or ""
                self._discover_links(call, g)
            except GpuLost:
                pass
            gpus.append(g)
        driver = call("nvmlSystemGetDriverVersion", post=text) or ""
        by_bus = {short_bus_id(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
        peers, levels, affinity = [], [], []
        for g in gpus:
            try:
                peers += self._peers(call, g, gpus, by_bus)
                for o in gpus:
                    if o.index != g.index:
                        lvl = call("nvmlDeviceGetTopologyCommonAncestor", g.handle, o.handle,
                                   post=lambda v: TOPOLOGY_LEVELS.get(num(v)))
                        if lvl:
                            levels.append((g.index, o.index, lvl))
                affinity.append(self._affinity(call, g))
            except GpuLost:
                continue
        topo = Topology(gpus, driver, peers, levels, [a for a in affinity if a[1] or a[2]], None,
                        unreachable, self.ctx.clock())
        topo.event_set = self._register_xids(call, gpus)
        return topo

    @staticmethod
    def _discover_links(call: Guard, g: Gpu) -> None:
        # Links are numbered from 0 without gaps; the first one NVML refuses ends the list.
        for link in range(NVLINK_MAX_LINKS):
            state = call("nvmlDeviceGetNvLinkState", g.handle, link, post=num, count=False)
            if state is None:
                break
            g.links.append(link)

    @staticmethod
    def _peers(call: Guard, g: Gpu, gpus: list[Gpu], by_bus: dict[str, int]) -> list[tuple[int, int, int, str]]:
        direct: dict[int, int] = {}
        for link in g.links:
            remote = call("nvmlDeviceGetNvLinkRemotePciInfo", g.handle, link, post=lambda p: text(p.busId))
            peer = by_bus.get(short_bus_id(remote)) if remote else None
            if peer is not None:
                direct[peer] = direct.get(peer, 0) + 1
            elif call("nvmlDeviceGetNvLinkRemoteDeviceType", g.handle, link, post=num) == NVLINK_DEVICE_SWITCH:
                g.switch_links += 1
        out = [(g.index, p, n, "direct") for p, n in sorted(direct.items())]
        if g.switch_links:
            for o in gpus:
                if o.index != g.index and o.index not in direct and call(
                        "nvmlDeviceGetP2PStatus", g.handle, o.handle, P2P_CAPS_NVLINK, post=num) == P2P_STATUS_OK:
                    out.append((g.index, o.index, g.switch_links, "nvswitch"))
        return out

    def _affinity(self, call: Guard, g: Gpu) -> tuple[int, str, str]:
        # One 64-bit word per 64 CPUs; asking for more words than CPUs exist is harmless.
        words = max(16, ((os.cpu_count() or 64) + 63) // 64)
        cpus = call("nvmlDeviceGetCpuAffinity", g.handle, words, post=lambda a: cpulist(list(a))) or ""
        node = call("nvmlDeviceGetNumaNodeId", g.handle, post=num)
        if node is None and g.pci_bus_id:  # drivers before nvmlDeviceGetNumaNodeId: ask sysfs
            raw = read_first_line(self.ctx.paths.sys("bus", "pci", "devices", short_bus_id(g.pci_bus_id), "numa_node"))
            node = int(raw) if raw and raw.lstrip("-").isdigit() else None
        return g.index, "" if node is None or node < 0 else str(node), cpus

    @staticmethod
    def _register_xids(call: Guard, gpus: list[Gpu]) -> Any:
        es = call("nvmlEventSetCreate")
        if es is None:
            return None
        for g in gpus:
            try:
                g.xid_registered = call("nvmlDeviceRegisterEvents", g.handle, EVENT_XID, es,
                                        post=lambda _: True) is True
            except GpuLost:
                pass
        return es if any(g.xid_registered for g in gpus) else None

    # -- per scrape
    def collect(self):
        pci = count_pci_gpus(self.ctx.paths.sysfs)
        try:
            nvml = self.session.acquire()
        except NoDriver as exc:
            if exc.code == ERR_DRIVER_NOT_LOADED and pci:
                return self._counts(new_families(SPECS), pci, 0)
            raise
        call = Guard(nvml, self.errors)
        try:
            count = call("nvmlDeviceGetCount", post=num)
        except GpuLost:
            count = None
        if count is None:
            self._free_events(nvml)
            self.topo = None
            self.session.invalidate(NvmlInitError("nvmlDeviceGetCount failed; NVML will be re-initialised"))
            raise NvmlInitError("nvmlDeviceGetCount failed")
        if self.topo is None or (len(self.topo.gpus) < min(count, 64)
                                 and self.ctx.clock() - self.topo.created >= REDISCOVER_SECONDS):
            # First scrape, or a GPU whose handle could not be had: (re)discover, at most once a minute.
            self._free_events(nvml)
            self.topo = self._discover(nvml, call, int(min(count, 64)))
        fams = new_families(SPECS)
        self._static(fams)
        self._poll_xids(nvml, call)
        answered = lost_gpus = 0
        readings: dict[str, list[float]] = {}
        for g in self.topo.gpus:
            out = Out()
            mig_mode = ""
            try:
                mig_mode = self._collect_gpu(call, g, out)
                lost = 0
            except GpuLost:
                lost = 1
            fams["lost"].add_rendered(g.lbl(), lost)
            fams["info"].add(1, gpu=g.index, uuid=g.uuid, name=g.name, pci_bus_id=g.pci_bus_id,
                             mig_mode=mig_mode, driver_version=self.topo.driver_version)
            if not lost:
                answered += 1
                for key, labels, value in out.rows:
                    fams[key].add_rendered(labels, value)
                for key, value in out.node.items():
                    readings.setdefault(key, []).append(value)
            lost_gpus += lost
        for index, lost in sorted(self.topo.unreachable.items()):
            if lost:
                fams["lost"].add(1, gpu=index)
                lost_gpus += 1
        fams["node_gpus"].add(answered)
        fams["node_lost"].add(lost_gpus)
        for key, combine in ROLLUPS.items():
            if key in readings:  # no GPU gave the reading: unknown, not zero
                fams[key].add(combine(readings[key]))
        for (gpu, xid), n in sorted(self.xids.items()):
            fams["xid"].add(n, gpu=gpu, xid=xid)
        self._counts(fams, pci, int(count))
        for (c, e), n in sorted(self.errors.items()):
            fams["errors"].add(n, call=c, error=e)
        return list(fams.values())

    @staticmethod
    def _counts(fams: dict[str, Family], pci: int | None, nvml_count: int) -> list[Family]:
        fams["nvml_devices"].add(nvml_count)
        if pci is not None:  # unknown is not zero: without a readable PCI list, say nothing
            fams["pci_devices"].add(pci)
            fams["missing"].add(max(0, pci - nvml_count))
        return [f for f in fams.values() if len(f)]

    def _static(self, fams: dict[str, Family]) -> None:
        for gpu, peer, links, via in self.topo.peers:
            fams["peer"].add(1, gpu=gpu, peer_gpu=peer, links=links, via=via)
        for gpu, peer, level in self.topo.levels:
            fams["topology"].add(1, gpu=gpu, peer_gpu=peer, level=level)
        for gpu, node, cpus in self.topo.affinity:
            fams["affinity"].add(1, gpu=gpu, numa_node=node, cpus=cpus)

    def _poll_xids(self, nvml: Any, call: Guard) -> None:
        es = self.topo.event_set
        if es is None:
            return
        for _ in range(XID_EVENTS_PER_SCRAPE):
            try:
                data = nvml.nvmlEventSetWait(es, 0)
            except Exception as exc:
                if error_code(exc) != ERR_TIMEOUT:  # Timeout = no event pending
                    key = ("nvmlEventSetWait", error_name(exc))
                    self.errors[key] = self.errors.get(key, 0) + 1
                return
            try:
                xid = num(getattr(data, "eventData", None))
                gpu = call("nvmlDeviceGetIndex", data.device, post=num)
            except Exception:
                continue  # GpuIsLost on the event's device: that GPU's own calls will say so
            if xid is not None and gpu is not None:
                self.xids[(int(gpu), int(xid))] = self.xids.get((int(gpu), int(xid)), 0) + 1

    def _collect_gpu(self, call: Guard, g: Gpu, out: Out) -> str:
        h, L = g.handle, g.lbl()
        mig = call("nvmlDeviceGetMigMode", h, post=lambda m: num(m[0]))
        mig_mode = {None: "", 0: "disabled", 1: "enabled"}.get(mig, "")
        util = call("nvmlDeviceGetUtilizationRates", h, post=lambda u: (divided(u.gpu, 100), divided(u.memory, 100)))
        if util:
            out.add("util", L, util[0], "node_util")
            out.add("mem_util", L, util[1])
        mem = call("nvmlDeviceGetMemoryInfo", h, post=lambda m: (num(m.used), num(m.total), num(m.free)))
        if mem:
            out.add("mem_used", L, mem[0], "node_mem_used")
            out.add("mem_total", L, mem[1])
            out.add("mem_free", L, mem[2])
        out.add("power", L, call("nvmlDeviceGetPowerUsage", h, post=lambda v: divided(v, 1000)), "node_power")
        out.add("energy", L, call("nvmlDeviceGetTotalEnergyConsumption", h, post=lambda v: divided(v, 1000)))
        out.add("temp", g.lbl(("sensor", "gpu")), call("nvmlDeviceGetTemperature", h, TEMPERATURE_GPU, post=num),
                "node_max_temp")
        for name, ctype in CLOCK_TYPES.items():
            out.add("clock", g.lbl(("clock", name)), call("nvmlDeviceGetClockInfo", h, ctype, post=lambda v: scaled(v, 1e6)))
        reasons_fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(call.nvml, "nvmlDeviceGetCurrentClocksEventReasons")
                      else "nvmlDeviceGetCurrentClocksThrottleReasons")
        reasons = call(reasons_fn, h, post=num)
        if reasons is not None:
            for bit, name in CLOCK_EVENT_REASONS.items():
                out.add("throttle", g.lbl(("reason", name)), 1 if int(reasons) & bit else 0)
        for etype, ev in ECC_TYPES.items():
            for counter, cv in ECC_COUNTERS.items():
                out.add("ecc", g.lbl(("error", etype), ("counter", counter)),
                        call("nvmlDeviceGetTotalEccErrors", h, ev, cv, post=num),
                        "node_ecc_uncorrected" if (etype, counter) == ("uncorrected", "volatile") else None)
        rows = call("nvmlDeviceGetRemappedRows", h, post=lambda r: tuple(num(x) for x in r[:4]))
        if rows and len(rows) == 4:
            out.add("remap", g.lbl(("cause", "correctable")), rows[0])
            out.add("remap", g.lbl(("cause", "uncorrectable")), rows[1])
            out.add("remap_pending", L, rows[2], "node_remap_pending")
            out.add("remap_failure", L, rows[3], "node_remap_failure")
        if self.pcie_throughput:
            # NVML samples a byte counter for 20 ms per call: 2 calls x 8 GPUs would hold a scrape
            # ~320 ms, so it is opt-in; on Hopper `gpuprof` gives PCIe bandwidth through GPM for free.
            for direction, counter in (("tx", PCIE_TX), ("rx", PCIE_RX)):
                out.add("pcie_bps", g.lbl(("direction", direction)),
                        call("nvmlDeviceGetPcieThroughput", h, counter, post=lambda v: scaled(v, 1024)))
        out.add("pcie_replay", L, call("nvmlDeviceGetPcieReplayCounter", h, post=num))
        self._fields(call, g, out)
        for link in g.links:
            out.add("nvlink_up", g.lbl(("link", link)), call("nvmlDeviceGetNvLinkState", h, link, post=num))
        out.add("procs", L, call("nvmlDeviceGetComputeRunningProcesses", h, post=len))
        pstate = call("nvmlDeviceGetPerformanceState", h, post=num)
        if pstate is not None and pstate != PSTATE_UNKNOWN:
            out.add("pstate", L, pstate)
        out.add("fan", L, call("nvmlDeviceGetFanSpeed", h, post=lambda v: divided(v, 100)))
        if mig == 1:
            self._mig(call, g, out)
        return mig_mode

    @staticmethod
    def _fields(call: Guard, g: Gpu, out: Out) -> None:
        """Memory temperature and per-link NVLink data counters in one nvmlDeviceGetFieldValues call."""
        ids = [(FI_DEV_MEMORY_TEMP, 0)]
        for link in g.links:
            ids += [(FI_NVLINK_DATA_TX_KIB, link), (FI_NVLINK_DATA_RX_KIB, link)]
        values = call("nvmlDeviceGetFieldValues", g.handle, ids,
                      post=lambda vs: [(fv.fieldId, fv.scopeId, field_value(fv)) for fv in vs])
        for fid, scope, value in values or ():
            if fid == FI_DEV_MEMORY_TEMP:
                out.add("temp", g.lbl(("sensor", "memory")), value)
            elif fid in (FI_NVLINK_DATA_TX_KIB, FI_NVLINK_DATA_RX_KIB) and value is not None:
                d = "tx" if fid == FI_NVLINK_DATA_TX_KIB else "rx"
                out.add("nvlink_bytes", g.lbl(("link", scope), ("direction", d)), value * 1024)

    @staticmethod
    def _mig(call: Guard, g: Gpu, out: Out) -> None:
        n = call("nvmlDeviceGetMaxMigDeviceCount", g.handle, post=num) or 0
        for i in range(min(int(n), 64)):
            # Empty MIG slots answer NotFound: that is the normal case, not an error.
            mh = call("nvmlDeviceGetMigDeviceHandleByIndex", g.handle, i, quiet=QUIET | {ERR_NOT_FOUND})
            if mh is None:
                continue
            gi = call("nvmlDeviceGetGpuInstanceId", mh, post=num)
            ci = call("nvmlDeviceGetComputeInstanceId", mh, post=num)
            profile = mig_profile(call("nvmlDeviceGetName", mh, post=text))
            uuid = call("nvmlDeviceGetUUID", mh, post=text) or ""
            ident = (("gpu", g.index), ("gpu_instance", "" if gi is None else gi),
                     ("compute_instance", "" if ci is None else ci), ("profile", profile))
            out.add("mig_info", format_labels(ident + (("uuid", uuid),)), 1)
            mem = call("nvmlDeviceGetMemoryInfo", mh, post=lambda m: (num(m.used), num(m.total)))
            if mem:
                labels = format_labels(ident)
                out.add("mig_used", labels, mem[0])
                out.add("mig_total", labels, mem[1])

    def _free_events(self, nvml: Any) -> None:
        if self.topo is not None and self.topo.event_set is not None:
            try:
                nvml.nvmlEventSetFree(self.topo.event_set)
            except Exception:
                pass
            self.topo.event_set = None

    def close(self) -> None:
        if self.session.ready:
            self._free_events(self.session.nvml)
        self.topo = None
        self.session.shutdown()


def metric_table(specs: dict[str, tuple[str, str, str]] = SPECS) -> str:
    """docs/agent.md's metric table, generated so that it cannot drift from the code."""
    rows = ["| metric | type | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {kind} | {help} |" for name, kind, help in specs.values()]
    return "\n".join(rows)
