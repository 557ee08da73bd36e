"""The jobs collector: cgroup_exporter's v1/v2 trees (agreeing with its tests' values), our own v2
tree with io.stat, pressure and bad input, GPU->job through NVML and the prolog-written folder, and
the Slurm prolog/epilog scripts themselves."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.exposition import encode, iter_samples
from collectors.node.jobs import (MAX_JOBS_PER_GPU, JobsCollector, discover_jobs, job_from_cgroup_path,
                                  job_from_proc_cgroup, parse_cpu_list, parse_diskstats_names, parse_flat_keyed, parse_io_stat,
                                  parse_mapping_lines, parse_status_uid, parse_uevent_devname)
from collectors.registry import Context, NoData, Paths
from tests.support import ttar
from tests.support.fake_nvml import FakeNvml, h100_node
from tests.support.golden import assert_promtool_clean, check_golden

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "jobs"
HOST = REPO / "tests" / "data" / "jobs" / "host"
PROLOG = REPO / "deploy" / "slurm" / "prolog-gangwatch.sh"
EPILOG = REPO / "deploy" / "slurm" / "epilog-gangwatch.sh"


@pytest.fixture(scope="module")
def cgroup_exporter_tree(tmp_path_factory, fixtures_dir) -> Path:
    """treydock/cgroup_exporter's fixtures.ttar unpacked: v1 controllers and a v2 tree side by side."""
    dest = tmp_path_factory.mktemp("cgroup-exporter")
    ttar.unpack(str(fixtures_dir / "cgroup_exporter" / "fixtures.ttar"), str(dest))
    return dest / "fixtures"


def collector(cgroup_root, procfs, sysfs="/nonexistent", mapping=None, nvml=None) -> JobsCollector:
    opts = {"collector_jobs_cgroup_root": str(cgroup_root), "collector_jobs_gpu_mapping_dir": str(mapping or "/nonexistent"),
            "collector_jobs_nvml": nvml is not None}
    return JobsCollector(Context(paths=Paths(str(procfs), str(sysfs), "/"), nvml=nvml, options=opts))


def samples(text):
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


def value(got, name, **labels):
    return got[(name, tuple(sorted(labels.items())))]


# ------------------------------------------------------------------ cgroup_exporter's trees


def test_cgroup_exporter_trees_agree_with_its_tests(cgroup_exporter_tree, update_golden):
    text = encode(collector(cgroup_exporter_tree, cgroup_exporter_tree / "proc").collect())
    check_golden(GOLDEN / "cgroup_exporter.prom", text, update_golden)
    got = samples(text)
    # TestCollectSLURM (v1): two jobs, job 10's values
    assert {l["jobid"] for (n, ls), _ in got.items() if n == "gangwatch_job_info" for l in [dict(ls)]} == {"4", "10", "11"}
    assert value(got, "gangwatch_job_cpu_seconds_total", jobid="10") == 0.007710215
    assert value(got, "gangwatch_job_cpu_mode_seconds_total", jobid="10", mode="user") == 0
    assert value(got, "gangwatch_job_cpu_mode_seconds_total", jobid="10", mode="system") == 0
    assert value(got, "gangwatch_job_cpus", jobid="10") == 2
    assert value(got, "gangwatch_job_memory_anon_bytes", jobid="10") == 311296  # its memoryRSS
    assert value(got, "gangwatch_job_memory_file_bytes", jobid="10") == 4096  # its memoryCache
    assert value(got, "gangwatch_job_memory_usage_bytes", jobid="10") == 356352
    assert value(got, "gangwatch_job_memory_limit_bytes", jobid="10") == 2147483648
    assert value(got, "gangwatch_job_info", jobid="10", uid="20821", cgroup_version="v1") == 1
    # TestCollectv2SLURM: job 4
    assert value(got, "gangwatch_job_cpu_seconds_total", jobid="4") == 0.126686
    assert value(got, "gangwatch_job_cpu_mode_seconds_total", jobid="4", mode="user") == 0.049043
    assert value(got, "gangwatch_job_cpu_mode_seconds_total", jobid="4", mode="system") == 0.077642
    assert value(got, "gangwatch_job_cpus", jobid="4") == 1
    # its memoryRSS on v2 is anon + file
    assert value(got, "gangwatch_job_memory_anon_bytes", jobid="4") + \
        value(got, "gangwatch_job_memory_file_bytes", jobid="4") == 2777088
    assert value(got, "gangwatch_job_memory_usage_bytes", jobid="4") == 5660672
    assert value(got, "gangwatch_job_memory_limit_bytes", jobid="4") == 1835008000
    assert value(got, "gangwatch_job_memory_peak_bytes", jobid="4") == 7229440
    # the uid comes from the job's user task (pid 49276), not slurmstepd's own (root) process
    assert value(got, "gangwatch_job_info", jobid="4", uid="20821", cgroup_version="v2") == 1


