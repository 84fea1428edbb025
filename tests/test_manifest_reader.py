"""The manifest source: positions, multi-document files, bad input that must
not stop the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.sources.manifests import names_kubernetes_keys, read_paths


def read(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return read_paths([str(path)])


def test_multi_document_yaml_keeps_start_lines_and_field_lines(tmp_path):
    result = read(
        tmp_path,
        "m.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\n# comment\n"
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n  containers:\n  - name: c\n"
        "    resources:\n      limits:\n        nvidia.com/gpu: 2\n",
    )
    assert [d.kind for d in result.documents] == ["Service", "Pod"]
    pod = result.documents[1]
    assert pod.line == 6
    assert pod.line_of("/spec/containers/0/resources/limits/nvidia.com~1gpu") == 15
    assert pod.line_of("/spec/containers/0/does/not/exist") == 12  # nearest ancestor


def test_list_kinds_and_json_files(tmp_path):
    result = read(
        tmp_path,
        "l.json",
        '{"apiVersion": "v1", "kind": "List", "items": [\n'
        ' {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},\n'
        ' {"apiVersion": "v1", "kind": "List", "items": [\n'
        '   {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "y"}}]}]}\n',
    )
    assert [d.name for d in result.documents] == ["x", "y"]
    assert result.documents[1].base == "/items/1/items/0"
    assert result.documents[1].line == 4


def test_non_kubernetes_yaml_is_skipped_quietly(tmp_path):
    result = read(tmp_path, "values.yaml", "replicaCount: 1\nresources:\n  limits: {nvidia.com/gpu: 1}\n")
    assert result.documents == [] and result.errors == []


def test_invalid_yaml_is_an_error_with_its_line_and_other_files_still_read(tmp_path):
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n")
    (tmp_path / "good.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\n")
    result = read_paths([str(tmp_path)])
    assert [d.name for d in result.documents] == ["ok"]
    [error] = result.errors
    assert error.file.endswith("bad.yaml") and error.line == 5 and "invalid YAML" in error.message


def test_helm_templates_are_reported_not_parsed_but_argo_expressions_are_fine(tmp_path):
    helm = read(tmp_path, "t.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n")
    [error] = helm.errors
    assert error.level == "warning" and "not auditable until rendered" in error.message
    assert error.line == 4
    argo = read(
        tmp_path,
        "wf.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\n"
        "spec:\n  templates:\n  - name: t\n    container:\n"
        "      args: ['{{inputs.parameters.x}}']\n",
    )
    assert argo.errors == [] and argo.documents[0].kind == "Workflow"
    # A templated apiVersion parses as YAML (a flow mapping) and yields no
    # object at all: still a template, not an empty carrier of values.
    operator = read(tmp_path, "dc.yaml", "apiVersion: {{ .DeviceClassAPIVersion }}\nkind: DeviceClass\n")
    [error] = operator.errors
    assert "not auditable until rendered" in error.message and error.line == 1


def test_actions_of_another_tool_inside_values_are_read_as_text(tmp_path):
    """A rendered file whose `{{ }}` are values for another tool (a
    Prometheus alert's text, NFD's labelsTemplate) names nothing of Helm's:
    read as the YAML it is. One that names Helm's objects, or starts a
    value with an action, stays a template; so does a Jinja file."""
    rendered = read(
        tmp_path,
        "gpu.gen.yaml",
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: gpu}\n"
        "spec:\n  groups:\n  - name: gpu\n    rules:\n    - alert: GpuHot\n"
        '      annotations: {summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is hot"}\n'
        "---\napiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: gpu}\n"
        "spec:\n  rules:\n  - name: gpu\n    labelsTemplate: |\n"
        "      {{ range .pci.device }}vendor-{{ .vendor }}=true\n      {{ end }}\n",
    )
    assert rendered.errors == [] and [d.kind for d in rendered.documents] == ["PrometheusRule", "NodeFeatureRule"]
    quoted_helm = read(tmp_path, "q.yaml", 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: "{{ .Values.name }}"\n')
    assert quoted_helm.documents == [] and "not auditable until rendered" in quoted_helm.errors[0].message
    unquoted = read(tmp_path, "u.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ $name }}\n")
    assert unquoted.documents == [] and "not auditable until rendered" in unquoted.errors[0].message
    jinja = read(
        tmp_path,
        "evaluator.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ev}\nspec:\n  containers:\n"
        "{% for i in range(4) %}\n  - name: c{{ i }}\n{% endfor %}\n",
    )
    [error] = jinja.errors
    assert error.level == "warning" and "not auditable until rendered" in error.message and error.line == 6
    # A Jinja template of a Python client (`{{ replicas }}`, no Helm grammar)
    # whose values start with actions: a template, never "replicas: dict is
    # not a number".
    client = read(
        tmp_path,
        "deployment_template.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ name }}\n"
        "spec:\n  replicas: {{ replicas }}\n  template:\n    spec: {{ pod_spec | tojson }}\n",
    )
    [error] = client.errors
    assert client.documents == [] and "not auditable until rendered" in error.message and error.line == 4


def test_an_ansible_playbook_is_no_template_to_render(tmp_path):
    """Its top level is a list of plays, its `{{ }}` quoted as Ansible needs,
    and its tasks may name Kubernetes objects to create: no object of its
    own, and nothing to warn about."""
    playbook = read(
        tmp_path,
        "deploy.yml",
        "- hosts: localhost\n  vars: {ns: gpu}\n  tasks:\n  - name: create the namespace\n"
        "    kubernetes.core.k8s:\n      definition:\n        apiVersion: v1\n        kind: Namespace\n"
        "        metadata: {name: \"{{ lookup('env', 'NS') | default(ns) }}\"}\n",
    )
    assert playbook.errors == [] and playbook.documents == []


def test_a_values_file_whose_strings_hold_tpl_actions_is_read_as_yaml(tmp_path):
    # Charts pass such strings through `tpl`: the file is YAML, not a template.
    values = read(
        tmp_path,
        "values-prod.yaml",
        'podAnnotations:\n  release: "{{ .Release.Name }}-gpu"\nresources:\n  limits: {nvidia.com/gpu: 1}\n',
    )
    assert values.errors == [] and values.documents == []
    assert values.bare[0].obj["podAnnotations"]["release"] == "{{ .Release.Name }}-gpu"
    # Without a kind, but not YAML until rendered: still a Helm template.
    fragment = read(tmp_path, "part.yaml", "{{- range .Values.gpus }}\n- name: {{ . }}\n{{- end }}\n")
    [error] = fragment.errors
    assert error.level == "warning" and "not auditable until rendered" in error.message and error.line == 1


def test_duplicate_keys_are_reported(tmp_path):
    result = read(tmp_path, "d.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nkind: Pod\n")
    [warning] = result.errors  # the same value twice: harmless
    assert "duplicate key 'kind' with the same value" in warning.message and warning.line == 4
    assert warning.level == "warning"
    other = read(tmp_path, "e.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {app: x, app: y}}\n")
    [error] = other.errors
    assert "duplicate key 'app' with another value" in error.message and error.level == "error"
    assert other.documents[0].obj["metadata"]["labels"] == {"app": "y"}


# armadaproject/armada's _local/airflow/docker-compose.yaml, cut down: a key
# beside `<<:` overrides the merged one (YAML 1.1 merge keys).
COMPOSE_WITH_MERGE_KEYS = """\
x-common: &common
  environment: {A: "1"}
  depends_on: [db]
