"""Prometheus recording and alerting rules from the policy pack (pure: data in,
rule groups out).

The rules count GPUs in the classes the capacity review counts (active,
resident-idle, idle, no data; free; pending) with the thresholds of the rules
that judge the same thing (``report.holders.Thresholds``, GPA-ME-001/003,
GPA-AL-201, GPA-AP-202) and the telemetry params of
``gpuaudit/data/promql.yaml`` (``resident_fb_mib``, ``idle_compute``), so a
dashboard built on them and the monthly review agree.

Two levels, each rule self-contained (it names raw series or the first
level's, never a rule of its own level), so that ``promtool tsdb
create-blocks-from rules`` can backfill each level in one pass:

1. ``gpuaudit-gpu``: one value per GPU row per evaluation interval, over the
   DCGM exporter series, canonical labels (namespace, pod, container, node,
   gpu, uuid, model, mig_profile, mig_id), fresh samples only (a sample older
   than one interval is not repeated into the next step). These are what
   ``gpuaudit audit`` reads instead of its subqueries when they exist
   (``sources/prometheus.py``).
2. ``gpuaudit-availability``: per pod over the window, as the review
   classifies (``report.holders.classify``), joined with kube-state-metrics:
   GPUs held per (namespace, pod, node, gpu_model, state), free per node and
   pending per namespace.

Alerts read the second level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import msgspec

from gpuaudit.engine.evaluate import DEFAULT_MIN_COVERAGE, DEFAULT_MIN_SPAN_HOURS
from gpuaudit.report.holders import Thresholds

# Recorded series (the names follow level:metric:operation).
GPU_COMPUTE = "gpuaudit:gpu_compute:ratio"
GPU_COMPUTE_TIME = "gpuaudit:gpu_compute_sample:timestamp"
GPU_FB_USED = "gpuaudit:gpu_fb_used:mib"
GPU_RESIDENT = "gpuaudit:gpu_resident:bool"
GPU_RESIDENT_IDLE = "gpuaudit:gpu_resident_idle:bool"
# What the per-GPU level was made with: the audit reads the recorded series
# only when they are alike (interval = its --step, same telemetry params).
RULES_INFO = "gpuaudit:gpu_rules:info"
GPU_PCIE = "gpuaudit:gpu_pcie:bytes_per_second"
POD_GPUS = "gpuaudit:pod_gpus:sum"
GPUS_FREE = "gpuaudit:node_gpus_free:sum"
GPUS_PENDING = "gpuaudit:namespace_gpus_pending:sum"

STATES = ("active", "resident_idle", "idle", "no_data")
# Canonical GPU row labels, in the order promql.yaml's `keys` list them.
ROW_KEYS = ("namespace", "pod", "container", "node", "gpu", "uuid", "model", "mig_profile", "mig_id")
KSM_GPU = 'resource="nvidia_com_gpu"'
# The node label that names the GPU model (GPU feature discovery), as
# kube-state-metrics exports it when allowed (--metric-labels-allowlist).
NODE_PRODUCT_LABEL = "label_nvidia_com_gpu_product"


class Candidate(msgspec.Struct, frozen=True):
    metric: str
    divisor: float = 1.0


class Inputs(msgspec.Struct, frozen=True):
    """Everything the rules are made from; ``rules``: rule id -> (severity,
    params, docs) of the loaded pack with the site's overrides."""

    keys: Mapping[str, Sequence[str]]  # promql.yaml keys: canonical key -> labels by precedence
    compute: Sequence[Candidate]  # the compute signal's candidates, in fallback order
    telemetry: Mapping[str, Any]  # promql.yaml params with the site's (resident_fb_mib, idle_compute...)
    rules: Mapping[str, Mapping[str, Any]]
    window_s: int = 86400  # the window each pod is judged over
    interval_s: int = 60  # the per-GPU level's evaluation interval (the audit's --step)
    class_interval_s: int = 300  # the availability level's


def _num(value: float) -> str:
    value = float(value)
    if value.is_integer():
        return str(int(value))
    return repr(value)


