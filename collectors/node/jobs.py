"""Slurm jobs on this node: which GPUs each job holds, and what its cgroup says it uses.

Sources (reading needs no privileges beyond what the files allow; the agent usually runs as root):
- Job cgroups under `--collector.jobs.cgroup-root` (default `<sysfs>/fs/cgroup`), in the layouts
  Slurm creates: cgroup v1 `<controller>/slurm[_<node>]/uid_<uid>/job_<id>/...` (cpuacct, memory,
  cpuset, pids) and cgroup v2 `[system.slice/][<node>_]slurmstepd.scope/job_<id>/...`.
- GPUs -> jobs: (1) the mapping folder a Slurm prolog writes, the contract of dcgm-exporter's
  `--hpc-job-mapping-dir` (`--collector.jobs.gpu-mapping-dir`, a file per GPU index whose lines are
  job ids; `deploy/slurm/prolog-gangwatch.sh` writes it); (2) NVML's running compute processes,
  each pid resolved to a job through `<procfs>/<pid>/cgroup`. When both name a pair, `source` is
  "mapping" (what Slurm allocated beats what we happened to see running).
Metrics (per job; a node holds few jobs, so the series stay few):
- `gangwatch_job_gpu_info{jobid,gpu,source}`, `gangwatch_job_gpu_memory_used_bytes{jobid,gpu}` (NVML).
- Per-job rollups, so that rules select one series per job and node rather than one per GPU:
  `gangwatch_job_gpus{jobid}` (its gangwatch_job_gpu_info pairs) and
  `gangwatch_job_gpu_utilization_ratio{jobid}`: the mean NVML utilisation of those GPUs, one
  nvmlDeviceGetUtilizationRates per GPU some job holds (a GPU shared by two jobs is read once and
  counts for both), over the GPUs that answered; left out without NVML (or with
  `--no-collector.jobs.nvml`) and when none of the job's GPUs answered (MIG, an NVML error).
- `gangwatch_job_info{jobid,uid,cgroup_version}`, `gangwatch_job_cpu_seconds_total{jobid}`,
  `gangwatch_job_cpu_mode_seconds_total{jobid,mode}`, `gangwatch_job_cpus{jobid}`, `gangwatch_job_tasks{jobid}`,
  `gangwatch_job_memory_{usage,peak,limit,anon,file}_bytes{jobid}`, `gangwatch_job_memory_oom_kills_total{jobid}`,
  `gangwatch_job_io_{read,write}_bytes_total{jobid,device}`, `gangwatch_job_io_{reads,writes}_total{jobid,device}`,
  `gangwatch_job_pressure_{waiting,stalled}_seconds_total{jobid,resource}` (v2 only).
Job ids are data: only `job_<digits>` directory names and mapping lines shaped like Slurm ids
(`123`, `123_4`, `123+0`) are accepted, they are never used to build a path, and mapping files are
opened without following symlinks, so a planted link cannot leak another file into labels.
No Slurm hierarchy under the cgroup root is remembered for NO_SLURM_RECHECK_SECONDS (60 s): a node
without Slurm jobs does not list the cgroup folders on every scrape (~0.1 ms), and the first job
cgroup (Slurm creates its `slurm`/`slurmstepd.scope` folder with the first job or at slurmd's start)
shows within a minute; once a hierarchy is found it is listed on every scrape.
Failure modes: no Slurm cgroup hierarchy, no mapping folder and no NVML -> NoData (quiet). A
missing, truncated or garbled file drops only the values it held; a job that ends mid-scrape drops
only itself; NVML errors drop only that GPU (its processes, its utilisation; a GPU NVML reports lost is
not asked for its utilisation) or, at init, the NVML source.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..exposition import Family, counter, format_labels, gauge
from ..readers import list_dir, parse_number, read_first_line, read_text
from ..registry import Collector, NoData, register
from .gpu import ERR_GPU_IS_LOST, NvmlSession, divided, error_code
from .pressure import RESOURCES, parse_psi

log = logging.getLogger(__name__)

DEFAULT_MAPPING_DIR = "/run/gangwatch/gpu-jobs"
USER_HZ = 100.0  # cpuacct.stat counts USER_HZ ticks, fixed at 100 for user space
UNLIMITED = 1 << 62  # v1 reports "no limit" as a page-rounded 2^63-1

_JOB_DIR = re.compile(r"^job_(\d{1,20})$")
_UID_DIR = re.compile(r"^uid_(\d{1,10})$")
# A Slurm job cgroup anywhere in a path: .../slurm[_node]/[uid_N/]job_N or .../[node_]slurmstepd.scope/job_N
_CGROUP_JOB = re.compile(r"(?:^|/)(?:slurm[^/]*|[^/]*slurmstepd\.scope)/(?:uid_(\d{1,10})/)?job_(\d{1,20})(?=/|$)")
_JOB_ID = re.compile(r"^\d{1,20}(?:[_+]\d{1,10})?$")
_GPU_FILE = re.compile(r"^\d{1,4}$")
V1_CONTROLLERS = ("cpuacct", "cpu,cpuacct", "memory", "cpuset", "pids")
MAX_MAPPING_BYTES = 64 << 10
MAX_JOBS_PER_GPU = 64
NO_SLURM_RECHECK_SECONDS = 60.0


# ---------------------------------------------------------------------------------------------
# Parsers (pure)


@dataclass(frozen=True)
class JobRef:
    jobid: str
    uid: str | None = None


def job_from_cgroup_path(path: str) -> JobRef | None:
    """The Slurm job a cgroup path belongs to, or None (`/user.slice/...`, slurmstepd's own cgroup)."""
    m = _CGROUP_JOB.search(path)
    return JobRef(m.group(2), m.group(1)) if m else None


def job_from_proc_cgroup(text: str) -> JobRef | None:
    """`/proc/<pid>/cgroup` (`id:controllers:path` lines, v1 or v2) -> the Slurm job, if any."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (ref := job_from_cgroup_path(parts[2].strip())):
            return ref
    return None


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (cpu.stat, memory.stat, memory.events, cpuacct.stat) -> ints; garbage skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isascii() and parts[1].isdigit():
            out.setdefault(parts[0], int(parts[1]))
    return out


def parse_io_stat(text: str) -> dict[str, dict[str, int]]:
    """cgroup v2 `io.stat` (`MAJ:MIN rbytes=N wbytes=N rios=N wios=N ...`) -> {"MAJ:MIN": {key: N}}."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or not re.fullmatch(r"\d{1,10}:\d{1,10}", parts[0]):
            continue
        values = {}
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if sep and value.isascii() and value.isdigit():
                values[key] = int(value)
        out.setdefault(parts[0], values)
    return out


def parse_cpu_list(text: str) -> int | None:
    """`0-3,8,10-11` (cpuset.cpus) -> how many CPUs; None when garbled. An empty set is 0."""
    text = text.strip()
    if not text:
        return 0
    total = 0
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not (lo.isascii() and lo.isdigit()) or (sep and not (hi.isascii() and hi.isdigit())):
            return None
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a or b - a > 1 << 16:
            return None
        total += b - a + 1
    return total


def parse_mapping_lines(text: str) -> tuple[list[str], int]:
    """A GPU mapping file's lines -> (accepted job ids, in order, unique; count of rejected lines)."""
    jobs: list[str] = []
    rejected = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if _JOB_ID.match(line) and line.isascii():
            if line not in jobs and len(jobs) < MAX_JOBS_PER_GPU:
                jobs.append(line)
        else:
            rejected += 1
    return jobs, rejected


def parse_uevent_devname(text: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "DEVNAME" and value.strip():
            return value.strip()
    return None


def parse_diskstats_names(text: str) -> dict[str, str]:
    """/proc/diskstats -> {"MAJ:MIN": name}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            out[f"{parts[0]}:{parts[1]}"] = parts[2]
    return out


def parse_status_uid(text: str) -> str | None:
    """The real uid from /proc/<pid>/status."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isascii() and parts[1].isdigit():
                return parts[1]
    return None


# ---------------------------------------------------------------------------------------------
# Job cgroups


@dataclass
class JobCgroup:
    jobid: str
    version: str  # "v1" or "v2"
    uid: str | None = None
    dirs: dict[str, str] = field(default_factory=dict)  # v1: controller -> dir; v2: {"": dir}

    def path(self, controller: str, name: str) -> str | None:
        base = self.dirs.get("" if self.version == "v2" else controller)
        return os.path.join(base, name) if base else None


def _job_dirs(parent: str) -> Iterable[tuple[str, str]]:
    for name in list_dir(parent):
        m = _JOB_DIR.match(name)
        if m and os.path.isdir(os.path.join(parent, name)):
            yield m.group(1), os.path.join(parent, name)


def discover_jobs(root: str) -> tuple[bool, dict[str, JobCgroup]]:
    """Find Slurm job cgroups under a cgroup root: (whether any Slurm hierarchy exists, jobs by id)."""
    jobs: dict[str, JobCgroup] = {}
    found = False
    for ctrl in V1_CONTROLLERS:
        base = os.path.join(root, ctrl)
        for sdir in list_dir(base):
            if not sdir.startswith("slurm"):
                continue
            top = os.path.join(base, sdir)
            if not os.path.isdir(top):
                continue
            found = True
            parents = [(top, None)] + [(os.path.join(top, u), m.group(1)) for u in list_dir(top)
                                       if (m := _UID_DIR.match(u))]
            for parent, uid in parents:
                for jobid, path in _job_dirs(parent):
                    job = jobs.setdefault(jobid, JobCgroup(jobid, "v1", uid))
                    job.dirs.setdefault("cpuacct" if ctrl == "cpu,cpuacct" else ctrl, path)
    for base in (os.path.join(root, "system.slice"), root, os.path.join(root, "unified", "system.slice")):
        for name in list_dir(base):
            if name != "slurmstepd.scope" and not name.endswith("_slurmstepd.scope"):
                continue
            found = True
            for jobid, path in _job_dirs(os.path.join(base, name)):
                if jobid not in jobs:
                    jobs[jobid] = JobCgroup(jobid, "v2", None, {"": path})
    return found, jobs


def _user_pids(job_dir: str, limit: int = 16) -> list[str]:
    """Pids of the job's user tasks (`step_*/user/...`; the `slurm` leaves hold root's slurmstepd)."""
    pids: list[str] = []
    stack = [os.path.join(job_dir, step, "user") for step in reversed(list_dir(job_dir)) if step.startswith("step_")]
    while stack and len(pids) < limit:
        path = stack.pop()
        text = read_text(os.path.join(path, "cgroup.procs"), 64 << 10) or ""
        pids.extend(tok for tok in text.split() if tok.isascii() and tok.isdigit())
        stack.extend(os.path.join(path, d) for d in reversed(list_dir(path)) if d.startswith("task_"))
    return pids[:limit]


# ---------------------------------------------------------------------------------------------
# The collector


class JobFamilies:
    """All per-job families of one scrape."""

    def __init__(self) -> None:
        self.info = gauge("gangwatch_job_info", "A Slurm job with a cgroup on this node, labelled with its "
                                                "owner's uid and the cgroup version; value 1.")
        self.cpu = counter("gangwatch_job_cpu_seconds_total", "CPU seconds used by the job's processes "
                                                              "(cpuacct.usage or cpu.stat usage_usec).")
        self.cpu_mode = counter("gangwatch_job_cpu_mode_seconds_total",
                                "CPU seconds used by the job's processes, by mode (user, system).")
        self.cpus = gauge("gangwatch_job_cpus", "CPUs in the job's cpuset on this node.")
        self.tasks = gauge("gangwatch_job_tasks", "Tasks (threads) in the job's cgroup (pids.current).")
        self.mem = {
            "usage": gauge("gangwatch_job_memory_usage_bytes", "Memory charged to the job's cgroup now, in "
                                                               "bytes (memory.current or memory.usage_in_bytes)."),
            "peak": gauge("gangwatch_job_memory_peak_bytes", "Highest memory charged to the job's cgroup, in "
                                                             "bytes (memory.peak or memory.max_usage_in_bytes)."),
            "limit": gauge("gangwatch_job_memory_limit_bytes", "Memory limit of the job's cgroup, in bytes "
                                                               "(absent when unlimited)."),
            "anon": gauge("gangwatch_job_memory_anon_bytes", "Anonymous memory of the job, in bytes "
                                                             "(memory.stat anon, or total_rss on v1)."),
            "file": gauge("gangwatch_job_memory_file_bytes", "Page cache charged to the job, in bytes "
                                                             "(memory.stat file, or total_cache on v1)."),
        }
        self.oom = counter("gangwatch_job_memory_oom_kills_total", "Processes of the job killed by the OOM killer.")
        self.io = {
            "rbytes": counter("gangwatch_job_io_read_bytes_total", "Bytes the job read from the block device (io.stat)."),
            "wbytes": counter("gangwatch_job_io_write_bytes_total", "Bytes the job wrote to the block device (io.stat)."),
            "rios": counter("gangwatch_job_io_reads_total", "Read operations of the job on the block device (io.stat)."),
            "wios": counter("gangwatch_job_io_writes_total", "Write operations of the job on the block device (io.stat)."),
        }
        self.psi = {
            "some": counter("gangwatch_job_pressure_waiting_seconds_total",
                            "Seconds in which at least one of the job's tasks was stalled on the resource (PSI some)."),
            "full": counter("gangwatch_job_pressure_stalled_seconds_total",
                            "Seconds in which all of the job's non-idle tasks were stalled on the resource (PSI full)."),
        }
        self.gpu = gauge("gangwatch_job_gpu_info", "A GPU (NVML index) held by a Slurm job; source says how it "
                                                   "was found: mapping (prolog-written files) or nvml (running "
                                                   "processes); value 1.")
        self.gpu_mem = gauge("gangwatch_job_gpu_memory_used_bytes",
                             "GPU memory used by the job's processes on the GPU, in bytes (NVML).")
        self.gpus = gauge("gangwatch_job_gpus", "GPUs the job holds on this node (its gangwatch_job_gpu_info pairs).")
        self.gpu_util = gauge("gangwatch_job_gpu_utilization_ratio",
                              "Mean NVML utilisation (fraction 0-1 of the last sample period with a kernel running) "
                              "of the job's GPUs on this node that reported it; a shared GPU counts for each job.")

    def all(self) -> list[Family]:
        return [self.info, self.cpu, self.cpu_mode, self.cpus, self.tasks, *self.mem.values(), self.oom,
                *self.io.values(), *self.psi.values(), self.gpu, self.gpu_mem, self.gpus, self.gpu_util]


@dataclass
class _NvmlView:
    """What one scrape learnt from NVML: the module, handles of the GPUs that answered, GPU->job pairs."""

    nvml: Any
    handles: dict[str, Any]  # GPU index (as in labels) -> handle
    pairs: dict[tuple[str, str], int | None]  # (jobid, gpu) -> GPU memory used by the job's processes


@register
class JobsCollector(Collector):
    """Slurm jobs on this node: GPUs per job, and CPU, memory, I/O and pressure from job cgroups."""

    name = "jobs"

    @classmethod
    def add_arguments(cls, parser) -> None:
        parser.add_argument("--collector.jobs.cgroup-root", dest="collector_jobs_cgroup_root", default=None,
                            help="cgroup mount point holding Slurm's job cgroups (default: <path.sysfs>/fs/cgroup).")
        parser.add_argument("--collector.jobs.gpu-mapping-dir", dest="collector_jobs_gpu_mapping_dir",
                            default=DEFAULT_MAPPING_DIR,
                            help="Folder of GPU->job files written by the Slurm prolog (a file per GPU "
                                 "index, one job id a line; dcgm-exporter's --hpc-job-mapping-dir contract).")
        parser.add_argument("--collector.jobs.nvml", dest="collector_jobs_nvml",
                            action=argparse.BooleanOptionalAction, default=True,
                            help="Use NVML: map GPUs to jobs through its running processes, and read the "
                                 "utilisation of the jobs' GPUs.")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cgroup_root = ctx.option("collector_jobs_cgroup_root") or ctx.paths.sys("fs", "cgroup")
        self.mapping_dir = ctx.option("collector_jobs_gpu_mapping_dir", DEFAULT_MAPPING_DIR)
        self.use_nvml = ctx.option("collector_jobs_nvml", True)
        self.nvml = NvmlSession(ctx.nvml, ctx.clock)  # its own session: NVML counts nvmlInit/Shutdown pairs
        self.rejected_lines = 0  # mapping lines that were not job ids, since start (tests read it)
        self._no_slurm_until = 0.0  # monotonic time before which the cgroup root is known to hold no Slurm

    # -- collection -----------------------------------------------------------------------------

    def collect(self) -> Iterable[Family]:
        now = time.monotonic()
        if now < self._no_slurm_until:
            found, jobs = False, {}
        else:
            found, jobs = discover_jobs(self.cgroup_root)
            if not found:
                self._no_slurm_until = now + NO_SLURM_RECHECK_SECONDS
        mapping = self._read_mapping() if self.mapping_dir else None
        view = self._nvml_view()
        nvml_pairs = view.pairs if view is not None else None
        if not found and mapping is None and nvml_pairs is None:
            raise NoData("no Slurm cgroups, GPU mapping folder or NVML on this host")
        fams = JobFamilies()
        devnames = _DeviceNames(self.ctx)
        for jobid in sorted(jobs, key=_job_sort_key):
            try:
                self._job_metrics(jobs[jobid], fams, devnames)
            except OSError as exc:  # the job ended while we read it
                log.debug("job %s: %s", jobid, exc)
        pairs: dict[tuple[str, str], str] = {}
        for (jobid, gpu) in (nvml_pairs or {}):
            pairs[(jobid, gpu)] = "nvml"
        for gpu, ids in (mapping or {}).items():
            for jobid in ids:
                pairs[(jobid, gpu)] = "mapping"
        job_gpus: dict[str, list[str]] = {}
        for (jobid, gpu), source in sorted(pairs.items(), key=lambda kv: (_gpu_sort_key(kv[0][1]), kv[0][0])):
            fams.gpu.add(1, jobid=jobid, gpu=gpu, source=source)
            job_gpus.setdefault(jobid, []).append(gpu)
        for (jobid, gpu), used in sorted((nvml_pairs or {}).items()):
            if used is not None:
                fams.gpu_mem.add(used, jobid=jobid, gpu=gpu)
        util = _utilization(view, {gpu for _, gpu in pairs}) if view is not None else {}
        for jobid in sorted(job_gpus, key=_job_sort_key):
            fams.gpus.add(len(job_gpus[jobid]), jobid=jobid)
            readings = [util[gpu] for gpu in job_gpus[jobid] if gpu in util]
            if readings:  # none of its GPUs answered: unknown, not idle
                fams.gpu_util.add(math.fsum(readings) / len(readings), jobid=jobid)
        return fams.all()

    def _job_metrics(self, job: JobCgroup, f: JobFamilies, devnames: "_DeviceNames") -> None:
        lbl = format_labels({"jobid": job.jobid})
        uid = job.uid
        if uid is None and job.version == "v2":
            # v2 paths carry no uid: ask the first user task that still exists
            for pid in _user_pids(job.dirs[""]):
                uid = parse_status_uid(read_text(self.ctx.paths.proc(pid, "status")) or "")
                if uid is not None:
                    break
        info = {"jobid": job.jobid, "cgroup_version": job.version}
        if uid is not None:
            info["uid"] = uid
        f.info.add(1, info)

        def num(controller: str, name: str) -> float | None:
            path = job.path(controller, name)
            return parse_number(read_first_line(path)) if path else None

        def keyed(controller: str, name: str) -> dict[str, int]:
            path = job.path(controller, name)
            text = read_text(path) if path else None
            return parse_flat_keyed(text) if text else {}

        def put(fam: Family, value: float | None) -> None:
            if value is not None:
                fam.add_rendered(lbl, value)

        if job.version == "v1":
            usage = num("cpuacct", "cpuacct.usage")
            put(f.cpu, None if usage is None else usage / 1e9)
            modes = {k: v / USER_HZ for k, v in keyed("cpuacct", "cpuacct.stat").items()}
            put(f.mem["usage"], num("memory", "memory.usage_in_bytes"))
            put(f.mem["peak"], num("memory", "memory.max_usage_in_bytes"))
            limit = num("memory", "memory.limit_in_bytes")
            mstat = keyed("memory", "memory.stat")
            anon, file_ = mstat.get("total_rss"), mstat.get("total_cache")
            oom = keyed("memory", "memory.oom_control").get("oom_kill")
            cpus_path = job.path("cpuset", "cpuset.cpus")
        else:
            cstat = keyed("", "cpu.stat")
            put(f.cpu, cstat["usage_usec"] / 1e6 if "usage_usec" in cstat else None)
            modes = {m: cstat[f"{m}_usec"] / 1e6 for m in ("user", "system") if f"{m}_usec" in cstat}
            put(f.mem["usage"], num("", "memory.current"))
            put(f.mem["peak"], num("", "memory.peak"))
            limit = num("", "memory.max")  # "max" (no limit) parses as None
            mstat = keyed("", "memory.stat")
            anon, file_ = mstat.get("anon"), mstat.get("file")
            oom = keyed("", "memory.events").get("oom_kill")
            cpus_path = job.path("", "cpuset.cpus.effective")
            if cpus_path and not os.path.exists(cpus_path):
                cpus_path = job.path("", "cpuset.cpus")
            self._io(job, lbl, f, devnames)
            for res in RESOURCES:
                text = read_text(job.path("", f"{res}.pressure"))
                for kind, seconds in (parse_psi(text).items() if text else ()):
                    f.psi[kind].add(seconds, jobid=job.jobid, resource=res)
        for mode in ("user", "system"):
            if mode in modes:
                f.cpu_mode.add(modes[mode], jobid=job.jobid, mode=mode)
        put(f.mem["limit"], limit if limit is not None and limit < UNLIMITED else None)
        put(f.mem["anon"], anon)
        put(f.mem["file"], file_)
        put(f.oom, oom)
        text = read_first_line(cpus_path) if cpus_path else None
        put(f.cpus, parse_cpu_list(text) if text is not None else None)
        put(f.tasks, num("pids", "pids.current"))

    def _io(self, job: JobCgroup, lbl: str, f: JobFamilies, devnames: "_DeviceNames") -> None:
        text = read_text(job.path("", "io.stat"))
        if not text:
            return
        for dev, values in sorted(parse_io_stat(text).items()):
            labels = {"jobid": job.jobid, "device": devnames.name(dev)}
            for key, fam in f.io.items():
                if key in values:
                    fam.add(values[key], labels)

    # -- GPU -> job -----------------------------------------------------------------------------

    def _read_mapping(self) -> dict[str, list[str]] | None:
        """{gpu index: [job ids]}; None when the folder does not exist."""
        if not os.path.isdir(self.mapping_dir):
            return None
        out: dict[str, list[str]] = {}
        for name in list_dir(self.mapping_dir):
            if not _GPU_FILE.match(name):
                continue  # temp files of a prolog mid-write, anything else
            text = _read_regular_file(os.path.join(self.mapping_dir, name))
            if text is None:
                continue
            jobs, rejected = parse_mapping_lines(text)
            self.rejected_lines += rejected
            known = out.setdefault(str(int(name)), [])  # "01" and "1" are the same GPU
            known.extend(j for j in jobs if j not in known)
        return {gpu: ids for gpu, ids in out.items() if ids}

    def _nvml_view(self) -> _NvmlView | None:
        """GPU handles and {(jobid, gpu index): GPU memory used by the job's processes, or None}; None without NVML."""
        if not self.use_nvml:
            return None
        try:
            nvml = self.nvml.acquire()  # retries with backoff after a failure (a driver loaded late)
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:  # no driver, no library: this source is simply absent
            log.debug("NVML unavailable: %s", exc)
            return None
        view = _NvmlView(nvml, {}, {})
        pairs = view.pairs
        cache: dict[int, JobRef | None] = {}
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                view.handles[str(index)] = handle
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception as exc:  # one GPU fallen off the bus must not hide the others
                log.debug("GPU %d processes: %s", index, exc)
                if error_code(exc) == ERR_GPU_IS_LOST:
                    view.handles.pop(str(index), None)  # asking it for utilisation would only fail again
                continue
            for proc in procs or ():
                pid = getattr(proc, "pid", None)
                if not isinstance(pid, int) or pid <= 0:
                    continue
                if pid not in cache:
                    cache[pid] = job_from_proc_cgroup(read_text(self.ctx.paths.proc(str(pid), "cgroup")) or "")
                ref = cache[pid]
                if ref is None:
                    continue
                key = (ref.jobid, str(index))
                used = getattr(proc, "usedGpuMemory", None)
                used = used if isinstance(used, int) and 0 <= used < 1 << 60 else None
                if key not in pairs or pairs[key] is None:
                    pairs[key] = used
                elif used is not None:
                    pairs[key] += used
        return view

    def close(self) -> None:
        self.nvml.shutdown()


class _DeviceNames:
    """MAJ:MIN -> block device name via sysfs uevent, then /proc/diskstats, else MAJ:MIN itself."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._diskstats: dict[str, str] | None = None
        self._cache: dict[str, str] = {}

    def name(self, dev: str) -> str:
        if dev not in self._cache:
            name = parse_uevent_devname(read_text(self.ctx.paths.sys("dev", "block", dev, "uevent")) or "")
            if name is None:
                if self._diskstats is None:
                    self._diskstats = parse_diskstats_names(read_text(self.ctx.paths.proc("diskstats")) or "")
                name = self._diskstats.get(dev, dev)
            self._cache[dev] = name
        return self._cache[dev]


def _utilization(view: _NvmlView, gpus: Iterable[str]) -> dict[str, float]:
    """{gpu index: NVML utilisation 0-1} for the given GPUs that answered; one call per GPU."""
    out: dict[str, float] = {}
    for gpu in gpus:
        handle = view.handles.get(gpu)
        if handle is None:  # lost, or a mapping file naming an index NVML does not have
            continue
        try:
            ratio = divided(getattr(view.nvml.nvmlDeviceGetUtilizationRates(handle), "gpu", None), 100)
        except Exception as exc:  # NotSupported under MIG, or a GPU failing now: drop only this GPU
            log.debug("GPU %s utilisation: %s", gpu, exc)
            continue
        if ratio is not None:
            out[gpu] = ratio
    return out


def _read_regular_file(path: str) -> str | None:
    """A regular file's text, never through a symlink, at most MAX_MAPPING_BYTES; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_MAPPING_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _job_sort_key(jobid: str) -> tuple[int, str]:
    return (int(jobid) if jobid.isdigit() else 0, jobid)


def _gpu_sort_key(gpu: str) -> tuple[int, str]:
    return (int(gpu) if gpu.isdigit() else 0, gpu)
