"""Facts about GPU sharing configuration objects found in the input:
device-plugin configs (bare, or inside a ConfigMap), the GPU Operator
ClusterPolicy, and mig-parted configs (gpu-domain.md §2, §3)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import yaml

from gpuaudit import gpus
from gpuaudit.facts import Subject
from gpuaudit.facts.node_pools import is_karpenter_node_pool, node_pool_facts
from gpuaudit.kube import pointers
from gpuaudit.kube.shapes import as_list
from gpuaudit.kube.yaml_lines import load_yaml_with_lines
from gpuaudit.model import Document, Resource

if TYPE_CHECKING:
    from gpuaudit.facts.context import Context


def subjects(doc: Document, context: Context | None = None) -> Iterator[Subject]:
    """Config subjects of one object. ``context`` (what the rest of the input
    requests) adds the facts that compare a config with the workloads."""
    resource = Resource(doc.api_version, doc.kind, doc.namespace, doc.name)
    identity = {"apiVersion": doc.api_version, "name": doc.name, "namespace": doc.namespace}
    obj = doc.obj
    # Exemption annotations (gpuaudit.io/ignore.<rule>) work on config objects too.
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    notes = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    annotations = {str(k): str(v) for k, v in notes.items()}
    if doc.kind == "ClusterPolicy" and doc.api_version.startswith("nvidia.com/"):
        facts = {**cluster_policy_facts(obj), **identity}
        facts["mig_requests_unserved"] = _mig_unserved(facts["mig_strategy"], context)
        facts["mig_layouts_mixed"] = _mixed_under_single(obj, facts["mig_strategy"], context)
        facts["shareable_services"] = _served_by_a_share(context)
        yield Subject("config", facts, resource, doc, annotations)
    elif doc.kind == "ConfigMap":
        data = obj.get("data")
        if not isinstance(data, Mapping):
            return
        profiles = [(key, _parse_embedded(text)) for key, text in data.items()]
        sharing = [key for key, parsed in profiles if is_device_plugin_config(parsed) and _shares(parsed)]
        for key, parsed in profiles:
            ptr = "/data/" + str(key).replace("~", "~0").replace("/", "~1")
            if is_device_plugin_config(parsed):
                facts = {**device_plugin_facts(parsed, str(key), ptr), **identity}
                facts["other_profiles_share"] = any(k != key for k in sharing)
                facts.update(_against_workloads(parsed, facts["mig_strategy"], context))
                yield Subject("config", facts, resource, doc, annotations)
            elif is_mig_parted_config(parsed):
                text = data[key]
                embedded = _with_embedded_lines(doc, ptr, str(text))
                facts = {**mig_parted_facts(parsed, str(key), ptr), **identity}
                yield Subject("config", facts, resource, embedded, annotations)
    elif doc.kind in _VALUES_AT:
        # A chart's values that write the device plugin's config inline
        # (the nvidia-device-plugin chart's config.map, the GPU Operator's
        # devicePlugin.config.data), as GitOps repositories keep them.
        found = list(_configs_in_values(doc))
        for ptr, key, parsed in found:
            facts = {**device_plugin_facts(parsed, key, ptr), **identity, "kind": doc.kind}
            facts["other_profiles_share"] = any(p != ptr and _shares(c) for p, _, c in found)
            facts.update(_against_workloads(parsed, facts["mig_strategy"], context))
            yield Subject("config", facts, resource, doc, annotations)
    elif is_karpenter_node_pool(obj):
        yield Subject("config", {**node_pool_facts(obj), **identity, "kind": doc.kind}, resource, doc, annotations)
    elif not doc.kind and not doc.api_version:  # a bare config file
        bare = {"apiVersion": "", "name": doc.file.rsplit("/", 1)[-1], "namespace": ""}
        embedded = [] if is_device_plugin_config(obj) else list(_configs_under(obj, "", 0))
        for ptr, key, parsed in embedded:  # a chart's values file (config.map.<name>: |- ...)
            facts = {**device_plugin_facts(parsed, key, ptr), **bare, "kind": "ValuesFile"}
            facts["other_profiles_share"] = any(p != ptr and _shares(c) for p, _, c in embedded)
            facts.update(_against_workloads(parsed, facts["mig_strategy"], context))
            yield Subject("config", facts, Resource("", "ValuesFile", "", bare["name"]), doc)
        if is_device_plugin_config(obj):
            facts = {**device_plugin_facts(obj, "", ""), **bare, "kind": "DevicePluginConfig"}
            facts.update(_against_workloads(obj, facts["mig_strategy"], context))
            resource = Resource("", "DevicePluginConfig", "", bare["name"])
            yield Subject("config", facts, resource, doc)
        elif is_mig_parted_config(obj):
            facts = {**mig_parted_facts(obj, "", ""), **bare}
            resource = Resource("", "MigPartedConfig", "", bare["name"])
            yield Subject("config", facts, resource, doc)


def device_plugin_configs(documents: Iterable[Document]) -> Iterator[Mapping[str, Any]]:
    """Every device-plugin config in ``documents``: in ConfigMaps, in the
    chart values a HelmRelease or an Argo CD Application carries or a values
    file holds, or bare."""
    for doc in documents:
        if doc.kind == "ConfigMap" and isinstance(doc.obj.get("data"), Mapping):
            for text in doc.obj["data"].values():
                parsed = _parse_embedded(text)
                if is_device_plugin_config(parsed):
                    yield parsed
        elif doc.kind in _VALUES_AT:
            yield from (parsed for _, _, parsed in _configs_in_values(doc))
        elif not doc.kind and is_device_plugin_config(doc.obj):
            yield doc.obj
        elif not doc.kind:  # a chart's values file
            yield from (parsed for _, _, parsed in _configs_under(doc.obj, "", 0))


# Where an object that installs a chart keeps its values: a mapping, or YAML
# text (a k3s HelmChart's valuesContent, an Application's helm.values).
_VALUES_AT: Mapping[str, tuple[str, ...]] = {
    "HelmRelease": ("/spec/values",),
    "Application": ("/spec/source/helm/valuesObject", "/spec/source/helm/values"),
    "HelmChart": ("/spec/valuesContent",),
}
_MAX_VALUES_DEPTH = 12  # chart values nest a few levels; a config sits at most this deep


def _configs_in_values(doc: Document) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(pointer, key, config) of each device-plugin config written as a
    string in the chart values ``doc`` carries."""
    for at in _VALUES_AT.get(doc.kind, ()):
        values = pointers.get(doc.obj, at)
        if isinstance(values, str):
            values = parse_config_text(values)
            yield from ((at, key, cfg) for _, key, cfg in _configs_under(values, at, 0))
        elif isinstance(values, Mapping):
            yield from _configs_under(values, at, 0)


