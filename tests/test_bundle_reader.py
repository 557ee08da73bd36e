"""The streamed bundle reader and the column-wise window against the reader they replace.

The former line reader (regex per line, kept below as the oracle) defines the samples a text holds;
`read_columns` and `iter_samples` must give exactly those, chunk boundaries anywhere. The window a
bundle gives must equal, array for array, the one RawStore + SignalStore build from the same samples.
Then the inputs that used to cost gigabytes: a 10 MB label, an unterminated line, 200,000 node names.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.analysis.topology import parse_topology_conf
from dashboard.sources.build import WANTED, RawStore, columns_window
from dashboard.sources.bundle import load_bundle
from dashboard.sources.exposition import MAX_LINE, Columns, Sample, read_decimals, iter_samples, parse_value, read_columns

T0 = 1_767_225_600

# ------------------------------------------------------------------------------------ the oracle

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LINE = re.compile(r"^(" + _NAME + r")(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*$")
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = re.compile(r"\\(.)")


def _old_labels(text):
    body, out, pos = text[1:-1], {}, 0
    while pos < len(body):
        m = _PAIR.match(body, pos)
        if not m:
            if body[pos:].strip(" ,") == "":
                break
            return None
        v = m.group(2)
        if "\\" in v:
            v = _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), v)
        out[m.group(1)] = v
        pos = m.end()
    return out


def old_samples(text, ts_unit="auto", wanted=None):
    """The reader as it was (regex per line): (samples, skipped lines)."""
    out, bad = [], 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if wanted is not None:
            end = len(line)
            for ch in "{ \t":
                i = line.find(ch)
                if 0 <= i < end:
                    end = i
            if line[:end] not in wanted:
                continue
        m = _LINE.match(line)
        labels = (_old_labels(m.group(2)) if m.group(2) else {}) if m else None
        value = parse_value(m.group(3)) if m else None
        if labels is None or value is None:
            bad += 1
            continue
        ts = None
        if m.group(4) is not None:
            t = parse_value(m.group(4))
            if t is None or not math.isfinite(t):
                bad += 1
                continue
            ts = t / 1000.0 if ts_unit == "ms" or (ts_unit == "auto" and abs(t) > 1e11) else t
        out.append(Sample(m.group(1), labels, value, ts))
    return out, bad


# ------------------------------------------------------------------------------------ generated text

NAMES = ["DCGM_FI_DEV_GPU_UTIL", "gangwatch_gpu_power_watts", "node_infiniband_port_data_transmitted_bytes_total",
         "gangwatch_job_gpu_info", "unwanted_metric", "x"]
# no line separators other than \n and \r: the old reader also split at \v, \f, \x1c-\x1e, \x85,
# \u2028 and \u2029 (str.splitlines); files end their lines with \n
_PIECE = st.sampled_from(list('ab0 ,="{}\\\t#.-né\u00a0') + ["\\\"", "\\n", "\\\\"])
_CHARS = st.lists(_PIECE, max_size=10).map("".join)
_VALUE = st.one_of(st.sampled_from(["1", "0", "-0", "1.5", "88.92999999999999", "2.106905e+06", "NaN", "+Inf", "-Inf",
                                    "nan", "1e", "x", "", "1_0", "nan(1)", "0x10", ".5", "5.", "1-2", "١", "1e400", ".e5",
                                    "infin", "nanx", "+nan", "-nan", "iNf", "1,5", "0x1p3", "1e+", "١٢", "5}", "-.5", "-", ".",
                                    "9.950000000000001", "123456789012345", "1234567890123456", "-99999999999999.9",
                                    "0000000000000001", "1.2.3", "--1", "-0.0", "0.000000000000001", "+1.5"]),
                    st.integers(0, 16).flatmap(lambda k: st.decimals(allow_nan=False, allow_infinity=False, places=k)).map(str),
                    st.floats(allow_nan=False, allow_infinity=False).map(repr),
                    st.integers(-10**20, 10**20).map(str))
_TS = st.one_of(st.none(), st.sampled_from([str(T0), str(T0 + 15), f"{T0}.5", str(T0 * 1000), "NaN", "+Inf", "x", ""]),
                st.integers(T0, T0 + 10**6).map(str))


@st.composite
def exposition_line(draw):
    kind = draw(st.sampled_from(["sample"] * 6 + ["comment", "blank", "garbage"]))
    if kind == "comment":
        return draw(st.sampled_from(["# TYPE x gauge", "# HELP x some help text", "# EOF", "#"]))
    if kind == "blank":
        return draw(st.sampled_from(["", "  ", "\t"]))
    if kind == "garbage":
        return draw(_CHARS) + draw(_CHARS) + draw(_CHARS)
    name = draw(st.sampled_from(NAMES))
    labels = ""
    if draw(st.booleans()):
        pairs = [f'{k}="{draw(_CHARS)}"' for k in draw(st.lists(st.sampled_from(
            ["gpu", "Hostname", "instance", "node", "device", "hpc_job", "a"]), max_size=4))]
        labels = "{" + draw(st.sampled_from([",", ", ", ","])).join(pairs) + draw(st.sampled_from(["", ","])) + "}"
        if draw(st.integers(0, 9)) == 0:
            labels = labels[:draw(st.integers(0, len(labels)))]  # truncated
    sep = draw(st.sampled_from([" "] * 8 + ["  ", "\t"]))
    lead = draw(st.sampled_from([""] * 8 + ["  ", "\t"]))
    line = lead + name + labels + sep + draw(_VALUE)
    ts = draw(_TS)
    if ts is not None:
        line += sep + ts
    return line


@st.composite
def exposition(draw):
    lines = draw(st.lists(exposition_line(), max_size=25))
    # runs: a line repeated with other numbers, as files lay series out
    out = []
    for ln in lines:
        out.append(ln)
        if draw(st.integers(0, 3)) == 0:
            head = ln.rsplit(" ", 2)[0]
            for _ in range(draw(st.integers(1, 4))):
                toks = [draw(_VALUE), draw(_TS) or str(T0)][:draw(st.sampled_from([2, 2, 2, 1]))]
                if draw(st.integers(0, 5)) == 0:
                    toks.append(draw(_VALUE))  # a third token
                out.append(" ".join([head] + toks))
    nl = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return nl.join(out) + draw(st.sampled_from([nl, ""]))


def _same(a, b):
    assert [(s.name, s.labels, s.timestamp) for s in a] == [(s.name, s.labels, s.timestamp) for s in b]
    assert np.array_equal(np.array([s.value for s in a], float), np.array([s.value for s in b], float), equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(exposition())
def test_line_reader_gives_what_the_regex_reader_gave(text):
    for unit in ("auto", "s"):
        want, bad = old_samples(text, unit)
        stats: dict = {}
        _same(list(iter_samples(text, unit, stats)), want)
        assert stats["skipped_lines"] == bad


@settings(max_examples=300, deadline=None)
@given(exposition(), st.integers(1, 200))
def test_streamed_reader_gives_what_the_regex_reader_gave(text, chunk):
    want, bad = old_samples(text, "s", WANTED)
    want = [s for s in want if s.timestamp is not None]  # a bundle's sample needs its time
    cols = read_columns(io.BytesIO(text.encode("utf-8")), WANTED, "s", chunk=chunk)
    got = [Sample(*cols.series[c], v, t) for c, t, v in zip(cols.codes.tolist(), cols.ts.tolist(), cols.vs.tolist())]
    _same(got, want)
    assert cols.skipped_lines == bad


def test_streamed_reader_on_real_exports(fixtures_dir):
    files = sorted(p for p in (fixtures_dir / "exporters-real").rglob("*.txt") if p.is_file())
    assert files
    for p in files:
        text = p.read_text(errors="replace")
        stamped = "\n".join(f"{ln.strip()} {T0}" if ln.strip() and not ln.lstrip().startswith("#") else ln
                            for ln in text.splitlines())
        want, bad = old_samples(stamped, "s", WANTED)
        cols = read_columns(io.BytesIO(stamped.encode()), WANTED, chunk=4096)
        got = [Sample(*cols.series[c], v, t) for c, t, v in zip(cols.codes.tolist(), cols.ts.tolist(), cols.vs.tolist())]
        _same(got, [s for s in want if s.timestamp is not None])


# ------------------------------------------------------------------------------------ same window

def _old_window(path):
    """load_bundle's window as it was built: every sample through RawStore, then SignalStore."""
    text = (path / "metrics.om").read_text(errors="replace")
    store, lo, hi = RawStore(), math.inf, -math.inf
    for s in iter_samples(text, ts_unit="s", wanted=WANTED):
        if s.timestamp is not None:
            lo, hi = min(lo, s.timestamp), max(hi, s.timestamp)
        store.add(s)
    start = hi - 15.0 * math.floor((hi - lo) / 15.0)
    topo = path / "topology.conf"
    leaf_of = parse_topology_conf(topo.read_text())[0] if topo.exists() else {}
    return store.signals().window(start, hi, 15.0, leaf_of=leaf_of)


