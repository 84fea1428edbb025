"""A recorded cluster for the GenTD26 trace (alibaba-genai-v2026): Stable
Diffusion serving, 143 pods on one whole A100 each.

Names are shared with the Prometheus series generated from the same trace
(tests/genai_trace.py); keep them in step:

- pod ``sd-serving-{i:03d}`` in namespace ``genai``, container ``main``, where
  i is the rank of the pod's ``container_ip`` among the sorted unique values
  in ``pod_gpu_duty_cycle_anon.csv`` (computed from the data, not stored);
- each pod requests 1 ``nvidia.com/gpu`` and is owned by ReplicaSet
  ``sd-serving-7d9f`` of Deployment ``sd-serving``;
- pod i runs on node ``genai-node-{i // 8:02d}`` (GPU index ``i % 8``, which
  only the telemetry knows); 18 nodes of 8 ``NVIDIA-A100-SXM4-80GB``, MIG
  capable and running whole, so node 17 has one GPU free.

The pod keeps its hashed ``container_ip`` in the annotation
``gentd26/container-ip`` for joining with the other trace files.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "alibaba-genai-v2026"
DUTY_ARCHIVE = "pod_gpu_duty_cycle_anon.tar.gz"
NAMESPACE = "genai"
DEPLOYMENT = "sd-serving"
REPLICASET = "sd-serving-7d9f"
POD_TEMPLATE_HASH = "7d9f"
CONTAINER = "main"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPUS_PER_NODE = 8
IP_ANNOTATION = "gentd26/container-ip"
CREATED = "2026-11-28T08:00:00Z"


class DataUnavailable(FileNotFoundError):
    """The trace is not in the data folder."""


def available(data_dir: Path = DATA_DIR) -> bool:
    return (data_dir / DUTY_ARCHIVE).is_file()


def pod_name(index: int) -> str:
    return f"sd-serving-{index:03d}"


def node_name(index: int) -> str:
    """The node of pod ``index``."""
    return f"genai-node-{index // GPUS_PER_NODE:02d}"


def container_ips(data_dir: Path = DATA_DIR) -> list[str]:
    """The sorted unique ``container_ip`` values: list index = pod index."""
    if not available(data_dir):
        raise DataUnavailable(f"GenTD26 trace not found in {data_dir}")
    ips: set[str] = set()
    with tarfile.open(data_dir / DUTY_ARCHIVE, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".csv"))
        handle = tar.extractfile(member)
        assert handle is not None
        for row in csv.DictReader(io.TextIOWrapper(handle, encoding="utf-8")):
            ips.add(row["container_ip"])
    return sorted(ips)


def build(data_dir: Path = DATA_DIR) -> dict[str, list[dict[str, Any]]]:
    """The recorded cluster: 18 nodes, 143 pods, their ReplicaSet."""
    ips = container_ips(data_dir)
    node_count = -(-len(ips) // GPUS_PER_NODE)
    return {
        "nodes": [_node(n) for n in range(node_count)],
        "pods": [_pod(i, ip) for i, ip in enumerate(ips)],
        "events": [],
        "replicasets": [_replicaset(len(ips))],
        "jobs": [],
        "configmaps": [],
    }


def _uid(*parts: str) -> str:
    digest = hashlib.sha1("/".join(("gentd26", *parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _node(number: int) -> dict[str, Any]:
    name = f"genai-node-{number:02d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "ecs.gn7e-c16g1.32xlarge",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": PRODUCT,
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": str(GPUS_PER_NODE),
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/mig.config.state": "success",
    }
    capacity = {
        "cpu": "128",
        "memory": "1007Gi",
        "pods": "110",
        "nvidia.com/gpu": str(GPUS_PER_NODE),
    }
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": labels,
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity, cpu="127800m", memory="1029368Mi"),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-29T16:59:00Z",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.20.0.{number + 10}"}],
            "nodeInfo": {"kubeletVersion": "v1.34.2", "architecture": "amd64"},
        },
    }


def _template_spec() -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": CONTAINER,
                "image": "registry.example.com/genai/sd-serving:2.1",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "12", "memory": "96Gi", "nvidia.com/gpu": "1"},
                    "limits": {"memory": "96Gi", "nvidia.com/gpu": "1"},
                },
            }
        ],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {"nvidia.com/gpu.product": PRODUCT},
    }


def _labels() -> dict[str, str]:
    return {"app": DEPLOYMENT, "pod-template-hash": POD_TEMPLATE_HASH}


def _replicaset(replicas: int) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": REPLICASET,
            "namespace": NAMESPACE,
            "uid": _uid("ReplicaSet", REPLICASET),
            "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "labels": _labels(),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": DEPLOYMENT,
                    "uid": _uid("Deployment", DEPLOYMENT),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": _labels()},
            "template": {"metadata": {"labels": _labels()}, "spec": _template_spec()},
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas},
    }


def _pod(index: int, ip: str) -> dict[str, Any]:
    name = pod_name(index)
    spec = _template_spec()
    spec["nodeName"] = node_name(index)
    started = CREATED
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": _uid("pod", name),
            "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "labels": _labels(),
            "annotations": {IP_ANNOTATION: ip},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": REPLICASET,
                    "uid": _uid("ReplicaSet", REPLICASET),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "hostIP": f"10.20.0.{index // GPUS_PER_NODE + 10}",
            "podIP": f"10.244.{index // GPUS_PER_NODE}.{index % GPUS_PER_NODE + 10}",
            "startTime": started,
            "qosClass": "Burstable",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                {"type": "Ready", "status": "True", "lastTransitionTime": started},
            ],
            "containerStatuses": [
                {
                    "name": CONTAINER,
                    "image": "registry.example.com/genai/sd-serving:2.1",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        },
    }
