"""A real kube-apiserver (1.20.2, built by tests/kube/ensure-apiserver.sh) with Debian's etcd, on
loopback, with RBAC on: tokens for an admin (system:masters), the exporter (bound to
deploy/kubernetes/clusterrole.yaml) and a user denied one resource. Installs the real Volcano and
Kueue CRDs from ../shared/fixtures/k8s (with the one tweak 1.20 needs: no `default: ""`)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import yaml

CACHE = Path(os.environ.get("GW_KUBE_CACHE", "/var/cache/gangwatch/kube"))
BINARY = CACHE / "kubernetes-1.20.2" / "_output" / "bin" / "kube-apiserver"
TOKENS = {"admin": "admin-token", "exporter": "exporter-token", "limited": "limited-token"}
CRDS = ("volcano/crd/scheduling.volcano.sh_podgroups.yaml", "volcano/crd/scheduling.volcano.sh_queues.yaml",
        "volcano/crd/batch.volcano.sh_jobs.yaml", "kueue/crd/kueue.x-k8s.io_workloads.yaml",
        "kueue/crd/kueue.x-k8s.io_clusterqueues.yaml", "kueue/crd/kueue.x-k8s.io_localqueues.yaml",
        "kueue/crd/kueue.x-k8s.io_resourceflavors.yaml")


def _building() -> bool:
    """A build started by tests/kube/ensure-apiserver.sh is still running."""
    try:
        os.kill(int((CACHE / "build.pid").read_text().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def wait_for_binary(timeout: float = 1500.0) -> tuple[Path | None, str]:
    """(binary, "") once built; (None, why) when the build failed or nothing builds it."""
    deadline = time.monotonic() + timeout
    while True:
        if (CACHE / "build.failed").exists():
            return None, "kube-apiserver build failed: " + (CACHE / "build.failed").read_text()[-800:]
        if BINARY.exists() and ((CACHE / "build.done").exists() or not _building()):
            return BINARY, ""
        if not _building() or time.monotonic() > deadline:
            return None, f"no kube-apiserver at {BINARY} (run tests/kube/ensure-apiserver.sh)"
        time.sleep(2)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _strip_empty_defaults(node):
    """1.20 rejects `default: ""`; without it a list-map key needs a default, so list maps become plain lists."""
    if isinstance(node, dict):
        if node.get("x-kubernetes-list-type") == "map":
            node = {k: v for k, v in node.items() if k not in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys")}
        return {k: _strip_empty_defaults(v) for k, v in node.items() if not (k == "default" and v == "")}
    if isinstance(node, list):
        return [_strip_empty_defaults(v) for v in node]
    return node


class ApiServer:
    def __init__(self, binary: Path, rundir: Path):
        self.binary, self.dir = binary, rundir
        self.procs: list[subprocess.Popen] = []
        self.port = 0

    def start(self) -> "ApiServer":
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        for args in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.crt",
                      "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                     ["genrsa", "-out", "sa.key", "2048"], ["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]):
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
        (d / "tokens.csv").write_text(f"{TOKENS['admin']},admin,1,system:masters\n"
                                      f"{TOKENS['exporter']},gw-exporter,2\n{TOKENS['limited']},gw-limited,3\n")
        self.etcd_port, peer, self.port = _port(), _port(), _port()
        etcd_port = self.etcd_port
        self.procs.append(subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", str(d / "etcd-data"),
             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}", "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t=http://127.0.0.1:{peer}"], stdout=open(d / "etcd.log", "wb"), stderr=subprocess.STDOUT))
        self.procs.append(subprocess.Popen(
            [str(self.binary), f"--etcd-servers=http://127.0.0.1:{etcd_port}", "--bind-address=127.0.0.1",
             "--advertise-address=127.0.0.1", f"--secure-port={self.port}", "--insecure-port=0",
             "--tls-cert-file=apiserver.crt", "--tls-private-key-file=apiserver.key", "--token-auth-file=tokens.csv",
             "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
             "--service-account-key-file=sa.pub", "--service-account-signing-key-file=sa.key",
             "--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
             "--disable-admission-plugins=ServiceAccount"], cwd=d, stdout=open(d / "apiserver.log", "wb"),
            stderr=subprocess.STDOUT))
        admin = self.http("admin")
        for _ in range(600):
            try:
                if admin.get("/readyz").text.strip() == "ok":
                    break
            except httpx.HTTPError:
                pass
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError("apiserver or etcd exited: " + (d / "apiserver.log").read_text()[-1500:])
            time.sleep(0.1)
        else:
            raise RuntimeError("apiserver not ready in 60 s: " + (d / "apiserver.log").read_text()[-1500:])
        for who in TOKENS:
            self.write_kubeconfig(who)
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, who: str) -> Path:
        return self.dir / f"kubeconfig-{who}"

    def write_kubeconfig(self, who: str) -> None:
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
               "clusters": [{"name": "t", "cluster": {"server": self.url, "certificate-authority": str(self.dir / "apiserver.crt")}}],
               "users": [{"name": who, "user": {"token": TOKENS[who]}}],
               "contexts": [{"name": "t", "context": {"cluster": "t", "user": who}}]}
        self.kubeconfig(who).write_text(yaml.safe_dump(doc))

    def http(self, who: str = "admin") -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=str(self.dir / "apiserver.crt"), timeout=30,
                            headers={"Authorization": f"Bearer {TOKENS[who]}"})

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (what the API server does every 5 min): older
        resourceVersions are gone and a watch from one answers 410. -> the revision compacted to."""
        etcd = httpx.Client(base_url=f"http://127.0.0.1:{self.etcd_port}", timeout=10)
        rev = int(etcd.post("/v3/kv/range", json={"key": "AA=="}).json()["header"]["revision"])
        r = etcd.post("/v3/kv/compaction", json={"revision": str(rev), "physical": True})
        r.raise_for_status()
        return rev

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs = []

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Objects:
    """Create objects as an admin would, and write their status as the controllers would."""

    def __init__(self, client: httpx.Client):
        self.c = client

    def check(self, r: httpx.Response) -> dict:
        if r.status_code >= 300:
            raise AssertionError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:600]}")
        return r.json()

    def install_crds(self, fixtures: Path) -> None:
        names = []
        for rel in CRDS:
            doc = _strip_empty_defaults(yaml.safe_load((fixtures / "k8s" / rel).read_text()))
            self.check(self.c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=doc))
            names.append(doc["metadata"]["name"])
        for name in names:
            for _ in range(300):
                st = self.check(self.c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"))
                if any(c["type"] == "Established" and c["status"] == "True" for c in (st.get("status") or {}).get("conditions") or []):
                    break
                time.sleep(0.1)
        time.sleep(1.0)  # discovery of the new groups follows the Established condition

    # kind -> (collection path, namespaced): the kinds deploy/kubernetes/ holds
    KINDS = {"ClusterRole": ("/apis/rbac.authorization.k8s.io/v1/clusterroles", False),
             "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", False),
             "Namespace": ("/api/v1/namespaces", False),
             "ServiceAccount": ("/api/v1/namespaces/{ns}/serviceaccounts", True),
             "Service": ("/api/v1/namespaces/{ns}/services", True),
             "Deployment": ("/apis/apps/v1/namespaces/{ns}/deployments", True)}

    def apply_yaml(self, path: Path) -> list[dict]:
        """POST each document of the file -> the objects as the API server stored them."""
        stored = []
        for doc in yaml.safe_load_all(path.read_text()):
            collection, namespaced = self.KINDS[doc["kind"]]
            if namespaced:
                collection = collection.format(ns=doc["metadata"]["namespace"])
            stored.append(self.check(self.c.post(collection, json=doc)))
        return stored

    def create(self, path: str, obj: dict, status: dict | None = None) -> dict:
        """POST the object; with `status`, PUT it through /status (the controllers' way); for a
        resource without the status subresource the status went in with the object."""
        body = dict(obj)
        if status is not None:
            body["status"] = status
        created = self.check(self.c.post(path, json=body))
        if status is not None:
            created["status"] = status
            r = self.c.put(f"{path}/{created['metadata']['name']}/status", json=created)
            if r.status_code != 404:
                created = self.check(r)
        return created
