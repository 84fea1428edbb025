"""`gpuaudit fix` as a process: the overlay it writes for the examples, what it
refuses, where it may write, --diff, kustomize directories as input."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "manifests"

PINNED = """\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: notebook, namespace: notebooks}
spec:
  serviceName: notebook
  selector: {matchLabels: {app: notebook}}
  template:
    metadata: {labels: {app: notebook}}
    spec:
      nodeSelector: {kubernetes.io/hostname: gpu-node-07}
      containers:
      - name: jupyter
        image: jupyter:1
        resources:
          requests: {cpu: "2", memory: 8Gi}
          limits: {nvidia.com/gpu: 1}
"""


@pytest.fixture
def kubectl(monkeypatch):
    monkeypatch.setenv("PATH", f"{ROOT / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_examples_overlay_builds_and_removes_every_patched_finding(tmp_path, run_cli, kubectl):
    inputs = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, inputs)
    before = digest(inputs)
    out = tmp_path / "overlay"
    proc = run_cli("fix", str(inputs), "--out", str(out), "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 still there, 0 new; 0 unplanned difference(s)" in proc.stdout
    assert digest(inputs) == before  # inputs are never edited

    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    patch_files = sorted(p.relative_to(out).as_posix() for p in (out / "patches").iterdir())
    assert [p["path"] for p in kustomization["patches"]] == patch_files
    for entry in kustomization["patches"]:  # a strategic-merge patch names its object; JSON 6902 needs a target
        patch = yaml.safe_load((out / entry["path"]).read_text())
        if isinstance(patch, dict):
            assert {"apiVersion", "kind"} <= set(patch) and patch["metadata"]["name"] and "target" not in entry
        else:
            assert {"kind", "name", "version"} <= set(entry["target"])
    # the inputs live outside the overlay: copied byte for byte into base/
    copies = [r for r in kustomization["resources"] if r.startswith("base/")]
    assert copies
    for copy in copies:
        assert (out / copy).read_bytes() == (inputs / Path(copy).name).read_bytes()

    review = (out / "REVIEW.md").read_text()
    for heading in ("**Finding**", "**Sized from**", "**Expected effect**", "**Risk**"):
        assert review.count(heading) >= len(patch_files)
    assert "**Roll back**" in review
    unpatched = int(re.search(r"^(\d+) finding\(s\) without a patch", proc.stdout, re.M).group(1))
    assert ("## Not remediated" in review) == (unpatched > 0)
    assert "needs confirmation" in review  # no telemetry: the share is a suggestion


def test_a_non_empty_folder_needs_force(tmp_path, run_cli, kubectl):
    app = tmp_path / "app.yaml"
    app.write_text(PINNED)
    out = tmp_path / "overlay"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = run_cli("fix", str(app), "--out", str(out))
    assert proc.returncode == 2
    assert "not empty" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    proc = run_cli("fix", str(app), "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "kustomization.yaml").is_file()


def test_no_object_name_writes_outside_the_overlay(tmp_path, run_cli, kubectl):
    hostile = PINNED.replace("name: notebook, namespace", "name: ../../../escaped, namespace")
    app = tmp_path / "work" / "app.yaml"
    app.parent.mkdir()
    app.write_text(hostile)
    out = tmp_path / "work" / "overlay"
    proc = run_cli("fix", str(app), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(out in p.parents or p == app for p in written), written
    assert any("escaped" in p.name for p in (out / "patches").iterdir())


def test_an_input_file_is_never_overwritten(tmp_path, run_cli, kubectl):
    package = tmp_path / "app"
    package.mkdir()
    (package / "app.yaml").write_text(PINNED)
    (package / "kustomization.yaml").write_text("resources: [app.yaml]\n")
    before = digest(package)
    proc = run_cli("fix", str(package), "--out", str(package), "--force")
    assert proc.returncode == 2
    assert "refusing to overwrite input" in proc.stderr
    assert digest(package) == before


def test_diff_prints_before_and_after_and_writes_nothing(tmp_path, run_cli, kubectl):
    app = tmp_path / "app.yaml"
    app.write_text(PINNED)
    proc = run_cli("fix", str(app), "--diff", "--rules", "GPA-PL-001")
    assert proc.returncode == 0, proc.stderr
    assert "--- a/StatefulSet/notebooks/notebook" in proc.stdout
    assert "-        kubernetes.io/hostname: gpu-node-07" in proc.stdout
    assert "+    gpuaudit.io/remediated: GPA-PL-001" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.yaml"]


def test_a_kustomize_directory_is_the_base_by_relative_path(tmp_path, run_cli, kubectl):
    package = tmp_path / "deploy" / "base"
    package.mkdir(parents=True)
    (package / "app.yaml").write_text(PINNED)
    (package / "kustomization.yaml").write_text("namePrefix: team-\nresources: [app.yaml]\n")
    out = tmp_path / "deploy" / "gpuaudit"
    proc = run_cli("fix", str(package), "--out", str(out), "--verify", "--rules", "GPA-PL-001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../base"]
    assert not (out / "base").exists()
    (entry,) = kustomization["patches"]
    patch = yaml.safe_load((out / entry["path"]).read_text())
    assert patch["metadata"]["name"] == "team-notebook"  # the name the base builds


def test_set_overrides_a_remediation_parameter(tmp_path, run_cli, kubectl):
    job = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: train
        resources:
          limits: {nvidia.com/gpu: 4}
"""
    app = tmp_path / "job.yaml"
    app.write_text(job)
    out = tmp_path / "overlay"
    # a test rule (tests/fix_rules) that reports any GPU pod without a memory /dev/shm
    args = [
        "fix",
        str(app),
        "--out",
        str(out),
        "--rules",
        "TEST-AP-902",
        "--policies",
        str(ROOT / "tests" / "fix_rules"),
    ]
    proc = run_cli(*args, "--set", "add-dev-shm.size_limit=32Gi", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (patch,) = (out / "patches").iterdir()
    assert "sizeLimit: 32Gi" in patch.read_text()


def test_stdin_and_a_missing_out_are_usage_errors(tmp_path, run_cli):
    assert run_cli("fix", "-", "--out", str(tmp_path / "o"), stdin=PINNED).returncode == 2
    app = tmp_path / "app.yaml"
    app.write_text(PINNED)
    proc = run_cli("fix", str(app))
    assert proc.returncode == 2 and "--out" in proc.stderr


def test_taking_gpus_away_is_planned_before_reshaping_them(tmp_path, run_cli, kubectl):
    """A Ray head whose GPUs are dropped needs no move to a shared GPU first:
    the move's finding is judged again on the head without GPUs, and the one
    patch that drops them fixes both."""
    [case] = yaml.safe_load((ROOT / "remediations" / "drop-ray-head-gpus" / "cases.yaml").read_text())
    app = tmp_path / "ray.yaml"
    app.write_text(case["manifest"])
    out = tmp_path / "overlay"
    # TEST-AL-901 (tests/fix_rules): any pod holding a whole GPU, the head included
    rules = ["--rules", "TEST-AL-901,GPA-AL-010", "--policies", str(ROOT / "tests" / "fix_rules")]
    proc = run_cli("fix", str(app), "--out", str(out), "--verify", *rules)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    patches = sorted(p.name for p in (out / "patches").iterdir())
    assert patches == ["01-drop-ray-head-gpus-rayservice-llm.yaml"]
    review = (out / "REVIEW.md").read_text()
    assert "| GPA-AL-010, TEST-AL-901 |" in review
    assert "gpu.shared" not in (out / "patches" / patches[0]).read_text()
