"""The GPU catalogue (data/gpus.yaml): memory and MIG profiles per model."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml

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


class GpuModel(msgspec.Struct, frozen=True):
    model: str
    memory_gib: float
    mig: dict[str, int]  # profile -> max instances per GPU; empty when not MIG-capable

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig)


@cache
def _entries() -> list[dict[str, Any]]:
    return data_yaml("gpus.yaml")


@cache
def _catalogue() -> tuple[tuple[tuple[str, ...], GpuModel], ...]:
    entries = _entries()
    return tuple(
        (tuple(e["match"]), GpuModel(e["model"], float(e["memory_gib"]), dict(e.get("mig") or {}))) for e in entries
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


@cache
def all_mig_profiles() -> frozenset[str]:
    return frozenset(p for _, model in _catalogue() for p in model.mig)


# A MIG profile name: compute slices, memory, then optional variants
# (+me media extensions, +gfx, -me, +me.all) that share the base profile.
_MIG_PROFILE = r"^(\d+g\.\d+gb)((?:[+-][a-z]+(?:\.[a-z]+)?)*)$"  # compiled on first use: MIG profiles only


def mig_base_profile(profile: str) -> str | None:
    """'1g.10gb+me' -> '1g.10gb'; None when the name is not a MIG profile at all."""
    match = re.match(_MIG_PROFILE, profile.strip().lower())
    return match.group(1) if match else None


def known_mig_profile(profile: str) -> bool:
    """Whether any catalogued GPU offers this profile (variants count as their base)."""
    base = mig_base_profile(profile)
    return base is not None and base in all_mig_profiles()


@cache
def _pci_index() -> dict[str, GpuModel]:
    models = {model.model: model for _, model in _catalogue()}
    return {str(pci).upper(): models[e["model"]] for e in _entries() for pci in e.get("pci") or ()}


def model_for_pci(device_id: str) -> GpuModel | None:
    """The model behind a mig-parted device-filter id such as '0x233010DE'."""
    return _pci_index().get(device_id.strip().upper())