def _configs_under(node: Any, ptr: str, depth: int) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    if depth > _MAX_VALUES_DEPTH or not isinstance(node, Mapping):
        return
    for key, value in node.items():
        child = ptr + "/" + str(key).replace("~", "~0").replace("/", "~1")
        if isinstance(value, str):
            parsed = _parse_embedded(value)
            if is_device_plugin_config(parsed):
                yield child, str(key), parsed
        else:
            yield from _configs_under(value, child, depth + 1)


def _shares(cfg: Mapping[str, Any]) -> bool:
    """Whether a device-plugin config configures any sharing (a profile
    beside which another may deliberately configure none)."""
    return bool(device_plugin_facts(cfg, "", "")["configures_sharing"])


def is_device_plugin_config(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and str(value.get("version")) == "v1"
        and ("sharing" in value or "flags" in value)
        and "mig-configs" not in value
    )


def _parse_embedded(text: Any) -> Any:
    if not isinstance(text, str) or "version" not in text:
        return None
    return parse_config_text(text)


@lru_cache(maxsize=256)
def parse_config_text(text: str) -> Any:
    """YAML text embedded in an object (a ConfigMap value, a Serve config),
    parsed once per text: the input context and the facts both read it
    (callers treat the result as read-only); None when it is not YAML."""
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None


def device_plugin_facts(cfg: Mapping[str, Any], key: str, pointer: str) -> dict[str, Any]:
    sharing = cfg.get("sharing") if isinstance(cfg.get("sharing"), Mapping) else {}
    flags = cfg.get("flags") if isinstance(cfg.get("flags"), Mapping) else {}
    strategies = {}
    refused: list[str] = []
    for name in ("timeSlicing", "mps"):
        section = sharing.get(name)
        if not isinstance(section, Mapping):
            continue
        resources = [r for r in as_list(section.get("resources")) if isinstance(r, Mapping)]
        replicas = [r.get("replicas") for r in resources]
        counts = [x for x in replicas if isinstance(x, int) and not isinstance(x, bool) and x > 0]
        refused += _refused(name, resources)
        strategies[name] = {
            "resources": [str(r.get("name")) for r in resources],
            "min_replicas": min(counts, default=None),
            "max_replicas": max(counts, default=None),
            "rename_by_default": section.get("renameByDefault") is True,
            "fail_requests_greater_than_one": section.get("failRequestsGreaterThanOne"),
        }
    mig_strategy = flags.get("migStrategy")
    return {
        "kind": "ConfigMap",
        "config_type": "device-plugin",
        "key": key,
        "pointer": pointer,
        "time_slicing": strategies.get("timeSlicing"),
        "mps": strategies.get("mps"),
        "mig_strategy": str(mig_strategy) if mig_strategy is not None else None,
        "configures_sharing": bool(strategies) or mig_strategy in ("single", "mixed"),
        "refused_by_plugin": refused,
    }


