"""What the report reads of a snapshot: its GPU pods.

Every count in the capacity review is about pods that ask for GPUs, and the
cluster facts judge only those (node allocation, eligibility and pending
demand come from GPU requests). On a large cluster most pods ask for none:
at 50,000 pods, a third of them GPU pods, building the cluster state and the
fact documents for the others is half of the report's time. So they are
left out before the audit runs. tests/test_report.py checks that the
findings stay those of ``gpuaudit audit`` on the whole snapshot.

The test is deliberately broad, so that a new kind of GPU request is kept
rather than silently dropped: any resource name or annotation key that
mentions a GPU or an accelerator vendor's domain, and any DRA claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MARKERS = ("gpu", "nvidia.com/", "amd.com/", "intel.com/", "habana.ai/", "neuron")


def _mentions_gpu(names: Any) -> bool:
    return isinstance(names, Mapping) and any(marker in str(name).lower() for name in names for marker in _MARKERS)


def may_use_gpus(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (container or {}).get("resources") or {}
        if _mentions_gpu(resources.get("limits")) or _mentions_gpu(resources.get("requests")):
            return True
    return _mentions_gpu((pod.get("metadata") or {}).get("annotations"))


def gpu_pods_only(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``snapshot`` whose pods are the ones that may use GPUs."""
    objects = dict(snapshot.get("objects") or {})
    objects["pods"] = [p for p in objects.get("pods") or [] if may_use_gpus(p)]
    return {**snapshot, "objects": objects}
