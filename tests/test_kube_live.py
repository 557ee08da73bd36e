"""kube-exporter against a real kube-apiserver (RBAC on) with the real Volcano and Kueue CRDs, and
objects whose status is written as the controllers write it, partly from the real status objects in
../shared/fixtures/k8s. Checks every gang's state, size, queue, reason and position; why pending
names the resource and the amount; RBAC forbidding one resource; hostile names; the API server gone."""

from __future__ import annotations

import copy
import time

import pytest
import yaml

from collectors.exposition import encode, iter_samples
from collectors.kube import exporter
from collectors.kube.api import Client, load_kubeconfig
from collectors.kube.cache import KubeCache
from collectors.kube.metrics import cache_families, snapshot_families
from collectors.kube.translate import ts
from collectors.slurm.metrics import cut_label
from collectors.slurm.model import Snapshot
from tests.conftest import FIXTURES, REPO
from tests.support.kube_apiserver import ApiServer, Objects, wait_for_binary

# the first test's setup may wait for the background build of the API server (tests/run-all.sh)
pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]
GPU = "nvidia.com/gpu"
HOSTILE = "evil-<script>alert(1)</script>"
# a ResourceList key: the CRDs validate names and quantities, not the keys of a resource map
HOSTILE_RESOURCE = 'evil.io/<img src=x onerror=alert(2)>"} 1\n# TYPE x counter\\' + "x" * 300


def fixture_yaml(rel: str) -> dict:
    """The fixtures' fragments use `...` for elided parts (not YAML): those lines are dropped."""
    text = (FIXTURES / "k8s" / rel).read_text()
    return yaml.safe_load("\n".join(line for line in text.splitlines() if line.strip() != "..."))


def meta(name, ns=None, **extra):
    m = {"name": name, **extra}
    if ns:
        m["namespace"] = ns
    return m


def node(name, gpus=8, ready=True, labels=None):
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta(name, labels=labels or {}),
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus), "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "512Gi", GPU: str(gpus), "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "reason": "KubeletReady" if ready else "KubeletNotReady",
                                       "message": "kubelet is posting ready status" if ready else "container runtime is down"}]}}


def pod(name, ns, gpus, node_name="", group="", owner_uid="", phase="Running", waiting=""):
    ann = {"scheduling.k8s.io/group-name": group} if group else {}
    m = meta(name, ns, annotations=ann)
    if owner_uid:
        m["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-" + name, "uid": owner_uid, "controller": True}]
    spec = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "4", GPU: str(gpus)},
                                                                          "limits": {GPU: str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    st = {"phase": phase}
    if waiting:
        st["containerStatuses"] = [{"name": "c", "ready": False, "restartCount": 7, "image": "busybox", "imageID": "",
                                    "state": {"waiting": {"reason": waiting}}}]
    if phase == "Pending" and not node_name:
        st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec}, st


def podgroup(name, ns, queue, min_member, gpus_total, status):
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta(name, ns),
            "spec": {"minMember": min_member, "queue": queue,
                     "minResources": {"cpu": str(4 * min_member), GPU: str(gpus_total)}}, "status": status}


