"""Loading and judging rules: schema errors name file, line and key; unknown
facts are rejected; params splice in; messages cannot reach Python."""

from __future__ import annotations

import textwrap

import pytest

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.messages import render
from gpuaudit.engine.rules import RuleError, load_rule, load_rules

VALID = """\
id: SITE-001
title: GPU pods must request at least N CPUs
category: application
severity: low
scope: [manifest]
target: container
match:
  properties: {gpu: {properties: {requested: {const: true}}}}
violation:
  properties: {cpu_request: {type: number, maximum: {$param: cpus}}}
  required: [cpu_request]
params:
  cpus: {default: 1, description: cores}
message: "{{ container }} asks for {{ cpu_request }} CPU (limit {{ params.cpus }})"
docs: Explains why this rule matters in at least twenty characters.
"""


def write(tmp_path, text, name="rule.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_rules_are_valid():
    rules, errors = load_rules([policies_dir()])
    assert errors == []
    assert {r.category for r in rules} == {
        "allocation",
        "memory",
        "placement",
        "application",
        "sharing",
    }
    assert len({r.id for r in rules}) == len(rules)


def test_params_are_spliced_and_overridable(tmp_path):
    path = write(tmp_path, VALID)
    rule = load_rule(path)
    facts = {"container": "c", "gpu": {"requested": True}, "cpu_request": 1.0}
    assert rule.applies_to(facts) and rule.violated_by(facts)
    rule = load_rule(path, {"SITE-001": {"cpus": 0.5}})
    assert not rule.violated_by(facts)
    with pytest.raises(RuleError, match="unknown params for SITE-001: cpu"):
        load_rule(path, {"SITE-001": {"cpu": 2}})


def test_schema_error_names_file_line_and_key(tmp_path):
    path = write(tmp_path, VALID.replace("severity: low", "severity: urgent"))
    with pytest.raises(RuleError) as err:
        load_rule(path)
    assert err.value.file == str(path) and err.value.line == 4
    assert "severity" in str(err.value) and "urgent" in str(err.value)


def test_unknown_fact_is_rejected(tmp_path):
    path = write(tmp_path, VALID.replace("cpu_request: {type", "cpu_requests: {type"))
    with pytest.raises(RuleError, match="unknown fact 'cpu_requests' for target 'container'"):
        load_rule(path)
    nested = VALID.replace("{gpu: {properties: {requested:", "{gpu: {properties: {requsted:")
    with pytest.raises(RuleError, match=r"unknown fact 'gpu\.requsted'"):
        load_rule(write(tmp_path, nested))


def test_undeclared_param_and_duplicate_ids(tmp_path):
    with pytest.raises(RuleError, match="undeclared param"):
        load_rule(write(tmp_path, VALID.replace("{$param: cpus}", "{$param: cores}")))
    write(tmp_path, VALID, "a.yaml")
    write(tmp_path, VALID, "b.yaml")
    (tmp_path / "rule.yaml").unlink(missing_ok=True)
    rules, errors = load_rules([tmp_path])
    assert len(rules) == 1 and "already used" in str(errors[0])


def test_invalid_yaml_rule_file(tmp_path):
    with pytest.raises(RuleError) as err:
        load_rule(write(tmp_path, "id: [\n"))
    assert "invalid YAML" in str(err.value) and err.value.line == 2


@pytest.mark.parametrize(
    "template",
    ["{{ container.priority_class }}", "{{ container.priority_class | lower }}", "{{ container.priority_class|trim }}"],
)
def test_an_absent_fact_reads_unset_and_a_null_one_unknown_never_no(template):
    """A site rule's message naming a field the fact document lacks, plain or
    through the sandbox: "unset", not "no" (which reads as a value); a fact
    that is there as null (gpuaudit could not tell) reads "unknown"."""
    for facts in ({"container": {}}, {}, {"container": []}):
        assert render(f"priorityClassName: {template}", facts) == "priorityClassName: unset", facts
    assert render("{{ pins.1 }}", {"pins": ["a"]}) == "unset"  # past the end
    assert render("{{ c.p | default('n/a') }}", {"c": {}}) == "n/a"  # an absent fact is still undefined
    assert render("{{ a }}/{{ b }}", {"a": False, "b": None}) == "no/unknown"  # a false fact is still "no"
    assert render("{% if x %}{{ x }}{% endif %}{{ y }}", {"y": None}) == "unknown"  # through the sandbox


def test_plain_messages_render_without_jinja_and_rich_ones_are_sandboxed(tmp_path):
    assert render("{{ a.b }} of {{ n }}", {"a": {"b": 2.0}, "n": 0.12345}) == "2 of 0.123"
    assert render("{{ missing }}", {}) == "unset"
    assert render("{{ n | round(1) }}", {"n": 0.26}) == "0.3"
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError, match="a call is not allowed"):
        render("{{ x.__class__.__mro__[1].__subclasses__() }}", {"x": ""})
    hostile = 'message: "{{ container.__class__.__init__.__globals__ }}'
    path = write(tmp_path, VALID.replace('message: "{{ container }}', hostile))
    with pytest.raises(RuleError, match=r"rule.yaml:14: message: the attribute '__\w+__' is not allowed"):
        load_rule(path)  # refused before anything renders it

    from msgspec.structs import replace

    from gpuaudit.engine.evaluate import make_finding
    from gpuaudit.facts import Subject
    from gpuaudit.model import Resource

    # A rule that did not come through loading is refused all the same.
    rule = replace(load_rule(write(tmp_path, VALID)), message=hostile.split('"')[1])
    subject = Subject("container", {"container": "c", "cpu_request": 1}, Resource("v1", "Pod", "", "p"), None)
    with pytest.raises(SecurityError):
        make_finding(rule, subject)


