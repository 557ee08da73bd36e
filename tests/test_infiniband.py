"""InfiniBand collector: peer agreement with node_exporter, procfs' richer tree, saturation, degraded
links, bad input, and property tests for every parser."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.exposition import encode, iter_samples
from collectors.node import infiniband as ib
from collectors.node.infiniband import PREFIX, InfinibandCollector
from collectors.registry import Context, NoData, Paths
from tests.conftest import REPO, which
from tests.support.golden import check_golden

GOLDEN = REPO / "tests" / "golden" / "infiniband"

# node_exporter family -> ours; units already agree after our x4 of data words (both emit bytes).
PEER_NAMES = {
    "node_infiniband_port_data_received_bytes_total": "port_receive_data_bytes_total",
    "node_infiniband_port_data_transmitted_bytes_total": "port_transmit_data_bytes_total",
    "node_infiniband_port_packets_received_total": "port_receive_packets_total",
    "node_infiniband_port_packets_transmitted_total": "port_transmit_packets_total",
    "node_infiniband_unicast_packets_received_total": "port_unicast_receive_packets_total",
    "node_infiniband_unicast_packets_transmitted_total": "port_unicast_transmit_packets_total",
    "node_infiniband_multicast_packets_received_total": "port_multicast_receive_packets_total",
    "node_infiniband_multicast_packets_transmitted_total": "port_multicast_transmit_packets_total",
    "node_infiniband_port_transmit_wait_total": "port_transmit_wait_ticks_total",
    "node_infiniband_link_downed_total": "port_link_downed_total",
    "node_infiniband_link_error_recovery_total": "port_link_error_recoveries_total",
    "node_infiniband_port_constraint_errors_received_total": "port_receive_constraint_errors_total",
    "node_infiniband_port_constraint_errors_transmitted_total": "port_transmit_constraint_errors_total",
    "node_infiniband_port_discards_received_total": "port_receive_discards_total",
    "node_infiniband_port_discards_transmitted_total": "port_transmit_discards_total",
    "node_infiniband_port_errors_received_total": "port_receive_errors_total",
    "node_infiniband_legacy_data_received_bytes_total": "port_ext_receive_data_bytes_total",
    "node_infiniband_legacy_data_transmitted_bytes_total": "port_ext_transmit_data_bytes_total",
    "node_infiniband_legacy_packets_received_total": "port_ext_receive_packets_total",
    "node_infiniband_legacy_packets_transmitted_total": "port_ext_transmit_packets_total",
    "node_infiniband_legacy_unicast_packets_received_total": "port_ext_unicast_receive_packets_total",
    "node_infiniband_legacy_unicast_packets_transmitted_total": "port_ext_unicast_transmit_packets_total",
    "node_infiniband_legacy_multicast_packets_received_total": "port_ext_multicast_receive_packets_total",
    "node_infiniband_legacy_multicast_packets_transmitted_total": "port_ext_multicast_transmit_packets_total",
    "node_infiniband_physical_state_id": "port_physical_state_id",
    "node_infiniband_state_id": "port_state_id",
    "node_infiniband_rate_bytes_per_second": "port_rate_bytes_per_second",
    "node_infiniband_info": "info",
}


def collect(sysfs: Path, **options) -> str:
    c = InfinibandCollector(Context(paths=Paths(sysfs=str(sysfs)), options=options))
    try:
        return encode(c.collect())
    finally:
        c.close()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


def series(text: str, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in samples(text).items() if n == name}


@pytest.fixture(scope="module")
def peer(fixtures_dir) -> dict[str, dict[tuple, float]]:
    text = (fixtures_dir / "node_exporter" / "e2e-output.txt").read_text()
    ib_lines = [l for l in text.splitlines() if l.startswith(("node_infiniband_", "# HELP node_infiniband_",
                                                              "# TYPE node_infiniband_"))]
    out: dict[str, dict[tuple, float]] = {}
    for (name, labels), value in samples("\n".join(ib_lines) + "\n").items():
        out.setdefault(name, {})[labels] = value
    return out


def test_agrees_with_node_exporter_e2e_output(node_exporter_sys, peer):
    ours = collect(node_exporter_sys)
    unmapped = set(peer) - set(PEER_NAMES)
    assert not unmapped, f"node_exporter families without a counterpart here: {unmapped}"
    for peer_name, our_suffix in PEER_NAMES.items():
        mine = series(ours, "gangwatch_infiniband_" + our_suffix)
        theirs = peer[peer_name]
        if peer_name == "node_infiniband_info":
            # same devices and facts; we add node_guid
            assert {tuple(p for p in k if p[0] != "node_guid") for k in mine} == set(theirs)
            continue
        assert mine == theirs, f"{peer_name} vs gangwatch_infiniband_{our_suffix}"
    # the x4: port_rcv_data holds 4631917 words on mlx4_0 port 1
    assert series(ours, "gangwatch_infiniband_port_receive_data_bytes_total")[
        (("device", "mlx4_0"), ("port", "1"))] == 4631917 * 4


def test_node_exporter_tree_golden_and_flags(node_exporter_sys, update_golden):
    text = collect(node_exporter_sys)
    check_golden(GOLDEN / "node_exporter_sys.prom", text, update_golden)
    # iWARP's "N/A (no PMA)" counters are left out, its state and rate are not
    assert not any(("device", "i40iw0") in k for k in series(text, "gangwatch_infiniband_port_symbol_errors_total"))
    assert series(text, "gangwatch_infiniband_port_rate_bytes_per_second")[(("device", "i40iw0"), ("port", "1"))] == 1.25e9
    # port_xmit_wait = 4294967295 is a saturated 32-bit counter
    assert series(text, "gangwatch_infiniband_pma_saturated") == {
        (("counter", "port_xmit_wait"), ("device", "mlx4_0"), ("port", "1")): 1}
    # two link-up ports of the same model at the same rate: judged, not degraded; the lone i40iw0 is not judged
    assert series(text, "gangwatch_infiniband_port_degraded") == {
        (("device", "mlx4_0"), ("port", "1")): 0, (("device", "mlx4_0"), ("port", "2")): 0}


@pytest.mark.skipif(not which("promtool"), reason="promtool (Debian's prometheus) is not installed")
def test_output_passes_promtool_lint(node_exporter_sys, procfs_tree, tmp_path):
    make_port(tmp_path, "mlx5_0", "1", counters={"symbol_error": "65535"}, hw={"out_of_buffer": "1"})
    for sysfs in (node_exporter_sys, procfs_tree / "sys", tmp_path):
        done = subprocess.run(["promtool", "check", "metrics"], input=collect(sysfs).encode(), capture_output=True)
        assert done.returncode == 0, done.stderr.decode()


def test_procfs_tree(procfs_tree, update_golden):
    sysfs = procfs_tree / "sys"
    text = collect(sysfs, collector_infiniband_expected_rate="mlx5_*=100 Gb/sec")
    check_golden(GOLDEN / "procfs_sys.prom", text, update_golden)
    s = samples(text)
    hfi = (("device", "hfi1_0"), ("port", "1"))
    mlx5 = (("device", "mlx5_0"), ("port", "1"))
    assert s[("gangwatch_infiniband_port_transmit_data_bytes_total", hfi)] == 273558326543 * 4
    assert s[("gangwatch_infiniband_port_receive_data_bytes_total", mlx5)] == 18126345378 * 4
    assert s[("gangwatch_infiniband_port_rate_bytes_per_second", hfi)] == 100e9 / 8
    assert s[("gangwatch_infiniband_port_hw_stat_total", (("counter", "out_of_sequence"), *mlx5))] == 1
    assert s[("gangwatch_infiniband_port_hw_stat_total", (("counter", "rx_read_requests"), *mlx5))] == 175528982
    assert not any(n == "gangwatch_infiniband_port_hw_stat_total" and ("counter", "lifespan") in k
                   for n, k in s), "lifespan is a refresh period, not a counter"
    # phys_state reads "4: ACTIVE" in this fixture: kept as read, and the link still counts as up
    assert s[("gangwatch_infiniband_port_physical_state_id", mlx5)] == 4
    # 25 Gb/s (1X EDR) against the operator's 100 Gb/s: degraded; the flag is the basis
    assert s[("gangwatch_infiniband_port_degraded", mlx5)] == 1
    assert s[("gangwatch_infiniband_port_expected_rate_bytes_per_second", (("basis", "flag"), *mlx5))] == 12.5e9
    assert s[("gangwatch_infiniband_port_info", (("device", "mlx5_0"), ("lid", ""), ("link_layer", "InfiniBand"),
                                                  ("port", "1"), ("speed", "EDR"), ("width", "1X")))] == 1
    assert ("gangwatch_infiniband_port_degraded", hfi) not in s  # alone, no flag for it: unknown


# ---------------------------------------------------------------------------------------------
# Synthetic trees for the cases the fixtures lack (files as the kernel writes them)


def make_port(root: Path, device: str, port: str, *, rate="400 Gb/sec (4X NDR)", state="4: ACTIVE",
              phys="5: LinkUp", link_layer="InfiniBand", hca="MT4129", counters=None, hw=None) -> Path:
    ddir = root / "class" / "infiniband" / device
    pdir = ddir / "ports" / port
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    for name, value in (("hca_type", hca), ("fw_ver", "28.39.1002"), ("board_id", "MT_0000000838")):
        if value is not None:
            (ddir / name).write_text(value + "\n")
    for name, value in (("rate", rate), ("state", state), ("phys_state", phys), ("link_layer", link_layer),
                        ("lid", "0x1a")):
        if value is not None:
            (pdir / name).write_text(value + "\n")
    for name, value in (counters or {"port_xmit_data": "10"}).items():
        (pdir / "counters" / name).write_text(value)
    if hw is not None:
        (pdir / "hw_counters").mkdir(exist_ok=True)
        for name, value in hw.items():
            (pdir / "hw_counters" / name).write_text(value)
    return pdir


def test_saturation_uses_each_counters_iba_width(tmp_path):
    make_port(tmp_path, "mlx5_0", "1", counters={
        "symbol_error": "65535\n", "port_rcv_errors": "65534\n", "link_downed": "255\n",
        "local_link_integrity_errors": "15\n", "port_xmit_data": "4294967295\n",
        "port_rcv_data": "4294967296\n", "unicast_xmit_packets": "4294967295\n"})
    got = {dict(k)["counter"] for k in series(collect(tmp_path), "gangwatch_infiniband_pma_saturated")}
    # port_rcv_data went past 2^32-1: a 64-bit counter; unicast packets only exist as 64-bit counters
    assert got == {"symbol_error", "link_downed", "local_link_integrity_errors", "port_xmit_data"}


def test_degraded_against_peers_of_the_same_model(tmp_path):
    for i in range(3):
        make_port(tmp_path, f"mlx5_{i}", "1")
    make_port(tmp_path, "mlx5_3", "1", rate="200 Gb/sec (2X NDR)")  # lost two lanes
    make_port(tmp_path, "mlx5_4", "1", rate="10 Gb/sec (4X)", state="1: DOWN", phys="3: Disabled")
    make_port(tmp_path, "mlx5_5", "1", rate="100 Gb/sec (4X EDR)", link_layer="Ethernet")  # alone in its group
    text = collect(tmp_path)
    degraded = {dict(k)["device"]: v for k, v in series(text, "gangwatch_infiniband_port_degraded").items()}
    assert degraded == {"mlx5_0": 0, "mlx5_1": 0, "mlx5_2": 0, "mlx5_3": 1}
    expected = series(text, "gangwatch_infiniband_port_expected_rate_bytes_per_second")
    assert expected[(("basis", "peers"), ("device", "mlx5_3"), ("port", "1"))] == 400e9 / 8


def test_expected_rate_flag_overrides_peers(tmp_path):
    for i in range(2):
        make_port(tmp_path, f"mlx5_{i}", "1", rate="200 Gb/sec (4X HDR)")  # all alike: peers see nothing
    make_port(tmp_path, "mlx5_9", "1", rate="100 Gb/sec (2X HDR)")
    assert set(series(collect(tmp_path), "gangwatch_infiniband_port_degraded").values()) == {0, 1}
    text = collect(tmp_path, collector_infiniband_expected_rate="mlx5_9=100, 400 Gb/sec")
    degraded = {dict(k)["device"]: v for k, v in series(text, "gangwatch_infiniband_port_degraded").items()}
    assert degraded == {"mlx5_0": 1, "mlx5_1": 1, "mlx5_9": 0}


def test_bad_input_degrades_per_field(tmp_path):
    make_port(tmp_path, "mlx5_0", "1", counters={
        "port_xmit_data": "", "port_rcv_data": "12\x00garbage", "symbol_error": "-1", "link_downed": "N/A (no PMA)",
        "port_xmit_wait": "99999999999999999999999", "port_rcv_errors": "0x10", "VL15_dropped": "7"},
        hw={"out_of_buffer": "abc", "np_cnp_sent": "5\n", "lifespan": "12"},
        rate="fast", state="", phys="garbage")
    (tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_packets").mkdir()  # EISDIR on read
    # a device without ports and a port without counters or any attribute file
    (tmp_path / "class/infiniband/broken0").mkdir()
    (tmp_path / "class/infiniband/mlx5_1/ports/1").mkdir(parents=True)
    (tmp_path / "class/infiniband/mlx5_1/ports/notaport").write_text("x")
    text = collect(tmp_path)
    s = samples(text)
    port = (("device", "mlx5_0"), ("port", "1"))
    assert s[("gangwatch_infiniband_port_vl15_dropped_total", port)] == 7
    assert s[("gangwatch_infiniband_port_transmit_wait_ticks_total", port)] == 99999999999999999999999
    assert s[("gangwatch_infiniband_port_hw_stat_total", (("counter", "np_cnp_sent"), *port))] == 5
    names = {n for n, _ in s}
    for absent in ("port_transmit_data_bytes_total", "port_receive_data_bytes_total", "port_symbol_errors_total",
                   "port_link_downed_total", "port_receive_errors_total", "port_transmit_packets_total",
                   "port_rate_bytes_per_second", "port_state_id", "port_physical_state_id", "port_degraded"):
        assert "gangwatch_infiniband_" + absent not in names, absent
    assert {dict(k)["device"] for n, k in s if n == "gangwatch_infiniband_info"} == {"broken0", "mlx5_0", "mlx5_1"}


def test_counters_are_fresh_and_devices_that_go_away_are_dropped(tmp_path):
    pdir = make_port(tmp_path, "mlx5_0", "1", counters={"port_xmit_data": "10\n"})
    make_port(tmp_path, "mlx5_1", "1", counters={"port_xmit_data": "20\n"})
    c = InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path))))
    name = "gangwatch_infiniband_port_transmit_data_bytes_total"
    try:
        assert series(encode(c.collect()), name) == {(("device", "mlx5_0"), ("port", "1")): 40,
                                                     (("device", "mlx5_1"), ("port", "1")): 80}
        (pdir / "counters" / "port_xmit_data").write_text("11\n")  # files stay open: the new value must show
        assert series(encode(c.collect()), name)[(("device", "mlx5_0"), ("port", "1"))] == 44
        import shutil
        shutil.rmtree(tmp_path / "class/infiniband/mlx5_1")  # driver unload / hot unplug
        assert set(series(encode(c.collect()), name)) == {(("device", "mlx5_0"), ("port", "1"))}
    finally:
        c.close()
    assert not c._files.fds


ROLLUPS = {
    "node_transmit_data_bytes_total": "port_transmit_data_bytes_total",
    "node_receive_data_bytes_total": "port_receive_data_bytes_total",
    "node_transmit_wait_ticks_total": "port_transmit_wait_ticks_total",
    "node_link_downed_total": "port_link_downed_total",
    "node_symbol_errors_total": "port_symbol_errors_total",
}


@pytest.mark.parametrize("tree", ["node_exporter", "procfs"])
def test_node_rollups_are_the_sums_of_the_ports(tree, node_exporter_sys, procfs_tree):
    text = collect(node_exporter_sys if tree == "node_exporter" else procfs_tree / "sys")
    for rollup, per_port in ROLLUPS.items():
        ports = series(text, "gangwatch_infiniband_" + per_port)
        node = series(text, "gangwatch_infiniband_" + rollup)
        if ports:
            assert node == {(): sum(ports.values())}, rollup
        else:  # node_exporter's mlx4 has no symbol_error file: unknown, not 0
            assert node == {}, rollup
    if tree == "node_exporter":
        # mlx4_0 port 1 (4631917 words) + port 2 (0); i40iw0 reads "N/A (no PMA)" and is not in the sum
        assert series(text, "gangwatch_infiniband_node_receive_data_bytes_total")[()] == 4631917 * 4
    else:
        # hfi1_0 + mlx4_0 ports 1 and 2 + mlx5_0: all four ports
        assert len(series(text, "gangwatch_infiniband_port_transmit_data_bytes_total")) == 4
        assert series(text, "gangwatch_infiniband_node_transmit_data_bytes_total")[()] > 273558326543 * 4


def test_node_rollups_leave_a_dgxs_roce_storage_nics_out(tmp_path):
    """A DGX's storage NICs are RDMA ports in Ethernet mode beside its InfiniBand HCAs, on other
    switches: the node's rollups (what the rules sum per leaf switch and job) are its InfiniBand
    ports'. A node with Ethernet ports only (RoCE) sums them all; its per-port series are all kept."""
    ib, eth = {"port_xmit_data": "100\n", "port_xmit_wait": "7\n"}, {"port_xmit_data": "1000\n", "port_xmit_wait": "0\n"}
    for k in range(2):
        make_port(tmp_path / "dgx", f"mlx5_{k}", "1", counters=ib)
        make_port(tmp_path / "dgx", f"mlx5_{k + 2}", "1", link_layer="Ethernet", counters=eth)
        make_port(tmp_path / "roce", f"mlx5_{k}", "1", link_layer="Ethernet", counters=eth)
    dgx, roce = samples(collect(tmp_path / "dgx")), samples(collect(tmp_path / "roce"))
    assert dgx[("gangwatch_infiniband_node_transmit_data_bytes_total", ())] == 2 * 100 * 4
    assert dgx[("gangwatch_infiniband_node_transmit_wait_ticks_total", ())] == 2 * 7
    assert sum(v for (name, _), v in dgx.items() if name == "gangwatch_infiniband_port_transmit_data_bytes_total") == \
        2 * (100 + 1000) * 4
    assert roce[("gangwatch_infiniband_node_transmit_data_bytes_total", ())] == 2 * 1000 * 4


