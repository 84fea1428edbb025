"""What a pod's node selection says about the GPUs it will get: a pool whose
GPUs are already shared or MIG-partitioned, and product names GPU Feature
Discovery never publishes (a selector no node can match)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml
from gpuaudit.kube.shapes import as_list

# Node labels that say a pool's GPUs are shared or partitioned (gpu-domain.md
# §4, §6): GFD's sharing label and product suffixes, GKE's sharing selectors,
# the MIG manager's layout label.
_SHARING_LABELS = (
    "nvidia.com/gpu.sharing-strategy",
    "cloud.google.com/gke-gpu-sharing-strategy",
    "cloud.google.com/gke-max-shared-clients-per-gpu",
    # GKE's MIG partitions: each `nvidia.com/gpu` there is a slice.
    "cloud.google.com/gke-gpu-partition-size",
    "nvidia.com/mig.config",
)
_POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "nodepool",
    "node-pool",
)
# (Pattern texts here, compiled on first use by re's cache: most pods name no pool or product.)
_SHARED_POOL_NAME = r"(?i)shar|time-?slic|\bmps\b|mig"


def sharing_pool(node_selector: Mapping[str, str], terms: list[Mapping[str, Any]]) -> dict[str, str] | None:
    """The label by which a pod asks for nodes whose GPUs are shared or MIG
    partitioned: its GPUs are then not "whole with no sharing", whatever the
    resource name says."""
    pins = dict(node_selector)
    for term in terms:
        for expr in as_list(term.get("matchExpressions")):
            if isinstance(expr, Mapping) and expr.get("operator") == "In" and isinstance(expr.get("values"), list):
                values = [str(v) for v in expr["values"]]
                if len(values) == 1:
                    pins.setdefault(str(expr.get("key")), values[0])
    for key, value in pins.items():
        lowered = value.lower()
        if key in _SHARING_LABELS and lowered not in ("none", "all-disabled", "false", ""):
            return {"label": key, "value": value}
        if key == "nvidia.com/gpu.product" and (lowered.endswith("-shared") or "-mig-" in lowered):
            return {"label": key, "value": value}
        if key in _POOL_LABELS and re.search(_SHARED_POOL_NAME, value):
            return {"label": key, "value": value}
    return None


# GPU Feature Discovery publishes nvidia.com/gpu.product as the NVML device
# name with spaces turned into "-" (gpu-domain.md §6): NVIDIA-H100-80GB-HBM3,
# Tesla-T4, A100-SXM4-40GB on old drivers. NVML names keep their capitals and
# never contain spaces; GKE's accelerator names (nvidia-tesla-t4, nvidia-l4)
# belong to cloud.google.com/gke-accelerator, not to this label.
_GFD_PRODUCT = r"^[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9.+]+)*$"


# What GFD appends to a product name: a MIG profile (single strategy), -SHARED.
_GFD_SUFFIX = r"(?:-MIG-[0-9a-z.+]+|-MIG-INVALID)?(?:-SHARED)?$"
_NOT_IN_LABEL = r"[^A-Za-z0-9\-_.]"


def gfd_label_value(nvml_name: str) -> str:
    """An NVML device name as GFD writes it into a label: spaces to "-",
    characters a label value may not hold dropped (gpu-domain.md §4)."""
    return re.sub(_NOT_IN_LABEL, "", nvml_name.replace(" ", "-"))


class _Family(msgspec.Struct, frozen=True):
    contains: tuple[str, ...]
    words: frozenset[str]
    names: frozenset[str]

    def named_by(self, lowered: str) -> bool:
        """Whether a lower-cased selector value means to name this family."""
        if any(text in lowered for text in self.contains):
            return True
        return not self.words.isdisjoint(lowered.replace("_", "-").split("-"))


@cache
def _gfd_families() -> tuple[_Family, ...]:
    data = data_yaml("gfd_products.yaml")
    return tuple(
        _Family(
            contains=tuple(str(t).lower() for t in f.get("contains") or ()),
            words=frozenset(str(w).lower() for w in f.get("words") or ()),
            names=frozenset(gfd_label_value(n) for n in f["names"]),
        )
        for f in data["families"]
    )


def _published(value: str) -> bool:
    if not re.match(_GFD_PRODUCT, value):
        return False
    base = re.sub(_GFD_SUFFIX, "", value, count=1)
    lowered = base.lower()
    for family in _gfd_families():
        if family.named_by(lowered):
            return base in family.names
    return True  # a family the catalogue does not list: not judged


def never_published(label: str, values: Sequence[str]) -> list[str]:
    """Values of nvidia.com/gpu.product that GFD never publishes: a spelling
    it never writes (lower case, spaces), or a product name of a family the
    catalogue (data/gfd_products.yaml) lists that is none of that family's
    NVML names (NVIDIA-H100-SXM4-80GB: H100s are SXM5 or PCIe). A pod that
    requires only such values stays Pending on every node."""
    if label != "nvidia.com/gpu.product":
        return []
    return [v for v in values if not _published(v)]
