"""What facts about one object need to know beyond that object.

Two sources, both passed in explicitly (no globals): the site as declared in
``.gpuaudit.yaml`` ``site:`` (GPU taints, GPU classes, platform, shared
resource name) and what the rest of the input says (device-plugin configs
that rename shared GPUs, autoscalers that target a workload, which GPU
resources the workloads request).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from gpuaudit.facts import device_plugin as config_facts
from gpuaudit.facts.activity import saturates_gpus
from gpuaudit.facts.claims import asks_no_gpu, is_claim
from gpuaudit.facts.env_sources import config_map_data
from gpuaudit.facts.reservations import ENGINE_OF_KIND, memory_reservation
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.model import Document, Workload
from gpuaudit.model.serving_runtimes import is_runtime


class GpuClass(msgspec.Struct, frozen=True):
    """A set of GPU products a site treats as interchangeable, and the node
    labels that select all of them."""

    name: str
    selector: Mapping[str, str]
    products: tuple[str, ...]


class Site(msgspec.Struct, frozen=True):
    platform: str | None = None
    gpu_taints: tuple[Mapping[str, str], ...] = ()
    gpu_classes: tuple[GpuClass, ...] = ()
    shared_resource: str | None = None
    gpus_per_node: int | None = None
    gpu_memory_gib: float | None = None

    @classmethod
    def from_config(cls, site: Mapping[str, Any] | None) -> Site:
        site = site or {}
        return cls(
            platform=site.get("platform"),
            gpu_taints=tuple(
                {k: str(v) for k, v in t.items() if k in ("key", "value", "effect")}
                for t in site.get("gpu_taints") or ()
            ),
            gpu_classes=tuple(
                GpuClass(
                    str(c["name"]),
                    {str(k): str(v) for k, v in (c.get("selector") or {}).items()},
                    tuple(str(p) for p in c.get("products") or ()),
                )
                for c in site.get("gpu_classes") or ()
            ),
            shared_resource=site.get("shared_resource"),
            gpus_per_node=site.get("gpus_per_node"),
            gpu_memory_gib=site.get("gpu_memory_gib"),
        )


class Autoscaler(msgspec.Struct, frozen=True):
    """An HPA or KEDA ScaledObject aimed at a workload in the input."""

    kind: str
    name: str
    min_replicas: int


class Context(msgspec.Struct, frozen=True):
    site: Site = msgspec.field(default_factory=Site)
    # `.shared` resource names some config renames GPUs to; None when nothing
    # in the input or the site says (then a `.shared` request cannot be judged).
    shared_names: frozenset[str] | None = None
    # GPU resource names a time-slicing or MPS config of the input replicates
    # under their own name (nvidia.com/gpu, 8 replicas): a request for one
    # may be a turn on a shared GPU, whichever nodes get the config.
    replicated_names: frozenset[str] = frozenset()
    # The objects those configs are written in ("file: Kind name"): shared
    # with the rest of the folder named on the command line only when there
    # is one (one cluster's config; several may be several clusters').
    replicated_by: frozenset[str] = frozenset()
    # GPU resource name -> "Kind namespace/name" of the workloads requesting it.
    requested: Mapping[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    # GPU resource name -> the most of it one container asks for (a pod that
    # takes several time-sliced replicas: GPA-SH-004), within the folder named
    # on the command line as replicated_names are.
    most_asked: Mapping[str, float] = msgspec.field(default_factory=dict)
    # (kind, namespace, name) of a scale target -> the autoscaler aiming at it.
    autoscalers: Mapping[tuple[str, str, str], Autoscaler] = msgspec.field(default_factory=dict)
    # KServe ServingRuntime / ClusterServingRuntime objects of the input: an
    # InferenceService is judged as the runtime and its container merged.
    runtimes: tuple[Mapping[str, Any], ...] = ()
    # ConfigMaps of the input, (namespace, name) -> data: the env a container
    # takes from them (envFrom, configMapKeyRef; facts/env_sources.py).
    config_maps: Mapping[tuple[str, str], Mapping[str, str]] = msgspec.field(default_factory=dict)
    # The folders named on the command line: a file's context (examples/,
    # tests/: facts/purpose.py file_context) is read below them only.
    roots: tuple[str, ...] = ()
    # (namespace, name) of the input's ResourceClaims and templates that ask
    # for no GPU (facts/claims.asks_no_gpu): a pod taking one holds no GPU by
    # it; and of those that may (a GPU's class, or a request naming none).
    claims_without_gpus: frozenset[tuple[str, str]] = frozenset()
    claims_with_gpus: frozenset[tuple[str, str]] = frozenset()
    # "Kind namespace/name" of the input's long-running services that hold
    # one whole GPU per container and reserve none of its memory up front:
    # what a sharing config would give a share (GPA-SH-001 in manifests).
    shareable_services: tuple[str, ...] = ()
    # A unit of the folder named on the command line that names the GPU
    # operator or its sharing config (gpu-operator/, time-sliced-2/) did not
    # read or render: a sharing config there is unseen, so "no sharing" is
    # unknown (GPA-AL-001).
    gpu_config_unread: bool = False
    # (namespace, name) of the input's PersistentVolumeClaims that only one
    # node may mount (ReadWriteOnce, ReadWriteOncePod): a Deployment's new
    # pod that mounts one goes to the node of the old one.
    single_node_claims: frozenset[tuple[str, str]] = frozenset()


def build_context(
    site: Site,
    documents: Iterable[Document],
    workloads: Iterable[Workload],
    bare: Iterable[Document] = (),
    roots: Sequence[str] = (),
) -> Context:
    documents = list(documents)
    return Context(
        roots=tuple(roots),
        site=site,
        shared_names=_shared_names(site, [*documents, *bare]),
        **_replicated([*documents, *bare]),
        requested=_requested(workloads),
        most_asked=_most_asked(workloads),
        shareable_services=_shareable_services(workloads),
        autoscalers=_autoscalers(documents),
        runtimes=tuple(d.obj for d in documents if is_runtime(d.obj)),
        config_maps=_config_maps(documents),
        **_claims(documents),
        single_node_claims=_single_node_claims(documents),
    )


def merge_contexts(site: Site, parts: Sequence[Context]) -> Context:
    """The context of the whole input from those of its parts (in input
    order), as build_context over all of it would give."""
    known = [p.shared_names for p in parts if p.shared_names is not None]
    config_maps: dict[tuple[str, str], Mapping[str, str]] = {}
    for part in parts:
        config_maps.update(part.config_maps)
    requested: dict[str, dict[str, None]] = {}
    autoscalers: dict[tuple[str, str, str], Autoscaler] = {}
    for part in parts:
        for name, labels in part.requested.items():
            requested.setdefault(name, {}).update(dict.fromkeys(labels))
        autoscalers.update(part.autoscalers)
    return Context(
        site=site,
        shared_names=frozenset().union(*known) if known else None,
        replicated_names=frozenset().union(*(p.replicated_names for p in parts)),
        replicated_by=frozenset().union(*(p.replicated_by for p in parts)),
        requested={name: tuple(labels) for name, labels in requested.items()},
        most_asked=largest_values(p.most_asked for p in parts),
        autoscalers=autoscalers,
        runtimes=tuple(r for part in parts for r in part.runtimes),
        config_maps=config_maps,
        roots=parts[0].roots if parts else (),
        claims_without_gpus=frozenset().union(*(p.claims_without_gpus for p in parts)),
        claims_with_gpus=frozenset().union(*(p.claims_with_gpus for p in parts)),
        shareable_services=tuple(dict.fromkeys(s for p in parts for s in p.shareable_services)),
        gpu_config_unread=any(p.gpu_config_unread for p in parts),
        single_node_claims=frozenset().union(*(p.single_node_claims for p in parts)),
    )


def _single_node_claims(documents: Iterable[Document]) -> frozenset[tuple[str, str]]:
    found = set()
    for d in documents:
        if d.kind == "PersistentVolumeClaim" and d.api_version == "v1" and isinstance(d.obj.get("spec"), Mapping):
            modes = d.obj["spec"].get("accessModes")
            if isinstance(modes, list) and modes and set(modes) <= {"ReadWriteOnce", "ReadWriteOncePod"}:
                found.add((d.namespace, d.name))
    return frozenset(found)


def _claims(documents: Iterable[Document]) -> dict[str, frozenset[tuple[str, str]]]:
    claims = [d for d in documents if is_claim(d)]
    without = frozenset((d.namespace, d.name) for d in claims if asks_no_gpu(d))
    return {
        "claims_without_gpus": without,
        "claims_with_gpus": frozenset((d.namespace, d.name) for d in claims) - without,
    }


def _config_maps(documents: Iterable[Document]) -> dict[tuple[str, str], Mapping[str, str]]:
    return {
        (d.namespace, d.name): config_map_data(d.obj)
        for d in documents
        if d.kind == "ConfigMap" and d.api_version == "v1" and config_map_data(d.obj)
    }


def _shared_names(site: Site, documents: Iterable[Document]) -> frozenset[str] | None:
    names: set[str] = set()
    known = False
    if site.shared_resource:
        names.add(site.shared_resource)
        known = True
    for cfg in config_facts.device_plugin_configs(documents):
        known = True
        names.update(f"{name}.shared" for name in config_facts.renamed_resources(cfg))
    return frozenset(names) if known else None


def _replicated(documents: Sequence[Document]) -> dict[str, frozenset[str]]:
    names: set[str] = set()
    by: set[str] = set()
    for doc in documents:
        found = {n for cfg in config_facts.device_plugin_configs([doc]) for n in config_facts.replicated_resources(cfg)}
        if found:
            names |= found
            by.add(f"{doc.file}: {doc.kind or 'config'} {doc.name or ''}".rstrip())
    return {"replicated_names": frozenset(names), "replicated_by": frozenset(by)}


def _most_asked(workloads: Iterable[Workload]) -> dict[str, float]:
    most: dict[str, float] = {}
    for w in workloads:
        for t in w.templates:
            for c in t.containers:
                for r in c.gpus:
                    if r.count is not None and r.count > most.get(r.resource, 0):
                        most[r.resource] = r.count
    return most


def largest_values(maps: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each name's largest value over ``maps``."""
    out: dict[str, float] = {}
    for m in maps:
        for name, value in m.items():
            out[name] = max(value, out.get(name, value))
    return out


