"""The fact schema's fragments (gpuaudit/facts/<module>.schema.json): each a
valid schema beside the module that computes its facts, every fact documented
in one fragment only, and the assembled schema whole (every `$ref` resolves,
every target has its definition)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuaudit.engine.fact_schema import DRAFT, FRAGMENT_SUFFIX, FactSchemaError, assemble, read_fragments
from gpuaudit.engine.rules import fact_schema
from gpuaudit.facts import TARGETS

from .conftest import ROOT

FACTS = ROOT / "gpuaudit" / "facts"
FRAGMENTS = sorted(FACTS.glob(f"*{FRAGMENT_SUFFIX}"))

# Facts modules that compute no facts of their own: what they return becomes
# a fact only through a module that has a fragment.
HELPERS = {
    "__init__",  # Subject and TARGETS
    "capacity",  # physical GPU equivalents, reported by cluster.py as gpus_allocated
    "cmdline",  # command-line words, read by parallelism, model_size and process
    "context",  # the site and the rest of the input, handed to the modules that need them
    "env_sources",  # env from the input's ConfigMaps, completing containers before facts read them
    "scheduling",  # the scheduler's answers, turned into facts by placement and cluster
}


def _module(fragment: Path) -> str:
    return fragment.name.removesuffix(FRAGMENT_SUFFIX)


def test_every_facts_module_has_its_fragment_beside_it():
    modules = {p.stem for p in FACTS.glob("*.py")}
    fragments = {_module(p) for p in FRAGMENTS}
    assert sorted(modules - HELPERS - fragments) == [], "facts modules without a fragment"
    assert sorted(fragments - modules) == [], "fragments without their module"
    assert sorted(HELPERS & fragments) == [], "helpers with a fragment: take them off HELPERS"
    assert sorted(HELPERS - modules) == [], "helpers that no longer exist"


@pytest.mark.parametrize("path", FRAGMENTS, ids=_module)
def test_every_fragment_is_a_valid_schema(path: Path):
    fragment = json.loads(path.read_text(encoding="utf-8"))
    assert fragment.get("$schema") == DRAFT
    jsonschema.Draft7Validator.check_schema(fragment)


def _defined(node: Mapping[str, Any], path: str) -> Iterator[str]:
    """Paths a fragment defines: nodes with keywords besides ``properties``."""
    if set(node) - {"properties"}:
        yield path
    for name, sub in node.get("properties", {}).items():
        yield from _defined(sub, f"{path}.{name}")


def test_no_fact_is_documented_in_two_fragments():
    owners: Counter[str] = Counter()
    for path in FRAGMENTS:
        for name, node in json.loads(path.read_text(encoding="utf-8"))["$defs"].items():
            owners.update(_defined(node, name))
    assert [path for path, count in owners.items() if count > 1] == []


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_ref_in_the_assembled_schema_resolves():
    schema = fact_schema()
    refs = set(_refs(schema))
    assert refs, "the fact schema shares definitions through $ref"
    for ref in sorted(refs):
        assert ref.startswith("#/"), ref
        node: Any = schema
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(node, Mapping) and part in node, f"{ref} does not resolve"
            node = node[part]


def test_every_target_has_its_definition():
    defs = fact_schema()["$defs"]
    for target in TARGETS:
        assert defs[target].get("type") == "object", target
        assert defs[target].get("additionalProperties") is False, target


def test_fragments_are_read_from_the_package():
    assert sorted(read_fragments()) == [p.name for p in FRAGMENTS]


# --- the assembler's rules, on made-up fragments ---------------------------------


def _fragment(defs: Mapping[str, Any]) -> dict[str, Any]:
    return {"$schema": DRAFT, "$defs": defs}


def test_contributions_merge_into_nested_objects():
    owner = _fragment(
        {
            "pod": {
                "type": "object",
                "properties": {"placement": {"type": "object", "properties": {"a": {"type": "string"}}}},
            }
        }
    )
    other = _fragment({"pod": {"properties": {"placement": {"properties": {"b": {"type": "integer"}}}}}})
    pod = assemble({"other.schema.json": other, "owner.schema.json": owner})["$defs"]["pod"]
    assert pod == {
        "type": "object",
        "properties": {
            "placement": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
        },
    }


def test_a_fact_documented_twice_is_an_error():
    one = _fragment({"pod": {"type": "object", "properties": {"node": {"type": "string"}}}})
    two = _fragment({"pod": {"properties": {"node": {"type": ["string", "null"]}}}})
    expected = "pod.node is defined in both one.schema.json and two.schema.json"
    with pytest.raises(FactSchemaError, match=re.escape(expected)):
        assemble({"one.schema.json": one, "two.schema.json": two})


def test_a_definition_given_twice_is_an_error():
    one = _fragment({"pod": {"type": "object"}})
    two = _fragment({"pod": {"description": "again"}})
    with pytest.raises(FactSchemaError, match="pod is defined in both"):
        assemble({"one.schema.json": one, "two.schema.json": two})


def test_properties_for_an_undefined_object_are_an_error():
    orphan = _fragment({"pod": {"properties": {"node": {"type": "string"}}}})
    expected = "orphan.schema.json adds properties to pod, which no fragment defines"
    with pytest.raises(FactSchemaError, match=re.escape(expected)):
        assemble({"orphan.schema.json": orphan})


@pytest.mark.parametrize(
    "fragment",
    [
        {"$defs": {}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": {}},
        {"$schema": DRAFT, "$defs": {}, "description": "dropped silently otherwise"},
    ],
)
def test_a_fragment_holds_schema_and_defs_only(fragment: Mapping[str, Any]):
    with pytest.raises(FactSchemaError, match="nothing else"):
        assemble({"bad.schema.json": fragment})
