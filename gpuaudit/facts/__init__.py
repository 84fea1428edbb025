"""Facts: plain JSON-like documents derived from the model, one per subject.

Rules (YAML, JSON Schema) judge these documents; the shape of each target's
document is documented beside the code: each module that computes facts has
``<module>.schema.json`` next to it, holding the part of the fact schema it
computes (engine/fact_schema.py assembles them). Rules that name a fact not
in that schema are rejected at load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gpuaudit.model import Document, Resource

TARGETS = ("workload", "pod", "container", "config", "node", "claim", "cluster")


class Subject(msgspec.Struct, frozen=True):
    """One thing a rule can judge: its facts, what it is, and where it was read."""

    target: str
    facts: Mapping[str, Any]
    resource: Resource
    document: Document | None
    # Where exemption annotations are read (the object's and its pod template's).
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    scope: str = "manifest"  # manifest | cluster