def test_node_rollups_left_out_when_no_port_reports(tmp_path):
    make_port(tmp_path, "irdma0", "1", counters={"port_xmit_data": "N/A (no PMA)\n", "symbol_error": "3\n"})
    make_port(tmp_path, "irdma1", "1", counters={"symbol_error": "4\n"})
    s = samples(collect(tmp_path))
    assert s[("gangwatch_infiniband_node_symbol_errors_total", ())] == 7
    for rollup in ROLLUPS:
        if rollup != "node_symbol_errors_total":
            assert ("gangwatch_infiniband_" + rollup, ()) not in s, rollup


def test_ports_down_counts_only_ports_seen_active(node_exporter_sys, tmp_path):
    import shutil

    shutil.copytree(node_exporter_sys / "class" / "infiniband", tmp_path / "class" / "infiniband", symlinks=True)
    ports = tmp_path / "class" / "infiniband" / "mlx4_0" / "ports"

    def set_state(port: Path, state: str, phys: str) -> None:
        (port / "state").write_text(state + "\n")
        (port / "phys_state").write_text(phys + "\n")

    def down(c: InfinibandCollector) -> dict[tuple, float]:
        return series(encode(c.collect()), "gangwatch_infiniband_node_ports_down")

    c = InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path))))
    try:
        assert down(c) == {(): 0}  # the real tree: every port Active
        set_state(ports / "2", "1: DOWN", "2: Polling")  # cable pulled, link lost
        assert down(c) == {(): 1}
        set_state(ports / "1", "1: DOWN", "3: Disabled")  # shut on purpose by the operator
        assert down(c) == {(): 1}
        # a port that was never Active (uncabled), and an Ethernet (RoCE) port that goes down: not counted
        make_port(tmp_path, "mlx5_0", "1", state="1: DOWN", phys="2: Polling")
        roce = make_port(tmp_path, "mlx5_1", "1", link_layer="Ethernet")
        assert down(c) == {(): 1}
        set_state(roce, "1: DOWN", "2: Polling")
        assert down(c) == {(): 1}
        # an agent restarted now has seen none of them Active
        fresh = InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path))))
        try:
            assert down(fresh) == {(): 0}
        finally:
            fresh.close()
        set_state(ports / "2", "4: ACTIVE", "5: LinkUp")  # link back
        assert down(c) == {(): 0}
        set_state(ports / "2", "2: INIT", "5: LinkUp")  # trained but not Active (no subnet manager)
        assert down(c) == {(): 1}
    finally:
        c.close()
    # the per-port state still tells which port it is
    assert series(encode(InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path)))).collect()),
                  "gangwatch_infiniband_port_state_id")[(("device", "mlx4_0"), ("port", "2"))] == 2


