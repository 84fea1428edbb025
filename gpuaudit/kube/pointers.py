"""JSON pointers (RFC 6901) over plain JSON-like values: the one implementation
that locators, facts and patches share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def tokens(pointer: str) -> list[str]:
    if not pointer:
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    parts = pointer[1:].split("/")
    if "~" not in pointer:  # nothing escaped: most pointers, and the builder's hot path
        return parts
    return [t.replace("~1", "/").replace("~0", "~") for t in parts]


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def join(pointer: str, *parts: str | int) -> str:
    return pointer + "".join("/" + escape(str(p)) for p in parts)


def pointer_of(parts: list[str | int]) -> str:
    return join("", *parts)


def join_relative(base: str, rel: str) -> str:
    """``rel`` below ``base``; a ``rel`` starting with '/' is already absolute
    (locator fields such as ``metadata: template/metadata``)."""
    if rel.startswith("/"):
        return rel
    return base + ("/" + rel if rel else "")


_MISSING = object()


def get(value: Any, pointer: str, default: Any = None) -> Any:
    """The value at ``pointer``, or ``default`` when any step is missing."""
    for token in tokens(pointer):
        if type(value) is dict or isinstance(value, Mapping):  # dict first: parsed YAML is dicts
            value = value.get(token, _MISSING)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return default
        if value is _MISSING:
            return default
    return value


def expand(obj: Any, pointer: str) -> Iterator[tuple[str, str | None, Any]]:
    """(concrete pointer, wildcard key, value) for a pointer with `*` segments."""

    def walk(value: Any, rest: list[str], path: str, key: str | None) -> Iterator[tuple[str, str | None, Any]]:
        if not rest:
            yield path, key, value
            return
        head, rest = rest[0], rest[1:]
        if head == "*":
            if isinstance(value, Mapping):
                for k in value:
                    yield from walk(value[k], rest, f"{path}/{escape(str(k))}", str(k))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    yield from walk(item, rest, f"{path}/{i}", str(i))
            return
        child = value.get(head) if isinstance(value, Mapping) else get(value, "/" + escape(head))
        if child is not None:
            yield from walk(child, rest, f"{path}/{escape(head)}", key)

    yield from walk(obj, tokens(pointer), "", None)


def relative(pointer: str, base: str) -> str:
    """``pointer`` made relative to ``base`` (for List items: /items/3/spec -> /spec)."""
    if base and pointer.startswith(base):
        return pointer[len(base) :]
    return pointer
