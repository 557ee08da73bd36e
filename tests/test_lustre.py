"""Lustre client and server collectors, and their parsers, on real captured trees and lctl dumps.

Fixtures (read in place from ../shared/fixtures): HPE's and GSI's lustre_exporter procfs/sysfs
trees (Lustre 2.10), whamcloud/lustrefs-exporter's `lctl get_param` dumps (2.14/2.15, modern
job_stats) and DataDog's Lustre 2.15 job_stats (exporters-real/lustre). Expected values marked
"HPE" are those HewlettPackard/lustre_exporter's own test states (lustre_exporter_test.go at
63e0aba8, the commit the fixture tree comes from).
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.exposition import encode, iter_samples
from collectors.lustre_parse import (fs_of_target, parse_hist, parse_import, parse_job_stats, parse_rpc_stats,
                                     parse_stats, slurm_job_id, split_client_device, split_lctl_output,
                                     unquote_job_id)
from collectors.node.lustre_client import LustreClientCollector
from collectors.node.lustre_server import LustreServerCollector
from collectors.registry import Context, NoData, Paths
from collectors.runner import CommandResult
from collectors.scrape import Scraper
from tests.conftest import which
from tests.support.golden import check_golden

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="session")
def hpe(fixtures_dir) -> Path:
    return fixtures_dir / "HewlettPackard_lustre_exporter"


@pytest.fixture(scope="session")
def gsi_full(tmp_path_factory, fixtures_dir) -> Path:
    """GSI's complete tree, unpacked from its archive into a temp dir: the Lustre device folders
    the collectors glob (all their files, not only the ones they read), to keep the unpacking quick."""
    dest = tmp_path_factory.mktemp("gsi-lustre")
    keep = tuple(f"proc/fs/lustre/{d}/" for d in ("llite", "osc", "osp", "mdc", "obdfilter", "mdt")) + ("sys/fs/lustre/",)
    with tarfile.open(fixtures_dir / "GSI-HPC_lustre_exporter" / "full_proc_sys_tree.tar.gz") as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(keep)]
        assert len(members) > 300
        tf.extractall(dest, members=members, filter="data")
    return dest


@pytest.fixture(scope="session")
def lctl_dir(fixtures_dir) -> Path:
    return fixtures_dir / "lustrefs-exporter" / "lctl-cmd-outputs"


def tree_ctx(root: Path, **options) -> Context:
    return Context(paths=Paths(str(root / "proc"), str(root / "sys"), "/"),
                   options={"collector_lustre_source": "files", **options})


def samples(text: str) -> dict:
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


def value(got: dict, name: str, **labels):
    return got.get((name, tuple(sorted(labels.items()))))


class FakeRunner:
    """Stands in for CommandRunner: returns a canned CommandResult and records the argv."""

    def __init__(self, stdout="", returncode=0, timed_out=False, error="", stderr=""):
        self.result = (stdout, returncode, timed_out, error, stderr)
        self.calls: list[tuple] = []

    def run(self, argv, timeout=5.0, input=None):
        self.calls.append((tuple(argv), timeout))
        out, rc, to, err, se = self.result
        return CommandResult(tuple(argv), None if (to or err) else rc, out, se, 0.01, timed_out=to, error=err)


def lctl_ctx(runner, **options) -> Context:
    return Context(paths=Paths("/nonexistent/proc", "/nonexistent/sys", "/"), runner=runner,
                   options={"collector_lustre_source": "lctl", **options})


# --------------------------------------------------------------------------------------------
# parsers on real files


def test_stats_llite_matches_hpe(hpe):
    s = parse_stats((hpe / "proc/fs/lustre/llite/lustrefs-ffff88105db50000/stats").read_text())
    assert s.lines["read_bytes"].sum == 4194304  # HPE: lustre_read_bytes_total 4.194304e+06
    assert s.lines["read_bytes"].min == s.lines["read_bytes"].max == 4194304  # HPE min/max read size
    assert s.lines["write_bytes"].samples == 89467810  # HPE: lustre_write_samples_total
    assert s.lines["write_bytes"].sum == 93813797294080  # HPE: lustre_write_bytes_total 9.381379729408e+13
    assert s.lines["inode_permission"].samples == 398 and s.lines["open"].unit == "regs"
    assert s.snapshot_time == pytest.approx(1510950459.772792457)


def test_stats_duplicate_name_keeps_first_like_hpe(hpe):
    s = parse_stats((hpe / "proc/fs/lustre/obdfilter/lustrefs-OST0000/stats").read_text())
    assert s.lines["statfs"].samples == 35359  # the file lists statfs twice; HPE reports the first
    assert s.lines["write_bytes"].sum == 16552048697344  # HPE: 1.6552048697344e+13


def test_stats_2_14_latencies_and_elapsed(fixtures_dir):
    text = (fixtures_dir / "lustrefs-exporter/lustre-collector-fixtures/valid/lustre-2-14-0/client/"
            "llite_client.txt").read_text()
    params = dict(split_lctl_output(text))
    s = parse_stats(params["llite.ai400x2-ff47bce9ca35d800.stats"])
    assert s.lines["open"] == (35955554, "usecs", 0, 172939, 3393651645)
    assert s.lines["ioctl"].sum is None and s.lines["ioctl"].samples == 114


def test_import_osc_and_mdc(hpe):
    osc = parse_import((hpe / "proc/fs/lustre/osc/lustrefs-OST0000-osc-ffff88105db50000/import").read_text())
    assert osc.state == "FULL" and osc.target == "lustrefs-OST0000_UUID"
    assert osc.current_connection == "172.20.20.5@o2ib"
    assert osc.inflight == 8 and osc.timeouts == 0 and osc.connection_attempts == 1
    assert osc.avg_waittime_seconds == pytest.approx(0.006054)
    mdc = parse_import((hpe / "proc/fs/lustre/mdc/lustrefs-MDT0000-mdc-ffff88105db50000/import").read_text())
    assert mdc.avg_waittime_seconds == pytest.approx(0.000408) and mdc.inflight == 0


def test_import_disconnected_state():
    text = "import:\n    name: x-OST0001-osc-ffff\n    target: x-OST0001_UUID\n    state: DISCONN\n" \
           "    rpcs:\n       inflight: 3\n       avg_waittime: 1500 usec\n"
    imp = parse_import(text)
    assert imp.state == "DISCONN" and imp.inflight == 3 and imp.avg_waittime_seconds == pytest.approx(0.0015)
    assert imp.current_connection is None


def test_rpc_stats_matches_hpe(hpe):
    osc = parse_rpc_stats((hpe / "proc/fs/lustre/osc/lustrefs-OST0000-osc-ffff88105db50000/rpc_stats").read_text())
    assert osc.in_flight == {"read": 0, "write": 6} and osc.pending_pages == {"write": 1244, "read": 0}
    pages = dict(osc.histograms["pages per rpc"]["write"])
    # HPE: lustre_pages_per_rpc_total{operation="write"} for sizes 1, 2, 128, 1024
    assert (pages[1], pages[2], pages[128], pages[1024]) == (1537, 1489, 117183, 16389010)
    assert dict(osc.histograms["rpcs in flight"]["write"])[3] == 4520192
    mdc = parse_rpc_stats((hpe / "proc/fs/lustre/mdc/lustrefs-MDT0000-mdc-ffff88105db50000/rpc_stats").read_text())
    # HPE reports these MDC rows as operation "read"; the file's column is "modify"
    assert dict(mdc.histograms["rpcs in flight"]["modify"]) == {0: 0, 1: 90, 2: 13, 3: 12, 4: 11, 5: 9, 6: 8, 7: 53}


def test_job_stats_2_10_matches_hpe(hpe):
    dump = parse_job_stats((hpe / "proc/fs/lustre/obdfilter/lustrefs-OST0000/job_stats").read_text())
    jobs = {j.job_id: j for j in dump.jobs}
    assert len(jobs) == 35 and dump.malformed_lines == 0
    # HPE: lustre_job_write_bytes_total / _write_samples_total / job_stats_total{punch} for job 24
    assert jobs["24"].ops["write_bytes"] == (64575, "bytes", 215147593728)
    assert jobs["24"].ops["punch"] == (1, "reqs", None)
    assert "read_bytes" not in jobs["24"].ops  # zero lines are skipped: read_bytes was 0
    assert jobs["25"].ops["write_bytes"][2] == 240823762944  # HPE: 2.40823762944e+11
    assert jobs["24"].snapshot_time == 1510782606 and jobs["24"].start_time is None


def test_job_stats_gsi_empty_job_id_is_dropped(fixtures_dir):
    text = (fixtures_dir / "GSI-HPC_lustre_exporter/proc/fs/lustre/obdfilter/lustrefs-OST0000/job_stats").read_text()
    assert text.count("- job_id:") == 36
    dump = parse_job_stats(text)
    assert len(dump.jobs) == 35 and all(j.job_id for j in dump.jobs)
    assert dump.malformed_lines == 0


def test_job_stats_2_15_quoted_ids_hist_and_times(lctl_dir):
    params = split_lctl_output((lctl_dir / "job_stats_es_2.15_B.txt").read_text())
    assert [p for p, _ in params] == ["obdfilter.es01a-OST0001.job_stats"]
    dump = parse_job_stats(params[0][1])
    ids = [j.job_id for j in dump.jobs]
    assert ids[0] == "SLURM_JOB10:0:es18kxe-co-client" and "SLURM_JOB97" in ids and len(ids) == 16
    first = dump.jobs[0]
    assert first.ops["write_bytes"] == (861, "bytes", 11025514496)
    assert first.ops["write"] == (861, "usecs", 7304967) and first.ops["punch"] == (85, "usecs", 16840)
    assert parse_hist(first.hist["write_bytes"]) == {
        32768: 1, 65536: 1, 131072: 4, 262144: 11, 524288: 8, 1 << 20: 13, 2 << 20: 21, 4 << 20: 38,
        8 << 20: 98, 16 << 20: 666}
    assert "read_bytes" not in first.hist  # all-zero read line (`hist: {  }`) skipped
    assert first.start_time == pytest.approx(1723102025.057286226)
    assert first.elapsed_time == pytest.approx(12622.830229669)
    assert [slurm_job_id(i) for i in ids[:2]] == ["10", "20"]


def test_job_stats_datadog_2_15_without_header(fixtures_dir):
    oss = parse_job_stats((fixtures_dir / "exporters-real/lustre/datadog-lustre2.15-oss-obdfilter-job_stats.txt").read_text())
    (job,) = oss.jobs
    assert job.job_id == "vim.0" and slurm_job_id(job.job_id) is None
    assert job.ops["write_bytes"] == (6, "bytes", 69957) and job.ops["sync"] == (5, "usecs", 9536)
    assert parse_hist(job.hist["write_bytes"]) == {32: 2, 4096: 1, 16384: 1, 32768: 2}
    mds = parse_job_stats((fixtures_dir / "exporters-real/lustre/datadog-lustre2.15-mdt-job_stats.txt").read_text())
    assert mds.jobs[0].ops["open"] == (4, "usecs", 535) and mds.malformed_lines == 0


def test_split_lctl_output_same_line_values(lctl_dir):
    params = dict(split_lctl_output((lctl_dir / "lctl_get_param_oss_mds_A.txt").read_text()))
    assert params["health_check"] == "healthy" and params["memused"] == "2588372501"
    assert params["ost.OSS.ost_seq.stats"].startswith("snapshot_time")
    assert parse_stats(params["obdfilter.ai400x2-OST0000.stats"]).lines["read_bytes"].sum == 58370831220736
    assert parse_stats(params["mdt.ai400x2-MDT0000.md_stats"]).lines["open"].samples == 512


@pytest.mark.parametrize("job_id, slurm", [
    ("1234", "1234"), ("1234.0", "1234"), ("1234.batch", "1234"), ("1234:0:node01", "1234"),
    ("1234.user", "1234"), ("1234_7", "1234_7"), ("job_1234", "1234"), ("job1234", "1234"),
    ("SLURM_JOB10:0:es18kxe-co-client", "10"), ("SLURM_JOB_ID=55", "55"), ("slurm-1234", "1234"),
    ("slurm_1234.0", "1234"), ("dd.0", None), ("vim.0", None), ("procname_1000", None),
    ("kworker/u8:2", None), ("ll_ost_io01_002", None), ("node_exporter:989:es-2-virt3-co", None),
    ("7zip.1000", None), ("0", None), ("", None), ("jobless", None), ("1234567890123456", None),
])
def test_slurm_job_id_rules(job_id, slurm):
    assert slurm_job_id(job_id) == slurm


def test_unquote_and_device_names():
    assert unquote_job_id('"a \\"b\\" c"') == 'a "b" c'
    assert unquote_job_id("  plain ") == "plain"
    assert split_client_device("lustrefs-OST0000-osc-ffff88105db50000") == ("lustrefs", "lustrefs-OST0000")
    assert split_client_device("my-fs-MDT0001-mdc-ffff9") == ("my-fs", "my-fs-MDT0001")
    assert split_client_device("garbage") is None
    assert split_client_device("lustrefs-OST0005-osc-MDT0000") is None  # the MDT's OSP, not a client


# --------------------------------------------------------------------------------------------
# collectors: golden outputs and agreement with HPE's expectations


def test_client_golden_hpe(hpe, update_golden):
    text = encode(LustreClientCollector(tree_ctx(hpe)).collect())
    check_golden(GOLDEN / "lustre_client_hpe.prom", text, update_golden)


def test_server_golden_hpe(hpe, update_golden):
    text = encode(LustreServerCollector(tree_ctx(hpe, collector_lustre_server_top_jobs=5)).collect())
    check_golden(GOLDEN / "lustre_server_hpe.prom", text, update_golden)


def test_server_golden_gsi_full_tree(gsi_full, update_golden):
    text = encode(LustreServerCollector(tree_ctx(gsi_full)).collect())
    check_golden(GOLDEN / "lustre_server_gsi.prom", text, update_golden)
    got = samples(text)
    # the empty job id is not a job: 35 jobs, and nothing labelled jobid=""
    assert value(got, "gangwatch_lustre_job_stats_jobs", fs="lustrefs", target="lustrefs-OST0000") == 35
    assert not any(dict(l).get("jobid") == "" for _, l in got)


def test_client_golden_gsi_full_tree(gsi_full, fixtures_dir, update_golden):
    text = encode(LustreClientCollector(tree_ctx(gsi_full)).collect())
    check_golden(GOLDEN / "lustre_client_gsi.prom", text, update_golden)
    # the full tree also lists the MDT's OSP connections under osc/ (lustrefs-OST0000-osc-MDT0000):
    # they are not client mounts, so the output equals the curated tree's, which lacks them
    curated = fixtures_dir / "GSI-HPC_lustre_exporter"
    assert text == encode(LustreClientCollector(tree_ctx(curated)).collect())
    got = samples(text)
    assert value(got, "gangwatch_lustre_client_import_connected", fs="lustrefs", target="lustrefs-MDT0000",
                 type="mdc") == 1


def test_values_agree_with_hpe_test(hpe):
    ctx = tree_ctx(hpe, collector_lustre_server_top_jobs=40)
    got = samples(encode(LustreClientCollector(ctx).collect()) + encode(LustreServerCollector(ctx).collect()))
    fs, ost, mdt = "lustrefs", "lustrefs-OST0000", "lustrefs-MDT0000"
    expected = [  # (ours, labels, HPE's value)
        ("gangwatch_lustre_client_io_bytes_total", dict(fs=fs, operation="read"), 4.194304e+06),
        ("gangwatch_lustre_client_io_bytes_total", dict(fs=fs, operation="write"), 9.381379729408e+13),
        ("gangwatch_lustre_client_operations_total", dict(fs=fs, operation="write_bytes"), 8.946781e+07),
        ("gangwatch_lustre_client_operations_total", dict(fs=fs, operation="close"), 96),
        ("gangwatch_lustre_client_operations_total", dict(fs=fs, operation="inode_permission"), 398),
        ("gangwatch_lustre_client_rpcs_by_pages_total", dict(fs=fs, type="osc", operation="write", pages="1024"),
         1.638901e+07),  # only OST0000 has write RPCs, so the per-fs sum equals HPE's per-target value
        ("gangwatch_lustre_client_rpcs_by_pages_total", dict(fs=fs, type="osc", operation="write", pages="8"), 5860),
        ("gangwatch_lustre_client_rpcs_by_in_flight_total", dict(fs=fs, type="mdc", operation="modify",
                                                                 in_flight="1"), 90),
        ("gangwatch_lustre_ost_operations_total", dict(fs=fs, target=ost, operation="statfs"), 35359),
        ("gangwatch_lustre_ost_operations_total", dict(fs=fs, target=ost, operation="ping"), 141),
        ("gangwatch_lustre_ost_operations_total", dict(fs=fs, target=ost, operation="create"), 2),
        ("gangwatch_lustre_ost_operations_total", dict(fs=fs, target=ost, operation="write_bytes"), 4.298711e+06),
        ("gangwatch_lustre_ost_io_bytes_total", dict(fs=fs, target=ost, operation="write"), 1.6552048697344e+13),
        ("gangwatch_lustre_mdt_operations_total", dict(fs=fs, target=mdt, operation="setattr"), 57),
        ("gangwatch_lustre_mdt_operations_total", dict(fs=fs, target=mdt, operation="getxattr"), 2),
        ("gangwatch_lustre_job_io_bytes_total", dict(fs=fs, target=ost, jobid="24", slurm_job="24",
                                                     operation="write"), 2.15147593728e+11),
        ("gangwatch_lustre_job_io_bytes_total", dict(fs=fs, target=ost, jobid="24", slurm_job="24",
                                                     operation="read"), 0),
        ("gangwatch_lustre_job_io_bytes_total", dict(fs=fs, target=ost, jobid="51", slurm_job="51",
                                                     operation="write"), 2.196652032e+10),
        ("gangwatch_lustre_job_operations_total", dict(fs=fs, target=ost, jobid="24", slurm_job="24",
                                                       operation="write_bytes"), 64575),
        ("gangwatch_lustre_job_operations_total", dict(fs=fs, target=ost, jobid="24", slurm_job="24",
                                                       operation="punch"), 1),
        ("gangwatch_lustre_job_operations_total", dict(fs=fs, target=mdt, jobid="43", slurm_job="43",
                                                       operation="setattr"), 1),
    ]
    for name, labels, want in expected:
        assert value(got, name, **labels) == pytest.approx(want), (name, labels)


def test_import_metrics(hpe):
    got = samples(encode(LustreClientCollector(tree_ctx(hpe)).collect()))
    lbl = dict(fs="lustrefs", target="lustrefs-OST0000", type="osc")
    assert value(got, "gangwatch_lustre_client_import_rpc_wait_average_seconds", **lbl) == pytest.approx(0.006054)
    assert value(got, "gangwatch_lustre_client_import_rpcs_in_flight", **lbl) == 8
    assert value(got, "gangwatch_lustre_client_import_connected", **lbl) == 1
    assert value(got, "gangwatch_lustre_client_import_info", state="FULL", connection="172.20.20.5@o2ib", **lbl) == 1
    assert value(got, "gangwatch_lustre_client_target_rpcs_in_flight", operation="write", **lbl) == 6


def test_rpc_wait_max_is_the_slowest_import_per_fs_and_type(hpe, tmp_path):
    def check(got: dict) -> dict:
        per_target = {}
        for (name, labels), v in got.items():
            if name == "gangwatch_lustre_client_import_rpc_wait_average_seconds":
                lbl = dict(labels)
                key = (("fs", lbl["fs"]), ("type", lbl["type"]))
                per_target[key] = max(per_target.get(key, v), v)
        rollup = {labels: v for (name, labels), v in got.items()
                  if name == "gangwatch_lustre_client_import_rpc_wait_max_seconds"}
        assert rollup == per_target
        return rollup

    # the real tree: 7 OSC imports (331 to 6054 usec) and one MDC
    assert check(samples(encode(LustreClientCollector(tree_ctx(hpe)).collect()))) == {
        (("fs", "lustrefs"), ("type", "osc")): pytest.approx(0.006054),
        (("fs", "lustrefs"), ("type", "mdc")): pytest.approx(0.000408)}
    # a copy where OST0003 stalls while reconnecting, another filesystem appears and one of its
    # imports says nothing about waits
    lustre = tmp_path / "proc" / "fs" / "lustre"
    for kind in ("osc", "mdc"):
        shutil.copytree(hpe / "proc/fs/lustre" / kind, lustre / kind)
    ost3 = lustre / "osc/lustrefs-OST0003-osc-ffff88105db50000/import"
    ost3.write_text(ost3.read_text().replace("state: FULL", "state: CONNECTING")
                    .replace("avg_waittime: 340 usec", "avg_waittime: 2500000 usec"))
    for target, wait in (("OST0000", "       avg_waittime: 1200 usec\n"), ("OST0001", "")):
        imp = lustre / f"osc/scratch-{target}-osc-ffff88105db50000/import"
        imp.parent.mkdir()
        imp.write_text(f"import:\n    name: scratch-{target}-osc-ffff88105db50000\n    target: scratch-{target}_UUID\n"
                       f"    state: FULL\n    rpcs:\n       inflight: 0\n{wait}")
    got = samples(encode(LustreClientCollector(tree_ctx(tmp_path)).collect()))
    assert check(got) == {
        (("fs", "lustrefs"), ("type", "osc")): pytest.approx(2.5),
        (("fs", "lustrefs"), ("type", "mdc")): pytest.approx(0.000408),
        (("fs", "scratch"), ("type", "osc")): pytest.approx(0.0012)}
    # the import_info state label stays: what an alert's {state!="FULL"} selects
    not_full = {dict(l)["target"]: dict(l)["state"] for n, l in got
                if n == "gangwatch_lustre_client_import_info" and dict(l)["state"] != "FULL"}
    assert not_full == {"lustrefs-OST0003": "CONNECTING"}


def test_targets_io_bytes_counts_from_the_agent_start_and_never_goes_down(hpe, tmp_path):
    """One series per filesystem (what the diagnosis reads instead of one per OST): 0 at the agent's
    start, read and write alike (read or not: a reader tells this agent from an older one by it),
    then the per-target counters' growth added up across scrapes. It never goes down when a target
    is unreadable for a scrape, goes away or has its stats cleared (`rate()` would read a reset),
    nor jumps by a target's whole history when that target is first read late."""
    name = "gangwatch_lustre_client_targets_io_bytes_total"
    read, write = ((("fs", "lustrefs"), ("operation", op), ("type", "osc")) for op in ("read", "write"))
    got = samples(encode(LustreClientCollector(tree_ctx(hpe)).collect()))
    assert {labels: v for (n, labels), v in got.items() if n == name} == {read: 0, write: 0}
    lustre = tmp_path / "proc" / "fs" / "lustre"
    shutil.copytree(hpe / "proc/fs/lustre/osc", lustre / "osc")
    stats = lustre / "osc/lustrefs-OST0000-osc-ffff88105db50000/stats"
    original = stats.read_text()
    collector = LustreClientCollector(tree_ctx(tmp_path))

    def total() -> float:
        return samples(encode(collector.collect()))[(name, write)]

    assert total() == 0
    stats.write_text(original.replace("65298098221056", "65298098225152"))  # one more 4 KiB write
    assert total() == 4096
    parked = tmp_path / "parked"
    stats.rename(parked)  # unreadable for a scrape (or the OSC gone): the total stays where it was
    assert total() == 4096
    parked.rename(stats)  # back with the same count: not counted twice
    assert total() == 4096
    stats.write_text(original.replace("write_bytes               18210280 samples [bytes] 4096 4194304 65298098221056",
                                      "write_bytes               2 samples [bytes] 4096 4096 8192"))  # cleared, 2 writes since
    assert total() == 4096 + 8192
    late = lustre / "osc/lustrefs-OST0007-osc-ffff88105db50000"  # a target first read now, 59 TiB behind it
    shutil.copytree(stats.parent, late)
    (late / "stats").write_text(original)
    assert total() == 4096 + 8192
    (late / "stats").write_text(original.replace("65298098221056", "65298098229248"))
    assert total() == 4096 + 8192 + 8192


