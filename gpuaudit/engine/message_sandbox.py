"""A site rule's message that needs more than placeholders: Jinja2's sandbox,
on a subset of its language, within bounds.

A site rule may come from a pull request (a fork's), so its message is
hostile input. Jinja2's `ImmutableSandboxedEnvironment` refuses Python
internals but, as its documentation says, not memory or CPU exhaustion
(`'x' * 10**9`, `9 ** 9 ** 9`, `x.center(10**9)`, a macro that calls
itself twice). So a message may use only what reads facts, and loading
refuses the rest (`check`):

- ``{{ fact.path }}``, ``fact['key']``, ``fact.0``; literals, lists of them;
- the filters in ``FILTERS``, with literal arguments; the tests in ``TESTS``;
- ``{% if %}``/``elif``/``else``, ``{% for x in fact %}``, ``a if c else b``,
  comparisons, ``and``/``or``/``not``.

No calls (methods, `range`, globals), no arithmetic or ``~``, no macros,
``set``, ``include`` or other statements. What is left grows a value by at
most a small factor per filter, so a few checks at run time bound the rest:
every filter's result and the message's length, the separator `join`
repeats, loop iterations and the time of one render. Past a bound the render
stops with MessageLimitError; the caller keeps the finding with a
placeholder message and names the rule (engine/evaluate.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from functools import cache, wraps
from typing import Any

from jinja2 import ChainableUndefined, TemplateSyntaxError, nodes, pass_eval_context
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

MAX_MESSAGE_CHARS = 10_000  # a rendered message
MAX_STRING = 100_000  # a filter's result: characters, or elements of a list
MAX_ITERATIONS = 100_000  # loop iterations in one render, all loops together
MAX_RENDER_SECONDS = 2.0

# engine/messages.py's words for an absent fact and a null one (that module
# imports this one; tests/test_rules_engine.py holds the two to the same words).
UNSET = "unset"
UNKNOWN = "unknown"

# Filters whose result is at most a small factor larger than their value
# (join: checked for its separator), with literal arguments.
FILTERS = frozenset(
    {
        "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "int", "items",
        "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
        "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
        "trim", "truncate", "unique", "upper", "wordcount",
    }
)  # fmt: skip
TESTS = frozenset(
    {
        "boolean", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge",
        "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
        "mapping", "ne", "none", "number", "odd", "sequence", "string", "true", "undefined",
        "upper", "==", "!=", ">", ">=", "<", "<=",
    }
)  # fmt: skip
# Filters that name a test (select, reject) or take a test after an attribute.
_NAMES_A_TEST = {"select": 0, "reject": 0, "selectattr": 1, "rejectattr": 1}
_NODES = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.If, nodes.For, nodes.CondExpr,
    nodes.Const, nodes.List, nodes.Tuple, nodes.Name, nodes.Getattr, nodes.Getitem,
    nodes.Filter, nodes.Test, nodes.Keyword, nodes.Compare, nodes.Operand, nodes.And, nodes.Or,
    nodes.Not, nodes.Neg, nodes.Pos,
)  # fmt: skip


class MessageLimitError(Exception):
    """A message template went past a bound on size or time."""


def check(template: str) -> str | None:
    """Why a message template cannot be used, or None."""
    try:
        tree = _environment().syntax_tree(template)
    except TemplateSyntaxError as exc:
        return f"invalid template: {exc}"
    for node in (tree, *tree.find_all(nodes.Node)):
        problem = _refused(node)
        if problem:
            return f"{problem} (a message reads facts, with filters, tests, if and for: docs/write-a-rule.md)"
    return None


def _refused(node: nodes.Node) -> str | None:
    if not isinstance(node, _NODES):
        return f"{_SYNTAX.get(type(node).__name__, type(node).__name__)} is not allowed"
    if isinstance(node, nodes.Name) and (node.name.startswith("_") or node.name == "self"):
        return f"the name {node.name!r} is not allowed"
    if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
        return f"the attribute {node.attr!r} is not allowed"
    if isinstance(node, nodes.Getitem) and not (
        isinstance(node.arg, nodes.Const) and not str(node.arg.value).startswith("_")
    ):
        return "an index other than a literal name or number is not allowed"
    if isinstance(node, nodes.For) and node.recursive:
        return "a recursive loop is not allowed"
    if isinstance(node, (nodes.Filter, nodes.Test)):
        known = FILTERS if isinstance(node, nodes.Filter) else TESTS
        if node.name not in known:
            what = "filter" if isinstance(node, nodes.Filter) else "test"
            return f"the {what} {node.name!r} is not allowed; these are: {', '.join(sorted(known))}"
        if node.dyn_args or node.dyn_kwargs:
            return "*args and **kwargs are not allowed"
        arguments = [*node.args, *(k.value for k in node.kwargs)]
        if not all(isinstance(a, nodes.Const) for a in arguments):
            return f"{node.name}: arguments must be literals"
        test_at = _NAMES_A_TEST.get(node.name)
        if node.name == "tojson" and arguments:  # its indent repeats at every level
            return "tojson: no arguments"
        if node.name == "map" and node.args:
            return "map: only map(attribute=...) is allowed"
        if test_at is not None and len(node.args) > test_at and node.args[test_at].value not in TESTS:
            return f"{node.name}: the test {node.args[test_at].value!r} is not allowed"
    return None


# What a person wrote, for the node types they are likelier to know by syntax.
_SYNTAX = {
    "Call": "a call",
    "Add": "arithmetic (+)",
    "Sub": "arithmetic (-)",
    "Mul": "arithmetic (*)",
    "Div": "arithmetic (/)",
    "FloorDiv": "arithmetic (//)",
    "Mod": "arithmetic (%)",
    "Pow": "arithmetic (**)",
    "Concat": "~",
    "Macro": "a macro",
    "CallBlock": "a call block",
    "Assign": "set",
    "AssignBlock": "set",
    "Slice": "a slice",
    "Dict": "a dict literal",
}


def render(template: str, context: Mapping[str, Any]) -> str:
    """The message, within the bounds (MessageLimitError past one)."""
    token = _BUDGET.set(_Budget())
    try:
        parts: list[str] = []
        size = 0
        for chunk in _compiled(template).generate(**context):
            size += len(chunk)
            if size > MAX_MESSAGE_CHARS:
                raise MessageLimitError(f"message longer than {MAX_MESSAGE_CHARS:,} characters")
            parts.append(chunk)
            _tick()
        return "".join(parts)
    finally:
        _BUDGET.reset(token)


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


def _counted(iterable: Any) -> Any:
    """A loop's items, counted against the render's budget."""
    budget = _BUDGET.get()
    for item in iterable:
        if budget is not None:
            budget.iterations += 1
            if budget.iterations > MAX_ITERATIONS:
                raise MessageLimitError(f"more than {MAX_ITERATIONS:,} loop iterations")
        _tick()
        yield item


def _within(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")
    if isinstance(value, (list, tuple, dict)) and len(value) > MAX_STRING:
        raise MessageLimitError(f"a value of more than {MAX_STRING:,} elements")
    return value


def _bounded(original: Any) -> Any:
    """A filter whose result is checked before the next filter grows it."""

    @wraps(original)  # keeps jinja2's marker for what it passes first
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        return _within(original(*args, **kwargs))

    return bounded


def _bounded_join(original: Any) -> Any:
    @pass_eval_context
    def join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        items = _within(list(value))
        strings = sum(len(item) for item in items if isinstance(item, str))  # `map(default=...)` repeats one
        if strings + max(len(items) - 1, 0) * len(str(d)) > MAX_STRING:
            raise MessageLimitError(f"a string longer than {MAX_STRING:,} characters")
        return _within(original(eval_ctx, items, d, attribute))

    return join


class _Unset(ChainableUndefined):
    """A fact the document does not have: false in a test, taken by
    `default`, "unset" wherever it becomes text (Jinja2's own prints
    nothing), and a field of it is unset too, as a plain message reads it."""

    __slots__ = ()

    def __str__(self) -> str:
        if self._undefined_exception is not UndefinedError:  # the sandbox's refusal of an attribute
            self._fail_with_undefined_error()
        return UNSET


class _Loops(NodeTransformer):
    def visit_For(self, node: nodes.For) -> nodes.For:
        node = self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [node.iter], [], None, None, lineno=node.lineno)
        return node


class _Sandbox(ImmutableSandboxedEnvironment):
    counted = staticmethod(_counted)

    def __init__(self) -> None:
        super().__init__(autoescape=False, finalize=_finalize, undefined=_Unset)
        self.globals.clear()  # range, lipsum, dict, cycler...: calls, which a message cannot make
        self.filters = {name: _bounded(f) for name, f in self.filters.items() if name in FILTERS}
        self.filters["join"] = _bounded_join(self.filters["join"])
        self.tests = {name: t for name, t in self.tests.items() if name in TESTS}

    def syntax_tree(self, source: str) -> nodes.Template:
        """The template as written (``check`` judges this)."""
        return super()._parse(source, None, None)

    def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
        return _Loops().visit(self.syntax_tree(source))

    def getattr(self, obj: Any, attribute: str) -> Any:
        """A fact's field, never a method: `{{ gpu.values }}` is the fact
        `values`, as in a plain message, not the dict's method."""
        if isinstance(obj, Mapping):
            return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
        value = super().getattr(obj, attribute)
        return self.undefined(obj=obj, name=attribute) if callable(value) else value

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return self.undefined(obj=obj, name=argument) if callable(value) else value


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` before it becomes text: a null fact reads
    "unknown", as in a plain message (an absent one is an ``_Unset``)."""
    return UNKNOWN if value is None else value


@cache
def _environment() -> _Sandbox:
    return _Sandbox()


@cache
def _compiled(template: str) -> Any:
    problem = check(template)  # loading checked a rule's message; this one may not come from a rule
    if problem:
        raise SecurityError(problem)
    return _environment().from_string(template)
