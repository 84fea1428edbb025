"""Judge subjects with rules: the pure core of every command."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

import msgspec

from gpuaudit.engine.messages import lookup, render_message
from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.files import bounded_quotes
from gpuaudit.model import Exemption, Finding, InputError, Location, Skipped
from gpuaudit.model.findings import NOT_SAID_HERE

IGNORE_ANNOTATION = "gpuaudit.io/ignore."

# Why a rule could not run, by missing input.
_MISSING_INPUT = {
    "telemetry": "insufficient data: needs GPU telemetry (--prometheus URL or --samples FILE)",
    "cluster": "needs a live cluster or snapshot (gpuaudit audit)",
    "manifest": "judges manifests, not cluster state (gpuaudit check)",
}


def _missing_input(name: str) -> str:
    if name.startswith("site."):
        return f"needs {name} in .gpuaudit.yaml: a fact about the site that manifests cannot tell"
    return _MISSING_INPUT.get(name, f"needs {name}")


def site_inputs(site: Mapping[str, Any] | None) -> set[str]:
    """The site facts a config declares, as inputs rules can require (site.<key>)."""
    return {f"site.{key}" for key, value in (site or {}).items() if value not in (None, "", [], {})}


class Evaluation(msgspec.Struct):
    findings: list[Finding] = msgspec.field(default_factory=list)
    suppressed: list[tuple[Finding, str]] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    warnings: list[InputError] = msgspec.field(default_factory=list)
    # (rule id, subject, what was missing) for telemetry rules that had too little data
    insufficient: list[tuple[str, Subject, str]] = msgspec.field(default_factory=list)


# How an exemption by file_context (a rule's severity_by_context) reads.
_CONTEXTS = {
    "example": (
        "a file written to show something: in an examples, docs or tutorial folder, or named so (tutorial, "
        "quickstart, mnist) (file_context example; name the file to judge it as it stands)"
    ),
    "test": (
        "a file not deployed as it stands: in a folder of tests, CI, hack/, archived or deprecated copies, or "
        "named as a test or fixture (file_context test; name the file to judge it as it stands)"
    ),
}

DEFAULT_MIN_COVERAGE = 0.5
DEFAULT_MIN_SPAN_HOURS = 1.0


def missing_telemetry(rule: Rule, facts: Mapping[str, Any]) -> str | None:
    """Why a GPU subject cannot be judged by a telemetry rule, or None: no
    series, coverage of the pod's life in the window under the rule's
    ``min_coverage`` param (default 0.5), a life in the window shorter than
    its ``min_span_hours`` (default 1), or a signal the rule requires that was
    not collected. Missing telemetry is never judged: it is reported as
    insufficient data."""
    coverage = lookup(facts, "telemetry.coverage")
    if not isinstance(coverage, (int, float)):
        return "no series"
    if coverage < rule.params.get("min_coverage", DEFAULT_MIN_COVERAGE):
        return f"coverage {coverage:.0%}"
    span = lookup(facts, "telemetry.span_hours")
    if isinstance(span, (int, float)) and span < rule.params.get("min_span_hours", DEFAULT_MIN_SPAN_HOURS):
        return f"{span:g} h of samples"
    absent = [name for name in rule.telemetry_signals if lookup(facts, f"telemetry.{name}") is None]
    return f"no {', '.join(absent)}" if absent else None


def evaluate(
    rules: Sequence[Rule],
    subjects: Iterable[Subject],
    *,
    inputs: Iterable[str],
    exemptions: Sequence[Exemption] = (),
    today: date | None = None,
    unavailable: Mapping[str, str] | None = None,
    keep_subjects: bool = True,
) -> Evaluation:
    """Run every rule whose inputs are present over every subject of its target.

    ``inputs`` names what this run has (manifest, cluster, telemetry);
    ``unavailable`` may give a specific reason for a missing one (e.g. the
    Prometheus error), reported in the skipped list. Findings keep the
    subject they judged unless ``keep_subjects`` is False.

    Only the rules of a subject's target and scope look at it, and rules
    that share a ``match`` schema match it once.
    """
    have = set(inputs)
    result = Evaluation()
    active: dict[tuple[str, str], list[Rule]] = {}
    for rule in rules:
        missing = [need for need in (*rule.requires,) if need not in have]
        if not any(scope in have for scope in rule.scope):
            missing.append(rule.scope[0])
        if missing:
            reason = (unavailable or {}).get(missing[0]) or _missing_input(missing[0])
            result.skipped.append(Skipped(rule.id, reason))
            continue
        for scope in rule.scope:
            active.setdefault((rule.target, scope), []).append(rule)

    today = today or date.today()
    live, expired = [], []
    for ex in exemptions:
        (expired if ex.expires is not None and ex.expires < today else live).append(ex)
    for ex in expired:
        result.warnings.append(
            InputError(
                "config",
                None,
                f"exemption for {ex.rule} ({ex.namespace}/{ex.name}) expired on "
                f"{ex.expires.isoformat() if ex.expires else ''}; its findings are reported again",
                level="warning",
            )
        )

    # Rules from a user's folder can fail at run time (a schema keyword with a
    # wrong value, a template that reaches for what the sandbox refuses or
    # divides by zero): that rule is reported once, the others still run.
    broken: set[str] = set()
    broken_messages: set[str] = set()
    for subject in subjects:
        rules = active.get((subject.target, subject.scope))
        if not rules:
            continue
        facts = subject.facts
        matched: dict[str, bool] = {}  # by match schema: many rules share one
        for rule in rules:
            if "telemetry" in rule.requires and lookup(facts, "gpu.requested"):
                missing = missing_telemetry(rule, facts)
                if missing is not None:
                    result.insufficient.append((rule.id, subject, missing))
                    continue
            if rule.id in broken:
                continue
            try:
                key = rule.match_key
                if key is not None:
                    applies = matched.get(key)
                    if applies is None:
                        applies = matched[key] = rule.applies_to(facts)
                    if not applies:
                        continue
                severity = rule.severity_for(facts)
                # Silent only for where its file sits (an example, a test
                # fixture): said as exempted, so the user sees what was held back.
                quiet = rule.severity_for(facts, by_context=False) if severity is None else None
                if severity is None and quiet is None:  # the advice does not apply to what this workload is for
                    continue
                if not rule.violated_by(facts):
                    continue
            except Exception as exc:  # the rule's own schema is unusable: a rule defect
                broken.add(rule.id)
                result.warnings.append(_rule_problem(rule, "cannot be evaluated", exc))
                continue
            if severity is None:
                context = facts.get("file_context")
                finding = make_finding(rule, subject, keep_subject=keep_subjects, severity=quiet)
                result.suppressed.append((finding, f"{NOT_SAID_HERE} {_CONTEXTS.get(context, context)}"))
                continue
            try:
                finding = make_finding(rule, subject, keep_subject=keep_subjects, severity=severity)
            except Exception as exc:  # its message template failed: keep the finding
                if rule.id not in broken_messages:
                    broken_messages.add(rule.id)
                    result.warnings.append(_rule_problem(rule, "message failed", exc))
                finding = make_finding(
                    rule,
                    subject,
                    message=f"{rule.title} (message unavailable)",
                    keep_subject=keep_subjects,
                    severity=severity,
                )
            reason = _exempted(finding, subject, live, result.warnings)
            if reason is None:
                result.findings.append(finding)
            else:
                result.suppressed.append((finding, reason))
    return result


def combine(parts: Sequence[Evaluation]) -> Evaluation:
    """One evaluation from evaluations of the same rules over consecutive
    parts of the subjects, in order. What every part reports alike (the
    rules skipped, an expired exemption, a rule that cannot run) is kept once."""
    whole = Evaluation(skipped=list(parts[0].skipped) if parts else [])
    for part in parts:
        whole.findings += part.findings
        whole.suppressed += part.suppressed
        whole.insufficient += part.insufficient
    whole.warnings = list(dict.fromkeys(w for part in parts for w in part.warnings))
    return whole


def _rule_problem(rule: Rule, what: str, exc: Exception) -> InputError:
    # A library's error may quote the facts or the schema: short excerpts only.
    detail = bounded_quotes(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
    return InputError(rule.source, None, f"rule {rule.id}: {what}: {type(exc).__name__}: {detail}")


def make_finding(
    rule: Rule,
    subject: Subject,
    message: str | None = None,
    *,
    keep_subject: bool = True,
    severity: str | None = None,
) -> Finding:
    """The finding ``rule`` makes of ``subject``; ``message`` replaces the
    rendered template (used when the template cannot be rendered). The
    finding holds the subject unless ``keep_subject`` is False. Its severity
    is ``severity`` when given (what the rule allows for the subject's
    purpose: ``Rule.severity_for``), else the rule's."""
    facts = subject.facts
    pointer = None
    if rule.points_at:
        pointer = lookup(facts, rule.points_at)
    if not isinstance(pointer, str):
        pointer = facts.get("pointer") if isinstance(facts.get("pointer"), str) else ""
    doc = subject.document
    if doc is not None:
        file, line = doc.place_of(pointer)
        location = Location(file, line, doc.base + pointer)
    else:
        location = Location("", None, pointer)
    evidence: dict[str, Any] = {path: lookup(facts, path) for path in rule.evidence}
    if rule.params:
        evidence["params"] = dict(rule.params)
    remediation = None
    if rule.remediation:
        remediation = {
            "id": rule.remediation["id"],
            "params": {**rule.params, **(rule.remediation.get("params") or {})},
        }
    return Finding(
        rule=rule.id,
        title=rule.title,
        severity=severity or rule.severity,  # type: ignore[arg-type]
        category=rule.category,
        message=render_message(rule.message, facts, rule.params) if message is None else message,
        resource=subject.resource,
        location=location,
        evidence=evidence,
        remediation=remediation,
        subject=subject if keep_subject else None,
    )


def _exempted(
    finding: Finding, subject: Subject, exemptions: Sequence[Exemption], warnings: list[InputError]
) -> str | None:
    key = IGNORE_ANNOTATION + finding.rule
    if key in subject.annotations:
        reason = subject.annotations[key].strip()
        if reason:
            return reason
        warnings.append(
            InputError(
                finding.location.file,
                finding.location.line,
                f"annotation {key} on {finding.resource.kind}/{finding.resource.name} has no "
                "reason; the finding is reported (write why it is acceptable as the value)",
                level="warning",
            )
        )
    for ex in exemptions:
        if ex.covers(finding):
            return ex.reason
    return None
