"""Remediations the rule pack names that gpuaudit does not write as patches,
each with the reason REVIEW.md gives."""

from __future__ import annotations

from gpuaudit import gpus
from gpuaudit.facts.types import NodeFacts
from gpuaudit.remediate.planners.common import Context, Declined

REASONS = {
    "scale-to-zero": (
        "scaling to zero needs a traffic trigger (a KEDA ScaledObject with a queue or HTTP "
        "scaler, or KServe/Knative minReplicas: 0) that manifests do not reveal: add it by hand"
    ),
    "right-size-gpus": (
        "a smaller GPU count also needs the server's parallelism arguments changed "
        "(--tensor-parallel-size) and the model's fit checked: change both by hand from the "
        "evidence"
    ),
    "shared-resource-name": (
        "which workloads are meant to share decides the fix (request nvidia.com/gpu.shared, "
        "or set renameByDefault: false): decide it per workload"
    ),
}


def enable_mig_reason(facts: NodeFacts, peak_mib: float | None = None) -> str:
    """What to do about a MIG-capable node running whole GPUs; never MIG
    advice for a GPU that cannot do MIG (L4, L40S, T4, ...), and no layout
    for a node whose pods use (nearly) the whole GPU's memory or whose
    pods' memory is not measured. ``peak_mib``: the largest GPU memory a pod
    on the node used over the telemetry window."""
    node = facts.name or "NODE"
    named = facts.model or facts.product
    model = gpus.lookup(str(named)) if named else None
    if model is not None and not model.mig_capable:
        return f"node {node}'s {model.model} cannot be partitioned with MIG: share it with time-slicing or MPS instead"
    if not facts.mig_capable and model is None:
        return f"node {node}'s GPU model is unknown: check nvidia.com/mig.capable before choosing a MIG layout"
    if peak_mib is None:
        return (
            f"a MIG layout for node {node} is sized from the peak GPU memory of its pods "
            "(DCGM_FI_DEV_FB_USED over a window that covers them), and none is measured: no layout is "
            "recommended; MIG is enabled per node by label (nvidia.com/mig.config), never by a manifest"
        )
    largest = (
        max((gb for p in model.mig if (gb := gpus.mig_profile_memory_gib(p)) is not None), default=0.0)
        if (model is not None)
        else 0.0
    )
    whole = model.memory_gib * 1024 if model is not None else None
    half = largest / 2 * 1000**3 / 2**20 if largest else None  # the second-largest layouts hold about half
    if whole is not None and half is not None and peak_mib > half:
        return (
            f"node {node}'s pods use up to {peak_mib:,.0f} MiB of a {model.model} ({whole:,.0f} MiB): a balanced "
            "MIG layout (all-balanced) has no slice that holds them; keep it whole, or repartition it only "
            "after those pods move"
        )
    return (
        f"MIG is enabled per node by label, not by a manifest: its pods use up to {peak_mib:,.0f} MiB, so "
        f"kubectl label node {node} nvidia.com/mig.config=<a layout whose slices hold that> (all-balanced "
        "when its 2g and 3g slices do; drain its GPU pods first)"
    )


def enable_mig(ctx: Context) -> Declined:
    """MIG layouts are chosen per node by a label the MIG manager watches; an
    overlay should not apply Node objects (the kubelet owns them), so the
    step is spelled out instead."""
    return Declined(enable_mig_reason(ctx.node_facts))


# Remediation ids that never produce a patch (no template needed).
DECLINED = frozenset({*REASONS, "enable-mig"})
