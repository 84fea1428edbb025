"""Cluster + telemetry joined: the 143 real GenTD26 serving pods, recorded as
a cluster behind the stand-in API server (tests/apiserver.py) and as DCGM
series in a real Prometheus (tests/conftest_telemetry.py)."""

from __future__ import annotations

import json
import socket
from datetime import timezone

import pytest

from tests.clusters import genai
from tests.test_prometheus import _per_sample_truth


@pytest.fixture
def genai_cluster(apiserver):
    if not genai.available():
        pytest.skip("GenTD26 data not present")
    return apiserver.load(genai.build())


def _pods_of(report, rule):
    return {pod for f in report["findings"] if f["rule"] == rule for pod in f["evidence"]["pods"]}


def test_resident_idle_pods_agree_with_the_csv(run_cli, genai_cluster, kubeconfig, genai_prometheus):
    """The verdicts, pod by pod, against a per-sample count straight from the
    CSV files (no lookback, no window: each pod's own samples). The window is
    the default week, six days longer than the trace: each pod is judged over
    its own life in it."""
    until = genai_prometheus.end.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    trace = genai_prometheus.trace
    step = int(trace.step)  # subquery steps land on the samples
    proc = run_cli(
        "audit",
        "--kubeconfig",
        str(kubeconfig),
        "--prometheus",
        genai_prometheus.url,
        "--window",
        "7d",
        "--step",
        f"{step}s",
        "--until",
        until,
        "--format",
        "json",
        "--rules",
        "memory,allocation,application",
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    truth = _per_sample_truth(trace.step)
    judged = {p for p, w in truth.items() if w["coverage"] >= 0.5 and w["span_seconds"] >= 3600}

    def resident_idle(w):
        return w["resident_idle_fraction"] is not None and w["resident_idle_fraction"] >= 0.5

    def never_used(w):
        return (
            w["resident_idle_fraction"] is not None and w["resident_idle_fraction"] >= 0.9 and w["compute_p95"] < 0.05
        )

    def mostly_idle(w):
        return resident_idle(w) and w["compute_mean"] < 0.1 and w["compute_p95"] < 0.5 and not never_used(w)

    high = {p for p in judged if never_used(truth[p])}
    medium = {p for p in judged if mostly_idle(truth[p])}
    bursty = {p for p, w in truth.items() if w["compute_p95"] >= 0.5}
    # Recorded: 143 pods, 10 lived under an hour; of the 133 judged, 15 are never
    # used (high), 96 resident at light use (medium); 19 of the 21 pods busy in
    # bursts (p95 of 50% or more) are resident-idle in half their samples, and
    # none of them is reported.
    assert (len(judged), len(high), len(medium), len(bursty)) == (133, 15, 96, 21)
    assert sum(1 for p in bursty if resident_idle(truth[p])) == 19
    assert _pods_of(report, "GPA-ME-003") == high
    assert _pods_of(report, "GPA-ME-001") == medium
    assert not bursty & (_pods_of(report, "GPA-ME-003") | _pods_of(report, "GPA-ME-001"))
    severity = {f["rule"]: f["severity"] for f in report["findings"]}
    assert severity["GPA-ME-003"] == "high" and severity["GPA-ME-001"] == "medium"
    # the evidence names the signal, the span judged and the samples counted
    some = next(f for f in report["findings"] if f["rule"] == "GPA-ME-001")
    assert "GPU_UTIL" in some["message"] and "samples" in some["message"]
    # pods that lived less than an hour: reported as insufficient data, not judged
    skipped = " ".join(s["reason"] for s in report["skipped"] if s["rule"] == "GPA-ME-001")
    assert f"insufficient data for {143 - len(judged)} GPU pod(s)" in skipped
    telemetry = report["summary"]["telemetry"]
    assert telemetry["gpu_pods"] == 143 and telemetry["gpu_pods_with_data"] == 143
    assert telemetry["signal"] == "DCGM_FI_DEV_GPU_UTIL"
    # 12 for the whole window; the week's subqueries read in day parts: one
    # count per part (8) and 7 queries per part that holds the trace (1 or 2)
    assert telemetry["queries"] <= 12 - 5 + 8 + 7 * 2
    # no demand signal in this telemetry: never "starved", it is insufficient data
    assert not _pods_of(report, "GPA-AP-201")
    # the whole GPUs these pods hold at low activity carry their idle GPU-hours
    idle = [f for f in report["findings"] if f["rule"] == "GPA-AL-201"]
    assert idle and all(f["evidence"]["telemetry.idle_gpu_hours"] > 0 for f in idle)


def test_prometheus_down_skips_telemetry_rules_with_the_reason(run_cli, genai_cluster, kubeconfig):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli(
        "audit", "--kubeconfig", str(kubeconfig), "--prometheus", f"http://127.0.0.1:{port}", "--format", "json"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    reasons = {s["rule"]: s["reason"] for s in report["skipped"]}
    assert "telemetry unavailable" in reasons["GPA-ME-001"]
    assert "idle" not in " ".join(f["message"] for f in report["findings"])
    # The rest still ran: the manifest rules judged the pods (GPA-AL-001 ran,
    # and is silent: a serving image whose model is named nowhere is "model
    # unknown", no ground to advise sharing).
    assert "GPA-AL-001" not in reasons and "GPA-AP-001" not in reasons
    assert report["findings"]
