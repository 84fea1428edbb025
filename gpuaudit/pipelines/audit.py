"""The cluster audit: a snapshot (live or from a file) -> ClusterState ->
facts -> findings, with telemetry coverage and the cluster totals."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.engine.evaluate import evaluate, site_inputs
from gpuaudit.engine.per_workload import one_per_workload, suppressed_per_workload
from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.facts import cluster as cluster_facts
from gpuaudit.facts.types import ClusterFacts, PodFacts
from gpuaudit.model import AuditResult, InputError, Skipped
from gpuaudit.model.cluster_builder import build_cluster_state
from gpuaudit.sources.user_config import Config


def audit_cluster(
    snapshot: dict,
    config: Config,
    rules: Sequence[Rule],
    *,
    telemetry_problem: str | None = None,
) -> AuditResult:
    """Judge a snapshot (live or read from a file). ``telemetry_problem`` says
    why telemetry was asked for but could not be read: its rules are then
    skipped with that reason and the run exits 2."""
    state = build_cluster_state(snapshot)
    inputs = {"cluster", *site_inputs(config.site)}
    if state.telemetry and state.telemetry.get("pods") is not None:
        inputs.add("telemetry")
    unavailable = {}
    errors = list(state.errors)
    # What telemetry asked for could not be read: the audit is partial, never
    # silently thinner (a lost residency query would otherwise read as "no
    # pod resident-idle").
    unread_telemetry: list[str] = []
    if telemetry_problem:
        unavailable["telemetry"] = f"insufficient data: telemetry unavailable ({telemetry_problem})"
        errors.append(InputError("telemetry", None, telemetry_problem))
        unread_telemetry.append("telemetry")
    for problem in (state.telemetry or {}).get("errors") or []:
        message = str(problem.get("message"))
        # A server's warning (a partial response) comes with its data, as does
        # a sample line left out of a samples file; a failed query lost its
        # field for every pod.
        failed = problem.get("level") != "warning" and not message.startswith("warning:")
        text = f"telemetry query {problem.get('query')}: {message}"
        errors.append(
            InputError(
                str(problem.get("endpoint", "telemetry")),
                None,
                text + ("; this audit is partial" if failed else ""),
                "error" if failed else "warning",
            )
        )
        if failed:
            names = str(problem.get("query")).split(" (")[0]  # "field (part 2/7 to ...)"
            unread_telemetry += [f"telemetry query {q}" for q in names.split(",")]
    subjects = list(cluster_facts.subjects(state))
    totals = next(s.facts_as(ClusterFacts) for s in subjects if s.target == "cluster")
    evaluation = evaluate(
        rules,
        subjects,
        inputs=inputs,
        exemptions=config.exemptions,
        today=state.collected_at.date(),
        unavailable=unavailable,
    )
    # One pod subject per GPU pod that has not finished, with its telemetry.
    gpu_pods = [s for s in subjects if s.target == "pod"]
    telemetry = None
    if state.telemetry is not None:
        telemetry = {
            "source": state.telemetry.get("source"),
            "signal": (state.telemetry.get("signals") or {}).get("compute"),
            "window_seconds": (state.telemetry.get("window") or {}).get("seconds"),
            "queries": state.telemetry.get("queries"),
            "gpu_pods": len(gpu_pods),
            "gpu_pods_with_data": sum(1 for s in gpu_pods if s.facts_as(PodFacts).telemetry is not None),
        }
    by_id = {r.id: r for r in rules}
    return AuditResult(
        findings=one_per_workload(evaluation.findings, by_id),
        suppressed=suppressed_per_workload(evaluation.suppressed, by_id),
        skipped=[*evaluation.skipped, *insufficient_data(evaluation.insufficient)],
        errors=[*errors, *evaluation.warnings],
        rules=list(rules),
        resources=state.pods_total + len(state.nodes),
        gpu_workloads=len({(s.resource.kind, s.resource.namespace, s.resource.name) for s in gpu_pods}),
        telemetry=telemetry,
        state=state,
        subjects=subjects,
        cluster={
            "partial": [*totals.partial, *dict.fromkeys(unread_telemetry)],
            "gpu_nodes": totals.gpu_nodes,
            "gpus_total": totals.gpus_total,
            "gpus_allocated": totals.gpus_allocated,
            "pending_gpu_pods": totals.pending_gpu_pods,
            "pending_by_cause": totals.pending_by_cause,
            "kueue_pending": totals.kueue_pending,
        },
    )


def insufficient_data(entries: Sequence[tuple[str, Subject, str]]) -> list[Skipped]:
    """One skipped entry per telemetry rule, naming the subjects it could not
    judge and what was missing — never a verdict of idle."""
    by_rule: dict[str, list[tuple[Subject, str]]] = {}
    for rule_id, subject, missing in entries:
        by_rule.setdefault(rule_id, []).append((subject, missing))
    skipped = []
    for rule_id, items in by_rule.items():
        examples = []
        for subject, missing in items[:5]:
            facts = subject.typed
            namespace = getattr(facts, "namespace", None) or ""  # a node or the cluster has none
            pod = facts.pod if isinstance(facts, PodFacts) else None
            name = f"{namespace}/{pod or facts.name}"
            examples.append(f"{name} ({missing})")
        more = f", and {len(items) - 5} more" if len(items) > 5 else ""
        reason = f"insufficient data for {len(items)} GPU pod(s): {', '.join(examples)}{more}"
        skipped.append(Skipped(rule_id, reason))
    return skipped
