"""The review at cluster scale (issue 35, items 6-10), each claim on a
snapshot small enough to check by hand, through the real `gpuaudit report`:

- actions cover the idle money: each workload holding idle GPUs gets the
  action that frees the most (consolidate, scale to zero when idle, stop,
  release, ask, a fix patch), with its USD, owner and how, and the review
  says how much the actions leave;
- hardware demand and the gap respect taints, selectors, GPU count, CPU and
  memory: pods no node could hold are not shortage, and free GPUs behind a
  taint the waiting pods do not tolerate are not subtracted;
- the gate: teams without telemetry read unknown, stale telemetry is
  flagged, one GPU in a hundred with a PCIe series does not pass the
  application step;
- the fleet view's telemetry-coverage column.

Expected numbers are worked out here from the objects the test writes, not
read back from an earlier run."""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
PRICE = 2.5
HOURS = 730
NOW = "2026-11-27T09:00:00Z"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
LLM_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}
EMPTY = ("replicasets", "jobs", "configmaps", "clusterpolicies", "resourceclaims", "resourceslices", "kueueworkloads")
MODELS = {"H100-80GB": "NVIDIA-H100-80GB-HBM3", "A100-80GB": "NVIDIA-A100-SXM4-80GB", "L4-24GB": "NVIDIA-L4"}


def _node(name: str, model: str, gpus: int, *, taints: list[dict] | None = None, memory: str = "1000Gi") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": MODELS[model],
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {"cpu": "96", "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "96", "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(
    name: str,
    gpus: int,
    *,
    team: str = "ml",
    node: str | None = None,
    model: str | None = None,
    tolerations: tuple[dict, ...] = (GPU_TOLERATION,),
    memory: str = "16Gi",
    owner: tuple[str, str] | None = None,
) -> dict:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/ml/server:1",
                "resources": {
                    "requests": {"cpu": "2", "memory": memory, "nvidia.com/gpu": str(gpus)},
                    "limits": {"memory": memory, "nvidia.com/gpu": str(gpus)},
                },
            }
        ],
        "tolerations": list(tolerations),
    }
    if model:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": MODELS[model]}
    if node:
        spec["nodeName"] = node
    metadata: dict[str, Any] = {"name": name, "namespace": team, "labels": {"app": name}}
    if owner:
        group = "batch/v1" if owner[0] == "Job" else "apps/v1"
        metadata["ownerReferences"] = [{"apiVersion": group, "kind": owner[0], "name": owner[1], "controller": True}]
    running = {
        "phase": "Running",
        "startTime": "2026-11-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": running if node else {"phase": "Pending"},
    }


def _short(pod: dict, message: str) -> dict:
    meta = pod["metadata"]
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": meta["name"] + ".1", "namespace": meta["namespace"]},
        "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"]},
        "reason": "FailedScheduling",
        "message": message,
        "lastTimestamp": NOW,
    }


def _snapshot(nodes: list[dict], pods: list[dict], events: list[dict], telemetry: dict | None = None) -> dict:
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": NOW,
        "cluster": {"context": "scale-test", "server": "https://scale.example:6443"},
        "objects": {
            "nodes": nodes,
            "pods": pods,
            "events": events,
            **{key: [] for key in EMPTY},
        },
        "absent": [],
        "errors": [],
        "telemetry": telemetry,
    }


