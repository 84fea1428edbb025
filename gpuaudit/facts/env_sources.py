"""Env a container gets from ConfigMaps of the same input: ``envFrom``
``configMapRef`` and ``env[].valueFrom.configMapKeyRef``. A kustomize
``configMapGenerator`` (``envs: [runtime.env]``, ``literals: [MODEL=...]``)
renders to such a ConfigMap, and the model a server loads is often named
there (``vllm serve $MODEL``). Secrets are never read.

Pure: the ConfigMaps come in through the context (facts/context.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from msgspec.structs import replace

from gpuaudit.kube import pointers
from gpuaudit.kube.shapes import as_list
from gpuaudit.model import Container, PodTemplate, Workload

ConfigMaps = Mapping[tuple[str, str], Mapping[str, str]]  # (namespace, name) -> data


def config_map_data(obj: Mapping[str, Any]) -> dict[str, str]:
    data = obj.get("data")
    if not isinstance(data, Mapping):
        return {}
    return {str(k): str(v) for k, v in data.items() if v is not None and not isinstance(v, (Mapping, list))}


def _lookup(config_maps: ConfigMaps, namespace: str, name: str) -> Mapping[str, str] | None:
    found = config_maps.get((namespace, name)) or config_maps.get(("", name))
    if found is None and not namespace:  # a workload with no namespace: any ConfigMap of that name
        named = [data for (_, n), data in config_maps.items() if n == name]
        found = named[0] if len(named) == 1 else None
    return found


def resolved_env(
    raw: Mapping[str, Any], env: Mapping[str, str], namespace: str, config_maps: ConfigMaps
) -> dict[str, str]:
    """``env`` with what the container's ConfigMap references add: envFrom
    first (its prefix applied), then each valueFrom that the manifest left
    empty; a value written in ``env`` always wins, as in Kubernetes."""
    out: dict[str, str] = {}
    for source in as_list(raw.get("envFrom")):
        ref = source.get("configMapRef") if isinstance(source, Mapping) else None
        if not isinstance(ref, Mapping) or not ref.get("name"):
            continue
        data = _lookup(config_maps, namespace, str(ref["name"]))
        prefix = str(source.get("prefix") or "")
        for key, value in (data or {}).items():
            out[prefix + key] = value
    out.update({k: v for k, v in env.items() if v != "" or k not in out})
    for item in as_list(raw.get("env")):
        if not isinstance(item, Mapping) or item.get("value") not in (None, ""):
            continue
        ref = pointers.get(item, "/valueFrom/configMapKeyRef")
        if isinstance(ref, Mapping) and ref.get("name") and ref.get("key"):
            data = _lookup(config_maps, namespace, str(ref["name"]))
            if data is not None and str(ref["key"]) in data:
                out[str(item.get("name"))] = data[str(ref["key"])]
    return out


def with_config_map_env(w: Workload, t: PodTemplate, config_maps: ConfigMaps) -> PodTemplate:
    """``t`` with each container's env completed from ``config_maps``."""
    if not config_maps:
        return t

    def complete(c: Container) -> Container:
        raw = pointers.get(w.document.obj, c.pointer)
        if not isinstance(raw, Mapping) or not (raw.get("envFrom") or raw.get("env")):
            return c
        env = resolved_env(raw, c.env, w.namespace, config_maps)
        return c if env == dict(c.env) else replace(c, env=env)

    return _each_container(t, complete)


_LWS_GROUP = "leaderworkerset.x-k8s.io"


def with_controller_env(w: Workload, t: PodTemplate) -> PodTemplate:
    """``t`` with the env its controller puts first in every container:
    a LeaderWorkerSet's ``LWS_GROUP_SIZE`` (the pods of a group), so that
    ``--pipeline-parallel-size=$(LWS_GROUP_SIZE)``, directly or through an
    env value that names it, reads as the number it is."""
    if w.group != _LWS_GROUP:
        return t
    size = pointers.get(w.document.obj, "/spec/leaderWorkerTemplate/size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return t
    given = {"LWS_GROUP_SIZE": str(size)}

    def complete(c: Container) -> Container:
        # Kubernetes expands `$(VAR)` in an env value by the variables before
        # it; the controller's come first.
        env = {k: v.replace("$(LWS_GROUP_SIZE)", given["LWS_GROUP_SIZE"]) for k, v in c.env.items()}
        return replace(c, env={**given, **env})

    return _each_container(t, complete)


def _each_container(t: PodTemplate, complete: Callable[[Container], Container]) -> PodTemplate:
    """``t`` with ``complete`` applied to every container and init container."""
    return replace(
        t,
        containers=tuple(complete(c) for c in t.containers),
        init_containers=tuple(complete(c) for c in t.init_containers),
    )
