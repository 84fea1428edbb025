"""Durations as people write them on a command line: 500ms, 30s, 5m, 12h, 7d, 2w."""

from __future__ import annotations

import re

# (A pattern text, compiled on first use by re's cache: most runs are given no duration.)
_DURATION = r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*"
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str | float) -> float:
    """Seconds from ``90``, ``1.5``, ``500ms``, ``30s``, ``5m``, ``2h``, ``7d``, ``2w``."""
    if isinstance(text, (int, float)):
        return float(text)
    found = re.fullmatch(_DURATION, text)
    if not found:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 30s, 5m, 12h, 7d)")
    return float(found.group(1)) * _SECONDS[found.group(2)]


def whole_seconds(text: str) -> int:
    """A positive duration (a window, a step, an interval) in whole seconds;
    a ValueError saying why ``text`` is not one."""
    seconds = round(parse_duration(text))
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds
