"""Kustomize directories and Helm charts, rendered by the real tools
(kubectl's kustomize and helm, from .tools/bin on PATH)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, shared_or_skip

TOOLS = ROOT / ".tools" / "bin"
NF4 = "GoogleCloudPlatform__kubernetes-engine-samples__ai-ml__llm-serving-gemma__tgi__tgi-7b-bitsandbytes-nf4"


@pytest.fixture
def tools_path():
    """PATH with kubectl and helm (scripts/test.sh puts .tools/bin there too)."""
    path = os.pathsep.join([str(TOOLS), os.environ.get("PATH", "")])
    if shutil.which("kubectl", path=path) is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")
    return path


def report(proc) -> dict:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_a_kustomize_overlay_is_audited_as_rendered_and_points_at_its_base(run_cli, tools_path, tmp_path):
    package = shared_or_skip("corpus", "kustomize", NF4)
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    tgi = Path("pkg/ai-ml/llm-serving-gemma/tgi")
    overlay = tgi / "tgi-7b-bitsandbytes-nf4"
    # Its base is a file outside its folder: read only when the user allows it
    # (tests/robustness/test_kustomize_restrictor.py: what a hostile package does without that).
    refused = report(run_cli("check", str(overlay), "--format", "json", env={"PATH": tools_path}))
    [error] = refused["errors"]
    assert error["level"] == "error" and f"reads {tgi / 'tgi-7b.yaml'}, outside" in error["message"]
    proc = run_cli(
        "check", str(overlay), "--kustomize-load-restrictor", "none", "--format", "json", env={"PATH": tools_path}
    )
    result = report(proc)
    assert result["errors"] == []
    # The patch quantises to 4 bits: only the rendered object shows a 7B model
    # fitting one of the two GPUs it holds.
    [model] = [f for f in result["findings"] if f["rule"] == "GPA-AL-002"]
    assert model["evidence"]["model.dtype"] == "int4"
    assert model["location"]["file"] == str(tgi / "tgi-7b.yaml")
    base_lines = (tmp_path / tgi / "tgi-7b.yaml").read_text().splitlines()
    assert "nvidia.com/gpu: 2" in base_lines[model["location"]["line"] - 1]
    # The base file alone, read as it is, has no such finding.
    plain = report(run_cli("check", str(tgi / "tgi-7b.yaml"), "--format", "json"))
    assert not [f for f in plain["findings"] if f["rule"] == "GPA-AL-002"]


def test_walking_a_tree_renders_each_kustomization_and_skips_the_files_it_used(run_cli, tools_path):
    corpus = shared_or_skip("corpus", "kustomize")
    result = report(run_cli("check", str(corpus), "--format", "json", env={"PATH": tools_path}))
    # A patch is judged only as part of what it renders to, and a finding
    # points at it only where it sets the value: this one adds the GPU
    # container's resources without memory.
    [patched] = [f for f in result["findings"] if f["location"]["file"].endswith("job-patch.yaml")]
    assert patched["rule"] == "GPA-AP-003"
    lines = Path(patched["location"]["file"]).read_text().splitlines()
    assert lines[patched["location"]["line"] - 1].strip() == "resources:"
    # An overlay whose base file lies outside its folder is refused by
    # kustomize's load restrictor: not rendered, so not judged...
    refused = [e for e in result["errors"] if "outside its folder" in e["message"]]
    assert refused and all(e["level"] == "error" for e in refused)
    # ... unless the user asks for its plain resource files to be judged as files.
    warned = report(run_cli("check", str(corpus), "--render-errors", "warn", "-o", "json", env={"PATH": tools_path}))
    assert warned["summary"]["gpu_workloads"] > result["summary"]["gpu_workloads"]
    assert all(e["level"] == "warning" for e in warned["errors"] if "outside its folder" in e["message"])
    assert any("judged as plain files" in e["message"] for e in warned["errors"])
    remote = [e for e in result["errors"] if "remote base" in e["message"]]
    assert len(remote) == 1 and "kueue" in remote[0]["file"]  # pulls a URL: never fetched by default
    assert remote[0]["level"] == "error"
    # The operator's sample ClusterPolicy leaves MIG to each node's label,
    # which manifests do not show: nothing said of its sharing (GPA-SH-001).
    rendered = [f for f in result["findings"] if "NVIDIA__gpu-operator__config" in f["location"]["file"]]
    assert rendered == []


def test_without_kubectl_or_kustomize_it_says_so_and_reads_the_files_when_asked(run_cli, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [pod.yaml]\n")
    (overlay / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: n1\n"
        "  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    bare = tmp_path / "bin"
    bare.mkdir()
    # An unrendered unit leaves the audit partial: an error, exit 2, by default ...
    proc = run_cli("check", "overlay", "--format", "json", env={"PATH": str(bare)})
    result = report(proc)
    [error] = [e for e in result["errors"] if "not rendered" in e["message"]]
    assert proc.returncode == 2 and error["level"] == "error" and "neither kubectl nor kustomize" in error["message"]
    assert error["file"] == "overlay" and not result["findings"]
    # ... and with --render-errors warn a warning, its resource files judged as files.
    proc = run_cli("check", "overlay", "--render-errors", "warn", "--format", "json", env={"PATH": str(bare)})
    result = report(proc)
    [warning] = [e for e in result["errors"] if "not rendered" in e["message"]]
    assert warning["level"] == "warning" and "1 resource file(s) are judged as plain files" in warning["message"]
    assert proc.returncode == 1 and "GPA-PL-001" in {f["rule"] for f in result["findings"]}


def test_no_kustomize_reads_the_directory_as_plain_files(run_cli, tools_path, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [pod.yaml]\nnamePrefix: prod-\nnamespace: ml\n")
    (overlay / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: n1\n"
        "  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    rendered = report(run_cli("check", "overlay", "--format", "json", env={"PATH": tools_path}))
    pin = next(f for f in rendered["findings"] if f["rule"] == "GPA-PL-001")
    assert (pin["resource"]["namespace"], pin["resource"]["name"]) == ("ml", "prod-p")
    assert pin["location"] == {"file": "overlay/pod.yaml", "line": 5, "pointer": "/spec/nodeName"}
    plain = report(run_cli("check", "overlay", "--no-kustomize", "--format", "json", env={"PATH": tools_path}))
    pin = next(f for f in plain["findings"] if f["rule"] == "GPA-PL-001")
    assert (pin["resource"]["namespace"], pin["resource"]["name"]) == ("", "p")


SERVER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat}
spec:
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.8.5
        command: [sh, -c, "vllm serve $MODEL --port 8000"]
        envFrom:
        - configMapRef: {name: runtime}
        resources:
          requests: {cpu: "8", memory: 32Gi}
          limits: {nvidia.com/gpu: 1}
"""


