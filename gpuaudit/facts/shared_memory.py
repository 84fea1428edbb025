"""/dev/shm: whether a pod's is memory-backed, and what in the pod passes
data through it (one process per GPU talking NCCL, DataLoader workers, a
Ray node's object store). The container default is 64 MiB."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.kube.shapes import as_list
from gpuaudit.model import Container, PodTemplate, Workload

_RAY_START = re.compile(r"\bray\s+start\b")


def shared_memory_facts(
    w: Workload,
    t: PodTemplate,
    gpu_count: float | None,
    workers: int | None,
    parallelism: Mapping[str, Any] | None,
) -> dict[str, Any]:
    ray_node = any(_RAY_START.search(" ".join((*c.command, *c.args))) for c in t.containers)
    return {
        **_backing(w, t),
        "users": _users(t, gpu_count, workers, parallelism, ray_node),
        "ray_node": ray_node,
    }


# KubeRay mounts a memory-backed /dev/shm into every Ray container it builds
# (the object store lives there) unless the template mounts one itself.
_SHM_BY_CONTROLLER = {("ray.io", "RayCluster"), ("ray.io", "RayService"), ("ray.io", "RayJob")}


def _backing(w: Workload, t: PodTemplate) -> dict[str, Any]:
    """Whether /dev/shm is memory-backed (PyTorch dataloaders, NCCL and the Ray
    object store use it; the container default is 64 MiB). ``memory_backed``
    is None when what the controller merges the pod over decides."""
    for c in t.containers:
        mounted = _dev_shm_volume(t, c)
        if mounted is not None:
            vol = mounted[1]
            empty_dir = _memory_empty_dir(vol)
            if empty_dir is not None:
                limit = empty_dir.get("sizeLimit")
                return {
                    "memory_backed": True,
                    "size_limit": None if limit is None else str(limit),
                }
            host = vol.get("hostPath")
            if isinstance(host, Mapping) and str(host.get("path", "")).rstrip("/") == "/dev/shm":
                return {"memory_backed": True, "size_limit": None}  # the node's own tmpfs
            return {"memory_backed": False, "size_limit": None}
    if t.spec.get("hostIPC") is True or (w.group, w.kind) in _SHM_BY_CONTROLLER:
        return {"memory_backed": True, "size_limit": None}
    # What a controller merges the pod over, or adds to a pod of a kind found
    # by its shape (an operator's memory-backed /dev/shm), is unknown here.
    if t.discovered or any(c.merged_over for c in t.containers):
        return {"memory_backed": None, "size_limit": None}
    return {"memory_backed": False, "size_limit": None}


def container_dev_shm(t: PodTemplate, c: Container) -> dict[str, Any] | None:
    """The memory-backed emptyDir a container mounts at /dev/shm, compared
    with the container's memory limit: what it writes there counts against
    that limit (the pages are charged to its cgroup), so a sizeLimit above the
    limit can never be used; None when it mounts no such volume."""
    mounted = _dev_shm_volume(t, c)
    empty_dir = _memory_empty_dir(mounted[1]) if mounted is not None else None
    if mounted is None or empty_dir is None:
        return None
    raw = empty_dir.get("sizeLimit")
    try:
        size = parse_quantity(raw) if raw is not None else None
    except QuantityError:
        size = None  # a placeholder: unknown, said where quantities are read
    over = size - c.memory_limit if size is not None and c.memory_limit is not None else None
    return {
        "size_limit_gib": None if size is None else round(size / 2**30, 2),
        "memory_limit_gib": None if c.memory_limit is None else round(c.memory_limit / 2**30, 2),
        "over_memory_limit": None if over is None else over > 0,
        "pointer": f"{t.pointer}/volumes/{mounted[0]}/emptyDir" + ("/sizeLimit" if raw is not None else ""),
    }


def _dev_shm_volume(t: PodTemplate, c: Container) -> tuple[int | None, Mapping[str, Any]] | None:
    """The volume ``c`` mounts at /dev/shm and its index among the pod's
    volumes ((None, {}) when the pod names no such volume); None when it
    mounts nothing there."""
    name = next((n for n, path in c.volume_mounts.items() if path.rstrip("/") == "/dev/shm"), None)
    if name is None:
        return None
    for i, vol in enumerate(as_list(t.spec.get("volumes"))):
        if isinstance(vol, Mapping) and str(vol.get("name")) == name:
            return i, vol
    return None, {}


def _memory_empty_dir(vol: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The volume's emptyDir when it is memory-backed (a tmpfs)."""
    empty_dir = vol.get("emptyDir")
    return empty_dir if isinstance(empty_dir, Mapping) and empty_dir.get("medium") == "Memory" else None


# Launchers that start one process per GPU: NCCL (or MPI) between them goes
# through /dev/shm. One process driving several GPUs (JAX, gpu_burn) does not.
_MULTI_PROCESS = re.compile(
    r"\b(?:torchrun|torch\.distributed\.(?:run|launch)|deepspeed|accelerate\s+launch|mpirun|horovodrun"
    r"|tune\s+run|text-generation-launcher)\b|--nproc[-_]per[-_]node"
)


def _users(
    t: PodTemplate,
    gpu_count: float | None,
    workers: int | None,
    parallelism: Mapping[str, Any] | None,
    ray_node: bool,
) -> str:
    """What in the pod passes data through /dev/shm, for messages; "" when
    nothing known does."""
    users = []
    declared = bool(parallelism and (parallelism.get("total") or 0) >= 2)
    # A launcher told to start one process (torchrun --nproc_per_node=1)
    # starts one, whatever the pod holds: no NCCL between local processes.
    one_process = bool(parallelism and parallelism.get("processes") == 1)
    launched = not one_process and any(
        _MULTI_PROCESS.search(" ".join((*c.command, *c.args))) for c in t.containers if c.gpus
    )
    if gpu_count is not None and gpu_count >= 2 and (declared or launched):
        users.append(f"one process per GPU on {gpu_count:g} GPUs (NCCL)")
    if workers:
        users.append(f"{workers} DataLoader worker process(es)")
    if ray_node:
        users.append("a Ray node (its object store)")
    return " and ".join(users)
