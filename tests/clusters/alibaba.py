"""A recorded cluster built from Alibaba's GPU trace (alibaba-gpu-v2023, "openb").

Nodes: the 1,213 GPU nodes of ``node_yaml/`` as they are, plus what GPU Feature
Discovery and the device plugin would add: ``nvidia.com/gpu`` capacity and
allocatable (the GPU count) and the GFD labels ``nvidia.com/gpu.product``,
``.count``, ``.memory`` (MiB), ``.family``, ``.present``. The trace's
``alibabacloud.com/gpu-card-model`` label and ``alibabacloud.com/gpu-*``
capacities stay. G2 and G3 are undisclosed models: their product label is the
code itself and the memory and family labels are left off rather than made up.

Pods: the 8,152 rows of ``csv/openb_pod_list_gpuspec33.csv``, named as in the
trace, with its CPU and memory requests and its phase.

- GPU requests: ``num_gpu`` whole ``nvidia.com/gpu``. A fractional row
  (``gpu_milli`` < 1000) requests 1 ``nvidia.com/gpu`` -- a stock device
  plugin cannot hand out less -- and keeps its true need in the annotation
  ``alibabacloud.com/gpu-milli`` (the trace's own unit). This is the situation
  gpuaudit exists to find (a whole GPU held by a fraction of work), and the
  what-if simulation can read the need back. A KAI-style ``gpu-fraction``
  annotation was rejected: with KAI such a pod requests no ``nvidia.com/gpu``
  at all, so pairing the two would describe no real cluster.
- ``gpu_spec`` (``A|B``): ``nodeSelector`` on ``alibabacloud.com/gpu-card-model``
  for one model, a required node affinity ``In [A, B]`` for several.
- Owners: rows with the same shape (resources, model constraint, QoS) form
  workloads of at most 8 pods in trace order. BE rows, and any row that
  Succeeded, belong to Jobs (a Deployment's pod never succeeds); LS,
  Burstable and Guaranteed rows to ReplicaSets of Deployments. A failed
  Deployment pod is shown as evicted, the way such pods fail.
- Namespaces: one of six teams, chosen from a hash of the workload's name.
- Placement: Running pods are bound in trace order, first fit in node-name
  order, to a node whose model matches and whose GPUs, CPU and memory are
  free (see scheduler.py). Succeeded and Failed pods keep a node (they ran
  somewhere; their requests no longer count). A pod that cannot be bound is
  Pending; when no node fits it, it carries the FailedScheduling event and
  ``PodScheduled`` condition the 1.34 scheduler writes.

Note on the trace's own Pending rows: under whole-GPU accounting every one of
them fits on the bound cluster (the trace records pods that pended for a
minute or two and were deleted, for reasons it does not give). They are kept
Pending, unbound and without an event -- the state of a pod the scheduler has
not yet tried -- rather than with an invented reason. ``build(node_sample=k)``
keeps every k-th node only: the cluster is then oversubscribed and the same
code gives Running rows that no longer fit genuine FailedScheduling events
(``node_sample=2`` leaves about a thousand of them).

Everything is deterministic. The data folder defaults to ``../shared/data``
next to the checkout; :func:`available` tells whether it is there.
"""

from __future__ import annotations

import csv
import hashlib
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from tests.clusters.scheduler import Scheduler, failed_scheduling_event, matches_node

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "alibaba-gpu-v2023"
NODES_YAML = Path("node_yaml") / "openb_node_list_gpu_node.yaml"
PODS_CSV = Path("csv") / "openb_pod_list_gpuspec33.csv"
MODEL_LABEL = "alibabacloud.com/gpu-card-model"
MILLI_ANNOTATION = "alibabacloud.com/gpu-milli"
TEAMS = ("search", "recsys", "nlp", "vision", "speech", "ads")
WORKLOAD_SIZE = 8
# The trace counts seconds from an undisclosed start; anchor it somewhere.
EPOCH = datetime(2023, 1, 1, tzinfo=timezone.utc)

