"""Config, rule and cases files past the YAML limits (alias bombs, nesting
deeper than 200 levels or than libyaml's 1,000), and a `telemetry:` section
of the wrong shape: each is an error naming the file (and line and key where
there is one), exit 2, never a traceback or a hang.

The limits are kube/yaml_lines.py's (MAX_DEPTH, MAX_NODES_PER_DOCUMENT), the
same for manifests (tests/robustness/test_manifests.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.kube.yaml_lines import MAX_DEPTH
from tests.robustness.hostile import PINNED
from tests.robustness.processes import DEMO, GIB, SITE_RULE, gpuaudit


def alias_bomb(levels: int = 9) -> str:
    """10**levels leaves from a few hundred bytes ("billion laughs")."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def flow(depth: int) -> str:
    return "[" * depth + "]" * depth


# name -> (YAML text, what the error says)
PAST_THE_LIMITS = {
    "alias-bomb": (alias_bomb(), "document expands to more than 1,000,000 nodes"),
    "250-levels": (f"rules: {flow(250)}\n", f"nesting deeper than {MAX_DEPTH} levels"),
    "5000-levels": (f"rules: {flow(5000)}\n", "invalid YAML: exceeded maximum nesting depth"),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "pinned.yaml").write_text(PINNED)
    return tmp_path


@pytest.mark.parametrize("case", PAST_THE_LIMITS)
def test_a_config_past_the_yaml_limits_is_an_error_naming_it(repo, case):
    text, expected = PAST_THE_LIMITS[case]
    (repo / ".gpuaudit.yaml").write_text(text)
    run = gpuaudit("check", "pinned.yaml", cwd=repo, memory=GIB)
    assert run.code == 2
    assert run.stderr.startswith(f"gpuaudit: {repo / '.gpuaudit.yaml'}"), run.stderr
    assert expected in run.stderr


@pytest.mark.parametrize("case", PAST_THE_LIMITS)
def test_a_rule_file_past_the_yaml_limits_is_named_and_the_others_still_run(repo, case):
    text, expected = PAST_THE_LIMITS[case]
    site = repo / "site"
    site.mkdir()
    (site / "good.yaml").write_text(SITE_RULE)
    (site / "bad.yaml").write_text(text)
    run = gpuaudit("check", "pinned.yaml", "--policies", "site", "--format", "json", cwd=repo, memory=GIB)
    assert run.code == 2
    [error] = run.report()["errors"]
    assert error["file"] == "site/bad.yaml" and expected in error["message"]
    assert {"GPA-PL-001", "SITE-001"} <= {f["rule"] for f in run.report()["findings"]}
    validate = gpuaudit("rules", "validate", "site/bad.yaml", cwd=repo)
    assert validate.code == 2 and "site/bad.yaml" in validate.stderr and expected in validate.stderr


CASES_PAST_THE_LIMITS = {
    # 5,000-deep facts: the pure-Python loader ended in RecursionError
    "5000-deep-facts": (
        "- {name: deep, expect: pass, facts: " + "{a: " * 5000 + "1" + "}" * 5000 + "}\n",
        "invalid YAML: exceeded maximum nesting depth",
    ),
    "300-deep-facts": (
        "- {name: deep, expect: pass, facts: " + "{a: " * 300 + "1" + "}" * 300 + "}\n",
        f"nesting deeper than {MAX_DEPTH} levels",
    ),
    "alias-bomb": (
        alias_bomb().replace("a0:", "- a0:").replace("\na", "\n  a"),
        "document expands to more than 1,000,000 nodes",
    ),
    "not-a-list": ("{name: x}\n", "a cases file is a list of cases"),
}


@pytest.mark.parametrize("case", CASES_PAST_THE_LIMITS)
def test_a_cases_file_past_the_limits_is_named_by_validate_and_test(repo, case):
    text, expected = CASES_PAST_THE_LIMITS[case]
    site = repo / "site"
    site.mkdir()
    (site / "cpu.yaml").write_text(SITE_RULE)
    (site / "cpu.cases.yaml").write_text(text)
    validate = gpuaudit("rules", "validate", "site", cwd=repo, memory=GIB)
    assert validate.code == 2
    assert "site/cpu.cases.yaml" in validate.stderr and expected in validate.stderr
    tested = gpuaudit("rules", "test", "site", cwd=repo, memory=GIB)
    assert tested.code == 1  # a case that cannot run fails, as a failing case does
    assert "site/cpu.cases.yaml" in tested.stdout and expected in tested.stdout
    assert tested.stdout.strip().endswith("1 rules, 1 cases, 1 failed")


# --- the telemetry section ---------------------------------------------------------------

TELEMETRY = {
    # config text -> what stderr says (line and key)
    "regex": (
        'telemetry:\n  params:\n    exporter_pod_regex: "("\n',
        ":3: '(' is not a valid regular expression: missing ), unterminated subpattern at position 0 "
        "(at telemetry.params.exporter_pod_regex)",
    ),
    "points": (
        "telemetry:\n  params: {max_points_per_query: lots}\n",
        ":2: 'lots' is not of type 'integer' (at telemetry.params.max_points_per_query)",
    ),
    "nan": (
        "telemetry:\n  params:\n    idle_compute: .nan\n",
        ":3: nan is not a finite number (at telemetry.params.idle_compute)",
    ),
    "inf": (
        "telemetry:\n  params:\n    resident_fb_mib: .inf\n",
        ":3: inf is not a finite number (at telemetry.params.resident_fb_mib)",
    ),
    "ratio": (
        "telemetry:\n  params:\n    idle_compute: 5\n",
        ":3: 5 is greater than the maximum of 1 (at telemetry.params.idle_compute)",
    ),
    "site-param": (
        "telemetry:\n  params:\n    my_threshold: [1]\n",
        ":3: [1] is not of type 'number', 'string' (at telemetry.params.my_threshold)",
    ),
    "post-bytes": (
        "telemetry:\n  params:\n    max_post_bytes: 10\n",
        ":3: 10 is less than the minimum of 512 (at telemetry.params.max_post_bytes)",
    ),
    "params": ("telemetry:\n  params: [1]\n", ":2: [1] is not of type 'object' (at telemetry.params)"),
    "url": ("telemetry:\n  prometheus: 5\n", ":2: 5 is not of type 'string' (at telemetry.prometheus)"),
    "queries": ("telemetry:\n  queries: nope\n", ":2: 'nope' is not of type 'object' (at telemetry.queries)"),
}


@pytest.mark.parametrize("case", TELEMETRY)
def test_a_telemetry_section_of_the_wrong_shape_is_an_error_naming_the_key(repo, case):
    text, expected = TELEMETRY[case]
    config = repo / ".gpuaudit.yaml"
    config.write_text(text)
    run = gpuaudit("audit", "--snapshot", str(DEMO), cwd=repo)
    assert run.code == 2
    assert run.stderr == f"gpuaudit: {config}{expected}\n"


def test_a_telemetry_section_of_the_right_shape_still_loads(repo):
    (repo / ".gpuaudit.yaml").write_text(
        "telemetry:\n"
        "  params: {idle_compute: 0.1, resident_fb_mib: 2048, exporter_pod_regex: 'dcgm-.*',\n"
        "           max_points_per_query: 1000000, max_chunks: 4, my_threshold: 3, my_label: team}\n"
        "  queries: {signals: {nvlink: null}}\n"
    )
    run = gpuaudit("audit", "--snapshot", str(DEMO), "--format", "json", cwd=repo)
    assert run.code == 1, run.stderr  # the demo's findings
    assert not [e for e in run.report()["errors"] if e["level"] == "error"]
