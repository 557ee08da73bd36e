"""What the agent remembers between scrapes to stay cheap, and when it forgets it (issue 2, CPU per
scrape): kept-open sysfs attributes (netdev), the remembered absence of Lustre and Slurm sources,
the polled mount table (filesystem) and meminfo's reused layout. Values themselves are never cached:
each test changes the source and checks that the next collection shows it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import lustre_common
from collectors.exposition import encode, iter_samples
from collectors.node import jobs as jobs_module
from collectors.node.filesystem import FilesystemCollector
from collectors.node.jobs import JobsCollector
from collectors.node.lustre_client import LustreClientCollector
from collectors.node.memory import MeminfoCollector, parse_meminfo
from collectors.node.netdev import NetdevCollector
from collectors.readers import AttributeFiles
from collectors.registry import Context, NoData, Paths


def samples(fams) -> dict:
    return {(n, tuple(sorted(lbl.items()))): v for n, lbl, v in iter_samples(encode(fams))}


class Clock:
    """A stand-in for the `time` module's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


# ---------------------------------------------------------------- kept-open sysfs attributes

def test_attribute_files_outside_sysfs_are_read_afresh(tmp_path):
    base = tmp_path / "eth0"
    base.mkdir()
    (base / "operstate").write_text("up\n")
    files = AttributeFiles()
    assert files.read_first_line(str(base), 1, "operstate") == "up"
    (base / "operstate").write_text("down\n")
    assert files.read_first_line(str(base), 1, "operstate") == "down"  # a regular file is never kept
    assert files._kept == 0
    assert files.read_first_line(str(base), 1, "missing") is None


@pytest.mark.skipif(not os.path.isdir("/sys/class/net/lo"), reason="needs a live sysfs")
def test_attribute_files_keep_sysfs_open_until_the_identity_changes():
    files = AttributeFiles()
    base = "/sys/class/net/lo"
    ino = {e.name: e.inode() for e in os.scandir("/sys/class/net")}["lo"]
    first = files.read_first_line(f"{base}/statistics", ino, "rx_packets")
    assert first is not None and first.isdigit() and files._kept == 1
    again = files.read_first_line(f"{base}/statistics", ino, "rx_packets")
    assert int(again) >= int(first) and files._kept == 1  # re-read through the same descriptor
    files.read_first_line(f"{base}/statistics", ino + 1, "rx_packets")  # the name now means another object
    assert files._kept == 1
    files.retain(set())
    assert files._kept == 0


@pytest.mark.skipif(not os.path.isdir("/sys/class/net/lo"), reason="needs a live sysfs")
def test_netdev_live_closes_what_it_keeps():
    c = NetdevCollector(Context(paths=Paths("/proc", "/sys")))
    first = samples(c.collect())
    second = samples(c.collect())
    assert {k for k in first if k[0] == "gangwatch_network_up"} == {k for k in second if k[0] == "gangwatch_network_up"}
    assert c._files._kept >= 2
    c.close()
    assert c._files._kept == 0


# ---------------------------------------------------------------- remembered absence

def test_lustre_absence_is_remembered_for_a_minute(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(lustre_common, "time", clock)
    ctx = Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys"), "/"),
                  options={"collector_lustre_lctl_path": str(tmp_path / "no-lctl")})
    c = LustreClientCollector(ctx)
    with pytest.raises(NoData):
        c.collect()
    stats = tmp_path / "proc" / "fs" / "lustre" / "llite" / "lfs-ffff0001"
    stats.mkdir(parents=True)
    (stats / "stats").write_text("snapshot_time 1.0 secs.usecs\nread_bytes 4 samples [bytes] 1 8 16\n")
    clock.now += lustre_common.ABSENT_RECHECK_SECONDS - 1
    with pytest.raises(NoData):
        c.collect()  # not looked for again yet
    clock.now += 2
    got = samples(c.collect())
    assert got[("gangwatch_lustre_client_io_bytes_total", (("fs", "lfs"), ("operation", "read")))] == 16
    (stats / "stats").write_text("snapshot_time 2.0 secs.usecs\nread_bytes 5 samples [bytes] 1 8 40\n")
    got = samples(c.collect())  # a root that exists is read on every scrape: fresh values
    assert got[("gangwatch_lustre_client_io_bytes_total", (("fs", "lfs"), ("operation", "read")))] == 40


def test_no_slurm_is_remembered_for_a_minute(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(jobs_module, "time", clock)
    root = tmp_path / "cgroup"
    root.mkdir()
    ctx = Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys"), "/"),
                  options={"collector_jobs_cgroup_root": str(root), "collector_jobs_nvml": False,
                           "collector_jobs_gpu_mapping_dir": str(tmp_path / "none")})
    c = JobsCollector(ctx)
    with pytest.raises(NoData):
        c.collect()
    job = root / "system.slice" / "slurmstepd.scope" / "job_42"
    job.mkdir(parents=True)
    (job / "cpu.stat").write_text("usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\n")
    clock.now += jobs_module.NO_SLURM_RECHECK_SECONDS - 1
    with pytest.raises(NoData):
        c.collect()
    clock.now += 2
    got = samples(c.collect())
    assert got[("gangwatch_job_cpu_seconds_total", (("jobid", "42"),))] == 2.0
    (job / "cpu.stat").write_text("usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n")
    assert samples(c.collect())[("gangwatch_job_cpu_seconds_total", (("jobid", "42"),))] == 3.0


# ---------------------------------------------------------------- the polled mount table

