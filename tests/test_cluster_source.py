"""gpuaudit.sources.cluster with the official kubernetes client, over real HTTP,
against tests/apiserver.py (a stand-in: no real API server runs here) serving
recorded clusters; and gpuaudit.snapshot's files."""

from __future__ import annotations

import copy
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaudit.sources.cluster import OBJECT_KEYS, ClusterSourceError, collect
from gpuaudit.sources.snapshot import SnapshotError, read_snapshot, validate_snapshot, write_snapshot
from tests.clusters import alibaba, genai

# The apiserver and kubeconfig fixtures (not imported: a plugin module that a
# test module imports first cannot have its asserts rewritten).

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "clusters" / "small.json"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
EVENTS = "/api/v1/events"
# Fast retries: the behaviour is the same, the suite stays quick.
FAST = {"backoff": 0.01, "max_attempts": 3}


@pytest.fixture
def small() -> dict[str, list[dict[str, Any]]]:
    return json.loads(SMALL.read_text())


@pytest.fixture
def served(apiserver: Any, small: dict[str, Any]) -> Any:
    """The apiserver fixture serving tests/clusters/small.json."""
    return apiserver.load(small)


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("managedFields", None)
    return obj


def _names(objects: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def _counts(snapshot: dict[str, Any]) -> dict[str, int]:
    return {key: len(items) for key, items in snapshot["objects"].items()}


# -- a full collection ----------------------------------------------------------------


def test_full_collection_equals_the_recorded_cluster(served, kubeconfig, small):
    snapshot = collect(kubeconfig=str(kubeconfig))

    validate_snapshot(snapshot)
    assert snapshot["errors"] == [] and snapshot["absent"] == []
    assert snapshot["cluster"] == {"server": served.url, "context": "fake-cluster"}
    assert snapshot["telemetry"] is None
    for key in (
        "nodes",
        "pods",
        "replicasets",
        "jobs",
        "clusterpolicies",
        "resourceclaims",
        "resourceslices",
        "kueueworkloads",
    ):
        # Everything as recorded, except managedFields, which is dropped.
        assert snapshot["objects"][key] == [_without_managed_fields(o) for o in small[key]], key
    assert any("managedFields" in o["metadata"] for o in small["pods"] + small["nodes"])
    # Only FailedScheduling events; only the device plugin's ConfigMap.
    assert _names(snapshot["objects"]["events"]) == [
        e["metadata"]["name"] for e in small["events"] if e["reason"] == "FailedScheduling"
    ]
    assert len(snapshot["objects"]["events"]) == 2
    assert _names(snapshot["objects"]["configmaps"]) == ["time-slicing-config"]
    assert "secrets" not in snapshot["objects"]
    assert "hf-token" not in json.dumps(snapshot)


def test_pages_through_lists_with_opaque_continue_tokens(served, kubeconfig, small):
    seen: list[tuple[str, int]] = []
    snapshot = collect(kubeconfig=str(kubeconfig), page_size=3, progress=lambda key, n: seen.append((key, n)))

    assert snapshot["errors"] == []
    assert _counts(snapshot)["pods"] == len(small["pods"]) == 20
    pod_requests = [r for r in served.requests if r.path == PODS]
    assert len(pod_requests) == math.ceil(20 / 3)
    assert all(r.query["limit"] == "3" for r in pod_requests)
    tokens = [r.query.get("continue") for r in pod_requests]
    assert tokens[0] is None and all(tokens[1:]) and len(set(tokens[1:])) == len(tokens) - 1
    assert [n for key, n in seen if key == "pods"] == [3, 6, 9, 12, 15, 18, 20]


def test_bearer_token_is_sent_and_a_wrong_one_is_an_error_not_a_crash(served, tmp_path):
    good = served.write_kubeconfig(tmp_path / "good")
    collect(kubeconfig=str(good))
    assert served.requests and all(r.headers.get("authorization") == f"Bearer {served.token}" for r in served.requests)

    bad = served.write_kubeconfig(tmp_path / "bad", token="wrong")
    snapshot = collect(kubeconfig=str(bad), **FAST)
    validate_snapshot(snapshot)
    assert {e["resource"] for e in snapshot["errors"]} >= {"nodes", "pods", "events"}
    assert {e["status"] for e in snapshot["errors"]} == {401}
    assert all(not items for items in snapshot["objects"].values())


# -- failures degrade to a partial result ---------------------------------------------------


def test_forbidden_events_are_an_error_naming_them_and_the_rest_is_collected(served, kubeconfig, small):
    served.inject(EVENTS, status=403)
    snapshot = collect(kubeconfig=str(kubeconfig), **FAST)

    assert len(snapshot["errors"]) == 1
    error = snapshot["errors"][0]
    assert error["resource"] == "events" and error["status"] == 403
    assert error["endpoint"] == "/api/v1/events?fieldSelector=reason=FailedScheduling"
    assert "forbidden" in error["message"]
    assert snapshot["objects"]["events"] == []
    assert _counts(snapshot)["pods"] == len(small["pods"])
    assert _counts(snapshot)["nodes"] == len(small["nodes"])
    assert len([r for r in served.requests if r.path == EVENTS]) == 1  # 403 is not retried


def test_500_on_the_second_page_of_pods_fails_pods_only(served, kubeconfig, small):
    served.inject(PODS, status=500, page=2)
    snapshot = collect(kubeconfig=str(kubeconfig), page_size=5, **FAST)

    assert [(e["resource"], e["status"]) for e in snapshot["errors"]] == [("pods", 500)]
    message = snapshot["errors"][0]["message"]
    assert "etcdserver" in message and "3 attempts" in message and "after 5 objects" in message
    assert snapshot["objects"]["pods"] == []  # never a partial pod list
    assert _counts(snapshot)["nodes"] == len(small["nodes"])
    assert _counts(snapshot)["jobs"] == len(small["jobs"])
    second_pages = [r for r in served.requests if r.path == PODS and r.query.get("continue")]
    assert len(second_pages) == 3


def test_transient_500s_are_retried(served, kubeconfig, small):
    served.inject(NODES, status=503, times=2)
    snapshot = collect(kubeconfig=str(kubeconfig), **FAST)
    assert snapshot["errors"] == []
    assert _counts(snapshot)["nodes"] == len(small["nodes"])
    assert len([r for r in served.requests if r.path == NODES]) == 3


def test_429_waits_for_retry_after_then_succeeds(served, kubeconfig, small):
    served.inject(NODES, status=429, retry_after="1", times=1)
    snapshot = collect(kubeconfig=str(kubeconfig), backoff=0.01)

    assert snapshot["errors"] == []
    assert _counts(snapshot)["nodes"] == len(small["nodes"])
    first, second = [r for r in served.requests if r.path == NODES]
    assert second.at - first.at >= 0.95


def test_410_on_a_continue_token_restarts_the_list_once(served, kubeconfig, small):
    served.inject(PODS, status=410, on_continue=True, times=1)
    snapshot = collect(kubeconfig=str(kubeconfig), page_size=6, **FAST)

    assert snapshot["errors"] == []
    assert _names(snapshot["objects"]["pods"]) == _names(small["pods"])  # no duplicates
    fresh_starts = [r for r in served.requests if r.path == PODS and not r.query.get("continue")]
    assert len(fresh_starts) == 2


def test_a_second_410_is_an_error(served, kubeconfig, small):
    served.inject(PODS, status=410, on_continue=True)
    snapshot = collect(kubeconfig=str(kubeconfig), page_size=6, **FAST)
    assert [(e["resource"], e["status"]) for e in snapshot["errors"]] == [("pods", 410)]
    assert _counts(snapshot)["nodes"] == len(small["nodes"])


def test_a_hanging_server_cannot_outlast_the_deadline(served, kubeconfig, small):
    served.inject(PODS, delay=60)
    started = time.monotonic()
    snapshot = collect(
        kubeconfig=str(kubeconfig),
        request_timeout=0.5,
        deadline=2.0,
        backoff=0.01,
        max_attempts=100,
    )
    elapsed = time.monotonic() - started

    assert elapsed < 4.0
    validate_snapshot(snapshot)
    assert _counts(snapshot)["nodes"] == len(small["nodes"])  # read before the hang
    failed = {e["resource"]: e for e in snapshot["errors"]}
    assert failed["pods"]["status"] is None
    message = failed["pods"]["message"]
    assert "timed out" in message.lower() or "deadline" in message
    # What comes after the deadline is reported, not silently empty.
    assert "kueueworkloads" in failed and "deadline" in failed["kueueworkloads"]["message"]


def test_truncated_json_is_an_error_for_that_resource(served, kubeconfig, small):
    served.inject(NODES, truncate=True)
    snapshot = collect(kubeconfig=str(kubeconfig), **FAST)

    assert [(e["resource"], e["status"]) for e in snapshot["errors"]] == [("nodes", None)]
    assert "invalid JSON" in snapshot["errors"][0]["message"]
    assert _counts(snapshot)["pods"] == len(small["pods"])


def test_a_dropped_connection_is_retried_then_reported(served, kubeconfig, small):
    served.inject("/apis/apps/v1/replicasets", drop=True, times=1)
    assert collect(kubeconfig=str(kubeconfig), **FAST)["errors"] == []

    served.inject("/apis/batch/v1/jobs", drop=True)
    snapshot = collect(kubeconfig=str(kubeconfig), **FAST)
    assert [(e["resource"], e["status"]) for e in snapshot["errors"]] == [("jobs", None)]
    assert _counts(snapshot)["replicasets"] == len(small["replicasets"])


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 400},
        {"status": 401},
        {"status": 403},
        {"status": 404},
        {"status": 409},
        {"status": 500},
        {"status": 503, "retry_after": "0"},
        {"truncate": True},
        {"drop": True},
        {"status": 429, "retry_after": "Wed, 21 Oct 2015 07:28:00 GMT"},
    ],
    ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()),
)
def test_no_api_failure_escapes_collect(served, kubeconfig, fault):
    paths = {
        NODES,
        PODS,
        EVENTS,
        "/api/v1/configmaps",
        "/apis/apps/v1/replicasets",
        "/apis/batch/v1/jobs",
        "/apis/nvidia.com/v1/clusterpolicies",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/kueue.x-k8s.io/v1beta2/workloads",
        "/apis/kueue.x-k8s.io/v1beta1/workloads",
        "/api/v1/namespaces/gpu-operator/configmaps/time-slicing-config",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/apis/batch/v1/cronjobs",
    }
    for path in paths:
        served.inject(path, **fault)
    snapshot = collect(kubeconfig=str(kubeconfig), backoff=0.01, max_attempts=2)

    validate_snapshot(snapshot)
    assert all(not items for items in snapshot["objects"].values())
    # Each resource is an error, (404 on an optional API) absent, or (403 on
    # an optional one the audit can judge without) forbidden.
    optional = {"clusterpolicies.nvidia.com": "clusterpolicies", "workloads.kueue.x-k8s.io": "kueueworkloads"}
    forbidden = {optional[f["resource"]] for f in snapshot["forbidden"]}
    accounted = {e["resource"] for e in snapshot["errors"]} | set(snapshot["absent"]) | forbidden
    assert accounted == set(OBJECT_KEYS)
    assert forbidden == ({"clusterpolicies", "kueueworkloads"} if fault.get("status") == 403 else set())
    if fault.get("status") == 404:  # "not installed" only for the optional APIs
        assert set(snapshot["absent"]) == {"clusterpolicies", "resourceclaims", "resourceslices", "kueueworkloads"}


# -- optional APIs and the ConfigMaps --------------------------------------------------------


def test_optional_apis_that_are_not_installed_are_absent_not_errors(apiserver, kubeconfig, small):
    for key in ("clusterpolicies", "resourceclaims", "resourceslices", "kueueworkloads"):
        del small[key]
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))

    assert snapshot["errors"] == []
    assert snapshot["absent"] == ["clusterpolicies", "resourceclaims", "resourceslices", "kueueworkloads"]
    assert _counts(snapshot)["pods"] == len(small["pods"])


def test_kueue_v1beta1_is_read_when_v1beta2_is_not_served(apiserver, kubeconfig, small):
    small["kueueworkloads"][0]["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    apiserver.load(small).serve_versions("kueue.x-k8s.io", ("v1beta1",))
    snapshot = collect(kubeconfig=str(kubeconfig))
    paths = apiserver.paths()
    assert snapshot["errors"] == [] and "kueueworkloads" not in snapshot["absent"]
    assert _names(snapshot["objects"]["kueueworkloads"]) == ["job-sweep-lr-4c7e1"]
    assert paths.index("/apis/kueue.x-k8s.io/v1beta2/workloads") < paths.index("/apis/kueue.x-k8s.io/v1beta1/workloads")


def test_configmap_data_is_only_downloaded_for_device_plugin_configs(served, kubeconfig):
    snapshot = collect(kubeconfig=str(kubeconfig))

    lists = [r for r in served.requests if r.path == "/api/v1/configmaps"]
    labelled = [r for r in lists if r.query.get("labelSelector")]
    names_only = [r for r in lists if not r.query.get("labelSelector")]
    assert [r.query["labelSelector"] for r in labelled] == ["app.kubernetes.io/name=nvidia-device-plugin"]
    assert names_only and all("as=PartialObjectMetadataList" in r.headers["accept"] for r in names_only)
    gets = [r.path for r in served.requests if r.verb == "get"]
    assert gets == ["/api/v1/namespaces/gpu-operator/configmaps/time-slicing-config"]
    assert "llm-serving-config" not in json.dumps(snapshot)


def test_the_configmap_a_clusterpolicy_names_is_read_from_the_operator_namespace(apiserver, kubeconfig, small):
    policy = small["clusterpolicies"][0]
    policy["spec"]["devicePlugin"]["config"] = {"name": "sharing", "default": "any"}
    policy["status"]["namespace"] = "nvidia-gpu-operator"
    small["configmaps"].append(
        {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "sharing", "namespace": "nvidia-gpu-operator"},
            "data": {"any": "version: v1\n"},
        }
    )
    small["configmaps"].append(
        {  # same name elsewhere: not the one
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "sharing", "namespace": "default"},
            "data": {"x": "y"},
        }
    )
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))

    found = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in snapshot["objects"]["configmaps"]}
    assert found == {("nvidia-gpu-operator", "sharing"), ("gpu-operator", "time-slicing-config")}


