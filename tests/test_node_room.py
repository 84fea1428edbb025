"""What the capacity review's what-if knows of a node's CPU and memory: the
scheduler's count of a pod's requests (kube/requests.py) and each node's
allocatable less what the pods bound to it request (model/cluster_builder.py)."""

from __future__ import annotations

import pytest

from gpuaudit.kube.requests import pod_requests
from gpuaudit.model.cluster_builder import build_cluster_state

GI = 2.0**30


def _container(cpu: str | None = None, memory: str | None = None, **extra) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "i", "resources": {"requests": requests}, **extra}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [_container("500m", "1Gi"), _container("1", "2Gi")]}, (1.5, 3 * GI)),
        # init containers run one at a time before the others: the largest counts if more
        ({"containers": [_container("1", "1Gi")], "initContainers": [_container("4", "512Mi")]}, (4.0, 1 * GI)),
        # a sidecar (restartable init container) runs beside the containers, and beside later init containers
        (
            {
                "containers": [_container("1", "1Gi")],
                "initContainers": [_container("1", "1Gi", restartPolicy="Always"), _container("3", "1Gi")],
            },
            (4.0, 2 * GI),
        ),
        # the RuntimeClass overhead is added
        ({"containers": [_container("1", "1Gi")], "overhead": {"cpu": "250m", "memory": "128Mi"}}, (1.25, 1.125 * GI)),
        # unset is nothing; a value that is not a quantity counts as nothing
        ({"containers": [_container(), _container("$CPU", "2Gi")]}, (0.0, 2 * GI)),
        ({}, (0.0, 0.0)),
    ],
)
def test_pod_requests_as_the_scheduler_counts_them(spec: dict, expected: tuple[float, float]) -> None:
    assert pod_requests(spec) == pytest.approx(expected)


def _pod(name: str, node: str | None, phase: str, cpu: str, gpus: int = 0) -> dict:
    requests = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    spec = {"containers": [{"name": "c", "image": "i", "resources": {"requests": requests, "limits": requests}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": spec, "status": {"phase": phase}}


def test_node_room_counts_every_bound_pod_that_has_not_finished() -> None:
    node = {
        "metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63500m", "memory": "500Gi", "nvidia.com/gpu": "8"},
        },
    }
    unstated = {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "x"}}}
    pods = [
        _pod("trainer", "gpu-0", "Running", "8", gpus=1),
        _pod("agent", "gpu-0", "Running", "500m"),  # no GPU: only counted, yet it takes CPU
        _pod("done", "gpu-0", "Succeeded", "16"),  # finished: its requests are free again
        _pod("waiting", None, "Pending", "4", gpus=1),  # not bound: on no node
        _pod("elsewhere", "gpu-1", "Running", "2"),
    ]
    state = build_cluster_state({"objects": {"nodes": [node, unstated], "pods": pods}})
    by_name = {n.name: n for n in state.nodes}
    assert by_name["gpu-0"].cpu_allocatable == 63.5 and by_name["gpu-0"].memory_allocatable == 500 * GI
    assert by_name["gpu-1"].cpu_allocatable is None and by_name["gpu-1"].memory_allocatable is None
    assert state.node_requests["gpu-0"] == pytest.approx((8.5, 2 * GI))
    assert state.node_requests["gpu-1"] == pytest.approx((2.0, 1 * GI))
    assert [p.name for p in state.pods] == ["trainer", "waiting"]  # the model keeps GPU pods only
