"""`gpuaudit facts`: the fact documents rules judge, one per subject, read and
built as `gpuaudit check` builds them (the same inputs, locators, site and
subjects), so a site rule's author sees exactly what the rule will see."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec
import yaml

from gpuaudit.facts import Subject
from gpuaudit.facts.context import Context, Site, build_context
from gpuaudit.jsontext import indented
from gpuaudit.kube.podspecs import KindLocator
from gpuaudit.model import InputError
from gpuaudit.model.serving_runtimes import effective_workloads
from gpuaudit.pipelines.check import (
    Part,
    alternatives,
    by_file,
    input_roots,
    manifest_subjects,
    model_items,
    object_identities,
    split_alternatives,
    variant_contexts,
)
from gpuaudit.pipelines.policy import locators_for
from gpuaudit.sources.inputs import InputOptions, gather_units
from gpuaudit.sources.user_config import Config


class FactsResult(msgspec.Struct, frozen=True):
    documents: list[dict[str, Any]]  # one per subject: target, resource, location, facts
    errors: list[InputError]


def manifest_facts(
    paths: Sequence[str],
    config: Config,
    stdin_text: str | None = None,
    *,
    targets: Collection[str] = (),
    options: InputOptions | None = None,
) -> FactsResult:
    """The subjects of the input (only those of ``targets`` when given), in
    the order the check judges them, each unit in its own context, as plain
    JSON-shaped documents."""
    locators = locators_for(config)
    site = Site.from_config(config.site)
    documents: list[dict[str, Any]] = []
    errors: list[InputError] = []
    roots = input_roots(paths)
    for unit in gather_units(paths, stdin_text, options):
        read, workloads, field_errors, context = model_items(unit.items, site, locators, roots)
        errors += [*read.errors, *field_errors]
        chosen = alternatives(object_identities(read.documents)) if unit.alternatives else []
        if not chosen:
            documents += _subject_documents(Part(read.documents, workloads, read.bare), context, locators, targets)
            continue
        # A folder of alternatives: each in its own context, as the check judges it.
        files = by_file(read, workloads)
        contexts = {f: build_context(site, p.documents, p.workloads, p.bare, roots) for f, p in files.items()}
        whole, each = variant_contexts(site, contexts, chosen)
        rest, variants = split_alternatives(files, chosen)
        documents += _subject_documents(rest, whole, locators, targets)
        for file, part in variants.items():
            documents += _subject_documents(part, each[file], locators, targets)
    return FactsResult(documents, errors)


def _subject_documents(
    part: Part, context: Context, locators: Mapping[tuple[str, str], KindLocator], targets: Collection[str]
) -> list[dict[str, Any]]:
    workloads = effective_workloads(part.workloads, context.runtimes, locators)  # as the check judges them
    return [
        subject_document(s)
        for s in manifest_subjects(part.documents, workloads, context, part.bare)
        if not targets or s.target in targets
    ]


def subject_document(subject: Subject) -> dict[str, Any]:
    """What a subject is, where it was read, and its facts (as rules see them)."""
    facts = subject.facts
    pointer = facts.get("pointer") if isinstance(facts.get("pointer"), str) else ""
    doc = subject.document
    file, line = doc.place_of(pointer) if doc is not None else (None, None)
    location = {
        "file": file,
        "line": line,
        "pointer": (doc.base if doc is not None else "") + pointer,
    }
    return {
        "target": subject.target,
        "resource": subject.resource.as_dict(),
        "location": location,
        "facts": json_shaped(facts),
    }


def json_shaped(value: Any) -> Any:
    """``value`` as JSON can hold it: text keys, lists for tuples, and an
    infinite or NaN number (a YAML ``.inf`` in a spec) as its text."""
    if isinstance(value, Mapping):
        return {str(k): json_shaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_shaped(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def dumps(documents: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """JSON (ASCII: what input quotes cannot reach a terminal) or YAML."""
    if fmt == "yaml":
        # libyaml's safe dumper where PyYAML was built with it: the pure-Python
        # one takes seconds on a large repository's facts.
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(list(documents), Dumper=dumper, sort_keys=False, default_flow_style=False)
    return indented(list(documents), allow_nan=False) + "\n"
