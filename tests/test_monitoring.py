"""`gpuaudit monitoring`: the recording rules, evaluated by Prometheus itself
over the recorded GenTD26 trace and kube-state-metrics series of the same
recorded cluster, agree with `gpuaudit audit` on that data; the alerts fire
for the resident-idle pods and not for the bursty ones; promtool accepts
the files; every dashboard panel's query returns data."""

from __future__ import annotations

import copy
import json
import math
import subprocess
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.report import summary
from gpuaudit.report.holders import Thresholds, collect, pod_fact_index
from gpuaudit.report.monitoring_dashboard import panel_queries
from gpuaudit.sources.user_config import load_config
from tests import genai_trace as genai_series
from tests.clusters import genai
from tests.monitoring_prometheus import (
    RecordedPrometheus,
    activity_cluster,
    activity_families,
    ksm_families,
    level_files,
    pending_pod,
)
from tests.prometheus_server import tools_available

pytestmark = pytest.mark.skipif(not tools_available(), reason="promtool/prometheus not installed")


def _generate(run_cli, out: Path, *args: str) -> Path:
    proc = run_cli("monitoring", "rules", "--out", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return out / "gpuaudit-rules.yaml"


@pytest.fixture(scope="module")
def genai_recorded(tmp_path_factory, genai_trace):
    """GenTD26 + kube-state-metrics of its recorded cluster (and one pending
    pod) in a Prometheus, with both rule levels evaluated over the window."""
    if not genai.available():
        pytest.skip("GenTD26 data not present")
    trace = genai_trace
    step = int(trace.step)  # rule evaluations land on the samples
    end = trace.end
    window = int(trace.end - trace.start) + 720
    work = tmp_path_factory.mktemp("genai-rules")
    cluster = genai.build()
    cluster["pods"].append(pending_pod())
    first = end - window - 3600
    times = [first + i * step for i in range(int((end - first) // step) + 1)]
    server = RecordedPrometheus(work).load([*genai_series.families(trace), *ksm_families(cluster, times)])
    from gpuaudit.cli.main import main as _  # noqa: F401  (the CLI is importable)

    rules_dir = work / "rules"
    proc = subprocess.run(
        [
            "gpuaudit",
            "monitoring",
            "rules",
            "--out",
            str(rules_dir),
            "--window",
            f"{window}s",
            "--interval",
            f"{step}s",
            "--class-interval",
            f"{step}s",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    gpu_level, availability_level = level_files(rules_dir / "gpuaudit-rules.yaml", work)
    # evaluations from the multiples of the step, where the samples are
    server.record(gpu_level, (end - window) // step * step - step, end, step)
    server.record(availability_level, end - 3 * step, end, step)
    yield {
        "server": server,
        "cluster": cluster,
        "end": end,
        "window": window,
        "step": step,
        "rules": rules_dir / "gpuaudit-rules.yaml",
    }
    server.stop()


def _audit(run_cli, kubeconfig, url, end, window, step, tmp_path, *, raw: bool = False):
    """The audit's JSON and snapshot; ``raw``: from the raw series only, never
    the rules' recorded ones (telemetry.params.recorded_series: 0)."""
    if raw:
        (tmp_path / ".gpuaudit.yaml").write_text("telemetry:\n  params:\n    recorded_series: 0\n")
    until = datetime.fromtimestamp(end, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    snapshot = tmp_path / "snapshot.json"
    proc = run_cli(
        "audit",
        "--kubeconfig",
        str(kubeconfig),
        "--prometheus",
        url,
        "--window",
        f"{window}s",
        "--step",
        f"{step}s",
        "--until",
        until,
        "--format",
        "json",
        "--save-snapshot",
        str(snapshot),
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # whole: not partial
    return proc, json.loads(proc.stdout), json.loads(snapshot.read_text())


def _review(snapshot: dict):
    """The review's inventory of the audit's snapshot, as `gpuaudit report` builds it."""
    config = load_config(None)
    rules, _ = load_policy(config)
    result = audit_cluster(snapshot, config, rules)
    return collect(result.state, pod_fact_index(result.subjects), Thresholds.from_rules(result.rules))


def test_recording_rules_agree_with_the_audit(run_cli, apiserver, kubeconfig, genai_recorded, tmp_path):
    rec = genai_recorded
    server, end = rec["server"], rec["end"]
    apiserver.load(copy.deepcopy(rec["cluster"]))
    # the audit from the raw series (its own subqueries): nothing shared with
    # the rules but the samples
    _proc, _report, snapshot = _audit(
        run_cli, kubeconfig, server.url, end, rec["window"], rec["step"], tmp_path, raw=True
    )
    assert snapshot["telemetry"]["subqueries"] == "whole", snapshot["telemetry"]["errors"]
    inventory = _review(snapshot)

    want: dict[tuple[str, str], float] = defaultdict(float)
    for holder in inventory.holders:
        want[(holder.namespace, holder.state)] += holder.gpus
    got = {
        (s["metric"]["namespace"], s["metric"]["state"]): float(s["value"][1])
        for s in server.query("sum by (namespace, state) (gpuaudit:pod_gpus:sum)", end)
    }
    got = {k: v for k, v in got.items() if v}
    # Recorded: the 143 serving pods of GenTD26 hold 143 GPUs, most with a
    # model resident at idle.
    assert dict(want) == got, (dict(want), got)
    assert sum(got.values()) == 143 and got[("genai", "resident_idle")] >= 100

    pods_want = {h.pod for h in inventory.holders if h.state == "resident_idle"}
    pods_got = {s["metric"]["pod"] for s in server.query('gpuaudit:pod_gpus:sum{state="resident_idle"}', end)}
    assert pods_got == pods_want

    counts = summary.gpu_counts(inventory)
    free = sum(float(s["value"][1]) for s in server.query("gpuaudit:node_gpus_free:sum", end))
    assert free == counts["free"] == 1, got
    pending = server.query("gpuaudit:namespace_gpus_pending:sum", end)
    assert [(s["metric"]["namespace"], s["metric"]["reason"], float(s["value"][1])) for s in pending] == [
        ("research", "unschedulable", 2.0)
    ]
    assert sum(w.gpus for w in inventory.waiting) == 2


def test_recorded_series_made_otherwise_are_not_used(genai_recorded):
    """The audit reads the recorded series only when they were made as it
    would judge: another threshold, or another step, and it reads the raw
    series, saying why."""
    from datetime import datetime, timezone

    from gpuaudit.sources.prometheus import query_telemetry

    rec = genai_recorded
    kw = {"window_seconds": rec["window"], "end": datetime.fromtimestamp(rec["end"], timezone.utc)}
    same = query_telemetry(rec["server"].url, step_seconds=rec["step"], **kw)
    assert same["subqueries"] == "recorded" and same["errors"] == []
    other = query_telemetry(rec["server"].url, step_seconds=rec["step"], params={"resident_fb_mib": 2048}, **kw)
    assert other["subqueries"] == "whole"
    assert [e["message"] for e in other["errors"]] == [
        "warning: gpuaudit's recorded series not used: the rules were made with resident_fb_mib 1024, "
        "the audit uses 2048"
    ]
    coarser = query_telemetry(rec["server"].url, step_seconds=2 * rec["step"], **kw)
    assert coarser["subqueries"] == "whole" and "evaluated every" in coarser["errors"][0]["message"]
    # read either way, the residency of every pod is the same
    raw = {
        p["pod"]: p
        for p in query_telemetry(rec["server"].url, step_seconds=rec["step"], params={"recorded_series": 0}, **kw)[
            "pods"
        ]
    }
    assert len(raw) == len(same["pods"]) == 143
    # The rules are evaluated at their own instants (promtool's, here, restart
    # with each 2-hour block; Prometheus' at an offset of its own), each taking
    # the newest fresh sample: the same samples, but at the window's edges one
    # may fall on the other side, and around a gap in the trace a sample may be
    # taken one step later. Within a few samples, then, and the same verdicts.
    step = rec["step"]
    worst = defaultdict(float)
    for pod in same["pods"]:
        want = raw[pod["pod"]]
        worst["samples"] = max(worst["samples"], abs(pod["samples"] - want["samples"]))
        for field in ("first_seen", "last_seen"):
            worst[field] = max(worst[field], abs(pod[field] - want[field]) / step)
        for field in ("coverage", "resident_fraction", "resident_idle_fraction"):
            worst[field] = max(worst[field], abs(pod[field] - want[field]) * want["samples"])
        assert (pod["resident_idle_fraction"] >= 0.5) == (want["resident_idle_fraction"] >= 0.5), pod["pod"]
    # in samples (or steps): recorded 2026-12-02, every field within 3
    assert max(worst.values()) <= 3, dict(worst)


def _alert_exprs(rules_file: Path) -> dict[str, str]:
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}


def test_alerts_fire_for_resident_idle_pods_not_bursty_ones(run_cli, apiserver, kubeconfig, genai_recorded, tmp_path):
    rec = genai_recorded
    server, end = rec["server"], rec["end"]
    apiserver.load(copy.deepcopy(rec["cluster"]))
    _, report, snapshot = _audit(run_cli, kubeconfig, server.url, end, rec["window"], rec["step"], tmp_path)

    def pods_of(*rules):
        return {p for f in report["findings"] if f["rule"] in rules for p in f["evidence"]["pods"]}

    alerts = _alert_exprs(rec["rules"])

    def firing(name):
        return {s["metric"]["pod"] for s in server.query(alerts[name], end)}

    flagged = pods_of("GPA-ME-001", "GPA-ME-003")
    assert len(flagged) == 111  # as the 25 h window of test_telemetry_audit finds
    assert firing("GPUModelResidentIdle") == flagged
    assert firing("GPUModelResidentNeverUsed") == pods_of("GPA-ME-003")
    assert firing("GPUWholeAllocatedIdle") == pods_of("GPA-AL-201")
    pods = {p["pod"]: p for p in snapshot["telemetry"]["pods"]}
    bursty = {name for name, p in pods.items() if (p.get("compute_p95") or 0) >= 0.5}
    assert len(bursty) == 21 and not bursty & firing("GPUModelResidentIdle")
    # free GPUs (node 17) while a GPU pod waits: a placement problem
    placement = server.query(alerts["GPUPodsPendingWhileFree"], end)
    assert [(s["metric"]["gpu_model"], float(s["value"][1])) for s in placement] == [("NVIDIA-A100-SXM4-80GB", 1.0)]
    assert not server.query(alerts["GPUWorkWaitingOnHost"], end)  # the trace has no PCIe series


def test_promtool_checks_the_generated_files(run_cli, tmp_path):
    rules = _generate(run_cli, tmp_path)
    proc = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 18 rules found" in proc.stdout
    operator = yaml.safe_load((tmp_path / "gpuaudit-prometheusrule.yaml").read_text())
    assert operator["kind"] == "PrometheusRule"
    assert operator["spec"]["groups"] == yaml.safe_load(rules.read_text())["groups"]


def test_thresholds_come_from_the_rule_params_and_config(run_cli, tmp_path):
    config = tmp_path / ".gpuaudit.yaml"
    config.write_text(
        "params:\n  GPA-ME-001: {min_resident_idle_fraction: 0.7, min_span_hours: 3}\n"
        "telemetry:\n  params: {resident_fb_mib: 2048, idle_compute: 0.02}\n"
    )
    rules = yaml.safe_load(_generate(run_cli, tmp_path / "out", "--config", str(config)).read_text())
    by_name = {r.get("alert") or r["record"]: r for g in rules["groups"] for r in g["rules"]}
    assert "> bool 2048" in by_name["gpuaudit:gpu_resident_idle:bool"]["expr"]
    assert "< bool 0.02" in by_name["gpuaudit:gpu_resident_idle:bool"]["expr"]
    assert by_name["gpuaudit:gpu_rules:info"]["labels"]["resident_fb_mib"] == "2048"
    assert ">= 0.7)" in by_name["GPUModelResidentIdle"]["expr"] or ">= 0.7" in json.dumps(rules)
    assert by_name["GPUModelResidentIdle"]["for"] == "3h"
    assert "gpuaudit rules explain GPA-ME-001" in by_name["GPUModelResidentIdle"]["annotations"]["runbook"]


# --- promtool test rules: a resident-idle pod fires, a bursty one does not ---------------


def _annotations(rule: dict, labels: dict, value: str) -> dict:
    out = {}
    for key, text in rule["annotations"].items():
        for name, label in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", label)
        out[key] = text.replace("{{ $value }}", value)
    return out


def test_promtool_rule_tests_resident_idle_fires_bursty_does_not(run_cli, tmp_path):
    rules_file = _generate(run_cli, tmp_path, "--window", "2h", "--interval", "1m", "--class-interval", "1m")
    rules = {r.get("alert"): r for g in yaml.safe_load(rules_file.read_text())["groups"] for r in g["rules"]}
    minutes = 200

    def dcgm(pod: str, values: str) -> dict:
        return {
            "series": (
                f'{{__name__="DCGM_FI_DEV_GPU_UTIL", gpu="0", UUID="GPU-{pod}", modelName="NVIDIA H100", '
                f'Hostname="node-a", exported_namespace="ml", exported_pod="{pod}", '
                f'exported_container="main", namespace="gpu-operator", pod="dcgm-exporter-x"}}'
            ),
            "values": values,
        }

    def fb(pod: str, mib: int) -> dict:
        return {
            "series": (
                f'{{__name__="DCGM_FI_DEV_FB_USED", gpu="0", UUID="GPU-{pod}", modelName="NVIDIA H100", '
                f'Hostname="node-a", exported_namespace="ml", exported_pod="{pod}", '
                f'exported_container="main", namespace="gpu-operator", pod="dcgm-exporter-x"}}'
            ),
            "values": f"{mib}+0x{minutes}",
        }

    def ksm(pod: str) -> list[dict]:
        return [
            {
                "series": (
                    f'kube_pod_container_resource_requests{{namespace="ml", pod="{pod}", container="main", '
                    f'node="node-a", resource="nvidia_com_gpu", unit="integer"}}'
                ),
                "values": f"1+0x{minutes}",
            },
            {
                "series": f'kube_pod_status_phase{{namespace="ml", pod="{pod}", phase="Running"}}',
                "values": f"1+0x{minutes}",
            },
        ]

    bursty = " ".join(["90 0"] * (minutes // 2))  # busy every other minute: p95 90%, mean 45%
    series = [
        dcgm("resident-idle", f"0+0x{minutes}"),
        fb("resident-idle", 30000),
        dcgm("bursty", bursty),
        fb("bursty", 30000),
        *ksm("resident-idle"),
        *ksm("bursty"),
        {
            "series": 'kube_node_status_allocatable{node="node-a", resource="nvidia_com_gpu", unit="integer"}',
            "values": f"8+0x{minutes}",
        },
        {
            "series": 'kube_node_labels{node="node-a", label_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3"}',
            "values": f"1+0x{minutes}",
        },
        {"series": 'kube_node_spec_unschedulable{node="node-a"}', "values": f"0+0x{minutes}"},
    ]
    labels = {
        "namespace": "ml",
        "pod": "resident-idle",
        "node": "node-a",
        "gpu_model": "NVIDIA-H100-80GB-HBM3",
        "state": "resident_idle",
    }
    alert = rules["GPUModelResidentIdle"]
    expected = {**labels, "severity": alert["labels"]["severity"], "gpuaudit_rule": "GPA-ME-001"}
    tests = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    # before the pod has been resident-idle for `for:` (GPA-ME-001's min_span_hours)
                    {"eval_time": "50m", "alertname": "GPUModelResidentIdle", "exp_alerts": []},
                    {
                        "eval_time": "180m",
                        "alertname": "GPUModelResidentIdle",
                        "exp_alerts": [{"exp_labels": expected, "exp_annotations": _annotations(alert, labels, "1")}],
                    },
                    {"eval_time": "180m", "alertname": "GPUWorkWaitingOnHost", "exp_alerts": []},
                ],
                "promql_expr_test": [
                    {
                        "expr": "sum by (pod, state) (gpuaudit:pod_gpus:sum)",
                        "eval_time": "180m",
                        "exp_samples": [
                            {"labels": '{pod="bursty", state="active"}', "value": 1},
                            {"labels": '{pod="resident-idle", state="resident_idle"}', "value": 1},
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "rules.test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# --- the dashboard ---------------------------------------------------------------------------


def test_dashboard_matches_the_grafana_sdk_types(run_cli, tmp_path):
    """The JSON read into grafana-foundation-sdk's Dashboard and written back
    is the same JSON: no field the SDK's types do not know, none misnamed."""
    sdk = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
    proc = run_cli("monitoring", "dashboard", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    model = json.loads((tmp_path / "gpuaudit-dashboard.json").read_text())
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    back = json.loads(json.dumps(sdk.Dashboard.from_json(model), cls=JSONEncoder))
    assert _lost(model, back) == []  # the SDK adds its defaults; it may drop or change nothing
    rows = [p for p in model["panels"] if p["type"] == "row"]
    assert [r["title"].split(":")[0] for r in rows] == ["Availability", "Activity"]
    # the rows never mix: availability reads gpuaudit's series, activity the exporter's
    row_of = {}
    current = None
    for panel in model["panels"]:
        if panel["type"] == "row":
            current = panel["title"].split(":")[0]
            continue
        row_of[panel["title"]] = current
    for title, expr in panel_queries(model):
        if row_of[title] == "Availability":
            assert ("gpuaudit:" in expr or "gpuaudit_" in expr) and "DCGM_" not in expr, title
        else:
            assert "DCGM_" in expr and "gpuaudit" not in expr, title
            assert title.startswith("DCGM_"), title  # named as the signal is
    names = {v["name"] for v in model["templating"]["list"]}
    assert {"cluster", "namespace", "gpu_model"} <= names


def _lost(ours, theirs, path="") -> list[str]:
    """Where ``theirs`` lacks or changes what ``ours`` says."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [path]
        return [
            p
            for k, v in ours.items()
            for p in ([f"{path}/{k}"] if k not in theirs else _lost(v, theirs[k], f"{path}/{k}"))
        ]
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return [path]
        return [p for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) for p in _lost(a, b, f"{path}/{i}")]
    return [] if ours == theirs else [path]


def test_every_dashboard_panel_returns_data(run_cli, tmp_path_factory):
    work = tmp_path_factory.mktemp("dashboard")
    end = math.floor(datetime.now(timezone.utc).timestamp() / 60) * 60 - 3600
    times = [end - (180 - i) * 60 for i in range(181)]
    server = RecordedPrometheus(work).load([*activity_families(end), *ksm_families(activity_cluster(), times)])
    try:
        rules = _generate(run_cli, work / "rules", "--window", "2h", "--interval", "1m", "--class-interval", "1m")
        gpu_level, availability_level = level_files(rules, work)
        server.record(gpu_level, end - 7200 - 120, end, 60)
        server.record(availability_level, end - 180, end, 60)
        proc = run_cli("monitoring", "dashboard", "--out", str(work / "dash"))
        assert proc.returncode == 0, proc.stderr
        model = json.loads((work / "dash" / "gpuaudit-dashboard.json").read_text())
        queries = panel_queries(model)
        assert len(queries) >= 15
        empty = []
        for title, expr in queries:
            text = expr.replace("$cluster", ".*").replace("$namespace", ".*").replace("$gpu_model", ".*")
            if not server.query(text, end):
                empty.append(title)
        assert empty == []
        # and the alert of work waiting on the host fires for the loader only
        alerts = _alert_exprs(rules)
        waiting = {s["metric"]["pod"] for s in server.query(alerts["GPUWorkWaitingOnHost"], end)}
        assert waiting == {"loader"}
    finally:
        server.stop()
