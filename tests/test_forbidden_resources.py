"""A resource the audit's identity may not list: required or optional.

Core resources (nodes, pods, events, ...) stay required: forbidden, the audit
is partial and exits 2, naming the resource. Optional ones -- the ML
operators' custom resources that own GPU pods (deploy/components/ml-operators
grants them), the GPU Operator's ClusterPolicy, Kueue's Workloads -- are a
warning naming the resource and what grants it; the audit is not partial and
exits by its findings. The pods under a forbidden owner are still judged.
Against the stand-in API server (tests/apiserver.py), whose 403 body is the
real API server's wording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CLUSTERS = Path(__file__).parent / "clusters"
PYTORCHJOBS = "/apis/kubeflow.org/v1/pytorchjobs"
OPTIONAL = {
    PYTORCHJOBS: "pytorchjobs.kubeflow.org",
    "/apis/nvidia.com/v1/clusterpolicies": "clusterpolicies.nvidia.com",
    "/apis/kueue.x-k8s.io/v1beta2/workloads": "workloads.kueue.x-k8s.io",
}


@pytest.fixture
def cluster(apiserver):
    """The small cluster, pretrain-7b's pod owned by a PyTorchJob."""
    small = json.loads((CLUSTERS / "small.json").read_text())
    pod = next(p for p in small["pods"] if p["metadata"]["name"].startswith("pretrain-7b"))
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "pretrain-7b",
            "uid": "uid-pretrain-7b",
            "controller": True,
        }
    ]
    small["pytorchjobs"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "pretrain-7b", "namespace": pod["metadata"]["namespace"]},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": pod["spec"]}}}},
        }
    ]
    return apiserver.load(small)


def audit(run_cli, kubeconfig: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli(
        "audit",
        "--kubeconfig",
        str(kubeconfig),
        "--format",
        "json",
        "--request-timeout",
        "5",
        "--deadline",
        "60",
        *args,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _subjects(report: dict[str, Any], kinds: set[str] | None = None) -> list[tuple[str, str]]:
    return sorted(
        (f["rule"], f["resource"]["name"])
        for f in report["findings"]
        if kinds is None or f["resource"]["kind"] in kinds
    )


def test_forbidden_optional_resources_are_warnings_and_the_exit_code_follows_the_findings(
    run_cli, cluster, kubeconfig, tmp_path
):
    code, whole, _ = audit(run_cli, kubeconfig)
    assert code == 1 and [e for e in whole["errors"] if e["level"] == "error"] == []

    for path in OPTIONAL:
        cluster.inject(path, status=403)
    snap = tmp_path / "forbidden.json"
    code, report, _ = audit(run_cli, kubeconfig, "--save-snapshot", str(snap))

    assert code == 1  # high findings, as with every grant: not 2
    assert [e for e in report["errors"] if e["level"] == "error"] == []
    assert not report["summary"]["cluster"].get("partial")
    warnings = {e["file"]: e["message"] for e in report["errors"] if e["level"] == "warning"}
    for path, name in OPTIONAL.items():
        assert f"could not read {name}" in warnings[path], warnings
        assert "forbidden" in warnings[path]
    assert "deploy/components/ml-operators" in warnings[PYTORCHJOBS]
    assert "gpuaudit-reader" in warnings["/apis/nvidia.com/v1/clusterpolicies"]
    # The pod under the unreadable PyTorchJob is still judged, from the pod itself;
    # the warning says what is unknown about its owners.
    assert "owner chain stops at the PyTorchJob" in warnings[PYTORCHJOBS]
    # (Without the ClusterPolicy and Kueue the cluster-wide sharing and queue
    # findings differ; every finding on a pod or workload is the same.)
    workloads = {"Pod", "Deployment", "StatefulSet", "Job", "CronJob", "PyTorchJob"}
    assert _subjects(report, workloads) == _subjects(whole, workloads)
    assert "pretrain-7b" in {name for _, name in _subjects(report, workloads)}

    # --fail-on above the findings: 0, warnings and all
    code, _, _ = audit(run_cli, kubeconfig, "--fail-on", "critical")
    assert code == 0

    # the snapshot keeps them apart from errors, and its replay says the same
    snapshot = json.loads(snap.read_text())
    assert snapshot["errors"] == []
    assert {f["resource"] for f in snapshot["forbidden"]} == set(OPTIONAL.values())
    replay = run_cli("audit", "--snapshot", str(snap), "--format", "json")
    assert replay.returncode == 1, replay.stderr
    replayed = json.loads(replay.stdout)
    assert {e["message"] for e in replayed["errors"]} == {e["message"] for e in report["errors"]}


def test_the_text_report_shows_the_warning(run_cli, cluster, kubeconfig):
    cluster.inject(PYTORCHJOBS, status=403)
    proc = run_cli("audit", "--kubeconfig", str(kubeconfig), "--request-timeout", "5")
    assert proc.returncode == 1, proc.stderr
    assert "pytorchjobs.kubeflow.org" in proc.stdout + proc.stderr
    assert "partial" not in proc.stdout.lower().replace("partial list", "")


def test_snapshot_command_exits_0_with_a_warning_for_a_forbidden_optional_resource(
    run_cli, cluster, kubeconfig, tmp_path
):
    cluster.inject(PYTORCHJOBS, status=403)
    out = tmp_path / "s.json"
    proc = run_cli("snapshot", "--kubeconfig", str(kubeconfig), "--output-file", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "pytorchjobs.kubeflow.org" in proc.stderr and "ml-operators" in proc.stderr


def test_a_forbidden_pod_list_is_still_a_partial_audit_exit_2(run_cli, cluster, kubeconfig):
    cluster.inject("/api/v1/pods", status=403)
    cluster.inject(PYTORCHJOBS, status=403)
    code, report, _ = audit(run_cli, kubeconfig)
    assert code == 2
    [error] = [e for e in report["errors"] if e["level"] == "error"]
    assert "could not read pods" in error["message"] and "partial" in error["message"]
    assert "pods" in report["summary"]["cluster"]["partial"]


@pytest.mark.parametrize("path", ["/api/v1/events", "/apis/apps/v1/replicasets", "/api/v1/nodes"])
def test_forbidden_core_resources_stay_partial(run_cli, cluster, kubeconfig, path):
    cluster.inject(path, status=403)
    code, report, _ = audit(run_cli, kubeconfig)
    assert code == 2
    assert any(e["level"] == "error" and "partial" in e["message"] for e in report["errors"])
