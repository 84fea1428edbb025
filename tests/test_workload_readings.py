"""What the facts read from a container and its neighbours (issue 34's
classes): env completed from ConfigMaps, GPU Feature Discovery's product
names, what a command does with the GPUs, a live dump's binding, native
sidecars. The rules that use them are tested by their cases and the truth
set; these pin the readings themselves."""

from __future__ import annotations

import pytest

from gpuaudit.facts.activity import container_activity, saturates_gpus
from gpuaudit.facts.env_sources import resolved_env
from gpuaudit.facts.gpu_pools import gfd_label_value, never_published
from gpuaudit.model import Document
from gpuaudit.model.workload_builder import build_workloads

PRODUCT = "nvidia.com/gpu.product"


def test_env_from_config_maps_fills_what_the_manifest_leaves_and_never_overrides_it():
    config_maps = {("llm", "runtime-7h2k"): {"MODEL": "Qwen/Qwen2.5-32B-Instruct", "PORT": "8000"}}
    raw = {
        "envFrom": [{"configMapRef": {"name": "runtime-7h2k"}, "prefix": "APP_"}],
        "env": [
            {"name": "PORT", "value": "9000"},
            {"name": "MODEL_ID", "valueFrom": {"configMapKeyRef": {"name": "runtime-7h2k", "key": "MODEL"}}},
        ],
    }
    env = resolved_env(raw, {"PORT": "9000", "MODEL_ID": ""}, "llm", config_maps)
    assert env == {
        "APP_MODEL": "Qwen/Qwen2.5-32B-Instruct",
        "APP_PORT": "8000",
        "PORT": "9000",
        "MODEL_ID": "Qwen/Qwen2.5-32B-Instruct",
    }
    # Another namespace's ConfigMap of that name is not this pod's.
    assert resolved_env(raw, {"PORT": "9000", "MODEL_ID": ""}, "other", config_maps)["MODEL_ID"] == ""


@pytest.mark.parametrize(
    ("nvml", "label"),
    [("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"), ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe")],
)
def test_gfd_writes_the_nvml_name_with_dashes(nvml, label):
    assert gfd_label_value(nvml) == label


@pytest.mark.parametrize(
    ("value", "published"),
    [
        ("NVIDIA-H100-80GB-HBM3", True),
        ("NVIDIA-H100-80GB-HBM3-SHARED", True),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", True),
        ("A100-SXM4-40GB", True),  # old drivers
        ("Tesla-T4", True),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", True),  # a family the catalogue does not list
        ("NVIDIA-H100-SXM4-80GB", False),  # no H100 is SXM4
        ("NVIDIA-L4-24GB", False),
        ("nvidia-tesla-t4", False),  # GKE's accelerator name
        ("NVIDIA H100", False),  # a space
        # Families by whole words: H20 is not H200, A10G is A10's, L40S L40's.
        ("NVIDIA-H20", True),
        ("NVIDIA-H20-141GB-HBM3e", True),
        ("NVIDIA-H200-NVL", True),
        ("NVIDIA-GH200-480GB", True),
        ("NVIDIA-A10G", True),
        ("NVIDIA-L40S", True),
        ("NVIDIA-L40S-48GB", False),
        ("NVIDIA-A30-24GB", False),
        ("NVIDIA-B200-SXM", False),
    ],
)
def test_product_names_gfd_publishes(value, published):
    assert (never_published(PRODUCT, [value]) == []) is published
    assert never_published("cloud.google.com/gke-accelerator", [value]) == []


def _container(command=(), args=(), image="ubuntu:22.04"):
    doc = Document(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": image,
                        "command": list(command),
                        "args": list(args),
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ]
            },
        },
        "p.yaml",
        1,
    )
    (workload,), _ = build_workloads([doc])
    return workload.templates[0].containers[0]


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (["sh", "-c", "echo 'started on' $(hostname); nvidia-smi -L; sleep 600"], "idle"),
        (["bash", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"], "idle"),
        (["bash", "-lc", "nvidia-smi && echo 'GPU OK' || (echo 'failed' && sleep 5 && nvidia-smi)"], "idle"),
        (["bash", "-c", "while true; do /cuda-samples/vectorAdd; done"], "gpu_test"),
        (["/cuda-samples/vectorAdd"], "idle"),  # once: a device check
        (["sh", "-c", "pip install -q huggingface_hub && hf download Qwen/Qwen2.5-7B --local-dir /m"], "download"),
        (["sh", "-c", "aws s3 cp s3://b/d /d --recursive && python train.py"], None),
        (["python", "train.py"], None),
    ],
)
def test_what_a_command_does_with_its_gpus(command, kind):
    assert container_activity(_container(command))["command_kind"] == kind


