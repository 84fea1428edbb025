"""Application remediations: CPU and memory for GPU containers, /dev/shm."""

from __future__ import annotations

from collections.abc import Mapping

from gpuaudit.kube import pointers
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.remediate import sizing
from gpuaudit.remediate.planners.common import (
    NO_CONTAINER,
    Context,
    Declined,
    Proposal,
    identity,
    needs_template,
    planner,
    same_type,
)

# --- application -----------------------------------------------------------------------

UNKNOWN_GPU_COUNT = Declined("the GPU count is unknown")


def _gpu_count(ctx: Context) -> float | None:
    """The GPUs the pod asks for; None when that is not a known positive number."""
    count = (ctx.facts.get("gpu") or {}).get("count")
    return count if isinstance(count, (int, float)) and count > 0 else None


@planner("cpu-request-per-gpu")
def cpu_request_per_gpu(ctx: Context) -> Proposal | Declined:
    c = ctx.container
    if c is None:
        return NO_CONTAINER
    gpu_count = _gpu_count(ctx)
    if gpu_count is None:
        return UNKNOWN_GPU_COUNT
    per_gpu = float(ctx.params["min_cpu_per_gpu"])
    cores = sizing.cpu_cores_for(gpu_count, per_gpu)
    current = pointers.get(ctx.document.obj, pointers.join(c.resources_pointer, "requests", "cpu"))
    limit = pointers.get(ctx.document.obj, pointers.join(c.resources_pointer, "limits", "cpu"))
    params = {
        **identity(ctx),
        "resources_pointer": c.resources_pointer,
        "cpu": same_type(current, str(cores)),
        "cpu_limit": same_type(limit, str(cores)),
        "cores": cores,
    }
    now = f"{c.cpu_request:g} requested now" if c.cpu_request else "no CPU request now"
    basis = f"{gpu_count:g} GPU(s) x {per_gpu:g} cores per GPU (rule param min_cpu_per_gpu) = {cores} cores; {now}."
    variant = None
    if c.cpu_limit is not None and c.cpu_limit < cores:
        variant = "with-limit"
        basis += f" The CPU limit ({c.cpu_limit:g}) is raised too: a request above it is invalid."
    return Proposal(variant, params, basis, "static", c.pointer)


@planner("add-dev-shm")
def add_dev_shm(ctx: Context) -> Proposal | Declined:
    template = needs_template(ctx)
    if isinstance(template, Declined):
        return template
    spec = template.spec
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    gpu_users = [c for c in template.containers if c.gpus] or list(template.containers)
    try:
        wanted = parse_quantity(ctx.params["size_limit"])
    except QuantityError as exc:
        return Declined(f"size_limit: {exc}")
    limits = [c.memory_limit for c in gpu_users if c.memory_limit]
    size, capped = sizing.shm_size_bytes(wanted, limits, float(ctx.params["memory_fraction"]))
    size_text = sizing.format_bytes(size)
    basis = f"/dev/shm sized {size_text}"
    basis += (
        f": {float(ctx.params['memory_fraction']):.0%} of the smallest container memory limit "
        f"({sizing.format_bytes(min(limits))}), since a memory-backed volume counts against it."
        if capped
        else " (setting size_limit; it counts against the pod's memory limit)."
    )
    common = {**identity(ctx), "spec_pointer": template.pointer, "size_limit": size_text}
    mounted = [
        (c, name)
        for c in template.containers
        for name, path in c.volume_mounts.items()
        if path.rstrip("/") == "/dev/shm"
    ]
    if mounted:
        name = mounted[0][1]
        index = next((i for i, v in enumerate(spec.get("volumes") or []) if v.get("name") == name), None)
        volume = volumes.get(name) or {}
        if index is None or "emptyDir" not in volume:
            kinds = ", ".join(k for k in volume if k != "name") or "no volume"
            return Declined(f"/dev/shm is mounted from {kinds}: change it by hand")
        params = {
            **common,
            "volume": name,
            "empty_dir_pointer": f"{template.pointer}/volumes/{index}/emptyDir",
        }
        return Proposal("memory-medium", params, basis, "static", f"{template.pointer}#shm")
    name = str(ctx.params["volume_name"])
    if name in volumes:
        name = f"gpuaudit-{name}"
    if size <= 0:
        return Declined("the container memory limits leave no room for /dev/shm")
    mounts = [{"name": c.name, "pointer": c.pointer} for c in gpu_users]
    params = {**common, "volume": name, "containers": mounts}
    return Proposal(None, params, basis, "static", f"{template.pointer}#shm")


@planner("memory-request")
def memory_request(ctx: Context) -> Proposal | Declined:
    c = ctx.container
    if c is None:
        return NO_CONTAINER
    gpu_count = _gpu_count(ctx)
    if gpu_count is None:
        return UNKNOWN_GPU_COUNT
    try:
        per_gpu = parse_quantity(ctx.params["memory_per_gpu"])
    except QuantityError as exc:
        return Declined(f"memory_per_gpu: {exc}")
    size = sizing.format_bytes(per_gpu * max(1.0, float(gpu_count)))
    params = {**identity(ctx), "resources_pointer": c.resources_pointer, "memory": size}
    basis = (
        f"{gpu_count:g} GPU(s) x {ctx.params['memory_per_gpu']} (setting memory_per_gpu) = "
        f"{size}: a static floor so the scheduler counts the container's host memory. "
        "Needs confirmation: set it to the process's observed peak resident memory."
    )
    return Proposal(None, params, basis, "needs confirmation", f"{c.pointer}#memory")


@planner("raise-cpu-limit")
def raise_cpu_limit(ctx: Context) -> Proposal | Declined:
    c = ctx.container
    if c is None:
        return NO_CONTAINER
    gpu_count = _gpu_count(ctx)
    if gpu_count is None:
        return UNKNOWN_GPU_COUNT
    per_gpu = float(ctx.params["min_cpu_limit_per_gpu"])
    cores = sizing.cpu_cores_for(gpu_count, per_gpu)
    limit = pointers.get(ctx.document.obj, pointers.join(c.resources_pointer, "limits", "cpu"))
    params = {
        **identity(ctx),
        "resources_pointer": c.resources_pointer,
        "cpu": same_type(limit, str(cores)),
        "cores": cores,
    }
    basis = (
        f"{gpu_count:g} GPU(s) x {per_gpu:g} cores per GPU (rule param "
        f"min_cpu_limit_per_gpu) = {cores} cores of limit; {c.cpu_limit:g} now."
        if c.cpu_limit is not None
        else f"{cores} cores of limit."
    )
    return Proposal(None, params, basis, "static", f"{c.pointer}#cpu-limit")
