"""ethtool and RoCE collectors: the normaliser on node_exporter's real `ethtool -S` capture and on our
mlx5-style text, the ioctl reader on this machine's real interfaces, RoCE hw_counters on procfs' real
mlx5 tree, node rollups, and bad input (no stats, unknown files, garbage, vanished devices)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from collectors.exposition import encode, iter_samples
from collectors.node import ethtool as et
from collectors.node.ethtool import EthtoolCollector
from collectors.node.roce import RoceCollector
from collectors.registry import Context, NoData, Paths
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "ethtool"


def series(text: str, name: str) -> dict[tuple, float]:
    return {tuple(sorted(l.items())): v for n, l, v in iter_samples(text) if n == name}


def ethtool_text(root: Path, **options) -> str:
    c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(root), **options}))
    try:
        return encode(c.collect())
    finally:
        c.close()


@pytest.fixture(scope="module")
def ne_ethtool(fixtures_dir) -> Path:
    return fixtures_dir / "node_exporter" / "ethtool"


def test_node_exporter_capture_normalised_with_its_names(ne_ethtool):
    text = ethtool_text(ne_ethtool, collector_ethtool_metrics_include=".")
    eth0 = (("device", "eth0"),)
    # node_exporter's names for the same e1000e capture, with our prefix and _total
    assert series(text, "gangwatch_ethtool_received_packets_total") == {eth0: 1260062}
    assert series(text, "gangwatch_ethtool_transmitted_packets_total") == {eth0: 961500}
    assert series(text, "gangwatch_ethtool_port_received_dropped_total") == {eth0: 12028}
    assert series(text, "gangwatch_ethtool_received_missed_total") == {eth0: 401}
    # "duplicate metric" and "duplicate_metric" normalise alike: the first one wins, nothing crashes
    assert series(text, "gangwatch_ethtool_duplicate_metric_total") == {eth0: 1}
    # bond0 answers "ERROR: 1": a driver without stats is unsupported, not an error and not zeros
    assert series(text, "gangwatch_ethtool_stats_supported") == {(("device", "bond0"),): 0, eth0: 1}
    assert not any(("device", "bond0") in k for n, l, v in iter_samples(text) for k in [tuple(l.items())]
                   if n != "gangwatch_ethtool_stats_supported")


def test_device_and_metric_filters(ne_ethtool):
    text = ethtool_text(ne_ethtool, collector_ethtool_device_exclude="^bond", collector_ethtool_metrics_include="^rx_")
    assert "gangwatch_ethtool_received_errors_total" in text
    names = {n for n, _, _ in iter_samples(text)}
    assert "gangwatch_ethtool_received_packets_total" in names
    assert "gangwatch_ethtool_transmitted_packets_total" not in names
    assert series(text, "gangwatch_ethtool_stats_supported") == {(("device", "eth0"),): 1}
    with pytest.raises(NoData):
        EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(ne_ethtool),
                                          "collector_ethtool_device_include": "^nothing$"})).collect()


def test_default_include_keeps_what_proc_net_dev_lacks(ne_ethtool):
    names = {n for n, _, _ in iter_samples(ethtool_text(ne_ethtool))}
    assert {"gangwatch_ethtool_port_received_dropped_total", "gangwatch_ethtool_received_missed_total",
            "gangwatch_ethtool_received_errors_total", "gangwatch_ethtool_align_errors_total"} <= names
    # traffic counters are the netdev collector's (/proc/net/dev): not repeated here by default
    assert "gangwatch_ethtool_received_packets_total" not in names
    mlx5 = {n for n, _, _ in iter_samples(ethtool_text(DATA))}
    assert {"gangwatch_ethtool_prio_received_pause_total", "gangwatch_ethtool_received_out_of_buffer_total",
            "gangwatch_ethtool_queue_transmitted_dropped_total", "gangwatch_ethtool_node_received_pause_frames_total",
            "gangwatch_ethtool_link_down_events_phy_total"} <= mlx5
    assert "gangwatch_ethtool_queue_received_bytes_total" not in mlx5
    assert "gangwatch_ethtool_prio_received_bytes_total" not in mlx5  # traffic per class: `.` asks for it


def test_mlx5_queues_summed_priorities_and_rollups():
    text = ethtool_text(DATA, collector_ethtool_metrics_include=".")
    d0 = ("device", "mlx5_0")
    # per-queue counters summed per device, never a series per queue unless asked for
    assert series(text, "gangwatch_ethtool_queue_received_packets_total")[(d0,)] == 1_000_000
    assert series(text, "gangwatch_ethtool_queue_transmitted_dropped_total") == {(d0,): 3}
    assert series(text, "gangwatch_ethtool_queue_ch_events_total") == {(d0,): 100}
    assert not any("queue" in dict(l) for _, l, _ in iter_samples(text))
    # the device-wide rx_packets stays apart from the queues' sum
    assert series(text, "gangwatch_ethtool_received_packets_total")[(d0,)] == 1_000_000
    # PFC per priority, durations in seconds (mlx5 counts microseconds)
    assert series(text, "gangwatch_ethtool_prio_received_pause_total")[(d0, ("priority", "3"))] == 120
    assert series(text, "gangwatch_ethtool_prio_received_pause_duration_seconds_total")[(d0, ("priority", "3"))] == 2.5
    assert series(text, "gangwatch_ethtool_received_out_of_buffer_total") == {(d0,): 17}
    assert series(text, "gangwatch_ethtool_link_down_events_phy_total")[(d0,)] == 2
    # node rollups: pause = the larger of global 10 and PFC 0 + 120 on mlx5_0, of 0 and 7 on mlx5_1
    assert series(text, "gangwatch_ethtool_node_received_pause_frames_total") == {(): 127}
    assert series(text, "gangwatch_ethtool_node_link_down_events_total") == {(): 2}
    assert series(text, "gangwatch_ethtool_node_link_errors_total") == {(): 4}
    # the PFC storm guard: mlx5_0 past the minor watermark twice, once past the critical one
    assert series(text, "gangwatch_ethtool_transmitted_pause_storm_warning_events_total") == {(d0,): 2, (("device", "mlx5_1"),): 0}
    assert series(text, "gangwatch_ethtool_node_pause_storm_events_total") == {(): 3}
    # a u64 at its maximum is exported as read; a negative value and a garbage line are skipped
    d1 = ("device", "mlx5_1")
    assert series(text, "gangwatch_ethtool_received_packets_total")[(d1,)] == 2 ** 64 - 1
    assert (d1,) not in series(text, "gangwatch_ethtool_transmitted_packets_total")


def test_pfc_of_broadcom_and_intel_nics_in_the_pause_rollup(tmp_path):
    """bnxt counts PFC frames apart from global pause (rx_pfc_frames), ice per priority with a `.nic`
    suffix (rx_priority_<p>_xoff.nic, global link_xoff_rx.nic), i40e with a `port.` prefix: each XOFF
    is a pause the switch sent, in the rollup under the default include, as mlx5's rx_prio<p>_pause is;
    a NIC's global pause and PFC frames are not added up, as some firmware counts PFC in both."""
    drivers = {
        "bnxt0": {"rx_pause_frames": 5, "rx_pfc_frames": 40, "rx_total_frames": 10**6, "tx_pfc_frames": 9},
        "ice0": {"link_xon_rx.nic": 2, "link_xoff_rx.nic": 3, "rx_priority_3_xon.nic": 10,
                 "rx_priority_3_xoff.nic": 30, "rx_priority_0_xoff.nic": 0, "tx_priority_3_xoff.nic": 8},
        "i40e0": {"port.link_xoff_rx": 1, "port.link_xon_rx": 0, "port.tx_bytes": 10**9},
        # two mlx5 ports of one stat list (scraped as one group): firmware that counts the PFC frames in
        # the global counter too, and a port running global pause
        "mlx5_a": {"rx_pause_ctrl_phy": 120, "rx_prio0_pause": 0, "rx_prio3_pause": 120},
        "mlx5_b": {"rx_pause_ctrl_phy": 50, "rx_prio0_pause": 0, "rx_prio3_pause": 0},
    }
    for dev, stats in drivers.items():
        (tmp_path / dev).mkdir()
        (tmp_path / dev / "statistics").write_text(
            "NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in stats.items()))
    text = ethtool_text(tmp_path)
    # each NIC's global pause or PFC count, the larger (a NIC runs one of them; a sum counted mlx5_a's
    # frames twice): 40 (bnxt), 30 + 0 (ice: an XON frame is a resume, not a pause), 1 (i40e), 120, 50
    assert series(text, "gangwatch_ethtool_node_received_pause_frames_total") == {(): 241}
    assert series(text, "gangwatch_ethtool_prio_received_xoff_total") == {
        (("device", "ice0"), ("priority", "3")): 30, (("device", "ice0"), ("priority", "0")): 0}
    assert series(text, "gangwatch_ethtool_received_pfc_frames_total") == {(("device", "bnxt0"),): 40}
    assert "gangwatch_ethtool_received_total_frames_total" not in text  # traffic: `.` asks for it


def test_rollups_of_rdma_nics_apart_from_the_management_nic(tmp_path):
    """On a node with RDMA devices the rollups add up the NICs that carry them (`nics="rdma"`: a RoCE
    NIC's port, as /sys/class/infiniband/<dev>/device/net lists it) apart from the others
    (`nics="other"`): the management NIC's pauses and link-downs are not the fabric's. A node
    without RDMA keeps one unlabelled series of all its NICs."""
    stats = {"ens1f0np0": {"rx_pause_ctrl_phy": 0, "rx_prio3_pause": 100, "link_down_events_phy": 1},
             "ens2f0np0": {"rx_pause_ctrl_phy": 0, "rx_prio3_pause": 50, "link_down_events_phy": 0},
             "eno1": {"rx_pause_frames": 7, "link_down_events": 3}}  # the onboard (bnxt) management NIC
    root = tmp_path / "eth"
    for dev, st in stats.items():
        (root / dev).mkdir(parents=True)
        (root / dev / "statistics").write_text("NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in st.items()))
    sysfs = tmp_path / "sys"
    for ib, dev in (("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0")):
        (sysfs / "class/infiniband" / ib / "device/net" / dev).mkdir(parents=True)
    (sysfs / "class/infiniband/mlx5_bad").mkdir()  # no device/net: skipped

    def rollups(sys_root):
        c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(root)}, paths=Paths(sysfs=str(sys_root))))
        try:
            text = encode(c.collect())
        finally:
            c.close()
        return {name: series(text, f"gangwatch_ethtool_node_{name}_total")
                for name in ("received_pause_frames", "link_down_events")}

    assert rollups(sysfs) == {"received_pause_frames": {(("nics", "rdma"),): 150, (("nics", "other"),): 7},
                              "link_down_events": {(("nics", "rdma"),): 1, (("nics", "other"),): 3}}
    assert rollups(tmp_path / "nothing") == {"received_pause_frames": {(): 157}, "link_down_events": {(): 4}}
    # RoCE LAG: one RDMA device on the bond's first port; the bond's other port carries it too
    lag = tmp_path / "lag"
    (lag / "class/infiniband/mlx5_bond_0/device/net/ens1f0np0").mkdir(parents=True)
    (lag / "class/net/bond0/bonding").mkdir(parents=True)
    for dev in ("ens1f0np0", "ens2f0np0"):
        (lag / "class/net" / dev).mkdir()
        (lag / "class/net" / dev / "master").symlink_to("../bond0")
        (lag / "class/net/bond0" / f"lower_{dev}").symlink_to(f"../{dev}")
    assert rollups(lag)["received_pause_frames"] == {(("nics", "rdma"),): 150, (("nics", "other"),): 7}
    # a bridge's ports (a VM's tap beside the RDMA NIC) are not the bond's
    (lag / "class/net/br0").mkdir()
    (lag / "class/net/br0/lower_vnet0").symlink_to("../vnet0")
    (lag / "class/net/ens1f0np0/master").unlink()
    (lag / "class/net/ens1f0np0/master").symlink_to("../br0")
    assert et.rdma_netdevs(str(lag / "class/infiniband"), str(lag / "class/net")) == {"ens1f0np0"}
    # the diagnosis reads the RDMA NICs' rollup, or the unlabelled one, never the others'
    from dashboard.sources.schema import BY_METRIC, matches
    (m,) = BY_METRIC["gangwatch_ethtool_node_received_pause_frames_total"]
    assert [matches(m, lbl) for lbl in ({"nics": "rdma"}, {}, {"nics": "other"})] == [True, True, False]


