"""Batch lifecycle: a deadline and clean-up for GPU batch work."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import group_of
from gpuaudit.remediate.planners.common import Context, Declined, Proposal, identity, planner

# --- batch lifecycle ---------------------------------------------------------------------


@cache
def lifecycle_table() -> dict[tuple[str, str], Mapping[str, Any]]:
    """data/lifecycle.yaml (shared with the facts of GPA-AL-008): where each
    batch kind keeps its deadline and clean-up fields."""
    return {(g, e["kind"]): e for e in data_yaml("lifecycle.yaml") for g in e["groups"]}


def _lifecycle_value(leaf: str, spec: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    """The value to write at a lifecycle field, or None to try the next one."""
    if spec.get("values"):
        return spec["values"][0]
    if leaf == "activeDeadlineSeconds":
        return params.get("active_deadline_seconds")
    if leaf == "ttlSecondsAfterFinished":
        return params.get("ttl_seconds_after_finished")
    if leaf == "ttlStrategy" and params.get("ttl_seconds_after_finished") is not None:
        return {"secondsAfterCompletion": params["ttl_seconds_after_finished"]}
    return None


def _parents(obj: Mapping[str, Any], pointer: str) -> list[str]:
    """Concrete pointers for a parent pointer that may hold `*` segments."""
    from gpuaudit.kube.pointers import expand

    if "*" not in pointer:
        return [pointer]
    return [p for p, _, value in expand(obj, pointer) if isinstance(value, Mapping)]


# Marks of a GitOps controller (Argo CD, Flux) on an object: it re-creates
# what it manages when it disappears from the cluster.
_GITOPS_PREFIXES = (
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "fluxcd.io/",
)


def gitops_controller(obj: Mapping[str, Any]) -> str | None:
    """Which GitOps controller manages ``obj``, from its labels and annotations."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    keys: dict[str, Any] = {}
    for section in ("labels", "annotations"):
        values = meta.get(section)
        if isinstance(values, Mapping):
            keys.update({str(k): v for k, v in values.items()})
    for key in keys:
        if key.startswith(("argocd.argoproj.io/",)):
            return "ArgoCD"
        if key.startswith(_GITOPS_PREFIXES):
            return "Flux"
    managed = str(keys.get("app.kubernetes.io/managed-by") or "").lower()
    if "argocd" in managed or "argo-cd" in managed:
        return "ArgoCD"
    if "flux" in managed:
        return "Flux"
    return None


@planner("add-batch-deadline")
def add_batch_deadline(ctx: Context) -> Proposal | Declined:
    doc = ctx.document
    entry = lifecycle_table().get((group_of(doc.api_version), doc.kind))
    if entry is None:
        return Declined(f"no known lifecycle fields for {doc.api_version} {doc.kind}")
    gitops = gitops_controller(doc.obj)
    # Under GitOps a run deleted after its TTL is re-created from Git and runs
    # again: only the deadline is set there.
    slots = ("deadline",) if gitops else ("deadline", "cleanup")
    fields = []
    for slot in slots:
        for spec in entry.get(slot) or []:
            parent, _, leaf = str(spec["at"]).rpartition("/")
            name = pointers.tokens("/" + leaf)[0]
            value = _lifecycle_value(name, spec, ctx.params)
            if value is None:
                continue
            for concrete in _parents(doc.obj, parent):
                if pointers.get(doc.obj, pointers.join(concrete, name)) is None:
                    fields.append({"parent": concrete, "field": name, "value": value, "slot": slot})
            break  # the first field this kind supports and the params allow
    if not fields:
        if gitops:
            return Declined(
                f"{gitops} manages it: a TTL that deletes the finished run makes {gitops} re-create "
                "it and it runs again, and this kind has no deadline field to set instead"
            )
        return Declined("no deadline or clean-up field to set (params set to null?)")
    params = {**identity(ctx), "fields": fields, "controller": gitops}
    named = ", ".join(f"{f['field']}={json.dumps(f['value'])}" for f in fields)
    basis = (
        f"Sets {named}: the first deadline and clean-up fields {doc.kind} supports "
        "(gpuaudit/data/lifecycle.yaml), with params active_deadline_seconds and "
        "ttl_seconds_after_finished."
    )
    if gitops:
        basis += (
            f" {gitops} manages it (its labels or annotations): no TTL, since a finished run deleted "
            f"from the cluster is re-created by {gitops} and runs again."
        )
    return Proposal("gitops" if gitops else None, params, basis, "static", "#lifecycle")
