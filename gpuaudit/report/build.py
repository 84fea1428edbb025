"""Assemble the capacity review as one JSON-ready dict (pure).

:func:`analyse` computes everything a snapshot and its audit say;
:func:`run_summary` is the row the history keeps of it; :func:`assemble` adds
what needs the history (GPU-hours over the period, the trend) and lays out
the document that report.json is and report.html/report.md are rendered from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuaudit import __version__
from gpuaudit.model import CATEGORIES, AuditResult, ClusterState
from gpuaudit.report import gate, summary
from gpuaudit.report.history import RunSummary
from gpuaudit.report.holders import Inventory, Thresholds, collect, pod_fact_index
from gpuaudit.report.period import Period, integrate, trend
from gpuaudit.report.prices import Prices, parse_prices
from gpuaudit.report.whatif import WhatIfSettings, simulate

VERSION = 1
GATE_RULE = "No large hardware purchase before the diagnostic flow has run."


@dataclass(frozen=True)
class ReportSettings:
    prices: Prices = field(default_factory=Prices)
    team_label: str | None = None
    pool_label: str | None = None
    cluster_name: str | None = None
    currency: str = "USD"
    whatif: WhatIfSettings = field(default_factory=WhatIfSettings)


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
    )


def cluster_name(report: Mapping[str, Any], snapshot: Mapping[str, Any]) -> str:
    """How the report names the cluster (and keys its history): config
    ``report.cluster_name``, else the kubeconfig context, else the API server."""
    cluster = snapshot.get("cluster") or {}
    return str(report.get("cluster_name") or cluster.get("context") or cluster.get("server") or "snapshot")


@dataclass(frozen=True)
class Analysis:
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


def analyse(
    state: ClusterState,
    subjects: Iterable[Any],
    result: AuditResult,
    settings: ReportSettings,
) -> Analysis:
    subjects = list(subjects)
    thresholds = Thresholds.from_rules(result.rules)
    inventory = collect(
        state,
        pod_fact_index(subjects),
        thresholds,
        team_label=settings.team_label,
        pool_label=settings.pool_label,
    )
    cluster_doc = next((s.facts for s in subjects if s.target == "cluster"), {})
    cluster = settings.cluster_name or state.source
    gpus = summary.gpu_counts(inventory)
    coverage = summary.coverage(inventory, state.telemetry)
    pending = summary.pending(inventory, cluster_doc)
    causes = summary.root_causes(result.findings, result.rules, inventory)
    biggest = summary.biggest_causes(causes)
    whatif = simulate(inventory, thresholds, settings.whatif)
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
        extra_metrics=_extra_metrics(state.telemetry),
        sharing={
            "nodes": (cluster_doc.get("sharing") or {}).get("active_nodes") or 0,
            "pods": shared_pods,
        },
        workloads=len(workloads),
    )
    decision = gate.verdict(flow, pending["gpus"] or 0.0, whatif["best"])
    by_category = Counter(f.category for f in result.findings)
    document: dict[str, Any] = {
        "gpus": gpus,
        "cost_per_hour": summary.hourly_cost(inventory, settings.prices),
        "coverage": coverage,
        "pending": pending,
        "availability": summary.availability(inventory, cluster),
        "activity": summary.activity(inventory, cluster),
        "root_causes": causes,
        "biggest_causes": biggest,
        "whatif": whatif,
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
            },
            "team_label": settings.team_label,
            "pool_label": settings.pool_label,
            "time_slicing_replicas": settings.whatif.time_slicing_replicas,
            "vram_headroom": settings.whatif.vram_headroom,
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
        pending_pods=doc["pending"]["pods"],
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
    doc = analysis.document
    hours = integrate(runs, period, analysis.collected_at)
    cost = doc["cost_per_hour"]
    first_screen = {
        "gpus": doc["gpus"],
        "gpu_hours": hours,
        "cost": {
            "currency": settings.currency,
            "priced": cost["priced"],
            "allocated_idle_per_hour": cost["allocated_idle_per_hour"],
            "allocated_idle_over_period": hours["idle_cost"],
            "allocated_over_period": hours["allocated_cost"],
        },
        "coverage": {
            "ratio": doc["coverage"]["ratio"],
            "allocated_gpus_measured": doc["coverage"]["allocated_gpus_measured"],
            "allocated_gpus": doc["coverage"]["allocated_gpus"],
            "present": doc["coverage"]["present"],
        },
        "pending": {"pods": doc["pending"]["pods"], "gpus": doc["pending"]["gpus"]},
        "biggest_causes": doc["biggest_causes"],
        "whatif": doc["whatif"]["best"],
        "gate": doc["gate"]["verdict"],
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
        "period": {
            "name": period.name,
            "start": _iso(period.start),
            "end": _iso(period.end),
            "hours": round(period.hours, 1),
        },
        "first_screen": first_screen,
        "availability": doc["availability"],
        "activity": doc["activity"],
        "scheduler": doc["pending"],
        "root_causes": doc["root_causes"],
        "whatif": doc["whatif"],
        "trend": trend(runs, analysis.collected_at),
        "gate": doc["gate"],
        "cost_per_hour": cost,
        "coverage": doc["coverage"],
        "findings": doc["findings"],
        "method": method,
    }