def test_per_target_counters_left_out_while_they_stand_still(hpe, tmp_path):
    """A per-target counter's series is exported while it moved in the last idle window (from its
    first reading on) and left out after, counted in target_idle_series; it comes back with its next
    move, for one scrape at the value it stood at (so rate() counts the growth); the per-filesystem
    totals and the imports still cover every target; 0 exports all."""
    lustre = tmp_path / "proc" / "fs" / "lustre"
    shutil.copytree(hpe / "proc/fs/lustre/osc", lustre / "osc")
    stats = lustre / "osc/lustrefs-OST0000-osc-ffff88105db50000/stats"
    original = stats.read_text()
    now = [1000.0]
    ctx = tree_ctx(tmp_path, collector_lustre_client_target_idle_seconds=600.0)
    ctx.clock = lambda: now[0]
    collector = LustreClientCollector(ctx)
    per_target = ("gangwatch_lustre_client_target_operations_total", "gangwatch_lustre_client_target_io_bytes_total",
                  "gangwatch_lustre_client_target_operation_latency_seconds_total")
    write = (("fs", "lustrefs"), ("operation", "write"), ("target", "lustrefs-OST0000"), ("type", "osc"))

    def scrape(at: float) -> tuple[dict, dict]:
        now[0] = at
        got = samples(encode(collector.collect()))
        return ({k: v for k, v in got.items() if k[0] in per_target}, got)

    first, got = scrape(1000.0)
    assert len(first) > 3 and (per_target[1], write) in first
    assert value(got, "gangwatch_lustre_client_target_idle_series") == 0
    assert scrape(1600.0)[0] == first  # still within the window since the first reading
    stats.write_text(original.replace("65298098221056", "65298098225152"))  # one more 4 KiB write at 1,700 s
    moved, _ = scrape(1700.0)  # back: at the value it stood at, then its own, so rate() counts the write
    assert moved == {k: v for k, v in first.items() if k[1] == write}
    assert scrape(1715.0)[0][(per_target[1], write)] == 65298098225152
    kept, got = scrape(2250.0)  # 1,250 s after the first reading, 550 s after the write
    assert set(kept) == {k for k in first if k[1] == write}  # only the write's own counters moved
    assert value(got, "gangwatch_lustre_client_target_idle_series") == len(first) - len(kept)
    total = ("gangwatch_lustre_client_targets_io_bytes_total", (("fs", "lustrefs"), ("operation", "write"), ("type", "osc")))
    assert got[total] == 4096  # the totals count every target
    assert value(got, "gangwatch_lustre_client_import_connected", fs="lustrefs", target="lustrefs-OST0000", type="osc") == 1
    assert scrape(2400.0)[0] == {}  # 700 s after the write: nothing moved
    stats.rename(tmp_path / "parked")  # unreadable for a scrape: not new when it is back unchanged
    scrape(2415.0)
    (tmp_path / "parked").rename(stats)
    assert scrape(2430.0)[0] == {}
    stats.write_text(original.replace("65298098221056", "65298098229248"))  # moves again: back
    assert scrape(2445.0)[0] == {(per_target[1], write): 65298098225152}
    assert scrape(2460.0)[0] == {(per_target[1], write): 65298098229248}
    everything = tree_ctx(tmp_path, collector_lustre_client_target_idle_seconds=0.0)
    everything.clock = lambda: now[0]
    allc = LustreClientCollector(everything)
    for at in (1000.0, 5000.0):
        now[0] = at
        got = samples(encode(allc.collect()))
        assert len({k for k in got if k[0] in per_target}) == len(first)
        assert value(got, "gangwatch_lustre_client_target_idle_series") is None


