"""Query compatibility: the same data in a real Prometheus and a real VictoriaMetrics (Debian's 1.79),
every recording rule, alert expression, Grafana query and diagnosis query evaluated on both.

The data is what a scraper given the demo's /sim/prometheus.yml stores over 15 simulated minutes
of an 8-node cluster with six injected faults (tests/support/scrape_capture.py): loaded into
Prometheus with `promtool tsdb create-blocks-from openmetrics`, into VictoriaMetrics through
`/api/v1/import/prometheus`. Each expression is a range query at the scrape step over the whole
span, on both engines; every point is compared (same series, values within 1e-6 relative).

Two differences are real and documented in docs/victoriametrics.md#where-metricsql-differs:
- staleness of a series that vanished without a staleness marker (imported data has none): Prometheus
  keeps it for its lookback (5 min), VictoriaMetrics for about two sample intervals. Live scrapes
  write markers and both end the series at the next scrape; here Prometheus runs with
  `--query.lookback-delta=29s` (just under two steps) and then every point agrees;
- `rate`/`increase` over a window that holds a series' first sample: Prometheus extrapolates from
  the samples inside, VictoriaMetrics also counts the step into the first sample. Such points are
  allowed to differ only within the expression's longest range of the series' first point (or of
  its return after a gap: a requeued job's counters), and the
  test checks that they do exist (the difference is real) and that every later point agrees.

Recording rules that read other recording rules are compared with those inlined (both engines
then compute the whole chain from raw data); tests/test_victoriametrics_e2e.py runs vmalert's own
chained evaluation.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager

import httpx
import pytest

from tests.conftest import which
from tests.support import vmstack
from tests.support.promql_names import alerting_rules, grafana_to_promql, recording_rules
from tests.support.promstack import Prometheus

pytestmark = [
    pytest.mark.prometheus, pytest.mark.victoriametrics,
    pytest.mark.skipif(not (which("prometheus") and which("promtool") and vmstack.available()),
                       reason="needs Debian's prometheus and victoria-metrics (tests/run-all.sh installs them)"),
]

STEP = 15.0
FAULTS = "ost_slow@16m+20m,gpu_throttle@15m+40m,idle_gpus@15m+30m,nccl_hang@16m+30m,link_flap@17m+10m,xid79@18m"
UNIT = {"s": 1, "m": 60, "h": 3600}


@contextmanager
def both_engines(root, seed: int, faults: str, steps: int = 60):
    """A capture of the simulated cluster (8 nodes, `seed`, `faults`) in a Prometheus and a
    VictoriaMetrics: {"prom", "vm": URLs, "first", "last": its span, "snapshot": Slurm at the end}."""
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.slurm_view import build_snapshot
    from dashboard.demo import Demo
    from tests.support.scrape_capture import capture

    sim = Simulation(SimConfig(nodes=8, seed=seed, history_seconds=900, nodes_per_leaf=4, load=1.2, faults=faults))
    om = root / "metrics.om"
    first, last = capture(Demo(sim), steps, om)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(root / "prom-data")],
                   check=True, capture_output=True, timeout=120)
    started = []
    try:
        prom = Prometheus(root, [], extra_flags=["--storage.tsdb.retention.time=100y", "--query.lookback-delta=29s"])
        started.append(prom)
        vm = vmstack.VictoriaMetrics(root)
        started.append(vm)
        vm.import_openmetrics(om)
        yield {"prom": prom.url, "vm": vm.url, "first": first, "last": last, "snapshot": build_snapshot(sim)}
    finally:
        for p in reversed(started):
            p.stop()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    with both_engines(tmp_path_factory.mktemp("vmcompat"), 3, FAULTS) as e:
        yield e


def query_range(url: str, expr: str, start: float, end: float, step: float = STEP) -> dict:
    """{(labels without __name__, t): value}; raises with the engine's error text."""
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=60) as r:
            doc = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{url} rejects {expr!r}: {exc.read()[:400]!r}") from None
    out = {}
    for series in doc["data"]["result"]:
        key = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
        for t, v in series["values"]:
            out[(key, float(t))] = float(v)
    return out


_CHAIN = re.compile(r"\b([a-z_]+:[a-zA-Z0-9_]+:[a-zA-Z0-9_]+)(\{([^}]*)\})?")


def inline(expr: str, rules: dict[str, str]) -> str:
    """`expr` with every recording rule it reads replaced by that rule's expression (recursively);
    an equality matcher on a recorded series becomes an `and on (label)` with a one-label vector."""
    expr = re.sub(r"(group_(?:left|right))\s+(?=[a-z_]+:)", r"\1 () ", expr)

    def sub(m):
        if m.group(1) not in rules:
            return m.group(0)
        inner = f"({inline(rules[m.group(1)], rules)})"
        for k, v in re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""):
            inner = f'({inner} and on ({k}) label_replace(vector(1), "{k}", "{v}", "", ""))'
        return inner

    return _CHAIN.sub(sub, expr)


