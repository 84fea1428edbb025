"""Finding messages: ``{{ fact.path }}`` filled from the subject's facts.

Plain substitutions (all built-in rules) are handled here without Jinja2, so
`gpuaudit check` starts fast. Anything richer (filters, conditionals) in a
user's rule is rendered by Jinja2's *sandboxed* environment, which refuses
attribute tricks that would reach Python internals.
"""

from __future__ import annotations

import math
import re
import time
import types
from collections.abc import Mapping
from contextvars import ContextVar
from functools import cache, update_wrapper, wraps
from typing import Any

# Plain names and list indexes (``pins.0.node``, as Jinja2 reads them) only;
# anything starting with "_" goes to the sandbox, which refuses it.
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z]\w*(?:\.(?:[A-Za-z]\w*|\d+))*)\s*\}\}")
_ANY_TEMPLATE = re.compile(r"\{\{|\{%|\{#")


def lookup(facts: Mapping[str, Any], path: str) -> Any:
    parts = _PATHS.get(path)
    if parts is None:
        parts = tuple(path.split("."))
        if len(_PATHS) < _MAX_CACHED:  # rules name a few hundred paths
            _PATHS[path] = parts
    return lookup_parts(facts, parts)


def lookup_parts(value: Any, parts: tuple[str, ...]) -> Any:
    """``lookup`` of a path already split at its dots."""
    for part in parts:
        if type(value) is dict or isinstance(value, Mapping):  # dict first: facts are dicts
            value = value.get(part)
        elif isinstance(value, (list, tuple)) and part.isdigit():
            index = int(part)
            value = value[index] if index < len(value) else None
        else:
            return None
    return value


def shown_at(value: Any, parts: tuple[str, ...]) -> str:
    """``show(lookup_parts(value, parts))``, but "unset" where the path leads
    to no field at all (a missing key, an index past the end)."""
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


_MAX_CACHED = 4096
_PATHS: dict[str, tuple[str, ...]] = {}
# A plain template split once: (literal texts, the paths between them), or
# None for a template only the sandbox can render.
_PLAIN: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None] = {}


# What a message shows for a field the fact document does not have, and for
# one it has as null (a fact gpuaudit could not tell): never "no" or "0",
# which would read as values.
UNSET = "unset"
UNKNOWN = "unknown"


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


def _is_plain(template: str) -> bool:
    return not _ANY_TEMPLATE.search(_PLACEHOLDER.sub("", template))


