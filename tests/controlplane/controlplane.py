"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler.

The binaries are built from their Go modules by ``scripts/build-control-plane.sh``
(``tools/controlplane/go.mod`` pins the versions) into ``.tools/bin``. This module
starts them on free loopback ports, in a temporary folder:

- etcd with its data in the folder (``--unsafe-no-fsync``: a test store);
- kube-apiserver with a service-account key pair and a self-signed serving
  certificate made by ``openssl``, ``--authorization-mode=Node,RBAC``, and a
  static token file: ``admin`` (group ``system:masters``) and the scheduler's
  own user ``system:kube-scheduler``, whom the bootstrap RBAC policy grants
  what a scheduler needs. The audit's identity is a real ServiceAccount token
  (TokenRequest), so the real service-account authenticator and the RBAC
  authorizer judge every request it makes;
- kube-scheduler as ``system:kube-scheduler``.

What is not there: no kubelet (so no container runtime: pods never run, their
status is written through the status subresource), no controller manager (no
Deployment makes a ReplicaSet, no garbage collector, no ServiceAccount
controller: the ServiceAccount admission plugin is off so that pods can be
created in namespaces without a ``default`` ServiceAccount). Node status
(capacity, allocatable) is written through the status subresource as a kubelet
would.

:class:`Kube` is a small REST client (stdlib ``urllib``) that creates objects,
writes status and lists, so that the tests need nothing the audit itself does
not; ``kubectl`` (from ``.tools/bin``) is used where a user would use it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
ADMIN_TOKEN = "gpuaudit-test-admin"
SCHEDULER_TOKEN = "gpuaudit-test-scheduler"
START_TIMEOUT = 120.0  # seconds for the API server to become ready (2 busy cores)


def bin_dir() -> Path:
    return Path(os.environ.get("GPUAUDIT_CONTROL_PLANE_BIN") or ROOT / ".tools" / "bin")


