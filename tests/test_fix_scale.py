"""`gpuaudit fix` at cluster scale (issue 35): a product pin is relaxed only
when it is what blocks, and never onto GPUs smaller than the workload
needs; an overlay holds the patches that free the most GPUs first (--top),
split by namespace on request (--split-by); REVIEW.md says what a patch
really does (recreate a Job, copied placeholders, long values as diffs).
Overlays are built with real kustomize (--verify)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.clusters.scheduler import Scheduler, failed_scheduling_event

ROOT = Path(__file__).resolve().parents[1]
H100, A100, T4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
MEMORY = {H100: 81559, A100: 81920, T4: 15360}
LLM_TAINT = {"key": "dedicated", "value": "llm", "effect": "NoSchedule"}


@pytest.fixture
def kubectl(monkeypatch):
    monkeypatch.setenv("PATH", f"{ROOT / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")


def _node(name: str, product: str, gpus: int, taints: list | None = None) -> dict:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(MEMORY[product]),
        "nvidia.com/gpu.count": str(gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _deployment(objects: dict, name: str, namespace: str, spec: dict) -> None:
    labels = {"app": name}
    objects["workloads"].append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": {"team": namespace}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
    )
    rs = f"{name}-5d8f7"
    objects["replicasets"].append(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "controller": True}],
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
    )
    objects["pods"].append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{rs}-x1",
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "controller": True}],
            },
            "spec": json.loads(json.dumps(spec)),
            "status": {},
        }
    )


def _server(gpus: int = 1, args: list | None = None) -> dict:
    return {
        "name": "server",
        "image": "registry.example.com/serve:2",
        "args": args or ["--port", "8000"],
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": "32Gi", "nvidia.com/gpu": str(gpus)},
        },
    }


def cluster_snapshot(tmp_path: Path, peaks: dict[str, float]) -> Path:
    """Four GPU nodes: an H100 the team `llm` reserves by a taint, an A100
    and two 16 GB T4s; a Deployment that wants the H100 without the
    toleration (Pending), one pinned to the A100 (its only node), and one
    whose vLLM reserves 90% of its A100."""
    nodes = [
        _node("h100-0", H100, 8, [LLM_TAINT]),
        _node("a100-0", A100, 8),
        _node("t4-0", T4, 1),
        _node("t4-1", T4, 1),
    ]
    objects: dict = {
        key: []
        for key in (
            "pods",
            "events",
            "replicasets",
            "jobs",
            "configmaps",
            "clusterpolicies",
            "resourceclaims",
            "resourceslices",
            "kueueworkloads",
            "workloads",
        )
    }
    objects["nodes"] = nodes
    _deployment(
        objects, "chat-70b", "nlp", {"nodeSelector": {"nvidia.com/gpu.product": H100}, "containers": [_server(4)]}
    )
    _deployment(
        objects, "ranker", "search", {"nodeSelector": {"nvidia.com/gpu.product": A100}, "containers": [_server(1)]}
    )
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "a100-0"}, "containers": [_server(1)]}
    _deployment(objects, "notebook", "research", pinned)
    scheduler = Scheduler(nodes)
    rows = []
    for pod in objects["pods"]:
        node = scheduler.bind(pod)
        if node is None:
            message = scheduler.fit_error(pod)
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            }
            objects["events"].append(
                failed_scheduling_event(
                    pod, message, first="2026-11-29T10:00:00Z", last="2026-11-29T11:00:00Z", count=9
                )
            )
            continue
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "startTime": "2026-11-20T00:00:00Z",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        name = pod["metadata"]["name"]
        if name in peaks:
            rows.append(
                {
                    "node": node,
                    "gpu": "0",
                    "uuid": f"GPU-{name}",
                    "namespace": pod["metadata"]["namespace"],
                    "pod": name,
                    "container": None,
                    "fb_used_max_mib": peaks[name],
                    "fb_used_mean_mib": peaks[name] * 0.8,
                    "compute_mean": 0.05,
                    "compute_p95": 0.1,
                    "coverage": 0.97,
                }
            )
    path = tmp_path / "cluster.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "kind": "gpuaudit-snapshot",
                "collected_at": "2026-11-29T12:00:00Z",
                "cluster": {"server": "https://test", "context": None},
                "objects": objects,
                "absent": [],
                "errors": [],
                "telemetry": {
                    "source": "test",
                    "window": {"seconds": 7 * 86400},
                    "signals": {"compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
                    "gpus": rows,
                },
            }
        )
    )
    return path


def test_a_hostname_pin_dropped_from_a_cluster_keeps_gpus_that_hold_the_pod(tmp_path, run_cli, kubectl):
    """Without the pin the notebook could land on a 16 GB T4; its measured
    peak (30,000 MiB + 20%) keeps it on the A100 and H100 products."""
    snap = cluster_snapshot(tmp_path, {"notebook-5d8f7-x1": 30000.0})
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snap), "--out", str(out), "--rules", "GPA-PL-001", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, check=True)
    notebook = next(o for o in yaml.safe_load_all(built.stdout) if o["metadata"]["name"] == "notebook")
    spec = notebook["spec"]["template"]["spec"]
    assert "kubernetes.io/hostname" not in (spec.get("nodeSelector") or {})
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100, H100]}]}
    ]


def not_remediated(review: str, rule: str, name: str) -> str:
    table = review.partition("## Not remediated")[2]
    return next(row for row in table.splitlines() if row.startswith(f"| {rule} |") and name in row)


def test_a_pin_kept_off_its_nodes_by_a_taint_is_not_relaxed(tmp_path, run_cli, kubectl):
    snap = cluster_snapshot(tmp_path, {"ranker-5d8f7-x1": 30000.0})
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snap), "--out", str(out), "--rules", "GPA-PL-101", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    review = (out / "REVIEW.md").read_text()
    row = not_remediated(review, "GPA-PL-101", "chat-70b")
    assert "the taint dedicated=llm:NoSchedule, which it does not tolerate, not the product pin" in row
    assert not any("chat-70b" in p.name for p in (out / "patches").iterdir())

    # The A100 pin is what narrows the ranker: it becomes a preference, and
    # the requirement keeps GPUs that hold its measured peak (30,000 MiB +
    # 20%): the H100 and the A100, never the 16 GB T4s.
    built = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, check=True)
    ranker = next(o for o in yaml.safe_load_all(built.stdout) if o["metadata"]["name"] == "ranker")
    spec = ranker["spec"]["template"]["spec"]
    assert "nvidia.com/gpu.product" not in (spec.get("nodeSelector") or {})
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100, H100]}]}
    ]
    assert "its measured peak of 30,000 MiB + 20% headroom" in review


def test_a_workload_that_needs_its_whole_gpu_is_widened_only_to_gpus_as_large(tmp_path, run_cli, kubectl):
    """79,000 MiB + 20% is more than any GPU here; it ran on its 80 GB A100,
    so the floor is that GPU's memory: the H100 (80 GB) qualifies, the T4s never."""
    snap = cluster_snapshot(tmp_path, {"ranker-5d8f7-x1": 79000.0})
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snap), "--out", str(out), "--rules", "GPA-PL-101")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (patch,) = [p for p in (out / "patches").iterdir() if "ranker" in p.name]
    required = yaml.safe_load(patch.read_text())["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100, H100]}]}
    ]
    assert "capped at the pinned GPU's 80 GiB" in (out / "REVIEW.md").read_text()


