"""A repository judged as its deployable units (sources/units.py), with the
real kubectl (kustomize) and helm from .tools/bin."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

TOOLS = ROOT / ".tools" / "bin"

pytestmark = pytest.mark.skipif(
    not (TOOLS / "kubectl").exists() or not (TOOLS / "helm").exists(),
    reason="kubectl and helm are not in .tools/bin (scripts/install-kube-tools.py)",
)

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}  # MIG: a share is the advice (GPA-AL-001)
      containers:
      - name: main
        image: vllm/vllm-openai:v0.6.0
        args: [--model=Qwen/Qwen2.5-0.5B-Instruct]
        resources:
          limits:
            nvidia.com/gpu: 1
            memory: 16Gi
          requests:
            cpu: "8"
            memory: 16Gi
"""

PIN_PATCH = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/hostname: gpu-node-7
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path):
    """The tools on PATH and a render cache of this test's own."""
    return {
        "PATH": os.pathsep.join([str(TOOLS), os.environ.get("PATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


def check(run_cli, env, *args: str) -> tuple[int, dict]:
    proc = run_cli("check", *args, "-o", "json", env=env, cwd=Path.cwd())
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def gitops(root: Path) -> Path:
    """A base, two overlays (one pins by a patch), a component used by the
    pinned one, and a plain folder that reuses the base's name."""
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "apps/base/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(root / "apps/base/deployment.yaml", DEPLOYMENT.format(name="chat"))
    write(
        root / "apps/overlays/prod/kustomization.yaml",
        "resources: [../../base]\nnamePrefix: prod-\npatches:\n- path: pin.yaml\n"
        "components: [../../components/tolerate]\n",
    )
    write(root / "apps/overlays/prod/pin.yaml", PIN_PATCH.format(name="chat"))
    write(root / "apps/overlays/dev/kustomization.yaml", "resources: [../../base]\nnamePrefix: dev-\n")
    write(
        root / "apps/components/tolerate/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: tolerate.yaml\n",
    )
    write(
        root / "apps/components/tolerate/tolerate.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: chat}\n"
        "spec: {template: {spec: {tolerations: [{key: nvidia.com/gpu, operator: Exists}]}}}\n",
    )
    write(root / "variants/one/deployment.yaml", DEPLOYMENT.format(name="chat"))
    write(root / "variants/two/deployment.yaml", DEPLOYMENT.format(name="chat"))
    return root


def test_a_gitops_tree_is_its_units(run_cli, env, tmp_path, monkeypatch):
    tree = gitops(tmp_path / "repo")
    monkeypatch.chdir(tree)
    code, result = check(run_cli, env, ".")
    assert code == 1, result["errors"]
    # No "defined again": the overlays and the example folders are separate units.
    assert not [e for e in result["errors"] if "defined again" in e["message"]]
    # The component was never built alone (it would fail: exit 2).
    assert not [e for e in result["errors"] if e["level"] == "error"]
    # The pin is the prod overlay's patch: the finding points at its line, in that unit only.
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["location"]["file"] == "apps/overlays/prod/pin.yaml"
    rows = (tree / pin["location"]["file"]).read_text().splitlines()
    assert "kubernetes.io/hostname" in rows[pin["location"]["line"] - 1]
    assert pin["units"] == ["apps/overlays/prod"]
    # A base's finding is one finding naming both roots, at the base's line.
    whole = [f for f in result["findings"] if f["rule"] == "GPA-AL-001" and "apps/base" in f["location"]["file"]]
    assert len(whole) == 1 and sorted(whole[0]["units"]) == ["apps/overlays/dev", "apps/overlays/prod"]
    # Every format names the units: SARIF and PolicyReport results too.
    sarif = json.loads(run_cli("check", ".", "-o", "sarif", env=env, cwd=tree).stdout)
    results = sarif["runs"][0]["results"]
    [held] = [r for r in results if r["ruleId"] == "GPA-AL-001" and len(r["properties"].get("units", [])) > 1]
    assert sorted(held["properties"]["units"]) == ["apps/overlays/dev", "apps/overlays/prod"]
    reports = yaml.safe_load_all(run_cli("check", ".", "-o", "policyreport", env=env, cwd=tree).stdout)
    units = {r.get("properties", {}).get("units") for doc in reports if doc for r in doc.get("results") or []}
    assert "apps/overlays/dev, apps/overlays/prod" in units
    text = run_cli("check", ".", "--color", "never", env=env, cwd=tree).stdout
    assert "UNITS apps/overlays/dev, apps/overlays/prod\n  ALLOCATION\n" in text
    assert "\nUNIT apps/overlays/prod\n" in text and "\nUNIT variants/one\n" in text
    # Each folder of plain files is a unit of its own.
    variants = {tuple(f["units"]) for f in result["findings"] if f["location"]["file"].startswith("variants/")}
    assert variants == {("variants/one",), ("variants/two",)}


def test_a_changed_base_rechecks_the_overlays_that_use_it(run_cli, env, tmp_path, monkeypatch):
    tree = gitops(tmp_path / "repo")
    monkeypatch.chdir(tree)
    code, result = check(run_cli, env, "--changed-files", "apps/base/deployment.yaml")
    assert code == 1
    units = {u for f in result["findings"] for u in f.get("units", [])}
    assert units == {"apps/overlays/dev", "apps/overlays/prod"}
    assert not any(f["location"]["file"].startswith("variants/") for f in result["findings"])
    # A component's patch stands for the roots that use the component: prod only.
    code, result = check(run_cli, env, "--changed-files", "apps/components/tolerate/tolerate.yaml")
    assert {f["resource"]["name"] for f in result["findings"]} == {"prod-chat"}


def test_the_render_cache_is_keyed_by_content(run_cli, env, tmp_path, monkeypatch):
    tree = gitops(tmp_path / "repo")
    monkeypatch.chdir(tree)
    first = check(run_cli, env, "apps")
    renders = list((tmp_path / "cache" / "gpuaudit" / "renders").iterdir())
    assert len(renders) == 2  # the two roots
    assert check(run_cli, env, "apps") == first  # from the cache: the same answer
    # A changed base: both roots render again, and see the change.
    base = tree / "apps/base/deployment.yaml"
    base.write_text(base.read_text().replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2"))
    _, changed = check(run_cli, env, "apps")
    assert len(list((tmp_path / "cache" / "gpuaudit" / "renders").iterdir())) == 4
    assert changed != first[1]


def test_a_remote_base_fails_fast_without_fetching(run_cli, env, tmp_path, monkeypatch):
    write(tmp_path / "remote/kustomization.yaml", "resources:\n- https://203.0.113.9/never/manifests.yaml\n")
    write(tmp_path / "remote/local.yaml", DEPLOYMENT.format(name="local"))
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code, result = check(run_cli, env, "remote")
    assert time.monotonic() - started < 20  # nothing waited on the network
    [error] = result["errors"]
    assert code == 2 and error["level"] == "error" and error["file"] == "remote"
    assert "remote base 'https://203.0.113.9/never/manifests.yaml' not fetched" in error["message"]


def test_a_generated_file_under_both_render_error_modes(run_cli, env, tmp_path, monkeypatch):
    write(
        tmp_path / "app/kustomization.yaml",
        "resources: [deployment.yaml]\nconfigMapGenerator:\n- name: runtime\n  envs: [runtime.env]\n",
    )
    write(tmp_path / "app/deployment.yaml", DEPLOYMENT.format(name="served").replace("replicas: 1", "replicas: 2"))
    monkeypatch.chdir(tmp_path)
    code, failed = check(run_cli, env, "app")
    [error] = failed["errors"]
    assert code == 2 and not failed["findings"]
    assert "'runtime.env', which is not in the repository" in error["message"] and error["level"] == "error"
    code, warned = check(run_cli, env, "app", "--render-errors", "warn")
    [warning] = warned["errors"]
    assert warning["level"] == "warning" and "1 resource file(s) are judged as plain files" in warning["message"]
    assert {f["location"]["file"] for f in warned["findings"]} == {"app/deployment.yaml"}
    assert code == 0 or code == 1


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: serve\nversion: 0.1.0\n"
    "dependencies:\n- name: monitoring\n  version: 1.0.0\n  repository: https://203.0.113.9/charts\n"
    "  condition: monitoring.enabled\n",
    "values.yaml": "gpus: 1\nreplicas: 1\nmonitoring: {enabled: false}\n",
    "ci/pinned-values.yaml": "node: gpu-node-3\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  replicas: {{ .Values.replicas }}
  template:
    spec:
      {{- with .Values.node }}
      nodeSelector:
        kubernetes.io/hostname: {{ . }}
      {{- end }}
      containers:
      - name: server
        image: vllm/vllm-openai:v0.6.0
        resources:
          limits:
            nvidia.com/gpu: {{ .Values.gpus }}
""",
}


def test_a_chart_is_rendered_with_each_ci_values_file(run_cli, env, tmp_path, monkeypatch):
    for name, text in CHART.items():
        write(tmp_path / "charts/serve" / name, text)
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, "charts")
    # Its dependency is switched off, and not vendored: rendered from a copy without it.
    assert not [e for e in result["errors"] if e["level"] == "error"], result["errors"]
    assert not [e for e in result["errors"] if "not auditable until rendered" in e["message"]]
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["units"] == ["charts/serve [ci/pinned-values.yaml]"]
    assert pin["location"]["file"] == "charts/serve/templates/deployment.yaml"
    # Switched on, it cannot be rendered offline: the reason, no fetch. The
    # chart is audited through its other variants: a warning, not a partial audit.
    (tmp_path / "charts/serve/ci/monitored-values.yaml").write_text("monitoring: {enabled: true}\n")
    code, result = check(run_cli, env, "charts")
    [warning] = [e for e in result["errors"] if "monitoring" in e["message"]]
    assert code != 2 and "its dependencies (monitoring) are not in charts/" in warning["message"]
    assert warning["level"] == "warning" and warning["file"] == "charts/serve [ci/monitored-values.yaml]"
    assert "audited as charts/serve, charts/serve [ci/pinned-values.yaml]" in warning["message"]


def test_a_chart_is_audited_through_the_values_files_beside_its_defaults(run_cli, env, tmp_path, monkeypatch):
    # Defaults that ask for no GPU (and need a value to render at all): the
    # chart is deployed with values-<env>.yaml, and audited so. A variant the
    # user named (.gpuaudit.yaml) that does not render stays an error.
    chart = dict(CHART)
    chart["values.yaml"] = "gpus: 0\nreplicas: 1\nmonitoring: {enabled: false}\n"
    chart["templates/deployment.yaml"] = chart["templates/deployment.yaml"].replace(
        "{{ .Values.replicas }}", '{{ required "replicas is required" .Values.count }}'
    )
    chart["values-k3s.yaml"] = "gpus: 1\ncount: 1\nnode: gpu-node-3\n"
    chart["notes-values.txt"] = "not a values file\n"
    for name, text in chart.items():
        write(tmp_path / "charts/serve" / name, text)
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, "charts")
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["units"] == ["charts/serve [values-k3s.yaml]"]
    assert not [e for e in result["errors"] if e["level"] == "error"], result["errors"]
    [default] = [e for e in result["errors"] if e["file"] == "charts/serve"]
    assert "replicas is required" in default["message"] and default["level"] == "warning"
    assert code == 1
    write(tmp_path / ".gpuaudit.yaml", "repository:\n  charts:\n    charts/serve: [[envs/none.yaml]]\n")
    write(tmp_path / "envs/none.yaml", "count: null\n")
    code, result = check(run_cli, env, "charts")
    assert code == 2 and [e for e in result["errors"] if e["level"] == "error" and "envs/none.yaml" in e["file"]]


def test_a_values_file_linked_outside_the_repository_is_not_read(run_cli, env, tmp_path, monkeypatch):
    """Issue 32, item 2: a values file that is a link to a runner's file."""
    home = tmp_path / "home"
    write(home / ".docker/config.json", '{"auths": {"ghcr.io": {"auth": "c2VjcmV0LXRva2VuLTEyMzQ1"}}}\n')
    repo = tmp_path / "repo"
    for name, text in CHART.items():
        write(repo / "charts/serve" / name, text)
    write(repo / ".git/HEAD", "ref: refs/heads/main\n")
    (repo / "values-prod.yaml").symlink_to(home / ".docker/config.json")
    monkeypatch.chdir(repo)
    proc = run_cli(
        "check", "--helm-chart", "charts/serve", "--values", "values-prod.yaml", "-o", "json", env=env, cwd=repo
    )
    out = proc.stdout + proc.stderr
    assert "c2VjcmV0LXRva2VuLTEyMzQ1" not in out and "secret-token" not in out
    [error] = [e for e in json.loads(proc.stdout)["errors"] if e["level"] == "error"]
    assert proc.returncode == 2 and "values file leads outside" in error["message"]


def test_other_tools_templates_are_skipped_with_one_warning(run_cli, env, tmp_path, monkeypatch):
    write(tmp_path / "infra/node-pool.tftpl.yaml", DEPLOYMENT.format(name="${pool_name}"))
    write(tmp_path / "infra/gpu.tpl.yaml", DEPLOYMENT.format(name="${name}"))
    write(tmp_path / "infra/real.yaml", DEPLOYMENT.format(name="real"))
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "infra")
    [warning] = result["errors"]
    assert warning["level"] == "warning" and warning["message"].startswith("2 file(s) under infra are templates")
    assert {f["resource"]["name"] for f in result["findings"]} == {"real"}


def test_this_repository_deploy_folder_checks_without_input_errors(run_cli, env):
    proc = run_cli("check", str(ROOT / "deploy"), "-o", "json", env=env)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert not [e for e in json.loads(proc.stdout)["errors"] if e["level"] == "error"]


# --- files beside a kustomization that it does not read ----------------------

GPU_PATCH = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/hostname: gpu-node-7
      containers:
      - name: main
        resources:
          limits:
            nvidia.com/gpu: 2
"""


def beside(root: Path) -> Path:
    """A kustomization that lists a.yaml and reads files in every other way
    kustomize reads them, a GPU Deployment beside it that it does not list
    (applied with `kubectl apply -f`), and a folder of examples below it
    with no kustomization of its own."""
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    app = root / "deploy/istio"
    write(
        app / "kustomization.yaml",
        "resources: [a.yaml]\n"
        "patches:\n- path: pin.yaml\n"
        "transformers: [tolerate-transformer.yaml]\n"
        "configMapGenerator:\n- name: job-template\n  files: [template.yaml]\n",
    )
    write(app / "a.yaml", DEPLOYMENT.format(name="a"))
    write(app / "pin.yaml", GPU_PATCH.format(name="a"))  # a patch: judged alone it would be a GPU Deployment
    write(
        app / "tolerate-transformer.yaml",
        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: tolerate}\n"
        "path: patches/tolerate.yaml\ntarget: {kind: Deployment}\n",
    )
    write(app / "patches/tolerate.yaml", GPU_PATCH.format(name="a").replace("gpu-node-7", "gpu-node-8"))
    write(app / "template.yaml", DEPLOYMENT.format(name="templated"))  # data of a ConfigMap, not an object
    write(app / "patches/unused-json6902.yaml", "- op: replace\n  path: /spec/replicas\n  value: 2\n")
    pinned = DEPLOYMENT.format(name="vllama3").replace("    spec:\n", "    spec:\n      nodeName: gpu-node-1\n")
    write(app / "vLlama3.yaml", pinned)  # not listed: applied on its own
    write(app / "kserve/inference-services/phi.yaml", DEPLOYMENT.format(name="phi"))
    return root


def test_a_manifest_a_kustomization_does_not_read_is_judged_as_a_plain_file(run_cli, env, tmp_path, monkeypatch):
    tree = beside(tmp_path / "repo")
    monkeypatch.chdir(tree)
    code, result = check(run_cli, env, ".")
    assert code == 1 and not result["errors"], result["errors"]
    by_name = {}
    for f in result["findings"]:
        by_name.setdefault(f["resource"]["name"], set()).add((f["location"]["file"], tuple(f["units"])))
    # Beside the kustomization: a unit of its own, named apart from the kustomize unit of the folder.
    assert by_name["vllama3"] == {("deploy/istio/vLlama3.yaml", ("deploy/istio [plain files]",))}
    assert by_name["phi"] == {
        ("deploy/istio/kserve/inference-services/phi.yaml", ("deploy/istio/kserve/inference-services",))
    }
    # What the kustomization reads, however it reads it, is judged only as what it renders.
    assert {units for findings in by_name.values() for _, units in findings} == {
        ("deploy/istio",),
        ("deploy/istio [plain files]",),
        ("deploy/istio/kserve/inference-services",),
    }
    assert set(by_name) == {"a", "vllama3", "phi"}
    # The transformer's patch was read: it set the pin the rendered Deployment has.
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001" and f["resource"]["name"] == "a"]
    assert "gpu-node-8" in pin["message"]
    # Reading the files plainly finds the same for the two the kustomization does not read.
    _, plain = check(run_cli, env, ".", "--no-kustomize")
    for name in ("vllama3", "phi"):
        rendered = {(f["rule"], f["severity"]) for f in result["findings"] if f["resource"]["name"] == name}
        assert rendered == {(f["rule"], f["severity"]) for f in plain["findings"] if f["resource"]["name"] == name}
    assert ("GPA-PL-001", "high") in {
        (f["rule"], f["severity"]) for f in plain["findings"] if f["resource"]["name"] == "vllama3"
    }


def test_a_changed_file_beside_a_kustomization_is_judged_on_its_own(run_cli, env, tmp_path, monkeypatch):
    tree = beside(tmp_path / "repo")
    monkeypatch.chdir(tree)
    _, result = check(run_cli, env, "--changed-files", "deploy/istio/vLlama3.yaml")
    assert {f["resource"]["name"] for f in result["findings"]} == {"vllama3"}
    # A patch it reads stands for the kustomization; one it does not read yet, too (never judged alone).
    for patch in ("deploy/istio/pin.yaml", "deploy/istio/patches/unused-json6902.yaml"):
        _, result = check(run_cli, env, "--changed-files", patch)
        assert {f["resource"]["name"] for f in result["findings"]} == {"a"}, patch
        assert {f["location"]["file"] for f in result["findings"]} <= {"deploy/istio/a.yaml", "deploy/istio/pin.yaml"}


def test_a_kustomization_reads_patches_plugins_generator_inputs_schemas_and_values(tmp_path):
    from gpuaudit.sources.units import discover, read_kustomization

    app = tmp_path / "app"
    names = [
        "a.yaml", "sm.yaml", "json6902.yaml", "replace.yaml", "crd.yaml", "schema.json", "values.yaml",
        "more-values.yaml", "env.yaml", "cm.yaml", "plugin.yaml", "plugin-patch.yaml", "plugin-values.yaml",
        "inline-patch.yaml", "config.yaml",
    ]  # fmt: skip
    for name in names:
        write(app / name, DEPLOYMENT.format(name=name.split(".")[0]))
    write(
        app / "plugin.yaml",
        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: plugin-patch.yaml\n---\n"
        "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nvaluesFile: plugin-values.yaml\n",
    )
    write(
        app / "kustomization.yaml",
        """\
resources: [a.yaml]
patchesStrategicMerge: [sm.yaml]
patchesJson6902: [{path: json6902.yaml, target: {kind: Deployment, name: a}}]
replacements: [{path: replace.yaml}]
crds: [crd.yaml]
openapi: {path: schema.json}
helmCharts: [{name: c, valuesFile: values.yaml, additionalValuesFiles: [more-values.yaml]}]
configMapGenerator: [{name: g, envs: [env.yaml], files: [key=cm.yaml]}]
transformers:
- plugin.yaml
- |-
  apiVersion: builtin
  kind: PatchTransformer
  metadata: {name: inline}
  path: inline-patch.yaml
configurations: [config.yaml]
""",
    )
    k = read_kustomization(app / "kustomization.yaml")
    assert sorted(p.name for p in k.files) == sorted(names)
    # Chart c is not in the repository: kustomize would pull it. (Not "it reads '<the inline config>'".)
    assert k.problem is not None and "Helm chart 'c', which kustomize pulls" in k.problem
    assert [p.name for p in k.resources] == ["a.yaml"]
    # All of them hold objects, and none is a plain file.
    assert not [u for u in discover(tmp_path, str(tmp_path)).units if u.kind == "files"]
    # A kustomization that cannot be read may read any file of its folder: none is a plain file.
    (app / "kustomization.yaml").write_text("resources: [a.yaml\n")
    assert not [u for u in discover(tmp_path, str(tmp_path)).units if u.kind == "files"]


# --- alternatives in one folder of plain files -------------------------------

SERVER = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: runtime}}
data: {{MODEL: {model}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm}}
spec:
  selector: {{matchLabels: {{app: llm}}}}
  template:
    metadata: {{labels: {{app: llm}}}}
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
      containers:
      - name: server
        image: {image}
        command: [sh, -c, "{serve} $MODEL --port 8000"]
        envFrom:
        - configMapRef: {{name: runtime}}
        resources:
          requests: {{cpu: "8", memory: 32Gi}}
          limits: {{nvidia.com/gpu: 1, memory: 32Gi}}
"""


def alternatives(folder: Path) -> None:
    """Two servers a user picks between: each file a ConfigMap and a
    Deployment of the same names, and a Service both share."""
    write(
        folder / "sglang.yaml",
        SERVER.format(
            model="Qwen/Qwen2.5-1.5B-Instruct",
            image="lmsysorg/sglang:v0.4.0",
            serve="python3 -m sglang.launch_server --model-path",
        ),
    )
    write(
        folder / "vllm.yaml",
        SERVER.format(model="Qwen/Qwen2.5-32B-Instruct", image="vllm/vllm-openai:v0.8.5", serve="vllm serve"),
    )
    write(
        folder / "service.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: llm}\nspec: {selector: {app: llm}}\n"
    )


def test_alternatives_in_one_folder_are_each_judged_in_their_own_context(run_cli, env, tmp_path, monkeypatch):
    alternatives(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "examples")
    # Not "defined again": they are variants, not one apply.
    assert not result["errors"], result["errors"]
    # The small model of the sglang variant is read from its own ConfigMap,
    # not from the vllm file's (the last read, which a folder-wide context kept).
    [sharing] = [f for f in result["findings"] if f["rule"] == "GPA-AL-001"]
    assert sharing["location"]["file"] == "examples/sglang.yaml"
    assert sharing["evidence"]["model.name"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert sharing["units"] == ["examples/sglang.yaml"]
    facts = json.loads(run_cli("facts", "examples", "--target", "pod", env=env, cwd=tmp_path).stdout)
    models = {d["location"]["file"]: d["facts"]["model"]["name"] for d in facts}
    assert models == {
        "examples/sglang.yaml": "Qwen/Qwen2.5-1.5B-Instruct",
        "examples/vllm.yaml": "Qwen/Qwen2.5-32B-Instruct",
    }
    # Said to be applied at once (--plain-files tree), the clash is true: a warning per object.
    _, tree = check(run_cli, env, "examples", "--plain-files", "tree")
    assert sorted(e["message"].split(" is ")[0] for e in tree["errors"]) == [
        "apps/v1 Deployment llm",
        "v1 ConfigMap runtime",
    ]


LIBRARY = {
    "lib/commonlib/Chart.yaml": "apiVersion: v2\nname: commonlib\ntype: library\nversion: 0.1.0\n",
    "lib/commonlib/templates/_pod.tpl": """\
{{- define "commonlib.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/hostname: gpu-node-3
      containers:
      - name: server
        image: vllm/vllm-openai:v0.6.0
        resources:
          limits:
            nvidia.com/gpu: 1
{{- end -}}
""",
    "apps/serve/Chart.yaml": "apiVersion: v2\nname: serve\nversion: 0.1.0\n"
    'dependencies:\n- name: commonlib\n  version: 0.1.0\n  repository: "file://../../lib/commonlib"\n',
    "apps/serve/templates/deployment.yaml": '{{ include "commonlib.deployment" . }}\n',
}


def test_a_changed_file_of_a_library_chart_rechecks_the_charts_that_use_it(run_cli, env, tmp_path, monkeypatch):
    write(tmp_path / ".git/HEAD", "ref: refs/heads/main\n")
    for name, text in LIBRARY.items():
        write(tmp_path / name, text)
    write(tmp_path / "lib/unused/Chart.yaml", "apiVersion: v2\nname: unused\ntype: library\nversion: 0.1.0\n")
    write(tmp_path / "lib/unused/values.yaml", "x: {{ not a value\n")
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, "--changed-files", "lib/commonlib/templates/_pod.tpl")
    assert result["errors"] == [] and code == 1
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["resource"]["name"] == "serve-server"
    assert pin["location"]["file"] == "apps/serve/templates/deployment.yaml"
    # A library chart no chart here uses: nothing renders it, nothing to judge.
    code, result = check(run_cli, env, "--changed-files", "lib/unused/values.yaml", "lib/unused/Chart.yaml")
    assert (code, result["errors"], result["findings"]) == (0, [], [])


def test_changed_files_that_are_no_manifests_do_not_block_a_commit(run_cli, env, tmp_path, monkeypatch):
    """pre-commit hands over every changed YAML and JSON file: one that does
    not read and names no apiVersion or kind (a tsconfig.json with comments)
    is a warning; a broken manifest still fails the commit."""
    write(tmp_path / ".git/HEAD", "ref: refs/heads/main\n")
    write(tmp_path / "web/tsconfig.json", '{\n  // strict\n  "compilerOptions": {}\n}\n')
    write(tmp_path / ".github/dependabot.yml", "version: 2\nupdates: [\n")
    write(tmp_path / "deploy/app.yaml", DEPLOYMENT.format(name="app"))
    monkeypatch.chdir(tmp_path)
    code, result = check(
        run_cli, env, "--changed-files", "web/tsconfig.json", ".github/dependabot.yml", "deploy/app.yaml"
    )
    assert {e["file"]: e["level"] for e in result["errors"]} == {
        "web/tsconfig.json": "warning",
        ".github/dependabot.yml": "warning",
    }
    assert code in (0, 1)
    write(tmp_path / "deploy/app.yaml", DEPLOYMENT.format(name="app") + "  broken: [\n")
    code, result = check(run_cli, env, "--changed-files", "web/tsconfig.json", "deploy/app.yaml")
    assert code == 2
    assert [e["file"] for e in result["errors"] if e["level"] == "error"] == ["deploy/app.yaml"]


TIME_SLICING = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: time-slicing-config, namespace: gpu-operator}
data:
  any: |-
    version: v1
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 8
"""
SMALL_CPU_APP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: tei}
spec:
  selector: {matchLabels: {app: tei}}
  template:
    metadata: {labels: {app: tei}}
    spec:
      containers:
      - name: tei
        image: ghcr.io/huggingface/text-embeddings-inference:1.8
        resources:
          requests: {cpu: 500m, memory: 4Gi}
          limits: {nvidia.com/gpu: 1}
"""


def test_a_time_slicing_config_in_one_app_folder_shares_the_gpus_every_unit_asks_for(
    run_cli, env, tmp_path, monkeypatch
):
    # A GitOps tree: the device plugin's config in one unit, a GPU app (a
    # kustomization) in another. Its nvidia.com/gpu is a turn on a shared
    # GPU: half a core is no starving of a whole one (GPA-AP-001).
    write(tmp_path / "apps/kube-system/gpu-operator/timeslicing-config.yaml", TIME_SLICING)
    write(tmp_path / "apps/ai/tei/deployment.yaml", SMALL_CPU_APP)
    write(tmp_path / "apps/ai/tei/kustomization.yaml", "resources: [deployment.yaml]\n")
    monkeypatch.chdir(tmp_path)
    _, shared = check(run_cli, env, "apps")
    assert "GPA-AP-001" not in {f["rule"] for f in shared["findings"]}
    _, alone = check(run_cli, env, "apps/ai")
    assert "GPA-AP-001" in {f["rule"] for f in alone["findings"]}
    # Two such configs may be two clusters': which one the app runs under is
    # unknown, and each unit keeps its own.
    write(tmp_path / "apps/other-cluster/timeslicing-config.yaml", TIME_SLICING.replace("replicas: 8", "replicas: 2"))
    _, two = check(run_cli, env, "apps")
    assert "GPA-AP-001" in {f["rule"] for f in two["findings"]}


def test_an_archived_unit_says_nothing_for_the_deployed_ones(run_cli, env, tmp_path, monkeypatch):
    # The device plugin's time-slicing config is deployed; the only app that
    # asks for two replicas sits in .archive/, which nothing deploys: no
    # "a pod takes several replicas" on the config (GPA-SH-004), and an
    # archived second config makes no second cluster of the deployed one.
    write(tmp_path / "apps/kube-system/gpu-operator/timeslicing-config.yaml", TIME_SLICING)
    write(tmp_path / "apps/ai/tei/deployment.yaml", SMALL_CPU_APP)
    write(tmp_path / "apps/ai/tei/kustomization.yaml", "resources: [deployment.yaml]\n")
    two_replicas = SMALL_CPU_APP.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2").replace("name: tei", "name: old")
    write(tmp_path / "apps/.archive/old/deployment.yaml", two_replicas)
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "apps")
    assert "GPA-SH-004" not in {f["rule"] for f in result["findings"]}
    assert "GPA-AP-001" not in {f["rule"] for f in result["findings"]}
    write(tmp_path / "apps/.archive/old/timeslicing-config.yaml", TIME_SLICING.replace("replicas: 8", "replicas: 2"))
    _, still = check(run_cli, env, "apps")
    assert "GPA-AP-001" not in {f["rule"] for f in still["findings"]}
    # Deployed, the same app is evidence.
    write(tmp_path / "apps/ai/old/deployment.yaml", two_replicas)
    _, deployed = check(run_cli, env, "apps")
    assert "GPA-SH-004" in {f["rule"] for f in deployed["findings"]}


SMALL_MODEL_SERVER = """\
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
      - name: server
        image: vllm/vllm-openai:v0.10.0
        args: [--model=Qwen/Qwen2.5-0.5B-Instruct]
        resources:
          requests: {cpu: "8", memory: 16Gi}
          limits: {nvidia.com/gpu: 1}
"""


def test_no_sharing_is_unknown_beside_a_gpu_operator_unit_that_did_not_render(run_cli, env, tmp_path, monkeypatch):
    # The GPU operator's time-slicing overlay takes a base that is not in the
    # repository (a remote one, here a folder that is gone): whether the
    # cluster shares its GPUs is unseen, so "no time-slicing, MPS or MIG" is
    # not said of the small model's service (GPA-AL-001). A unit of another
    # name that did not render hides no sharing config, whatever the
    # repository is called.
    write(tmp_path / "gpu-platform/chat/deployment.yaml", SMALL_MODEL_SERVER)
    write(tmp_path / "gpu-platform/chat/kustomization.yaml", "resources: [deployment.yaml]\n")
    monkeypatch.chdir(tmp_path)
    _, clean = check(run_cli, env, "gpu-platform")
    assert "GPA-AL-001" in {f["rule"] for f in clean["findings"]}
    write(tmp_path / "gpu-platform/grafana/kustomization.yaml", "resources: [../../gone/dashboards]\n")
    _, other = check(run_cli, env, "gpu-platform")
    assert "GPA-AL-001" in {f["rule"] for f in other["findings"]}
    write(tmp_path / "gpu-platform/gpu-operator/time-sliced-2/kustomization.yaml", "resources: [../../../gone/base]\n")
    code, unseen = check(run_cli, env, "gpu-platform")
    assert code == 2 and "GPA-AL-001" not in {f["rule"] for f in unseen["findings"]}


def test_a_file_its_kustomization_lists_in_a_comment_is_switched_off(run_cli, env, tmp_path, monkeypatch):
    # The author listed the Job and then commented it out: not deployed, so not
    # judged as a plain file either; a file the kustomization never mentions is.
    app = tmp_path / "apps/llmfit"
    write(app / "kustomization.yaml", "resources:\n  - deployment.yaml\n  # - job-dual-gpu.yaml\n")
    write(app / "deployment.yaml", DEPLOYMENT.format(name="served"))
    write(app / "job-dual-gpu.yaml", DEPLOYMENT.format(name="switched-off"))
    write(app / "extra.yaml", DEPLOYMENT.format(name="applied-by-hand"))
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "apps")
    names = {f["resource"]["name"] for f in result["findings"]}
    assert "switched-off" not in names and {"served", "applied-by-hand"} <= names


def test_a_folder_its_parent_kustomization_lists_in_a_comment_is_switched_off(run_cli, env, tmp_path, monkeypatch):
    # `# - functionary`: the app's own kustomization is not rendered, nor its
    # files judged as plain ones; its sibling, listed, is, and so is an app a
    # second kustomization still lists although the first commented it out.
    ml = tmp_path / "ml/prod"
    write(ml / "kustomization.yaml", "resources:\n  - ollama\n  # - functionary\n  # - shared/\n")
    for app, name in (("ollama", "served"), ("functionary", "switched-off"), ("shared", "listed-elsewhere")):
        write(ml / app / "kustomization.yaml", "resources:\n  - deployment.yaml\n")
        write(ml / app / "deployment.yaml", DEPLOYMENT.format(name=name))
    write(ml / "functionary/extra.yaml", DEPLOYMENT.format(name="switched-off-too"))
    write(tmp_path / "ml/staging/kustomization.yaml", "resources:\n  - ../prod/shared\n")
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "ml")
    names = {f["resource"]["name"] for f in result["findings"]}
    assert "switched-off" not in names and "switched-off-too" not in names
    assert {"served", "listed-elsewhere"} <= names


