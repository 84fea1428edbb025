"""Formatters: each turns an AuditResult into text; none of them prints."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

# name -> module with `render(result, **context) -> str`
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
