"""The on-demand link probe between two real agents on loopback addresses (127.0.0.2 and 127.0.0.3)
with Debian's iperf3 and perftest: measurements, the bandwidth cap, authentication, one probe per
node (429), bad requests, no RDMA device, a job that ended, a node without an agent, and the
result attached to a verdict as evidence."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from collectors.registry import load_builtin_collectors
from collectors.slurm.model import Job, Snapshot
from dashboard import probe_cli
from dashboard.analysis.findings import Evidence, Verdict
from dashboard.analysis.linkprobe import PairResult, attach, evidence, rounds
from tests.support.agent_process import AgentProcess, free_port

REPO = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-probe-token"
A, B = "127.0.0.2", "127.0.0.3"


class Agent(AgentProcess):
    """A real `gangwatch agent` with the probe enabled, listening on `host` (collectors kept to one)."""

    def __init__(self, host: str, token_file: Path, extra: tuple[str, ...] = ()):
        self.probe_port = free_port(host)
        off = [f"--no-collector.{n}" for n in load_builtin_collectors() if n != "pressure"]
        super().__init__(["--probe.enable", f"--probe.token-file={token_file}", f"--probe.port={self.probe_port}",
                          "--probe.max-bitrate=2G", "--log-level=error", *off, *extra], host=host)

    def get(self, path: str, token: str | None = TOKEN, **params) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.url + path, params=params, headers=headers, timeout=20)


@pytest.fixture(scope="module")
def tools():
    missing = [t for t in ("iperf3", "ib_write_bw") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian's iperf3 and perftest; tests/run-all.sh installs them)")


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def agents(tools, token_file):
    a, b = Agent(A, token_file), Agent(B, token_file)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory):
    jobs = (Job(job_id=42, state="RUNNING", nodes=("n1", "n2"), node_count=2),
            Job(job_id=43, state="COMPLETED", nodes=("n1", "n2"), node_count=2),
            Job(job_id=44, state="RUNNING", nodes=("n1",), node_count=1))
    path = tmp_path_factory.mktemp("snap") / "snapshot.json"
    path.write_text(Snapshot(taken_at=time.time(), source="files", jobs=jobs).to_json())
    return path


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = probe_cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def cli_args(agents, snapshot_file, token_file, jobid="42", b_url=None):
    a, b = agents
    return [jobid, "--snapshot", snapshot_file, "--agent", f"n1={a.url}", "--agent", f"n2={b_url or b.url}",
            "--token-file", token_file, "--seconds", "1"]


# ------------------------------------------------------------------ between two real agents


def test_probe_measures_the_pair_under_the_cap_and_scrapes_stay_fast(agents, snapshot_file, token_file):
    a, _ = agents
    scrape_times = []

    def scrape_during():
        for _ in range(5):
            t0 = time.monotonic()
            assert a.get("/metrics", token=None).status_code == 200
            scrape_times.append(time.monotonic() - t0)
            time.sleep(0.2)

    t = threading.Thread(target=scrape_during)
    t.start()
    rc, out, err = run_cli(*cli_args(agents, snapshot_file, token_file), "--format", "json")
    t.join()
    assert rc == 0, err
    doc = json.loads(out)
    (pair,) = doc["pairs"]
    assert (pair["source"], pair["target"], pair["tool"], pair["error"]) == ("n1", "n2", "iperf3", "")
    # iperf3 -b 2G: a loopback carries far more, so the cap is what we measure
    assert 1e8 < pair["bits_per_second"] <= 2.2e9
    assert 0 < pair["latency_seconds"] < 0.01  # the sender's mean RTT
    assert pair["rated_bits_per_second"] is None  # loopback has no rated speed: unknown, not 0
    signals = [e["signal"] for e in doc["evidence"]]
    assert signals == ["link_probe_bandwidth_bits_per_second", "link_probe_latency_seconds"]
    assert "rated speed unknown" in doc["evidence"][0]["note"]
    assert max(scrape_times) < 1.0


def test_one_probe_per_node_a_flood_gets_429(agents):
    a, b = agents
    first = a.get("/api/v1/probe/serve", tool="iperf3", seconds=1)
    assert first.status_code == 200 and first.json()["address"] == A
    flood = [a.get("/api/v1/probe/serve", tool="iperf3", seconds=1) for _ in range(3)]
    flood.append(a.get("/api/v1/probe/run", tool="iperf3", seconds=1, peer=B, port=1))
    assert {r.status_code for r in flood} == {429}
    assert int(flood[0].headers["Retry-After"]) >= 1 and "one at a time" in flood[0].json()["error"]
    # the scrape is not held up by the flood nor by the probe server waiting for its client
    t0 = time.monotonic()
    assert a.get("/metrics", token=None).status_code == 200
    assert time.monotonic() - t0 < 1.0
    # the waiting server takes its one client, then the slot is free again
    done = b.get("/api/v1/probe/run", tool="iperf3", seconds=1, peer=A, port=first.json()["port"])
    assert done.status_code == 200 and done.json()["bits_per_second"] > 0
    deadline = time.monotonic() + 10
    while a.get("/api/v1/probe/serve", tool="ib_write_lat", seconds=1).status_code == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_authentication_and_bad_requests(agents):
    a, _ = agents
    assert a.get("/api/v1/probe/serve", token=None).status_code == 401
    assert a.get("/api/v1/probe/serve", token="wrong").status_code == 401
    for params, word in (({"tool": "bash"}, "tool"), ({"seconds": "11"}, "seconds"), ({"seconds": "-1"}, "seconds"),
                         ({"peer": "127.0.0.3; reboot", "port": "5201"}, "peer"),
                         ({"peer": "--help", "port": "5201"}, "peer"), ({"peer": B, "port": "70000"}, "port")):
        r = a.get("/api/v1/probe/run", **params)
        assert r.status_code == 400 and word in r.json()["error"], (params, r.text)


def test_rdma_without_a_device_says_so(agents, snapshot_file, token_file):
    a, _ = agents
    r = a.get("/api/v1/probe/serve", tool="ib_write_bw", seconds=1)
    assert r.status_code == 503
    assert r.json()["error"].startswith("no RDMA device: ") and "Did not detect devices" in r.json()["error"]
    rc, out, err = run_cli(*cli_args(agents, snapshot_file, token_file), "--tool", "rdma-bw")
    assert rc == 1 and "no RDMA device" in out


def test_job_that_ended_one_node_unknown_and_a_node_without_an_agent(agents, snapshot_file, token_file):
    for jobid, words in (("43", "is COMPLETED, not running"), ("44", "no links between nodes"),
                         ("999", "not in Slurm's queue")):
        rc, out, err = run_cli(*cli_args(agents, snapshot_file, token_file, jobid=jobid))
        assert rc == 2 and words in err and "Traceback" not in err, err
    dead = f"http://{B}:{free_port(B)}"
    t0 = time.monotonic()
    rc, out, err = run_cli(*cli_args(agents, snapshot_file, token_file, b_url=dead))
    assert rc == 1 and "no agent answering at " + dead in out
    assert time.monotonic() - t0 < 15


def test_agent_will_not_probe_without_authentication(tools):
    cmd = [sys.executable, "-m", "dashboard.cli", "agent", f"--web.listen-address={A}:{free_port(A)}", "--probe.enable"]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2 and "needs authentication" in res.stderr


# ------------------------------------------------------------------ pure parts


def test_rounds_cover_every_pair_once_with_disjoint_pairs():
    for n in range(0, 8):
        nodes = [f"n{i}" for i in range(n)]
        rs = rounds(nodes)
        pairs = [frozenset(p) for r in rs for p in r]
        assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
        for r in rs:
            used = [x for p in r for x in p]
            assert len(used) == len(set(used))


def test_results_attach_to_the_verdict_as_evidence():
    v = Verdict(jobid="42", nodes=("n1", "n2", "n3"), gpus=8, state="stalled_network", confidence=0.9, since=1.0,
                evidence=(Evidence("ib_wait", "n1", 5.0, 1.0, 3.0),
                          Evidence("link_probe_bandwidth_bits_per_second", "old", 1.0, None, None)))
    results = [PairResult("n1", "n2", "iperf3", 9.1e10, 2e-5, 1e11), PairResult("n1", "n3", "iperf3", 2e10, None, 1e11),
               PairResult("n2", "n3", "iperf3", error="no agent answering at http://n3:9810")]
    got = attach(v, results)
    assert [e.signal for e in got.evidence] == ["ib_wait", "link_probe_bandwidth_bits_per_second",
                                                "link_probe_latency_seconds", "link_probe_bandwidth_bits_per_second",
                                                "link_probe"]
    slow = got.evidence[3]
    assert (slow.node, slow.value, slow.baseline, slow.threshold) == ("n1->n3", 2e10, 1e11, 5e10)
    assert "slow" in slow.note and "20% of the rated 100 Gb/s" in slow.note
    assert "slow" not in got.evidence[1].note and got.evidence[4].note.startswith("iperf3: no agent answering")
    assert got.to_json()["evidence"][3]["threshold"] == 5e10
    assert evidence([]) == ()


# ------------------------------------------------------------------ the job page's button


def _text(component) -> str:
    """All the strings in a Dash component tree."""
    if isinstance(component, (str, int, float)):
        return str(component)
    if isinstance(component, (list, tuple)):
        return " ".join(_text(c) for c in component)
    children = getattr(component, "children", None)
    return "" if children is None else _text(children)


def test_job_page_button_probes_the_stalled_gang(agents):
    from dashboard import ids, probe_button
    from dashboard.pages import job as job_page
    from dashboard.probe_cli import ProbeSettings
    from dashboard.ui import Ctx
    from tests.support.dashboard_fake import NODES, datasource

    a, b = agents
    ds = datasource()
    page = str(job_page.layout(ds, Ctx(lambda p: p), "4001"))
    assert ids.JOB_PROBE_BUTTON in page
    assert ids.JOB_PROBE_BUTTON not in str(job_page.layout(ds, Ctx(lambda p: p), "4003"))  # one node: no links
    assert "not configured" in _text(probe_button.run(ds, None, "4001"))
    settings = ProbeSettings(agents={NODES[0]: a.url, NODES[1]: b.url},
                             headers={"Authorization": f"Bearer {TOKEN}"}, seconds=1)
    got = _text(probe_button.run(ds, settings, "4001"))
    assert "1 pair(s) measured with iperf3" in got and "link_probe_bandwidth_bits_per_second" in got
    assert f"{NODES[0]}->{NODES[1]}" in got and "Gb/s" in got and "rated speed unknown" in got
    assert "not running" in _text(probe_button.run(ds, settings, "4004"))  # pending


def test_serve_keeps_the_probe_on_the_verdict(agents):
    """Through a real serve: the button's callback probes the two real agents, then
    /api/v1/findings and the job page, reloaded, carry the measurement on the job's verdict."""
    from dashboard import ids
    from dashboard.app import build_app
    from dashboard.probe_cli import ProbeSettings
    from tests.support.dashboard_fake import NODES, datasource
    from tests.test_dashboard_browser import serve

    a, b = agents
    settings = ProbeSettings(agents={NODES[0]: a.url, NODES[1]: b.url}, headers={"Authorization": f"Bearer {TOKEN}"},
                             seconds=1)
    srv, th = serve(build_app(datasource(), refresh_seconds=3600, probe=settings))
    base = f"http://127.0.0.1:{srv.server_port}"

    def verdict():
        doc = httpx.get(base + "/api/v1/findings", timeout=10).json()
        return doc, next(v for v in doc["verdicts"] if v["jobid"] == "4001")

    try:
        _, v = verdict()
        assert [e["signal"] for e in v["evidence"]] == ["io_pressure", "io_pressure"]
        click = {"output": f"{ids.JOB_PROBE_RESULT}.children",
                 "outputs": {"id": ids.JOB_PROBE_RESULT, "property": "children"},
                 "inputs": [{"id": ids.JOB_PROBE_BUTTON, "property": "n_clicks", "value": 1}],
                 "state": [{"id": ids.JOB_ID, "property": "data", "value": "4001"}],
                 "changedPropIds": [f"{ids.JOB_PROBE_BUTTON}.n_clicks"]}
        r = httpx.post(base + "/_dash-update-component", json=click, timeout=60)
        assert r.status_code == 200 and "1 pair(s) measured with iperf3" in r.text
        doc, v = verdict()
        assert [e["signal"] for e in v["evidence"]] == ["io_pressure", "io_pressure",
                                                        "link_probe_bandwidth_bits_per_second",
                                                        "link_probe_latency_seconds"]
        bw = v["evidence"][2]
        assert bw["node"] == f"{NODES[0]}->{NODES[1]}" and 1e6 < bw["value"] <= 2.2e9  # under the agents' 2G cap
        assert time.time() - 120 < bw["at"] <= time.time()
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.Draft202012Validator(json.loads((REPO / "docs" / "findings.schema.json").read_text())).validate(doc)
        page = httpx.get(base + "/_dash-layout", headers={"Referer": base + "/jobs/4001"}, timeout=10).text
        assert "link_probe_bandwidth_bits_per_second" in page and "io_pressure" in page
        # `gangwatch probe --serve`: serve runs it with its own agent settings and keeps the newer result
        rc, out, err = run_cli("4001", "--serve", base, "--format", "json")
        assert rc == 0, err
        assert json.loads(out)["pairs"][0]["target"] == NODES[1]
        _, v2 = verdict()
        assert v2["evidence"][2]["at"] > bw["at"] and len(v2["evidence"]) == 4  # replaced, not added
        rc, _, err = run_cli("4004", "--serve", base)  # pending: serve says why, nothing probed
        assert rc == 2 and "not running" in err and "HTTP 409" in err
        assert httpx.post(base + "/api/v1/probe", timeout=10).status_code == 400  # no jobid
        assert httpx.post(base + "/api/v1/findings", timeout=10).status_code == 405  # POST only where it acts
    finally:
        srv.shutdown()
        th.join(5)


