"""Fabric topology from Slurm's topology.conf (TopologyPlugin=topology/tree): node -> leaf switch.

A leaf switch is a `SwitchName=` line with `Nodes=`; lines with only `Switches=` are spines. Pure;
a malformed line is skipped (and named in the returned notes), never fatal.
"""

from __future__ import annotations

import re

from collectors.slurm.hostlist import expand_lenient

_KV = re.compile(r"(\w+)=(\S+)")


def parse_topology_conf(text: str) -> tuple[dict[str, str], list[str]]:
    """topology.conf text -> ({node: leaf switch}, notes)."""
    leaf_of: dict[str, str] = {}
    notes: list[str] = []
    for no, raw in enumerate(str(text or "").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv = {k.lower(): v for k, v in _KV.findall(line)}
        name, nodes = kv.get("switchname"), kv.get("nodes")
        if not name:
            notes.append(f"topology.conf line {no}: no SwitchName, skipped")
            continue
        if nodes:
            for node in expand_lenient(nodes):
                leaf_of.setdefault(node, name)
    return leaf_of, notes
