"""A small model of kube-scheduler's Filter stage, for writing recorded clusters.

The generated clusters (alibaba.py, bench/gen_cluster.py) bind pods to nodes
and give every pod that cannot be bound the FailedScheduling message the real
scheduler would write (gpu-domain.md §6, ``FitError.Error``): per node, the
first filter that rejects it, in the default plugin order (NodeUnschedulable,
TaintToleration, NodeAffinity, NodeResourcesFit); a histogram of reasons
sorted as strings; then the preemption verdict, where a node rejected by an
"unresolvable" filter is "not helpful" and a node short of resources finds
"no victims" (all pods here share one priority).

It is deliberately separate from ``gpuaudit.facts.scheduling``: test data must
not be produced by the code under test.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.kube.quantity import parse_quantity

UNSCHEDULABLE = "node(s) were unschedulable"
UNTOLERATED = "node(s) had untolerated taint(s)"  # 1.35+ and 1.34 patch releases
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
_UNRESOLVABLE = {UNSCHEDULABLE, UNTOLERATED, AFFINITY}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Effective requests: containers summed, init containers as a floor;
    an extended resource's request defaults to its limit."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        # API defaulting: a resource with a limit and no request requests the limit.
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: parse_quantity(value) for name, value in merged.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0.0) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0.0), value)
    return total


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression(expr: Mapping[str, Any], value: str | None) -> bool:
    op, values = expr.get("operator"), [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            return (int(value) > int(values[0])) if op == "Gt" else (int(value) < int(values[0]))
        except ValueError:
            return False
    return False


def matches_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and required node affinity (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    name = (node.get("metadata") or {}).get("name")
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        if all(_expression(e, labels.get(e.get("key"))) for e in exprs) and all(
            _expression(f, name if f.get("key") == "metadata.name" else None) for f in fields
        ):
            return True
    return False


@dataclass
class _Node:
    obj: dict[str, Any]
    name: str
    allocatable: dict[str, float]
    used: dict[str, float] = field(default_factory=dict)
    pods: int = 0


class Scheduler:
    """Nodes with what is bound to them; ``bind`` first-fit, ``fit_error`` why not."""

    def __init__(self, nodes: Iterable[dict[str, Any]], *, dra: bool = True) -> None:
        self.dra = dra  # 1.34+: "no new claims to deallocate, " before the preemption part
        self.nodes: list[_Node] = []
        for obj in nodes:
            allocatable = {
                name: parse_quantity(value)
                for name, value in ((obj.get("status") or {}).get("allocatable") or {}).items()
            }
            self.nodes.append(_Node(obj, obj["metadata"]["name"], allocatable))
        self.by_name = {node.name: node for node in self.nodes}
        self._static: dict[str, tuple[list[_Node], dict[str, str]]] = {}
        self._start: dict[str, int] = {}
        self._errors: dict[str, str | None] = {}

    # -- binding ---------------------------------------------------------------

    def account(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Count a pod that is already on ``node_name`` (no checks)."""
        node = self.by_name[node_name]
        for name, value in pod_requests(pod).items():
            node.used[name] = node.used.get(name, 0.0) + value
        node.pods += 1
        self._errors.clear()

    def release(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Stop counting a pod on ``node_name`` (it finished)."""
        node = self.by_name[node_name]
        for name, value in pod_requests(pod).items():
            node.used[name] = node.used.get(name, 0.0) - value
        node.pods -= 1
        self._start.clear()  # room appeared: earlier misses may fit now
        self._errors.clear()

    def bind(self, pod: Mapping[str, Any]) -> str | None:
        """Bind ``pod`` to the first node (in node order) that passes every
        filter and return its name; None when no node does."""
        node = self._place(pod)
        if node is not None:
            self.account(pod, node)
        return node

    def _place(self, pod: Mapping[str, Any]) -> str | None:
        key = _signature(pod)
        candidates, _ = self._static_filter(pod, key)
        requests = pod_requests(pod)
        start = self._start.get(key, 0)
        # Resources only shrink while binding, so a node that could not take
        # this exact pod never will: resume after it next time.
        for index in range(start, len(candidates)):
            if not _short_of(candidates[index], requests):
                self._start[key] = index
                return candidates[index].name
        self._start[key] = len(candidates)
        return None

    # -- explaining ------------------------------------------------------------

    def node_reasons(self, pod: Mapping[str, Any]) -> dict[str, list[str]]:
        """Why each node rejects ``pod`` (empty list: it would fit)."""
        _, static = self._static_filter(pod, _signature(pod))
        requests = pod_requests(pod)
        out = {}
        for node in self.nodes:
            if node.name in static:
                out[node.name] = [static[node.name]]
            else:
                out[node.name] = _short_of(node, requests)
        return out

    def fit_error(self, pod: Mapping[str, Any]) -> str | None:
        """The FailedScheduling message for ``pod``, or None when a node fits."""
        key = _signature(pod)
        if key not in self._errors:
            reasons = self.node_reasons(pod)
            if any(not r for r in reasons.values()):
                self._errors[key] = None
            else:
                self._errors[key] = fit_error_message(reasons, dra=self.dra)
        return self._errors[key]

    def _static_filter(self, pod: Mapping[str, Any], key: str) -> tuple[list[_Node], dict[str, str]]:
        """(nodes passing the filters that do not depend on load, {node: reason})."""
        cached = self._static.get(key)
        if cached is not None:
            return cached
        spec = pod.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        passing, rejected = [], {}
        for node in self.nodes:
            node_spec = node.obj.get("spec") or {}
            taints = node_spec.get("taints") or []
            if node_spec.get("unschedulable") and not _tolerates(
                tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
            ):
                rejected[node.name] = UNSCHEDULABLE
            elif any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, t) for t in taints):
                rejected[node.name] = UNTOLERATED
            elif not matches_node(pod, node.obj):
                rejected[node.name] = AFFINITY
            else:
                passing.append(node)
        self._static[key] = (passing, rejected)
        return passing, rejected


def _short_of(node: _Node, requests: Mapping[str, float]) -> list[str]:
    reasons = []
    if node.pods + 1 > node.allocatable.get("pods", float("inf")):
        reasons.append(TOO_MANY_PODS)
    for name, value in requests.items():
        if value > 0 and node.used.get(name, 0.0) + value > node.allocatable.get(name, 0.0) + 1e-9:
            reasons.append(f"Insufficient {name}")
    return reasons


def fit_error_message(node_reasons: Mapping[str, list[str]], *, dra: bool = True) -> str:
    """``0/N nodes are available: <histogram>.`` plus the preemption verdict."""
    total = len(node_reasons)
    histogram = Counter(reason for reasons in node_reasons.values() for reason in reasons)
    preemption = Counter(
        NOT_HELPFUL if any(r in _UNRESOLVABLE for r in reasons) else NO_VICTIMS for reasons in node_reasons.values()
    )

    def join(counts: Counter[str]) -> str:
        # FitError sorts the "<count> <reason>" strings, so "10 x" precedes "2 y".
        return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))

    claims = " no new claims to deallocate," if dra else ""
    return (
        f"0/{total} nodes are available: {join(histogram)}.{claims} "
        f"preemption: 0/{total} nodes are available: {join(preemption)}."
    )


def failed_scheduling_event(
    pod: Mapping[str, Any], message: str, *, first: str, last: str, count: int
) -> dict[str, Any]:
    """A core/v1 Event as the scheduler's events.k8s.io recorder leaves it."""
    meta = pod["metadata"]
    digest = hashlib.sha1(f"{meta['namespace']}/{meta['name']}".encode()).hexdigest()
    name = f"{meta['name']}.{digest[:16]}"
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "uid": f"ev-{meta.get('uid', name)}",
            "resourceVersion": meta.get("resourceVersion", "1"),
            "creationTimestamp": first,
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "apiVersion": "v1",
            "resourceVersion": meta.get("resourceVersion", "1"),
        },
        "reason": "FailedScheduling",
        "message": message,
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Warning",
        "eventTime": first.replace("Z", ".000000Z"),
        "action": "Scheduling",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-control-plane-0",
    }
    if count > 1:
        event["series"] = {"count": count, "lastObservedTime": last.replace("Z", ".000000Z")}
    return event


def _signature(pod: Mapping[str, Any]) -> str:
    """Pods with the same signature get the same verdict on the same nodes."""
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            sorted(pod_requests(pod).items()),
            spec.get("nodeSelector"),
            spec.get("affinity"),
            spec.get("tolerations"),
        ],
        sort_keys=True,
    )
