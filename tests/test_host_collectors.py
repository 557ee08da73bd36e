"""Host collectors (cpu, meminfo, diskstats, netdev) on real fixture trees, against node_exporter's own output.

Fixtures are read in place from ../shared/fixtures: node_exporter's proc/ and sys.ttar (whose
golden e2e-output.txt is the peer's answer for the same files) and prometheus/procfs' tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.agent import build_parser
from collectors.exposition import encode, iter_samples
from collectors.node.cpu import CpuCollector, parse_stat
from collectors.node.devices import DeviceFilter
from collectors.node.diskstats import DEFAULT_EXCLUDE, DiskstatsCollector, parse_diskstats
from collectors.node.memory import MeminfoCollector, parse_meminfo, snake_case
from collectors.node.netdev import NetdevCollector, link_speed_bytes, parse_net_dev, parse_snmp
from collectors.node.pressure import PressureCollector
from collectors.registry import Context, NoData, Paths
from collectors.scrape import Scraper

HOST_COLLECTORS = (CpuCollector, MeminfoCollector, DiskstatsCollector, NetdevCollector)


# ---------------------------------------------------------------- helpers

def samples(families) -> dict[tuple[str, tuple], float]:
    """Families -> {(name, sorted label pairs): value}, through a real exposition round trip."""
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(encode(families))}


def by_label(got: dict, name: str, label: str) -> dict[str, float]:
    return {dict(lbls)[label]: v for (n, lbls), v in got.items() if n == name}


def scalar(got: dict, name: str) -> float:
    return got[(name, ())]


@pytest.fixture(scope="module")
def ne_proc(fixtures_dir) -> Path:
    return fixtures_dir / "node_exporter" / "proc"


@pytest.fixture(scope="module")
def ne_ctx(ne_proc, node_exporter_sys) -> Context:
    return Context(paths=Paths(str(ne_proc), str(node_exporter_sys)))


@pytest.fixture(scope="module")
def peer(fixtures_dir) -> dict:
    """node_exporter's golden /metrics for the same fixture tree."""
    text = (fixtures_dir / "node_exporter" / "e2e-output.txt").read_text()
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


def collect(cls, ctx) -> dict:
    return samples(cls(ctx).collect())


# ---------------------------------------------------------------- cpu

def test_parse_stat_fixture(ne_proc):
    stat = parse_stat((ne_proc / "stat").read_text())
    assert [c.cpu for c in stat.cpus] == [str(i) for i in range(8)]
    assert stat.cpus[0].ticks == (44490, 19, 21045, 1087069, 220, 1, 3410, 0, 2, 1)
    assert (stat.ctxt, stat.btime, stat.processes, stat.procs_running, stat.procs_blocked, stat.intr) == (
        38014093, 1418183276, 26442, 2, 0, 8885917)


def test_parse_stat_old_kernel_and_garbage():
    # 2.6.11-era lines have no steal/guest columns; a non-numeric column drops only itself
    stat = parse_stat("cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\ncpu1 1 x 3\ncpu1 9 9 9\nctxt oops\n")
    assert [c.ticks for c in stat.cpus] == [(1, 2, 3, 4, 5, 6, 7), (1, None, 3)]
    assert stat.ctxt is None


def test_cpu_agrees_with_node_exporter(ne_ctx, peer):
    got = collect(CpuCollector, ne_ctx)
    for ours, theirs in (("gangwatch_cpu_seconds_total", "node_cpu_seconds_total"),
                         ("gangwatch_cpu_guest_seconds_total", "node_cpu_guest_seconds_total")):
        mine = {lbls: v for (n, lbls), v in got.items() if n == ours}
        peers = {lbls: v for (n, lbls), v in peer.items() if n == theirs}
        assert len(mine) == len(peers) > 0
        assert mine == peers
    for ours, theirs in (("gangwatch_node_context_switches_total", "node_context_switches_total"),
                         ("gangwatch_node_boot_time_seconds", "node_boot_time_seconds"),
                         ("gangwatch_node_forks_total", "node_forks_total"),
                         ("gangwatch_node_procs_running", "node_procs_running"),
                         ("gangwatch_node_procs_blocked", "node_procs_blocked")):
        assert scalar(got, ours) == scalar(peer, theirs), ours
    assert scalar(got, "gangwatch_node_interrupts_total") == 8885917


