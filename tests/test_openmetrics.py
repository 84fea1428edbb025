"""`-o openmetrics`: the run's results as the real promtool and Prometheus'
own Python parser read them, and the same numbers as the capacity review."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpuaudit.model import AuditResult, Finding, InputError, Location, Resource
from gpuaudit.output import openmetrics
from tests.manifests import PINNED

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"  # carries its telemetry
# Label values a snapshot may carry: quotes, backslashes, newlines, braces, a
# closing label set, a fake sample and a fake # EOF.
HOSTILE = 'x"} 1\ngpuaudit_findings{rule="fake"} 9\n# EOF\n\\"{,}=\u202e'


def demo() -> dict:
    with gzip.open(DEMO) as handle:
        return json.load(handle)


def promtool_check(text: str) -> None:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (scripts/test.sh installs Debian's prometheus)")
    proc = subprocess.run([found, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def parsed(text: str) -> dict[str, list]:
    """Samples by family, from the OpenMetrics parser (strict: it rejects
    what is not OpenMetrics, # EOF included)."""
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def by_labels(samples: list, *keys: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for s in samples:
        out[tuple(s.labels.get(k, "") for k in keys)] += s.value
    return dict(out)


def by_label(samples: list, key: str) -> dict[str, float]:
    return {k: v for (k,), v in by_labels(samples, key).items()}


def test_audit_metrics_pass_promtool_and_agree_with_the_review(run_cli, tmp_path):
    proc = run_cli("audit", "--snapshot", str(DEMO), "-o", "openmetrics", "--format", f"json={tmp_path / 'a.json'}")
    assert proc.returncode == 1, proc.stderr  # the demo has high findings
    text = proc.stdout
    assert text.endswith("# EOF\n")
    promtool_check(text)
    families = parsed(text)
    audit = json.loads((tmp_path / "a.json").read_text())
    # every finding counted once, by rule, severity, category and namespace
    findings = families["gpuaudit_findings"]
    assert sum(s.value for s in findings) == len(audit["findings"])
    expected = defaultdict(int)
    for f in audit["findings"]:
        expected[(f["rule"], f["severity"], f["category"], f["resource"]["namespace"] or "")] += 1
    assert by_labels(findings, "rule", "severity", "category", "namespace") == expected
    assert [s.value for s in families["gpuaudit_run_partial"]] == [0]
    assert [s.labels for s in families["gpuaudit_build_info"]] == [{"version": __import__("gpuaudit").__version__}]
    assert families["gpuaudit_run_duration_seconds"][0].value > 0
    collected = datetime.fromisoformat(demo()["collected_at"].replace("Z", "+00:00"))
    assert [s.value for s in families["gpuaudit_snapshot_timestamp_seconds"]] == [collected.timestamp()]

    review = tmp_path / "review"
    proc = run_cli("report", "--snapshot", str(DEMO), "--out", str(review), "-o", f"openmetrics={review}/metrics.txt")
    assert proc.returncode == 0, proc.stderr
    report_text = (review / "metrics.txt").read_text()
    promtool_check(report_text)
    first = json.loads((review / "report.json").read_text())["first_screen"]
    gpus = first["gpus"]
    states = by_label(parsed(report_text)["gpuaudit_gpus"], "state")
    for state in ("active", "resident_idle", "idle", "no_data", "free"):
        assert states[state] == pytest.approx(gpus[state], abs=0.01), state
    allocated = parsed(report_text)["gpuaudit_allocated_gpus"]
    assert sum(s.value for s in allocated) == pytest.approx(gpus["allocated"], abs=0.01)
    assert sum(s.value for s in parsed(report_text)["gpuaudit_node_gpus"]) == gpus["total"]
    # the audit's metrics and the review's count GPUs the same way
    assert by_labels(families["gpuaudit_gpus"], "state", "namespace", "model") == pytest.approx(
        by_labels(parsed(report_text)["gpuaudit_gpus"], "state", "namespace", "model")
    )
    # pending GPUs by cause, as the review's scheduler section has them
    scheduler = json.loads((review / "report.json").read_text())["scheduler"]
    pending = by_label(parsed(report_text)["gpuaudit_pending_gpus"], "cause")
    assert pending == {c["cause"]: c["gpus"] for c in scheduler["by_cause"]}
    pods = by_label(parsed(report_text)["gpuaudit_pending_pods"], "cause")
    assert pods == {c["cause"]: c["pods"] for c in scheduler["by_cause"]}


def test_a_partial_run_says_so_and_leaves_unknown_counts_out(run_cli, tmp_path):
    snapshot = demo()
    snapshot["objects"]["pods"] = []  # what a collector that could not list them writes
    snapshot["errors"] = [
        {"resource": "pods", "endpoint": "/api/v1/pods", "status": 403, "message": "pods is forbidden"}
    ]
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(snapshot))
    proc = run_cli("audit", "--snapshot", str(path), "-o", "openmetrics")
    assert proc.returncode == 2, proc.stderr
    promtool_check(proc.stdout)
    families = parsed(proc.stdout)
    assert [s.value for s in families["gpuaudit_run_partial"]] == [1]
    # no pod was read: who holds GPUs and what waits is unknown, not zero
    assert families["gpuaudit_allocated_gpus"] == []
    assert families["gpuaudit_pending_gpus"] == []
    assert {s.labels["count"] for s in families["gpuaudit_gpus_unknown"]} == {"held", "free", "pending"}
    assert {s.labels["state"] for s in families["gpuaudit_gpus"]} == set()
    assert sum(s.value for s in families["gpuaudit_node_gpus"]) == 112  # the nodes were read


def test_hostile_label_values_are_escaped(run_cli, tmp_path):
    """Cluster text in a label (a GPU product label no catalogue knows, a
    namespace) cannot end the label set, add a sample or end the exposition."""
    snapshot = demo()
    node = snapshot["objects"]["nodes"][0]
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = HOSTILE
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(snapshot))
    proc = run_cli("audit", "--snapshot", str(path), "-o", "openmetrics")
    assert proc.returncode in (0, 1), proc.stderr
    promtool_check(proc.stdout)
    families = parsed(proc.stdout)
    assert HOSTILE in {s.labels["model"] for s in families["gpuaudit_node_gpus"]}
    assert all(s.labels.get("rule") != "fake" for s in families["gpuaudit_findings"])
    lines = proc.stdout.splitlines()
    assert lines.index("# EOF") == len(lines) - 1  # the one end, last

    # the renderer itself, on a finding and counts whose every label is hostile
    resource = Resource("v1", "Pod", HOSTILE, "p")
    finding = Finding(HOSTILE, "t", "high", HOSTILE, "m", resource, Location("f", 1, ""), {}, None)
    result = AuditResult(findings=[finding], errors=[InputError("f", None, "bad")])
    states = {
        "held": [{"namespace": HOSTILE, "model": HOSTILE, "state": "idle", "gpus": 1.5}],
        "nodes": [{"model": HOSTILE, "total": 8, "free": 2, "cordoned": 0}],
        "pending": [{"namespace": HOSTILE, "cause": HOSTILE, "pods": 1, "gpus": 4}],
        "unknown": [],
    }
    text = openmetrics.render(result, run={"finished_at": 1.7e9, "duration_seconds": 2.5}, gpu_states=states)
    promtool_check(text)
    families = parsed(text)
    [sample] = families["gpuaudit_findings"]
    assert sample.labels == {"rule": HOSTILE, "severity": "high", "category": HOSTILE, "namespace": HOSTILE}
    assert by_labels(families["gpuaudit_pending_gpus"], "namespace", "cause") == {(HOSTILE, HOSTILE): 4}
    assert [s.value for s in families["gpuaudit_run_partial"]] == [1]  # an input error
    assert [s.value for s in families["gpuaudit_run_timestamp_seconds"]] == [1.7e9]
    # the Pushgateway's text format carries the same samples
    promtool_check(openmetrics.render_text(result, gpu_states=states))


def test_a_manifest_check_writes_findings_without_gpu_counts(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", "-o", "openmetrics")
    assert proc.returncode == 1, proc.stderr
    promtool_check(proc.stdout)
    families = parsed(proc.stdout)
    assert any(s.labels["rule"] == "GPA-PL-001" for s in families["gpuaudit_findings"])
    assert "gpuaudit_gpus" not in families


def test_without_the_metrics_extra_the_format_names_it(tmp_path):
    """prometheus-client comes with gpuaudit[metrics]: an install without it
    says so (exit 2) rather than crash."""
    import sys

    (tmp_path / "pinned.yaml").write_text(PINNED)
    missing = "import sys; sys.modules['prometheus_client'] = None; from gpuaudit.cli.main import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", missing, "check", "pinned.yaml", "-o", "openmetrics"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "needs prometheus-client, which is not installed: pip install 'gpuaudit[metrics]'" in proc.stderr
