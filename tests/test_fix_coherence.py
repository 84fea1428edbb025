"""Patches a reviewer merges: the coherence check (remediate/coherence.py)
declines a change that would lower, strand or break a workload, and `fix
--verify` exits 1 naming the reason on an overlay built by hand to do so.
Also the KServe serving-runtime merge (model/serving_runtimes.py) and the
reading of runtime files that carry KServe's run-time placeholders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuaudit.kube.podspecs import builtin_locators
from gpuaudit.model.serving_runtimes import effective, effective_documents, resolve, runtimes_in
from gpuaudit.remediate import coherence
from gpuaudit.sources.manifests import read_paths

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "fix_coherence"


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((HERE / name).read_text()) if d]


# --- KServe serving runtimes ----------------------------------------------------------


def test_a_runtime_file_with_kserve_placeholders_is_read_not_dropped_as_helm():
    read = read_paths([str(HERE / "kserve-vllm.yaml")])
    kinds = sorted(d.kind for d in read.documents)
    assert kinds == ["InferenceService", "ServingRuntime"]
    assert not [e for e in read.errors if "Helm" in e.message]
    runtime = next(d for d in read.documents if d.kind == "ServingRuntime")
    assert "--served-model-name={{.Name}}" in runtime.obj["spec"]["containers"][0]["args"]


def test_a_helm_template_is_still_a_helm_template(tmp_path):
    chart = tmp_path / "runtime.yaml"
    chart.write_text(
        "apiVersion: serving.kserve.io/v1alpha1\nkind: ClusterServingRuntime\nmetadata:\n"
        "  name: {{ .Values.name }}\nspec:\n  containers:\n  - name: kserve-container\n"
        "    args: [--model_name={{.Name}}]\n"
    )
    read = read_paths([str(chart)])
    assert read.documents == []
    assert any("not auditable until rendered" in e.message for e in read.errors)


def test_the_effective_predictor_inherits_the_runtime():
    objects = _docs("kserve-vllm.yaml")
    runtimes = runtimes_in(objects)
    isvc = objects[1]
    obj, resolution = effective(isvc, runtimes)
    assert resolution.runtime is not None and resolution.runtime.name == "vllm-runtime"
    model = obj["spec"]["predictor"]["model"]
    assert model["resources"]["requests"] == {"cpu": "12", "memory": "128Gi"}
    # the service's GPU limit merges over the runtime's limits, key by key
    assert model["resources"]["limits"] == {"cpu": "12", "memory": "128Gi", "nvidia.com/gpu": "1"}
    assert model["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]
    assert obj["spec"]["predictor"]["volumes"][0]["emptyDir"]["sizeLimit"] == "128Gi"
    assert model["args"][-1] == "--served-model-name={{.Name}}"
    assert model["modelFormat"] == {"name": "vLLM"}


def test_the_service_wins_over_the_runtime_and_args_concatenate():
    objects = _docs("kserve-vllm.yaml")
    isvc = objects[1]
    isvc["spec"]["predictor"]["model"]["resources"]["requests"] = {"memory": "200Gi"}
    isvc["spec"]["predictor"]["model"]["args"] = ["--max-model-len=8192"]
    obj, _ = effective(isvc, runtimes_in(objects))
    model = obj["spec"]["predictor"]["model"]
    assert model["resources"]["requests"] == {"cpu": "12", "memory": "200Gi"}
    assert model["args"][0] == "--port=8080" and model["args"][-1] == "--max-model-len=8192"


def test_an_unknown_runtime_is_said_so():
    (isvc,) = _docs("kserve-unknown-runtime.yaml")
    resolution = resolve(isvc, [])
    assert resolution.backed and resolution.runtime is None
    assert "kserve-huggingfaceserver" in resolution.reason
    custom = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "x"},
        "spec": {"predictor": {"containers": [{"name": "c", "image": "c"}]}},
    }
    assert not resolve(custom, []).backed  # custom containers run no runtime


def test_effective_documents_for_the_check_pipeline():
    read = read_paths([str(HERE / "kserve-vllm.yaml")])
    docs = effective_documents(read.documents)
    isvc = next(d for d in docs if d.kind == "InferenceService")
    assert isvc.obj["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] == "128Gi"
    assert isvc.file == next(d for d in read.documents if d.kind == "InferenceService").file


# --- the coherence check, one class at a time -----------------------------------------


def _setting(objects, site=None, snapshot=None):
    return coherence.setting_for(builtin_locators(), objects, site or {}, snapshot)


def _problems(before, after, world=(), site=None, snapshot=None, lowers=frozenset()):
    setting = _setting([before, *world], site, snapshot)
    names = coherence.advertised([after, *world], setting, {})
    return coherence.problems(before, after, setting, names, lowers)


def _deployment():
    return _docs("deployment.yaml")[0]


def _limits(obj):
    return obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]


def test_an_unadvertised_shared_resource_is_incoherent():
    before = _deployment()
    after = _deployment()
    _limits(after).pop("nvidia.com/gpu")
    _limits(after)["nvidia.com/gpu.shared"] = 1
    (problem,) = _problems(before, after)
    assert "nvidia.com/gpu.shared, which nothing advertises" in problem
    assert _problems(before, after, site={"shared_resource": "nvidia.com/gpu.shared"}) == []
    snapshot = {
        "objects": {"nodes": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu.shared": "8"}}}]}
    }
    assert _problems(before, after, snapshot=snapshot) == []
    gke = _problems(before, after, site={"platform": "gke", "shared_resource": "nvidia.com/gpu.shared"})
    assert gke and "GKE never advertises" in gke[0]


def test_a_sharing_config_in_the_overlay_advertises_it():
    before = _deployment()
    after = _deployment()
    _limits(after).pop("nvidia.com/gpu")
    _limits(after)["nvidia.com/gpu.shared"] = 1
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpuaudit-gpu-sharing", "namespace": "gpu-operator"},
        "data": {
            "shared": "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
            "    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
        },
    }
    assert _problems(before, after, world=[config]) == []


def test_a_mig_slice_without_a_layout_is_incoherent():
    before = _deployment()
    after = _deployment()
    _limits(after).pop("nvidia.com/gpu")
    _limits(after)["nvidia.com/mig-1g.10gb"] = 1
    (problem,) = _problems(before, after)
    assert "partitions a GPU into that slice" in problem
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"mig": {"strategy": "mixed"}, "migManager": {"enabled": True, "config": {"default": "all-1g.10gb"}}},
    }
    assert _problems(before, after, world=[policy]) == []


def test_ray_gpu_keys_must_not_change():
    (before,) = _docs("ray.yaml")
    (after,) = _docs("ray.yaml")
    worker = after["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        worker[section].pop("nvidia.com/gpu")
        worker[section]["nvidia.com/gpu.shared"] = "1"
    problems = _problems(before, after, site={"shared_resource": "nvidia.com/gpu.shared"})
    assert any("Ray counts as GPUs" in p for p in problems)


def test_lowering_is_incoherent_unless_it_is_the_purpose():
    before = _deployment()
    after = _deployment()
    after["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    (problem,) = _problems(before, after)
    assert "effective CPU request goes down from 4 to 2" in problem
    assert _problems(before, after, lowers=frozenset({"cpu"})) == []


def test_the_runtime_counts_when_a_service_is_patched():
    before = _docs("kserve-vllm.yaml")
    runtime, isvc = before
    patched = yaml.safe_load(yaml.safe_dump(isvc))
    patched["spec"]["predictor"]["model"]["resources"]["requests"] = {"memory": "8Gi", "cpu": "4"}
    problems = _problems(isvc, patched, world=[runtime])
    assert any("memory request goes down from 128Gi" in p for p in problems)
    assert any("CPU request goes down from 12" in p for p in problems)
    (unknown,) = _docs("kserve-unknown-runtime.yaml")
    patched = yaml.safe_load(yaml.safe_dump(unknown))
    patched["spec"]["predictor"]["model"]["resources"]["requests"] = {"memory": "8Gi"}
    (problem,) = _problems(unknown, patched)
    assert "is not among the inputs" in problem


def test_a_workload_that_requested_a_gpu_still_does():
    (before,) = _docs("init-gpu.yaml")
    (after,) = _docs("init-gpu.yaml")
    del after["spec"]["template"]["spec"]["initContainers"][0]["resources"]
    problems = _problems(before, after, lowers=frozenset({"gpu"}))
    assert any("initContainers held its only GPU" in p for p in problems)
    assert any("no longer does" in p for p in problems)


# --- fix --verify on overlays built by hand -------------------------------------------

JSON_PATCH = """\
- target: {{group: {group}, version: {version}, kind: {kind}, name: {name}}}
  patch: |-
{ops}
"""


@pytest.fixture
def kubectl(monkeypatch):
    tools = ROOT / ".tools" / "bin"
    monkeypatch.setenv("PATH", f"{tools}:{__import__('os').environ.get('PATH', '')}")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")


def _verify_tampered(tmp_path, monkeypatch, manifest: str, rules: str, site: dict, target: dict, ops: list[dict]):
    """`gpuaudit fix --verify` where the overlay, once written (a toleration
    for the site's GPU taint: a coherent patch), gets one more patch by hand:
    the JSON 6902 ``ops`` on ``target``."""
    import gpuaudit.cli.fix as cli_fix
    from gpuaudit.cli.main import main

    source = tmp_path / "app.yaml"
    source.write_text(manifest)
    config = tmp_path / ".gpuaudit.yaml"
    taints = [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
    config.write_text(yaml.safe_dump({"site": {"gpu_taints": taints, **site}}))
    out = tmp_path / "overlay"
    real = cli_fix.write_overlay

    def write_then_tamper(out_dir, layout, input_files):
        real(out_dir, layout, input_files)
        text = yaml.safe_dump(ops, default_flow_style=False)
        indented = "\n".join("    " + line for line in text.splitlines())
        kustomization = out_dir / "kustomization.yaml"
        body = kustomization.read_text()
        if "patches:" not in body:
            body += "patches:\n"
        kustomization.write_text(body + JSON_PATCH.format(ops=indented, **target))

    monkeypatch.setattr(cli_fix, "write_overlay", write_then_tamper)
    result = CliRunner().invoke(
        main, ["fix", str(source), "--out", str(out), "--config", str(config), "--rules", rules, "--verify"]
    )
    return result


DEPLOYMENT_TARGET = {"group": "apps", "version": "v1", "kind": "Deployment", "name": "chat"}
LIMITS = "/spec/template/spec/containers/0/resources/limits"


@pytest.mark.parametrize(
    ("case", "site", "ops", "reason"),
    [
        (
            "unadvertised .shared",
            {},
            [{"op": "replace", "path": LIMITS, "value": {"nvidia.com/gpu.shared": 1, "memory": "16Gi"}}],
            "nvidia.com/gpu.shared, which nothing advertises",
        ),
        (
            ".shared on GKE",
            {"platform": "gke", "shared_resource": "nvidia.com/gpu.shared"},
            [{"op": "replace", "path": LIMITS, "value": {"nvidia.com/gpu.shared": 1, "memory": "16Gi"}}],
            "GKE never advertises",
        ),
        (
            "MIG without a layout",
            {},
            [{"op": "replace", "path": LIMITS, "value": {"nvidia.com/mig-1g.10gb": 1, "memory": "16Gi"}}],
            "partitions a GPU into that slice",
        ),
        (
            "CPU lowered",
            {},
            [{"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "1"}],
            "effective CPU request goes down from 4 to 1",
        ),
        (
            "GPU dropped",
            {},
            [{"op": "replace", "path": LIMITS, "value": {"memory": "16Gi"}}],
            "no longer requests a GPU",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_verify_exits_1_naming_the_reason_on_a_deployment(tmp_path, monkeypatch, kubectl, case, site, ops, reason):
    result = _verify_tampered(
        tmp_path, monkeypatch, (HERE / "deployment.yaml").read_text(), "GPA-PL-004", site, DEPLOYMENT_TARGET, ops
    )
    assert result.exit_code == 1, result.output
    assert "incoherent: Deployment llm/chat" in result.output
    assert reason in result.output


def test_verify_exits_1_on_a_kserve_service_set_below_its_runtime(tmp_path, monkeypatch, kubectl):
    ops = [
        {
            "op": "add",
            "path": "/spec/predictor/model/resources/requests",
            "value": {"cpu": "4", "memory": "8Gi"},
        }
    ]
    target = {"group": "serving.kserve.io", "version": "v1beta1", "kind": "InferenceService", "name": "llama"}
    result = _verify_tampered(
        tmp_path, monkeypatch, (HERE / "kserve-vllm.yaml").read_text(), "GPA-PL-004", {}, target, ops
    )
    assert result.exit_code == 1, result.output
    assert "effective memory request goes down from 128Gi" in result.output
    assert "effective CPU request goes down from 12" in result.output


def test_verify_exits_1_on_ray_workers_moved_to_shared(tmp_path, monkeypatch, kubectl):
    worker = "/spec/workerGroupSpecs/0/template/spec/containers/0/resources"
    ops = [
        {
            "op": "replace",
            "path": f"{worker}/limits",
            "value": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu.shared": "1"},
        },
        {
            "op": "replace",
            "path": f"{worker}/requests",
            "value": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu.shared": "1"},
        },
    ]
    target = {"group": "ray.io", "version": "v1", "kind": "RayCluster", "name": "serve"}
    result = _verify_tampered(
        tmp_path,
        monkeypatch,
        (HERE / "ray.yaml").read_text(),
        "GPA-PL-004",
        {"shared_resource": "nvidia.com/gpu.shared"},
        target,
        ops,
    )
    assert result.exit_code == 1, result.output
    assert "Ray counts as GPUs" in result.output


def test_verify_exits_1_when_an_init_container_held_the_only_gpu(tmp_path, monkeypatch, kubectl):
    # The planned patch is a Job's deadline (the file's other object); the
    # hand-added one drops the Deployment's initContainer GPU, its only one.
    ops = [{"op": "remove", "path": "/spec/template/spec/initContainers/0/resources"}]
    target = {"group": "apps", "version": "v1", "kind": "Deployment", "name": "warm"}
    manifest = (HERE / "init-gpu.yaml").read_text() + "---\n" + (HERE / "argo-job.yaml").read_text()
    result = _verify_tampered(tmp_path, monkeypatch, manifest, "GPA-AL-008", {}, target, ops)
    assert result.exit_code == 1, result.output
    assert "initContainers held its only GPU" in result.output


def test_a_coherent_overlay_still_verifies(tmp_path, monkeypatch, kubectl):
    from gpuaudit.cli.main import main

    source = tmp_path / "app.yaml"
    source.write_text((HERE / "argo-job.yaml").read_text())
    out = tmp_path / "overlay"
    result = CliRunner().invoke(main, ["fix", str(source), "--out", str(out), "--rules", "GPA-AL-008", "--verify"])
    assert result.exit_code == 0, result.output
    assert "incoherent" not in result.output
    patch = next((out / "patches").glob("*.yaml")).read_text()
    assert "activeDeadlineSeconds" in patch and "ttlSecondsAfterFinished" not in patch


# --- planners: honest declines and sizing ----------------------------------------------


def test_a_second_finding_on_a_workload_the_overlay_moves_is_fixed_by_that_move():
    import msgspec

    from tests.test_remediate_units import SERVICE, _findings, _plan

    (finding,) = _findings(SERVICE, "GPA-AL-001")
    twin = msgspec.structs.replace(finding, rule="GPA-AL-101")  # another rule, same remediation
    plan = _plan([finding, twin], prefer="shared")
    (change,) = plan.changes
    assert {f.rule for f in change.findings} == {"GPA-AL-001", "GPA-AL-101"}
    assert not [s for s in plan.skipped if "no container requests whole GPUs" in s.reason]


def test_review_never_prints_an_empty_location():
    import msgspec

    from gpuaudit.remediate.review import _where
    from tests.test_remediate_units import SERVICE, _findings

    (finding,) = _findings(SERVICE, "GPA-AL-001")
    nowhere = msgspec.structs.replace(
        finding,
        location=msgspec.structs.replace(finding.location, file="", line=None),
        subject=msgspec.structs.replace(finding.subject, document=None),
    )
    assert _where(nowhere, {}) == ""


def test_no_mig_advice_for_gpus_that_cannot_do_mig():
    from gpuaudit.remediate.planners.declined import enable_mig_reason
    from tests.manifests import node_facts

    assert "cannot be partitioned with MIG" in enable_mig_reason(node_facts("n1", model="L4"))
    assert "cannot be partitioned with MIG" in enable_mig_reason(node_facts("n1", product="NVIDIA-L40S"))
    assert "nvidia.com/mig.config" in enable_mig_reason(node_facts("n1", model="A100-80GB", mig_capable=True))


def test_gitops_controllers_are_recognised():
    from gpuaudit.remediate.planners.batch import gitops_controller

    def job(labels=None, annotations=None):
        return {"metadata": {"labels": labels or {}, "annotations": annotations or {}}}

    assert gitops_controller(job(annotations={"argocd.argoproj.io/tracking-id": "x"})) == "ArgoCD"
    assert gitops_controller(job(labels={"kustomize.toolkit.fluxcd.io/name": "apps"})) == "Flux"
    assert gitops_controller(job(labels={"helm.toolkit.fluxcd.io/name": "apps"})) == "Flux"
    assert gitops_controller(job(labels={"app.kubernetes.io/instance": "x"})) is None  # Helm sets it too


def test_time_slicing_replicas_fit_the_colocated_peaks():
    from gpuaudit.remediate.sizing import colocated_fit

    # L4 24 GiB: two pods of 9 GiB and 8 GiB fit, a third does not
    assert colocated_fit(24576, [9216, 8192, 8192]) == 2
    # compute: p95 0.4 + 0.3 + 0.3 = 1.0 fits three, not four
    assert colocated_fit(1.0, [0.4, 0.3, 0.3]) == 3
    # one workload of 6000 MiB: four of its replicas fit 24 GiB
    assert colocated_fit(24576, [6000]) == 4


def test_effective_pairs_keep_the_document_as_written():
    from gpuaudit.model.serving_runtimes import effective_pairs

    read = read_paths([str(HERE / "kserve-vllm.yaml")])
    pairs = effective_pairs(read.documents)
    written, judged = next(p for p in pairs if p[0].kind == "InferenceService")
    assert "requests" not in written.obj["spec"]["predictor"]["model"]["resources"]
    assert judged.obj["spec"]["predictor"]["model"]["resources"]["requests"]["cpu"] == "12"
    runtime = next(p for p in pairs if p[0].kind == "ServingRuntime")
    assert runtime[0] is runtime[1]


def test_effective_workloads_for_the_check_pipeline():
    from gpuaudit.model.serving_runtimes import effective_workloads
    from gpuaudit.model.workload_builder import build_workloads

    read = read_paths([str(HERE / "kserve-vllm.yaml")])
    isvc = [d for d in read.documents if d.kind == "InferenceService"]
    runtime = [d.obj for d in read.documents if d.kind == "ServingRuntime"]
    workloads, _ = build_workloads(isvc, builtin_locators())
    (w,) = effective_workloads(workloads, runtime, builtin_locators())
    (c,) = w.templates[0].containers
    assert (c.cpu_request, c.memory_request) == (12, 128 * 2**30)
    assert "/dev/shm" in c.volume_mounts.values()
    assert w.document is isvc[0]


def test_kuberay_shm_counts_and_the_planner_declines_a_smaller_one():
    (before,) = _docs("ray.yaml")
    (after,) = _docs("ray.yaml")
    spec = after["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    problems = _problems(before, after)
    assert any("/dev/shm size goes down from 32Gi" in p and "KubeRay" in p for p in problems)

    from gpuaudit.model import Document
    from gpuaudit.model.workload_builder import build_workloads
    from gpuaudit.remediate.planners import PLANNERS
    from gpuaudit.remediate.planners.common import Context, RunState

    doc = Document(before, "ray.yaml", 1)
    (w,) = build_workloads([doc], builtin_locators())[0]
    worker = next(t for t in w.templates if t.containers[0].gpus)
    params = {"size_limit": "16Gi", "memory_fraction": 0.5, "volume_name": "dshm"}
    declined = PLANNERS["add-dev-shm"].plan(Context(None, {}, doc, worker, None, params, RunState()))
    assert "KubeRay mounts a memory-backed /dev/shm" in declined.reason


def test_on_gke_the_pod_selects_a_time_shared_pool_and_keeps_its_resource(tmp_path, kubectl):
    from gpuaudit.cli.main import main

    out = tmp_path / "overlay"
    # An embedding server (vLLM would be declined: it reserves 90% of the GPU's memory, time-sharing or not)
    app = tmp_path / "deployment.yaml"
    app.write_text((HERE / "deployment.yaml").read_text().replace("vllm/vllm-openai:v0.10.0", "embedder:1"))
    args = ["fix", str(app), "--config", str(HERE / "gke.gpuaudit.yaml")]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--rules", "GPA-AL-001", "--verify"])
    assert result.exit_code == 0, result.output
    (patch,) = (out / "patches").iterdir()
    text = patch.read_text()
    assert "cloud.google.com/gke-gpu-sharing-strategy: time-sharing" in text
    assert "gpu.shared" not in text and "nvidia.com/gpu" not in text.split("spec:", 1)[1]


def test_on_gke_a_vllm_server_is_not_time_shared(tmp_path, kubectl):
    from gpuaudit.cli.main import main

    out = tmp_path / "overlay"
    # On an H100 (a GPU that offers MIG) GPA-AL-001 advises a share; GKE's
    # time-sharing is no MIG slice, so the move is declined.
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(
        (HERE / "deployment.yaml")
        .read_text()
        .replace(
            "    spec:\n      containers:",
            "    spec:\n      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n      containers:",
        )
    )
    args = ["fix", str(deployment), "--config", str(HERE / "gke.gpuaudit.yaml")]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--rules", "GPA-AL-001"])
    assert result.exit_code == 0, result.output
    assert not (out / "patches").exists()
    assert "vLLM reserves 90% of the GPU memory at start (vLLM's default 0.9)" in (out / "REVIEW.md").read_text()


_EIGHT_GPUS_TP2 = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm}
spec:
  replicas: 1
  selector: {matchLabels: {app: llm}}
  template:
    metadata: {labels: {app: llm}}
    spec:
      nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
      containers:
      - name: server
        image: vllm/vllm-openai:v0.6.3
        args: [--model, meta-llama/Llama-3.1-8B-Instruct, --tensor-parallel-size, "2"]
        resources:
          limits: {nvidia.com/gpu: 8%s}
"""


@pytest.mark.parametrize(
    ("memory", "patched"),
    [("", False), (", memory: 64Gi", True)],
    ids=["no-memory-request", "memory-limit"],
)
def test_a_patch_that_would_bring_another_rules_finding_is_declined(tmp_path, kubectl, memory, patched):
    # Eight GPUs take a whole node, so GPA-AP-003 does not ask for a memory
    # request; the tensor-parallel trim to two would share the node: without
    # one, the patch would bring that finding, and is declined naming it.
    # With one, it is patched; that an 8B model needs one 80 GB GPU, not the
    # two, is a further saving the verify names, not a problem it brings.
    from gpuaudit.cli.main import main

    source = tmp_path / "app.yaml"
    source.write_text(_EIGHT_GPUS_TP2 % memory)
    out = tmp_path / "overlay"
    result = CliRunner().invoke(main, ["fix", str(source), "--out", str(out), "--verify"])
    assert result.exit_code == 0, result.output  # verified: no patch brings a finding
    patches = "".join(p.read_text() for p in (out / "patches").glob("*.yaml"))
    review = (out / "REVIEW.md").read_text()
    assert ("nvidia.com/gpu: 2" in patches) is patched
    assert ("the patch would bring GPA-AP-003" in review) is not patched
    assert ("further: GPA-AL-002 Deployment/llm" in result.output) is patched