def unschedulable(msg):
    return {"phase": "Pending", "conditions": [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                                                "message": msg, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def workload(name, ns, queue, cpu, priority, owner_uid="00000000-0000-0000-0000-00000000000%d"):
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": meta(name, ns, ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                                         "uid": owner_uid, "controller": True}]),
            "spec": {"queueName": queue, "priority": priority, "podSets": [{
                "name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpu), "memory": "200Mi"}}}]}}}]}}


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory, fixtures_dir):
    binary, why = wait_for_binary()
    if binary is None:
        # a build that failed is an error; no build at all (a plain checkout) is a skip
        (pytest.fail if why.startswith("kube-apiserver build failed") else pytest.skip)(why)
    srv = ApiServer(binary, tmp_path_factory.mktemp("kube")).start()
    try:
        populate(srv, fixtures_dir)
        yield srv
    finally:
        srv.cleanup()


def populate(srv: ApiServer, fixtures):
    o = Objects(srv.http("admin"))
    o.install_crds(fixtures)
    o.apply_yaml(REPO / "deploy" / "kubernetes" / "clusterrole.yaml")
    o.check(o.c.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "gw-exporter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gangwatch-kube-exporter"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "gw-exporter"}]}))
    # the limited user: the exporter's role without Volcano queues
    role = yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "clusterrole.yaml").read_text()).__next__()
    role = copy.deepcopy(role)
    role["metadata"]["name"] = "gw-limited"
    for rule in role["rules"]:
        rule["resources"] = [r for r in rule["resources"] if not (rule["apiGroups"] == ["scheduling.volcano.sh"] and r == "queues")]
    o.check(o.c.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", json=role))
    o.check(o.c.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "gw-limited"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gw-limited"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "gw-limited"}]}))
    for ns in ("team-a", "team-b"):
        o.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for i in (1, 2, 3):
        o.check(o.c.post("/api/v1/nodes", json=node(f"gpu-node-{i}", labels={"topology.kubernetes.io/zone": "z1"})))
    o.check(o.c.post("/api/v1/nodes", json=node("gpu-node-4", ready=False)))
    # Volcano queues: the real example queue, one with GPU capability, one closed, one full
    q = fixture_yaml("volcano/objects/queue-open.website-concepts.yaml")
    for k in ("creationTimestamp", "generation", "resourceVersion", "uid"):
        q["metadata"].pop(k)
    o.create("/apis/scheduling.volcano.sh/v1beta1/queues", {k: v for k, v in q.items() if k != "status"}, q["status"])
    vq = "/apis/scheduling.volcano.sh/v1beta1/queues"
    o.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "research"},
                  "spec": {"weight": 1, "capability": {GPU: "64"}, "deserved": {GPU: "16"}}},
             {"state": "Open", "allocated": {GPU: "20"}})
    # Volcano's installer creates the default queue
    o.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
                  "spec": {"weight": 1, "reclaimable": True}}, {"state": "Open"})
    o.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "closed-q"},
                  "spec": {"weight": 1}}, {"state": "Closed"})
    o.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "small"},
                  "spec": {"weight": 1, "capability": {GPU: "8"}}}, {"state": "Open", "allocated": {GPU: "8"}})
    o.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "odd-q"},
                  "spec": {"weight": 1, "capability": {HOSTILE_RESOURCE: "2"}}},
             {"state": "Open", "allocated": {HOSTILE_RESOURCE: "1"}})
    pg = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
    o.create(pg, podgroup("train-running", "team-a", "research", 2, 16, None),
             {"phase": "Running", "running": 2, "conditions": [{"type": "Scheduled", "status": "True",
                                                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    o.create(pg, podgroup("train-partial", "team-a", "research", 2, 8, None), {"phase": "Running", "running": 1})
    o.create(pg, podgroup("train-pending", "team-a", "research", 4, 32, None),
             unschedulable("4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, 4 minAvailable; "
                           "Pending: 4 Insufficient nvidia.com/gpu"))
    o.create(pg, podgroup("train-pending-2", "team-a", "research", 2, 16, None), {"phase": "Pending"})
    o.create(pg, podgroup("wait-closed", "team-a", "closed-q", 1, 8, None), {"phase": "Pending"})
    o.create(pg, podgroup("over-cap", "team-a", "small", 1, 8, None), {"phase": "Pending"})
    # Kubernetes names are DNS labels; what users control beyond them are messages, owners, labels
    o.create(pg, podgroup("evil-pg", "team-a", "closed-q", 1, 8, None), unschedulable(HOSTILE + '\n{x="y"} 1'))
    # the real PodGroups, verbatim but for server-owned metadata
    for rel in ("volcano/objects/podgroup-pending-notenoughresources.daocloud.yaml",
                "volcano/objects/podgroup-running-after-unschedulable.website-concepts.yaml"):
        real = fixture_yaml(rel)
        for k in ("creationTimestamp", "generation", "resourceVersion", "uid", "selfLink"):
            real["metadata"].pop(k, None)
        o.create("/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups", real)
    # Volcano Jobs: the real tutorial job (running), and one whose controller restarts it, owning a group
    vj = fixture_yaml("volcano/objects/vcjob-running.website-tutorial.yaml")
    o.create("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", {k: v for k, v in vj.items() if k != "status"},
             vj["status"])
    restarting = dict(vj, metadata={"name": "restarting-job", "namespace": "team-a"})
    made = o.create("/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs",
                    {k: v for k, v in restarting.items() if k != "status"},
                    {"state": {"phase": "Restarting", "reason": "PodFailed", "message": "pod worker-1 failed"},
                     "retryCount": 2, "minAvailable": 3})
    owned = podgroup("restarting-job-pg", "team-a", "default", 3, 0, None)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "restarting-job",
                                             "uid": made["metadata"]["uid"], "controller": True}]
    o.create(pg.replace("team-a", "team-a"), owned, {"phase": "Running", "running": 3})
    pods = [pod("run-0", "team-a", 8, "gpu-node-1", "train-running"), pod("run-1", "team-a", 8, "gpu-node-2", "train-running"),
            pod("part-0", "team-a", 4, "gpu-node-3", "train-partial"),
            pod("part-1", "team-a", 4, "gpu-node-3", "train-partial", phase="Running", waiting="CrashLoopBackOff")]
    pods += [pod(f"pend-{i}", "team-a", 8, group="train-pending", phase="Pending") for i in range(4)]
    pods.append(pod("kq-0", "team-a", 0, "gpu-node-3", owner_uid="00000000-0000-0000-0000-000000000001"))
    for body, st in pods:
        o.create("/api/v1/namespaces/team-a/pods", body, st)
    # Kueue: a flavor, a ClusterQueue with its usage, a LocalQueue, and Workloads with the real statuses
    o.create("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                                               "metadata": {"name": "default-flavor"},
                                                               "spec": {"nodeLabels": {"topology.kubernetes.io/zone": "z1"}}})
    o.create("/apis/kueue.x-k8s.io/v1beta2/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cluster-queue"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "9"}, {"name": "memory", "nominalQuota": "36Gi"}]}]}]}},
        {"flavorsReservation": [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "8", "borrowed": "0"},
                                                                          {"name": "memory", "total": "200Mi", "borrowed": "0"}]}],
         "flavorsUsage": [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "6", "borrowed": "0"},
                                                                    {"name": "memory", "total": "200Mi", "borrowed": "0"}]}],
         "pendingWorkloads": 2, "admittedWorkloads": 1, "reservingWorkloads": 2})
    o.create("/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "user-queue", "namespace": "team-a"},
        "spec": {"clusterQueue": "cluster-queue"}})
    wl = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{}/workloads"
    admitted = fixture_yaml("kueue/objects/workload-status-admitted.kueue-docs.yaml")["status"]
    admitted["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": [{"name": "main", "count": 1,
                                                                                     "flavors": {"cpu": "default-flavor"}}]}
    o.create(wl.format("team-a"), workload("wl-admitted", "team-a", "user-queue", 6, 50, "00000000-0000-0000-0000-000000000001"), admitted)
    quota = fixture_yaml("kueue/objects/workload-status-pending-insufficient-quota.kueue-docs.yaml")["status"]
    quota["resourceRequests"] = [{"name": "main", "resources": {"cpu": "3", "memory": "600Mi"}}]  # a list in the CRD
    quota["conditions"][0]["message"] = quota["conditions"][0]["message"] + " cluster-queue"
    o.create(wl.format("team-a"), workload("wl-quota", "team-a", "user-queue", 3, 100, "00000000-0000-0000-0000-000000000002"), quota)
    pre = fixture_yaml("kueue/objects/workload-status-preempted-then-pending.kueue-docs.yaml")["status"]
    o.create(wl.format("team-a"), workload("wl-preempted", "team-a", "user-queue", 10, 10, "00000000-0000-0000-0000-000000000003"), pre)
    checks = fixture_yaml("kueue/objects/workload-status-pending-admission-checks.kueue-docs.yaml")["status"]
    checks["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": [{"name": "main", "count": 1}]}
    # 1.20's structural schema reads the real `message: ""` as null against `type: string`
    checks["admissionChecks"][0]["message"] = "waiting for the ProvisioningRequest"
    o.create(wl.format("team-a"), workload("wl-checks", "team-a", "user-queue", 2, 20, "00000000-0000-0000-0000-000000000004"), checks)
    inad = fixture_yaml("kueue/objects/workload-status-inadmissible-missing-localqueue.kueue-docs.yaml")["status"]
    o.create(wl.format("team-b"), workload("wl-nolq", "team-b", "user-queue", 1, 0, "00000000-0000-0000-0000-000000000005"), inad)
    o.create(wl.format("team-b"), workload("evil-wl", "team-b", "user-queue", 1, 0), {})


