"""PolicyReport (wgpolicyk8s.io/v1alpha2): the report format Kyverno and the
Policy Reports UI read, so findings can live in the cluster beside others.

One PolicyReport per namespace that has findings, and one
ClusterPolicyReport for cluster-scoped objects, files that are not objects
(a bare device-plugin config), skipped rules and input problems, each named
``gpuaudit``. A report larger than MAX_REPORT_BYTES (etcd refuses an object
past 1.5 MiB: 3,000 pending GPU pods in one namespace made 7 MB) is split by
rule, ``gpuaudit-<rule>``, and a rule's results past the limit into parts
``gpuaudit-<rule>-2``...: names that depend only on what the report holds.
Every report is labelled ``app.kubernetes.io/managed-by: gpuaudit``, so that
the ones a later run no longer writes can be found and pruned
(deploy/components/policyreports). Results are
`fail` (findings), `skip` (rules that lacked an input) and `error` (input
problems); nothing is reported as `pass`, since the audit judges objects,
not rules, and only reports what it found. A YAML stream of documents, for
`kubectl apply -f`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from typing import Any

import yaml

from gpuaudit.model import AuditResult, Finding
from gpuaudit.safetext import clean_tree

API_VERSION = "wgpolicyk8s.io/v1alpha2"
SOURCE = "gpuaudit"
NAME = "gpuaudit"
# The most one report may take as compact JSON, as the API server stores it:
# etcd refuses a value past 1.5 MiB; the rest is room for what the server adds
# (metadata, managedFields).
MAX_REPORT_BYTES = 1_000_000
_NOT_DNS = re.compile(r"[^a-z0-9]+")
# Kinds without a namespace (the rest are reported in their namespace's report).
CLUSTER_SCOPED = {
    "ClusterPolicy",
    "ClusterTrainingRuntime",
    "ClusterWorkflowTemplate",
    "ClusterQueue",
    "ResourceFlavor",
    "DeviceClass",
    "Node",
    "Namespace",
    "Cluster",
    "",
}


def _result(f: Finding, stamp: dict[str, int]) -> dict[str, Any]:
    r = f.resource
    ref = {k: v for k, v in (("apiVersion", r.api_version), ("kind", r.kind)) if v}
    ref["name"] = r.name
    if r.namespace:
        ref["namespace"] = r.namespace
    properties = {
        "title": f.title,
        "file": f.location.file,
        "line": str(f.location.line or ""),
        "pointer": f.location.pointer,
        "container": r.container or "",
        "evidence": json.dumps(dict(f.evidence), sort_keys=True, default=str),
    }
    if f.remediation:
        properties["remediation"] = str(f.remediation.get("id"))
    if f.units:  # the deployable units that hold it (properties are strings)
        properties["units"] = ", ".join(f.units)
    return {
        "policy": f.rule,
        "rule": f.rule,
        "category": f.category,
        "severity": f.severity,
        "result": "fail",
        "scored": True,
        "source": SOURCE,
        "message": f.message,
        "resources": [ref],
        "properties": {k: v for k, v in properties.items() if v},
        "timestamp": dict(stamp),
    }


def _summary(results: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
    for r in results:
        counts[r["result"]] += 1
    return counts


def _report(kind: str, namespace: str, results: list[dict[str, Any]], name: str = NAME) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "gpuaudit"}
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "summary": _summary(results),
        "results": results,
    }


def reports(result: AuditResult, now: float | None = None) -> list[dict[str, Any]]:
    seconds = int(now if now is not None else time.time())
    stamp = {"seconds": seconds, "nanos": 0}
    namespaced: dict[str, list[dict[str, Any]]] = {}
    cluster: list[dict[str, Any]] = []
    for f in result.findings:
        entry = _result(f, stamp)
        if f.resource.kind in CLUSTER_SCOPED or not f.resource.api_version:
            cluster.append(entry)
        else:
            namespaced.setdefault(f.resource.namespace, []).append(entry)
    for s in result.skipped:
        cluster.append(
            {
                "policy": s.rule,
                "result": "skip",
                "source": SOURCE,
                "message": s.reason,
                "timestamp": dict(stamp),
            }
        )
    for e in result.errors:
        cluster.append(
            {
                "policy": "gpuaudit/input",
                "result": "error" if e.level == "error" else "warn",
                "source": SOURCE,
                "message": e.message,
                "properties": {"file": e.file, "line": str(e.line or "")},
                "timestamp": dict(stamp),
            }
        )
    docs = [doc for ns, items in sorted(namespaced.items()) for doc in _split("PolicyReport", ns, items)]
    if cluster or not docs:
        docs += _split("ClusterPolicyReport", "", cluster)
    return docs


def _size(value: Any) -> int:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "surrogatepass"))  # render() replaces a lone surrogate later


def _split(kind: str, namespace: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One report, or (past MAX_REPORT_BYTES) one per rule, a rule's results
    in as many parts as the limit needs, each part's results in an order that
    depends on them alone (not on the order the cluster listed its pods)."""
    whole = _report(kind, namespace, results)
    if _size(whole) <= MAX_REPORT_BYTES:
        return [whole]
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_rule.setdefault(str(result.get("policy")), []).append(result)
    docs = []
    for rule, items in sorted(by_rule.items()):
        base = f"{NAME}-{_NOT_DNS.sub('-', rule.lower()).strip('-')[:40] or 'rule'}"
        items = sorted(items, key=_order)
        for number, part in enumerate(_parts(kind, namespace, items), 1):
            docs.append(_report(kind, namespace, part, base if number == 1 else f"{base}-{number}"))
    return docs


def _order(result: dict[str, Any]) -> str:
    return json.dumps(
        [result.get("resources"), result.get("properties"), result.get("message")], sort_keys=True, default=str
    )


def _parts(kind: str, namespace: str, results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``results`` cut greedily into lists whose report stays under the limit
    (a single result larger than it still gets its own report)."""
    empty = _size(_report(kind, namespace, [], f"{NAME}-{'x' * 50}")) + 64  # the summary's digits grow
    parts: list[list[dict[str, Any]]] = [[]]
    size = empty
    for result in results:
        cost = _size(result) + 1
        if parts[-1] and size + cost > MAX_REPORT_BYTES:
            parts.append([])
            size = empty
        parts[-1].append(result)
        size += cost
    return parts


def render(result: AuditResult, **_: Any) -> str:
    # YAML writes C1 and bidi characters as they are: they go first (gpuaudit/safetext.py).
    documents = [clean_tree(d) for d in reports(result)]
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, allow_unicode=True)
