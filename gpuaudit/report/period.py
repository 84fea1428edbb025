"""The reporting period (a calendar month) and GPU-hours over it (pure).

A snapshot is one moment; GPU-hours need time. They are integrated from the
runs recorded in the period: each run's counts hold until the next run, the
first run's also from the start of the period, the last run's until the end
of the period or the report's moment, whichever is first. With one run that
is its counts times the hours so far, and the report says so (``basis``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpuaudit.report.history import COUNTS, RunSummary

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
TREND_PERIODS = 12


@dataclass(frozen=True)
class Period:
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


def integrate(runs: Sequence[RunSummary], period: Period, now: datetime) -> dict[str, Any]:
    """GPU-hours (and cost) over ``period`` up to ``now``, from the runs in it."""
    inside = sorted((r for r in runs if period.contains(r.collected_at)), key=lambda r: r.collected_at)
    until = min(period.end, max(now, *(r.collected_at for r in inside))) if inside else period.end
    hours = max((until - period.start).total_seconds() / 3600, 0.0)
    keys = [*COUNTS, "pending_gpus", "idle_cost", "allocated_cost"]
    if not inside:
        return {
            "hours": round(hours, 1),
            "runs": 0,
            "basis": "no run recorded in this period",
            **dict.fromkeys(keys),
        }
    totals: dict[str, float | None] = dict.fromkeys(keys, 0.0)
    for index, run in enumerate(inside):
        begin = period.start if index == 0 else run.collected_at
        finish = inside[index + 1].collected_at if index + 1 < len(inside) else until
        span = max((finish - begin).total_seconds() / 3600, 0.0)
        for key, value in _values(run).items():
            if value is None or totals[key] is None:
                totals[key] = None  # one unknown span makes the sum unknown
            else:
                totals[key] += value * span
    basis = (
        f"{len(inside)} run(s) in the period; each run's counts are held until the next run"
        if len(inside) > 1
        else "one run: its counts held over the period so far"
    )
    return {
        "hours": round(hours, 1),
        "runs": len(inside),
        "basis": basis,
        **{k: None if v is None else round(v, 1) for k, v in totals.items()},
    }


def trend(runs: Iterable[RunSummary], now: datetime, limit: int = TREND_PERIODS) -> list[dict]:
    """Time-weighted mean counts per month, oldest first (the last ``limit``)."""
    by_month: dict[str, list[RunSummary]] = {}
    for run in runs:
        by_month.setdefault(month_of(run.collected_at).name, []).append(run)
    rows = []
    for name in sorted(by_month)[-limit:]:
        period = month(name)
        hours = integrate(by_month[name], period, now)
        span = hours["hours"] or 0.0

        def mean(key: str, hours: Mapping[str, Any] = hours, span: float = span) -> float | None:
            value = hours.get(key)
            return None if value is None or not span else round(value / span, 2)

        rows.append(
            {
                "period": name,
                "runs": hours["runs"],
                **{key: mean(key) for key in COUNTS},
                "pending_gpus": mean("pending_gpus"),
                "idle_cost": hours["idle_cost"],
            }
        )
    return rows
