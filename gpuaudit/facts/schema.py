"""The fact schema: ``facts.schema.json`` beside this module, generated from
the types of facts/types.py (``scripts/gen_fact_schema.py`` writes it, a test
fails when it is stale). Rules are validated against it: a rule that names a
fact not declared there is rejected at load.

``msgspec.json.schema_components`` gives the types' schema; ``generate``
shapes it as the schema rules were written against (draft-07, the ``$defs``
named ``pod``, ``gpu``, ``text_map``...):

- the targets and the shapes of ``types.SCHEMA_DEFS`` stay ``$defs`` under
  those names; every other Struct is written inline where it is used;
- ``X | None`` is one node: ``"type": [X, "null"]``, an enum with ``null``, or
  the ``$ref`` of a ``$def`` that then admits null (``unknown_facts`` and
  ``fact_path_known`` in engine/rules.py follow a ``$ref``, not an ``anyOf``);
- an int or float (``types.Number``) is a ``number``; a field marked
  ``types.ABSENT`` keeps its type without null;
- ``required`` only where a type asks for it (``__schema_required__``): a
  document lacking a fact a rule does not name is not invalid; msgspec's
  ``title`` and ``default`` are left out.

Reading the schema is one JSON file (engine/rules.py caches it); generating
it imports the types, which no command needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

SCHEMA_PATH = Path(__file__).resolve().with_name("facts.schema.json")
DRAFT = "http://json-schema.org/draft-07/schema#"
SCHEMA_ID = "https://gpuaudit.dev/schemas/facts.schema.json"
# What the document says about itself: no type speaks for the whole.
ENVELOPE: Mapping[str, Any] = {
    "$schema": DRAFT,
    "$id": SCHEMA_ID,
    "title": "gpuaudit fact documents",
    "description": "The documents rules judge, one definition per target. Every property is documented; "
    "a rule that names a property not listed here is rejected at load. `pointer` values are JSON "
    "pointers into the object (the finding's line comes from them).",
}
_ABSENT = "x-absent"  # the marker types.ABSENT leaves in msgspec's schema
_COMPONENT_REF = re.compile(r"^#/\$defs/(?P<name>.+)$")


def read() -> dict[str, Any]:
    """The committed schema."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def text() -> str:
    """The schema file's text, as ``generate`` makes it."""
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def generate() -> dict[str, Any]:
    """The fact schema from the types (see the module docstring)."""
    from gpuaudit.facts import types

    return {**ENVELOPE, "$defs": shaped_defs(types.TARGET_TYPES.values(), types.SCHEMA_DEFS)}


