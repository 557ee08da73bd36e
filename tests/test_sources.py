"""Metric sources: the exposition reader on every real export in ../shared/fixtures/exporters-real,
schema mapping (dcgm-exporter, node_exporter, gangwatch), counter rates and alignment, bundles
written from the simulator in two schemas giving the same verdicts, the Prometheus source's query
budget and failure modes (fake HTTP), the embedded scraper, and the CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.analysis.diagnose import diagnose
from dashboard.sources.build import RawStore, SignalStore, align, align_grid, counter_rate, job_mean, job_means
from dashboard.sources.exposition import iter_samples
from dashboard.sources.prometheus import (QUERY_BUDGET, RATED, SAMPLED, PrometheusSource, add_matrix, plan_queries,
                                          sampled_selector)
from dashboard.sources.schema import Mapping, NodeMatcher, short_host, sub_key

T0 = 1_767_225_600.0


def real(fixtures_dir: Path) -> Path:
    return fixtures_dir / "exporters-real"


def single_scrape_window(text: str, matcher=None):
    store = RawStore(matcher)
    store.add_all(iter_samples(text), default_ts=T0)
    return store.signals().window(T0, T0, 15.0), store


def test_every_real_export_parses(fixtures_dir):
    files = sorted(p for p in real(fixtures_dir).rglob("*") if p.is_file() and p.name != "README.md")
    assert len(files) >= 20
    for p in files:
        text = p.read_text(errors="replace")
        stats: dict = {}
        samples = list(iter_samples(text, stats=stats))
        if p.suffix == ".json":
            doc = json.loads(text)
            store = SignalStore()
            add_matrix(store, "util", "gpu", doc["data"], NodeMatcher())
            assert store.series, p.name
            continue
        if p.parent.name in ("dcgm", "node_exporter", "nvidia_gpu_exporter"):
            assert samples and stats["samples"] > 0, p.name
            single_scrape_window(text)  # maps without error
        else:  # Lustre job_stats, GPFS mmhealth: not expositions; nothing may map to a signal
            win, store = single_scrape_window(text)
            assert not store.points, p.name


def test_dcgm_names_units_and_host_labels(fixtures_dir):
    d = real(fixtures_dir) / "dcgm"
    win, _ = single_scrape_window((d / "k8s-ai-conformance_ericsson-ccd_T4_dcgm-metrics-noHELP.txt").read_text())
    assert win.nodes == ("cp-bm14r7",)
    assert win.gpu["util"][0, 0, 0] == pytest.approx(0.91)  # percent -> ratio, no HELP/TYPE needed
    win, _ = single_scrape_window((d / "nvidia-aicr_eks-8xH100-80GB-HBM3_dcgm-metrics-sampled.txt").read_text())
    assert win.nodes == ("ip-10-0-171-111",)  # EC2 private DNS name, domain stripped
    win, _ = single_scrape_window((d / "k8s-ai-conformance_vks_GRID-A100-40C-vGPU_dcgm-metrics.txt").read_text())
    assert "util" in win.gpu and "power" not in win.gpu  # vGPU exports no power: absent, not 0
    win, _ = single_scrape_window((d / "k8s-ai-conformance_kops-aws_L4_dcgm-metrics.txt").read_text(),
                                  NodeMatcher(aliases={"i-030791dc5a37cd257": "gpu-l4-01"}))
    assert win.nodes == ("gpu-l4-01",)  # a cloud instance id mapped to the Slurm name
    assert 0 <= win.gpu["power"][0, 0, 0] < 100 and win.gpu["mem"][0, 0, 0] % (1 << 20) == 0


def test_mig_instances_average_into_their_gpu(fixtures_dir):
    text = (real(fixtures_dir) / "dcgm" / "issue_dcgm-exporter-317_A30-MIG-1g.6gb_PROF_SM_ACTIVE_excerpt.txt").read_text()
    vals = [s.value for s in iter_samples(text) if s.name == "DCGM_FI_PROF_SM_ACTIVE" and s.labels["gpu"] == "0"]
    win, _ = single_scrape_window(text)
    assert win.gpus[0][0] == 0  # one column per GPU index, however many MIG instances it has
    assert win.gpu["sm"][0, 0, 0] == pytest.approx(np.mean(vals))


def test_prometheus_json_with_label_collisions(fixtures_dir):
    doc = json.loads((real(fixtures_dir) / "dcgm" / "nvidia-aicr_eks-8xH100_prometheus-query-DCGM_FI_DEV_GPU_UTIL.json").read_text())
    store = SignalStore()
    add_matrix(store, "util", "gpu", doc["data"], NodeMatcher())
    nodes = {k[2] for k in store.series}
    assert nodes == {"ip-10-0-171-111", "ip-10-0-169-87"} or len(nodes) == 2  # Hostname wins over instance/pod
    assert all(k[3].isdigit() for k in store.series)


def test_node_exporter_indented_infiniband(fixtures_dir):
    text = (real(fixtures_dir) / "node_exporter" / "issue_spiderpool-3615_node_exporter_infiniband_mlx5_excerpt_indented.txt").read_text()
    got = {(s.name, s.labels["device"]): s.value for s in iter_samples(text) if s.name.startswith("node_infiniband_")}
    assert got[("node_infiniband_unicast_packets_received_total", "mlx5_1")] == 2.106905e06  # indented, exponent form
    assert {d for _, d in got} == {"mlx5_0", "mlx5_1"}


def test_counter_rate_resets_and_alignment():
    ts = np.array([0.0, 15, 30, 45, 60])
    vs = np.array([100.0, 250, 400, 30, 180])  # restart between 30 and 45
    t2, r = counter_rate(ts, vs)
    assert list(r) == [10.0, 10.0, 2.0, 10.0]
    t3, r3 = counter_rate(np.array([0.0, 0.0, 15]), np.array([2.0, 2, 3]))  # a sample captured twice
    assert list(t3) == [15.0] and r3[0] == pytest.approx(1 / 15)
    grid = np.array([15.0, 30, 45, 60, 75, 90, 105])
    got = align(np.array([14.0, 31, 44]), np.array([1.0, 2, 3]), grid, 30.0)
    assert list(got[:4]) == [1.0, 1.0, 3.0, 3.0] and np.isnan(got[-1])  # stale after the lookback
    got = align(np.array([10.0, 20]), np.array([np.inf, 5.0]), np.array([10.0, 20.0]), 30)
    assert np.isnan(got[0]) and got[1] == 5.0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([15.0, 30.0, 45.0]))
def test_align_grid_is_align_of_each_row(seed, holes, lookback):
    """Rows on the grid (a range answer) aligned as `align` aligns their points, whether every grid
    time has a point (a level's steady answer: copied as it is) or some lack one; NaN and infinite
    points hide older ones and align to NaN."""
    rng = np.random.default_rng(seed)
    vals = rng.choice([1.0, 2.5, np.nan, np.inf, -np.inf, 7.0], size=(5, 9))
    have = rng.random(vals.shape) >= holes * 0.6
    times = 15.0 * np.arange(9)
    got = align_grid(vals, have, 15.0, lookback)
    want = np.vstack([align(times[h], v[h], times, lookback) for v, h in zip(vals, have)])
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=15), st.integers(0, 2**32 - 1))
def test_job_means_of_many_jobs_are_each_jobs_own(sizes, seed):
    """Every job's mean worked out side by side (thousands of jobs a window) is the one its rows
    alone give, to the last bit, whatever the order the jobs come in; the mean of the known rows,
    NaN where none is."""
    rng = np.random.default_rng(seed)
    sizes = np.array(sizes, np.int64)
    stack = rng.standard_normal((int(sizes.sum()), 7)) * rng.choice([1e-3, 1.0, 1e9], size=(int(sizes.sum()), 1))
    stack[rng.random(stack.shape) < 0.3] = np.nan
    stack[rng.random(stack.shape) < 0.05] = np.inf
    starts = np.cumsum(sizes) - sizes
    order = rng.permutation(sizes.shape[0])
    got = job_means(stack, starts[order], sizes[order])
    assert np.isnan(job_mean(stack[:0])).all() and job_mean(stack[:0]).shape == (7,)  # no rows: unknown
    for row, i in zip(got, order):
        own = stack[starts[i]:starts[i] + sizes[i]]
        assert np.array_equal(row, job_mean(own), equal_nan=True)
        cnt = np.isfinite(own).sum(axis=0)
        total = np.where(np.isfinite(own), own, 0).sum(axis=0)  # numpy's own order: equal within rounding
        want = np.where(cnt > 0, total / np.maximum(cnt, 1), np.nan)
        np.testing.assert_allclose(row, want, rtol=1e-9, atol=np.abs(own[np.isfinite(own)]).max(initial=1.0) * 1e-12)


def test_host_names():
    assert short_host("node0001.cluster.local:9810") == "node0001"
    assert short_host("10.0.172.246:9400") == "10.0.172.246"
    assert short_host("[fe80::1]:9100") == "fe80::1"
    m = NodeMatcher()
    assert m({"exported_instance": "gpu7.x", "instance": "prom:9090"}) == "gpu7"
    assert m({"Hostname": "gpu3.x", "instance": "10.0.0.1:9400"}) == "gpu3"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_exposition_reader_never_raises(text):
    for s in iter_samples(text):
        assert isinstance(s.value, float)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True)),
                max_size=20))
def test_rates_never_raise(points):
    ts = np.array([p[0] for p in points], dtype=float)
    vs = np.array([p[1] for p in points], dtype=float)
    ts = np.where(np.isfinite(ts), ts, 0)
    t2, r = counter_rate(ts, vs)
    assert t2.shape == r.shape


# ------------------------------------------------------------------------------------ simulator bundles

@pytest.fixture(scope="module")
def sim_bundles(tmp_path_factory):
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.simulated import BundleWriter, SimRecorder

    sim = Simulation(SimConfig(nodes=12, seed=3, prefill=False, nodes_per_leaf=4,
                               faults="ost_slow@12m+20m,gpu_throttle@5m+40m,idle_gpus@8m+30m,nccl_hang@10m+30m"))
    rec = SimRecorder(sim, capacity=81)
    writers = {"gangwatch": BundleWriter(sim), "exporters": BundleWriter(sim, "exporters")}
    for w in writers.values():
        w.capture()
    for _ in range(80):
        rec.step()
        for w in writers.values():
            w.capture()
    paths = {}
    for name, w in writers.items():
        p = tmp_path_factory.mktemp(name)
        w.write(str(p))
        paths[name] = p
    direct = diagnose(rec.window(), [j for j in rec.jobs() if j.state == "RUNNING"])
    return direct, paths


def test_bundles_in_both_schemas_give_the_same_verdicts(sim_bundles):
    from dashboard.sources.bundle import load_bundle

    direct, paths = sim_bundles
    want = {v.jobid: v.state for v in direct.verdicts}
    assert set(want.values()) - {"progressing", "insufficient_data"}, "the scenario must contain faults"
    for name, p in paths.items():
        b = load_bundle(str(p))
        got = {v.jobid: v.state for v in diagnose(b.window, b.jobs).verdicts}
        assert got == want, name
        assert b.window.leaf_of  # topology.conf travelled with the bundle
        if name == "exporters":
            assert b.window.gpu_jobs  # from dcgm-exporter's hpc_job label


def test_cli_on_a_bundle(sim_bundles, capsys):
    from dashboard.diagnose_cli import main

    _, paths = sim_bundles
    assert main(["--bundle", str(paths["exporters"]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdicts"] and all("state" in v for v in doc["verdicts"])
    assert main(["--bundle", str(paths["gangwatch"])]) == 0
    out = capsys.readouterr().out
    assert "JOBID" in out and "STATE" in out
    assert main([]) == 2


def test_bundle_with_broken_files_still_answers(tmp_path):
    from dashboard.sources.bundle import load_bundle

    (tmp_path / "metrics.om").write_text("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 50\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",Hostname=\"a\"} 50 1767225600\n# EOF\n")
    (tmp_path / "squeue.json").write_text("{not json")
    (tmp_path / "bundle.json").write_text("[1]")
    b = load_bundle(str(tmp_path))
    assert b.jobs == () and any("squeue.json" in n for n in b.notes) and any("not parsable" in n for n in b.notes)
    assert b.window.nodes == ("a",)


# ------------------------------------------------------------------------------------ Prometheus (fake HTTP)

# an engine without Prometheus' status API (flags, config): the source then re-asks SETTLE_SECONDS
def no_status_api() -> httpx.Response:
    return httpx.Response(404, text="unsupported path")


RAW_BY_SELECTOR = {sampled_selector(ms): ms for ms in (*SAMPLED.values(), *RATED.values())}
SCRAPE = 15.0  # the fakes' points: on this grid, each depending on its time only (as scrapes every 15 s)


def _mock(handler) -> httpx.Client:
    """A client of a fake engine whose `handler` answers range queries: a SAMPLED level's raw samples
    (an instant query of `selector[span]` at `time`) are what it answers for the range query of that
    span at its scrape interval, SCRAPE (the same request otherwise: a failure, a note); a RATED
    counter's are its answer v at t made a counter, v * t (a function of the time alone, as a
    counter's samples are, so every cycle asks the same ones; its rate is v where v holds still)."""
    def sampled(request: httpx.Request) -> httpx.Response:
        q, at = request.url.params.get("query", ""), request.url.params.get("time")
        got = re.fullmatch(r"(.+)\[(\d+)(ms|s)\]", q)
        if request.url.path.endswith("/query") and got and at is not None:
            span = int(got[2]) / (1000 if got[3] == "ms" else 1)
            end = float(at)
            start = SCRAPE * math.floor((end - span) / SCRAPE) + SCRAPE  # the first scrape inside (end - span, end]
            params = {"query": got[1], "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{SCRAPE:g}"}
            r = handler(httpx.Request("GET", request.url.copy_with(path=request.url.path + "_range", params=params)))
            doc = r.json() if r.status_code == 200 else None
            if not (isinstance(doc, dict) and isinstance(doc.get("data"), dict)):
                return r
            # the fakes' series have no name; a real engine's raw series have theirs: the agent's
            agent = next(m for m in RAW_BY_SELECTOR[got[1]] if m.metric.startswith("gangwatch_"))
            for series in doc["data"].get("result") or []:
                series["metric"] = {"__name__": agent.metric, **dict(agent.filters), **series["metric"]}
                if agent.counter:
                    series["values"] = [[t, repr(float(v) * float(t))] for t, v in series["values"]]
            return httpx.Response(200, json=doc)
        return handler(request)
    return httpx.Client(transport=httpx.MockTransport(sampled))


def _fake_prometheus(nodes: int, calls: list, fail: str | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if fail == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if fail == "slow":
            raise httpx.ReadTimeout("timed out", request=request)
        q = request.url.params.get("query", "")
        if "/status/" in request.url.path:
            return no_status_api()
        if request.url.path.endswith("/query"):
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})
        start, end, step = (float(request.url.params[k]) for k in ("start", "end", "step"))
        ts = np.arange(start, end + 1e-6, step)
        result = []
        if "gangwatch_gpu_utilization_ratio" in q:
            for i in range(nodes):
                for g in range(2):
                    result.append({"metric": {"instance": f"n{i:04d}:9810", "gpu": str(g)},
                                   "values": [[float(t), "0.9"] for t in ts]})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})
    return _mock(handler)


