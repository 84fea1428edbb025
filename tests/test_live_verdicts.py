"""Verdicts on live cluster state an operator accepts: only bound pods hold
GPUs, a pending cause agrees with eligibility or says where it does not, one
finding per workload, partial reads are unknown (never zero), and the same
cluster gives the same findings every time.

The snapshots are built here, object by object, as the collector records them
(docs/snapshot.md), and audited by the real `gpuaudit` process."""

from __future__ import annotations

import json
from typing import Any

import pytest

COLLECTED = "2026-11-30T12:00:00Z"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
INSUFFICIENT = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."


def node(name: str, product: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.capable": "true",
            },
        },
        "spec": {"taints": taints or []},
        "status": {"capacity": {"cpu": "96", **gpus}, "allocatable": {"cpu": "96", **gpus}},
    }


def pod(
    name: str, owner: tuple[str, str, str], node_name: str | None, *, gpus: int = 1, selector: dict | None = None
) -> dict[str, Any]:
    api_version, kind, owner_name = owner
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/serve:1",
                "args": ["--model=Qwen/Qwen2.5-0.5B-Instruct"],
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"memory": "16Gi", "nvidia.com/gpu": str(gpus)},
                },
            }
        ]
    }
    if selector:
        spec["nodeSelector"] = selector
    if node_name:
        spec["nodeName"] = node_name
    running = node_name is not None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-29T12:00:00Z",
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True}],
        },
        "spec": spec,
        "status": {
            "phase": "Running" if running else "Pending",
            **({"startTime": "2026-11-29T12:00:00Z"} if running else {}),
            "conditions": [{"type": "Ready", "status": "True" if running else "False"}],
        },
    }


def failed_scheduling(pod_name: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_name}.1", "namespace": "ml", "creationTimestamp": COLLECTED},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod_name, "uid": f"uid-{pod_name}"},
        "reason": "FailedScheduling",
        "message": message,
        "lastTimestamp": COLLECTED,
    }


def snapshot(objects: dict[str, list], errors: list | None = None) -> dict[str, Any]:
    keys = ("nodes", "pods", "events", "replicasets", "jobs", "configmaps", "clusterpolicies")
    keys += ("resourceclaims", "resourceslices", "kueueworkloads", "workloads")
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": COLLECTED,
        "cluster": {"server": "https://cluster.example", "context": "test"},
        "objects": {key: objects.get(key, []) for key in keys},
        "absent": [],
        "errors": errors or [],
        "telemetry": None,
    }


RS = ("apps/v1", "ReplicaSet", "chat-5d8f")
JOB = ("batch/v1", "Job", "train-h100")


@pytest.fixture
def cluster() -> dict[str, Any]:
    """A chat Deployment with three running and two pending pods on two A100
    nodes, and a Job whose selector names the H100 model, whose only node is
    tainted: the scheduler says "Insufficient", but no node could ever take it."""
    chat = [pod(f"chat-5d8f-{i}", RS, f"a100-{i % 2}") for i in range(3)]
    chat += [pod(f"chat-5d8f-{i}", RS, None) for i in (3, 4)]
    train = pod("train-h100-0", JOB, None, gpus=8, selector={"nvidia.com/gpu.product": H100})
    return snapshot(
        {
            "nodes": [
                node("a100-0", A100),
                node("a100-1", A100),
                node("h100-0", H100, [{"key": "dedicated", "value": "research", "effect": "NoSchedule"}]),
            ],
            "pods": [*chat, train],
            "events": [failed_scheduling(p, INSUFFICIENT) for p in ("chat-5d8f-3", "chat-5d8f-4", "train-h100-0")],
            "replicasets": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": "chat-5d8f",
                        "namespace": "ml",
                        "ownerReferences": [
                            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat", "controller": True}
                        ],
                    },
                }
            ],
            "jobs": [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-h100", "namespace": "ml"}}],
        }
    )


def audit(run_cli, tmp_path, data: dict[str, Any], *args: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data))
    proc = run_cli("audit", "--snapshot", str(path), "--format", "json", *args)
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def findings(report: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["rule"] == rule]


