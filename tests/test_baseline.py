"""Baselines: record today's findings, hide exactly those later, report the
rest, and list entries that no longer match."""

from __future__ import annotations

import json

from tests.manifests import PINNED

TRAINING = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ft, namespace: research}
spec:
  runPolicy: {activeDeadlineSeconds: 86400}
  pytorchReplicaSpecs:
    Master:
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime
            command: [torchrun, --nproc_per_node=8, train.py]
            resources:
              requests: {cpu: "32", memory: 64Gi}
              limits: {nvidia.com/gpu: 8}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime
            command: [torchrun, --nproc_per_node=8, train.py]
            resources:
              requests: {cpu: "32", memory: 64Gi}
              limits: {nvidia.com/gpu: 8}
"""


def findings(proc) -> list[tuple[str, str]]:
    report = json.loads(proc.stdout)
    return sorted((f["rule"], f["resource"]["name"]) for f in report["findings"])


def test_baseline_hides_recorded_findings_even_when_lines_move(run_cli, tmp_path):
    (tmp_path / "manifests").mkdir()
    pod = tmp_path / "manifests" / "pod.yaml"
    pod.write_text(PINNED)
    write = run_cli("check", "manifests", "--write-baseline", "gpuaudit-baseline.json")
    assert write.returncode == 0, write.stderr  # adopting: today's debt does not fail
    assert "recorded 1 finding" in write.stderr
    stored = json.loads((tmp_path / "gpuaudit-baseline.json").read_text())
    assert stored["findings"] == [
        {
            "rule": "GPA-PL-001",
            "file": "manifests/pod.yaml",
            "kind": "Pod",
            "namespace": "ml",
            "name": "pinned",
            "container": "",
            "count": 1,
        }
    ]
    pod.write_text("# a comment\n# and another, moving every line\n" + PINNED)
    proc = run_cli("check", "manifests", "--baseline", "gpuaudit-baseline.json", "--format", "json")
    assert proc.returncode == 0, proc.stdout
    report = json.loads(proc.stdout)
    assert report["findings"] == []
    assert [s["reason"] for s in report["suppressed"]] == ["in baseline gpuaudit-baseline.json"]


def test_a_new_finding_is_reported_and_stale_entries_are_listed(run_cli, tmp_path):
    (tmp_path / "pod.yaml").write_text(PINNED)
    assert run_cli("check", "pod.yaml", "--write-baseline", "b.json").returncode == 0
    # the pin moves to a renamed pod; a second pinned pod appears in a new file
    (tmp_path / "pod.yaml").write_text(PINNED.replace("name: pinned", "name: pinned-v2"))
    (tmp_path / "other.yaml").write_text(PINNED)
    proc = run_cli("check", "pod.yaml", "other.yaml", "--baseline", "b.json", "--format", "json")
    assert proc.returncode == 1  # new high findings
    report = json.loads(proc.stdout)
    located = sorted((f["resource"]["name"], f["location"]["file"]) for f in report["findings"])
    # same kind/name/rule in another file is a different finding
    assert located == [("pinned", "other.yaml"), ("pinned-v2", "pod.yaml")]
    stale = [e for e in report["errors"] if e["file"] == "b.json"]
    assert len(stale) == 1 and stale[0]["level"] == "warning"
    assert "no longer matches" in stale[0]["message"] and "Pod ml/pinned" in stale[0]["message"]


def test_baseline_counts_findings_that_share_a_fingerprint(run_cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(TRAINING)  # Master and Worker: two /dev/shm findings, one fingerprint
    run_cli("check", "job.yaml", "--write-baseline", "b.json")
    entry = next(e for e in json.loads((tmp_path / "b.json").read_text())["findings"] if e["rule"] == "GPA-AP-002")
    assert entry["count"] == 2
    proc = run_cli("check", "job.yaml", "--baseline", "b.json", "--format", "json")
    assert findings(proc) == []
    # a third pod template with the same problem is new debt
    job.write_text(
        TRAINING.replace(
            "    Worker:",
            "    Evaluator:\n      template:\n        spec:\n          containers:\n"
            "          - name: pytorch\n            image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime\n"
            "            command: [torchrun, --nproc_per_node=8, eval.py]\n"
            "            resources:\n"
            "              requests: {cpu: '32', memory: 64Gi}\n"
            "              limits: {nvidia.com/gpu: 8}\n    Worker:",
        )
    )
    proc = run_cli("check", "job.yaml", "--baseline", "b.json", "--format", "json")
    assert findings(proc) == [("GPA-AP-002", "ft")]


def test_absolute_paths_are_stored_relative_to_the_working_directory(run_cli, tmp_path):
    (tmp_path / "pod.yaml").write_text(PINNED)
    run_cli("check", str(tmp_path / "pod.yaml"), "--write-baseline", "b.json")
    [entry] = json.loads((tmp_path / "b.json").read_text())["findings"]
    assert entry["file"] == "pod.yaml"
    proc = run_cli("check", "pod.yaml", "--baseline", "b.json", "--format", "json")
    assert findings(proc) == []


def test_a_file_that_is_not_a_baseline_is_a_usage_error(run_cli, tmp_path):
    (tmp_path / "pod.yaml").write_text(PINNED)
    (tmp_path / "b.json").write_text('{"version": 7}')
    proc = run_cli("check", "pod.yaml", "--baseline", "b.json")
    assert proc.returncode == 2 and "not a gpuaudit baseline" in proc.stderr
