"""What a rule's JSON Schemas may hold: where a ``$ref`` leads, which regular
expressions, and how long a judgement may take.

A site's rule folder is untrusted input (a repository's config names it),
and its ``match``, ``violation`` and ``require`` are JSON Schemas that
fastjsonschema compiles to Python. Two of the things a schema may say reach
past the facts it judges:

- **``$ref``.** fastjsonschema resolves a ``$ref`` it does not hold with
  ``urlopen`` and no timeout: ``http://`` made CI call any host, a server
  that never answers hung the run, ``file:///dev/zero`` grew memory to
  MemoryError. A rule's ``$ref`` may point only inside the rule's own schema
  (``#/definitions/…``) or into the bundled fact schema, by its ``$id``
  (``https://gpuaudit.dev/schemas/facts.schema.json#/$defs/gpu``), served
  from the package (:func:`handlers`); an ``$id`` inside a rule schema would
  move what a relative ``$ref`` resolves against, so it is refused too.
  :func:`schema_problems` names each at load, with its JSON pointer (the
  rule's line); the compiler's handlers refuse anything else again.

- **Regular expressions.** ``pattern`` and ``patternProperties`` are matched
  by Python's ``re``, which backtracks: ``^(a|aa)+$`` against 41 characters
  took 38 s. Two bounds, because neither alone is enough:

  1. At load, :func:`regex_problem` refuses a pattern that does not compile,
     is longer than 2,000 characters, uses a backreference, or repeats (more
     than once) a group that can match one text in several ways: a group
     holding an alternation whose branches may begin alike or be empty
     (``(a|aa)+``, ``(a|a)*``), or holding a repetition, unless every
     iteration begins or ends with a character the repetitions inside cannot
     take (``(\\.[a-z]+)*`` and ``([a-z]+,)*`` pass; ``(a+)+``,
     ``([a-z]+)*``, ``(.*a){12}`` do not). These are the exponential shapes;
     the error comes early, in ``rules validate`` and the pre-commit hook,
     at the pattern's line.
  2. At run time every judgement by a rule whose schemas hold ``pattern``,
     ``patternProperties`` or ``format`` (fastjsonschema's own format
     regexes) runs under a time budget (:func:`within`): 1 s a subject, 5 s
     a run. A shape the load check lets through (``.*.*.*=`` over a long
     value is polynomial, not exponential, and static analysis cannot
     refuse every slow regex without refusing ordinary ones) raises
     :class:`RuleTimeout` naming the rule and its patterns; the evaluation
     reports the rule once and the other rules still run.

  Why not a regex engine without backtracking (google-re2)? fastjsonschema
  writes code that calls ``re``; swapping the engine would change what a
  pattern means (no lookaround, other escapes) and add a compiled
  dependency to every install, while the budget bounds the time whatever the
  pattern. The budget is a ``SIGALRM`` timer, which Python's ``re``
  honours between steps of a match: it needs the main thread (the CLI and
  its worker processes judge there); elsewhere the load check still holds.
  Rules without those keywords (every built-in rule) never set a timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpuaudit.facts.schema import SCHEMA_ID
from gpuaudit.files import excerpt

try:  # Python 3.11+: the parser ``re`` itself uses
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

FACTS_ID: str = SCHEMA_ID
MAX_PATTERN_CHARS = 2000
JUDGE_SECONDS = 1.0  # one judgement (a subject) by a rule with regexes
RUN_SECONDS = 5.0  # all of that rule's judgements in one run (one process)
TIMED_KEYWORDS = ("pattern", "patternProperties", "format")

# Keywords whose value maps names to schemas, and keywords whose value is data.
NAMED_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependencies")
DATA = ("const", "enum", "default", "examples", "required")


class RuleTimeout(Exception):
    """A rule's judgement ran past its time budget (a regular expression)."""


# --- $ref and $id ------------------------------------------------------------------


def ref_problem(ref: Any) -> str | None:
    """Why a rule may not hold ``$ref: ref``, or None."""
    if not isinstance(ref, str):
        return f"$ref {excerpt(ref)} is not text"
    if ref.startswith("#") or ref == FACTS_ID or ref.startswith(FACTS_ID + "#"):
        return None
    return (
        f"$ref {excerpt(ref)} is refused: a rule's $ref resolves only inside its own schema "
        f"('#/definitions/…') or in the fact schema ('{FACTS_ID}#/$defs/…'); gpuaudit fetches "
        "no URL and reads no file for a rule"
    )


def handlers(facts: Mapping[str, Any]) -> dict[str, Callable[[str], Any]]:
    """fastjsonschema's resolvers of remote ``$ref``s, by URI scheme: the fact
    schema ``facts`` (from the package), every other URI refused. (The load
    check has refused them before; a scheme not listed would reach
    ``urlopen``.)"""

    def resolve(uri: str) -> Any:
        if uri.split("#", 1)[0] == FACTS_ID:
            import copy  # compiling only

            return copy.deepcopy(dict(facts))
        raise ValueError(f"$ref {excerpt(uri)} is not resolved: gpuaudit fetches nothing for a rule")

    return {scheme: resolve for scheme in ("http", "https", "file", "ftp", "data", "")}