@pytest.mark.parametrize("nodes", [2, 200])
def test_prometheus_query_budget_does_not_grow_with_nodes(nodes):
    calls: list = []
    src = PrometheusSource("http://prom:9090", client=_fake_prometheus(nodes, calls))
    win = src.window(T0, 600, 15)
    # a cold cycle: every signal, the facts and the scrape interval (and the status API, not queries)
    queries = [c for c in calls if "/status/" not in c]
    assert src.queries_last_cycle == len(queries) == len(plan_queries()) + 2 <= QUERY_BUDGET
    calls.clear()
    src.window(T0 + 15, 600, 15)
    assert src.queries_last_cycle == len(calls) == len(plan_queries()) + 1
    assert len(win.nodes) == nodes and win.gpu["util"].shape == (nodes, 2, 41)


def test_an_answer_in_part_is_used_and_named():
    """A VictoriaMetrics cluster missing a storage node answers `"isPartial":true`: what it answered
    is used, and the window says which queries came in part and why (split answers and JSON ones)."""
    inner = _fake_prometheus(3, [])

    def handler(request: httpx.Request) -> httpx.Response:
        r = inner.get(str(request.url))
        doc = r.json()
        if "gangwatch_gpu_utilization_ratio" in request.url.params.get("query", "") or request.url.path.endswith("/query"):
            doc = {"status": "success", "isPartial": True, "data": doc["data"]}
        return httpx.Response(r.status_code, json=doc)

    src = PrometheusSource("http://vmselect:8481/select/0/prometheus", client=_mock(handler))
    win = src.window(T0, 600, 15)
    assert win.gpu["util"].shape == (3, 2, 41) and np.isfinite(win.gpu["util"]).all()
    note = next(n for n in win.notes if "answered in part" in n)
    assert "isPartial" in note and "util" in note and "facts" in note and "power" not in note
    assert not src.failed_last_cycle


@pytest.mark.parametrize("runtimeinfo, concurrency, want", [
    ({"GOMAXPROCS": 12}, None, 6),  # half a Prometheus' cores
    ({"GOMAXPROCS": 64}, None, 8),  # at most MAX_QUERY_WORKERS
    ({"GOMAXPROCS": 2}, None, 2),
    (None, None, 2),  # an engine that does not say (VictoriaMetrics: 400)
    ({"GOMAXPROCS": "12"}, None, 2),  # nor one that says it oddly
    ({"GOMAXPROCS": 12}, 3, 3),  # --prometheus-query-concurrency
    (None, 5, 5),
])
def test_queries_run_as_many_at_a_time_as_the_engines_cores_allow(runtimeinfo, concurrency, want):
    """Prometheus evaluates a query on one core: a cycle sends half the cores its runtimeinfo reports
    at a time (2 to 8), 2 where the engine does not say, or what the flag says; the window is the
    same whatever the number. An engine that says its cores is Prometheus' own, asked for the
    per-GPU and per-port series as they stand (RAW_LEVELS); one that does not, for their aggregates;
    both for the port counters' raw samples (RATED)."""
    import threading
    import time as clock

    inner = _fake_prometheus(3, [])
    lock, now, peak = threading.Lock(), [0], [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/status/runtimeinfo"):
            if runtimeinfo is None:
                return httpx.Response(400, text="unsupported path requested")
            return httpx.Response(200, json={"status": "success", "data": runtimeinfo})
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        try:
            if request.url.path.endswith("/query_range"):
                clock.sleep(0.15)  # long enough that every worker has one in flight
            r = inner.get(str(request.url))
            return httpx.Response(r.status_code, content=r.content)
        finally:
            with lock:
                now[0] -= 1

    src = PrometheusSource("http://prom:9090", concurrency=concurrency, client=_mock(handler))
    win = src.window(T0, 600, 15)
    assert src.workers == want and peak[0] == want
    says = isinstance(runtimeinfo, dict) and isinstance(runtimeinfo["GOMAXPROCS"], int)
    assert src.raw_levels == (("gpu", "rail") if says else ())
    # the port counters' rates: worked out here from their raw samples on every engine (RATED)
    asked = {s: q for s, _, q in plan_queries(60, 15, raw=src.raw_levels)}
    assert set(RATED) == {"ib_tx", "ib_wait", "roce_cong"} and all("rate(" not in asked[s] for s in RATED)
    assert not src.failed_last_cycle and np.isfinite(win.gpu["util"]).all()
    one = PrometheusSource("http://prom:9090", concurrency=1, client=_fake_prometheus(3, [])).window(T0, 600, 15)
    assert np.array_equal(one.gpu["util"], win.gpu["util"])
    with pytest.raises(ValueError):
        PrometheusSource("http://prom:9090", concurrency=0)


def test_window_arrays_are_given_again_only_once_nothing_holds_them():
    """serve's steady cycles reuse the arrays of a window nothing refers to any more (build.py
    `_Recycler`), never one a page may still be reading: a window held, or an array of it a view
    holds, stays as it was; every window equals a fresh source's."""
    def arrays(win):
        return [a for level in (win.gpu, win.rail, win.node, win.target) for a in level.values()]

    def cold(end):
        return PrometheusSource("http://prom:9090", client=_fake_prometheus(3, [])).window(end, 600, 15)

    def same(a, b):
        return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(arrays(a), arrays(b))) and len(arrays(a)) == len(arrays(b))

    src = PrometheusSource("http://prom:9090", client=_fake_prometheus(3, []))
    recycler = src._grid._recycler
    w1 = src.window(T0, 600, 15)
    before = [a.copy() for a in arrays(w1)]
    w2 = src.window(T0 + 15, 600, 15)
    w3 = src.window(T0 + 30, 600, 15)
    assert recycler.reused == 0  # w1 and w2 held
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(arrays(w1), before))
    del w1, before
    n = len(arrays(w2))
    ids = {id(a) for a in arrays(w2)}
    del w2  # nothing holds it now
    w4 = src.window(T0 + 45, 600, 15)
    assert recycler.reused == n and {id(a) for a in arrays(w4)} == ids
    assert same(w3, cold(T0 + 30)) and same(w4, cold(T0 + 45))
    util = w3.gpu["util"]
    kept = util.copy()
    row = util[0]  # a view: its array stays w3's
    del w3, util
    w5 = src.window(T0 + 60, 600, 15)
    assert recycler.reused == 2 * n - 1 and np.array_equal(row.base, kept, equal_nan=True)
    assert same(w5, cold(T0 + 60)) and same(w4, cold(T0 + 45))


def test_a_hung_runtimeinfo_costs_its_share_not_the_cycle():
    """An engine whose /api/v1/status/runtimeinfo does not answer: the cycle gives it up at its share
    of the deadline, runs two queries at a time, and every signal answers."""
    import time as clock

    inner = _fake_prometheus(3, [])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/status/runtimeinfo"):
            clock.sleep(3.0)
            raise httpx.ReadTimeout("timed out", request=request)
        r = inner.get(str(request.url))
        return httpx.Response(r.status_code, content=r.content)

    src = PrometheusSource("http://prom:9090", timeout=8.0, client=_mock(handler))
    win = src.window(T0, 600, 15)
    assert src.workers == 2 and not src.failed_last_cycle and np.isfinite(win.gpu["util"]).all()


