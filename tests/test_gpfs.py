"""The GPFS collector: gpfs_exporter's captured command outputs, real mmhealth outputs, counters
that wrap, and commands that hang, fail or print garbage."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.exposition import encode, iter_samples
from collectors.node import gpfs
from collectors.node.gpfs import (WRAP, CounterAccumulator, GpfsCollector, normalise_reason, normalise_thread,
                                  parse_mmhealth, parse_mmpmon, parse_waiters, parse_y)
from collectors.registry import Context, NoData
from collectors.runner import CommandResult, CommandRunner
from collectors.scrape import Scraper
from tests.support.golden import assert_promtool_clean, check_golden

GOLDEN = Path(__file__).parent / "golden" / "gpfs"
COMMANDS = ("mmpmon", "mmdiag", "mmhealth")


class FakeRunner:
    """Answers each command from a table: a CommandResult, a stdout string, or a list of either (one per run)."""

    def __init__(self, table):
        self.table = dict(table)
        self.calls: list[tuple[tuple[str, ...], str | None]] = []

    def run(self, argv, timeout=5.0, input=None):
        self.calls.append((tuple(argv), input))
        name = os.path.basename(argv[0])
        answer = self.table.get(name, CommandResult(tuple(argv), None, "", "", 0.0, error="FileNotFoundError: x"))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, str):
            answer = CommandResult(tuple(argv), 0, answer, "", 0.01)
        return answer


def make_collector(tmp_path, runner, installed=COMMANDS, **options) -> GpfsCollector:
    """A collector whose command paths exist (as empty files) for the `installed` commands."""
    opts = {"collector_gpfs_wait": 2.0, "collector_gpfs_timeout": 5.0}
    for cmd in COMMANDS:
        path = tmp_path / "bin" / cmd
        if cmd in installed:
            path.parent.mkdir(exist_ok=True)
            path.write_text("")
        opts[f"collector_gpfs_{cmd}_path"] = str(path)
    opts.update(options)
    return GpfsCollector(Context(runner=runner, options=opts))


def render(fams) -> str:
    """Exposition without the series that vary between runs (command durations)."""
    return "\n".join(l for l in encode(fams).splitlines()
                     if "gangwatch_gpfs_command_duration_seconds" not in l) + "\n"


def samples(text):
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


@pytest.fixture(scope="module")
def outputs(fixtures_dir):
    g = fixtures_dir / "gpfs_exporter"
    return {
        "mmpmon": (g / "mmpmon" / "mmpmonStdout.txt").read_text(),
        "mmdiag": (g / "waiter" / "waitersStdout.txt").read_text(),
        "mmhealth": (g / "mmhealth" / "mmhealthStdout.txt").read_text(),
    }


# ------------------------------------------------------------------ captured outputs, golden and upstream


def test_golden_from_gpfs_exporter_outputs(tmp_path, outputs, update_golden):
    runner = FakeRunner(outputs)
    col = make_collector(tmp_path, runner)
    text = render(col.collect())
    check_golden(GOLDEN / "gpfs_exporter_outputs.prom", text, update_golden)
    # every command ran once, with its requests on stdin
    argv = {os.path.basename(a[0]): (a, i) for a, i in runner.calls}
    assert argv["mmpmon"] == ((argv["mmpmon"][0][0], "-s", "-p"), "fs_io_s\nio_s\n")
    assert argv["mmdiag"][0][1:] == ("--waiters", "-Y")
    assert argv["mmhealth"][0][1:] == ("node", "show", "-Y")


def test_mmpmon_agrees_with_gpfs_exporter(tmp_path, outputs, fixtures_dir):
    got = samples(render(make_collector(tmp_path, FakeRunner(outputs)).collect()))
    expected = list(iter_samples((fixtures_dir / "gpfs_exporter/mmpmon/expected_TestMmpmonCollector.prom").read_text()))
    op_names = {"read_dir": "readdirs"}
    checked = 0
    for name, labels, value in expected:
        base = (("cluster", "gpfs.domain"), ("fs", labels.get("fs")))
        if name == "gpfs_perf_read_bytes_total":
            key = ("gangwatch_gpfs_read_bytes_total", base)
        elif name == "gpfs_perf_write_bytes_total":
            key = ("gangwatch_gpfs_write_bytes_total", base)
        elif name == "gpfs_perf_operations_total":
            op = op_names.get(labels["operation"], labels["operation"])
            key = ("gangwatch_gpfs_operations_total", tuple(sorted(base + (("operation", op),))))
        elif name == "gpfs_perf_info":
            key = ("gangwatch_gpfs_filesystem_info", tuple(sorted(base + (("nodename", labels["nodename"]),))))
        else:
            continue
        assert got[key] == value, key
        checked += 1
    assert checked == 18


def test_waiters_agree_with_gpfs_exporter(outputs, fixtures_dir):
    waiters = [w for w in parse_waiters(outputs["mmdiag"]) if not re.search(gpfs.DEFAULT_WAITER_EXCLUDE, w.thread)]
    want = {(n, tuple(sorted(l.items()))): v for n, l, v in
            iter_samples((fixtures_dir / "gpfs_exporter/waiter/expected_TestWaiterCollector.prom").read_text())}
    assert len(waiters) == want[("gpfs_waiter_seconds_count", ())] == 25
    assert sum(w.seconds for w in waiters) == pytest.approx(want[("gpfs_waiter_seconds_sum", ())])
    for le in ("1", "5", "15", "60", "300", "3600"):
        assert sum(w.seconds <= float(le) for w in waiters) == want[("gpfs_waiter_seconds_bucket", (("le", le),))]
    got = samples(render(GpfsCollector(Context(options={}))._mmdiag(
        CommandResult(("mmdiag",), 0, outputs["mmdiag"], "", 0.0))[1]))
    for thread in ("NSDThread", "RebuildWorkThread"):
        assert got[("gangwatch_gpfs_waiters_by_thread", (("thread", thread),))] == \
            want[("gpfs_waiter_info_count", (("waiter", thread),))]
    assert got[("gangwatch_gpfs_waiters_wait_seconds", ())] == pytest.approx(155.1957)
    assert got[("gangwatch_gpfs_waiter_longest_seconds", ())] == 64.3
    assert got[("gangwatch_gpfs_waiters_by_reason", (("reason", "for I/O completion"),))] == 24
    assert got[("gangwatch_gpfs_waiters_by_reason", (("reason", "waiting for PG drain"),))] == 1


def test_mmhealth_agrees_with_gpfs_exporter(tmp_path, outputs, fixtures_dir):
    got = samples(render(make_collector(tmp_path, FakeRunner(outputs)).collect()))
    expected = (fixtures_dir / "gpfs_exporter/mmhealth/expected_TestMmhealthCollector.prom").read_text()
    ones = zeros = 0
    for name, labels, value in iter_samples(expected):
        common = (("component", labels["component"]), ("entity", labels["entityname"]),
                  ("entitytype", labels["entitytype"]))
        if name == "gpfs_health_status":
            key = ("gangwatch_gpfs_health_state", tuple(sorted(common + (("state", labels["status"]),))))
            if value == 1:
                assert got[key] == 1, key
                ones += 1
            else:
                assert key not in got, key  # only the current state is exported
                zeros += 1
        elif name == "gpfs_health_event":
            assert got[("gangwatch_gpfs_health_event", tuple(sorted(common + (("event", labels["event"]),))))] == value
    assert ones == 9 and zeros == 90
    # "FOO" is not a state gpfs_exporter knows: UNKNOWN, as there
    assert got[("gangwatch_gpfs_health_state", (("component", "NETWORK"), ("entity", "mlx5_0/1"),
                                                ("entitytype", "IB_RDMA"), ("state", "UNKNOWN")))] == 1


@pytest.mark.parametrize("name", ["vsc-ugent_mmhealth-node-show-Y_nsd03_2017.txt",
                                  "vsc-ugent_mmhealth-node-show-Y_storage2206_old-header.txt"])
def test_real_mmhealth_outputs(tmp_path, fixtures_dir, update_golden, name):
    text = (fixtures_dir / "exporters-real" / "gpfs" / name).read_text()
    col = make_collector(tmp_path, FakeRunner({"mmhealth": text}), installed=("mmhealth",))
    out = render(col.collect())
    check_golden(GOLDEN / (name.replace(".txt", ".prom")), out, update_golden)
    states, events = parse_mmhealth(text)
    state_rows = sum(1 for l in text.splitlines() if l.startswith("mmhealth:State:0"))
    assert len(states) == state_rows
    assert len(events) == sum(1 for l in text.splitlines() if l.startswith("mmhealth:Event:0"))
    if "old-header" in name:
        assert ("GPFS", "FAILED") in {(s.component, s.state) for s in states}
        assert "gpfsport_up" in {e.event for e in events}
    else:
        assert ("kyukonhome", "DEGRADED") in {(s.entity, s.state) for s in states}


def test_y_format_maps_by_header_and_decodes():
    rows = parse_y("x:t:HEADER:version:a:b:\nx:t:0:1:v%3A1:two:extra:cols\nx:u:0:1:no header\n", "x")
    assert rows == {"t": [{"version": "1", "a": "v:1", "b": "two"}]}


# ------------------------------------------------------------------ counters that wrap


def test_accumulator_wrap_reset_and_repeat():
    acc = CounterAccumulator()
    assert acc.update("fs", {"br": WRAP - 100, "oc": 10}, 1.0) == {"br": WRAP - 100, "oc": 10}
    # br wraps: +100 to the top, +50 past zero
    assert acc.update("fs", {"br": 50, "oc": 12}, 2.0) == {"br": WRAP + 50, "oc": 12}
    assert acc.wraps == 1
    # the same sample again (same _t_) changes nothing
    assert acc.update("fs", {"br": 50, "oc": 12}, 2.0) == {"br": WRAP + 50, "oc": 12}
    # daemon restart: everything drops, by little: a reset, totals keep counting up from the new values
    assert acc.update("fs", {"br": 10, "oc": 1}, 3.0) == {"br": WRAP + 60, "oc": 13}
    assert acc.resets == 1
    # a 64-bit counter never wraps at 2^32: a drop is a reset
    acc.update("big", {"br": 3 * WRAP}, 1.0)
    assert acc.update("big", {"br": 5}, 2.0) == {"br": 3 * WRAP + 5}
    # a small counter dropping a little is a reset too, not a 4-billion jump
    acc.update("k", {"oc": 500}, 1.0)
    assert acc.update("k", {"oc": 10}, 2.0) == {"oc": 510}


def test_wrap_through_the_collector(tmp_path):
    line = "_fs_io_s_ _n_ 10.0.0.1 _nn_ n1 _rc_ 0 _t_ {t} _tu_ 0 _cl_ c _fs_ scratch _d_ 4 _br_ {br} _bw_ 0 " \
           "_oc_ 1 _cc_ 1 _rdc_ {rdc} _wc_ 0 _dir_ 0 _iu_ 0\n"
    runs = [line.format(t=100, br=4294967000, rdc=7), line.format(t=115, br=1000, rdc=9),
            line.format(t=130, br=3000, rdc=9)]
    runner = FakeRunner({"mmpmon": runs})
    col = make_collector(tmp_path, runner, installed=("mmpmon",))
    key = ("gangwatch_gpfs_read_bytes_total", (("cluster", "c"), ("fs", "scratch")))
    seen = []
    for _ in range(3):
        seen.append(samples(render(col.collect()))[key])
        col.probes["mmpmon"].join(2)
    assert seen == [4294967000, 4294967000 + 296 + 1000, 4294967000 + 296 + 3000]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2 * WRAP), st.integers(0, 1000)), min_size=1, max_size=30))
def test_accumulator_is_monotonic(samples_):
    acc = CounterAccumulator()
    last = None
    for i, (a, b) in enumerate(samples_):
        out = acc.update("k", {"a": a, "b": b}, float(i))
        if last is not None:
            assert out["a"] >= last["a"] and out["b"] >= last["b"]
        last = out


# ------------------------------------------------------------------ commands that hang, fail or lie


def test_absent_commands_are_quiet(tmp_path):
    col = make_collector(tmp_path, FakeRunner({}), installed=())
    with pytest.raises(NoData):
        col.collect()


def test_installed_but_not_executable_is_quiet_when_all_missing(tmp_path):
    # the paths exist but the runner cannot find them (e.g. a dangling wrapper): still "no GPFS here"
    col = make_collector(tmp_path, FakeRunner({}))
    with pytest.raises(NoData):
        col.collect()


def test_nonzero_exit_garbage_and_crashing_runner(tmp_path, outputs):
    runner = FakeRunner({
        "mmpmon": CommandResult(("mmpmon",), 1, "", "mmpmon: permission denied", 0.01),
        "mmdiag": "this is not -Y output\nat all\n",
        "mmhealth": RuntimeError("runner exploded"),
    })
    got = samples(render(make_collector(tmp_path, runner).collect()))
    for cmd in COMMANDS:
        assert got[("gangwatch_gpfs_command_error", (("command", cmd),))] == 1
        assert got[("gangwatch_gpfs_command_timeout", (("command", cmd),))] == 0
    assert not any(n.startswith(("gangwatch_gpfs_read", "gangwatch_gpfs_health", "gangwatch_gpfs_waiter"))
                   for n, _ in got)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_garbage_output_is_an_error(tmp_path, cmd):
    garbage = "mmpmon: unknown request\n_x_ 1 2\nmmdiag:foo:0:1\nmmhealth:State:0:1:::no header yet:\n\x00\xff"
    got = samples(render(make_collector(tmp_path, FakeRunner({cmd: garbage}), installed=(cmd,)).collect()))
    assert got[("gangwatch_gpfs_command_error", (("command", cmd),))] == 1


def test_one_failing_command_keeps_the_others(tmp_path, outputs):
    runner = FakeRunner({**outputs, "mmdiag": CommandResult(("mmdiag",), 127, "", "", 0.0)})
    got = samples(render(make_collector(tmp_path, runner).collect()))
    assert got[("gangwatch_gpfs_command_error", (("command", "mmdiag"),))] == 1
    assert got[("gangwatch_gpfs_command_error", (("command", "mmpmon"),))] == 0
    assert ("gangwatch_gpfs_read_bytes_total", (("cluster", "gpfs.domain"), ("fs", "scratch"))) in got


def _sleeper(tmp_path: Path, seconds: float) -> Path:
    script = tmp_path / "hang.py"
    script.write_text(f"import time\ntime.sleep({seconds})\n")
    return script


class PythonRunner(CommandRunner):
    """The real runner, with each command replaced by `python <script>` (no shell, real timeouts)."""

    def __init__(self, script: Path):
        super().__init__()
        self.script = script

    def run(self, argv, timeout=5.0, input=None):
        return super().run([sys.executable, str(self.script)], timeout=timeout, input=input)


def test_hung_command_becomes_a_timeout_metric(tmp_path):
    col = make_collector(tmp_path, PythonRunner(_sleeper(tmp_path, 30)), installed=("mmpmon",),
                         collector_gpfs_timeout=0.3, collector_gpfs_wait=3.0)
    t0 = time.monotonic()
    got = samples(render(col.collect()))
    assert time.monotonic() - t0 < 2.5
    assert got[("gangwatch_gpfs_command_timeout", (("command", "mmpmon"),))] == 1
    assert got[("gangwatch_gpfs_command_error", (("command", "mmpmon"),))] == 0


def test_scrape_answers_within_its_deadline_while_a_command_hangs(tmp_path):
    col = make_collector(tmp_path, PythonRunner(_sleeper(tmp_path, 30)), installed=("mmhealth",),
                         collector_gpfs_timeout=1.0, collector_gpfs_wait=0.2)
    scraper = Scraper([col], timeout=0.9, cache_ttl=0)
    try:
        t0 = time.monotonic()
        first = scraper.scrape()
        assert time.monotonic() - t0 < 1.5  # the scraper's deadline is 0.9 s; success=1 says we beat it
        assert 'gangwatch_scrape_collector_success{collector="gpfs"} 1' in first.text
        assert "gangwatch_gpfs_command_timeout" not in first.text  # not finished yet: nothing to say
        col.probes["mmhealth"].join(5)  # the runner kills it at its 1 s timeout
        second = scraper.scrape()
        assert 'gangwatch_gpfs_command_timeout{command="mmhealth"} 1' in second.text
    finally:
        scraper.close()


def test_only_one_run_per_command_in_flight(tmp_path):
    class Slow(FakeRunner):
        def run(self, argv, timeout=5.0, input=None):
            time.sleep(1.5)
            return super().run(argv, timeout, input)

    runner = Slow({"mmpmon": ""})
    col = make_collector(tmp_path, runner, installed=("mmpmon",), collector_gpfs_wait=0.05)
    for _ in range(5):
        col.collect()
    col.probes["mmpmon"].join(3)
    assert len(runner.calls) == 1


def test_agent_flags(tmp_path):
    from collectors.agent import build_parser

    args = build_parser().parse_args(["--collector.gpfs.mmpmon-path", "/opt/mmpmon", "--collector.gpfs.timeout", "2"])
    assert args.collector_gpfs and args.collector_gpfs_mmpmon_path == "/opt/mmpmon"
    assert args.collector_gpfs_timeout == 2.0
    assert args.collector_gpfs_mmhealth_path == "/usr/lpp/mmfs/bin/mmhealth"


# ------------------------------------------------------------------ property-based: parsers never raise


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parsers_never_raise(text):
    parse_mmpmon(text)
    parse_y(text, "mmdiag")
    parse_waiters(text)
    parse_mmhealth(text)


_token = st.sampled_from(["_fs_io_s_", "_io_s_", "_br_", "_t_", "_rc_", "_fs_", "_cl_", "0", "12", "-1", "x",
                          "4294967296", "_", "__", "_oc_", "1.5"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_token, max_size=20).map(" ".join), max_size=6).map("\n".join))
def test_mmpmon_parser_on_keyword_soup(text):
    for rec in parse_mmpmon(text):
        assert all(isinstance(v, int) and v >= 0 for v in rec.counters.values())


_field = st.text(alphabet="ab:%3A0.9 \nmdiagwaitersHEADER", max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_field, max_size=14).map(":".join), max_size=8))
def test_waiters_parser_on_colon_soup(lines):
    text = "mmdiag:waiters:HEADER:version:reserved:reserved:threadId:threadAddr:threadName:waitStartTime:" \
           "waitTime:isMonitored:condVarAddr:condVarName:condVarReason:mutexAddr:mutexName:auxReason:\n" + \
           "\n".join("mmdiag:waiters:" + l for l in lines)
    for w in parse_waiters(text):
        assert w.seconds >= 0


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_normalised_reasons_are_bounded(reason):
    out = normalise_reason(reason)
    assert 0 < len(out) <= 80
    assert not re.search(r"\d", out)
    thread = normalise_thread(reason)
    assert 0 < len(thread) <= 64 and not re.search(r"\d", thread)


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.prom")), ids=lambda p: p.name)
def test_goldens_pass_promtool(golden):
    assert_promtool_clean(golden)
