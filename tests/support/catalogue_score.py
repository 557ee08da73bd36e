"""Scores the diagnosis on the scenario catalogue's bundles (tests/scenarios/): verdict per job
against the bundle's truth.json, culprit, detection delay after onset, and confidence reliability.

Used by tests/test_diagnosis_catalogue.py (goals asserted) and bench/bench_diagnosis_accuracy.py
(figures printed). Every bundle goes through the path a site's capture takes: `load_bundle` (text
parse, counter rates, node matching, squeue.json) and then `diagnose`, with one threshold set.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from dashboard.analysis.diagnose import diagnose
from dashboard.analysis.thresholds import DEFAULT
from dashboard.sources.bundle import load_bundle
from tests.scenarios.render import QUIET_FAMILIES

CAUSES = ("stalled_io", "stalled_network", "straggler", "hung", "idle_gpus")
# detection is measured at these offsets after onset (seconds); the goal is <= 120 s
PROBE_OFFSETS = (15.0, 30.0, 45.0, 60.0, 75.0, 90.0, 105.0, 120.0, 150.0, 180.0, 240.0, 300.0)
CONF_BINS = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0001)


@dataclass(frozen=True)
class Truth:
    jobid: str
    state: str  # a cause, or "progressing"
    culprits: tuple[str, ...]  # the culprit first, then names the catalogue also accepts
    culprit_kind: str
    onset: float | None
    scenario: str
    signature: str


def read_truth(path: str) -> list[Truth]:
    """truth.json as tests/scenarios writes it: {"scenario", "jobs": [{jobid, expected, culprit,
    culprit_kind, culprit_alternates, onset, scenario, signature}]}."""
    with open(os.path.join(path, "truth.json"), encoding="utf-8") as f:
        doc = json.load(f)
    out = []
    for r in doc.get("jobs", []):
        state = r.get("expected") or "progressing"
        onset = r.get("onset")
        names = tuple(str(x) for x in [r.get("culprit")] + list(r.get("culprit_alternates") or []) if x)
        out.append(Truth(str(r["jobid"]), str(state), names, str(r.get("culprit_kind") or ""),
                         float(onset) if isinstance(onset, (int, float)) else None,
                         str(r.get("scenario") or doc.get("scenario", "")), str(r.get("signature") or "")))
    return out


def culprit_tokens(name: str) -> frozenset[str]:
    """`node0003 mlx5_2 port 1`, `node0003:mlx5_2/1`, `node0003 GPU 5`, `node0003:gpu5` as tokens."""
    s = re.sub(r"\bport\s+", "", re.sub(r"\bgpu\s+(\d+)", r"gpu\1", (name or "").lower()))
    return frozenset(re.findall(r"[a-z0-9_]+", s))


def culprit_right(v, truth: Truth) -> str:
    """'right' when the verdict names the truth's culprit or one it accepts (every token of it; the
    job itself for hung/idle when the verdict names the job or GPUs of it), 'other', or 'none'."""
    if not truth.culprits:
        return "n/a"
    if not v.culprit:
        return "none"
    if truth.culprit_kind == "job" and v.culprit_kind in ("job", "gpu", "gpus"):
        return "right"
    got = culprit_tokens(v.culprit)
    return "right" if any(culprit_tokens(c) and culprit_tokens(c) <= got for c in truth.culprits) else "other"


@dataclass
class Score:
    confusion: Counter = field(default_factory=Counter)  # (truth state, verdict state) -> count
    culprits: Counter = field(default_factory=Counter)  # (cause, right/other/none) -> count
    delays: list = field(default_factory=list)  # (cause, signature, seconds or inf)
    reliability: Counter = field(default_factory=Counter)  # (bin, correct) -> count
    misses: list = field(default_factory=list)  # (bundle, jobid, truth, verdict, reason)
    bundles: int = 0
    jobs: int = 0
    in_grace: int = 0  # faulty jobs younger than the grace period, not judged by design

    def add_verdict(self, where: str, t: Truth, v) -> None:
        got = v.state if v is not None else "missing"
        self.confusion[(t.state, got)] += 1
        self.jobs += 1
        correct = got == t.state
        if v is not None and got != "insufficient_data":
            b = next(i for i in range(len(CONF_BINS) - 1) if CONF_BINS[i] <= v.confidence < CONF_BINS[i + 1])
            self.reliability[(b, correct)] += 1
        if correct and t.state in CAUSES:
            c = culprit_right(v, t)
            if c != "n/a":
                self.culprits[(t.state, c)] += 1
            if c in ("other", "none"):
                self.misses.append((where, t.jobid, f"culprit {t.culprits[0]} ({t.signature})", f"named {c}",
                                    f"{v.culprit} [{v.culprit_kind}]"))
        if not correct:
            self.misses.append((where, t.jobid, f"{t.state} ({t.signature})", got,
                                (v.culprit + " | " + v.reason)[:300] if v is not None else "no verdict"))

    # ---- figures
    def per_cause(self) -> dict[str, tuple[float, float, int]]:
        out = {}
        for c in CAUSES:
            tp = self.confusion.get((c, c), 0)
            pred = sum(n for (r, p), n in self.confusion.items() if p == c)
            true = sum(n for (r, p), n in self.confusion.items() if r == c)
            out[c] = (tp / pred if pred else math.nan, tp / true if true else math.nan, true)
        return out

    def false_alarm_rate(self) -> tuple[float, int]:
        healthy = sum(n for (r, p), n in self.confusion.items() if r == "progressing")
        fa = sum(n for (r, p), n in self.confusion.items() if r == "progressing" and p in CAUSES)
        return (fa / healthy if healthy else math.nan), healthy

    def culprit_rate(self) -> float:
        right = sum(n for (c, k), n in self.culprits.items() if k == "right")
        total = sum(self.culprits.values())
        return right / total if total else math.nan

    def detection(self) -> tuple[float, int]:
        """Share of faults detected within 120 s of onset, and how many were measured."""
        if not self.delays:
            return math.nan, 0
        return sum(1 for *_, d in self.delays if d <= 120.0) / len(self.delays), len(self.delays)

    def calibrated(self) -> tuple[float, int]:
        """Of verdicts with confidence >= 0.9, the share that is right."""
        hi = len(CONF_BINS) - 2
        ok, bad = self.reliability.get((hi, True), 0), self.reliability.get((hi, False), 0)
        return (ok / (ok + bad) if ok + bad else math.nan), ok + bad

    def goals_met(self) -> bool:
        pc = self.per_cause()
        fa, _ = self.false_alarm_rate()
        det, _ = self.detection()
        cal, _ = self.calibrated()
        return (all(not (p < 0.95) and not (r < 0.95) for p, r, _ in pc.values()) and not (fa > 0.01)
                and not (self.culprit_rate() < 0.95) and not (det < 0.95) and not (cal < 0.9))

    def report(self, title: str) -> str:
        lines = [f"{title}: {self.bundles} bundles, {self.jobs} job verdicts"]
        states = ("progressing",) + CAUSES + ("insufficient_data",)
        lines.append(f"{'truth / verdict':>18}" + "".join(f"{s[:11]:>12}" for s in states))
        for r in ("progressing",) + CAUSES:
            lines.append(f"{r:>18}" + "".join(f"{self.confusion.get((r, s), 0):>12}" for s in states))
        for c, (p, r, n) in self.per_cause().items():
            lines.append(f"  {c:<16} precision {p:6.3f}  recall {r:6.3f}  (truth {n})")
        fa, healthy = self.false_alarm_rate()
        lines.append(f"  false alarms on healthy jobs: {fa:.2%} of {healthy}")
        lines.append(f"  culprit right: {self.culprit_rate():.3f} of {sum(self.culprits.values())} verdicts with the "
                     "right cause and a culprit in the truth")
        det, n = self.detection()
        hit = sorted(d for *_, d in self.delays if math.isfinite(d))
        med = hit[len(hit) // 2] if hit else math.nan
        lines.append(f"  detection within 2 min of onset: {det:.3f} of {n} faults (median {med:.0f} s)")
        lines.append(f"  faulty jobs in their first {DEFAULT.job_grace_seconds:.0f} s, not judged by design (left out "
                     f"above): {self.in_grace}")
        lines.append("  reliability (confidence bin: verdicts, share right):")
        for b in range(len(CONF_BINS) - 1):
            ok, bad = self.reliability.get((b, True), 0), self.reliability.get((b, False), 0)
            if ok + bad:
                lines.append(f"    [{CONF_BINS[b]:.1f}, {min(CONF_BINS[b + 1], 1.0):.1f}{']' if b == len(CONF_BINS) - 2 else ')'}"
                             f" {ok + bad:6d}  {ok / (ok + bad):.3f}")
        return "\n".join(lines)


def score_bundle(path: str, score: Score, probe: bool = True) -> None:
    """Judge one bundle at its end (every job) and, for each faulty job with an onset, at each probe
    offset after onset until the verdict names the cause (detection delay)."""
    truths = read_truth(path)
    b = load_bundle(path)
    score.bundles += 1
    d = diagnose(b.window, list(b.jobs))
    by = {v.jobid: v for v in d.verdicts}
    win = b.window
    starts = {str(j.display_id): j.start_time for j in b.jobs}
    for t in truths:
        v, start = by.get(t.jobid), starts.get(t.jobid)
        if (t.state in CAUSES and v is not None and v.state == "insufficient_data" and start
                and win.end - start < DEFAULT.job_grace_seconds):
            # a job is not judged in its first minutes (by design): a victim that started inside
            # the fault is counted apart, as the simulator bench counts it, not as a miss
            score.in_grace += 1
            continue
        score.add_verdict(path, t, v)
    if not probe:
        return
    for t in truths:
        if t.state not in CAUSES or t.onset is None:
            continue
        # a job is not judged in its first minutes (start-up, data-loader warm-up: by design), so a
        # fault it started with (GPUs never used) is due from the end of that grace period, as the
        # simulator bench counts it
        start = starts.get(t.jobid)
        onset = max(t.onset, start + DEFAULT.job_grace_seconds) if start else t.onset
        if onset < win.start:
            continue  # began before the window: only the verdict at the end counts
        delay = math.inf
        for off in PROBE_OFFSETS:
            end = onset + off
            if end > win.end + 1e-6:
                break
            n = int((end - win.start) // win.step) + 1
            sub = win.until(n)
            jobs = [j for j in b.jobs if j.start_time is None or j.start_time <= sub.end]
            got = {v.jobid: v for v in diagnose(sub, jobs).verdicts}.get(t.jobid)
            if got is not None and got.state == t.state:
                delay = sub.end - onset
                break
        if onset + 120.0 <= win.end:  # measurable: the bundle runs at least 2 minutes past onset
            score.delays.append((t.state, t.signature, delay))


def as_site(root: str, drop: str = "", scrape_interval: float = 0.0) -> int:
    """Rewrite the bundles under `root` as a site that differs from the catalogue's draw would see
    them: without the series whose lines match `drop` (a regex, e.g. `node_pressure_` for kernels
    that leave PSI off), and scraped every `scrape_interval` seconds (every n-th sample of each
    series kept, n = the interval over the bundle's own). Returns the lines removed.
    A series the agent left out while still (`QUIET_FAMILIES`) and shows again, at the value it
    stood at for one scrape, shows that value at the site's next scrape: the agent holds it for its
    slowest scraper (docs/agent.md), so the site counts the move a scrape late, not never."""
    pat = re.compile(drop.encode()) if drop else None
    quiet = tuple(f.encode() + b"{" for f in QUIET_FAMILIES)
    removed = 0
    for p in bundle_dirs(root):
        n, step, start = 1, 0.0, 0.0
        if scrape_interval:
            with open(os.path.join(p, "truth.json")) as f:
                truth = json.load(f)
            step, start = truth["params"]["interval"], truth["window"]["start"]
            n = max(1, round(scrape_interval / step))
        seen: Counter = Counter()
        last: dict[bytes, float] = {}
        stood: dict[bytes, bytes] = {}  # quiet series back after standing still: the value it stood at
        keep = []
        with open(os.path.join(p, "metrics.om"), "rb") as f:
            for line in f:
                removed += 1
                if pat is not None and pat.search(line):
                    continue
                if n > 1 and not line.startswith(b"#"):
                    key, value, ts = line.rsplit(b" ", 2)
                    seen[key] += 1
                    if key.startswith(quiet):
                        t, before = float(ts), last.get(key, start - step)
                        last[key] = t
                        if t - before > 1.5 * step:
                            stood[key] = value
                    if seen[key] % n:
                        continue
                    if key in stood:
                        line = b" ".join((key, stood.pop(key), ts))
                keep.append(line)
                removed -= 1
        with open(os.path.join(p, "metrics.om"), "wb") as f:
            f.writelines(keep)
    return removed


def bundle_dirs(root: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        if "truth.json" in files and "metrics.om" in files:
            out.append(dirpath)
    return sorted(out)


def score_tree(root: str, probe: bool = True) -> dict[str, Score]:
    """Scores per schema folder name found in the path (gangwatch / exporters), plus 'all'."""
    scores: dict[str, Score] = defaultdict(Score)
    for p in bundle_dirs(root):
        schema = "exporters" if "exporter" in p else "gangwatch"
        score_bundle(p, scores[schema], probe)
    return dict(scores)
