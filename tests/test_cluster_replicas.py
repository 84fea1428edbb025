"""Replicas share what is computed from their spec, and only replicas do.

A cluster audit models the pods of one workload once
(model/cluster_builder.PodWorkloads) and computes their template's facts once
(facts/cluster.py): the pods must still each get their own identity and state,
and two pods that differ in any value the model reads must never be merged.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from gpuaudit.facts import cluster as cluster_facts
from gpuaudit.model.cluster_builder import build_cluster_state
from gpuaudit.model.workload_builder import build_workloads

NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def _node(name: str, taint: bool = False) -> dict[str, Any]:
    spec = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]} if taint else {}
    return {
        "metadata": {"name": name, "labels": {**NODE_LABELS, "kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
    }


def _pod(name: str, node: str | None = "gpu-0", args: list[Any] | None = None, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "server",
        "image": "vllm/vllm-openai:v0.6.0",
        "args": ["--tensor-parallel-size=2"] if args is None else args,
        "resources": {"limits": {"nvidia.com/gpu": "2"}},
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"app": "server"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "server-1", "controller": True}
            ],
        },
        "spec": {"containers": [container], **({"nodeName": node} if node else {}), **spec},
        "status": {"phase": "Running" if node else "Pending"},
    }


def _state(pods: list[dict[str, Any]], nodes: list[dict[str, Any]] | None = None):
    return build_cluster_state({"objects": {"nodes": nodes or [_node("gpu-0"), _node("gpu-1")], "pods": pods}})


def _pod_facts(state) -> dict[str, dict[str, Any]]:
    return {s.facts["pod"]: s.facts for s in cluster_facts.subjects(state) if s.target == "pod"}


def test_replicas_share_their_model_and_keep_their_own_identity_and_state():
    state = _state([_pod("a", "gpu-0"), _pod("b", "gpu-1"), _pod("c", None)])
    a, b, c = state.pods
    assert a.workload.templates is b.workload.templates is c.workload.templates
    assert [p.name for p in state.pods] == ["a", "b", "c"]
    assert [p.workload.document.obj["metadata"]["uid"] for p in state.pods] == ["uid-a", "uid-b", "uid-c"]
    assert [p.node for p in state.pods] == ["gpu-0", "gpu-1", None]
    facts = _pod_facts(state)
    assert [facts[n]["node"] for n in "abc"] == ["gpu-0", "gpu-1", None]
    assert [facts[n]["pending"]["pending"] for n in "abc"] == [False, False, True]
    assert facts["a"]["parallelism"]["tensor"] == 2 and facts["a"]["gpu"]["count"] == 2


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(_pod("b", args=["--tensor-parallel-size=4"]), id="an argument"),
        pytest.param(_pod("b", nodeSelector={"kubernetes.io/hostname": "gpu-1"}), id="a node selector"),
        pytest.param(_pod("b", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]), id="a toleration"),
        pytest.param(
            {**_pod("b"), "metadata": {**_pod("b")["metadata"], "annotations": {"gpu-fraction": "0.5"}}},
            id="an annotation",
        ),
        pytest.param(
            {**_pod("b"), "metadata": {**_pod("b")["metadata"], "namespace": "other"}},
            id="a namespace",
        ),
    ],
)
def test_pods_that_differ_in_any_value_are_never_merged(other):
    state = _state([_pod("a"), other])
    a, b = state.pods
    assert a.workload.templates is not b.workload.templates
    # each pod's facts are those of the pod modelled alone
    for pod, facts in zip(state.pods, _pod_facts(state).values(), strict=True):
        (alone,), _ = build_workloads([pod.workload.document])
        unshared = msgspec.structs.replace(state, pods=(msgspec.structs.replace(pod, workload=alone),))
        assert facts == _pod_facts(unshared)[pod.name]


def _with_token_volume(pod: dict[str, Any], suffix: str) -> dict[str, Any]:
    """``pod`` as the API server stores it: a projected token volume of its own name, mounted in each container."""
    pod = copy.deepcopy(pod)
    name = f"kube-api-access-{suffix}"
    sources = [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]
    pod["spec"]["volumes"] = [{"name": name, "projected": {"sources": sources}}]
    for c in pod["spec"]["containers"]:
        c["volumeMounts"] = [{"name": name, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    return pod


def test_replicas_with_their_own_token_volume_still_share_their_model():
    """Every real pod has a token volume named for it alone: replicas differ
    only in that name, and still share; their facts are those of each pod
    modelled alone. A volume of another kind named alike is not masked."""
    state = _state([_with_token_volume(_pod("a"), "x7k2p"), _with_token_volume(_pod("b", "gpu-1"), "q9m4z")])
    a, b = state.pods
    assert a.workload.templates is b.workload.templates
    for pod, facts in zip(state.pods, _pod_facts(state).values(), strict=True):
        (alone,), _ = build_workloads([pod.workload.document])
        unshared = msgspec.structs.replace(state, pods=(msgspec.structs.replace(pod, workload=alone),))
        assert facts == _pod_facts(unshared)[pod.name]
    claims = [_with_token_volume(_pod(n), s) for n, s in (("a", "x7k2p"), ("b", "q9m4z"))]
    for pod in claims:
        volume = pod["spec"]["volumes"][0]
        volume["persistentVolumeClaim"] = {"claimName": volume["name"]}
        del volume["projected"]
    a, b = _state(claims).pods
    assert a.workload.templates is not b.workload.templates


def test_a_pod_whose_content_cannot_be_compared_is_modelled_alone():
    odd = [_pod("a"), _pod("b")]
    for pod in odd:
        pod["spec"]["extension"] = object()  # no JSON value: pods built by hand, never read from a cluster
    a, b = _state(odd).pods
    assert a.workload.templates is not b.workload.templates
    assert (a.name, b.name) == ("a", "b") and a.workload.requests_gpus and b.workload.requests_gpus


def test_shared_template_facts_equal_the_facts_of_each_pod_modelled_alone():
    nodes = [_node("gpu-0"), _node("gpu-1", taint=True), _node("gpu-2")]  # gpu-2: gpu-0's shape
    pods = [
        _pod("a", "gpu-0"),
        _pod("b", None),
        _pod("c", None, nodeSelector={"kubernetes.io/hostname": "gpu-1"}),
        _pod("e", None, nodeSelector={"kubernetes.io/hostname": "gpu-2"}),
    ]
    pods.append(copy.deepcopy(pods[2]) | {"metadata": {**pods[2]["metadata"], "name": "d", "uid": "uid-d"}})
    state = _state(pods, nodes)
    shared = _pod_facts(state)
    for pod in state.pods:
        (alone,), _ = build_workloads([pod.workload.document])
        unshared = msgspec.structs.replace(state, pods=(msgspec.structs.replace(pod, workload=alone),))
        assert shared[pod.name] == _pod_facts(unshared)[pod.name]
    # a hostname selector is judged on the node it names: tainted, so not eligible, and that taint blocks
    assert shared["c"]["placement"]["eligible_gpu_nodes"] == 0
    assert shared["c"]["pending"]["untolerated_taints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert shared["d"]["pending"]["untolerated_taints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert shared["e"]["placement"]["eligible_gpu_nodes"] == 1
    assert shared["e"]["pending"]["untolerated_taints"] == []
    assert shared["b"]["placement"]["eligible_gpu_nodes"] == 2
