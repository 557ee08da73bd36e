"""The BeeGFS collector on outputs written from beegfs-ctl's own print formats (tests/data/beegfs,
see its README), a real hanging and a missing beegfs-ctl, and a gang stalled on a slow BeeGFS
target, diagnosed end to end from the collector's own exposition."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from collectors.exposition import encode, iter_samples
from collectors.node.beegfs import (MODES, BeegfsCollector, parse_clientstats, parse_client_info, parse_listtargets,
                                    parse_mounts, parse_proc_target_states, parse_serverstats)
from collectors.registry import Context, NoData, Paths
from collectors.runner import CommandResult, CommandRunner
from collectors.scrape import Scraper
from tests.support.golden import assert_promtool_clean, check_golden

DATA = Path(__file__).parent / "data" / "beegfs"
GOLDEN = Path(__file__).parent / "golden" / "beegfs"
PROC = DATA / "proc"


def out(name: str) -> str:
    return (DATA / name).read_text()


class FakeRunner:
    """Answers beegfs-ctl by its mode flags, from a table of stdout strings or CommandResults."""

    def __init__(self, table):
        self.table = dict(table)
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv, timeout=5.0, input=None):
        argv = tuple(argv)
        self.calls.append(argv)
        meta = "--nodetype=meta" in argv
        key = next(k for k in ("clientstats", "serverstats", "listtargets") if any(k in a for a in argv))
        key = {("serverstats", True): "metastats", ("listtargets", True): "meta"}.get((key, meta), key)
        answer = self.table.get(key, "")
        if callable(answer):
            answer = answer()
        if isinstance(answer, CommandResult):
            return answer
        return CommandResult(argv, 0, answer, "", 0.01)


def tables():
    return {"clientstats": out("clientstats_storage.txt"), "serverstats": out("serverstats_storage.txt"),
            "metastats": out("serverstats_meta.txt"),
            "listtargets": out("listtargets_storage.txt"), "meta": out("listtargets_meta.txt")}


def fake_ctl(tmp_path: Path) -> str:
    path = tmp_path / "beegfs-ctl"
    path.write_text("")
    return str(path)


def collector(tmp_path, runner, procfs=PROC, **options) -> BeegfsCollector:
    opts = {"collector_beegfs_ctl_path": fake_ctl(tmp_path), "collector_beegfs_wait": 2.0}
    opts.update(options)
    return BeegfsCollector(Context(paths=Paths(procfs=str(procfs)), runner=runner, options=opts))


def render(fams) -> str:
    return "\n".join(l for l in encode(fams).splitlines() if "_command_duration_seconds" not in l) + "\n"


def samples(text):
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


# ------------------------------------------------------------------ parsers


def test_parsers_read_what_beegfs_ctl_prints():
    rows = parse_clientstats(out("clientstats_storage.txt"))
    assert set(rows) == {"Sum:", "10.10.0.11", "10.10.0.12", "10.10.9.1"}
    assert rows["10.10.0.11"]["ops-rd"] == 52311 and rows["10.10.0.11"]["B-rd"] == 2.19431e11
    stamp, servers = parse_serverstats(out("serverstats_storage.txt"))
    assert stamp == 1767225598 and [s.name for s in servers] == ["stor01", "stor02", "stor03"]
    assert servers[2].values == {"write_KiB": 0, "read_KiB": 2048, "reqs": 6, "qlen": 57, "bsy": 64}
    targets = parse_listtargets(out("listtargets_storage.txt"))
    assert [(t.target_id, t.reachability, t.consistency, t.server_id, t.server) for t in targets][-3:] == [
        ("202", "Online", "Needs-resync", "2", "stor02"), ("301", "Probably-offline", "Good", "3", "stor03"),
        ("302", "Offline", "Bad", "3", "stor03")]
    proc = parse_proc_target_states((PROC / "fs/beegfs/4e2f-5d5a5b1c-gpu001/storage_target_state").read_text())
    assert [(t.target_id, t.reachability, t.consistency) for t in proc] == \
        [(t.target_id, t.reachability, t.consistency) for t in targets]
    assert parse_client_info((PROC / "fs/beegfs/4e2f-5d5a5b1c-gpu001/client_info").read_text()) == \
        ["10.10.0.11", "192.168.7.11"]
    assert parse_mounts((PROC / "mounts").read_text() + "x /mnt/with\\040space beegfs rw 0 0\n") == \
        ["/mnt/beegfs", "/mnt/with space"]


def test_unknown_states_and_garbage_are_unknown_not_good():
    text = ("     101  <invalid_value>   beegfs-storage s1 [ID: 1]\n"
            "     102       Sleeping        Fine   beegfs-storage s1 [ID: 1]\n"
            "     103         Online   resyncing   7\n"
            "garbage line\n")
    got = [(t.target_id, t.reachability, t.consistency, t.server_id) for t in parse_listtargets(text)]
    assert got == [("101", "unknown", "unknown", "1"), ("102", "unknown", "unknown", "1"),
                   ("103", "Online", "resyncing", "7")]
    assert parse_clientstats("Sum:   12x [sum]  nonsense\n\n") == {}
    assert parse_serverstats("nodeID reqs qlen bsy\n     1  abc 1 2\n")[1][0].values == {"qlen": 1, "bsy": 2}


# ------------------------------------------------------------------ the collector


def test_golden_and_promtool(tmp_path, update_golden):
    runner = FakeRunner(tables())
    text = render(collector(tmp_path, runner).collect())
    check_golden(GOLDEN / "beegfs.prom", text, update_golden)
    assert_promtool_clean(GOLDEN / "beegfs.prom")
    # one run per mode for the one mount in /proc/mounts, each with --mount and without a shell
    assert sorted(a[1:3] for a in runner.calls) == [
        ("--mount=/mnt/beegfs", "--clientstats"), ("--mount=/mnt/beegfs", "--listtargets"),
        ("--mount=/mnt/beegfs", "--listtargets"), ("--mount=/mnt/beegfs", "--serverstats"),
        ("--mount=/mnt/beegfs", "--serverstats")]
    assert ("--serverstats", "--nodetype=meta", "--perserver", "--names") in {a[2:] for a in runner.calls}
    s = samples(text)
    fs = (("fs", "/mnt/beegfs"),)
    # only this node's own address (client_info: 10.10.0.11) counts, not the sum or other clients
    assert s[("gangwatch_beegfs_client_read_bytes_total", fs)] == 2.19431e11
    assert s[("gangwatch_beegfs_client_operations_total", fs + (("operation", "reads"),))] == 52311
    t = (("fs", "/mnt/beegfs"), ("state", "queued"), ("target", "/mnt/beegfs:target302"))
    assert s[("gangwatch_beegfs_target_server_requests", t)] == 57
    assert s[("gangwatch_beegfs_target_reachability", (("fs", "/mnt/beegfs"), ("nodetype", "storage"),
                                                        ("state", "Offline"), ("target", "/mnt/beegfs:target302")))] == 1
    # metadata servers: requests without bytes, in their own families (never mixed with storage servers')
    assert s[("gangwatch_beegfs_meta_server_requests", (("fs", "/mnt/beegfs"), ("server", "meta02"), ("state", "queued")))] == 2
    assert s[("gangwatch_beegfs_meta_server_requests_per_second", (("fs", "/mnt/beegfs"), ("server", "meta01")))] == 4120
    assert not [k for k in s if k[0] == "gangwatch_beegfs_server_requests_per_second" and ("server", "meta01") in k[1]]
    assert s[("gangwatch_beegfs_target_consistency", (("fs", "/mnt/beegfs"), ("nodetype", "meta"),
                                                       ("state", "Good"), ("target", "/mnt/beegfs:meta2")))] == 1


def test_a_mount_listed_twice_is_queried_once(tmp_path):
    proc = tmp_path / "proc"
    (proc / "fs").mkdir(parents=True)
    (proc / "fs" / "beegfs").symlink_to(PROC / "fs" / "beegfs", target_is_directory=True)
    (proc / "mounts").write_text((PROC / "mounts").read_text() * 2)
    runner = FakeRunner(tables())
    text = render(collector(tmp_path, runner, procfs=proc).collect())
    assert len(runner.calls) == len(MODES)  # one run per mode
    assert text.count('gangwatch_beegfs_client_read_bytes_total{fs="/mnt/beegfs"}') == 1


def test_client_address_flag_overrides_client_info(tmp_path):
    text = render(collector(tmp_path, FakeRunner(tables()), collector_beegfs_client_address=["10.10.0.12"]).collect())
    assert samples(text)[("gangwatch_beegfs_client_read_bytes_total", (("fs", "/mnt/beegfs"),))] == 2.91302e6


def test_nothing_installed_is_no_data_and_procfs_alone_still_reports(tmp_path):
    empty = tmp_path / "proc"
    empty.mkdir()
    with pytest.raises(NoData):
        list(collector(tmp_path, FakeRunner({}), procfs=empty,
                       collector_beegfs_ctl_path=str(tmp_path / "absent")).collect())
    text = render(collector(tmp_path, FakeRunner({}), collector_beegfs_ctl_path=str(tmp_path / "absent")).collect())
    assert 'gangwatch_beegfs_client_target_reachability{session="4e2f-5d5a5b1c-gpu001",nodetype="storage",' \
           'target="target302",state="Offline"} 1' in text
    assert "gangwatch_beegfs_command" not in text


def test_failing_and_garbage_commands_are_errors_with_the_rest_kept(tmp_path):
    t = tables()
    t["serverstats"] = CommandResult(("beegfs-ctl",), 1, "", "Communication error", 0.01)
    t["meta"] = "Unexpected output\n"
    s = samples(render(collector(tmp_path, FakeRunner(t)).collect()))
    err = lambda cmd: s[("gangwatch_beegfs_command_error", (("command", cmd), ("fs", "/mnt/beegfs")))]
    assert (err("serverstats"), err("listmeta"), err("listtargets"), err("clientstats")) == (1, 1, 0, 0)
    # without the servers' rows no target gets a load figure: unknown, not idle
    assert not any(k[0] == "gangwatch_beegfs_target_server_requests" for k in s)
    assert s[("gangwatch_beegfs_target_info", (("fs", "/mnt/beegfs"), ("nodetype", "storage"), ("server", "stor01"),
                                               ("target", "/mnt/beegfs:target101"), ("target_id", "101")))] == 1


@pytest.fixture
def hanging_ctl(tmp_path):
    """A real beegfs-ctl stand-in that hangs (a management daemon that does not answer)."""
    path = tmp_path / "hang" / "beegfs-ctl"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    path.chmod(0o755)
    return str(path)


def test_hanging_beegfs_ctl_never_hangs_the_scrape(tmp_path, hanging_ctl):
    col = BeegfsCollector(Context(paths=Paths(procfs=str(PROC)), runner=CommandRunner(), options={
        "collector_beegfs_ctl_path": hanging_ctl, "collector_beegfs_wait": 0.5, "collector_beegfs_timeout": 1.0}))
    scraper = Scraper([col], timeout=0.9, cache_ttl=0)
    try:
        t0 = time.monotonic()
        first = scraper.scrape().body().decode()
        assert 0.5 <= time.monotonic() - t0 < 1.0  # waited for the runs it started
        assert 'gangwatch_scrape_collector_success{collector="beegfs"} 1' in first
        # the runs are still stuck: the next scrape does not wait for them again
        t0 = time.monotonic()
        scraper.scrape()
        assert time.monotonic() - t0 < 0.5
        time.sleep(1.6)  # the runner kills each command at its 1 s timeout
        t0 = time.monotonic()
        second = scraper.scrape().body().decode()
        assert time.monotonic() - t0 < 1.0
        assert 'gangwatch_beegfs_command_timeout{command="serverstats",fs="/mnt/beegfs"} 1' in second
        assert 'gangwatch_beegfs_command_error{command="serverstats",fs="/mnt/beegfs"} 0' in second
        # one run per command at a time: no pile of stuck processes
        assert len(col.probes) == len(MODES)
    finally:
        scraper.close()


def test_missing_beegfs_ctl_binary_with_procfs_is_reported_quietly(tmp_path):
    col = BeegfsCollector(Context(paths=Paths(procfs=str(PROC)), runner=CommandRunner(),
                                  options={"collector_beegfs_ctl_path": "beegfs-ctl-not-installed-here"}))
    text = render(col.collect())
    assert "gangwatch_beegfs_client_target_reachability" in text and "gangwatch_beegfs_command_error" not in text


# ------------------------------------------------------------------ a gang stalled on a BeeGFS target


def _serverstats(rows) -> str:
    """serverstats text in ModeIOStat's print format: rows of (num, write KiB, read KiB, reqs, qlen, bsy, name)."""
    text = "\n===== time index: 1767225598 =====\n\n%6s %9s %9s %6s %6s %3s name\n" % (
        "nodeID", "write_KiB", "read_KiB", "reqs", "qlen", "bsy")
    return text + "".join("%6s %9.0f %9.0f %6u %6u %3u %s\n" % r for r in rows) + "\n"


