"""gangwatch serve/demo: the dashboard, data sources and (in `analysis/`) the Dash-free analysis."""