@pytest.mark.parametrize("fail", ["down", "slow"])
def test_prometheus_down_or_slow_gives_insufficient_data(fail):
    from collectors.slurm.model import Job

    src = PrometheusSource("http://prom:9090", client=_fake_prometheus(4, [], fail))
    win = src.window(T0, 600, 15)
    assert any("failed" in n for n in win.notes)
    d = diagnose(win, [Job(job_id=1, state="RUNNING", nodes=("n0000",), start_time=T0 - 3600)])
    assert d.verdicts[0].state == "insufficient_data" and d.verdicts[0].reason


@pytest.mark.parametrize("engine", ["other", "scraping prometheus", "victoriametrics"])
def test_prometheus_steady_state_asks_only_the_new_span(engine):
    """A second cycle asks each signal only for the span since the first one's end (and the settle
    before it: SETTLE_SECONDS, the scrape timeout of a Prometheus that only scrapes, or the arrival
    and -search.latencyOffset of a VictoriaMetrics) and builds the same window as a cold cycle, a
    node gone meanwhile included; a signal whose query failed is asked for whole the next cycle."""
    from dashboard.sources.prometheus import SETTLE_SECONDS

    asked: list[tuple[str, float, float]] = []
    fail = set()
    # a 10 s scrape timeout, on the 15 s grid; VictoriaMetrics' arrival (30 s) and its offset, 0 s
    settle = {"other": SETTLE_SECONDS, "scraping prometheus": 15.0, "victoriametrics": 30.0}[engine]

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        if request.url.path == "/flags":  # VictoriaMetrics' flags page: those it was given
            return httpx.Response(200, text='-retentionPeriod="100y"\n-search.latencyOffset="0s"\n')
        if "/status/" in request.url.path:
            if engine == "victoriametrics":  # which refuses Prometheus' status API so
                return httpx.Response(400, text=f"unsupported path requested: {request.url.path}")
            if engine == "other":
                return no_status_api()
            data = ({"web.enable-remote-write-receiver": "false", "storage.tsdb.path": "data/", "enable-feature": ""}
                    if request.url.path.endswith("/flags") else
                    {"yaml": "global:\n  scrape_timeout: 10s\nscrape_configs:\n- job_name: a\n  metrics_path: /metrics\n"})
            return httpx.Response(200, json={"status": "success", "data": data})
        if request.url.path.endswith("/query"):
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})
        start, end, step = (float(request.url.params[k]) for k in ("start", "end", "step"))
        signal = ("util" if "gangwatch_gpu_utilization_ratio" in q else "rate" if RAW_BY_SELECTOR.get(q, [Mapping("", "", "")])[0].counter
                  else "increase" if "__name__=~" in q and "_total" in q else "other")
        asked.append((signal, start, end))
        if signal in fail:
            return httpx.Response(503, text="overloaded")
        result = []
        if signal == "util":
            for i in range(3):  # node 2 stops reporting at T0 + 300
                pts = [[t, str((t / 15 + i) % 7 / 10)] for t in np.arange(start, end + 1e-6, step) if i < 2 or t < T0 + 300]
                if pts:
                    result.append({"metric": {"instance": f"n{i:04d}:9810", "gpu": "0"}, "values": pts})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})

    def arrays(win):
        return win.nodes, {k: np.nan_to_num(v, nan=-1.0).tolist() for k, v in win.gpu.items()}  # NaN == NaN here

    warm = PrometheusSource("http://prom:9090", client=_mock(handler))
    cold = PrometheusSource("http://prom:9090", client=_mock(handler))
    warm.window(T0, 600, 15)
    asked.clear()
    win = warm.window(T0 + 450, 600, 15)
    # event counters from one step before: their first increase (STEP_INCREASE); the port counters'
    # samples of the span alone, the rate window before it held (RATED)
    assert {(s, e - st) for s, st, e in asked} == {("util", 450 + settle), ("other", 450 + settle),
                                                   ("increase", 450 + settle + 15), ("rate", 450 + settle)}
    assert warm.seconds_asked_last_cycle == 450 + settle
    assert arrays(win) == arrays(cold.window(T0 + 450, 600, 15))
    assert np.isnan(win.gpu["util"][2, 0, -10:]).all() and np.isfinite(win.gpu["util"][2, 0, :10]).all()
    fail.add("util")
    assert "util" not in warm.window(T0 + 465, 600, 15).gpu  # unknown, as a cold cycle would say
    fail.clear()
    asked.clear()
    win = warm.window(T0 + 480, 600, 15)
    assert {s: e - st for s, st, e in asked} == {"util": 600, "other": 15 + settle, "increase": 30 + settle,
                                                 "rate": 15 + settle}
    assert arrays(win) == arrays(cold.window(T0 + 480, 600, 15))


def _range_engine(answer, instant=lambda q: []) -> httpx.Client:
    """A fake engine without the status API whose instant queries answer `instant(query)` and whose
    range queries answer `answer(query, start, end, step)`: a list of series, or a response of its own."""
    def handler(request: httpx.Request) -> httpx.Response:
        if "/status/" in request.url.path:
            return no_status_api()
        if request.url.path.endswith("/query"):
            got = instant(request.url.params.get("query", ""))
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": got}})
        start, end, step = (float(request.url.params[k]) for k in ("start", "end", "step"))
        got = answer(request.url.params.get("query", ""), start, end, step)
        if isinstance(got, httpx.Response):
            return got
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": got}})
    return _mock(handler)


def _util_series(start: float, end: float, step: float, nodes: int) -> list[dict]:
    """GPU 0 of `nodes` nodes at 50 % over the span asked."""
    return [{"metric": {"instance": f"n{i:04d}:9810", "gpu": "0"},
             "values": [[t, "0.5"] for t in np.arange(start, end + 1e-6, step)]} for i in range(nodes)]


def test_roce_transport_errors_read_with_symbol_errors_add_up_per_counter():
    """RoCE's transport error counters come in InfiniBand's symbol errors' query (READ_WITH), raw:
    each row's step increase worked out here, a port's rows of one counter averaged (one agent
    scraped twice counts its errors once), the counters added up, and the symbol errors apart."""
    from dashboard.sources.prometheus import READ_WITH, plan_queries

    planned = {s for s, _, _ in plan_queries()}
    assert READ_WITH == {"roce_err": "ib_err"} and "roce_err" not in planned and "ib_err" in planned

    def answer(q: str, start: float, end: float, step: float):
        if "gangwatch_infiniband_port_symbol_errors_total" not in q:
            return []

        def counter(name: str, per_step: int, **labels) -> dict:
            return {"metric": {"__name__": name, "device": "mlx5_0", "port": "1", **labels},
                    "values": [[t, str(1000 + per_step * round((t - T0) / step))] for t in np.arange(start, end + 1e-6, step)]}
        seq = "gangwatch_roce_port_out_of_sequence_packets_total"
        return [counter(seq, 10, instance="n0:9810"), counter(seq, 10, node="n0"),  # n0 under two host labels
                counter("gangwatch_roce_port_local_ack_timeouts_total", 3, instance="n0:9810"),
                counter("gangwatch_infiniband_port_symbol_errors_total", 1, instance="n0:9810")]

    src = PrometheusSource("http://prom:9090", client=_range_engine(answer))
    for end in (T0, T0 + 15):  # cold, then steady
        win = src.window(end, 300, 15)
        i = win.nodes.index("n0")
        assert win.rail["roce_err"][i, 0].tolist() == [13.0] * win.n_steps
        assert win.rail["ib_err"][i, 0].tolist() == [1.0] * win.n_steps


def test_each_event_counter_counts_its_own_events():
    """A port whose link went down once at T0 - 300, reported by the agent's counter and by
    node_exporter's under the same labels (instance relabelled to the host name on both jobs), and
    by the agent scraped twice: the drop counted once, at its step, from each counter's own points
    (their values differ: an `or` of the two would take one step's point from each), whether the
    window is asked cold or steady; a counter reset counts nothing."""
    def answer(q: str, start: float, end: float, step: float):
        if "__name__=~" not in q or "link_downed" not in q:
            return []
        ts = np.arange(start, end + 1e-6, step)
        # the agent's counter from 7, node_exporter's from 2 (it started counting later); the
        # agent's restarted at T0 - 120 (its counter back to 0, then 1 again where it reads the port)
        agent = [7 + (t >= T0 - 300) if t < T0 - 120 else 1 for t in ts]
        node = [2 + (t >= T0 - 300) for t in ts]
        labels = {"instance": "n0000", "device": "mlx5_0", "port": "1"}
        return [{"metric": {"__name__": name, **labels, "job": job}, "values": [[t, str(v)] for t, v in zip(ts, vals)]}
                for name, job, vals in (("gangwatch_infiniband_port_link_downed_total", "agent", agent),
                                        ("gangwatch_infiniband_port_link_downed_total", "agent-again", agent),
                                        ("node_infiniband_link_downed_total", "node", node))]

    asked: list = []
    src = PrometheusSource("http://prom:9090", client=_range_engine(lambda *a: asked.append(a) or answer(*a)))
    for end in (T0, T0 + 15, T0 + 30):
        down = src.window(end, 600, 15).rail["ib_down"][0, 0]
        times = end - 600 + 15 * np.arange(down.size)
        assert np.isfinite(down).all()
        assert down.tolist() == [1.0 if t == T0 - 300 else 0.0 for t in times], end
    starts = [a[1] for a in asked if "link_downed" in a[0]]
    assert starts[0] == T0 - 600 - 15  # the point a step before the window: its first step's increase


