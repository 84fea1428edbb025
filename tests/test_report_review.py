"""The capacity review's claims, each on a small hand-built cluster whose
numbers can be checked by hand: what the fix overlay achieves (memory and
compute fit, per workload), the decision gate (data, not names; hardware
demand per GPU model), root causes (each idle GPU once), hours and money,
fragmentation, partial input, the actions and the showback."""

from __future__ import annotations

import copy
import gzip
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from msgspec.structs import replace

from gpuaudit.facts.types import Telemetry
from gpuaudit.model import Finding
from gpuaudit.model.findings import Location, Resource
from gpuaudit.report import actions, gate, summary
from gpuaudit.report.history import RunSummary
from gpuaudit.report.history import runs as history_runs
from gpuaudit.report.holders import IDLE, RESIDENT_IDLE, GpuNode, Holder, Inventory, Thresholds, Waiting
from gpuaudit.report.period import forecast, integrate, month, trend
from gpuaudit.report.prices import Prices
from gpuaudit.report.whatif import WhatIfSettings, simulate

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
GIB = 1024.0


def _holder(
    owner: str,
    i: int,
    *,
    node: str = "a100-0",
    model: str = "A100-80GB",
    state: str = IDLE,
    peak_gib: float = 5,
    p95: float = 0.1,
    team: str = "ml",
    telemetry: bool = True,
) -> Holder:
    return Holder(
        namespace="ml",
        pod=f"{owner}-{i}",
        owner_kind="Deployment",
        owner=owner,
        team=team,
        node=node,
        model=model,
        pool=model,
        gpus=1.0,
        whole=1,
        mig_profiles=(),
        state=state,
        telemetry=Telemetry(
            coverage=1.0,
            compute_mean=p95 / 2,
            compute_p95=p95,
            fb_used_max_mib=peak_gib * GIB,
            fb_total_mib=80 * GIB,
        )
        if telemetry
        else None,
    )


def _node(
    name: str,
    allocated: float,
    *,
    model: str = "A100-80GB",
    gpus: float = 8,
    cordoned: bool = False,
    room: tuple[float, float] | None = None,
) -> GpuNode:
    return GpuNode(name, model, model, gpus, allocated, cordoned, True, 80 * GIB, room)


def _waiting(
    pod: str,
    gpus: float,
    cause: str,
    *,
    model: str | None = None,
    eligible: int | None = 1,
    nodes: tuple[str, ...] = (),
) -> Waiting:
    return Waiting("ml", pod, "Job", pod, "ml", gpus, cause, None, model, eligible, nodes)


def _share(name: str, need_gib: float | None, *, profile: str | None = None) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "kind": "Deployment",
        "name": name,
        "remediation": "move-to-shared-gpu",
        "rules": ["GPA-AL-001"],
        "resource": f"nvidia.com/mig-{profile}" if profile else "nvidia.com/gpu.shared",
        "mig_profile": profile,
        "model": "A100-80GB",
        "need_mib": None if need_gib is None else need_gib * GIB,
        "confidence": "measured" if need_gib else "needs confirmation",
    }


# --- 1. what-if: only what the overlay writes, with memory and compute fit -----------------


def test_overlay_counts_only_patched_workloads_that_fit() -> None:
    holders = [
        *(_holder("small", i, p95=0.1) for i in range(4)),  # 4 x 12 GiB, 10%: one GPU at 4 replicas
        *(_holder("hot", i, p95=0.6) for i in range(2)),  # 60% p95 each: never two on one GPU
        *(_holder("unmeasured", i) for i in range(2)),  # the patch has no VRAM telemetry behind it
        *(_holder("unpatched", i, p95=0.05) for i in range(5)),  # no patch: theoretical only
        *(_holder("slices", i, p95=0.1) for i in range(7)),  # 1g.10gb each: one GPU
        *(_holder("busy-slices", i, p95=0.5) for i in range(2)),  # 50% > 1/7 of the SMs
    ]
    # One-GPU nodes, one pod on each: each share takes exactly the GPUs it
    # fills (whole nodes are GPUs here; test_shares_take_whole_nodes covers larger nodes).
    holders = [replace(h, node=f"a100-{i}") for i, h in enumerate(holders)]
    nodes = tuple(_node(f"a100-{i}", 1 if i < len(holders) else 0, gpus=1) for i in range(24))
    inventory = Inventory(nodes, tuple(holders), (), None, None)
    overlay = {
        "available": True,
        "replicas": 4,
        "shares": [
            _share("small", 12),
            _share("hot", 6),
            _share("unmeasured", None),
            _share("slices", 6, profile="1g.10gb"),
            _share("busy-slices", 6, profile="1g.10gb"),
        ],
    }
    result = simulate(inventory, Thresholds(), WhatIfSettings(), overlay)
    reached = result["achievable"]
    freed = {w["name"]: (w["freed"], w["counted"]) for w in reached["by_workload"]}
    # small alone: 4 pods on 1 GPU frees 3. With hot: 6 pods on 2 GPUs (hot + 3 small:
    # 60% + 30% compute, 4 replicas; hot + 1 small), so hot adds 1. Never both hot on one GPU.
    assert freed["small"] == (3, True)
    assert freed["hot"] == (1, True)
    # seven 1g.10gb slices fill one GPU: 6 freed; the busy ones do not fit a slice
    assert freed["slices"] == (6, True)
    assert freed["busy-slices"] == (0, False)
    assert (
        "exceeds the 1g.10gb slice" in next(w for w in reached["by_workload"] if w["name"] == "busy-slices")["reason"]
    )
    assert freed["unmeasured"] == (0, False)
    assert "unpatched" not in freed
    assert reached["freed"] == 10 == result["best"]["achievable"]
    assert sum(w["freed"] for w in reached["by_workload"]) == reached["freed"]
    # the theoretical packing also moves the unpatched pods: shown apart, never the headline
    assert result["best"]["theoretical_high"] > reached["freed"]


