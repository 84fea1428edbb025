"""Auditing a large input on several cores gives exactly what auditing it in
one process gives: the same findings, suppressions, skipped rules and errors,
in the same order, although facts in one shard depend on objects in another;
and a worker that fails costs time, not results."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.model import AuditResult, Exemption
from gpuaudit.pipelines import check as check_pipeline
from gpuaudit.pipelines import shards
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.inputs import InputOptions
from gpuaudit.sources.user_config import Config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")

POD = """apiVersion: v1
kind: Pod
metadata:
  name: pod-{i}
spec:
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:24.08-py3
    resources:
      requests: {{cpu: "1"}}
      limits: {{nvidia.com/gpu: {gpus}}}
"""
LIST = """{{"apiVersion": "v1", "kind": "List", "items": [
 {{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "svc-{i}"}}}},
 {{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "listed-{i}"}}}}]}}
"""
ODD = (
    # a bare config (of MIG slices: one replicating nvidia.com/gpu would make
    # every pod's GPU a slice, and leave GPA-AP-001 nothing to exempt)
    "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/mig-1g.10gb, replicas: 4}]\n",
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: {{ .Values.name }}}\n",
    "base: &b {x: 1}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  <<: *b\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nkind: Pod\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: unrendered}\n"
    "spec:\n  containers: [{name: c, resources: {limits: {nvidia.com/gpu: x}}}]\n",
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unexplained\n  annotations: {gpuaudit.io/ignore.GPA-AP-001: ''}\n"
    "spec:\n  containers: [{name: c, resources: {requests: {cpu: '1'}, limits: {nvidia.com/gpu: 2}}}]\n",
)
# Facts that need the rest of the input: the service and the shared-GPU
# request sit at the start, what they depend on at the end (another shard).
SERVICE = """apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, namespace: llm}
spec:
  template:
    spec:
      containers:
      - name: server
        resources: {limits: {nvidia.com/gpu: 1}}
"""
SHARED = """apiVersion: v1
kind: Pod
metadata: {name: shared-user}
spec:
  containers: [{name: c, resources: {limits: {nvidia.com/gpu.shared: 1}}}]
"""
SCALER = """apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: chat-scaler, namespace: llm}
spec:
  scaleTargetRef: {name: chat}
"""
RENAMING = """apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-config, namespace: gpu-operator}
data:
  any: |
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: true
        resources: [{name: nvidia.com/gpu, replicas: 4}]
"""


def repository(root: Path, files: int, *, depending: bool = True) -> Path:
    for i in range(files):
        folder = root / f"team-{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 10 == 3:
            (folder / f"{i:04d}.json").write_text(LIST.format(i=i))
        elif i % 10 == 7:
            (folder / f"{i:04d}.yaml").write_text(ODD[(i // 10) % len(ODD)])
        elif i % 50 == 9:
            (folder / f"{i:04d}.yaml").write_bytes(b"\0binary")
        else:
            (folder / f"{i:04d}.yaml").write_text(POD.format(i=i, gpus=1 + i % 8))
    (root / "aa-first").mkdir()
    (root / "aa-first" / "service.yaml").write_text(SERVICE + "---\n" + SHARED)
    if depending:
        (root / "zz-last").mkdir()
        (root / "zz-last" / "scaler.yaml").write_text(SCALER + "---\n" + RENAMING)
    return root


TREE = InputOptions(plain_files="tree")
CONFIG = Config(
    exemptions=(
        Exemption("GPA-AP-001", "lent to the research team", name="pod-1*"),
        Exemption("GPA-AL-003", "until the migration", expires=date(2020, 1, 1)),
    )
)


# Every category, and the opt-in rule whose verdict needs another shard's scaler.
ALL_AND_SCALE_TO_ZERO = ("allocation", "memory", "placement", "application", "sharing", "GPA-ME-002")


def audit(root: Path, *, keep_subjects: bool) -> AuditResult:
    """The tree as one unit: its folders' objects see each other across shards."""
    rules, _ = load_policy(CONFIG, include=ALL_AND_SCALE_TO_ZERO)
    return check_manifests([str(root)], CONFIG, rules, options=TREE, keep_subjects=keep_subjects)


