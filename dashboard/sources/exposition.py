"""A lenient, fast reader of Prometheus text / OpenMetrics exposition: text -> samples.

Copes with what real exports look like: no `# HELP`/`# TYPE` lines, lines indented as pasted
(`        node_infiniband_...`), values in exponent form (`2.106905e+06`), `NaN`/`+Inf`, escaped quotes
in label values, empty label values (`pod_uid=""`), optional timestamps in seconds (OpenMetrics,
bundles) or milliseconds (Prometheus text format): `ts_unit="auto"` takes values above 1e11 as
milliseconds. A line that does not parse is counted and skipped, never fatal. Pure.

Cost is linear in the input: labels are scanned with `str.find`, not a backtracking regex (the
former `(?:[^"\\\\]|\\\\.)*` pattern kept a backtracking frame per character: ~175 bytes of memory per
byte of label), and a line longer than `MAX_LINE` is skipped and counted (`long_lines`).

`read_columns` is the bulk path for files (bundles): it streams the file in chunks of bytes, finds
the runs of consecutive lines sharing one series head for a whole chunk at once with numpy (heads
compared as rows of words; `_Reader._runs` steps run by run where a chunk does not suit), parses
each distinct head once, and converts the runs' `value timestamp` tokens column-wise with numpy
(exact, as `float()`), the rare other values by fastnumbers (correctly rounded), one call per chunk.
Lines it cannot take that way (no timestamp, extra spaces, odd numbers) go through the line
parser above, so both paths give the same samples.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import fastnumbers
import numpy as np

MAX_LINE = 64 * 1024  # bytes (characters for text): longer lines are skipped and counted

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEY = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"')
_AFTER = re.compile(r"\s*,?")
_UNESCAPE = re.compile(r"\\(.)")
# parse_labels' loop on a body without backslashes, as two C-level passes: the whole body checked
# (no two quantifiers can take the same character: linear, whatever the body), then the pairs
_PLAIN_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"')  # no leading \s*: findall would rescan it
_PLAIN_LABELS = re.compile(r'(?:\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"[^"]*"(?:\s*,)?)*[ ,]*')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float
    timestamp: float | None  # unix seconds, or None when the exposition had none


def _unescape(v: str) -> str:
    return _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), v) if "\\" in v else v


def parse_labels(body: str) -> dict[str, str] | None:
    """`a="1",b="x \\"y\\""` (the text between the braces) -> labels, or None when malformed.
    Linear: each value's closing quote is found with `str.find` and the backslashes before it."""
    if "\\" not in body and _PLAIN_LABELS.fullmatch(body):  # no escapes: one C-level pass
        return dict(_PLAIN_PAIR.findall(body))
    out: dict[str, str] = {}
    pos, n = 0, len(body)
    while pos < n:
        m = _KEY.match(body, pos)
        if m is None:
            if body[pos:].strip(" ,") == "":
                break
            return None
        start = p = m.end()
        while True:
            q = body.find('"', p)
            if q < 0:
                return None
            b = q
            while b > start and body[b - 1] == "\\":
                b -= 1
            if (q - b) % 2 == 0:  # an even run of backslashes escapes only itself
                break
            p = q + 1
        out[m.group(1)] = _unescape(body[start:q])
        pos = _AFTER.match(body, q + 1).end()
    return out


