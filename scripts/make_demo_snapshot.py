"""Generate examples/demo-snapshot.json.gz: a small GPU cluster with telemetry
aggregates, so that `gpuaudit report --snapshot examples/demo-snapshot.json.gz
--out report/` shows a real capacity review without a cluster.

    .venv/bin/python scripts/make_demo_snapshot.py [-o FILE] [--history DB]

Synthetic, deterministic (a fixed seed; the same bytes on every run), and
shaped like the public traces in ../shared/data:

- ``genai/sd-serving``: 24 single-GPU Stable Diffusion replicas on A100-80GB
  whose activity and VRAM follow GenTD26 (alibaba-genai-v2026, 143 pods):
  per-pod mean utilisation 0.4-12 % (median 6 %), idle in 63-99 % of samples
  while 16-27 GiB stay resident (peaks 19-45 GiB). The pattern the product
  exists to find: GPUs that look 6 % busy and are 100 % unavailable.
- ``research``: 8-GPU pre-training and fine-tuning Jobs that keep their GPUs
  busy; another 8-GPU fine-tune pends although 8 A100s are free, spread two
  per node by the serving replicas (fragmentation, as the Alibaba
  alibaba-gpu-v2023 trace's paper describes).
- ``llm``: a tensor-parallel chat model on 4 H100s per replica (busy), a
  replica that pends for GPUs, and small embedding services holding whole
  L40S GPUs at low activity.
- ``recsys``: a ranker on MIG 1g.10gb slices (sharing piloted on one node).
- ``notebooks``: notebooks holding whole GPUs, some with a model resident,
  some pinned to a node or missing the GPU toleration (placement), a few on
  L4 nodes without a DCGM exporter (no telemetry: "no data", never idle).
- ``vision``: a batch Job, a crash-looping canary that still holds its GPU,
  a training pod asking for a GPU model the cluster does not have.
- Kueue-gated sweep pods waiting for quota.

The Deployments and StatefulSets that own the pods are recorded as a
collector keeps them, so `gpuaudit fix --snapshot` patches them.

Binding and FailedScheduling messages come from tests/clusters/scheduler.py
(the 1.34 scheduler's message format), not from gpuaudit's own code.
``--history DB`` also records five earlier monthly runs (synthetic, marked
command "demo") so the report's trend has something to show.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuaudit.model import telemetry as tm  # noqa: E402
from gpuaudit.sources.snapshot import write_snapshot  # noqa: E402
from tests.clusters.scheduler import Scheduler, failed_scheduling_event  # noqa: E402

SEED = 20261127
COLLECTED = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
WINDOW = timedelta(days=7)
SERVER = "https://demo.gpuaudit.example:6443"
GIB = 1024
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KUEUE_GATE = "kueue.x-k8s.io/admission"

# pool: (product label, memory MiB, GPUs per node, nodes, MIG-capable, tainted)
POOLS = {
    "h100": ("NVIDIA-H100-80GB-HBM3", 81559, 8, 4, True, True),
    "a100": ("NVIDIA-A100-SXM4-80GB", 81920, 8, 6, True, True),
    "a100-mig": ("NVIDIA-A100-SXM4-80GB", 81920, 8, 1, True, True),
    "l40s": ("NVIDIA-L40S", 46068, 4, 4, False, False),
    "l4": ("NVIDIA-L4", 23034, 1, 8, False, False),
}
MIG_PROFILE, MIG_PER_GPU, MIG_MIB = "1g.10gb", 7, 9728
NO_EXPORTER = {"l4-04", "l4-05", "l4-06", "l4-07"}  # nodes whose DCGM exporter is missing


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: object) -> str:
    digest = hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _suffix(*parts: object, length: int = 5) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()[:length]


# --- nodes -------------------------------------------------------------------------


def make_nodes() -> list[dict[str, Any]]:
    nodes = []
    for pool, (product, memory, count, how_many, mig, tainted) in POOLS.items():
        for index in range(how_many):
            name = f"{pool}-{index:02d}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "pool": pool,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(memory),
                "nvidia.com/gpu.count": str(count),
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/mig.capable": "true" if mig else "false",
            }
            capacity = {"cpu": "96", "memory": "1000Gi", "pods": "110"}
            if pool == "a100-mig":
                labels.update(
                    {
                        "nvidia.com/mig.config": f"all-{MIG_PROFILE}",
                        "nvidia.com/mig.config.state": "success",
                        "nvidia.com/mig.strategy": "mixed",
                    }
                )
                capacity[f"nvidia.com/mig-{MIG_PROFILE}"] = str(count * MIG_PER_GPU)
            else:
                capacity["nvidia.com/gpu"] = str(count)
            if pool in ("l40s", "l4"):
                capacity.update(cpu="48", memory="384Gi")
            spec: dict[str, Any] = {}
            if tainted:
                spec["taints"] = [TAINT]
            if name == "l4-03":  # drained for maintenance
                spec["unschedulable"] = True
                spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
            nodes.append(_node(name, labels, spec, capacity))
    for index in range(2):
        name = f"cpu-{index:02d}"
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "pool": "cpu"}
        nodes.append(_node(name, labels, {}, {"cpu": "32", "memory": "128Gi", "pods": "110"}))
    return nodes


def _node(name: str, labels: dict, spec: dict, capacity: dict) -> dict[str, Any]:
    created = _time(COLLECTED - timedelta(days=90))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": _uid("node", name), "creationTimestamp": created, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": created}
            ],
            "nodeInfo": {"kubeletVersion": "v1.34.2", "architecture": "amd64"},
        },
    }


# --- workloads -------------------------------------------------------------------------


class Cluster:
    def __init__(self, nodes: list[dict[str, Any]], rng: random.Random) -> None:
        self.nodes = nodes
        self.rng = rng
        self.scheduler = Scheduler(nodes)
        self.pods: list[dict[str, Any]] = []
        self.replicasets: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []
        self.kueue: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.behaviour: dict[tuple[str, str], dict[str, Any]] = {}
        self.next_gpu: dict[str, int] = {}
        self.devices: dict[tuple[str, str], list[tuple[int, str | None]]] = {}
        self.owners: dict[tuple[str, str, str], dict[str, Any]] = {}
        # Deployments and StatefulSets, built from their first pod (a collector
        # keeps the objects that own GPU pods, so `gpuaudit fix` can patch them).
        self.workloads: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.deployment_of: dict[tuple[str, str], str] = {}  # (namespace, ReplicaSet) -> Deployment

    # owners (one object per name, however often asked for)
    def deployment(self, namespace: str, name: str, team: str) -> dict[str, Any]:
        key = ("Deployment", namespace, name)
        if key not in self.owners:
            self.owners[key] = self._deployment(namespace, name, team)
        return self.owners[key]

    def job(self, namespace: str, name: str, team: str) -> dict[str, Any]:
        key = ("Job", namespace, name)
        if key not in self.owners:
            self.owners[key] = self._job(namespace, name, team)
        return self.owners[key]

    def _deployment(self, namespace: str, name: str, team: str) -> dict[str, Any]:
        template_hash = _suffix(namespace, name, length=10)
        rs = f"{name}-{template_hash}"
        self.deployment_of[(namespace, rs)] = name
        self.replicasets.append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": rs,
                    "namespace": namespace,
                    "uid": _uid("rs", namespace, rs),
                    "labels": {"app": name, "team": team},
                    "ownerReferences": [_ref("apps/v1", "Deployment", name)],
                },
                "spec": {"selector": {"matchLabels": {"app": name}}},
            }
        )
        return _ref("apps/v1", "ReplicaSet", rs)

    def _job(self, namespace: str, name: str, team: str) -> dict[str, Any]:
        self.jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": _uid("job", namespace, name),
                    "labels": {"team": team},
                },
                "spec": {"completions": 1},
            }
        )
        return _ref("batch/v1", "Job", name)

    # pods
    def pod(
        self,
        namespace: str,
        name: str,
        team: str,
        owner: dict[str, Any],
        gpus: int,
        *,
        node: str | None,
        resource: str = "nvidia.com/gpu",
        behaviour: dict[str, Any] | None = None,
        selector: dict[str, str] | None = None,
        tolerate: bool = True,
        gates: tuple[str, ...] = (),
        waiting: str | None = None,
        started: datetime | None = None,
        cpu: str = "8",
        memory: str = "64Gi",
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/ml/server:2.4",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory, resource: str(gpus)},
                        "limits": {"memory": memory, resource: str(gpus)},
                    },
                }
            ],
            "restartPolicy": "Never" if owner["kind"] == "Job" else "Always",
        }
        if tolerate:
            spec["tolerations"] = [TOLERATION]
        if selector:
            spec["nodeSelector"] = selector
        if gates:
            spec["schedulingGates"] = [{"name": g} for g in gates]
        start = started or COLLECTED - timedelta(days=self.rng.randint(9, 40))
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": _uid("pod", namespace, name),
                "creationTimestamp": _time(start),
                "labels": {"team": team, "app": owner["name"].rsplit("-", 1)[0]},
                "ownerReferences": [owner],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }
        self.pods.append(pod)
        self._count_in_workload(pod)
        if node is None:
            if not gates:
                message = self.scheduler.fit_error(pod)
                if message is None:
                    raise AssertionError(f"{namespace}/{name} would fit; the demo expects it pending")
                pod["status"]["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastTransitionTime": _time(start),
                    }
                ]
                self.events.append(
                    failed_scheduling_event(
                        pod,
                        message,
                        first=_time(start),
                        last=_time(COLLECTED - timedelta(minutes=2)),
                        count=self.rng.randint(20, 400),
                    )
                )
            return pod
        spec["nodeName"] = node
        self.scheduler.account(pod, node)
        pod["status"] = _running(start, waiting)
        if behaviour is not None:
            self.behaviour[(namespace, name)] = behaviour
        self.devices[(namespace, name)] = self._devices(node, gpus, resource)
        return pod

    def _count_in_workload(self, pod: dict[str, Any]) -> None:
        """Add ``pod`` to the Deployment or StatefulSet that owns it; the first
        pod gives the template (before it is bound to a node)."""
        meta = pod["metadata"]
        owner = meta["ownerReferences"][0]
        if owner["kind"] == "ReplicaSet":
            kind, name = "Deployment", self.deployment_of[(meta["namespace"], owner["name"])]
        elif owner["kind"] == "StatefulSet":
            kind, name = "StatefulSet", owner["name"]
        else:
            return  # Jobs are kept as they are
        key = (kind, meta["namespace"], name)
        if key in self.workloads:
            self.workloads[key]["spec"]["replicas"] += 1
            return
        spec = {k: v for k, v in copy.deepcopy(pod["spec"]).items() if k != "schedulingGates"}
        self.workloads[key] = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "uid": _uid(kind, name),
                "labels": {"team": meta["labels"]["team"]},
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": meta["labels"]["app"]}},
                **({"serviceName": name} if kind == "StatefulSet" else {}),
                "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": spec},
            },
        }

    def _devices(self, node: str, gpus: int, resource: str) -> list[tuple[int, str | None]]:
        first = self.next_gpu.get(node, 0)
        self.next_gpu[node] = first + gpus
        if resource.startswith("nvidia.com/mig-"):
            return [((first + i) // MIG_PER_GPU, str((first + i) % MIG_PER_GPU)) for i in range(gpus)]
        return [(first + i, None) for i in range(gpus)]


def _ref(api: str, kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": _uid(kind, name), "controller": True}


def _running(start: datetime, waiting: str | None) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": _time(start)}}
    ready = "True"
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}}
        ready = "False"
    return {
        "phase": "Running",
        "startTime": _time(start),
        "conditions": [
            {
                "type": "Ready",
                "status": ready,
                "lastTransitionTime": _time(start if ready == "True" else COLLECTED - timedelta(hours=30)),
            },
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _time(start)},
        ],
        "containerStatuses": [
            {
                "name": "main",
                "ready": ready == "True",
                "restartCount": 41 if waiting else 0,
                "state": state,
                "image": "registry.example/ml/server:2.4",
            }
        ],
    }


def _between(rng: random.Random, low: float, high: float) -> float:
    return low + (high - low) * rng.random()


def sd_behaviour(rng: random.Random) -> dict[str, Any]:
    """A GenTD26-shaped Stable Diffusion replica (see the module docstring)."""
    mean = min(max(rng.lognormvariate(1.75, 0.6), 0.4), 12.0) / 100
    fb_mean = _between(rng, 16, 27) * GIB
    return {
        "compute_mean": mean,
        "compute_p95": min(0.77, mean * _between(rng, 3.0, 8.0)),
        "compute_max": min(1.0, mean * _between(rng, 8.0, 14.0)),
        "fb_used_mean_mib": fb_mean,
        "fb_used_max_mib": min(45 * GIB, fb_mean * _between(rng, 1.15, 1.7)),
        "resident_fraction": 1.0,
        "resident_idle_fraction": _between(rng, 0.63, 0.99),
    }


def steady(
    rng: random.Random, compute: tuple[float, float], fb_gib: tuple[float, float], resident_idle: float = 0.0
) -> dict[str, Any]:
    mean = _between(rng, *compute)
    fb = _between(rng, *fb_gib) * GIB
    return {
        "compute_mean": mean,
        "compute_p95": min(1.0, mean * 1.35 + 0.03),
        "compute_max": min(1.0, mean * 1.6 + 0.05),
        "fb_used_mean_mib": fb,
        "fb_used_max_mib": fb * 1.08,
        "resident_fraction": 1.0 if fb > 1024 else 0.0,
        "resident_idle_fraction": resident_idle if fb > 1024 else 0.0,
    }


def build_workloads(c: Cluster) -> None:
    rng = c.rng
    # research: busy 8-GPU trainers on H100 and A100
    for i, node in enumerate(("h100-00", "h100-01")):
        c.pod(
            "research",
            f"pretrain-moe-{i}",
            "research",
            c.job("research", f"pretrain-moe-{i}", "research"),
            8,
            node=node,
            behaviour=steady(rng, (0.84, 0.92), (76, 79)),
        )
    for i, node in enumerate(("a100-00", "a100-01")):
        c.pod(
            "research",
            f"finetune-llama-{i}",
            "research",
            c.job("research", f"finetune-llama-{i}", "research"),
            8,
            node=node,
            behaviour=steady(rng, (0.62, 0.75), (68, 74)),
        )
    # llm: tensor-parallel chat on 4 H100s per replica
    owner = c.deployment("llm", "chat-70b", "llm")
    for i, node in enumerate(("h100-02", "h100-02", "h100-03", "h100-03")):
        c.pod(
            "llm",
            f"chat-70b-{_suffix('chat', i)}",
            "llm",
            owner,
            4,
            node=node,
            behaviour=steady(rng, (0.45, 0.62), (73, 76), 0.04),
        )
    # genai: 24 Stable Diffusion replicas, six per A100 node (two GPUs left free on each)
    owner = c.deployment("genai", "sd-serving", "genai")
    for i in range(24):
        node = f"a100-{2 + i // 6:02d}"
        behaviour = sd_behaviour(rng)
        started = None
        if i == 23:  # restarted two days ago: too little of the window to judge
            started = COLLECTED - timedelta(days=2)
            behaviour["coverage"] = 0.28
        c.pod(
            "genai",
            f"sd-serving-{_suffix('sd', i)}",
            "genai",
            owner,
            1,
            node=node,
            behaviour=behaviour,
            started=started,
        )
    # llm: small embedding services holding whole L40S GPUs
    owner = c.deployment("llm", "embed-small", "llm")
    for i in range(6):
        c.pod(
            "llm",
            f"embed-small-{_suffix('embed', i)}",
            "llm",
            owner,
            1,
            node=f"l40s-{i // 4:02d}",
            behaviour=steady(rng, (0.05, 0.09), (2.8, 3.6), 0.35),
        )
    # recsys: a ranker on MIG slices
    owner = c.deployment("recsys", "ranker", "recsys")
    for i in range(20):
        c.pod(
            "recsys",
            f"ranker-{_suffix('ranker', i)}",
            "recsys",
            owner,
            1,
            node="a100-mig-00",
            resource=f"nvidia.com/mig-{MIG_PROFILE}",
            behaviour=steady(rng, (0.25, 0.45), (5.0, 7.5), 0.08),
            cpu="2",
            memory="16Gi",
        )
    # notebooks on L40S and L4, StatefulSets of one
    notebooks = [
        ("alice", "l40s-01", (0.005, 0.02), (6, 9), 0.93),
        ("bob", "l40s-01", (0.01, 0.03), (11, 14), 0.88),
        ("carol", "l40s-02", (0.0, 0.01), (0.2, 0.4), 0.0),
        ("dan", "l4-00", (0.0, 0.02), (5, 7), 0.9),
        ("erin", "l4-01", (0.15, 0.3), (9, 12), 0.2),
        ("frank", "l4-04", (0.0, 0.02), (5, 7), 0.9),
        ("grace", "l4-05", (0.0, 0.02), (5, 7), 0.9),
    ]
    for user, node, compute, fb, idle in notebooks:
        c.pod(
            "notebooks",
            f"notebook-{user}-0",
            "notebooks",
            _ref("apps/v1", "StatefulSet", f"notebook-{user}"),
            1,
            node=node,
            behaviour=steady(rng, compute, fb, idle),
            cpu="4",
            memory="32Gi",
        )
    # vision: a batch Job on L4, and a canary that crash-loops on its GPU
    for i, node in enumerate(("l4-02", "l4-06", "l4-07")):
        c.pod(
            "vision",
            f"batch-embed-{_suffix('be', i)}",
            "vision",
            c.job("vision", "batch-embed", "vision"),
            1,
            node=node,
            behaviour=steady(rng, (0.6, 0.7), (12, 15)),
            cpu="4",
        )
    c.pod(
        "vision",
        "detector-canary-7c9f-x2x4p",
        "vision",
        c.deployment("vision", "detector-canary", "vision"),
        1,
        node="l40s-02",
        waiting="CrashLoopBackOff",
        behaviour={
            "compute_mean": 0.0,
            "compute_p95": 0.0,
            "compute_max": 0.0,
            "fb_used_mean_mib": 0.0,
            "fb_used_max_mib": 0.0,
            "resident_fraction": 0.0,
            "resident_idle_fraction": 0.0,
        },
    )


def build_pending(c: Cluster) -> None:
    c.pod(
        "research",
        "finetune-llama-2",
        "research",
        c.job("research", "finetune-llama-2", "research"),
        8,
        node=None,
        selector={"nvidia.com/gpu.product": POOLS["a100"][0]},
        started=COLLECTED - timedelta(hours=14),
    )
    c.pod(
        "llm",
        f"chat-70b-{_suffix('chat', 9)}",
        "llm",
        c.deployment("llm", "chat-70b", "llm"),
        4,
        node=None,
        selector={"nvidia.com/gpu.product": POOLS["h100"][0]},
        started=COLLECTED - timedelta(hours=6),
    )
    c.pod(
        "vision",
        "seg-train-0",
        "vision",
        c.job("vision", "seg-train", "vision"),
        1,
        node=None,
        selector={"nvidia.com/gpu.product": "NVIDIA-A10G"},
        started=COLLECTED - timedelta(days=3),
    )
    c.pod(
        "notebooks",
        "notebook-heidi-0",
        "notebooks",
        _ref("apps/v1", "StatefulSet", "notebook-heidi"),
        1,
        node=None,
        tolerate=False,
        selector={"pool": "h100"},
        started=COLLECTED - timedelta(hours=20),
        cpu="4",
        memory="32Gi",
    )
    for i in range(4):
        name = f"sweep-lr-{i}"
        c.pod(
            "research",
            name,
            "research",
            c.job("research", name, "research"),
            2,
            node=None,
            gates=(KUEUE_GATE,),
            started=COLLECTED - timedelta(hours=9),
        )
        c.kueue.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {"name": f"job-{name}-{_suffix(name)}", "namespace": "research"},
                "spec": {"queueName": "research-gpu"},
                "status": {
                    "conditions": [
                        {
                            "type": "QuotaReserved",
                            "status": "False",
                            "reason": "Pending",
                            "message": "couldn't assign flavors to pod set main: insufficient unused quota "
                            "for nvidia.com/gpu in flavor h100, 2 more needed",
                        }
                    ]
                },
            }
        )


# --- telemetry ---------------------------------------------------------------------

# How busy the memory interface is for each unit of SM activity (DRAM_ACTIVE
# over GR_ENGINE_ACTIVE): one ratio for every pod, an illustration, not a
# measurement; GenTD26, which the rest follows, has no memory-bandwidth series.
DRAM_PER_COMPUTE = 0.6


def telemetry(c: Cluster) -> dict[str, Any]:
    rng = random.Random(SEED + 1)
    start = COLLECTED - WINDOW
    rows = []
    used: dict[str, set[int]] = {}
    for pod in c.pods:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        node = pod["spec"].get("nodeName")
        if not node or key not in c.behaviour or node in NO_EXPORTER:
            continue
        behaviour = c.behaviour[key]
        product, memory = next((p[0], p[1]) for n, p in POOLS.items() if node.startswith(n + "-"))
        for gpu, mig_id in c.devices[key]:
            used.setdefault(node, set()).add(gpu)
            jitter = _between(rng, 0.97, 1.03)
            metrics = {k: min(v * jitter, 1.0) if k.startswith("compute") else v for k, v in behaviour.items()}
            metrics.setdefault("coverage", round(_between(rng, 0.97, 1.0), 3))
            metrics["fb_total_mib"] = MIG_MIB if mig_id is not None else memory
            metrics["dram_active_mean"] = metrics["compute_mean"] * DRAM_PER_COMPUTE
            identity = {
                "node": node,
                "gpu": str(gpu),
                "uuid": f"GPU-{_uid('gpu', node, gpu)}",
                "model": product.replace("-", " "),
                "mig_profile": MIG_PROFILE if mig_id is not None else None,
                "mig_id": mig_id,
                "namespace": key[0],
                "pod": key[1],
                "container": "main",
            }
            rows.append(tm.gpu_row(identity, _rounded(metrics)))
    for name, (product, memory, count, how_many, _, _) in POOLS.items():
        for index in range(how_many):
            node = f"{name}-{index:02d}"
            if node in NO_EXPORTER or name == "a100-mig":
                continue
            for gpu in range(count):
                if gpu in used.get(node, set()):
                    continue
                identity = {
                    "node": node,
                    "gpu": str(gpu),
                    "uuid": f"GPU-{_uid('gpu', node, gpu)}",
                    "model": product.replace("-", " "),
                }
                rows.append(
                    tm.gpu_row(
                        identity,
                        {
                            "compute_mean": 0.0,
                            "compute_p95": 0.0,
                            "compute_max": 0.0,
                            "fb_used_mean_mib": 0.0,
                            "fb_used_max_mib": 0.0,
                            "fb_total_mib": memory,
                            "resident_fraction": 0.0,
                            "resident_idle_fraction": 0.0,
                            "dram_active_mean": 0.0,
                            "coverage": 1.0,
                        },
                    )
                )
    return tm.result(
        source="prometheus",
        endpoint="http://prometheus.monitoring.svc:9090",
        window=tm.window(start, COLLECTED, 60),
        signals={
            "compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "memory": "DCGM_FI_DEV_FB_USED",
            "occupancy": None,
            "tensor": None,
            "dram": "DCGM_FI_PROF_DRAM_ACTIVE",
            "pcie": None,
            "nvlink": None,
        },
        params={"resident_fb_mib": 1024, "idle_compute": 0.05},
        queries=10,
        gpu_rows=rows,
        errors=[],
    )


def _rounded(metrics: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}


# --- the snapshot ----------------------------------------------------------------------


def build() -> dict[str, Any]:
    rng = random.Random(SEED)
    cluster = Cluster(make_nodes(), rng)
    build_workloads(cluster)
    build_pending(cluster)
    cluster_policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "mig": {"strategy": "mixed"},
            "devicePlugin": {"enabled": True},
            "migManager": {"enabled": True, "config": {"default": "all-disabled"}},
        },
    }
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": _time(COLLECTED),
        "cluster": {"server": SERVER, "context": "demo"},
        "objects": {
            "nodes": cluster.nodes,
            "pods": cluster.pods,
            "events": cluster.events,
            "replicasets": cluster.replicasets,
            "jobs": cluster.jobs,
            "configmaps": [],
            "clusterpolicies": [cluster_policy],
            "resourceclaims": [],
            "resourceslices": [],
            "kueueworkloads": cluster.kueue,
            "workloads": list(cluster.workloads.values()),
        },
        "absent": ["resource.k8s.io/v1"],
        "errors": [],
        "telemetry": telemetry(cluster),
    }


def seed_history(path: Path, snapshot: dict[str, Any]) -> None:
    """Five earlier monthly runs, trending towards today's counts (synthetic)."""
    from gpuaudit.report import history
    from gpuaudit.report.build import cluster_name

    nodes_gpus = 112.0
    # months back -> (allocated, active, idle resident): resident models grew
    # as the Stable Diffusion service scaled out
    earlier = [(88, 52, 24), (85, 51, 20), (80, 50, 16), (76, 48, 12), (70, 46, 8)]
    for months_back, (allocated, active, resident) in enumerate(earlier, start=1):
        moment = COLLECTED.replace(day=15) - timedelta(days=30 * months_back)
        history.record(
            path,
            history.RunSummary(
                cluster=cluster_name({}, snapshot),
                collected_at=moment,
                command="demo",
                gpus={
                    "total": nodes_gpus,
                    "allocated": allocated,
                    "active": active,
                    "resident_idle": resident,
                    "idle": allocated - active - resident - 4,
                    "no_data": 4,
                    "free": nodes_gpus - allocated,
                },
                pending_pods=max(8 - months_back, 1),
                pending_gpus=22.0 - 3 * months_back,
                coverage=0.9,
                idle_cost_per_hour=None,
                allocated_cost_per_hour=None,
                findings=0,
            ),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "examples" / "demo-snapshot.json.gz")
    parser.add_argument("--history", type=Path, help="Also seed this history DB with earlier runs.")
    args = parser.parse_args(argv)
    snapshot = build()
    write_snapshot(snapshot, args.output)
    objects = snapshot["objects"]
    print(
        f"wrote {args.output}: {len(objects['nodes'])} nodes, {len(objects['pods'])} pods, "
        f"{len(snapshot['telemetry']['gpus'])} telemetry GPU rows",
        file=sys.stderr,
    )
    if args.history:
        seed_history(args.history, snapshot)
        print(f"seeded {args.history} with five earlier monthly runs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