def _assert_same_window(a, b):
    for f in a.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        if f in ("notes", "scrape_seconds"):  # the scrape interval: what a bundle's samples show
            continue
        if f in ("gpu", "rail", "node", "target"):
            assert x.keys() == y.keys(), f
            for k in x:
                assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k], equal_nan=True), (f, k)
        elif f == "job":
            assert x.keys() == y.keys()
            for s in x:
                assert x[s].keys() == y[s].keys()
                for j in x[s]:
                    assert np.array_equal(x[s][j], y[s][j], equal_nan=True)
        elif f == "times":
            assert np.array_equal(x, y)
        else:
            assert x == y, f


def test_bundle_window_is_the_one_rawstore_builds(sim_bundles_small):
    for name, p in sim_bundles_small.items():
        _assert_same_window(load_bundle(str(p)).window, _old_window(p))


@pytest.fixture(scope="module")
def sim_bundles_small(tmp_path_factory):
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.simulated import BundleWriter

    sim = Simulation(SimConfig(nodes=8, seed=5, prefill=False, nodes_per_leaf=4,
                               faults="ost_slow@3m+10m,link_flap@2m+10m,gpu_throttle@2m+10m"))
    writers = {"gangwatch": BundleWriter(sim), "exporters": BundleWriter(sim, "exporters")}
    for _ in range(50):
        sim.step()
        for w in writers.values():
            w.capture()
    out = {}
    for name, w in writers.items():
        p = tmp_path_factory.mktemp(name)
        w.write(str(p))
        out[name] = p
    return out


