"""JUnit, GitHub annotations and PolicyReport output, validated the way the
systems that read them would: JUnit parsed as XML, PolicyReport against its
CRD's openAPIV3Schema, annotations against the workflow-command syntax."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.manifests import PINNED

SCHEMAS = Path(__file__).parent / "schemas"
SARIF_SCHEMA = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())

# A message with characters each format must escape: XML, newlines, %, commas
# (an env value is any text, and GPA-AL-007's message quotes it).
HOSTILE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "a<b>&c"
spec:
  template:
    spec:
      containers:
      - name: c
        env: [{name: NVIDIA_VISIBLE_DEVICES, value: "0,%\\n::error::x\\u0001"}]
        resources:
          requests: {cpu: "4", memory: 16Gi}
          limits: {nvidia.com/gpu: 1}
"""
# A ClusterPolicy that shares nothing beside a service that would take a
# share (GPA-SH-001: a cluster-scoped finding).
CONFIG = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  devicePlugin: {enabled: true}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: whisper, namespace: ml}
spec:
  selector: {matchLabels: {app: whisper}}
  template:
    metadata: {labels: {app: whisper}}
    spec:
      containers:
      - name: whisper
        image: onerahmet/openai-whisper-asr-webservice:latest-gpu
        resources: {limits: {nvidia.com/gpu: 1}}
"""


def crd_schema(name: str) -> dict:
    crd = yaml.safe_load((SCHEMAS / name).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return version["schema"]["openAPIV3Schema"]


def test_junit_parses_and_counts_findings_skips_and_input_errors(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "web.yaml").write_text("kind: Pod\n  bad: [\n")
    proc = run_cli("check", ".", "--format", "junit")
    assert proc.returncode == 2, proc.stderr
    root = ET.fromstring(proc.stdout.split("\n", 1)[1])  # after the XML declaration
    assert root.tag == "testsuites"
    failures = root.findall(".//testcase/failure")
    suites = {s.get("name").split()[0]: s for s in root.findall("testsuite")}
    pin_suite = suites["GPA-PL-001"]
    [case] = pin_suite.findall("testcase")
    assert case.get("file").endswith("pinned.yaml") and case.get("line") == "7"
    assert case.find("failure").get("type") == "high"
    assert int(root.get("failures")) == len(failures)
    assert int(root.get("tests")) == len(root.findall(".//testcase"))
    assert int(root.get("skipped")) == len(root.findall(".//testcase/skipped"))
    assert suites["GPA-ME-001"].find("testcase/skipped") is not None  # needs telemetry
    [error] = suites["input"].findall("testcase/error")
    assert "invalid YAML" in error.get("message")
    assert root.get("errors") == "1"


def test_junit_escapes_what_manifests_contain(run_cli, tmp_path):
    (tmp_path / "hostile.yaml").write_text(HOSTILE)
    proc = run_cli("check", "hostile.yaml", "--format", "junit")
    root = ET.fromstring(proc.stdout.split("\n", 1)[1])
    names = [c.get("name") for c in root.iter("testcase")]
    assert any("a<b>&c" in n for n in names)
    assert "\x01" not in proc.stdout


UNBOUNDED_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: train
        command: [torchrun, train.py]
        resources:
          requests: {cpu: "8", memory: 32Gi}
          limits: {nvidia.com/gpu: 1}
"""


def test_github_annotations_have_levels_files_lines_and_escaping(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "hostile.yaml").write_text(HOSTILE)
    (tmp_path / "job.yaml").write_text(UNBOUNDED_JOB)  # a low finding: GPA-AL-008
    proc = run_cli("check", "pinned.yaml", "hostile.yaml", "job.yaml", "--format", "github")
    lines = proc.stdout.splitlines()
    command = re.compile(r"^::(error|warning|notice) (?:[a-z]+=[^,:]*)(?:,[a-z]+=[^,:]*)*::[^\n]*$")
    assert lines and all(command.match(line) for line in lines), lines
    pin = next(line for line in lines if "GPA-PL-001" in line and "pinned" in line)
    assert pin.startswith("::error file=pinned.yaml,line=7,title=GPA-PL-001 ")
    assert any(line.startswith("::notice ") for line in lines)  # low/info findings
    hostile = next(line for line in lines if "GPA-AL-007" in line and "hostile" in line)
    message = hostile.split("::", 2)[2]
    assert "%25%0A::error::x" in message  # the newline and % encoded: no new command
    assert "\x01" not in proc.stdout


# The part of the Code Climate issue format GitLab's Code Quality reads
# (docs.gitlab.com/ci/testing/code_quality/#code-quality-report-format).
GITLAB_CODE_QUALITY = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path", "lines"],
                "properties": {
                    "path": {"type": "string", "pattern": "^[^/]"},
                    "lines": {
                        "type": "object",
                        "required": ["begin"],
                        "properties": {"begin": {"type": "integer", "minimum": 1}},
                    },
                },
            },
        },
    },
}


