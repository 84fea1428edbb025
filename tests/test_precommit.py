"""The hook, run by the real pre-commit framework against a scratch repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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


def try_repo(repo: Path, home: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = precommit_env(home)
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