def duration(seconds: float) -> str:
    """A Prometheus duration: the largest unit that divides it (90m, 1d, 57s)."""
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class _Params:
    def __init__(self, rules: Mapping[str, Mapping[str, Any]]):
        self.rules = rules

    def get(self, rule_id: str, name: str, default: float) -> float:
        params = (self.rules.get(rule_id) or {}).get("params") or {}
        value = params.get(name, default)
        return float(value)


# --- level 1: per GPU row ------------------------------------------------------------


def canonical(expr: str, keys: Mapping[str, Sequence[str]], exporter_pod_regex: str | None) -> str:
    """``avg by (ROW_KEYS)`` of ``expr`` with each key taken from the first
    non-empty label of its list (as promql.canonicalise, under the key's own
    name); a pod label naming the exporter's own pod means no pod."""
    for key in ROW_KEYS:
        for source in reversed(list(keys.get(key) or [key])):
            if source != key:
                expr = f'label_replace({expr}, "{key}", "$1", "{source}", "(.+)")'
    if exporter_pod_regex:
        pattern = f".*(?:{exporter_pod_regex}).*"
        for key in ("namespace", "container", "pod"):  # pod last: the others test it
            expr = f'label_replace({expr}, "{key}", "", "pod", {_string(pattern)})'
    return f"avg by ({', '.join(ROW_KEYS)}) ({expr})"


def _string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _fresh(metric: str, interval_s: int) -> str:
    return f"(timestamp({metric}) > time() - {interval_s})"


def compute_expr(inputs: Inputs, *, timestamps: bool = False) -> str:
    """The compute ratio of each GPU row, fresh samples only, from the first
    candidate it has; ``signal`` names the metric. ``timestamps``: the time of
    that sample instead of its value."""
    exporter = str(inputs.telemetry.get("exporter_pod_regex") or "") or None
    parts = []
    for cand in inputs.compute:
        fresh = _fresh(cand.metric, inputs.interval_s)
        value = fresh if timestamps else f"({cand.metric} / {_num(cand.divisor)} and {fresh})"
        body = canonical(value, inputs.keys, exporter)
        parts.append(f'label_replace({body}, "signal", "{cand.metric}", "", "")')
    return "\nor ignoring (signal)\n".join(parts)


def fb_expr(inputs: Inputs) -> str:
    exporter = str(inputs.telemetry.get("exporter_pod_regex") or "") or None
    fresh = _fresh("DCGM_FI_DEV_FB_USED", inputs.interval_s)
    return canonical(f"(DCGM_FI_DEV_FB_USED and {fresh})", inputs.keys, exporter)


def gpu_rules(inputs: Inputs) -> list[dict[str, Any]]:
    resident = _num(inputs.telemetry.get("resident_fb_mib", 1024))
    idle = _num(inputs.telemetry.get("idle_compute", 0.05))
    exporter = str(inputs.telemetry.get("exporter_pod_regex") or "") or None
    compute = compute_expr(inputs)
    pcie = canonical("(DCGM_FI_PROF_PCIE_TX_BYTES + DCGM_FI_PROF_PCIE_RX_BYTES)", inputs.keys, exporter)
    info = {"interval_seconds": str(inputs.interval_s), "resident_fb_mib": resident, "idle_compute": idle}
    return [
        {"record": RULES_INFO, "expr": "vector(1)", "labels": info},
        {"record": GPU_COMPUTE, "expr": compute},
        {"record": GPU_COMPUTE_TIME, "expr": compute_expr(inputs, timestamps=True)},
        {"record": GPU_FB_USED, "expr": fb_expr(inputs)},
        {"record": GPU_RESIDENT, "expr": f"{fb_expr(inputs)} > bool {resident}"},
        {
            # 1 when a model is resident (VRAM over resident_fb_mib) and compute
            # is under idle_compute; only steps where both have a fresh sample
            "record": GPU_RESIDENT_IDLE,
            "expr": f"({fb_expr(inputs)} > bool {resident})\n* ignoring (signal)\n(({compute}) < bool {idle})",
        },
        {"record": GPU_PCIE, "expr": pcie},
    ]


# --- level 2: per pod over the window, joined with kube-state-metrics -----------------


