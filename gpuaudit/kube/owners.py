"""Which objects own a cluster's GPU pods: the walk up ``ownerReferences``
(Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, Pod -> RayCluster ->
RayService, ...) that tells the collector which owners to keep and which
custom resources to list. Pure: the collector does the listing.

Custom resources are listed by the plural named beside their kind in
``gpuaudit/data/podspecs.yaml`` (``plural:``): a kind without one is not a
pod-template owner gpuaudit knows how to read, so it is not fetched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import msgspec

from gpuaudit.kube.podspecs import builtin_locators, group_of

__all__ = ["OwnerKey", "OwnerWalk", "plurals"]

OwnerKey = tuple[str, str, str, str]  # group, kind, namespace, name

# Intermediates the snapshot already holds under their own keys; their pod
# templates are immutable (a Job) or rewritten by their owner (a ReplicaSet).
INTERMEDIATE_KINDS = frozenset({("apps", "ReplicaSet"), ("batch", "Job")})
_MAX_DEPTH = 8  # owner chains are short; a cycle must not loop forever


@cache
def plurals() -> dict[tuple[str, str], str]:
    """(group, kind) -> resource plural, for the custom resources that own pods."""
    return {key: kl.plural for key, kl in builtin_locators().items() if kl.plural}


def group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controlling owner reference (the first one when none says controller)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    refs = [r for r in refs if isinstance(r, Mapping)] if isinstance(refs, list) else []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def key_of(obj: Mapping[str, Any], group: str, kind: str) -> OwnerKey:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return group, kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


class OwnerWalk(msgspec.Struct):
    """The owner chains of some pods, over the objects read so far.

    ``add`` objects as they are listed, then ``walk``: every object a chain
    passes through is kept, and every reference the objects read cannot
    resolve is reported once, as (apiVersion, kind), for the collector to
    list if it knows the kind's plural."""

    pods: list[Mapping[str, Any]]
    index: dict[OwnerKey, Mapping[str, Any]] = msgspec.field(default_factory=dict)

    def add(self, objects: Iterable[Mapping[str, Any]], group: str, kind: str) -> None:
        for obj in objects:
            self.index[key_of(obj, group, kind)] = obj

    def walk(self) -> tuple[list[OwnerKey], set[tuple[str, str]]]:
        """(keys on the chains, in first-seen order; unresolved (apiVersion, kind))."""
        on_chain: dict[OwnerKey, None] = {}
        unresolved: set[tuple[str, str]] = set()
        for pod in self.pods:
            meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
            namespace = str(meta.get("namespace") or "")
            ref = controller_ref(pod)
            for _ in range(_MAX_DEPTH):
                if ref is None:
                    break
                api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
                key = (group_of(api_version), kind, namespace, str(ref.get("name") or ""))
                parent = self.index.get(key)
                if parent is None:
                    unresolved.add((api_version, kind))
                    break
                on_chain.setdefault(key)
                ref = controller_ref(parent)
        return list(on_chain), unresolved

    def owners(self) -> list[dict[str, Any]]:
        """The objects on the chains, intermediates held elsewhere left out."""
        keys, _ = self.walk()
        return [dict(self.index[k]) for k in keys if (k[0], k[1]) not in INTERMEDIATE_KINDS]
