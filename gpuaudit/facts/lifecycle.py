"""Whether a batch workload bounds how long it holds GPUs (data/lifecycle.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.kube.pointers import expand
from gpuaudit.model import Workload


@cache
def _table() -> dict[tuple[str, str], Mapping[str, Any]]:
    entries = data_yaml("lifecycle.yaml")
    return {(group, e["kind"]): e for e in entries for group in e["groups"]}


def lifecycle_facts(w: Workload) -> dict[str, Any] | None:
    """None for kinds with no deadline or clean-up field to ask for."""
    entry = _table().get((w.group, w.kind))
    if entry is None or entry.get("not_judged"):
        return None
    obj = w.document.obj
    return {
        "deadline": any(_set(obj, f) for f in entry["deadline"]),
        "cleanup": any(_set(obj, f) for f in entry["cleanup"]),
        "fields": [_short(f["at"]) for f in (*entry["deadline"], *entry["cleanup"])],
        "pointer": "/spec" if isinstance(obj.get("spec"), Mapping) else "",
    }


def _set(obj: Mapping[str, Any], field: Mapping[str, Any]) -> bool:
    allowed = field.get("values")
    for _, _, value in expand(obj, field["at"]):
        if value is None:
            continue
        if allowed is None or value in allowed:
            return True
    return False


def _short(pointer: str) -> str:
    parts = [p for p in pointer.split("/") if p and p != "*"]
    return ".".join(parts[-2:]) if parts[-2:-1] == ["runPolicy"] else parts[-1]