def missing() -> str | None:
    """Why the control plane cannot start here, or None when it can."""
    absent = [name for name in BINARIES if not (bin_dir() / name).is_file()]
    if absent:
        return (
            f"{', '.join(absent)} not built in {bin_dir()}: run scripts/build-control-plane.sh "
            "(needs Go; scripts/test.sh runs it)"
        )
    if shutil.which("openssl") is None:
        return "openssl is not installed (it makes the API server's keys)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiError(Exception):
    def __init__(self, status: int, body: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass
class Kube:
    """Just enough of a Kubernetes REST client for setting up a test cluster."""

    server: str
    token: str
    ca_file: Path
    _resources: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))

    # -- HTTP -----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> Any:
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode("utf-8", "replace"), method, path) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")  # /readyz and the like answer text

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    # -- discovery ------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection path prefix, namespaced) for a kind, from discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for item in self.get(base)["resources"]:
                if "/" not in item["name"]:
                    self._resources[(api_version, item["kind"])] = (
                        f"{base}/{item['name']}",
                        bool(item["namespaced"]),
                    )
        if key not in self._resources:
            raise KeyError(f"{kind} is not served at {api_version}")
        return self._resources[key]

    def forget_discovery(self) -> None:
        self._resources.clear()

    def collection(self, obj: dict[str, Any]) -> str:
        prefix, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        if not namespaced:
            return prefix
        base, plural = prefix.rsplit("/", 1)
        namespace = obj["metadata"].get("namespace") or "default"
        return f"{base}/namespaces/{namespace}/{plural}"

    def path(self, obj: dict[str, Any]) -> str:
        return f"{self.collection(obj)}/{obj['metadata']['name']}"

    # -- objects --------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self.collection(obj), obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update), forcing conflicts."""
        return self.request(
            "PATCH",
            self.path(obj),
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "gpuaudit-tests", "force": "true"},
        )

    def delete(self, obj: dict[str, Any]) -> None:
        try:
            self.request("DELETE", self.path(obj), query={"gracePeriodSeconds": "0"})
        except ApiError as exc:
            if exc.status != 404:
                raise

    def write_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """What a kubelet or a controller would write: a merge patch of status."""
        return self.request(
            "PATCH",
            self.path(obj) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    def patch(self, obj: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", self.path(obj), body, content_type="application/merge-patch+json")

    def add_node(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Create a node and write its status as its kubelet would. The
        TaintNodesByCondition admission plugin gives every new node the
        ``node.kubernetes.io/not-ready`` taint, which the node lifecycle
        controller (not running here) removes once the node is Ready: the
        node's own taints are put back in its place."""
        created = self.create(obj)
        self.write_status(created, status)
        return self.patch(created, {"spec": {"taints": (obj.get("spec") or {}).get("taints") or None}})

    def ensure_namespace(self, name: str) -> None:
        try:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except ApiError as exc:
            if exc.status != 409:
                raise

    def list(self, api_version: str, kind: str, namespace: str | None = None, **query: str) -> list[dict]:
        prefix, namespaced = self.resource(api_version, kind)
        if namespace and namespaced:
            base, plural = prefix.rsplit("/", 1)
            prefix = f"{base}/namespaces/{namespace}/{plural}"
        return self.get(prefix, **query)["items"]

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
        end = time.monotonic() + timeout
        while True:
            result = probe()
            if result:
                return result
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)


@dataclass
class ControlPlane:
    workdir: Path
    server: str
    ca_file: Path
    admin: Kube
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def kubeconfig(self, token: str, name: str) -> Path:
        """A kubeconfig file that authenticates with ``token``."""
        path = self.workdir / f"{name}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}],
            "current-context": name,
        }
        path.write_text(json.dumps(config))
        return path

    def client(self, token: str) -> Kube:
        return Kube(self.server, token, self.ca_file)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A real token for a ServiceAccount, from the TokenRequest API."""
        review = self.admin.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        return str(review["status"]["token"])

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_keys(workdir: Path) -> None:
    """The service-account signing key and a self-signed serving certificate."""
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=workdir)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=workdir)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "serving.key", "-out", "serving.crt",
        "-subj", "/CN=kube-apiserver",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        cwd=workdir,
    )  # fmt: skip


def _spawn(workdir: Path, name: str, args: list[str]) -> subprocess.Popen:
    with (workdir / f"{name}.log").open("wb") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [str(bin_dir() / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,
        )


def _stop(procs: Iterable[subprocess.Popen]) -> None:
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def running(
    workdir: Path, *, scheduler: bool = True, scheduler_config: dict[str, Any] | None = None
) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver and (by default) kube-scheduler; stop them after.

    ``scheduler_config``: a KubeSchedulerConfiguration (``profiles`` and the
    like) for kube-scheduler's ``--config``; its client connection and leader
    election are filled in here (the flags that set them are ignored with
    ``--config``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    _make_keys(workdir)
    (workdir / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n{SCHEDULER_TOKEN},system:kube-scheduler,scheduler-uid\n'
    )
    etcd_port, peer_port, api_port, sched_port = (free_port() for _ in range(4))
    server = f"https://127.0.0.1:{api_port}"
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs["etcd"] = _spawn(
            workdir,
            "etcd",
            [
                "--name=test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=test=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        procs["kube-apiserver"] = _spawn(
            workdir,
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--tls-cert-file={workdir / 'serving.crt'}",
                f"--tls-private-key-file={workdir / 'serving.key'}",
                f"--service-account-key-file={workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={workdir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.96.0.0/24",
                # The "kubernetes" Service's endpoint may not be a loopback address.
                "--endpoint-reconciler-type=none",
                # No controller manager makes each namespace's "default" ServiceAccount.
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        ca_file = workdir / "serving.crt"
        admin = Kube(server, ADMIN_TOKEN, ca_file)
        plane = ControlPlane(workdir, server, ca_file, admin, procs)

        def ready() -> bool:
            plane.check_alive()
            try:
                return admin.request("GET", "/readyz") == "ok"
            except (ApiError, OSError, ValueError):
                return False

        try:
            admin.wait("kube-apiserver /readyz", ready, timeout=START_TIMEOUT)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n{plane.log('kube-apiserver')[-3000:]}") from None
        if scheduler:
            sched_config = plane.kubeconfig(SCHEDULER_TOKEN, "scheduler")
            config_args = [f"--kubeconfig={sched_config}", "--leader-elect=false"]
            if scheduler_config is not None:
                config = {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    **scheduler_config,
                    "clientConnection": {"kubeconfig": str(sched_config)},
                    "leaderElection": {"leaderElect": False},
                }
                (workdir / "scheduler-config.json").write_text(json.dumps(config))
                config_args = [f"--config={workdir / 'scheduler-config.json'}"]  # instead of those flags
            procs["kube-scheduler"] = _spawn(
                workdir,
                "kube-scheduler",
                [
                    *config_args,
                    f"--authentication-kubeconfig={sched_config}",
                    f"--authorization-kubeconfig={sched_config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={sched_port}",
                    "--v=1",
                ],
            )
        yield plane
    finally:
        _stop(reversed(list(procs.values())))