PARALLEL = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.10.0
        args: [--tensor-parallel-size=2]
        resources:
          requests: {{cpu: "16", memory: 64Gi}}
          limits: {{nvidia.com/gpu: "{gpus}", memory: 64Gi}}
"""
# name, namespace, replicas, GPUs: frees (GPUs - 2) x replicas
SERVERS = [("small", "a", 1, 4, 2), ("huge", "b", 4, 8, 24), ("mid", "a", 2, 8, 12), ("tiny", "b", 1, 3, 1)]


def servers(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name, namespace, replicas, gpus, _ in SERVERS:
        (folder / f"{name}.yaml").write_text(
            PARALLEL.format(name=name, namespace=namespace, replicas=replicas, gpus=gpus)
        )
    return folder


def test_patches_are_ordered_by_gpus_freed_and_capped_by_top(tmp_path, run_cli, kubectl):
    out = tmp_path / "overlay"
    proc = run_cli("fix", str(servers(tmp_path)), "--out", str(out), "--rules", "GPA-AL-009", "--top", "2", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 still there, 0 new; 0 unplanned difference(s)" in proc.stdout
    assert "2 more held back (--top 2)" in proc.stdout
    patches = sorted(p.name for p in (out / "patches").iterdir())
    assert patches == [
        "01-match-gpus-to-parallelism-deployment-huge.yaml",
        "02-match-gpus-to-parallelism-deployment-mid.yaml",
    ]
    review = (out / "REVIEW.md").read_text()
    assert re.search(r"\| 1 \| .*huge.* \| 24\.0 \|", review)
    assert "2 more patch(es) on 2 object(s), freeing about 3.0 GPU(s), are not in it" in review
    held = review.partition("## Held back")[2].partition("\n## ")[0]
    assert held.index("small") < held.index("tiny")

    everything = tmp_path / "all"
    (tmp_path / "x").mkdir()
    proc = run_cli("fix", str(servers(tmp_path / "x")), "--out", str(everything), "--rules", "GPA-AL-009", "--top", "0")
    assert proc.returncode == 0, proc.stderr
    assert len(list((everything / "patches").iterdir())) == 4
    assert "## Held back" not in (everything / "REVIEW.md").read_text()


def test_split_by_namespace_writes_one_overlay_per_namespace(tmp_path, run_cli, kubectl):
    out = tmp_path / "overlay"
    proc = run_cli(
        "fix",
        str(servers(tmp_path)),
        "--out",
        str(out),
        "--rules",
        "GPA-AL-009",
        "--split-by",
        "namespace",
        "--top",
        "1",
        "--verify",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["REVIEW.md", "a", "b"]
    for namespace, first in (("a", "mid"), ("b", "huge")):
        (patch,) = (out / namespace / "patches").iterdir()
        assert first in patch.name
        built = subprocess.run(
            ["kubectl", "kustomize", str(out / namespace)], capture_output=True, text=True, check=True
        )
        assert {o["metadata"]["namespace"] for o in yaml.safe_load_all(built.stdout)} == {namespace}
    index = (out / "REVIEW.md").read_text()
    assert f"| `{out}/a` | 1 | 12.0 | 1 |" in index and f"| `{out}/b` | 1 | 24.0 | 1 |" in index


JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: pretrain, namespace: research}
spec:
  ttlSecondsAfterFinished: 3600
  activeDeadlineSeconds: 86400
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {kubernetes.io/hostname: "${TRAIN_NODE}"}
      containers:
      - name: train
        image: train:1
        resources:
          requests: {cpu: "8"}
          limits: {nvidia.com/gpu: 8}
"""


