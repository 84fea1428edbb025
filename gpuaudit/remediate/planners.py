"""Planners: one per remediation id. Each reads the finding's facts and the
object's pod templates, and decides the template parameters (and which
evidence chose them), or declines with the reason a reviewer should see.
Pure: no IO beyond the packaged data tables."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

from gpuaudit import gpus
from gpuaudit.model import Container, Document, Finding, PodTemplate
from gpuaudit.remediate import pointers, sizing
from gpuaudit.workloads import group_of

HOSTNAME_LABEL = "kubernetes.io/hostname"
REMEDIATED = "gpuaudit.io/remediated"
NVIDIA_GPU = "nvidia.com/gpu"

Confidence = Literal["measured", "static", "needs confirmation"]


@dataclass(frozen=True)
class SharePlan:
    """A workload that a move-to-shared-gpu proposal puts on a share; the
    sharing planner sizes the device-plugin config from these."""

    pods: int
    resource: str
    need_mib: float | None
    model: gpus.GpuModel | None
    mig_profile: str | None


@dataclass
class RunState:
    """What planners learn from each other within one run."""

    sharers: list[SharePlan] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    finding: Finding
    facts: Mapping[str, Any]
    document: Document
    template: PodTemplate | None  # pod and container findings
    container: Container | None  # container findings
    params: Mapping[str, Any]
    run: RunState


@dataclass(frozen=True)
class Proposal:
    variant: str | None
    params: dict[str, Any]
    basis: str  # how the parameters were chosen, for REVIEW.md
    confidence: Confidence
    scope: str  # what the change touches: two findings with the same scope share one patch
    share: SharePlan | None = None


@dataclass(frozen=True)
class Declined:
    reason: str


Planner = Callable[[Context], "Proposal | Declined"]
PLANNERS: dict[str, Planner] = {}


def planner(remediation: str) -> Callable[[Planner], Planner]:
    def register(func: Planner) -> Planner:
        PLANNERS[remediation] = func
        return func

    return register


def _identity(ctx: Context) -> dict[str, Any]:
    doc = ctx.document
    return {
        "kind": doc.kind,
        "name": doc.name,
        "namespace": doc.namespace,
        "role": ctx.template.role if ctx.template else None,
        "container": ctx.container.name if ctx.container else None,
    }


def _needs_template(ctx: Context) -> PodTemplate | Declined:
    if ctx.template is None:
        return Declined("the finding names no pod template of this object")
    return ctx.template


# --- allocation: whole GPU -> a share ------------------------------------------------


def _gpu_model(ctx: Context) -> tuple[gpus.GpuModel | None, str]:
    """The GPU model the workload runs on, and where that came from."""
    placement = ctx.facts.get("placement") or {}
    product = placement.get("gpu_product") or {}
    named = product.get("model")
    source = f"its {product.get('label')} selector" if named else ""
    if not named and ctx.params.get("gpu_model"):
        named, source = ctx.params["gpu_model"], "the gpu_model setting"
    if not named:
        return None, "unknown (no GPU product selector; set --set gpu_model=MODEL)"
    model = gpus.lookup(str(named))
    return model, source if model else f"unknown ({named!r} is not in the GPU catalogue)"


@planner("move-to-shared-gpu")
def move_to_shared_gpu(ctx: Context) -> Proposal | Declined:
    template = _needs_template(ctx)
    if isinstance(template, Declined):
        return template
    holders = [c for c in template.containers if any(r.mode == "whole" for r in c.gpus)]
    if not holders:
        return Declined("no container requests whole GPUs")
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
    telemetry = ctx.facts.get("telemetry") or {}
    peak = telemetry.get("fb_used_max_mib")
    headroom = float(ctx.params["headroom"])
    model, model_source = _gpu_model(ctx)
    pods = int(ctx.facts.get("replicas") or 1)
    shared = str(ctx.params["shared_resource"])
    common = {**_identity(ctx), "containers": containers, "headroom_percent": headroom * 100}

    if isinstance(peak, (int, float)) and peak > 0:
        need = sizing.with_headroom(float(peak), headroom)
        window = telemetry.get("window_seconds")
        seen = f"peak VRAM {peak:,.0f} MiB" + (
            f" over {window / 3600:,.0f} h" if isinstance(window, (int, float)) else ""
        )
        if model is not None and model.mig_capable and ctx.params["prefer"] == "mig":
            choice = sizing.smallest_mig_profile(model, need)
            if choice is None or choice.whole_gpu:
                return Declined(
                    f"{seen} + {headroom:.0%} headroom needs the whole {model.model}: "
                    "no smaller share fits"
                )
            resource = f"nvidia.com/mig-{choice.profile}"
            basis = (
                f"Telemetry: {seen}; with {headroom:.0%} headroom {need:,.0f} MiB. "
                f"GPU: {model.model} (from {model_source}). Smallest MIG profile with at least "
                f"that much memory: {choice.profile} (~{choice.memory_mib:,.0f} MiB)."
            )
            share = SharePlan(pods, resource, need, model, choice.profile)
            return Proposal(
                "mig",
                {**common, "resource": resource, "profile": choice.profile},
                basis,
                "measured",
                template.pointer,
                share,
            )
        if model is not None:
            fit = sizing.replicas_that_fit(sizing.model_memory_mib(model), [need])
            if fit < 2:
                return Declined(
                    f"{seen} + {headroom:.0%} headroom leaves no room for a second "
                    f"workload on a {model.model}"
                )
            basis = (
                f"Telemetry: {seen}; with {headroom:.0%} headroom {need:,.0f} MiB, so {fit} "
                f"such workloads fit in one {model.model} (from {model_source}). "
                "Time-slicing does not isolate memory: the fit is what keeps them apart."
            )
            confidence: Confidence = "measured"
        else:
            basis = (
                f"Telemetry: {seen}; GPU model {model_source}, so the fit on the GPU "
                "cannot be checked: confirm before merging."
            )
            confidence = "needs confirmation"
        share = SharePlan(pods, shared, need, model, None)
    else:
        basis = (
            "No GPU telemetry for this workload: a static suggestion that needs "
            "confirmation. Check its peak GPU memory (gpuaudit audit --prometheus URL) "
            f"before merging; with telemetry, gpuaudit fix sizes a MIG slice instead. "
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


# --- placement -----------------------------------------------------------------------


def _remaining_required(spec: Mapping[str, Any], drop: Callable[[Mapping[str, Any]], bool]) -> Any:
    """Required node affinity without the expressions ``drop`` matches: a
    mapping to write, or None when nothing is left (a term that loses all its
    expressions admits every node, and terms are ORed, so the whole
    requirement goes)."""
    required = pointers.get(
        spec, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (required or {}).get("nodeSelectorTerms") or []
    kept_terms = []
    for term in terms:
        kept = {}
        for key in ("matchExpressions", "matchFields"):
            exprs = [e for e in term.get(key) or [] if not (key == "matchExpressions" and drop(e))]
            if exprs:
                kept[key] = exprs
        if not kept:
            return None
        kept_terms.append(kept)
    return {**copy.deepcopy(required), "nodeSelectorTerms": kept_terms}


def _preferred(label: str, values: Sequence[str], weight: int) -> list[dict[str, Any]]:
    return [
        {
            "weight": int(weight),
            "preference": {
                "matchExpressions": [{"key": label, "operator": "In", "values": list(values)}]
            },
        }
    ]


@planner("drop-hostname-pin")
def drop_hostname_pin(ctx: Context) -> Proposal | Declined:
    template = _needs_template(ctx)
    if isinstance(template, Declined):
        return template
    placement = ctx.facts.get("placement") or {}
    node, by = placement.get("pinned_node"), placement.get("pinned_by")
    if not node or by not in ("nodeName", "nodeSelector", "affinity"):
        return Declined("the facts name no hostname pin")
    spec_ptr = template.pointer
    keep = bool(ctx.params["prefer_former_node"])
    params = {
        **_identity(ctx),
        "node": node,
        "spec_pointer": spec_ptr,
        "selector_pointer": f"{spec_ptr}/nodeSelector",
        "node_affinity_pointer": f"{spec_ptr}/affinity/nodeAffinity",
        "preferred": _preferred(HOSTNAME_LABEL, [node], ctx.params["weight"]) if keep else [],
    }
    variant = {"nodeName": "node-name", "nodeSelector": None, "affinity": "affinity"}[by]
    if by == "affinity":
        params["required"] = _remaining_required(
            template.spec, lambda e: e.get("key") == HOSTNAME_LABEL
        )
    basis = f"Pinned to {node} by {by}." + (
        f" A preferred affinity (weight {ctx.params['weight']}) keeps it on {node} "
        "when that node has room."
        if keep
        else ""
    )
    return Proposal(variant, params, basis, "static", f"{spec_ptr}#hostname")


@planner("prefer-product-affinity")
def prefer_product_affinity(ctx: Context) -> Proposal | Declined:
    template = _needs_template(ctx)
    if isinstance(template, Declined):
        return template
    product = (ctx.facts.get("placement") or {}).get("gpu_product") or {}
    label, values, by = product.get("label"), product.get("values"), product.get("by")
    if not label or not values or by not in ("nodeSelector", "affinity"):
        return Declined("the facts name no required GPU product selector")
    spec_ptr = template.pointer
    params = {
        **_identity(ctx),
        "label": label,
        "values": list(values),
        "spec_pointer": spec_ptr,
        "selector_pointer": f"{spec_ptr}/nodeSelector",
        "node_affinity_pointer": f"{spec_ptr}/affinity/nodeAffinity",
        "preferred": _preferred(label, values, ctx.params["weight"]),
    }
    if by == "affinity":
        params["required"] = _remaining_required(template.spec, lambda e: e.get("key") == label)
    memory = product.get("memory_gib")
    basis = (
        f"Required {label} in {list(values)} becomes a preference (weight "
        f"{ctx.params['weight']})."
        + (f" The pinned GPU has {memory:g} GiB; smaller GPUs become eligible." if memory else "")
    )
    variant = None if by == "nodeSelector" else "affinity"
    return Proposal(variant, params, basis, "static", f"{spec_ptr}#product")


def _toleration_for(taint: Mapping[str, Any]) -> dict[str, Any]:
    toleration: dict[str, Any] = {"key": str(taint["key"])}
    if taint.get("value") not in (None, ""):
        toleration.update(operator="Equal", value=str(taint["value"]))
    else:
        toleration["operator"] = "Exists"
    if taint.get("effect"):
        toleration["effect"] = str(taint["effect"])
    return toleration


def tolerated(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' rules)."""
    for t in tolerations:
        if t.get("effect") and taint.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or str(t.get("value", "")) == str(
            taint.get("value") or ""
        ):
            return True
    return False


