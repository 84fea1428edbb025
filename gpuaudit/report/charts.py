"""Chart geometry for the report's inline SVG (pure).

Only numbers and our own labels are computed here; the template draws the
shapes and escapes every label, so cluster-supplied text never reaches the
SVG unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The GPU states in the order they are stacked, with their CSS class.
SEGMENTS = (
    ("active", "Actively computing"),
    ("resident_idle", "Idle, model resident (blocking)"),
    ("idle", "Allocated, idle"),
    ("no_data", "Allocated, no data"),
    ("free", "Free"),
)


def stacked_bar(values: Mapping[str, Any], width: float = 1000.0) -> list[dict[str, Any]]:
    """One bar split into the GPU states, x and width in 0..``width``."""
    parts = [(key, label, float(values.get(key) or 0.0)) for key, label in SEGMENTS]
    total = sum(v for _, _, v in parts)
    out, x = [], 0.0
    for key, label, value in parts:
        w = width * value / total if total else 0.0
        out.append({"key": key, "label": label, "value": value, "x": round(x, 2), "w": round(w, 2)})
        x += w
    return out


def group_bars(rows: Sequence[Mapping[str, Any]], width: float = 640.0, row_height: float = 26.0) -> dict[str, Any]:
    """Horizontal stacked bars, one per group, on a common scale (GPUs)."""
    scale_max = max((sum(float(r.get(k) or 0.0) for k, _ in SEGMENTS) for r in rows), default=0.0)
    bars = []
    for index, row in enumerate(rows):
        x = 0.0
        segments = []
        for key, label in SEGMENTS:
            value = float(row.get(key) or 0.0)
            w = width * value / scale_max if scale_max else 0.0
            if w > 0:
                segments.append({"key": key, "label": label, "value": value, "x": round(x, 2), "w": round(w, 2)})
            x += w
        bars.append({"label": str(row.get("key")), "y": index * row_height, "segments": segments})
    return {
        "bars": bars,
        "width": width,
        "height": max(len(rows), 1) * row_height,
        "row_height": row_height,
        "max": scale_max,
    }


def line_chart(
    rows: Sequence[Mapping[str, Any]],
    series: Sequence[tuple[str, str]],
    width: float = 640.0,
    height: float = 200.0,
) -> dict[str, Any]:
    """Polylines for ``series`` ((key, label)) over ``rows`` (one per period)."""
    values = [float(r.get(k) or 0.0) for r in rows for k, _ in series if r.get(k) is not None]
    top = max(values, default=0.0) or 1.0
    step = width / max(len(rows) - 1, 1)
    lines = []
    for key, label in series:
        points = []
        for index, row in enumerate(rows):
            value = row.get(key)
            if value is None:
                continue
            x = index * step if len(rows) > 1 else width / 2
            y = height - height * float(value) / top
            points.append({"x": round(x, 1), "y": round(y, 1), "value": value})
        lines.append(
            {
                "key": key,
                "label": label,
                "points": points,
                "path": " ".join(f"{p['x']},{p['y']}" for p in points),
            }
        )
    ticks = [
        {"x": round(i * step if len(rows) > 1 else width / 2, 1), "label": str(r.get("period"))}
        for i, r in enumerate(rows)
    ]
    return {"lines": lines, "ticks": ticks, "width": width, "height": height, "max": top}


def range_bars(scenarios: Sequence[Mapping[str, Any]], reference: float, width: float = 640.0) -> dict[str, Any]:
    """Low..high bars for the what-if scenarios, with a marker at ``reference``
    (pending demand) on the same scale."""
    top = max([float(s["freed"]["high"] or 0.0) for s in scenarios] + [reference, 1.0])
    bars = []
    for index, s in enumerate(scenarios):
        low, high = float(s["freed"]["low"] or 0.0), float(s["freed"]["high"] or 0.0)
        bars.append(
            {
                "label": s["title"],
                "y": index * 34,
                "x": round(width * low / top, 1),
                "w": round(max(width * (high - low) / top, 2.0), 1),
                "low": low,
                "high": high,
            }
        )
    return {
        "bars": bars,
        "width": width,
        "height": max(len(scenarios), 1) * 34,
        "reference_x": round(width * reference / top, 1),
        "reference": reference,
        "max": top,
    }
