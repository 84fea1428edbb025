"""JSON text as gpuaudit writes it for people and tools: indented by two."""

from __future__ import annotations

import json
from typing import Any

import msgspec


def indented(value: Any, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    """``json.dumps(value, indent=2, ...)``, byte for byte, in a fraction of
    the time (bench/RESULTS.md, "Measurements behind design choices").

    json's C encoder makes only compact text: given an indent, json.dumps
    runs its pure-Python one. So the text is made compact, in C, and
    ``msgspec.json.format`` indents it, copying every string and number as
    it is (the escapes and float spellings stay json's). msgspec refuses the
    escape of a lone surrogate (JSON allows it; hostile input carries it):
    such text is indented by json.dumps itself."""
    compact = json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan, separators=(",", ":"))
    try:
        text = msgspec.json.format(compact.encode("utf-8", "surrogatepass"), indent=2)
    except msgspec.DecodeError:
        return json.dumps(value, indent=2, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    return text.decode("utf-8", "surrogatepass")
