"""Remediations the rule pack names that gpuaudit does not write as patches,
each with the reason REVIEW.md gives."""

from __future__ import annotations

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


@planner("enable-mig")
def enable_mig(ctx: Context) -> Declined:
    """MIG layouts are chosen per node by a label the MIG manager watches; an
    overlay should not apply Node objects (the kubelet owns them), so the
    step is spelled out instead."""
    node = ctx.facts.get("name") or "NODE"
    return Declined(
        f"MIG is enabled per node by label, not by a manifest: kubectl label node {node} "
        "nvidia.com/mig.config=all-balanced (or a layout sized for its workloads; drain its "
        "GPU pods first)"
    )


# Remediation ids that never produce a patch (no template needed).
DECLINED = frozenset({*REASONS, "enable-mig"})