def test_rules_validate_command(run_cli, tmp_path):
    write(tmp_path, VALID, "good.yaml")
    write(
        tmp_path,
        VALID.replace("SITE-001", "SITE-002").replace("target: container", "target: gpu"),
        "bad.yaml",
    )
    proc = run_cli("rules", "validate", str(tmp_path))
    assert proc.returncode == 2
    assert "bad.yaml:6" in proc.stderr and "1 rules valid, 1 invalid" in proc.stdout


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"gpu": {"properties": {"count": {"type": "number", "minimum": 1}}, "required": ["count"]}}},
        {"properties": {"gpu": {"type": "object"}}, "additionalProperties": False},
        {"properties": {"a": {}}, "patternProperties": {"^x": {"type": "string"}}},
        {"anyOf": [{"required": ["a"]}, {"properties": {"b": {"additionalProperties": {"type": "integer"}}}}]},
    ],
)
def test_rule_schemas_judge_as_fastjsonschema_does_without_copying_keys(schema):
    import fastjsonschema

    from gpuaudit.engine.rules import _compile, _valid

    reference = fastjsonschema.compile(schema)
    ours = _compile(schema)
    for doc in (
        {},
        {"gpu": {"count": 2}},
        {"gpu": {"count": 0}},
        {"gpu": {}},
        {"gpu": 1},
        {"gpu": {"count": 1}, "other": 1},
        {"a": 1, "x1": "s"},
        {"a": 1, "x1": 2},
        {"b": {"k": 1}},
        {"b": {"k": "v"}},
        [],
    ):
        try:
            reference(doc)
            expected = True
        except fastjsonschema.JsonSchemaException:
            expected = False
        assert _valid(ours, doc) == expected, (schema, doc)


def test_only_key_sets_read_for_more_than_membership_are_kept():
    from gpuaudit.engine.rules import schema_code

    def names(code):
        found = set(code.co_names)
        for const in code.co_consts:
            if hasattr(const, "co_names"):
                found |= names(const)
        return found

    assert "keys" not in names(schema_code({"properties": {"gpu": {"properties": {"count": {}}}}}))
    assert "keys" in names(schema_code({"properties": {"gpu": {}}, "additionalProperties": False}))
