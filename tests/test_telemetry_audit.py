"""Cluster + telemetry joined: the 143 real GenTD26 serving pods, recorded as
a cluster behind the stand-in API server (tests/apiserver.py) and as DCGM
series in a real Prometheus (tests/conftest_telemetry.py)."""

from __future__ import annotations

import json
import socket
from datetime import timezone

import pytest

from tests.clusters import genai
from tests.test_prometheus import _expected_from_csv, _verdict


@pytest.fixture
def genai_cluster(apiserver):
    if not genai.available():
        pytest.skip("GenTD26 data not present")
    return apiserver.load(genai.build())


def test_resident_idle_pods_agree_with_the_csv(run_cli, genai_cluster, kubeconfig, genai_prometheus):
    until = genai_prometheus.end.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    trace = genai_prometheus.trace
    step = int(trace.step)  # subquery steps land on the samples
    window = genai_prometheus.window_seconds()
    proc = run_cli(
        "audit",
        "--kubeconfig",
        str(kubeconfig),
        "--prometheus",
        genai_prometheus.url,
        "--window",
        f"{window}s",
        "--step",
        f"{step}s",
        "--until",
        until,
        "--format",
        "json",
        "--rules",
        "memory,allocation",
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    flagged = {f["evidence"]["pod"] for f in report["findings"] if f["rule"] == "GPA-ME-001"}
    # The verdict computed from the CSV files with plain Python (resident above
    # 1024 MiB while under 5% busy for at least half the window, coverage >= 0.5)
    csv = _expected_from_csv(trace.end - trace.shift, window, step)
    idle_by_csv = {pod for pod, w in csv.items() if _verdict(w["resident_idle_fraction"])}
    covered = {pod for pod, w in csv.items() if w["coverage"] >= 0.5}
    assert len(idle_by_csv) == 141
    assert flagged == idle_by_csv & covered
    # pods that lived less than half the window: reported as insufficient data, not judged
    skipped = " ".join(s["reason"] for s in report["skipped"] if s["rule"] == "GPA-ME-001")
    assert f"insufficient data for {143 - len(covered)} GPU pod(s)" in skipped
    telemetry = report["summary"]["telemetry"]
    assert telemetry["gpu_pods"] == 143 and telemetry["gpu_pods_with_data"] == 143
    assert telemetry["signal"] == "DCGM_FI_DEV_GPU_UTIL"
    assert telemetry["queries"] <= 15
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
    assert any(f["rule"] == "GPA-AL-001" for f in report["findings"])  # the rest still ran
