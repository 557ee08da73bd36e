"""Filesystem collector: mount tables from real captures, a statvfs that never returns, a prober that
wedges or dies, agreement with Debian's node_exporter on this machine, and parser property tests."""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import statprobe
from collectors.exposition import encode, iter_samples
from collectors.node import filesystem as fs
from collectors.node.filesystem import FilesystemCollector, Mount
from collectors.registry import Context, NoData, Paths
from collectors.scrape import Scraper
from tests.conftest import REPO, which
from tests.support.golden import check_golden

GOLDEN = REPO / "tests" / "golden" / "filesystem"
FAKES = "tests.support.fsfakes:statvfs"


@pytest.fixture
def make():
    made: list[FilesystemCollector] = []

    def build(procfs, rootfs="/", **options) -> FilesystemCollector:
        c = FilesystemCollector(Context(paths=Paths(procfs=str(procfs), rootfs=str(rootfs)), options=options))
        made.append(c)
        return c

    yield build
    for c in made:
        pid = c.prober.pid
        c.close()
        if pid is not None:
            assert not alive(pid), "the prober child outlived close()"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def samples(text: str) -> dict[tuple[str, str], float]:
    """(metric, mountpoint) -> value."""
    return {(n, l.get("mountpoint", "")): v for n, l, v in iter_samples(text)}


def host_tree(tmp_path: Path, mounts: dict[str, str]) -> tuple[Path, Path]:
    """A procfs with a mountinfo listing `mounts` (mount point -> fstype) and a rootfs holding their dirs."""
    procfs, rootfs = tmp_path / "proc", tmp_path / "root"
    (procfs / "1").mkdir(parents=True)
    lines = []
    for i, (point, fstype) in enumerate(mounts.items()):
        (rootfs / point.lstrip("/")).mkdir(parents=True, exist_ok=True)
        lines.append(f"{100 + i} 1 0:{50 + i} / {point} rw,relatime shared:{i} - {fstype} srv{i}:/export rw")
    (procfs / "1" / "mountinfo").write_text("\n".join(lines) + "\n")
    return procfs, rootfs


# ---------------------------------------------------------------------------------------------
# Mount tables


def test_parse_node_exporter_mountinfo(fixtures_dir):
    mounts = fs.parse_mountinfo((fixtures_dir / "node_exporter/proc/1/mountinfo").read_text())
    by_point = {m.mountpoint: m for m in mounts}
    assert by_point["/"] == Mount("/dev/dm-2", "/", "ext4", ("rw", "relatime", "errors=remount-ro", "data=ordered"))
    assert by_point["/sys/fs/cgroup"].readonly
    # \040 and \011 in mount points are a space and a tab
    assert any(" bafb9e5a" in p for p in by_point) and any("\tbafb9e5a" in p for p in by_point)
    kept = {m.mountpoint for m in fs.select_mounts(mounts, fs.Selection())}
    assert kept >= {"/", "/boot", "/run", "/run/lock", "/run/user/1000"}
    assert not kept & {"/sys", "/proc", "/dev", "/dev/shm", "/proc/sys/fs/binfmt_misc", "/run/rpc_pipefs",
                       "/run/user/1000/gvfs", "/var/lib/containers/storage/overlay"}


def test_parse_procfs_mountinfo_nfs(procfs_tree):
    mounts = fs.parse_mountinfo((procfs_tree / "proc/26231/mountinfo").read_text())
    nfs = [m for m in mounts if m.mountpoint == "/mnt/nfs/test"]
    assert [m.fstype for m in nfs] == ["nfs4", "nfs4", "nfs"]
    assert nfs[0].device == "192.168.1.1:/srv/test"
    # "/  /root": a double space is not an empty field
    assert any(m.mountpoint == "/root" and m.fstype == "rootfs" for m in mounts)
    # the same mount point three times: the last one is the one statvfs sees
    kept = [m for m in fs.select_mounts(mounts, fs.Selection()) if m.mountpoint == "/mnt/nfs/test"]
    assert kept == [nfs[-1]]


