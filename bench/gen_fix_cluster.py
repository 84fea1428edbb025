"""A recorded large cluster for `gpuaudit fix --snapshot` at scale (issue 35).

    .venv/bin/python bench/gen_fix_cluster.py -o /tmp/large.json.gz

The Alibaba trace's cluster (tests/clusters/alibaba.py: 1,213 nodes, 6,212
GPUs, 8,152 pods) as a snapshot, with the Deployments that own its
ReplicaSets recorded as the collector keeps them ("workloads"), plus an LLM
pool of the kinds that broke `fix` at scale:

- 16 H100 nodes (128 GPUs) tainted ``dedicated=llm:NoSchedule``;
- NIM servers (image nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0, no model
  flag) and vLLM servers (--gpu-memory-utilization 0.9) on them, tolerating
  the taint, low compute and most of the memory resident;
- Deployments that require the H100 product but not the taint: Pending with
  the scheduler's "untolerated taint" message;
- a gpu-burn Deployment; pre-training Jobs whose args set --max_steps; a bare
  Job and a bare Pod; a Deployment whose args carry a ``${MODEL_ID}``
  placeholder;
- rerankers pinned to one node by hostname, torchrun Deployments without a
  /dev/shm or with one CPU core for four GPUs, vLLM at tensor parallel 2 on
  four GPUs.

Telemetry (7 days, GR_ENGINE_ACTIVE and FB_USED per GPU) covers two of the
six trace teams (search, nlp) and the LLM pool; the rest have none.
Deterministic. Used by bench/fix_scale.py.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuaudit.model import telemetry as tm  # noqa: E402
from gpuaudit.sources.snapshot import write_snapshot  # noqa: E402
from tests.clusters import alibaba  # noqa: E402
from tests.clusters.scheduler import Scheduler, failed_scheduling_event  # noqa: E402

COLLECTED = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
WINDOW = timedelta(days=7)
MEASURED_TEAMS = ("search", "nlp")
H100 = "NVIDIA-H100-80GB-HBM3"
H100_MIB = 81559
LLM_TAINT = {"key": "dedicated", "value": "llm", "effect": "NoSchedule"}
LLM_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}


# The GPU Operator as installed: whole GPUs, MIG manager on, no sharing config.
CLUSTER_POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy"},
    "spec": {
        "mig": {"strategy": "mixed"},
        "devicePlugin": {"enabled": True},
        "migManager": {"enabled": True, "config": {"default": "all-disabled"}},
    },
}


def _uid(*parts: object) -> str:
    d = hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()
    return f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _h100_node(index: int) -> dict[str, Any]:
    name = f"llm-h100-{index:02d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": H100,
        "nvidia.com/gpu.memory": str(H100_MIB),
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-disabled",
        "pool": "llm",
    }
    resources = {"cpu": "192", "memory": "2048Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": _uid("Node", name), "labels": labels},
        "spec": {"taints": [dict(LLM_TAINT)]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _deployment_of(rs: dict[str, Any]) -> dict[str, Any]:
    ref = rs["metadata"]["ownerReferences"][0]
    labels = {"app": rs["metadata"]["labels"]["app"]}
    template = copy.deepcopy(rs["spec"]["template"])
    template["metadata"]["labels"] = dict(labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": ref["name"],
            "namespace": rs["metadata"]["namespace"],
            "uid": ref["uid"],
            "labels": {"team": rs["metadata"]["namespace"]},
        },
        "spec": {"replicas": rs["spec"]["replicas"], "selector": {"matchLabels": labels}, "template": template},
    }


class Llm:
    """The LLM pool's workloads, their pods, and how each behaves."""

    def __init__(self) -> None:
        self.workloads: list[dict[str, Any]] = []
        self.replicasets: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.behaviour: dict[str, dict[str, float]] = {}  # pod -> metrics

    def deployment(self, name: str, namespace: str, spec: dict[str, Any], replicas: int, metrics: dict | None) -> None:
        labels = {"app": name}
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": _uid("Deployment", namespace, name),
                "labels": {"team": namespace},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
        pod_hash = hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()[:9]
        rs_name = f"{name}-{pod_hash}"
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": namespace,
                "uid": _uid("ReplicaSet", namespace, rs_name),
                "labels": {**labels, "pod-template-hash": pod_hash},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": name,
                        "uid": deployment["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": {**labels, "pod-template-hash": pod_hash}}, "spec": spec},
            },
        }
        self.workloads.append(deployment)
        self.replicasets.append(rs)
        for i in range(replicas):
            pod_name = f"{rs_name}-{hashlib.sha1(f'{rs_name}/{i}'.encode()).hexdigest()[:5]}"
            self._pod(
                pod_name,
                namespace,
                spec,
                {**labels, "pod-template-hash": pod_hash},
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs_name,
                    "uid": rs["metadata"]["uid"],
                    "controller": True,
                },
                metrics,
            )

    def job(self, name: str, namespace: str, spec: dict[str, Any], metrics: dict | None, owned: bool = True) -> None:
        uid = _uid("Job", namespace, name)
        labels = {"batch.kubernetes.io/job-name": name}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {"team": namespace}},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": spec}},
            "status": {"active": 1, "startTime": _time(COLLECTED - timedelta(days=3))},
        }
        self.jobs.append(job)
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
        self._pod(f"{name}-{hashlib.sha1(name.encode()).hexdigest()[:5]}", namespace, spec, labels, ref, metrics)

    def bare_pod(self, name: str, namespace: str, spec: dict[str, Any], metrics: dict | None) -> None:
        self._pod(name, namespace, spec, {"app": name}, None, metrics)

    def _pod(
        self, name: str, namespace: str, spec: dict[str, Any], labels: dict, owner: dict | None, metrics: dict | None
    ) -> None:
        meta: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": _uid("Pod", namespace, name),
            "labels": dict(labels),
            "creationTimestamp": _time(COLLECTED - timedelta(days=9)),
        }
        if owner:
            meta["ownerReferences"] = [owner]
        self.pods.append(
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(spec), "status": {}}
        )
        if metrics is not None:
            self.behaviour[name] = metrics