def test_interleaved_and_unsorted_series_give_the_same_window(sim_bundles_small, tmp_path):
    """Scrape order (every series once per time, times shuffled) instead of series order."""
    src = sim_bundles_small["exporters"]
    lines = [ln for ln in (src / "metrics.om").read_text().splitlines() if ln and not ln.startswith("#")]
    rng = np.random.default_rng(1)
    by_time = sorted(lines, key=lambda ln: (ln.rsplit(" ", 1)[1], rng.random()))
    for f in ("squeue.json", "bundle.json", "topology.conf"):
        if (src / f).exists():
            (tmp_path / f).write_bytes((src / f).read_bytes())
    (tmp_path / "metrics.om").write_text("\n".join(reversed(by_time)) + "\n# EOF\n")
    _assert_same_window(load_bundle(str(tmp_path)).window, load_bundle(str(src)).window)


# ------------------------------------------------------------------------------------ hostile input

def _bounded(fn, max_s: float, max_mb: float):
    tracemalloc.start()
    t = time.perf_counter()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - t
    assert took < max_s, took
    assert peak < max_mb * 2**20, peak / 2**20
    return out


def _bundle(tmp_path, metrics: bytes, jobs=()):
    from collectors.slurm.model import Job
    from dashboard.sources.bundle import squeue_json

    (tmp_path / "metrics.om").write_bytes(metrics)
    (tmp_path / "squeue.json").write_text(json.dumps(squeue_json([Job(job_id=i + 1, state="RUNNING", nodes=(n,), node_count=1,
                                                                      start_time=T0 - 3600)
                                                                  for i, n in enumerate(jobs)], T0)))
    return str(tmp_path)


