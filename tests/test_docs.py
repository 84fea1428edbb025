"""docs/: generated pages are current, examples are valid, every command
shown exists, and the CI recipes run (against examples/ and, for the
scheduled audit, the stand-in API server)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.rules import load_rules
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.user_config import load_config
from tests.cli_options import command_options, unknown_options
from tests.precommit_env import precommit_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CI = DOCS / "ci"
VENV_BIN = Path(sys.executable).parent
TOOLS = ROOT / ".tools" / "bin"


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- generated pages ---------------------------------------------------------------


def test_generated_docs_are_current():
    """rules.md, the schema tables and every command output shown in docs/,
    regenerated in memory, equal what is committed."""
    stale = [
        str(path.relative_to(ROOT))
        for path, text in gen_docs().expected_docs().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"stale: {stale}; run .venv/bin/python scripts/gen_docs.py"


def test_rule_reference_covers_every_builtin_rule():
    rules, errors = load_rules([policies_dir()])  # opt-in rules too
    assert not [e for e in errors if e.level == "error"]
    text = gen_docs().rules_markdown()
    headings = re.findall(r"^### (GPA-[A-Z]{2}-\d{3}): ", text, re.M)
    assert sorted(headings) == sorted(r.id for r in rules)
    # in diagnostic order
    order = ["allocation", "memory", "placement", "application", "sharing"]
    by_id = {r.id: r for r in rules}
    assert [order.index(by_id[h].category) for h in headings] == sorted(
        order.index(by_id[h].category) for h in headings
    )
    for rule in rules:  # each param is documented with its default
        for name in rule.params:
            assert f"| `{name}` |" in text.split(f"### {rule.id}: ", 1)[1].split("\n### ", 1)[0]


def test_the_readme_rule_list_and_sample_output_are_generated():
    """The root README shows `rules list` and `check` as they print today:
    every rule, opt-in ones under their own heading; a table with a rule
    missing is stale, and regenerating it restores the page."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marker = "<!-- run: gpuaudit rules list -->\n```text\n"
    assert marker in readme and "<!-- run: gpuaudit check examples/manifests -->" in readme
    block = readme.split(marker, 1)[1].split("```", 1)[0]
    rules, _ = load_rules([policies_dir()])
    assert sorted(re.findall(r"^(GPA-[A-Z]{2}-\d{3}) ", block, re.M)) == sorted(r.id for r in rules)
    first = next(line for line in block.splitlines() if line.startswith("GPA-"))
    stale = readme.replace(first + "\n", "", 1)
    module = gen_docs()
    assert module.render_page(stale) == readme


def test_run_blocks_refuse_a_failing_command(tmp_path):
    module = gen_docs()
    with pytest.raises(module.DocsError):
        module.run_command("gpuaudit check no-such-dir/", tmp_path)
    assert "exit 2" in module.run_command('gpuaudit check no-such-dir/ > /dev/null; echo "exit $?"', tmp_path)


# --- pages written by hand ---------------------------------------------------------


def test_configuration_example_is_valid_and_warning_free(tmp_path):
    text = (DOCS / "configuration.md").read_text()
    block = re.search(r"## An example\n\n```yaml\n(.*?)```", text, re.S)
    assert block
    (tmp_path / ".gpuaudit.yaml").write_text(block.group(1))
    (tmp_path / "gpu-policies").mkdir()  # the example's own rule folder
    config = load_config(tmp_path / ".gpuaudit.yaml")  # an unknown key would raise ConfigError
    rules, errors = load_policy(config)
    assert errors == [] and rules


def test_every_key_of_the_deploy_config_is_documented():
    config = yaml.safe_load((ROOT / "deploy" / "base" / "config" / "gpuaudit.yaml").read_text())
    load_config(ROOT / "deploy" / "base" / "config" / "gpuaudit.yaml")  # no unknown key: it would raise
    page = (DOCS / "configuration.md").read_text()
    for key, value in config.items():
        assert f"`{key}`" in page
        for sub in value if isinstance(value, dict) else ():
            assert f"`{key}.{sub}`" in page, f"{key}.{sub}"


def _keys(report: dict[str, Any]) -> set[str]:
    keys = set(report) | set(report["summary"])
    for section in ("telemetry", "cluster"):
        keys |= set(report["summary"].get(section) or {})
    for finding in report["findings"]:
        keys |= set(finding) | set(finding["resource"]) | set(finding["location"])
    for group in ("skipped", "errors", "suppressed"):
        for entry in report[group]:
            keys |= set(entry)
    return keys