def test_cli_attaches_the_result_to_the_verdict_from_serve(agents, snapshot_file, token_file):
    """`--findings URL`: the job's verdict as serve gives it, with the probe's evidence after its own."""
    import http.server

    doc = {"schema_version": 1, "verdicts": [
        Verdict(jobid="42", nodes=("n1", "n2"), gpus=16, state="stalled_network", confidence=0.9, since=1.0,
                culprit="leaf3", culprit_kind="leaf_switch",
                evidence=(Evidence("ib_wait", "n1", 5e5, 1e5, 3e5, z=6.0, p=1e-6),)).to_json()]}

    class Findings(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Findings)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/api/v1/findings"
        rc, out, err = run_cli(*cli_args(agents, snapshot_file, token_file), "--findings", url, "--format", "json")
    finally:
        srv.shutdown()
        srv.server_close()
    assert rc == 0, err
    v = json.loads(out)["verdict"]
    assert (v["state"], v["culprit"]) == ("stalled_network", "leaf3")
    assert [e["signal"] for e in v["evidence"]] == ["ib_wait", "link_probe_bandwidth_bits_per_second",
                                                    "link_probe_latency_seconds"]
    assert v["evidence"][0]["z"] == 6.0 and v["evidence"][1]["node"] == "n1->n2"