def make_cache(srv: ApiServer, who: str) -> KubeCache:
    cache = KubeCache(Client(load_kubeconfig(str(srv.kubeconfig(who))), timeout=5), watch_timeout=30, retry=2.0,
                      min_rebuild=0.0)
    cache.start()
    assert cache.wait_synced(30), {k: r.error for k, r in cache.reflectors.items()}
    return cache


@pytest.fixture(scope="module")
def cache(apiserver):
    c = make_cache(apiserver, "exporter")
    yield c
    c.stop()


def gangs(cache):
    snap, view = cache.current()
    jobs = {j.job_id: j for j in snap.jobs}
    return snap, {g.name: (jobs[g.job_id], g) for g in view.gangs}, view


def test_every_resource_read_under_the_clusterrole(cache):
    h = cache.health(time.time())
    assert h["up"] is True
    assert {k: (r["ok"], r["error"]) for k, r in h["resources"].items() if not r["ok"]} == {}
    assert h["resources"]["workloads"]["version"] == "v1beta2"
    assert h["resources"]["podgroups"]["objects"] == 10 and h["resources"]["vcjobs"]["objects"] == 2


def test_volcano_gangs_state_size_queue_reason_position(cache):
    snap, g, _ = gangs(cache)
    run, rg = g["train-running"]
    assert (run.state, run.partition, run.nodes, run.gpus, rg.min_member, rg.partial) == \
        ("RUNNING", "research", ("gpu-node-1", "gpu-node-2"), 16, 2, False)
    assert [(a.node, a.gpus) for a in run.allocations] == [("gpu-node-1", 8), ("gpu-node-2", 8)]
    pend, pg = g["train-pending"]
    assert (pend.state, pend.reason, pend.node_count, pend.gpus, pg.position, pg.queue_pending) == \
        ("PENDING", "Unschedulable", 4, 32, 1, 2)
    assert pg.why[0].startswith("unschedulable: 4/4 tasks in gang unschedulable")
    # 4 pods of 8 GPUs; free: gpu-node-3 has 0 left (the partial gang holds 8), gpu-node-4 is not ready
    assert ("nvidia.com/gpu", "", 32.0) in pg.blocking
    assert any("missing 32 nvidia.com/gpu" in w for w in pg.why), pg.why
    p2, p2g = g["train-pending-2"]
    assert (p2g.position, [a.name for a in p2g.ahead]) == (2, ["team-a/train-pending"])
    assert g["wait-closed"][0].reason == "QueueClosed" and "queue closed-q is closed" in g["wait-closed"][1].why[0]
    over, og = g["over-cap"]
    assert over.reason == "QueueOverCapability"
    assert og.blocking == (("nvidia.com/gpu", "", 8.0),)
    assert "capability 8 with 8 allocated (0 free, 8 missing)" in og.why[0]
    part, partg = g["train-partial"]
    assert (part.state, part.state_flags, partg.partial, partg.pods_running, partg.pods_failing) == \
        ("RUNNING", ("PARTIAL",), True, 1, 1)
    assert any("CrashLoopBackOff" in w for w in partg.why)
    # the real objects: the daocloud gang waits unschedulable with its own message, the other runs
    real, realg = g["lm-mpi-job-9c571015-37c7-4a1a-9604-eaa2248613f2"]
    assert (real.state, real.reason, real.node_count, real.partition) == ("PENDING", "Unschedulable", 4, "default")
    assert "3/4 tasks in gang unschedulable" in realg.why[0]
    assert g["test"][0].state == "RUNNING"
    # what the owning Volcano Job's controller does with a group is said with the group
    assert "Volcano job restarting-job is restarting (retry 2): pod worker-1 failed" in g["restarting-job-pg"][1].why


