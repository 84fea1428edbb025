"""The actions that cover the idle money (pure).

A patch gpuaudit writes is one action among several. For every workload that
holds GPUs idle (or with an idle model resident) the review names the one
action that frees the most, with what it is worth per month, who owns the
workload and how to do it:

- ``patch``: the fix overlay moves it to a shared GPU or a MIG slice (the
  GPUs the what-if counts for it);
- ``release``: pods stuck in CrashLoopBackOff, ImagePullBackOff, ... hold
  GPUs and do no work;
- ``consolidate``: a scalable workload (Deployment, StatefulSet) runs more
  replicas than its measured load needs: the replicas whose p95 compute,
  added up, fits in fewer GPUs (each replica kept at its GPU count; replicas
  without telemetry are kept, unknown is never idle);
- ``scale_to_zero``: a model resident on a GPU that sits idle most of the
  window: scaled to zero when idle, the idle share of the window is freed;
- ``stop``: every measured pod idle over the whole window: ask its team
  whether it is still needed, then scale it to zero or delete it;
- ``smaller_gpu``: single-GPU pods whose peak VRAM (with headroom) fits a
  cheaper GPU model the cluster has: the price difference, where prices per
  model say there is one;
- ``ask``: idle pods of a workload no other action fits: a named manual
  action for its owner.

The telemetry aggregate holds no daily shape (means and p95s over the
window), so an off-hours schedule is not derived from it: ``scale_to_zero``
is priced by the share of the window the model sat idle, and says so.

The actions are ranked by money; the review shows the first few, says how
much of the idle cost they cover and how much is left, and keeps every
action in report.json.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuaudit.report.holders import IDLE, NO_DATA, RESIDENT_IDLE, Holder, Inventory
from gpuaudit.report.prices import Prices

HOURS_PER_MONTH = 730  # 365 x 24 / 12, as summary.HOURS_PER_MONTH
SHOWN = 10  # actions on the first screen; all of them are in report.json
SCALABLE = ("Deployment", "StatefulSet", "ReplicaSet")
# ties: the firmer evidence first
KIND_ORDER = ("patch", "release", "consolidate", "scale_to_zero", "stop", "smaller_gpu", "ask")
HEADROOM = 1.2  # peak VRAM and a fifth more must fit the smaller GPU, as the what-if's low estimate
TITLES = {
    "patch": "Share",
    "release": "Release stuck pods of",
    "consolidate": "Consolidate replicas of",
    "scale_to_zero": "Scale to zero when idle:",
    "stop": "Stop (ask first):",
    "smaller_gpu": "Move to a smaller GPU:",
    "ask": "Ask the owner about",
}
LABELS = {
    "patch": "share",
    "release": "release stuck pods",
    "consolidate": "consolidate replicas",
    "scale_to_zero": "scale to zero when idle",
    "stop": "stop (ask first)",
    "smaller_gpu": "move to a smaller GPU",
    "ask": "ask about idle pods",
}

WorkloadKey = tuple[str, str, str]


def _resource(kind: str) -> str:
    return kind.lower()


def _usd(gpus_by_model: Mapping[str, float], prices: Prices) -> int | None:
    total = 0.0
    for model, gpus in gpus_by_model.items():
        price = prices.of(model)
        if price is None:
            return None
        total += gpus * price * HOURS_PER_MONTH
    return round(total)


def _by_model(pods: Sequence[Holder], weight: Callable[[Holder], float] = lambda h: h.gpus) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for h in pods:
        out[h.model] += weight(h)
    return dict(out)


def _n(value: float) -> float | int:
    rounded = round(value, 2)
    return int(rounded) if float(rounded).is_integer() else rounded


def _remove_command(key: WorkloadKey, remaining: int) -> str:
    namespace, kind, name = key
    if kind in SCALABLE:
        return f"kubectl -n {namespace} scale {_resource(kind)}/{name} --replicas={remaining}"
    if kind in ("Job", "Pod"):
        return f"kubectl -n {namespace} delete {_resource(kind)} {name}"
    return f"scale {kind} {namespace}/{name} down through its operator (spec replicas or workers)"


def _patch(
    key: WorkloadKey, row: Mapping[str, Any], pods: Sequence[Holder], prices: Prices, sharing_rules: Sequence[str]
) -> dict[str, Any] | None:
    freed = row.get("freed") or 0
    if not row.get("counted") or freed <= 0 or not pods:
        return None
    # a time-sliced share needs the sharing config's patch in the same overlay
    named = [*(row.get("rules") or []), *([] if row.get("mig_profile") else sharing_rules)]
    rules = ",".join(dict.fromkeys(named)) or "GPA-AL-001"
    target = (row.get("mig_profile") and f"MIG profile {row['mig_profile']}") or f"{row.get('resource')} (time-sliced)"
    how = [
        f"`gpuaudit fix --snapshot SNAPSHOT --rules {rules} --out overlays/gpuaudit`: its "
        f"{row.get('remediation')} patch, {target}"
    ]
    if not row.get("mig_profile"):
        how.append("with the enable-time-slicing patch; label the nodes `nvidia.com/device-plugin.config=shared`")
    model = pods[0].model
    return {
        "kind": "patch",
        "gpus": freed,
        "usd_per_month": _usd({model: freed}, prices),
        "how": how,
        "patch": row.get("remediation"),
        "evidence": f"the fix overlay packs its {len(pods)} pod(s) onto fewer GPUs (memory and p95 compute fit)",
    }


def _release(key: WorkloadKey, pods: Sequence[Holder], prices: Prices) -> dict[str, Any] | None:
    stuck = [h for h in pods if h.stuck]
    if not stuck:
        return None
    namespace, kind, _ = key
    reasons = sorted({h.stuck or "" for h in stuck})
    if kind == "Pod":
        how = [f"kubectl -n {namespace} delete pod {' '.join(sorted(h.pod for h in stuck))}"]
    else:
        how = [
            f"ask team {stuck[0].team} to fix the {', '.join(reasons)}; until then "
            f"`{_remove_command(key, len(pods) - len(stuck))}`"
        ]
    gpus = sum(h.gpus for h in stuck)
    return {
        "kind": "release",
        "gpus": _n(gpus),
        "usd_per_month": _usd(_by_model(stuck), prices),
        "how": how,
        "patch": None,
        "evidence": f"{len(stuck)} pod(s) in {', '.join(reasons)} hold {_n(gpus):g} GPU(s) and do no work",
    }


def _consolidate(key: WorkloadKey, pods: Sequence[Holder], prices: Prices) -> dict[str, Any] | None:
    """Fewer replicas for the measured load: the p95 compute of the measured
    replicas added up (a conservative sum: their peaks need not coincide),
    in replicas of the same GPU count, at least one replica kept."""
    kind = key[1]
    if kind not in SCALABLE or len(pods) < 2:
        return None
    per_pod = pods[0].gpus
    if any(abs(h.gpus - per_pod) > 1e-9 for h in pods) or per_pod <= 0:
        return None
    measured = [h for h in pods if h.state != NO_DATA and h.telemetry]
    p95 = [float(v) for h in measured if isinstance(v := h.observed.compute_p95, (int, float))]
    if not measured or len(p95) < len(measured):
        return None
    load = sum(v * h.gpus for v, h in zip(p95, measured, strict=True))
    needed = max(math.ceil(load / per_pod - 1e-9), 1 if len(measured) == len(pods) else 0)
    keep = len(pods) - len(measured) + needed
    idle = [h for h in measured if h.state in (IDLE, RESIDENT_IDLE)]
    removed = min(len(pods) - keep, len(idle))  # only idle capacity is claimed
    if removed <= 0:
        return None
    freed = removed * per_pod
    return {
        "kind": "consolidate",
        "gpus": _n(freed),
        "usd_per_month": _usd({idle[0].model: freed}, prices),
        "how": [
            f"`{_remove_command(key, len(pods) - removed)}` (or set its autoscaler's maxReplicas and target to that)"
        ],
        "patch": None,
        "evidence": (
            f"the p95 compute of its {len(measured)} measured replica(s) adds up to {load:.2f} GPU(s): "
            f"{needed} replica(s) of {_n(per_pod):g} GPU carry it"
            + (f"; {len(pods) - len(measured)} replica(s) without telemetry kept" if len(measured) < len(pods) else "")
        ),
    }


def _scale_to_zero(key: WorkloadKey, pods: Sequence[Holder], prices: Prices) -> dict[str, Any] | None:
    resident = [h for h in pods if h.state == RESIDENT_IDLE]
    if not resident or key[1] in ("Job", "Pod"):  # a batch pod or a bare pod serves nothing to scale on
        return None

    def idle_share(h: Holder) -> float:
        value = h.observed.resident_idle_fraction
        return h.gpus * float(value) if isinstance(value, (int, float)) else 0.0

    gpus = sum(idle_share(h) for h in resident)
    if gpus <= 0:
        return None
    team = resident[0].team
    return {
        "kind": "scale_to_zero",
        "gpus": _n(gpus),
        "usd_per_month": _usd(_by_model(resident, idle_share), prices),
        "how": [
            f"ask team {team}: scale to zero when idle (a KEDA ScaledObject or KServe/Knative "
            "minReplicas: 0 with a request trigger); gpuaudit writes no patch for it (the trigger "
            "is not in the manifests)"
        ],
        "patch": None,
        "evidence": (
            f"{len(resident)} pod(s) keep a model resident and idle for {gpus / sum(h.gpus for h in resident):.0%} "
            "of the window (no daily shape measured: not an off-hours schedule)"
        ),
    }


def _stop(key: WorkloadKey, pods: Sequence[Holder], prices: Prices) -> dict[str, Any] | None:
    measured = [h for h in pods if h.state != NO_DATA]
    idle = [h for h in measured if h.state in (IDLE, RESIDENT_IDLE)]
    if not idle or len(idle) != len(measured):
        return None
    gpus = sum(h.gpus for h in idle)
    remaining = len(pods) - len(idle)
    return {
        "kind": "stop",
        "gpus": _n(gpus),
        "usd_per_month": _usd(_by_model(idle), prices),
        "how": [f"ask team {idle[0].team} whether it is still needed; then `{_remove_command(key, remaining)}`"],
        "patch": None,
        "evidence": f"all {len(idle)} measured pod(s) idle over the window",
    }


def _smaller_gpu(
    key: WorkloadKey, pods: Sequence[Holder], prices: Prices, models: Mapping[str, float]
) -> dict[str, Any] | None:
    """The cheapest GPU model of the cluster (``models``: model -> memory
    MiB) whose memory holds the workload's peak VRAM with headroom, when it
    costs less per hour than the one it holds; single-GPU pods only."""
    if not pods or any(h.whole != 1 or h.mig_profiles for h in pods):
        return None
    peaks = [float(v) for h in pods if h.state != NO_DATA and isinstance(v := h.observed.fb_used_max_mib, (int, float))]
    if len(peaks) < len(pods):
        return None  # a replica without telemetry could need more: unknown, no move
    need = max(peaks) * HEADROOM
    now = pods[0].model
    price_now = prices.of(now)
    if price_now is None or any(h.model != now for h in pods):
        return None
    options = [
        (price, model)
        for model, memory in models.items()
        if memory >= need and model != now and (price := prices.of(model)) is not None and price < price_now
    ]
    if not options:
        return None
    price, model = min(options)
    gpus = float(len(pods))
    team = pods[0].team
    return {
        "kind": "smaller_gpu",
        "gpus": _n(gpus),
        "usd_per_month": round(gpus * (price_now - price) * HOURS_PER_MONTH),
        "how": [
            f"ask team {team}: select {model} (nodeSelector nvidia.com/gpu.product) for "
            f"{key[1]} {key[0]}/{key[2]}; its {_n(gpus):g} GPU(s) cost {price_now:g} -> {price:g} per hour"
        ],
        "patch": None,
        "evidence": f"peak VRAM {need / HEADROOM / 1024:.1f} GiB (+20%) fits {model}'s {models[model] / 1024:.0f} GiB",
    }


def _ask(key: WorkloadKey, pods: Sequence[Holder], prices: Prices) -> dict[str, Any] | None:
    """Idle pods of a workload no other action fits (workers of a Job, pods
    of an operator's kind): a named manual action, priced at their GPUs."""
    idle = [h for h in pods if h.state in (IDLE, RESIDENT_IDLE)]
    if not idle:
        return None
    measured = sum(1 for h in pods if h.state != NO_DATA)
    gpus = sum(h.gpus for h in idle)
    return {
        "kind": "ask",
        "gpus": _n(gpus),
        "usd_per_month": _usd(_by_model(idle), prices),
        "how": [
            f"ask team {idle[0].team}: {len(idle)} of its {len(pods)} pod(s) held {_n(gpus):g} GPU(s) idle over "
            "the window; end those it does not need, or find what starves them (input pipeline, a stalled step)"
        ],
        "patch": None,
        "evidence": f"{len(idle)} of {measured} measured pod(s) idle over the window",
    }


def _bundles(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The actions of one owner, as one line: a fleet's idle money is spread
    over hundreds of workloads, and each team acts on its own."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["team"]].append(row)
    out: list[dict[str, Any]] = []
    for team, members in groups.items():
        usd = [m["usd_per_month"] for m in members]
        first = members[0]
        kinds = [k for k in KIND_ORDER if any(m["kind"] == k for m in members)]
        out.append(
            {
                "workload": None,
                "team": team,
                "kind": "owner",
                "title": f"Team {team}, {len(members)} workload(s): "
                + ", ".join(f"{LABELS[k]} {sum(1 for m in members if m['kind'] == k)}" for k in kinds),
                "model": ", ".join(sorted({part for m in members for part in m["model"].split(", ")})),
                "evidence": f"the largest: {first['workload']['namespace']}/{first['workload']['name']}, "
                f"{first['title'].lower().rstrip(':')} ({first['evidence']})",
                "workloads": len(members),
                "gpus": _n(sum(m["gpus"] or 0 for m in members)),
                "gpus_freed": _n(sum(m["gpus"] or 0 for m in members)),
                "usd_per_month": None if any(u is None for u in usd) else sum(usd),
                "covered_usd_per_month": None
                if any(u is None for u in usd)
                else sum(min(m["usd_per_month"], m["idle_usd_per_month"] or 0) for m in members),
                "how": [
                    f"ask team {team}: its {len(members)} action(s), each with its command, are in report.json",
                    "the largest: " + "; ".join(first["how"]),
                ],
            }
        )
    out.sort(key=lambda b: (-(b["usd_per_month"] or 0), -(b["gpus"] or 0), b["team"]))
    return out


def _money(action: Mapping[str, Any]) -> tuple[float, float, int]:
    return (action["usd_per_month"] or 0, action["gpus"] or 0, -KIND_ORDER.index(action["kind"]))


def plan(inventory: Inventory, reached: Mapping[str, Any], prices: Prices, shown: int = SHOWN) -> dict[str, Any]:
    """One action per workload that holds idle GPUs (or stuck pods), the one
    that frees the most; ranked by money, then GPUs. ``covered``: the idle
    cost the shown actions account for (each at most its workload's idle
    cost); ``left``: the idle cost they leave."""
    groups: dict[WorkloadKey, list[Holder]] = defaultdict(list)
    for h in inventory.holders:
        groups[(h.namespace, h.owner_kind, h.owner)].append(h)
    patched = {(r["namespace"], r["kind"], r["name"]): r for r in reached.get("by_workload") or []}
    models: dict[str, float] = {}
    for node in inventory.nodes:
        if node.memory_mib and not node.unschedulable:
            models[node.model] = node.memory_mib
    rows = []
    idle_total = 0.0
    priced = prices.known
    for key, pods in groups.items():
        pods.sort(key=lambda h: h.pod)
        idle_pods = [h for h in pods if h.state in (IDLE, RESIDENT_IDLE)]
        idle_usd = _usd(_by_model(idle_pods), prices) if idle_pods else 0
        if idle_usd is None:
            priced = False
        idle_total += idle_usd or 0
        if not idle_pods and not any(h.stuck for h in pods):
            continue
        consolidate = _consolidate(key, pods, prices)
        candidates = [
            c
            for c in (
                _patch(key, patched[key], pods, prices, reached.get("sharing_rules") or ()) if key in patched else None,
                _release(key, pods, prices),
                consolidate,
                _scale_to_zero(key, pods, prices),
                # a service whose measured load fits fewer replicas keeps them
                _stop(key, pods, prices) if consolidate is None else None,
                _smaller_gpu(key, pods, prices, models),
            )
            if c is not None
        ] or [c for c in (_ask(key, pods, prices),) if c is not None]
        if not candidates:
            continue
        best = max(candidates, key=_money)
        rows.append(
            {
                "title": TITLES[best["kind"]],
                "workload": {"namespace": key[0], "kind": key[1], "name": key[2]},
                "team": pods[0].team,
                "model": ", ".join(sorted({h.model for h in pods})),
                "pods": len(pods),
                "gpus_idle": _n(sum(h.gpus for h in idle_pods)),
                "idle_usd_per_month": idle_usd,
                **best,
                "gpus_freed": best["gpus"],
                "alternatives": [c["kind"] for c in candidates if c is not best],
            }
        )
    rows.sort(
        key=lambda a: (-(a["usd_per_month"] or 0), -(a["gpus"] or 0), a["workload"]["namespace"], a["workload"]["name"])
    )

    def covered(items: Sequence[Mapping[str, Any]]) -> int | None:
        if not priced:
            return None
        return round(sum(min(a["usd_per_month"] or 0, a["idle_usd_per_month"] or 0) for a in items))

    idle = round(idle_total) if priced else None
    bundled = len(rows) > shown
    bundles = _bundles(rows)
    if bundled:
        first = bundles[:shown]
        top = None if not priced else round(sum(b["covered_usd_per_month"] or 0 for b in first))
    else:
        first = rows
        top = covered(rows)
    return {
        "shown": first,
        "bundled": bundled,
        "bundles": bundles,
        "all": rows,
        "count": len(rows),
        "idle_usd_per_month": idle,
        "covered_usd_per_month": top,
        "covered_by_all_usd_per_month": covered(rows),
        "left_usd_per_month": None if idle is None or top is None else max(idle - top, 0),
        "by_kind": {
            kind: {
                "actions": sum(1 for a in rows if a["kind"] == kind),
                "usd_per_month": covered([a for a in rows if a["kind"] == kind]),
            }
            for kind in KIND_ORDER
        },
    }