def test_shares_take_whole_nodes() -> None:
    """Sharing is a node's setting: six pods at two replicas need three GPUs,
    which on 4-GPU nodes is one whole node, so two GPUs are freed, not three
    (the real scheduler agrees: tests/controlplane/test_whatif_scheduler.py)."""
    holders = [_holder("small", i, node=f"a100-{i % 3}", p95=0.1) for i in range(6)]
    nodes = tuple(_node(f"a100-{i}", 2, gpus=4) for i in range(3))
    overlay = {"available": True, "replicas": 2, "shares": [_share("small", 12)]}
    reached = simulate(Inventory(nodes, tuple(holders), (), None, None), Thresholds(), WhatIfSettings(), overlay)[
        "achievable"
    ]
    assert reached["freed"] == 2
    assert [w["freed"] for w in reached["by_workload"]] == [2]
    # two pods on a 4-GPU node at two replicas free nothing: the node's other GPUs become shares no one uses
    few = simulate(
        Inventory(nodes, tuple(holders[:2]), (), None, None),
        Thresholds(),
        WhatIfSettings(),
        overlay,
    )["achievable"]
    assert few["freed"] == 0


def test_shares_need_the_nodes_cpu_and_memory() -> None:
    """Six pods at two replicas fit one 4-GPU node's replicas, but each asks
    5 CPUs and a node has 12 left beside what stays on it: the shares take
    three nodes, and free nothing. With the CPU to spare they take one."""
    holders = [replace(_holder("small", i, node=f"a100-{i % 3}"), requests=(5.0, 8 * 2**30)) for i in range(6)]
    overlay = {"available": True, "replicas": 2, "shares": [_share("small", 12)]}

    def freed(room: tuple[float, float]) -> dict[str, Any]:
        nodes = tuple(_node(f"a100-{i}", 2, gpus=4, room=room) for i in range(3))
        return simulate(Inventory(nodes, tuple(holders), (), None, None), Thresholds(), WhatIfSettings(), overlay)[
            "achievable"
        ]

    # room: what is left with the node's own two pods on it (5 CPUs each)
    roomy = freed((40.0, 100 * 2**30))
    assert roomy["freed"] == 2
    assert freed((2.0, 100 * 2**30))["freed"] == 0  # 12 CPUs once its two pods leave: two moved pods a node
    assert freed((40.0, 0.0))["freed"] == 0  # 16 GiB once its pods leave: two a node
    tight = freed((-8.0, 100 * 2**30))  # 2 CPUs once its pods leave: no node takes one
    assert tight["freed"] == 0
    assert "CPU" in tight["by_workload"][0]["reason"] and not tight["by_workload"][0]["counted"]
    assert not any("not checked" in a for a in tight["assumptions"])
    assert any("do not state their allocatable CPU" in a for a in simulate(
        Inventory(tuple(_node(f"a100-{i}", 2, gpus=4) for i in range(3)), tuple(holders), (), None, None),
        Thresholds(), WhatIfSettings(), overlay,
    )["achievable"]["assumptions"])  # fmt: skip


