"""Fabric topology from Slurm's topology.conf (TopologyPlugin=topology/tree): node -> leaf switch.

The parser lives with the slurm-exporter (collectors/slurm/topology.py), which reads the same
syntax from `scontrol show topology`; the analysis imports it from there (collectors never import
the dashboard). Pure; a malformed line is skipped (and named in the returned notes), never fatal.
"""

from __future__ import annotations

from collectors.slurm.topology import leaf_switches, parse_topology, parse_topology_conf

__all__ = ["leaf_switches", "parse_topology", "parse_topology_conf"]
