"""Text for people: findings grouped in the diagnostic order, colour on a TTY."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuaudit.model import CATEGORIES, SEVERITIES, AuditResult, Finding
from gpuaudit.safetext import one_line

_COLOURS = {"critical": "1;31", "high": "31", "medium": "33", "low": "36", "info": "2"}
# Every field quotes input (names, files, messages): each is one line, with
# no terminal control (gpuaudit/safetext.py); the colours are the only ones.


def _pod(finding: Finding) -> str | None:
    """The live pod a cluster finding is about (None for manifests)."""
    facts = getattr(finding.subject, "facts", None) or {}
    return facts.get("pod") or finding.evidence.get("pod")


def _collapse_replicas(findings: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Replicas of one workload in a cluster break the same rule the same way:
    show the first pod's finding and name the others (JSON keeps them all)."""
    groups: dict[tuple, tuple[Finding, list[Finding]]] = {}
    out = []
    for f in findings:
        r = f.resource
        key = (f.rule, r.kind, r.namespace, r.name, r.container) if _pod(f) else (id(f),)
        if key in groups:
            groups[key][1].append(f)
        else:
            groups[key] = (f, [])
            out.append(groups[key])
    return out


def render(result: AuditResult, *, colour: bool = False, **_: Any) -> str:
    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    lines: list[str] = []
    by_category: dict[str, list[Finding]] = {c: [] for c in CATEGORIES}
    for f in result.findings:
        by_category.setdefault(f.category, []).append(f)
    for category, findings in by_category.items():
        if not findings:
            continue
        lines.append(paint("1", category.upper()))
        findings.sort(
            key=lambda f: (
                SEVERITIES.index(f.severity),
                f.rule,
                f.location.file,
                f.location.line or 0,
            )
        )
        for f, repeats in _collapse_replicas(findings):
            where = f.location.file or "cluster"
            if f.location.line:
                where += f":{f.location.line}"
            r = f.resource
            what = r.label()
            if r.node and r.kind != "Node":
                what += f" on {r.node}"
            severity = paint(_COLOURS[f.severity], f.severity.upper())
            lines.append(f"  {severity:<8} {f.rule}  {one_line(where)}  {one_line(what)}")
            lines.append(f"           {one_line(f.message)}")
            if repeats:
                pods = ", ".join(one_line(_pod(x)) for x in repeats[:5])
                more = f" and {len(repeats) - 5} more" if len(repeats) > 5 else ""
                lines.append(f"           ... and the same for {len(repeats)} more pod(s): {pods}{more}")
        lines.append("")
    if result.skipped:
        lines.append(paint("1", "SKIPPED"))
        by_reason: dict[str, list[str]] = {}
        for s in result.skipped:
            by_reason.setdefault(s.reason, []).append(s.rule)
        for reason, rule_ids in by_reason.items():
            lines.append(f"  {', '.join(rule_ids)}: {one_line(reason)}")
        lines.append("")
    if result.errors:
        lines.append(paint("1", "INPUT PROBLEMS"))
        for e in result.errors:
            where = e.file + (f":{e.line}" if e.line else "")
            lines.append(f"  {e.level}: {one_line(where)}: {one_line(e.message)}")
        lines.append("")
    if result.cluster is not None:
        c = result.cluster
        causes = (
            ", ".join(f"{n} {one_line(cause)}" for cause, n in sorted((c["pending_by_cause"] or {}).items()))
            or "none"
        )
        lines.append(
            f"Cluster: {_known(c['gpus_allocated'])} of {_known(c['gpus_total'])} GPUs allocated on "
            f"{_known(c['gpu_nodes'])} GPU nodes; {_known(c['pending_gpu_pods'])} GPU pods pending ({causes}); "
            f"{c['kueue_pending']} queued in Kueue."
            + (f" Partial: could not read {', '.join(one_line(r) for r in c['partial'])}." if c.get("partial") else "")
        )
        # Nodes whose GPU capacity could not be read: unknown, so in no total.
        unknown = result.state.unknown_gpu_nodes if result.state is not None else ()
        if unknown:
            shown = ", ".join(one_line(n) for n in unknown[:5])
            shown += f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            lines[-1] += f" GPUs unknown on {len(unknown)} node(s), left out of these totals: {shown}."
    if result.telemetry is not None:
        t = result.telemetry
        window = (
            f"{t['window_seconds'] / 3600:g} h" if t.get("window_seconds") else "unknown window"
        )
        signal = one_line(t.get("signal") or "no compute signal")
        lines.append(
            f"Telemetry ({one_line(t.get('source'))}, {signal}, {window}): "
            f"{t['gpu_pods_with_data']} of {t['gpu_pods']} GPU pods have data; "
            "the rest are reported as insufficient data, never as idle."
        )
    counts = Counter(f.severity for f in result.findings)
    summary = ", ".join(f"{counts[s]} {s}" for s in SEVERITIES if counts[s]) or "none"
    lines.append(
        f"{result.resources} objects, {result.gpu_workloads} GPU workloads, "
        f"{len(result.findings)} findings ({summary})"
        + (f", {len(result.suppressed)} exempted" if result.suppressed else "")
        + (f", {len(result.skipped)} rules skipped" if result.skipped else "")
        + (f", {len(result.errors)} input problems" if result.errors else "")
    )
    return "\n".join(lines) + "\n"


def _known(value: float | None) -> str:
    """A count, or "unknown" where what it depends on could not be read."""
    return "unknown" if value is None else f"{value:g}"
