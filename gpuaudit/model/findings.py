"""What a run found: findings, skipped rules, exemptions, and the AuditResult
every output format renders."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from datetime import date
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from gpuaudit.model.objects import InputError, same_fields

if TYPE_CHECKING:  # types only: the model imports nothing above it
    from gpuaudit.engine.rules import Rule
    from gpuaudit.facts import Subject

Severity = Literal["critical", "high", "medium", "low", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low", "info")
# The diagnostic flow: the order in which an operator should look.
CATEGORIES = ("allocation", "memory", "placement", "application", "sharing")


class Resource(msgspec.Struct, frozen=True):
    """What a finding is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    container: str | None = None
    node: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "container": self.container,
        }
        if self.node is not None:
            out["node"] = self.node
        return out

    def label(self) -> str:
        """``Kind namespace/name [container]``, as findings name what they are about."""
        text = f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"
        return text + (f" [{self.container}]" if self.container else "")


class Location(msgspec.Struct, frozen=True):
    file: str
    line: int | None
    pointer: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "pointer": self.pointer}


class Finding(msgspec.Struct, frozen=True):
    rule: str
    title: str
    severity: Severity
    category: str
    message: str
    resource: Resource
    location: Location
    evidence: Mapping[str, Any]
    remediation: Mapping[str, Any] | None
    # The judged Subject (facts, document), kept for `gpuaudit fix` to size its
    # patches from; never part of the output formats.
    subject: Any = None
    # The deployable units of a manifest check that hold it (sources/units.py):
    # a base used by several kustomize roots is one finding naming them all.
    units: tuple[str, ...] = ()

    def __eq__(self, other: object) -> Any:
        return same_fields(self, other, but=("subject",))

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity,
            "category": self.category,
            "message": self.message,
            "resource": self.resource.as_dict(),
            "location": self.location.as_dict(),
            "evidence": dict(self.evidence),
            "remediation": dict(self.remediation) if self.remediation is not None else None,
            **({"units": list(self.units)} if self.units else {}),
        }


class Skipped(msgspec.Struct, frozen=True):
    rule: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}


class Exemption(msgspec.Struct, frozen=True):
    rule: str
    reason: str
    namespace: str = "*"
    name: str = "*"
    kind: str = "*"
    expires: date | None = None

    def covers(self, finding: Finding) -> bool:
        r = finding.resource
        return (
            fnmatch.fnmatchcase(finding.rule, self.rule)
            and fnmatch.fnmatchcase(r.namespace or "", self.namespace)
            and fnmatch.fnmatchcase(r.name, self.name)
            and fnmatch.fnmatchcase(r.kind, self.kind)
        )


# How the reason of a finding held back for where its file sits (an
# example, a test fixture: a rule's severity_by_context) begins: outputs
# count these apart from what the user exempted.
NOT_SAID_HERE = "not said for"


class AuditResult(msgspec.Struct):
    """Everything one run found; every output format renders this."""

    findings: list[Finding] = msgspec.field(default_factory=list)
    suppressed: list[tuple[Finding, str]] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    errors: list[InputError] = msgspec.field(default_factory=list)
    rules: list[Rule] = msgspec.field(default_factory=list)
    resources: int = 0
    gpu_workloads: int = 0
    # Telemetry coverage of a cluster audit (None for manifests): how many GPU
    # pods had data, so missing data never reads as idle.
    telemetry: dict | None = None
    # Cluster totals of a cluster audit: GPUs, allocation, pending demand.
    cluster: dict | None = None
    # What a cluster audit judged (the ClusterState and its subjects), kept
    # for `gpuaudit report` so it need not build them again; never output.
    state: Any = None
    subjects: list[Subject] = msgspec.field(default_factory=list)

    def __eq__(self, other: object) -> Any:
        return same_fields(self, other, but=("state", "subjects"))

    def exit_code(self, fail_on: str) -> int:
        """2 on input errors, else 1 when a finding is at or above ``fail_on``."""
        if any(e.level == "error" for e in self.errors):
            return 2
        threshold = SEVERITIES.index(fail_on)  # type: ignore[arg-type]
        if any(SEVERITIES.index(f.severity) <= threshold for f in self.findings):
            return 1
        return 0