SELECTOR = re.compile(r"(\w+)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\[(\d+)([smh])\]")


def same(x, y) -> bool:
    """Equal within rounding; NaN (0/0: a latency with no operations) equals NaN, and equals no
    point at all, since VictoriaMetrics leaves NaN points out of its answers (documented)."""
    if x is None or y is None:
        return (x if y is None else y) is None or math.isnan(x if y is None else y)
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(x) and math.isnan(y))


class RateEdges:
    """Where the engines' `rate` or `increase` differs on the raw series an expression reads, and whether each
    such point has a window the series does not fill: it began, ended or paused inside it (the
    documented difference). A full window must agree."""

    def __init__(self, engines):
        self.engines = engines
        self.cache: dict = {}
        self.unexplained: list = []

    def points(self, fn: str, selector: str, seconds: int) -> dict:
        """{t: [labels of the raw series whose `fn` (rate, increase) differs at t]}"""
        key = (fn, selector, seconds)
        if key not in self.cache:
            e = self.engines
            present = set(query_range(e["prom"], selector, e["first"] - seconds, e["last"]))
            found: dict = {}
            expr = f"{fn}({selector}[{seconds}s])"
            a = query_range(e["prom"], expr, e["first"], e["last"])
            b = query_range(e["vm"], expr, e["first"], e["last"])
            for k in set(a) | set(b):
                if same(a.get(k), b.get(k)):
                    continue
                found.setdefault(k[1], []).append(dict(k[0]))
                if all((k[0], k[1] - d) in present for d in range(0, seconds + 1, int(STEP))):
                    self.unexplained.append((expr, k, a.get(k), b.get(k)))
            self.cache[key] = found
        return self.cache[key]

    def explains(self, expr: str, labels: tuple, t: float) -> bool:
        """Whether a raw series the expression reads, with labels agreeing with `labels` where both
        have them, has a rate difference at `t`."""
        mine = dict(labels)
        for fn, selector, n, unit in SELECTOR.findall(expr):
            for raw in self.points(fn, selector, int(n) * UNIT[unit]).get(t, []):
                if all(raw[k] == v for k, v in mine.items() if k in raw):
                    return True
        return False


def compare(a: dict, b: dict, expr: str, edges: RateEdges) -> tuple[list, list]:
    """(points that differ unexplained, points that differ where a raw rate differs)."""
    bad, edge = [], []
    for k in set(a) | set(b):
        if not same(a.get(k), b.get(k)):
            (edge if edges.explains(expr, k[0], k[1]) else bad).append((k, a.get(k), b.get(k)))
    return bad, edge


def disagreements(engines, named: list[tuple[str, str]]) -> tuple[list[str], int, list, RateEdges]:
    """Each (name, expr) on both engines over the whole span: (problems: points that differ and no
    raw rate edge explains, how many expressions had data, the explained points, the edges)."""
    problems, nonempty, explained = [], 0, []
    edges = RateEdges(engines)
    for name, expr in named:
        a = query_range(engines["prom"], expr, engines["first"], engines["last"])
        b = query_range(engines["vm"], expr, engines["first"], engines["last"])
        nonempty += bool(a)
        bad, edge = compare(a, b, expr, edges)
        explained += edge
        if bad:
            problems.append(f"{name}: {len(bad)} points differ, e.g. {bad[:2]}")
    return problems, nonempty, explained, edges


def all_expressions() -> list[tuple[str, str]]:
    rules = recording_rules()
    out = [(f"record {name}", inline(expr, rules)) for name, expr in rules.items()]
    out += [(f"alert {r['alert']}", inline(r["expr"], rules)) for r in alerting_rules()]
    return out


def test_rules_agree(engines):
    """Every recording rule and alert expression: the same series and values on both engines, but
    for rates over windows a series does not fill, which must show up (the difference is real) and
    be the only one."""
    problems, nonempty, explained, edges = disagreements(engines, all_expressions())
    assert not problems, "\n".join(problems)
    assert not edges.unexplained, f"raw rates differ outside a series' first window: {edges.unexplained[:3]}"
    assert nonempty >= 30, f"only {nonempty} expressions had data: the comparison proves little"
    assert explained, "no rate differed at a series' start: docs/victoriametrics.md says it does"


def test_faults_fire_alerts(engines):
    """The capture is not a quiet one: the injected faults make these alerts' expressions true, so
    test_rules_agree compares firing alerts, not only empty answers."""
    fired = {r["alert"] for r in alerting_rules()
             if query_range(engines["prom"], inline(r["expr"], recording_rules()), engines["first"], engines["last"])}
    assert {"GPUXidError", "GPUFallenOffBus", "InfinibandLinkFlapping", "GangJobStalled"} <= fired