def test_gpu_burn_saturates_its_gpus_by_image_or_command():
    assert saturates_gpus(_container(image="oguzpastirmaci/gpu-burn:latest"))
    assert saturates_gpus(_container(["bash", "-c", "/app/gpu_burn 600"], image="nvidia/cuda:12.4.1-base"))
    assert not saturates_gpus(_container(["python", "train.py"], image="nvcr.io/nvidia/pytorch:24.05-py3"))


def _pod(extra_meta=None, status=None, init=None):
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **(extra_meta or {})},
        "spec": {
            "nodeName": "gpu-node-1",
            "initContainers": init or [],
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }
    if status is not None:
        obj["status"] = status
    (workload,), _ = build_workloads([Document(obj, "p.yaml", 1)])
    return workload.templates[0]


def test_a_live_dump_s_node_name_is_a_binding_and_a_written_one_a_pin():
    assert _pod().spec.get("nodeName") == "gpu-node-1"
    dump = _pod({"uid": "6b1f7e52", "resourceVersion": "184467"}, {"phase": "Running"})
    assert "nodeName" not in dump.spec


def test_a_native_sidecar_is_an_app_container():
    sidecar = {"name": "s", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    setup = {"name": "setup", "command": ["sh", "-c", "true"]}
    template = _pod(init=[setup, sidecar])
    assert [c.name for c in template.containers] == ["c", "s"]
    assert [c.name for c in template.init_containers] == ["setup"]
    assert not template.containers[1].init


def _container_gpus(resources: dict) -> list[tuple[str, str, float | None]]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }
    (workload,), _ = build_workloads([Document(obj=pod, file="p.yaml", line=1)])
    return [(r.resource, r.mode, r.limit) for t in workload.templates for c in t.containers for r in c.gpus]


def test_intel_resources_that_are_no_device_are_no_gpus():
    # A monitoring agent's access to every GPU, and GPU Aware Scheduling's shares.
    assert _container_gpus({"limits": {"gpu.intel.com/i915_monitoring": 1}}) == []
    assert _container_gpus({"limits": {"gpu.intel.com/xe": 1}}) == [("gpu.intel.com/xe", "whole", 1.0)]
    # millicores beside a device make it a share of one, not 500 GPUs.
    shared = _container_gpus({"limits": {"gpu.intel.com/i915": 1, "gpu.intel.com/millicores": 500}})
    assert shared == [("gpu.intel.com/i915", "shared", 1.0)]


def _check(folder):
    """`gpuaudit check FOLDER` with the built-in rules, as the pipeline gives it."""
    from gpuaudit.pipelines.check import check_manifests
    from gpuaudit.pipelines.policy import load_policy
    from gpuaudit.sources.user_config import Config

    rules, _ = load_policy(Config())
    return check_manifests([str(folder)], Config(), rules)


def _claim_template(claim: str, device_class: str) -> str:
    return (
        f"apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {claim}}}\n"
        f"spec:\n  spec:\n    devices:\n      requests:\n      - name: dev\n"
        f"        exactly: {{deviceClassName: {device_class}}}\n"
    )


def _claim_pod(name: str, claim: str, device_class: str | None) -> str:
    pod = (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n"
        f"  containers:\n  - name: app\n    image: app:1\n    resources: {{claims: [{{name: dev}}]}}\n"
        f"  resourceClaims:\n  - name: dev\n    resourceClaimTemplateName: {claim}\n"
    )
    if device_class is None:  # the template is not in the input
        return pod
    return f"{pod}---\n{_claim_template(claim, device_class)}"


