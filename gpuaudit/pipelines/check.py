"""The manifest check: files, folders, kustomize roots and Helm charts, cut
into deployable units (sources/units.py) -> documents -> workloads -> facts
-> findings, on all cores when it pays.

Each unit is judged in its own context: duplicates and cross-object facts
(a Service and its Deployment, a device-plugin config and the pods that use
it) never join objects of two units. A finding the same in several units
(a base used by several roots, a template in several chart variants) is one
finding naming them all.

Files side by side in a folder of plain files that define the same object
differently (`vllm.yaml` and `sglang.yaml` both a Deployment `llm`,
`mig-config-h100.yaml` and `mig-config-rtx6000.yaml` both one ConfigMap)
are alternatives a user picks between, not one `kubectl apply`: each is
judged as a variant of the folder, with the folder's other files and
without the other alternatives, so one alternative's ConfigMap never feeds
another's Deployment."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit.engine import baseline
from gpuaudit.engine.evaluate import Evaluation, combine, evaluate, site_inputs
from gpuaudit.engine.rules import Rule
from gpuaudit.facts import Subject
from gpuaudit.facts import claims as claim_facts
from gpuaudit.facts import device_plugin as config_facts
from gpuaudit.facts import workload as workload_facts
from gpuaudit.facts.context import (
    Context,
    Site,
    build_context,
    largest_values,
    may_hold_gpu_config,
    merge_contexts,
)
from gpuaudit.facts.purpose import file_context, root_of
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


def _share_across_roots(
    merged: dict[str, Context], alternative: dict[str, dict[str, Context]], roots: Sequence[str]
) -> tuple[dict[str, Context], dict[str, dict[str, Context]]]:
    """What one unit's objects say for the units beside it in the same
    folder named on the command line (a GitOps repository keeps the device
    plugin's config, or a claim template, in one app folder and the GPU
    apps in others); files named on their own stay apart.

    A time-slicing config shares the GPUs of the nodes it is given: a
    request anywhere in the folder may be a turn on one of them, when the
    folder holds one such config. A ResourceClaimTemplate is applied once
    and taken by pods anywhere in its namespace: one that asks for no GPU (a
    QAT accelerator) says so for every unit's pods, unless some object of
    that name there may ask for one."""
    by_root: dict[str, list[Context]] = {}
    root_of_unit = {name: root_of(name, roots) for name in merged}
    for name, context in merged.items():
        found = root_of_unit[name]
        # A unit in a test or archive folder is not deployed: it says nothing
        # of the cluster the others run on.
        if found is not None and file_context(name, roots) != "test":
            by_root.setdefault(found[0], []).append(context)
    shared = {root: _shared_in_root(cs) for root, cs in by_root.items()}
    if not any(shared.values()):
        return merged, alternative

    def widened(name: str, context: Context) -> Context:
        found = root_of_unit[name]
        changes = dict(shared.get(found[0], {})) if found is not None else {}
        if "claims_without_gpus" in changes:
            changes["claims_without_gpus"] |= context.claims_without_gpus
        return msgspec.structs.replace(context, **changes) if changes else context

    return (
        {name: widened(name, c) for name, c in merged.items()},
        {name: {file: widened(name, c) for file, c in files.items()} for name, files in alternative.items()},
    )


def _shared_in_root(contexts: Sequence[Context]) -> dict[str, Any]:
    """The context fields the units of one folder share (_share_across_roots)."""
    changes: dict[str, Any] = {}
    # One config object in the root is the cluster's; several may be several
    # clusters' (a folder of examples, an overlay per cluster): then each unit
    # keeps its own.
    if len(frozenset().union(*(c.replicated_by for c in contexts))) == 1:
        replicated = frozenset().union(*(c.replicated_names for c in contexts))
        if replicated:
            changes["replicated_names"] = replicated
            # What the root's workloads ask for, with it: a config there is
            # judged against them (GPA-SH-004: a pod that takes several replicas).
            changes["most_asked"] = largest_values(c.most_asked for c in contexts)
    if any(c.gpu_config_unread for c in contexts):
        changes["gpu_config_unread"] = True
    without = frozenset().union(*(c.claims_without_gpus for c in contexts))
    without -= frozenset().union(*(c.claims_with_gpus for c in contexts))
    if without:
        changes["claims_without_gpus"] = without
    return changes


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


class Part(msgspec.Struct):
    """Some of a unit's input, modelled: what subject_groups judges."""

    documents: list[Document] = msgspec.field(default_factory=list)
    workloads: list[Workload] = msgspec.field(default_factory=list)
    bare: list[Document] = msgspec.field(default_factory=list)


