"""Fault kinds, the `--faults` syntax, and the ground-truth record of every injected fault.

A fault is scheduled (`KIND@START+DURATION:key=value;...`, times like 90s, 20m, 2h, relative to
the start of the simulated history) or random (`random:RATE` faults per simulated hour, kinds
drawn evenly, 5-30 min each, from the simulation's seeded generator). Its target (an OST, a leaf
switch, a node, a GPU, a job) may be given (`ost=3`, `leaf=leaf01`, `node=node0007`, `gpu=2`,
`job=1234`) or is chosen when it starts, among resources that running jobs use, so that its
effect is visible. `default` is a scenario with one fault of each kind inside the pre-filled
hour and the hour after it; `showcase` (the demo's) has every kind active as the pre-filled hour
ends; `none` injects nothing.

Ground truth (`GroundTruth`, `Simulation.ground_truth()`): which kind, which cause (the verdict
state the diagnosis should reach: stalled_io, stalled_network, straggler, hung, idle_gpus;
node_failure for XID 79; scrape_timeout / scrape_slow for the endpoint faults), the culprit, the
window, the nodes, and for each affected job the interval in which it was affected.

Overlapping faults on one job compose as a pipeline does: a training step waits for its input
(I/O), computes (clocks) and all-reduces (network), so the slowest stage sets the pace and is what
the GPUs show. A hung collective never finishes (speed 0) and hides everything else; an I/O stall
(reads at 5 %) hides a network stall (15 %), which hides a throttled GPU (55 %); GPUs a job leaves
idle stay idle whatever else happens, and its working GPUs show the other fault. `CAUSE_PRECEDENCE`
is that order and `dominant()` applies it: the simulator's physics uses it, and so does the accuracy
bench to say which cause a job hit by two faults at once shows. Ground truth still lists every
fault that touched the job (both are real; one is masked while the other lasts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KINDS = {
    # kind: (cause, default duration s, what it does)
    "ost_slow": ("stalled_io", 900, "an OST serves reads 20x slower: jobs striped on it stall on I/O"),
    "ib_congestion": ("stalled_network", 600, "a leaf switch is congested: gangs with nodes on it stall in all-reduce"),
    "link_flap": ("stalled_network", 600, "one node's InfiniBand rail flaps down and up: its gang stalls"),
    "pfc_storm": ("stalled_network", 600, "one node's NIC sends PFC pause frames without end (RoCE only): its leaf "
                                          "switch pauses every link to it, gangs with nodes there stall"),
    "gpu_throttle": ("straggler", 1800, "one GPU is clock-throttled (HW slowdown): its gang runs at its pace"),
    "slow_node": ("straggler", 1800, "all GPUs of one node are thermally throttled: its gang runs at its pace"),
    "nccl_hang": ("hung", 1800, "a gang hangs in an NCCL collective: GPUs 100 % busy, SMs idle, network flat"),
    "xid79": ("node_failure", 7200, "a GPU falls off the bus (XID 79): its job fails, the node is drained"),
    "idle_gpus": ("idle_gpus", 3600, "a job holds GPUs it never uses: all but its first GPU stay idle"),
    "scrape_hang": ("scrape_timeout", 1800, "a node's metrics endpoint hangs (answers after 60 s)"),
    "scrape_slow": ("scrape_slow", 3600, "a node's metrics endpoint answers slowly (3 s)"),
}
JOB_KINDS = frozenset({"nccl_hang", "idle_gpus"})
# Kinds only a RoCE fabric has (InfiniBand's credit flow control has no pause frames); never drawn
# at random, so the random scenarios measured before them stay as they were.
ROCE_KINDS = frozenset({"pfc_storm"})
# Which cause a job shows when several faults hit it at once (first wins; see the module docstring).
CAUSE_PRECEDENCE = ("hung", "stalled_io", "stalled_network", "idle_gpus", "straggler")


def dominant(causes) -> str | None:
    """The cause a job hit by all of `causes` at once shows (None for an empty set)."""
    causes = set(causes)
    for c in CAUSE_PRECEDENCE:
        if c in causes:
            return c
    return min(causes) if causes else None
RANDOM_KINDS = ("ost_slow", "ib_congestion", "link_flap", "gpu_throttle", "slow_node", "nccl_hang", "xid79", "idle_gpus")
TARGET_KEYS = frozenset({"ost", "leaf", "node", "gpu", "job", "delay"})

# One of each, placed so that the pre-filled hour shows them and the live hour after it too.
DEFAULT_SCENARIO = ("ost_slow@8m+12m,nccl_hang@12m+40m,gpu_throttle@18m+50m,ib_congestion@30m+10m,"
                    "idle_gpus@35m+60m,xid79@42m+2h,link_flap@48m+8m,slow_node@70m+30m,"
                    "scrape_slow@0s+24h,scrape_hang@65m+20m")
# The demo's: every kind active when its pre-filled hour ends, so the first minute shows each one.
# The targeted faults start first; those that touch many jobs (a leaf, an OST) then pick the leaf and
# OST with fewest of those jobs, so that as far as the cluster allows each job shows one cause.
SHOWCASE_SCENARIO = ("gpu_throttle@38m+60m,slow_node@39m+60m,nccl_hang@40m+40m,link_flap@41m+25m,"
                     "idle_gpus@42m+60m,xid79@44m+2h,ib_congestion@46m+25m,ost_slow@47m+25m,"
                     "scrape_slow@0s+24h,scrape_hang@55m+20m")


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    start: float  # seconds after the start of the simulated history
    duration: float
    target: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return dict(self.target).get(key)


@dataclass
class GroundTruth:
    fault_id: int
    kind: str
    cause: str
    start: float  # unix seconds (simulated clock)
    end: float
    culprit: str = ""
    nodes: tuple[str, ...] = ()
    jobs: dict[str, list[float]] = field(default_factory=dict)  # job id -> [first, last] affected
    note: str = ""

    def touch(self, job_id: str, t: float) -> None:
        span = self.jobs.get(job_id)
        if span is None:
            self.jobs[job_id] = [t, t]
        else:
            span[1] = t

    def to_json(self) -> dict:
        return {"id": self.fault_id, "kind": self.kind, "cause": self.cause, "start": self.start, "end": self.end,
                "culprit": self.culprit, "nodes": list(self.nodes),
                "jobs": {j: {"from": a, "to": b} for j, (a, b) in sorted(self.jobs.items(), key=lambda kv: int(kv[0]))},
                "description": KINDS[self.kind][2], "note": self.note}


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 20m, 2h)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_faults(text: str) -> tuple[list[FaultSpec], float]:
    """`--faults` text -> (scheduled faults, random faults per hour). Raises ValueError with the reason."""
    text = (text or "").strip()
    if text in ("", "none"):
        return [], 0.0
    specs: list[FaultSpec] = []
    rate = 0.0
    for item in text.replace("default", DEFAULT_SCENARIO).replace("showcase", SHOWCASE_SCENARIO).split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("random"):
            _, _, r = item.partition(":")
            try:
                rate += float(r or 4)
            except ValueError:
                raise ValueError(f"random fault rate must be a number per hour: {item!r}") from None
            continue
        head, _, opts = item.partition(":")
        m = re.match(r"^([a-z_0-9]+)(?:@([^+]+))?(?:\+(.+))?$", head)
        if not m or m.group(1) not in KINDS:
            raise ValueError(f"unknown fault {head!r}; kinds: {', '.join(KINDS)}")
        kind = m.group(1)
        start = parse_duration(m.group(2)) if m.group(2) else 0.0
        duration = parse_duration(m.group(3)) if m.group(3) else float(KINDS[kind][1])
        target = []
        for kv in filter(None, opts.split(";")):
            k, sep, v = kv.partition("=")
            if not sep or k not in TARGET_KEYS:
                raise ValueError(f"fault option {kv!r}: use key=value with key one of {sorted(TARGET_KEYS)}")
            target.append((k, v))
        specs.append(FaultSpec(kind, start, duration, tuple(target)))
    specs.sort(key=lambda f: f.start)
    return specs, rate
