"""A site's own rule files: validate them (`gpuaudit rules validate`, also
the `gpuaudit-policies` pre-commit hook, which passes file names) and run
their cases (`gpuaudit rules test DIR`) exactly as the built-in ones are."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit.engine.rules import SEVERITIES, Rule, RuleError, load_rule, load_rules
from gpuaudit.files import FileReadError, command_line_roots, confined, confined_file, excerpt, read_text
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines

CASES_SUFFIXES = (".cases.yaml", ".cases.yml")
# The largest built-in cases file is under 5 KiB; a case embeds a manifest or
# a fact document, never megabytes of them.
MAX_CASES_BYTES = 4 * 1024 * 1024
CASE_INPUTS = ("manifest", "facts")


class Validation(msgspec.Struct):
    rules: list[Rule] = msgspec.field(default_factory=list)
    errors: list[RuleError] = msgspec.field(default_factory=list)
    cases_files: int = 0


def validate_paths(paths: Iterable[Path]) -> Validation:
    """Rule folders, rule files and cases files; an id used twice is an error."""
    out = Validation()
    seen: dict[str, str] = {}

    def add(rule: Rule) -> None:
        if rule.id in seen and seen[rule.id] != rule.source:
            out.errors.append(RuleError(rule.source, None, f"id {rule.id} is already used by {seen[rule.id]}"))
            return
        seen[rule.id] = rule.source
        out.rules.append(rule)

    for path in paths:
        if path.is_dir():
            roots = command_line_roots(path)
            try:
                confined(path, roots, what="rule folder")
            except FileReadError as exc:
                out.errors.append(RuleError(str(path), None, exc.problem))
                continue
            rules, errors = load_rules([path])
            out.errors.extend(errors)
            for rule in rules:
                add(rule)
            for case_path in sorted(path.rglob("*.cases.y*ml")):
                out.cases_files += 1
                out.errors.extend(check_cases_file(case_path, roots))
        elif path.name.endswith(CASES_SUFFIXES):
            out.cases_files += 1
            out.errors.extend(check_cases_file(path))
        else:
            try:
                add(load_rule(path))
            except RuleError as exc:
                out.errors.append(exc)
    return out


def read_cases(path: Path, roots: Sequence[Path] | None = None) -> Any:
    """The parsed cases file ``path`` (read as rule files are: bounded, regular
    files only, libyaml with the nesting and alias limits of kube/yaml_lines,
    never through a link that leads outside ``roots``, by default its
    repository: ``files.command_line_roots``), or a RuleError naming the
    file and, where known, the line."""
    try:
        confined_file(path, command_line_roots(path) if roots is None else roots, what="cases file")
        data, _ = load_yaml_with_lines(read_text(path, limit=MAX_CASES_BYTES, what="cases file"))
    except FileReadError as exc:
        raise RuleError(str(path), exc.line, exc.problem) from None
    except YamlLimitError as exc:
        raise RuleError(str(path), None, str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise RuleError(str(path), line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return data


def check_cases_file(path: Path, roots: Sequence[Path] | None = None) -> list[RuleError]:
    """The shape of a cases file: a list of {name, expect: pass|fail, manifest|facts,
    and optionally line, severity, site}."""
    try:
        data = read_cases(path, roots)
    except RuleError as exc:
        return [exc]
    if not isinstance(data, list):
        return [RuleError(str(path), None, "a cases file is a list of cases")]
    problems = []
    for i, case in enumerate(data):
        problem = _case_problem(case)
        if problem:
            problems.append(RuleError(str(path), None, f"case {i + 1}: {problem}"))
    return problems


def _case_problem(case: Any) -> str | None:
    if not isinstance(case, dict):
        return "not a mapping"
    if case.get("expect") not in ("pass", "fail"):
        return f"expect must be pass or fail, not {excerpt(case.get('expect'))}"
    if not any(k in case for k in CASE_INPUTS):
        return f"needs one of {', '.join(CASE_INPUTS)}"
    if "severity" in case and case["severity"] not in SEVERITIES:
        return f"severity must be one of {', '.join(SEVERITIES)}, not {excerpt(case.get('severity'))}"
    return None
