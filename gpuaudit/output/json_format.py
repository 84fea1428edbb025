"""JSON output, version 1 (documented in docs/output.md; other tools read it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuaudit import __version__
from gpuaudit.jsontext import indented
from gpuaudit.model import CATEGORIES, SEVERITIES, AuditResult

VERSION = 1


def as_dict(result: AuditResult) -> dict[str, Any]:
    by_severity = Counter(f.severity for f in result.findings)
    by_category = Counter(f.category for f in result.findings)
    return {
        "version": VERSION,
        "tool": {"name": "gpuaudit", "version": __version__},
        "findings": [f.as_dict() for f in result.findings],
        "suppressed": [{**f.as_dict(), "reason": reason} for f, reason in result.suppressed],
        "skipped": [s.as_dict() for s in result.skipped],
        "errors": [e.as_dict() for e in result.errors],
        "summary": {
            "resources": result.resources,
            "gpu_workloads": result.gpu_workloads,
            "findings": len(result.findings),
            "suppressed": len(result.suppressed),
            "by_severity": {s: by_severity.get(s, 0) for s in SEVERITIES},
            "by_category": {c: by_category.get(c, 0) for c in CATEGORIES},
            "telemetry": result.telemetry,
            "cluster": result.cluster,
        },
    }


def render(result: AuditResult, **_: Any) -> str:
    return indented(as_dict(result), allow_nan=False) + "\n"
