"""SARIF 2.1.0: rule metadata, real regions, valid with zero results."""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

from gpuaudit import __version__
from gpuaudit.model import AuditResult, Finding

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}


def _uri(file: str) -> str:
    if file in ("", "<stdin>"):
        return "stdin"
    return (
        PurePath(file).as_posix().lstrip("/")
        if not file.startswith("/")
        else PurePath(file).as_uri()
    )


def _result(f: Finding, index: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": index,
        "level": _LEVEL[f.severity],
        "message": {"text": f.message},
        "properties": {
            "severity": f.severity,
            "category": f.category,
            "evidence": dict(f.evidence),
        },
    }
    r = f.resource
    logical = {
        "name": r.name,
        "fullyQualifiedName": "/".join(p for p in (r.namespace, r.kind, r.name, r.container) if p),
        "kind": "resource",
    }
    if f.location.file:
        region = {"startLine": f.location.line} if f.location.line else {}
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(f.location.file)}}
        if region:
            physical["region"] = region
        result["locations"] = [{"physicalLocation": physical, "logicalLocations": [logical]}]
    else:
        result["locations"] = [{"logicalLocations": [logical]}]
    result["partialFingerprints"] = {
        "gpuaudit/v1": "/".join((f.rule, r.kind, r.namespace, r.name, r.container or ""))
    }
    return result


def render(result: AuditResult, **_: Any) -> str:
    rules = sorted(result.rules, key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(rules)}
    driver = {
        "name": "gpuaudit",
        "version": __version__,
        "informationUri": "https://github.com/gpuaudit/gpuaudit",
        "rules": [
            {
                "id": r.id,
                "name": r.title,
                "shortDescription": {"text": r.title},
                "fullDescription": {"text": r.docs.strip().split("\n\n")[0]},
                "help": {"text": r.docs.strip()},
                "defaultConfiguration": {"level": _LEVEL[r.severity]},
                "properties": {
                    "category": r.category,
                    "severity": r.severity,
                    "tags": ["gpu", r.category],
                },
            }
            for r in rules
        ],
    }
    notifications = [
        {
            "level": "error" if e.level == "error" else "warning",
            "message": {"text": e.message},
            **(
                {
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": _uri(e.file)},
                                **({"region": {"startLine": e.line}} if e.line else {}),
                            }
                        }
                    ]
                }
                if e.file
                else {}
            ),
        }
        for e in result.errors
    ]
    run = {
        "tool": {"driver": driver},
        "invocations": [
            {
                "executionSuccessful": not any(e.level == "error" for e in result.errors),
                "toolExecutionNotifications": notifications,
            }
        ],
        "results": [_result(f, index.get(f.rule, -1)) for f in result.findings if f.rule in index],
    }
    # Read by tools (code scanning), not people: compact, which json writes in
    # C; indenting takes its pure-Python encoder (0.13 s for 2,000 results).
    return json.dumps({"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}, separators=(",", ":")) + "\n"