def test_parse_gpfs_exporter_proc_mounts(fixtures_dir):
    mounts = fs.parse_mounts((fixtures_dir / "gpfs_exporter/mount/mockedProcMounts.txt").read_text())
    assert {(m.mountpoint, m.fstype) for m in mounts} >= {
        ("/fs/scratch", "gpfs"), ("/fs/project", "gpfs"), ("/users/PZS0710", "nfs4"), ("/", "nfs"), ("/tmp", "xfs")}


def test_default_selection_keeps_hpc_and_local_filesystems():
    keep = ["lustre", "gpfs", "nfs", "nfs4", "xfs", "ext4", "btrfs", "zfs", "beegfs", "cifs", "tmpfs",
            "fuse.sshfs", "cephfs", "wekafs"]
    drop = ["proc", "sysfs", "cgroup", "cgroup2", "autofs", "overlay", "squashfs", "devpts", "tracefs",
            "rpc_pipefs", "fusectl", "fuse.lxcfs", "nsfs", "binfmt_misc", "efivarfs"]
    sel = fs.Selection()
    for fstype in keep:
        assert sel.wants(Mount("d", "/mnt/x", fstype, ())), fstype
    for fstype in drop:
        assert not sel.wants(Mount("d", "/mnt/x", fstype, ())), fstype
    only = fs.Selection(fs_types_include=re.compile(r"^(lustre|gpfs)$"))
    assert only.wants(Mount("d", "/l", "lustre", ())) and not only.wants(Mount("d", "/x", "xfs", ()))


def test_fixture_tree_golden(fixtures_dir, make, update_golden):
    # Mount points of a fixture tree do not exist here: a stat function with fixed values stands in.
    c = make(fixtures_dir / "node_exporter" / "proc", collector_filesystem_stat_function="tests.support.fsfakes:fixed")
    text = encode(c.collect())
    check_golden(GOLDEN / "node_exporter_proc.prom", text, update_golden)
    s = samples(text)
    assert s[("gangwatch_filesystem_size_bytes", "/boot")] == 1000 * 4096
    assert s[("gangwatch_filesystem_avail_bytes", "/boot")] == 400 * 4096
    assert s[("gangwatch_filesystem_files_free", "/boot")] == 60


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian's prometheus) is not installed")
def test_output_passes_promtool_lint(fixtures_dir, make):
    c = make(fixtures_dir / "node_exporter" / "proc", collector_filesystem_stat_function="tests.support.fsfakes:fixed")
    done = subprocess.run(["promtool", "check", "metrics"], input=encode(c.collect()).encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_mount_table_fallbacks(tmp_path, make):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "mountinfo").write_text("")  # empty: fall back to the next source
    (tmp_path / "mounts").write_text("garbage\n/dev/sda1 / ext4 rw 0 0\n")
    c = make(tmp_path, collector_filesystem_stat_function="tests.support.fsfakes:fixed")
    assert samples(encode(c.collect()))[("gangwatch_filesystem_size_bytes", "/")] == 4096000
    os.remove(tmp_path / "mounts")
    with pytest.raises(NoData):
        c.collect()


# ---------------------------------------------------------------------------------------------
# statvfs that hangs, fails, or takes the prober down


