"""The model: plain data that every source produces and every later stage reads.

Frozen records (``msgspec.Struct``), no IO. Import the types from here; the
submodules group them (objects, workload, cluster, findings), ``telemetry``
defines the normalized telemetry aggregate, and the two builders turn raw
Kubernetes objects (``workload_builder``) and snapshots (``cluster_builder``)
into them.
"""

from gpuaudit.model.cluster import STUCK_REASONS, ClusterState, Node, Owner, PodState
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
