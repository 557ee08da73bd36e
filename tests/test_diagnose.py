"""Diagnosis verdicts on hand-made metric windows: one scenario per verdict, the honesty rules
(culprits only beyond chance, consistent findings, outages are not stalls, unknown is not healthy),
incidents, placement, findings as metrics/JSON, and bad input (hypothesis)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.slurm.model import Job, NodeAllocation
from dashboard.analysis.diagnose import diagnose, incidents, nanquantile_rows, outliers, robust_z
from dashboard.analysis.thresholds import DEFAULT
from dashboard.analysis.topology import parse_topology_conf
from dashboard.analysis.window import Window
from dashboard.findings_api import findings_json, findings_metrics

T, G, STEP = 80, 4, 15.0  # 20 minutes of 15 s samples, 4 GPUs per node
END = 1_767_225_600.0
TIMES = END - STEP * np.arange(T)[::-1]


class Cluster:
    """A healthy cluster of `n` nodes (training: util ~0.92, SM ~0.7, all-reduce on IB, data reads,
    a checkpoint dip with writes and an evaluation phase), and knobs to break it."""

    def __init__(self, n: int = 8, seed: int = 0, targets: int = 8):
        rng = np.random.default_rng(seed)
        self.n = n
        self.nodes = tuple(f"gpu{i:03d}" for i in range(n))
        self.util = np.clip(rng.normal(0.92, 0.015, (n, G, T)), 0, 1)
        self.sm = self.util * 0.72
        ckpt = slice(30, 34)  # a 60 s checkpoint: GPUs pause, the nodes write
        evalp = slice(50, 54)  # an evaluation phase: forward passes only
        self.util[:, :, ckpt] = 0.07
        self.sm[:, :, ckpt] = 0.03
        self.util[:, :, evalp] *= 0.6
        self.sm[:, :, evalp] *= 0.6
        self.clock = np.full((n, G, T), 1.98e9)
        self.power = 90 + 500 * self.sm
        self.ib_tx = np.full((n, G, T), 2e10) * rng.uniform(0.95, 1.05, (n, G, T))
        self.ib_tx[:, :, ckpt] = 0
        self.ib_tx[:, :, evalp] = 0
        self.ib_wait = np.full((n, G, T), 1e5) * rng.uniform(0.8, 1.2, (n, G, T))
        self.ib_down = np.zeros((n, G, T))
        self.fs_read = np.full((n, T), 4e8)
        self.fs_write = np.zeros((n, T))
        self.fs_write[:, ckpt] = 2e9
        self.psi = np.full((n, T), 0.02)
        self.targets = tuple(f"scratch-OST{k:04x}" for k in range(targets))
        self.lat = np.full((n, targets, T), 0.003) * rng.uniform(0.9, 1.1, (n, targets, T))
        self.read = np.full((n, targets, T), 4e8 / targets)
        self.leaf_of = {nd: f"leaf{i // 4}" for i, nd in enumerate(self.nodes)}
        self.nvlink: dict = {}
        self.numa: dict = {}

    def window(self, **over) -> Window:
        f = np.float32
        return Window(times=TIMES.copy(), step=STEP, nodes=self.nodes, gpus=tuple(tuple(range(G)) for _ in self.nodes),
                      rails=tuple(tuple(f"mlx5_{k}/1" for k in range(G)) for _ in self.nodes), targets=self.targets,
                      gpu={"util": self.util.astype(f), "sm": self.sm.astype(f), "clock": self.clock.astype(f),
                           "power": self.power.astype(f)},
                      rail={"ib_tx": self.ib_tx.astype(f), "ib_wait": self.ib_wait.astype(f), "ib_down": self.ib_down.astype(f)},
                      node={"fs_read": self.fs_read.astype(f), "fs_write": self.fs_write.astype(f), "psi_io": self.psi.astype(f)},
                      target={"latency": self.lat.astype(f), "read": self.read.astype(f)}, leaf_of=dict(self.leaf_of),
                      nvlink_peers=self.nvlink, gpu_numa=self.numa, **over)

    def rows(self, names):
        return [self.nodes.index(x) for x in names]


def job(jid: int, nodes, gpus=tuple(range(G)), start=END - 7200, state="RUNNING") -> Job:
    nodes = tuple(nodes)
    return Job(job_id=jid, name=f"train{jid}", user="alice", state=state, start_time=start, nodes=nodes,
               node_count=len(nodes), gpus=len(gpus) * len(nodes),
               allocations=tuple(NodeAllocation(n, gpus=len(gpus), gpu_indices=tuple(gpus)) for n in nodes))


def verdict(d, jid):
    return next(v for v in d.verdicts if v.jobid == str(jid))


GANG_A = ("gpu000", "gpu001", "gpu002", "gpu003")
GANG_B = ("gpu004", "gpu005", "gpu006", "gpu007")


def test_healthy_gangs_with_checkpoint_and_eval_are_progressing():
    c = Cluster()
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    assert [v.state for v in d.verdicts] == ["progressing", "progressing"]
    assert d.incidents == ()
    v = verdict(d, 1)
    assert v.gpu_hours_lost == 0 and v.since is None and 0 < v.confidence <= 1


def test_checkpoint_in_progress_is_not_a_stall():
    c = Cluster()
    c.util[:, :, -5:] = 0.06  # a checkpoint that started 75 s ago and still writes
    c.sm[:, :, -5:] = 0.02
    c.ib_tx[:, :, -5:] = 0
    c.fs_write[:, -5:] = 3e9
    d = diagnose(c.window(), [job(1, GANG_A)])
    assert verdict(d, 1).state == "progressing"


def test_a_checkpoint_whose_first_write_sample_was_lost_is_not_a_stall():
    """GPUs paused 105 s, their node's write rate a scrape behind them (the filesystem's exporter
    scraped apart from the GPUs') and that scrape lost: the run's first known write samples decide,
    not the lost one. Where both were known and neither wrote, the pause began before the writes:
    no checkpoint."""
    def paused(lost: bool) -> str:
        c = Cluster()
        c.util[:, :, -7:] = 0.0  # no DCGM profiling: utilisation and power only
        c.power[:, :, -7:] = 50.0
        c.ib_tx[:, :, -7:] = 0
        c.fs_write[:, -7:-5] = 1e6  # the rate over the scrape interval before the pause
        c.fs_write[:, -5:] = 1.2e9
        if lost:
            c.fs_write[:, -6] = np.nan
        w = c.window()
        return verdict(diagnose(dataclasses.replace(w, gpu={k: v for k, v in w.gpu.items() if k != "sm"}),
                                [job(1, GANG_A)]), 1).state
    assert paused(lost=True) == "progressing"
    assert paused(lost=False) != "progressing"


def test_a_checkpoint_scraped_once_a_minute_may_show_its_writes_a_sample_late():
    """Scraped once a minute onto a 15 s grid (the bundle's samples say so), a node's write rate is
    one sample held for four steps, and a minute behind the GPUs at worst (the filesystem's exporter scraped at another
    offset): GPUs that paused 30 s before the first write sample are a checkpoint, not a deadlock
    (catalogue seed 702 scraped every minute). A pause that began two samples before the writes
    began before them: no checkpoint."""
    rng = np.random.default_rng(5)

    def paused(steps_before: int, scrape: float = 60.0) -> str:
        c = Cluster()
        blocks = (np.arange(T) - (T - 5)) // 4  # one write sample a minute, the last ones from T - 5
        c.fs_write[:] = 1e6 * rng.uniform(0.9, 1.1, blocks.max() - blocks.min() + 1)[blocks - blocks.min()]
        c.fs_write[:, -5:] = 8.6e8
        c.util[:, :, -(5 + steps_before):] = 0.0  # no DCGM profiling: utilisation and power only
        c.power[:, :, -(5 + steps_before):] = 50.0
        c.ib_tx[:, :, -(5 + steps_before):] = 0
        w = c.window(scrape_seconds=scrape)
        w = dataclasses.replace(w, gpu={**{k: v for k, v in w.gpu.items() if k != "sm"},
                                        "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1).state
    assert paused(2) == "progressing"
    assert paused(8) != "progressing"
    assert paused(2, scrape=STEP) != "progressing"  # sampled every step, the writes came too late

def test_a_checkpoints_own_io_pressure_is_not_an_io_stall():
    c = Cluster()
    c.psi[:, 30:34] = 0.6  # writers block in dirty-page throttling while the checkpoint lasts
    c.util[:, :, -5:] = 0.06  # and one in progress now, with its pressure
    c.sm[:, :, -5:] = 0.02
    c.ib_tx[:, :, -5:] = 0
    c.fs_write[:, -5:] = 3e9
    c.psi[:, -5:] = 0.6
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    assert [v.state for v in d.verdicts] == ["progressing", "progressing"]
    # a gang waiting on the network that writes a checkpoint meanwhile is still waiting on the network
    for i in c.rows(GANG_A):
        c.util[i, :, -10:] = 0.96
        c.sm[i, :, -10:] = 0.15
        c.ib_tx[i, :, -10:] = 3e9
        c.ib_wait[i, :, -10:] = 3e7
    assert verdict(diagnose(c.window(), [job(1, GANG_A)]), 1).state == "stalled_network"


def test_idle_gpus_stay_idle_while_the_working_one_checkpoints():
    c = Cluster()
    c.util[4, 1:, :] = 0.0  # left idle since before the window
    c.sm[4, 1:, :] = 0.0
    c.util[4, 0, -8:] = 0.06  # the working GPU pauses for a 2-minute checkpoint that writes
    c.sm[4, 0, -8:] = 0.02
    c.fs_write[4, -8:] = 3e9
    c.fs_read[4, -8:] = 0  # and reads nothing meanwhile
    c.read[4, :, -8:] = 0
    v = verdict(diagnose(c.window(), [job(1, ("gpu004",))]), 1)
    assert v.state == "idle_gpus" and v.culprit == "gpu004:gpu1,2,3"


def test_stalled_io_names_the_slow_target_with_significance():
    c = Cluster()
    r = c.rows(GANG_A)
    for i in r:
        c.util[i, :, -10:] = 0.08
        c.sm[i, :, -10:] = 0.04
        c.psi[i, -10:] = 0.85
        c.fs_read[i, -10:] = 2e7
    c.lat[:, 5, -10:] = 0.3  # OST0005 answers 100x slower, for everyone
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 1)
    assert v.state == "stalled_io"
    assert v.culprit == "scratch-OST0005" and v.culprit_kind == "target"
    assert v.since == TIMES[-10]
    ev = next(e for e in v.evidence if e.signal == "fs_target_read_latency")
    assert ev.p is not None and ev.p * 8 < DEFAULT.alpha and ev.z > 3
    # and how the job's own nodes see that target
    mine = [e for e in v.evidence if e.signal == "fs_target_read_latency" and e.node]
    assert len(mine) == 1 and mine[0].node in GANG_A and mine[0].value == pytest.approx(0.3)
    assert v.gpu_hours_lost == pytest.approx(16 * 9 * STEP / 3600)
    assert verdict(d, 2).state == "progressing"


def test_two_slow_targets_the_one_that_slowed_when_the_job_stalled_is_named():
    c = Cluster(targets=16)
    a, b = c.rows(GANG_A), c.rows(GANG_B)
    for i in a:  # gang A stalls 10 steps ago, when OST0009 slowed
        c.util[i, :, -10:] = 0.08
        c.sm[i, :, -10:] = 0.04
        c.psi[i, -10:] = 0.85
    c.lat[:, 3, -40:] = 0.06  # OST0003 has been slow for 10 minutes: gang B's problem, not A's
    c.lat[:, 9, -10:] = 0.05
    for i in b:
        c.util[i, :, -40:] = 0.08
        c.sm[i, :, -40:] = 0.04
        c.psi[i, -40:] = 0.85
    c.read[:, :, :] = 0.0
    for i in a:  # A's nodes read from both (a neighbour's stripe on OST0003)
        c.read[i, [3, 9], :] = 1e7
    for i in b:
        c.read[i, [3, 4], :] = 1e7
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    va, vb = verdict(d, 1), verdict(d, 2)
    assert (va.state, va.culprit, vb.state, vb.culprit) == ("stalled_io", "scratch-OST0009", "stalled_io", "scratch-OST0003")
    assert any("also slow: scratch-OST0003" in e.note for e in va.evidence)
    assert sorted((i.culprit, i.jobs) for i in d.incidents) == [("scratch-OST0003", ("2",)), ("scratch-OST0009", ("1",))]


def test_io_stall_without_a_standout_target_names_the_filesystem_or_nothing():
    c = Cluster()
    for i in c.rows(GANG_A):
        c.util[i, :, -10:] = 0.08
        c.sm[i, :, -10:] = 0.04
        c.psi[i, -10:] = 0.85
    c.lat[:, :, -10:] *= 1.5  # every target a little slower: nobody stands out
    v = verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)
    assert v.state == "stalled_io"
    # no target and no node stands out: the filesystem its nodes read from (all of them `scratch-*`)
    assert (v.culprit, v.culprit_kind) == ("scratch", "filesystem")
    # without per-target data the filesystem cannot be told: no culprit is invented
    v = verdict(diagnose(dataclasses.replace(c.window(), targets=(), target={}), [job(1, GANG_A)]), 1)
    assert v.state == "stalled_io" and (v.culprit, v.culprit_kind) == ("", "")
    # nor when the job's nodes read from two filesystems
    c.targets = c.targets[:4] + tuple(f"home-OST{k:04x}" for k in range(4))
    v = verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)
    assert v.state == "stalled_io" and (v.culprit, v.culprit_kind) == ("", "")


def test_idle_gpus_while_reading_full_speed_are_idle_not_io():
    # Issue 13 corrects issue 6's rule "idle GPUs while the nodes read at full speed is I/O": reads
    # at the usual pace with no reader waiting say nothing about the GPUs' starvation.
    c = Cluster()
    for i in c.rows(GANG_A):
        c.util[i, :, -12:] = 0.0
        c.sm[i, :, -12:] = 0.0
        c.ib_tx[i, :, -12:] = 0
        c.fs_read[i, -12:] = 4.2e8  # the loaders keep reading at full speed
    v = verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)
    assert v.state == "idle_gpus"
    # GPUs with nothing on them (framebuffer at the driver's idle level) are idle even when the
    # readers wait
    mem = np.full((c.n, G, T), 60e9)
    mem[c.rows(GANG_A), :, -12:] = 3e8
    c.psi[c.rows(GANG_A), -12:] = 0.7
    w = c.window()
    w.gpu["mem"] = mem.astype(np.float32)
    assert verdict(diagnose(w, [job(1, GANG_A)]), 1).state == "idle_gpus"
    # the same GPUs still holding the job's memory while its readers wait: an I/O stall
    mem[c.rows(GANG_A), :, -12:] = 60e9
    w.gpu["mem"] = mem.astype(np.float32)
    assert verdict(diagnose(w, [job(1, GANG_A)]), 1).state == "stalled_io"


def test_deadlock_with_idle_gpus_holding_memory_is_hung():
    c = Cluster()
    mem = np.full((c.n, G, T), 60e9)
    for i in c.rows(GANG_A):
        c.util[i, :, -12:] = 0.0
        c.sm[i, :, -12:] = 0.0
        c.ib_tx[i, :, -12:] = 0
        c.ib_wait[i, :, -12:] = 0
        c.fs_read[i, -12:] = 0
    w = c.window()
    w.gpu["mem"] = mem.astype(np.float32)
    v = verdict(diagnose(w, [job(1, GANG_A)]), 1)
    assert (v.state, v.culprit_kind) == ("hung", "job")
    # the processes gone (memory back at the idle level): GPUs left idle
    mem[c.rows(GANG_A), :, -12:] = 4e8
    w.gpu["mem"] = mem.astype(np.float32)
    assert verdict(diagnose(w, [job(1, GANG_A)]), 1).state == "idle_gpus"


def test_host_side_network_wait_with_quiet_gpus_is_a_network_stall():
    # MPI/Gloo over the host, host-staged copies: the GPUs go quiet (utilisation too, not only SM
    # activity) while the job's ports back up orders of magnitude above the cluster's typical node
    c = Cluster()
    for i in c.rows(GANG_A):
        c.util[i, :, -12:] = 0.05
        c.sm[i, :, -12:] = 0.02
        c.ib_tx[i, :, -12:] = 2e9
        c.ib_wait[i, :, -12:] = 5e7
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 1)
    assert v.state == "stalled_network", v.reason
    assert verdict(d, 2).state == "progressing"


def test_a_quiet_gang_whose_ports_wait_tens_of_times_their_own_past_waits_on_the_host():
    """A gang whose traffic marks far less than the cluster's typical node (RoCE: ECN marks and
    CNPs depend on the traffic pattern) goes quiet with its traffic down to a tenth while its ports'
    wait jumps 20-60x its own past: 6-14x the cluster's typical node, under the 10x that alone makes
    congestion at half the steps (RoCE catalogue seed 1000, gloo over the host). Two references
    agree: the job's own past at 10x and the cluster's at 5x. The same jump to 3x the cluster's
    typical node is no congestion."""
    rng = np.random.default_rng(3)
    swing = rng.uniform(0.6, 1.4, 12)  # the gang's wait swings from scrape to scrape

    def quiet_gang(of_cluster):
        c = Cluster()
        for i in c.rows(GANG_A):
            c.ib_wait[i] = 2.5e4 * rng.uniform(0.8, 1.2, (G, T))  # a quarter of the cluster's 1e5
            c.util[i, :, -12:] = 0.05
            c.sm[i, :, -12:] = 0.002
            c.ib_tx[i, :, -12:] = 2e9
            c.ib_wait[i, :, -12:] = 1e5 * of_cluster * swing
        return verdict(diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)]), 1)

    v = quiet_gang(10.0)
    assert v.state == "stalled_network", (v.state, v.reason)
    assert quiet_gang(3.0).state == "insufficient_data"

def test_unexplained_drop_names_the_signals_present_and_missing():
    c = Cluster()
    for i in c.rows(GANG_A):
        c.util[i, :, -12:] = 0.3  # activity fell, kernels run, nothing else moves
        c.sm[i, :, -12:] = 0.2
    w = c.window()
    v = verdict(diagnose(w, [job(1, GANG_A)]), 1)
    assert v.state == "insufficient_data"
    assert "present:" in v.reason and "I/O pressure" in v.reason and "InfiniBand transmit wait" in v.reason
    assert "GPU memory" in v.reason.split("missing:")[1]
    assert "no I/O, network or hang signal" not in v.reason


def test_network_stall_names_the_congested_leaf():
    c = Cluster(n=12)
    gang = ("gpu002", "gpu003", "gpu004", "gpu005")  # two nodes on leaf0, two on leaf1
    for i in c.rows(gang):
        c.util[i, :, -8:] = 0.96
        c.sm[i, :, -8:] = 0.14
        c.ib_tx[i, :, -8:] = 3e9
    c.ib_wait[c.rows(("gpu004", "gpu005", "gpu006", "gpu007")), :, -8:] = 3e7  # leaf1 is hot
    d = diagnose(c.window(), [job(1, gang)])
    v = verdict(d, 1)
    assert v.state == "stalled_network"
    assert (v.culprit, v.culprit_kind) == ("leaf1", "leaf_switch")
    waits = [e for e in v.evidence if e.signal == "ib_wait" and e.node]
    assert waits and all(e.node in ("gpu004", "gpu005") and e.p < DEFAULT.alpha for e in waits)


@pytest.mark.parametrize("switch_hot", [False, True])
def test_a_gang_filling_a_leaf_is_not_that_leafs_congestion(switch_hot):
    """A gang whose collectives back up on one port makes all its nodes wait, and a leaf it fills
    then looks congested. The port is named where the gang's nodes on another leaf wait as much
    and no other node on the leaf does; the leaf where its nodes there wait several times more
    than the gang's others (a switch's congestion, which the gang's others only wait for)."""
    c = Cluster(n=16)
    gang = ("gpu003", "gpu004", "gpu005", "gpu006", "gpu007", "gpu008")  # filling leaf1, one each on leaf0, leaf2
    for i in c.rows(gang):
        c.util[i, :, -8:] = 0.98
        c.sm[i, :, -8:] = 0.05
        c.ib_tx[i, :, -8:] = 2e9
        c.ib_wait[i, :, -8:] = 3e7
    hot = c.nodes.index("gpu003")
    if switch_hot:
        c.ib_wait[c.rows((gang[0], gang[-1])), :, -8:] = 4e6  # the gang's nodes off the switch wait only for it
    else:
        c.ib_wait[hot, 1, -8:] = 1.5e8  # where the credits run out
    v = verdict(diagnose(c.window(), [job(1, gang)]), 1)
    assert v.state == "stalled_network"
    expected = ("leaf1", "leaf_switch") if switch_hot else ("gpu003:mlx5_1/1", "port")
    assert (v.culprit, v.culprit_kind) == expected


