"""Generate a synthetic manifest repository: N files of realistic GPU workloads.

The mix follows what GPU manifest repositories hold (see ../shared/corpus): mostly
Deployments, training jobs (Kubeflow, JobSet, Volcano) and inference services
(KServe, Ray, LeaderWorkerSet), each with the neighbours a real file has (a
Service, a ConfigMap) and the fields that make pod specs long (env, probes,
volumes, tolerations, affinity). Some workloads are meant to be found (one CPU
for eight GPUs, a hostname pin, no /dev/shm); most are not.

The same ``--seed`` and ``--files`` always give byte-identical files, so a
benchmark run can be repeated by anyone.

    python bench/gen_manifests.py OUT_DIR --files 1000 [--seed 8]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

TEAMS = ("research", "inference", "platform", "vision", "speech", "recsys", "llm", "notebooks")
IMAGES = (
    "nvcr.io/nvidia/pytorch:24.08-py3",
    "nvcr.io/nvidia/tritonserver:24.08-py3",
    "vllm/vllm-openai:v0.6.3",
    "ghcr.io/huggingface/text-generation-inference:2.3.1",
    "rayproject/ray-ml:2.35.0-gpu",
    "tensorflow/tensorflow:2.17.0-gpu",
    "nvcr.io/nvidia/nemo:24.07",
    "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime",
)
PRODUCTS = (
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L4",
    "Tesla-T4",
    "NVIDIA-A10G",
    "NVIDIA-H200",
)
MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen2.5-14B-Instruct",
    "google/gemma-2-9b-it",
    "stabilityai/stable-diffusion-xl-base-1.0",
)
WORDS = (
    "alpha", "bert", "chat", "delta", "embed", "falcon", "gemma", "hydra", "iris",
    "juno", "kite", "llama", "mamba", "nova", "orca", "phi", "quill", "rerank",
    "sdxl", "tts", "vit", "whisper", "xgb", "yolo", "zephyr",
)  # fmt: skip


class Gen:
    """One seeded source of choices, so every helper draws from the same stream."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.serial = 0

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq: Any) -> Any:
        return self.r.choice(seq)

    def name(self) -> str:
        self.serial += 1
        return f"{self.pick(WORDS)}-{self.pick(WORDS)}-{self.serial}"

    # --- pieces of a pod spec -------------------------------------------------

    def gpu_resources(self, gpus: int) -> Obj:
        cpu = self.pick(("1", "2", "4", "8", "16", "500m")) if self.chance(0.85) else None
        requests: Obj = {"memory": self.pick(("8Gi", "16Gi", "32Gi", "64Gi", "128Gi"))}
        if cpu is not None:
            requests["cpu"] = cpu
        kind = self.r.random()
        if gpus == 0:  # a CPU-only pod (a Ray head, a launcher)
            limits: Obj = {}
        elif kind < 0.08:
            limits = {f"nvidia.com/mig-{self.pick(MIG_PROFILES)}": 1}
        elif kind < 0.12:
            limits = {"nvidia.com/gpu.shared": 1}
        else:
            limits = {"nvidia.com/gpu": gpus}
        limits["memory"] = requests["memory"]
        return {"requests": requests, "limits": limits}

    def env(self, model: str) -> list[Obj]:
        env: list[Obj] = [
            {"name": "MODEL_ID", "value": model},
            {"name": "HF_HOME", "value": "/models/cache"},
            {"name": "NCCL_DEBUG", "value": self.pick(("WARN", "INFO"))},
        ]
        if self.chance(0.5):
            env.append(
                {
                    "name": "HF_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
                }
            )
        if self.chance(0.3):
            env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        if self.chance(0.2):
            env.append({"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"})
        return env

    def container(self, name: str, gpus: int, *, serving: bool, shm: bool) -> Obj:
        model = self.pick(MODELS)
        image = self.pick(IMAGES)
        c: Obj = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent"}
        if serving:
            c["args"] = ["--model", model, "--port", "8000", "--tensor-parallel-size", str(gpus)]
            c["ports"] = [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
            probe = {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10}
            c["readinessProbe"] = {**probe, "initialDelaySeconds": 60}
            c["livenessProbe"] = {**probe, "initialDelaySeconds": 300, "failureThreshold": 5}
        else:
            c["command"] = ["torchrun", f"--nproc_per_node={gpus}", "train.py"]
            c["args"] = ["--config", f"/etc/train/{self.pick(WORDS)}.yaml", "--bf16"]
        c["env"] = self.env(model)
        c["resources"] = self.gpu_resources(gpus)
        mounts = [{"name": "model-cache", "mountPath": "/models/cache"}]
        if shm:
            mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        c["volumeMounts"] = mounts
        return c

    def pod_spec(self, containers: list[Obj], *, shm: bool, restart: str | None = None) -> Obj:
        spec: Obj = {}
        if restart:
            spec["restartPolicy"] = restart
        if self.chance(0.6):
            spec["serviceAccountName"] = "gpu-workloads"
        if self.chance(0.7):
            spec["nodeSelector"] = {"nvidia.com/gpu.product": self.pick(PRODUCTS)}
        if self.chance(0.04):  # a hostname pin, the classic placement finding
            spec.setdefault("nodeSelector", {})["kubernetes.io/hostname"] = f"gpu-node-{self.r.randint(1, 64):02d}"
        elif self.chance(0.2):
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": [self.pick(PRODUCTS), self.pick(PRODUCTS)],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        spec["containers"] = containers
        volumes: list[Obj] = [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
        if shm:
            empty: Obj = {"medium": "Memory"}
            if self.chance(0.5):
                empty["sizeLimit"] = self.pick(("8Gi", "16Gi", "32Gi"))
            volumes.append({"name": "dshm", "emptyDir": empty})
        spec["volumes"] = volumes
        if self.chance(0.3):
            spec["securityContext"] = {"runAsNonRoot": True, "fsGroup": 1000}
        return spec

    def template(self, name: str, gpus: int, *, serving: bool, restart: str | None = None) -> Obj:
        # Multi-GPU pods usually mount a memory-backed /dev/shm; some forget.
        shm = self.chance(0.8 if gpus > 1 else 0.2)
        containers = [self.container(name, gpus, serving=serving, shm=shm)]
        if serving and self.chance(0.15):
            containers.append(
                {
                    "name": "metrics-sidecar",
                    "image": "prom/statsd-exporter:v0.27.1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            )
        return {
            "metadata": {"labels": {"app": name, "team": self.pick(TEAMS)}},
            "spec": self.pod_spec(containers, shm=shm, restart=restart),
        }

    def meta(self, name: str, namespace: str) -> Obj:
        meta: Obj = {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": namespace},
        }
        if self.chance(0.03):
            meta["annotations"] = {"gpuaudit.io/ignore.GPA-AL-001": "latency SLO needs a dedicated GPU"}
        return meta

    def gpus(self) -> int:
        return self.pick((1, 1, 1, 2, 4, 8, 8))


# --- one builder per kind: (gen, name, namespace) -> documents ----------------------


def deployment(g: Gen, name: str, ns: str, kind: str = "Deployment") -> list[Obj]:
    spec: Obj = {
        "replicas": g.pick((1, 1, 2, 3, 4)),
        "selector": {"matchLabels": {"app": name}},
        "template": g.template(name, g.pick((1, 1, 1, 2, 4)), serving=True),
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    docs = [{"apiVersion": "apps/v1", "kind": kind, "metadata": g.meta(name, ns), "spec": spec}]
    docs.append(service(name, ns))
    return docs


def statefulset(g: Gen, name: str, ns: str) -> list[Obj]:
    return deployment(g, name, ns, "StatefulSet")


def service(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8000}],
        },
    }


def job(g: Gen, name: str, ns: str) -> list[Obj]:
    spec: Obj = {
        "backoffLimit": 2,
        "parallelism": g.pick((1, 1, 2, 4)),
        "template": g.template(name, g.gpus(), serving=False, restart="Never"),
    }
    return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": g.meta(name, ns), "spec": spec}]


def cronjob(g: Gen, name: str, ns: str) -> list[Obj]:
    inner = {"template": g.template(name, g.gpus(), serving=False, restart="OnFailure")}
    spec = {"schedule": f"{g.r.randint(0, 59)} 2 * * *", "jobTemplate": {"spec": inner}}
    return [{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": g.meta(name, ns), "spec": spec}]


def pod(g: Gen, name: str, ns: str) -> list[Obj]:
    t = g.template(name, g.pick((1, 1, 2)), serving=False, restart="Never")
    meta = {**g.meta(name, ns), "labels": t["metadata"]["labels"]}
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t["spec"]}]


def daemonset(g: Gen, name: str, ns: str) -> list[Obj]:
    t = g.template(name, 1, serving=True)
    spec = {"selector": {"matchLabels": {"app": name}}, "template": t}
    return [{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": g.meta(name, ns), "spec": spec}]


def kubeflow(g: Gen, name: str, ns: str, kind: str, key: str, roles: tuple[str, ...]) -> list[Obj]:
    gpus = g.gpus()
    specs = {
        role: {
            "replicas": 1 if i == 0 else g.pick((1, 2, 3, 7)),
            "restartPolicy": "OnFailure",
            "template": g.template(name.split("-")[0], gpus, serving=False),
        }
        for i, role in enumerate(roles)
    }
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "metadata": g.meta(name, ns),
            "spec": {key: specs},
        }
    ]


def pytorchjob(g: Gen, name: str, ns: str) -> list[Obj]:
    return kubeflow(g, name, ns, "PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker"))


def tfjob(g: Gen, name: str, ns: str) -> list[Obj]:
    return kubeflow(g, name, ns, "TFJob", "tfReplicaSpecs", ("Chief", "Worker", "PS"))


def mpijob(g: Gen, name: str, ns: str) -> list[Obj]:
    docs = kubeflow(g, name, ns, "MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker"))
    docs[0]["apiVersion"] = "kubeflow.org/v2beta1"
    docs[0]["spec"]["slotsPerWorker"] = 8
    return docs