def test_process_cgroup_files_of_the_fixture(cgroup_exporter_tree):
    proc = cgroup_exporter_tree / "proc"
    assert job_from_proc_cgroup((proc / "49276" / "cgroup").read_text()).jobid == "4"
    assert job_from_proc_cgroup((proc / "43310" / "cgroup").read_text()) is None  # slurmstepd itself
    assert job_from_proc_cgroup((proc / "67998" / "cgroup").read_text()) is None  # a login session


@pytest.mark.parametrize("path,want", [
    ("/slurm/uid_20821/job_10/step_batch/task_0", ("10", "20821")),
    ("/system.slice/slurmstepd.scope/job_4/step_0/user/task_0", ("4", None)),
    ("/slurm_node01/uid_1002/job_1300/step_0", ("1300", "1002")),
    ("/system.slice/node01_slurmstepd.scope/job_77/step_extern/user", ("77", None)),
    ("/slurmstepd.scope/job_5", ("5", None)),
    ("/slurm/job_6/step_0", ("6", None)),
    ("/system.slice/slurmstepd.scope/system", None),
    ("/user.slice/user-1.slice/job_5/x", None),
    ("/slurm/uid_1/job_12x/step_0", None),
    ("/system.slice/slurmstepd.scope/job_/x", None),
])
def test_job_from_cgroup_path(path, want):
    ref = job_from_cgroup_path(path)
    assert (None if ref is None else (ref.jobid, ref.uid)) == want


# ------------------------------------------------------------------ our v2 host, NVML and the mapping folder