@planner("add-gpu-toleration")
def add_gpu_toleration(ctx: Context) -> Proposal | Declined:
    template = _needs_template(ctx)
    if isinstance(template, Declined):
        return template
    taints = ctx.params.get("gpu_taints") or []
    existing = [t for t in template.spec.get("tolerations") or [] if isinstance(t, Mapping)]
    missing = [_toleration_for(t) for t in taints if not tolerated(existing, t)]
    if not missing:
        return Declined("the pod already tolerates the site's GPU taints")
    shown = ", ".join(
        f"{t['key']}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect', '*')}"
        for t in taints
    )
    params = {**_identity(ctx), "spec_pointer": template.pointer, "tolerations": missing}
    basis = f"GPU node taints: {shown} (site setting gpu_taints)."
    return Proposal(None, params, basis, "static", f"{template.pointer}#tolerations")


# --- application -----------------------------------------------------------------------


@planner("cpu-request-per-gpu")
def cpu_request_per_gpu(ctx: Context) -> Proposal | Declined:
    c = ctx.container
    if c is None:
        return Declined("the finding names no container")
    gpu_count = (ctx.facts.get("gpu") or {}).get("count")
    if not isinstance(gpu_count, (int, float)) or gpu_count <= 0:
        return Declined("the GPU count is unknown")
    per_gpu = float(ctx.params["min_cpu_per_gpu"])
    cores = sizing.cpu_cores_for(gpu_count, per_gpu)
    params = {
        **_identity(ctx),
        "resources_pointer": c.resources_pointer,
        "cpu": str(cores),
        "cores": cores,
    }
    now = f"{c.cpu_request:g} requested now" if c.cpu_request else "no CPU request now"
    basis = (
        f"{gpu_count:g} GPU(s) x {per_gpu:g} cores per GPU (rule param min_cpu_per_gpu) "
        f"= {cores} cores; {now}."
    )
    variant = None
    if c.cpu_limit is not None and c.cpu_limit < cores:
        variant = "with-limit"
        basis += f" The CPU limit ({c.cpu_limit:g}) is raised too: a request above it is invalid."
    return Proposal(variant, params, basis, "static", c.pointer)


