"""Kubernetes resource quantities ("500m", "16Gi", "2") as numbers."""

from __future__ import annotations

import re

_SUFFIXES = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$"
)


class QuantityError(ValueError):
    """A value where a Kubernetes quantity belongs that is not one."""


def parse_quantity(value: object) -> float:
    """Parse a quantity; raise QuantityError for anything else (placeholders,
    null, words), so callers can report the field instead of guessing zero."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a finite quantity")
        return float(value)
    if value is None:
        raise QuantityError("null is not a quantity")
    if not isinstance(value, str):
        raise QuantityError(f"{type(value).__name__} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]
