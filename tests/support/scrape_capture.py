"""What a scraper given the demo's /sim/prometheus.yml would have stored, written as a bundle's
metrics.om: every virtual node's agent exposition (job gangwatch-agent, instance and node = the
node name, as the demo's relabelling sets them), the slurm-exporter's (gangwatch-slurm) and serve's
findings (gangwatch-serve), plus `up`, at every simulated step, with the step's timestamp.

Unlike dashboard.sources.simulated.BundleWriter (only the families the diagnosis reads), this
holds every family the rules and the Grafana dashboards select, so one file loaded into two
engines exercises all of rules/*.yml. Built in-process from the demo's own handlers: no HTTP.
"""

from __future__ import annotations

from pathlib import Path

from collectors.exposition import encode
from dashboard.sources.bundle import openmetrics
from dashboard.sources.exposition import Sample, iter_samples


def _targets(demo):
    sim = demo.sim
    for i, name in enumerate(sim.cluster.names):
        yield {"job": "gangwatch-agent", "instance": name, "node": name}, demo.renderer.render(i)
    yield {"job": "gangwatch-slurm", "instance": "demo:8050"}, encode(demo.slurm_families())
    yield {"job": "gangwatch-serve", "instance": "demo:8050"}, demo.serve_metrics().decode()


def target_labels(labels: dict, target: dict) -> dict:
    """Prometheus' honor_labels: false: the target's labels win, a clashing series label is kept
    as exported_<name>."""
    out = {(f"exported_{k}" if k in target and target[k] != v else k): v for k, v in labels.items()}
    out.update(target)
    return out


def capture(demo, steps: int, out: Path) -> tuple[float, float]:
    """Step the demo's simulation `steps` times, scraping everything after each step; write
    OpenMetrics to `out`. Returns (first, last) sample time."""
    samples: list[Sample] = []
    times = []
    for _ in range(steps):
        demo.advance()
        t = float(demo.sim.t)
        times.append(t)
        for target, text in _targets(demo):
            for s in iter_samples(text):
                samples.append(Sample(s.name, target_labels(s.labels, target), s.value, t))
            samples.append(Sample("up", target, 1.0, t))
    out.write_text(openmetrics(samples))
    return times[0], times[-1]