def test_a_10_mb_label_costs_neither_gigabytes_nor_minutes(tmp_path):
    huge = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="a",x="' + "\\\"" * (5 << 20) + '"} 50 ' + str(T0)
    ok = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="b"}} 50 {T0}'
    stats: dict = {}
    got = _bounded(lambda: list(iter_samples(huge + "\n" + ok, stats=stats)), 10, 64)
    assert [s.labels["Hostname"] for s in got] == ["b"] and stats["long_lines"] == 1
    # the label parser itself, on a label within the cap, is linear
    body = 'x="' + "\\\"" * (MAX_LINE // 4) + '"'
    from dashboard.sources.exposition import parse_labels
    assert _bounded(lambda: parse_labels(body), 2, 4)["x"] == '"' * (MAX_LINE // 4)
    p = _bundle(tmp_path, (huge + "\n" + ok + "\n").encode())
    b = _bounded(lambda: load_bundle(p), 10, 64)
    assert b.window.nodes == ("b",) and any("longer than 64 KiB" in n for n in b.notes)


def test_an_unterminated_gigantic_line_is_skipped_in_bounded_memory(tmp_path):
    ok = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="b"}} 50 {T0}\n'.encode()
    p = _bundle(tmp_path, ok + b"x" * (20 << 20))
    b = _bounded(lambda: load_bundle(p), 10, 64)
    assert b.window.nodes == ("b",) and any("1 line(s) longer" in n for n in b.notes)
    # and a last line without its newline is read
    (tmp_path / "metrics.om").write_bytes(ok + ok.replace(b'"b"', b'"c"').rstrip(b"\n"))
    assert load_bundle(p).window.nodes == ("b", "c")


