"""Planners: one per remediation id, in one module per category; each registers
itself in ``PLANNERS`` with ``@planner`` (see ``common``). Importing this
package imports them all."""

from gpuaudit.remediate.planners import allocation, application, batch, declined, placement, sharing
from gpuaudit.remediate.planners.common import PLANNERS

__all__ = ["PLANNERS", "allocation", "application", "batch", "declined", "placement", "sharing"]
