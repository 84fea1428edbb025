"""JSON pointers (RFC 6901) over plain JSON-like values."""

from __future__ import annotations

from typing import Any


def tokens(pointer: str) -> list[str]:
    if not pointer:
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def join(pointer: str, *parts: str | int) -> str:
    return pointer + "".join("/" + escape(str(p)) for p in parts)


def pointer_of(parts: list[str | int]) -> str:
    return join("", *parts)


_MISSING = object()


def get(value: Any, pointer: str, default: Any = None) -> Any:
    """The value at ``pointer``, or ``default`` when any step is missing."""
    for token in tokens(pointer):
        if isinstance(value, dict):
            value = value.get(token, _MISSING)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return default
        if value is _MISSING:
            return default
    return value


def relative(pointer: str, base: str) -> str:
    """``pointer`` made relative to ``base`` (for List items: /items/3/spec -> /spec)."""
    if base and pointer.startswith(base):
        return pointer[len(base) :]
    return pointer