def test_a_patch_that_names_a_container_its_base_lacks_is_said(run_cli, env, tmp_path, monkeypatch):
    # The patch means to give the notebook its GPU, but names a container the
    # base does not have: kustomize adds one without an image, which the API
    # server refuses. The base's own container is judged as it is.
    app = tmp_path / "notebook"
    write(app / "kustomization.yaml", "resources: [deployment.yaml]\npatches:\n- path: gpu-patch.yaml\n")
    write(app / "deployment.yaml", DEPLOYMENT.format(name="notebook").replace("nvidia.com/gpu: 1", "cpu: 1"))
    write(
        app / "gpu-patch.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: notebook}\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - name: runtime\n        resources: {limits: {nvidia.com/gpu: 1}}\n",
    )
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "notebook")
    [warning] = [e for e in result["errors"] if "has no image once rendered" in e["message"]]
    assert warning["level"] == "warning" and "container runtime of Deployment notebook" in warning["message"]
    assert warning["file"].endswith("gpu-patch.yaml")


def test_a_hidden_folder_of_manifests_is_walked_and_tool_folders_are_not(run_cli, env, tmp_path, monkeypatch):
    write(tmp_path / "repo/.kubernetes/jobs/train.yaml", DEPLOYMENT.format(name="in-hidden-folder"))
    write(tmp_path / "repo/.venv/lib/site/chart.yaml", DEPLOYMENT.format(name="in-a-virtualenv"))
    write(tmp_path / "repo/.git/objects/x.yaml", DEPLOYMENT.format(name="in-git"))
    write(tmp_path / "repo/jobs/.ipynb_checkpoints/train-checkpoint.yaml", DEPLOYMENT.format(name="autosaved"))
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "repo")
    assert result["summary"]["gpu_workloads"] == 1
    assert {f["resource"]["name"] for f in result["findings"]} == {"in-hidden-folder"}