@planner("add-dev-shm")
def add_dev_shm(ctx: Context) -> Proposal | Declined:
    template = _needs_template(ctx)
    if isinstance(template, Declined):
        return template
    spec = template.spec
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    gpu_users = [c for c in template.containers if c.gpus] or list(template.containers)
    from gpuaudit.quantity import QuantityError, parse_quantity

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
    common = {**_identity(ctx), "spec_pointer": template.pointer, "size_limit": size_text}
    mounted = [
        (c, name)
        for c in template.containers
        for name, path in c.volume_mounts.items()
        if path.rstrip("/") == "/dev/shm"
    ]
    if mounted:
        name = mounted[0][1]
        index = next(
            (i for i, v in enumerate(spec.get("volumes") or []) if v.get("name") == name), None
        )
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


# --- batch lifecycle ---------------------------------------------------------------------


@cache
def lifecycle_table() -> dict[tuple[str, str], Mapping[str, Any]]:
    text = resources.files("gpuaudit").joinpath("data/batch_lifecycle.yaml").read_text()
    table = {}
    for entry in yaml.safe_load(text):
        kinds = entry["kind"] if isinstance(entry["kind"], list) else [entry["kind"]]
        for kind in kinds:
            for group in entry["groups"]:
                table[(group, kind)] = entry
    return table