def test_rpc_wait_max_left_out_without_waits(tmp_path):
    imp = tmp_path / "proc/fs/lustre/mdc/scratch-MDT0000-mdc-ffff88105db50000/import"
    imp.parent.mkdir(parents=True)
    imp.write_text("import:\n    name: scratch-MDT0000-mdc-ffff88105db50000\n    target: scratch-MDT0000_UUID\n"
                   "    state: DISCONN\n")
    got = samples(encode(LustreClientCollector(tree_ctx(tmp_path)).collect()))
    assert value(got, "gangwatch_lustre_client_import_connected", fs="scratch", target="scratch-MDT0000",
                 type="mdc") == 0
    assert not any(n == "gangwatch_lustre_client_import_rpc_wait_max_seconds" for n, _ in got)


def test_per_target_histograms_flag(hpe):
    got = samples(encode(LustreClientCollector(
        tree_ctx(hpe, collector_lustre_client_per_target_histograms=True)).collect()))
    assert value(got, "gangwatch_lustre_client_rpcs_by_pages_total", fs="lustrefs", target="lustrefs-OST0000",
                 type="osc", operation="write", pages="1024") == 16389010


def lctl_dump(lctl_dir: Path, *names: str) -> str:
    return "".join((lctl_dir / n).read_text().rstrip("\n") + "\n" for n in names)


