"""Load rules: one YAML file per rule, validated against policies/rule.schema.json.

A rule is data: which subjects it looks at (`target`, `match`), what counts as
a violation (a JSON Schema over the subject's facts), named `params` spliced
into those schemas where `{"$param": name}` appears, and texts. Loading
rejects a rule whose schemas name a fact the fact schema does not document.
"""

from __future__ import annotations

import marshal
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache, cached_property
from pathlib import Path
from types import CodeType
from typing import Any

import msgspec
import yaml
from msgspec.structs import replace

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.rule_schemas import (
    DATA,
    NAMED_SCHEMAS,
    Budget,
    handlers,
    schema_problems,
    timed_patterns,
    within,
)
from gpuaudit.facts.schema import read as read_fact_schema
from gpuaudit.files import (
    FileReadError,
    bounded_quotes,
    command_line_roots,
    confined,
    confined_file,
    excerpt,
    read_text,
)
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.model.objects import same_fields
from gpuaudit.schemas import SchemaError, validate

SEVERITIES = ("critical", "high", "medium", "low", "info")
SILENT = "silent"  # severity_by_purpose: the advice does not apply to that purpose
# The subjects that carry the `purpose` fact (facts/purpose.py).
PURPOSE_TARGETS = ("workload", "pod", "container")
# The subjects that carry the `file_context` fact (facts/purpose.py).
CONTEXT_TARGETS = (*PURPOSE_TARGETS, "claim")
# Purposes no rule judges: a workload on simulated nodes (KWOK) runs nothing
# and holds no real GPU (gpuaudit/data/purposes.yaml `simulated`).
UNJUDGED_PURPOSES = frozenset({"simulated"})
# The largest built-in rule is under 5 KiB; a site's rule folder is
# untrusted input (a repository's config names it).
MAX_RULE_BYTES = 1024 * 1024
_COMBINATORS = ("allOf", "anyOf", "oneOf")
_SINGLE = ("not", "if", "then", "else")


class RuleError(ValueError):
    """A rule file that cannot be used: where, and what is wrong (naming the key).
    The message quotes no more of the file than short excerpts
    (``files.bounded_quotes``): a rule file may be a token behind a link."""

    def __init__(self, file: str, line: int | None, message: str, rule_id: str | None = None) -> None:
        message = bounded_quotes(message)
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")
        self.file, self.line, self.message = file, line, message
        self.rule_id = rule_id  # when the file named one: the rule exists, but cannot load