def test_hung_mount_becomes_a_metric_not_a_hung_scrape(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/lustre": "lustre", "/mnt/hung_nfs": "nfs4", "/gpfs/hung_fs": "gpfs",
                                          "/mnt/denied": "nfs", "/mnt/stale": "nfs", "/mnt/broken": "beegfs"})
    c = make(procfs, rootfs, collector_filesystem_stat_function=FAKES)
    scraper = Scraper([c], timeout=0.9, cache_ttl=0)
    threads_before = threading.active_count()
    real = os.statvfs(rootfs / "lustre")
    child = None
    for i in range(10):
        t0 = time.monotonic()
        scrape = scraper.scrape()
        took = time.monotonic() - t0
        assert took < 1.0, f"scrape {i} took {took:.2f}s"
        if i > 0:
            assert took < 0.3, "a known-hung mount must not be waited for again"
        s = samples(scrape.text)
        assert s[("gangwatch_scrape_collector_success", "")] == 1
        assert s[("gangwatch_filesystem_stat_timeout", "/mnt/hung_nfs")] == 1
        assert s[("gangwatch_filesystem_stat_timeout", "/gpfs/hung_fs")] == 1
        assert ("gangwatch_filesystem_size_bytes", "/mnt/hung_nfs") not in s
        assert ("gangwatch_filesystem_device_error", "/mnt/hung_nfs") not in s  # unknown, not 0
        assert s[("gangwatch_filesystem_readonly", "/mnt/hung_nfs")] == 0  # known from the mount table
        assert s[("gangwatch_filesystem_stat_timeout", "/lustre")] == 0
        assert s[("gangwatch_filesystem_device_error", "/lustre")] == 0
        assert s[("gangwatch_filesystem_size_bytes", "/lustre")] == real.f_blocks * real.f_frsize
        assert s[("gangwatch_filesystem_files", "/lustre")] == real.f_files
        for point in ("/mnt/denied", "/mnt/stale", "/mnt/broken"):
            assert s[("gangwatch_filesystem_device_error", point)] == 1
            assert s[("gangwatch_filesystem_stat_timeout", point)] == 0
            assert ("gangwatch_filesystem_size_bytes", point) not in s
        child = child or c.prober.pid
        assert c.prober.pid == child, "the prober was restarted though it kept answering"
    # no pile-up: one stuck thread per hung mount in the child, none added in the agent
    tasks = len(os.listdir(f"/proc/{child}/task"))
    assert tasks <= 2 + 2, f"{tasks} threads in the prober for 2 hung mounts"
    assert threading.active_count() <= threads_before + 1  # the scraper's own runner
    assert c.prober.restarts == 0
    scraper.close()


