"""Where each kind keeps its pod specs: the locator table (data/podspecs.yaml,
extendable in config), and which resources are GPUs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml

# Device-plugin resources that are GPUs (or slices of one): NVIDIA's, AMD's,
# Intel's, Habana Gaudi, and any vendor's `<vendor>/gpu` or `<vendor>/vgpu`.
GPU_RESOURCE = re.compile(
    r"^(?:nvidia\.com/(?:gpu(?:[-.][\w.-]+)?|mig-[\w.+-]+)|amd\.com/gpu|gpu\.intel\.com/(?:i915|xe)"
    r"|habana\.ai/gaudi\w*|[a-z0-9][a-z0-9.-]*\.[a-z]+/v?gpu)$"
)


def plugin_named_gpu(resource: str) -> bool:
    """NVIDIA GPUs under a name a plugin gives them (a generic CDI device
    plugin's nvidia.com/gpu-all, a time-slicing rename to nvidia.com/gpu-ts):
    a GPU request, but how many GPUs one is, and who shares them, is that
    plugin's. (String tests: no pattern to compile on check's path.)"""
    return resource.startswith(("nvidia.com/gpu-", "nvidia.com/gpu.")) and resource != "nvidia.com/gpu.shared"


MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\+me)?)(\.shared)?$")
# Intel's device plugin also advertises resources that are no device of
# their own: i915_monitoring/xe_monitoring (every GPU, for a monitoring agent)
# and the GPU Aware Scheduling shares (millicores, memory.max, tiles), which
# the GPU_RESOURCE pattern leaves out. HAMi turns nvidia.com/gpu into a
# virtual slice when its modifiers sit beside it; Intel's GAS does the same
# with millicores beside gpu.intel.com/i915.
SHARE_MODIFIERS = (
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "gpu.intel.com/millicores",
    "gpu.intel.com/memory.max",
)
# KAI scheduler: `gpu-fraction` is a share of one GPU (0.5); `gpu-memory` is
# MiB of one GPU's memory, never a count of GPUs.
FRACTION_ANNOTATIONS = ("gpu-fraction",)
MEMORY_SHARE_ANNOTATIONS = ("gpu-memory",)


class Locator(msgspec.Struct, frozen=True):
    at: str
    spec: str | None
    metadata: str | None
    role: str | None
    role_field: str | None
    replicas: tuple[str, ...]
    inline_containers: tuple[str, ...]
    container_lists: tuple[str, ...]
    resources_only: str | None
    merged_over: str | None = None  # see data/podspecs.yaml
    spark_pod: bool = False  # see data/podspecs.yaml


class KindLocator(msgspec.Struct, frozen=True):
    kind: str
    groups: tuple[str, ...]
    workload_class: str
    pods: tuple[Locator, ...]
    plural: str | None = None  # the resource's plural, for listing it from a cluster


def parse_locators(entries: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], KindLocator]:
    table: dict[tuple[str, str], KindLocator] = {}
    for entry in entries:
        pods = tuple(
            Locator(
                at=_absolute(p.get("at", "")),
                spec=p.get("spec"),
                metadata=p.get("metadata"),
                role=p.get("role"),
                role_field=p.get("role_field"),
                replicas=tuple(p.get("replicas", ())),
                inline_containers=tuple(p.get("inline_containers", ())),
                container_lists=tuple(p.get("container_lists", ())),
                resources_only=p.get("resources_only"),
                merged_over=p.get("merged_over"),
                spark_pod=bool(p.get("spark_pod", False)),
            )
            for p in entry["pods"]
        )
        plural = str(entry["plural"]) if entry.get("plural") else None
        kl = KindLocator(entry["kind"], tuple(entry["groups"]), entry.get("class", "other"), pods, plural)
        for group in kl.groups:
            table[(group, kl.kind)] = kl
    return table


@cache
def builtin_locators() -> dict[tuple[str, str], KindLocator]:
    return parse_locators(data_yaml("podspecs.yaml"))


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _absolute(pointer: str) -> str:
    """Locator ``at`` pointers from a user's config may leave out the leading '/'."""
    return pointer if not pointer or pointer.startswith("/") else "/" + pointer
