"""Sizing from evidence: MIG slices from observed VRAM, time-slicing replicas
from the workloads that would share, CPU per GPU, /dev/shm. Pure arithmetic;
the planners say which evidence fed it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

from gpuaudit.gpus import GpuModel, mig_profile_memory_gib

# MIG profile names give memory in nominal GB (10gb on an 80 GB A100 is about
# 9.5 GiB usable), so a profile is credited with 10^9 bytes per "gb": a little
# less than the device really offers, never more.
MIB_PER_NOMINAL_GB = 1e9 / 2**20
GIB = 2**30
MIB = 2**20


class MigChoice(msgspec.Struct, frozen=True):
    profile: str
    memory_mib: float
    whole_gpu: bool  # the profile is the entire GPU: no sharing gained
    slices: int = 0  # compute slices of the profile
    of: int = 0  # compute slices of the whole GPU


def mig_profiles(model: GpuModel) -> list[tuple[float, int, str]]:
    """(memory MiB, compute slices, profile) for every profile, smallest first."""
    out = []
    for profile in model.mig:
        gb = mig_profile_memory_gib(profile)
        if gb is None:
            continue
        out.append((gb * MIB_PER_NOMINAL_GB, _slices(profile), profile))
    return sorted(out)


def smallest_mig_profile(model: GpuModel, need_mib: float, compute: float | None = None) -> MigChoice | None:
    """The smallest MIG profile of ``model`` with at least ``need_mib`` of
    memory and, when ``compute`` (the p95 share of a whole GPU the workload
    keeps busy) is known, at least that share of its compute slices: a pod at
    0.15 of a GPU does not fit a 1g slice, 1/7 of it."""
    profiles = mig_profiles(model)
    if not profiles:
        return None
    largest = max(s for _, s, _ in profiles)
    fitting = [
        p for p in profiles if p[0] >= need_mib and (compute is None or (largest and p[1] / largest >= compute - 1e-9))
    ]
    if not fitting:
        return None
    memory, slices, profile = min(fitting, key=lambda p: (p[1], p[0]))
    return MigChoice(profile, memory, whole_gpu=slices >= largest, slices=slices, of=largest)


def _slices(profile: str) -> int:
    head = profile.split("g", 1)[0]
    return int(head) if head.isdigit() else 0


def with_headroom(observed_mib: float, headroom: float) -> float:
    return observed_mib * (1.0 + headroom)


def replicas_that_fit(gpu_memory_mib: float, needs_mib: Iterable[float]) -> int:
    """How many of the largest need fit in one GPU's memory (time-slicing and
    MPS give each replica no more than its share)."""
    largest = max(needs_mib, default=0.0)
    if largest <= 0:
        return 0
    return int(gpu_memory_mib // largest)


def colocated_fit(capacity: float, needs_desc: Sequence[float]) -> int:
    """How many of the workloads fit together, largest first: the most pods
    one GPU may hold when any of them can land on it (the worst case is the
    largest ones together)."""
    total, count = 0.0, 0
    for need in needs_desc:
        if total + need > capacity + 1e-9:
            break
        total += need
        count += 1
    if count == len(needs_desc) and needs_desc and needs_desc[-1] > 0:
        # Several replicas of the smallest may share too: fill with it.
        count += int((capacity - total) // needs_desc[-1])
    return count


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def cpu_cores_for(gpus: float, cores_per_gpu: float) -> int:
    """Whole cores: fractional requests let one dataloader worker straddle two cores."""
    return max(1, math.ceil(gpus * cores_per_gpu - 1e-9))


def shm_size_bytes(wanted: float, memory_limits: Sequence[float], fraction_of_limit: float) -> tuple[float, bool]:
    """The /dev/shm size: ``wanted``, capped at a share of the smallest memory
    limit (a memory-backed emptyDir is charged to the container's memory).
    Returns (bytes rounded down to MiB, whether the cap applied)."""
    size = wanted
    capped = False
    if memory_limits:
        cap = min(memory_limits) * fraction_of_limit
        if cap < size:
            size, capped = cap, True
    return float(math.floor(size / MIB) * MIB), capped


def format_bytes(value: float) -> str:
    """A Kubernetes quantity: Gi when whole, else Mi."""
    if value % GIB == 0:
        return f"{int(value // GIB)}Gi"
    return f"{int(value // MIB)}Mi"


def model_memory_mib(model: GpuModel) -> float:
    return model.memory_gib * 1024.0