def test_kueue_workloads_state_quota_checks_preemption_position(cache):
    snap, g, view = gangs(cache)
    adm, _ = g["wl-admitted"]
    assert (adm.state, adm.partition, adm.qos, adm.nodes) == ("RUNNING", "cluster-queue", "team-a/user-queue", ("gpu-node-3",))
    q, qg = g["wl-quota"]
    assert (q.state, q.reason, qg.position, qg.local_position) == ("PENDING", "InsufficientQuota", 1, 1)
    # needs cpu 3; nominal quota 9 with 8 reserved: 1 free, 2 missing
    assert qg.blocking == (("cpu", "default-flavor", 2.0),)
    assert any("blocked by cpu in flavor default-flavor of ClusterQueue cluster-queue: needs 3, nominal quota 9, "
               "8 reserved, missing 2" in w for w in qg.why), qg.why
    p, pg = g["wl-preempted"]
    assert (p.reason, pg.blocking, pg.position, [a.name for a in pg.ahead]) == \
        ("Preempted", (("cpu", "default-flavor", 9.0),), 3, ["team-a/wl-quota", "team-a/wl-checks"])
    assert pg.why[0] == "preempted: Preempted to accommodate a higher priority Workload"
    c, cg = g["wl-checks"]
    assert (c.state, c.reason) == ("PENDING", "AdmissionCheck")
    assert any("dws-prov (Pending: waiting for the ProvisioningRequest)" in w for w in cg.why), cg.why
    n, ng = g["wl-nolq"]
    assert n.reason == "Inadmissible" and "LocalQueue user-queue does not exist in namespace team-b" in ng.why
    cq = next(x for x in view.queues if x.name == "cluster-queue")
    cpu = next(r for r in cq.rows if r.resource == "cpu")
    assert view.flavors == {"default-flavor": {"topology.kubernetes.io/zone": "z1"}}
    assert (cpu.flavor, cpu.quota, cpu.reserved, cpu.used, cq.pending, cq.running, cq.local_queues) == \
        ("default-flavor", 9.0, 8.0, 6.0, 3, 1, ("team-a/user-queue",))


def test_watch_follows_changes_and_deletions(apiserver, cache):
    admin = Objects(apiserver.http("admin"))
    path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
    admin.create(path, podgroup("late", "team-a", "research", 1, 8, None), {"phase": "Pending"})
    deadline = time.time() + 10
    while "late" not in gangs(cache)[1] and time.time() < deadline:
        time.sleep(0.1)
    assert gangs(cache)[1]["late"][0].state == "PENDING"
    admin.check(admin.c.delete(f"{path}/late"))
    while "late" in gangs(cache)[1] and time.time() < deadline:
        time.sleep(0.1)
    assert "late" not in gangs(cache)[1]


def _until(cond, timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        time.sleep(0.1)
    return cond()


def test_missing_status_and_objects_deleted_mid_watch(apiserver, cache):
    """Gangs as users create them before any controller looked (no status at all: the server drops a
    status sent with the object), a queue and a running gang's pod deleted while watched, and back."""
    admin = Objects(apiserver.http("admin"))
    pgs = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
    wls = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"
    fresh_pg = admin.create(pgs, podgroup("fresh-pg", "team-a", "default", 2, 16, None))
    fresh_wl = admin.create(wls, workload("wl-fresh", "team-a", "user-queue", 1, 0, "00000000-0000-0000-0000-000000000009"))
    try:
        _missing_status_then_deleted(admin, cache, pgs, wls, fresh_pg, fresh_wl)
    finally:  # the module's later tests count these objects: gone even when a check above failed
        for path in (f"{pgs}/fresh-pg", f"{wls}/wl-fresh"):
            admin.c.delete(path)
    assert _until(lambda: not {"fresh-pg", "wl-fresh"} & set(gangs(cache)[1]))
    assert gangs(cache)[1]["wl-preempted"][1].position == 3


def _queue_order(cache, queue: str) -> list:
    """What the position check saw, for its failure message: (name, state, created, position)."""
    _, g, _ = gangs(cache)
    return sorted((n, j.state, j.submit_time, gg.position) for n, (j, gg) in g.items() if gg.queue == queue)


def _missing_status_then_deleted(admin, cache, pgs, wls, fresh_pg, fresh_wl):
    vq = "/apis/scheduling.volcano.sh/v1beta1/queues"
    assert "status" not in fresh_pg and "status" not in fresh_wl
    assert _until(lambda: {"fresh-pg", "wl-fresh"} <= set(gangs(cache)[1]))
    _, g, _ = gangs(cache)
    (pj, pg), (wj, wg) = g["fresh-pg"], g["wl-fresh"]
    assert (pj.state, pj.reason, pj.node_count, pj.gpus, pg.min_member) == ("PENDING", "NoStatus", 2, 16, 2)
    assert pg.why[0].startswith("no status yet: the Volcano scheduler has not looked at this PodGroup")
    # queue default holds one other pending gang, the real daocloud one, created earlier by the
    # server's clock (the order is by creationTimestamp: a host whose clock stepped back since
    # would put it after, and so must this check)
    real = "default/lm-mpi-job-9c571015-37c7-4a1a-9604-eaa2248613f2"
    real_created = gangs(cache)[1][real.split("/")[1]][0].submit_time
    # (same second: by name, and fresh-pg sorts first)
    want = (2, [real]) if real_created < ts(fresh_pg["metadata"]["creationTimestamp"]) else (1, [])

    def fresh_position():
        g2 = gangs(cache)[1]["fresh-pg"][1]
        return (g2.position, [a.name for a in g2.ahead])

    assert _until(lambda: fresh_position() == want), (fresh_position(), _queue_order(cache, "default"))
    assert (wj.state, wj.reason, wj.partition, wj.qos) == ("PENDING", "NoStatus", "cluster-queue", "team-a/user-queue")
    assert wg.why[0].startswith("no status yet: Kueue has not looked at this Workload")
    # priority 0, newest: behind wl-quota (100), wl-checks (20), wl-preempted (10) in both queues
    assert (wg.position, wg.local_position) == (4, 4)

    # a queue deleted mid-watch: its gangs wait on a queue that does not exist, then it comes back
    admin.check(admin.c.delete(f"{vq}/closed-q"))
    assert _until(lambda: gangs(cache)[1]["wait-closed"][0].reason == "QueueMissing")
    assert "queue closed-q does not exist" in gangs(cache)[1]["wait-closed"][1].why
    admin.create(vq, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "closed-q"},
                      "spec": {"weight": 1}}, {"state": "Closed"})
    assert _until(lambda: gangs(cache)[1]["wait-closed"][0].reason == "QueueClosed")

    # a running gang's pod deleted mid-watch: the gang is partial and the node's GPUs are free
    # a pod bound to a node goes only when its kubelet confirms, or at once with grace period 0
    admin.check(admin.c.delete("/api/v1/namespaces/team-a/pods/run-1", params={"gracePeriodSeconds": 0}))

    def node_gpus(name):
        return next(n.gpus_allocated for n in cache.current()[0].nodes if n.name == name)

    assert _until(lambda: gangs(cache)[1]["train-running"][1].partial)
    run, rg = gangs(cache)[1]["train-running"]
    assert (run.state, run.state_flags, run.nodes, rg.pods_running) == ("RUNNING", ("PARTIAL",), ("gpu-node-1",), 1)
    assert any(w.startswith("partial gang: 1 of 2 pods running") for w in rg.why), rg.why
    assert node_gpus("gpu-node-2") == 0
    admin.create("/api/v1/namespaces/team-a/pods", *pod("run-1", "team-a", 8, "gpu-node-2", "train-running"))
    assert _until(lambda: not gangs(cache)[1]["train-running"][1].partial)
    assert gangs(cache)[1]["train-running"][0].nodes == ("gpu-node-1", "gpu-node-2") and node_gpus("gpu-node-2") == 8