def test_a_missing_configmap_named_by_the_clusterpolicy_is_reported(apiserver, kubeconfig, small):
    small["clusterpolicies"][0]["spec"]["devicePlugin"]["config"] = {"name": "gone"}
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))
    assert snapshot["errors"] == [
        {
            "resource": "configmaps",
            "endpoint": "/api/v1/namespaces/gpu-operator/configmaps/gone",
            "status": 404,
            "message": 'configmaps "gone" not found',
        }
    ]


def test_a_configmap_mounted_by_a_device_plugin_pod_is_read(apiserver, kubeconfig, small):
    plugin = next(p for p in small["pods"] if p["metadata"]["name"].startswith("nvidia-device"))
    plugin["spec"]["volumes"].append({"name": "config", "configMap": {"name": "plugin-cfg"}})
    small["configmaps"].append(
        {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "plugin-cfg", "namespace": "gpu-operator"},
            "data": {"a": "b"},
        }
    )
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))
    assert "plugin-cfg" in _names(snapshot["objects"]["configmaps"])


# -- the owners of GPU pods ------------------------------------------------------------------

OWNER_LISTS = [
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/statefulsets",
    "/apis/apps/v1/daemonsets",
    "/apis/batch/v1/cronjobs",
]


def _owned_by(obj: dict[str, Any], api_version: str, kind: str, name: str) -> None:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    ]


