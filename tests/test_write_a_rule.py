"""docs/write-a-rule.md works as written (issue 20, item 11): its files, taken
from the page, make a site rule whose cases pass under `gpuaudit rules test`,
that `gpuaudit check --policies` reports on a GPU pod without a
priorityClassName and not on one with it, and the outputs the page shows are
the real ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpuaudit.engine.rules import rule_from_data

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "write-a-rule.md").read_text(encoding="utf-8")
# A block that is a file starts with a comment naming it: `# policies/site/x.yaml`.
FILES = dict(re.findall(r"```yaml\n# ([\w./-]+\.yaml)\n(.*?)```", PAGE, re.S))
RULE_DIR = "policies/site"


def _shown(command: str) -> str:
    """What the page shows `command` printing (a ```text block starting `$ command`)."""
    match = re.search(rf"```text\n\$ {re.escape(command)}\n(.*?)```", PAGE, re.S)
    assert match, f"the page shows no output of `{command}`"
    return match.group(1)


@pytest.fixture
def site_repo(tmp_path: Path) -> Path:
    """A manifest repository holding the page's files, without its config:
    each test says how it names the rule folder."""
    for name, text in FILES.items():
        if name != ".gpuaudit.yaml":
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
    return tmp_path


def test_the_page_gives_a_rule_its_cases_a_manifest_and_a_config():
    assert sorted(FILES) == [
        ".gpuaudit.yaml",
        "manifests/train.yaml",
        f"{RULE_DIR}/gpu-priority-class.cases.yaml",
        f"{RULE_DIR}/gpu-priority-class.yaml",
    ]


def test_the_rule_validates_and_its_cases_pass_as_shown(run_cli, site_repo):
    validated = run_cli("rules", "validate", RULE_DIR, cwd=site_repo)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    command = f"gpuaudit rules test {RULE_DIR} -v"
    tested = run_cli(*command.split()[1:], cwd=site_repo)
    assert tested.returncode == 0, tested.stdout
    assert tested.stdout == _shown(command)


def test_check_reports_a_gpu_pod_without_priority_class_as_shown(run_cli, site_repo):
    command = f"gpuaudit check --policies {RULE_DIR} --rules ACME-AL-001 manifests/"
    proc = run_cli(*command.split()[1:], cwd=site_repo, env={"NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr  # medium: below the default --fail-on high
    assert proc.stdout == _shown(command)


def test_check_is_quiet_on_a_gpu_pod_with_a_priority_class(run_cli, site_repo):
    job = yaml.safe_load(FILES["manifests/train.yaml"])
    job["spec"]["template"]["spec"]["priorityClassName"] = "gpu-batch"
    (site_repo / "manifests" / "train.yaml").write_text(yaml.safe_dump(job))
    args = f"check --policies {RULE_DIR} --rules ACME-AL-001 --fail-on low -o json manifests/".split()
    proc = run_cli(*args, cwd=site_repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"findings": []' in proc.stdout


def test_the_config_runs_the_rule_without_the_flag(run_cli, site_repo):
    (site_repo / ".gpuaudit.yaml").write_text(FILES[".gpuaudit.yaml"])
    proc = run_cli("check", "--fail-on", "medium", "manifests/", cwd=site_repo)
    assert proc.returncode == 1 and "ACME-AL-001" in proc.stdout, proc.stdout + proc.stderr
    explained = run_cli("rules", "explain", "ACME-AL-001", cwd=site_repo)
    assert explained.returncode == 0 and "priority class" in explained.stdout


def _shapes() -> list[tuple[str, dict]]:
    """The "More shapes" snippets: (target named in their comment, schemas)."""
    section = PAGE.split("## More shapes", 1)[1]
    blocks = re.findall(r"```yaml\n# [^\n]*\(target: (\w+)\)\n(.*?)```", section, re.S)
    return [(target, yaml.safe_load(text)) for target, text in blocks]


@pytest.mark.parametrize(("target", "schemas"), _shapes())
def test_each_further_shape_loads_as_a_rule(target, schemas):
    rule = rule_from_data(
        {
            "id": "ACME-XX-001",
            "title": "a shape from the page",
            "category": "allocation",
            "severity": "low",
            "scope": ["manifest"],
            "target": target,
            "message": "m",
            "docs": "a shape from docs/write-a-rule.md",
            **schemas,
        },
        {},
        "shape.yaml",
        {},
        {},
    )
    assert rule.match and (rule.violation or rule.require)


@pytest.mark.parametrize(
    "placeholder", ["{{ spec.priorityClassName }}", "{{ spec.priorityClassName | lower }}"], ids=["plain", "filtered"]
)
def test_a_field_the_pod_lacks_reads_unset_in_the_message(run_cli, site_repo, placeholder):
    """The page's rule, its message naming the very field the pod lacks: the
    finding says `unset` (it said `no`, as if that were the class's name)."""
    rule_file = site_repo / RULE_DIR / "gpu-priority-class.yaml"
    rule = yaml.safe_load(rule_file.read_text())
    rule["message"] = f"{{{{ kind }}}} {{{{ name }}}}: priorityClassName {placeholder}"
    rule_file.write_text(yaml.safe_dump(rule))
    args = f"check --policies {RULE_DIR} --rules ACME-AL-001 -o json manifests/".split()
    proc = run_cli(*args, cwd=site_repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (finding,) = yaml.safe_load(proc.stdout)["findings"]
    assert finding["message"].endswith(": priorityClassName unset"), finding["message"]