@pytest.mark.parametrize(
    ("model", "advised"), [("Qwen/Qwen2.5-1.5B-Instruct", True), ("Qwen/Qwen2.5-32B-Instruct", False)]
)
def test_a_model_named_in_a_config_map_generator_env_file_is_read(run_cli, tools_path, tmp_path, model, advised):
    """kustomize renders `configMapGenerator: envs: [runtime.env]` to a
    ConfigMap with a hashed name and points envFrom at it: the model is read
    from there, and sharing is advised only for the small one."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "kustomization.yaml").write_text(
        "resources: [deployment.yaml]\nnamespace: llm\nconfigMapGenerator:\n- name: runtime\n  envs: [runtime.env]\n"
    )
    (app / "runtime.env").write_text(f"MODEL={model}\nMAX_MODEL_LEN=8192\n")
    (app / "deployment.yaml").write_text(SERVER)
    rendered = report(run_cli("check", "app", "--format", "json", env={"PATH": tools_path}))
    sharing = [f for f in rendered["findings"] if f["rule"] == "GPA-AL-001"]
    assert bool(sharing) is advised, rendered["findings"]
    if advised:
        assert sharing[0]["evidence"]["model.name"] == model
    facts = json.loads(run_cli("facts", "app", "--target", "pod", env={"PATH": tools_path}).stdout)
    (pod,) = [d["facts"] for d in facts if d["facts"]["name"] == "chat"]
    assert pod["model"]["name"] == model
    assert pod["model_scale"]["scale"] == ("small" if advised else "large")


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: llm\nversion: 0.1.0\n",
    "values.yaml": "gpus: 1\nnode: ''\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  template:
    spec:
      {{- if .Values.node }}
      nodeName: {{ .Values.node }}
      {{- end }}
      containers:
      - name: server
        resources:
          requests: {cpu: "8", memory: 32Gi}
          limits: {nvidia.com/gpu: {{ .Values.gpus }}}
""",
}


