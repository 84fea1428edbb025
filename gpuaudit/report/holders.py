"""Who holds which GPUs, what the telemetry says they do with them, and who
waits for GPUs: the inventory every part of the capacity review counts from.

Pure functions over a ClusterState and the pod fact documents of the audit
(so the report classifies pods exactly as the rules saw them).

Counts are *physical* GPUs (facts/capacity.py): availability is about
hardware, and leadership buys hardware.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from gpuaudit.facts import Subject
from gpuaudit.facts.capacity import physical_gpus
from gpuaudit.facts.scheduling import selects_node, untolerated_taints
from gpuaudit.facts.types import PodFacts, Telemetry
from gpuaudit.kube.labels import HOSTNAME_LABEL
from gpuaudit.kube.requests import pod_requests
from gpuaudit.kube.shapes import as_map
from gpuaudit.model import ClusterState, Node, PodState

# The states an allocated GPU can be in, as the first screen shows them.
ACTIVE, RESIDENT_IDLE, IDLE, NO_DATA = "active", "resident_idle", "idle", "no_data"
STATES = (ACTIVE, RESIDENT_IDLE, IDLE, NO_DATA)
# What a holder without telemetry observed: every signal None.
NOTHING_OBSERVED = Telemetry()


class Thresholds(msgspec.Struct, frozen=True):
    """Where "actively computing" and "idle resident model" begin. Taken from
    the rules that judge the same thing (params overridable in config), so the
    first screen and the findings never disagree."""

    active_compute: float = 0.1  # GPA-AL-201 max_compute
    resident_idle: float = 0.5  # GPA-ME-001 min_resident_idle_fraction
    resident_compute_mean: float = 0.1  # GPA-ME-001 max_compute_mean
    resident_compute_p95: float = 0.5  # GPA-ME-001 max_compute_p95: busy in bursts is not idle
    min_coverage: float = 0.5  # the telemetry rules' min_coverage

    @classmethod
    def from_rules(cls, rules: Iterable[Any]) -> Thresholds:
        params = {r.id: r.params for r in rules}
        idle_rule = params.get("GPA-AL-201", {})
        resident_rule = params.get("GPA-ME-001", {})
        return cls(
            active_compute=float(idle_rule.get("max_compute", cls.active_compute)),
            resident_idle=float(resident_rule.get("min_resident_idle_fraction", cls.resident_idle)),
            resident_compute_mean=float(resident_rule.get("max_compute_mean", cls.resident_compute_mean)),
            resident_compute_p95=float(resident_rule.get("max_compute_p95", cls.resident_compute_p95)),
            min_coverage=float(resident_rule.get("min_coverage", idle_rule.get("min_coverage", cls.min_coverage))),
        )


class GpuNode(msgspec.Struct, frozen=True):
    name: str
    model: str
    pool: str
    gpus: float
    allocated: float  # physical GPUs held by pods
    unschedulable: bool
    mig_capable: bool
    memory_mib: float | None
    # (CPU cores, memory bytes) the node can still give: allocatable less what
    # every pod bound to it requests (None: the node does not say)
    room: tuple[float, float] | None = None


class Holder(msgspec.Struct, frozen=True):
    """A pod bound to a node that holds GPUs."""

    namespace: str
    pod: str
    owner_kind: str
    owner: str
    team: str
    node: str
    model: str
    pool: str
    gpus: float  # physical GPU equivalents
    whole: int  # whole GPUs of an unshared node (0 for MIG slices and shared replicas)
    mig_profiles: tuple[str, ...]
    state: str
    telemetry: Telemetry | None
    requests: tuple[float, float] = (0.0, 0.0)  # (CPU cores, memory bytes) the scheduler reserves for it
    stuck: str | None = None  # CrashLoopBackOff, ImagePullBackOff, ...: it holds GPUs and does no work

    @property
    def observed(self) -> Telemetry:
        """The telemetry, every signal None when there is none."""
        return self.telemetry or NOTHING_OBSERVED


class Waiting(msgspec.Struct, frozen=True):
    """A GPU pod that is not bound to a node."""

    namespace: str
    pod: str
    owner_kind: str
    owner: str
    team: str
    gpus: float  # GPUs requested
    cause: str
    message: str | None
    model: str | None  # the GPU model it asks for, when its selectors name one
    # GPU nodes whose labels, taints and GPU capacity admit it (None: not known)
    eligible: int | None = None
    # the schedulable GPU nodes that admit it: labels, affinity, taints, GPU
    # count, and CPU and memory allocatable (empty: it fits no node)
    nodes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return bool(self.eligible) and bool(self.nodes)

    @property
    def hardware_demand(self) -> bool:
        """Waiting for lack of free GPUs on nodes that could run it: demand
        more hardware would meet. Quota, gates, selectors no node satisfies,
        a pod no node could hold (GPU count, CPU or memory) and unknown
        causes are not."""
        return self.cause == "allocation" and self.fits


class Inventory(msgspec.Struct, frozen=True):
    nodes: tuple[GpuNode, ...]
    holders: tuple[Holder, ...]
    waiting: tuple[Waiting, ...]
    team_label: str | None
    pool_label: str | None

    @property
    def gpus_total(self) -> float:
        return sum(n.gpus for n in self.nodes)


def model_name(node: Node) -> str:
    """Catalogue model (H100-80GB), else the product label, else 'unknown'."""
    if node.model is not None:
        return node.model.model
    return node.product or "unknown"


def team_of(pod: PodState, team_label: str | None) -> str:
    """The pod's value of the configured team label, else its namespace."""
    if team_label:
        meta = pod.workload.document.obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        value = labels.get(team_label) if isinstance(labels, Mapping) else None
        if value:
            return str(value)
    return pod.namespace


