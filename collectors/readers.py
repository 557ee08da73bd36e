"""Small, forgiving file readers shared by the collectors: a missing or garbled file is `None`, never an exception."""

from __future__ import annotations

import os


def read_text(path: str, limit: int = 4 << 20) -> str | None:
    """The file's text (undecodable bytes replaced), or None when it cannot be read."""
    # Raw os.read in 64 KiB chunks: `open().read(limit)` allocates a `limit`-sized buffer up front
    # (4 MiB), which made every small /proc or /sys read cost ~2.5x more (measured: 38 us vs 14 us).
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks: list[bytes] = []
            total = 0
            while total < limit:
                chunk = os.read(fd, min(65536, limit - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def read_required(path: str, limit: int = 4 << 20) -> str:
    """`read_text` for a file the collector cannot do without: OSError naming it (a collector failure) when unreadable."""
    text = read_text(path, limit)
    if text is None:
        raise OSError(f"cannot read {path}")
    return text


def read_first_line(path: str) -> str | None:
    """The first line, stripped. One read(2): a sysfs attribute comes whole in one read, and procfs
    returns at least a whole first line, so the usual end-of-file read is skipped (~10% cheaper)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 8192)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    line, newline, _ = data.partition(b"\n")
    if not newline and len(data) == 8192:  # a first line longer than one read: take the slow path
        text = read_text(path, 64 << 10)
        return None if text is None else text.split("\n", 1)[0].strip()
    return line.decode("utf-8", errors="replace").strip()


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
