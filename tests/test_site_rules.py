"""A site's own rules: `rules test DIR` runs their cases like the built-in
ones; `rules validate` takes folders or the files pre-commit passes; the
`gpuaudit-policies` hook runs under the real pre-commit framework."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

from tests.precommit_env import precommit_env

ROOT = Path(__file__).resolve().parents[1]

RULE = """\
id: SITE-001
title: Training pods must ask for at least 16 cores
category: application
severity: low
scope: [manifest]
target: container
match:
  properties: {class: {const: batch}, gpu: {properties: {requested: {const: true}}}}
violation:
  properties: {cpu_request: {type: number, exclusiveMaximum: {$param: cores}}}
  required: [cpu_request]
params:
  cores: {default: 16, description: cores per training container}
message: "{{ container }} asks for {{ cpu_request }} cores"
docs: Our training nodes have 128 cores for 8 GPUs; ask for a fair share of them.
"""
CASES = """\
- name: eight cores
  expect: fail
  line: 8
  manifest: |
    apiVersion: batch/v1
    kind: Job
    metadata: {name: t}
    spec:
      template:
        spec:
          containers:
          - name: c
            resources:
              requests: {cpu: "8"}
              limits: {nvidia.com/gpu: 1}
- name: thirty-two cores
  expect: pass
  manifest: |
    apiVersion: batch/v1
    kind: Job
    metadata: {name: t}
    spec:
      template:
        spec:
          containers:
          - name: c
            resources:
              requests: {cpu: "32"}
              limits: {nvidia.com/gpu: 1}
"""


def site(tmp_path: Path, cases: str = CASES, rule: str = RULE) -> Path:
    policies = tmp_path / "policies" / "application"
    policies.mkdir(parents=True)
    (policies / "training-cpu.yaml").write_text(rule)
    (policies / "training-cpu.cases.yaml").write_text(cases)
    return tmp_path / "policies"


def test_rules_test_runs_a_sites_cases(run_cli, tmp_path):
    site(tmp_path)
    proc = run_cli("rules", "test", "policies", "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok    SITE-001  eight cores" in proc.stdout
    assert proc.stdout.strip().endswith("1 rules, 2 cases, 0 failed")


def test_rules_test_reports_a_wrong_expectation_and_a_wrong_line(run_cli, tmp_path):
    site(tmp_path, cases=CASES.replace("line: 8", "line: 3").replace("expect: pass", "expect: fail"))
    proc = run_cli("rules", "test", "policies")
    assert proc.returncode == 1
    assert "FAIL  SITE-001  eight cores: expected the finding at line 3, got 8" in proc.stdout
    assert "FAIL  SITE-001  thirty-two cores: expected a finding, got none" in proc.stdout
    assert "no pass case" in proc.stdout


def test_rules_test_reports_an_invalid_rule_and_a_missing_cases_file(run_cli, tmp_path):
    policies = site(tmp_path, rule=RULE.replace("cpu_request", "cpu_requested"))
    (policies / "application" / "lonely.yaml").write_text(RULE.replace("SITE-001", "SITE-002"))
    proc = run_cli("rules", "test", "policies")
    assert proc.returncode == 1
    assert "unknown fact 'cpu_requested'" in proc.stdout
    assert "SITE-002  <missing cases file>: no cases file" in proc.stdout


def test_rules_validate_takes_files_and_checks_cases_files(run_cli, tmp_path):
    policies = site(tmp_path)
    ok = run_cli(
        "rules",
        "validate",
        str(policies / "application" / "training-cpu.yaml"),
        str(policies / "application" / "training-cpu.cases.yaml"),
    )
    assert ok.returncode == 0, ok.stderr
    assert "1 rules valid, 0 invalid, 1 cases file(s) checked" in ok.stdout
    (policies / "application" / "training-cpu.cases.yaml").write_text("- {name: x, expect: maybe}\n")
    bad = run_cli("rules", "validate", str(policies))
    assert bad.returncode == 2
    assert "case 1: expect must be pass or fail" in bad.stderr


def test_rules_validate_rejects_an_id_used_twice(run_cli, tmp_path):
    policies = site(tmp_path)
    (tmp_path / "copy.yaml").write_text(RULE)
    proc = run_cli("rules", "validate", str(policies / "application" / "training-cpu.yaml"), "copy.yaml")
    assert proc.returncode == 2 and "already used" in proc.stderr


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def hook_source(tmp_path: Path) -> Path:
    """This working tree as a committed repository, as pre-commit would clone
    it (try-repo on the live tree leaves out files not yet committed)."""
    source = tmp_path / "gpuaudit"
    for name in git(ROOT, "ls-files", "-co", "--exclude-standard").splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    git(source, "init", "-q")
    git(source, "add", ".")
    git(source, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "hooks")
    return source


def test_policies_hook_under_pre_commit(tmp_path):
    env = precommit_env(tmp_path / "home")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    site(repo)
    (repo / "README.md").write_text("rules for our GPU clusters\n")
    git(repo, "add", ".")
    source = hook_source(tmp_path)

    def hook(*files: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["pre-commit", "try-repo", str(source), "gpuaudit-policies", "--files", *files],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    rule = "policies/application/training-cpu.yaml"
    good = hook(rule, "policies/application/training-cpu.cases.yaml", "README.md")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout
    (repo / rule).write_text(textwrap.dedent(RULE).replace("severity: low", "severity: dire"))
    bad = hook(rule)
    assert bad.returncode != 0
    assert "training-cpu.yaml" in bad.stdout and "severity" in bad.stdout