def test_cpu_seconds_mode_set(ne_ctx):
    got = collect(CpuCollector, ne_ctx)
    modes = {dict(l)["mode"] for (n, l) in got if n == "gangwatch_cpu_seconds_total"}
    assert modes == {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}


# ---------------------------------------------------------------- meminfo

@pytest.mark.parametrize("field,name", [
    ("MemTotal", "mem_total"), ("Active(anon)", "active_anon"), ("Inactive(file)", "inactive_file"),
    ("SReclaimable", "slab_reclaimable"), ("SUnreclaim", "slab_unreclaimable"), ("Committed_AS", "committed_as"),
    ("NFS_Unstable", "nfs_unstable"), ("DirectMap4k", "direct_map_4k"), ("DirectMap2M", "direct_map_2m"),
    ("DirectMap1G", "direct_map_1g"), ("Hugepagesize", "huge_page_size"), ("AnonHugePages", "anon_huge_pages"),
    ("ShmemPmdMapped", "shmem_pmd_mapped"), ("VmallocUsed", "vmalloc_used"), ("HardwareCorrupted", "hardware_corrupted"),
    ("KReclaimable", "kernel_reclaimable"), ("SecPageTables", "secondary_page_tables"), ("CmaFree", "cma_free"),
])
def test_meminfo_names(field, name):
    assert snake_case(field) == name


def test_meminfo_agrees_with_node_exporter(ne_ctx, peer):
    got = collect(MeminfoCollector, ne_ctx)
    compared = 0
    for (name, lbls), value in peer.items():
        if not name.startswith("node_memory_") or lbls or name.startswith("node_memory_numa_"):
            continue
        field = name[len("node_memory_"):]
        if field.endswith("_bytes"):
            field = field[:-len("_bytes")]
            # node_exporter turns "Active(anon)" into "Active_anon"; both come from the same line
            field = {"Active_anon": "Active(anon)", "Inactive_anon": "Inactive(anon)",
                     "Active_file": "Active(file)", "Inactive_file": "Inactive(file)"}.get(field, field)
            assert got[(f"gangwatch_memory_{snake_case(field)}_bytes", ())] == value, name
        else:
            state = {"HugePages_Total": "total", "HugePages_Free": "free",
                     "HugePages_Rsvd": "reserved", "HugePages_Surp": "surplus"}[field]
            assert got[("gangwatch_memory_huge_pages", (("state", state),))] == value, name
        compared += 1
    assert compared == len(parse_meminfo((Path(ne_ctx.paths.procfs) / "meminfo").read_text())) == 42


CURRENT_MEMINFO = Path(__file__).parent / "data" / "meminfo" / "current-kernel"