def test_per_queue_flag_gives_bounded_queue_labels():
    text = ethtool_text(DATA, collector_ethtool_per_queue=True, collector_ethtool_metrics_include=".")
    got = series(text, "gangwatch_ethtool_queue_received_packets_total")
    assert got[(("device", "mlx5_0"), ("queue", "0"))] == 400000
    assert got[(("device", "mlx5_0"), ("queue", "1"))] == 600000


@pytest.mark.parametrize("stat,kind,base,index", [
    ("rx3_packets", "queue", "rx_packets", "3"),
    ("rx_queue_12_bytes", "queue", "rx_bytes", "12"),
    ("tx-7.packets", "queue", "tx_packets", "7"),
    ("queue_2_tx_cnt", "queue", "tx_cnt", "2"),
    ("rx_prio5_pause", "prio", "rx_pause", "5"),
    ("rx_prio9_pause", "device", "rx_prio9_pause", ""),  # not an 802.1p priority: a plain stat
    ("rx_priority_3_xoff.nic", "prio", "rx_xoff", "3"),  # ice
    ("link_xoff_rx.nic", "device", "link_xoff_rx.nic", ""),
    ("rx_discards_phy", "device", "rx_discards_phy", ""),
])
def test_classify(stat, kind, base, index):
    assert et.classify(stat) == et.Classified(kind, base, index)