def test_web_config_users_authenticate_the_probe(tools, tmp_path):
    """On an agent with basic-auth users the probe takes the same users (and no token is needed)."""
    import bcrypt

    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_users:\n  ops: " + bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode() + "\n")
    off = [f"--no-collector.{n}" for n in load_builtin_collectors() if n != "pressure"]
    agent = AgentProcess([f"--web.config.file={cfg}", "--probe.enable", "--log-level=error", *off], host="127.0.0.4")
    try:
        url = agent.url + "/api/v1/probe/serve"
        assert httpx.get(url, params={"tool": "ib_write_bw"}, timeout=10).status_code == 401
        assert httpx.get(url, params={"tool": "ib_write_bw"}, auth=("ops", "wrong"), timeout=10).status_code == 401
        r = httpx.get(url, params={"tool": "ib_write_bw"}, auth=("ops", "pw"), timeout=10)
        assert r.status_code == 503 and r.json()["error"].startswith("no RDMA device")  # let in, and told why
    finally:
        agent.stop()


def test_perftest_and_iperf3_reports_parse():
    """Reports in perftest's print formats (perftest_parameters.h: RESULT_FMT_G + REPORT_FMT with
    --report_gbits; RESULT_FMT_LAT_DUR + REPORT_FMT_LAT_DUR with -D) and iperf3's -J document."""
    from collectors.probe import no_device, parse_iperf3, parse_perftest

    bw = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
          + " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf\n" % (65536, 1046342, 97.51, 97.48, 0.185935))
    assert parse_perftest("--------\n" + bw) == {"bits_per_second": 97.48e9, "latency_seconds": None}
    lat = " #bytes        #iterations       t_avg[usec]  \t\n" + " %-7lu       %d            %-7.2f\n" % (2, 431123, 1.16)
    assert parse_perftest(lat) == {"bits_per_second": None, "latency_seconds": pytest.approx(1.16e-6)}
    with pytest.raises(ValueError):
        parse_perftest(" Couldn't connect to 10.0.0.2:18515\n")
    doc = {"end": {"sum_received": {"bits_per_second": 9.4e10},
                   "streams": [{"sender": {"mean_rtt": 40}}, {"sender": {"mean_rtt": 60}}]}}
    assert parse_iperf3(json.dumps(doc)) == {"bits_per_second": 9.4e10, "latency_seconds": pytest.approx(5e-5)}
    with pytest.raises(ValueError, match="unable to connect"):
        parse_iperf3(json.dumps({"error": "unable to connect to server: Connection refused"}))
    assert no_device(" Did not detect devices \n If device exists, check if driver is up\n").startswith("Did not detect")
    assert no_device("all good") is None


