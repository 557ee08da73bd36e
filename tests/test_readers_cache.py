"""collectors/readers.py keeps node-wide procfs files open and re-reads them with pread(2).

What must hold: every read returns the file's current content; only procfs files with a stable
meaning are kept (never regular files such as the fixture trees, never /proc/<pid>/...); each
thread's descriptors close when the thread ends; a failing descriptor is dropped and the file
opened afresh.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from collectors import readers


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def fresh_thread_cache(monkeypatch):
    monkeypatch.setattr(readers, "_mine", readers._ThreadFiles())
    return readers._mine


def test_procfs_reads_stay_fresh_through_the_kept_descriptor(fresh_thread_cache):
    first = readers.read_text("/proc/uptime")
    assert "/proc/uptime" in fresh_thread_cache.files
    time.sleep(0.05)
    second = readers.read_text("/proc/uptime")
    assert float(second.split()[0]) > float(first.split()[0])  # not a stale copy
    assert readers.read_text("/proc/self/status").startswith("Name:")  # whole file, several lines


def test_a_file_longer_than_one_read_comes_whole(fresh_thread_cache):
    path, limit = "/proc/kallsyms", 300_000  # static text, far longer than one 64 KiB read
    if not os.access(path, os.R_OK):
        pytest.skip("no /proc/kallsyms")
    with open(path, "rb") as fh:
        direct = fh.read(limit).decode()
    readers.read_text(path, limit)
    assert path in fresh_thread_cache.files
    assert readers.read_text(path, limit) == direct


def test_a_large_procfs_file_is_read_whole(fresh_thread_cache):
    direct = open("/proc/self/mountinfo", "rb").read().decode()
    readers.read_text("/proc/self/mountinfo")
    cached = readers.read_text("/proc/self/mountinfo")
    assert "/proc/self/mountinfo" in fresh_thread_cache.files
    assert cached.splitlines()[0] == direct.splitlines()[0] and len(cached.splitlines()) == len(direct.splitlines())
    assert readers.read_text("/proc/self/mountinfo", limit=10) == direct[:10]


def test_regular_files_are_never_kept(tmp_path, fresh_thread_cache):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 1 kB\n")
    assert readers.read_text(str(path)) == "MemTotal: 1 kB\n"
    replacement = tmp_path / "new"
    replacement.write_text("MemTotal: 2 kB\n")
    os.replace(replacement, path)  # as a writer that renames into place would
    assert readers.read_text(str(path)) == "MemTotal: 2 kB\n"
    assert str(path) not in fresh_thread_cache.files


def test_per_process_files_are_not_kept(fresh_thread_cache):
    child = subprocess.Popen(["sleep", "5"])
    try:
        path = f"/proc/{child.pid}/status"
        deadline = time.monotonic() + 5
        while not readers.read_text(path).startswith("Name:\tsleep") and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd: each read sees the file as it is now
        assert readers.read_text(path).startswith("Name:\tsleep")
        assert path not in fresh_thread_cache.files
        assert readers.read_text("/proc/thread-self/status") is not None
        assert "/proc/thread-self/status" not in fresh_thread_cache.files
    finally:
        child.kill()
        child.wait()


def test_descriptors_close_with_their_thread():
    before = open_fds()
    seen = []

    def work():
        for p in ("/proc/meminfo", "/proc/stat", "/proc/uptime"):
            readers.read_text(p)
        seen.append(len(readers._mine.files))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [3]
    deadline = time.monotonic() + 2
    while open_fds() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert open_fds() <= before


def test_a_failing_kept_descriptor_is_dropped_and_reopened(fresh_thread_cache, monkeypatch):
    readers.read_text("/proc/uptime")
    assert "/proc/uptime" in fresh_thread_cache.files
    real = os.pread

    def broken(fd, n, offset):
        monkeypatch.setattr(os, "pread", real)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pread", broken)
    assert readers.read_text("/proc/uptime") is not None  # answered by a fresh open
    assert "/proc/uptime" in fresh_thread_cache.files  # and kept again


def test_missing_files_and_folders_are_none(tmp_path):
    assert readers.read_text(str(tmp_path / "absent")) is None
    assert readers.read_text(str(tmp_path)) is None
    assert readers.read_first_line(str(tmp_path / "absent")) is None
