"""Reading raw Kubernetes objects whose shape nobody checked.

Manifests, snapshot files and API responses are JSON-like data from outside:
a field may hold a scalar where a list belongs (``tolerations: true``), a
string where a mapping does. Facts read such a field as absent, never as a
crash; the fields whose values matter (quantities) are reported instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_map(value: Any) -> Mapping[Any, Any]:
    """``value`` when it is a mapping, else an empty one."""
    if value.__class__ is dict:  # nearly always: the ABC check below is the slow path
        return value
    if value is None:  # an absent field, the next most common
        return {}
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one."""
    if value.__class__ is list:  # nearly always: isinstance only for a subclass
        return value
    return value if isinstance(value, list) else []


ObjectId = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def object_id(obj: Mapping[str, Any]) -> ObjectId:
    """Who an object is, whatever shape its metadata has."""
    meta = as_map(obj.get("metadata"))
    return (
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )
