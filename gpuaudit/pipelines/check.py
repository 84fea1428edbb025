"""The manifest check: files, folders, kustomize packages and Helm charts ->
documents -> workloads -> facts -> findings, on all cores when it pays."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

import msgspec

from gpuaudit.engine.evaluate import Evaluation, combine, evaluate, site_inputs
from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.facts import claims as claim_facts
from gpuaudit.facts import device_plugin as config_facts
from gpuaudit.facts import workload as workload_facts
from gpuaudit.facts.context import Context, Site, build_context, merge_contexts
from gpuaudit.kube.podspecs import KindLocator, group_of
from gpuaudit.model import AuditResult, Document, InputError, Workload
from gpuaudit.model.serving_runtimes import effective_workloads
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.pipelines.policy import locators_for
from gpuaudit.pipelines.shards import run_sharded, workers_for
from gpuaudit.sources.inputs import Item, gather_inputs, read_items
from gpuaudit.sources.manifests import ReadResult
from gpuaudit.sources.user_config import Config


def model_items(
    items: Sequence[Item], site: Site, locators: Mapping[tuple[str, str], KindLocator]
) -> tuple[ReadResult, list[Workload], list[InputError], Context]:
    """Read ``items`` and build their workloads and the context they are
    judged in (what the rest of the input says: sharing configs, autoscalers,
    serving runtimes)."""
    read = ReadResult()
    read_items(items, read)
    workloads, field_errors = build_workloads(read.documents, locators)
    return read, workloads, field_errors, build_context(site, read.documents, workloads, read.bare)


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


# Files per process below which another process does not repay its fork.
_MIN_FILES_PER_PROCESS = 64
# What a file costs beyond its bytes (opening, decoding, its objects), and
# what an object already read (stdin, a rendered kustomization) costs, in
# bytes of YAML: about a manifest's size.
_BYTES_PER_ITEM = 2048


def _work(item: Item) -> float:
    """What auditing an item costs, in bytes of YAML, for sharing the input
    between processes: reading, modelling and judging grow with its bytes,
    and each file and object costs some more."""
    if isinstance(item, Path):
        try:
            return _BYTES_PER_ITEM + item.stat().st_size
        except OSError:
            return _BYTES_PER_ITEM
    return _BYTES_PER_ITEM * len(item.documents)


class _JudgedShard(msgspec.Struct):
    """What one shard of a manifest audit sends back: small, picklable."""

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
    """A warning for each object defined again in the same folder (what
    `kubectl apply -f DIR` applies together): a cluster keeps one of them,
    whichever is applied last, so the audit of the others may not hold. The
    same name in other folders is the usual one-folder-per-environment
    layout, not a mistake."""
    first: dict[tuple[str, str, str, str, str], tuple[str, int]] = {}
    warnings = []
    for group, kind, namespace, name, api_version, file, line in identities:
        place = (os.path.dirname(file), group, kind, namespace, name)
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
    render_kustomize: bool = True,
    helm_charts: Sequence[Path] = (),
    helm_values: Sequence[Path] = (),
    keep_subjects: bool = True,
    kustomize_load_anywhere: bool = False,
) -> AuditResult:
    """Directories with a kustomization are rendered (``render_kustomize``;
    reading files outside their folder only with ``kustomize_load_anywhere``);
    ``helm_charts`` are rendered with ``helm template`` and ``helm_values``.

    Findings keep the Subject they judged (fixes need it) unless
    ``keep_subjects`` is False; then a large input is audited on all cores
    (pipelines/shards.py), since subjects are too big to send between them.
    Either way the findings, errors and their order are the same."""
    items = gather_inputs(
        paths,
        stdin_text,
        render_kustomize=render_kustomize,
        helm_charts=helm_charts,
        helm_values=helm_values,
        kustomize_load_anywhere=kustomize_load_anywhere,
    )
    site = Site.from_config(config.site)
    locators = locators_for(config)

    def model(shard: Sequence[Item]) -> tuple[tuple, Context]:
        read, workloads, field_errors, context = model_items(shard, site, locators)
        return (read, workloads, field_errors), context

    def judge(modelled: tuple, context: Context) -> _JudgedShard:
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
        return _JudgedShard(
            read.errors, field_errors, evaluations, len(read.documents), gpu_workloads, _identities(read.documents)
        )

    processes = 1 if keep_subjects else workers_for(len(items), _MIN_FILES_PER_PROCESS)
    shards = run_sharded(items, processes, model, partial(merge_contexts, site), judge, _work)
    groups = range(len(shards[0].evaluations))
    evaluation = combine([shard.evaluations[g] for g in groups for shard in shards])
    return AuditResult(
        findings=evaluation.findings,
        suppressed=evaluation.suppressed,
        skipped=evaluation.skipped,
        errors=[
            *(e for shard in shards for e in shard.read_errors),
            *(e for shard in shards for e in shard.field_errors),
            *duplicate_objects(i for shard in shards for i in shard.identities),
            *evaluation.warnings,
        ],
        rules=list(rules),
        resources=sum(shard.resources for shard in shards),
        gpu_workloads=sum(shard.gpu_workloads for shard in shards),
    )
