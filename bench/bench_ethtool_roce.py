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

Bad input (goal: every scrape <= 1 s): a real `gangwatch agent` with ethtool, roce and beegfs (its
beegfs-ctl never answers) and the probe enabled, its probe API flooded by --flooders threads (probe
servers and clients, RDMA without a device, a peer without an agent, out-of-range durations, wrong
tokens) while /metrics is scraped, beside node_exporter's infiniband collector on the same tree
scraped in the same loop.

Also the CPU of a scrape that meets the collectors' periodic re-read (every 60 s: roce lists its
devices' folders, ethtool reads every NIC's stat names again), which back-to-back scrapes never
do, and the sum averaged over a real scrape interval (--interval, 15 s); and ours as the best of
--quiet-rounds rounds of 3 scrapes, steadier than rounds of 300 on a shared machine.

Usage: python bench/bench_ethtool_roce.py [--scrapes 300] [--repeat 3] [--flooders 8] [--bad-scrapes 100]
                                          [--interval 15] [--quiet-rounds 1500] [--skip-cpu] [--skip-bad-input]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_ib_fs import NODE_EXPORTER, best_of, load_average, node_exporter_us, ours_us, parse_args, shared_fixtures  # noqa: E402

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


def cpu_part(args, sysfs: Path, eth_root: Path, n_stats: int) -> None:
    from collectors.node.ethtool import EthtoolCollector
    from collectors.node.roce import RoceCollector
    from collectors.registry import Context, Paths

    base_us, _ = best_of(args.repeat, node_exporter_us, [], args.scrapes)
    print(f"node_exporter with no collector: {base_us:.0f} us CPU per scrape (subtracted below)")
    print(f"{'case':<46} {'ours us':>8} {'series':>6} {'n_e us':>8} {'series':>6} {'ratio':>6}")

    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    roce_us, n_roce = best_of(args.repeat, ours_us, c, args.scrapes)
    c.close()
    ne_ib, n_ne_ib = best_of(args.repeat, node_exporter_us, ["--collector.infiniband", f"--path.sysfs={sysfs}"],
                             args.scrapes)
    ne_ib -= base_us
    print(f"{f'roce, {NICS} mlx5 (n_e: its infiniband)':<46} {roce_us:>8.0f} {n_roce:>6} {ne_ib:>8.0f} "
          f"{n_ne_ib:>6} {roce_us / ne_ib:>6.2f}")

    c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(eth_root)}))
    eth_us, n_eth = best_of(args.repeat, ours_us, c, args.scrapes)
    c.close()
    print(f"{f'ethtool, {NICS} NICs x {n_stats} stats, fixture text':<46} {eth_us:>8.0f} {n_eth:>6} "
          f"{'n/a':>8} {'':>6} {'':>6}  (node_exporter reads no text)")

    c = EthtoolCollector(Context())
    ours_live, n_live = best_of(args.repeat, ours_us, c, args.scrapes)
    answered = [d for d in sorted(os.listdir("/sys/class/net")) if d not in c.unsupported()]
    c.close()
    ne_eth, n_ne_eth = best_of(args.repeat, node_exporter_us, ["--collector.ethtool"], args.scrapes,
                               prefixes=("node_ethtool_",))
    ne_eth -= base_us
    print(f"{f'ethtool ioctl, this host ({len(answered)} with stats)':<46} {ours_live:>8.0f} {n_live:>6} "
          f"{ne_eth:>8.0f} {n_ne_eth:>6} {ours_live / ne_eth:>6.2f}")

    total = roce_us + eth_us
    print(f"\nethtool (fixtures) + roce, {NICS} NICs: {total:.0f} us CPU per scrape; goal <= {GOAL_US:.0f} us: "
          + ("MET" if total <= GOAL_US else "NOT MET"))

    # On a shared machine a round of 300 scrapes rarely runs undisturbed: the best of many rounds
    # of 3 catches the quiet moments, a steadier figure of the collectors' own cost (ours only:
    # node_exporter's is measured per process, over HTTP, in clock ticks)
    if args.quiet_rounds:
        quiet = []
        for c in (RoceCollector(Context(paths=Paths(sysfs=str(sysfs)))),
                  EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(eth_root)}))):
            quiet.append(best_of(args.quiet_rounds, ours_us, c, 3)[0])
            c.close()
        print(f"best of {args.quiet_rounds} rounds of 3 scrapes: roce {quiet[0]:.0f} us + ethtool {quiet[1]:.0f} us "
              f"= {sum(quiet):.0f} us")

    # Back-to-back scrapes never meet the collectors' periodic re-read (every RESCAN_SECONDS: roce
    # lists its devices' folders again, ethtool reads every NIC's stat names again); at a real scrape
    # interval one scrape in RESCAN_SECONDS / interval pays it. Measured with the period set to 0.
    import collectors.node.ethtool as ethtool_mod
    import collectors.node.roce as roce_mod

    rescan = {}
    for mod, make in ((roce_mod, lambda: RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))),
                      (ethtool_mod, lambda: EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(eth_root)})))):
        saved, mod.RESCAN_SECONDS = mod.RESCAN_SECONDS, -1.0
        c = make()
        try:
            rescan[mod.__name__.rsplit(".", 1)[1]] = best_of(args.repeat, ours_us, c, args.scrapes)[0], saved
        finally:
            mod.RESCAN_SECONDS = saved
            c.close()
    (roce_re, period), (eth_re, _) = rescan["roce"], rescan["ethtool"]
    avg = total + ((roce_re - roce_us) + (eth_re - eth_us)) * args.interval / period
    print(f"a scrape with the periodic re-read (every {period:.0f} s): roce {roce_re:.0f} us, ethtool {eth_re:.0f} us; "
          f"averaged over a {args.interval:.0f} s scrape interval: {avg:.0f} us per scrape")