@pytest.fixture
def fake_nvml(fixtures_dir):
    gpus, driver = h100_node(fixtures_dir)
    gpus[2].procs, gpus[2].mem_used = 2, 10 << 30  # pids 4000 (job 1234) and 4001 (job 1235), 10 GiB each
    gpus[5].procs = 3  # 4000, 4001, and 4002 which is no job's
    nvml = FakeNvml(gpus, driver)
    nvml.fail("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=3)
    return nvml


def host_collector(nvml=None, mapping=HOST / "gpu-jobs"):
    return collector(HOST / "sys" / "fs" / "cgroup", HOST / "proc", HOST / "sys", mapping, nvml)


def test_host_golden(fake_nvml, update_golden):
    col = host_collector(fake_nvml)
    text = encode(col.collect())
    check_golden(GOLDEN / "host.prom", text, update_golden)
    got = samples(text)
    # GPU -> job: mapping files (GPUs 0, 1, 3), NVML processes (GPUs 0, 2, 5); mapping wins on GPU 0
    gpu = {(l["jobid"], l["gpu"]): l["source"] for (n, ls), _ in got.items()
           if n == "gangwatch_job_gpu_info" for l in [dict(ls)]}
    assert gpu == {("1234", "0"): "mapping", ("1234", "1"): "mapping", ("1236", "3"): "mapping",
                   ("1234", "2"): "nvml", ("1235", "2"): "nvml", ("1234", "5"): "nvml", ("1235", "5"): "nvml"}
    assert value(got, "gangwatch_job_gpu_memory_used_bytes", jobid="1235", gpu="2") == 10 << 30
    assert value(got, "gangwatch_job_gpu_memory_used_bytes", jobid="1234", gpu="0") == fake_nvml.gpus[0].mem_used
    # per-job rollups: one gangwatch_job_gpus per job = its gangwatch_job_gpu_info pairs
    assert {jobid: value(got, "gangwatch_job_gpus", jobid=jobid) for jobid in ("1234", "1235", "1236")} == \
        {jobid: sum(1 for j, _ in gpu if j == jobid) for jobid in ("1234", "1235", "1236")} == \
        {"1234": 4, "1235": 2, "1236": 1}
    # job 1236's only GPU (3) answers GpuIsLost: its utilisation is unknown, not 0
    assert value(got, "gangwatch_job_gpu_utilization_ratio", jobid="1234") == 0
    assert ("gangwatch_job_gpu_utilization_ratio", (("jobid", "1236"),)) not in got
    # hostile lines (a quote, a path, a passwd line), the temp file, the folder, "notagpu": all refused
    assert col.rejected_lines == 3
    # io.stat devices named through sysfs uevent, then /proc/diskstats, else left as MAJ:MIN
    assert value(got, "gangwatch_job_io_read_bytes_total", jobid="1234", device="nvme0n1") == 1099511627776
    assert value(got, "gangwatch_job_io_reads_total", jobid="1234", device="sda") == 1
    assert value(got, "gangwatch_job_io_writes_total", jobid="1234", device="253:7") == 2
    # PSI totals are microseconds in the file, seconds here
    assert value(got, "gangwatch_job_pressure_waiting_seconds_total", jobid="1234", resource="io") == 987.654321
    assert value(got, "gangwatch_job_pressure_stalled_seconds_total", jobid="1234", resource="cpu") == 0.25
    assert value(got, "gangwatch_job_cpus", jobid="1234") == 32
    assert value(got, "gangwatch_job_memory_oom_kills_total", jobid="1234") == 2
    assert ("gangwatch_job_memory_limit_bytes", (("jobid", "1234"),)) not in got  # "max": no limit
    assert value(got, "gangwatch_job_info", jobid="1234", uid="1001", cgroup_version="v2") == 1


def test_truncated_files_drop_only_their_values():
    got = samples(encode(host_collector().collect()))
    # job 1235: cpu.stat and memory.current garbled or empty, a reversed cpuset, a cut io.stat line
    assert ("gangwatch_job_cpu_seconds_total", (("jobid", "1235"),)) not in got
    assert ("gangwatch_job_memory_usage_bytes", (("jobid", "1235"),)) not in got
    assert ("gangwatch_job_cpus", (("jobid", "1235"),)) not in got
    assert value(got, "gangwatch_job_memory_limit_bytes", jobid="1235") == 17179869184
    assert value(got, "gangwatch_job_io_read_bytes_total", jobid="1235", device="nvme0n1") == 1
    assert ("gangwatch_job_io_write_bytes_total", (("device", "nvme0n1"), ("jobid", "1235"))) not in got
    assert value(got, "gangwatch_job_info", jobid="1235", cgroup_version="v2") == 1  # pid 4001 has no status
    assert not any(dict(ls).get("jobid") == "12x" for _, ls in got)


def test_nvml_failures_are_not_fatal(fixtures_dir):
    gpus, driver = h100_node(fixtures_dir)
    broken = FakeNvml(gpus, driver)
    broken.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    got = samples(encode(host_collector(broken).collect()))
    assert {dict(ls)["source"] for n, ls in got if n == "gangwatch_job_gpu_info"} == {"mapping"}
    # without NVML the GPUs a job holds are still known, their utilisation is not
    assert value(got, "gangwatch_job_gpus", jobid="1234") == 2 and value(got, "gangwatch_job_gpus", jobid="1236") == 1
    assert not any(n == "gangwatch_job_gpu_utilization_ratio" for n, _ in got)


def job_gpu_util(col) -> dict[str, float]:
    got = samples(encode(col.collect()))
    return {dict(ls)["jobid"]: v for (n, ls), v in got.items() if n == "gangwatch_job_gpu_utilization_ratio"}


def test_job_gpu_utilization_is_the_mean_over_its_gpus(fake_nvml):
    # job 1234 holds GPUs 0, 1 (mapping), 2, 5 (NVML); job 1235 shares 2 and 5; job 1236 holds lost GPU 3
    for gpu, util in {0: 90, 1: 70, 2: 40, 5: 10}.items():
        fake_nvml.gpus[gpu].util_gpu = util
    col = host_collector(fake_nvml)
    assert job_gpu_util(col) == pytest.approx({"1234": (0.9 + 0.7 + 0.4 + 0.1) / 4, "1235": (0.4 + 0.1) / 2})
    # a shared GPU is read once per scrape, and the lost one is not asked at all
    assert fake_nvml.calls["nvmlDeviceGetUtilizationRates"] == 4
    # agrees with the gpu collector's per-GPU series for the same GPUs
    from collectors.node.gpu import GpuCollector

    per_gpu = {dict(ls)["gpu"]: v for (n, ls), v in samples(encode(GpuCollector(
        Context(paths=Paths(sysfs="/nonexistent"), nvml=fake_nvml)).collect())).items()
        if n == "gangwatch_gpu_utilization_ratio"}
    assert job_gpu_util(col)["1235"] == pytest.approx((per_gpu["2"] + per_gpu["5"]) / 2)


def test_nvml_error_on_one_gpu_drops_only_that_gpu_from_the_mean(fake_nvml):
    for gpu, util in {0: 90, 1: 70, 2: 40, 5: 10}.items():
        fake_nvml.gpus[gpu].util_gpu = util
    fake_nvml.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_UNKNOWN, gpu=1)
    col = host_collector(fake_nvml)
    assert job_gpu_util(col) == pytest.approx({"1234": (0.9 + 0.4 + 0.1) / 3, "1235": (0.4 + 0.1) / 2})
    # MIG on the shared GPU 2 (no utilisation there) and an error on GPU 5: job 1235 has no reading left
    fake_nvml.gpus[2].mig = []
    fake_nvml.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=5)
    got = samples(encode(col.collect()))
    assert value(got, "gangwatch_job_gpu_utilization_ratio", jobid="1234") == pytest.approx(0.9)
    assert ("gangwatch_job_gpu_utilization_ratio", (("jobid", "1235"),)) not in got
    assert value(got, "gangwatch_job_gpus", jobid="1235") == 2  # it still holds them


