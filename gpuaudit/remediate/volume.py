"""How much of a plan one overlay holds: patches ordered by the GPUs they
free, the first N kept (``fix --top N``), and overlays split by namespace or
team (``fix --split-by``). A reviewer reads 25 patches; a cluster yields
thousands. Pure: plans in, plans out.

An object's changes stay together and in their order (each was planned on
the object as the one before left it), and a sharing config stays with the
moves it advertises the share for: it ranks by what they free, so it is kept
first whenever one of them is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from gpuaudit.kube.shapes import ObjectId
from gpuaudit.remediate import sizing
from gpuaudit.remediate.overlay import safe_name
from gpuaudit.remediate.plan import Change, Plan

# Changes that write the sharing config the moves to a share request.
SHARING_CONFIG = frozenset({"enable-time-slicing", "time-slicing-replicas", "mig-strategy-mixed"})
DEFAULT_TOP = 25


def gpus_freed(change: Change, replicas: int | None) -> float:
    """GPUs the change gives back: a move to a share gives back all but the
    share it keeps (1/replicas of a time-sliced GPU, a MIG slice's compute
    share), anything else what its planner estimated."""
    share = change.proposal.share
    if share is None:
        return float(change.proposal.frees_gpus)
    if share.mig_profile and share.model is not None:
        profiles = sizing.mig_profiles(share.model)
        largest = max((s for _, s, _ in profiles), default=0)
        slices = next((s for _, s, p in profiles if p == share.mig_profile), 0)
        kept = slices / largest if largest else 1.0
    else:
        kept = 1.0 / max(2, replicas or 2)
    return share.pods * (1.0 - kept)


def share_replicas(plan: Plan) -> int | None:
    """Replicas per GPU of the sharing config the plan writes, if it writes one."""
    for change in plan.changes:
        value = change.proposal.params.get("replicas")
        if change.remediation in SHARING_CONFIG and isinstance(value, int):
            return value
    return None


class Group(msgspec.Struct):
    """One object's changes, in plan order, and what they free together."""

    target: ObjectId
    changes: list[Change]
    frees: float = 0.0


def ranked(plan: Plan) -> list[Group]:
    """The plan's objects, those whose changes free the most GPUs first (a
    sharing config by what its moves free), ties in plan order."""
    replicas = share_replicas(plan)
    groups: dict[ObjectId, Group] = {}
    for change in plan.changes:
        group = groups.setdefault(change.target, Group(change.target, []))
        group.changes.append(change)
        group.frees += gpus_freed(change, replicas)
    sharing = sum(g.frees for g in groups.values() if any(c.proposal.share for c in g.changes))
    for group in groups.values():
        if any(c.remediation in SHARING_CONFIG for c in group.changes):
            group.frees += sharing
    order = {target: i for i, target in enumerate(groups)}
    return sorted(groups.values(), key=lambda g: (-g.frees, order[g.target]))


class Selection(msgspec.Struct):
    plan: Plan  # what one overlay holds, numbered from 1
    held: list[Group]  # ranked after the cut: not in this overlay
    frees: float  # GPUs the kept changes free


def select(plan: Plan, top: int) -> Selection:
    """The first ``top`` changes by GPUs freed (0: all), whole objects."""
    groups = ranked(plan)
    kept: list[Group] = []
    count = 0
    for group in groups:
        if top and count >= top:
            break
        kept.append(group)
        count += len(group.changes)
    needs_config = any(c.proposal.share for g in kept for c in g.changes)
    held = [g for g in groups if g not in kept]
    if needs_config:  # a move never goes without the config that advertises its share
        configs = [g for g in held if any(c.remediation in SHARING_CONFIG for c in g.changes)]
        kept += configs
        held = [g for g in held if g not in configs]
    rank = {g.target: i for i, g in enumerate(groups)}
    kept.sort(key=lambda g: rank[g.target])
    return Selection(_subplan(plan, kept), held, sum(g.frees for g in kept))


def _subplan(plan: Plan, groups: Sequence[Group]) -> Plan:
    """The changes of ``groups``, in their order (an object's in plan order:
    kustomize applies each on what the one before left), numbered from 1."""
    keep = {g.target for g in groups}
    changes = [c for g in groups for c in g.changes]
    labels = {c.source.label for c in changes}
    for number, change in enumerate(changes, start=1):
        change.number = number
    return Plan(
        changes=changes,
        skipped=list(plan.skipped),
        sources=[s for s in plan.sources if s.label in labels],
        expected={t: v for t, v in plan.expected.items() if t in keep},
    )


def split(plan: Plan, key: Callable[[Change], str]) -> dict[str, Plan]:
    """The plan cut into one plan per ``key`` (a namespace, a team), each
    object's changes together; the findings without a patch go with the
    group of their object's namespace or team."""
    by: dict[str, list[Change]] = {}
    for change in plan.changes:
        by.setdefault(key(change), []).append(change)
    out: dict[str, Plan] = {}
    for name, changes in sorted(by.items()):
        targets = {c.target for c in changes}
        labels = {c.source.label for c in changes}
        out[name] = Plan(
            changes=list(changes),
            skipped=[],
            sources=[s for s in plan.sources if s.label in labels],
            expected={t: v for t, v in plan.expected.items() if t in targets},
        )
    return out


def group_key(by: str, team_label: str | None) -> Callable[[Change], str]:
    """What names a change's group: its object's namespace, or its team (the
    ``team_label`` label of the object or its pod template; else the namespace)."""

    def key(change: Change) -> str:
        namespace = change.target[2] or "cluster"
        if by == "namespace" or not team_label:
            return namespace
        return _label(change.before, team_label) or namespace

    return key


def _label(obj: Mapping[str, Any], name: str) -> str | None:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    if labels.get(name):
        return str(labels[name])
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    template = spec.get("template") if isinstance(spec.get("template"), Mapping) else {}
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    tlabels = tmeta.get("labels") if isinstance(tmeta.get("labels"), Mapping) else {}
    return str(tlabels[name]) if tlabels.get(name) else None


def results(plan: Plan) -> list[dict[str, Any]]:
    """Every object the plan adds or changes, as its overlay builds it."""
    return [after for _, after in plan.expected.values()] + [o for c in plan.changes for o in c.new_objects]


def holds_sharing_config(plan: Plan) -> bool:
    return any(c.remediation in SHARING_CONFIG for c in plan.changes)


def folder_names(parts: Mapping[str, Any]) -> dict[str, str]:
    """A folder name per group: safe for a path, and distinct."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in parts:
        base = safe_name(name) if name else ""
        folder, n = base, 2
        while folder in taken:
            folder, n = f"{base}-{n}", n + 1
        taken.add(folder)
        out[name] = folder
    return out
