"""Fuzzing the facts builders with hypothesis: arbitrary JSON-like documents
shaped like Kubernetes objects (real manifests and a recorded cluster, then
mutated at any depth) never make the pipeline raise, and every output
format still renders what was found.

Manifests go the whole way a `gpuaudit check` goes (YAML text -> reader ->
workloads -> context -> workload/config/claim facts -> every built-in rule ->
every format); snapshots the way `gpuaudit audit --snapshot` goes (schema
check -> cluster state -> cluster facts -> rules -> formats). A snapshot the
schema rejects is a clear error, which is an acceptable answer too.

The run length is ``GPUAUDIT_FUZZ_EXAMPLES`` examples per test (default 150,
a few seconds each); docs/robustness.md records the longer runs.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from functools import cache

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaudit.model import AuditResult
from gpuaudit.output import FORMATS, formatter
from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.snapshot import SnapshotError, validate_snapshot
from gpuaudit.sources.user_config import Config
from tests.robustness.hostile import hostile_manifests, hostile_snapshots, mutate

EXAMPLES = int(os.environ.get("GPUAUDIT_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# What may reach a terminal: printable text, newlines and (for alignment) spaces.
_TERMINAL_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


@cache
def rules():
    loaded, errors = load_policy(Config())
    assert errors == []
    return loaded


def assert_every_format_renders(result: AuditResult) -> None:
    for name in FORMATS:
        text = formatter(name)(result, colour=False)
        text.encode("utf-8")  # nothing a terminal or file cannot take
        if name in ("json", "sarif"):
            parsed = json.loads(text)
            if name == "json":
                assert len(parsed["findings"]) == len(result.findings)
        elif name == "junit":
            ET.fromstring(text.split("\n", 1)[1])
        elif name == "text":
            assert not _TERMINAL_CONTROL.search(text), repr(text)
        elif name == "policyreport":
            list(yaml.safe_load_all(text))


def dump(objects: list) -> str:
    return yaml.safe_dump_all(objects, allow_unicode=True, sort_keys=False)


@FUZZ
@given(hostile_manifests())
def test_manifest_pipeline_never_raises_and_every_format_renders(objects):
    result = check_manifests(["-"], Config(), rules(), stdin_text=dump(objects))
    assert_every_format_renders(result)


@FUZZ
@given(hostile_snapshots())
def test_snapshot_pipeline_never_raises_and_every_format_renders(snapshot):
    try:
        validate_snapshot(snapshot)
    except SnapshotError as exc:
        assert str(exc)  # rejected with a reason: a clear error, not a crash
        return
    result = audit_cluster(snapshot, Config(), rules())
    assert_every_format_renders(result)


@FUZZ
@given(st.data())
def test_config_objects_never_raise(data):
    """Device-plugin ConfigMaps, ClusterPolicies and mig-parted configs, with
    their embedded YAML text mutated too."""
    from gpuaudit.facts import device_plugin as config_facts
    from gpuaudit.model import Document

    seed = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "plugin", "annotations": {"a": "b"}},
        "data": {
            "any": "version: v1\nflags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n"
            "    renameByDefault: true\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n",
            "parted": "version: v1\nmig-configs:\n  all-1g.10gb:\n  - devices: all\n"
            "    mig-enabled: true\n    device-filter: ['0x233010DE']\n"
            "    mig-devices: {1g.10gb: 7}\n",
        },
    }
    obj = mutate(data, seed)
    if isinstance(obj.get("data"), dict):
        for key, text in list(obj["data"].items()):
            if isinstance(text, str) and data.draw(st.booleans(), label="mutate embedded"):
                try:
                    embedded = yaml.safe_load(text)
                except yaml.YAMLError:
                    continue  # already not YAML: as hostile as it gets
                obj["data"][key] = dump([mutate(data, embedded)])
    policy = mutate(
        data,
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {
                "devicePlugin": {"config": {"name": "plugin", "default": "any"}},
                "mig": {"strategy": "single"},
                "migManager": {"enabled": True, "config": {"default": "all-1g.10gb"}},
            },
        },
    )
    for doc in (obj, policy):
        for subject in config_facts.subjects(Document(obj=doc, file="c.yaml", line=1)):
            json.dumps(subject.facts, allow_nan=False)