def test_only_bound_pods_hold_gpus_and_a_workload_is_one_finding(run_cli, tmp_path, cluster):
    _, report = audit(run_cli, tmp_path, cluster)
    [holds] = findings(report, "GPA-AL-001")
    assert holds["resource"]["name"] == "chat"
    assert holds["evidence"]["pods"] == ["chat-5d8f-0", "chat-5d8f-1", "chat-5d8f-2"]  # the running ones only
    assert "each of 3 pods" in holds["message"]
    [waits] = findings(report, "GPA-AL-102")
    assert waits["evidence"]["pods"] == ["chat-5d8f-3", "chat-5d8f-4"]
    assert "chat-5d8f-3 (one of 2 pods)" in waits["message"]
    for f in report["findings"]:  # no finding says a Pending pod holds or uses GPUs
        pending = {"chat-5d8f-3", "chat-5d8f-4", "train-h100-0"}
        if f["rule"] not in ("GPA-AL-102", "GPA-PL-101", "GPA-PL-102"):
            assert not pending & set(f["evidence"].get("pods") or []), f
    keys = [(f["rule"], f["resource"]["kind"], f["resource"]["name"]) for f in report["findings"]]
    assert len(keys) == len(set(keys))  # one finding per (rule, workload)


def test_no_eligible_node_makes_the_cause_placement_and_says_where_the_scheduler_disagrees(run_cli, tmp_path, cluster):
    _, report = audit(run_cli, tmp_path, cluster)
    assert not [f for f in findings(report, "GPA-AL-102") if f["resource"]["name"] == "train-h100"]
    [placement] = [f for f in findings(report, "GPA-PL-102") if f["resource"]["name"] == "train-h100"]
    assert placement["evidence"]["placement.eligible_gpu_nodes"] == 0
    assert placement["evidence"]["pending.scheduler_cause"] == "allocation"
    assert "freeing GPUs would not place it" in placement["evidence"]["pending.disagreement"]
    assert "freeing GPUs would not place it" in placement["message"]
    assert report["summary"]["cluster"]["pending_by_cause"] == {"allocation": 2, "placement": 1}


def test_the_same_cluster_gives_the_same_findings_twice_and_from_its_replay(run_cli, tmp_path, cluster):
    first_code, first = audit(run_cli, tmp_path, cluster, "--save-snapshot", str(tmp_path / "saved.json"))
    second_code, second = audit(run_cli, tmp_path, cluster)
    proc = run_cli("audit", "--snapshot", str(tmp_path / "saved.json"), "--format", "json")
    replay = json.loads(proc.stdout)
    assert first_code == second_code == proc.returncode
    assert first["findings"] == second["findings"] == replay["findings"]
    assert first["summary"] == second["summary"] == replay["summary"]


def test_unreadable_pods_make_the_totals_unknown_not_zero(run_cli, tmp_path, cluster):
    cluster["objects"]["pods"] = []
    cluster["objects"]["events"] = []
    forbidden = {"resource": "pods", "endpoint": "https://cluster.example/api/v1/pods", "status": 403,
                 "message": "pods is forbidden"}  # fmt: skip
    cluster["errors"] = [forbidden]
    code, report = audit(run_cli, tmp_path, cluster)
    assert code == 2
    summary = report["summary"]["cluster"]
    assert summary["partial"] == ["pods"]
    assert summary["gpus_allocated"] is None and summary["pending_gpu_pods"] is None
    assert summary["pending_by_cause"] is None
    assert summary["gpus_total"] == 24 and summary["gpu_nodes"] == 3  # the nodes were read
    mig_unused = findings(report, "GPA-SH-102")  # MIG-capable nodes run whole: no invented "(0 allocated)"
    assert len(mig_unused) == 3
    for f in mig_unused:
        assert "allocated" not in f["message"] and f["evidence"]["allocated"] is None
    text = run_cli("audit", "--snapshot", str(tmp_path / "snapshot.json")).stdout
    assert "unknown of 24 GPUs allocated" in text and "Partial: could not read pods." in text
