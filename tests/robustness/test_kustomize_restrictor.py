"""A kustomization that reads a file outside its own folder, in a pull request
audited on a CI runner: kustomize's load restrictor stays on, so the file is
never read into an object, and so never reaches a log, SARIF or any other
output. Only `--kustomize-load-restrictor none` (the user's choice, never a
file in the repository) lifts it.

The attack: a `configMapGenerator` reads a file of the runner (a token),
and a `replacements` rule copies its content into a Pod's name; every
finding on that Pod would carry the token into the output. Real kubectl.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuaudit.output import FORMATS

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"
SECRET = "s3cr3t-runner-token-7f3a9c"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: trainer
    image: cuda:12
    resources:
      requests: {{cpu: "500m"}}
      limits: {{nvidia.com/gpu: 1}}
"""


def kustomization(source: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources:
        - pod.yaml
        configMapGenerator:
        - name: leak
          files:
          - token={source}
        generatorOptions:
          disableNameSuffixHash: true
        replacements:
        - source:
            kind: ConfigMap
            name: leak
            fieldPath: data.token
          targets:
          - select:
              kind: Pod
            fieldPaths:
            - metadata.name
        """
    )


@pytest.fixture
def path_with_kubectl() -> str:
    path = os.pathsep.join([str(TOOLS), os.environ.get("PATH", "")])
    if shutil.which("kubectl", path=path) is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")
    return path


def gpuaudit(*args: str, cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    return subprocess.run(
        [exe, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PATH": path},
        timeout=300,
        check=False,
    )


@pytest.fixture(params=["relative-path", "symlink-inside"])
def hostile_repo(request, tmp_path: Path) -> Path:
    """runner/token outside the repository; repo/app reads it (by a path that
    climbs out, or through a symlink planted inside the package); repo/plain.yaml
    is an honest manifest beside it."""
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "token").write_text(SECRET)
    app = tmp_path / "repo" / "app"
    app.mkdir(parents=True)
    if request.param == "relative-path":
        source = "../../runner/token"
    else:
        (app / "token").symlink_to(tmp_path / "runner" / "token")
        source = "token"
    (app / "kustomization.yaml").write_text(kustomization(source))
    (app / "pod.yaml").write_text(POD.format(name="trainer"))
    (tmp_path / "repo" / "plain.yaml").write_text(POD.format(name="honest"))
    return tmp_path


def _everything_written(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in sorted(root.rglob("*")) if p.is_file())


def test_the_attack_works_when_the_restrictor_is_lifted(hostile_repo, path_with_kubectl):
    """Proof that the package is hostile: kubectl without the restrictor (what
    gpuaudit did on its own before) puts the token into the Pod's name."""
    proc = subprocess.run(
        ["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone", "repo/app"],
        capture_output=True,
        text=True,
        cwd=hostile_repo,
        env={**os.environ, "PATH": path_with_kubectl},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"name: {SECRET}" in proc.stdout


def test_check_never_reads_a_file_outside_the_package(hostile_repo, path_with_kubectl):
    out = hostile_repo / "out"
    files = [f"--format={name}={out / ('report.' + name)}" for name in FORMATS]
    proc = gpuaudit("check", "repo", "--format", "text", *files, cwd=hostile_repo, path=path_with_kubectl)

    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    written = _everything_written(out)
    assert len(list(out.iterdir())) == len(FORMATS)
    assert SECRET not in written
    # The refusal names the kustomization and the file it wanted, and says how to allow it.
    assert "repo/app/kustomization.yaml" in proc.stdout
    wanted = "runner/token" if "runner/token" in proc.stdout else "repo/app/token"
    assert f"it reads {wanted}, outside its folder repo/app" in proc.stdout
    assert "--kustomize-load-restrictor none" in proc.stdout
    # The rest of the input is still audited and reported, in every format.
    assert "Pod honest" in proc.stdout and "repo/plain.yaml" in (out / "report.sarif").read_text()


def test_fix_never_reads_a_file_outside_the_package(hostile_repo, path_with_kubectl):
    overlay = hostile_repo / "overlay"
    proc = gpuaudit(
        "fix", "repo/app", "repo/plain.yaml", "--out", str(overlay), cwd=hostile_repo, path=path_with_kubectl
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr + _everything_written(overlay)
    assert "outside its folder" in proc.stderr and "--kustomize-load-restrictor none" in proc.stderr
    kustomization_text = (overlay / "kustomization.yaml").read_text()
    assert "LoadRestrictionsNone" not in kustomization_text
    assert "honest" in kustomization_text  # the plain manifest is still fixed

    diff = gpuaudit("fix", "repo/app", "--diff", cwd=hostile_repo, path=path_with_kubectl)
    assert "Traceback" not in diff.stderr, diff.stderr
    assert diff.returncode == 2 and SECRET not in diff.stdout + diff.stderr


def test_only_the_user_lifts_the_restrictor(hostile_repo, path_with_kubectl):
    """A config file in the repository cannot ask for it; the flag can (and then
    the file is read, as kustomize would)."""
    (hostile_repo / "repo" / ".gpuaudit.yaml").write_text("kustomize_load_restrictor: none\nload_restrictor: none\n")
    proc = gpuaudit("check", "repo", "--format", "json", cwd=hostile_repo / "repo", path=path_with_kubectl)
    assert proc.returncode == 2 and SECRET not in proc.stdout + proc.stderr

    lifted = gpuaudit(
        "check", "repo/app", "--kustomize-load-restrictor", "none", cwd=hostile_repo, path=path_with_kubectl
    )
    assert "Traceback" not in lifted.stderr, lifted.stderr
    assert f"Pod {SECRET}" in lifted.stdout  # the user asked for it


def test_a_package_inside_its_folder_builds_as_before(tmp_path, path_with_kubectl):
    app = tmp_path / "app"
    app.mkdir()
    (app / "token").write_text("harmless-name\n")
    (app / "kustomization.yaml").write_text(kustomization("token"))
    (app / "pod.yaml").write_text(POD.format(name="trainer"))
    proc = gpuaudit("check", "app", cwd=tmp_path, path=path_with_kubectl)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Pod harmless-name" in proc.stdout and "INPUT PROBLEMS" not in proc.stdout
