"""Regular expressions in a site rule (issue 32, item 4).

A rule's ``pattern: "^(a|aa)+$"`` against a 41-character name took 38 s
(each extra character x 1.6): fastjsonschema matches ``pattern`` and
``patternProperties`` with Python's backtracking ``re``. Now, at load
(``rules validate``, and every command that loads rules), a regex that is
not valid, is longer than 2,000 characters, uses a backreference, or repeats
a group that can match one text in many ways (``(a|aa)+``, ``(a+)+``,
``([a-z]+)*``) is refused at its file and line, naming the pattern; and every
judgement by a rule with a regex keyword runs under a time budget (1 s a
subject, 5 s a run), so a shape the load check lets through (``.*.*.*=``
over a long value: polynomial, not exponential) ends with an error naming
the rule, and the other rules still run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaudit.engine.rule_schemas import RuleTimeout, regex_problem
from gpuaudit.engine.rules import RuleError, load_rule
from tests.robustness.hostile import site_rule as rule

POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: ml}}
spec:
  nodeName: gpu-node-1
  containers:
  - name: {name}
    image: {image}
    resources:
      limits: {{nvidia.com/gpu: 1}}
"""


def gpuaudit(cwd: Path, *args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    exe = Path(sys.executable).with_name("gpuaudit")
    started = time.monotonic()
    proc = subprocess.run(
        [str(exe), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"GPUAUDIT_NO_CACHE": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )
    return proc, time.monotonic() - started


def test_the_38_second_regex_ends_in_under_2_seconds_with_its_rule_named(tmp_path):
    (tmp_path / "pod.yaml").write_text(POD.format(name="a" * 41 + "!", image="cuda"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "slow.yaml").write_text(rule(1, "properties:\n  container: {pattern: '^(a|aa)+$'}"))
    (site / "keys.yaml").write_text(
        rule(2, "properties:\n  gpu:\n    patternProperties:\n      '^(a+)+$': {type: string}")
    )
    (site / "names.yaml").write_text(rule(3, "properties:\n  container:\n    not: {pattern: '([a-z]+)*!'}"))

    proc, seconds = gpuaudit(tmp_path, "check", "pod.yaml", "--policies", "site", "--format", "json")

    assert seconds < 2, seconds
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    errors = {Path(e["file"]).name: e for e in report["errors"]}
    assert errors["slow.yaml"]["line"] == 9
    assert "'^(a|aa)+$'" in errors["slow.yaml"]["message"]
    assert errors["keys.yaml"]["line"] == 11 and "'^(a+)+$'" in errors["keys.yaml"]["message"]
    assert errors["names.yaml"]["line"] == 10 and "'([a-z]+)*!'" in errors["names.yaml"]["message"]
    assert report["findings"], "the built-in rules still judged the pod"

    proc, seconds = gpuaudit(tmp_path, "rules", "validate", "site")
    assert proc.returncode == 2 and seconds < 2
    assert "site/slow.yaml:9: violation: pattern '^(a|aa)+$' " in proc.stderr, proc.stderr


def test_a_slow_regex_the_load_check_lets_through_runs_out_of_time_naming_its_rule(tmp_path):
    (tmp_path / "pod.yaml").write_text(POD.format(name="cuda", image="a" * 1500))
    site = tmp_path / "site"
    site.mkdir()
    (site / "poly.yaml").write_text(rule(1, "properties:\n  image: {pattern: '.*.*.*.*='}"))
    (site / "fine.yaml").write_text(rule(2, "properties:\n  image: {pattern: '^a+$'}"))

    proc, seconds = gpuaudit(tmp_path, "check", "pod.yaml", "--policies", "site", "--format", "json", timeout=120)

    assert seconds < 4, seconds
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    [error] = [e for e in report["errors"] if "SITE-001" in e["message"]]
    assert error["file"].endswith("poly.yaml")
    assert "RuleTimeout" in error["message"] and "'.*.*.*.*='" in error["message"], error
    assert "SITE-002" in {f["rule"] for f in report["findings"]}  # the other rules still judge


REFUSED = [
    "^(a|aa)+$",
    "(a+)+$",
    "([a-z]+)*",
    "(x+x+)+y",
    "(a|a)*",
    "(nvidia|nvidia-a100)+",
    "^(\\w+\\s?)*$",
    "(.*a){12}",
    "(a{1,10}){1,10}",
    "(ab)\\1",
    "((",
    "a" * 2001,
]
ACCEPTED = [
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",  # DNS-1123 subdomain
    "^(nvidia|amd)\\.com/gpu$",
    "^[A-Z]{3}-[0-9]+$",
    "^(\\.\\d+)*$",
    "^(?:ab)+$",
    "^a+$",
    "(?i)^cuda",
    "^(?:[a-z]+,)*[a-z]+$",
]


@pytest.mark.parametrize("pattern", REFUSED)
def test_backtracking_shapes_are_refused(pattern):
    assert regex_problem(pattern) is not None


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_ordinary_patterns_are_accepted(pattern):
    assert regex_problem(pattern) is None


def test_property_names_and_pattern_properties_are_checked_too(tmp_path):
    for n, violation in enumerate(
        [
            "propertyNames: {pattern: '(a|aa)+'}",
            "properties:\n  gpu:\n    patternProperties: {'(a+)+': {}}",
            "properties:\n  gpu:\n    additionalProperties: {pattern: '(a+)+'}",
            "anyOf:\n- {properties: {image: {pattern: '(a+)+'}}}",
        ]
    ):
        path = tmp_path / f"r{n}.yaml"
        path.write_text(rule(n + 1, violation))
        with pytest.raises(RuleError, match=r":(8|9|10): violation: .*(a\|aa|a\+).* can take exponential time"):
            load_rule(path)


def test_the_budget_raises_in_the_rule_itself(tmp_path):
    path = tmp_path / "poly.yaml"
    path.write_text(rule(1, "properties:\n  image: {pattern: '.*.*.*.*='}"))
    loaded = load_rule(path)
    started = time.monotonic()
    with pytest.raises(RuleTimeout, match="SITE-001"):
        loaded.violated_by({"image": "a" * 2000})
    assert time.monotonic() - started < 1.5
