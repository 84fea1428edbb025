"""Workloads: objects that carry pod templates, with their containers and GPU requests.

Built from Documents by ``workload_builder``; raw objects stay available
(``Workload.document.obj``) for the facts that need a field nobody normalized yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from gpuaudit.model.objects import Document


class GpuRequest(msgspec.Struct, frozen=True):
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
    # A share of one GPU given as its memory (KAI's gpu-memory annotation, MiB):
    # no device count at all.
    memory_mib: float | None = None

    @property
    def count(self) -> float | None:
        """Devices allocated (the device plugin allocates by limit; a request
        alone is copied to the limit), or None when the value was unreadable."""
        return self.limit if self.limit is not None else self.request


class Container(msgspec.Struct, frozen=True):
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
    # What the controller merges this container over before it runs (KServe:
    # the serving runtime's container); its unset fields are then unknown here.
    merged_over: str | None = None
    # securityContext.privileged: the container gets every device node of its
    # host, every GPU among them, whatever the device plugin gave it.
    privileged: bool = False
    # A readiness, liveness or startup probe on a port (httpGet, tcpSocket,
    # grpc): a server is meant to listen in it.
    probes_a_port: bool = False


class PodTemplate(msgspec.Struct, frozen=True):
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
    # Found by its shape in a kind the pod-spec table does not know: what
    # its controller adds to the pod (volumes, a /dev/shm) is unknown.
    discovered: bool = False


class Workload(msgspec.Struct, frozen=True):
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
        return any(c.gpus for t in self.templates for c in (*t.containers, *t.init_containers)) or any(
            t.extra_gpus for t in self.templates
        )

    @property
    def annotations(self) -> Mapping[str, str]:
        meta = self.document.obj.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        return ann if isinstance(ann, dict) else {}
