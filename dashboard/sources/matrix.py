"""A range query's answer (`/api/v1/query_range`, a matrix), or an instant query's of a range
selector (`selector[span]`: raw samples, the same layout), decoded onto the step grid (a counter's
raw samples as its rate there: `decode_rate`).

At 4,096 nodes a steady cycle's answers hold about 400,000 series and 2 million points; parsed as
JSON, each point is a list, an int and a str, and each series a dict of labels that is then looked
up again to find its row: that was most of the source's own CPU a cycle. Prometheus (and Thanos,
which serves its API code) and VictoriaMetrics (vmselect adding `isPartial`) write the answer in one
compact layout,

    {"status":"success",["isPartial":false,]"data":{"resultType":"matrix","result":[{"metric":{...},"values":[[t,"v"],...]},...]}...}

which `split_matrix` reads without a JSON object per point or per series: each series' labels stay
the bytes the engine wrote (the same bytes every cycle, so they find the series' row as they are,
and are parsed only for a series not seen before), and the points are one list of numbers' texts,
read in one call. The split is exact: the sequences it cuts at (`,"values":[` where a series'
labels end, `]},{"metric":` where its points end) hold an unescaped quote, which no JSON string
can, so a label value never misleads it; the pieces must alternate labels and points, the envelope
after the last series parse as a successful answer, and every point be `[time,"value"]`. An answer
in any other layout (whitespace, another key order, a native histogram's fields) is parsed as JSON
instead, with the same result (tests/test_matrix.py).
"""

from __future__ import annotations

from itertools import chain, islice
from operator import itemgetter

import fastnumbers
import numpy as np
import orjson

# how a successful matrix begins: Prometheus' and single-node VictoriaMetrics'; then a VictoriaMetrics
# cluster's vmselect's, which says in every answer whether a storage node failed to answer
HEADS = tuple(b'{"status":"success",' + partial + b'"data":{"resultType":"matrix","result":[{"metric":'
              for partial in (b"", b'"isPartial":false,', b'"isPartial":true,'))
_FIRST_LABELS = len(b'{"metric":')
# where a series' labels end and its points begin, and where its points end and the next series'
# labels begin (an answer holding a newline, which compact JSON never does, is another layout)
_LABELS_END = b',"values":['
_POINTS_END = b']},{"metric":'
_POINT_PUNCTUATION = b'["]'
# an instant query's vector, the same way: a series' labels end where its one point begins
VECTOR_HEADS = tuple(h.replace(b'"matrix"', b'"vector"') for h in HEADS)
_VALUE = b',"value":['


class Matrix:
    """A matrix answer split (`split_matrix`): per series its labels as the engine wrote them (JSON
    bytes) and its points' count; the points' times and values as texts, in order, or as numbers
    once read (`split_numbers`)."""

    __slots__ = ("metrics", "lengths", "times", "values", "envelope")

    def __init__(self, metrics: list[bytes], lengths: np.ndarray, times: list[bytes] | np.ndarray,
                 values: list[bytes] | np.ndarray, envelope: dict):
        self.metrics, self.lengths, self.times, self.values = metrics, lengths, times, values
        self.envelope = envelope  # the answer less its series (status, isPartial, stats, warnings)

    def __reduce__(self):  # sent back from a decode process (decode_pool.py)
        return Matrix, (self.metrics, self.lengths, self.times, self.values, self.envelope)


def split_numbers(content: bytes) -> Matrix | None:
    """`split_matrix` with the points' times and values read as numbers: all of the answer's work
    that needs no state, so it can run in another process (decode_pool.py)."""
    m = split_matrix(content)
    if m is not None:
        m.times, m.values = _numbers(m.times, "time"), _numbers(m.values, "value")
    return m


