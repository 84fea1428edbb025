"""GitLab Code Quality report: the JSON array a job publishes as
`artifacts: reports: codequality:`, shown in the merge request widget and on
the diff (https://docs.gitlab.com/ci/testing/code_quality/).

GitLab reads a subset of the Code Climate issue format: description,
check_name, fingerprint, severity (info, minor, major, critical, blocker) and
location.path with lines.begin. The fingerprint names the finding, not its
line, so a finding that moves with an edit stays the same issue, and two
findings never share one (GitLab shows only the first of equal fingerprints).
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpuaudit.jsontext import indented
from gpuaudit.model import AuditResult, Finding, InputError
from gpuaudit.safetext import escape_json

SEVERITY = {
    "critical": "blocker",
    "high": "critical",
    "medium": "major",
    "low": "minor",
    "info": "info",
}
# Input problems that are about no file of the repository.
_NOT_FILES = ("", "<stdin>", "telemetry")


def _path(file: str) -> str:
    path = file.replace("\\", "/")
    return path[2:] if path.startswith("./") else path


def _fingerprint(*parts: object) -> str:
    text = "\0".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _issue(f: Finding) -> dict[str, Any]:
    r = f.resource
    path = _path(f.location.file)
    return {
        "type": "issue",
        "check_name": f.rule,
        "description": f"{f.rule} {r.label()}: {f.message}",
        "categories": ["Performance"],
        "severity": SEVERITY[f.severity],
        "fingerprint": _fingerprint(f.rule, path, r.kind, r.namespace, r.name, r.container or "", f.location.pointer),
        "location": {"path": path, "lines": {"begin": f.location.line or 1}},
    }


def _problem(e: InputError) -> dict[str, Any]:
    path = _path(e.file) if e.file not in _NOT_FILES else "."
    return {
        "type": "issue",
        "check_name": "gpuaudit-input",
        "description": f"gpuaudit could not audit all of this input: {e.message}",
        "categories": ["Bug Risk"],
        "severity": "major" if e.level == "error" else "minor",
        "fingerprint": _fingerprint("input", e.file, e.line, e.message),
        "location": {"path": path, "lines": {"begin": e.line or 1}},
    }


def render(result: AuditResult, **_: Any) -> str:
    issues = [*(_issue(f) for f in result.findings), *(_problem(e) for e in result.errors)]
    # Text stays as written; the characters a terminal would act on are \u escapes.
    return escape_json(indented(issues, ensure_ascii=False)) + "\n"