def test_nothing_here_is_no_data(tmp_path):
    with pytest.raises(NoData):
        collector(tmp_path, tmp_path).collect()


def test_slurm_without_jobs_is_empty_not_absent(tmp_path):
    (tmp_path / "system.slice" / "slurmstepd.scope").mkdir(parents=True)
    assert encode(collector(tmp_path, tmp_path).collect()) == ""


def test_mapping_symlinks_are_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("4242\n")
    mapping = tmp_path / "gpu-jobs"
    mapping.mkdir()
    (mapping / "0").symlink_to(secret)
    (mapping / "1").write_text("77\n")
    got = samples(encode(collector(tmp_path / "none", tmp_path, mapping=mapping).collect()))
    assert set(got) == {("gangwatch_job_gpu_info", (("gpu", "1"), ("jobid", "77"), ("source", "mapping"))),
                        ("gangwatch_job_gpus", (("jobid", "77"),))}


def test_agent_flags():
    from collectors.agent import build_parser

    args = build_parser().parse_args(["--collector.jobs.gpu-mapping-dir", "/x", "--no-collector.jobs.nvml"])
    assert args.collector_jobs and args.collector_jobs_gpu_mapping_dir == "/x" and not args.collector_jobs_nvml
    assert build_parser().parse_args([]).collector_jobs_gpu_mapping_dir == "/run/gangwatch/gpu-jobs"


# ------------------------------------------------------------------ the prolog and epilog


def run_script(script: Path, mapping: Path, **env) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GANGWATCH_GPU_JOB_DIR": str(mapping)}
    return subprocess.run(["bash", str(script)], env={**base, **env}, capture_output=True, text=True,
                          timeout=20, cwd=mapping.parent)