@pytest.mark.parametrize("text", ["", "no stats available\n", "ERROR: 1", "NIC statistics:\n", "\x00\xff garbage"])
def test_text_without_stats_is_unsupported(text):
    with pytest.raises(et.Unsupported):
        et.parse_stats_text(text)


def test_plan_selectors_sum_strided_queues():
    names = [f"rx{q}_{s}" for q in range(64) for s in ("packets", "bytes", "drops")] + ["rx_prio3_pause_duration"]
    plan = et.build_plan("eth9", names, include=None)
    k = plan.metrics.index("gangwatch_ethtool_queue_received_drops_total")
    assert plan.selects[k] == slice(2, 192, 3)
    lines = et.apply_plan(plan, list(range(len(names))), {})
    assert lines[k] == f'gangwatch_ethtool_queue_received_drops_total{{device="eth9"}} {sum(range(2, 192, 3))}'
    assert 'gangwatch_ethtool_prio_received_pause_duration_seconds_total{device="eth9",priority="3"} 0.000192' in lines
    # fewer values than names (the driver shrank between the two calls): no crash, no partial lie
    assert et.apply_plan(plan, [1, 2], {}) is None


# ---- the ioctl reader on this machine's real interfaces

def real_interfaces() -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").iterdir())


def test_ioctl_reader_on_real_interfaces():
    reader = et.IoctlReader()
    answered, unsupported = {}, {}
    try:
        for dev in real_interfaces():
            try:
                names = reader.names(dev)
                values = reader.values(dev, tuple(names))
            except et.Unsupported as exc:
                unsupported[dev] = str(exc)
                continue
            assert len(values) == len(names) and all(v >= 0 for v in values)
            assert all(re.fullmatch(r"[\x20-\x7e]+", n) for n in names)
            answered[dev] = names
        # loopback has no driver stats on any kernel: a clear "unsupported", not an exception
        assert "lo" in unsupported and "no statistics" in unsupported["lo"]
        if not answered:
            pytest.skip("not applicable here: no interface of this machine has driver stats")
        with pytest.raises(OSError):
            reader.names("gwnosuchdev0")
        with pytest.raises(et.Unsupported):
            reader.names("x" * 20)  # longer than IFNAMSIZ: refused before the kernel sees it
    finally:
        reader.close()
    c = EthtoolCollector(Context(options={}))
    text = encode(c.collect())
    c.close()
    sup = series(text, "gangwatch_ethtool_stats_supported")
    assert sup[(("device", "lo"),)] == 0
    assert {k[0][1] for k, v in sup.items() if v == 1} == set(answered)


