"""gpuaudit as users get it (issue 37, item 2): the sdist and the wheel built
by `python -m build` (the wheel from the sdist, as build does), the wheel
installed into a fresh virtual environment, and run there, away from this
source tree: the rules, patch templates, bundled data and report templates
are all inside it, `--version` is the package's, and the README's first
set-up command does its job.

The fresh environment installs the wheel's dependencies from the package
index at the versions of constraints.txt (the versions the tests run with,
as the Dockerfile installs them). It does not borrow this checkout's .venv
(`--system-site-packages` would add the base interpreter's packages, not the
venv's, and the editable gpuaudit there points back at the source tree)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import gpuaudit

ROOT = Path(__file__).resolve().parents[1]
VERSION = gpuaudit.__version__
TIMEOUT = 900


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel, built into a scratch folder."""
    pytest.importorskip("build", reason="the test extras install build (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("dist")
    proc = run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("gpuaudit-*.whl")
    (sdist,) = out.glob("gpuaudit-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> dict[str, Path]:
    """A fresh venv with the wheel and every extra (what the README installs)."""
    base = tmp_path_factory.mktemp("fresh")
    venv = base / "venv"
    proc = run(sys.executable, "-m", "venv", venv, cwd=base)
    assert proc.returncode == 0, proc.stderr
    paths = {"venv": venv, "home": base}
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    wheel = f"{dist['wheel']}[all]"
    proc = run(*pip, "--constraint", ROOT / "constraints.txt", wheel, cwd=base, env=user_env(paths))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    where = "import gpuaudit, os; print(os.path.dirname(gpuaudit.__file__))"
    site = run(venv / "bin" / "python", "-c", where, cwd=base, env=user_env(paths))
    assert site.returncode == 0, site.stderr
    return {**paths, "package": Path(site.stdout.strip())}


def user_env(installed: dict[str, Path]) -> dict[str, str]:
    """A user's shell with the fresh venv active: nothing of this checkout on
    the path, caches in scratch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GPUAUDIT_", "VIRTUAL_ENV"))}
    path = [str(installed["venv"] / "bin"), *(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)]
    env.update(
        PATH=os.pathsep.join(path),
        VIRTUAL_ENV=str(installed["venv"]),
        XDG_CACHE_HOME=str(installed["home"] / "cache"),
        NO_COLOR="1",
    )
    return env


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_the_sdist_carries_what_the_wheel_is_built_from(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert f"gpuaudit-{VERSION}.tar.gz" == dist["sdist"].name
    for folder in ("policies", "remediations", "gpuaudit/data", "gpuaudit/report/templates"):
        missing = {f"{folder}/{f}" for f in files_under(ROOT / folder)} - names
        assert missing == set(), folder
    assert {"pyproject.toml", "README.md"} <= names


def test_the_wheel_is_installed_not_the_source_tree(installed):
    assert installed["package"].is_relative_to(installed["venv"])
    assert not installed["package"].is_relative_to(ROOT)


@pytest.mark.parametrize(
    ("source", "inside"),
    [
        ("policies", "policies"),
        ("remediations", "remediations"),
        ("gpuaudit/data", "data"),
        ("gpuaudit/report/templates", "report/templates"),
        ("gpuaudit/facts", "facts"),  # the fact schema fragments beside their modules
    ],
)
def test_bundled_files_are_all_in_the_installed_package(installed, source, inside):
    expected = files_under(ROOT / source)
    assert expected, source
    assert expected - files_under(installed["package"] / inside) == set()


def test_version_is_the_package_version(installed, tmp_path):
    proc = run("gpuaudit", "--version", cwd=tmp_path, env=user_env(installed))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"gpuaudit, version {VERSION}"
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert re.search(r'^version = "([^"]+)"$', pyproject, re.M).group(1) == VERSION


def test_the_installed_rules_list_explain_and_validate(installed, tmp_path):
    env = user_env(installed)
    listed = run("gpuaudit", "rules", "list", "-o", "json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    rule_files = [p for p in (ROOT / "policies").rglob("*.yaml") if not p.name.endswith(".cases.yaml")]
    opt_in = [p for p in rule_files if re.search(r"^opt_in: true$", p.read_text("utf-8"), re.M)]
    assert len(json.loads(listed.stdout)) == len(rule_files) - len(opt_in)
    explained = run("gpuaudit", "rules", "explain", "GPA-ME-002", cwd=tmp_path, env=env)
    assert explained.returncode == 0 and "opt-in" in explained.stdout, explained.stderr
    validated = run("gpuaudit", "rules", "validate", installed["package"] / "policies", cwd=tmp_path, env=env)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert validated.stdout.startswith(f"{len(rule_files)} rules valid, 0 invalid")


def readme_first_command() -> str:
    """The README's first set-up command, less making and activating the venv
    and installing from the clone (done above, from the wheel)."""
    readme = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"## Set up\n.*?```sh\n(.*?)```", readme, re.S).group(1)
    line = next(line for line in block.splitlines() if line and not line.startswith("#"))
    steps = [s.strip() for s in line.split("&&")]
    assert any(s.startswith("pip install '.[all]'") for s in steps), line  # what the wheel stands for
    return " && ".join(s for s in steps if not s.startswith(("python3 -m venv", ". ", "pip install")))


def test_the_readmes_first_command_runs_from_the_wheel(installed, tmp_path):
    command = readme_first_command()
    assert command.startswith("gpuaudit report --snapshot examples/demo-snapshot.json.gz")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # what the clone has beside the package
    proc = run("bash", "-c", command, cwd=tmp_path, env=user_env(installed))
    # the README says: exit 1, the example manifests hold a high finding
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    out = Path(tmp_path, shlex.split(command)[shlex.split(command).index("--out") + 1])
    assert (out / "report.html").stat().st_size > 10_000
    assert json.loads((out / "report.json").read_text())["first_screen"]["gpus"]["total"] > 0
    assert "GPA-PL-001" in proc.stdout and "examples/manifests/notebook.yaml:17" in proc.stdout


def test_fix_renders_patches_from_the_installed_templates(installed, tmp_path):
    shutil.copytree(ROOT / "examples" / "manifests", tmp_path / "manifests")
    proc = run("gpuaudit", "fix", "manifests", "--out", "overlay", cwd=tmp_path, env=user_env(installed))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "overlay" / "patches").glob("*.yaml"))
    assert (tmp_path / "overlay" / "REVIEW.md").exists()
