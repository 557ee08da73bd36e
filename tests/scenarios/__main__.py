"""`python -m tests.scenarios OUTDIR [--seeds N] [--schema gangwatch|exporters|both] [--only NAME ...]
[--max-nodes N] [--window S] [--fabric ib|roce]`"""

from __future__ import annotations

import argparse
import sys
import time

from . import write
from .catalogue import FABRICS, SCENARIOS, citations, table
from .render import SCHEMAS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.scenarios", description=__doc__)
    ap.add_argument("outdir", nargs="?", help="where the bundles go (omit with --table)")
    ap.add_argument("--table", action="store_true", help="print the catalogue table and citations (README.md)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per scenario (FIRST..FIRST+N-1)")
    ap.add_argument("--first-seed", type=int, default=0, metavar="FIRST", help="first seed (default 0)")
    ap.add_argument("--schema", choices=(*SCHEMAS, "both"), default="both")
    ap.add_argument("--only", nargs="*", choices=[s.name for s in SCENARIOS], help="scenarios to write")
    ap.add_argument("--max-nodes", type=int, default=64, help="cap on the drawn cluster size (8-64)")
    ap.add_argument("--window", type=float, default=None, metavar="SECONDS",
                    help="capture length (default: drawn, 15-25 min; under 15 min squeezes onsets in)")
    ap.add_argument("--fabric", choices=FABRICS, default="ib",
                    help="the compute fabric: InfiniBand (transmit wait) or RoCE (ECN, CNPs, PFC pause; adds the "
                         "RoCE-only scenarios)")
    a = ap.parse_args(argv)
    if a.table:
        print(table() + "\n" + citations(), end="")
        return 0
    if not a.outdir:
        ap.error("OUTDIR is required")
    schemas = SCHEMAS if a.schema == "both" else (a.schema,)
    t0 = time.perf_counter()
    if a.window is not None and a.window < 120:
        ap.error("--window must be at least 120 seconds")
    paths = write(a.outdir, a.seeds, schemas, a.only, max(8, a.max_nodes), a.window, a.first_seed, a.fabric)
    print("\n".join(paths))
    print(f"{len(paths)} bundles in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
