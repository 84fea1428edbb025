"""Coherence: whether a patched object still works, judged on the object
before and after (the plan's computed result, or the overlay kustomize built).

A patch is incoherent when, on the effective spec (an InferenceService
merged with its serving runtime, see ``model.serving_runtimes``):

- a container requests an extended resource the patch introduced and nothing
  advertises it: no device-plugin config (in the overlay, the inputs or the
  site), no MIG layout, no node of the snapshot. On GKE a `.shared` name is
  never advertised (sharing is a node-pool setting there);
- a container's CPU, memory, /dev/shm or GPU request goes down, unless
  lowering it is the stated purpose of a change on that object;
- a workload (or one of its pod templates) that requested a GPU no longer
  does, unless dropping it is the stated purpose (a Ray head);
- a Ray pod's resource keys Ray counts as GPUs (those ending in `gpu`)
  change: KubeRay and the autoscaler would no longer see its GPUs;
- an InferenceService's CPU, memory or /dev/shm changes while the runtime
  that also sets them is unknown.

Pure: the planner calls it before an overlay is written (an incoherent
change becomes a decline with the reason), and `fix --verify` on the built
output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import msgspec
import yaml

from gpuaudit import gpus
from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.kube.shapes import ObjectId, object_id
from gpuaudit.model import Container, Document, PodTemplate
from gpuaudit.model.serving_runtimes import Runtime, effective, is_inference_service, runtimes_in
from gpuaudit.model.workload_builder import WorkloadMemo, build_workloads

SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"
RAY_GROUP = "ray.io"
DEFAULT_SHM = 64 * 2**20  # the container runtime's /dev/shm without a volume
# What a change may lower on purpose (Proposal.lowers).
LOWERABLE = frozenset({"cpu", "memory", "shm", "gpu", "pod-gpu"})


class Setting(msgspec.Struct, frozen=True):
    """What the check needs beyond the two objects: how to find pod specs,
    the serving runtimes of the inputs and snapshot, the site config, and
    what the snapshot's nodes advertise."""

    locators: Mapping[tuple[str, str], KindLocator]
    runtimes: tuple[Runtime, ...] = ()
    platform: str | None = None
    shared_resource: str | None = None  # the site says its nodes advertise it
    node_resources: Mapping[str, str] = msgspec.field(default_factory=dict)  # resource -> "node N (snapshot)"


def setting_for(
    locators: Mapping[tuple[str, str], KindLocator],
    objects: Iterable[Mapping[str, Any]],
    site: Mapping[str, Any] | None = None,
    snapshot: Mapping[str, Any] | None = None,
) -> Setting:
    site = site or {}
    objects = list(objects)
    snap_objects = _snapshot_objects(snapshot)
    return Setting(
        locators,
        tuple(runtimes_in([*objects, *snap_objects])),
        str(site["platform"]).lower() if site.get("platform") else None,
        str(site["shared_resource"]) if site.get("shared_resource") else None,
        node_resources(snapshot),
    )


def _snapshot_objects(snapshot: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    objects = (snapshot or {}).get("objects")
    if not isinstance(objects, Mapping):
        return []
    out: list[Mapping[str, Any]] = []
    for items in objects.values():
        if isinstance(items, list):
            out.extend(o for o in items if isinstance(o, Mapping))
    return out


def node_resources(snapshot: Mapping[str, Any] | None) -> dict[str, str]:
    """Extended resources the snapshot's nodes advertise, each with a node that does."""
    found: dict[str, str] = {}
    objects = (snapshot or {}).get("objects")
    nodes = objects.get("nodes") if isinstance(objects, Mapping) else None
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, Mapping):
            continue
        name = str((node.get("metadata") or {}).get("name") or "?")
        status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
        for section in ("allocatable", "capacity"):
            values = status.get(section)
            if isinstance(values, Mapping):
                for resource in values:
                    if "/" in str(resource):
                        found.setdefault(str(resource), f"node {name} of the snapshot")
    return found


# --- what is advertised ------------------------------------------------------------