def test_rebuilt_in_the_background_after_a_change(apiserver):
    """A request after a watch event gets the last build at once; the new one follows."""
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), watch_timeout=30,
                  retry=2.0, min_rebuild=0.2)
    c.start()
    admin = Objects(apiserver.http("admin"))
    path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
    try:
        assert c.wait_synced(30)
        first, prepared = c.current(), []
        c.on_built.append(lambda snap, view: prepared.append(snap))
        gen = c.reflectors["podgroups"].generation
        admin.create(path, podgroup("bg-late", "team-a", "research", 1, 8, None), {"phase": "Pending"})
        assert _until(lambda: c.reflectors["podgroups"].generation > gen)
        time.sleep(0.3)  # past min_rebuild
        assert c.current()[0] is first[0]  # served from the last build while the next is made
        assert _until(lambda: "bg-late" in {g.name for g in c.current()[1].gangs})
        assert prepared[-1] is c.current()[0]  # handed to the exporter's encoder before it was served
    finally:
        admin.check(admin.c.delete(f"{path}/bg-late"))
        c.stop()


def test_resources_still_being_listed_are_named_not_empty(apiserver):
    # pods and nodes listed, the Volcano and Kueue resources not yet (their threads not started):
    # the snapshot answers, names each missing resource, and has no gang it could not read
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), watch_timeout=30,
                  retry=2.0, min_rebuild=0.0)
    for key in ("pods", "nodes"):
        c.reflectors[key].start()
    try:
        assert _until(lambda: c.current() is not None, 30)
        snap, view = c.current()
        named = {e.source for e in snap.errors if e.message == "not listed yet"}
        assert named == {f"kube {k}" for k in c.reflectors} - {"kube pods", "kube nodes"}
        assert view.gangs == () and snap.nodes
    finally:
        c.stop()


def test_pagination_and_steady_state_requests(apiserver):
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), watch_timeout=60,
                  page_size=2, retry=2.0, min_rebuild=0.0)
    c.start()
    try:
        assert c.wait_synced(30)
        h = c.health(time.time())
        # 10 podgroups at 2 a page: 5 LIST requests for that resource alone
        assert h["resources"]["podgroups"]["objects"] == 10 and h["resources"]["pods"]["objects"] == 9
        before = c.client.counters.copy()
        assert before["list"] >= 5 + 5 + 3  # podgroups, pods (9 -> 5 pages), workloads (6 -> 3 pages), ...
        time.sleep(3.0)
        c.current()
        c.current()
        # steady state: no request at all while nothing changes (one open WATCH per resource)
        assert c.client.counters.copy() == before
        assert before["watch"] == len(c.reflectors)
    finally:
        c.stop()


def test_namespace_limit(apiserver):
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), namespace="team-b")
    c.start()
    try:
        assert c.wait_synced(30)
        snap, g, view = gangs(c)
        assert sorted(g) == ["evil-wl", "wl-nolq"]  # namespaced objects of team-b only
        assert len(snap.nodes) == 4 and {q.name for q in view.queues} >= {"research", "cluster-queue"}  # cluster-wide
    finally:
        c.stop()


def test_stop_ends_every_watch_at_once_and_then_closes(apiserver):
    """stop() wakes the watching threads (they would otherwise block until the next event or the
    watch timeout) and closes the connections only once no thread reads them."""
    c = make_cache(apiserver, "exporter")
    threads = [r._thread for r in c.reflectors.values()]
    t = time.monotonic()
    c.stop()
    took = time.monotonic() - t
    assert not [th.name for th in threads if th.is_alive()] and took < 5.0, took  # watch timeout: 30 s
    assert c.client._http.is_closed
    # events on what the stopped cache watched, over fresh connections: nothing reads them but their own
    admin = Objects(apiserver.http("admin"))
    for i in range(5):
        admin.create("/apis/scheduling.volcano.sh/v1beta1/queues", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": f"after-stop-{i}"},
            "spec": {"weight": 1}})
        admin.check(admin.c.delete(f"/apis/scheduling.volcano.sh/v1beta1/queues/after-stop-{i}"))


