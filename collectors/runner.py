"""Running outside commands (lctl, mmpmon, squeue, ...) with a deadline and never through a shell.

A command that hangs is killed with its whole process group when the deadline passes, so a stuck
`mmpmon` costs one timeout metric, not a pile of blocked threads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it timed out or could not start
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    error: str = ""  # why it could not start (not found, permission denied)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.error


class CommandRunner:
    """Runs argv lists with a timeout. Tests substitute an object with the same `run` method."""

    def __init__(self, env: dict[str, str] | None = None):
        self.env = env

    def run(self, argv: Sequence[str], timeout: float = 5.0, input: str | None = None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=self.env,
            )
        except OSError as exc:
            return CommandResult(argv, None, "", "", time.monotonic() - start, error=f"{type(exc).__name__}: {exc}")
        try:
            out, err = proc.communicate(input=input.encode() if input is not None else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                out, err = b"", b""  # a process in D state; abandon its pipes rather than block
            return CommandResult(argv, None, _text(out), _text(err), time.monotonic() - start, timed_out=True)
        return CommandResult(argv, proc.returncode, _text(out), _text(err), time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
