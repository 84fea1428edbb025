"""Raw fields for site rules: the pod spec and the labels and annotations as
written, so a rule can check a field no computed fact covers
(``spec.priorityClassName``, a ``team`` label) without a new facts module.

Nothing is copied: ``spec`` is the mapping the model holds (plain data read
from the manifest or the API server), and rules only read it. Labels and
annotations are text maps, as Kubernetes stores them: a rule compares
``"1"``, never a YAML integer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaudit.model import PodTemplate, Workload


def pod_raw_facts(w: Workload, t: PodTemplate) -> dict[str, Any]:
    """The pod template's spec and metadata, and its object's metadata."""
    return {
        "spec": t.spec,
        "metadata": {"labels": t.labels, "annotations": t.annotations, "object": object_metadata(w)},
    }


def workload_raw_facts(w: Workload) -> dict[str, Any]:
    return {"metadata": object_metadata(w)}


def object_metadata(w: Workload) -> dict[str, Any]:
    """The labels and annotations on the object itself (a Deployment's, not its template's)."""
    meta = w.document.obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {"labels": _text_map(meta.get("labels")), "annotations": _text_map(meta.get("annotations"))}


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}
