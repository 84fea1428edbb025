"""Counts for the capacity review, from the inventory and the findings (pure).

Two views that dashboards conflate and this report keeps apart:

- **availability**: who holds GPUs (allocation), which hold them with a model
  resident and idle, which are free, and how much work waits for GPUs;
- **activity**: what the held GPUs do (SM activity, VRAM, memory bandwidth,
  PCIe, tensor cores), weighted by the GPUs each pod holds.

Every group (cluster, GPU model or node pool, team, workload) has both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuaudit.facts.types import ClusterFacts, Number, PodFacts, Telemetry
from gpuaudit.kube.timestamps import parse_time
from gpuaudit.model import CATEGORIES, Finding
from gpuaudit.report.gate import ANY_MODEL, STALE_HOURS
from gpuaudit.report.holders import (
    ACTIVE,
    IDLE,
    NO_DATA,
    RESIDENT_IDLE,
    STATES,
    Holder,
    Inventory,
    Waiting,
)
from gpuaudit.report.prices import Prices

# Pending causes in the order an operator should read them.
PENDING_CAUSES = ("allocation", "placement", "quota", "dra", "gated", "unknown")
# A pod pending for lack of free GPUs is the symptom the other causes explain;
# it stays in the scheduler report but is not ranked as a cause.
SYMPTOM_RULES = frozenset({"GPA-AL-102"})
EXAMPLES = 3
TOP = 5
TOP_WORKLOADS = 20


def r1(value: float | None) -> float | int | None:
    """Round GPU counts for output (MIG slices and replicas make fractions)."""
    if value is None:
        return None
    rounded = round(value, 2)
    return int(rounded) if float(rounded).is_integer() else rounded


# --- availability ------------------------------------------------------------------


def state_counts(holders: Iterable[Holder]) -> dict[str, float]:
    counts = dict.fromkeys(STATES, 0.0)
    for h in holders:
        counts[h.state] += h.gpus
    return counts


def _free(node: Any) -> float:
    """GPUs a pod could be scheduled on now: none on a cordoned node."""
    return 0.0 if node.unschedulable else max(node.gpus - node.allocated, 0.0)


def gpu_counts(inventory: Inventory) -> dict[str, float | None]:
    states = state_counts(inventory.holders)
    allocated = sum(states.values())
    free = sum(_free(n) for n in inventory.nodes)
    cordoned = sum(max(n.gpus - n.allocated, 0.0) for n in inventory.nodes if n.unschedulable)
    return {
        "total": r1(inventory.gpus_total),
        "allocated": r1(allocated),
        "active": r1(states[ACTIVE]),
        "resident_idle": r1(states[RESIDENT_IDLE]),
        "idle": r1(states[IDLE]),
        "no_data": r1(states[NO_DATA]),
        "free": r1(free),
        "free_on_cordoned_nodes": r1(cordoned),
    }


def _availability_row(key: str, holders: Sequence[Holder], waiting: Sequence[Waiting]) -> dict:
    states = state_counts(holders)
    return {
        "key": key,
        "allocated": r1(sum(states.values())),
        **{state: r1(value) for state, value in states.items()},
        "pending_pods": len(waiting),
        "pending_gpus": r1(sum(w.gpus for w in waiting)),
    }


def _group(items: Iterable[Any], key: Callable[[Any], str]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return groups


def availability(inventory: Inventory, cluster: str) -> dict[str, list[dict[str, Any]]]:
    holders, waiting = inventory.holders, inventory.waiting
    pools = _group(inventory.nodes, lambda n: n.pool)
    by_pool_holders = _group(holders, lambda h: h.pool)
    # A pending pod belongs to the pool of the model it asks for; without a
    # node pool label the pools are the models.
    by_pool_waiting = _group(waiting, lambda w: w.model or "any model") if inventory.pool_label is None else {}
    by_pool = []
    for pool in sorted(set(pools) | set(by_pool_holders) | set(by_pool_waiting)):
        nodes = pools.get(pool, [])
        row = _availability_row(pool, by_pool_holders.get(pool, []), by_pool_waiting.get(pool, []))
        row["model"] = nodes[0].model if nodes else pool
        row["nodes"] = len(nodes)
        row["total"] = r1(sum(n.gpus for n in nodes))
        row["free"] = r1(sum(_free(n) for n in nodes))
        row["free_on_cordoned_nodes"] = r1(sum(max(n.gpus - n.allocated, 0.0) for n in nodes if n.unschedulable))
        by_pool.append(row)
    teams = _group(holders, lambda h: h.team)
    team_waiting = _group(waiting, lambda w: w.team)
    by_team = [
        _availability_row(team, teams.get(team, []), team_waiting.get(team, []))
        for team in set(teams) | set(team_waiting)
    ]
    by_team.sort(key=lambda r: (-(r["allocated"] or 0) - (r["pending_gpus"] or 0), r["key"]))
    cluster_row = _availability_row(cluster, holders, waiting)
    cluster_row["total"] = r1(inventory.gpus_total)
    cluster_row["free"] = r1(sum(_free(n) for n in inventory.nodes))
    return {
        "by_cluster": [cluster_row],
        "by_pool": by_pool,
        "by_team": by_team,
        "by_workload": workloads(inventory),
    }


def workloads(inventory: Inventory) -> list[dict[str, Any]]:
    """The workloads holding the most GPUs, with what their GPUs do."""
    groups = _group(inventory.holders, lambda h: f"{h.namespace}\0{h.owner_kind}\0{h.owner}")
    rows = []
    for members in groups.values():
        first = members[0]
        states = state_counts(members)
        rows.append(
            {
                "namespace": first.namespace,
                "kind": first.owner_kind,
                "name": first.owner,
                "team": first.team,
                "models": sorted({h.model for h in members}),
                "pods": len(members),
                "allocated": r1(sum(states.values())),
                **{state: r1(value) for state, value in states.items()},
                **_activity_values(members),
            }
        )
    rows.sort(key=lambda r: (-(r["allocated"] or 0), r["namespace"], r["kind"], r["name"]))
    return rows[:TOP_WORKLOADS]


# --- activity ----------------------------------------------------------------------


def _weighted(holders: Sequence[Holder], value: Callable[[Telemetry], Number | None]) -> float | None:
    total = weight = 0.0
    for h in holders:
        v = value(h.observed)
        if isinstance(v, (int, float)):
            total += v * h.gpus
            weight += h.gpus
    return total / weight if weight else None


def _activity_values(holders: Sequence[Holder]) -> dict[str, Any]:
    measured = [h for h in holders if h.state != NO_DATA]
    used = sum(h.observed.fb_used_mean_mib or 0.0 for h in measured)
    capacity = sum(h.observed.fb_total_mib or 0.0 for h in measured if h.observed.fb_used_mean_mib is not None)
    pcie = [(h, h.observed.pcie_mean_bps) for h in measured]
    pcie_bps = [bps for _, bps in pcie if bps is not None]
    pcie_gpus = sum(h.gpus for h, bps in pcie if bps is not None)

    def rounded(value: float | None, digits: int = 3) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "gpus_measured": r1(sum(h.gpus for h in measured)),
        "compute_mean": rounded(_weighted(measured, lambda t: t.compute_mean)),
        "compute_p95": rounded(_weighted(measured, lambda t: t.compute_p95)),
        "vram_used_ratio": rounded(used / capacity) if capacity else None,
        "vram_used_mib": round(used) if measured and capacity else None,
        "memory_bandwidth": rounded(_weighted(measured, lambda t: t.dram_active_mean)),
        "pcie_bps_per_gpu": round(sum(pcie_bps) / pcie_gpus) if pcie_gpus else None,
        "tensor_active": rounded(_weighted(measured, lambda t: t.tensor_active_mean)),
        "occupancy": rounded(_weighted(measured, lambda t: t.occupancy_mean)),
    }


def activity(inventory: Inventory, cluster: str) -> dict[str, list[dict[str, Any]]]:
    def rows(groups: Mapping[str, list[Holder]]) -> list[dict[str, Any]]:
        out = [
            {
                "key": key,
                "allocated": r1(sum(h.gpus for h in members)),
                **_activity_values(members),
            }
            for key, members in groups.items()
        ]
        out.sort(key=lambda r: (-(r["allocated"] or 0), r["key"]))
        return out

    holders = inventory.holders
    return {
        "by_cluster": rows({cluster: list(holders)}),
        "by_pool": rows(_group(holders, lambda h: h.pool)),
        "by_team": rows(_group(holders, lambda h: h.team)),
    }


# --- coverage, cost, pending ---------------------------------------------------------


def coverage(
    inventory: Inventory, telemetry: Mapping[str, Any] | None, collected_at: datetime | None = None
) -> dict[str, Any]:
    """How much of the allocated capacity the telemetry saw: what is not
    covered is 'no data', never idle. ``lag_hours``: how long before the
    snapshot (``collected_at``) the telemetry window ended; ``stale`` when
    more than gate.STALE_HOURS (the window measured another cluster state)."""
    allocated = sum(h.gpus for h in inventory.holders)
    measured = sum(h.gpus for h in inventory.holders if h.state != NO_DATA)
    devices: set[tuple[str, str]] = set()
    nodes = {n.name for n in inventory.nodes}
    window = None
    if telemetry:
        window = telemetry.get("window") or None
        for row in telemetry.get("gpus") or []:
            if row.get("node") in nodes and (row.get("uuid") or row.get("gpu") is not None):
                devices.add((str(row.get("node")), str(row.get("uuid") or row.get("gpu"))))
    signal = ((telemetry or {}).get("signals") or {}).get("compute")
    end = parse_time((window or {}).get("end")) if window else None
    lag = round((collected_at - end).total_seconds() / 3600, 1) if end and collected_at else None
    return {
        "lag_hours": lag,
        "stale": lag is not None and lag > STALE_HOURS,
        "present": bool(telemetry),
        "source": (telemetry or {}).get("source"),
        "signal": signal,
        # What column headings call it: the metric without DCGM's prefix
        # (GR_ENGINE_ACTIVE is not "SM" activity; say which one was used).
        "signal_name": str(signal).removeprefix("DCGM_FI_PROF_").removeprefix("DCGM_FI_DEV_") if signal else None,
        "window": window,
        "allocated_gpus": r1(allocated),
        "allocated_gpus_measured": r1(measured),
        "ratio": round(measured / allocated, 3) if allocated else None,
        "devices_reporting": len(devices),
        "devices_total": r1(inventory.gpus_total),
    }


def hourly_cost(inventory: Inventory, prices: Prices) -> dict[str, Any]:
    """Cost per hour of GPUs by state, at the configured prices (None without)."""
    by_state: dict[str, float] = dict.fromkeys(STATES, 0.0)
    unpriced: set[str] = set()
    for h in inventory.holders:
        price = prices.of(h.model)
        if price is None:
            unpriced.add(h.model)
            continue
        by_state[h.state] += h.gpus * price
    known = prices.known
    idle = by_state[IDLE] + by_state[RESIDENT_IDLE]
    return {
        "priced": known,
        "prices": prices.as_dict(),
        "unpriced_models": sorted(unpriced),
        "allocated_idle_per_hour": round(idle, 2) if known else None,
        "resident_idle_per_hour": round(by_state[RESIDENT_IDLE], 2) if known else None,
        "idle_per_hour": round(by_state[IDLE], 2) if known else None,
        "allocated_per_hour": round(sum(by_state.values()), 2) if known else None,
    }


# Why a waiting pod is not demand more hardware would meet, by cause.
NOT_HARDWARE = {
    "quota": "waits for a Kueue quota: a quota decision, not missing hardware",
    "placement": "no node satisfies its selectors, affinity or tolerations (or has that many GPUs): "
    "a spec or node-label problem, not missing hardware",
    "gated": "held back by a scheduling gate",
    "dra": "waits for a DRA claim to be allocated",
    "unknown": "no known cause (no FailedScheduling event): not counted until one is recorded",
    "allocation": "fits no node that admits it (more GPUs, CPU or memory than any such node has allocatable)",
}


def _sizes(waiting: Iterable[Waiting]) -> list[dict[str, Any]]:
    counts: dict[float, int] = defaultdict(int)
    for w in waiting:
        counts[w.gpus] += 1
    return [{"gpus": r1(size), "pods": n} for size, n in sorted(counts.items(), reverse=True)]


def hardware_demand(inventory: Inventory) -> dict[str, Any]:
    """Pending GPUs that more hardware would place: pods waiting for lack of
    free GPUs on nodes that admit them (a real node shape), per GPU model.
    The rest is listed with the reason it is not hardware demand."""
    demand = [w for w in inventory.waiting if w.hardware_demand]
    by_model = []
    for model, members in sorted(_group(demand, lambda w: w.model or ANY_MODEL).items()):
        by_model.append(
            {
                "model": model,
                "pods": len(members),
                "gpus": r1(sum(w.gpus for w in members)),
                "sizes": _sizes(members),
            }
        )
    excluded = []
    others = _group((w for w in inventory.waiting if not w.hardware_demand), lambda w: w.cause)
    for cause in [*PENDING_CAUSES, *sorted(set(others) - set(PENDING_CAUSES))]:
        waiting = others.get(cause)
        if waiting:
            excluded.append(
                {
                    "cause": cause,
                    "pods": len(waiting),
                    "gpus": r1(sum(w.gpus for w in waiting)),
                    "reason": NOT_HARDWARE.get(cause, "not a lack of GPUs"),
                }
            )
    return {
        "pods": len(demand),
        "gpus": r1(sum(w.gpus for w in demand)),
        "by_model": by_model,
        "excluded": excluded,
    }


def fragmentation(inventory: Inventory) -> list[dict[str, Any]]:
    """Per node shape (GPU model x GPUs per node, schedulable nodes): the free
    GPUs, the largest block of free whole GPUs on one node, and the pending
    request sizes that ask for that model, with whether the block fits them."""
    shapes = _group(
        (n for n in inventory.nodes if not n.unschedulable),
        lambda n: f"{n.model}\0{n.gpus:g}",
    )
    waiting_by_model = _group((w for w in inventory.waiting if w.cause == "allocation"), lambda w: w.model or ANY_MODEL)
    rows = []
    for key in sorted(shapes):
        nodes = shapes[key]
        model, per_node = key.split("\0")
        blocks = [int(max(n.gpus - n.allocated, 0.0) + 1e-9) for n in nodes]
        largest = max(blocks, default=0)
        asking = [*waiting_by_model.get(model, []), *waiting_by_model.get(ANY_MODEL, [])]
        sizes = _sizes(asking)
        for size in sizes:
            size["fits_now"] = (size["gpus"] or 0) <= largest
        rows.append(
            {
                "model": model,
                "gpus_per_node": r1(float(per_node)),
                "nodes": len(nodes),
                "free": r1(sum(max(n.gpus - n.allocated, 0.0) for n in nodes)),
                "largest_free_block": largest,
                "nodes_by_free_block": {str(b): blocks.count(b) for b in sorted(set(blocks), reverse=True)},
                "pending_sizes": sizes,
                "fragmented": any(
                    not s["fits_now"] and (s["gpus"] or 0) <= sum(blocks) and (s["gpus"] or 0) <= float(per_node)
                    for s in sizes
                ),
            }
        )
    return rows


def pending(inventory: Inventory, cluster: ClusterFacts | None) -> dict[str, Any]:
    """The pods that wait for GPUs, by cause; ``cluster``'s facts count the
    Kueue workloads that wait in a queue."""
    groups = _group(inventory.waiting, lambda w: w.cause)
    by_cause = []
    for cause in [*PENDING_CAUSES, *sorted(set(groups) - set(PENDING_CAUSES))]:
        members = groups.get(cause)
        if not members:
            continue
        ordered = sorted(members, key=lambda w: (-w.gpus, w.namespace, w.pod))
        by_cause.append(
            {
                "cause": cause,
                "pods": len(members),
                "gpus": r1(sum(w.gpus for w in members)),
                "examples": [
                    {
                        "namespace": w.namespace,
                        "pod": w.pod,
                        "kind": w.owner_kind,
                        "name": w.owner,
                        "gpus": r1(w.gpus),
                        "message": w.message,
                    }
                    for w in ordered[:EXAMPLES]
                ],
            }
        )
    return {
        "pods": len(inventory.waiting),
        "gpus": r1(sum(w.gpus for w in inventory.waiting)),
        "by_cause": by_cause,
        "hardware_demand": hardware_demand(inventory),
        "fragmentation": fragmentation(inventory),
        "kueue_workloads": cluster.kueue_pending if cluster else 0,
        "kueue_examples": list(cluster.kueue_examples) if cluster else [],
    }


HOURS_PER_MONTH = 730  # 365 x 24 / 12


def showback(inventory: Inventory, prices: Prices, share_unallocated: bool = False) -> list[dict[str, Any]]:
    """Cost per team per month at the configured prices: the GPUs each team
    holds now, priced per GPU model, over 730 hours (None without a price).
    ``coverage``: the share of its GPUs the telemetry measured. A team with
    none measured has its idle GPUs and idle cost unknown (None), never 0;
    one measured in part has them over its measured GPUs only.
    ``efficiency``: the share of its measured GPUs actively computing.
    ``share_unallocated`` (config ``report.share_unallocated``): the cost of
    the GPUs no pod holds (free, and free on cordoned nodes) shared out to the
    teams by the GPUs each holds, as OpenCost and Kubecost share idle
    capacity; None when not asked for."""
    unallocated: float | None = 0.0
    for node in inventory.nodes:
        price = prices.of(node.model)
        spare = max(node.gpus - node.allocated, 0.0)
        if spare and (price is None or unallocated is None):
            unallocated = None
        elif spare and unallocated is not None:
            unallocated += spare * price * HOURS_PER_MONTH  # type: ignore[operator]
    held_total = sum(h.gpus for h in inventory.holders)
    rows: list[dict[str, Any]] = []
    for team, members in _group(inventory.holders, lambda h: h.team).items():
        allocated = idle = 0.0
        priced = True
        for h in members:
            price = prices.of(h.model)
            if price is None:
                priced = False
                continue
            allocated += h.gpus * price * HOURS_PER_MONTH
            if h.state in (IDLE, RESIDENT_IDLE):
                idle += h.gpus * price * HOURS_PER_MONTH
        gpus_held = sum(h.gpus for h in members)
        measured = sum(h.gpus for h in members if h.state != NO_DATA)
        known = measured > 0
        active = sum(h.gpus for h in members if h.state == ACTIVE)
        shared = (
            round(unallocated * gpus_held / held_total)
            if share_unallocated and unallocated is not None and held_total and prices.known
            else None
        )
        rows.append(
            {
                "team": team,
                "gpus": r1(gpus_held),
                "gpus_no_data": r1(gpus_held - measured),
                "coverage": round(measured / gpus_held, 3) if gpus_held else None,
                "gpus_idle": r1(sum(h.gpus for h in members if h.state in (IDLE, RESIDENT_IDLE))) if known else None,
                "cost_per_month": round(allocated) if priced and prices.known else None,
                "idle_cost_per_month": round(idle) if priced and prices.known and known else None,
                "efficiency": round(active / measured, 3) if known else None,
                "unallocated_share_per_month": shared,
            }
        )
    rows.sort(key=lambda r: (-(r["cost_per_month"] or 0), -(r["gpus"] or 0), r["team"]))
    return rows


# --- root causes from the findings ---------------------------------------------------


SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}


def finding_keys(finding: Finding) -> list[tuple[str, ...]]:
    """What a finding is about: ("pod", namespace, name) for each pod it
    covers (``pods`` in its evidence: one finding per workload), ("node",
    name) for a node; nothing for a cluster, config or manifest finding."""
    subject = finding.subject
    target = subject.target if subject is not None else None
    evidence = finding.evidence
    res = finding.resource
    if target == "pod" or "pod" in evidence:
        facts = subject.typed if subject is not None else None
        namespace = str(getattr(facts, "namespace", None) or res.namespace or "")  # a node's facts have none
        pod = facts.pod if isinstance(facts, PodFacts) else None
        names = evidence.get("pods") or [pod or evidence.get("pod") or ""]
        return [("pod", namespace, str(name)) for name in names]
    if target == "node":
        return [("node", res.name)]
    return []


def root_causes(
    findings: Sequence[Finding],
    rules: Iterable[Any],
    inventory: Inventory,
    outcomes: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Findings by category in diagnostic order, then by rule.

    ``gpus``: allocated GPUs the findings' pods hold (or, for a node finding,
    the GPUs allocated on the node); rules may overlap here. ``gpus_idle``:
    idle allocated GPUs (held idle, or with an idle model resident) *attributed*
    to this rule: each such GPU goes to exactly one rule, the first in
    diagnostic order (category, then severity, then rule id) whose findings
    name its pod or its node. So the attributed GPUs of all causes add up to
    at most the idle allocated GPUs; free GPUs and pending requests are never
    in them.

    ``outcomes``: what the fix plan did with each rule's findings (patches
    written and their targets, declines and their reasons;
    pipelines/report.py), None when no plan was made: a cause points at a
    `gpuaudit fix` patch only when the plan writes one for it."""
    known = {r.id: r for r in rules}
    held = {(h.namespace, h.pod): h for h in inventory.holders}
    on_node: dict[str, list[Holder]] = defaultdict(list)
    for h in inventory.holders:
        on_node[h.node].append(h)
    order = [*CATEGORIES, *sorted({f.category for f in findings} - set(CATEGORIES))]

    def holders_of(key: tuple[str, ...]) -> list[Holder]:
        if key[0] == "pod":
            h = held.get((key[1], key[2]))
            return [h] if h is not None else []
        return list(on_node.get(key[1], []))

    # each idle holder -> the first rule, in diagnostic order, that names it
    rank: dict[str, tuple[int, int, str]] = {}
    covers: dict[str, set[tuple[str, str]]] = defaultdict(set)  # rule -> pods it concerns
    for f in findings:
        rank.setdefault(f.rule, (order.index(f.category), SEVERITY_ORDER.get(str(f.severity), 9), f.rule))
        for key in finding_keys(f):
            covers[f.rule].update((h.namespace, h.pod) for h in holders_of(key))
    attributed: dict[tuple[str, str], str] = {}
    for rule_id in sorted(covers, key=lambda r: rank[r]):
        if rule_id in SYMPTOM_RULES:
            continue
        for pod in covers[rule_id]:
            if held[pod].state in (IDLE, RESIDENT_IDLE):
                attributed.setdefault(pod, rule_id)

    by_rule: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_rule[f.rule].append(f)
    categories = []
    for category in order:
        rules_here = []
        for rule_id in sorted(r for r, items in by_rule.items() if items[0].category == category):
            items = by_rule[rule_id]
            first = items[0]
            mine = {pod for pod, rule in attributed.items() if rule == rule_id}
            offenders: dict[tuple[str, str, str], dict[str, Any]] = {}
            for f in items:
                res = f.resource
                row = offenders.setdefault((res.namespace, res.kind, res.name), {"findings": 0, "pods": set()})
                row["findings"] += 1
                for key in finding_keys(f):
                    row["pods"].update((h.namespace, h.pod) for h in holders_of(key))
            top = sorted(
                (
                    {
                        "namespace": ns,
                        "kind": kind,
                        "name": name,
                        "findings": v["findings"],
                        "gpus": r1(sum(held[p].gpus for p in v["pods"])),
                        "gpus_idle": r1(sum(held[p].gpus for p in v["pods"] & mine)),
                    }
                    for (ns, kind, name), v in offenders.items()
                ),
                key=lambda o: (-(o["gpus_idle"] or 0), -(o["gpus"] or 0), -o["findings"], o["namespace"], o["name"]),
            )[:TOP]
            remediation = (first.remediation or {}).get("id")
            rules_here.append(
                {
                    "rule": rule_id,
                    "title": first.title,
                    "severity": first.severity,
                    "findings": len(items),
                    "gpus": r1(sum(held[p].gpus for p in covers.get(rule_id, ()))),
                    "gpus_idle": r1(sum(held[p].gpus for p in mine)),
                    "workloads": len(offenders),
                    "namespaces": len({ns for ns, _, _ in offenders if ns}),
                    "symptom": rule_id in SYMPTOM_RULES,
                    "remediation": remediation,
                    **fix_hint(rule_id, remediation, None if outcomes is None else outcomes.get(rule_id, {})),
                    **_fix_reach(mine, held, None if outcomes is None else outcomes.get(rule_id, {})),
                    "docs": f"gpuaudit rules explain {rule_id}",
                    "requires": list(getattr(known.get(rule_id), "requires", ()) or ()),
                    "top": top,
                    "examples": [f.message for f in items[:EXAMPLES]],
                }
            )
        if rules_here:
            rules_here.sort(key=lambda r: (-(r["gpus_idle"] or 0), -(r["gpus"] or 0), -r["findings"], r["rule"]))
            pods_here = set().union(*(covers.get(r["rule"], set()) for r in rules_here))
            categories.append(
                {
                    "category": category,
                    "findings": sum(r["findings"] for r in rules_here),
                    "gpus": r1(sum(held[p].gpus for p in pods_here)),
                    "gpus_idle": r1(sum(r["gpus_idle"] or 0 for r in rules_here)),
                    "rules": rules_here,
                }
            )
    return categories


