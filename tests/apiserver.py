"""A stand-in for the Kubernetes API server, over real HTTP on loopback.

No real API server can run on these machines (no etcd, no container runtime,
no network), so the cluster source is tested against this one instead: a
stdlib ``ThreadingHTTPServer`` that serves a *recorded cluster* -- a dict of
resource key (the snapshot's ``objects`` keys, plus e.g. ``secrets``) to a
list of raw objects -- at the real API paths, with the real List and Status
shapes, so that the official ``kubernetes`` client talks to it unchanged.

What it implements, because the collector relies on it:

- cluster-wide and namespaced lists, GET by name, 404 for an API group that
  is not installed (a key missing from the recorded cluster);
- ``fieldSelector`` (``=``, ``==``, ``!=`` on dotted fields) and
  ``labelSelector`` (equality, ``in``/``notin``, existence);
- ``limit``/``continue`` with opaque tokens (random strings; the state stays
  on the server) that are only valid for the query that issued them;
- metadata-only lists (``Accept: ...;as=PartialObjectMetadataList;...``);
- a bearer-token check (401 without it);
- fault injection per path (:meth:`FakeApiServer.inject`): any status (403,
  404, 500, 410 on a continue token, 429 with ``Retry-After``), only on the
  Nth page or the first N times, a truncated body, a dropped connection, a
  delay or a hang;
- a record of every request (method, path, query, headers).

Use the ``apiserver`` and ``kubeconfig`` fixtures (list ``"tests.apiserver"``
in ``pytest_plugins`` -- best in tests/conftest.py, so that this module is
loaded as a plugin before any test module imports it), or
run ``python tests/apiserver.py CLUSTER.json`` to serve a file by hand (the
benchmark does, to keep the server out of the measured process).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

# (group, plural) -> (recorded-cluster key, List kind, namespaced)
RESOURCES: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("", "nodes"): ("nodes", "NodeList", False),
    ("", "pods"): ("pods", "PodList", True),
    ("", "events"): ("events", "EventList", True),
    ("", "configmaps"): ("configmaps", "ConfigMapList", True),
    ("", "secrets"): ("secrets", "SecretList", True),
    ("", "namespaces"): ("namespaces", "NamespaceList", False),
    ("apps", "replicasets"): ("replicasets", "ReplicaSetList", True),
    ("apps", "deployments"): ("deployments", "DeploymentList", True),
    ("apps", "statefulsets"): ("statefulsets", "StatefulSetList", True),
    ("apps", "daemonsets"): ("daemonsets", "DaemonSetList", True),
    ("batch", "jobs"): ("jobs", "JobList", True),
    ("batch", "cronjobs"): ("cronjobs", "CronJobList", True),
    # Custom resources that own pods (gpuaudit/data/podspecs.yaml `plural:`).
    ("kubeflow.org", "pytorchjobs"): ("pytorchjobs", "PyTorchJobList", True),
    ("jobset.x-k8s.io", "jobsets"): ("jobsets", "JobSetList", True),
    ("nvidia.com", "clusterpolicies"): ("clusterpolicies", "ClusterPolicyList", False),
    ("resource.k8s.io", "resourceclaims"): ("resourceclaims", "ResourceClaimList", True),
    ("resource.k8s.io", "resourceslices"): ("resourceslices", "ResourceSliceList", False),
    ("kueue.x-k8s.io", "workloads"): ("kueueworkloads", "WorkloadList", True),
}
# Built-in APIs every cluster serves: a recorded cluster without the key (made
# before the collector read owners) holds none of them, not a missing API.
ALWAYS_SERVED = ("deployments", "statefulsets", "daemonsets", "cronjobs")
# The version each group is served at; Kueue's can be changed per server.
GROUP_VERSIONS = {
    "": ("v1",),
    "apps": ("v1",),
    "batch": ("v1",),
    "nvidia.com": ("v1",),
    "resource.k8s.io": ("v1",),
    "kueue.x-k8s.io": ("v1beta2",),
    "kubeflow.org": ("v1",),
    "jobset.x-k8s.io": ("v1alpha2",),
}

Reply = tuple[int, dict[str, str], bytes]  # status, headers, body
_NOT_FOUND: Reply = (404, {"Content-Type": "text/plain"}, b"404 page not found\n")

_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?/?$"
)


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)

    def target(self) -> tuple[str, str, str | None, str | None] | None:
        """(group, plural, namespace, name) of an API resource path, else None."""
        match = _PATH.match(self.path)
        if not match:
            return None
        group = "" if match["core"] else match["group"]
        return group, match["plural"], match["ns"], match["name"]

    @property
    def verb(self) -> str:
        """The RBAC verb this request needs (only the read verbs are told apart)."""
        if self.method != "GET":
            return self.method.lower()
        target = self.target()
        if target is not None and target[3] is not None:
            return "get"
        return "watch" if self.query.get("watch") in ("1", "true") else "list"


@dataclass
class Fault:
    """Misbehaviour for requests to one path (see FakeApiServer.inject)."""

    path: str
    status: int | None = None
    retry_after: str | None = None
    page: int | None = None
    on_continue: bool = False
    times: int | None = None
    truncate: bool = False
    drop: bool = False
    delay: float = 0.0
    message: str | None = None
    hits: int = 0

    def applies(self, path: str, page: int, has_continue: bool) -> bool:
        if path != self.path:
            return False
        if self.page is not None and page != self.page:
            return False
        if self.on_continue and not has_continue:
            return False
        return self.times is None or self.hits < self.times


@dataclass
class _Continuation:
    query_key: tuple[Any, ...]
    offset: int
    page: int


@dataclass
class _Collection:
    """One resource's items, serialised once (the benchmark serves 50,000 pods)."""

    objects: list[dict[str, Any]]
    encoded: list[bytes] = field(default_factory=list)
    metadata_encoded: list[bytes] | None = None
    selected: dict[tuple[Any, ...], list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.encoded = [json.dumps(obj, separators=(",", ":")).encode() for obj in self.objects]

    def metadata_only(self) -> list[bytes]:
        if self.metadata_encoded is None:
            self.metadata_encoded = [
                json.dumps(
                    {
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata", {}),
                    },
                    separators=(",", ":"),
                ).encode()
                for obj in self.objects
            ]
        return self.metadata_encoded


class FakeApiServer:
    """Serves a recorded cluster; start() binds a free loopback port."""

    def __init__(
        self,
        cluster: Mapping[str, list[dict[str, Any]]] | None = None,
        *,
        token: str | None = "test-token",
        kueue_versions: tuple[str, ...] = ("v1beta2",),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.token = token
        self.group_versions = dict(GROUP_VERSIONS, **{"kueue.x-k8s.io": kueue_versions})
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.resource_version = 1000
        self._collections: dict[str, _Collection] = {}
        self._continuations: dict[str, _Continuation] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.load(cluster or {})

    # -- set-up -------------------------------------------------------------

    def load(self, cluster: Mapping[str, list[dict[str, Any]]]) -> FakeApiServer:
        """Replace the served cluster. A key that is absent is an API not installed."""
        with self._lock:
            served = {key: [] for key in ALWAYS_SERVED} | dict(cluster)
            self._collections = {key: _Collection(list(items)) for key, items in served.items()}
            self._continuations.clear()
            self.resource_version += 1
        return self

    def inject(self, path: str, **kwargs: Any) -> Fault:
        """Misbehave on requests to ``path`` (exact, without the query).

        ``status=`` answers with that HTTP status (a Status body, or
        ``message=``), ``retry_after=`` adds the header, ``page=N`` only on
        the Nth page of a list (1 is the first), ``on_continue=True`` only on
        requests that carry a continue token (410 Expired), ``times=N`` only
        the first N matching requests, ``truncate=True`` cuts the JSON body in
        half (with a matching Content-Length), ``drop=True`` closes the
        connection half-way through the body, ``delay=S`` waits S seconds
        first (a hang: a delay longer than the client's timeout).
        """
        fault = Fault(path, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    # -- lifecycle ----------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        # A short poll interval: shutdown() waits for one, once per test.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that are "hanging"
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_versions(self, group: str, versions: tuple[str, ...]) -> FakeApiServer:
        """Serve ``group`` at these versions only (e.g. Kueue before v0.15)."""
        self.group_versions[group] = versions
        return self

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        """A kubeconfig for this server; ``token`` defaults to the right one."""
        return write_kubeconfig(path, self.url, token=token or self.token)

    def paths(self) -> list[str]:
        """The paths requested, in order (queries left off)."""
        return [r.path for r in self.requests]

    # -- serving ------------------------------------------------------------

    def _fault_for(self, path: str, page: int, has_continue: bool) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.applies(path, page, has_continue):
                    fault.hits += 1
                    return fault
        return None

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def handle(self, request: Request) -> tuple[Reply, Fault | None]:
        """The reply to one request, and the fault that shaped it, if any."""
        with self._lock:
            self.requests.append(request)
        authorized = request.headers.get("authorization") == f"Bearer {self.token}"
        if self.token is not None and not authorized:
            return _status(401, "Unauthorized", "Unauthorized"), None
        if request.method != "GET":
            return _status(405, "MethodNotAllowed", "the server does not allow this method"), None
        target = request.target()
        if target is None:
            return _NOT_FOUND, None
        group, plural, namespace, name = target
        match = _PATH.match(request.path)
        assert match is not None
        version = match["core"] or match["version"]
        resource = RESOURCES.get((group, plural))
        if (
            resource is None
            or resource[0] not in self._collections
            or version not in self.group_versions.get(group, ())
            or (namespace is not None and not resource[2])
        ):
            return _NOT_FOUND, None
        key, list_kind, _ = resource

        token = request.query.get("continue")
        page = 1
        if token:
            state = self._continuations.get(token)
            page = state.page if state is not None else 0
        fault = self._fault_for(request.path, page, bool(token))
        if fault is not None:
            if fault.delay:
                self._wait(fault.delay)
            if fault.status is not None:
                return _fault_status(fault, group, plural, request.verb), fault

        if name is not None:
            return self._get(key, plural, namespace, name), fault
        api_version = "v1" if not group else f"{group}/{version}"
        return self._list(request, key, list_kind, api_version, namespace), fault

    def _get(self, key: str, plural: str, namespace: str | None, name: str) -> Reply:
        collection = self._collections[key]
        for obj, encoded in zip(collection.objects, collection.encoded, strict=True):
            meta = obj.get("metadata", {})
            if meta.get("name") == name and (namespace is None or meta.get("namespace", "default") == namespace):
                return 200, {"Content-Type": "application/json"}, encoded
        return _status(404, "NotFound", f'{plural} "{name}" not found')

    def _list(
        self,
        request: Request,
        key: str,
        list_kind: str,
        api_version: str,
        namespace: str | None,
    ) -> Reply:
        query = request.query
        metadata_only = "as=PartialObjectMetadataList" in request.headers.get("accept", "")
        query_key = (
            request.path,
            query.get("fieldSelector", ""),
            query.get("labelSelector", ""),
            metadata_only,
        )
        try:
            field_match = _field_selector(query.get("fieldSelector", ""))
            label_match = _label_selector(query.get("labelSelector", ""))
            limit = int(query.get("limit") or 0)
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))
        offset, page = 0, 1
        token = query.get("continue")
        if token:
            state = self._continuations.pop(token, None)
            if state is None or state.query_key != query_key:
                return _status(400, "BadRequest", "continue key is not valid")
            offset, page = state.offset, state.page
        collection = self._collections[key]
        # Filtered once per query, not once per page: a 50,000-pod list is 100 pages.
        chosen = collection.selected.get(query_key)
        if chosen is None:
            encoded = collection.metadata_only() if metadata_only else collection.encoded
            chosen = [
                blob
                for obj, blob in zip(collection.objects, encoded, strict=True)
                if (namespace is None or obj.get("metadata", {}).get("namespace", "default") == namespace)
                and field_match(obj)
                and label_match(obj.get("metadata", {}).get("labels") or {})
            ]
            collection.selected[query_key] = chosen
        end = len(chosen) if limit <= 0 else min(len(chosen), offset + limit)
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if end < len(chosen):
            next_token = secrets.token_urlsafe(24)
            self._continuations[next_token] = _Continuation(query_key, end, page + 1)
            meta["continue"] = next_token
            meta["remainingItemCount"] = len(chosen) - end
        if metadata_only:
            list_kind, api_version = "PartialObjectMetadataList", "meta.k8s.io/v1"
        head = json.dumps({"kind": list_kind, "apiVersion": api_version, "metadata": meta})
        body = head[:-1].encode() + b',"items":[' + b",".join(chosen[offset:end]) + b"]}"
        return 200, {"Content-Type": "application/json"}, body


def _fault_status(fault: Fault, group: str, plural: str, verb: str) -> Reply:
    code = fault.status
    assert code is not None
    reason, default = {
        401: ("Unauthorized", "Unauthorized"),
        403: (
            "Forbidden",
            f'{plural} is forbidden: User "system:serviceaccount:gpuaudit:gpuaudit" '
            f'cannot {verb} resource "{plural}" in API group "{group}" at the cluster scope',
        ),
        404: ("NotFound", "the server could not find the requested resource"),
        410: (
            "Expired",
            "The provided continue parameter is too old to display a consistent list "
            "result. You can start a new list without the continue parameter, or use the "
            "continue token in this response to retrieve the remainder of the results.",
        ),
        429: ("TooManyRequests", "Too many requests, please try again later."),
        500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
        503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    }.get(code, ("Failure", f"injected failure {code}"))
    status, headers, body = _status(code, reason, fault.message or default)
    if fault.retry_after is not None:
        headers["Retry-After"] = fault.retry_after
    if code == 410:
        # Real servers offer a token to carry on inconsistently; a
        # consistent client restarts instead.
        data = json.loads(body)
        data["metadata"] = {"continue": secrets.token_urlsafe(16)}
        body = json.dumps(data).encode()
    return status, headers, body


def _status(code: int, reason: str, message: str) -> Reply:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, {"Content-Type": "application/json"}, json.dumps(body).encode()


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _field_selector(text: str) -> Any:
    """A predicate for ``a=b,c!=d`` over dotted fields of the object."""
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        match = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(!=|==|=)\s*(.*)", term)
        if not match:
            raise ValueError(f"invalid field selector term {term!r}")
        terms.append((match[1], match[2] == "!=", match[3]))

    def matches(obj: dict[str, Any]) -> bool:
        for path, negate, value in terms:
            found = _dig(obj, path)
            found = "" if found is None else str(found)
            if (found == value) == negate:
                return False
        return True

    return matches


def _label_selector(text: str) -> Any:
    """A predicate over labels for the equality- and set-based selector syntax."""
    terms = []
    for term in re.findall(r"(?:[^,(]|\([^)]*\))+", text):
        term = term.strip()
        if not term:
            continue
        if match := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            values = {v.strip() for v in match[3].split(",")}
            terms.append((match[1], match[2], values))
        elif match := re.fullmatch(r"([\w./-]+)\s*(!=|==|=)\s*([\w./-]*)", term):
            terms.append((match[1], "notin" if match[2] == "!=" else "in", {match[3]}))
        elif match := re.fullmatch(r"(!?)([\w./-]+)", term):
            terms.append((match[2], "absent" if match[1] else "exists", set()))
        else:
            raise ValueError(f"invalid label selector term {term!r}")

    def matches(labels: Mapping[str, str]) -> bool:
        for key, op, values in terms:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "absent" and present:
                return False
            if op == "in" and (not present or labels[key] not in values):
                return False
            if op == "notin" and present and labels[key] in values:
                return False
        return True

    return matches


def _handler_for(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as urllib3 expects
        # Headers and body go out in two writes; without this, Nagle plus the
        # client's delayed ACK add 40 ms to every response.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            split = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=split.path,
                query=dict(parse_qsl(split.query, keep_blank_values=True)),
                headers={k.lower(): v for k, v in self.headers.items()},
            )
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            (status, headers, body), fault = server.handle(request)
            sent = body
            if fault is not None and fault.truncate and status == 200:
                sent = body[: len(body) // 2]
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if fault is not None and fault.drop and status == 200:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.send_header("Content-Length", str(len(sent)))
                self.end_headers()
                self.wfile.write(sent)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (a timeout)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # tests read server.requests instead

    return Handler


def write_kubeconfig(
    path: Path,
    server: str,
    *,
    token: str | None = "test-token",
    context: str = "fake-cluster",
) -> Path:
    """A kubeconfig for ``server`` with bearer-token auth (plain http, or
    ``insecure-skip-tls-verify`` for an https URL)."""
    cluster: dict[str, Any] = {"server": server}
    if server.startswith("https:"):
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": "gpuaudit", "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": "gpuaudit"}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def load_cluster(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A recorded cluster from a JSON file: {resource key: [raw objects]}."""
    data = json.loads(Path(path).read_text())
    return {key: value for key, value in data.items() if isinstance(value, list)}


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A running FakeApiServer with no cluster loaded (call ``.load(cluster)``)."""
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file pointing at the ``apiserver`` fixture, with its token."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a recorded cluster as a fake API server.")
    parser.add_argument("cluster", type=Path, help="recorded cluster JSON")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig here")
    args = parser.parse_args()
    server = FakeApiServer(load_cluster(args.cluster), port=args.port).start()
    if args.kubeconfig:
        write_kubeconfig(args.kubeconfig, server.url, token=server.token)
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