def test_a_chart_beside_an_umbrella_chart_is_its_own_unit(run_cli, env, tmp_path, monkeypatch):
    # An umbrella Chart.yaml at the repository's root names the apps' charts
    # as dependencies it does not vendor; the apps' charts sit in folders
    # beside it, not under charts/: helm renders each on its own, and so is
    # each judged. A chart under a chart's charts/ stays its subchart.
    write(
        tmp_path / "Chart.yaml",
        "apiVersion: v2\nname: apps\nversion: 0.1.0\n"
        "dependencies:\n- name: serve\n  version: 0.1.0\n  repository: https://203.0.113.9/charts\n",
    )
    for name, text in CHART.items():
        write(tmp_path / "serve" / name, text)
    write(tmp_path / "serve/charts/inner/Chart.yaml", "apiVersion: v2\nname: inner\nversion: 0.1.0\n")
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, ".", "--render-errors", "warn")
    assert code == 1  # the pin below; the umbrella's unrendered dependency is a warning
    [umbrella] = [e for e in result["errors"] if e["file"] == "."]
    assert "its dependencies (serve) are not in charts/" in umbrella["message"]
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["units"] == ["serve [ci/pinned-values.yaml]"]
    assert not [e for e in result["errors"] if "inner" in e["file"]]


def test_a_problem_a_template_repeats_is_said_once(run_cli, env, tmp_path, monkeypatch):
    """A chart's template that ranges over twenty namespaces writes its
    duplicate key twenty times: one thing to fix, said once."""
    write(tmp_path / "chart/Chart.yaml", "apiVersion: v2\nname: ns\nversion: 0.1.0\n")
    write(tmp_path / "chart/values.yaml", "users: [a, b, c]\n")
    write(
        tmp_path / "chart/templates/namespaces.yaml",
        "{{- range .Values.users }}\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {{ . }}\n"
        "  labels:\n    team: ml\n    team: ml\n{{- end }}\n",
    )
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, ".")
    said = [e for e in result["errors"] if "duplicate key" in e["message"]]
    assert len(said) == 1, said


