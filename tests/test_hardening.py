"""Hostile clients, slow upstreams and oversized inputs (issue 20): each reproduction from the
probe, bounded in time, on loopback only.

Servers run in-process on 127.0.0.1 random ports with their deadlines shortened (monkeypatched
class attributes), so a test that waits out a deadline takes a second, not a minute.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from collectors.web import WebConfig, make_server, serve_in_thread
from tests.support import dashboard_fake
from tests.test_web import client_ctx, pki, write_config  # noqa: F401 (pki is a fixture)


def tls_config(pki, tmp_path) -> WebConfig:
    return WebConfig.load(str(write_config(tmp_path / "web.yml", f"""
tls_server_config:
  cert_file: {pki['cert']}
  key_file: {pki['key']}
""")))


def request(port: int, ctx: ssl.SSLContext | None = None, path: str = "/healthz", timeout: float = 5.0,
            head: bytes = b"") -> bytes:
    """One GET on a fresh connection; the whole reply (the server closes it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if ctx is not None:
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    with sock:
        sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + head + b"Connection: close\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def idle(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t0


def test_connection_guard_evicts_the_oldest_idle_and_reaps_by_deadline():
    from collectors.web import ConnectionGuard

    now = [0.0]
    g = ConnectionGuard(2, request_timeout=5, idle_timeout=60, handle_timeout=120, clock=lambda: now[0])
    pairs = [socket.socketpair() for _ in range(4)]
    a, b, c, d = (p[0] for p in pairs)
    try:
        assert g.admit(a) and g.admit(b)
        g.busy(a)  # a's request is running: never the victim
        assert g.admit(c) and b.recv(1) == b"" and g.open_connections() == 2  # b, the idle one, went
        g.busy(c)
        assert not g.admit(d)  # every slot busy: the newcomer is refused
        g.waiting(a)  # a kept alive: idle for up to 60 s
        now[0] = 121.0
        g.reap()  # c ran past its 120 s; a is idle for 121 - 0 > 60 s as well
        assert g.open_connections() == 0 and c.recv(1) == b"" and a.recv(1) == b""
        assert g.dropped == 3
    finally:
        for p in pairs:
            for s in p:
                s.close()


# ----------------------------------------------------------------- servers: serve/demo (werkzeug)

@pytest.fixture()
def dash_server(request):
    """`serve`'s server over the fake datasource; parametrize indirectly with a WebConfig or None."""
    from dashboard.app import build_app
    from dashboard.serve import make_wsgi_server

    cfg = getattr(request, "param", None)
    app = build_app(dashboard_fake.datasource(), refresh_seconds=3600, web_config=cfg)
    srv = make_wsgi_server(app.server, "127.0.0.1", 0, cfg)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    th.join(5)


def test_serve_idle_tls_connection_does_not_freeze_the_server(pki, tmp_path):
    from dashboard.app import build_app
    from dashboard.serve import make_wsgi_server

    cfg = tls_config(pki, tmp_path)
    srv = make_wsgi_server(build_app(dashboard_fake.datasource(), web_config=cfg).server, "127.0.0.1", 0, cfg)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    silent = idle(srv.server_port, 3)  # connected, never a ClientHello: froze the accept loop before
    try:
        time.sleep(0.2)
        reply, took = timed(request, srv.server_port, client_ctx(pki))
        assert reply.startswith(b"HTTP/1.1 200") and took < 2
    finally:
        for s in silent:
            s.close()
        srv.shutdown()
        srv.server_close()


def test_serve_idle_connections_past_the_cap(dash_server, monkeypatch):
    monkeypatch.setattr(dash_server.guard, "max_connections", 20)
    held = idle(dash_server.server_port, 60)
    try:
        reply, took = timed(request, dash_server.server_port)
        assert reply.startswith(b"HTTP/1.1 200") and took < 1
        assert dash_server.guard.open_connections() <= 20
    finally:
        for s in held:
            s.close()


def test_serve_trickled_request_head_is_cut_at_its_deadline(dash_server, monkeypatch):
    monkeypatch.setattr(dash_server.guard, "request_timeout", 1.0)
    with socket.create_connection(("127.0.0.1", dash_server.server_port), timeout=5) as s:
        t0 = time.monotonic()
        try:
            for ch in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                s.sendall(bytes([ch]))
                time.sleep(0.1)
            closed = s.recv(100) == b""
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        assert closed and time.monotonic() - t0 < 3


def test_serve_request_head_and_body_are_bounded(dash_server):
    reply = request(dash_server.server_port, head=b"".join(b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(20)))
    assert reply.startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", dash_server.server_port), timeout=5) as s:
        s.sendall(b"POST /_dash-update-component HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000000\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 413")


# ----------------------------------------------------------------- servers: agent and slurm-exporter

@pytest.fixture()
def exporter(request):
    cfg = getattr(request, "param", None) or WebConfig()
    srv = make_server("127.0.0.1:0", {"/healthz": lambda req: (200, "text/plain", b"ok\n", {})}, cfg)
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


def test_exporter_many_idle_sockets_do_not_block_scrapes(exporter):
    port = exporter.server_address[1]
    held = idle(port, 300)  # more than max_connections (256)
    time.sleep(0.5)  # accepted (or shed) by now: the steady state of the attack
    try:
        for _ in range(3):
            reply, took = timed(request, port)
            assert reply.startswith(b"HTTP/1.1 200") and took < 2  # refused before the guard, not slow
    finally:
        for s in held:
            s.close()


def test_exporter_idle_tls_and_trickle_are_cut(pki, tmp_path, monkeypatch):
    from collectors import web

    monkeypatch.setattr(web._Server, "request_timeout", 1.0)
    srv = make_server("127.0.0.1:0", {"/healthz": lambda req: (200, "text/plain", b"ok\n", {})},
                      tls_config(pki, tmp_path))
    serve_in_thread(srv)
    port = srv.server_address[1]
    try:
        silent = idle(port, 2)
        reply, took = timed(request, port, client_ctx(pki))
        assert reply.startswith(b"HTTP/1.1 200") and took < 1
        time.sleep(1.5)
        assert silent[0].recv(10) == b"" and srv.guard.open_connections() == 0  # idled out
        for s in silent:
            s.close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_exporter_listen_backlog_takes_a_burst():
    srv = make_server("127.0.0.1:0", {"/healthz": lambda req: (200, "text/plain", b"ok\n", {})})
    try:
        assert srv.request_queue_size >= 1024
        # not serving yet: the kernel queues connections up to the backlog (somaxconn permitting)
        burst = [socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=2) for _ in range(200)]
        for s in burst:
            s.close()
    finally:
        srv.server_close()