class Rule(msgspec.Struct, frozen=True, dict=True):  # dict: for its cached_property validators
    id: str
    title: str
    category: str
    severity: str
    scope: tuple[str, ...]
    target: str
    match: Mapping[str, Any] | None
    violation: Mapping[str, Any] | None
    require: Mapping[str, Any] | None
    params: Mapping[str, Any]
    requires: tuple[str, ...]
    message: str
    points_at: str | None
    evidence: tuple[str, ...]
    remediation: Mapping[str, Any] | None
    docs: str
    source: str
    cases: Mapping[str, Any] = msgspec.field(default_factory=dict)
    # Telemetry values the rule's schemas require: a subject without one of
    # them is insufficient data for this rule, not a pass.
    telemetry_signals: tuple[str, ...] = ()
    # Runs only when named by id (--rules, the config's rules): information
    # some sites want and most would call noise.
    opt_in: bool = False
    # The most severe a finding may be for a workload of each purpose (the
    # `purpose` fact), or "silent" where the advice does not apply; purposes
    # not named get `severity`.
    severity_by_purpose: Mapping[str, str] = msgspec.field(default_factory=dict)
    # The same for where the manifest's file sits (the `file_context` fact:
    # test, example); a live object has none.
    severity_by_context: Mapping[str, str] = msgspec.field(default_factory=dict)
    # The code of its schemas ("match", "violation", "require"), compiled
    # ahead and marshalled (engine/rule_cache.py). It is read, and a schema
    # not in it compiled, only when the rule first meets a subject of its
    # target: rules for what the input does not hold do no work.
    compiled: Mapping[str, bytes] = msgspec.field(default_factory=dict)
    # The regular expressions each of its schemas holds
    # (rule_schemas.timed_patterns), found when the rule is loaded and so
    # kept in the rule cache: walking every schema for them on every run cost
    # 7M instructions, more than judging three files. None: not looked for.
    timed: Mapping[str, tuple[str, ...]] | None = None

    def __eq__(self, other: object) -> Any:
        return same_fields(self, other, but=("cases", "compiled"))

    def with_compiled(self, compiled: Mapping[str, bytes]) -> Rule:
        return replace(self, compiled=compiled)

    def _validator(self, key: str) -> Callable[[Any], Any]:
        blob = self.compiled.get(key)
        if blob is not None:
            code = marshal.loads(blob)
            if isinstance(code, CodeType):
                return _function(code)
        return _compile(getattr(self, key))

    @cached_property
    def _matches(self) -> Callable[[Any], Any] | None:
        return self._validator("match") if self.match else None

    @cached_property
    def match_key(self) -> str | None:
        """Equal for rules whose ``match`` schemas are equal (many rules share
        one, e.g. "requests GPUs"): a subject is matched once per distinct
        schema (evaluate.py). None when the rule has no ``match``."""
        return repr(self.match) if self.match else None

    @cached_property
    def _judge(self) -> tuple[Callable[[Any], Any], bool]:
        if self.violation is not None:
            return self._validator("violation"), True
        assert self.require is not None
        return self._validator("require"), False

    @cached_property
    def _budgets(self) -> dict[str, Budget]:
        """The time budget of each schema that holds a regular expression
        (engine/rule_schemas.py): one for the rule, shared by its schemas."""
        keys = self.timed if self.timed is not None else schema_patterns(self.match, self.violation, self.require)
        patterns = [pattern for found in keys.values() for pattern in found]
        if not patterns:
            return {}
        budget = Budget(self.id, patterns)
        return {key: budget for key, found in keys.items() if found}

    def severity_for(self, facts: Mapping[str, Any], *, by_context: bool = True) -> str | None:
        """The severity of a finding about a subject with these facts: the
        rule's, lowered to what ``severity_by_purpose`` allows for the
        subject's purpose and ``severity_by_context`` (unless ``by_context``
        is False) for where its file sits; None when the rule is silent for
        either."""
        if facts.get("purpose") in UNJUDGED_PURPOSES:
            return None
        severity = self.severity
        capped = [(self.severity_by_purpose, "purpose")]
        if by_context:
            capped.append((self.severity_by_context, "file_context"))
        for caps, fact in capped:
            cap = caps.get(facts.get(fact)) if caps else None
            if cap == SILENT:
                return None
            if cap is not None:
                severity = max(severity, cap, key=SEVERITIES.index)
        return severity

    def applies_to(self, facts: Mapping[str, Any]) -> bool:
        if self._matches is None:
            return True
        budget = self._budgets.get("match")
        if budget is not None:
            return within(budget, lambda: _valid(self._matches, facts))  # type: ignore[arg-type]
        return _valid(self._matches, facts)

    def violated_by(self, facts: Mapping[str, Any]) -> bool:
        check, is_violation = self._judge
        budget = self._budgets.get("violation" if is_violation else "require")
        if budget is not None:
            return within(budget, lambda: _valid(check, facts)) == is_violation
        return _valid(check, facts) == is_violation


class Rejected(ValueError):
    """What a compiled rule schema raises for facts it does not accept.

    Most subjects a rule looks at are rejected by its ``match`` or pass its
    ``violation``, so the raise is the hot path of judging. fastjsonschema's
    own exception builds, on every raise, the schema part that failed and
    keeps it with the value: five times the cost of this plain one, which
    is all ``_valid`` needs."""