def ray_cluster_spec(g: Gen, name: str) -> Obj:
    head = g.template("ray-head", 0, serving=False)
    workers = [
        {
            "groupName": f"gpu-{size}",
            "replicas": g.pick((1, 2, 4)),
            "minReplicas": 0,
            "maxReplicas": 8,
            "rayStartParams": {},
            "template": g.template("ray-worker", size, serving=False),
        }
        for size in sorted({g.pick((1, 2, 4, 8)) for _ in range(g.pick((1, 2)))})
    ]
    return {
        "rayVersion": "2.35.0",
        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": head},
        "workerGroupSpecs": workers,
    }


def raycluster(g: Gen, name: str, ns: str) -> list[Obj]:
    return [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": g.meta(name, ns),
            "spec": ray_cluster_spec(g, name),
        }
    ]


def rayjob(g: Gen, name: str, ns: str) -> list[Obj]:
    spec = {
        "entrypoint": "python /home/ray/samples/train.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": ray_cluster_spec(g, name),
    }
    return [{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": g.meta(name, ns), "spec": spec}]


def rayservice(g: Gen, name: str, ns: str) -> list[Obj]:
    spec = {
        "serveConfigV2": "applications:\n  - name: llm\n    import_path: serve:app\n",
        "rayClusterConfig": ray_cluster_spec(g, name),
    }
    return [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": g.meta(name, ns),
            "spec": spec,
        }
    ]


def inferenceservice(g: Gen, name: str, ns: str) -> list[Obj]:
    gpus = g.pick((1, 1, 2, 4))
    model = g.container("kserve-container", gpus, serving=True, shm=False)
    predictor: Obj = {
        "minReplicas": g.pick((1, 2)),
        "maxReplicas": 4,
        "model": {
            "modelFormat": {"name": "huggingface"},
            "storageUri": f"hf://{g.pick(MODELS)}",
            "args": model["args"],
            "env": model["env"],
            "resources": model["resources"],
        },
    }
    if g.chance(0.5):
        predictor["nodeSelector"] = {"nvidia.com/gpu.product": g.pick(PRODUCTS)}
    predictor["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {
                **g.meta(name, ns),
                "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"},
            },
            "spec": {"predictor": predictor},
        }
    ]