# trace model -> (GFD product, memory MiB or None, family or None)
MODELS: dict[str, tuple[str, int | None, str | None]] = {
    "T4": ("Tesla-T4", 15360, "turing"),
    "P100": ("Tesla-P100-PCIE-16GB", 16384, "pascal"),
    "V100M16": ("Tesla-V100-SXM2-16GB", 16384, "volta"),
    "V100M32": ("Tesla-V100-SXM2-32GB", 32768, "volta"),
    "A10": ("NVIDIA-A10", 23028, "ampere"),
    "G2": ("G2", None, None),
    "G3": ("G3", None, None),
}


class DataUnavailable(FileNotFoundError):
    """The trace is not in the data folder."""


def available(data_dir: Path = DATA_DIR) -> bool:
    return (data_dir / NODES_YAML).is_file() and (data_dir / PODS_CSV).is_file()


def build(data_dir: Path = DATA_DIR, *, node_sample: int = 1) -> dict[str, list[dict[str, Any]]]:
    """The recorded cluster: {"nodes", "pods", "events", "replicasets", "jobs",
    "configmaps"}. The GPU Operator, DRA and Kueue APIs are not installed."""
    if not available(data_dir):
        raise DataUnavailable(f"alibaba-gpu-v2023 trace not found in {data_dir}")
    nodes = _nodes(data_dir)[:: max(1, node_sample)]
    with (data_dir / PODS_CSV).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    pods, replicasets, jobs = _workloads(rows)
    events = _place(nodes, pods, rows)
    return {
        "nodes": nodes,
        "pods": pods,
        "events": events,
        "replicasets": replicasets,
        "jobs": jobs,
        "configmaps": [],
    }


# -- nodes ----------------------------------------------------------------------


def _nodes(data_dir: Path) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with (data_dir / NODES_YAML).open() as handle:
        docs = [doc for doc in yaml.load_all(handle, Loader=loader) if doc]
    return [_gpu_node(doc) for doc in docs]


def _gpu_node(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc["metadata"]
    labels = dict(meta.get("labels") or {})
    status = doc.get("status") or {}
    capacity = dict(status.get("capacity") or {})
    allocatable = dict(status.get("allocatable") or {})
    count = int(capacity.get("alibabacloud.com/gpu-count", 0))
    model = labels.get(MODEL_LABEL, "")
    product, memory, family = MODELS.get(model, (model, None, None))
    gfd = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    if memory is not None:
        gfd["nvidia.com/gpu.memory"] = str(memory)
    if family is not None:
        gfd["nvidia.com/gpu.family"] = family
        gfd["nvidia.com/mig.capable"] = "false"  # none of the disclosed models is
    labels.update(gfd)
    capacity["nvidia.com/gpu"] = str(count)
    allocatable["nvidia.com/gpu"] = str(count)
    name = meta["name"]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": "1",
            "creationTimestamp": _time(0),
            "labels": labels,
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": _time(12_900_000),
                    "lastTransitionTime": _time(0),
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.34.2", "architecture": "amd64"},
        },
    }


# -- pods and their owners --------------------------------------------------------