_CONV = re.compile(r"(%[-0-9.]*)l?([udf])")


def _c_printf(fmt: str, values) -> str:
    """C's printf for the conversions perftest's report formats use (%lu, %d, %lf, %f)."""
    return _CONV.sub(r"\1\2", fmt) % tuple(values)


def test_perftest_reports_in_the_installed_tools_own_formats(tools):
    """Every Gb/s and latency table of Debian's perftest (4.5), header and row formats read out of
    the ib_write_bw / ib_write_lat binaries themselves, printed as they print them: the parser takes
    BW average (4th column) and t_avg (3rd with -D; 6th after t_min, t_max, t_typical)."""
    from collectors.probe import parse_perftest

    checked = []
    for tool in ("ib_write_bw", "ib_write_lat"):
        strings = [m.decode() for m in re.findall(rb"[\t\x20-\x7e]{8,}", Path(shutil.which(tool)).read_bytes())]
        headers = [h.rstrip("\n") for h in strings if h.startswith(" #bytes") and ("[Gb/sec]" in h or "usec]" in h)]
        rows = [f.rstrip("\n") for f in strings if f.startswith(" %-7lu")]
        assert headers and rows, f"no report formats found in {tool}"
        for header in headers:
            if "BW average[Gb/sec]" in header:
                key, column = "bits_per_second", 4 if "#sl" in header else 3
            else:
                key, column = "latency_seconds", 5 if "t_min[usec]" in header else 2
            pairs = 0
            for fmt in rows:
                convs = _CONV.findall(fmt)
                # columns: two spaces or more apart, but "#bytes #iterations" (latency, 4.5) one apart
                if len(convs) != len(re.split(r"\s{2,}|(?<=#bytes) (?=#)", header.strip())):
                    continue
                values = [65536 if i == 0 else 1000 + i if c[1] in "ud" else 10.25 + i for i, c in enumerate(convs)]
                got = parse_perftest("-" * 40 + "\n" + header + "\n" + _c_printf(fmt, values) + "\n" + "-" * 40 + "\n")
                want = (10.25 + column) * (1e9 if key == "bits_per_second" else 1e-6)
                assert got[key] == pytest.approx(want), (tool, header, fmt, got)
                pairs += 1
            assert pairs, f"{tool}: no row format fits the header {header!r}"
            checked.append(header)
    assert any("t_min[usec]" in h for h in checked) and any("tps average" in h for h in checked)
    assert any("Port2[Gb/sec]" in h for h in checked)


