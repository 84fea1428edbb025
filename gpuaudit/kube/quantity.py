"""Kubernetes resource quantities ("500m", "16Gi", "2") as numbers."""

from __future__ import annotations

import math
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
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


# Kubernetes keeps quantities as int64 base units with nano precision: larger
# values do not exist there, and finer ones round up to 1n. Inside these bounds
# no sum, product or ratio the facts compute can overflow to infinity.
MAX_QUANTITY = float(2**63)
MIN_QUANTITY = 1e-9


class QuantityError(ValueError):
    """A value where a Kubernetes quantity belongs that is not one."""


def parse_quantity(value: object) -> float:
    """Parse a quantity; raise QuantityError for anything else (placeholders,
    null, words), so callers can report the field instead of guessing zero.

    Every field read as a quantity (resources, replicas, sizes) is a count or
    an amount: negative values and values beyond Kubernetes' range ("1e400",
    "9Ei") are errors too, never a sign flip or an infinity downstream.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            raise QuantityError(f"{_shown(value)} is out of range") from None
        if not math.isfinite(number):
            raise QuantityError(f"{value!r} is not a finite quantity")
    elif value is None:
        raise QuantityError("null is not a quantity")
    elif not isinstance(value, str):
        raise QuantityError(f"{type(value).__name__} is not a quantity")
    else:
        match = _QUANTITY.match(value.strip())
        if not match:
            raise QuantityError(f"{value!r} is not a quantity")
        number = float(match.group(1)) * _SUFFIXES[match.group(2)]
        if not math.isfinite(number):
            raise QuantityError(f"{_shown(value)} is out of range")
    if number < 0:
        raise QuantityError(f"{_shown(value)} is negative")
    if number > MAX_QUANTITY:
        raise QuantityError(f"{_shown(value)} is out of range")
    if 0 < number < MIN_QUANTITY:  # Kubernetes rounds finer values up to 1n
        return MIN_QUANTITY
    return number or 0.0  # never -0.0


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