def idle_unattributed(causes: Sequence[Mapping[str, Any]], gpus: Mapping[str, Any]) -> float | None:
    """Idle allocated GPUs no finding names."""
    idle = (gpus.get("idle") or 0) + (gpus.get("resident_idle") or 0)
    return r1(max(idle - sum(c["gpus_idle"] or 0 for c in causes), 0.0))


def _fix_reach(
    mine: Iterable[tuple[str, str]], held: Mapping[tuple[str, str], Holder], outcome: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Of the idle GPUs attributed to a rule, those whose workload the plan
    patches; and, for the rest, the planner's reason for the workload that
    holds the most of them (the manual step that matters most)."""
    if outcome is None:
        return {"gpus_idle_patched": None}
    patched = {tuple(t) for t in outcome.get("targets") or []}
    declined = {(k, ns, n): reason for k, ns, n, reason in outcome.get("declines") or []}
    reached = 0.0
    left: dict[tuple[str, str, str], float] = defaultdict(float)
    for pod in mine:
        h = held[pod]
        key = (h.owner_kind, h.namespace, h.owner)
        if key in patched:
            reached += h.gpus
        elif key in declined:
            left[key] += h.gpus
    extra: dict[str, Any] = {"gpus_idle_patched": r1(reached)}
    if left:
        extra["manual"] = declined[max(left, key=lambda k: (left[k], k))]
    return extra


def fix_hint(rule_id: str, remediation: str | None, outcome: Mapping[str, Any] | None) -> dict[str, Any]:
    """What to do about a rule's findings: the `gpuaudit fix` command when
    the plan writes a patch for at least one of them (``fix``), else the
    manual step the planner names when it declines (``manual``). A
    remediation the planner declines for every finding (``enable-mig``
    always does) is never offered as a patch."""
    none: dict[str, Any] = {"fix": None, "manual": None, "patched": 0, "declined": 0, "patches": []}
    if not remediation:
        return none
    if outcome is None:
        return {**none, "manual": "no fix plan was made for this run"}
    patched, declined = int(outcome.get("patched") or 0), int(outcome.get("declined") or 0)
    reasons = list(outcome.get("reasons") or [])
    # rules whose patches this rule's need in the same overlay (the time-slicing config)
    with_rules = list(outcome.get("with_rules") or [])
    return {
        "fix": f"gpuaudit fix --snapshot SNAPSHOT --rules {','.join([rule_id, *with_rules])} --out overlays/gpuaudit"
        if patched
        else None,
        "manual": reasons[0] if reasons else (None if patched else "gpuaudit writes no patch for these findings"),
        "patched": patched,
        "declined": declined,
        "patches": list(outcome.get("remediations") or []),
    }


def biggest_causes(causes: Sequence[Mapping[str, Any]], count: int = 3) -> list[dict[str, Any]]:
    """The rules with the most idle allocated GPUs attributed to them
    (symptoms left out), biggest first."""
    rules = [
        {**r, "category": c["category"]}
        for c in causes
        for r in c["rules"]
        if not r["symptom"] and (r["gpus_idle"] or 0) > 0
    ]
    rules.sort(key=lambda r: (-(r["gpus_idle"] or 0), -(r["gpus"] or 0), -r["findings"], r["rule"]))
    return [
        {
            "rule": r["rule"],
            "title": r["title"],
            "category": r["category"],
            "gpus": r["gpus"],
            "gpus_idle": r["gpus_idle"],
            "findings": r["findings"],
            "workloads": r["workloads"],
            "fix": r.get("fix"),
            "manual": r.get("manual"),
            "gpus_idle_patched": r.get("gpus_idle_patched"),
            "patched": r.get("patched"),
            "patches": r.get("patches"),
        }
        for r in rules[:count]
    ]