def test_200000_node_names_are_capped_keeping_the_jobs_nodes(tmp_path):
    lines = b"".join(b'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h%06d"} 50 %d\n' % (i, T0 + 15 * (i % 3))
                     for i in range(200_000))
    p = _bundle(tmp_path, lines, jobs=("h199999", "h000007"))
    # in a child process, for its peak RSS (issue 20: no input past 500 MB or 60 s)
    code = ("import json, resource, sys; from dashboard.sources.bundle import load_bundle; b = load_bundle(sys.argv[1]); "
            "print(json.dumps({'nodes': list(b.window.nodes), 'notes': list(b.window.notes), "
            "'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, p], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    took = time.perf_counter() - t
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert took < 60 and doc["rss_mb"] < 500, (took, doc["rss_mb"])
    assert len(doc["nodes"]) == 16384
    assert {"h199999", "h000007"} <= set(doc["nodes"])
    assert any("200000 nodes carry metrics" in n for n in doc["notes"])
    small = load_bundle(p, max_nodes=100)
    assert len(small.window.nodes) == 100 and "h199999" in small.window.nodes


def test_garbage_bytes_never_raise(tmp_path):
    rng = np.random.default_rng(0)
    for k in range(5):
        junk = rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes()
        junk = junk.replace(b"\x00", b"\n") + b'\nDCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="z"} 1 ' + str(T0).encode()
        b = load_bundle(_bundle(tmp_path, junk))
        assert "z" in b.window.nodes


def test_columns_window_on_nothing():
    from dashboard.sources.exposition import Columns

    win = columns_window(Columns(), math.inf, -math.inf, 15.0)
    assert win.nodes == () and win.times.size == 0


def test_interleaved_garbage_numbers_stay_linear(tmp_path):
    """Every value refused by the column-wise parse, one series per line: line by line, not bisected forever."""
    lines = b"".join(b'DCGM_FI_DEV_GPU_UTIL{gpu="%d",Hostname="h%d"} 1_0 %d\n' % (i % 8, i % 97, T0 + i // 800)
                     for i in range(80_000))
    t = time.perf_counter()
    b = load_bundle(_bundle(tmp_path, lines))
    assert time.perf_counter() - t < 30
    assert len(b.window.nodes) == 97 and np.isclose(np.nanmax(b.window.gpu["util"]), 0.1)  # "1_0" is 10 %, as float() reads it


_DECIMAL_TOKEN = st.one_of(st.text("0123456789.-+e_ ", min_size=1, max_size=20),
                           st.integers(0, 17).flatmap(lambda k: st.decimals(allow_nan=False, allow_infinity=False, places=k)).map(str),
                           st.floats(allow_nan=False, allow_infinity=False).map(repr))


@settings(max_examples=300, deadline=None)
@given(st.lists(_DECIMAL_TOKEN, min_size=1, max_size=40), st.integers(0, 3))
def test_numpy_decimals_are_float_bit_for_bit(tokens, pad):
    """The tokens `read_decimals` takes are exactly what float() reads, to the bit (16- and 17-digit
    values, -0, '5.', '.5' included); what it refuses is left to fastnumbers."""
    tokens = [t for t in tokens if t[:1] != " "] or ["1"]
    buf, vs, width = b"", [], []
    for t in tokens:
        buf += b"h" * pad + b" "  # heads shorter than a token: rows that would start before the buffer
        vs.append(len(buf))
        width.append(len(t))
        buf += t.encode() + b" 1767225600\n"
    ok, values = read_decimals(np.frombuffer(buf, np.uint8), np.array(vs), np.array(width))
    for t, good, v in zip(tokens, ok.tolist(), values.tolist()):
        if good:
            assert math.copysign(1, v) == math.copysign(1, float(t)) and v == float(t), t
    assert all(ok[[i for i, t in enumerate(tokens) if re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", t)
                   and sum(ch.isdigit() for ch in t) <= 15 and len(t) <= 16]])


def test_a_run_with_three_tokens_on_one_line_and_one_on_the_next():
    """Whitespace adds up (2 per line on average) yet the lines are not `value time` each."""
    h = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="a"}'
    text = f"{h} 1 {T0}\n{h} 1 2 3\n{h} 4\n{h} 5 {T0 + 15}\n"
    want, bad = old_samples(text, "s", WANTED)
    cols = read_columns(io.BytesIO(text.encode()), WANTED)
    assert cols.vs.tolist() == [s.value for s in want if s.timestamp is not None] == [1.0, 5.0]
    assert cols.skipped_lines == bad == 1


def test_a_window_over_its_byte_budget_keeps_fewer_nodes(tmp_path):
    lines = b"".join(b'DCGM_FI_DEV_GPU_UTIL{gpu="%d",Hostname="h%03d"} 50 %d\n' % (g, i, T0 + 15 * k)
                     for i in range(300) for g in range(8) for k in range(5))
    p = _bundle(tmp_path, lines, jobs=("h123",))
    full = load_bundle(p).window
    assert len(full.nodes) == 300
    with open(tmp_path / "metrics.om", "rb") as f:
        cols = read_columns(f, WANTED)
    small = columns_window(cols, T0, T0 + 60, 15.0, keep_nodes={"h123"}, max_bytes=100 * 8 * 5 * 4)
    assert len(small.nodes) == 100 and "h123" in small.nodes and any("the window keeps 100" in n for n in small.notes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([T0 - 40, T0 - 15, T0, T0 + 1e-6, T0 + 2e-6, T0 + 7.5, T0 + 15, T0 + 15 - 1e-7,
                                          T0 + 30, T0 + 44.999999, T0 + 45, T0 + 90, T0 + 200]), max_size=8),
                min_size=1, max_size=6))