# What a unit's path says when it holds the GPU operator or its sharing
# config: gpu-operator, nvidia-device-plugin, time-sliced-2.
_GPU_CONFIG_MARKS = ("gpu", "nvidia", "slic")


def may_hold_gpu_config(unit: str) -> bool:
    """Whether a unit's path names the GPU operator or its sharing config."""
    lowered = unit.lower()
    return any(mark in lowered for mark in _GPU_CONFIG_MARKS)


def _label(w: Workload) -> str:
    return f"{w.kind} {w.namespace + '/' if w.namespace else ''}{w.name}"


# A server that reserves this share of its GPU's memory or more leaves a
# second tenant too little to load anything.
_MOST_OF_A_GPU = 0.5


def _shareable_services(workloads: Iterable[Workload]) -> tuple[str, ...]:
    """Services whose GPU containers each hold one whole GPU and run no
    server that reserves most of its memory at start (vLLM, NIM: a second
    tenant would find none) and no stress test (it starves one; told by
    activity.saturates_gpus, which check already asks: reservations'
    stress_test would compile its pattern on every run)."""
    found: list[str] = []
    for w in workloads:
        if w.workload_class != "service":
            continue
        runtime = ENGINE_OF_KIND.get(w.kind, "")
        holders = [c for t in w.templates for c in (*t.containers, *t.init_containers) if c.gpus]
        if holders and all(
            [(r.resource, r.count) for r in c.gpus] == [("nvidia.com/gpu", 1)]
            and ((held := memory_reservation(c, runtime)) is None or held.fraction < _MOST_OF_A_GPU)
            and not saturates_gpus(c)
            for c in holders
        ):
            found.append(_label(w))
    return tuple(found)


