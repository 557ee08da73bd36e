"""SWF reader and trace replay: hand-built workloads with known answers, real PWA traces, properties."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import simulate_cli
from dashboard.analysis.replay import POLICIES, prepare, simulate
from dashboard.analysis.swf import SwfJob, parse_swf, parse_swf_text, read_swf


def job(job_id, submit, run, procs, req=-1):
    return SwfJob(job_id, submit, -1, run, procs, -1.0, -1.0, procs, req, -1.0, 1, 1, 1, -1, -1, -1, -1, -1)


def starts_of(result):
    return {s.job_id: (s.start, s.end) for s in result.starts}


@pytest.fixture(scope="module")
def traces(fixtures_dir):
    return fixtures_dir.parent / "traces"


# ---------------------------------------------------------------- SWF reader

SWF_TEXT = """\
; Version: 2.2
; MaxNodes: 8
; MaxProcs: 16
; UnixStartTime: 1000
    1   0  5  100  4  -1 -1  4  200 -1 1 1 1 -1 -1 -1 -1 -1
    2   10 -1 50 x  -1 -1  4  200 -1 1 1 1 -1 -1 -1 -1 -1
    3   20 -1 50 4
; a comment in the middle
    4   30 -1 60.0 2 1.5 -1  2  90 -1 1 1 1 -1 -1 -1 -1 -1

    5   40 -1 60 2 nan -1  2  90 -1 1 1 1 -1 -1 -1 -1 -1
