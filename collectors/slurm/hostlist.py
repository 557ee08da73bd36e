"""Slurm hostlist expressions: `gpu[001-003,007],login1` <-> ["gpu001", "gpu002", "gpu003", "gpu007", "login1"].

Pure functions, no Slurm needed. Zero padding is kept (`gpu[001-003]` gives `gpu001`), several
bracket groups in one name are expanded as a cartesian product (`r[1-2]n[1-2]`), and a malformed
expression never raises: `expand_lenient` returns the text itself as one name instead.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

# Refuse to expand absurd ranges (a hostile or corrupt string must not allocate gigabytes).
MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        if not lo.isdecimal() or (sep and not hi.isdecimal()):
            raise HostlistError(f"bad range {item!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"descending range {item!r}")
        if b - a + len(out) > MAX_HOSTS:
            raise HostlistError(f"range {item!r} too large")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


_GROUP = re.compile(r"\[([^\[\]]*)\]")


def _expand_one(name: str) -> list[str]:
    m = _GROUP.search(name)
    if m is None:
        if "[" in name or "]" in name:
            raise HostlistError(f"unbalanced brackets in {name!r}")
        return [name]
    head, tail = name[: m.start()], name[m.end():]
    if "[" in head or "]" in head:
        raise HostlistError(f"unbalanced brackets in {name!r}")
    rest = _expand_one(tail)
    out = []
    for n in _expand_range(m.group(1)):
        for r in rest:
            out.append(head + n + r)
            if len(out) > MAX_HOSTS:
                raise HostlistError("hostlist too large")
    return out


def expand(text: str | None) -> list[str]:
    """Expand a hostlist expression; raises HostlistError on malformed input."""
    if not text or text in ("(null)", "None", "N/A"):
        return []
    out: list[str] = []
    for part in _split_top(text.strip()):
        out.extend(_expand_one(part))
        if len(out) > MAX_HOSTS:  # many parts each under the limit must not add up past it
            raise HostlistError("hostlist too large")
    return out


def expand_lenient(text: str | None) -> list[str]:
    """Like `expand`, but a malformed expression comes back as itself (one name), never an error."""
    return list(expand_cached(text)) if text else []


@lru_cache(maxsize=8192)
def expand_cached(text: str | None) -> tuple[str, ...]:
    """`expand_lenient` as a tuple, memoised: the same node lists recur across jobs and polls."""
    try:
        return tuple(expand(text))
    except HostlistError:
        return (text.strip(),) if text and text.strip() else ()


_TAIL_NUM = re.compile(r"^(.*?)(\d+)$")


@lru_cache(maxsize=65536)
def _split(name: str) -> tuple[tuple[str, int], int] | None:
    """"gpu007" -> (("gpu", 3), 7); None for a name without a numeric tail (memoised: the planner
    compresses thousands of node lists made of the same few thousand names)."""
    m = _TAIL_NUM.match(name)
    if m is None or "[" in name or "]" in name or "," in name:
        return None
    prefix, digits = m.group(1), m.group(2)
    return (prefix, len(digits) if digits.startswith("0") and len(digits) > 1 else 0), int(digits)


def compress(names: Iterable[str]) -> str:
    """The shortest usual form: names sharing a prefix and digit width are bracketed, in order of first appearance."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    seen_plain: set[str] = set()
    for name in names:
        got = _split(name)
        if got is None:
            if name not in seen_plain:
                seen_plain.add(name)
                order.append(name)
            continue
        key, num = got
        nums = groups.get(key)
        if nums is None:
            nums = groups[key] = []
            order.append(key)
        nums.append(num)
    out: list[str] = []
    for key in order:
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        nums = sorted(set(groups[key]))
        ranges: list[str] = []
        start = prev = nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        if len(nums) == 1:
            out.append(prefix + ranges[0])
        else:
            out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
