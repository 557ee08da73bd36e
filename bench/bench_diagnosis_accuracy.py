"""Accuracy of the diagnosis on the simulated cluster, against the simulator's fault ground truth.

For each scenario (seed, cluster size, fault mix) the simulation runs from an empty history; every
`--every` seconds of simulated time (after the first hour has filled the window) every running
job is diagnosed over the last hour and its verdict compared with the ground truth at that moment:

* truth = the cause of a fault affecting the job then (stalled_io, stalled_network, straggler, hung,
  idle_gpus), else `healthy` (healthy jobs include checkpoint dips and evaluation phases, which
  every simulated training job has);
* a job hit by two faults at once shows the dominant one (the simulator composes them as a
  pipeline: `faults.CAUSE_PRECEDENCE`, hung > stalled_io > stalled_network > idle_gpus >
  straggler); that is its truth, and a verdict naming the other (masked, but real) fault is also
  counted correct; how many evaluations had two causes, and how many were answered with the
  masked one, is printed;
* jobs that started inside their fault (they never ran healthy, so they have no baseline of their
  own) count like the others once their first `job_grace_seconds` (5 min, not judged by design:
  start-up and data-loader warm-up) are over; their evaluations are also shown in rows `cause*`
  and their own recall line; evaluations inside a job's grace period are left out (counted);
* in the first `--grace` seconds after a fault's onset, and for `--tail` seconds after it ends,
  either verdict is accepted (not counted): detection is allowed 2 minutes (issue 6);
* node_failure (XID 79) and scrape faults are not job verdicts and are skipped.

Prints a confusion matrix, precision and recall per cause (goal >= 0.95), the culprit-correct rate
per cause (of the verdicts that name the right cause, how many name the ground truth's culprit: the
slowed OST, the congested leaf switch, the flapping port, the NIC's node in a PFC storm (RoCE), the
throttled GPU or slow node, the hung job; how many name another, and how many name none), recall per job class
(jobs holding whole nodes, jobs sharing a node), the false-positive rate on healthy jobs (goal
<= 1 %), and the detection delay after onset (goal <= 120 s: median, p90, max and a histogram, for
faults that hit running jobs, and after the grace period for jobs that started inside a fault),
then the same figures for a trivial peer: jobstats' rule (mean GPU utilisation < 10 % over the
window = idle; everything else fine), measured on the same evaluations.

The same figures on the scenario catalogue (tests/scenarios/: scenarios written from documented
physical behaviour, not from the simulator, as bundles in gangwatch's names and in the exporter
names sites run), each bundle judged through `load_bundle` + `diagnose` at its end and at probes
after each fault's onset, with a reliability table of the verdicts' confidence.

    python bench/bench_diagnosis_accuracy.py              # 4 simulator scenarios + the catalogue
    python bench/bench_diagnosis_accuracy.py --quick      # 1 small scenario
    python bench/bench_diagnosis_accuracy.py --no-sm      # as a site without DCGM profiling metrics
    python bench/bench_diagnosis_accuracy.py --no-job-psi # as a site without the agent's jobs collector
    python bench/bench_diagnosis_accuracy.py --fabric roce  # a RoCE fabric (ECN/CNP/PFC), the catalogue's too
    python bench/bench_diagnosis_accuracy.py --no-sim --catalogue-drop 'node_pressure_|gangwatch_pressure_'
                                                          # the catalogue as a site whose kernels leave PSI off
    python bench/bench_diagnosis_accuracy.py --no-sim --catalogue-scrape-interval 60   # ... scraping every minute
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import sys
import time
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dashboard.analysis.diagnose import STATES, diagnose  # noqa: E402
from dashboard.analysis.sim import SimConfig, Simulation  # noqa: E402
from dashboard.analysis.sim.faults import dominant  # noqa: E402
from dashboard.analysis.thresholds import DEFAULT as TH  # noqa: E402
from dashboard.sources.simulated import SimRecorder  # noqa: E402

RELIABILITY: Counter = Counter()  # (confidence bin, verdict right) over the simulator's evaluations
NO_SM = False
JOB_PSI = True
EXPLAIN = False
FABRIC = "ib"
CAUSES = ("stalled_io", "stalled_network", "straggler", "hung", "idle_gpus")
SKIP_CAUSES = {"node_failure", "scrape_timeout", "scrape_slow"}
# One fault of each kind inside the judged period (the first hour fills the window).
MIX = ("ost_slow@65m+12m,nccl_hang@68m+25m,gpu_throttle@72m+30m,ib_congestion@80m+10m,idle_gpus@85m+30m,"
       "link_flap@95m+8m,slow_node@100m+20m,ost_slow@110m+10m,xid79@90m+1h")
# and on a RoCE fabric a NIC in a PFC pause storm too (a kind InfiniBand has not)
ROCE_MIX = ",pfc_storm@104m+10m"


def conf_bin(c: float) -> int:
    from tests.support.catalogue_score import CONF_BINS

    return next(i for i in range(len(CONF_BINS) - 1) if CONF_BINS[i] <= c < CONF_BINS[i + 1])


def print_reliability(rel: Counter) -> None:
    from tests.support.catalogue_score import CONF_BINS

    print("  reliability (confidence bin: verdicts, share right):")
    for b in range(len(CONF_BINS) - 1):
        ok, bad = rel.get((b, True), 0), rel.get((b, False), 0)
        if ok + bad:
            print(f"    [{CONF_BINS[b]:.1f}, {min(CONF_BINS[b + 1], 1.0):.1f}) {ok + bad:7d}  {ok / (ok + bad):.3f}")


def truth_at(truth: list[dict], t: float, grace: float, tail: float) -> tuple[dict[str, set], set[str]]:
    """({job: causes} counted at t, {jobs in a don't-care interval}). A job hit by two faults at
    once (a hung gang on a congested leaf) shows the dominant one, and is right with either."""
    label: dict[str, set] = defaultdict(set)
    onset: dict[str, float] = {}
    dont: set[str] = set()
    for f in truth:
        if f["cause"] in SKIP_CAUSES:
            continue
        for jid, span in f["jobs"].items():
            a, b = span["from"], span["to"]
            active_end = max(b, f["end"] if f["end"] < t else b)
            if a <= t <= b:
                if t - a < grace:
                    dont.add(jid)
                else:
                    label[jid].add(f["cause"])
                    onset[jid] = min(onset.get(jid, a), a)
            elif b < t <= active_end + tail:
                dont.add(jid)
    for jid in dont:
        label.pop(jid, None)
    truth_at.onset = onset
    return dict(label), dont


def culprit_tokens(name: str) -> frozenset[str]:
    """A culprit as comparable tokens, so that the simulator's `node0003 mlx5_2 port 1` and `node0003
    GPU 5` match the diagnosis' `node0003:mlx5_2/1` and `node0003:gpu5`."""
    s = re.sub(r"\bport\s+", "", re.sub(r"\bgpu\s+(\d+)", r"gpu\1", (name or "").lower()))
    return frozenset(re.findall(r"[a-z0-9_]+", s))


def culprit_verdict(v, truths: set[str]) -> str:
    """'right' when the verdict's culprit names one of the ground truth's culprits (every token of
    it), or when the truth names the job (idle GPUs, a hung collective) and the verdict names that
    job or GPUs of it; 'other' when it names something else, 'none' when it names nothing."""
    named = v.culprit
    if not named:
        return "none"
    if f"job {v.jobid}" in truths and v.culprit_kind in ("job", "gpu", "gpus"):
        return "right"
    got = culprit_tokens(named)
    return "right" if any(culprit_tokens(t) and culprit_tokens(t) <= got for t in truths) else "other"


def jobstats_rule(win, jobs) -> dict[str, str]:
    """The peer: jobstats flags a job whose GPUs average under 10 % utilisation; nothing else."""
    out = {}
    util = win.gpu["util"]
    idx = win.node_index()
    for j in jobs:
        vals = [util[idx[a.node], list(win.gpus[idx[a.node]]).index(g)] for a in j.allocations if a.node in idx
                for g in a.gpu_indices if g in win.gpus[idx[a.node]]]
        if vals:
            with np.errstate(all="ignore"):
                m = np.nanmean(np.stack(vals))
            out[str(j.job_id)] = "idle_gpus" if m < 0.10 else "progressing"
    return out


def run_scenario(nodes: int, seed: int, faults: str, hours: float, every: float, grace: float, tail: float,
                 conf: Counter, peer: Counter, latencies: dict, timing: list, classes: Counter,
                 culprits: Counter) -> None:
    sim = Simulation(SimConfig(nodes=nodes, seed=seed, prefill=False, faults=faults, fabric=FABRIC))
    rec = SimRecorder(sim, capacity=241, job_psi=JOB_PSI)
    rec.step(240)  # one hour of history before the first judgement
    steps = int(round(every / sim.dt))
    first_hit: dict[tuple[int, str], float] = {}
    seen: dict[tuple[int, str], list[str]] = {}
    onset: dict[tuple[int, str], float] = {}
    total = int(hours * 3600 / sim.dt)
    done = 0
    while done < total:
        rec.step(steps)
        done += steps
        win, jobs = rec.window(), [j for j in rec.jobs() if j.state == "RUNNING"]
        if NO_SM:  # a site without DCGM profiling: utilisation, power and clocks only
            win = dataclasses.replace(win, gpu={k: v for k, v in win.gpu.items() if k != "sm"})
        t0 = time.perf_counter()
        d = diagnose(win, jobs)
        timing.append(time.perf_counter() - t0)
        label, dont = truth_at(sim.ground_truth(), sim.t, grace, tail)
        pj = jobstats_rule(win, jobs)
        onset_of = truth_at.onset
        truth_culprits: dict[tuple[str, str], set[str]] = defaultdict(set)
        for f in sim.ground_truth():
            for jid, span in f["jobs"].items():
                if span["from"] <= sim.t <= span["to"] and f.get("culprit"):
                    truth_culprits[(jid, f["cause"])].add(f["culprit"])
        per_node = Counter(n for j in jobs for n in set(j.nodes))
        shared = {str(j.job_id): any(per_node[n] > 1 for n in j.nodes) for j in jobs}
        start_of = {str(j.job_id): j.start_time or 0.0 for j in jobs}
        for v in d.verdicts:
            if v.jobid in dont:
                continue
            causes = label.get(v.jobid) or {"healthy"}
            first = dominant(causes) if causes != {"healthy"} else "healthy"
            truth = v.state if v.state in causes else first
            if len(causes) > 1:
                classes[("two causes", "", v.state == first)] += 1
                classes[("two causes", "masked", v.state in causes and v.state != first)] += 1
            born = truth != "healthy" and start_of.get(v.jobid, 0) >= onset_of.get(v.jobid, 1e18) - sim.dt
            if born and sim.t - start_of.get(v.jobid, 0) < TH.job_grace_seconds:
                classes[("born", "in grace", True)] += 1  # not judged by design in a job's first minutes
                continue
            if born:
                truth += "*"  # the job started inside the fault: it never ran healthy in the window
            conf[(truth, v.state)] += 1
            if v.state != "insufficient_data":
                RELIABILITY[(conf_bin(v.confidence), v.state == truth.rstrip("*").replace("healthy", "progressing"))] += 1
            if v.state == truth.rstrip("*") and v.state in CAUSES:
                culprits[(v.state, culprit_verdict(v, truth_culprits.get((v.jobid, v.state), set())))] += 1
            if truth.rstrip("*") in CAUSES:
                cls = "shared-node jobs" if shared.get(v.jobid) else "jobs holding whole nodes"
                classes[(cls, truth.rstrip("*"), v.state == truth.rstrip("*"))] += 1
            pv = pj.get(v.jobid, "insufficient_data")
            peer[(pv if pv in causes else first, pv)] += 1
        by_job = {v.jobid: v for v in d.verdicts}
        # a fault masked by another on the same job (faults.CAUSE_PRECEDENCE) is detected with it
        active: dict[str, set] = defaultdict(set)
        for f in sim.ground_truth():
            for jid, span in f["jobs"].items():
                if span["from"] <= sim.t <= span["to"]:
                    active[jid].add(f["cause"])
        for f in sim.ground_truth():
            if f["cause"] in SKIP_CAUSES:
                continue
            for jid, span in f["jobs"].items():
                key = (f["id"] + seed * 1000 + nodes * 100000, jid)
                if key not in onset:
                    # a job is not judged in its first minutes (by design): a fault that hit it then,
                    # or that it started inside, can be detected from the end of that grace period
                    born = start_of.get(jid, 0) >= span["from"] - sim.dt
                    onset[key] = (max(span["from"], start_of.get(jid, 0) + TH.job_grace_seconds), born, f["cause"])
                got = by_job.get(jid)
                if got is not None and got.state in (active[jid] | {f["cause"]}) and key not in first_hit \
                        and span["from"] <= sim.t:
                    first_hit[key] = sim.t
                elif got is not None and key not in first_hit and EXPLAIN:
                    seen.setdefault(key, []).append(f"{sim.t - onset[key][0]:+.0f}s {got.state} "
                                                    f"shared={shared.get(jid)} {got.reason[:90]}")
    judged_from = sim.t0 + 3600.0
    spans = {(f["id"] + seed * 1000 + nodes * 100000, jid): span["to"] for f in sim.ground_truth() for jid, span in f["jobs"].items()}
    for key, (t_on, born, cause) in onset.items():
        # pairs whose first 2 judgeable minutes lay inside the judged hour and inside the fault's hold on the job
        if t_on >= judged_from and t_on + 120.0 <= min(sim.t, spans.get(key, -math.inf)):
            latencies[key] = (first_hit[key] - t_on if key in first_hit else math.inf, born, cause)
            if EXPLAIN and latencies[key][0] > 120.0:
                print(f"  late: scenario {nodes}/{seed} fault {key[0] % 1000} job {key[1]} {cause} born={born}: "
                      + " | ".join(seen.get(key, [])[:6]))


def report(conf: Counter, title: str) -> dict:
    rows = ("healthy",) + CAUSES + tuple(c + "*" for c in CAUSES if any(r == c + "*" for r, _ in conf))
    cols = STATES
    print(f"\n{title}: confusion matrix (rows: truth, columns: verdict; job x evaluation counts)")
    print(f"{'':>16}" + "".join(f"{c[:11]:>12}" for c in cols))
    for r in rows:
        print(f"{r:>16}" + "".join(f"{conf.get((r, c), 0):>12}" for c in cols))
    out = {}
    for c in CAUSES:
        tp = conf.get((c, c), 0)
        pred = sum(v for (r, p), v in conf.items() if p == c)
        true = sum(v for (r, p), v in conf.items() if r == c)
        born = sum(v for (r, p), v in conf.items() if r == c + "*")
        tp_born = conf.get((c + "*", c), 0)
        prec = (tp + tp_born) / pred if pred else float("nan")
        rec = (tp + tp_born) / (true + born) if true + born else float("nan")
        out[c] = (prec, rec, true + born)
        born_rec = f"{tp_born / born:6.3f}" if born else "   n/a"
        print(f"  {c:<16} precision {prec:6.3f}  recall {rec:6.3f}  (truth {true + born}, predicted {pred}); "
              f"of which jobs that started inside the fault: {born}, recall {born_rec}")
    healthy = sum(v for (r, p), v in conf.items() if r == "healthy")
    fp = sum(v for (r, p), v in conf.items() if r == "healthy" and p in CAUSES)
    print(f"  false positives on healthy jobs: {fp} of {healthy} = {fp / max(healthy, 1):.3%}")
    out["fp_rate"] = fp / max(healthy, 1)
    return out


def catalogue(seeds: int, explain: bool, first_seed: int = 0, drop: str = "", scrape_interval: float = 0.0,
              fabric: str = "ib") -> bool:
    """Build the scenario catalogue for `seeds` seeds in both schemas on `fabric` and score it, as a
    site without the series `drop` matches and scraping every `scrape_interval` s when given."""
    import subprocess
    import tempfile

    from tests.support.catalogue_score import as_site, score_tree

    with tempfile.TemporaryDirectory(prefix="gw-catalogue-") as out:
        t0 = time.time()
        subprocess.run([sys.executable, "-m", "tests.scenarios", out, "--seeds", str(seeds), "--first-seed",
                        str(first_seed), "--schema", "both", "--fabric", fabric],
                       check=True, cwd=os.path.join(os.path.dirname(__file__), ".."), stdout=subprocess.DEVNULL)
        if drop or scrape_interval:
            removed = as_site(out, drop, scrape_interval)
            print(f"as a site {'without /' + drop + '/' if drop else ''}"
                  f"{' scraping every %g s' % scrape_interval if scrape_interval else ''}: {removed:,} lines removed")
        built = time.time() - t0
        t0 = time.time()
        scores = score_tree(out)
        print(f"\nscenario catalogue ({fabric}): seeds {first_seed}-{first_seed + seeds - 1}, built in {built:.1f} s, "
              f"judged in "
              f"{time.time() - t0:.1f} s")
        ok = True
        for schema, sc in sorted(scores.items()):
            print(sc.report(f"catalogue, {schema} names"))
            met = sc.goals_met()
            ok &= met
            print(f"  goal (P, R >= 0.95 per cause, false alarms <= 1 %, culprit >= 95 %, detection <= 2 min for "
                  f">= 95 %, confidence >= 0.9 right >= 90 %): {'MET' if met else 'NOT MET'}")
            if explain:
                # the faults missed first, then the false alarms, then the healthy jobs not judged
                misses = sorted(sc.misses, key=lambda m: (str(m[2]).startswith("progressing"),
                                                          str(m[3]) == "insufficient_data"))
                for where, jid, truth, got, why in misses[:60]:
                    print(f"    miss {os.path.basename(where)} job {jid}: truth {truth}, verdict {got}: {why}")
        return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--every", type=float, default=60.0, help="seconds of simulated time between judgements")
    ap.add_argument("--grace", type=float, default=120.0)
    ap.add_argument("--tail", type=float, default=60.0)
    ap.add_argument("--no-sm", action="store_true", help="drop SM activity (a site without DCGM profiling metrics)")
    ap.add_argument("--no-job-psi", action="store_true",
                    help="drop the jobs' own cgroup pressure (a site without the agent's jobs collector)")
    ap.add_argument("--explain", action="store_true", help="print the verdicts of (fault, job) pairs detected late")
    ap.add_argument("--catalogue-seeds", type=int, default=6, help="seeds of the scenario catalogue (0: skip it)")
    ap.add_argument("--catalogue-first-seed", type=int, default=100,
                    help="first catalogue seed (default 100: seeds nobody looked at while writing the rules; "
                         "0 for the ones the tests use)")
    ap.add_argument("--no-sim", action="store_true", help="only the scenario catalogue")
    ap.add_argument("--catalogue-drop", default="", metavar="REGEX",
                    help="judge the catalogue as a site without the series whose lines match (e.g. 'node_pressure_|"
                         "gangwatch_pressure_': kernels that leave PSI off)")
    ap.add_argument("--catalogue-scrape-interval", type=float, default=0.0, metavar="SECONDS",
                    help="judge the catalogue as a site scraping every SECONDS (e.g. 60: Prometheus' default)")
    ap.add_argument("--fabric", choices=("ib", "roce"), default="ib",
                    help="the simulated compute fabric: InfiniBand (port_xmit_wait) or RoCE (ECN, CNP, PFC pause)")
    args = ap.parse_args(argv)
    global NO_SM, JOB_PSI, EXPLAIN, FABRIC
    FABRIC = args.fabric
    EXPLAIN = args.explain
    NO_SM = args.no_sm
    JOB_PSI = not args.no_job_psi
    mix = MIX + (ROCE_MIX if FABRIC == "roce" else "")
    if args.quick:
        scenarios = [(32, 1, mix, 1.0)]
    else:
        scenarios = [(64, 1, mix, 1.0), (64, 2, mix + ",random:4", 1.0), (128, 3, "random:8", 1.0),
                     (256, 4, mix + ",random:4", 1.0)]
    cat_ok = True
    if args.catalogue_seeds:
        cat_ok = catalogue(args.catalogue_seeds, args.explain, args.catalogue_first_seed, args.catalogue_drop,
                           args.catalogue_scrape_interval, FABRIC)
    if args.no_sim:
        return 0
    conf, peer, lat, timing, classes, culprits = Counter(), Counter(), {}, [], Counter(), Counter()
    t0 = time.time()
    for nodes, seed, faults, hours in scenarios:
        print(f"scenario: {nodes} nodes, seed {seed}, fabric {FABRIC}, faults {faults!r}, {hours} h judged", flush=True)
        run_scenario(nodes, seed, faults, hours, args.every, args.grace, args.tail, conf, peer, lat, timing, classes,
                     culprits)
    ours = report(conf, "gangwatch diagnosis")
    print_reliability(RELIABILITY)
    print("  culprit named, of the verdicts with the right cause (the ground truth's culprit / another / none):")
    for c in CAUSES:
        right, other, none = (culprits.get((c, k), 0) for k in ("right", "other", "none"))
        if right + other + none:
            print(f"    {c:<16} culprit correct {right / (right + other + none):6.3f}  "
                  f"({right} right, {other} another, {none} none, of {right + other + none})")
    two, masked = sum(v for (a, _, _), v in classes.items() if a == "two causes") // 2, classes.get(("two causes", "masked", True), 0)
    print(f"  evaluations of jobs hit by two faults at once: {two}; verdict = the dominant cause: "
          f"{classes.get(('two causes', '', True), 0)}, = the masked one: {masked}")
    print(f"  evaluations of jobs that started inside a fault, left out while in their first "
          f"{TH.job_grace_seconds:.0f} s: {classes.get(('born', 'in grace', True), 0)}")
    print("  recall by job class (node-level I/O pressure cannot be attributed to one of several jobs on a node "
          "unless the job's own cgroup pressure is exported" + ("" if JOB_PSI else "; not given in this run") + "):")
    for cls in ("jobs holding whole nodes", "shared-node jobs"):
        parts = []
        for c in CAUSES:
            hit, miss = classes.get((cls, c, True), 0), classes.get((cls, c, False), 0)
            if hit + miss:
                parts.append(f"{c} {hit / (hit + miss):.3f} ({hit + miss})")
        print(f"    {cls:<26} " + ", ".join(parts))
    report(peer, "peer: jobstats rule (mean GPU utilisation < 10 % = idle)")
    for born, what in ((False, "faults hitting running jobs, after onset (or the end of the job's first "
                               f"{TH.job_grace_seconds:.0f} s)"),
                       (True, f"jobs that started inside a fault, after their first {TH.job_grace_seconds:.0f} s")):
        arr = np.array(sorted(d for d, b, _ in lat.values() if b == born))
        if not arr.size:
            continue
        hit = arr[np.isfinite(arr)]
        within = float(np.mean(arr <= 120.0))
        edges = (0, 30, 60, 90, 120, 180, 300, 600)
        hist = np.bincount(np.searchsorted(edges, hit, side="left"), minlength=len(edges) + 1)  # (a, b] bins
        print(f"\ndetection delay (s), {what}: {arr.size} (fault, job) pairs, {hit.size} detected; "
              + (f"median {np.median(hit):.0f}, p90 {np.quantile(hit, 0.9):.0f}, max {hit.max():.0f}; " if hit.size else "")
              + f"within 2 min: {within:.1%}")
        print(f"  histogram: <= 0: {hist[0]}, " + ", ".join(f"({a}, {b}]: {n}" for a, b, n in
                                                           zip(edges, list(edges[1:]) + ["inf"], hist[1:]))
              + f", never: {arr.size - hit.size}")
        late = Counter(c for d, b, c in lat.values() if b == born and d > 120.0)
        if late:
            print("  later than 2 min or never, by cause: " + ", ".join(f"{c} {n}" for c, n in sorted(late.items())))
    print(f"diagnosis time per cycle: median {np.median(timing) * 1e3:.1f} ms ({len(timing)} cycles); "
          f"bench wall time {time.time() - t0:.0f} s")
    ok = all((np.isnan(p) or p >= 0.95) and (np.isnan(r) or r >= 0.95) for c, (p, r, _) in
             ((c, ours[c]) for c in CAUSES)) and ours["fp_rate"] <= 0.01
    print("goal (precision, recall >= 0.95 per cause, FP <= 1 %):", "MET" if ok else "NOT MET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