class _Pod:
    """Per-pod aggregates over the window from the level-1 series, rolled up
    over the pod's GPU rows as ``model.telemetry.ROLLUP`` does."""

    def __init__(self, inputs: Inputs):
        w = duration(inputs.window_s)
        i = inputs.interval_s
        by = "by (namespace, pod)"
        sel = '{pod!=""}'
        self.mean = f"avg {by} (avg_over_time({GPU_COMPUTE}{sel}[{w}]))"
        self.p95 = f"max {by} (quantile_over_time(0.95, {GPU_COMPUTE}{sel}[{w}]))"
        self.resident_idle = f"avg {by} (avg_over_time({GPU_RESIDENT_IDLE}{sel}[{w}]))"
        self.pcie = f"sum {by} (avg_over_time({GPU_PCIE}{sel}[{w}]))"
        # steps with a sample / steps from the first to the last sample of the
        # row in the window (the audit's coverage over the pod's own life)
        first = f"min_over_time({GPU_COMPUTE_TIME}{sel}[{w}])"
        last = f"max_over_time({GPU_COMPUTE_TIME}{sel}[{w}])"
        count = f"count_over_time({GPU_COMPUTE_TIME}{sel}[{w}])"
        steps = f"(ceil({last} / {i}) - ceil({first} / {i}) + 1)"
        self.coverage = f"avg {by} (clamp_max({count} / {steps}, 1))"
        # hours from the first to the last sample (the rules' min_span_hours)
        self.span_hours = f"min {by} (({last} - {first}) / 3600)"


def _judged(pod: _Pod, min_coverage: float, min_span_hours: float | None = None) -> str:
    out = f"({pod.coverage} >= {_num(min_coverage)})"
    if min_span_hours:
        out += f" and ({pod.span_hours} >= {_num(min_span_hours)})"
    return out


def pod_state_exprs(inputs: Inputs) -> dict[str, str]:
    """Per state, the (namespace, pod) series of the pods in it, as
    ``report.holders.classify`` decides: thin data is no_data, never idle."""
    limits = Thresholds.from_rules(
        SimpleNamespace(id=rule_id, params=rule.get("params") or {}) for rule_id, rule in inputs.rules.items()
    )
    pod = _Pod(inputs)
    ri, r_mean, r_p95 = limits.resident_idle, limits.resident_compute_mean, limits.resident_compute_p95
    active, coverage = limits.active_compute, limits.min_coverage
    judged = _judged(pod, coverage)
    resident_idle = (
        f"(({pod.resident_idle} >= {_num(ri)}) and ({pod.mean} < {_num(r_mean)}) and {judged})"
        f" unless ({pod.p95} >= {_num(r_p95)})"
    )
    return {
        "resident_idle": resident_idle,
        "active": f"(({pod.mean} >= {_num(active)}) and {judged}) unless ({resident_idle})",
        "idle": f"(({pod.mean} < {_num(active)}) and {judged}) unless ({resident_idle})",
    }


def held_expr(*, whole_only: bool = False) -> str:
    """GPUs held per (namespace, pod, node, gpu_model): requests of pods bound
    to a node and not finished (kube-state-metrics), with the node's model.
    ``whole_only`` is the same here: nvidia_com_gpu counts whole GPUs."""
    requests = f'kube_pod_container_resource_requests{{{KSM_GPU},node!=""}}'
    alive = 'max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running"} == 1)'
    model = (
        f'max by (node, gpu_model) (label_replace(kube_node_labels, "gpu_model", "$1", "{NODE_PRODUCT_LABEL}", "(.+)"))'
    )
    return (
        f"(sum by (namespace, pod, node) ({requests})\n"
        f"  * on (namespace, pod) group_left () {alive})\n"
        f"* on (node) group_left (gpu_model) (0 * {model} + 1)"
    )


