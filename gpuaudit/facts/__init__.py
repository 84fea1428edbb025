"""Facts: plain JSON-like documents derived from the model, one per subject.

Rules (YAML, JSON Schema) judge these documents. Their shape is declared once,
as types: ``types.py`` holds one ``msgspec.Struct`` per target, each fact
documented on its field; ``facts.schema.json``, the schema rules are
validated against (a rule that names an undeclared fact is rejected at load),
is generated from them (``scripts/gen_fact_schema.py``, ``schema.py``). The
facts modules still build dicts, which rules judge; a reader elsewhere reads
``Subject.typed`` (or ``types.as_type``), attributes a type checker follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from gpuaudit.model import Document, Resource

if TYPE_CHECKING:
    from gpuaudit.facts.types import TargetFacts

TARGETS = ("workload", "pod", "container", "config", "node", "claim", "cluster")
FactsType = TypeVar("FactsType")


# dict=True: room for the typed view, converted when a reader first asks.
class Subject(msgspec.Struct, frozen=True, dict=True):
    """One thing a rule can judge: its facts, what it is, and where it was read."""

    target: str
    facts: Mapping[str, Any]
    resource: Resource
    document: Document | None
    # Where exemption annotations are read (the object's and its pod template's).
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    scope: str = "manifest"  # manifest | cluster

    @cached_property
    def typed(self) -> TargetFacts:
        """The facts as their target's type (facts/types.py), converted once;
        for readers, never for judging (``gpuaudit check`` does not import the
        types)."""
        from gpuaudit.facts.types import as_facts

        return as_facts(self.target, self.facts)

    def facts_as(self, cls: type[FactsType]) -> FactsType:
        """``typed`` for a reader that knows the target: ``facts_as(PodFacts)``."""
        typed = self.typed
        if not isinstance(typed, cls):
            raise TypeError(f"a {self.target} subject's facts are no {cls.__name__}")
        return typed
