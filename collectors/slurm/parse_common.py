"""Small pure helpers shared by the Slurm parsers: numbers in every shape Slurm prints them, GRES
and TRES strings, dependency expressions, durations and timestamps. Nothing here raises on bad
input; unknown or garbled values come back as None (or an empty result)."""

from __future__ import annotations

import math
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Callable, Iterable

from .model import Dependency

# Slurm's "not set" / "unlimited" sentinels in 32/64-bit fields (NO_VAL, INFINITE, NO_VAL64, INFINITE64).
# The 16-bit ones (65534/65535) are not listed: they are also plausible real values (MB, counts).
_SENTINELS = frozenset({0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF})
_MIN_INT = -(1 << 62)


def number(value) -> float | int | None:
    """An int/float from a plain number, a numeric string, or a v0.0.39+ {set, infinite, number}
    object. Unset, infinite, sentinels and garbage are None."""
    t = type(value)
    if t is int:  # the common case first: this runs for every field of every job
        return None if value in _SENTINELS or value < _MIN_INT else value
    if t is dict:
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
        t = type(value)
        if t is int:
            return None if value in _SENTINELS or value < _MIN_INT else value
    if t is float:
        return value if math.isfinite(value) else None
    if t is str:
        v = value.strip()
        try:
            return int(v)
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                return None
            return f if math.isfinite(f) else None
    if isinstance(value, int) and not isinstance(value, bool):  # int subclasses
        return number(int(value))
    return None


def integer(value) -> int | None:
    n = number(value)
    return int(n) if n is not None else None


def is_infinite(value) -> bool:
    return isinstance(value, dict) and bool(value.get("infinite")) or value in ("UNLIMITED", "INFINITE", "infinite")


def timestamp(value) -> float | None:
    """Unix seconds from a JSON time field; 0 and unset mean unknown."""
    n = number(value)
    if not n or n < 0:
        return None
    return float(n)


def text(value) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(text(v) for v in value)
    if isinstance(value, dict):
        return ""
    return str(value)


def str_list(value) -> tuple[str, ...]:
    """A list of strings from a JSON list or a comma-separated string ("(null)" and "" are empty)."""
    if value is None:
        return ()
    if isinstance(value, str):
        if value in ("", "(null)", "N/A", "None"):
            return ()
        return tuple(v for v in (p.strip() for p in value.split(",")) if v)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value if isinstance(v, (str, int, float)) and str(v) != "")
    return ()


# ------------------------------------------------------------------------------ GRES / TRES

def split_outside_parens(s: str, sep: str = ",") -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            out.append(s[start:i])
            start = i + 1
    out.append(s[start:])
    return [p.strip() for p in out if p.strip()]


def index_list(spec: str) -> tuple[int, ...]:
    """ "0-3,6" -> (0, 1, 2, 3, 6); "N/A" or garbage -> ()."""
    out: list[int] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdecimal() or (sep and not hi.isdecimal()):
            return ()
        a = int(lo)
        b = int(hi) if sep else a
        if b < a or b - a > 4096:
            return ()
        out.extend(range(a, b + 1))
    return tuple(out)


_GRES_ITEM = re.compile(r"^(?:gres[:/])?(?P<name>[A-Za-z0-9_.-]+)(?::(?P<type>[^:(]+?))?(?::(?P<count>\d+[KMGTP]?))?(?:\((?P<extra>[^)]*)\))?$")


@lru_cache(maxsize=4096)
def parse_gres(spec: str | None, name: str = "gpu") -> tuple[int | None, tuple[int, ...], str | None]:
    """GPU count, GPU indices and type from a GRES string like
    `gpu:h100:8(IDX:0-7)`, `gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)`, `gpu:p100:2(S:0-1),tmp:1860G`,
    `gres:gpu:8` or `gres/gpu:4`. Returns (None, (), None) when no GPU entry is present."""
    if not spec or spec in ("(null)", "N/A"):
        return None, (), None
    total: int | None = None
    idx: list[int] = []
    types: list[str] = []
    for item in split_outside_parens(spec):
        m = _GRES_ITEM.match(item)
        if not m or m.group("name") != name:
            continue
        count_s, typ = m.group("count"), m.group("type")
        if count_s is None and typ is not None and typ.isdecimal():
            count_s, typ = typ, None  # "gpu:8" has no type
        count = int(count_s) if count_s and count_s.isdecimal() else (1 if count_s is None else None)
        if count is not None:
            total = (total or 0) + count
        if typ:
            types.append(typ)
        extra = m.group("extra") or ""
        if extra.startswith("IDX:"):
            idx.extend(index_list(extra[4:]))
    if total is None and not idx:
        return None, (), None
    return total, tuple(idx), ",".join(dict.fromkeys(types)) or None