def test_grafana_queries_agree(engines):
    from tests.support.demo_stack import DemoStack

    rules = recording_rules()
    named = [(where, inline(grafana_to_promql(expr.replace("$node", ".*").replace("$job", ".*")), rules))
             for where, expr in DemoStack.grafana_queries()]
    problems, nonempty, _, edges = disagreements(engines, named)
    assert not problems, "\n".join(problems)
    assert not edges.unexplained, edges.unexplained[:3]
    assert nonempty >= 10


def test_diagnosis_queries_agree(engines):
    """Every query one diagnosis cycle sends (dashboard/sources/prometheus.py), at its own step and
    rate window, plus the instant facts query."""
    from dashboard.sources.prometheus import (FALLBACK_FACTS, INFO_QUERY, PLAN_QUERY, RATE_INTERVALS, RAW_LEVELS,
                                              REPLACEMENTS, plan_queries)

    # the plan of a cold cycle, and the one after it that leaves out the fallbacks every node does without
    # (and the per-GPU and per-port series as they stand, as a Prometheus is asked: RAW_LEVELS)
    plans = dict.fromkeys((signal, q) for covered in (frozenset(), REPLACEMENTS) for raw in ((), RAW_LEVELS)
                          for signal, _, q in plan_queries(60.0, STEP, covered=covered, raw=raw))
    assert len(plans) > len(plan_queries(60.0, STEP))
    problems, nonempty, _, edges = disagreements(engines, list(plans))
    end = engines["last"]
    a = query_range(engines["prom"], INFO_QUERY, end, end)
    b = query_range(engines["vm"], INFO_QUERY, end, end)
    assert a and set(a) == set(b), f"facts differ: {sorted(set(a) ^ set(b))[:3]}"
    # the plan's facts: every node has the filesystem totals here, so none answered; and as if none
    # had them (the replacement's selector matching nothing), every node with the marker, on both
    # the plan's own query: the scrape interval differs by an edge sample (docs/victoriametrics.md), not
    # the rate window it gives
    a, b = (query_range(engines[e], PLAN_QUERY, end, end) for e in ("prom", "vm"))
    assert a.keys() == b.keys() and {max(60, math.ceil(RATE_INTERVALS * v)) for v in (*a.values(), *b.values())} == {60}
    assert not query_range(engines["prom"], FALLBACK_FACTS, end, end)
    none_have = FALLBACK_FACTS.replace('targets_io_bytes_total{type="osc"}', 'targets_io_bytes_total{type="none"}')
    a, b = (query_range(engines[e], none_have, end, end) for e in ("prom", "vm"))
    assert len(a) == 8 and a == b
    assert not problems, "\n".join(problems)
    assert not edges.unexplained, edges.unexplained[:3]
    assert nonempty >= 12


def test_both_engines_answers_are_split_without_json(engines):
    """The source reads a range answer by cutting it (dashboard/sources/matrix.py) where the
    engine writes the compact layout: both engines do, for every query of a cycle, and the cut
    answer decodes to what JSON's reading of the same bytes does."""
    import numpy as np
    import orjson

    from dashboard.sources.matrix import Matrix, decode_range, split_matrix
    from dashboard.sources.prometheus import RAW_LEVELS, REPLACEMENTS, plan_queries

    end = engines["last"]
    start = end - 20 * STEP
    split = 0
    queries = dict.fromkeys(q for raw in ((), RAW_LEVELS) for _, _, q in plan_queries(60.0, STEP, covered=REPLACEMENTS, raw=raw))
    for engine in ("prom", "vm"):
        for q in queries:
            params = urllib.parse.urlencode({"query": q, "start": start, "end": end, "step": STEP})
            with urllib.request.urlopen(f"{engines[engine]}/api/v1/query_range?{params}", timeout=60) as r:
                raw = r.read()
            parsed = orjson.loads(raw)["data"]
            got = split_matrix(raw)
            if not parsed["result"]:
                continue
            assert isinstance(got, Matrix), (engine, q, raw[:200])
            a, b = decode_range(got, start, STEP, 21), decode_range(parsed, start, STEP, 21)
            assert [a[1](i) for i in range(len(a[0]))] == [b[1](i) for i in range(len(b[0]))]
            assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a[2:], b[2:]))
            split += 1
    assert split >= 24
    # the levels' and the port counters' raw samples (prometheus.SAMPLED, RATED: an instant query of
    # `selector[span]`): split alike, and the very same samples from both engines
    from dashboard.sources.matrix import decode_samples
    from dashboard.sources.prometheus import RATED, SAMPLED, sampled_selector

    checked = set()
    for ms in (*SAMPLED.values(), *RATED.values()):
        placed = {}
        for engine in ("prom", "vm"):
            params = urllib.parse.urlencode({"query": f"{sampled_selector(ms)}[{int(21 * STEP)}s]", "time": end})
            with urllib.request.urlopen(f"{engines[engine]}/api/v1/query?{params}", timeout=60) as r:
                raw = r.read()
            if not orjson.loads(raw)["data"]["result"]:
                continue  # RoCE's counters in an InfiniBand capture
            got = split_matrix(raw)
            assert isinstance(got, Matrix), (engine, raw[:200])
            a, b = decode_samples(got, start, STEP, 21), decode_samples(orjson.loads(raw)["data"], start, STEP, 21)
            assert [a[1](i) for i in range(len(a[0]))] == [b[1](i) for i in range(len(b[0]))]
            assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a[2:], b[2:]))
            placed[engine] = {(tuple(sorted(a[1](int(i)).items())), int(c)): v for i, c, v in zip(*a[2:])}
        if placed:
            assert placed.get("prom") and placed["prom"] == placed.get("vm"), ms[0].signal
            checked.add(ms[0].signal)
    assert checked >= {"util", "sm", "power", "mem", "clock", "ib_rate", "ib_tx", "ib_wait"}, checked