def test_ethtool_is_off_by_default():
    assert EthtoolCollector.default_enabled is False


# ---- RoCE hw_counters

def roce_text(sysfs: Path) -> str:
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    try:
        return encode(c.collect())
    finally:
        c.close()


def test_roce_counters_on_procfs_mlx5_tree(procfs_tree):
    text = roce_text(procfs_tree / "sys")
    port = (("device", "mlx5_0"), ("port", "1"))
    # values of procfs' real mlx5_0 hw_counters
    assert series(text, "gangwatch_roce_port_adaptive_retransmissions_total") == {port: 99}
    assert series(text, "gangwatch_roce_port_local_ack_timeouts_total") == {port: 131}
    assert series(text, "gangwatch_roce_port_slow_restart_cnps_total") == {port: 131}
    assert series(text, "gangwatch_roce_port_out_of_sequence_packets_total") == {port: 1}
    assert series(text, "gangwatch_roce_node_sequence_errors_total") == {(): 2}  # out_of_sequence 1 + packet_seq_err 1
    assert series(text, "gangwatch_roce_node_retransmissions_total") == {(): 99}
    # this mlx5 does not have the ECN/CNP files: absent, not 0 (unknown is not zero)
    assert not series(text, "gangwatch_roce_node_cnp_handled_total")
    # mlx4 and hfi1 have no hw_counters of these names: no series for them
    assert {dict(l)["device"] for n, l, _ in iter_samples(text) if "device" in l} == {"mlx5_0"}