def test_watch_from_a_compacted_version_relists(apiserver, cache):
    refl = cache.reflectors["queues"]
    relists, gone = refl.relists, refl.gone
    admin = Objects(apiserver.http("admin"))
    for i in range(3):  # history to compact away
        admin.create("/apis/scheduling.volcano.sh/v1beta1/queues", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": f"churn-{i}"},
            "spec": {"weight": 1}})
    apiserver.compact_etcd()
    # older than anything the API server's watch cache still holds (it started when the CRD was installed)
    events = list(cache.client.watch(refl.resource.path(refl.version), "2", 2))
    assert events and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
    assert refl._apply(events[0]) is False  # the reflector's answer to 410: list again
    assert refl.gone == gone + 1
    refl.list_once()
    assert refl.relists == relists + 1 and {"/churn-0", "/churn-1", "/churn-2"} <= {
        f"/{q['metadata']['name']}" for q in refl.items()}
    for i in range(3):
        admin.check(admin.c.delete(f"/apis/scheduling.volcano.sh/v1beta1/queues/churn-{i}"))


def test_unknown_versions_are_absent_and_named(apiserver):
    from collectors.kube.resources import RESOURCES, Resource

    odd = (Resource("nodes", "", "nodes", ("v1",), namespaced=False, critical=True),
           Resource("pods", "", "pods", ("v1",), critical=True),
           Resource("workloads", "kueue.x-k8s.io", "workloads", ("v1alpha9",)),
           Resource("podgroups", "scheduling.volcano.sh", "podgroups", ("v1beta1",)),
           Resource("queues", "scheduling.volcano.sh", "queues", ("v2",), namespaced=False))
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), resources=odd, retry=30.0)
    c.start()
    try:
        assert c.wait_synced(30)
        err = c.reflectors["workloads"].error
        assert "unknown version" in err and "serves versions v1beta2, v1beta1" in err and "v1alpha9" in err
        snap, view = c.current()
        assert any(e.source == "kube workloads" and e.severity == "warning" for e in snap.errors)
        assert {g.kind for g in view.gangs} == {"volcano"}
        # a Volcano CRD in a version we do not read: named, and its queues not guessed closed or missing
        assert "serves versions v1beta1; gangwatch reads v2" in c.reflectors["queues"].error
        reasons = {g.name: j.reason for j in snap.jobs for g in view.gangs if g.job_id == j.job_id}
        assert (reasons["wait-closed"], reasons["train-pending"]) == ("Priority", "Unschedulable")
    finally:
        c.stop()
    # a reader of the older served version (Kueue v1beta1) reads the same gangs the same way
    old = tuple(Resource(r.key, r.group, r.plural, ("v1beta1",) if r.group == "kueue.x-k8s.io" else r.versions,
                         r.namespaced, r.critical) for r in RESOURCES)
    c = KubeCache(Client(load_kubeconfig(str(apiserver.kubeconfig("exporter"))), timeout=5), resources=old)
    c.start()
    try:
        assert c.wait_synced(30) and c.reflectors["workloads"].version == "v1beta1"
        _, g, _ = gangs(c)
        assert {n: (j.state, j.reason, j.partition) for n, (j, _) in g.items() if n.startswith("wl-")} == {
            "wl-admitted": ("RUNNING", "None", "cluster-queue"), "wl-quota": ("PENDING", "InsufficientQuota", "cluster-queue"),
            "wl-preempted": ("PENDING", "Preempted", "cluster-queue"), "wl-checks": ("PENDING", "AdmissionCheck", "cluster-queue"),
            "wl-nolq": ("PENDING", "Inadmissible", "")}
    finally:
        c.stop()


def test_exporter_http_snapshot_and_metrics(apiserver, cache, tmp_path):
    import json
    import shutil
    import subprocess

    from collectors.web import Request

    args = exporter.build_parser().parse_args(["--kube.config", str(apiserver.kubeconfig("exporter"))])
    _, scraper, routes = exporter.build_app(args, client=cache.client)
    status, ctype, body, _ = exporter.snapshot_handler(cache)(Request("/api/v1/snapshot", {}, {}))
    assert status == 200
    snap = Snapshot.from_json(body)  # the scheduler snapshot schema, read back by the dashboard's reader
    assert snap.source == "kubernetes" and any(j.name == "team-a/train-pending" for j in snap.jobs)
    doc = json.loads(body)
    assert any(g["name"] == "train-pending" and g["position"] == 1 for g in doc["kube"]["gangs"])
    # the exporter's own /metrics: the scrape framework over a fresh build of the app (not yet started:
    # only the health series until its caches list), then over the module's synced cache
    text = encode(cache_families(cache, time.time()) + snapshot_families(*cache.current(), time.time()))
    samples = list(iter_samples(text))
    missing = {(lb["jobid"], lb["resource"], lb["flavor"]): val for name, lb, val in samples
               if name == "gangwatch_kube_gang_blocking_resource_missing"}
    jid = {g["name"]: str(g["job_id"]) for g in doc["kube"]["gangs"]}
    assert missing[(jid["wl-quota"], "cpu", "default-flavor")] == 2.0
    assert missing[(jid["train-pending"], "nvidia.com/gpu", "")] == 32.0
    assert ("gangwatch_kube_up", {}, 1.0) in samples
    assert b"gangwatch_kube_up" in scraper.scrape().body()
    scraper.close()
    if shutil.which("promtool"):
        out = tmp_path / "kube.prom"
        out.write_text(text)
        lint = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
        assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()


