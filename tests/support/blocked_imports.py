"""Run Python code in a fresh interpreter where some top-level packages cannot be imported.

Stands in for a node installed without an extra (`pip install gangwatch` without `[dashboard]`):
the blocked packages raise ModuleNotFoundError exactly as if they were absent, even though this
venv has them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SHIM = """\
import importlib.abc, sys
_BLOCKED = frozenset({blocked!r})
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""


def run(blocked: set[str], code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -c <shim + code> args...` from the repository root; text output captured."""
    program = _SHIM.format(blocked=sorted(blocked)) + code
    return subprocess.run([sys.executable, "-c", program, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
