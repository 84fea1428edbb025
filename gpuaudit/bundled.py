"""Where the product's own data lives: rules (policies/) and patch templates
(remediations/) sit at the top of a source checkout and inside the installed
package; the rest ships in gpuaudit/data."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path


def _top_level(name: str) -> Path:
    packaged = Path(str(resources.files("gpuaudit"))) / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[1] / name


@cache
def policies_dir() -> Path:
    """policies/ inside the installed package, or at the top of a source checkout."""
    return _top_level("policies")


@cache
def remediations_dir() -> Path:
    """remediations/ inside the installed package, or at the top of a checkout."""
    return _top_level("remediations")


def data_text(name: str) -> str:
    """A file of gpuaudit/data."""
    return resources.files("gpuaudit").joinpath("data", name).read_text()