def parse_tres(spec: str | None) -> dict[str, str]:
    """ "cpu=192,mem=1920G,node=4,gres/gpu=32" -> {"cpu": "192", ...} (values as strings)."""
    out: dict[str, str] = {}
    if not spec:
        return out
    for item in spec.split(","):
        k, sep, v = item.partition("=")
        if sep and k.strip():
            out[k.strip()] = v.strip()
    return out


@lru_cache(maxsize=4096)
def tres_gpus(spec: str | None) -> int | None:
    v = parse_tres(spec).get("gres/gpu")
    return integer(v) if v is not None else None


@lru_cache(maxsize=4096)
def tres_request_gpus(spec: str | None) -> int | None:
    """GPUs in a tres_per_node / tres_per_job string: "gres:gpu:8", "gres/gpu:h100:4", "gres/gpu=2"."""
    if not spec:
        return None
    total = None
    for item in spec.split(","):
        item = item.strip().replace("=", ":")
        parts = re.split(r"[:/]", item)
        if "gpu" not in parts:
            continue
        tail = parts[parts.index("gpu") + 1:]
        if not tail:
            n = 1
        else:
            n = integer(tail[-1])
            if n is None:
                n = 1 if len(tail) == 1 else None
        if n is not None:
            total = (total or 0) + n
    return total


_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)B?$", re.I)
_MULT = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def memory_bytes(value, default_unit: str = "M") -> int | None:
    """Slurm memory ("480G", "515000M", 491520 meaning MiB) -> bytes."""
    if value is None:
        return None
    if isinstance(value, (int, float, dict)) and not isinstance(value, bool):
        n = number(value)
        return int(n * _MULT[default_unit]) if n is not None and n >= 0 else None
    m = _MEM.match(str(value).strip())
    if not m:
        return None
    unit = m.group(2).upper() or default_unit
    return int(float(m.group(1)) * _MULT[unit])


# ------------------------------------------------------------------------------ dependencies

_DEP = re.compile(r"(?P<kind>[a-z_]+)(?::(?P<ids>[^,?()]*?))?(?:\((?P<state>[A-Za-z_]+)\))?(?=$|[,?])")


@lru_cache(maxsize=4096)
def parse_dependency(expr: str | None) -> tuple[Dependency, ...]:
    """ "afterok:6(unfulfilled),afterany:7_1+10(failed)" -> Dependency records. Ids joined by ':'
    in one term (afterok:6:7) give one record each; "+time" suffixes are dropped."""
    if not expr or expr in ("(null)", "None"):
        return ()
    out: list[Dependency] = []
    for m in _DEP.finditer(expr.strip()):
        kind, ids, state = m.group("kind"), m.group("ids"), m.group("state") or ""
        if ids is None or ids == "":
            if kind == "singleton":
                out.append(Dependency(kind, "", state))
            continue
        for jid in ids.split(":"):
            jid = jid.split("+", 1)[0].strip()
            if jid:
                out.append(Dependency(kind, jid, state))
    return tuple(out)


# ------------------------------------------------------------------------------ text times

def duration_seconds(text_value: str | None) -> int | None:
    """Slurm durations: "1-00:00:00", "04:00:00", "30:00" (mm:ss), "45" (minutes) -> seconds.
    "UNLIMITED", "INFINITE", "N/A", "NONE", "Partition_Limit" -> None."""
    if text_value is None:
        return None
    s = text_value.strip()
    if not s or not (s[0].isdecimal()):
        return None
    days = 0
    if "-" in s:
        d, _, s = s.partition("-")
        if not d.isdecimal():
            return None
        days = int(d)
    parts = s.split(":")
    if not all(p.isdecimal() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    nums = [int(p) for p in parts]
    if len(parts) == 3:
        h, m, sec = nums
    elif len(parts) == 2:
        h, m, sec = (0, nums[0], nums[1]) if days == 0 else (nums[0], nums[1], 0)
    else:
        h, m, sec = (0, nums[0], 0) if days == 0 else (nums[0], 0, 0)
    return ((days * 24 + h) * 60 + m) * 60 + sec


def text_time(value: str | None) -> float | None:
    """ "2026-11-29T19:17:26" (local time, as scontrol prints it) -> unix seconds; "Unknown",
    "None", "N/A" -> None."""
    if not value or not value[0].isdecimal():
        return None
    try:
        return datetime.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def parse_each(records: Iterable, parse: Callable[[Any], Any]) -> tuple[list, int]:
    """(parse() of every record, how many failed or yielded None): a record of a shape we do not
    know costs only itself."""
    out, skipped = [], 0
    for rec in records:
        try:
            item = parse(rec)
        except Exception:
            item = None
        if item is None:
            skipped += 1
        else:
            out.append(item)
    return out, skipped
