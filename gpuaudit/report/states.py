"""GPUs by state, per namespace and GPU model, and the GPUs pending pods ask
for, per namespace and cause: the capacity review's classes (holders.py) as
flat rows, for the run's metrics (output/openmetrics.py). Pure.

The classes and thresholds are the review's (``Thresholds.from_rules``), so
the metrics and the monthly review agree. What a partial run could not read
is left out (``unknown``), never counted as zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuaudit.model import ClusterState
from gpuaudit.report.build import partial_input
from gpuaudit.report.holders import Thresholds, collect, pod_fact_index
from gpuaudit.report.summary import r1


def gpu_states(state: ClusterState, subjects: Iterable[Any], rules: Iterable[Any]) -> dict[str, Any]:
    """``{"held": [...], "nodes": [...], "pending": [...], "unknown": [...]}``:

    - held: {namespace, model, state, gpus} per class of allocated GPU
      (active, resident_idle, idle, no_data: what telemetry cannot judge);
    - nodes: {model, total, free, cordoned} per GPU model (free: on
      schedulable nodes; cordoned: unallocated on cordoned nodes), each
      None when unknown;
    - pending: {namespace, cause, pods, gpus} per pending cause;
    - unknown: which of held, total, free, pending this run could not count
      (unread pods leave who holds what, what is free and what waits unknown)."""
    inventory = collect(state, pod_fact_index(subjects), Thresholds.from_rules(rules))
    unknown_counts = set(partial_input(state)["unknown"])
    unknown = sorted(
        {
            *(["held", "pending"] if "allocated" in unknown_counts else []),
            *(["total"] if "total" in unknown_counts else []),
            *(["free"] if "free" in unknown_counts else []),
        }
    )
    held: dict[tuple[str, str, str], float] = {}
    for h in inventory.holders:
        key = (h.namespace, h.model, h.state)
        held[key] = held.get(key, 0.0) + h.gpus
    nodes: dict[str, list[float]] = {}
    for n in inventory.nodes:
        row = nodes.setdefault(n.model, [0.0, 0.0, 0.0])
        row[0] += n.gpus
        row[1 if not n.unschedulable else 2] += max(n.gpus - n.allocated, 0.0)
    pending: dict[tuple[str, str], list[float]] = {}
    for w in inventory.waiting:
        row = pending.setdefault((w.namespace, w.cause), [0, 0.0])
        row[0] += 1
        row[1] += w.gpus
    return {
        "held": []
        if "held" in unknown
        else [
            {"namespace": ns, "model": model, "state": st, "gpus": r1(gpus)}
            for (ns, model, st), gpus in sorted(held.items())
        ],
        "nodes": [
            {
                "model": model,
                "total": None if "total" in unknown else r1(total),
                "free": None if "free" in unknown else r1(free),
                "cordoned": None if "free" in unknown else r1(cordoned),
            }
            for model, (total, free, cordoned) in sorted(nodes.items())
        ],
        "pending": []
        if "pending" in unknown
        else [
            {"namespace": ns, "cause": cause, "pods": int(pods), "gpus": r1(gpus)}
            for (ns, cause), (pods, gpus) in sorted(pending.items())
        ],
        "unknown": unknown,
    }