def test_rdma_rate_limit_flags_reach_perftest(tools):
    """The cap of --probe.max-bitrate becomes perftest's SW rate limiter in Gb/s, on both sides, and
    Debian's ib_write_bw accepts the flags: it sets up the limiter ("Setting burst size") before
    finding no device, where an unknown flag would stop it at parsing."""
    from collectors.probe import ProbeConfig, ProbeService
    from collectors.runner import CommandRunner

    class Recording(CommandRunner):
        argv: list = []

        def run(self, argv, timeout=5.0, input=None):
            self.argv.append(list(argv))
            return super().run(argv, timeout=timeout, input=input)

    runner = Recording()
    svc = ProbeService(ProbeConfig(address=A, port=18515, max_seconds=10, max_bitrate=2.5e9, token=TOKEN,
                                   basic_auth=False), runner=runner)
    limit = ["--report_gbits", "--rate_limit_type=SW", "--rate_units=g", "--rate_limit=2.5"]
    assert svc._server_argv("ib_write_bw", 3) == ["ib_write_bw", "-D", "3", *limit, "-p", "18515"]
    assert svc._server_argv("ib_write_lat", 3) == ["ib_write_lat", "-D", "3", "-p", "18515"]  # one message at a time
    svc._slot.acquire()  # as the HTTP guard does before run()
    status, _, body, _ = svc.run({"tool": "ib_write_bw", "seconds": 3, "peer": B, "port": 18516})
    assert runner.argv == [["ib_write_bw", "-D", "3", *limit, "-p", "18516", B]]
    error = json.loads(body)["error"]
    assert status == 503 and error.startswith("no RDMA device:") and "Setting burst size" in error, error
    assert svc._slot.acquire(blocking=False)  # run() gave the slot back
    svc.cfg.rdma_device = "mlx5_0"
    assert svc._server_argv("ib_write_bw", 2)[:3] == ["ib_write_bw", "-d", "mlx5_0"]