def advertised(objects: Iterable[Mapping[str, Any]], setting: Setting, where: Mapping[ObjectId, str]) -> dict[str, str]:
    """Resource -> what advertises it, in ``objects`` (the inputs as the
    overlay leaves them, plus the objects it adds), the site and the
    snapshot. ``where``: how to name an object (in this overlay, in the inputs)."""
    from gpuaudit.facts.device_plugin import is_device_plugin_config, is_mig_parted_config, renamed_resources

    names: dict[str, str] = dict(setting.node_resources)
    if setting.shared_resource and setting.platform != "gke":
        names.setdefault(setting.shared_resource, "the site config (shared_resource)")
    policies: list[tuple[str, Mapping[str, Any]]] = []
    layouts: dict[str, tuple[str, set[str]]] = {}  # layout name -> (where, profiles)
    for obj in objects:
        oid = object_id(obj)
        label = where.get(oid, f"{oid[1]} {oid[3]}")
        if obj.get("kind") == "ConfigMap" and isinstance(obj.get("data"), Mapping):
            for key, text in obj["data"].items():
                config = _parsed(text) if isinstance(text, str) and "version" in text else None
                if is_device_plugin_config(config):
                    for name in renamed_resources(config):
                        names.setdefault(f"{name}{SHARED_SUFFIX}", f"device-plugin config {key} of {label}")
                elif is_mig_parted_config(config):
                    for layout, devices in (config.get("mig-configs") or {}).items():
                        profiles = {
                            str(p)
                            for d in devices or []
                            if isinstance(d, Mapping) and d.get("mig-enabled")
                            for p in (d.get("mig-devices") or {})
                        }
                        layouts[str(layout)] = (f"MIG layout {layout} of {label}", profiles)
        elif obj.get("kind") == "ClusterPolicy" and group_of(str(obj.get("apiVersion") or "")) == "nvidia.com":
            policies.append((label, obj))
    for label, policy in policies:
        spec = policy.get("spec") if isinstance(policy.get("spec"), Mapping) else {}
        strategy = (spec.get("mig") or {}).get("strategy") if isinstance(spec.get("mig"), Mapping) else None
        manager = spec.get("migManager") if isinstance(spec.get("migManager"), Mapping) else {}
        if strategy != "mixed" or manager.get("enabled") is False:
            continue
        default = ((manager.get("config") or {}).get("default")) if isinstance(manager.get("config"), Mapping) else None
        for said, profiles in layouts.values():
            for profile in profiles:
                names.setdefault(f"{MIG_PREFIX}{profile}", f"{said}, with the mixed strategy of {label}")
        if isinstance(default, str) and default.startswith("all-") and default != "all-disabled":
            for profile in _builtin_layout(default[4:]):
                names.setdefault(f"{MIG_PREFIX}{profile}", f"MIG layout {default} (mixed strategy) of {label}")
    return names


@lru_cache(maxsize=4096)
def _parsed(text: str) -> Any:
    """A ConfigMap value as YAML (None when it is not): configs are parsed once per run."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _builtin_layout(name: str) -> list[str]:
    """Profiles of the GPU Operator's built-in `all-<name>` layouts."""
    if name == "balanced":
        return sorted(p for p in gpus.all_mig_profiles() if p.split(".")[0] in ("1g", "2g", "3g") and "+" not in p)
    return [name] if gpus.known_mig_profile(name) else []


def why_unadvertised(resource: str, names: Mapping[str, str], setting: Setting) -> str | None:
    if resource.endswith(SHARED_SUFFIX):
        if setting.platform == "gke":
            return (
                f"requests {resource}, which GKE never advertises: on GKE GPU sharing is a node-pool "
                "setting (cloud.google.com/gke-gpu-sharing-strategy) and the resource stays nvidia.com/gpu"
            )
        if resource not in names:
            return (
                f"requests {resource}, which nothing advertises: no device-plugin config in this overlay, "
                "the inputs or the site renames GPUs to it, and no node of the snapshot offers it"
            )
    elif resource.startswith(MIG_PREFIX) and resource not in names:
        return (
            f"requests {resource}, which nothing advertises: no step in this overlay or the inputs "
            "partitions a GPU into that slice (a mig-parted layout with the mixed strategy and the "
            "nvidia.com/mig.config label on the nodes), and no node of the snapshot offers it"
        )
    return None


# --- one object --------------------------------------------------------------------


class _Shape(msgspec.Struct, frozen=True):
    """What the check compares, per pod template and container."""

    templates: dict[str, PodTemplate]
    containers: dict[tuple[str, str], Container]
    template_unknown: str | None  # why the spec its pods get (a runtime or config merged in) is unknown


LLM_CONFIGS = (
    "KServe merges its LLMInferenceServiceConfig templates (the well-known kserve-config-llm-* "
    "and spec.baseRefs) under it, and gpuaudit does not merge those, so the CPU, memory and "
    "/dev/shm its pods get are unknown"
)