def verdicts_on_both(engines) -> dict[str, dict]:
    """`gangwatch diagnose`'s path (PrometheusSource -> diagnose) over each engine."""
    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.prometheus import PrometheusSource

    jobs = [j for j in engines["snapshot"].jobs if j.state in ("RUNNING", "SUSPENDED")]
    span = engines["last"] - engines["first"]
    got = {}
    for name in ("prom", "vm"):
        src = PrometheusSource(engines[name], timeout=30)
        win = src.window(engines["last"], span, STEP)
        assert not win.notes, win.notes
        got[name] = {v.jobid: (v.state, v.culprit, round(v.gpu_hours_lost, 6)) for v in diagnose(win, jobs).verdicts}
    return got


def test_same_verdicts(engines):
    """The same verdicts, culprits and GPU-hours over either engine for the first fault seed."""
    got = verdicts_on_both(engines)
    assert got["vm"] == got["prom"]
    states = {s for s, _, _ in got["prom"].values()}
    assert states - {"progressing", "insufficient_data"}, states


def test_steady_state_cycle_asks_only_the_new_span(engines):
    """serve's every-cycle path on either engine: a source that judged the window ending 5 minutes
    ago asks, for the window ending now, only for those 5 minutes (and the settle before them:
    SETTLE_SECONDS on this Prometheus, whose blocks were backfilled; on VictoriaMetrics, run with
    -search.latencyOffset=0s, the arrival alone, read from its /flags page), and
    builds exactly the window (every array, NaN where unknown) and the verdicts of a cold cycle,
    both asking for the filesystem totals alone (every node has them: PLAN_QUERY said so before the
    first plan)."""
    import numpy as np

    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.prometheus import ARRIVAL_SECONDS, REPLACEMENTS, SETTLE_SECONDS, PrometheusSource

    def arrays(win):
        return (win.nodes, win.gpus, win.rails, win.targets, win.gpu_jobs,
                {f"{level}.{k}": np.nan_to_num(v, nan=-1.0).tolist()  # NaN == NaN here
                 for level in ("gpu", "rail", "node", "target") for k, v in getattr(win, level).items()},
                {k: {j: np.nan_to_num(v, nan=-1.0).tolist() for j, v in by.items()} for k, by in win.job.items()})

    jobs = [j for j in engines["snapshot"].jobs if j.state in ("RUNNING", "SUSPENDED")]
    span = engines["last"] - engines["first"] - 300
    for name in ("prom", "vm"):
        warm = PrometheusSource(engines[name], timeout=30)
        first = warm.window(engines["last"] - 300, span, STEP)
        assert warm._covered == REPLACEMENTS  # so the per-target fallbacks left both cycles' plans
        win = warm.window(engines["last"], span, STEP)
        settle = ARRIVAL_SECONDS if name == "vm" else SETTLE_SECONDS
        assert warm.settle_seconds == settle and warm.seconds_asked_last_cycle == win.end - first.end + settle, name
        cold = PrometheusSource(engines[name], timeout=30).window(engines["last"], span, STEP)
        assert not win.notes and arrays(win) == arrays(cold), name
        verdicts = {v.jobid: (v.state, v.culprit, v.gpu_hours_lost) for v in diagnose(win, jobs).verdicts}
        assert verdicts == {v.jobid: (v.state, v.culprit, v.gpu_hours_lost) for v in diagnose(cold, jobs).verdicts}
        assert {s for s, _, _ in verdicts.values()} - {"progressing", "insufficient_data"}, name


