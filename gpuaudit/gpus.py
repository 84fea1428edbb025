"""The GPU catalogue (data/gpus.yaml): memory and MIG profiles per model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

# Node labels that name the GPU model, most specific first (gpu-domain.md §4, §6).
PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "eks.amazonaws.com/instance-gpu-name",
    "alibabacloud.com/gpu-card-model",
    "nvidia.com/gpu.family",
    "node.kubernetes.io/instance-type",
)


@dataclass(frozen=True)
class GpuModel:
    model: str
    memory_gib: float
    mig: dict[str, int]  # profile -> max instances per GPU; empty when not MIG-capable

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig)


@cache
def _catalogue() -> tuple[tuple[tuple[str, ...], GpuModel], ...]:
    text = resources.files("gpuaudit").joinpath("data/gpus.yaml").read_text()
    entries: list[dict[str, Any]] = yaml.load(
        text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return tuple(
        (tuple(e["match"]), GpuModel(e["model"], float(e["memory_gib"]), dict(e.get("mig") or {})))
        for e in entries
    )


def lookup(name: str) -> GpuModel | None:
    """The catalogue entry whose pattern occurs in ``name`` (a label value)."""
    lowered = name.lower()
    for patterns, model in _catalogue():
        if any(p in lowered for p in patterns):
            return model
    return None


def mig_profile_memory_gib(profile: str) -> float | None:
    """Nominal memory of a MIG profile name such as '1g.10gb' or '3g.40gb+me'."""
    try:
        return float(profile.split(".", 1)[1].split("gb", 1)[0])
    except (IndexError, ValueError):
        return None


def all_mig_profiles() -> set[str]:
    return {p for _, model in _catalogue() for p in model.mig}