def split_matrix(content: bytes) -> Matrix | None:
    """`content` split as the module doc says; None where it is not in the compact layout or not a
    successful matrix (the caller parses it as JSON and reports what it says)."""
    head = next((h for h in HEADS if content.startswith(h)), None)
    if head is None or b"\n" in content:
        return None
    # cut at each series' labels' end, then each piece at its points' end: one pass over the bytes
    # for each, where replacing both with a newline and splitting at that made three
    pieces = content[len(head):].split(_LABELS_END)
    parts = [pieces[0]]
    for piece in islice(pieces, 1, None):
        points, cut, labels = piece.partition(_POINTS_END)
        parts.append(points)
        if cut:
            parts.append(labels)
    if content.count(_POINTS_END, len(head)) != len(parts) - len(pieces):  # each cut where one is: exact
        return None  # two points' ends between labels' ends (a series without "values"): JSON's
    # labels, points, labels, points...: the last points end with the series' `]}`, the result's `]`
    # and the envelope's rest (data's end, stats, warnings), which must parse as such
    if len(parts) % 2:
        return None
    last = parts[-1]
    cut, envelope = _envelope(head, last)
    if envelope is None:
        return None
    parts[-1] = last[:cut]
    metrics, points = parts[0::2], parts[1::2]
    flat = b",".join(filter(None, points))
    if b":" in flat or b"}" in flat:  # a series with more than its points (native histograms): JSON's
        return None
    lengths = np.fromiter(map(bytes.count, points, [b"["] * len(points)), np.int64, len(points))
    flat = flat.translate(None, _POINT_PUNCTUATION)
    tokens = flat.split(b",") if flat else []
    if len(tokens) != 2 * int(lengths.sum()):
        raise ValueError("malformed matrix: a point is not [time, value]")
    return Matrix(metrics, lengths, tokens[0::2], tokens[1::2], envelope)


def split_vector(content: bytes) -> tuple[list[bytes], dict] | None:
    """An instant query's answer (a vector) in the compact layout as each series' labels (the bytes
    the engine wrote, in order) and the envelope, its values not read; None where it is in another
    layout or not a successful vector (the caller parses it as JSON). Exact as `split_matrix` is: each
    series a `[time,"value"]` point after its labels, a count of the points' ends over the answer."""
    head = next((h for h in VECTOR_HEADS if content.startswith(h)), None)
    if head is None or b"\n" in content:
        return None
    pieces = content[len(head):].split(_VALUE)
    if len(pieces) < 2 or content.count(_POINTS_END, len(head)) != len(pieces) - 2:
        return None
    labels, values = [pieces[0]], []
    for piece in islice(pieces, 1, len(pieces) - 1):
        value, _, following = piece.partition(_POINTS_END)
        values.append(value)
        labels.append(following)
    last = pieces[-1]
    cut, envelope = _envelope(head, last)
    if envelope is None:
        return None
    values.append(last[:cut])
    points = b",".join(values)
    if b":" in points or b"}" in points or points.count(b",") != 2 * len(values) - 1:
        return None  # a series with more than its point (a native histogram's): JSON's
    return labels, envelope


def _envelope(head: bytes, last: bytes) -> tuple[int, dict | None]:
    """Where the last series' end (`]}]`: its points', the result's) is in the answer's `last`
    piece, and the envelope around the series (head less the first labels, and what follows the
    result: data's end, stats, warnings) parsed; None where it does not parse as a successful answer."""
    cut = last.find(b"]}]")
    if cut < 0:
        return cut, None
    try:
        envelope = orjson.loads(head[:-_FIRST_LABELS] + last[cut + 2:])
    except orjson.JSONDecodeError:
        return cut, None
    return cut, envelope if isinstance(envelope, dict) and envelope.get("status") == "success" else None


def _numbers(texts: list, what: str) -> np.ndarray:
    """Numbers or their texts (bytes or str) as floats in one call (fastnumbers: correctly rounded,
    as float(); half the time of parsing each distinct text once with float())."""
    got = np.empty(len(texts))
    try:
        fastnumbers.try_array(texts, got)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"malformed matrix: {what}: {exc}") from None
    return got


