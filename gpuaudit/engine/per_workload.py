"""One finding per (rule, workload, container) in a cluster audit.

Rules judge each live pod on its own (its node, its telemetry, its state), so
a Deployment of 143 replicas that holds whole GPUs would give 143 copies of
one finding. An operator wants it once, with how many pods it is about: the
pods' findings are merged here, in a deterministic way (the pod first by name
speaks for the group), and the merged finding's evidence lists every pod
(``pods``) so that counts built on it (the capacity review's GPUs at stake)
still see each one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import msgspec.structs

from gpuaudit.engine.evaluate import make_finding
from gpuaudit.engine.rules import Rule
from gpuaudit.model import Finding

GroupKey = tuple[str, str, str, str, str, str | None]


def _key(finding: Finding) -> GroupKey | None:
    subject = finding.subject
    if subject is None or subject.scope != "cluster" or subject.target != "pod":
        return None
    r = finding.resource
    return (finding.rule, r.api_version, r.kind, r.namespace, r.name, r.container)


def _pod(finding: Finding) -> str:
    return str(finding.subject.facts.get("pod") or "") if finding.subject is not None else ""


def one_per_workload(findings: Sequence[Finding], rules: Mapping[str, Rule]) -> list[Finding]:
    """``findings`` with those about pods of the same workload merged, in the
    order their first member came."""
    groups: dict[GroupKey, list[Finding]] = {}
    out: list[Finding | GroupKey] = []
    for finding in findings:
        key = _key(finding)
        if key is None:
            out.append(finding)
        elif key in groups:
            groups[key].append(finding)
        else:
            groups[key] = [finding]
            out.append(key)
    return [item if isinstance(item, Finding) else _merged(groups[item], rules) for item in out]


def suppressed_per_workload(
    suppressed: Sequence[tuple[Finding, str]], rules: Mapping[str, Rule]
) -> list[tuple[Finding, str]]:
    """The same for suppressed findings; a group keeps the reason of the pod
    that speaks for it."""
    kept = {id(f): why for f, why in suppressed}  # findings about no pod come back as they are
    by_pod = {(_key(f), _pod(f)): why for f, why in suppressed}
    return [
        (f, kept[id(f)] if id(f) in kept else by_pod[(_key(f), f.evidence["pods"][0])])
        for f in one_per_workload([f for f, _ in suppressed], rules)
    ]


def _merged(group: list[Finding], rules: Mapping[str, Rule]) -> Finding:
    group = sorted(group, key=_pod)
    first = group[0]
    pods = [_pod(f) for f in group]
    rule = rules.get(first.rule)
    if len(group) == 1:
        return msgspec.structs.replace(first, evidence={**first.evidence, "pods": pods})
    assert first.subject is not None  # grouped findings are about pod subjects
    facts: dict[str, Any] = {
        **first.subject.facts,
        # Messages name the pod as {{ role }} (the template's place in a
        # manifest: what every pod of the group shares) or as {{ pod }} (with
        # that pod's own measurements: one example of the group).
        "role": f"each of {len(group)} pods",
        "pod": f"{pods[0]} (one of {len(group)} pods)",
    }
    subject = msgspec.structs.replace(first.subject, facts=facts)
    merged = make_finding(rule, subject, severity=first.severity) if rule is not None else first
    nodes = {f.resource.node for f in group}
    return msgspec.structs.replace(
        merged,
        resource=msgspec.structs.replace(merged.resource, node=nodes.pop() if len(nodes) == 1 else None),
        evidence={**merged.evidence, "pods": pods},
        subject=first.subject,
    )