def test_a_helm_chart_is_rendered_with_its_values(run_cli, tools_path, tmp_path):
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    for name, text in CHART.items():
        (tmp_path / "chart" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "chart" / name).write_text(text)
    (tmp_path / "pin.yaml").write_text("node: gpu-node-3\ngpus: 0.5\n")
    default = report(run_cli("check", "--helm-chart", "chart", "--format", "json", env={"PATH": tools_path}))
    assert "GPA-PL-001" not in {f["rule"] for f in default["findings"]}
    proc = run_cli(
        "check",
        "--helm-chart",
        "chart",
        "--values",
        "pin.yaml",
        "--format",
        "json",
        env={"PATH": tools_path},
    )
    assert proc.returncode == 1
    by_rule = {f["rule"]: f for f in report(proc)["findings"]}
    assert by_rule["GPA-PL-001"]["location"]["file"] == "chart/templates/deployment.yaml"
    assert by_rule["GPA-PL-001"]["location"]["line"] == 9  # the nodeName line of the template
    assert by_rule["GPA-AL-005"]["location"]["line"] == 15  # 0.5 of a whole GPU


def test_a_chart_kind_nobody_knows_still_counts_its_gpus(run_cli, tools_path, tmp_path):
    # A wrapper kind whose GPU request is written twice in its template (two
    # roles): no template line is that request's own, and the object still
    # says it asks for GPUs (a warning, and the workload judged).
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    role = (
        "          {role}:\n            replicas: 1\n            template:\n              spec:\n"
        "                containers:\n                - name: pytorch\n                  image: pytorch/pytorch:2.4.0\n"
        "                  command: [torchrun, --nproc_per_node=8, train.py]\n"
        "                  resources:\n                    limits: {{nvidia.com/gpu: 8, memory: 64Gi, cpu: 500m}}\n"
    )
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: wrapped\nversion: 0.1.0\n")
    (chart / "templates" / "job.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Wrapper\nmetadata: {name: {{ .Release.Name }}-job}\nspec:\n"
        "  components:\n  - template:\n      apiVersion: kubeflow.org/v1\n      kind: PyTorchJob\n"
        "      spec:\n        pytorchReplicaSpecs:\n" + role.format(role="Master") + role.format(role="Worker")
    )
    result = report(run_cli("check", "--helm-chart", "chart", "--format", "json", env={"PATH": tools_path}))
    assert [e for e in result["errors"] if "Wrapper (example.com) is not in the pod-spec table" in e["message"]]
    assert result["summary"]["gpu_workloads"] == 1
    assert {f["rule"] for f in result["findings"]} >= {"GPA-AP-001"}


def test_an_error_in_what_helm_rendered_names_the_template_line_or_none(run_cli, tools_path, tmp_path):
    # `{{- if }}` lines vanish when rendered, so the rendered output's line
    # numbers are not the template's: a duplicate key is named at the one
    # template line with its text, else at no line (never at the line that
    # only has the rendered line's number: here a fine `resources:` above).
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: prep\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("storageClass: ''\n")
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  volumes:\n  - name: data\n"
        "    {{{{- if .Values.storageClass }}}}\n    ephemeral:\n      volumeClaimTemplate:\n        spec:\n"
        "          resources:\n            requests: {{storage: 1Gi}}\n    {{{{- else }}}}\n    emptyDir: {{}}\n"
        "    {{{{- end }}}}\n  containers:\n  - name: prep\n    image: python:3.12\n"
        "    {first}\n    resources:\n      limits: {{nvidia.com/gpu: 1, memory: 8Gi, cpu: 2}}\n"
    )
    (chart / "templates" / "twice.yaml").write_text(pod.format(name="twice", first="resources:"))
    (chart / "templates" / "once.yaml").write_text(
        pod.format(name="once", first="command: [python]\n    command: [sh]")
    )
    result = report(run_cli("check", "--helm-chart", "chart", "--format", "json", env={"PATH": tools_path}))
    errors = {e["file"].rsplit("/", 1)[-1]: e for e in result["errors"] if "duplicate key" in e["message"]}
    twice, once = errors["twice.yaml"], errors["once.yaml"]
    assert twice["line"] is None and "of what helm rendered" in twice["message"], twice
    lines = (chart / "templates" / "once.yaml").read_text().splitlines()
    assert lines[once["line"] - 1].strip() == "command: [sh]", once


