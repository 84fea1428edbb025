"""Allocation remediations: whole GPUs to a share, GPU counts that match the work."""

from __future__ import annotations

from typing import Any

from gpuaudit import gpus
from gpuaudit.facts import reservations
from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import group_of
from gpuaudit.model import Container, PodTemplate
from gpuaudit.remediate import sizing
from gpuaudit.remediate.planners.common import (
    NVIDIA_GPU,
    Confidence,
    Context,
    Declined,
    Proposal,
    SharePlan,
    identity,
    same_type,
)

# --- allocation: whole GPU -> a share ------------------------------------------------


def _gpu_model(ctx: Context) -> tuple[gpus.GpuModel | None, str]:
    """The GPU model the workload runs on, and where that came from: the
    nodes its live pods ran on, its product selector, or the setting."""
    seen = ctx.run.evidence_for(ctx.document)
    if seen is not None and seen.model is not None:
        return seen.model, f"the node(s) its pods ran on: {', '.join(seen.nodes)}"
    product = ctx.pod_facts.placement.gpu_product
    named = product.model if product is not None else None
    source = f"its {product.label} selector" if product is not None and named else ""
    if not named and ctx.params.get("gpu_model"):
        named, source = ctx.params["gpu_model"], "the gpu_model setting"
    if not named:
        return None, "unknown (no GPU product selector; set --set gpu_model=MODEL)"
    model = gpus.lookup(str(named))
    return model, source if model else f"unknown ({named!r} is not in the GPU catalogue)"


RAY_GROUP = "ray.io"
RAY_DECLINE = Declined(
    "Ray counts a pod's GPUs by its resource keys ending in gpu: on nvidia.com/gpu.shared "
    "(or a MIG slice) KubeRay and the Ray autoscaler see no GPU on its workers, so GPU tasks "
    "never land there and autoscaling breaks; share through Ray instead (num_gpus fractions "
    "on the tasks and actors)"
)


def _is_ray(ctx: Context) -> bool:
    return group_of(ctx.document.api_version) == RAY_GROUP


GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"


def _gke_share(
    ctx: Context, template: Any, need_mib: float | None, model: gpus.GpuModel | None, observed: str
) -> Proposal:
    """On GKE the resource stays nvidia.com/gpu: sharing is a node-pool
    setting the pod selects with two node labels (gpu-domain.md §6)."""
    clients, confidence = 2, "needs confirmation"
    if need_mib and model is not None:
        fit = sizing.replicas_that_fit(sizing.model_memory_mib(model), [need_mib])
        clients, confidence = sizing.clamp(fit, 2, 8), "measured"
        basis = (
            f"{observed}; with headroom {need_mib:,.0f} MiB, so {fit} such workloads fit in one "
            f"{model.model}: max-shared-clients-per-gpu {clients} (kept within 2..8). "
        )
    else:
        basis = (
            "No GPU telemetry with a known GPU model: 2 clients per GPU, a static suggestion to "
            "confirm against its peak GPU memory (time-sharing does not isolate memory). "
        )
    basis += (
        "GKE (site platform gke) shares GPUs per node pool; the resource stays nvidia.com/gpu, "
        "and the pod selects the pool by its sharing labels."
    )
    params = {
        **identity(ctx),
        "spec_pointer": template.pointer,
        "strategy_label": GKE_SHARING,
        "clients_label": GKE_CLIENTS,
        "clients": str(clients),
        "clients_count": clients,
        "accelerator": (ctx.template.spec.get("nodeSelector") or {}).get("cloud.google.com/gke-accelerator")
        if ctx.template is not None and isinstance(ctx.template.spec.get("nodeSelector"), dict)
        else None,
    }
    params["accelerator"] = params["accelerator"] or "ACCELERATOR"
    return Proposal("gke", params, basis, confidence, f"{template.pointer}#gke-sharing")


