"""`gpuaudit facts` and the raw fields it shows (issue 20, item 11): the fact
documents per subject as JSON or YAML, the pod spec and metadata as facts a
site rule can name, in manifests and in a cluster audit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

from gpuaudit.engine.rules import RuleError, fact_schema, rule_from_data
from gpuaudit.facts import workload as workload_facts
from gpuaudit.model import Document
from gpuaudit.model.workload_builder import build_workloads

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  namespace: llm
  labels: {team: search, tier: 1}
  annotations: {owner: ml-platform}
spec:
  replicas: 2
  template:
    metadata:
      labels: {app: chat}
      annotations: {sidecar: "off"}
    spec:
      priorityClassName: gpu-serving
      containers:
      - name: server
        image: vllm/vllm-openai:v0.10.0
        resources: {limits: {nvidia.com/gpu: 1}}
"""

BROKEN = "apiVersion: v1\nkind: Pod\nmetadata: {name: [\n"


def _documents(proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_one_document_per_subject_with_target_resource_and_location(run_cli, tmp_path):
    (tmp_path / "chat.yaml").write_text(DEPLOYMENT)
    documents = _documents(run_cli("facts", "chat.yaml"))
    assert [d["target"] for d in documents] == ["workload", "pod", "container"]
    workload, pod, container = documents
    assert pod["resource"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": "llm",
        "name": "chat",
        "container": None,
    }
    assert container["resource"]["container"] == "server"
    assert workload["location"] == {"file": "chat.yaml", "line": 1, "pointer": ""}
    assert pod["location"] == {"file": "chat.yaml", "line": 14, "pointer": "/spec/template/spec"}
    assert container["location"]["pointer"] == "/spec/template/spec/containers/0"
    assert pod["facts"]["gpu"]["count"] == 1


def test_pod_and_workload_documents_hold_the_raw_fields(run_cli, tmp_path):
    (tmp_path / "chat.yaml").write_text(DEPLOYMENT)
    workload, pod, _ = _documents(run_cli("facts", "chat.yaml"))
    spec = yaml.safe_load(DEPLOYMENT)["spec"]["template"]["spec"]
    assert pod["facts"]["spec"] == spec
    object_metadata = {"labels": {"team": "search", "tier": "1"}, "annotations": {"owner": "ml-platform"}}
    assert pod["facts"]["metadata"] == {
        "labels": {"app": "chat"},
        "annotations": {"sidecar": "off"},
        "object": object_metadata,
    }
    assert workload["facts"]["metadata"] == object_metadata  # labels as text: tier "1", not 1


def test_yaml_output_says_the_same_as_json(run_cli, tmp_path):
    (tmp_path / "chat.yaml").write_text(DEPLOYMENT)
    as_yaml = run_cli("facts", "chat.yaml", "-o", "yaml")
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout) == _documents(run_cli("facts", "chat.yaml"))


def test_target_filter_stdin_and_output_file(run_cli, tmp_path):
    proc = run_cli("facts", "-", "--target", "pod", "--output-file", "facts.json", stdin=DEPLOYMENT)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    documents = json.loads((tmp_path / "facts.json").read_text())
    assert [(d["target"], d["location"]["file"]) for d in documents] == [("pod", "<stdin>")]


def test_input_errors_exit_2_after_printing_what_could_be_read(run_cli, tmp_path):
    (tmp_path / "chat.yaml").write_text(DEPLOYMENT)
    (tmp_path / "broken.yaml").write_text(BROKEN)
    proc = run_cli("facts", "chat.yaml", "broken.yaml", "--target", "workload")
    assert proc.returncode == 2
    assert [d["resource"]["name"] for d in json.loads(proc.stdout)] == ["chat"]
    assert "broken.yaml" in proc.stderr and "Traceback" not in proc.stderr
    assert run_cli("facts").returncode == 2  # no PATHS: a usage error


def test_documents_are_what_rules_judge(run_cli):
    """Each document's facts are valid against the fact schema of its target:
    the names `gpuaudit facts` shows are the names a rule may use."""
    documents = _documents(run_cli("facts", str(ROOT / "examples" / "manifests"), cwd=ROOT))
    assert len(documents) > 10
    for document in documents:
        schema = {**fact_schema(), "$ref": f"#/$defs/{document['target']}"}
        jsonschema.validate(document["facts"], schema)