def _workloads(
    rows: list[dict[str, str]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        job = row["qos"] == "BE" or row["pod_phase"] == "Succeeded"
        shape = (row["cpu_milli"], row["memory_mib"], row["num_gpu"], row["gpu_milli"])
        groups[(*shape, "|".join(_models(row["gpu_spec"])), row["qos"], str(job))].append(index)
    pods: list[dict[str, Any] | None] = [None] * len(rows)
    replicasets, jobs = [], []
    serial = 0
    for key, members in sorted(groups.items(), key=lambda item: item[1][0]):
        is_job = key[-1] == "True"
        for start in range(0, len(members), WORKLOAD_SIZE):
            chunk = members[start : start + WORKLOAD_SIZE]
            serial += 1
            name = f"{'train' if is_job else 'infer'}-{serial:04d}"
            team = TEAMS[int(hashlib.sha1(name.encode()).hexdigest(), 16) % len(TEAMS)]
            template = _pod_spec(rows[chunk[0]], restart="Never" if is_job else "Always")
            if is_job:
                owner = _job(name, team, template, [rows[i] for i in chunk])
                jobs.append(owner)
            else:
                owner = _replicaset(name, team, template, [rows[i] for i in chunk])
                replicasets.append(owner)
            for i in chunk:
                pods[i] = _pod(rows[i], team, owner, is_job)
    return [p for p in pods if p is not None], replicasets, jobs


def _models(spec: str) -> list[str]:
    return sorted({m for m in spec.split("|") if m})


def _pod_spec(row: dict[str, str], *, restart: str) -> dict[str, Any]:
    cpu = int(row["cpu_milli"])
    requests: dict[str, str] = {
        "cpu": str(cpu // 1000) if cpu % 1000 == 0 else f"{cpu}m",
        "memory": f"{row['memory_mib']}Mi",
    }
    limits: dict[str, str] = {}
    gpus = int(row["num_gpu"])
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    if row["qos"] == "Guaranteed":
        limits.update(cpu=requests["cpu"], memory=requests["memory"])
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example.com/openb/worker:1.0",
                "resources": resources,
            }
        ],
        "restartPolicy": restart,
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
    }
    models = _models(row["gpu_spec"])
    if len(models) == 1:
        spec["nodeSelector"] = {MODEL_LABEL: models[0]}
    elif models:
        term = {"matchExpressions": [{"key": MODEL_LABEL, "operator": "In", "values": models}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return spec


def _owner_ref(kind: str, name: str, api_version: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": _uid(kind, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replicaset(deployment: str, team: str, template: dict[str, Any], rows: list[dict[str, str]]) -> dict[str, Any]:
    pod_hash = hashlib.sha1(f"{team}/{deployment}".encode()).hexdigest()[:9]
    name = f"{deployment}-{pod_hash}"
    labels = {"app": deployment, "pod-template-hash": pod_hash}
    running = sum(row["pod_phase"] == "Running" for row in rows)
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": team,
            "uid": _uid("ReplicaSet", name),
            "resourceVersion": "1",
            "creationTimestamp": _time(int(rows[0]["creation_time"])),
            "labels": labels,
            "ownerReferences": [_owner_ref("Deployment", deployment, "apps/v1")],
        },
        "spec": {
            "replicas": len(rows),
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template},
        },
        "status": {"replicas": len(rows), "readyReplicas": running, "availableReplicas": running},
    }


def _job(name: str, team: str, template: dict[str, Any], rows: list[dict[str, str]]) -> dict[str, Any]:
    uid = _uid("Job", name)
    labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
    phases = [row["pod_phase"] for row in rows]
    counts = {
        "active": phases.count("Running") + phases.count("Pending"),
        "succeeded": phases.count("Succeeded"),
        "failed": phases.count("Failed"),
    }
    status: dict[str, Any] = {"startTime": _time(int(rows[0]["creation_time"]))}
    status.update({key: count for key, count in counts.items() if count})
    return {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {
            "name": name,
            "namespace": team,
            "uid": uid,
            "resourceVersion": "1",
            "creationTimestamp": _time(int(rows[0]["creation_time"])),
            "labels": {"batch.kubernetes.io/job-name": name},
        },
        "spec": {
            "parallelism": len(rows),
            "completions": len(rows),
            "backoffLimit": 0,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {"metadata": {"labels": labels}, "spec": template},
        },
        "status": status,
    }


def _pod(row: dict[str, str], team: str, owner: dict[str, Any], is_job: bool) -> dict[str, Any]:
    spec = _pod_spec(row, restart="Never" if is_job else "Always")
    template_labels = owner["spec"]["template"]["metadata"]["labels"]
    annotations = {}
    if int(row["num_gpu"]) == 1 and int(row["gpu_milli"]) < 1000:
        annotations[MILLI_ANNOTATION] = row["gpu_milli"]
    labels = dict(template_labels, **{"openb.trace/qos": row["qos"]})
    meta: dict[str, Any] = {
        "name": row["name"],
        "namespace": team,
        "uid": _uid("Pod", row["name"]),
        "resourceVersion": "1",
        "creationTimestamp": _time(int(row["creation_time"])),
        "labels": labels,
        "ownerReferences": [_owner_ref(owner["kind"], owner["metadata"]["name"], owner["apiVersion"])],
    }
    if annotations:
        meta["annotations"] = annotations
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": {}}


# -- placement ----------------------------------------------------------------------


