"""Batch lifecycle: a deadline and clean-up for GPU batch work."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import group_of
from gpuaudit.remediate.planners.common import Context, Declined, Proposal, identity

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


def add_batch_deadline(ctx: Context) -> Proposal | Declined:
    doc = ctx.document
    entry = lifecycle_table().get((group_of(doc.api_version), doc.kind))
    if entry is None:
        return Declined(f"no known lifecycle fields for {doc.api_version} {doc.kind}")
    gitops = gitops_controller(doc.obj)
    # Under GitOps a run deleted after its TTL is re-created from Git and runs
    # again: only the deadline is set there.
    slots: tuple[str, ...] = ("deadline",) if gitops else ("deadline", "cleanup")
    length = run_length(doc.obj)
    if length is not None:
        # Its own arguments say how long it runs; how long that takes is not
        # known here: a fixed deadline could stop it before it finishes.
        slots = tuple(s for s in slots if s != "deadline")
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
        if length is not None:
            return Declined(
                f"its arguments set {length}: how long that takes is not known here, and a fixed deadline "
                f"(active_deadline_seconds {ctx.params.get('active_deadline_seconds')}) could stop it before it "
                "finishes; set the deadline from the duration of an earlier run of it, with a margin"
                + (" (no clean-up field to set instead)" if not gitops else "")
            )
        if gitops:
            return Declined(
                f"{gitops} manages it: a TTL that deletes the finished run makes {gitops} re-create "
                "it and it runs again, and this kind has no deadline field to set instead"
            )
        return Declined("no deadline or clean-up field to set (params set to null?)")
    params = {**identity(ctx), "fields": fields, "controller": gitops}
    named = ", ".join(f"{f['field']}={json.dumps(f['value'])}" for f in fields)
    which = " and ".join(
        n for slot, n in (("deadline", "deadline"), ("cleanup", "clean-up")) if slot in {f["slot"] for f in fields}
    )
    basis = (
        f"Sets {named}: the first {which} field(s) {doc.kind} supports (gpuaudit/data/lifecycle.yaml), "
        "with params active_deadline_seconds and ttl_seconds_after_finished."
    )
    if "cleanup" not in {f["slot"] for f in fields} and not entry.get("cleanup"):
        basis += f" {doc.kind} has no clean-up field to set."
    if length is not None:
        basis += (
            f" No deadline: its arguments set {length}, and how long that takes is not known here (a fixed "
            "deadline could stop it before it finishes); set one from an earlier run's duration."
        )
    if gitops:
        basis += (
            f" {gitops} manages it (its labels or annotations): no TTL, since a finished run deleted "
            f"from the cluster is re-created by {gitops} and runs again."
        )
    params.update(_wording({f["slot"] for f in fields}))
    params["summary_text"] = f"Give {doc.kind} {doc.name} {params.pop('what')}"
    return Proposal("gitops" if gitops else None, params, basis, "static", "#lifecycle")


def _wording(slots: set[str]) -> dict[str, str]:
    """What the patch promises, from the fields it really sets."""
    deadline, cleanup = "deadline" in slots, "cleanup" in slots
    what = (
        "a deadline and clean-up after it finishes"
        if deadline and cleanup
        else ("a deadline" if deadline else "clean-up after it finishes")
    )
    effect = []
    if cleanup:
        effect.append("a run that finishes is cleaned up (its leftover pods, or the object after its time-to-live)")
    if deadline:
        effect.append("a run that hangs is stopped at its deadline")
    risk = []
    if deadline:
        risk.append(
            "A run longer than the deadline is stopped before it completes: check the longest legitimate run first."
        )
    if cleanup:
        risk.append(
            "Deleting a finished run also deletes its pods' logs from the cluster; ship logs elsewhere if they are "
            "needed later. Under a GitOps controller (Argo CD, Flux) a run the TTL deletes is re-created and runs "
            "again: there, drop the TTL."
        )
    text = " and ".join(effect)
    return {
        "what": what,
        "effect_text": text[0].upper() + text[1:] + ", so it does not keep GPU pods (or their claims and quota) "
        "after the work is done.",
        "risk_text": " ".join(risk),
    }


# Arguments by which a training run states its own length.
RUN_LENGTH_FLAGS = re.compile(
    r"^-{1,2}(?P<name>max[_-]steps|num[_-]train[_-]epochs|num[_-]epochs|epochs|max[_-]epochs|train[_-]iters|"
    r"total[_-]steps|num[_-]steps|max[_-]iters|trainer\.max_(?:steps|epochs))(?:=(?P<value>\S+))?$"
    r"|^(?P<hydra>trainer\.max_(?:steps|epochs))=(?P<hvalue>\S+)$"
)


def run_length(obj: Mapping[str, Any]) -> str | None:
    """The run length a batch object's containers state in their arguments
    (``--max_steps 500000``, ``--num_train_epochs=3``, ``trainer.max_steps=...``), as written."""
    found: list[str] = []

    def words(node: Any) -> None:
        if isinstance(node, Mapping):
            for key in ("command", "args", "entrypoint"):
                value = node.get(key)
                if isinstance(value, (list, str)):
                    tokens = [
                        t
                        for w in ([value] if isinstance(value, str) else value)
                        if isinstance(w, str)
                        for t in w.split()
                    ]
                    for i, token in enumerate(tokens):
                        m = RUN_LENGTH_FLAGS.match(token)
                        if not m:
                            continue
                        if m.group("hydra"):
                            found.append(f"{m.group('hydra')}={m.group('hvalue')}")
                        elif m.group("value"):
                            found.append(f"--{m.group('name')}={m.group('value')}")
                        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                            found.append(f"--{m.group('name')} {tokens[i + 1]}")
            for value in node.values():
                words(value)
        elif isinstance(node, list):
            for value in node:
                words(value)

    words(obj)
    return found[0] if found else None