def test_a_mount_that_recovers_is_measured_again(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/scratch/slow_lustre": "lustre"})
    block = Path(str(rootfs / "scratch/slow_lustre") + ".block")
    block.write_text("")
    c = make(procfs, rootfs, collector_filesystem_stat_function=FAKES, collector_filesystem_stat_timeout=0.2)
    assert samples(encode(c.collect()))[("gangwatch_filesystem_stat_timeout", "/scratch/slow_lustre")] == 1
    assert c.prober.pending
    block.unlink()
    deadline = time.monotonic() + 5
    while True:
        s = samples(encode(c.collect()))
        if s[("gangwatch_filesystem_stat_timeout", "/scratch/slow_lustre")] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert s[("gangwatch_filesystem_stat_timeout", "/scratch/slow_lustre")] == 0
    assert s[("gangwatch_filesystem_size_bytes", "/scratch/slow_lustre")] > 0
    assert not c.prober.pending


def test_wedged_prober_is_killed_and_replaced_with_backoff(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/home": "nfs4", "/mnt/wedge": "lustre"})
    c = make(procfs, rootfs, collector_filesystem_stat_function=FAKES, collector_filesystem_stat_timeout=0.3)
    t0 = time.monotonic()
    s = samples(encode(c.collect()))
    assert time.monotonic() - t0 < 1.0
    first = c.prober.lingering[0].pid if c.prober.lingering else None
    assert c.prober.pid is None, "a prober that stopped answering must be killed"
    assert s[("gangwatch_filesystem_stat_timeout", "/home")] == 1
    # during the back-off nothing is started and nothing is waited for
    t0 = time.monotonic()
    s = samples(encode(c.collect()))
    assert time.monotonic() - t0 < 0.1 and c.prober.pid is None
    time.sleep(1.05)
    encode(c.collect())  # a fresh child, wedged again by the same mount
    assert c.prober.restarts == 1
    assert samples(encode(c.collect()))[("gangwatch_filesystem_prober_restarts_total", "")] == 1
    time.sleep(0.1)
    c.prober._reap()
    assert not c.prober.lingering, "SIGKILLed children must be reaped"
    if first is not None:
        assert not alive(first)


def test_dead_prober_is_replaced(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/home": "nfs4"})
    c = make(procfs, rootfs)
    assert samples(encode(c.collect()))[("gangwatch_filesystem_stat_timeout", "/home")] == 0
    pid = c.prober.pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    assert samples(encode(c.collect()))[("gangwatch_filesystem_stat_timeout", "/home")] == 1  # in back-off
    time.sleep(1.05)
    s = samples(encode(c.collect()))
    assert s[("gangwatch_filesystem_stat_timeout", "/home")] == 0 and c.prober.pid not in (None, pid)
    assert s[("gangwatch_filesystem_prober_restarts_total", "")] == 1
    assert not alive(pid)


def test_unloadable_stat_function_fails_the_collector(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/home": "nfs4"})
    c = make(procfs, rootfs, collector_filesystem_stat_function="no_such_module:statvfs")
    scraper = Scraper([c], timeout=0.9, cache_ttl=0)
    for _ in range(2):
        s = samples(scraper.scrape().text)
        assert s[("gangwatch_scrape_collector_success", "")] == 0
    assert "no_such_module" in c.prober.fatal and c.prober.pid is None
    scraper.close()


# ---------------------------------------------------------------------------------------------
# Peer agreement on this machine's real mounts: Debian's node_exporter, same selection


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not which("prometheus-node-exporter"), reason="Debian's prometheus-node-exporter is not installed")
def test_agrees_with_node_exporter_on_this_host(make):
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus-node-exporter", "--collector.disable-defaults", "--collector.filesystem",
         f"--web.listen-address=127.0.0.1:{port}",
         f"--collector.filesystem.mount-points-exclude={fs.DEFAULT_MOUNT_POINTS_EXCLUDE}",
         f"--collector.filesystem.fs-types-exclude={fs.DEFAULT_FS_TYPES_EXCLUDE}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                peer_text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(5)
    ours = samples(encode(make("/proc").collect()))
    theirs = {(n.replace("node_", "gangwatch_", 1), l["mountpoint"]): v for n, l, v in iter_samples(peer_text)
              if n.startswith("node_filesystem_")}
    points = {p for n, p in theirs if n == "gangwatch_filesystem_size_bytes"}
    assert points and points == {p for n, p in ours if n == "gangwatch_filesystem_size_bytes"}
    for p in points:
        for name in ("size_bytes", "files", "readonly", "device_error"):
            key = (f"gangwatch_filesystem_{name}", p)
            assert ours[key] == theirs[key], key
        for name in ("free_bytes", "avail_bytes", "files_free"):  # moving between the two reads
            key = (f"gangwatch_filesystem_{name}", p)
            assert abs(ours[key] - theirs[key]) <= max(64 << 20, 0.001 * theirs[key]), key


# ---------------------------------------------------------------------------------------------
# Flags and parsers


def test_flags_are_validated():
    from collectors.agent import build_parser

    args = build_parser().parse_args(["--collector.filesystem.fs-types-include", "^(lustre|gpfs)$",
                                      "--collector.filesystem.stat-timeout", "0.3"])
    assert args.collector_filesystem_fs_types_include == "^(lustre|gpfs)$"
    assert args.collector_filesystem_stat_timeout == 0.3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--collector.filesystem.mount-points-exclude", "(unclosed"])


mount_text = st.one_of(
    st.text(),
    st.lists(st.lists(st.sampled_from(["-", "/", "/mnt/a\\040b", "rw,ro", "nfs4", "0:5", "1", "shared:1", "\\1",
                                       "\\777", ""]), max_size=12).map(" ".join), max_size=5).map("\n".join))


@settings(max_examples=300, deadline=None)
@given(mount_text)
def test_mount_parsers_never_raise(text):
    for parse in (fs.parse_mountinfo, fs.parse_mounts):
        for m in parse(text):
            assert m.mountpoint.startswith("/")
        fs.select_mounts(parse(text), fs.Selection())
    fs.unescape(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200),
                 st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
                              lambda inner: st.one_of(st.lists(inner, max_size=10),
                                                      st.dictionaries(st.sampled_from(["id", "r", "late", "hello", "fatal", "/a"]),
                                                                      inner, max_size=4)),
                              max_leaves=20).map(lambda o: __import__("json").dumps(o))))
def test_probe_message_parser_never_raises(line):
    msg = statprobe.parse_message(line)
    if msg is not None and msg.results:
        for value in msg.results.values():
            assert isinstance(value, (statprobe.StatValues, statprobe.StatError))


def test_probe_message_known_answers():
    assert statprobe.parse_message(b'{"hello": 12}').kind == "hello"
    msg = statprobe.parse_message(b'{"id": 3, "r": {"/a": [4096,4096,10,5,4,100,50,50,0], "/b": 13, "/c": "x"}}')
    assert msg.ident == 3 and msg.results == {"/a": statprobe.StatValues(4096, 4096, 10, 5, 4, 100, 50, 50, 0),
                                              "/b": statprobe.StatError(errno.EACCES)}
    assert statprobe.parse_message(b'{"late": "/a", "r": [1,2,3]}') is None
    assert statprobe.parse_message(b"not json") is None


def test_thousands_of_mount_points_fit_through_the_pipe(tmp_path, make):
    # k8s nodes carry thousands of mounts: the request is larger than a pipe buffer (64 KiB)
    procfs, rootfs = host_tree(tmp_path, {"/home": "nfs4"})
    lines = [f"{200 + i} 1 0:99 / /scratch/job_{i:05d}_{'x' * 40} rw - lustre fs:/s rw" for i in range(3000)]
    with open(procfs / "1" / "mountinfo", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    c = make(procfs, rootfs, collector_filesystem_stat_function="tests.support.fsfakes:fixed")
    s = samples(encode(c.collect()))
    assert sum(1 for n, _ in s if n == "gangwatch_filesystem_size_bytes") == 3001
    assert c.prober.restarts == 0 and c.prober.pid is not None


def test_a_slow_starting_prober_is_not_killed(tmp_path, make):
    procfs, rootfs = host_tree(tmp_path, {"/home": "nfs4"})
    c = make(procfs, rootfs, collector_filesystem_stat_function="tests.support.fsslowstart:statvfs",
             collector_filesystem_stat_timeout=0.2)
    t0 = time.monotonic()
    s = samples(encode(c.collect()))
    assert time.monotonic() - t0 < 1.0
    assert s[("gangwatch_filesystem_stat_timeout", "/home")] == 1  # no answer yet, honestly reported
    pid = c.prober.pid
    assert pid is not None, "a child still starting up must not be killed"
    time.sleep(1.2)
    s = samples(encode(c.collect()))
    assert s[("gangwatch_filesystem_stat_timeout", "/home")] == 0
    assert c.prober.pid == pid and c.prober.restarts == 0


def test_local_in_memory_filesystems_skip_the_prober(tmp_path, make):
    """ext4/xfs/tmpfs are stat'ed in-process (their statfs reads counters in memory); network
    filesystems still go through the prober child, and an injected stat function sees everything."""
    procfs, rootfs = host_tree(tmp_path, {"/local": "ext4", "/scratch": "tmpfs", "/home": "nfs4"})
    c = make(procfs, rootfs)
    asked: list[list[str]] = []
    real_probe = c.prober.probe
    c.prober.probe = lambda paths, timeout: asked.append(list(paths)) or real_probe(paths, timeout)
    got = samples(encode(c.collect()))
    assert asked == [[str(rootfs / "home")]]
    want = os.statvfs(rootfs / "local")
    assert got[("gangwatch_filesystem_size_bytes", "/local")] == want.f_blocks * want.f_frsize
    assert got[("gangwatch_filesystem_device_error", "/scratch")] == 0
    assert got[("gangwatch_filesystem_stat_timeout", "/home")] == 0
    injected = make(procfs, rootfs, collector_filesystem_stat_function=FAKES)
    assert not any(t.in_process for t in injected._targets())
