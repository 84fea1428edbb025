"""What the docs tell users to pin exists (issue 37, item 1): every `rev:`
shown in the README and docs/ is `v` + the package version, that version has
a CHANGELOG entry, and in a checkout with tags the rev resolves; and the
release procedure (docs/releasing.md) makes the documented pre-commit
config work, run by the real pre-commit against a tagged clone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import gpuaudit
from tests.precommit_env import precommit_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHANGELOG = ROOT / "CHANGELOG.md"
# `rev: X` at the start of a line (a YAML key, in a code block or a recipe),
# not the word `rev:` in running text.
REV = re.compile(r"^[ \t]*(?:-[ \t]+)?rev:[ \t]*['\"]?([^\s'\"#]+)", re.M)


def shown_revs(root: Path = ROOT) -> list[tuple[str, str]]:
    """(page, rev) for every `rev:` in the README and docs/ (pages and recipes)."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "docs").rglob("*.y*ml"))]
    return [(str(page.relative_to(root)), rev) for page in pages for rev in REV.findall(page.read_text("utf-8"))]


def changelog_versions(text: str) -> set[str]:
    return set(re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M))


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def unresolved(revs: list[tuple[str, str]], repo: Path) -> list[str]:
    """The revs that name no commit in ``repo``, once it has tags at all (a
    clone without tags cannot tell; the release procedure tags the commit
    the docs were written for)."""
    if not git("tag", "-l", cwd=repo).stdout.strip():
        return []
    return [
        f"{page}: rev: {rev}"
        for page, rev in revs
        if git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo).returncode != 0
    ]


def rev_problems(revs: list[tuple[str, str]], version: str, changelog: str) -> list[str]:
    problems = [
        f"{page}: rev: {rev} is not v{version}, the package version" for page, rev in revs if rev != f"v{version}"
    ]
    if version not in changelog_versions(changelog):
        problems.append(f"CHANGELOG.md has no entry '## [{version}] - YYYY-MM-DD'")
    return problems


def test_the_package_names_one_version():
    # tomllib is Python 3.11's; the project's first `version = ` line is [project]'s
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert re.search(r'^version = "([^"]+)"$', pyproject, re.M).group(1) == gpuaudit.__version__


def test_every_rev_shown_is_the_released_version_with_a_changelog_entry():
    revs = shown_revs()
    assert len(revs) >= 3  # README, ci-and-adoption.md (twice), the recipe
    assert rev_problems(revs, gpuaudit.__version__, CHANGELOG.read_text("utf-8")) == []


def test_every_rev_shown_resolves_in_a_checkout_with_tags():
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    assert unresolved(shown_revs(), ROOT) == []


def test_the_checks_refuse_a_rev_that_does_not_resolve(tmp_path):
    """The two checks above, on a repository where they must fail: a rev
    that is not the version, a version without an entry, a tag that is not there."""
    revs = [("README.md", "v9.9.9"), ("docs/x.md", "v0.1.0")]
    assert rev_problems(revs, "0.1.0", "## [0.1.0] - 2026-12-02\n") == [
        "README.md: rev: v9.9.9 is not v0.1.0, the package version"
    ]
    assert rev_problems(revs[1:], "0.1.0", "## [Unreleased]\n") == [
        "CHANGELOG.md has no entry '## [0.1.0] - YYYY-MM-DD'"
    ]
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "first")):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    assert unresolved(revs, repo) == []  # no tags: cannot tell
    git("tag", "v0.0.1", cwd=repo)
    assert unresolved(revs, repo) == ["README.md: rev: v9.9.9", "docs/x.md: rev: v0.1.0"]
    git("tag", "v0.1.0", cwd=repo)
    assert unresolved(revs, repo) == ["README.md: rev: v9.9.9"]


BAD = """\
apiVersion: v1
kind: Pod
metadata: {name: pinned}
spec:
  nodeName: gpu-node-1
  containers:
  - name: cuda
    resources:
      limits: {nvidia.com/gpu: 1}
"""


def test_the_documented_pre_commit_config_runs_after_the_release_procedure(tmp_path):
    """docs/ci/pre-commit-config.yaml as users copy it, `rev:` untouched,
    against a clone of this repository: before the tag pre-commit cannot
    check the rev out; tagged as docs/releasing.md says, it runs the hook."""
    env = precommit_env(tmp_path / "home")
    if git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout")
    mirror = tmp_path / "gpuaudit"
    clone = git("clone", "-q", "--no-tags", str(ROOT), str(mirror))
    assert clone.returncode == 0, clone.stderr

    config = yaml.safe_load((DOCS / "ci" / "pre-commit-config.yaml").read_text("utf-8"))
    (repo,) = config["repos"]
    rev = repo["rev"]
    repo["repo"] = str(mirror)  # the user's mirror: the only change they make
    work = tmp_path / "manifests-repo"
    (work / "manifests").mkdir(parents=True)
    (work / "manifests" / "pinned.yaml").write_text(BAD)
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)

    def pre_commit() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["pre-commit", "run", "--all-files"], cwd=work, env=env, capture_output=True, text=True, timeout=900
        )

    untagged = pre_commit()
    assert untagged.returncode not in (0, 1), untagged.stdout
    assert rev in untagged.stdout + untagged.stderr + _log(tmp_path / "home")

    release = ("-c", "user.name=release", "-c", "user.email=release@localhost")
    tag = git(*release, "tag", "-a", rev, "-m", f"gpuaudit {rev[1:]}", cwd=mirror)
    assert tag.returncode == 0, tag.stderr
    assert git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=mirror).returncode == 0
    shutil.rmtree(tmp_path / "home", ignore_errors=True)  # pre-commit remembers the failed clone

    tagged = pre_commit()
    assert tagged.returncode == 1, tagged.stdout + tagged.stderr  # the hook ran and found the pin
    assert "GPA-PL-001" in tagged.stdout and "manifests/pinned.yaml:5" in tagged.stdout


def _log(home: Path) -> str:
    log = home / "pre-commit.log"
    return log.read_text("utf-8") if log.exists() else ""
