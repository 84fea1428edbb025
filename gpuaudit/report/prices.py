"""Price per GPU-hour, per GPU model: config ``report.gpu_hour_price`` (a number,
or ``{default: 2.5, H100-80GB: 4.0}`` keyed by catalogue model names) with
``--gpu-hour-price`` values on top (``2.5`` or ``H100-80GB=4.0``, repeatable).
No price at all means no cost figure: a number leadership reads must not be
made up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec


class PriceError(ValueError):
    pass


class Prices(msgspec.Struct, frozen=True):
    default: float | None = None
    per_model: Mapping[str, float] = msgspec.field(default_factory=dict)

    def of(self, model: str) -> float | None:
        return self.per_model.get(model, self.default)

    @property
    def known(self) -> bool:
        return self.default is not None or bool(self.per_model)

    def as_dict(self) -> dict[str, Any]:
        return {"default": self.default, "per_model": dict(sorted(self.per_model.items()))}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise PriceError(f"{where}: {value!r} is not a price")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PriceError(f"{where}: {value!r} is not a price") from None
    if not number >= 0 or number == float("inf"):
        raise PriceError(f"{where}: {value!r} is not a price (a number >= 0)")
    return number


def parse_prices(configured: Any, overrides: Iterable[str] = ()) -> Prices:
    """Prices from config (number or mapping) and command-line values."""
    default: float | None = None
    per_model: dict[str, float] = {}
    if isinstance(configured, Mapping):
        for key, value in configured.items():
            where = f"report.gpu_hour_price.{key}"
            if key == "default":
                default = _number(value, where)
            else:
                per_model[str(key)] = _number(value, where)
    elif configured is not None:
        default = _number(configured, "report.gpu_hour_price")
    for text in overrides:
        model, sep, value = text.partition("=")
        if sep:
            if not model.strip():
                raise PriceError(f"--gpu-hour-price {text!r}: name a GPU model before '='")
            per_model[model.strip()] = _number(value, f"--gpu-hour-price {text}")
        else:
            default = _number(text, "--gpu-hour-price")
    return Prices(default=default, per_model=per_model)
