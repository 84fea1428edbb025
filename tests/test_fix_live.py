"""`gpuaudit fix --snapshot FILE`: alone, the workloads that own the cluster's
GPU pods and its GPU configs are fixed on a base of the objects as read; with
manifests, the snapshot's telemetry and node GPU models size the patches (a
MIG slice from observed peak memory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "clusters" / "small.json"

RERANKER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: rag-reranker, namespace: inference}
spec:
  replicas: 2
  selector: {matchLabels: {app: rag-reranker}}
  template:
    metadata: {labels: {app: rag-reranker}}
    spec:
      containers:
      - name: reranker
        image: reranker:1
        resources:
          requests: {cpu: "4", memory: 24Gi}
          limits: {memory: 24Gi, nvidia.com/gpu: "1"}
"""


@pytest.fixture
def kubectl(monkeypatch):
    monkeypatch.setenv("PATH", f"{ROOT / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")


def snapshot(tmp_path: Path, peaks: dict[str, float] | None = None) -> Path:
    """The recorded small cluster as a snapshot, with GPU telemetry for the
    pods in ``peaks`` (pod name -> peak framebuffer MiB)."""
    objects = json.loads(SMALL.read_text())
    telemetry = None
    if peaks:
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in objects["pods"]}
        rows = [
            {
                "node": nodes[pod],
                "gpu": str(i),
                "uuid": f"GPU-{i}",
                "namespace": "inference",
                "pod": pod,
                "container": None,
                "fb_used_max_mib": peak,
                "fb_used_mean_mib": peak * 0.8,
                "compute_mean": 0.05,
                "coverage": 0.97,
            }
            for i, (pod, peak) in enumerate(peaks.items())
        ]
        telemetry = {
            "source": "test",
            "window": {"seconds": 7 * 86400},
            "signals": {"compute": "DCGM_FI_PROF_SM_ACTIVE"},
            "gpus": rows,
        }
    path = tmp_path / "snapshot.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "kind": "gpuaudit-snapshot",
                "collected_at": "2026-11-29T12:00:00Z",
                "cluster": {"server": "https://test", "context": None},
                "objects": objects,
                "absent": [],
                "errors": [],
                "telemetry": telemetry,
            }
        )
    )
    return path


def test_snapshot_alone_fixes_the_gpu_configs_on_the_objects_as_read(tmp_path, run_cli, kubectl):
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snapshot(tmp_path)), "--out", str(out), "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 still there, 0 new; 0 unplanned difference(s)" in proc.stdout
    bases = sorted((out / "base").iterdir())
    assert bases
    for base in bases:
        obj = yaml.safe_load(base.read_text())
        assert "status" not in obj
        assert not {"managedFields", "resourceVersion", "uid"} & set(obj["metadata"])
    review = (out / "REVIEW.md").read_text()
    # the ClusterPolicy is pointed at the sharing config the cluster already has
    assert "existing sharing config gpu-operator/time-slicing-config" in review
    # recorded before the collector read owners: the Deployments cannot be patched
    assert "the snapshot holds no Deployment (recorded before gpuaudit read the workloads" in review


SERVER_WRITTEN = {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation"}


def test_snapshot_alone_patches_the_deployments_that_own_the_pods(
    tmp_path, run_cli, kubectl, apiserver, kubeconfig
):
    apiserver.load(json.loads(SMALL.read_text()))
    snap = tmp_path / "cluster.json.gz"
    proc = run_cli("snapshot", "-o", str(snap), "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snap), "--out", str(out), "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 still there, 0 new; 0 unplanned difference(s)" in proc.stdout

    patches = sorted(p.name for p in (out / "patches").iterdir())
    assert any("add-dev-shm-deployment-llm-serving" in p for p in patches), patches
    assert any("drop-hostname-pin-deployment-rag-reranker" in p for p in patches), patches
    bases = {p.name: yaml.safe_load(p.read_text()) for p in (out / "base").iterdir()}
    deployments = {o["metadata"]["name"]: o for o in bases.values() if o["kind"] == "Deployment"}
    assert {"llm-serving", "rag-reranker"} <= set(deployments)
    for obj in bases.values():
        assert "status" not in obj and not SERVER_WRITTEN & set(obj["metadata"])
        annotations = obj["metadata"].get("annotations") or {}
        assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations
    # the base is the object as read: its pod template is the running pods'
    pinned = deployments["rag-reranker"]["spec"]["template"]["spec"]["nodeSelector"]
    assert pinned == {"kubernetes.io/hostname": "gpu-a100-1"}

    # Built with real kustomize, the Deployments no longer show those findings
    built = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, check=True)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(built.stdout)}
    reranker = objects[("Deployment", "rag-reranker")]["spec"]["template"]["spec"]
    assert "kubernetes.io/hostname" not in (reranker.get("nodeSelector") or {})
    serving = objects[("Deployment", "llm-serving")]["spec"]["template"]["spec"]
    assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in serving["volumes"])
    proc = run_cli("check", "-", "--rules", "GPA-PL-001,GPA-AP-002", "--format", "json", stdin=built.stdout)
    found = {(f["rule"], f["resource"]["name"]) for f in json.loads(proc.stdout)["findings"]}
    assert not found & {("GPA-PL-001", "rag-reranker"), ("GPA-AP-002", "llm-serving")}

    review = (out / "REVIEW.md").read_text()
    assert "`apps/v1 Deployment inference/llm-serving`" in review
    # a Job nothing owns keeps its immutable pod template: it says so, and why
    assert "a Job nothing owns: its pod template cannot change in place" in review
    # the pods of one Deployment make one finding on it, not one per pod
    assert review.count("GPA-AP-002 (medium) at") == 1


def test_snapshot_telemetry_sizes_a_mig_slice_for_the_manifest(tmp_path, run_cli, kubectl):
    app = tmp_path / "reranker.yaml"
    app.write_text(RERANKER)
    pods = {"rag-reranker-5f8b9c7d6-j4x8q": 5200.0, "rag-reranker-5f8b9c7d6-p2r7m": 7000.0}
    snap = snapshot(tmp_path, pods)
    out = tmp_path / "overlay"
    args = ["fix", str(app), "--snapshot", str(snap), "--out", str(out), "--rules", "GPA-AL-001"]
    proc = run_cli(*args, "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (patch,) = (out / "patches").iterdir()
    assert "nvidia.com/mig-1g.10gb: 1" in patch.read_text()
    review = (out / "REVIEW.md").read_text()
    # 7,000 MiB peak + 20% = 8,400 MiB: the smallest A100-80GB slice (nodes say A100)
    assert "peak VRAM 7,000 MiB over 168 h" in review
    assert "gpu-a100-1" in review and "(measured)" in review

    diff = ["fix", str(app), "--snapshot", str(snap), "--rules", "GPA-AL-001", "--diff"]
    proc = run_cli(*diff, "--set", "headroom=0.5")
    assert proc.returncode == 0, proc.stderr
    assert "+            nvidia.com/mig-1g.20gb: 1" in proc.stdout  # 10,500 MiB: too big for 1g.10gb


def test_without_telemetry_the_snapshot_still_names_the_gpu(tmp_path, run_cli, kubectl):
    app = tmp_path / "reranker.yaml"
    app.write_text(RERANKER)
    out = tmp_path / "overlay"
    snap = snapshot(tmp_path)
    proc = run_cli("fix", str(app), "--snapshot", str(snap), "--out", str(out), "--rules", "GPA-AL-001")
    assert proc.returncode == 0, proc.stderr
    review = (out / "REVIEW.md").read_text()
    assert "(needs confirmation)" in review and "A100-80GB" in review