def test_server_golden_lctl_2_15(lctl_dir, update_golden):
    runner = FakeRunner(lctl_dump(lctl_dir, "lctl_get_param_oss_mds_A.txt", "job_stats_es_2.15_A.txt",
                                  "job_stats_es_2.15_B.txt"))
    text = encode(LustreServerCollector(lctl_ctx(runner, collector_lustre_server_top_jobs=3)).collect())
    check_golden(GOLDEN / "lustre_server_lctl.prom", text, update_golden)
    argv, _ = runner.calls[0]
    assert argv[:2] == ("lctl", "get_param") and "obdfilter.*.job_stats" in argv
    got = samples(text)
    ost = dict(fs="es01a", target="es01a-OST0001")
    assert value(got, "gangwatch_lustre_job_stats_jobs", **ost) == 16
    # top 3 by bytes + _other == _total, for every operation
    tot = {l: v for (n, l), v in got.items() if n == "gangwatch_lustre_job_io_bytes_total"
           and dict(l)["target"] == "es01a-OST0001"}
    for op in ("read", "write"):
        per = [v for l, v in tot.items() if dict(l)["operation"] == op and dict(l)["jobid"] != "_total"]
        assert sum(per) == value(got, "gangwatch_lustre_job_io_bytes_total", jobid="_total", slurm_job="",
                                 operation=op, **ost)
    tops = {dict(l)["jobid"] for l in tot if dict(l)["jobid"] not in ("_other", "_total")}
    assert len(tops) == 3 and all(j.startswith("SLURM_JOB") for j in tops)
    assert value(got, "gangwatch_lustre_job_stats_io_size_requests_total", operation="write",
                 size_bytes=str(16 << 20), **ost) > 0
    assert value(got, "gangwatch_lustre_command_error", collector="lustre_server", command="lctl get_param") == 0


