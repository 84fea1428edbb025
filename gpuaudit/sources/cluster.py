"""Read a live cluster through the Kubernetes API into a snapshot dict.

Read-only: every request is a GET (``list``, and ``get`` for a few ConfigMaps by
name); Secrets are never asked for. The official ``kubernetes`` client is used
for configuration (kubeconfig, ``--context``, in-cluster) and for the HTTP
calls, but responses are read as raw JSON (``_preload_content=False``): on a
50,000-pod cluster, building the client's model objects would cost several
times the memory and time of plain dicts, and the rest of gpuaudit wants plain
dicts anyway.

Failure policy: no API failure escapes :func:`collect`. Each resource is
collected on its own; a 403, a 5xx that outlives its retries, a timeout or a
garbled body becomes one entry in ``snapshot["errors"]`` (naming the resource
and the endpoint) and that resource's list stays empty -- a partial list would
read as free GPUs downstream, so a resource is all or nothing. So does an
answer past ``max_response_bytes``, a list whose ``continue`` token comes
back again (a list that never ends), and every list once the answers read in
all pass ``max_list_bytes``: a hostile or broken server ends in a partial
audit that names what it did not read, never in a process out of memory.
A 404 on an optional API group (GPU Operator, DRA, Kueue) means "not
installed" and goes to ``snapshot["absent"]``. A 403 on an *optional* resource -- the custom resources
of ML operators that own GPU pods, the GPU Operator's ClusterPolicy, Kueue's
Workloads: what the audit can judge without -- goes to ``snapshot["forbidden"]``
with what it costs and which deploy/ component grants it: a warning, not a
partial audit. A 403 on a core resource (nodes, pods, events, owners,
ConfigMaps, DRA) stays an error. Only a configuration problem (no usable
kubeconfig) raises, as :class:`ClusterSourceError`.

The ``kubernetes`` package is imported inside functions: importing this module
must stay cheap because the CLI imports it for every command.
"""

from __future__ import annotations

import email.utils
import fnmatch
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import msgspec
from msgspec.structs import replace

from gpuaudit.safetext import one_line
from gpuaudit.sources.snapshot import Transform, loads_json, without_credentials

__all__ = ["MAX_LIST_BYTES", "MAX_RESPONSE_BYTES", "OBJECT_KEYS", "ClusterSourceError", "collect"]

# The keys of ``snapshot["objects"]``, in collection order.
OBJECT_KEYS = (
    "nodes",
    "pods",
    "events",
    "replicasets",
    "jobs",
    "workloads",
    "configmaps",
    "clusterpolicies",
    "resourceclaims",
    "resourceslices",
    "kueueworkloads",
)

# ConfigMaps worth reading: the device plugin's sharing configuration lives in
# one of these (see gpu-domain.md §2).
DEVICE_PLUGIN_LABEL = "app.kubernetes.io/name=nvidia-device-plugin"
DEVICE_PLUGIN_CONFIGMAP_PATTERNS = ("time-slicing-config*", "*device-plugin*")
DEFAULT_OPERATOR_NAMESPACE = "gpu-operator"
# Accept header asking the API server for names and labels only (no ``data``).
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

_MAX_ATTEMPTS = 5  # per request, for 429 / 5xx / dropped connections
_BACKOFF = 0.5  # seconds before the second attempt; doubles after that
_MAX_BACKOFF = 10.0
_READ_CHUNK = 1 << 16
# Bytes one answer may take (--max-response-bytes): a page of 500 objects is a
# few MiB; the limit is Prometheus' (telemetry param max_response_bytes).
MAX_RESPONSE_BYTES = 256 * 2**20
# Bytes all the answers of one collection may take together (--max-list-bytes):
# the 50,000-pod benchmark cluster sends 137 MiB; what is kept of the objects
# takes about three times their bytes in memory.
MAX_LIST_BYTES = 2**30


# An Authorization header's value, as an error message may quote it.
_AUTH_VALUE = re.compile(r"\b(Bearer|Basic)\s+[^\s'\",)]+", re.IGNORECASE)


