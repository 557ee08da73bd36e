"""Issue 13's goals, in the suite: the diagnosis on the scenario catalogue (tests/scenarios/:
behaviour written from vendor and kernel documentation, not from the simulator, as bundles in
gangwatch's names and in node_exporter + dcgm-exporter + Lustre/GPFS exporter names) and on the
simulator's fault seeds, with one threshold set:

precision and recall >= 0.95 per cause, <= 1 % false alarms on healthy jobs, culprit right >= 95 %,
detection <= 2 minutes after onset (>= 95 % of faults), and verdicts of confidence >= 0.9 right
>= 90 % of the time. bench/bench_diagnosis_accuracy.py prints the same figures over more seeds.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support.catalogue_score import CAUSES, score_tree

REPO = Path(__file__).resolve().parent.parent
SEEDS = 2


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("catalogue")
    subprocess.run([sys.executable, "-m", "tests.scenarios", str(out), "--seeds", str(SEEDS), "--schema", "both"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    return out


@pytest.fixture(scope="module")
def scores(catalogue):
    return score_tree(str(catalogue))


@pytest.mark.parametrize("schema", ["gangwatch", "exporters"])
def test_catalogue_meets_the_accuracy_goals(scores, schema):
    sc = scores[schema]
    report = sc.report(f"catalogue, {schema} names") + "\n" + "\n".join(
        f"  miss {Path(w).name} job {j}: truth {t}, verdict {g}: {why}" for w, j, t, g, why in sc.misses)
    assert sc.bundles >= 2 * 16, report  # every scenario of the catalogue, for each seed
    for cause, (p, r, n) in sc.per_cause().items():
        assert n > 0, f"no {cause} in the catalogue\n{report}"
        assert p >= 0.95 and r >= 0.95, f"{cause}: precision {p:.3f}, recall {r:.3f}\n{report}"
    fa, healthy = sc.false_alarm_rate()
    assert healthy >= 50 and fa <= 0.01, report
    assert sc.culprit_rate() >= 0.95, report
    det, n = sc.detection()
    assert n >= len(CAUSES) and det >= 0.95, report
    cal, n_hi = sc.calibrated()
    assert n_hi > 0 and cal >= 0.9, report


@pytest.fixture(scope="module")
def roce_scores(tmp_path_factory):
    out = tmp_path_factory.mktemp("catalogue-roce")
    subprocess.run([sys.executable, "-m", "tests.scenarios", str(out), "--seeds", str(SEEDS), "--schema", "both",
                    "--fabric", "roce", "--max-nodes", "32"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    return score_tree(str(out))


# node_exporter reads no RDMA hw_counters: on RoCE its congestion is the NICs' pause frames, per node,
# so the port of a congested gang that waits most cannot be told from its others there
PER_NODE_ONLY = ("nccl-spinning", "host-waiting")


@pytest.mark.parametrize("schema", ["gangwatch", "exporters"])
def test_roce_catalogue_meets_the_accuracy_goals(roce_scores, schema):
    """The same clusters and faults on a RoCE fabric (ECN, CNPs, PFC pauses, transport errors, the
    NICs' link-downs and storm guard; no transmit wait), and PFC pause storms named at their source."""
    sc = roce_scores[schema]
    report = sc.report(f"RoCE catalogue, {schema} names") + "\n" + "\n".join(
        f"  miss {Path(w).name} job {j}: truth {t}, verdict {g}: {why}" for w, j, t, g, why in sc.misses)
    assert sc.bundles >= 2 * 19, report  # every scenario, the pause storm too, for each seed
    for cause, (p, r, n) in sc.per_cause().items():
        assert n > 0 and p >= 0.95 and r >= 0.95, f"{cause}: precision {p:.3f}, recall {r:.3f}\n{report}"
    fa, healthy = sc.false_alarm_rate()
    assert healthy >= 50 and fa <= 0.01, report
    # the storms were judged, each victim gang stalled on the network with the storming node named
    assert any(sig == "pfc-storm" for _, sig, _ in sc.delays), report
    assert not any("pfc-storm" in m[2] for m in sc.misses), report
    if schema == "gangwatch":
        assert sc.culprit_rate() >= 0.95, report
    else:  # never a wrong culprit; unnamed only where the per-node pauses cannot place the port
        assert all(k != "other" for (c, k) in sc.culprits), report
        unnamed = [m for m in sc.misses if m[3] == "named none"]
        assert all(any(sig in m[2] for sig in PER_NODE_ONLY) for m in unnamed), report
    det, n = sc.detection()
    assert n >= len(CAUSES) and det >= 0.95, report
    cal, n_hi = sc.calibrated()
    assert n_hi > 0 and cal >= 0.9, report


def test_insufficient_data_never_calls_a_present_signal_missing(scores):
    # every insufficient_data verdict that lists signals must not list one as missing that the
    # bundle has: the exporter bundles all carry I/O pressure and InfiniBand counters
    for sc in scores.values():
        for where, jid, truth, got, why in sc.misses:
            if got == "insufficient_data" and "missing:" in why:
                missing = why.split("missing:")[1].split(";")[0]
                assert "I/O pressure" not in missing and "InfiniBand transmit wait" not in missing, (where, jid, why)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_diagnosis_accuracy",
                                                  REPO / "bench" / "bench_diagnosis_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_simulator_seeds_meet_the_accuracy_goals():
    b = _bench()
    conf, peer, lat, timing, classes, culprits = Counter(), Counter(), {}, [], Counter(), Counter()
    b.run_scenario(32, 1, b.MIX, 0.75, 60.0, 120.0, 60.0, conf, peer, lat, timing, classes, culprits)
    for c in CAUSES:
        tp = conf.get((c, c), 0) + conf.get((c + "*", c), 0)
        pred = sum(v for (r, p), v in conf.items() if p == c)
        true = sum(v for (r, p), v in conf.items() if r.rstrip("*") == c)
        if true:
            assert tp / pred >= 0.95 and tp / true >= 0.95, (c, conf)
    healthy = sum(v for (r, p), v in conf.items() if r == "healthy")
    fp = sum(v for (r, p), v in conf.items() if r == "healthy" and p in CAUSES)
    assert healthy > 100 and fp / healthy <= 0.01
    right = sum(v for (c, k), v in culprits.items() if k == "right")
    assert right / max(sum(culprits.values()), 1) >= 0.95, culprits
    delays = [d for d, _, _ in lat.values()]
    assert delays and sum(1 for d in delays if d <= 120.0) / len(delays) >= 0.95, delays
    assert all(not math.isnan(d) for d in delays)


def test_a_victim_in_its_first_minutes_is_counted_apart_not_as_a_miss(tmp_path):
    """RoCE seed 902: a 2-node gang that started 160 s after a PFC storm began on its leaf, 260 s
    old at the window's end. A job is not judged in its first 5 minutes (by design): the scorer
    counts it apart, as the simulator bench counts a job born inside a fault, not as a recall miss;
    the storming gang itself is judged."""
    subprocess.run([sys.executable, "-m", "tests.scenarios", str(tmp_path), "--seeds", "1", "--first-seed", "902",
                    "--only", "net_pfc_storm", "--fabric", "roce"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    for schema, sc in score_tree(str(tmp_path)).items():
        assert sc.in_grace == 1, (schema, sc.report(schema))
        assert not sc.misses, (schema, sc.misses)
        assert sc.confusion[("stalled_network", "stalled_network")] == 1, (schema, sc.report(schema))
        assert "not judged by design (left out above): 1" in sc.report(schema)


def test_a_flapping_link_is_seen_at_the_agents_node_rollup_a_scrape_before_the_port(tmp_path):
    """Seed 2400's flapping link scraped every minute: the port's link_downed series, left out by
    the agent until it moves, shows its first drop a scrape late (the value it stood at first); the
    agent's node rollup, exported at every scrape, shows it at the scrape after the drop, as
    node_exporter's per-port counter does. gangwatch's names then detect the stall within the 2
    minutes, as node_exporter's do (read from the ports alone: 167 s), naming the port at the end."""
    from tests.support.catalogue_score import as_site

    subprocess.run([sys.executable, "-m", "tests.scenarios", str(tmp_path), "--seeds", "1", "--first-seed", "2400",
                    "--only", "net_flapping_link"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    as_site(str(tmp_path), "", 60)
    scores = score_tree(str(tmp_path))
    for schema, sc in scores.items():
        assert sc.confusion[("stalled_network", "stalled_network")] == 1, (schema, sc.report(schema))
        assert not [m for m in sc.misses if "flapping-link" in m], (schema, sc.misses)
        assert [d for *_, d in sc.delays] and all(d <= 120 for *_, d in sc.delays), (schema, sc.delays)


def test_a_minutes_first_sample_of_a_stall_does_not_hide_its_cause(tmp_path):
    """Seed 2401's input stall and seed 2405's deadlock scraped every minute: the stall's first
    sample shows the GPUs' fall whole, but its rates (reads, I/O pressure, the wire's traffic)
    cover a minute that began before it, half of the stall's; judged on the samples after it, both
    are named within the 2 minutes (from it too: 137 and 142 s, a minute of "no single cause")."""
    from tests.support.catalogue_score import as_site

    for seed, name in ((2401, "io_loader_bound"), (2405, "hung_deadlock")):
        subprocess.run([sys.executable, "-m", "tests.scenarios", str(tmp_path), "--seeds", "1", "--first-seed",
                        str(seed), "--only", name], check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    as_site(str(tmp_path), "", 60)
    for schema, sc in score_tree(str(tmp_path)).items():
        assert sc.confusion[("stalled_io", "stalled_io")] == 1 and sc.confusion[("hung", "hung")] == 1, schema
        assert sum(n for (truth, got), n in sc.confusion.items() if truth == "progressing" and got in CAUSES) == 0
        assert len(sc.delays) == 2 and all(d <= 120 for *_, d in sc.delays), (schema, sc.delays)


def test_ranks_that_died_beside_spinning_ones_are_a_hang_from_the_minute_they_died(tmp_path):
    """Seed 2402's NCCL hang scraped every minute, on a site without SM activity: one node's ranks
    died (their GPUs idle) while the others spin at a third of their power. The spin is no work
    from the scrape it began, though the wire's rate shows the hang a scrape later: a hang within
    the 2 minutes, never GPUs idle while the others work (read so for 45 s, hung at 122-137 s)."""
    from tests.support.catalogue_score import as_site

    subprocess.run([sys.executable, "-m", "tests.scenarios", str(tmp_path), "--seeds", "1", "--first-seed", "2402",
                    "--only", "hung_nccl"], check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    as_site(str(tmp_path), "", 60)
    for schema, sc in score_tree(str(tmp_path)).items():
        assert sc.confusion[("hung", "hung")] == 1, (schema, sc.report(schema))
        assert len(sc.delays) == 1 and all(d <= 120 for *_, d in sc.delays), (schema, sc.delays)


def test_a_site_scraping_every_minute_counts_a_flapping_links_first_drops(tmp_path):
    """Seed 2105's flapping link scraped every minute. gangwatch's agent leaves the port's
    link_downed counter out until it moves and shows it back at the value it stood at for one
    scrape of its slowest scraper: a site scraping every minute sees that value first, then the
    drops, a scrape late. Keeping every fourth 15 s sample instead showed the counter first at its
    count after two drops, so neither was ever counted. With the drops seen, and node_exporter's
    errors a scrape a minute with one landing late, both schemes judge the gang stalled on the
    network with the port named."""
    from tests.support.catalogue_score import as_site

    subprocess.run([sys.executable, "-m", "tests.scenarios", str(tmp_path), "--seeds", "1", "--first-seed", "2105",
                    "--only", "net_flapping_link"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    as_site(str(tmp_path), "", 60)
    om = (tmp_path / "net_flapping_link-s2105-gangwatch" / "metrics.om").read_text().splitlines()
    downs = [float(x.split()[-2]) for x in om if x.startswith("gangwatch_infiniband_port_link_downed_total{")]
    assert downs[0] < downs[1], downs  # the value it stood at, then the drops
    for schema, sc in score_tree(str(tmp_path)).items():
        assert sc.confusion[("stalled_network", "stalled_network")] == 1, (schema, sc.report(schema))
        assert not [m for m in sc.misses if "flapping-link" in m], (schema, sc.misses)