def mapping_files(mapping: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(mapping.iterdir()) if not p.name.startswith(".")}


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
def test_prolog_epilog_round_trip(tmp_path):
    mapping = tmp_path / "gpu-jobs"
    assert run_script(PROLOG, mapping, SLURM_JOB_ID="101", SLURM_JOB_GPUS="0,2-3").returncode == 0
    assert run_script(PROLOG, mapping, SLURM_JOB_ID="102", CUDA_VISIBLE_DEVICES="3").returncode == 0
    assert mapping_files(mapping) == {"0": "101\n", "2": "101\n", "3": "101\n102\n"}
    # a prolog run twice (requeue on the same node) does not duplicate the line
    run_script(PROLOG, mapping, SLURM_JOB_ID="101", SLURM_JOB_GPUS="0")
    assert mapping_files(mapping)["0"] == "101\n"
    # no temp files left behind
    assert [p.name for p in mapping.iterdir() if p.name.startswith(".") and p.name != ".lock"] == []

    got = samples(encode(collector(tmp_path / "none", tmp_path, mapping=mapping).collect()))
    pairs = {(dict(ls)["jobid"], dict(ls)["gpu"]) for n, ls in got if n == "gangwatch_job_gpu_info"}
    assert pairs == {("101", "0"), ("101", "2"), ("101", "3"), ("102", "3")}

    assert run_script(EPILOG, mapping, SLURM_JOB_ID="101").returncode == 0
    assert mapping_files(mapping) == {"3": "102\n"}
    assert run_script(EPILOG, mapping, SLURM_JOB_ID="102").returncode == 0
    assert mapping_files(mapping) == {}


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
@pytest.mark.parametrize("job,gpus", [
    ("1;touch pwned", "0"),
    ("$(touch pwned)", "0"),
    ("../../etc", "0"),
    ("", "0"),
    ("12\n13", "0"),
    ("55", "$(touch pwned),`touch pwned`,../x,0;touch pwned,GPU-8d5c6f1e,MIG-1,99999,5-2,1-9999"),
])
def test_hostile_input_writes_nothing_and_runs_nothing(tmp_path, job, gpus):
    mapping = tmp_path / "gpu-jobs"
    for script in (PROLOG, EPILOG):
        proc = run_script(script, mapping, SLURM_JOB_ID=job, SLURM_JOB_GPUS=gpus)
        assert proc.returncode == 0  # never fail: a failing prolog drains the node
    assert not (tmp_path / "pwned").exists()
    assert not mapping.exists() or mapping_files(mapping) == {}


# ------------------------------------------------------------------ property-based: parsers never raise


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parsers_never_raise(text):
    job_from_cgroup_path(text)
    job_from_proc_cgroup(text)
    parse_flat_keyed(text)
    parse_io_stat(text)
    parse_cpu_list(text)
    parse_uevent_devname(text)
    parse_diskstats_names(text)
    parse_status_uid(text)
    ids, rejected = parse_mapping_lines(text)
    assert all(i.replace("_", "").replace("+", "").isdigit() for i in ids)
    assert len(ids) == len(set(ids))
    # every non-blank line is either an accepted id, a repeat of one, or rejected; only when the
    # per-GPU cap is reached can a valid id be neither accepted nor rejected
    outside = sum(1 for line in text.splitlines() if line.strip() and line.strip() not in ids)
    assert rejected == outside or (len(ids) == MAX_JOBS_PER_GPU and rejected <= outside)


_path_part = st.sampled_from(["slurm", "slurm_n1", "slurmstepd.scope", "n1_slurmstepd.scope", "system.slice",
                              "uid_5", "job_7", "job_", "job_x", "step_0", "user", "task_0", "", ".."])


@settings(max_examples=300, deadline=None)
@given(st.lists(_path_part, max_size=8).map("/".join))
def test_cgroup_paths_yield_digit_job_ids(path):
    ref = job_from_cgroup_path(path)
    if ref is not None:
        assert ref.jobid.isdigit() and (ref.uid is None or ref.uid.isdigit())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), max_size=5))
def test_cpu_list_counts(ranges):
    text = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)
    n = parse_cpu_list(text)
    if any(b < a for a, b in ranges):
        assert n is None
    else:
        assert n == sum(b - a + 1 for a, b in ranges)


def test_discover_ignores_files_named_like_jobs(tmp_path):
    base = tmp_path / "system.slice" / "slurmstepd.scope"
    base.mkdir(parents=True)
    (base / "job_9").write_text("not a folder")
    (base / "job_10").mkdir()
    found, jobs = discover_jobs(str(tmp_path))
    assert found and list(jobs) == ["10"]


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.prom")), ids=lambda p: p.name)
def test_goldens_pass_promtool(golden):
    assert_promtool_clean(golden)


def test_agent_wiring_uses_path_sysfs_for_cgroups():
    from collectors.agent import build_parser, build_scraper

    args = build_parser().parse_args([
        "--path.procfs", str(HOST / "proc"), "--path.sysfs", str(HOST / "sys"),
        "--collector.jobs.gpu-mapping-dir", str(HOST / "gpu-jobs"), "--no-collector.jobs.nvml",
        "--no-collector.gpfs"])
    scraper = build_scraper(args)
    try:
        got = samples(scraper.scrape().text)
    finally:
        scraper.close()
    assert value(got, "gangwatch_scrape_collector_success", collector="jobs") == 1
    assert value(got, "gangwatch_job_cpu_seconds_total", jobid="1234") == 93876.123456
    assert value(got, "gangwatch_job_gpu_info", jobid="1234", gpu="1", source="mapping") == 1
