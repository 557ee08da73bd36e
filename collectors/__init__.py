"""gangwatch collectors: the node agent and the Slurm scheduler exporter."""

__version__ = "0.1.0"