def _refused(section: str, resources: list[Mapping[str, Any]]) -> list[str]:
    """What in a sharing section the device plugin refuses when it parses its
    config (k8s-device-plugin api/config/v1/replicas.go): no resources, a
    resource without a name, replicas missing or below 1. The plugin then
    fails to start on the nodes given this config, and they advertise no GPU."""
    if not resources:
        return [f"{section}: no resources"]
    problems = []
    for resource in resources:
        name = resource.get("name")
        replicas = resource.get("replicas")
        if not isinstance(name, str) or not name:
            problems.append(f"{section}: a resource without a name")
        elif replicas is None:
            problems.append(f"{section}: {name} without replicas")
        elif isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            problems.append(f"{section}: {name} with replicas {replicas}")
    return problems


def _closed(*keys: str) -> dict[str, Any]:
    return {"properties": {key: {} for key in keys}, "additionalProperties": False}


# The ClusterPolicy blocks whose every key gpuaudit knows (gpu-domain.md §2,
# §3; clusterpolicy_types.go), as a schema whose other mappings stay open: a
# key beside them is no field of the operator's CRD (a typo), dropped by the
# API server, and the field it meant keeps its default.
_POLICY_BLOCKS = {
    "properties": {
        "spec": {
            "properties": {
                "mig": _closed("strategy"),
                "migManager": {
                    "properties": {"config": _closed("name", "default"), "gpuClientsConfig": _closed("name")}
                },
                "devicePlugin": {"properties": {"config": _closed("name", "default")}},
            }
        }
    }
}


