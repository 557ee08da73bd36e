"""Slurm scheduler state for gangwatch: typed model, version-tolerant parsers, sources and the exporter."""