# Node labels that put a pod on a pool whose GPUs are already shared: there
# its nvidia.com/gpu is a replica, and a .shared name may not exist at all.
_SHARED_POOL_LABELS = (
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/device-plugin.config",
    "nvidia.com/gpu.replicas",
    "cloud.google.com/gke-gpu-sharing-strategy",
    "cloud.google.com/gke-max-shared-clients-per-gpu",
)


def _shared_pool(spec: Any) -> str | None:
    """The selector that pins the pod to a shared-GPU pool, if any."""
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    for key in _SHARED_POOL_LABELS:
        if key in selector and str(selector[key]) not in ("none", "1"):
            return f"{key}={selector[key]}"
    required = pointers.get(spec, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
    for term in (required or {}).get("nodeSelectorTerms") or [] if isinstance(required, dict) else []:
        for expr in term.get("matchExpressions") or [] if isinstance(term, dict) else []:
            if isinstance(expr, dict) and expr.get("key") in _SHARED_POOL_LABELS and expr.get("operator") == "In":
                values = [str(v) for v in expr.get("values") or [] if str(v) not in ("none", "1")]
                if values:
                    return f"{expr['key']} in {values}"
    return None


def move_to_shared_gpu(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    if _is_ray(ctx):
        return RAY_DECLINE
    pool = _shared_pool(template.spec)
    if pool is not None:
        return Declined(
            f"it runs on a pool whose GPUs are already shared (node selector {pool}): there its "
            "nvidia.com/gpu is already a replica, and a renamed resource would strand it"
        )
    holders = [c for c in template.containers if any(r.mode == "whole" for r in c.gpus)]
    if not holders:
        return Declined("no container requests whole GPUs")
    for c in holders:
        tool = reservations.stress_test(c)
        if tool:
            return Declined(
                f"container {c.name} runs {tool}, a stress test: it keeps the whole GPU busy on purpose, "
                "and a GPU shared with it starves every other tenant"
            )
    containers = []
    for c in holders:
        whole = [r for r in c.gpus if r.mode == "whole"]
        if any(r.resource != NVIDIA_GPU for r in whole):
            names = ", ".join(sorted({r.resource for r in whole}))
            return Declined(f"container {c.name} requests {names}: only NVIDIA shares are known")
        count = sum(r.count or 0 for r in whole)
        if any(r.count is None for r in whole):
            return Declined(f"container {c.name}: the GPU count is not a number")
        if count != 1:
            return Declined(
                f"container {c.name} uses {count:g} GPUs in one pod (model or data "
                "parallel): a share of one GPU cannot replace them; right-size it by hand"
            )
        request = next(r for r in whole)
        containers.append(
            {
                "name": c.name,
                "resources_pointer": c.resources_pointer,
                "request": 1 if request.request is not None else None,
            }
        )
    # The patch resizes every replica: size it from the peak over all the
    # owner's pods (this finding's pod is one of them) where the run has it.
    seen = ctx.run.evidence_for(ctx.document)
    over_pods = seen is not None and seen.telemetry is not None
    telemetry = seen.telemetry if seen is not None and seen.telemetry is not None else ctx.pod_facts.telemetry
    if telemetry is not None:
        peak, window, compute = telemetry.fb_used_max_mib, telemetry.window_seconds, telemetry.compute_p95
    else:
        peak = window = compute = None
    unadvertised = _unadvertised(ctx)
    headroom = float(ctx.params["headroom"])
    model, model_source = _gpu_model(ctx)
    pods = _replicas(template)
    shared = str(ctx.params["shared_resource"])
    unmeasured = _unmeasured(ctx, seen)
    if unmeasured is not None:
        return unmeasured
    if ctx.run.cluster and not peak:
        return Declined(
            "its pods used no GPU memory over the telemetry window (not running, or crash-looping): "
            "the measurement says nothing of what it needs once it runs; see why it does not run first"
        )
    if ctx.run.cluster and model is None:
        return Declined(
            f"its pods ran on no single known GPU model ({model_source}): the measured fit cannot be "
            "checked against a GPU's memory"
        )
    reserved = next(
        ((c, r) for c in holders if (r := reservations.memory_reservation(c, _runtime_name(ctx))) is not None), None
    )
    mig_possible = model is not None and model.mig_capable and ctx.params["prefer"] == "mig"
    if reserved is not None and (not mig_possible or ctx.run.platform == "gke"):
        c, r = reserved
        return Declined(
            f"container {c.name}: {r.describe()}, for its KV cache: on a time-sliced or MPS GPU, whose memory "
            "is not isolated, a second tenant fails with out-of-memory. Only a MIG slice (its memory its own) "
            "can hold it, sized from its peak memory"
        )
    if ctx.run.platform == "gke":
        fits = sizing.with_headroom(float(peak), headroom) if isinstance(peak, (int, float)) and peak > 0 else None
        if (
            fits is not None
            and model is not None
            and sizing.replicas_that_fit(sizing.model_memory_mib(model), [fits]) < 2
        ):
            return Declined(
                f"peak VRAM {peak:,.0f} MiB + headroom leaves no room for a second workload on a {model.model}"
            )
        observed = f"Telemetry: peak VRAM {peak:,.0f} MiB" if fits is not None else ""
        return _gke_share(ctx, template, fits, model, observed)
    common = {
        **identity(ctx),
        "containers": containers,
        "headroom_percent": headroom * 100,
        "advertised_by": _advertiser(ctx, shared),
    }

    if isinstance(peak, (int, float)) and peak > 0:
        need = sizing.with_headroom(float(peak), headroom)
        observed = f"peak VRAM {peak:,.0f} MiB" + (
            f" over {window / 3600:,.0f} h" if isinstance(window, (int, float)) else ""
        )
        if over_pods:
            observed += f" ({seen.describe(ctx.run.evidence_source)})"
        compute = float(compute) if isinstance(compute, (int, float)) else None
        if model is not None and model.mig_capable and ctx.params["prefer"] == "mig":
            choice = sizing.smallest_mig_profile(model, need, compute)
            if choice is None or choice.whole_gpu:
                return Declined(
                    f"{observed} + {headroom:.0%} headroom"
                    + (f" and p95 compute {compute:.0%} of a GPU" if compute is not None else "")
                    + f" needs the whole {model.model}: no smaller MIG slice fits"
                    + (
                        f" (container {reserved[0].name}: {reserved[1].describe()}: the peak is that reservation, "
                        "not the model's need; a smaller setting would let a slice hold it)"
                        if reserved is not None
                        else ""
                    )
                )
            resource = f"nvidia.com/mig-{choice.profile}"
            if ctx.run.coherence is not None and resource not in ctx.run.advertised:
                nodes = ", ".join(seen.nodes) if seen is not None and seen.nodes else "the nodes of that GPU model"
                return Declined(
                    f"it would fit a {choice.profile} MIG slice ({observed}), but nothing partitions a GPU "
                    f"into {choice.profile} slices: first give {nodes} a MIG layout with them (GPU Operator "
                    f"ClusterPolicy mig.strategy: mixed, then kubectl label node NODE "
                    f"nvidia.com/mig.config=all-{choice.profile}), then move it"
                )
            if compute is None:
                return Declined(
                    f"{observed} fits a {choice.profile} MIG slice by memory, but no compute telemetry "
                    f"says whether {choice.slices}/{choice.of} of a {model.model} keeps up with its load"
                )
            basis = (
                f"Telemetry: {observed}, p95 compute {compute:.0%} of a GPU; with {headroom:.0%} headroom "
                f"{need:,.0f} MiB. GPU: {model.model} (from {model_source}). Smallest MIG profile with at "
                f"least that much memory and compute: {choice.profile} (~{choice.memory_mib:,.0f} MiB, "
                f"{choice.slices}/{choice.of} of the GPU's compute). Advertised by: "
                f"{ctx.run.advertised.get(resource, 'the nodes (no coherence check)')}."
            )
            share = SharePlan(pods, resource, need, model, choice.profile, compute)
            return Proposal(
                "mig",
                {
                    **common,
                    "resource": resource,
                    "profile": choice.profile,
                    "advertised_by": ctx.run.advertised.get(resource) or "the site's MIG layout",
                },
                basis,
                "measured",
                template.pointer,
                share,
            )
        if model is not None:
            fit = sizing.replicas_that_fit(sizing.model_memory_mib(model), [need])
            if fit < 2:
                return Declined(
                    f"{observed} + {headroom:.0%} headroom leaves no room for a second workload on a {model.model}"
                )
        if unadvertised:
            if ctx.run.cluster and model is not None:
                owner = f"{ctx.document.kind} {ctx.document.namespace}/{ctx.document.name}"
                if all(c.owner != owner for c in ctx.run.candidates):
                    ctx.run.candidates.append(SharePlan(pods, shared, need, model, None, compute, owner))
            return Declined(unadvertised)
        if model is not None:
            basis = (
                f"Telemetry: {observed}; with {headroom:.0%} headroom {need:,.0f} MiB, so {fit} "
                f"such workloads fit in one {model.model} (from {model_source}). "
                "Time-slicing does not isolate memory: the fit is what keeps them apart."
            )
            confidence: Confidence = "measured"
        else:
            basis = (
                f"Telemetry: {observed}; GPU model {model_source}, so the fit on the GPU "
                "cannot be checked: confirm before merging."
            )
            confidence = "needs confirmation"
        share = SharePlan(pods, shared, need, model, None, compute)
    else:
        if unadvertised:
            return Declined(unadvertised)
        basis = (
            "No GPU telemetry for this workload: a static suggestion that needs "
            "confirmation. Check its peak GPU memory before merging; with telemetry "
            "(gpuaudit fix PATH --snapshot FILE --prometheus URL) it sizes a MIG slice instead. "
            f"GPU model: {model_source if model is None else model.model}."
        )
        confidence = "needs confirmation"
        share = SharePlan(pods, shared, None, model, None)
    return Proposal(
        None,
        {**common, "resource": shared, "profile": None},
        basis,
        confidence,
        template.pointer,
        share,
    )


def _runtime_name(ctx: Context) -> str:
    """A KServe serving runtime's name on the object (it names a NIM's model
    and version: nvidia-nim-llama-3.1-8b-instruct-1.1.0)."""
    spec = ctx.document.obj.get("spec")
    predictor = spec.get("predictor") if isinstance(spec, dict) else None
    model = predictor.get("model") if isinstance(predictor, dict) else None
    runtime = model.get("runtime") if isinstance(model, dict) else None
    return runtime if isinstance(runtime, str) else ""


def _unmeasured(ctx: Context, seen: Any) -> Declined | None:
    """From a cluster, a share needs measured fit: the peak memory and
    compute of every pod that holds its GPUs, over the telemetry window.
    Without it, which telemetry would decide. Manifests alone (no cluster
    read) keep the static suggestion, marked needs confirmation."""
    if not ctx.run.cluster or (seen is not None and seen.covers):
        return None
    window = ctx.run.telemetry_window
    over = f"over the telemetry window ({window})" if window else "over a window (the snapshot holds no telemetry)"
    if seen is None or not seen.held:
        whose = "no pod of it holds a GPU in the snapshot"
    else:
        missing = seen.unmeasured or seen.pods
        listed = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        whose = f"no telemetry covers {len(missing)} of its {seen.held} GPU pod(s) ({listed})"
    signal = "DCGM_FI_PROF_GR_ENGINE_ACTIVE (or DCGM_FI_DEV_GPU_UTIL)"
    return Declined(
        f"a move to a shared GPU needs measured fit, and {whose}: DCGM_FI_DEV_FB_USED (peak memory) and "
        f"{signal} (compute) for its pods {over} decide whether they fit a share; run gpuaudit fix "
        "--snapshot FILE --prometheus URL with a window that covers them"
    )


def _replicas(template: PodTemplate | None) -> int:
    """Pods of the template the change resizes (1 when it does not say; the
    pod facts' replicas are the same template's, read before any change)."""
    replicas = template.replicas if template is not None else None
    return int(replicas if replicas is not None else 1)


def _advertiser(ctx: Context, resource: str) -> str:
    return ctx.run.advertised.get(resource) or "the device plugin's sharing config (none found in the inputs)"


def _unadvertised(ctx: Context) -> str | None:
    """Why the shared resource cannot be requested: the input's device-plugin
    configs (or the site) say which `.shared` names exist, and it is not one;
    or, with the coherence check, nothing in the overlay, the inputs, the site
    or the snapshot advertises it."""
    shared = str(ctx.params["shared_resource"])
    if ctx.run.platform == "gke":
        return (
            f"on GKE (site platform gke) the resource stays nvidia.com/gpu: {shared} is never "
            "advertised there; sharing is a node-pool setting (cloud.google.com/gke-gpu-sharing-strategy)"
        )
    if ctx.run.coherence is not None and shared in ctx.run.advertised:
        return None
    if ctx.run.coherence is not None and ctx.run.shared_names is None:
        return (
            f"nothing advertises {shared}: no device-plugin config in this overlay or the inputs "
            "renames GPUs to it (time-slicing or MPS with renameByDefault), the site config names no "
            "shared_resource and no node of the snapshot offers it; add the sharing config (or pass "
            "its manifest, or set site shared_resource) and run gpuaudit fix again"
        )
    known = ctx.run.shared_names
    if known is None or shared in known:
        return None
    said = ", ".join(sorted(known)) if known else "no .shared name (they keep nvidia.com/gpu)"
    return (
        f"the device-plugin configs in this input advertise {said}, not {shared}: on nodes "
        "with a time-slicing config this workload shares already; point it at those nodes, "
        "or set --set shared_resource=NAME to what the nodes advertise"
    )


# --- GPU counts and fields the API server rejects -------------------------------------


def _gpu_raw(ctx: Context, c: Container, section: str, resource: str) -> Any:
    return pointers.get(ctx.document.obj, pointers.join(c.resources_pointer, section, resource))


def gpu_requests_equal_limits(ctx: Context, c: Container) -> Proposal | Declined:
    fixes = [
        {
            "name": r.resource,
            "value": same_type(_gpu_raw(ctx, c, "requests", r.resource), _gpu_raw(ctx, c, "limits", r.resource)),
        }
        for r in c.gpus
        if r.request is not None and r.limit is not None and r.request != r.limit
    ]
    if not fixes:
        return Declined("requests and limits already agree")
    params = {
        **identity(ctx),
        "requests_pointer": pointers.join(c.resources_pointer, "requests"),
        "resources": fixes,
    }
    shown = ", ".join(f"{f['name']}={f['value']}" for f in fixes)
    basis = f"The device plugin allocates the limit, so the request follows it: {shown}."
    return Proposal(None, params, basis, "static", f"{c.pointer}#gpu-requests")


def gpu_limits_from_requests(ctx: Context, c: Container) -> Proposal | Declined:
    fixes = [
        {"name": r.resource, "value": _gpu_raw(ctx, c, "requests", r.resource)}
        for r in c.gpus
        if r.request is not None and r.limit is None and r.mode != "dra"
    ]
    if not fixes:
        return Declined("every GPU request already has a limit")
    params = {
        **identity(ctx),
        "limits_pointer": pointers.join(c.resources_pointer, "limits"),
        "resources": fixes,
    }
    shown = ", ".join(f"{f['name']}={f['value']}" for f in fixes)
    basis = f"Limits copy the requested counts ({shown}); the requests stay, equal to them."
    return Proposal(None, params, basis, "static", f"{c.pointer}#gpu-limits")


def whole_gpu_quantity(ctx: Context, c: Container) -> Proposal | Declined:
    fractional = [r for r in c.gpus if r.mode == "whole" and r.count is not None and r.count != int(r.count)]
    if not fractional:
        return Declined("no fractional whole-GPU count")
    if any(r.resource != NVIDIA_GPU for r in fractional):
        return Declined("only nvidia.com/gpu has a known shared resource")
    if _is_ray(ctx):
        return RAY_DECLINE
    shared = str(ctx.params["shared_resource"])
    unadvertised = _unadvertised(ctx)
    if unadvertised:
        return Declined(unadvertised)
    request = next(r for r in fractional)
    params = {
        **identity(ctx),
        "resources_pointer": c.resources_pointer,
        "fraction": request.count,
        "resource": shared,
        "request": 1 if request.request is not None else None,
        "advertised_by": _advertiser(ctx, shared),
    }
    basis = (
        f"{request.count:g} of nvidia.com/gpu is not a count the API server accepts; one "
        f"{shared} replica is the share the site advertises (setting shared_resource)."
    )
    return Proposal(None, params, basis, "needs confirmation", f"{c.pointer}#fraction")


def drop_init_container_gpus(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    gpu = ctx.pod_facts.gpu
    main = gpu.main_count or 0
    if not main:
        return _move_init_gpus(ctx, template)
    changes = []
    for c in template.init_containers:
        for r in c.gpus:
            if r.mode == "dra" or r.count is None or r.count <= main:
                continue
            value = int(main) if main else None
            raw = {
                section: pointers.get(ctx.document.obj, pointers.join(c.resources_pointer, section, r.resource))
                for section in ("limits", "requests")
            }
            changes.append(
                {
                    "name": c.name,
                    "resources_pointer": c.resources_pointer,
                    "resource": r.resource,
                    "limit": same_type(raw["limits"], value) if r.limit is not None else None,
                    "request": same_type(raw["requests"], value) if r.request is not None else None,
                }
            )
    if not changes:
        return Declined("no initContainer asks for more GPUs than the app containers")
    what = f"{main:g} (what the app containers use)" if main else "none"
    basis = (
        f"initContainers run before the app containers and their GPUs are reserved for the "
        f"pod's whole life: their GPU requests become {what}."
    )
    params = {**identity(ctx), "containers": changes}
    frees = float(gpu.init_excess or 0) * _replicas(template)
    return Proposal(
        None, params, basis, "static", f"{template.pointer}#init-gpus", lowers=frozenset({"gpu"}), frees_gpus=frees
    )


def _move_init_gpus(ctx: Context, template: Any) -> Declined:
    """The initContainers hold the pod's only GPUs: dropping them would leave
    the app containers without one. Whether the server computes on the GPU
    decides the fix, and the manifest does not say."""
    held = sorted(
        {f"{c.name} ({r.resource}: {r.count:g})" for c in template.init_containers for r in c.gpus if r.count}
    )
    apps = ", ".join(c.name for c in template.containers) or "none"
    return Declined(
        f"the initContainers {', '.join(held) or ''} hold the pod's only GPU request and the app "
        f"containers ({apps}) none: dropping it would leave the server without a GPU. If the app "
        "container computes on the GPU, move the request to it (the pod keeps the same GPUs: the "
        "kubelet hands init containers' devices on); if not, drop it by hand"
    )


_RAY_POD_TEMPLATE = "/template/spec"  # a Ray group's pod spec, below the group


def drop_ray_head_gpus(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    if not template.pointer.endswith(_RAY_POD_TEMPLATE):
        return Declined("the head's pod spec is not where a Ray head group keeps it (template.spec)")
    if template.extra_gpus:
        return Declined("the head's GPUs come from a claim or a scheduler annotation: not a resource to drop")
    changes = []
    for c in template.containers:
        for r in c.gpus:
            if r.count is None:
                return Declined(f"container {c.name}'s GPU count is not a number")
            changes.append({"resources_pointer": c.resources_pointer, "resource": r.resource})
    if not changes:
        return Declined("no container of the head requests a GPU resource")
    basis = (
        "The worker groups request GPUs of their own: GPU tasks and actors run there, and the "
        'head keeps the control plane and the drivers, with num-gpus "0" so Ray schedules no GPU work on it.'
    )
    params = {
        **identity(ctx),
        "group_pointer": template.pointer.removesuffix(_RAY_POD_TEMPLATE),
        "containers": changes,
        "workers": ctx.pod_facts.other_gpu_roles or [],
    }
    held = sum(float(r.count or 0) for c in template.containers for r in c.gpus)
    return Proposal(
        None,
        params,
        basis,
        "static",
        f"{template.pointer}#ray-head-gpus",
        lowers=frozenset({"gpu", "pod-gpu"}),
        frees_gpus=held * int(template.replicas or 1),
    )


def match_gpus_to_parallelism(ctx: Context, c: Container) -> Proposal | Declined:
    if _is_ray(ctx):
        return Declined(
            "a Ray worker's GPUs are Ray's pool: Ray Serve and Ray Train place several replicas or "
            "workers (each with its own parallelism) on them, which the container's arguments do "
            "not show; size the group from the Serve or Train config by hand"
        )
    parallelism = ctx.container_facts.parallelism
    if parallelism is not None and parallelism.default_of:
        return Declined(
            f"{parallelism.default_of} sets no parallelism, so it uses one GPU: a model that needs the GPUs "
            "wants --tensor-parallel-size instead of fewer GPUs; which is right depends on the model's size"
        )
    total = parallelism.total if parallelism is not None else None
    whole = [r for r in c.gpus if r.mode == "whole"]
    if parallelism is None or total is None or total < 1 or len(whole) != 1:
        return Declined("needs one whole-GPU resource and a known parallelism")
    r = whole[0]
    if r.count is None or total >= r.count:
        return Declined("the parallelism already uses every GPU")
    params = {
        **identity(ctx),
        "resources_pointer": c.resources_pointer,
        "resource": r.resource,
        "count": int(total),
        "limit": same_type(_gpu_raw(ctx, c, "limits", r.resource), int(total)) if r.limit is not None else None,
        "request": same_type(_gpu_raw(ctx, c, "requests", r.resource), int(total)) if r.request is not None else None,
    }
    basis = (
        f"The container's arguments declare parallelism {int(total)} ({parallelism.said}); it holds {r.count:g} GPUs."
    )
    basis += " Lowering the GPU count is this change's purpose."
    frees = (r.count - int(total)) * _replicas(ctx.template)
    return Proposal(
        None, params, basis, "static", f"{c.pointer}#gpu-count", lowers=frozenset({"gpu"}), frees_gpus=frees
    )


def drop_visible_devices_env(ctx: Context, c: Container) -> Proposal | Declined:
    if "NVIDIA_VISIBLE_DEVICES" not in c.env:
        return Declined("the container no longer sets NVIDIA_VISIBLE_DEVICES")
    params = {
        **identity(ctx),
        "container_pointer": c.pointer,
        "value": c.env["NVIDIA_VISIBLE_DEVICES"],
    }
    basis = (
        f"NVIDIA_VISIBLE_DEVICES={c.env['NVIDIA_VISIBLE_DEVICES']} set by hand; the device "
        "plugin sets it to the GPUs the pod was allocated."
    )
    return Proposal(None, params, basis, "static", f"{c.pointer}#visible-devices")
