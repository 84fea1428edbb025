"""Sharing remediations: device-plugin sharing configs, the GPU Operator's MIG and
time-slicing settings."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from gpuaudit.model import Document
from gpuaudit.remediate import sizing
from gpuaudit.remediate.planners.common import NVIDIA_GPU, Confidence, Context, Declined, Proposal, identity

# --- sharing ------------------------------------------------------------------------------


def _time_slicing_replicas(ctx: Context) -> tuple[int, str, Confidence] | Declined:
    """Replicas per GPU from measured fit: the pods that would share one GPU
    must fit in its memory together (time-slicing does not isolate memory)
    and, where compute is measured, keep it no more than fully busy. Without
    measurements for every workload moving to a share: 2, to be confirmed."""
    cap = int(ctx.params["replicas_cap"])
    shares = [s for s in ctx.run.sharers if s.mig_profile is None]
    if ctx.run.cluster and not shares:
        shares = list(ctx.run.candidates)  # they move once this config advertises the share
    measured = [s for s in shares if s.need_mib and s.model]
    if shares and len(measured) == len(shares):
        memory = min(sizing.model_memory_mib(s.model) for s in measured)  # type: ignore[arg-type]
        gpu = min((s.model for s in measured), key=lambda m: m.memory_gib)  # type: ignore[union-attr]
        needs = sorted((float(s.need_mib) for s in measured), reverse=True)  # type: ignore[arg-type]
        by_memory = sizing.colocated_fit(memory, needs)
        computes = [s.compute for s in measured]
        by_compute = (
            sizing.colocated_fit(1.0, sorted((float(c) for c in computes), reverse=True))  # type: ignore[arg-type]
            if all(c is not None for c in computes)
            else None
        )
        fit = min(by_memory, by_compute) if by_compute is not None else by_memory
        if fit < 2:
            return Declined(
                f"measured fit: no two of the {len(measured)} workload(s) moving to a share fit one "
                f"{gpu.model} together (memory {memory:,.0f} MiB, largest need {needs[0]:,.0f} MiB"
                + (f", compute fit {by_compute}" if by_compute is not None else "")
                + ")"
            )
        replicas = min(fit, cap)
        basis = (
            f"{len(measured)} workload(s) move to a share (see their changes). Measured fit on a "
            f"{gpu.model} ({memory:,.0f} MiB): the {by_memory} largest peak-VRAM needs (with headroom) fit "
            "in its memory together"
            + (
                f", and {by_compute} of their p95 compute shares sum to no more than one GPU"
                if by_compute is not None
                else " (no compute telemetry for all of them: compute is not checked)"
            )
            + f"; replicas {replicas} (replicas_cap {cap})."
        )
        return replicas, basis, "measured" if by_compute is not None else "needs confirmation"
    if ctx.run.cluster:
        # From a cluster a share is sized from measured fit, never a static count.
        unsized = len(shares) - len(measured)
        return Declined(
            "replicas per GPU need measured fit: "
            + (
                f"{unsized} of the {len(shares)} workload(s) moving to a share run on no single known GPU model"
                if shares
                else "no workload with telemetry that covers its pods moves to a share in this overlay"
            )
            + " (DCGM_FI_DEV_FB_USED and the compute signal of the pods that would share decide it)"
        )
    replicas = sizing.clamp(int(ctx.params["replicas"]), 2, cap)
    if shares:
        basis = (
            f"{sum(s.pods for s in shares)} pod(s) of {len(shares)} workload(s) move to "
            f"{shares[0].resource} in this overlay, without GPU memory telemetry for all of them: "
            f"{replicas} replicas per GPU (setting replicas), to be confirmed against their peak VRAM: "
            "time-slicing does not isolate memory."
        )
    else:
        basis = (
            f"No workload in this input moves to a share: {replicas} replicas per GPU (setting "
            "replicas), a static suggestion to confirm against the peak VRAM of the pods that will share."
        )
    return replicas, basis, "needs confirmation"


def enable_time_slicing(ctx: Context) -> Proposal | Declined:
    facts = ctx.config_facts
    strategy = str(ctx.params["strategy"])
    if strategy not in ("time-slicing", "mps", "mig"):
        return Declined(f"unknown sharing strategy {strategy!r} (time-slicing, mps or mig)")
    shared = str(ctx.params["shared_resource"])
    rename = shared.endswith(".shared")
    common = {
        **identity(ctx),
        "config_map": ctx.params["config_map"],
        "namespace": ctx.params["namespace"],
        "shared_key": ctx.params["config_key"],
        "default_key": ctx.params["config_key"] if ctx.params["all_nodes"] else ctx.params["no_sharing_key"],
        "no_sharing_key": ctx.params["no_sharing_key"],
        "rename_by_default": rename,
        "resource": NVIDIA_GPU,
        "shared_resource": shared if rename else NVIDIA_GPU,
    }
    # A renaming config meant for a labelled pool conflicts by design with the
    # whole-GPU workloads that run elsewhere; GPA-SH-003 cannot see node pools,
    # so the new ConfigMap carries an exemption that says so (reviewable).
    labelled_pool = rename and not ctx.params["all_nodes"]
    common["annotations"] = (
        {
            "gpuaudit.io/ignore.GPA-SH-003": (
                "this config serves only the nodes labelled nvidia.com/device-plugin.config="
                f"{ctx.params['config_key']}; workloads requesting whole nvidia.com/gpu run "
                "on the other GPU nodes"
            )
        }
        if labelled_pool
        else {}
    )
    if facts.config_type == "cluster-policy" and strategy != "mig" and ctx.run.sharing_configs:
        namespace, name, key = ctx.run.sharing_configs[0]
        params = {**common, "config_map": name, "namespace": namespace, "config_key": key}
        basis = (
            f"The input already holds a device-plugin config that shares GPUs: ConfigMap "
            f"{namespace}/{name}, key {key}. The ClusterPolicy is pointed at it instead of a new one."
        )
        return Proposal("existing", params, basis, "static", "/spec")
    if facts.config_type == "cluster-policy":
        if strategy == "mig":
            profiles = sorted({s.mig_profile for s in ctx.run.sharers if s.mig_profile})
            if not profiles:
                return Declined(
                    "strategy mig: no workload in this overlay moves to a MIG slice, so no layout is "
                    "sized from evidence; a default layout would partition every MIG-capable GPU of "
                    "the cluster for nobody"
                )
            # A workload moves to a slice only where something already offers
            # it (coherence): the layout exists on those nodes. A cluster-wide
            # default would repartition every other MIG-capable GPU, evicting
            # its pods, for nobody.
            by = sorted({ctx.run.advertised.get(f"nvidia.com/mig-{p}", "?") for p in profiles})
            return Declined(
                f"strategy mig: the workloads moved to MIG use {', '.join(profiles)} slices, already "
                f"offered ({'; '.join(by)}); a cluster-wide default layout would repartition every "
                "MIG-capable GPU. For more capacity label more nodes of that model: kubectl label node "
                f"NODE nvidia.com/mig.config=all-{profiles[0]} (drain its GPU pods first)"
            )
        sized = _time_slicing_replicas(ctx)
        if isinstance(sized, Declined):
            return sized
        replicas, basis, confidence = sized
        params = {**common, "replicas": replicas}
        variant = "mps" if strategy == "mps" else None
        return Proposal(variant, params, basis, confidence, "/spec")
    if facts.config_type == "device-plugin":
        if strategy == "mig":
            return Declined("a device-plugin config cannot make MIG slices (patch ClusterPolicy)")
        sized = _time_slicing_replicas(ctx)
        if isinstance(sized, Declined):
            return sized
        replicas, basis, confidence = sized
        section = "mps" if strategy == "mps" else "timeSlicing"

        def add_sharing(config: dict[str, Any]) -> str | None:
            sharing: dict[str, Any] = {"renameByDefault": rename}
            if section == "timeSlicing":  # MPS already fails such requests by default
                sharing["failRequestsGreaterThanOne"] = True
            sharing["resources"] = [{"name": NVIDIA_GPU, "replicas": replicas}]
            config["sharing"] = {section: sharing}
            return None

        result = _rewrite_device_plugin_config(ctx, add_sharing)
        if isinstance(result, Declined):
            return result
        params = {**common, **result, "replicas": replicas}
        return Proposal("config-map", params, basis, confidence, f"/data/{result['key']}")
    return Declined("not a ClusterPolicy or device-plugin config")


def mig_strategy_mixed(ctx: Context) -> Proposal | Declined:
    facts = ctx.config_facts
    if facts.config_type != "cluster-policy":
        return Declined("only the ClusterPolicy's MIG strategy is patched")
    served = list(facts.mig_requests_unserved or [])
    layouts = list(facts.mig_layouts_mixed or [])
    if served:
        gain = f"the workloads requesting {', '.join(served)} can be placed"
        basis = (
            f"mig.strategy {facts.mig_strategy} advertises no nvidia.com/mig-<profile> "
            f"resources, and workloads here request {', '.join(served)}."
        )
    else:
        gain = f"nodes given the MIG manager's layout(s) {', '.join(layouts)} advertise their GPUs"
        basis = (
            f"mig.strategy single advertises one kind of GPU per node, and the layouts {', '.join(layouts)} "
            "mix MIG and whole GPUs, or several profiles, on one node."
        )
    params = {**identity(ctx), "strategy": facts.mig_strategy, "gain": gain}
    return Proposal(None, params, basis, "static", "/spec/mig")


def _rewrite_device_plugin_config(
    ctx: Context, change: Callable[[dict[str, Any]], str | None]
) -> dict[str, Any] | Declined:
    """The ConfigMap key's config after ``change`` (which returns why it cannot
    apply, or None), as params for a template that rewrites the key."""
    facts = ctx.config_facts
    if facts.config_type != "device-plugin" or ctx.document.kind != "ConfigMap":
        return Declined("only device-plugin configs held in a ConfigMap are patched")
    key = str(facts.key or "")
    data = ctx.document.obj.get("data") or {}
    try:
        config = yaml.safe_load(data.get(key) or "") or {}
    except yaml.YAMLError:
        return Declined(f"data key {key!r} is not YAML")
    if not isinstance(config, dict):
        return Declined(f"data key {key!r} is not a mapping")
    config = copy.deepcopy(config)
    problem = change(config)
    if problem:
        return Declined(problem)
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return {**identity(ctx), "key": key, "data_pointer": "/data", "config_text": text}


def time_slicing_replicas(ctx: Context) -> Proposal | Declined:
    sized = _time_slicing_replicas(ctx)
    if isinstance(sized, Declined):
        return sized
    replicas, basis, confidence = sized

    def set_replicas(config: dict[str, Any]) -> str | None:
        touched = 0
        for section in ("timeSlicing", "mps"):
            part = (config.get("sharing") or {}).get(section) or {}
            for resource in part.get("resources") or []:
                if isinstance(resource, dict):
                    resource["replicas"] = replicas
                    touched += 1
            if section == "timeSlicing" and touched and isinstance(part, dict):
                # Two replicas or more without it is GPA-SH-004: a pod asking for
                # 2 gets two turns on one GPU. MPS fails such requests already.
                part["failRequestsGreaterThanOne"] = True
        return None if touched else "the config lists no shared resources"

    params = _rewrite_device_plugin_config(ctx, set_replicas)
    if isinstance(params, Declined):
        return params
    params["replicas"] = replicas
    basis += (
        " failRequestsGreaterThanOne: true, so a pod asking for two replicas fails instead of taking two "
        "turns on one GPU. The config is rewritten from its parsed form: comments inside it are dropped."
    )
    return Proposal(None, params, basis, confidence, f"/data/{params['key']}")


def fail_requests_greater_than_one(ctx: Context) -> Proposal | Declined:
    def set_flag(config: dict[str, Any]) -> str | None:
        section = (config.get("sharing") or {}).get("timeSlicing")
        if not isinstance(section, dict):
            return "the config has no time-slicing section"
        section["failRequestsGreaterThanOne"] = True
        return None

    params = _rewrite_device_plugin_config(ctx, set_flag)
    if isinstance(params, Declined):
        return params
    basis = (
        "failRequestsGreaterThanOne: true makes a request for 2+ replicas fail at admission "
        "instead of silently taking turns on one GPU. The config is rewritten from its "
        "parsed form: comments inside it are dropped."
    )
    return Proposal(None, params, basis, "static", f"/data/{params['key']}")


def sharing_configs(documents: Iterable[Document]) -> tuple[tuple[str, str, str], ...]:
    """(namespace, name, key) of the device-plugin ConfigMaps in ``documents``
    whose config time-slices or shares GPUs with MPS at two replicas or more."""
    from gpuaudit.facts.device_plugin import is_device_plugin_config

    found = []
    for doc in documents:
        data = doc.obj.get("data") if doc.kind == "ConfigMap" else None
        if not isinstance(data, Mapping):
            continue
        for key, text in data.items():
            try:
                config = yaml.safe_load(text) if isinstance(text, str) else None
            except yaml.YAMLError:
                continue
            if not is_device_plugin_config(config):
                continue
            sharing = config.get("sharing") if isinstance(config.get("sharing"), Mapping) else {}
            for section in ("timeSlicing", "mps"):
                part = sharing.get(section) if isinstance(sharing.get(section), Mapping) else {}
                replicas = [r.get("replicas") for r in part.get("resources") or [] if isinstance(r, Mapping)]
                if any(isinstance(n, int) and n >= 2 for n in replicas):
                    found.append((doc.namespace, doc.name, str(key)))
                    break
    return tuple(dict.fromkeys(found))