def decode_range(data, start: float, step: float, n: int) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """A range query's answer (a Matrix, or the `data` of one parsed as JSON) as (a key per series
    with points, unique to its labels: the labels' bytes or their names and values; a function from
    a series' index to its labels, a dict; then per point: its series, its column on the grid
    start + k * step (k < n), its value), decoded in bulk rather than series by series. A point off
    that grid (no engine that evaluates PromQL returns one) or malformed labels raise ValueError:
    the signal is then absent and named, never misplaced."""
    keys, labels_of, lengths, ts, vs = _points(data)
    col = np.rint((ts - start) / step).astype(np.int64)
    if np.any(np.abs(ts - (start + col * step)) > 1e-3) or np.any((col < 0) | (col >= n)):
        raise ValueError("points off the query's step grid")
    return keys, labels_of, np.repeat(np.arange(len(keys)), lengths), col, vs


def decode_samples(data, start: float, step: float, n: int) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """`decode_range` of raw samples (an instant query of `selector[span]`: each series' samples at
    their scrape times): each sample on the first grid time at or after it, the latest of a series
    there where several are (a scrape interval shorter than the step), those before `start` or after
    the grid's last time left out. So a grid time holds the latest sample of the step that ends at
    it, which is what a range query's point there is where the series has a sample in that step;
    older ones are carried over by the window's alignment (`align_grid`, LOOKBACK_STEPS), not by the
    engine's look-back (5 minutes on Prometheus)."""
    keys, labels_of, lengths, ts, vs = _points(data)
    sid = np.repeat(np.arange(len(keys)), lengths)
    # a millisecond timestamp exactly on a grid time belongs to it, never to the next one
    col = np.ceil((ts - start) / step - 1e-6).astype(np.int64)
    keep = (col >= 0) & (col < n)
    sid, col, ts, vs = sid[keep], col[keep], ts[keep], vs[keep]
    if sid.size > 1 and np.any((sid[1:] < sid[:-1]) | ((sid[1:] == sid[:-1]) & (ts[1:] < ts[:-1]))):
        order = np.lexsort((ts, sid))  # an engine answers each series in time order; not relied on
        sid, col, vs = sid[order], col[order], vs[order]
    last = np.ones(sid.shape, bool)
    last[:-1] = (sid[1:] != sid[:-1]) | (col[1:] != col[:-1])
    return keys, labels_of, sid[last], col[last], vs[last]


def decode_rate(data, start: float, step: float, n: int, window: float, since: float | None = None
                ) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """`decode_range` of a counter's per-second rate over `window` seconds from its raw samples (an
    instant query of `selector[span]` reaching `window` before the first grid time asked), worked
    out as Prometheus' `rate(selector[window])` at each grid time t from `since` on (all of them
    where None): the samples in [t - window, t], both ends included as Prometheus 2 includes them,
    at least two; their increase, a decrease being a reset (the value before it added back); then
    extrapolated towards the window's ends by what the samples' spacing allows (to an end within
    1.1 of the mean spacing, else half a spacing; a counter's start no further back than where it
    would be 0), per second of the window. Times are the samples' milliseconds, as the engine's.
    What this leaves out is what that query leaves out: a grid time with fewer than two samples."""
    keys, labels_of, sid, tms, vs = counter_samples(data)
    return (keys, labels_of, *rates(sid, tms, vs, len(keys), start, step, n, window, since))


def counter_samples(data) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """A raw-sample answer's (series keys, labels_of, then per sample: its series, its time in
    milliseconds, its value), ordered by series and time, a repeated time once (its last sample)."""
    keys, labels_of, lengths, ts, vs = _points(data)
    sid = np.repeat(np.arange(len(keys)), lengths)
    return (keys, labels_of, *in_order(sid, np.rint(ts * 1000.0).astype(np.int64), vs))


