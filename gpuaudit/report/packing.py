"""Bin packing for the what-if simulation: pure and deterministic.

Two forms of "how many GPUs would this work need":

- :func:`pack_pool` packs items that each need a *share of one GPU* (a MIG
  profile, a time-slice with its memory and compute, a fraction) onto
  identical GPUs of one model. Offline and largest first: GPUs are filled one
  at a time, each with the largest items that still fit. Needs are integer
  vectors (slices, memory units, compute units), so a type of item is packed
  in bulk and a run of identical GPUs is counted at once: the cost grows with
  the number of distinct item shapes, not with the number of pods.
- :func:`place_on_nodes` places pods in arrival order onto real nodes, first
  fit, with whole GPUs or a share of one GPU and the node's CPU and memory:
  what an online scheduler does, fragmentation included.

The first answers "what would a good packing need"; the second "what does
this cluster actually fit". The what-if uses the first; the trace validation
compares both (tests/test_report_packing.py, bench/pack_alibaba.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec

Vector = tuple[int, ...]


class PoolPacking(msgspec.Struct, frozen=True):
    gpus: int  # GPUs opened for the items
    placed: int  # items packed
    unfit: int  # items larger than one GPU in some dimension (left out)
    used: Vector  # units used over all opened GPUs, per dimension
    # The GPUs opened: (what one GPU holds {need: count}, how many GPUs hold it).
    layout: tuple[tuple[Mapping[Vector, int], int], ...] = ()


def size(need: Vector, capacity: Vector) -> tuple[float, float]:
    """How much of one GPU a need takes (its largest share, then the sum of
    its shares): first fit decreasing places the largest first."""
    shares = [n / c for n, c in zip(need, capacity, strict=True) if c > 0]
    return (max(shares, default=0.0), sum(shares))


def pack_pool(demand: Mapping[Vector, int], capacity: Vector) -> PoolPacking:
    """Pack ``demand`` (need vector -> how many items) onto GPUs of ``capacity``.

    Each new GPU takes, in decreasing size, as many items of each shape as
    still fit. A GPU filled that way is then repeated while every shape in it
    has enough items left, which is exactly what filling the next GPUs one by
    one would do.
    """
    if any(c < 0 for c in capacity):
        raise ValueError(f"negative capacity {capacity}")
    counts: dict[Vector, int] = {}
    unfit = 0
    for need, count in demand.items():
        if count <= 0:
            continue
        if len(need) != len(capacity) or any(n < 0 for n in need):
            raise ValueError(f"need {need} does not match capacity {capacity}")
        if any(n > c for n, c in zip(need, capacity, strict=True)):
            unfit += count
        else:
            counts[need] = counts.get(need, 0) + count
    placed = sum(counts.values())
    order = sorted(counts, key=lambda v: (*size(v, capacity), v), reverse=True)
    gpus = 0
    used = [0] * len(capacity)
    layout: list[tuple[Mapping[Vector, int], int]] = []
    while counts:
        residual = list(capacity)
        pattern: dict[Vector, int] = {}
        for need in order:
            left = counts.get(need, 0)
            if not left:
                continue
            fit = min((r // n for r, n in zip(residual, need, strict=True) if n > 0), default=left)
            take = min(left, fit)
            if take:
                pattern[need] = take
                residual = [r - take * n for r, n in zip(residual, need, strict=True)]
        repeat = min(counts[need] // take for need, take in pattern.items())
        gpus += repeat
        layout.append((pattern, repeat))
        for need, take in pattern.items():
            counts[need] -= take * repeat
            if not counts[need]:
                del counts[need]
            for i, n in enumerate(need):
                used[i] += n * take * repeat
    return PoolPacking(gpus=gpus, placed=placed, unfit=unfit, used=tuple(used), layout=tuple(layout))


# --- online placement on real nodes ------------------------------------------------


class NodeSpace(msgspec.Struct, frozen=True):
    name: str
    gpus: int
    cpu: float = math.inf
    memory: float = math.inf
    group: str = ""  # e.g. the GPU model; a pod with groups set only fits these


class PodDemand(msgspec.Struct, frozen=True):
    """``gpus`` whole GPUs, or (``gpus == 1``) ``share`` units of one GPU."""

    name: str
    gpus: int
    share: int
    cpu: float = 0.0
    memory: float = 0.0
    groups: tuple[str, ...] = ()


class Placement(msgspec.Struct, frozen=True):
    placed: int
    unplaced: tuple[str, ...]  # pod names, in arrival order
    gpus_used: int  # GPUs with anything on them
    units_used: int  # GPU units allocated (whole GPUs count ``unit`` each)
    stranded_units: int  # free units on partly used GPUs: fragmentation
    gpus_total: int

    def as_dict(self, unit: int) -> dict[str, float | int]:
        return {
            "pods_placed": self.placed,
            "pods_unplaced": len(self.unplaced),
            "gpus_used": self.gpus_used,
            "gpu_equivalents_allocated": round(self.units_used / unit, 1),
            "stranded_gpu_equivalents": round(self.stranded_units / unit, 1),
            "gpus_free": self.gpus_total - self.gpus_used,
        }


class _Node:
    __slots__ = ("cpu", "group", "memory", "residual")

    def __init__(self, space: NodeSpace, unit: int) -> None:
        self.residual = [unit] * space.gpus
        self.cpu = space.cpu
        self.memory = space.memory
        self.group = space.group


def place_on_nodes(nodes: Sequence[NodeSpace], pods: Iterable[PodDemand], *, unit: int = 1000) -> Placement:
    """Place ``pods`` in order, each on the first node that fits it.

    A whole-GPU pod takes untouched GPUs; a share goes to the fullest GPU of
    the node that still holds it (best fit inside the node, as GPU-sharing
    schedulers do), so shares are not spread over fresh GPUs needlessly.
    """
    state = [_Node(n, unit) for n in nodes]
    placed = 0
    unplaced: list[str] = []
    for pod in pods:
        if _place(state, pod, unit):
            placed += 1
        else:
            unplaced.append(pod.name)
    residuals = [r for n in state for r in n.residual]
    return Placement(
        placed=placed,
        unplaced=tuple(unplaced),
        gpus_used=sum(1 for r in residuals if r < unit),
        units_used=sum(unit - r for r in residuals),
        stranded_units=sum(r for r in residuals if 0 < r < unit),
        gpus_total=len(residuals),
    )


def _place(state: Sequence[_Node], pod: PodDemand, unit: int) -> bool:
    whole = pod.gpus > 1 or pod.share >= unit
    for node in state:
        if pod.groups and node.group not in pod.groups:
            continue
        if node.cpu < pod.cpu or node.memory < pod.memory:
            continue
        if whole:
            free = [i for i, r in enumerate(node.residual) if r == unit]
            if len(free) < pod.gpus:
                continue
            for i in free[: pod.gpus]:
                node.residual[i] = 0
        else:
            fitting = [(r, i) for i, r in enumerate(node.residual) if r >= pod.share]
            if not fitting:
                continue
            _, best = min(fitting)
            node.residual[best] -= pod.share
        node.cpu -= pod.cpu
        node.memory -= pod.memory
        return True
    return False
