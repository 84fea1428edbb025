"""One mapping laid over another, as Helm merges values files and as
`.gpuaudit.yaml` overrides the bundled PromQL."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_override(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: mappings merge recursively, anything else
    replaces, and ``None`` removes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_override(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
