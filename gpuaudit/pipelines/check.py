"""The manifest check: files, folders, kustomize roots and Helm charts, cut
into deployable units (sources/units.py) -> documents -> workloads -> facts
-> findings, on all cores when it pays.

Each unit is judged in its own context: duplicates and cross-object facts
(a Service and its Deployment, a device-plugin config and the pods that use
it) never join objects of two units. A finding the same in several units
(a base used by several roots, a template in several chart variants) is one
finding naming them all."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import msgspec

from gpuaudit.engine import baseline
from gpuaudit.engine.evaluate import Evaluation, combine, evaluate, site_inputs
from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.facts import claims as claim_facts
from gpuaudit.facts import device_plugin as config_facts
from gpuaudit.facts import workload as workload_facts
from gpuaudit.facts.context import Context, Site, build_context, merge_contexts
from gpuaudit.files import write_atomic
from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.model import AuditResult, Document, Finding, InputError, Workload
from gpuaudit.model.serving_runtimes import effective_workloads
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.pipelines.policy import PolicyOptions, locators_for
from gpuaudit.pipelines.shards import run_sharded, workers_for
from gpuaudit.sources.inputs import FoundFile, InputOptions, Item, ManifestOptions, gather_units, read_items
from gpuaudit.sources.manifests import ReadResult
from gpuaudit.sources.user_config import Config


class Baselines(msgspec.Struct, frozen=True):
    """``apply``: hide the findings recorded in this baseline (--baseline);
    ``write``: record the current findings in this file (--write-baseline)."""

    apply: Path | None = None
    write: Path | None = None


class CheckOptions(msgspec.Struct, frozen=True):
    """What `gpuaudit check` judges and how: the paths, the rules, how the
    input is read and the baselines."""

    paths: tuple[str, ...] = ()
    policy: PolicyOptions = PolicyOptions()
    manifests: ManifestOptions = ManifestOptions()
    baselines: Baselines = Baselines()


class CheckRun(msgspec.Struct):
    result: AuditResult
    baseline_unwritten: bool = False  # --write-baseline's file could not be written


def run_check(options: CheckOptions, config: Config, say: Callable[[str], None]) -> CheckRun:
    """The check of ``options.paths`` with the rules ``options.policy``
    selects, the baselines written and applied. ``say``: one line for the
    user (what was recorded, what could not be written). Raises
    user_config.ConfigError for the config's chart folders, and
    baseline.BaselineError for a baseline that cannot be read."""
    inputs = options.manifests.resolve(config)
    rules, rule_errors = options.policy.load(config)
    result = check_manifests(
        options.paths,
        config,
        rules,
        options=inputs,
        keep_subjects=False,  # no output needs them: lets a large input use all cores
    )
    result.errors[:0] = rule_errors
    return CheckRun(result, not _baselines(result, options.baselines, say))


def _baselines(result: AuditResult, baselines: Baselines, say: Callable[[str], None]) -> bool:
    """Write, then apply, the baselines asked for; False when the baseline
    to write could not be (the output still goes out)."""
    written = True
    if baselines.write is not None:
        try:
            write_atomic(baselines.write, baseline.dumps(baseline.build(result.findings)))
        except OSError as exc:  # files.WriteError names the file
            say(str(exc))
            written = False
        else:
            say(f"recorded {len(result.findings)} finding(s) in {baselines.write}")
    if baselines.apply is not None:
        baseline.apply_to_result(result, baselines.apply)
    return written


def input_roots(paths: Sequence[str]) -> tuple[str, ...]:
    """The folders named on the command line, below which a file's context
    (examples/, tests/) is read; a file named on its own has none."""
    return tuple(p for p in paths if p != "-" and os.path.isdir(p))


def model_items(
    items: Sequence[Item],
    site: Site,
    locators: Mapping[tuple[str, str], KindLocator],
    roots: Sequence[str] = (),
) -> tuple[ReadResult, list[Workload], list[InputError], Context]:
    """Read ``items`` and build their workloads and the context they are
    judged in (what the rest of the input says: sharing configs, autoscalers,
    serving runtimes; ``roots``, the folders named on the command line)."""
    read = ReadResult()
    read_items(items, read)
    workloads, field_errors = build_workloads(read.documents, locators)
    return read, workloads, field_errors, build_context(site, read.documents, workloads, read.bare, roots)


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
        (s for doc in documents for s in claim_facts.subjects(doc, context.roots if context else ())),
    )


# Files per process below which another process does not repay its fork.
_MIN_FILES_PER_PROCESS = 64
# What a file costs beyond its bytes (opening, decoding, its objects), and
# what an object already read (stdin, a rendered kustomization) costs, in
# bytes of YAML: about a manifest's size.
_BYTES_PER_ITEM = 2048


def _work(unit_item: tuple[str, Item]) -> float:
    """What auditing an item costs, in bytes of YAML, for sharing the input
    between processes: reading, modelling and judging grow with its bytes,
    and each file and object costs some more."""
    item = unit_item[1]
    if isinstance(item, (Path, FoundFile)):
        try:
            return _BYTES_PER_ITEM + (item if isinstance(item, Path) else item.path).stat().st_size
        except OSError:
            return _BYTES_PER_ITEM
    return _BYTES_PER_ITEM * len(item.documents)


class _JudgedUnit(msgspec.Struct):
    """What one shard of a manifest audit sends back for one unit: small, picklable."""

    read_errors: list[InputError]
    field_errors: list[InputError]
    evaluations: list[Evaluation]  # one per subject group
    resources: int
    gpu_workloads: int
    identities: list[tuple[str, str, str, str, str, str, int]]  # see _identities


def _identities(documents: Sequence[Document]) -> list[tuple[str, str, str, str, str, str, int]]:
    """(API group, kind, namespace, name, apiVersion, file, line) of each named object
    (``generateName`` makes a new object each time: left out)."""
    out = []
    for doc in documents:
        meta = doc.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            out.append((group_of(doc.api_version), doc.kind, doc.namespace, name, doc.api_version, doc.file, doc.line))
    return out


def duplicate_objects(identities: Iterable[tuple[str, str, str, str, str, str, int]]) -> list[InputError]:
    """A warning for each object defined again in one unit (what one
    `kubectl apply` sends): a cluster keeps one of them, whichever is applied
    last, so the audit of the others may not hold. The same name in other
    units is the usual one-folder-per-environment layout, not a mistake."""
    first: dict[tuple[str, str, str, str], tuple[str, int]] = {}
    warnings = []
    for group, kind, namespace, name, api_version, file, line in identities:
        place = (group, kind, namespace, name)
        if place not in first:
            first[place] = (file, line)
            continue
        label = f"{api_version} {kind} {namespace + '/' if namespace else ''}{name}"
        warnings.append(
            InputError(
                file,
                line,
                f"{label} is defined again (first at {first[place][0]}:{first[place][1]}); "
                "the cluster keeps one: the last applied",
                "warning",
            )
        )
    return warnings


def check_manifests(
    paths: Sequence[str],
    config: Config,
    rules: Sequence[Rule],
    stdin_text: str | None = None,
    *,
    options: InputOptions | None = None,
    keep_subjects: bool = True,
    read: Mapping[str, ReadResult] | None = None,
) -> AuditResult:
    """Audit ``paths`` read as ``options`` say (sources/inputs.py).
    ``read``: files (or stdin, '-') the caller read already, by the name
    they were read under: judged as read, not read again (`fix`).

    Findings keep the Subject they judged (fixes need it) unless
    ``keep_subjects`` is False; then a large input is audited on all cores
    (pipelines/shards.py), since subjects are too big to send between them.
    Either way the findings, errors and their order are the same."""
    units = gather_units(paths, stdin_text, options, read)
    # Nothing to read still judges once: the rules skipped are reported.
    items = [(unit.name, item) for unit in units for item in unit.items] or [("", ReadResult())]
    order = list(dict.fromkeys(name for name, _ in items))
    site = Site.from_config(config.site)
    locators = locators_for(config)
    roots = input_roots(paths)

    def model(shard: Sequence[tuple[str, Item]]) -> tuple[dict[str, tuple], dict[str, Context]]:
        states: dict[str, tuple] = {}
        contexts: dict[str, Context] = {}
        for name, unit_items in _by_unit(shard).items():
            read, workloads, field_errors, context = model_items(unit_items, site, locators, roots)
            states[name], contexts[name] = (read, workloads, field_errors), context
        return states, contexts

    def combine_contexts(parts: list[dict[str, Context]]) -> dict[str, Context]:
        per_unit: dict[str, list[Context]] = {}
        for part in parts:
            for name, context in part.items():
                per_unit.setdefault(name, []).append(context)
        return {name: merge_contexts(site, contexts) for name, contexts in per_unit.items()}

    def judge(states: dict[str, tuple], contexts: dict[str, Context]) -> dict[str, _JudgedUnit]:
        return {name: judge_unit(state, contexts[name]) for name, state in states.items()}

    def judge_unit(modelled: tuple, context: Context) -> _JudgedUnit:
        read, workloads, field_errors = modelled
        # The runtime may sit in another shard than its InferenceService: the
        # merged context has them all.
        workloads = effective_workloads(workloads, context.runtimes, locators)
        inputs = {"manifest", *site_inputs(config.site)}
        evaluations = [
            evaluate(rules, group, inputs=inputs, exemptions=config.exemptions, keep_subjects=keep_subjects)
            for group in subject_groups(read.documents, workloads, context, read.bare)
        ]
        gpu_workloads = sum(1 for w in workloads if w.requests_gpus)
        return _JudgedUnit(
            read.errors, field_errors, evaluations, len(read.documents), gpu_workloads, _identities(read.documents)
        )

    processes = 1 if keep_subjects else workers_for(len(items), _MIN_FILES_PER_PROCESS)
    shards = run_sharded(items, processes, model, combine_contexts, judge, _work)
    judged = [[shard[name] for shard in shards if name in shard] for name in order]
    groups = range(len(next((j[0].evaluations for j in judged if j), [])))
    named = len([name for name in order if name]) > 1  # one unit (a file, stdin): nothing to name
    evaluation = combine(
        [
            _in_unit(part.evaluations[g], name if named else None)
            for g in groups
            for name, parts in zip(order, judged, strict=True)
            for part in parts
        ]
    )
    return AuditResult(
        findings=_once(evaluation.findings),
        suppressed=evaluation.suppressed,
        skipped=evaluation.skipped,
        errors=[
            *(e for parts in judged for part in parts for e in part.read_errors),
            *(e for parts in judged for part in parts for e in part.field_errors),
            *(w for parts in judged for w in duplicate_objects(i for part in parts for i in part.identities)),
            *evaluation.warnings,
        ],
        rules=list(rules),
        resources=sum(part.resources for parts in judged for part in parts),
        gpu_workloads=sum(part.gpu_workloads for parts in judged for part in parts),
    )


def _by_unit(shard: Sequence[tuple[str, Item]]) -> dict[str, list[Item]]:
    out: dict[str, list[Item]] = {}
    for name, item in shard:
        out.setdefault(name, []).append(item)
    return out


def _in_unit(evaluation: Evaluation, unit: str | None) -> Evaluation:
    if not unit:
        return evaluation
    return msgspec.structs.replace(
        evaluation, findings=[msgspec.structs.replace(f, units=(unit,)) for f in evaluation.findings]
    )


def _once(findings: Sequence[Finding]) -> list[Finding]:
    """Findings the same in several units (a base under several roots, a
    template in several chart variants: the same rule at the same line,
    judging the same evidence) as one finding naming every unit; the first
    keeps its place, names and message."""
    if not any(f.units for f in findings):
        return list(findings)
    first: dict[tuple, int] = {}
    out: list[Finding] = []
    for f in findings:
        key = (
            f.rule,
            f.location.file,
            f.location.line,
            f.location.pointer,
            f.resource.kind,
            f.resource.container,
            msgspec.json.encode(f.evidence, order="sorted"),
        )
        at = first.get(key)
        if at is None:
            first[key] = len(out)
            out.append(f)
        elif not set(f.units) <= set(out[at].units):
            out[at] = msgspec.structs.replace(out[at], units=(*out[at].units, *f.units))
    return out