def test_the_objects_a_template_line_renders_alike_are_one_finding(run_cli, env, tmp_path, monkeypatch):
    """A chart that writes one Job per node from one template: a reviewer
    leaves one comment at that line, whether the chart is checked alone or
    beside other units. A line whose objects differ in what is judged (their
    GPUs) stays one finding per object."""
    write(tmp_path / "chart/Chart.yaml", "apiVersion: v2\nname: ddp\nversion: 0.1.0\n")
    write(tmp_path / "chart/values.yaml", "nodes: 2\ngpus: [8, 8]\n")
    write(
        tmp_path / "chart/templates/job.yaml",
        "{{- range $i, $g := .Values.gpus }}\n---\napiVersion: batch/v1\nkind: Job\n"
        "metadata:\n  name: ddp-{{ $i }}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n"
        "      containers:\n      - name: t\n        image: pytorch/pytorch\n"
        "        command: [torchrun, --nproc_per_node=8, train.py]\n"
        "        resources: {limits: {nvidia.com/gpu: {{ $g }}}}\n{{- end }}\n",
    )
    monkeypatch.chdir(tmp_path)
    for args in (["chart"], ["chart", "."]):
        _, result = check(run_cli, env, *args)
        said = [f["resource"]["name"] for f in result["findings"] if f["rule"] == "GPA-AL-008"]
        assert said == ["ddp-0"], (args, said)
    write(tmp_path / "chart/values.yaml", "nodes: 2\ngpus: [8, 4]\n")
    _, result = check(run_cli, env, "chart")
    said = [f["resource"]["name"] for f in result["findings"] if f["rule"] == "GPA-AL-008"]
    assert said == ["ddp-0", "ddp-1"], said


