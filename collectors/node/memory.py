"""Memory usage from `/proc/meminfo`, every field, in bytes.

Source: `<procfs>/meminfo` (world-readable; no privileges).
Metrics: one gauge per field, `gangwatch_memory_<field>_bytes` (kB in the file, times 1024), e.g.
`MemTotal` -> `gangwatch_memory_mem_total_bytes`, `Active(anon)` -> `gangwatch_memory_active_anon_bytes`.
node_exporter keeps the kernel's CamelCase (`node_memory_MemTotal_bytes`); gangwatch uses snake_case:
CamelCase words are split with `_`, parentheses become `_`, a digit run after a word starts a new word
(`DirectMap2M` -> `direct_map_2m`), and `RENAMES` below spells out the few kernel abbreviations
(`SReclaimable` -> `slab_reclaimable`). The huge-page counts, which have no unit, are
`gangwatch_memory_huge_pages{state="total|free|reserved|surplus"}`; any other unitless field is
`gangwatch_memory_<field>`.
Failure modes: an unreadable file, or one without any parsable line, fails the collector; a
garbled line drops only that field; fields added by newer kernels appear on their own.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..exposition import Family, format_labels, gauge
from ..readers import read_required
from ..registry import Collector, register

# Kernel abbreviations the generic conversion cannot expand.
RENAMES = {
    "SReclaimable": "slab_reclaimable",
    "SUnreclaim": "slab_unreclaimable",
    "KReclaimable": "kernel_reclaimable",
    "Hugepagesize": "huge_page_size",
    "Committed_AS": "committed_as",
    "NFS_Unstable": "nfs_unstable",
}
HUGE_PAGE_STATES = {"HugePages_Total": "total", "HugePages_Free": "free",
                    "HugePages_Rsvd": "reserved", "HugePages_Surp": "surplus"}

_LOWER_UPPER = re.compile(r"([a-z])([A-Z])")
_ACRONYM_WORD = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_DIGIT = re.compile(r"([a-z])([0-9])")
_OTHER = re.compile(r"[^A-Za-z0-9]+")


def snake_case(field: str) -> str:
    """A meminfo field name as a snake_case metric name part ('' when nothing usable is left)."""
    renamed = RENAMES.get(field)
    if renamed:
        return renamed
    s = _LOWER_UPPER.sub(r"\1_\2", field)
    s = _ACRONYM_WORD.sub(r"\1_\2", s)
    s = _WORD_DIGIT.sub(r"\1_\2", s)
    return _OTHER.sub("_", s).strip("_").lower()


class MemField(NamedTuple):
    field: str
    value: int  # bytes when `in_bytes`, else a plain count
    in_bytes: bool


def parse_meminfo(text: str) -> list[MemField]:
    """`Key:   123 kB` lines -> fields (kB converted to bytes); garbled lines are skipped, never raises."""
    out: list[MemField] = []
    seen: set[str] = set()
    for line in text.split("\n"):
        parts = line.split()
        n = len(parts)
        if n != 2 and n != 3:
            continue
        key = parts[0]
        if key[-1] != ":":
            continue
        key = key[:-1]
        if not key or key in seen:
            continue
        try:
            value = int(parts[1])
        except ValueError:
            continue
        if n == 2:
            out.append(MemField(key, value, False))
        elif parts[2] == "kB":
            out.append(MemField(key, value * 1024, True))
        else:
            continue  # an unknown unit: better absent than wrongly scaled
        seen.add(key)
    return out


@register
class MeminfoCollector(Collector):
    """Memory statistics from /proc/meminfo, every field in bytes."""

    name = "meminfo"

    def __init__(self, ctx):
        super().__init__(ctx)
        # field -> (metric name, help, rendered labels) or None for a field without a usable
        # name; the regex conversion runs once per field name, not on every scrape.
        self._names: dict[str, tuple[str, str, str] | None] = {}

    def _describe(self, f: MemField) -> tuple[str, str, str] | None:
        state = HUGE_PAGE_STATES.get(f.field)
        if state is not None:
            return ("gangwatch_memory_huge_pages",
                    "Number of huge pages in the pool by state (from /proc/meminfo HugePages_*).",
                    format_labels({"state": state}))
        base = snake_case(f.field)
        if not base:
            return None
        if f.in_bytes:
            return (f"gangwatch_memory_{base}_bytes",
                    f"Memory information field {f.field} from /proc/meminfo, in bytes.", "")
        if base.endswith("_total"):  # a gauge must not look like a counter
            base += "_count"
        return (f"gangwatch_memory_{base}", f"Memory information field {f.field} from /proc/meminfo (a count).", "")

    def collect(self):
        path = self.ctx.paths.proc("meminfo")
        text = read_required(path)
        fields = parse_meminfo(text)
        if not fields:
            raise ValueError(f"no parsable lines in {path}")
        if len(self._names) > 4096:  # only a changing garbage file could get here; stay bounded
            self._names.clear()
        fams: dict[str, Family] = {}
        for f in fields:
            desc = self._names.get(f.field, False)
            if desc is False:
                desc = self._names[f.field] = self._describe(f)
            if desc is None:
                continue
            name, help, labels = desc
            fam = fams.get(name)
            if fam is None:
                fam = fams[name] = gauge(name, help)
            elif not labels:
                continue  # two fields that convert to one name: keep the first, never a duplicate series
            fam.add_rendered(labels, f.value)
        return list(fams.values())