def test_review_says_a_job_is_recreated_and_warns_of_copied_placeholders(tmp_path, run_cli, kubectl):
    app = tmp_path / "job.yaml"
    app.write_text(JOB)
    out = tmp_path / "overlay"
    proc = run_cli("fix", str(app), "--out", str(out), "--rules", "GPA-PL-001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    review = (out / "REVIEW.md").read_text()
    section = review.partition("## 1. ")[2]
    assert "- **Apply**: a Job's pod template cannot be changed in place" in section
    assert "Delete the Job and create it again from the patched manifest" in section
    # the pin's value moves into a preference: the placeholder goes with it, said
    assert "- **Placeholder**: the patch copies `${TRAIN_NODE}` from the input as text" in section
    # a long value is a readable YAML diff, not a truncated line
    block = section.partition("```diff\n")[2].partition("```")[0]
    assert "+  preferredDuringSchedulingIgnoredDuringExecution:" in block
    assert "+        - ${TRAIN_NODE}" in block
    assert "..." not in section.partition("**Changes**")[2].partition("**Expected")[0]


def test_no_placeholder_warning_for_kubernetes_own_expansion():
    from gpuaudit.remediate.review import placeholders

    assert placeholders({"args": ["--model", "$(MODEL_ID)", "--dir", "${HOME}/x", "$PORT"]}) == ["$PORT", "${HOME}"]
    assert placeholders({"value": "costs $5"}) == []


def test_no_balanced_mig_layout_for_a_node_whose_pods_need_the_whole_gpu():
    from gpuaudit.remediate.planners.declined import enable_mig_reason
    from tests.manifests import node_facts

    node = node_facts("h100-3", model="H100-80GB", mig_capable=True)
    assert "has no slice that holds them; keep it whole" in enable_mig_reason(node, 73400.0)
    unmeasured = enable_mig_reason(node)
    assert "none is measured: no layout is recommended" in unmeasured and "all-balanced" not in unmeasured
    assert "all-balanced when its 2g and 3g slices do" in enable_mig_reason(node, 9000.0)


def test_split_overlays_of_a_cluster_point_at_the_sharing_config_to_apply_first(tmp_path, run_cli, kubectl):
    """The demo cluster's moves to a share sit in their namespaces' overlays;
    the time-slicing config they request is the cluster-wide overlay's, and
    each is verified as applied after it."""
    out = tmp_path / "overlay"
    demo = ROOT / "examples" / "demo-snapshot.json.gz"
    proc = run_cli("fix", "--snapshot", str(demo), "--out", str(out), "--split-by", "namespace", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "unplanned difference(s)" in proc.stdout and " 0 unplanned" in proc.stdout
    assert not re.search(r"[1-9]\d* unplanned difference", proc.stdout), proc.stdout
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert "cluster" in folders and "notebooks" in folders
    assert "enable-time-slicing" in " ".join(p.name for p in (out / "cluster" / "patches").iterdir())
    notebooks = (out / "notebooks" / "REVIEW.md").read_text()
    assert "the overlay in `../cluster/` advertises (its sharing config): apply that one first" in notebooks
    assert "## Not remediated" not in notebooks and "## Not remediated" in (out / "REVIEW.md").read_text()


def _container(image: str, command: tuple[str, ...] = (), args: tuple[str, ...] = (), env: dict | None = None):
    from gpuaudit.model import Container

    return Container(
        "c",
        "/spec/containers/0",
        False,
        image,
        command,
        args,
        env or {},
        (),
        None,
        None,
        None,
        None,
        {},
        "/spec/containers/0/resources",
    )


def test_servers_that_reserve_gpu_memory_and_stress_tests_are_recognised():
    from gpuaudit.facts.reservations import memory_reservation, nim_model, stress_test

    vllm = memory_reservation(
        _container("vllm/vllm-openai:v0.10.0", args=("--model", "m", "--gpu-memory-utilization=0.6"))
    )
    assert (vllm.engine, vllm.fraction, vllm.stated) == ("vLLM", 0.6, "--gpu-memory-utilization 0.6")
    shell = _container("python:3.11", ("bash", "-c"), ("python -m sglang.launch_server --mem-fraction-static 0.7",))
    assert (memory_reservation(shell).engine, memory_reservation(shell).fraction) == ("SGLang", 0.7)
    nim = memory_reservation(_container("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0"))
    assert (nim.engine, nim.fraction, nim.stated) == ("NIM", 0.9, "NIM's default 0.9")
    assert memory_reservation(_container("registry.example.com/embedder:1")) is None
    assert nim_model("nvidia-nim-llama-3.1-8b-instruct-1.1.0") == "llama-3.1-8b-instruct"
    assert nim_model("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.2.1") == "llama-3.1-70b-instruct"
    assert nim_model("vllm/vllm-openai:v0.10.0") is None
    assert stress_test(_container("oguzpastirmaci/gpu-burn:latest", args=("3600",))) == "gpu-burn"
    assert stress_test(_container("nvcr.io/nvidia/cloud-native/dcgm:3.3", ("dcgmproftester12",))) == "dcgmproftester12"
    assert stress_test(_container("pytorch/pytorch:2.4", ("python", "burnish.py"))) is None


def test_a_job_deadline_promises_no_clean_up_it_does_not_set(tmp_path, run_cli, kubectl):
    """A Job's lifecycle entry has a deadline and no clean-up field: the
    summary, effect and risk speak of the deadline only."""
    app = tmp_path / "job.yaml"
    app.write_text(JOB.replace("  activeDeadlineSeconds: 86400\n", "").replace('"${TRAIN_NODE}"', "gpu-node-7"))
    out = tmp_path / "overlay"
    proc = run_cli("fix", str(app), "--out", str(out), "--rules", "GPA-AL-008", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    section = (out / "REVIEW.md").read_text().partition("## 1. ")[2]
    assert section.startswith("Give Job pretrain a deadline\n")
    promised = section.partition("- **Roll back**")[0].lower().replace("has no clean-up field to set", "")
    assert "clean" not in promised, section
    assert "A run that hangs is stopped at its deadline" in section