def _unknown_policy_keys(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    from gpuaudit.nearest import nearest  # only for a ClusterPolicy
    from gpuaudit.schemas import unknown_keys

    return [
        {
            "pointer": pointers.join(at, key),
            "key": key,
            "nearest": nearest(key, known) or f"none close; it knows {', '.join(known)}",
        }
        for at, key, known in unknown_keys(obj, _POLICY_BLOCKS)
    ]


def cluster_policy_facts(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    plugin = spec.get("devicePlugin") if isinstance(spec.get("devicePlugin"), Mapping) else {}
    config = plugin.get("config") if isinstance(plugin.get("config"), Mapping) else {}
    mig = spec.get("mig") if isinstance(spec.get("mig"), Mapping) else {}
    manager = spec.get("migManager") if isinstance(spec.get("migManager"), Mapping) else {}
    config_name = config.get("name") or None
    manager_config = manager.get("config") if isinstance(manager.get("config"), Mapping) else {}
    mig_default = manager_config.get("default") or None
    # The MIG manager only partitions GPUs when told a layout other than all-disabled.
    mig_layout = manager.get("enabled") is not False and mig_default not in (None, "all-disabled")
    return {
        "kind": "ClusterPolicy",
        "config_type": "cluster-policy",
        "key": "",
        "pointer": "/spec/devicePlugin",
        "device_plugin_config": str(config_name) if config_name else None,
        "device_plugin_default": str(config.get("default")) if config.get("default") else None,
        "mig_strategy": str(mig.get("strategy")) if mig.get("strategy") else None,
        "mig_strategy_pointer": "/spec/mig/strategy" if mig.get("strategy") else "/spec",
        "mig_default_config": str(mig_default) if mig_default else None,
        "configures_sharing": bool(config_name) or mig_layout,
        # The MIG manager switched on without a layout of its own partitions
        # the nodes whose nvidia.com/mig.config label asks for one: in
        # manifests, where no node is seen, whether any does is unknown
        # (cluster.py: false).
        "mig_by_node_label": manager.get("enabled") is True and not mig_layout,
        "unknown_keys": _unknown_policy_keys(obj),
    }


# --- compared with the workloads in the same input ------------------------------


def _against_workloads(cfg: Mapping[str, Any], mig_strategy: str | None, context: Context | None) -> dict[str, Any]:
    return {
        "rename_conflicts": _rename_conflicts(cfg, context),
        "mig_requests_unserved": _mig_unserved(mig_strategy, context),
        "replicas_asked": _replicas_asked(cfg, context),
        "shareable_services": _served_by_a_share(context),
    }


def _served_by_a_share(context: Context | None) -> list[str] | None:
    """The services of the input a share would serve; None where no
    workload is seen (a live config: the cluster's pods are judged by
    GPA-SH-101)."""
    return None if context is None else list(context.shareable_services)


def _replicas_asked(cfg: Mapping[str, Any], context: Context | None) -> list[str] | None:
    """The names this config time-slices under their own name that a
    container of the input asks for two or more of (``nvidia.com/gpu: 3``),
    as ``name x count``; None where no workload is seen (a live config)."""
    if context is None:
        return None
    sharing = cfg.get("sharing") if isinstance(cfg.get("sharing"), Mapping) else {}
    section = sharing.get("timeSlicing")
    sliced = replicated_resources({"sharing": {"timeSlicing": section}}) if isinstance(section, Mapping) else ()
    return [f"{name} x {context.most_asked[name]:g}" for name in sliced if context.most_asked.get(name, 0) >= 2]


def _rename_conflicts(cfg: Mapping[str, Any], context: Context | None) -> list[dict[str, Any]]:
    """Workloads asking for a name this config stops advertising: with
    renameByDefault the device plugin offers only ``<name>.shared``."""
    if context is None:
        return []
    return [
        {"requested": name, "advertised": f"{name}.shared", "workloads": list(context.requested[name])}
        for name in renamed_resources(cfg)
        if context.requested.get(name)
    ]


def renamed_resources(cfg: Mapping[str, Any]) -> Iterator[str]:
    """The resources a device-plugin config renames to ``<name>.shared``
    (time-slicing or MPS with renameByDefault: true)."""
    sharing = cfg.get("sharing") if isinstance(cfg.get("sharing"), Mapping) else {}
    for strategy in ("timeSlicing", "mps"):
        section = sharing.get(strategy)
        if not isinstance(section, Mapping) or section.get("renameByDefault") is not True:
            continue
        for resource in as_list(section.get("resources")):
            name = resource.get("name") if isinstance(resource, Mapping) else None
            if name:
                yield str(name)


def replicated_resources(cfg: Mapping[str, Any]) -> Iterator[str]:
    """The resources a device-plugin config replicates under their own name
    (time-slicing or MPS, 2 or more replicas, neither renameByDefault nor a
    `rename`): on the nodes given the config, a request for such a name is a
    turn on a shared GPU, not a GPU of its own."""
    sharing = cfg.get("sharing") if isinstance(cfg.get("sharing"), Mapping) else {}
    for strategy in ("timeSlicing", "mps"):
        section = sharing.get(strategy)
        if not isinstance(section, Mapping) or section.get("renameByDefault") is True:
            continue
        for resource in as_list(section.get("resources")):
            if not isinstance(resource, Mapping) or resource.get("rename"):
                continue
            replicas = resource.get("replicas")
            if resource.get("name") and isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 2:
                yield str(resource["name"])


def _mig_unserved(mig_strategy: str | None, context: Context | None) -> list[str]:
    """MIG resources (nvidia.com/mig-<profile>) that workloads request while
    the MIG strategy cannot advertise them: only `mixed` does."""
    if context is None or mig_strategy not in ("none", "single"):
        return []
    return sorted(r for r in context.requested if r.startswith("nvidia.com/mig-"))


def _mixed_under_single(
    policy: Mapping[str, Any], mig_strategy: str | None, context: Context | None
) -> list[str] | None:
    """The layouts of the MIG manager's own config (a ConfigMap of the input
    that ``migManager.config.name`` names) that give one node a mix, while
    ``mig.strategy`` is single; None when that config is not in the input."""
    spec = policy.get("spec") if isinstance(policy.get("spec"), Mapping) else {}
    manager = spec.get("migManager") if isinstance(spec.get("migManager"), Mapping) else {}
    config = manager.get("config") if isinstance(manager.get("config"), Mapping) else {}
    name = config.get("name")
    if mig_strategy != "single" or manager.get("enabled") is False or not name or context is None:
        return None
    found = [data for (_, n), data in context.config_maps.items() if n == name]
    if not found:
        return None
    return sorted(
        {layout for data in found for text in data.values() for layout in _mixed_layouts(_parse_embedded(text))}
    )


# --- mig-parted -----------------------------------------------------------------


def _mixed_layouts(cfg: Any) -> list[str]:
    """The layouts of a mig-parted config that give one node a mix: MIG on
    some GPUs and off on others, or more than one MIG profile. Entries are
    compared within one GPU model (the same `device-filter`): a layout may
    name each model's own profile (`1g.5gb` for A100-40GB, `1g.10gb` for
    A100-80GB), and a node holds one model."""
    if not is_mig_parted_config(cfg):
        return []
    mixed = []
    for name, entries in cfg["mig-configs"].items():
        by_model: dict[Any, tuple[set[bool], set[str]]] = {}
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("mig-enabled"), bool):
                continue
            device_filter = entry.get("device-filter")
            model = tuple(map(str, device_filter)) if isinstance(device_filter, list) else device_filter
            enabled, profiles = by_model.setdefault(str(model) if model is not None else None, (set(), set()))
            enabled.add(entry["mig-enabled"])
            devices = entry.get("mig-devices")
            if entry["mig-enabled"] and isinstance(devices, Mapping):
                profiles.update(str(p) for p, count in devices.items() if count)
        if any(len(enabled) > 1 or len(profiles) > 1 for enabled, profiles in by_model.values()):
            mixed.append(str(name))
    return mixed


def is_mig_parted_config(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("mig-configs"), Mapping)


def mig_parted_facts(cfg: Mapping[str, Any], key: str, pointer: str) -> dict[str, Any]:
    """MIG layouts whose profiles the GPUs they target do not offer
    (gpu-domain.md §3): per entry, the GPUs come from `device-filter` (PCI
    ids); without a filter the profile must exist on some MIG-capable GPU."""
    invalid: list[dict[str, Any]] = []
    enables = False
    for name, entries in cfg["mig-configs"].items():
        if not isinstance(entries, list):
            continue
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                continue
            enables = enables or entry.get("mig-enabled") is True
            devices = entry.get("mig-devices")
            if not isinstance(devices, Mapping):
                continue
            models = _filter_models(entry.get("device-filter"))
            for profile, count in devices.items():
                problem = _profile_problem(str(profile), count, models)
                if problem:
                    where = f"{pointer}/mig-configs/{_escape(str(name))}/{i}/mig-devices"
                    invalid.append(
                        {
                            "config": str(name),
                            "profile": str(profile),
                            "gpus": [m.model for m in models] if models else [],
                            "problem": problem,
                            "pointer": f"{where}/{_escape(str(profile))}",
                        }
                    )
    return {
        "kind": "ConfigMap" if key else "MigPartedConfig",
        "config_type": "mig-parted",
        "key": key,
        "pointer": invalid[0]["pointer"] if invalid else pointer,
        "mig_configs": [str(n) for n in cfg["mig-configs"]],
        "invalid_profiles": invalid,
        "configures_sharing": enables,
    }


def _filter_models(device_filter: Any) -> list[gpus.GpuModel]:
    ids = [device_filter] if isinstance(device_filter, str) else device_filter
    if not isinstance(ids, list):
        return []
    found = (gpus.model_for_pci(str(i)) for i in ids)
    return list({m.model: m for m in found if m is not None}.values())


def _profile_problem(profile: str, count: Any, models: list[gpus.GpuModel]) -> str | None:
    base = gpus.mig_base_profile(profile)
    if base is None:
        return "not a MIG profile name"
    if not models:
        return None if gpus.known_mig_profile(profile) else "no GPU offers it"
    missing = [m.model for m in models if base not in m.mig]
    if missing:
        return f"not offered by {', '.join(missing)}"
    if isinstance(count, int) and not isinstance(count, bool):
        over = [m for m in models if count > m.mig[base]]
        if over:
            return f"{count} instances; {over[0].model} offers at most {over[0].mig[base]}"
    return None


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _with_embedded_lines(doc: Document, pointer: str, text: str) -> Document:
    """The document with line numbers for the YAML embedded at ``pointer``
    (a block scalar starts on the line after its key), so findings can point
    inside a ConfigMap's config text."""
    try:
        _, lines = load_yaml_with_lines(text)
    except yaml.YAMLError:
        return doc
    first = doc.line_of(pointer)
    embedded = {pointer + p: first + line for p, line in lines.items() if p}
    return Document(doc.obj, doc.file, doc.line, {**doc.lines, **embedded}, doc.base)