def make_roce_tree(root: Path, nics: int, source: Path | None = None) -> Path:
    """`nics` mlx5 devices with the issue's congestion counters; procfs' real files copied in when given."""
    for i in range(nics):
        hw = root / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        if source is not None:
            for f in source.iterdir():
                shutil.copyfile(f, hw / f.name)
        for name, value in (("np_ecn_marked_roce_packets", 1000 + i), ("np_cnp_sent", 500 + i),
                            ("rp_cnp_handled", 200 + i), ("rp_cnp_ignored", 0)):
            (hw / name).write_text(f"{value}\n")
    return root


def test_roce_rollups_and_bad_files(tmp_path):
    sysfs = make_roce_tree(tmp_path, 2)
    hw0 = sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters"
    (hw0 / "np_cnp_sent").write_text("")  # truncated read
    (hw0 / "rp_cnp_ignored").write_text("N/A (no PMA)\n")
    (hw0 / "some_future_counter").write_text("5\n")  # unknown file: left to the infiniband collector
    (hw0 / "rp_cnp_handled").write_text("4294967295\n")  # a 32-bit counter about to wrap: as read
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    text = encode(c.collect())
    assert series(text, "gangwatch_roce_node_ecn_marked_packets_total") == {(): 2001}
    assert series(text, "gangwatch_roce_node_cnp_sent_total") == {(): 501}  # mlx5_0's unreadable file left out
    assert series(text, "gangwatch_roce_node_cnp_handled_total") == {(): 4294967295 + 201}
    assert (("device", "mlx5_0"), ("port", "1")) not in series(text, "gangwatch_roce_port_cnp_ignored_total")
    assert "some_future_counter" not in text
    # the counter wrapped (reads low again): exported as read, Prometheus sees a reset
    (hw0 / "rp_cnp_handled").write_text("3\n")
    assert series(encode(c.collect()), "gangwatch_roce_port_cnp_handled_total")[(("device", "mlx5_0"), ("port", "1"))] == 3
    # a device that goes away (driver unload) costs only itself
    shutil.rmtree(sysfs / "class/infiniband/mlx5_1")
    assert series(encode(c.collect()), "gangwatch_roce_node_ecn_marked_packets_total") == {(): 1000}
    c.close()


