"""The Kubernetes resources the exporter reads, and the versions of each it understands.

Each resource is listed and watched on its own (one failure, such as RBAC forbidding it or its CRD
being absent, costs only that resource). `versions` are in order of preference: the exporter asks the
API server's discovery which of them are served and takes the first; a CRD serving none of them is
reported as "unknown version" with what it does serve. docs/kube-exporter.md's ClusterRole lists
exactly these resources (tests/test_kube_translate.py checks deploy/kubernetes/clusterrole.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    key: str  # our short name, used in metrics (`resource` label) and errors
    group: str  # "" for the core API
    plural: str
    versions: tuple[str, ...]
    namespaced: bool = True
    critical: bool = False  # without it a snapshot says nothing (pods and nodes)

    def path(self, version: str, namespace: str = "") -> str:
        base = "/api/" + version if not self.group else f"/apis/{self.group}/{version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        return f"{base}/{self.plural}"


RESOURCES: tuple[Resource, ...] = (
    Resource("nodes", "", "nodes", ("v1",), namespaced=False, critical=True),
    Resource("pods", "", "pods", ("v1",), critical=True),
    Resource("podgroups", "scheduling.volcano.sh", "podgroups", ("v1beta1",)),
    Resource("queues", "scheduling.volcano.sh", "queues", ("v1beta1",), namespaced=False),
    Resource("vcjobs", "batch.volcano.sh", "jobs", ("v1alpha1",)),
    Resource("workloads", "kueue.x-k8s.io", "workloads", ("v1beta2", "v1beta1")),
    Resource("clusterqueues", "kueue.x-k8s.io", "clusterqueues", ("v1beta2", "v1beta1"), namespaced=False),
    Resource("localqueues", "kueue.x-k8s.io", "localqueues", ("v1beta2", "v1beta1")),
    Resource("resourceflavors", "kueue.x-k8s.io", "resourceflavors", ("v1beta2", "v1beta1"), namespaced=False),
)
BY_KEY = {r.key: r for r in RESOURCES}
