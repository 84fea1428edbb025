"""Evidence from a live cluster for sizing manifest fixes: per workload (top
owner), the peak GPU memory its pods used over the telemetry window and the
GPU models of the nodes they ran on. Pure: built from the cluster facts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from gpuaudit import gpus
from gpuaudit.facts import Subject
from gpuaudit.facts.types import PodFacts, Telemetry
from gpuaudit.kube.owners import OwnerKey
from gpuaudit.kube.podspecs import group_of


def owner_key(api_version: str, kind: str, namespace: str, name: str) -> OwnerKey:
    """Manifests often leave the namespace out; the cluster says `default`."""
    return (group_of(api_version), kind, namespace or "default", name)


class Evidence(msgspec.Struct, frozen=True):
    pods: tuple[str, ...]
    nodes: tuple[str, ...]
    # Over all its pods: fb_used_max_mib the peak, compute_p95 the busiest
    # pod's; None when no pod has a measured peak.
    telemetry: Telemetry | None
    models: tuple[gpus.GpuModel, ...]  # distinct GPU models of those nodes
    # Pods holding GPUs whose peak memory or compute the telemetry does not
    # give: a share cannot be sized for them.
    unmeasured: tuple[str, ...] = ()
    held: int = 0  # pods holding GPUs

    @property
    def model(self) -> gpus.GpuModel | None:
        """The GPU model, when all its pods ran on one."""
        return self.models[0] if len(self.models) == 1 else None

    @property
    def covers(self) -> bool:
        """Whether the telemetry gives peak memory and compute for every pod
        that holds its GPUs (and there is at least one): what a share must fit."""
        t = self.telemetry
        return self.held > 0 and not self.unmeasured and _measured(t)

    def describe(self, source: str) -> str:
        pods = ", ".join(self.pods[:3]) + (f" and {len(self.pods) - 3} more" if len(self.pods) > 3 else "")
        return f"{source}: pod(s) {pods} on {', '.join(self.nodes) or 'no node'}"


def from_cluster(
    subjects: Iterable[Subject], node_models: Mapping[str, gpus.GpuModel | None]
) -> dict[OwnerKey, Evidence]:
    """Evidence per top owner from the cluster's pod subjects."""
    grouped: dict[OwnerKey, list[PodFacts]] = {}
    for subject in subjects:
        if subject.target != "pod" or subject.scope != "cluster":
            continue
        r = subject.resource
        grouped.setdefault(owner_key(r.api_version, r.kind, r.namespace, r.name), []).append(subject.facts_as(PodFacts))
    evidence = {}
    for key, pods in grouped.items():
        measured = [p.telemetry for p in pods if p.telemetry is not None]
        peaks = [t.fb_used_max_mib for t in measured if t.fb_used_max_mib is not None]
        telemetry = None
        if peaks:
            windows = [t.window_seconds for t in measured if t.window_seconds]
            coverage = [t.coverage for t in measured if t.coverage is not None]
            compute = [t.compute_p95 for t in measured if t.compute_p95 is not None]
            telemetry = Telemetry(
                fb_used_max_mib=max(peaks),
                window_seconds=max(windows) if windows else None,
                coverage=min(coverage) if coverage else None,
                # The busiest pod's p95 share of a GPU: what a slice must keep up with.
                compute_p95=max(compute) if len(compute) == len(measured) else None,
                signal_name=next((t.signal_name for t in measured if t.signal_name), None),
            )
        holding = [p for p in pods if p.holds_gpus]
        unmeasured = tuple(sorted(str(p.pod) for p in holding if not _measured(p.telemetry)))
        nodes = tuple(sorted({p.node for p in pods if p.node}))
        models = {m.model: m for n in nodes if (m := node_models.get(n)) is not None}
        evidence[key] = Evidence(
            pods=tuple(sorted(str(p.pod) for p in pods)),
            nodes=nodes,
            telemetry=telemetry,
            models=tuple(models[name] for name in sorted(models)),
            unmeasured=unmeasured,
            held=len(holding),
        )
    return evidence


def _measured(telemetry: Telemetry | None) -> bool:
    """Whether it gives the peak memory and compute a share must fit."""
    return telemetry is not None and telemetry.fb_used_max_mib is not None and telemetry.compute_p95 is not None