def test_broadcom_counters_beside_mlx5_in_one_family_each(tmp_path):
    """bnxt_re (Linux 6.6 until its counters took mlx5's names) counts ECN marks, CNPs, out-of-sequence
    drops, sequence-error NAKs and timeout retransmissions under its own names: read into the mlx5
    counters' families (one TYPE each, both drivers' ports in it) and their node rollups; its other
    counters are left to the infiniband collector. A port with both names of one counter gives one series."""
    sysfs = make_roce_tree(tmp_path, 1)
    mlx = sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters"
    for name, value in (("out_of_sequence", 2), ("packet_seq_err", 1), ("local_ack_timeout_err", 4)):
        (mlx / name).write_text(f"{value}\n")
    mlx_counts = {name: int((mlx / name).read_text()) for name in ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")}
    hw = sysfs / "class/infiniband/bnxt_re0/ports/1/hw_counters"
    hw.mkdir(parents=True)
    for name, value in (("oos_drop_count", 7), ("seq_err_naks_rcvd", 3), ("to_retransmits", 11), ("rx_pkts", 10**9),
                        ("rx_ecn_marked_pkts", 50), ("tx_cnp_pkts", 20), ("rx_cnp_pkts", 30)):
        (hw / name).write_text(f"{value}\n")
    renamed = sysfs / "class/infiniband/bnxt_re1/ports/1/hw_counters"  # a kernel between the two namings
    renamed.mkdir(parents=True)
    for name, value in (("np_cnp_pkts", 5), ("rp_cnp_handled", 6), ("np_ecn_marked_roce_packets", 8), ("tx_cnp_pkts", 99)):
        (renamed / name).write_text(f"{value}\n")
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    text = encode(c.collect())
    c.close()
    bnxt, bnxt1 = (("device", "bnxt_re0"), ("port", "1")), (("device", "bnxt_re1"), ("port", "1"))
    for metric, value in (("out_of_sequence_packets", 7), ("packet_sequence_errors", 3), ("local_ack_timeouts", 11),
                          ("ecn_marked_packets", 50), ("cnp_sent", 20), ("cnp_handled", 30)):
        got = series(text, f"gangwatch_roce_port_{metric}_total")
        assert got[bnxt] == value and (("device", "mlx5_0"), ("port", "1")) in got, (metric, got)
        assert text.count(f"# TYPE gangwatch_roce_port_{metric}_total ") == 1
    assert series(text, "gangwatch_roce_node_sequence_errors_total") == {(): 7 + 3 + 2 + 1}
    assert series(text, "gangwatch_roce_node_local_ack_timeouts_total") == {(): 11 + 4}
    assert series(text, "gangwatch_roce_port_cnp_sent_total")[bnxt1] == 5
    assert text.count('gangwatch_roce_port_cnp_sent_total{device="bnxt_re1"') == 1
    assert series(text, "gangwatch_roce_node_cnp_sent_total") == {(): mlx_counts["np_cnp_sent"] + 20 + 5}
    assert series(text, "gangwatch_roce_node_cnp_handled_total") == {(): mlx_counts["rp_cnp_handled"] + 30 + 6}
    assert series(text, "gangwatch_roce_node_ecn_marked_packets_total") == {(): mlx_counts["np_ecn_marked_roce_packets"] + 50 + 8}
    assert "rx_pkts" not in text


def test_intel_irdma_ecn_and_cnps_in_the_mlx5_families(tmp_path):
    """Intel's irdma (an E810 in RoCEv2 mode) counts ECN marks and CNPs per port under the names of
    drivers/infiniband/hw/irdma/verbs.c (`RxECNMrkd`, `cnpSent`, `cnpHandled`, `cnpIgnored`): read
    into the families the diagnosis reads, and into the node rollups; its IP and UDP counters are
    left to the infiniband collector."""
    sysfs = make_roce_tree(tmp_path, 1)
    mlx = sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters"
    mlx_counts = {name: int((mlx / name).read_text()) for name in ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")}
    hw = sysfs / "class/infiniband/irdma0/ports/1/hw_counters"
    hw.mkdir(parents=True)
    for name, value in (("RxECNMrkd", 70), ("cnpSent", 21), ("cnpHandled", 33), ("cnpIgnored", 2), ("RxUDP", 10**9),
                        ("ip4InOctets", 10**12), ("lifespan", 10)):
        (hw / name).write_text(f"{value}\n")
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    text = encode(c.collect())
    c.close()
    irdma = (("device", "irdma0"), ("port", "1"))
    for metric, value in (("ecn_marked_packets", 70), ("cnp_sent", 21), ("cnp_handled", 33), ("cnp_ignored", 2)):
        assert series(text, f"gangwatch_roce_port_{metric}_total")[irdma] == value, metric
        assert text.count(f"# TYPE gangwatch_roce_port_{metric}_total ") == 1
    assert series(text, "gangwatch_roce_node_ecn_marked_packets_total") == {(): mlx_counts["np_ecn_marked_roce_packets"] + 70}
    assert series(text, "gangwatch_roce_node_cnp_sent_total") == {(): mlx_counts["np_cnp_sent"] + 21}
    assert series(text, "gangwatch_roce_node_cnp_handled_total") == {(): mlx_counts["rp_cnp_handled"] + 33}
    assert "RxUDP" not in text and "ip4InOctets" not in text


def test_roce_without_devices_is_quiet(tmp_path):
    with pytest.raises(NoData):
        RoceCollector(Context(paths=Paths(sysfs=str(tmp_path)))).collect()
    (tmp_path / "class/infiniband/mlx4_0/ports/1/counters").mkdir(parents=True)  # IB port, no hw_counters
    with pytest.raises(NoData):
        RoceCollector(Context(paths=Paths(sysfs=str(tmp_path)))).collect()


def test_changed_capture_is_parsed_again(tmp_path):
    dev = tmp_path / "eth7"
    dev.mkdir()
    (dev / "statistics").write_text("NIC statistics:\n     rx_discards_phy: 5\n")
    c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(tmp_path)}))
    assert series(encode(c.collect()), "gangwatch_ethtool_received_discards_phy_total") == {(("device", "eth7"),): 5}
    (dev / "statistics").write_text("NIC statistics:\n     rx_discards_phy: 9\n")
    assert series(encode(c.collect()), "gangwatch_ethtool_received_discards_phy_total") == {(("device", "eth7"),): 9}
    # the driver gained a stat (names changed): the plan is rebuilt, no stale or misaligned values
    (dev / "statistics").write_text("NIC statistics:\n     rx_out_of_buffer: 1\n     rx_discards_phy: 11\n")
    text = encode(c.collect())
    assert series(text, "gangwatch_ethtool_received_discards_phy_total") == {(("device", "eth7"),): 11}
    assert series(text, "gangwatch_ethtool_received_out_of_buffer_total") == {(("device", "eth7"),): 1}
    # same count, other names: re-planned, never misaligned
    (dev / "statistics").write_text("NIC statistics:\n     rx_crc_errors_phy: 2\n     rx_discards_phy: 12\n")
    text = encode(c.collect())
    assert series(text, "gangwatch_ethtool_received_discards_phy_total") == {(("device", "eth7"),): 12}
    assert "out_of_buffer" not in text
    # a device folder added: listed from the next scrape
    (tmp_path / "eth8").mkdir()
    (tmp_path / "eth8" / "statistics").write_text("NIC statistics:\n     rx_discards_phy: 1\n")
    assert (("device", "eth8"),) in series(encode(c.collect()), "gangwatch_ethtool_received_discards_phy_total")
    # the file turns to garbage: the device reports no stats, the scrape goes on
    (dev / "statistics").write_text("\x00\x01garbage")
    text = encode(c.collect())
    assert series(text, "gangwatch_ethtool_stats_supported")[(("device", "eth7"),)] == 0


