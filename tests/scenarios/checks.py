"""Does each built scenario show what its signature claims? Checked on the physical arrays.

`violations(built)` returns what is wrong (empty when the scenario holds its documented shape), so a
change to a painter that loses the physics fails the catalogue test. These read the model, never a
rendered bundle, and say nothing about how gangwatch should judge it.
"""

from __future__ import annotations

import numpy as np

from .build import Built
from .model import Cluster


def _mean(a) -> float:
    a = np.asarray(a, float)
    return float(np.nanmean(a)) if a.size and not np.isnan(a).all() else float("nan")


def _gpu(c: Cluster, t: dict, arr: np.ndarray, m: np.ndarray, only=None) -> np.ndarray:
    vals = [arr[c.names.index(node), g][m] for node, gs in t["gpus"].items() for g in gs
            if only is None or (node, g) in only]
    return np.array(vals)


def _ports(c: Cluster, t: dict, arr: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.array([arr[c.names.index(node), p][m] for node in t["nodes"] for p in range(c.P)])


def _typical_wait(c: Cluster, exclude: list[str]) -> float:
    """The cluster's typical node: median over the other nodes of their mean port wait fraction."""
    others = [i for i, n in enumerate(c.names) if n not in exclude and c.ib_wait[i].mean() > 0]  # fabric users
    per_node = [c.ib_wait[i].mean() / c.wait_ticks_per_s for i in others]
    return float(np.median(per_node)) if per_node else float("nan")


def _parse_port(name: str) -> tuple[str, str]:
    node, rest = name.split(":")
    return node, rest.split("/")[0]


def culprit_problem(c: Cluster, t: dict) -> str | None:
    """Is the truth's culprit named by the conventions in README.md, and does it exist?"""
    kind, name = t.get("culprit_kind"), t.get("culprit")
    if t["expected"] == "progressing":
        return None if name is None and kind is None else "a healthy job has a culprit"
    if kind == "job":
        ok = name == t["jobid"]
    elif kind == "node" and t.get("signature", "").startswith("pfc-storm"):
        # a pause storm's source is on a leaf switch the job uses, one of its nodes or not
        ok = name in c.names and c.leaf_of[c.names.index(name)] in {c.leaf_of[c.names.index(n)] for n in t["nodes"]}
    elif kind == "node":
        ok = name in t["nodes"]
    elif kind == "gpu":
        node, _, g = name.rpartition(":gpu")
        ok = node in t["nodes"] and g.isdigit() and int(g) in t["gpus"][node]
    elif kind == "port":
        node, _, rest = name.partition(":")
        dev, _, p = rest.partition("/")
        ok = node in t["nodes"] and dev in c.devices and p == "1"
    elif kind == "target":
        ok = name in c.targets
    elif kind == "filesystem":
        ok = name == c.fs_name
    else:
        ok = False
    return None if ok else f"culprit {name!r} ({kind}) breaks the conventions"


def violations(b: Built) -> list[str]:
    c = b.cluster
    out: list[str] = [f"{b.scenario.name}/{b.seed} job {t['jobid']}: {p}" for t in b.truth
                      if (p := culprit_problem(c, t))]
    for t in b.truth:
        if not t.get("focus"):
            continue
        sig = t["signature"]
        if sig == "mig-slices":  # GPU indices are MIG devices; check the node instead
            rows = [c.names.index(n) for n in t["nodes"]]
            if not np.isnan(c.util[rows]).all():
                out.append(f"{b.scenario.name}/{b.seed} job {t['jobid']}: GPU utilisation present under MIG")
            continue
        live = c.times >= t["start"]
        on = t.get("onset")
        post = live & (c.times >= on) if on is not None else live
        pre = live & (c.times < on) if on is not None else live & False

        def need(cond: bool, what: str) -> None:
            if not cond:
                out.append(f"{b.scenario.name}/{b.seed} job {t['jobid']} ({sig}): {what}")

        # on a node shared with another job, node-wide series (ports, filesystem, PSI) carry both jobs
        shared = any(o is not t and set(o["nodes"]) & set(t["nodes"]) for o in b.truth)
        util, sm = _gpu(c, t, c.util, post), _gpu(c, t, c.sm, post)
        tx_post, tx_pre = _ports(c, t, c.ib_tx, post), _ports(c, t, c.ib_tx, pre)
        typical = _typical_wait(c, t["nodes"])
        wait_post = _ports(c, t, c.ib_wait, post) / c.wait_ticks_per_s
        rows = [c.names.index(n) for n in t["nodes"]]
        if sig in ("nccl-spinning", "host-waiting"):
            ratio = np.median(wait_post.mean(axis=1)) / typical
            need(not typical > 0 or 100 * 0.5 <= ratio <= 1000 * 3, f"transmit-wait {ratio:.0f}x the typical node, not 100-1000x")
            need(tx_post.mean() <= 0.35 * tx_pre.mean(), "data rate did not fall")
            node, dev = _parse_port(t["culprit"])
            hot = wait_post[t["nodes"].index(node) * c.P + c.devices.index(dev)].mean()
            need(hot >= wait_post.mean(axis=1).max() - 1e-12, "culprit port is not the one waiting most")
            if sig == "nccl-spinning":
                need(_mean(util) >= 0.95 and _mean(sm) <= 0.15, f"util {_mean(util):.2f} / SM {_mean(sm):.2f}")
            else:
                need(_mean(util) <= 0.12 and _mean(sm) <= 0.05, f"util {_mean(util):.2f} / SM {_mean(sm):.2f}")
                need(_mean(c.psi_io[rows][:, post]) <= 0.05, "I/O pressure present")
        elif sig == "flapping-link":
            node, dev = _parse_port(t["culprit"])
            n, p = c.names.index(node), c.devices.index(dev)
            need(c.ib_down[n, p, post].sum() >= 2, "fewer than two link-down events")
            need(c.ib_symerr[n, p, post].sum() > 0, "no symbol errors")
            need((c.ib_state[n, p, post] == 1).any(), "port never seen down")
        elif sig == "pfc-storm":
            src = c.names.index(t["culprit"])
            need(c.fabric == "roce", "a pause storm on an InfiniBand fabric")
            need(c.storm[src][:, post].sum() > 0 and c.pause_tx[src][:, post].max() > 0, "the source never stormed")
            hit = [r for r in rows if c.leaf_of[r] == c.leaf_of[src] and r != src]
            need(not hit or c.paused[hit][:, :, post].mean() >= 0.1, "the source's leaf held the job's ports no pause")
            need(c.paused[:, :, pre].max(initial=0) == 0, "pauses before the onset")
            need(_mean(util) >= 0.95 and _mean(sm) <= 0.15, f"util {_mean(util):.2f} / SM {_mean(sm):.2f}")
            need(tx_post.mean() <= 0.35 * tx_pre.mean(), "data rate did not fall")
        elif sig == "loader-bound":
            jp = np.array([c.job_psi[(int(t["jobid"]), r)][post] for r in rows])
            need(_mean(jp) >= 0.15, "the job's readers do not wait")
            rd_post, rd_pre = c.fs_read[rows][:, :, post].sum(1).mean(), c.fs_read[rows][:, :, pre].sum(1).mean()
            need(shared or rd_post <= 0.6 * rd_pre, "read rate not below the job's past")
            need(_mean(util) <= 0.5, "GPUs not starving")
        elif sig == "target-slow":
            k = c.targets.index(t["culprit"])
            lat = c.fs_lat[rows][:, :, post].mean(axis=(0, 2))
            others = np.median(np.delete(lat, k))
            need(lat[k] >= 15 * others, f"target only {lat[k] / others:.1f}x its peers")
            need(_mean(c.psi_io[rows][:, post]) >= 0.1, "readers not waiting")
        elif sig in ("thermal", "power-capped"):
            if t["culprit_kind"] == "gpu":
                node, g = t["culprit"].split(":gpu")
                slow = {(node, int(g))}
            else:
                node = t["culprit"]
                slow = {(node, g) for g in t["gpus"][node]}
            clk = _gpu(c, t, c.clock, post, slow)
            need(_mean(clk) <= 0.85 * c.model.max_sm_mhz, "culprit clock not lowered")
            thr = _gpu(c, t, c.throttle.astype(float), post, slow)
            need((thr > 0).all(), "no throttle reason while slow")
            peers = {(n, g) for n, gs in t["gpus"].items() for g in gs} - slow
            need(_mean(_gpu(c, t, c.sm, post, peers)) < _mean(_gpu(c, t, c.sm, pre, peers)) or not pre.any(),
                 "peers did not slow to the culprit's pace")
        elif sig == "slow-nic":
            n = c.names.index(t["culprit"])
            need((c.ib_rate[n][:, post] <= 0.5 * c.link_bytes).all(), "culprit link not degraded")
            peers = [c.names.index(x) for x in t["nodes"] if x != t["culprit"]]
            need(all((c.ib_rate[q][:, post] == c.link_bytes).all() for q in peers), "peer link degraded")
        elif sig == "nccl-hang":
            dead = set(t["culprit_alternates"])  # a node whose ranks exited: its GPUs are free, not spinning
            live_cells = {(n, g) for n, gs in t["gpus"].items() if n not in dead for g in gs}
            util, sm = _gpu(c, t, c.util, post, live_cells), _gpu(c, t, c.sm, post, live_cells)
            need(_mean(util) >= 0.95 and _mean(sm) <= 0.03, f"util {_mean(util):.2f} / SM {_mean(sm):.2f}")
            need(shared or tx_post.mean() <= 1e5 + c.fs_read[rows][:, :, post].sum(1).mean(), "traffic during a hang")
        elif sig == "deadlock-idle":
            need(_mean(util) == 0 and _mean(sm) == 0, "GPUs busy during a deadlock")
            need(_gpu(c, t, c.fb, post).min() >= c.idle_fb_mib + 1024, "memory not held")
            need(shared or tx_post.mean() <= 1e5 + c.fs_read[rows][:, :, post].sum(1).mean(), "traffic during a deadlock")
        elif sig == "never-used":
            need(_gpu(c, t, c.util, live).max() == 0, "a GPU was used")
            need(np.abs(_gpu(c, t, c.fb, live) - c.idle_fb_mib).max() <= max(30, 0.1 * c.idle_fb_mib),
                 "framebuffer above the idle level")
            need(_gpu(c, t, c.procs.astype(float), live).max() == 0, "a process on the GPUs")
            need(c.fs_read[rows][:, :, live].sum() > 0, "the node reads nothing")
        elif sig == "left-idle":
            last = c.times == c.times[-1]
            u, f = _gpu(c, t, c.util, last).ravel(), _gpu(c, t, c.fb, last).ravel()
            idle = (u == 0) & (np.abs(f - c.idle_fb_mib) <= max(30, 0.1 * c.idle_fb_mib))
            need(idle.any(), "no GPU left idle at the end")
        elif sig == "moe-busy-fabric":
            ratio = np.median(_ports(c, t, c.ib_wait, live).mean(axis=1) / c.wait_ticks_per_s) / typical
            need(not typical > 0 or ratio >= 10, f"transmit-wait only {ratio:.0f}x typical")
            need(_mean(_gpu(c, t, c.util, live)) >= 0.85, "GPUs not busy")
        elif sig == "warm-up":
            need(t["start"] > c.start, "job did not start inside the window")
        elif sig == "checkpoint":
            wr = c.fs_write[rows].sum(1).mean(0)
            need(wr.max() >= 0.3e9, "no checkpoint write burst")
        elif sig == "shared-node":
            need(len(t["nodes"]) == 1, "a shared-node job spans nodes")
    return out
