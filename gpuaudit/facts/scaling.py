"""Whether a long-running GPU workload can scale down to zero replicas.

Replicas that never reach zero keep their GPUs (and any model resident in
them) allocated through every quiet hour. Scale-to-zero comes from the
workload itself (KServe ``minReplicas: 0``, Ray's autoscaler with GPU worker
groups at ``minReplicas: 0``) or from an autoscaler in the input aimed at it
(KEDA ``minReplicaCount: 0``; an HPA only with ``minReplicas: 0``, which
needs the HPAScaleToZero feature gate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuaudit.facts.context import Autoscaler, Context
from gpuaudit.kube import pointers
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.kube.shapes import as_list
from gpuaudit.model import Workload

_REPLICAS = {
    "Deployment": "/spec/replicas",
    "StatefulSet": "/spec/replicas",
    "ReplicaSet": "/spec/replicas",
    "LeaderWorkerSet": "/spec/replicas",
    "LLMInferenceService": "/spec/replicas",
    "InferenceService": "/spec/predictor/minReplicas",
}
_GPU_KEY = re.compile(r"(^|/)gpu|/mig-")
_RAY = {"RayService": "/spec/rayClusterConfig", "RayCluster": "/spec"}


def scaling_facts(w: Workload, context: Context) -> dict[str, Any] | None:
    """None for kinds whose replica count this does not know how to read."""
    obj = w.document.obj
    if w.kind in _RAY:
        return _ray(obj, _RAY[w.kind])
    pointer = _REPLICAS.get(w.kind)
    if pointer is None:
        return None
    raw = pointers.get(obj, pointer)
    replicas = _int(raw, 1)
    scaler = _autoscaler(context, w)
    minimum = scaler.min_replicas if scaler is not None else replicas
    return {
        "min_replicas": minimum,
        "scale_to_zero": minimum == 0,
        "autoscaler": f"{scaler.kind} {scaler.name}" if scaler is not None else None,
        "pointer": pointer if raw is not None else _parent(obj, pointer),
    }


def _ray(obj: Mapping[str, Any], base: str) -> dict[str, Any]:
    cluster = pointers.get(obj, base)
    cluster = cluster if isinstance(cluster, Mapping) else {}
    autoscaling = cluster.get("enableInTreeAutoscaling") is True
    head_gpus = _has_gpus(pointers.get(cluster, "/headGroupSpec/template/spec"))
    minimum = 0
    for group in as_list(cluster.get("workerGroupSpecs")):
        if not isinstance(group, Mapping) or not _has_gpus(pointers.get(group, "/template/spec")):
            continue
        key = "minReplicas" if autoscaling else "replicas"
        minimum += _int(group.get(key, group.get("replicas")), 1)
    zero = not head_gpus and minimum == 0
    return {
        "min_replicas": minimum,
        "scale_to_zero": zero,
        "autoscaler": "Ray autoscaler" if autoscaling else None,
        "pointer": f"{base}/workerGroupSpecs" if cluster.get("workerGroupSpecs") else base,
    }


def _autoscaler(context: Context, w: Workload) -> Autoscaler | None:
    exact = context.autoscalers.get((w.kind, w.namespace, w.name))
    if exact is not None:
        return exact
    # A manifest often leaves the namespace to `kubectl -n`: match by name then.
    for (kind, namespace, name), scaler in context.autoscalers.items():
        if kind == w.kind and name == w.name and (not namespace or not w.namespace):
            return scaler
    return None


def _has_gpus(spec: Any) -> bool:
    if not isinstance(spec, Mapping):
        return False
    for c in as_list(spec.get("containers")):
        resources = c.get("resources") if isinstance(c, Mapping) else None
        for section in ("limits", "requests"):
            values = resources.get(section) if isinstance(resources, Mapping) else None
            if isinstance(values, Mapping) and any(_GPU_KEY.search(str(k)) for k in values):
                return True
    return False


def _parent(obj: Mapping[str, Any], pointer: str) -> str:
    while pointer and pointers.get(obj, pointer) is None:
        pointer = pointer.rpartition("/")[0]
    return pointer


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return default