# --- the walk ----------------------------------------------------------------------


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def schema_problems(schema: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """(JSON pointer, problem) for each ``$ref`` that leads outside the rule
    and the fact schema, each ``$id``, and each regular expression
    (``pattern``, ``patternProperties`` keys) :func:`regex_problem` refuses,
    anywhere in the rule schema ``schema`` (at ``pointer`` in its file)."""
    yield from _walk(schema, pointer, data=False)


def _walk(node: Any, pointer: str, data: bool) -> Iterator[tuple[str, str]]:
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{pointer}/{i}", data)
        return
    if not isinstance(node, Mapping):
        return
    if "$ref" in node:
        problem = ref_problem(node["$ref"])
        if problem:
            yield f"{pointer}/$ref", problem
    for key in ("$id", "id"):
        # `id` is the draft-04 spelling; in data (an enum of objects) it is data.
        if isinstance(node.get(key), str) and (key == "$id" or not data):
            yield (
                f"{pointer}/{key}",
                f"{key} {excerpt(node[key])} is refused: it would move what a relative $ref resolves "
                "against (a rule's $ref resolves only inside its own schema or in the fact schema)",
            )
    if not data:
        if "pattern" in node:
            problem = regex_problem(node["pattern"])
            if problem:
                yield f"{pointer}/pattern", f"pattern {excerpt(node['pattern'])} {problem}"
        names = node.get("patternProperties")
        if isinstance(names, Mapping):
            for name in names:
                problem = regex_problem(name)
                if problem:
                    where = f"{pointer}/patternProperties/{_escape(name)}"
                    yield where, f"patternProperties key {excerpt(name)} {problem}"
    for key, value in node.items():
        child = f"{pointer}/{_escape(key)}"
        if data or key in DATA:
            yield from _walk(value, child, True)
        elif key in NAMED_SCHEMAS and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _walk(sub, f"{child}/{_escape(name)}", False)
        else:
            yield from _walk(value, child, False)


def timed_patterns(schema: Any) -> list[str]:
    """The regular expressions of a rule schema (``pattern`` values,
    ``patternProperties`` keys, and ``format: <name>`` for fastjsonschema's
    format regexes): non-empty when its judgements need the time budget."""
    found: list[str] = []
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "pattern" or key == "format":
                found.append(f"{key} {excerpt(value)}")
            elif key == "patternProperties" and isinstance(value, Mapping):
                found += [f"patternProperties {excerpt(name)}" for name in value]
            found += timed_patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            found += timed_patterns(item)
    return found


# --- regular expressions -------------------------------------------------------------

_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT)
_ZERO_WIDTH = (_sre.AT,)


def regex_problem(pattern: Any) -> str | None:
    """Why a rule may not hold the regular expression ``pattern`` (the end of
    a sentence that starts with the pattern), or None: it is not text, longer
    than MAX_PATTERN_CHARS, does not compile, or has a backtracking shape
    (the module's docstring)."""
    if not isinstance(pattern, str):
        return "is not text"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern):,} characters long; the limit is {MAX_PATTERN_CHARS:,}"
    import re

    try:
        re.compile(pattern)
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"is not a valid regular expression: {exc}"
    fold = bool(parsed.state.flags & _sre.SRE_FLAG_IGNORECASE)
    shape = _backtracking(list(parsed), fold)
    if shape:
        return (
            f"can take exponential time ({shape}); rewrite it so that each text matches one way "
            "(a character class instead of an alternation, one repetition instead of two)"
        )
    return None


def _children(op: Any, av: Any) -> list[Any]:
    if op is _sre.SUBPATTERN:
        return [av[-1]]
    if op in _REPEATS or op is getattr(_sre, "POSSESSIVE_REPEAT", None):
        return [av[2]]
    if op is _sre.BRANCH:
        return list(av[1])
    if op in (_sre.ASSERT, _sre.ASSERT_NOT):
        return [av[1]]
    if op is getattr(_sre, "ATOMIC_GROUP", None):
        return [av]
    if op is _sre.GROUPREF_EXISTS:
        return [item for item in av[1:] if item is not None]
    return []


def _many(op: Any, av: Any) -> bool:
    """A repetition that may run more than once."""
    return op in _REPEATS and (av[1] is _sre.MAXREPEAT or av[1] > 1)


def _backtracking(items: list[Any], fold: bool) -> str | None:
    for op, av in items:
        if op in (_sre.GROUPREF, _sre.GROUPREF_EXISTS):
            return "a backreference"
        if _many(op, av):
            problem = _ambiguous_body(list(av[2]), fold)
            if problem:
                return problem
        for child in _children(op, av):
            problem = _backtracking(list(child), fold)
            if problem:
                return problem
    return None