def test_hostile_names_are_inert_data(cache):
    snap, g, _ = gangs(cache)
    evil = g["evil-pg"][1]
    assert evil.why[0] == "unschedulable: " + HOSTILE + '\n{x="y"} 1'  # kept verbatim, as data
    assert g["evil-wl"][0].reason == "Inadmissible"
    s, v = cache.current()
    text = encode(snapshot_families(s, v, time.time()))
    infos = [lb for name, lb, _ in iter_samples(text) if name == "gangwatch_kube_gang_info" and lb["name"] == "evil-pg"]
    assert infos and infos[0]["reason"] == "QueueClosed"  # the exposition still parses around it
    # a hostile resource key: verbatim in the view, one escaped label value cut to LABEL_MAX in metrics
    odd = next(q for q in v.queues if q.name == "odd-q")
    assert [(r.resource, r.quota, r.used) for r in odd.rows] == [(HOSTILE_RESOURCE, 2.0, 1.0)]
    quota = [(lb["resource"], val) for name, lb, val in iter_samples(text)
             if name == "gangwatch_kube_queue_quota" and lb["queue"] == "odd-q"]
    assert quota == [(cut_label(HOSTILE_RESOURCE), 2.0)]


def test_rbac_forbidden_resource_is_absent_and_named(apiserver):
    c = make_cache(apiserver, "limited")
    try:
        snap, g, view = gangs(c)
        h = c.health(time.time())
        assert h["up"] is True and h["resources"]["queues"]["ok"] is False
        assert "forbidden" in h["resources"]["queues"]["error"]
        assert any(e.source == "kube queues" and "forbidden" in e.message for e in snap.errors)
        assert not [q for q in view.queues if q.kind == "volcano-queue"]
        # the rest is served; a queue we cannot read is not guessed closed
        assert g["train-pending"][0].reason == "Unschedulable"
        assert g["wait-closed"][0].reason == "Priority"
        assert g["wl-quota"][0].reason == "InsufficientQuota"
    finally:
        c.stop()


def _kept(sent, stored, path="") -> list[str]:
    """Where the stored object lost or changed what was sent: 1.20 drops unknown fields silently."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in sent.items() for p in _kept(v, stored.get(k), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [p for i, v in enumerate(sent) for p in _kept(v, stored[i], f"{path}[{i}]")]
    return [] if str(sent) == str(stored) else [path]


def test_deploy_manifests_are_schema_valid_and_bound(apiserver):
    """deploy/kubernetes/: created on the real API server (no controller runs them: creation is the
    schema check), every field kept; the Deployment's service account may read exactly the role."""
    admin = Objects(apiserver.http("admin"))
    admin.check(admin.c.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": "monitoring"}}))
    path = REPO / "deploy" / "kubernetes" / "exporter.yaml"
    sent = list(yaml.safe_load_all(path.read_text()))
    stored = admin.apply_yaml(path)
    assert [d["kind"] for d in stored] == ["ServiceAccount", "Deployment", "Service"]
    for doc, got in zip(sent, stored):
        assert _kept(doc, got) == [], doc["kind"]
    pod = stored[1]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    # the binding in clusterrole.yaml names this service account
    sa = f"system:serviceaccount:monitoring:{pod['serviceAccountName']}"

    def allowed(verb, resource, group=""):
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": sa, "groups": ["system:serviceaccounts"],
                           "resourceAttributes": {"verb": verb, "resource": resource, "group": group}}}
        return admin.check(admin.c.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review))["status"]["allowed"]

    assert allowed("watch", "pods") and allowed("list", "workloads", "kueue.x-k8s.io")
    assert not allowed("create", "pods") and not allowed("list", "secrets")
    # the server does check: a wrong type is refused, not kept
    bad = copy.deepcopy(sent[1])
    bad["metadata"]["name"] = "bad"
    bad["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = "nobody"
    r = admin.c.post("/apis/apps/v1/namespaces/monitoring/deployments", json=bad)
    assert r.status_code in (400, 422), r.text[:300]


@pytest.fixture(scope="module")
def exporter_url(apiserver, cache):
    """The kube-exporter's HTTP endpoints over the module's watch cache, on a free loopback port."""
    from collectors.web import make_server, serve_in_thread

    routes = {"/api/v1/snapshot": exporter.snapshot_handler(cache)}
    srv = make_server("127.0.0.1:0", routes)
    serve_in_thread(srv)
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _site(argv):
    import threading

    from werkzeug.serving import make_server as wz

    from dashboard.app import build_app
    from dashboard.serve import build_parser, make_datasource

    ds = make_datasource(build_parser().parse_args(argv))
    srv = wz("127.0.0.1", 0, build_app(ds, refresh_seconds=3600).server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_port}"


def test_feed_merges_slurm_and_kubernetes(exporter_url, tmp_path):
    from dashboard.kube_feed import KubeFeed, merged
    from tests.support import dashboard_fake

    feed = KubeFeed(exporter_url)
    both = merged(dashboard_fake.snapshot, feed)()
    kinds = {j.flags[0] if j.flags and j.flags[0] in ("volcano", "kueue") else "slurm" for j in both.jobs}
    assert kinds == {"slurm", "volcano", "kueue"}
    assert {g["name"] for g in feed.view()["gangs"]} >= {"train-pending", "wl-quota"}
    feed_down = KubeFeed("http://127.0.0.1:9")  # nothing listens: Slurm still served, marked stale
    only = merged(dashboard_fake.snapshot, feed_down)()
    assert only.stale and {j.job_id for j in only.jobs} == {j.job_id for j in dashboard_fake.snapshot().jobs}
    assert any(e.source == "kubernetes" for e in only.errors)


@pytest.mark.browser
def test_dashboard_renders_kubernetes_only_and_mixed_in_chromium(exporter_url, tmp_path):
    import json
    import os

    playwright = pytest.importorskip("playwright.sync_api", reason="pip package playwright not installed")
    chromium = os.environ.get("GW_CHROMIUM", "/usr/bin/chromium")
    if not os.path.exists(chromium):
        pytest.skip(f"Chromium not installed at {chromium}")
    from tests.support import dashboard_fake

    slurm_file = tmp_path / "slurm.json"
    slurm_file.write_text(json.dumps(dashboard_fake.snapshot().to_dict()))
    sites = [_site(["--kube-exporter", exporter_url]),
             _site(["--snapshot", str(slurm_file), "--kube-exporter", exporter_url])]
    try:
        with playwright.sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium)
            pg = b.new_page()
            errors, dialogs = [], []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            # Kubernetes only
            pg.goto(sites[0][1] + "/kubernetes")
            gangs = pg.locator("#kubernetes-gangs")
            gangs.wait_for(timeout=20_000)
            text = gangs.inner_text()
            assert "team-a/train-pending" in text and "missing 32 nvidia.com/gpu" in text
            assert "team-a/wl-quota" in text and "blocked by cpu in flavor default-flavor" in text
            assert "<script>alert(1)</script>" in text and not dialogs  # the hostile message is text
            body = pg.locator("main").inner_text()
            assert "Kueue ClusterQueue cluster-queue" in body and "Volcano queue research" in body
            assert HOSTILE_RESOURCE[:40] in body  # the hostile resource key is text, not markup
            assert "Flavors select nodes by label: default-flavor: topology.kubernetes.io/zone=z1" in body
            # the other pages take the Kubernetes snapshot as they take Slurm's
            for path, expect in (("/jobs", "team-a/train-running"), ("/nodes", "gpu-node-3"), ("/queue", "research")):
                pg.goto(sites[0][1] + path)
                try:
                    pg.wait_for_function(f"document.querySelector('main') && "
                                         f"document.querySelector('main').innerText.includes({json.dumps(expect)})", timeout=20_000)
                except playwright.TimeoutError:
                    raise AssertionError(f"{path}: {expect!r} not shown; errors {errors}; page: {pg.content()[:3000]}")
            # mixed: both schedulers, then the selector narrows to one
            pg.goto(sites[1][1] + "/kubernetes")
            pg.locator("#kubernetes-gangs").wait_for(timeout=20_000)
            mixed = pg.locator("#kubernetes-gangs").inner_text()
            assert "slurm" in mixed and "volcano" in mixed and "kueue" in mixed
            pg.get_by_label("Slurm").check()
            pg.wait_for_function("!document.querySelector('#kubernetes-gangs').innerText.includes('volcano')", timeout=20_000)
            only = pg.locator("#kubernetes-gangs").inner_text()
            assert "slurm" in only and "kueue" not in only
            os.makedirs(REPO / "tests" / "artifacts" / "dashboard", exist_ok=True)
            pg.screenshot(path=str(REPO / "tests" / "artifacts" / "dashboard" / "kubernetes-mixed.png"), full_page=True)
            assert not errors, errors
            b.close()
    finally:
        for srv, _ in sites:
            srv.shutdown()