def test_client_golden_lctl_2_14(fixtures_dir, update_golden):
    text = (fixtures_dir / "lustrefs-exporter/lustre-collector-fixtures/valid/lustre-2-14-0/client/"
            "llite_client.txt").read_text()
    out = encode(LustreClientCollector(lctl_ctx(FakeRunner(text, returncode=2))).collect())
    check_golden(GOLDEN / "lustre_client_lctl.prom", out, update_golden)
    got = samples(out)
    assert value(got, "gangwatch_lustre_client_operation_latency_seconds_total", fs="ai400x2",
                 operation="open") == pytest.approx(3393.651645)
    # lctl exits non-zero when a pattern matches nothing (no osc here) but its output is used
    assert value(got, "gangwatch_lustre_command_exit_code", collector="lustre_client", command="lctl get_param") == 2
    assert value(got, "gangwatch_lustre_command_error", collector="lustre_client", command="lctl get_param") == 0


@pytest.mark.skipif(which("promtool") is None, reason="promtool not installed")
def test_golden_outputs_pass_promtool():
    import subprocess

    for path in sorted(GOLDEN.glob("lustre_*.prom")):
        res = subprocess.run(["promtool", "check", "metrics"], input=path.read_bytes(), capture_output=True,
                             timeout=30)
        # promtool lints (exit 3) only for style nits; a real format error is exit 1
        assert res.returncode in (0, 3), (path.name, res.stdout, res.stderr)
        assert b"error" not in res.stderr.lower() or res.returncode == 3, (path.name, res.stderr)


# --------------------------------------------------------------------------------------------
# bounded cardinality


def synth_job(job_id: str, read: int, write: int, ops: int = 1) -> str:
    def line(name, samples, unit, total):
        return (f"  {name + ':':<17}{{ samples: {samples:>11}, unit: {unit}, min: 1, max: 9, "
                f"sum: {total:>12}, sumsq: 5 }}")
    return "\n".join([f"- job_id:          {job_id}", "  snapshot_time:   1700000000.5 secs.nsecs",
                      line("read_bytes", 1 if read else 0, "bytes", read),
                      line("write_bytes", 1 if write else 0, "bytes", write),
                      line("punch", ops, "usecs", 3 * ops)])


def test_top_k_other_and_total():
    jobs = [synth_job(str(1000 + i), read=i * 10, write=i * 100) for i in range(1, 51)]
    text = "obdfilter.fs1-OST0000.job_stats=\njob_stats:\n" + "\n".join(jobs) + "\n"
    got = samples(encode(LustreServerCollector(lctl_ctx(FakeRunner(text), collector_lustre_server_top_jobs=20)).collect()))
    ids = {dict(l)["jobid"] for n, l in got if n == "gangwatch_lustre_job_io_bytes_total"}
    assert ids == {str(1000 + i) for i in range(31, 51)} | {"_other", "_total"}
    lbl = dict(fs="fs1", target="fs1-OST0000", slurm_job="", operation="write")
    assert value(got, "gangwatch_lustre_job_io_bytes_total", jobid="_total", **lbl) == sum(i * 100 for i in range(1, 51))
    assert value(got, "gangwatch_lustre_job_io_bytes_total", jobid="_other", **lbl) == sum(i * 100 for i in range(1, 31))
    assert value(got, "gangwatch_lustre_job_operations_total", jobid="_total", fs="fs1", target="fs1-OST0000",
                 slurm_job="", operation="punch") == 50
    series = sum(1 for n, l in got if n.startswith("gangwatch_lustre_job_") and dict(l).get("jobid"))
    assert series <= 22 * 6  # bounded by K, not by the number of jobs


def test_top_zero_exports_only_buckets():
    text = "obdfilter.fs1-OST0000.job_stats=\njob_stats:\n" + synth_job("77", 5, 5) + "\n"
    got = samples(encode(LustreServerCollector(lctl_ctx(FakeRunner(text), collector_lustre_server_top_jobs=0)).collect()))
    assert {dict(l)["jobid"] for n, l in got if "jobid" in dict(l)} == {"_other", "_total"}