def test_a_gang_on_two_leaves_is_judged_on_both_nodes_ports():
    """A 2-node gang on two leaves, both nodes waiting beyond the cluster, one port of the second
    where the parameter server's incast backs up (catalogue seed 810's net_host_wait): the port is
    named, not the first node because it came first among the leaves that held one node each."""
    c = Cluster(n=12)
    gang = ("gpu003", "gpu004")  # the last node of leaf0, the first of leaf1
    for i in c.rows(gang):
        c.util[i, :, -8:] = 0.0
        c.sm[i, :, -8:] = 0.0
        c.ib_tx[i, :, -8:] = 3e8
        c.ib_wait[i, :, -8:] = 1e8
    c.ib_wait[c.nodes.index("gpu004"), 2, -8:] = 5e8
    v = verdict(diagnose(c.window(), [job(1, gang)]), 1)
    assert v.state == "stalled_network"
    assert (v.culprit, v.culprit_kind) == ("gpu004:mlx5_2/1", "port"), v

@pytest.mark.parametrize("neighbours", ["steady", "jumped"])
def test_busy_neighbours_waiting_as_they_always_did_are_no_congested_leaf(neighbours):
    """Catalogue seed 2504 (node_exporter's names): a 2-node gang on two leaves waits on one port of
    its second node (a host-waiting stall). Most of the cluster carries light traffic and waits for
    nothing, so two busy nodes on the gang's first leaf, an all-to-all waiting at its pace as it
    did all along, stood out from the cluster, and with the gang's node there filled that leaf:
    the leaf was named. Neighbours that wait as they did before at their traffic are no victims of
    the switch: the port is named. Where their wait jumped with the gang's stall, the leaf is."""
    c = Cluster(n=12)
    light = [i for i in range(c.n) if c.nodes[i] not in ("gpu001", "gpu002", "gpu003", "gpu004")]
    c.ib_tx[light] = 2e7
    c.ib_wait[light] = 0
    c.util[light] = 0.0
    c.sm[light] = 0.0
    busy = c.rows(("gpu001", "gpu002"))
    c.ib_tx[busy] = 1.7e9
    c.ib_wait[busy] = 8e5
    gang = ("gpu003", "gpu004")  # the last node of leaf0, the first of leaf1
    paint(c, gang, T, ib_tx=3.2e9, ib_wait=8e5)
    paint(c, gang, 20, util=0.04, sm=0.01, ib_tx=4.8e8, ib_wait=4e8)
    c.ib_wait[c.nodes.index("gpu004"), 2, -20:] = 1.5e9
    if neighbours == "jumped":
        c.ib_wait[busy, :, -20:] = 8e7
    v = verdict(diagnose(c.window(), [job(1, gang), job(2, ("gpu001", "gpu002"))]), 1)
    assert v.state == "stalled_network", v.reason
    want = ("gpu004:mlx5_2/1", "port") if neighbours == "steady" else ("leaf0", "leaf_switch")
    assert (v.culprit, v.culprit_kind) == want, (v.culprit, v.evidence)