def test_exposition_passes_promtool_lint(ne_ethtool, procfs_tree, tmp_path):
    from tests.support.golden import promtool_problems

    path = tmp_path / "out.prom"
    path.write_text(ethtool_text(f"{ne_ethtool},{DATA}", collector_ethtool_metrics_include=".",
                                 collector_ethtool_per_queue=True) + roce_text(procfs_tree / "sys"))
    problems = promtool_problems(path)
    if problems is None:
        pytest.skip("promtool not installed (Debian's prometheus package)")
    assert problems == ""


def test_odd_device_names_and_mixed_drivers_render_as_listed(tmp_path):
    """Samples are rendered through %-templates: a '%' or a non-UTF-8 byte in a device name must come
    out as the label value, and NICs of two drivers (two plan shapes) in one scrape each keep theirs."""
    odd = ["eth%d", "eth%s%%", "eth\udcff"]  # \udcff: the byte 0xff as os.listdir gives it
    root = tmp_path / "eth"
    for i, name in enumerate(odd + ["mlx5_a"]):
        (root / name).mkdir(parents=True)
        text = (DATA / "mlx5_0" / "statistics").read_text() if name == "mlx5_a" else \
            f"NIC statistics:\n     rx_discards_phy: {i + 1}\n     rx_prio3_pause_duration: 2500000\n"
        (root / name / "statistics").write_text(text, errors="surrogateescape")
    c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(root)}))
    fams = c.collect()
    c.close()
    lines = [line for f in fams for line in f.lines]
    for i, name in enumerate(odd):
        assert f'gangwatch_ethtool_received_discards_phy_total{{device="{name}"}} {i + 1}' in lines
        assert (f'gangwatch_ethtool_prio_received_pause_duration_seconds_total{{device="{name}",priority="3"}} 2.5'
                in lines)
    assert 'gangwatch_ethtool_received_discards_phy_total{device="mlx5_a"} 5' in lines
    assert 'gangwatch_ethtool_prio_received_pause_total{device="mlx5_a",priority="3"} 120' in lines

    sysfs = make_roce_tree(tmp_path / "sys", 1)
    (sysfs / "class/infiniband/mlx5_0").rename(sysfs / "class/infiniband/mlx5%d")
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    lines = [line for f in c.collect() for line in f.lines]
    c.close()
    assert 'gangwatch_roce_port_ecn_marked_packets_total{device="mlx5%d",port="1"} 1000' in lines


