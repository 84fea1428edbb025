"""ML operators' objects added to the recorded small cluster for the live tests.

One GPU node more (``gpu-h100-1``, a copy of ``gpu-h100-0``) and, in the
namespace ``ml``, one workload per operator whose pods gpuaudit must trace to
their custom-resource owner: a KubeRay RayCluster, a Kubeflow PyTorchJob, a
KServe InferenceService (through its Deployment and ReplicaSet), a
LeaderWorkerSet (through its StatefulSet) and a JobSet (through its Job).
Each owns one bound pod asking for one GPU. Plus a device-plugin ConfigMap
found by its name only (no label), which the collector must GET by name.
"""

from __future__ import annotations

import copy
from typing import Any

NAMESPACE = "ml"
NODE = "gpu-h100-1"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

# (apiVersion, kind, name) of each custom resource that owns GPU pods here.
OWNERS = (
    ("ray.io/v1", "RayCluster", "ray-llm"),
    ("kubeflow.org/v1", "PyTorchJob", "bert-ft"),
    ("serving.kserve.io/v1beta1", "InferenceService", "sdxl"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws-70b"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", "js-train"),
)
# The resources (group, plural) a site grants for these, as deploy/README.md says.
OPERATOR_RULES = [
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["list"]},
    {"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"], "verbs": ["list"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["list"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]},
]
DEVICE_PLUGIN_CONFIGMAP = ("gpu-operator", "nvidia-device-plugin-configs")


def _uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _ref(api_version: str, kind: str, name: str, n: int) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": _uid(n),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_spec(image: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "main",
                "image": image,
                "resources": {
                    "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"memory": "32Gi", "nvidia.com/gpu": str(gpus)},
                },
            }
        ],
        "tolerations": [TOLERATION],
        "restartPolicy": "Always",
    }


def _template(image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"labels": labels or {}}, "spec": _pod_spec(image)}


def _meta(name: str, owner: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels or {"app": name}}
    if owner:
        meta["ownerReferences"] = [owner]
    return meta


def _pod(name: str, owner: dict[str, Any], image: str, labels: dict[str, str]) -> dict[str, Any]:
    spec = _pod_spec(image)
    spec["nodeName"] = NODE
    if owner["kind"] in ("Job",):
        spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, owner, labels),
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def build(small: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Objects to add to ``small.json`` (recorded-cluster keys, plus "customresources")."""
    node = copy.deepcopy(next(n for n in small["nodes"] if n["metadata"]["name"] == "gpu-h100-0"))
    node["metadata"]["name"] = NODE
    node["metadata"]["labels"]["kubernetes.io/hostname"] = NODE
    node["metadata"].pop("uid", None)

    ray, pytorch, isvc, lws, jobset = (
        _ref(api_version, kind, name, i) for i, (api_version, kind, name) in enumerate(OWNERS, start=1)
    )
    customresources = [
        {
            "apiVersion": ray["apiVersion"],
            "kind": "RayCluster",
            "metadata": {**_meta("ray-llm"), "uid": ray["uid"]},
            "spec": {"headGroupSpec": {"template": _template("rayproject/ray-ml:2.40.0-gpu")}, "workerGroupSpecs": []},
        },
        {
            "apiVersion": pytorch["apiVersion"],
            "kind": "PyTorchJob",
            "metadata": _meta("bert-ft"),
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": _template("pytorch/pytorch:2.5")}}},
        },
        {
            "apiVersion": isvc["apiVersion"],
            "kind": "InferenceService",
            "metadata": _meta("sdxl"),
            "spec": {"predictor": {"minReplicas": 1, **_pod_spec("kserve/huggingfaceserver:v0.14")}},
        },
        {
            "apiVersion": lws["apiVersion"],
            "kind": "LeaderWorkerSet",
            "metadata": _meta("lws-70b"),
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 1,
                    "leaderTemplate": _template("vllm/vllm-openai:v0.11.0"),
                    "workerTemplate": _template("vllm/vllm-openai:v0.11.0"),
                },
            },
        },
        {
            "apiVersion": jobset["apiVersion"],
            "kind": "JobSet",
            "metadata": _meta("js-train"),
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "trainer",
                        "replicas": 1,
                        "template": {"spec": {"parallelism": 1, "template": _template("nvcr.io/nvidia/nemo:25.04")}},
                    }
                ]
            },
        },
    ]
    isvc_labels = {"app": "sdxl-predictor"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("sdxl-predictor", isvc, isvc_labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": isvc_labels},
            "template": _template("kserve/huggingfaceserver:v0.14", isvc_labels),
        },
    }
    rs_labels = {**isvc_labels, "pod-template-hash": "5d8f7c6b9"}
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _meta("sdxl-predictor-5d8f7c6b9", _ref("apps/v1", "Deployment", "sdxl-predictor", 11), rs_labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": rs_labels},
            "template": _template("kserve/huggingfaceserver:v0.14", rs_labels),
        },
    }
    lws_labels = {"leaderworkerset.sigs.k8s.io/name": "lws-70b"}
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta("lws-70b", lws, lws_labels),
        "spec": {
            "replicas": 1,
            "serviceName": "lws-70b",
            "selector": {"matchLabels": lws_labels},
            "template": _template("vllm/vllm-openai:v0.11.0", lws_labels),
        },
    }
    job_template = _template("nvcr.io/nvidia/nemo:25.04")
    job_template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta("js-train-trainer-0", jobset),
        "spec": {"parallelism": 1, "completions": 1, "template": job_template},
    }
    pods = [
        _pod("ray-llm-head-8x2kq", ray, "rayproject/ray-ml:2.40.0-gpu", {"ray.io/cluster": "ray-llm"}),
        _pod("bert-ft-master-0", pytorch, "pytorch/pytorch:2.5", {"training.kubeflow.org/job-name": "bert-ft"}),
        _pod(
            "sdxl-predictor-5d8f7c6b9-q2w4e",
            _ref("apps/v1", "ReplicaSet", "sdxl-predictor-5d8f7c6b9", 12),
            "kserve/huggingfaceserver:v0.14",
            rs_labels,
        ),
        _pod("lws-70b-0", _ref("apps/v1", "StatefulSet", "lws-70b", 13), "vllm/vllm-openai:v0.11.0", lws_labels),
        _pod(
            "js-train-trainer-0-0-abcde",
            _ref("batch/v1", "Job", "js-train-trainer-0", 14),
            "nvcr.io/nvidia/nemo:25.04",
            {"jobset.sigs.k8s.io/jobset-name": "js-train"},
        ),
    ]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIGMAP[1], "namespace": DEVICE_PLUGIN_CONFIGMAP[0]},
        "data": {
            "config.yaml": (
                "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
            )
        },
    }
    for obj in customresources:
        obj["metadata"].pop("uid", None)
    return {
        "nodes": [node],
        "customresources": customresources,
        "deployments": [deployment],
        "replicasets": [replicaset],
        "statefulsets": [statefulset],
        "jobs": [job],
        "pods": pods,
        "configmaps": [configmap],
    }


def merged(small: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    cluster = {key: list(objs) for key, objs in small.items()}
    for key, objs in build(small).items():
        cluster.setdefault(key, []).extend(objs)
    return cluster
