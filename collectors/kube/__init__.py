"""gangwatch kube-exporter: Volcano and Kueue gang jobs as a second scheduler source (docs/kube-exporter.md)."""