def test_hostile_job_ids_are_data():
    ids = ['"quoted \\"id\\" with spaces"', "kworker/u8:2", "ll_ost_io01_002", '"ünïcødé-作业-1234"',
           "_total", '"back\\\\slash"', '"new{line}=x"', "x" * 500]
    text = "obdfilter.fs1-OST0000.job_stats=\njob_stats:\n" + "\n".join(
        synth_job(j, 10 + i, 10 + i) for i, j in enumerate(ids)) + "\n"
    out = encode(LustreServerCollector(lctl_ctx(FakeRunner(text))).collect())
    got = samples(out)  # the exposition parses back: every id was escaped
    jobids = {dict(l)["jobid"]: dict(l)["slurm_job"] for n, l in got if n == "gangwatch_lustre_job_io_bytes_total"}
    assert jobids['quoted "id" with spaces'] == ""
    assert jobids["kworker/u8:2"] == "" and jobids["ll_ost_io01_002"] == ""
    assert "ünïcødé-作业-1234" in jobids and "back\\slash" in jobids and "new{line}=x" in jobids
    assert "__total" in jobids  # a real job named like a bucket cannot collide with it
    assert max(len(j) for j in jobids) == 200


# --------------------------------------------------------------------------------------------
# bad input


def test_truncated_job_stats_keeps_what_was_read(lctl_dir):
    text = (lctl_dir / "job_stats_es_2.15_B.txt").read_text()
    full = parse_job_stats(text)
    for cut in (len(text) // 3, len(text) // 2 + 17, len(text) - 40):
        dump = parse_job_stats(text[:cut])
        assert 0 < len(dump.jobs) <= len(full.jobs)
        assert [j.job_id for j in dump.jobs] == [j.job_id for j in full.jobs][:len(dump.jobs)]
    mid_line = text[:text.index("write_bytes", 1000) + 30]
    assert parse_job_stats(mid_line).malformed_lines >= 1


def test_truncated_dump_through_collector(lctl_dir):
    text = (lctl_dir / "job_stats_es_2.15_B.txt").read_text()
    # cut in the middle of a number: "sum: 11014340608" of SLURM_JOB29's writes becomes "sum: 1101"
    text = text[:text.index("sum:      11014340608") + len("sum:      1101")]
    got = samples(encode(LustreServerCollector(lctl_ctx(FakeRunner(text), collector_lustre_server_top_jobs=5)).collect()))
    ost = dict(fs="es01a", target="es01a-OST0001")
    assert value(got, "gangwatch_lustre_job_stats_malformed_lines", **ost) == 1
    assert value(got, "gangwatch_lustre_job_stats_jobs", **ost) == 3
    # the cut line is not trusted: no write bytes for that job rather than a wrong number
    assert value(got, "gangwatch_lustre_job_io_bytes_total", jobid="SLURM_JOB29:0:es18kxe-co-client",
                 slurm_job="29", operation="write", **ost) == 0


def test_lctl_nonzero_exit_without_output():
    runner = FakeRunner("", returncode=1, stderr="error: get_param: param_path 'osc/*/stats': No such file\n")
    got = samples(encode(LustreClientCollector(lctl_ctx(runner)).collect()))
    lbl = dict(collector="lustre_client", command="lctl get_param")
    assert value(got, "gangwatch_lustre_command_error", **lbl) == 1
    assert value(got, "gangwatch_lustre_command_exit_code", **lbl) == 1
    assert value(got, "gangwatch_lustre_command_timeout", **lbl) == 0


@pytest.mark.parametrize("garbage", ["\x00\x01binary\xff junk\n", "Segmentation fault\n",
                                     "osc.x.stats=\nnot a stats line at all\n", "{ samples: 1 }\n" * 10])
def test_lctl_garbage_is_an_error_metric(garbage):
    got = samples(encode(LustreClientCollector(lctl_ctx(FakeRunner(garbage))).collect()))
    lbl = dict(collector="lustre_client", command="lctl get_param")
    bad = value(got, "gangwatch_lustre_command_error", **lbl) == 1 or \
        value(got, "gangwatch_lustre_parse_failures", collector="lustre_client") >= 1
    assert bad
    assert not any(n.startswith("gangwatch_lustre_client_") for n, _ in got)


def test_lctl_not_found_is_an_error():
    runner = FakeRunner(error="FileNotFoundError: [Errno 2] No such file or directory: 'lctl'")
    got = samples(encode(LustreServerCollector(lctl_ctx(runner)).collect()))
    assert value(got, "gangwatch_lustre_command_error", collector="lustre_server", command="lctl get_param") == 1


def test_no_lustre_is_quiet(tmp_path):
    ctx = Context(paths=Paths(str(tmp_path / "proc"), str(tmp_path / "sys"), "/"),
                  options={"collector_lustre_lctl_path": str(tmp_path / "no-lctl")})
    for cls in (LustreClientCollector, LustreServerCollector):
        with pytest.raises(NoData):
            cls(ctx).collect()


def test_auto_lctl_that_finds_nothing_is_quiet(tmp_path):
    # a server node asked for client parameters: lctl prints only errors and exits non-zero
    lctl = fake_lctl(tmp_path, "echo \"error: get_param: param_path 'llite/*/stats': No such file or directory\" >&2; exit 2")
    ctx = Context(paths=Paths(str(tmp_path / "p"), str(tmp_path / "s"), "/"),
                  options={"collector_lustre_lctl_path": lctl})
    with pytest.raises(NoData):
        LustreClientCollector(ctx).collect()
    forced = Context(paths=ctx.paths, options={**ctx.options, "collector_lustre_source": "lctl"})
    got = samples(encode(LustreClientCollector(forced).collect()))
    assert value(got, "gangwatch_lustre_command_error", collector="lustre_client", command="lctl get_param") == 1
    assert value(got, "gangwatch_lustre_command_exit_code", collector="lustre_client", command="lctl get_param") == 2


def fake_lctl(tmp_path: Path, body: str) -> str:
    path = tmp_path / "lctl"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.skipif(shutil.which("sleep") is None, reason="needs sleep(1)")
def test_hanging_lctl_is_a_timeout_metric_within_the_scrape_deadline(tmp_path):
    lctl = fake_lctl(tmp_path, "exec sleep 30")
    ctx = Context(paths=Paths(str(tmp_path / "p"), str(tmp_path / "s"), "/"),
                  options={"collector_lustre_lctl_path": lctl, "scrape_timeout": 0.9})
    scraper = Scraper([LustreServerCollector(ctx), LustreClientCollector(ctx)], timeout=0.9, cache_ttl=0)
    try:
        start = time.monotonic()
        text = scraper.scrape().text
        assert time.monotonic() - start < 1.2
    finally:
        scraper.close()
    got = samples(text)
    for name in ("lustre_server", "lustre_client"):
        assert value(got, "gangwatch_lustre_command_timeout", collector=name, command="lctl get_param") == 1
        assert value(got, "gangwatch_scrape_collector_success", collector=name) == 1


def test_real_lctl_script_through_auto_source(tmp_path, lctl_dir):
    lctl = fake_lctl(tmp_path, f"cat '{lctl_dir / 'job_stats_es_2.15_A.txt'}'")
    ctx = Context(paths=Paths(str(tmp_path / "p"), str(tmp_path / "s"), "/"),
                  options={"collector_lustre_lctl_path": lctl})
    got = samples(encode(LustreServerCollector(ctx).collect()))
    assert value(got, "gangwatch_lustre_job_stats_jobs", fs="es02a", target="es02a-MDT0000") == 7


# --------------------------------------------------------------------------------------------
# property-based: no exception escapes, and generated dumps round-trip

TOKENS = list("{}[]:,.-_= \n\t\"'|%#0123456789abcdefghijklmnopqrstuvwxyzKMG") + [
    "samples", "unit", "sum", "hist", "job_id", "- job_id:", "usecs", "bytes", "import:", "state:", "rpcs",
    " in flight", "\u4f5c", "\x00", "snapshot_time:", " secs.nsecs", "=", "obdfilter.x-OST0000.job_stats="]
lustreish = st.lists(st.sampled_from(TOKENS), max_size=120).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=300), lustreish))
def test_parsers_never_raise(text):
    parse_stats(text)
    parse_rpc_stats(text)
    parse_import(text)
    dump = parse_job_stats(text)
    # each job starts on a line of its own, and a line is counted malformed at most once
    assert len(dump.jobs) + dump.malformed_lines <= text.count("\n") + 1
    for job in dump.jobs:
        assert job.job_id
        for samples_, _unit, total in job.ops.values():
            assert samples_ > 0 and (total is None or total >= 0)
        for raw in job.hist.values():
            assert all(k > 0 and v >= 0 for k, v in parse_hist(raw).items())
    parse_hist(text)
    split_lctl_output(text)
    slurm_job_id(text)
    unquote_job_id(text)
    split_client_device(text)
    fs_of_target(text)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True).filter(
           lambda n: n not in ("snapshot_time", "start_time", "elapsed_time")),
       st.tuples(st.integers(0, 10**15), st.sampled_from(["bytes", "usecs", "usec", "reqs", "regs"]),
                 st.integers(0, 10**12)), min_size=1, max_size=12))
