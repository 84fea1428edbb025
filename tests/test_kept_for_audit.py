"""What an audit keeps of the objects it reads: ``cluster_builder.kept_for_audit``,
given to ``read_snapshot`` and ``collect`` as ``each``, cuts the status of a
pod that may use no GPU to its phase. The audit, the model and the review of
the kept objects are those of the whole ones, on recorded and generated
clusters; a snapshot to be written keeps every object whole."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.cluster_builder import build_cluster_state, kept_for_audit, may_use_gpus
from gpuaudit.output.json_format import render
from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.cluster import OBJECT_KEYS, collect
from gpuaudit.sources.snapshot import SnapshotError, read_snapshot, write_snapshot
from gpuaudit.sources.user_config import Config
from tests.clusters import genai

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "clusters" / "small.json"
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"


@cache
def _rules() -> list[Any]:
    rules, errors = load_policy(Config())
    assert errors == []
    return rules


def _generated() -> dict[str, list[dict[str, Any]]]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gen_cluster
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return gen_cluster.generate(60, 600, seed=3)


def _snapshot(cluster: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": "2026-06-01T00:00:00Z",
        "cluster": {"server": "https://example:6443", "context": "test"},
        "objects": {key: cluster.get(key, []) for key in OBJECT_KEYS},
        "absent": [],
        "errors": [],
        "telemetry": None,
    }


CLUSTERS = {
    "small": lambda: _snapshot(json.loads(SMALL.read_text())),
    "genai": lambda: _snapshot(genai.build()),
    "generated": lambda: _snapshot(_generated()),
    "demo": lambda: json.loads(gzip.decompress(DEMO.read_bytes())),
}


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_audit_of_the_kept_objects_is_the_audit_of_the_whole(tmp_path, name):
    if name == "genai" and not genai.available():
        pytest.skip("the GenTD26 trace is not in ../shared/data")
    path = tmp_path / "snapshot.json.gz"
    write_snapshot(CLUSTERS[name](), path)
    whole = read_snapshot(path)
    kept = read_snapshot(path, each=kept_for_audit)

    pods = whole["objects"]["pods"]
    cut = [i for i, pod in enumerate(pods) if kept["objects"]["pods"][i] != pod]
    assert cut == [i for i, pod in enumerate(pods) if not may_use_gpus(pod) and len(pod["status"]) > 1]
    assert bool(cut) == (name in ("small", "generated"))  # the others record only GPU pods, or no status
    for i in cut:
        assert kept["objects"]["pods"][i] == {**pods[i], "status": {"phase": pods[i]["status"]["phase"]}}
    assert {k: v for k, v in kept.items() if k != "objects"} == {k: v for k, v in whole.items() if k != "objects"}
    assert {k: v for k, v in kept["objects"].items() if k != "pods"} == {
        k: v for k, v in whole["objects"].items() if k != "pods"
    }

    assert build_cluster_state(kept) == build_cluster_state(whole)
    audits = [audit_cluster(s, Config(), _rules()) for s in (whole, kept)]
    assert render(audits[0]) == render(audits[1])


def test_a_pod_that_may_use_a_gpu_is_kept_whole_and_others_keep_their_phase():
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}

    def pod(resources: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "a"}, **extra},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": resources}]},
            "status": copy.deepcopy(status),
        }

    gpu = pod({"limits": {"nvidia.com/gpu": "1"}})
    assert kept_for_audit("pods", copy.deepcopy(gpu)) == gpu
    annotated = pod({}, annotations={"gpu-fraction": "0.5"})
    assert kept_for_audit("pods", copy.deepcopy(annotated)) == annotated
    cpu = pod({"requests": {"cpu": "1"}})
    assert kept_for_audit("pods", copy.deepcopy(cpu)) == {**cpu, "status": {"phase": "Running"}}
    no_phase = {**cpu, "status": {"podIP": "10.0.0.1", "hostIP": "10.0.0.2"}}
    assert kept_for_audit("pods", copy.deepcopy(no_phase))["status"] == {}
    # Only pods; and shapes nobody checked pass as they are.
    node = {"metadata": {"name": "n"}, "status": copy.deepcopy(status)}
    assert kept_for_audit("nodes", copy.deepcopy(node)) == node
    for odd in ([], "pod", None, {**cpu, "status": "Running"}):
        assert kept_for_audit("pods", copy.deepcopy(odd)) == odd
    odd_spec = {"spec": 3, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    assert kept_for_audit("pods", odd_spec) == {"spec": 3, "status": {"phase": "Running"}}


def test_a_live_collection_keeps_what_each_keeps_and_whole_without_it(apiserver, kubeconfig):
    small = json.loads(SMALL.read_text())
    apiserver.load(small)
    whole = collect(kubeconfig=str(kubeconfig))
    kept = collect(kubeconfig=str(kubeconfig), each=kept_for_audit)

    assert whole["objects"]["pods"] != kept["objects"]["pods"]
    assert [kept_for_audit("pods", copy.deepcopy(p)) for p in whole["objects"]["pods"]] == kept["objects"]["pods"]
    for key in ("nodes", "events", "replicasets", "jobs", "configmaps", "workloads"):
        assert kept["objects"][key] == whole["objects"][key], key
    for a, b in zip(whole["objects"]["pods"], small["pods"], strict=True):
        assert a["status"] == b["status"]


def test_an_error_inside_one_object_is_placed_in_the_file(tmp_path):
    """Objects are decoded one at a time; an error in one is reported where
    it is in the file, as when the file is decoded whole."""
    snapshot = CLUSTERS["small"]()
    text = json.dumps(snapshot, indent=1).replace('"name": "notebook-alice"', '"name": notebook-alice', 1)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "notebook-alice" in row)
    path = tmp_path / "bad.json"
    path.write_text(text)
    for each in (None, kept_for_audit):
        with pytest.raises(SnapshotError, match=rf"not valid JSON: Expecting value at line {line}, column \d+$"):
            read_snapshot(path, each=each)


@pytest.mark.parametrize("value", ["NaN", "-Infinity", '"\\ud800"', "1" * 30])
def test_what_json_loads_reads_beyond_rfc_8259_is_read_as_before(tmp_path, value):
    """msgspec refuses NaN, Infinity, lone surrogates and integers past 64
    bits; json.loads reads them, and so does a snapshot, object by object."""
    snapshot = CLUSTERS["small"]()
    text = json.dumps(snapshot).replace('"notebook-alice"', '"notebook-alice", "odd": __ODD__', 1)
    path = tmp_path / "odd.json"
    path.write_text(text.replace("__ODD__", value))
    expected = json.dumps(json.loads(path.read_text()))  # as text: NaN != NaN
    assert json.dumps(read_snapshot(path)) == expected
    kept = read_snapshot(path, each=kept_for_audit)
    alice = next(p for p in kept["objects"]["pods"] if p["metadata"]["name"] == "notebook-alice")
    assert repr(alice["metadata"]["odd"]) == repr(json.loads(value))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32-be"])
def test_json_in_utf16_utf32_or_with_a_byte_order_mark_reads_as_utf8(tmp_path, encoding):
    snapshot = CLUSTERS["small"]()
    snapshot["objects"]["pods"][0]["metadata"]["labels"] = {"team": "café ☕"}
    path = tmp_path / "snapshot.json"
    path.write_bytes(json.dumps(snapshot, ensure_ascii=False).encode(encoding))
    assert read_snapshot(path) == snapshot
    assert read_snapshot(path, each=kept_for_audit)["objects"]["pods"][0]["metadata"]["labels"] == {"team": "café ☕"}