def llminferenceservice(g: Gen, name: str, ns: str) -> list[Obj]:
    t = g.template(name, g.pick((1, 2, 4, 8)), serving=True)
    return [
        {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "LLMInferenceService",
            "metadata": g.meta(name, ns),
            "spec": {
                "model": {"uri": f"hf://{g.pick(MODELS)}"},
                "replicas": g.pick((1, 2)),
                "template": t["spec"],
            },
        }
    ]


def leaderworkerset(g: Gen, name: str, ns: str) -> list[Obj]:
    gpus = g.pick((4, 8))
    spec = {
        "replicas": g.pick((1, 2)),
        "leaderWorkerTemplate": {
            "size": g.pick((2, 4)),
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": g.template("leader", gpus, serving=True),
            "workerTemplate": g.template("worker", gpus, serving=False),
        },
    }
    return [
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": g.meta(name, ns),
            "spec": spec,
        },
        service(name, ns),
    ]


def jobset(g: Gen, name: str, ns: str) -> list[Obj]:
    jobs = [
        {
            "name": role,
            "replicas": g.pick((1, 2, 4)),
            "template": {
                "spec": {
                    "parallelism": 2,
                    "completions": 2,
                    "backoffLimit": 0,
                    "template": g.template(role, g.gpus(), serving=False, restart="Never"),
                }
            },
        }
        for role in ("driver", "workers")[: g.pick((1, 2))]
    ]
    return [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": g.meta(name, ns),
            "spec": {"replicatedJobs": jobs},
        }
    ]


