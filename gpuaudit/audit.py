"""Put the pieces together: policy selection, and the manifest audit pipeline
(sources -> model -> facts -> engine). Commands call these; nothing here
parses arguments or prints."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from gpuaudit.config import Config
from gpuaudit.engine.evaluate import Evaluation, combine, evaluate, site_inputs
from gpuaudit.engine.rules import Rule, builtin_policies_dir, load_rules
from gpuaudit.facts import Subject
from gpuaudit.facts import claims as claim_facts
from gpuaudit.facts import config as config_facts
from gpuaudit.facts import workload as workload_facts
from gpuaudit.facts.context import Context, Site, build_context, merge_contexts
from gpuaudit.model import SEVERITIES, Document, Finding, InputError, Skipped, Workload
from gpuaudit.sources.fanout import run_sharded, workers_for
from gpuaudit.sources.inputs import Item, gather_inputs, read_items
from gpuaudit.sources.manifests import ReadResult
from gpuaudit.workloads import build_workloads, builtin_locators, parse_locators


@dataclass
class AuditResult:
    """Everything one run found; every output format renders this."""

    findings: list[Finding] = field(default_factory=list)
    suppressed: list[tuple[Finding, str]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    resources: int = 0
    gpu_workloads: int = 0
    # Telemetry coverage of a cluster audit (None for manifests): how many GPU
    # pods had data, so missing data never reads as idle.
    telemetry: dict | None = None
    # Cluster totals of a cluster audit: GPUs, allocation, pending demand.
    cluster: dict | None = None
    # What a cluster audit judged (the ClusterState and its subjects), kept
    # for `gpuaudit report` so it need not build them again; never output.
    state: Any = field(default=None, repr=False, compare=False)
    subjects: list[Subject] = field(default_factory=list, repr=False, compare=False)

    def exit_code(self, fail_on: str) -> int:
        """2 on input errors, else 1 when a finding is at or above ``fail_on``."""
        if any(e.level == "error" for e in self.errors):
            return 2
        threshold = SEVERITIES.index(fail_on)  # type: ignore[arg-type]
        if any(SEVERITIES.index(f.severity) <= threshold for f in self.findings):
            return 1
        return 0


def load_policy(
    config: Config,
    extra_dirs: Sequence[Path] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> tuple[list[Rule], list[InputError]]:
    """Built-in rules plus the config's and the command line's folders, selected."""
    dirs = [builtin_policies_dir(), *config.policies, *extra_dirs]
    rules, rule_errors = load_rules(dirs, config.params, config.severity)
    errors = [InputError(e.file, e.line, e.message) for e in rule_errors]
    known = {r.id for r in rules} | {e.rule_id for e in rule_errors if e.rule_id}
    for rule_id in sorted(set(config.params) | set(config.severity)):
        if rule_id not in known:
            errors.append(
                InputError(
                    str(config.path), None, f"config names unknown rule {rule_id}", "warning"
                )
            )
    where = (
        "--rules" if include else f"{config.path} rules",
        "--exclude-rules" if exclude else f"{config.path} exclude_rules",
    )
    include, exclude = include or config.rules, exclude or config.exclude_rules
    selected = select(rules, include, exclude)
    errors += selection_problems(rules, selected, include, exclude, where)
    return selected, errors


def selection_problems(
    rules: Sequence[Rule],
    selected: Sequence[Rule],
    include: Sequence[str],
    exclude: Sequence[str],
    where: tuple[str, str] = ("--rules", "--exclude-rules"),
) -> list[InputError]:
    """A name that is no rule id or category selects nothing (a typo, a
    renamed rule): say so; and when --rules selects no rule at all, the run
    must not pass as if it had audited something."""
    names = {r.id for r in rules} | {r.category for r in rules}
    problems = [
        InputError(
            where[0] if name in include else where[1],
            None,
            f"{name!r} is no rule id or category; it selects nothing",
            "warning",
        )
        for name in dict.fromkeys([*include, *exclude])
        if name not in names
    ]
    if include and not selected:
        problems.append(InputError(where[0], None, "no rule is selected: nothing was audited"))
    return problems


def select(rules: Iterable[Rule], include: Sequence[str], exclude: Sequence[str]) -> list[Rule]:
    """Rules named by id or category in ``include`` (all when empty), minus ``exclude``."""

    def named(rule: Rule, names: Sequence[str]) -> bool:
        return rule.id in names or rule.category in names

    return [r for r in rules if (not include or named(r, include)) and not named(r, exclude)]


def manifest_subjects(
    documents: Sequence[Document],
    workloads: Sequence[Workload],
    context: Context | None = None,
    bare: Sequence[Document] = (),
) -> Iterator[Subject]:
    """``bare``: non-Kubernetes documents (a device-plugin or mig-parted config file)."""
    for group in subject_groups(documents, workloads, context, bare):
        yield from group


def subject_groups(
    documents: Sequence[Document],
    workloads: Sequence[Workload],
    context: Context | None = None,
    bare: Sequence[Document] = (),
) -> tuple[Iterator[Subject], ...]:
    """The subjects of the input in groups, in the order they are judged:
    workloads (with their pods and containers), configs in objects, bare
    configs, claims. (A part of the input gives each group's share.)"""
    return (
        (s for workload in workloads for s in workload_facts.subjects(workload, context)),
        (s for doc in documents for s in config_facts.subjects(doc, context)),
        (s for doc in bare for s in config_facts.subjects(doc, context)),
        (s for doc in documents for s in claim_facts.subjects(doc)),
    )


def locators_for(config: Config):
    if not config.podspecs:
        return builtin_locators()
    return {**builtin_locators(), **parse_locators(config.podspecs)}


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
    from gpuaudit.cluster_state import build_cluster_state
    from gpuaudit.facts import cluster as cluster_facts

    state = build_cluster_state(snapshot)
    inputs = {"cluster", *site_inputs(config.site)}
    if state.telemetry and state.telemetry.get("pods") is not None:
        inputs.add("telemetry")
    unavailable = {}
    errors = list(state.errors)
    if telemetry_problem:
        unavailable["telemetry"] = f"insufficient data: telemetry unavailable ({telemetry_problem})"
        errors.append(InputError("telemetry", None, telemetry_problem))
    for problem in (state.telemetry or {}).get("errors") or []:
        errors.append(
            InputError(
                str(problem.get("endpoint", "telemetry")),
                None,
                f"telemetry query {problem.get('query')}: {problem.get('message')}",
                "warning",
            )
        )
    subjects = list(cluster_facts.subjects(state))
    totals = next(s.facts for s in subjects if s.target == "cluster")
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
            "gpu_pods_with_data": sum(1 for s in gpu_pods if s.facts.get("telemetry") is not None),
        }
    return AuditResult(
        findings=evaluation.findings,
        suppressed=evaluation.suppressed,
        skipped=[*evaluation.skipped, *insufficient_data(evaluation.insufficient)],
        errors=[*errors, *evaluation.warnings],
        rules=list(rules),
        resources=state.pods_total + len(state.nodes),
        gpu_workloads=len({(s.resource.kind, s.resource.namespace, s.resource.name) for s in gpu_pods}),
        telemetry=telemetry,
        state=state,
        subjects=subjects,
        cluster={
            key: totals[key]
            for key in (
                "gpu_nodes",
                "gpus_total",
                "gpus_allocated",
                "pending_gpu_pods",
                "pending_by_cause",
                "kueue_pending",
            )
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
            facts = subject.facts
            name = f"{facts.get('namespace') or ''}/{facts.get('pod') or facts.get('name')}"
            examples.append(f"{name} ({missing})")
        more = f", and {len(items) - 5} more" if len(items) > 5 else ""
        reason = f"insufficient data for {len(items)} GPU pod(s): {', '.join(examples)}{more}"
        skipped.append(Skipped(rule_id, reason))
    return skipped


# Files per process below which another process does not repay its fork.
_MIN_FILES_PER_PROCESS = 64


@dataclass
class _JudgedShard:
    """What one shard of a manifest audit sends back: small, picklable."""

    read_errors: list[InputError]
    field_errors: list[InputError]
    evaluations: list[Evaluation]  # one per subject group
    resources: int
    gpu_workloads: int


def check_manifests(
    paths: Sequence[str],
    config: Config,
    rules: Sequence[Rule],
    stdin_text: str | None = None,
    *,
    render_kustomize: bool = True,
    helm_charts: Sequence[Path] = (),
    helm_values: Sequence[Path] = (),
    keep_subjects: bool = True,
) -> AuditResult:
    """Directories with a kustomization are rendered (``render_kustomize``);
    ``helm_charts`` are rendered with ``helm template`` and ``helm_values``.

    Findings keep the Subject they judged (fixes need it) unless
    ``keep_subjects`` is False; then a large input is audited on all cores
    (sources/fanout.py), since subjects are too big to send between them.
    Either way the findings, errors and their order are the same."""
    items = gather_inputs(
        paths,
        stdin_text,
        render_kustomize=render_kustomize,
        helm_charts=helm_charts,
        helm_values=helm_values,
    )
    site = Site.from_config(config.site)
    locators = locators_for(config)

    def model(shard: Sequence[Item]) -> tuple[tuple, Context]:
        read = ReadResult()
        read_items(shard, read)
        workloads, field_errors = build_workloads(read.documents, locators)
        context = build_context(site, read.documents, workloads, read.bare)
        return (read, workloads, field_errors), context

    def judge(modelled: tuple, context: Context) -> _JudgedShard:
        read, workloads, field_errors = modelled
        evaluations = [
            evaluate(rules, group, inputs={"manifest", *site_inputs(config.site)}, exemptions=config.exemptions)
            for group in subject_groups(read.documents, workloads, context, read.bare)
        ]
        if not keep_subjects:
            for e in evaluations:
                e.findings = [replace(f, subject=None) for f in e.findings]
                e.suppressed = [(replace(f, subject=None), why) for f, why in e.suppressed]
        gpu_workloads = sum(1 for w in workloads if w.requests_gpus)
        return _JudgedShard(read.errors, field_errors, evaluations, len(read.documents), gpu_workloads)

    processes = 1 if keep_subjects else workers_for(len(items), _MIN_FILES_PER_PROCESS)
    shards = run_sharded(items, processes, model, partial(merge_contexts, site), judge)
    groups = range(len(shards[0].evaluations))
    evaluation = combine([shard.evaluations[g] for g in groups for shard in shards])
    return AuditResult(
        findings=evaluation.findings,
        suppressed=evaluation.suppressed,
        skipped=evaluation.skipped,
        errors=[
            *(e for shard in shards for e in shard.read_errors),
            *(e for shard in shards for e in shard.field_errors),
            *evaluation.warnings,
        ],
        rules=list(rules),
        resources=sum(shard.resources for shard in shards),
        gpu_workloads=sum(shard.gpu_workloads for shard in shards),
    )