@pytest.mark.parametrize("background", [0.0, 1.5e6])
def test_nodes_that_were_idle_until_a_job_started_are_no_congested_leaf(background):
    """A 2-node gang on two leaves waits on one port of its second node (a parameter server's
    incast) while a new job starts on four idle nodes of the first leaf (catalogue seed 1409's
    net_host_wait). Against their own idle past any wait is "10x", so the first leaf looked
    congested and was named: a node's own past is the wait of the steps it carried traffic like
    its traffic now, and a node that carried none has no past to be congested against. Where every
    node carries some background traffic (storage over the fabric, which node_exporter counts with
    the rest), one whose wait rose from nothing to less than the gang waited at pace is no
    congestion either."""
    c = Cluster(n=12)
    c.leaf_of = {nd: ("leaf0" if i < 8 else "leaf1") for i, nd in enumerate(c.nodes)}
    idle = c.rows(("gpu000", "gpu001", "gpu006", "gpu009"))
    c.ib_tx[idle] = background
    c.ib_wait[idle] = 0
    new = c.rows(("gpu002", "gpu003", "gpu004", "gpu005"))
    c.ib_tx[new, :, :-16] = background
    if background:
        c.ib_tx[new, :, -16:] = background  # the job reads its shards: no more traffic out
    c.ib_wait[new, :, :-16] = 0
    c.ib_wait[new, :, -16:] = 2e5  # a busy node's usual wait
    c.util[idle + new, :, :-16] = 0.0
    c.sm[idle + new, :, :-16] = 0.0
    gang = ("gpu007", "gpu008")
    paint(c, gang, T, ib_wait=3.3e5)
    paint(c, gang, 20, util=0.03, sm=0.01, ib_tx=7e8, ib_wait=1.6e7)
    c.ib_wait[c.nodes.index("gpu008"), 2, -20:] = 9e7
    c.ib_wait[c.rows(("gpu010", "gpu011"))] = 7.5e5
    v = verdict(diagnose(c.window(), [job(1, gang), job(2, ("gpu002", "gpu003", "gpu004", "gpu005"), start=END - 240)]), 1)
    assert v.state == "stalled_network", v.reason
    assert (v.culprit, v.culprit_kind) == ("gpu008:mlx5_2/1", "port"), (v.culprit, v.evidence)


@pytest.mark.parametrize("congested", [False, True])
def test_a_gang_that_spun_since_it_started_is_not_progressing(congested):
    """A gang whose GPUs have had kernels resident with idle SMs since it started (NCCL set-up that
    never completes while the nodes' other traffic goes on, or a job that started inside a fault) has
    that wait as its own baseline: not "progressing at its baseline" but not judged, with why; where
    its ports wait 10x the cluster's typical node, the network stall it is."""
    c = Cluster()
    r = c.rows(GANG_A)
    start = T - 30  # 7.5 minutes ago, past the 5-minute grace
    c.util[r, :, start:] = 0.98
    c.sm[r, :, start:] = 0.013
    c.ib_tx[r, :, start:] = 6e5  # the node's other traffic (storage over the fabric), steady
    if congested:
        c.ib_wait[r, :, start:] = 3e6
    v = verdict(diagnose(c.window(), [job(1, GANG_A, start=TIMES[start])]), 1)
    if congested:
        assert v.state == "stalled_network", v
    else:
        assert v.state == "insufficient_data", v
        assert "SMs idle" in v.reason and "since it started" in v.reason, v.reason
    c.sm[r, :, start:start + 4] = 0.7  # a minute of work after it started: judged against that work
    v = verdict(diagnose(c.window(), [job(1, GANG_A, start=TIMES[start])]), 1)
    assert v.state == ("stalled_network" if congested else "insufficient_data"), v
    assert "since it started" not in v.reason, v.reason


def test_flapping_link_is_the_culprit_port():
    c = Cluster()
    i = c.nodes.index("gpu002")
    for k in c.rows(GANG_A):
        c.util[k, :, -8:] = 0.96
        c.sm[k, :, -8:] = 0.15
        c.ib_tx[k, :, -8:] = 2e9
    c.ib_tx[i, 2, -8::2] = 0
    c.ib_down[i, 2, -8::2] = 1
    v = verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)
    assert v.state == "stalled_network"
    assert (v.culprit, v.culprit_kind) == ("gpu002:mlx5_2/1", "port")


def test_a_slow_target_read_by_the_job_before_it_on_its_nodes_is_not_its_stall():
    """The targets a job reads are its nodes' reads since it started: a slow OST that the job before
    it on those nodes read (and nobody reads now but other clients) does not turn the job's
    network stall into an I/O stall, nor name that OST."""
    c = Cluster()
    r = c.rows(GANG_A)
    start = len(TIMES) - 30  # the job started 30 steps ago; the one before it read OST0005 only
    c.read[r, :, start:] = np.where(np.arange(8) == 5, 0.0, 4e8 / 7)[None, :, None]
    c.read[r, :, :start] = np.where(np.arange(8) == 5, 4e8, 0.0)[None, :, None]
    c.lat[:, 5, -10:] = 0.3  # OST0005 answers 100x slower, for everyone who reads it now
    i = c.nodes.index("gpu002")
    for k in r:
        c.util[k, :, -8:] = 0.96
        c.sm[k, :, -8:] = 0.15
        c.ib_tx[k, :, -8:] = 2e9
    c.ib_tx[i, 2, -8::2] = 0
    c.ib_down[i, 2, -8::2] = 1
    v = verdict(diagnose(c.window(), [job(1, GANG_A, start=TIMES[start])]), 1)
    assert (v.state, v.culprit) == ("stalled_network", "gpu002:mlx5_2/1"), v
    # the same reads since it started make the OST its own: then the slow target is its stall
    c.read[r, 5, start:] = 4e8 / 8
    v = verdict(diagnose(c.window(), [job(1, GANG_A, start=TIMES[start])]), 1)
    assert (v.state, v.culprit) == ("stalled_io", "scratch-OST0005"), v


def test_hung_collective():
    c = Cluster()
    for i in c.rows(GANG_B):
        c.util[i, :, -10:] = 1.0
        c.sm[i, :, -10:] = 0.01
        c.ib_tx[i, :, -10:] = 0
        c.ib_wait[i, :, -10:] = 2e3
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    assert verdict(d, 2).state == "hung"
    assert verdict(d, 1).state == "progressing"


def test_straggler_gpu_is_named_with_its_p_value():
    c = Cluster()
    i = c.nodes.index("gpu001")
    c.clock[i, 3, -20:] = 1.1e9  # HW slowdown
    for k in c.rows(GANG_A):
        c.sm[k, :, -20:] *= 0.55  # the others wait at the barrier
    c.sm[i, 3, -20:] = 0.95
    v = verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)
    assert v.state == "straggler"
    assert (v.culprit, v.culprit_kind) == ("gpu001:gpu3", "gpu")
    e = v.evidence[0]
    assert e.signal == "gpu_sm_clock" and e.p < DEFAULT.alpha / 32 and e.value == pytest.approx(1.1e9, rel=1e-3)
    assert v.gpu_hours_lost > 0


def test_slow_node_in_a_two_node_gang():
    c = Cluster()
    gang = ("gpu000", "gpu001")
    c.clock[0, :, -20:] = 1.2e9  # the whole node is thermally throttled
    v = verdict(diagnose(c.window(), [job(1, gang)]), 1)
    assert v.state == "straggler" and (v.culprit, v.culprit_kind) == ("gpu000", "node")


def test_uniform_noise_never_names_a_culprit():
    rng = np.random.default_rng(7)
    for trial in range(20):
        c = Cluster(seed=trial)
        c.clock *= rng.normal(1.0, 0.01, c.clock.shape)  # boost clocks vary by ~1 %
        d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
        assert {v.state for v in d.verdicts} == {"progressing"}, trial


def test_partially_idle_allocation():
    c = Cluster()
    c.util[4, 1:, -30:] = 0.0
    c.sm[4, 1:, -30:] = 0.0
    v = verdict(diagnose(c.window(), [job(1, ("gpu004",))]), 1)
    assert v.state == "idle_gpus" and v.culprit == "gpu004:gpu1,2,3"
    assert v.gpu_hours_lost == pytest.approx(3 * 30 * STEP / 3600)


def test_a_lost_scrape_does_not_hide_gpus_left_idle_for_minutes():
    """GPUs never used for 30 minutes whose node lost a scrape in the last minute (three steps
    without data, then one with): still left idle, as the gap ends no idleness (RoCE catalogue seed
    1005). A GPU whose node stopped reporting altogether is unknown, not idle."""
    c = Cluster()
    c.util[4, 1:, -30:] = 0.0
    c.sm[4, 1:, -30:] = 0.0
    c.util[4, :, -4:-1] = np.nan
    c.sm[4, :, -4:-1] = np.nan
    v = verdict(diagnose(c.window(), [job(1, ("gpu004",))]), 1)
    assert v.state == "idle_gpus" and v.culprit == "gpu004:gpu1,2,3", (v.state, v.reason)
    c.util[4, :, -4:] = np.nan
    c.sm[4, :, -4:] = np.nan
    assert verdict(diagnose(c.window(), [job(1, ("gpu004",))]), 1).state == "insufficient_data"

def test_young_job_is_not_judged_and_suspended_is_reported_as_such():
    c = Cluster()
    c.util[:4, :, -10:] = 0
    d = diagnose(c.window(), [job(1, GANG_A, start=END - 120), job(2, GANG_B, state="SUSPENDED")])
    assert verdict(d, 1).state == "insufficient_data" and "first" in verdict(d, 1).reason
    assert verdict(d, 2).state == "suspended"
    assert all(v.state not in ("stalled_io", "hung", "idle_gpus") for v in d.verdicts)


def test_unknown_nodes_and_silent_gpus_are_insufficient_not_healthy():
    c = Cluster()
    c.util[4:6, :, -6:] = np.nan  # two nodes of gang B stopped reporting
    c.util[6:8, :, -6:] = np.nan
    d = diagnose(c.window(), [job(1, ("nodeX1", "nodeX2")), job(2, GANG_B), job(3, GANG_A)])
    assert verdict(d, 1).state == "insufficient_data" and "know none" in verdict(d, 1).reason
    assert verdict(d, 2).state == "insufficient_data" and "reported" in verdict(d, 2).reason
    assert verdict(d, 3).state == "progressing"


def test_whole_cluster_silent_is_an_outage():
    c = Cluster()
    c.util[:, :, -4:] = np.nan
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)])
    assert {v.state for v in d.verdicts} == {"insufficient_data"}
    assert "outage" in d.cluster_reason
    # not judged: GPU-hours lost unknown (null, "unknown"), never 0
    from dashboard.diagnose_cli import render_table

    assert all(v.to_json()["gpu_hours_lost"] is None for v in d.verdicts)
    rows = [line.split() for line in render_table(d, []).splitlines()[1:3]]
    assert all(r[6] == "unknown" for r in rows)


def test_everyone_dropping_at_once_is_an_outage_not_stalls():
    c = Cluster(n=16)
    c.util[:, :, -8:] = 0.0  # collectors report zeros everywhere from the same scrape on
    c.sm[:, :, -8:] = 0.0
    c.ib_tx[:, :, -8:] = 0.0
    c.fs_read[:, -8:] = 0.0
    jobs = [job(k, (c.nodes[k],)) for k in range(16)]
    d = diagnose(c.window(), jobs)
    assert {v.state for v in d.verdicts} == {"insufficient_data"}
    assert "outage" in d.cluster_reason