def test_pods_a_shared_node_displaces_must_fit_elsewhere() -> None:
    """Six pods at four replicas fill two GPUs: one 4-GPU node frees two.
    The node shared loses its trainer, which must find a whole GPU and its
    8 CPUs elsewhere: on the other node once its three moved pods leave, if
    that node has the CPU. Without it no set of nodes works, and the claim
    is nothing rather than a stranded trainer."""
    cpu = 2**30
    smalls = [replace(_holder("small", i, node=f"a100-{i // 3}"), requests=(1.0, cpu)) for i in range(6)]
    trainers = [
        replace(_holder("train", i, node=f"a100-{i}", p95=0.9, peak_gib=60), requests=(8.0, cpu)) for i in range(2)
    ]
    busy = [replace(_holder("busy", i, node="a100-2", p95=0.9, peak_gib=60), requests=(8.0, cpu)) for i in range(4)]
    overlay = {"available": True, "replicas": 4, "shares": [_share("small", 12)]}

    def achievable(room_b: float) -> dict[str, Any]:
        rooms = (0.0, room_b, 0.0)
        nodes = tuple(_node(f"a100-{i}", 4, gpus=4, room=(rooms[i], 100 * cpu)) for i in range(3))
        inventory = Inventory(nodes, (*smalls, *trainers, *busy), (), None, None)
        return simulate(inventory, Thresholds(), WhatIfSettings(time_slicing_replicas=4), overlay)["achievable"]

    assert achievable(room_b=5.0)["freed"] == 2  # 5 + 3 CPUs back from the moved pods: the trainer fits
    stranded = achievable(room_b=0.0)
    assert stranded["freed"] == 0
    assert "fit elsewhere" in stranded["by_workload"][0]["reason"]


def test_one_template_is_sized_for_its_largest_pod() -> None:
    """Three pods of one Deployment, two quiet at 5 GiB and one peaking at
    43 GiB: the template asks 43 GiB for each, so no two share an 80 GiB GPU
    (the theoretical time-slicing no longer packs them pod by pod)."""
    holders = [_holder("sd", 0, peak_gib=43), _holder("sd", 1, peak_gib=5), _holder("sd", 2, peak_gib=5)]
    inventory = Inventory((_node("a100-0", 3),), tuple(holders), (), None, None)
    result = simulate(inventory, Thresholds(), WhatIfSettings(), None)
    slicing = next(s for s in result["scenarios"] if s["id"].startswith("time_slicing"))
    # 2 x 43 GiB > 80 GiB; sized pod by pod (43 + 5 + 5) all three would have shared one GPU
    assert slicing["freed"] == {"low": 0, "high": 0}
    assert result["achievable"]["known"] is False and result["best"]["achievable"] is None


# --- 2. the decision gate: data, not names; demand per GPU model ---------------------------


def _flow(
    signals: dict[str, Any], measured: dict[str, float], gpus_allocated: float = 8, **options: Any
) -> list[dict[str, str]]:
    rules = [SimpleNamespace(category=c) for c in ("allocation", "memory", "placement")]
    return gate.steps(
        rules_run=rules,
        errors=[],
        gpus={"allocated": gpus_allocated},
        coverage={"present": True, "ratio": 1.0},
        pending={"pods": 0, "by_cause": []},
        signals=signals,
        signals_measured=measured,
        extra_metrics=[],
        sharing={"nodes": 1, "pods": 0},
        workloads=2,
        **options,
    )


def _with(h: Holder, **values: Any) -> Holder:
    return replace(h, telemetry=replace(h.observed, **values))