def test_the_owners_of_gpu_pods_are_collected_with_one_list_per_kind(served, kubeconfig, small):
    snapshot = collect(kubeconfig=str(kubeconfig), page_size=100)

    validate_snapshot(snapshot)
    assert snapshot["errors"] == [] and snapshot["absent"] == []
    owners = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in snapshot["objects"]["workloads"]}
    # The tops of the GPU pods' chains (through ReplicaSets and the CronJob's
    # Job); not the operator's Deployment or DaemonSet, nor the idle StatefulSet.
    assert owners == {
        ("Deployment", "inference", "llm-serving"),
        ("Deployment", "inference", "rag-reranker"),
        ("Deployment", "inference", "whisper-asr"),
        ("Deployment", "ml-platform", "embedder"),
        ("Deployment", "ml-platform", "tts-api"),
        ("CronJob", "ml-platform", "nightly-embed"),
    }
    recorded = {o["metadata"]["name"]: o for o in small["deployments"] + small["cronjobs"]}
    for obj in snapshot["objects"]["workloads"]:
        assert obj == _without_managed_fields(recorded[obj["metadata"]["name"]])
    assert any("managedFields" in o["metadata"] for o in small["deployments"])
    lists = [r.path for r in served.requests if r.path in OWNER_LISTS]
    assert sorted(lists) == sorted(OWNER_LISTS)  # one list each, none repeated
    assert not [r for r in served.requests if r.path.startswith(("/apis/kubeflow", "/apis/jobset"))]


