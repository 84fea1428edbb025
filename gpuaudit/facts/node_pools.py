"""Facts about autoscaler node pools that launch GPU nodes: whether the pool
admits only GPU instances, and whether its nodes carry a taint that keeps
pods which request no GPU away (Karpenter NodePool; data/node_pools.yaml).
A GPU node without one takes any pod: CPU pods land there, use its CPU and
memory, and GPU pods then find the GPU free but no room to run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.kube.shapes import as_list, as_map

_REQUIREMENTS = "/spec/template/spec/requirements"
_TAINTS = "/spec/template/spec/taints"
_KEEPS_AWAY = ("NoSchedule", "NoExecute")


@cache
def _table() -> Mapping[str, Any]:
    return data_yaml("node_pools.yaml")["karpenter"]


def is_karpenter_node_pool(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "NodePool" and str(obj.get("apiVersion") or "").startswith("karpenter.sh/")


def _positive(operator: str, values: list[str]) -> bool:
    if operator == "Exists":
        return True
    if operator == "Gt":
        return any(v.isdigit() for v in values)  # Gt N >= 0: at least one GPU
    return operator == "In" and bool(values)


def _gpu_requirement(req: Mapping[str, Any]) -> bool:
    table = _table()
    key, operator = str(req.get("key") or ""), str(req.get("operator") or "")
    values = [str(v) for v in as_list(req.get("values"))]
    if key in table["gpu_count_keys"]:
        if operator == "In":
            return bool(values) and all(v.isdigit() and int(v) > 0 for v in values)
        return _positive(operator, values)
    if key in table["gpu_name_keys"]:
        return _positive(operator, values)
    kinds = (("category_key", "gpu_categories"), ("family_key", "gpu_families"), ("type_key", "gpu_types"))
    for field, patterns in kinds:
        if key == table[field] and operator == "In" and values:
            return all(any(re.search(p, v) for p in table[patterns]) for v in values)
    return False


def node_pool_facts(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = as_map(as_map(as_map(obj.get("spec")).get("template")).get("spec"))
    requirements = [r for r in as_list(spec.get("requirements")) if isinstance(r, Mapping)]
    gpu = next((i for i, r in enumerate(requirements) if _gpu_requirement(r)), None)
    taints = [t for t in as_list(spec.get("taints")) if isinstance(t, Mapping)]
    keeping = [f"{t.get('key')}:{t.get('effect')}" for t in taints if t.get("effect") in _KEEPS_AWAY]
    return {
        "config_type": "node-pool",
        "node_pool": {
            "provisioner": "karpenter",
            "gpu_only": gpu is not None,
            "gpu_requirement": None if gpu is None else str(requirements[gpu].get("key")),
            "taints_keeping_pods_away": keeping,
            "pointer": f"{_REQUIREMENTS}/{gpu}" if gpu is not None else _REQUIREMENTS,
            "taints_pointer": _TAINTS if "taints" in spec else "/spec/template/spec",
        },
    }