def test_batch_alignment_is_align_row_by_row(rows):
    """aligned_rows (one searchsorted for the whole batch) against `align` per series, on times at,
    just before and just after grid times, repeated, before and after the window, empty series."""
    from dashboard.sources.build import aligned_rows, align

    if not any(rows):  # no sample in the whole batch: IndexError, as in the former per-series loop
        return
    ts = np.concatenate([np.sort(np.array(r, float)) for r in rows])
    vs = np.arange(ts.shape[0], dtype=float)
    n = np.array([len(r) for r in rows])
    hi = np.cumsum(n)
    lo = hi - n
    times = T0 + 15.0 * np.arange(8)
    got = aligned_rows(ts, vs, lo, hi, np.ones(len(rows)), times, 30.0)
    for r in range(len(rows)):
        assert np.array_equal(got[r], align(ts[lo[r]:hi[r]], vs[lo[r]:hi[r]], times, 30.0), equal_nan=True)


# ------------------------------------------------------------------------------------ fast paths = slow paths

class _ReadOnly:
    """A binary stream with `read` alone (no `readinto`): read_columns' other way in."""

    def __init__(self, data: bytes):
        self._f = io.BytesIO(data)

    def read(self, n: int) -> bytes:
        return self._f.read(n)


def _assert_same_columns(a, b):
    assert a.series == b.series
    assert np.array_equal(a.codes, b.codes)
    assert np.array_equal(a.ts.view(np.int64), b.ts.view(np.int64))  # bit for bit: -0.0, NaN payloads
    assert np.array_equal(a.vs.view(np.int64), b.vs.view(np.int64))
    assert (a.skipped_lines, a.long_lines) == (b.skipped_lines, b.long_lines)


def _samples_of(cols):
    return [Sample(*cols.series[c], v, t) for c, t, v in zip(cols.codes.tolist(), cols.ts.tolist(), cols.vs.tolist())]


# runs whose heads hold spaces and braces, lines with one space or none, a head that is all
# blank, \r and \r\n (also split by a chunk's edge), over-long lines across edges, no last newline
_H0 = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="a b",x="} 1 2"}'
_H1 = 'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="c"}'
_H2 = 'gangwatch_gpu_power_watts{node="n1",gpu="0"}'
_TRICKY = "".join([
    f"{_H0} 1.5 {T0}\n" * 3, f"{_H0} 92.75999999999999 {T0 + 15}\r\n" * 2,
    f" 1 {T0}\n x\nx 1\r{_H1} {'x' * (MAX_LINE + 10)} 1 {T0}\n",
    f"{_H1} -0 {T0}\n" * 4, f"{_H1} 1 2 {T0}\n", f"{_H1} -.5 {T0 + 30}\n" * 3,
    f"{_H2} 1e3 {T0}\n", "#" * (MAX_LINE + 5), f"\n{_H2} 7 {T0 + 15}",
]).encode()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 4096, MAX_LINE - 3, 1 << 20])
def test_streams_without_readinto_give_identical_columns(chunk):
    """The reused buffer (readinto) and plain reads give the same Columns, bit for bit, and both
    the samples the regex reader finds, wherever the chunks' edges fall."""
    # the regex reader on the text without its over-long lines (read_columns skips them unread)
    want, bad = old_samples("\n".join(ln for ln in _TRICKY.decode().replace("\r\n", "\n").replace("\r", "\n").split("\n")
                                      if len(ln) <= MAX_LINE), "s", WANTED)
    a = read_columns(io.BytesIO(_TRICKY), WANTED, "s", chunk=chunk)
    b = read_columns(_ReadOnly(_TRICKY), WANTED, "s", chunk=chunk)
    _assert_same_columns(a, b)
    _same(_samples_of(a), [s for s in want if s.timestamp is not None])
    assert a.long_lines == 2 and a.skipped_lines == bad


@settings(max_examples=150, deadline=None)
@given(exposition(), st.integers(1, 200))
def test_streams_without_readinto_give_identical_columns_on_generated_text(text, chunk):
    """Also the vectorised run finder against the Python step per run, on the same text."""
    data = text.encode("utf-8")
    a = read_columns(io.BytesIO(data), WANTED, "s", chunk=chunk)
    _assert_same_columns(a, read_columns(_ReadOnly(data), WANTED, "s", chunk=chunk))
    _assert_same_columns(a, read_columns(io.BytesIO(data), WANTED, "s", chunk=chunk, vectorised=False))


