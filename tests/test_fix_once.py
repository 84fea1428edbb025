"""`fix` reads once and its planning passes reuse what they built: the check
judges the documents fix parsed, and a pass of the coherence loop builds
the workloads only of objects no earlier pass built (model.WorkloadMemo)."""

from __future__ import annotations

import copy
from pathlib import Path

from gpuaudit.kube.podspecs import builtin_locators
from gpuaudit.model import Document
from gpuaudit.model.workload_builder import WorkloadMemo
from gpuaudit.pipelines.fix import Rechecker, read_fix_inputs, run_state
from gpuaudit.pipelines.policy import load_policy, locators_for
from gpuaudit.remediate.plan import Settings, plan_fixes
from gpuaudit.sources.user_config import Config

# The Deployment's CPU is raised; the same patch on the InferenceService is
# declined by the coherence check (its runtime is unknown), so the plan takes
# a second pass.
APP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 1
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: trainer
        image: pytorch/pytorch:2.3.0
        resources:
          requests: {cpu: "1", memory: 8Gi}
          limits: {nvidia.com/gpu: 8, memory: 8Gi}
---
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: llama, namespace: ml}
spec:
  predictor:
    model:
      modelFormat: {name: huggingface}
      resources:
        requests: {cpu: "1", memory: 8Gi}
        limits: {nvidia.com/gpu: 8, memory: 8Gi}
"""


def _inputs(tmp_path: Path):
    (tmp_path / "app.yaml").write_text(APP)
    config = Config()
    rules, _ = load_policy(config)
    return config, rules, read_fix_inputs([str(tmp_path / "app.yaml")], config, rules)


def test_the_check_judges_the_documents_fix_read(tmp_path):
    _, _, inputs = _inputs(tmp_path)
    judged = {id(f.subject.document) for f in inputs.findings if f.subject and f.subject.document}
    assert judged
    assert judged <= {id(d) for d in inputs.documents}  # the same objects, not a second reading


def _plan(config, rules, inputs, memo):
    run = run_state(inputs, config)
    return plan_fixes(
        inputs.items, locators_for(config), Settings(), run, Rechecker(config, rules, inputs, memo), memo=memo
    )


def test_a_second_pass_builds_only_what_it_changed(tmp_path):
    config, rules, inputs = _inputs(tmp_path)
    memo = WorkloadMemo()
    plan = _plan(config, rules, inputs, memo)
    # Two passes: the InferenceService's change declined by the coherence check, the Deployment's kept.
    assert [c.target[1] for c in plan.changes] == ["Deployment"]
    assert any(s.reason.startswith("the patch would break the workload") for s in plan.skipped)
    # The second pass asked again about the Deployment, as the first left it: nothing to build.
    assert 0 < memo.built < memo.asked
    built, asked = memo.built, memo.asked
    again = _plan(config, rules, inputs, memo)
    assert memo.asked > asked and memo.built == built  # every object of both passes was built already
    assert [c.patch for c in again.changes] == [c.patch for c in plan.changes]


def test_the_memo_builds_each_content_once():
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    memo = WorkloadMemo()
    locators = builtin_locators()
    first, _ = memo.build(Document(obj, "", 1), locators)
    same, _ = memo.build(Document(copy.deepcopy(obj), "", 1), locators)  # another object, the same content
    assert same[0] is first[0] and memo.built == 1
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2
    other, _ = memo.build(Document(changed, "", 1), locators)
    assert memo.built == 2 and other[0].templates[0].containers[0].gpus[0].count == 2
    elsewhere, _ = memo.build(Document(obj, "app.yaml", 3), locators)  # another place: its own workload
    assert memo.built == 3 and elsewhere[0].document.file == "app.yaml"
