"""Telemetry that scales: a long window's subqueries read in day parts and
combined exactly, and a query that fails makes the audit partial (exit 2,
`partial` names it), never silently thinner. Against the real Prometheus
holding the GenTD26 trace (tests/conftest_telemetry.py)."""

from __future__ import annotations

import json
from datetime import timezone

import pytest

from gpuaudit.sources.prometheus import query_telemetry
from tests.clusters import genai
from tests.prometheus_server import Reply, StubServer

FIELDS = ("samples", "first_seen", "last_seen", "coverage", "resident_fraction", "resident_idle_fraction")


def test_a_week_in_day_parts_equals_the_whole_week(genai_prometheus):
    """Counts add up, first/last are min/max, shares are sums over counts: the
    parts give each pod exactly the whole window's values."""
    step = int(genai_prometheus.trace.step)
    kw = {"window_seconds": 7 * 86400, "end": genai_prometheus.end, "step_seconds": step}
    parts = query_telemetry(genai_prometheus.url, **kw)
    whole = query_telemetry(genai_prometheus.url, params={"max_subquery_seconds": 0}, **kw)
    assert parts["errors"] == whole["errors"] == []
    # day parts of whole steps (86,355 s at 57 s): 8 in a week; the parts
    # without a sample (before the 23-hour trace) are not asked
    asked, of = parts["subqueries"].removesuffix(" parts").split(" of ")
    assert of == "8" and 1 <= int(asked) <= 2 and whole["subqueries"] == "whole"
    # one count per part, then 5 subquery fields, the averages in 2 forms,
    # per part asked: in place of 5 queries
    assert parts["queries"] - whole["queries"] == 8 + 7 * int(asked) - 5
    got = {p["pod"]: p for p in parts["pods"]}
    want = {p["pod"]: p for p in whole["pods"]}
    assert len(got) == len(want) == 143
    for pod, values in want.items():
        for field in FIELDS:
            assert got[pod][field] == pytest.approx(values[field], rel=1e-12, abs=1e-12), (pod, field)


@pytest.fixture
def genai_cluster(apiserver):
    if not genai.available():
        pytest.skip("GenTD26 data not present")
    return apiserver.load(genai.build())


def test_a_lost_residency_query_makes_the_audit_partial(run_cli, genai_cluster, kubeconfig, genai_prometheus):
    """The issue's run: the residency query times out. Before, the audit said
    "0 resident-idle" and exited 1 as if whole; now it exits 2 and names it."""
    trace = genai_prometheus.trace

    def lose_residency(request):
        # resident_idle_fraction is the query that compares compute with `< bool`
        if "< bool" in request.query:
            return Reply(503, b'{"status":"error","errorType":"timeout","error":"query timed out"}')
        return None

    until = genai_prometheus.end.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    with StubServer(lose_residency, upstream=genai_prometheus.url) as stub:
        proc = run_cli(
            "audit",
            "--kubeconfig",
            str(kubeconfig),
            "--prometheus",
            stub.url,
            "--window",
            "7d",
            "--step",
            f"{int(trace.step)}s",
            "--until",
            until,
            "--format",
            "json",
            "--rules",
            "memory,allocation",
        )
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["cluster"]["partial"] == ["telemetry query resident_idle_fraction"]
    errors = [e for e in report["errors"] if "resident_idle_fraction" in e["message"]]
    assert errors and all(e["level"] == "error" and "partial" in e["message"] for e in errors)
    # the residency rules say "insufficient data" for every pod, never "not idle"
    assert not [f for f in report["findings"] if f["rule"] in ("GPA-ME-001", "GPA-ME-003")]
    skipped = " ".join(s["reason"] for s in report["skipped"] if s["rule"] == "GPA-ME-001")
    assert "insufficient data for 143 GPU pod(s)" in skipped
