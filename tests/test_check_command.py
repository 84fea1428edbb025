"""`gpuaudit check` end to end, as a process: formats, exit codes, config."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from tests.manifests import PINNED

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "manifests"
SARIF_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "sarif-schema-2.1.0.json").read_text())

CLEAN = """\
apiVersion: batch/v1
kind: Job
metadata: {name: ok}
spec:
  activeDeadlineSeconds: 86400
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        resources:
          requests: {cpu: "4", memory: 16Gi}
          limits: {nvidia.com/gpu: 1}
"""


def test_json_output_has_the_documented_keys_and_exit_code_1(run_cli):
    proc = run_cli("check", str(EXAMPLES), "--format", "json")
    assert proc.returncode == 1, proc.stderr  # a high finding (the hostname pin)
    report = json.loads(proc.stdout)
    assert report["version"] == 1
    assert set(report) >= {"version", "findings", "skipped", "errors", "summary"}
    finding = report["findings"][0]
    assert set(finding) == {
        "rule",
        "title",
        "severity",
        "category",
        "message",
        "resource",
        "location",
        "evidence",
        "remediation",
    }
    assert set(finding["resource"]) >= {"apiVersion", "kind", "namespace", "name", "container"}
    assert set(finding["location"]) == {"file", "line", "pointer"}
    assert set(report["summary"]) >= {
        "resources",
        "gpu_workloads",
        "findings",
        "by_severity",
        "by_category",
    }
    assert report["summary"]["findings"] == len(report["findings"])
    assert sum(report["summary"]["by_severity"].values()) == len(report["findings"])
    rules = json.loads(run_cli("rules", "list", "-o", "json").stdout)
    cluster_only = {r["id"] for r in rules if "manifest" not in r["scope"]}
    assert "GPA-ME-001" in cluster_only
    needs_site = {r["id"] for r in rules if any(x.startswith("site.") for x in r["requires"])}
    assert needs_site == {"GPA-PL-002", "GPA-PL-004"}  # examples/ has no .gpuaudit.yaml
    assert {s["rule"] for s in report["skipped"]} == cluster_only | needs_site
    pin = next(f for f in report["findings"] if f["rule"] == "GPA-PL-001")
    assert pin["location"]["file"].endswith("notebook.yaml") and pin["location"]["line"] == 17
    assert pin["resource"]["name"] == "notebook-alice"


def test_fail_on_threshold(run_cli, tmp_path):
    (tmp_path / "job.yaml").write_text(CLEAN.replace('cpu: "4"', "cpu: 500m"))  # medium finding only
    assert run_cli("check", "job.yaml").returncode == 0
    assert run_cli("check", "job.yaml", "--fail-on", "medium").returncode == 1
    (tmp_path / "clean.yaml").write_text(CLEAN)
    assert run_cli("check", "clean.yaml", "--fail-on", "info").returncode == 0


def test_input_errors_exit_2_but_other_files_are_still_audited(run_cli, tmp_path):
    # (Not named broken.yaml: a file named as broken on purpose is a test
    # fixture, whose problems are warnings: test_manifest_reader.)
    (tmp_path / "web.yaml").write_text("kind: Pod\n  bad: [\n")
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", ".", "--format", "json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert [f["rule"] for f in report["findings"]] == ["GPA-PL-001"]
    [error] = report["errors"]
    assert error["file"].endswith("web.yaml") and error["line"] == 2


def test_a_kind_found_by_its_shape_is_said_once_per_run(run_cli, tmp_path):
    """Thirteen app-template HelmReleases are one thing to know: the warning
    that a kind's pods were found by their shape comes once, at the first
    object, saying how many more there are; another kind has its own."""
    release = (
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{name: {name}}}\nspec:\n"
        "  values:\n    controllers:\n      main:\n        containers:\n        - name: app\n"
        "          image: ghcr.io/example/{name}:1.0\n          resources: {{limits: {{nvidia.com/gpu: 1}}}}\n"
    )
    for name in ("ollama", "comfyui", "whisper"):
        (tmp_path / f"{name}.yaml").write_text(release.format(name=name))
    (tmp_path / "gizmo.yaml").write_text(release.format(name="gizmo").replace("helm.toolkit.fluxcd.io/v2", "x.io/v1"))
    report = json.loads(run_cli("check", ".", "--format", "json").stdout)
    said = [e for e in report["errors"] if "requests GPUs at" in e["message"]]
    assert [(Path(e["file"]).name, e["message"].endswith("(and 2 more of this kind)")) for e in said] == [
        ("comfyui.yaml", True),
        ("gizmo.yaml", False),
    ]
    assert report["summary"]["gpu_workloads"] == 4
    # Chart values are no kind to add a locator for: the chart renders them.
    assert "is no workload itself" in said[0]["message"] and "add a locator" not in said[0]["message"]
    # Values that are themselves the container (`values.resources`) are named as the release, not "values".
    (tmp_path / "exporter.yaml").write_text(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: dcgm-exporter}\nspec:\n"
        "  values:\n    image: {repository: nvcr.io/nvidia/k8s/dcgm-exporter}\n"
        "    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    report = json.loads(run_cli("check", "exporter.yaml", "--format", "json", cwd=tmp_path).stdout)
    assert {f["resource"]["container"] for f in report["findings"]} == {"dcgm-exporter"}


def test_what_a_kind_guessed_by_its_shape_misreads_is_a_warning(run_cli, tmp_path):
    """A benchmark tool's config whose `resources` hold ranges, not
    quantities (round 18, kueue-bench's WorkloadProfile): audited as a guess,
    its misreadings are warnings, and the run is not partial."""
    (tmp_path / "profile.yaml").write_text(
        "apiVersion: bench.example.io/v1\nkind: WorkloadProfile\nmetadata: {name: contention}\nspec:\n"
        "  template:\n    containers:\n    - name: train\n      resources:\n        requests:\n"
        "          nvidia.com/gpu: {distribution: uniform, min: '2', max: '8'}\n"
        "          cpu: {distribution: uniform, min: '4', max: '16'}\n"
    )
    proc = run_cli("check", "profile.yaml", "--format", "json", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["errors"] and {e["level"] for e in report["errors"]} == {"warning"}, report["errors"]
    assert proc.returncode == 0


def test_a_kind_that_names_gpus_its_own_way_is_never_silent(run_cli, tmp_path):
    """Dynamo's DynamoGraphDeployment asks for `gpu: "8"` in resources of its
    own: not read, and said so, once per kind (round 14: "0 GPU workloads")."""
    graph = (
        "apiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata: {{name: {name}}}\nspec:\n"
        "  services:\n    decode:\n      replicas: 1\n      resources: {{limits: {{gpu: '8'}}}}\n"
        "    frontend:\n      replicas: 1\n      resources: {{limits: {{gpu: '0'}}}}\n"
    )
    for name in ("agg", "disagg"):
        (tmp_path / f"{name}.yaml").write_text(graph.format(name=name))
    (tmp_path / "cpu.yaml").write_text(graph.format(name="cpu").replace("'8'", "'0'"))
    report = json.loads(run_cli("check", ".", "--format", "json").stdout)
    said = [e for e in report["errors"] if "asks for GPUs in a field of its own" in e["message"]]
    assert [(Path(e["file"]).name, e["line"]) for e in said] == [("agg.yaml", 8)], said
    assert "/spec/services/decode/resources/limits/gpu" in said[0]["message"]
    assert said[0]["message"].endswith("(and 1 more of this kind)") and said[0]["level"] == "warning"


def test_templates_to_render_first_are_said_once_per_run(run_cli, tmp_path):
    """An app catalogue's template.yaml files, one per app, are one thing to
    know; an error is never folded into another."""
    for app in ("jupyter", "vllm", "comfyui"):
        (tmp_path / app).mkdir()
        (tmp_path / app / "template.yaml").write_text(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n"
        )
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [\n")
    report = json.loads(run_cli("check", ".", "--format", "json").stdout)
    said = [e for e in report["errors"] if "not auditable until rendered" in e["message"]]
    assert [(Path(e["file"]).parent.name, e["message"].endswith("(and 2 more files like it)")) for e in said] == [
        ("comfyui", True)
    ]
    assert [e for e in report["errors"] if e["level"] == "error" and e["file"].endswith("pod.yaml")]


def test_stdin_and_text_output_grouped_in_diagnostic_order(run_cli):
    proc = run_cli(
        "check",
        "-",
        stdin=PINNED + "---\n" + CLEAN.replace('cpu: "4"', "cpu: 500m"),
        env={"NO_COLOR": "1"},
    )
    out = proc.stdout
    assert "\x1b[" not in out
    assert out.index("PLACEMENT") < out.index("APPLICATION")
    assert "<stdin>:7" in out


def test_sarif_is_valid_with_results_and_when_empty(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "clean.yaml").write_text(CLEAN)
    for name, expected in (("pinned.yaml", 1), ("clean.yaml", 0)):
        proc = run_cli("check", name, "--format", "sarif")
        sarif = json.loads(proc.stdout)
        jsonschema.validate(sarif, SARIF_SCHEMA)
        results = sarif["runs"][0]["results"]
        assert len(results) == expected
        assert sarif["runs"][0]["tool"]["driver"]["rules"], "rule metadata present even with no results"
    sarif = json.loads(run_cli("check", "pinned.yaml", "--format", "sarif").stdout)
    region = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert region == {
        "artifactLocation": {"uri": "pinned.yaml", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 7},
    }
    assert sarif["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_several_formats_in_one_run_and_logs_never_on_stdout(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli(
        "check",
        "pinned.yaml",
        "--format",
        "sarif=out.sarif",
        "--format",
        "json=out.json",
        "--format",
        "text",
    )
    assert "GPA-PL-001" in proc.stdout
    assert json.loads((tmp_path / "out.json").read_text())["findings"][0]["rule"] == "GPA-PL-001"
    jsonschema.validate(json.loads((tmp_path / "out.sarif").read_text()), SARIF_SCHEMA)


def test_config_params_exemptions_and_annotations(run_cli, tmp_path):
    (tmp_path / "job.yaml").write_text(CLEAN.replace('cpu: "4"', 'cpu: "3"'))
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / ".gpuaudit.yaml").write_text(
        "params:\n  GPA-AP-001: {min_cpu_per_gpu: 4}\n"
        "exemptions:\n"
        "- {rule: GPA-PL-001, namespace: ml, name: pinned, reason: licence dongle on that node}\n"
        "- {rule: GPA-AP-001, name: nothing, reason: old, expires: '2020-01-01'}\n"
    )
    report = json.loads(run_cli("check", ".", "--format", "json").stdout)
    assert [f["rule"] for f in report["findings"]] == ["GPA-AP-001"]  # 3 cores < 4 per GPU
    assert report["suppressed"][0]["reason"] == "licence dongle on that node"
    warnings = " ".join(e["message"] for e in report["errors"])
    assert "expired on 2020-01-01" in warnings


@pytest.mark.parametrize(
    ("config", "line", "message"),
    [
        # the typo of the issue: before, a warning, and site rules silently off
        ("polices: [gpu-policies]\n", 1, "unknown config key 'polices' at the top level; did you mean policies?"),
        ("fail-on: high\n", 1, "unknown config key 'fail-on' at the top level; did you mean fail_on?"),
        ("site:\n  platform: gke\n  gpu_taint: []\n", 3, "'gpu_taint' under site; did you mean gpu_taints?"),
        (
            "site:\n  gpu_taints:\n  - {key: a, efect: NoSchedule}\n",
            3,
            "'efect' under site.gpu_taints.0; did you mean effect?",
        ),
        (
            "podspecs:\n- kind: Run\n  groups: [x.io]\n  pods: [{at: /spec, sepc: ''}]\n",
            4,
            "'sepc' under podspecs.0.pods.0; did you mean spec?",
        ),
        ("telemetry:\n  prometheus: http://p\n  query: {}\n", 3, "'query' under telemetry; did you mean queries?"),
        ("report:\n  currancy: EUR\n", 2, "'currancy' under report; did you mean currency?"),
        (
            "exemptions:\n- {rule: X, reason: y, namespac: z}\n",
            2,
            "'namespac' under exemptions.0; did you mean namespace?",
        ),
        ("repository:\n  plain_file: tree\n", 2, "'plain_file' under repository; did you mean plain_files?"),
        ("colour: always\n", 1, "'colour' at the top level; known here: rules, exclude_rules, fail_on, policies,"),
    ],
)
def test_an_unknown_config_key_is_an_error_that_names_the_nearest(run_cli, tmp_path, config, line, message):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "gpu-policies").mkdir()
    (tmp_path / ".gpuaudit.yaml").write_text(config)
    proc = run_cli("check", "pinned.yaml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f".gpuaudit.yaml:{line}: " in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # the same file without the typo is accepted
    fixed = re.sub(r"\bpolices\b", "policies", config)
    if fixed != config:
        (tmp_path / ".gpuaudit.yaml").write_text(fixed)
        assert run_cli("check", "pinned.yaml").returncode == 1  # the pinned pod's high finding


def test_a_rule_that_needs_a_site_fact_says_so_instead_of_passing(run_cli, tmp_path):
    (tmp_path / "job.yaml").write_text(CLEAN)  # no toleration for any GPU taint
    report = json.loads(run_cli("check", "job.yaml", "--format", "json", "--rules", "GPA-PL-004").stdout)
    assert report["findings"] == []
    assert [s["rule"] for s in report["skipped"]] == ["GPA-PL-004"]
    assert "needs site.gpu_taints in .gpuaudit.yaml" in report["skipped"][0]["reason"]

    (tmp_path / ".gpuaudit.yaml").write_text("site:\n  gpu_taints: [{key: nvidia.com/gpu, effect: NoSchedule}]\n")
    report = json.loads(run_cli("check", "job.yaml", "--format", "json", "--rules", "GPA-PL-004").stdout)
    assert [f["rule"] for f in report["findings"]] == ["GPA-PL-004"] and report["skipped"] == []


def test_rules_may_require_every_site_fact_the_config_has_and_no_other():
    rule_schema = json.loads((ROOT / "policies" / "rule.schema.json").read_text())
    config_schema = json.loads((ROOT / "gpuaudit" / "data" / "config.schema.json").read_text())
    required = set(rule_schema["properties"]["requires"]["items"]["enum"])
    site = {f"site.{key}" for key in config_schema["properties"]["site"]["properties"]}
    assert {r for r in required if r.startswith("site.")} == site


def test_ignore_annotation_needs_a_reason(run_cli, tmp_path):
    annotated = PINNED.replace(
        "  namespace: ml\n",
        '  namespace: ml\n  annotations:\n    gpuaudit.io/ignore.GPA-PL-001: "REASON"\n',
    )
    (tmp_path / "a.yaml").write_text(annotated.replace("REASON", "bench node for driver tests"))
    report = json.loads(run_cli("check", "a.yaml", "--format", "json").stdout)
    assert report["findings"] == [] and len(report["suppressed"]) == 1
    (tmp_path / "a.yaml").write_text(annotated.replace("REASON", ""))
    report = json.loads(run_cli("check", "a.yaml", "--format", "json").stdout)
    assert [f["rule"] for f in report["findings"]] == ["GPA-PL-001"]
    assert "has no reason" in report["errors"][0]["message"]


def test_rule_selection(run_cli):
    report = json.loads(run_cli("check", str(EXAMPLES), "--format", "json", "--rules", "placement").stdout)
    assert {f["category"] for f in report["findings"]} == {"placement"}
    report = json.loads(
        run_cli("check", str(EXAMPLES), "--format", "json", "--exclude-rules", "GPA-PL-001,application").stdout
    )
    assert {f["category"] for f in report["findings"]} == {"allocation", "sharing"}
    # An opt-in rule runs when named by id, beside the rest of the selection.
    report = json.loads(run_cli("check", str(EXAMPLES), "--format", "json", "--rules", "allocation,GPA-ME-002").stdout)
    assert {f["category"] for f in report["findings"]} == {"allocation", "memory"}


def test_invalid_config_is_a_usage_error(run_cli, tmp_path):
    (tmp_path / ".gpuaudit.yaml").write_text("fail_on: sometimes\n")
    proc = run_cli("check", str(EXAMPLES))
    assert proc.returncode == 2
    assert ".gpuaudit.yaml:1" in proc.stderr and "fail_on" in proc.stderr


@pytest.mark.parametrize("command", [["rules", "list"], ["rules", "explain", "GPA-PL-001"]])
def test_rules_commands(run_cli, command):
    proc = run_cli(*command)
    assert proc.returncode == 0
    assert "GPA-PL-001" in proc.stdout


def test_rules_list_takes_dash_o_and_names_the_opt_in_rules_it_leaves_out(run_cli):
    text = run_cli("rules", "list").stdout
    running, left_out = text.split("\nopt-in, not selected", 1)
    assert "GPA-ME-002" not in running and "GPA-ME-002" in left_out
    rows = json.loads(run_cli("rules", "list", "-o", "json").stdout)
    assert [r["id"] for r in rows] == re.findall(r"^(GPA-\S+) ", running, re.M)
    assert json.loads(run_cli("rules", "list", "--output", "json").stdout) == rows
    named = json.loads(run_cli("rules", "list", "-o", "json", "--rules", "GPA-ME-002").stdout)
    assert [r["id"] for r in named] == ["GPA-ME-002"]
    assert run_cli("rules", "list", "--format", "json").returncode == 2  # -o, as every command


def test_rules_explain_explains_an_opt_in_rule_and_how_to_run_it(run_cli, tmp_path):
    (tmp_path / "inference.yaml").write_text((EXAMPLES / "inference.yaml").read_text())
    proc = run_cli("check", "inference.yaml", "--rules", "GPA-ME-002")
    assert "explain: gpuaudit rules explain GPA-ME-002" in proc.stdout  # the hint check prints
    explained = run_cli("rules", "explain", "gpa-me-002")
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith("GPA-ME-002: ")
    assert "opt-in: runs only when named by id: --rules GPA-ME-002" in explained.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("chek", "."), "No such command 'chek'; did you mean check?"),
        (("rules", "explian", "GPA-PL-001"), "No such command 'explian'; did you mean explain?"),
        (("rules", "explain", "GPA-AL-0009"), "no rule GPA-AL-0009; did you mean GPA-AL-009?"),
        (("rules", "explain", "gpa-pl001"), "no rule gpa-pl001; did you mean GPA-PL-001?"),
        (("zzzzzz",), "No such command 'zzzzzz'."),
    ],
)
def test_a_typo_names_the_nearest_command_or_rule(run_cli, args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


# What a pre-commit run of plain files needs is all it imports: no kustomize
# rendering, no JSON Schema compiler once the rule pack is cached, nor the
# extras' packages.
_NOT_ON_THE_CHECK_PATH = (
    "gpuaudit.sources.kustomize",
    "fastjsonschema",
    "importlib.resources",
    "tempfile",
    "kubernetes",
    "jinja2",
    "pynvml",
    "prometheus_client",  # -o openmetrics only
    "gpuaudit.webclient",  # --pushgateway, --webhook-url of audit and report only
    "gpuaudit.remediate.planners",  # fix only: the table imports every planner
)
_IMPORTED = f"""
import atexit, sys
wanted = {_NOT_ON_THE_CHECK_PATH!r}
atexit.register(lambda: print(sorted(m for m in wanted if m in sys.modules), file=sys.stderr))
from gpuaudit.cli.main import main
main()
"""


def test_a_check_of_plain_files_imports_only_what_it_needs(tmp_path):
    import subprocess
    import sys

    (tmp_path / "pinned.yaml").write_text(PINNED)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for run in ("fills the rule cache", "reads it"):
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORTED, "check", "pinned.yaml"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr  # PINNED has findings
        assert "GPA-PL-001" in proc.stdout, run
    assert proc.stderr.strip().splitlines()[-1] == "[]"
