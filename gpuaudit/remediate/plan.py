"""Findings -> changes: which finding gets which patch, in which order, on
which object, and which findings get none (and why). Pure: the fix command
reads the inputs and writes the overlay.

Findings are planned in the diagnostic order (allocation first, sharing
last), so the sharing config can be sized from the workloads the same overlay
moves to a share. Changes to one object are planned against the object as the
earlier changes left it, and kustomize applies them in the same order.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec
import msgspec.structs
import yaml

from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.kube.shapes import ObjectId, object_id
from gpuaudit.model import CATEGORIES, Container, Document, Finding, PodTemplate
from gpuaudit.model.workload_builder import WorkloadMemo
from gpuaudit.remediate import coherence, patches, templates
from gpuaudit.remediate.edits import EditError, apply_edits
from gpuaudit.remediate.planners import PLANNERS, TAKE_GPUS_AWAY, further_saving
from gpuaudit.remediate.planners.common import REMEDIATED, Context, Declined, Proposal, RunState


class Source(msgspec.Struct, frozen=True):
    """Where objects came from, as the overlay will reference them: a
    manifest file, or a kustomize directory (whose built output was audited)."""

    label: str
    path: Path
    kind: Literal["file", "kustomize", "generated"]
    ids: tuple[ObjectId, ...] = ()
    problem: str | None = None  # why kustomize cannot take it as a resource
    load_restrictor_none: bool = False
    content: str | None = None  # for "generated": the base file's text (live objects)


class Change(msgspec.Struct):
    remediation: str
    variant: str | None
    findings: list[Finding]
    proposal: Proposal
    rendered: templates.Rendered
    target: ObjectId
    source: Source
    before: dict[str, Any]
    after: dict[str, Any]
    number: int = 0
    patch: patches.Patch | None = None
    new_objects: list[dict[str, Any]] = msgspec.field(default_factory=list)

    @property
    def rules(self) -> list[str]:
        return sorted({f.rule for f in self.findings})


class Skip(msgspec.Struct, frozen=True):
    finding: Finding
    reason: str


class Plan(msgspec.Struct):
    changes: list[Change] = msgspec.field(default_factory=list)
    skipped: list[Skip] = msgspec.field(default_factory=list)
    sources: list[Source] = msgspec.field(default_factory=list)
    # Every changed object: as read, and as the overlay must build it.
    expected: dict[ObjectId, tuple[dict[str, Any], dict[str, Any]]] = msgspec.field(default_factory=dict)

    @property
    def fixed_findings(self) -> list[Finding]:
        return [f for c in self.changes for f in c.findings]

    @property
    def load_restrictor_none(self) -> bool:
        return any(s.load_restrictor_none for s in self.sources)


def describe_manifests(text: str) -> tuple[tuple[ObjectId, ...], str | None]:
    """The ids of the objects in a manifest file, and why kustomize would
    refuse the file as a resource (None when it would take it)."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        return (), f"not valid YAML ({str(exc).splitlines()[0]})"
    ids: list[ObjectId] = []
    for doc in docs:
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) else None
        is_list = isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List")
        for obj in items if is_list and isinstance(items, list) else [doc]:
            if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
                return (), "holds a document that is not a Kubernetes object"
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                return (), f"a {obj.get('kind')} has no metadata.name (generateName is not enough)"
            ids.append(object_id(obj))
    return tuple(ids), None


def ambiguous(a: ObjectId, b: ObjectId) -> bool:
    """Whether one kustomize patch target could match both objects (targets
    leave out the namespace of objects that have none)."""
    return group_of(a[0]) == group_of(b[0]) and a[1] == b[1] and a[3] == b[3] and (a[2] == b[2] or not a[2] or not b[2])


class Settings(msgspec.Struct, frozen=True):
    """Parameters beyond the rules': the site's (config `site:`) and the
    command line's (`--set NAME=VALUE`, `--set REMEDIATION.NAME=VALUE`)."""

    site: Mapping[str, Any] = msgspec.field(default_factory=dict)
    overrides: Mapping[str, Any] = msgspec.field(default_factory=dict)

    def params_for(self, remediation: str, finding_params: Mapping[str, Any]) -> dict[str, Any]:
        params = dict(templates.param_defaults().get(remediation, {}))
        params.update(finding_params)
        params.update({k: v for k, v in self.site.items() if k in params})
        for key, value in self.overrides.items():
            target, _, name = key.rpartition(".")
            if target in ("", remediation) and name in params:
                params[name] = value
        return params


