"""Which whole nodes take a sharing config, so that the pods moved to shares
fit there and the pods those nodes hold whole GPUs for fit elsewhere.

Sharing is a node's setting (its device-plugin config, its MIG layout): every
GPU of a node given to it becomes a share, and a pod holding whole GPUs there
loses them and must be scheduled again. The scheduler places pods by GPUs,
CPU and memory (NodeResourcesFit), so a set of nodes is only usable when

- the moved pods fit on it: each on one GPU with room for its share (the
  packing vector: replicas, VRAM and compute; or MIG slices) and on a node
  with the CPU and memory it requests, and
- the whole-GPU pods it displaces fit on the other nodes of the GPU model: the
  GPUs, CPU and memory they request, where the moved pods' GPUs are free now.

A node's CPU and memory room is its allocatable less what every pod bound to
it requests (CPU-only pods too), plus what leaves it. Nodes that do not state
their allocatable CPU and memory are not checked on them (the caller says so).

The search is greedy and may miss a smaller set, so a count built on it errs
low, never high: the nodes hosting most moved pods first (their pods stay
put), then those displacing fewest pods; once the moved pods fit, nodes the
shares do not need are dropped again, largest first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit.report.holders import Holder
from gpuaudit.report.packing import Vector, size

# Node sets tried before giving up: each try is a first fit of the moved and
# displaced pods, and a group that fits nowhere must not cost a large
# cluster's review minutes.
MAX_TRIES = 64

PodKey = tuple[str, str]


@dataclass(frozen=True)
class PoolNode:
    """A schedulable node of the GPU model whose GPUs may be shared."""

    name: str
    gpus: int
    free_whole: float  # whole GPUs no pod holds now
    room: tuple[float, float] | None  # (CPU cores, memory bytes) left; None: not stated
    holders: tuple[Holder, ...]  # the pods bound to it that hold GPUs


@dataclass(frozen=True)
class Moved:
    holder: Holder
    need: Vector  # its share of one GPU, in the packing vector's units


def _key(h: Holder) -> PodKey:
    return (h.namespace, h.pod)


def _fits_in(room: list[float], requests: tuple[float, float]) -> bool:
    return room[0] >= requests[0] - 1e-9 and room[1] >= requests[1] - 1e-9


def fits(chosen: Sequence[PoolNode], pool: Sequence[PoolNode], moved: Sequence[Moved], capacity: Vector) -> bool:
    """Whether ``moved`` fit on ``chosen`` shared, and the whole-GPU pods the
    chosen nodes hold fit on the rest of ``pool`` (first fit, largest first)."""
    moving = {_key(m.holder) for m in moved}
    inside = {n.name for n in chosen}
    room = {n.name: [*n.room] if n.room is not None else [math.inf, math.inf] for n in pool}
    free_whole = {n.name: n.free_whole for n in pool}
    displaced: list[Holder] = []
    for node in pool:
        for h in node.holders:
            leaves = _key(h) in moving or node.name in inside
            if not leaves:
                continue
            room[node.name][0] += h.requests[0]
            room[node.name][1] += h.requests[1]
            if _key(h) in moving:
                free_whole[node.name] += h.whole
            else:
                displaced.append(h)
    gpus_left = {n.name: [list(capacity) for _ in range(n.gpus)] for n in chosen}
    for m in sorted(moved, key=lambda m: (size(m.need, capacity), m.holder.requests), reverse=True):
        placed = False
        for node in chosen:
            if not _fits_in(room[node.name], m.holder.requests):
                continue
            gpu = next((g for g in gpus_left[node.name] if all(r >= n for r, n in zip(g, m.need, strict=True))), None)
            if gpu is None:
                continue
            for i, n in enumerate(m.need):
                gpu[i] -= n
            room[node.name][0] -= m.holder.requests[0]
            room[node.name][1] -= m.holder.requests[1]
            placed = True
            break
        if not placed:
            return False
    outside = [n for n in pool if n.name not in inside]
    for h in sorted(displaced, key=lambda h: (-h.whole, -h.requests[0], -h.requests[1])):
        node = next((n for n in outside if free_whole[n.name] >= h.whole and _fits_in(room[n.name], h.requests)), None)
        if node is None:
            return False
        free_whole[node.name] -= h.whole
        room[node.name][0] -= h.requests[0]
        room[node.name][1] -= h.requests[1]
    return True


def choose(
    pool: Sequence[PoolNode], moved: Sequence[Moved], capacity: Vector, gpus_needed: int
) -> tuple[PoolNode, ...] | None:
    """Nodes of ``pool`` to share so that ``moved`` (which need at least
    ``gpus_needed`` GPUs together) fit, or None when no set found does."""
    moving = {_key(m.holder) for m in moved}

    def hosted(node: PoolNode) -> int:
        return sum(_key(h) in moving for h in node.holders)

    def displaced(node: PoolNode) -> int:
        return sum(h.whole for h in node.holders if _key(h) not in moving)

    order = sorted(pool, key=lambda n: (-hosted(n), displaced(n), n.name))
    chosen: list[PoolNode] = []
    tries = 0
    for node in order:
        chosen.append(node)
        if sum(n.gpus for n in chosen) < gpus_needed:
            continue
        if fits(chosen, pool, moved, capacity):
            break
        tries += 1
        if tries >= MAX_TRIES:
            return None
    else:
        return None
    for node in sorted(chosen, key=lambda n: (-n.gpus, hosted(n), n.name)):
        trial = [n for n in chosen if n is not node]
        if trial and sum(n.gpus for n in trial) >= gpus_needed and fits(trial, pool, moved, capacity):
            chosen = trial
    return tuple(chosen)
