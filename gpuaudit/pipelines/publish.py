"""What a run sends out after its outputs are written: its metrics to a
Pushgateway, its message to a webhook. Both go through ``webclient.send``
(no redirect followed, a deadline, a bounded answer, the URL never shown
past its origin). A failure is returned as a message, so that the caller
reports it after everything else is out (exit 2: an output that did not
reach its target, as a file that cannot be written)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from gpuaudit.model import AuditResult
from gpuaudit.webclient import SendFailed, send

PUSH_JOB = "gpuaudit"


class Targets(msgspec.Struct, frozen=True):
    """Where to publish (each None: off). ``webhook_url`` is a secret."""

    pushgateway: str | None = None
    webhook_url: str | None = None
    webhook_format: str = "slack"
    report_url: str | None = None

    @property
    def any(self) -> bool:
        return bool(self.pushgateway or self.webhook_url)


def metrics_context(result: AuditResult, *, finished_at: float, duration: float) -> dict[str, Any]:
    """What the openmetrics renderer needs beyond the result: the run's time
    (epoch seconds, wall), and for a cluster run its GPUs by state, counted
    as the capacity review counts them."""
    run: dict[str, Any] = {"finished_at": finished_at, "duration_seconds": duration}
    context: dict[str, Any] = {"run": run}
    if result.state is not None:
        from gpuaudit.report.states import gpu_states  # a cluster run only

        run["collected_at"] = result.state.collected_at.timestamp()
        context["gpu_states"] = gpu_states(result.state, result.subjects, result.rules)
    return context


def push_url(base: str, command: str) -> str:
    """The Pushgateway group a run replaces: ``/metrics/job/gpuaudit/command/<command>``
    under the URL given (audit and report each keep their own group), or the
    URL as given when it already names a group (``…/metrics/job/…``)."""
    if "/metrics/job/" in urlsplit(base).path:
        return base
    return f"{base.rstrip('/')}/metrics/job/{PUSH_JOB}/command/{quote(command, safe='')}"


def push_metrics(url: str, text: str, command: str, *, timeout: float = 15.0) -> str | None:
    """PUT the run's metrics (Prometheus text format) to the Pushgateway at
    ``url``: the group holds this run's metrics only. None, or why not."""
    from gpuaudit.output.openmetrics import TEXT_CONTENT_TYPE  # only when pushing

    try:
        send(
            push_url(url, command),
            text.encode(),
            what="Pushgateway",
            content_type=TEXT_CONTENT_TYPE,
            method="PUT",
            timeout=timeout,
        )
    except SendFailed as exc:
        return f"metrics not pushed: {exc}"
    return None


def notify(
    url: str,
    fmt: str,
    result: AuditResult,
    *,
    command: str,
    cluster: str | None = None,
    review: Mapping[str, Any] | None = None,
    report_url: str | None = None,
    partial: bool = False,
    timeout: float = 15.0,
) -> str | None:
    """POST the run's message to the webhook at ``url`` in ``fmt`` (slack or
    json). None, or why not (naming the webhook's origin only)."""
    from gpuaudit.output import webhook

    msg = webhook.message(
        result, command=command, cluster=cluster, review=review, report_url=report_url, partial=partial
    )
    payload = json.dumps(webhook.body(msg, fmt), ensure_ascii=True).encode()
    try:
        send(url, payload, what="webhook", content_type="application/json", timeout=timeout)
    except SendFailed as exc:
        return f"notification not sent: {exc}"
    return None


def publish(
    targets: Targets,
    result: AuditResult,
    *,
    command: str,
    metrics_text: str | None = None,
    cluster: str | None = None,
    review: Mapping[str, Any] | None = None,
    partial: bool = False,
) -> list[str]:
    """Send to every configured target; the messages of those that failed."""
    failed = []
    if targets.pushgateway and metrics_text is not None:
        failed.append(push_metrics(targets.pushgateway, metrics_text, command))
    if targets.webhook_url:
        failed.append(
            notify(
                targets.webhook_url,
                targets.webhook_format,
                result,
                command=command,
                cluster=cluster,
                review=review,
                report_url=targets.report_url,
                partial=partial,
            )
        )
    return [f for f in failed if f]