def schema_code(schema: Mapping[str, Any]) -> CodeType:
    """A rule schema compiled to Python code: the source fastjsonschema
    generates with short exceptions (``detailed_exceptions=False``), which
    raise ``Rejected`` once run by ``_function``."""
    import fastjsonschema  # compiling only: a run that reads the rule cache never imports it

    source = fastjsonschema.compile_to_code(
        _const_as_enum(schema),
        # a $ref outside the rule: the fact schema from the package, nothing else (rule_schemas.py)
        handlers=handlers(fact_schema()),
        use_default=False,
        detailed_exceptions=False,
    )
    # Its exceptions are bound by _function: the code imports nothing from fastjsonschema.
    source, imports = re.subn(_LIBRARY_IMPORT, "", source, count=1, flags=re.MULTILINE)
    # The schema's own function comes first ("validate", or named after its
    # $id); those of its $refs follow.
    root = re.search(_FIRST_DEF, source, re.MULTILINE)
    if root is None or imports != 1:
        raise fastjsonschema.JsonSchemaDefinitionException("no validation function generated")
    source = _without_key_copies(source)
    return compile(f"{source}\n__validate__ = {root.group(1)}\n", "<rule schema>", "exec")


def _without_key_copies(source: str) -> str:
    """``source`` without the copies of an object's keys that only membership
    tests read.

    For every object it meets, fastjsonschema's code copies the keys into a
    set (``data_keys = set(data.keys())``) and removes each named property
    from it, so that ``additionalProperties`` can see what is left. Most rule
    schemas have no such keyword, while a fact document has dozens of keys:
    the copy was a third of judging a pod. Where the set is only asked what
    it holds, the object itself answers (``"gpu" in data``) and the removals
    become ``pass``; a set read any other way is left as it was."""
    for name, mapping in set(re.findall(_KEY_COPY, source, re.MULTILINE)):
        uses = len(re.findall(rf"\b{name}\b", source))
        copies = len(re.findall(rf"\b{name} = set\({mapping}\.keys\(\)\)", source))
        tests = len(re.findall(rf" in {name}:", source))
        removals = len(re.findall(rf"\b{name}\.remove\(", source))
        if uses == copies + tests + removals:
            source = re.sub(rf"\b{name} = set\({mapping}\.keys\(\)\)", f"{name} = {mapping}", source)
            source = re.sub(rf"\b{name}\.remove\([^\n]*\)$", "pass", source, flags=re.MULTILINE)
    return source


# Compiled on first use: a run that reads the cache never needs them.
_FIRST_DEF = r"^def (\w+)\("
_KEY_COPY = r"^\s*(\w+_keys) = set\((\w+)\.keys\(\)\)$"
_LIBRARY_IMPORT = r"^from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException\n"


def _function(code: CodeType) -> Callable[[Any], Any]:
    namespace: dict[str, Any] = {"JsonSchemaValueException": Rejected, "JsonSchemaValuesException": Rejected}
    exec(code, namespace)  # code fastjsonschema generated from a rule schema
    return namespace["__validate__"]