def test_list_items_without_a_kind_get_the_kind_of_their_list(apiserver, kubeconfig, small):
    for obj in small["deployments"]:  # as a real API server lists built-in kinds
        del obj["kind"], obj["apiVersion"]
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))
    assert {(o["apiVersion"], o["kind"]) for o in snapshot["objects"]["workloads"]} == {
        ("apps/v1", "Deployment"),
        ("batch/v1", "CronJob"),
    }


def test_custom_resources_that_own_gpu_pods_are_listed_once_at_their_version(apiserver, kubeconfig, small):
    # pretrain-7b's pod now belongs to a PyTorchJob, finetune-llama's Job to a JobSet
    # (whose API is not installed here).
    pod = next(p for p in small["pods"] if p["metadata"]["name"].startswith("pretrain-7b"))
    _owned_by(pod, "kubeflow.org/v1", "PyTorchJob", "pretrain-7b")
    job = next(j for j in small["jobs"] if j["metadata"]["name"] == "finetune-llama")
    _owned_by(job, "jobset.x-k8s.io/v1alpha2", "JobSet", "finetune-llama")
    small["pytorchjobs"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "research", "managedFields": [{"manager": "x"}]},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod["spec"]}}},
        }
        for name in ("pretrain-7b", "unrelated")
    ]
    apiserver.load(small)
    snapshot = collect(kubeconfig=str(kubeconfig))

    validate_snapshot(snapshot)
    assert snapshot["errors"] == []
    assert snapshot["absent"] == ["jobsets.jobset.x-k8s.io"]
    custom = [o for o in snapshot["objects"]["workloads"] if o["kind"] == "PyTorchJob"]
    assert [o["metadata"]["name"] for o in custom] == ["pretrain-7b"]
    assert "managedFields" not in custom[0]["metadata"]
    paths = apiserver.paths()
    assert paths.count("/apis/kubeflow.org/v1/pytorchjobs") == 1
    assert paths.count("/apis/jobset.x-k8s.io/v1alpha2/jobsets") == 1

    apiserver.requests.clear()
    apiserver.inject("/apis/kubeflow.org/v1/pytorchjobs", status=403)
    snapshot = collect(kubeconfig=str(kubeconfig), **FAST)
    # optional: forbidden is a warning naming the resource and what grants it, not an error
    validate_snapshot(snapshot)
    assert snapshot["errors"] == []
    assert [(f["resource"], f["endpoint"], f["status"]) for f in snapshot["forbidden"]] == [
        ("pytorchjobs.kubeflow.org", "/apis/kubeflow.org/v1/pytorchjobs", 403)
    ]
    assert "deploy/components/ml-operators" in snapshot["forbidden"][0]["note"]
    assert "pytorchjobs.kubeflow.org" not in snapshot["absent"]  # forbidden, not missing
    assert {o["kind"] for o in snapshot["objects"]["workloads"]} == {"Deployment", "CronJob"}


