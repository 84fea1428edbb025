"""Remediation templates, one folder per remediation id: remediations/<id>/
holds patch.yaml.j2 (the default), <variant>.yaml.j2 for shapes that differ,
and params.yaml (the id's parameters, when it has any). Rendered with Jinja2
(imported here, lazily: `gpuaudit check` never loads this module).

Templates only substitute. Every ``{{ value }}`` is written as JSON (valid
YAML), or as a plain scalar when YAML reads it back unchanged anywhere (a
name, a pointer), so a name with quotes, colons or newlines cannot change the
structure of the patch; the only statement allowed is ``{% for %}`` over a list the
planner computed. ``check_template`` enforces both, and the tests run it over
every built-in template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import msgspec
import yaml

from gpuaudit.bundled import remediations_dir
from gpuaudit.remediate.edits import Edit, EditError, parse_edits

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
TEXT_KEYS = ("summary", "effect", "risk", "rollback")


class TemplateError(ValueError):
    pass


class Rendered(msgspec.Struct, frozen=True):
    """A rendered template: texts for REVIEW.md, edits to the finding's object,
    new objects for the overlay, and steps a patch cannot take."""

    summary: str
    effect: str
    risk: str
    rollback: str
    edits: list[Edit]
    resources: list[dict[str, Any]] = msgspec.field(default_factory=list)
    steps: list[str] = msgspec.field(default_factory=list)


DEFAULT_TEMPLATE = "patch"  # remediations/<id>/patch.yaml.j2, hence no variant is named "patch"
PARAMS_FILE = "params.yaml"


def template_name(remediation: str, variant: str | None = None) -> str:
    """The template's path under remediations/, as Jinja2 names it ("/" separated)."""
    valid = variant is None or (_ID.match(variant) and variant != DEFAULT_TEMPLATE)
    if not _ID.match(remediation) or not valid:
        raise TemplateError(f"invalid remediation id {remediation!r} / variant {variant!r}")
    return f"{remediation}/{variant or DEFAULT_TEMPLATE}.yaml.j2"


def remediation_ids() -> list[str]:
    """Every remediation id with a folder under remediations/."""
    return sorted(p.name for p in remediations_dir().iterdir() if p.is_dir() and _ID.match(p.name))


@cache
def param_defaults() -> Mapping[str, Mapping[str, Any]]:
    """id -> {param: default}, from each remediations/<id>/params.yaml ({param:
    {default, description}}); an id without that file has no params."""
    defaults: dict[str, Mapping[str, Any]] = {}
    for rid in remediation_ids():
        path = remediations_dir() / rid / PARAMS_FILE
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        defaults[rid] = {k: v["default"] for k, v in (spec or {}).items()}
    return defaults


@cache
def _environment(directory: str) -> Any:
    from jinja2 import FileSystemLoader, StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(
        loader=FileSystemLoader(directory),
        undefined=StrictUndefined,
        finalize=_as_json,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


# Strings that YAML reads back unchanged as a plain scalar in any position
# (block, flow, key): names, pointers, resource names. Anything else is JSON.
_PLAIN = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/-]*$")


def _as_json(value: Any) -> str:
    if isinstance(value, str) and _PLAIN.match(value):
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value, ensure_ascii=True)


def render(remediation: str, variant: str | None, params: Mapping[str, Any]) -> Rendered:
    name = template_name(remediation, variant)
    directory = remediations_dir()
    env = _environment(str(directory))
    problem = check_template((directory / name).read_text(encoding="utf-8"))
    if problem:
        raise TemplateError(f"{name}: {problem}")
    from jinja2 import TemplateError as JinjaError

    try:
        text = env.get_template(name).render(**params)
    except JinjaError as exc:
        raise TemplateError(f"{name}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{name}: rendered text is not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{name}: must render a mapping")
    missing = [k for k in TEXT_KEYS if not isinstance(data.get(k), str)]
    if missing:
        raise TemplateError(f"{name}: needs text for {', '.join(missing)}")
    unknown = set(data) - {*TEXT_KEYS, "edits", "resources", "steps"}
    if unknown:
        raise TemplateError(f"{name}: unknown keys {sorted(unknown)}")
    try:
        edits = parse_edits(data.get("edits"), name)
    except EditError as exc:
        raise TemplateError(str(exc)) from None
    new_objects = data.get("resources") or []
    if not isinstance(new_objects, list) or not all(
        isinstance(o, dict) and o.get("kind") and (o.get("metadata") or {}).get("name") for o in new_objects
    ):
        raise TemplateError(f"{name}: resources must be Kubernetes objects with a name")
    steps = data.get("steps") or []
    return Rendered(
        summary=" ".join(data["summary"].split()),
        effect=data["effect"].strip(),
        risk=data["risk"].strip(),
        rollback=data["rollback"].strip(),
        edits=edits,
        resources=new_objects,
        steps=[str(s).strip() for s in steps],
    )


def check_template(source: str) -> str | None:
    """Why ``source`` is more than substitution, or None when it is not."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    allowed = (
        nodes.Template,
        nodes.Output,
        nodes.TemplateData,
        nodes.Name,
        nodes.Getattr,
        nodes.Getitem,
        nodes.Const,
        nodes.For,
    )
    try:
        tree = SandboxedEnvironment().parse(source)
    except TemplateSyntaxError as exc:
        return f"line {exc.lineno}: {exc.message}"
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, allowed):
            return f"line {node.lineno}: {type(node).__name__} is logic, not substitution"
        if isinstance(node, nodes.For) and (node.else_ or node.test or node.recursive):
            return f"line {node.lineno}: for-loops may only iterate"
    return None
