"""What-if: how many GPUs sharing and right-sizing would free.

Two answers, kept apart:

**Achievable with the overlay** (:func:`achievable`): only the workloads that
`gpuaudit fix` writes a patch for (a MIG profile or a time-sliced share; the
pipeline passes the plan in as data), each at what its one pod template asks
for: the planner's VRAM need (the workload's peak over all its pods plus
headroom) against the target GPU's memory, and the workload's p95 compute.
Workloads the planners decline, or whose patch has no VRAM telemetry behind
it, free nothing here. This is the figure the decision gate uses.

**Theoretical** (:func:`simulate`'s scenarios): the current GPU workloads
re-packed, per GPU model, from what the telemetry observed, whether or not
the tool writes a change for them:

(a) **MIG**: each single-GPU pod gets the smallest profile of its GPU model
    whose memory holds its VRAM and whose compute slices cover its activity;
    the slices are packed onto GPUs by compute and memory slices.
(b) **time-slicing at N replicas**: single-GPU pods share GPUs N to a GPU,
    as long as their VRAM fits together (time-slicing does not isolate memory)
    and their activity adds up to at most one GPU.
(c) **idle residency removed**: pods that keep a model resident while idle
    unload it when idle (scale to zero, load on demand); only their busy
    share of the window still needs a GPU.

Each gives a *low* estimate (peak VRAM plus headroom, p95 activity, workloads
scaled separately) and a *high* one (peak VRAM, mean activity, busy time
pooled per GPU model): a range, never a promise. Pods without enough
telemetry, multi-GPU pods and pods already on MIG or shared GPUs keep what
they hold. The scenarios overlap (the same pods), so they do not add up.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from gpuaudit import gpus
from gpuaudit.report.holders import NO_DATA, RESIDENT_IDLE, Holder, Inventory, Thresholds
from gpuaudit.report.packing import Vector, pack_pool
from gpuaudit.report.shared_nodes import Moved, PoolNode, choose

MIB_PER_GB = 1000**3 / 2**20  # MIG profile names count decimal gigabytes
UNITS = 40  # time-slicing: memory and compute in 2.5% steps, rounded up


class WhatIfSettings(msgspec.Struct, frozen=True):
    time_slicing_replicas: int = 4
    vram_headroom: float = 0.2  # added to peak VRAM in the low estimate


class Need(msgspec.Struct, frozen=True):
    """What one pod needs of one GPU, in the low and the high estimate."""

    vram_mib: tuple[float, float]  # (low estimate: peak + headroom, high: peak)
    compute: tuple[float, float]  # (low: p95, high: mean), share of one GPU


def _catalogue(model: str) -> gpus.GpuModel | None:
    found = gpus.lookup(model)
    return found if found is not None and found.model == model else None


WorkloadKey = tuple[str, str, str]


def _workload(h: Holder) -> WorkloadKey:
    return (h.namespace, h.owner_kind, h.owner)


def _template_peaks(holders: Iterable[Holder]) -> dict[WorkloadKey, float]:
    """The peak VRAM per workload over all its pods: one pod template sizes
    every replica, so each is sized for the largest."""
    peaks: dict[WorkloadKey, float] = {}
    for h in holders:
        peak = h.observed.fb_used_max_mib
        if isinstance(peak, (int, float)):
            peaks[_workload(h)] = max(peaks.get(_workload(h), 0.0), float(peak))
    return peaks


def _needs(h: Holder, settings: WhatIfSettings, peaks: Mapping[WorkloadKey, float]) -> Need | None:
    t = h.observed
    peak = t.fb_used_max_mib
    if isinstance(peak, (int, float)):
        peak = max(float(peak), peaks.get(_workload(h), 0.0))
    mean = t.compute_mean
    if not isinstance(peak, (int, float)) or not isinstance(mean, (int, float)):
        return None
    p95 = t.compute_p95
    p95 = p95 if isinstance(p95, (int, float)) else mean
    return Need(
        vram_mib=(peak * (1 + settings.vram_headroom), float(peak)),
        compute=(max(p95, mean), mean),
    )


def _split(inventory: Inventory) -> tuple[list[Holder], dict[str, float]]:
    """Pods that could move to a share of a GPU, and the GPUs the rest keep."""
    candidates, kept = [], {"multi_gpu": 0.0, "already_shared": 0.0, "no_data": 0.0}
    for h in inventory.holders:
        if h.whole != 1 or h.mig_profiles or abs(h.gpus - 1.0) > 1e-9:
            kept["multi_gpu" if h.whole > 1 else "already_shared"] += h.gpus
        elif h.state == NO_DATA or not h.telemetry:
            kept["no_data"] += h.gpus
        else:
            candidates.append(h)
    return candidates, kept


# --- (a) MIG -----------------------------------------------------------------------


class MigLayout(msgspec.Struct, frozen=True):
    compute_slices: int
    memory_slices: int
    profiles: tuple[tuple[str, int, int, float], ...]  # (name, compute, memory slices, MiB)

    @classmethod
    def of(cls, model: gpus.GpuModel) -> MigLayout | None:
        parsed = []
        for name in model.mig:
            gb = gpus.mig_profile_memory_gib(name)
            try:
                slices = int(name.split("g.", 1)[0])
            except ValueError:
                continue
            if gb:
                parsed.append((name, slices, gb))
        if not parsed:
            return None
        smallest = min(gb for _, _, gb in parsed)
        memory_slices = max(1, round(model.memory_gib / smallest))
        per_slice = model.memory_gib / memory_slices
        profiles = tuple(
            sorted(
                ((name, g, max(1, round(gb / per_slice)), gb * MIB_PER_GB) for name, g, gb in parsed),
                key=lambda p: (p[1], p[2], p[0]),  # smallest first; names break ties
            )
        )
        return cls(max(g for _, g, _, _ in profiles), memory_slices, profiles)

    def smallest(self, vram_mib: float, compute: float) -> tuple[str, int, int, float] | None:
        """The smallest profile holding ``vram_mib`` with enough compute slices;
        None when only a whole GPU does."""
        for profile in self.profiles:
            _, g, _, mib = profile
            if g >= self.compute_slices:
                return None  # the full-GPU profile frees nothing
            if mib >= vram_mib and g / self.compute_slices >= compute:
                return profile
        return None


def _mig(candidates: Sequence[Holder], settings: WhatIfSettings, peaks: Mapping[WorkloadKey, float]) -> dict[str, Any]:
    rows = []
    for model, members in sorted(_by_model(candidates).items()):
        catalogue = _catalogue(model)
        layout = MigLayout.of(catalogue) if catalogue else None
        if layout is None:
            continue
        freed = []
        profiles_used: dict[str, int] = defaultdict(int)
        for estimate in (0, 1):
            demand: dict[Vector, int] = defaultdict(int)
            whole = 0
            for h in members:
                need = _needs(h, settings, peaks)
                profile = layout.smallest(need.vram_mib[estimate], need.compute[estimate]) if need else None
                if profile is None:
                    whole += 1
                    continue
                demand[(profile[1], profile[2])] += 1
                if estimate == 0:
                    profiles_used[profile[0]] += 1
            packed = pack_pool(demand, (layout.compute_slices, layout.memory_slices))
            freed.append(len(members) - whole - packed.gpus)
        rows.append(
            {
                "model": model,
                "pods": len(members),
                "gpus_now": len(members),
                "freed_low": min(freed),
                "freed_high": max(freed),
                "profiles_low": dict(sorted(profiles_used.items())),
            }
        )
    return _scenario(
        "mig",
        "MIG: smallest fitting profile per GPU model",
        rows,
        [
            "Only MIG-capable GPU models; each single-GPU pod gets the smallest profile whose "
            "memory holds its peak VRAM (plus "
            f"{settings.vram_headroom:.0%} in the low estimate) and whose compute slices cover "
            "its p95 (low) or mean (high) activity.",
            "Slices are packed by compute and memory slices per GPU, ignoring MIG placement "
            "positions; a pod needing all slices keeps a whole GPU.",
        ],
    )


# --- (b) time-slicing --------------------------------------------------------------


def _time_slicing(
    candidates: Sequence[Holder], inventory: Inventory, settings: WhatIfSettings, peaks: Mapping[WorkloadKey, float]
) -> dict[str, Any]:
    replicas = settings.time_slicing_replicas
    memory_of = {n.name: n.memory_mib for n in inventory.nodes}
    rows = []
    for model, members in sorted(_by_model(candidates).items()):
        freed = []
        for estimate in (0, 1):
            demand: dict[Vector, int] = defaultdict(int)
            whole = 0
            for h in members:
                need = _needs(h, settings, peaks)
                total = h.observed.fb_total_mib or memory_of.get(h.node)
                if need is None or not total:
                    whole += 1
                    continue
                memory = math.ceil(UNITS * need.vram_mib[estimate] / total - 1e-9)
                compute = math.ceil(UNITS * min(need.compute[estimate], 1.0) - 1e-9)
                if memory > UNITS:
                    whole += 1
                    continue
                demand[(1, max(memory, 0), max(compute, 0))] += 1
            packed = pack_pool(demand, (replicas, UNITS, UNITS))
            freed.append(len(members) - whole - packed.gpus)
        rows.append(
            {
                "model": model,
                "pods": len(members),
                "gpus_now": len(members),
                "freed_low": min(freed),
                "freed_high": max(freed),
            }
        )
    return _scenario(
        f"time_slicing_{replicas}",
        f"Time-slicing at {replicas} replicas per GPU",
        rows,
        [
            f"Up to {replicas} single-GPU pods per GPU of the same model.",
            "Time-slicing does not isolate memory: the pods on one GPU must fit in its memory "
            f"together (peak VRAM, plus {settings.vram_headroom:.0%} in the low estimate).",
            "Their activity must add up to at most one GPU (p95 in the low estimate, mean in "
            "the high), or they would slow each other down.",
        ],
    )


# --- (c) idle residency removed ----------------------------------------------------


def _idle_residency(inventory: Inventory) -> dict[str, Any]:
    resident = [h for h in inventory.holders if h.state == RESIDENT_IDLE]
    rows = []
    for model, members in sorted(_by_model(resident).items()):
        now = sum(h.gpus for h in members)

        def busy(h: Holder) -> float:
            fraction = h.observed.resident_idle_fraction or 0.0
            return h.gpus * max(0.0, 1.0 - float(fraction))

        pooled = math.ceil(sum(busy(h) for h in members) - 1e-9)
        per_workload: dict[tuple[str, str, str], float] = defaultdict(float)
        for h in members:
            per_workload[(h.namespace, h.owner_kind, h.owner)] += busy(h)
        separate = sum(math.ceil(v - 1e-9) for v in per_workload.values())
        rows.append(
            {
                "model": model,
                "pods": len(members),
                "gpus_now": _n(now),
                "freed_low": _n(max(now - separate, 0.0)),
                "freed_high": _n(max(now - pooled, 0.0)),
            }
        )
    return _scenario(
        "idle_residency",
        "Idle residency removed (models unloaded when idle)",
        rows,
        [
            "Pods that kept a model resident while idle for most of the window unload it when "
            "idle (scale to zero, load on demand); their busy share of the window still needs "
            "GPUs.",
            "Low estimate: each workload scales its replicas to its own busy share; high: busy "
            "time is pooled per GPU model. Cold starts and bursts that coincide are not modelled.",
        ],
    )


# --- together ------------------------------------------------------------------------


def _by_model(holders: Iterable[Holder]) -> dict[str, list[Holder]]:
    groups: dict[str, list[Holder]] = defaultdict(list)
    for h in holders:
        groups[h.model].append(h)
    return groups


def _n(value: float) -> float | int:
    """A GPU count for output: an integer when whole (fractions come from MIG slices)."""
    rounded = round(value, 2)
    return int(rounded) if float(rounded).is_integer() else rounded


def _scenario(
    scenario_id: str, title: str, rows: Sequence[Mapping[str, Any]], assumptions: Sequence[str]
) -> dict[str, Any]:
    return {
        "id": scenario_id,
        "title": title,
        "freed": {
            "low": _n(sum(r["freed_low"] for r in rows)),
            "high": _n(sum(r["freed_high"] for r in rows)),
        },
        "pods": sum(r["pods"] for r in rows),
        "by_model": list(rows),
        "assumptions": list(assumptions),
    }


# --- achievable with the overlay ---------------------------------------------------


def _share_vector(
    share: Mapping[str, Any], pods: Sequence[Holder], inventory: Inventory, replicas: int
) -> tuple[str, Vector, Vector] | str:
    """(packing group, need, capacity) of one pod of a workload the overlay
    moves to a share, or why it frees nothing counted here."""
    need_mib = share.get("need_mib")
    if not isinstance(need_mib, (int, float)):
        return "no VRAM telemetry behind the patch (it needs confirmation): not counted"
    p95s = [
        t.compute_p95 if isinstance(t.compute_p95, (int, float)) else t.compute_mean for t in (h.observed for h in pods)
    ]
    known = [float(v) for v in p95s if isinstance(v, (int, float))]
    if len(known) < len(pods):
        return "no compute telemetry for every pod: not counted"
    compute = max(known, default=0.0)
    model = pods[0].model
    profile_name = share.get("mig_profile")
    if profile_name:
        catalogue = _catalogue(model)
        layout = MigLayout.of(catalogue) if catalogue else None
        profile = next((p for p in layout.profiles if p[0] == profile_name), None) if layout else None
        if layout is None or profile is None:
            return f"{model} has no MIG profile {profile_name} in the catalogue: not counted"
        if profile[1] / layout.compute_slices < compute:
            return (
                f"p95 compute {compute:.0%} exceeds the {profile_name} slice "
                f"({profile[1] / layout.compute_slices:.0%} of the GPU): not counted"
            )
        return f"{model}\0mig", (profile[1], profile[2]), (layout.compute_slices, layout.memory_slices)
    memory_of = {n.name: n.memory_mib for n in inventory.nodes}
    total = pods[0].observed.fb_total_mib or memory_of.get(pods[0].node)
    if not total:
        return f"the memory of a {model} is unknown: not counted"
    memory = math.ceil(UNITS * float(need_mib) / float(total) - 1e-9)
    if memory > UNITS:
        return f"{need_mib:,.0f} MiB does not fit in a {model}: not counted"
    units = math.ceil(UNITS * min(compute, 1.0) - 1e-9)
    return f"{model}\0shared", (1, max(memory, 0), max(units, 0)), (replicas, UNITS, UNITS)


def _pools(inventory: Inventory) -> dict[str, list[PoolNode]]:
    """GPU model -> its nodes a sharing config may be given: schedulable, with
    whole GPUs, and none already shared or sliced (their config stays)."""
    holders: dict[str, list[Holder]] = defaultdict(list)
    for h in inventory.holders:
        holders[h.node].append(h)
    pools: dict[str, list[PoolNode]] = defaultdict(list)
    for n in inventory.nodes:
        on = holders.get(n.name, [])
        if n.unschedulable or n.gpus < 1 or any(h.whole < 1 or h.mig_profiles for h in on):
            continue
        pools[n.model].append(PoolNode(n.name, int(n.gpus), max(n.gpus - n.allocated, 0.0), n.room, tuple(on)))
    return pools


def achievable(
    inventory: Inventory,
    overlay: Mapping[str, Any] | None,
    settings: WhatIfSettings,
) -> dict[str, Any]:
    """GPUs the tool's own fix overlay frees, per workload and per GPU model.

    ``overlay``: what `gpuaudit fix` would write for this cluster, as data
    (``shares``: each workload a patch moves to a MIG profile or a shared
    GPU, with the planner's VRAM need; ``replicas``: the time-slicing
    replicas its config sets), or None when no plan could be made.

    The pods of the workloads moved to one kind of share on one GPU model are
    packed together (memory and p95 compute must fit; at most ``replicas``
    time-sliced pods per GPU). Workloads are added largest first, and each
    is credited with the GPUs its pods free on top of those before it, so the
    workloads' figures add up to the model's."""
    if overlay is None or not overlay.get("available"):
        return {
            "known": False,
            "freed": None,
            "reason": (overlay or {}).get("problem") or "no fix plan was made for this run",
            "replicas": None,
            "by_model": [],
            "by_workload": [],
            "sharing_rules": [],
            "assumptions": [],
        }
    replicas = int(overlay.get("replicas") or settings.time_slicing_replicas)
    by_workload: dict[WorkloadKey, list[Holder]] = defaultdict(list)
    for h in inventory.holders:
        if h.whole == 1 and not h.mig_profiles and abs(h.gpus - 1.0) < 1e-9:
            by_workload[_workload(h)].append(h)
    rows: list[dict[str, Any]] = []
    groups: dict[str, list[tuple[dict[str, Any], list[Holder], Vector, Vector]]] = defaultdict(list)
    for share in overlay.get("shares") or []:
        key = (str(share.get("namespace") or ""), str(share.get("kind") or ""), str(share.get("name") or ""))
        pods = sorted(by_workload.get(key, []), key=lambda h: h.pod)
        row = {
            "namespace": key[0],
            "kind": key[1],
            "name": key[2],
            "team": pods[0].team if pods else None,
            "model": pods[0].model if pods else share.get("model"),
            "pods": len(pods),
            "remediation": share.get("remediation"),
            "rules": list(share.get("rules") or []),
            "resource": share.get("resource"),
            "mig_profile": share.get("mig_profile"),
            "confidence": share.get("confidence"),
            "freed": 0,
            "counted": False,
            "reason": None,
        }
        rows.append(row)
        if not pods:
            row["reason"] = "no pod of it holds a whole GPU now"
            continue
        shape = _share_vector(share, pods, inventory, replicas)
        if isinstance(shape, str):
            row["reason"] = shape
            continue
        group, need, capacity = shape
        row["counted"] = True
        groups[group].append((row, pods, need, capacity))
    pools = _pools(inventory)
    by_model: dict[str, dict[str, Any]] = {}
    for group, members in sorted(groups.items()):
        model = group.split("\0")[0]
        members.sort(key=lambda m: (-m[0]["pods"], m[0]["namespace"], m[0]["name"]))
        demand: dict[Vector, int] = defaultdict(int)
        moved: list[Moved] = []
        totals: list[int] = []  # GPUs freed with the first k workloads moved
        for row, pods, need, capacity in members:
            demand[need] += row["pods"]
            moved += [Moved(h, need) for h in pods]
            # The shares take whole nodes (shared_nodes.py): what they do not fill frees nothing.
            shared = choose(pools.get(model, []), moved, capacity, pack_pool(demand, capacity).gpus)
            totals.append(len(moved) - sum(n.gpus for n in shared) if shared is not None else 0)
        pods_so_far = len(moved)
        if shared is None:
            for row, *_ in members:
                row["counted"] = False
                row["reason"] = (
                    f"no set of whole {model} nodes found that holds the moved pods by GPU share, CPU and "
                    "memory while the whole-GPU pods on those nodes fit elsewhere: not counted"
                )
        # The overlay moves them all: the model's figure is the last total.
        # Each workload is credited what it adds, capped so the credits sum to it.
        final = max(totals[-1], 0)
        before = 0
        for (row, *_), total in zip(members, totals, strict=True):
            reached = min(max(total, before), final)
            row["freed"] = reached - before
            before = reached
        entry = by_model.setdefault(model, {"model": model, "pods": 0, "gpus_now": 0, "freed": 0})
        entry["pods"] += pods_so_far
        entry["gpus_now"] += pods_so_far
        entry["freed"] += final
    for entry in by_model.values():
        entry["gpus_after"] = entry["gpus_now"] - entry["freed"]
    unstated = sorted({n.name for nodes in pools.values() for n in nodes if n.room is None})
    unchecked = (
        [f"{len(unstated)} GPU node(s) do not state their allocatable CPU and memory: not checked there."]
        if unstated and groups
        else []
    )
    rows.sort(key=lambda r: (-r["freed"], not r["counted"], r["namespace"], r["name"]))
    return {
        "known": True,
        "freed": sum(e["freed"] for e in by_model.values()),
        "reason": None,
        "replicas": replicas,
        "by_model": sorted(by_model.values(), key=lambda e: e["model"]),
        "by_workload": rows,
        # the rules whose patches set up time-slicing: a time-sliced share needs them in the same overlay
        "sharing_rules": sorted(overlay.get("sharing_rules") or []),
        "assumptions": [
            "Only workloads `gpuaudit fix` writes a patch for count; the patch is the one the "
            "fix command writes, sized by its planner (peak VRAM over all the workload's pods plus "
            f"{settings.vram_headroom:.0%} headroom), so one pod template expresses it.",
            f"Time-sliced pods of one GPU model are packed at most {replicas} to a GPU, their "
            "VRAM needs together within its memory and their p95 compute together within one GPU; "
            "MIG pods by their profile's compute and memory slices.",
            "Time-slicing reaches only the nodes labelled for the sharing config the overlay "
            "writes (a manual step: `kubectl label node NODE nvidia.com/device-plugin.config=shared`).",
            "Sharing and MIG layouts are set per node: the shares take whole nodes of the model, and "
            "the GPUs of those nodes the shares do not fill free nothing. The nodes must hold the moved "
            "pods by GPU share, CPU and memory, and the pods holding whole GPUs there must fit on the "
            "model's other nodes (the nodes' allocatable less what every pod on them requests); the "
            "nodes are chosen greedily, so a smaller set may exist and the figure errs low.",
            *unchecked,
            "A workload whose patch has no VRAM telemetry behind it, or that the planners decline, frees nothing here.",
        ],
    }


def simulate(
    inventory: Inventory,
    thresholds: Thresholds,
    settings: WhatIfSettings,
    overlay: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    candidates, kept = _split(inventory)
    peaks = _template_peaks(inventory.holders)
    scenarios = [
        _mig(candidates, settings, peaks),
        _time_slicing(candidates, inventory, settings, peaks),
        _idle_residency(inventory),
    ]
    best = max(scenarios, key=lambda s: (s["freed"]["high"], s["freed"]["low"]))
    window = None
    for h in inventory.holders:
        if h.observed.window_seconds:
            window = h.observed.window_seconds
            break
    reached = achievable(inventory, overlay, settings)
    return {
        "allocated": _n(sum(h.gpus for h in inventory.holders)),
        "candidates": {"pods": len(candidates), "gpus": len(candidates)},
        "kept": {k: _n(v) for k, v in kept.items()},
        "achievable": reached,
        "scenarios": scenarios,
        "best": {
            "achievable": reached["freed"],
            "theoretical_scenario": best["id"],
            "theoretical_title": best["title"],
            "theoretical_low": best["freed"]["low"],
            "theoretical_high": best["freed"]["high"],
        },
        "assumptions": [
            "Theoretical: what a good scheduler could reach if every eligible pod were moved, "
            "whether or not `gpuaudit fix` writes a change for it; not a plan.",
            "Pods stay on their GPU model; node CPU, memory and placement rules are not re-checked.",
            "Each pod is sized for the peak VRAM of its whole workload (one pod template sizes every replica).",
            "Multi-GPU pods and pods already on MIG slices or shared GPUs keep what they hold.",
            "Pods with telemetry over less than "
            f"{thresholds.min_coverage:.0%} of the window keep their whole GPU: no data is "
            "never read as idle.",
            "Load is the load seen in the telemetry window"
            + (f" ({window / 86400:.1f} days)" if window else "")
            + "; the scenarios overlap and do not add up.",
        ],
    }
