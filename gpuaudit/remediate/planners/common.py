"""Planners: one per remediation id. Each reads the finding's facts (typed:
``Context.pod_facts`` and the like) and the object's pod templates, and decides the template parameters (and which
evidence chose them), or declines with the reason a reviewer should see.
Pure: no IO beyond the packaged data tables.

This module holds what planners share; the planners live in one module per
category, and the table in the package (``PLANNERS``) names each remediation's
planner and what it needs of the finding."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, Literal

import msgspec

from gpuaudit import gpus
from gpuaudit.facts.types import ConfigFacts, ContainerFacts, NodeFacts, PodFacts, as_type
from gpuaudit.model import Container, Document, Finding, PodTemplate

REMEDIATED = "gpuaudit.io/remediated"
NVIDIA_GPU = "nvidia.com/gpu"

Confidence = Literal["measured", "static", "needs confirmation"]


class SharePlan(msgspec.Struct, frozen=True):
    """A workload that a move-to-shared-gpu proposal puts on a share; the
    sharing planner sizes the device-plugin config from these."""

    pods: int
    resource: str
    need_mib: float | None
    model: gpus.GpuModel | None
    mig_profile: str | None
    compute: float | None = None  # p95 share of a GPU its busiest pod keeps busy
    owner: str = ""  # the workload, "Kind namespace/name": one plan per workload


class RunState(msgspec.Struct):
    """What planners learn from the whole input, and from each other."""

    sharers: list[SharePlan] = msgspec.field(default_factory=list)
    # Measured workloads that would move to a share nothing advertises yet:
    # the sharing config is sized from them on the plan's first pass, so that
    # the next pass, with the config advertising the share, moves them.
    candidates: list[SharePlan] = msgspec.field(default_factory=list)
    # `.shared` names the input's device-plugin configs (or the site) advertise;
    # None when nothing in the input or the site says.
    shared_names: frozenset[str] | None = None
    # Device-plugin ConfigMaps in the input that share GPUs: (namespace, name, key).
    sharing_configs: tuple[tuple[str, str, str], ...] = ()
    # Live evidence per workload (fix PATH... --snapshot FILE), and where it came from.
    evidence: Mapping[Any, Any] = msgspec.field(default_factory=dict)
    evidence_source: str = ""
    # A cluster (fix --snapshot) is read: a move to a shared GPU then needs
    # measured fit (remediate/evidence.Evidence.covers), and the telemetry
    # window it was measured over, as REVIEW.md names it (None: no telemetry).
    cluster: bool = False
    # The labels of the cluster's GPU nodes (fix --snapshot): what a relaxed
    # product pin may widen to, in the pin's own label vocabulary.
    gpu_node_labels: tuple[Mapping[str, str], ...] = ()
    telemetry_window: str | None = None
    # The coherence check (remediate/coherence.py): its setting (None: no
    # check), every object of the inputs (what advertises resources), and
    # what the overlay planned so far advertises: resource -> by what.
    coherence: Any = None
    world: tuple[Mapping[str, Any], ...] = ()
    advertised: Mapping[str, str] = msgspec.field(default_factory=dict)
    platform: str | None = None

    def evidence_for(self, document: Document) -> Any:
        from gpuaudit.remediate.evidence import owner_key

        key = owner_key(document.api_version, document.kind, document.namespace, document.name)
        return self.evidence.get(key)


class Context(msgspec.Struct, frozen=True, dict=True):
    finding: Finding
    facts: Mapping[str, Any]
    document: Document
    template: PodTemplate | None  # pod and container findings
    container: Container | None  # container findings
    params: Mapping[str, Any]
    run: RunState

    # The finding's facts as its target's type (facts/types.py), read by the
    # planners of that target: converted on the first read.
    @cached_property
    def pod_facts(self) -> PodFacts:
        return as_type(self.facts, PodFacts)

    @cached_property
    def container_facts(self) -> ContainerFacts:
        return as_type(self.facts, ContainerFacts)

    @cached_property
    def config_facts(self) -> ConfigFacts:
        return as_type(self.facts, ConfigFacts)

    @cached_property
    def node_facts(self) -> NodeFacts:
        return as_type(self.facts, NodeFacts)


class Proposal(msgspec.Struct, frozen=True):
    variant: str | None
    params: dict[str, Any]
    basis: str  # how the parameters were chosen, for REVIEW.md
    confidence: Confidence
    scope: str  # what the change touches: two findings with the same scope share one patch
    share: SharePlan | None = None
    # What the change lowers on purpose, said in ``basis`` (coherence.LOWERABLE:
    # cpu, memory, shm, gpu, pod-gpu); anything else that goes down makes it incoherent.
    lowers: frozenset[str] = frozenset()
    # GPUs the change gives back across the object's replicas, as estimated
    # from what it lowers (remediate/volume.py orders patches by it; a move
    # to a share is counted there, from the sharing config's replicas).
    frees_gpus: float = 0.0


class Declined(msgspec.Struct, frozen=True):
    reason: str


NO_CONTAINER = Declined("the finding names no container")
NO_TEMPLATE = Declined("the finding names no pod template of this object")

Plan = Callable[[Context], "Proposal | Declined"]


class Planner(msgspec.Struct, frozen=True):
    """A remediation's planner, as the table ``PLANNERS`` lists it."""

    plan: Plan
    # The patch takes GPUs away from a pod shape: it is planned before the
    # others of its category, so a finding about how those GPUs are held
    # (whole, not shared) is judged again on the object without them, and
    # needs no patch.
    takes_gpus_away: bool = False


def per_object(func: Plan) -> Planner:
    """A planner of the finding's object (or config) as a whole."""
    return Planner(func)


def per_template(
    func: Callable[[Context, PodTemplate], Proposal | Declined], *, takes_gpus_away: bool = False
) -> Planner:
    """A planner of the finding's pod template: declines a finding that names none."""

    def plan(ctx: Context) -> Proposal | Declined:
        return NO_TEMPLATE if ctx.template is None else func(ctx, ctx.template)

    return Planner(plan, takes_gpus_away)


def per_container(func: Callable[[Context, Container], Proposal | Declined]) -> Planner:
    """A planner of the finding's container: declines a finding that names none."""

    def plan(ctx: Context) -> Proposal | Declined:
        return NO_CONTAINER if ctx.container is None else func(ctx, ctx.container)

    return Planner(plan)


def declines(reason: str) -> Planner:
    """A remediation gpuaudit does not write as a patch: every finding is
    declined with ``reason``, for REVIEW.md."""
    declined = Declined(reason)
    return Planner(lambda ctx: declined)


def identity(ctx: Context) -> dict[str, Any]:
    doc = ctx.document
    return {
        "kind": doc.kind,
        "name": doc.name,
        "namespace": doc.namespace,
        "role": ctx.template.role if ctx.template else None,
        "container": ctx.container.name if ctx.container else None,
    }


def same_type(original: Any, value: Any) -> Any:
    """``value`` written like ``original`` (a string stays a string, a number a
    number): kustomize keeps the quoting of the field a strategic merge
    replaces, so this is what the built object will hold either way."""
    if isinstance(original, bool) or original is None:
        return value
    if isinstance(original, str):
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
    if isinstance(original, (int, float)) and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() else number
    return value