services:
  web:
    <<: *common
    environment: {A: "2"}
"""


def test_a_key_beside_a_merge_key_overrides_it_and_is_no_duplicate(tmp_path):
    result = read(tmp_path, "docker-compose.yaml", COMPOSE_WITH_MERGE_KEYS)
    assert result.errors == []
    [doc] = result.bare
    assert doc.obj == yaml.safe_load(COMPOSE_WITH_MERGE_KEYS)
    assert doc.obj["services"]["web"] == {"environment": {"A": "2"}, "depends_on": ["db"]}


def test_merge_list_precedence_in_a_kubernetes_object(tmp_path):
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n"
        "x-a: &a {k: from-a, only-a: 1}\n"
        "x-b: &b {k: from-b, only-b: 2, z: from-b}\n"
        "data:\n"
        "  z: explicit-before\n"
        "  <<: [*a, *b]\n"
        "  only-b: explicit-after\n"
    )
    result = read(tmp_path, "cm.yaml", text)
    assert result.errors == []
    [doc] = result.documents
    assert doc.obj["data"] == {"k": "from-a", "only-a": 1, "only-b": "explicit-after", "z": "explicit-before"}
    assert doc.obj == yaml.safe_load(text)  # PyYAML's own merge semantics
    # Lines: an explicit key's own; the mapping's is its key's, not the `<<:`'s.
    assert doc.line_of("/data/only-b") == 9 and doc.line_of("/data/z") == 7
    assert doc.line_of("/data") == 6
    assert doc.line_of("/data/0") == 6  # no item pointers from the merged list


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("  <<: *a\n  k: 1\n  k: 2\n", 8),  # overriding once is fine; the second explicit k is the duplicate
        ("  k: 1\n  <<: *a\n  k: 2\n", 8),  # written before the merge, then again
        ("  <<: *a\n  j: 1\n  j: 2\n", 8),  # a key no merge brought
    ],
)
def test_a_key_written_twice_beside_a_merge_key_is_still_a_duplicate(tmp_path, body, line):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\nx-a: &a {k: 0}\ndata:\n" + body
    result = read(tmp_path, "cm.yaml", text)
    [error] = result.errors
    assert error.level == "error" and error.line == line
    assert error.message.startswith("duplicate key ")
    assert error.file.endswith("cm.yaml")


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\ndata:\n" + "\n".join("  " + line for line in lines)
    result = read(tmp_path, "bomb.yaml", text + "\n")
    assert result.documents == []
    assert "alias bomb" in result.errors[0].message


def test_binary_and_non_utf8_files_are_errors(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(b"\x00\x01\x02apiVersion")
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp_path / "latin1-pod.yaml").write_bytes(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n".encode("latin-1")
    )
    named = read_paths([str(tmp_path / n) for n in ("bin.yaml", "latin1.yaml", "latin1-pod.yaml")])
    assert [(e.message, e.level) for e in named.errors] == [
        ("binary file, not a manifest", "error"),
        ("not valid UTF-8 text", "error"),
        ("not valid UTF-8 text", "error"),
    ]
    # Found by walking the folder: only the one that names a kind stays an error.
    walked = {Path(e.file).name: e for e in read_paths([str(tmp_path)]).errors}
    assert (walked["latin1-pod.yaml"].message, walked["latin1-pod.yaml"].level) == ("not valid UTF-8 text", "error")
    assert walked["bin.yaml"].level == walked["latin1.yaml"].level == "warning"
    assert walked["bin.yaml"].message.startswith("not read: binary file, not a manifest; it names no apiVersion")


NOT_MANIFESTS = {
    # TypeScript's config: JSON with comments
    "web/tsconfig.json": '{\n  // strict mode\n  "compilerOptions": {"strict": true}\n}\n',
    # a DLLogger log: one JSON object per line, after a prefix
    "results/dllogger.json": 'DLLL {"timestamp": "1", "type": "LOG", "data": {"loss": 1.5}}\nDLLL {"timestamp": "2"}\n',
    # MkDocs: Python tags in a YAML that does read
    "mkdocs.yml": "site_name: x\nmarkdown_extensions:\n- pymdownx.emoji:\n"
    "    emoji_index: !!python/name:material.extensions.emoji.twemoji\n",
    # a broken mapping with no Kubernetes key at all
    "proposals/runs.json": '{"runs": [{"id": 1, "gpus": 8]}\n',
}


def test_a_walked_file_that_does_not_parse_and_names_no_kind_is_a_warning(tmp_path):
    for name, text in NOT_MANIFESTS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    # Files that look like manifests keep their errors, with their lines.
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s/pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  labels: {a: b\n")
    (tmp_path / "k8s/pod.json").write_text('{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p",}\n')
    walked = read_paths([str(tmp_path)])
    by_file = {}
    for e in walked.errors:
        by_file.setdefault(str(Path(e.file).relative_to(tmp_path)), []).append(e)
    assert {f: [e.level for e in es] for f, es in by_file.items()} == {
        "mkdocs.yml": ["warning"],
        "web/tsconfig.json": ["warning"],
        "results/dllogger.json": ["warning"],
        "proposals/runs.json": ["warning"],
        "k8s/pod.json": ["error"],
        "k8s/pod.yaml": ["error"],
    }
    [tsconfig] = by_file["web/tsconfig.json"]
    assert tsconfig.line == 3
    assert tsconfig.message == (
        "not read: invalid YAML: did not find expected ',' or '}'; "
        "it names no apiVersion or kind, so it is likely not a Kubernetes manifest"
    )
    [mkdocs] = by_file["mkdocs.yml"]  # it was read (as plain data): no "not read"
    assert mkdocs.message.startswith("YAML tag !!python/name:") and mkdocs.message.endswith("not a Kubernetes manifest")
    [pod] = by_file["k8s/pod.yaml"]
    assert pod.line == 5 and pod.message.startswith("invalid YAML")
    # Named on the command line, each is an error as it was.
    named = read_paths([str(tmp_path / name) for name in NOT_MANIFESTS])
    assert len(named.errors) == len(NOT_MANIFESTS)
    assert all(e.level == "error" and "Kubernetes manifest" not in e.message for e in named.errors)


def test_a_walked_json_file_of_data_is_not_read(tmp_path):
    """JSON that parses and names no apiVersion and kind at its top level is
    data: a tokenizer whose vocabulary holds "kind" (and a character YAML
    refuses), a package.json. It is neither read nor reported; a JSON
    manifest beside it is read, and either named on the command line is read
    as it stands."""
    vocab = {"version": "1.0", "model": {"vocab": {"kind": 11031, "apiVersion": 7, "\u0085": 3}}}
    (tmp_path / "models").mkdir()
    (tmp_path / "models/tokenizer.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (tmp_path / "package.json").write_text('{"name": "web", "dependencies": {}}')
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    walked = read_paths([str(tmp_path)])
    assert walked.errors == []
    assert [(d.kind, d.name) for d in walked.documents] == [("Pod", "p")]
    named = read_paths([str(tmp_path / "models/tokenizer.json")])
    assert [e.level for e in named.errors] == ["error"]


def test_a_walked_json_file_too_large_for_a_manifest_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr("gpuaudit.sources.manifests.MAX_FILE_BYTES", 64)
    (tmp_path / "weights.index.json").write_text('{"weight_map": {"kind": "' + "x" * 100 + '"}}')
    (tmp_path / "big.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n# " + "x" * 100 + "\n")
    walked = {Path(e.file).name: e.level for e in read_paths([str(tmp_path)]).errors}
    assert walked == {"weights.index.json": "warning", "big.yaml": "error"}


@pytest.mark.parametrize(
    "text, names",
    [
        ("apiVersion: v1\n", True),
        ("  - kind: Pod\n", True),
        ('  "kind": "Pod",\n', True),
        ('[{"x":1},{"apiVersion":"v1"}]', True),
        ("{apiVersion: v1, kind: Pod}", True),
        ("'kind' : Pod\n", True),
        ("# kind: Pod\n", False),
        ("kinds: [a]\nsubkind: b\n", False),
        ("description: the kind: of thing\n", False),
        ("name: kind\n", False),
    ],
)
def test_a_kubernetes_key_is_seen_by_its_text(text, names):
    assert names_kubernetes_keys(text.encode()) is names


def test_found_files_through_the_command_line(run_cli, tmp_path):
    """The run's exit code: warnings leave it to the findings; a named file
    that does not read is still an input error (2)."""
    for name, text in NOT_MANIFESTS.items():
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text(text)
    (tmp_path / "repo/pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: n1\n"
        "  containers:\n  - name: c\n    image: x\n    resources: {limits: {nvidia.com/gpu: 1, cpu: 1, memory: 1Gi}}\n"
    )
    proc = run_cli("check", "repo", "-o", "json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1, "findings only: the walked files' problems are warnings"
    assert {e["level"] for e in result["errors"]} == {"warning"} and len(result["errors"]) == len(NOT_MANIFESTS)
    assert "GPA-PL-001" in {f["rule"] for f in result["findings"]}
    named = run_cli("check", "repo/web/tsconfig.json", "-o", "json")
    [error] = json.loads(named.stdout)["errors"]
    assert named.returncode == 2 and error["level"] == "error"


def test_a_broken_fixture_in_a_test_folder_is_a_warning(run_cli, tmp_path):
    """A test folder's findings are held back, and so its files broken on
    purpose do not make the audit of the rest partial; the same file
    elsewhere, or named on its own, is an input error."""
    broken = "apiVersion: v1\nkind: Pod\nmetadata:\n  labels: {a: b\n"
    (tmp_path / "repo/tests/testdata").mkdir(parents=True)
    (tmp_path / "repo/tests/testdata/invalid-pod.yaml").write_text(broken)
    (tmp_path / "repo/deploy").mkdir()
    (tmp_path / "repo/deploy/pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: n1\n"
        "  containers:\n  - name: c\n    image: x\n    resources: {limits: {nvidia.com/gpu: 1, cpu: 1, memory: 1Gi}}\n"
    )
    proc = run_cli("check", "repo", "-o", "json")
    [error] = json.loads(proc.stdout)["errors"]
    assert proc.returncode == 1, proc.stdout
    assert error["level"] == "warning" and error["message"].endswith("(its path says it is a test: a warning)")
    assert error["line"] == 5
    (tmp_path / "repo/deploy/invalid-pod.yaml").write_text(broken)
    assert run_cli("check", "repo", "-o", "json").returncode == 2
    assert run_cli("check", "repo/tests/testdata/invalid-pod.yaml").returncode == 2


def test_directory_symlink_loop_is_visited_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "p.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    result = read_paths([str(tmp_path)])
    assert [d.name for d in result.documents] == ["p"]


def test_stdin(tmp_path):
    result = read_paths(["-"], stdin_text="apiVersion: v1\nkind: Pod\nmetadata: {name: s}\n")
    assert result.documents[0].file == "<stdin>"


def test_placeholder_gpu_count_is_a_field_error_not_a_zero(tmp_path):
    result = read(
        tmp_path,
        "p.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
        "spec:\n  template:\n    spec:\n"
        "      containers:\n      - name: c\n        resources:\n          limits:\n"
        "            nvidia.com/gpu: $GPU_PER_NODE\n",
    )
    workloads, errors = build_workloads(result.documents)
    [error] = errors
    assert error.line == 11 and "'$GPU_PER_NODE' is not a GPU count" in error.message
    [gpu] = workloads[0].templates[0].containers[0].gpus
    assert gpu.count is None  # unknown, never zero


@pytest.mark.parametrize(
    ("manifest", "kind_class", "roles"),
    [
        (
            """\
apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: fine-tune, namespace: dlrover}
spec:
  distributionStrategy: AllreduceStrategy
  replicaSpecs:
    worker:
      replicas: 4
      template:
        spec:
          containers:
          - name: main
            image: registry/train:1
            resources: {limits: {nvidia.com/gpu: 8}}
""",
            "batch",
            {"worker": (4, 8.0)},
        ),
        (
            """\
apiVersion: sagemaker.amazonaws.com/v1
kind: HyperPodPyTorchJob
metadata: {name: llama-pretrain, namespace: hyperpod}
spec:
  nprocPerNode: "8"
  replicaSpecs:
  - name: pods
    replicas: 16
    template:
      spec:
        containers:
        - name: pytorch
          image: registry/train:1
          resources: {requests: {nvidia.com/gpu: 8}, limits: {nvidia.com/gpu: 8}}
""",
            "batch",
            {"pods": (16, 8.0)},
        ),
    ],
)
def test_training_operator_kinds_are_workloads_with_their_roles_and_gpus(tmp_path, manifest, kind_class, roles):
    (tmp_path / "job.yaml").write_text(manifest)
    read = read_paths([str(tmp_path / "job.yaml")])
    [workload], errors = build_workloads(read.documents)
    assert errors == []
    assert workload.workload_class == kind_class
    assert workload.requests_gpus
    found = {t.role: (t.replicas, sum(g.count or 0 for c in t.containers for g in c.gpus)) for t in workload.templates}
    assert found == roles


def test_a_policy_that_matches_gpu_requests_is_no_workload(tmp_path):
    """Kyverno's pattern `nvidia.com/gpu: "?*"` is what the policy matches,
    not a pod's request: no workload, no "not a GPU count" error. An unknown
    kind of another group holding the same shape is still audited."""
    policy = (
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: require-gpu-request}\nspec:\n"
        "  rules:\n  - name: gpu\n    validate:\n      pattern:\n        spec:\n          containers:\n"
        '          - resources:\n              limits: {nvidia.com/gpu: "?*"}\n'
    )
    [workload], errors = build_workloads(read(tmp_path, "policy.yaml", policy).documents)
    assert errors == [] and not workload.templates
    gizmo = policy.replace("kyverno.io/v1", "example.com/v1").replace('"?*"', "1")
    [other], warned = build_workloads(read(tmp_path, "gizmo.yaml", gizmo).documents)
    assert other.requests_gpus and "not in the pod-spec table" in warned[0].message


def test_an_appwrapper_s_components_are_read_as_the_objects_they_are(tmp_path):
    result = read(
        tmp_path,
        "aw.yaml",
        "apiVersion: workload.codeflare.dev/v1beta2\nkind: AppWrapper\nmetadata: {name: aw}\nspec:\n"
        "  components:\n  - template:\n      apiVersion: kubeflow.org/v1\n      kind: PyTorchJob\n"
        "      metadata: {name: train}\n      spec: {}\n"
        "  - template:\n      apiVersion: v1\n      kind: Service\n      metadata: {name: svc}\n",
    )
    assert [(d.kind, d.name, d.line, d.base) for d in result.documents] == [
        ("PyTorchJob", "train", 6, "/spec/components/0/template"),
        ("Service", "svc", 11, "/spec/components/1/template"),
    ]


def test_template_actions_in_comments_and_other_tools_templates(tmp_path):
    from gpuaudit.sources.manifests import ReadResult, read_file

    # A plain manifest that shows in a comment how a chart writes a value.
    commented = read(
        tmp_path,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p  # {{ .Release.Name }}-p in the chart\nspec: {}\n",
    )
    assert commented.errors == [] and [d.name for d in commented.documents] == ["p"]
    # Another tool's template found on a walk: no Kubernetes object however it renders, no warning.
    taskfile = tmp_path / "goreleaser.yaml"
    taskfile.write_text("version: 2\nbuilds:\n{{- range .Builds }}\n- id: {{ . }}\n{{- end }}\n")
    found = ReadResult()
    read_file(taskfile, found, found=True)
    assert found.errors == [] and found.documents == []
    # Named by the user, it is still said to be a template.
    named = ReadResult()
    read_file(taskfile, named)
    assert [e.level for e in named.errors] == ["warning"]


def test_a_helm_release_whose_values_hold_tpl_strings_is_an_object(tmp_path):
    # Flux's HelmRelease carries the chart's values; app-template expands
    # `{{ .Release.Name }}` in them with tpl. The file is YAML, its object real.
    release = read(
        tmp_path,
        "helmrelease.yaml",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: comfyui}\nspec:\n"
        "  values:\n    route:\n      hostnames: ['{{ .Release.Name }}.example.com']\n",
    )
    assert release.errors == [] and [(d.kind, d.name) for d in release.documents] == [("HelmRelease", "comfyui")]
    # An Argo Workflow's script may hold a kubectl --template of its own.
    workflow = read(
        tmp_path,
        "workflow.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n  templates:\n  - name: t\n"
        "    container:\n      args:\n"
        "      - 'kubectl get svc etcd --template=\"{{range .status.loadBalancer.ingress}}{{.ip}}{{end}}\"'\n",
    )
    assert workflow.errors == [] and [d.kind for d in workflow.documents] == ["Workflow"]
    # A Deployment written the same way is a chart's template: not read.
    template = read(
        tmp_path,
        "deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: '{{ .Release.Name }}'}\nspec: {}\n",
    )
    assert template.documents == [] and "not auditable until rendered" in template.errors[0].message


def test_an_anchor_defined_again_replaces_the_earlier_one_as_in_yaml_1_2(tmp_path):
    # Go's YAML (kustomize, helm, Flux) reads a redefined anchor; PyYAML refuses it.
    result = read(
        tmp_path,
        "hr.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n"
        '  a: &port "8080"\n  b: *port\n  c: &port "9090"\n  d: *port\n  e: [*port]\n',
    )
    assert result.errors == []
    [doc] = result.documents
    assert doc.obj["data"] == {"a": "8080", "b": "8080", "c": "9090", "d": "9090", "e": ["9090"]}
    assert doc.line_of("/data/d") == 8


def test_kserve_placeholders_in_an_inference_service_are_text(tmp_path):
    # KServe fills {{.Name}} from the InferenceService itself at run time.
    isvc = read(
        tmp_path,
        "granite.yaml",
        "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {name: granite}\nspec:\n"
        "  predictor:\n    model:\n      modelFormat: {name: vLLM}\n      args: ['--served-model-name={{.Name}}']\n",
    )
    assert isvc.errors == [] and [d.kind for d in isvc.documents] == ["InferenceService"]


def test_an_openshift_template_is_read_as_its_objects_with_the_parameters_defaults(tmp_path):
    text = """\