def test_ports_down_left_out_without_a_readable_infiniband_state(tmp_path):
    make_port(tmp_path, "mlx5_0", "1", link_layer="Ethernet")
    make_port(tmp_path, "mlx5_1", "1", state=None)
    assert series(collect(tmp_path), "gangwatch_infiniband_node_ports_down") == {}


def test_no_infiniband_is_quiet(tmp_path):
    with pytest.raises(NoData):
        collect(tmp_path)
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    with pytest.raises(NoData):
        collect(tmp_path)


def test_expected_rate_flag_on_the_command_line():
    from collectors.agent import build_parser

    args = build_parser().parse_args(["--collector.infiniband.expected-rate", "mlx5_[0-3]=400,200Gb/s"])
    assert args.collector_infiniband_expected_rate == (ib.ExpectedRule("mlx5_[0-3]", 400.0), ib.ExpectedRule("*", 200.0))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--collector.infiniband.expected-rate", "fast"])


# ---------------------------------------------------------------------------------------------
# Parsers: known answers, then no exception for arbitrary input


@pytest.mark.parametrize("text,want", [
    ("100 Gb/sec (4X EDR)\n", ib.Rate(100.0, "4X", "EDR")),
    ("10 Gb/sec (4X)", ib.Rate(10.0, "4X", "")),
    ("2.5 Gb/sec (1X SDR)", ib.Rate(2.5, "1X", "SDR")),
    ("53.125 Gb/sec (1X HDR)", ib.Rate(53.125, "1X", "HDR")),
    ("400 Gb/sec (4X NDR)", ib.Rate(400.0, "4X", "NDR")),
    ("25 Gb/sec", ib.Rate(25.0, "", "")),
    ("", None), ("Gb/sec", None), ("fast", None), ("100 Mb/sec (4X)", None),
])
def test_parse_rate(text, want):
    assert ib.parse_rate(text) == want