def test_a_snapshot_without_workloads_is_still_read(snapshot, tmp_path):
    del snapshot["objects"]["workloads"]  # written before the collector read owners
    path = tmp_path / "old.json"
    path.write_text(json.dumps(snapshot))
    assert "workloads" not in read_snapshot(path)["objects"]


# -- least privilege --------------------------------------------------------------------------


def _cluster_role() -> set[tuple[str, str, str]]:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    return granted


def test_every_request_is_a_read_that_deploy_rbac_grants_and_nothing_more(served, kubeconfig):
    granted = _cluster_role()
    assert not any("*" in part for grant in granted for part in grant)
    assert not any(resource == "secrets" for _, resource, _ in granted)
    assert {verb for _, _, verb in granted} <= {"get", "list"}

    collect(kubeconfig=str(kubeconfig), page_size=4)
    used = set()
    for request in served.requests:
        assert request.method == "GET"
        target = request.target()
        assert target is not None, request.path
        group, resource, _, _ = target
        assert resource != "secrets"
        used.add((group, resource, request.verb))
    assert used <= granted
    assert used == granted  # the role holds nothing the collector does not use


# -- configuration -------------------------------------------------------------------------


def test_kubeconfig_from_the_environment(served, kubeconfig, monkeypatch, small):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    snapshot = collect()
    assert _counts(snapshot)["nodes"] == len(small["nodes"])


def test_context_selects_the_cluster(served, tmp_path, small):
    config = json.loads(served.write_kubeconfig(tmp_path / "k").read_text())
    config["clusters"].append({"name": "other", "cluster": {"server": "http://127.0.0.1:9"}})
    config["contexts"].append({"name": "other", "context": {"cluster": "other", "user": "gpuaudit"}})
    config["current-context"] = "other"
    path = tmp_path / "multi"
    path.write_text(json.dumps(config))

    snapshot = collect(kubeconfig=str(path), context="fake-cluster")
    assert snapshot["cluster"] == {"server": served.url, "context": "fake-cluster"}
    assert _counts(snapshot)["nodes"] == len(small["nodes"])


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"),
        ({"context": "no-such-context"}, "no-such-context"),
        ({"in_cluster": True}, "in-cluster"),
    ],
)
def test_a_bad_configuration_raises_a_clear_error(kubeconfig, monkeypatch, kwargs, expected):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kwargs = dict(kwargs)
    if "context" in kwargs:
        kwargs["kubeconfig"] = str(kubeconfig)
    with pytest.raises(ClusterSourceError, match=expected):
        collect(**kwargs)


# -- recorded clusters from the traces ----------------------------------------------------------