def _requested(workloads: Iterable[Workload]) -> dict[str, tuple[str, ...]]:
    found: dict[str, dict[str, None]] = {}
    for w in workloads:
        label = _label(w)
        for t in w.templates:
            for c in (*t.containers, *t.init_containers):
                for r in c.gpus:
                    found.setdefault(r.resource, {})[label] = None
    return {name: tuple(labels) for name, labels in found.items()}


# Autoscalers: HPA (minReplicas defaults to 1) and KEDA (minReplicaCount defaults to 0).
_SCALERS = {
    ("autoscaling", "HorizontalPodAutoscaler"): ("minReplicas", 1),
    ("keda.sh", "ScaledObject"): ("minReplicaCount", 0),
}


def _autoscalers(documents: Iterable[Document]) -> dict[tuple[str, str, str], Autoscaler]:
    found: dict[tuple[str, str, str], Autoscaler] = {}
    for doc in documents:
        group = doc.api_version.rpartition("/")[0]
        known = _SCALERS.get((group, doc.kind))
        spec = doc.obj.get("spec")
        if known is None or not isinstance(spec, Mapping):
            continue
        target = spec.get("scaleTargetRef")
        if not isinstance(target, Mapping) or not target.get("name"):
            continue
        field_name, default = known
        try:
            minimum = int(parse_quantity(spec.get(field_name, default)))
        except QuantityError:
            continue
        key = (str(target.get("kind") or "Deployment"), doc.namespace, str(target["name"]))
        found[key] = Autoscaler(doc.kind, doc.name, minimum)
    return found
