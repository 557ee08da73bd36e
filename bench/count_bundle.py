"""Instructions of one `diagnose --bundle`, beside the floor's, under valgrind callgrind: the
load-independent figure for bench_bundle's bundles (wall time on a shared host moves by a quarter).

Three processes of the checkout CHECKOUT (default: this one) on one bundle directory, each under
`valgrind --tool=callgrind`: imports + one warm-up diagnose; the same + one more diagnose; the same
+ the floor (bench_bundle.floor: `line.rpartition(" ")` over every line). Ours = second - first,
floor = third - first: imports, first-call caches and the warm-up cancel out. One BLAS thread, so
the count does not depend on the cores.

    python bench/count_bundle.py BUNDLE_DIR [--checkout ROOT]
    (bundles: bench_bundle.make_bundles, or `python bench/count_bundle.py --make DIR`)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# argv: checkout, bundle, what ("warm", "ours", "floor")
_CHILD = r"""
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "bench")); sys.path.insert(0, sys.argv[1])
from dashboard.diagnose_cli import build_parser, run
from bench_bundle import floor
args = build_parser().parse_args(["--bundle", sys.argv[2], "--span", "3600"])
run(args)
if sys.argv[3] == "ours":
    run(args)
elif sys.argv[3] == "floor":
    floor(sys.argv[2])
"""


def instructions(checkout: str, bundle: str, what: str) -> int:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD,
                          checkout, bundle, what], capture_output=True, text=True, env=env, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count from callgrind: {out.stderr[-500:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle", help="a bundle directory; with --make, where to write the three bundles")
    ap.add_argument("--checkout", default=os.path.dirname(HERE), help="the checkout whose diagnose is counted")
    ap.add_argument("--make", action="store_true", help="write bench_bundle's bundles (32 nodes x 30 min, x8) and stop")
    args = ap.parse_args(argv)
    if args.make:
        sys.path.insert(0, HERE)
        import bench_bundle

        paths = bench_bundle.make_bundles(args.bundle, 32, 30)
        bench_bundle.replicate(paths["exporters"], os.path.join(args.bundle, "exporters x8"), 8)
        print("\n".join([*paths.values(), os.path.join(args.bundle, "exporters x8")]))
        return 0
    checkout = os.path.abspath(args.checkout)
    warm = instructions(checkout, args.bundle, "warm")
    ours = instructions(checkout, args.bundle, "ours") - warm
    fl = instructions(checkout, args.bundle, "floor") - warm
    print(f"{args.bundle} ({checkout}): floor {fl / 1e6:,.0f} M instructions, ours {ours / 1e6:,.0f} M, "
          f"ratio {ours / fl:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
