"""Slurm's network topology (topology/tree): its switches, and the leaf switch of every node.

Sources, both read by one parser:
* `scontrol show topology`: one line per switch as slurmctld holds it,
  `SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[01-04] Switches=...`; a switch's `Nodes=` there
  lists every node below it, so a node's leaf is the lowest-level switch that lists it. Without a
  topology plugin slurmctld has nothing to say: 22.05 prints nothing on stdout and
  "No topology information available" on stderr, exit status 0 (`NO_TOPOLOGY` matches that line).
  topology/block (23.11+) prints `BlockName=` lines: not a tree, no switches, skipped quietly.
* topology.conf itself (`SwitchName=... Nodes=...` for leaves, `SwitchName=... Switches=...`
  above them; no levels, keys in any case, `#` comments, `\\` continues a line).
Privileges: none (scontrol show topology is open to every user). Pure functions; no exception
escapes for any input. A line that cannot be read is skipped and named in the notes; a `Nodes=`
list cut short (SLURM_TOPO_LEN truncates scontrol's lines) keeps its complete leading entries.
Switch and node names are data, kept verbatim. Used by the slurm-exporter
(`gangwatch_slurm_node_switch_info`) and by the diagnosis (`--topology`, bundles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .hostlist import MAX_HOSTS, HostlistError, expand
from .model import Switch

NO_TOPOLOGY = "No topology information available"
_KV = re.compile(r"([A-Za-z_]+)=(\S*)")


@dataclass(frozen=True)
class Topology:
    switches: tuple[Switch, ...] = ()
    notes: tuple[str, ...] = ()  # lines skipped or read in part, for the snapshot's warnings


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdecimal() and len(text) < 10 else None


def _expand_prefix(text: str) -> tuple[list[str], bool]:
    """(names, complete): a malformed list keeps the entries before its last top-level comma."""
    try:
        return expand(text), True
    except HostlistError:
        pass
    depth, cut = 0, -1
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            cut = i
    if cut > 0:
        try:
            return expand(text[:cut]), False
        except HostlistError:
            pass
    return [], False


def _logical_lines(text: str):
    """(first physical line number, line) with comments cut and `\\` continuations joined."""
    start, parts = 0, []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not parts:
            start = no
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        joined = " ".join(p.strip() for p in parts).strip()
        parts = []
        if joined:
            yield start, joined
    if parts and " ".join(parts).strip():
        yield start, " ".join(p.strip() for p in parts).strip()


def parse_topology(text: str | None, source: str = "topology") -> Topology:
    """`scontrol show topology` output or topology.conf text -> Topology (switches in input order)."""
    switches: list[Switch] = []
    notes: list[str] = []
    budget = MAX_HOSTS  # all Nodes= lists together: a hostile file must not allocate gigabytes
    for no, line in _logical_lines(str(text or "")):
        if NO_TOPOLOGY in line:
            continue
        kv: dict[str, str] = {}
        for k, v in _KV.findall(line):
            kv.setdefault(k.lower(), v)  # the first of a repeated key wins
        name = kv.get("switchname", "")
        if not name:
            if "blockname" not in kv:  # topology/block: a valid answer with no switches
                notes.append(f"{source} line {no}: no SwitchName, skipped")
            continue
        level_text, speed_text = kv.get("level"), kv.get("linkspeed")
        level, speed = _int(level_text), _int(speed_text)
        if level_text is not None and level is None:
            notes.append(f"{source} line {no}: switch {name!r}: Level={level_text[:40]!r} is not a number")
        nodes, switch_names = [], []
        for key, out in (("nodes", nodes), ("switches", switch_names)):
            value = kv.get(key, "")
            if not value:
                continue
            names, complete = _expand_prefix(value) if budget > 0 else ([], False)
            if len(names) > budget:
                names, complete = names[:budget], False
            budget -= len(names)
            out.extend(names)
            if not complete:
                notes.append(f"{source} line {no}: switch {name!r}: {key.capitalize()}= list unreadable or cut short, "
                             f"{len(names)} name(s) kept")
        switches.append(Switch(name, level, speed, tuple(nodes), tuple(switch_names)))
    return Topology(tuple(switches), tuple(notes))


def switch_levels(switches: tuple[Switch, ...] | list[Switch]) -> list[int]:
    """Each switch's level: Slurm's own where given, else 0 for a switch without child switches and
    one above its highest child otherwise (topology.conf). Iterative, linear in the links: a cycle
    or a chain thousands deep is counted, never followed forever."""
    by_name: dict[str, int] = {}
    for i, sw in enumerate(switches):
        by_name.setdefault(sw.name, i)
    kids = [[by_name[c] for c in sw.switches if c in by_name] for sw in switches]
    level: list[int | None] = [None] * len(switches)
    state = [0] * len(switches)  # 0 unseen, 1 children pending, 2 done
    for root in range(len(switches)):
        stack = [root]
        while stack:
            i = stack[-1]
            if state[i] == 0:
                state[i] = 1
                if switches[i].level is None:
                    stack.extend(k for k in kids[i] if state[k] == 0)  # a child still pending is a cycle: ignored
                continue
            stack.pop()
            if state[i] == 2:
                continue
            state[i] = 2
            sw = switches[i]
            below = [lv for k in kids[i] if (lv := level[k]) is not None]
            if sw.level is not None:
                level[i] = sw.level
            elif below:
                level[i] = 1 + max(below)
            else:  # only unknown children: a leaf if it has nodes, else a spine above nothing we know
                level[i] = 0 if not sw.switches or sw.nodes else 1
    return [lv if lv is not None else 0 for lv in level]


def leaf_switches(switches: tuple[Switch, ...] | list[Switch]) -> dict[str, str]:
    """{node: leaf switch}: the lowest-level switch listing the node (the first listed on a tie)."""
    best: dict[str, tuple[int, int]] = {}
    leaf: dict[str, str] = {}
    for i, (sw, lvl) in enumerate(zip(switches, switch_levels(switches))):
        key = (lvl, i)
        for node in sw.nodes:
            cur = best.get(node)
            if cur is None or key < cur:
                best[node] = key
                leaf[node] = sw.name
    return leaf


def parse_topology_conf(text: str | None) -> tuple[dict[str, str], list[str]]:
    """topology.conf text -> ({node: leaf switch}, notes): the diagnosis' view of the fabric."""
    topo = parse_topology(text, "topology.conf")
    return leaf_switches(topo.switches), list(topo.notes)
