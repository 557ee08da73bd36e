"""Pure parsers for Lustre's statistics text: `stats`, `rpc_stats`, `import`, `job_stats`, and
`lctl get_param` dumps that hold several of them. Text in, typed records out; no I/O, and no
exception escapes for any input (garbage yields empty records or a malformed-line count).

Formats handled (both the 2.10-era procfs files and 2.14+/2.15 ones):
- `stats`: `name  N samples [unit] min max sum [sumsq]` lines, plus `snapshot_time`, `start_time`,
  `elapsed_time` lines. When a name appears twice (seen in real OST stats), the first line wins,
  as in HPE's lustre_exporter.
- `rpc_stats`: the `... RPCs in flight: N` / `pending ... pages: N` header, then tables whose
  header names the columns (`read write`, or `modify` on MDCs) and whose rows are
  `bucket: count pct cum | count pct cum`.
- `import`: the YAML-like block of OSC/MDC imports (state, connection, rpcs, avg_waittime).
- `job_stats`: `- job_id:` blocks, quoted or bare ids, integer or `secs.nsecs` times, op lines
  `name: { samples: N, unit: U[, min: .., max: .., sum: ..[, sumsq: ..][, hist: {..}]] }`.
"""

from __future__ import annotations

import gc
import re
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# stats files


class StatLine(NamedTuple):
    samples: int
    unit: str  # "bytes", "usec"/"usecs", "reqs", ...
    min: int | None = None
    max: int | None = None
    sum: int | None = None


class Stats(NamedTuple):
    lines: dict[str, StatLine]
    snapshot_time: float | None = None
    start_time: float | None = None
    elapsed_time: float | None = None


def _float_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value - value == 0 else None  # NaN and infinities are not values