def test_a_signal_named_with_no_values_leaves_the_gate_unchanged() -> None:
    named = {"compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}
    holders = [_with(_holder("a", 0), tensor_active_mean=None), _holder("b", 0, telemetry=False)]
    measured = gate.signal_coverage(holders)
    assert not any(measured.values())
    without = {s["step"]: s for s in _flow({"compute": named["compute"]}, {})}
    with_name = {s["step"]: s for s in _flow(named, measured)}
    assert with_name["application"]["status"] == without["application"]["status"] == "not_done"
    assert "without a single value: tensor" in with_name["application"]["evidence"]
    # a real value on every allocated GPU is data
    covered = gate.signal_coverage([_with(_holder(f"t{i}", 0), tensor_active_mean=0.3) for i in range(8)])
    assert covered["tensor"] == 8
    assert {s["step"]: s["status"] for s in _flow(named, covered)}["application"] == "done"


def test_a_signal_on_one_gpu_in_a_hundred_is_not_the_step_done() -> None:
    """1 of 103 allocated GPUs with a PCIe series: 1% coverage, not an
    application measured; the step is done only at the configured share."""
    holders = [_holder(f"p{i}", 0) for i in range(103)]
    holders[0] = _with(holders[0], pcie_mean_bps=2.0e9)
    measured = gate.signal_coverage(holders)
    assert measured["pcie"] == 1
    signals = {"compute": "X", "pcie": "DCGM_FI_PROF_PCIE_TX_BYTES"}
    step = {s["step"]: s for s in _flow(signals, measured, gpus_allocated=103)}["application"]
    assert step["status"] == "partial"
    assert f"pcie covers {1 / 103:.0%} of allocated GPUs" in step["evidence"]
    assert "less than the 50% needed" in step["evidence"]
    # the share is a parameter: at 1% the same data counts
    low = {s["step"]: s for s in _flow(signals, measured, gpus_allocated=103, min_signal_coverage=0.009)}
    assert low["application"]["status"] == "done"
    # half the GPUs reporting is the default's threshold
    for h in range(1, 52):
        holders[h] = _with(holders[h], pcie_mean_bps=1.0e9)
    half = gate.signal_coverage(holders)
    assert half["pcie"] == 52 and 52 / 103 >= 0.5
    assert {s["step"]: s for s in _flow(signals, half, gpus_allocated=103)}["application"]["status"] == "done"


def test_telemetry_older_than_the_snapshot_leaves_residency_partial() -> None:
    fresh = {s["step"]: s for s in _flow({"compute": "X"}, {}, telemetry_lag_hours=2.0)}["residency"]
    assert fresh["status"] == "done"
    stale = {s["step"]: s for s in _flow({"compute": "X"}, {}, telemetry_lag_hours=72 * 24.0)}["residency"]
    assert stale["status"] == "partial" and "72 days before the snapshot" in stale["evidence"]
    # coverage below the configured share is partial too, and says the share
    low = gate.steps(
        rules_run=[SimpleNamespace(category=c) for c in ("allocation", "memory", "placement")],
        errors=[],
        gpus={"allocated": 8},
        coverage={"present": True, "ratio": 0.6},
        pending={"pods": 0, "by_cause": []},
        signals={},
        signals_measured={},
        extra_metrics=[],
        sharing={},
        workloads=1,
        min_coverage=0.7,
    )[1]
    assert low["status"] == "partial" and "60%" in low["evidence"] and "70% needed" in low["evidence"]


def test_hardware_demand_leaves_out_quota_and_selectors_and_compares_per_model() -> None:
    waiting = (
        _waiting("sweep", 2, "quota", model="H100-80GB"),  # Kueue quota: not hardware
        _waiting("pinned", 1, "placement", eligible=0),  # selectors no node satisfies
        _waiting("train-h100", 4, "allocation", model="H100-80GB", eligible=1, nodes=("h100-0",)),
        _waiting("train-a100", 8, "allocation", model="A100-80GB", eligible=2, nodes=("a100-0", "a100-1")),
        _waiting("too-big", 16, "allocation", model="A100-80GB", eligible=0),  # no node shape has 16
    )
    nodes = (_node("a100-0", 7), _node("a100-1", 7), _node("h100-0", 8, model="H100-80GB"))
    inventory = Inventory(nodes, (), waiting, None, None)
    demand = summary.hardware_demand(inventory)
    assert (demand["pods"], demand["gpus"]) == (2, 12)
    assert {m["model"]: m["gpus"] for m in demand["by_model"]} == {"A100-80GB": 8, "H100-80GB": 4}
    assert {x["cause"]: x["gpus"] for x in demand["excluded"]} == {"quota": 2, "placement": 1, "allocation": 16}
    # the overlay frees 6 A100s; 2 A100s are free now: A100 demand is met, H100 is not
    freed = {"known": True, "by_model": [{"model": "A100-80GB", "freed": 6}]}
    flow = [{"title": "x", "status": "done"}]
    pods = [{"model": w.model, "gpus": w.gpus, "nodes": w.nodes} for w in waiting if w.hardware_demand]
    free_nodes = {n.name: (n.model, n.gpus - n.allocated) for n in nodes}
    decision = gate.verdict(flow, demand, freed, pods, free_nodes)
    rows = {r["model"]: r for r in decision["per_model"]}
    assert rows["A100-80GB"] == {"model": "A100-80GB", "pods": 1, "demand": 8, "free_now": 2, "freed": 6, "gap": 0}
    assert rows["H100-80GB"] == {"model": "H100-80GB", "pods": 1, "demand": 4, "free_now": 0, "freed": 0, "gap": 4}
    assert decision["decision"] == "purchase_case" and decision["gap"] == 4
    assert "4 H100-80GB" in decision["reason"]
    # unknown overlay: the gap is unknown and the gate holds
    unknown = gate.verdict(flow, demand, {"known": False}, pods, free_nodes)
    assert unknown["gap"] is None and unknown["decision"] == "hold"


# --- 3. root causes: each idle allocated GPU once --------------------------------------


def _finding(rule: str, category: str, *, pods: list[str] | None = None, node: str | None = None) -> Finding:
    if node is not None:
        subject = SimpleNamespace(target="node", facts={})
        resource = Resource("v1", "Node", "", node)
    else:
        pod = (pods or [""])[0]
        facts = {"namespace": "ml", "pod": pod}
        subject = SimpleNamespace(target="pod", facts=facts, typed=SimpleNamespace(**facts))  # read as attributes
        resource = Resource("apps/v1", "Deployment", "ml", rule.lower())
    return Finding(
        rule=rule,
        title=rule,
        severity="medium",
        category=category,
        message=rule,
        resource=resource,
        location=Location("", None, ""),
        evidence={"pods": pods} if pods else {},
        remediation=None,
        subject=subject,
    )


def test_causes_attribute_each_idle_gpu_once() -> None:
    holders = (
        _holder("a", 0, state=IDLE),
        _holder("b", 0, state=RESIDENT_IDLE),
        _holder("c", 0, state="active"),
    )
    waiting = (_waiting("w", 4, "allocation", eligible=1),)
    inventory = Inventory((_node("a100-0", 3),), holders, waiting, None, None)
    findings = [
        _finding("GPA-ME-001", "memory", pods=["a-0", "b-0"]),
        _finding("GPA-AL-201", "allocation", pods=["a-0"]),
        _finding("GPA-SH-102", "sharing", node="a100-0"),
        _finding("GPA-AL-102", "allocation", pods=["w"]),  # a pending pod: never idle allocated GPUs
    ]
    causes = summary.root_causes(findings, [], inventory)
    rules = {r["rule"]: r for c in causes for r in c["rules"]}
    # a-0 goes to allocation (first in diagnostic order), b-0 to memory; sharing gets none
    assert {r: v["gpus_idle"] for r, v in rules.items()} == {
        "GPA-AL-201": 1,
        "GPA-AL-102": 0,
        "GPA-ME-001": 1,
        "GPA-SH-102": 0,
    }
    # concerned: allocated GPUs only (the node's 3), no free or pending GPUs
    assert rules["GPA-SH-102"]["gpus"] == 3 and rules["GPA-AL-102"]["gpus"] == 0
    idle_total = 2
    assert sum(c["gpus_idle"] for c in causes) == idle_total
    gpus = summary.gpu_counts(inventory)
    assert summary.idle_unattributed(causes, gpus) == 0
    assert {b["rule"] for b in summary.biggest_causes(causes)} == {"GPA-AL-201", "GPA-ME-001"}


# --- 4. hours and money ----------------------------------------------------------------------


def _run(moment: datetime, total: float, allocated: float) -> RunSummary:
    gpus = {
        "total": total,
        "allocated": allocated,
        "active": allocated,
        "resident_idle": 0,
        "idle": 0,
        "no_data": 0,
        "free": total - allocated,
    }
    return RunSummary("c", moment, "report", gpus, idle_cost_per_hour=12.5, allocated_cost_per_hour=100.0)


def test_one_snapshot_is_the_rate_now_times_hours_without_false_precision() -> None:
    november = month("2026-11")
    moment = datetime(2026, 11, 27, 9, tzinfo=timezone.utc)  # 633 h into November
    hours = integrate([_run(moment, 6212, 5000)], november, moment)
    assert hours["method"] == "rate_now" and hours["hours"] == 633
    assert "rate now × 633 h" in hours["basis"]
    assert hours["total"] == 3_930_000  # 6212 x 633 = 3,932,196, to three significant figures
    assert hours["idle_cost"] == 7910  # 12.5 x 633 = 7,912.5
    # a one-run trend point is the run's own counts, not hours rounded then divided
    assert trend([_run(moment, 6212, 5000)], moment)[0]["total"] == 6212


def test_several_runs_are_integrated_and_their_sampling_said() -> None:
    november = month("2026-11")
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    runs = [_run(start + timedelta(hours=24 * day), 10, 4 + day % 2) for day in range(10)]
    hours = integrate(runs, november, runs[-1].collected_at)
    assert hours["method"] == "integrated" and hours["runs"] == 10
    assert "about every 24 h" in hours["basis"]
    assert hours["sampling"]["every_hours"] == 24
    # 216 h: days 0-8 held 24 h each (alternating 4 and 5), day 9 ends at its own moment
    assert hours["allocated"] == 5 * 24 * 4 + 4 * 24 * 5
    assert isinstance(hours["allocated"], int)


def test_the_forecast_is_a_line_through_at_least_three_months() -> None:
    moments = [datetime(2026, m, 15, tzinfo=timezone.utc) for m in (8, 9, 10, 11)]
    allocated = [100, 120, 140, 160]  # 20 more a month: December is 180
    runs = [_run(t, 400, a) for t, a in zip(moments, allocated, strict=True)]
    monthly = trend(runs, moments[-1])
    ahead = forecast(monthly)
    assert ahead["period"] == "2026-12" and ahead["months"] == 4
    assert ahead["allocated"] == 180 and ahead["active"] == 180 and ahead["idle_total"] == 0
    two = forecast(trend(runs[:2], moments[1]))
    assert two["allocated"] is None and "2 month(s)" in two["basis"]
    falling = forecast(trend([_run(t, 400, a) for t, a in zip(moments, [30, 20, 10, 5], strict=True)], moments[-1]))
    assert falling["allocated"] == 0  # never below zero


def test_showback_efficiency_and_the_unallocated_cost_shared_out() -> None:
    nodes = (_node("a100-0", 6), _node("a100-1", 2))  # 8 + 8 GPUs, 8 held: 8 free
    holders = (
        *(_holder("a", i, team="vision", state="active") for i in range(4)),
        *(_holder("b", i, team="vision") for i in range(2)),
        *(_holder("c", i, team="ml", telemetry=False, state="no_data") for i in range(2)),
    )
    inventory = Inventory(nodes, holders, (), None, None)
    rows = {r["team"]: r for r in summary.showback(inventory, Prices(default=2.0), share_unallocated=True)}
    free_cost = 8 * 2.0 * 730
    assert rows["vision"]["unallocated_share_per_month"] == round(free_cost * 6 / 8)
    assert rows["ml"]["unallocated_share_per_month"] == round(free_cost * 2 / 8)
    assert rows["vision"]["efficiency"] == round(4 / 6, 3) and rows["ml"]["efficiency"] is None
    plain = {r["team"]: r for r in summary.showback(inventory, Prices(default=2.0))}
    assert plain["vision"]["unallocated_share_per_month"] is None  # an option, off by default


def test_a_resident_model_moves_to_a_cheaper_gpu_that_holds_it() -> None:
    nodes = (_node("a100-0", 2), _node("l4-0", 0, model="L4-24GB", gpus=1))
    nodes = (nodes[0], replace(nodes[1], memory_mib=24 * GIB))
    holders = tuple(_holder("small", i, state="active", peak_gib=12, p95=0.6) for i in range(2))
    prices = Prices(default=2.5, per_model={"L4-24GB": 0.8})
    planned = actions.plan(Inventory(nodes, holders, (), None, None), {}, prices)
    assert planned["count"] == 0  # nothing idle: no action, however cheap the move
    idle = tuple(replace(h, state=IDLE) for h in holders)
    planned = actions.plan(Inventory(nodes, idle, (), None, None), {}, prices)
    move = next(a for a in planned["all"] if a["workload"]["name"] == "small")
    assert "smaller_gpu" in [move["kind"], *move["alternatives"]]
    big = tuple(_with(h, fb_used_max_mib=21 * GIB) for h in idle)
    planned = actions.plan(Inventory(nodes, big, (), None, None), {}, prices)
    assert "smaller_gpu" not in [planned["all"][0]["kind"], *planned["all"][0]["alternatives"]]  # 21 GiB x 1.2 > 24


def test_free_gpus_on_cordoned_nodes_are_not_free() -> None:
    nodes = (_node("a", 6), _node("b", 3, cordoned=True))
    gpus = summary.gpu_counts(Inventory(nodes, (), (), None, None))
    assert (gpus["free"], gpus["free_on_cordoned_nodes"]) == (2, 5)


# --- 5. fragmentation ------------------------------------------------------------------------


def test_largest_free_block_against_waiting_request_sizes() -> None:
    """11 free A100s, 2 or 5 per node (and 8 on a cordoned node), while an 8-GPU job waits."""
    nodes = (
        _node("a0", 6),
        _node("a1", 6),
        _node("a2", 6),
        _node("a3", 3),
        _node("a4", 8),
        _node("a5", 0, cordoned=True),
    )
    waiting = (_waiting("train", 8, "allocation", model="A100-80GB", eligible=5),)
    rows = summary.fragmentation(Inventory(nodes, (), waiting, None, None))
    assert rows == [
        {
            "model": "A100-80GB",
            "gpus_per_node": 8,
            "nodes": 5,
            "free": 11,
            "largest_free_block": 5,
            "nodes_by_free_block": {"5": 1, "2": 3, "0": 1},
            "pending_sizes": [{"gpus": 8, "pods": 1, "fits_now": False}],
            "fragmented": True,
        }
    ]


# --- 7. actions and showback -------------------------------------------------------------


def test_a_patch_is_an_action_priced_per_model_and_showback_prices_each_team() -> None:
    """Where the fix overlay frees GPUs of a workload the action is its
    patch, at the price of its GPU model; showback prices each team."""
    holders = (
        *(_holder("cheap", i, model="L4-24GB") for i in range(3)),
        _holder("dear", 0, model="H100-80GB", team="vision"),
    )
    reached = {
        "by_workload": [
            {"namespace": "ml", "kind": "Deployment", "name": "cheap", "freed": 3, "counted": True,
             "rules": ["GPA-AL-001"], "remediation": "move-to-shared-gpu", "resource": "nvidia.com/gpu.shared",
             "mig_profile": None},
            {"namespace": "ml", "kind": "Deployment", "name": "dear", "freed": 1, "counted": True,
             "rules": ["GPA-AL-001"], "remediation": "move-to-shared-gpu", "resource": "nvidia.com/mig-1g.10gb",
             "mig_profile": "1g.10gb"},
        ]
    }  # fmt: skip
    prices = Prices(default=1.0, per_model={"H100-80GB": 4.0})
    planned = actions.plan(Inventory((), holders, (), None, None), reached, prices)
    top = planned["shown"]
    assert [(a["workload"]["name"], a["kind"], a["gpus"], a["usd_per_month"], a["team"]) for a in top] == [
        ("dear", "patch", 1, 2920, "vision"),  # 1 x 4.0 x 730
        ("cheap", "patch", 3, 2190, "ml"),  # 3 x 1.0 x 730
    ]
    assert "gpuaudit fix --snapshot SNAPSHOT --rules GPA-AL-001" in top[0]["how"][0]
    assert planned["idle_usd_per_month"] == 2920 + 2190 and planned["left_usd_per_month"] == 0
    holders = (_holder("a", 0, model="H100-80GB", team="vision"), _holder("b", 0, state="active", model="L4-24GB"))
    rows = summary.showback(Inventory((), holders, (), None, None), prices)
    assert [(r["team"], r["gpus"], r["gpus_idle"], r["cost_per_month"], r["idle_cost_per_month"]) for r in rows] == [
        ("vision", 1, 1, 2920, 2920),
        ("ml", 1, 0, 730, 0),
    ]


def test_many_actions_are_bundled_by_owner_and_still_add_up() -> None:
    """More workloads than the first screen shows: one line per team, whose
    money is the sum of its workloads' actions."""
    holders = tuple(
        _holder(f"w{i}", 0, team=f"team-{i % 3}", telemetry=True) for i in range(15)
    )  # 15 idle single-pod Deployments, 5 per team
    planned = actions.plan(Inventory((), holders, (), None, None), {}, Prices(default=2.0), shown=10)
    assert planned["count"] == 15 and planned["bundled"]
    per_team = {t: 5 * 2.0 * 730 for t in ("team-0", "team-1", "team-2")}
    assert {b["team"]: b["usd_per_month"] for b in planned["shown"]} == per_team
    assert all(b["workloads"] == 5 and "report.json" in b["how"][0] for b in planned["shown"])
    assert planned["covered_usd_per_month"] == sum(per_team.values()) == planned["idle_usd_per_month"]


# --- 6. partial input: banner, unknowns, marked, not recorded --------------------------------


def test_a_partial_read_shows_a_banner_marks_json_and_records_nothing(run_cli, tmp_path: Path) -> None:
    snapshot = json.loads(gzip.decompress(DEMO.read_bytes()))
    broken = copy.deepcopy(snapshot)
    broken["objects"]["pods"] = []
    broken["errors"] = [{"endpoint": "/api/v1/pods", "resource": "pods", "status": 403, "message": "pods is forbidden"}]
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(broken))
    out, history = tmp_path / "out", tmp_path / "runs.sqlite"
    proc = run_cli(
        "report", "--snapshot", str(path), "--out", str(out), "--history", str(history), "--gpu-hour-price", "2.5"
    )
    assert proc.returncode == 2, proc.stderr  # a partial run exits 2
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True
    first = report["first_screen"]
    assert first["partial"]["unread"] == ["pods"]
    assert first["gpus"]["allocated"] is None and first["gpus"]["free"] is None
    assert first["gpus"]["total"] == 112  # the nodes were read: their GPUs are known
    assert first["hardware_needed"] == {"gap": None, "per_model": []}
    assert first["whatif"]["theoretical_high"] is None
    assert first["pending"]["gpus"] is None and first["whatif"]["achievable"] is None
    assert first["actions"] == [] and first["actions_cover"]["idle_usd_per_month"] is None
    assert first["gate"]["decision"] == "hold"
    html = (out / "report.html").read_text()
    assert 'id="partial"' in html and html.index('id="partial"') < html.index('id="gate-verdict"')
    assert "Partial input" in (out / "report.md").read_text().split("## 1.")[0]
    assert history_runs(history, report["cluster"]) == []
    assert "not recorded" in proc.stderr


