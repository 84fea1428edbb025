"""Cluster findings on pods, moved onto the object that owns the pods, so
that `gpuaudit fix --snapshot FILE` patches what people apply (a Deployment,
a CronJob, a PyTorchJob) and not a pod its controller would recreate.

A pod finding's facts point into the pod. On the owner, the same rule is
judged again on the owner's pod template: its manifest facts (pointers into
the owner) laid over the pod's live facts (telemetry, eligible nodes, phase).
A finding the owner as read no longer shows -- its pods run an older
template -- is not carried over. Pure: works on a snapshot already read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import msgspec.structs

from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.facts import workload as workload_facts
from gpuaudit.facts.context import Context
from gpuaudit.facts.types import PodFacts
from gpuaudit.kube.owners import INTERMEDIATE_KINDS, OwnerKey, OwnerWalk
from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.kube.shapes import as_map
from gpuaudit.model import Document, Finding, PodTemplate, Resource, Workload
from gpuaudit.model.workload_builder import build_workloads

__all__ = ["OwnerIndex", "on_owner"]


class _Top(msgspec.Struct, frozen=True):
    key: OwnerKey | None  # the top of the pod's owner chain; None for a bare pod
    reason: str | None  # why it cannot be patched, when it cannot


class OwnerIndex:
    """The snapshot's pods and owner chains, to find each pod's top owner."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        def listed(key: str) -> list[Mapping[str, Any]]:
            items = objects.get(key)
            return [o for o in items if isinstance(o, Mapping)] if isinstance(items, list) else []

        self.pods = {
            (str(p["metadata"].get("namespace") or ""), str(p["metadata"].get("name") or "")): p
            for p in listed("pods")
            if isinstance(p.get("metadata"), Mapping)
        }
        self.walk = OwnerWalk([])
        self.walk.add(listed("replicasets"), "apps", "ReplicaSet")
        self.walk.add(listed("jobs"), "batch", "Job")
        for obj in listed("workloads"):
            group = group_of(str(obj.get("apiVersion") or ""))
            self.walk.add([obj], group, str(obj.get("kind") or ""))
        self.has_workloads = "workloads" in objects

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pods.get((namespace, name))

    def top(self, pod: Mapping[str, Any], what: str) -> _Top:
        """The top owner of ``pod``, whose findings name ``what`` (e.g. "Deployment ns/name")."""
        self.walk.pods = [pod]
        chain, unresolved = self.walk.walk()
        if unresolved:
            api_version, kind = sorted(unresolved)[0]
            if not self.has_workloads:
                return _Top(
                    None,
                    f"the snapshot holds no {kind} (recorded before gpuaudit read the workloads "
                    "that own pods): record it again with `gpuaudit snapshot`, or run gpuaudit fix "
                    f"on the manifests of {what} with --snapshot FILE, and this evidence sizes the patch",
                )
            return _Top(
                None,
                f"the snapshot does not hold the {kind} ({api_version}) that owns "
                "its pods (not readable by the collector: see deploy/README.md, "
                "\"Operators' custom resources\"); fix that object's manifests instead",
            )
        if not chain:
            return _Top(None, "a bare pod: its spec cannot change in place; fix the manifest that creates it")
        top = chain[-1]
        if (top[0], top[1]) in INTERMEDIATE_KINDS:
            return _Top(
                None,
                f"a {top[1]} nothing owns: its pod template cannot change in place; fix the manifest that creates it",
            )
        return _Top(top, None)


def on_owner(
    finding: Finding,
    rule: Rule | None,
    owner: Document,
    pod: Mapping[str, Any],
    locators: Mapping[tuple[str, str], KindLocator],
    context: Context,
) -> Finding | str:
    """``finding`` (on a pod) as the same rule judges ``owner``'s template
    for that pod, or why it cannot be."""
    if rule is None:
        return f"rule {finding.rule} is not in this run's policy"
    workloads, _ = build_workloads([owner], locators)
    workload = workloads[0] if workloads else None
    if workload is None or not workload.templates:
        return f"gpuaudit does not know where a {owner.kind} keeps its pod templates (podspecs)"
    template = _template_for(pod, workload)
    if template is None:
        return f"cannot tell which pod template of {owner.kind} {owner.name} the pod comes from"
    owned = next(
        (
            s
            for s in workload_facts.subjects(workload, context)
            if s.target == "pod" and s.typed.pointer == template.pointer
        ),
        None,
    )
    if owned is None:
        return f"no facts for the pod template at {template.pointer} of {owner.kind} {owner.name}"
    facts = _laid_over(finding.subject.facts, owned.facts)
    subject = Subject(
        "pod",
        facts,
        Resource(owner.api_version, owner.kind, owner.namespace, owner.name),
        owner,
        owned.annotations,
        scope="cluster",
    )
    from gpuaudit.engine.evaluate import make_finding

    if not (rule.applies_to(facts) and rule.violated_by(facts)):
        return (
            f"{owner.kind} {owner.name} as read no longer shows it (its pods run an older template): nothing to patch"
        )
    severity = rule.severity_for(facts)
    if severity is None:
        return f"{owner.kind} {owner.name} is a {subject.facts_as(PodFacts).purpose}: {rule.id} does not apply to it"
    return make_finding(rule, subject, severity=severity)


def _template_for(pod: Mapping[str, Any], workload: Workload) -> PodTemplate | None:
    """The owner template the pod was made from: the one whose containers the
    pod runs (injected sidecars aside), then the one whose role a pod label
    names (replica type, group name, task name)."""
    spec = as_map(pod.get("spec"))
    running = {str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, Mapping)}
    candidates = [t for t in workload.templates if t.containers and {c.name for c in t.containers} <= running]
    if len(candidates) > 1:
        meta = as_map(pod.get("metadata"))
        labels = {str(v).lower() for v in (meta.get("labels") or {}).values()}
        candidates = [t for t in candidates if t.role.lower() in labels] or candidates
        widest = max(len(t.containers) for t in candidates)
        candidates = [t for t in candidates if len(t.containers) == widest]
    return candidates[0] if len(candidates) == 1 else None


def _laid_over(live: Mapping[str, Any], owned: Mapping[str, Any]) -> dict[str, Any]:
    """``owned`` (the owner's facts) over ``live`` (the pod's), key by key in
    nested objects: what both say, the owner says; what only the live state
    knows (telemetry, eligible nodes, phase) stays."""
    out = dict(live)
    for key, value in owned.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _laid_over(out[key], value)
        else:
            out[key] = value
    return out


def unique(items: Sequence[tuple[Finding, Any]], key: Any) -> list[tuple[Finding, Any]]:
    """One item per key (the pods of one owner make one finding on it)."""
    seen: set[Any] = set()
    out = []
    for item in items:
        k = key(item[0])
        if k in seen:
            continue
        seen.add(k)
        out.append(item)
    return out
