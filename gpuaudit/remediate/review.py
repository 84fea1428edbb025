"""REVIEW.md: per change, the finding, the evidence and how it sized the
patch, what the patch changes, the expected effect, the risk and how to roll
it back; then the findings left without a patch and why. Pure text."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaudit.kube.podspecs import group_of
from gpuaudit.model import Finding
from gpuaudit.remediate import patches, volume
from gpuaudit.remediate.overlay import Overlay, build_command, dump
from gpuaudit.remediate.plan import Change, Plan
from gpuaudit.remediate.planners.common import REMEDIATED
from gpuaudit.safetext import clean

_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|#"})


def md(text: Any) -> str:
    """Cluster-supplied text, inert in Markdown (one line, no terminal
    control or bidi override, specials escaped)."""
    return " ".join(clean(text).split()).translate(_MD_SPECIAL)


def code(text: Any) -> str:
    value = " ".join(clean(text).split())
    fence = "``" if "`" in value else "`"
    return f"{fence} {value} {fence}" if fence == "``" else f"`{value}`"


SHORT = 100  # a value this long or shorter is shown inline; a longer one as a diff block
NOT_REMEDIATED_ROWS = 200  # REVIEW.md lists this many; NOT-REMEDIATED.md holds them all
HELD_ROWS = 20


def _value(value: Any) -> str:
    if value is ...:
        return "(unset)"
    return code(json.dumps(value, ensure_ascii=False))


def _short(value: Any) -> bool:
    return value is ... or len(json.dumps(value, ensure_ascii=False)) <= SHORT


def _block(old: Any, new: Any) -> list[str]:
    """A long value's change as a unified diff of its YAML, fenced (inert in
    Markdown: the fence is longer than any backtick run in the text)."""

    def lines(value: Any) -> list[str]:
        return [] if value is ... else clean(dump(value, sort_keys=True)).splitlines()

    body = list(difflib.unified_diff(lines(old), lines(new), "before", "after", n=2, lineterm=""))[2:]
    longest = max((len(m) for m in re.findall(r"`+", "\n".join(body))), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"    {fence}diff", *(f"    {line}" for line in body), f"    {fence}"]


# Placeholders a tool fills in before apply (envsubst, Flux postBuild, CI
# templating): ${VAR}, $VAR. Kubernetes' own $(VAR) is expanded from the
# container's env at run time and is not one.
_PLACEHOLDER = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def placeholders(value: Any) -> list[str]:
    """The ${VAR} / $VAR placeholders in the strings of ``value``."""
    found: list[str] = []
    if isinstance(value, str):
        found += _PLACEHOLDER.findall(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            found += placeholders(k) + placeholders(v)
    elif isinstance(value, list):
        for v in value:
            found += placeholders(v)
    return sorted(set(found))


def recreated(change: Change) -> str | None:
    """Why the patch cannot be applied to the running object in place: a
    Job's pod template and most of a Pod's spec are immutable."""
    api_version, kind, _, _ = change.target
    paths = [p for p, _, _ in patches.changes(change.before, change.after)]
    if kind == "Job" and group_of(api_version) == "batch" and any(p.startswith("/spec/template") for p in paths):
        return (
            "a Job's pod template cannot be changed in place: the API server refuses the patch. Delete the Job "
            "and create it again from the patched manifest (kubectl delete job, then apply; its pods restart), "
            "or change the manifest or controller that creates it"
        )
    mutable = ("/spec/tolerations", "/spec/activeDeadlineSeconds", "/metadata")
    in_spec = [p for p in paths if p.startswith("/spec") and not p.startswith(mutable)]
    if kind == "Pod" and api_version == "v1" and in_spec:
        return (
            "a Pod's spec cannot be changed in place (only tolerations may be added and a deadline set): "
            "delete the Pod and create it again from the patched manifest, or change the workload that creates it"
        )
    return None


def _where(finding: Finding, labels: dict[int, str]) -> str:
    doc = finding.subject.document if finding.subject is not None else None
    file = labels.get(id(doc), finding.location.file) if doc is not None else finding.location.file
    if not file:
        return ""
    line = f":{finding.location.line}" if finding.location.line else ""
    return f"{file}{line}"


def _object(target: Sequence[str]) -> str:
    api_version, kind, namespace, name = target
    return f"{api_version} {kind} {namespace + '/' if namespace else ''}{name}"


def render(
    plan: Plan,
    overlay: Overlay,
    directory: str,
    inputs: Sequence[str],
    labels: dict[int, str] | None = None,
    *,
    held: Sequence[volume.Group] = (),
    top: int = 0,
    apply_first: str | None = None,
) -> str:
    """``labels``: display names for documents read from a kustomize build
    (by ``id(document)``), since their findings point into that output.
    ``held``: the objects whose patches --top ``top`` left out of this
    overlay; ``apply_first``: the sibling overlay (fix --split-by) that holds
    the sharing config this one's moves request."""
    labels = labels or {}
    out: list[str] = []
    fixed = len(plan.fixed_findings)
    out.append("# gpuaudit fix: review\n")
    out.append(
        f"Generated by `gpuaudit fix` from {', '.join(code(i) for i in inputs)}: "
        f"{len(plan.changes)} change(s) fix {fixed} finding(s); {len(plan.skipped)} finding(s) "
        "have no patch (listed at the end, with the reason).\n"
    )
    out.append(
        "Every patch is a separate file listed in `kustomization.yaml`, applied in order. "
        f"Each patched object gets the annotation `{REMEDIATED}` naming the rules it fixes. "
        "This overlay holds only the objects it changes; apply it on top of your usual "
        "deployment.\n"
    )
    out.append("Check it before merging:\n")
    out.append("```sh")
    out.append(f"{build_command(plan, directory)}   # the patched objects")
    live = any(s.kind == "generated" and s.content for s in plan.sources)
    if live:  # the bases leave env values and credentials out: the cluster keeps its own
        out.append(f"kubectl apply --server-side -k {directory} --dry-run=server   # against the cluster")
    else:
        out.append(f"kubectl apply -k {directory} --dry-run=server   # against the cluster")
    out.append("```\n")
    if live:
        out.append(
            "The objects in `base/` are the cluster's as read, less env values the audit does not "
            "read and anything that looks like a credential (each file says what it leaves out): "
            "apply with `--server-side`, under which the cluster keeps what a file leaves out.\n"
        )
    if overlay.copies:
        out.append(
            "Inputs outside this folder are copied into `base/` as they were read (kustomize "
            "only reads files inside an overlay): when the originals change, run `gpuaudit fix` "
            "again, or make them a Kustomize base and point `resources:` at it.\n"
        )
    if apply_first is not None:
        out.append(
            f"Some patches here move workloads to a shared GPU that the overlay in `../{apply_first}/` "
            "advertises (its sharing config): apply that one first.\n"
        )
    freed = _freed(plan)
    if plan.changes:
        total = sum(freed.values())
        out.append(
            f"Patches are ordered by the GPUs they free (about {total:,.1f} in all; a move to a share frees "
            "all but its share of the GPU), an object's patches together.\n"
        )
        out.append("| # | change | fixes | frees GPUs | confidence |")
        out.append("|---|---|---|---|---|")
        for c in plan.changes:
            # A sharing config frees nothing itself: the moves that request its share do.
            frees = "— (the moves' share)" if c.remediation in volume.SHARING_CONFIG else f"{freed[c.number]:,.1f}"
            rules = ", ".join(c.rules)
            out.append(f"| {c.number} | {md(c.rendered.summary)} | {rules} | {frees} | {c.proposal.confidence} |")
        out.append("")
    if held:
        out.extend(_held(held, top))
    for change in plan.changes:
        out.extend(_change_section(change, overlay, labels))
    if plan.skipped:
        out.extend(not_remediated(plan.skipped, labels, limit=NOT_REMEDIATED_ROWS))
    return "\n".join(out)