class Recheck(Protocol):
    """The rules asked again about an object as the plan changes it."""

    def still_found(self, finding: Finding, obj: Mapping[str, Any]) -> bool:
        """Whether ``finding``'s rule still reports it on ``obj``."""
        ...

    def brought(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Finding]:
        """The findings on ``after`` that ``before`` did not have."""
        ...


def plan_fixes(
    items: Sequence[tuple[Finding, Source]],
    locators: Mapping[tuple[str, str], KindLocator],
    settings: Settings,
    run: RunState | None = None,
    recheck: Recheck | None = None,
    *,
    memo: WorkloadMemo | None = None,
) -> Plan:
    """``run``: what the planners know of the whole input beyond each finding
    (the `.shared` names it advertises, live evidence per workload, the
    coherence setting). ``recheck``: whether a finding's rule still
    reports it on the object as the earlier changes left it (when not, those
    changes fix it too), and what a change would bring: a change after which
    a rule reports what it did not before (a container cut below a whole
    node that sets no memory request) is declined with that finding.

    With ``run.coherence`` set, the plan is checked (remediate/coherence.py):
    a change that would leave its object incoherent is declined with the
    reason, and the findings are planned again without it (later changes on
    the same object, and the sharing config sized from the moves, follow).
    Each pass builds the workloads only of objects no earlier pass built
    (``memo``: the run's, else one for this plan): the originals once, and
    the objects a pass changed."""
    run = run or RunState()
    memo = memo or WorkloadMemo()
    forced: dict[int, str] = {}
    base = msgspec.structs.replace(run, sharers=[])
    if run.coherence is not None and not run.advertised:
        base.advertised = coherence.advertised(run.world, run.coherence, _world_labels(run.world, {}, []))
    plan = Plan()
    passes = 6
    for attempt_number in range(passes + 1):
        attempt = msgspec.structs.replace(base, sharers=[], candidates=[])
        plan = _plan_once(items, locators, settings, attempt, recheck, forced, memo)
        if run.coherence is None:
            break
        world, labels = _world(plan, run.world)
        names = coherence.advertised(world, run.coherence, labels)
        incoherent = _incoherent(plan, run.coherence, names, memo)
        if not incoherent and names == base.advertised:
            break
        last = attempt_number >= passes - 1
        for change, reasons in incoherent:
            why = "the patch would break the workload: " + "; ".join(reasons)
            # Findings another change's rule fixed along the way are planned
            # again on their own; on the last pass every change on an object
            # still incoherent goes, so what is written is always coherent.
            for c in plan.changes if last else [change]:
                if c.target != change.target:
                    continue
                for finding in c.findings:
                    if last or (finding.remediation or {}).get("id") == c.remediation:
                        forced[id(finding)] = why
        base.advertised = names
    run.sharers[:] = attempt.sharers
    return plan


def _world_labels(
    objects: Sequence[Mapping[str, Any]], patched: Mapping[ObjectId, Any], added: Sequence[Mapping[str, Any]]
) -> dict[ObjectId, str]:
    labels = {}
    for obj in objects:
        oid = object_id(obj)
        name = f"{oid[1]} {oid[2] + '/' if oid[2] else ''}{oid[3]}"
        labels[oid] = f"{name} (patched by this overlay)" if oid in patched else f"{name} (in the inputs)"
    for obj in added:
        oid = object_id(obj)
        labels[oid] = f"{oid[1]} {oid[2] + '/' if oid[2] else ''}{oid[3]} (added by this overlay)"
    return labels


def _world(plan: Plan, inputs: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], dict[ObjectId, str]]:
    """Every object once the overlay applies: inputs as patched, plus the new ones."""
    patched = {oid: after for oid, (_, after) in plan.expected.items()}
    added = [o for c in plan.changes for o in c.new_objects]
    objects = [patched.get(object_id(o), o) for o in inputs]
    seen = {object_id(o) for o in objects}
    objects += [after for oid, after in patched.items() if oid not in seen]
    objects += added
    return objects, _world_labels(objects, patched, added)