# ----------------------------------------------------------------- dashboard: caches and headers

def test_static_gzip_cache_is_keyed_by_the_file_and_bounded(monkeypatch):
    from dashboard.app import STATIC_GZIP, build_app, static_key

    assert static_key("/_dash-component-suites/plotly/package_data/plotly.v9_9_1m12345.min.js") == \
        "/_dash-component-suites/plotly/package_data/plotly.min.js"
    assert static_key("/assets/x/../style.css") == "/assets/style.css"
    c = build_app(dashboard_fake.datasource()).server.test_client()
    gz = {"Accept-Encoding": "gzip"}
    c.get("/assets/style.css", headers=gz)
    before = len(STATIC_GZIP._bodies)
    for i in range(20):
        assert c.get(f"/assets/x{i}/../style.css", headers=gz).headers["Content-Encoding"] == "gzip"
        c.get(f"/_dash-component-suites/dash/dcc/dash_core_components.v{i}m{i:08x}.js", headers=gz)
    assert len(STATIC_GZIP._bodies) <= before + 1  # one entry for the component bundle, whatever its fingerprint
    monkeypatch.setattr(STATIC_GZIP, "max_entries", 0)
    assert STATIC_GZIP.get("/made-up", lambda: b"x" * 5000)[:2] == b"\x1f\x8b"
    assert "/made-up" not in STATIC_GZIP._bodies