def _shape(obj: Mapping[str, Any], setting: Setting, memo: WorkloadMemo | None = None) -> _Shape:
    unknown = None
    if is_inference_service(obj):
        obj, resolution = effective(obj, setting.runtimes)
        if resolution.backed and resolution.runtime is None:
            unknown = resolution.reason
    elif obj.get("kind") == "LLMInferenceService" and group_of(str(obj.get("apiVersion") or "")) == (
        "serving.kserve.io"
    ):
        unknown = LLM_CONFIGS
    elif obj.get("kind") == "TrainJob" and group_of(str(obj.get("apiVersion") or "")) == "trainer.kubeflow.org":
        ref = ((obj.get("spec") or {}).get("runtimeRef") or {}) if isinstance(obj.get("spec"), Mapping) else {}
        unknown = (
            f"its training runtime {ref.get('name') or '(runtimeRef)'} gives its pods their spec and "
            "gpuaudit does not merge a TrainJob with its runtime, so the CPU, memory and /dev/shm "
            "its trainer pods get are unknown"
        )
    doc = Document(obj, "", 1)
    workloads, _ = memo.build(doc, setting.locators) if memo else build_workloads([doc], setting.locators)
    templates = {t.pointer: t for w in workloads for t in w.templates}
    containers = {(t.pointer, c.name): c for t in templates.values() for c in (*t.containers, *t.init_containers)}
    return _Shape(templates, containers, unknown)


def _gpu_total(requests: Iterable[Any]) -> float:
    return sum(r.count or 0 for r in requests if r.mode != "dra")


def _template_gpus(t: PodTemplate) -> float:
    return (
        sum(_gpu_total(c.gpus) for c in (*t.containers, *t.init_containers))
        + _gpu_total(t.extra_gpus)
        + (1 if any(r.mode == "dra" for r in t.extra_gpus) else 0)
    )


def _main_gpus(t: PodTemplate) -> float:
    return (
        sum(_gpu_total(c.gpus) for c in t.containers)
        + _gpu_total(t.extra_gpus)
        + (1 if any(r.mode == "dra" for r in (*t.extra_gpus, *(g for c in t.containers for g in c.gpus))) else 0)
    )


def _shm(t: PodTemplate, c: Container, ray: bool = False) -> float:
    """The container's /dev/shm size in bytes (inf: a memory volume without a
    limit). KubeRay mounts a memory-backed /dev/shm sized to the container's
    memory limit (unbounded without one) on a Ray container that has none."""
    names = [n for n, path in c.volume_mounts.items() if str(path).rstrip("/") == "/dev/shm"]
    if not names:
        if ray:
            return c.memory_limit if c.memory_limit else math.inf
        return DEFAULT_SHM
    for volume in t.spec.get("volumes") or []:
        if isinstance(volume, Mapping) and volume.get("name") == names[0]:
            empty = volume.get("emptyDir")
            if not isinstance(empty, Mapping):
                return math.inf  # a host path or other volume: not ours to size
            try:
                return parse_quantity(empty["sizeLimit"]) if empty.get("sizeLimit") is not None else math.inf
            except QuantityError:
                return math.inf
    return math.inf


def _resources(obj: Mapping[str, Any], c: Container) -> dict[str, Any]:
    from gpuaudit.kube import pointers

    raw = pointers.get(obj, c.resources_pointer)
    out: dict[str, Any] = {}
    if isinstance(raw, Mapping):
        for section in ("limits", "requests"):
            values = raw.get(section)
            if isinstance(values, Mapping):
                for k, v in values.items():
                    out.setdefault(str(k), v)
    return out


def _fmt(value: float, kind: str) -> str:
    if math.isinf(value):
        return "unlimited"
    if kind in ("memory", "shm"):
        gib = value / 2**30
        return f"{gib:g}Gi" if gib >= 1 else f"{value / 2**20:g}Mi"
    return f"{value:g}"


