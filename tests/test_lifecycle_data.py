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