def test_a_snapshot_naming_signals_without_values_does_not_pass_the_gate(run_cli, tmp_path: Path) -> None:
    """The demo with PCIe, occupancy and tensor queries named but every value
    null: the application step stays not done, and the verdict with it."""
    snapshot = json.loads(gzip.decompress(DEMO.read_bytes()))
    named = copy.deepcopy(snapshot)
    named["telemetry"]["signals"].update(
        pcie="DCGM_FI_PROF_PCIE_TX_BYTES",
        occupancy="DCGM_FI_PROF_SM_OCCUPANCY",
        tensor="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    )
    for row in [*named["telemetry"]["gpus"], *named["telemetry"]["pods"]]:
        row.update(pcie_tx_mean_bps=None, pcie_rx_mean_bps=None, occupancy_mean=None, tensor_active_mean=None)
    reports = {}
    for name, data in (("plain", snapshot), ("named", named)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        out = tmp_path / name
        proc = run_cli("report", "--snapshot", str(path), "--out", str(out), "--no-record")
        assert proc.returncode == 0, proc.stderr
        reports[name] = json.loads((out / "report.json").read_text())
    steps = {n: {s["step"]: s for s in r["gate"]["steps"]} for n, r in reports.items()}
    assert steps["named"]["application"]["status"] == steps["plain"]["application"]["status"] == "not_done"
    assert "without a single value: pcie, occupancy, tensor" in steps["named"]["application"]["evidence"]
    assert reports["named"]["first_screen"]["gate"] == reports["plain"]["first_screen"]["gate"]


# --- 8. fleet: the totals are the sums of the single-cluster reviews -----------------------


def test_two_snapshots_give_a_fleet_review_whose_totals_are_the_sums(run_cli, tmp_path: Path) -> None:
    demo = json.loads(gzip.decompress(DEMO.read_bytes()))
    a = copy.deepcopy(demo)
    a["cluster"] = {**(a.get("cluster") or {}), "context": "prod-a"}
    b = copy.deepcopy(demo)
    b["cluster"] = {**(b.get("cluster") or {}), "context": "prod-b"}
    # prod-b: no Kueue-gated pods and one node fewer
    b["objects"]["pods"] = [p for p in b["objects"]["pods"] if not p["spec"].get("schedulingGates")]
    gone = next(n["metadata"]["name"] for n in b["objects"]["nodes"] if n["metadata"]["name"].startswith("l40s"))
    b["objects"]["nodes"] = [n for n in b["objects"]["nodes"] if n["metadata"]["name"] != gone]
    b["objects"]["pods"] = [p for p in b["objects"]["pods"] if p["spec"].get("nodeName") != gone]
    singles = {}
    for name, snapshot in (("prod-a", a), ("prod-b", b)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(snapshot))
        proc = run_cli(
            "report", "--snapshot", str(path), "--out", str(tmp_path / name), "--no-record", "--gpu-hour-price", "2.5"
        )
        assert proc.returncode == 0, proc.stderr
        singles[name] = json.loads((tmp_path / name / "report.json").read_text())
    out, history = tmp_path / "fleet", tmp_path / "runs.sqlite"
    # the two snapshots in one folder: `--snapshot DIR` reads each
    fleet_dir = tmp_path / "snapshots"
    fleet_dir.mkdir()
    for name in ("prod-a", "prod-b"):
        (tmp_path / f"{name}.json").rename(fleet_dir / f"{name}.json")
    proc = run_cli(
        "report", "--snapshot", str(fleet_dir), "--out", str(out), "--history", str(history), "--gpu-hour-price", "2.5"
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads((out / "report.json").read_text())
    assert [c["cluster"] for c in document["clusters"]] == ["prod-a", "prod-b"]
    totals = document["totals"]
    for key in ("total", "allocated", "active", "resident_idle", "idle", "free"):
        expected = sum(s["first_screen"]["gpus"][key] for s in singles.values())
        assert totals["gpus"][key] == pytest.approx(expected, abs=0.01), key
    for key, path in (
        ("hardware_gpus", ("pending", "hardware_gpus")),
        ("achievable", ("whatif", "achievable")),
        ("hardware_gap", ("hardware_needed", "gap")),
        ("idle_cost_per_month", ("cost", "allocated_idle_per_month")),
    ):
        expected = sum(s["first_screen"][path[0]][path[1]] for s in singles.values())
        assert totals[key] == pytest.approx(expected, abs=0.01), key
    assert totals["gpus"]["total"] < 2 * singles["prod-a"]["first_screen"]["gpus"]["total"]  # the clusters differ
    # one fleet review on top, each cluster's own below it, history keyed by cluster
    assert document["kind"] == "gpuaudit-fleet-report"
    assert "prod-b/report.html" in (out / "report.html").read_text()
    assert (out / "prod-a" / "report.json").exists() and (out / "prod-b" / "report.md").exists()
    assert [len(history_runs(history, name)) for name in ("prod-a", "prod-b")] == [1, 1]


def test_unread_scheduler_events_make_hardware_demand_unknown() -> None:
    from gpuaudit.report.build import partial_input

    state = SimpleNamespace(unread=frozenset({"events"}), unknown_gpu_nodes=())
    partial = partial_input(state)
    assert partial["partial"] and "hardware_demand" in partial["unknown"]
    assert "total" not in partial["unknown"]  # what events do not touch stays known