def test_output_page_names_every_json_key():
    gpuaudit = str(VENV_BIN / "gpuaudit")
    outputs = [
        subprocess.run([gpuaudit, "check", "examples/", "--format", "json"], cwd=ROOT, capture_output=True, text=True),
        subprocess.run(
            [gpuaudit, "audit", "--snapshot", "examples/demo-snapshot.json.gz", "--format", "json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ),
        subprocess.run(
            [gpuaudit, "check", "-", "--format", "json"], input="a: [\n", cwd=ROOT, capture_output=True, text=True
        ),
    ]
    keys: set[str] = set()
    for proc in outputs:
        report = json.loads(proc.stdout)
        assert report["version"] == 1
        keys |= _keys(report)
    page = (DOCS / "output.md").read_text()
    assert sorted(k for k in keys if f"`{k}`" not in page) == []


def _shell_lines(text: str) -> list[str]:
    """gpuaudit command lines in ```sh blocks, continuation lines joined."""
    lines = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if re.match(r"^(kubectl )?gpuaudit ", line):
                lines.append(line)
    return lines


def _recipe_lines(data: Any) -> list[str]:
    """gpuaudit command lines in the run:/script: texts of a CI recipe."""
    out: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ("run", "script", "before_script", "entry") and value:
                texts = value if isinstance(value, list) else [value]
                for text in texts:
                    for line in str(text).replace("\\\n", " ").splitlines():
                        if re.search(r"(^|\s)gpuaudit \w", line) and "pip install" not in line:
                            out.append(line.strip())
            else:
                out += _recipe_lines(value)
    elif isinstance(data, list):
        for item in data:
            out += _recipe_lines(item)
    return out


def test_every_gpuaudit_command_in_the_docs_exists():
    pages = [ROOT / "README.md", *DOCS.rglob("*.md"), ROOT / "deploy" / "README.md"]
    checked = 0
    for page in pages:
        for line in _shell_lines(page.read_text()):
            path, unknown = unknown_options(line)
            assert unknown == [], f"{page.name}: `gpuaudit {' '.join(path)}` has no {unknown} ({line})"
            checked += 1
    for recipe in CI.glob("*.y*ml"):
        for line in _recipe_lines(yaml.safe_load(recipe.read_text())):
            path, unknown = unknown_options(line.replace("${PROMETHEUS_URL:+", "").replace('"}', '"'))
            assert unknown == [], f"{recipe.name}: `gpuaudit {' '.join(path)}` has no {unknown}"
            checked += 1
    assert checked >= 15


# --- the CI recipes, run ---------------------------------------------------------


def recipe(name: str) -> dict[str, Any]:
    return yaml.safe_load((CI / name).read_text())


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


@pytest.fixture
def repo(tmp_path) -> Path:
    """A manifest repository: the examples under manifests/."""
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(ROOT / "examples" / "manifests", work / "manifests")
    return work


def run_step(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # GitHub's and GitLab's default shells: bash with -e (and pipefail on GitHub)
    path = os.pathsep.join([str(VENV_BIN), str(TOOLS), os.environ.get("PATH", "")])
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": path, "NO_COLOR": "1", **env},
    )


def test_github_actions_recipe_uploads_the_sarif_it_writes(repo):
    workflow = recipe("github-actions.yml")
    assert workflow["permissions"]["security-events"] == "write"
    all_steps = steps(workflow)
    (check,) = [s for s in all_steps if "gpuaudit check" in s.get("run", "")]
    (upload,) = [s for s in all_steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert all_steps.index(upload) > all_steps.index(check)
    assert upload["if"] == "always()"  # findings fail the check step; the upload must still run
    sarif_file = re.search(r"--format sarif=(\S+)", check["run"]).group(1)
    assert upload["with"]["sarif_file"] == sarif_file

    proc = run_step(check["run"], repo)
    assert proc.returncode == 1, proc.stderr  # the examples hold a high finding
    assert "PLACEMENT" in proc.stdout  # the text report in the log
    sarif = json.loads((repo / sarif_file).read_text())
    jsonschema.validate(sarif, json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))
    uris = {
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif["runs"][0]["results"]
        for loc in r["locations"]
        if "physicalLocation" in loc
    }
    assert "manifests/notebook.yaml" in uris  # repository-relative, as code scanning needs


def test_gitlab_recipe_publishes_the_reports_it_writes(repo):
    job = recipe("gitlab-ci.yml")["gpuaudit"]
    assert job["artifacts"]["when"] == "always"
    junit_file = job["artifacts"]["reports"]["junit"]
    quality_file = job["artifacts"]["reports"]["codequality"]
    script = "\n".join(job["script"])
    assert f"--format junit={junit_file}" in script
    assert f"--format gitlab={quality_file}" in script
    proc = run_step(script, repo)
    assert proc.returncode == 1, proc.stderr
    issues = json.loads((repo / quality_file).read_text())
    assert any(i["location"]["path"] == "manifests/notebook.yaml" for i in issues)
    suites = ET.parse(repo / junit_file).getroot()
    assert suites.tag == "testsuites" and int(suites.get("failures")) > 0
    failed = [c for c in suites.iter("testcase") if c.find("failure") is not None]
    assert any(c.get("file") == "manifests/notebook.yaml" for c in failed)


@pytest.fixture
def small_cluster(apiserver):
    return apiserver.load(json.loads((ROOT / "tests" / "clusters" / "small.json").read_text()))


def test_scheduled_audit_recipe_runs_against_a_cluster(small_cluster, kubeconfig, tmp_path):
    workflow = recipe("scheduled-audit.yml")
    # PyYAML reads the key `on` as YAML 1.1's boolean true; GitHub reads it as "on"
    assert workflow[True]["schedule"][0]["cron"]
    work = tmp_path / "work"
    work.mkdir()
    history = None
    for step in steps(workflow):
        if "gpuaudit " not in step.get("run", "") or "pip install" in step["run"]:
            continue
        proc = run_step(step["run"], work, KUBECONFIG=str(kubeconfig), PROMETHEUS_URL="")
        assert proc.returncode == 0, f"{step['name']}: {proc.stderr}"
        assert "Traceback" not in proc.stderr
        history = history or re.search(r"--history (\S+)", step["run"]).group(1)
    assert json.loads((work / "audit.json").read_text())["summary"]["cluster"]["gpus_total"] > 0
    assert json.loads(gzip.decompress((work / "snapshot.json.gz").read_bytes()))["kind"] == "gpuaudit-snapshot"
    assert (work / "review" / "report.html").exists()
    # the cache keeps the history the commands write; the artifact holds what they wrote
    cached = {s["with"]["path"] for s in steps(workflow) if s.get("uses", "").startswith("actions/cache/")}
    assert cached == {history} and (work / history).exists()
    (upload,) = [s for s in steps(workflow) if s.get("uses", "").startswith("actions/upload-artifact@")]
    for path in upload["with"]["path"].split():
        assert (work / path).exists(), path


def test_pre_commit_recipe_uses_the_published_hooks():
    config = recipe("pre-commit-config.yaml")
    (repo,) = config["repos"]
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert repo["repo"] in (ROOT / "README.md").read_text()  # the same URL users are told
    for hook in repo["hooks"]:
        assert hook["id"] in hooks
        words = hooks[hook["id"]]["entry"].split()[1:]  # gpuaudit <command...> [options]
        entry = [w for w in words if not w.startswith("-")]
        assert set(words[len(entry) :]) <= command_options(*entry)
        flags = [a for a in hook.get("args", []) if a.startswith("--")]
        assert set(flags) <= command_options(*entry)


def test_pre_commit_recipe_runs_with_the_real_framework(tmp_path):
    """The recipe's hooks through pre-commit itself, from this repository's
    last commit (what a `rev:` would point at)."""
    env = precommit_env(tmp_path / "home")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    config = recipe("pre-commit-config.yaml")
    config["repos"][0].update(repo=str(ROOT), rev=head.stdout.strip())
    work = tmp_path / "repo"
    (work / "manifests").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "manifests" / "notebook.yaml", work / "manifests")
    (work / "ci.yaml").write_text("stages: [test]\n")  # outside files: not audited
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git = ["git", "-C", str(work)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    proc = subprocess.run(
        ["pre-commit", "run", "--all-files"], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GPA-PL-001" in proc.stdout and "manifests/notebook.yaml:17" in proc.stdout
    assert "ci.yaml" not in proc.stdout