def as_data(result: AuditResult) -> tuple:
    return (
        [f.as_dict() for f in result.findings],
        [(f.as_dict(), why) for f, why in result.suppressed],
        result.skipped,
        result.errors,
        result.resources,
        result.gpu_workloads,
    )


def _no_other_threads(budget: float = 30.0) -> None:
    """Wait for threads other tests left ending (a server's request handler,
    a timer) to end: shards fork only from a single-threaded process. A thread
    that outlives the wait is named: some test leaks it."""
    deadline = time.monotonic() + budget
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    assert not alive, f"threads left by earlier tests keep the audit from forking: {alive}"


@pytest.fixture
def two_cpus(monkeypatch):
    """Two processes even on a one-CPU machine, and a count of the forks."""
    _no_other_threads()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    forks = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks


def assert_reaped(pids: list[int]) -> None:
    """Every worker forked was waited for: none is left a zombie. (Only these
    pids: other tests of the session may keep children of their own, such as
    a Prometheus server.)"""
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_large_input_audited_on_two_cores_matches_one_process(tmp_path, two_cpus):
    root = repository(tmp_path, 300)
    expected = audit(root, keep_subjects=True)
    assert not two_cpus  # findings that keep their subjects are made here

    parallel = audit(root, keep_subjects=False)

    assert len(two_cpus) == 1  # one worker beside this process
    assert as_data(parallel) == as_data(expected)
    assert all(f.subject is None for f in parallel.findings)
    # Every kind of result was there to compare: findings, suppressed ones,
    # read errors, field errors, a warning from the rules, an expired exemption.
    messages = [e.message for e in expected.errors]
    assert expected.findings and expected.suppressed and expected.skipped
    assert any("invalid YAML" in m for m in messages) and any("not a GPU count" in m for m in messages)
    assert any("has no reason" in m for m in messages)
    assert sum("expired" in m for m in messages) == 1  # said once, not once per shard


def test_facts_that_need_another_shard_see_it(tmp_path, two_cpus):
    """The KEDA scaler and the renaming config are read by the worker; the
    service and the `.shared` request they concern, here."""

    def verdicts(root: Path) -> set[tuple[str, str]]:
        result = audit(root, keep_subjects=False)
        assert two_cpus
        return {(f.rule, f.resource.name) for f in result.findings}

    alone = verdicts(repository(tmp_path / "alone", 300, depending=False))
    together = verdicts(repository(tmp_path / "together", 300))

    assert {("GPA-ME-002", "chat")} <= alone - together  # the scaler takes it to zero
    assert {("GPA-SH-008", "shared-user")} <= alone - together  # the config advertises .shared


def test_small_inputs_and_threaded_callers_are_audited_here(tmp_path, two_cpus):
    assert shards.workers_for(100, 64) == 1
    assert shards.workers_for(1000, 64) == 2
    audit(repository(tmp_path, 100), keep_subjects=False)
    assert not two_cpus


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 4))
def test_shards_are_contiguous_and_about_equal_in_weight(weights, parts):
    items = list(enumerate(weights))
    cut = shards.contiguous_shards(items, parts, weight=lambda item: item[1])
    assert [item for shard in cut for item in shard] == items
    assert 1 <= len(cut) <= parts and all(cut)
    # No shard is heavier than its share by more than the item that crossed it.
    share = sum(weights) / parts
    assert all(sum(w for _, w in shard) <= share + max(weights) for shard in cut)


def test_a_few_large_files_are_a_shard_of_their_own(tmp_path):
    large = [tmp_path / f"large-{i}.yaml" for i in range(10)]
    small = [tmp_path / f"small-{i}.yaml" for i in range(90)]
    for path in large:
        path.write_text("a: b\n" * 20_000)
    for path in small:
        path.write_text("a: b\n")
    first, second = shards.contiguous_shards([*large, *small], 2, weight=lambda file: check_pipeline._work(("", file)))
    # By count, the first shard would hold all ten large files and forty small ones.
    assert set(first) < set(large) and second[-len(small) :] == small


# --- run_sharded on its own: failures cost time, never results ---------------


