"""Fake command runners for the Slurm exporter tests: they answer argv with captured outputs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from collectors.runner import CommandResult
from collectors.slurm.sched_config import QOS_ARGV

# argv (joined) -> file name in a slurm-22.05-style capture folder (see capture.sh)
FILES_2205 = {
    "squeue --json": "squeue_--json.json",
    "sinfo --json": "sinfo_--json.json",
    "scontrol -o show partition": "scontrol_show_partition.txt",
    "scontrol -o show reservation": "scontrol_-o_show_reservation.txt",
    "sdiag": "sdiag.txt",
    "sprio": "sprio_-l.txt",
    "sshare -l -a -P": "sshare_-l_-a_-P.txt",
    "scontrol -o show job -d": "scontrol_-o_show_job_-d.txt",
    "scontrol show config": "scontrol_show_config.txt",
    " ".join(QOS_ARGV): "sacctmgr_show_qos_-P.txt",
    # 22.05's answer without Licenses= (captured from the test cluster of tests/slurm_cluster.py)
    "scontrol -o show licenses": str(Path(__file__).parent.parent / "data" / "slurm-licenses"
                                     / "scontrol_-o_show_licenses.none.txt"),
}


def key_of(argv) -> str:
    argv = [a.rsplit("/", 1)[-1] if i == 0 else a for i, a in enumerate(argv)]
    if argv[0] == "sprio":
        return "sprio"
    return " ".join(argv)


class FileRunner:
    """Serves files from a capture folder; `override(key, fn)` replaces one command's behaviour."""

    def __init__(self, folder: Path, version: str = "slurm 22.05.8", files: dict | None = None):
        self.folder = Path(folder)
        self.version = version
        self.files = dict(files or FILES_2205)
        self.overrides: dict[str, Callable] = {}
        self.calls: list[str] = []

    def override(self, key: str, fn: Callable | None) -> None:
        if fn is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = fn

    def run(self, argv, timeout: float = 5.0, input=None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        key = key_of(argv)
        self.calls.append(key)
        if key in self.overrides:
            return self.overrides[key](argv, timeout)
        if key == "squeue --version":
            return CommandResult(argv, 0, self.version + "\n", "", 0.001)
        name = self.files.get(key)
        if name is None and key == "scontrol show topology":
            # what 22.05 without a topology plugin answers (tests/data/slurm-topology)
            return CommandResult(argv, 0, "", "scontrol: error: No topology information available\n", 0.001)
        if name is None:
            return CommandResult(argv, 1, "", f"{argv[0]}: unknown command in fake\n", 0.001)
        return CommandResult(argv, 0, (self.folder / name).read_text(), "", 0.001)


def timeout_result(argv, timeout):
    return CommandResult(tuple(argv), None, "", "", timeout, timed_out=True)


def failing_result(message: str = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", rc: int = 1):
    def fn(argv, timeout):
        return CommandResult(tuple(argv), rc, "", message + "\n", 0.01)
    return fn


def text_result(text: str):
    def fn(argv, timeout):
        return CommandResult(tuple(argv), 0, text, "", 0.01)
    return fn


def slow_result(seconds: float):
    """Really sleeps (bounded by the timeout), then reports a timeout, like a hung slurmctld."""
    def fn(argv, timeout):
        time.sleep(min(seconds, timeout))
        return CommandResult(tuple(argv), None, "", "", min(seconds, timeout), timed_out=True)
    return fn
