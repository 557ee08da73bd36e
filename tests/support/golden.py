"""Golden-file comparison shared by collector tests: compare, or rewrite with `--update-golden`."""

from __future__ import annotations

from pathlib import Path


def check_golden(path: Path, text: str, update: bool) -> None:
    """Assert `text` equals the golden file at `path`; with `update`, write it instead."""
    if update or not path.exists():
        if not update:
            raise AssertionError(f"golden file {path} is missing; run pytest with --update-golden")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    expected = path.read_text()
    assert text == expected, f"output differs from {path}; rerun with --update-golden after checking the diff"


def promtool_problems(path: Path) -> str | None:
    """`promtool check metrics` on an exposition file: its complaints, "" when clean, None without promtool."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    with open(path, "rb") as fh:
        proc = subprocess.run([promtool, "check", "metrics"], stdin=fh, capture_output=True, timeout=60)
    return (proc.stdout + proc.stderr).decode(errors="replace") if proc.returncode else ""


def assert_promtool_clean(path: Path) -> None:
    import pytest

    problems = promtool_problems(path)
    if problems is None:
        pytest.skip("promtool not installed")
    assert problems == "", f"{path}: {problems}"
