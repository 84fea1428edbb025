"""Real GPU manifests from public repositories (../shared/corpus)."""

from __future__ import annotations

import json
import re

from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.user_config import Config

from .conftest import shared_or_skip

# A GPU resource written as a resources key with a value (not a quota list entry).
GPU_KEY = re.compile(r'^\s*["\']?(nvidia\.com/gpu|nvidia\.com/mig-[\w.+-]+|amd\.com/gpu)["\']?\s*:\s*\S', re.M)


def audit(path):
    rules, errors = load_policy(Config())
    assert not errors
    return check_manifests([str(path)], Config(), rules)


def test_every_file_that_requests_a_gpu_yields_a_gpu_workload():
    corpus = shared_or_skip("corpus", "manifests")
    missing = []
    checked = 0
    for path in sorted(corpus.rglob("*.yaml")):
        if not GPU_KEY.search(path.read_text(errors="replace")):
            continue
        result = audit(path)
        if any(e.level == "error" and "invalid YAML" in e.message for e in result.errors):
            continue
        checked += 1
        if result.gpu_workloads == 0:
            missing.append(path.name)
    assert checked > 150
    assert missing == []


def test_invalid_upstream_files_come_back_as_errors_with_lines(run_cli):
    corpus = shared_or_skip("corpus", "manifests")
    proc = run_cli("check", str(corpus), "--format", "json")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    invalid = [e for e in report["errors"] if e["message"].startswith("invalid YAML")]
    assert len(invalid) >= 3
    assert all(e["line"] for e in invalid)
    placeholders = [e for e in report["errors"] if "is not a GPU count" in e["message"]]
    assert any("${ACCELERATOR_QUANTITY}" in e["message"] for e in placeholders)
    assert report["summary"]["gpu_workloads"] > 200


def test_gemma_2b_on_eight_h100s_is_flagged_for_allocation():
    path = shared_or_skip(
        "corpus",
        "manifests",
        "GoogleCloudPlatform__kubernetes-engine-samples",
        "ai-ml__llm-serving-gemma__vllm__vllm-2b-it-h100-80gb.yaml",
    )
    result = audit(path)
    allocation = [f for f in result.findings if f.category == "allocation"]
    assert allocation and allocation[0].resource.name == "vllm-gemma-deployment"
    assert allocation[0].location.line == 41


def test_whole_corpus_runs_without_a_traceback(run_cli):
    corpus = shared_or_skip("corpus")
    proc = run_cli("check", str(corpus), "--format", "json")
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr
    helm = [e for e in json.loads(proc.stdout)["errors"] if "not auditable until rendered" in e["message"]]
    # 44 templates as reviewed (values files whose strings hold `tpl` actions,
    # an Ansible playbook and a chart template that renders no object are
    # not), said once for the run with how many more there are.
    [said] = helm
    more = re.search(r"\(and (\d+) more files like it\)", said["message"])
    assert more and 1 + int(more.group(1)) >= 44, said
    # A chart's values file whose strings hold `tpl` actions is YAML, no template.
    plugin = corpus / "helm_templates" / "NVIDIA__k8s-device-plugin"
    values = plugin / "deployments__helm__nvidia-device-plugin__values.yaml"
    alone = json.loads(run_cli("check", str(values), "--format", "json").stdout)
    assert not [e for e in alone["errors"] if "not auditable until rendered" in e["message"]]
