"""Whether a batch workload bounds how long it holds GPUs (data/lifecycle.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.kube.pointers import expand, get
from gpuaudit.model import PodTemplate, Workload


@cache
def _table() -> dict[tuple[str, str], Mapping[str, Any]]:
    entries = data_yaml("lifecycle.yaml")
    return {(group, e["kind"]): e for e in entries for group in e["groups"]}


def lifecycle_facts(w: Workload) -> dict[str, Any] | None:
    """None for kinds with no deadline or clean-up field to ask for."""
    entry = _table().get((w.group, w.kind))
    if entry is None or entry.get("not_judged"):
        return None
    obj = w.document.obj
    facts = {
        "deadline": any(_set(obj, f) for f in entry["deadline"]),
        "cleanup": any(_set(obj, f) for f in entry["cleanup"]),
        "fields": [_field(f) for f in (*entry["deadline"], *entry["cleanup"])],
        "pointer": "/spec" if isinstance(obj.get("spec"), Mapping) else "",
    }
    if entry.get("at_gpu_pod"):
        gpu_pods = [t.pointer for t in w.templates if any(c.gpus for c in t.containers)]
        facts["pointer"] = gpu_pods[0] if gpu_pods else facts["pointer"]
    work = entry.get("work")
    if work is not None:
        facts["work_queue"] = _work_queue(get(obj, work["parallelism"]), get(obj, work["completions"]))
    facts["nodes_bounded"] = _nodes_bounded(w)
    return facts


def _field(field: Mapping[str, Any]) -> str:
    """A field as the finding names it, with the values that bound the run
    where only some do (`cleanPodPolicy: None` is set, and bounds nothing)."""
    values = field.get("values")
    if not values:
        return _short(field["at"])
    shown = [str(v).lower() if isinstance(v, bool) else str(v) for v in values]  # YAML's `true`, not Python's
    return f"{_short(field['at'])} ({' or '.join(shown)})"


# Nodes that live for a bounded time whatever runs on them: GKE's queued
# provisioning (Dynamic Workload Scheduler) and flex-start remove a node at
# its request's maxRunDurationSeconds (7 days at most).
_QUEUED_CLASS = (
    "autoscaling.x-k8s.io/provisioning-class-name",
    "cluster-autoscaler.kubernetes.io/provisioning-class-name",
)
_BOUNDED_CLASSES = ("queued-provisioning.gke.io",)
_BOUNDED_NODE_LABELS = {"cloud.google.com/gke-flex-start": "true", "cloud.google.com/gke-queued": "true"}


def _nodes_bounded(w: Workload) -> str | None:
    """What removes the nodes every GPU pod of the workload runs on after a
    bounded time, or None."""
    bounds = [_bounded_by(t) for t in w.templates if any(c.gpus for c in t.containers)]
    return bounds[0] if bounds and all(bounds) else None


def _bounded_by(t: PodTemplate) -> str | None:
    if any(t.annotations.get(key) in _BOUNDED_CLASSES for key in _QUEUED_CLASS):
        return "GKE queued provisioning (a ProvisioningRequest's maxRunDurationSeconds)"
    selector = t.spec.get("nodeSelector")
    if isinstance(selector, Mapping) and any(
        str(selector.get(k, "")).lower() == v for k, v in _BOUNDED_NODE_LABELS.items()
    ):
        return "GKE flex-start or queued nodes (maxRunDurationSeconds, 7 days at most)"
    return None


def _work_queue(parallelism: Any, completions: Any) -> bool:
    """Whether a Job's pods are independent work items: more completions
    than pods at once, or several pods at once with no completion count (a
    work queue). A count left unset or unread (a placeholder) says nothing."""
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        return False
    if completions is None:
        return parallelism > 1
    return isinstance(completions, int) and not isinstance(completions, bool) and completions > parallelism


def _set(obj: Mapping[str, Any], field: Mapping[str, Any]) -> bool:
    allowed = field.get("values")
    for _, _, value in expand(obj, field["at"]):
        if value is None:
            continue
        if allowed is None or value in allowed:
            return True
    return False


def _short(pointer: str) -> str:
    parts = [p for p in pointer.split("/") if p and p != "*"]
    if parts[-3:-1] == ["template", "spec"]:  # the pod's own: template.spec.activeDeadlineSeconds
        return ".".join(parts[-3:])
    if parts[-2:-1] == ["templates"]:  # an Argo template's own: templates[].activeDeadlineSeconds
        return f"templates[].{parts[-1]}"
    return ".".join(parts[-2:]) if parts[-2:-1] == ["runPolicy"] else parts[-1]
