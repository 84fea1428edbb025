"""What the scheduler would decide, as pure functions: which nodes a pod's
selectors, affinity and tolerations admit, and why a pending pod pends
(FailedScheduling messages, gpu-domain.md §6)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaudit.kube.shapes import as_list

_SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


# --- node selection ------------------------------------------------------------


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key") if isinstance(expr.get("key"), str) else None
    op = expr.get("operator")
    values = [str(v) for v in as_list(expr.get("values"))]
    present = key in labels
    value = labels.get(str(key))
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            left, right = int(str(value)), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    exprs = [e for e in as_list(term.get("matchExpressions")) if isinstance(e, Mapping)]
    fields = [e for e in as_list(term.get("matchFields")) if isinstance(e, Mapping)]
    if not exprs and not fields:
        return False  # an empty term matches nothing
    if not all(_expression_matches(e, labels) for e in exprs):
        return False
    return all(_expression_matches(f, {"metadata.name": name}) for f in fields)


def required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return [t for t in terms if isinstance(t, Mapping)] if isinstance(terms, list) else []


def selects_node(spec: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """nodeName, nodeSelector and required node affinity (terms are ORed)."""
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name and node_name != name:
        return False
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    terms = required_terms(spec)
    return not terms or any(_term_matches(t, name, labels) for t in terms)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taints(
    tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Taints that keep the pod off the node (NoSchedule and NoExecute)."""
    return [
        t
        for t in taints
        if t.get("effect") in _SCHEDULING_EFFECTS and not any(_tolerates(tol, t) for tol in tolerations)
    ]


def taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


# --- FailedScheduling messages -------------------------------------------------

# (Pattern texts, compiled on first use by re's cache: only a live audit
# reads the scheduler's messages.)
_PREFIX = r"^\s*(\d+)/(\d+) nodes are available:\s*"
_ENTRY = r"^(\d+)\s+(.*)$"
_GPU_RESOURCE = r"nvidia\.com/|amd\.com/gpu|gpu\.intel\.com/"

# Reason phrase -> cause (gpu-domain.md §6). Checked in order, by substring.
# A node that reports a resource shortage passed the placement filters (the
# scheduler's filters run in order, taints and affinity before fit): a GPU
# short there is allocation; CPU, memory or the pod count short is resources.
_CAUSES: tuple[tuple[str, str], ...] = (
    ("Insufficient", "resources"),
    ("Too many pods", "resources"),
    ("didn't match Pod's node affinity/selector", "placement"),
    ("untolerated taint", "placement"),
    ("that the pod didn't tolerate", "placement"),
    ("were unschedulable", "placement"),
    ("didn't match the requested node name", "placement"),
    ("pod affinity", "placement"),
    ("pod anti-affinity", "placement"),
    ("anti-affinity rules", "placement"),
    ("topology spread", "placement"),
    ("volume node affinity", "placement"),
    ("PersistentVolume's node affinity", "placement"),
    ("claim", "dra"),
)
# Causes of nodes that would take the pod but for what they lack, most telling first.
_FIT_CAUSES = ("allocation", "dra", "resources")


def parse_failed_scheduling(message: str) -> dict[str, Any]:
    """Split a FailedScheduling message into reasons with node counts.

    ``{"nodes": 5, "reasons": [{"count": 2, "reason": "Insufficient nvidia.com/gpu",
    "cause": "allocation"}, ...], "cause": "allocation"}``. The nodes that
    reject the pod for what they lack are the ones it would otherwise run on,
    so the pod's cause is theirs when there are any: allocation (a GPU
    resource), dra (claims), resources (CPU, memory, pod count); else the
    placement reason that rejects the most nodes. Messages in other shapes
    come back with no reasons.
    """
    match = re.match(_PREFIX, message)
    if not match:
        return {"nodes": None, "reasons": [], "cause": _cause_of(message) or "unknown"}
    body = message[match.end() :]
    # The histogram ends at the first ". " (then come preemption and DRA suffixes).
    histogram = body.split(". ", 1)[0].rstrip(".")
    reasons = []
    for part in histogram.split(", "):
        entry = re.match(_ENTRY, part.strip())
        if entry:
            reason = entry.group(2).strip()
            cause = _cause_of(reason)
            if cause == "resources" and re.search(_GPU_RESOURCE, reason):
                cause = "allocation"
            reasons.append({"count": int(entry.group(1)), "reason": reason, "cause": cause})
        elif reasons:  # a reason phrase that itself contains ", " (taint lists)
            reasons[-1]["reason"] += ", " + part
    fit = [c for c in _FIT_CAUSES if any(r["cause"] == c for r in reasons)]
    if fit:
        cause = fit[0]
    elif reasons:
        cause = max(reasons, key=lambda r: r["count"])["cause"] or "unknown"
    else:
        cause = _cause_of(body) or "unknown"
    return {"nodes": int(match.group(2)), "reasons": reasons, "cause": cause}


def _cause_of(reason: str) -> str | None:
    for phrase, cause in _CAUSES:
        if phrase in reason:
            return cause
    return None
