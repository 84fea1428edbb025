"""Code and types cannot drift: every fact document the facts modules compute
(the corpus's and the examples' manifests, the rule cases' manifests, the
recorded clusters' nodes, pods, claims and cluster) converts strictly to the
type of its target in gpuaudit/facts/types.py. A fact computed but not
declared there, or of another type, fails here; fix the type, then run
scripts/gen_fact_schema.py."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuaudit.facts import Subject, cluster
from gpuaudit.facts.context import Site, build_context
from gpuaudit.facts.types import TARGET_TYPES, PodFacts, as_facts
from gpuaudit.model.cluster_builder import build_cluster_state
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.pipelines.check import manifest_subjects
from gpuaudit.pipelines.facts import manifest_facts
from gpuaudit.pipelines.rules_test import iter_cases
from gpuaudit.sources.manifests import read_paths
from gpuaudit.sources.user_config import Config

from .clusters import alibaba
from .conftest import ROOT, shared_or_skip

SITE = Site.from_config(  # as test_rule_pack_facts: GPU taints, a GPU class and a node size set, so their facts exist
    {
        "platform": "eks",
        "gpu_taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        "gpu_classes": [{"name": "big", "selector": {"c": "big"}, "products": ["H100-80GB", "H200-141GB"]}],
        "gpus_per_node": 8,
    }
)


def _manifest_subjects(root: Path) -> Iterator[Subject]:
    read = read_paths([str(root)])
    workloads, _ = build_workloads(read.documents)
    context = build_context(SITE, read.documents, workloads, read.bare)
    yield from manifest_subjects(read.documents, workloads, context, read.bare)


def _case_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for case in iter_cases(ROOT / "policies"):
        if "manifest" in case.data:
            result = manifest_facts(["-"], Config(site=case.data.get("site") or {}), case.data["manifest"])
            for document in result.documents:
                yield document["target"], document["facts"]


def _cluster_subjects(snapshot: dict[str, Any]) -> Iterator[Subject]:
    yield from cluster.subjects(build_cluster_state(snapshot))


def _unconvertible(documents: Iterable[tuple[str, Any]]) -> tuple[Counter[str], list[str]]:
    """The documents of each target, and why those that do not convert fail."""
    seen: Counter[str] = Counter()
    problems = []
    for target, facts in documents:
        seen[target] += 1
        try:
            as_facts(target, facts)
        except msgspec.ValidationError as exc:
            problems.append(f"{target}: {exc}")
    return seen, sorted(set(problems))


@pytest.mark.parametrize("where", ["examples", "corpus", "cases"])
def test_every_manifest_fact_document_converts_to_its_type(where):
    if where == "cases":
        documents: Iterable[tuple[str, Any]] = _case_documents()
    else:
        root = ROOT / "examples" if where == "examples" else shared_or_skip("corpus")
        documents = ((s.target, s.facts) for s in _manifest_subjects(root))
    seen, problems = _unconvertible(documents)
    assert problems == []
    assert {"workload", "pod", "container"} <= set(seen), seen
    if where != "examples":
        assert {"config", "claim"} <= set(seen), seen


def _snapshot(name: str) -> dict[str, Any]:
    if name == "demo":
        return json.loads(gzip.decompress((ROOT / "examples" / "demo-snapshot.json.gz").read_bytes()))
    if name == "small":
        return {"objects": json.loads((ROOT / "tests" / "clusters" / "small.json").read_text())}
    if not alibaba.available():
        pytest.skip(f"{alibaba.DATA_DIR} is not present")
    return {"objects": alibaba.build(node_sample=8)}


@pytest.mark.parametrize("name", ["demo", "small", "alibaba"])
def test_every_cluster_fact_document_converts_to_its_type(name):
    seen, problems = _unconvertible((s.target, s.facts) for s in _cluster_subjects(_snapshot(name)))
    assert problems == []
    assert {"pod", "node", "cluster"} <= set(seen), seen


def test_an_undeclared_or_mistyped_fact_fails_to_convert():
    [subject] = [s for s in _manifest_subjects(ROOT / "examples") if s.target == "pod"][:1]
    pod = as_facts("pod", subject.facts)
    assert isinstance(pod, PodFacts) and pod.kind == subject.facts["kind"]
    with pytest.raises(msgspec.ValidationError, match="unknown field `renamed_fact`"):
        as_facts("pod", {**subject.facts, "renamed_fact": 1})
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int \| null`, got `str` - at `\$.replicas`"):
        as_facts("pod", {**subject.facts, "replicas": "3"})
    assert sorted(TARGET_TYPES) == sorted({"workload", "pod", "container", "config", "node", "claim", "cluster"})