def test_an_event_counter_known_in_part_is_filled_back_to_a_whole_window():
    """An event counter whose whole window the engine refuses is asked for its newest part, then
    filled before it cycle by cycle (each part asked from one step before it too), until the window
    equals a whole one's: no step's increase lost or counted twice at the parts' seams."""
    def counter(q: str, start: float, end: float, step: float):
        ts = np.arange(start, end + 1e-6, step)
        return [{"metric": {"__name__": "gangwatch_infiniband_port_link_downed_total", "instance": "n0000:9810",
                            "device": "mlx5_0", "port": "1"},
                 "values": [[t, str(int((t - T0) // 600) + 100)] for t in ts]}]  # a drop every 10 minutes

    def answer(q: str, start: float, end: float, step: float):
        if "link_downed" not in q:
            return []
        if end - start > 1000:
            return httpx.Response(422, json={"status": "error", "errorType": "execution", "error": "too many samples"})
        return counter(q, start, end, step)

    src = PrometheusSource("http://prom:9090", client=_range_engine(answer))
    assert "ib_down" not in src.window(T0, 3600, 15).rail
    for k in range(1, 6):
        win = src.window(T0 + 15 * k, 3600, 15)
    whole = PrometheusSource("http://prom:9090", client=_range_engine(
        lambda q, a, b, c: counter(q, a, b, c) if "link_downed" in q else [])).window(T0 + 75, 3600, 15)
    assert np.array_equal(win.rail["ib_down"], whole.rail["ib_down"], equal_nan=True)
    assert np.nansum(whole.rail["ib_down"]) == 6 and np.isfinite(whole.rail["ib_down"]).all()


def test_a_signal_whose_whole_window_fails_is_asked_for_its_newest_part():
    """At a size where one signal's whole window costs more than the engine allows (its query
    timeout, its sample limit), that signal is not left absent cycle after cycle: it is asked for a
    quarter of what failed (never under COLD_MIN_SECONDS), then kept up to date as any other; the
    part of the window before it is unknown (NaN, never a value carried back) and named in a note
    while each cycle fetches as much again before it, until the window equals a whole one; the
    next cold cycle asks twice the part that answered."""
    asked: list[tuple[str, float, float]] = []
    limit = {"seconds": 1000.0}  # the engine refuses a utilisation query over a longer span

    def answer(q: str, start: float, end: float, step: float):
        signal = "util" if "gangwatch_gpu_utilization_ratio" in q else "other"
        asked.append((signal, start, end))
        if signal == "util" and end - start > limit["seconds"]:
            return httpx.Response(422, json={"status": "error", "errorType": "execution",
                                             "error": "query processing would load too many samples into memory"})
        return _util_series(start, end, step, 2) if signal == "util" else []

    src = PrometheusSource("http://prom:9090", client=_range_engine(answer))
    win = src.window(T0, 3600, 15)
    assert "util" not in win.gpu and any("util (RuntimeError: HTTP 422 execution: query processing would load too many"
                                         in n for n in win.notes)  # absent and named, in the engine's words
    asked.clear()
    win = src.window(T0 + 15, 3600, 15)
    assert [e - st for s, st, e in asked if s == "util"] == [900]  # a quarter of the window
    util = win.gpu["util"]
    assert np.isnan(util[:, 0, :-61]).all() and (util[:, 0, -61:] == 0.5).all()
    note = next(n for n in win.notes if "newest part" in n)
    assert "util (its last 15 min)" in note and "too many samples" in note
    known = [int(np.isfinite(util[0, 0]).sum())]
    for k in (2, 3, 4):
        asked.clear()
        win = src.window(T0 + 15 * k, 3600, 15)
        # steady: the new span and the settle before it, and the span that answered before the part held
        spans = [e - st for s, st, e in asked if s == "util"]
        assert spans[0] == 75 and 0 < spans[1] <= 885, spans
        known.append(int(np.isfinite(win.gpu["util"][0, 0]).sum()))
    assert known == [61, 122, 183, 241]  # a new column and 60 filled a cycle: the whole window after three
    assert not any("newest part" in n for n in win.notes)
    whole = PrometheusSource("http://prom:9090", client=_range_engine(lambda q, a, b, c: _util_series(a, b, c, 2)
                                                                       if "gpu_utilization" in q else []))
    assert np.array_equal(win.gpu["util"], whole.window(T0 + 60, 3600, 15).gpu["util"], equal_nan=True)
    asked.clear()
    win = src.window(T0 + 75, 3600, 15)
    assert [e - st for s, st, e in asked if s == "util"] == [75]  # nothing more to fill
    src._held.clear()  # a cold cycle again (an engine restart): twice the part that answered
    asked.clear()
    limit["seconds"] = 1e9
    src.window(T0 + 90, 3600, 15)
    assert [e - st for s, st, e in asked if s == "util"] == [1800]
    asked.clear()
    src._held.clear()
    src.window(T0 + 105, 3600, 15)
    assert [e - st for s, st, e in asked if s == "util"] == [3600]  # the whole window again


@pytest.mark.parametrize("takes, timeout", [(3.0, 8.0), (5.0, 4.0)])
def test_a_query_slower_than_its_share_gets_more_time_next_cycle(takes, timeout):
    """A query that used its whole share of the cycle's deadline (a quarter, at least 2 s) without
    an answer is given twice as much the next cycle, up to the whole deadline: one that needs 3 s
    comes back on the second cycle; one that needs more than the whole deadline is named with what
    to do (a longer timeout)."""
    import time

    def answer(q: str, start: float, end: float, step: float):
        if "gangwatch_gpu_utilization_ratio" not in q:
            return []
        time.sleep(takes)
        return _util_series(start, end, step, 1)

    src = PrometheusSource("http://prom:9090", timeout=timeout, client=_range_engine(answer))
    first = src.window(T0, 600, 15)
    assert "util" not in first.gpu and any("util (SlowQuery: no answer within its 2 s share" in n for n in first.notes)
    win = src.window(T0 + 15, 600, 15)
    if takes < timeout:
        assert "util" in win.gpu and src.failed_last_cycle == 0, win.notes
    else:
        assert "util" not in win.gpu
        assert any(f"the cycle's deadline, {timeout:g} s, is too short for the engine" in n and "--prometheus-timeout" in n
                   for n in win.notes), win.notes
    assert not any("too short" in n for n in first.notes)  # a quarter of it: not yet


def test_the_facts_may_take_the_whole_deadline():
    """The facts query (which GPU runs which job: every verdict needs it) is sent first and, where it
    is slow, its share grows as a signal's does: at 3 s in a 4 s deadline it fails once, then
    answers."""
    import time

    def facts(q: str) -> list:
        if "gangwatch_job_gpu_info" not in q:
            return []
        time.sleep(3.0)
        return [{"metric": {"__name__": "gangwatch_job_gpu_info", "instance": "n0000:9810", "gpu": "0", "jobid": "7"},
                 "value": [T0, "1"]}]

    src = PrometheusSource("http://prom:9090", timeout=4.0, client=_range_engine(
        lambda q, a, b, c: _util_series(a, b, c, 1) if "gpu_utilization" in q else [], facts))
    first = src.window(T0, 600, 15)
    assert not first.gpu_jobs and any("facts (SlowQuery)" in n for n in first.notes)
    win = src.window(T0 + 15, 600, 15)
    assert src.failed_last_cycle == 0 and win.gpu_jobs, win.notes


def test_a_steady_query_that_comes_late_keeps_what_is_held():
    """A steady cycle's query that times out leaves its signal absent that cycle, but what is held
    of it stays valid: the next cycle asks from its end (two steps and the settle), not the whole
    window again (the costlier cold ask that would make an overloaded cycle worse), and builds the
    window a fresh source does. An answer that is wrong (an HTTP error) still drops it."""
    import time

    asked: list[float] = []
    slow = {"seconds": 0.0}

    def answer(q: str, start: float, end: float, step: float):
        if "gangwatch_gpu_utilization_ratio" not in q:
            return []
        asked.append(end - start)
        time.sleep(slow["seconds"])
        return _util_series(start, end, step, 2)

    src = PrometheusSource("http://prom:9090", timeout=8.0, client=_range_engine(answer))
    src.window(T0, 600, 15)
    slow["seconds"] = 3.0  # over its 2 s share
    assert "util" not in src.window(T0 + 15, 600, 15).gpu
    slow["seconds"] = 0.0
    asked.clear()
    win = src.window(T0 + 30, 600, 15)
    from dashboard.sources.prometheus import SETTLE_SECONDS
    assert asked == [30 + SETTLE_SECONDS]
    fresh = PrometheusSource("http://prom:9090", client=_range_engine(answer)).window(T0 + 30, 600, 15)
    assert np.array_equal(win.gpu["util"], fresh.gpu["util"], equal_nan=True)


def _changing_engine(state: dict):
    """A fake engine whose series change over time, answering every range query from the same
    points (a point at t depends on t only, as on a real engine): GPU utilisation of four nodes (one
    appearing at T0 + 60, one GPU gone before T0 - 200, one missing every fifth step, one NaN every
    seventh, one cell fed by two rows: the node under two host labels), a job's I/O pressure from
    its nodes' rows (three or four: their sum's order matters), the NICs' two signals in one query,
    and the sparse per-target reads (a missing point is NaN there, never the one before).
    `state["fail"]` makes the utilisation query fail; `state["answer"]` is what a query answers."""
    def value(seed: int, t: float) -> float:
        return ((seed * 7919 + int(t) * 104729) % 9973) / 997.0

    def points(seed: int, start: float, end: float, step: float, alive) -> list:
        out = []
        for t in np.arange(start, end + 1e-6, step):
            k = int(round((t - T0) / 15))
            if not alive(t, k):
                continue
            out.append([float(t), "NaN" if seed == 2 and k % 7 == 3 else repr(value(seed, t))])
        return out

    def series(q: str) -> list[tuple[dict, int, object]]:
        if "gangwatch_gpu_utilization_ratio" in q:
            got = [({"instance": f"n{i}:9810", "gpu": str(g)}, 10 * i + g,
                    (lambda t, k, i=i, g=g: (i != 3 or t >= T0 + 60) and ((i, g) != (1, 1) or t < T0 - 200)))
                   for i in range(4) for g in range(2)]
            got[0] = (got[0][0], 0, lambda t, k: k % 5 != 2)  # gaps: the step before carried over once
            return got + [({"node": "n0", "gpu": "0"}, 99, lambda t, k: True)]  # n0/0 a second time
        if "gangwatch_job_pressure_waiting_seconds_total" in q:
            # answered in reverse label order: a steady source holds n3 after the others, a cold one first
            return [({"instance": f"n{i}:9810", "jobid": "7"}, 200 + i, lambda t, k, i=i: i != 3 or t >= T0 + 60)
                    for i in reversed(range(4))]
        if '"gw_signal", "eth_pause"' in q:  # one query, two signals (SHARED_QUERIES), told apart by a label
            return [({"instance": f"n{i}:9810", "gw_signal": part}, 400 + 10 * i + j,
                     lambda t, k: True) for i in range(3) for j, part in enumerate(("eth_pause", "eth_down"))]
        if "gangwatch_infiniband_port_transmit_data_bytes_total" in q:  # RATED: a counter's raw samples (_mock)
            # n1 misses every fourth scrape; n3 appears at T0 + 60, its first sample no rate yet
            return [({"instance": f"n{i}:9810", "device": "mlx5_0", "port": "1"}, 500 + i,
                     lambda t, k, i=i: (i != 1 or k % 4 != 1) and (i != 3 or t >= T0 + 60)) for i in range(4)]
        if q.endswith("> 0"):  # `read`, SPARSE
            return [({"instance": "n0:9810", "target": "fs-OST0000"}, 300, lambda t, k: k % 3 != 1),
                    ({"instance": "n1:9810", "target": "fs-OST0001"}, 301, lambda t, k: t >= T0 + 45)]
        return []

    def answer(q: str, start: float, end: float, step: float) -> list[dict]:
        return [{"metric": labels, "values": pts} for labels, seed, alive in series(q)
                if (pts := points(seed, start, end, step, alive))]

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        if "/status/" in request.url.path:
            return no_status_api()
        if request.url.path.endswith("/query"):
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})
        if state.get("fail") and "gangwatch_gpu_utilization_ratio" in q:
            return httpx.Response(503, text="overloaded")
        result = answer(q, *(float(request.url.params[k]) for k in ("start", "end", "step")))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})
    state["answer"] = answer
    return _mock(handler)


def assert_same_window(a, b) -> None:
    """Every field, every array bit for bit (NaN where NaN), every dtype."""
    for name in ("nodes", "gpus", "rails", "targets", "gpu_jobs", "leaf_of", "nvlink_peers", "gpu_numa", "notes", "step"):
        assert getattr(a, name) == getattr(b, name), name
    assert np.array_equal(a.times, b.times)
    for level in ("gpu", "rail", "node", "target"):
        x, y = getattr(a, level), getattr(b, level)
        assert x.keys() == y.keys(), level
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k], equal_nan=True), (level, k)
    assert {s: set(j) for s, j in a.job.items()} == {s: set(j) for s, j in b.job.items()}
    for s, jobs in a.job.items():
        for j, v in jobs.items():
            assert np.array_equal(v, b.job[s][j], equal_nan=True), (s, j)