def availability_rules(inputs: Inputs) -> list[dict[str, Any]]:
    states = pod_state_exprs(inputs)
    held = held_expr()
    out = []
    for state in ("active", "resident_idle", "idle"):
        expr = f"{held}\nand on (namespace, pod) ({states[state]})"
        out.append({"record": POD_GPUS, "expr": expr, "labels": {"state": state}})
    known = " or ".join(f"({states[s]})" for s in ("active", "resident_idle", "idle"))
    out.append(
        {
            "record": POD_GPUS,
            "expr": f"({held})\nunless on (namespace, pod) ({known})",
            "labels": {"state": "no_data"},
        }
    )
    allocatable = f"sum by (node) (kube_node_status_allocatable{{{KSM_GPU}}})"
    held_by_node = f"sum by (node) ({held})"
    model = (
        f'max by (node, gpu_model) (label_replace(kube_node_labels, "gpu_model", "$1", "{NODE_PRODUCT_LABEL}", "(.+)"))'
    )
    out.append(
        {
            # GPUs a pod could be scheduled on now: none on a cordoned node
            "record": GPUS_FREE,
            "expr": (
                f"clamp_min({allocatable} - ({held_by_node} or 0 * {allocatable}), 0)\n"
                f"* on (node) group_left (gpu_model) (0 * {model} + 1)\n"
                f"unless on (node) (kube_node_spec_unschedulable == 1)"
            ),
        }
    )
    pending = (
        f'sum by (namespace, pod) (kube_pod_container_resource_requests{{{KSM_GPU},node=""}})\n'
        f'* on (namespace, pod) group_left () (max by (namespace, pod) (kube_pod_status_phase{{phase="Pending"}}) == 1)'
    )
    # The scheduler has said why (PodScheduled=False, Unschedulable) or not yet.
    unschedulable = "max by (namespace, pod) (kube_pod_status_unschedulable) == 1"
    out.append(
        {
            "record": GPUS_PENDING,
            "expr": (
                f"label_replace(sum by (namespace) (({pending}) and on (namespace, pod) ({unschedulable})), "
                f'"reason", "unschedulable", "", "")\n'
                f"or label_replace(sum by (namespace) (({pending}) unless on (namespace, pod) ({unschedulable})), "
                f'"reason", "not_yet_scheduled", "", "")'
            ),
        }
    )
    return out


# --- alerts ------------------------------------------------------------------------------


def _fix(docs: str) -> str:
    """The rule's "Fix:" sentence(s), on one line."""
    match = re.search(r"Fix:(.*)", docs or "", re.S)
    return " ".join(match.group(1).split()) if match else "see the rule's documentation"


def _runbook(inputs: Inputs, rule_id: str) -> str:
    docs = str((inputs.rules.get(rule_id) or {}).get("docs") or "")
    return f"gpuaudit rules explain {rule_id} -- Fix: {_fix(docs)}"


def _for(inputs: Inputs, rule_id: str) -> str:
    """``for:``: the rule's min_span_hours (the pod's life in the window a
    verdict needs; the engine's default when the rule has none)."""
    hours = _Params(inputs.rules).get(rule_id, "min_span_hours", DEFAULT_MIN_SPAN_HOURS)
    return duration(hours * 3600)


def _severity(inputs: Inputs, rule_id: str) -> str:
    return str((inputs.rules.get(rule_id) or {}).get("severity") or "medium")