def by_file(read: ReadResult, workloads: Sequence[Workload]) -> dict[str, Part]:
    """A unit's input, file by file, in the order read."""
    out: dict[str, Part] = {}
    for doc in read.documents:
        out.setdefault(doc.file, Part()).documents.append(doc)
    for workload in workloads:
        out.setdefault(workload.document.file, Part()).workloads.append(workload)
    for doc in read.bare:
        out.setdefault(doc.file, Part()).bare.append(doc)
    return out


def split_alternatives(parts: Mapping[str, Part], chosen: Collection[str]) -> tuple[Part, dict[str, Part]]:
    """``parts`` (by file) as what the files not ``chosen`` hold together, and each chosen file's own."""
    rest = Part()
    for file, part in parts.items():
        if file not in chosen:
            rest.documents += part.documents
            rest.workloads += part.workloads
            rest.bare += part.bare
    return rest, {file: parts.get(file, Part()) for file in chosen}


def variant_contexts(
    site: Site, contexts: Mapping[str, Context], chosen: Sequence[str]
) -> tuple[Context, dict[str, Context]]:
    """From the context of each file of a folder: the whole folder's (what
    its other files are judged in, as before) and each alternative's: the
    folder's other files and that alternative, none of the others."""
    rest = [c for file, c in contexts.items() if file not in chosen]
    whole = merge_contexts(site, list(contexts.values()))
    return whole, {
        file: merge_contexts(site, [*rest, *([contexts[file]] if file in contexts else [])]) for file in chosen
    }


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


# (API group, kind, namespace, name, apiVersion, file, line, content digest) of a named object.
Identity = tuple[str, str, str, str, str, str, int, bytes]


class _JudgedUnit(msgspec.Struct):
    """What one shard of a manifest audit sends back for one unit: small, picklable."""

    read_errors: list[InputError]
    field_errors: list[InputError]
    evaluations: list[Evaluation]  # one per subject group
    resources: int
    gpu_workloads: int
    identities: list[Identity]  # see object_identities
    # A folder's alternatives, each judged in its own context: one per subject group, or none
    alternatives: list[Evaluation] = msgspec.field(default_factory=list)


def object_identities(documents: Sequence[Document]) -> list[Identity]:
    """The identity of each named object (``generateName`` makes a new
    object each time: left out), with a digest of its content: the same
    object defined twice alike is no conflict."""
    out = []
    for doc in documents:
        meta = doc.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            place = (group_of(doc.api_version), doc.kind, doc.namespace, name, doc.api_version, doc.file, doc.line)
            out.append((*place, _digest(doc.obj)))
    return out


try:  # hashlib's own blake2b, without hashlib importing OpenSSL (about 4 ms of every check's start-up)
    from _blake2 import blake2b
except ImportError:  # an interpreter without the module
    from hashlib import blake2b


def _digest(obj: Mapping[str, object]) -> bytes:
    try:
        data = msgspec.json.encode(obj, order="sorted")
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted: compared as written
        data = repr(obj).encode()
    return blake2b(data, digest_size=16).digest()


def duplicate_objects(identities: Iterable[Identity], *, across_files: bool = True) -> list[InputError]:
    """A warning for each object defined again, differently, in one unit
    (what one `kubectl apply` sends): a cluster keeps one of them, whichever
    is applied last, so the audit of the others may not hold. The same
    object defined alike twice is no conflict; the same name in other units
    is the usual one-folder-per-environment layout, not a mistake.
    ``across_files`` False (a folder of plain files): only a file that
    defines an object twice; files that define it differently are
    alternatives, each judged as a variant (``alternatives``)."""
    first: dict[tuple[str, ...], tuple[str, int, bytes]] = {}
    warnings = []
    for group, kind, namespace, name, api_version, file, line, digest in identities:
        place = (group, kind, namespace, name) if across_files else (group, kind, namespace, name, file)
        if place not in first:
            first[place] = (file, line, digest)
            continue
        first_file, first_line, first_digest = first[place]
        if digest == first_digest:
            continue
        label = f"{api_version} {kind} {namespace + '/' if namespace else ''}{name}"
        warnings.append(
            InputError(
                file,
                line,
                f"{label} is defined again (first at {first_file}:{first_line}); "
                "the cluster keeps one: the last applied",
                "warning",
            )
        )
    return warnings