def test_steady_cycles_give_cold_windows():
    """Steady cycles (each moving the held arrays and writing the new columns in place) give, cycle
    after cycle, the window a fresh source gives over the same data, while series appear and
    disappear, points go missing or NaN, a query fails (that signal absent and named, then
    fetched whole), the window's length and step change and the window jumps back and far ahead;
    and the GPU and job arrays are the ones `SignalStore.add` of the same points gives."""
    state: dict = {}
    warm = PrometheusSource("http://prom:9090", client=_changing_engine(state))
    cycles = [(T0 + 15 * k, 300, 15) for k in range(8)]  # steady, one step apart
    cycles += [(T0 + 150, 300, 15)]  # the utilisation query fails here
    cycles += [(T0 + 165, 300, 15), (T0 + 210, 300, 15), (T0 + 225, 450, 15), (T0 + 240, 450, 15),
               (T0 + 270, 450, 30), (T0 + 300, 450, 30), (T0 + 285, 450, 15), (T0 + 1200, 450, 15), (T0 + 1215, 450, 15)]
    for end, span, step in cycles:
        state["fail"] = end == T0 + 150
        win = warm.window(end, span, step)
        cold = PrometheusSource("http://prom:9090", client=_changing_engine(state)).window(end, span, step)
        assert_same_window(win, cold)
        if state["fail"]:
            assert "util" not in win.gpu and any("util" in n and "failed" in n for n in win.notes)
            continue
        assert warm.failed_last_cycle == 0 and not win.notes
        reference = SignalStore()  # the generic path, point by point, the rows in label order
        for signal, level in (("util", "gpu"), ("psi_io", "job"), ("links", "node")):
            q = next(q for s, lvl, q in plan_queries(60, step) if (s, lvl) == (signal, level))
            # a SAMPLED level's points: the raw samples of the steps ending at the window's times
            lo, every = (win.start - step + SCRAPE, SCRAPE) if signal in SAMPLED else (win.start, step)
            for series in sorted(state["answer"](q, lo, win.end, every), key=lambda r: sorted(r["metric"].items())):
                labels = series["metric"]
                part = labels.get("gw_signal", signal)
                ts, vs = np.array([p[0] for p in series["values"]]), np.array([float(p[1]) for p in series["values"]])
                reference.add(part, level, NodeMatcher()(labels), sub_key(Mapping(part, level, ""), labels), ts, vs)
        ref = reference.window(win.start, win.end, step)
        for name, other in (("eth_pause", "eth_down"), ("eth_down", "eth_pause")):
            assert np.array_equal(win.node[name], ref.node[name], equal_nan=True)
            assert not np.array_equal(win.node[name], ref.node[other], equal_nan=True)
        assert np.array_equal(win.gpu["util"], ref.gpu["util"], equal_nan=True)
        assert set(win.job["psi_io"]) == {"7"} and np.array_equal(win.job["psi_io"]["7"], ref.job["psi_io"]["7"], equal_nan=True)
        read = win.target["read"][win.nodes.index("n0"), win.targets.index("fs-OST0000")]
        dropped = np.round((win.times - T0) / 15) % 3 == 1  # the filter's: NaN, not the point before
        assert np.isnan(read[dropped]).all() and np.isfinite(read[~dropped]).all()
    # what the cycles went through, so the checks above were not vacuous: arrays made from the last
    # window's (the columns it had moved, the new ones from the rows) among them
    assert np.isnan(win.gpu["util"]).any() and np.isfinite(win.gpu["util"]).any() and win.nodes == ("n0", "n1", "n2", "n3")
    assert warm._grid.moved > 0
    assert np.isfinite(win.rail["ib_tx"][:3]).all()


def _level(name: str, t: float) -> float:
    return float((int(t) * 7 + len(name)) % 97)


# node a's agent (GPU utilisation as a ratio, its SM clock in Hz, and a clock series without the
# `clock` label that the raw-sample selector lets in and no mapping takes), node b's DCGM exporter
# (percent, MHz), which misses its scrapes between T0 - 100 and T0 - 60
LEVELS = [({"__name__": "gangwatch_gpu_utilization_ratio", "instance": "a:9810", "gpu": "0"}, lambda t: True),
          ({"__name__": "gangwatch_gpu_clock_hz", "instance": "a:9810", "gpu": "0", "clock": "sm"}, lambda t: True),
          ({"__name__": "gangwatch_gpu_clock_hz", "instance": "a:9810", "gpu": "0"}, lambda t: True),
          ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "b", "gpu": "0"}, lambda t: not T0 - 100 < t < T0 - 60),
          ({"__name__": "DCGM_FI_DEV_SM_CLOCK", "Hostname": "b", "gpu": "0"}, lambda t: not T0 - 100 < t < T0 - 60)]


def _scraping_engine(asked: list, series=LEVELS, value=_level) -> httpx.Client:
    """A fake engine holding scrapes every 10 s at 3 s past the grid (off the query's step grid) of
    `series` ((labels, whether it was scraped at t)), each sample `value(name, t)`. It answers the
    raw samples of an instant `selector[span]` query as a real engine does, names included, and
    nothing else (`asked`: the raw-sample queries, as (query, time))."""
    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        got = re.fullmatch(r"(.+)\[(\d+)(ms|s)\]", q)
        result = []
        if got and request.url.path.endswith("/query"):
            assert request.url.params.get("nocache") == "1"  # else a VictoriaMetrics would hide its last 30 s
            asked.append((q, float(request.url.params["time"])))
            end = float(request.url.params["time"])
            span = int(got[2]) / (1000 if got[3] == "ms" else 1)
            names = re.findall(r"[A-Za-z_]+", got[1].split('"')[1]) if "__name__" in got[1] else [got[1]]
            for labels, up in series:
                ts = [t for t in np.arange(math.floor((end - span) / 10) * 10 + 3, end + 1e-6, 10.0)
                      if end - span < t <= end and up(t)]
                if labels["__name__"] in names and ts:
                    result.append({"metric": labels, "values": [[float(t), repr(value(labels["__name__"], t))] for t in ts]})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix" if got else "vector",
                                                                        "result": result}})
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_levels_are_read_as_their_raw_samples():
    """The per-GPU levels are asked for as raw samples (prometheus.SAMPLED: `selector[span]`, an
    instant query at the window's end, the span its steps): each grid time takes the latest sample
    of the step that ends at it (scrapes every 10 s, 3 s off the grid), carried over one missed
    scrape and unknown after two; each series in its own mapping's unit (DCGM's percent and MHz);
    a series the selector lets in that no mapping takes left out; a steady window is a cold one."""
    from dashboard.sources.prometheus import sample_lookback

    asked: list = []
    src = PrometheusSource("http://prom:9090", client=_scraping_engine(asked))
    win = src.window(T0, 300, 15)
    levels = [(q, t) for q, t in asked if RAW_BY_SELECTOR[q.split("[")[0]][0].signal in SAMPLED]
    assert {q.split("[")[1] for q, _ in levels} == {"315s]"} and {t for _, t in levels} == {T0}
    assert "util" in SAMPLED and sample_lookback(15, 0.0) == 30.0
    a, b = win.nodes.index("a"), win.nodes.index("b")
    for k, t in enumerate(win.times):
        latest = 10 * math.floor((t - 3) / 10) + 3  # the last scrape at or before t (never more than 10 s back)
        assert win.gpu["util"][a, 0, k] == np.float32((int(latest) * 7 + 31) % 97)
        assert win.gpu["clock"][a, 0, k] == np.float32((int(latest) * 7 + 22) % 97)  # the clock="sm" series alone
        if not T0 - 100 < latest < T0 - 60:
            assert win.gpu["util"][b, 0, k] == np.float32(((int(latest) * 7 + 20) % 97) * 0.01)
            assert win.gpu["clock"][b, 0, k] == np.float32(((int(latest) * 7 + 20) % 97) * 1e6)
    # b's scrapes around the gap: T0 - 107, then T0 - 57; T0 - 90 carries the first, T0 - 75 and
    # T0 - 60 (more than two steps after it) do not
    gap = [k for k, t in enumerate(win.times) if np.isnan(win.gpu["util"][b, 0, k])]
    assert [float(win.times[k] - T0) for k in gap] == [-75.0, -60.0]
    assert win.gpu["util"][b, 0, list(win.times).index(T0 - 90)] == np.float32(((int(T0 - 107) * 7 + 20) % 97) * 0.01)
    steady = PrometheusSource("http://prom:9090", client=_scraping_engine(asked))
    steady.window(T0 - 45, 300, 15)
    asked.clear()
    again = steady.window(T0, 300, 15)
    # the new steps, the settle, one step before
    assert {q.split("[")[1] for q, _ in asked if RAW_BY_SELECTOR[q.split("[")[0]][0].signal in SAMPLED} == {f"{45 + 60 + 15}s]"}
    assert_same_window(again, win)


def test_port_counters_rates_are_worked_out_from_their_raw_samples(monkeypatch):
    """The port counters are asked for as raw samples from one rate window before the span
    (prometheus.RATED) and their rate worked out here as Prometheus' `rate(selector[60s])` at each
    grid time (scrapes every 10 s, 3 s off the grid; a counter reset; node b's scrapes missing
    between T0 - 140 and T0 - 60, where a grid time's window holds fewer than two samples and the
    point before is carried one step, as an engine's range answer is); each series its own
    exporter's; a steady window, whose cycle asks for its span alone and takes the rate window
    before it from the samples the cycle before held, is a cold one."""
    from tests.support.promql_rate import prometheus_rate

    def counter(name: str, t: float) -> float:  # bytes, reset at T0 - 200 (the agent restarted)
        return float(int(t - (T0 - 200 if t >= T0 - 200 else T0 - 4000)) * (1000 + len(name)) + (int(t) % 7) * 100)

    ports = [({"__name__": "gangwatch_infiniband_port_transmit_data_bytes_total", "instance": "a:9810",
               "device": "mlx5_0", "port": "1"}, lambda t: True),
             ({"__name__": "node_infiniband_port_data_transmitted_bytes_total", "instance": "b:9100",
               "device": "mlx5_0", "port": "1"}, lambda t: not T0 - 140 < t < T0 - 60)]
    asked: list = []
    src = PrometheusSource("http://prom:9090", client=_scraping_engine(asked, ports, counter))
    win = src.window(T0, 300, 15)
    assert "ib_tx" in RATED and {q.split("[")[1] for q, _ in asked if "transmit_data" in q} == {"360001ms]"}
    for (labels, up), node in zip(ports, ("a", "b")):
        samples = [(int(t) * 1000, counter(labels["__name__"], t)) for t in np.arange(T0 - 400 + 3, T0, 10.0) if up(t)]
        want = [prometheus_rate(samples, int(t) * 1000, 60_000) for t in win.times]
        got = win.rail["ib_tx"][win.nodes.index(node), 0]
        for k, w in enumerate(want):
            if w is None and k and want[k - 1] is not None:
                w = want[k - 1]  # carried one step, as a range answer's missing point is
            assert (np.isnan(got[k]) if w is None else got[k] == np.float32(w)), (node, k)
    assert np.isnan(win.rail["ib_tx"][win.nodes.index("b"), 0]).any()
    steady = PrometheusSource("http://prom:9090", client=_scraping_engine(asked, ports, counter))
    steady.window(T0 - 45, 300, 15)
    asked.clear()
    again = steady.window(T0, 300, 15)
    # the new steps and the settle: the rate window before them is held from the cycle before
    assert {q.split("[")[1] for q, _ in asked if "transmit_data" in q} == {f"{(45 + 60) * 1000 + 1}ms]"}
    assert_same_window(again, win)
    # a settle shorter than the rate window (as a Prometheus that only scrapes has): node c's port,
    # scraped once at T0 - 117 and again from T0 - 77 on, has no rate for cycles (a row with no point,
    # kept for its held sample), then one from both samples, cycle after cycle as a cold cycle says
    from dashboard.sources import prometheus

    monkeypatch.setattr(prometheus, "SETTLE_SECONDS", 15.0)
    ports.append(({"__name__": "gangwatch_infiniband_port_transmit_data_bytes_total", "instance": "c:9810",
                   "device": "mlx5_0", "port": "1"}, lambda t: t == T0 - 117 or t >= T0 - 77))
    steady = PrometheusSource("http://prom:9090", client=_scraping_engine(asked, ports, counter))
    for end in np.arange(T0 - 150, T0 + 1, 15.0):
        got = steady.window(end, 300, 15)
        assert_same_window(got, PrometheusSource("http://prom:9090", client=_scraping_engine(asked, ports, counter)).window(end, 300, 15))
    assert np.isfinite(got.rail["ib_tx"][got.nodes.index("c"), 0, list(got.times).index(T0 - 75)])