def test_incidents_group_by_culprit_and_rank_by_cost():
    c = Cluster(n=12)
    for i in range(12):
        c.util[i, :, -10:] = 0.08
        c.sm[i, :, -10:] = 0.04
        c.psi[i, -10:] = 0.85
    c.lat[:, 2, -10:] = 0.3
    jobs = [job(1, c.nodes[0:4]), job(2, c.nodes[4:6]), job(3, c.nodes[6:7])]
    d = diagnose(c.window(), jobs)
    assert len(d.incidents) == 1
    inc = d.incidents[0]
    assert inc.culprit == "scratch-OST0002" and set(inc.jobs) == {"1", "2", "3"}
    assert inc.gpu_hours_lost == pytest.approx(sum(v.gpu_hours_lost for v in d.verdicts))


def test_placement_findings():
    c = Cluster(n=12)
    c.leaf_of = {nd: f"leaf{i // 4}" for i, nd in enumerate(c.nodes)}
    c.nvlink = {"gpu000": frozenset({(0, 1), (2, 3)})}
    c.numa = {"gpu000": {0: 0, 1: 0, 2: 1, 3: 1}}
    gang = ("gpu000", "gpu001", "gpu004", "gpu008")  # 4 nodes over 3 leaves where 1 would do
    # GPUs 1 and 2 of gpu000: not NVLink peers, and on two NUMA nodes where one holds two GPUs
    d = diagnose(c.window(), [job(1, gang, gpus=(1, 2))])
    kinds = {p.kind for p in verdict(d, 1).placement}
    assert kinds == {"gpus_not_nvlink_peers", "gpus_span_numa", "spread_over_leaves"}
    assert all(p.expected_cost for p in verdict(d, 1).placement)
    # a job holding the whole node must span its NUMA nodes: no finding for that
    d = diagnose(c.window(), [job(1, gang)])
    assert "gpus_span_numa" not in {p.kind for p in verdict(d, 1).placement}


def test_findings_as_metrics_and_json():
    c = Cluster()
    for i in c.rows(GANG_B):
        c.util[i, :, -10:] = 1.0
        c.sm[i, :, -10:] = 0.01
        c.ib_tx[i, :, -10:] = 0
    d = diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B), job(3, ("nodeX",))])
    text = findings_metrics(d).decode()
    assert 'gangwatch_job_stalled{jobid="2",cause="hung"} 1' in text
    assert 'gangwatch_job_stalled{jobid="1",cause="none"} 0' in text
    assert 'gangwatch_job_stalled{jobid="3"' not in text  # unknown is not reported as healthy
    assert 'gangwatch_job_gpu_hours_lost_total{jobid="2"}' in text
    assert "gangwatch_incident_gpu_hours_lost{" in text
    doc = json.loads(findings_json(d))
    v = next(x for x in doc["verdicts"] if x["jobid"] == "2")
    assert set(v) >= {"jobid", "nodes", "gpus", "state", "confidence", "since", "culprit", "evidence", "gpu_hours_lost"}
    assert all(set(e) >= {"signal", "node", "value", "baseline", "threshold"} for e in v["evidence"])


def test_statistics_helpers():
    z, med, scale = robust_z(np.array([1.0, 1.0, 1.0, 1.0, 0.5]), 0.02)
    assert med == 1.0 and z[-1] == pytest.approx(-25.0)
    assert outliers(np.array([1.0, 1.0, 1.01, 0.99, 0.5]), DEFAULT, high=False)[0][0] == 4
    assert outliers(np.array([1.0, 0.5]), DEFAULT, high=False) == []  # too few peers for a test
    a = np.array([[1.0, 2.0, np.nan, 4.0], [np.nan] * 4])
    q = nanquantile_rows(a, 0.9)
    assert q[0] == pytest.approx(np.nanquantile(a[0], 0.9)) and math.isnan(q[1])


