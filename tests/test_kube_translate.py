"""The kube-exporter's pure parts: quantities, the snapshot built with and without its memo, the
ClusterRole against the resources read, the generated metric table in docs/kube-exporter.md."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors.kube.metrics import metric_table_markdown
from collectors.kube.quantity import parse_quantity
from collectors.kube.resources import RESOURCES
from collectors.kube.translate import build, fit_gap
from collectors.kube.trim import trim_pod
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))


@pytest.mark.parametrize("text,value", [("3500m", 3.5), ("16Gi", 16 * 2 ** 30), ("4", 4.0), ("1e3", 1000.0),
                                        ("100M", 1e8), (8, 8.0), ("", None), ("lots", None), (None, None), (True, None)])
def test_quantities(text, value):
    assert parse_quantity(text) == value


def test_fit_gap_names_what_is_missing():
    free = {"a": {"nvidia.com/gpu": 8.0}, "b": {"nvidia.com/gpu": 4.0}}
    assert fit_gap(free, {"nvidia.com/gpu": 8.0}, 3) == (1, [("nvidia.com/gpu", 12.0)])
    # enough in total but fragmented: 2 pods of 6 on nodes with 8 and 4 free
    assert fit_gap(free, {"nvidia.com/gpu": 6.0}, 2) == (1, [("nvidia.com/gpu", 6.0)])
    assert free == {"a": {"nvidia.com/gpu": 8.0}, "b": {"nvidia.com/gpu": 4.0}}  # only read


def _dump(snap, view):
    return snap.to_dict(), [g for g in view.gangs]


def test_memoised_rebuild_equals_a_fresh_build():
    import bench_kube

    bench_kube.GROUPS, bench_kube.NODES = 300, 60
    cache = bench_kube.warm_cache()
    status = bench_kube.STATUS
    memo: dict = {}
    first = build(cache, status, 1000.0, memo=memo)
    assert _dump(*first) == _dump(*build(cache, status, 1000.0))
    # a pod of a pending gang is scheduled and crash-loops; a running group's pod is deleted
    pods = list(cache["pods"])
    i = next(k for k, p in enumerate(pods) if not p["node"])
    pods[i] = dict(pods[i], node="n0", phase="Running", waiting=("CrashLoopBackOff",))
    del pods[0]
    cache = dict(cache, pods=pods)
    again = build(cache, status, 1000.0, memo=memo)
    fresh = build(cache, status, 1000.0)
    assert _dump(*again) == _dump(*fresh)
    assert _dump(*again) != _dump(*first)
    partial = [g for g in again[1].gangs if g.partial]
    assert len(partial) == 1 and partial[0].name == "pg0"
    # the served document: converted again only where the objects changed, equal to a fresh one
    import dataclasses
    import json

    from collectors.kube.exporter import PlainMemo, snapshot_document

    doc_memo = PlainMemo()
    before = snapshot_document(*first, 1000.0, doc_memo)
    after = snapshot_document(*again, 1000.0, doc_memo)
    plain = dict(again[0].to_dict(1000.0), kube=dataclasses.asdict(again[1]))
    assert json.dumps(after) == json.dumps(plain) == json.dumps(snapshot_document(*again, 1000.0))
    kept = sum(a is b for a, b in zip(before["kube"]["gangs"], after["kube"]["gangs"]))
    assert 0 < kept < len(after["kube"]["gangs"])  # unchanged gangs reuse their dicts, changed ones do not


def test_trim_pod_keeps_what_is_read_and_survives_junk():
    p = trim_pod({"metadata": {"name": "x", "namespace": "n", "annotations": {"scheduling.k8s.io/group-name": "g"}},
                  "spec": {"nodeName": "a", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                                                          "junk", {"resources": {"requests": {"cpu": "500m"}}}]},
                  "status": {"phase": "Running", "containerStatuses": [{"restartCount": 3}, None]}})
    assert (p["group"], p["node"], p["requests"], p["restarts"]) == ("g", "a", {"nvidia.com/gpu": 2.0, "cpu": 0.5}, 3)
    assert trim_pod({"metadata": None, "spec": "x", "status": []})["name"] == ""


def test_clusterrole_grants_exactly_the_resources_read():
    role = next(yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "clusterrole.yaml").read_text()))
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {(r.group, r.plural) for r in RESOURCES}
    assert all(sorted(rule["verbs"]) == ["get", "list", "watch"] for rule in role["rules"])
    doc = (REPO / "docs" / "kube-exporter.md").read_text()
    assert yaml.safe_dump(role["rules"]) == yaml.safe_dump(
        yaml.safe_load(doc.split("```yaml")[1].split("```")[0])["rules"])
    # the README's deployment step names the same resources per API group
    readme = " ".join((REPO / "README.md").read_text().split())
    for group in dict.fromkeys(r.group for r in RESOURCES):
        plurals = ", ".join(r.plural for r in RESOURCES if r.group == group)
        assert f"`{group or chr(34) * 2}`: {plurals}" in readme, (group, plurals)


def test_docs_metric_table_is_generated():
    assert metric_table_markdown() in (REPO / "docs" / "kube-exporter.md").read_text()


def test_build_without_status_or_queues_never_raises():
    objs = {"nodes": [], "pods": [], "podgroups": [{"metadata": {"name": "a", "namespace": "n"}, "spec": {}},
                                                   {"metadata": "junk"}, {}],
            "workloads": [{"metadata": {"name": "w", "namespace": "n"}, "spec": {"podSets": "junk"}}]}
    status = {"podgroups": {"ok": True}, "workloads": {"ok": True}, "queues": {"ok": False, "error": "queues: forbidden: x", "absent": True}}
    snap, view = build(objs, status, time.time())
    assert [j.reason for j in snap.jobs] == ["NoStatus", "NoStatus", "NoStatus", "NoStatus"]
    assert [(e.source, e.severity) for e in snap.errors] == [("kube queues", "warning")]


def test_a_kubernetes_gang_gets_the_same_verdict_as_the_slurm_job_on_its_nodes():
    """Gang health joins the node metrics: a PodGroup whose pods run on a simulated Slurm job's nodes,
    holding the same GPUs, is judged from the same window exactly as that job is."""
    from dashboard.analysis.diagnose import diagnose
    from dashboard.analysis.sim import SimConfig, Simulation
    from dashboard.sources.simulated import SimRecorder

    sim = Simulation(SimConfig(nodes=16, seed=3, start=1_767_225_600.0, prefill=False,
                               faults="ost_slow@10m+30m,ib_congestion@12m+30m"))
    rec = SimRecorder(sim, capacity=81)
    rec.step(60)
    win = rec.window()
    running = [j for j in rec.jobs() if j.state == "RUNNING" and len(j.nodes) >= 2 and j.gpus]
    taken_at = sim.t
    slurm_verdicts = {v.jobid: v for v in diagnose(win, running).verdicts}
    judged = [j for j in running if slurm_verdicts[str(j.job_id)].state != "insufficient_data"]
    assert {slurm_verdicts[str(j.job_id)].state for j in judged} - {"progressing"}, "the fault shows in some job"
    objs = {"nodes": [], "pods": [], "podgroups": [], "queues": []}
    for j in judged:
        name = f"job{j.job_id}"
        objs["podgroups"].append({"metadata": {"name": name, "namespace": "ml", "uid": name},
                                  "spec": {"minMember": len(j.allocations), "queue": "default"},
                                  "status": {"phase": "Running"}})
        for a in j.allocations:
            objs["pods"].append(trim_pod({
                "metadata": {"name": f"{name}-{a.node}", "namespace": "ml",
                             "annotations": {"scheduling.k8s.io/group-name": name}},
                "spec": {"nodeName": a.node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(a.gpus or 0)}}}]},
                "status": {"phase": "Running"}}))
    kube_snap, view = build(objs, {"pods": {"ok": True}, "podgroups": {"ok": True}}, taken_at)
    by_name = {j.name: j for j in kube_snap.jobs}
    kube_verdicts = {v.jobid: v for v in diagnose(win, list(kube_snap.jobs)).verdicts}
    for j in judged:
        kj = by_name[f"ml/job{j.job_id}"]
        assert (kj.nodes, kj.gpus) == (tuple(sorted(j.nodes)), j.gpus)
        ours, theirs = kube_verdicts[str(kj.job_id)], slurm_verdicts[str(j.job_id)]
        assert (ours.state, ours.culprit) == (theirs.state, theirs.culprit)


def test_kubeconfig_inline_data_token_file_and_in_cluster(tmp_path):
    import base64

    from collectors.kube.api import in_cluster, load_kubeconfig

    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    (tmp_path / "tok").write_text("s3cret\n")
    cfg = tmp_path / "config"
    cfg.write_text(yaml.safe_dump({
        "current-context": "b", "contexts": [{"name": "a", "context": {"cluster": "x", "user": "u"}},
                                             {"name": "b", "context": {"cluster": "y", "user": "v"}}],
        "clusters": [{"name": "y", "cluster": {"server": "https://10.0.0.1:6443/",
                                               "certificate-authority-data": base64.b64encode(pem).decode()}}],
        "users": [{"name": "v", "user": {"tokenFile": "tok"}}]}))
    c = load_kubeconfig(str(cfg))
    assert (c.server, c.token, Path(c.ca_file).read_bytes()) == ("https://10.0.0.1:6443", "s3cret", pem)
    with pytest.raises(ValueError, match="no cluster named 'x'"):
        load_kubeconfig(str(cfg), "a")
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster(str(tmp_path), env={})
    (tmp_path / "token").write_text("sa")
    assert in_cluster(str(tmp_path), env={"KUBERNETES_SERVICE_HOST": "fd00::1"}).server == "https://[fd00::1]:443"


def test_preemptor_named_with_its_queue():
    """Kueue (0.9+) names the preemptor's UID in the Preempted condition: the gang says who and from which queue."""
    def wl(name, uid, queue, conds, admitted_cq=None):
        st = {"conditions": conds}
        if admitted_cq:
            st["admission"] = {"clusterQueue": admitted_cq}
        return {"metadata": {"name": name, "namespace": "ml", "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 2, "requests": {"cpu": 4.0}}]}, "status": st}

    victim = wl("victim", "u-1", "lq-a", [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate a workload"},
        {"type": "Preempted", "status": "True", "reason": "InCohortReclamation",
         "message": "Preempted to accommodate a workload (UID: 0f3c9a2e-1111-2222-3333-444455556666, JobUID: x) due to "
                    "reclamation within the cohort"}])
    winner = wl("winner", "0f3c9a2e-1111-2222-3333-444455556666", "lq-b",
                [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}], admitted_cq="cq-b")
    lqs = [{"metadata": {"name": "lq-a", "namespace": "ml"}, "spec": {"clusterQueue": "cq-a"}},
           {"metadata": {"name": "lq-b", "namespace": "ml"}, "spec": {"clusterQueue": "cq-b"}}]
    ok = {k: {"ok": True} for k in ("workloads", "localqueues", "pods")}
    snap, view = build({"workloads": [victim, winner], "localqueues": lqs}, ok, 0.0)
    g = {x.name: x for x in view.gangs}
    assert (g["victim"].preempted_by, g["victim"].preemptor_queue) == ("ml/winner", "cq-b")
    assert g["victim"].why[0].endswith("(by ml/winner in ClusterQueue cq-b)")
    assert {j.name: (j.state, j.reason, j.node_count) for j in snap.jobs} == {
        "ml/victim": ("PENDING", "Preempted", 2), "ml/winner": ("RUNNING", "None", 2)}