def test_periodic_reread_keeps_plans_whose_stat_list_is_unchanged(tmp_path, monkeypatch):
    """Every RESCAN_SECONDS the names are read again; an unchanged list keeps its plan (rebuilding 8
    mlx5 plans cost ~4 ms, every 60 s), a changed one is planned afresh, the output the same either way."""
    for name in ("eth0", "eth1"):
        (tmp_path / name).mkdir()
        shutil.copyfile(DATA / "mlx5_0" / "statistics", tmp_path / name / "statistics")
    c = EthtoolCollector(Context(options={"collector_ethtool_fixtures": str(tmp_path)}))
    first = encode(c.collect())
    plans = dict(c._plans)
    clock = [et.time.monotonic()]
    monkeypatch.setattr(et.time, "monotonic", lambda: clock[0])
    clock[0] += et.RESCAN_SECONDS + 1
    assert encode(c.collect()) == first
    assert c._plans["eth0"] is plans["eth0"] and c._plans["eth1"] is plans["eth1"]
    (tmp_path / "eth1" / "statistics").write_text("NIC statistics:\n     rx_discards_phy: 4\n")
    clock[0] += et.RESCAN_SECONDS + 1
    text = encode(c.collect())
    assert c._plans["eth0"] is plans["eth0"] and c._plans["eth1"] is not plans["eth1"]
    assert series(text, "gangwatch_ethtool_received_discards_phy_total") == {(("device", "eth0"),): 5,
                                                                            (("device", "eth1"),): 4}
    c.close()


def test_roce_periodic_rescan_keeps_open_files_and_finds_new_counters(tmp_path, monkeypatch):
    from collectors.node import roce

    sysfs = make_roce_tree(tmp_path, 2)
    hw1 = sysfs / "class/infiniband/mlx5_1/ports/1/hw_counters"
    (hw1 / "rp_cnp_ignored").unlink()
    c = RoceCollector(Context(paths=Paths(sysfs=str(sysfs))))
    first = encode(c.collect())
    layout, fds = c._layout, dict(c._open.fds)
    clock = [roce.time.monotonic()]
    monkeypatch.setattr(roce.time, "monotonic", lambda: clock[0])
    clock[0] += roce.RESCAN_SECONDS + 1
    assert encode(c.collect()) == first
    assert c._layout is layout and c._open.fds == fds  # nothing changed: nothing reopened
    (hw1 / "rp_cnp_ignored").write_text("7\n")  # a counter file that was not there
    (sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent").unlink()
    assert "mlx5_1" not in str(series(encode(c.collect()), "gangwatch_roce_port_cnp_ignored_total"))
    clock[0] += roce.RESCAN_SECONDS + 1
    text = encode(c.collect())
    assert series(text, "gangwatch_roce_port_cnp_ignored_total")[(("device", "mlx5_1"), ("port", "1"))] == 7
    assert series(text, "gangwatch_roce_node_cnp_sent_total") == {(): 501}  # mlx5_0's file gone, left out
    assert set(c._open.fds) == set(c._layout.paths)  # the removed file's descriptor closed
    c.close()


def test_plan_sums_unevenly_spaced_queues():
    """Queues whose stats are not evenly spaced in the driver's list are summed by their indices."""
    names = ["rx0_drops", "rx1_drops", "rx_discards_phy", "rx2_drops", "rx3_drops"]
    plan = et.build_plan("eth9", names, include=None)
    k = plan.metrics.index("gangwatch_ethtool_queue_received_drops_total")
    assert plan.selects[k] == (0, 1, 3, 4)
    lines = et.apply_plan(plan, [1, 2, 100, 4, 8], {})
    assert 'gangwatch_ethtool_queue_received_drops_total{device="eth9"} 15' in lines
    assert 'gangwatch_ethtool_received_discards_phy_total{device="eth9"} 100' in lines
