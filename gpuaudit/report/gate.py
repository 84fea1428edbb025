"""The decision gate: no large hardware purchase before the diagnostic flow
has run. Which steps the data shows as done, which are not, what to do in the
first week, and the verdict (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpuaudit.facts.types import Number, Telemetry
from gpuaudit.report.holders import Holder

MIN_COVERAGE = 0.8  # share of allocated GPUs with telemetry for "residency measured"
MIN_SIGNAL_COVERAGE = 0.5  # share of allocated GPUs an application signal must cover for its step
STALE_HOURS = 24.0  # telemetry that ends this long before the snapshot describes another cluster state
MAX_UNKNOWN_PENDING = 0.1  # share of pending pods without a known cause
APPLICATION_SIGNALS = ("pcie", "occupancy", "tensor", "nvlink")
# The per-pod telemetry value each application signal fills.
SIGNAL_VALUES: dict[str, Callable[[Telemetry], Number | None]] = {
    "pcie": lambda t: t.pcie_mean_bps,
    "occupancy": lambda t: t.occupancy_mean,
    "tensor": lambda t: t.tensor_active_mean,
    "nvlink": lambda t: t.nvlink_mean_bps,
}


def signal_coverage(holders: Iterable[Holder]) -> dict[str, float]:
    """Allocated GPUs whose pod has a value for each application signal (a
    signal named in the snapshot with every value null covers nothing), and
    for the application's own metrics (``extra``)."""
    covered = dict.fromkeys([*APPLICATION_SIGNALS, "extra"], 0.0)
    for h in holders:
        t = h.observed
        for name in APPLICATION_SIGNALS:
            if isinstance(SIGNAL_VALUES[name](t), (int, float)):
                covered[name] += h.gpus
        if any(v is not None for v in t.extra.values()):
            covered["extra"] += h.gpus
    return covered


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
    signals_measured: Mapping[str, float],
    extra_metrics: Sequence[str],
    sharing: Mapping[str, Any],
    workloads: int,
    min_coverage: float = MIN_COVERAGE,
    min_signal_coverage: float = MIN_SIGNAL_COVERAGE,
    telemetry_lag_hours: float | None = None,
) -> list[dict[str, str]]:
    """The five steps of the diagnostic flow and whether the data shows each done.

    A step that rests on telemetry is done only when its signals cover most
    of the allocated GPUs: residency at ``min_coverage``, the application
    signals at ``min_signal_coverage`` (one GPU of a hundred with a PCIe
    series is not an application measured). ``signals_measured``: allocated
    GPUs with a value per signal (:func:`signal_coverage`).
    ``telemetry_lag_hours``: how long before the snapshot the telemetry
    window ended; more than STALE_HOURS leaves residency partial."""
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
    elif telemetry_lag_hours is not None and telemetry_lag_hours > STALE_HOURS:
        status = "partial"
        evidence = (
            f"the telemetry window ended {_age(telemetry_lag_hours)} before the snapshot: it measured "
            "another cluster state"
        )
    elif ratio is not None and ratio >= min_coverage:
        status = "done"
        evidence = f"telemetry covers {ratio:.0%} of allocated GPUs (at least {min_coverage:.0%} needed)"
    else:
        status = "partial"
        evidence = f"telemetry covers {ratio or 0:.0%} of allocated GPUs (at least {min_coverage:.0%} needed)"
    out.append(
        _step(
            "residency",
            "Residency measured",
            status,
            evidence,
            "Point `gpuaudit audit --prometheus URL` at the Prometheus that scrapes the DCGM "
            "exporter on every GPU node (or run `gpuaudit sample` where there is none), so "
            f"at least {min_coverage:.0%} of allocated GPUs report VRAM and activity.",
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

    allocated = float(gpus.get("allocated") or 0)

    def share(name: str) -> float:
        return (signals_measured.get(name) or 0.0) / allocated if allocated else 0.0

    measured = {s: share(s) for s in (*APPLICATION_SIGNALS, "extra") if (signals_measured.get(s) or 0) > 0}
    empty = [s for s in APPLICATION_SIGNALS if signals.get(s) and s not in measured]
    named = {s: ", ".join(extra_metrics) if s == "extra" and extra_metrics else s for s in measured}
    covering = [s for s, ratio in measured.items() if ratio >= min_signal_coverage]
    listed = "; ".join(f"{named[s]} covers {measured[s]:.0%} of allocated GPUs" for s in measured)
    if covering:
        status = "done"
        evidence = f"{listed} (at least {min_signal_coverage:.0%} needed)"
    elif measured:
        status = "partial"
        evidence = f"{listed}: less than the {min_signal_coverage:.0%} needed"
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


def _age(hours: float) -> str:
    return f"{hours / 24:.0f} days" if hours >= 48 else f"{hours:.0f} h"


def _whole(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(value, 2)


ANY_MODEL = "any model"


def compare(
    pods: Sequence[Mapping[str, Any]],
    freed: Mapping[str, Any],
    free_nodes: Mapping[str, tuple[str, float]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hardware demand against the GPUs free now and those the overlay frees,
    pod by pod: a waiting pod takes free GPUs only on the nodes that admit it
    (``nodes``: its selectors, affinity, tolerations, GPU count, CPU and
    memory), and freed GPUs only of the GPU models those nodes have: free
    H100s behind a taint the pod does not tolerate, or freed A100s for a pod
    that asks for H100s, place nothing. Pods are taken model-specific first,
    largest first. Rows per the model the pods ask for (``any model`` when
    they name none); ``gap``: GPUs still missing after the fixes (None when
    the overlay's effect is unknown). Free GPUs split over nodes need
    consolidating first (the fragmentation table says where).

    Returns (rows, unusable): ``unusable`` the free GPUs per model on nodes
    none of the waiting pods may use, so the reader sees why they are not
    subtracted."""
    known = freed.get("known", False)
    overlay = {m["model"]: float(m["freed"]) for m in freed.get("by_model") or []} if known else {}
    nodes = dict(free_nodes or {})
    spare = {name: int(free + 1e-9) for name, (_, free) in nodes.items()}
    rows: dict[str, dict[str, Any]] = {}
    usable: set[str] = set()
    ordered = sorted(pods, key=lambda p: (p["model"] == ANY_MODEL, -float(p["gpus"] or 0), p["model"]))
    for pod in ordered:
        want = float(pod["gpus"] or 0)
        admitting = [n for n in pod.get("nodes") or () if n in spare]
        usable.update(admitting)
        taken = 0.0
        for name in sorted(admitting, key=lambda n: (-spare[n], n)):
            if taken >= want:
                break
            step = min(spare[name], want - taken)
            spare[name] -= int(step)
            taken += step
        from_overlay: float | None = None
        if known:
            from_overlay = 0.0
            for model in sorted({nodes[n][0] for n in admitting}):
                step = min(overlay.get(model, 0.0), want - taken - from_overlay)
                if step > 0:
                    overlay[model] -= step
                    from_overlay += step
        start = 0.0 if known else None
        row = rows.setdefault(
            pod["model"],
            {"model": pod["model"], "pods": 0, "demand": 0.0, "free_now": 0.0, "freed": start, "gap": start},
        )
        row["pods"] += 1
        row["demand"] += want
        row["free_now"] += taken
        if known:
            row["freed"] += from_overlay or 0.0
            row["gap"] += max(want - taken - (from_overlay or 0.0), 0.0)
    out = []
    for key in sorted(rows, key=lambda m: (m == ANY_MODEL, m)):
        row = rows[key]
        out.append({k: (_whole(v) if k in ("demand", "free_now", "freed", "gap") else v) for k, v in row.items()})
    unusable: dict[str, float] = {}
    for name, (model, free) in nodes.items():
        if name not in usable and int(free + 1e-9) > 0:
            unusable[model] = unusable.get(model, 0) + int(free + 1e-9)
    return out, [{"model": m, "free": unusable[m]} for m in sorted(unusable)]


def verdict(
    flow: Sequence[Mapping[str, str]],
    demand: Mapping[str, Any],
    freed: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] = (),
    free_nodes: Mapping[str, tuple[str, float]] | None = None,
) -> dict[str, Any]:
    """Whether a purchase can be discussed, and why: the diagnostic steps
    done (backed by data), then the hardware demand (``pods``: each waiting
    pod's model, GPUs and admitting nodes) against the free GPUs it may use
    and what the tool's own overlay frees (:func:`compare`)."""
    missing = [s["title"] for s in flow if s["status"] != "done"]
    per_model, unusable = compare(pods, freed, free_nodes)
    gap = None if any(r["gap"] is None for r in per_model) else _whole(sum(r["gap"] for r in per_model))
    pending_gpus = demand.get("gpus") or 0
    base = {"per_model": per_model, "gap": gap, "free_unusable": unusable}
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
