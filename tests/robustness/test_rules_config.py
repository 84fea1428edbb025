"""Broken and hostile rules and config, through the real `gpuaudit` process:
each problem names its file (and line or key), the run exits 2, and the
built-in rules still audit everything.

Also covered elsewhere: schema errors with file/line/key, unknown facts and
sandboxed templates at the function level (tests/test_rules_engine.py);
expired exemptions reported
(tests/test_check_command.py::test_config_params_exemptions_and_annotations),
unknown config keys an error naming the nearest key
(tests/test_check_command.py::test_an_unknown_config_key_is_an_error_that_names_the_nearest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.robustness.hostile import PINNED

RULE = """\
id: SITE-{n:03d}
title: Site rule {n}
category: application
severity: low
scope: [manifest]
target: container
match:
  properties: {{gpu: {{properties: {{requested: {{const: true}}}}}}}}
violation:
  properties: {{cpu_request: {{type: number, maximum: 100}}}}
  required: [cpu_request]
message: "{message}"
docs: Explains why this rule matters in at least twenty characters.
"""


def rule(n: int, message: str = "{{ container }} asks for {{ cpu_request }} CPU") -> str:
    return RULE.format(n=n, message=message)


def audit(run_cli, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("check", "pinned.yaml", "--format", "json", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else {}, proc.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "site").mkdir()
    return tmp_path


# --- rule files -------------------------------------------------------------------------

BAD_RULES = {
    # file -> (content, what the error says, line or None)
    "yaml.yaml": ("id: [\n", "invalid YAML", 2),
    "severity.yaml": (rule(2).replace("severity: low", "severity: urgent"), "'urgent'", 4),
    "fact.yaml": (rule(3).replace("cpu_request: {type", "cpu_requests: {type"), "unknown fact 'cpu_requests'", 9),
    "param.yaml": (rule(4).replace("maximum: 100", "maximum: {$param: cores}"), "undeclared param", 9),
    "list.yaml": ("- id: SITE-005\n", "is not of type 'object'", None),
    "empty.yaml": ("", "is not of type 'object'", None),
    "binary.yaml": (b"\xff\xfe\x00\x01", "not valid UTF-8 text", 1),
    "template.yaml": (rule(8, "{{ container"), "invalid template", 12),
    "keyword.yaml": (rule(9).replace("maximum: 100", 'maximum: "lots"'), "cannot be evaluated", None),
    "dup.yaml": (rule(1), "already used", None),
}


def test_every_broken_rule_file_is_named_and_the_good_rules_still_run(run_cli, repo):
    (repo / "site" / "a-good.yaml").write_text(rule(1))
    for name, (content, _, _) in BAD_RULES.items():
        path = repo / "site" / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    code, report, _ = audit(run_cli, "--policies", "site")

    assert code == 2
    by_file: dict[str, list[dict]] = {}
    for e in report["errors"]:
        by_file.setdefault(Path(e["file"]).name, []).append(e)
    for name, (_, message, line) in BAD_RULES.items():
        [error] = by_file.pop(name)
        assert message in error["message"], (name, error)
        if line is not None:
            assert error["line"] == line, (name, error)
    assert by_file == {}
    rules = {f["rule"] for f in report["findings"]}
    assert {"GPA-PL-001", "SITE-001"} <= rules  # built-in and good site rules still judged


# template -> why loading refuses it (engine/message_sandbox.py), or None: it renders
HOSTILE_TEMPLATES = {
    "{{ ''.__class__.__mro__[1].__subclasses__() }}": "a call is not allowed",
    "{{ container.__class__.__init__.__globals__ }}": "the attribute '__globals__' is not allowed",
    "{{ cycler.__init__.__globals__.os.popen('cat CANARY').read() }}": "a call is not allowed",
    "{{ lipsum.__globals__['os'].environ }}": "the attribute '__globals__' is not allowed",
    "{{ self._TemplateReference__context }}": "the attribute '_TemplateReference__context' is not allowed",
    "{% for c in ().__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}": "a call is not allowed",
    "{{ params.__class__.__dict__ }}": "the attribute '__dict__' is not allowed",
    "{{ gpu.update({'requested': false}) }}": "a call is not allowed",
    "{{ 'x' * 1000000000 }}": "arithmetic (*) is not allowed",
    "{{ 9 ** 9 ** 9 ** 9 }}": "arithmetic (**) is not allowed",
    "{{ cpu_request / 0 }}": "arithmetic (/) is not allowed",
    "{{ container|attr('__class__') }}": "the filter 'attr' is not allowed",
    "{{ nothing.here.at_all }}": None,
    "{{ container.upper }}{{ gpu.items|string }}": None,  # a fact's field, never a method
}


@pytest.mark.parametrize("template", list(HOSTILE_TEMPLATES))
def test_a_hostile_message_template_runs_nothing_and_loses_no_finding(run_cli, repo, template):
    """Refused when the rule loads (the error names the file and line, exit 2),
    or rendered within the sandbox: either way nothing runs and nothing leaks."""
    (repo / "CANARY").write_text("the canary's secret")
    (repo / "site" / "hostile.yaml").write_text(rule(1, template))

    code, report, _ = audit(run_cli, "--policies", "site")

    everything = json.dumps(report)
    for leak in ("canary's secret", "<class", "<function", "<built-in", "<module", "PATH"):
        assert leak not in everything, leak
    refused = HOSTILE_TEMPLATES[template]
    if refused:
        [error] = [e for e in report["errors"] if e["file"].endswith("hostile.yaml")]
        assert error["line"] == 12 and f"message: {refused}" in error["message"], error
        assert "SITE-001" not in {f["rule"] for f in report["findings"]}
        assert code == 2
    else:
        [finding] = [f for f in report["findings"] if f["rule"] == "SITE-001"]
        assert finding["resource"]["name"] == "pinned" and finding["message"] in ("unset", "unsetunset")
        assert not report["errors"]
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}


# --- config ------------------------------------------------------------------------------

BAD_CONFIGS = [
    # (config text, what stderr says)
    (
        "exemptions:\n- {rule: GPA-PL-001, reason: x, expires: '2026-13-45'}\n",
        ".gpuaudit.yaml:2: expires '2026-13-45' is not a date",
    ),
    (
        "exemptions:\n- rule: GPA-PL-001\n  reason: x\n  expires: 2026-02-30\n",
        ".gpuaudit.yaml:4: expires '2026-02-30' is not a date",
    ),
    ("exemptions:\n- {rule: GPA-PL-001, reason: x, expires: tomorrow}\n", "expires"),
    ("exemptions:\n- {rule: GPA-PL-001}\n", "'reason' is a required property"),
    ("podspecs:\n- {kind: X, groups: [x.io], pods: [{at: /spec, replicas: 3}]}\n", "at podspecs.0.pods.0.replicas"),
    ("podspecs:\n- {kind: X, groups: x.io, pods: []}\n", "at podspecs.0.groups"),
    ("site: {gpus_per_node: many}\n", "at site.gpus_per_node"),
    ("fail_on: 5\n", "at fail_on"),
    ("- just\n- a list\n", "expected a mapping"),
    ("rules: [\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS)
def test_an_invalid_config_value_is_a_usage_error_naming_it(run_cli, repo, text, expected):
    (repo / ".gpuaudit.yaml").write_text(text)
    proc = run_cli("check", "pinned.yaml")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2
    assert expected in proc.stderr


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("{min_cpu_per_gpu: lots}", "must be a finite number (default 1), not 'lots'"),
        ("{min_cpu_per_gpu: .nan}", "must be a finite number (default 1), not nan"),
        ("{min_cpu_per_gpu: [1]}", "must be a finite number"),
        ("{min_cpu_per_gpu: true}", "must be a finite number"),
    ],
)
def test_a_param_of_the_wrong_type_names_rule_and_param(run_cli, repo, params, expected):
    (repo / ".gpuaudit.yaml").write_text(f"params:\n  GPA-AP-001: {params}\n")
    code, report, _ = audit(run_cli)
    assert code == 2
    [error] = [e for e in report["errors"] if "GPA-AP-001" in e["message"]]
    assert "min_cpu_per_gpu" in error["message"] and expected in error["message"]
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}  # the rest still runs


def test_a_rule_selection_that_names_nothing_is_said_not_silently_empty(run_cli, repo):
    code, report, _ = audit(run_cli, "--rules", "placment,GPA-PL-001")
    assert code == 1  # GPA-PL-001 still ran and found the pin
    [warning] = report["errors"]
    assert warning["level"] == "warning" and "'placment' is no rule id or category" in warning["message"]

    (repo / ".gpuaudit.yaml").write_text("rules: [placment]\n")
    code, report, _ = audit(run_cli)
    assert code == 2, "a run that audits nothing must not pass"
    assert any("no rule is selected" in e["message"] for e in report["errors"])
