"""Live state for `gpuaudit fix --snapshot FILE`: evidence per workload to size
manifest fixes, and the cluster's own objects as an overlay base (cleaned of
status and server-managed fields). Pure: works on a snapshot already read."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaudit.model import Document, Finding
from gpuaudit.remediate.evidence import Evidence, OwnerKey, from_cluster
from gpuaudit.remediate.overlay import dump
from gpuaudit.remediate.plan import Source, object_id

# Fields the API server writes: not part of what anyone applies.
SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def cleaned(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as someone would apply it: no status, no server-written metadata."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_FIELDS:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
            if not annotations:
                del meta["annotations"]
    return out


def evidence(snapshot: Mapping[str, Any]) -> dict[OwnerKey, Evidence]:
    """Per top owner: peak GPU memory of its pods and the GPU models they ran on."""
    from gpuaudit.cluster_state import build_cluster_state
    from gpuaudit.facts import cluster as cluster_facts

    state = build_cluster_state(snapshot)
    models = {n.name: n.model for n in state.nodes}
    return from_cluster(cluster_facts.subjects(state), models)


# Snapshot lists whose objects an overlay may patch, and what they are. Pods,
# ReplicaSets and Jobs are owned by something else or have immutable pod
# templates; the workloads that own them are not in a snapshot.
PATCHABLE = {"configmaps": ("v1", "ConfigMap"), "clusterpolicies": ("nvidia.com/v1", "ClusterPolicy")}


def _patchable(snapshot: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    found = {}
    for key, (api_version, kind) in PATCHABLE.items():
        for obj in (snapshot.get("objects") or {}).get(key) or []:
            meta = obj.get("metadata") or {}
            found[(kind, meta.get("namespace") or "", meta.get("name") or "")] = {
                "apiVersion": api_version,
                "kind": kind,
                **obj,
            }
    return found


def live_items(findings: Sequence[Finding], snapshot: Mapping[str, Any], label: str) -> list[tuple[Finding, Source]]:
    """Findings of a cluster audit, each with the source a patch would target:
    the cleaned object for those the snapshot holds (GPU configs), and for the
    rest a source that says why it cannot be the base."""
    objects = _patchable(snapshot)
    items = []
    for finding in findings:
        subject = finding.subject
        r = finding.resource
        found = objects.get((r.kind, r.namespace or "", r.name))
        if subject is None or found is None:
            where = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}"
            problem = (
                f"a snapshot holds pods and GPU configs, not a {r.kind} an overlay could patch: "
                f"run gpuaudit fix on the manifests of {where} with --snapshot FILE, and this "
                "evidence sizes the patch"
            )
            items.append((finding, Source(label, Path(label), "generated", (), problem)))
            continue
        doc = Document(found, label, 1)
        obj = cleaned(doc.obj)
        clean = Document(obj, f"{label} {doc.kind}/{doc.name}", 1)
        finding = dataclasses.replace(finding, subject=dataclasses.replace(subject, document=clean))
        name = f"cluster-{doc.kind}-{doc.namespace}-{doc.name}".lower()
        source = Source(
            f"{label}: {doc.kind} {doc.namespace + '/' if doc.namespace else ''}{doc.name}",
            Path(name),
            "generated",
            (object_id(obj),),
            content=f"# {doc.kind} {doc.name} as read from {label}, without status.\n" + dump(obj),
        )
        items.append((finding, source))
    return items
