"""Slurm's TRES and GRES request strings, parsed once into the model's typed `Tres`.

Sources: a job's `tres_per_node` / `tres_per_job` (squeue/scontrol/slurmrestd: "gres:gpu:h100:4",
"gres/gpu=2", "gres/gpu:a100=1,gres/shard=2"), its `tres_alloc` ("cpu=8,mem=64G,node=1,
billing=8,gres/gpu=2,license/matlab=1"; for a pending job in scontrol's text, the request), and a
QOS's TRES limits ("gres/gpu=4,cpu=64"). Pure functions, no I/O. `collectors.slurm.model` calls
`job_tres` / `limit_tres` when a record is built, so every consumer reads typed fields and none
parses a TRES string again.

Failure modes: an item that is not a TRES term (no "=" in an allocation, a count that is not a
number) is skipped; nothing raises.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .model import Gres, License, Tres
from .parse_common import integer, memory_bytes, parse_tres

_SPLIT = re.compile(r"[:/=]")


@lru_cache(maxsize=4096)
def _gres_request(spec: str) -> tuple[Gres, ...]:
    """ "gres:gpu:h100:4,gres/shard=2" -> (Gres("gpu", "h100", 4), Gres("shard", None, 2)). A name
    without a count asks for one ("gres:gpu")."""
    out = []
    for item in (spec or "").split(","):
        parts = [p for p in _SPLIT.split(item.strip()) if p]
        if parts and parts[0] in ("gres", "tres"):
            parts = parts[1:]
        if not parts or parts[0] in ("cpu", "mem", "node", "billing", "license"):
            continue
        name, rest = parts[0], parts[1:]
        count = integer(rest[-1]) if rest else 1
        if rest and count is None:
            if len(rest) > 1:
                continue  # "gpu:h100:x": not a request we understand
            count = 1  # "gpu:h100": one of that type
            gtype = rest[0]
        else:
            gtype = rest[0] if len(rest) >= 2 else None
        out.append(Gres(name, gtype, count))
    return tuple(out)


def _gpus(gres: tuple[Gres, ...]) -> tuple[int | None, str | None]:
    counts = [g.count for g in gres if g.name == "gpu" and g.count is not None]
    types = [g.type for g in gres if g.name == "gpu" and g.type]
    return (sum(counts) if counts else None), (types[0] if types else None)


@lru_cache(maxsize=4096)
def limit_tres(spec: str) -> Tres:
    """A TRES total or limit ("cpu=8,mem=64G,node=1,gres/gpu:h100=2,license/matlab=1")."""
    cpus = mem = nodes = billing = None
    gres: list[Gres] = []
    licenses: list[License] = []
    for key, value in parse_tres(spec).items():
        if key == "cpu":
            cpus = integer(value)
        elif key == "mem":
            mem = memory_bytes(value)
        elif key == "node":
            nodes = integer(value)
        elif key == "billing":
            billing = integer(value)
        elif key.startswith("license/"):
            n = integer(value)
            if n is not None:
                licenses.append(License(key[len("license/"):], n))
        elif key.startswith("gres/"):
            name, _, gtype = key[len("gres/"):].partition(":")
            gres.append(Gres(name, gtype or None, integer(value)))
    untyped = [g for g in gres if g.name == "gpu" and g.type is None and g.count is not None]
    # "gres/gpu=4,gres/gpu:h100=4" counts the same GPUs twice: the untyped total is the count
    gpus = untyped[0].count if untyped else _gpus(tuple(gres))[0]
    return Tres(cpus=cpus, mem_bytes=mem, nodes=nodes, gpus=gpus, gpu_type=_gpus(tuple(gres))[1],
                gres=tuple(gres), licenses=tuple(licenses), billing=billing)


@lru_cache(maxsize=4096)
def license_request(spec: str) -> tuple[License, ...]:
    """ "matlab:2,ansys@db:1" (squeue's and scontrol's Licenses=) -> licenses; a name alone is one."""
    out = []
    for item in (spec or "").replace("(null)", "").split(","):
        name, _, count = item.strip().partition(":")
        n = integer(count) if count else 1
        if name and n is not None:
            out.append(License(name, n))
    return tuple(out)


@lru_cache(maxsize=4096)
def job_tres(per_node: str, per_job: str, alloc: str, licenses: str = "") -> Tres:
    """A job's typed TRES: the request per node and per job, and the allocation (or request) totals;
    licenses from its Licenses= request where the TRES string has none."""
    total = limit_tres(alloc) if alloc else Tres()
    node_gres, job_gres = _gres_request(per_node), _gres_request(per_job)
    gpn, type_n = _gpus(node_gres)
    gpj, type_j = _gpus(job_gres)
    return Tres(cpus=total.cpus, mem_bytes=total.mem_bytes, nodes=total.nodes, gpus=total.gpus,
                gpu_type=type_n or type_j, gres=total.gres, licenses=total.licenses or license_request(licenses),
                billing=total.billing, gpus_per_node=gpn, gpus_per_job=gpj, gres_per_node=node_gres,
                gres_per_job=job_gres)
