"""The decision gate: no large hardware purchase before the diagnostic flow
has run. Which steps the data shows as done, which are not, what to do in the
first week, and the verdict (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MIN_COVERAGE = 0.8  # share of allocated GPUs with telemetry for "residency measured"
MAX_UNKNOWN_PENDING = 0.1  # share of pending pods without a known cause
APPLICATION_SIGNALS = ("pcie", "occupancy", "tensor", "nvlink")


def _step(step: str, title: str, status: str, evidence: str, action: str) -> dict[str, str]:
    return {"step": step, "title": title, "status": status, "evidence": evidence, "action": action}


def steps(
    *,
    rules_run: Iterable[Any],
    errors: Sequence[str],
    gpus: Mapping[str, Any],
    coverage: Mapping[str, Any],
    pending: Mapping[str, Any],
    signals: Mapping[str, Any],
    extra_metrics: Sequence[str],
    sharing: Mapping[str, Any],
    workloads: int,
) -> list[dict[str, str]]:
    """The five steps of the diagnostic flow and whether the data shows each done."""
    ran = {r.category for r in rules_run}
    out = []

    if errors:
        status, evidence = "partial", f"the snapshot is incomplete: {'; '.join(errors[:2])}"
    elif "allocation" not in ran:
        status, evidence = "not_done", "no allocation rule ran"
    else:
        status = "done"
        allocated = round(gpus.get("allocated") or 0, 1)
        evidence = f"{allocated:g} allocated GPUs mapped to {workloads} workloads"
    out.append(
        _step(
            "allocation",
            "Allocation mapped",
            status,
            evidence,
            "Give the audit read access to pods, nodes, replicasets, jobs and events "
            "(deploy/rbac.yaml) and run `gpuaudit audit`.",
        )
    )

    ratio = coverage.get("ratio")
    if not coverage.get("present"):
        status, evidence = "not_done", "no GPU telemetry"
    elif "memory" not in ran:
        status, evidence = "not_done", "the memory rules did not run"
    elif ratio is not None and ratio >= MIN_COVERAGE:
        status = "done"
        evidence = f"telemetry covers {ratio:.0%} of allocated GPUs"
    else:
        status = "partial"
        evidence = f"telemetry covers {ratio or 0:.0%} of allocated GPUs (at least {MIN_COVERAGE:.0%} needed)"
    out.append(
        _step(
            "residency",
            "Residency measured",
            status,
            evidence,
            "Point `gpuaudit audit --prometheus URL` at the Prometheus that scrapes the DCGM "
            "exporter on every GPU node (or run `gpuaudit sample` where there is none), so "
            f"at least {MIN_COVERAGE:.0%} of allocated GPUs report VRAM and activity.",
        )
    )

    pods = pending.get("pods") or 0
    unknown = sum(c["pods"] for c in pending.get("by_cause") or [] if c["cause"] == "unknown")
    if "placement" not in ran:
        status, evidence = "not_done", "no placement rule ran"
    elif pods and unknown / pods > MAX_UNKNOWN_PENDING:
        status = "partial"
        evidence = f"{unknown} of {pods} pending GPU pods have no known cause"
    else:
        status = "done"
        evidence = (
            f"placement rules ran; all {pods} pending GPU pods have a cause"
            if pods
            else "placement rules ran; no GPU pod is pending"
        )
    out.append(
        _step(
            "placement",
            "Placement reviewed",
            status,
            evidence,
            "Go through the scheduler report and the placement findings; keep scheduler "
            "events long enough (event TTL) that every pending pod has its FailedScheduling "
            "reason.",
        )
    )

    present = [s for s in APPLICATION_SIGNALS if signals.get(s)]
    if present or extra_metrics:
        status = "done"
        evidence = "signals: " + ", ".join([*present, *extra_metrics])
    else:
        status, evidence = "not_done", "only compute and memory signals"
    out.append(
        _step(
            "application",
            "Application metrics present",
            status,
            evidence,
            "Enable the DCGM profiling fields (PCIE_TX/RX_BYTES, SM_OCCUPANCY, "
            "PIPE_TENSOR_ACTIVE) or add the application's own metrics (batch size, data-loader "
            "wait) to `telemetry.queries`, so starved GPUs can be told from idle ones.",
        )
    )

    active = sharing.get("nodes") or 0
    shared_pods = sharing.get("pods") or 0
    if active or shared_pods:
        status = "done"
        evidence = f"sharing in effect on {active} node(s); {shared_pods} pod(s) on shared GPUs"
    else:
        status, evidence = "not_done", "no node runs time-slicing, MPS or MIG"
    out.append(
        _step(
            "sharing",
            "Sharing piloted",
            status,
            evidence,
            "Pilot time-slicing or MIG on one node pool with the services the what-if names "
            "(`gpuaudit fix --rules GPA-SH-101,GPA-SH-102`), and compare latency before and "
            "after.",
        )
    )
    return out


def verdict(flow: Sequence[Mapping[str, str]], pending_gpus: float, freed: Mapping[str, Any]) -> dict[str, Any]:
    """Whether a purchase can be discussed, and why."""
    missing = [s["title"] for s in flow if s["status"] != "done"]
    low, high = freed.get("low") or 0.0, freed.get("high") or 0.0
    if missing:
        return {
            "decision": "hold",
            "headline": "No large hardware purchase yet",
            "reason": f"{len(missing)} of {len(flow)} diagnostic steps "
            + ("is" if len(missing) == 1 else "are")
            + " not done: "
            + ", ".join(missing)
            + ".",
        }
    if not pending_gpus:
        return {
            "decision": "no_demand",
            "headline": "No purchase case",
            "reason": "No GPU work is waiting for GPUs.",
        }
    if low >= pending_gpus:
        return {
            "decision": "free_first",
            "headline": "Free capacity first",
            "reason": f"Sharing and fixes would free {low:g}–{high:g} GPUs, at least the "
            f"{pending_gpus:g} GPUs pending work asks for.",
        }
    return {
        "decision": "purchase_case",
        "headline": "A purchase can be discussed",
        "reason": f"Pending work asks for {pending_gpus:g} GPUs; sharing and fixes would "
        f"free {low:g}–{high:g}. The gap ({max(pending_gpus - high, 0):g}–"
        f"{pending_gpus - low:g} GPUs) is what hardware would have to cover.",
    }


def checklist(flow: Sequence[Mapping[str, str]], causes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first week: the steps not done, then the biggest causes, then history."""
    items: list[dict[str, Any]] = [
        {"done": False, "text": s["action"], "step": s["step"]} for s in flow if s["status"] != "done"
    ]
    for cause in causes:
        items.append(
            {
                "done": False,
                "text": f"Work through {cause['rule']} ({cause['title']}): {cause['findings']} "
                f"finding(s), {cause['gpus_idle']:g} GPUs doing no work; "
                f"`gpuaudit rules explain {cause['rule']}` "
                "says what to check first.",
                "step": cause["category"],
            }
        )
    items.append(
        {
            "done": False,
            "text": "Record a run every day (`gpuaudit audit --history DB` as a CronJob, "
            "deploy/) so next month's review has a trend.",
            "step": "history",
        }
    )
    items.extend(
        {"done": True, "text": f"{s['title']}: {s['evidence']}", "step": s["step"]}
        for s in flow
        if s["status"] == "done"
    )
    return items
