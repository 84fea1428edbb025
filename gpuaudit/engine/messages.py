"""Finding messages: ``{{ fact.path }}`` filled from the subject's facts.

Every built-in message, and a site rule's message that only names facts, is
rendered here by plain substitution: each placeholder is replaced by its
value as a person reads it (``show``). A site rule's message that needs more
(filters, conditionals, loops) goes to `engine/message_sandbox.py`, which
needs Jinja2 and is imported only for such a message, so `gpuaudit check`
with the built-in rules never imports Jinja2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# Plain names and list indexes (``pins.0.node``, as Jinja2 reads them) only;
# anything else (a filter, a name starting with "_") goes to the sandbox.
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z]\w*(?:\.(?:[A-Za-z]\w*|\d+))*)\s*\}\}")
_ANY_TEMPLATE = re.compile(r"\{\{|\{%|\{#")

# What a message shows for a field the fact document does not have, and for
# one it has as null (a fact gpuaudit could not tell): never "no" or "0",
# which would read as values.
UNSET = "unset"
UNKNOWN = "unknown"

_MAX_CACHED = 4096  # rules name a few hundred paths; one template per rule
_PATHS: dict[str, tuple[str, ...]] = {}
# A template split once: (the literal texts, the paths between them), or None
# for a template that is more than substitution.
_Plain = tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]
_PLAIN: dict[str, _Plain | None] = {}


def lookup(facts: Mapping[str, Any], path: str) -> Any:
    parts = _PATHS.get(path)
    if parts is None:
        parts = tuple(path.split("."))
        if len(_PATHS) < _MAX_CACHED:
            _PATHS[path] = parts
    value: Any = facts
    for part in parts:
        if type(value) is dict or isinstance(value, Mapping):  # dict first: facts are dicts
            value = value.get(part)
        elif isinstance(value, (list, tuple)) and part.isdigit():
            index = int(part)
            value = value[index] if index < len(value) else None
        else:
            return None
    return value


def _shown_at(value: Any, parts: tuple[str, ...]) -> str:
    """``show`` of the value at a path, or "unset" where the path leads to no
    field at all (a missing key, an index past the end)."""
    for part in parts:
        if type(value) is dict or isinstance(value, Mapping):
            if part not in value:
                return UNSET
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return UNSET
    return show(value)


def show(value: Any) -> str:
    """A value as a person reads it: 2.0 -> '2', 0.123456 -> '0.123',
    16734.2 -> '16,734', [] -> 'none', null -> 'unknown'."""
    if type(value) is str:  # most values: names, kinds, images
        return value
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) or abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(show(v) for v in value) or "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={show(v)}" for k, v in value.items()) or "none"
    return str(value)


def _plain(template: str) -> _Plain | None:
    """The template split at its placeholders, or None when it holds more
    than placeholders (anything else that Jinja2 would read as template)."""
    try:
        return _PLAIN[template]
    except KeyError:
        pass
    parts = None
    if not _ANY_TEMPLATE.search(_PLACEHOLDER.sub("", template)):
        texts, paths, at = [], [], 0
        for m in _PLACEHOLDER.finditer(template):
            texts.append(template[at : m.start()])
            paths.append(tuple(m.group(1).split(".")))
            at = m.end()
        texts.append(template[at:])
        parts = (tuple(texts), tuple(paths))
    if len(_PLAIN) < _MAX_CACHED:
        _PLAIN[template] = parts
    return parts


def render_message(template: str, facts: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """The message of a finding: ``{{ params.name }}`` from the rule's params,
    any other placeholder from the subject's facts."""
    parts = _plain(template)
    if parts is None:
        from gpuaudit.engine import message_sandbox

        return message_sandbox.render(template, {**facts, "params": params})
    texts, paths = parts
    out = [texts[0]]
    for path, text in zip(paths, texts[1:], strict=True):
        out.append(_shown_at(params, path[1:]) if path[0] == "params" else _shown_at(facts, path))
        out.append(text)
    return "".join(out)


def render(template: str, context: Mapping[str, Any]) -> str:
    """A template filled from ``context`` alone (no params)."""
    parts = _plain(template)
    if parts is None:
        from gpuaudit.engine import message_sandbox

        return message_sandbox.render(template, context)
    texts, paths = parts
    return texts[0] + "".join(_shown_at(context, p) + t for p, t in zip(paths, texts[1:], strict=True))


def check_template(template: str) -> str | None:
    """A problem with a message template, or None. A plain one has none; one
    that needs more is checked by the sandbox (which needs Jinja2)."""
    if _plain(template) is not None:
        return None
    try:
        from gpuaudit.engine import message_sandbox
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("jinja2", "markupsafe"):
            raise
        return (
            "uses more than {{ fact.path }} placeholders (filters, conditions or loops), which needs Jinja2:"
            " pip install 'gpuaudit[report]'"
        )
    return message_sandbox.check(template)
