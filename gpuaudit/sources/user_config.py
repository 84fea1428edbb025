"""`.gpuaudit.yaml`: found upward from the working directory, or --config.

Validated against data/config.schema.json. A key the schema does not know, at
any level it defines, is an error (exit 2) that names the nearest known key:
a typo (`polices:`) must not silently switch a section off.

A repository's config is untrusted (a pull request can change it): the file
is never read through a link that leads outside its repository
(``files.command_line_roots``: the repository when the config lies in it,
else the config's own folder), and each ``policies:`` entry must stay inside
those roots too: an absolute path, a ``..`` out of the repository or a link
to a folder outside it is refused (``Config.refused_policies``, reported by
pipelines/policy.py), as only the command line (``--policies``) may name a
folder outside. No error quotes more than a short excerpt of the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit.files import (
    FileReadError,
    bounded_quotes,
    command_line_roots,
    confined,
    confined_file,
    excerpt,
    read_text,
)
from gpuaudit.kube.pointers import join, tokens
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.model import Exemption, InputError
from gpuaudit.nearest import did_you_mean
from gpuaudit.schemas import SchemaError, load_schema, unknown_keys, validate

CONFIG_NAMES = (".gpuaudit.yaml", ".gpuaudit.yml")
# A real config is a few KiB; 4 MiB holds tens of thousands of exemptions. A
# repository's config is untrusted input (`gpuaudit check .` finds it).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class ConfigError(ValueError):
    pass


class Config(msgspec.Struct, frozen=True):
    path: Path | None = None
    rules: tuple[str, ...] = ()
    exclude_rules: tuple[str, ...] = ()
    fail_on: str | None = None
    policies: tuple[Path, ...] = ()
    params: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=dict)
    severity: Mapping[str, str] = msgspec.field(default_factory=dict)
    exemptions: tuple[Exemption, ...] = ()
    podspecs: tuple[Mapping[str, Any], ...] = ()
    site: Mapping[str, Any] = msgspec.field(default_factory=dict)
    telemetry: Mapping[str, Any] = msgspec.field(default_factory=dict)
    report: Mapping[str, Any] = msgspec.field(default_factory=dict)
    # How a repository is cut into deployable units (sources/units.py).
    repository: Mapping[str, Any] = msgspec.field(default_factory=dict)
    # `policies:` entries that lead outside the config's repository: each
    # folder as named (resolved against the config's folder) and the error
    # that says so. Not in ``policies``: never read unless the command line
    # names the folder too.
    refused_policies: tuple[tuple[Path, InputError], ...] = ()


def find_config(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        for name in CONFIG_NAMES:
            candidate = directory / name
            # Anything that is there and no folder: the reader refuses what is
            # not a regular file (a FIFO, a link to /dev/zero) rather than
            # silently skipping the config the repository meant.
            if candidate.exists() and not candidate.is_dir():
                return candidate
    return None


def load_config(explicit: Path | None = None, cwd: Path | None = None) -> Config:
    path = explicit or find_config((cwd or Path.cwd()).resolve())
    if path is None:
        return Config()
    roots = command_line_roots(path, cwd=cwd)
    try:
        confined_file(path, roots, what="config file")
        data, lines = load_yaml_with_lines(read_text(path, limit=MAX_CONFIG_BYTES, what="config file"))
    except FileReadError as exc:
        raise ConfigError(str(exc)) from None
    except YamlLimitError as exc:  # nesting or alias expansion past kube/yaml_lines' limits
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    for at, key, known in unknown_keys(data, load_schema("config.schema.json")):
        line = lines.get(join(at, key), 1)
        where = f"under {'.'.join(tokens(at))}" if at else "at the top level"
        hint = did_you_mean(key, known, cutoff=0.5) or f"; known here: {', '.join(known)}"
        raise ConfigError(f"{path}:{line}: unknown config key {excerpt(key)} {where}{hint}")
    try:
        validate(data, "config.schema.json")
    except SchemaError as exc:
        line = lines.get("/" + exc.path.replace(".", "/"), 1)
        where = exc.path if len(exc.path) <= 80 else exc.path[:79] + "\u2026"
        raise ConfigError(f"{path}:{line}: {bounded_quotes(str(exc))} (at {where or 'top level'})") from None
    problems = _telemetry_problems(data.get("telemetry") or {})
    if problems:
        key, problem = problems[0]
        line = lines.get("/" + key.replace(".", "/"), 1)
        raise ConfigError(f"{path}:{line}: {problem} (at {key})")
    policies, refused = _policy_folders(path, data.get("policies") or (), lines, roots)
    return Config(
        path=path,
        rules=tuple(data.get("rules") or ()),
        exclude_rules=tuple(data.get("exclude_rules") or ()),
        fail_on=data.get("fail_on"),
        policies=policies,
        refused_policies=refused,
        params=data.get("params") or {},
        severity=data.get("severity") or {},
        exemptions=tuple(
            Exemption(
                rule=e["rule"],
                reason=e["reason"],
                namespace=e.get("namespace", "*"),
                name=e.get("name", "*"),
                kind=e.get("kind", "*"),
                expires=_expiry(e.get("expires"), path, lines.get(f"/exemptions/{i}/expires")),
            )
            for i, e in enumerate(data.get("exemptions") or ())
        ),
        podspecs=tuple(data.get("podspecs") or ()),
        site=data.get("site") or {},
        telemetry=data.get("telemetry") or {},
        report=data.get("report") or {},
        repository=data.get("repository") or {},
    )


def _policy_folders(
    path: Path, entries: Sequence[str], lines: Mapping[str, int], roots: Sequence[Path]
) -> tuple[tuple[Path, ...], tuple[tuple[Path, InputError], ...]]:
    """The config's ``policies:`` folders (relative to the config's folder)
    that stay inside ``roots``, and those that do not, each with its error."""
    kept: list[Path] = []
    refused: list[tuple[Path, InputError]] = []
    for i, entry in enumerate(entries):
        folder = path.parent / entry
        try:
            confined(folder, roots, what="rule folder")
        except FileReadError as exc:
            message = f"policies entry {excerpt(entry)}: {exc.problem}"
            refused.append((folder, InputError(str(path), lines.get(f"/policies/{i}"), message)))
            continue
        kept.append(folder)
    return tuple(kept), tuple(refused)


def _telemetry_problems(telemetry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What the schema cannot say about `telemetry:`: its regexes must
    compile and its numbers be finite (YAML's .nan and .inf pass a schema's
    minimum and maximum)."""
    problems = []
    for name, value in (telemetry.get("params") or {}).items():
        key = f"telemetry.params.{name}"
        if str(name).endswith("_regex") and isinstance(value, str):
            try:
                re.compile(value)
            except re.error as exc:
                problems.append((key, f"{excerpt(value)} is not a valid regular expression: {exc}"))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append((key, f"{value!r} is not a finite number"))
    return problems


def _expiry(value: str | None, path: Path, line: int | None) -> date | None:
    """An exemption's `expires:` date. The schema checks its shape (YYYY-MM-DD);
    a date that does not exist (2026-13-45) is a config error too, never a
    crash and never an exemption that silently lasts forever."""
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError(f"{path}:{line or 1}: expires {excerpt(value)} is not a date: {exc}") from None