def credentials_of(configuration: Any) -> tuple[str, ...]:
    """The secrets a client Configuration holds, as they could appear in an
    error message: each token or password, also as repr() writes it (a token
    with a control character in it), longest first; the basic-auth header."""
    import base64

    found: set[str] = set()
    values = [str(v) for v in (getattr(configuration, "api_key", None) or {}).values()]
    values.append(str(getattr(configuration, "password", None) or ""))
    user = getattr(configuration, "username", None)
    if user and getattr(configuration, "password", None):
        values.append(base64.b64encode(f"{user}:{configuration.password}".encode()).decode())
    for value in values:
        value = value.split(" ", 1)[1] if value.lower().startswith(("bearer ", "basic ")) else value
        for form in (value, value.strip(), repr(value)[1:-1]):
            if len(form.strip()) >= 8:  # never a word an error says anyway
                found.add(form)
    return tuple(sorted(found, key=len, reverse=True))


class ClusterSourceError(Exception):
    """The cluster cannot be reached at all (bad or missing kubeconfig)."""


class _Api(msgspec.Struct, frozen=True):
    """One list endpoint: a snapshot key and where it lives in the API."""

    key: str
    group: str  # "" for the core group
    version: str
    plural: str
    optional: bool = False  # 404 means "not installed", not an error
    label_selector: str | None = None
    field_selector: str | None = None
    kind: str = ""  # set on each item: items of a list response carry no kind
    # Set on the optional resources whose 403 is a warning, not a partial
    # audit: what the audit lacks without them and what grants them.
    forbidden_note: str = ""

    @property
    def name(self) -> str:
        """RESOURCE.GROUP, as RBAC and ``kubectl get`` name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def path(self) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/{self.plural}"

    @property
    def endpoint(self) -> str:
        """The path with its selectors, as named in error records."""
        query = [
            f"{name}={value}"
            for name, value in (
                ("fieldSelector", self.field_selector),
                ("labelSelector", self.label_selector),
            )
            if value
        ]
        return self.path + ("?" + "&".join(query) if query else "")


NODES = _Api("nodes", "", "v1", "nodes")
PODS = _Api("pods", "", "v1", "pods")
EVENTS = _Api("events", "", "v1", "events", field_selector="reason=FailedScheduling")
REPLICASETS = _Api("replicasets", "apps", "v1", "replicasets")
JOBS = _Api("jobs", "batch", "v1", "jobs")
CONFIGMAPS_LABELLED = _Api("configmaps", "", "v1", "configmaps", label_selector=DEVICE_PLUGIN_LABEL)
CONFIGMAPS_METADATA = _Api("configmaps", "", "v1", "configmaps")
# What grants the optional resources (deploy/README.md, the Helm chart's values).
BASE_GRANT = "the base ClusterRole gpuaudit-reader grants it (deploy/base/rbac.yaml)"
ML_OPERATORS_GRANT = (
    "grant it with the opt-in component deploy/components/ml-operators (Helm: mlOperators.enabled=true)"
)
CLUSTERPOLICIES = _Api(
    "clusterpolicies",
    "nvidia.com",
    "v1",
    "clusterpolicies",
    optional=True,
    forbidden_note="the GPU Operator's settings (device-plugin config, MIG strategy) are unknown; "
    "sharing is judged from the device-plugin ConfigMaps and pods alone; " + BASE_GRANT,
)
RESOURCECLAIMS = _Api("resourceclaims", "resource.k8s.io", "v1", "resourceclaims", optional=True)
RESOURCESLICES = _Api("resourceslices", "resource.k8s.io", "v1", "resourceslices", optional=True)
# The owners of ReplicaSets, Jobs and pods, kept in "workloads" when they own
# GPU pods (``gpuaudit fix --snapshot`` patches them). Custom resources that own
# GPU pods are listed too, each at the version its owner references name.
OWNER_APIS = (
    _Api("workloads", "apps", "v1", "deployments", kind="Deployment"),
    _Api("workloads", "apps", "v1", "statefulsets", kind="StatefulSet"),
    _Api("workloads", "apps", "v1", "daemonsets", kind="DaemonSet"),
    _Api("workloads", "batch", "v1", "cronjobs", kind="CronJob"),
)
# Kueue serves v1beta2 since v0.15 and v1beta1 before; newest first.
KUEUE_WORKLOADS = tuple(
    _Api(
        "kueueworkloads",
        "kueue.x-k8s.io",
        version,
        "workloads",
        optional=True,
        forbidden_note="GPU work queued in Kueue without pods yet is not counted; " + BASE_GRANT,
    )
    for version in ("v1beta2", "v1beta1")
)


def _owner_note(kind: str) -> str:
    return (
        f"pods owned by {kind} objects are still judged, from the pods themselves, but their owner "
        f"chain stops at the {kind} (anything above it is unknown) and `gpuaudit fix --snapshot` "
        f"cannot patch them; " + ML_OPERATORS_GRANT
    )


class _Failure(Exception):
    """A request that failed for good (after any retries)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Collector(msgspec.Struct):
    """Pagination, retries and the deadline, shared by every resource."""

    apis: Any  # _Typed: the client's API objects
    request_timeout: float
    deadline: float  # time.monotonic() value
    page_size: int
    progress: Callable[[str, int], None] | None
    max_attempts: int
    backoff: float
    sleep: Callable[[float], None] = time.sleep
    max_response_bytes: int = MAX_RESPONSE_BYTES
    max_list_bytes: int = MAX_LIST_BYTES
    read_bytes: int = 0  # of every answer so far, against max_list_bytes
    # What to keep of each object read, given its key in the snapshot's
    # objects (load_snapshot); None keeps it whole.
    each: Transform | None = None
    # The client's credentials (a bearer token, a password), never repeated
    # in a message: they go into every output format (credentials_of).
    secrets: tuple[str, ...] = ()
    errors: list[dict[str, Any]] = msgspec.field(default_factory=list)
    absent: list[str] = msgspec.field(default_factory=list)
    forbidden: list[dict[str, Any]] = msgspec.field(default_factory=list)

    # -- one list, all pages ------------------------------------------------

    def list_all(self, api: _Api, *, metadata_only: bool = False) -> list[dict[str, Any]] | None:
        """Every item of ``api``, or None after recording why not.

        A 410 on a continue token (the server compacted past our snapshot)
        restarts the list once from the beginning: continuing with the token
        the 410 offers would mix two points in time. A continue token that
        comes back (the same page again, or a cycle) is a list that never
        ends: it is given up, as a failure.
        """
        items: list[dict[str, Any]] = []
        token: str | None = None
        restarted = False
        seen: set[str] = set()  # continue tokens of this list
        while True:
            try:
                if token is not None and token in seen:
                    raise _Failure(
                        None,
                        f"the API server sent a continue token it had sent before, after {len(seen)} "
                        "page(s): this list would never end; not read further",
                    )
                if token is not None:
                    seen.add(token)
                page = self._page(api, token, metadata_only)
            except _Failure as failure:
                if failure.status == 410 and token is not None and not restarted:
                    restarted, items, token = True, [], None
                    seen.clear()
                    continue
                if failure.status == 404 and api.optional:
                    return None
                if failure.status == 403 and api.forbidden_note:
                    self.forbidden.append(
                        {
                            "resource": api.name,
                            "endpoint": api.endpoint,
                            "status": 403,
                            "message": self.scrubbed(failure.message),
                            "note": api.forbidden_note,
                        }
                    )
                    return None
                self.record(api.key, api.endpoint, failure, read=len(items))
                return None
            for item in page["items"]:
                _drop_managed_fields(item)
                items.append(item if self.each is None else self.each(api.key, item))
            if self.progress is not None and not metadata_only:
                self.progress(api.key, len(items))
            token = page["continue"]
            if not token:
                return items

    def get_object(self, key: str, path: str, call: Callable[..., Any]) -> dict[str, Any] | None:
        """One object by name; None (with the error recorded) when it fails."""
        try:
            body = self._request(path, call)
        except _Failure as failure:
            self.record(key, path, failure)
            return None
        obj = _parse_object(body)
        if obj is None:
            self.record(key, path, _Failure(None, "response is not a JSON object"))
            return None
        _drop_managed_fields(obj)
        return obj if self.each is None else self.each(key, obj)

    def record(self, key: str, endpoint: str, failure: _Failure, read: int = 0) -> None:
        message = self.scrubbed(failure.message)
        if read:
            message += f" (after {read} objects; partial list discarded)"
        self.errors.append({"resource": key, "endpoint": endpoint, "status": failure.status, "message": message})

    def scrubbed(self, message: str) -> str:
        """``message`` without the client's credentials: an error may quote a
        request header (http.client's "Invalid header value b'Bearer ...'"
        for a token that ends in a newline), or a server may echo one."""
        for secret in self.secrets:
            message = message.replace(secret, "<redacted>")
        return _AUTH_VALUE.sub(r"\1 <redacted>", message)

    # -- one page -----------------------------------------------------------

    def _page(self, api: _Api, token: str | None, metadata_only: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"limit": self.page_size}
        if token:
            kwargs["_continue"] = token
        if api.label_selector:
            kwargs["label_selector"] = api.label_selector
        if api.field_selector:
            kwargs["field_selector"] = api.field_selector
        call = self.apis.lister(api, metadata_only=metadata_only)
        body = self._request(api.endpoint, lambda **kw: call(**kwargs, **kw))
        return _parse_list(body)

    def _request(self, endpoint: str, call: Callable[..., Any]) -> bytearray:
        """The body of one successful GET, retrying what is worth retrying."""
        from kubernetes.client.exceptions import ApiException

        attempt = 0
        while True:
            attempt += 1
            timeout = min(self.request_timeout, self.deadline - time.monotonic())
            if timeout <= 0.01:
                raise _Failure(None, "overall deadline exceeded before the request was sent")
            if self.read_bytes > self.max_list_bytes:
                raise _Failure(
                    None,
                    f"not requested: the API server's answers already took more than "
                    f"{self.max_list_bytes:,} bytes in all (--max-list-bytes)",
                )
            try:
                response = call(_preload_content=False, _request_timeout=timeout)
                return self._read(response)
            except ApiException as exc:
                status = int(exc.status or 0) or None
                message = _status_message(exc)
                retryable = status is not None and (status == 429 or 500 <= status <= 599)
                wait = _retry_after(exc) if status in (429, 503) else None
            except _Failure:
                raise
            except (ValueError, TypeError) as exc:  # the request itself cannot be made (a header, a URL)
                status, retryable, wait = None, False, None
                message = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # urllib3/socket errors vary by version
                status, retryable, wait = None, True, None
                message = f"{type(exc).__name__}: {exc}"
            if not retryable or attempt >= self.max_attempts:
                if retryable:
                    message += f" (gave up after {attempt} attempts)"
                raise _Failure(status, message)
            if wait is None:
                wait = min(self.backoff * 2 ** (attempt - 1), _MAX_BACKOFF)
            if time.monotonic() + wait >= self.deadline:
                raise _Failure(status, message + " (no time left before the deadline to retry)")
            self.sleep(wait)

    def _read(self, response: Any) -> bytearray:
        """Read a streamed body in chunks so that the deadline also bounds a
        server that answers quickly but sends its body slowly, and so that
        no answer takes more than ``max_response_bytes``, nor all of them
        together more than ``max_list_bytes`` (an endless body is cut off, not
        read until memory runs out). A length announced past the limit is
        refused before a byte of the body is read."""
        limit = self.max_response_bytes
        body = bytearray()  # loads_json takes it as it is: no copy of a large answer
        try:
            headers = getattr(response, "headers", None)
            length = str(headers.get("Content-Length") or "").strip() if headers is not None else ""
            if length.isdigit() and int(length) > limit:
                raise _Failure(
                    None,
                    f"answer of {int(length):,} bytes refused: the limit is {limit:,} bytes (--max-response-bytes)",
                )
            while True:
                if time.monotonic() > self.deadline:
                    raise _Failure(None, "overall deadline exceeded while reading the response")
                chunk = response.read(_READ_CHUNK)
                if not chunk:
                    break
                body += chunk
                self.read_bytes += len(chunk)
                if len(body) > limit:
                    raise _Failure(
                        None,
                        f"answer larger than {limit:,} bytes: not read further (--max-response-bytes)",
                    )
                if self.read_bytes > self.max_list_bytes:
                    raise _Failure(
                        None,
                        f"the API server's answers took more than {self.max_list_bytes:,} bytes in "
                        "all: not read further (--max-list-bytes)",
                    )
        except BaseException:
            response.close()
            raise
        response.release_conn()
        return body


