"""A lenient, fast reader of Prometheus text / OpenMetrics exposition: text -> samples.

Copes with what real exports look like: no `# HELP`/`# TYPE` lines, lines indented as pasted
(`        node_infiniband_...`), values in exponent form (`2.106905e+06`), `NaN`/`+Inf`, escaped quotes
in label values, empty label values (`pod_uid=""`), optional timestamps in seconds (OpenMetrics,
bundles) or milliseconds (Prometheus text format): `ts_unit="auto"` takes values above 1e11 as
milliseconds. A line that does not parse is counted and skipped, never fatal. Pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LINE = re.compile(r"^(" + _NAME + r")(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*$")
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float
    timestamp: float | None  # unix seconds, or None when the exposition had none


def _labels(text: str) -> dict[str, str] | None:
    body = text[1:-1]
    out: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        m = _PAIR.match(body, pos)
        if not m:
            if body[pos:].strip(" ,") == "":
                break
            return None
        v = m.group(2)
        if "\\" in v:
            v = _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), v)
        out[m.group(1)] = v
        pos = m.end()
    return out


def parse_value(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        t = text.lower()
        if t in ("nan",):
            return math.nan
        if t in ("+inf", "inf"):
            return math.inf
        if t == "-inf":
            return -math.inf
        return None


def iter_samples(text: str, ts_unit: str = "auto", stats: dict | None = None,
                 wanted: frozenset[str] | None = None) -> Iterator[Sample]:
    """Samples of an exposition, in order. `wanted`: only these metric names (faster on big files).
    `stats` (a dict) receives counts of parsed and skipped lines."""
    ok = bad = 0
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if wanted is not None:
            end = len(line)
            for ch in "{ \t":
                i = line.find(ch)
                if 0 <= i < end:
                    end = i
            if line[:end] not in wanted:
                continue
        m = _LINE.match(line)
        if not m:
            bad += 1
            continue
        labels = _labels(m.group(2)) if m.group(2) else {}
        value = parse_value(m.group(3))
        if labels is None or value is None:
            bad += 1
            continue
        ts = None
        if m.group(4) is not None:
            t = parse_value(m.group(4))
            if t is None or not math.isfinite(t):
                bad += 1
                continue
            ts = t / 1000.0 if ts_unit == "ms" or (ts_unit == "auto" and abs(t) > 1e11) else t
        ok += 1
        yield Sample(m.group(1), labels, value, ts)
    if stats is not None:
        stats["samples"] = stats.get("samples", 0) + ok
        stats["skipped_lines"] = stats.get("skipped_lines", 0) + bad