def test_traversal_is_a_404_and_one_log_line(caplog):
    from dashboard.app import build_app

    c = build_app(dashboard_fake.datasource()).server.test_client()
    with caplog.at_level("INFO"):
        r = c.get("/_dash-component-suites/dash/../../../../etc/passwd")
    assert r.status_code == 404
    lines = [rec for rec in caplog.records if "etc/passwd" in rec.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None and len(lines[0].getMessage()) < 300


def test_pages_forbid_framing_and_foreign_sources():
    from dashboard.app import build_app

    r = build_app(dashboard_fake.datasource()).server.test_client().get("/")
    assert r.headers["X-Frame-Options"] == "DENY"
    csp = r.headers["Content-Security-Policy"]
    assert "img-src 'self' data: blob:;" in csp and "frame-ancestors 'none'" in csp


# ----------------------------------------------------------------- clients: deadlines per operation

@pytest.fixture()
def trickle():
    from tests.support.trickle import TrickleServer

    srv = TrickleServer(interval=0.3)
    yield srv
    srv.close()


def test_fetch_has_a_deadline_per_operation_and_a_body_cap(trickle):
    import httpx

    from collectors import fetch
    from tests.support.trickle import TrickleServer

    with pytest.raises(fetch.FetchError, match="within 1 s"):
        _, took = timed(fetch.get, trickle.url, 1.0)
    import gc
    import tracemalloc

    flood = TrickleServer(mode="flood")
    gc.disable()  # what is freed must be freed by reference counting, not wait for a collection
    tracemalloc.start()
    try:
        with pytest.raises(fetch.FetchError, match="more than"):
            fetch.get(flood.url, 10.0, max_bytes=20_000_000)
        time.sleep(0.1)
        assert tracemalloc.get_traced_memory()[0] < 5_000_000  # the 20 MB read is not kept
    finally:
        tracemalloc.stop()
        gc.enable()
        flood.close()
    deadline = fetch.Deadline(0.5)
    with pytest.raises(httpx.HTTPError):
        fetch.get(trickle.url, 10.0, deadline=deadline)
    with pytest.raises(fetch.FetchError, match="no time left"):
        fetch.get(trickle.url, 10.0, deadline=deadline)


@pytest.mark.parametrize("argv", [
    ["backfill", "--slurm-exporter", "{url}", "--timeout", "2"],
    ["diagnose", "--prometheus", "{url}", "--snapshot", "{url}/snap", "--timeout", "2"],
    ["diagnose", "--prometheus", "http://127.0.0.1:9/", "--snapshot", "{url}/snap", "--timeout", "2"],
    ["capture", "--prometheus", "{url}", "--out", "{tmp}/b", "--timeout", "2"],
])
def test_every_cli_ends_within_its_timeout_against_a_trickling_server(trickle, tmp_path, argv):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "dashboard.cli"] + [a.format(url=trickle.url, tmp=tmp_path) for a in argv]
    res, took = timed(subprocess.run, cmd, capture_output=True, text=True, timeout=30)
    assert took < 2 + 1 + 1.5, (took, res.stderr[-500:])  # --timeout + 1 s, + the interpreter's start
    assert res.returncode != 0 and "Traceback" not in res.stderr


def test_embedded_source_one_slow_target_does_not_hold_the_others(trickle, exporter):
    from dashboard.sources.embedded import EmbeddedSource

    good = f"127.0.0.1:{exporter.server_address[1]}"
    src = EmbeddedSource([trickle.url + "/metrics", good + "/healthz"], timeout=1.0)
    try:
        _, took = timed(src.scrape)
        assert took < 2.5
        assert list(src.last_errors) == [trickle.url + "/metrics"]
    finally:
        src.close()


def test_live_snapshot_from_a_trickling_exporter_is_bounded(trickle):
    from dashboard.datasource import snapshot_from_url

    with pytest.raises(Exception, match="within 1 s"):
        timed(snapshot_from_url(trickle.url, timeout=1.0))


# ----------------------------------------------------------------- serve: poller and honest health

def _sim_snapshot_fn():
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.analysis.sim.slurm_view import build_snapshot

    sim = Simulation(SimConfig(nodes=4, seed=2, start=time.time() - 600, history_seconds=600))
    return sim, (lambda: build_snapshot(sim))


def test_requests_never_wait_on_a_frozen_scheduler_source():
    from dashboard.datasource import LiveDatasource

    _, fn = _sim_snapshot_fn()
    calls = []

    def frozen():
        calls.append(1)
        if len(calls) > 1:
            time.sleep(5)  # a frozen slurm-exporter
        return fn()

    ds = LiveDatasource(frozen, "slurm-exporter", min_interval=0.1).start()
    try:
        deadline = time.monotonic() + 5
        while ds.snapshot() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the poller is now inside the frozen fetch
        _, took = timed(lambda: (ds.snapshot(), ds.status(), ds.status().to_json()))
        assert ds.snapshot() is not None and took < 0.2
    finally:
        ds.close()


def test_health_says_a_dead_prometheus_is_down():
    from dashboard.app import serve_families
    from dashboard.datasource import LiveDatasource
    from dashboard.sources.prometheus import PrometheusSource

    _, fn = _sim_snapshot_fn()
    ds = LiveDatasource(fn, "snapshot", metrics=PrometheusSource("http://127.0.0.1:9", timeout=2.0))
    ds.refresh_metrics()
    doc = ds.status().to_json()
    assert doc["ok"] is False and doc["status"] == "degraded"
    assert any("metrics (prometheus)" in r and "queries failed" in r for r in doc["reasons"])
    up = next(f for f in serve_families(ds) if f.name == "gangwatch_serve_source_up")
    assert 'gangwatch_serve_source_up{source="metrics (prometheus)"} 0' in up.lines


