"""`.gpuaudit.yaml`: found upward from the working directory, or --config.

Validated against data/config.schema.json; keys the schema does not know are
warned about (a typo should not silently do nothing), not rejected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit.files import FileReadError, read_text
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.model import Exemption, InputError
from gpuaudit.schemas import SchemaError, load_schema, validate

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
    warnings: tuple[InputError, ...] = ()


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
    try:
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
    try:
        validate(data, "config.schema.json")
    except SchemaError as exc:
        line = lines.get("/" + exc.path.replace(".", "/"), 1)
        raise ConfigError(f"{path}:{line}: {exc} (at {exc.path or 'top level'})") from None
    problems = _telemetry_problems(data.get("telemetry") or {})
    if problems:
        key, problem = problems[0]
        line = lines.get("/" + key.replace(".", "/"), 1)
        raise ConfigError(f"{path}:{line}: {problem} (at {key})")
    known = set(load_schema("config.schema.json")["properties"])
    warnings = tuple(
        InputError(
            str(path), lines.get(f"/{key}"), f"unknown config key {key!r} is ignored", "warning"
        )
        for key in data
        if key not in known
    )
    base = path.parent
    return Config(
        path=path,
        rules=tuple(data.get("rules") or ()),
        exclude_rules=tuple(data.get("exclude_rules") or ()),
        fail_on=data.get("fail_on"),
        policies=tuple(base / p for p in data.get("policies") or ()),
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
        warnings=warnings,
    )


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
                problems.append((key, f"{value!r} is not a valid regular expression: {exc}"))
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
        raise ConfigError(f"{path}:{line or 1}: expires {value!r} is not a date: {exc}") from None
