"""Lustre server statistics: OST and MDT operation counters, and per-job I/O from `job_stats`
with bounded cardinality.

Sources: `obdfilter.*.stats`, `mdt.*.md_stats`, `obdfilter.*.job_stats`, `mdt.*.job_stats`, from
the files under `<procfs>/fs/lustre`, `<sysfs>/fs/lustre` or `<sysfs>/kernel/debug/lustre`, or
from `lctl get_param` (see collectors/lustre_common.py). Privileges: root for debugfs and lctl.

Metrics (labels `fs`, `target` = `lustre-OST0001` / `lustre-MDT0000`):
- `gangwatch_lustre_{ost,mdt}_{operations,io_bytes,operation_latency_seconds}_total{fs,target,operation}`.
- Per job, for the top K jobs of each target (`--collector.lustre_server.top-jobs`, 20) ranked by
  bytes read+written (OSTs) or by operations (MDTs), plus `jobid="_other"` (all other jobs summed)
  and `jobid="_total"` (all jobs):
  `gangwatch_lustre_job_{operations,io_bytes,operation_latency_seconds}_total{fs,target,jobid,slurm_job,operation}`
  and `gangwatch_lustre_job_start_time_seconds{fs,target,jobid,slurm_job}` (2.14+, top jobs only).
  `jobid` is Lustre's job id as data (escaped, at most 200 characters); `slurm_job` is the Slurm job
  id parsed from it (docs/agent.md: "Job ids and Slurm"), empty when there is none.
- `gangwatch_lustre_job_stats_io_size_requests_total{fs,target,operation,size_bytes}`: the 2.14+
  per-job size histograms summed over all jobs of the target.
- `gangwatch_lustre_job_stats_jobs{fs,target}` (jobs listed) and
  `gangwatch_lustre_job_stats_malformed_lines{fs,target}` (lines not understood: truncation, junk).
- lctl health and `gangwatch_lustre_parse_failures{collector}` as for lustre_client.
Failure modes: as lustre_client. A truncated job_stats keeps the jobs read so far and counts the
broken lines; jobs with an empty id are dropped (Lustre lists I/O it could not attribute so).
"""

from __future__ import annotations

from ..lustre_common import (Accumulator, LustreSource, StatsFamilies, add_common_arguments,
                             command_families, parse_failures_family, split_param, wanted)
from ..lustre_parse import JobStats, fs_of_target, parse_hist, parse_job_stats, parse_stats, slurm_job_id
from ..registry import Collector, NoData, register

PARAMS = ("obdfilter.*.stats", "mdt.*.md_stats", "obdfilter.*.job_stats", "mdt.*.job_stats")
WANTED = wanted(PARAMS)
KINDS = {"obdfilter": "ost", "mdt": "mdt"}
JOBID_MAX = 200
RESERVED = ("_other", "_total")
_LATENCY_UNITS = ("usec", "usecs")


def job_label(job_id: str) -> str:
    """The `jobid` label value: raw, capped in length, never one of the reserved bucket names."""
    if job_id in RESERVED:
        return "_" + job_id
    return job_id if len(job_id) <= JOBID_MAX else job_id[:JOBID_MAX - 1] + "…"


def job_weight(job: JobStats, by_bytes: bool) -> tuple:
    """Ranking key: bytes (then ops) on OSTs, ops (then bytes) on MDTs; job id breaks ties."""
    nbytes = ops = 0
    for samples, unit, total in job.ops.values():
        if unit == "bytes":
            nbytes += total or 0
        else:
            ops += samples
    return ((nbytes, ops) if by_bytes else (ops, nbytes)), job.job_id


def top_jobs(jobs: list[JobStats], k: int, by_bytes: bool) -> tuple[list[JobStats], list[JobStats]]:
    """(top k jobs, the rest), the top ones heaviest first."""
    ranked = sorted(jobs, key=lambda j: job_weight(j, by_bytes), reverse=True)
    k = max(0, k)
    return ranked[:k], ranked[k:]