def _place(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Bind, fill in every pod's status, and return the FailedScheduling events."""
    scheduler = Scheduler(nodes)
    by_name = {row["name"]: row for row in rows}
    unbound: set[str] = set()
    for pod in pods:  # trace order: pods were created, and bound, in this order
        row = by_name[pod["metadata"]["name"]]
        if row["pod_phase"] != "Running":
            continue
        node = scheduler.bind(pod)
        if node is None:
            unbound.add(pod["metadata"]["name"])
        else:
            pod["spec"]["nodeName"] = node
            pod["status"] = _running(row, node)
    events = []
    for pod in pods:
        row = by_name[pod["metadata"]["name"]]
        phase = row["pod_phase"]
        if phase in ("Succeeded", "Failed"):
            # They ran somewhere that fits their model; which node is not in
            # the trace, so pick one deterministically among those that match.
            node = _finished_node(pod, nodes)
            pod["spec"]["nodeName"] = node
            pod["status"] = _finished(row, node, evicted=pod["spec"]["restartPolicy"] == "Always")
        elif phase == "Pending" or pod["metadata"]["name"] in unbound:
            message = scheduler.fit_error(pod)
            pod["status"] = _pending(row, message)
            if phase != "Pending":
                pod["metadata"].setdefault("annotations", {})["openb.trace/phase"] = phase
            if message is not None:
                created = int(row["creation_time"])
                events.append(
                    failed_scheduling_event(pod, message, first=_time(created), last=_time(created + 60), count=3)
                )
    return events


def _finished_node(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> str:
    digest = int(hashlib.sha1(pod["metadata"]["name"].encode()).hexdigest(), 16)
    for offset in range(len(nodes)):
        node = nodes[(digest + offset) % len(nodes)]
        if matches_node(pod, node):
            return node["metadata"]["name"]
    return nodes[digest % len(nodes)]["metadata"]["name"]


def _running(row: dict[str, str], node: str) -> dict[str, Any]:
    started = _time(int(row["scheduled_time"] or row["creation_time"]))
    return {
        "phase": "Running",
        "hostIP": _node_ip(node),
        "podIP": _pod_ip(row["name"]),
        "startTime": started,
        "qosClass": "Guaranteed" if row["qos"] == "Guaranteed" else "Burstable",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Ready", "status": "True", "lastTransitionTime": started},
        ],
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.example.com/openb/worker:1.0",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }


def _finished(row: dict[str, str], node: str, *, evicted: bool) -> dict[str, Any]:
    started = _time(int(row["scheduled_time"] or row["creation_time"]))
    ended = _time(int(row["deletion_time"] or row["creation_time"]))
    succeeded = row["pod_phase"] == "Succeeded"
    status: dict[str, Any] = {
        "phase": row["pod_phase"],
        "hostIP": _node_ip(node),
        "startTime": started,
        "qosClass": "Guaranteed" if row["qos"] == "Guaranteed" else "Burstable",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {
                "type": "Ready",
                "status": "False",
                "reason": "PodCompleted" if succeeded else "PodFailed",
                "lastTransitionTime": ended,
            },
        ],
    }
    if evicted:
        status["reason"] = "Evicted"
        status["message"] = "The node was low on resource: memory. "
    status["containerStatuses"] = [
        {
            "name": "main",
            "image": "registry.example.com/openb/worker:1.0",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0 if succeeded else 137 if evicted else 1,
                    "reason": "Completed" if succeeded else "Error",
                    "startedAt": started,
                    "finishedAt": ended,
                }
            },
        }
    ]
    return status


def _pending(row: dict[str, str], message: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if message is not None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": _time(int(row["creation_time"])),
            }
        ]
    return status


# -- helpers --------------------------------------------------------------------------


def _time(seconds: int) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(kind: str, name: str) -> str:
    digest = hashlib.sha1(f"openb/{kind}/{name}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _node_ip(node: str) -> str:
    number = int(node.rsplit("-", 1)[-1])
    return f"10.{number // 250}.{number % 250}.10"


def _pod_ip(pod: str) -> str:
    number = int(hashlib.sha1(pod.encode()).hexdigest()[:6], 16)
    return f"172.{16 + number % 16}.{(number >> 4) % 256}.{(number >> 12) % 254 + 1}"