def volcanojob(g: Gen, name: str, ns: str) -> list[Obj]:
    gpus = g.gpus()
    tasks = [
        {
            "name": role,
            "replicas": 1 if role == "master" else g.pick((2, 4)),
            "template": g.template(role, gpus, serving=False, restart="OnFailure"),
        }
        for role in ("master", "worker")
    ]
    spec = {"minAvailable": 3, "schedulerName": "volcano", "queue": "gpu", "tasks": tasks}
    return [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": g.meta(name, ns),
            "spec": spec,
        }
    ]


def workflow(g: Gen, name: str, ns: str) -> list[Obj]:
    train = g.template("train", g.gpus(), serving=False)
    step: Obj = {
        "name": "train",
        "container": train["spec"]["containers"][0],
        "nodeSelector": train["spec"].get("nodeSelector", {}),
        "tolerations": train["spec"]["tolerations"],
    }
    prep = {
        "name": "prepare",
        "script": {
            "image": "python:3.12-slim",
            "command": ["python"],
            "source": "print('{{inputs.parameters.dataset}}')\n",
        },
        "inputs": {"parameters": [{"name": "dataset"}]},
    }
    steps = {
        "name": "main",
        "steps": [
            [{"name": "prepare", "template": "prepare", "arguments": {"parameters": [
                {"name": "dataset", "value": "{{workflow.parameters.dataset}}"}]}}],
            [{"name": "train", "template": "train"}],
        ],
    }  # fmt: skip
    return [
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {**g.meta(name, ns), "generateName": f"{name}-"},
            "spec": {
                "entrypoint": "main",
                "arguments": {"parameters": [{"name": "dataset", "value": "s3://data/train"}]},
                "templates": [steps, prep, step],
            },
        }
    ]


def trainjob(g: Gen, name: str, ns: str) -> list[Obj]:
    gpus = g.gpus()
    return [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": g.meta(name, ns),
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "image": g.pick(IMAGES),
                    "command": ["torchrun", "train.py"],
                    "numNodes": g.pick((1, 2, 4)),
                    "resourcesPerNode": {
                        "requests": {"cpu": str(4 * gpus), "memory": "64Gi"},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                },
            },
        }
    ]