def _compile(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    return _function(schema_code(schema))


def _valid(check: Callable[[Any], Any], facts: Mapping[str, Any]) -> bool:
    try:
        check(facts)
    except Rejected:
        return False
    return True


# Keywords whose value maps names to schemas, and keywords whose value is data.
_NAMED_SCHEMAS, _DATA = NAMED_SCHEMAS, DATA


def _const_as_enum(schema: Any) -> Any:
    """``schema`` with each ``const: v`` written ``enum: [v]``: fastjsonschema
    tests both alike (the same type-strict comparison), and 2.22 cannot
    generate ``const`` with short exceptions."""
    if isinstance(schema, list):
        return [_const_as_enum(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, Mapping):
            out[key] = {name: _const_as_enum(sub) for name, sub in value.items()}
        else:
            out[key] = _const_as_enum(value)
    if "const" in out:
        const = {"enum": [out.pop("const")]}
        if "enum" in out:  # both: the value must satisfy each
            out["allOf"] = [*out.get("allOf", ()), const]
        else:
            out.update(const)
    return out


# --- the facts rules may name ------------------------------------------------


@cache
def fact_schema() -> Mapping[str, Any]:
    """The facts rules may name: gpuaudit/facts/facts.schema.json, generated
    from the fact types (gpuaudit/facts/schema.py)."""
    return read_fact_schema()


# --- loading ------------------------------------------------------------------


def rule_files(directory: Path, roots: Sequence[Path] | None = None) -> tuple[list[Path], list[RuleError]]:
    """The rule files under ``directory`` (cases files aside), in name order,
    and the errors of those it may not read: a file (or the folder itself)
    whose links lead outside ``roots`` (default: ``files.command_line_roots``
    of the folder: its repository, or the folder the user named) is named and
    never read. The one list of files ``load_rules`` reads and the rule
    cache hashes."""
    if not directory.is_dir():
        return [], [RuleError(str(directory), None, "not a directory of rules")]
    if directory == policies_dir():  # the installed rules: gpuaudit's own
        roots = None
    elif roots is None:
        roots = command_line_roots(directory)
    files: list[Path] = []
    errors: list[RuleError] = []
    try:
        if roots is not None:
            confined(directory, roots, what="rule folder")
    except FileReadError as exc:
        return [], [RuleError(str(directory), None, exc.problem)]
    for path in sorted(directory.rglob("*.y*ml")):
        if path.name.endswith((".cases.yaml", ".cases.yml")):
            continue
        try:
            if roots is not None:
                confined_file(path, roots, what="rule file")
        except FileReadError as exc:
            errors.append(RuleError(str(path), None, exc.problem))
            continue
        files.append(path)
    return files, errors


def load_rules(
    dirs: Sequence[Path],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    severities: Mapping[str, str] | None = None,
) -> tuple[list[Rule], list[RuleError]]:
    """Every rule under ``dirs`` (later dirs may not reuse an id), with config
    overrides of params and severities applied. Bad files are returned as
    errors; the good ones still load. No file is read through a link that
    leads outside its folder's repository (``rule_files``)."""
    rules: dict[str, Rule] = {}
    errors: list[RuleError] = []
    for directory in dirs:
        paths, refused = rule_files(directory)
        errors += refused
        for path in paths:
            try:
                rule = _load_rule(path, params or {}, severities or {})
            except RuleError as exc:
                errors.append(exc)
                continue
            if rule.id in rules:
                errors.append(RuleError(str(path), None, f"id {rule.id} is already used by {rules[rule.id].source}"))
                continue
            rules[rule.id] = rule
    return list(rules.values()), errors


def load_rule(
    path: Path,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    severities: Mapping[str, str] | None = None,
) -> Rule:
    """The rule in the file ``path``, named on its own (``rules validate FILE``,
    a rule's cases): refused, unread, when a link takes it outside its
    repository (``files.command_line_roots``)."""
    try:
        confined_file(path, command_line_roots(path), what="rule file")
    except FileReadError as exc:
        raise RuleError(str(path), None, exc.problem) from None
    return _load_rule(path, params or {}, severities or {})


def _load_rule(
    path: Path,
    params: Mapping[str, Mapping[str, Any]],
    severities: Mapping[str, str],
) -> Rule:
    try:
        data, lines = load_yaml_with_lines(read_text(path, limit=MAX_RULE_BYTES, what="rule file"))
    except FileReadError as exc:
        raise RuleError(str(path), exc.line, exc.problem) from None
    except YamlLimitError as exc:  # nesting or alias expansion past kube/yaml_lines' limits
        raise RuleError(str(path), None, str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise RuleError(str(path), line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return rule_from_data(data, lines, str(path), params, severities)


def rule_from_data(
    data: Any,
    lines: Mapping[str, int],
    source: str,
    params_by_rule: Mapping[str, Mapping[str, Any]],
    severities: Mapping[str, str],
) -> Rule:
    if not isinstance(data, dict):
        # One text value (a token behind a link), a list, nothing: said without quoting it.
        raise RuleError(source, None, f"{excerpt(data, 24)} is not of type 'object': a rule file holds one mapping")
    try:
        validate(data, "rule.schema.json")
    except SchemaError as exc:
        pointer = "/" + exc.path.replace(".", "/") if exc.path else ""
        line = _nearest_line(lines, pointer)
        key = f" (at {exc.path if len(exc.path) <= 80 else exc.path[:79] + '…'})" if exc.path else ""
        raise RuleError(source, line, f"{exc}{key}") from None

    declared = data.get("params") or {}
    param_overrides = params_by_rule.get(data["id"], {})
    unknown = sorted(set(param_overrides) - set(declared))
    if unknown:
        raise RuleError(
            source,
            None,
            f"config sets unknown params for {data['id']}: {', '.join(unknown)}",
            data["id"],
        )
    for name, value in param_overrides.items():
        problem = _param_problem(value, declared[name]["default"])
        if problem:
            raise RuleError(source, None, f"config sets params for {data['id']}: {name} {problem}", data["id"])
    params = {name: param_overrides.get(name, spec["default"]) for name, spec in declared.items()}

    target_schema = fact_schema()["$defs"].get(data["target"])
    schemas = {}
    for key in ("match", "violation", "require"):
        if key not in data:
            continue
        try:
            schemas[key] = _splice_params(data[key], params)
        except KeyError as exc:
            raise RuleError(source, _nearest_line(lines, "/" + key), f"{key} uses undeclared param {exc}") from None
        for pointer, problem in schema_problems(schemas[key], "/" + key):
            # a $ref out of the rule, an $id, a regex that backtracks (rule_schemas.py)
            raise RuleError(source, _nearest_line(lines, pointer), f"{key}: {problem}", data["id"])
        if target_schema is not None:
            for fact in unknown_facts(schemas[key], target_schema):
                raise RuleError(
                    source,
                    _nearest_line(lines, "/" + key),
                    f"{key} names unknown fact {fact!r} for target {data['target']!r} "
                    "(documented in gpuaudit/facts/facts.schema.json)",
                )
    if target_schema is not None:
        paths = [
            *(data.get("evidence") or ()),
            *([data["points_at"]] if data.get("points_at") else []),
        ]
        for path in paths:
            if not fact_path_known(path, target_schema):
                raise RuleError(
                    source,
                    _nearest_line(lines, "/evidence" if path != data.get("points_at") else "/points_at"),
                    f"names unknown fact {path!r} for target {data['target']!r}",
                )
    if "message" in data:
        from gpuaudit.engine.messages import check_template

        problem = check_template(data["message"])
        if problem:
            raise RuleError(source, _nearest_line(lines, "/message"), f"message: {problem}", data["id"])

    for key, targets, what in (
        ("severity_by_purpose", PURPOSE_TARGETS, "a purpose"),
        ("severity_by_context", CONTEXT_TARGETS, "a file context"),
    ):
        if data.get(key) and data["target"] not in targets:
            raise RuleError(
                source,
                _nearest_line(lines, f"/{key}"),
                f"{key} needs a subject with {what} ({', '.join(targets)}), not {data['target']!r}",
                data["id"],
            )
    remediation = data.get("remediation")
    return Rule(
        id=data["id"],
        title=data["title"],
        category=data["category"],
        severity=severities.get(data["id"], data["severity"]),
        scope=tuple(data["scope"]),
        target=data["target"],
        match=schemas.get("match"),
        violation=schemas.get("violation"),
        require=schemas.get("require"),
        params=params,
        requires=tuple(data.get("requires") or ()),
        message=data["message"],
        points_at=data.get("points_at"),
        evidence=tuple(data.get("evidence") or ()),
        remediation=remediation,
        docs=data["docs"],
        source=source,
        telemetry_signals=tuple(
            sorted({name for key in ("match", "violation", "require") for name in _required_telemetry(data.get(key))})
        ),
        opt_in=bool(data.get("opt_in")),
        severity_by_purpose=dict(data.get("severity_by_purpose") or {}),
        severity_by_context=dict(data.get("severity_by_context") or {}),
        timed=schema_patterns(schemas.get("match"), schemas.get("violation"), schemas.get("require")),
    )


def schema_patterns(match: Any, violation: Any, require: Any) -> dict[str, tuple[str, ...]]:
    """The regular expressions of each schema of a rule that holds some."""
    found = {
        key: tuple(timed_patterns(schema))
        for key, schema in (("match", match), ("violation", violation), ("require", require))
    }
    return {key: patterns for key, patterns in found.items() if patterns}


def _required_telemetry(schema: Any) -> Iterable[str]:
    """Names listed as required under ``telemetry`` anywhere in a rule schema."""
    if isinstance(schema, dict):
        telemetry = (schema.get("properties") or {}).get("telemetry")
        if isinstance(telemetry, dict):
            yield from telemetry.get("required") or []
        for value in schema.values():
            yield from _required_telemetry(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _required_telemetry(value)


def _nearest_line(lines: Mapping[str, int], pointer: str) -> int:
    while pointer:
        if pointer in lines:
            return lines[pointer]
        pointer = pointer.rpartition("/")[0]
    return lines.get("", 1)


def _param_problem(value: Any, default: Any) -> str | None:
    """Why a configured param value cannot replace ``default``, or None. A
    param is spliced into a JSON Schema (``maximum: {$param: x}``): a value
    of another type would make the rule's schema itself invalid."""
    if isinstance(default, bool) or default is None:
        ok = default is None or isinstance(value, bool)
        wanted = "true or false"
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
        wanted = "a finite number"
    else:
        ok = isinstance(value, type(default))
        wanted = {str: "text", list: "a list", dict: "a mapping"}.get(type(default), "like its default")
    return None if ok else f"must be {wanted} (default {excerpt(default)}), not {excerpt(value)}"


def _splice_params(schema: Any, params: Mapping[str, Any]) -> Any:
    """Replace every {"$param": name} in a schema by that param's value."""
    if isinstance(schema, dict):
        if set(schema) == {"$param"}:
            return params[schema["$param"]]
        return {k: _splice_params(v, params) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_splice_params(v, params) for v in schema]
    return schema


def fact_path_known(path: str, facts: Mapping[str, Any]) -> bool:
    """Whether a dotted fact path (evidence, points_at) exists in the fact schema."""
    node: Any = facts
    for part in path.split("."):
        ref = node.get("$ref") if isinstance(node, Mapping) else None
        if isinstance(ref, str):
            node = fact_schema()["$defs"].get(ref.rsplit("/", 1)[1], {})
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping):
            return isinstance(node, Mapping) and node.get("additionalProperties", True) is not False
        if part not in props:
            return False
        node = props[part]
    return True


def unknown_facts(schema: Any, facts: Mapping[str, Any], path: str = "") -> Iterable[str]:
    """Fact paths a rule schema names that the fact schema does not define."""
    if not isinstance(schema, dict):
        return
    ref = facts.get("$ref") if isinstance(facts, Mapping) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        facts = fact_schema()["$defs"].get(ref.rsplit("/", 1)[1], {})
    props = facts.get("properties") if isinstance(facts, Mapping) else None
    open_object = not isinstance(props, Mapping) or facts.get("additionalProperties", False) is not False
    for name, sub in (schema.get("properties") or {}).items():
        if not open_object and name not in props:
            yield f"{path}{name}"
            continue
        child = props.get(name, {}) if isinstance(props, Mapping) else {}
        yield from unknown_facts(sub, child, f"{path}{name}.")
    for name in schema.get("required") or []:
        if not open_object and name not in props:
            yield f"{path}{name}"
    if isinstance(schema.get("items"), dict):
        yield from unknown_facts(schema["items"], facts.get("items", {}), f"{path}[].")
    if isinstance(schema.get("contains"), dict):
        yield from unknown_facts(schema["contains"], facts.get("items", {}), f"{path}[].")
    for key in _COMBINATORS:
        for sub in schema.get(key) or []:
            yield from unknown_facts(sub, facts, path)
    for key in _SINGLE:
        if isinstance(schema.get(key), dict):
            yield from unknown_facts(schema[key], facts, path)
