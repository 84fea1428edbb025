"""Live state for `gpuaudit fix --snapshot FILE`: evidence per workload to size
manifest fixes, and the cluster's own objects as an overlay base (cleaned of
status and server-managed fields). Pure: works on a snapshot already read."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import msgspec.structs

from gpuaudit.engine.rules import Rule
from gpuaudit.facts import cluster as cluster_facts
from gpuaudit.facts.context import Site, build_context
from gpuaudit.kube.owners import OwnerKey
from gpuaudit.kube.podspecs import KindLocator, builtin_locators, group_of
from gpuaudit.kube.shapes import object_id
from gpuaudit.model import Document, Finding
from gpuaudit.model.cluster_builder import build_cluster_state
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.remediate.evidence import Evidence, from_cluster
from gpuaudit.remediate.overlay import dump
from gpuaudit.remediate.owner_findings import OwnerIndex, on_owner, unique
from gpuaudit.remediate.plan import Source
from gpuaudit.remediate.planners.declined import enable_mig_reason
from gpuaudit.remediate.verify import finding_key
from gpuaudit.sources.manifests import ReadResult, read_text

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

    state = build_cluster_state(snapshot)
    models = {n.name: n.model for n in state.nodes}
    return from_cluster(cluster_facts.subjects(state), models)


# Snapshot lists whose objects an overlay may patch, and what they are. Pods,
# ReplicaSets and Jobs are owned by something else or have immutable pod
# templates; the workloads at the top of their owner chains are in
# "workloads" (snapshots recorded since gpuaudit reads them), kind included.
PATCHABLE = {"configmaps": ("v1", "ConfigMap"), "clusterpolicies": ("nvidia.com/v1", "ClusterPolicy")}

ObjectKey = tuple[str, str, str, str]  # group, kind, namespace, name


def _patchable(snapshot: Mapping[str, Any]) -> dict[ObjectKey, dict[str, Any]]:
    found = {}
    objects = snapshot.get("objects") or {}
    for key, (api_version, kind) in PATCHABLE.items():
        for obj in objects.get(key) or []:
            meta = obj.get("metadata") or {}
            found[(group_of(api_version), kind, meta.get("namespace") or "", meta.get("name") or "")] = {
                "apiVersion": api_version,
                "kind": kind,
                **obj,
            }
    for obj in objects.get("workloads") or []:
        meta = obj.get("metadata") or {}
        group = group_of(str(obj.get("apiVersion") or ""))
        found[(group, str(obj.get("kind") or ""), meta.get("namespace") or "", meta.get("name") or "")] = obj
    return found


class _Base(msgspec.Struct, frozen=True):
    """One cleaned object as the overlay's base file, read back with its lines."""

    document: Document
    source: Source


def _base(obj: Mapping[str, Any], label: str) -> _Base:
    clean = cleaned(obj)
    kind, meta = str(clean.get("kind")), clean.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    where = f"{namespace + '/' if namespace else ''}{name}"
    content = f"# {kind} {name} as read from {label}, without status.\n" + dump(clean)
    read = ReadResult()
    read_text(content, f"{label} {kind}/{name}", read)
    document = read.documents[0] if read.documents else Document(clean, f"{label} {kind}/{name}", 1)
    source = Source(
        f"{label}: {kind} {where}",
        Path(f"cluster-{kind}-{namespace}-{name}".lower()),
        "generated",
        (object_id(document.obj),),
        content=content,
    )
    return _Base(document, source)


def live_items(
    findings: Sequence[Finding],
    snapshot: Mapping[str, Any],
    label: str,
    rules: Sequence[Rule] = (),
    locators: Mapping[tuple[str, str], KindLocator] | None = None,
    site: Site | None = None,
) -> list[tuple[Finding, Source]]:
    """Findings of a cluster audit, each with the source a patch would target:
    the cleaned object for those the snapshot holds (GPU configs; for
    findings on pods, the workload at the top of their owner chain, the
    finding judged again on it), and for the rest a source that says why
    there is no base to patch."""
    objects = _patchable(snapshot)
    bases: dict[ObjectKey, _Base] = {key: _base(obj, label) for key, obj in objects.items()}

    locators = builtin_locators() if locators is None else locators
    index = OwnerIndex(snapshot.get("objects") or {})
    # What the rest of the cluster says (advertised `.shared` names, requests
    # per resource), as a manifest audit of every base would see it.
    documents = [b.document for b in bases.values()]
    workloads, _ = build_workloads(documents, locators)
    context = build_context(site or Site(), documents, workloads)
    by_id = {rule.id: rule for rule in rules}

    items = []
    for finding in findings:
        subject = finding.subject
        r = finding.resource
        where = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}"
        on_pod = subject is not None and subject.target == "pod" and subject.document is None
        pod = index.pod(r.namespace or "", str(subject.facts.get("pod") or "")) if on_pod else None
        if pod is not None:
            top = index.top(pod, where)
            if top.key is None or top.key not in objects:
                reason = top.reason or f"the snapshot does not hold {where}"
                items.append((finding, _unpatchable(label, reason)))
                continue
            found = bases[top.key]
            moved = on_owner(finding, by_id.get(finding.rule), found.document, pod, locators, context)
            if isinstance(moved, str):
                items.append((finding, _unpatchable(label, moved)))
            else:
                items.append((moved, found.source))
            continue
        key = (group_of(r.api_version), r.kind, r.namespace or "", r.name)
        if r.kind == "Node":
            if (finding.remediation or {}).get("id") == "enable-mig" and subject is not None:
                problem = enable_mig_reason(subject.facts)
            else:
                problem = (
                    f"{where} is a Node: the kubelet owns it and an overlay does not patch it; the "
                    "change is a node label or the GPU Operator's config (see the rule's docs)"
                )
            items.append((finding, _unpatchable(label, problem)))
            continue
        if subject is None or key not in objects or r.kind not in {k for _, k in PATCHABLE.values()}:
            problem = (
                f"a snapshot holds the workloads that own pods and GPU configs, not a {r.kind} an "
                f"overlay could patch: run gpuaudit fix on the manifests of {where} with "
                "--snapshot FILE, and this evidence sizes the patch"
            )
            items.append((finding, _unpatchable(label, problem)))
            continue
        found = bases[key]
        finding = msgspec.structs.replace(finding, subject=msgspec.structs.replace(subject, document=found.document))
        items.append((finding, found.source))
    return unique(items, finding_key)


def _unpatchable(label: str, problem: str) -> Source:
    return Source(label, Path(label), "generated", (), problem)
