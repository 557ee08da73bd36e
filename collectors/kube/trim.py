"""What the watch cache keeps of each object: only the fields the snapshot reads (pure).

A Pod as the API sends it is several kilobytes (managed fields, the whole container spec); 20,000
of them would cost the exporter hundreds of megabytes. The cache keeps a small dict per object
instead, with the resource requests already summed.
"""

from __future__ import annotations

from .quantity import parse_quantity

GPU = "nvidia.com/gpu"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# node labels that describe where a node sits (zone, rack, block) or what GPUs it has
TOPOLOGY_LABEL_HINTS = ("topology", "nvidia.com/gpu.product", "nvidia.com/gpu.count", "cloud.google.com/gke-nodepool")


def _meta(obj: dict) -> dict:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def container_requests(spec: dict) -> dict[str, float]:
    """Summed requests of a pod spec's containers (GPUs from limits when not requested, as the
    device plugin takes them); init containers count by their maximum, as the scheduler does."""
    total: dict[str, float] = {}
    for c in _list(spec.get("containers")):
        res = _dict(_dict(c).get("resources"))
        req, lim = _dict(res.get("requests")), _dict(res.get("limits"))
        for name in set(req) | ({GPU} & set(lim)):
            q = parse_quantity(req.get(name, lim.get(name)))
            if q is not None:
                total[name] = total.get(name, 0.0) + q
    for c in _list(spec.get("initContainers")):
        req = _dict(_dict(_dict(c).get("resources")).get("requests"))
        for name, value in req.items():
            q = parse_quantity(value)
            if q is not None and q > total.get(name, 0.0):
                total[name] = q
    return total


def trim_pod(obj: dict) -> dict:
    m, spec, st = _meta(obj), _dict(obj.get("spec")), _dict(obj.get("status"))
    labels, ann = _dict(m.get("labels")), _dict(m.get("annotations"))
    waiting, restarts = [], 0
    for cs in _list(st.get("containerStatuses")):
        cs = _dict(cs)
        restarts += cs.get("restartCount") or 0 if isinstance(cs.get("restartCount"), int) else 0
        w = _dict(_dict(cs.get("state")).get("waiting"))
        if w.get("reason"):
            waiting.append(str(w["reason"]))
    sched_msg = ""
    for c in _list(st.get("conditions")):
        c = _dict(c)
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            sched_msg = str(c.get("message") or c.get("reason") or "")
    return {
        "namespace": str(m.get("namespace") or ""), "name": str(m.get("name") or ""), "uid": str(m.get("uid") or ""),
        "node": str(spec.get("nodeName") or ""), "phase": str(st.get("phase") or ""),
        "group": str(ann.get(VOLCANO_GROUP_ANNOTATION) or labels.get(KUEUE_POD_GROUP_LABEL) or ""),
        "owners": tuple(str(_dict(o).get("uid") or "") for o in _list(m.get("ownerReferences"))),
        "requests": container_requests(spec), "waiting": tuple(waiting), "restarts": restarts,
        "unschedulable": sched_msg, "deleting": bool(m.get("deletionTimestamp")),
        "created": str(m.get("creationTimestamp") or ""),
    }


def trim_node(obj: dict) -> dict:
    m, spec, st = _meta(obj), _dict(obj.get("spec")), _dict(obj.get("status"))
    ready = None
    ready_msg = ""
    for c in _list(st.get("conditions")):
        c = _dict(c)
        if c.get("type") == "Ready":
            ready = c.get("status") == "True"
            ready_msg = str(c.get("message") or c.get("reason") or "")
    labels = _dict(m.get("labels"))
    return {
        "name": str(m.get("name") or ""), "ready": ready, "ready_message": ready_msg,
        "unschedulable": bool(spec.get("unschedulable")),
        "allocatable": {k: q for k, v in _dict(st.get("allocatable") or st.get("capacity")).items()
                        if (q := parse_quantity(v)) is not None},
        "labels": {str(k): str(v) for k, v in labels.items() if any(h in str(k) for h in TOPOLOGY_LABEL_HINTS)},
    }


def trim_workload(obj: dict) -> dict:
    """A Workload without its pod templates (each a whole PodSpec): per pod set, only the summed requests."""
    out = trim_object(obj)
    spec = _dict(out.get("spec"))
    sets = []
    for ps in _list(spec.get("podSets")):
        ps = _dict(ps)
        tmpl = _dict(_dict(ps.get("template")).get("spec"))
        sets.append({"name": ps.get("name"), "count": ps.get("count"), "minCount": ps.get("minCount"),
                     "requests": container_requests(tmpl)})
    out["spec"] = dict(spec, podSets=sets)
    return out


def trim_object(obj: dict) -> dict:
    """Custom resources are small: only the bookkeeping the API server adds is dropped."""
    m = dict(_meta(obj))
    m.pop("managedFields", None)
    ann = _dict(m.get("annotations"))
    m["annotations"] = {k: v for k, v in ann.items() if "last-applied-configuration" not in k}
    return {"metadata": m, "spec": _dict(obj.get("spec")), "status": _dict(obj.get("status"))}


TRIM = {"pods": trim_pod, "nodes": trim_node, "workloads": trim_workload}


def trimmer(key: str):
    return TRIM.get(key, trim_object)
