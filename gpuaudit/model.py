"""The normalized view every source produces and every later stage reads.

Plain, frozen dataclasses: no IO, no behaviour beyond small lookups. Raw
Kubernetes objects stay available (``Document.obj``) for the facts that need a
field nobody normalized yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "high", "medium", "low", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low", "info")
# The diagnostic flow: the order in which an operator should look.
CATEGORIES = ("allocation", "memory", "placement", "application", "sharing")


@dataclass(frozen=True)
class Document:
    """One Kubernetes object as read, with where it came from.

    ``lines`` maps JSON pointers (relative to the file's YAML document) to
    1-based line numbers; ``base`` is this object's pointer inside that
    document (non-empty for items of a ``kind: List``).
    """

    obj: Mapping[str, Any]
    file: str
    line: int
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)
    base: str = ""

    def line_of(self, pointer: str) -> int:
        """Line of ``pointer`` (relative to this object), or of its nearest ancestor."""
        full = self.base + pointer
        while full:
            found = self.lines.get(full)
            if found is not None:
                return found
            full = full.rpartition("/")[0]
        return self.lines.get(self.base, self.line)

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return (
            str(meta.get("name") or meta.get("generateName") or "")
            if isinstance(meta, dict)
            else ""
        )

    @property
    def namespace(self) -> str:
        meta = self.obj.get("metadata")
        return str(meta.get("namespace") or "") if isinstance(meta, dict) else ""


@dataclass(frozen=True)
class InputError:
    """A problem with the input. ``level='error'`` makes the run exit 2;
    ``'warning'`` is reported without changing the exit code."""

    file: str
    line: int | None
    message: str
    level: Literal["error", "warning"] = "error"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message, "level": self.level}


@dataclass(frozen=True)
class GpuRequest:
    """One GPU-like resource a container asks for.

    ``mode``: ``whole`` (a device-plugin GPU such as nvidia.com/gpu),
    ``mig`` (nvidia.com/mig-<profile>), ``shared`` (a time-sliced/MPS replica,
    nvidia.com/gpu.shared), ``fraction`` (a scheduler annotation such as KAI's
    gpu-fraction), ``dra`` (a ResourceClaim).
    """

    resource: str
    mode: Literal["whole", "mig", "shared", "fraction", "dra"]
    request: float | None
    limit: float | None
    pointer: str
    profile: str | None = None

    @property
    def count(self) -> float | None:
        """Devices allocated (the device plugin allocates by limit; a request
        alone is copied to the limit), or None when the value was unreadable."""
        return self.limit if self.limit is not None else self.request


@dataclass(frozen=True)
class Container:
    name: str
    pointer: str
    init: bool
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: Mapping[str, str]
    gpus: tuple[GpuRequest, ...]
    cpu_request: float | None
    cpu_limit: float | None
    memory_request: float | None
    memory_limit: float | None
    volume_mounts: Mapping[str, str]  # volume name -> mount path
    resources_pointer: str


@dataclass(frozen=True)
class PodTemplate:
    """A pod shape inside a workload (a Deployment's template, a PyTorchJob's
    Worker, a Ray worker group...)."""

    role: str
    pointer: str  # the PodSpec (or inline spec) inside the object
    replicas: int | None
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...]
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    extra_gpus: tuple[GpuRequest, ...] = ()  # pod-level: DRA claims, fraction annotations


@dataclass(frozen=True)
class Workload:
    """Any object that carries pod templates, or a GPU config object."""

    document: Document
    group: str
    workload_class: str  # service | batch | daemon | pod | config | other
    templates: tuple[PodTemplate, ...]

    @property
    def kind(self) -> str:
        return self.document.kind

    @property
    def name(self) -> str:
        return self.document.name

    @property
    def namespace(self) -> str:
        return self.document.namespace

    @property
    def requests_gpus(self) -> bool:
        """Some container, init container or pod-level claim asks for GPUs."""
        return any(
            c.gpus for t in self.templates for c in (*t.containers, *t.init_containers)
        ) or any(t.extra_gpus for t in self.templates)

    @property
    def annotations(self) -> Mapping[str, str]:
        meta = self.document.obj.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        return ann if isinstance(ann, dict) else {}


@dataclass(frozen=True)
class Resource:
    """What a finding is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    container: str | None = None
    node: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "container": self.container,
        }
        if self.node is not None:
            out["node"] = self.node
        return out

    def label(self) -> str:
        """``Kind namespace/name [container]``, as findings name what they are about."""
        text = f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"
        return text + (f" [{self.container}]" if self.container else "")


@dataclass(frozen=True)
class Location:
    file: str
    line: int | None
    pointer: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "pointer": self.pointer}


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    severity: Severity
    category: str
    message: str
    resource: Resource
    location: Location
    evidence: Mapping[str, Any]
    remediation: Mapping[str, Any] | None
    # The judged Subject (facts, document), kept for `gpuaudit fix` to size its
    # patches from; never part of the output formats.
    subject: Any = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity,
            "category": self.category,
            "message": self.message,
            "resource": self.resource.as_dict(),
            "location": self.location.as_dict(),
            "evidence": dict(self.evidence),
            "remediation": dict(self.remediation) if self.remediation is not None else None,
        }


@dataclass(frozen=True)
class Skipped:
    rule: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}
