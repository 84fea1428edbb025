"""How much of a physical GPU a pod holds.

A whole ``nvidia.com/gpu`` on an unshared node is one; a time-sliced replica
is 1/replicas of one; a MIG slice is its share of the GPU's compute slices
(1g of a 7-slice GPU is 1/7). The audit's cluster totals and the capacity
review count GPUs this way, so both give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuaudit import gpus
from gpuaudit.model import Node, PodState


def _replicas(node: Node, resource: str) -> float:
    """Replicas per physical GPU of a shared resource on ``node``."""
    label = node.labels.get("nvidia.com/gpu.replicas", "")
    if label.isdigit() and int(label) > 1:
        return float(label)
    capacity = node.gpu_capacity.get(resource, 0.0)
    return capacity / node.gpus if node.gpus and capacity > node.gpus else 1.0


def _mig_share(profile: str, model: gpus.GpuModel | None) -> float:
    """A MIG slice's share of its GPU: compute slices over the GPU's slices."""
    base = gpus.mig_base_profile(profile) or profile
    try:
        slices = int(base.split("g.", 1)[0])
    except ValueError:
        return 1 / 7
    most = max((int(p.split("g.", 1)[0]) for p in model.mig), default=7) if model else 7
    return min(slices / most, 1.0)


def physical_gpus(pod: PodState, node: Node) -> tuple[float, int, tuple[str, ...]]:
    """(physical GPU equivalents, whole GPUs, MIG profiles) a bound pod holds."""
    total, whole = 0.0, 0
    profiles: list[str] = []
    for template in pod.workload.templates:
        per_container = [_container_share(c.gpus, node, profiles) for c in template.containers]
        init = [_container_share(c.gpus, node, profiles) for c in template.init_containers]
        main = (sum(s for s, _ in per_container), sum(w for _, w in per_container))
        longest_init = max(init, default=(0.0, 0))
        share, count = max(main, longest_init)
        total += share
        whole += count
    return total, whole, tuple(sorted(set(profiles)))


def _container_share(requests: Sequence[Any], node: Node, profiles: list[str]) -> tuple[float, int]:
    share, whole = 0.0, 0
    for r in requests:
        count = r.count or 0
        if r.mode == "whole":
            per = _replicas(node, r.resource)
            share += count / per
            whole += int(count) if per == 1.0 else 0
        elif r.mode == "shared":
            share += count / _replicas(node, r.resource)
        elif r.mode == "mig" and r.profile:
            share += count * _mig_share(r.profile, node.model)
            profiles.append(r.profile)
    return share, whole