def test_query_concurrency_follows_the_engines_cores(engines, tmp_path, monkeypatch):
    """A real Prometheus says its GOMAXPROCS (runtimeinfo): a cycle sends it half that many queries
    at a time; VictoriaMetrics does not say (it spreads each query over its cores itself): two. The
    window is the same at any concurrency, with every answer split in worker processes
    (decode_pool.py, here for answers of any size), and with the answers gzipped or as they are."""
    import numpy as np

    from dashboard.sources import decode_pool
    from dashboard.sources.prometheus import QUERY_WORKERS, PrometheusSource

    span = engines["last"] - engines["first"] - 300
    many = Prometheus(tmp_path, [], env={"GOMAXPROCS": "12"})
    try:
        src = PrometheusSource(many.url, timeout=30)
        src.window(engines["last"], span, STEP)
        assert src.workers == 6
    finally:
        many.stop()
    src = PrometheusSource(engines["vm"], timeout=30)
    src.window(engines["last"], span, STEP)
    assert src.workers == QUERY_WORKERS
    monkeypatch.setattr(decode_pool, "MIN_BYTES", 0)
    for name in ("prom", "vm"):
        encodings: dict[str, set] = {"gzip": set(), "auto": set()}

        def client(asked: str) -> httpx.Client:
            return httpx.Client(timeout=30, event_hooks={
                "response": [lambda r: encodings[asked].add(r.headers.get("content-encoding"))]})

        one = PrometheusSource(engines[name], timeout=30, concurrency=1, decode_processes=0, client=client("gzip"),
                               headers={"Accept-Encoding": "gzip"}).window(engines["last"], span, STEP)
        src = PrometheusSource(engines[name], timeout=30, concurrency=8, decode_processes=2, client=client("auto"))
        eight = src.window(engines["last"], span, STEP)
        # on this host answers come as they are (fetch.accept_encoding); gzipped ones read the same
        assert "gzip" in encodings["gzip"] and encodings["auto"] == {None}, (name, encodings)
        assert src.decode.processes == 2 and src.decode._pool is not None and not src.decode.broken
        assert not eight.notes and one.nodes == eight.nodes, name
        for level in ("gpu", "rail", "node", "target"):
            for k, v in getattr(one, level).items():
                assert np.array_equal(v, getattr(eight, level)[k], equal_nan=True), (name, level, k)


def test_sparse_target_queries_give_the_diagnosis_what_the_full_ones_do(engines, monkeypatch):
    """The per-node-and-target `read` and `latency` asked for only where they carry something
    (prometheus.SPARSE) against the same queries unfiltered (as before), over the same data on
    either engine: on Prometheus the very same window; on both, the targets each node read from,
    every finite latency, and the verdicts with their culprits, GPU-hours, confidence and evidence."""
    import numpy as np

    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources import prometheus
    from dashboard.sources.prometheus import PrometheusSource

    def judged(win):
        return {v.jobid: (v.state, v.culprit, v.gpu_hours_lost, v.confidence, v.evidence)
                for v in diagnose(win, jobs).verdicts}

    jobs = [j for j in engines["snapshot"].jobs if j.state in ("RUNNING", "SUSPENDED")]
    span = engines["last"] - engines["first"]
    for name in ("prom", "vm"):
        sparse = PrometheusSource(engines[name], timeout=30)
        win = sparse.window(engines["last"], span, STEP)
        with monkeypatch.context() as m:
            m.setattr(prometheus, "SPARSE", {})
            full_source = PrometheusSource(engines[name], timeout=30)
            full = full_source.window(engines["last"], span, STEP)
            assert all(" > 0" not in q and "< +Inf" not in q for _, _, q in prometheus.plan_queries(60.0, STEP))
        assert not win.notes and not full.notes
        assert win.targets == full.targets and len(win.targets) >= 4 and win.nodes == full.nodes
        rd, full_rd = win.target["read"], full.target["read"]
        assert np.array_equal(np.nansum(rd, axis=2) > 0, np.nansum(full_rd, axis=2) > 0), name
        assert (np.nansum(rd, axis=2) > 0).any()
        lat, full_lat = win.target["latency"], full.target["latency"]
        both = np.isfinite(lat) & np.isfinite(full_lat)
        assert np.isfinite(lat).sum() >= 100 and np.array_equal(lat[both], full_lat[both]), name
        if name == "prom":  # VictoriaMetrics left 0/0 out before too, and its gaps took the point before
            assert np.array_equal(np.isfinite(lat), np.isfinite(full_lat))
            for level in ("gpu", "rail", "node", "target"):
                a, b = getattr(win, level), getattr(full, level)
                assert set(a) == set(b) and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a), level
        assert judged(win) == judged(full), name
        assert any(v[1] in win.targets for v in judged(win).values()), "no target named: the fault seed proves little"