def alternatives(identities: Iterable[Identity]) -> list[str]:
    """The files of a folder that define an object another file of it
    defines differently, in the order read: the folder's alternatives."""
    read: dict[str, None] = {}
    seen: dict[tuple[str, str, str, str], dict[bytes, set[str]]] = {}
    for group, kind, namespace, name, _, file, _, digest in identities:
        read[file] = None
        seen.setdefault((group, kind, namespace, name), {}).setdefault(digest, set()).add(file)
    found: set[str] = set()
    for versions in seen.values():
        files = set().union(*versions.values())
        if len(versions) > 1 and len(files) > 1:
            found |= files
    return [f for f in read if f in found]


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
    # Folders of plain files: their files may be alternatives (this module's docstring).
    may_vary = {unit.name for unit in units if unit.alternatives}
    site = Site.from_config(config.site)
    locators = locators_for(config)
    roots = input_roots(paths)

    def model(shard: Sequence[tuple[str, Item]]) -> tuple[dict[str, tuple], tuple]:
        """Each unit's reading (kept here) and what the parent needs: its
        context, and for a folder of plain files each file's context and objects."""
        states: dict[str, tuple] = {}
        contexts: dict[str, Context] = {}
        per_file: dict[str, tuple[list[Identity], dict[str, Context]]] = {}
        for name, unit_items in _by_unit(shard).items():
            read = ReadResult()
            read_items(unit_items, read)
            workloads, field_errors = build_workloads(read.documents, locators)
            identities = object_identities(read.documents)
            states[name] = (read, workloads, field_errors, identities)
            if name in may_vary:  # its context is its files' contexts merged
                files = {
                    file: build_context(site, part.documents, part.workloads, part.bare, roots)
                    for file, part in by_file(read, workloads).items()
                }
                per_file[name] = (identities, files)
                contexts[name] = merge_contexts(site, list(files.values()))
            else:
                contexts[name] = build_context(site, read.documents, workloads, read.bare, roots)
            # (Named below the folder it was found in: a repository called
            # gpu-platform says nothing of its units.)
            below = root_of(name, roots)
            if may_hold_gpu_config(below[1] if below else name) and any(e.level == "error" for e in read.errors):
                contexts[name] = msgspec.structs.replace(contexts[name], gpu_config_unread=True)
        return states, (contexts, per_file)

    varied: dict[str, list[str]] = {}  # unit -> its alternatives: found once every shard is read

    def combine_parts(parts: list[tuple]) -> tuple[dict[str, Context], dict[str, dict[str, Context]]]:
        """The context of each unit, and of each alternative of a folder that holds some."""
        per_unit: dict[str, list[Context]] = {}
        identities: dict[str, list[Identity]] = {}
        files: dict[str, dict[str, Context]] = {}
        for contexts, per_file in parts:
            for name, context in contexts.items():
                per_unit.setdefault(name, []).append(context)
            for name, (found, file_contexts) in per_file.items():
                identities.setdefault(name, []).extend(found)
                files.setdefault(name, {}).update(file_contexts)
        merged = {name: merge_contexts(site, contexts) for name, contexts in per_unit.items()}
        alternative: dict[str, dict[str, Context]] = {}
        for name, found in identities.items():
            chosen = alternatives(found)
            if chosen:
                varied[name] = chosen
                merged[name], alternative[name] = variant_contexts(site, files[name], chosen)
        return _share_across_roots(merged, alternative, roots)

    def judge(
        states: dict[str, tuple], shared: tuple[dict[str, Context], dict[str, dict[str, Context]]]
    ) -> dict[str, _JudgedUnit]:
        contexts, alternative = shared
        out: dict[str, _JudgedUnit] = {}
        for name, (read, workloads, field_errors, identities) in states.items():
            rest = Part(read.documents, workloads, read.bare)
            own: dict[str, Part] = {}
            if name in alternative:  # each alternative in its own context (and named by its file, below)
                rest, own = split_alternatives(by_file(read, workloads), alternative[name])
            gpu_workloads = sum(1 for w in workloads if workload_facts.requests_gpus(w, contexts[name]))
            out[name] = _JudgedUnit(
                read.errors,
                field_errors,
                judge_parts([(rest, contexts[name])]),
                len(read.documents),
                gpu_workloads,
                identities,
                judge_parts([(own[file], alternative[name][file]) for file in own]) if own else [],
            )
        return out

    def judge_parts(parts: Sequence[tuple[Part, Context]]) -> list[Evaluation]:
        """Each part's subjects in its context, all in one evaluation per subject group."""
        inputs = {"manifest", *site_inputs(config.site)}
        # The runtime may sit in another shard than its InferenceService: the
        # merged context has them all.
        groups = [
            subject_groups(part.documents, effective_workloads(part.workloads, c.runtimes, locators), c, part.bare)
            for part, c in parts
        ]
        return [
            evaluate(
                rules,
                chain.from_iterable(each[g] for each in groups),
                inputs=inputs,
                exemptions=config.exemptions,
                keep_subjects=keep_subjects,
            )
            for g in range(len(groups[0]))
        ]

    processes = 1 if keep_subjects else workers_for(len(items), _MIN_FILES_PER_PROCESS)
    shards = run_sharded(items, processes, model, combine_parts, judge, _work)
    judged = [[shard[name] for shard in shards if name in shard] for name in order]
    groups = range(len(next((j[0].evaluations for j in judged if j), [])))
    # One unit (a file, stdin): nothing to name. A folder's alternatives are named by their files.
    named = len([name for name in order if name]) > 1 or bool(varied)
    evaluation = combine(
        [
            _in_unit(evaluations[g], name if named else None, varied.get(name, ()))
            for g in groups
            for name, parts in zip(order, judged, strict=True)
            for evaluations in [*(part.evaluations for part in parts), *(part.alternatives for part in parts)]
            if evaluations
        ]
    )
    return AuditResult(
        findings=_once(evaluation.findings),
        suppressed=evaluation.suppressed,
        skipped=evaluation.skipped,
        errors=[
            *_said_once(
                _in_fixtures_warn(
                    chain(
                        (e for parts in judged for part in parts for e in part.read_errors),
                        (e for parts in judged for part in parts for e in part.field_errors),
                    ),
                    roots,
                )
            ),
            *(
                w
                for name, parts in zip(order, judged, strict=True)
                for w in duplicate_objects(
                    (i for part in parts for i in part.identities), across_files=name not in may_vary
                )
            ),
            *evaluation.warnings,
        ],
        rules=list(rules),
        resources=sum(part.resources for parts in judged for part in parts),
        gpu_workloads=sum(part.gpu_workloads for parts in judged for part in parts),
    )