def parse_value(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        t = text.lower()
        if t in ("nan",):
            return math.nan
        if t in ("+inf", "inf"):
            return math.inf
        if t == "-inf":
            return -math.inf
        return None


def split_line(line: str) -> tuple[str, dict[str, str], str, str | None] | None:
    """A stripped, non-comment line -> (name, labels, value text, timestamp text or None).

    The label block is the longest `{...}` followed by one or two whitespace-separated tokens (a
    label value may hold `}` and spaces), as the reader always took it."""
    m = _NAME.match(line)
    if m is None:
        return None
    name, rest = m.group(), line[m.end():]
    if rest[:1] == "{":
        parts = rest.rsplit(None, 1)
        if len(parts) == 2 and parts[0].endswith("}"):
            block, value, ts = parts[0], parts[1], None
        else:
            parts = rest.rsplit(None, 2)
            if len(parts) != 3 or not parts[0].endswith("}"):
                return None
            block, value, ts = parts
        labels = parse_labels(block[1:-1])
        return None if labels is None else (name, labels, value, ts)
    if not rest[:1].isspace():
        return None
    toks = rest.split()
    if not 1 <= len(toks) <= 2:
        return None
    return name, {}, toks[0], (toks[1] if len(toks) == 2 else None)


def metric_name(line: str) -> str:
    """The name a (stripped) line starts with, as the `wanted` filter sees it."""
    end = len(line)
    for ch in "{ \t":
        i = line.find(ch, 0, end)
        if i >= 0:
            end = i
    return line[:end]


def parse_sample(line: str, ts_unit: str = "auto") -> Sample | None:
    got = split_line(line)
    if got is None:
        return None
    name, labels, v, t = got
    value = parse_value(v)
    if value is None:
        return None
    ts = None
    if t is not None:
        tv = parse_value(t)
        if tv is None or not math.isfinite(tv):
            return None
        ts = tv / 1000.0 if ts_unit == "ms" or (ts_unit == "auto" and abs(tv) > 1e11) else tv
    return Sample(name, labels, value, ts)


def iter_samples(text: str, ts_unit: str = "auto", stats: dict | None = None,
                 wanted: frozenset[str] | None = None) -> Iterator[Sample]:
    """Samples of an exposition, in order. `wanted`: only these metric names (faster on big files).
    `stats` (a dict) receives counts of parsed, skipped and over-long lines."""
    ok = bad = long_ = 0
    for raw in str(text).splitlines():
        if len(raw) > MAX_LINE:
            long_ += 1
            continue
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if wanted is not None and metric_name(line) not in wanted:
            continue
        s = parse_sample(line, ts_unit)
        if s is None:
            bad += 1
            continue
        ok += 1
        yield s
    if stats is not None:
        stats["samples"] = stats.get("samples", 0) + ok
        stats["skipped_lines"] = stats.get("skipped_lines", 0) + bad
        stats["long_lines"] = stats.get("long_lines", 0) + long_


# ------------------------------------------------------------------------------------ bulk reading

# A run: consecutive lines `HEAD value timestamp` with the same HEAD (how exporters' dumps, promtool
# and `openmetrics()` lay series out). The first line's head is whatever precedes its last two
# space-separated tokens; later lines must start with it byte for byte, and `_fast` checks that
# each holds exactly two tokens after it (the cheaper `[^\n]*` scans twice as fast).
_RUN = re.compile(rb"^([^\n]*) [^ \n]* [^ \n]*\n(?:\1 [^\n]*\n)*", re.M)
_NAME_BRACES = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", re.S)
_FIRST = re.compile(rb"^([^\n]*) [^ \n]* [^ \n]*\n", re.M)  # _RUN's first line
_SPACE = np.zeros(256, bool)
_SPACE[[9, 10, 11, 12, 13, 32]] = True  # what numpy's text parser skips as a separator
_SKIP, _SLOW = -1, -2
_UNSEEN = object()
_HEAD_WIDTH = 256  # bytes: chunks with a longer head go to _Reader._runs
_SLAB = 2048  # lines whose heads _Reader._line_runs compares at a time
_HEAD_MASKS: dict[int, np.ndarray] = {}
_PLAIN_VALUE = 40  # bytes: a float64's longest repr is 24
_DECIMAL = 16  # bytes: the longest token read_decimals reads (as "-", 14 digits, ".")
_POW10 = 10.0 ** np.arange(23)  # exact: 10**22 is the largest power of ten a float64 holds exactly
_IPOW10 = 10 ** np.arange(19, dtype=np.int64)
# row w: the 16 bytes of a token of w bytes right-aligned, as two little-endian words: the last w
# bytes kept, the rest cleared
_TOKEN_MASK = (np.arange(_DECIMAL) >= _DECIMAL - np.arange(_DECIMAL + 1)[:, None]).astype(np.uint8) * np.uint8(255)
_TOKEN_MASK = np.ascontiguousarray(_TOKEN_MASK.view("<u8").T)  # [word][w]: 1-D takes, not row gathers


@dataclass
class Columns:
    """Samples of the wanted series of a file, in file order: sample k belongs to series
    `codes[k]`, whose name and labels are `series[codes[k]]`. Series with the same label block
    share one labels dict: read it, never change it."""

    series: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    codes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    skipped_lines: int = 0  # lines of wanted metrics that did not parse
    long_lines: int = 0  # lines over MAX_LINE, skipped unread

    @property
    def samples(self) -> int:
        return int(self.codes.shape[0])


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated aranges [starts[i], starts[i] + lengths[i])."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)


def _rows(arr: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The rows arr[at[i]:at[i] + width] as one (n, width) uint8 copy. The bytes are viewed as
    overlapping `width`-byte items (a 1-byte stride) and gathered as such: one copy per row, about
    4x faster than a fancy index into sliding_window_view, which copies byte by byte."""
    items = np.ndarray((arr.shape[0] - width + 1,), f"V{width}", arr, 0, (1,))
    return items[at].view(np.uint8).reshape(-1, width)


def _head_masks(width: int) -> np.ndarray:
    """Row k: `width` bytes, the first k 0xff and the rest 0 (k = 0..width), as one flat array."""
    m = _HEAD_MASKS.get(width)
    if m is None:
        m = _HEAD_MASKS[width] = ((np.arange(width) < np.arange(width + 1)[:, None]) * np.uint8(255)).astype(np.uint8).ravel()
    return m


def _digits_at_line_ends(text: np.ndarray, sp: np.ndarray, nl: np.ndarray) -> np.ndarray | None:
    """When every line of `text` ("value time\\n" each; `sp`, `nl`: its space and newline) ends in a
    time of the same number of plain digits (the usual unix seconds), those times as float64
    (exact: below 2**53), blanked out in `text` for the values' parse; else None, `text` untouched."""
    width = nl - sp - 1
    w = int(width[0])
    if not 1 <= w <= 15 or np.any(width != w):
        return None
    at = nl[:, None] - np.arange(w, 0, -1)
    v = _digits_value(text[at])
    if v is not None:
        text[at] = 32
    return v


def _digits_value(chars: np.ndarray) -> np.ndarray | None:
    """Rows of ASCII digits (n x w, w <= 15) -> their integers as float64 (exact), or None when a
    byte is not a digit."""
    d = chars - np.uint8(48)
    if np.any(d > 9):
        return None
    # float64 matmul (numpy's integer one has no fast path): every product and partial sum is an
    # integer below 10**15 < 2**53, so exact in any order
    return d @ (10.0 ** np.arange(d.shape[1] - 1, -1, -1))


_SWAR = tuple((np.uint64(shift), np.uint64(times), np.uint64(mask)) for shift, times, mask in (
    (8, 10, 0x00FF00FF00FF00FF), (16, 100, 0x0000FFFF0000FFFF), (32, 10**4, 0xFFFFFFFF)))


def _swar8(v: np.ndarray) -> None:
    """In place: each uint64 of `v`, 8 digit values (0-9) as little-endian bytes (the first byte
    the most significant digit), -> the integer they write. Each step joins neighbouring lanes:
    lane = lane * 10**k + next lane (10*9+9 < 2**8, 100*99+99 < 2**16, 10**4*9999+9999 < 2**32),
    then clears the lanes that now hold nothing."""
    t = np.empty_like(v)
    for shift, times, mask in _SWAR:
        np.right_shift(v, shift, out=t)
        np.multiply(v, times, out=v)
        np.add(v, t, out=v)
        np.bitwise_and(v, mask, out=v)


def read_decimals(arr: np.ndarray, vs: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ok, values) of the tokens `arr[vs[i]:vs[i] + width[i]]` (width >= 1) read as plain decimals
    `[-]digits[.digits]` of 1 to 15 digits in at most _DECIMAL bytes; `ok[i]` False for any other
    shape (its value is junk). Exact, so bit-identical to float(): the digits form an integer
    mantissa below 10**15 < 2**53 and the value is one IEEE division by 10**f (f <= 15), correctly
    rounded like float() itself (the classic exact fast path of decimal conversion). One matrix of
    the tokens right-aligned, no Python object per value: about 30 % less time than the bytes.split
    + fastnumbers it spares."""
    n = vs.shape[0]
    C = _DECIMAL
    wide = width > C
    width = np.minimum(width, C)
    first = vs + width - C
    if int(first.min()) < 0:  # a short head at the chunk's start: pad so no row starts before 0
        arr, first = np.concatenate([np.full(C, 32, np.uint8), arr]), first + C
    d = _rows(arr, first, C)  # row i ends at token i's last byte
    d -= np.uint8(48)
    # the head's bytes before the token read as digit 0: each row's two words ANDed with a mask
    words = d.view("<u8")
    words[:, 0] &= _TOKEN_MASK[0][width]
    words[:, 1] &= _TOKEN_MASK[1][width]
    # the few bytes that are not digits (about one dot a token): where, which, then zeroed
    ex = np.flatnonzero(d > 9)
    r, c = ex >> 4, ex & 15  # divmod(ex, C): C is 16
    k = d.ravel()[ex]
    d.ravel()[ex] = 0
    dot = k == np.uint8(46 - 48 + 256)
    minus = (k == np.uint8(45 - 48 + 256)) & (c == C - width[r])  # a sign only as the first byte
    ndot = np.bincount(r[dot], minlength=n)
    neg = np.zeros(n, bool)
    neg[r[minus]] = True
    digits = width - ndot - neg
    ok = ~wide & (np.bincount(r[~(dot | minus)], minlength=n) == 0) & (ndot <= 1) & (digits >= 1) & (digits <= 15)
    # the digits as one integer with the dot read as a 0 (< 10**16): each word's 8 digits combined
    # in place, pairs, fours, then eight (SWAR: no lane can carry into the next), then the 2 words
    _swar8(words)
    m0 = (words[:, 0] * np.uint64(10**8) + words[:, 1]).view(np.int64)
    del d, words
    # then that 0 taken out: the f fraction digits stay, the integer part moves down one place
    f = np.zeros(n, np.int64)
    f[r[dot]] = (C - 1) - c[dot]
    frac = m0 % _IPOW10[f + 1]
    mant = np.where(ndot > 0, (m0 - frac) // 10 + frac, m0)
    values = mant.astype(np.float64) / _POW10[f]
    np.negative(values, out=values, where=neg)  # -0 stays -0.0, as float("-0")
    return ok, values


def _plain_lines(arr: np.ndarray, vs: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(times, values) when every line `arr[vs[i]:ends[i]]` is "value time" as bundles write it: a
    time of the same number of digits on every line after a space, a value of at most _PLAIN_VALUE
    bytes before it. Values of the usual shape are read exactly by `read_decimals`; the others' rows are
    copied whole from a strided view (no index per byte) and converted by fastnumbers (correctly
    rounded, as float()); None when a line is anything else, for the general path to judge."""
    n = ends.shape[0]
    first = arr[vs[0]:ends[0]].tobytes()
    w = len(first) - first.rfind(b" ") - 1
    if not 1 <= w <= 15 or w == len(first) or np.any(arr[ends - w - 1] != 32):
        return None
    width = ends - w - 1 - vs
    # each value starts with a byte other than whitespace: one token at least, so n tokens below
    # means one each (none can hide in a blank value while another splits in two)
    if int(width.min()) < 1 or int(width.max()) > _PLAIN_VALUE or np.any(arr[vs] <= 32):
        return None
    ts = _digits_value(_rows(arr, ends - w, w))
    if ts is None:
        return None
    ok, values = read_decimals(arr, vs, width)
    if ok.all():
        return ts, values
    rest = np.flatnonzero(~ok)
    vs, width = vs[rest], width[rest]
    cols = int(width.max()) + 1  # a blank after the longest value: tokens never run together
    if int(vs.max()) + cols > arr.shape[0]:  # a short last value near the end of the buffer
        arr = np.concatenate([arr, np.full(cols, 32, np.uint8)])
    blob = np.where(np.arange(cols) < width[:, None], _rows(arr, vs, cols), np.uint8(32)).tobytes()
    # whitespace inside a value splits it (the line parser's then); after it, both parsers drop
    # it; bytes that only str calls whitespace fail both. fastnumbers reads "nan(...)", float() not.
    tokens = blob.split()
    if len(tokens) != rest.shape[0] or b"(" in blob:
        return None
    got = np.empty(rest.shape[0])
    try:
        fastnumbers.try_array(tokens, got)
    except (ValueError, TypeError, OverflowError):
        return None
    values[rest] = got
    return ts, values


class _Reader:
    def __init__(self, wanted: frozenset[str], ts_unit: str, vectorised: bool = True):
        self.wanted, self.ts_unit, self.vectorised = wanted, ts_unit, vectorised
        self.heads: dict[bytes, int] = {}
        self.ids: dict[tuple, int] = {}
        # label block -> (labels, their sorted items): many series share one (a node's GPU 0 in each
        # metric), and share its labels dict too (Columns.series: read-only), so a consumer can
        # work a block out once (build.columns_window: its node)
        self.blocks: dict[str, tuple[dict[str, str], tuple] | None] = {}
        self.out = Columns()
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.run_lines = 0  # lines in the last whole run: the next run's guess

    def _id(self, name: str, labels: dict[str, str], items: tuple | None = None) -> int:
        key = (name, tuple(sorted(labels.items())) if items is None else items)
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.out.series)
            self.out.series.append((name, labels))
        return i

    def _labelled(self, name: str, body: str) -> int:
        """The series `name{body}`, its block parsed once per distinct block."""
        got = self.blocks.get(body, _UNSEEN)  # None: seen, malformed
        if got is _UNSEEN:
            labels = parse_labels(body)
            got = self.blocks[body] = None if labels is None else (labels, tuple(sorted(labels.items())))
        return _SLOW if got is None else self._id(name, got[0], got[1])

    def _head(self, head: bytes) -> int:
        """A run's head -> series id, _SKIP (comment, unwanted) or _SLOW (take its lines one by one)."""
        text = head.decode("utf-8", "replace")
        m = _NAME_BRACES.fullmatch(text)  # the usual head: what the checks below would find
        if m is not None:
            return self._labelled(m.group(1), m.group(2)) if m.group(1) in self.wanted else _SKIP
        if not text or text != text.strip():
            return _SLOW
        if text[0] == "#":
            return _SKIP
        name = metric_name(text)
        if name not in self.wanted:
            return _SKIP
        if len(name) == len(text):
            return self._id(name, {})
        if text[len(name)] != "{" or text[-1] != "}" or _NAME.fullmatch(name) is None:
            return _SLOW
        return self._labelled(name, text[len(name) + 1:-1])

    def _slow(self, buf: bytes, a: int, b: int, pos: list, codes: list, ts: list, vs: list) -> None:
        """Lines of buf[a:b] one at a time, through the line parser."""
        for raw in buf[a:b].split(b"\n"):
            start, a = a, a + len(raw) + 1
            if len(raw) > MAX_LINE:
                self.out.long_lines += 1
                continue
            line = raw.decode("utf-8", "replace").strip()
            if not line or line[0] == "#" or metric_name(line) not in self.wanted:
                continue
            s = parse_sample(line, self.ts_unit)
            if s is None:
                self.out.skipped_lines += 1
            elif s.timestamp is not None:  # a bundle's sample needs its time; one without is ignored
                pos.append(start)
                codes.append(self._id(s.name, s.labels))
                ts.append(s.timestamp)
                vs.append(s.value)

    def _fast(self, arr: np.ndarray, nl: np.ndarray, runs: np.ndarray):
        """(line starts, codes, ts, values) of whole runs, or None when a token is not a plain number."""
        rs, re_, hl, ids = runs.T
        li0 = np.searchsorted(nl, rs)
        cnt = np.searchsorted(nl, re_ - 1) + 1 - li0
        a, b = int(li0[0]), int(li0[-1] + cnt[-1])
        if b - a == int(cnt.sum()):  # the runs follow one another (the usual chunk): slices, not gathers
            ends = nl[a:b]
            starts = np.empty(b - a, np.int64)
            starts[1:] = ends[:-1] + 1
            starts[0] = nl[a - 1] + 1 if a else 0
        else:
            lines = concat_ranges(li0, cnt)
            ends = nl[lines]
            starts = np.where(lines > 0, nl[lines - 1] + 1, 0)
        codes = np.repeat(ids.astype(np.int32), cnt)
        tok = starts + np.repeat(hl + 1, cnt)
        got = _plain_lines(arr, tok, ends) if ends.shape[0] else None
        if got is not None:
            return starts, codes, self._seconds(got[0]), got[1]
        lens = ends + 1 - tok
        text = arr[concat_ranges(tok, lens)]
        n = int(cnt.sum())
        nl_t = np.cumsum(lens) - 1  # the newlines, in `text`
        sp = np.flatnonzero(text == 32)
        # exactly one space in each line, between two non-empty tokens, and no other whitespace: no
        # token hides a separator. "nan(...)" (numpy reads it, float() does not) is the line parser's.
        if (sp.shape[0] != n or np.count_nonzero(_SPACE[text]) != 2 * n or np.count_nonzero(text == 40)
                or not np.array_equal(np.searchsorted(nl_t, sp), np.arange(n))
                or np.any(sp == nl_t - lens + 1) or np.any(sp == nl_t - 1)):
            return None
        ts = _digits_at_line_ends(text, sp, nl_t) if n else None
        try:
            # with the times blanked out when they were plain digits: the values alone
            nums = np.fromstring(text.tobytes(), sep=" ")
        except ValueError:
            return None
        if ts is None:
            if nums.shape[0] != 2 * n:
                return None
            ts, nums = nums[1::2], nums[0::2]
        elif nums.shape[0] != n:
            return None
        return starts, codes, self._seconds(ts), nums

    def _seconds(self, ts: np.ndarray) -> np.ndarray:
        if self.ts_unit == "ms":
            return ts / 1000.0
        if self.ts_unit == "auto":
            return np.where(np.abs(ts) > 1e11, ts / 1000.0, ts)
        return ts

    def _fast_or_split(self, buf, arr, nl, runs, parts, slow, budget: list) -> None:
        """Runs column-wise; when a token refuses, halves until the bad runs are found (at most
        `budget[0]` more tries per chunk: then the rest goes line by line, as garbage deserves)."""
        got = self._fast(arr, nl, runs) if budget[0] > 0 else None
        budget[0] -= 1
        if got is not None:
            parts.append(got)
        elif len(runs) > 1 and budget[0] > 0:
            half = len(runs) // 2
            self._fast_or_split(buf, arr, nl, runs[:half], parts, slow, budget)
            self._fast_or_split(buf, arr, nl, runs[half:], parts, slow, budget)
        else:
            for s, e in runs[:, :2].tolist():
                self._slow(buf, s, e - 1, *slow)

    def _line_runs(self, buf: bytes, arr: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, bytes]]] | None:
        """(newlines, runs): what `_runs` finds in arr (whole lines), with whole-chunk numpy passes
        instead of a Python step and a substring count per run (the count alone was a fifth of a
        bundle's diagnose: CPython searches a 100-byte needle with its two-way algorithm). None when
        a line holds fewer than two spaces or a head is over _HEAD_WIDTH bytes: `_runs` then.

        Every line's head ends at its second-to-last space, as `_runs` takes a run's first line.
        A line continues the run above when its head is that of the line above, byte for byte (the
        heads compared as rows of 64-bit words, the bytes after each head cleared). A line
        whose head differs yet starts with the head above and a space (its own head longer or
        shorter: a label value with a space, a line of one or three tokens) would continue the run
        for `_runs`' pattern: such a line makes the chunk `_runs`' too."""
        # newlines and spaces in one scan: the bytes up to 32 (fewer passes than == 10 | == 32),
        # then the tabs and other control bytes among them, if any, dropped
        pos = np.flatnonzero(arr <= 32)
        byte = arr[pos]
        isnl = byte == 10
        keep = isnl | (byte == 32)
        if not keep.all():
            pos, isnl = pos[keep], isnl[keep]
        del byte, keep
        k = np.flatnonzero(isnl)
        if int(k[0]) < 2 or (k.shape[0] > 1 and int((k[1:] - k[:-1]).min()) < 3):
            return None  # a line with fewer than two spaces
        nl = pos[k]
        he = pos[k - 2]
        del pos, isnl, k
        n = nl.shape[0]
        st = np.empty(n, np.int64)
        st[0] = 0
        st[1:] = nl[:-1] + 1
        hl = he - st
        if int(hl.max()) > _HEAD_WIDTH:
            return None
        full = np.frombuffer(buf, np.uint8)  # rows may run past the chunk's end: those bytes are masked
        if int(st[-1]) + _HEAD_WIDTH > full.shape[0]:
            full = np.concatenate([arr, np.zeros(_HEAD_WIDTH, np.uint8)])
        # the heads as rows of 64-bit words, 64 bytes (8 words) to a block: a row's 8 word comparisons
        # are then one word of booleans, its verdict one test per block, not a reduction. Slabs of
        # _SLAB lines, so the work arrays stay small beside the chunk.
        width = (int(hl.max()) + 63) & ~63 or 64
        masks = _head_masks(width)
        differ = hl[1:] != hl[:-1]  # differ[i - 1]: line i's head is not line i - 1's
        for a in range(0, n - 1, _SLAB):
            b = min(n - 1, a + _SLAB)
            part = _rows(full, st[a:b + 1], width)
            part &= _rows(masks, hl[a:b + 1] * width, width)  # the bytes after each head cleared
            words = part.view("<u8")
            blocks = (words[1:] != words[:-1]).view("<u8")
            for j in range(blocks.shape[1]):
                differ[a:b] |= blocks[:, j] != 0
            del part, words, blocks
        new = np.flatnonzero(differ) + 1  # the lines that start a run
        del differ
        # of those, the lines that start with the head above and a space
        above = hl[new - 1]
        at = st[new] + above
        maybe = (above != hl[new]) & (at < nl[new])
        maybe[maybe] = arr[at[maybe]] == 32
        for i in new[maybe].tolist():
            a, b = int(st[i - 1]), int(st[i])
            if buf[b:b + int(hl[i - 1])] == buf[a:a + int(hl[i - 1])]:
                return None
        first = np.concatenate([[0], new]).tolist()
        last_end = (nl[np.append(new - 1, n - 1)] + 1).tolist()
        starts, ends = st[first].tolist(), he[first].tolist()
        return nl, [(a, e, bytes(buf[a:h])) for a, h, e in zip(starts, ends, last_end)]

    def _runs(self, buf: bytes, cut: int, nl: np.ndarray) -> Iterator[tuple[int, int, bytes]]:
        """What `_RUN.finditer(buf, 0, cut)` finds, as (start, end, head), mostly without running
        its back-reference over every line: a run is first guessed as long as the last whole run
        (series in a file mostly hold the same number of samples) and taken when one C-level count
        finds the head at the start of each of its lines and the line after it does not start so."""
        pos, li = 0, 0  # li: index in `nl` of the line starting at `pos`
        while pos < cut:
            # _FIRST's match at pos, if the line there has two spaces (nearly always): its last two
            first_end = int(nl[li]) + 1
            sp = buf.rfind(b" ", pos, first_end - 1)
            sp = buf.rfind(b" ", pos, sp) if sp > pos else -1
            if sp >= 0:
                s, h = pos, bytes(buf[pos:sp])  # a dict key: not the bytearray a slice of store is
            else:
                m = _FIRST.search(buf, pos, cut)
                if m is None:
                    return
                s, first_end, h = m.start(), m.end(), m.group(1)
                li = int(np.searchsorted(nl, s))
            k, e = self.run_lines, -1
            if k > 1 and li + k - 1 < nl.shape[0]:
                guess = int(nl[li + k - 1]) + 1
                if guess <= cut and buf.count(b"\n" + h + b" ", first_end - 1, guess - 1) == k - 1 \
                        and not buf.startswith(h + b" ", guess, cut):
                    e = guess
            if e < 0:
                e = _RUN.match(buf, s, cut).end()
                k = int(np.searchsorted(nl, e - 1)) + 1 - li
                if s > 0 and e < cut:  # a whole run, not one cut by the chunk's edges
                    self.run_lines = k
            yield s, e, h
            pos, li = e, li + k

    def chunk(self, buf: bytes, cut: int) -> None:
        """buf[:cut]: whole lines, the last ending in a newline."""
        arr = np.frombuffer(buf, np.uint8, cut)
        found = self._line_runs(buf, arr) if self.vectorised else None
        nl = found[0] if found is not None else np.flatnonzero(arr == 10)
        slow: tuple[list, list, list, list] = ([], [], [], [])
        if int(nl[0]) > MAX_LINE or (nl.shape[0] > 1 and int((nl[1:] - nl[:-1]).max()) > MAX_LINE + 1):
            self._slow(buf, 0, cut - 1, *slow)
            runs = []
        else:
            runs = []
            pos = 0
            for s, e, h in (found[1] if found is not None else self._runs(buf, cut, nl)):
                if s > pos:
                    self._slow(buf, pos, s - 1, *slow)
                pos = e
                i = self.heads.get(h)
                if i is None:
                    i = self._head(h)
                    if i >= 0:
                        self.heads[h] = i
                if i >= 0:
                    runs.append((s, e, len(h), i))
                elif i == _SLOW:
                    self._slow(buf, s, e - 1, *slow)
            if pos < cut:
                self._slow(buf, pos, cut - 1, *slow)
        parts: list = []
        if runs:
            self._fast_or_split(buf, arr, nl, np.array(runs, np.int64), parts, slow, [64])
        if slow[0]:
            parts.append((np.array(slow[0], np.int64), np.array(slow[1], np.int32), np.array(slow[2], np.float64),
                          np.array(slow[3], np.float64)))
        if not parts:
            return
        if len(parts) == 1 and not slow[0]:  # the usual chunk: its runs' columns as they are
            _, codes, ts, vs = parts[0]
        else:  # back to file order (the line parser takes lines out of turn)
            order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
            codes, ts, vs = (np.concatenate([p[k] for p in parts])[order] for k in (1, 2, 3))
        ok = np.isfinite(ts)
        if not ok.all():
            bad = ~ok
            # the line parser already refused its own lines with such a time; these are the runs'
            self.out.skipped_lines += int(np.count_nonzero(bad))
            codes, ts, vs = codes[ok], ts[ok], vs[ok]
        self.parts.append((codes, ts, vs))

    def finish(self) -> Columns:
        out, parts = self.out, self.parts
        self.heads = self.ids = self.blocks = {}  # type: ignore[assignment]  # only the series table stays
        total = sum(p[0].shape[0] for p in parts)
        for k, (attr, dtype) in enumerate((("codes", np.int32), ("ts", np.float64), ("vs", np.float64))):
            col = np.empty(total, dtype)
            i = 0
            for n, part in enumerate(parts):  # copy a column, freeing its pieces: never two full copies
                m = part[k].shape[0]
                col[i:i + m] = part[k]
                i += m
                parts[n] = part[:k] + (None,) + part[k + 1:]
            setattr(out, attr, col)
        self.parts = []
        return out