def test_health_says_all_targets_down_is_down(exporter):
    from dashboard.datasource import LiveDatasource
    from dashboard.sources.embedded import EmbeddedSource

    _, fn = _sim_snapshot_fn()
    src = EmbeddedSource(["127.0.0.1:9/metrics", f"127.0.0.1:{exporter.server_address[1]}/nope"], timeout=2.0)
    ds = LiveDatasource(fn, "snapshot", metrics=src)
    try:
        ds.refresh_metrics()
        st = ds.status()
        metrics = next(s for s in st.sources if s.name.startswith("metrics"))
        assert not metrics.ok and "all 2 targets failed" in metrics.detail
    finally:
        src.close()


def test_findings_from_a_partly_or_wholly_dead_source_are_flagged():
    from dashboard.datasource import LiveDatasource
    from dashboard.sources.simulated import window_from_history

    sim, fn = _sim_snapshot_fn()

    class Flaky:
        name, queries_last_cycle, failed_last_cycle = "flaky", 10, 3

        def window(self):
            return window_from_history(sim)

    m = Flaky()
    ds = LiveDatasource(fn, "snapshot", clock=lambda: sim.t, metrics=m)
    ds.refresh_metrics()
    f = ds.findings()
    assert "3 of 10 queries failed" in f.degraded
    assert f"degraded: {f.degraded}" in f.as_diagnosis().to_json()["notes"]
    assert all(f.degraded in v.reason for v in f.verdicts if v.state == "insufficient_data")
    m.failed_last_cycle = 10  # now the source is dead: the last findings stay, marked
    ds.refresh_metrics()
    assert ds.findings().verdicts == f.verdicts and "metric source down" in ds.findings().degraded


# ----------------------------------------------------------------- oversized and broken inputs

SNAPSHOT_NODE = {"name": "n1", "state": "IDLE", "cpus_total": 64, "memory_total_bytes": 512 << 30, "gpus_total": 8,
                 "partitions": ["gpu"]}


def _snapshot_doc(**node) -> dict:
    return {"taken_at": 1_767_225_600.0, "nodes": [{**SNAPSHOT_NODE, **node}, {**SNAPSHOT_NODE, "name": "n2"}],
            "jobs": [{"job_id": 7, "state": "PENDING", "partition": "gpu", "node_count": 1, "cpus": 8, "gpus": 10 ** 30,
                      "user": "u", "reason": "Resources"}],
            "partitions": [{"name": "gpu", "nodes": ["n1", "n2"], "state": "UP"}]}


@pytest.mark.parametrize("node", [{"gpus_total": 10 ** 9}, {"gpus_total": 10 ** 7}, {"memory_total_bytes": 10 ** 30},
                                  {"cpus_total": 10 ** 12}])
def test_absurd_node_figures_are_left_out_with_a_reason(tmp_path, capsys, node):
    from dashboard.backfill_cli import main

    f = tmp_path / "snap.json"
    f.write_text(__import__("json").dumps(_snapshot_doc(**node)))
    rc, took = timed(main, ["--snapshot", str(f)])
    out = capsys.readouterr().out
    assert rc == 0 and took < 10
    assert "n1 (the snapshot gives it" in out and "not planned" in out