class _Typed:
    """The client's typed list/read functions, behind one lookup.

    The typed functions (rather than ``ApiClient.call_api``) are used because
    their keyword interface (``limit``, ``_continue``, ``_preload_content``,
    ``_request_timeout``) is the same across client majors, while ``call_api``
    has a different signature in the regenerated clients (v37 here) than in
    older ones. Importing ``CoreV1Api`` costs about half a second, once per
    collection; only ``audit``/``snapshot`` pay it. Built-in kinds
    use their typed ``list_*_for_all_namespaces``; everything else goes
    through ``CustomObjectsApi``, whose cluster-wide list also serves
    namespaced resources such as ResourceClaims.
    """

    def __init__(self, client_module: Any, api_client: Any, metadata_client: Any) -> None:
        self.core = client_module.CoreV1Api(api_client)
        self.custom = client_module.CustomObjectsApi(api_client)
        self._builtin = {
            ("", "nodes"): self.core.list_node,
            ("", "pods"): self.core.list_pod_for_all_namespaces,
            ("", "events"): self.core.list_event_for_all_namespaces,
            ("", "configmaps"): self.core.list_config_map_for_all_namespaces,
            ("apps", "replicasets"): client_module.AppsV1Api(api_client).list_replica_set_for_all_namespaces,
            ("batch", "jobs"): client_module.BatchV1Api(api_client).list_job_for_all_namespaces,
            ("apps", "deployments"): client_module.AppsV1Api(api_client).list_deployment_for_all_namespaces,
            ("apps", "statefulsets"): client_module.AppsV1Api(api_client).list_stateful_set_for_all_namespaces,
            ("apps", "daemonsets"): client_module.AppsV1Api(api_client).list_daemon_set_for_all_namespaces,
            ("batch", "cronjobs"): client_module.BatchV1Api(api_client).list_cron_job_for_all_namespaces,
        }
        # A separate client whose default Accept header asks for metadata only;
        # default headers override the typed function's own Accept.
        self._metadata_configmaps = client_module.CoreV1Api(metadata_client).list_config_map_for_all_namespaces

    def lister(self, api: _Api, *, metadata_only: bool = False) -> Callable[..., Any]:
        if metadata_only and (api.group, api.plural) == ("", "configmaps"):
            return self._metadata_configmaps
        builtin = self._builtin.get((api.group, api.plural))
        if builtin is not None:
            return builtin

        def custom(**kwargs: Any) -> Any:
            return self.custom.list_cluster_custom_object(api.group, api.version, api.plural, **kwargs)

        return custom

    def read_configmap(self, namespace: str, name: str) -> Callable[..., Any]:
        def read(**kwargs: Any) -> Any:
            return self.core.read_namespaced_config_map(name, namespace, **kwargs)

        return read