# what bundles and exports hold, each in runs: comments, an exemplar, times absent and present,
# label values with escaped quotes, spaces and braces, NaN and infinities, exponents, 16- and
# 17-digit values, \r\n, a series interleaved with others, heads of equal length that differ,
# a line of one token and one of three in a run, a head that is a prefix of the next one's
_G = 'DCGM_FI_DEV_GPU_UTIL{gpu="%d",Hostname="node%d"}'
_E = 'gangwatch_gpu_power_watts{node="n 1",gpu="0",x="a \\"q\\" } b"}'
_RUNS_TEXT = "".join([
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
    *(f"{_G % (g, 1)} {v} {T0 + 15 * k}\n" for g in range(3) for k, v in enumerate(
        ["93.87", "92.75999999999999", "NaN", "+Inf", "-Inf", "2.106905e+06", "1e-7", "0.30000000000000004"])),
    *(f"{_E} {v} {T0 + 15 * k}\r\n" for k, v in enumerate(["1", "-0", "123456789012345678", ".5"])),
    f"{_G % (0, 1)} 5 {T0 + 200}\n{_G % (1, 1)} 6 {T0 + 200}\n{_G % (0, 1)} 7 {T0 + 215}\n",  # interleaved
    f"{_G % (0, 2)} 1 {T0} # {{trace_id=\"abc\"}} 0.5 {T0}\n",  # an exemplar
    f"{_G % (0, 2)} 2 {T0 + 15}\n{_G % (0, 2)} 3\n{_G % (0, 2)} 4 5 {T0 + 30}\n{_G % (0, 2)} 6 {T0 + 45}\n",
    f"{_G % (0, 2)} 7\n{_G % (0, 2)} 8 {T0 + 60}\n",
    f"{_G % (0, 3)} 1 {T0}\n{_G % (0, 3)} x 2 {T0 + 15}\n{_G % (0, 3)}  3 {T0 + 30}\n",  # the head and a space, then more
    f"gangwatch_node_up 1 {T0}\ngangwatch_node_up 1 {T0 + 15}\n",
    f"{_G % (9, 9)} 1 {T0}\n{_G % (8, 9)} 1 {T0}\n{_G % (7, 9)} 2 {T0 + 15}\n",  # heads of one length
    "# EOF\n",
]).encode()


class _Pieces(io.BytesIO):
    """A stream whose first read returns `first` bytes at most: a chunk's edge exactly there."""

    def __init__(self, data: bytes, first: int):
        super().__init__(data)
        self._first = first

    def readinto(self, b) -> int:
        if self._first:
            b, self._first = memoryview(b)[:self._first], 0
        return super().readinto(b)


def test_vectorised_runs_give_the_columns_of_the_python_step_per_run_at_every_chunk_edge():
    """The run finder working on whole chunks at once against the one stepping run by run, with a
    chunk's edge at every byte of a text that holds what files do (and many edges: small chunks),
    and the regex reader's samples."""
    want, bad = old_samples(_RUNS_TEXT.decode().replace("\r\n", "\n"), "s", WANTED)
    full = read_columns(io.BytesIO(_RUNS_TEXT), WANTED, "s", vectorised=False)
    _same(_samples_of(full), [s for s in want if s.timestamp is not None])
    assert full.skipped_lines == bad and full.samples > 30
    # a line of fewer than two spaces sends its chunk to the step per run: also the text without them
    two = b"".join(ln for ln in _RUNS_TEXT.splitlines(keepends=True) if ln.count(b" ") >= 2)
    for data in (_RUNS_TEXT, two):
        ref = read_columns(io.BytesIO(data), WANTED, "s", vectorised=False)  # the same wherever the edges fall
        for edge in range(1, len(data)):
            _assert_same_columns(read_columns(_Pieces(data, edge), WANTED, "s", chunk=len(data)), ref)
        for chunk in (1, 2, 3, 5, 8, 13, 64, 333):
            _assert_same_columns(read_columns(io.BytesIO(data), WANTED, "s", chunk=chunk), ref)
            _assert_same_columns(read_columns(io.BytesIO(data), WANTED, "s", chunk=chunk, vectorised=False), ref)


