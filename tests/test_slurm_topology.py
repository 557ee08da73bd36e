"""Slurm's network topology in the slurm-exporter: the parser (collectors/slurm/topology.py) on our
own captures of `scontrol show topology` (tests/data/slurm-topology, from the test Slurm run with
tests/slurm/topology.conf), odd and garbled input, and `gangwatch_slurm_node_switch_info` through
the poller: present with topology/tree, absent and quiet without it, bounded when scontrol hangs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.exposition import iter_samples
from collectors.runner import CommandResult
from collectors.slurm import exporter, hostlist
from collectors.slurm.model import Snapshot, Switch
from collectors.slurm.sources import CliSource, Poller, TopologyFile
from collectors.slurm.topology import leaf_switches, parse_topology, parse_topology_conf, switch_levels
from tests.slurm.fakes import FileRunner, failing_result, slow_result, text_result

DATA = Path(__file__).parent / "data" / "slurm-topology"
CONF = Path(__file__).parent / "slurm" / "topology.conf"
T0 = 1795980010.0
LEAVES = {**dict.fromkeys(("gpu001", "gpu002", "gpu003", "gpu004"), "leaf-r01"),
          **dict.fromkeys(("gpu005", "gpu006"), "leaf-r02"), **dict.fromkeys(("gpu007", "gpu008"), "leaf-r03")}


def capture(name: str) -> str:
    return (DATA / name).read_text()


def switch_info(text: str) -> dict[str, str]:
    out = {}
    for name, labels, value in iter_samples(text):
        if name == "gangwatch_slurm_node_switch_info":
            assert value == 1
            out[labels["node"]] = labels["switch"]
    return out


def poll(runner, **kw) -> tuple[Poller, str]:
    poller = Poller(CliSource(runner=runner, **kw), clock=lambda: T0)
    assert poller.poll_once(), poller.statuses
    return poller, exporter.render_once(poller, T0)


def promtool_check(text: str) -> None:
    if shutil.which("promtool") is None:
        return  # CI installs it (tests/run-all.sh)
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def runner(fixtures_dir) -> FileRunner:
    return FileRunner(fixtures_dir / "slurm-22.05")


# ----------------------------------------------------------------------------- parser, real output

def test_scontrol_show_topology_capture():
    topo = parse_topology(capture("scontrol_show_topology.txt"))
    assert topo.notes == ()
    assert [(s.name, s.level, s.link_speed, len(s.nodes), s.switches) for s in topo.switches] == [
        ("leaf-r01", 0, 200, 4, ()), ("leaf-r02", 0, 200, 2, ()), ("leaf-r03", 0, 200, 2, ()),
        ("spine1", 1, 1, 6, ("leaf-r01", "leaf-r02")), ("core", 2, 1, 8, ("spine1", "leaf-r03"))]
    # every node is listed by its leaf, the spine above and the core: the leaf is the lowest level
    assert leaf_switches(topo.switches) == LEAVES


def test_topology_conf_gives_the_same_leaves_as_scontrol():
    leaf_of, notes = parse_topology_conf(CONF.read_text())
    assert leaf_of == LEAVES and notes == []
    conf = parse_topology(CONF.read_text()).switches
    assert [s.level for s in conf] == [None] * 5 and switch_levels(conf) == [0, 0, 0, 1, 2]


def test_node_query_and_no_plugin_captures():
    # `scontrol show topology gpu005` lists only the switches above gpu005
    assert leaf_switches(parse_topology(capture("scontrol_show_topology_gpu005.txt")).switches)["gpu005"] == "leaf-r02"
    assert capture("scontrol_show_topology_no-plugin.txt") == ""
    for name in ("scontrol_show_topology_no-plugin.txt.stderr", "scontrol_show_topology_nosuch.txt.stderr"):
        assert parse_topology(capture(name)).switches == ()
    assert parse_topology(capture("scontrol_show_topology_no-plugin.txt.stderr")).notes == ()
    # SLURM_TOPO_LEN=60 cut the spine's and the core's lines inside `Switches=`: the leaves survive
    cut = parse_topology(capture("scontrol_show_topology_SLURM_TOPO_LEN=60.txt")).switches
    assert leaf_switches(cut) == LEAVES and [s.switches for s in cut[3:]] == [(), ()]


# ------------------------------------------------------------------------ odd versions, bad input

def test_odd_and_garbled_lines():
    text = "\r\n".join([
        "SwitchName=a1 Level=0 LinkSpeed=1 Nodes=n[1-2] Switches=(null) Color=blue",  # unknown key, (null)
        "switchname=a2 nodes=n[3-4]",  # topology.conf's keys in any case, no level
        "SwitchName=a3 Level=zero Nodes=n5",  # unreadable level -> derived (leaf)
        "SwitchName=big Level=1 LinkSpeed=1 Nodes=n[1-5],n[7-1",  # cut short (SLURM_TOPO_LEN)
        "SwitchName=cut Level=0 LinkSpeed=1 Nodes=x[1-",  # nothing complete left
        "BlockName=b1 BlockIndex=0 Nodes=n[1-5] BlockSize=4",  # topology/block: no switch, no note
        "Nodes=orphan[1-3]", "\x00\x7f\ufffd garbage", "SwitchName= Level=0 Nodes=q1",
        "SwitchName=dup Level=0 Nodes=n6 SwitchName=other Nodes=n9",  # the first key wins
        "SwitchName=a1 Level=0 Nodes=n1",  # a second leaf for n1: the first listed stays
    ])
    topo = parse_topology(text, "scontrol show topology")
    assert [s.name for s in topo.switches] == ["a1", "a2", "a3", "big", "cut", "dup", "a1"]
    assert topo.switches[3].nodes == ("n1", "n2", "n3", "n4", "n5") and topo.switches[4].nodes == ()
    assert leaf_switches(topo.switches) == {"n1": "a1", "n2": "a1", "n3": "a2", "n4": "a2", "n5": "a3", "n6": "dup"}
    notes = "\n".join(topo.notes)
    assert "line 3: switch 'a3': Level='zero'" in notes and "line 4: switch 'big': Nodes= list" in notes
    assert "5 name(s) kept" in notes and "line 5" in notes and "line 7" in notes and "line 8" in notes
    assert "line 9" in notes and "line 6" not in notes and all(n.startswith("scontrol show topology line") for n in topo.notes)


def test_topology_conf_comments_continuations_and_cycles():
    conf = ("# fabric\nSwitchName=s0 Nodes=gpu[000-003]  # rack 1\nSwitchName=s1 \\\n  Nodes=gpu[004-007]\n"
            "SwitchName=spine Switches=s[0-1]\nSwitchName=loop1 Switches=loop2\nSwitchName=loop2 Switches=loop1\n"
            "SwitchName=both Nodes=gpu000 Switches=s0\n")
    topo = parse_topology(conf)
    assert [s.name for s in topo.switches] == ["s0", "s1", "spine", "loop1", "loop2", "both"]
    assert switch_levels(topo.switches)[:3] == [0, 0, 1] and min(switch_levels(topo.switches)[3:5]) >= 1
    leaf_of = leaf_switches(topo.switches)
    assert leaf_of["gpu000"] == "s0" and leaf_of["gpu005"] == "s1" and len(leaf_of) == 8


def test_deep_chains_and_cycles_are_linear():
    n = 20000  # far deeper than Python's recursion limit
    text = "\n".join(f"SwitchName=s{i} Switches=s{i + 1}" for i in range(n)) + f"\nSwitchName=s{n} Nodes=x[1-2]\n"
    topo = parse_topology(text + "SwitchName=c1 Switches=c2\nSwitchName=c2 Switches=c1,s5\n")
    levels = switch_levels(topo.switches)
    assert levels[0] == n and levels[n] == 0 and levels[-2:] == [n - 3, n - 4]
    assert leaf_switches(topo.switches) == {"x1": f"s{n}", "x2": f"s{n}"}


def test_hostile_and_huge_input_stays_bounded():
    evil = '<script>"x"</script>\\back{a="b"}'
    topo = parse_topology(f"SwitchName={evil} Level=0 Nodes=n1\nSwitchName=huge Level=0 Nodes=m[0-99999999]\n"
                          + "SwitchName=wide Level=0 Nodes=" + ",".join(f"w[0-{hostlist.MAX_HOSTS // 2}]" for _ in range(4)))
    assert topo.switches[0].name == evil and leaf_switches(topo.switches)["n1"] == evil
    assert topo.switches[1].nodes == () and sum(len(s.nodes) for s in topo.switches) <= hostlist.MAX_HOSTS + 1
    assert any("'huge'" in n for n in topo.notes)


def test_snapshot_json_keeps_the_switches():
    switches = parse_topology(capture("scontrol_show_topology.txt")).switches
    snap = Snapshot(taken_at=T0, switches=switches)
    back = Snapshot.from_json(snap.to_json())
    assert back.switches == switches and Snapshot.from_json(Snapshot(taken_at=T0).to_json()).switches == ()


# ----------------------------------------------------------------------------- property-based tests

@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_parser_never_raises(text):
    for prefix in ("", "SwitchName=s Level=0 Nodes=", "SwitchName=s Switches=", "SwitchName="):
        topo = parse_topology(prefix + text)
        leaf_switches(topo.switches)
        assert all(isinstance(n, str) for n in topo.notes)


NAMES = st.from_regex(r"\A[a-z]{1,3}(0[0-9]{2}|[1-9][0-9]{0,2})\Z", fullmatch=True)


@given(st.lists(st.lists(NAMES, min_size=1, max_size=6, unique=True), min_size=1, max_size=6), st.integers(1, 3))
@settings(max_examples=150, deadline=None)
def test_generated_trees_give_their_leaves_in_both_forms(leaves, fanout):
    """Leaves with disjoint node sets under a tree of spines: scontrol's form (every switch lists all
    nodes below it) and topology.conf's (only leaves list nodes) both give back each node's leaf."""
    truth, lines_conf, below = {}, [], []
    for i, nodes in enumerate(leaves):
        nodes = [n for n in nodes if n not in truth]
        truth.update(dict.fromkeys(nodes, f"leaf{i}"))
        below.append((f"leaf{i}", nodes))
        lines_conf.append(f"SwitchName=leaf{i} Nodes={hostlist.compress(nodes)}" if nodes else f"SwitchName=leaf{i}")
    lines_scontrol = [f"SwitchName={n} Level=0 LinkSpeed=1 Nodes={hostlist.compress(ns)}" for n, ns in below if ns]
    level = 0
    while len(below) > 1:  # group `fanout` switches under each spine of the next level
        level += 1
        groups = [below[i:i + fanout + 1] for i in range(0, len(below), fanout + 1)]
        below = []
        for j, g in enumerate(groups):
            name, nodes = f"sp{level}-{j}", [n for _, ns in g for n in ns]
            kids = ",".join(k for k, _ in g)
            lines_conf.append(f"SwitchName={name} Switches={kids}")
            lines_scontrol.append(f"SwitchName={name} Level={level} LinkSpeed=1 Nodes={hostlist.compress(nodes)} Switches={kids}")
            below.append((name, nodes))
    # scontrol lists the spines last; shuffle nothing but put a spine first to show order does not matter
    lines_scontrol.insert(0, lines_scontrol.pop())
    assert leaf_switches(parse_topology("\n".join(lines_scontrol)).switches) == truth
    assert parse_topology_conf("\n".join(reversed(lines_conf))) == (truth, [])


# ------------------------------------------------------------------------------ through the poller

GOLDEN = Path(__file__).parent / "golden" / "slurm_topology.prom"


def test_exporter_exports_the_leaf_map(runner, update_golden):
    runner.override("scontrol show topology", text_result(capture("scontrol_show_topology.txt")))
    poller, text = poll(runner)
    assert switch_info(text) == LEAVES
    # The family as exported, kept as a golden output: tests/test_rules.py and tests/test_grafana.py
    # accept a metric a rule or panel reads only when a golden output has it.
    family = "".join(line for line in text.splitlines(True) if "gangwatch_slurm_node_switch_info" in line)
    if update_golden or not GOLDEN.exists():
        GOLDEN.write_text(family)
    assert family == GOLDEN.read_text()
    assert 'gangwatch_slurm_command_success{command="scontrol_topology"} 1' in text
    assert "gangwatch_slurm_snapshot_errors" not in text
    promtool_check(text)


def test_without_topology_plugin_the_family_is_absent_and_quiet(runner):
    stderr = capture("scontrol_show_topology_no-plugin.txt.stderr")
    for rc in (0, 1):  # 22.05 exits 0; a version exiting 1 with the same words is no failure either
        runner.override("scontrol show topology", lambda argv, t, rc=rc: CommandResult(tuple(argv), rc, "", stderr, 0.01))
        poller, text = poll(runner)
        assert "gangwatch_slurm_node_switch_info" not in text and "gangwatch_slurm_snapshot_errors" not in text
        assert 'gangwatch_slurm_command_success{command="scontrol_topology"} 1' in text
        assert poller.health()["command_errors"] == {}
    runner.override("scontrol show topology", text_result("BlockName=b1 BlockIndex=0 Nodes=n[1-4] BlockSize=4\n"))
    assert "node_switch_info" not in poll(runner)[1] and "snapshot_errors" not in poll(runner)[1]


def test_hung_or_failing_scontrol_costs_only_the_topology(runner):
    runner.override("scontrol show topology", slow_result(30))
    poller = Poller(CliSource(runner=runner, timeout=0.3), clock=lambda: T0)
    assert poller.poll_once() and not poller.current().stale  # jobs and nodes are there: still a good poll
    st_ = poller.health()["statuses"]["scontrol_topology"]
    assert not st_.ok and st_.error.startswith("timed out") and st_.duration < 1
    text = exporter.render_once(poller, T0)
    assert "node_switch_info" not in text
    assert 'gangwatch_slurm_snapshot_errors{source="scontrol show topology",severity="error"} 1' in text
    runner.override("scontrol show topology", failing_result())  # controller unreachable: a real failure
    assert poller.poll_once() and poller.health()["command_errors"]["scontrol_topology"] == 2


def test_hostile_switch_name_is_data(runner):
    evil = '<b>"q"</b>\\x{a="b"}Evil=1'
    runner.override("scontrol show topology", text_result(f"SwitchName={evil} Level=0 LinkSpeed=1 Nodes=gpu[1-2]\n"))
    text = poll(runner)[1]
    assert switch_info(text) == {"gpu1": evil, "gpu2": evil}
    promtool_check(text)


def test_topology_file_flag(runner, tmp_path):
    args = exporter.build_parser().parse_args(["--slurm.topology-file", str(CONF)])
    source = exporter.make_source(args, runner)
    assert isinstance(source, TopologyFile) and "topology" in source.inner.skip
    poller = Poller(source, clock=lambda: T0)
    assert poller.poll_once()
    text = exporter.render_once(poller, T0)
    assert switch_info(text) == LEAVES and "scontrol show topology" not in runner.calls
    assert 'gangwatch_slurm_command_success{command="topology_file"} 1' in text
    # the file is read at every poll: a missing one is reported, the rest of the snapshot stays
    missing = Poller(TopologyFile(CliSource(runner=runner, skip=("topology",)), str(tmp_path / "nope.conf")), clock=lambda: T0)
    assert missing.poll_once() and not missing.health()["statuses"]["topology_file"].ok
    assert "node_switch_info" not in exporter.render_once(missing, T0)
    off = exporter.make_source(exporter.build_parser().parse_args(["--slurm.no-topology"]), runner)
    assert isinstance(off, CliSource) and "topology" in off.skip
    # slurmrestd has no topology: the file still adds it
    rest = exporter.make_source(exporter.build_parser().parse_args(
        ["--slurm.rest-url", "http://127.0.0.1:9", "--slurm.topology-file", str(CONF)]), runner)
    assert isinstance(rest, TopologyFile) and rest.name == "slurmrestd"
    rest.close()


def test_model_switch_defaults():
    assert Switch("s").level is None and leaf_switches([Switch("s", 0, None, ("n1",))]) == {"n1": "s"}