def _container(
    name: str, image: str, args: list[str], gpus: int, cpu: str = "8", memory: str = "64Gi", env: list | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {
            "requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": memory, "nvidia.com/gpu": str(gpus)},
        },
    }
    if args:
        c["args"] = args
    if env:
        c["env"] = env
    return c


def _spec(containers: list[dict], *, tolerate: bool, h100: bool = True, restart: str = "Always") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "restartPolicy": restart}
    if h100:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": H100}
    if tolerate:
        spec["tolerations"] = [dict(LLM_TOLERATION)]
    return spec


SERVING = {"compute_mean": 0.04, "compute_p95": 0.12, "fb_used_mean_mib": 72500.0, "fb_used_max_mib": 73400.0}
TRAINING = {"compute_mean": 0.91, "compute_p95": 0.98, "fb_used_mean_mib": 70100.0, "fb_used_max_mib": 78200.0}
BURN = {"compute_mean": 0.99, "compute_p95": 1.0, "fb_used_mean_mib": 60000.0, "fb_used_max_mib": 61000.0}


def llm_pool() -> Llm:
    llm = Llm()
    for i in range(10):  # NIM: the model is in the image name only
        image = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0"
        llm.deployment(
            f"nim-llama-8b-{i:02d}", "llm", _spec([_container("nim", image, [], 1)], tolerate=True), 2, dict(SERVING)
        )
    for i in range(10):  # vLLM: 90% of the memory reserved for the KV cache
        args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.9"]
        llm.deployment(
            f"vllm-chat-{i:02d}",
            "llm",
            _spec([_container("vllm", "vllm/vllm-openai:v0.10.0", args, 1)], tolerate=True),
            2,
            dict(SERVING),
        )
    for i in range(8):  # want H100s, do not tolerate the pool's taint: Pending
        args = ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4"]
        llm.deployment(
            f"chat-70b-{i:02d}",
            "nlp",
            _spec([_container("server", "registry.example.com/serve:2", args, 4)], tolerate=False),
            1,
            None,
        )
    llm.deployment(
        "gpu-burn-in",
        "ops",
        _spec(
            [_container("burn", "oguzpastirmaci/gpu-burn:latest", ["86400"], 1, cpu="2", memory="4Gi")], tolerate=True
        ),
        1,
        dict(BURN),
    )
    for i in range(4):  # pre-training: its own args say how long it runs
        args = [
            "--model_name_or_path",
            "meta-llama/Llama-3.1-8B",
            "--max_steps",
            "500000",
            "--per_device_train_batch_size",
            "8",
        ]
        llm.job(
            f"pretrain-8b-{i}",
            "research",
            _spec([_container("train", "registry.example.com/train:5", args, 8)], tolerate=True, restart="Never"),
            dict(TRAINING),
        )
    for i in range(6):  # pinned to one node by hostname
        spec = _spec([_container("ranker", "registry.example.com/rerank:3", ["--port", "8080"], 1)], tolerate=True)
        spec["nodeSelector"] = {"kubernetes.io/hostname": f"llm-h100-{i + 10:02d}"}
        llm.deployment(f"rerank-{i:02d}", "search", spec, 1, dict(TRAINING))
    for i in range(4):  # multi-GPU torchrun without a /dev/shm
        args = ["torchrun", "--nproc_per_node=4", "train.py", "--num_workers", "8"]
        llm.deployment(
            f"embed-train-{i:02d}",
            "research",
            _spec([_container("train", "registry.example.com/train:5", args, 4)], tolerate=True),
            1,
            dict(TRAINING),
        )
    for i in range(3):  # one CPU core for four GPUs
        args = ["torchrun", "--nproc_per_node=4", "finetune.py"]
        llm.deployment(
            f"finetune-lowcpu-{i:02d}",
            "research",
            _spec([_container("train", "registry.example.com/train:5", args, 4, cpu="1")], tolerate=True),
            1,
            dict(TRAINING),
        )
    for i in range(3):  # tensor parallel 2 on 4 GPUs
        args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2"]
        llm.deployment(
            f"vllm-tp2-{i:02d}",
            "llm",
            _spec([_container("vllm", "vllm/vllm-openai:v0.10.0", args, 4)], tolerate=True),
            1,
            dict(SERVING),
        )
    env = [{"name": "MODEL_ID", "value": "${MODEL_ID}"}]
    llm.deployment(
        "templated-chat",
        "llm",
        _spec(
            [
                _container(
                    "server", "registry.example.com/serve:2", ["--model", "${MODEL_ID}", "--port", "8000"], 1, env=env
                )
            ],
            tolerate=True,
        ),
        1,
        dict(SERVING),
    )
    llm.job(
        "eval-adhoc",
        "research",
        _spec(
            [_container("eval", "registry.example.com/eval:1", ["--epochs", "3"], 1)], tolerate=True, restart="Never"
        ),
        dict(TRAINING),
        owned=False,
    )
    llm.bare_pod(
        "debug-shell",
        "research",
        _spec([_container("shell", "nvcr.io/nvidia/pytorch:24.10-py3", ["sleep", "infinity"], 1)], tolerate=True),
        {"compute_mean": 0.0, "compute_p95": 0.0, "fb_used_mean_mib": 900.0, "fb_used_max_mib": 1200.0},
    )
    return llm


