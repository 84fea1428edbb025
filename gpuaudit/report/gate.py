"""The decision gate: no large hardware purchase before the diagnostic flow
has run. Which steps the data shows as done, which are not, what to do in the
first week, and the verdict (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MIN_COVERAGE = 0.8  # share of allocated GPUs with telemetry for "residency measured"
MAX_UNKNOWN_PENDING = 0.1  # share of pending pods without a known cause
APPLICATION_SIGNALS = ("pcie", "occupancy", "tensor", "nvlink")
# The per-pod telemetry value each application signal fills.
SIGNAL_VALUES = {
    "pcie": "pcie_mean_bps",
    "occupancy": "occupancy_mean",
    "tensor": "tensor_active_mean",
    "nvlink": "nvlink_mean_bps",
}


def signals_with_data(telemetry_rows: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """The application signals at least one pod has a value for: a signal
    named in the snapshot with every value null is not data."""
    rows = [t for t in telemetry_rows if t]
    return [
        name for name in APPLICATION_SIGNALS if any(isinstance(t.get(SIGNAL_VALUES[name]), (int, float)) for t in rows)
    ]


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
    signals_measured: Sequence[str],
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

    present = [s for s in APPLICATION_SIGNALS if s in signals_measured]
    empty = [s for s in APPLICATION_SIGNALS if signals.get(s) and s not in signals_measured]
    if present or extra_metrics:
        status = "done"
        evidence = "signals with values: " + ", ".join([*present, *extra_metrics])
    else:
        status, evidence = "not_done", "only compute and memory signals have values"
    if empty:
        evidence += "; named in the snapshot but without a single value: " + ", ".join(empty)
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


def _whole(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(value, 2)


def compare(
    demand: Mapping[str, Any], freed: Mapping[str, Any], free: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Hardware demand against the GPUs free now on schedulable nodes and
    those the overlay frees, per GPU model: freed A100s do not place a pod
    that asks for H100s. Demand that names no model takes what is left over
    of any model. ``gap``: GPUs still missing after the fixes (None when the
    overlay's effect is unknown). Free GPUs split over nodes need
    consolidating first (the fragmentation table says where)."""
    known = freed.get("known", False)
    overlay = {m["model"]: m["freed"] for m in freed.get("by_model") or []} if known else {}
    spare_free = {m: int(v + 1e-9) for m, v in (free or {}).items()}
    rows = []
    ordered = sorted(demand.get("by_model") or [], key=lambda r: r["model"] == "any model")
    for row in ordered:
        want = row["gpus"] or 0
        if row["model"] == "any model":
            from_free = min(sum(spare_free.values()), want)
            from_overlay = min(sum(v for v in overlay.values() if v > 0), want - from_free) if known else None
        else:
            from_free = min(spare_free.get(row["model"], 0), want)
            spare_free[row["model"]] = spare_free.get(row["model"], 0) - from_free
            from_overlay = min(overlay.get(row["model"], 0), want - from_free) if known else None
            if known:
                overlay[row["model"]] = overlay.get(row["model"], 0) - (from_overlay or 0)
        gap = None if not known else max(want - from_free - (from_overlay or 0), 0)
        rows.append(
            {
                "model": row["model"],
                "demand": _whole(row["gpus"]),
                "free_now": _whole(from_free),
                "freed": _whole(from_overlay),
                "gap": _whole(gap),
            }
        )
    return rows


def verdict(
    flow: Sequence[Mapping[str, str]],
    demand: Mapping[str, Any],
    freed: Mapping[str, Any],
    free: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Whether a purchase can be discussed, and why: the diagnostic steps
    done (backed by data), then the hardware demand per GPU model against
    what the tool's own overlay frees."""
    missing = [s["title"] for s in flow if s["status"] != "done"]
    per_model = compare(demand, freed, free)
    gap = None if any(r["gap"] is None for r in per_model) else sum(r["gap"] for r in per_model)
    pending_gpus = demand.get("gpus") or 0
    base = {"per_model": per_model, "gap": gap}
    if missing:
        return {
            **base,
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
            **base,
            "decision": "no_demand",
            "headline": "No purchase case",
            "reason": "No GPU work waits for lack of GPUs on nodes that could run it "
            "(quota, selectors no node satisfies and gates are not hardware demand).",
        }
    if gap is None:
        return {
            **base,
            "decision": "hold",
            "headline": "No large hardware purchase yet",
            "reason": "What the fix overlay would free is unknown for this run, so the demand "
            f"of {pending_gpus:g} GPUs cannot be set against it.",
        }
    if gap == 0:
        return {
            **base,
            "decision": "free_first",
            "headline": "Free capacity first",
            "reason": f"GPUs free now (consolidated where split over nodes) and those the fix "
            f"overlay frees cover, per GPU model, the {pending_gpus:g} GPUs that work waiting for "
            "GPUs asks for.",
        }
    short = ", ".join(f"{r['gap']:g} {r['model']}" for r in per_model if r["gap"])
    return {
        **base,
        "decision": "purchase_case",
        "headline": "A purchase can be discussed",
        "reason": f"Work waiting for GPUs asks for {pending_gpus:g}; after using the free GPUs "
        f"and the fix overlay, {short} would still be missing.",
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
                f"finding(s), {cause['gpus_idle']:g} idle allocated GPUs attributed to it; "
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