@pytest.mark.parametrize("interval, want", [(15.0, 30.0), (14.3, 30.0), (15.8, 30.0), (10.0, 30.0), (7.5, 15.0),
                                             (1.0, 15.0), (30.0, 60.0), (27.3, 60.0), (60.0, 120.0), (0.0, 30.0)])
def test_raw_samples_carry_one_missed_scrape(interval, want):
    """A raw sample is carried over one missed scrape at the measured interval (whole steps of 15 s,
    steady under its jitter: 14.3 and 15.8 s are a 15 s scrape), none where scrapes come twice a
    step or more, two steps where the interval is unknown (0)."""
    from dashboard.sources.prometheus import sample_lookback

    assert sample_lookback(15.0, interval) == want


def test_held_grid_lays_out_again_only_when_the_union_of_its_blocks_changes():
    """A node starting to read from a target changes the sparse signal's block (its facts), not the
    window's layout, which the node's GPUs put it in already: the layout is kept (and the other
    blocks' placements), and the window is the one a fresh HeldGrid gives. A target or node new to
    every block lays the window out again."""
    from dashboard.sources.build import GridBlock, HeldGrid

    T = 5
    rng = np.random.default_rng(3)
    util = GridBlock("util", "gpu", np.arange(3), [("n0", "0"), ("n1", "0"), ("n1", "1")],
                     [(("gpu", "0"), ("node", "n0")), (("gpu", "0"), ("node", "n1")), (("gpu", "1"), ("node", "n1"))], 1)
    gpu_rows = rng.random((3, T))

    def read(version, cells):
        order = [(("node", n), ("target", t)) for n, t in cells]
        return GridBlock("read", "target", np.arange(len(cells)), cells, order, version), rng.random((len(cells), T))

    def window(grid, blocks):
        store = SignalStore()
        store.known_targets.update({"fs-OST0000"})
        return grid.window(store, [(util, gpu_rows)] + blocks, T0, T0 + 15 * (T - 1), 15.0)

    held = HeldGrid()
    window(held, [read(10, [("n0", "fs-OST0000")])])
    lay, placed_util = held._lay, held._placed[(1, "util")]
    for version, cells, same in ((11, [("n0", "fs-OST0000"), ("n1", "fs-OST0000")], True),  # n1 reads now
                                 (12, [("n1", "fs-OST0000")], True),
                                 (13, [("n1", "fs-OST0001")], False),  # a target no block had
                                 (14, [("n2", "fs-OST0000")], False)):  # a node no block had
        blocks = [read(version, cells)]
        win = window(held, blocks)
        assert (held._lay is lay) == same and (held._placed[(1, "util")] is placed_util) == same, version
        lay, placed_util = held._lay, held._placed[(1, "util")]
        assert_same_window(win, window(HeldGrid(), blocks))
        assert np.isfinite(win.target["read"]).any()


def test_victoriametrics_settle_follows_its_latency_offset():
    """What a steady cycle re-asks of a VictoriaMetrics: the arrival (30 s) and the -search.latencyOffset
    its /flags page says (the default 30 s where the page does not set it); SETTLE_SECONDS (None here)
    for a page that is not such a list."""
    from dashboard.sources.prometheus import latency_settle

    assert latency_settle('-httpListenAddr=":8428"\n-search.latencyOffset="0s"\n') == 30
    assert latency_settle('-search.latencyOffset="1m0s"') == 90
    assert latency_settle('-search.latencyOffset="500ms"\n') == 30.5
    assert latency_settle('-storageDataPath="/var/lib/vm"\n-retentionPeriod="90d"') == 60  # the default
    assert latency_settle('-envflag.prefix="a=\\"b\\""') == 60  # a value with quotes of its own
    for page in ("", "<!doctype html><html>...</html>", '{"status":"success"}', '-search.latencyOffset="soon"',
                 '-search.latencyOffset="0s"\n<html>'):
        assert latency_settle(page) is None, page


def test_victoriametrics_flags_page_is_found_for_a_cluster_too():
    """A single node's /flags page is below the URL serve is given (a -http.pathPrefix included); a
    cluster's vmselect serves the query API below /select/<tenant>/prometheus and its page at its root
    (after its own path prefix)."""
    from dashboard.sources.prometheus import flags_url

    assert flags_url("http://vm:8428") == "http://vm:8428/flags"
    assert flags_url("http://vm:8428/") == "http://vm:8428/flags"
    assert flags_url("https://vm.example.org/metrics-prefix") == "https://vm.example.org/metrics-prefix/flags"
    assert flags_url("http://vmselect:8481/select/0/prometheus") == "http://vmselect:8481/flags"
    assert flags_url("http://vmselect:8481/select/7:3/prometheus/") == "http://vmselect:8481/flags"
    assert flags_url("http://[::1]:8481/vm/select/0/prometheus") == "http://[::1]:8481/vm/flags"
    # a path that only looks like it part of the way is a single node's prefix
    assert flags_url("http://vm:8428/select/0/prometheus/x") == "http://vm:8428/select/0/prometheus/x/flags"

    # the source asks there: a vmselect that refuses Prometheus' status API (400) and serves its
    # flags at its root only gives the settle its offset says
    def vmselect(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/flags":
            return httpx.Response(200, text='-search.latencyOffset="0s"\n-dedup.minScrapeInterval="15s"\n')
        return httpx.Response(400 if "/status/" in request.url.path else 404, text="unsupported path")

    src = PrometheusSource("http://vmselect:8481/select/0/prometheus",
                           client=httpx.Client(transport=httpx.MockTransport(vmselect)))
    assert src.settle() == 30


def test_scrape_settle_only_where_samples_cannot_come_later():
    """The settle a steady cycle re-asks is the longest scrape timeout only on a Prometheus whose
    samples all come from its own scrapes; anything else may bring samples later: SETTLE_SECONDS."""
    from dashboard.sources.prometheus import scrape_settle

    flags = {"web.enable-remote-write-receiver": "false", "storage.tsdb.path": "data/", "enable-feature": ""}
    jobs = "scrape_configs:\n- job_name: a\n  scrape_timeout: 10s\n- job_name: b\n  scrape_timeout: 1m30s\n"
    assert scrape_settle(flags, "global:\n  scrape_timeout: 10s\n" + jobs) == 90
    assert scrape_settle(flags, "global:\n  scrape_timeout: 20s\nscrape_configs:\n- job_name: a\n") == 20
    assert scrape_settle({**flags, "web.enable-remote-write-receiver": "true"}, jobs) is None
    assert scrape_settle({**flags, "enable-feature": "remote-write-receiver"}, jobs) is None
    assert scrape_settle({}, jobs) is None  # VictoriaMetrics, Thanos, Mimir: no such flags
    assert scrape_settle(flags, "storage:\n  tsdb:\n    out_of_order_time_window: 5m\n" + jobs) is None
    assert scrape_settle(flags, jobs + "- job_name: fed\n  metrics_path: /federate\n") is None
    assert scrape_settle(flags, "global: {}\n") is None  # no scrape job: backfilled blocks
    assert scrape_settle(flags, "scrape_configs: [: bad") is None
    assert scrape_settle(flags, "scrape_configs:\n- job_name: a\n  scrape_timeout: soon\n") is None


def test_grid_rows_give_the_window_of_the_same_points():
    """A range query's rows enter the window as grid blocks (SignalStore.add_grid): the window is the
    one `add` of the same points gives, array for array: a missing point takes the one a step
    before, a NaN point hides it, and two rows of one cell (one node under two host labels) average."""
    rng = np.random.default_rng(7)
    times = T0 + 15.0 * np.arange(40)
    cells = [("n0", "0"), ("n0", "1"), ("n1", "0"), ("n1", "0"), ("n2", "0")]  # n1/0 twice
    vals = rng.random((len(cells), times.size))
    vals[rng.random(vals.shape) < 0.1] = np.nan  # points there, value NaN (Prometheus' 0/0)
    have = rng.random(vals.shape) > 0.3
    have[4] = False  # a row without a point
    by_points, by_grid = SignalStore(), SignalStore()
    for (node, key), v, h in zip(cells, vals, have):
        if h.any():
            by_points.add("util", "gpu", node, key, times[h], v[h], "mean")
    by_grid.add_grid("util", "gpu", cells, times, vals, have)
    a, b = by_points.window(times[0], times[-1], 15.0), by_grid.window(times[0], times[-1], 15.0)
    assert a.nodes == b.nodes == ("n0", "n1") and a.gpus == b.gpus
    assert np.array_equal(a.gpu["util"], b.gpu["util"], equal_nan=True)
    assert np.isfinite(b.gpu["util"]).any() and np.isnan(b.gpu["util"]).any()
    # a block on another grid is aligned point by point
    other = SignalStore()
    other.add_grid("util", "gpu", cells, times + 5.0, vals, have)
    c, d = other.window(times[0], times[-1], 15.0), SignalStore()
    for (node, key), v, h in zip(cells, vals, have):
        if h.any():
            d.add("util", "gpu", node, key, times[h] + 5.0, v[h], "mean")
    assert np.array_equal(c.gpu["util"], d.window(times[0], times[-1], 15.0).gpu["util"], equal_nan=True)


def test_prometheus_hardware_facts_are_kept_between_cycles():
    """A steady cycle asks for the job facts only and keeps the leaf, NVLink and NUMA facts of the
    last full facts query; a node those facts did not cover, `TOPOLOGY_SECONDS` passing, or a failed
    facts query makes a later cycle ask for all of them again. The window is a cold cycle's."""
    from dashboard.sources.prometheus import INFO_QUERY, JOB_FACTS, PLAN_QUERY, TOPOLOGY_SECONDS

    facts: list[str] = []
    nodes = [2]
    fail = set()

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        if "/status/" in request.url.path:
            return no_status_api()
        if q == PLAN_QUERY:
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})
        if request.url.path.endswith("/query"):
            facts.append(q)
            if "facts" in fail:
                return httpx.Response(503, text="overloaded")
            hw = [{"metric": {"__name__": "gangwatch_gpu_nvlink_peer_info", "instance": f"n{i:04d}:9810", "gpu": "0",
                              "peer_gpu": "1"}, "value": [T0, "1"]} for i in range(nodes[0])]
            hw += [{"metric": {"__name__": "gangwatch_sim_node_info", "node": f"n{i:04d}", "leaf": f"leaf{i}"},
                    "value": [T0, "1"]} for i in range(nodes[0])]
            jobs = [{"metric": {"__name__": "gangwatch_job_gpu_info", "instance": f"n{i:04d}:9810", "gpu": "0",
                                "jobid": str(100 + i)}, "value": [T0, "1"]} for i in range(nodes[0])]
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector",
                                                                            "result": jobs + (hw if q == INFO_QUERY else [])}})
        start, end, step = (float(request.url.params[k]) for k in ("start", "end", "step"))
        result = []
        if "gangwatch_gpu_utilization_ratio" in q:
            result = [{"metric": {"instance": f"n{i:04d}:9810", "gpu": str(g)},
                       "values": [[t, "0.5"] for t in np.arange(start, end + 1e-6, step) if i < 2 or t >= T0 + 30]}
                      for i in range(nodes[0]) for g in range(2)]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})

    def source():
        return PrometheusSource("http://prom:9090", client=_mock(handler))

    def same(a, b):
        for field in ("nodes", "gpu_jobs", "leaf_of", "nvlink_peers"):
            assert getattr(a, field) == getattr(b, field), field
        return np.array_equal(a.gpu["util"], b.gpu["util"], equal_nan=True)

    warm = source()
    warm.window(T0, 600, 15)
    assert facts == [INFO_QUERY]
    win = warm.window(T0 + 15, 600, 15)
    assert facts[1:] == [JOB_FACTS] and same(win, source().window(T0 + 15, 600, 15))
    assert win.nvlink_peers == {"n0000": {(0, 1)}, "n0001": {(0, 1)}} and win.leaf_of["n0001"] == "leaf1"
    nodes[0] = 3  # a node appears (its first samples at T0 + 30): its metrics this cycle, its facts the next
    facts.clear()
    warm.window(T0 + 30, 600, 15)
    win = warm.window(T0 + 45, 600, 15)
    assert facts == [JOB_FACTS, INFO_QUERY] and same(win, source().window(T0 + 45, 600, 15))
    facts.clear()
    warm.window(T0 + 60, 600, 15)
    warm.window(T0 + 45 + TOPOLOGY_SECONDS, 600, 15)
    assert facts == [JOB_FACTS, INFO_QUERY]
    fail.add("facts")
    assert any("facts" in n for n in warm.window(T0 + 60 + TOPOLOGY_SECONDS, 600, 15).notes)
    fail.clear()
    facts.clear()
    warm.window(T0 + 75 + TOPOLOGY_SECONDS, 600, 15)
    assert facts == [INFO_QUERY]