# ---------------------------------------------------------------------------------------------
# Bad input: the scrape's wall time while the probe API is flooded and beegfs-ctl hangs

def _get(url: str, token: str | None = None, timeout: float = 20.0) -> tuple[int, float]:
    """(status, wall seconds) of one GET, a new connection each time (as Prometheus' scrapes after an idle)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        exc.read()
        status = exc.code
    return status, time.monotonic() - t0


def bad_input_part(args, sysfs: Path, eth_root: Path, tmp: Path) -> bool:
    """A real agent with ethtool (8 NICs), roce (8 mlx5), beegfs (a beegfs-ctl that never answers) and
    the probe enabled; `--flooders` threads ask for probes without pause (iperf3 servers, clients to
    a peer that is not there, RDMA on a host without a device, wrong tokens) while /metrics is
    scraped `--bad-scrapes` times. Peer, scraped in the same loop: node_exporter's infiniband
    collector on the same sysfs tree. Goal: every scrape of ours <= 1 s."""
    from tests.support.agent_process import free_port

    from collectors.registry import load_builtin_collectors

    token = "bench-probe-token"
    (tmp / "token").write_text(token + "\n")
    (tmp / "token").chmod(0o600)
    hang = tmp / "beegfs-ctl"
    pids = tmp / "beegfs-ctl.pids"
    # beegfs-ctl stuck on a dead server; each run notes its pid: the agent kills the runs at their
    # timeout, but those in flight when it is stopped outlive it (under systemd its cgroup goes)
    hang.write_text(f"#!{sys.executable}\nimport os, time\nwith open({str(pids)!r}, 'a') as f:\n"
                    f"    f.write(f'{{os.getpid()}}\\n')\ntime.sleep(3600)\n")
    hang.chmod(0o755)
    keep = ("ethtool", "roce", "beegfs")
    port = free_port()
    cmd = [sys.executable, "-m", "dashboard.cli", "agent", f"--web.listen-address=127.0.0.1:{port}", "--log-level=error",
           *[f"--no-collector.{n}" for n in load_builtin_collectors() if n not in keep],
           *[f"--collector.{n}" for n in keep], f"--collector.ethtool.fixtures={eth_root}", f"--path.sysfs={sysfs}",
           f"--path.procfs={REPO / 'tests' / 'data' / 'beegfs' / 'proc'}", f"--collector.beegfs.ctl-path={hang}",
           "--scrape.cache-ttl=0", "--probe.enable", f"--probe.token-file={tmp / 'token'}",
           f"--probe.port={free_port()}", "--probe.max-bitrate=1G"]
    agent = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    ne_port = free_port()
    ne = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.infiniband",
                           f"--path.sysfs={sysfs}", f"--web.listen-address=127.0.0.1:{ne_port}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ours, theirs = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{ne_port}"
    stop = threading.Event()
    answers: dict[int, int] = {}
    lock = threading.Lock()
    try:
        for url in (ours + "/metrics", theirs + "/metrics"):
            deadline = time.monotonic() + 30
            while True:
                try:
                    _get(url, timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        dead = free_port()  # nobody listens there: a client probe toward a node without an agent
        asks = [f"/api/v1/probe/serve?tool=iperf3&seconds=10", f"/api/v1/probe/serve?tool=ib_write_bw&seconds=10",
                f"/api/v1/probe/run?tool=iperf3&seconds=10&peer=127.0.0.1&port={dead}",
                f"/api/v1/probe/run?tool=iperf3&seconds=11&peer=127.0.0.1&port={dead}"]

        def flood(k: int) -> None:
            i = k
            while not stop.is_set():
                path = asks[i % len(asks)]
                try:
                    status, _ = _get(ours + path, token=None if i % 5 == 4 else token)
                except OSError:
                    status = -1
                with lock:
                    answers[status] = answers.get(status, 0) + 1
                i += 1

        threads = [threading.Thread(target=flood, args=(k,), daemon=True) for k in range(args.flooders)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the flood under way, beegfs-ctl's first runs stuck
        walls: dict[str, list[float]] = {"ours": [], "node_exporter": []}
        for _ in range(args.bad_scrapes):
            for name, url in (("ours", ours), ("node_exporter", theirs)):
                status, wall = _get(url + "/metrics")
                if status != 200:
                    print(f"  {name} /metrics answered {status}")
                walls[name].append(wall)
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(30)
        print(f"\nbad input: {args.flooders} threads flooding the probe API (answers: "
              + ", ".join(f"{n} x {s}" for s, n in sorted(answers.items())) + "), beegfs-ctl hanging; "
              f"{args.bad_scrapes} scrapes each, {load_average()}")
        print(f"{'scrape wall time':<46} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for name, w in walls.items():
            w = sorted(w)
            label = "ours (ethtool + roce + beegfs + probe)" if name == "ours" else "node_exporter (infiniband, same sysfs)"
            print(f"{label:<46} {1e3 * w[len(w) // 2]:>8.1f} {1e3 * w[min(len(w) - 1, int(0.99 * len(w)))]:>8.1f} "
                  f"{1e3 * w[-1]:>8.1f}")
        met = max(walls["ours"]) <= 1.0
        print("scrape <= 1 s under bad input: " + ("MET" if met else "NOT MET"))
        return met
    finally:
        stop.set()
        for proc in (agent, ne):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for pid in (pids.read_text().split() if pids.exists() else []):
            try:  # only if that pid is still our script (those killed at their timeout are gone, the pid maybe reused)
                if str(hang).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, extra=_extra_args)
    if args is None:
        return 2
    shared = shared_fixtures()
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-ethtool-roce-"))
    try:
        sysfs = roce_tree(tmp / "sys", shared)
        eth_root, n_stats = ethtool_tree(tmp / "ethtool")
        print(f"start: {load_average()}; best of {args.repeat} x {args.scrapes} scrapes")
        if not args.skip_cpu:
            cpu_part(args, sysfs, eth_root, n_stats)
            print(f"end of the CPU part: {load_average()}")
        if not args.skip_bad_input:
            bad_input_part(args, sysfs, eth_root, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _extra_args(ap) -> None:
    ap.add_argument("--flooders", type=int, default=8, help="threads flooding the probe API in the bad-input part")
    ap.add_argument("--bad-scrapes", type=int, default=100, help="scrapes of each exporter during the flood")
    ap.add_argument("--interval", type=float, default=15.0,
                    help="scrape interval (s) over which the collectors' periodic re-read is averaged")
    ap.add_argument("--quiet-rounds", type=int, default=1500,
                    help="also the best of this many rounds of 3 scrapes of ours (0: not measured)")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-bad-input", action="store_true")


if __name__ == "__main__":
    sys.exit(main())