@pytest.mark.parametrize("text,want", [
    ("4: ACTIVE\n", ib.State(4, "ACTIVE")), ("1: DOWN", ib.State(1, "DOWN")), ("ACTIVE", ib.State(4, "ACTIVE")),
    ("7", ib.State(7, "")), ("", None), ("weird", ib.State(None, "weird")),
])
def test_parse_state(text, want):
    assert ib.parse_state(text) == want


def test_parse_phys_state_names():
    assert ib.parse_phys_state("5: LinkUp") == ib.State(5, "LinkUp")
    assert ib.parse_phys_state("LinkUp") == ib.State(5, "LinkUp")
    assert ib.parse_phys_state("Link Error Recovery") == ib.State(6, "Link Error Recovery")


@pytest.mark.parametrize("text,want", [
    ("123\n", 123), ("0", 0), ("N/A (no PMA)\n", None), ("", None), ("-5", None), ("1e3", None),
    ("١٢", None), (None, None),
])
def test_parse_counter(text, want):
    assert ib.parse_counter(text) == want


def test_parse_expected_rate_forms():
    assert ib.parse_expected_rate("") == ()
    assert ib.parse_expected_rate("200 Gb/sec") == (ib.ExpectedRule("*", 200.0),)
    assert ib.parse_expected_rate("200 Gb/sec (4X HDR)") == (ib.ExpectedRule("*", 200.0),)
    assert ib.parse_expected_rate("mlx5_*=400G, ib0=100") == (ib.ExpectedRule("mlx5_*", 400.0), ib.ExpectedRule("ib0", 100.0))
    for bad in ("fast", "=200", "mlx5_0=", "0", "-100"):
        with pytest.raises(ValueError):
            ib.parse_expected_rate(bad)
    assert ib.expected_for(ib.parse_expected_rate("mlx5_1=100,400"), "mlx5_1") == 100.0
    assert ib.expected_for(ib.parse_expected_rate("mlx5_1=100,400"), "mlx5_2") == 400.0
    assert ib.expected_for(ib.parse_expected_rate("mlx5_1=100"), "mlx5_2") is None


