"""SARIF 2.1.0: rule metadata, real regions, valid with zero results.

For code scanning: file URIs relative to the repository (``uriBaseId``
``%SRCROOT%``, resolved by ``originalUriBaseIds``), a fingerprint per
(file, rule, object, container) so findings on the same object name in two
files stay two alerts, and each rule's help from its own docs: no link to a
site this project does not control.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from gpuaudit import __version__
from gpuaudit.model import AuditResult, Finding

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}


SRCROOT = "%SRCROOT%"
# The writer passes ``source_root`` (files.source_root): the repository the
# findings' files are named relative to.
WANTS_SOURCE_ROOT = True


class _Locator:
    """Artifact locations: repository-relative under ``root`` (with
    ``uriBaseId``), an absolute file URI outside it."""

    def __init__(self, root: Path | None, cwd: Path | None = None) -> None:
        self.cwd = Path(os.path.abspath(cwd or Path.cwd()))
        self.root = Path(os.path.abspath(root)) if root is not None else self.cwd

    def relative(self, file: str) -> str | None:
        """``file`` relative to the root, as a URI path; None outside it."""
        if file in ("", "<stdin>"):
            return None
        full = Path(os.path.abspath(self.cwd / file))
        try:
            return full.relative_to(self.root).as_posix()
        except ValueError:
            return None

    def artifact(self, file: str) -> dict[str, Any]:
        if file in ("", "<stdin>"):
            return {"uri": "stdin"}
        relative = self.relative(file)
        if relative is not None:
            return {"uri": _quote(relative), "uriBaseId": SRCROOT}
        return {"uri": "file://" + _quote(Path(os.path.abspath(self.cwd / file)).as_posix())}

    def base_ids(self) -> dict[str, Any]:
        return {SRCROOT: {"uri": "file://" + _quote(self.root.as_posix()).rstrip("/") + "/"}}


def _quote(path: str) -> str:
    """A relative path as a URI reference (spaces and the like escaped)."""
    from urllib.parse import quote

    # errors="replace": a lone surrogate (a file name that is not UTF-8) cannot be percent-encoded.
    return quote(path, safe="/-._~!$&'()*+,;=:@", errors="replace")


def identifier(title: str) -> str:
    """A rule title as a PascalCase identifier: "GPU workload pinned to a
    single node" -> "GPUWorkloadPinnedToASingleNode"."""
    words = re.findall(r"[A-Za-z0-9]+", title)
    name = "".join(w[:1].upper() + w[1:] for w in words)
    return name if name[:1].isalpha() else f"Rule{name}"


def fingerprint(f: Finding, file: str) -> str:
    """Stable across line moves and versions: the repository-relative file,
    the rule, the object (kind, namespace, name) and the container."""
    r = f.resource
    parts = (file, f.rule, r.kind, r.namespace or "", r.name, r.container or "")
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _result(f: Finding, index: int, locator: _Locator) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": index,
        "level": _LEVEL[f.severity],
        "message": {"text": f.message},
        "properties": {
            "severity": f.severity,
            "category": f.category,
            "evidence": dict(f.evidence),
            **({"units": list(f.units)} if f.units else {}),  # the deployable units that hold it
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
        physical: dict[str, Any] = {"artifactLocation": locator.artifact(f.location.file)}
        if region:
            physical["region"] = region
        result["locations"] = [{"physicalLocation": physical, "logicalLocations": [logical]}]
    else:
        result["locations"] = [{"logicalLocations": [logical]}]
    # The file as the repository names it: the same object in two files is two alerts.
    file = locator.relative(f.location.file) or f.location.file
    result["partialFingerprints"] = {"gpuaudit/v2": fingerprint(f, file)}
    return result


def _help(r: Any) -> dict[str, str]:
    docs = r.docs.strip()
    remediation = (r.remediation or {}).get("id")
    fix = f"\n\n`gpuaudit fix` applies the remediation `{remediation}`." if remediation else ""
    more = f"\n\nMore: `gpuaudit rules explain {r.id}`."
    return {
        "text": f"{r.id}: {r.title}\n\n{docs}{fix}{more}".replace("`", ""),
        "markdown": f"**{r.id}: {r.title}**\n\n{docs}{fix}{more}",
    }


def render(result: AuditResult, *, source_root: Path | None = None, **_: Any) -> str:
    """``source_root``: the repository the files are in (URIs are relative to
    it); default: the working directory."""
    locator = _Locator(source_root)
    rules = sorted(result.rules, key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(rules)}
    driver = {
        "name": "gpuaudit",
        "version": __version__,
        "rules": [
            {
                "id": r.id,
                "name": identifier(r.title),
                "shortDescription": {"text": r.title},
                "fullDescription": {"text": r.docs.strip().split("\n\n")[0]},
                "help": _help(r),
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
                                "artifactLocation": locator.artifact(e.file),
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
        "originalUriBaseIds": locator.base_ids(),
        "invocations": [
            {
                "executionSuccessful": not any(e.level == "error" for e in result.errors),
                "toolExecutionNotifications": notifications,
            }
        ],
        "results": [_result(f, index.get(f.rule, -1), locator) for f in result.findings if f.rule in index],
    }
    # Read by tools (code scanning), not people: compact, which json writes in
    # C; indenting takes its pure-Python encoder (bench/RESULTS.md).
    return json.dumps({"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}, separators=(",", ":")) + "\n"