def clusterpolicy(g: Gen, name: str, ns: str) -> list[Obj]:
    spec: Obj = {
        "operator": {"defaultRuntime": "containerd"},
        "driver": {"enabled": True},
        "toolkit": {"enabled": True},
        "devicePlugin": {"enabled": True},
        "dcgmExporter": {"enabled": True},
        "mig": {"strategy": g.pick(("single", "mixed"))},
    }
    if g.chance(0.5):
        spec["devicePlugin"]["config"] = {"name": "time-slicing-config", "default": "any"}
    return [
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": f"cluster-policy-{name}"},
            "spec": spec,
        }
    ]


def timeslicing_configmap(g: Gen, name: str, ns: str) -> list[Obj]:
    config = {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": g.pick((2, 4))}]}},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"time-slicing-config-{name}", "namespace": "gpu-operator"},
            "data": {"any": yaml.safe_dump(config, sort_keys=False)},
        }
    ]


# Kind -> (builder, weight): roughly the mix of the shared corpus.
KINDS: dict[str, tuple[Callable[[Gen, str, str], list[Obj]], float]] = {
    "Deployment": (deployment, 20),
    "StatefulSet": (statefulset, 5),
    "Job": (job, 8),
    "CronJob": (cronjob, 3),
    "Pod": (pod, 4),
    "DaemonSet": (daemonset, 1),
    "PyTorchJob": (pytorchjob, 9),
    "TFJob": (tfjob, 2),
    "MPIJob": (mpijob, 3),
    "RayCluster": (raycluster, 4),
    "RayJob": (rayjob, 3),
    "RayService": (rayservice, 2),
    "InferenceService": (inferenceservice, 9),
    "LLMInferenceService": (llminferenceservice, 2),
    "LeaderWorkerSet": (leaderworkerset, 3),
    "JobSet": (jobset, 3),
    "VolcanoJob": (volcanojob, 3),
    "Workflow": (workflow, 3),
    "TrainJob": (trainjob, 2),
    "ClusterPolicy": (clusterpolicy, 0.5),
    "TimeSlicingConfigMap": (timeslicing_configmap, 0.5),
}


def config_map(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "namespace": ns},
        "data": {"train.yaml": "epochs: 3\nlr: 2.0e-5\nbatch_size: 32\nbf16: true\n"},
    }


class _NoAliasDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """People write each probe out in full; no `&id001` anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_file(docs: list[Obj], as_json: bool, header: str) -> str:
    if as_json:
        if len(docs) == 1:
            return json.dumps(docs[0], indent=2) + "\n"
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2) + "\n"
    parts = [yaml.dump(d, Dumper=_NoAliasDumper, sort_keys=False, width=100) for d in docs]
    return f"# {header}\n" + "---\n".join(parts)


def generate(out: Path, files: int, seed: int) -> dict[str, int]:
    """Write ``files`` manifest files under ``out``; returns documents per kind."""
    g = Gen(seed)
    names = list(KINDS)
    weights = [KINDS[k][1] for k in names]
    counts: dict[str, int] = {}
    for i in range(files):
        kind = g.r.choices(names, weights)[0]
        builder = KINDS[kind][0]
        team = g.pick(TEAMS)
        name = g.name()
        docs = builder(g, name, team)
        if g.chance(0.3):
            docs.append(config_map(name, team))
        for d in docs:
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
        as_json = g.chance(0.03)
        folder = out / team / kind.lower()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{i:05d}-{name}.{'json' if as_json else 'yaml'}"
        path.write_text(render_file(docs, as_json, f"{kind} {name}: owned by team {team}"))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory to (re)create")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    counts = generate(args.out, args.files, args.seed)
    total = sum(counts.values())
    print(f"{args.files} files, {total} documents in {args.out}")
    for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {kind}")


if __name__ == "__main__":
    main()