"""


def test_swf_reports_malformed_lines_with_numbers_and_skips_them():
    trace = parse_swf(SWF_TEXT.splitlines())
    assert [j.job_id for j in trace.jobs] == [1, 4]
    assert [(p.line, p.reason.split(":")[0]) for p in trace.problems] == [
        (6, "bad field"), (7, "expected 18 fields, got 5"), (11, "bad field")]
    assert trace.header.max_procs == 16 and trace.header.max_nodes == 8
    assert trace.header.unix_start_time == 1000
    assert trace.jobs[1].run == 60 and trace.jobs[1].avg_cpu == 1.5 and trace.jobs[1].line == 9


def test_swf_reads_gzip_and_plain_alike(tmp_path):
    plain = tmp_path / "t.swf"
    plain.write_text(SWF_TEXT)
    packed = tmp_path / "t.swf.gz"
    packed.write_bytes(gzip.compress(SWF_TEXT.encode()))
    assert read_swf(plain) == read_swf(packed)
    assert len(read_swf(packed, limit=1).jobs) == 1


def test_swf_real_trace_headers(traces):
    kth = read_swf(traces / "KTH-SP2-1996-2.1-cln.swf.gz", limit=10)
    assert (kth.header.max_procs, kth.header.max_nodes) == (100, 100)
    assert [j.job_id for j in kth.jobs[:3]] == [15, 16, 17] and not kth.problems
    lublin = read_swf(traces / "lublin_256.swf", limit=10)
    assert lublin.header.max_procs is None and lublin.header.max_nodes == 256


@given(st.lists(st.text(max_size=120), max_size=30))
@settings(max_examples=200, deadline=None)
def test_swf_parser_never_raises(lines):
    trace = parse_swf(lines)
    assert len(trace.jobs) + len(trace.problems) <= len(lines)


# Tokens the vectorised reader must treat exactly as int()/float() do, or hand back to the per-line path.
ODD_FIELDS = ["1", "-1", "0", "-0", "007", "12.5", "1.0", "-2.0", "-0.0", ".5", "5.", "1e3", "+4", "nan", "inf",
              "x", "1_0", "123456789012345", "-123456789012345", "1234567890123456", "--1", "1-2", "1.2.3",
              ";1", "\u00a0", "\x0b", "\u0663", "-", "."]
swf_line = st.one_of(
    st.lists(st.one_of(st.integers(-2, 10**12).map(str), st.sampled_from(ODD_FIELDS)), min_size=17, max_size=19)
    .flatmap(lambda f: st.sampled_from([" ", "  ", "\t"]).map(lambda sep: sep.join(f))),
    st.sampled_from(["", " ", "\r", "; MaxProcs: 7", ";MaxNodes:x", " ; UnixStartTime: 5 s"]),
    st.text(max_size=40))


@given(st.lists(swf_line, max_size=12), st.sampled_from(["", "\n", "\r\n"]), st.one_of(st.none(), st.integers(0, 6)))
@settings(max_examples=300, deadline=None)
def test_swf_text_reader_matches_the_line_parser(lines, tail, limit):
    text = "\n".join(lines) + tail
    fast, plain = parse_swf_text(text, limit), parse_swf(text.split("\n"), limit)
    assert fast.header == plain.header and fast.problems == plain.problems
    assert [repr(j) for j in fast.jobs] == [repr(j) for j in plain.jobs]  # repr: -0.0 is not 0.0


@pytest.mark.parametrize("piece", [1, 7, 40, 100])
def test_swf_text_reader_in_pieces_matches_the_line_parser(monkeypatch, piece):
    from dashboard.analysis import swf
    monkeypatch.setattr(swf, "_PIECE", piece)  # boundaries inside and at the end of every kind of line
    text = SWF_TEXT + SWF_TEXT.replace(";", "").replace("x", "7") + "\n\n    9 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"
    for limit in (None, 0, 2, 5):
        fast, plain = parse_swf_text(text, limit), parse_swf(text.split("\n"), limit)
        assert fast == plain and [repr(j) for j in fast.jobs] == [repr(j) for j in plain.jobs]


def test_swf_text_reader_reads_kth_as_the_line_parser_does(traces):
    with gzip.open(traces / "KTH-SP2-1996-2.1-cln.swf.gz", "rt") as f:
        text = f.read()
    fast, plain = parse_swf_text(text), parse_swf(text.split("\n"))
    assert len(fast.jobs) == 27_992 and fast == plain
    assert [repr(j) for j in fast.jobs] == [repr(j) for j in plain.jobs]


# ---------------------------------------------------------------- hand-built workloads

def test_record_rules_skip_clip_kill_and_estimate():
    jobs = [job(1, 0, 0, 4, 10), job(2, 0, -5, 4, 10), job(3, 0, 10, 0, 10), job(4, 0, 10, -1, 10),
            job(5, 0, 100, 64, 200), job(6, 0, 50, 2, -1), job(7, 0, 500, 2, 300)]
    records, counts = prepare(jobs, 16)
    assert (counts.no_run_time, counts.no_processors) == (2, 2)
    assert counts.clipped_processors == 1 and counts.requested_time_missing == 1
    assert counts.killed_at_requested_time == 1
    assert records == [(5, 0, 200, 100, 16), (6, 0, 50, 50, 2), (7, 0, 300, 300, 2)]
    with pytest.raises(ValueError):
        simulate(jobs, 0, "easy")
    with pytest.raises(ValueError):
        simulate(jobs, 16, "sjf")


# A 12-processor machine. Job 1 holds 6 until 100; job 2 (8 procs) must wait for it and becomes the
# top job with shadow time 100 and 4 extra processors. Job 3 (4 procs, 50 s) ends before the shadow:
# EASY backfills it. Job 4 (4 procs, 500 s) finds only 2 free. Job 5 (2 procs, 500 s) fits in the
# extra processors: backfilled, ends after the shadow. When job 3 ends, job 4 would fit but only 2
# extra remain: it would delay the top job, so it waits.
SMALL = [job(1, 0, 100, 6, 100), job(2, 1, 100, 8, 100), job(3, 2, 50, 4, 50), job(4, 3, 500, 4, 500),
         job(5, 4, 500, 2, 500)]


def test_fcfs_known_answer():
    s = starts_of(simulate(SMALL, 12, "fcfs"))
    assert s == {1: (0, 100), 2: (100, 200), 3: (100, 150), 4: (150, 650), 5: (200, 700)}


def test_easy_known_answer_backfills_only_what_cannot_delay_the_top_job():
    r = simulate(SMALL, 12, "easy")
    s = starts_of(r)
    assert s[3] == (2, 52)  # ends before the shadow time
    assert s[5] == (4, 504)  # uses the two extra processors
    assert s[2] == (100, 200)  # the top job starts at its shadow time, not later
    assert s[4] == (200, 700)  # would have delayed the top job
    assert r.first_reservation[2] == 100


def test_conservative_known_answer():
    r = simulate(SMALL, 12, "conservative")
    s = starts_of(r)
    # job 4 is reserved at 52 beside job 2 (4 processors stay free while job 2 runs); job 5, queued
    # later, may not take them and is reserved after job 2
    assert s == {1: (0, 100), 2: (100, 200), 3: (2, 52), 4: (52, 552), 5: (200, 700)}
    assert r.first_reservation == {1: 0, 2: 100, 3: 2, 4: 52, 5: 200}


def test_killed_at_requested_time_and_reservation_uses_requested_time():
    # job 1 asks for 50 s but would run 80: killed at 50, so job 2 starts at 50
    jobs = [job(1, 0, 80, 10, 50), job(2, 0, 10, 10, 100)]
    for policy in POLICIES:
        assert starts_of(simulate(jobs, 10, policy)) == {1: (0, 50), 2: (50, 60)}


def test_submissions_before_terminations_at_equal_times():
    # Job 1 ends at 100 and job 3 is submitted at 100. The submission comes first, so job 3 cannot take
    # the processors job 1 frees ahead of job 2 (submitted earlier and first in the queue) under FCFS.
    jobs = [job(1, 0, 100, 10, 100), job(2, 50, 10, 10, 10), job(3, 100, 10, 10, 10)]
    s = starts_of(simulate(jobs, 10, "fcfs"))
    assert s == {1: (0, 100), 2: (100, 110), 3: (110, 120)}


def test_easy_counts_every_job_ending_at_the_shadow_time_as_extra():
    # Jobs 1, 2 and 3 (2 processors each) are all expected to end at 100; 2 processors are free now.
    # Top job 5 needs 6: jobs 1 and 2 suffice, but job 3 frees its 2 at the same instant, and those
    # are extra: job 6 (2 processors, long) fits in them and starts now without delaying job 5.
    jobs = [job(1, 0, 100, 2, 100), job(2, 0, 100, 2, 100), job(3, 0, 100, 2, 100), job(4, 0, 300, 2, 300),
            job(5, 1, 50, 6, 50), job(6, 2, 500, 2, 500)]
    r = simulate(jobs, 10, "easy")
    s = starts_of(r)
    assert r.first_reservation[5] == 100
    assert s[5] == (100, 150)
    assert s[6] == (2, 502)  # extra at 100: 2 free now + 6 from jobs 1-3 - 6 for job 5 = 2


def test_easy_tie_at_the_shadow_time_with_a_later_end_is_not_extra():
    # The same queue, but job 3 is expected to end at 101: only jobs 1 and 2 end at the shadow time,
    # so nothing is extra and job 6 (which would run past 100) must wait.
    jobs = [job(1, 0, 100, 2, 100), job(2, 0, 100, 2, 100), job(3, 0, 101, 2, 101), job(4, 0, 300, 2, 300),
            job(5, 1, 50, 6, 50), job(6, 2, 500, 2, 500)]
    s = starts_of(simulate(jobs, 10, "easy"))
    assert s[5] == (100, 150)
    assert s[6][0] >= 101


def test_easy_ties_at_equal_submit_times_keep_trace_order():
    # Jobs 5 and 6 are submitted at the same second: 5 (first in the trace) is the top job and 6
    # backfills into the extra processors; swapping them in the trace swaps the roles.
    rows = [job(1, 0, 100, 2, 100), job(2, 0, 100, 2, 100), job(3, 0, 100, 2, 100), job(4, 0, 300, 2, 300)]
    a = starts_of(simulate(rows + [job(5, 1, 50, 6, 50), job(6, 1, 500, 2, 500)], 10, "easy"))
    assert a[5] == (100, 150) and a[6] == (1, 501)
    b = starts_of(simulate(rows + [job(6, 1, 500, 2, 500), job(5, 1, 50, 6, 50)], 10, "easy"))
    assert b[6] == (1, 501) and b[5] == (100, 150)
    c = starts_of(simulate(rows + [job(5, 1, 50, 6, 50), job(6, 1, 500, 4, 500)], 10, "easy"))
    assert c[6] == (150, 650)  # 4 processors do not fit in the 2 free now: it waits for job 5


def test_metrics_known_answer():
    r = simulate([job(1, 0, 100, 10, 100), job(2, 0, 5, 10, 5)], 10, "fcfs")
    assert r.avg_wait_s == 50.0
    # job 1: max(1, 100/100) = 1; job 2: (100 + 5) / max(5, 10) = 10.5
    assert r.avg_bounded_slowdown == pytest.approx((1 + 10.5) / 2)
    assert r.makespan_s == 105 and r.utilisation == pytest.approx(1.0)


def test_empty_workload():
    r = simulate([], 10, "easy")
    assert r.jobs == 0 and r.makespan_s == 0 and r.starts_csv() == "job_id,submit,start,end\n"


# ---------------------------------------------------------------- checks shared by traces and properties

def assert_never_over_allocated(result, procs):
    events = []
    for s in result.starts:
        assert s.start >= s.submit
        assert s.end > s.start
        events.append((s.end, -s.procs))
        events.append((s.start, s.procs))
    events.sort()  # at equal times a release (negative) sorts before a start
    used = 0
    for _, delta in events:
        used += delta
        assert used <= procs


def assert_reservations_kept(result):
    for s in result.starts:
        promised = result.first_reservation.get(s.job_id)
        if promised is not None:
            assert s.start <= promised, (s, promised)


def check_csv(result, procs):
    rows = list(csv.DictReader(io.StringIO(result.starts_csv())))
    assert len(rows) == result.jobs
    size = {s.job_id: s.procs for s in result.starts}
    events = []
    for row in rows:
        start, end = int(row["start"]), int(row["end"])
        assert start >= int(row["submit"])
        events += [(end, -size[int(row["job_id"])]), (start, size[int(row["job_id"])])]
    used = 0
    for _, delta in sorted(events):
        used += delta
        assert used <= procs


# ---------------------------------------------------------------- real traces

@pytest.mark.parametrize("name,limit", [
    ("KTH-SP2-1996-2.1-cln.swf.gz", 5000),
    ("HPC2N-2002-2.1-cln.swf.gz", 3000),
    ("SDSC-BLUE-2000-4.2-cln.swf.gz", 3000),
])
def test_real_traces(traces, name, limit):
    trace = read_swf(traces / name, limit=limit)
    assert not trace.problems
    procs = trace.header.max_procs
    results = {}
    for policy in POLICIES:
        first = simulate(trace.jobs, procs, policy)
        again = simulate(trace.jobs, procs, policy)
        assert first.starts_csv() == again.starts_csv(), "replay is not deterministic"
        assert first.to_json() == again.to_json()
        check_csv(first, procs)
        results[policy] = first
    easy, fcfs, cons = results["easy"], results["fcfs"], results["conservative"]
    assert easy.avg_wait_s < fcfs.avg_wait_s
    assert easy.avg_bounded_slowdown < fcfs.avg_bounded_slowdown
    assert cons.avg_wait_s < fcfs.avg_wait_s
    assert_reservations_kept(cons)  # no job starts later than its first reservation
    assert_reservations_kept(easy)  # no top job starts later than its shadow time
    assert len(cons.first_reservation) == cons.jobs
    assert 0 < easy.utilisation <= 1


def test_sdsc_blue_skips_records_without_processors_or_run_time(traces):
    trace = read_swf(traces / "SDSC-BLUE-2000-4.2-cln.swf.gz", limit=3000)
    r = simulate(trace.jobs, 1152, "fcfs")
    assert r.counts.no_run_time > 0 and r.counts.no_processors > 0
    assert r.jobs + r.counts.no_run_time + r.counts.no_processors == 3000


# ---------------------------------------------------------------- properties

workload = st.lists(
    st.tuples(st.integers(0, 200), st.integers(-5, 120), st.integers(-2, 12), st.integers(-5, 150)),
    max_size=25,
)


@given(workload, st.integers(1, 10))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_no_over_allocation_and_reservations_kept(rows, procs):
    jobs = [job(k + 1, sub, run, p, req) for k, (sub, run, p, req) in enumerate(rows)]
    expected_jobs = sum(1 for _, run, p, _ in rows if run > 0 and p > 0)
    for policy in POLICIES:
        r = simulate(jobs, procs, policy)
        assert r.jobs == expected_jobs
        assert_never_over_allocated(r, procs)
        assert_reservations_kept(r)
        for s in r.starts:
            src = jobs[s.job_id - 1]
            req = src.req_time if src.req_time > 0 else src.run
            assert s.end - s.start == min(src.run, req)


# ---------------------------------------------------------------- CLI

def test_cli_writes_starts_csv_and_json(tmp_path, traces, capsys):
    out = tmp_path / "starts.csv"
    rc = simulate_cli.main(["--swf", str(traces / "KTH-SP2-1996-2.1-cln.swf.gz"), "--policy", "easy",
                            "--limit", "500", "--out", str(out), "--format", "json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["procs"] == 100 and summary["jobs"] == 500 and summary["policy"] == "easy"
    lines = out.read_text().splitlines()
    assert lines[0] == "job_id,submit,start,end" and len(lines) == 501


def test_cli_reports_malformed_lines(tmp_path, capsys):
    swf = tmp_path / "bad.swf"
    swf.write_text(SWF_TEXT)
    assert simulate_cli.main(["--swf", str(swf), "--policy", "fcfs"]) == 0
    captured = capsys.readouterr()
    assert f"{swf}:6: skipped" in captured.err and f"{swf}:7: skipped" in captured.err
    assert "procs" in captured.out


def test_cli_needs_procs_without_header(tmp_path, capsys):
    swf = tmp_path / "nohdr.swf"
    swf.write_text("1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 -1 -1 -1\n")
    assert simulate_cli.main(["--swf", str(swf)]) == 2
    assert simulate_cli.main(["--swf", str(swf), "--procs", "4", "--format", "table"]) == 0
    assert simulate_cli.main(["--swf", str(tmp_path / "missing.swf")]) == 2


# ---------------------------------------------------------------- against a plain reference

def reference_easy(jobs, procs):
    """EASY written the obvious way: a full pass (heads, shadow time, backfill scan) after every event.
    The simulator checks only the new job on a submission while a top job waits; the starts must match."""
    records, _ = prepare(jobs, procs)
    pending = list(range(len(records)))  # submission order
    queue, running, start = [], [], {}
    free, seq, now = procs, 0, None
    ends = []  # (end, start order, job)
    while pending or ends:
        ends.sort()
        if pending and (not ends or records[pending[0]][1] <= ends[0][0]):
            j = pending.pop(0)
            now = records[j][1]
            queue.append(j)
        else:
            now, _, j = ends.pop(0)
            free += records[j][4]
            running.remove(j)
        while queue and records[queue[0]][4] <= free:
            j = queue.pop(0)
            start[j], free = now, free - records[j][4]
            running.append(j)
            ends.append((now + records[j][3], seq, j))
            seq += 1
        if not queue:
            continue
        need, avail = records[queue[0]][4], free
        expected = sorted(start[r] + records[r][2] for r in running)
        shadow = next(t for t in expected if free + sum(records[r][4] for r in running
                                                        if start[r] + records[r][2] <= t) >= need)
        extra = free + sum(records[r][4] for r in running if start[r] + records[r][2] <= shadow) - need
        for j in list(queue[1:]):
            p, req = records[j][4], records[j][2]
            if p <= free and (now + req <= shadow or p <= extra):
                queue.remove(j)
                start[j], free = now, free - p
                if now + req > shadow:
                    extra -= p
                running.append(j)
                ends.append((now + records[j][3], seq, j))
                seq += 1
    return {records[j][0]: start[j] for j in start}


@given(workload, st.integers(1, 10))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_easy_matches_the_full_pass_reference(rows, procs):
    jobs = [job(k + 1, sub, run, p, req) for k, (sub, run, p, req) in enumerate(rows)]
    ours = {s.job_id: s.start for s in simulate(jobs, procs, "easy").starts}
    assert ours == reference_easy(jobs, procs)


def test_easy_matches_the_reference_on_kth(traces):
    jobs = read_swf(traces / "KTH-SP2-1996-2.1-cln.swf.gz", limit=3000).jobs
    ours = {s.job_id: s.start for s in simulate(jobs, 100, "easy").starts}
    assert ours == reference_easy(jobs, 100)


def test_limit_zero_still_reads_the_header(traces):
    trace = read_swf(traces / "NASA-iPSC-1993-3.1-cln.swf.gz", limit=0)
    assert trace.jobs == () and trace.header.max_procs == 128


def test_truncated_gzip_keeps_what_was_read(tmp_path, traces):
    data = (traces / "KTH-SP2-1996-2.1-cln.swf.gz").read_bytes()
    cut = tmp_path / "cut.swf.gz"
    cut.write_bytes(data[: len(data) // 3])
    trace = read_swf(cut)
    assert 1000 < len(trace.jobs) < 27_992
    assert trace.problems and trace.problems[-1].reason.startswith("EOFError")
    bom = tmp_path / "bom.swf"
    bom.write_text("\ufeff; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 -1 -1 -1\n", encoding="utf-8")
    assert read_swf(bom).header.max_procs == 4 and len(read_swf(bom).jobs) == 1


# ---------------------------------------------------------------- against pyss, job by job

PYSS_GOLDEN = Path(__file__).parent / "golden" / "pyss" / "kth_sp2_10000_starts.txt.gz"


@pytest.mark.parametrize("policy", POLICIES)
def test_replay_matches_pyss_job_by_job(traces, policy):
    column = {"fcfs": 1, "easy": 2, "conservative": 3}[policy]
    with gzip.open(PYSS_GOLDEN, "rt") as f:
        ref = {int(r[0]): int(r[column]) for r in (line.split() for line in f if not line.startswith("#"))}
    jobs = read_swf(traces / "KTH-SP2-1996-2.1-cln.swf.gz", limit=10_000).jobs
    result = simulate(jobs, 100, policy)
    ours = {s.job_id: s.start - s.submit for s in result.starts}
    assert len(ref) == len(ours) == 10_000
    differ = [(j, ours[j], ref[j]) for j in ref if ours[j] != ref[j]]
    assert not differ, f"{len(differ)} waits differ from pyss (job, ours, pyss), first: {differ[:5]}"
    if policy == "easy":
        assert round(result.avg_wait_s, 2) == 7550.50
