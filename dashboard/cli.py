"""The `gangwatch` console script: one entry point, subcommands imported only when used.

Importing a subcommand lazily keeps `gangwatch agent` on compute nodes free of Dash, pandas and
the analysis code.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

# subcommand -> (module, function, one-line description)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "agent": ("collectors.agent", "main", "node collectors, Prometheus /metrics (default :9810)"),
    "slurm-exporter": ("collectors.slurm.exporter", "main", "Slurm state as metrics and a JSON snapshot (:9811)"),
    "kube-exporter": ("collectors.kube.exporter", "main", "Volcano and Kueue gangs on Kubernetes as metrics and a snapshot (:9812)"),
    "serve": ("dashboard.serve", "main", "dashboard, analysis and findings as metrics (127.0.0.1:8050)"),
    "demo": ("dashboard.demo", "main", "a simulated GPU cluster plus serve, in one process (127.0.0.1:8050)"),
    "diagnose": ("dashboard.diagnose_cli", "main", "one-shot verdicts for running jobs"),
    "backfill": ("dashboard.backfill_cli", "main", "backfill windows and startable jobs now"),
    "simulate": ("dashboard.simulate_cli", "main", "replay an SWF workload trace under fcfs/easy/conservative"),
    "capture": ("dashboard.capture_cli", "main", "write a bundle from a live Prometheus and Slurm"),
    "probe": ("dashboard.probe_cli", "main", "measure the links between a running job's nodes through their agents"),
}


# What `pip install 'gangwatch[dashboard]'` adds (pyproject.toml), and which of it each command
# imports; the agent and the exporters need none of it (`simulate` reads traces with numpy).
DASHBOARD_EXTRA = ("dash", "plotly", "numpy", "fastnumbers")
NEEDS: dict[str, tuple[str, ...]] = {
    "serve": DASHBOARD_EXTRA,
    "demo": DASHBOARD_EXTRA,
    "diagnose": ("numpy", "fastnumbers"),
    "backfill": ("numpy",),
    "simulate": ("numpy",),
    "capture": ("numpy", "fastnumbers"),
    "probe": ("numpy",),
}


def needs(name: str, argv: list[str]) -> tuple[str, ...]:
    if name == "demo" and "--no-dashboard" in argv:
        return ("numpy",)  # the simulator alone: no Dash
    return NEEDS.get(name, ())


def missing_extra(packages: tuple[str, ...] = DASHBOARD_EXTRA) -> str | None:
    """The first of `packages` that cannot be imported, found without importing it."""
    for package in packages:
        try:
            if importlib.util.find_spec(package) is None:
                return package
        except (ImportError, ValueError):
            return package
    return None


def _needs_extra(name: str, package: str) -> int:
    print(f"gangwatch {name}: needs the dashboard extra ({package!r} is not installed); "
          "install it with: pip install 'gangwatch[dashboard]'", file=sys.stderr)
    return 2


def usage() -> str:
    lines = ["usage: gangwatch <command> [options]", "", "commands:"]
    for name, (_, _, text) in COMMANDS.items():
        lines.append(f"  {name:<15} {text}")
    lines += ["", "Run 'gangwatch <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        from collectors import __version__

        print(f"gangwatch {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gangwatch: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    missing = missing_extra(needs(name, rest))
    if missing:
        return _needs_extra(name, missing)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            print(f"gangwatch: the {name!r} command is not available in this build yet", file=sys.stderr)
            return 2
        if exc.name and exc.name.partition(".")[0] in DASHBOARD_EXTRA:
            return _needs_extra(name, exc.name)
        raise
    return int(getattr(mod, func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
