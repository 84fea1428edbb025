"""Check a built overlay against the plan: every object is exactly what the
plan computed (patched ones) or what was read (the rest); auditing the built
output no longer shows the targeted findings and shows no new one. Pure: the
caller builds the overlay and supplies the audit."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from gpuaudit.kube import pointers
from gpuaudit.kube.shapes import ObjectId, object_id
from gpuaudit.model import Finding
from gpuaudit.remediate import coherence, patches
from gpuaudit.remediate.plan import Plan
from gpuaudit.remediate.planners import further_saving


class Verification(msgspec.Struct):
    fixed: list[Finding] = msgspec.field(default_factory=list)  # targeted, gone after the build
    remaining: list[Finding] = msgspec.field(default_factory=list)  # targeted, still there
    new: list[Finding] = msgspec.field(default_factory=list)  # in the build, not before
    # In the build, not before, on an object whose GPUs a change lowered, and
    # asking for fewer still (planners.further_saving): not a problem.
    further: list[Finding] = msgspec.field(default_factory=list)
    differences: list[str] = msgspec.field(default_factory=list)  # objects not as planned

    @property
    def ok(self) -> bool:
        return not (self.remaining or self.new or self.differences)

    @property
    def incoherent(self) -> list[str]:
        """The differences the coherence check found (remediate/coherence.py)."""
        return [d for d in self.differences if d.startswith(INCOHERENT)]


INCOHERENT = "incoherent: "


def finding_key(finding: Finding) -> tuple[Any, ...]:
    """A finding's identity across a rebuild: rule, object, container and the
    subject it judged (the pod template or container, by its pointer into the
    object). Not the field it points at: a patch that adds a GPU limit moves
    the pointer of a finding about that GPU without making it another one."""
    subject = finding.subject.typed.pointer if finding.subject is not None else None
    if subject is None:
        doc = finding.subject.document if finding.subject is not None else None
        subject = pointers.relative(finding.location.pointer, doc.base if doc else "")
    r = finding.resource
    return (finding.rule, r.api_version, r.kind, r.namespace, r.name, r.container, subject)


def verify(
    built: Sequence[Mapping[str, Any]],
    plan: Plan,
    originals: Mapping[ObjectId, Mapping[str, Any]],
    before: Sequence[Finding],
    audit: Callable[[], Sequence[Finding]],
    setting: coherence.Setting | None = None,
    world: Sequence[Mapping[str, Any]] | None = None,
) -> Verification:
    """``built``: the objects kustomize built; ``originals``: every object of
    the overlay's inputs as read; ``before``: findings on those inputs;
    ``audit``: the same rules run over the built output. With ``setting``,
    the built objects are also checked for coherence against the originals
    (``world``: every object of the inputs, for what advertises resources)."""
    result = Verification()
    expected: dict[ObjectId, Mapping[str, Any]] = {k: after for k, (_, after) in plan.expected.items()}
    for change in plan.changes:
        for new in change.new_objects:
            expected[object_id(new)] = dict(new)
    seen = set()
    for obj in built:
        oid = object_id(obj)
        seen.add(oid)
        want = expected.get(oid, originals.get(oid))
        if want is None:
            result.differences.append(f"{_name(oid)}: in the build but not in the inputs")
            continue
        for path, old, new in patches.changes(want, obj):
            result.differences.append(f"{_name(oid)} {path}: expected {old!r}, built {new!r}")
    for oid in expected:
        if oid not in seen:
            result.differences.append(f"{_name(oid)}: missing from the build")
    if setting is not None:
        result.differences += incoherent(built, plan, originals, world or [], setting)
    relevant = [f for f in before if _resource_id(f) in seen]
    after = list(audit())
    before_keys = {finding_key(f) for f in relevant}
    after_keys = {finding_key(f) for f in after}
    for finding in plan.fixed_findings:
        (result.remaining if finding_key(finding) in after_keys else result.fixed).append(finding)
    lowered: dict[ObjectId, frozenset[str]] = {}
    for change in plan.changes:
        lowered[change.target] = lowered.get(change.target, frozenset()) | change.proposal.lowers
    for f in after:
        if finding_key(f) in before_keys:
            continue
        saving = further_saving((f.remediation or {}).get("id"), lowered.get(_resource_id(f), frozenset()))
        (result.further if saving else result.new).append(f)
    return result


def incoherent(
    built: Sequence[Mapping[str, Any]],
    plan: Plan,
    originals: Mapping[ObjectId, Mapping[str, Any]],
    world: Sequence[Mapping[str, Any]],
    setting: coherence.Setting,
) -> list[str]:
    """Why the built objects would not work where the originals did: each
    built object against its original, lowering allowed only where a planned
    change on it says lowering is its purpose."""
    lowers: dict[ObjectId, frozenset[str]] = {}
    for change in plan.changes:
        lowers[change.target] = lowers.get(change.target, frozenset()) | change.proposal.lowers
    built_ids = {object_id(o): o for o in built}
    everything = [built_ids.pop(object_id(o), o) for o in world]
    everything += list(built_ids.values())
    # A patched object against the original its changes were planned on (two
    # files may hold objects of one name); the rest against what was read.
    before = {**originals, **{oid: original for oid, (original, _) in plan.expected.items()}}
    pairs = [(before[object_id(o)], o, lowers.get(object_id(o), frozenset())) for o in built if object_id(o) in before]
    found = coherence.check_all(pairs, everything, setting)
    return [f"{INCOHERENT}{_name(oid)}: {reason}" for oid, reasons in found.items() for reason in reasons]


def _resource_id(finding: Finding) -> ObjectId:
    r = finding.resource
    return (r.api_version, r.kind, r.namespace, r.name)


def _name(oid: ObjectId) -> str:
    return f"{oid[1]} {oid[2] + '/' if oid[2] else ''}{oid[3]}"
