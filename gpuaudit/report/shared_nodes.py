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

The nodes are taken in one order: those hosting most moved pods first (their
pods stay put), then those displacing fewest pods; the set is the shortest
start of that order that works, then nodes it does not need are dropped,
largest first. A smaller set may exist, so a count built on it errs low,
never high. Pods of one shape (same need, same requests, as the replicas of
one workload are) are placed together, so a check costs per shape and node,
not per pod.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import msgspec

from gpuaudit.report.holders import Holder
from gpuaudit.report.packing import Vector, size

# Nodes tried for removal once a set works: each try is one check, and on
# equal nodes no removal can succeed once the shortest working start is found.
MAX_DROPS = 16

Requests = tuple[float, float]  # CPU cores, memory bytes


class PoolNode(msgspec.Struct, frozen=True):
    """A schedulable node of the GPU model whose GPUs may be shared."""

    name: str
    gpus: int
    free_whole: float  # whole GPUs no pod holds now
    room: Requests | None  # (CPU cores, memory bytes) left; None: not stated
    holders: tuple[Holder, ...]  # the pods bound to it that hold GPUs


class Moved(msgspec.Struct, frozen=True):
    holder: Holder
    need: Vector  # its share of one GPU, in the packing vector's units


class _Side(msgspec.Struct, frozen=True):
    """A node as the move leaves it: shared (``inside``) or not."""

    gpus: int
    room_out: Requests  # room when not shared: its moved pods have left
    free_out: float  # whole GPUs free when not shared
    room_in: Requests  # room when shared: every pod holding its GPUs has left
    displaced: Counter[tuple[int, Requests]]  # (whole GPUs, requests) of the pods it displaces when shared


def _key(h: Holder) -> tuple[str, str]:
    return (h.namespace, h.pod)


def _sides(pool: Sequence[PoolNode], moving: set[tuple[str, str]]) -> list[_Side]:
    sides = []
    for node in pool:
        room = node.room if node.room is not None else (math.inf, math.inf)
        moved = [h for h in node.holders if _key(h) in moving]
        stay = [h for h in node.holders if _key(h) not in moving]
        room_out = (room[0] + sum(h.requests[0] for h in moved), room[1] + sum(h.requests[1] for h in moved))
        room_in = (room_out[0] + sum(h.requests[0] for h in stay), room_out[1] + sum(h.requests[1] for h in stay))
        sides.append(
            _Side(
                gpus=node.gpus,
                room_out=room_out,
                free_out=node.free_whole + sum(h.whole for h in moved),
                room_in=room_in,
                displaced=Counter((h.whole, h.requests) for h in stay),
            )
        )
    return sides


def _how_many(room: list[float], requests: Requests) -> float:
    """Pods of ``requests`` that ``room`` holds."""
    return min((room[i] // requests[i] if requests[i] > 0 else math.inf) for i in range(2))


def _fits(
    inside: Sequence[int], sides: Sequence[_Side], movers: Sequence[tuple[Vector, Requests, int]], capacity: Vector
) -> bool:
    """Whether the movers fit on the nodes ``inside`` (indexes into ``sides``)
    shared, and the pods those nodes displace on the others (first fit,
    largest first)."""
    chosen = set(inside)
    rooms = {i: list(sides[i].room_in) for i in inside}
    gpus = {i: [list(capacity) for _ in range(sides[i].gpus)] for i in inside}
    for need, requests, count in movers:
        left = count
        for i in inside:
            room = rooms[i]
            cap = _how_many(room, requests)
            for gpu in gpus[i]:
                if left <= 0 or cap <= 0:
                    break
                take = min(left, cap, min((r // n for r, n in zip(gpu, need, strict=True) if n > 0), default=left))
                if take <= 0:
                    continue
                for d, n in enumerate(need):
                    gpu[d] -= take * n
                left -= take
                cap -= take
                room[0] -= take * requests[0]
                room[1] -= take * requests[1]
            if left <= 0:
                break
        if left > 0:
            return False
    displaced: Counter[tuple[int, Requests]] = Counter()
    for i in inside:
        displaced.update(sides[i].displaced)
    if not displaced:
        return True
    outside = [i for i in range(len(sides)) if i not in chosen]
    free = {i: sides[i].free_out for i in outside}
    rooms = {i: list(sides[i].room_out) for i in outside}
    for (whole, requests), count in sorted(displaced.items(), key=lambda d: (d[0][0], d[0][1]), reverse=True):
        left = count
        for i in outside:
            take = min(left, _how_many(rooms[i], requests), free[i] // whole if whole > 0 else math.inf)
            if take <= 0:
                continue
            free[i] -= take * whole
            rooms[i][0] -= take * requests[0]
            rooms[i][1] -= take * requests[1]
            left -= take
            if left <= 0:
                break
        if left > 0:
            return False
    return True


def choose(
    pool: Sequence[PoolNode], moved: Sequence[Moved], capacity: Vector, gpus_needed: int
) -> tuple[PoolNode, ...] | None:
    """Nodes of ``pool`` to share so that ``moved`` (which need at least
    ``gpus_needed`` GPUs together) fit, or None when no set found does."""
    moving = {_key(m.holder) for m in moved}
    shapes = Counter((m.need, m.holder.requests) for m in moved)
    movers = sorted(
        ((need, requests, count) for (need, requests), count in shapes.items()),
        key=lambda m: (size(m[0], capacity), m[1]),
        reverse=True,
    )
    sides = _sides(pool, moving)
    order = sorted(
        range(len(pool)),
        key=lambda i: (
            -sum(_key(h) in moving for h in pool[i].holders),
            sum(sides[i].displaced.values()),
            pool[i].name,
        ),
    )

    def works(k: int) -> bool:
        return _fits(order[:k], sides, movers, capacity)

    covering = 0  # the shortest start whose GPUs could hold the shares
    total = 0
    while covering < len(order) and (total < gpus_needed or covering == 0):
        total += pool[order[covering]].gpus
        covering += 1
    if total < gpus_needed or covering == 0:
        return None
    # The shortest working start: double until one works, then halve the gap
    # (more nodes hold more moved pods, though they displace more: the result
    # is checked, never assumed).
    failed, found = covering - 1, None
    k = covering
    while found is None:
        if works(k):
            found = k
        elif k == len(order):
            return None
        else:
            failed, k = k, min(len(order), covering + 2 * (k - covering + 1))
    while found - failed > 1:
        middle = (failed + found) // 2
        if works(middle):
            found = middle
        else:
            failed = middle
    chosen = list(order[:found])
    for i in sorted(chosen, key=lambda i: -pool[i].gpus)[:MAX_DROPS]:
        trial = [j for j in chosen if j != i]
        if trial and sum(pool[j].gpus for j in trial) >= gpus_needed and _fits(trial, sides, movers, capacity):
            chosen = trial
    return tuple(pool[i] for i in chosen)
