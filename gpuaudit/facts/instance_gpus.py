"""GPUs per cloud instance type (data/instance_gpus.yaml): whether a pod
pinned to instance types holds every GPU of the node it lands on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


@cache
def _gpus_by_type() -> dict[str, int]:
    return {str(t).lower(): int(e["gpus"]) for e in data_yaml("instance_gpus.yaml") for t in e["types"]}


def node_gpus(node_selector: Mapping[str, str], terms: Sequence[Mapping[str, Any]]) -> int | None:
    """The most GPUs a node the pod may land on carries, when the pod is
    pinned to instance types the table knows: by a nodeSelector, or by every
    required node affinity term (terms are ORed) with an `In`; None when any
    node it may land on is of a type not pinned or not known."""
    for label in INSTANCE_TYPE_LABELS:
        if label in node_selector:
            return _most_gpus([node_selector[label]])
    allowed: list[str] = []
    for term in terms:
        values = _instance_types_in(term)
        if values is None:
            return None
        allowed += values
    return _most_gpus(allowed) if allowed else None


def _instance_types_in(term: Mapping[str, Any]) -> list[str] | None:
    expressions = term.get("matchExpressions")
    for e in expressions if isinstance(expressions, list) else []:
        if isinstance(e, Mapping) and e.get("key") in INSTANCE_TYPE_LABELS and e.get("operator") == "In":
            values = e.get("values")
            if isinstance(values, list) and values:
                return [str(v) for v in values]
    return None


def _most_gpus(types: Sequence[str]) -> int | None:
    table = _gpus_by_type()
    names = [t.strip().lower() for t in types]
    return max(table[n] for n in names) if all(n in table for n in names) else None