def test_helm_charts_a_kustomization_inflates_from_the_repository_are_rendered(run_cli, env, tmp_path, monkeypatch):
    """A home-ops tree keeps its own charts and inflates them per app with
    helmCharts: rendered with --enable-helm, findings at the helmCharts line
    of the app's kustomization. A chart kustomize would pull, or one whose
    link leads outside the repository, is not rendered, and says why."""
    write(tmp_path / ".git/HEAD", "ref: refs/heads/main\n")
    write(tmp_path / "helm-charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 1.0.0\n")
    write(tmp_path / "helm-charts/service/values.yaml", "gpus: 0\nnode: ''\n")
    write(
        tmp_path / "helm-charts/service/templates/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: {{ .Release.Name }}}\nspec:\n"
        "  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n    spec:\n"
        "      nodeSelector: {kubernetes.io/hostname: {{ .Values.node | quote }}}\n"
        "      containers:\n      - name: main\n        image: vllm/vllm-openai:v0.6.0\n"
        "        resources: {limits: {nvidia.com/gpu: {{ .Values.gpus }}, memory: 8Gi}, requests: {cpu: '4'}}\n",
    )
    app = tmp_path / "kubernetes/ai/chat"
    write(
        app / "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nhelmGlobals:\n"
        "  chartHome: ../../../helm-charts\nhelmCharts:\n- name: service\n  releaseName: chat\n"
        "  valuesFile: values.yaml\n",
    )
    write(app / "values.yaml", "gpus: 1\nnode: gpu-node-1\n")
    pulled = tmp_path / "kubernetes/ops/cert-manager"
    write(
        pulled / "kustomization.yaml",
        "helmCharts:\n- {name: cert-manager, repo: https://charts.jetstack.io, version: v1.16.0}\n",
    )
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, "kubernetes")
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert (pin["resource"]["name"], pin["location"]["file"], pin["location"]["line"]) == (
        "chat",
        "kubernetes/ai/chat/kustomization.yaml",
        5,
    )
    [refused] = [e for e in result["errors"] if e["file"] == "kubernetes/ops/cert-manager"]
    assert "'cert-manager', which kustomize pulls from https://charts.jetstack.io" in refused["message"]
    assert code == 2
    # helm writes its config where helmGlobals.configHome says: nothing is written outside the output.
    kustomization = (app / "kustomization.yaml").read_text()
    configured = kustomization.replace("helmGlobals:\n", "helmGlobals:\n  configHome: /tmp/x\n")
    (app / "kustomization.yaml").write_text(configured)
    code, result = check(run_cli, env, "kubernetes/ai")
    assert [e["message"] for e in result["errors"]] == [
        "kustomize unit not rendered, not audited: it inflates Helm chart 'service' with helmGlobals.configHome set, "
        "where helm would write (--render-errors warn judges its plain files instead)"
    ]
    (app / "kustomization.yaml").write_text(kustomization)
    # A link in the chart that leads outside the repository: helm would read it.
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret\n")
    (tmp_path / "helm-charts/service/files").mkdir()
    (tmp_path / "helm-charts/service/files/data.txt").symlink_to(outside)
    code, result = check(run_cli, env, "kubernetes/ai")
    [error] = result["errors"]
    assert "leads outside" in error["message"] and not result["findings"] and code == 2