@pytest.mark.browser
def test_probe_button_in_a_real_browser(agents, tmp_path):
    """The stalled gang's page in Chromium: the button runs the probe between the two real agents,
    the pair's bandwidth shows under the evidence, and stays in the verdict's evidence after a reload."""
    from tests.test_dashboard_browser import CHROMIUM, serve

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium not installed at {CHROMIUM} (apt-get install chromium; tests/run-all.sh does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip package playwright not installed")
    from dashboard.app import build_app
    from dashboard.probe_cli import ProbeSettings
    from tests.support.dashboard_fake import NODES, datasource

    a, b = agents
    settings = ProbeSettings(agents={NODES[0]: a.url, NODES[1]: b.url}, headers={"Authorization": f"Bearer {TOKEN}"},
                             seconds=1)
    srv, th = serve(build_app(datasource(), refresh_seconds=3600, probe=settings))
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{srv.server_port}/jobs/4001")
            page.locator("#job-probe-button").click(timeout=15_000)
            result = page.locator("#job-probe-result")
            sync_api.expect(result).to_contain_text("1 pair(s) measured with iperf3", timeout=30_000)
            sync_api.expect(result).to_contain_text(f"{NODES[0]}->{NODES[1]}")
            sync_api.expect(result).to_contain_text("Gb/s")
            page.reload()  # serve kept the probe: the verdict's own evidence now holds the pair
            evidence_rows = page.locator("#job-evidence")
            sync_api.expect(evidence_rows).to_contain_text("link_probe_bandwidth_bits_per_second", timeout=15_000)
            sync_api.expect(evidence_rows).to_contain_text(f"{NODES[0]}->{NODES[1]}")
            browser.close()
            assert not errors, errors
    finally:
        srv.shutdown()
        th.join(5)
