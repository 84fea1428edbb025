"""Kubernetes objects as read, and what was wrong with the input."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

import msgspec


def same_fields(a: msgspec.Struct, b: object, *, but: Collection[str]) -> Any:
    """``a == b`` on every field except ``but``: for records that carry data
    beside what they say (a finding's subject, a document's line map), which
    equality leaves out. NotImplemented for another type, as ``==`` expects."""
    if b.__class__ is not a.__class__:
        return NotImplemented
    return all(getattr(a, name) == getattr(b, name) for name in a.__struct_fields__ if name not in but)


class Document(msgspec.Struct, frozen=True):
    """One Kubernetes object as read, with where it came from.

    ``lines`` maps JSON pointers (relative to the file's YAML document) to
    1-based line numbers; ``base`` is this object's pointer inside that
    document (non-empty for items of a ``kind: List``).
    """

    obj: Mapping[str, Any]
    file: str
    line: int
    lines: Mapping[str, int] = msgspec.field(default_factory=dict)
    base: str = ""
    # Fields a kustomize patch set, relative to this object: pointer ->
    # (the patch's file, its line, whether the patch sets a value there
    # rather than only leading to one). See ``place_of``.
    patched: Mapping[str, tuple[str, int, bool]] = msgspec.field(default_factory=dict)
    # Built by kustomize or helm: nothing is merged into it later, so what it
    # lacks (a container's image) it lacks when it is applied.
    rendered: bool = False

    def __eq__(self, other: object) -> Any:
        return same_fields(self, other, but=("lines", "patched"))

    def place_of(self, pointer: str) -> tuple[str, int]:
        """(file, line) that set ``pointer``: the patch that sets it or, going
        up, the nearest field a patch sets or the source file holds; a patch
        only leading to a field the source holds (a container it merges into)
        gives way to the source."""
        if not self.patched:
            return self.file, self.line_of(pointer)
        here = pointer
        while here:
            by_patch = self.patched.get(here)
            if by_patch is not None and by_patch[2]:
                return by_patch[0], by_patch[1]
            in_source = self.lines.get(self.base + here)
            if in_source is not None:
                return self.file, in_source
            if by_patch is not None:
                return by_patch[0], by_patch[1]
            here = here.rpartition("/")[0]
        return self.file, self.lines.get(self.base, self.line)

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
        return str(meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else ""

    @property
    def namespace(self) -> str:
        meta = self.obj.get("metadata")
        return str(meta.get("namespace") or "") if isinstance(meta, dict) else ""


class InputError(msgspec.Struct, frozen=True):
    """A problem with the input. ``level='error'`` makes the run exit 2;
    ``'warning'`` is reported without changing the exit code."""

    file: str
    line: int | None
    message: str
    level: Literal["error", "warning"] = "error"
    # A warning that says one thing of many objects: (what the others are
    # called, the key they share). A run says a group once, at its first
    # object, with how many more there are (pipelines/check._said_once).
    group: tuple[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message, "level": self.level}
