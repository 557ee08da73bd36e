"""The gpu and gpuprof collectors against a fake pynvml replaying a real 8x H100 node, and each NVML error.

What must hold: a field NVML does not support disappears alone; a lost GPU is flagged and the
other GPUs stay intact; no driver is quiet NoData; init failures are reported and retried with
backoff; a hung NVML call cannot hold a scrape past its deadline; and no NVML answer, however odd,
lets an exception escape.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.exposition import encode, iter_samples
from collectors.node import gpu as gpumod
from collectors.node.gpu import GpuCollector, NvmlInitError, count_pci_gpus, cpulist, metric_table, mig_profile
from collectors.node.gpu_profiling import SPECS as PROF_SPECS
from collectors.node.gpu_profiling import GpuProfilingCollector
from collectors.registry import Context, NoData, Paths
from collectors.scrape import Scraper
from tests.support.fake_nvml import FakeMig, FakeNvml, a100_node, h100_node

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "gpu"


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def samples(fams) -> dict:
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(encode(fams))}


def value(got: dict, metric: str, /, **labels):
    return got.get((metric, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def names_for_gpu(got: dict, gpu: int) -> set[str]:
    return {n for (n, l) in got if ("gpu", str(gpu)) in l}


@pytest.fixture
def node(fixtures_dir):
    gpus, driver = h100_node(fixtures_dir)
    return FakeNvml(gpus, driver)


def make(fake, sysfs: str = "/nonexistent", clock=None, cls=GpuCollector, **options):
    ctx = Context(paths=Paths(sysfs=sysfs), nvml=fake, clock=clock or Clock(), options=options)
    return cls(ctx)


def pci_tree(root: Path, gpus: int, extra: dict[str, tuple[str, str, str | None]] | None = None) -> str:
    """A fake <sysfs>/bus/pci/devices with `gpus` NVIDIA 3D controllers bound to nvidia, plus `extra`."""
    devs = {f"0000:{0x53 + 0x11 * i:02x}:00.0": ("0x10de", "0x030200", "nvidia") for i in range(gpus)}
    devs.update(extra or {})
    base = root / "bus" / "pci" / "devices"
    drivers = root / "bus" / "pci" / "drivers"
    for name, (vendor, klass, driver) in devs.items():
        d = base / name
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        if driver:
            (drivers / driver).mkdir(parents=True, exist_ok=True)
            os.symlink(drivers / driver, d / "driver")
    return str(root)


# ----------------------------------------------------------------------------- the fake is faithful

def test_fake_mirrors_the_real_pynvml_api(node):
    assert len(node.api_functions) > 40
    for name in node.api_functions:
        assert hasattr(pynvml, name), f"pynvml has no {name}"
        fake_params = list(inspect.signature(getattr(node, name)).parameters)
        real_params = list(inspect.signature(getattr(pynvml, name)).parameters)
        assert fake_params == real_params, f"{name}: fake {fake_params} != real {real_params}"
    assert hasattr(pynvml, "c_nvmlGpmMetricsGet_t")
    # errors are pynvml's own classes, so `except pynvml.NVMLError_NotSupported` sees them
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        FakeNvml([]).nvmlDeviceGetCount()


def test_every_nvml_function_the_collectors_call_exists_in_pynvml():
    import re

    src = "".join((REPO / "collectors" / "node" / f).read_text() for f in ("gpu.py", "gpu_profiling.py"))
    pattern = r"(nvml(?:Device|System|Event|Gpm|Init|Shutdown)\w*)"
    called = set(re.findall(f'"{pattern}"', src)) | set(re.findall(rf"nvml\.{pattern}\(", src))
    assert len(called) > 30
    missing = sorted(n for n in called if not hasattr(pynvml, n))
    assert not missing, missing


# ----------------------------------------------------------------------------- a healthy node

def test_h100_node_values_and_golden(node, update_golden):
    c = make(node, collector_gpu_pcie_throughput=True)
    fams = c.collect()
    got = samples(fams)
    # identity and load replayed from the real dcgm-exporter capture
    assert value(got, "gangwatch_gpu_info", gpu=0, uuid="GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",
                 name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:53:00.0", mig_mode="disabled",
                 driver_version="580.105.08") == 1
    assert value(got, "gangwatch_gpu_power_watts", gpu=0) == pytest.approx(113.611)
    assert value(got, "gangwatch_gpu_power_watts", gpu=7) == pytest.approx(66.997)
    assert value(got, "gangwatch_gpu_temperature_celsius", gpu=2, sensor="gpu") == 26
    assert value(got, "gangwatch_gpu_temperature_celsius", gpu=2, sensor="memory") == 48
    assert value(got, "gangwatch_gpu_memory_total_bytes", gpu=0) == 85520809984
    assert value(got, "gangwatch_gpu_memory_used_bytes", gpu=0) == 76235669504
    assert value(got, "gangwatch_gpu_clock_hz", gpu=1, clock="memory") == 2619e6
    assert value(got, "gangwatch_gpu_clock_throttle_reason", gpu=1, reason="gpu_idle") == 1
    assert value(got, "gangwatch_gpu_energy_joules_total", gpu=3) == pytest.approx(1893412.554)
    assert value(got, "gangwatch_gpu_pcie_throughput_bytes_per_second", gpu=3, direction="rx") == 2211 * 1024
    assert value(got, "gangwatch_gpu_nvlink_data_bytes_total", gpu=1, link=17, direction="tx") == (1_200_000 + 1017) * 1024
    assert sum(1 for (n, l) in got if n == "gangwatch_gpu_nvlink_up" and ("gpu", "4") in l) == 18
    assert value(got, "gangwatch_gpu_compute_processes", gpu=0) == 1
    # topology: every pair joined through NVSwitch; PCIe ancestor is the NUMA node or the whole system
    assert value(got, "gangwatch_gpu_nvlink_peer_info", gpu=0, peer_gpu=5, links=18, via="nvswitch") == 1
    assert value(got, "gangwatch_gpu_topology_info", gpu=0, peer_gpu=3, level="node") == 1
    assert value(got, "gangwatch_gpu_topology_info", gpu=0, peer_gpu=4, level="system") == 1
    assert value(got, "gangwatch_gpu_affinity_info", gpu=5, numa_node=1, cpus="48-95,144-191") == 1
    assert value(got, "gangwatch_gpu_nvml_devices") == 8
    # no fan on SXM boards (NotSupported): left out, and not counted as an error
    assert not any(n == "gangwatch_gpu_fan_speed_ratio" for n, _ in got)
    assert not any(n == "gangwatch_gpu_nvml_errors_total" for n, _ in got)
    # without a readable PCI list, the bus count is unknown, not zero
    assert value(got, "gangwatch_gpu_pci_devices") is None and value(got, "gangwatch_gpu_missing") is None
    # static facts are discovered once per NVML session, not per scrape
    before = node.calls["nvmlDeviceGetTopologyCommonAncestor"]
    text = encode(c.collect())
    assert node.calls["nvmlDeviceGetTopologyCommonAncestor"] == before
    assert node.calls["nvmlInit"] == 1
    golden = GOLDEN / "h100-node.prom"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_golden_passes_promtool():
    out = subprocess.run(["promtool", "check", "metrics"], input=(GOLDEN / "h100-node.prom").read_bytes(),
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()


def test_docs_tables_are_generated_from_the_specs():
    page = (REPO / "docs" / "agent.md").read_text()
    assert metric_table(gpumod.SPECS) in page, "docs/agent.md's gpu table is stale: paste metric_table() output"
    assert metric_table(PROF_SPECS) in page, "docs/agent.md's gpuprof table is stale: paste metric_table(PROF_SPECS)"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_both_collectors_in_one_scrape_pass_promtool(node):
    node.fail("nvmlDeviceGetHandleByIndex", pynvml.NVML_ERROR_UNKNOWN, gpu=3)  # both count the same error
    s = Scraper([make(node), make(node, cls=GpuProfilingCollector, dcgm_modules=None)], timeout=2, cache_ttl=0)
    s.scrape()
    time.sleep(0.01)
    text = s.scrape().text
    s.close()
    assert 'gangwatch_gpu_nvml_errors_total{call="nvmlDeviceGetHandleByIndex",error="Unknown"} 1' in text
    assert 'gangwatch_gpu_prof_nvml_errors_total{call="nvmlDeviceGetHandleByIndex",error="Unknown"} 1' in text
    assert 'gangwatch_gpu_prof_sm_active_ratio{gpu="4"}' in text
    out = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()


# ----------------------------------------------------------------------------- isolation

def test_not_supported_drops_only_that_field(node):
    node.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=2)
    node.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_NOT_SUPPORTED)
    got = samples(make(node).collect())
    assert value(got, "gangwatch_gpu_power_watts", gpu=2) is None
    assert value(got, "gangwatch_gpu_power_watts", gpu=3) == pytest.approx(67.316)
    assert value(got, "gangwatch_gpu_temperature_celsius", gpu=2, sensor="gpu") == 26
    assert not any(n.startswith("gangwatch_gpu_remapped_rows") for n, _ in got)
    assert not any(n == "gangwatch_gpu_nvml_errors_total" for n, _ in got)


def test_gpu_is_lost_marks_that_gpu_only(node, fixtures_dir):
    node.lose(3)
    c = make(node)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_lost", gpu=3) == 1
    assert names_for_gpu(got, 3) == {"gangwatch_gpu_lost"}  # lost before it had a handle: identity unknown
    for g in (0, 1, 2, 4, 5, 6, 7):
        assert value(got, "gangwatch_gpu_lost", gpu=g) == 0
        assert value(got, "gangwatch_gpu_utilization_ratio", gpu=g) == 0
        assert value(got, "gangwatch_gpu_memory_total_bytes", gpu=g) == 85520809984
    # GPU lost after discovery keeps its identity
    fresh, driver = h100_node(fixtures_dir)
    fake = FakeNvml(fresh, driver)
    c2 = make(fake)
    c2.collect()
    fake.lose(6)
    got2 = samples(c2.collect())
    assert value(got2, "gangwatch_gpu_lost", gpu=6) == 1
    assert value(got2, "gangwatch_gpu_info", gpu=6, uuid="GPU-e64d69ca-b4b3-59b2-e78c-94f26c4db365",
                 name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:B9:00.0", mig_mode="",
                 driver_version="580.105.08") == 1
    assert value(got2, "gangwatch_gpu_power_watts", gpu=5) == pytest.approx(65.742)


def test_generic_nvml_error_drops_field_and_is_counted(node):
    node.fail("nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_UNKNOWN, gpu=1)
    node.fail("nvmlDeviceGetPcieReplayCounter", pynvml.NVML_ERROR_NO_PERMISSION)
    c = make(node)
    c.collect()
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_ecc_errors_total", gpu=1, error="corrected", counter="aggregate") is None
    assert value(got, "gangwatch_gpu_ecc_errors_total", gpu=0, error="corrected", counter="aggregate") == 2
    # 4 ECC calls per scrape on GPU 1, two scrapes; replay counter on 8 GPUs, two scrapes
    assert value(got, "gangwatch_gpu_nvml_errors_total", call="nvmlDeviceGetTotalEccErrors", error="Unknown") == 8
    assert value(got, "gangwatch_gpu_nvml_errors_total", call="nvmlDeviceGetPcieReplayCounter",
                 error="NoPermission") == 16
    assert value(got, "gangwatch_gpu_power_watts", gpu=1) == pytest.approx(68.347)


def test_mig_enabled_on_one_gpu(node):
    mib = 1 << 20
    node.gpus[5].mig = [
        FakeMig(1, 0, "3g.40gb", 40192 * mib, 20111 * mib, "MIG-5b4c0b4e-9b1c-5d0f-8a51-0c8f5e2f1a01"),
        FakeMig(5, 0, "2g.20gb", 19968 * mib, 0, "MIG-0d1e8a43-57f1-5b2a-b07e-5b3c2c0f8e02"),
        FakeMig(13, 0, "1g.10gb", 9856 * mib, 3 * mib, "MIG-a2c4e6f8-1357-5b9d-8f0e-2468ace13503"),
    ]
    got = samples(make(node).collect())
    assert value(got, "gangwatch_gpu_info", gpu=5, uuid="GPU-39e28159-8c62-ee71-64db-b748edd61e15",
                 name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:A8:00.0", mig_mode="enabled",
                 driver_version="580.105.08") == 1
    assert value(got, "gangwatch_gpu_mig_info", gpu=5, gpu_instance=1, compute_instance=0, profile="3g.40gb",
                 uuid="MIG-5b4c0b4e-9b1c-5d0f-8a51-0c8f5e2f1a01") == 1
    assert value(got, "gangwatch_gpu_mig_memory_used_bytes", gpu=5, gpu_instance=1, compute_instance=0,
                 profile="3g.40gb") == 20111 * mib
    assert value(got, "gangwatch_gpu_mig_memory_total_bytes", gpu=5, gpu_instance=13, compute_instance=0,
                 profile="1g.10gb") == 9856 * mib
    assert sum(1 for n, _ in got if n == "gangwatch_gpu_mig_info") == 3
    # NVML has no utilisation under MIG: left out for that GPU only, and empty slots are no error
    assert value(got, "gangwatch_gpu_utilization_ratio", gpu=5) is None
    assert value(got, "gangwatch_gpu_utilization_ratio", gpu=4) == 0
    assert value(got, "gangwatch_gpu_power_watts", gpu=5) == pytest.approx(65.742)
    assert not any(n == "gangwatch_gpu_nvml_errors_total" for n, _ in got)


def test_xid_events_are_counted_by_xid(node):
    c = make(node)
    c.collect()
    node.xid(2, 79)
    node.xid(2, 79)
    node.xid(4, 48)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_xid_errors_total", gpu=2, xid=79) == 2
    assert value(got, "gangwatch_gpu_xid_errors_total", gpu=4, xid=48) == 1
    node.xid(2, 79)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_xid_errors_total", gpu=2, xid=79) == 3
    assert node.events == []


def test_xid_events_unsupported_are_skipped(node):
    node.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED)
    c = make(node)
    got = samples(c.collect())
    assert "nvmlEventSetWait" not in node.calls
    assert value(got, "gangwatch_gpu_power_watts", gpu=0) == pytest.approx(113.611)


# ----------------------------------------------------------------------------- per-node rollups

def per_gpu(got: dict, metric: str, /, **labels) -> dict[str, float]:
    """{gpu index: value} of one per-GPU family, restricted to the series carrying `labels`."""
    want = {(k, str(v)) for k, v in labels.items()}
    return {dict(l)["gpu"]: v for (n, l), v in got.items() if n == metric and want <= set(l)}


NODE_ROLLUPS = {  # rollup -> (per-GPU family and labels, how it combines them)
    "gangwatch_gpu_node_utilization_ratio": (("gangwatch_gpu_utilization_ratio", {}), lambda vs: sum(vs) / len(vs)),
    "gangwatch_gpu_node_memory_used_bytes": (("gangwatch_gpu_memory_used_bytes", {}), sum),
    "gangwatch_gpu_node_power_watts": (("gangwatch_gpu_power_watts", {}), sum),
    "gangwatch_gpu_node_max_temperature_celsius": (("gangwatch_gpu_temperature_celsius", {"sensor": "gpu"}), max),
    "gangwatch_gpu_node_row_remap_pending": (("gangwatch_gpu_row_remap_pending", {}), lambda vs: sum(1 for v in vs if v)),
    "gangwatch_gpu_node_row_remap_failure": (("gangwatch_gpu_row_remap_failure", {}), lambda vs: sum(1 for v in vs if v)),
    "gangwatch_gpu_node_ecc_uncorrected_errors_total": (
        ("gangwatch_gpu_ecc_errors_total", {"error": "uncorrected", "counter": "volatile"}), sum),
}


def assert_rollups_agree(got: dict) -> None:
    """Every rollup present equals its per-GPU family combined; absent exactly when that family is."""
    for rollup, ((metric, labels), combine) in NODE_ROLLUPS.items():
        values = list(per_gpu(got, metric, **labels).values())
        if values:
            assert value(got, rollup) == pytest.approx(combine(values)), rollup
        else:
            assert value(got, rollup) is None, rollup
    assert value(got, "gangwatch_gpu_node_lost") == sum(per_gpu(got, "gangwatch_gpu_lost").values())
    assert value(got, "gangwatch_gpu_node_gpus") == sum(1 for v in per_gpu(got, "gangwatch_gpu_lost").values() if v == 0)


def test_node_rollups_equal_the_per_gpu_values(node):
    for g, util, used, power_mw, temp in [(1, 97, 70 << 30, 698_123, 71), (4, 35, 12 << 30, 402_500, 64),
                                          (6, 100, 80 << 30, 701_007, 83)]:
        node.gpus[g].util_gpu, node.gpus[g].mem_used, node.gpus[g].power_mw, node.gpus[g].temp = util, used, power_mw, temp
    node.gpus[2].remap = (3, 1, 1, 0)  # pending: needs a reset
    node.gpus[7].remap = (0, 9, 0, 1)  # failed: needs service
    node.gpus[7].ecc = {(0, 0): 4, (0, 1): 6, (1, 0): 5, (1, 1): 11}  # only (uncorrected, volatile) counts
    node.gpus[3].ecc = {(0, 0): 0, (0, 1): 0, (1, 0): 2, (1, 1): 2}
    c = make(node)
    got = samples(c.collect())
    assert_rollups_agree(got)
    # and the figures themselves, worked out by hand from the capture plus the values above
    assert value(got, "gangwatch_gpu_node_gpus") == 8 and value(got, "gangwatch_gpu_node_lost") == 0
    assert value(got, "gangwatch_gpu_node_utilization_ratio") == pytest.approx((0.97 + 0.35 + 1.0) / 8)
    assert value(got, "gangwatch_gpu_node_memory_used_bytes") == 76_235_669_504 + (162 << 30)
    assert value(got, "gangwatch_gpu_node_power_watts") == pytest.approx(
        113.611 + 698.123 + 65.709 + 67.316 + 402.5 + 65.742 + 701.007 + 66.997)
    assert value(got, "gangwatch_gpu_node_max_temperature_celsius") == 83
    assert value(got, "gangwatch_gpu_node_row_remap_pending") == 1
    assert value(got, "gangwatch_gpu_node_row_remap_failure") == 1
    assert value(got, "gangwatch_gpu_node_ecc_uncorrected_errors_total") == 7
    # computed from the readings already taken: one utilisation call per GPU per scrape, no more
    before = node.calls["nvmlDeviceGetUtilizationRates"]
    c.collect()
    assert node.calls["nvmlDeviceGetUtilizationRates"] - before == 8


def test_node_rollups_without_readings_are_left_out(node):
    node.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_NOT_SUPPORTED)
    node.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_NOT_SUPPORTED)  # e.g. pre-Ampere
    node.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN)
    node.fail("nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_NOT_SUPPORTED)
    node.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, gpu=0)  # one GPU only: the sum of the others
    got = samples(make(node).collect())
    assert_rollups_agree(got)
    for rollup in ("utilization_ratio", "row_remap_pending", "row_remap_failure", "max_temperature_celsius",
                   "ecc_uncorrected_errors_total"):
        assert value(got, f"gangwatch_gpu_node_{rollup}") is None, rollup
    assert value(got, "gangwatch_gpu_node_power_watts") == pytest.approx(
        68.347 + 65.709 + 67.316 + 68.717 + 65.742 + 67.328 + 66.997)
    assert value(got, "gangwatch_gpu_node_gpus") == 8 and value(got, "gangwatch_gpu_node_lost") == 0


def test_node_rollups_count_lost_gpus_and_skip_their_readings(fixtures_dir):
    gpus, driver = h100_node(fixtures_dir)
    gpus[1].util_gpu, gpus[5].util_gpu = 80, 40
    fake = FakeNvml(gpus, driver)
    fake.lose(3)  # lost before discovery: no handle at all
    c = make(fake)
    c.collect()
    fake.lose(0)  # lost after discovery: its memory and power were the largest
    got = samples(c.collect())
    assert_rollups_agree(got)
    assert value(got, "gangwatch_gpu_node_lost") == 2
    assert value(got, "gangwatch_gpu_node_gpus") == 6
    assert value(got, "gangwatch_gpu_node_utilization_ratio") == pytest.approx(1.2 / 6)
    assert value(got, "gangwatch_gpu_node_memory_used_bytes") == 0
    assert value(got, "gangwatch_gpu_node_power_watts") == pytest.approx(
        68.347 + 65.709 + 68.717 + 65.742 + 67.328 + 66.997)


def test_node_rollups_skip_mig_gpus_without_utilisation(node):
    node.gpus[5].mig = [FakeMig(1, 0, "7g.80gb", 80 << 30, 1 << 30, "MIG-5b4c0b4e-9b1c-5d0f-8a51-0c8f5e2f1a01")]
    node.gpus[2].util_gpu = 70
    got = samples(make(node).collect())
    assert_rollups_agree(got)
    assert value(got, "gangwatch_gpu_node_utilization_ratio") == pytest.approx(0.7 / 7)  # over 7 GPUs, not 8
    assert value(got, "gangwatch_gpu_node_gpus") == 8


# ----------------------------------------------------------------------------- init, driver, bus

def test_library_not_found_is_quiet_nodata(node):
    node.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(NoData):
        make(node).collect()
    s = Scraper([make(node)], timeout=0.5, cache_ttl=0)
    got = {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(s.scrape().text)}
    assert got[("gangwatch_scrape_collector_success", (("collector", "gpu"),))] == 1
    assert not any(n.startswith("gangwatch_gpu_") for n, _ in got)
    s.close()


def test_real_pynvml_without_driver_is_nodata():
    # This machine has no NVIDIA driver: the lazily imported real pynvml must end in NoData.
    if Path("/dev/nvidiactl").exists():
        pytest.skip("not applicable here: this host has an NVIDIA driver")
    for cls in (GpuCollector, GpuProfilingCollector):
        c = cls(Context(paths=Paths(sysfs="/nonexistent"), options={"dcgm_modules": None}))
        with pytest.raises(NoData):
            c.collect()
        c.close()


def test_driver_not_loaded_with_gpus_on_the_bus_flags_them_missing(node, tmp_path):
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    sysfs = pci_tree(tmp_path, 8)
    got = samples(make(node, sysfs=sysfs).collect())
    assert value(got, "gangwatch_gpu_pci_devices") == 8
    assert value(got, "gangwatch_gpu_nvml_devices") == 0
    assert value(got, "gangwatch_gpu_missing") == 8
    assert not any(n.startswith("gangwatch_gpu_node_") for n, _ in got)  # NVML does not work: no rollups
    with pytest.raises(NoData):
        make(node, sysfs=str(tmp_path / "empty")).collect()


def test_lib_rm_version_mismatch_fails_and_retries_with_backoff(node):
    node.init_error = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    clock = Clock()
    c = make(node, clock=clock)
    with pytest.raises(NvmlInitError, match="LibRmVersionMismatch"):
        c.collect()
    with pytest.raises(NvmlInitError):
        c.collect()
    assert node.calls["nvmlInit"] == 1  # within the backoff: no new attempt
    clock.t += 1.5
    with pytest.raises(NvmlInitError):
        c.collect()
    assert node.calls["nvmlInit"] == 2
    clock.t += 1.5  # backoff doubled to 2 s: still waiting
    with pytest.raises(NvmlInitError):
        c.collect()
    assert node.calls["nvmlInit"] == 2
    node.init_error = None  # e.g. the node was rebooted into the new driver
    clock.t += 1.0
    got = samples(c.collect())
    assert node.calls["nvmlInit"] == 3
    assert value(got, "gangwatch_gpu_nvml_devices") == 8
    # through the Scraper the failure is a failed collector, not a failed scrape
    node.init_error = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    s = Scraper([make(node)], timeout=0.5, cache_ttl=0)
    assert 'gangwatch_scrape_collector_success{collector="gpu"} 0' in s.scrape().text
    s.close()


def test_device_count_failure_reinitialises_nvml(node):
    clock = Clock()
    c = make(node, clock=clock)
    c.collect()
    node.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(NvmlInitError):
        c.collect()
    del node.errors[("nvmlDeviceGetCount", None)]
    clock.t += 2
    got = samples(c.collect())
    assert node.calls["nvmlInit"] == 2 and node.initialised == 1
    assert value(got, "gangwatch_gpu_lost", gpu=7) == 0
    c.close()
    assert node.initialised == 0


def test_gpu_fallen_off_the_bus_is_flagged(fixtures_dir, tmp_path):
    gpus, driver = h100_node(fixtures_dir)
    fake = FakeNvml(gpus[:7], driver)  # the driver sees 7 of the 8 GPUs on the bus
    sysfs = pci_tree(tmp_path, 8, {
        "0000:05:00.0": ("0x10de", "0x068000", None),      # NVSwitch: not a GPU
        "0000:53:00.1": ("0x10de", "0x040300", None),      # HDMI audio function
        "0000:e1:00.0": ("0x10de", "0x030200", "vfio-pci"),  # passed through to a VM
        "0000:18:00.0": ("0x8086", "0x030000", None),      # the BMC's VGA
    })
    assert count_pci_gpus(sysfs) == 8
    got = samples(make(fake, sysfs=sysfs).collect())
    assert value(got, "gangwatch_gpu_pci_devices") == 8
    assert value(got, "gangwatch_gpu_nvml_devices") == 7
    assert value(got, "gangwatch_gpu_missing") == 1


# ----------------------------------------------------------------------------- deadlines

def test_hung_nvml_call_cannot_hold_the_scrape(node):
    node.hang("nvmlDeviceGetPowerUsage", 30)
    from collectors.node.pressure import PressureCollector

    ctx = Context(paths=Paths(procfs="/proc"))
    s = Scraper([make(node), PressureCollector(ctx)], timeout=0.5, cache_ttl=0)
    try:
        t0 = time.monotonic()
        text = s.scrape().text
        assert time.monotonic() - t0 < 1.0
        assert 'gangwatch_scrape_collector_success{collector="gpu"} 0' in text
        assert 'gangwatch_scrape_collector_success{collector="pressure"} 1' in text
        t0 = time.monotonic()
        text = s.scrape().text  # the stuck worker is reported, not stacked
        assert time.monotonic() - t0 < 1.0
        assert node.calls["nvmlDeviceGetPowerUsage"] == 1
    finally:
        node.release()
        s.close()


# ----------------------------------------------------------------------------- profiling

def test_gpm_first_scrape_empty_then_interval_metrics(node):
    c = make(node, cls=GpuProfilingCollector, dcgm_modules=None)
    first = samples(c.collect())
    assert set(n for n, _ in first) == {"gangwatch_gpu_prof_source_info"}
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_prof_sm_active_ratio", gpu=0) == pytest.approx(0.885)
    assert value(got, "gangwatch_gpu_prof_tensor_active_ratio", gpu=3, pipe="hmma") == pytest.approx(0.615)
    assert value(got, "gangwatch_gpu_prof_dram_active_ratio", gpu=7) == pytest.approx(0.35)
    assert value(got, "gangwatch_gpu_prof_nvlink_bytes_per_second", gpu=1, direction="tx") == 149000.0 * (1 << 20)
    assert value(got, "gangwatch_gpu_prof_pcie_bytes_per_second", gpu=1, direction="rx") == 950.5 * (1 << 20)
    assert value(got, "gangwatch_gpu_prof_source_info", source="gpm") == 1
    assert node.calls["nvmlGpmSampleAlloc"] == 16  # two buffers per GPU, allocated once
    c.collect()
    assert node.calls["nvmlGpmSampleAlloc"] == 16
    c.close()
    assert node.calls["nvmlGpmSampleFree"] == 16


def test_gpm_failure_on_one_gpu_leaves_the_others(node):
    c = make(node, cls=GpuProfilingCollector, dcgm_modules=None)
    c.collect()
    node.fail("nvmlGpmSampleGet", pynvml.NVML_ERROR_UNKNOWN, gpu=4)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_prof_sm_active_ratio", gpu=4) is None
    assert value(got, "gangwatch_gpu_prof_sm_active_ratio", gpu=5) == pytest.approx(0.885)
    assert value(got, "gangwatch_gpu_prof_nvml_errors_total", call="nvmlGpmSampleGet", error="Unknown") == 1
    del node.errors[("nvmlGpmSampleGet", 4)]
    assert value(samples(c.collect()), "gangwatch_gpu_prof_sm_active_ratio", gpu=4) is None  # re-priming
    assert value(samples(c.collect()), "gangwatch_gpu_prof_sm_active_ratio", gpu=4) == pytest.approx(0.885)


def test_gpus_without_gpm_leave_the_series_out():
    gpus, driver = a100_node()
    fake = FakeNvml(gpus, driver)
    with pytest.raises(NoData):
        make(fake, cls=GpuProfilingCollector, dcgm_modules=None).collect()
    # and the gpu collector is unaffected on the same node
    got = samples(make(fake).collect())
    assert value(got, "gangwatch_gpu_clock_hz", gpu=0, clock="memory") == 1593e6
    assert sum(1 for n, l in got if n == "gangwatch_gpu_nvlink_up" and ("gpu", "0") in l) == 12


class FakeDcgm:
    """The slice of DCGM's Python bindings the collector uses, with DCGM's real value shapes."""

    def __init__(self, values: dict[int, dict[int, float]]):
        outer = self

        class Handle:
            def __init__(self, ipAddress, opMode):
                outer.address = ipAddress

            def GetSystem(self):
                return SimpleNamespace(GetDefaultGroup=lambda: SimpleNamespace(samples=Samples()))

            def Shutdown(self):
                outer.closed = True

        class Samples:
            def WatchFields(self, fieldGroup, updateFreq, maxKeepAge, maxKeepSamples):
                outer.watched = fieldGroup.fieldIds

            def GetLatest(self, fieldGroup):
                if outer.broken:
                    raise RuntimeError("DCGM_ST_CONNECTION_NOT_VALID")
                return SimpleNamespace(values={
                    gpu: {fid: SimpleNamespace(values=[SimpleNamespace(value=v, isBlank=False)])
                          for fid, v in fields.items()} for gpu, fields in values.items()})

        class FieldGroup:
            def __init__(self, dcgmHandle, name, fieldIds):
                self.fieldIds = fieldIds

            def Delete(self):
                pass

        self.broken = False
        self.closed = False
        self.modules = {"pydcgm": SimpleNamespace(DcgmHandle=Handle, DcgmFieldGroup=FieldGroup),
                        "dcgm_structs": SimpleNamespace(DCGM_OPERATION_MODE_AUTO=1), "dcgm_fields": SimpleNamespace()}


def test_dcgm_profiling_fields_are_preferred_and_fall_back_to_gpm(node):
    # values as dcgm-exporter shows them for the same fields (exporters-real/dcgm, T4 capture)
    dcgm = FakeDcgm({0: {1001: 0.156205, 1002: 0.11, 1005: 0.092781, 1004: 0.005822, 1009: 4791810.0,
                         1010: 6935930.0, 1011: 2.7e300}})
    c = make(node, cls=GpuProfilingCollector, dcgm_modules=dcgm.modules)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_prof_source_info", source="dcgm") == 1
    assert value(got, "gangwatch_gpu_prof_graphics_engine_active_ratio", gpu=0) == pytest.approx(0.156205)
    assert value(got, "gangwatch_gpu_prof_pcie_bytes_per_second", gpu=0, direction="rx") == 6935930
    assert value(got, "gangwatch_gpu_prof_nvlink_bytes_per_second", gpu=0, direction="tx") is None  # blank
    assert "nvmlInit" not in node.calls
    dcgm.broken = True
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_prof_source_info", source="gpm") == 1
    assert dcgm.closed


# ----------------------------------------------------------------------------- pure helpers

@given(st.lists(st.integers(min_value=0, max_value=(1 << 64) - 1), max_size=6))
def test_cpulist_round_trips(masks):
    listed = cpulist(masks)
    cpus = set()
    for part in filter(None, listed.split(",")):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    assert cpus == {w * 64 + b for w, m in enumerate(masks) for b in range(64) if m >> b & 1}


@given(st.text())
def test_mig_profile_never_raises(name):
    assert isinstance(mig_profile(name), str)
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"


# ----------------------------------------------------------------------------- nothing escapes

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.binary(max_size=8),
    st.lists(st.integers(), max_size=4),
    st.builds(SimpleNamespace, gpu=st.integers(), memory=st.floats(), used=st.integers(), total=st.none(),
              free=st.text(max_size=3), busId=st.binary(max_size=20), isSupportedDevice=st.integers()),
)
NVML_CODES = st.sampled_from([1, 2, 3, 4, 6, 9, 10, 12, 13, 15, 17, 18, 19, 21, 999])


class Chaos:
    """Wraps a fake: each nvml* call answers normally, with an odd value, or with an error."""

    def __init__(self, fake: FakeNvml, data):
        self._fake, self._data = fake, data

    def __getattr__(self, name):
        real_attr = getattr(self._fake, name)
        if not (name.startswith("nvml") and callable(real_attr)) or name in ("nvmlInit", "nvmlShutdown"):
            return real_attr

        def call(*args):
            mode = self._data.draw(st.sampled_from(["real", "real", "odd", "nvml", "python"]))
            if mode == "odd":
                return self._data.draw(ODD_VALUES)
            if mode == "nvml":
                raise pynvml.NVMLError(self._data.draw(NVML_CODES))
            if mode == "python":
                raise self._data.draw(st.sampled_from([ValueError("x"), TypeError("y"), OSError(5, "EIO"),
                                                       KeyError("z"), ZeroDivisionError()]))
            return real_attr(*args)

        return call


@settings(max_examples=int(os.environ.get("GW_HYPOTHESIS_EXAMPLES", "100")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_no_exception_escapes_for_arbitrary_nvml_answers(data):
    gpus, driver = a100_node()
    for g in gpus[:3]:
        g.gpm_supported = True
        g.gpm = {2: 50.0, 60: 10.0}
    gpus[1].mig = [FakeMig(1, 0, "3g.40gb", 1 << 30, 1 << 20, "MIG-x")]
    fake = Chaos(FakeNvml(gpus[:3], driver), data)
    for cls in (GpuCollector, GpuProfilingCollector):
        c = make(fake, cls=cls, dcgm_modules=None)
        for _ in range(3):
            try:
                fams = c.collect()
            except (NoData, NvmlInitError):  # the two deliberate signals the Scraper understands
                continue
            list(iter_samples(encode(fams)))  # and whatever came out is valid exposition
        c.close()


# ----------------------------------------------------------------------------- the device check's own logic

def test_device_check_passes_on_the_fake_node_and_catches_a_lost_gpu(node):
    from tests import gpu_device_check as dc

    s = Scraper([make(node), make(node, cls=GpuProfilingCollector, dcgm_modules=None)], timeout=2, cache_ttl=0)
    s.scrape()
    text = s.scrape().text
    s.close()
    rep = dc.Report()
    dc.checks(dc.parse(text), rep, 0.1, [0.01])
    assert [r for r in rep.rows if r[0] == "FAIL"] == []
    assert ("PASS", "GPU profiling source", "gpm") in rep.rows
    assert len(dc.parse(text)) == len(list(iter_samples(text)))  # its stdlib parser reads what we write
    node.lose(2)
    rep = dc.Report()
    dc.checks(dc.parse(encode(make(node).collect())), rep, 0.1, [0.01])
    assert ("FAIL", "no GPU lost") in [(s_, c) for s_, c, _ in rep.rows]


def test_gpu_lost_before_it_has_a_handle_is_flagged_and_rediscovered_later(node):
    node.fail("nvmlDeviceGetHandleByIndex", pynvml.NVML_ERROR_GPU_IS_LOST)
    clock = Clock()
    c = make(node, clock=clock)
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_lost", gpu=0) == 1
    assert value(got, "gangwatch_gpu_nvml_devices") == 8
    del node.errors[("nvmlDeviceGetHandleByIndex", None)]
    c.collect()
    assert node.calls["nvmlDeviceGetHandleByIndex"] == 8  # not retried on every scrape
    clock.t += 61
    got = samples(c.collect())
    assert value(got, "gangwatch_gpu_lost", gpu=0) == 0
    assert value(got, "gangwatch_gpu_power_watts", gpu=0) == pytest.approx(113.611)


def test_pcie_throughput_is_opt_in(node):
    """Each NVML PCIe throughput reading blocks 20 ms: by default the scrape must not pay for it."""
    names = {n for n, _ in samples(make(node).collect())}
    assert "gangwatch_gpu_pcie_throughput_bytes_per_second" not in names
    assert "gangwatch_gpu_pcie_replays_total" in names
    names = {n for n, _ in samples(make(node, collector_gpu_pcie_throughput=True).collect())}
    assert "gangwatch_gpu_pcie_throughput_bytes_per_second" in names
