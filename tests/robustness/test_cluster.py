"""A failing cluster and a hostile Prometheus, through the real `gpuaudit`
process where it matters: every fault gives a clear, labelled partial
result, an exit code of 2, and what could be read is still judged.

One fault at a time, at the collector, is tested in tests/test_cluster_source.py
(403, 410 on a continue token, 429 with Retry-After, 500 on page 2, truncated
JSON, dropped connections, a hang against the overall deadline, every status
on every path); Prometheus down, slow, HTTP and query errors, NaN and empty
series against a real Prometheus in tests/test_prometheus.py and
tests/test_telemetry_audit.py. This module adds them all at once through the
CLI, a hanging API server through the CLI, snapshot files that are not what
they claim, and Prometheus answers no real Prometheus gives.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources.prometheus import query_telemetry
from tests.prometheus_server import Reply, StubServer, free_port
from tests.robustness.hostile import SMALL_CLUSTER, cluster_seed

EXAMPLES = int(os.environ.get("GPUAUDIT_FUZZ_EXAMPLES", "150"))


@pytest.fixture
def small(apiserver):
    return apiserver.load(json.loads(SMALL_CLUSTER.read_text()))


def audit(run_cli, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("audit", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def failed_resources(report: dict) -> dict[str, str]:
    """resource -> message of the 'could not read' errors."""
    found = {}
    for e in report["errors"]:
        if e["message"].startswith("could not read "):
            found[e["message"].split()[3].rstrip(":")] = e["message"]
    return found


def test_many_api_faults_at_once_give_a_labelled_partial_audit(run_cli, small, kubeconfig):
    small.inject("/api/v1/events", status=403)
    small.inject("/api/v1/nodes", status=429, retry_after="1", times=1)  # waited out
    small.inject("/apis/apps/v1/replicasets", truncate=True)
    small.inject("/api/v1/pods", status=410, on_continue=True, times=1)  # list restarted
    small.inject("/apis/batch/v1/jobs", status=500)
    small.inject("/apis/resource.k8s.io/v1/resourceclaims", drop=True)

    code, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig), "--page-size", "3", "--request-timeout", "5")

    assert code == 2
    failed = failed_resources(report)
    assert set(failed) >= {"events", "replicasets", "jobs", "resourceclaims"}
    assert "nodes" not in failed and "pods" not in failed  # recovered
    assert "HTTP 403" in failed["events"] and "HTTP 500" in failed["jobs"]
    assert all("this audit is partial" in m for m in failed.values())
    assert report["summary"]["cluster"]["gpu_nodes"] > 0  # nodes and pods were still judged
    assert any(f["rule"] == "GPA-PL-001" or f["category"] == "allocation" for f in report["findings"])


def test_a_hanging_api_server_cannot_hold_the_cli_past_its_deadline(run_cli, small, kubeconfig):
    """run_cli's own timeout (120 s) is the bound; --deadline makes it 15 s,
    far below the 60 s hang, yet long enough for a loaded 2-core machine to
    start the CLI and list the nodes first (3 s was not)."""
    small.inject("/api/v1/pods", delay=60)
    started = time.monotonic()
    code, report, _ = audit(run_cli, "--kubeconfig", str(kubeconfig), "--request-timeout", "5", "--deadline", "15")
    assert time.monotonic() - started < 45  # the deadline, not the hang, ended it
    assert code == 2
    failed = failed_resources(report)
    assert "pods" in failed
    assert report["summary"]["cluster"]["gpu_nodes"] > 0  # nodes came before the hang


def test_an_unreachable_or_unauthorised_cluster_is_a_clear_usage_error(run_cli, tmp_path):
    missing = run_cli("audit", "--kubeconfig", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    port = free_port()
    (tmp_path / "kc.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    code, report, _ = audit(
        run_cli,
        "--kubeconfig",
        str(tmp_path / "kc.yaml"),
        "--request-timeout",
        "1",
        "--deadline",
        "5",
    )
    assert code == 2
    assert len(failed_resources(report)) >= 5  # every resource names why it is missing


# --- snapshot files that lie ---------------------------------------------------------------


def _snapshot_with(change) -> dict:
    snapshot = copy.deepcopy(cluster_seed())
    change(snapshot)
    return snapshot


def _junk_telemetry(snapshot: dict) -> None:
    t = snapshot["telemetry"]
    t["window"] = {"seconds": "a week", "start": 5}
    t["signals"] = ["compute"]
    t["gpus"] = [
        None,
        7,
        "row",
        {"pod": ["x"], "coverage": "NaN", "compute_mean": 1e308, "gpus": float("inf"), "extra": [1]},
        *t["gpus"],
    ]
    t["pods"] = {"not": "a list"}
    t["errors"] = ["boom", {"query": {"a": 1}}]


def _junk_objects(snapshot: dict) -> None:
    pods = snapshot["objects"]["pods"]
    pods[0]["spec"] = "not a spec"
    pods[1]["status"] = {
        "containerStatuses": [{"restartCount": "many", "state": "waiting"}],
        "conditions": "Ready",
        "startTime": "2026-01-01T00:00:00",
    }
    pods[2]["metadata"]["ownerReferences"] = [{"kind": ["ReplicaSet"], "name": None}, "x"]
    snapshot["objects"]["nodes"][0]["metadata"]["labels"] = ["gpu"]
    snapshot["objects"]["nodes"][1]["status"] = {"capacity": {"nvidia.com/gpu": "-8"}}
    snapshot["objects"]["events"].append(
        {"metadata": {}, "reason": "FailedScheduling", "involvedObject": "pod", "message": None}
    )
    snapshot["objects"]["resourceclaims"][0]["status"] = True
    snapshot["objects"]["kueueworkloads"][0]["status"] = {"conditions": [{"type": ["Admitted"]}]}


@pytest.mark.parametrize("change", [_junk_telemetry, _junk_objects], ids=["telemetry", "objects"])
def test_a_snapshot_with_junk_inside_is_audited_not_crashed_on(run_cli, tmp_path, change):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(_snapshot_with(change)))
    for fmt in ("json", "text", "sarif", "junit"):
        proc = run_cli("audit", "--snapshot", str(path), "--format", fmt)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 1, 2)
        assert proc.stdout
    code, report, _ = audit(run_cli, "--snapshot", str(path))
    assert code in (1, 2)  # findings (and, for junk in telemetry, its warnings): judged
    assert report["summary"]["cluster"]["gpu_nodes"] > 0


# --- Prometheus answers no real Prometheus gives ---------------------------------------

_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
)
_LABELS = {
    "Hostname": "gpu-a100-0",
    "gpu": "0",
    "UUID": "GPU-0",
    "namespace": "ml",
    "pod": "p-0",
    "container": "c",
    "modelName": "NVIDIA A100-SXM4-80GB",
}


def _probe_answer() -> bytes:
    result = [{"metric": {"__name__": m}, "value": [0, "4"]} for m in _METRICS]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


_numbers = st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-1", "0", "0.5", "abc", "", None, 1e308, [], {}])
_items = st.one_of(
    st.fixed_dictionaries({"metric": st.just(_LABELS), "value": st.tuples(st.just(0), _numbers)}),
    st.fixed_dictionaries({"metric": st.sampled_from([None, [], "x", {"pod": ["p"]}, _LABELS])}),
    st.fixed_dictionaries({"metric": st.just(_LABELS), "value": st.sampled_from([None, [], [0], "1"])}),
    st.sampled_from([None, 1, "x", []]),
)
_bodies = st.one_of(
    st.builds(
        lambda items: {"status": "success", "data": {"resultType": "vector", "result": items}},
        st.lists(_items, max_size=4),
    ),
    st.sampled_from(
        [
            {"status": "success", "data": {"resultType": "matrix", "result": []}},
            {"status": "success", "data": {"resultType": "vector", "result": {}}},
            {"status": "success", "data": None},
            {"status": "success"},
            {"status": "error", "errorType": "bad_data", "error": "\x1b[31mno"},
            {"status": "success", "warnings": [None, 5], "data": {"resultType": "vector", "result": []}},
            {"status": "success", "warnings": 5, "data": {"resultType": "vector", "result": []}},
            [],
            "ok",
            None,
        ]
    ),
)
_replies = st.one_of(
    _bodies.map(lambda body: Reply(200, json.dumps(body).encode())),
    st.sampled_from(
        [
            Reply(200, b"<html>proxy login</html>", content_type="text/html"),
            Reply(200, b'{"status": "success", "data": {"resultType": "vec'),
            Reply(200, b"\xff\xfe\x00garbage"),
            Reply(204, b""),
            Reply(302, b""),
            Reply(500, b"upstream exploded"),
            Reply(429, b"slow down"),
        ]
    ),
)


@settings(
    max_examples=max(20, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_replies, min_size=1, max_size=6))
def test_any_prometheus_answer_gives_finite_telemetry_or_a_reason(replies):
    """Whatever the server says, the telemetry source either returns an
    aggregate a snapshot can hold (strict JSON: no NaN, no infinity) or says
    why telemetry is unavailable; it never raises anything else."""
    answers = iter(replies * 50)

    def handler(request):
        if "count(last_over_time(" in request.query:
            return Reply(200, _probe_answer())
        return next(answers)

    with StubServer(handler) as stub:
        try:
            aggregate = query_telemetry(stub.url, window_seconds=3600, timeout=2)
        except TelemetryUnavailable as exc:
            assert str(exc)
            return
    json.dumps(aggregate, allow_nan=False)
    for row in [*aggregate["gpus"], *aggregate["pods"]]:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value), (key, value)


def test_the_audit_survives_a_prometheus_that_answers_nonsense(run_cli, tmp_path):
    snapshot = copy.deepcopy(cluster_seed())
    snapshot["telemetry"] = None
    (tmp_path / "snap.json").write_text(json.dumps(snapshot))
    nonsense = Reply(
        200,
        json.dumps(
            {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": _LABELS, "value": [0, "NaN"]}, {"metric": _LABELS, "value": [0, "+Inf"]}],
                },
            }
        ).encode(),
    )

    def handler(request):
        if "count(last_over_time(" in request.query:
            return Reply(200, _probe_answer())
        return nonsense

    with StubServer(handler) as stub:
        code, report, _ = audit(run_cli, "--snapshot", str(tmp_path / "snap.json"), "--prometheus", stub.url)
    assert code in (1, 2)
    telemetry = report["summary"]["telemetry"]
    assert telemetry is None or telemetry["gpu_pods_with_data"] <= telemetry["gpu_pods"]
    # NaN and infinity are missing data: never a verdict of idle
    assert not any(f["rule"] in ("GPA-ME-001", "GPA-AL-201") for f in report["findings"])
    assert report["summary"]["cluster"]["gpu_nodes"] > 0
