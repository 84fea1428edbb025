"""The message a run sends to a webhook: its headline, the review's decision
(``report``), the first actions or findings, and a link to the report.

Two bodies from one message: ``slack`` (Slack's incoming-webhook JSON, text
and blocks, which Mattermost, Rocket.Chat and Teams' Slack-compatible hooks
also take) and ``json`` (the message as plain data, for a bridge of your
own). Cluster text is cleaned of terminal and bidi controls, and in Slack's
mrkdwn its ``&``, ``<`` and ``>`` are escaped, so a workload name cannot
make a link or a mention. Nothing secret goes in: the webhook URL never, the
report URL only because the user gave it to be shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpuaudit.model import SEVERITIES, AuditResult
from gpuaudit.safetext import one_line

FORMATS = ("slack", "json")
TOP = 5
# Slack's limits: a header's text, a section's text, blocks per message.
_HEADER_CHARS = 150
_SECTION_CHARS = 3000


def _count(value: Any) -> str:
    return "unknown" if value is None else f"{value:g}"


def message(
    result: AuditResult,
    *,
    command: str,
    cluster: str | None = None,
    review: Mapping[str, Any] | None = None,
    report_url: str | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """The notification as plain data. ``cluster``: the name the review
    gives it (config ``report.cluster_name``, else the kubeconfig context);
    ``review``: the capacity review's document (report.json) when ``report``
    sends it."""
    severities = Counter(f.severity for f in result.findings)
    by_rule: dict[str, dict[str, Any]] = {}
    for f in result.findings:
        row = by_rule.setdefault(f.rule, {"rule": f.rule, "severity": f.severity, "title": f.title, "findings": 0})
        row["findings"] += 1
    top = sorted(by_rule.values(), key=lambda r: (SEVERITIES.index(r["severity"]), -r["findings"], r["rule"]))[:TOP]
    counted = ", ".join(f"{severities[s]} {s}" for s in SEVERITIES if severities.get(s))
    findings_line = f"{len(result.findings)} findings" + (f" ({counted})" if counted else "")
    totals = result.cluster or {}
    decision = None
    actions: list[dict[str, Any]] = []
    name = one_line((review or {}).get("cluster") or cluster or "the cluster")
    if review is not None:
        first = review.get("first_screen") or {}
        gate = first.get("gate") or {}
        decision = {k: one_line(gate.get(k) or "") for k in ("decision", "headline", "reason")}
        gpus, pending = first.get("gpus") or {}, first.get("pending") or {}
        headline = (
            f"{name}, {one_line((review.get('period') or {}).get('name') or '')}: "
            f"{decision['headline']}. {_count(gpus.get('allocated'))} of {_count(gpus.get('total'))} GPUs allocated, "
            f"{_count(gpus.get('active'))} active, {_count(gpus.get('resident_idle'))} resident and idle; "
            f"{_count(pending.get('gpus'))} GPUs pending; {findings_line}."
        )
        for a in (first.get("actions") or [])[:TOP]:
            w = a.get("workload") or {}
            actions.append(
                {
                    "workload": f"{one_line(w.get('kind'))} {one_line(w.get('namespace'))}/{one_line(w.get('name'))}",
                    "gpus_freed": a.get("gpus_freed"),
                    "usd_per_month": a.get("usd_per_month"),
                    "how": one_line((a.get("how") or [""])[0]),
                }
            )
    elif totals:
        headline = (
            f"{name}: {_count(totals.get('gpus_allocated'))} of {_count(totals.get('gpus_total'))} GPUs "
            f"allocated, {_count(totals.get('pending_gpu_pods'))} GPU pods pending; {findings_line}."
        )
    else:
        headline = f"{findings_line} in {result.resources} objects."
    return {
        "kind": "gpuaudit-notification",
        "version": 1,
        "command": command,
        "cluster": name if totals else None,
        "headline": ("Partial run: " if partial else "") + headline,
        "partial": partial,
        "decision": decision,
        "findings": {"total": len(result.findings), **{s: severities.get(s, 0) for s in SEVERITIES}},
        "top_findings": [{**r, "title": one_line(r["title"])} for r in top],
        "actions": actions,
        "report_url": report_url,
    }


def _mrkdwn(text: str) -> str:
    """Slack's escaping: the three characters that make links, mentions and entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack(msg: Mapping[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook body: ``text`` (the notification's fallback)
    and blocks: the headline, the decision, the list, the link."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(f"gpuaudit {msg['command']}", _HEADER_CHARS)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _clip(_mrkdwn(msg["headline"]), _SECTION_CHARS)}},
    ]
    if msg.get("decision"):
        d = msg["decision"]
        text = f"*Decision: {_mrkdwn(d['headline'])}* ({_mrkdwn(d['decision'])})\n{_mrkdwn(d['reason'])}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, _SECTION_CHARS)}})
    if msg.get("actions"):
        lines = [
            f"• {_mrkdwn(a['workload'])}: frees {_count(a['gpus_freed'])} GPU{'' if a['gpus_freed'] == 1 else 's'}"
            + (f" (${a['usd_per_month']:,}/month)" if a.get("usd_per_month") is not None else "")
            + f": {_mrkdwn(a['how'])}"
            for a in msg["actions"]
        ]
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _clip("*First actions*\n" + "\n".join(lines), _SECTION_CHARS)},
            }
        )
    if msg.get("top_findings"):
        lines = [
            f"• `{_mrkdwn(r['rule'])}` {r['severity']}: {_mrkdwn(r['title'])} ({r['findings']})"
            for r in msg["top_findings"]
        ]
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _clip("*Top findings*\n" + "\n".join(lines), _SECTION_CHARS)},
            }
        )
    if msg.get("report_url"):
        # the URL goes in as the user gave it, inside Slack's <url|label> link syntax:
        # a | or > in it would end the link, so those are percent-encoded
        url = msg["report_url"].replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{url}|Open the report>"}]})
    return {"text": _clip(_mrkdwn(msg["headline"]), _SECTION_CHARS), "blocks": blocks}


def body(msg: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """The body to post in ``fmt`` (one of :data:`FORMATS`)."""
    return slack(msg) if fmt == "slack" else dict(msg)