def first(shard):
    return list(shard), sum(shard)  # state, part


def second(state, total):
    return [x * 1000 // total for x in state]


def flatten(results):
    return [x for result in results for x in result]


def test_shards_come_back_in_order_with_what_all_of_them_share(two_cpus):
    items = list(range(1, 1001))
    results = shards.run_sharded(items, 2, first, sum, second)
    assert len(results) == 2 and len(two_cpus) == 1
    assert flatten(results) == [x * 1000 // sum(items) for x in items]


@pytest.mark.parametrize("phase", ["first", "second", "sending"])
def test_a_worker_that_fails_has_its_shard_done_here(two_cpus, phase):
    items = list(range(1, 1001))
    parent = os.getpid()

    def failing_first(shard):
        if phase == "first" and os.getpid() != parent:
            raise RuntimeError("worker lost")
        return first(shard)

    def failing_second(state, total):
        if phase == "second" and os.getpid() != parent:
            os._exit(3)
        return second(state, total)

    def unsendable(parts):
        total = sum(parts)
        return (total, (lambda: None) if phase == "sending" else None)  # a lambda cannot be pickled

    def second_of_pair(state, shared):
        return failing_second(state, shared[0])

    results = shards.run_sharded(items, 2, failing_first, unsendable, second_of_pair)

    assert two_cpus
    assert flatten(results) == [x * 1000 // sum(items) for x in items]
    assert_reaped(two_cpus)


def test_when_no_worker_can_start_everything_is_done_here(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    items = list(range(1, 501))
    assert flatten(shards.run_sharded(items, 2, first, sum, second)) == [x * 1000 // sum(items) for x in items]


def test_an_error_in_this_process_still_reaps_the_workers(two_cpus):
    def broken_combine(parts):
        raise ValueError("combine failed")

    with pytest.raises(ValueError, match="combine failed"):
        shards.run_sharded(list(range(1000)), 2, first, broken_combine, second)
    assert two_cpus
    assert_reaped(two_cpus)


SERVER = """apiVersion: v1
kind: ConfigMap
metadata: {{name: runtime}}
data: {{MODEL: {model}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm}}
spec:
  template:
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
      containers:
      - name: server
        image: vllm/vllm-openai:v0.8.5
        command: [sh, -c, "vllm serve $MODEL"]
        envFrom: [{{configMapRef: {{name: runtime}}}}]
        resources:
          requests: {{cpu: "8", memory: 32Gi}}
          limits: {{nvidia.com/gpu: 1, memory: 32Gi}}
"""


def test_alternatives_of_a_folder_in_two_shards_are_judged_as_in_one_process(tmp_path, two_cpus):
    """The first and the last file of one folder define the same ConfigMap
    and Deployment differently: alternatives, each judged with its own
    ConfigMap though a worker read the other."""
    folder = tmp_path / "examples"
    folder.mkdir()
    (folder / "0000-small.yaml").write_text(SERVER.format(model="Qwen/Qwen2.5-1.5B-Instruct"))
    for i in range(1, 200):
        (folder / f"{i:04d}.yaml").write_text(POD.format(i=i, gpus=1))
    (folder / "9999-large.yaml").write_text(SERVER.format(model="Qwen/Qwen2.5-32B-Instruct"))
    rules, _ = load_policy(CONFIG, include=ALL_AND_SCALE_TO_ZERO)

    def run(keep_subjects: bool) -> AuditResult:
        return check_manifests([str(folder)], CONFIG, rules, options=InputOptions(), keep_subjects=keep_subjects)

    expected = run(True)
    parallel = run(False)
    assert len(two_cpus) == 1
    assert as_data(parallel) == as_data(expected)
    [small] = [f for f in expected.findings if f.rule == "GPA-AL-001" and f.resource.name == "llm"]
    assert small.location.file.endswith("0000-small.yaml") and small.units == (small.location.file,)
    assert not [e for e in expected.errors if "defined again" in e.message]
    # The pods the alternatives share are judged once, under the folder's name.
    pods = [f for f in expected.findings if f.resource.name.startswith("pod-")]
    assert pods and {f.units for f in pods} == {(str(folder),)}
