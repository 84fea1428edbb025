"""Remediations the rule pack names that gpuaudit does not write as patches,
each with the reason REVIEW.md gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaudit import gpus
from gpuaudit.remediate.planners.common import PLANNERS, Context, Declined, planner

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


def _decline(reason: str):
    def plan(ctx: Context) -> Declined:
        return Declined(reason)

    return plan


for _remediation, _reason in REASONS.items():
    PLANNERS[_remediation] = _decline(_reason)


def enable_mig_reason(facts: Mapping[str, Any]) -> str:
    """What to do about a MIG-capable node running whole GPUs; never MIG
    advice for a GPU that cannot do MIG (L4, L40S, T4, ...)."""
    node = facts.get("name") or "NODE"
    named = facts.get("model") or facts.get("product")
    model = gpus.lookup(str(named)) if named else None
    if model is not None and not model.mig_capable:
        return f"node {node}'s {model.model} cannot be partitioned with MIG: share it with time-slicing or MPS instead"
    if facts.get("mig_capable") is not True and model is None:
        return f"node {node}'s GPU model is unknown: check nvidia.com/mig.capable before choosing a MIG layout"
    return (
        f"MIG is enabled per node by label, not by a manifest: kubectl label node {node} "
        "nvidia.com/mig.config=all-balanced (or a layout sized for its workloads; drain its "
        "GPU pods first)"
    )


@planner("enable-mig")
def enable_mig(ctx: Context) -> Declined:
    """MIG layouts are chosen per node by a label the MIG manager watches; an
    overlay should not apply Node objects (the kubelet owns them), so the
    step is spelled out instead."""
    return Declined(enable_mig_reason(ctx.facts))


# Remediation ids that never produce a patch (no template needed).
DECLINED = frozenset({*REASONS, "enable-mig"})
