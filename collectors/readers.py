"""Small, forgiving file readers shared by the collectors: a missing or garbled file is `None`, never an exception."""

from __future__ import annotations

import os


def read_text(path: str, limit: int = 4 << 20) -> str | None:
    """The file's text (undecodable bytes replaced), or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def read_first_line(path: str) -> str | None:
    text = read_text(path, 64 << 10)
    if text is None:
        return None
    return text.split("\n", 1)[0].strip()


def parse_number(text: str | None) -> float | None:
    """int or float from a sysfs-style value; None for garbage, empty or missing."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return int(text, 0) if text.startswith(("0x", "0X")) else int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None


def read_number(path: str) -> float | None:
    return parse_number(read_first_line(path))


def list_dir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