def test_stats_round_trip(lines):
    text = "snapshot_time             1510950459.772792457 secs.nsecs\n" + "".join(
        f"{name:<25} {n} samples [{unit}]" + (f" {total // 3} {total} {total} {total * 7}" if unit != "regs" else "")
        + "\n" for name, (n, unit, total) in lines.items())
    got = parse_stats(text)
    assert got.snapshot_time == pytest.approx(1510950459.772792457)
    for name, (n, unit, total) in lines.items():
        want = (n, unit, None, None, None) if unit == "regs" else (n, unit, total // 3, total, total)
        assert got.lines[name] == want


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["FULL", "DISCONN", "CONNECTING", "REPLAY", "EVICTED", "CLOSED"]),
       st.integers(0, 10**6), st.integers(0, 10**9), st.integers(0, 500), st.booleans())
def test_import_round_trip(state, inflight, wait_usec, timeouts, with_connection):
    text = ("import:\n    name: fs-OST0001-osc-ffff\n    target: fs-OST0001_UUID\n"
            f"    state: {state}\n    connect_flags: [ write_grant, server_lock ]\n"
            "    connection:\n       failover_nids: [ 10.0.0.1@tcp ]\n"
            + ("       current_connection: 10.0.0.1@tcp\n" if with_connection else "")
            + f"       connection_attempts: 2\n    rpcs:\n       inflight: {inflight}\n"
            f"       unregistering: 0\n       timeouts: {timeouts}\n       avg_waittime: {wait_usec} usec\n"
            "    service_estimates:\n       services: 1 sec\n")
    imp = parse_import(text)
    assert (imp.state, imp.inflight, imp.timeouts, imp.connection_attempts) == (state, inflight, timeouts, 2)
    assert imp.avg_waittime_seconds == pytest.approx(wait_usec / 1e6)
    assert imp.current_connection == ("10.0.0.1@tcp" if with_connection else None)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 64), st.integers(0, 64), st.integers(0, 10**6),
       st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=11))
def test_rpc_stats_round_trip(rif, wif, pending, rows):
    buckets = [1 << i for i in range(len(rows))]
    text = (f"snapshot_time:         1510950459.787901292 (secs.nsecs)\nread RPCs in flight:  {rif}\n"
            f"write RPCs in flight: {wif}\npending write pages:  {pending}\npending read pages:   0\n\n"
            "\t\t\tread\t\t\twrite\npages per rpc         rpcs   % cum % |       rpcs   % cum %\n"
            + "".join(f"{b}:\t\t{r:>10}   0   0   |  {w:>10}   0   0\n" for b, (r, w) in zip(buckets, rows)))
    rpc = parse_rpc_stats(text)
    assert rpc.in_flight == {"read": rif, "write": wif} and rpc.pending_pages == {"write": pending, "read": 0}
    assert rpc.histograms["pages per rpc"] == {"read": [(b, r) for b, (r, _) in zip(buckets, rows)],
                                               "write": [(b, w) for b, (_, w) in zip(buckets, rows)]}


job_ids = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=40)
op_names = st.sampled_from(["read", "write", "getattr", "setattr", "punch", "sync", "open", "close",
                            "parallel_rename_file", "prealloc", "migrate"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(job_ids, st.integers(0, 10**12), st.integers(0, 10**12),
                          st.dictionaries(op_names, st.integers(0, 10**9), max_size=6)), min_size=1, max_size=8),
       st.booleans())
def test_generated_dumps_round_trip(jobs, modern):
    """Dumps rendered in the 2.15 layout (quoted ids, sumsq, hist, usecs) or the 2.10 one (bare
    ids, `sum: N }`, `unit: reqs`) parse back to exactly what was rendered."""
    lines = ["obdfilter.fs-OST0000.job_stats=", "job_stats:"]
    expected = []
    for jid, rbytes, wbytes, ops in jobs:
        if not modern:
            jid = "".join(c for c in jid if not c.isspace() and c not in "\"'") or "1"
        quoted = '"' + jid.replace("\\", "\\\\").replace('"', '\\"') + '"' if modern else jid
        lines += [f"- job_id:          {quoted}"]
        lines += ["  snapshot_time:   1723114647.887515895 secs.nsecs",
                  "  start_time:      1723102025.057286226 secs.nsecs",
                  "  elapsed_time:    12.5 secs.nsecs"] if modern else ["  snapshot_time:   1510782606"]
        want = {}
        for name, total in (("read_bytes", rbytes), ("write_bytes", wbytes)):
            n = 1 if total else 0
            tail = f", sumsq: 0, hist: {{ 4K: {n} }} }}" if modern else " }"
            lines.append(f"  {name + ':':<17}{{ samples: {n:>11}, unit: bytes, min: 0, max: {total}, "
                         f"sum: {total:>15}" + tail)
            if n:
                want[name] = (1, "bytes", total)
        for name, n in ops.items():
            if modern:
                lines.append(f"  {name + ':':<17}{{ samples: {n:>11}, unit: usecs, min: 0, max: 0, sum: {n * 3}, "
                             f"sumsq: 0 }}")
            else:
                lines.append(f"  {name + ':':<17}{{ samples: {n:>11}, unit:  reqs }}")
            if n:
                want[name] = (n, "usecs", n * 3) if modern else (n, "reqs", None)
        expected.append((jid, want))
    dump = parse_job_stats("\n".join(lines) + "\n")
    assert dump.malformed_lines == 0
    got = [(j.job_id, j.ops) for j in dump.jobs]
    assert got == [e for e in expected if e[0].strip()]
    if modern:
        assert all(j.start_time == pytest.approx(1723102025.057286226) for j in dump.jobs)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**11), st.sampled_from(["", ".0", ".batch", ":0:node1", "_12", ".user"]),
       st.sampled_from(["", "job_", "SLURM_JOB", "slurm-", "JOB"]))