def test_a_node_without_the_filesystem_total_brings_the_fallback_back():
    """Every node has the agent's per-filesystem totals: even the cold cycle asks for them alone (the
    plan's facts come before the plan). A node appears whose agent lacks them: the cycle after it
    asks which nodes lack them again, and from then on asks for the per-target series too, `fs_read`
    and `fs_write` over the whole window (their held points did not cover that node)."""
    from dashboard.sources.prometheus import FACT_LABEL, LACKS_LABEL, PLAN_QUERY

    lacking: list[str] = []
    nodes = [2]
    asked: list[tuple[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        if "/status/" in request.url.path:
            return no_status_api()
        if request.url.path.endswith("/query"):
            result = [{"metric": {FACT_LABEL: "lacks", LACKS_LABEL: "gangwatch_lustre_client_targets_io_bytes_total",
                                  "instance": f"{n}:9810"}, "value": [T0, "1"]} for n in lacking] if q == PLAN_QUERY else []
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})
        start, end, step = (float(request.url.params[k]) for k in ("start", "end", "step"))
        asked.append((q, start))
        result = []
        if "gangwatch_gpu_utilization_ratio" in q:
            result = [{"metric": {"instance": f"n{i:04d}:9810", "gpu": "0"},
                       "values": [[t, "0.5"] for t in np.arange(start, end + 1e-6, step)]} for i in range(nodes[0])]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})

    def fs_queries() -> list[tuple[str, float]]:
        return [(q, start) for q, start in asked if "targets_io_bytes_total" in q]  # fs_read, fs_write

    src = PrometheusSource("http://prom:9090", client=_mock(handler))
    win = src.window(T0, 600, 15)
    assert len(fs_queries()) == 2 and all("target_io_bytes_total" not in q for q, _ in fs_queries())
    asked.clear()
    src.window(T0 + 15, 600, 15)
    assert all("target_io_bytes_total" not in q and start > win.start for q, start in fs_queries())
    nodes[0], lacking[:] = 3, ["n0002"]  # an older agent's node appears
    asked.clear()
    src.window(T0 + 30, 600, 15)  # seen this cycle; its facts, and the plan's, the next
    assert all("target_io_bytes_total" not in q for q, _ in fs_queries())
    asked.clear()
    win = src.window(T0 + 45, 600, 15)
    got = fs_queries()
    assert len(got) == 2 and all("target_io_bytes_total{" in q and start == win.start for q, start in got)
    asked.clear()
    src.window(T0 + 60, 600, 15)  # and stays, asking only the new span
    assert all("target_io_bytes_total{" in q and start > win.start for q, start in fs_queries())


def test_serve_gives_the_prometheus_source_its_timeout():
    """Large clusters need a longer deadline for the first (cold) cycle than the default."""
    from dashboard.serve import build_parser, make_metrics

    args = build_parser().parse_args(["--snapshot", "s.json", "--prometheus", "http://prom:9090",
                                      "--prometheus-timeout", "120"])
    assert make_metrics(args).timeout == 120.0
    assert make_metrics(build_parser().parse_args(["--snapshot", "s.json", "--prometheus", "http://p"])).timeout == 10.0


# ------------------------------------------------------------------------------------ embedded scraper

def test_embedded_source_scrapes_and_marks_failed_targets_stale():
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.render import NodeRenderer
    from dashboard.sources.embedded import EmbeddedSource

    sim = Simulation(SimConfig(nodes=4, seed=1, prefill=False, faults="none"))
    r = NodeRenderer(sim)
    broken = {"node0004"}

    def handler(request):
        name = request.url.host
        if name in broken:
            return httpx.Response(503, text="down")
        return httpx.Response(200, text=r.render(sim.cluster.index(name)))

    targets = [f"{n}:9810" for n in sim.cluster.names]
    src = EmbeddedSource(targets, client=_mock(handler), retention=120)
    try:
        for k in range(6):
            sim.step()
            src.scrape(now=T0 + 15 * k)
        win = src.window(end=T0 + 75, span=75, step=15)
        assert set(win.nodes) == {"node0001", "node0002", "node0003"}
        assert np.isfinite(win.gpu["util"]).all() and "ib_tx" in win.rail
        assert any("failed" in n for n in win.notes)
        src.scrape(now=T0 + 400)  # retention drops the old samples
        assert all(min(ts) >= T0 + 280 for ts, _ in src.store.points.values())
    finally:
        src.close()


def test_job_cgroup_pressure_becomes_a_job_series():
    text = "\n".join(
        f'gangwatch_job_pressure_waiting_seconds_total{{jobid="7",resource="io",instance="{n}:9810"}} {v} {t}'
        for t, vals in ((T0, (0, 0)), (T0 + 15, (12, 6)), (T0 + 30, (24, 12))) for n, v in zip(("a", "b"), vals))
    store = RawStore()
    store.add_all(iter_samples(text))
    win = store.signals().window(T0, T0 + 30, 15.0)
    got = win.job["psi_io"]["7"]
    assert np.isnan(got[0]) and got[1] == pytest.approx(0.6) and got[2] == pytest.approx(0.6)
    assert win.nodes == ()  # a job series alone does not invent nodes


def test_embedded_scraper_reads_a_filesystem_total_once():
    """A node whose agent exports the per-filesystem total reads it instead of its per-target series
    (the same bytes: added up they would count twice); a node without it reads its targets."""
    lines = []
    for k in range(4):
        t = T0 + 15 * k
        for node, targets, total in (("new", 2, True), ("old", 3, False)):
            for j in range(targets):
                lines.append(f'gangwatch_lustre_client_target_io_bytes_total{{fs="lfs",target="lfs-OST000{j}",type="osc",'
                             f'operation="read",instance="{node}:9810"}} {15000 * k} {t}')
            if total:
                lines.append(f'gangwatch_lustre_client_targets_io_bytes_total{{fs="lfs",type="osc",operation="read",'
                             f'instance="{node}:9810"}} {15000 * targets * k} {t}')
    store = RawStore()
    store.add_all(iter_samples("\n".join(lines)))
    win = store.signals().window(T0, T0 + 45, 15.0)
    fs = dict(zip(win.nodes, win.node["fs_read"]))
    assert fs["new"][1:].tolist() == [2000.0] * 3 and fs["old"][1:].tolist() == [3000.0] * 3


def test_every_fallback_has_the_marker_the_facts_tell_it_by():
    """A fallback leaves the Prometheus plan only where the facts can say no node needs it: by its
    replacement's marker (one series a node, kept in bundles and captures so an imported one says
    the same)."""
    from dashboard.sources.build import WANTED
    from dashboard.sources.prometheus import FALLBACK_FACTS, REPLACEMENTS
    from dashboard.sources.schema import FALLBACK_MARKERS, MAPPINGS

    fallbacks = {m.fallback for m in MAPPINGS if m.fallback}
    assert fallbacks and fallbacks == REPLACEMENTS == set(FALLBACK_MARKERS)
    for metric, marker in FALLBACK_MARKERS.items():
        assert marker.metric in WANTED and marker.metric in FALLBACK_FACTS and metric in FALLBACK_FACTS
        assert not any(m.fallback for m in MAPPINGS if m.metric == metric)  # a replacement is not itself a fallback


def test_clock_skew_between_nodes_is_absorbed():
    lines = []
    for k in range(6):
        lines.append(f'gangwatch_gpu_utilization_ratio{{gpu="0",instance="a:9810"}} 0.9 {T0 + 15 * k}')
        lines.append(f'gangwatch_gpu_utilization_ratio{{gpu="0",instance="b:9810"}} 0.8 {T0 + 15 * k - 7}')  # 7 s behind
    store = RawStore()
    store.add_all(iter_samples("\n".join(lines)))
    win = store.signals().window(T0, T0 + 75, 15.0)
    assert np.isfinite(win.gpu["util"]).all()


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=300), st.text(max_size=200), st.text(max_size=60))
def test_bundle_reader_never_raises(tmp_path_factory, metrics, squeue, meta):
    from dashboard.sources.bundle import load_bundle

    d = tmp_path_factory.mktemp("fuzz")
    (d / "metrics.om").write_text(metrics)
    (d / "squeue.json").write_text(squeue)
    (d / "bundle.json").write_text(meta)
    b = load_bundle(str(d))
    diagnose(b.window, b.jobs)