def test_deeply_nested_snapshot_is_one_line(tmp_path, capsys):
    from dashboard.backfill_cli import main

    f = tmp_path / "nested.json"
    f.write_text('{"taken_at": 1, "jobs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["--snapshot", str(f)]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err


def test_simulate_bounded_on_an_unterminated_line_and_clear_on_a_bad_out(tmp_path, capsys):
    from dashboard.analysis.swf import MAX_LINE_CHARS, read_swf
    from dashboard.simulate_cli import main
    from tests.test_replay import SWF_TEXT

    trace, took = timed(read_swf, "/dev/zero")
    assert took < 5 and trace.jobs == () and "reading stopped" in trace.problems[-1].reason
    assert MAX_LINE_CHARS <= 1 << 20
    swf = tmp_path / "t.swf"
    swf.write_text(SWF_TEXT)
    for out in ("/dev/full", str(tmp_path)):
        assert main(["--swf", str(swf), "--out", out]) == 2
        assert f"cannot write {out}" in capsys.readouterr().err


def test_capture_fails_on_a_dead_prometheus_and_an_unwritable_out(tmp_path, capsys):
    from dashboard.capture_cli import main

    assert main(["--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path / "b"), "--timeout", "3"]) == 1
    assert "no bundle written" in capsys.readouterr().err
    assert not (tmp_path / "b" / "metrics.om").exists()
    assert main(["--prometheus", "http://127.0.0.1:9", "--out", "/proc/x", "--timeout", "3"]) == 2
    assert "cannot create /proc/x" in capsys.readouterr().err


def test_capture_skips_an_engines_odd_answers():
    """Answers of every wrong shape: each query noted or its odd series skipped, the good series
    kept, never a crash."""
    import httpx

    from dashboard.capture_cli import fetch_samples

    good = {"metric": {"__name__": "gangwatch_gpu_power_watts", "node": "n1", "gpu": "0"}, "values": [[100, "1.5"]]}
    odd = [{"status": "success", "data": {"result": [1, {"metric": [], "values": []}, {"metric": {"__name__": "x", "a": 1},
                                                        "values": [[1, "2"]]}, {"metric": {"__name__": "y"}, "values": 7},
                                                        {"metric": {"__name__": "z"}, "values": [[1], [1, 2, 3], None, [2, "3"]]},
                                                        good]}},
           [], "x", {"status": "success", "data": []}, {"status": "success", "data": {"result": {}}},
           {"status": "success", "data": {"result": 5}}, {"status": "error"}]
    answers = iter(odd * 3)

    def handler(request):
        return httpx.Response(200, json=next(answers))

    notes: list[str] = []
    samples, ok = fetch_samples("http://engine", 0, 100, 15, 10, notes, client=httpx.Client(transport=httpx.MockTransport(handler)))
    assert ok and notes
    assert samples and {(s.name, s.value) for s in samples} == {("gangwatch_gpu_power_watts", 1.5), ("z", 3.0)}


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.simulated import BundleWriter

    sim = Simulation(SimConfig(nodes=4, seed=3, prefill=False))
    w = BundleWriter(sim)
    w.capture()
    for _ in range(12):
        sim.step()
        w.capture()
    p = tmp_path_factory.mktemp("bundle")
    w.write(str(p))
    return p


@pytest.mark.parametrize("squeue", [None, '{"jobs": [', "garbage", "[1, 2]"])
def test_diagnose_broken_squeue_is_a_note_and_exit_1(small_bundle, tmp_path, capsys, squeue):
    import shutil

    from dashboard.diagnose_cli import main

    assert main(["--bundle", str(small_bundle)]) == 0
    capsys.readouterr()
    b = tmp_path / "b"
    shutil.copytree(small_bundle, b)
    if squeue is None:
        (b / "squeue.json").unlink()
    else:
        (b / "squeue.json").write_text(squeue)
    assert main(["--bundle", str(b)]) == 1
    out, err = capsys.readouterr()
    assert "note: squeue.json" in out and "squeue.json" in err


def test_diagnose_missing_bundle_exits_2(capsys):
    from dashboard.diagnose_cli import main

    assert main(["--bundle", "/nonexistent"]) == 2
    assert "not a directory" in capsys.readouterr().err


# ----------------------------------------------------------------- low: hostile names, terminals, tracebacks

def test_node_and_job_links_are_one_encoded_path_segment():
    from dashboard import ui
    from dashboard.app import resolve
    from dashboard.pages import node

    ctx = ui.Ctx(lambda p: p)
    hostile = "n64)![t](http://host/track.png)"
    link = ctx.node(hostile)
    assert link.startswith("/nodes/") and not set("()[] /#?") & set(link[len("/nodes/"):])
    for name in (hostile, "a/b", "n#1", "n 1?x=%"):
        module, params = resolve(ctx.node(name).lstrip("/"))
        assert module is node and params == {"name": name}
    assert resolve(ctx.job("12_[3-4]").lstrip("/"))[1] == {"jobid": "12_[3-4]"}


def test_backfill_table_shows_control_characters_as_question_marks(tmp_path, capsys):
    import json

    from dashboard.backfill_cli import main

    doc = _snapshot_doc()
    doc["jobs"][0]["reason"] = "Resources\x1b[2J\x07\nFAKE LINE"
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(doc))
    assert main(["--snapshot", str(f)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "Resources?[2J??FAKE LINE" in out


def test_nvml_backoff_does_not_grow_a_traceback():
    import traceback

    from collectors.node.gpu import NvmlSession

    class Broken:
        def nvmlInit(self):
            raise RuntimeError("driver/library version mismatch")

    s = NvmlSession(Broken(), clock=lambda: 100.0)
    depths = []
    for _ in range(5):
        try:
            s.acquire()
        except Exception as exc:
            depths.append(len(traceback.extract_tb(exc.__traceback__)))
            assert s.last_error.__traceback__ is None and exc is not s.last_error
    assert len(set(depths)) == 1