def read_columns(f: BinaryIO, wanted: frozenset[str], ts_unit: str = "s", chunk: int = 1 << 20,
                 vectorised: bool = True) -> Columns:
    """The samples (with timestamps) of the `wanted` metrics in an exposition file opened in binary
    mode, streamed in chunks: memory is the samples kept plus one chunk, whatever the file holds.
    Lines end at \\n, \\r\\n or \\r; a line over MAX_LINE bytes (even one never terminated) is skipped
    and counted; a last line without a newline is read. `vectorised=False` finds the runs of a
    series with a Python step per run (what a chunk the vectorised finder refuses gets): the same
    Columns, bit for bit, slower; the tests hold the two against each other."""
    rd = _Reader(wanted, ts_unit, vectorised)
    # one buffer for the whole file: the line carried over from the last chunk, then the next read
    # lands behind it. A fresh bytes object per read (and another for carry + data) had the kernel
    # map and zero new pages for every chunk (42 MB bundle at load 5: system time 29 -> 11 ms a read)
    store = bytearray(MAX_LINE + chunk)
    view = memoryview(store)
    readinto = getattr(f, "readinto", None)
    have = 0  # bytes carried at the front of store
    skipping = False  # inside an over-long line: drop bytes until its end
    while True:
        if readinto is not None:
            got = readinto(view[have:have + chunk]) or 0
        else:
            data = f.read(chunk)
            got = len(data)
            view[have:have + got] = data
            del data
        if not got:
            break
        end = have + got
        if skipping:  # have == 0 here
            k = store.find(b"\n", 0, end)
            if k < 0:
                continue
            end -= k + 1
            store[:end] = store[k + 1:k + 1 + end]  # a slice of a bytearray is a copy: no overlap
            skipping = False
        if store.find(b"\r", 0, end) >= 0:  # the rare file with \r: a converted copy of this piece
            buf = bytes(view[:end]).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            end = len(buf)
        else:
            buf = store
        cut = buf.rfind(b"\n", 0, end) + 1
        if cut:
            rd.chunk(buf, cut)
        have = end - cut
        if have > MAX_LINE:
            rd.out.long_lines += 1
            have, skipping = 0, True
        elif have:
            store[:have] = buf[cut:end]
        del buf
    view.release()
    last = bytes(store[:have]) + b"\n" if have else b""
    del store  # before finish, whose copies are the peak of memory
    if last:
        rd.chunk(last, len(last))
    return rd.finish()
