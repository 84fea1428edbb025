"""The fact schema, assembled from fragments that sit beside the facts modules.

Every module of gpuaudit/facts/ that computes facts documents them in
``<module>.schema.json`` next to it (e.g. ``workload.schema.json`` beside
``workload.py``): a draft-07 document holding ``$schema`` and ``$defs`` and
nothing else. Nothing lists the fragments: every ``*.schema.json`` in that
folder is one, so a new fact is one module and its fragment.

How fragments combine (``assemble``):

- A ``$def`` (a target such as ``pod``, or a shared shape such as ``gpu``) and
  any object inside it is *defined* by one fragment: that of the module that
  builds the document. It gives the node's ``type``, ``description``,
  ``additionalProperties``... and the properties that module computes,
  including identity keys several builders write (a claim's ``name`` is
  documented once, by cluster.py, though claims.py sets it too).
- Another module *contributes* the properties it computes with a node that
  holds only ``properties``, at any depth: process.py adds ``pod.model``,
  placement.py ``pod.placement.spread`` and
  ``pod.placement.gpu_product.broader_class``.
- ``properties`` merge recursively. A node two fragments define (a property
  documented twice) and a contribution to a node no fragment defines are
  errors, raised on first use of the schema: a fact is documented exactly once.

Why recursive merging and not only contributions to a ``$def``'s top-level
properties: nested objects gather facts from several modules too
(``pod.placement`` from workload.py, placement.py and cluster.py), and with a
flat merge their facts would stay in the fragment of whoever builds the parent.

Reading the fragments costs a dozen small JSON files on each run (the engine
caches the result); nothing beyond ``json`` is imported for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FRAGMENT_SUFFIX = ".schema.json"
# gpuaudit/facts: each fragment sits beside the module that computes its facts.
FRAGMENTS_DIR = Path(__file__).resolve().parents[1] / "facts"
DRAFT = "http://json-schema.org/draft-07/schema#"
# What the assembled document says about itself: no fragment speaks for the whole.
ENVELOPE: Mapping[str, Any] = {
    "$schema": DRAFT,
    "$id": "https://gpuaudit.dev/schemas/facts.schema.json",
    "title": "gpuaudit fact documents",
    "description": "The documents rules judge, one definition per target. Every property is documented; "
    "a rule that names a property not listed here is rejected at load. `pointer` values are JSON "
    "pointers into the object (the finding's line comes from them).",
}


class FactSchemaError(ValueError):
    """Fragments that do not assemble into one schema documenting each fact once."""


def read_fragments() -> dict[str, Mapping[str, Any]]:
    """Every ``gpuaudit/facts/*.schema.json``, by file name, in name order (so
    that the assembled schema and its errors do not depend on the file system)."""
    return {
        entry.name: json.loads(entry.read_text(encoding="utf-8"))
        for entry in sorted(FRAGMENTS_DIR.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(FRAGMENT_SUFFIX)
    }


def assemble(fragments: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One schema with every fragment's ``$defs`` merged; ``fragments`` maps a
    fragment's file name (used in errors) to its document."""
    defs: dict[str, Any] = {}
    defined_by: dict[str, str] = {}  # fact path -> the fragment that defines it
    contributed_by: dict[str, str] = {}  # fact path -> a fragment that only adds properties
    for name, fragment in fragments.items():
        if set(fragment) != {"$schema", "$defs"} or fragment["$schema"] != DRAFT:
            raise FactSchemaError(f'{name}: a fragment holds "$schema": "{DRAFT}" and "$defs", nothing else')
        for def_name, node in fragment["$defs"].items():
            _merge(defs.setdefault(def_name, {}), node, def_name, name, defined_by, contributed_by)
    for path, fragment in contributed_by.items():
        if path not in defined_by:
            raise FactSchemaError(f"{fragment} adds properties to {path}, which no fragment defines")
    return {**ENVELOPE, "$defs": defs}


def _merge(
    into: dict[str, Any],
    node: Mapping[str, Any],
    path: str,
    fragment: str,
    defined_by: dict[str, str],
    contributed_by: dict[str, str],
) -> None:
    keywords = {k: v for k, v in node.items() if k != "properties"}
    if keywords:
        if path in defined_by:
            raise FactSchemaError(f"{path} is defined in both {defined_by[path]} and {fragment}")
        defined_by[path] = fragment
        into.update(keywords)
    else:
        contributed_by.setdefault(path, fragment)
    for name, sub in node.get("properties", {}).items():
        child = into.setdefault("properties", {}).setdefault(name, {})
        _merge(child, sub, f"{path}.{name}", fragment, defined_by, contributed_by)
