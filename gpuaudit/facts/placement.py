"""Placement facts that need the site: GPU taints a pod does not tolerate,
product pins narrower than a GPU class the site declares, and spreading
rules that demand more GPU nodes than the replicas' GPUs fill."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaudit import gpus
from gpuaudit.facts.context import Site
from gpuaudit.facts.scheduling import taint_text, untolerated_taints
from gpuaudit.kube.labels import HOSTNAME_LABEL
from gpuaudit.kube.shapes import as_list, as_map

# Node labels that say how many GPUs a node has (gpu-domain.md §6).
GPU_COUNT_LABELS = (
    "cloud.google.com/gke-accelerator-count",
    "karpenter.k8s.aws/instance-gpu-count",
    "eks.amazonaws.com/instance-gpu-count",
    "nvidia.com/gpu.count",
)


def untolerated_gpu_taints(
    tolerations: Sequence[Mapping[str, Any]], resources: Sequence[str], site: Site
) -> list[str] | None:
    """The site's GPU taints this pod does not tolerate; None when the site
    declares none. On GKE the ExtendedResourceToleration admission adds the
    toleration for a taint keyed by a resource the pod requests."""
    if not site.gpu_taints:
        return None
    automatic = set(resources) if site.platform == "gke" else set()
    taints = [{"effect": "NoSchedule", **t} for t in site.gpu_taints if t["key"] not in automatic]
    return [taint_text(t) for t in untolerated_taints(tolerations, taints)]


def broader_class(pin: Mapping[str, Any] | None, site: Site) -> dict[str, Any] | None:
    """A site GPU class that contains the pinned product(s) and more."""
    if not pin or not site.gpu_classes:
        return None
    values = [str(v) for v in pin.get("values") or ()]
    for cls in site.gpu_classes:
        covered = [p for p in cls.products if any(_same_product(v, p) for v in values)]
        left_out = [p for p in cls.products if p not in covered]
        if covered and left_out:
            return {
                "name": cls.name,
                "selector": ", ".join(f"{k}={v}" for k, v in cls.selector.items()),
                "products": list(cls.products),
                "left_out": left_out,
            }
    return None


def _same_product(value: str, product: str) -> bool:
    if value.lower() == product.lower():
        return True
    found = gpus.lookup(value)
    if found is None:
        return False
    other = gpus.lookup(product)
    return product == found.model or (other is not None and other.model == found.model)


def spread_facts(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    replicas: int | None,
    gpus_per_pod: float | None,
    node_selector: Mapping[str, str],
    site: Site,
    pointer: str,
) -> dict[str, Any] | None:
    """Required anti-affinity or a hard topology spread on the hostname that
    matches the pod's own labels: each node then takes at most a few of its
    replicas, however many GPUs it has."""
    per_node, by, where = _per_node_limit(spec, labels, pointer)
    if per_node is None:
        return None
    count, source = _gpus_per_node(node_selector, site)
    demanded = math.ceil(replicas / per_node) if replicas else None
    needed = None
    if replicas and gpus_per_pod and count:
        per_node_by_gpus = max(1, int(count // gpus_per_pod))
        needed = math.ceil(replicas / per_node_by_gpus)
    return {
        "max_pods_per_node": per_node,
        "by": by,
        "gpus_per_node": count,
        "gpus_per_node_source": source,
        "nodes_demanded": demanded,
        "nodes_needed": needed,
        "extra_nodes": demanded - needed if demanded is not None and needed is not None else None,
        "pointer": where,
    }


def _per_node_limit(
    spec: Mapping[str, Any], labels: Mapping[str, str], pointer: str
) -> tuple[int | None, str | None, str | None]:
    affinity = spec.get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    required = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, Mapping) else None
    for i, term in enumerate(required if isinstance(required, list) else ()):
        if (
            isinstance(term, Mapping)
            and term.get("topologyKey") == HOSTNAME_LABEL
            and _selects(term.get("labelSelector"), labels)
        ):
            where = f"{pointer}/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/{i}"
            return 1, "podAntiAffinity", where
    best: tuple[int | None, str | None, str | None] = (None, None, None)
    for i, c in enumerate(as_list(spec.get("topologySpreadConstraints"))):
        if (
            isinstance(c, Mapping)
            and c.get("topologyKey") == HOSTNAME_LABEL
            and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
            and _selects(c.get("labelSelector"), labels)
        ):
            skew = c.get("maxSkew")
            skew = skew if isinstance(skew, int) and skew > 0 else 1
            if best[0] is None or skew < best[0]:
                where = f"{pointer}/topologySpreadConstraints/{i}"
                best = (skew, "topologySpreadConstraints", where)
    return best


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a label selector matches these labels (an absent or empty
    selector selects nothing here: it cannot be shown to be self-spreading)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = as_map(selector.get("matchLabels"))
    exprs = as_list(selector.get("matchExpressions"))
    if not match_labels and not exprs:
        return False
    if not isinstance(match_labels, Mapping) or any(labels.get(str(k)) != str(v) for k, v in match_labels.items()):
        return False
    for e in exprs if isinstance(exprs, list) else ():
        if not isinstance(e, Mapping):
            return False
        key, op = str(e.get("key")), e.get("operator")
        values = [str(v) for v in as_list(e.get("values"))]
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(str(op), False)
        if not ok:
            return False
    return True


def _gpus_per_node(node_selector: Mapping[str, str], site: Site) -> tuple[float | None, str | None]:
    for label in GPU_COUNT_LABELS:
        value = node_selector.get(label)
        if value is not None and value.isdigit() and int(value) > 0:
            return float(value), label
    if site.gpus_per_node:
        return float(site.gpus_per_node), "site"
    return None, None