def _plain_parts(template: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
    try:
        return _PLAIN[template]
    except KeyError:
        pass
    parts = None
    if _is_plain(template):
        texts, paths, at = [], [], 0
        for m in _PLACEHOLDER.finditer(template):  # what _PLACEHOLDER.sub would replace
            texts.append(template[at : m.start()])
            paths.append(tuple(m.group(1).split(".")))
            at = m.end()
        texts.append(template[at:])
        parts = (tuple(texts), tuple(paths))
    if len(_PLAIN) < _MAX_CACHED:  # one per rule
        _PLAIN[template] = parts
    return parts


def render(template: str, context: Mapping[str, Any]) -> str:
    parts = _plain_parts(template)
    if parts is None:
        return _render_bounded(_sandboxed(template), context)
    texts, paths = parts
    out = [texts[0]]
    for path, text in zip(paths, texts[1:], strict=True):
        out.append(shown_at(context, path))
        out.append(text)
    return "".join(out)


def render_message(template: str, facts: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """``render(template, {**facts, "params": params})``, without copying the
    facts for a plain template (one copy per finding adds up)."""
    parts = _plain_parts(template)
    if parts is None:
        return _render_bounded(_sandboxed(template), {**facts, "params": params})
    texts, paths = parts
    out = [texts[0]]
    for path, text in zip(paths, texts[1:], strict=True):
        out.append(shown_at(params, path[1:]) if path[0] == "params" else shown_at(facts, path))
        out.append(text)
    return "".join(out)


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


# --- the bounded sandbox ------------------------------------------------------
#
# A rule's message must not be able to exhaust memory or CPU. The sandbox
# refuses Python internals and bounds range(); these bound the rest, before
# anything big is built: `'x' * 10**9`, `9 ** 99 ** 9`, `x.center(10**9)`,
# `"%0999999999d" % 1`, `"{:>999999999}".format(1)`, `lipsum(n=10**7)` (gone),
# a string doubled in a loop, nested loops. Past a bound the render stops
# with MessageLimitError; the caller keeps the finding with a placeholder
# message and names the rule (engine/evaluate.py).

MAX_MESSAGE_CHARS = 10_000  # a rendered message; also the widest field or padding
MAX_STRING = 100_000  # any string a template builds on the way
MAX_ITEMS = 100_000  # elements a value may hold (shared ones counted each time) to be shown
MAX_REPEAT = 10_000  # `'x' * n`, `[x] * n`: elements after repeating
MAX_EXPONENT = 64
MAX_ITERATIONS = 100_000  # loop iterations in one render, all loops together
MAX_RENDER_SECONDS = 2.0


class MessageLimitError(Exception):
    """A message template went past a bound on size or time."""


class _Budget:
    __slots__ = ("deadline", "iterations")

    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS
        self.iterations = 0


_BUDGET: ContextVar[_Budget | None] = ContextVar("gpuaudit_message_budget", default=None)


def _tick() -> None:
    budget = _BUDGET.get()
    if budget is not None and time.monotonic() > budget.deadline:
        raise MessageLimitError(f"rendering took longer than {MAX_RENDER_SECONDS:g} s")


def _render_bounded(template: Any, context: Mapping[str, Any]) -> str:
    token = _BUDGET.set(_Budget())
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_MESSAGE_CHARS:
                raise MessageLimitError(f"message longer than {MAX_MESSAGE_CHARS:,} characters")
            parts.append(chunk)
            _tick()
        return "".join(parts)
    finally:
        _BUDGET.reset(token)


def _items(value: Any, limit: int = MAX_ITEMS) -> int:
    """Elements in ``value``, nested ones included (a string counts its
    characters), counted up to just past ``limit``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        children: Any = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = value
    else:
        return 1
    total = 1
    for child in children:
        total += _items(child, limit - total) if isinstance(child, (str, Mapping, list, tuple, set, frozenset)) else 1
        if total > limit:
            break
    return total


def _showable(value: Any) -> Any:
    """``value``, when turning it into text stays within the bounds."""
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")
    elif isinstance(value, (Mapping, list, tuple, set, frozenset)) and _items(value) > MAX_ITEMS:
        raise MessageLimitError(f"a value of more than {MAX_ITEMS:,} elements")
    return value


def _width(value: Any, what: str = "width") -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_MESSAGE_CHARS:
        raise MessageLimitError(f"a {what} of {value!r:.20} is more than {MAX_MESSAGE_CHARS:,}")


# Only the sandbox needs these: re compiles them on first use and keeps them.
_PERCENT_SPEC = r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]"
_DIGITS = r"\d+"


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= 9 else 10**9


def _percent_format(text: str, args: Any) -> None:
    """Refuse a ``%`` format whose fields are wider than a message."""
    values = args if isinstance(args, tuple) else (args,)
    star = False
    for match in re.finditer(_PERCENT_SPEC, text):
        for group in match.groups():
            if group == "*":
                star = True
            elif group:
                _width(_number(group))
    for value in values if not isinstance(args, Mapping) else args.values():
        if star:
            _width(value)
        _showable(value)


def _format_spec(spec: str) -> None:
    for digits in re.findall(_DIGITS, spec):
        _width(_number(digits))


def _replaced_size(text: str, old: Any, new: Any, count: Any = -1) -> int:
    old, new = str(old), str(new)
    hits = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * (len(new) - len(old))


def _joined(separator: str, items: list[Any]) -> None:
    size = len(separator) * max(len(items) - 1, 0)
    for item in items:
        _showable(item)
        size += len(item) if isinstance(item, str) else 0
        if size > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")


# str, bytes and int methods a message has no use for and that no bound fits.
_REFUSED_METHODS = frozenset({"translate", "maketrans", "expandtabs", "to_bytes"})


def _check_method(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Refuse a call of a str method that would build a string past the
    bounds; returns the arguments to call it with."""
    owner = getattr(method, "__self__", None)
    if not isinstance(owner, str):
        return args
    name = getattr(method, "__name__", "")
    if name in ("center", "ljust", "rjust", "zfill"):
        _width(args[0] if args else kwargs.get("width"))
    elif name == "replace" and len(args) >= 2:
        if _replaced_size(owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1)) > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")
    elif name == "join" and args:
        items = list(_bounded_iter(args[0]))
        _joined(owner, items)
        return (items, *args[1:])
    return args


def _bounded_iter(iterable: Any) -> Any:
    budget = _BUDGET.get()
    for item in iterable:
        if budget is not None:
            budget.iterations += 1
            if budget.iterations > MAX_ITERATIONS:
                raise MessageLimitError(f"more than {MAX_ITERATIONS:,} loop iterations")
            if time.monotonic() > budget.deadline:
                raise MessageLimitError(f"rendering took longer than {MAX_RENDER_SECONDS:g} s")
        yield item


def _power_too_large(base: Any, exponent: Any) -> bool:
    """Whether base ** exponent would exceed 2 ** 1024 (beyond any float)."""
    if not isinstance(base, (int, float)) or not isinstance(exponent, (int, float)):
        return False
    if abs(exponent) > MAX_EXPONENT:
        return abs(base) != 1 and base != 0
    bits = abs(base).bit_length() if isinstance(base, int) else math.log2(abs(base) or 1)
    return exponent * bits > 1024


def _bounded_filters(filters: dict[str, Any]) -> None:
    """Filters whose arguments size their result get a check first. A check
    sees the filter's own arguments (value first) and may return them
    replaced; the wrappers keep the originals' markers, so jinja2 still
    passes the context, eval context or environment first."""

    def guard(name: str, check: Any) -> None:
        original = filters[name]
        passes = 1 if hasattr(original, "jinja_pass_arg") else 0

        @wraps(original)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            _tick()
            replaced = check(*args[passes:], **kwargs)
            if replaced is not None:
                args = (*args[:passes], *replaced[0])
                kwargs = replaced[1]
            return original(*args, **kwargs)

        filters[name] = bounded

    def center(value: Any, width: Any = 80) -> None:
        _width(width)

    def indent(value: Any, width: Any = 4, *_: Any, **__: Any) -> None:
        text = str(_showable(value))
        pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        if len(text) + pad * (text.count("\n") + 1) > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")

    def format_(value: Any, *args: Any, **kwargs: Any) -> None:
        _percent_format(str(_showable(value)), kwargs or args)

    def replace(value: Any, old: Any, new: Any, count: Any = None) -> None:
        if _replaced_size(str(_showable(value)), old, new, -1 if count is None else count) > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")

    def join(value: Any, d: Any = "", attribute: Any = None) -> tuple:
        items = list(_bounded_iter(value))
        if attribute is None:
            _joined(str(d), items)
        return (items, d, attribute), {}

    def count(value: Any, amount: Any, *_: Any, **__: Any) -> None:
        if isinstance(amount, int) and amount > MAX_ITEMS:
            raise MessageLimitError(f"{amount!r:.20} is more than {MAX_ITEMS:,} elements")

    def tojson(value: Any, indent: Any = None) -> None:
        _showable(value)
        if isinstance(indent, int) and indent > 16:
            raise MessageLimitError("an indent of more than 16")

    def wordwrap(
        value: Any,
        width: Any = 79,
        break_long_words: Any = True,
        wrapstring: Any = None,
        *_: Any,
        **__: Any,
    ) -> None:
        text = str(_showable(value))
        lines = len(text) // max(width, 1) + text.count("\n") + 1 if isinstance(width, int) else 1
        if wrapstring is not None and len(str(wrapstring)) * lines > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")

    def shown(value: Any, *_: Any, **__: Any) -> None:
        _showable(value)

    def total(iterable: Any, attribute: Any = None, start: Any = 0) -> tuple | None:
        if isinstance(start, (int, float)) and not isinstance(start, bool):
            return None
        items = list(_bounded_iter(iterable))
        _showable([start, *items])
        return (items, attribute, start), {}

    for name, check in (
        ("center", center),
        ("indent", indent),
        ("format", format_),
        ("replace", replace),
        ("join", join),
        ("batch", count),
        ("slice", count),
        ("tojson", tojson),
        ("wordwrap", wordwrap),
        ("string", shown),
        ("pprint", shown),
        ("sum", total),
    ):
        if name in filters:
            guard(name, check)


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` before it becomes text: a null fact reads
    "unknown", as in a plain template (an absent one is an ``Unset``)."""
    if value is None:
        return UNKNOWN
    return _showable(value)


def _concat(*parts: Any) -> str:
    """``a ~ b``, checked before the string is built."""
    size = 0
    for part in parts:
        _showable(part)
        size += len(part) if isinstance(part, str) else 0
    if size > MAX_STRING:
        raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")
    return "".join(str(p) for p in parts)


@cache
def _environment() -> Any:
    from jinja2 import ChainableUndefined, nodes
    from jinja2.exceptions import SecurityError, UndefinedError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
    from jinja2.visitor import NodeTransformer
    from markupsafe import EscapeFormatter, Markup

    class Unset(ChainableUndefined):
        """A fact the document does not have: false in a test, taken by
        `default`, "unset" wherever it becomes text (Jinja2's own prints
        nothing; a filter on it, `lower`, `~`, would too), and a field of it
        is unset too (`pod.owner.kind` when there is no owner), as a plain
        template reads it."""

        __slots__ = ()

        def __str__(self) -> str:
            if self._undefined_exception is not UndefinedError:  # the sandbox's refusal of an attribute
                self._fail_with_undefined_error()
            return UNSET

    class BoundedFormatter(SandboxedFormatter):
        def format_field(self, value: Any, format_spec: str) -> Any:
            _tick()
            _format_spec(format_spec)
            return super().format_field(_showable(value), format_spec)

    class BoundedEscapeFormatter(BoundedFormatter, EscapeFormatter):
        pass

    class Bounds(NodeTransformer):
        """Loops count against the render's budget; `~` is checked before
        it builds its string."""

        def visit_For(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.iter = nodes.Call(
                nodes.EnvironmentAttribute("bounded_iter"), [node.iter], [], None, None, lineno=node.lineno
            )
            return node

        def visit_Concat(self, node: Any) -> Any:
            node = self.generic_visit(node)
            return nodes.Call(
                nodes.EnvironmentAttribute("bounded_concat"), list(node.nodes), [], None, None, lineno=node.lineno
            )

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})
        bounded_iter = staticmethod(_bounded_iter)
        bounded_concat = staticmethod(_concat)

        def __init__(self) -> None:
            super().__init__(autoescape=False, finalize=_finalize, undefined=Unset)
            self.globals.pop("lipsum", None)  # lorem ipsum of any length: no use in a message
            _bounded_filters(self.filters)

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            return Bounds().visit(super()._parse(source, name, filename))

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if isinstance(obj, (str, bytes, int)) and attr in _REFUSED_METHODS:
                return False
            return super().is_safe_attribute(obj, attr, value)

        def getattr(self, obj: Any, attribute: str) -> Any:
            _tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _tick()
            return super().getitem(obj, argument)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            _tick()
            args = _check_method(__obj, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and _power_too_large(left, right):
                raise SecurityError(f"{left!r:.20} ** {right!r:.20} is too large a number")
            if operator == "*":
                for sequence, times in ((left, right), (right, left)):
                    repeats = isinstance(sequence, (str, list, tuple)) and isinstance(times, int)
                    if repeats and _items(sequence, MAX_REPEAT) * times > MAX_REPEAT:
                        raise SecurityError(f"repetition longer than {MAX_REPEAT}")
            sequences = isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple))
            if operator == "+" and sequences and _items(left) + _items(right) > MAX_STRING:
                raise MessageLimitError(f"a value longer than {MAX_STRING:,}")
            if operator == "%" and isinstance(left, str):
                _percent_format(left, right)
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value: Any) -> Any:
            """jinja2's own, with a formatter that bounds each field's width."""
            if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or value.__name__ not in (
                "format",
                "format_map",
            ):
                return None
            owner = value.__self__
            if not isinstance(owner, str):
                return None
            formatter: Any = (
                BoundedEscapeFormatter(self, escape=owner.escape)
                if isinstance(owner, Markup)
                else BoundedFormatter(self)
            )
            is_format_map = value.__name__ == "format_map"
            str_type = type(owner)

            def wrapper(*args: Any, **kwargs: Any) -> str:
                if is_format_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    kwargs, args = args[0], ()
                return str_type(formatter.vformat(owner, args, kwargs))

            return update_wrapper(wrapper, value)

    return BoundedSandbox()


@cache
def _sandboxed(template: str) -> Any:
    return _environment().from_string(template)