@pytest.fixture(scope="module")
def exporter_process(apiserver):
    """`gangwatch kube-exporter` itself, as operators run it, against the API server."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.cli", "kube-exporter", "--kube.config",
                             str(apiserver.kubeconfig("exporter")), "--web.listen-address", f"127.0.0.1:{port}",
                             "--kube.retry-interval", "1", "--kube.request-timeout", "3"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield f"http://127.0.0.1:{port}", proc
    proc.terminate()
    proc.wait(10)


def _get(url: str):
    import httpx

    try:
        return httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None


def test_the_exporter_command_serves_snapshot_and_metrics(exporter_process):
    url, proc = exporter_process
    deadline = time.time() + 30
    r, listing = None, True
    # pods and nodes listed: it answers; a resource still being listed is named until it is
    while time.time() < deadline and proc.poll() is None:
        r = _get(url + "/api/v1/snapshot")
        listing = r is not None and r.status_code == 200 and \
            any(e["message"] == "not listed yet" for e in r.json()["errors"])
        if r is not None and r.status_code == 200 and not listing:
            break
        time.sleep(0.3)
    assert r is not None and r.status_code == 200 and not listing, \
        proc.stderr.read1().decode() if proc.poll() is not None else (r, r and r.text[:2000])
    doc = r.json()
    assert doc["source"] == "kubernetes" and doc["stale"] is False
    assert {g["name"]: g["position"] for g in doc["kube"]["gangs"] if g["queue"] == "research" and g["position"]} == \
        {"train-pending": 1, "train-pending-2": 2}
    m = _get(url + "/metrics").text
    assert "gangwatch_kube_up 1" in m and 'gangwatch_scrape_collector_success{collector="kube"} 1' in m


def test_apiserver_gone_serves_stale_with_age(apiserver, cache, exporter_process):
    # last in the module: it stops the API server
    apiserver.stop()
    deadline = time.time() + 15
    while cache.health(time.time())["up"] and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    snap, view = cache.current()
    h = cache.health(time.time())
    assert h["up"] is False and h["age"] >= 1.0
    assert snap.stale is True and snap.failing_since is not None and snap.age(time.time()) >= 1.0
    assert any(j.name == "team-a/train-running" for j in snap.jobs)  # the last objects, not an empty cluster
    assert any("unreachable" in e.message or "broke" in e.message for e in snap.errors)
    # the command keeps serving: stale, with its age, and says so in its metrics
    url, proc = exporter_process
    doc = _get(url + "/api/v1/snapshot").json()
    assert doc["stale"] is True and doc["age_seconds"] >= 1.0 and doc["failing_since"] is not None
    assert any(j["name"] == "team-a/train-pending" for j in doc["jobs"])
    m = _get(url + "/metrics").text
    assert "gangwatch_kube_up 0" in m and proc.poll() is None
