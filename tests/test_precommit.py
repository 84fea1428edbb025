"""The hook, run by the real pre-commit framework against a scratch repo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.precommit_env import precommit_env

ROOT = Path(__file__).resolve().parents[1]

BAD = """\
apiVersion: v1
kind: Pod
metadata: {name: pinned}
spec:
  nodeName: gpu-node-1
  containers:
  - name: cuda
    resources:
      requests: {cpu: "4"}
      limits: {nvidia.com/gpu: 1}
"""
GOOD = BAD.replace("  nodeName: gpu-node-1\n", "")


@pytest.fixture(scope="module")
def precommit_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("pre-commit-home")
    precommit_env(home)  # skips when pre-commit is not installed
    return home


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


TOOLS = ROOT / ".tools" / "bin"  # kubectl (kustomize inside), as scripts/test.sh installs it


def try_repo(repo: Path, home: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = precommit_env(home)
    env["PATH"] = os.pathsep.join([str(TOOLS), env["PATH"]])
    return subprocess.run(
        ["pre-commit", "try-repo", str(ROOT), "gpuaudit", "--files", *files],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_hook_fails_a_bad_manifest_and_passes_a_good_one(tmp_path, precommit_home):
    repo = tmp_path / "manifests"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "bad.yaml").write_text(BAD)
    (repo / "good.yaml").write_text(GOOD)
    (repo / "README.md").write_text("not a manifest\n")
    git(repo, "add", ".")

    bad = try_repo(repo, precommit_home, "bad.yaml")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "GPA-PL-001" in bad.stdout and "bad.yaml:5" in bad.stdout

    good = try_repo(repo, precommit_home, "good.yaml", "README.md")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout


def test_hooks_run_once_over_every_file():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert all(h["require_serial"] is True for h in hooks)
    (check,) = [h for h in hooks if h["id"] == "gpuaudit"]
    assert check["entry"].split()[:3] == ["gpuaudit", "check", "--changed-files"]
    assert "github.com" not in (ROOT / ".pre-commit-hooks.yaml").read_text()


KUSTOMIZATION = "resources: [../../base]\npatches:\n- path: pin.yaml\n"
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: ml}
spec:
  replicas: 1
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      containers:
      - name: server
        image: server:1
        resources:
          requests: {cpu: "4", memory: 16Gi}
          limits: {nvidia.com/gpu: 1}
"""
# The patch pins the Deployment: alone it is a fragment without containers
# (no GPU, no finding); rendered into the package it pins a GPU workload.
PIN = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: ml}
spec:
  template:
    spec:
      nodeName: gpu-node-1
"""


def run_hooks(work: Path, home: Path, hooks: list[dict]) -> subprocess.CompletedProcess[str]:
    """`pre-commit run --all-files` in ``work`` with ``hooks`` as a `repo: local`
    (pre-commit installs their additional_dependencies in its own environment)."""
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}))
    git(work, "init", "-q")
    git(work, "add", ".")
    env = precommit_env(home)
    env["PATH"] = os.pathsep.join([str(TOOLS), env["PATH"]])
    return subprocess.run(
        ["pre-commit", "run", "--all-files"], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )


def hook_python(home: Path) -> Path:
    (python,) = [p for p in home.glob("repo*/py_env-*/bin/python") if p.exists()]
    return python


@pytest.mark.skipif(not (TOOLS / "kubectl").exists(), reason="kubectl is not in .tools/bin (scripts/test.sh)")
def test_hook_on_twelve_files_and_a_kustomize_package(tmp_path):
    """Issue 20's demonstration: the published hook (its entry, file types and
    require_serial from .pre-commit-hooks.yaml, installed from this checkout)
    on 12 changed files: one report, the package a changed patch belongs to
    rendered, and the hook's environment without the Kubernetes client (nor
    Jinja2 or NVML)."""
    repo = tmp_path / "manifests"
    (repo / "apps" / "base").mkdir(parents=True)
    (repo / "apps" / "overlays" / "prod").mkdir(parents=True)
    (repo / "apps" / "base" / "kustomization.yaml").write_text("resources: [deployment.yaml]\n")
    (repo / "apps" / "base" / "deployment.yaml").write_text(DEPLOYMENT)
    (repo / "apps" / "overlays" / "prod" / "kustomization.yaml").write_text(KUSTOMIZATION)
    (repo / "apps" / "overlays" / "prod" / "pin.yaml").write_text(PIN)
    (repo / "pods").mkdir()
    for i in range(8):
        (repo / "pods" / f"pod-{i}.yaml").write_text(GOOD.replace("name: pinned", f"name: pod-{i}"))
    assert len(list(repo.rglob("*.yaml"))) == 12
    (published,) = [h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text()) if h["id"] == "gpuaudit"]
    home = tmp_path / "home"

    proc = run_hooks(repo, home, [{**published, "additional_dependencies": [str(ROOT)]}])
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert out.count(" objects, ") == 1, out  # one gpuaudit run: one report
    assert "12 objects" not in out  # the package's two files became one object
    # the overlay was rendered: its pin reaches the Deployment (the patch alone has no GPU)
    assert "GPA-PL-001" in out and "Deployment ml/infer" in out
    # the finding points where the overlay's patch sets the pin, not at the base
    pin_line = next(i for i, row in enumerate(PIN.splitlines(), 1) if "nodeName:" in row)
    assert f"apps/overlays/prod/pin.yaml:{pin_line}  Deployment ml/infer" in out, out
    assert out.count("pin.yaml:") == 1  # the patch is never judged as an object of its own

    python = hook_python(home)
    for module in ("kubernetes", "jinja2", "pynvml"):
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True)
        assert probe.returncode != 0, f"the hook environment has {module}"
    assert subprocess.run([str(python), "-c", "import gpuaudit, yaml, click"], capture_output=True).returncode == 0


def test_local_recipe_installs_a_path_and_runs(tmp_path):
    """docs/ci/pre-commit-local.yaml, with this checkout for the wheel, through
    the real pre-commit: no repository URL needed."""
    home = tmp_path / "home"
    env = precommit_env(home)
    config = yaml.safe_load((ROOT / "docs" / "ci" / "pre-commit-local.yaml").read_text())
    (hook,) = config["repos"][0]["hooks"]
    assert config["repos"][0]["repo"] == "local" and hook["require_serial"] is True
    assert hook["additional_dependencies"][0].startswith("gpuaudit @ ")
    hook["additional_dependencies"] = [str(ROOT)]
    work = tmp_path / "repo"
    (work / "manifests").mkdir(parents=True)
    (work / "manifests" / "bad.yaml").write_text(BAD)
    (work / "manifests" / "good.yaml").write_text(GOOD.replace("name: pinned", "name: good"))
    (work / "other.yaml").write_text(BAD)  # outside files: ^manifests/
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(work, "init", "-q")
    git(work, "add", ".")
    proc = subprocess.run(
        ["pre-commit", "run", "--all-files"], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "manifests/bad.yaml:5" in proc.stdout and "other.yaml" not in proc.stdout
    assert proc.stdout.count(" objects, ") == 1
    python = hook_python(home)
    assert subprocess.run([str(python), "-c", "import kubernetes"], capture_output=True).returncode != 0
