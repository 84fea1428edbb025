"""Batch lifecycle: a deadline and clean-up for GPU batch work."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import group_of
from gpuaudit.remediate.planners.common import Context, Declined, Proposal, identity, planner

# --- batch lifecycle ---------------------------------------------------------------------


@cache
def lifecycle_table() -> dict[tuple[str, str], Mapping[str, Any]]:
    """data/lifecycle.yaml (shared with the facts of GPA-AL-008): where each
    batch kind keeps its deadline and clean-up fields."""
    text = resources.files("gpuaudit").joinpath("data/lifecycle.yaml").read_text()
    return {(g, e["kind"]): e for e in yaml.safe_load(text) for g in e["groups"]}


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


@planner("add-batch-deadline")
def add_batch_deadline(ctx: Context) -> Proposal | Declined:
    doc = ctx.document
    entry = lifecycle_table().get((group_of(doc.api_version), doc.kind))
    if entry is None:
        return Declined(f"no known lifecycle fields for {doc.api_version} {doc.kind}")
    fields = []
    for slot in ("deadline", "cleanup"):
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
        return Declined("no deadline or clean-up field to set (params set to null?)")
    params = {**identity(ctx), "fields": fields}
    named = ", ".join(f"{f['field']}={json.dumps(f['value'])}" for f in fields)
    basis = (
        f"Sets {named}: the first deadline and clean-up fields {doc.kind} supports "
        "(gpuaudit/data/lifecycle.yaml), with params active_deadline_seconds and "
        "ttl_seconds_after_finished."
    )
    return Proposal(None, params, basis, "static", "#lifecycle")