def _freed(plan: Plan) -> dict[int, float]:
    replicas = volume.share_replicas(plan)
    return {c.number: volume.gpus_freed(c, replicas) for c in plan.changes}


def _held(held: Sequence[volume.Group], top: int) -> list[str]:
    count = sum(len(g.changes) for g in held)
    frees = sum(g.frees for g in held)
    lines = [
        "## Held back\n",
        f"This overlay holds the first {top} patch(es) by GPUs freed (`--top {top}`). {count} more patch(es) on "
        f"{len(held)} object(s), freeing about {frees:,.1f} GPU(s), are not in it: review and merge these "
        "first, then run `gpuaudit fix` again (or `--top 0` for all, `--split-by namespace` for one overlay "
        "per namespace).\n",
        "| object | changes | frees GPUs |",
        "|---|---|---|",
    ]
    for group in held[:HELD_ROWS]:
        kinds = ", ".join(dict.fromkeys(c.remediation for c in group.changes))
        lines.append(f"| {md(_object(group.target))} | {md(kinds)} | {group.frees:,.1f} |")
    if len(held) > HELD_ROWS:
        lines.append(f"| ... {len(held) - HELD_ROWS} more object(s) | | |")
    lines.append("")
    return lines


def not_remediated(skipped: Sequence[Any], labels: Mapping[int, str], limit: int | None = None) -> list[str]:
    """The findings without a patch, with why: a table, by rule and object;
    past ``limit`` rows, a pointer to NOT-REMEDIATED.md, which holds them all."""
    rows = sorted(skipped, key=lambda s: (s.finding.rule, s.finding.resource.namespace or "", s.finding.resource.name))
    lines = ["## Not remediated\n"]
    counts: dict[str, int] = {}
    for skip in rows:
        counts[skip.finding.rule] = counts.get(skip.finding.rule, 0) + 1
    if limit is not None and len(rows) > limit:
        lines.append(
            f"{len(rows)} finding(s) have no patch ({', '.join(f'{r}: {n}' for r, n in counts.items())}); the "
            f"first {limit} by rule and object are listed here, all of them in `NOT-REMEDIATED.md`.\n"
        )
    lines += ["| rule | object | where | why |", "|---|---|---|---|"]
    for skip in rows[:limit] if limit is not None else rows:
        r = skip.finding.resource
        obj = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}"
        where = _where(skip.finding, dict(labels)) or "live state"
        lines.append(f"| {skip.finding.rule} | {md(obj)} | {md(where)} | {md(skip.reason)} |")
    lines.append("")
    return lines


