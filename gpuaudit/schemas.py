"""Validating user-written input (rules, config, snapshots) against JSON Schema.

fastjsonschema compiles a schema to Python and accepts valid input in
microseconds, which keeps `gpuaudit check` quick; only when input is invalid
do we import jsonschema, whose ``best_match`` names the offending key best.
Both are imported where they are used: a check with no config file and a
cached rule pack (engine/rule_cache.py) validates nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any

from gpuaudit.bundled import data_text, policies_dir
from gpuaudit.kube.pointers import join


class SchemaError(ValueError):
    """Input that does not match its schema; ``path`` is the offending key."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


@cache
def load_schema(name: str) -> Mapping[str, Any]:
    """A schema shipped in gpuaudit/data (or policies/ for the rule schema)."""
    if name == "rule.schema.json":
        return json.loads((policies_dir() / name).read_text())
    return json.loads(data_text(name))


@cache
def _compiled(name: str) -> Callable[[Any], Any]:
    import fastjsonschema

    return fastjsonschema.compile(load_schema(name))


def validate(instance: Any, schema_name: str) -> None:
    """Raise SchemaError with the most relevant problem when ``instance`` is invalid."""
    import fastjsonschema

    try:
        _compiled(schema_name)(instance)
    except fastjsonschema.JsonSchemaException:
        raise explain(instance, load_schema(schema_name)) from None


def explain(instance: Any, schema: Mapping[str, Any]) -> SchemaError:
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)
    error = best_match(validator.iter_errors(instance))
    if error is None:  # the two libraries disagree: report it plainly
        return SchemaError("does not match its schema", "")
    path = ".".join(str(p) for p in error.absolute_path)
    return SchemaError(error.message, path)


def unknown_keys(instance: Any, schema: Mapping[str, Any], at: str = "") -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(the pointer of the mapping, the key, the keys it may have) for every
    key of ``instance`` that a closed mapping of ``schema`` (properties and
    ``additionalProperties: false``) does not name, at every level: what a
    typo looks like, so the caller can name the nearest key. Follows
    ``properties``, ``additionalProperties`` and ``items``; no ``$ref``."""
    if isinstance(instance, Mapping):
        properties = schema.get("properties") or {}
        more = schema.get("additionalProperties", True)
        for key, value in instance.items():
            if key in properties:
                yield from unknown_keys(value, properties[key], join(at, key))
            elif more is False:
                yield at, str(key), tuple(properties)
            elif isinstance(more, Mapping):
                yield from unknown_keys(value, more, join(at, str(key)))
    elif isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(instance):
            yield from unknown_keys(item, schema["items"], join(at, index))