def test_topology_conf():
    leaf_of, notes = parse_topology_conf("SwitchName=s0 Nodes=gpu[000-003]\nSwitchName=s1 Nodes=gpu[004-007]\n"
                                         "SwitchName=spine Switches=s[0-1]\nNodes=bogus\n")
    assert leaf_of["gpu002"] == "s0" and leaf_of["gpu007"] == "s1" and len(leaf_of) == 8
    assert notes and "line 4" in notes[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bad_values_never_crash_and_other_jobs_are_still_judged(data):
    c = Cluster()
    w = c.window()
    bad = data.draw(st.lists(st.tuples(st.sampled_from(["util", "sm", "clock"]), st.integers(0, 3), st.integers(0, G - 1),
                                       st.integers(0, T - 1), st.sampled_from([np.nan, np.inf, -np.inf, -5.0, 1e30])),
                             max_size=30))
    for sig, i, g, t, val in bad:
        w.gpu[sig][i, g, t] = val
    for i in data.draw(st.lists(st.integers(0, 3), max_size=2)):
        w.node["psi_io"][i] = np.nan
        w.rail["ib_tx"][i] = np.nan
    d = diagnose(w, [job(1, GANG_A), job(2, GANG_B), job(3, ("ghost",)),
                     Job(job_id=4, state="RUNNING", nodes=("gpu000",), allocations=())])
    assert len(d.verdicts) == 4
    assert verdict(d, 2).state == "progressing"  # untouched gang still judged
    json.dumps(d.to_json(), allow_nan=False)


def test_shared_node_uses_the_jobs_own_pressure():
    from dataclasses import replace

    c = Cluster()
    i = 0  # two single-GPU jobs share gpu000; the node's PSI is high for the whole window
    c.util[i, 0, :] = 0.1
    c.sm[i, 0, :] = 0.06  # job 1: stalled on I/O since before the window (no healthy baseline)
    c.util[i, 1, :] = 0.12
    c.sm[i, 1, :] = 0.05  # job 2: an interactive session, low activity, not waiting on I/O
    c.psi[i, :] = 0.9
    c.fs_write[i, :] = 0
    jobs = [job(1, ("gpu000",), gpus=(0,)), job(2, ("gpu000",), gpus=(1,))]
    blind = diagnose(c.window(), jobs)
    # without the jobs' own pressure the node's PSI cannot be attributed: neither is called stalled
    assert {v.state for v in blind.verdicts} <= {"progressing", "insufficient_data"}
    w = c.window()
    w = replace(w, job={"psi_io": {"1": np.full(T, 0.9), "2": np.full(T, 0.01)}})
    d = diagnose(w, jobs)
    assert verdict(d, 1).state == "stalled_io"
    assert verdict(d, 2).state == "progressing"


@pytest.mark.parametrize("steps, state", [(3, "progressing"), (12, "insufficient_data"), (24, "idle_gpus")])
def test_a_pause_like_a_checkpoint_without_write_rates_is_not_called_progressing(steps, state):
    """A site without the filesystem's exporter cannot tell a checkpoint (GPUs paused, memory kept,
    fabric quiet) from a stall for 5 minutes. Past the minute any stall takes, the gang is not known
    to progress either: not judged, with why (catalogue seeds 1400-1407 without the filesystem's
    series: stalls and hangs 3 minutes old read "progressing, activity at 0% of baseline")."""
    from dataclasses import replace

    c = Cluster()
    for i in c.rows(GANG_A):
        c.util[i, :, -steps:] = 0.0
        c.sm[i, :, -steps:] = 0.0
        c.ib_tx[i, :, -steps:] = 0
    w = c.window()
    w = replace(w, node={k: v for k, v in w.node.items() if k != "fs_write"})
    d = diagnose(w, [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 1)
    assert v.state == state, v.reason
    if state == "insufficient_data":
        assert "no filesystem write rates" in v.reason and "300 s" in v.reason
    assert verdict(d, 2).state == "progressing"


@pytest.mark.parametrize("resumed", [True, False])
def test_a_checkpoint_whose_gpus_read_idle_a_scrape_after_its_writes_ended_is_not_hung(resumed):
    """Catalogue seed 1704 without PSI: a gang paused 75 s for a checkpoint (GPUs idle, memory held,
    the nodes writing 1 GB/s); in the last scrape its writes ended and its traffic and reads came
    back, while its GPUs still read idle: the GPU exporter is scraped apart from the node's and its
    sample lags a scrape. The pause was read as outlasting its writes, so no checkpoint: hung. A
    gang whose traffic and reads are back resumed; one whose GPUs stay idle over a quiet wire with
    nothing read after the writes ended is hung."""
    from dataclasses import replace

    c = Cluster()
    r = c.rows(GANG_A)
    c.util[r, :, -6:] = 0.0
    c.sm[r, :, -6:] = 0.0
    c.power = 90 + 500 * c.sm
    c.ib_tx[r, :, -6:] = 4e7
    c.fs_read[r, -6:] = 0.0
    c.fs_write[r, -6:-1] = 1e9
    if resumed:
        c.ib_tx[r, :, -1] = 2e10
        c.fs_read[r, -1] = 4e8
    w = c.window()
    w = replace(w, gpu={k: v for k, v in w.gpu.items() if k != "sm"} | {"mem": np.full((c.n, G, T), 3e10, np.float32)})
    v = verdict(diagnose(w, [job(1, GANG_A), job(2, GANG_B)]), 1)
    assert v.state == ("progressing" if resumed else "hung"), v


@pytest.mark.parametrize("worked", [True, False])
def test_a_hiccup_a_step_before_a_checkpoint_does_not_start_the_pause_before_its_writes(worked):
    """Catalogue seed 2104: a gang's one-scrape hiccup (a slow batch: half its SM activity and
    traffic), a scrape at pace, then a checkpoint (GPUs idle, the nodes writing). A stall's run
    bridges one step, so the hiccup joined the checkpoint and the pause seemed to begin before its
    writes: hung after 75 s. The step at pace says the pause began after it; a pause whose first
    two steps came before any write is still no checkpoint."""
    c = Cluster()
    r = c.rows(GANG_A)
    c.sm[r, :, -5] *= 0.3
    c.util[r, :, -5] *= 0.65
    c.ib_tx[r, :, -5] *= 0.4
    if not worked:
        c.sm[r, :, -4] *= 0.3
        c.util[r, :, -4] *= 0.65
        c.ib_tx[r, :, -4] *= 0.4
    c.util[r, :, -3:] = 0.0
    c.sm[r, :, -3:] = 0.0
    c.ib_tx[r, :, -3:] *= 0.02
    c.fs_read[r, -3:] = 0.0
    c.fs_write[r, -3:] = 7e8
    v = verdict(diagnose(c.window(), [job(1, GANG_A), job(2, GANG_B)]), 1)
    assert (v.state == "progressing") == worked, v


@pytest.mark.parametrize("usual", [True, False, "beyond"])
def test_without_write_rates_a_gang_whose_ports_always_back_up_waits_out_a_pause_like_a_checkpoint(usual):
    """Catalogue seed 1503 with neither PSI nor the filesystem's series: a 16-node gang whose ports
    wait 12x the cluster's typical node at its pace as a rule paused 60 s for a checkpoint, its
    writers blocked. Without write rates a pause like a checkpoint waits 5 minutes, but a fabric
    that backs up is no checkpoint and is judged after a minute: so its usual wait made the pause
    `stalled_io`. Ports that back up as they always do say nothing new; ports that began to back
    up with the pause still do, and so do ports that back up 10x beyond their usual wait (RoCE
    seed 1600: a host-waiting stall at 60x, missed for 5 minutes)."""
    from dataclasses import replace

    c = Cluster()
    r = c.rows(GANG_A)
    c.util[r, :, -6:] = 0.0
    c.sm[r, :, -6:] = 0.0
    c.ib_tx[r, :, -6:] *= 0.02
    if usual:
        c.ib_wait[r] = 1.2e6
    else:
        c.ib_wait[r, :, -6:] = 1.2e6
    if usual == "beyond":
        c.ib_wait[r, :, -6:] = 7.2e7
    w = c.window()
    node = {k: v for k, v in w.node.items() if k not in ("fs_write", "fs_read", "psi_io")}
    node["blocked"] = np.full((c.n, T), 0.2, np.float32)
    node["blocked"][r, -6:] = 4.0
    v = verdict(diagnose(replace(w, node=node), [job(1, GANG_A), job(2, GANG_B)]), 1)
    if usual is True:
        assert v.state == "insufficient_data" and "300 s" in v.reason, v
    else:
        assert v.state not in ("progressing", "insufficient_data"), v


@pytest.mark.parametrize("others, idle_steps, scrape", [("paused_after", 4, 15.0), ("resumed_before", 4, 15.0),
                                                     ("work", 4, 15.0), ("work", 4, 60.0), ("work", 8, 60.0)])
def test_a_gang_whose_nodes_paused_a_scrape_apart_has_no_gpus_idle_while_the_others_work(others, idle_steps, scrape):
    """Sites without the filesystem's series, a gang's checkpoint pausing one node's GPUs a scrape
    apart from the other's. RoCE seed 1404: the first paused a scrape before; a minute in, its GPUs
    were "8 of 16 allocated GPUs idle while the others work", as the others had worked a minute
    before (the others idle now: the whole gang paused). Seed 1605: the first resumed a scrape
    after; in the last scrape "4 of 8 allocated GPUs idle while the others work", though the others
    had worked one scrape of that minute (each idle GPU must be idle while the others worked for a
    minute). Either way the gang is judged as one. Half a gang idle while the other half works is
    still idle GPUs. Seeds 2302 and 2304 scraped every minute: the nodes of a gang are scraped at
    their own offsets in the minute, and a checkpoint of 45-104 s showed in one sample of some
    nodes only, held over the grid's minute: one sample is no minute of idleness, two are."""
    from dataclasses import replace

    c = Cluster()
    first, rest = c.rows(GANG_A)[:1], c.rows(GANG_A)[1:]
    c.util[first, :, -idle_steps:] = 0.0
    c.sm[first, :, -idle_steps:] = 0.0
    paused = {"paused_after": slice(-3, None), "resumed_before": slice(-5, -1), "work": slice(0, 0)}[others]
    c.util[rest, :, paused] = 0.0
    c.sm[rest, :, paused] = 0.0
    w = c.window()
    w = replace(w, node={k: v for k, v in w.node.items() if k != "fs_write"}, scrape_seconds=scrape)
    v = verdict(diagnose(w, [job(1, GANG_A), job(2, GANG_B)]), 1)
    if others == "work" and idle_steps * STEP > scrape:
        assert (v.state, v.culprit) == ("idle_gpus", "gpu000:gpu0,1,2,3"), v
    else:
        assert v.state != "idle_gpus", v


def test_without_profiling_metrics_power_tells_hang_and_network_wait():
    from dataclasses import replace

    c = Cluster()
    for i in c.rows(GANG_A):  # hung: kernels resident, power near idle, network flat
        c.util[i, :, -10:] = 1.0
        c.sm[i, :, -10:] = 0.01
        c.ib_tx[i, :, -10:] = 0
    for i in c.rows(GANG_B):  # waiting on a congested fabric
        c.util[i, :, -10:] = 0.96
        c.sm[i, :, -10:] = 0.15
        c.ib_tx[i, :, -10:] = 3e9
        c.ib_wait[i, :, -10:] = 3e7
    c.power = 90 + 500 * c.sm
    w = c.window()
    w = replace(w, gpu={k: v for k, v in w.gpu.items() if k != "sm"})  # no DCGM profiling
    d = diagnose(w, [job(1, GANG_A), job(2, GANG_B)])
    assert verdict(d, 1).state == "hung"
    assert any(e.signal == "power" for e in verdict(d, 1).evidence)
    assert verdict(d, 2).state == "stalled_network"
    healthy = diagnose(replace(Cluster().window(), gpu={k: v for k, v in Cluster().window().gpu.items() if k != "sm"}),
                       [job(1, GANG_A), job(2, GANG_B)])
    assert {v.state for v in healthy.verdicts} == {"progressing"}


def test_without_profiling_a_gang_spinning_whose_traffic_collapsed_into_backed_up_ports_waits_on_the_network():
    """Catalogue seed 1509 (`net_nccl_spin`, no DCGM profiling): the gang's utilisation went to 0.99
    while its traffic fell to 15 % of its baseline and its ports waited 2,500x more; its power fell
    to 62 %, above the 60 % that alone says kernels spin. Kernels resident, traffic collapsed and
    the gang's own ports backed up make the network stall whatever the power says."""
    from dataclasses import replace

    c = Cluster()
    r = c.rows(GANG_B)
    c.power = np.full_like(c.util, 250.0)
    c.util[r, :, -12:] = 0.99
    c.power[r, :, -12:] = 155.0
    c.ib_tx[r, :, -12:] = 3e9
    c.ib_wait[r, :, -12:] = 2.5e8
    w = c.window()
    w = replace(w, gpu={k: v for k, v in w.gpu.items() if k != "sm"} | {"power": c.power.astype(np.float32)})
    d = diagnose(w, [job(1, GANG_A), job(2, GANG_B)])
    assert verdict(d, 2).state == "stalled_network", verdict(d, 2).reason
    assert verdict(d, 1).state == "progressing"


def test_a_link_trained_slower_than_the_gangs_other_ports_is_a_straggler():
    c = Cluster()
    w = c.window()
    rate = np.full((c.n, G, T), 50e9, np.float32)  # NDR 400 Gb/s
    rate[c.rows(GANG_A)[2], 1, -30:] = 12.5e9  # one port fell back to 100 Gb/s (1x width) 7.5 min ago
    w.rail["ib_rate"] = rate
    d = diagnose(w, [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 1)
    assert (v.state, v.culprit, v.culprit_kind) == ("straggler", "gpu002:mlx5_1/1", "port"), v.reason
    assert v.since == pytest.approx(TIMES[-30])
    assert verdict(d, 2).state == "progressing"
    # a whole gang at the lower rate is how its fabric was built: nothing to name
    rate[:, :, :] = 12.5e9
    assert verdict(diagnose(w, [job(1, GANG_A)]), 1).state == "progressing"


def with_storage_nics(w: Window, layers: bool, first_on_odd_nodes: bool = False) -> Window:
    """Every node also has two 200 Gb/s RoCE storage ports carrying traffic, as a DGX's Ethernet
    NICs do beside its 400 Gb/s InfiniBand rails; their link layers said by the agents or not; listed
    after the rails, or first on every other node (so in other columns there)."""
    from dataclasses import replace

    N = len(w.nodes)
    rail = {k: np.concatenate([a, np.full((N, 2, T), np.nan, a.dtype)], axis=1) for k, a in w.rail.items()}
    rail["ib_rate"][:, G:, :] = 25e9
    rail["ib_tx"][:, G:, :] = 3e9
    rail["ib_wait"][:, G:, :] = 0.0
    rails = tuple(r + (f"mlx5_{G}/1", f"mlx5_{G + 1}/1") for r in w.rails)
    if first_on_odd_nodes:
        order = [G, G + 1, *range(G)]
        for k in rail:
            rail[k][1::2] = rail[k][1::2][:, order]
        rails = tuple(tuple(r[c] for c in order) if i % 2 else r for i, r in enumerate(rails))
    link = {n: {p: "Ethernet" if p in r[G:] else "InfiniBand" for p in r} for n, r in zip(w.nodes, rails)}
    return replace(w, rail=rail, rails=rails, link_layers=link if layers else {})


@pytest.mark.parametrize("layers,first", [(True, False), (False, False), (True, True)])
def test_a_slow_link_is_found_beside_storage_nics_of_another_speed(layers, first):
    """A node's ports need not be alike: each port is judged against the same port of the gang's
    other nodes, so the 200 Gb/s storage NICs on every node neither hide the degraded rail (they made
    it 'most of the gang alike') nor are named; where the agents say the link layers, a degraded
    storage port (Ethernet beside InfiniBand rails) is not the collectives' straggler (where they do
    not, node_exporter, nothing tells it from a rail, and it is named)."""
    c = Cluster()
    w = c.window()
    rate = np.full((c.n, G, T), 50e9, np.float32)
    w.rail["ib_rate"] = rate
    rate[c.rows(GANG_A)[2], 1, -30:] = 12.5e9
    d = diagnose(with_storage_nics(w, layers, first), [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 1)
    assert (v.state, v.culprit, v.culprit_kind) == ("straggler", "gpu002:mlx5_1/1", "port"), v.reason
    assert "trained at 100 Gb/s; the gang's other ports 400 Gb/s" in v.evidence[0].note
    assert verdict(d, 2).state == "progressing"
    rate[:, :, :] = 50e9
    dgx = with_storage_nics(w, layers, first)
    row = c.rows(GANG_A)[2]
    dgx.rail["ib_rate"][row, dgx.rails[row].index(f"mlx5_{G}/1"), -30:] = 12.5e9  # a storage port fell back to 100 Gb/s
    v = verdict(diagnose(dgx, [job(1, GANG_A)]), 1)
    assert (v.state, v.culprit) == (("progressing", "") if layers else ("straggler", f"gpu002:mlx5_{G}/1"))


def paint(c: Cluster, nodes, last: int, **levels) -> None:
    """Set per-GPU or per-port series (util, sm, ib_tx, ib_wait) of `nodes` over the `last` steps."""
    for k in c.rows(nodes):
        for name, value in levels.items():
            getattr(c, name)[k, :, -last:] = value


@pytest.mark.parametrize("profiling", [True, False])
def test_a_gang_whose_ranks_on_one_node_died_is_hung_not_idle(profiling):
    """One node's ranks exit (OOM, segfault) and free their GPUs; the survivors spin forever in the
    collective waiting for them (util pinned, SMs and power near idle, nothing on the wire). The
    freed GPUs are not 'idle while the others work': nobody works."""
    from dataclasses import replace

    c = Cluster()
    dead = c.nodes.index("gpu004")
    paint(c, GANG_B, 12, util=1.0, sm=0.01, ib_tx=0, ib_wait=2e3)
    c.util[dead, :, -12:] = 0.0
    c.sm[dead, :, -12:] = 0.0
    c.power = 90 + 500 * c.sm
    c.power[dead, :, -12:] = 55.0
    mem = np.full((c.n, G, T), 60 * 2.0**30)
    mem[dead, :, -12:] = 400 * 2.0**20  # the driver's idle framebuffer: nothing of the job's left
    w = c.window()
    gpu = {**w.gpu, "mem": mem.astype(np.float32)}
    if not profiling:
        gpu.pop("sm")
    d = diagnose(replace(w, gpu=gpu), [job(1, GANG_A), job(2, GANG_B)])
    v = verdict(d, 2)
    assert v.state == "hung" and v.culprit_kind == "job", (v.state, v.reason)
    assert "4 of 16 GPUs idle" in v.reason
    assert verdict(d, 1).state == "progressing"
    # half a gang left idle while the other half trains is still idle GPUs
    c2 = Cluster()
    c2.util[dead, :, -30:] = 0.0
    c2.sm[dead, :, -30:] = 0.0
    assert verdict(diagnose(c2.window(), [job(2, GANG_B)]), 2).state == "idle_gpus"


def test_a_link_that_drops_under_the_gang_and_keeps_erring_is_a_network_stall_at_any_pace():
    """A flapping link: each drop takes the gang's traffic down with it, symbol errors continue
    between the drops, and the gang runs at 80-90 % of its pace in between (retransmissions): a
    network stall, the port the culprit. Errors alone (a marginal cable) or a drop on a port the
    gang's traffic does not notice are not."""
    from dataclasses import replace

    def flapping(errors=True, dip=True):
        c = Cluster()
        i = c.nodes.index("gpu002")
        for k in c.rows(GANG_A):
            c.ib_tx[k, :, -16:] *= 0.85
        for s in (-16, -6):
            c.ib_down[i, 1, s] = 1
            if dip:
                for k in c.rows(GANG_A):
                    c.ib_tx[k, :, s] = 1e8
                    c.ib_wait[k, :, s] = 3e7
        err = np.zeros_like(c.ib_down)
        if errors:
            err[i, 1, -16:] = np.random.default_rng(3).poisson(20, 16)
        w = c.window()
        return diagnose(replace(w, rail={**w.rail, "ib_err": err.astype(np.float32)}), [job(1, GANG_A), job(2, GANG_B)])

    d = flapping()
    v = verdict(d, 1)
    assert v.state == "stalled_network", (v.state, v.reason)
    assert (v.culprit, v.culprit_kind) == ("gpu002:mlx5_1/1", "port")
    assert verdict(d, 2).state == "progressing"
    assert verdict(flapping(dip=False), 1).state == "progressing"  # the drop took none of the gang's traffic
    c = Cluster()  # a marginal cable errs at a low rate, the link never drops
    err = np.zeros_like(c.ib_down)
    err[2, 1, :] = 3
    w = c.window()
    assert verdict(diagnose(replace(w, rail={**w.rail, "ib_err": err.astype(np.float32)}), [job(1, GANG_A)]),
                   1).state == "progressing"


@pytest.mark.parametrize("depth", [0.55, 0.85])
def test_a_drop_diluted_in_a_minutes_rate_is_felt_where_the_gangs_traffic_fell_below_its_link_cut(depth):
    """Catalogue RoCE seed 1504 scraped every minute: each drop of seconds stalled the gang, but
    in a minute's rate its traffic fell only to 53 % of its baseline (neither collapsed nor backed
    up), and between the drops it ran at 76 %, just over the 75 % cut: progressing. A drop in
    whose scrape the gang's traffic fell below that cut took it with it; one at 85 % did not."""
    from dataclasses import replace

    c = Cluster()
    i = c.nodes.index("gpu002")
    r = c.rows(GANG_A)
    c.ib_tx[r, :, -24:] *= 0.78
    for s in range(-24, 0, 4):
        c.ib_down[i, 1, s] = 1
        c.ib_tx[r, :, s] *= depth / 0.78
    err = np.zeros_like(c.ib_down)
    err[i, 1, -24:] = np.random.default_rng(3).poisson(12, 24)
    w = c.window()
    v = verdict(diagnose(replace(w, rail={**w.rail, "ib_err": err.astype(np.float32)}),
                         [job(1, GANG_A), job(2, GANG_B)]), 1)
    if depth < 0.75:
        assert (v.state, v.culprit) == ("stalled_network", "gpu002:mlx5_1/1"), v
    else:
        assert v.state == "progressing", v


def judged_flapping(err_steps, crawl: bool = True, scrape_seconds: float | None = None):
    """Job 1 (GANG_A) under a link of gpu002 that dropped at step 40 and at T - 2 (the gang's
    traffic gone in each drop's step) and erred (`ib_err`) at `err_steps`; between the drops the
    gang crawls at 80 % of its traffic, or (`crawl` False) ran at pace."""
    from dataclasses import replace

    c = Cluster()
    i = c.nodes.index("gpu002")
    if crawl:
        for k in c.rows(GANG_A):
            c.ib_tx[k, :, 40:] *= 0.8
    for s in (40, T - 2):
        c.ib_down[i, 1, s] = 1
        for k in c.rows(GANG_A):
            c.ib_tx[k, :, s] = 1e8
    err = np.zeros_like(c.ib_down)
    err[i, 1, err_steps] = np.random.default_rng(3).poisson(12, len(err_steps)) + 1
    w = c.window() if scrape_seconds is None else replace(c.window(), scrape_seconds=scrape_seconds)
    return verdict(diagnose(replace(w, rail={**w.rail, "ib_err": err.astype(np.float32)}),
                            [job(1, GANG_A), job(2, GANG_B)]), 1)


@pytest.mark.parametrize("recovered", [False, True])
def test_a_gang_that_crawls_between_drops_minutes_apart_is_one_network_stall(recovered):
    """Catalogue seed 2105: a link dropped under the gang, dropped again 9.5 minutes later and
    erred all along, while the gang's traffic stayed at 80 % of its pace between the drops
    (retransmissions). Past the 5 minutes a drop keeps a gang suspect, the crawl was taken for
    health, and the new drop had to wait a minute: progressing. A gang that crawls until the next
    drop is one stall since the first; one whose traffic came back has no stall until the new
    drop lasts."""
    v = judged_flapping(list(range(40, T)), crawl=not recovered)
    if recovered:
        assert v.state == "progressing", v
    else:
        assert v.state == "stalled_network" and v.since == TIMES[40], v
        assert (v.culprit, v.culprit_kind) == ("gpu002:mlx5_1/1", "port")


@pytest.mark.parametrize("late", [0, 1, 4])
def test_a_link_that_errs_every_scrape_a_minute_still_errs_across_a_late_or_lost_scrape(late):
    """Catalogue seed 2105 scraped every minute (node_exporter's names): the flapping port's errors
    land once every four 15 s steps, and one scrape landing a step late left a 75 s gap between two.
    The links "still err" within a minute, so the crawl between drops was taken for health from
    the late scrape on: progressing. At a scrape a minute, an event in either of the last two
    scrapes says the links still err: a scrape late (`late` 1) or lost (4) ends no stall."""
    v = judged_flapping([s if s < 60 else s + late for s in range(40, T - late, 4)], scrape_seconds=60.0)
    assert v.state == "stalled_network" and v.since == TIMES[40], v
    assert (v.culprit, v.culprit_kind) == ("gpu002:mlx5_1/1", "port")


def test_a_narrow_link_that_slowed_the_gang_far_is_a_straggler_long_after_its_retrain():
    """The link retrained at 1x width 8 minutes ago (its link-down long out of the 5-minute link
    window); the gang spins at a quarter of its pace with no congestion and no collapse: no stall
    cause holds, the narrow port explains it."""
    c = Cluster()
    paint(c, GANG_A, 32, util=0.97, sm=0.2, ib_tx=0.35 * 2e10)
    c.ib_down[2, 1, -32] = 1
    w = c.window()
    rate = np.full((c.n, G, T), 50e9, np.float32)
    rate[2, 1, -32:] = 12.5e9
    w.rail["ib_rate"] = rate
    v = verdict(diagnose(w, [job(1, GANG_A)]), 1)
    assert (v.state, v.culprit) == ("straggler", "gpu002:mlx5_1/1"), (v.state, v.reason)


def test_shared_node_deadlock_and_weaker_input_waits():
    """A job deadlocked on a node it shares keeps its memory while the neighbour keeps reading: the
    node's reads are not the job's, so it is hung. A job whose readers wait 20 % of the time (above
    any healthy node, below the 30 % stall cut) while its reads fell to a third of its own past and
    its held GPUs starve waits for its input: stalled_io; the same pressure with the reads at their
    usual pace decides nothing."""
    from dataclasses import replace

    c = Cluster()
    i = c.nodes.index("gpu004")
    c.util[i, :2, -12:] = 0.0
    c.sm[i, :2, -12:] = 0.0
    c.power = 90 + 500 * c.sm
    w = c.window()
    w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
    d = diagnose(w, [job(1, ("gpu004",), gpus=(0, 1)), job(2, ("gpu004",), gpus=(2, 3))])
    assert verdict(d, 1).state == "hung", verdict(d, 1).reason
    assert verdict(d, 2).state == "progressing"

    def loader(read_frac):
        c = Cluster()
        k = c.nodes.index("gpu005")
        c.util[k, :, -12:] = 0.15
        c.sm[k, :, -12:] = 0.08
        c.psi[k, -12:] = 0.2
        c.fs_read[k, -12:] = 4e8 * read_frac
        w = c.window()
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1).state

    assert loader(0.3) == "stalled_io"
    assert loader(1.0) != "stalled_io"


def test_lost_scrapes_are_no_work_beside_idle_gpus():
    """A whole gang deadlocks (every GPU idle, memory held, no traffic); one node's last scrapes are
    lost. Its GPUs are unknown, not working: the job is hung, not "24 of 32 GPUs idle while the
    others work". Half a gang idle while the other half trains, with a scrape of the trainers lost,
    is still idle GPUs."""
    from dataclasses import replace

    def gang(trainers_work: bool):
        c = Cluster()
        lost = c.nodes.index("gpu007")
        for k in c.rows(GANG_B):
            if trainers_work and k == lost:
                continue
            c.util[k, :, -16:] = 0.0
            c.sm[k, :, -16:] = 0.0
            c.ib_tx[k, :, -16:] = 0.0
            c.fs_read[k, -16:] = 0.0
        c.util[lost, :, -4:-1] = np.nan
        c.sm[lost, :, -4:-1] = np.nan
        c.power = 90 + 500 * c.sm
        w = c.window()
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
        return verdict(diagnose(w, [job(1, GANG_A), job(2, GANG_B)]), 2)

    v = gang(trainers_work=False)
    assert v.state == "hung" and "while the others work" not in v.reason, (v.state, v.reason)
    v = gang(trainers_work=True)
    assert v.state == "idle_gpus" and "12 of 16" in v.reason, (v.state, v.reason)


def test_readers_waiting_make_a_moderate_slowdown_an_input_stall():
    """Readers waiting 40 % of the time (PSI io), the job at half its pace: the storage holds it back
    (loader-bound jobs run at 10-50 % of their pace), though a dip to half with no one waiting
    (evaluation) is nothing, and at 60 % of its pace it is not judged on pressure alone."""
    def loader(pace, psi):
        c = Cluster()
        k = c.nodes.index("gpu005")
        c.util[k, :, -12:] *= pace
        c.sm[k, :, -12:] *= pace
        c.psi[k, -12:] = psi
        c.fs_read[k, -12:] = 4e8 * pace
        from dataclasses import replace
        w = c.window()
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1).state

    assert loader(0.5, 0.4) == "stalled_io"
    assert loader(0.5, 0.02) == "progressing"
    assert loader(0.6, 0.4) == "progressing"


def test_a_lost_scrape_inside_a_stall_does_not_end_it():
    """A job starved for 3 minutes whose node lost one 30 s scrape a minute ago (two steps without
    any data): still a stall, dated from its onset, not "progressing" at 15 % of its pace. The
    same gap in a healthy job says nothing."""
    def job_with_gap(stalled: bool):
        c = Cluster()
        k = c.nodes.index("gpu005")
        if stalled:
            c.util[k, :, -12:] = 0.15
            c.sm[k, :, -12:] = 0.08
            c.psi[k, -12:] = 0.5
            c.fs_read[k, -12:] = 1e8
        for a in (c.util, c.sm):
            a[k, :, -5:-3] = np.nan
        c.psi[k, -5:-3] = np.nan
        c.fs_read[k, -5:-3] = np.nan
        from dataclasses import replace
        w = c.window()
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1)

    v = job_with_gap(stalled=True)
    assert v.state == "stalled_io", (v.state, v.reason)
    assert v.since == pytest.approx(float(TIMES[-12]), abs=2 * STEP)
    assert job_with_gap(stalled=False).state == "progressing"


def test_without_psi_the_tasks_in_io_wait_say_readers_wait():
    """A site whose kernels leave PSI off (RHEL 8/9 without psi=1): a loader-bound job at 30 % of
    its pace with 12 tasks in I/O wait on its node (1 while it ran at pace, 0-1 on the others) and
    reads at a third is an input stall; the same slowdown with no one waiting is no I/O stall. The
    unexplained case lists the reads and the waiting tasks as present."""
    def loader(blocked_now, stalled=True):
        c = Cluster()
        k = c.nodes.index("gpu005")
        blocked = np.where(np.arange(c.n)[:, None] % 2 == 0, 0.0, 1.0) * np.ones((c.n, T))
        blocked[k] = 1.0
        if stalled:
            c.util[k, :, -12:] *= 0.3
            c.sm[k, :, -12:] *= 0.3
            c.fs_read[k, -12:] = 4e8 / 3
            blocked[k, -12:] = blocked_now
        from dataclasses import replace
        w = c.window()
        node = {kk: v for kk, v in w.node.items() if kk != "psi_io"}
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)},
                    node={**node, "blocked": blocked.astype(np.float32)}, target={})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1)

    v = loader(12.0)
    assert v.state == "stalled_io", (v.state, v.reason)
    assert any(e.signal == "procs_blocked" for e in v.evidence)
    quiet = loader(1.0)
    assert quiet.state != "stalled_io", quiet.reason
    assert quiet.state == "insufficient_data"
    assert "tasks in I/O wait" in quiet.reason.split("missing:")[0]
    assert "filesystem reads at 33%" in quiet.reason
    assert loader(12.0, stalled=False).state == "progressing"