def _ambiguous_body(body: list[Any], fold: bool) -> str | None:
    """Why a body repeated more than once can match one text in many ways."""
    branches = list(_nodes(body, lambda op, av: op is _sre.BRANCH))
    for _, av in branches:
        firsts = [_edge(list(alternative), 0) for alternative in av[1]]
        if any(first is None for first in firsts) or len({_fold(f, fold) for f in firsts}) < len(firsts):
            return "a repeated group holds an alternation whose branches may begin alike or be empty"
    inner = list(_nodes(body, _many))
    if not inner:
        return None
    for edge in (_edge(body, 0), _edge(body, -1)):
        if edge is not None and not any(_can_take([node], edge, fold) for node in inner):
            return None  # each iteration begins (ends) with a character nothing inside takes
    return "a repeated group holds another repetition"


def _nodes(items: Iterable[Any], wanted: Callable[[Any, Any], bool]) -> Iterator[tuple[Any, Any]]:
    for op, av in items:
        if wanted(op, av):
            yield op, av
        for child in _children(op, av):
            yield from _nodes(child, wanted)


def _edge(items: list[Any], end: int) -> int | None:
    """The character every match of ``items`` begins (``end`` 0) or ends
    (``end`` -1) with, when a literal fixes it."""
    while items:
        op, av = items[end]
        if op is _sre.LITERAL:
            return av
        if op is not _sre.SUBPATTERN:
            return None
        items = list(av[-1])
    return None


def _fold(char: int, fold: bool) -> int:
    return ord(chr(char).lower()) if fold else char


def _can_take(items: Iterable[Any], char: int, fold: bool) -> bool:
    """Whether something inside ``items`` may match the character ``char``
    (True when unsure)."""
    for op, av in items:
        if op is _sre.LITERAL:
            hit = _fold(av, fold) == _fold(char, fold)
        elif op is _sre.NOT_LITERAL:
            hit = _fold(av, fold) != _fold(char, fold)
        elif op is _sre.IN:
            hit = _in_class(av, char, fold)
        elif op in _ZERO_WIDTH:
            hit = False
        else:
            children = _children(op, av)
            hit = any(_can_take(child, char, fold) for child in children) if children else True
        if hit:
            return True
    return False


def _in_class(members: list[Any], char: int, fold: bool) -> bool:
    chars = {char, ord(chr(char).lower()), ord(chr(char).upper())} if fold else {char}
    negate = hit = False
    for op, av in members:
        if op is _sre.NEGATE:
            negate = True
        elif op is _sre.LITERAL:
            hit = hit or av in chars
        elif op is _sre.RANGE:
            hit = hit or any(av[0] <= c <= av[1] for c in chars)
        elif op is _sre.CATEGORY:
            taken = _category(av, chr(char))
            if taken is None:
                return True
            hit = hit or taken
        else:
            return True
    return hit != negate


def _category(category: Any, char: str) -> bool | None:
    tests = {
        _sre.CATEGORY_DIGIT: char.isdecimal(),
        _sre.CATEGORY_NOT_DIGIT: not char.isdecimal(),
        _sre.CATEGORY_SPACE: char.isspace(),
        _sre.CATEGORY_NOT_SPACE: not char.isspace(),
        _sre.CATEGORY_WORD: char.isalnum() or char == "_",
        _sre.CATEGORY_NOT_WORD: not (char.isalnum() or char == "_"),
    }
    return tests.get(category)


# --- the time budget -------------------------------------------------------------------


class Budget:
    """What is left of a rule's time in this run, and what to name when it
    runs out."""

    def __init__(self, rule_id: str, patterns: list[str]) -> None:
        self.rule_id = rule_id
        self.patterns = patterns
        self.left = RUN_SECONDS

    def exceeded(self, what: str) -> RuleTimeout:
        named = ", ".join(self.patterns[:3]) + (", …" if len(self.patterns) > 3 else "")
        return RuleTimeout(
            f"rule {self.rule_id} ran past its time budget ({what}); its regular expressions "
            f"({named}) backtrack on these facts: the rule is not judged further"
        )


def _alarm(signum: int, frame: Any) -> None:
    raise RuleTimeout("time budget")


def within(budget: Budget, judge: Callable[[], bool]) -> bool:
    """``judge()`` within what is left of ``budget``: at most JUDGE_SECONDS
    for this call. Raises RuleTimeout (naming the rule) past it, or when the
    budget is spent. Off the main thread, or without ``setitimer``, no timer
    can be set: ``judge()`` runs unbounded (the load check still holds)."""
    if budget.left <= 0:
        raise budget.exceeded(f"{RUN_SECONDS:g} s in this run")
    import signal  # only rules with regexes come here

    seconds = min(JUDGE_SECONDS, budget.left)
    started = time.monotonic()
    try:
        previous = signal.signal(signal.SIGALRM, _alarm)
    except (ValueError, AttributeError, OSError):  # not the main thread; no SIGALRM
        return judge()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    if outer and outer < seconds:  # someone's timer is due first: leave it be
        signal.setitimer(signal.ITIMER_REAL, outer, interval)
        signal.signal(signal.SIGALRM, previous)
        return judge()
    try:
        return judge()
    except RuleTimeout:
        budget.left = 0
        raise budget.exceeded(f"more than {seconds:g} s on one subject") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        spent = time.monotonic() - started
        budget.left -= spent
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - spent, 1e-3), interval)
