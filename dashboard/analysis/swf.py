"""Standard Workload Format (SWF) reader for the Parallel Workloads Archive's traces.

Sources: SWF text (plain or gzip), as published by the Parallel Workloads Archive
(https://www.cs.huji.ac.il/labs/parallel/workload/swf.html). Each job line has 18 whitespace-separated
fields, `-1` meaning unknown; lines starting with `;` are header comments (`; MaxProcs: 100`).

`parse_swf` (lines in, records out) and `parse_swf_text` (the same on a whole text: the plain numeric
lines parsed with numpy, a field at a time, the rest line by line as parse_swf does) are pure.
`read_swf` is the one function here that touches a file: it opens plain or gzip input (detected by
the gzip magic bytes, not the name) and feeds `parse_swf_text`. No privileges needed.

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
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from dashboard.analysis.lazy import LazyRecords

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
    jobs: Sequence[SwfJob]  # a tuple, or SwfJobs (columns, records made when first read)
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


def _record(number: int, raw: str, parts: list[str]) -> SwfJob | SwfProblem:
    """One line of FIELDS fields that is not a comment: its record, or the problem that skips it."""
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
        return _new_job(SwfJob, v)
    try:
        ints = [_int(p) for p in parts[:5]]
        avg_cpu, used_mem = float(_number(parts[5])), float(_number(parts[6]))
        req_procs, req_time = _int(parts[7]), _int(parts[8])
        req_mem = float(_number(parts[9]))
        tail = [_int(p) for p in parts[10:]]
    except ValueError as exc:
        return SwfProblem(number, f"bad field: {exc}", raw.strip()[:200])
    return SwfJob(ints[0], ints[1], ints[2], ints[3], ints[4], avg_cpu, used_mem, req_procs,
                  req_time, req_mem, *tail, line=number)


def _line(number: int, raw: str, header: dict[str, str]) -> SwfJob | SwfProblem | None:
    """One line: a record, a problem, or None for a blank or comment line (a header field is kept)."""
    parts = raw.split()
    # The common case first (a job record): no strip, one split; headers and blank lines below.
    if len(parts) == FIELDS and parts[0][0] != ";":
        return _record(number, raw, parts)
    text = raw.strip()
    if not text:
        return None
    if text[0] == ";":
        key, sep, value = text[1:].partition(":")
        if sep and key.strip() and key.strip() not in header:
            header[key.strip()] = value.strip()
        return None
    return SwfProblem(number, f"expected {FIELDS} fields, got {len(parts)}", text[:200])


def _trace(header: dict[str, str], jobs: Sequence[SwfJob], problems: list[SwfProblem]) -> SwfTrace:
    return SwfTrace(
        SwfHeader(_header_int(header.get("MaxProcs", "")), _header_int(header.get("MaxNodes", "")),
                  _header_int(header.get("UnixStartTime", "")), header),
        jobs,
        tuple(problems),
    )


def parse_swf(lines: Iterable[str], limit: int | None = None) -> SwfTrace:
    """Parse SWF text lines. `limit` stops after that many valid job records (the trace's first N);
    the header comes first, so it is read in full even with limit 0."""
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    problems: list[SwfProblem] = []
    for number, raw in enumerate(lines, start=1):
        got = _line(number, raw, header)
        if got is None:
            continue
        if limit is not None and len(jobs) >= limit:
            break
        (jobs if type(got) is SwfJob else problems).append(got)
    return _trace(header, tuple(jobs), problems)


# The vectorised reader takes the lines made only of digits, "-", "." and the separators " ", "\t",
# "\r" (what the archive's traces hold); any other byte sends its line to `_line`.
_MAX_DIGITS = 15  # an integer of up to 15 digits is exact in int64 and float64 alike; longer: `_line`
_FLOAT_FIELDS = (5, 6, 9)
_INT_COLUMNS = [k for k in range(FIELDS) if k not in _FLOAT_FIELDS]
_ZEROS = np.uint64(0x3030303030303030)  # eight "0"
_M8, _M16, _M32 = np.uint64(0x00FF00FF00FF00FF), np.uint64(0x0000FFFF0000FFFF), np.uint64(0xFFFFFFFF)


def _eight_digits(windows: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The integers written by the last `count` (1-8) bytes of each 8-byte little-endian word (all
    digits there): the eight bytes are combined in pairs, then fours, then eights (SWAR), so that a
    number costs a few operations on one uint64 instead of a pass per digit."""
    keep = ~np.uint64(0) << ((8 - count) * 8).astype(np.uint64)  # the bytes before the number: "0"
    d = (windows & keep) | (_ZEROS & ~keep)
    d -= _ZEROS
    d = (d * np.uint64(10) + (d >> np.uint64(8))) & _M8
    d = (d * np.uint64(100) + (d >> np.uint64(16))) & _M16
    d = (d * np.uint64(10000) + (d >> np.uint64(32))) & _M32
    return d.astype(np.int64)


def _fast_records(text: str):
    """The lines of `text` that are plain numeric records, and their fields: (line_start, fast: the
    indices of those lines, ints: (len(fast), 15) int64, floats: (len(fast), 3) float64). A line is
    plain when it has FIELDS tokens, each `-?[0-9]+` of at most _MAX_DIGITS digits or, rarely, a
    number with a point, which is read with float() as `_record` does (and must be integral in an
    integer field). Every other line is left to `_line`."""
    # ASCII keeps one byte per character (any other character becomes "?"); 8 "0" in front so that
    # every token's last 8 bytes can be read as one word.
    padded = np.frombuffer(b"0" * 8 + text.encode("ascii", "replace"), np.uint8)
    raw = padded[8:]
    size = raw.size
    line_start = np.concatenate(([0], np.flatnonzero(raw == 10) + 1))  # line k: [start[k], start[k + 1] - 1)
    word = raw > 32  # the separators, and any other control byte, which is rejected below
    edge = np.flatnonzero(word[1:] != word[:-1]) + 1  # token starts and ends, alternating
    if size and word[0]:
        edge = np.concatenate(([0], edge))
    if size and word[-1]:
        edge = np.concatenate((edge, [size]))
    start, end = edge[0::2], edge[1::2]
    first = np.searchsorted(start, line_start)  # each line's first token (tokens never span a newline)
    ok = np.diff(np.concatenate((first, [start.size]))) == FIELDS

    def reject(positions):  # byte positions: their lines leave the fast path
        ok[np.searchsorted(line_start, positions, "right") - 1] = False

    # any byte but digits, "-", "." and the separators
    shifted = raw - np.uint8(45)  # "-" 0, "." 1, "/" 2, digits 3-12
    reject(np.flatnonzero(((shifted > 12) & word) | (shifted == 2)
                          | ((raw < 32) & (raw != 9) & (raw != 10) & (raw != 13))))
    # "-" only as a token's first byte and before a digit; "." only after a digit, once per token
    minus = np.flatnonzero(shifted == 0)
    after = shifted[np.minimum(minus + 1, size - 1)]
    reject(minus[(minus == size - 1) | (after < 3) | (after > 12) | ((minus > 0) & word[minus - 1])])
    dots = np.flatnonzero(shifted == 1)
    before = shifted[dots - 1]
    reject(dots[(dots == 0) | (before < 3) | (before > 12)])
    dot_token = np.searchsorted(start, dots, "right") - 1
    reject(dots[1:][dot_token[1:] == dot_token[:-1]])
    negative = shifted[start] == 0
    length = end - start - negative  # digits (and a point)
    reject(start[length > _MAX_DIGITS])
    # Each token's value from the word of its last 8 bytes; the few longer ones add the 8 before.
    words = np.ndarray((size + 1,), "<u8", padded, strides=(1,))  # words[e]: the 8 bytes before e, unaligned
    value = _eight_digits(words[end], np.minimum(length, 8))
    long = np.flatnonzero(length > 8)
    if long.size:
        value[long] += _eight_digits(words[end[long] - 8], np.minimum(length[long] - 8, 8)) * 10 ** 8
    value[negative] *= -1
    # "-0" is 0 to int() but -0.0 to float(): leave that sign's subtleties to `_line`.
    reject(start[negative & (value == 0)])
    fast = np.flatnonzero(ok)
    table = value[np.repeat(ok, np.diff(np.concatenate((first, [start.size]))))].reshape(-1, FIELDS)
    ints = table[:, _INT_COLUMNS]
    floats = table[:, _FLOAT_FIELDS].astype(np.float64)
    if dot_token.size:  # the numbers written with a point (an average CPU time, 552.21): float()
        line = np.searchsorted(first, dot_token, "right") - 1
        field_no = dot_token - first[line]
        row = np.searchsorted(fast, line)
        mine = ok[line]
        for t, r, f in zip(dot_token[mine].tolist(), row[mine].tolist(), field_no[mine].tolist()):
            x = float(text[start[t]:end[t]])
            if f in _FLOAT_FIELDS:
                floats[r, _FLOAT_FIELDS.index(f)] = x
            elif x == int(x):  # 123.0 in an integer field, as _record reads it
                ints[r, _INT_COLUMNS.index(f)] = int(x)
            else:
                ok[fast[r]] = False  # 1.5 in an integer field: _line says what is wrong
        if not ok[fast].all():
            keep = ok[fast]
            fast, ints, floats = fast[keep], ints[keep], floats[keep]
    return line_start, fast, ints, floats


def parse_swf_text(text: str, limit: int | None = None) -> SwfTrace:
    """`parse_swf(text.split("\n"), limit)`, the same trace, but the plain numeric records are parsed
    with numpy, a field at a time (int() on 3.6 million fields was most of the time of reading a
    200,000-record trace), and kept as columns until a record is read (`SwfJobs`). Every other line
    (headers, blanks, anything malformed or unusual) goes through `_line`, in order."""
    return _parse_text(text, limit)[0]


# The text is parsed in pieces of about this many characters (whole lines): the arrays of one piece
# stay small (all of HPC2N at once took 450 MB and more kernel time zeroing it than the parse itself).
_PIECE = 1 << 20


def _records_by_piece(text: str):
    """_fast_records over the whole text, a piece of whole lines at a time, joined."""
    starts, fasts, ints, floats = [], [], [], []
    at = lines = 0
    while True:
        cut = text.find("\n", at + _PIECE) + 1 or len(text)
        line_start, fast, i, f = _fast_records(text[at:cut])
        last = cut == len(text)
        if not last:
            line_start = line_start[:-1]  # the empty line after the piece's last newline is the next piece's first
        starts.append(line_start + at)
        fasts.append(fast + lines)
        ints.append(i)
        floats.append(f)
        if last:
            break
        at, lines = cut, lines + len(line_start)
    return np.concatenate(starts), np.concatenate(fasts), np.concatenate(ints), np.concatenate(floats)


def _parse_text(text: str, limit: int | None) -> tuple[SwfTrace, bool]:
    """parse_swf_text, and whether the limit stopped it before the last line (parse_swf's break)."""
    line_start, fast, ints, floats = _records_by_piece(text)
    header: dict[str, str] = {}
    slow_jobs: list[SwfJob] = []
    problems: list[SwfProblem] = []
    stop = None  # the line reading stops at, as parse_swf's break
    slow = np.ones(len(line_start), bool)
    slow[fast] = False
    for k in np.flatnonzero(slow).tolist():
        before = int(np.searchsorted(fast, k))  # fast records before line k
        if limit is not None and before + len(slow_jobs) > limit:
            stop = int(fast[limit - len(slow_jobs)])  # every slow record so far came before it
            break
        got = _line(k + 1, text[line_start[k]:line_start[k + 1] - 1 if k + 1 < len(line_start) else None], header)
        if got is None:
            continue
        if limit is not None and before + len(slow_jobs) >= limit:
            stop = k
            break
        (slow_jobs if type(got) is SwfJob else problems).append(got)
    else:
        if limit is not None and fast.size + len(slow_jobs) > limit:
            stop = int(fast[limit - len(slow_jobs)])
    if stop is not None:
        n = int(np.searchsorted(fast, stop))
        fast, ints, floats = fast[:n], ints[:n], floats[:n]
    jobs = SwfJobs(ints, floats, fast + 1)
    if slow_jobs:  # rare (a "+5", a 20-digit number): one tuple of records in line order
        jobs = tuple(sorted([*jobs, *slow_jobs], key=lambda j: j.line))
    return _trace(header, jobs, problems), stop is not None


class SwfJobs(LazyRecords):
    """Job records kept as numpy columns (`ints`: the 15 integer fields in order, `floats`: avg_cpu,
    used_mem, req_mem, `lines`) and made into SwfJob tuples when first read: the replay reads the
    columns (`column`), and 200,000 named tuples cost as much as parsing them."""

    __slots__ = ("ints", "floats", "lines")

    def __init__(self, ints, floats, lines) -> None:
        super().__init__()
        self.ints, self.floats, self.lines = ints, floats, lines

    def _raw_len(self) -> int:
        return len(self.lines)

    def column(self, name: str) -> np.ndarray:
        k = SwfJob._fields.index(name)
        if k in _FLOAT_FIELDS:
            return self.floats[:, _FLOAT_FIELDS.index(k)]
        return self.lines if name == "line" else self.ints[:, k - sum(f < k for f in _FLOAT_FIELDS)]

    def _build(self) -> tuple:
        new = tuple.__new__
        out = []
        for i, f, line in zip(self.ints.tolist(), self.floats.tolist(), self.lines.tolist()):
            out.append(new(SwfJob, (*i[:5], f[0], f[1], i[5], i[6], f[2], *i[7:], line)))
        return tuple(out)


# An SWF record is ~100 characters. A longer line means the file is not a trace (a binary file,
# /dev/zero): reading stops there rather than holding an unterminated "line" whole.
MAX_LINE_CHARS = 64 * 1024


def read_swf(path: str | Path, limit: int | None = None) -> SwfTrace:
    """Read a plain or gzip-compressed SWF file (the I/O edge; the parsing is `parse_swf_text`).

    The text is read in large blocks (a line iterator over a text wrapper cost more than the parse
    itself on a 200,000-record trace) and parsed whole; with a limit, what has been read is parsed
    each time it doubles, and reading stops once the limit is reached in it, as parse_swf would over
    a line iterator. A truncated or corrupt gzip stream keeps what was read before the damage and
    reports it as a problem on the line after the last one read, unless the limit was reached first."""
    path = Path(path)
    with open(path, "rb") as fh:
        magic = fh.read(2)
    raw = gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    chunks: list[str] = []  # whole lines, each ending in "\n"
    rest = ""
    error = None
    read = 0
    parse_at = 1 << 16
    with raw:
        while True:
            try:
                block = raw.read(1 << 16)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # truncated or corrupt gzip
                error = f"{type(exc).__name__}: {exc}"  # the unfinished last line is part of the damage
                break
            if not block:
                rest += decoder.decode(b"", final=True)
                break
            piece = rest + decoder.decode(block)
            cut = piece.rfind("\n") + 1
            rest = piece[cut:]
            if len(rest) > MAX_LINE_CHARS:  # the block's whole lines are dropped with it
                error = f"a line longer than {MAX_LINE_CHARS} characters: not an SWF trace; reading stopped"
                break
            if cut:
                chunks.append(piece[:cut])
                read += cut
            if limit is not None and read >= parse_at:
                parse_at *= 2
                trace, stopped = _parse_text("".join(chunks), limit)
                if stopped:
                    return trace
    if error is None:
        chunks.append(rest)
    text = "".join(chunks)
    trace, stopped = _parse_text(text, limit)
    if error is not None and not stopped:
        trace = replace(trace, problems=trace.problems + (SwfProblem(text.count("\n") + 1, error, ""),))
    return trace