def test_per_device_series_as_they_stand_give_the_engines_aggregates(engines, monkeypatch):
    """The per-GPU and per-port series asked for as they stand (prometheus.RAW_LEVELS, of a
    Prometheus), the levels asked for their raw samples and placed on the grid here
    (prometheus.SAMPLED), the port counters' rates worked out here from their raw samples
    (prometheus.RATED), and
    InfiniBand's link-down and symbol-error counters read once with their step's increase worked
    out here (prometheus.STEP_INCREASE), against the engine's `avg by`/`sum by`, `rate` and
    `clamp_min(c - c offset 15s, 0)` over the same data, on either engine: the very same GPU and
    rail arrays, from a cold window and from a steady one after it (the counters asked from one step
    before its span), the flapping link's events among them. The rates are Prometheus' on both
    engines. (VictoriaMetrics' own `rate`, which starts from the sample before the window and does
    not extrapolate, agrees here: the capture's samples are on the query's grid.)"""
    import numpy as np

    from dashboard.sources import prometheus
    from dashboard.sources.prometheus import PrometheusSource

    assert prometheus.STEP_INCREASE == {"ib_down", "ib_err"}
    span = engines["last"] - engines["first"] - 10 * STEP
    by_engines = {}
    for name in ("prom", "vm"):
        here = PrometheusSource(engines[name], timeout=30)
        cold = here.window(engines["last"] - 5 * STEP, span, STEP)
        steady = here.window(engines["last"], span, STEP)
        # Prometheus' own engine is asked for them as they stand; VictoriaMetrics, which aggregates
        # as it reads, for the aggregates
        assert here.raw_levels == (prometheus.RAW_LEVELS if name == "prom" else ())
        with monkeypatch.context() as m:
            m.setattr(prometheus, "STEP_INCREASE", frozenset())
            m.setattr(prometheus, "RAW_LEVELS", ())
            m.setattr(prometheus, "READ_WITH", {})
            for rows in ("SAMPLED", "RATED", "HELD_MAPPINGS"):
                m.setattr(prometheus, rows, {})
            asked = {s: q for s, _, q in prometheus.plan_queries(60.0, STEP)}
            assert "offset 15s" in asked["ib_down"] and asked["util"].startswith("(avg by (") and "rate(" in asked["ib_tx"]
            by_engine = by_engines[name] = [PrometheusSource(engines[name], timeout=30).window(end, span, STEP)
                                            for end in (engines["last"] - 5 * STEP, engines["last"])]
        assert not cold.notes and not steady.notes and steady.nodes == by_engine[1].nodes
        for got, want, prom in zip((cold, steady), by_engine, by_engines["prom"]):
            for level in ("gpu", "rail"):
                a, b = getattr(got, level), getattr(want, level)
                assert set(a) == set(b) and len(a) >= 5, (name, level, sorted(a))
                for signal in a:
                    x, y = a[signal], (getattr(prom, level) if signal in prometheus.RATED else b)[signal]
                    if signal in prometheus.SAMPLED:
                        x, y = x.copy(), y.copy()
                        carried_on(x, y, name, signal)
                    assert np.array_equal(x, y, equal_nan=True), (name, signal)
        assert np.isfinite(steady.rail["ib_tx"]).mean() > 0.9 and np.nanmax(steady.rail["ib_tx"]) > 0, name
        assert np.nansum(steady.rail["ib_down"]) > 0 and np.nansum(steady.rail["ib_err"]) > 0, name
        assert np.isfinite(steady.rail["ib_down"]).mean() > 0.9 and np.isfinite(steady.gpu["util"]).mean() > 0.9, name


def carried_on(ours, engines, name: str, signal: str) -> None:
    """Where a SAMPLED level's cell is unknown and the engine's is not, the engine carried the last
    sample of a series that stopped (a node gone silent in the capture, imported without staleness
    markers) past the two scrapes the raw samples are carried (prometheus.sample_lookback): its
    value there is ours at the row's last known column before it. Those cells are set to the
    engine's, so the arrays can be compared whole."""
    import numpy as np

    for cell in np.argwhere(np.isnan(ours) & ~np.isnan(engines)):
        *where, c = cell
        row = ours[tuple(where)]
        known = np.flatnonzero(np.isfinite(row[:c]))
        assert known.size and row[known[-1]] == engines[tuple(cell)], (name, signal, cell)
        ours[tuple(cell)] = engines[tuple(cell)]


def test_same_verdicts_network_and_straggler_faults(tmp_path):
    """A second seed with the fault kinds the first lacks: a thermally throttled node (a straggler
    verdict), with leaf congestion, a flapping link and a slow scrape endpoint alongside (in 10
    minutes of 8 nodes these leave their gangs progressing, on both engines alike)."""
    faults = "ib_congestion@15m+30m,slow_node@15m+40m,link_flap@16m+20m,scrape_slow@15m+30m"
    with both_engines(tmp_path, 11, faults, steps=40) as e:
        got = verdicts_on_both(e)
    assert got["vm"] == got["prom"]
    states = {s for s, _, _ in got["prom"].values()}
    assert states - {"progressing", "insufficient_data"}, states