def test_a_chart_that_caps_its_kubernetes_version_is_rendered_below_the_cap(run_cli, env, tmp_path, monkeypatch):
    """helm renders for the newest Kubernetes it knows, which a chart whose
    kubeVersion caps it refuses: rendered for the newest minor below its cap."""
    write(
        tmp_path / "chart/Chart.yaml",
        'apiVersion: v2\nname: old\nversion: 0.1.0\nkubeVersion: ">= 1.21.0-0 < 1.32.0-0"\n',
    )
    write(tmp_path / "chart/values.yaml", "node: gpu-node-1\n")
    write(
        tmp_path / "chart/templates/pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n"
        "spec:\n  nodeSelector: {kubernetes.io/hostname: {{ .Values.node }}}\n  containers:\n  - name: c\n"
        "    image: vllm/vllm-openai:v0.6.0\n"
        "    resources: {limits: {nvidia.com/gpu: 1, memory: 8Gi}, requests: {cpu: '4'}}\n",
    )
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "chart")
    assert not [e for e in result["errors"] if e["level"] == "error"], result["errors"]
    assert [f["resource"]["name"] for f in result["findings"] if f["rule"] == "GPA-PL-001"] == ["p"]


def test_a_cpu_request_an_overlay_lowers_is_blamed_on_the_overlay(run_cli, env, tmp_path, monkeypatch):
    """The base asks a core per GPU; the dev overlay's inline patch lowers the
    request: GPA-AP-001 points at that patch, not at the base's resources
    (round 18: the base was blamed)."""
    write(tmp_path / "app/base/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(tmp_path / "app/base/deployment.yaml", DEPLOYMENT.format(name="chat"))
    write(
        tmp_path / "app/overlays/dev/kustomization.yaml",
        "resources: [../../base]\npatches:\n- target: {kind: Deployment, name: chat}\n  patch: |-\n"
        "    - op: replace\n      path: /spec/template/spec/containers/0/resources/requests/cpu\n"
        "      value: 600m\n",
    )
    monkeypatch.chdir(tmp_path)
    _, result = check(run_cli, env, "app")
    [cpu] = [f for f in result["findings"] if f["rule"] == "GPA-AP-001"]
    assert (cpu["location"]["file"], cpu["location"]["line"]) == ("app/overlays/dev/kustomization.yaml", 7)


def test_a_base_whose_only_overlay_fails_to_render_is_judged_on_its_own(run_cli, env, tmp_path, monkeypatch):
    """An overlay below the base it uses (`resources: [../../]`) is a cycle
    kustomize finds only when it builds: the base, which builds alone, is
    judged on its own, and the overlay's error says so."""
    write(tmp_path / "kustomization.yaml", "resources: [deployment.yaml]\n")
    write(
        tmp_path / "deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ollama}\nspec:\n  template:\n    spec:\n"
        "      nodeName: gpu-node-3\n      containers:\n      - name: ollama\n        image: ollama/ollama:0.6.5\n"
        "        resources: {limits: {nvidia.com/gpu: 1, memory: 16Gi, cpu: '4'}}\n",
    )
    write(tmp_path / "overlays/gpu/kustomization.yaml", "resources: [../../]\n")
    monkeypatch.chdir(tmp_path)
    code, result = check(run_cli, env, ".")
    [pin] = [f for f in result["findings"] if f["rule"] == "GPA-PL-001"]
    assert pin["location"]["file"] == "deployment.yaml"
    [error] = [e for e in result["errors"] if e["level"] == "error"]
    assert "overlays/gpu" in error["file"] and "what it uses that renders is judged on its own" in error["message"]
    assert code == 2
