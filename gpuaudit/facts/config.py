"""Facts about GPU sharing configuration objects found in the input:
device-plugin configs (bare, or inside a ConfigMap), the GPU Operator
ClusterPolicy, and mig-parted configs (gpu-domain.md §2, §3)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from gpuaudit.facts import Subject
from gpuaudit.model import Document, Resource


def subjects(doc: Document) -> Iterator[Subject]:
    resource = Resource(doc.api_version, doc.kind, doc.namespace, doc.name)
    identity = {"apiVersion": doc.api_version, "name": doc.name, "namespace": doc.namespace}
    obj = doc.obj
    if doc.kind == "ClusterPolicy" and doc.api_version.startswith("nvidia.com/"):
        yield Subject("config", {**cluster_policy_facts(obj), **identity}, resource, doc)
    elif doc.kind == "ConfigMap":
        data = obj.get("data")
        if not isinstance(data, Mapping):
            return
        for key, text in data.items():
            parsed = _parse_embedded(text)
            if is_device_plugin_config(parsed):
                ptr = "/data/" + str(key).replace("~", "~0").replace("/", "~1")
                facts = {**device_plugin_facts(parsed, str(key), ptr), **identity}
                yield Subject("config", facts, resource, doc)


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
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None


def device_plugin_facts(cfg: Mapping[str, Any], key: str, pointer: str) -> dict[str, Any]:
    sharing = cfg.get("sharing") if isinstance(cfg.get("sharing"), Mapping) else {}
    flags = cfg.get("flags") if isinstance(cfg.get("flags"), Mapping) else {}
    strategies = {}
    for name in ("timeSlicing", "mps"):
        section = sharing.get(name)
        if not isinstance(section, Mapping):
            continue
        resources = [r for r in section.get("resources") or [] if isinstance(r, Mapping)]
        replicas = [r.get("replicas") for r in resources]
        strategies[name] = {
            "resources": [str(r.get("name")) for r in resources],
            "min_replicas": min((x for x in replicas if isinstance(x, int)), default=None),
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
    }


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
        "mig_default_config": str(mig_default) if mig_default else None,
        "configures_sharing": bool(config_name) or mig_layout,
    }
