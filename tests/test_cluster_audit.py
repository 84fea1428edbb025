"""`gpuaudit audit` against a live cluster.

No Kubernetes API server can run on these machines, so tests/apiserver.py
stands in for one over real HTTP; the real `kubernetes` client talks to it
through a generated kubeconfig, from a real `gpuaudit` process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CLUSTERS = Path(__file__).parent / "clusters"


@pytest.fixture
def small_cluster(apiserver):
    return apiserver.load(json.loads((CLUSTERS / "small.json").read_text()))


def audit(run_cli, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("audit", *args, "--format", "json", "--request-timeout", "5", "--deadline", "60")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def by_rule(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in report["findings"]:
        out.setdefault(f["rule"], []).append(f)
    return out


def test_small_cluster_findings_in_diagnostic_order(run_cli, small_cluster, kubeconfig):
    code, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig))
    assert code == 1  # high-severity findings, no input errors
    found = by_rule(report)
    stuck = {(f["resource"]["name"], f["resource"]["node"]) for f in found["GPA-AL-101"]}
    assert stuck == {("whisper-asr", "gpu-a100-1"), ("tts-api", "gpu-l4-1")}
    assert [f["resource"]["name"] for f in found["GPA-AL-102"]] == [
        "finetune-llama",
        "notebook-alice",
    ]
    assert [f["resource"]["name"] for f in found["GPA-AL-103"]] == ["warm-h200"]
    assert "4 more needed" in found["GPA-AL-104"][0]["message"]
    # pretrain-7b's affinity admits one H100 node of six GPU nodes
    few = {f["resource"]["name"]: f["evidence"] for f in found["GPA-PL-101"]}
    assert few["pretrain-7b"]["placement.eligible_gpu_nodes"] == 1
    assert "rag-reranker" in few  # hostname pin: one node
    assert {f["resource"]["name"] for f in found["GPA-SH-102"]} == {
        "gpu-a100-0",
        "gpu-a100-1",
        "gpu-h100-0",
    }
    assert "GPA-SH-101" in found and "GPA-SH-001" in found
    # Succeeded and Failed pods have released their GPUs: never findings
    names = {f["evidence"].get("pod") for f in report["findings"]}
    assert not any(n and (n.startswith("eval-llm") or n.startswith("batch-embed")) for n in names)
    assert {s["rule"] for s in report["skipped"]} >= {"GPA-ME-001", "GPA-AL-201"}


def test_notebook_pending_names_the_taint_from_the_nodes(run_cli, small_cluster, kubeconfig):
    _, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig), "--rules", "GPA-AL-102")
    [notebook] = [f for f in report["findings"] if f["resource"]["name"] == "notebook-alice"]
    assert notebook["evidence"]["pending.reasons"] == [
        {"count": 3, "reason": "Insufficient nvidia.com/gpu", "cause": "allocation"},
        {"count": 4, "reason": "node(s) had untolerated taint(s)", "cause": "placement"},
    ]


def test_forbidden_events_give_a_partial_labelled_result(run_cli, small_cluster, kubeconfig):
    small_cluster.inject("/api/v1/events", status=403)
    code, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig))
    assert code == 2
    [error] = [e for e in report["errors"] if e["level"] == "error"]
    assert "could not read events" in error["message"] and "partial" in error["message"]
    assert "GPA-AL-101" in by_rule(report)  # pods and nodes were still audited


def test_500_on_second_page_of_pods_gives_a_partial_result(run_cli, small_cluster, kubeconfig, tmp_path):
    small_cluster.inject("/api/v1/pods", status=500, page=2)
    (tmp_path / ".gpuaudit.yaml").write_text("{}\n")
    proc = run_cli("audit", "--kubeconfig", str(kubeconfig), "--request-timeout", "5", "--page-size", "5")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "could not read pods" in proc.stdout and "partial" in proc.stdout
    assert "GPA-SH-102" in proc.stdout  # nodes were still judged


def test_snapshot_round_trip_gives_the_same_audit(run_cli, small_cluster, kubeconfig, tmp_path):
    snap = tmp_path / "cluster.json.gz"
    live_code, live, _ = audit(run_cli, "--kubeconfig", str(kubeconfig), "--save-snapshot", str(snap))
    requests = small_cluster.paths()
    replay_code, replay, _ = audit(run_cli, "--snapshot", str(snap))
    assert small_cluster.paths() == requests  # the replay made no API call
    assert replay_code == live_code
    assert replay["findings"] == live["findings"]
    assert replay["skipped"] == live["skipped"]


def test_alibaba_cluster_over_http(run_cli, apiserver, kubeconfig):
    from tests.clusters import alibaba

    if not alibaba.available():
        pytest.skip("../shared/data/alibaba-gpu-v2023 is not present")
    cluster = alibaba.build(node_sample=2)  # half the nodes: the real scheduler messages appear
    apiserver.load(cluster)
    code, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig), "--rules", "allocation,placement")
    assert code in (0, 1)

    # GPUs held and pending demand, recomputed independently from the recorded pods
    def gpus(pod):
        return sum(
            float(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"]
        )

    live = [p for p in cluster["pods"] if p["status"].get("phase") in ("Pending", "Running")]
    held = sum(gpus(p) for p in live if p["spec"].get("nodeName"))
    pending = [p for p in live if not p["spec"].get("nodeName")]
    totals = report["summary"]["cluster"]
    assert totals["gpus_allocated"] == held
    assert totals["gpus_total"] == sum(int(n["status"]["capacity"]["nvidia.com/gpu"]) for n in cluster["nodes"])
    assert totals["pending_gpu_pods"] == len([p for p in pending if gpus(p) > 0])
    found = by_rule(report)
    events = {e["involvedObject"]["name"] for e in cluster["events"] if e.get("reason") == "FailedScheduling"}
    with_event = {p["metadata"]["name"] for p in pending if p["metadata"]["name"] in events}
    # One finding per workload: the pods it covers are in its evidence.
    covered = [pod for f in found.get("GPA-AL-102", []) + found.get("GPA-PL-102", []) for pod in f["evidence"]["pods"]]
    assert len(covered) == len(set(covered))  # a pod waits for one cause
    assert with_event <= set(covered) and with_event  # every scheduler verdict is reported...
    assert set(covered) <= {p["metadata"]["name"] for p in pending}  # ...and only pending pods are
    keys = [(f["rule"], f["resource"]["kind"], f["resource"]["namespace"], f["resource"]["name"])
            for f in report["findings"]]  # fmt: skip
    assert len(keys) == len(set(keys))  # one finding per (rule, workload)
    assert sum(totals["pending_by_cause"].values()) == totals["pending_gpu_pods"]
    # Only bound pods hold GPUs: no other rule's finding covers a Pending pod.
    pending_names = {p["metadata"]["name"] for p in pending}
    for f in report["findings"]:
        if f["rule"] not in ("GPA-AL-102", "GPA-PL-101", "GPA-PL-102"):
            assert not pending_names & set(f["evidence"].get("pods") or []), f["message"]


def test_the_demo_cluster_gives_the_same_findings_twice_and_from_its_replay(run_cli, tmp_path):
    """Determinism on a recorded cluster: the order of findings, the pod that
    speaks for a workload and every rounding are the same run after run, and
    when the saved snapshot is replayed."""
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo-snapshot.json.gz"
    first = run_cli("audit", "--snapshot", str(demo), "--format", "json", "--save-snapshot", "replay.json.gz")
    second = run_cli("audit", "--snapshot", str(demo), "--format", "json")
    replay = run_cli("audit", "--snapshot", "replay.json.gz", "--format", "json")
    assert first.returncode == second.returncode == replay.returncode == 1, first.stderr
    assert first.stdout == second.stdout == replay.stdout
    findings = json.loads(first.stdout)["findings"]
    assert any(len(f["evidence"].get("pods") or []) > 1 for f in findings)  # merged workloads are in it
