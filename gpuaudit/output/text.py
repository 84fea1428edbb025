"""Text for people: findings grouped in the diagnostic order, colour on a TTY,
each finding with the command that explains its rule; wrapped to the
terminal's width when there is one, a count per rule for a large run."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuaudit.model import CATEGORIES, SEVERITIES, AuditResult, Finding
from gpuaudit.model.findings import NOT_SAID_HERE
from gpuaudit.safetext import one_line

_COLOURS = {"critical": "1;31", "high": "31", "medium": "33", "low": "36", "info": "2"}
INDENT = " " * 11  # under the rule id: two spaces, the severity column (8), one space
# More findings than this: a count per rule closes the report.
SUMMARY_AFTER = 20
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


def _wrapped(text: str, width: int | None, indent: str = "") -> list[str]:
    """``text`` under a finding: one line, or wrapped to ``width`` columns."""
    prefix = indent + INDENT
    if not width or width <= len(prefix) + 20 or len(prefix) + len(text) <= width:
        return [prefix + text]
    import textwrap  # only on a terminal narrower than the line: most output is not wrapped

    return textwrap.wrap(
        text, width=width, initial_indent=prefix, subsequent_indent=prefix, break_on_hyphens=False
    ) or [prefix]


def _by_category(findings: list[Finding], paint: Any, width: int | None, indent: str) -> list[str]:
    """Findings in the diagnostic order of their categories, each block under its name."""
    lines: list[str] = []
    by_category: dict[str, list[Finding]] = {c: [] for c in CATEGORIES}
    for f in findings:
        by_category.setdefault(f.category, []).append(f)
    for category, group in by_category.items():
        if not group:
            continue
        lines.append(indent + paint("1", category.upper()))
        group.sort(key=lambda f: (SEVERITIES.index(f.severity), f.rule, f.location.file, f.location.line or 0))
        for f, repeats in _collapse_replicas(group):
            where = f.location.file or "cluster"
            if f.location.line:
                where += f":{f.location.line}"
            r = f.resource
            what = r.label()
            if r.node and r.kind != "Node":
                what += f" on {r.node}"
            # Padded outside the colour: the escape codes take no columns.
            label = f.severity.upper()
            severity = paint(_COLOURS[f.severity], label) + " " * max(0, 8 - len(label))
            lines.append(f"{indent}  {severity} {f.rule}  {one_line(where)}  {one_line(what)}")
            lines += _wrapped(one_line(f.message), width, indent)
            if repeats:
                pods = ", ".join(one_line(_pod(x)) for x in repeats[:5])
                more = f" and {len(repeats) - 5} more" if len(repeats) > 5 else ""
                lines += _wrapped(f"... and the same for {len(repeats)} more pod(s): {pods}{more}", width, indent)
            lines.append(indent + INDENT + paint("2", f"explain: gpuaudit rules explain {f.rule}"))
        lines.append("")
    return lines


def render(
    result: AuditResult,
    *,
    colour: bool = False,
    width: int | None = None,
    quiet: bool = False,
    **_: Any,
) -> str:
    """``width``: the terminal's columns (None: no wrapping); ``quiet``: leave
    out the skipped rules and the telemetry line (findings, input problems,
    the cluster line and the summary stay)."""

    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    lines: list[str] = []
    # A check of several deployable units groups by unit first (the units
    # that hold a finding: a base under several roots is one group of its own).
    by_unit: dict[tuple[str, ...], list[Finding]] = {}
    for f in result.findings:
        by_unit.setdefault(f.units, []).append(f)
    for units, findings in by_unit.items():
        if units:
            lines.append(paint("1", ("UNIT " if len(units) == 1 else "UNITS ") + one_line(", ".join(units))))
        lines += _by_category(findings, paint, width, indent="  " if units else "")
    if len(result.findings) > SUMMARY_AFTER:
        lines.append(paint("1", "BY RULE"))
        per_rule = Counter(f.rule for f in result.findings)
        titles = {f.rule: f.title for f in result.findings}
        severities = {f.rule: f.severity for f in result.findings}
        for rule_id, n in sorted(per_rule.items(), key=lambda kv: (-kv[1], SEVERITIES.index(severities[kv[0]]), kv[0])):
            lines.append(f"  {n:>5}  {rule_id:<11} {severities[rule_id]:<8} {one_line(titles[rule_id])}")
        lines.append("")
    if result.skipped and not quiet:
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
            ", ".join(f"{n} {one_line(cause)}" for cause, n in sorted((c["pending_by_cause"] or {}).items())) or "none"
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
    if result.telemetry is not None and not quiet:
        t = result.telemetry
        window = f"{t['window_seconds'] / 3600:g} h" if t.get("window_seconds") else "unknown window"
        signal = one_line(t.get("signal") or "no compute signal")
        lines.append(
            f"Telemetry ({one_line(t.get('source'))}, {signal}, {window}): "
            f"{t['gpu_pods_with_data']} of {t['gpu_pods']} GPU pods have data; "
            "the rest are reported as insufficient data, never as idle."
        )
    counts = Counter(f.severity for f in result.findings)
    summary = ", ".join(f"{counts[s]} {s}" for s in SEVERITIES if counts[s]) or "none"
    # Held back for where their files sit (examples, tests): counted apart
    # from what the user exempted, so neither hides in the other.
    not_said = sum(1 for _, reason in result.suppressed if reason.startswith(NOT_SAID_HERE))
    exempted = len(result.suppressed) - not_said
    lines.append(
        f"{result.resources} objects, {result.gpu_workloads} GPU workloads, "
        f"{len(result.findings)} findings ({summary})"
        + (f", {exempted} exempted" if exempted else "")
        + (f", {not_said} not said in example or test folders (see JSON 'suppressed')" if not_said else "")
        + (f", {len(result.skipped)} rules skipped" if result.skipped else "")
        + (f", {len(result.errors)} input problems" if result.errors else "")
    )
    return "\n".join(lines) + "\n"


def _known(value: float | None) -> str:
    """A count, or "unknown" where what it depends on could not be read."""
    return "unknown" if value is None else f"{value:g}"