def test_derived_ratios_from_counters():
    """schema.RATIOS: a target's read latency is its latency counter's rate over its operations' rate,
    unknown (NaN) where no operation completed; the two counters themselves are not signals."""
    lines = []
    for k, (lat, ops) in enumerate(((0.0, 0), (3.0, 100), (3.0, 100), (9.0, 200))):
        for metric, v in (("operation_latency_seconds_total", lat), ("operations_total", ops)):
            lines.append(f'gangwatch_lustre_client_target_{metric}{{operation="ost_read",target="fs-OST0001",'
                         f'instance="a:9810"}} {v} {T0 + 15 * k}')
    store = RawStore()
    store.add_all(iter_samples("\n".join(lines)))
    win = store.signals().window(T0, T0 + 45, 15.0)
    got = win.target["latency"][0, 0]
    assert np.isnan(got[0]) and got[1] == pytest.approx(0.03) and np.isnan(got[2]) and got[3] == pytest.approx(0.06)
    assert not {"lat_sum", "lat_count"} & set(win.target)


@pytest.mark.parametrize("interval, window", [(None, 60), (15.0, 60), (30.0, 75), (60.0, 150)])
def test_prometheus_rate_window_holds_two_scrapes(interval, window):
    """At a 1-minute scrape interval (Prometheus' default) a 60 s `rate` window holds one sample and
    every counter would be unknown: the window widens to 2.5 scrape intervals, read from `up` on a
    cold cycle (no `up`, as in imported data: the configured window). Event counters take the
    difference of the points one step apart, which holds at any interval."""
    from dashboard.sources.prometheus import PLAN_QUERY

    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        asked.append(q)
        if q == PLAN_QUERY and interval is not None:
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector",
                                                                            "result": [{"metric": {}, "value": [T0, str(interval)]}]}})
        if request.url.path.endswith("/query"):
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    src = PrometheusSource("http://prom:9090", client=_mock(handler))
    win = src.window(T0, 600, 15)
    rates = {w for q in asked for w in re.findall(r"rate\([^\[]*\[(\d+)s\]", q)}
    assert rates == {str(window)}
    # the checkpoint rule's span (diagnose._held_steps) knows the interval as in a bundle
    assert win.scrape_seconds == (interval or 0.0)
    assert not any("increase(" in q for q in asked)
    # the difference worked out here for InfiniBand's (STEP_INCREASE), by the engine for ethtool's
    assert any("link_downed" in q and "offset" not in q and "clamp_min" not in q for q in asked)
    assert any("offset 15s" in q and "link_down_events" in q for q in asked)
    asked.clear()
    src.window(T0 + 15, 600, 15)  # the interval is kept: not asked again
    assert PLAN_QUERY not in asked


def test_prometheus_scrape_interval_of_a_fresh_stack_is_measured_again():
    """Where every target is younger than a minute (INTERVAL_QUERY answers YOUNG), no interval is
    held: the configured window and a carry of two steps meanwhile, measured again each cycle until
    there is one, then kept for TOPOLOGY_SECONDS (a fresh stack's first measure held for 10 minutes
    made 1 s scrapes 20-60 s long, and a dead shard's nodes were named stale minutes late)."""
    from dashboard.sources.prometheus import PLAN_QUERY, YOUNG

    answers = iter([YOUNG, YOUNG, 30.0])
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params.get("query", "")
        asked.append(q)
        if q == PLAN_QUERY:
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {}, "value": [T0, str(next(answers))]}]}})
        kind = "vector" if request.url.path.endswith("/query") else "matrix"
        return httpx.Response(200, json={"status": "success", "data": {"resultType": kind, "result": []}})

    src = PrometheusSource("http://prom:9090", client=_mock(handler))
    windows = []
    for k in range(4):
        asked.clear()
        src.window(T0 + 15 * k, 600, 15)
        windows.append(({w for q in asked for w in re.findall(r"rate\([^\[]*\[(\d+)s\]", q)},
                        src._lookback("util", 15.0), PLAN_QUERY in asked))
    assert windows == [({"60"}, 30.0, True), ({"60"}, 30.0, True), ({"75"}, 60.0, True), ({"75"}, 60.0, False)], windows


def test_port_events_missing_from_an_agent_that_leaves_still_ones_out_are_0():
    """ib_down/ib_err 0 where a port's series is missing, the port was read at that step and the
    node's agent says it leaves still error counters out (its gauge, `ib_quiet`); unknown where the
    node has no gauge (node_exporter, older agents), the port was not read, or the node's scrape
    failed; the counted events kept; the gauge dropped from the window."""
    import numpy as np

    from dashboard.sources.build import zero_port_events

    nan = np.nan
    rate = np.array([[[1.0, 1.0, nan], [1.0, 1.0, 1.0]],  # node 0: port 0 unread at the last step
                     [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]])  # node 1: node_exporter, no gauge

    def down():
        return np.array([[[nan, 2.0, nan], [nan, nan, nan]], [[nan, nan, nan], [nan, nan, nan]]], dtype=np.float32)

    marker = np.array([[0.0, 0.0, 0.0], [nan, nan, nan]])
    marker[0, 1] = nan  # node 0's scrape failed at the second step: its gauge unknown there
    arrays = {"node": {"ib_quiet": marker}, "rail": {"ib_rate": rate, "ib_down": down()}}
    zero_port_events(arrays)
    assert "ib_quiet" not in arrays["node"]
    np.testing.assert_array_equal(arrays["rail"]["ib_down"],
                                  [[[0, 2, nan], [0, nan, 0]], [[nan, nan, nan], [nan, nan, nan]]])
    np.testing.assert_array_equal(arrays["rail"]["ib_err"],  # no port counted one: made where known
                                  [[[0, nan, nan], [0, nan, 0]], [[nan, nan, nan], [nan, nan, nan]]])
    without = {"node": {}, "rail": {"ib_rate": rate, "ib_down": down()}}
    zero_port_events(without)
    assert "ib_err" not in without["rail"]
    np.testing.assert_array_equal(without["rail"]["ib_down"], down())


def test_facts_taken_by_their_labels_give_the_stores_json_gives():
    """FactCache: the facts taken as their labels' bytes (matrix.split_vector), each series' labels
    parsed once, give the store the JSON path gives for the same answer, cycle after cycle, as series
    come, go and change job; a cold cycle's hardware facts (NVLink peers, NUMA nodes, leaf switches,
    targets) go apart into the store the JSON path puts them in; series with no node set nothing."""
    from dashboard.sources.matrix import split_vector
    from dashboard.sources.prometheus import FactCache, add_facts, hardware_fact

    def job(node, gpu, jobid):
        return {"metric": {"__name__": "gangwatch_job_gpu_info", "instance": f"{node}:9810", "gpu": str(gpu),
                           "jobid": jobid, "job": "gangwatch-agent"}, "value": [T0, "1"]}

    dcgm = {"metric": {"Hostname": "n2", "gpu": "3", "hpc_job": "77"}, "value": [T0, "2"]}  # count by (...) of DCGM's
    others = [{"metric": {"__name__": "gangwatch_gpu_nvlink_peer_info", "instance": "n0:9810", "gpu": "0", "peer_gpu": "1"},
               "value": [T0, "1"]},
              {"metric": {"__name__": "gangwatch_gpu_nvlink_peer_info", "instance": "n0:9810", "gpu": "2", "peer_gpu": "1"},
               "value": [T0, "1"]},
              {"metric": {"__name__": "gangwatch_gpu_affinity_info", "instance": "n1:9810", "gpu": "1", "numa_node": "1"},
               "value": [T0, "1"]},
              {"metric": {"__name__": "gangwatch_sim_node_info", "node": "n1", "leaf": "leaf1"}, "value": [T0, "1"]},
              {"metric": {"__name__": "gangwatch_lustre_job_read_bytes_total", "jobid": "7", "target": "fs-OST0001"},
               "value": [T0, "1"]},
              {"metric": {"gw_fact": "target", "target": "fs-OST0002"}, "value": [T0, "1"]},
              {"metric": {"__name__": "gangwatch_job_gpu_info", "gpu": "0", "jobid": "9"}, "value": [T0, "1"]}]  # no node
    answers = [[job("n0", 0, "7"), job("n0", 1, "7"), dcgm, *others],
               [job("n0", 0, "7"), job("n0", 1, "8"), job("n1", 0, "8"), dcgm, *others],  # one GPU changed job, one new
               [job("n1", 0, "8"), job("n0", 0, "9"), job("n0", 0, "10")]]  # the last of two for one GPU stands
    cache, first = FactCache(), None
    for result in answers:
        raws, _ = split_vector(orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}))
        facts = cache.labels(raws)
        assert [is_hw for is_hw, _ in facts] == [hardware_fact(r) for r in result]
        assert [labels for _, labels in facts] == [r["metric"] for r in result]
        for which in (lambda is_hw: True, lambda is_hw: is_hw, lambda is_hw: not is_hw):  # steady; cold's two parts
            got, want = SignalStore(), SignalStore()
            add_facts(got, [labels for is_hw, labels in facts if which(is_hw)], NodeMatcher())
            add_facts(want, [r["metric"] for r in result if which(hardware_fact(r))], NodeMatcher())  # the JSON path's
            assert vars(got) == vars(want)
        assert len(cache._known) == len(result)  # the series no longer answered forgotten
        first = first or facts
    assert got.gpu_jobs == {("n1", 0): "8", ("n0", 0): "10"}
    assert cache.labels(raws)[0][1] is facts[0][1]  # a known series' labels not parsed again
    hw = SignalStore()
    add_facts(hw, [labels for is_hw, labels in first if is_hw], NodeMatcher())
    assert hw.nvlink_peers == {"n0": {(0, 1), (1, 2)}} and hw.gpu_numa == {"n1": {1: 1}} and hw.leaf_of == {"n1": "leaf1"}
    with pytest.raises(ValueError):
        cache.labels([b'{"node":'])  # labels that are not JSON: the facts failed, named as such


def test_a_series_dropped_from_the_held_rows_leaves_the_others_in_their_own():
    """A series that stops (node b's, after T0 - 250) is dropped from the held rows once its last
    sample leaves the window, and the rows after it move up (Held._drop_empty): the next answers,
    the same series in the same order, still land in their own rows, and every steady window is a
    fresh source's."""
    series = [({"__name__": "gangwatch_gpu_utilization_ratio", "instance": f"{node}:9810", "gpu": "0"}, up)
              for node, up in (("a", lambda t: True), ("b", lambda t: t < T0 - 250), ("c", lambda t: True))]
    steady = PrometheusSource("http://prom:9090", client=_scraping_engine([], series))
    for end in np.arange(T0 - 300, T0 + 151, 15.0):
        win = steady.window(end, 300, 15)
        assert_same_window(win, PrometheusSource("http://prom:9090", client=_scraping_engine([], series)).window(end, 300, 15))
    assert win.nodes == ("a", "c") and np.isfinite(win.gpu["util"]).all()