@register
class LustreServerCollector(Collector):
    """Lustre OST/MDT operation counters and per-job I/O (top K jobs, other, total)."""

    name = "lustre_server"

    def __init__(self, ctx):
        super().__init__(ctx)
        limit = int(ctx.option("collector_lustre_server_job_stats_max_bytes", 64 << 20) or (64 << 20))
        self.source = LustreSource(ctx, file_limits={"job_stats": limit})
        self.top_k = int(ctx.option("collector_lustre_server_top_jobs", 20))

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_common_arguments(parser)
        parser.add_argument("--collector.lustre_server.top-jobs", dest="collector_lustre_server_top_jobs",
                            type=int, default=20,
                            help="Per target, the number of jobs exported with their own series; the "
                                 "others are summed into jobid=\"_other\".")
        parser.add_argument("--collector.lustre_server.job-stats-max-bytes",
                            dest="collector_lustre_server_job_stats_max_bytes", type=int, default=64 << 20,
                            help="Read at most this many bytes of a job_stats file.")

    def collect(self):
        fetch = self.source.fetch(PARAMS)
        if fetch.source == "none":
            raise NoData("no Lustre server parameters and no lctl")
        acc = Accumulator()
        families = {kind: StatsFamilies(acc, f"gangwatch_lustre_{kind}", f"the {kind.upper()}")
                    for kind in ("ost", "mdt")}
        jobs = JobFamilies(acc)
        failures = 0
        for param, text in fetch.params:
            parts = split_param(param)
            if parts is None or (parts[0], parts[2]) not in WANTED:
                continue  # not asked for (an lctl that prints more than it was asked)
            kind = KINDS[parts[0]]
            _, target, leaf = parts
            labels = (("fs", fs_of_target(target)), ("target", target))
            if leaf in ("stats", "md_stats"):
                stats = parse_stats(text)
                if stats.lines:
                    families[kind].add(stats, labels)
                elif stats.snapshot_time is None:
                    failures += 1
            elif leaf == "job_stats":
                dump = parse_job_stats(text)
                if not dump.jobs and dump.malformed_lines and "job_stats:" not in text:
                    failures += 1
                    continue
                jobs.add(labels, dump.jobs, dump.malformed_lines, self.top_k, by_bytes=kind == "ost")
        fams = acc.render()
        fams += command_families(self.name, fetch)
        fams.append(parse_failures_family(self.name, failures))
        return fams


class JobFamilies:
    def __init__(self, acc: Accumulator):
        self.acc = acc
        self.ops = acc.family("gangwatch_lustre_job_operations_total", "counter",
                              "Operations of the job on the target, from job_stats, by Lustre's op name "
                              "(for read_bytes/write_bytes the number of reads/writes).")
        self.bytes = acc.family("gangwatch_lustre_job_io_bytes_total", "counter",
                                "Bytes the job read or wrote on the target, from job_stats.")
        self.latency = acc.family("gangwatch_lustre_job_operation_latency_seconds_total", "counter",
                                  "Seconds the target spent serving the job's operations (job_stats 2.14+).")
        self.start = acc.family("gangwatch_lustre_job_start_time_seconds", "gauge",
                                "Unix time the target first saw the job's I/O (job_stats start_time, 2.14+).")
        self.sizes = acc.family("gangwatch_lustre_job_stats_io_size_requests_total", "counter",
                                "I/O requests on the target by size in bytes, summed over all jobs "
                                "(job_stats hist, 2.14+).")
        self.count = acc.family("gangwatch_lustre_job_stats_jobs", "gauge",
                                "Jobs listed in the target's job_stats.")
        self.malformed = acc.family("gangwatch_lustre_job_stats_malformed_lines", "gauge",
                                    "Lines of the target's job_stats that could not be parsed (truncated "
                                    "or garbled output).")

    def add(self, labels, jobs: list[JobStats], malformed: int, k: int, by_bytes: bool) -> None:
        acc = self.acc
        acc.set(self.count, labels, len(jobs))
        acc.set(self.malformed, labels, malformed)
        top, rest = top_jobs(jobs, k, by_bytes)
        for job in top:
            job_labels = labels + (("jobid", job_label(job.job_id)), ("slurm_job", slurm_job_id(job.job_id) or ""))
            self._add_ops(job_labels, (job,), io=by_bytes)
            if job.start_time is not None:
                acc.set(self.start, job_labels, job.start_time)
        self._add_ops(labels + (("jobid", "_other"), ("slurm_job", "")), rest, io=by_bytes)
        self._add_ops(labels + (("jobid", "_total"), ("slurm_job", "")), jobs, io=by_bytes)
        sizes: dict[tuple[str, int], int] = {}
        for job in jobs:
            for op, raw in job.hist.items():
                name = op[:-6] if op.endswith("_bytes") else op
                for size, count in parse_hist(raw).items():
                    sizes[name, size] = sizes.get((name, size), 0) + count
        for (op, size), count in sorted(sizes.items()):
            acc.set(self.sizes, labels + (("operation", op), ("size_bytes", str(size))), count)

    def _add_ops(self, labels, jobs, io: bool) -> None:
        acc = self.acc
        # On OSTs read/write bytes are always present (0 when the dump lists none, as the parser
        # skips zero lines), so that "this job did no I/O here" is a value, not a gap.
        if io:
            for op in ("read", "write"):
                acc.add(self.bytes, labels + (("operation", op),), 0)
        for job in jobs:
            for name, (samples, unit, total) in job.ops.items():
                acc.add(self.ops, labels + (("operation", name),), samples)
                if total is None:
                    continue
                if unit == "bytes":
                    op = name[:-6] if name.endswith("_bytes") else name
                    acc.add(self.bytes, labels + (("operation", op),), total)
                elif unit in _LATENCY_UNITS:
                    acc.add(self.latency, labels + (("operation", name),), total / 1e6)