def test_alibaba_cluster_is_collected_whole_over_http(apiserver, kubeconfig):
    if not alibaba.available():
        pytest.skip("alibaba-gpu-v2023 trace not present")
    cluster = alibaba.build()
    apiserver.load(cluster)
    started = time.monotonic()
    snapshot = collect(kubeconfig=str(kubeconfig))
    elapsed = time.monotonic() - started

    assert snapshot["errors"] == []
    assert _counts(snapshot)["nodes"] == 1213
    assert _counts(snapshot)["pods"] == len(cluster["pods"]) == 8152
    assert _counts(snapshot)["replicasets"] == len(cluster["replicasets"])
    assert _counts(snapshot)["jobs"] == len(cluster["jobs"])
    assert set(snapshot["absent"]) == {"clusterpolicies", "resourceclaims", "resourceslices", "kueueworkloads"}
    assert len([r for r in apiserver.requests if r.path == PODS]) == math.ceil(8152 / 500)
    assert elapsed < 30


def test_genai_cluster_is_collected(apiserver, kubeconfig):
    if not genai.available():
        pytest.skip("GenTD26 trace not present")
    apiserver.load(genai.build())
    snapshot = collect(kubeconfig=str(kubeconfig))
    assert snapshot["errors"] == []
    assert _counts(snapshot)["pods"] == 143 and _counts(snapshot)["nodes"] == 18


# -- snapshot files --------------------------------------------------------------------------


@pytest.fixture
def snapshot(served, kubeconfig) -> dict[str, Any]:
    return collect(kubeconfig=str(kubeconfig))


@pytest.mark.parametrize("name", ["snap.json", "snap.json.gz"])
def test_snapshot_round_trip(snapshot, tmp_path, name):
    snapshot["telemetry"] = {"source": "prometheus", "gpus": [{"node": "gpu-a100-0", "gpu": "0"}]}
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / name
    write_snapshot(snapshot, path)

    assert read_snapshot(path) == snapshot
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    assert [p.name for p in folder.iterdir()] == [name]  # no temp file left


def test_write_snapshot_replaces_atomically_and_keeps_the_old_file_on_failure(snapshot, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "snap.json"
    write_snapshot(snapshot, path)
    before = path.read_bytes()
    broken = dict(snapshot, telemetry={"bad": float("nan")})
    with pytest.raises(SnapshotError, match="JSON"):
        write_snapshot(broken, path)
    assert path.read_bytes() == before
    assert [p.name for p in folder.iterdir()] == ["snap.json"]


def _mutated(snapshot: dict[str, Any], change) -> dict[str, Any]:
    data = copy.deepcopy(snapshot)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("objects"), "'objects' is a required property"),
        (lambda d: d["objects"]["pods"].__setitem__(0, "not an object"), r"\$\.objects\.pods\[0\]"),
        (lambda d: d["objects"].pop("events"), "'events' is a required property"),
        (lambda d: d.__setitem__("kind", "PodList"), r"\$\.kind"),
        (lambda d: d["errors"].append({"resource": "pods"}), r"\$\.errors\[0\]"),
        (lambda d: d.__setitem__("telemetry", []), r"\$\.telemetry"),
        (lambda d: d.__setitem__("version", 2), "version 2 is newer"),
    ],
    ids=["no-objects", "pod-not-object", "no-events", "kind", "error-shape", "telemetry", "newer"],
)
def test_read_snapshot_rejects_bad_files_saying_what_is_wrong(snapshot, tmp_path, change, expected):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutated(snapshot, change)))
    with pytest.raises(SnapshotError, match=expected) as info:
        read_snapshot(path)
    assert str(path) in str(info.value)


def test_read_snapshot_rejects_unreadable_files(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        read_snapshot(tmp_path / "missing.json")
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"version": 1,\n "kind": ')
    with pytest.raises(SnapshotError, match=r"not valid JSON.*line 2"):
        read_snapshot(truncated)
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(gzip.compress(b'{"version": 1}')[:-6])
    with pytest.raises(SnapshotError, match="gzip"):
        read_snapshot(corrupt)
