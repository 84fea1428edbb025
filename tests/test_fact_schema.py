"""The fact schema (gpuaudit/facts/facts.schema.json): generated from the fact
types (gpuaudit/facts/types.py) and committed, a valid draft-07 schema whose
every `$ref` resolves and every target has its definition; and how the
generator says the types as the schema rules read."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

import jsonschema
import msgspec
import pytest
from msgspec import Meta

from gpuaudit.engine.rules import fact_schema
from gpuaudit.facts import TARGETS, schema, types
from gpuaudit.facts.types import ABSENT, Number

from .conftest import ROOT


def test_the_committed_schema_is_the_one_the_types_generate():
    assert schema.SCHEMA_PATH.read_text(encoding="utf-8") == schema.text(), (
        "stale: run .venv/bin/python scripts/gen_fact_schema.py"
    )


def test_the_script_says_the_committed_schema_is_fresh():
    script = ROOT / "scripts" / "gen_fact_schema.py"
    fresh = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert fresh.returncode == 0, fresh.stderr


def test_the_schema_is_valid_and_rules_read_the_committed_file():
    jsonschema.Draft7Validator.check_schema(fact_schema())
    assert fact_schema() == schema.read()
    assert fact_schema()["$id"] == schema.SCHEMA_ID


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_ref_resolves():
    refs = set(_refs(fact_schema()))
    assert refs, "the fact schema shares definitions through $ref"
    assert {ref.removeprefix("#/$defs/") for ref in refs} <= set(fact_schema()["$defs"])


def test_every_target_has_its_type_and_its_closed_definition():
    assert set(types.TARGET_TYPES) == set(TARGETS)
    defs = fact_schema()["$defs"]
    for target in TARGETS:
        assert defs[target].get("type") == "object", target
        assert defs[target].get("additionalProperties") is False, target


# --- how the generator says a type, on made-up types ----------------------------


class Shared(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A shape two facts share."""

    a: int


class Inline(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    b: str


class Doc(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A target."""

    count: Annotated[Number | None, Meta(description="ints stay ints")] = None
    held: Annotated[Number | None, ABSENT] = None
    kind: Literal["z", "a", None]
    shared: Shared | None
    inline: Annotated[Inline | None, Meta(description="written in place")] = None
    klass: str = msgspec.field(name="class", default="")


def test_unions_become_one_node_and_only_named_shapes_stay_defs():
    defs = schema.shaped_defs([Doc], {"doc": Doc, "shared": Shared})
    assert defs == {
        "doc": {
            "type": "object",
            "description": "A target.",
            "additionalProperties": False,
            "properties": {
                "count": {"type": ["number", "null"], "description": "ints stay ints"},
                "held": {"type": "number"},  # ABSENT: absent from some documents, never null
                "kind": {"enum": ["z", "a", None]},  # in the order written
                "shared": {"$ref": "#/$defs/shared"},
                "inline": {
                    "type": ["object", "null"],
                    "description": "written in place",
                    "additionalProperties": False,
                    "properties": {"b": {"type": "string"}},
                },
                "class": {"type": "string"},
            },
        },
        "shared": {  # a $def some fact holds as X | None admits null
            "type": ["object", "null"],
            "description": "A shape two facts share.",
            "additionalProperties": False,
            "properties": {"a": {"type": "integer"}},
        },
    }


def test_a_union_the_schema_cannot_say_is_an_error():
    class Mixed(msgspec.Struct):
        value: str | int

    with pytest.raises(ValueError, match="cannot say as one node"):
        schema.shaped_defs([Mixed], {"mixed": Mixed})
