"""Independent scenario catalogue for gangwatch's diagnosis (see README.md here).

    from tests.scenarios import SCENARIOS, write
    for path in write(tmpdir, seeds=2, schemas=("exporters",), max_nodes=16):
        ...  # path/metrics.om, squeue.json, bundle.json, truth.json[, topology.conf]
"""

from __future__ import annotations

from .build import Built, build, build_all
from .catalogue import CAUSES, SCENARIOS
from .render import SCHEMAS, render


def write(outdir: str, seeds: int = 1, schemas: tuple[str, ...] = SCHEMAS, names: list[str] | None = None,
          max_nodes: int = 64, window_s: float | None = None, first_seed: int = 0, fabric: str = "ib") -> list[str]:
    """Build and render the catalogue; returns the bundle directories written. `max_nodes` and a
    short `window_s` (seconds; None draws 15-25 min) keep bundles small for quick runs; seeds are
    first_seed .. first_seed + seeds - 1 (held-out seeds for a measurement nothing was tuned on);
    `fabric` "roce" shows the same clusters through RoCE's counters and adds the RoCE-only scenarios."""
    return [render(b, outdir, schema) for b in build_all(seeds, names, max_nodes, window_s, first_seed, fabric)
            for schema in schemas]


__all__ = ["Built", "CAUSES", "SCENARIOS", "SCHEMAS", "build", "build_all", "render", "write"]
