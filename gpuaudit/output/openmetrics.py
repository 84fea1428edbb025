"""OpenMetrics: one run's results as gauges a Prometheus scrapes (the report
server's /metrics) or a Pushgateway holds.

The text is written by ``prometheus_client`` (the Prometheus project's Python
client): its exposition escapes label values (cluster text: a namespace, a
pending cause) and writes HELP, TYPE, UNIT and ``# EOF`` as the format
wants, and it checks metric names and units. Every family is a gauge (the
build info too, as ``gpuaudit_build_info``, Prometheus' own convention):
a run's counts are a state, not a count since a start, and the Prometheus
text format, which ``promtool check metrics`` and a Pushgateway parse, has no
``info`` type. Imported only when this format is asked for.

Context the caller may give (keyword arguments of :func:`render`):

- ``run``: ``{"finished_at": epoch s, "duration_seconds": s, "collected_at":
  epoch s or None}``; without it the run's time is not written;
- ``gpu_states``: ``report/states.gpu_states`` of a cluster run; without
  it (a manifest check) no GPU families are written.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gpuaudit import __version__
from gpuaudit.model import AuditResult

if TYPE_CHECKING:  # prometheus_client is imported when metrics are made: `partial` needs none of it
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import CollectorRegistry

_SURROGATE = re.compile("[\ud800-\udfff]")
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# The Prometheus text format (0.0.4): what a Pushgateway is sent.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _gauge(name: str, documentation: str, labels: tuple[str, ...] = (), unit: str = "") -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, documentation, labels=list(labels), unit=unit)


def partial(result: AuditResult) -> bool:
    """The run could not read all it should have: an input error (the run
    exits 2), or kinds of cluster object left unread."""
    return any(e.level == "error" for e in result.errors) or bool((result.cluster or {}).get("partial"))


def families(
    result: AuditResult, run: Mapping[str, Any] | None = None, gpu_states: Mapping[str, Any] | None = None
) -> list[Metric]:
    """Every family of the run, in a fixed order; label values as they come
    (the exposition escapes them)."""
    out: list[Metric] = []
    build = _gauge("gpuaudit_build_info", "The gpuaudit that wrote these metrics.", ("version",))
    build.add_metric([__version__], 1)
    out.append(build)
    out.extend(_run(result, run or {}))
    findings = _gauge(
        "gpuaudit_findings",
        "Findings of the run (exempted ones left out), by rule, severity, category and namespace.",
        ("rule", "severity", "category", "namespace"),
    )
    counts = Counter((f.rule, f.severity, f.category, f.resource.namespace or "") for f in result.findings)
    for key, count in sorted(counts.items()):
        findings.add_metric(list(key), count)
    out.append(findings)
    problems = _gauge("gpuaudit_input_problems", "Input problems of the run, by level (error: exit 2).", ("level",))
    levels = Counter(e.level for e in result.errors)
    for level in ("error", "warning"):
        problems.add_metric([level], levels.get(level, 0))
    out.append(problems)
    if gpu_states is not None:
        out.extend(_gpus(gpu_states))
    return out


def _run(result: AuditResult, run: Mapping[str, Any]) -> Iterator[Metric]:
    partial_run = _gauge(
        "gpuaudit_run_partial",
        "1 when the run could not read all its input (an input error, objects left unread): "
        "its numbers are incomplete.",
    )
    partial_run.add_metric([], 1 if partial(result) else 0)
    yield partial_run
    for key, name, help_text in (
        ("finished_at", "gpuaudit_run_timestamp_seconds", "When the run ended, in seconds since the epoch."),
        ("duration_seconds", "gpuaudit_run_duration_seconds", "How long the run took."),
        (
            "collected_at",
            "gpuaudit_snapshot_timestamp_seconds",
            "When the cluster state the run judged was read (a replayed snapshot's time).",
        ),
    ):
        value = run.get(key)
        if value is not None:
            family = _gauge(name, help_text, unit="seconds")
            family.add_metric([], float(value))
            yield family


def _gpus(states: Mapping[str, Any]) -> Iterator[Metric]:
    by_state = _gauge(
        "gpuaudit_gpus",
        "Physical GPUs by state, as the capacity review counts them: allocated ones active, resident_idle, idle "
        "or no_data (telemetry cannot judge them), by namespace and GPU model; unallocated ones free (on "
        "schedulable nodes) or cordoned, by GPU model.",
        ("state", "namespace", "model"),
        unit="gpus",
    )
    allocated = _gauge(
        "gpuaudit_allocated_gpus",
        "Physical GPUs allocated to pods, by namespace and GPU model (the sum of the allocated states).",
        ("namespace", "model"),
        unit="gpus",
    )
    node_gpus = _gauge(
        "gpuaudit_node_gpus", "Physical GPUs on the cluster's nodes, by GPU model.", ("model",), unit="gpus"
    )
    held: dict[tuple[str, str], float] = {}
    for row in states.get("held") or []:
        by_state.add_metric([row["state"], row["namespace"], row["model"]], row["gpus"])
        key = (row["namespace"], row["model"])
        held[key] = held.get(key, 0.0) + row["gpus"]
    for row in states.get("nodes") or []:  # None: unknown in a partial run, left out
        for state in ("free", "cordoned"):
            if row[state] is not None:
                by_state.add_metric([state, "", row["model"]], row[state])
        if row["total"] is not None:
            node_gpus.add_metric([row["model"]], row["total"])
    for (namespace, model), gpus in sorted(held.items()):
        allocated.add_metric([namespace, model], round(gpus, 2))
    pending_gpus = _gauge(
        "gpuaudit_pending_gpus",
        "GPUs that pending pods ask for, by namespace and the cause the scheduler gives "
        "(allocation, placement, quota, dra, gated, unknown).",
        ("namespace", "cause"),
        unit="gpus",
    )
    pending_pods = _gauge(
        "gpuaudit_pending_pods", "Pending GPU pods, by namespace and cause.", ("namespace", "cause"), unit="pods"
    )
    for row in states.get("pending") or []:
        pending_gpus.add_metric([row["namespace"], row["cause"]], row["gpus"])
        pending_pods.add_metric([row["namespace"], row["cause"]], row["pods"])
    unknown = _gauge(
        "gpuaudit_gpus_unknown",
        "1 for each count this partial run could not make (held, total, free, pending): its samples are left out.",
        ("count",),
    )
    for name in states.get("unknown") or []:
        unknown.add_metric([name], 1)
    yield from (by_state, allocated, node_gpus, pending_gpus, pending_pods, unknown)


class _Collected:
    """The families of one run, as a registry collects them."""

    def __init__(self, metrics: list[Metric]):
        self._metrics = metrics

    def collect(self) -> list[Metric]:
        for metric in self._metrics:
            metric.samples = [s._replace(labels=_encodable(s.labels)) for s in metric.samples]
        return self._metrics


def _encodable(labels: Mapping[str, str]) -> dict[str, str]:
    """Label values the exposition can write as UTF-8: a lone surrogate (cluster
    text JSON can carry, no character of its own) becomes U+FFFD; every other
    character is kept, escaped by the exposition where it must be."""
    return {k: _SURROGATE.sub("\ufffd", v) for k, v in labels.items()}


def _registry(metrics: list[Metric]) -> CollectorRegistry:
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(metrics))
    return registry


def render(
    result: AuditResult,
    *,
    run: Mapping[str, Any] | None = None,
    gpu_states: Mapping[str, Any] | None = None,
    **_: Any,
) -> str:
    from prometheus_client.openmetrics.exposition import generate_latest

    return generate_latest(_registry(families(result, run, gpu_states))).decode("utf-8")


def render_text(
    result: AuditResult, *, run: Mapping[str, Any] | None = None, gpu_states: Mapping[str, Any] | None = None
) -> str:
    """The same families in the Prometheus text format (0.0.4), for a Pushgateway."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(_registry(families(result, run, gpu_states))).decode("utf-8")