def test_helm_chart_without_helm_is_an_input_error(run_cli, tmp_path):
    (tmp_path / "chart").mkdir()
    (tmp_path / "bin").mkdir()
    proc = run_cli("check", "--helm-chart", "chart", env={"PATH": str(tmp_path / "bin")})
    assert proc.returncode == 2
    assert "needs `helm` on PATH" in proc.stdout


def test_a_chart_link_out_of_the_chart_is_never_rendered(run_cli, tools_path, tmp_path):
    """A chart from a pull request could link a runner's file into the chart
    and copy it into an object name with `.Files.Get`: helm follows the link."""
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    secret = tmp_path / "runner" / "token"
    secret.parent.mkdir()
    secret.write_text("s3cret-runner-token")
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: leak\nversion: 0.1.0\n")
    (chart / "tok").symlink_to(secret)
    (chart / "templates" / "pod.yaml").write_text(
        'apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Files.Get "tok" | trim | quote }}\n'
        "spec:\n  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    proc = run_cli("check", "--helm-chart", "chart", "--format", "json", env={"PATH": tools_path})
    assert proc.returncode == 2, proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr
    [error] = [e for e in json.loads(proc.stdout)["errors"] if "leads outside" in e["message"]]
    assert error["file"].endswith("chart/tok")
    # The same chart with the link replaced by the file itself renders.
    (chart / "tok").unlink()
    (chart / "tok").write_text("inside")
    rendered = report(run_cli("check", "--helm-chart", "chart", "--format", "json", env={"PATH": tools_path}))
    assert rendered["summary"]["resources"] == 1


POD_OF_RELEASE = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-worker\nspec:\n  nodeName: n1\n"
    "  containers:\n  - name: c\n    image: x\n    resources: {limits: {nvidia.com/gpu: 1, cpu: 1, memory: 1Gi}}\n"
)