def test_gitlab_code_quality_has_unique_fingerprints_severities_and_lines(run_cli, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pinned.yaml").write_text(PINNED)
    (tmp_path / "b.yaml").write_text(PINNED)  # the same object in another file: another issue
    (tmp_path / "hostile.yaml").write_text(HOSTILE)
    (tmp_path / "broken.yaml").write_text("kind: Pod\n  bad: [\n")
    proc = run_cli("check", "a", "./b.yaml", "hostile.yaml", "broken.yaml", "--format", "gitlab")
    assert proc.returncode == 2, proc.stderr
    issues = json.loads(proc.stdout)
    jsonschema.validate(issues, GITLAB_CODE_QUALITY)
    fingerprints = [i["fingerprint"] for i in issues]
    assert len(set(fingerprints)) == len(fingerprints)
    by_path = {i["location"]["path"] for i in issues}
    assert {"a/pinned.yaml", "b.yaml", "hostile.yaml", "broken.yaml"} <= by_path
    pin = next(i for i in issues if i["check_name"] == "GPA-PL-001" and i["location"]["path"] == "b.yaml")
    assert pin["severity"] == "critical" and pin["location"]["lines"]["begin"] > 1  # high -> critical, at its line
    # The same object in two folders is no problem of the input (one folder per environment).
    [problem] = [i for i in issues if i["check_name"] == "gpuaudit-input"]
    assert problem["severity"] == "major" and problem["location"] == {"path": "broken.yaml", "lines": {"begin": 2}}
    # The fingerprint does not move with the line: the same finding after an edit above it.
    (tmp_path / "b.yaml").write_text("# a comment\n" + PINNED)
    again = json.loads(run_cli("check", "./b.yaml", "--format", "gitlab").stdout)
    moved = next(i for i in again if i["check_name"] == "GPA-PL-001")
    assert moved["fingerprint"] == pin["fingerprint"]
    assert moved["location"]["lines"]["begin"] == pin["location"]["lines"]["begin"] + 1


def test_policyreport_validates_against_its_crds(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "web.yaml").write_text("kind: Pod\n  bad: [\n")
    proc = run_cli("check", ".", "--format", "policyreport")
    docs = list(yaml.safe_load_all(proc.stdout))
    schemas = {
        "PolicyReport": crd_schema("wgpolicyk8s.io_policyreports.yaml"),
        "ClusterPolicyReport": crd_schema("wgpolicyk8s.io_clusterpolicyreports.yaml"),
    }
    for doc in docs:
        jsonschema.validate(doc, schemas[doc["kind"]])
        assert doc["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        counted = sum(doc["summary"].values())
        assert counted == len(doc["results"])
    [namespaced] = [d for d in docs if d["kind"] == "PolicyReport"]
    assert namespaced["metadata"]["namespace"] == "ml"
    pin = next(r for r in namespaced["results"] if r["policy"] == "GPA-PL-001")
    assert pin["result"] == "fail" and pin["severity"] == "high"
    assert pin["resources"] == [{"apiVersion": "v1", "kind": "Pod", "name": "pinned", "namespace": "ml"}]
    assert pin["properties"]["line"] == "7"
    [cluster] = [d for d in docs if d["kind"] == "ClusterPolicyReport"]
    results = {r["result"] for r in cluster["results"]}
    assert {"fail", "skip", "error"} <= results  # ClusterPolicy finding, skipped rules, bad YAML


@pytest.mark.parametrize("fmt", ["junit", "github", "gitlab", "policyreport", "sarif"])
def test_every_format_renders_an_empty_result(run_cli, tmp_path, fmt):
    (tmp_path / "empty.yaml").write_text("# nothing here\n")
    proc = run_cli("check", "empty.yaml", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    if fmt == "junit":
        ET.fromstring(proc.stdout.split("\n", 1)[1])
    elif fmt == "policyreport":
        [doc] = yaml.safe_load_all(proc.stdout)
        jsonschema.validate(doc, crd_schema("wgpolicyk8s.io_clusterpolicyreports.yaml"))
    elif fmt == "sarif":
        jsonschema.validate(json.loads(proc.stdout), SARIF_SCHEMA)
    elif fmt == "gitlab":
        assert json.loads(proc.stdout) == []
    else:
        assert proc.stdout == ""


def test_several_new_formats_in_one_run(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli(
        "check",
        "pinned.yaml",
        "--format",
        "junit=out/report.xml",
        "--format",
        "policyreport=out/report.yaml",
        "--format",
        "github",
    )
    assert proc.stdout.startswith("::")
    ET.parse(tmp_path / "out" / "report.xml")
    assert list(yaml.safe_load_all((tmp_path / "out" / "report.yaml").read_text()))
