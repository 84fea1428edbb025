"""Formatters: each turns an AuditResult into text; none of them prints."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

# name -> module with `render(result, **context) -> str` (and, where it names
# files relative to their repository, ``WANTS_SOURCE_ROOT = True``: it is
# given ``source_root``)
FORMATS = {
    "text": "gpuaudit.output.text",
    "json": "gpuaudit.output.json_format",
    "sarif": "gpuaudit.output.sarif",
    "junit": "gpuaudit.output.junit",
    "github": "gpuaudit.output.github",
    "gitlab": "gpuaudit.output.gitlab",
    "policyreport": "gpuaudit.output.policyreport",
    "openmetrics": "gpuaudit.output.openmetrics",
}


def formatter(name: str) -> Callable[..., str]:
    module: Any = import_module(FORMATS[name])
    return module.render


def wants_source_root(name: str) -> bool:
    """Whether the format names files relative to their repository, and so
    takes ``source_root``."""
    return bool(getattr(import_module(FORMATS[name]), "WANTS_SOURCE_ROOT", False))
