"""Every rule's pass/fail cases, as data, through one generic test."""

from __future__ import annotations

import pytest

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.rules import load_rules
from gpuaudit.pipelines.rules_test import iter_cases, run_case

CASES = list(iter_cases(policies_dir()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule_file.stem}: {c.name}")
def test_rule_case(case):
    result = run_case(case)
    assert result.ok, result.detail


def test_every_rule_has_a_pass_and_a_fail_case():
    rules, errors = load_rules([policies_dir()])
    assert not errors
    by_file: dict[str, set[str]] = {}
    for case in CASES:
        by_file.setdefault(str(case.rule_file), set()).add(case.data.get("expect"))
    for rule in rules:
        assert by_file.get(rule.source, set()) >= {"pass", "fail"}, rule.id
