"""Operator kinds whose pods are not plain PodTemplateSpecs: the Spark
operator's SparkApplication (driver and executors written as SparkPodSpecs
— cores, memory, gpu — and GPUs that Spark's own resource scheduling asks
for through sparkConf), and RoleBasedGroup's roles in both API versions."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.sources.manifests import read_paths

TRUTH_FILE = Path(__file__).parent / "truth" / "manifests" / "spark.yaml"


def _build(path: Path):
    result = read_paths([path])
    workloads, errors = build_workloads(result.documents)
    return {w.name: w for w in workloads}, errors


def test_driver_and_executors_with_their_gpus_cpu_and_memory():
    workloads, errors = _build(TRUTH_FILE)
    assert not errors
    etl = workloads["rapids-etl"]
    assert etl.workload_class == "batch"
    driver, executor = etl.templates
    assert (driver.role, driver.replicas, executor.role, executor.replicas) == ("driver", 1, "executor", 4)
    (main,) = executor.containers
    assert main.name == "spark-kubernetes-executor"
    assert main.image == "nvcr.io/nvidia/spark-rapids:24.10.0-spark3.5"  # the application's image
    gpus = [(g.resource, g.count, g.pointer) for g in main.gpus]
    assert gpus == [("nvidia.com/gpu", 1.0, "/spec/executor/gpu/quantity")]
    assert (main.cpu_request, main.memory_request) == (4.0, 16 * 1024**3)
    assert executor.spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.2xlarge"}
    assert not driver.containers[0].gpus


def test_gpus_asked_for_by_spark_conf_with_a_vendor():
    workloads, _ = _build(TRUTH_FILE)
    driver, executor = workloads["rapids-conf"].templates
    (gpu,) = executor.containers[0].gpus
    assert (gpu.resource, gpu.count) == ("nvidia.com/gpu", 1.0)
    assert gpu.pointer == "/spec/sparkConf/spark.executor.resource.gpu.amount"
    assert [g.resource for g in driver.containers[0].gpus] == ["nvidia.com/gpu"]  # the operator's gpu field


def test_spark_defaults_and_unreadable_values(tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(
        "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\n"
        "metadata: {name: app}\n"
        "spec:\n"
        "  image: spark:3.5\n"
        '  sparkConf: {spark.executor.resource.gpu.amount: "1"}\n'  # no vendor: Spark asks Kubernetes for nothing
        "  driver: {memory: lots}\n"
        "  executor: {instances: 2, gpu: {name: nvidia.com/gpu, quantity: $GPUS}}\n"
    )
    workloads, errors = _build(path)
    driver, executor = workloads["app"].templates
    assert driver.containers[0].cpu_request == 1.0  # Spark's default core
    assert driver.containers[0].memory_request is None
    assert executor.containers[0].memory_request == 1024**3  # Spark's default 1g
    (gpu,) = executor.containers[0].gpus
    assert gpu.count is None
    messages = sorted(e.message for e in errors)
    assert any("memory: 'lots' is not a JVM size" in m for m in messages)
    assert any("'$GPUS' is not a GPU count" in m for m in messages)
    assert all(e.line in (7, 8) for e in errors)


RBG = """\
apiVersion: workloads.x-k8s.io/v1alpha2
kind: RoleBasedGroup
metadata: {name: pd}
spec:
  roles:
    - name: prefill
      replicas: 2
      leaderWorkerPattern:
        size: 4
        template:
          spec:
            containers:
              - {name: engine, image: lmsysorg/sglang:v0.5.2, resources: {limits: {nvidia.com/gpu: 2}}}
    - name: router
      replicas: 1
      standalonePattern:
        template:
          spec:
            containers: [{name: router, image: lmsysorg/sglang-router:v0.1}]
    - name: decode
      replicas: 3
      templateRef: {name: shared}
---
apiVersion: workloads.x-k8s.io/v1alpha1
kind: RoleBasedGroup
metadata: {name: old}
spec:
  roles:
    - name: worker
      replicas: 2
      leaderWorkerSet: {size: 2}
      template:
        spec:
          containers: [{name: w, image: vllm/vllm-openai:v0.10.0, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def test_role_based_group_roles_in_both_api_versions(tmp_path):
    path = tmp_path / "rbg.yaml"
    path.write_text(RBG)
    workloads, errors = _build(path)
    assert not errors
    pods = {name: sorted((t.role, t.replicas) for t in w.templates) for name, w in workloads.items()}
    # A LeaderWorkerSet role runs `size` pods per replica; a templateRef role is not read.
    assert pods == {"pd": [("prefill", 8), ("router", 1)], "old": [("worker", 4)]}
    assert workloads["pd"].workload_class == "service"


STORM = """\
apiVersion: orchestration.aibrix.ai/v1alpha1
kind: StormService
metadata: {name: pd}
spec:
  replicas: 2
  template:
    spec:
      roles:
        - name: prefill
          replicas: 3
          template:
            spec:
              containers: [{name: p, image: vllm/vllm-openai:v0.10.0, resources: {limits: {nvidia.com/gpu: 1}}}]
        - name: decode
          replicas: 1
          template:
            spec:
              nodeSelector: {kubernetes.io/hostname: gpu-7}
              containers: [{name: d, image: vllm/vllm-openai:v0.10.0, resources: {limits: {nvidia.com/gpu: 2}}}]
"""


def test_storm_service_roles_with_their_pins(tmp_path):
    path = tmp_path / "storm.yaml"
    path.write_text(STORM)
    workloads, errors = _build(path)
    assert not errors
    (prefill, decode) = workloads["pd"].templates
    assert [(t.role, t.replicas) for t in (prefill, decode)] == [("prefill", 6), ("decode", 2)]
    assert decode.spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-7"}
    assert workloads["pd"].workload_class == "service"


def test_a_slinky_nodeset_runs_its_slurmd_beside_the_pod_template(tmp_path):
    path = tmp_path / "nodeset.yaml"
    path.write_text(
        "apiVersion: slinky.slurm.net/v1alpha1\nkind: NodeSet\nmetadata: {name: gpu-nodes}\n"
        "spec:\n  replicas: 2\n"
        "  slurmd:\n    image: ghcr.io/slinkyproject/slurmd:25.05\n"
        "    resources: {limits: {nvidia.com/gpu: 8}}\n"
        "  template:\n    spec:\n      nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-mega-80gb}\n"
        "      containers:\n      - {name: tcpxo-daemon, image: tcpgpudmarxd:v1}\n"
    )
    workloads, errors = _build(path)
    assert not errors
    (template,) = workloads["gpu-nodes"].templates
    assert (workloads["gpu-nodes"].workload_class, template.role, template.replicas) == ("service", "slurmd", 2)
    slurmd = next(c for c in template.containers if c.gpus)
    assert (slurmd.name, slurmd.gpus[0].count, slurmd.gpus[0].pointer) == (
        "slurmd",
        8.0,
        "/spec/slurmd/resources/limits/nvidia.com~1gpu",
    )
    assert template.spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    # Without a pod template the slurmd container is the pod.
    path.write_text(
        "apiVersion: slinky.slurm.net/v1alpha1\nkind: NodeSet\nmetadata: {name: bare}\n"
        "spec:\n  slurmd:\n    image: slurmd:25.05\n    resources: {limits: {nvidia.com/gpu: 4}}\n"
    )
    workloads, errors = _build(path)
    assert not errors and [c.name for c in workloads["bare"].templates[0].containers] == ["slurmd"]