def test_pressure_below_the_stall_level_with_readers_piling_up_is_an_input_stall():
    """Two witnesses each short of a stall on its own agree: a loader-bound job at 15 % of its pace
    whose node has I/O pressure at 26 % (a stall from 30 %) and 15 tasks in I/O wait (1 while it
    ran at pace, 0-1 on the other nodes), its reads near their past (a neighbour on the node reads
    too), is waiting for input (catalogue seed 1202). Either witness alone is not enough."""
    from dataclasses import replace

    def loader(psi, blocked_now):
        c = Cluster()
        k = c.nodes.index("gpu005")
        blocked = np.where(np.arange(c.n)[:, None] % 2 == 0, 0.0, 1.0) * np.ones((c.n, T))
        blocked[k] = 1.0
        c.util[k, :, -12:] *= 0.15
        c.sm[k, :, -12:] *= 0.15
        c.psi[k, -12:] = psi
        c.fs_read[k, -12:] = 4e8 * 0.86
        blocked[k, -12:] = blocked_now
        w = c.window()
        w = replace(w, gpu={**w.gpu, "mem": np.full((c.n, G, T), 40 * 2.0**30, np.float32)},
                    node={**w.node, "blocked": blocked.astype(np.float32)})
        return verdict(diagnose(w, [job(1, ("gpu005",))]), 1)

    v = loader(0.26, 15.0)
    assert v.state == "stalled_io", (v.state, v.reason)
    assert any(e.signal == "procs_blocked" for e in v.evidence)
    assert loader(0.26, 1.0).state == "insufficient_data"
    assert loader(0.05, 15.0).state == "insufficient_data"


