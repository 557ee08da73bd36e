"""A simulated GPU cluster: trace-driven jobs, real metric names, injected faults with ground truth.

Pure (no Dash, no I/O apart from reading a trace file): `Simulation(SimConfig(...))` builds a
cluster, fills an hour of history and advances with `step()`; `NodeRenderer` renders a virtual
node's agent `/metrics`; `slurm_view.build_snapshot` gives the scheduler as the Slurm model.
`gangwatch demo` (dashboard/demo.py) serves it all over HTTP.
"""

from .engine import JobRec, SimConfig, Simulation

__all__ = ["JobRec", "SimConfig", "Simulation"]
