"""A snapshot (raw cluster JSON + telemetry aggregates) -> the normalized
ClusterState (gpuaudit.model.cluster): GPU nodes, pods with their top owner and GPU holding, the GPU
sharing configuration, claims and queued work. Pure: no API calls here."""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from functools import cache, lru_cache
from typing import Any

from msgspec.structs import replace

from gpuaudit import gpus
from gpuaudit.kube.owners import controller_ref
from gpuaudit.kube.podspecs import GPU_RESOURCE, KindLocator, builtin_locators, group_of
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.kube.requests import pod_requests
from gpuaudit.kube.shapes import as_list, as_map
from gpuaudit.kube.timestamps import parse_time
from gpuaudit.model.cluster import ClusterState, Node, Owner, PodState
from gpuaudit.model.objects import Document, InputError
from gpuaudit.model.telemetry import normalized as normalized_telemetry
from gpuaudit.model.workload import Workload
from gpuaudit.model.workload_builder import build_workloads

# The objects of a snapshot's lists, and counts read from them: a snapshot file
# may have been edited, and a value of the wrong shape reads as absent.


def _objects(objects: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [o for o in as_list(objects.get(key)) if isinstance(o, Mapping)]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# Devices of one resource on one node beyond which a count is not believed
# (MIG slices and time-slicing replicas of 16 GPUs stay far below it). Intel's
# millicores and bytes are no GPU resources (kube/podspecs.py GPU_RESOURCE).
MAX_DEVICES_PER_NODE = 65_536


def _gpu_resources(values: Any, where: str, problems: list[str]) -> dict[str, float]:
    """The GPU resources in ``values``; what cannot be read is named in
    ``problems`` (``where`` is the field: status.capacity)."""
    out: dict[str, float] = {}
    if isinstance(values, Mapping):
        for name, value in values.items():
            if not GPU_RESOURCE.match(str(name)):
                continue
            try:
                number = parse_quantity(value)
            except QuantityError as exc:
                problems.append(f"{where}.{name}: {exc}")
                continue
            if number != int(number):
                problems.append(f"{where}.{name}: {value!r:.40} is not a whole number of devices")
            elif number > MAX_DEVICES_PER_NODE:
                problems.append(f"{where}.{name}: {value!r:.40} is more devices than a node has")
            else:
                out[str(name)] = number
    return out


def build_node(obj: Mapping[str, Any], errors: list[InputError] | None = None) -> Node:
    """The node; a GPU quantity it cannot read makes the node's GPUs unknown
    (``Node.unreadable``): left out of every GPU count, and named in ``errors``."""
    meta = as_map(obj.get("metadata"))
    spec = as_map(obj.get("spec"))
    status = as_map(obj.get("status"))
    labels = {str(k): str(v) for k, v in as_map(meta.get("labels")).items()}
    product = next((labels[k] for k in gpus.PRODUCT_LABELS if k in labels), None)
    name = str(meta.get("name", ""))
    problems: list[str] = []
    allocatable_of = as_map(status.get("allocatable"))
    capacity = _gpu_resources(status.get("capacity"), "status.capacity", problems)
    allocatable = _gpu_resources(allocatable_of, "status.allocatable", problems)
    if problems:
        capacity, allocatable = {}, {}
        if errors is not None:
            errors.append(
                InputError(
                    "cluster",
                    None,
                    f"node {name}: {'; '.join(problems)}; its GPUs are unknown: the node is left out of the GPU totals",
                )
            )
    return Node(
        name=name,
        labels=labels,
        taints=tuple(t for t in as_list(spec.get("taints")) if isinstance(t, Mapping)),
        unschedulable=spec.get("unschedulable") is True,
        gpu_capacity=capacity,
        gpu_allocatable=allocatable,
        product=product,
        model=_gpu_model(product) if product else None,
        unreadable=tuple(problems),
        cpu_allocatable=_amount(allocatable_of, "cpu"),
        memory_allocatable=_amount(allocatable_of, "memory"),
    )


@cache
def _gpu_model(product: str) -> gpus.GpuModel | None:
    """The catalogue's entry for a product label: a fleet has thousands of
    nodes and a handful of products."""
    return gpus.lookup(product)


def _amount(values: Mapping[str, Any], name: str) -> float | None:
    try:
        return parse_quantity(values[name]) if name in values else None
    except QuantityError:
        return None


def _owner_index(
    lists: Mapping[str, Iterable[Mapping[str, Any]]],
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """(kind, namespace, name) -> object. Items of a list response carry no
    kind, so the caller names it."""
    index = {}
    for kind, objects in lists.items():
        for obj in objects:
            meta = as_map(obj.get("metadata"))
            index[(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))] = obj
    return index


def resolve_owner(
    pod: Mapping[str, Any],
    intermediates: Mapping[tuple[str, str, str], Mapping[str, Any]],
    locators: Mapping[tuple[str, str], KindLocator],
) -> Owner:
    """Follow controller references up to the top workload: Pod -> ReplicaSet
    -> Deployment, Pod -> Job -> CronJob; CRD owners stop the walk."""
    meta = as_map(pod.get("metadata"))
    namespace = str(meta.get("namespace", ""))
    api_version, kind, name = "v1", "Pod", str(meta.get("name", ""))
    ref = controller_ref(pod)
    for _ in range(5):  # owner chains are short; a cycle must not loop forever
        if ref is None:
            break
        api_version, kind, name = (
            str(ref.get("apiVersion", "")),
            str(ref.get("kind", "")),
            str(ref.get("name", "")),
        )
        parent = intermediates.get((kind, namespace, name))
        ref = controller_ref(parent) if parent is not None else None
    located = locators.get((group_of(api_version), kind))
    workload_class = located.workload_class if located else ("pod" if kind == "Pod" else "other")
    return Owner(api_version, kind, name, workload_class)


def _latest_failed_scheduling(events: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    latest: dict[tuple[str, str], tuple[str, str]] = {}
    for event in events:
        if event.get("reason") != "FailedScheduling":
            continue
        involved = as_map(event.get("involvedObject"))
        key = (str(involved.get("namespace", "")), str(involved.get("name", "")))
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if key not in latest or stamp >= latest[key][0]:
            latest[key] = (stamp, str(event.get("message", "")))
    return {k: v[1] for k, v in latest.items()}


def build_pod(
    obj: Mapping[str, Any],
    workload: Workload,
    owner: Owner,
    failed_scheduling: str | None,
) -> PodState:
    spec = as_map(obj.get("spec"))
    status = as_map(obj.get("status"))
    phase = str(status.get("phase") or "Unknown")
    node = spec.get("nodeName") or None
    statuses = [s for s in as_list(status.get("containerStatuses")) if isinstance(s, Mapping)]
    statuses += [s for s in as_list(status.get("initContainerStatuses")) if isinstance(s, Mapping)]
    waiting = tuple(
        str(waiting["reason"])
        for waiting in (as_map(as_map(s.get("state")).get("waiting")) for s in statuses)
        if waiting.get("reason")
    )
    ready_condition = next(
        (c for c in as_list(status.get("conditions")) if isinstance(c, Mapping) and c.get("type") == "Ready"),
        None,
    )
    ready = bool(ready_condition and ready_condition.get("status") == "True")
    not_ready_since = parse_time(ready_condition.get("lastTransitionTime")) if ready_condition and not ready else None
    gates = tuple(str(g.get("name")) for g in as_list(spec.get("schedulingGates")) if isinstance(g, Mapping))
    return PodState(
        workload=workload,
        phase=phase,
        node=str(node) if node else None,
        owner=owner,
        # Succeeded and Failed pods have released their devices; a pod bound to
        # a node (even one whose containers cannot start) still holds them.
        holds_gpus=bool(node) and phase in ("Pending", "Running", "Unknown"),
        start_time=parse_time(status.get("startTime")),
        waiting_reasons=waiting,
        restarts=sum(_count(s.get("restartCount")) for s in statuses),
        ready=ready,
        not_ready_since=not_ready_since,
        scheduling_gates=gates,
        failed_scheduling=failed_scheduling,
    )


# Deliberately broad, so a new kind of GPU request is kept rather than
# silently dropped: any resource or annotation that mentions a GPU or an
# accelerator vendor's domain, and any DRA claim.
_GPU_MARKERS = ("gpu", "nvidia.com/", "amd.com/", "intel.com/", "habana.ai/", "neuron")


@lru_cache(maxsize=4096)
def _mentions_gpu(names: tuple[Any, ...]) -> bool:
    # Cached: a cluster's pods name a few dozen sets of resources and
    # annotation keys (every pod is asked, 50,000 on a large cluster). One
    # search over all the names: a marker has no newline, so it is found in
    # the joined text exactly when it is in one of the names.
    text = "\n".join(map(str, names)).lower()
    return any(marker in text for marker in _GPU_MARKERS)


def may_use_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether a raw pod may ask for GPUs. Every fact and count is about such
    pods; on a large cluster most pods ask for none, and building the model
    for them would be most of an audit's time."""
    spec = as_map(pod.get("spec"))
    if spec.get("resourceClaims"):
        return True
    names: list[Any] = [*as_map(as_map(pod.get("metadata")).get("annotations"))]
    for key in ("containers", "initContainers"):
        for container in as_list(spec.get(key)):
            resources = as_map(as_map(container).get("resources"))
            names += as_map(resources.get("limits"))
            names += as_map(resources.get("requests"))
    return _mentions_gpu(tuple(names))


def kept_for_audit(key: str, obj: Any) -> Any:
    """What an audit keeps of one object of the snapshot's list ``key``,
    given each object as it is read (``load_snapshot``'s ``each``).

    A large cluster's objects are mostly pods, and most of those may use no
    GPU (``may_use_gpus``). Of such a pod the audit reads its metadata (names,
    labels, owners), its spec (requests and node for the node's totals, the
    device plugin's volumes) and its phase, and none of the rest of its
    status: its conditions and container statuses, a third of a pod's
    memory. The status is cut to the phase."""
    if key == "pods" and obj.__class__ is dict and not may_use_gpus(obj):
        status = obj.get("status")
        if status.__class__ is dict and len(status) > 1:
            obj["status"] = {"phase": status["phase"]} if "phase" in status else {}
    return obj


def _unbound(spec: Any) -> Any:
    if isinstance(spec, Mapping) and "nodeName" in spec:
        return {k: v for k, v in spec.items() if k != "nodeName"}
    return spec


# The metadata that names one pod; the rest of a pod (its spec without
# nodeName, labels, annotations, owners) is what its replicas share.
_POD_IDENTITY = frozenset({"name", "generateName", "uid", "resourceVersion", "creationTimestamp"})


def _shared_content(pod: Mapping[str, Any]) -> bytes | None:
    """What ``pod``'s model is built from, less its identity and status, as
    bytes: equal for the replicas of one workload. marshal's version 2 writes
    each value with its type (1, 1.0, "1" and True differ) and nothing else,
    at half the cost of repr; None for a value it cannot write (not JSON):
    that pod is then built alone."""
    meta = pod.get("metadata")
    if isinstance(meta, Mapping):
        meta = {k: v for k, v in meta.items() if k not in _POD_IDENTITY}
    try:
        content = marshal.dumps([(k, meta if k == "metadata" else v) for k, v in pod.items() if k != "status"], 2)
    except ValueError:
        return None
    token = _token_volume(pod)
    if token is not None:
        # Masked where it is named (the volume and its mounts) with bytes of
        # the same length, so the key stays a faithful image of the rest.
        name = token.encode()
        content = content.replace(name, _TOKEN_VOLUME_PREFIX.encode() + b"\0" * (len(name) - len(_TOKEN_VOLUME_PREFIX)))
    return content


# The API server gives every pod a projected service-account token volume of
# its own name (kube-api-access-<5 random characters>), mounted in each
# container: without masking it no two real pods would be equal. Nothing
# the model reads depends on that name (a mount is only joined to its volume).
_TOKEN_VOLUME_PREFIX = "kube-api-access-"


def _token_volume(pod: Mapping[str, Any]) -> str | None:
    for volume in as_list(as_map(pod.get("spec")).get("volumes")):
        name = as_map(volume).get("name")
        if isinstance(name, str) and name.startswith(_TOKEN_VOLUME_PREFIX) and "projected" in volume:
            return name
    return None


class PodWorkloads:
    """Pods as Workloads (kind Pod), each distinct pod content built once.

    The replicas of a Deployment or the pods of a Job differ in their names
    and status, not in what the model reads: the first pod of a content is
    built, the others get a copy of its Workload with their own Document
    (identity, raw object). Templates are then shared between replicas, as
    are the facts computed from them (facts/cluster.py). The API server's
    token volume, named anew for each pod, is left out of the comparison."""

    def __init__(self, locators: Mapping[tuple[str, str], KindLocator]) -> None:
        self.locators = locators
        self.built: dict[bytes, tuple[Workload, list[InputError]]] = {}

    def build(self, doc: Document) -> tuple[Workload, list[InputError]]:
        """The pod's Workload, and what in it could not be read."""
        key = _shared_content(doc.obj)
        known = self.built.get(key) if key is not None else None
        if known is not None:
            workload, problems = known
            return replace(workload, document=doc), problems
        workloads, problems = build_workloads([doc], self.locators)
        if key is not None:
            self.built[key] = (workloads[0], problems)
        return workloads[0], problems


def build_cluster_state(snapshot: Mapping[str, Any]) -> ClusterState:
    objects = as_map(snapshot.get("objects"))
    locators = builtin_locators()
    node_errors: list[InputError] = []
    nodes = tuple(build_node(n, node_errors) for n in _objects(objects, "nodes"))
    owners: dict[str, list[Mapping[str, Any]]] = {
        "ReplicaSet": _objects(objects, "replicasets"),
        "Job": _objects(objects, "jobs"),
    }
    # Owners the collector kept (Deployments, CRDs...) carry their kind: the
    # walk goes through them to the top, as `gpuaudit fix` does.
    for obj in _objects(objects, "workloads"):
        owners.setdefault(str(obj.get("kind", "")), []).append(obj)
    intermediates = _owner_index(owners)
    pending_messages = _latest_failed_scheduling(_objects(objects, "events"))
    all_pods = _objects(objects, "pods")
    node_requests = _node_requests(all_pods)
    raw_pods = [p for p in all_pods if may_use_gpus(p)]
    # The scheduler writes nodeName when it binds a pod: on a live pod it is
    # the result of placement, not a constraint (PodState.node keeps it).
    documents = [
        Document(
            obj={"apiVersion": "v1", "kind": "Pod", **p, "spec": _unbound(p.get("spec"))},
            file="",
            line=0,
        )
        for p in raw_pods
    ]
    # One pod at a time, so that a value it cannot read names the pod.
    workloads: list[Workload] = []
    field_errors: list[InputError] = []
    pod_workloads = PodWorkloads(locators)
    for doc in documents:
        workload, problems = pod_workloads.build(doc)
        workloads.append(workload)
        field_errors += [InputError("cluster", None, f"pod {doc.namespace}/{doc.name}: {p.message}") for p in problems]
    pods = []
    for raw, workload in zip(raw_pods, workloads, strict=True):
        key = (workload.namespace, workload.name)
        pods.append(
            build_pod(
                raw,
                workload,
                resolve_owner(raw, intermediates, locators),
                pending_messages.get(key),
            )
        )
    configs = tuple(
        Document(obj={"apiVersion": "v1", "kind": "ConfigMap", **c}, file="", line=0)
        for c in _objects(objects, "configmaps")
    ) + tuple(
        Document(obj={"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", **c}, file="", line=0)
        for c in _objects(objects, "clusterpolicies")
    )
    unread = [e for e in as_list(snapshot.get("errors")) if isinstance(e, Mapping)]  # what the collector could not list
    errors = [
        InputError(
            e.get("endpoint", "cluster"),
            None,
            f"could not read {e.get('resource')}: {e.get('message')}"
            + (f" (HTTP {e['status']})" if e.get("status") else "")
            + "; this audit is partial",
        )
        for e in unread
    ]
    # Optional resources the identity may not list (a 403 on an operator's
    # custom resource, the ClusterPolicy, Kueue): a warning naming the
    # resource, what the audit lacks and what grants it -- not a partial audit.
    errors += [
        InputError(
            str(e.get("endpoint") or "cluster"),
            None,
            f"could not read {e.get('resource')} (optional; forbidden: {e.get('message')}): {e.get('note')}",
            level="warning",
        )
        for e in as_list(snapshot.get("forbidden"))
        if isinstance(e, Mapping)
    ]
    # A GPU count or node capacity that cannot be read is unknown, never zero:
    # an input error (exit 2), naming the node or pod and the field.
    errors += [*node_errors, *field_errors]
    collected = parse_time(snapshot.get("collected_at")) or datetime.now(timezone.utc)
    return ClusterState(
        collected_at=collected,
        nodes=nodes,
        pods=tuple(pods),
        configs=configs,
        claims=tuple(_objects(objects, "resourceclaims")),
        kueue_workloads=tuple(_objects(objects, "kueueworkloads")),
        telemetry=normalized_telemetry(snapshot.get("telemetry")),
        errors=tuple(errors),
        source=str(as_map(snapshot.get("cluster")).get("server") or "snapshot"),
        pods_total=len(all_pods),
        unread=frozenset(str(e["resource"]) for e in unread if e.get("resource")),
        node_requests=node_requests,
    )


def _node_requests(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """node -> (CPU cores, memory bytes) requested by the pods bound to it
    that have not finished (the scheduler's own accounting)."""
    out: dict[str, tuple[float, float]] = {}
    for pod in pods:
        spec = as_map(pod.get("spec"))
        node = spec.get("nodeName")
        if not node or as_map(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
            continue
        cpu, memory = pod_requests(spec)
        had = out.get(str(node), (0.0, 0.0))
        out[str(node)] = (had[0] + cpu, had[1] + memory)
    return out
