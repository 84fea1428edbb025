"""Finding messages: ``{{ fact.path }}`` filled from the subject's facts.

Plain substitutions (all built-in rules) are handled here without Jinja2, so
`gpuaudit check` starts fast. Anything richer (filters, conditionals) in a
user's rule is rendered by Jinja2's *sandboxed* environment, which refuses
attribute tricks that would reach Python internals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

# Plain names and list indexes (``pins.0.node``, as Jinja2 reads them) only;
# anything starting with "_" goes to the sandbox, which refuses it.
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z]\w*(?:\.(?:[A-Za-z]\w*|\d+))*)\s*\}\}")
_ANY_TEMPLATE = re.compile(r"\{\{|\{%|\{#")


def lookup(facts: Mapping[str, Any], path: str) -> Any:
    value: Any = facts
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, (list, tuple)) and part.isdigit():
            value = value[int(part)] if int(part) < len(value) else None
        else:
            return None
    return value


def show(value: Any) -> str:
    """A value as a person reads it: 2.0 -> '2', 0.123456 -> '0.123',
    16734.2 -> '16,734', [] -> 'none'."""
    if value is None:
        return "no"
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


def _is_plain(template: str) -> bool:
    return not _ANY_TEMPLATE.search(_PLACEHOLDER.sub("", template))


def render(template: str, context: Mapping[str, Any]) -> str:
    if _is_plain(template):
        return _PLACEHOLDER.sub(lambda m: show(lookup(context, m.group(1))), template)
    return _sandboxed(template).render(**context)


def check_template(template: str) -> str | None:
    """A problem with a message template, or None. Only non-plain templates
    need Jinja2 to tell."""
    if _is_plain(template):
        return None
    try:
        _sandboxed(template)
    except Exception as exc:  # jinja2.TemplateSyntaxError and friends
        return f"invalid template: {exc}"
    return None


@cache
def _sandboxed(template: str) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(autoescape=False)
    return env.from_string(template)
