"""A range query's answer split without a JSON object per point (dashboard/sources/matrix.py) gives
what parsing it as JSON gives, whatever the labels hold; anything else falls back to JSON or is
refused, never misread."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.sources.matrix import Matrix, decode_range, split_matrix, split_vector
from tests.support.promql_rate import prometheus_rate

START, STEP, N = 1_796_440_800, 15, 8
# the texts the engines write for values (Go's strconv 'g' formatting, Prometheus' and MetricsQL's specials)
VALUES = st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "0", "1e+21", "-0", "1980000000"]))
# label names and values as hostile as JSON lets them be: quotes, backslashes, the very bytes the
# split cuts at, newlines (escaped in JSON), any Unicode but lone surrogates
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['},"values":[', ']},{"metric":', '"', "\\", "\n", ']}]}', '{"metric":{', "[1,\"2\"]"])
SERIES = st.builds(lambda labels, pts: {"metric": labels, "values": [[START + STEP * k, v] for k, v in sorted(pts)]},
                   st.dictionaries(TEXT, TEXT, max_size=4),
                   st.lists(st.tuples(st.integers(0, N - 1), VALUES), max_size=N, unique_by=lambda p: p[0]))
# what may follow the data in the envelope
TAILS = st.sampled_from(["", ',"stats":{"seriesFetched":"3","executionTimeMsec":1}',
                         ',"warnings":["a \\"warning\\" ]}]"]', ',"infos":["x"]'])


def body(result: list, tail: str = "") -> bytes:
    whole = orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
    return whole[:-1] + tail.encode() + b"}"


def same(a: tuple, b: tuple) -> None:
    keys_a, labels_a, *arrays_a = a
    keys_b, labels_b, *arrays_b = b
    assert len(keys_a) == len(keys_b)
    assert [labels_a(i) for i in range(len(keys_a))] == [labels_b(i) for i in range(len(keys_b))]
    for x, y in zip(arrays_a, arrays_b):
        assert np.array_equal(x, y, equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(SERIES, max_size=6), TAILS)
def test_split_answers_what_json_does(result, tail):
    raw = body(result, tail)
    split = split_matrix(raw)
    parsed = orjson.loads(raw)["data"]
    if result:
        assert isinstance(split, Matrix)  # the engines' compact layout is always taken apart
        same(decode_range(split, START, STEP, N), decode_range(parsed, START, STEP, N))
    assert decode_range(split or parsed, START, STEP, N)[2].shape[0] == sum(len(s["values"]) for s in result)


@settings(max_examples=50, deadline=None)
@given(st.lists(SERIES, min_size=1, max_size=4))
def test_another_layout_is_read_as_json(result):
    """Whitespace or another key order: not split, parsed as JSON, the same values."""
    pretty = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}, indent=1).encode()
    reordered = orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"values": s["values"], "metric": s["metric"]} for s in result]}})
    compact = split_matrix(body(result))
    for raw in (pretty, reordered):
        if any(s["values"] for s in result):
            assert split_matrix(raw) is None
        same(decode_range(orjson.loads(raw)["data"], START, STEP, N), decode_range(compact, START, STEP, N))


def test_what_is_not_a_whole_successful_matrix_is_left_to_json():
    one = body([{"metric": {"node": "n1"}, "values": [[START, "1"]]}])
    assert split_matrix(one) is not None
    histograms = {"metric": {"node": "n2"}, "histograms": [[START, {"count": "2", "sum": "3"}]]}
    for raw in (one[:-3], one[:-1], one.replace(b'"success"', b'"error"'),
                # a series of native histograms alone between two of values, or before them
                body([{"metric": {"node": "n1"}, "values": [[START, "1"]]}, histograms,
                      {"metric": {"node": "n3"}, "values": [[START, "4"]]}]),
                body([histograms, {"metric": {"node": "n3"}, "values": [[START, "4"]]}]),
                one.replace(b'"matrix"', b'"vector"'), b"",
                # a native histogram beside the values: more than points
                one.replace(b'"values":[[1796440800,"1"]]', b'"values":[[1796440800,"1"]],"histograms":[[1,{"count":"2"}]]')):
        assert split_matrix(raw) is None, raw


def vector(result: list, tail: str = "") -> bytes:
    whole = orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    return whole[:-1] + tail.encode() + b"}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(lambda labels, v: {"metric": labels, "value": [START, v]},
                          st.dictionaries(TEXT, TEXT, max_size=4), VALUES), max_size=6), TAILS)
def test_split_vector_answers_the_labels_json_does(result, tail):
    """An instant query's vector in the engines' compact layout: each series' labels, in order,
    whatever its label names and values hold (the bytes the split cuts at among them)."""
    raw = vector(result, tail)
    split = split_vector(raw)
    if not result:
        assert split is None  # nothing to split: JSON's empty result
        return
    labels, envelope = split
    assert [orjson.loads(x) for x in labels] == [s["metric"] for s in orjson.loads(raw)["data"]["result"]]
    assert envelope["status"] == "success"


def test_what_is_not_a_whole_successful_vector_is_left_to_json():
    one = vector([{"metric": {"node": "n1"}, "value": [START, "1"]}, {"metric": {"node": "n2"}, "value": [START, "2"]}])
    assert split_vector(one)[0] == [b'{"node":"n1"}', b'{"node":"n2"}']
    partial = one.replace(b'"success",', b'"success","isPartial":true,', 1)
    assert split_vector(partial)[1]["isPartial"] is True
    histogram = {"metric": {"node": "n3"}, "histogram": [START, {"count": "2", "sum": "3"}]}
    for raw in (one[:-3], one[:-1], one.replace(b'"success"', b'"error"'), one.replace(b'"vector"', b'"matrix"'), b"",
                json.dumps(orjson.loads(one), indent=1).encode(),  # another layout
                vector([{"metric": {"node": "n1"}, "value": [START, "1"]}, histogram,
                        {"metric": {"node": "n2"}, "value": [START, "2"]}]),
                vector([histogram, {"metric": {"node": "n2"}, "value": [START, "2"]}]),
                vector([{"metric": {"node": "n2"}, "value": [START, "2"]}, histogram]),
                one.replace(b'[1796440800,"1"]', b'[1796440800,"1","2"]')):
        assert split_vector(raw) is None, raw


@pytest.mark.parametrize("points", [b'[[1796440800,"1","2"]]', b'[[1796440800]]', b'[[1796440800,"x"]]',
                                    b'[[1796440807,"1"]]', b'[[1796441800,"1"]]'])
def test_a_malformed_point_is_refused(points):
    raw = body([{"metric": {"node": "n1"}, "values": [[START, "1"]]}]).replace(b'[[1796440800,"1"]]', points)
    with pytest.raises(ValueError):
        split = split_matrix(raw)
        decode_range(split if split is not None else orjson.loads(raw)["data"], START, STEP, N)


def test_labels_that_are_not_strings_are_refused_when_first_read():
    raw = body([{"metric": {"node": "n1"}, "values": [[START, "1"]]}]).replace(b'"node":"n1"', b'"node":1')
    keys, labels_of, *_ = decode_range(split_matrix(raw), START, STEP, N)
    with pytest.raises(ValueError):
        labels_of(0)


@pytest.mark.parametrize("data", [[], {"result": {}}, {"result": [1]}, {"result": [{"metric": [], "values": [[1, "1"]]}]},
                                  {"result": [{"metric": {}, "values": 5}]}, {"result": [{"metric": {}, "values": [7]}]}])
def test_a_malformed_json_answer_is_refused_not_crashed_on(data):
    with pytest.raises(ValueError):
        decode_range(data, START, STEP, N)


def test_labels_that_are_not_an_object_are_refused():
    raw = body([{"metric": {"node": "n1"}, "values": [[START, "1"]]}]).replace(b'{"node":"n1"}', b'"n1"')
    keys, labels_of, *_ = decode_range(split_matrix(raw), START, STEP, N)
    with pytest.raises(ValueError):
        labels_of(0)


@pytest.mark.parametrize("partial", [b"false", b"true"])
def test_vmselects_head_is_split_and_says_whether_in_part(partial):
    result = [{"metric": {"node": "n1"}, "values": [[START, "1"], [START + STEP, "2"]]}]
    raw = body(result).replace(b'"success",', b'"success","isPartial":' + partial + b",", 1)
    split = split_matrix(raw)
    assert split is not None and split.envelope["isPartial"] is (partial == b"true")
    same(decode_range(split, START, STEP, N), decode_range(orjson.loads(raw)["data"], START, STEP, N))


def _large_answer(series: int = 6000, nan_every: int = 0) -> tuple[bytes, list]:
    """An answer over MIN_BYTES (decode_pool.py): one series per GPU of `series // 8` nodes."""
    rng = np.random.default_rng(7)
    result = [{"metric": {"instance": f"node{i // 8:05d}:9400", "gpu": str(i % 8), "note": 'a "quoted" ]},{"metric":'},
               "values": [[START + STEP * k, "NaN" if nan_every and (i * N + k) % nan_every == 0 else repr(float(v))]
                          for k, v in enumerate(rng.random(N) * 10.0 ** rng.integers(-3, 9))]} for i in range(series)]
    return body(result), result


@pytest.mark.parametrize("processes", [0, 2])
def test_answers_split_in_worker_processes_decode_as_in_the_thread(processes):
    """A large answer split and read in a worker process (decode_pool.py) decodes to exactly what
    the thread's split and JSON do; a small one is split in the thread; a malformed one is refused
    the same way."""
    from dashboard.sources.decode_pool import MIN_BYTES, DecodePool

    raw, result = _large_answer(nan_every=11)
    assert len(raw) > MIN_BYTES
    pool = DecodePool(processes)
    try:
        got = pool.split(raw)
        assert isinstance(got.times, np.ndarray) and isinstance(got.values, np.ndarray)
        want = decode_range({"result": result}, START, STEP, N)
        same(decode_range(got, START, STEP, N), want)
        same(decode_range(split_matrix(raw), START, STEP, N), want)
        small = body(result[:3])
        same(decode_range(pool.split(small), START, STEP, N), decode_range({"result": result[:3]}, START, STEP, N))
        bad = raw.replace(b'"NaN"', b'"NaN?"', 1)
        with pytest.raises(ValueError, match="malformed matrix"):
            pool.split(bad)
        assert not pool.broken
    finally:
        pool.close()


def test_a_broken_decode_pool_falls_back_to_the_thread(caplog):
    """A worker killed mid-cycle breaks the pool: it is dropped, the reason logged and kept, and the
    answer (and every one after it) split in the thread, to the same result."""
    import os
    import signal

    from dashboard.sources.decode_pool import DecodePool

    raw, result = _large_answer()
    pool = DecodePool(1)
    try:
        pool.split(raw)  # the worker started
        for pid in list(pool._pool._processes):
            os.kill(pid, signal.SIGKILL)
        got = pool.split(raw)
        assert pool.broken and "decode processes dropped" in caplog.text
        same(decode_range(got, START, STEP, N), decode_range({"result": result}, START, STEP, N))
        assert pool.split(raw) is not None and pool._pool is None
    finally:
        pool.close()


COUNTS = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["NaN", "+Inf", "0", "1e+21"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, N), COUNTS), max_size=N + 1, unique_by=lambda p: p[0]), max_size=5),
       st.booleans())
def test_an_event_counters_increase_is_what_the_engine_would_answer(series, split):
    """decode_increase over a counter asked from one step before the span gives, point for point,
    what `clamp_min(c - c offset <step>, 0)` answers over the span: the increase where the point a
    step before is there (a reset counting 0, NaN where either is NaN), nothing where it is not;
    from the compact layout or JSON alike."""
    from dashboard.sources.matrix import decode_increase

    result = [{"metric": {"port": str(i)}, "values": [[START - STEP + STEP * k, v] for k, v in sorted(pts)]}
              for i, pts in enumerate(series)]
    data = (split and split_matrix(body(result))) or {"result": result}
    keys, labels_of, sid, col, val = decode_increase(data, START, STEP, N)
    got = {(labels_of(int(s))["port"], int(c)): v for s, c, v in zip(sid, col, val)}
    want = {}
    for i, pts in enumerate(series):
        at = {k: float(v) for k, v in pts}  # columns from START - STEP
        for k, v in at.items():
            if k - 1 in at:
                with np.errstate(invalid="ignore"):
                    want[(str(i), k - 1)] = float(np.maximum(v - at[k - 1], 0.0))
    assert got.keys() == want.keys()
    assert all(got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])) for k in want)
    assert all(0 <= c < N for c in col)


def test_an_event_counters_points_out_of_order_are_put_in_order():
    from dashboard.sources.matrix import decode_increase

    result = [{"metric": {"port": "1"}, "values": [[START + STEP, "7"], [START - STEP, "2"], [START, "5"]]}]
    _, _, sid, col, val = decode_increase({"result": result}, START, STEP, N)
    assert col.tolist() == [0, 1] and val.tolist() == [3.0, 2.0]


# raw samples' times in milliseconds, from two steps before the grid to one after it, many on the
# grid's own times (a scrape exactly at a grid time belongs to it)
SAMPLE_MS = st.one_of(st.integers(-2 * STEP * 1000, (N + 1) * STEP * 1000),
                      st.integers(-2, N).map(lambda k: k * STEP * 1000))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(SAMPLE_MS, VALUES), max_size=12, unique_by=lambda p: p[0]), max_size=5),
       st.booleans())
def test_raw_samples_land_on_the_first_grid_time_at_or_after_them(series, split):
    """decode_samples over an instant query's raw samples (`selector[span]`) gives each series, at
    each grid time, its latest sample of the step that ends there (a range query's point there,
    where the series has a sample in that step), NaN kept as a point; samples before the grid's
    first step or after its last time are left out; from the compact layout or JSON alike."""
    from dashboard.sources.matrix import decode_samples

    result = [{"metric": {"gpu": str(i)}, "values": [[(START * 1000 + ms) / 1000, v] for ms, v in sorted(pts)]}
              for i, pts in enumerate(series)]
    data = (split and split_matrix(body(result))) or {"result": result}
    keys, labels_of, sid, col, val = decode_samples(data, START, STEP, N)
    got = {(labels_of(int(s))["gpu"], int(c)): v for s, c, v in zip(sid, col, val)}
    want = {}
    for i, pts in enumerate(series):
        for k in range(N):
            inside = [(ms, v) for ms, v in pts if (k - 1) * STEP * 1000 < ms <= k * STEP * 1000]
            if inside:
                want[(str(i), k)] = float(max(inside)[1])
    assert got.keys() == want.keys()
    assert all(got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])) for k in want)


def test_raw_samples_out_of_order_are_put_in_order():
    from dashboard.sources.matrix import decode_samples

    result = [{"metric": {"gpu": "0"}, "values": [[START + 14, "3"], [START + 2, "1"], [START - 1, "9"], [START + 10, "2"]]}]
    _, _, sid, col, val = decode_samples({"result": result}, START, STEP, N)
    assert col.tolist() == [0, 1] and val.tolist() == [9.0, 3.0]


# counters: mostly rising, sometimes reset, now and then NaN, infinite or (a broken exporter) negative
COUNTER_VALUES = st.one_of(st.integers(0, 10**6).map(float), st.floats(0, 1e15, allow_nan=False),
                           st.sampled_from([float("nan"), float("inf"), float("-inf")]), st.floats(-1e3, 0))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(SAMPLE_MS.map(lambda ms: ms - 45_000), COUNTER_VALUES), max_size=14,
                         unique_by=lambda p: p[0]), max_size=5),
       st.sampled_from([60.0, 45.0, 37.5]), st.integers(0, N - 1), st.booleans())
def test_a_counters_rate_is_what_prometheus_works_out(series, window, since, split):
    """decode_rate over a counter's raw samples gives, at each grid time from `since` on, Prometheus'
    `rate(selector[window])` there (its loop over the window's samples, both ends included),
    nothing where it has fewer than two samples; from the compact layout or JSON alike."""
    from dashboard.sources.matrix import decode_rate

    result = [{"metric": {"port": str(i)}, "values": [[(START * 1000 + ms) / 1000, repr(v)] for ms, v in sorted(pts)]}
              for i, pts in enumerate(series)]
    data = (split and split_matrix(body(result))) or {"result": result}
    keys, labels_of, sid, col, val = decode_rate(data, START, STEP, N, window, START + since * STEP)
    got = {(labels_of(int(s))["port"], int(c)): v for s, c, v in zip(sid, col, val)}
    want = {}
    for i, pts in enumerate(series):
        for k in range(since, N):
            r = prometheus_rate(sorted(pts), k * STEP * 1000, int(window * 1000))
            if r is not None:
                want[(str(i), k)] = r
    assert got.keys() == want.keys()
    assert all(got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])) for k in want)


def test_a_counters_samples_out_of_order_or_repeated_are_put_in_order():
    from dashboard.sources.matrix import decode_rate

    result = [{"metric": {"port": "1"}, "values": [[START, "30"], [START - 30, "0"], [START - 15, "15"], [START - 15, "15"]]}]
    _, _, sid, col, val = decode_rate({"result": result}, START, STEP, 2, 30.0)
    assert col.tolist() == [0, 1] and val.tolist() == [1.0, 1.0]
