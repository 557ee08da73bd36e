"""The slurm-exporter's node -> leaf switch map against a real slurmctld running topology/tree with
tests/slurm/topology.conf (tests/slurm_cluster.py with `slurmd=False`: munge and slurmctld only,
a few seconds to start). Checks the exporter's `gangwatch_slurm_node_switch_info` over HTTP against
what `scontrol show topology` prints, the snapshot's switches, and a frozen slurmctld: the topology
command is killed at its deadline like the others. Skipped, with the reason, without root or Slurm."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from collectors.runner import CommandRunner
from collectors.slurm import exporter
from collectors.slurm.model import Snapshot
from collectors.slurm.sources import CliSource, Poller
from collectors.slurm.topology import leaf_switches, parse_topology
from collectors.web import make_server, serve_in_thread
from tests import slurm_cluster
from tests.test_slurm_topology import LEAVES, promtool_check, switch_info

CONF = Path(__file__).parent / "slurm" / "topology.conf"
CAPTURE = Path(__file__).parent / "data" / "slurm-topology" / "scontrol_show_topology.txt"

pytestmark = slurm_cluster.pytest_marks()


@pytest.fixture(scope="module")
def cluster():
    yield from slurm_cluster.started(slurm_cluster.SlurmCluster(dbd=False, jwt=False, topology=str(CONF), slurmd=False))


def test_scontrol_still_prints_what_we_captured(cluster):
    out = cluster.run("scontrol", "show", "topology")
    assert out == CAPTURE.read_text()  # the parser tests' input is what this Slurm prints
    assert leaf_switches(parse_topology(out).switches) == LEAVES


def test_exporter_serves_the_leaf_map(cluster):
    args = exporter.build_parser().parse_args(["--web.listen-address", "127.0.0.1:0", "--slurm.poll-interval", "60",
                                               "--slurm.no-fairshare"])
    poller, scraper, routes = exporter.build_app(args, runner=CommandRunner(env=cluster.env))
    assert poller.poll_once(), poller.statuses
    server = make_server(args.web_listen_address, routes)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        text = httpx.get(base + "/metrics").text
        snap = Snapshot.from_dict(httpx.get(base + "/api/v1/snapshot").json())
    finally:
        server.shutdown()
        server.server_close()
        scraper.close()
    promtool_check(text)
    assert switch_info(text) == LEAVES
    assert 'gangwatch_slurm_command_success{command="scontrol_topology"} 1' in text
    assert not [e for e in snap.errors if "topology" in e.source]
    spine = next(s for s in snap.switches if s.name == "spine1")
    assert spine.level == 1 and spine.switches == ("leaf-r01", "leaf-r02") and len(spine.nodes) == 6
    # slurmctld knows the same nodes as the tree
    assert set(LEAVES) == {n.name for n in snap.nodes}


def test_frozen_slurmctld_bounds_the_topology_command(cluster):
    only_topology = CliSource(runner=CommandRunner(env=cluster.env), timeout=1.0,
                              skip=("jobs", "nodes", "partitions", "reservations", "scheduler", "priority", "fairshare"))
    poller = Poller(only_topology)
    poller.poll_once()
    assert poller.health()["statuses"]["scontrol_topology"].ok
    cluster.freeze_ctld()
    try:
        start = time.monotonic()
        poller.poll_once()
        took = time.monotonic() - start
    finally:
        cluster.thaw_ctld()
    status = poller.health()["statuses"]["scontrol_topology"]
    assert not status.ok and status.error.startswith("timed out") and took < 5
    assert "SwitchName=leaf-r01" in cluster.run("scontrol", "show", "topology")


def test_topology_file_agrees_with_scontrol(cluster):
    args = exporter.build_parser().parse_args(["--slurm.topology-file", str(CONF), "--slurm.no-fairshare"])
    poller = Poller(exporter.make_source(args, CommandRunner(env=cluster.env)))
    assert poller.poll_once(), poller.statuses
    assert switch_info(exporter.render_once(poller, time.time())) == LEAVES
    assert "scontrol_topology" not in poller.health()["statuses"]
