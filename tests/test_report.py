"""`gpuaudit report` end to end, as a process, on the demo snapshot.

The numbers in report.json are recomputed here straight from the snapshot's
raw objects and the findings of `gpuaudit audit --format json` (not from the
report's own modules); report.md and report.html must carry the same numbers;
a real headless Chromium renders report.html (skipped when not installed).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaudit.sources.snapshot import write_snapshot

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
PRICES = ("--gpu-hour-price", "2.5", "--gpu-hour-price", "H100-80GB=4.0")
SLICES_PER_GPU = 7  # the demo's MIG node is an A100: 1g slices are 1/7 of a GPU


def _param(rule_file: str, name: str) -> float:
    rule = yaml.safe_load((ROOT / "policies" / rule_file).read_text())
    return float(rule["params"][name]["default"])


ACTIVE = _param("allocation/idle-whole-gpus.yaml", "max_compute")
RESIDENT = _param("memory/resident-idle.yaml", "min_resident_idle_fraction")
RESIDENT_MEAN = _param("memory/resident-idle.yaml", "max_compute_mean")
RESIDENT_P95 = _param("memory/resident-idle.yaml", "max_compute_p95")
COVERAGE = _param("memory/resident-idle.yaml", "min_coverage")


def _snapshot(path: Path = DEMO) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _report(run_cli, tmp_path: Path, snapshot: Path = DEMO, *extra: str) -> tuple[Path, Any]:
    out = tmp_path / "out"
    proc = run_cli("report", "--snapshot", str(snapshot), *PRICES, "--out", str(out), *extra)
    return out, proc


# --- an independent reading of the snapshot ----------------------------------------


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        for name, value in merged.items():
            if name.startswith("nvidia.com/"):
                total[name] += float(value)
    return total


def _gpus_of(pod: dict[str, Any]) -> float:
    """Physical GPUs: whole GPUs count one; a MIG <g>g slice g/7 of one."""
    gpus = 0.0
    for name, count in _requests(pod).items():
        if name == "nvidia.com/gpu":
            gpus += count
        elif name.startswith("nvidia.com/mig-"):
            gpus += count * int(name.split("mig-")[1].split("g.")[0]) / SLICES_PER_GPU
    return gpus


class Reading:
    """What the demo snapshot says, computed without gpuaudit.report."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        objects = snapshot["objects"]
        self.nodes = {
            n["metadata"]["name"]: n
            for n in objects["nodes"]
            if any(k.startswith("nvidia.com/") for k in n["status"]["capacity"])
        }
        self.node_gpus = {
            name: float(n["metadata"]["labels"]["nvidia.com/gpu.count"]) for name, n in self.nodes.items()
        }
        rs_owner = {
            rs["metadata"]["name"]: rs["metadata"]["ownerReferences"][0]["name"] for rs in objects["replicasets"]
        }
        gpu_pods = [p for p in objects["pods"] if _requests(p)]
        self.bound = [p for p in gpu_pods if p["spec"].get("nodeName")]
        self.pending = [p for p in gpu_pods if not p["spec"].get("nodeName")]
        self.owner = {}
        for p in gpu_pods:
            ref = p["metadata"]["ownerReferences"][0]
            name = rs_owner.get(ref["name"], ref["name"]) if ref["kind"] == "ReplicaSet" else ref["name"]
            self.owner[(p["metadata"]["namespace"], p["metadata"]["name"])] = name
        self.events = {
            (e["involvedObject"]["namespace"], e["involvedObject"]["name"]): e["message"] for e in objects["events"]
        }
        rows = defaultdict(list)
        for row in snapshot["telemetry"]["gpus"]:
            if row["pod"]:
                rows[(row["namespace"], row["pod"])].append(row)
        self.state = {}
        for pod in self.bound:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.state[key] = self._classify(rows.get(key, []))
        self.telemetry = rows

    @staticmethod
    def _classify(rows: list[dict[str, Any]]) -> str:
        def mean(field: str) -> float | None:
            values = [r[field] for r in rows if r[field] is not None]
            return sum(values) / len(values) if values else None

        coverage = mean("coverage")
        if coverage is None or coverage < COVERAGE:
            return "no_data"
        p95 = max((r["compute_p95"] for r in rows if r["compute_p95"] is not None), default=None)
        busy_in_bursts = p95 is not None and p95 >= RESIDENT_P95
        idle_resident = (mean("resident_idle_fraction") or 0) >= RESIDENT and mean("compute_mean") < RESIDENT_MEAN
        if idle_resident and not busy_in_bursts:  # as GPA-ME-001/003 judge it: bursts are not idle
            return "resident_idle"
        return "active" if mean("compute_mean") >= ACTIVE else "idle"

    def key(self, pod: dict[str, Any]) -> tuple[str, str]:
        return pod["metadata"]["namespace"], pod["metadata"]["name"]

    def held(self, state: str | None = None) -> float:
        return sum(_gpus_of(p) for p in self.bound if state is None or self.state[self.key(p)] == state)

    def pending_cause(self, pod: dict[str, Any]) -> str:
        if pod["spec"].get("schedulingGates"):
            return "quota"
        message = self.events.get(self.key(pod), "")
        return "allocation" if "Insufficient nvidia.com/gpu" in message else "placement"

    def model(self, node: str) -> str:
        product = self.nodes[node]["metadata"]["labels"]["nvidia.com/gpu.product"]
        return "H100-80GB" if "H100" in product else product


