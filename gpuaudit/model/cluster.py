"""A cluster as the audit sees it: GPU nodes, pods with their top owner and
GPU holding, sharing configs, claims and queued work, and telemetry.

Built from a snapshot by ``cluster_builder``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from gpuaudit import gpus
from gpuaudit.model.objects import Document, InputError
from gpuaudit.model.workload import Workload

# Waiting reasons that mean a container will not start soon; the pod still
# holds the GPUs of the node it is bound to.
STUCK_REASONS = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerError",
    "CreateContainerConfigError",
    "RunContainerError",
    "InvalidImageName",
)


class Node(msgspec.Struct, frozen=True):
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    gpu_capacity: Mapping[str, float]
    gpu_allocatable: Mapping[str, float]
    product: str | None
    model: gpus.GpuModel | None
    # GPU fields whose value could not be read ("status.capacity.nvidia.com/gpu:
    # '1e400' is out of range"). Such a node's GPUs are unknown, never zero:
    # its capacity and allocatable are left empty, so it is in no GPU count,
    # and the builder reports it as an input error.
    unreadable: tuple[str, ...] = ()
    # What the scheduler may give pods: CPU cores and memory bytes (None when
    # the node does not say or the value cannot be read).
    cpu_allocatable: float | None = None
    memory_allocatable: float | None = None

    @property
    def gpus(self) -> float:
        """Physical GPUs (MIG slices and shared replicas are not whole GPUs)."""
        count = self.labels.get("nvidia.com/gpu.count")
        if count and count.isdigit():
            return float(count)
        replicas = self.labels.get("nvidia.com/gpu.replicas", "1")
        whole = self.gpu_capacity.get("nvidia.com/gpu", 0.0) + self.gpu_capacity.get("nvidia.com/gpu.shared", 0.0)
        per = max(int(replicas), 1) if replicas.isdigit() else 1
        return whole / per + self.gpu_capacity.get("amd.com/gpu", 0.0)


class Owner(msgspec.Struct, frozen=True):
    api_version: str
    kind: str
    name: str
    workload_class: str


class PodState(msgspec.Struct, frozen=True):
    workload: Workload  # the pod as a Workload (kind Pod): templates, containers, GPU requests
    phase: str
    node: str | None
    owner: Owner
    holds_gpus: bool
    start_time: datetime | None
    waiting_reasons: tuple[str, ...]
    restarts: int
    ready: bool
    not_ready_since: datetime | None
    scheduling_gates: tuple[str, ...]
    failed_scheduling: str | None

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def namespace(self) -> str:
        return self.workload.namespace


class ClusterState(msgspec.Struct, frozen=True):
    collected_at: datetime
    nodes: tuple[Node, ...]
    pods: tuple[PodState, ...]  # pods that may use GPUs; the others are only counted
    configs: tuple[Document, ...]  # device-plugin ConfigMaps, ClusterPolicies
    claims: tuple[Mapping[str, Any], ...]
    kueue_workloads: tuple[Mapping[str, Any], ...]
    telemetry: Mapping[str, Any] | None
    errors: tuple[InputError, ...] = msgspec.field(default_factory=tuple)
    source: str = "cluster"
    pods_total: int = 0
    # Object lists the collector could not read (a 403 on pods): what depends
    # on them is unknown, never zero.
    unread: frozenset[str] = frozenset()
    # node -> (CPU cores, memory bytes) the pods bound to it request, every
    # pod that has not finished (CPU-only ones too): what the what-if must
    # leave room for when it moves pods.
    node_requests: Mapping[str, tuple[float, float]] = msgspec.field(default_factory=dict)

    @property
    def unknown_gpu_nodes(self) -> tuple[str, ...]:
        """Nodes whose GPU capacity could not be read (``Node.unreadable``):
        left out of every GPU total, so a run with any is not a trend point."""
        return tuple(n.name for n in self.nodes if n.unreadable)

    def unknown_gpus_note(self) -> str | None:
        """Why this run's GPU totals must not enter the history, or None."""
        unknown = self.unknown_gpu_nodes
        if not unknown:
            return None
        named = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        return f"the GPUs of {len(unknown)} node(s) are unknown ({named}): totals without them would distort the trend"