@planner("batch-lifecycle")
def batch_lifecycle(ctx: Context) -> Proposal | Declined:
    doc = ctx.document
    entry = lifecycle_table().get((group_of(doc.api_version), doc.kind))
    if entry is None:
        return Declined(f"no known lifecycle fields for {doc.api_version} {doc.kind}")
    fields = []
    set_now = []
    wanted = [("ttl", "ttl_seconds_after_finished"), ("deadline", "active_deadline_seconds")]
    for slot, param in wanted:
        pointer, value = entry.get(slot), ctx.params.get(param)
        if not pointer or value is None:
            continue
        if pointers.get(doc.obj, pointer) is not None:
            set_now.append(pointer)
            continue
        parent, _, leaf = pointer.rpartition("/")
        fields.append({"parent": parent, "field": pointers.tokens("/" + leaf)[0], "value": value})
        if slot == "ttl":
            for extra, extra_value in (entry.get("ttl_requires") or {}).items():
                if pointers.get(doc.obj, extra) != extra_value:
                    p, _, f = extra.rpartition("/")
                    fields.append({"parent": p, "field": f, "value": extra_value})
    if not fields:
        return Declined("its lifecycle fields are already set (or disabled by params)")
    params = {**_identity(ctx), "fields": fields}
    named = ", ".join(f"{f['field']}={f['value']}" for f in fields)
    basis = f"Sets {named} (params ttl_seconds_after_finished, active_deadline_seconds)."
    return Proposal(None, params, basis, "static", "#lifecycle")


# --- sharing ------------------------------------------------------------------------------


