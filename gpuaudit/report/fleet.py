"""A fleet review: several clusters' reviews, side by side, with totals (pure).

Each cluster keeps its own review (its own document, rendered and recorded
on its own, its history keyed by its name); the fleet document lays their
first screens out per cluster and adds them up. A total is the sum of the
clusters' figures, or unknown (None) when any cluster's figure is unknown:
a partial cluster never makes the fleet look smaller.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

VERSION = 1
COUNTS = ("total", "allocated", "active", "resident_idle", "idle", "no_data", "free", "free_on_cordoned_nodes")
# The fleet's verdict is its most cautious cluster's.
CAUTION = ("hold", "purchase_case", "free_first", "no_demand")


def _sum(values: Iterable[Any]) -> float | int | None:
    total: float = 0
    for value in values:
        if value is None:
            return None
        total += value
    rounded = round(total, 2)
    return int(rounded) if float(rounded).is_integer() else rounded


def _row(document: Mapping[str, Any], folder: str) -> dict[str, Any]:
    first = document["first_screen"]
    return {
        "cluster": document["cluster"],
        "folder": folder,
        "collected_at": document["collected_at"],
        "partial": bool(document.get("partial")),
        "gpus": {key: first["gpus"].get(key) for key in COUNTS},
        "pending_gpus": first["pending"]["gpus"],
        "hardware_gpus": first["pending"]["hardware_gpus"],
        "achievable": first["whatif"]["achievable"],
        "hardware_gap": first["hardware_needed"]["gap"],
        "idle_cost_per_hour": first["cost"]["allocated_idle_per_hour"],
        "idle_cost_per_month": first["cost"]["allocated_idle_per_month"],
        "telemetry": {
            "coverage": first["coverage"]["ratio"],
            "allocated_gpus_measured": first["coverage"]["allocated_gpus_measured"],
            "window": first["coverage"].get("window"),
            "stale": first["coverage"].get("stale"),
        },
        "decision": first["gate"]["decision"],
        "headline": first["gate"]["headline"],
    }


def fleet(documents: Sequence[tuple[Mapping[str, Any], str]], *, generated_at: str) -> dict[str, Any]:
    """The fleet document of ``documents``: (a cluster's review, the folder
    it was written to)."""
    rows = [_row(document, folder) for document, folder in documents]
    totals = {
        "gpus": {key: _sum(r["gpus"][key] for r in rows) for key in COUNTS},
        **{
            key: _sum(r[key] for r in rows)
            for key in (
                "pending_gpus",
                "hardware_gpus",
                "achievable",
                "hardware_gap",
                "idle_cost_per_hour",
                "idle_cost_per_month",
            )
        },
    }
    measured = _sum(r["telemetry"]["allocated_gpus_measured"] for r in rows)
    allocated = totals["gpus"]["allocated"]
    totals["telemetry_coverage"] = round(measured / allocated, 3) if measured is not None and allocated else None
    needed: dict[str, list[Any]] = defaultdict(list)
    for document, _ in documents:
        hardware = document["first_screen"]["hardware_needed"]
        if hardware["gap"] is None:
            needed["unknown"].append(document["cluster"])
        for model in hardware["per_model"]:
            needed[model["model"]].append(model["gap"])
    per_model = [{"model": model, "gap": _sum(gaps)} for model, gaps in sorted(needed.items()) if model != "unknown"]
    actions = [
        {**action, "cluster": document["cluster"]}
        for document, _ in documents
        for action in document["first_screen"]["actions"]
    ]
    actions.sort(
        key=lambda a: (
            -(a["usd_per_month"] or 0),
            -(a["gpus_freed"] or 0),
            a["cluster"],
            (a["workload"] or {}).get("name") or a["title"],
        )
    )
    showback: dict[str, dict[str, Any]] = {}
    for document, _ in documents:
        for team in document.get("showback") or []:
            row = showback.setdefault(
                team["team"], {"team": team["team"], "gpus": [], "cost_per_month": [], "idle_cost_per_month": []}
            )
            for key in ("gpus", "cost_per_month", "idle_cost_per_month"):
                row[key].append(team[key])
    teams = [{k: v if k == "team" else _sum(v) for k, v in row.items()} for row in showback.values()]
    teams.sort(key=lambda t: (-(t["cost_per_month"] or 0), -(t["gpus"] or 0), t["team"]))
    decisions = [r["decision"] for r in rows]
    decision = min(decisions, key=lambda d: CAUTION.index(d) if d in CAUTION else -1) if rows else "no_demand"
    currency = documents[0][0]["first_screen"]["cost"]["currency"] if documents else "USD"
    return {
        "version": VERSION,
        "kind": "gpuaudit-fleet-report",
        "generated_at": generated_at,
        "currency": currency,
        "partial": any(r["partial"] for r in rows),
        "clusters": rows,
        "totals": totals,
        "hardware_needed": {"per_model": per_model, "unknown_in": needed.get("unknown", [])},
        "actions": actions[:5],
        "showback": teams,
        "decision": decision,
        "headline": next((r["headline"] for r in rows if r["decision"] == decision), "No purchase case"),
    }
