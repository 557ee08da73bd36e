"""Metric sources for the diagnosis, behind one interface (`MetricSource.window()` -> `Window`).

* `prometheus.PrometheusSource`: the Prometheus HTTP API (or Thanos, Mimir, VictoriaMetrics), range
  queries aggregated on the server; a fixed number of queries per cycle whatever the node count.
* `embedded.EmbeddedSource`: scrapes agent (or node_exporter / dcgm-exporter) endpoints itself into
  a bounded in-memory window; the default when no Prometheus is given.
* `bundle.BundleSource`: a bundle directory (metrics.om + squeue.json [+ sinfo.json, bundle.json]).
* `simulated.SimRecorder`: the simulated cluster, without text or HTTP.

Metric names of every supported exporter map to diagnosis signals in `schema.py`.
"""
