"""The model: plain data that every source produces and every later stage reads.

Frozen dataclasses, no IO. Import the types from here; the submodules group
them (objects, workload, cluster, findings), ``telemetry`` defines the
normalized telemetry aggregate, and the two builders turn raw Kubernetes
objects (``workload_builder``) and snapshots (``cluster_builder``) into them.
"""

from typing import TYPE_CHECKING, Any

from gpuaudit.model.findings import (
    CATEGORIES,
    SEVERITIES,
    AuditResult,
    Exemption,
    Finding,
    Location,
    Resource,
    Severity,
    Skipped,
)
from gpuaudit.model.objects import Document, InputError
from gpuaudit.model.workload import Container, GpuRequest, PodTemplate, Workload

if TYPE_CHECKING:
    from gpuaudit.model.cluster import STUCK_REASONS, ClusterState, Node, Owner, PodState

# The cluster's types are imported on first use: `gpuaudit check` (pre-commit,
# on every commit) never models a cluster, and creating their dataclasses
# would cost it 3%.
_CLUSTER = ("STUCK_REASONS", "ClusterState", "Node", "Owner", "PodState")


def __getattr__(name: str) -> Any:
    if name in _CLUSTER:
        from gpuaudit.model import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CATEGORIES",
    "SEVERITIES",
    "STUCK_REASONS",
    "AuditResult",
    "ClusterState",
    "Container",
    "Document",
    "Exemption",
    "Finding",
    "GpuRequest",
    "InputError",
    "Location",
    "Node",
    "Owner",
    "PodState",
    "PodTemplate",
    "Resource",
    "Severity",
    "Skipped",
    "Workload",
]