def _nonneg_int(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


_TIME_KEYS = {"snapshot_time": 0, "start_time": 1, "elapsed_time": 2}
_TIME_KEYS_COLON = {k + ":": v for k, v in _TIME_KEYS.items()}


def parse_stats(text: str) -> Stats:
    """A Lustre `stats` / `md_stats` file -> Stats (first occurrence of a name wins)."""
    lines: dict[str, StatLine] = {}
    times: list[float | None] = [None, None, None]
    for raw in text.splitlines():
        t = raw.split()
        if len(t) < 2:
            continue
        name = t[0]
        slot = _TIME_KEYS.get(name)
        if slot is not None:
            times[slot] = _float_or_none(t[1])
            continue
        if len(t) < 4 or t[2] != "samples" or name in lines:
            continue
        samples = _nonneg_int(t[1])
        unit = t[3]
        if samples is None or len(unit) < 3 or unit[0] != "[" or unit[-1] != "]":
            continue
        nums = [_nonneg_int(x) for x in t[4:7]]
        if len(nums) == 3 and None not in nums:
            lines[name] = StatLine(samples, unit[1:-1], nums[0], nums[1], nums[2])
        else:
            lines[name] = StatLine(samples, unit[1:-1])
    return Stats(lines, times[0], times[1], times[2])


# ---------------------------------------------------------------------------------------------
# rpc_stats


class RpcStats(NamedTuple):
    in_flight: dict[str, int]  # operation -> RPCs in flight now ("read", "write", "modify")
    pending_pages: dict[str, int]  # operation -> pages pending
    # table title ("pages per rpc", "rpcs in flight", "offset") -> operation -> [(bucket, count)]
    histograms: dict[str, dict[str, list[tuple[int, int]]]]


def parse_rpc_stats(text: str) -> RpcStats:
    """An OSC/MDC `rpc_stats` file -> RpcStats (unknown lines are ignored)."""
    in_flight: dict[str, int] = {}
    pending: dict[str, int] = {}
    hists: dict[str, dict[str, list[tuple[int, int]]]] = {}
    columns: list[str] = []
    table: dict[str, list[tuple[int, int]]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            table = None
            continue
        head, sep, value = line.partition(":")
        if table is not None and sep and head.isdigit():
            # "1024:   0   0   0   |   16389010  89 100": one count per column
            for col, part in zip(columns, value.split("|")):
                fields = part.split()
                count = _nonneg_int(fields[0]) if fields else None
                if count is not None:
                    table[col].append((int(head), count))
            continue
        if "%" in line and columns:
            # the table title row: "pages per rpc    rpcs   % cum % |   rpcs   % cum %"
            title = _TITLE_END.split(line, 1)[0].strip().lower()
            table = hists.setdefault(title, {c: [] for c in columns})
            continue
        if not sep:
            words = line.split()
            if words and all(w.isalpha() for w in words):
                columns = [w.lower() for w in words]  # "read  write", or "modify" on MDCs
            continue
        number = _nonneg_int(value.strip())
        words = head.replace("_", " ").lower().split()
        if number is None or not words:
            continue
        if words[-3:] == ["rpcs", "in", "flight"] and len(words) == 4:
            in_flight[words[0]] = number
        elif len(words) == 3 and words[0] == "pending" and words[2] == "pages":
            pending[words[1]] = number
    return RpcStats(in_flight, pending, hists)


_TITLE_END = re.compile(r"\s{2,}|\t")


# ---------------------------------------------------------------------------------------------
# import files


class Import(NamedTuple):
    name: str | None
    target: str | None  # the server-side target UUID, e.g. "lustrefs-OST0000_UUID"
    state: str | None  # FULL, DISCONN, CONNECTING, REPLAY, EVICTED, CLOSED, ...
    current_connection: str | None  # NID
    connection_attempts: int | None
    inflight: int | None
    unregistering: int | None
    timeouts: int | None
    avg_waittime_seconds: float | None


_WAIT_UNITS = {"usec": 1e-6, "usecs": 1e-6, "msec": 1e-3, "ms": 1e-3, "sec": 1.0, "s": 1.0}


def parse_import(text: str) -> Import | None:
    """An OSC/MDC `import` file -> Import, or None when it holds no `import:` block."""
    if "import:" not in text:
        return None
    section = ""
    base_indent = None
    values: dict[str, str] = {}
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, value = raw.strip().partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "import" and not value:
            base_indent = None
            section = ""
            continue
        if base_indent is None:
            base_indent = indent
        if indent <= base_indent:
            section = key if not value else ""
            if value:
                values[key] = value
        else:
            values[f"{section}.{key}"] = value
    wait = None
    raw_wait = values.get("rpcs.avg_waittime", "").split()
    if raw_wait:
        number = _float_or_none(raw_wait[0])
        scale = _WAIT_UNITS.get(raw_wait[1] if len(raw_wait) > 1 else "usec")
        if number is not None and scale is not None and number >= 0:
            wait = number * scale

    def as_int(key: str) -> int | None:
        v = values.get(key)
        return _nonneg_int(v) if v is not None else None

    return Import(
        name=values.get("name") or None,
        target=values.get("target") or None,
        state=values.get("state") or None,
        current_connection=values.get("connection.current_connection") or None,
        connection_attempts=as_int("connection.connection_attempts"),
        inflight=as_int("rpcs.inflight"),
        unregistering=as_int("rpcs.unregistering"),
        timeouts=as_int("rpcs.timeouts"),
        avg_waittime_seconds=wait,
    )


# ---------------------------------------------------------------------------------------------
# job_stats


class JobStats(NamedTuple):
    """One `- job_id:` block. `ops` maps an op name to (samples, unit, sum), for ops whose
    samples are not zero (zero ops are skipped: most lines of a real dump are zeros). `sum` is
    None when the line has no sum (2.10 `reqs` ops). `hist` keeps the raw `hist: {..}` text of
    ops that have one (parse with `parse_hist`): only aggregates need it, so it is not parsed for
    every job."""

    job_id: str
    snapshot_time: float | None
    start_time: float | None
    elapsed_time: float | None
    ops: dict[str, tuple[int, str, int | None]]
    hist: dict[str, str]


class JobStatsDump(NamedTuple):
    jobs: list[JobStats]
    malformed_lines: int


def unquote_job_id(raw: str) -> str:
    """`"a:b"` -> `a:b` (Lustre 2.15 quotes ids holding YAML-special characters), bare ids as is."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        inner = raw[1:-1]
        if raw[0] == '"':
            inner = inner.replace('\\"', '"').replace("\\\\", "\\")
        else:
            inner = inner.replace("''", "'")
        return inner
    return raw


def parse_job_stats(text: str) -> JobStatsDump:
    """A `job_stats` dump (with or without the `param=` / `job_stats:` header) -> JobStatsDump.

    The hot loop is written for speed (see bench/bench_job_stats.py): one `split` per line, fixed
    token positions for the common layout, and the generic path only for anything else. Jobs
    with an empty id are dropped (Lustre prints them for I/O it could not attribute).
    """
    enabled = gc.isenabled()
    # Tens of thousands of small dicts and tuples would trigger many useless cyclic-GC passes.
    gc.disable()
    try:
        return _parse_job_stats(text)
    finally:
        if enabled:
            gc.enable()


_CHUNK = 1 << 20  # split the dump a megabyte at a time: the list of lines never holds it all


def _chunks(text: str):
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start + _CHUNK)
        if end < 0:
            end = size
        yield text[start:end].split("\n")
        start = end + 1


def _parse_job_stats(text: str) -> JobStatsDump:
    jobs: list[JobStats] = []
    ops: dict = {}
    hist: dict = {}
    times: list = [None, None, None]
    job_id: str | None = None
    malformed = 0
    append = jobs.append
    time_keys = _TIME_KEYS_COLON
    names: dict[str, str] = {}
    new_job = tuple.__new__  # JobStats(...) without the Python-level NamedTuple constructor
    for lines in _chunks(text):
        for line in lines:
            # Most lines of a real dump are ops with zero samples: skip them with one substring test.
            if " 0, unit:" in line and line[:1] == " ":
                continue
            t = line.split(None, 12)
            n = len(t)
            if n == 13 and t[10] == "sum:" and t[11][-1:] == ",":
                # the 2.14+ layout: name: { samples: N, unit: U, min: a, max: b, sum: s, sumsq: q[, hist: {..}] }
                # (2.10's "sum: s }" has no comma after s and takes the generic path)
                try:
                    samples = int(t[3][:-1])
                    if samples > 0:
                        # op names and units repeat in every job: share one string for each
                        name = names.get(t[0])
                        if name is None:
                            name = names[t[0]] = t[0][:-1]
                        unit = names.get(t[5])
                        if unit is None:
                            unit = names[t[5]] = t[5][:-1]
                        ops[name] = (samples, unit, int(t[11][:-1]))
                        if t[12][-3] == "}":
                            hist[name] = t[12]
                        continue
                except (ValueError, IndexError):
                    pass
            elif n == 3 or n == 2:
                slot = time_keys.get(t[0])
                if slot is not None:
                    try:
                        value = float(t[1])
                        times[slot] = value if value - value == 0 else None
                    except ValueError:
                        times[slot] = None
                    continue
            if n == 0:
                continue
            first = t[0]
            if first[0] == "-":
                if job_id:
                    append(new_job(JobStats, (job_id, times[0], times[1], times[2], ops, hist)))
                key, sep, value = line.partition(":")
                if sep and key.lstrip("- \t") == "job_id":
                    value = value.strip()
                    if value[:1] == '"' and value[-1:] == '"' and "\\" not in value and len(value) > 1:
                        job_id = value[1:-1]  # the common quoted id, without escapes
                    else:
                        job_id = unquote_job_id(value)
                    if job_id.isspace():
                        job_id = ""  # as good as empty: dropped
                else:
                    job_id = None
                    malformed += 1
                ops, hist, times = {}, {}, [None, None, None]
                continue
            if "{" in line:
                if not _generic_op(line, ops, hist):
                    malformed += 1
                continue
            if first == "job_stats:" or (n == 1 and first[-1] == "="):
                continue
            malformed += 1
    if job_id:
        append(new_job(JobStats, (job_id, times[0], times[1], times[2], ops, hist)))
    return JobStatsDump(jobs, malformed)


_FIELD = re.compile(r"(\w+):\s*(\{[^}]*\}|[^,}]*)")


def _generic_op(line: str, ops: dict, hist: dict) -> bool:
    """Slow path for op lines in an unexpected layout (extra spaces, fields reordered, truncated)."""
    name, sep, rest = line.strip().partition(":")
    if not sep or not name or "{" not in rest or not rest.endswith("}"):
        return False  # a line cut short may hold cut-short numbers: not trusted
    body = rest.split("{", 1)[1]
    fields = {k: v.strip() for k, v in _FIELD.findall(body)}
    samples = _nonneg_int(fields.get("samples", "x"))
    if samples is None:
        return False
    if samples == 0:
        return True
    total = _nonneg_int(fields["sum"]) if "sum" in fields else None
    ops[name] = (samples, fields.get("unit", ""), total)
    if "hist" in fields:
        hist[name] = "hist: " + fields["hist"]
    return True


_SIZE_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_hist(raw: str) -> dict[int, int]:
    """`hist: { 32: 2, 4K: 1, 1M: 3 }` -> {32: 2, 4096: 1, 1048576: 3}; junk entries are skipped."""
    body = raw.partition("{")[2].partition("}")[0]
    out: dict[int, int] = {}
    for item in body.split(","):
        key, sep, value = item.partition(":")
        key = key.strip()
        if not sep or not key:
            continue
        mult = _SIZE_SUFFIX.get(key[-1:].upper()) if not key[-1:].isdigit() else 1
        digits = key if key[-1:].isdigit() else key[:-1]
        count = _nonneg_int(value.strip())
        if mult is None or not digits.isdigit() or count is None:
            continue
        size = int(digits) * mult
        out[size] = out.get(size, 0) + count
    return out


# ---------------------------------------------------------------------------------------------
# lctl get_param dumps

_PARAM_HEAD = re.compile(r"^([A-Za-z][\w\-]*(?:\.[^\s=]+)*)=(.*)$")


def split_lctl_output(text: str) -> list[tuple[str, str]]:
    """`lctl get_param a.b.c d.e.f` output -> [(param, value text)], in order.

    A parameter starts at an unindented `name.with.dots=` line; its value is the rest of that
    line plus every following line up to the next such header. Text before the first header
    (error messages, garbage) is ignored.
    """
    out: list[tuple[str, str]] = []
    name: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        if line[:1].isalpha() and "=" in line:
            m = _PARAM_HEAD.match(line)
            if m and " " not in m.group(1):
                if name is not None:
                    out.append((name, "\n".join(body)))
                name = m.group(1)
                body = [m.group(2)] if m.group(2) else []
                continue
        if name is not None:
            body.append(line)
    if name is not None:
        out.append((name, "\n".join(body)))
    return out


# ---------------------------------------------------------------------------------------------
# names and job ids


def fs_of_target(target: str) -> str:
    """`lustrefs-OST0001` -> `lustrefs`; `lustrefs-ffff88105db50000` (llite) -> `lustrefs`."""
    fs, sep, _ = target.rpartition("-")
    return fs if sep and fs else target


_CLIENT_DEVICE = re.compile(r"^(.*?-(?:OST|MDT)[0-9a-fA-F]{4})-(osc|mdc)-(.+)$")


_SERVER_SIDE = re.compile(r"^(?:MDT|OST)[0-9a-fA-F]{4}$")


def split_client_device(name: str) -> tuple[str, str] | None:
    """`lustrefs-OST0000-osc-ffff88105db50000` -> (`lustrefs`, `lustrefs-OST0000`); None if odd.

    `lustrefs-OST0000-osc-MDT0000` is the MDT's own connection to the OST (an OSP device that
    2.10 also lists under osc/): not a client mount, so None."""
    m = _CLIENT_DEVICE.match(name)
    if not m or _SERVER_SIDE.match(m.group(3)):
        return None
    target = m.group(1)
    return fs_of_target(target), target


# Slurm job ids in Lustre job ids (docs/agent.md, "Job ids and Slurm"):
#  1. the whole id is a number:                 "1234"           (jobid_var=SLURM_JOB_ID)
#  2. a number, then a separator and anything:  "1234.0", "1234:0:node", "1234.batch", "1234@x"
#     (jobid_name="%j.%e", "%j:%u:%H", steps);  "1234_7" keeps the array task: "1234_7"
#  3. a job word, then optional separator, then rule 1 or 2: "job_1234", "job1234",
#     "SLURM_JOB1234", "SLURM_JOB_ID=1234", "slurm-1234", "slurm_1234.0"
# Anything else (procname.uid "dd.0", "vim.0", "kworker/u8:2", "ll_ost_io01_002") has no Slurm job.
_SLURM = re.compile(
    r"^(?:(?:slurm[_\-]?job(?:[_\-]?id)?|slurm|job(?:id)?)[_\-=:.]?)?"
    r"([1-9][0-9]{0,11})(_[0-9]{1,9})?(?:$|[.:@+/\s,;_\-])",
    re.IGNORECASE,
)


def slurm_job_id(job_id: str) -> str | None:
    """The Slurm job id a Lustre job id names, or None (see the rules above)."""
    m = _SLURM.match(job_id.strip())
    if not m:
        return None
    return m.group(1) + (m.group(2) or "")
