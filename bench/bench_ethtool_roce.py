#!/usr/bin/env python3
"""CPU per scrape of the ethtool and roce collectors on a node with 8 NICs, beside node_exporter, same run.

Goal (issue 18): ethtool + roce together add <= 0.3 ms CPU per scrape on a node with 8 NICs.

Ours: collect() plus encoding of the collector's families, in this process (bench_ib_fs.ours_us).
node_exporter's: the marginal CPU of one collector over HTTP, its process CPU per scrape with only
that collector enabled minus its CPU with no collector (bench_ib_fs.node_exporter_us).

Trees, built in a temp folder:
- roce: 8 copies of prometheus/procfs' real mlx5_0 device (counters/, hw_counters/, state, rate),
  each hw_counters/ given the four congestion files the capture lacks (np_ecn_marked_roce_packets,
  np_cnp_sent, rp_cnp_handled, rp_cnp_ignored). node_exporter has no RoCE hw_counters collector:
  its infiniband collector on the same tree is the nearest peer (it reads the counters/ files).
- ethtool, fixtures: 8 NICs whose `ethtool -S` text is tests/data/ethtool/mlx5_0 plus 16 channels of
  mlx5 per-queue stats (rx<q>_*, tx<q>_*, ch<q>_*), read by our fixture reader (text parsed every
  scrape). node_exporter's ethtool collector reads only the ioctl, never text: it cannot read these.
- ethtool, this machine: both through the real ioctl, on the interfaces this host has (lo, eth0, ...),
  the same data for both: our IoctlReader against node_exporter's ethtool collector.

Usage: python bench/bench_ethtool_roce.py [--scrapes 300]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_ib_fs import node_exporter_us, ours_us, parse_args, shared_fixtures  # noqa: E402

NICS = 8
CHANNELS = 16
GOAL_US = 300.0


def roce_tree(root: Path, shared: Path) -> Path:
    src = shared / "prometheus_procfs" / "extracted" / "sys" / "class" / "infiniband" / "mlx5_0"
    for i in range(NICS):
        dev = root / "class" / "infiniband" / f"mlx5_{i}"
        shutil.copytree(src, dev)
        hw = dev / "ports" / "1" / "hw_counters"
        for name, value in (("np_ecn_marked_roce_packets", 10_000 + i), ("np_cnp_sent", 5_000 + i),
                            ("rp_cnp_handled", 2_000 + i), ("rp_cnp_ignored", 0)):
            os.chmod(hw, 0o755)
            (hw / name).write_text(f"{value}\n")
    return root


def ethtool_tree(root: Path) -> tuple[Path, int]:
    base = (REPO / "tests" / "data" / "ethtool" / "mlx5_0" / "statistics").read_text().splitlines()
    lines = [ln for ln in base if not ln.startswith("#") and not ln.strip().startswith(("rx0_", "rx1_", "tx0_", "tx1_", "ch0_", "ch1_"))]
    for q in range(CHANNELS):
        lines += [f"     ch{q}_events: {1000 + q}", f"     ch{q}_arm: {990 + q}",
                  f"     rx{q}_packets: {100_000 + q}", f"     rx{q}_bytes: {409_600_000 + q}",
                  f"     rx{q}_wqe_err: 0", f"     rx{q}_buff_alloc_err: 0",
                  f"     tx{q}_packets: {90_000 + q}", f"     tx{q}_bytes: {368_640_000 + q}", f"     tx{q}_dropped: {q % 3}"]
    text = "\n".join(lines) + "\n"
    for i in range(NICS):
        d = root / f"eth{i}"
        d.mkdir(parents=True)
        (d / "statistics").write_text(text)
    return root, sum(1 for ln in lines if ":" in ln and not ln.startswith("NIC"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    if args is None:
        return 2
    from collectors.node.ethtool import EthtoolCollector
    from collectors.node.roce import RoceCollector
    from collectors.registry import Context, Paths

    shared = shared_fixtures()
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-ethtool-roce-"))
    try:
        sysfs = roce_tree(tmp / "sys", shared)
        eth_root, n_stats = ethtool_tree(tmp / "ethtool")
        base_us, _ = node_exporter_us([], args.scrapes)
        print(f"node_exporter with no collector: {base_us:.0f} us CPU per scrape (subtracted below)")
        print(f"{'case':<46} {'ours us':>8} {'series':>6} {'n_e us':>8} {'series':>6} {'ratio':>6}")

        c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
        roce_us, n_roce = ours_us(c, args.scrapes)
        c.close()
        ne_ib, n_ne_ib = node_exporter_us(["--collector.infiniband", f"--path.sysfs={sysfs}"], args.scrapes)
        ne_ib -= base_us
        print(f"{f'roce, {NICS} mlx5 (n_e: its infiniband)':<46} {roce_us:>8.0f} {n_roce:>6} {ne_ib:>8.0f} "
              f"{n_ne_ib:>6} {roce_us / ne_ib:>6.2f}")

        c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(eth_root)}))
        eth_us, n_eth = ours_us(c, args.scrapes)
        c.close()
        print(f"{f'ethtool, {NICS} NICs x {n_stats} stats, fixture text':<46} {eth_us:>8.0f} {n_eth:>6} "
              f"{'n/a':>8} {'':>6} {'':>6}  (node_exporter reads no text)")

        c = EthtoolCollector(Context())
        ours_live, n_live = ours_us(c, args.scrapes)
        answered = [d for d in sorted(os.listdir("/sys/class/net")) if d not in c.unsupported()]
        c.close()
        ne_eth, n_ne_eth = node_exporter_us(["--collector.ethtool"], args.scrapes, prefixes=("node_ethtool_",))
        ne_eth -= base_us
        print(f"{f'ethtool ioctl, this host ({len(answered)} with stats)':<46} {ours_live:>8.0f} {n_live:>6} "
              f"{ne_eth:>8.0f} {n_ne_eth:>6} {ours_live / ne_eth:>6.2f}")

        total = roce_us + eth_us
        print(f"\nethtool (fixtures) + roce, {NICS} NICs: {total:.0f} us CPU per scrape; goal <= {GOAL_US:.0f} us: "
              + ("MET" if total <= GOAL_US else "NOT MET"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
