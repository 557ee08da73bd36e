"""Metric families and a lean Prometheus text-format (0.0.4) encoder.

Why hand-written: prometheus_client's encoder costs roughly 10x node_exporter's CPU per scrape for
the same series (measured before any code, see issue 2), so the agent's hot path builds plain
strings. Every family is emitted with HELP and TYPE; label values are escaped as the format asks.
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Mapping

GAUGE = "gauge"
COUNTER = "counter"
UNTYPED = "untyped"

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def escape_label_value(value: object) -> str:
    text = value if type(value) is str else str(value)
    # Most label values need no escaping; testing first is ~3x cheaper than always translating.
    if "\\" in text or '"' in text or "\n" in text:
        return text.translate(_ESCAPES)
    return text


def format_value(value: float) -> str:
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is float:
        # is_integer() is False for NaN and the infinities, so they fall through to the checks below.
        if value.is_integer() and -1e15 < value < 1e15:
            return str(int(value))
        if value != value:
            return "NaN"
        if value == math.inf:
            return "+Inf"
        if value == -math.inf:
            return "-Inf"
        return repr(value)
    if kind is bool:
        return "1" if value else "0"
    return format_value(int(value) if isinstance(value, int) else float(value))


def format_labels(labels: Mapping[str, object] | Iterable[tuple[str, object]]) -> str:
    items = labels.items() if type(labels) is dict or isinstance(labels, Mapping) else labels
    body = ",".join([f'{k}="{escape_label_value(v)}"' for k, v in items])
    return "{" + body + "}" if body else ""


class Family:
    """One metric family: name, type, help and its samples, pre-rendered as they are added.

    `add` renders the sample line immediately, so the encoder only joins strings. Collectors
    that emit the same label set for many families can render the label string once with
    `format_labels` and call `add_rendered`.
    """

    __slots__ = ("name", "kind", "help", "lines")

    def __init__(self, name: str, kind: str, help: str):
        self.name = name
        self.kind = kind
        self.help = help
        self.lines: list[str] = []

    def add(self, value: float, labels: Mapping[str, object] | None = None, **kw: object) -> "Family":
        if labels is None:
            labels = kw
        elif kw:
            labels = {**labels, **kw}
        self.lines.append(f"{self.name}{format_labels(labels)} {format_value(value)}")
        return self

    def add_rendered(self, rendered_labels: str, value: float) -> "Family":
        self.lines.append(f"{self.name}{rendered_labels} {format_value(value)}")
        return self

    def __len__(self) -> int:
        return len(self.lines)

    def __repr__(self) -> str:
        return f"Family({self.name!r}, {self.kind!r}, {len(self.lines)} samples)"


def gauge(name: str, help: str) -> Family:
    return Family(name, GAUGE, help)


def counter(name: str, help: str) -> Family:
    return Family(name, COUNTER, help)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


# "# HELP ..\n# TYPE .." per family name, with the kind and help it was rendered from: families are
# rebuilt on every scrape, their headers almost never change. Keyed by name alone, checked against
# kind and help (usually the very same string objects, so the check is an identity test): cheaper
# per family than building and hashing a (name, kind, help) key. Bounded so that a collector with
# dynamic names cannot grow it.
_HEADERS: dict[str, tuple[str, str, str]] = {}


def _header(fam: Family) -> str:
    cached = _HEADERS.get(fam.name)
    if cached is None or cached[1] != fam.help or cached[0] != fam.kind:
        if len(_HEADERS) > 4096:
            _HEADERS.clear()
        cached = _HEADERS[fam.name] = (fam.kind, fam.help, f"# HELP {fam.name} {_escape_help(fam.help)}\n"
                                                            f"# TYPE {fam.name} {fam.kind}")
    return cached[2]


def encode(families: Iterable[Family]) -> str:
    """Render families as text format 0.0.4; families of the same name are merged, empty ones dropped."""
    merged: dict[str, Family] = {}
    for fam in families:
        if not fam.lines:
            continue
        seen = merged.get(fam.name)
        if seen is None:
            merged[fam.name] = fam
        elif seen is not fam and seen.kind == fam.kind:  # a conflicting kind would invalidate it all
            copy = Family(seen.name, seen.kind, seen.help)
            copy.lines = seen.lines + fam.lines
            merged[fam.name] = copy
    out: list[str] = []
    headers = _HEADERS
    for name in sorted(merged):
        fam = merged[name]
        cached = headers.get(name)
        # the common case inlined: a call per family was a good part of encode's cost
        out.append(cached[2] if cached is not None and cached[1] == fam.help and cached[0] == fam.kind
                   else _header(fam))
        out.extend(fam.lines)
    out.append("")
    return "\n".join(out)


def iter_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Parse text exposition back into (name, labels, value): used by tests and the embedded source."""
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            yield s.name, dict(s.labels), s.value
