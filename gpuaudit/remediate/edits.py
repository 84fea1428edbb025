"""Edits: what a remediation template asks to change in one object, and the
one place that says what an edit means.

A template renders a list of edits, each anchored at a JSON pointer into the
object (`at`):

- ``merge``: a mapping merged into the node at `at`. Nested mappings merge
  key by key; any other value (scalar, list) replaces what was there; ``null``
  removes the key. A mapping left empty by removals is removed too, so that
  dropping the last key of ``nodeSelector`` drops ``nodeSelector``. Missing
  mappings on the way to `at` are created (but never list items).
- ``append``: ``{field: [items]}`` appends items to the list ``field`` under
  `at`, creating it when absent.
- ``remove``: ``{field: [match, ...]}`` removes the items of the list ``field``
  under `at` whose keys equal one ``match`` mapping (``{name: X}``); a list
  left empty goes too.

``apply_edits`` applies them to a copy of the object; the patch encoders then
express the difference between the object before and after, so the patch a
reviewer reads and the result this module computes cannot disagree.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from gpuaudit.kube import pointers


class EditError(ValueError):
    """An edit that cannot apply to the object (a template or planner bug)."""


class Edit(msgspec.Struct, frozen=True):
    at: str
    merge: Mapping[str, Any] = msgspec.field(default_factory=dict)
    append: Mapping[str, list[Any]] = msgspec.field(default_factory=dict)
    remove: Mapping[str, list[Mapping[str, Any]]] = msgspec.field(default_factory=dict)


def parse_edits(data: Any, source: str) -> list[Edit]:
    """Edits from a rendered template's ``edits:`` list, checked for shape."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise EditError(f"{source}: edits must be a list")
    edits = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("at"), str):
            raise EditError(f"{source}: edit {i} needs `at` (a JSON pointer)")
        unknown = set(item) - {"at", "merge", "append", "remove"}
        if unknown:
            raise EditError(f"{source}: edit {i} has unknown keys {sorted(unknown)}")
        merge = item.get("merge") or {}
        append = item.get("append") or {}
        if not isinstance(merge, dict) or not isinstance(append, dict):
            raise EditError(f"{source}: edit {i}: merge and append must be mappings")
        # A for-loop over an empty list renders `field:` alone, which reads as null.
        append = {k: [] if v is None else v for k, v in append.items()}
        if any(not isinstance(v, list) for v in append.values()):
            raise EditError(f"{source}: edit {i}: append values must be lists")
        remove = item.get("remove") or {}
        if not isinstance(remove, dict) or not all(
            isinstance(v, list) and all(isinstance(m, dict) and m for m in v) for v in remove.values()
        ):
            raise EditError(f"{source}: edit {i}: remove maps a list field to match mappings")
        pointers.tokens(item["at"])  # raises on a malformed pointer
        edits.append(Edit(item["at"], merge, append, remove))
    return edits


def apply_edits(obj: Mapping[str, Any], edits: Iterable[Edit]) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``edits`` applied in order."""
    result = copy.deepcopy(dict(obj))
    for edit in edits:
        _apply(result, edit)
    return result


def _apply(obj: dict[str, Any], edit: Edit) -> None:
    path = pointers.tokens(edit.at)
    adds_something = any(edit.append.values()) or (bool(edit.merge) and _has_values(edit.merge))
    node: Any = obj
    trail: list[tuple[Any, str | int]] = []  # (parent, key) down to `at`
    for token in path:
        if isinstance(node, dict):
            child = node.get(token)
            if not isinstance(child, (dict, list)):
                if not adds_something:
                    return  # only removals under a path that does not exist: nothing to do
                if child is not None:
                    raise EditError(f"{edit.at}: {token!r} is not a mapping")
                child = node[token] = {}
            trail.append((node, token))
            node = child
        elif isinstance(node, list):
            if not token.isdigit() or int(token) >= len(node):
                raise EditError(f"{edit.at}: no list item {token!r}")
            trail.append((node, int(token)))
            node = node[int(token)]
        else:
            raise EditError(f"{edit.at}: cannot descend into {type(node).__name__}")
    if not isinstance(node, dict):
        raise EditError(f"{edit.at}: edits apply to mappings, found {type(node).__name__}")
    before = len(node)
    _merge(node, edit.merge)
    for name, items in edit.append.items():
        if not items:
            continue
        existing = node.get(name)
        if existing is None:
            node[name] = copy.deepcopy(items)
        elif isinstance(existing, list):
            existing.extend(copy.deepcopy(items))
        else:
            raise EditError(f"{edit.at}/{name}: cannot append to {type(existing).__name__}")
    for name, matches in edit.remove.items():
        items = node.get(name)
        if not isinstance(items, list):
            continue
        kept = [i for i in items if not any(_matches(i, m) for m in matches)]
        if kept:
            node[name] = kept
        elif items:
            del node[name]
    # A mapping emptied by removals goes too, upward, but never a top-level
    # field of the object (spec, metadata) and never a list item.
    while before and not node and len(trail) > 1:
        parent, key = trail.pop()
        if isinstance(parent, list):
            break
        before = len(parent)
        del parent[key]
        node = parent


def _merge(node: dict[str, Any], changes: Mapping[str, Any]) -> None:
    for key, value in changes.items():
        if value is None:
            node.pop(key, None)
        elif isinstance(value, Mapping):
            current = node.get(key)
            if isinstance(current, dict):
                had = len(current)
                _merge(current, value)
                if had and not current:
                    del node[key]
            else:
                pruned = _without_nulls(value)
                if pruned or not value:  # an explicit {} (emptyDir: {}) is a value
                    node[key] = pruned
        else:
            node[key] = copy.deepcopy(value)


def _matches(item: Any, match: Mapping[str, Any]) -> bool:
    return isinstance(item, dict) and all(item.get(k) == v for k, v in match.items())


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if v is None:
                continue
            if isinstance(v, Mapping) and v:
                v = _without_nulls(v)
                if not v:
                    continue
            else:
                v = copy.deepcopy(v)
            out[k] = v
        return out
    return copy.deepcopy(value)


def _has_values(value: Any) -> bool:
    if isinstance(value, Mapping):
        return not value or any(_has_values(v) for v in value.values())
    return value is not None
