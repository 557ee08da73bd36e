"""A real `gangwatch agent` process for end-to-end tests: started on HOST:PORT, waited for until it
answers, stopped (terminate, then kill) at the end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class AgentProcess:
    def __init__(self, args: list[str], host: str = "127.0.0.1"):
        self.host, self.port = host, free_port(host)
        self.url = f"http://{host}:{self.port}"
        cmd = [sys.executable, "-m", "dashboard.cli", "agent", f"--web.listen-address={host}:{self.port}", *args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode(errors="replace")
                pytest.fail(f"agent exited with {self.proc.returncode}:\n{out}")
            try:
                urllib.request.urlopen(self.url + "/", timeout=2).read()
                break
            except urllib.error.HTTPError:  # answering, if only to say 401: it is up
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail("agent did not answer within 30 s")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc.stdout.close()