def alert_rules(inputs: Inputs) -> list[dict[str, Any]]:
    params = _Params(inputs.rules)
    pod = _Pod(inputs)
    window = duration(inputs.window_s)
    held = held_expr()
    never_ri = params.get("GPA-ME-003", "min_resident_idle_fraction", 0.9)
    never_p95 = params.get("GPA-ME-003", "max_compute_p95", 0.05)
    never_cov = params.get("GPA-ME-003", "min_coverage", DEFAULT_MIN_COVERAGE)
    never_span = params.get("GPA-ME-003", "min_span_hours", DEFAULT_MIN_SPAN_HOURS)
    idle_mean = params.get("GPA-AL-201", "max_compute", 0.1)
    idle_p95 = params.get("GPA-AL-201", "max_compute_p95", 0.3)
    idle_cov = params.get("GPA-AL-201", "min_coverage", DEFAULT_MIN_COVERAGE)
    idle_span = params.get("GPA-AL-201", "min_span_hours", DEFAULT_MIN_SPAN_HOURS)
    pcie_min = params.get("GPA-AP-202", "min_pcie_bps", 2e9)
    pcie_compute = params.get("GPA-AP-202", "max_compute", 0.4)
    pcie_cov = params.get("GPA-AP-202", "min_coverage", DEFAULT_MIN_COVERAGE)
    pcie_span = params.get("GPA-AP-202", "min_span_hours", DEFAULT_MIN_SPAN_HOURS)
    ri_span = params.get("GPA-ME-001", "min_span_hours", DEFAULT_MIN_SPAN_HOURS)

    def alert(name: str, rule_id: str, expr: str, summary: str, description: str) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": _for(inputs, rule_id),
            "labels": {"severity": _severity(inputs, rule_id), "gpuaudit_rule": rule_id},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook": _runbook(inputs, rule_id),
            },
        }

    resident = f'{POD_GPUS}{{state="resident_idle"}} > 0\nand on (namespace, pod) ({pod.span_hours} >= {_num(ri_span)})'
    never = (
        f"({pod.resident_idle} >= {_num(never_ri)}) and ({pod.p95} < {_num(never_p95)})"
        f" and {_judged(pod, never_cov, never_span)}"
    )
    whole_idle = (
        f"({held})\nand on (namespace, pod) "
        f"(({pod.mean} < {_num(idle_mean)}) and ({pod.p95} < {_num(idle_p95)})"
        f" and {_judged(pod, idle_cov, idle_span)})"
    )
    waiting = (
        f"({pod.pcie} >= {_num(pcie_min)}) and ({pod.mean} < {_num(pcie_compute)})"
        f" and {_judged(pod, pcie_cov, pcie_span)}"
    )
    return [
        alert(
            "GPUModelResidentIdle",
            "GPA-ME-001",
            resident,
            "{{ $labels.namespace }}/{{ $labels.pod }} keeps a model resident on idle GPUs",
            f"{{{{ $value }}}} GPU(s) on {{{{ $labels.node }}}} held with a model resident in VRAM and compute "
            f"under the idle threshold over the last {window} (the review's resident-idle class).",
        ),
        alert(
            "GPUModelResidentNeverUsed",
            "GPA-ME-003",
            never,
            "{{ $labels.namespace }}/{{ $labels.pod }} keeps a model resident and essentially never computes",
            f"Resident-idle in {{{{ $value | humanizePercentage }}}} of the samples over the last {window}, "
            f"95th percentile of compute under {_num(never_p95)}.",
        ),
        alert(
            "GPUWholeAllocatedIdle",
            "GPA-AL-201",
            whole_idle,
            "{{ $labels.namespace }}/{{ $labels.pod }} holds whole GPUs at low activity",
            f"{{{{ $value }}}} whole GPU(s) on {{{{ $labels.node }}}}: compute mean under {_num(idle_mean)} and "
            f"95th percentile under {_num(idle_p95)} over the last {window}.",
        ),
        alert(
            "GPUPodsPendingWhileFree",
            "GPA-PL-102",
            f"sum by (gpu_model) ({GPUS_FREE}) > 0\nand on () sum({GPUS_PENDING}) > 0",
            "GPU pods are pending while {{ $value }} {{ $labels.gpu_model }} GPU(s) are free",
            "Pods that ask for GPUs are not placed although GPUs are free: a placement problem "
            "(selectors, tolerations, spread, quota), not a capacity one. `gpuaudit audit` names "
            "the cause per pod.",
        ),
        alert(
            "GPUWorkWaitingOnHost",
            "GPA-AP-202",
            waiting,
            "{{ $labels.namespace }}/{{ $labels.pod }} moves data over PCIe at low GPU activity",
            f"{{{{ $value | humanize }}}}B/s over PCIe (TX+RX) at compute mean under {_num(pcie_compute)} "
            f"over the last {window}: the work waits on the host.",
        ),
    ]


def rule_groups(inputs: Inputs) -> list[dict[str, Any]]:
    """The rule groups, in evaluation order."""
    return [
        {"name": "gpuaudit-gpu", "interval": duration(inputs.interval_s), "rules": gpu_rules(inputs)},
        {
            "name": "gpuaudit-availability",
            "interval": duration(inputs.class_interval_s),
            "rules": availability_rules(inputs),
        },
        {"name": "gpuaudit-alerts", "interval": duration(inputs.class_interval_s), "rules": alert_rules(inputs)},
    ]


def prometheus_rule(
    groups: Sequence[Mapping[str, Any]],
    *,
    name: str = "gpuaudit",
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The prometheus-operator PrometheusRule holding ``groups``."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {
        "app.kubernetes.io/name": "gpuaudit",
        "app.kubernetes.io/component": "monitoring",
        **(labels or {}),
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": list(groups)},
    }
