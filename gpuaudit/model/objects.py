"""Kubernetes objects as read, and what was wrong with the input."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Document:
    """One Kubernetes object as read, with where it came from.

    ``lines`` maps JSON pointers (relative to the file's YAML document) to
    1-based line numbers; ``base`` is this object's pointer inside that
    document (non-empty for items of a ``kind: List``).
    """

    obj: Mapping[str, Any]
    file: str
    line: int
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)
    base: str = ""

    def line_of(self, pointer: str) -> int:
        """Line of ``pointer`` (relative to this object), or of its nearest ancestor."""
        full = self.base + pointer
        while full:
            found = self.lines.get(full)
            if found is not None:
                return found
            full = full.rpartition("/")[0]
        return self.lines.get(self.base, self.line)

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return (
            str(meta.get("name") or meta.get("generateName") or "")
            if isinstance(meta, dict)
            else ""
        )

    @property
    def namespace(self) -> str:
        meta = self.obj.get("metadata")
        return str(meta.get("namespace") or "") if isinstance(meta, dict) else ""


@dataclass(frozen=True)
class InputError:
    """A problem with the input. ``level='error'`` makes the run exit 2;
    ``'warning'`` is reported without changing the exit code."""

    file: str
    line: int | None
    message: str
    level: Literal["error", "warning"] = "error"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message, "level": self.level}
