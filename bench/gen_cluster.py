"""Generate a synthetic recorded cluster for scale benchmarks.

    python bench/gen_cluster.py --nodes 5000 --pods 50000 --seed 1 -o cluster.json

The output is a recorded cluster (``{resource: [raw objects]}``, the format
``tests/apiserver.py`` serves and ``tests/clusters/small.json`` uses).
Deterministic for a given seed and size. The mix, roughly what a large
shared GPU fleet looks like:

- node pools: 8x H100 / 8x A100-80GB / 8x A100-40GB (tainted
  ``nvidia.com/gpu=present:NoSchedule``, MIG-capable, running whole), 4x L40S,
  1x L4, 1x A10G, 1x T4, and CPU-only nodes; about 1% cordoned and 2% carry a
  team's ``dedicated=<team>:NoSchedule`` taint; GFD labels on GPU nodes;
- pods: a DaemonSet pod or two on every node, CPU services (Deployments) and
  GPU workloads (Deployments for serving, Jobs for training/batch) asking for
  1, 2, 4 or 8 GPUs, with product nodeSelectors, ``In`` affinities over two
  products, a few hostname pins, and GPU tolerations on most (not all) GPU
  pods; some Job pods have Succeeded or Failed;
- placement: pods bound in creation order, first fit (tests/clusters/
  scheduler.py); GPU demand is set above the fleet's capacity, so a share of
  pods stays Pending with the FailedScheduling event and condition the 1.34
  scheduler would write;
- every object carries a small ``managedFields``, as the API returns it, so
  collectors pay for dropping it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# (pool, product, memory MiB, family, compute, GPUs/node, instance type, MIG, tainted, weight)
POOLS = [
    ("h100", "NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0), 8, "p5.48xlarge", True, True, 0.08),
    (
        "a100-80",
        "NVIDIA-A100-SXM4-80GB",
        81920,
        "ampere",
        (8, 0),
        8,
        "p4de.24xlarge",
        True,
        True,
        0.08,
    ),
    (
        "a100-40",
        "NVIDIA-A100-SXM4-40GB",
        40960,
        "ampere",
        (8, 0),
        8,
        "p4d.24xlarge",
        True,
        True,
        0.06,
    ),
    ("l40s", "NVIDIA-L40S", 46068, "ada-lovelace", (8, 9), 4, "g6e.12xlarge", False, False, 0.12),
    ("l4", "NVIDIA-L4", 23034, "ada-lovelace", (8, 9), 1, "g6.4xlarge", False, False, 0.16),
    ("a10g", "NVIDIA-A10G", 23028, "ampere", (8, 6), 1, "g5.2xlarge", False, False, 0.12),
    ("t4", "Tesla-T4", 15360, "turing", (7, 5), 1, "g4dn.xlarge", False, False, 0.08),
    ("cpu", None, 0, None, (0, 0), 0, "m6i.8xlarge", False, False, 0.30),
]
INSTANCE_SHAPE = {  # cpu cores, memory GiB
    "p5.48xlarge": (192, 2048),
    "p4de.24xlarge": (96, 1152),
    "p4d.24xlarge": (96, 1152),
    "g6e.12xlarge": (48, 384),
    "g6.4xlarge": (16, 64),
    "g5.2xlarge": (8, 32),
    "g4dn.xlarge": (4, 16),
    "m6i.8xlarge": (32, 128),
}
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TEAMS = tuple(
    f"team-{name}"
    for name in (
        "search",
        "ads",
        "recsys",
        "nlp",
        "vision",
        "speech",
        "llm",
        "genai",
        "fraud",
        "maps",
        "risk",
        "video",
        "growth",
        "infra",
        "data",
        "research",
        "robotics",
        "health",
        "ml-platform",
        "notebooks",
    )
)
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
T0 = 1_764_000_000  # 2025-11-24, the generated history starts here


def _time(offset: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + offset))


def _uid(*parts: object) -> str:
    digest = hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _managed(manager: str, created: str, *, status: bool = False) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": created,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {"f:containers": {}}},
    }
    entries = [entry]
    if status:
        entries.append(
            dict(
                entry,
                manager="kubelet",
                subresource="status",
                fieldsV1={"f:status": {"f:conditions": {}, "f:phase": {}}},
            )
        )
    return entries


# -- nodes --------------------------------------------------------------------------


def make_nodes(count: int, rng: random.Random) -> list[dict[str, Any]]:
    weights = [pool[-1] for pool in POOLS]
    nodes = []
    for i in range(count):
        pool = rng.choices(POOLS, weights)[0]
        name_, product, memory, family, compute, gpus, itype, mig, tainted, _ = pool
        name = f"{name_}-{i:05d}"
        cpu, mem_gi = INSTANCE_SHAPE[itype]
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": itype,
            "topology.kubernetes.io/zone": rng.choice(ZONES),
            "pool": name_,
        }
        if product:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.memory": str(memory),
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.family": family,
                    "nvidia.com/gpu.compute.major": str(compute[0]),
                    "nvidia.com/gpu.compute.minor": str(compute[1]),
                    "nvidia.com/gpu.replicas": "1",
                    "nvidia.com/gpu.sharing-strategy": "none",
                    "nvidia.com/mig.capable": "true" if mig else "false",
                }
            )
        spec: dict[str, Any] = {"providerID": f"aws:///{labels['topology.kubernetes.io/zone']}/i-{i:017x}"}
        taints = [TAINT] if tainted else []
        roll = rng.random()
        if roll < 0.01:
            spec["unschedulable"] = True
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        elif roll < 0.03:
            taints.append({"key": "dedicated", "value": rng.choice(TEAMS), "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        capacity = {
            "cpu": str(cpu),
            "memory": f"{mem_gi}Gi",
            "pods": "110",
            "ephemeral-storage": "500Gi",
        }
        allocatable = dict(capacity, cpu=f"{cpu * 1000 - 200}m", memory=f"{mem_gi * 1024 - 1800}Mi")
        if gpus:
            capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
        created = _time(rng.randrange(0, 86_400 * 30))
        nodes.append(
            {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "uid": _uid("node", name),
                    "resourceVersion": str(1000 + i),
                    "creationTimestamp": created,
                    "labels": labels,
                    "managedFields": _managed("kubelet", created, status=True),
                },
                "spec": spec,
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": _time(86_400 * 35),
                            "lastTransitionTime": created,
                        }
                    ],
                    "addresses": [
                        {
                            "type": "InternalIP",
                            "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                        }
                    ],
                    "nodeInfo": {
                        "kubeletVersion": "v1.34.2",
                        "architecture": "amd64",
                        "containerRuntimeVersion": "containerd://2.1.4",
                    },
                },
            }
        )
    return nodes


# -- workloads ------------------------------------------------------------------------


def _container(name: str, image: str, cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits = {"memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": requests, "limits": limits},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _gpu_template(rng: random.Random, products: list[str], hostnames: list[str]) -> tuple[dict[str, Any], bool]:
    """A GPU pod template and whether it is a Job (batch) rather than a service."""
    gpus = rng.choices((1, 2, 4, 8), (0.62, 0.16, 0.12, 0.10))[0]
    per_gpu_cpu = rng.choice((4, 8, 12))
    per_gpu_mem = rng.choice((32, 64, 96))
    if gpus >= 4:  # multi-GPU work needs the 8-GPU pools
        products = [p for p in products if "H100" in p or "A100" in p] or products
    spec: dict[str, Any] = {
        "containers": [
            _container(
                "main",
                rng.choice(
                    (
                        "vllm/vllm-openai:v0.11.0",
                        "nvcr.io/nvidia/pytorch:25.10-py3",
                        "nvcr.io/nvidia/tritonserver:25.10-py3",
                        "ghcr.io/huggingface/text-generation-inference:3.3",
                    )
                ),
                str(per_gpu_cpu * gpus),
                f"{per_gpu_mem * gpus}Gi",
                gpus,
            )
        ],
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
    }
    roll = rng.random()
    if roll < 0.01 and hostnames:
        spec["nodeSelector"] = {"kubernetes.io/hostname": rng.choice(hostnames)}
    elif roll < 0.40:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": rng.choice(products)}
    elif roll < 0.52:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": sorted(rng.sample(products, min(2, len(products)))),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    if rng.random() < 0.88:
        spec["tolerations"] = [GPU_TOLERATION]
    return spec, rng.random() < 0.45


def _cpu_template(rng: random.Random) -> dict[str, Any]:
    cpu = rng.choice(("250m", "500m", "1", "2"))
    memory = rng.choice(("512Mi", "1Gi", "2Gi", "4Gi"))
    return {
        "containers": [
            _container(
                "app",
                rng.choice(
                    (
                        "nginx:1.27",
                        "ghcr.io/example/api:3.2",
                        "redis:7.4",
                        "ghcr.io/example/worker:1.9",
                    )
                ),
                cpu,
                memory,
                0,
            )
        ],
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
    }


class _Builder:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pods: list[dict[str, Any]] = []
        self.replicasets: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []
        self.clock = 86_400 * 31

    def _tick(self) -> int:
        self.clock += self.rng.randrange(1, 40)
        return self.clock

    def owner_ref(self, kind: str, name: str, api: str) -> dict[str, Any]:
        return {
            "apiVersion": api,
            "kind": kind,
            "name": name,
            "uid": _uid(kind, name),
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def pod(
        self,
        name: str,
        namespace: str,
        spec: dict[str, Any],
        labels: dict[str, str],
        owner: dict[str, Any],
        created: int,
    ) -> dict[str, Any]:
        spec = json.loads(json.dumps(spec))
        spec["tolerations"] = spec.get("tolerations", []) + DEFAULT_TOLERATIONS
        spec.setdefault("restartPolicy", "Always")
        stamp = _time(created)
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": _uid("pod", namespace, name),
                "resourceVersion": str(100_000 + len(self.pods)),
                "creationTimestamp": stamp,
                "generateName": owner["name"] + "-",
                "labels": labels,
                "ownerReferences": [owner],
                "managedFields": _managed("kube-controller-manager", stamp, status=True),
            },
            "spec": spec,
            "status": {},
        }
        self.pods.append(pod)
        return pod

    def deployment(self, namespace: str, name: str, spec: dict[str, Any], replicas: int) -> None:
        pod_hash = hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()[:10]
        rs_name = f"{name}-{pod_hash}"
        labels = {"app": name, "pod-template-hash": pod_hash}
        created = self._tick()
        self.replicasets.append(
            {
                "kind": "ReplicaSet",
                "apiVersion": "apps/v1",
                "metadata": {
                    "name": rs_name,
                    "namespace": namespace,
                    "uid": _uid("ReplicaSet", rs_name),
                    "resourceVersion": str(50_000 + len(self.replicasets)),
                    "creationTimestamp": _time(created),
                    "labels": labels,
                    "ownerReferences": [self.owner_ref("Deployment", name, "apps/v1")],
                    "managedFields": _managed("kube-controller-manager", _time(created)),
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": spec},
                },
                "status": {"replicas": replicas},
            }
        )
        owner = self.owner_ref("ReplicaSet", rs_name, "apps/v1")
        for _ in range(replicas):
            suffix = hashlib.sha1(f"{rs_name}/{len(self.pods)}".encode()).hexdigest()[:5]
            self.pod(f"{rs_name}-{suffix}", namespace, spec, labels, owner, self._tick())

    def job(self, namespace: str, name: str, spec: dict[str, Any], parallelism: int) -> None:
        spec = dict(spec, restartPolicy="Never")
        uid = _uid("Job", name)
        labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
        created = self._tick()
        self.jobs.append(
            {
                "kind": "Job",
                "apiVersion": "batch/v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": uid,
                    "resourceVersion": str(70_000 + len(self.jobs)),
                    "creationTimestamp": _time(created),
                    "labels": {"batch.kubernetes.io/job-name": name},
                    "managedFields": _managed("kube-controller-manager", _time(created)),
                },
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "backoffLimit": 0,
                    "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                    "template": {"metadata": {"labels": labels}, "spec": spec},
                },
                "status": {"startTime": _time(created)},
            }
        )
        owner = self.owner_ref("Job", name, "batch/v1")
        for _ in range(parallelism):
            suffix = hashlib.sha1(f"{name}/{len(self.pods)}".encode()).hexdigest()[:5]
            self.pod(f"{name}-{suffix}", namespace, spec, labels, owner, self._tick())


def generate(nodes: int, pods: int, seed: int = 1) -> dict[str, list[dict[str, Any]]]:
    """The recorded cluster as a dict."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.clusters.scheduler import Scheduler, failed_scheduling_event

    rng = random.Random(seed)
    node_objs = make_nodes(nodes, rng)
    products = sorted(
        {
            n["metadata"]["labels"]["nvidia.com/gpu.product"]
            for n in node_objs
            if "nvidia.com/gpu.product" in n["metadata"]["labels"]
        }
    )
    gpu_hosts = [n["metadata"]["name"] for n in node_objs if n["status"]["capacity"].get("nvidia.com/gpu")]
    builder = _Builder(rng)
    scheduler = Scheduler(node_objs)

    # DaemonSet pods: one node agent everywhere, a DCGM exporter on GPU nodes.
    # The DaemonSet controller binds them itself; they are accounted, not scheduled.
    daemon_budget = min(pods // 5, 2 * nodes)
    for node in node_objs:
        if len(builder.pods) >= daemon_budget:
            break
        name = node["metadata"]["name"]
        agents = [("node-agent", "monitoring", "100m", "128Mi")]
        if node["status"]["capacity"].get("nvidia.com/gpu"):
            agents.append(("dcgm-exporter", "gpu-operator", "100m", "512Mi"))
        for app, namespace, cpu, memory in agents:
            spec = {
                "containers": [_container(app, f"example/{app}:1.0", cpu, memory, 0)],
                "nodeName": name,
                "tolerations": [{"operator": "Exists"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                            ]
                        }
                    }
                },
            }
            owner = builder.owner_ref("DaemonSet", app, "apps/v1")
            suffix = hashlib.sha1(f"{app}/{name}".encode()).hexdigest()[:5]
            pod = builder.pod(f"{app}-{suffix}", namespace, spec, {"app": app}, owner, 86_400 * 31)
            scheduler.account(pod, name)
            pod["status"] = _running(pod, name)

    # Workloads until the pod budget is spent: about a third are GPU pods.
    serial = 0
    while len(builder.pods) < pods:
        serial += 1
        namespace = rng.choice(TEAMS)
        left = pods - len(builder.pods)
        if rng.random() < 0.35:
            spec, is_job = _gpu_template(rng, products, gpu_hosts)
            size = min(left, rng.choice((1, 1, 2, 3, 4, 6, 8)))
            if is_job:
                builder.job(namespace, f"train-{serial:05d}", spec, size)
            else:
                builder.deployment(namespace, f"serve-{serial:05d}", spec, size)
        else:
            builder.deployment(
                namespace,
                f"svc-{serial:05d}",
                _cpu_template(rng),
                min(left, rng.choice((1, 2, 3, 5, 8, 12))),
            )

    events = []
    unbound = []
    for pod in builder.pods:
        if pod["spec"].get("nodeName"):
            continue
        is_job = pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
        node = scheduler.bind(pod)
        if node is None:
            unbound.append(pod)
            continue
        pod["spec"]["nodeName"] = node
        if is_job and rng.random() < 0.12:
            # Finished Job pods have released what they held.
            scheduler.release(pod, node)
            pod["status"] = _finished(pod, node, succeeded=rng.random() < 0.6)
        else:
            pod["status"] = _running(pod, node)
    # The scheduler retries pending pods; room freed by finished Jobs counts.
    still_pending = []
    for pod in unbound:
        node = scheduler.bind(pod)
        if node is None:
            still_pending.append(pod)
        else:
            pod["spec"]["nodeName"] = node
            pod["status"] = _running(pod, node)
    for pod in still_pending:
        message = scheduler.fit_error(pod)
        created = pod["metadata"]["creationTimestamp"]
        pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        if message is not None:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": created,
                }
            ]
            events.append(
                failed_scheduling_event(
                    pod,
                    message,
                    first=created,
                    last=_time(86_400 * 35),
                    count=rng.randrange(2, 200),
                )
            )
    return {
        "nodes": node_objs,
        "pods": builder.pods,
        "events": events,
        "replicasets": builder.replicasets,
        "jobs": builder.jobs,
        "configmaps": [],
    }


