"""What part of a cluster a command audits (-n/--namespace, -l/--selector):
the pod selector as kubectl reads it, and a snapshot narrowed to the scope.
The API server filters a live cluster's pod list already; a snapshot file
is filtered here alike."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

# Snapshot lists of namespaced objects that --namespace narrows (nodes,
# ClusterPolicies, ResourceSlices and the device-plugin ConfigMaps describe
# the cluster: they stay whole).
NAMESPACED_KEYS = ("pods", "events", "replicasets", "jobs", "workloads", "resourceclaims", "kueueworkloads")


class SelectorError(ValueError):
    """A term of a label selector that cannot be read."""


class Scope(msgspec.Struct, frozen=True):
    """Only pods and namespaced objects in ``namespaces`` (none: all), and
    only pods matching ``pod_selector`` (kubectl's syntax)."""

    namespaces: tuple[str, ...] = ()
    pod_selector: str | None = None

    @classmethod
    def from_options(cls, namespaces: Sequence[str] = (), pod_selector: str | None = None) -> Scope:
        """-n values (repeatable or comma-separated) and -l as given."""
        names = tuple(n.strip() for v in namespaces for n in v.split(",") if n.strip())
        return cls(names, pod_selector or None)

    @property
    def narrows(self) -> bool:
        return bool(self.namespaces or self.pod_selector)


_SET_TERM = re.compile(
    r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$"
)


def label_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over labels for kubectl's selector syntax (equality- and
    set-based); a SelectorError naming the term it cannot read."""
    terms: list[tuple[str, str, str, frozenset[str]]] = []
    for raw in re.split(r",(?![^(]*\))", selector):
        if not raw.strip():
            continue
        m = _SET_TERM.match(raw)
        if m is None or (m[1] and (m[3] or m[5])):
            raise SelectorError(f"cannot read the selector term {raw.strip()!r}")
        negated, key, op, value, set_op, values = m.groups()
        if negated:
            terms.append((key, "!", "", frozenset()))
        elif op:
            terms.append((key, "!=" if op == "!=" else "=", value, frozenset()))
        elif set_op:
            terms.append((key, set_op, "", frozenset(v.strip() for v in values.split(",") if v.strip())))
        else:
            terms.append((key, "exists", "", frozenset()))

    def matches(labels: Mapping[str, Any]) -> bool:
        for key, op, value, values in terms:
            present = key in labels
            have = str(labels.get(key)) if present else None
            ok = {
                "!": not present,
                "exists": present,
                "=": have == value,
                "!=": have != value,
                "in": have in values,
                "notin": have not in values,
            }[op]
            if not ok:
                return False
        return True

    return matches


def narrow_snapshot(snapshot: dict[str, Any], scope: Scope) -> None:
    """Keep the namespaced objects in the scope's namespaces and the pods that
    match its selector (in place)."""
    objects = snapshot.get("objects") or {}
    if scope.namespaces:
        wanted = set(scope.namespaces)
        for key in NAMESPACED_KEYS:
            items = objects.get(key)
            if isinstance(items, list):
                objects[key] = [
                    o
                    for o in items
                    if isinstance(o, dict) and ((o.get("metadata") or {}).get("namespace") or "default") in wanted
                ]
    if scope.pod_selector:
        matches = label_matcher(scope.pod_selector)
        pods = objects.get("pods")
        if isinstance(pods, list):
            objects["pods"] = [
                p for p in pods if isinstance(p, dict) and matches((p.get("metadata") or {}).get("labels") or {})
            ]