text_inputs = st.one_of(st.text(), st.from_regex(r"[0-9 .:A-Za-z/()X_=,*-]{0,40}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(text_inputs)
def test_parsers_never_raise(text):
    assert ib.parse_counter(text) is None or ib.parse_counter(text) >= 0
    ib.parse_state(text)
    ib.parse_phys_state(text)
    rate = ib.parse_rate(text)
    assert rate is None or rate.bytes_per_second >= 0
    gbps = ib.parse_gbps(text)
    assert gbps is None or gbps > 0
    try:
        rules = ib.parse_expected_rate(text)
    except ValueError:
        rules = ()
    ib.expected_for(rules, text)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(ib.COUNTERS) + ["rate", "state", "phys_state", "link_layer"]),
                       st.binary(max_size=40), max_size=8))
def test_collector_never_raises_on_arbitrary_files(tmp_path_factory, files):
    root = tmp_path_factory.mktemp("ibprop")
    pdir = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (pdir / "counters").mkdir(parents=True)
    for name, data in files.items():
        target = pdir / name if name in ("rate", "state", "phys_state", "link_layer") else pdir / "counters" / name
        target.write_bytes(data)
    text = collect(root)
    assert 'device="mlx5_0"' in text
    list(iter_samples(text))  # the exposition stays parseable


