"""Pending causes parsed from the real kube-scheduler's messages.

Five nodes with GPU capacity (written through the status subresource, as a
kubelet would; no kubelet runs), then pods that cannot be placed for
different reasons and mixes of them. The real scheduler writes its
``PodScheduled=False`` condition and ``FailedScheduling`` events; gpuaudit's
parser (gpuaudit/facts/scheduling.py) must classify each real message, and the
audit must read them from a real API server. Pods that fit are bound by the
scheduler and then hold their GPUs in gpuaudit's model.

Nodes (zone label ``topology.kubernetes.io/zone``):

| node | GPUs | product | zone | taint / state |
|---|---|---|---|---|
| cpu-0 | 0 | - | - | - |
| gpu-a | 8 (4 taken by a bound pod) | A100 | a | - |
| gpu-b | 8 | H100 | b | nvidia.com/gpu=present:NoSchedule |
| gpu-c | 4 | L4 | c | - |
| gpu-d | 8 | A100 | c | cordoned (spec.unschedulable) |
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.facts.scheduling import parse_failed_scheduling
from tests.controlplane.conftest import take_snapshot

NAMESPACE = "sched"
ZONE = "topology.kubernetes.io/zone"
PRODUCT = "nvidia.com/gpu.product"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
NODES = (
    # name, gpus, product, zone, taints, unschedulable
    ("cpu-0", 0, None, None, [], False),
    ("gpu-a", 8, "NVIDIA-A100-SXM4-80GB", "a", [], False),
    ("gpu-b", 8, "NVIDIA-H100-80GB-HBM3", "b", [TAINT], False),
    ("gpu-c", 4, "NVIDIA-L4", "c", [], False),
    ("gpu-d", 8, "NVIDIA-A100-SXM4-80GB", "c", [], True),
)
WHERE = Path(__file__).resolve().parents[2] / "out" / "controlplane"  # the messages, for the record


def node(name: str, gpus: int, product: str | None, zone: str | None, taints: list, cordoned: bool) -> dict:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if zone:
        labels[ZONE] = zone
    if product:
        labels.update({PRODUCT: product, "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.present": "true"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": cordoned},
    }


def node_status(gpus: int) -> dict:
    capacity = {"cpu": "96", "memory": "1000Gi", "pods": "110", "ephemeral-storage": "1000Gi"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "faked by the test"}],
    }


def pod(name: str, gpus: int, *, node_name: str | None = None, labels: dict | None = None, **spec: Any) -> dict:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    body = {"containers": [{"name": "main", "image": "cuda:12", "resources": resources}], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {"app": name}},
        "spec": body,
    }


def affinity(key: str, values: list[str]) -> dict:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _cpu_hungry() -> dict:
    """A GPU pod whose CPU request no node can meet."""
    obj = pod("insufficient-cpu", 1, tolerations=TOLERATE, nodeSelector={ZONE: "b"})
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200"
    return obj


SPREAD = {"app": "spread"}
SPREAD_CONSTRAINT = [
    {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": SPREAD},
        # Count every zone, not only those the pod's selector admits.
        "nodeAffinityPolicy": "Ignore",
    }
]

# name -> (pod, the reasons gpuaudit must read as {(count, reason): cause}, the pod's cause)
UNSCHEDULABLE: dict[str, tuple[dict, dict[tuple[int, str], str], str]] = {
    "too-big": (
        pod("too-big", 16, tolerations=TOLERATE),
        {(4, "Insufficient nvidia.com/gpu"): "allocation", (1, "node(s) were unschedulable"): "placement"},
        "allocation",
    ),
    "untolerated-taint": (
        pod("untolerated-taint", 1, nodeSelector={PRODUCT: "NVIDIA-H100-80GB-HBM3"}),
        {
            (1, "node(s) had untolerated taint(s)"): "placement",
            (3, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "placement",
    ),
    "node-affinity": (
        pod("node-affinity", 1, tolerations=TOLERATE, affinity=affinity(PRODUCT, ["NVIDIA-B200"])),
        {
            (4, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "placement",
    ),
    "node-selector": (
        pod("node-selector", 1, tolerations=TOLERATE, nodeSelector={"pool": "reserved"}),
        {
            (4, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "placement",
    ),
    "topology-spread": (
        pod(
            "topology-spread",
            1,
            labels=SPREAD,
            nodeSelector={ZONE: "a"},
            topologySpreadConstraints=SPREAD_CONSTRAINT,
        ),
        {
            (1, "node(s) didn't match pod topology spread constraints"): "placement",
            # The scheduler runs TaintToleration before NodeAffinity: the tainted
            # node is rejected for its taint, not for the pod's selector.
            (1, "node(s) had untolerated taint(s)"): "placement",
            (2, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "placement",
    ),
    "insufficient-and-taint": (
        pod("insufficient-and-taint", 6),
        {
            (3, "Insufficient nvidia.com/gpu"): "allocation",
            (1, "node(s) had untolerated taint(s)"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "allocation",
    ),
    "insufficient-and-selector": (
        pod("insufficient-and-selector", 8, tolerations=TOLERATE, nodeSelector={ZONE: "a"}),
        {
            (1, "Insufficient nvidia.com/gpu"): "allocation",
            (3, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        "allocation",
    ),
    "insufficient-cpu": (
        _cpu_hungry(),
        {
            (1, "Insufficient cpu"): "resources",
            (3, "node(s) didn't match Pod's node affinity/selector"): "placement",
            (1, "node(s) were unschedulable"): "placement",
        },
        # The node that reports the shortage is the one the pod's selector
        # admits (fit is checked after taints and affinity): the pod waits for
        # CPU there, not for a placement it cannot get.
        "resources",
    ),
}

# DRA: one GPU published by a (pretend) NVIDIA DRA driver on gpu-a, and a
# claim for two of them, which no node can satisfy.
DRA_DRIVER = "gpu.nvidia.com"
DRA_OBJECTS = (
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]},
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"gpu-a-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": "gpu-a",
            "pool": {"name": "gpu-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA-A100-SXM4-80GB"}}}],
        },
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "two-gpus", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": 2}}]}},
    },
)


def _claiming() -> dict:
    """A pod whose only GPU request is the DRA claim for two devices."""
    obj = pod("dra-claim", 0, tolerations=TOLERATE, resourceClaims=[{"name": "gpus", "resourceClaimName": "two-gpus"}])
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return obj


UNSCHEDULABLE["dra-claim"] = (
    _claiming(),
    {
        (4, "cannot allocate all claims"): "dra",
        (1, "node(s) were unschedulable"): "placement",
    },
    "dra",
)

# Pods the scheduler can place: name -> the node it must choose.
SCHEDULABLE = {
    "fits-h100": (pod("fits-h100", 2, tolerations=TOLERATE, nodeSelector={PRODUCT: "NVIDIA-H100-80GB-HBM3"}), "gpu-b"),
    "fits-l4": (pod("fits-l4", 4, nodeSelector={PRODUCT: "NVIDIA-L4"}), "gpu-c"),
}


def _condition(obj: dict) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


@pytest.fixture(scope="module")
def scheduled(control_plane):
    """Nodes, bound pods, then every pod above, once the scheduler has judged them."""
    kube = control_plane.admin
    kube.ensure_namespace(NAMESPACE)
    for spec in NODES:
        kube.add_node(node(*spec), node_status(spec[1]))
    # Already running (bound, as a kubelet would report them): 4 GPUs on gpu-a,
    # and one "spread" pod in zone a so that another there would skew the spread.
    for bound in (pod("running-a", 4, node_name="gpu-a"), pod("spread-0", 0, node_name="gpu-a", labels=SPREAD)):
        kube.write_status(kube.create(bound), {"phase": "Running"})
    # Let the scheduler's informers see the nodes and bound pods before it judges.
    control_plane.admin.wait("the scheduler's node cache", lambda: _scheduler_synced(control_plane))
    for obj in DRA_OBJECTS:
        kube.create(obj)
    for obj, _, _ in UNSCHEDULABLE.values():
        kube.create(obj)
    for obj, _ in SCHEDULABLE.values():
        kube.create(obj)

    def judged() -> dict[str, dict] | None:
        pods = {p["metadata"]["name"]: p for p in kube.list("v1", "Pod", NAMESPACE)}
        if all(_condition(pods[name]) for name in UNSCHEDULABLE) and all(
            pods[name]["spec"].get("nodeName") for name in SCHEDULABLE
        ):
            return pods
        control_plane.check_alive()
        return None

    pods = kube.wait("the scheduler's verdicts", judged, timeout=90)

    def failed_scheduling() -> dict[str, list[str]] | None:
        events: dict[str, list[str]] = {}
        for event in kube.list("v1", "Event", NAMESPACE, fieldSelector="reason=FailedScheduling"):
            events.setdefault(event["involvedObject"]["name"], []).append(event["message"])
        return events if set(events) >= set(UNSCHEDULABLE) else None

    events = kube.wait("FailedScheduling events", failed_scheduling, timeout=60)
    WHERE.mkdir(parents=True, exist_ok=True)
    (WHERE / "failed-scheduling.json").write_text(
        json.dumps({name: _condition(pods[name])["message"] for name in UNSCHEDULABLE}, indent=2) + "\n"
    )
    return control_plane, pods, events


def _scheduler_synced(plane) -> bool:
    """A throwaway pod bound by the scheduler: its caches are warm."""
    kube = plane.admin
    probe = pod("warm-up", 0, tolerations=TOLERATE)
    try:
        got = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/warm-up")
    except Exception:
        got = kube.create(probe)
    plane.check_alive()
    if got["spec"].get("nodeName"):
        kube.delete(got)
        return True
    return False


@pytest.mark.parametrize("name", sorted(UNSCHEDULABLE))
def test_real_failed_scheduling_message_is_classified(scheduled, name):
    _, pods, events = scheduled
    _, expected, cause = UNSCHEDULABLE[name]
    condition = _condition(pods[name])
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    message = condition["message"]
    assert message in events[name]  # the event says what the condition says
    parsed = parse_failed_scheduling(message)
    assert parsed["nodes"] == len(NODES), message
    got = {(r["count"], r["reason"]): r["cause"] for r in parsed["reasons"]}
    assert got == expected, message
    assert parsed["cause"] == cause, message


def test_bound_pods_hold_their_gpus_in_the_audit(scheduled, tmp_path):
    plane, pods, _ = scheduled
    for name, (_, node_name) in SCHEDULABLE.items():
        assert pods[name]["spec"]["nodeName"] == node_name
    snap = tmp_path / "snapshot.json"
    config = plane.kubeconfig(plane.admin.token, "admin")
    proc = take_snapshot(config, snap, tmp_path)
    assert proc.returncode == 0, proc.stderr

    from gpuaudit.model.cluster_builder import build_cluster_state

    snapshot = json.loads(snap.read_text())
    state = build_cluster_state(snapshot)
    by_name = {p.name: p for p in state.pods}
    for name, (_, node_name) in SCHEDULABLE.items():
        assert by_name[name].node == node_name and by_name[name].holds_gpus, name
    for name in UNSCHEDULABLE:
        if name in by_name:
            assert not by_name[name].holds_gpus and by_name[name].failed_scheduling, name
    # Every real message reached the model through the collector.
    assert {n for n, p in by_name.items() if p.failed_scheduling} >= {
        n
        for n in UNSCHEDULABLE
        if UNSCHEDULABLE[n][0]["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu")
    }
    # The verdicts on the real messages: the pod short of CPU where its
    # selector admits it gets no placement advice; the DRA pod waits for devices.
    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuaudit",
            "audit",
            "--snapshot",
            str(snap),
            "--format",
            "json",
            "--rules",
            "GPA-AL-102,GPA-AL-105,GPA-PL-102",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    verdicts = {(f["rule"], f["evidence"].get("pod")) for f in json.loads(audit.stdout)["findings"]}
    assert ("GPA-AL-105", "insufficient-cpu") in verdicts, audit.stdout[-2000:]
    assert ("GPA-PL-102", "insufficient-cpu") not in verdicts
    assert ("GPA-AL-102", "dra-claim") in verdicts