@pytest.mark.parametrize("dead_node", [False, True])
def test_spinning_with_nothing_on_the_wire_is_hung_at_any_spinning_power(dead_node):
    """Without SM activity, board power says kernels spin, not whether the collective waits on the
    fabric or on ranks that will never come: a spinning A100 draws 100-130 W, half of a light
    training load's 250 W. The wire tells them apart: a gang whose traffic stopped while its ports
    neither back up nor drop waits on no network (a rank died or a collective never completes).
    The same spin over ports that back up, or over traffic that only slowed, is the network's."""
    from dataclasses import replace

    def judged(tx, wait, storm=False):
        c = Cluster()
        base = float(np.quantile(c.power[c.rows(GANG_B)], 0.97))
        paint(c, GANG_B, 12, util=1.0, power=0.5 * base, ib_tx=tx, ib_wait=wait)
        if dead_node:
            dead = c.nodes.index("gpu004")
            c.util[dead, :, -12:] = 0.0
            c.power[dead, :, -12:] = 55.0
        w = c.window()
        gpu = {k: v for k, v in w.gpu.items() if k != "sm"}  # no DCGM profiling
        node, rail = dict(w.node), dict(w.rail)
        if storm:  # RoCE: a NIC of the gang's in a PFC storm, its ECN marks and CNPs below 10x
            node["eth_storm"] = np.zeros((c.n, T), np.float32)
            node["eth_storm"][c.nodes.index("gpu005"), -12::2] = 5
            rail["roce_cong"] = np.full((c.n, G, T), 100.0, np.float32)
            rail["roce_cong"][c.rows(GANG_B), :, -12:] = 600.0
            del rail["ib_wait"]
        d = diagnose(replace(w, gpu=gpu, node=node, rail=rail), [job(1, GANG_A), job(2, GANG_B)])
        assert verdict(d, 1).state == "progressing"
        return verdict(d, 2)

    v = judged(tx=1e4, wait=1e5)
    assert (v.state, v.culprit_kind) == ("hung", "job"), (v.state, v.reason)
    assert judged(tx=1e4, wait=3e7).state == "stalled_network"  # its ports back up
    assert judged(tx=3e9, wait=1e5).state == "stalled_network"  # traffic slowed to 15 %, not stopped
    assert judged(tx=1e4, wait=1e5, storm=True).state == "stalled_network"  # RoCE seed 903


def test_the_hot_port_is_named_where_too_few_nodes_are_busy_to_compare():
    """A small cluster with only the gang's two nodes carrying traffic (catalogue seeds 1105 and
    1106): too few busy nodes for a cluster reference, but the port where the gang's collectives
    back up waits several times the gang's other ports all the same, and is named."""
    c = Cluster()
    gang = ("gpu000", "gpu001")
    rest = [n for n in c.nodes if n not in gang]
    paint(c, rest, T, util=0.0, sm=0.0, ib_tx=0.0, ib_wait=0.0)
    paint(c, gang, 12, util=0.99, sm=0.05, ib_tx=1e9, ib_wait=6e7)
    c.power = 90 + 500 * c.sm
    c.ib_wait[c.nodes.index("gpu001"), 3, -12:] = 2e8
    v = verdict(diagnose(c.window(), [job(1, gang)]), 1)
    assert v.state == "stalled_network", v
    assert (v.culprit, v.culprit_kind) == ("gpu001:mlx5_3/1", "port"), v


@pytest.mark.parametrize("bursts", [False, True])
@pytest.mark.parametrize("profiling", [False, True])
def test_a_gang_that_started_inside_a_pfc_storm_is_its_victim(profiling, bursts):
    """RoCE seed 900: a gang started 2 minutes into a PFC storm on its leaf; its GPUs have spun
    since, so its own baselines are the storm's, and its ports have been held back 100x the
    cluster's typical node throughout. A storm on its leaf and its own ports held back make it the
    storm's victim (the storming node named), whatever its baselines say. Without SM activity the
    same gang without the storm keeps its baselines; with it, SMs idle for their utilisation say it
    waits, and SMs at their pace say it works, storm or not. A storm that comes in bursts (RoCE seed
    1203: the victim's ports calm for one 30 s scrape every two or three minutes) holds it back
    all the same: a calm under a minute between its bursts does not end the stall."""
    from dataclasses import replace

    def judged(storm=True, working=False):
        c = Cluster(n=12)
        c.leaf_of["gpu008"] = "leaf1"  # a node beside the gang on its leaf, the storming one
        start = T - 30  # 7.5 minutes ago, past the 5-minute grace
        r = c.rows(GANG_B)
        c.util[r, :, start:] = 0.98
        c.sm[r, :, start:] = 0.7 if working else 0.02
        c.power = 90 + 500 * c.sm
        c.ib_tx[r, :, start:] = 4e8
        w = c.window()
        gpu = dict(w.gpu) if profiling else {k: v for k, v in w.gpu.items() if k != "sm"}
        rail = {k: v for k, v in w.rail.items() if k != "ib_wait"}
        rail["roce_cong"] = np.full((c.n, G, T), 100.0, np.float32)
        rail["roce_cong"][r, :, start:] = 1e4
        if bursts:
            for calm in range(T - 3, start, -10):  # the latest a step before the window's end
                rail["roce_cong"][r, :, calm:calm + 2] = 100.0
        node = dict(w.node)
        node["eth_storm"] = np.zeros((c.n, T), np.float32)
        if storm:
            node["eth_storm"][c.nodes.index("gpu008"), start - 8::2] = 3
        jobs = [job(1, GANG_A), job(2, GANG_B, start=TIMES[start])]
        return verdict(diagnose(replace(w, gpu=gpu, rail=rail, node=node), jobs), 2)

    v = judged()
    assert (v.state, v.culprit, v.culprit_kind) == ("stalled_network", "gpu008", "node"), v
    if profiling:  # SMs idle for their utilisation say it waits, storm or not (the network stall rule,
        # whose calm scrape ends a stall: not judged then, with why)
        assert judged(storm=False).state == ("insufficient_data" if bursts else "stalled_network")
        assert judged(working=True).state == "progressing"
    else:  # power alone cannot say it waits: without the storm, its baselines stand
        assert judged(storm=False).state == "progressing"


@pytest.mark.parametrize("writers", [False, True])
def test_a_storm_victim_whose_writers_block_is_no_input_stall(writers):
    """Catalogue RoCE seed 2900 scraped every 45 s, with neither PSI nor the filesystem's series:
    a gang held back by a PFC storm on its leaf, its GPUs spinning in the collective, began a
    checkpoint whose writers blocked (4 tasks in I/O wait per node). With no write rate to say
    checkpoint, the blocked tasks made the steps readers waiting, and I/O went first: `stalled_io`
    after two minutes of `stalled_network`. GPUs spinning in a collective held back by the storm
    do not starve for data; the storm stays the cause."""
    from dataclasses import replace

    c = Cluster(n=12)
    c.leaf_of["gpu008"] = "leaf1"  # a node beside the gang on its leaf, the storming one
    began = T - 14
    r = c.rows(GANG_B)
    c.util[r, :, began:] = 0.98
    c.sm[r, :, began:] = 0.07
    c.ib_tx[r, :, began:] = 1e9
    w = c.window()
    rail = {k: v for k, v in w.rail.items() if k != "ib_wait"}
    rail["roce_cong"] = np.full((c.n, G, T), 100.0, np.float32)
    rail["roce_cong"][r, :, began:] = 5e4
    node = {k: v for k, v in w.node.items() if k not in ("fs_write", "fs_read", "psi_io")}
    node["eth_storm"] = np.zeros((c.n, T), np.float32)
    node["eth_storm"][c.nodes.index("gpu008"), began - 2::2] = 3
    node["blocked"] = np.zeros((c.n, T), np.float32)
    if writers:
        node["blocked"][r, -5:] = 4.0
    v = verdict(diagnose(replace(w, rail=rail, node=node), [job(1, GANG_A), job(2, GANG_B)]), 2)
    assert (v.state, v.culprit, v.culprit_kind) == ("stalled_network", "gpu008", "node"), v


def judged_in_storm(c: Cluster, began: int, cluster_cong: float, cong: np.ndarray):
    """Job 2 (GANG_B) judged on a RoCE window without SM activity: its ports' congestion `cong` (T,)
    beside the cluster's `cluster_cong`, a PFC storm on gpu008 (its leaf) from step `began`."""
    from dataclasses import replace

    w = c.window()
    gpu = {k: v for k, v in w.gpu.items() if k != "sm"} | {"power": c.power.astype(np.float32)}
    rail = {k: v for k, v in w.rail.items() if k != "ib_wait"}
    rail["roce_cong"] = np.full((c.n, G, T), cluster_cong, np.float32)
    rail["roce_cong"][c.rows(GANG_B)] = cong
    node = dict(w.node)
    node["eth_storm"] = np.zeros((c.n, T), np.float32)
    node["eth_storm"][c.nodes.index("gpu008"), began::2] = 3
    return verdict(diagnose(replace(w, gpu=gpu, rail=rail, node=node), [job(1, GANG_A), job(2, GANG_B)]), 2)


@pytest.mark.parametrize("waits", [True, False])
def test_a_gang_whose_wait_jumped_when_a_storm_began_beside_it_is_its_victim(waits):
    """RoCE seed 1301: a gang that ran at a light pace (utilisation 0.38, its ports waiting next to
    nothing) until a PFC storm began on a node of its leaf, then spun (utilisation 0.99) at 57 % of
    its power with its ports waiting 1,000x more: still under 10x the cluster's typical node, which
    the storm holds back too, and the storm is most of the window, so the gang's baselines are the
    storm's. Its wait against its own before the storm, with its GPUs' power down, makes it the
    storm's victim; the same jump with its power kept (it works) does not."""
    c = Cluster(n=12)
    c.leaf_of["gpu008"] = "leaf1"  # beside the gang on its leaf, the storming one
    began = T - 40  # 10 minutes of storm, the window's larger part
    r = c.rows(GANG_B)
    c.util[r] = 0.38
    c.util[r, :, began:] = 0.99
    c.power = np.full_like(c.util, 400.0)
    c.power[r] = 168.0
    c.power[r, :, began:] = 97.0 if waits else 168.0
    c.ib_tx[r] = 1.1e8
    c.ib_tx[r, :, began:] = 1.5e8
    cong = np.full(T, 60.0)
    cong[began:] = 6e4
    v = judged_in_storm(c, began, 1e5, cong)
    want = ("stalled_network", "gpu008", "node") if waits else ("progressing", "", "")
    assert (v.state, v.culprit, v.culprit_kind) == want, v


