"""PolicyReports past etcd's limit: 3,000 pending GPU pods in one namespace
made one 7.25 MB PolicyReport (9,000 results); etcd stores at most 1.5 MiB
per object, so `kubectl apply` failed and no report was published (issue 32,
item 7). Reports are now split under MAX_REPORT_BYTES, by rule, with names
that depend only on what they hold; the deploy prunes the ones a later run
no longer writes (tests/test_deploy.py checks the CronJob that does).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from gpuaudit.output.policyreport import MAX_REPORT_BYTES
from tests.robustness.hostile import cluster_seed
from tests.robustness.processes import gpuaudit

ETCD_LIMIT = int(1.5 * 2**20)


def _pending_pods(count: int) -> dict:
    """The recorded cluster with ``count`` more pending GPU pods in one
    namespace, none owned by anything (each its own finding)."""
    snapshot = copy.deepcopy(cluster_seed())
    snapshot["telemetry"] = None
    pods = snapshot["objects"]["pods"]
    template = next(p for p in pods if p["metadata"]["name"].startswith("finetune-llama"))
    for i in range(count):
        pod = copy.deepcopy(template)
        pod["metadata"].pop("ownerReferences", None)
        pod["metadata"]["name"] = f"queued-{i:05d}"
        pod["metadata"]["namespace"] = "batch"
        pod["metadata"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        pods.append(pod)
    return snapshot


def _reports(tmp_path: Path, snapshot: dict) -> list[dict]:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snapshot))
    run = gpuaudit("audit", "--snapshot", str(path), "--format", "policyreport", cwd=tmp_path, timeout=300)
    assert run.code in (1, 2), run.stderr
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def _size(doc: dict) -> int:
    return len(json.dumps(doc, separators=(",", ":")).encode())


def test_reports_of_a_crowded_namespace_stay_under_etcds_limit(tmp_path):
    docs = _reports(tmp_path, _pending_pods(3000))
    batch = [d for d in docs if d["kind"] == "PolicyReport" and d["metadata"]["namespace"] == "batch"]
    sizes = sorted(_size(d) for d in docs)
    assert sizes[-1] <= MAX_REPORT_BYTES < ETCD_LIMIT, f"largest report {sizes[-1]:,} bytes"
    assert len(batch) > 1
    failed = sum(d["summary"]["fail"] for d in batch)
    assert failed == sum(len(d["results"]) for d in batch) >= 3000
    # every result once; names unique, valid, and what they hold says which
    keys = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "PolicyReport"]
    assert len(keys) == len(set(keys))
    for d in batch:
        name = d["metadata"]["name"]
        assert name.startswith("gpuaudit-") and len(name) <= 63 and name == name.lower()
        assert {r["policy"] for r in d["results"]} == {r["policy"] for r in d["results"][:1]}  # one rule each
        assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuaudit"
    # a namespace that fits keeps its one report, named as before
    small = [d for d in docs if d["kind"] == "PolicyReport" and d["metadata"]["namespace"] == "inference"]
    assert [d["metadata"]["name"] for d in small] == ["gpuaudit"]


def test_the_split_is_deterministic(tmp_path):
    snapshot = _pending_pods(1500)
    first = _reports(tmp_path, snapshot)
    snapshot["objects"]["pods"].reverse()  # the order of the API's list changes nothing
    second = _reports(tmp_path, snapshot)

    def names(docs: list[dict]) -> list[tuple[str, str, int]]:
        return sorted((d["metadata"].get("namespace", ""), d["metadata"]["name"], len(d["results"])) for d in docs)

    assert names(first) == names(second)


@pytest.mark.parametrize("count", [0, 1])
def test_a_small_audit_is_one_report_per_namespace(tmp_path, count):
    docs = _reports(tmp_path, _pending_pods(count))
    namespaced = [d for d in docs if d["kind"] == "PolicyReport"]
    assert {d["metadata"]["name"] for d in namespaced} == {"gpuaudit"}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterPolicyReport"] == ["gpuaudit"]