_HEAVY = ("kubernetes", "jinja2", "markupsafe", "pynvml")
_IMPORTS = f"""
import atexit, sys
atexit.register(lambda: print(sorted(m for m in sys.modules if m.split(".")[0] in {_HEAVY!r}), file=sys.stderr))
from gpuaudit.cli.main import main
main()
"""


def test_facts_imports_neither_the_kubernetes_client_nor_jinja2_nor_nvml(tmp_path):
    (tmp_path / "chat.yaml").write_text(DEPLOYMENT)
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS, "facts", "chat.yaml", "-o", "yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]"


# --- the raw fields, without the command -----------------------------------------------


def _subjects(text: str) -> list:
    doc = Document(obj=yaml.safe_load(text), file="x.yaml", line=1)
    [workload], _ = build_workloads([doc])
    return list(workload_facts.subjects(workload))


def test_the_pod_spec_is_the_models_own_mapping_not_a_copy():
    pod = next(s for s in _subjects(DEPLOYMENT) if s.target == "pod")
    assert pod.facts["spec"] is pod.document.obj["spec"]["template"]["spec"]


def _rule(target: str, violation: dict) -> dict:
    return {
        "id": "SITE-001",
        "title": "t",
        "category": "allocation",
        "severity": "low",
        "scope": ["manifest"],
        "target": target,
        "violation": violation,
        "message": "m",
        "docs": "a site rule, for the test",
    }


def test_rules_may_name_any_field_under_spec_and_any_label_but_no_other_metadata():
    anything = {"properties": {"spec": {"properties": {"runtimeClassName": {"const": "nvidia"}}}}}
    rule_from_data(_rule("pod", anything), {}, "r.yaml", {}, {})
    label = {"properties": {"metadata": {"properties": {"labels": {"required": ["team"]}}}}}
    rule_from_data(_rule("workload", label), {}, "r.yaml", {}, {})
    typo = {"properties": {"metadata": {"properties": {"lables": {"required": ["team"]}}}}}
    try:
        rule_from_data(_rule("pod", typo), {}, "r.yaml", {}, {})
    except RuleError as exc:
        assert "metadata.lables" in str(exc)
    else:
        raise AssertionError("a misspelt metadata key loaded")


def test_a_site_rule_reads_the_raw_spec_of_live_pods(run_cli, tmp_path):
    """In a cluster audit a pod's `spec` is the live pod's: every pod has
    containers, none of the recorded demo pods names a priority class."""
    site = tmp_path / "site"
    site.mkdir()
    for rule_id, field in (("SITE-001", "containers"), ("SITE-002", "priorityClassName")):
        rule = {
            **_rule("pod", {}),
            "id": rule_id,
            "scope": ["cluster"],
            "match": {"properties": {"gpu": {"properties": {"requested": {"const": True}}}}},
            "require": {"properties": {"spec": {"required": [field]}}},
        }
        del rule["violation"]
        (site / f"{rule_id}.yaml").write_text(yaml.safe_dump(rule))
    rules = "SITE-001,SITE-002"
    proc = run_cli("audit", "--snapshot", str(DEMO), "--policies", str(site), "--rules", rules, "-o", "json")
    assert proc.returncode in (0, 1), proc.stderr
    rules = [f["rule"] for f in json.loads(proc.stdout)["findings"]]
    assert "SITE-001" not in rules
    assert rules.count("SITE-002") > 0


def test_terminal_controls_in_the_input_reach_no_output_raw(run_cli):
    """Label values are quoted input: escaped in JSON and YAML, never sent raw."""
    hostile = DEPLOYMENT.replace("team: search", 'team: "\\e]0;owned\\a\\e[2J\\u202e"')
    for fmt in ("json", "yaml"):
        proc = run_cli("facts", "-", "-o", fmt, stdin=hostile)
        assert proc.returncode == 0, proc.stderr
        assert not any(c in proc.stdout for c in ("\x1b", "\x07", "\u202e")), fmt
        assert "owned" in proc.stdout
