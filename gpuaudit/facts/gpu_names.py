"""Whether the GPU resource names a pod requests exist: MIG profiles no GPU
offers, `.shared` replicas nothing advertises (gpu-domain.md §2, §3)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit import gpus
from gpuaudit.facts.context import Context
from gpuaudit.model import GpuRequest

SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"


def unknown_mig_profiles(requests: Sequence[GpuRequest]) -> list[str]:
    """MIG profiles in `nvidia.com/mig-<profile>` names that no catalogued GPU offers."""
    out = []
    for r in requests:
        if not r.resource.startswith(MIG_PREFIX):
            continue
        profile = r.resource[len(MIG_PREFIX) :].removesuffix(SHARED_SUFFIX)
        if not gpus.known_mig_profile(profile):
            out.append(profile)
    return sorted(set(out))


def unadvertised_shared(requests: Sequence[GpuRequest], context: Context) -> list[str] | None:
    """`.shared` names requested that no config in the input (nor the site)
    advertises; None when nothing says what is advertised."""
    wanted = sorted({r.resource for r in requests if r.resource.endswith(SHARED_SUFFIX)})
    if context.shared_names is None:
        return None
    return [name for name in wanted if name not in context.shared_names]
