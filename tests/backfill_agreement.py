"""Agreement harness: gangwatch's backfill plan against what the real Slurm does next.

Used by tests/test_backfill_agreement.py (a few workloads, marker `backfill_agreement`) and by
bench/bench_backfill_agreement.py (>= 30). Runs on the throw-away cluster of tests/slurm_cluster.py:
8 nodes x 8 GPUs (gpu001-006 h100 Weight=10, gpu007-008 a100 Weight=20), partitions `gpu` (all
nodes) and `long` (gpu005-008), sched/backfill, bf_resolution=60, bf_interval set to BF_INTERVAL;
with slurmdbd, a QOS `lim` with MaxJobsPerUser=2.

One workload, randomised from its seed:
1. background jobs pinned to nodes (-w) start at once: gangs of 1-4 whole nodes and partial
   single-node jobs, short (5-30 min) or long (1-4 h) limits, some in QOS lim;
2. both partitions are set DOWN, so nothing new starts, and the workload is submitted: 8-14 jobs,
   gangs of 1-8 nodes x 8 GPUs or 1-8 GPUs on one node (some as --gpus without -c, so that
   DefCpuPerGPU decides their CPUs), short or long limits, partition gpu or long, some held, some
   depending on a running job (afterok), some in QOS lim, and, when the workload has one, a
   reservation (one node, from 5-40 min ahead for an hour, IGNORE_JOBS) that some jobs request;
   `--nice` spreads priorities so that Slurm's order is strict (we read the priorities back);
3. the snapshot is taken (the exporter's CLI poll, plus `scontrol show config` and `sacctmgr show
   qos`), and gangwatch plans it as if the partitions were up;
4. the partitions go UP; Slurm's main scheduler and then its backfill cycle act; after
   2 x bf_interval + 1 s every workload job's state and `Scheduler=` is read, and `squeue --start`;
5. compared: the jobs gangwatch calls startable now vs the jobs Slurm started (precision, recall),
   and each partition's top job's reserved start vs Slurm's expected start (error in seconds,
   agreeing within one bf_resolution). Every disagreement is printed with the Slurm rule that
   explains it, as far as Slurm's own reason for the job says.
Then every job is cancelled and the reservation deleted.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from dataclasses import dataclass, field

from collectors.runner import CommandRunner
from collectors.slurm.sched_config import QOS_FORMAT, parse_sacctmgr_qos, parse_scontrol_config
from collectors.slurm.sources import CliSource, Poller
from dashboard.backfill_api import backfill_json
from dashboard.backfill_cli import parse_squeue_start

BF_INTERVAL = 2
BF_RESOLUTION = 60
NODES = [f"gpu{i:03d}" for i in range(1, 9)]
LONG_NODES = NODES[4:]
NICE_STEP = 100_000  # larger than any multifactor priority these jobs get, so --nice decides the order

# Slurm's pending reasons -> the rule that explains why it did not start a job
RULES = {
    "Priority": "sched/backfill reserves resources for every higher-priority job it tests; this job would "
                "delay one of those reservations (or a higher-priority job in its partition waits)",
    "Resources": "not enough free resources for its whole request on the nodes it may use",
    "QOSMaxJobsPerUserLimit": "QOS MaxJobsPerUser (AccountingStorageEnforce=limits)",
    "Dependency": "its dependency is not satisfied",
    "JobHeldUser": "held", "JobHeldAdmin": "held",
    "ReqNodeNotAvail": "a node it needs is reserved or unavailable",
    "Reservation": "its reservation has not started",
    "PartitionDown": "its partition was not up yet when Slurm looked",
    "BeginTime": "its begin time",
}


@dataclass
class Job:
    name: str
    args: list[str]
    partition: str
    expect_run: bool = False  # background: must be running before the snapshot
    job_id: int = 0


@dataclass
class Workload:
    seed: int
    background: list[Job]
    pending: list[Job]
    reservation: tuple[str, int] | None  # (node, minutes ahead)


@dataclass
class Outcome:
    seed: int
    ours: set[str]
    slurm: set[str]
    tops: list[tuple[str, str, float, float | None]]  # (partition, job, ours, slurm)
    disagreements: list[str] = field(default_factory=list)
    seconds: float = 0.0
    easy: "Outcome | None" = None  # the same workload scored for a plain EASY plan (the bench's peer)

    @property
    def top_ok(self) -> bool:
        return all(s is not None and abs(o - s) <= BF_RESOLUTION for _, _, o, s in self.tops)


def make_workload(seed: int, dbd: bool) -> Workload:
    rnd = random.Random(seed)
    bg: list[Job] = []
    k = 0
    free = {n: 8 for n in NODES}
    i = 0
    while i < len(NODES):
        roll = rnd.random()
        limit = rnd.choice([rnd.randint(5, 30), rnd.randint(60, 240)])
        qos = ["--qos=lim"] if dbd and rnd.random() < 0.2 else []
        if roll < 0.45:  # a gang of whole nodes
            size = min(rnd.choice([1, 1, 2, 2, 3, 4]), len(NODES) - i)
            nodes = NODES[i:i + size]
            part = "long" if all(n in LONG_NODES for n in nodes) and rnd.random() < 0.5 else "gpu"
            bg.append(Job(f"bg{k}", ["-N", str(size), "-w", ",".join(nodes), "--gres=gpu:8", "-c", "64",
                                     f"--time={limit}", *qos], part, True))
            for n in nodes:
                free[n] = 0
            i += size
        elif roll < 0.8:  # partly used node
            n = NODES[i]
            for _ in range(rnd.choice([1, 1, 2])):
                g = rnd.choice([1, 2, 4])
                if free[n] >= g:
                    lim = rnd.choice([rnd.randint(5, 30), rnd.randint(60, 240)])
                    bg.append(Job(f"bg{k}", ["-N", "1", "-w", n, f"--gres=gpu:{g}", "-c", str(8 * g),
                                             f"--time={lim}", *qos], "gpu", True))
                    free[n] -= g
                    k += 1
            i += 1
        else:  # idle
            i += 1
        k += 1
    resv = (rnd.choice(NODES[2:]), rnd.randint(5, 40)) if rnd.random() < 0.5 else None
    pend: list[Job] = []
    for j in range(rnd.randint(8, 14)):
        part = "long" if rnd.random() < 0.3 else "gpu"
        limit = rnd.choice([rnd.randint(5, 30), rnd.randint(60, 600)])
        if rnd.random() < 0.45:
            size = rnd.randint(2, 4 if part == "long" else 8)
            args = ["-N", str(size), "--gres=gpu:8", "-c", "64"]
        else:
            g = rnd.choice([1, 2, 4, 8])
            args = ["-N", "1", f"--gpus={g}"] if rnd.random() < 0.4 else ["-N", "1", f"--gres=gpu:{g}", "-c", str(8 * g)]
        args.append(f"--time={limit}")
        extra = rnd.random()
        if extra < 0.1:
            args.append("-H")
        elif extra < 0.2 and bg:
            args.append("DEPENDENCY")  # filled in with a running background job's id
        elif extra < 0.35 and dbd:
            args.append("--qos=lim")
        elif extra < 0.45 and resv:
            args.append("--reservation=agree")
        pend.append(Job(f"p{j}", args, part))
    rnd.shuffle(pend)  # submission order is not priority order
    return Workload(seed, bg, pend, resv)


class Harness:
    def __init__(self, cluster, dbd: bool):
        self.c = cluster
        self.dbd = dbd
        self.runner = CommandRunner(env=cluster.env)
        self.debug = False
        self.compare_easy = False  # also score a plain EASY plan of the same snapshot

    def setup(self) -> None:
        conf = self.c.dir / "etc" / "slurm.conf"
        conf.write_text(re.sub(r"bf_interval=\d+", f"bf_interval={BF_INTERVAL}", conf.read_text()))
        self.c.run("scontrol", "reconfigure")
        if self.dbd:
            self.c.run("sacctmgr", "-i", "add", "qos", "lim", "MaxJobsPerUser=2", check=False)
            self.c.run("sacctmgr", "-i", "modify", "user", "root", "set", "qos+=lim", check=False)

    def _sbatch(self, job: Job, nice: int | None = None, dep: int | None = None) -> int:
        args = [a for a in job.args if a != "DEPENDENCY"]
        if dep is not None and "DEPENDENCY" in job.args:
            args.append(f"--dependency=afterok:{dep}")
        if nice is not None:
            args.append(f"--nice={nice}")
        out = self.c.run("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-e", "/dev/null",
                         "-p", job.partition, "--ntasks-per-node=1", "-J", job.name, *args, "--wrap", "sleep 36000")
        return int(out.strip().split(";")[0])

    def _jobs(self) -> dict[int, dict[str, str]]:
        out = {}
        for line in self.c.run("scontrol", "-o", "show", "job").splitlines():
            d = dict(re.findall(r"(\w+)=(\S*)", line))
            if d.get("JobId", "").isdigit():
                out[int(d["JobId"])] = d
        return out

    def _wait(self, pred, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.3)
        return False

    def _parts(self, state: str) -> None:
        for p in ("gpu", "long"):
            self.c.run("scontrol", "update", f"PartitionName={p}", f"State={state}")

    def cleanup(self) -> None:
        self.c.run("scancel", "--user=root", check=False)
        self.c.run("scontrol", "delete", "ReservationName=agree", check=False)
        self._parts("UP")
        self._wait(lambda: not self.c.run("squeue", "-h", "-o", "%i", check=False).strip(), 60)
        # COMPLETING and PLANNED (a backfill plan left over) clear within a cycle or two
        self._wait(lambda: not {"comp", "plnd"} & set(self.c.run("sinfo", "-h", "-N", "-o", "%t", check=False).split()),
                   30)

    def run(self, wl: Workload) -> Outcome:
        began = time.monotonic()
        for j in wl.background:
            j.job_id = self._sbatch(j)
        ids = [j.job_id for j in wl.background]
        if not self._wait(lambda: all(self._jobs().get(i, {}).get("JobState") == "RUNNING" for i in ids), 30):
            stuck = [i for i in ids if self._jobs().get(i, {}).get("JobState") != "RUNNING"]
            self.c.run("scancel", *map(str, stuck), check=False)
        self._parts("DOWN")
        if wl.reservation:
            node, ahead = wl.reservation
            self.c.run("scontrol", "create", "reservation", "ReservationName=agree", f"StartTime=now+{ahead}minutes",
                       "Duration=60", f"Nodes={node}", "Users=root", "Flags=IGNORE_JOBS")
        running_bg = [j.job_id for j in wl.background if self._jobs().get(j.job_id, {}).get("JobState") == "RUNNING"]
        order = list(range(len(wl.pending)))
        random.Random(wl.seed * 7 + 1).shuffle(order)  # priority rank of each job
        for rank, j in zip(order, wl.pending):
            j.job_id = self._sbatch(j, nice=-(len(wl.pending) - rank) * NICE_STEP,
                                    dep=running_bg[rank % len(running_bg)] if running_bg else None)
        time.sleep(1.0)  # priorities are set at submission; give the controller a moment
        poller = Poller(CliSource(runner=self.runner, timeout=15, skip=("fairshare", "topology")))
        if not poller.poll_once():
            raise RuntimeError(f"poll failed: {poller.statuses}")
        snap = poller.current()
        cfg = parse_scontrol_config(self.c.run("scontrol", "show", "config"))
        qos = parse_sacctmgr_qos(self.c.run("sacctmgr", "-P", "show", "qos", QOS_FORMAT, check=False)) if self.dbd else []
        snap = dataclasses.replace(
            snap, config=cfg, qos=tuple(qos),
            partitions=tuple(dataclasses.replace(p, state="UP") for p in snap.partitions))
        now = time.time()
        doc = backfill_json(snap, now)
        easy_doc = backfill_json(dataclasses.replace(snap, config=None, qos=()), now) if self.compare_easy else None
        self._parts("UP")
        time.sleep(2 * BF_INTERVAL + 1)
        after = self._jobs()
        slurm_start = parse_squeue_start(self.c.run("squeue", "-h", "-t", "PD", "--start", "-o", "%i|%S"))
        out = self._score(wl, doc, after, slurm_start, now)
        if easy_doc is not None:
            out.easy = self._score(wl, easy_doc, after, slurm_start, now)
        if self.debug:
            self._dump(wl, doc, after, now)
        self.cleanup()
        out.seconds = time.monotonic() - began
        return out

    def _score(self, wl: Workload, doc: dict, after: dict, slurm_start: dict, now: float) -> Outcome:
        names = {str(j.job_id): j.name for j in wl.pending}
        ours = {s["job_id"] for p in doc["partitions"] for s in p["startable"] if s["job_id"] in names}
        slurm = {str(j.job_id) for j in wl.pending if after.get(j.job_id, {}).get("JobState") in ("RUNNING", "COMPLETED")}
        whys = {w["job_id"]: w for p in doc["partitions"] for w in p["why"]}
        out = Outcome(wl.seed, ours, slurm, [])
        for p in doc["partitions"]:
            top = p["top_job"]
            if top is None or top["job_id"] not in names or p["partition"] not in ("gpu", "long"):
                continue
            out.tops.append((p["partition"], top["job_id"], top["shadow_time"], slurm_start.get(top["job_id"])))
        for jid in sorted(ours ^ slurm, key=int):
            a = after.get(int(jid), {})
            ours_msg = "; ".join(r["message"] for r in whys.get(jid, {}).get("reasons", [])
                                 if r["code"] != "expected_start")[:300]
            if jid in ours:
                reason = a.get("Reason", "?")
                rule = RULES.get(reason.split(",")[0], reason)
                out.disagreements.append(f"seed {wl.seed} job {jid} ({names[jid]}, {a.get('Partition')}): gangwatch "
                                         f"startable, Slurm left it {a.get('JobState')} ({reason}): rule: {rule}; "
                                         f"gangwatch: {ours_msg}")
            else:
                by = a.get("Scheduler", "?")
                rule = ("main scheduler: priority order within the partition, without regard to reservations "
                        "made for jobs of other partitions" if by == "Main" else
                        "backfill: Slurm found room we did not (node choice of reservations, see gangwatch's reason)")
                out.disagreements.append(f"seed {wl.seed} job {jid} ({names[jid]}, {a.get('Partition')}): Slurm started "
                                         f"it (Scheduler={by}) on {a.get('NodeList')}; rule: {rule}; gangwatch: {ours_msg}")
        for part, jid, t_ours, t_slurm in out.tops:
            if t_slurm is None or abs(t_ours - t_slurm) > BF_RESOLUTION:
                a = after.get(int(jid), {})
                prio = int(a.get("Priority", 0) or 0)
                limited = [str(j.job_id) for j in wl.pending
                           if after.get(j.job_id, {}).get("Reason", "").startswith("QOS")
                           and int(after[j.job_id].get("Priority", 0) or 0) > prio]
                ours_nodes = next((p["top_job"]["node_list"] for p in doc["partitions"]
                                   if p["top_job"] and p["top_job"]["job_id"] == jid), "?")
                if a.get("JobState") != "PENDING":
                    rule = f"Slurm started it ({a.get('Scheduler')}): its main scheduler found room now"
                elif limited:
                    rule = (f"(likely) higher-priority job(s) {', '.join(limited)} held by a QOS limit: Slurm's "
                            "backfill appears to keep nodes for them, gangwatch reserves nothing for a limit-held job")
                elif t_slurm is not None and t_slurm > t_ours:
                    rule = ("(likely) backfill.c keeps a job's estimate from an earlier cycle when a later one is "
                            "worse (orig_start_time), or its will-run test stopped early (more than 200 jobs in a "
                            "batch, 2 s): neither is modelled; gangwatch models the will-run batches, the node "
                            "map's rounding to bf_resolution, the later_start retries and the next cycle")
                else:
                    rule = ("gangwatch plans it later than Slurm: a higher-priority job's reservation sits on "
                            "nodes where Slurm's node selection put it elsewhere (node weight, consecutive runs "
                            "among the nodes free at its start)")
                out.disagreements.append(
                    f"seed {wl.seed} top job {jid} of {part}: gangwatch reserves {t_ours - now:+.0f} s from now on "
                    f"{ours_nodes}, " + ("Slurm gives no expected start" if t_slurm is None else
                                         f"Slurm {t_slurm - now:+.0f} s on {a.get('SchedNodeList', '-')}")
                    + f" (Slurm: {a.get('JobState')}, {a.get('Reason')}); rule: {rule}")
        return out

    def _dump(self, wl: Workload, doc: dict, after: dict, now: float) -> None:
        whys = {w["job_id"]: w for p in doc["partitions"] for w in p["why"]}
        for j in sorted(wl.pending, key=lambda j: -int(after.get(j.job_id, {}).get("Priority", 0) or 0)):
            a, w = after.get(j.job_id, {}), whys.get(str(j.job_id), {})
            print(f"  {j.job_id} {j.name} {j.partition} {' '.join(j.args)} | ours {w.get('state')} "
                  f"{(w.get('expected_start') or {}).get('time')} {(w.get('expected_start') or {}).get('nodes')} | "
                  f"slurm {a.get('JobState')} {a.get('Reason')} {a.get('Scheduler')} start={a.get('StartTime')} "
                  f"sched={a.get('SchedNodeList')} nodes={a.get('NodeList')} prio={a.get('Priority')}")
        for j in wl.background:
            a = after.get(j.job_id, {})
            print(f"  bg {j.job_id} {' '.join(j.args)} {a.get('JobState')} end={a.get('EndTime')}")
        print("  now", time.strftime("%H:%M:%S", time.gmtime(now)), "resv", wl.reservation)


def summary(outcomes: list[Outcome]) -> dict:
    tp = sum(len(o.ours & o.slurm) for o in outcomes)
    n_ours = sum(len(o.ours) for o in outcomes)
    n_slurm = sum(len(o.slurm) for o in outcomes)
    with_top = [o for o in outcomes if o.tops]
    errors = [abs(t - s) for o in outcomes for _, _, t, s in o.tops if s is not None]
    return {
        "workloads": len(outcomes),
        "precision": tp / n_ours if n_ours else 1.0,
        "recall": tp / n_slurm if n_slurm else 1.0,
        "startable_ours": n_ours, "started_by_slurm": n_slurm, "agreed": tp,
        "top_within_bf_resolution": sum(o.top_ok for o in with_top) / len(with_top) if with_top else 1.0,
        "workloads_with_top": len(with_top),
        "top_error_median_s": sorted(errors)[len(errors) // 2] if errors else None,
        "top_error_max_s": max(errors) if errors else None,
        "disagreements": [d for o in outcomes for d in o.disagreements],
    }


def report(s: dict) -> str:
    lines = [f"workloads {s['workloads']}: startable now precision {s['precision']:.3f}, recall {s['recall']:.3f} "
             f"(gangwatch {s['startable_ours']}, Slurm started {s['started_by_slurm']}, both {s['agreed']})",
             f"top job's expected start within bf_resolution ({BF_RESOLUTION} s) in "
             f"{s['top_within_bf_resolution']:.0%} of {s['workloads_with_top']} workloads with a top job; "
             f"error median {s['top_error_median_s']} s, max {s['top_error_max_s']} s",
             f"disagreements: {len(s['disagreements'])}"]
    lines += ["  " + d for d in s["disagreements"]]
    return "\n".join(lines)