def _report(run_cli, tmp_path: Path, snapshot: dict, name: str = "r", *extra: str) -> dict:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(snapshot))
    out = tmp_path / name
    proc = run_cli(
        "report", "--snapshot", str(path), "--out", str(out), "--no-record", "--gpu-hour-price", str(PRICE), *extra
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads((out / "report.json").read_text())


# --- a tiny scheduler, written for this test: which nodes admit a pod --------------


def _memory(text: str) -> float:
    units = {"Gi": 2**30, "Mi": 2**20}
    for unit, size in units.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * size
    return float(text)


def _tolerated(pod: dict, taint: dict) -> bool:
    return any(
        t.get("key") == taint["key"]
        and t.get("effect") == taint["effect"]
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        for t in pod["spec"].get("tolerations") or []
    )


def _admits(node: dict, pod: dict) -> bool:
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
        return False
    if not all(_tolerated(pod, t) for t in node["spec"]["taints"]):
        return False
    asked = pod["spec"]["containers"][0]["resources"]["requests"]
    allocatable = node["status"]["allocatable"]
    return int(asked["nvidia.com/gpu"]) <= int(allocatable["nvidia.com/gpu"]) and _memory(asked["memory"]) <= _memory(
        allocatable["memory"]
    )


# --- 8. demand and the gap ------------------------------------------------------------


def _demand_cluster() -> tuple[list[dict], list[dict], list[dict]]:
    """Free H100s behind `dedicated=llm:NoSchedule`, an H100 pod that does
    not tolerate it, an A100 pod with two free A100s it may use, an L4 pod
    asking for more memory than any L4 node has, and one pod of no model
    that tolerates the llm taint."""
    nodes = [
        _node("h100-llm", "H100-80GB", 8, taints=[{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}]),
        _node("h100-0", "H100-80GB", 8, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        _node("a100-0", "A100-80GB", 8),
        _node("l4-0", "L4-24GB", 1, memory="62Gi"),
    ]
    bound = [
        _pod("train-h100", 8, node="h100-0", model="H100-80GB"),
        _pod("train-a100", 6, node="a100-0", model="A100-80GB"),
        _pod("embed-l4", 1, node="l4-0", model="L4-24GB"),
    ]
    waiting = [
        _pod("wait-h100", 4, model="H100-80GB"),  # the llm taint keeps it off the free H100s
        _pod("wait-a100", 4, model="A100-80GB"),  # 2 of the 4 free on a100-0
        _pod("wait-l4", 1, model="L4-24GB", memory="96Gi"),  # no L4 node has 96 GiB
        _pod("wait-any", 1, tolerations=(GPU_TOLERATION, LLM_TOLERATION)),
    ]
    selector = "didn't match Pod's node affinity/selector"
    events = [
        _short(waiting[0], f"0/4 nodes are available: 1 Insufficient nvidia.com/gpu, "
                           f"1 node(s) had untolerated taint(s), 2 node(s) {selector}."),
        _short(waiting[1], f"0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) {selector}."),
        _short(waiting[2], f"0/4 nodes are available: 1 Insufficient memory, 1 Insufficient nvidia.com/gpu, "
                           f"3 node(s) {selector}."),
        _short(waiting[3], "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
    ]  # fmt: skip
    return nodes, [*bound, *waiting], events


def test_demand_and_gap_respect_taints_selectors_and_memory(run_cli, tmp_path: Path) -> None:
    nodes, pods, events = _demand_cluster()
    report = _report(run_cli, tmp_path, _snapshot(nodes, pods, events))
    # worked out here: each waiting pod against the nodes that admit it
    held: dict[str, int] = {}
    for p in pods:
        if p["spec"].get("nodeName"):
            held[p["spec"]["nodeName"]] = held.get(p["spec"]["nodeName"], 0) + int(
                p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
            )
    free = {
        n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"]) - held.get(n["metadata"]["name"], 0)
        for n in nodes
    }
    waiting = [p for p in pods if not p["spec"].get("nodeName")]
    fits = {p["metadata"]["name"]: [n["metadata"]["name"] for n in nodes if _admits(n, p)] for p in waiting}
    assert fits == {
        "wait-h100": ["h100-0"],
        "wait-a100": ["a100-0"],
        "wait-l4": [],
        "wait-any": ["h100-llm", "h100-0", "a100-0", "l4-0"],
    }
    demand = [p for p in waiting if fits[p["metadata"]["name"]]]
    asked = {
        p["metadata"]["name"]: int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        for p in waiting
    }
    hardware = report["scheduler"]["hardware_demand"]
    assert (hardware["pods"], hardware["gpus"]) == (len(demand), sum(asked[p["metadata"]["name"]] for p in demand))
    # the L4 pod that fits no node is listed as such, not as shortage
    not_shortage = {x["cause"]: x for x in hardware["excluded"]}
    assert not_shortage["allocation"]["pods"] == 1 and "CPU or memory" in not_shortage["allocation"]["reason"]
    # the gap, model-specific pods first, each on its own nodes' free GPUs
    spare = dict(free)
    expected: dict[str, dict[str, int]] = {}
    for name in ("wait-h100", "wait-a100", "wait-any"):
        want = asked[name]
        took = 0
        for node in sorted(fits[name], key=lambda n: -spare[n]):
            step = min(spare[node], want - took)
            spare[node] -= step
            took += step
        pod = next(p for p in waiting if p["metadata"]["name"] == name)
        model = next(
            (m for m, product in MODELS.items() if product in json.dumps(pod["spec"].get("nodeSelector"))), "any model"
        )
        expected[model] = {"demand": want, "free_now": took, "gap": want - took}
    rows = {
        r["model"]: {k: r[k] for k in ("demand", "free_now", "gap")} for r in report["gate"]["verdict"]["per_model"]
    }
    assert rows == expected
    assert rows["H100-80GB"] == {"demand": 4, "free_now": 0, "gap": 4}  # the 8 free behind the llm taint are not its
    assert report["first_screen"]["hardware_needed"]["gap"] == sum(r["gap"] for r in expected.values())


def test_free_gpus_no_waiting_pod_may_use_are_named_not_subtracted(run_cli, tmp_path: Path) -> None:
    nodes, pods, events = _demand_cluster()
    pods = [p for p in pods if p["metadata"]["name"] != "wait-any"]
    events = [e for e in events if e["involvedObject"]["name"] != "wait-any"]
    report = _report(run_cli, tmp_path, _snapshot(nodes, pods, events))
    verdict = report["gate"]["verdict"]
    assert {r["model"]: r["free_now"] for r in verdict["per_model"]} == {"A100-80GB": 2, "H100-80GB": 0}
    assert {"model": "H100-80GB", "free": 8} in verdict["free_unusable"]
    assert "8 H100" not in json.dumps(verdict["per_model"])


# --- 6. actions that cover the idle money ---------------------------------------------


def _gpu_row(node: str, gpu: int, pod: dict, *, compute: float, p95: float, resident_idle: float) -> dict:
    meta = pod["metadata"]
    return {
        "node": node,
        "gpu": str(gpu),
        "uuid": f"GPU-{node}-{gpu}",
        "model": "NVIDIA A100 SXM4 80GB",
        "namespace": meta["namespace"],
        "pod": meta["name"],
        "container": "main",
        "compute_mean": compute,
        "compute_p95": p95,
        "compute_max": min(p95 * 1.2, 1.0),
        "fb_used_mean_mib": 30000.0 if resident_idle else 500.0,
        "fb_used_max_mib": 32000.0 if resident_idle else 600.0,
        "fb_total_mib": 81920.0,
        "resident_fraction": 1.0 if resident_idle else 0.0,
        "resident_idle_fraction": resident_idle,
        "coverage": 0.99,
    }


def _telemetry(rows: list[dict], *, end: str = NOW) -> dict:
    from datetime import timedelta

    from gpuaudit.kube.timestamps import parse_time
    from gpuaudit.model import telemetry as tm

    finish = parse_time(end)
    assert finish is not None
    gpu_rows = [
        tm.gpu_row({k: r[k] for k in tm.GPU_KEYS if k in r}, {k: v for k, v in r.items() if k not in tm.GPU_KEYS})
        for r in rows
    ]
    return tm.result(
        source="prometheus",
        endpoint="http://prometheus.test:9090",
        window=tm.window(finish - timedelta(days=7), finish, 60),
        signals={"compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "memory": "DCGM_FI_DEV_FB_USED"},
        params={"resident_fb_mib": 1024, "idle_compute": 0.05},
        queries=9,
        gpu_rows=gpu_rows,
        errors=[],
    )


def _idle_cluster() -> dict:
    """team serve: a 6-replica Deployment whose p95 load adds up to 1.4 GPUs
    (4 replicas idle with a model resident); team lab: a notebook idle all
    week; team batch: a Job with one of its two pods idle; team ops: a
    Deployment with no telemetry at all."""
    nodes = [_node(f"a100-{i}", "A100-80GB", 8) for i in range(2)]
    serve = [_pod(f"serve-{i}", 1, team="serve", node="a100-0", owner=("Deployment", "serve")) for i in range(6)]
    lab = [_pod("notebook-0", 1, team="lab", node="a100-0", owner=("StatefulSet", "notebook"))]
    batch = [_pod(f"train-{i}", 1, team="batch", node="a100-1", owner=("Job", "train")) for i in range(2)]
    ops = [_pod(f"ops-{i}", 1, team="ops", node="a100-1", owner=("Deployment", "ops")) for i in range(3)]
    rows = []
    gpu = 0
    for i, pod in enumerate(serve):
        busy = i < 2
        rows.append(
            _gpu_row(
                "a100-0",
                gpu,
                pod,
                compute=0.5 if busy else 0.02,
                p95=0.6 if busy else 0.05,
                resident_idle=0.0 if busy else 0.9,
            )
        )
        gpu += 1
    rows.append(_gpu_row("a100-0", gpu, lab[0], compute=0.0, p95=0.0, resident_idle=0.0))
    rows.append(_gpu_row("a100-1", 0, batch[0], compute=0.8, p95=0.95, resident_idle=0.0))
    rows.append(_gpu_row("a100-1", 1, batch[1], compute=0.01, p95=0.02, resident_idle=0.0))
    return _snapshot(nodes, [*serve, *lab, *batch, *ops], [], _telemetry(rows))  # fmt: skip


def test_actions_cover_the_idle_money_and_say_what_is_left(run_cli, tmp_path: Path) -> None:
    report = _report(run_cli, tmp_path, _idle_cluster())
    month = PRICE * HOURS
    # idle: 4 resident-idle serve replicas, the notebook, one Job pod; ops unmeasured
    idle_usd = round((4 + 1 + 1) * month)
    cover = report["first_screen"]["actions_cover"]
    assert cover["idle_usd_per_month"] == idle_usd == report["first_screen"]["cost"]["allocated_idle_per_month"]
    actions = {a["workload"]["name"]: a for a in report["actions"]}
    assert set(actions) == {"serve", "notebook", "train"}  # ops: no telemetry, no idle claimed
    # serve: p95 load 2 x 0.6 + 4 x 0.05 = 1.4 GPUs -> 2 replicas of 1 GPU; 4 removed
    load = 2 * 0.6 + 4 * 0.05
    keep = math.ceil(load)
    serve = actions["serve"]
    assert serve["kind"] == "consolidate" and serve["team"] == "serve"
    assert serve["gpus"] == 6 - keep and serve["usd_per_month"] == round((6 - keep) * month)
    assert f"--replicas={keep}" in serve["how"][0] and "kubectl -n serve scale deployment/serve" in serve["how"][0]
    notebook = actions["notebook"]
    assert notebook["kind"] == "stop" and notebook["usd_per_month"] == round(month)
    assert "ask team lab" in notebook["how"][0]
    train = actions["train"]  # a Job half idle: a named manual action for its owner
    assert train["kind"] == "ask" and train["usd_per_month"] == round(month) and "ask team batch" in train["how"][0]
    covered = sum(min(a["usd_per_month"], a["idle_usd_per_month"]) for a in actions.values())
    assert cover["covered_usd_per_month"] == covered == idle_usd - (4 - (6 - keep)) * month
    assert cover["left_usd_per_month"] == idle_usd - covered
    # the page says it, with the money column first so a phone shows it
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'id="actions-cover"' in html
    assert f"{covered:,.0f} USD</strong> of {idle_usd:,.0f} USD idle per month" in html
    head = html[html.index('<table id="actions">') :].split("</thead>")[0]
    assert head.index("USD / month") < head.index("Action")


def test_teams_without_telemetry_read_unknown_not_idle_zero(run_cli, tmp_path: Path) -> None:
    report = _report(run_cli, tmp_path, _idle_cluster())
    teams = {t["team"]: t for t in report["showback"]}
    assert teams["ops"]["coverage"] == 0 and teams["ops"]["gpus_idle"] is None
    assert teams["ops"]["idle_cost_per_month"] is None and teams["ops"]["cost_per_month"] == round(3 * PRICE * HOURS)
    assert teams["serve"]["gpus_idle"] == 4 and teams["serve"]["coverage"] == 1
    html = (tmp_path / "r" / "report.html").read_text()
    row = html[html.index('<table id="showback">') :].split("<td>ops</td>")[1].split("</tr>")[0]
    assert row.count("unknown") == 3  # idle cost, idle GPUs, efficiency
    assert teams["ops"]["efficiency"] is None and teams["serve"]["efficiency"] == round(2 / 6, 3)


def test_stale_telemetry_is_flagged_with_its_dates(run_cli, tmp_path: Path) -> None:
    snapshot = _idle_cluster()
    fresh = _report(run_cli, tmp_path, snapshot, "fresh")
    assert fresh["first_screen"]["coverage"]["stale"] is False
    old = copy.deepcopy(snapshot)
    rows = [{**r} for r in old["telemetry"]["gpus"]]
    old["telemetry"] = _telemetry(rows, end="2026-09-16T09:00:00Z")  # 72 days before the snapshot
    report = _report(run_cli, tmp_path, old, "stale")
    coverage = report["first_screen"]["coverage"]
    assert coverage["stale"] is True and coverage["lag_hours"] == 72 * 24
    assert coverage["window"]["start"].startswith("2026-09-09") and coverage["window"]["end"].startswith("2026-09-16")
    residency = {s["step"]: s for s in report["gate"]["steps"]}["residency"]
    assert residency["status"] == "partial" and "72 days before the snapshot" in residency["evidence"]
    html = (tmp_path / "stale" / "report.html").read_text()
    assert "window 2026-09-09 – 2026-09-16" in html and "Stale: the telemetry window ended 72 days" in html


# --- 9. the gate on the demo: 1 of 103 GPUs with PCIe --------------------------------


def test_one_gpu_of_the_demo_with_pcie_does_not_open_the_gate(run_cli, tmp_path: Path) -> None:
    demo = json.loads(gzip.decompress(DEMO.read_bytes()))
    plain = _report(run_cli, tmp_path, demo, "plain")
    one = copy.deepcopy(demo)
    one["telemetry"]["signals"]["pcie"] = "DCGM_FI_PROF_PCIE_TX_BYTES"
    gpu_rows = one["telemetry"]["gpus"]
    assert len({(r["node"], r["gpu"]) for r in gpu_rows}) == 103
    first = next(r for r in one["telemetry"]["pods"] if r.get("gpus") == 1 and r["coverage"] >= 0.9)
    first.update(pcie_tx_mean_bps=2.0e9, pcie_rx_mean_bps=1.0e9)
    for row in gpu_rows:  # the pod's one GPU row says the same
        if (row["namespace"], row["pod"]) == (first["namespace"], first["pod"]):
            row.update(pcie_tx_mean_bps=2.0e9, pcie_rx_mean_bps=1.0e9)
    report = _report(run_cli, tmp_path, one, "one")
    allocated = report["first_screen"]["gpus"]["allocated"]
    step = {s["step"]: s for s in report["gate"]["steps"]}["application"]
    assert step["status"] == "partial"
    assert f"pcie covers {1 / allocated:.0%} of allocated GPUs" in step["evidence"]
    assert report["first_screen"]["gate"]["decision"] == plain["first_screen"]["gate"]["decision"] == "hold"


# --- 10. the fleet's telemetry coverage ------------------------------------------------


def test_fleet_view_has_a_telemetry_coverage_column(run_cli, tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    folder.mkdir()
    a = _idle_cluster()
    b = copy.deepcopy(a)
    b["cluster"] = {"context": "other", "server": "https://other.example:6443"}
    b["telemetry"] = None
    for name, snapshot in (("a", a), ("b", b)):
        (folder / f"{name}.json").write_text(json.dumps(snapshot))
    out = tmp_path / "fleet"
    proc = run_cli("report", "--snapshot", str(folder), "--out", str(out), "--no-record", "--gpu-hour-price", "2.5")
    assert proc.returncode in (0, 1), proc.stderr
    fleet = json.loads((out / "report.json").read_text())
    rows = {c["cluster"]: c["telemetry"]["coverage"] for c in fleet["clusters"]}
    measured = 6 + 1 + 2  # serve, notebook, train measured
    allocated = measured + 3  # ops: no telemetry; cluster b: none at all
    assert rows == {"scale-test": round(measured / allocated, 3), "other": 0}
    assert fleet["totals"]["telemetry_coverage"] == round(measured / (2 * allocated), 3)
    assert "Telemetry covers" in (out / "report.html").read_text()


# --- 7. a cause's fix is one gpuaudit writes -------------------------------------------


def test_every_fix_a_cause_names_writes_patches_and_declined_ones_name_a_manual_step(run_cli, tmp_path: Path) -> None:
    """On the demo: each root cause that points at `gpuaudit fix` is run as
    written (SNAPSHOT the demo) and must write patches for the rule; a
    remediation the planner declines for every finding (enable-mig always
    does) points at no command, only at the planner's manual step."""
    report = _report(run_cli, tmp_path, json.loads(gzip.decompress(DEMO.read_bytes())), "demo")
    rules = [r for c in report["root_causes"] for r in c["rules"] if r["remediation"]]
    assert {r["rule"] for r in rules if r["fix"]} and {r["rule"] for r in rules if not r["fix"]}
    for rule in rules:
        out = tmp_path / f"fix-{rule['rule']}"
        if rule["fix"]:
            args = rule["fix"].split()[2:]  # after `gpuaudit fix`
            args = [str(DEMO) if a == "SNAPSHOT" else str(out) if a == "overlays/gpuaudit" else a for a in args]
            proc = run_cli("fix", *args)
            assert proc.returncode in (0, 1), proc.stderr
            written = int(re.search(r"wrote \S+: (\d+) patch", proc.stderr + proc.stdout).group(1))
            assert written > 0, (rule["rule"], proc.stderr)
            assert rule["patched"] > 0
        else:
            assert rule["patched"] == 0 and rule["manual"], rule["rule"]
    mig = next(r for r in rules if r["remediation"] == "enable-mig")
    # the planner's own manual step: how to partition, or why a node stays whole
    assert mig["fix"] is None and ("nvidia.com/mig.config" in mig["manual"] or "MIG" in mig["manual"])
    # the largest idle cause says how many of its idle GPUs the patches reach
    top = report["first_screen"]["biggest_causes"][0]
    assert 0 <= top["gpus_idle_patched"] <= top["gpus_idle"]
