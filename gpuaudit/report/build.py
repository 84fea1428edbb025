"""Assemble the capacity review as one JSON-ready dict (pure).

:func:`analyse` computes everything a snapshot and its audit say;
:func:`run_summary` is the row the history keeps of it; :func:`assemble` adds
what needs the history (GPU-hours over the period, the trend) and lays out
the document that report.json is and report.html/report.md are rendered from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from gpuaudit import __version__
from gpuaudit.facts.types import ClusterFacts
from gpuaudit.model import CATEGORIES, AuditResult, ClusterState
from gpuaudit.report import actions, gate, summary
from gpuaudit.report.history import RunSummary
from gpuaudit.report.holders import Inventory, Thresholds, collect, pod_fact_index
from gpuaudit.report.period import Period, forecast, integrate, trend
from gpuaudit.report.prices import Prices, parse_prices
from gpuaudit.report.whatif import WhatIfSettings, simulate

VERSION = 1
GATE_RULE = "No large hardware purchase before the diagnostic flow has run."


class ReportSettings(msgspec.Struct, frozen=True):
    prices: Prices = msgspec.field(default_factory=Prices)
    team_label: str | None = None
    pool_label: str | None = None
    cluster_name: str | None = None
    currency: str = "USD"
    whatif: WhatIfSettings = msgspec.field(default_factory=WhatIfSettings)
    # the share of allocated GPUs the telemetry (residency) and an application
    # signal must cover for their diagnostic step to count as done
    min_telemetry_coverage: float = gate.MIN_COVERAGE
    min_signal_coverage: float = gate.MIN_SIGNAL_COVERAGE
    # showback: the cost of GPUs no pod holds shared out to the teams
    share_unallocated: bool = False


def settings_from_config(
    report: Mapping[str, Any],
    *,
    price_overrides: Sequence[str] = (),
    time_slicing_replicas: int | None = None,
) -> ReportSettings:
    """Settings from config ``report:`` and the command line (which wins).
    Raises ValueError (PriceError) for a price that is not a number."""
    replicas = time_slicing_replicas or int(report.get("time_slicing_replicas") or 4)
    return ReportSettings(
        prices=parse_prices(report.get("gpu_hour_price"), price_overrides),
        team_label=report.get("team_label") or None,
        pool_label=report.get("pool_label") or None,
        cluster_name=report.get("cluster_name") or None,
        currency=str(report.get("currency") or "USD"),
        whatif=WhatIfSettings(
            time_slicing_replicas=replicas,
            vram_headroom=float(report.get("vram_headroom", 0.2)),
        ),
        min_telemetry_coverage=float(report.get("min_telemetry_coverage", gate.MIN_COVERAGE)),
        min_signal_coverage=float(report.get("min_signal_coverage", gate.MIN_SIGNAL_COVERAGE)),
        share_unallocated=bool(report.get("share_unallocated", False)),
    )


def cluster_name(report: Mapping[str, Any], snapshot: Mapping[str, Any]) -> str:
    """How the report names the cluster (and keys its history): config
    ``report.cluster_name``, else the kubeconfig context, else the API server."""
    cluster = snapshot.get("cluster") or {}
    return str(report.get("cluster_name") or cluster.get("context") or cluster.get("server") or "snapshot")


class Analysis(msgspec.Struct, frozen=True):
    """What one snapshot and its audit say; ``document`` is JSON-ready."""

    cluster: str
    collected_at: datetime
    inventory: Inventory
    document: dict[str, Any]


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _rules_run(result: AuditResult) -> list[Any]:
    """Rules that judged something: not skipped for a missing input (rules
    skipped for thin telemetry on some pods did run on the others)."""
    not_run = {s.rule for s in result.skipped if not s.reason.startswith("insufficient data for ")}
    return [r for r in result.rules if r.id not in not_run]


def _extra_metrics(telemetry: Mapping[str, Any] | None) -> list[str]:
    names: set[str] = set()
    for row in (telemetry or {}).get("pods") or []:
        names.update(k for k, v in (row.get("extra") or {}).items() if v is not None)
    return sorted(names)


PARTIAL_COUNTS = ("total", "allocated", "active", "resident_idle", "idle", "no_data", "free", "free_on_cordoned_nodes")


def partial_input(state: ClusterState) -> dict[str, Any]:
    """What this run could not read, and which numbers that makes unknown.
    A partial run is shown with a banner, its affected numbers as null
    (unknown, never zero), and is not recorded in the history."""
    unread = sorted(state.unread)
    unknown_nodes = list(state.unknown_gpu_nodes)
    unknown: list[str] = []
    if {"pods", "nodes"} & set(unread):
        counts = PARTIAL_COUNTS if "nodes" in unread else tuple(k for k in PARTIAL_COUNTS if k != "total")
        unknown = [*counts, "pending", "cost", "coverage", "whatif", "root_causes", "showback"]
    elif unknown_nodes:
        unknown = ["total", "free", "free_on_cordoned_nodes"]
    if "events" in unread and "pending" not in unknown:
        # without FailedScheduling events no waiting pod has a known cause:
        # the demand more hardware would meet is unknown, not zero
        unknown.append("hardware_demand")
    partial = bool(unread or unknown_nodes)
    parts = []
    if unread:
        parts.append("could not read " + ", ".join(unread))
    if unknown_nodes:
        named = ", ".join(unknown_nodes[:5]) + (f" and {len(unknown_nodes) - 5} more" if len(unknown_nodes) > 5 else "")
        parts.append(f"the GPUs of {len(unknown_nodes)} node(s) are unknown ({named})")
    return {
        "partial": partial,
        "unread": unread,
        "unknown_gpu_nodes": unknown_nodes,
        "unknown": unknown,
        "banner": (
            "Partial input: "
            + "; ".join(parts)
            + ". The numbers that depend on it are shown as unknown, and this run is not recorded in the trend."
        )
        if partial
        else None,
    }


def _usd_month(gpus: float | None, price: float | None) -> int | None:
    if gpus is None or price is None:
        return None
    return round(gpus * price * summary.HOURS_PER_MONTH)


def _actions(inventory: Inventory, reached: Mapping[str, Any], prices: Prices, *, partial: bool) -> dict[str, Any]:
    """The actions; on partial input none, and the money they would cover unknown."""
    if not partial:
        return actions.plan(inventory, reached, prices)
    empty = actions.plan(Inventory((), (), (), None, None), {}, prices)
    return {**empty, **{k: None for k in empty if k.endswith("_usd_per_month")}}


def analyse(
    state: ClusterState,
    subjects: Iterable[Any],
    result: AuditResult,
    settings: ReportSettings,
    overlay: Mapping[str, Any] | None = None,
) -> Analysis:
    """``overlay``: what `gpuaudit fix` would write for this cluster, as plain
    data (pipelines/report.py makes it); without it the achievable what-if
    is unknown."""
    subjects = list(subjects)
    thresholds = Thresholds.from_rules(result.rules)
    inventory = collect(
        state,
        pod_fact_index(subjects),
        thresholds,
        team_label=settings.team_label,
        pool_label=settings.pool_label,
    )
    cluster_facts = next((s.facts_as(ClusterFacts) for s in subjects if s.target == "cluster"), None)
    cluster = settings.cluster_name or state.source
    partial = partial_input(state)
    unknown = set(partial["unknown"])
    gpus = summary.gpu_counts(inventory)
    for key in PARTIAL_COUNTS:
        if key in unknown:
            gpus[key] = None
    coverage = summary.coverage(inventory, state.telemetry, state.collected_at)
    pending = summary.pending(inventory, cluster_facts)
    planned = overlay.get("rules") if overlay is not None and overlay.get("available") else None
    causes = summary.root_causes(result.findings, result.rules, inventory, planned)
    biggest = summary.biggest_causes(causes)
    whatif = simulate(inventory, thresholds, settings.whatif, None if "whatif" in unknown else overlay)
    reached = whatif["achievable"]
    workloads = {(h.namespace, h.owner_kind, h.owner) for h in inventory.holders}
    shared_pods = sum(1 for h in inventory.holders if h.mig_profiles or h.whole == 0)
    errors = [e.message for e in state.errors if e.level == "error"]
    flow = gate.steps(
        rules_run=_rules_run(result),
        errors=errors,
        gpus=gpus,
        coverage=coverage,
        pending=pending,
        signals=(state.telemetry or {}).get("signals") or {},
        signals_measured=gate.signal_coverage(inventory.holders),
        extra_metrics=_extra_metrics(state.telemetry),
        sharing={
            "nodes": cluster_facts.sharing.active_nodes if cluster_facts else 0,
            "pods": shared_pods,
        },
        workloads=len(workloads),
        min_coverage=settings.min_telemetry_coverage,
        min_signal_coverage=settings.min_signal_coverage,
        telemetry_lag_hours=coverage["lag_hours"],
    )
    demand_pods = [
        {"model": w.model or gate.ANY_MODEL, "gpus": w.gpus, "nodes": w.nodes}
        for w in inventory.waiting
        if w.hardware_demand
    ]
    free_nodes = {n.name: (n.model, max(n.gpus - n.allocated, 0.0)) for n in inventory.nodes if not n.unschedulable}
    decision = gate.verdict(flow, pending["hardware_demand"], reached, demand_pods, free_nodes)
    if "hardware_demand" in unknown:
        decision = {
            **decision,
            "gap": None,
            "per_model": [],
            "free_unusable": [],
            **(
                {}
                if decision["decision"] == "hold"
                else {
                    "decision": "hold",
                    "headline": "No large hardware purchase yet",
                    "reason": "Scheduler events could not be read, so the hardware demand is unknown.",
                }
            ),
        }
    if "whatif" in unknown:  # neither what is freed nor what waits is known
        decision = {**decision, "gap": None, "per_model": [], "free_unusable": []}
        whatif["best"].update(theoretical_low=None, theoretical_high=None)
    by_category = Counter(f.category for f in result.findings)
    cost = summary.hourly_cost(inventory, settings.prices)
    if "cost" in unknown:
        cost = {**cost, **{k: None for k in cost if k.endswith("_per_hour")}}
    if "pending" in unknown:
        pending = {**pending, "pods": None, "gpus": None}
    if {"pending", "hardware_demand"} & unknown:
        pending = {
            **pending,
            "hardware_demand": {**pending["hardware_demand"], "pods": None, "gpus": None, "by_model": []},
        }
    if "coverage" in unknown:
        coverage = {**coverage, "ratio": None, "allocated_gpus": None, "allocated_gpus_measured": None}
    availability = summary.availability(inventory, cluster)
    if "allocated" in unknown:
        for row in [*availability["by_cluster"], *availability["by_pool"]]:
            row.update({k: None for k in row if k not in ("key", "model", "nodes", "total")})
        availability["by_team"], availability["by_workload"] = [], []
    document: dict[str, Any] = {
        "partial": partial,
        "gpus": gpus,
        "cost_per_hour": cost,
        "coverage": coverage,
        "pending": pending,
        "availability": availability,
        "activity": summary.activity(inventory, cluster),
        "root_causes": causes,
        "biggest_causes": biggest,
        "idle_unattributed": None if "root_causes" in unknown else summary.idle_unattributed(causes, gpus),
        "whatif": whatif,
        "actions": _actions(inventory, reached, settings.prices, partial=partial["partial"]),
        "showback": []
        if "showback" in unknown
        else summary.showback(inventory, settings.prices, settings.share_unallocated),
        "gate": {
            "rule": GATE_RULE,
            "steps": flow,
            "verdict": decision,
            "checklist": gate.checklist(flow, biggest),
        },
        "findings": {
            "total": len(result.findings),
            "suppressed": len(result.suppressed),
            "by_category": {c: by_category.get(c, 0) for c in CATEGORIES},
        },
        "method": {
            "thresholds": {
                "active_compute": thresholds.active_compute,
                "resident_idle_fraction": thresholds.resident_idle,
                "min_coverage": thresholds.min_coverage,
                "min_telemetry_coverage": settings.min_telemetry_coverage,
                "min_signal_coverage": settings.min_signal_coverage,
            },
            "team_label": settings.team_label,
            "pool_label": settings.pool_label,
            "share_unallocated": settings.share_unallocated,
            "time_slicing_replicas": settings.whatif.time_slicing_replicas,
            "vram_headroom": settings.whatif.vram_headroom,
            "hours_per_month": summary.HOURS_PER_MONTH,
            "telemetry": result.telemetry,
            "skipped": [s.as_dict() for s in result.skipped],
            "errors": [e.as_dict() for e in result.errors],
        },
    }
    return Analysis(cluster, state.collected_at, inventory, document)


def run_summary(analysis: Analysis, command: str) -> RunSummary:
    doc = analysis.document
    cost = doc["cost_per_hour"]
    return RunSummary(
        cluster=analysis.cluster,
        collected_at=analysis.collected_at,
        command=command,
        gpus={k: v for k, v in doc["gpus"].items() if k != "free_on_cordoned_nodes"},
        pending_pods=doc["pending"]["pods"] or 0,
        pending_gpus=doc["pending"]["gpus"] or 0.0,
        coverage=doc["coverage"]["ratio"],
        idle_cost_per_hour=cost["allocated_idle_per_hour"],
        allocated_cost_per_hour=cost["allocated_per_hour"],
        findings=doc["findings"]["total"],
        detail={"by_category": doc["findings"]["by_category"]},
    )


def assemble(
    analysis: Analysis,
    *,
    runs: Sequence[RunSummary],
    period: Period,
    generated_at: datetime,
    settings: ReportSettings,
    history: str | None,
) -> dict[str, Any]:
    """``runs``: the cluster's recorded runs. A complete run not recorded
    (``--no-record``) still counts for this period's GPU-hours, as the rate
    now; a partial one never does."""
    doc = analysis.document
    partial = doc["partial"]["partial"]
    current = run_summary(analysis, "report")
    if not partial and not any(r.collected_at == current.collected_at for r in runs):
        runs = [*runs, current]
    hours = integrate(runs, period, analysis.collected_at)
    cost = doc["cost_per_hour"]
    verdict = doc["gate"]["verdict"]
    demand = doc["pending"]["hardware_demand"]
    first_screen = {
        "partial": doc["partial"],
        "gpus": doc["gpus"],
        "gpu_hours": hours,
        "cost": {
            "currency": settings.currency,
            "priced": cost["priced"],
            "allocated_idle_per_hour": cost["allocated_idle_per_hour"],
            "allocated_idle_per_month": _usd_month(cost["allocated_idle_per_hour"], 1.0),
            "allocated_idle_over_period": hours["idle_cost"],
            "allocated_over_period": hours["allocated_cost"],
        },
        "coverage": {
            "ratio": doc["coverage"]["ratio"],
            "allocated_gpus_measured": doc["coverage"]["allocated_gpus_measured"],
            "allocated_gpus": doc["coverage"]["allocated_gpus"],
            "present": doc["coverage"]["present"],
            "window": doc["coverage"]["window"],
            "lag_hours": doc["coverage"]["lag_hours"],
            "stale": doc["coverage"]["stale"],
        },
        "pending": {
            "pods": doc["pending"]["pods"],
            "gpus": doc["pending"]["gpus"],
            "hardware_pods": demand["pods"],
            "hardware_gpus": demand["gpus"],
        },
        "biggest_causes": doc["biggest_causes"],
        "idle_unattributed": doc["idle_unattributed"],
        "whatif": doc["whatif"]["best"],
        "actions": doc["actions"]["shown"],
        "actions_cover": {k: v for k, v in doc["actions"].items() if k not in ("shown", "all", "bundles")},
        "hardware_needed": {"gap": verdict["gap"], "per_model": verdict["per_model"]},
        "gate": {k: v for k, v in verdict.items() if k not in ("per_model", "gap", "free_unusable")},
    }
    method = dict(doc["method"])
    method["history"] = history
    return {
        "version": VERSION,
        "kind": "gpuaudit-report",
        "tool": {"name": "gpuaudit", "version": __version__},
        "generated_at": _iso(generated_at),
        "cluster": analysis.cluster,
        "collected_at": _iso(analysis.collected_at),
        "partial": doc["partial"]["partial"],
        "period": {
            "name": period.name,
            "start": _iso(period.start),
            "end": _iso(period.end),
            "hours": round(period.hours),
        },
        "first_screen": first_screen,
        "availability": doc["availability"],
        "activity": doc["activity"],
        "scheduler": doc["pending"],
        "root_causes": doc["root_causes"],
        "whatif": doc["whatif"],
        "actions": doc["actions"]["all"],
        "action_bundles": doc["actions"]["bundles"],
        "showback": doc["showback"],
        "trend": (monthly := trend(runs, analysis.collected_at)),
        "forecast": forecast(monthly),
        "gate": doc["gate"],
        "cost_per_hour": cost,
        "coverage": doc["coverage"],
        "findings": doc["findings"],
        "method": method,
    }
