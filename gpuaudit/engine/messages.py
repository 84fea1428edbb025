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


# One expression must not be able to exhaust memory or CPU: `'x' * 10**9`,
# `9 ** 99 ** 9`. The sandbox already bounds range(); these bound the rest
# (a rule file is still code-like input: nested loops can take long).
MAX_REPEAT = 10_000
MAX_EXPONENT = 64


def _power_too_large(base: Any, exponent: Any) -> bool:
    """Whether base ** exponent would exceed 2 ** 1024 (beyond any float)."""
    if not isinstance(base, (int, float)) or not isinstance(exponent, (int, float)):
        return False
    if abs(exponent) > MAX_EXPONENT:
        return abs(base) != 1 and base != 0
    bits = abs(base).bit_length() if isinstance(base, int) else math.log2(abs(base) or 1)
    return exponent * bits > 1024


@cache
def _environment() -> Any:
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and _power_too_large(left, right):
                raise SecurityError(f"{left!r:.20} ** {right!r:.20} is too large a number")
            if operator == "*":
                for sequence, times in ((left, right), (right, left)):
                    repeats = isinstance(sequence, (str, list, tuple)) and isinstance(times, int)
                    if repeats and len(sequence) * times > MAX_REPEAT:
                        raise SecurityError(f"repetition longer than {MAX_REPEAT}")
            return super().call_binop(context, operator, left, right)

    return BoundedSandbox(autoescape=False)


@cache
def _sandboxed(template: str) -> Any:
    return _environment().from_string(template)
