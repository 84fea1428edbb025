"""Planners: one per remediation id, in one module per category. ``PLANNERS``
names each remediation's planner and what it needs of the finding (the object,
a pod template or a container: ``common.per_*`` declines a finding without
it), so a planner holds only its own logic. Importing this package imports
them all: ``fix`` does, ``check`` never."""

from __future__ import annotations

from gpuaudit.remediate.planners import allocation, application, batch, declined, placement, sharing
from gpuaudit.remediate.planners.application import sized_per_gpu
from gpuaudit.remediate.planners.common import Planner, declines, per_container, per_object, per_template

PLANNERS: dict[str, Planner] = {
    # allocation
    "move-to-shared-gpu": per_template(allocation.move_to_shared_gpu),
    "gpu-requests-equal-limits": per_container(allocation.gpu_requests_equal_limits),
    "gpu-limits-from-requests": per_container(allocation.gpu_limits_from_requests),
    "whole-gpu-quantity": per_container(allocation.whole_gpu_quantity),
    "drop-init-container-gpus": per_template(allocation.drop_init_container_gpus, takes_gpus_away=True),
    "drop-ray-head-gpus": per_template(allocation.drop_ray_head_gpus, takes_gpus_away=True),
    "match-gpus-to-parallelism": per_container(allocation.match_gpus_to_parallelism),
    "drop-visible-devices-env": per_container(allocation.drop_visible_devices_env),
    # application
    "cpu-request-per-gpu": sized_per_gpu(application.cpu_request_per_gpu),
    "add-dev-shm": per_template(application.add_dev_shm),
    "memory-request": sized_per_gpu(application.memory_request),
    "raise-cpu-limit": sized_per_gpu(application.raise_cpu_limit),
    # batch
    "add-batch-deadline": per_object(batch.add_batch_deadline),
    # placement
    "drop-hostname-pin": per_template(placement.drop_hostname_pin),
    "prefer-product-affinity": per_template(placement.prefer_product_affinity),
    "add-gpu-toleration": per_template(placement.add_gpu_toleration),
    "select-gpu-class": per_template(placement.select_gpu_class),
    "prefer-spread": per_template(placement.prefer_spread),
    # sharing
    "enable-time-slicing": per_object(sharing.enable_time_slicing),
    "mig-strategy-mixed": per_object(sharing.mig_strategy_mixed),
    "time-slicing-replicas": per_object(sharing.time_slicing_replicas),
    "fail-requests-greater-than-one": per_object(sharing.fail_requests_greater_than_one),
    # declined: no patch, the reason REVIEW.md gives
    **{remediation: declines(reason) for remediation, reason in declined.REASONS.items()},
    "enable-mig": per_object(declined.enable_mig),
}

# Remediations planned before the others of their category (Planner.takes_gpus_away).
TAKE_GPUS_AWAY = frozenset(remediation for remediation, p in PLANNERS.items() if p.takes_gpus_away)

# Remediations that give GPUs back. A change that lowers a workload's GPUs
# may leave a finding of these on it (8 GPUs trimmed to the tensor-parallel
# 4, which a 27B model does not need either): a further saving, not a
# problem the change brings.
GIVE_GPUS_BACK = TAKE_GPUS_AWAY | {"match-gpus-to-parallelism", "right-size-gpus", "move-to-shared-gpu"}


def further_saving(finding_remediation: str | None, lowers: frozenset[str]) -> bool:
    """Whether a finding a change leaves on its object asks for fewer GPUs
    still, after a change that lowered them (``lowers``: Proposal.lowers)."""
    return "gpu" in lowers and finding_remediation in GIVE_GPUS_BACK


__all__ = ["GIVE_GPUS_BACK", "PLANNERS", "TAKE_GPUS_AWAY", "further_saving"]
