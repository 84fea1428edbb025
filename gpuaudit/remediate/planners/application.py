"""Application remediations: CPU and memory for GPU containers, /dev/shm."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import msgspec

from gpuaudit.facts.types import ModelFit, Parallelism
from gpuaudit.kube import pointers
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.model import Container, PodTemplate
from gpuaudit.remediate import sizing
from gpuaudit.remediate.planners.common import (
    Context,
    Declined,
    Planner,
    Proposal,
    identity,
    per_container,
    same_type,
)

# --- application -----------------------------------------------------------------------

UNKNOWN_GPU_COUNT = Declined("the GPU count is unknown")
PAUSE = Declined(
    "a pause container holds the GPU as a placeholder and runs no work: a CPU or memory request "
    "sized per GPU would reserve what nothing uses"
)


def _is_pause(c: Container) -> bool:
    image = c.image or ""
    name = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return name in ("pause", "pause-amd64", "pause-arm64") or name.startswith("pause-")


class _ProcessFacts(msgspec.Struct, frozen=True):
    """What ``_model_weights`` reads of the facts of a pod's processes
    (facts/process.py: a part of the pod's facts)."""

    model: ModelFit | None
    parallelism: Parallelism | None


def _model_weights(ctx: Context) -> tuple[str, float, float | None] | None:
    """The model the pod serves, its weights in GiB and the GPUs its declared
    parallelism spans (None when none is declared), when its command line or
    env names a model gpuaudit knows the size of (facts/model_size.py)."""
    from gpuaudit.facts.context import Site, build_context
    from gpuaudit.facts.process import command_lines, pod_process_facts
    from gpuaudit.model.workload_builder import build_workloads

    if ctx.template is None:
        return None
    workloads, _ = build_workloads([ctx.document], _locators(ctx))
    for w in workloads:
        for t in w.templates:
            if t.pointer != ctx.template.pointer:
                continue
            context = build_context(Site(), [ctx.document], workloads)
            facts = msgspec.convert(pod_process_facts(w, t, {}, context, command_lines(w, t)), _ProcessFacts)
            model, parallelism = facts.model, facts.parallelism
            total = parallelism.total if parallelism is not None else None
            if model is not None and model.weights_gib is not None and model.weights_gib > 0:
                span = float(total) if total is not None and total > 0 else None
                return str(model.name), float(model.weights_gib), span
    return None


def _locators(ctx: Context):
    from gpuaudit.kube.podspecs import builtin_locators

    return getattr(ctx.run.coherence, "locators", None) or builtin_locators()


def _gpu_count(ctx: Context) -> float | None:
    """The GPUs the pod asks for; None when that is not a known positive number."""
    count = ctx.container_facts.gpu.count
    return count if count is not None and count > 0 else None


def sized_per_gpu(func: Callable[[Context, Container, float], Proposal | Declined]) -> Planner:
    """A planner that sizes a container's CPU or memory by the GPUs its pod
    asks for: declines when that count is unknown, or the container is a
    pause container (a placeholder that runs no work)."""

    def plan(ctx: Context, c: Container) -> Proposal | Declined:
        gpu_count = _gpu_count(ctx)
        if gpu_count is None:
            return UNKNOWN_GPU_COUNT
        if _is_pause(c):
            return PAUSE
        return func(ctx, c, gpu_count)

    return per_container(plan)


def cpu_request_per_gpu(ctx: Context, c: Container, gpu_count: float) -> Proposal | Declined:
    per_gpu = float(ctx.params["min_cpu_per_gpu"])
    cores = sizing.cpu_cores_for(gpu_count, per_gpu)
    if c.cpu_request is None and c.cpu_limit is not None and c.cpu_limit >= cores:
        return Declined(
            f"its CPU limit ({c.cpu_limit:g}) is its request too (Kubernetes defaults a missing request "
            f"to the limit): already at least {cores} cores; a request of {cores} would lower it"
        )
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


def add_dev_shm(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    spec = template.spec
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    mounts_shm = any(str(p).rstrip("/") == "/dev/shm" for c in template.containers for p in c.volume_mounts.values())
    if ctx.document.api_version.split("/")[0] == "ray.io" and not mounts_shm:
        return Declined(
            "KubeRay mounts a memory-backed /dev/shm sized to the Ray container's memory limit "
            "(unbounded without one) when the pod has none: a sized volume here would shrink it"
        )
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
        lowers: frozenset[str] = frozenset()
        if (volume.get("emptyDir") or {}).get("medium") != "Memory":
            # A disk-backed /dev/shm has no size of its own: bounding it in
            # memory is what this change is for, said here.
            basis += f" It was disk-backed and unbounded; in memory it is bounded at {size_text}."
            lowers = frozenset({"shm"})
        return Proposal("memory-medium", params, basis, "static", f"{template.pointer}#shm", lowers=lowers)
    name = str(ctx.params["volume_name"])
    if name in volumes:
        name = f"gpuaudit-{name}"
    if size <= 0:
        return Declined("the container memory limits leave no room for /dev/shm")
    mounts = [{"name": c.name, "pointer": c.pointer} for c in gpu_users]
    params = {**common, "volume": name, "containers": mounts}
    return Proposal(None, params, basis, "static", f"{template.pointer}#shm")


def memory_request(ctx: Context, c: Container, gpu_count: float) -> Proposal | Declined:
    if ctx.params.get("memory_per_gpu"):  # the site asked for a flat floor (--set memory_per_gpu=...)
        try:
            per_gpu = parse_quantity(ctx.params["memory_per_gpu"])
        except QuantityError as exc:
            return Declined(f"memory_per_gpu: {exc}")
        size = sizing.format_bytes(per_gpu * max(1.0, float(gpu_count)))
        basis = (
            f"{gpu_count:g} GPU(s) x {ctx.params['memory_per_gpu']} (setting memory_per_gpu) = "
            f"{size}: the floor the site set. Needs confirmation: set it to the process's observed "
            "peak resident memory."
        )
        confidence = "needs confirmation"
    else:
        weights = _model_weights(ctx)
        if weights is None:
            return Declined(
                "no evidence of the host memory it needs (no serving runtime, measurement or model "
                "of known size): a flat guess could starve it or reserve what it never uses; set "
                "the request to its observed peak resident memory, or --set memory_per_gpu=SIZE"
            )
        model, gib, span = weights
        share = ""
        if span is not None and span > float(gpu_count):
            # One model over several pods (multi-host tensor/pipeline parallel):
            # each pod loads its share of the weights.
            share = f"; its parallelism spans {span:g} GPUs, this pod holds {gpu_count:g}, so its share"
            gib = gib * float(gpu_count) / span
        elif span is None and ctx.document.kind == "LeaderWorkerSet":
            return Declined(
                f"the pods of a LeaderWorkerSet group share {model} and no parallelism says how the "
                "weights split between them: size the request from each pod's observed peak resident memory"
            )
        size = sizing.format_bytes(max(1.0, math.ceil(gib)) * sizing.GIB)
        basis = (
            f"The pod serves {model} (weights from gpuaudit's model-size table and its dtype{share}: "
            f"about {gib:,.1f} GiB): loading them passes through host memory, so {size} is the floor "
            "the scheduler should count. Set it to the observed peak resident memory once measured."
        )
        confidence = "static"
    params = {**identity(ctx), "resources_pointer": c.resources_pointer, "memory": size}
    return Proposal(None, params, basis, confidence, f"{c.pointer}#memory")


def raise_cpu_limit(ctx: Context, c: Container, gpu_count: float) -> Proposal | Declined:
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