def _running(pod: dict[str, Any], node: str) -> dict[str, Any]:
    started = pod["metadata"]["creationTimestamp"]
    container = pod["spec"]["containers"][0]
    return {
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "podIP": "10.244.0.1",
        "startTime": started,
        "qosClass": "Burstable",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }


def _finished(pod: dict[str, Any], node: str, *, succeeded: bool) -> dict[str, Any]:
    status = _running(pod, node)
    status["phase"] = "Succeeded" if succeeded else "Failed"
    status["containerStatuses"][0].update(
        ready=False,
        started=False,
        state={
            "terminated": {
                "exitCode": 0 if succeeded else 1,
                "reason": "Completed" if succeeded else "Error",
                "startedAt": status["startTime"],
                "finishedAt": status["startTime"],
            }
        },
    )
    return status


def write(cluster: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """One object per line inside each list: diffable, and written item by
    item so the file never exists twice in memory."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write("{")
        for i, (key, items) in enumerate(cluster.items()):
            out.write(("," if i else "") + f"\n{json.dumps(key)}: [")
            for j, item in enumerate(items):
                out.write(("," if j else "") + "\n" + json.dumps(item, separators=(",", ":")))
            out.write("\n]")
        out.write("\n}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--output", type=Path, required=True, help="JSON file (.gz to compress)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    cluster = generate(args.nodes, args.pods, args.seed)
    write(cluster, args.output)
    counts = ", ".join(f"{len(v)} {k}" for k, v in cluster.items())
    phases: dict[str, int] = {}
    for pod in cluster["pods"]:
        phases[pod["status"].get("phase", "?")] = phases.get(pod["status"].get("phase", "?"), 0) + 1
    print(
        f"{args.output}: {counts}; pods by phase {phases} ({time.monotonic() - started:.1f}s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
