#!/usr/bin/env python3
"""CPU per scrape of the infiniband and filesystem collectors, ours against node_exporter's, same run.

node_exporter's figure is the marginal cost of one collector: its CPU per scrape with only that
collector enabled minus its CPU per scrape with no collector at all (the Go runtime, HTTP and its
own process metrics), both scraped over HTTP without gzip. Ours is collect() plus encoding of the
collector's families, in this process, plus the CPU of the statvfs prober child for filesystem.
Trees: infiniband on node_exporter's fixture sysfs (mlx4_0 x2, i40iw0) and prometheus/procfs' sysfs
(hfi1_0, mlx4_0 x2, mlx5_0 with hw_counters); filesystem on this host's /proc and / with the same
include/exclude patterns given to both.

Usage: python bench/bench_ib_fs.py [--scrapes 300] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"


def proc_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_exporter_us(args: list[str], scrapes: int,
                     prefixes: tuple[str, ...] = ("node_infiniband_", "node_filesystem_")) -> tuple[float, int]:
    """CPU microseconds per scrape and the number of samples whose names start with `prefixes`."""
    port = free_port()
    proc = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", f"--web.listen-address=127.0.0.1:{port}",
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for _ in range(20):
            urllib.request.urlopen(url).read()
        c0 = proc_cpu(proc.pid)
        for _ in range(scrapes):
            body = urllib.request.urlopen(url).read().decode()
        used = proc_cpu(proc.pid) - c0
    finally:
        proc.terminate()
        proc.wait(5)
    series = sum(1 for line in body.splitlines() if line.startswith(prefixes))
    return used * 1e6 / scrapes, series


def ours_us(collector, scrapes: int) -> tuple[float, int]:
    from collectors.exposition import encode

    child = getattr(getattr(collector, "prober", None), "pid", None)
    text = encode(collector.collect())
    child = child or getattr(getattr(collector, "prober", None), "pid", None)
    c0, k0 = time.process_time(), proc_cpu(child) if child else 0.0
    for _ in range(scrapes):
        text = encode(collector.collect())
    used = time.process_time() - c0 + ((proc_cpu(child) - k0) if child else 0.0)
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return used * 1e6 / scrapes, series


def best_of(repeat: int, measure, *args, **kwargs) -> tuple[float, int]:
    """The least CPU of `repeat` runs of `measure` (ours_us or node_exporter_us)."""
    return min((measure(*args, **kwargs) for _ in range(max(1, repeat))), key=lambda r: r[0])


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(doc: str, argv: list[str] | None, extra=None) -> argparse.Namespace | None:
    """`--scrapes`, `--repeat` and what `extra(parser)` adds; None (after saying why) when
    node_exporter, the peer, is not installed."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if extra is not None:
        extra(ap)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of --scrapes each; the best (least CPU) is printed "
                                                          "(a shared machine's noise only ever adds)")
    args = ap.parse_args(argv)
    if not os.access(NODE_EXPORTER, os.X_OK):
        print("prometheus-node-exporter not found: apt-get install prometheus-node-exporter", file=sys.stderr)
        return None
    return args


def shared_fixtures() -> Path:
    return Path(os.environ.get("GW_SHARED", REPO.parent / "shared")) / "fixtures"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    if args is None:
        return 2
    from collectors.node.filesystem import DEFAULT_FS_TYPES_EXCLUDE, DEFAULT_MOUNT_POINTS_EXCLUDE, FilesystemCollector
    from collectors.node.infiniband import InfinibandCollector
    from collectors.registry import Context, Paths
    from tests.support import ttar

    shared = shared_fixtures()
    tmp = tempfile.mkdtemp(prefix="gw-bench-ibfs-")
    try:
        ttar.unpack(str(shared / "node_exporter" / "sys.ttar"), f"{tmp}/ne")
        ttar.unpack(str(shared / "prometheus_procfs" / "fixtures.ttar"), f"{tmp}/pf")
        base_us, _ = best_of(args.repeat, node_exporter_us, [], args.scrapes)
        print(f"node_exporter with no collector: {base_us:.0f} us CPU per scrape (subtracted below)")
        print(f"{'case':<34} {'ours us':>8} {'series':>6} {'n_e us':>8} {'series':>6} {'ratio':>6}")
        cases = [
            ("infiniband, node_exporter sysfs", f"{tmp}/ne/sys"),
            ("infiniband, procfs sysfs", f"{tmp}/pf/fixtures/sys"),
        ]
        for name, sysfs in cases:
            c = InfinibandCollector(Context(paths=Paths(sysfs=sysfs)))
            ours, n_ours = best_of(args.repeat, ours_us, c, args.scrapes)
            c.close()
            theirs, n_theirs = best_of(args.repeat, node_exporter_us, ["--collector.infiniband", f"--path.sysfs={sysfs}"],
                                        args.scrapes)
            theirs -= base_us
            print(f"{name:<34} {ours:>8.0f} {n_ours:>6} {theirs:>8.0f} {n_theirs:>6} {ours / theirs:>6.2f}")
        c = FilesystemCollector(Context())
        ours, n_ours = best_of(args.repeat, ours_us, c, args.scrapes)
        c.close()
        theirs, n_theirs = best_of(args.repeat, node_exporter_us,
            ["--collector.filesystem", f"--collector.filesystem.mount-points-exclude={DEFAULT_MOUNT_POINTS_EXCLUDE}",
             f"--collector.filesystem.fs-types-exclude={DEFAULT_FS_TYPES_EXCLUDE}"], args.scrapes)
        theirs -= base_us
        print(f"{'filesystem, this host (+prober)':<34} {ours:>8.0f} {n_ours:>6} {theirs:>8.0f} {n_theirs:>6} "
              f"{ours / theirs:>6.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
