"""Encode the difference between an object before and after its edits as a
Kustomize patch: strategic merge where kustomize knows the kind's schema
(built-in kinds), JSON 6902 where a strategic merge would replace whole lists
(custom resources: kustomize has no merge keys for them).

Both encoders work from (before, after), never from the edits, so what the
patch does is by construction what ``edits.apply_edits`` computed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import group_of

# Lists that strategic merge patches item by item, matched on a key
# (x-kubernetes-patch-merge-key in the Kubernetes API; kustomize uses the same).
KEYED_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
}
# Lists that strategic merge replaces whole: the patch carries the full new list.
ATOMIC_LISTS = frozenset(
    {
        "tolerations",
        "nodeSelectorTerms",
        "matchExpressions",
        "matchFields",
        "values",
        "preferredDuringSchedulingIgnoredDuringExecution",
        "requiredDuringSchedulingIgnoredDuringExecution",  # pod (anti-)affinity terms
        "command",
        "args",
    }
)
# API groups whose kinds kustomize knows the schema of.
BUILTIN_GROUPS = frozenset({"", "apps", "batch", "policy"})

Format = Literal["strategic-merge", "json6902"]


class NotExpressible(Exception):
    """This difference cannot be written as a strategic merge patch."""


class Patch(msgspec.Struct, frozen=True):
    format: Format
    document: Any  # a mapping (strategic merge) or a list of operations (JSON 6902)


def encode(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    annotation: tuple[str, str],
    original_annotations: bool,
) -> Patch:
    """The patch turning ``before`` into ``after`` and setting ``annotation``.

    ``original_annotations``: whether the object as read had an annotations
    map, so the JSON 6902 annotation operation does not depend on the patches
    applied before this one.
    """
    builtin = group_of(str(before.get("apiVersion", ""))) in BUILTIN_GROUPS
    try:
        body = _smp_map(before, after, lists=builtin)
    except NotExpressible:
        return Patch("json6902", json6902(before, after, annotation, original_annotations))
    meta = before.get("metadata") or {}
    header: dict[str, Any] = {"apiVersion": before.get("apiVersion"), "kind": before.get("kind")}
    metadata: dict[str, Any] = {"name": meta.get("name")}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    extra_meta = body.pop("metadata", None) or {}
    annotations = {**(extra_meta.pop("annotations", None) or {}), annotation[0]: annotation[1]}
    metadata.update(extra_meta)
    metadata["annotations"] = annotations
    return Patch("strategic-merge", {**header, "metadata": metadata, **body})


# --- strategic merge ------------------------------------------------------------


def _smp_map(before: Mapping[str, Any], after: Mapping[str, Any], lists: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in before:
        if key not in after:
            out[key] = None
    for key, new in after.items():
        if key not in before:
            out[key] = copy.deepcopy(new)
            continue
        old = before[key]
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            out[key] = _smp_map(old, new, lists)
        elif isinstance(old, list) and isinstance(new, list):
            if not lists:
                raise NotExpressible(key)
            merge_key = KEYED_LISTS.get(key)
            if merge_key and _keyed(old, merge_key) and _keyed(new, merge_key):
                out[key] = _smp_keyed(old, new, merge_key)
            elif key in ATOMIC_LISTS:
                out[key] = copy.deepcopy(new)
            else:
                raise NotExpressible(key)
        else:
            out[key] = copy.deepcopy(new)
    return out


def _smp_keyed(before: list[Any], after: list[Any], key: str) -> list[Any]:
    old = {item[key]: item for item in before}
    new_keys = {item[key] for item in after}
    items: list[Any] = [{key: item[key], "$patch": "delete"} for item in before if item[key] not in new_keys]
    for item in after:
        previous = old.get(item[key])
        if previous is None:
            items.append(copy.deepcopy(item))
        elif previous != item:
            items.append({key: item[key], **_smp_map(previous, item, lists=True)})
    return items


def _keyed(items: list[Any], key: str) -> bool:
    values = [i.get(key) for i in items if isinstance(i, dict)]
    return (
        len(values) == len(items) and all(isinstance(v, (str, int)) for v in values) and len(set(values)) == len(values)
    )


# --- JSON 6902 --------------------------------------------------------------------


def json6902(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    annotation: tuple[str, str] | None = None,
    original_annotations: bool = True,
) -> list[dict[str, Any]]:
    """Operations turning ``before`` into ``after``. List items are addressed by
    index, so each one the patch descends into is guarded by a ``test`` of its
    name: if the base changes order, the build fails instead of patching the
    wrong container."""
    tests: dict[str, Any] = {}
    ops: list[dict[str, Any]] = []
    _walk(before, after, "", ops, tests)
    if annotation is not None:
        key, value = annotation
        if original_annotations:
            ops.append({"op": "add", "path": pointers.join("/metadata/annotations", key), "value": value})
        else:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {key: value}})
    guards = [{"op": "test", "path": p, "value": v} for p, v in tests.items()]
    return [*guards, *ops]


def _walk(old: Any, new: Any, path: str, ops: list[dict[str, Any]], tests: dict[str, Any]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": pointers.join(path, key)})
        for key, value in new.items():
            child = pointers.join(path, key)
            if key not in old:
                ops.append({"op": "add", "path": child, "value": copy.deepcopy(value)})
            elif old[key] != value:
                _walk(old[key], value, child, ops, tests)
        return
    if isinstance(old, list) and isinstance(new, list):
        n = len(old)
        if len(new) >= n and new[:n] == old:
            for item in new[n:]:
                ops.append({"op": "add", "path": path + "/-", "value": copy.deepcopy(item)})
            return
        if len(new) == n:
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if a != b:
                    _guard(a, pointers.join(path, i), tests)
                    _walk(a, b, pointers.join(path, i), ops, tests)
            return
    ops.append({"op": "replace", "path": path, "value": copy.deepcopy(new)})


def _guard(item: Any, path: str, tests: dict[str, Any]) -> None:
    if not isinstance(item, dict):
        return
    for key in ("name", "mountPath"):
        if isinstance(item.get(key), str):
            tests[pointers.join(path, key)] = item[key]
            return


# --- comparing objects ---------------------------------------------------------------


def normalize(value: Any, field: str | None = None) -> Any:
    """``value`` with keyed lists turned into mappings by key, so comparisons
    ignore the order strategic merge puts new items in, and without null
    fields (the API treats them as unset, and kustomize drops them from the
    objects it patches)."""
    if isinstance(value, dict):
        return {k: normalize(v, str(k)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        key = KEYED_LISTS.get(field or "")
        if key and _keyed(value, key):
            return {f"[{key}={item[key]}]": normalize(item) for item in value}
        return [normalize(v) for v in value]
    return value


def changes(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for every leaf that differs; absent values are
    ``Ellipsis``. Paths name keyed list items by key: ``containers[name=server]``."""
    out: list[tuple[str, Any, Any]] = []
    _changes(normalize(before), normalize(after), "", out)
    return out


def _changes(old: Any, new: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            name = str(key)
            child = f"{path}{name}" if name.startswith("[") else f"{path}/{pointers.escape(name)}"
            if key not in new:
                out.append((child, old[key], ...))
            elif key not in old:
                out.append((child, ..., new[key]))
            elif old[key] != new[key]:
                _changes(old[key], new[key], child, out)
        return
    out.append((path, old, new))
