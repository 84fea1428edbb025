"""Where the product's own data lives: rules (policies/) and patch templates
(remediations/) sit at the top of a source checkout and inside the installed
package; the rest ships in gpuaudit/data.

The package is always a folder on disk (a wheel or a checkout), so these are
plain paths beside this file: ``importlib.resources`` would give the same
ones, and importing it costs a pre-commit run more than reading the files.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from gpuaudit.kube.yaml_lines import load_yaml_with_lines

PACKAGE = Path(__file__).resolve().parent


def _top_level(name: str) -> Path:
    packaged = PACKAGE / name
    if packaged.is_dir():
        return packaged
    return PACKAGE.parent / name


@cache
def policies_dir() -> Path:
    """policies/ inside the installed package, or at the top of a source checkout."""
    return _top_level("policies")


@cache
def remediations_dir() -> Path:
    """remediations/ inside the installed package, or at the top of a checkout."""
    return _top_level("remediations")


def data_text(name: str) -> str:
    """A file of gpuaudit/data, as text (UTF-8)."""
    return (PACKAGE / "data" / name).read_text(encoding="utf-8")


def data_yaml(name: str) -> Any:
    """A YAML file of gpuaudit/data, as plain values: read as rule and config
    files are (kube/yaml_lines.py), which is faster than PyYAML's constructor."""
    return load_yaml_with_lines(data_text(name))[0]
