"""The reporting period (a calendar month) and GPU-hours over it (pure).

A snapshot is one moment; GPU-hours need time. They are integrated from the
runs recorded in the period: each run's counts hold until the next run, the
first run's also from the start of the period, the last run's until the end
of the period or the report's moment, whichever is first. With one run that
is its counts times the hours so far, and the report says so (``basis``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import msgspec

from gpuaudit.report.history import COUNTS, RunSummary

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
TREND_PERIODS = 12


class Period(msgspec.Struct, frozen=True):
    name: str
    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def month(name: str) -> Period:
    """``'2026-11'`` -> November 2026, in UTC."""
    match = _MONTH.match(name.strip())
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(f"{name!r} is not a month like 2026-11")
    year, number = int(match.group(1)), int(match.group(2))
    start = datetime(year, number, 1, tzinfo=timezone.utc)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=timezone.utc)
    return Period(f"{year:04d}-{number:02d}", start, end)


def month_of(moment: datetime) -> Period:
    moment = moment.astimezone(timezone.utc)
    return month(f"{moment.year:04d}-{moment.month:02d}")


def _values(run: RunSummary) -> dict[str, float | None]:
    values: dict[str, float | None] = {key: run.gpus.get(key) for key in COUNTS}
    values["pending_gpus"] = run.pending_gpus
    values["idle_cost"] = run.idle_cost_per_hour
    values["allocated_cost"] = run.allocated_cost_per_hour
    return values


def _integrate_raw(runs: Sequence[RunSummary], period: Period, now: datetime) -> tuple[list[RunSummary], float, dict]:
    """(the runs in the period, hours covered, unrounded GPU-hour and cost sums)."""
    inside = sorted((r for r in runs if period.contains(r.collected_at)), key=lambda r: r.collected_at)
    until = min(period.end, max(now, *(r.collected_at for r in inside))) if inside else period.end
    hours = max((until - period.start).total_seconds() / 3600, 0.0)
    keys = [*COUNTS, "pending_gpus", "idle_cost", "allocated_cost"]
    totals: dict[str, float | None] = dict.fromkeys(keys, 0.0 if inside else None)
    for index, run in enumerate(inside):
        begin = period.start if index == 0 else run.collected_at
        finish = inside[index + 1].collected_at if index + 1 < len(inside) else until
        span = max((finish - begin).total_seconds() / 3600, 0.0)
        for key, value in _values(run).items():
            if value is None or totals[key] is None:
                totals[key] = None  # one unknown span makes the sum unknown
            else:
                totals[key] += value * span
    return inside, hours, totals


def significant(value: float | None, digits: int = 3) -> float | int | None:
    """Round to ``digits`` significant figures, as an integer when whole:
    a rate held over hours is an estimate, and its figure says so."""
    if value is None:
        return None
    if value == 0:
        return 0
    rounded = round(value, digits - 1 - math.floor(math.log10(abs(value))))
    return int(rounded) if float(rounded).is_integer() else rounded


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def integrate(runs: Sequence[RunSummary], period: Period, now: datetime) -> dict[str, Any]:
    """GPU-hours (and cost) over ``period`` up to ``now``, from the runs in it.

    Several runs: each run's counts hold until the next; whole GPU-hours,
    whole currency units. One run: the rate now times the hours so far, an
    estimate, rounded to three significant figures."""
    inside, hours, totals = _integrate_raw(runs, period, now)
    if not inside:
        return {
            "hours": round(hours),
            "runs": 0,
            "method": "none",
            "basis": "no run recorded in this period",
            "sampling": None,
            **totals,
        }
    if len(inside) == 1:
        return {
            "hours": round(hours),
            "runs": 1,
            "method": "rate_now",
            "basis": f"one snapshot: the rate now × {hours:,.0f} h of the period so far (an estimate, "
            "not a measurement over the period)",
            "sampling": {
                "first": _iso(inside[0].collected_at),
                "last": _iso(inside[0].collected_at),
                "every_hours": None,
            },
            **{k: significant(v) for k, v in totals.items()},
        }
    gaps = sorted((b.collected_at - a.collected_at).total_seconds() / 3600 for a, b in itertools.pairwise(inside))
    every = gaps[len(gaps) // 2]
    return {
        "hours": round(hours),
        "runs": len(inside),
        "method": "integrated",
        "basis": f"{len(inside)} runs recorded from {_iso(inside[0].collected_at)} to "
        f"{_iso(inside[-1].collected_at)}, about every {_duration(every)} (median); each run's counts "
        "held until the next",
        "sampling": {
            "first": _iso(inside[0].collected_at),
            "last": _iso(inside[-1].collected_at),
            "every_hours": round(every, 1),
        },
        **{k: None if v is None else round(v) for k, v in totals.items()},
    }


def _duration(hours: float) -> str:
    if hours >= 48:
        return f"{hours / 24:.0f} days"
    if hours >= 1:
        return f"{hours:.0f} h"
    return f"{hours * 60:.0f} min"


def trend(runs: Iterable[RunSummary], now: datetime, limit: int = TREND_PERIODS) -> list[dict]:
    """Time-weighted mean counts per month, oldest first (the last ``limit``)."""
    by_month: dict[str, list[RunSummary]] = {}
    for run in runs:
        by_month.setdefault(month_of(run.collected_at).name, []).append(run)
    rows = []
    for name in sorted(by_month)[-limit:]:
        period = month(name)
        inside, span, totals = _integrate_raw(by_month[name], period, now)

        def mean(key: str, totals: Mapping[str, Any] = totals, span: float = span) -> float | None:
            value = totals.get(key)
            return None if value is None or not span else round(value / span, 2)

        rows.append(
            {
                "period": name,
                "runs": len(inside),
                **{key: mean(key) for key in COUNTS},
                "pending_gpus": mean("pending_gpus"),
                "idle_cost": None
                if totals["idle_cost"] is None
                else (significant(totals["idle_cost"]) if len(inside) == 1 else round(totals["idle_cost"])),
            }
        )
    return rows


FORECAST_MIN_PERIODS = 3
FORECAST_KEYS = ("allocated", "active", "idle_total")


def _next_month(name: str) -> str:
    year, number = (int(x) for x in name.split("-"))
    return f"{year + number // 12:04d}-{number % 12 + 1:02d}"


def forecast(rows: Sequence[Mapping[str, Any]], minimum: int = FORECAST_MIN_PERIODS) -> dict[str, Any]:
    """Next month's mean GPUs, from the trend's monthly means: a least-squares
    line through the last months (allocated, active, and idle = idle +
    idle resident), never below zero. Fewer than ``minimum`` months with
    values give no forecast: a line through two points is not a trend."""
    series: dict[str, list[tuple[int, float]]] = {key: [] for key in FORECAST_KEYS}
    for index, row in enumerate(rows):
        values = {**row, "idle_total": None}
        if row.get("idle") is not None and row.get("resident_idle") is not None:
            values["idle_total"] = row["idle"] + row["resident_idle"]
        for key in FORECAST_KEYS:
            if isinstance(values.get(key), (int, float)):
                series[key].append((index, float(values[key])))
    months = min(len(points) for points in series.values())
    if not rows or months < minimum:
        return {
            "period": _next_month(rows[-1]["period"]) if rows else None,
            "months": months,
            "basis": f"no forecast: {months} month(s) with runs, at least {minimum} needed",
            **dict.fromkeys(FORECAST_KEYS),
        }
    ahead = len(rows)
    out: dict[str, Any] = {}
    for key, points in series.items():
        n = len(points)
        mean_x = sum(x for x, _ in points) / n
        mean_y = sum(y for _, y in points) / n
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
        out[key] = round(max(mean_y + slope * (ahead - mean_x), 0.0), 1)
    return {
        "period": _next_month(rows[-1]["period"]),
        "months": months,
        "basis": f"a least-squares line through the mean GPUs of the last {months} months",
        **out,
    }