def test_meminfo_of_current_kernels_passes_promtool(tmp_path):
    """Every field a 6.x kernel prints (the node_exporter fixtures predate SecPageTables, Zswap,
    Unaccepted, ...) gets its own series, and promtool's lint accepts every name."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; tests/run-all.sh installs it)")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(CURRENT_MEMINFO.read_text())
    families = MeminfoCollector(Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys")))).collect()
    text = encode(families)
    fields = parse_meminfo(CURRENT_MEMINFO.read_text())
    assert len(list(iter_samples(text))) == len(fields) == 69
    assert ("gangwatch_memory_secondary_page_tables_bytes", ()) in samples(families)
    res = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()


# ---------------------------------------------------------------- diskstats

def test_parse_diskstats_field_counts(procfs_tree):
    disks = {d.device: d for d in parse_diskstats((procfs_tree / "proc" / "diskstats").read_text())}
    assert len(disks["sda"].counters) == 11  # 14-field line
    assert len(disks["sdb"].counters) == 15  # 18-field line: discards
    assert len(disks["sdc"].counters) == 17  # 20-field line: discards and flushes
    assert disks["sdc"].counters[15:] == (127, 182)


def test_parse_diskstats_skips_short_and_garbled_lines():
    text = ("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 1 sda1 1 2 3 4\n8 2 sdb 1 2 x 4 5 6 7 8 9 10 11\n"
            "8 0 sda 9 9 9 9 9 9 9 9 9 9 9\n")
    assert [(d.device, d.counters[0]) for d in parse_diskstats(text)] == [("sda", 1)]


def test_diskstats_agrees_with_node_exporter(ne_ctx, peer):
    got = collect(DiskstatsCollector, ne_ctx)
    ours_devices = set(by_label(got, "gangwatch_disk_reads_completed_total", "device"))
    peer_devices = set(by_label(peer, "node_disk_reads_completed_total", "device"))
    # node_exporter's default pattern lets eMMC partitions through; ours leaves them out
    assert ours_devices == peer_devices - {"mmcblk0p1", "mmcblk0p2"}
    pairs = [  # ours, node_exporter's, factor that turns theirs into ours
        ("reads_completed_total", "reads_completed_total", 1), ("reads_merged_total", "reads_merged_total", 1),
        ("read_bytes_total", "read_bytes_total", 1), ("read_time_seconds_total", "read_time_seconds_total", 1),
        ("writes_completed_total", "writes_completed_total", 1), ("writes_merged_total", "writes_merged_total", 1),
        ("written_bytes_total", "written_bytes_total", 1), ("write_time_seconds_total", "write_time_seconds_total", 1),
        ("io_now", "io_now", 1), ("io_time_seconds_total", "io_time_seconds_total", 1),
        ("io_time_weighted_seconds_total", "io_time_weighted_seconds_total", 1),
        ("discards_completed_total", "discards_completed_total", 1),
        ("discards_merged_total", "discards_merged_total", 1),
        ("discarded_bytes_total", "discarded_sectors_total", 512),
        ("discard_time_seconds_total", "discard_time_seconds_total", 1),
        ("flush_requests_total", "flush_requests_total", 1),
        ("flush_requests_time_seconds_total", "flush_requests_time_seconds_total", 1),
    ]
    compared = 0
    for ours, theirs, factor in pairs:
        mine = by_label(got, f"gangwatch_disk_{ours}", "device")
        peers = {d: v * factor for d, v in by_label(peer, f"node_disk_{theirs}", "device").items()
                 if d in ours_devices}
        assert set(mine) == set(peers), ours
        for dev, value in peers.items():
            # node_exporter scales milliseconds with * 0.001, we divide by 1000: last-bit differences
            assert mine[dev] == pytest.approx(value, rel=1e-12, abs=0), (ours, dev)
            compared += 1
    assert compared == 11 * 13 + 4 * 2 + 2


def test_diskstats_device_filters(ne_ctx):
    def devices(**options):
        ctx = Context(paths=ne_ctx.paths, options=options)
        return set(by_label(collect(DiskstatsCollector, ctx), "gangwatch_disk_io_now", "device"))

    default = devices()
    assert "sda" in default and not {"sda1", "nvme0n1p1", "ram0", "loop0", "fd0", "mmcblk0p1"} & default
    # an include pattern alone drops the default exclusion, as node_exporter does
    assert devices(collector_diskstats_device_include=r"^sda\d*$") == {"sda", "sda1", "sda2", "sda3", "sda4"}
    assert devices(collector_diskstats_device_include=r"^sda", collector_diskstats_device_exclude=r"\d$") == {"sda"}
    assert devices(collector_diskstats_device_exclude=r"^dm-") >= {"sda1", "ram0"}
    assert devices(collector_diskstats_device_include=r"^nothing$") == set()  # filtered out is not garbage


def test_device_filter_flags_are_validated():
    parser = build_parser()
    args = parser.parse_args(["--collector.diskstats.device-include", "^nvme", "--collector.netdev.device-exclude", "^veth"])
    assert args.collector_diskstats_device_include == "^nvme"
    assert args.collector_netdev_device_exclude == "^veth"
    with pytest.raises(SystemExit):
        parser.parse_args(["--collector.diskstats.device-exclude", "(unclosed"])


def test_device_filter_remembers_verdicts():
    f = DeviceFilter(exclude=DEFAULT_EXCLUDE)
    assert f("sda") == '{device="sda"}' and f("sda1") is None
    assert f("sda") is f("sda")  # rendered once, reused


# ---------------------------------------------------------------- netdev

def test_parse_net_dev(procfs_tree):
    recs = {r.device: r.counters for r in parse_net_dev((procfs_tree / "proc" / "net" / "dev").read_text())}
    assert list(recs) == ["vethf345468", "lo", "docker0", "eth0"]
    assert recs["eth0"][:2] == (874354587, 1036395) and recs["eth0"][8:10] == (563352563, 732147)
    assert all(len(c) == 16 for c in recs.values())
    # old kernels glue the first counter to the name
    assert parse_net_dev("eth0:1 2 3\n")[0] == ("eth0", (1, 2, 3))


def test_netdev_on_procfs_tree(procfs_tree):
    ctx = Context(paths=Paths(str(procfs_tree / "proc"), str(procfs_tree / "sys")))
    got = collect(NetdevCollector, ctx)
    assert by_label(got, "gangwatch_network_receive_bytes_total", "device")["eth0"] == 874354587
    assert by_label(got, "gangwatch_network_transmit_packets_total", "device")["lo"] == 1566805
    assert by_label(got, "gangwatch_network_speed_bytes", "device")["eth0"] == 1000 * 125000


def test_netdev_agrees_with_node_exporter(ne_ctx, peer):
    got = collect(NetdevCollector, ne_ctx)
    # node_exporter's fixture proc has no net/dev (it reads netlink), so only sysfs and snmp compare
    compared = 0
    for ours, theirs in (("speed_bytes", "speed_bytes"), ("mtu_bytes", "mtu_bytes"),
                         ("carrier_changes_total", "carrier_changes_total"), ("up", "up")):
        peers = by_label(peer, f"node_network_{theirs}", "device")
        mine = by_label(got, f"gangwatch_network_{ours}", "device")
        assert peers, theirs
        for dev, value in peers.items():
            assert mine[dev] == value, (ours, dev)
            compared += 1
    # bond0 reports speed -1: unknown, left out by both
    assert "bond0" not in by_label(got, "gangwatch_network_speed_bytes", "device")
    assert compared == 7
    tcp = {"RetransSegs": "retransmitted_segments_total", "InSegs": "received_segments_total",
           "OutSegs": "sent_segments_total", "InErrs": "receive_errors_total", "OutRsts": "sent_resets_total",
           "ActiveOpens": "active_opens_total", "PassiveOpens": "passive_opens_total",
           "CurrEstab": "established_connections"}
    for field, ours in tcp.items():
        assert scalar(got, f"gangwatch_network_tcp_{ours}") == scalar(peer, f"node_netstat_Tcp_{field}"), field


def test_netdev_device_filter(ne_ctx):
    ctx = Context(paths=ne_ctx.paths, options={"collector_netdev_device_exclude": "^(dmz|int)$"})
    assert set(by_label(collect(NetdevCollector, ctx), "gangwatch_network_up", "device")) == {"bond0", "eth0"}


@pytest.mark.parametrize("text,expected", [("1000\n", 125000000), ("-1\n", None), ("", None), (None, None),
                                           ("garbage", None), ("2.5", None), ("100000", 12500000000)])
def test_link_speed(text, expected):
    assert link_speed_bytes(text) == expected


def test_parse_snmp(ne_proc):
    snmp = parse_snmp((ne_proc / "net" / "snmp").read_text())
    assert snmp["Tcp"]["RetransSegs"] == 227 and snmp["Tcp"]["MaxConn"] == -1
    assert snmp["Udp"]["InDatagrams"] == 88542
    assert list(parse_snmp((ne_proc / "net" / "snmp").read_text(), frozenset(("Tcp",)))) == ["Tcp"]


# ---------------------------------------------------------------- pressure (the peer check the issue asks for)

def test_pressure_agrees_with_node_exporter(ne_ctx, peer):
    got = collect(PressureCollector, ne_ctx)
    compared = 0
    for (name, lbls), value in peer.items():
        if not name.startswith("node_pressure_") or name.startswith("node_pressure_irq_"):
            continue  # irq pressure is not collected by gangwatch
        _, _, resource, kind, *_ = name.split("_")
        ours = got[(f"gangwatch_pressure_{kind}_seconds_total", (("resource", resource),))]
        assert ours == pytest.approx(value, rel=1e-12), name
        compared += 1
    assert compared == 5


# ---------------------------------------------------------------- bad input

BAD_FILES = {
    "empty": "",
    "truncated": None,  # the fixture file cut in the middle of a line
    "garbage": "\x00\xff<html>not a proc file</html>\n:::\n|||\n",
    "non-numeric": None,  # the fixture file with its digits replaced by letters
}


NET_DEV_LINE = "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"  # node_exporter's proc has no net/dev


def _bad_tree(root: Path, ne_proc: Path, kind: str) -> Path:
    proc = root / "proc"
    for rel in ("stat", "meminfo", "diskstats", "net/dev", "net/snmp"):
        src = ne_proc / rel
        original = src.read_text() if src.exists() else NET_DEV_LINE
        content = {"empty": "", "garbage": BAD_FILES["garbage"],
                   "truncated": original[: len(original) // 2 + 7],
                   "non-numeric": original.translate(str.maketrans("0123456789", "abcdefghij"))}[kind]
        (proc / rel).parent.mkdir(parents=True, exist_ok=True)
        (proc / rel).write_text(content)
    return proc


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_files_degrade(tmp_path, ne_proc, kind):
    proc = _bad_tree(tmp_path, ne_proc, kind)
    ctx = Context(paths=Paths(str(proc), str(tmp_path / "no-sys")))
    scraper = Scraper([cls(ctx) for cls in HOST_COLLECTORS], timeout=0.9, cache_ttl=0)
    try:
        t0 = time.monotonic()
        scrape = scraper.scrape()
        assert time.monotonic() - t0 < 1.0
    finally:
        scraper.close()
    got = {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(scrape.text)}  # still valid exposition
    ok = {c: got[("gangwatch_scrape_collector_success", (("collector", c),))] for c in ("cpu", "meminfo", "diskstats", "netdev")}
    names = {n for n, _ in got}
    if kind == "truncated":
        # the first half of each file still counts: partial data, success
        assert ok == {"cpu": 1, "meminfo": 1, "diskstats": 1, "netdev": 1}
        assert {"gangwatch_cpu_seconds_total", "gangwatch_memory_mem_total_bytes",
                "gangwatch_disk_reads_completed_total"} <= names
    elif kind == "empty":
        # no block devices or interfaces is possible; no CPU or memory is not
        assert ok == {"cpu": 0, "meminfo": 0, "diskstats": 1, "netdev": 1}
    else:
        assert ok == {"cpu": 0, "meminfo": 0, "diskstats": 0, "netdev": 0}


def test_missing_folders_fail_soft(tmp_path):
    ctx = Context(paths=Paths(str(tmp_path / "no-proc"), str(tmp_path / "no-sys")))
    for cls in HOST_COLLECTORS:
        with pytest.raises(OSError):
            cls(ctx).collect()
    scraper = Scraper([cls(ctx) for cls in HOST_COLLECTORS], timeout=0.9, cache_ttl=0)
    try:
        t0 = time.monotonic()
        text = scraper.scrape().text
        assert time.monotonic() - t0 < 1.0
    finally:
        scraper.close()
    success = {l["collector"]: v for n, l, v in iter_samples(text) if n == "gangwatch_scrape_collector_success"}
    assert success == {"cpu": 0, "meminfo": 0, "diskstats": 0, "netdev": 0}


def test_one_bad_interface_attribute_drops_one_series(tmp_path, node_exporter_sys):
    sys_dir = tmp_path / "sys" / "class" / "net"
    for iface, mtu in (("good0", "9000\n"), ("bad0", "lots\n")):
        (sys_dir / iface).mkdir(parents=True)
        (sys_dir / iface / "mtu").write_text(mtu)
        (sys_dir / iface / "operstate").write_text("down\n")
    ctx = Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys")))
    got = collect(NetdevCollector, ctx)
    assert by_label(got, "gangwatch_network_mtu_bytes", "device") == {"good0": 9000}
    assert by_label(got, "gangwatch_network_up", "device") == {"good0": 0, "bad0": 0}


# ---------------------------------------------------------------- property tests: no exception for any input

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400)
PROCISH = st.lists(st.one_of(
    st.from_regex(r"\A *[a-z0-9_()]{0,12}:? *( ?-?[0-9]{1,20}){0,22}( kB)?\Z"),
    st.from_regex(r"\A *[0-9]{1,4} +[0-9]{1,4} [a-z0-9-]{1,8}( [0-9x]{1,6}){0,21}\Z"),
    TEXT), max_size=12).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(PROCISH)
def test_parsers_never_raise(text):
    parse_stat(text)
    parse_meminfo(text)
    parse_diskstats(text)
    parse_net_dev(text)
    parse_snmp(text)
    parse_snmp(text, frozenset(("Tcp",)))
    link_speed_bytes(text)
    snake_case(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=PROCISH)
def test_collectors_emit_valid_exposition_for_any_file(tmp_path, text):
    proc = tmp_path / "proc"
    for rel in ("stat", "meminfo", "diskstats", "net/dev", "net/snmp"):
        (proc / rel).parent.mkdir(parents=True, exist_ok=True)
        (proc / rel).write_text(text)
    ctx = Context(paths=Paths(str(proc), str(tmp_path / "no-sys")))
    for cls in HOST_COLLECTORS:
        try:
            fams = list(cls(ctx).collect())
        except (OSError, ValueError, NoData):
            continue  # a declared failure, reported by the scrape wrapper
        names = [s[0] for s in iter_samples(encode(fams))]  # parses back: valid text format
        series = [(n, tuple(sorted(l.items()))) for n, l, _ in iter_samples(encode(fams))]
        assert len(series) == len(set(series)) == len(names)  # no duplicate series


# ---------------------------------------------------------------- docs/agent.md's metric table stays true

def _expand(token: str) -> list[str]:
    """`a_{b,c}_d` -> [a_b_d, a_c_d] (one level, repeated)."""
    head, sep, rest = token.partition("{")
    if not sep:
        return [token]
    inner, _, tail = rest.partition("}")
    return [n for alt in inner.split(",") for n in _expand(head + alt + tail)]


def test_docs_list_every_host_metric(ne_ctx, procfs_tree):
    page = (Path(__file__).resolve().parent.parent / "docs" / "agent.md").read_text()
    section = page.split("## Host collectors", 1)[1].split("\n## ", 1)[0]

    # a trailing {...} is a label set, an inner one alternatives: `a_{b,c}_total{device}`
    tokens = [re.sub(r"\{[^{}]*(\}|$)$", "", t) for t in re.findall(r"`(gangwatch_[a-z0-9_{},]+)", section)]
    documented = {n for tok in tokens for n in _expand(tok)}
    emitted = set()
    for ctx in (ne_ctx, Context(paths=Paths(str(procfs_tree / "proc"), str(procfs_tree / "sys")))):
        for cls in HOST_COLLECTORS:
            emitted |= {n for (n, _) in collect(cls, ctx)}
    # meminfo's per-field names follow the documented rule; the rest must be listed by name
    missing = {n for n in emitted - documented
               if not (n.startswith("gangwatch_memory_") and n.endswith("_bytes"))}
    assert not missing


def test_link_speed_and_mtu_refresh_on_link_events(tmp_path):
    iface = tmp_path / "sys" / "class" / "net" / "ib0"
    iface.mkdir(parents=True)
    for attr, value in (("operstate", "up"), ("carrier_changes", "4"), ("speed", "100000"), ("mtu", "2044")):
        (iface / attr).write_text(value + "\n")
    now = [1000.0]
    ctx = Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys")), clock=lambda: now[0])
    c = NetdevCollector(ctx)

    def link():
        got = samples(c.collect())
        return (by_label(got, "gangwatch_network_speed_bytes", "device").get("ib0"),
                by_label(got, "gangwatch_network_mtu_bytes", "device")["ib0"],
                by_label(got, "gangwatch_network_up", "device")["ib0"])

    assert link() == (12500000000, 2044, 1)
    (iface / "mtu").write_text("4092\n")
    (iface / "speed").write_text("-1\n")
    assert link() == (12500000000, 2044, 1)  # no link event: cached
    (iface / "operstate").write_text("down\n")
    (iface / "carrier_changes").write_text("5\n")
    assert link() == (None, 4092, 0)  # the flap re-reads both
    (iface / "mtu").write_text("65520\n")
    now[0] += 301
    assert link()[1] == 65520  # and so does age
