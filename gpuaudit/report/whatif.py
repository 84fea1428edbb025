"""What-if: how many GPUs sharing and right-sizing would free, as a range.

The current GPU workloads are re-packed, per GPU model, from what the
telemetry observed (peak and mean VRAM, mean and p95 activity):

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
from dataclasses import dataclass
from typing import Any

from gpuaudit import gpus
from gpuaudit.report.holders import NO_DATA, RESIDENT_IDLE, Holder, Inventory, Thresholds
from gpuaudit.report.packing import Vector, pack_pool

MIB_PER_GB = 1000**3 / 2**20  # MIG profile names count decimal gigabytes
UNITS = 40  # time-slicing: memory and compute in 2.5% steps, rounded up


@dataclass(frozen=True)
class WhatIfSettings:
    time_slicing_replicas: int = 4
    vram_headroom: float = 0.2  # added to peak VRAM in the low estimate


@dataclass(frozen=True)
class Need:
    """What one pod needs of one GPU, in the low and the high estimate."""

    vram_mib: tuple[float, float]  # (low estimate: peak + headroom, high: peak)
    compute: tuple[float, float]  # (low: p95, high: mean), share of one GPU


def _catalogue(model: str) -> gpus.GpuModel | None:
    found = gpus.lookup(model)
    return found if found is not None and found.model == model else None


def _needs(h: Holder, settings: WhatIfSettings) -> Need | None:
    t = h.telemetry or {}
    peak = t.get("fb_used_max_mib")
    mean = t.get("compute_mean")
    if not isinstance(peak, (int, float)) or not isinstance(mean, (int, float)):
        return None
    p95 = t.get("compute_p95")
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


@dataclass(frozen=True)
class MigLayout:
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


def _mig(candidates: Sequence[Holder], settings: WhatIfSettings) -> dict[str, Any]:
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
                need = _needs(h, settings)
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


def _time_slicing(candidates: Sequence[Holder], inventory: Inventory, settings: WhatIfSettings) -> dict[str, Any]:
    replicas = settings.time_slicing_replicas
    memory_of = {n.name: n.memory_mib for n in inventory.nodes}
    rows = []
    for model, members in sorted(_by_model(candidates).items()):
        freed = []
        for estimate in (0, 1):
            demand: dict[Vector, int] = defaultdict(int)
            whole = 0
            for h in members:
                need = _needs(h, settings)
                total = (h.telemetry or {}).get("fb_total_mib") or memory_of.get(h.node)
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
            fraction = (h.telemetry or {}).get("resident_idle_fraction") or 0.0
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
                "gpus_now": round(now, 2),
                "freed_low": round(max(now - separate, 0.0), 2),
                "freed_high": round(max(now - pooled, 0.0), 2),
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


def _scenario(
    scenario_id: str, title: str, rows: Sequence[Mapping[str, Any]], assumptions: Sequence[str]
) -> dict[str, Any]:
    return {
        "id": scenario_id,
        "title": title,
        "freed": {
            "low": round(sum(r["freed_low"] for r in rows), 2),
            "high": round(sum(r["freed_high"] for r in rows), 2),
        },
        "pods": sum(r["pods"] for r in rows),
        "by_model": list(rows),
        "assumptions": list(assumptions),
    }


def simulate(inventory: Inventory, thresholds: Thresholds, settings: WhatIfSettings) -> dict[str, Any]:
    candidates, kept = _split(inventory)
    scenarios = [
        _mig(candidates, settings),
        _time_slicing(candidates, inventory, settings),
        _idle_residency(inventory),
    ]
    best = max(scenarios, key=lambda s: (s["freed"]["high"], s["freed"]["low"]))
    window = None
    for h in inventory.holders:
        if h.telemetry and h.telemetry.get("window_seconds"):
            window = h.telemetry["window_seconds"]
            break
    return {
        "allocated": round(sum(h.gpus for h in inventory.holders), 2),
        "candidates": {"pods": len(candidates), "gpus": float(len(candidates))},
        "kept": {k: round(v, 2) for k, v in kept.items()},
        "scenarios": scenarios,
        "best": {"scenario": best["id"], "title": best["title"], **best["freed"]},
        "assumptions": [
            "Pods stay on their GPU model; node CPU, memory and placement rules are not "
            "re-checked, so the packing is what a good scheduler could reach, not a plan.",
            "Multi-GPU pods and pods already on MIG slices or shared GPUs keep what they hold.",
            "Pods with telemetry over less than "
            f"{thresholds.min_coverage:.0%} of the window keep their whole GPU: no data is "
            "never read as idle.",
            "Load is the load seen in the telemetry window"
            + (f" ({window / 86400:.1f} days)" if window else "")
            + "; the scenarios overlap and do not add up.",
        ],
    }
