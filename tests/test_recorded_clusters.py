"""The recorded clusters are coherent: what is bound fits its node, and every
FailedScheduling message is the one the scheduler model (tests/clusters/
scheduler.py) derives from the same nodes and pods."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import alibaba, genai
from tests.clusters.scheduler import Scheduler, fit_error_message, matches_node, pod_requests

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "clusters" / "small.json"


def _holding(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _check(cluster: dict[str, list[dict[str, Any]]]) -> Scheduler:
    """Bound pods fit and match their nodes; return the loaded scheduler."""
    scheduler = Scheduler(cluster["nodes"])
    for pod in cluster["pods"]:
        if _holding(pod):
            assert matches_node(pod, scheduler.by_name[pod["spec"]["nodeName"]].obj), pod["metadata"]["name"]
            scheduler.account(pod, pod["spec"]["nodeName"])
    for node in scheduler.nodes:
        for resource, used in node.used.items():
            assert used <= node.allocatable.get(resource, 0) + 1e-6, (node.name, resource)
    events = {
        (e["involvedObject"]["namespace"], e["involvedObject"]["name"]): e["message"]
        for e in cluster["events"]
        if e["reason"] == "FailedScheduling"
    }
    for pod in cluster["pods"]:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if key in events:
            assert not pod["spec"].get("nodeName")
            assert events[key] == scheduler.fit_error(pod), key
            condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
            assert condition["message"] == events[key]
    return scheduler


def test_small_cluster_is_coherent():
    cluster = json.loads(SMALL.read_text())
    _check(cluster)
    phases = Counter(p["status"]["phase"] for p in cluster["pods"])
    assert phases == {"Running": 15, "Pending": 3, "Succeeded": 1, "Failed": 1}
    messages = [e["message"] for e in cluster["events"] if e["reason"] == "FailedScheduling"]
    assert any("node(s) had untolerated taint(s)" in m for m in messages)
    assert all("no new claims to deallocate, preemption: 0/7 nodes are available" in m for m in messages)


def test_fit_error_sorts_the_histogram_as_strings():
    message = fit_error_message(
        {f"n{i}": ["Insufficient cpu"] for i in range(10)}
        | {"x": ["node(s) were unschedulable"], "y": ["node(s) were unschedulable"]},
        dra=False,
    )
    assert message == (
        "0/12 nodes are available: 10 Insufficient cpu, 2 node(s) were unschedulable. "
        "preemption: 0/12 nodes are available: 10 No preemption victims found for incoming "
        "pod, 2 Preemption is not helpful for scheduling."
    )


def test_pod_requests_default_to_limits_and_count_init_containers():
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        }
    }
    assert pod_requests(pod) == {"nvidia.com/gpu": 2.0, "memory": 2.0**30, "cpu": 2.0}


@pytest.fixture(scope="module")
def alibaba_cluster() -> dict[str, list[dict[str, Any]]]:
    if not alibaba.available():
        pytest.skip("alibaba-gpu-v2023 trace not present")
    return alibaba.build()


def test_alibaba_cluster_keeps_the_trace(alibaba_cluster):
    cluster = alibaba_cluster
    assert len(cluster["nodes"]) == 1213 and len(cluster["pods"]) == 8152
    assert sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in cluster["nodes"]) == 6212
    phases = Counter(p["status"]["phase"] for p in cluster["pods"])
    assert phases == {"Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
    fractional = [p for p in cluster["pods"] if alibaba.MILLI_ANNOTATION in p["metadata"].get("annotations", {})]
    assert len(fractional) == 3078
    assert all(pod_requests(p)["nvidia.com/gpu"] == 1 for p in fractional)
    owners = {
        (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in cluster["replicasets"] + cluster["jobs"]
    }
    for pod in cluster["pods"]:
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["kind"], pod["metadata"]["namespace"], ref["name"]) in owners
    node = cluster["nodes"][0]["metadata"]["labels"]
    assert node[alibaba.MODEL_LABEL] == "P100" and node["nvidia.com/gpu.product"] == ("Tesla-P100-PCIE-16GB")


def test_alibaba_cluster_is_coherent(alibaba_cluster):
    scheduler = _check(alibaba_cluster)
    # Under whole-GPU accounting the trace's Pending pods all fit (see the
    # module docstring), so they carry no invented FailedScheduling event.
    assert alibaba_cluster["events"] == []
    pending = [p for p in alibaba_cluster["pods"] if p["status"]["phase"] == "Pending"]
    assert all(scheduler.fit_error(p) is None for p in pending[:50])


def test_alibaba_oversubscribed_sample_pends_with_real_messages():
    if not alibaba.available():
        pytest.skip("alibaba-gpu-v2023 trace not present")
    cluster = alibaba.build(node_sample=2)
    _check(cluster)
    assert len(cluster["nodes"]) == 607
    assert len(cluster["events"]) > 500
    assert any("Insufficient nvidia.com/gpu" in e["message"] for e in cluster["events"])
    assert any("didn't match Pod's node affinity/selector" in e["message"] for e in cluster["events"])


def test_genai_cluster_names():
    if not genai.available():
        pytest.skip("GenTD26 trace not present")
    cluster = genai.build()
    _check(cluster)
    pods = cluster["pods"]
    assert [p["metadata"]["name"] for p in pods[:2]] == ["sd-serving-000", "sd-serving-001"]
    assert pods[142]["metadata"]["name"] == "sd-serving-142"
    assert pods[142]["spec"]["nodeName"] == "genai-node-17"
    assert len(cluster["nodes"]) == 18
    ips = [p["metadata"]["annotations"][genai.IP_ANNOTATION] for p in pods]
    assert ips == sorted(set(ips))
    assert {p["metadata"]["ownerReferences"][0]["name"] for p in pods} == {"sd-serving-7d9f"}


def test_generated_cluster_is_deterministic_and_coherent():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gen_cluster
    finally:
        sys.path.remove(str(ROOT / "bench"))
    first = gen_cluster.generate(60, 600, seed=7)
    assert first == gen_cluster.generate(60, 600, seed=7)
    assert first != gen_cluster.generate(60, 600, seed=8)
    assert len(first["nodes"]) == 60 and len(first["pods"]) == 600
    _check(first)
    phases = Counter(p["status"]["phase"] for p in first["pods"])
    assert phases["Pending"] == len(first["events"]) > 0
    assert phases["Running"] > phases["Pending"]