@contextmanager
def holding_proxy(engine: str, hold):
    """An HTTP proxy in front of a real engine that holds the requests `hold(params)` picks (a hung
    query: until the test is done), and passes the others on: its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self):
            if hold(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)):
                release.wait(30)
            with urllib.request.urlopen(engine + self.path, timeout=30) as r:
                body = r.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_one_diagnosis_query_timing_out(engines):
    """VictoriaMetrics behind a proxy that holds one diagnosis query (GPU clocks) past its share of
    the cycle's deadline: that signal is absent and named, every other signal arrives, and the
    diagnosis still judges."""
    import time

    from dashboard.analysis.diagnose import diagnose
    from dashboard.sources.prometheus import PrometheusSource, plan_queries

    slow = next(q for signal, _, q in plan_queries(60.0, STEP) if signal == "clock")
    with holding_proxy(engines["vm"], lambda params: params.get("query", [""])[0].startswith(slow)) as url:
        src = PrometheusSource(url, timeout=8.0)
        t0 = time.monotonic()
        win = src.window(engines["last"], engines["last"] - engines["first"], STEP)
        took = time.monotonic() - t0
    assert src.failed_last_cycle == 1, win.notes
    assert any("1 query failed: clock" in n for n in win.notes), win.notes
    assert "clock" not in win.gpu and "util" in win.gpu and win.gpu_jobs
    assert took < 8.0
    jobs = [j for j in engines["snapshot"].jobs if j.state == "RUNNING"]
    assert {v.state for v in diagnose(win, jobs).verdicts} - {"insufficient_data"}


def test_a_query_too_costly_for_its_whole_window_comes_back_in_part(engines, monkeypatch):
    """On each real engine, behind a proxy that holds the GPU clock query whenever it asks for more
    than a quarter of the window (an engine that cannot answer one signal's hour in time at this
    size): the first cycle has no clock and names it; the next asks for the window's newest quarter,
    whose points equal a cold full cycle's, the rest unknown (NaN) and named in a note; the other
    signals are whole throughout; the cycles after it fill the window back to a cold cycle's."""
    import numpy as np

    from dashboard.sources import prometheus
    from dashboard.sources.prometheus import PrometheusSource

    monkeypatch.setattr(prometheus, "COLD_MIN_SECONDS", 60.0)  # the capture holds 15 minutes, not an hour
    slow = "gangwatch_gpu_clock_hz"  # the clock query, in whichever form the engine is asked it
    span = 600.0
    end = engines["last"] - 60

    def too_long(params) -> bool:
        q, start, stop = (params.get(k, [""])[0] for k in ("query", "start", "end"))
        if not start:  # raw samples (prometheus.SAMPLED): the steps ending at the times asked for
            asked = re.search(r"\[(\d+)s\]$", q)
            return slow in q and asked is not None and int(asked[1]) - STEP > span / 4
        return slow in q and float(stop) - float(start) > span / 4

    for name in ("prom", "vm"):
        full = PrometheusSource(engines[name], timeout=30).window(end + STEP, span, STEP)
        with holding_proxy(engines[name], too_long) as url:
            src = PrometheusSource(url, timeout=8.0)
            first = src.window(end, span, STEP)
            assert "clock" not in first.gpu and any("1 query failed: clock" in n for n in first.notes), name
            win = src.window(end + STEP, span, STEP)
            later = [src.window(end + STEP * k, span, STEP) for k in (2, 3, 4)]
        assert win.nodes == full.nodes and win.gpus == full.gpus and src.failed_last_cycle == 0, name
        clock, want = win.gpu["clock"], full.gpu["clock"]
        k = int(span / 4 / STEP) + 1  # the columns asked for: the newest quarter and its end
        assert np.isnan(clock[..., :-k]).all(), name
        assert np.array_equal(clock[..., -k:], want[..., -k:], equal_nan=True) and np.isfinite(want[..., -k:]).any(), name
        assert all(np.array_equal(win.gpu[s], full.gpu[s], equal_nan=True) for s in full.gpu if s != "clock"), name
        assert any(f"clock (its last {span / 4 / 60:.3g} min)" in n for n in win.notes), (name, win.notes)
        # each later cycle also asks for as much again before the part held: whole after three
        assert not any("newest part" in n for n in later[-1].notes), (name, later[-1].notes)
        again = PrometheusSource(engines[name], timeout=30).window(end + STEP * 4, span, STEP)
        assert all(np.array_equal(later[-1].gpu[s], again.gpu[s], equal_nan=True) for s in again.gpu), name