def test_open_files_read_all_batches_and_costs_only_the_failing_file(tmp_path):
    """read_all: the same answers as read() file by file, its batched pread used once every file is
    open, and a file whose read fails (a directory here: EISDIR, as a removed sysfs attribute gives
    ENODEV) is None without costing the others, again on the next call."""
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "c").write_text("3\n")
    files = ib.OpenFiles()
    paths = [str(tmp_path / n) for n in ("a", "b", "c")]
    for _ in range(3):
        assert files.read_all(paths, 64) == [b"1\n", None, b"3\n"]
    assert files._held is None  # never batched while a file fails
    good = [paths[0], paths[2]]
    assert files.read_all(good, 64) == [b"1\n", b"3\n"]
    assert files._held is not None and files._held[0] is good
    (tmp_path / "c").write_text("30\n")  # rewritten in place: pread at offset 0 sees it
    assert files.read_all(good, 64) == [b"1\n", b"30\n"]
    files.close()
    assert files._held is None and not files.fds
    assert files.read_all(good, 64) == [b"1\n", b"30\n"]  # opened again after close
    files.close()


def test_still_error_counters_left_out_after_the_idle_window(tmp_path):
    """A port's error counters and hw_counters are exported while they moved in the last idle
    window (from the first reading on), then left out and counted in port_idle_series; one that
    moves comes back for one scrape at the value it stood at, then its own; the traffic counters and
    the node rollups stay, the rollups counting every port; 0 exports every counter, no gauge."""
    quiet = {"symbol_error": "0\n", "link_downed": "2\n", "port_rcv_errors": "0\n"}
    pdirs = [make_port(tmp_path, f"mlx5_{k}", "1", counters={"port_xmit_data": "10\n", **quiet},
                       hw={"out_of_buffer": "7\n"}) for k in range(2)]
    now = [1000.0]
    c = InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path)), clock=lambda: now[0],
                                    options={"collector_infiniband_error_idle_seconds": 600.0}))
    names = {PREFIX + ib.COUNTERS[k].metric for k in quiet} | {PREFIX + "port_hw_stat_total"}

    def scrape(at: float, data: str = "10\n") -> tuple[dict, dict]:
        now[0] = at
        for p in pdirs:
            (p / "counters" / "port_xmit_data").write_text(data)
        got = samples(encode(c.collect()))
        return {k: v for k, v in got.items() if k[0] in names}, got

    first, got = scrape(1000.0)
    assert len(first) == 8 and got[(PREFIX + "port_idle_series", ())] == 0
    assert scrape(1600.0)[0] == first
    (pdirs[1] / "counters" / "link_downed").write_text("3\n")
    moved, got = scrape(1700.0, "20\n")
    downed = (PREFIX + "port_link_downed_total", (("device", "mlx5_1"), ("port", "1")))
    assert moved == {downed: 2}  # back at the value it stood at, so increase() counts the drop
    assert got[(PREFIX + "port_idle_series", ())] == 7
    assert got[(PREFIX + "node_link_downed_total", ())] == 5  # the rollup: every port's own value
    assert got[(PREFIX + "port_transmit_data_bytes_total", (("device", "mlx5_0"), ("port", "1")))] == 80
    assert scrape(1715.0)[0] == {downed: 3}
    assert scrape(2400.0)[0] == {}
    c.close()
    every = InfinibandCollector(Context(paths=Paths(sysfs=str(tmp_path)), clock=lambda: 5000.0,
                                        options={"collector_infiniband_error_idle_seconds": 0.0}))
    for _ in range(2):
        got = samples(encode(every.collect()))
        assert len({k for k in got if k[0] in names}) == 8 and (PREFIX + "port_idle_series", ()) not in got
    every.close()