def write_chart(folder: Path, name: str, templates: dict[str, str], values: str = "") -> None:
    folder.mkdir(parents=True)
    (folder / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n")
    if values:
        (folder / "values.yaml").write_text(values)
    for file, text in templates.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(text)


def pinned_pods(result: dict) -> dict[str, str]:
    """The pod named by each GPA-PL-001 finding (the pod pinned by nodeName), by its template's chart folder."""
    return {
        f["location"]["file"].split("/templates/")[0]: f["resource"]["name"]
        for f in result["findings"]
        if f["rule"] == "GPA-PL-001"
    }


def test_a_chart_in_a_folder_whose_name_is_no_release_name_is_rendered(run_cli, tools_path, tmp_path):
    """helm refuses a release name that is no DNS-1123 label of at most 53
    characters; folders of real repositories are often named otherwise."""
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    folders = {
        "otwld+ollama-helm": "otwld-ollama-helm",
        "data_preparation": "data-preparation",
        "RLHF_PPO.": "rlhf-ppo",
        "x" * 60: "x" * 53,
        "__": "from-chart-yaml",  # nothing left of the folder's name: the chart's own
    }
    for folder in folders:
        write_chart(tmp_path / "repo" / folder, "From_Chart.yaml", {"templates/pod.yaml": POD_OF_RELEASE})
    proc = run_cli("check", "repo", "--format", "json", env={"PATH": tools_path})
    result = report(proc)
    assert result["errors"] == [] and proc.returncode == 1
    assert pinned_pods(result) == {f"repo/{folder}": f"{release}-worker" for folder, release in folders.items()}
    # --helm-chart names the chart the same way.
    alone = report(run_cli("check", "--helm-chart", "repo/otwld+ollama-helm", "-o", "json", env={"PATH": tools_path}))
    assert alone["errors"] == []
    assert pinned_pods(alone) == {"repo/otwld+ollama-helm": "otwld-ollama-helm-worker"}


def test_a_chart_that_renders_no_object_says_so_without_failing_the_run(run_cli, tools_path, tmp_path):
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")
    # NVIDIA/NeMo-Framework-Launcher's layout: the templates at the chart's root.
    write_chart(tmp_path / "repo" / "at-root", "at-root", {"training.yaml": POD_OF_RELEASE})
    write_chart(tmp_path / "repo" / "helpers-only", "helpers-only", {"templates/_helpers.tpl": "{{/* none */}}\n"})
    write_chart(
        tmp_path / "repo" / "switched-off",
        "switched-off",
        {"templates/pod.yaml": "{{- if .Values.enabled }}\n" + POD_OF_RELEASE + "{{- end }}\n"},
        values="enabled: false\n",
    )
    write_chart(tmp_path / "repo" / "renders", "renders", {"templates/pod.yaml": POD_OF_RELEASE})
    (tmp_path / "repo" / "empty" / "templates").mkdir(parents=True)
    (tmp_path / "repo" / "empty" / "Chart.yaml").write_text("apiVersion: v2\nname: empty\nversion: 0.1.0\n")
    proc = run_cli("check", "repo", "--format", "json", env={"PATH": tools_path})
    result = report(proc)
    assert proc.returncode == 1, "warnings and the one finding only: not a partial run"
    by_file = {e["file"]: e for e in result["errors"]}
    assert all(e["level"] == "warning" for e in result["errors"])
    assert by_file.keys() == {"repo/at-root", "repo/helpers-only", "repo/switched-off", "repo/empty"}
    assert by_file["repo/at-root"]["message"] == (
        "chart repo/at-root rendered no objects: its templates/ folder is missing; "
        "1 YAML file(s) at its root, such as training.yaml, are not templates to helm"
    )
    assert by_file["repo/empty"]["message"] == "chart repo/empty rendered no objects: its templates/ folder is empty"
    assert by_file["repo/helpers-only"]["message"].endswith(
        "its templates/ folder holds only helpers (_*) and NOTES.txt"
    )
    assert (
        by_file["repo/switched-off"]["message"] == "chart repo/switched-off rendered no objects with its default values"
    )
    assert pinned_pods(result) == {"repo/renders": "renders-worker"}
    # Only that chart, with values that switch its pod on: it renders, no warning.
    (tmp_path / "on.yaml").write_text("enabled: true\n")
    on = report(
        run_cli(
            "check", "--helm-chart", "repo/switched-off", "--values", "on.yaml", "-o", "json", env={"PATH": tools_path}
        )
    )
    assert on["errors"] == [] and pinned_pods(on) == {"repo/switched-off": "switched-off-worker"}
    (tmp_path / "off.yaml").write_text("enabled: false\n")
    off = report(
        run_cli(
            "check", "--helm-chart", "repo/switched-off", "--values", "off.yaml", "-o", "json", env={"PATH": tools_path}
        )
    )
    assert [e["message"] for e in off["errors"]] == [
        "chart repo/switched-off rendered no objects with the values of off.yaml"
    ]
    # Alone, the empty chart's run is clean: exit 0, the warning printed.
    alone = run_cli("check", "--helm-chart", "repo/at-root", env={"PATH": tools_path})
    assert alone.returncode == 0 and "rendered no objects" in alone.stdout + alone.stderr


def helm_or_skip(tools_path: str) -> None:
    if shutil.which("helm", path=tools_path) is None:
        pytest.skip("helm is not installed")


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


LIBRARY_POD = (
    '{{- define "commonlib.pod" -}}\n'
    + POD_OF_RELEASE.replace("{{ .Release.Name }}-worker", "{{ .Release.Name }}-{{ .Chart.Name }}")
    + "{{- end -}}\n"
)


def test_a_library_chart_is_no_unit_and_a_local_dependency_is_rendered_in_a_copy(run_cli, tools_path, tmp_path):
    """helm installs no library chart (`type: library`): a tree that holds
    one is not a render error. A chart that depends on it by `file://` is
    rendered with it, from a copy: the user's folder is never written."""
    helm_or_skip(tools_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_chart(repo / "libs/commonlib", "commonlib", {"templates/_pod.tpl": LIBRARY_POD})
    (repo / "libs/commonlib/Chart.yaml").write_text("apiVersion: v2\nname: commonlib\ntype: library\nversion: 0.1.0\n")
    write_chart(repo / "libs/gpu-sub", "gpu-sub", {"templates/pod.yaml": POD_OF_RELEASE.replace("worker", "sub")})
    write_chart(repo / "apps/train", "train", {"templates/pod.yaml": '{{ include "commonlib.pod" . }}\n'})
    (repo / "apps/train/Chart.yaml").write_text(
        "apiVersion: v2\nname: train\nversion: 0.1.0\ndependencies:\n"
        '- {name: commonlib, version: 0.1.0, repository: "file://../../libs/commonlib"}\n'
        '- {name: gpu-sub, alias: extra, version: 0.1.0, repository: "file://../../libs/gpu-sub"}\n'
    )
    before = files_under(repo)
    proc = run_cli("check", "repo", "--format", "json", env={"PATH": tools_path, "GPUAUDIT_NO_CACHE": "1"})
    result = report(proc)
    assert result["errors"] == [] and proc.returncode == 1
    pins = sorted(
        (f["resource"]["name"], f["location"]["file"], f["units"])
        for f in result["findings"]
        if f["rule"] == "GPA-PL-001"
    )
    assert pins == [
        # gpu-sub is a chart of its own too: the same finding in both units is one;
        # its template is named where it lies, not in the copy
        ("train-sub", "repo/libs/gpu-sub/templates/pod.yaml", ["repo/apps/train", "repo/libs/gpu-sub"]),
        ("train-train", "repo/apps/train/templates/pod.yaml", ["repo/apps/train"]),
    ]
    assert files_under(repo) == before, "no charts/ folder, no Chart.lock written in the user's tree"
    # Named on its own, a library chart is what the user asked for: helm's reason, whole.
    named = report(run_cli("check", "--helm-chart", "repo/libs/commonlib", "-o", "json", env={"PATH": tools_path}))
    [error] = named["errors"]
    assert error["level"] == "error" and error["message"].endswith("library charts are not installable")


def test_a_vendored_subchart_is_named_by_its_folder_not_its_alias(run_cli, tools_path, tmp_path):
    """helm names a subchart's templates `<parent>/charts/<alias>/...`: a
    finding there points at the file in the subchart's own folder
    (charts/nemotron-nano-9b-v2, aliased nemotron), where a reviewer's
    comment can attach."""
    helm_or_skip(tools_path)
    parent = tmp_path / "nims"
    write_chart(parent, "nims", {})
    write_chart(parent / "charts/nemotron-nano-9b-v2", "nemotron-nano-9b-v2", {"templates/pod.yaml": POD_OF_RELEASE})
    write_chart(parent / "charts/plain", "plain", {"templates/pod.yaml": POD_OF_RELEASE.replace("worker", "plain")})
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: nims\nversion: 0.1.0\ndependencies:\n"
        "- {name: nemotron-nano-9b-v2, alias: nemotron, version: 0.1.0}\n- {name: plain, version: 0.1.0}\n"
    )
    # One level down the same: nv-ingest's page-elements NIM, vendored in a
    # folder named for its chart and rendered under its alias.
    ingest = parent / "charts/plain"
    write_chart(
        ingest / "charts/nvidia-nim-page-elements",
        "nvidia-nim-page-elements",
        {"templates/pod.yaml": POD_OF_RELEASE.replace("worker", "page")},
    )
    (ingest / "Chart.yaml").write_text(
        "apiVersion: v2\nname: plain\nversion: 0.1.0\ndependencies:\n"
        "- {name: nvidia-nim-page-elements, alias: page-elements, version: 0.1.0}\n"
    )
    result = report(run_cli("check", "--helm-chart", str(parent), "-o", "json", env={"PATH": tools_path}))
    files = {f["location"]["file"] for f in result["findings"] if f["rule"] == "GPA-PL-001"}
    assert files == {
        f"{parent}/charts/nemotron-nano-9b-v2/templates/pod.yaml",
        f"{parent}/charts/plain/templates/pod.yaml",
        f"{parent}/charts/plain/charts/nvidia-nim-page-elements/templates/pod.yaml",
    }
    assert all(Path(f).is_file() for f in files)


def test_a_local_dependency_that_cannot_be_copied_in_says_why(run_cli, tools_path, tmp_path):
    helm_or_skip(tools_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_chart(tmp_path / "elsewhere/common", "common", {"templates/pod.yaml": POD_OF_RELEASE})
    write_chart(repo / "app", "app", {"templates/pod.yaml": POD_OF_RELEASE})
    (repo / "app/Chart.yaml").write_text(
        "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n"
        '- {name: common, version: 0.1.0, repository: "file://../../elsewhere/common"}\n'
        '- {name: gone, version: 0.1.0, repository: "file://../gone"}\n'
    )
    result = report(run_cli("check", "repo", "--format", "json", env={"PATH": tools_path}))
    [error] = result["errors"]
    assert error["level"] == "error" and error["file"] == "repo/app"
    assert (
        f"its local dependency common (file://../../elsewhere/common) is not vendored in charts/, "
        f"and that folder leads outside {repo.resolve()}"
    ) in error["message"]
    assert (
        "its local dependency gone (file://../gone) is not vendored in charts/, and that folder does not exist"
        in (error["message"])
    )
    assert "helm dependency build" not in error["message"]  # nothing to fetch from a repository


def test_a_copied_chart_reads_what_its_links_lead_to_in_the_repository(run_cli, tools_path, tmp_path):
    """A link deep in a repository that climbs to the repository's root, copied
    as it is into a temporary folder, would climb from there to the runner's
    root: the copy must read what the link leads to where it lies."""
    helm_or_skip(tools_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "etc").mkdir()
    (repo / "etc/hostname").write_text("from-the-repository\n")
    deep = repo / "a/b/c/d/e/f/g/h/i/j"
    write_chart(deep / "chart", "chart", {"templates/pod.yaml": POD_OF_RELEASE})
    (deep / "chart/templates/pod.yaml").write_text(
        POD_OF_RELEASE.replace("{{ .Release.Name }}-worker", '{{ .Files.Get "tok" | trim | quote }}')
    )
    (deep / "chart/tok").symlink_to("../" * 11 + "etc/hostname")
    write_chart(deep / "lib", "lib", {"templates/_x.tpl": "{{/* x */}}\n"})
    (deep / "lib/Chart.yaml").write_text("apiVersion: v2\nname: lib\ntype: library\nversion: 0.1.0\n")
    (deep / "chart/Chart.yaml").write_text(
        'apiVersion: v2\nname: chart\nversion: 0.1.0\ndependencies:\n- {name: lib, version: 0.1.0, repository: "file://../lib"}\n'
    )
    result = report(run_cli("check", "repo/a", "--format", "json", env={"PATH": tools_path, "GPUAUDIT_NO_CACHE": "1"}))
    assert result["errors"] == []
    assert {f["resource"]["name"] for f in result["findings"]} == {"from-the-repository"}


def test_a_chart_rendered_from_a_copy_never_writes_through_its_links(run_cli, tools_path, tmp_path):
    """The copy's Chart.yaml is rewritten and its charts/ filled: where they
    are links into the repository, the links are replaced, never followed."""
    helm_or_skip(tools_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_chart(repo / "lib", "lib", {"templates/pod.yaml": POD_OF_RELEASE.replace("worker", "lib")})
    (repo / "shared/vendored").mkdir(parents=True)
    (repo / "shared/Chart.yaml").write_text(
        "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n"
        '- {name: lib, version: 0.1.0, repository: "file://../lib"}\n'
        "- {name: monitoring, version: 1.0.0, repository: https://203.0.113.9/charts, condition: monitoring.enabled}\n"
    )
    write_chart(repo / "app", "app", {"templates/pod.yaml": POD_OF_RELEASE}, values="monitoring: {enabled: false}\n")
    (repo / "app/Chart.yaml").unlink()
    (repo / "app/Chart.yaml").symlink_to("../shared/Chart.yaml")
    (repo / "app/charts").symlink_to("../shared/vendored")
    before = {f: (repo / f).read_bytes() for f in files_under(repo) if (repo / f).is_file()}
    result = report(run_cli("check", "repo/app", "-o", "json", env={"PATH": tools_path, "GPUAUDIT_NO_CACHE": "1"}))
    assert result["errors"] == []
    assert {f["resource"]["name"] for f in result["findings"]} == {"app-worker", "app-lib"}
    assert {f: (repo / f).read_bytes() for f in files_under(repo) if (repo / f).is_file()} == before


NIL_TEMPLATE = (
    "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\nspec:\n  template:\n    spec:\n"
    "      containers:\n      - name: c\n        resources:\n          limits:\n"
    "            nvidia.com/gpu: {{ .Values.workload.gpus }}\n"
)


def test_a_helm_error_keeps_its_cause_on_one_line(run_cli, tools_path, tmp_path):
    helm_or_skip(tools_path)
    write_chart(tmp_path / "repo/x", "x", {"templates/workload-job.yaml": NIL_TEMPLATE})
    result = report(run_cli("check", "repo", "--format", "json", env={"PATH": tools_path}))
    by_file = {e["file"]: e["message"] for e in result["errors"]}
    nil = by_file["repo/x"]
    assert "x/templates/workload-job.yaml:12:" in nil
    assert "at <.Values.workload.gpus>: nil pointer evaluating interface {}.gpus" in nil
    assert "\n" not in nil and "--debug" not in nil


def test_a_tools_error_is_one_bounded_line_without_terminal_controls():
    from gpuaudit.sources.tools import MESSAGE_CHARS, error_message

    stderr = (
        "walk.go:75: found symbolic link in path: /x resolves to /y\n"
        'Error: template: x/templates/a.yaml:3:9: executing "x/templates/a.yaml"\n'
        "  at <.Values.a>:\x1b]0;owned\x07 nil pointer \x1b[2J\u202eevaluating\n\n"
        "Use --debug flag to render out invalid YAML\n"
    )
    assert error_message(stderr) == (
        'template: x/templates/a.yaml:3:9: executing "x/templates/a.yaml" at <.Values.a>: nil pointer evaluating'
    )
    long = error_message("Error: " + "word " * 500)
    assert len(long) == MESSAGE_CHARS and long.endswith("\u2026")
    assert error_message("no such chart\n") == "no such chart"


def test_a_long_kustomize_error_is_cut_to_a_readable_line(run_cli, tools_path, tmp_path):
    # Each base in a chain adds kustomize's "accumulating resources from"
    # prefix; twelve of them, ending in a patch that matches nothing, say
    # some 4,000 characters, of which the input error keeps the first 400.
    previous = None
    for level in range(12):
        folder = tmp_path / f"level-{level:02d}-{'x' * 40}"
        folder.mkdir()
        if previous is None:
            (folder / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
            (folder / "patch.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: absent}\n")
            (folder / "kustomization.yaml").write_text("resources: [cm.yaml]\npatches: [{path: patch.yaml}]\n")
        else:
            (folder / "kustomization.yaml").write_text(f"resources: ['../{previous.name}']\n")
        previous = folder
    proc = run_cli("check", previous.name, "--format", "json", cwd=tmp_path, env={"PATH": tools_path})
    result = report(proc)
    [error] = [e for e in result["errors"] if "kustomize build failed" in e["message"]]
    said = error["message"].split("kustomize build failed: ", 1)[1].split(" (--render-errors", 1)[0]
    assert proc.returncode == 2
    assert len(said) == 400 and said.endswith("\u2026") and said.startswith("error: accumulating resources")
