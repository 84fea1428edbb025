"""Where the product's own data lives: rules (policies/) and patch templates
(remediations/) sit at the top of a source checkout and inside the installed
package; the rest ships in gpuaudit/data.

The package is always a folder on disk (a wheel or a checkout), so these are
plain paths beside this file: ``importlib.resources`` would give the same
ones, and importing it costs a pre-commit run more than reading the files.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit.files import content_hash
from gpuaudit.kube.yaml_lines import load_yaml_with_lines

PACKAGE = Path(__file__).resolve().parent
# The YAML files of gpuaudit/data, parsed ahead: parsing them took 7% of a
# pre-commit run. Written by scripts/gen_parsed_data.py; tests/test_bundled_data.py
# fails when it is stale, and a file whose hash differs is parsed instead.
PARSED = "parsed.json"


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


class _Parsed(msgspec.Struct):
    """One file's entry in PARSED: its hash, and its values still as JSON."""

    blake2b: str
    value: msgspec.Raw


@cache
def _parsed(folder: Path) -> dict[str, _Parsed]:
    """PARSED's entries, read once per run (a check asks for four files);
    empty when it is absent or damaged, and every file is then parsed."""
    try:
        return msgspec.json.decode((folder / PARSED).read_bytes(), type=dict[str, _Parsed])
    except (OSError, msgspec.DecodeError):
        return {}


def data_yaml(name: str) -> Any:
    """A YAML file of gpuaudit/data, as plain values (new ones on each call):
    from PARSED when it holds this file as it is, else read as rule and
    config files are (kube/yaml_lines.py)."""
    folder = PACKAGE / "data"
    raw = (folder / name).read_bytes()
    entry = _parsed(folder).get(name)
    if entry is not None and entry.blake2b == content_hash(raw):
        return msgspec.json.decode(entry.value)
    return load_yaml_with_lines(raw.decode("utf-8"))[0]


def parsed_data() -> str:
    """What PARSED holds: each YAML file of gpuaudit/data with its hash and
    its values, as JSON (JSON holds them exactly: tests/test_bundled_data.py)."""
    parsed = {}
    for path in sorted((PACKAGE / "data").glob("*.yaml")):
        raw = path.read_bytes()
        parsed[path.name] = {"blake2b": content_hash(raw), "value": load_yaml_with_lines(raw.decode("utf-8"))[0]}
    return json.dumps(parsed, indent=1, sort_keys=True) + "\n"