def collect(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    request_timeout: float = 30.0,
    deadline: float = 300.0,
    page_size: int = 500,
    progress: Callable[[str, int], None] | None = None,
    max_attempts: int = _MAX_ATTEMPTS,
    backoff: float = _BACKOFF,
    pod_selector: str | None = None,
    each: Transform | None = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    max_list_bytes: int = MAX_LIST_BYTES,
) -> dict[str, Any]:
    """Collect the objects gpuaudit audits into a version-1 snapshot dict.

    ``kubeconfig`` defaults to ``$KUBECONFIG`` (which may list several files)
    or ``~/.kube/config``; ``context`` picks a context from it; ``in_cluster``
    uses the pod's service account instead. ``request_timeout`` bounds each
    HTTP request and ``deadline`` the whole collection (seconds). ``progress``
    is called as ``progress(resource, objects_so_far)`` after every page.
    ``max_attempts`` and ``backoff`` tune the retries of 429/5xx answers.
    ``pod_selector``: a label selector for the pod list (the server filters;
    nodes and everything else are read whole). ``each(key, obj)``: what to
    keep of each object as it is read (``key``: its list in the snapshot's
    objects); None keeps them whole. ``max_response_bytes``: the most one
    answer may take; ``max_list_bytes``: the most all answers may take
    together (past either, the list being read is an error, and so is every
    list after it).

    Raises :class:`ClusterSourceError` only when no client can be configured.
    """
    started = time.monotonic()
    collected_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    from kubernetes import client as k8s_client

    configuration, context_name = _configure(kubeconfig, context, in_cluster)
    # Our own retries honour Retry-After and the deadline; the client's urllib3
    # retries would repeat timed-out reads behind our back.
    configuration.retries = False
    api_client = k8s_client.ApiClient(configuration)
    metadata_client = k8s_client.ApiClient(configuration)
    metadata_client.set_default_header("Accept", _METADATA_ONLY)
    try:
        typed = _Typed(k8s_client, api_client, metadata_client)
        collector = _Collector(
            apis=typed,
            request_timeout=request_timeout,
            deadline=started + deadline,
            page_size=page_size,
            progress=progress,
            max_attempts=max(1, max_attempts),
            backoff=backoff,
            each=each,
            max_response_bytes=max_response_bytes,
            max_list_bytes=max_list_bytes,
            secrets=credentials_of(configuration),
        )
        objects = _collect_objects(collector, typed, pod_selector)
    finally:
        api_client.close()
        metadata_client.close()
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": collected_at,
        # A server URL may carry user:password@ (a kubeconfig's basic auth): never the cluster's name.
        "cluster": {"server": without_credentials(configuration.host), "context": context_name},
        "objects": objects,
        "absent": collector.absent,
        "errors": collector.errors,
        "forbidden": collector.forbidden,
        "telemetry": None,
    }