def _said_once(errors: Iterable[InputError]) -> list[InputError]:
    """Each problem once (a chart template that loops over twenty namespaces
    writes its duplicate key twenty times), and
    warnings that say one thing of many objects once, at the first, with how
    many more there are: that a kind's pods were found by their
    shape (a home lab's thirteen app-template HelmReleases are one thing to
    know), and that files are templates to render first (an app catalogue's
    45 template.yaml files)."""
    out: list[InputError] = []
    first: dict[tuple[str, str], int] = {}
    more: dict[tuple[str, str], int] = {}
    seen: set[InputError] = set()
    for error in errors:
        if error in seen:  # a loop in a template, a base every overlay renders: said once
            continue
        seen.add(error)
        key = error.group if error.level == "warning" else None
        if key is None:
            out.append(error)
        elif key in first:
            more[key] += 1
        else:
            first[key], more[key] = len(out), 0
            out.append(error)
    for key, at in first.items():
        if more[key]:
            said = out[at]
            out[at] = msgspec.structs.replace(said, message=f"{said.message} (and {more[key]} more {key[0]})")
    return out


def _in_fixtures_warn(errors: Iterable[InputError], roots: Sequence[str]) -> Iterator[InputError]:
    """The input's problems, those of a file in a test folder (fixtures
    broken on purpose, golden files) as warnings: its findings are held
    back, so its problems do not make the audit of the rest partial."""
    for error in errors:
        if error.level == "error" and file_context(error.file, roots) == "test":
            error = msgspec.structs.replace(
                error, message=f"{error.message} (its path says it is a test: a warning)", level="warning"
            )
        yield error


def _by_unit(shard: Sequence[tuple[str, Item]]) -> dict[str, list[Item]]:
    out: dict[str, list[Item]] = {}
    for name, item in shard:
        out.setdefault(name, []).append(item)
    return out


def _in_unit(evaluation: Evaluation, unit: str | None, alternatives: Collection[str] = ()) -> Evaluation:
    """The findings named by their unit: an alternative's by its file."""
    if not unit:
        return evaluation
    return msgspec.structs.replace(
        evaluation,
        findings=[
            msgspec.structs.replace(f, units=(f.location.file if f.location.file in alternatives else unit,))
            for f in evaluation.findings
        ],
    )


def _once(findings: Sequence[Finding]) -> list[Finding]:
    """Findings the same in several units (a base under several roots, a
    template in several chart variants: the same rule at the same line,
    judging the same evidence) as one finding naming every unit; the first
    keeps its place, names and message. Within one unit, the objects one
    template line renders alike (a chart's Job per node) are one comment at
    that line, not one per object."""
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