@pytest.mark.parametrize("waits", [False, True])
def test_a_gang_whose_ports_back_up_as_a_rule_is_no_storm_victim_while_it_keeps_its_pace(waits):
    """Catalogue RoCE seed 2001: an all-to-all gang on a busy fabric, its ports waiting 100x the
    cluster's typical node as a rule, ran on at its power and traffic while a PFC storm beat on a
    node of its leaf, its ports waiting as they did before the storm: no victim (its congestion is
    its pace, not the storm's). The same gang whose ports wait 10x their own wait before the storm
    while its GPUs' power falls to a spin's is the storm's victim, the storming node named."""
    c = Cluster(n=12)
    c.leaf_of["gpu008"] = "leaf1"  # beside the gang on its leaf, the storming one
    began = T - 16  # a 4-minute storm
    r = c.rows(GANG_B)
    c.util[r] = 0.98
    c.power = np.full_like(c.util, 400.0)
    cong = np.full(T, 5e4) * np.random.default_rng(1).uniform(0.7, 1.3, T)
    if waits:
        c.power[r, :, began:] = 220.0
        cong[began:] *= 12
    v = judged_in_storm(c, began, 500.0, cong)
    want = ("stalled_network", "gpu008", "node") if waits else ("progressing", "", "")
    assert (v.state, v.culprit, v.culprit_kind) == want, v

@pytest.mark.parametrize("held", [True, False])
def test_a_storm_victim_whose_wire_went_quiet_while_its_ports_wait_is_not_hung(held):
    """RoCE seed 1404: a gang ran at pace until a PFC storm began on a node of its leaf; it spun at
    42 % of its power, its traffic fell to a sixth and its ports waited 500x their own wait before
    the storm (under 10x the cluster's typical node, which the storm holds back too). Five minutes
    on its traffic fell to 1.4 % of its baseline, under the cut where the wire reads quiet: a gang
    spinning over a quiet wire reads hung, but one whose ports still wait 500x is held back by the
    storm, not deadlocked. The same gang whose ports stopped waiting when its wire went quiet,
    storm or not, is hung."""
    c = Cluster(n=12)
    c.leaf_of["gpu008"] = "leaf1"  # beside the gang on its leaf, the storming one
    began, quiet = T - 36, T - 16
    r = c.rows(GANG_B)
    c.util[r] = 0.98
    c.power = np.full_like(c.util, 590.0)
    c.power[r, :, began:] = 250.0
    c.ib_tx[r] = 2.1e10
    c.ib_tx[r, :, began:] = 3.7e9
    c.ib_tx[r, :, quiet:] = 3e8
    cong = np.full(T, 1.4e3)
    cong[began:] = 7e5
    if not held:
        cong[quiet:] = 1.4e3
    v = judged_in_storm(c, began, 4e5, cong)  # the storm holds the cluster back too
    want = ("stalled_network", "gpu008", "node") if held else ("hung", "job 2", "job")
    assert (v.state, v.culprit, v.culprit_kind) == want, v


@pytest.mark.parametrize("straggler", [False, True])
def test_a_young_gang_whose_nodes_left_the_warm_up_a_scrape_apart_has_no_straggler(straggler):
    """Catalogue RoCE seed 1800 scraped every minute: a 64-GPU gang 335 s old, its nodes through
    the warm-up a scrape apart. Averaged over the last 2 minutes, the first node to train (SM 0.7)
    worked while the others, half their samples still in the warm-up, seemed to wait: straggler.
    Samples from the job's first 300 s are no pace; a node that works while the others spin at
    the barrier after that is a straggler all the same."""
    c = Cluster()
    r = c.rows(GANG_A)
    start = END - 330.0
    c.util[r, :, :-8] = 0.05  # loading weights and the first batches
    c.sm[r, :, :-8] = 0.01
    if straggler:
        c.util[r[1:], :, -8:] = 0.97
        c.sm[r[1:], :, -8:] = 0.2
    else:
        c.util[r[1:], :, -8:-4] = 0.05
        c.sm[r[1:], :, -8:-4] = 0.01
    v = verdict(diagnose(c.window(), [job(1, GANG_A, start=start), job(2, GANG_B)]), 1)
    assert (v.state == "straggler") == straggler, v
    if straggler:
        assert v.culprit == "gpu000", v


def test_gpus_that_work_through_the_gangs_checkpoint_are_not_a_straggler():
    """Scraped every minute, a checkpoint's pause lands in different samples on different nodes
    (catalogue seed 1100 at 60 s): three GPUs of one node still read busy while their peers read
    the pause, as when one rank writes while the others wait at the barrier. While the gang writes
    at checkpoint speed that is the checkpoint, not a straggler; the same GPUs ahead of their peers
    with nothing written are one."""
    def judged(writes: bool):
        c = Cluster()
        paint(c, GANG_A, 8, util=0.9, sm=0.45)
        k = c.nodes.index("gpu002")
        c.sm[k, :3, -8:] = 0.75
        c.fs_write[:, -8:] = 2e9 if writes else 0.0
        return verdict(diagnose(c.window(), [job(1, GANG_A)]), 1)

    assert judged(writes=False).state == "straggler"
    v = judged(writes=True)
    assert v.state != "straggler", v


@pytest.mark.parametrize("peers", ["paused", "spinning"])
def test_a_node_seen_working_longest_through_a_pause_is_no_straggler(peers):
    """Catalogue RoCE seed 2105 scraped every minute, without the filesystem's series: a gang's
    94 s checkpoint read as idle GPUs (utilisation 0) for two samples on three nodes and one on the
    fourth, each node scraped at its own offset in the minute. Averaged over the last 2 minutes
    the fourth node's GPUs worked while their peers "waited": a straggler, at no write rate to say
    checkpoint. A peer that waits at a straggler's barrier waits within each iteration (kernels
    resident, SMs idle); whole samples with nothing running are a pause, no pace. The same node
    working while its peers spin is a straggler all the same."""
    c = Cluster()
    paint(c, GANG_A, 12, util=0.92, sm=0.66)
    r = c.rows(GANG_A)
    late = c.nodes.index("gpu002")
    if peers == "paused":
        for k in r:
            span = slice(-5, -1) if k == late else slice(-9, -1)
            c.util[k, :, span] = 0.0
            c.sm[k, :, span] = 0.0
            c.ib_tx[k, :, span] = 0.0
    else:
        for k in r:
            if k != late:
                c.util[k, :, -9:] = 0.93
                c.sm[k, :, -9:] = 0.08
    v = verdict(diagnose(c.window(scrape_seconds=60.0), [job(1, GANG_A), job(2, GANG_B)]), 1)
    if peers == "paused":
        assert v.state != "straggler", v
    else:
        assert (v.state, v.culprit, v.culprit_kind) == ("straggler", "gpu002", "node"), v


@pytest.mark.parametrize("resumed", [1, 6])
def test_a_gangs_one_step_pause_is_no_gap_in_the_others_work(resumed):
    """Catalogue seed 3500 scraped every 45 s, without PSI or the filesystem's series: a gang's
    checkpoint seen at each node's scrape offset. Every node but two still read the pause; those
    two had paused for three steps and resumed at the last one, so for one step every GPU of the
    gang had paused. The others' work since counted that step as a one-step gap and read as
    minutes: "32 of 128 allocated GPUs idle while the others work". The others' work is counted
    from the gang's last pause (`resumed` steps ago)."""
    c = Cluster()
    c.fs_write[:] = np.nan  # no filesystem exporter: no write rate tells the checkpoint
    r = c.rows(GANG_A)
    c.util[r[0], :, -10:] = 0.0
    c.util[r[1], :, -resumed - 1:-resumed] = 0.0  # the gang paused together for one step
    for k in r[2:]:  # seen pausing a scrape earlier
        c.util[k, :, -resumed - 3:-resumed] = 0.0
    c.sm[c.util == 0.0] = 0.0
    v = verdict(diagnose(c.window(scrape_seconds=45.0), [job(1, GANG_A), job(2, GANG_B)]), 1)
    if resumed == 1:
        assert v.state != "idle_gpus", v
    else:
        assert (v.state, v.culprit) == ("idle_gpus", "gpu000:gpu0,1,2,3"), v


@pytest.mark.parametrize("after_grace", [3, 6])
def test_a_pace_takes_two_scrapes_of_each_gpu(after_grace):
    """Catalogue seed 3500 scraped every 45 s, without PSI or the filesystem's series: a job that
    left its data-loader warm-up 90 s before and its first 300 s a scrape before. The gang dipped
    for 20 s; three nodes' last scrape caught the dip (kernels resident, SMs at a third of their
    pace) and the fourth node's came before it: "the gang runs at the pace of hgx-010". One scrape
    of each GPU is no pace. Peers that keep waiting for two scrapes (`after_grace` steps past the
    job's first 300 s) make the node a straggler."""
    c = Cluster()
    r = c.rows(GANG_A)
    late = c.nodes.index("gpu003")
    for k in r:
        warm = -8 if k == late else -6  # each node seen leaving the warm-up at its own scrape offset
        c.util[k, :, :warm] = 0.05
        c.sm[k, :, :warm] = 0.01
        c.util[k, :, warm:] = 0.97
        c.sm[k, :, warm:] = 0.62
        if k != late:
            c.util[k, :, -after_grace + 1:] = 0.7
            c.sm[k, :, -after_grace + 1:] = 0.25
    start = END - STEP * (after_grace - 1) - DEFAULT.job_grace_seconds
    v = verdict(diagnose(c.window(scrape_seconds=45.0), [job(1, GANG_A, start=start), job(2, GANG_B)]), 1)
    if after_grace == 3:
        assert v.state != "straggler", v
    else:
        assert (v.state, v.culprit, v.culprit_kind) == ("straggler", "gpu003", "node"), v


@pytest.mark.parametrize("back", [2, 6])
def test_a_gangs_pause_seen_at_each_nodes_scrape_offset_leaves_no_gpus_idle(back):
    """Catalogue seed 3104 scraped every 30 s, without the filesystem's series: a gang's checkpoint
    read as paused on every node, two of them seen resuming a scrape before the other two. The two
    still paused had been idle for two minutes, and the others had worked a scrape before their own
    pause and since they resumed: "16 of 32 allocated GPUs idle while the others work". Every
    GPU of the gang paused together inside that run: the others must work again for as long as a
    stall takes before the ones still paused are left idle (`back` steps since they resumed)."""
    c = Cluster()
    c.fs_write[:] = np.nan  # no filesystem exporter: no write rate tells the checkpoint
    r = c.rows(GANG_A)
    for k in r[:2]:
        c.util[k, :, -10:] = 0.0
        c.sm[k, :, -10:] = 0.0
        c.ib_tx[k, :, -10:] = 0.0
    for k in r[2:]:  # paused two scrapes later than those
        c.util[k, :, -8:-back] = 0.0
        c.sm[k, :, -8:-back] = 0.0
        c.ib_tx[k, :, -8:-back] = 0.0
    v = verdict(diagnose(c.window(scrape_seconds=30.0), [job(1, GANG_A), job(2, GANG_B)]), 1)
    if back == 2:
        assert v.state != "idle_gpus", v
    else:
        assert (v.state, v.culprit) == ("idle_gpus", "gpu000:gpu0,1,2,3;gpu001:gpu0,1,2,3"), v