def classify(telemetry: Telemetry | None, thresholds: Thresholds) -> str:
    """The state of a pod's GPUs over the telemetry window. Missing or thin
    data is its own state, never idle."""
    if telemetry is None:
        return NO_DATA
    coverage = telemetry.coverage
    if not isinstance(coverage, (int, float)) or coverage < thresholds.min_coverage:
        return NO_DATA
    compute = telemetry.compute_mean
    if not isinstance(compute, (int, float)):
        return NO_DATA
    resident_idle = telemetry.resident_idle_fraction
    p95 = telemetry.compute_p95
    if (
        isinstance(resident_idle, (int, float))
        and resident_idle >= thresholds.resident_idle
        and compute < thresholds.resident_compute_mean
        and not (isinstance(p95, (int, float)) and p95 >= thresholds.resident_compute_p95)
    ):  # as GPA-ME-001 and GPA-ME-003 judge it: a pod busy in bursts is not resident-idle
        return RESIDENT_IDLE
    return ACTIVE if compute >= thresholds.active_compute else IDLE


class Admission:
    """Which schedulable GPU nodes admit a pending pod: its selectors and
    required affinity, its tolerations against their taints, its GPUs
    against their allocatable GPUs, its CPU and memory requests against
    their allocatable CPU and memory (as the scheduler's NodeResourcesFit
    compares them, on an empty node). Nodes that differ only in their name are
    judged once; replicas ask the same question and are answered once."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes = [n for n in nodes if n.gpu_capacity and not n.unschedulable]
        shapes: dict[str, list[Node]] = {}
        for node in self.nodes:
            labels = {k: v for k, v in node.labels.items() if k != HOSTNAME_LABEL}
            key = json.dumps(
                [labels, node.taints, node.gpu_allocatable, node.cpu_allocatable, node.memory_allocatable],
                sort_keys=True,
                default=str,
            )
            shapes.setdefault(key, []).append(node)
        self.shapes = list(shapes.values())
        self.cache: dict[str, tuple[str, ...]] = {}

    @staticmethod
    def _admits(node: Node, spec: Mapping[str, Any], needs: Mapping[str, float], requests: tuple[float, float]) -> bool:
        if not selects_node(spec, node.name, node.labels):
            return False
        if any(node.gpu_allocatable.get(res, 0.0) < count for res, count in needs.items()):
            return False
        tolerations = [t for t in spec.get("tolerations") or () if isinstance(t, Mapping)]
        if untolerated_taints(tolerations, node.taints):
            return False
        cpu, memory = requests
        if node.cpu_allocatable is not None and cpu > node.cpu_allocatable:
            return False
        return not (node.memory_allocatable is not None and memory > node.memory_allocatable)

    def of(self, spec: Mapping[str, Any], needs: Mapping[str, float], requests: tuple[float, float]) -> tuple[str, ...]:
        placement = [
            spec.get("nodeName"),
            spec.get("nodeSelector"),
            as_map(spec.get("affinity")).get("nodeAffinity"),
            spec.get("tolerations"),
        ]
        key = repr([*placement, sorted(needs.items()), requests])
        if key in self.cache:
            return self.cache[key]
        if placement[0] or HOSTNAME_LABEL in key or "metadata.name" in key:  # names nodes: judge each
            names = tuple(n.name for n in self.nodes if self._admits(n, spec, needs, requests))
        else:
            names = tuple(
                n.name for shape in self.shapes if self._admits(shape[0], spec, needs, requests) for n in shape
            )
        self.cache[key] = names
        return names


def gpu_needs(pod: PodState) -> dict[str, float]:
    """The device-plugin GPUs one pod asks for, by resource name."""
    needs: dict[str, float] = {}
    for container in pod.workload.templates[0].containers:
        for r in container.gpus:
            if r.mode != "dra" and r.count:
                needs[r.resource] = needs.get(r.resource, 0.0) + r.count
    return needs


def collect(
    state: ClusterState,
    pod_facts: Mapping[tuple[str, str], Subject],
    thresholds: Thresholds,
    *,
    team_label: str | None = None,
    pool_label: str | None = None,
) -> Inventory:
    """The inventory of ``state``. ``pod_facts``: the audit's pod fact
    documents by (namespace, pod) — telemetry and pending cause come from them."""
    gpu_nodes = {n.name: n for n in state.nodes if n.gpu_capacity}

    def pool_of(node: Node) -> str:
        if pool_label and node.labels.get(pool_label):
            return node.labels[pool_label]
        return model_name(node)

    holders: list[Holder] = []
    waiting: list[Waiting] = []
    admission = Admission(gpu_nodes.values())
    held: dict[str, float] = {}
    for pod in state.pods:
        subject = pod_facts.get((pod.namespace, pod.name))
        if subject is None:  # not a GPU pod, or finished
            continue
        facts = subject.facts_as(PodFacts)
        if pod.holds_gpus and pod.node:
            node = gpu_nodes.get(pod.node)
            if node is None:  # bound to a node that is gone or has no GPUs
                continue
            share, whole, profiles = physical_gpus(pod, node)
            if share <= 0:
                continue
            telemetry = facts.telemetry
            holders.append(
                Holder(
                    namespace=pod.namespace,
                    pod=pod.name,
                    owner_kind=pod.owner.kind,
                    owner=pod.owner.name,
                    team=team_of(pod, team_label),
                    node=pod.node,
                    model=model_name(node),
                    pool=pool_of(node),
                    gpus=share,
                    whole=whole,
                    mig_profiles=profiles,
                    state=classify(telemetry, thresholds),
                    telemetry=telemetry,
                    requests=pod_requests(as_map(pod.workload.document.obj.get("spec"))),
                    stuck=facts.status.stuck_reason if facts.status else None,
                )
            )
            held[pod.node] = held.get(pod.node, 0.0) + share
        elif facts.pending and facts.pending.pending:
            pending = facts.pending
            product = facts.placement.gpu_product
            spec = as_map(pod.workload.document.obj.get("spec"))
            waiting.append(
                Waiting(
                    namespace=pod.namespace,
                    pod=pod.name,
                    owner_kind=pod.owner.kind,
                    owner=pod.owner.name,
                    team=team_of(pod, team_label),
                    gpus=float(facts.gpu.count or 0.0),
                    cause=str(pending.cause or "unknown"),
                    message=pending.message,
                    model=product.model if product else None,
                    eligible=facts.placement.eligible_gpu_nodes,
                    nodes=admission.of(spec, gpu_needs(pod), pod_requests(spec)),
                )
            )
    nodes = []
    for node in gpu_nodes.values():
        capable = node.labels.get("nvidia.com/mig.capable")
        nodes.append(
            GpuNode(
                name=node.name,
                model=model_name(node),
                pool=pool_of(node),
                gpus=node.gpus,
                allocated=held.get(node.name, 0.0),
                unschedulable=node.unschedulable,
                mig_capable=capable == "true" if capable else bool(node.model and node.model.mig_capable),
                memory_mib=node.model.memory_gib * 1024 if node.model else None,
                room=_room(node, state.node_requests.get(node.name, (0.0, 0.0))),
            )
        )
    return Inventory(
        nodes=tuple(nodes),
        holders=tuple(holders),
        waiting=tuple(waiting),
        team_label=team_label,
        pool_label=pool_label,
    )


def _room(node: Node, requested: tuple[float, float]) -> tuple[float, float] | None:
    if node.cpu_allocatable is None or node.memory_allocatable is None:
        return None
    return node.cpu_allocatable - requested[0], node.memory_allocatable - requested[1]


def pod_fact_index(subjects: Iterable[Subject]) -> dict[tuple[str, str], Subject]:
    """(namespace, pod) -> the live pod's subject, from an audit's subjects."""
    index = {}
    for s in subjects:
        if s.target == "pod" and s.scope == "cluster":
            facts = s.facts_as(PodFacts)
            index[(facts.namespace, str(facts.pod))] = s
    return index