def _listtargets(n_servers: int) -> str:
    head = "%8s %16s %12s %8s\n%8s %16s %12s %8s\n" % ("TargetID", "Reachability", "Consistency", "NodeID",
                                                      "========", "============", "===========", "======")
    return head + "".join("%8hu %16s %12s   beegfs-storage stor%02d [ID: %d]\n" % (s * 100 + k, "Online", "Good", s, s)
                          for s in range(1, n_servers + 1) for k in (1, 2))


def _clientstats(ip: str, read_bytes: float, reads: int) -> str:
    return "%-16s%d [sum]  %d [ops-rd]  %g [B-rd]  0 [ops-wr]  0 [B-wr]  \n" % (ip, reads, reads, read_bytes)


def test_gang_stalled_on_a_slow_beegfs_target_names_the_target(tmp_path):
    """Eight nodes scraped every 15 s for 20 minutes; the BeeGFS part of each scrape comes from the
    collector itself. Storage server stor03 (targets 301, 302) backs up in the last 10 steps while
    gang A's GPUs starve and its readers wait."""
    from collectors.slurm.model import Job, NodeAllocation
    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.build import RawStore
    from dashboard.sources.exposition import Sample

    T, G, step, end = 80, 4, 15.0, 1_767_225_600.0
    nodes = [f"gpu{i:03d}" for i in range(8)]
    gang_a, gang_b = nodes[:4], nodes[4:]
    rng = np.random.default_rng(7)
    store = RawStore()
    read_total = {n: 1e12 for n in nodes}
    psi_total = {n: 0.0 for n in nodes}
    proc = tmp_path / "proc"
    proc.mkdir()
    for k in range(T):
        ts = end - step * (T - 1 - k)
        stalled = k >= T - 10
        servers = [(s, 10240, 409600, int(rng.integers(760, 840)), int(rng.integers(0, 2)), int(rng.integers(2, 4)),
                    f"stor{s:02d}") for s in range(1, 5)]
        if stalled:
            servers[2] = (3, 0, 2048, 6, 57, 64, "stor03")
        for i, n in enumerate(nodes):
            slow = stalled and n in gang_a
            read_total[n] += (2e7 if slow else 4e8) * step
            psi_total[n] += (0.85 if slow else 0.02) * step
            ip = f"10.10.0.{i + 1}"
            runner = FakeRunner({"clientstats": _clientstats(ip, read_total[n], k * 1000),
                                 "serverstats": _serverstats(servers), "listtargets": _listtargets(4), "meta": ""})
            col = collector(tmp_path, runner, procfs=proc, collector_beegfs_mount=["/mnt/beegfs"],
                            collector_beegfs_client_address=[ip], collector_beegfs_modes="clientstats,serverstats,listtargets")
            text = encode(col.collect())
            inst = {"instance": f"{n}:9810"}
            for name, labels, value in iter_samples(text):
                store.add(Sample(name, {**labels, **inst}, value, ts))
            util = 0.08 if slow else 0.92
            for g in range(G):
                for name, v in (("gangwatch_gpu_utilization_ratio", util), ("gangwatch_gpu_prof_sm_active_ratio", util * 0.72)):
                    store.add(Sample(name, {"gpu": str(g), **inst}, v + rng.normal(0, 0.01), ts))
            store.add(Sample("gangwatch_pressure_waiting_seconds_total", {"resource": "io", **inst}, psi_total[n], ts))
    win = store.signals().window(end - step * (T - 1), end, step)
    assert "/mnt/beegfs:target301" in win.targets and "/mnt/beegfs" in win.targets

    def job(jid, ns):
        return Job(job_id=jid, name=f"train{jid}", user="alice", state="RUNNING", start_time=end - 7200, nodes=tuple(ns),
                   node_count=len(ns), gpus=G * len(ns),
                   allocations=tuple(NodeAllocation(x, gpus=G, gpu_indices=tuple(range(G))) for x in ns))

    d = diagnose(win, [job(1, gang_a), job(2, gang_b)])
    va = next(v for v in d.verdicts if v.jobid == "1")
    vb = next(v for v in d.verdicts if v.jobid == "2")
    assert va.state == "stalled_io" and va.culprit_kind == "target"
    # stor03 holds both: BeeGFS reports load per server, so the other is named as also slow
    assert va.culprit in ("/mnt/beegfs:target301", "/mnt/beegfs:target302")
    other = ({"/mnt/beegfs:target301", "/mnt/beegfs:target302"} - {va.culprit}).pop()
    assert any(e.note and f"also slow: {other}" in e.note for e in va.evidence)
    assert vb.state == "progressing"


def test_prometheus_queries_pair_each_exporters_latency_terms():
    """The latency ratio divides BeeGFS by BeeGFS and Lustre by Lustre (both are gangwatch_*), and the
    queued + active requests add up as they do in a bundle."""
    from dashboard.sources.prometheus import plan_queries

    (latency,) = [q for s, _, q in plan_queries() if s == "latency"]
    terms = latency.split(") or (")
    assert len(terms) == 2
    lustre, beegfs = sorted(terms, key=lambda t: "beegfs" in t)
    assert "gangwatch_lustre_client_target_operation_latency_seconds_total" in lustre and "beegfs" not in lustre
    assert "sum by" in beegfs and "(gangwatch_beegfs_target_server_requests)" in beegfs
    assert "avg by" in beegfs and "gangwatch_beegfs_target_server_requests_per_second" in beegfs
    assert "lustre" not in beegfs