@pytest.fixture(scope="module")
def demo() -> Reading:
    return Reading(_snapshot())


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory) -> dict[str, Any]:
    """report.json, report.md and the audit's findings for the demo snapshot."""
    work = tmp_path_factory.mktemp("demo-report")
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    out = work / "out"
    report = subprocess.run(
        [exe, "report", "--snapshot", str(DEMO), *PRICES, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    audit = subprocess.run(
        [exe, "audit", "--snapshot", str(DEMO), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=300,
    )
    assert audit.returncode in (0, 1), audit.stderr
    return {
        "json": json.loads((out / "report.json").read_text()),
        "md": (out / "report.md").read_text(),
        "html": out / "report.html",
        "findings": json.loads(audit.stdout)["findings"],
        "audit_summary": json.loads(audit.stdout)["summary"],
        "out": out,
    }


# --- the demo ------------------------------------------------------------------------


def test_demo_snapshot_is_what_the_script_generates(tmp_path: Path) -> None:
    fresh = tmp_path / "demo.json.gz"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_demo_snapshot.py"), "-o", str(fresh)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(gzip.decompress(fresh.read_bytes())) == _snapshot(), (
        "examples/demo-snapshot.json.gz is stale: run scripts/make_demo_snapshot.py"
    )


# --- numbers: report.json against the snapshot and the findings ------------------------


def test_the_audit_and_the_review_count_the_same_gpus(demo: Reading, demo_report: dict[str, Any]) -> None:
    """A platform engineer reads `gpuaudit audit`, leadership the review: both
    count physical GPUs, so a 1g MIG slice is a seventh of one, not one."""
    cluster = demo_report["audit_summary"]["cluster"]
    review = demo_report["json"]["first_screen"]["gpus"]
    assert cluster["gpus_total"] == review["total"]
    assert cluster["gpus_allocated"] == pytest.approx(review["allocated"], abs=0.01)
    assert cluster["gpus_allocated"] == pytest.approx(demo.held(), abs=0.01)
    devices = sum(sum(_requests(p).values()) for p in demo.bound)  # a slice counts one here
    assert devices > demo.held() + 1  # the demo's MIG slices make the two counts differ


def test_gpu_counts_equal_the_snapshot(demo: Reading, demo_report: dict[str, Any]) -> None:
    gpus = demo_report["json"]["first_screen"]["gpus"]
    total = sum(demo.node_gpus.values())
    held_per_node: dict[str, float] = defaultdict(float)
    for pod in demo.bound:
        held_per_node[pod["spec"]["nodeName"]] += _gpus_of(pod)
    assert gpus["total"] == total
    assert gpus["allocated"] == pytest.approx(demo.held(), abs=0.01)
    for state in ("active", "resident_idle", "idle", "no_data"):
        assert gpus[state] == pytest.approx(demo.held(state), abs=0.01), state
    # GPUs on cordoned (unschedulable) nodes are not free
    cordoned = {n for n, node in demo.nodes.items() if node["spec"].get("unschedulable")}
    assert cordoned
    free = sum(max(demo.node_gpus[n] - held_per_node[n], 0) for n in demo.node_gpus if n not in cordoned)
    assert gpus["free"] == pytest.approx(free, abs=0.01)
    on_cordoned = sum(max(demo.node_gpus[n] - held_per_node[n], 0) for n in cordoned)
    assert gpus["free_on_cordoned_nodes"] == pytest.approx(on_cordoned, abs=0.01)


def test_memory_bandwidth_is_read_from_dram_active(demo_report: dict[str, Any]) -> None:
    """The demo's DCGM_FI_PROF_DRAM_ACTIVE is 0.6x each GPU's compute, so every
    group's GPU-weighted memory bandwidth is 0.6x its weighted compute."""
    activity = demo_report["json"]["activity"]
    rows = [*activity["by_cluster"], *activity["by_pool"], *activity["by_team"]]
    measured = [r for r in rows if r["gpus_measured"]]
    assert measured
    for row in measured:
        assert row["memory_bandwidth"] == pytest.approx(0.6 * row["compute_mean"], abs=0.002), row["key"]
    assert "Memory bandwidth" in demo_report["md"]


def test_pending_cost_coverage_and_gpu_hours(demo: Reading, demo_report: dict[str, Any]) -> None:
    report = demo_report["json"]
    first = report["first_screen"]
    assert first["pending"]["pods"] == len(demo.pending)
    assert first["pending"]["gpus"] == sum(_gpus_of(p) for p in demo.pending)
    by_cause: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in demo.pending:
        by_cause[demo.pending_cause(pod)].append(pod)
    assert {c["cause"]: (c["pods"], c["gpus"]) for c in report["scheduler"]["by_cause"]} == {
        cause: (len(pods), sum(_gpus_of(p) for p in pods)) for cause, pods in by_cause.items()
    }
    idle_cost = sum(
        _gpus_of(p) * (4.0 if demo.model(p["spec"]["nodeName"]) == "H100-80GB" else 2.5)
        for p in demo.bound
        if demo.state[demo.key(p)] in ("idle", "resident_idle")
    )
    assert first["cost"]["allocated_idle_per_hour"] == pytest.approx(idle_cost, abs=0.01)
    measured = demo.held() - demo.held("no_data")
    assert first["coverage"]["ratio"] == pytest.approx(measured / demo.held(), abs=0.001)
    # one run in November: its counts held from the 1st to the snapshot
    collected = datetime.fromisoformat(_snapshot()["collected_at"].replace("Z", "+00:00"))
    hours = (collected - datetime(2026, 11, 1, tzinfo=timezone.utc)).total_seconds() / 3600
    # rate now x hours, said plainly, to three significant figures (no false decimals)
    assert first["gpu_hours"]["method"] == "rate_now"
    assert "rate now" in first["gpu_hours"]["basis"]
    assert first["gpu_hours"]["hours"] == round(hours)
    assert first["gpu_hours"]["total"] == pytest.approx(sum(demo.node_gpus.values()) * hours, rel=0.005)
    assert isinstance(first["gpu_hours"]["total"], int)
    assert first["cost"]["allocated_idle_over_period"] == pytest.approx(idle_cost * hours, rel=0.005)
    # hardware demand: only pods waiting for lack of GPUs (the demo's Kueue-gated
    # and unplaceable pods are not)
    allocation = [p for p in demo.pending if demo.pending_cause(p) == "allocation"]
    assert first["pending"]["hardware_gpus"] == sum(_gpus_of(p) for p in allocation)
    assert first["pending"]["hardware_gpus"] < first["pending"]["gpus"]


def _finding_pods(finding: dict[str, Any], demo: Reading, used: set) -> list[dict[str, Any]]:
    """The pods a finding is about: listed in its evidence (one finding per
    workload), else the next pod of its workload on its node."""
    res = finding["resource"]
    names = (finding.get("evidence") or {}).get("pods")
    everyone = [*demo.bound, *demo.pending]
    if names is not None:
        return [pod for name in names for pod in everyone if demo.key(pod) == (res["namespace"], name)]
    for pod in everyone:
        key = demo.key(pod)
        if (
            demo.owner.get(key) == res["name"]
            and key[0] == res["namespace"]
            and pod["spec"].get("nodeName") == res.get("node")
            and (finding["rule"], key) not in used
        ):
            used.add((finding["rule"], key))
            return [pod]
    return []


def test_root_causes_equal_the_findings(demo: Reading, demo_report: dict[str, Any]) -> None:
    findings = demo_report["findings"]
    report = demo_report["json"]
    rules = {r["rule"]: r for c in report["root_causes"] for r in c["rules"]}
    counted: dict[str, int] = defaultdict(int)
    concerned: dict[str, set] = defaultdict(set)
    held_on_node: dict[str, list] = defaultdict(list)
    for pod in demo.bound:
        held_on_node[pod["spec"]["nodeName"]].append(pod)
    used: set = set()
    for f in findings:
        counted[f["rule"]] += 1
        if f["resource"]["kind"] == "Node":
            concerned[f["rule"]].update(demo.key(p) for p in held_on_node[f["resource"]["name"]])
            continue
        for pod in _finding_pods(f, demo, used):  # none: about the cluster or a config
            if pod["spec"].get("nodeName"):  # pending requests are never concerned GPUs
                concerned[f["rule"]].add(demo.key(pod))
    gpus_of = {demo.key(p): _gpus_of(p) for p in demo.bound}
    assert {r: v["findings"] for r, v in rules.items()} == dict(counted)
    for rule, row in rules.items():
        assert row["gpus"] == pytest.approx(sum(gpus_of[k] for k in concerned[rule]), abs=0.02), rule
    # each idle allocated GPU is attributed once: the causes add up to at most the idle total
    gpus = report["first_screen"]["gpus"]
    idle_total = gpus["idle"] + gpus["resident_idle"]
    attributed = sum(c["gpus_idle"] for c in report["root_causes"])
    assert attributed <= idle_total + 0.01
    assert attributed + report["first_screen"]["idle_unattributed"] == pytest.approx(idle_total, abs=0.02)
    assert sum(r["gpus_idle"] for r in rules.values()) == pytest.approx(attributed, abs=0.02)
    # categories come in diagnostic order
    order = [c["category"] for c in report["root_causes"]]
    flow = ["allocation", "memory", "placement", "application", "sharing"]
    assert order == [c for c in flow if c in order]
    # the three biggest causes are the rules with the most idle GPUs attributed
    ranked = sorted((r for r in rules.values() if not r["symptom"]), key=lambda r: -(r["gpus_idle"] or 0))
    biggest = report["first_screen"]["biggest_causes"]
    assert [b["gpus_idle"] for b in biggest] == [r["gpus_idle"] for r in ranked[: len(biggest)]]


def test_whatif_is_a_range_within_what_is_held(demo: Reading, demo_report: dict[str, Any]) -> None:
    whatif = demo_report["json"]["whatif"]
    for scenario in whatif["scenarios"]:
        assert 0 <= scenario["freed"]["low"] <= scenario["freed"]["high"], scenario["id"]
        for row in scenario["by_model"]:
            assert row["freed_high"] <= row["gpus_now"], (scenario["id"], row)
        assert scenario["assumptions"]
    # idle residency removed, pooled per GPU model: the GPUs of resident-idle
    # pods minus their busy share, rounded up
    resident: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for pod in demo.bound:
        key = demo.key(pod)
        if demo.state[key] == "resident_idle":
            rows = demo.telemetry[key]
            rif = sum(r["resident_idle_fraction"] for r in rows) / len(rows)
            resident[demo.model(pod["spec"]["nodeName"])].append((_gpus_of(pod), rif))
    expected = sum(
        sum(g for g, _ in pods) - math.ceil(sum(g * (1 - f) for g, f in pods) - 1e-9) for pods in resident.values()
    )
    scenario = next(s for s in whatif["scenarios"] if s["id"] == "idle_residency")
    assert scenario["freed"]["high"] == pytest.approx(expected)
    best = demo_report["json"]["first_screen"]["whatif"]
    assert best["theoretical_high"] == max(s["freed"]["high"] for s in whatif["scenarios"])
    # achievable: only the workloads the fix overlay patches; the Stable Diffusion
    # Deployment (peak 43 GB, declined by the planner) frees nothing there
    reached = whatif["achievable"]
    assert reached["known"] and best["achievable"] == reached["freed"]
    assert "sd-serving" not in {w["name"] for w in reached["by_workload"]}
    assert reached["freed"] == sum(w["freed"] for w in reached["by_workload"])
    assert reached["freed"] <= best["theoretical_high"]


def test_markdown_carries_the_same_numbers(demo_report: dict[str, Any]) -> None:
    from gpuaudit.report.render import num

    md = demo_report["md"]
    first = demo_report["json"]["first_screen"]
    for label, key in (
        ("in the cluster", "total"),
        ("allocated to pods", "allocated"),
        ("actively computing", "active"),
        ("held by idle resident models (blocking)", "resident_idle"),
        ("free", "free"),
    ):
        row = f"| {label} | {num(first['gpus'][key])} | {num(first['gpu_hours'][key])} |"
        assert row in md, row
    assert f"{num(first['pending']['gpus'])} GPUs for {num(first['pending']['pods'])} pods" in md
    for cause in demo_report["json"]["root_causes"]:
        for rule in cause["rules"]:
            assert f"| **{rule['rule']}** " in md


def test_gate_reads_the_data(demo_report: dict[str, Any]) -> None:
    gate = demo_report["json"]["gate"]
    steps = {s["step"]: s["status"] for s in gate["steps"]}
    # the demo's telemetry has no PCIe, occupancy or tensor signal
    assert steps["application"] == "not_done"
    # one node runs MIG: sharing is piloted
    assert steps["sharing"] == "done"
    assert gate["verdict"]["decision"] == "hold"
    assert "No large hardware purchase" in gate["rule"]
    assert any(not item["done"] and "DCGM profiling" in item["text"] for item in gate["checklist"])


# --- history and trend ---------------------------------------------------------------


def _at(snapshot: dict[str, Any], moment: str, path: Path) -> Path:
    write_snapshot({**snapshot, "collected_at": moment}, path)
    return path


def test_history_records_runs_and_charts_the_trend(run_cli, tmp_path: Path) -> None:
    snapshot = _snapshot()
    history = tmp_path / "runs.sqlite"
    for month in ("2026-09-15T09:00:00Z", "2026-10-15T09:00:00Z"):
        proc = run_cli(
            "audit",
            "--snapshot",
            str(_at(snapshot, month, tmp_path / "s.json.gz")),
            "--history",
            str(history),
            "--format",
            "json",
            "--output-file",
            str(tmp_path / "a.json"),
        )
        assert proc.returncode in (0, 1), proc.stderr
    out, proc = _report(run_cli, tmp_path, DEMO, "--history", str(history))
    assert proc.returncode == 0, proc.stderr
    out, proc = _report(run_cli, tmp_path, DEMO, "--history", str(history))  # same snapshot again
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert [t["period"] for t in report["trend"]] == ["2026-09", "2026-10", "2026-11"]
    assert [t["runs"] for t in report["trend"]] == [1, 1, 1]  # a re-run replaces its row
    assert report["trend"][-1]["allocated"] == pytest.approx(report["first_screen"]["gpus"]["allocated"], abs=0.01)
    assert "<polyline" in (out / "report.html").read_text()


def test_history_survives_concurrent_writers(tmp_path: Path) -> None:
    """Two processes write 40 runs each into one new database at once."""
    database = tmp_path / "h.sqlite"
    script = (
        "import sys\n"
        "from datetime import datetime, timedelta, timezone\n"
        "from gpuaudit.report.history import RunSummary, record\n"
        "start = datetime(2026, 1, 1, tzinfo=timezone.utc)\n"
        "for i in range(40):\n"
        "    record(sys.argv[1], RunSummary(cluster=sys.argv[2], collected_at=start + "
        "timedelta(hours=i), command='audit', gpus={'total': 8.0, 'allocated': float(i % 8)}))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(database), name], stderr=subprocess.PIPE, text=True)
        for name in ("east", "west")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    from gpuaudit.report.history import runs

    for name in ("east", "west"):
        rows = runs(database, name)
        assert len(rows) == 40
        assert [r.gpus["allocated"] for r in rows] == [float(i % 8) for i in range(40)]
    import sqlite3

    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_history_from_a_newer_gpuaudit_is_refused(run_cli, tmp_path: Path) -> None:
    import sqlite3

    database = tmp_path / "future.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("PRAGMA user_version = 99")
    _out, proc = _report(run_cli, tmp_path, DEMO, "--history", str(database))
    assert proc.returncode == 2
    assert "newer" in proc.stderr and "upgrade gpuaudit" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--period", "2026-13"), "not a month"),
        (("--gpu-hour-price", "cheap"), "not a price"),
        (("--gpu-hour-price", "=3"), "name a GPU model"),
    ],
)
def test_bad_options_exit_2(run_cli, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = run_cli("report", "--snapshot", str(DEMO), "--out", str(tmp_path / "o"), *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "o" / "report.html").exists()


# --- the browser -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
HOSTILE_POD = "<script>document.title='pwned'</script>"
HOSTILE_OWNER = "<script>document.title='owner'</script>"
HOSTILE_MESSAGE = "| <img src=x onerror=\"document.title='img'\"> `tick`"


def _chromium(tmp_path: Path, page: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--window-size=1280,2000",
            *mode,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def _lookup(report: dict[str, Any], key: str) -> Any:
    parts = key.split(".")
    if parts[0] == "root_causes":
        rule = next(r for c in report["root_causes"] for r in c["rules"] if r["rule"] == parts[1])
        return rule[parts[2]]
    if parts[0] == "scheduler" and parts[1] == "fragmentation":
        return next(f for f in report["scheduler"]["fragmentation"] if f["model"] == parts[2])[parts[3]]
    if parts[0] == "whatif" and parts[1] != "achievable":
        scenario = next(s for s in report["whatif"]["scenarios"] if s["id"] == parts[1])
        return scenario["freed"][parts[2]]
    if parts[0] == "scheduler" and parts[1] == "by_cause":
        return next(c for c in report["scheduler"]["by_cause"] if c["cause"] == parts[2])[parts[3]]
    if parts[0] == "gate":
        return next(s for s in report["gate"]["steps"] if s["step"] == parts[1])["status"]
    value: Any = report
    for part in parts:
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


@needs_chromium
def test_chromium_renders_the_report(demo_report: dict[str, Any], tmp_path: Path) -> None:
    page = demo_report["html"]
    html = page.read_text()
    assert "<script" not in html.lower()
    # nothing to fetch: no resource URL, links only to anchors in the page
    assert re.findall(r'(?:src|href)\s*=\s*"(?!#)', html) == []
    dom = _chromium(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    assert _console_messages(dom.stderr) == []
    values = re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', dom.stdout)
    assert len(values) >= 20
    report = demo_report["json"]
    for key, shown in values:
        expected = _lookup(report, key)
        if isinstance(expected, (int, float)):
            assert float(shown) == pytest.approx(expected), key
        else:
            assert shown == str(expected), key
    first = report["first_screen"]["gpus"]
    for key in ("total", "allocated", "active", "resident_idle", "free"):
        assert f'data-key="first_screen.gpus.{key}"' in dom.stdout
    shot = tmp_path / "report-first-screen.png"
    taken = _chromium(tmp_path, page, f"--screenshot={shot}")
    assert taken.returncode == 0, taken.stderr
    assert shot.stat().st_size > 10_000
    assert first["total"] > 0
    if os.environ.get("GPUAUDIT_ARTIFACTS"):
        artefacts = ROOT / "out"
        artefacts.mkdir(exist_ok=True)
        shutil.copy(shot, artefacts / "report-first-screen.png")


@needs_chromium
def test_cluster_text_is_escaped_never_executed(run_cli, tmp_path: Path) -> None:
    snapshot = _snapshot()
    objects = snapshot["objects"]
    pending = next(p for p in objects["pods"] if p["metadata"]["name"] == "seg-train-0")
    event = next(e for e in objects["events"] if e["involvedObject"]["name"] == "seg-train-0")
    pending["metadata"]["name"] = event["involvedObject"]["name"] = HOSTILE_POD
    event["message"] += " " + HOSTILE_MESSAGE
    holder = next(p for p in objects["pods"] if p["metadata"]["name"] == "notebook-alice-0")
    holder["metadata"]["ownerReferences"][0]["name"] = HOSTILE_OWNER
    holder["metadata"]["labels"]["team"] = "</td><b>team|x</b>"
    hostile = tmp_path / "hostile.json.gz"
    write_snapshot(snapshot, hostile)
    config = tmp_path / ".gpuaudit.yaml"
    config.write_text("report:\n  team_label: team\n")
    out, proc = _report(run_cli, tmp_path, hostile, "--config", str(config))
    assert proc.returncode == 0, proc.stderr

    dom = _chromium(tmp_path, out / "report.html", "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    assert _console_messages(dom.stderr) == []
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.S).group(1)
    assert title.startswith("GPU capacity review")  # no script ran to change it
    body = dom.stdout.lower()
    assert "<script" not in body and "<img" not in body and "<b>team" not in body
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom.stdout
    assert "&lt;script&gt;document.title='owner'&lt;/script&gt;" in dom.stdout
    assert "&lt;/td&gt;&lt;b&gt;team|x&lt;/b&gt;" in dom.stdout

    md = (out / "report.md").read_text()
    assert "<script" not in md and "<img" not in md and "</td>" not in md
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in md
    assert "team\\|x" in md and "\\`tick\\`" in md
    # a pipe in cluster text does not add a column to a Markdown table
    row = next(line for line in md.splitlines() if line.startswith("| &lt;/td&gt;&lt;b&gt;team\\|x"))  # team table
    header = next(line for line in md.splitlines() if line.startswith("| Team |"))
    assert len(re.findall(r"(?<!\\)\|", row)) == len(re.findall(r"(?<!\\)\|", header))
    assert json.loads((out / "report.json").read_text())["scheduler"]["pods"] == 8


def test_gpu_hours_hold_each_run_until_the_next() -> None:
    from gpuaudit.report.history import RunSummary
    from gpuaudit.report.period import integrate, month

    def run(day: int, allocated: float, month_: int = 11) -> RunSummary:
        moment = datetime(2026, month_, day, tzinfo=timezone.utc)
        return RunSummary("c", moment, "audit", {"allocated": allocated})

    november = month("2026-11")
    runs = [run(15, 99.0, month_=10), run(1, 10.0), run(11, 20.0)]
    hours = integrate(runs, november, now=datetime(2026, 11, 21, tzinfo=timezone.utc))
    # Nov 1-11 at 10 GPUs, Nov 11-21 at 20; October's run is not in the period
    assert hours["hours"] == 20 * 24
    assert hours["runs"] == 2
    assert hours["allocated"] == 10 * 240 + 20 * 240
    assert hours["total"] is None  # a count no run recorded is unknown, not zero
    assert month("2026-12").end == datetime(2027, 1, 1, tzinfo=timezone.utc)


def test_report_judges_what_audit_judges_on_a_mixed_cluster(run_cli, tmp_path: Path) -> None:
    """The report leaves pods without GPU requests out before auditing
    (gpuaudit/report/inputs.py); its findings must stay the audit's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cluster", ROOT / "bench" / "gen_cluster.py")
    gen_cluster = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_cluster)
    recorded = gen_cluster.generate(120, 1500, seed=3)
    names = ("nodes", "pods", "events", "replicasets", "jobs", "configmaps", "clusterpolicies",
             "resourceclaims", "resourceslices", "kueueworkloads")  # fmt: skip
    snapshot = {
        "version": 1, "kind": "gpuaudit-snapshot", "collected_at": "2025-12-29T00:00:00Z",
        "cluster": {"server": "https://mixed.example", "context": "mixed"},
        "objects": {name: recorded.get(name, []) for name in names},
        "absent": [], "errors": [], "telemetry": None,
    }  # fmt: skip
    cpu_pods = [p for p in snapshot["objects"]["pods"] if not _requests(p)]
    assert len(cpu_pods) > 500  # the point of the test: most pods ask for no GPU
    path = tmp_path / "mixed.json.gz"
    write_snapshot(snapshot, path)
    audit = run_cli("audit", "--snapshot", str(path), "--format", "json")
    assert audit.returncode in (0, 1), audit.stderr
    counts: dict[str, int] = defaultdict(int)
    for finding in json.loads(audit.stdout)["findings"]:
        counts[finding["rule"]] += 1
    out, proc = _report(run_cli, tmp_path, path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    judged = {r["rule"]: r["findings"] for c in report["root_causes"] for r in c["rules"]}
    assert judged == dict(counts)
    assert report["method"]["pods"]["that_may_use_gpus"] < len(snapshot["objects"]["pods"])


def test_gpu_pod_filter_keeps_every_kind_of_gpu_request() -> None:
    from gpuaudit.model.cluster_builder import may_use_gpus

    def pod(resources=None, annotations=None, claims=None, init=False):
        container = {"name": "c", "resources": resources or {}}
        spec = {"initContainers" if init else "containers": [container]}
        if claims:
            spec["resourceClaims"] = claims
        return {"metadata": {"annotations": annotations or {}}, "spec": spec}

    assert may_use_gpus(pod({"limits": {"nvidia.com/gpu": "1"}}))
    assert may_use_gpus(pod({"limits": {"nvidia.com/mig-1g.10gb": "1"}}))
    assert may_use_gpus(pod({"requests": {"amd.com/gpu": "1"}}, init=True))
    assert may_use_gpus(pod(annotations={"gpu-fraction": "0.5"}))
    assert may_use_gpus(pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]))
    assert not may_use_gpus(pod({"requests": {"cpu": "2", "memory": "4Gi"}}))