@pytest.mark.parametrize(
    ("device_class", "gpu"),
    [
        ("qat.intel.com", False),  # a crypto and compression accelerator
        ("compute-domain-default-channel.nvidia.com", False),  # an IMEX channel
        ("gpu.intel.com", True),
        ("mig.nvidia.com", True),
        ("vfio.gpu.nvidia.com", True),
        (None, True),  # a template the input does not hold: still judged a GPU's
    ],
)
def test_a_dra_claim_is_a_gpu_only_when_its_device_class_may_be_one(tmp_path, device_class, gpu):
    (tmp_path / "app.yaml").write_text(_claim_pod("worker", "devices", device_class))
    result = _check(tmp_path)
    assert result.gpu_workloads == (1 if gpu else 0)
    if not gpu:  # no GPU rule speaks of it either
        assert not [f for f in result.findings if f.resource.name == "worker"]


@pytest.mark.parametrize(("gpu_twin", "gpu_workloads"), [(False, 0), (True, 1)], ids=["one-template", "gpu-twin"])
def test_a_claim_template_elsewhere_in_the_folder_says_what_a_unit_s_pods_take(tmp_path, gpu_twin, gpu_workloads):
    # Templates applied once, pods in their own kustomize units: the folder
    # named on the command line tells the units what the template asks for,
    # unless another object of that name there may ask for a GPU.
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "templates.yaml").write_text(_claim_template("qat-sym", "qat.intel.com"))
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pod.yaml").write_text(_claim_pod("worker", "qat-sym", None))
    (tmp_path / "app" / "kustomization.yaml").write_text("resources: [pod.yaml]\n")
    if gpu_twin:
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "templates.yaml").write_text(_claim_template("qat-sym", "gpu.intel.com"))
    result = _check(tmp_path)
    assert result.gpu_workloads == gpu_workloads


_LWS_405B = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: llama-405b}
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: %d
    leaderTemplate:
      spec:
        nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
        containers:
        - name: leader
          image: vllm/vllm-openai:v0.6.3
          command: [sh, -c, "python3 -m vllm.entrypoints.openai.api_server \\"$@\\"", --]
          args: [--model=meta-llama/Meta-Llama-3.1-405B-Instruct, --tensor-parallel-size=8,
                 --pipeline_parallel_size=$(PIPELINE_PARALLEL_SIZE)]
          env:
          - {name: PIPELINE_PARALLEL_SIZE, value: $(LWS_GROUP_SIZE)}
          resources:
            limits: {nvidia.com/gpu: 8, memory: 1000Gi}
    workerTemplate:
      spec:
        nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
        containers:
        - name: worker
          image: vllm/vllm-openai:v0.6.3
          command: [sh, -c, "ray start --block --address=$(LWS_LEADER_ADDRESS):6379"]
          resources:
            limits: {nvidia.com/gpu: 8, memory: 1000Gi}
"""


@pytest.mark.parametrize(("size", "too_big"), [(2, False), (1, True)])
def test_a_leader_worker_set_s_group_size_is_the_env_its_controller_sets(tmp_path, size, too_big):
    # LWS puts LWS_GROUP_SIZE in every container: pipeline parallelism over
    # the group's two pods spreads a 405B model (~754 GiB) over 16 H100s.
    # A group of one holds 8 (640 GiB): the weights do not fit.
    (tmp_path / "lws.yaml").write_text(_LWS_405B % size)
    result = _check(tmp_path)
    assert any(f.rule == "GPA-AL-016" for f in result.findings) is too_big
    assert not [f for f in result.findings if f.rule == "GPA-AL-012"]


def test_a_request_for_zero_gpus_is_no_gpu_request():
    # A chart's CPU-only setting renders `nvidia.com/gpu: "0"`: the device
    # plugin is never asked, so the pod holds no GPU and is no GPU workload.
    def workload(gpus: str):
        container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "amg"},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
        [w], errors = build_workloads([Document(obj, "d.yaml", 1)])
        assert errors == []  # nor a shape "that holds a container that requests GPUs"
        return w

    assert not workload("0").requests_gpus
    assert workload("1").requests_gpus