def _collect_objects(
    collector: _Collector, typed: _Typed, pod_selector: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    objects: dict[str, list[dict[str, Any]]] = {key: [] for key in OBJECT_KEYS}
    pods = replace(PODS, label_selector=pod_selector) if pod_selector else PODS
    for api in (NODES, pods, EVENTS, REPLICASETS, JOBS):
        objects[api.key] = collector.list_all(api) or []
    objects["workloads"] = _owners(collector, objects)
    # The ClusterPolicy comes before the ConfigMaps: it names one of them.
    objects["clusterpolicies"] = _optional(collector, (CLUSTERPOLICIES,))
    objects["configmaps"] = _configmaps(collector, typed, objects["clusterpolicies"], objects["pods"])
    objects["resourceclaims"] = _optional(collector, (RESOURCECLAIMS,))
    objects["resourceslices"] = _optional(collector, (RESOURCESLICES,))
    objects["kueueworkloads"] = _optional(collector, KUEUE_WORKLOADS)
    return objects


def _optional(collector: _Collector, versions: tuple[_Api, ...]) -> list[dict[str, Any]]:
    """The first version of an optional API that exists; "absent" if none."""
    errors_before, forbidden_before = len(collector.errors), len(collector.forbidden)
    for api in versions:
        items = collector.list_all(api)
        if items is not None:
            return items
        if len(collector.errors) > errors_before or len(collector.forbidden) > forbidden_before:
            return []  # failed or forbidden, not missing
    collector.absent.append(versions[0].key)
    return []


def _owners(collector: _Collector, objects: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The objects that own GPU pods, up to the top of each owner chain.

    The core owner kinds are listed whole (one list each, whatever the pods
    say: RBAC grants exactly these). Custom resources are listed only when a
    GPU pod's chain names one, one list per (group, version, plural), and the
    walk goes on through what they add (a RayCluster owned by a RayService).
    A custom resource API that is not installed is "absent"; a forbidden one
    is "forbidden" (a warning: the base role does not grant operators' custom
    resources, deploy/components/ml-operators does); another failure is an
    error naming it. Either way the chains through it stop where it was, and
    the pods below are still judged.
    """
    from gpuaudit.kube import owners
    from gpuaudit.model.cluster_builder import may_use_gpus

    walk = owners.OwnerWalk([p for p in objects["pods"] if may_use_gpus(p)])
    walk.add(objects["replicasets"], "apps", "ReplicaSet")
    walk.add(objects["jobs"], "batch", "Job")
    listed: set[tuple[str, str]] = set()  # (group, kind) read or tried
    tried: set[tuple[str, str, str]] = set()  # (group, version, plural)
    apis = list(OWNER_APIS)
    while apis:
        for api in apis:
            listed.add((api.group, api.kind))
            tried.add((api.group, api.version, api.plural))
            items = collector.list_all(api)
            if items is None and api.optional and not _failed(collector, api):
                collector.absent.append(f"{api.plural}.{api.group}")
            walk.add((_with_kind(item, api) for item in items or []), api.group, api.kind)
        _, unresolved = walk.walk()
        apis = []
        for api_version, kind in sorted(unresolved):
            group, version = owners.group_version(api_version)
            plural = owners.plurals().get((group, kind))
            if not group or not plural or (group, version, plural) in tried:
                continue
            tried.add((group, version, plural))
            apis.append(
                _Api(
                    "workloads",
                    group,
                    version,
                    plural,
                    optional=True,
                    kind=kind,
                    forbidden_note=_owner_note(kind),
                )
            )
    return walk.owners()


def _failed(collector: _Collector, api: _Api) -> bool:
    return any(e["endpoint"] == api.endpoint for e in (*collector.errors, *collector.forbidden))


def _with_kind(item: dict[str, Any], api: _Api) -> dict[str, Any]:
    """The item with its kind and apiVersion, which list items leave out."""
    api_version = f"{api.group}/{api.version}" if api.group else api.version
    return {"apiVersion": api_version, "kind": api.kind, **item} if "kind" not in item else item


def _configmaps(
    collector: _Collector,
    typed: _Typed,
    clusterpolicies: list[dict[str, Any]],
    pods: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The device plugin's ConfigMaps, without reading every ConfigMap's data.

    ConfigMaps are often the biggest objects in a cluster (dashboards, CA
    bundles, application configs) and may hold things an auditor has no
    business copying into a report, so the collector never downloads them all.
    It reads:

    1. ConfigMaps labelled ``app.kubernetes.io/name=nvidia-device-plugin``
       (the device-plugin Helm chart's own), filtered by the API server;
    2. the names of all ConfigMaps, as metadata only
       (``PartialObjectMetadataList``: no ``data``), then GETs the ones named
       like ``time-slicing-config*`` or ``*device-plugin*`` -- field selectors
       cannot match name patterns, so this is the cheapest server-side way;
    3. by name: the one the GPU Operator's ClusterPolicy names in
       ``spec.devicePlugin.config.name`` (in the operator's namespace), and
       any ConfigMap mounted by a device-plugin pod (a Helm install may use
       any name).

    RBAC cannot restrict ``list`` by name, so this needs ``list`` and ``get``
    on ConfigMaps all the same; the gain is bytes and exposure, not permission.
    Each step records its own error; what the other steps found is kept.
    """
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in collector.list_all(CONFIGMAPS_LABELLED) or []:
        found[_ns_name(obj)] = obj

    wanted: dict[tuple[str, str], bool] = {}  # (ns, name) -> must exist
    for item in collector.list_all(CONFIGMAPS_METADATA, metadata_only=True) or []:
        namespace, name = _ns_name(item)
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in DEVICE_PLUGIN_CONFIGMAP_PATTERNS):
            wanted.setdefault((namespace, name), False)
    operator_ns = _operator_namespace(clusterpolicies, pods)
    for policy in clusterpolicies:
        name = _dig(policy, "spec", "devicePlugin", "config", "name")
        if isinstance(name, str) and name:
            wanted[(operator_ns, name)] = True
    for ref in _device_plugin_pod_configmaps(pods):
        wanted.setdefault(ref, False)

    for (namespace, name), must_exist in sorted(wanted.items()):
        if (namespace, name) in found:
            continue
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        if must_exist:
            obj = collector.get_object("configmaps", path, typed.read_configmap(namespace, name))
        else:
            # Seen in the name list a moment ago; if it is gone now, so be it.
            obj = _get_quietly(collector, path, typed.read_configmap(namespace, name))
        if obj is not None:
            found[(namespace, name)] = obj
    return [found[key] for key in sorted(found)]


def _get_quietly(collector: _Collector, path: str, call: Callable[..., Any]) -> dict[str, Any] | None:
    errors_before = len(collector.errors)
    obj = collector.get_object("configmaps", path, call)
    if obj is None and collector.errors[errors_before:] and collector.errors[-1]["status"] == 404:
        del collector.errors[-1]
    return obj


def _operator_namespace(clusterpolicies: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    """Where the GPU Operator runs: its ClusterPolicy says so in
    ``status.namespace``; failing that, the operator pod's namespace."""
    for policy in clusterpolicies:
        namespace = _dig(policy, "status", "namespace")
        if isinstance(namespace, str) and namespace:
            return namespace
    for pod in pods:
        labels = _dig(pod, "metadata", "labels") or {}
        if labels.get("app") == "gpu-operator" or labels.get("app.kubernetes.io/component") == "gpu-operator":
            namespace = _dig(pod, "metadata", "namespace")
            if isinstance(namespace, str) and namespace:
                return namespace
    return DEFAULT_OPERATOR_NAMESPACE


def _device_plugin_pod_configmaps(pods: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    """ConfigMaps mounted as volumes by device-plugin pods. Projected volumes
    are left out: every pod's projected service-account volume carries
    ``kube-root-ca.crt``, which is not a device-plugin config."""
    refs: set[tuple[str, str]] = set()
    for pod in pods:
        labels = _dig(pod, "metadata", "labels") or {}
        name = str(_dig(pod, "metadata", "name") or "")
        if labels.get("app.kubernetes.io/name") != "nvidia-device-plugin" and not name.startswith(
            "nvidia-device-plugin"
        ):
            continue
        namespace = str(_dig(pod, "metadata", "namespace") or "default")
        for volume in _dig(pod, "spec", "volumes") or []:
            source = volume.get("configMap") if isinstance(volume, dict) else None
            if isinstance(source, dict) and source.get("name"):
                refs.add((namespace, str(source["name"])))
    return refs


# -- configuration ----------------------------------------------------------


def _configure(kubeconfig: str | None, context: str | None, in_cluster: bool) -> tuple[Any, str | None]:
    """A fresh client Configuration (never the process-wide default)."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = k8s_client.Configuration()
    # The client reads $KUBECONFIG once, when it is imported; read it now.
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
            return configuration, None
        with _ExecFailures() as exec_failures:
            k8s_config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,  # an audit never writes to the user's kubeconfig
            )
        if exec_failures.reasons:
            raise ClusterSourceError(
                f"cannot configure a Kubernetes client from {kubeconfig or '$KUBECONFIG or ~/.kube/config'}: "
                f"its exec plugin failed ({exec_failures.reasons[0]}); what the plugin printed is not "
                "repeated here (it may hold a credential): run the plugin's command to see it"
            )
        _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except k8s_config.ConfigException as exc:
        default = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        where = "the in-cluster service account" if in_cluster else default
        raise ClusterSourceError(f"cannot configure a Kubernetes client from {where}: {exc}") from exc
    except (OSError, ValueError, TypeError, KeyError) as exc:
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise ClusterSourceError(f"cannot read kubeconfig {where}: {exc}") from exc
    context_name = context or (active or {}).get("name")
    return configuration, context_name


class _ExecFailures:
    """The kubeconfig's exec plugin failing, while the client loads it.

    The client runs the plugin (as kubectl does: the kubeconfig is the
    user's, and a repository's config never names one) and, when it fails,
    logs the plugin's stderr on the root logger -- printed by logging's
    default handler, token and all if the plugin printed one -- then goes on
    without credentials, so that every list fails with 401. Here the failure
    is kept (its exit status, not what the plugin printed) and becomes one
    clear error; nothing is printed."""

    def __init__(self) -> None:
        import logging

        self.reasons: list[str] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if message.startswith("exec: process returned"):
                    message = message.split(". ", 1)[0]  # the plugin's own stderr left out
                outer.reasons.append(one_line(message)[:200])

        self._handler = Handler(logging.ERROR)
        self._root = logging.getLogger()

    def __enter__(self) -> _ExecFailures:
        self._root.addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._root.removeHandler(self._handler)


# -- parsing ------------------------------------------------------------------


def _parse_list(body: bytes | bytearray) -> dict[str, Any]:
    """``{"items": [...], "continue": str}`` from a List body, or _Failure."""
    try:
        data = loads_json(body)
    except ValueError as exc:
        raise _Failure(None, f"invalid JSON in response ({len(body)} bytes): {exc}") from exc
    if not isinstance(data, dict):
        raise _Failure(None, "response is not a JSON object")
    items = data.get("items")
    if items is None:
        items = []  # an empty custom-resource list may say "items": null
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise _Failure(None, f"response has no list of objects (kind {data.get('kind')!r})")
    token = _dig(data, "metadata", "continue")
    return {"items": items, "continue": token if isinstance(token, str) else None}


def _parse_object(body: bytes | bytearray) -> dict[str, Any] | None:
    try:
        data = loads_json(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _drop_managed_fields(obj: dict[str, Any]) -> None:
    # managedFields is often half of an object's size and nothing reads it.
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def _status_message(exc: Any) -> str:
    """The API's own explanation (a Status object's ``message``) when it sent one."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            data = json.loads(body)
        except ValueError:
            return f"{exc.reason or 'error'}: {body.strip()[:300]}"
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    return str(exc.reason or f"HTTP {exc.status}")


def _retry_after(exc: Any) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date)."""
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