def _gpus(pod: dict[str, Any]) -> int:
    resources = pod["spec"]["containers"][0].get("resources") or {}
    return int((resources.get("limits") or resources.get("requests") or {}).get("nvidia.com/gpu", 0))


def _gpu_rows(pod: dict[str, Any], metrics: dict[str, float], memory: float, first_gpu: int) -> list[dict]:
    gpus = _gpus(pod)
    rows = []
    for g in range(gpus):
        identity = {
            "node": pod["spec"]["nodeName"],
            "gpu": str(first_gpu + g),
            "uuid": f"GPU-{_uid(pod['spec']['nodeName'], first_gpu + g)}",
            "namespace": pod["metadata"]["namespace"],
            "pod": pod["metadata"]["name"],
            "container": pod["spec"]["containers"][0]["name"],
        }
        values = {
            **metrics,
            "compute_max": min(1.0, metrics["compute_p95"] * 1.1),
            "fb_total_mib": memory,
            "coverage": 0.98,
        }
        rows.append(tm.gpu_row(identity, values))
    return rows


def build(measured_teams: tuple[str, ...] = MEASURED_TEAMS) -> dict[str, Any]:
    cluster = alibaba.build()
    nodes = cluster["nodes"] + [_h100_node(i) for i in range(16)]
    deployments = {}
    for rs in cluster["replicasets"]:
        d = _deployment_of(rs)
        deployments[(d["metadata"]["namespace"], d["metadata"]["name"])] = d
    llm = llm_pool()
    scheduler = Scheduler(nodes)
    for pod in cluster["pods"]:
        node = pod["spec"].get("nodeName")
        if node and pod["status"].get("phase") in ("Running", "Pending"):
            scheduler.account(pod, node)
    events = list(cluster["events"])
    for pod in llm.pods:
        node = scheduler.bind(pod)
        if node is None:
            message = scheduler.fit_error(pod)
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            }
            events.append(
                failed_scheduling_event(
                    pod,
                    message,
                    first=_time(COLLECTED - timedelta(hours=5)),
                    last=_time(COLLECTED - timedelta(minutes=2)),
                    count=40,
                )
            )
        else:
            pod["spec"]["nodeName"] = node
            started = _time(COLLECTED - timedelta(days=9))
            pod["status"] = {
                "phase": "Running",
                "startTime": started,
                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": c["name"], "ready": True, "restartCount": 0, "state": {"running": {"startedAt": started}}}
                    for c in pod["spec"]["containers"]
                ],
            }
    telemetry_rows: list[dict] = []
    used: dict[str, int] = {}
    memory_of = {
        n["metadata"]["name"]: float(n["metadata"]["labels"].get("nvidia.com/gpu.memory") or 16384) for n in nodes
    }
    for pod in cluster["pods"]:
        if pod["metadata"]["namespace"] not in measured_teams or pod["status"].get("phase") != "Running":
            continue
        milli = int(pod["metadata"].get("annotations", {}).get(alibaba.MILLI_ANNOTATION, 1000))
        node = pod["spec"]["nodeName"]
        memory = memory_of[node]
        share = milli / 1000
        metrics = {
            "compute_mean": round(0.6 * share, 3),
            "compute_p95": round(min(1.0, 0.9 * share), 3),
            "fb_used_mean_mib": round(memory * share * 0.7, 1),
            "fb_used_max_mib": round(memory * share * 0.8, 1),
        }
        telemetry_rows += _gpu_rows(pod, metrics, memory, used.get(node, 0))
        used[node] = used.get(node, 0) + _gpus(pod)
    for pod in llm.pods:
        name = pod["metadata"]["name"]
        if pod["status"]["phase"] != "Running" or name not in llm.behaviour:
            continue
        node = pod["spec"]["nodeName"]
        telemetry_rows += _gpu_rows(pod, llm.behaviour[name], H100_MIB, used.get(node, 0))
        used[node] = used.get(node, 0) + _gpus(pod)
    telemetry = tm.result(
        source="prometheus",
        endpoint="http://prometheus.monitoring.svc:9090",
        window=tm.window(COLLECTED - WINDOW, COLLECTED, 60),
        signals={
            "compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "memory": "DCGM_FI_DEV_FB_USED",
            "occupancy": None,
            "tensor": None,
            "dram": None,
            "pcie": None,
            "nvlink": None,
        },
        params={"resident_fb_mib": 1024, "idle_compute": 0.05},
        queries=10,
        gpu_rows=telemetry_rows,
        errors=[],
    )
    objects = {
        "nodes": nodes,
        "pods": cluster["pods"] + llm.pods,
        "events": events,
        "replicasets": cluster["replicasets"] + llm.replicasets,
        "jobs": cluster["jobs"] + llm.jobs,
        "configmaps": [],
        "clusterpolicies": [CLUSTER_POLICY],
        "resourceclaims": [],
        "resourceslices": [],
        "kueueworkloads": [],
        "workloads": list(deployments.values()) + llm.workloads,
    }
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": _time(COLLECTED),
        "cluster": {"server": "https://openb.example:6443", "context": "openb-large"},
        "objects": objects,
        "absent": [],
        "errors": [],
        "telemetry": telemetry,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument(
        "--measured-teams",
        default=",".join(MEASURED_TEAMS),
        help="trace teams the telemetry covers, comma-separated, or 'all' (default: %(default)s)",
    )
    args = parser.parse_args()
    teams = alibaba.TEAMS if args.measured_teams == "all" else tuple(args.measured_teams.split(","))
    if not alibaba.available():
        sys.exit(f"alibaba-gpu-v2023 not found in {alibaba.DATA_DIR}")
    snapshot = build(teams)
    write_snapshot(snapshot, args.output)
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in snapshot["objects"]["nodes"])
    print(
        f"wrote {args.output}: {len(snapshot['objects']['nodes'])} nodes, {gpus} GPUs, "
        f"{len(snapshot['objects']['pods'])} pods, {len(snapshot['telemetry']['gpus'])} telemetry rows"
    )


if __name__ == "__main__":
    main()