kind: Template
apiVersion: template.openshift.io/v1
metadata: {name: vllm-runtime-template}
objects:
  - apiVersion: serving.kserve.io/v1alpha1
    kind: ServingRuntime
    metadata: {name: vllm-runtime}
    spec:
      containers:
        - name: kserve-container
          image: ${IMAGE}
          args: ['--served-model-name={{.Name}}', '--port=${PORT}', '--max-model-len=${MAX_LEN}']
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: app}
    spec:
      replicas: ${{REPLICAS}}
parameters:
  - {name: IMAGE, value: 'vllm/vllm-openai:v0.6.3'}
  - {name: PORT, value: '8080'}
  - {name: REPLICAS, value: '2'}
  - {name: MAX_LEN, required: true}
"""
    read_result = read(tmp_path, "template.yaml", text)
    # KServe's own placeholder in a runtime nested in the Template is no Helm action.
    assert not [e for e in read_result.errors if "not auditable until rendered" in e.message]
    runtime, deployment = read_result.documents
    assert (runtime.kind, runtime.base) == ("ServingRuntime", "/objects/0")
    container = runtime.obj["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.6.3"
    # A default in a string; none given: left as written, for the readers to say so.
    assert container["args"] == ["--served-model-name={{.Name}}", "--port=8080", "--max-model-len=${MAX_LEN}"]
    assert deployment.obj["spec"]["replicas"] == 2  # `${{NAME}}`: the default as YAML reads it
    assert runtime.line == 5 and deployment.line == 13