def shaped_defs(roots: Iterable[type], schema_defs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``$defs`` of the types ``roots`` reach; ``schema_defs`` names those
    that stay ``$defs`` (a Struct, or an ``Annotated`` alias whose ``Meta``
    title is its name)."""
    import msgspec

    _, components = msgspec.json.schema_components(list(roots), ref_template="#/$defs/{name}")
    structs = {cls.__name__: cls for cls in _reached(roots)}
    def_of = {value.__name__: name for name, value in schema_defs.items() if isinstance(value, type)}
    aliases = {name for name, value in schema_defs.items() if not isinstance(value, type)}
    shaper = _Shaper(components, structs, def_of, aliases, _literal_orders(structs.values()))
    defs = {def_of[cls]: shaper.component(cls) for cls in def_of}
    defs = {name: defs[name] for name in schema_defs if name in defs}  # in the order schema_defs lists them
    for name in defs:
        if name in shaper.nullable:
            defs[name]["type"] = ["object", "null"]
    for name in aliases:
        if name not in shaper.alias_defs:
            raise ValueError(f"types.SCHEMA_DEFS names {name}, which no fact uses")
        defs[name] = shaper.alias_defs[name]
    return defs


def _literal_orders(structs: Iterable[type]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Each ``Literal`` of the types' fields, by its values sorted: msgspec
    sorts an enum's values, the schema keeps them in the order written (the
    order a rule author reads, and ``purposes()``'s)."""
    orders: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def visit(hint: Any) -> None:
        if get_origin(hint) is Literal:
            orders[_sorted(get_args(hint))] = get_args(hint)
        for arg in get_args(hint):
            visit(arg)

    for cls in structs:
        for hint in get_type_hints(cls, include_extras=True).values():
            visit(hint)
    return orders


def _sorted(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(sorted(values, key=lambda v: (v is None, str(v))))


def _reached(roots: Iterable[type]) -> set[type]:
    """The Structs reachable from ``roots`` through their fields."""
    import msgspec.inspect

    seen: set[type] = set()

    def visit(info: Any) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in seen:
                return
            seen.add(info.cls)
            for field in info.fields:
                visit(field.type)
            return
        for attr in ("item_type", "value_type", "type"):
            if isinstance(getattr(info, attr, None), msgspec.inspect.Type):
                visit(getattr(info, attr))
        for member in getattr(info, "types", ()):
            visit(member)

    for info in msgspec.inspect.multi_type_info(list(roots)):
        visit(info)
    return seen


class _Shaper:
    def __init__(
        self,
        components: Mapping[str, Any],
        structs: Mapping[str, type],
        def_of: Mapping[str, str],
        aliases: set[str],
        literal_orders: Mapping[tuple[Any, ...], tuple[Any, ...]],
    ) -> None:
        self.components = components
        self.structs = structs
        self.def_of = def_of
        self.aliases = aliases
        self.literal_orders = literal_orders
        self.nullable: set[str] = set()  # $defs some fact holds as X | None
        self.alias_defs: dict[str, Any] = {}  # text_map: a dict alias marked by its title

    def component(self, name: str) -> dict[str, Any]:
        """A Struct's object schema: its description on one line, ``required``
        only where the type asks for it."""
        node = self.node(self.components[name])
        if "description" in node:
            node["description"] = " ".join(node["description"].split())
        if not getattr(self.structs[name], "__schema_required__", False):
            node.pop("required", None)
        return node

    def node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        title = node.get("title")
        if title in self.aliases:
            self.alias_defs[title] = self.node({k: v for k, v in node.items() if k != "title"})
            return {"$ref": f"#/$defs/{title}"}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "default", _ABSENT):
                continue
            if key == "$ref":
                name = _COMPONENT_REF.match(value)["name"]  # type: ignore[index]
                if name in self.def_of:
                    out["$ref"] = f"#/$defs/{self.def_of[name]}"
                else:
                    out.update(self.component(name))  # an inline shape: the field's description wins
            elif key == "enum":
                out[key] = list(self.literal_orders.get(_sorted(value), value))
            elif key == "anyOf":
                out.update(self.union([self.node(member) for member in value]))
            elif key == "properties":
                out[key] = {name: self.node(sub) for name, sub in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
                out[key] = self.node(value)
            else:
                out[key] = value
        if "description" in node:  # the field's, over an inline Struct's docstring
            out["description"] = node["description"]
        if node.get(_ABSENT):
            _drop_null(out)
        return _ordered(out)

    def union(self, members: list[dict[str, Any]]) -> dict[str, Any]:
        null = {"type": "null"} in members
        rest = [m for m in members if m != {"type": "null"}]
        kinds = [m.get("type") for m in rest]
        if set(map(str, kinds)) == {"integer", "number"} and all(len(m) == 1 for m in rest):
            rest = [{"type": "number"}]  # int | float: JSON's number
        if len(rest) != 1:
            raise ValueError(f"a fact's type is a union the schema cannot say as one node: {members}")
        [one] = rest
        if not null:
            return one
        if "$ref" in one:
            self.nullable.add(one["$ref"].rsplit("/", 1)[1])
            return one
        if "enum" in one:
            return {**one, "enum": [*one["enum"], None]}
        return {**one, "type": [one["type"], "null"]}


def _drop_null(node: dict[str, Any]) -> None:
    if isinstance(node.get("type"), list):
        kinds = [t for t in node["type"] if t != "null"]
        node["type"] = kinds[0] if len(kinds) == 1 else kinds
    if "enum" in node:
        node["enum"] = [v for v in node["enum"] if v is not None]


_KEY_ORDER = ("$ref", "type", "enum", "description", "additionalProperties", "required", "items", "properties")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    first = {k: node[k] for k in _KEY_ORDER if k in node}
    return {**first, **{k: v for k, v in node.items() if k not in first}}
