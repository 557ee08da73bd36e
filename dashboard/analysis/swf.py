"""Standard Workload Format (SWF) reader for the Parallel Workloads Archive's traces.

Sources: SWF text (plain or gzip), as published by the Parallel Workloads Archive
(https://www.cs.huji.ac.il/labs/parallel/workload/swf.html). Each job line has 18 whitespace-separated
fields, `-1` meaning unknown; lines starting with `;` are header comments (`; MaxProcs: 100`).

`parse_swf` is pure (lines in, records out). `read_swf` is the one function here that touches a
file: it opens plain or gzip input (detected by the gzip magic bytes, not the name) and feeds
`parse_swf`. No privileges needed.

Failure modes: a malformed job line (wrong field count, a field that is not a finite number) is
reported as an `SwfProblem` with its 1-based line number and skipped; it never stops the parse. A
truncated or corrupt gzip file keeps the records read before the damage and adds a problem.
An unparsable header value is kept as text and leaves `max_procs`/`max_nodes` unset.
"""

from __future__ import annotations

import codecs
import gzip
import math
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

FIELDS = 18
_new_job = tuple.__new__
_INT_FIELDS = (0, 1, 2, 3, 4, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17)


class SwfJob(NamedTuple):
    """One SWF job record. Times in seconds, -1 where the trace does not know. A named tuple, not a
    dataclass: a trace holds hundreds of thousands of them and a tuple is built several times faster."""

    job_id: int
    submit: int
    wait: int
    run: int
    alloc_procs: int
    avg_cpu: float
    used_mem: float
    req_procs: int
    req_time: int
    req_mem: float
    status: int
    user: int
    group: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: int
    line: int = 0


@dataclass(frozen=True, slots=True)
class SwfProblem:
    line: int
    reason: str
    text: str


@dataclass(frozen=True, slots=True)
class SwfHeader:
    max_procs: int | None = None
    max_nodes: int | None = None
    unix_start_time: int | None = None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SwfTrace:
    header: SwfHeader
    jobs: tuple[SwfJob, ...]
    problems: tuple[SwfProblem, ...]


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        value = float(text)  # raises ValueError for non-numbers, caught by the caller
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {text!r}") from None
        return value


def _int(text: str) -> int:
    value = _number(text)
    if isinstance(value, float):
        # Some converted traces write integral fields as 123.0; round-trip those, refuse 1.5.
        if value != int(value):
            raise ValueError(f"not an integer: {text!r}")
        return int(value)
    return value


def _header_int(value: str) -> int | None:
    try:
        return int(value.split()[0])
    except (ValueError, IndexError):
        return None


def parse_swf(lines: Iterable[str], limit: int | None = None) -> SwfTrace:
    """Parse SWF text lines. `limit` stops after that many valid job records (the trace's first N)."""
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    problems: list[SwfProblem] = []
    for number, raw in enumerate(lines, start=1):
        parts = raw.split()
        # The common case first (a job record): no strip, one split; headers and blank lines below.
        if len(parts) != FIELDS or parts[0][0] == ";":
            text = raw.strip()
            if not text:
                continue
            if text[0] == ";":
                key, sep, value = text[1:].partition(":")
                if sep and key.strip() and key.strip() not in header:
                    header[key.strip()] = value.strip()
                continue
            if limit is not None and len(jobs) >= limit:
                break
            problems.append(SwfProblem(number, f"expected {FIELDS} fields, got {len(parts)}", text[:200]))
            continue
        if limit is not None and len(jobs) >= limit:
            break  # the header comes first, so it is read in full even with limit 0
        # Every field a plain integer, or numbers where the integer fields are integral (1.0).
        # Anything else takes the careful path below, which says what is wrong.
        try:
            v = list(map(int, parts))
        except ValueError:
            try:
                v = list(map(float, parts))
                for k in _INT_FIELDS:
                    x = v[k]
                    if x != x or x != int(x):
                        raise ValueError
                    v[k] = int(x)
            except (ValueError, OverflowError):
                v = None
            if v is not None and not all(map(math.isfinite, v)):
                v = None
        if v is not None:
            v[5], v[6], v[9] = float(v[5]), float(v[6]), float(v[9])
            v.append(number)
            jobs.append(_new_job(SwfJob, v))
            continue
        try:
            ints = [_int(p) for p in parts[:5]]
            avg_cpu, used_mem = float(_number(parts[5])), float(_number(parts[6]))
            req_procs, req_time = _int(parts[7]), _int(parts[8])
            req_mem = float(_number(parts[9]))
            tail = [_int(p) for p in parts[10:]]
        except ValueError as exc:
            problems.append(SwfProblem(number, f"bad field: {exc}", raw.strip()[:200]))
            continue
        jobs.append(SwfJob(ints[0], ints[1], ints[2], ints[3], ints[4], avg_cpu, used_mem, req_procs,
                           req_time, req_mem, *tail, line=number))
    unix_start = _header_int(header.get("UnixStartTime", ""))
    return SwfTrace(
        SwfHeader(_header_int(header.get("MaxProcs", "")), _header_int(header.get("MaxNodes", "")),
                  unix_start, header),
        tuple(jobs),
        tuple(problems),
    )


# An SWF record is ~100 characters. A longer line means the file is not a trace (a binary file,
# /dev/zero): reading stops there rather than holding an unterminated "line" whole.
MAX_LINE_CHARS = 64 * 1024


def _lines(path: Path, errors: list[str], count: list[int]) -> Iterator[str]:
    """Lines of the (possibly gzip) file, read in large blocks: a line iterator over a text wrapper
    costs more than the parse itself on a 200,000-record trace. count[0]: lines handed out, counted
    per block (exact whenever an error ends the reading, as every line before it was read)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    raw = gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    rest = ""
    with raw:
        while True:
            try:
                block = raw.read(1 << 16)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # truncated or corrupt gzip
                errors.append(f"{type(exc).__name__}: {exc}")
                return  # the unfinished last line is part of the damage
            if not block:
                break
            lines = (rest + decoder.decode(block)).split("\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE_CHARS:
                errors.append(f"a line longer than {MAX_LINE_CHARS} characters: not an SWF trace; reading stopped")
                return
            count[0] += len(lines)
            yield from lines
    rest += decoder.decode(b"", final=True)
    if rest:
        count[0] += 1
        yield rest


def read_swf(path: str | Path, limit: int | None = None) -> SwfTrace:
    """Read a plain or gzip-compressed SWF file (the I/O edge; the parsing is `parse_swf`).

    A truncated or corrupt gzip stream keeps what was read before the damage and reports it as a
    problem on the line after the last one read."""
    errors: list[str] = []
    count = [0]
    trace = parse_swf(_lines(Path(path), errors, count), limit=limit)
    if errors:
        trace = replace(trace, problems=trace.problems + (SwfProblem(count[0] + 1, errors[0], ""),))
    return trace