def _time_slicing_replicas(ctx: Context) -> tuple[int, str, Confidence]:
    cap = int(ctx.params["max_replicas"])
    shares = [s for s in ctx.run.sharers if s.mig_profile is None]
    measured = [s for s in shares if s.need_mib and s.model]
    if shares and len(measured) == len(shares):
        smallest = min(sizing.model_memory_mib(s.model) for s in measured)  # type: ignore[arg-type]
        fit = sizing.replicas_that_fit(smallest, [s.need_mib for s in measured])  # type: ignore[misc]
        replicas = sizing.clamp(fit, 2, cap)
        basis = (
            f"{len(measured)} workload(s) move to a share (see their changes); the largest needs "
            f"{max(s.need_mib for s in measured):,.0f} MiB with headroom, so {fit} fit per GPU "  # type: ignore[type-var]
            f"(capped at max_replicas={cap}): replicas {replicas}."
        )
        return replicas, basis, "measured"
    if shares:
        pods = sum(s.pods for s in shares)
        replicas = sizing.clamp(pods, 2, cap)
        basis = (
            f"{pods} pod(s) of {len(shares)} workload(s) move to {shares[0].resource} in this "
            f"overlay; without GPU memory telemetry for all of them, replicas = that count "
            f"kept within 2..max_replicas={cap}: {replicas}. Needs confirmation: "
            "time-slicing does not isolate memory."
        )
        return replicas, basis, "needs confirmation"
    replicas = sizing.clamp(int(ctx.params["replicas"]), 2, cap)
    basis = (
        f"No workload in this input moves to a share; the default of {replicas} replicas "
        "per GPU is a static suggestion that needs confirmation."
    )
    return replicas, basis, "needs confirmation"


@planner("enable-time-slicing")
def enable_time_slicing(ctx: Context) -> Proposal | Declined:
    facts = ctx.facts
    strategy = str(ctx.params["strategy"])
    if strategy not in ("time-slicing", "mps", "mig"):
        return Declined(f"unknown sharing strategy {strategy!r} (time-slicing, mps or mig)")
    shared = str(ctx.params["shared_resource"])
    rename = shared.endswith(".shared")
    common = {
        **_identity(ctx),
        "config_map": ctx.params["config_map"],
        "namespace": ctx.params["namespace"],
        "shared_key": ctx.params["config_key"],
        "default_key": ctx.params["config_key"]
        if ctx.params["all_nodes"]
        else ctx.params["no_sharing_key"],
        "no_sharing_key": ctx.params["no_sharing_key"],
        "rename_by_default": rename,
        "resource": NVIDIA_GPU,
        "shared_resource": shared if rename else NVIDIA_GPU,
    }
    if facts.get("config_type") == "cluster-policy":
        if strategy == "mig":
            profiles = sorted({s.mig_profile for s in ctx.run.sharers if s.mig_profile})
            layout = f"all-{profiles[0]}" if len(profiles) == 1 else str(ctx.params["mig_config"])
            basis = (
                f"MIG layout {layout}: "
                + (
                    f"the profile telemetry chose for the workloads moved to MIG ({profiles[0]})."
                    if len(profiles) == 1
                    else "the mig_config setting (no single profile from telemetry)."
                )
            )
            params = {**common, "mig_config": layout}
            return Proposal("mig", params, basis, "static", "/spec")
        replicas, basis, confidence = _time_slicing_replicas(ctx)
        params = {**common, "replicas": replicas}
        variant = "mps" if strategy == "mps" else None
        return Proposal(variant, params, basis, confidence, "/spec")
    if facts.get("config_type") == "device-plugin":
        if strategy == "mig":
            return Declined("a device-plugin config cannot create MIG slices; use the ClusterPolicy")
        key = str(facts.get("key") or "")
        data = ctx.document.obj.get("data") or {}
        try:
            config = yaml.safe_load(data.get(key) or "") or {}
        except yaml.YAMLError:
            return Declined(f"data key {key!r} is not YAML")
        replicas, basis, confidence = _time_slicing_replicas(ctx)
        section = "mps" if strategy == "mps" else "timeSlicing"
        config = dict(config)
        config["sharing"] = {
            section: {
                "renameByDefault": rename,
                "resources": [{"name": NVIDIA_GPU, "replicas": replicas}],
            }
        }
        text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
        params = {
            **common,
            "replicas": replicas,
            "key": key,
            "data_pointer": "/data",
            "config_text": text,
        }
        return Proposal("config-map", params, basis, confidence, f"/data/{key}")
    return Declined("not a ClusterPolicy or device-plugin config")