def test_slurm_job_id_property(number, suffix, prefix):
    got = slurm_job_id(f"{prefix}{number}{suffix}")
    assert got == str(number) + ("_12" if suffix == "_12" else "")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["4", "32", "4K", "64K", "1M", "16M", "1G"]), st.integers(0, 10**6), max_size=7))
def test_parse_hist_property(hist):
    raw = "hist: { " + ", ".join(f"{k}: {v}" for k, v in hist.items()) + " }"
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    want = {int(k[:-1]) * mult[k[-1]] if k[-1] in mult else int(k): v for k, v in hist.items()}
    assert parse_hist(raw) == want


def test_collectors_register_with_flags():
    from collectors.agent import build_parser

    args = build_parser().parse_args(["--collector.lustre.lctl-path", "/opt/lustre/lctl",
                                      "--collector.lustre_server.top-jobs", "5", "--no-collector.lustre_client"])
    assert args.collector_lustre_server and not args.collector_lustre_client
    assert args.collector_lustre_lctl_path == "/opt/lustre/lctl" and args.collector_lustre_server_top_jobs == 5
    assert args.collector_lustre_timeout == 5.0 and args.collector_lustre_source == "auto"


@settings(max_examples=60, deadline=None)
@given(st.lists(job_ids, min_size=1, max_size=5, unique=True))
def test_any_job_id_survives_the_exposition(ids):
    quoted = ['"' + j.replace("\\", "\\\\").replace('"', '\\"') + '"' for j in ids]
    text = "obdfilter.fs1-OST0000.job_stats=\njob_stats:\n" + "\n".join(
        synth_job(q, 10 + i, 1) for i, q in enumerate(quoted)) + "\n"
    out = encode(LustreServerCollector(lctl_ctx(FakeRunner(text))).collect())
    got = {dict(l)["jobid"] for n, l in samples(out) if n == "gangwatch_lustre_job_io_bytes_total"}
    want = {j if j not in ("_other", "_total") else "_" + j for j in ids if j.strip()}
    want = {j if len(j) <= 200 else j[:199] + "…" for j in want}
    assert got == want | {"_other", "_total"}


@pytest.mark.skipif(not which("prometheus") or not which("vmagent"), reason="prometheus, vmagent (Debian packages) not installed")
@pytest.mark.parametrize("scrapers", ["prometheus", "prometheus HA pair", "vmagent replicas"])
def test_still_target_counters_go_stale_and_come_back_counted(hpe, tmp_path, scrapers):
    """The real agent over a tree whose OST counters stand still, scraped each second with a 4 s
    idle window: the per-target series go stale (an instant query finds none, the idle gauge counts
    them); after a 4 KiB write the OST's write counter is back at the value it stood at, then at its
    own, so increase() over the window counts the write. Then by two scrapers, and no result cache
    in the agent, so each scrape is a collection of its own: an HA pair of Prometheus servers (their
    own external labels, so their scrapes fall at other times in the second), each of which counts
    the write; two vmagent shards scraping every target (replicationFactor 2) into a
    VictoriaMetrics that keeps the last sample of each second (-dedup.minScrapeInterval), which
    counts it. (With the stood-at value shown for one collection only, one of the pair, and the
    deduplicated series, saw the counter come back at its new value and counted nothing.)"""
    import sys

    from collectors.registry import load_builtin_collectors
    from tests.conftest import REPO
    from tests.support import vmstack
    from tests.support.promstack import Process, Prometheus, free_port, http_get, wait_for

    pair = scrapers != "prometheus"
    lustre = tmp_path / "proc" / "fs" / "lustre"
    shutil.copytree(hpe / "proc/fs/lustre/osc", lustre / "osc")
    stats = lustre / "osc/lustrefs-OST0000-osc-ffff88105db50000/stats"
    port = free_port()
    agent = Process([sys.executable, "-m", "dashboard.cli", "agent", "--log-level=error",
                     f"--web.listen-address=127.0.0.1:{port}", f"--path.procfs={tmp_path / 'proc'}",
                     f"--path.sysfs={tmp_path / 'sys'}", f"--path.rootfs={tmp_path}", "--collector.lustre.source=files",
                     "--collector.lustre_client.target-idle-seconds=4", *(["--scrape.cache-ttl=0"] if pair else []),
                     *(f"--no-collector.{n}" for n in load_builtin_collectors() if n != "lustre_client")],
                    tmp_path / "agent.log", cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    job = [{"job_name": "gangwatch-agent", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
    stack: list = []
    try:
        wait_for(lambda: agent.check_alive() or http_get(f"http://127.0.0.1:{port}/"), 30, "agent")
        if scrapers == "vmagent replicas":
            stack.append(vmstack.VictoriaMetrics(tmp_path, ["-dedup.minScrapeInterval=1s"]))
            stack += [vmstack.VMAgent(tmp_path, job, stack[0].url, member=k, members=2, replication=2) for k in range(2)]
            proms = stack[:1]
        else:
            for k in range(1 + pair):
                (tmp_path / f"prom{k}").mkdir()
                stack.append(Prometheus(tmp_path / f"prom{k}", job, external_labels={"replica": str(k)}))
            proms = stack
        series = 'gangwatch_lustre_client_target_io_bytes_total{target="lustrefs-OST0000",operation="write"}'
        for prom in proms:
            wait_for(lambda: prom.query(f"last_over_time({series}[60s])"), 30, "the per-target series scraped")
        for prom in proms:
            wait_for(lambda: not prom.query(series), 30, "the still series gone stale")
            idle = prom.query("gangwatch_lustre_client_target_idle_series")
            assert idle and float(idle[0]["value"][1]) > 3
            assert prom.query("gangwatch_lustre_client_targets_io_bytes_total")  # the totals stay
        stats.write_text(stats.read_text().replace("65298098221056", "65298098225152"))  # one more 4 KiB write

        for prom in proms:
            def back() -> list[float]:
                """The samples since the series went stale (after the widest gap between two scrapes)."""
                got = prom.query(series + "[60s]")
                points = [(float(t), float(v)) for t, v in got[0]["values"]] if got else []
                gaps = [b[0] - a[0] for a, b in zip(points, points[1:])]
                return [v for _, v in points[gaps.index(max(gaps)) + 1:]] if gaps and max(gaps) > 1.5 else []

            values = wait_for(lambda: 65298098225152 in back() and back(), 30, "the series back at its own value")
            # (a scrape within the agent's result cache, or within the slowest scraper's gap of the
            # comeback, gets the stood-at value again)
            assert values[0] == 65298098221056 and values == sorted(values), (prom.url, values)
            assert set(values) == {65298098221056, 65298098225152}
            # (VictoriaMetrics' rollups may not see the newest second yet: asked until they do)
            got = wait_for(lambda: max(0.0, float(prom.query(f"increase({series}[20s])")[0]["value"][1])) or None, 10,
                           "the write counted")
            assert 4096 <= got < 4096 * 2  # extrapolated over the window, never lost
    finally:
        for process in reversed(stack):
            process.stop()
        agent.stop()