def test_shared_label_dicts_give_the_window_of_own_dicts(sim_bundles_small):
    """Series of one label block share its labels dict, and columns_window finds the block's node
    once: the window is the one a dict per series gives, array for array."""
    for p in sim_bundles_small.values():
        with open(p / "metrics.om", "rb") as f:
            shared = read_columns(f, WANTED)
        own = Columns(series=[(n, dict(labels)) for n, labels in shared.series], codes=shared.codes.copy(),
                      ts=shared.ts.copy(), vs=shared.vs.copy())
        assert len({id(labels) for _, labels in shared.series}) < len(shared.series)  # some are shared
        lo, hi = float(shared.ts.min()), float(shared.ts.max())
        start = hi - 15.0 * math.floor((hi - lo) / 15.0)
        _assert_same_window(columns_window(shared, start, hi, 15.0), columns_window(own, start, hi, 15.0))


@pytest.mark.parametrize("every", [15, 30, 60])
def test_a_coarse_scrape_interval_leaves_no_step_unknown(tmp_path, every):
    """A site scraping every 30 s or 1 min (Prometheus' default scrape_interval) judged on the 15 s
    grid: each step takes the latest sample within 1.5 intervals, as a range query would, rather
    than every other step unknown; the node that stopped 5 minutes ago still goes unknown, and a
    15 s site keeps the two-step lookback."""
    lines = []
    for host, stop in (("a", T0 + 1800), ("b", T0 + 1500)):
        for t in range(T0, stop + 1, every):
            lines.append(b'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="%s"} 50 %d\n' % (host.encode(), t))
            lines.append(b'node_cpu_seconds_total{cpu="0",mode="iowait",instance="%s:9100"} %d %d\n'
                         % (host.encode(), t - T0, t))
    win = load_bundle(_bundle(tmp_path, b"".join(lines))).window
    a, b = win.nodes.index("a"), win.nodes.index("b")
    util = win.gpu["util"][:, 0]
    assert np.isfinite(util[a, 1:]).all()
    tail = win.times > T0 + 1500 + max(30, 1.5 * every)
    assert tail.any() and np.isnan(util[b, tail]).all()


@pytest.mark.parametrize("interval", [5.0, 15.0, 30.0, 60.0])
def test_events_land_once_in_the_step_they_happened(interval):
    """A link that went down twice is two events in the window whatever the scrape interval: a
    scrape slower than the 15 s step is not counted again in each step it is carried over, and the
    increments of scrapes faster than the step add up in it. Both readers agree."""
    t0, n = 1_800_000_000.0, int(900 // interval) + 1
    lines = ["# TYPE gangwatch_infiniband_port_link_downed counter"]
    value = 7.0
    down_at = {t0 + 300.0, t0 + 600.0}  # the scrapes that see each drop
    for i in range(n):
        t = t0 + i * interval
        value += 1.0 if any(d - interval < t <= d for d in down_at) else 0.0
        lines.append(f'gangwatch_infiniband_port_link_downed_total{{instance="n1:9810",device="mlx5_0",port="1"}} '
                     f'{value:.0f} {t:.3f}')
    text = "\n".join(lines) + "\n# EOF\n"
    start, end = t0 + 60.0, t0 + 900.0
    cols = read_columns(io.BytesIO(text.encode()), WANTED)
    store = RawStore()
    for s in iter_samples(text, ts_unit="s", wanted=WANTED):
        store.add(s)
    for win in (columns_window(cols, start, end, 15.0), store.signals().window(start, end, 15.0, lookback=
                                                                                 max(30.0, 1.5 * interval))):
        down = win.rail["ib_down"][0, 0]
        assert np.nansum(down) == 2.0, (interval, down)
        assert np.isfinite(down[1:]).all()  # known (0) between the drops, not unknown
        assert set(np.flatnonzero(down).tolist()) == {int((t - start) // 15) for t in down_at}, down