def test_mount_table_of_a_copied_tree_is_read_every_scrape(tmp_path):
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    line = "36 35 98:0 / {point} rw,noatime - ext4 /dev/sda1 rw\n"
    (proc / "1" / "mountinfo").write_text(line.format(point="/"))
    c = FilesystemCollector(Context(paths=Paths(str(proc), str(tmp_path / "sys"), "/"),
                                    options={"collector_filesystem_stat_function": "tests.support.fsfakes:fixed"}))
    try:
        assert {lbl for n, lbl in samples(c.collect()) if n == "gangwatch_filesystem_size_bytes"} == \
            {(("device", "/dev/sda1"), ("fstype", "ext4"), ("mountpoint", "/"))}
        assert c._watch is None  # not a real procfs: nothing to poll
        (proc / "1" / "mountinfo").write_text(line.format(point="/") + line.format(point="/tmp"))
        assert len([1 for n, _ in samples(c.collect()) if n == "gangwatch_filesystem_size_bytes"]) == 2
    finally:
        c.close()


@pytest.mark.skipif(not os.path.exists("/proc/1/mountinfo"), reason="needs a live procfs")
def test_live_mount_table_is_polled_not_reread(monkeypatch):
    from collectors.node import filesystem

    c = FilesystemCollector(Context(paths=Paths("/proc", "/sys", "/"),
                                    options={"collector_filesystem_stat_function": "tests.support.fsfakes:fixed"}))
    try:
        first = samples(c.collect())
        assert c._watch is not None
        reads = []
        monkeypatch.setattr(filesystem, "read_text", lambda path, *a: reads.append(path))
        assert samples(c.collect()).keys() == first.keys()
        assert reads == []  # unchanged: one poll, no read
    finally:
        c.close()


# ---------------------------------------------------------------- meminfo's reused layout

MEMINFO = "MemTotal:       16000 kB\nMemFree:         8000 kB\nHugePages_Total:       4\nHugePages_Free:        2\n"
meminfo_like = st.lists(st.sampled_from(["MemTotal:", "MemFree:", "Cached:", "HugePages_Total:", "HugePages_Free:",
                                         "Foo(bar):", "1", "22", "333", "kB", "MB", " ", "  ", "\t", "\n", "\n", "x"]),
                        max_size=40).map("".join)


def meminfo_ctx(tmp_path: Path) -> Context:
    (tmp_path / "proc").mkdir(exist_ok=True)
    return Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys")))


def fresh(tmp_path: Path, text: str) -> dict | None:
    (tmp_path / "proc" / "meminfo").write_text(text)
    try:
        return samples(MeminfoCollector(meminfo_ctx(tmp_path)).collect())
    except ValueError:
        return None


def test_meminfo_layout_follows_the_file(tmp_path):
    c = MeminfoCollector(meminfo_ctx(tmp_path))
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    assert samples(c.collect())[("gangwatch_memory_mem_free_bytes", ())] == 8000 * 1024
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO.replace("8000", "123456789"))
    assert samples(c.collect())[("gangwatch_memory_mem_free_bytes", ())] == 123456789 * 1024
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO + "Cached:  7 kB\n")
    assert samples(c.collect())[("gangwatch_memory_cached_bytes", ())] == 7 * 1024
    assert len(parse_meminfo(MEMINFO)) == 4


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=meminfo_like, second=meminfo_like)
def test_meminfo_after_any_file_equals_a_fresh_parse(tmp_path, first, second):
    c = MeminfoCollector(meminfo_ctx(tmp_path))
    for text in (MEMINFO, first, second):
        expected = fresh(tmp_path, text)
        (tmp_path / "proc" / "meminfo").write_text(text)
        try:
            got = samples(c.collect())
        except ValueError:
            got = None
        assert got == expected


# ---------------------------------------------------------------- the prober child's fast path

def test_prober_reads_on_while_a_slow_stat_holds_the_reader(tmp_path):
    """The child's reader stats inline; when it is still on a batch at the deadline another thread
    takes over reading, so the next request is answered at once and the child is not restarted."""
    import time

    from collectors.statprobe import TIMED_OUT, StatError, StatProber, StatValues

    slow = tmp_path / "slow_mount"
    Path(str(slow) + ".block").write_text("")
    prober = StatProber("tests.support.fsfakes:statvfs")
    try:
        assert isinstance(prober.probe([str(tmp_path)], 0.3)[str(tmp_path)], StatValues)
        pid = prober.pid
        first = prober.probe([str(slow), str(tmp_path)], 0.2)  # the reader reaches slow_mount first
        assert first[str(slow)] is TIMED_OUT and isinstance(first[str(tmp_path)], StatValues)
        assert str(slow) in prober.pending
        t0 = time.monotonic()
        again = prober.probe([str(tmp_path), str(slow)], 0.3)
        assert time.monotonic() - t0 < 0.25, "the next request waited for the slow stat"
        assert isinstance(again[str(tmp_path)], StatValues) and again[str(slow)] is TIMED_OUT
        Path(str(slow) + ".block").unlink()
        deadline = time.monotonic() + 5
        while prober.pending and time.monotonic() < deadline:
            time.sleep(0.05)
            prober.probe([str(tmp_path)], 0.2)
        assert not prober.pending  # the late result came back
        assert isinstance(prober.probe([str(slow)], 0.3)[str(slow)], StatError)  # probed again: ENOENT
        assert prober.pid == pid and prober.restarts == 0
    finally:
        prober.close()
