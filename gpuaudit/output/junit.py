"""JUnit XML: one test suite per rule, one test case per finding.

CI systems (GitLab, Jenkins, Azure Pipelines, GitHub test reporters) show
JUnit natively. A finding at or above ``--fail-on`` is a failing case; one
below it is a passing case with the finding in its ``system-out``, so a
merge request shows as many failed tests as the findings that fail the job
(none with ``--fail-on never``), and the others stay readable. A rule with
no findings is one passing case, a skipped rule one skipped case, and input
problems are error cases in an `input` suite, so the report says what ran as
well as what failed.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

from gpuaudit import __version__
from gpuaudit.model import CATEGORIES, SEVERITIES, AuditResult, Finding
from gpuaudit.safetext import clean

# Characters XML 1.0 cannot carry, even escaped (lone surrogates included:
# JSON snapshots can hold them, and no UTF-8 file can); terminal controls and
# bidi overrides go first (gpuaudit/safetext.py): CI pages show this text.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: object) -> str:
    return _INVALID_XML.sub("", clean(value))


def _where(f: Finding) -> str:
    where = f.location.file or "cluster"
    return f"{where}:{f.location.line}" if f.location.line else where


def _subject(f: Finding) -> str:
    return f.resource.label()


def _case(suite: ET.Element, classname: str, name: str, **attrs: str) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=_text(classname), name=_text(name))
    for key, value in attrs.items():
        case.set(key, _text(value))
    return case


def _suite(parent: ET.Element, name: str, cases: int, **counts: int) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_text(name), tests=str(cases))
    for key in ("failures", "errors", "skipped"):
        suite.set(key, str(counts.get(key, 0)))
    return suite


def fails(f: Finding, fail_on: str) -> bool:
    """Whether ``f`` fails the run at ``fail_on`` (a severity, or never)."""
    return fail_on in SEVERITIES and SEVERITIES.index(f.severity) <= SEVERITIES.index(fail_on)  # type: ignore[arg-type]


def render(result: AuditResult, *, fail_on: str = "high", **_: Any) -> str:
    root = ET.Element("testsuites", name="gpuaudit")
    by_rule: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_rule.setdefault(f.rule, []).append(f)
    skipped = {s.rule: s.reason for s in result.skipped}
    rules = sorted(
        result.rules,
        key=lambda r: (CATEGORIES.index(r.category) if r.category in CATEGORIES else 99, r.id),
    )
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for rule in rules:
        findings = by_rule.get(rule.id, [])
        failing = sum(fails(f, fail_on) for f in findings)
        classname = f"{rule.category}.{rule.id}"
        suite = _suite(
            root,
            f"{rule.id} {rule.title}",
            max(1, len(findings)),
            failures=failing,
            skipped=int(rule.id in skipped and not findings),
        )
        if findings:
            for f in findings:
                case = _case(suite, classname, f"{_subject(f)} ({_where(f)})", file=f.location.file or "")
                if f.location.line:
                    case.set("line", str(f.location.line))
                if fails(f, fail_on):
                    failure = ET.SubElement(case, "failure", message=_text(f.message), type=f.severity)
                    failure.text = _text(_details(f))
                else:  # below --fail-on: reported, not failed
                    out = ET.SubElement(case, "system-out")
                    out.text = _text(f"{f.severity} (below --fail-on {fail_on}): {_details(f)}")
        elif rule.id in skipped:
            case = _case(suite, classname, "skipped")
            ET.SubElement(case, "skipped", message=_text(skipped[rule.id]))
        else:
            _case(suite, classname, "no findings")
        totals["tests"] += max(1, len(findings))
        totals["failures"] += failing
        totals["skipped"] += int(rule.id in skipped and not findings)
    _input_suite(root, result, totals)
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<!-- gpuaudit {__version__} -->\n{body}\n'


def _input_suite(root: ET.Element, result: AuditResult, totals: dict[str, int]) -> None:
    errors = [e for e in result.errors if e.level == "error"]
    if not result.errors:
        return
    suite = _suite(root, "input", len(result.errors), errors=len(errors))
    for e in result.errors:
        where = e.file + (f":{e.line}" if e.line else "")
        case = _case(suite, "input", where, file=e.file)
        if e.line:
            case.set("line", str(e.line))
        if e.level == "error":
            ET.SubElement(case, "error", message=_text(e.message), type="input")
        else:  # a warning is reported, not failed: system-out keeps it visible
            out = ET.SubElement(case, "system-out")
            out.text = _text(f"warning: {e.message}")
    totals["tests"] += len(result.errors)
    totals["errors"] += len(errors)


def _details(f: Finding) -> str:
    lines: Iterable[str] = (
        f"{f.rule} {f.title} [{f.severity}, {f.category}]",
        f"{_subject(f)} at {_where(f)}",
        f.message,
        "evidence: " + json.dumps(dict(f.evidence), sort_keys=True, default=str),
    )
    return "\n".join(lines)