def test_raw_samples_reach_the_newest_step_at_the_default_latency_offset(tmp_path):
    """A VictoriaMetrics left at its default -search.latencyOffset (30 s): the levels' raw samples
    (prometheus.SAMPLED) of the window's newest step are there. (Versions that move an instant
    query at "now" that far back before reading a range selector's samples would hide them; serve
    asks with `nocache=1`, which keeps the time as asked. 1.79, Debian's, reads them unmoved.)"""
    import time

    import numpy as np

    from dashboard.sources.prometheus import PrometheusSource

    vm = vmstack.VictoriaMetrics(tmp_path, extra_flags=["-search.latencyOffset=30s"])
    try:
        now = time.time()
        end = math.floor(now / STEP) * STEP
        lines = "".join(f'gangwatch_gpu_utilization_ratio{{instance="n{i}:9810",gpu="0"}} 0.{i + 5} {int((t) * 1000)}\n'
                        for i in range(2) for t in np.arange(end - 300, end + 1e-6, 5.0))
        vm.import_text(lines.encode())
        win = PrometheusSource(vm.url, timeout=30).window(end, 120, STEP)
        assert win.nodes == ("n0", "n1") and np.isfinite(win.gpu["util"][:, 0, -1]).all(), win.gpu["util"][:, 0, -3:]
        assert np.allclose(win.gpu["util"][:, 0, -1], [0.5, 0.6])
    finally:
        vm.stop()


@contextmanager
def _engine_with(engine: str, root, text: str):
    """A real VictoriaMetrics or Prometheus holding `text` (`name{labels} value ms-timestamp` lines, one
    family): its URL."""
    if engine == "victoriametrics":
        vm = vmstack.VictoriaMetrics(root)
        try:
            vm.import_text(text.encode())
            yield vm.url
        finally:
            vm.stop()
        return
    rows = sorted((line.rsplit(" ", 1) for line in text.splitlines()), key=lambda r: (r[0].split("}")[0], int(r[1])))
    om = root / "data.om"
    om.write_text("".join(f"{head} {int(ms) / 1000:.3f}\n" for head, ms in rows) + "# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(root / "prom-data")],
                   check=True, capture_output=True, timeout=120)
    prom = Prometheus(root, [], extra_flags=["--storage.tsdb.retention.time=100y"])
    try:
        yield prom.url
    finally:
        prom.stop()


def _instant(url: str, query: str, at: float) -> dict:
    q = urllib.parse.urlencode({"query": query, "time": at})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=60) as r:
        return {s["metric"].get("instance"): float(s["value"][1]) for s in json.loads(r.read())["data"]["result"]}


@pytest.mark.parametrize("engine", ["victoriametrics", "prometheus"])
def test_a_young_targets_scrape_interval_is_measured_over_its_last_minute(tmp_path, engine):
    """INTERVAL_QUERY per target, on a real VictoriaMetrics and Prometheus: a target scraped every
    15 s for 10 minutes measures 15 s over 5 minutes; one scraped every second for the last 2 minutes
    1 s over its last minute, where 300 over its count said 2.5 s; one scraped for the last 40 s is
    not measured (60 s over its count said 1.5 s, and 20-60 s in its first seconds: the e2e stack's
    dead shard then named stale minutes late). A target that stopped (a dead vmagent shard: no
    staleness marker) measures its own interval up to its last sample, where its count over the
    whole window said 21 s for 15 s (100 s after it stopped) and 60 s for a young one's 1 s (45 s
    after). One scraped every 60 s for 3 minutes is not measured either: one sample in its last minute
    (60 s less its last sample's age over one said 40 s). Where every target is younger than a minute
    the query answers YOUNG: measured later."""
    import time

    from dashboard.sources.prometheus import INTERVAL_PER_TARGET, INTERVAL_QUERY, YOUNG

    end = math.floor(time.time())
    series = {"old": (0, 15, 40), "young": (0, 1, 120), "fresh": (0, 1, 40), "dead": (100, 15, 40),
              "young_dead": (45, 1, 90), "sparse": (20, 60, 3)}
    lines = "".join(f'up{{instance="{name}"}} 1 {(end - last - k * every) * 1000}\n'
                    for name, (last, every, n) in series.items() for k in range(n))
    with _engine_with(engine, tmp_path, lines) as url:
        got = _instant(url, INTERVAL_PER_TARGET, end)
        # a fresh stack: its only target's first sample 3 s before the window's end (1 s scrapes)
        first = _instant(url, re.sub(r"\bup\b", 'up{instance="fresh"}', INTERVAL_QUERY), end - 37)
    assert 14 <= got["old"] <= 15.8 and 0.9 <= got["young"] <= 1.1 and "fresh" not in got, got
    assert "sparse" not in got, got  # 3 minutes of 60 s scrapes: one sample in its last minute says nothing
    assert 14 <= got["dead"] <= 15.8 and 0.9 <= got["young_dead"] <= 1.1, got
    assert first == {None: YOUNG}, first