def problems(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    setting: Setting,
    names: Mapping[str, str],
    lowers: frozenset[str] = frozenset(),
    memo: WorkloadMemo | None = None,
) -> list[str]:
    """Why ``after`` does not work where ``before`` did (empty when coherent).
    ``memo``: workloads built for earlier questions (the planner's passes)."""
    out: list[str] = []
    old, new = _shape(before, setting, memo), _shape(after, setting, memo)
    effective_obj_before = effective(before, setting.runtimes)[0] if is_inference_service(before) else before
    effective_obj_after = effective(after, setting.runtimes)[0] if is_inference_service(after) else after
    ray = group_of(str(after.get("apiVersion") or "")) == RAY_GROUP
    for key, c in new.containers.items():
        was = old.containers.get(key)
        if was is None:
            continue
        t_old, t_new = old.templates[key[0]], new.templates[key[0]]
        who = f"container {c.name}"
        res_old, res_new = _resources(effective_obj_before, was), _resources(effective_obj_after, c)
        # Extended resources the patch introduced must be advertised.
        for resource in sorted(set(res_new) - set(res_old)):
            why = why_unadvertised(resource, names, setting)
            if why:
                out.append(f"{who} {why}")
        # Ray counts GPUs by the keys ending in `gpu`.
        # Only dropping a Ray head's GPUs (pod-gpu) changes them on purpose.
        if ray and "pod-gpu" not in lowers:
            gpu_old = {k: v for k, v in res_old.items() if k.lower().endswith("gpu")}
            gpu_new = {k: v for k, v in res_new.items() if k.lower().endswith("gpu")}
            if gpu_old != gpu_new:
                out.append(
                    f"{who}: the resource keys Ray counts as GPUs (ending in gpu) change from "
                    f"{_keys(gpu_old)} to {_keys(gpu_new)}: KubeRay and the Ray "
                    "autoscaler would no longer see this pod's GPUs"
                )
        # Nothing goes down unless that is the change's purpose.
        pairs = [
            ("cpu", _req(was.cpu_request, was.cpu_limit), _req(c.cpu_request, c.cpu_limit), "CPU request"),
            (
                "memory",
                _req(was.memory_request, was.memory_limit),
                _req(c.memory_request, c.memory_limit),
                "memory request",
            ),
            ("shm", _shm(t_old, was, ray), _shm(t_new, c, ray), "/dev/shm size"),
            ("gpu", _gpu_total(was.gpus), _gpu_total(c.gpus), "GPU request"),
        ]
        for kind, a, b, what in pairs:
            if a is None or kind in lowers:
                continue
            if b is None or b < a - 1e-9:
                source = ""
                if old.template_unknown is None and is_inference_service(before) and kind != "gpu":
                    source = " (what the InferenceService and its serving runtime give together)"
                elif ray and kind == "shm":
                    source = " (KubeRay mounts a /dev/shm the size of the memory limit)"
                shown = "none" if b is None else _fmt(b, kind)
                out.append(f"{who}: the effective {what} goes down from {_fmt(a, kind)}{source} to {shown}")
        if new.template_unknown:
            changed = [
                what
                for what, a, b in (
                    ("CPU", _req(was.cpu_request, was.cpu_limit), _req(c.cpu_request, c.cpu_limit)),
                    ("memory", _req(was.memory_request, was.memory_limit), _req(c.memory_request, c.memory_limit)),
                    ("/dev/shm", _shm(t_old, was, ray), _shm(t_new, c, ray)),
                )
                if a != b
            ]
            out += [f"{who}: sets {what} while {new.template_unknown}" for what in changed]
    # Every pod template (and workload) that requested a GPU still does.
    if "pod-gpu" not in lowers:
        for pointer, t in old.templates.items():
            after_t = new.templates.get(pointer)
            if after_t is None or _template_gpus(t) <= 0:
                continue
            if _main_gpus(after_t) <= 0 and _main_gpus(t) <= 0 < _template_gpus(t):
                if _template_gpus(after_t) < _template_gpus(t):
                    out.append(
                        f"pod template {t.role}: its initContainers held its only GPU and no app "
                        "container requests one now: the server would run without a GPU"
                    )
            elif _main_gpus(after_t) <= 0 < _main_gpus(t):
                out.append(f"pod template {t.role} no longer requests a GPU")
    had = sum(_template_gpus(t) for t in old.templates.values())
    has = sum(_template_gpus(t) for t in new.templates.values())
    if had > 0 and has <= 0:
        out.append("the workload requested a GPU and no longer does")
    return list(dict.fromkeys(out))


def _keys(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(values.items())) or "none"


def _req(request: float | None, limit: float | None) -> float | None:
    return request if request is not None else limit


def check_all(
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any], frozenset[str]]],
    world: Iterable[Mapping[str, Any]],
    setting: Setting,
    where: Mapping[ObjectId, str] | None = None,
) -> dict[ObjectId, list[str]]:
    """Problems per object over (before, after, lowers) pairs; ``world``: every
    object the overlay leaves (patched, untouched and new), for what is advertised."""
    names = advertised(world, setting, where or {})
    out = {}
    for before, after, lowers in pairs:
        found = problems(before, after, setting, names, lowers)
        if found:
            out[object_id(after)] = found
    return out
