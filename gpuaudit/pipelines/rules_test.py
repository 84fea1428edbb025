"""Rule test cases as data: `<rule file>.cases.yaml` beside each rule.

Each case is a manifest (YAML text run through the whole manifest pipeline) or
a fact document (for rules whose inputs only a cluster or telemetry gives),
with the expected outcome: `fail` (the rule reports a finding) or `pass`.
Optional `line` checks where the finding points, optional `severity` how
severe it is (a rule's `severity_by_purpose` lowers it for some purposes);
optional `site` gives the
site facts `.gpuaudit.yaml` would. The same runner serves the
built-in test suite and `gpuaudit rules test DIR` for a site's own rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit.engine.evaluate import evaluate
from gpuaudit.engine.policy_files import read_cases
from gpuaudit.engine.rules import Rule, RuleError, load_rule
from gpuaudit.facts import Subject
from gpuaudit.model import Resource
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.sources.user_config import Config

CaseRunner = Callable[[Rule, Mapping[str, Any]], list[Any]]


class Case(msgspec.Struct, frozen=True):
    rule_file: Path
    name: str
    data: Mapping[str, Any]
    problem: str | None = None  # the cases file could not be read or is no list of cases


class CaseResult(msgspec.Struct, frozen=True):
    case: Case
    ok: bool
    detail: str


def cases_file(rule_file: Path) -> Path:
    return rule_file.with_name(rule_file.stem + ".cases.yaml")


def iter_cases(directory: Path) -> Iterator[Case]:
    for rule_file in sorted(directory.rglob("*.yaml")):
        if rule_file.name.endswith(".cases.yaml"):
            continue
        path = cases_file(rule_file)
        if not path.exists():
            yield Case(rule_file, "<missing cases file>", {})
            continue
        try:
            entries = read_cases(path) or []
        except RuleError as exc:
            yield Case(rule_file, "<unreadable cases file>", {}, problem=str(exc))
            continue
        if not isinstance(entries, list):
            yield Case(rule_file, "<cases file>", {}, problem=f"{path}: a cases file is a list of cases")
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                yield Case(rule_file, "?", {}, problem=f"{path}: a case is a mapping, not {entry!r:.40}")
                continue
            yield Case(rule_file, str(entry.get("name", "?")), entry)


def manifest_findings(rule: Rule, case: Mapping[str, Any]) -> list[Any]:

    # `site:` in a case stands for `.gpuaudit.yaml` site facts (GPU taints, classes...).
    config = Config(site=case.get("site") or {})
    result = check_manifests(["-"], config, [rule], stdin_text=case["manifest"])
    errors = [e for e in result.errors if e.level == "error"]
    if errors:
        raise AssertionError(f"case manifest has input errors: {errors}")
    return result.findings


def fact_findings(rule: Rule, case: Mapping[str, Any]) -> list[Any]:

    scope = rule.scope[0]
    resource = Resource("", "Case", "", "case")
    subject = Subject(rule.target, case["facts"], resource, None, scope=scope)
    inputs = {scope, *rule.requires}
    return evaluate([rule], [subject], inputs=inputs).findings


def run_case(case: Case, runners: Mapping[str, CaseRunner] | None = None) -> CaseResult:
    """Run one case; ``runners`` maps a case key (manifest, facts, ...) to how
    to get findings for it, so later inputs (snapshots) can plug in."""
    if case.problem:
        return CaseResult(case, False, case.problem)
    if not case.data:
        return CaseResult(case, False, f"no cases file: {cases_file(case.rule_file)}")
    table: dict[str, CaseRunner] = {"manifest": manifest_findings, "facts": fact_findings}
    table.update(runners or {})
    rule = load_rule(case.rule_file)
    kind = next((k for k in table if k in case.data), None)
    if kind is None:
        return CaseResult(case, False, f"case has none of {', '.join(table)}")
    findings = table[kind](rule, case.data)
    expect = case.data.get("expect")
    if expect == "fail" and not findings:
        return CaseResult(case, False, "expected a finding, got none")
    if expect == "pass" and findings:
        return CaseResult(case, False, f"expected no finding, got {len(findings)}")
    line = case.data.get("line")
    if line is not None and findings and getattr(findings[0], "location", None) is not None:
        got = findings[0].location.line
        if got != line:
            return CaseResult(case, False, f"expected the finding at line {line}, got {got}")
    severity = case.data.get("severity")
    if severity is not None and findings and getattr(findings[0], "severity", None) != severity:
        return CaseResult(case, False, f"expected severity {severity}, got {findings[0].severity}")
    if expect not in ("pass", "fail"):
        return CaseResult(case, False, f"expect must be pass or fail, not {expect!r}")
    return CaseResult(case, True, "ok")


class RuleCases(msgspec.Struct, frozen=True):
    rule_file: Path
    rule_id: str | None
    results: list[CaseResult]
    problem: str | None = None  # the rule itself could not be loaded

    @property
    def ok(self) -> bool:
        return self.problem is None and all(r.ok for r in self.results)

    @property
    def expects(self) -> set[str]:
        return {str(r.case.data.get("expect")) for r in self.results}


def run_site_cases(directories: Sequence[Path]) -> list[RuleCases]:
    """Every rule's cases under ``directories``, grouped by rule file."""
    grouped: dict[Path, list[Case]] = {}
    for directory in directories:
        for case in iter_cases(directory):
            grouped.setdefault(case.rule_file, []).append(case)
    out = []
    for rule_file, cases in grouped.items():
        try:
            rule_id = load_rule(rule_file).id
        except RuleError as exc:
            out.append(RuleCases(rule_file, None, [], problem=str(exc)))
            continue
        results = []
        for case in cases:
            try:
                results.append(run_case(case))
            except Exception as exc:  # a broken case must not hide the others
                results.append(CaseResult(case, False, f"{type(exc).__name__}: {exc}"))
        out.append(RuleCases(rule_file, rule_id, results))
    return out
