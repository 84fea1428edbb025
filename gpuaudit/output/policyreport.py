"""PolicyReport (wgpolicyk8s.io/v1alpha2): the report format Kyverno and the
Policy Reports UI read, so findings can live in the cluster beside others.

One PolicyReport per namespace that has findings, and one
ClusterPolicyReport for cluster-scoped objects, files that are not objects
(a bare device-plugin config), skipped rules and input problems. Results are
`fail` (findings), `skip` (rules that lacked an input) and `error` (input
problems); nothing is reported as `pass`, since the audit judges objects,
not rules, and only reports what it found. A YAML stream of documents, for
`kubectl apply -f`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import yaml

from gpuaudit.model import AuditResult, Finding
from gpuaudit.safetext import clean_tree

API_VERSION = "wgpolicyk8s.io/v1alpha2"
SOURCE = "gpuaudit"
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


def _report(kind: str, namespace: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "gpuaudit"}
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
    docs = [_report("PolicyReport", ns, items) for ns, items in sorted(namespaced.items())]
    if cluster or not docs:
        docs.append(_report("ClusterPolicyReport", "", cluster))
    return docs


def render(result: AuditResult, **_: Any) -> str:
    # YAML writes C1 and bidi characters as they are: they go first (gpuaudit/safetext.py).
    documents = [clean_tree(d) for d in reports(result)]
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, allow_unicode=True)