def in_order(sid: np.ndarray, tms: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples ordered by series and time, a repeated time once (the last of them)."""
    if sid.size > 1 and np.any((sid[1:] < sid[:-1]) | ((sid[1:] == sid[:-1]) & (tms[1:] <= tms[:-1]))):
        order = np.lexsort((tms, sid))  # an engine answers each series in time order; not relied on
        sid, tms, vs = sid[order], tms[order], vs[order]
        once = np.ones(sid.shape, bool)
        once[:-1] = (sid[1:] != sid[:-1]) | (tms[1:] != tms[:-1])
        sid, tms, vs = sid[once], tms[once], vs[once]
    return sid, tms, vs


def rates(sid: np.ndarray, tms: np.ndarray, vs: np.ndarray, S: int, start: float, step: float, n: int,
          window: float, since: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`decode_rate`'s rates of the samples of S series (`in_order`; times in milliseconds): per
    rate its series, its column, its value."""
    first = 0 if since is None else max(0, int(np.ceil((since - start) / step - 1e-6)))
    cols = np.arange(first, n, dtype=np.int64)
    if not tms.size or not cols.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    wms = int(round(window * 1000))
    at = np.rint((start + cols * step) * 1000.0).astype(np.int64)
    # per series and grid time, how many of its samples lie at or before it, and before its window:
    # each sample's first grid time at or after it (and after it less the window), counted per
    # (series, grid time) and summed along the grid; the window's first and last samples' indices
    # follow from the series' start. Linear in the samples and cells, for a cold hour as a steady step.
    C = cols.size
    per = np.bincount(sid, minlength=S)
    first_of = np.zeros(S, np.int64)
    np.cumsum(per[:-1], out=first_of[1:])
    base = np.arange(0, S * (C + 1), C + 1)[sid]

    def counted(after: np.ndarray) -> np.ndarray:  # (S, C + 1): the last column past the grid
        counts = np.bincount(base + after, minlength=S * (C + 1)).reshape(S, C + 1)
        return np.cumsum(counts, axis=1, out=counts).ravel()

    upto = counted(np.searchsorted(at, tms, side="left"))
    before = counted(np.searchsorted(at, tms + wms, side="right"))
    enough = (upto - before) >= 2
    enough[C::C + 1] = False
    cell = np.flatnonzero(enough)
    del enough
    row, col = np.divmod(cell, C + 1)
    lo = before[cell] + first_of[row]
    hi = upto[cell] + (first_of[row] - 1)
    del upto, before, cell
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        first_v = vs[lo]
        result = vs[hi] - first_v
        # a reset adds back the value before it: added up in order over each window that has one,
        # as Prometheus adds them (a running sum over every series would round them)
        reset = np.zeros(vs.shape[0] + 1, bool)
        reset[1:-1] = (sid[1:] == sid[:-1]) & (vs[1:] < vs[:-1])
        if reset.any():
            resets = np.cumsum(reset)
            some = np.flatnonzero(resets[hi] > resets[lo])
            drop = np.zeros(vs.shape[0] + 1)
            drop[1:-1] = np.where(reset[1:-1], vs[:-1], 0.0)
            at_, end_, added = lo[some] + 1, hi[some], np.zeros(some.size)
            for _ in range(int((end_ - at_).max(initial=-1)) + 1):  # one sample of every such window at a time
                added += np.where(at_ <= end_, drop[np.minimum(at_, end_)], 0.0)
                at_ += 1
            result[some] += added
        t_lo, t_hi, t_at = tms[lo], tms[hi], at[col]
        spacing = (hi - lo).astype(np.float64)
        del lo, hi
        sampled = (t_hi - t_lo) / 1000.0
        to_start = (t_lo - (t_at - wms)) / 1000.0
        to_end = np.subtract(t_at, t_hi, out=t_at) / 1000.0
        del t_lo, t_hi, t_at
        np.divide(sampled, spacing, out=spacing)
        # a counter starts no further back than where it would be 0
        to_zero = sampled * (first_v / result)
        np.copyto(to_start, to_zero, where=(result > 0) & (first_v >= 0) & (to_zero < to_start))
        del to_zero, first_v
        reach = spacing * 1.1
        half = spacing / 2
        stretch = sampled + np.where(to_start < reach, to_start, half)
        stretch += np.where(to_end < reach, to_end, half)
        result *= stretch / sampled
        result /= wms / 1000.0
    return row, col + first, result


def _points(data) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """A matrix answer's (series keys, labels_of, points per series, every point's time and value)."""
    if isinstance(data, Matrix):
        keep = np.flatnonzero(data.lengths)
        if keep.size == len(data.metrics):  # every series has points (the engines leave out those without)
            keys, lengths = data.metrics, data.lengths
        else:
            keys, lengths = list(map(data.metrics.__getitem__, keep.tolist())), data.lengths[keep]
        labels_of = _parsed(keys)
        ts, vs = (x if isinstance(x, np.ndarray) else _numbers(x, what)
                  for x, what in ((data.times, "time"), (data.values, "value")))
    else:
        result = data.get("result", []) if isinstance(data, dict) else None
        result = [] if result is None and isinstance(data, dict) else result  # `null`: none
        if not isinstance(result, list) or not all(isinstance(s, dict) for s in result):
            raise ValueError("malformed matrix: the result is not a list of series")
        result = [s for s in result if s.get("values")]
        labels = [s.get("metric") or {} for s in result]
        if not all(isinstance(lbl, dict) for lbl in labels):
            raise ValueError("malformed matrix: a series' labels are not an object")
        keys = [(*lbl, *lbl.values()) for lbl in labels]  # names, then values: no sort, the length tells
        labels_of = labels.__getitem__
        try:
            values = list(map(itemgetter("values"), result))
            lengths = np.fromiter(map(len, values), np.int64, len(values))
            flat = list(chain.from_iterable(chain.from_iterable(values)))
        except TypeError as exc:
            raise ValueError(f"malformed matrix: {exc}") from None
        if len(flat) != 2 * int(lengths.sum()):
            raise ValueError("malformed matrix: a point is not [time, value]")
        ts, vs = _numbers(flat[0::2], "time"), _numbers(flat[1::2], "value")
    return keys, labels_of, lengths, ts, vs


def decode_increase(data, start: float, step: float, n: int) -> tuple[list, object, np.ndarray, np.ndarray, np.ndarray]:
    """`decode_range` of an event counter's answer asked from `start - step`: each point on the grid
    from `start` the counter's increase since the point one step before it, clamped at 0 (a reset
    counts none), where both points are there: what `clamp_min(c - c offset <step>, 0)` answers,
    with each raw series read once instead of twice (the engine's work of a query like it halves).
    A point whose predecessor is missing is left out, as that query leaves it out."""
    keys, labels_of, sid, col, vs = decode_range(data, start - step, step, n + 1)
    if sid.size > 1 and np.any((sid[1:] < sid[:-1]) | ((sid[1:] == sid[:-1]) & (col[1:] <= col[:-1]))):
        order = np.lexsort((col, sid))  # an engine answers each series in time order; not relied on
        sid, col, vs = sid[order], col[order], vs[order]
    follows = (sid[1:] == sid[:-1]) & (col[1:] == col[:-1] + 1)
    with np.errstate(invalid="ignore"):
        rise = np.maximum(vs[1:][follows] - vs[:-1][follows], 0.0)
    return keys, labels_of, sid[1:][follows], col[1:][follows] - 1, rise


def _parsed(keys: list[bytes]):
    def labels_of(i: int) -> dict:
        try:
            got = orjson.loads(keys[i])
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"malformed matrix: a series' labels: {exc}") from None
        if not isinstance(got, dict) or not all(isinstance(v, str) for v in got.values()):
            raise ValueError("malformed matrix: a series' labels are not an object of strings")
        return got
    return labels_of