def render_not_remediated(skipped: Sequence[Any], labels: Mapping[int, str]) -> str:
    return "# gpuaudit fix: findings without a patch\n\n" + "\n".join(not_remediated(skipped, labels)[1:])


def render_index(plan: Plan, parts: Mapping[str, Any], directory: str, inputs: Sequence[str], by: str) -> str:
    """REVIEW.md at the top of a split overlay (fix --split-by): one row per
    folder, and the findings without a patch."""
    out = [
        "# gpuaudit fix: review (split by " + by + ")\n",
        f"Generated by `gpuaudit fix` from {', '.join(code(i) for i in inputs)}: one overlay per {by}, each "
        "in its own folder with its own REVIEW.md; build and merge each on its own.\n",
        "| folder | patches | frees GPUs | held back (--top) |",
        "|---|---|---|---|",
    ]
    for folder, part in parts.items():
        held = sum(len(g.changes) for g in part.held)
        out.append(f"| `{directory}/{folder}` | {len(part.plan.changes)} | {part.frees:,.1f} | {held} |")
    out.append("")
    if plan.skipped:
        out.extend(not_remediated(plan.skipped, {}, limit=NOT_REMEDIATED_ROWS))
    return "\n".join(out)


def _change_section(change: Change, overlay: Overlay, labels: dict[int, str]) -> list[str]:
    assert change.patch is not None
    fmt = "strategic merge" if change.patch.format == "strategic-merge" else "JSON 6902"
    lines = [f"## {change.number}. {md(change.rendered.summary)}\n"]
    lines.append(f"- **Patch**: `{overlay.patch_paths[change.number]}` ({fmt}) on {code(_object(change.target))}")
    for path in overlay.resource_paths.get(change.number, []):
        lines.append(f"- **Adds**: `{path}`")
    for finding in change.findings:
        where = _where(finding, labels)
        at = f" at {code(where)}" if where else ""
        lines.append(f"- **Finding**: {finding.rule} ({finding.severity}){at}: {md(finding.message)}")
        evidence = ", ".join(f"{code(k)} = {_value(v)}" for k, v in finding.evidence.items() if k != "params")
        if evidence:
            lines.append(f"  - evidence: {evidence}")
    lines.append(f"- **Sized from** ({change.proposal.confidence}): {md(change.proposal.basis)}")
    diffs = patches.changes(change.before, change.after)
    if diffs:
        lines.append("- **Changes**:")
        for path, old, new in diffs:
            if _short(old) and _short(new):
                lines.append(f"  - {code(path)}: {_value(old)} → {_value(new)}")
            else:
                lines.append(f"  - {code(path)}:")
                lines.extend(_block(old, new))
    assert change.patch is not None
    copied = placeholders(change.patch.document)
    if copied:
        lines.append(
            f"- **Placeholder**: the patch copies {', '.join(code(p) for p in copied)} from the input as text. "
            "If a tool fills placeholders in before apply (envsubst, Flux postBuild substitution, a CI "
            "template), run this overlay through it too, or the literal text reaches the cluster; if a shell "
            "in the container expands it at run time, nothing to do"
        )
    remake = recreated(change)
    if remake:
        lines.append(f"- **Apply**: {md(remake)}")
    lines.append(f"- **Expected effect**: {md(change.rendered.effect)}")
    lines.append(f"- **Risk**: {md(change.rendered.risk)}")
    for step in change.rendered.steps:
        lines.append(f"- **Also do**: {md(step)}")
    lines.append(f"- **Roll back**: {md(change.rendered.rollback)}")
    lines.append("")
    return lines