def _incoherent(
    plan: Plan, setting: Any, names: Mapping[str, str], memo: WorkloadMemo
) -> list[tuple[Change, list[str]]]:
    """Every change whose result brings a new problem (on its object, after
    the changes before it), with why."""
    out = []
    by_target: dict[ObjectId, list[Change]] = {}
    for change in plan.changes:
        by_target.setdefault(change.target, []).append(change)
    for target, changes in by_target.items():
        original = plan.expected[target][0]
        lowers: frozenset[str] = frozenset()
        seen: set[str] = set()
        for change in changes:
            lowers |= change.proposal.lowers
            found = coherence.problems(original, change.after, setting, names, lowers, memo)
            new = [p for p in found if p not in seen]
            if new:
                out.append((change, new))
            seen.update(found)
    return out


def _plan_once(
    items: Sequence[tuple[Finding, Source]],
    locators: Mapping[tuple[str, str], KindLocator],
    settings: Settings,
    run: RunState,
    recheck: Recheck | None,
    forced: Mapping[int, str],
    memo: WorkloadMemo,
) -> Plan:
    plan = Plan()
    working: dict[ObjectId, dict[str, Any]] = {}
    original: dict[ObjectId, dict[str, Any]] = {}
    included: dict[str, Source] = {}
    by_scope: dict[tuple[ObjectId, str, str], Change] = {}

    def order(item: tuple[Finding, Source]) -> tuple[int, bool, str, str, int]:
        f = item[0]
        category = CATEGORIES.index(f.category) if f.category in CATEGORIES else len(CATEGORIES)
        takes_away = (f.remediation or {}).get("id") in TAKE_GPUS_AWAY
        return (category, not takes_away, f.rule, f.location.file, f.location.line or 0)

    for finding, source in sorted(items, key=order):
        reason = forced.get(id(finding)) or _unplannable(finding, source)
        if reason:
            plan.skipped.append(Skip(finding, reason))
            continue
        remediation = str(finding.remediation["id"])  # type: ignore[index]
        doc: Document = finding.subject.document
        target = object_id(doc.obj)
        conflict = _conflict(source, included)
        if conflict:
            plan.skipped.append(Skip(finding, conflict))
            continue
        current = working.get(target)
        if current is None:
            current = copy.deepcopy(dict(doc.obj))
            original[target] = copy.deepcopy(current)
        elif recheck is not None and not recheck.still_found(finding, current):
            earlier = [c for c in plan.changes if c.target == target]
            earlier[-1].findings.append(finding)
            continue
        ctx = _context(finding, doc, current, locators, settings, run, remediation, memo)
        if isinstance(ctx, str):
            plan.skipped.append(Skip(finding, ctx))
            continue
        proposal = PLANNERS[remediation].plan(ctx)
        if isinstance(proposal, Declined):
            # An earlier change of the same remediation on this object already
            # did what this finding asks (two rules about one whole GPU): it
            # fixes this one too, rather than a decline that contradicts it.
            pointer = finding.subject.typed.pointer or ""
            same = [
                c
                for c in plan.changes
                if c.target == target
                and c.remediation == remediation
                and c.proposal.scope.split("#")[0]
                and pointer.startswith(c.proposal.scope.split("#")[0])
            ]
            if same:
                same[-1].findings.append(finding)
            else:
                plan.skipped.append(Skip(finding, proposal.reason))
            continue
        key = (target, remediation, proposal.scope)
        if key in by_scope:  # another finding about the same thing: one patch for both
            by_scope[key].findings.append(finding)
            continue
        try:
            rendered = templates.render(remediation, proposal.variant, {**ctx.params, **proposal.params})
            after = apply_edits(current, rendered.edits)
        except (templates.TemplateError, EditError) as exc:
            plan.skipped.append(Skip(finding, f"remediation {remediation} failed: {exc}"))
            continue
        if after == current and not rendered.resources:
            plan.skipped.append(Skip(finding, "the patch would change nothing"))
            continue
        brought = [
            b
            for b in (recheck.brought(current, after) if recheck is not None else [])
            if not further_saving((b.remediation or {}).get("id"), proposal.lowers)
        ]
        if brought:
            b = brought[0]
            plan.skipped.append(Skip(finding, f"the patch would bring {b.rule}: {b.message}"))
            continue
        clash = _new_object_clash(rendered.resources, included, plan)
        if clash:
            plan.skipped.append(Skip(finding, clash))
            continue
        change = Change(
            remediation,
            proposal.variant,
            [finding],
            proposal,
            rendered,
            target,
            source,
            current,
            after,
            new_objects=[copy.deepcopy(o) for o in rendered.resources],
        )
        if proposal.share is not None:
            run.sharers.append(proposal.share)
        by_scope[key] = change
        plan.changes.append(change)
        working[target] = after
        included.setdefault(source.label, source)

    _finish(plan, working, original, included)
    return plan


