"""gpuaudit/data/lifecycle.yaml covers every batch kind gpuaudit reads: a
batch kind without an entry would be skipped by GPA-AL-008 without a word."""

from __future__ import annotations

from gpuaudit.bundled import data_yaml


def _batch_kinds(podspecs: list[dict]) -> set[tuple[str, str]]:
    return {(g, e["kind"]) for e in podspecs if e["class"] == "batch" for g in e["groups"]}


def _covered(lifecycle: list[dict]) -> set[tuple[str, str]]:
    return {(g, e["kind"]) for e in lifecycle for g in e["groups"]}


def test_every_batch_kind_has_a_lifecycle_entry():
    missing = _batch_kinds(data_yaml("podspecs.yaml")) - _covered(data_yaml("lifecycle.yaml"))
    assert not missing, f"add to gpuaudit/data/lifecycle.yaml (fields, or not_judged: why): {sorted(missing)}"


def test_a_batch_kind_without_an_entry_is_caught():
    podspecs = [
        *data_yaml("podspecs.yaml"),
        {"kind": "FlinkDeployment", "groups": ["flink.apache.org"], "class": "batch", "pods": []},
    ]
    assert _batch_kinds(podspecs) - _covered(data_yaml("lifecycle.yaml")) == {("flink.apache.org", "FlinkDeployment")}


def test_entries_name_kinds_that_exist_and_say_why_when_they_ask_nothing():
    known = {(g, e["kind"]) for e in data_yaml("podspecs.yaml") for g in e["groups"]}
    for entry in data_yaml("lifecycle.yaml"):
        assert {(g, entry["kind"]) for g in entry["groups"]} <= known, entry["kind"]
        if not entry["deadline"] and not entry["cleanup"]:
            assert entry.get("not_judged"), f"{entry['kind']}: nothing to ask for, say why in not_judged"


def test_a_field_that_bounds_the_run_only_with_some_values_is_named_with_them():
    """`cleanPodPolicy: None` is set and bounds nothing: the finding names the
    values that do, never only the field (round 14: "none of ... cleanPodPolicy
    set", said of a job that sets it)."""
    from gpuaudit.facts.lifecycle import lifecycle_facts
    from gpuaudit.model import Document
    from gpuaudit.model.workload_builder import build_workloads

    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "megatron"},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": {}},
    }
    [workload], _ = build_workloads([Document(obj, "job.yaml", 1)])
    facts = lifecycle_facts(workload)
    assert facts is not None and facts["cleanup"] is False
    assert "runPolicy.cleanPodPolicy (Running or All)" in facts["fields"]
    assert "runPolicy.activeDeadlineSeconds" in facts["fields"]
    # A boolean value is named as YAML writes it (round 17: "(True)").
    ray = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}, "spec": {"entrypoint": "x.py"}}
    [workload], _ = build_workloads([Document(ray, "job.yaml", 1)])
    facts = lifecycle_facts(workload)
    assert facts is not None and "shutdownAfterJobFinishes (true)" in facts["fields"]
