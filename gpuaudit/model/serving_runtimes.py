"""KServe serving runtimes: the effective spec of an InferenceService's
predictor, as KServe builds it from the ServingRuntime (or
ClusterServingRuntime) the service runs on and the service's own container.

KServe takes the runtime's container (the first, `kserve-container`) and
strategic-merges the service's model container over it: the service's
resources win key by key (`requests.memory` set on the service replaces the
runtime's, `requests.cpu` left out keeps the runtime's), env and volume mounts
merge by name and mount path, args are the runtime's followed by the
service's. The runtime's pod fields (volumes such as a memory-backed
/dev/shm, nodeSelector, tolerations, ...) merge under the predictor's. A rule
or a patch that looks only at the InferenceService sees none of what the
runtime gives: this module produces what the pod will really ask for.

Pure: plain objects in, plain objects out; no IO.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import msgspec.structs

from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.model.objects import Document
from gpuaudit.model.workload import PodTemplate, Workload
from gpuaudit.model.workload_builder import build_workloads

KSERVE_GROUP = "serving.kserve.io"
RUNTIME_KINDS = ("ServingRuntime", "ClusterServingRuntime")
# Predictor keys that name a model served by a runtime: `model` (with
# modelFormat and optionally runtime), and the older per-framework keys,
# whose key is the model format.
FRAMEWORK_KEYS = (
    "tensorflow",
    "pytorch",
    "sklearn",
    "xgboost",
    "onnx",
    "triton",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
# Strategic-merge keys of the container lists KServe merges.
_LIST_KEYS = {"env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "envFrom": None}
# Pod-level lists and their merge keys.
_POD_LIST_KEYS = {"volumes": "name", "tolerations": None, "imagePullSecrets": "name"}
# Predictor fields that are KServe's, not the pod's: never merged from a runtime.
_PREDICTOR_ONLY = {
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "containerConcurrency",
    "timeout",
    "canaryTrafficPercent",
    "logger",
    "batcher",
    "workerSpec",
    "model",
    *FRAMEWORK_KEYS,
}


class Runtime(msgspec.Struct, frozen=True):
    kind: str  # ServingRuntime | ClusterServingRuntime
    namespace: str
    name: str
    obj: Mapping[str, Any]

    @property
    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    def formats(self) -> list[tuple[str, bool, int]]:
        """(model format name, autoSelect, priority) of each supported format."""
        spec = self.obj.get("spec") if isinstance(self.obj.get("spec"), Mapping) else {}
        out = []
        for f in spec.get("supportedModelFormats") or []:
            if isinstance(f, Mapping) and isinstance(f.get("name"), str):
                priority = f.get("priority")
                out.append((f["name"].lower(), bool(f.get("autoSelect")), priority if isinstance(priority, int) else 0))
        return out

    @property
    def disabled(self) -> bool:
        spec = self.obj.get("spec") if isinstance(self.obj.get("spec"), Mapping) else {}
        return bool(spec.get("disabled"))

    def container(self) -> Mapping[str, Any] | None:
        spec = self.obj.get("spec") if isinstance(self.obj.get("spec"), Mapping) else {}
        containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
        named = [c for c in containers if c.get("name") == "kserve-container"]
        return (named or containers or [None])[0]


class Resolution(msgspec.Struct, frozen=True):
    """How an InferenceService's predictor container is built: ``backed`` when
    a runtime supplies it; ``runtime`` the one that does (None when it is not
    among the objects read); ``reason`` why it is unknown."""

    backed: bool
    runtime: Runtime | None = None
    reason: str | None = None
    pointer: str | None = None  # the service's model container, inside the object


def is_runtime(obj: Mapping[str, Any]) -> bool:
    return group_of(str(obj.get("apiVersion") or "")) == KSERVE_GROUP and obj.get("kind") in RUNTIME_KINDS


def is_inference_service(obj: Mapping[str, Any]) -> bool:
    return group_of(str(obj.get("apiVersion") or "")) == KSERVE_GROUP and obj.get("kind") == "InferenceService"


def _runtime_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = "" if obj.get("kind") == "ClusterServingRuntime" else str(meta.get("namespace") or "")
    return str(obj.get("kind")), namespace, str(meta.get("name") or "")


def runtimes_in(objects: Iterable[Mapping[str, Any]]) -> list[Runtime]:
    found = []
    for obj in objects:
        if not isinstance(obj, Mapping) or not is_runtime(obj):
            continue
        found.append(Runtime(*_runtime_key(obj), obj))
    return found


def _predictor(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    predictor = spec.get("predictor") if isinstance(spec, Mapping) else None
    return predictor if isinstance(predictor, Mapping) else None


def resolve(obj: Mapping[str, Any], runtimes: Sequence[Runtime]) -> Resolution:
    """Which runtime serves an InferenceService's predictor, as KServe picks it:
    the named `runtime` (a ServingRuntime in the service's namespace, else a
    ClusterServingRuntime), or the highest-priority runtime that auto-selects
    the model format (namespaced ones first)."""
    predictor = _predictor(obj)
    if not is_inference_service(obj) or predictor is None:
        return Resolution(False)
    key = "model" if isinstance(predictor.get("model"), Mapping) else None
    if key is None:
        key = next((k for k in FRAMEWORK_KEYS if isinstance(predictor.get(k), Mapping)), None)
    if key is None:
        return Resolution(False)  # custom containers: no runtime
    model = predictor[key]
    pointer = f"/spec/predictor/{key}"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = str(meta.get("namespace") or "")
    named = model.get("runtime")

    def local(r: Runtime) -> bool:
        return r.kind == "ServingRuntime" and (not r.namespace or not namespace or r.namespace == namespace)

    if isinstance(named, str) and named:
        candidates = [r for r in runtimes if r.name == named and local(r)]
        candidates += [r for r in runtimes if r.name == named and r.kind == "ClusterServingRuntime"]
        if candidates:
            return Resolution(True, candidates[0], None, pointer)
        return Resolution(
            True,
            None,
            f"its serving runtime {named} (ServingRuntime or ClusterServingRuntime) is not among the "
            "inputs, so the CPU, memory and /dev/shm it gives the predictor are unknown: pass its "
            "manifest too",
            pointer,
        )
    fmt = model.get("modelFormat")
    fmt_name = (fmt.get("name") if isinstance(fmt, Mapping) else None) if key == "model" else key
    if not isinstance(fmt_name, str) or not fmt_name:
        return Resolution(True, None, "it names neither a runtime nor a model format", pointer)
    fmt_name = fmt_name.lower()
    best: tuple[int, int, Runtime] | None = None
    for r in runtimes:
        if r.disabled or not (local(r) or r.kind == "ClusterServingRuntime"):
            continue
        for name, auto, priority in r.formats():
            if name != fmt_name or not auto:
                continue
            rank = (1 if r.kind == "ServingRuntime" else 0, priority)
            if best is None or rank > best[:2]:
                best = (*rank, r)
    if best is not None:
        return Resolution(True, best[2], None, pointer)
    return Resolution(
        True,
        None,
        f"no ServingRuntime or ClusterServingRuntime among the inputs serves model format "
        f"{fmt_name}, so the CPU, memory and /dev/shm its runtime gives the predictor are "
        "unknown: pass the runtime's manifest too",
        pointer,
    )


def merge_container(runtime: Mapping[str, Any], service: Mapping[str, Any]) -> dict[str, Any]:
    """The container KServe runs: ``service`` strategic-merged over ``runtime``
    (args concatenated, the runtime's name kept when the service has none)."""
    merged = _merge(copy.deepcopy(dict(runtime)), service, _LIST_KEYS)
    args = [*(runtime.get("args") or []), *(service.get("args") or [])]
    if args:
        merged["args"] = args
    if not service.get("name") and runtime.get("name"):
        merged["name"] = runtime["name"]
    return merged


def _merge(base: dict[str, Any], over: Mapping[str, Any], list_keys: Mapping[str, str | None]) -> dict[str, Any]:
    for key, value in over.items():
        current = base.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            base[key] = _merge(dict(current), value, {})
        elif isinstance(value, list) and isinstance(current, list) and list_keys.get(key):
            field = list_keys[key]
            items = {i.get(field): i for i in current if isinstance(i, Mapping)}
            out = [
                i
                for i in current
                if not (
                    isinstance(i, Mapping) and i.get(field) in {v.get(field) for v in value if isinstance(v, Mapping)}
                )
            ]
            for item in value:
                if isinstance(item, Mapping) and item.get(field) in items:
                    out.append(_merge(dict(items[item.get(field)]), item, {}))
                else:
                    out.append(copy.deepcopy(item))
            base[key] = out
        else:
            base[key] = copy.deepcopy(value)
    return base


def effective(obj: Mapping[str, Any], runtimes: Sequence[Runtime]) -> tuple[dict[str, Any], Resolution]:
    """``obj`` as KServe runs it: for an InferenceService whose runtime is
    known, the predictor's model container merged over the runtime's and the
    runtime's pod fields under the predictor's. Any other object, or one whose
    runtime is unknown, comes back unchanged (the resolution says which)."""
    resolution = resolve(obj, runtimes)
    out = copy.deepcopy(dict(obj))
    if not resolution.backed or resolution.runtime is None or resolution.pointer is None:
        return out, resolution
    runtime = resolution.runtime
    container = runtime.container()
    predictor = out["spec"]["predictor"]
    key = resolution.pointer.rsplit("/", 1)[1]
    if container is not None:
        predictor[key] = merge_container(container, predictor[key])
    spec = runtime.obj.get("spec") if isinstance(runtime.obj.get("spec"), Mapping) else {}
    for field, value in spec.items():
        if (
            field
            in (
                "containers",
                "supportedModelFormats",
                "protocolVersions",
                "disabled",
                "multiModel",
                "builtInAdapter",
                "storageHelper",
                "grpcEndpoint",
                "grpcDataEndpoint",
                "httpDataEndpoint",
                "replicas",
                "annotations",
                "labels",
                "workerSpec",
            )
            or field in _PREDICTOR_ONLY
        ):
            continue
        current = predictor.get(field)
        if isinstance(value, list) and isinstance(current, list) and _POD_LIST_KEYS.get(field):
            predictor.update(_merge({field: copy.deepcopy(value)}, {field: current}, _POD_LIST_KEYS))
        elif isinstance(value, Mapping) and isinstance(current, Mapping):
            predictor[field] = _merge(copy.deepcopy(dict(value)), current, {})
        elif current is None:
            predictor[field] = copy.deepcopy(value)
    return out, resolution


def effective_pairs(
    documents: Sequence[Document], extra_runtimes: Iterable[Mapping[str, Any]] = ()
) -> list[tuple[Document, Document]]:
    """(as written, as KServe runs it) for every document: InferenceServices
    whose runtime is among ``documents`` (or ``extra_runtimes``, a snapshot's
    objects) get their effective spec, at the same file and line; every other
    document is paired with itself. For the check pipeline: judge the
    effective document, and keep the one as written as the finding's subject
    document, which is what a patch must target."""
    runtimes = runtimes_in([*(d.obj for d in documents), *extra_runtimes])
    out = []
    for doc in documents:
        judged = doc
        if runtimes and is_inference_service(doc.obj):
            obj, resolution = effective(doc.obj, runtimes)
            if resolution.runtime is not None:
                judged = Document(obj, doc.file, doc.line, doc.lines, doc.base)
        out.append((doc, judged))
    return out


def effective_documents(documents: Sequence[Document]) -> list[Document]:
    """Every document, InferenceServices replaced by their effective spec
    (same file and line, so findings still point at the service)."""
    return [judged for _, judged in effective_pairs(documents)]


def effective_workloads(
    workloads: Sequence[Workload],
    runtime_objects: Iterable[Mapping[str, Any]],
    locators: Mapping[tuple[str, str], KindLocator],
) -> list[Workload]:
    """``workloads`` with each InferenceService whose runtime is among
    ``runtime_objects`` rebuilt from its effective spec, its ``document``
    left as written (so findings point at, and fixes patch, the service as
    written). For the check pipeline, after the contexts of all shards are
    merged: the runtime may sit in another file than the service."""
    runtimes = runtimes_in(runtime_objects)
    if not runtimes:
        return list(workloads)
    out = []
    used: set[tuple[str, str, str]] = set()
    for w in workloads:
        doc = w.document
        if is_inference_service(doc.obj):
            obj, resolution = effective(doc.obj, runtimes)
            if resolution.runtime is not None:
                used.add(_runtime_key(resolution.runtime.obj))
                rebuilt, _ = build_workloads([Document(obj, doc.file, doc.line, doc.lines, doc.base)], locators)
                if len(rebuilt) == 1:
                    w = msgspec.structs.replace(rebuilt[0], document=doc, templates=_merged(rebuilt[0].templates))
        out.append(w)
    # A runtime a service of the input runs on is judged in that service's
    # pods: judged alone as well, each of its findings would be said twice.
    return [w for w in out if not (is_runtime(w.document.obj) and _runtime_key(w.document.obj) in used)]


def _merged(templates: Sequence[PodTemplate]) -> tuple[PodTemplate, ...]:
    """Templates built from an effective spec: what the runtime gives is now in
    them, so nothing is left unknown for being merged over it."""
    return tuple(
        msgspec.structs.replace(t, containers=tuple(msgspec.structs.replace(c, merged_over=None) for c in t.containers))
        for t in templates
    )