def _unplannable(finding: Finding, source: Source) -> str | None:
    if not finding.remediation:
        return f"rule {finding.rule} has no remediation yet"
    remediation = str(finding.remediation.get("id"))
    if remediation not in PLANNERS:
        return f"no template for remediation {remediation!r} in remediations/ yet"
    subject = finding.subject
    if subject is None or subject.document is None:
        return source.problem or "found in live cluster state: fix it with --snapshot FILE"
    if source.problem:
        return f"{source.label}: kustomize cannot use it as a resource: {source.problem}"
    if not object_id(subject.document.obj)[3]:
        return "the object has no metadata.name for a patch to target"
    return None


def _conflict(source: Source, included: Mapping[str, Source]) -> str | None:
    if source.label in included:
        return None
    for other in included.values():
        for a in source.ids:
            for b in other.ids:
                if ambiguous(a, b):
                    return (
                        f"{a[1]} {a[3]} is in both {source.label} and {other.label}: "
                        "one overlay cannot patch them apart"
                    )
    return None


def _new_object_clash(objects: Sequence[Mapping[str, Any]], included: Mapping[str, Source], plan: Plan) -> str | None:
    taken = [i for s in included.values() for i in s.ids]
    taken += [object_id(o) for c in plan.changes for o in c.new_objects]
    for obj in objects:
        new = object_id(obj)
        if any(ambiguous(new, t) for t in taken):
            return f"the new {new[1]} {new[3]} would clash with an object of the same name"
    return None


def _context(
    finding: Finding,
    doc: Document,
    current: dict[str, Any],
    locators: Mapping[tuple[str, str], KindLocator],
    settings: Settings,
    run: RunState,
    remediation: str,
    memo: WorkloadMemo,
) -> Context | str:
    facts = finding.subject.facts
    params = settings.params_for(remediation, (finding.remediation or {}).get("params") or {})
    template: PodTemplate | None = None
    container: Container | None = None
    working = Document(current, doc.file, doc.line, doc.lines, doc.base)
    if finding.subject.target in ("pod", "container"):
        # The template as the earlier changes left it, found by the pointer
        # the facts were computed at.
        workloads, _ = memo.build(working, locators)
        templates_ = [t for w in workloads for t in w.templates]
        pointer = finding.subject.typed.pointer
        if finding.subject.target == "pod":
            template = next((t for t in templates_ if t.pointer == pointer), None)
        else:
            for t in templates_:
                for c in (*t.containers, *t.init_containers):
                    if c.pointer == pointer:
                        template, container = t, c
            if container is None:
                return "its container is no longer where the facts found it"
        if template is None:
            return "its pod template is no longer where the facts found it"
    return Context(finding, facts, working, template, container, params, run)


def _finish(
    plan: Plan,
    working: Mapping[ObjectId, dict[str, Any]],
    original: Mapping[ObjectId, dict[str, Any]],
    included: Mapping[str, Source],
) -> None:
    plan.sources = list(included.values())
    rules_by_object: dict[ObjectId, set[str]] = {}
    for change in plan.changes:
        rules_by_object.setdefault(change.target, set()).update(change.rules)
    for number, change in enumerate(plan.changes, start=1):
        change.number = number
        value = ",".join(sorted(rules_by_object[change.target]))
        had = isinstance((original[change.target].get("metadata") or {}).get("annotations"), dict)
        change.patch = patches.encode(change.before, change.after, (REMEDIATED, value), had)
        for obj in change.new_objects:
            meta = obj.setdefault("metadata", {})
            meta.setdefault("annotations", {})[REMEDIATED] = ",".join(change.rules)
    for target, final in working.items():
        after = copy.deepcopy(final)
        meta = after.setdefault("metadata", {})
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        meta["annotations"] = {**annotations, REMEDIATED: ",".join(sorted(rules_by_object[target]))}
        plan.expected[target] = (original[target], after)
